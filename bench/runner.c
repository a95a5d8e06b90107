/*
 * runner.c - how pdshm-bench measures: time-boxed loops in this process or in
 * N forked processes started together, names of this run, and the clean-up
 * of everything the run made (at the end, on SIGINT/SIGTERM, on failure).
 *
 * Multi-process measurements:
 *  1. The parent maps one shared control page (anonymous, MAP_SHARED) before
 *     forking; each child runs its setup (attaching the store by name, as a
 *     trainer would), then counts itself in `ready` and waits for `go`.
 *  2. The parent sets `start` (a CLOCK_MONOTONIC instant) and then `go`
 *     (release); every child runs until start + secs and stores its
 *     operations and the instant it stopped in its own cache line.
 *  3. Aggregate rate = sum of operations / (last stop - start).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

struct bench_conf bconf = {.secs = 0.1};

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void say(const char *fmt, va_list ap) {
  fputs("pdshm-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void bench_progress(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(fmt, ap);
  va_end(ap);
}

/* ---- clean-up ------------------------------------------------------------ */

static pid_t parent_pid;

/* Removes what this run left in /dev/shm: pdshm segments ("pdshm.<tag>-*"),
 * Boost objects and LMDB environments ("<tag>-*", a directory for LMDB). */
static void sweep(void) {
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  char pdshm_prefix[96];
  snprintf(pdshm_prefix, sizeof pdshm_prefix, "pdshm.%s-", bconf.tag);
  size_t tl = strlen(bconf.tag), pl = strlen(pdshm_prefix);
  for (struct dirent *e; (e = readdir(d));) {
    bool ours = !strncmp(e->d_name, pdshm_prefix, pl) ||
                (!strncmp(e->d_name, bconf.tag, tl) && e->d_name[tl] == '-');
    if (!ours || unlinkat(dirfd(d), e->d_name, 0) == 0) continue;
    int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY);
    if (sub < 0) continue;
    unlinkat(sub, "data.mdb", 0);
    unlinkat(sub, "lock.mdb", 0);
    close(sub);
    unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
  }
  closedir(d);
}

void bench_cleanup(void) {
  if (getpid() == parent_pid) sweep();
}

static void on_signal(int sig) {
  bench_cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void runner_init(void) {
  parent_pid = getpid();
  snprintf(bconf.tag, sizeof bconf.tag, "pdshm-bench-%d", (int)parent_pid);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
}

void bench_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(fmt, ap);
  va_end(ap);
  if (getpid() != parent_pid) _exit(1);
  bench_cleanup();
  exit(1);
}

const char *bench_tag(char *buf, size_t cap, const char *what) {
  snprintf(buf, cap, "%s-%s", bconf.tag, what);
  return buf;
}

/* ---- names ---------------------------------------------------------------- */

const char *peer_key(char *buf, size_t cap, const char *prefix, const char *name) {
  snprintf(buf, cap, "%s%s", prefix, name);
  return buf;
}

const char *peer_anon(char *buf, size_t cap) {
  static unsigned n;
  snprintf(buf, cap, "anon%d.%u", (int)getpid(), ++n);
  return buf;
}

/* ---- names of variables ---------------------------------------------------------------- */

char **bench_names(int n, const char *prefix, const char *suffix) {
  char **names = malloc((size_t)n * sizeof *names);
  if (!names) bench_die("out of memory");
  for (int i = 0; i < n; i++) {
    char buf[96];
    snprintf(buf, sizeof buf, "%s_%d%s", prefix, i, suffix);
    if (!(names[i] = strdup(buf))) bench_die("out of memory");
  }
  return names;
}

