/*
 * bench_allreduce - pdshm_group_allreduce against a DeepSpeed-style
 * shared-memory allreduce (the peer, peer_allreduce.h) and the memory-traffic
 * bound, float32 SUM, all measured in the same run; then pdshm's reduction
 * loop against a one-pass AVX2 loop on cached data.
 *
 *  1. For N = 2 and 4 processes (--procs N: one of them) and each size, every
 *     rank checks once that each subject's result is the exact sum (the
 *     inputs are small integers, whose float sums are exact), then R rounds
 *     (--rounds R); in each round every subject runs the same number of
 *     calls, one after the other, their order turning by one each round:
 *       peer      the peer: private input, private output;
 *       in place  pdshm_group_allreduce of a tensor in the segment;
 *       copy      pdshm_group_allreduce_private of the private output, which
 *                 holds the input (what a torch backend does with a private
 *                 tensor): the shares the others fold copied into a staging
 *                 tensor of the segment, and their folded shares copied
 *                 straight back;
 *     and rank 0 alone memcpy()s the input to the output (the others wait in
 *     a barrier): the single-process copy bandwidth at that size and moment.
 *     A subject's time is the slowest rank's; a ratio is taken per round, and
 *     the table shows the medians over the rounds (times and ratios alike).
 *  2. The bound: the bytes one rank reads plus the bytes it writes in the
 *     peer's algorithm, at the copy bandwidth of the same round (a memcpy of
 *     S bytes moves 2S), times N / cores when N exceeds the cores (ranks
 *     sharing a core take turns).  For S < 1 MiB: S read + S written (copy
 *     in), N*S read + S written (the sum into the output): (N+3)*S.  From
 *     1 MiB: 2S (copy in), S read + S/N written (its slice), 2S (copy out):
 *     (5+1/N)*S.
 *  3. The reduction loop: the library's loop is not reachable through
 *     pdshm.h, so it is timed inside pdshm_group_allreduce of a group of 1
 *     (which sums the one tensor into itself, chunk by chunk): the time per
 *     element is the slope between two cached sizes (8 and 128 KiB), which
 *     takes the call's fixed cost out.  The peer sums the same one source
 *     into itself with peer_sum_f32 over the same sizes; interleaved rounds,
 *     medians of the ratio of the slopes.
 *
 *  4. The targets, on each table's medians: pdshm in place at most 1.0x the
 *     peer's time at every size and 0.67x from 1 MiB; with copies in and out
 *     at most 1.0x at every size; both within 1.5x of the bound from 16 MiB.
 *     PASS, or MISS with the sizes that missed.
 *
 * With more processes than cores the peer's spinning ranks take the core
 * from the ranks they wait for: the output says when that is the case.
 *
 * usage: bench_allreduce [--quick] [--procs N] [--rounds R]
 *   --quick: 4 KiB to 16 MiB, 2 processes, 5 rounds (a few seconds)
 *   default: 4 KiB to 256 MiB, 2 then 4 processes, 7 rounds
 * Exit status 1 when a subject's result was wrong, 2 on a failure.
 */
#include "config.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pdshm.h"
#include "peer_allreduce.h"

#define SEC 1000000000LL
#define MAX_SIZES 16
#define MAX_ROUNDS 31
#define MAX_ITERS 100000

enum subject { PEER, INPLACE, COPY, NSUBJ };
static const char *const subj_names[NSUBJ] = {"peer", "pdshm in place", "pdshm copy in/out"};

static struct {
  int quick, rounds, procs; /* procs 0: 2 then 4 */
  long cores;
  char seg[64];
} conf = {.rounds = 7};

static const size_t full_sizes[] = {4u << 10,  64u << 10, 256u << 10, 1u << 20,
                                    4u << 20,  16u << 20, 64u << 20,  256u << 20};
static const size_t quick_sizes[] = {4u << 10, 64u << 10, 1u << 20, 16u << 20};

/* What the ranks share besides the group: the iterations of a size, each
 * rank's times of the round, and the verdicts. */
