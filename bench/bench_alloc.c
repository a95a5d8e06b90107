/*
 * bench_alloc - the segment's allocator against jemalloc, in the same run.
 *
 * Blocks of 64 B, 256 B, 1 KiB, 4 KiB, 64 KiB and 1 MiB, in two patterns:
 *   pair   alloc one block, free it, again;
 *   batch  alloc N blocks, then free the N (N = 256, fewer for big blocks).
 * First in one process; then one process against two processes running at
 * once (forked; each attaches the segment by name, as a trainer would), for
 * the aggregate throughput.
 *
 * The pdshm side calls the internal allocator (pdshm__alloc / pdshm__free)
 * and takes a lane once per operation (pdshm__lane_get / _put around each
 * alloc and each free), as the library's own operations do.  The jemalloc
 * side calls plain malloc / free: Debian's jemalloc has no prefix, and the
 * program checks that malloc really is jemalloc's before it measures.  Both
 * sides write the first byte of each block they get, as a caller would.
 *
 * Targets: small sizes (<= 4 KiB) within 2x of jemalloc's ns/op in one
 * process; two processes reach 1.6x the aggregate throughput of one.
 *
 * usage: bench_alloc [--quick]      the table on stdout, progress on stderr
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "heap/heap.h" /* pdshm__alloc, pdshm__lane_get */
#include "peers.h"    /* peer_malloc_is_jemalloc */

#define SEG_SIZE (512ull << 20)
#define BATCH_MAX 256
#define BATCH_BYTES (16u << 20) /* a batch holds at most this much          */
#define SMALL_MAX 4096          /* "small" for the 2x target                */
#define TARGET_RATIO 2.0
#define TARGET_SCALING 1.6

static const size_t sizes[] = {64, 256, 1024, 4096, 64u << 10, 1u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

enum side { PDSHM, JEMALLOC };

static double run_seconds = 1.0; /* per measurement; --quick: 0.15 */
static char seg_name[64];        /* "bench_alloc-PID": runs do not collide */
static pid_t creator;            /* who unlinks it, also on failure */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_alloc: %s: %s (%s)\n", what, pdshm_strerror(rc), pdshm_last_error());
  if (creator == getpid()) pdshm_unlink(seg_name);
  exit(1);
}

static int batch_of(size_t size, bool batch) {
  if (!batch) return 1;
  size_t n = BATCH_BYTES / size;
  return n > BATCH_MAX ? BATCH_MAX : (int)n;
}

/* ---- the two allocators, one operation each ------------------------------------- */

static pdshm_off_t seg_alloc(pdshm_seg *seg, size_t n) {
  pdshm_off_t off;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  int rc = pdshm__alloc(seg, ln, n, PDSHM_T_RAW, &off);
  pdshm__lane_put(ln);
  if (rc) die("pdshm__alloc", rc);
  seg->base[off] = 1;
  return off;
}

static void seg_free(pdshm_seg *seg, pdshm_off_t off) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm__free(seg, ln, off);
  pdshm__lane_put(ln);
}

static void *je_alloc(size_t n) {
  char *p = malloc(n);
  if (!p) {
    fprintf(stderr, "bench_alloc: malloc(%zu) failed\n", n);
    exit(1);
  }
  *(volatile char *)p = 1;
  return p;
}

/* One round: `batch` allocations, then their frees.  2 * batch operations. */
static void round_pdshm(pdshm_seg *seg, size_t size, int batch) {
  pdshm_off_t offs[BATCH_MAX];
  for (int i = 0; i < batch; i++) offs[i] = seg_alloc(seg, size);
  for (int i = 0; i < batch; i++) seg_free(seg, offs[i]);
}

static void round_jemalloc(size_t size, int batch) {
  void *ptrs[BATCH_MAX];
  for (int i = 0; i < batch; i++) ptrs[i] = je_alloc(size);
  for (int i = 0; i < batch; i++) free(ptrs[i]);
}

/* Runs rounds for about `seconds` (the clock read every ~4096 operations);
 * returns operations per second. */
static double measure(enum side side, pdshm_seg *seg, size_t size, int batch, double seconds) {
  int per_check = 2048 / batch > 0 ? 2048 / batch : 1;
  uint64_t ops = 0;
  double t0 = now_s(), t;
  do {
    for (int k = 0; k < per_check; k++) {
      if (side == PDSHM) round_pdshm(seg, size, batch);
      else round_jemalloc(size, batch);
    }
    ops += 2u * (unsigned)(per_check * batch);
  } while ((t = now_s()) - t0 < seconds);
  return (double)ops / (t - t0);
}

/* ---- one process --------------------------------------------------------------- */

static void one_process(pdshm_seg *seg) {
  printf("\none process (ns per operation; an operation is one alloc or one free)\n");
  printf("%-8s %-7s %4s  %12s %8s  %12s %8s  %8s  %s\n", "size", "pattern", "N", "pdshm ops/s",
         "ns/op", "jemalloc", "ns/op", "pdshm/je", "target: small <= 2.00x");
  int pass = 0, miss = 0;
  for (size_t k = 0; k < NSIZES; k++) {
    for (int b = 0; b < 2; b++) {
      size_t size = sizes[k];
      int batch = batch_of(size, b);
      fprintf(stderr, "bench_alloc: one process, %zu B %s\n", size, b ? "batch" : "pair");
      measure(PDSHM, seg, size, batch, run_seconds / 5); /* warm both */
      measure(JEMALLOC, NULL, size, batch, run_seconds / 5);
      double a = measure(PDSHM, seg, size, batch, run_seconds);
      double j = measure(JEMALLOC, NULL, size, batch, run_seconds);
      double ratio = j / a; /* pdshm ns/op over jemalloc ns/op */
      printf("%-8zu %-7s %4d  %12.0f %8.1f  %12.0f %8.1f  %7.2fx", size, b ? "batch" : "pair",
             batch, a, 1e9 / a, j, 1e9 / j, ratio);
      if (size <= SMALL_MAX) {
        bool ok = ratio <= TARGET_RATIO;
        printf("  %s", ok ? "PASS" : "MISS");
        ok ? pass++ : miss++;
      }
      printf("\n");
      fflush(stdout);
    }
  }
  printf("small sizes within %.1fx of jemalloc: %d PASS, %d MISS\n", TARGET_RATIO, pass, miss);
}

