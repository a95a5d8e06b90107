/*
 * sc_single.c - the scenarios of one process (1 to 4 of the report), each
 * subject measured in turn in the same run:
 *  1. lookups: a hit in the scope, at parent depth 1 and 8, a miss;
 *  2. get-or-create + erase of a name, rename there and back;
 *     both at 100, 10k and 100k names in the scope;
 *  3. the per-step local scope cycle (new scope, 10 variables with 4 KiB
 *     tensors, release);
 *  4. a tensor's allocation and free, 64 B to 16 MiB.
 * Names are looked up in a random order (the same sequence for everyone).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "pdshm.h"

#define DEPTH 8
#define TMP_NAMES 64    /* names cycled by get-or-create + erase */

static const int name_counts[] = {100, 10000, 100000};
static volatile uintptr_t sink;

/* What a lookup or mutation loop works on. */
struct names_ctx {
  const struct store_ops *ops;
  void *scope;
  char **names, **alt; /* alt: missing names, or rename targets */
  int n;
  uint32_t *order; /* BENCH_ORDER_LEN random indices below n */
  uint64_t pos;
};

static void do_find(void *c, uint64_t n) {
  struct names_ctx *x = c;
  for (uint64_t i = 0; i < n; i++)
    sink += (uintptr_t)x->ops->find(x->scope, x->names[x->order[x->pos++ & (BENCH_ORDER_LEN - 1)]]);
}

static void do_create_erase(void *c, uint64_t n) {
  struct names_ctx *x = c;
  for (uint64_t i = 0; i < n; i++) {
    const char *name = x->alt[x->pos++ % TMP_NAMES];
    if (x->ops->get(x->scope, name) || x->ops->erase(x->scope, name))
      bench_die("%s: get-or-create + erase of %s failed", x->ops->name, name);
  }
}

static void do_rename(void *c, uint64_t n) {
  struct names_ctx *x = c;
  for (uint64_t i = 0; i < n; i++) {
    int k = (int)x->order[x->pos++ & (BENCH_ORDER_LEN - 1)];
    if (x->ops->rename(x->scope, x->names[k], x->alt[k]) ||
        x->ops->rename(x->scope, x->alt[k], x->names[k]))
      bench_die("%s: rename of %s failed", x->ops->name, x->names[k]);
  }
}

uint32_t *bench_order(int n) {
  uint32_t *o = malloc(BENCH_ORDER_LEN * sizeof *o);
  if (!o) bench_die("out of memory");
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < BENCH_ORDER_LEN; i++) o[i] = (uint32_t)(bench_rand(&x) % (uint64_t)n);
  return o;
}

void bench_fill(const struct store_ops *ops, void *scope, char **names, int n) {
  for (int i = 0; i < n; i++)
    if (ops->get(scope, names[i])) bench_die("%s: filling %s failed", ops->name, names[i]);
}

/* One measurement on the names of x, recorded as ns per operation. */
static void names_row(const char *scenario, struct names_ctx *x, void *scope, bench_fn fn,
                      double per) {
  char param[16];
  snprintf(param, sizeof param, "%d", x->n);
  x->scope = scope;
  x->pos = 0;
  result_add(scenario, param, x->ops->name, 1e9 / bench_rate(fn, x) / per, U_NS);
}

/* Every case of items 1 and 2 on one store holding n names in its root. */
static void names_store(const struct store_ops *ops, int n, char **names, char **missing,
                        char **tmp) {
  char tag[96];
  struct bstore *st = ops->create(bench_tag(tag, sizeof tag, "names"));
  if (!st) bench_die("%s: cannot create the store", ops->name);
  void *chain[DEPTH + 1] = {ops->root(st)};
  bench_fill(ops, chain[0], names, n);
  for (int k = 1; ops->chain && k <= DEPTH; k++) chain[k] = ops->scope_new(st, chain[k - 1], NULL);
  struct names_ctx x = {.ops = ops, .names = names, .n = n, .order = bench_order(n)};
  names_row("lookup hit, in the scope", &x, chain[0], do_find, 1);
  if (ops->chain) {
    names_row("lookup hit, parent depth 1", &x, chain[1], do_find, 1);
    names_row("lookup hit, parent depth 8", &x, chain[DEPTH], do_find, 1);
  }
  x.names = missing;
  names_row("lookup miss", &x, chain[0], do_find, 1);
  x.names = names;
  x.alt = tmp;
  names_row("get-or-create + erase (a pair)", &x, chain[0], do_create_erase, 1);
  x.alt = missing;
  if (ops->rename) names_row("rename", &x, chain[0], do_rename, 2);
  for (int k = ops->chain ? DEPTH : 0; k >= 0; k--) ops->scope_free(st, chain[k]);
  ops->close(st, true);
  free(x.order);
}