struct ctl {
  int iters;                         /* calls per subject per round (rank 0) */
  atomic_int wrong[MAX_SIZES][NSUBJ]; /* set by a rank whose result was wrong */
  double t[NSUBJ][PEER_MAX_RANKS];   /* this round: ns per call, per rank    */
  double copy_ns;                    /* this round: rank 0's memcpy of S     */
};

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_allreduce: %s: %s (%s)\n", what, pdshm_strerror(rc), pdshm_last_error());
  exit(2);
}

static void *map_shared(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    perror("bench_allreduce: mmap");
    exit(2);
  }
  return p;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *human(size_t b, char *buf, size_t cap) {
  if (b >= 1u << 20) snprintf(buf, cap, "%zu MiB", b >> 20);
  else snprintf(buf, cap, "%zu KiB", b >> 10);
  return buf;
}

static void say_load(const char *when) {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) < 0) return;
  printf("load average %s: %.2f %.2f %.2f\n", when, l[0], l[1], l[2]);
  if (l[0] >= (double)conf.cores)
    printf("(at least one process wanting each core: a rank of the peer that spins waits until\n"
           "the rank it waits for gets a core, which can be a scheduler's time slice, ms)\n");
}

/* ---- one rank ------------------------------------------------------------------ */

struct rank {
  int rank, nranks;
  struct ctl *ctl;
  struct peer peer;
  pdshm_seg *seg;
  pdshm_scope *root, *mine;
  pdshm_var *v;
  pdshm_group *g;
  float *in, *out; /* private */
  size_t n;        /* floats of this size */
  int size_index;  /* of this size in the run's list */
};

static void barrier(struct rank *k) {
  int rc = pdshm_group_barrier(k->g, 120 * SEC);
  if (rc) die("barrier", rc);
}

static void group_allreduce(struct rank *k) {
  int rc = pdshm_group_allreduce(k->g, k->v, PDSHM_SUM, 120 * SEC);
  if (rc) die("pdshm_group_allreduce", rc);
}

/* One call of a subject: the sum lands in the tensor (INPLACE) or in out. */
static void call(struct rank *k, enum subject s) {
  switch (s) {
  case PEER: peer_allreduce(&k->peer, k->in, k->out, k->n); break;
  case INPLACE: group_allreduce(k); break;
  case COPY: {
    int rc = pdshm_group_allreduce_private(k->g, k->out, PDSHM_F32, k->n, k->v, PDSHM_SUM,
                                           120 * SEC);
    if (rc) die("pdshm_group_allreduce_private", rc);
    break;
  }
  default: break;
  }
}

/* Each rank's clock starts once every rank is running: a barrier's sleepers
 * may take milliseconds to be woken, which the first call would count. */
static void start_together(struct rank *k) {
  barrier(k);
  peer_sync(&k->peer);
}

/* Rank r's input: (r+1) * (i & 255), whose sum over N ranks is exact in
 * float: (i & 255) * N(N+1)/2. */
static void fill_input(struct rank *k) {
  for (size_t i = 0; i < k->n; i++) k->in[i] = (float)(k->rank + 1) * (float)(i & 255);
}

static int sum_is_right(const struct rank *k, const float *got) {
  float ranks = (float)(k->nranks * (k->nranks + 1) / 2);
  for (size_t i = 0; i < k->n; i++)
    if (got[i] != ranks * (float)(i & 255)) return 0;
  return 1;
}

/* Each subject once, its result checked at every rank. */
static void verify(struct rank *k) {
  for (int s = 0; s < NSUBJ; s++) {
    float *result = s == INPLACE ? pdshm_tensor_data(k->v) : k->out;
    memset(k->out, 0, k->n * sizeof(float));
    if (s == INPLACE) memcpy(pdshm_tensor_data(k->v), k->in, k->n * sizeof(float));
    if (s == COPY) memcpy(k->out, k->in, k->n * sizeof(float));
    barrier(k);
    call(k, (enum subject)s);
    if (!sum_is_right(k, result)) atomic_store(&k->ctl->wrong[k->size_index][s], 1);
  }
}

/* Rank 0 picks the calls per round: about `target` seconds for the slowest
 * subject, from 3 calls of each. */
