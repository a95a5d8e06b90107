/*
 * bench_model - the seed model's hot paths against a Paddle-style in-process
 * scope (std::unordered_map + std::shared_mutex per scope + parent chain),
 * measured in the same run:
 *   lookups (hit in the scope, at parent depth 1 and 8, miss) at 100, 10k and
 *   100k names; get-or-create + erase; a per-step local scope cycle (new
 *   scope, 10 variables with 4 KiB tensors, release).
 * Prints a table with ns/op and the ratio pdshm / peer, and the targets.
 *
 * usage: bench_model [--quick]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pdshm.h"
#include "peers.h"

#define DEPTH 8
#define CHECK(call)                                                                  \
  do {                                                                               \
    int rc_ = (call);                                                                \
    if (rc_) {                                                                       \
      fprintf(stderr, "%s: %s (%s)\n", #call, pdshm_strerror(rc_), pdshm_last_error()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* prefix_<i><suffix>: names shaped like Paddle's ("fc_12.w_0"). */
static char **make_names(int n, const char *prefix, const char *suffix) {
  char **names = malloc((size_t)n * sizeof *names);
  for (int i = 0; i < n; i++) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s_%d%s", prefix, i, suffix);
    names[i] = strdup(buf);
  }
  return names;
}

/* A random visiting order, the same for both sides. */
static int *make_order(int n, int count) {
  int *o = malloc((size_t)count * sizeof *o);
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < count; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    o[i] = (int)(x % (uint64_t)n);
  }
  return o;
}

static volatile uintptr_t sink;

struct row {
  const char *what;
  int names;
  double pdshm_ns, peer_ns;
  double target; /* the largest acceptable ratio, 0 for none */
};

static void print_row(const struct row *r) {
  double ratio = r->pdshm_ns / r->peer_ns;
  printf("%-28s %7d %10.1f %10.1f %8.2fx", r->what, r->names, r->pdshm_ns, r->peer_ns, ratio);
  if (r->target > 0) printf("   target <= %.2fx %s", r->target, ratio <= r->target ? "PASS" : "MISS");
  printf("\n");
  fflush(stdout);
}

/* ---- lookups --------------------------------------------------------------- */

struct chains {
  pdshm_scope *p[DEPTH + 1]; /* p[0] holds the names, p[k] is k levels below */
  void *q[DEPTH + 1];
};

static void build(pdshm_scope *root, struct chains *c, char **names, int n) {
  CHECK(pdshm_scope_new(root, NULL, &c->p[0]));
  c->q[0] = pp_scope_new(NULL);
  for (int k = 1; k <= DEPTH; k++) {
    CHECK(pdshm_scope_new(c->p[k - 1], NULL, &c->p[k]));
    c->q[k] = pp_scope_new(c->q[k - 1]);
  }
  for (int i = 0; i < n; i++) {
    pdshm_var *v;
    CHECK(pdshm_var_create(c->p[0], names[i], &v));
    pp_var(c->q[0], names[i]);
  }
}

static void destroy(struct chains *c) {
  for (int k = DEPTH; k >= 0; k--) {
    pdshm_scope_release(c->p[k]);
    pp_scope_delete(c->q[k]);
  }
}

static double time_pdshm_find(pdshm_scope *s, char **names, const int *order, int count) {
  double t0 = now_ns();
  for (int i = 0; i < count; i++) sink += (uintptr_t)pdshm_find_var(s, names[order[i]]);
  return (now_ns() - t0) / count;
}

static double time_peer_find(void *s, char **names, const int *order, int count) {
  double t0 = now_ns();
  for (int i = 0; i < count; i++) sink += (uintptr_t)pp_find(s, names[order[i]]);
  return (now_ns() - t0) / count;
}

