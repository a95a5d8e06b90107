/*
 * bench_group - trainer groups: allreduce against the memory-bandwidth bound,
 * and the barrier's round trip, measured in the same run.
 *
 *  1. Allreduce (f32, SUM) of 4 KiB .. 100 MiB among 2, 4 and 8 processes.
 *     Each member reduces 1/N of the elements across the N buffers and writes
 *     the result back to all N: it reads and writes as many bytes as its own
 *     tensor holds.  The bound is the same processes, at the same time, each
 *     memcpy()ing a tensor of that size into another one in the segment; the
 *     ratio is allreduce time / memcpy time (1.0 would be the bound; the two
 *     barrier rounds an allreduce takes count against it at small sizes).
 *  2. Barrier round trip between 2 processes (each iteration is one barrier
 *     of both), against a round trip through a pair of pipes.
 *  3. A death: ms from the kill() of one of 2 members until the other one's
 *     barrier returns EOWNERDEAD, and until its pdshm_group_regroup has made
 *     the group one of 1 (no replacement) and a barrier passed at that size,
 *     against kill() until waitpid() returns for a process that holds
 *     nothing (how long the kernel takes to end one).  With nobody reaping,
 *     a sleeping member looks for deaths between its sleeps, which last up
 *     to 5 ms: so the 7 kills come at points spread over 5 ms of the wait,
 *     and the median and the largest are printed.
 *
 * The machine's cores are shared: with more processes than cores, the
 * figures measure the scheduler as much as pdshm.
 *
 * usage: bench_group [--quick]      figures on stdout
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pdshm.h"

#define SEC 1e9

static char seg_name[64];
static int quick;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * SEC + (double)ts.tv_nsec;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_group: %s: %s (%s)\n", what, pdshm_strerror(rc), pdshm_last_error());
  exit(2);
}

struct result {
  double allreduce_ns, memcpy_ns; /* per operation, rank 0's view */
  int failed;
};

struct member_arg {
  int rank, nproc, iters;
  size_t bytes;
  char group[64];
  struct result *out;
};

static void timed_barrier(pdshm_group *g) {
  int rc = pdshm_group_barrier(g, 60 * (int64_t)SEC);
  if (rc) die("barrier", rc);
}

static int member(const struct member_arg *a) {
  pdshm_seg *seg;
  pdshm_scope *root, *mine;
  pdshm_var *v, *from, *to;
  pdshm_group *g;
  int rc = pdshm_attach(seg_name, NULL, &seg);
  if (!rc) rc = pdshm_root(seg, &root);
  if (!rc) rc = pdshm_scope_new(root, NULL, &mine);
  int64_t n = (int64_t)(a->bytes / 4);
  if (!rc) rc = pdshm_var_new(mine, &v);
  if (!rc) rc = pdshm_var_new(mine, &from);
  if (!rc) rc = pdshm_var_new(mine, &to);
  if (!rc) rc = pdshm_tensor_resize(v, PDSHM_F32, 1, &n);
  if (!rc) rc = pdshm_tensor_resize(from, PDSHM_F32, 1, &n);
  if (!rc) rc = pdshm_tensor_resize(to, PDSHM_F32, 1, &n);
  if (!rc) rc = pdshm_group_join(seg, a->group, (unsigned)a->nproc, a->rank, &g);
  if (rc) die("member setup", rc);
  memset(pdshm_tensor_data(v), 0, a->bytes);
  memset(pdshm_tensor_data(from), 1, a->bytes);
  memset(pdshm_tensor_data(to), 0, a->bytes);
  double best_ar = 1e30, best_mc = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    timed_barrier(g);
    double t0 = now_ns();
    for (int i = 0; i < a->iters; i++)
      memcpy(pdshm_tensor_data(to), pdshm_tensor_data(from), a->bytes);
    timed_barrier(g);
    double t1 = now_ns();
    for (int i = 0; i < a->iters; i++)
      if ((rc = pdshm_group_allreduce(g, v, PDSHM_SUM, 60 * (int64_t)SEC))) die("allreduce", rc);
    double t2 = now_ns();
    if ((t1 - t0) / a->iters < best_mc) best_mc = (t1 - t0) / a->iters;
    if ((t2 - t1) / a->iters < best_ar) best_ar = (t2 - t1) / a->iters;
  }
  if (a->rank == 0) *a->out = (struct result){.allreduce_ns = best_ar, .memcpy_ns = best_mc};
  pdshm_group_leave(g);
  pdshm_scope_release(mine);
  pdshm_scope_release(root);
  pdshm_detach(seg);
  return 0;
}

