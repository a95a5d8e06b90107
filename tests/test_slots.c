/* test_slots.c - process slots and liveness, reaping, robust locks with
 * their counters, the lock table, journals killed at their crash windows. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static pdshm_seg *seg;

static void setup(void) { seg = tu_create("slots", 4u << 20, 4); }
static void teardown(void) {
  if (seg) pdshm_detach(seg);
  tu_cleanup();
}

static pdshm_stats stats(void) {
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  return st;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A child that attaches, signals on p[1], and sleeps until killed. */
static int attach_and_sleep(void *arg) {
  int *p = arg;
  pdshm_seg *s;
  if (pdshm_attach(seg->name, NULL, &s)) return 1;
  if (write(p[1], "a", 1) != 1) return 2;
  for (;;) pause();
}

static pid_t sleeper(int *p) {
  char c;
  pid_t pid = tu_fork(attach_and_sleep, p);
  ck_assert_int_eq(read(p[0], &c, 1), 1);
  return pid;
}

START_TEST(exhaustion_then_reap) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t kids[3];
  for (int i = 0; i < 3; i++) kids[i] = sleeper(p);
  pdshm_seg *extra = NULL;
  ck_assert_int_eq(pdshm_attach(seg->name, NULL, &extra), PDSHM_EUSERS);
  kill(kids[1], SIGKILL);
  ck_assert_int_eq(tu_wait(kids[1]), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  ck_assert_int_eq(pdshm_attach(seg->name, NULL, &extra), 0); /* reaped the dead slot */
  ck_assert_uint_eq(stats().procs_alive, 4);
  pdshm_detach(extra);
  for (int i = 0; i < 3; i += 2) {
    kill(kids[i], SIGKILL);
    tu_wait(kids[i]);
  }
}
END_TEST

START_TEST(dead_until_reaped_stopped_alive) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t a = sleeper(p), b = sleeper(p);
  kill(a, SIGKILL);
  tu_wait(a);
  tu_await_dead(seg, 1);
  kill(b, SIGSTOP);
  waitpid(b, NULL, WUNTRACED);
  ck_assert_uint_eq(stats().procs_dead, 1);
  ck_assert_uint_eq(stats().procs_alive, 2);
  unsigned n = 0;
  ck_assert_int_eq(pdshm_reap(seg, &n), 0);
  ck_assert_uint_eq(n, 1);
  ck_assert_uint_eq(stats().procs_dead, 0);
  ck_assert_uint_eq(stats().procs_alive, 2); /* the stopped one keeps its slot */
  kill(b, SIGCONT);
  kill(b, SIGKILL);
  tu_wait(b);
}
END_TEST

/* Liveness is the OFD lock, not the pid: a dead slot that names a live pid
 * (ours, as after pid reuse) is still dead. */
START_TEST(pid_reuse_does_not_matter) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t a = sleeper(p);
  kill(a, SIGKILL);
  tu_wait(a);
  tu_await_dead(seg, 1);
  for (uint32_t i = 0; i < seg->hdr->max_procs; i++)
    if (i != seg->slot && atomic_load(&pdshm__slot(seg, i)->state) != PDSHM_SLOT_FREE)
      pdshm__slot(seg, i)->pid = (uint32_t)getpid();
  ck_assert_uint_eq(stats().procs_dead, 1);
  unsigned n = 0;
  ck_assert_int_eq(pdshm_reap(seg, &n), 0);
  ck_assert_uint_eq(n, 1);
}
END_TEST

START_TEST(reaper_died_midway) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t a = sleeper(p);
  kill(a, SIGKILL);
  tu_wait(a);
  tu_await_dead(seg, 1);
  uint32_t dead = PDSHM_NOSLOT;
  for (uint32_t i = 0; i < seg->hdr->max_procs; i++)
    if (i != seg->slot && atomic_load(&pdshm__slot(seg, i)->state) != PDSHM_SLOT_FREE) dead = i;
  ck_assert_uint_ne(dead, PDSHM_NOSLOT);
  /* as if a reaper had started on it and died */
  atomic_store(&pdshm__slot(seg, dead)->state, PDSHM_SLOT_REAPING);
  pdshm__slot(seg, dead)->reaper_pid = 1;
  unsigned n = 0;
  ck_assert_int_eq(pdshm_reap(seg, &n), 0);
  ck_assert_uint_eq(n, 1);
  ck_assert_uint_eq(atomic_load(&pdshm__slot(seg, dead)->state), PDSHM_SLOT_FREE);
}
END_TEST