static void bench_lookups(pdshm_scope *root, int n, int count) {
  char **names = make_names(n, "fc", ".w_0"), **missing = make_names(n, "nope", ".b");
  int *order = make_order(n, count);
  struct chains c;
  build(root, &c, names, n);
  struct {
    const char *what;
    int level;
    char **keys;
    double target;
  } cases[] = {{"lookup hit, in scope", 0, names, n == 10000 ? 0.5 : 0},
               {"lookup hit, parent depth 1", 1, names, 0},
               {"lookup hit, parent depth 8", DEPTH, names, 0},
               {"lookup miss (depth 0)", 0, missing, 0}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    time_pdshm_find(c.p[cases[k].level], cases[k].keys, order, count / 10); /* warm */
    time_peer_find(c.q[cases[k].level], cases[k].keys, order, count / 10);
    struct row r = {cases[k].what, n, 0, 0, cases[k].target};
    r.pdshm_ns = time_pdshm_find(c.p[cases[k].level], cases[k].keys, order, count);
    r.peer_ns = time_peer_find(c.q[cases[k].level], cases[k].keys, order, count);
    print_row(&r);
  }
  destroy(&c);
  for (int i = 0; i < n; i++) free(names[i]), free(missing[i]);
  free(names);
  free(missing);
  free(order);
}

/* ---- create / erase, and the step cycle ----------------------------------------- */

static void bench_create_erase(pdshm_scope *root, int n, int rounds) {
  char **names = make_names(n, "tmp", "");
  pdshm_scope *s;
  CHECK(pdshm_scope_new(root, NULL, &s));
  void *q = pp_scope_new(NULL);
  double t0 = now_ns();
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < n; i++) {
      pdshm_var *v;
      CHECK(pdshm_var_get(s, names[i], &v));
    }
    for (int i = 0; i < n; i++) CHECK(pdshm_var_erase(s, names[i]));
  }
  double a = (now_ns() - t0) / ((double)rounds * n);
  t0 = now_ns();
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < n; i++) pp_var(q, names[i]);
    for (int i = 0; i < n; i++) pp_erase(q, names[i]);
  }
  double b = (now_ns() - t0) / ((double)rounds * n);
  struct row row = {"get-or-create + erase", n, a, b, 0};
  print_row(&row);
  pdshm_scope_release(s);
  pp_scope_delete(q);
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

static void bench_step_cycle(pdshm_scope *root, int steps) {
  static const char *vn[10] = {"x", "h0", "h1", "h2", "h3", "y", "dy", "dh", "dx", "loss"};
  pdshm_scope *params;
  CHECK(pdshm_scope_new(root, "bench_params", &params));
  void *qparams = pp_scope_new(NULL);
  int64_t d = 1024; /* 4 KiB of F32 */
  double t0 = now_ns();
  for (int s = 0; s < steps; s++) {
    pdshm_scope *local;
    CHECK(pdshm_scope_new(params, NULL, &local));
    for (int i = 0; i < 10; i++) {
      pdshm_var *v;
      CHECK(pdshm_var_get(local, vn[i], &v));
      CHECK(pdshm_tensor_resize(v, PDSHM_F32, 1, &d));
    }
    CHECK(pdshm_scope_release(local));
  }
  double a = (now_ns() - t0) / steps;
  t0 = now_ns();
  for (int s = 0; s < steps; s++) {
    void *local = pp_scope_new(qparams);
    for (int i = 0; i < 10; i++) sink += (uintptr_t)pp_resize(pp_var(local, vn[i]), 4096);
    pp_scope_delete(local);
  }
  double b = (now_ns() - t0) / steps;
  struct row row = {"step cycle (10 x 4 KiB)", 10, a, b, 1.0};
  print_row(&row);
  pdshm_scope_unlink(root, "bench_params");
  pdshm_scope_release(params);
  pp_scope_delete(qparams);
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  const char *name = "bench_model";
  pdshm_seg *seg;
  pdshm_scope *root;
  pdshm_options o = {.size = 512u << 20};
  pdshm_unlink(name);
  CHECK(pdshm_create(name, &o, &seg));
  CHECK(pdshm_root(seg, &root));
  printf("%-28s %7s %10s %10s %9s\n", "scenario", "names", "pdshm ns", "paddle ns", "ratio");
  int sizes[] = {100, 10000, 100000};
  for (int i = 0; i < 3; i++) {
    fprintf(stderr, "bench_model: lookups at %d names\n", sizes[i]);
    bench_lookups(root, sizes[i], quick ? 200000 : 2000000);
  }
  fprintf(stderr, "bench_model: create/erase, step cycle\n");
  bench_create_erase(root, 1000, quick ? 20 : 200);
  bench_step_cycle(root, quick ? 20000 : 200000);
  pdshm_scope_release(root);
  pdshm_detach(seg);
  pdshm_unlink(name);
  return 0;
}