void sc_names(void) {
  char **tmp = bench_names(TMP_NAMES, "tmp", "");
  for (size_t s = 0; s < sizeof name_counts / sizeof name_counts[0]; s++) {
    int n = name_counts[s];
    char **names = bench_names(n, "fc", ".w_0"), **missing = bench_names(n, "fc", ".b_9");
    for (int k = 0; bench_stores[k]; k++) {
      bench_progress("names: %d names, %s", n, bench_stores[k]->name);
      names_store(bench_stores[k], n, names, missing, tmp);
    }
    bench_names_free(names, n);
    bench_names_free(missing, n);
  }
  bench_names_free(tmp, TMP_NAMES);
}

/* ---- 3. the per-step local scope cycle ---------------------------------- */

static const char *const step_vars[10] = {"x", "h0", "h1", "h2", "h3", "y", "dy", "dh", "dx", "loss"};

static void pdshm_step(void *params, uint64_t n) {
  int64_t d = 1024; /* 4 KiB of F32 */
  for (uint64_t s = 0; s < n; s++) {
    pdshm_scope *local;
    pdshm_var *v;
    int rc = pdshm_scope_new(params, NULL, &local);
    for (int i = 0; !rc && i < 10; i++)
      if (!(rc = pdshm_var_get(local, step_vars[i], &v))) rc = pdshm_tensor_resize(v, PDSHM_F32, 1, &d);
    if (rc || (rc = pdshm_scope_release(local))) bench_die("step cycle: %s", pdshm_strerror(rc));
  }
}

#if HAVE_CXX
static void paddle_step(void *params, uint64_t n) {
  for (uint64_t s = 0; s < n; s++) {
    void *local = pp_scope_new(params);
    for (int i = 0; i < 10; i++) sink += (uintptr_t)pp_resize(pp_var(local, step_vars[i]), 4096);
    pp_scope_delete(local);
  }
}
#endif

void sc_step_cycle(void) {
  static const char scenario[] = "step cycle: new scope, 10 vars x 4 KiB, release";
  char tag[96];
  bench_progress("step cycle");
  struct bstore *st = store_pdshm.create(bench_tag(tag, sizeof tag, "step"));
  if (!st) bench_die("pdshm: cannot create the segment");
  void *params = store_pdshm.scope_new(st, NULL, "params");
  result_add(scenario, "10", "pdshm", 1e9 / bench_rate(pdshm_step, params), U_NS);
  store_pdshm.scope_free(st, params);
  store_pdshm.close(st, true);
#if HAVE_CXX
  void *pp = pp_scope_new(NULL);
  result_add(scenario, "10", "paddle", 1e9 / bench_rate(paddle_step, pp), U_NS);
  pp_scope_delete(pp);
#endif
}

/* ---- 4. tensor allocation and free -------------------------------------- */

struct alloc_ctx {
  const struct alloc_ops *ops;
  void *ctx;
  size_t size;
};

static void do_alloc_free(void *c, uint64_t n) {
  struct alloc_ctx *a = c;
  for (uint64_t i = 0; i < n; i++) {
    volatile char *p = a->ops->alloc(a->ctx, a->size);
    if (!p) bench_die("%s: allocating %zu bytes failed", a->ops->name, a->size);
    *p = 1; /* as a caller would */
    a->ops->free(a->ctx, (void *)p);
  }
}

void sc_alloc(void) {
  static const size_t sizes[] = {64, 4096, 64u << 10, 1u << 20, 16u << 20};
  static const char *const labels[] = {"64 B", "4 KiB", "64 KiB", "1 MiB", "16 MiB"};
  for (int k = 0; bench_allocs[k]; k++) {
    char tag[96];
    bench_progress("tensor alloc + free: %s", bench_allocs[k]->name);
    struct alloc_ctx a = {.ops = bench_allocs[k]};
    if (!(a.ctx = a.ops->open(bench_tag(tag, sizeof tag, "alloc"))))
      bench_die("%s: cannot open the allocator", a.ops->name);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      a.size = sizes[s];
      result_add("tensor alloc + free (a pair)", labels[s], a.ops->name,
                 1e9 / bench_rate(do_alloc_free, &a), U_NS);
    }
    a.ops->close(a.ctx);
  }
}
