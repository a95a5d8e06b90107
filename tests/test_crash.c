/* test_crash.c - every mutating operation killed at every crash window.
 *
 * For each operation: a fresh segment holds a committed world (named scopes,
 * tensors, labels, operator lists, variable locks, an anonymous scope this
 * process holds); a child attaches, prepares (not counted), runs the
 * operation with the crash points counting, and dies.  A first run counts
 * the windows the operation passes (N) and gives the state after it; then
 * for every k in 1..N a child dies at window k (inside loops, each window
 * twice: window_seen; CRASH_ALL=1: every k).  After each death, before
 * anyone reaps, this process works beside the dead (bystander); then it
 * reaps, requires pdshm_check to pass with an empty report, every slot and
 * lock to be free, and the model (scopes, variables, names, labels,
 * operator lists, tensor shapes and bytes, refs, `used`) to be one of the
 * states the operation may leave: before it, after it, or, for operations
 * made of several atomic steps, between two of them (the steps' boundary
 * crash point names them).  Reapers are killed at each of their windows too.
 * Pairs: a second process finds a variable, then the first dies at each
 * window of its journal under the same scope lock, then the second (whose
 * take of the lock repairs that journal, possibly erasing its variable)
 * dies at each of its windows; the result is the first death's state with
 * the second operation done or not.
 * Pins: the child pins, unpins, and erases, resizes or releases what it
 * pinned; or this process pins a variable the child erases, resizes or
 * unlinks, and the segment must check clean with the orphan and again
 * once that pin is dropped.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crashsnap.h"
#include "model_int.h"
#include "testutil.h"

#define SEG_SIZE (2u << 20)
#define MAX_REFS 64

static char g_name[PDSHM_SEG_NAME_MAX + 1];
/* Totals over the whole run: each test runs in a process of its own, so
 * they live in a mapping shared with the runner. */
static struct totals {
  _Atomic uint64_t passed, tried; /* (op, k) windows passed, and killed at */
} *g_totals;

static void setup(void) { snprintf(g_name, sizeof g_name, "%s", tu_name("crash")); }
static void teardown(void) { tu_cleanup(); }

/* ---- the committed world ---------------------------------------------------------- */

static void fill(pdshm_var *v, unsigned seed) {
  uint8_t *p = pdshm_tensor_data(v);
  for (size_t i = 0; i < pdshm_tensor_nbytes(v); i++) p[i] = (uint8_t)(i * 31 + seed);
}

static pdshm_var *tensor(pdshm_scope *s, const char *name, pdshm_dtype dt, int ndim,
                         const int64_t *dims) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(s, name, &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, dt, ndim, dims), 0);
  fill(v, (unsigned)strlen(name));
  return v;
}

static void kid(pdshm_scope *p, const char *name, const char *var, int64_t elems) {
  pdshm_scope *s;
  ck_assert_int_eq(pdshm_scope_new(p, name, &s), 0);
  if (var) tensor(s, var, PDSHM_F32, 1, &elems);
  ck_assert_int_eq(pdshm_scope_release(s), 0);
}

/* root/params {w, b, e, big, lk} with kids fc, sub/deep and one anonymous
 * scope this process holds; root/full with five variables (its index grows
 * at the next one). */
/* Few locks, so that the bystander (below) takes every free entry. */
static unsigned g_max_locks = PDSHM_LOCKS_MIN;

static pdshm_seg *world(void) {
  pdshm_options o = {.size = SEG_SIZE, .max_procs = 8, .max_locks = g_max_locks};
  pdshm_seg *seg = tu_create_opts(g_name, &o);
  pdshm_scope *root, *params, *anon, *full, *sub;
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, "params", &params), 0);
  pdshm_var *w = tensor(params, "w", PDSHM_F32, 2, (int64_t[]){32, 32}), *v;
  ck_assert_int_eq(pdshm_var_set_label(w, "parameter"), 0);
  ck_assert_int_eq(pdshm_var_add_reader(w, "fc"), 0);
  ck_assert_int_eq(pdshm_var_add_writer(w, "sgd"), 0);
  ck_assert_int_eq(pdshm_var_lock(w, 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(w), 0);
  tensor(params, "b", PDSHM_F32, 1, (int64_t[]){32});
  ck_assert_int_eq(pdshm_var_create(params, "e", &v), 0);
  tensor(params, "big", PDSHM_U8, 1, (int64_t[]){320 << 10});
  v = tensor(params, "lk", PDSHM_I64, 1, (int64_t[]){8});
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  kid(params, "fc", "w2", 16384);
  ck_assert_int_eq(pdshm_scope_new(params, "sub", &sub), 0);
  tensor(sub, "s", PDSHM_F64, 1, (int64_t[]){100});
  kid(sub, "deep", "d", 1000);
  ck_assert_int_eq(pdshm_scope_release(sub), 0);
  ck_assert_int_eq(pdshm_scope_new(params, NULL, &anon), 0);
  tensor(anon, "tmp", PDSHM_U8, 1, (int64_t[]){256});
  ck_assert_int_eq(pdshm_scope_new(root, "full", &full), 0);
  for (int i = 0; i < 5; i++) {
    char n[8];
    snprintf(n, sizeof n, "a%d", i);
    ck_assert_int_eq(pdshm_var_create(full, n, &v), 0);
  }
  ck_assert_int_eq(pdshm_scope_release(full), 0);
  return seg; /* root, params and anon stay held until detach */
}

/* ---- operations, as the child runs them --------------------------------------------- */

struct cx {
  pdshm_seg *seg;
  pdshm_scope *root, *params, *s;
  pdshm_var *v;
  pdshm_pin *pin;
};

static int open_params(struct cx *c) {
  return pdshm_root(c->seg, &c->root) || pdshm_scope_open(c->seg, "params", &c->params);
}
static int prep_var(struct cx *c, const char *name) {
  if (open_params(c)) return 1;
  c->v = pdshm_find_local_var(c->params, name);
  return !c->v;
}
static int prep_w(struct cx *c) { return prep_var(c, "w"); }
static int prep_b(struct cx *c) { return prep_var(c, "b"); }
static int prep_e(struct cx *c) { return prep_var(c, "e"); }
static int prep_lk(struct cx *c) { return prep_var(c, "lk"); }