static void choose_iters(struct rank *k) {
  double target = conf.quick ? 0.015 : 0.08, slowest = 0;
  for (int s = 0; s < NSUBJ; s++) {
    start_together(k);
    double t0 = now_ns();
    for (int i = 0; i < 3; i++) call(k, (enum subject)s);
    double t = (now_ns() - t0) / 3;
    slowest = t > slowest ? t : slowest;
  }
  if (k->rank == 0) {
    double it = target * 1e9 / slowest;
    k->ctl->iters = it < 3 ? 3 : it > MAX_ITERS ? MAX_ITERS : (int)it;
  }
  barrier(k);
}

static void time_subject(struct rank *k, enum subject s, int iters) {
  /* the in-place subjects sum their own results again and again: zeros,
   * which stay zeros, keep the values from growing to inf */
  if (s == INPLACE) memset(pdshm_tensor_data(k->v), 0, k->n * sizeof(float));
  if (s == COPY) memset(k->out, 0, k->n * sizeof(float));
  start_together(k);
  double t0 = now_ns();
  for (int i = 0; i < iters; i++) call(k, s);
  k->ctl->t[s][k->rank] = (now_ns() - t0) / iters;
}

static void time_copy(struct rank *k, int iters) {
  barrier(k);
  if (k->rank == 0) {
    double t0 = now_ns();
    for (int i = 0; i < iters; i++) {
      memcpy(k->out, k->in, k->n * sizeof(float));
      __asm__ volatile("" ::: "memory"); /* every copy is done */
    }
    k->ctl->copy_ns = (now_ns() - t0) / iters;
  }
  barrier(k);
}

static double slowest_rank(const struct ctl *c, enum subject s, int nranks) {
  double t = 0;
  for (int r = 0; r < nranks; r++) t = c->t[s][r] > t ? c->t[s][r] : t;
  return t;
}

/* Bytes one rank reads and writes in the peer's algorithm (see the top). */
static double peer_traffic(size_t bytes, int n) {
  double s = (double)bytes;
  return bytes < PEER_SMALL_MAX ? (n + 3) * s : (5.0 + 1.0 / n) * s;
}

struct row {
  double t[NSUBJ], bound;           /* medians, ns */
  double ratio_inplace, ratio_copy; /* medians of per-round ratios to the peer */
  double over_bound[NSUBJ];         /* medians of per-round time / bound     */
};
static struct row rows[MAX_SIZES]; /* rank 0's, by size */

/* One target over the sizes from `from` bytes: PASS, or MISS and where. */
static void target(const char *what, const size_t *sizes, int nsizes, size_t from,
                   double (*ratio)(const struct row *), double bound) {
  char where[512] = "";
  for (int i = 0; i < nsizes; i++) {
    double r = ratio(&rows[i]);
    char b[32];
    if (sizes[i] >= from && !(r <= bound))
      snprintf(where + strlen(where), sizeof where - strlen(where), "%s %s %.2fx",
               *where ? "," : ":", human(sizes[i], b, sizeof b), r);
  }
  printf("  %s %s <= %.2fx%s\n", *where ? "MISS" : "PASS", what, bound, where);
}

static double in_place(const struct row *w) { return w->ratio_inplace; }
static double copy(const struct row *w) { return w->ratio_copy; }
static double in_place_bound(const struct row *w) { return w->over_bound[INPLACE]; }
static double copy_bound(const struct row *w) { return w->over_bound[COPY]; }

/* The targets pdshm is measured by, on this table's medians. */
static void targets(const size_t *sizes, int nsizes) {
  printf("targets (medians of the rounds' ratios):\n");
  target("in place / peer, every size", sizes, nsizes, 0, in_place, 1.0);
  target("in place / peer, from 1 MiB", sizes, nsizes, 1u << 20, in_place, 0.67);
  target("copy in/out / peer, every size", sizes, nsizes, 0, copy, 1.0);
  target("in place / bound, from 16 MiB", sizes, nsizes, 16u << 20, in_place_bound, 1.5);
  target("copy in/out / bound, from 16 MiB", sizes, nsizes, 16u << 20, copy_bound, 1.5);
  fflush(stdout);
}

