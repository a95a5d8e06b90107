/*
 * bench_grow - what growth costs: a segment that grows by 1 GiB in steps of
 * 64 MiB against plain fallocate of the same bytes, and the allocator's and
 * the lookups' hot paths in a segment that may grow against a fixed one, in
 * the same run.
 *
 *   growth   a segment of 64 MiB (max_size 1 GiB + 64 MiB) gets 16 tensors
 *            of 64 MiB, each allocation growing it (lib/heap/heap_grow.c);
 *            the peer fallocates the same 16 steps of 64 MiB at the end of a
 *            plain file in /dev/shm.  Target: a growth costs what its
 *            fallocate costs, give or take the time's noise.
 *   hot      alloc/free pairs of 256 B and 64 KiB (internal calls, a lane
 *            per operation, as bench_alloc), and pdshm_find_var over 1000
 *            variables, in a fixed segment (max_size == size) and in one
 *            that may grow (max_size 4x), alternated, best of 15 each.
 *            Target: the growing one at least 0.97x the fixed one's
 *            operations per second.
 *
 * usage: bench_grow [--quick]      the table on stdout, progress on stderr
 */
#include "config.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "heap/heap.h" /* pdshm__alloc, pdshm__lane_get */

#define MIB (1ull << 20)
#define STEP (64 * MIB)
#define STEPS 16
#define HOT_SIZE (64 * MIB)
#define NVARS 1000
#define TRIES 5       /* growth runs                                 */
#define HOT_TRIES 15  /* hot-path measurements of each side, alternated */
#define TARGET_RATIO 0.97

static double run_seconds = 0.2; /* per hot-path measurement; --quick: 0.05 */
static char seg_name[64];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_grow: %s: %s (%s)\n", what, pdshm_strerror(rc), pdshm_last_error());
  pdshm_unlink(seg_name);
  exit(1);
}

static pdshm_seg *make(size_t size, size_t max) {
  pdshm_options o = {.size = size, .max_size = max, .max_procs = 8};
  pdshm_seg *s;
  pdshm_unlink(seg_name);
  int rc = pdshm_create(seg_name, &o, &s);
  if (rc) die("create", rc);
  return s;
}

static void drop(pdshm_seg *s) {
  pdshm_detach(s);
  pdshm_unlink(seg_name);
}

/* ---- growth against fallocate ------------------------------------------------------ */

/* Seconds for STEPS tensors of STEP bytes in a segment that starts with
 * room for none; *growths gets how often it grew. */
static double grow_run(uint64_t *growths) {
  pdshm_seg *s = make(STEP, (STEPS + 1) * STEP);
  pdshm_scope *root;
  int rc = pdshm_root(s, &root);
  if (rc) die("root", rc);
  double t0 = now_s();
  for (int k = 0; k < STEPS; k++) {
    char nm[16];
    pdshm_var *v;
    snprintf(nm, sizeof nm, "t%d", k);
    if ((rc = pdshm_var_create(root, nm, &v)) ||
        (rc = pdshm_tensor_resize(v, PDSHM_U8, 1, (int64_t[]){(int64_t)STEP - 4096})))
      die("resize", rc);
  }
  double t = now_s() - t0;
  pdshm_seg_info si;
  if ((rc = pdshm_inspect_seg(s, &si))) die("inspect", rc);
  *growths = si.growths;
  pdshm_scope_release(root);
  drop(s);
  return t;
}

/* Seconds to fallocate STEPS extents of STEP bytes at the end of a plain file. */
static double fallocate_run(void) {
  char path[96];
  snprintf(path, sizeof path, "/dev/shm/bench_grow-%d.plain", (int)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || fallocate(fd, 0, 0, (off_t)STEP)) {
    perror(path);
    exit(1);
  }
  double t0 = now_s();
  for (int k = 1; k <= STEPS; k++)
    if (fallocate(fd, 0, (off_t)(k * STEP), (off_t)STEP)) {
      perror("fallocate");
      unlink(path);
      exit(1);
    }
  double t = now_s() - t0;
  close(fd);
  unlink(path);
  return t;
}

static void growth(void) {
  double best_g = 1e9, best_f = 1e9;
  uint64_t growths = 0;
  for (int i = 0; i < TRIES; i++) {
    fprintf(stderr, "bench_grow: growth, try %d\n", i + 1);
    double g = grow_run(&growths), f = fallocate_run();
    best_g = g < best_g ? g : best_g;
    best_f = f < best_f ? f : best_f;
  }
  printf("\ngrowing by 1 GiB in steps of 64 MiB (best of %d)\n", TRIES);
  printf("%-34s %10s %12s\n", "", "ms", "ms per GiB");
  printf("%-34s %10.2f %12.2f\n", "pdshm: 16 tensors of 64 MiB", best_g * 1e3, best_g * 1e3);
  printf("%-34s %10.2f %12.2f\n", "fallocate: 16 extents of 64 MiB", best_f * 1e3, best_f * 1e3);
  printf("growths made: %llu (geometric: fewer, larger steps than the 16 allocations)\n",
         (unsigned long long)growths);
  printf("pdshm / fallocate: %.2fx\n", best_g / best_f);
}