/* A local scope with three tensors, a label and operator lists. */
static int prep_local(struct cx *c) {
  pdshm_var *v;
  if (open_params(c) || pdshm_scope_new(c->params, NULL, &c->s)) return 1;
  for (int i = 0; i < 3; i++) {
    const char *n[] = {"x", "y", "z"};
    int64_t d = (int64_t[]){16, 4096, 65536}[i];
    if (pdshm_var_create(c->s, n[i], &v) || pdshm_tensor_resize(v, PDSHM_F32, 1, &d)) return 1;
  }
  return pdshm_var_set_label(v, "input") || pdshm_var_add_reader(v, "mul") ||
         pdshm_var_lock(v, 1) || pdshm_var_unlock(v); /* a lock entry to give back */
}

/* A local scope whose parent is another local scope only it keeps alive. */
static int prep_chain(struct cx *c) {
  pdshm_scope *a;
  pdshm_var *v;
  int64_t d = 1024;
  if (open_params(c) || pdshm_scope_new(c->params, NULL, &a) ||
      pdshm_scope_new(a, NULL, &c->s) || pdshm_var_get(a, "va", &v) ||
      pdshm_tensor_resize(v, PDSHM_U8, 1, &d) || pdshm_var_get(c->s, "vb", &v))
    return 1;
  return pdshm_scope_release(a);
}

/* big's 320 KiB freed (more than the retain budget of a 2 MiB segment): its pages are given back, and e's resize below carves
 * from a block whose pages must be reserved again. */
static int prep_holey(struct cx *c) {
  pdshm_var *big;
  int64_t one = 1;
  if (prep_e(c) || !(big = pdshm_find_local_var(c->params, "big"))) return 1;
  return pdshm_tensor_resize(big, PDSHM_U8, 1, &one);
}

/* The child's own pins: on w, on b, on y of a local scope. */
static int prep_pin_w(struct cx *c) { return prep_w(c) || pdshm_tensor_pin(c->v, &c->pin, NULL); }
static int prep_pin_b(struct cx *c) { return prep_b(c) || pdshm_tensor_pin(c->v, &c->pin, NULL); }
static int prep_pin_local(struct cx *c) {
  return prep_local(c) || pdshm_tensor_pin(pdshm_find_local_var(c->s, "y"), &c->pin, NULL);
}
static int prep_big(struct cx *c) { return prep_var(c, "big"); }
/* w pinned by the child and erased: its unpin frees the orphan. */
static int prep_orphan_w(struct cx *c) { return prep_pin_w(c) || pdshm_var_erase(c->params, "w"); }

static int run_pin(struct cx *c) { return pdshm_tensor_pin(c->v, &c->pin, NULL); }
static int run_unpin(struct cx *c) { return pdshm_tensor_unpin(c->pin); }
static int run_resize_small(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_U8, 1, (int64_t[]){100});
}

static int run_new_named(struct cx *c) { return pdshm_scope_new(c->params, "fresh", &c->s); }
static int run_new_anon(struct cx *c) {
  pdshm_var *v;
  int64_t d = 512;
  return pdshm_scope_new(c->params, NULL, &c->s) || pdshm_var_get(c->s, "t", &v) ||
         pdshm_tensor_resize(v, PDSHM_F32, 1, &d);
}
static int run_release(struct cx *c) { return pdshm_scope_release(c->s); }
static int run_handles(struct cx *c) {
  pdshm_scope *a, *b, *d;
  return pdshm_scope_dup(c->params, &a) || pdshm_scope_parent(c->params, &b) ||
         pdshm_scope_open(c->seg, "params/sub/deep", &d) || pdshm_scope_release(a) ||
         pdshm_scope_release(b) || pdshm_scope_release(d);
}
static int run_unlink(struct cx *c) { return pdshm_scope_unlink(c->params, "sub"); }
static int run_drop_kids(struct cx *c) { return pdshm_scope_drop_kids(c->params); }
static int run_get(struct cx *c) { return pdshm_var_get(c->params, "fresh", &c->v); }
static int run_create(struct cx *c) { return pdshm_var_create(c->params, "made", &c->v); }
static int run_var_new(struct cx *c) { return pdshm_var_new(c->params, &c->v); }
static int run_grow(struct cx *c) {
  pdshm_scope *full;
  return pdshm_scope_open(c->seg, "full", &full) || pdshm_var_get(full, "a5", &c->v);
}
static int run_erase(struct cx *c) { return pdshm_var_erase(c->params, "w"); }
static int run_rename(struct cx *c) { return pdshm_var_rename(c->params, "w", "w.renamed"); }
static int run_label_new(struct cx *c) { return pdshm_var_set_label(c->v, "input"); }
static int run_label_swap(struct cx *c) { return pdshm_var_set_label(c->v, "objective"); }
static int run_label_clear(struct cx *c) { return pdshm_var_set_label(c->v, NULL); }
static int run_reader(struct cx *c) { return pdshm_var_add_reader(c->v, "matmul"); }
static int run_writer(struct cx *c) { return pdshm_var_add_writer(c->v, "adam"); }
static int run_resize_grow(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_F32, 2, (int64_t[]){64, 64});
}
static int run_resize_same(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_I32, 2, (int64_t[]){64, 16});
}
static int run_resize_zero(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_F32, 2, (int64_t[]){0, 7});
}
static int run_resize_large(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_U8, 1, (int64_t[]){300 << 10});
}
/* More than the segment holds: the allocator flushes its caches and takes
 * dead processes' before it answers ENOMEM, and nothing changes. */
static int run_resize_enomem(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_U8, 1, (int64_t[]){SEG_SIZE}) != PDSHM_ENOMEM;
}
static int run_lock_excl(struct cx *c) { return pdshm_var_lock(c->v, 1) || pdshm_var_unlock(c->v); }
static int run_lock_shared(struct cx *c) {
  return pdshm_var_lock(c->v, 0) || pdshm_var_unlock(c->v);
}
static int run_hold_excl(struct cx *c) { return pdshm_var_lock(c->v, 1); }
static int run_hold_shared(struct cx *c) { return pdshm_var_lock(c->v, 0); }
static int run_unique(struct cx *c) {
  char buf[64];
  return pdshm_unique_name(c->seg, "step", buf, sizeof buf);
}
static int run_detach(struct cx *c) { return pdshm_detach(c->seg); }
static int run_attach(struct cx *c) { return 0; } /* the attach itself, armed first */

/* The allocator on its own: every size class path, cache refills and
 * drains, a large block, a punched one reserved again. */