static void print_row(size_t bytes, const struct row *w, const atomic_int *wrong, int iters) {
  char b[32];
  printf("%8s  %10.1f  %10.1f %6.2f  %10.1f %6.2f  %10.1f  %5.2f %5.2f %5.2f  %6d  %s\n",
         human(bytes, b, sizeof b), w->t[PEER] / 1e3, w->t[INPLACE] / 1e3, w->ratio_inplace,
         w->t[COPY] / 1e3, w->ratio_copy, w->bound / 1e3, w->over_bound[PEER],
         w->over_bound[INPLACE], w->over_bound[COPY], iters,
         wrong[PEER] || wrong[INPLACE] || wrong[COPY] ? "WRONG" : "right");
  fflush(stdout);
}

/* Rank 0's view of R rounds: the medians. */
static void rounds(struct rank *k, size_t bytes) {
  double t[NSUBJ][MAX_ROUNDS], bound[MAX_ROUNDS], rin[MAX_ROUNDS], rcp[MAX_ROUNDS];
  double ob[NSUBJ][MAX_ROUNDS];
  int iters = k->ctl->iters, R = conf.rounds;
  double share = conf.cores > 0 && k->nranks > conf.cores ? (double)k->nranks / (double)conf.cores : 1;
  for (int r = 0; r < R; r++) {
    for (int j = 0; j < NSUBJ; j++) time_subject(k, (enum subject)((r + j) % NSUBJ), iters);
    time_copy(k, iters); /* its barriers also make the round's times visible */
    if (k->rank) continue;
    for (int s = 0; s < NSUBJ; s++) t[s][r] = slowest_rank(k->ctl, (enum subject)s, k->nranks);
    double bw = 2.0 * (double)bytes / k->ctl->copy_ns; /* bytes per ns */
    bound[r] = peer_traffic(bytes, k->nranks) / bw * share;
    rin[r] = t[INPLACE][r] / t[PEER][r];
    rcp[r] = t[COPY][r] / t[PEER][r];
    for (int s = 0; s < NSUBJ; s++) ob[s][r] = t[s][r] / bound[r];
  }
  if (k->rank) return;
  struct row w = {.bound = median(bound, R), .ratio_inplace = median(rin, R),
                  .ratio_copy = median(rcp, R)};
  for (int s = 0; s < NSUBJ; s++) {
    w.t[s] = median(t[s], R);
    w.over_bound[s] = median(ob[s], R);
  }
  print_row(bytes, &w, k->ctl->wrong[k->size_index], iters);
  rows[k->size_index] = w;
}

static void one_size(struct rank *k, int index, size_t bytes) {
  int64_t n = (int64_t)(bytes / sizeof(float));
  int rc = pdshm_tensor_resize(k->v, PDSHM_F32, 1, &n);
  if (rc) die("pdshm_tensor_resize", rc);
  k->n = (size_t)n;
  k->size_index = index;
  fill_input(k);
  verify(k);
  choose_iters(k);
  rounds(k, bytes);
}

static int rank_main(int rank, int nranks, struct ctl *ctl, void *region, size_t max_bytes,
                     const size_t *sizes, int nsizes) {
  struct rank k = {.rank = rank, .nranks = nranks, .ctl = ctl};
  peer_open(&k.peer, region, rank, nranks, max_bytes);
  k.in = malloc(max_bytes);
  k.out = malloc(max_bytes);
  if (!k.in || !k.out) die("malloc", PDSHM_ENOMEM);
  int rc = pdshm_attach(conf.seg, NULL, &k.seg);
  if (!rc) rc = pdshm_root(k.seg, &k.root);
  if (!rc) rc = pdshm_scope_new(k.root, NULL, &k.mine);
  if (!rc) rc = pdshm_var_new(k.mine, &k.v);
  if (!rc) rc = pdshm_group_join(k.seg, "allreduce", (unsigned)nranks, rank, &k.g);
  if (rc) die("rank setup", rc);
  for (int i = 0; i < nsizes; i++) one_size(&k, i, sizes[i]);
  if (rank == 0) targets(sizes, nsizes);
  pdshm_group_leave(k.g);
  pdshm_scope_release(k.mine);
  pdshm_scope_release(k.root);
  pdshm_detach(k.seg);
  return 0;
}

/* ---- N processes ------------------------------------------------------------------ */

