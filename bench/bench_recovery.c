/*
 * bench_recovery - what a death costs the survivors, and what surviving
 * deaths costs everybody, each against a baseline measured in the same run.
 *
 *  1. Reaping: a process holding 10k scope handles (10k anonymous scopes with
 *     one variable each) is SIGKILLed; pdshm_reap's time against the same
 *     process letting go by itself (pdshm_detach), and against reaping a dead
 *     process that held nothing.
 *  2. Locks whose holder died: ms from kill() until this process holds the
 *     lock (an exclusive variable lock, a shared variable hold, a scope lock,
 *     the allocator lock), against taking the same lock uncontended; and a
 *     shared take after a writer that waited for readers died (its "writer
 *     waiting" mark left on the variable, which live readers defer to for a
 *     while), against the same shared take uncontended.
 *  3. The hot path: the journal.  The blocks a variable create allocates and
 *     the words it stores are recorded from a real pdshm_var_create, then
 *     replayed N times under the same scope lock, once through the journal
 *     (begin, recorded allocations, redo entries, commit: what the library
 *     does) and once as plain allocations and stores; the stores rewrite the
 *     values already there, and the replayed blocks are freed after each
 *     round, in both variants alike.  Also the robust process-shared lock
 *     against a plain private mutex, and the whole create + erase for scale.
 *     There is no build of pdshm without its crash safety to compare with:
 *     this isolates what the journal and the robust lock add.
 *
 * Part 2 also takes the shared hold's figure with the built pdshmd watching.
 * It uses the internals (lib/'s layer headers) for parts 2 and 3, as bench_alloc does.
 *
 * usage: bench_recovery [--quick]      figures on stdout, progress on stderr
 */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h" /* pdshm__lock, pdshm__j_*, struct pdshm_scope */

#define SEG_SIZE (256ull << 20)
#define HANDLES 10000
#define HOT_ROUNDS 3

static int reps = 5;            /* --quick: 2 */
static long hot_iters = 200000; /* --quick: 20000 */
static char seg_name[64];
static pid_t creator;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_recovery: %s: %s (%s)\n", what, pdshm_strerror(rc), pdshm_last_error());
  if (creator == getpid()) pdshm_unlink(seg_name);
  exit(1);
}

static void check(const char *what, int rc) {
  if (rc) die(what, rc);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_u64);
  return v[n / 2];
}

/* ---- helper processes ------------------------------------------------------------ */

/* A child that attaches, runs fn, writes an 8-byte word (fn's) to the pipe,
 * then waits to be killed unless fn returned nonzero (it then exits). */
struct kid {
  pid_t pid;
  uint64_t word;
};

static struct kid kid_start(int (*fn)(pdshm_seg *, uint64_t *), bool stay) {
  int p[2];
  if (pipe(p)) die("pipe", PDSHM_EIO);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    pdshm_seg *seg;
    uint64_t word = 0;
    if (pdshm_attach(seg_name, NULL, &seg) || fn(seg, &word)) _exit(1);
    if (write(p[1], &word, sizeof word) != (ssize_t)sizeof word) _exit(1);
    if (!stay) _exit(0);
    for (;;) pause();
  }
  close(p[1]);
  struct kid k = {.pid = pid};
  if (read(p[0], &k.word, sizeof k.word) != (ssize_t)sizeof k.word) die("helper failed", PDSHM_EIO);
  close(p[0]);
  return k;
}

static void kid_kill(struct kid k) {
  kill(k.pid, SIGKILL);
  waitpid(k.pid, NULL, 0);
}