/* ---- the hot paths with and without growth ------------------------------------------- */

enum hot { ALLOC_SMALL, ALLOC_LARGE, LOOKUP, NHOT };
static const char *const hot_names[NHOT] = {"alloc+free 256 B", "alloc+free 64 KiB",
                                            "find_var (1000 vars)"};

struct hot_seg {
  pdshm_seg *seg;
  pdshm_scope *root;
  char names[NVARS][16];
};

static void hot_fill(struct hot_seg *h) {
  int rc = pdshm_root(h->seg, &h->root);
  if (rc) die("root", rc);
  for (int i = 0; i < NVARS; i++) {
    pdshm_var *v;
    snprintf(h->names[i], sizeof h->names[i], "v%d", i);
    if ((rc = pdshm_var_create(h->root, h->names[i], &v))) die("var_create", rc);
  }
}

static unsigned hot_round(struct hot_seg *h, enum hot what, unsigned i) {
  if (what == LOOKUP) {
    for (unsigned k = 0; k < 256; k++)
      if (!pdshm_find_var(h->root, h->names[(i + k * 7) % NVARS])) die("find_var", PDSHM_ENOENT);
    return 256;
  }
  size_t n = what == ALLOC_SMALL ? 256 : 64u << 10;
  for (unsigned k = 0; k < 128; k++) {
    pdshm_off_t off;
    struct pdshm_lane_ctx *ln = pdshm__lane_get(h->seg);
    int rc = pdshm__alloc(h->seg, ln, n, PDSHM_T_RAW, &off);
    pdshm__lane_put(ln);
    if (rc) die("pdshm__alloc", rc);
    h->seg->base[off] = 1;
    ln = pdshm__lane_get(h->seg);
    pdshm__free(h->seg, ln, off);
    pdshm__lane_put(ln);
  }
  return 256;
}

static double hot_measure(struct hot_seg *h, enum hot what) {
  uint64_t ops = 0;
  unsigned i = 0;
  double t0 = now_s(), t;
  do {
    for (int k = 0; k < 16; k++) ops += hot_round(h, what, i++);
  } while ((t = now_s()) - t0 < run_seconds);
  return (double)ops / (t - t0);
}

static void hot(void) {
  static struct hot_seg fixed, growing;
  char fixed_name[80], growing_name[80];
  snprintf(fixed_name, sizeof fixed_name, "%s.fixed", seg_name);
  snprintf(growing_name, sizeof growing_name, "%s.growing", seg_name);
  pdshm_options of = {.size = HOT_SIZE, .max_size = HOT_SIZE, .max_procs = 8};
  pdshm_options og = {.size = HOT_SIZE, .max_size = 4 * HOT_SIZE, .max_procs = 8};
  pdshm_unlink(fixed_name);
  pdshm_unlink(growing_name);
  int rc = pdshm_create(fixed_name, &of, &fixed.seg);
  if (!rc) rc = pdshm_create(growing_name, &og, &growing.seg);
  if (rc) die("create", rc);
  hot_fill(&fixed);
  hot_fill(&growing);
  printf("\nhot paths: a fixed segment against one that may grow (ops/s, best of %d)\n",
         HOT_TRIES);
  printf("%-22s %14s %14s %8s  %s\n", "", "fixed", "growing", "ratio", "target >= 0.97x");
  for (int w = 0; w < NHOT; w++) {
    double bf = 0, bg = 0;
    fprintf(stderr, "bench_grow: %s\n", hot_names[w]);
    hot_measure(&fixed, (enum hot)w); /* warm both */
    hot_measure(&growing, (enum hot)w);
    for (int i = 0; i < HOT_TRIES; i++) { /* alternated, best of each: load hits both */
      double f = hot_measure(&fixed, (enum hot)w), g = hot_measure(&growing, (enum hot)w);
      bf = f > bf ? f : bf;
      bg = g > bg ? g : bg;
    }
    double ratio = bg / bf;
    printf("%-22s %14.0f %14.0f %7.3fx  %s\n", hot_names[w], bf, bg, ratio,
           ratio >= TARGET_RATIO ? "met" : "MISSED");
  }
  pdshm_scope_release(fixed.root);
  pdshm_scope_release(growing.root);
  pdshm_detach(fixed.seg);
  pdshm_detach(growing.seg);
  pdshm_unlink(fixed_name);
  pdshm_unlink(growing_name);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--quick")) run_seconds = 0.05;
  else if (argc > 1) {
    fprintf(stderr, "usage: bench_grow [--quick]\n");
    return 2;
  }
  snprintf(seg_name, sizeof seg_name, "bench_grow-%d", (int)getpid());
  uint64_t total = 0, avail = 0;
  if (!pdshm__shmfs_space(-1, &total, &avail) && avail < (STEPS + 4) * STEP) {
    printf("bench_grow: /dev/shm has %llu MiB free, the growth bench needs %llu: skipped\n",
           (unsigned long long)(avail >> 20), (unsigned long long)((STEPS + 4) * STEP >> 20));
  } else {
    growth();
  }
  hot();
  return 0;
}
