/*
 * bench_alloc - the segment's allocator against jemalloc's mallocx/dallocx,
 * in the same run: blocks of 64 B to 1 MiB, as alloc/free pairs and as
 * batches (256 allocations, then 256 frees); then two processes allocating
 * in one segment at once, against one.  Each pdshm operation takes and gives
 * back a lane, as the library's own operations do.
 *
 * usage: bench_alloc [--quick]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jemalloc/jemalloc.h>

#include "internal.h"

#define BATCH 256

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_alloc: %s: %s (%s)\n", what, pdshm_strerror(rc), pdshm_last_error());
  exit(1);
}

static pdshm_off_t seg_alloc(pdshm_seg *seg, size_t n) {
  pdshm_off_t off;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  int rc = pdshm__alloc(seg, ln, n, PDSHM_T_RAW, &off);
  pdshm__lane_put(ln);
  if (rc) die("alloc", rc);
  return off;
}

static void seg_free(pdshm_seg *seg, pdshm_off_t off) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm__free(seg, ln, off);
  pdshm__lane_put(ln);
}

/* ns per operation (an alloc or a free) of `rounds` batches of `batch`. */
static double run_pdshm(pdshm_seg *seg, size_t size, int batch, long rounds) {
  pdshm_off_t offs[BATCH];
  double t0 = now_ns();
  for (long r = 0; r < rounds; r++) {
    for (int i = 0; i < batch; i++) offs[i] = seg_alloc(seg, size);
    for (int i = 0; i < batch; i++) seg_free(seg, offs[i]);
  }
  return (now_ns() - t0) / ((double)rounds * batch * 2);
}

static double run_jemalloc(size_t size, int batch, long rounds) {
  void *ptrs[BATCH];
  double t0 = now_ns();
  for (long r = 0; r < rounds; r++) {
    for (int i = 0; i < batch; i++) {
      ptrs[i] = mallocx(size, 0);
      *(volatile char *)ptrs[i] = 1; /* as the caller would */
    }
    for (int i = 0; i < batch; i++) dallocx(ptrs[i], 0);
  }
  return (now_ns() - t0) / ((double)rounds * batch * 2);
}

/* ---- one process ------------------------------------------------------------- */

static void one_process(pdshm_seg *seg, bool quick) {
  static const size_t sizes[] = {64, 256, 1024, 4096, 65536, 1u << 20};
  printf("%-10s %-8s %11s %11s %8s\n", "size", "pattern", "pdshm ns", "jemalloc ns", "ratio");
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t size = sizes[k];
    long ops = (quick ? 200000L : 2000000L) / (size >= 65536 ? 20 : 1);
    for (int pattern = 0; pattern < 2; pattern++) {
      int batch = pattern ? BATCH : 1;
      long rounds = ops / batch;
      run_pdshm(seg, size, batch, rounds / 10 + 1); /* warm both */
      run_jemalloc(size, batch, rounds / 10 + 1);
      double a = run_pdshm(seg, size, batch, rounds), b = run_jemalloc(size, batch, rounds);
      printf("%-10zu %-8s %11.1f %11.1f %7.2fx", size, pattern ? "batch" : "pair", a, b, a / b);
      if (size <= 4096) printf("   target <= 2.00x %s", a / b <= 2.0 ? "PASS" : "MISS");
      printf("\n");
      fflush(stdout);
    }
  }
}

/* ---- several processes ------------------------------------------------------------ */

/* Each child attaches (pdshm) or not (jemalloc), waits for the start, runs
 * `rounds` batches of `batch`, reports its time; returns aggregate ops/s. */
static double procs_run(const char *name, int nproc, size_t size, int batch, long rounds,
                        bool peer) {
  int start[2], back[2];
  if (pipe(start) || pipe(back)) exit(1);
  for (int p = 0; p < nproc; p++) {
    fflush(NULL);
    if (fork() == 0) {
      pdshm_seg *s = NULL;
      char go;
      int rc = peer ? 0 : pdshm_attach(name, NULL, &s);
      if (rc) die("attach", rc);
      if (read(start[0], &go, 1) != 1) _exit(1);
      double t0 = now_ns();
      if (peer) run_jemalloc(size, batch, rounds);
      else run_pdshm(s, size, batch, rounds);
      double el = now_ns() - t0;
      if (write(back[1], &el, sizeof el) != sizeof el) _exit(1);
      if (s) pdshm_detach(s);
      _exit(0);
    }
  }
  usleep(100000); /* let every child attach */
  if (write(start[1], "gggggggg", (size_t)nproc) != nproc) exit(1);
  double worst = 0;
  for (int p = 0; p < nproc; p++) {
    double el;
    if (read(back[0], &el, sizeof el) != sizeof el) exit(1);
    if (el > worst) worst = el;
  }
  while (wait(NULL) > 0) continue;
  close(start[0]), close(start[1]), close(back[0]), close(back[1]);
  return (double)nproc * rounds * batch * 2 / worst * 1e9;
}

static void scaling(const char *name, bool quick) {
  static const size_t sizes[] = {64, 1024, 4096};
  long ops = quick ? 1000000 : 10000000;
  printf("\n%-6s %-8s %13s %13s %8s %9s\n", "size", "pattern", "1 proc ops/s", "2 procs ops/s",
         "pdshm", "jemalloc");
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    for (int pattern = 0; pattern < 2; pattern++) {
      int batch = pattern ? BATCH : 1;
      long rounds = ops / batch;
      double one = procs_run(name, 1, sizes[k], batch, rounds, false);
      double two = procs_run(name, 2, sizes[k], batch, rounds, false);
      double jone = procs_run(name, 1, sizes[k], batch, rounds, true);
      double jtwo = procs_run(name, 2, sizes[k], batch, rounds, true);
      printf("%-6zu %-8s %13.0f %13.0f %7.2fx %8.2fx   target >= 1.60x %s\n", sizes[k],
             pattern ? "batch" : "pair", one, two, two / one, jtwo / jone,
             two / one >= 1.6 ? "PASS" : "MISS");
      fflush(stdout);
    }
  }
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  const char *name = "bench_alloc";
  const char *ver;
  size_t len = sizeof ver;
  if (mallctl("version", &ver, &len, NULL, 0) == 0) printf("jemalloc %s\n", ver);
  pdshm_seg *seg;
  pdshm_options o = {.size = 1u << 30};
  pdshm_unlink(name);
  int rc = pdshm_create(name, &o, &seg);
  if (rc) die("create", rc);
  one_process(seg, quick);
  scaling(name, quick);
  pdshm_detach(seg);
  pdshm_unlink(name);
  return 0;
}