static struct result run_allreduce(int nproc, size_t bytes, struct result *shared) {
  static int serial;
  double target = quick ? 0.02 : 0.15; /* seconds per measurement */
  int iters = (int)(target * 4e9 / (double)bytes);
  iters = iters < 3 ? 3 : iters > 20000 ? 20000 : iters;
  memset(shared, 0, sizeof *shared);
  pid_t pid[8];
  struct member_arg a = {.nproc = nproc, .iters = iters, .bytes = bytes, .out = shared};
  snprintf(a.group, sizeof a.group, "bench-%d", serial++);
  for (int r = 0; r < nproc; r++) {
    a.rank = r;
    fflush(NULL);
    if ((pid[r] = fork()) == 0) _exit(member(&a));
  }
  for (int r = 0; r < nproc; r++) {
    int st;
    waitpid(pid[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) shared->failed = 1;
  }
  return *shared;
}

static const char *human(size_t b, char *buf, size_t cap) {
  if (b >= 1u << 20) snprintf(buf, cap, "%zu MiB", b >> 20);
  else snprintf(buf, cap, "%zu KiB", b >> 10);
  return buf;
}

static void bench_allreduce(struct result *shared) {
  static const size_t full[] = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 100u << 20};
  static const size_t small[] = {4u << 10, 64u << 10, 1u << 20, 16u << 20};
  const size_t *sizes = quick ? small : full;
  size_t nsizes = quick ? 4 : 5;
  printf("allreduce f32 SUM, in place in the segment; bound: each process memcpy()s as many bytes\n");
  printf("%6s  %8s  %12s  %10s  %12s  %6s\n", "procs", "tensor", "allreduce", "GB/s/proc",
         "memcpy bound", "ratio");
  for (int nproc = 2; nproc <= 8; nproc *= 2)
    for (size_t i = 0; i < nsizes; i++) {
      char b[32];
      struct result r = run_allreduce(nproc, sizes[i], shared);
      if (r.failed) {
        printf("%6d  %8s  failed\n", nproc, human(sizes[i], b, sizeof b));
        continue;
      }
      printf("%6d  %8s  %9.1f us  %10.2f  %9.1f us  %6.2f\n", nproc, human(sizes[i], b, sizeof b),
             r.allreduce_ns / 1e3, 2.0 * (double)sizes[i] / r.allreduce_ns, r.memcpy_ns / 1e3,
             r.allreduce_ns / r.memcpy_ns);
      fflush(stdout);
    }
}

/* ---- barrier round trip ----------------------------------------------------------------- */

static int barrier_member(int rank, int iters, double *out) {
  pdshm_seg *seg;
  pdshm_group *g;
  int rc = pdshm_attach(seg_name, NULL, &seg);
  if (!rc) rc = pdshm_group_join(seg, "bench-barrier", 2, rank, &g);
  if (rc) die("barrier setup", rc);
  timed_barrier(g);
  double t0 = now_ns();
  for (int i = 0; i < iters; i++) timed_barrier(g);
  if (rank == 0) *out = (now_ns() - t0) / iters;
  pdshm_group_leave(g);
  pdshm_detach(seg);
  return 0;
}

static double pipe_round_trip(int iters) {
  int ab[2], ba[2];
  char c = 0;
  if (pipe(ab) || pipe(ba)) return 0;
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < iters; i++)
      if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1) _exit(1);
    _exit(0);
  }
  double t0 = now_ns();
  for (int i = 0; i < iters; i++)
    if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) break;
  double t = (now_ns() - t0) / iters;
  waitpid(pid, NULL, 0);
  close(ab[0]), close(ab[1]), close(ba[0]), close(ba[1]);
  return t;
}

static void bench_barrier(double *shared) {
  int iters = quick ? 20000 : 200000;
  pid_t pid = fork();
  if (pid == 0) _exit(barrier_member(1, iters, shared));
  barrier_member(0, iters, shared);
  waitpid(pid, NULL, 0);
  double pipes = pipe_round_trip(iters);
  printf("\nbarrier of 2 processes: %.2f us a round; a pipe round trip: %.2f us; ratio %.2f\n",
         *shared / 1e3, pipes / 1e3, *shared / pipes);
}

/* ---- a death ------------------------------------------------------------------------------ */