static void print_head(int nranks, int rounds) {
  printf("\nallreduce f32 SUM, %d processes on %ld cores%s; %d rounds, medians\n", nranks,
         conf.cores,
         nranks > conf.cores ? " (more processes than cores: the peer's spinning ranks take "
                               "the core from the ranks they wait for)"
                             : "",
         rounds);
  printf("%8s  %10s  %17s  %17s  %10s  %17s  %6s  %s\n", "size", "peer us", "in place us, /peer",
         "copy us, /peer", "bound us", "time/bound: peer in cp", "calls", "sums");
}

static pid_t parent_pid, rank_pid[PEER_MAX_RANKS]; /* 0: not running */

static void kill_ranks(void) {
  for (int r = 0; r < PEER_MAX_RANKS; r++)
    if (rank_pid[r] > 0) kill(rank_pid[r], SIGKILL);
}

/* 1 when a subject was wrong. */
static int run_procs(int nranks, const size_t *sizes, int nsizes) {
  size_t max_bytes = sizes[nsizes - 1];
  pdshm_options o = {.size = (size_t)nranks * max_bytes + (64u << 20), .max_procs = 32};
  pdshm_seg *seg;
  int rc = pdshm_create(conf.seg, &o, &seg);
  if (rc) die("pdshm_create", rc);
  struct ctl *ctl = map_shared(sizeof *ctl);
  size_t region_bytes = peer_region_bytes(nranks, max_bytes);
  void *region = map_shared(region_bytes);
  print_head(nranks, conf.rounds);
  fflush(NULL);
  for (int r = 0; r < nranks; r++)
    if ((rank_pid[r] = fork()) == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* a rank ends with the run */
      if (getppid() != parent_pid) _exit(2);
      _exit(rank_main(r, nranks, ctl, region, max_bytes, sizes, nsizes));
    }
  int failed = 0;
  for (int left = nranks; left > 0; left--) {
    int st;
    pid_t p = wait(&st);
    if (p < 0) break;
    for (int r = 0; r < nranks; r++)
      if (rank_pid[r] == p) rank_pid[r] = 0;
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
      failed = 1;
      kill_ranks(); /* the others would spin waiting for it */
    }
  }
  int wrong = 0;
  for (int i = 0; i < nsizes; i++)
    for (int s = 0; s < NSUBJ; s++)
      if (ctl->wrong[i][s]) {
        char b[32];
        printf("WRONG: %s gave a wrong sum at %s\n", subj_names[s], human(sizes[i], b, sizeof b));
        wrong = 1;
      }
  munmap(region, region_bytes);
  munmap(ctl, sizeof *ctl);
  pdshm_detach(seg);
  pdshm_unlink(conf.seg);
  if (failed) {
    fprintf(stderr, "bench_allreduce: a rank failed\n");
    exit(2);
  }
  return wrong;
}

/* ---- the reduction loop ---------------------------------------------------------- */

#define LOOP_SMALL (8u << 10)
#define LOOP_BIG (128u << 10)

struct loop {
  pdshm_group *g;
  pdshm_var *v;
};

/* ns per call of fn at `bytes`, the best of 5 batches. */
static double loop_time(struct loop *l, size_t bytes, int lib, int calls) {
  int64_t n = (int64_t)(bytes / sizeof(float));
  int rc = pdshm_tensor_resize(l->v, PDSHM_F32, 1, &n);
  if (rc) die("pdshm_tensor_resize", rc);
  float *x = pdshm_tensor_data(l->v);
  memset(x, 0, bytes);
  const float *src[1] = {x};
  double best = 1e30;
  for (int b = 0; b < 5; b++) {
    double t0 = now_ns();
    for (int i = 0; i < calls; i++) {
      if (lib && (rc = pdshm_group_allreduce(l->g, l->v, PDSHM_SUM, 10 * SEC)))
        die("pdshm_group_allreduce", rc);
      if (!lib) peer_sum_f32(x, src, 1, (size_t)n);
      __asm__ volatile("" ::: "memory");
    }
    double t = (now_ns() - t0) / calls;
    best = t < best ? t : best;
  }
  return best;
}

/* ns per float from the slope between the two sizes. */
static double loop_slope(struct loop *l, int lib, int calls) {
  double small = loop_time(l, LOOP_SMALL, lib, calls), big = loop_time(l, LOOP_BIG, lib, calls);
  return (big - small) / ((LOOP_BIG - LOOP_SMALL) / sizeof(float));
}