void bench_names_free(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

uint64_t bench_rand(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- time-boxed loops ------------------------------------------------------ */

/* Runs fn until `until`, reading the clock about every 50 us; returns the
 * operations done and sets *stopped to the instant it stopped. */
static uint64_t run_until(bench_fn fn, void *ctx, double until, double *stopped) {
  uint64_t ops = 0, chunk = 1;
  double t = bench_now();
  while (t < until) {
    fn(ctx, chunk);
    ops += chunk;
    double t1 = bench_now();
    if (t1 - t < 50e-6 && chunk < (1u << 20)) chunk *= 2;
    t = t1;
  }
  *stopped = t;
  return ops;
}

/* The best of three windows of secs/3: on a shared machine, the window
 * least disturbed by others is the closest to what the code costs. */
double bench_rate(bench_fn fn, void *ctx) {
  double stopped, best = 0;
  run_until(fn, ctx, bench_now() + bconf.secs / 5, &stopped); /* warm up */
  for (int w = 0; w < 3; w++) {
    double t0 = bench_now();
    uint64_t ops = run_until(fn, ctx, t0 + bconf.secs / 3, &stopped);
    double rate = (double)ops / (stopped - t0);
    best = rate > best ? rate : best;
  }
  return best;
}

/* ---- several processes ----------------------------------------------------- */

struct mp_slot {
  _Alignas(64) uint64_t ops; /* written by its process once, at the end      */
  double stopped;            /* the instant it stopped                       */
};

struct mp_ctl {
  atomic_int ready;  /* processes set up and waiting                          */
  atomic_int failed; /* processes whose setup failed                          */
  atomic_int go;     /* set (release) by the parent after start               */
  double start;      /* the common start instant, written before go           */
  struct mp_slot slot[BENCH_MAX_PROCS];
};

static void mp_child(struct mp_ctl *c, const struct mp_job *job, int proc) {
  void *ctx = job->setup(job->arg, proc);
  if (!ctx) {
    atomic_fetch_add(&c->failed, 1);
    _exit(1);
  }
  atomic_fetch_add(&c->ready, 1);
  while (!atomic_load_explicit(&c->go, memory_order_acquire)) sched_yield();
  double secs = job->secs > 0 ? job->secs : bconf.secs;
  c->slot[proc].ops = run_until(job->work, ctx, c->start + secs, &c->slot[proc].stopped);
  if (job->teardown) job->teardown(ctx);
  _exit(0);
}

/* Waits until every child is ready (or one failed); false on failure. */
static bool mp_wait_ready(struct mp_ctl *c, int nproc) {
  double limit = bench_now() + 120;
  while (atomic_load(&c->ready) < nproc) {
    if (atomic_load(&c->failed) || bench_now() > limit) return false;
    usleep(200);
  }
  return true;
}

double bench_mp_rate(const struct mp_job *job, int nproc) {
  if (nproc < 1 || nproc > BENCH_MAX_PROCS) bench_die("bad process count %d", nproc);
  struct mp_ctl *c = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (c == MAP_FAILED) bench_die("mmap: %s", strerror(errno));
  memset(c, 0, sizeof *c);
  pid_t pids[BENCH_MAX_PROCS];
  fflush(NULL);
  for (int p = 0; p < nproc; p++) {
    if ((pids[p] = fork()) < 0) bench_die("fork: %s", strerror(errno));
    if (pids[p] == 0) mp_child(c, job, p);
  }
  bool ok = mp_wait_ready(c, nproc);
  c->start = bench_now() + 0.001;
  atomic_store_explicit(&c->go, ok ? 1 : -1, memory_order_release);
  if (!ok)
    for (int p = 0; p < nproc; p++) kill(pids[p], SIGKILL);
  for (int p = 0; p < nproc; p++) {
    int status;
    if (waitpid(pids[p], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) ok = false;
  }
  double ops = 0, start = c->start, last = start;
  for (int p = 0; p < nproc; p++) {
    ops += (double)c->slot[p].ops;
    if (c->slot[p].stopped > last) last = c->slot[p].stopped;
  }
  munmap(c, sizeof *c);
  if (!ok) bench_die("a measuring process failed");
  return ops / (last - start);
}