static int attach_and_die(void *arg) {
  (void)arg;
  pdshm_seg *s;
  if (pdshm_attach(seg->name, NULL, &s)) return 1;
  raise(SIGKILL);
  return 2;
}

START_TEST(attach_reaps) {
  ck_assert_int_eq(tu_wait(tu_fork(attach_and_die, NULL)), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  ck_assert_uint_eq(stats().procs_dead, 1);
  pdshm_seg *s = tu_attach(seg->name);
  ck_assert_uint_eq(stats().procs_dead, 0);
  pdshm_detach(s);
}
END_TEST

/* ---- robust locks ---------------------------------------------------------------- */

static uint32_t lock_index;

static int hold_and_die(void *arg) {
  pdshm_seg *s;
  if (pdshm_attach(seg->name, NULL, &s)) return 1;
  if (pdshm__lock(s, arg ? PDSHM_LOCK_HEAP : lock_index)) return 2;
  raise(SIGKILL);
  return 3;
}

START_TEST(lock_holder_dies) {
  ck_assert_int_eq(pdshm__lock_claim(seg, PDSHM_LK_SCOPE, 0, &lock_index), 0);
  ck_assert_int_eq(tu_wait(tu_fork(hold_and_die, NULL)), 128 + SIGKILL);
  struct pdshm_lock *l = pdshm__lockent(seg, lock_index);
  uint64_t died = l->owner_died;
  double t0 = now_s();
  ck_assert_int_eq(pdshm__lock(seg, lock_index), 0);
  ck_assert_double_lt(now_s() - t0, 0.5);
  ck_assert_uint_eq(l->owner_died, died + 1);
  pdshm__unlock(seg, lock_index);
  ck_assert_int_eq(pdshm__lock(seg, lock_index), 0); /* consistent again */
  pdshm__unlock(seg, lock_index);
}
END_TEST

START_TEST(heap_lock_holder_dies) {
  uint64_t rebuilds = seg->hdr->heap.rebuilds;
  ck_assert_int_eq(tu_wait(tu_fork(hold_and_die, (void *)1)), 128 + SIGKILL);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm_off_t off;
  ck_assert_int_eq(pdshm__alloc(seg, ln, 100000, PDSHM_T_RAW, &off), 0);
  pdshm__free(seg, ln, off);
  pdshm__lane_put(ln);
  ck_assert_uint_eq(seg->hdr->heap.rebuilds, rebuilds + 1);
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}
END_TEST

static int hammer(void *arg) {
  (void)arg;
  pdshm_seg *s;
  if (pdshm_attach(seg->name, NULL, &s)) return 1;
  for (int i = 0; i < 20000; i++) {
    if (pdshm__lock(s, lock_index)) return 2;
    for (volatile int k = 0; k < 50; k++) continue;
    pdshm__unlock(s, lock_index);
  }
  return pdshm_detach(s) ? 3 : 0;
}

START_TEST(contention_counters) {
  ck_assert_int_eq(pdshm__lock_claim(seg, PDSHM_LK_SCOPE, 0, &lock_index), 0);
  struct pdshm_lock *l = pdshm__lockent(seg, lock_index);
  uint64_t before = l->acquisitions;
  ck_assert_int_eq(pdshm__lock(seg, lock_index), 0); /* they start against a held lock */
  pid_t a = tu_fork(hammer, NULL), b = tu_fork(hammer, NULL);
  usleep(100000);
  pdshm__unlock(seg, lock_index);
  ck_assert_int_eq(tu_wait(a), 0);
  ck_assert_int_eq(tu_wait(b), 0);
  ck_assert_uint_eq(l->acquisitions - before, 40001);
  ck_assert_uint_gt(l->contended, 0);
  ck_assert_uint_gt(l->wait_ns, 0);
}
END_TEST

START_TEST(lock_table_exhaustion) {
  const char *name = tu_name("locks");
  pdshm_seg *s;
  pdshm_options o = {.size = 2u << 20, .max_procs = 4, .max_locks = PDSHM_LOCKS_MIN};
  ck_assert_int_eq(pdshm_create(name, &o, &s), 0);
  uint32_t idx;
  int n = 0;
  while (pdshm__lock_claim(s, PDSHM_LK_VAR, 0, &idx) == 0) n++;
  ck_assert_int_eq(pdshm__lock_claim(s, PDSHM_LK_VAR, 0, &idx), PDSHM_ENOLCK);
  /* root holds one, the heap one more */
  ck_assert_int_eq(n, PDSHM_LOCKS_MIN - 2);
  pdshm__lock_sweep_slot(s, s->slot); /* what we claimed but never published */
  ck_assert_int_eq(pdshm__lock_claim(s, PDSHM_LK_VAR, 0, &idx), 0);
  pdshm_detach(s);
  pdshm_unlink(name);
}
END_TEST

/* ---- journals killed at their crash windows ------------------------------------------ */

enum window { W_ARMED, W_COMMIT_UNAPPLIED, W_COMMIT_HALF };

struct jargs {
  enum window w;
  pdshm_off_t word, old;
};

static pdshm_off_t jword; /* an 8-byte word in a block of our own, for stores */

/* A child journals two stores and the retirement of `old` under lock_index,
 * then dies at window w. */
static int journal_and_die(void *arg) {
  struct jargs *a = arg;
  pdshm_seg *s;
  if (pdshm_attach(seg->name, NULL, &s)) return 1;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(s);
  pdshm_off_t nb;
  if (pdshm__j_begin(s, ln, lock_index, 1)) return 2;
  if (pdshm__j_alloc(s, ln, 200, PDSHM_T_RAW, &nb)) return 3;
  pdshm__j_set(s, ln, a->word, 111);
  pdshm__j_set(s, ln, a->word + 8, 222);
  pdshm__j_retire(s, ln, a->old);
  if (a->w == W_ARMED) raise(SIGKILL);
  atomic_store(&ln->rec->j.state, PDSHM_J_COMMIT); /* the commit point, then die */
  if (a->w == W_COMMIT_HALF) *(uint64_t *)(s->base + a->word) = 111; /* one store applied */
  raise(SIGKILL);
  return 4;
}

static uint64_t used(void) { return stats().used; }

static void journal_window(enum window w, bool by_reaper) {
  ck_assert_int_eq(pdshm__lock_claim(seg, PDSHM_LK_SCOPE, 0, &lock_index), 0);
  atomic_store(&pdshm__lockent(seg, lock_index)->alloc, PDSHM_LOCK_PUBLISHED);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm_off_t old;
  ck_assert_int_eq(pdshm__alloc(seg, ln, 64, PDSHM_T_RAW, &jword), 0);
  ck_assert_int_eq(pdshm__alloc(seg, ln, 64, PDSHM_T_RAW, &old), 0);
  pdshm__blk(seg, jword)->owner = 0; /* published, as journaled words are */
  pdshm__blk(seg, old)->owner = 0;
  memset(seg->base + jword, 0, 16);
  pdshm__lane_put(ln);
  uint64_t base = used();
  struct jargs a = {.w = w, .word = jword, .old = old};
  ck_assert_int_eq(tu_wait(tu_fork(journal_and_die, &a)), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  if (by_reaper) {
    unsigned n;
    ck_assert_int_eq(pdshm_reap(seg, &n), 0);
  } else {
    ck_assert_int_eq(pdshm__lock(seg, lock_index), 0); /* EOWNERDEAD: repairs */
    pdshm__unlock(seg, lock_index);
    unsigned n;
    ck_assert_int_eq(pdshm_reap(seg, &n), 0);
  }
  uint64_t *wd = (uint64_t *)(seg->base + jword);
  struct pdshm_blk *ob = pdshm__blk(seg, old);
  if (w == W_ARMED) { /* rolled back: nothing changed, the new block freed */
    ck_assert_uint_eq(wd[0], 0);
    ck_assert_uint_eq(wd[1], 0);
    ck_assert_uint_eq(pdshm__blk_state(atomic_load(&ob->word)), PDSHM_BLK_USED);
    ck_assert_uint_eq(ob->owner, 0);
    ck_assert_uint_eq(used(), base);
  } else { /* finished: both stores, old freed, new published */
    ck_assert_uint_eq(wd[0], 111);
    ck_assert_uint_eq(wd[1], 222);
    ck_assert_uint_ne(pdshm__blk_state(atomic_load(&ob->word)), PDSHM_BLK_USED);
  }
  ck_assert_int_eq(pdshm__heap_check(seg, stderr), 0);
}

START_TEST(journal_armed_by_lock) { journal_window(W_ARMED, false); }
END_TEST
START_TEST(journal_armed_by_reaper) { journal_window(W_ARMED, true); }
END_TEST
START_TEST(journal_commit_by_lock) { journal_window(W_COMMIT_UNAPPLIED, false); }
END_TEST
START_TEST(journal_commit_by_reaper) { journal_window(W_COMMIT_UNAPPLIED, true); }
END_TEST
START_TEST(journal_half_applied) { journal_window(W_COMMIT_HALF, true); }
END_TEST

static int journal_wild_and_die(void *arg) {
  (void)arg;
  pdshm_seg *s;
  if (pdshm_attach(seg->name, NULL, &s)) return 1;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(s);
  if (pdshm__j_begin(s, ln, lock_index, 1)) return 2;
  ln->rec->j.redo[0] = (struct pdshm_redo){.at = s->size + 4096, .val = 1}; /* out of bounds */
  ln->rec->j.nredo = 1;
  atomic_store(&ln->rec->j.state, PDSHM_J_COMMIT);
  raise(SIGKILL);
  return 3;
}

START_TEST(failed_repair_poisons) {
  ck_assert_int_eq(pdshm__lock_claim(seg, PDSHM_LK_SCOPE, 0, &lock_index), 0);
  ck_assert_int_eq(tu_wait(tu_fork(journal_wild_and_die, NULL)), 128 + SIGKILL);
  ck_assert_int_eq(pdshm__lock(seg, lock_index), PDSHM_ENOTRECOVERABLE);
  ck_assert_uint_ne(atomic_load(&seg->hdr->poisoned), 0);
  unsigned n;
  ck_assert_int_eq(pdshm_reap(seg, &n), PDSHM_ENOTRECOVERABLE);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(seg, &root), PDSHM_ENOTRECOVERABLE);
  ck_assert_int_eq(pdshm__lock(seg, lock_index), PDSHM_ENOTRECOVERABLE); /* for good */
}
END_TEST

/* ---- threads ------------------------------------------------------------------------------ */

static void *thread_locks(void *arg) {
  long bad = 0;
  for (int i = 0; i < 20000; i++) {
    struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
    if (pdshm__lock(seg, lock_index)) bad++;
    ++*(volatile long *)arg;
    pdshm__unlock(seg, lock_index);
    pdshm__lane_put(ln);
  }
  return (void *)bad;
}

START_TEST(threads_lanes_and_locks) {
  ck_assert_int_eq(pdshm__lock_claim(seg, PDSHM_LK_SCOPE, 0, &lock_index), 0);
  uint64_t before = pdshm__lockent(seg, lock_index)->acquisitions;
  long counter = 0;
  pthread_t th[6];
  for (int i = 0; i < 6; i++) pthread_create(&th[i], NULL, thread_locks, &counter);
  for (int i = 0; i < 6; i++) {
    void *bad;
    pthread_join(th[i], &bad);
    ck_assert_ptr_null(bad);
  }
  ck_assert_int_eq(counter, 6 * 20000); /* mutual exclusion held */
  ck_assert_uint_eq(pdshm__lockent(seg, lock_index)->acquisitions - before, 6 * 20000);
}
END_TEST

static Suite *slots_suite(void) {
  Suite *s = suite_create("slots");
  TCase *tc = tcase_create("slots and locks");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, exhaustion_then_reap);
  tcase_add_test(tc, dead_until_reaped_stopped_alive);
  tcase_add_test(tc, pid_reuse_does_not_matter);
  tcase_add_test(tc, reaper_died_midway);
  tcase_add_test(tc, attach_reaps);
  tcase_add_test(tc, lock_holder_dies);
  tcase_add_test(tc, heap_lock_holder_dies);
  tcase_add_test(tc, contention_counters);
  tcase_add_test(tc, lock_table_exhaustion);
  tcase_add_test(tc, journal_armed_by_lock);
  tcase_add_test(tc, journal_armed_by_reaper);
  tcase_add_test(tc, journal_commit_by_lock);
  tcase_add_test(tc, journal_commit_by_reaper);
  tcase_add_test(tc, journal_half_applied);
  tcase_add_test(tc, failed_repair_poisons);
  tcase_add_test(tc, threads_lanes_and_locks);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(slots_suite()) ? 1 : 0; }