static void bench_loop(void) {
  pdshm_options o = {.size = 64u << 20, .max_procs = 32};
  pdshm_seg *seg;
  pdshm_scope *root, *mine;
  struct loop l;
  int rc = pdshm_create(conf.seg, &o, &seg);
  if (!rc) rc = pdshm_root(seg, &root);
  if (!rc) rc = pdshm_scope_new(root, NULL, &mine);
  if (!rc) rc = pdshm_var_new(mine, &l.v);
  if (!rc) rc = pdshm_group_join(seg, "loop", 1, 0, &l.g);
  if (rc) die("loop setup", rc);
  int R = conf.rounds, calls = conf.quick ? 200 : 1000;
  double lib[MAX_ROUNDS], peer[MAX_ROUNDS], ratio[MAX_ROUNDS];
  for (int r = 0; r < R; r++) {
    lib[r] = loop_slope(&l, 1, calls);
    peer[r] = loop_slope(&l, 0, calls);
    ratio[r] = lib[r] / peer[r];
  }
  double mr = median(ratio, R), ml = median(lib, R), mp = median(peer, R);
  printf("\nreduction loop, f32, one source summed into itself, cached (the slope between %u "
         "and %u KiB), %d rounds, medians:\n",
         LOOP_SMALL >> 10, LOOP_BIG >> 10, R);
  printf("  pdshm (pdshm_group_allreduce of a group of 1): %.3f ns a float (%.2f GB/s read)\n", ml,
         4 / ml);
  printf("  one-pass loop (%s): %.3f ns a float (%.2f GB/s read); pdshm / loop %.2f\n",
         peer_sum_kind(), mp, 4 / mp, mr);
  pdshm_group_leave(l.g);
  pdshm_scope_release(mine);
  pdshm_scope_release(root);
  pdshm_detach(seg);
  pdshm_unlink(conf.seg);
}

/* ---- main -------------------------------------------------------------------------- */

/* An interrupted run ends its ranks and removes its segment. */
static void on_signal(int sig) {
  if (getpid() == parent_pid) {
    kill_ranks();
    pdshm_unlink(conf.seg);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void usage(void) {
  fprintf(stderr, "usage: bench_allreduce [--quick] [--procs N (1..%d)] [--rounds R (3..%d)]\n",
          PEER_MAX_RANKS, MAX_ROUNDS);
  exit(2);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) conf.quick = 1, conf.rounds = 5;
    else if (!strcmp(argv[i], "--procs") && i + 1 < argc) conf.procs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) conf.rounds = atoi(argv[++i]);
    else usage();
  }
  if (conf.procs < 0 || conf.procs > PEER_MAX_RANKS || conf.rounds < 3 ||
      conf.rounds > MAX_ROUNDS)
    usage();
  conf.cores = sysconf(_SC_NPROCESSORS_ONLN);
  parent_pid = getpid();
  snprintf(conf.seg, sizeof conf.seg, "bench-allreduce-%d", (int)parent_pid);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  const size_t *sizes = conf.quick ? quick_sizes : full_sizes;
  int nsizes = conf.quick ? (int)(sizeof quick_sizes / sizeof *sizes)
                          : (int)(sizeof full_sizes / sizeof *sizes);
  say_load("at the start");
  printf("peer: DeepSpeed-style shared-memory allreduce (bench/peer_allreduce.h), sums by %s;\n"
         "ratios /peer: pdshm's time over the peer's (below 1: pdshm faster), per round;\n"
         "bound: the bytes a rank reads and writes in the peer's algorithm ((N+3)S below 1 MiB,\n"
         "(5+1/N)S from 1 MiB) at rank 0's memcpy bandwidth of the same round, times N/cores\n"
         "when N > cores; calls: per subject per round; sums: each subject's result checked\n",
         peer_sum_kind());
  int wrong = 0;
  if (conf.procs) wrong |= run_procs(conf.procs, sizes, nsizes);
  else
    for (int n = 2; n <= (conf.quick ? 2 : 4); n *= 2) wrong |= run_procs(n, sizes, nsizes);
  bench_loop();
  say_load("at the end");
  return wrong;
}