/* Joins the group as rank 1, says so, waits to be killed. */
static int doomed_member(const char *group, volatile int *joined) {
  pdshm_seg *seg;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &seg) || pdshm_group_join(seg, group, 2, 1, &g)) _exit(1);
  *joined = 1;
  for (;;) pause();
}

/* ns from the kill() of the other member, delay_us after its start, until
 * our barrier says it died; *regrouped: until the group went on without it
 * (a regroup and a barrier). */
static double told_of_a_death(int serial, useconds_t delay_us, volatile double *killed_at,
                              double *regrouped) {
  char group[64];
  snprintf(group, sizeof group, "bench-death-%d", serial);
  pdshm_seg *seg;
  pdshm_group *g;
  int rc = pdshm_attach(seg_name, NULL, &seg);
  if (!rc) rc = pdshm_group_join(seg, group, 2, 0, &g);
  if (rc) die("death setup", rc);
  volatile int *joined = (volatile int *)(killed_at + 1);
  *joined = 0;
  fflush(NULL);
  pid_t member = fork();
  if (member == 0) _exit(doomed_member(group, joined));
  while (!*joined) usleep(1000);
  pid_t killer = fork();
  if (killer == 0) { /* once we are in the barrier, most likely */
    usleep(delay_us);
    *killed_at = now_ns();
    kill(member, SIGKILL);
    _exit(0);
  }
  rc = pdshm_group_barrier(g, 60 * (int64_t)SEC);
  double lag = now_ns() - *killed_at;
  if (rc != PDSHM_EOWNERDEAD) die("a barrier beside a death", rc);
  int nr, ns;
  if ((rc = pdshm_group_regroup(g, 60 * (int64_t)SEC, &nr, &ns))) die("regroup", rc);
  if ((rc = pdshm_group_barrier(g, 60 * (int64_t)SEC))) die("a barrier after the regroup", rc);
  *regrouped = now_ns() - *killed_at;
  if (ns != 1) die("regroup's size", PDSHM_EINVAL);
  waitpid(killer, NULL, 0);
  waitpid(member, NULL, 0);
  pdshm_group_leave(g);
  pdshm_reap(seg, NULL);
  pdshm_detach(seg);
  return lag;
}

static double death_of_an_idle_process(void) {
  pid_t pid = fork();
  if (pid == 0) {
    for (;;) pause();
  }
  usleep(1000);
  double t0 = now_ns();
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return now_ns() - t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void bench_death(double *shared) {
  enum { REPS = 7, DELAY_US = 20000, SPREAD_US = 5000 };
  double told[REPS], regrouped[REPS], ended[REPS];
  for (int r = 0; r < REPS; r++) {
    told[r] = told_of_a_death(r, DELAY_US + r * SPREAD_US / REPS, shared, &regrouped[r]);
    ended[r] = death_of_an_idle_process();
  }
  qsort(told, REPS, sizeof told[0], cmp_double);
  qsort(regrouped, REPS, sizeof regrouped[0], cmp_double);
  qsort(ended, REPS, sizeof ended[0], cmp_double);
  printf("\na member SIGKILLed (%d kills spread over %d ms of the wait): its barrier's "
         "survivor told (EOWNERDEAD) %.2f ms after kill(), median (at most %.2f ms);\nthe "
         "survivor regrouped without it and passed a barrier of the group of 1 %.2f ms after "
         "kill(), median;\nbaseline: kill() until waitpid() returns, an idle process %.2f ms; "
         "ratio %.1f\n", REPS, SPREAD_US / 1000, told[REPS / 2] / 1e6, told[REPS - 1] / 1e6,
         regrouped[REPS / 2] / 1e6, ended[REPS / 2] / 1e6, told[REPS / 2] / ended[REPS / 2]);
}

int main(int argc, char **argv) {
  quick = argc > 1 && !strcmp(argv[1], "--quick");
  snprintf(seg_name, sizeof seg_name, "bench-group-%d", (int)getpid());
  size_t most = quick ? 16u << 20 : 100u << 20;
  pdshm_options o = {.size = 8 * 3 * most + (64u << 20), .max_procs = 32};
  pdshm_seg *seg;
  int rc = pdshm_create(seg_name, &o, &seg);
  if (rc) die("create", rc);
  void *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 2;
  bench_allreduce(shared);
  bench_barrier(shared);
  bench_death(shared);
  pdshm_detach(seg);
  pdshm_unlink(seg_name);
  return 0;
}