static int run_heap(struct cx *c) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(c->seg);
  pdshm_off_t p[48];
  int rc = 0;
  for (int i = 0; i < 48 && !rc; i++) {
    size_t n = i % 12 == 11 ? (size_t)(200u << 10) : (size_t)(24u << (i % 12));
    rc = pdshm__alloc(c->seg, ln, n, PDSHM_T_RAW, &p[i]);
  }
  for (int i = 0; i < 48 && !rc; i += 2) pdshm__free(c->seg, ln, p[i]);
  if (!rc) pdshm__cache_flush(c->seg, ln);
  for (int i = 1; i < 48 && !rc; i += 2) pdshm__free(c->seg, ln, p[i]);
  pdshm__lane_put(ln);
  return rc;
}

struct op {
  const char *name;
  int (*prep)(struct cx *);  /* in the child, before counting; NULL: none */
  int (*run)(struct cx *);   /* the operation                            */
  const char *boundary;      /* crash point between its atomic steps     */
  bool arm_first;            /* count from before the attach             */
  void (*verify)(pdshm_seg *); /* more to require once the dead are reaped */
  const char *pinned;        /* "SCOPE/VAR" this process pins while the child
                                runs (unpinned once the dead are reaped)  */
};

/* A resize that happened bumped the version, whenever its process died: the
 * version is what other processes poll to see a change. */
static void resized_means_bumped(pdshm_seg *seg) {
  pdshm_scope *params;
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
  pdshm_var *b = pdshm_find_local_var(params, "b");
  if (pdshm_tensor_nbytes(b) != 32 * sizeof(float))
    ck_assert_msg(pdshm_var_version(b) > 1, "b was resized, its version was not bumped");
  ck_assert_int_eq(pdshm_scope_release(params), 0);
}

static const struct op ops[] = {
    {"attach", NULL, run_attach, NULL, true, NULL, NULL},
    {"detach", prep_local, run_detach, NULL, false, NULL, NULL},
    {"heap", NULL, run_heap, NULL, false, NULL, NULL},
    {"scope_new_named", open_params, run_new_named, NULL, false, NULL, NULL},
    {"scope_new_anon", open_params, run_new_anon, NULL, false, NULL, NULL},
    {"scope_release", prep_local, run_release, NULL, false, NULL, NULL},
    {"scope_release_cascade", prep_chain, run_release, NULL, false, NULL, NULL},
    {"scope_handles", open_params, run_handles, NULL, false, NULL, NULL},
    {"scope_unlink", open_params, run_unlink, NULL, false, NULL, NULL},
    {"scope_drop_kids", open_params, run_drop_kids, "scope.drop_kids.one", false, NULL, NULL},
    {"var_get", open_params, run_get, NULL, false, NULL, NULL},
    {"var_create", open_params, run_create, NULL, false, NULL, NULL},
    {"var_new", open_params, run_var_new, NULL, false, NULL, NULL},
    {"var_get_grows_index", open_params, run_grow, NULL, false, NULL, NULL},
    {"var_erase", open_params, run_erase, NULL, false, NULL, NULL},
    {"var_rename", open_params, run_rename, NULL, false, NULL, NULL},
    {"set_label_new", prep_e, run_label_new, NULL, false, NULL, NULL},
    {"set_label_replace", prep_w, run_label_swap, NULL, false, NULL, NULL},
    {"set_label_clear", prep_w, run_label_clear, NULL, false, NULL, NULL},
    {"add_reader", prep_w, run_reader, NULL, false, NULL, NULL},
    {"add_writer", prep_w, run_writer, NULL, false, NULL, NULL},
    {"resize_grow", prep_b, run_resize_grow, NULL, false, resized_means_bumped, NULL},
    {"resize_in_place", prep_w, run_resize_same, NULL, false, NULL, NULL},
    {"resize_to_zero", prep_w, run_resize_zero, NULL, false, NULL, NULL},
    {"resize_large", prep_e, run_resize_large, NULL, false, NULL, NULL},
    {"resize_reserve_again", prep_holey, run_resize_large, NULL, false, NULL, NULL},
    {"resize_enomem", prep_b, run_resize_enomem, NULL, false, NULL, NULL},
    {"var_lock_first", prep_e, run_lock_excl, NULL, false, NULL, NULL},
    {"var_lock_exclusive", prep_lk, run_lock_excl, NULL, false, NULL, NULL},
    {"var_lock_shared", prep_lk, run_lock_shared, NULL, false, NULL, NULL},
    {"var_lock_die_exclusive", prep_lk, run_hold_excl, NULL, false, NULL, NULL},
    {"var_lock_die_shared", prep_lk, run_hold_shared, NULL, false, NULL, NULL},
    {"unique_name", NULL, run_unique, NULL, false, NULL, NULL},
    {"pin", prep_w, run_pin, NULL, false, NULL, NULL},
    {"unpin", prep_pin_w, run_unpin, NULL, false, NULL, NULL},
    {"unpin_orphan", prep_orphan_w, run_unpin, NULL, false, NULL, NULL},
    {"erase_own_pinned", prep_pin_w, run_erase, NULL, false, NULL, NULL},
    {"resize_own_pinned", prep_pin_b, run_resize_grow, NULL, false, NULL, NULL},
    {"release_own_pinned", prep_pin_local, run_release, NULL, false, NULL, NULL},
    {"detach_own_pinned", prep_pin_local, run_detach, NULL, false, NULL, NULL},
    {"erase_pinned", open_params, run_erase, NULL, false, NULL, "params/w"},
    {"resize_pinned", prep_b, run_resize_grow, NULL, false, NULL, "params/b"},
    {"resize_large_pinned", prep_big, run_resize_small, NULL, false, NULL, "params/big"},
    {"unlink_pinned", open_params, run_unlink, NULL, false, NULL, "params/sub/s"},
};
#define NOPS (sizeof ops / sizeof ops[0])

/* ---- one child --------------------------------------------------------------------- */

/* Where the child is once prepared: a preparation that changes committed
 * state (prep_holey) makes that state one the operation may leave too. */
static const char PREPARED[] = "test.prepared";

struct plan {
  const struct op *op;
  uint64_t k;            /* die at this hit (0: run to the end)           */
  const char *point;     /* count only this point's hits                  */
  int fd;                /* the child reports its hit count here          */
  int ready, go;         /* a child that starts before another one dies:
                            prepared, it writes a byte on ready and waits
                            for one on go before it runs (0: not used)    */
};