/* Waits until seg sees a dead slot: the OFD lock can trail waitpid. */
static void await_dead(pdshm_seg *seg) {
  for (int ms = 0; ms < 5000; ms++) {
    pdshm_stats st;
    check("stats", pdshm_seg_stats(seg, &st));
    if (st.procs_dead) return;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  die("a killed helper never showed up dead", PDSHM_EBUSY);
}

static uint64_t used_of(pdshm_seg *seg) {
  pdshm_stats st;
  check("stats", pdshm_seg_stats(seg, &st));
  return st.used;
}

/* ---- 1. reaping ---------------------------------------------------------------------- */

static int hold_handles(pdshm_seg *seg) {
  pdshm_scope *root, *s;
  pdshm_var *v;
  if (pdshm_root(seg, &root)) return 1;
  for (int i = 0; i < HANDLES; i++)
    if (pdshm_scope_new(root, NULL, &s) || pdshm_var_new(s, &v)) return 1;
  return 0;
}

static int kid_hold(pdshm_seg *seg, uint64_t *word) { return hold_handles(seg); }

static int kid_hold_detach(pdshm_seg *seg, uint64_t *word) {
  if (hold_handles(seg)) return 1;
  uint64_t t0 = now_ns();
  int rc = pdshm_detach(seg);
  *word = now_ns() - t0;
  return rc;
}

static int kid_nothing(pdshm_seg *seg, uint64_t *word) { return 0; }

/* pdshm_reap's ns after a helper running fn was killed; used must come back. */
static uint64_t reap_after(pdshm_seg *seg, int (*fn)(pdshm_seg *, uint64_t *)) {
  uint64_t base = used_of(seg);
  kid_kill(kid_start(fn, true));
  await_dead(seg);
  unsigned n = 0;
  uint64_t t0 = now_ns();
  check("pdshm_reap", pdshm_reap(seg, &n));
  uint64_t t = now_ns() - t0;
  if (n != 1 || used_of(seg) != base) die("reap left something behind", PDSHM_EBADSEG);
  return t;
}

static void reaping(pdshm_seg *seg) {
  uint64_t full[16], detach[16], empty[16];
  for (int r = 0; r < reps; r++) {
    fprintf(stderr, "bench_recovery: reaping, round %d of %d\n", r + 1, reps);
    full[r] = reap_after(seg, kid_hold);
    empty[r] = reap_after(seg, kid_nothing);
    struct kid k = kid_start(kid_hold_detach, false);
    waitpid(k.pid, NULL, 0);
    detach[r] = k.word;
  }
  uint64_t f = median(full, reps), d = median(detach, reps), e = median(empty, reps);
  printf("\n1. reaping a SIGKILLed process holding %d scope handles (%d anonymous scopes, "
         "%d variables); median of %d\n", HANDLES, HANDLES, HANDLES, reps);
  printf("   pdshm_reap of that process          %9.2f ms  (%.0f ns per handle)\n", f / 1e6,
         (double)f / HANDLES);
  printf("   baseline: it detaches by itself     %9.2f ms  reap/detach %.2fx\n", d / 1e6,
         (double)f / (double)d);
  printf("   baseline: reap of one that held nothing %5.1f us\n", e / 1e3);
}

/* ---- 2. locks whose holder died ------------------------------------------------------ */

static pdshm_scope *params_of(pdshm_seg *seg) {
  pdshm_scope *p;
  check("open params", pdshm_scope_open(seg, "params", &p));
  return p;
}

static uint32_t scope_lock_of(pdshm_seg *seg) {
  pdshm_scope *p = params_of(seg);
  uint32_t lock = pdshm__scope_at(seg, p->rec)->lock;
  pdshm_scope_release(p);
  return lock;
}

static pdshm_var *param(pdshm_seg *seg, const char *name) {
  pdshm_scope *p = params_of(seg);
  pdshm_var *v = pdshm_find_local_var(p, name);
  pdshm_scope_release(p);
  if (!v) die(name, PDSHM_ENOENT);
  return v;
}

static int kid_xlock(pdshm_seg *seg, uint64_t *w) { return pdshm_var_lock(param(seg, "X"), 1); }
static int kid_shold(pdshm_seg *seg, uint64_t *w) { return pdshm_var_lock(param(seg, "S"), 0); }
static int kid_scope(pdshm_seg *seg, uint64_t *w) { return pdshm__lock(seg, scope_lock_of(seg)); }
static int kid_heap(pdshm_seg *seg, uint64_t *w) { return pdshm__lock(seg, PDSHM_LOCK_HEAP); }

/* The locks, looked up once so that only the taking is timed. */
enum lk { LK_XVAR, LK_SHOLD, LK_SCOPE, LK_HEAP, LK_N };
struct locks {
  pdshm_var *x, *s;   /* params/X, params/S                  */
  uint32_t scope;     /* params' lock-table entry            */
};

static void take(pdshm_seg *seg, const struct locks *l, enum lk k) {
  switch (k) {
  case LK_XVAR: check("var lock", pdshm_var_lock(l->x, 1)); break;
  case LK_SHOLD: check("var lock", pdshm_var_lock(l->s, 1)); break;
  case LK_SCOPE: check("scope lock", pdshm__lock(seg, l->scope)); break;
  default: check("heap lock", pdshm__lock(seg, PDSHM_LOCK_HEAP)); break;
  }
}

static void give(pdshm_seg *seg, const struct locks *l, enum lk k) {
  if (k == LK_XVAR) check("var unlock", pdshm_var_unlock(l->x));
  else if (k == LK_SHOLD) check("var unlock", pdshm_var_unlock(l->s));
  else if (k == LK_SCOPE) pdshm__unlock(seg, l->scope);
  else pdshm__unlock(seg, PDSHM_LOCK_HEAP);
}

static uint64_t take_after_death(pdshm_seg *seg, const struct locks *l, enum lk k) {
  static int (*const holders[])(pdshm_seg *, uint64_t *) = {kid_xlock, kid_shold, kid_scope,
                                                           kid_heap};
  struct kid kd = kid_start(holders[k], true);
  uint64_t t0 = now_ns();
  kill(kd.pid, SIGKILL);
  take(seg, l, k);
  uint64_t t = now_ns() - t0;
  give(seg, l, k);
  waitpid(kd.pid, NULL, 0);
  check("reap", pdshm_reap(seg, NULL));
  return t;
}

/* ---- the same with pdshmd watching (PDSHMD_PATH: the built daemon) ---- */

static pid_t daemon_start(void) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    freopen("/dev/null", "w", stderr);
    execl(PDSHMD_PATH, "pdshmd", seg_name, "--adopt", "--foreground", "--interval", "60000",
          (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* Waits until the daemon's heartbeat moved twice: it has read the process
 * table (and watches every process attached) since this call. */
static void await_beats(pdshm_seg *seg) {
  pdshm_daemon_info di;
  uint64_t last = 0;
  for (int ms = 0, moved = -1; moved < 2; ms++) {
    check("daemon status", pdshm_daemon_status(seg, &di));
    moved += di.alive && di.beat_ns != last;
    last = di.alive ? di.beat_ns : 0;
    if (ms > 10000) die("pdshmd never beat", PDSHM_EBUSY);
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
}

/* ms from kill() until an exclusive taker holds a variable a dead process
 * held shared, pdshmd reaping. */
static void shold_with_daemon(pdshm_seg *seg, const struct locks *l) {
  if (access(PDSHMD_PATH, X_OK)) {
    printf("   (%s not built: no figure with pdshmd)\n", PDSHMD_PATH);
    return;
  }
  pid_t d = daemon_start();
  uint64_t t[16];
  for (int r = 0; r < reps; r++) {
    struct kid kd = kid_start(kid_shold, true);
    await_beats(seg);
    uint64_t t0 = now_ns();
    kill(kd.pid, SIGKILL);
    take(seg, l, LK_SHOLD);
    t[r] = now_ns() - t0;
    give(seg, l, LK_SHOLD);
    waitpid(kd.pid, NULL, 0);
  }
  kill(d, SIGTERM);
  waitpid(d, NULL, 0);
  printf("   %-40s %7.3f ms   (pdshmd reaps it: pidfd)\n", "the same, pdshmd running",
         median(t, reps) / 1e6);
}

/* ms from kill() until a shared take of S holds it, the killed process a
 * writer that waited for our share of S to go (its mark on S). */
static uint64_t shared_after_waiting_writer(pdshm_seg *seg, const struct locks *l) {
  check("share", pdshm_var_lock(l->s, 0));
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    pdshm_seg *s;
    if (pdshm_attach(seg_name, NULL, &s) || pdshm_var_lock(param(s, "S"), 1)) _exit(1);
    _exit(0);
  }
  const struct pdshm_var_rec *r = pdshm__var_rec(l->s);
  for (int ms = 0; !atomic_load_explicit(&r->lk_wwait, memory_order_relaxed); ms++) {
    if (ms > 10000) die("the writer never waited", PDSHM_EBUSY);
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  uint64_t t0 = now_ns();
  kill(pid, SIGKILL);
  check("unshare", pdshm_var_unlock(l->s));
  check("share", pdshm_var_lock(l->s, 0));
  uint64_t t = now_ns() - t0;
  check("unshare", pdshm_var_unlock(l->s));
  waitpid(pid, NULL, 0);
  check("reap", pdshm_reap(seg, NULL));
  return t;
}

static double share_uncontended(const struct locks *l) {
  long n = hot_iters / 10;
  uint64_t t0 = now_ns();
  for (long i = 0; i < n; i++) {
    check("share", pdshm_var_lock(l->s, 0));
    check("unshare", pdshm_var_unlock(l->s));
  }
  return (double)(now_ns() - t0) / (double)n;
}

/* How long the kernel takes to end a process: kill() until waitpid() returns. */
static uint64_t death_time(void) {
  struct kid kd = kid_start(kid_nothing, true);
  uint64_t t0 = now_ns();
  kill(kd.pid, SIGKILL);
  waitpid(kd.pid, NULL, 0);
  return now_ns() - t0;
}

static double take_uncontended(pdshm_seg *seg, const struct locks *l, enum lk k) {
  long n = hot_iters / 10;
  uint64_t t0 = now_ns();
  for (long i = 0; i < n; i++) {
    take(seg, l, k);
    give(seg, l, k);
  }
  return (double)(now_ns() - t0) / (double)n;
}

static void dead_locks(pdshm_seg *seg) {
  static const char *names[] = {"exclusive variable lock", "shared variable hold (taken exclusive)",
                                "scope lock", "allocator (heap) lock"};
  printf("\n2. taking a lock whose holder was SIGKILLed: ms from kill() until held, median of %d;"
         "\n   baseline: the same take + release uncontended\n", reps);
  struct locks l = {param(seg, "X"), param(seg, "S"), scope_lock_of(seg)};
  for (int k = 0; k < LK_N; k++) {
    fprintf(stderr, "bench_recovery: dead holder of the %s\n", names[k]);
    uint64_t t[16];
    for (int r = 0; r < reps; r++) t[r] = take_after_death(seg, &l, (enum lk)k);
    uint64_t m = median(t, reps);
    double u = take_uncontended(seg, &l, (enum lk)k);
    printf("   %-40s %7.3f ms   uncontended %7.1f ns   %8.0fx\n", names[k], m / 1e6, u,
           (double)m / u);
    if (k == LK_SHOLD) shold_with_daemon(seg, &l);
  }
  fprintf(stderr, "bench_recovery: a writer killed while it waited for readers\n");
  uint64_t w[16];
  for (int r = 0; r < reps; r++) w[r] = shared_after_waiting_writer(seg, &l);
  uint64_t m = median(w, reps);
  double u = share_uncontended(&l);
  printf("   %-40s %7.3f ms   uncontended %7.1f ns   %8.0fx\n",
         "shared take, a waiting writer killed", m / 1e6, u, (double)m / u);
  uint64_t t[16];
  for (int r = 0; r < reps; r++) t[r] = death_time();
  check("reap", pdshm_reap(seg, NULL));
  printf("   baseline: kill() until waitpid() returns, a helper holding nothing %.3f ms\n",
         median(t, reps) / 1e6);
  check("pdshm_check", pdshm_check(seg, stderr));
}

/* ---- 3. the journal on a hot path ----------------------------------------------------- */

/* What one variable create allocated and stored, read back from its journal. */
struct recorded {
  uint32_t lock;
  uint32_t nnew, nredo;
  size_t bytes[PDSHM_J_BLOCKS];
  unsigned type[PDSHM_J_BLOCKS];
  struct pdshm_redo redo[PDSHM_J_REDO];
  pdshm_off_t seq;
};

static void record_create(pdshm_seg *seg, pdshm_scope *s, struct recorded *rec) {
  pdshm_var *v;
  check("var create", pdshm_var_create(s, "recorded", &v));
  /* One thread: the create ran on the first free lane, lane 0. */
  const struct pdshm_journal *j = &seg->lanes[0].rec->j;
  if (j->op != PDSHM_OP_VAR_NEW) die("the create's journal is not on lane 0", PDSHM_EBADSEG);
  *rec = (struct recorded){.lock = j->lock, .nnew = j->nnew, .nredo = j->nredo, .seq = j->seq};
  for (uint32_t i = 0; i < j->nnew; i++) {
    pdshm_off_t b = j->newb[i] & ~(pdshm_off_t)15;
    rec->bytes[i] = pdshm__alloc_usable(seg, b);
    rec->type[i] = pdshm__blk(seg, b)->type;
  }
  memcpy(rec->redo, j->redo, sizeof rec->redo);
}

static void replay_journaled(pdshm_seg *seg, const struct recorded *rc) {
  pdshm_off_t b[PDSHM_J_BLOCKS];
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  check("j_begin", pdshm__j_begin(seg, ln, rc->lock, PDSHM_OP_VAR_NEW));
  for (uint32_t i = 0; i < rc->nnew; i++)
    check("j_alloc", pdshm__j_alloc(seg, ln, rc->bytes[i], rc->type[i], &b[i]));
  for (uint32_t i = 0; i < rc->nredo; i++) pdshm__j_set(seg, ln, rc->redo[i].at, rc->redo[i].val);
  if (rc->seq) pdshm__j_seq(seg, ln, rc->seq);
  pdshm__j_commit(seg, ln);
  for (uint32_t i = 0; i < rc->nnew; i++) pdshm__free(seg, ln, b[i]);
  pdshm__lane_put(ln);
}

static void seq_bump(pdshm_seg *seg, pdshm_off_t at) {
  _Atomic uint64_t *w = PDSHM_AT(seg->base, at, _Atomic uint64_t);
  atomic_store_explicit(w, atomic_load_explicit(w, memory_order_relaxed) + 1, memory_order_release);
}

static void replay_direct(pdshm_seg *seg, const struct recorded *rc) {
  pdshm_off_t b[PDSHM_J_BLOCKS];
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  check("lock", pdshm__lock(seg, rc->lock));
  for (uint32_t i = 0; i < rc->nnew; i++)
    check("alloc", pdshm__alloc(seg, ln, rc->bytes[i], rc->type[i], &b[i]));
  if (rc->seq) seq_bump(seg, rc->seq); /* readers' seqlock: not crash safety */
  for (uint32_t i = 0; i < rc->nredo; i++)
    atomic_store_explicit(PDSHM_AT(seg->base, rc->redo[i].at, _Atomic uint64_t), rc->redo[i].val,
                          memory_order_release);
  if (rc->seq) seq_bump(seg, rc->seq);
  pdshm__unlock(seg, rc->lock);
  for (uint32_t i = 0; i < rc->nnew; i++) pdshm__free(seg, ln, b[i]);
  pdshm__lane_put(ln);
}

static double per_op(pdshm_seg *seg, const struct recorded *rc,
                     void (*fn)(pdshm_seg *, const struct recorded *)) {
  uint64_t t0 = now_ns();
  for (long i = 0; i < hot_iters; i++) fn(seg, rc);
  return (double)(now_ns() - t0) / (double)hot_iters;
}

static double lock_pairs(pdshm_seg *seg, uint32_t lock, pthread_mutex_t *plain) {
  uint64_t t0 = now_ns();
  for (long i = 0; i < hot_iters; i++) {
    if (plain) {
      pthread_mutex_lock(plain);
      pthread_mutex_unlock(plain);
    } else {
      check("lock", pdshm__lock(seg, lock));
      pdshm__unlock(seg, lock);
    }
  }
  return (double)(now_ns() - t0) / (double)hot_iters;
}

static double create_erase(pdshm_scope *s) {
  long n = hot_iters / 4;
  uint64_t t0 = now_ns();
  for (long i = 0; i < n; i++) {
    pdshm_var *v;
    check("var create", pdshm_var_create(s, "fc_0.w_0", &v));
    check("var erase", pdshm_var_erase(s, "fc_0.w_0"));
  }
  return (double)(now_ns() - t0) / (double)n;
}

static void hot_path(pdshm_seg *seg) {
  fprintf(stderr, "bench_recovery: the journal on a variable create\n");
  pdshm_scope *root, *s;
  struct recorded rc;
  check("root", pdshm_root(seg, &root));
  check("scope", pdshm_scope_new(root, NULL, &s));
  record_create(seg, s, &rc);
  uint64_t used = used_of(seg);
  pthread_mutex_t plain = PTHREAD_MUTEX_INITIALIZER;
  double jr = 1e300, dr = 1e300, robust = 1e300, mutex = 1e300, full = 1e300;
  for (int r = 0; r < HOT_ROUNDS; r++) { /* the best round: least disturbed by others */
    jr = fmin(jr, per_op(seg, &rc, replay_journaled));
    dr = fmin(dr, per_op(seg, &rc, replay_direct));
    robust = fmin(robust, lock_pairs(seg, rc.lock, NULL));
    mutex = fmin(mutex, lock_pairs(seg, 0, &plain));
    full = fmin(full, create_erase(s));
  }
  if (used_of(seg) != used) die("the replays leaked", PDSHM_EBADSEG);
  check("pdshm_check", pdshm_check(seg, stderr));
  printf("\n3. crash safety on a hot path: a variable create's %u allocations and %u word stores, "
         "replayed;\n   best of %d rounds of %ld\n", rc.nnew, rc.nredo, HOT_ROUNDS, hot_iters);
  printf("   through the journal (what pdshm does)  %7.1f ns\n", jr);
  printf("   baseline: plain allocations and stores %7.1f ns   journal/plain %.2fx (+%.1f ns)\n",
         dr, jr / dr, jr - dr);
  printf("   robust process-shared lock + unlock    %7.1f ns\n", robust);
  printf("   baseline: private pthread mutex        %7.1f ns   robust/plain %.2fx\n", mutex,
         robust / mutex);
  printf("   for scale: pdshm_var_create + pdshm_var_erase %.1f ns (two journaled operations):"
         "\n   the journal's +%.1f ns is %.0f%% of one such operation\n",
         full, jr - dr, 100.0 * (jr - dr) / (full / 2));
  pdshm_scope_release(s);
  pdshm_scope_release(root);
}

/* ---- main --------------------------------------------------------------------------- */

static void make_params(pdshm_seg *seg) {
  pdshm_scope *root, *p;
  pdshm_var *v;
  check("root", pdshm_root(seg, &root));
  check("params", pdshm_scope_new(root, "params", &p));
  check("X", pdshm_var_create(p, "X", &v));
  check("S", pdshm_var_create(p, "S", &v));
  pdshm_scope_release(p);
  pdshm_scope_release(root);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      reps = 3;
      hot_iters = 20000;
    } else {
      fprintf(stderr, "usage: bench_recovery [--quick]\n");
      return 2;
    }
  }
  printf("bench_recovery: the cost of a death, and of surviving deaths (%s)\n",
         reps < 5 ? "--quick" : "full");
  pdshm_seg *seg;
  pdshm_options o = {.size = SEG_SIZE};
  creator = getpid();
  snprintf(seg_name, sizeof seg_name, "bench_recovery-%d", (int)creator);
  check("pdshm_create", pdshm_create(seg_name, &o, &seg));
  make_params(seg);
  reaping(seg);
  dead_locks(seg);
  hot_path(seg);
  pdshm_detach(seg);
  pdshm_unlink(seg_name);
  return 0;
}