/* ---- one against two processes ------------------------------------------------------ */

/* A forked worker: attaches (pdshm), waits for the start, measures, reports. */
static void worker(enum side side, size_t size, int batch, int start_fd, int back_fd) {
  pdshm_seg *seg = NULL;
  if (side == PDSHM) {
    int rc = pdshm_attach(seg_name, NULL, &seg);
    if (rc) die("pdshm_attach", rc);
    measure(PDSHM, seg, size, batch, run_seconds / 10); /* warm our caches */
  }
  char c;
  if (write(back_fd, "r", 1) != 1) _exit(1); /* attached */
  while (read(start_fd, &c, 1) > 0) continue; /* start: end-of-file */
  double rate = measure(side, seg, size, batch, run_seconds);
  if (write(back_fd, &rate, sizeof rate) != sizeof rate) _exit(1);
  if (seg) pdshm_detach(seg);
  _exit(0);
}

/* nproc workers at once; their aggregate operations per second. */
static double procs_run(enum side side, int nproc, size_t size, int batch) {
  int start[2], back[2];
  if (pipe(start) || pipe(back)) exit(1);
  fflush(NULL);
  for (int p = 0; p < nproc; p++) {
    pid_t pid = fork();
    if (pid < 0) exit(1);
    if (pid == 0) {
      close(start[1]);
      close(back[0]);
      worker(side, size, batch, start[0], back[1]);
    }
  }
  close(start[0]);
  close(back[1]);
  char c;
  for (int p = 0; p < nproc; p++) /* every worker attached and warm */
    if (read(back[0], &c, 1) != 1) exit(1);
  close(start[1]); /* go */
  double sum = 0, rate;
  for (int p = 0; p < nproc; p++) {
    if (read(back[0], &rate, sizeof rate) != sizeof rate) {
      fprintf(stderr, "bench_alloc: a worker failed\n");
      exit(1);
    }
    sum += rate;
  }
  close(back[0]);
  int status, bad = 0;
  while (wait(&status) > 0) bad |= !WIFEXITED(status) || WEXITSTATUS(status);
  if (bad) exit(1);
  return sum;
}

static void scaling(void) {
  printf("\none process against two at once (aggregate operations per second; "
         "%ld cores online)\n", sysconf(_SC_NPROCESSORS_ONLN));
  printf("%-8s %-7s %4s  %12s %12s %6s  %12s %12s %6s  %s\n", "size", "pattern", "N",
         "pdshm 1 proc", "2 procs", "2/1", "jemalloc 1", "2 procs", "2/1", "target: pdshm 2/1 >= 1.60x");
  int pass = 0, miss = 0;
  for (size_t k = 0; k < NSIZES; k++) {
    for (int b = 0; b < 2; b++) {
      size_t size = sizes[k];
      int batch = batch_of(size, b);
      fprintf(stderr, "bench_alloc: 1 and 2 processes, %zu B %s\n", size, b ? "batch" : "pair");
      double one = procs_run(PDSHM, 1, size, batch), two = procs_run(PDSHM, 2, size, batch);
      double jone = procs_run(JEMALLOC, 1, size, batch);
      double jtwo = procs_run(JEMALLOC, 2, size, batch);
      bool ok = two / one >= TARGET_SCALING;
      ok ? pass++ : miss++;
      printf("%-8zu %-7s %4d  %12.0f %12.0f %5.2fx  %12.0f %12.0f %5.2fx  %s\n", size,
             b ? "batch" : "pair", batch, one, two, two / one, jone, jtwo, jtwo / jone,
             ok ? "PASS" : "MISS");
      fflush(stdout);
    }
  }
  printf("two processes at >= %.1fx of one: %d PASS, %d MISS\n", TARGET_SCALING, pass, miss);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      run_seconds = 0.15;
    } else {
      fprintf(stderr, "usage: bench_alloc [--quick]\n");
      return 2;
    }
  }
  printf("bench_alloc: the segment's allocator against jemalloc (%s)\n",
         run_seconds < 1 ? "--quick" : "full");
  if (!peer_malloc_is_jemalloc(stdout)) {
    fprintf(stderr, "bench_alloc: malloc is not jemalloc's: the comparison would be wrong\n");
    return 1;
  }
  printf("pdshm      pdshm__alloc / pdshm__free, a lane taken per operation "
         "(pdshm__lane_get/_put around each alloc and each free)\n");
  printf("segment    %llu MiB; each figure from %.2f s of operations\n",
         (unsigned long long)(SEG_SIZE >> 20), run_seconds);

  pdshm_seg *seg;
  pdshm_options o = {.size = SEG_SIZE};
  creator = getpid();
  snprintf(seg_name, sizeof seg_name, "bench_alloc-%d", (int)creator);
  int rc = pdshm_create(seg_name, &o, &seg);
  if (rc) die("pdshm_create", rc);
  one_process(seg);
  scaling(); /* the workers attach the segment by name */
  pdshm_detach(seg);
  pdshm_unlink(seg_name);
  return 0;
}