/* In the child: attach, prepare, run armed; a finished run reports its hits
 * and dies anyway, so that every state is seen after a death and a reap. */
static int child_main(void *arg) {
  const struct plan *pl = arg;
  struct cx c = {0};
  if (pl->op->arm_first || pl->point == PREPARED) pdshm__crash_arm(pl->k, pl->point);
  if (pdshm_attach(g_name, NULL, &c.seg)) return 10;
  if (pl->op->prep && pl->op->prep(&c)) return 11;
  char byte = 1;
  if (pl->ready && (write(pl->ready, &byte, 1) != 1 || read(pl->go, &byte, 1) != 1)) return 16;
  pdshm__crashpoint(PREPARED);
  if (!pl->op->arm_first) pdshm__crash_arm(pl->k, pl->point);
  if (pl->op->run(&c)) return 12;
  uint64_t hits = pdshm__crash_hits(); /* the names are read before any other hit */
  if (write(pl->fd, &hits, sizeof hits) != sizeof hits) return 13;
  for (uint64_t i = 1; i <= hits; i++) {
    const char *n = pdshm__crash_name(i);
    char line[64] = {0};
    snprintf(line, sizeof line, "%s", n ? n : "?");
    if (write(pl->fd, line, sizeof line) != sizeof line) return 14;
  }
  raise(SIGKILL);
  return 15;
}

struct outcome {
  char *before, *after;  /* the model before the child ran, and after      */
  uint64_t hits;         /* when the child ran to the end                   */
  char (*names)[64];     /* the point of each hit (counting run)            */
  bool finished;         /* the child reached the end of the operation      */
};

static void outcome_free(struct outcome *o) {
  free(o->before);
  free(o->after);
  free(o->names);
  memset(o, 0, sizeof *o);
}

static void read_report(int fd, struct outcome *o) {
  uint64_t hits;
  if (read(fd, &hits, sizeof hits) != sizeof hits) return;
  o->finished = true;
  o->hits = hits;
  o->names = calloc(hits + 1, sizeof *o->names);
  for (uint64_t i = 0; i < hits; i++)
    if (read(fd, o->names[i], sizeof o->names[i]) != sizeof o->names[i]) break;
}

/* Forks the child of plan pl and waits for its death; its report, when it
 * ran to the end, goes to o. */
static void child_run(struct plan pl, struct outcome *o) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pl.fd = fds[1];
  pid_t pid = tu_spawn(child_main, &pl);
  close(fds[1]);
  read_report(fds[0], o);
  close(fds[0]);
  int st = tu_wait(pid);
  ck_assert_msg(st == 128 + SIGKILL, "%s k=%llu: the child ended with %d", pl.op->name,
                (unsigned long long)pl.k, st);
}

/* Reaps what the dead left and verifies the segment is clean. */
static void reap_verify(pdshm_seg *seg, const char *what, uint64_t k) {
  char why[1024];
  int rc = snap_reap_all(seg);
  ck_assert_msg(rc == 0, "%s k=%llu: reap: %s (%s)", what, (unsigned long long)k,
                pdshm_strerror(rc), pdshm_last_error());
  ck_assert_msg(!snap_clean(seg, why, sizeof why), "%s k=%llu: %s", what,
                (unsigned long long)k, why);
}

/* A live process at work next to the dead before anybody reaps them: it
 * takes every free lock entry for scopes of its own, locking each (so that
 * an entry a pending journal still names would be caught: see
 * lock_entry_given_back_by_a_killed_process), opens and locks what the dead
 * may have held, and checks the segment; then it lets everything go. */
static void bystander(pdshm_seg *seg, const char *what, uint64_t k) {
  pdshm_scope *full, *params, *s[PDSHM_LOCKS_MIN];
  pdshm_var *v;
  char *rep = NULL;
  size_t len = 0;
  int n = 0, rc = 0;
  ck_assert_int_eq(pdshm_scope_open(seg, "full", &full), 0);
  while (n < (int)PDSHM_LOCKS_MIN && !(rc = pdshm_scope_new(full, NULL, &s[n])))
    ck_assert_int_eq(pdshm_var_get(s[n++], "x", &v), 0);
  ck_assert_msg(rc == PDSHM_ENOLCK, "%s k=%llu: bystander: %s", what, (unsigned long long)k,
                pdshm_strerror(rc));
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
  v = pdshm_find_local_var(params, "lk");
  ck_assert_int_eq(pdshm_var_lock(v, 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  FILE *f = open_memstream(&rep, &len);
  rc = pdshm_check(seg, f);
  fclose(f);
  ck_assert_msg(!rc && !len, "%s k=%llu: with a bystander: %s", what, (unsigned long long)k, rep);
  free(rep);
  for (int i = 0; i < n; i++) ck_assert_int_eq(pdshm_scope_release(s[i]), 0);
  ck_assert_int_eq(pdshm_scope_release(full), 0);
  ck_assert_int_eq(pdshm_scope_release(params), 0);
}

/* Pins the variable at "SCOPE/VAR" (op->pinned) from this process, through
 * a scope handle it lets go of at once: a pin is no reference on the scope. */
static pdshm_pin *pin_path(pdshm_seg *seg, const char *path) {
  char scope[128];
  const char *slash = strrchr(path, '/');
  snprintf(scope, sizeof scope, "%.*s", (int)(slash - path), path);
  pdshm_scope *s;
  pdshm_pin *p;
  ck_assert_int_eq(pdshm_scope_open(seg, scope, &s), 0);
  ck_assert_int_eq(pdshm_tensor_pin(pdshm_find_local_var(s, slash + 1), &p, NULL), 0);
  ck_assert_int_eq(pdshm_scope_release(s), 0);
  return p;
}

/* A fresh world, the child of plan a (then, if b is not NULL, the child of
 * plan b: a reaper), then reap and verify; with a pin of ours (a->op->pinned)
 * held throughout, verified with it and again once it is dropped.  The
 * outcome's `after` is the model once the dead have been reaped and our pin
 * dropped; its report is the last child's. */
static struct outcome run_plans(const struct plan *a, const struct plan *b) {
  struct outcome o = {0}, ignored = {0};
  pdshm_seg *seg = world();
  pdshm_pin *ours = a->op->pinned ? pin_path(seg, a->op->pinned) : NULL;
  o.before = snap_model(seg, 0, true);
  child_run(*a, b ? &ignored : &o);
  outcome_free(&ignored);
  if (b) child_run(*b, &o);
  bystander(seg, (b ? b : a)->op->name, (b ? b : a)->k);
  reap_verify(seg, (b ? b : a)->op->name, (b ? b : a)->k);
  if (ours) {
    ck_assert_int_eq(pdshm_tensor_unpin(ours), 0);
    reap_verify(seg, "our unpin", (b ? b : a)->k);
  }
  o.after = snap_model(seg, 0, true);
  if ((b ? b : a)->op->verify) (b ? b : a)->op->verify(seg);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  ck_assert_int_eq(pdshm_unlink(g_name), 0);
  return o;
}

static struct outcome run_child(const struct op *op, uint64_t k, const char *point) {
  struct plan pl = {.op = op, .k = k, .point = point};
  return run_plans(&pl, NULL);
}

/* ---- the states an operation may leave ---------------------------------------------- */

struct refs {
  char *s[MAX_REFS];
  unsigned n;
};

static void refs_add(struct refs *r, const char *s) {
  for (unsigned i = 0; i < r->n; i++)
    if (!strcmp(r->s[i], s)) return;
  ck_assert_uint_lt(r->n, MAX_REFS);
  r->s[r->n++] = strdup(s);
}

static bool refs_has(const struct refs *r, const char *s) {
  for (unsigned i = 0; i < r->n; i++)
    if (!strcmp(r->s[i], s)) return true;
  return false;
}

static void refs_free(struct refs *r) {
  for (unsigned i = 0; i < r->n; i++) free(r->s[i]);
  r->n = 0;
}

/* The first line where a and b differ, for a failure message. */
static const char *first_diff(const char *a, const char *b, char *out, size_t cap) {
  size_t i = 0, line = 0;
  while (a[i] && a[i] == b[i]) {
    if (a[i] == '\n') line = i + 1;
    i++;
  }
  const char *e1 = strchr(a + line, '\n'), *e2 = strchr(b + line, '\n');
  snprintf(out, cap, "got \"%.*s\" where a state has \"%.*s\"",
           (int)(e1 ? e1 - (a + line) : 80), a + line, (int)(e2 ? e2 - (b + line) : 80),
           b + line);
  return out;
}

/* Counts the op's windows, collects its before/after (and in-between) states. */
static uint64_t op_count(const struct op *op, struct refs *r, char (**names)[64]) {
  struct outcome o = run_child(op, 0, NULL);
  ck_assert_msg(o.finished, "%s did not finish", op->name);
  uint64_t n = o.hits;
  refs_add(r, o.before);
  refs_add(r, o.after);
  *names = o.names;
  o.names = NULL;
  outcome_free(&o);
  o = run_child(op, 1, PREPARED);
  refs_add(r, o.after);
  outcome_free(&o);
  for (uint64_t b = 1; op->boundary; b++) {
    o = run_child(op, b, op->boundary);
    bool done = o.finished;
    refs_add(r, o.after);
    outcome_free(&o);
    if (done) break;
  }
  return n;
}

/* Loops pass the same window many times (a cache refill carves a block per
 * turn): window k is tried unless the same point between the same
 * neighbours was tried twice already.  CRASH_ALL=1 tries every k. */
static bool window_seen(char (*names)[64], uint64_t n, uint64_t k) {
  if (getenv("CRASH_ALL")) return false;
  unsigned same = 0;
  for (uint64_t j = 3; j < k && same < 2; j++) {
    bool eq = true;
    for (int d = -2; d <= 1 && eq; d++) {
      uint64_t a = j + d, b = k + d;
      eq = (a > n) == (b > n) && (a > n || !strcmp(names[a - 1], names[b - 1]));
    }
    same += eq;
  }
  return same >= 2;
}

/* How many distinct crash points the hits name; CRASH_NAMES=1 lists them. */
static unsigned points(char (*names)[64], uint64_t n) {
  unsigned distinct = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t j = 0;
    while (j < i && strcmp(names[j], names[i])) j++;
    if (j < i) continue;
    distinct++;
    if (getenv("CRASH_NAMES")) printf("crash:   %s\n", names[i]);
  }
  return distinct;
}

static void op_all_windows(const struct op *op) {
  struct refs r = {0};
  char (*names)[64];
  uint64_t n = op_count(op, &r, &names), tried = 0;
  ck_assert_msg(n > 0, "%s passes no crash window", op->name);
  for (uint64_t k = 1; k <= n; k++) {
    if (window_seen(names, n, k)) continue;
    tried++;
    struct outcome o = run_child(op, k, NULL);
    char d[400];
    ck_assert_msg(!o.finished, "%s k=%llu: finished (the window count moved)", op->name,
                  (unsigned long long)k);
    ck_assert_msg(!strcmp(o.before, r.s[0]), "%s: the world is not deterministic", op->name);
    ck_assert_msg(refs_has(&r, o.after), "%s: died at window %llu (%s): %s", op->name,
                  (unsigned long long)k, names[k - 1], first_diff(o.after, r.s[0], d, sizeof d));
    outcome_free(&o);
  }
  g_totals->passed += n;
  g_totals->tried += tried;
  printf("crash: %-24s %3llu windows passed, %3llu tried, %u states accepted, %u points\n",
         op->name, (unsigned long long)n, (unsigned long long)tried, r.n, points(names, n));
  free(names);
  refs_free(&r);
}

/* ---- reapers killed mid-reap ------------------------------------------------------- */

static int run_reap(struct cx *c) { return pdshm_reap(c->seg, NULL); }
/* Attaching reaps the dead slot it is about to take: armed from the start. */
static const struct op reaper = {"reaper", NULL, run_reap, NULL, true, NULL, NULL};

static const struct op *op_named(const char *name) {
  for (size_t i = 0; i < NOPS; i++)
    if (!strcmp(ops[i].name, name)) return &ops[i];
  ck_abort_msg("no op %s", name);
  return NULL;
}

/* Deaths that leave a reaper work of each kind: a destruction half done, an
 * unlink chain pending, a shared and an exclusive hold, a committed journal
 * not applied, an armed one with a new block, a detach half done, an armed
 * one that retired published blocks, a pin on an orphan, a buffer half
 * orphaned under another's pin, an unpin half done inside the heap lock (of
 * a hooked buffer, and of an orphan: the recount frees it). */
static const struct {
  const char *op, *point;
  uint64_t n;
} dead[] = {
    {"scope_release", "scope.destroy.unhooked", 1}, {"scope_drop_kids", "scope.drop_kids.one", 1},
    {"var_lock_die_shared", NULL, 0},               {"resize_large", "j.commit.after", 1},
    {"var_lock_die_exclusive", NULL, 0},
    {"scope_new_named", "j.alloc.recorded", 1},     {"detach", "slot.release.holds", 1},
    {"var_erase", "j.retire.marked", 2},
    {"erase_own_pinned", NULL, 0},                  {"erase_pinned", "pin.orphan.flagged", 1},
    {"unpin", "pin.drop.cleared", 1},               {"unpin_orphan", "pin.drop.cleared", 1},
};

/* A reaper killed at each of its windows leaves work the next reaper
 * finishes: the result is what one undisturbed reap gives, nothing undone
 * and nothing done twice. */
START_TEST(reaper_killed_at_every_window) {
  struct plan a = {.op = op_named(dead[_i].op), .k = dead[_i].n, .point = dead[_i].point};
  struct outcome o = run_plans(&a, NULL);
  char *expect = o.after, d[400];
  o.after = NULL;
  outcome_free(&o);
  struct plan b = {.op = &reaper};
  o = run_plans(&a, &b);
  ck_assert_msg(o.finished && !strcmp(o.after, expect), "the reaper's own run differs");
  uint64_t n = o.hits, tried = 0;
  char(*names)[64] = o.names;
  o.names = NULL;
  outcome_free(&o);
  for (b.k = 1; b.k <= n; b.k++) {
    if (window_seen(names, n, b.k)) continue;
    o = run_plans(&a, &b);
    ck_assert_msg(!o.finished, "reaper k=%llu finished", (unsigned long long)b.k);
    ck_assert_msg(!strcmp(o.after, expect), "after %s, a reaper killed at %llu (%s): %s",
                  dead[_i].op, (unsigned long long)b.k, names[b.k - 1],
                  first_diff(o.after, expect, d, sizeof d));
    outcome_free(&o);
    tried++;
  }
  g_totals->passed += n;
  g_totals->tried += tried;
  printf("crash: reaper after %-20s %3llu windows passed, %3llu tried, %u points\n",
         dead[_i].op, (unsigned long long)n, (unsigned long long)tried, points(names, n));
  free(names);
  free(expect);
}
END_TEST

/* ---- lock holders killed ------------------------------------------------------------ */

static double ms_since(uint64_t t0) { return (double)(tu_now_ns() - t0) / 1e6; }

/* A child killed inside the heap lock (a block half split): the next
 * allocation gets the lock at once and finds the bins rebuilt. */
START_TEST(heap_lock_holder_killed) {
  pdshm_seg *seg = world();
  uint64_t rebuilds = seg->hdr->heap.rebuilds;
  struct outcome o = {0};
  child_run((struct plan){.op = op_named("heap"), .k = 1, .point = "heap.carve.tail"}, &o);
  uint64_t t0 = tu_now_ns();
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm_off_t p;
  ck_assert_int_eq(pdshm__alloc(seg, ln, 100000, PDSHM_T_RAW, &p), 0);
  double ms = ms_since(t0);
  pdshm__free(seg, ln, p);
  pdshm__lane_put(ln);
  printf("crash: heap lock of a killed holder taken in %.3f ms\n", ms);
  ck_assert_double_lt(ms, 100);
  ck_assert_uint_eq(seg->hdr->heap.rebuilds, rebuilds + 1);
  reap_verify(seg, "heap lock", 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
}
END_TEST

/* Killed under a scope's lock with its journal half applied: the next
 * taker redoes it (the variable is there) before it goes on. */
START_TEST(scope_lock_holder_killed) {
  pdshm_seg *seg = world();
  struct outcome o = {0};
  child_run((struct plan){.op = op_named("var_get"), .k = 2, .point = "j.apply.store"}, &o);
  uint64_t t0 = tu_now_ns();
  pdshm_scope *params;
  pdshm_var *v;
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
  ck_assert_int_eq(pdshm_var_get(params, "after", &v), 0);
  double ms = ms_since(t0);
  printf("crash: scope lock of a killed holder taken in %.3f ms\n", ms);
  ck_assert_double_lt(ms, 100);
  ck_assert_ptr_nonnull(pdshm_find_local_var(params, "fresh"));
  ck_assert_uint_eq(pdshm__scope_at(seg, params->rec)->seq % 2, 0);
  reap_verify(seg, "scope lock", 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
}
END_TEST

/* An exclusive holder killed: the next exclusive taker gets it at once; a
 * shared holder killed: once its share is reaped (the waiting writer reaps). */
START_TEST(var_lock_holders_killed) {
  const char *ops_held[] = {"var_lock_die_exclusive", "var_lock_die_shared"};
  for (int i = 0; i < 2; i++) {
    pdshm_seg *seg = world();
    struct outcome o = {0};
    child_run((struct plan){.op = op_named(ops_held[i])}, &o);
    outcome_free(&o);
    pdshm_scope *params;
    ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
    pdshm_var *v = pdshm_find_local_var(params, "lk");
    uint64_t t0 = tu_now_ns();
    ck_assert_int_eq(pdshm_var_lock(v, 1), 0);
    double ms = ms_since(t0);
    ck_assert_int_eq(pdshm_var_unlock(v), 0);
    printf("crash: variable lock of a killed %s holder taken in %.3f ms\n",
           i ? "shared" : "exclusive", ms);
    ck_assert_double_lt(ms, 100);
    reap_verify(seg, ops_held[i], 0);
    ck_assert_int_eq(pdshm_detach(seg), 0);
    ck_assert_int_eq(pdshm_unlink(g_name), 0);
  }
}
END_TEST

/* This process's share of params/lk, counted in its word, and the lock
 * let go of: a writer then gets it at once. */
static void our_share_counted(pdshm_seg *seg, pdshm_var *v, const char *what, uint64_t k) {
  int owner;
  ck_assert_msg(pdshm__varlock_readers(pdshm__var_rec(v), &owner) == 1 && owner < 0,
                "%s k=%llu: our share is not the only one counted", what, (unsigned long long)k);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_var_lock(v, 1), 0);
  ck_assert_double_lt(ms_since(t0), 5);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  reap_verify(seg, what, k);
}

/* Deaths whose share cannot be told from the word (varlock.c, invariant 4):
 * a shared take and release killed at each of its windows, and the reaper
 * of a dead reader killed at each of its own (the word frozen, half
 * recounted), all while this process holds a share of the same variable:
 * the recount finds exactly that share, whoever reaps. */
static bool share_beside_death(bool reaper_dies, uint64_t k, const char *point) {
  pdshm_seg *seg = world();
  pdshm_scope *params;
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
  pdshm_var *v = pdshm_find_local_var(params, "lk");
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
  struct outcome o = {0};
  struct plan a = {.op = op_named(reaper_dies ? "var_lock_die_shared" : "var_lock_shared"),
                   .k = reaper_dies ? 0 : k, .point = reaper_dies ? NULL : point};
  struct plan b = {.op = &reaper, .k = k, .point = point};
  child_run(a, &o);
  if (reaper_dies) {
    outcome_free(&o);
    child_run(b, &o);
  }
  bool done = o.finished;
  outcome_free(&o);
  ck_assert_int_eq(snap_reap_all(seg), 0);
  our_share_counted(seg, v, point ? point : reaper_dies ? "reaper of a reader" : "reader", k);
  ck_assert_int_eq(pdshm_scope_release(params), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  ck_assert_int_eq(pdshm_unlink(g_name), 0);
  return done;
}

START_TEST(var_lock_recount_keeps_live_share) {
  static const char *const points[2][3] = {
      {"varlock.shared.taking", "varlock.shared.counted", "varlock.shared.uncounted"},
      {"varlock.reap.frozen", "varlock.reap.thawed", "varlock.reap.record"}};
  uint64_t k = 1;
  while (!share_beside_death(_i, k, NULL)) k++;
  printf("crash: %s beside a live share: %llu windows\n",
         _i ? "reaper of a dead reader" : "shared lock", (unsigned long long)k - 1);
  for (int p = 0; p < 3; p++) /* each window of its own is among them */
    ck_assert_msg(!share_beside_death(_i, 1, points[_i][p]), "%s never reached", points[_i][p]);
}
END_TEST

/* A writer killed while it waited for readers to drain leaves its "writer
 * waiting" mark: readers must not keep deferring to it. */
START_TEST(dead_waiting_writer_does_not_hold_readers) {
  pdshm_seg *seg = world();
  pdshm_scope *params;
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
  pdshm_var *v = pdshm_find_local_var(params, "lk");
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
  struct outcome o = {0};
  child_run((struct plan){.op = op_named("var_lock_die_exclusive"), .k = 1,
                          .point = "varlock.excl.waiting"},
            &o);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
  double ms = ms_since(t0);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  printf("crash: shared lock after a writer died waiting taken in %.3f ms\n", ms);
  ck_assert_double_lt(ms, 20);
  reap_verify(seg, "waiting writer", 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
}
END_TEST

/* Giving back a lock entry (a scope destroyed, a locked variable erased)
 * happens in a journal.  Killed while applying it, its process leaves the
 * entry AVAILABLE while the journal waits for a repair: a new scope may
 * claim and publish the entry meanwhile, and the repair (re-applying the
 * journal) would then give the new scope's entry back again. */
static const struct {
  const char *op, *after; /* the entry's store: the first after this point */
  const char *under;      /* where the new scopes go                       */
} giveback[] = {{"scope_release", "scope.destroy.vars", "params"}, {"var_erase", NULL, "full"}};

START_TEST(lock_entry_given_back_by_a_killed_process) {
  const struct op *op = op_named(giveback[_i].op);
  struct outcome o = run_child(op, 0, NULL);
  uint64_t k = 0;
  bool past = !giveback[_i].after;
  for (uint64_t i = 1; i <= o.hits && !k; i++) {
    past |= giveback[_i].after && !strcmp(o.names[i - 1], giveback[_i].after);
    if (past && !strcmp(o.names[i - 1], "j.apply.store")) k = i;
  }
  outcome_free(&o);
  ck_assert_uint_gt(k, 0);
  pdshm_seg *seg = world();
  child_run((struct plan){.op = op, .k = k}, &o);
  pdshm_scope *under, *params, *s[PDSHM_LOCKS_MIN];
  ck_assert_int_eq(pdshm_scope_open(seg, giveback[_i].under, &under), 0);
  int n = 0, rc = 0;
  while (n < (int)PDSHM_LOCKS_MIN && !(rc = pdshm_scope_new(under, NULL, &s[n]))) {
    pdshm_var *v;
    ck_assert_int_eq(pdshm_var_get(s[n++], "x", &v), 0); /* takes the new scope's lock */
  }
  ck_assert_int_eq(rc, PDSHM_ENOLCK);
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0); /* its lock: repaired */
  reap_verify(seg, "scopes on every lock", k);
  for (int i = 0; i < n; i++) ck_assert_int_eq(pdshm_scope_release(s[i]), 0);
  ck_assert_int_eq(pdshm_scope_release(under), 0);
  ck_assert_int_eq(pdshm_scope_release(params), 0);
  reap_verify(seg, giveback[_i].op, k);
  ck_assert_int_eq(pdshm_detach(seg), 0);
}
END_TEST

/* ---- two processes dying on one scope ------------------------------------------------ */

/* The second process's operations: on a variable it found before the first
 * one died under the scope's lock, so that its own take of the lock repairs
 * the dead journal (the variable may be erased by that repair). */
static int prep_w_seen(struct cx *c) { return prep_w(c); }
static int prep_b_seen(struct cx *c) { return prep_b(c); }
static int may_be_stale(int rc) { return rc && rc != PDSHM_ESTALE; }
static int run_resize_seen(struct cx *c) {
  return may_be_stale(pdshm_tensor_resize(c->v, PDSHM_F32, 1, (int64_t[]){3000}));
}
static int run_reader_seen(struct cx *c) { return may_be_stale(pdshm_var_add_reader(c->v, "late")); }
static int run_erase_b(struct cx *c) { return pdshm_var_erase(c->params, "b"); }

static const struct {
  const char *first;       /* ops[]: dies at each of its journal's windows  */
  struct op second;        /* prepared before, dies at each of its windows  */
} pairs[] = {
    {"var_erase", {"resize_erased_w", prep_w_seen, run_resize_seen, NULL, false, NULL, NULL}},
    {"var_erase", {"reader_erased_w", prep_w_seen, run_reader_seen, NULL, false, NULL, NULL}},
    {"resize_grow", {"erase_resized_b", prep_b_seen, run_erase_b, NULL, false, NULL, NULL}},
};

/* A fresh world; the child of plan b attaches and prepares; the child of
 * plan a runs and dies; then b runs and dies; then the bystander, the reap
 * and the check.  Returns b's outcome, `after` being the reaped model. */
static struct outcome run_pair(const struct plan *a, const struct plan *b) {
  struct outcome o = {0}, ignored = {0};
  int rep[2], ready[2], go[2];
  char byte = 0;
  pdshm_seg *seg = world();
  o.before = snap_model(seg, 0, true);
  ck_assert_int_eq(pipe(rep), 0);
  ck_assert_int_eq(pipe(ready), 0);
  ck_assert_int_eq(pipe(go), 0);
  struct plan pb = *b;
  pb.fd = rep[1];
  pb.ready = ready[1];
  pb.go = go[0];
  pid_t pid = tu_spawn(child_main, &pb);
  close(rep[1]);
  close(ready[1]);
  close(go[0]);
  ck_assert_msg(read(ready[0], &byte, 1) == 1, "%s: the second child did not get ready",
                b->op->name);
  close(ready[0]);
  child_run(*a, &ignored);
  outcome_free(&ignored);
  ck_assert_int_eq(write(go[1], &byte, 1), 1);
  close(go[1]);
  read_report(rep[0], &o);
  close(rep[0]);
  int st = tu_wait(pid);
  ck_assert_msg(st == 128 + SIGKILL, "%s after %s k=%llu, k=%llu: the child ended with %d",
                b->op->name, a->op->name, (unsigned long long)a->k, (unsigned long long)b->k, st);
  bystander(seg, b->op->name, b->k);
  reap_verify(seg, b->op->name, b->k);
  o.after = snap_model(seg, 0, true);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  ck_assert_int_eq(pdshm_unlink(g_name), 0);
  return o;
}

/* The first process dies at each window of its journal, holding the scope's
 * lock; the second, which found its variable before that death, takes the
 * lock (repairing the dead journal) and dies at each of its own windows,
 * the repair's included.  After the reap the segment checks clean and the
 * model is what the first death leaves with the second operation either
 * not done or done: never a buffer or a lock entry lost between the two. */
START_TEST(two_deaths_on_one_scope) {
  const struct op *first = op_named(pairs[_i].first), *second = &pairs[_i].second;
  struct outcome o = run_child(first, 0, NULL);
  uint64_t na = o.hits, tried = 0, passed = 0;
  char(*anames)[64] = o.names;
  o.names = NULL;
  outcome_free(&o);
  for (uint64_t ka = 1; ka <= na; ka++) {
    if (strncmp(anames[ka - 1], "j.", 2) || window_seen(anames, na, ka)) continue;
    struct plan a = {.op = first, .k = ka}, b = {.op = second, .k = 1, .point = PREPARED};
    o = run_pair(&a, &b);
    char *undone = o.after, *done, d[400];
    o.after = NULL;
    outcome_free(&o);
    b = (struct plan){.op = second};
    o = run_pair(&a, &b);
    ck_assert_msg(o.finished, "%s after %s k=%llu did not finish", second->name, first->name,
                  (unsigned long long)ka);
    done = o.after;
    o.after = NULL;
    uint64_t nb = o.hits;
    char(*bnames)[64] = o.names;
    o.names = NULL;
    outcome_free(&o);
    for (b.k = 1; b.k <= nb; b.k++) {
      if (window_seen(bnames, nb, b.k)) continue;
      o = run_pair(&a, &b);
      ck_assert_msg(!o.finished, "%s k=%llu finished", second->name, (unsigned long long)b.k);
      ck_assert_msg(!strcmp(o.after, undone) || !strcmp(o.after, done),
                    "%s killed at %llu (%s), then %s killed at %llu (%s): %s", first->name,
                    (unsigned long long)ka, anames[ka - 1], second->name,
                    (unsigned long long)b.k, bnames[b.k - 1],
                    first_diff(o.after, undone, d, sizeof d));
      outcome_free(&o);
      tried++;
    }
    passed += nb;
    free(bnames);
    free(undone);
    free(done);
  }
  g_totals->passed += passed;
  g_totals->tried += tried;
  printf("crash: %s after %-16s %4llu windows passed, %4llu tried\n", second->name,
         first->name, (unsigned long long)passed, (unsigned long long)tried);
  free(anames);
}
END_TEST

/* Check runs each loop iteration as a test of its own. */
START_TEST(every_window_of_every_op) {
  op_all_windows(&ops[_i]);
}
END_TEST

Suite *crash_suite(void);
Suite *crash_suite(void) {
  Suite *s = suite_create("crash");
  TCase *tc = tu_tcase(s, "windows", 120, setup, teardown);
  tcase_add_loop_test(tc, every_window_of_every_op, 0, NOPS);
  tc = tu_tcase(s, "reapers", 120, setup, teardown);
  tcase_add_loop_test(tc, reaper_killed_at_every_window, 0, sizeof dead / sizeof dead[0]);
  tc = tu_tcase(s, "pairs", 300, setup, teardown);
  tcase_add_loop_test(tc, two_deaths_on_one_scope, 0, sizeof pairs / sizeof pairs[0]);
  tc = tu_tcase(s, "locks", 30, setup, teardown);
  tcase_add_test(tc, heap_lock_holder_killed);
  tcase_add_test(tc, scope_lock_holder_killed);
  tcase_add_test(tc, var_lock_holders_killed);
  tcase_add_test(tc, dead_waiting_writer_does_not_hold_readers);
  tcase_add_loop_test(tc, var_lock_recount_keeps_live_share, 0, 2);
  tcase_add_loop_test(tc, lock_entry_given_back_by_a_killed_process, 0, 2);
  return s;
}

int main(void) {
  g_totals = mmap(NULL, sizeof *g_totals, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
  if (g_totals == MAP_FAILED) return EXIT_FAILURE;
  int failed = tu_run(crash_suite());
  printf("crash: %llu (op, k) crash points passed, %llu killed at and verified\n",
         (unsigned long long)g_totals->passed, (unsigned long long)g_totals->tried);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
