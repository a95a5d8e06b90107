/* test_varlock_bias.c - shared takes the lock word does not count
 * (lib/model/varlock_bias.c): one process's reads keep the counted lock;
 * readers of several processes that meet on the word turn the bias on; an
 * uncounted share is its record, which the inspector counts and a writer
 * waits for; writers and readers keep excluding each other while the bias
 * goes on and off under them, between processes and between threads
 * (which ThreadSanitizer checks: .ci/run); an uncounted reader killed holds
 * up no writer and leaves nothing behind, and one stopped before it decided
 * whether it holds stalls no writer.  (Deaths at each crash point of these
 * paths: test_crash's var_lock_*_biased operations.) */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "base/crashpoint.h"
#include "model/model.h"
#include "model/varlock.h"
#include "testutil.h"

#define SEC 1000000000ull
#define BOUND_S 20 /* an event that does not come within this is a failure */

static char seg_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;
static pdshm_var *v; /* "v": two int64 that writers keep equal */

static void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("vlb"));
  seg = tu_create_as(seg_name, 4u << 20, 0);
  pdshm_scope *root;
  int64_t two = 2;
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  ck_assert_int_eq(pdshm_var_get(root, "v", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_I64, 1, &two), 0);
  pdshm_scope_release(root);
}

static void teardown(void) {
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  tu_cleanup();
}

static struct pdshm_var_rec *rec(void) { return pdshm__var_rec(v); }

static void bias_on(void) { atomic_store(&rec()->lk_rbias, VL_BIAS_ON); }

/* Shared holders: (those the word counts, every one). */
static uint64_t counted(void) {
  return (atomic_load(&rec()->lk) & VL_READERS) / VL_READER;
}
static uint64_t holders(void) {
  int owner;
  return pdshm__varlock_readers(seg, rec(), &owner);
}

/* A child's own attachment and its "v". */
static pdshm_var *child_v(pdshm_seg **s) {
  pdshm_scope *root;
  if (!(*s = tu_attach(seg_name)) || pdshm_root(*s, &root)) return NULL;
  pdshm_var *x = pdshm_find_var(root, "v");
  pdshm_scope_release(root);
  return x;
}

START_TEST(one_reader_keeps_the_counted_lock) {
  for (int i = 0; i < 10000; i++) {
    ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
    ck_assert_uint_eq(counted(), 1);
    ck_assert_int_eq(pdshm_var_unlock(v), 0);
  }
  ck_assert_uint_ne(atomic_load(&rec()->lk_rbias), VL_BIAS_ON);
}
END_TEST

/* Readers that take shared locks until *stop. */
static int reader_loop(void *arg) {
  _Atomic int *stop = arg;
  pdshm_seg *s;
  pdshm_var *x = child_v(&s);
  if (!x) return 1;
  while (!atomic_load(stop))
    if (pdshm_var_lock(x, 0) || pdshm_var_unlock(x)) return 2;
  return pdshm_detach(s) ? 3 : 0;
}

START_TEST(readers_that_meet_turn_the_bias_on) {
  _Atomic int *stop = tu_shared(sizeof *stop);
  pid_t a = tu_fork(reader_loop, stop), b = tu_fork(reader_loop, stop);
  uint64_t t0 = tu_now_ns();
  while (atomic_load(&rec()->lk_rbias) != VL_BIAS_ON && tu_now_ns() - t0 < BOUND_S * SEC)
    sched_yield();
  atomic_store(stop, 1);
  ck_assert_int_eq(tu_wait(a), 0);
  ck_assert_int_eq(tu_wait(b), 0);
  ck_assert_msg(atomic_load(&rec()->lk_rbias) == VL_BIAS_ON,
                "two processes reading one variable never turned its bias on in %d s", BOUND_S);
}
END_TEST

/* A writer of another process: it takes v exclusively and answers whether
 * the parent's share was gone by then (*held cleared before its unlock). */
struct writer_arg {
  _Atomic int held, started;
};

static int writer_after_reader(void *arg) {
  struct writer_arg *w = arg;
  pdshm_seg *s;
  pdshm_var *x = child_v(&s);
  if (!x) return 1;
  atomic_store(&w->started, 1);
  if (pdshm_var_lock(x, 1)) return 2;
  int early = atomic_load(&w->held);
  if (pdshm_var_unlock(x)) return 3;
  return early ? 4 : pdshm_detach(s) ? 5 : 0;
}

START_TEST(a_writer_waits_for_an_uncounted_share) {
  bias_on();
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
  ck_assert_uint_eq(counted(), 0); /* uncounted: its record alone */
  ck_assert_uint_eq(holders(), 1); /* and yet the inspector sees it */
  struct writer_arg *w = tu_shared(sizeof *w);
  atomic_store(&w->held, 1);
  pid_t kid = tu_fork(writer_after_reader, w);
  while (!atomic_load(&w->started)) sched_yield();
  struct timespec pause = {0, 200 * 1000 * 1000}; /* the writer is at its take by then */
  nanosleep(&pause, NULL);
  atomic_store(&w->held, 0);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  ck_assert_int_eq(tu_wait(kid), 0);
  ck_assert_uint_ne(atomic_load(&rec()->lk_rbias), VL_BIAS_ON); /* the writer revoked it */
  ck_assert_uint_eq(holders(), 0);
}
END_TEST

/* Writers add one to both of v's words; readers find them equal.  The
 * parent turns the bias on again and again meanwhile, so that writers
 * revoke it while readers take uncounted and counted shares. */
#define MIX_ROUNDS 20000

static int mixer(void *arg) {
  int writer = (int)(intptr_t)arg;
  pdshm_seg *s;
  pdshm_var *x = child_v(&s);
  if (!x) return 1;
  volatile int64_t *n = pdshm_tensor_data(x);
  for (int i = 0; i < MIX_ROUNDS; i++) {
    int excl = writer && i % 4 == 0;
    if (pdshm_var_lock(x, excl)) return 2;
    if (excl) {
      n[0]++;
      sched_yield(); /* a reader that got in beside us would see n[0] != n[1] */
      n[1]++;
    } else if (n[0] != n[1]) {
      return 3;
    }
    if (pdshm_var_unlock(x)) return 4;
  }
  return pdshm_detach(s) ? 5 : 0;
}

START_TEST(writers_and_readers_exclude_while_the_bias_flips) {
  pid_t kids[3] = {tu_fork(mixer, (void *)1), tu_fork(mixer, (void *)0),
                   tu_fork(mixer, (void *)0)};
  int left = 3, rc[3] = {-1, -1, -1};
  while (left) {
    bias_on();
    sched_yield();
    for (int k = 0; k < 3; k++) {
      int st;
      if (rc[k] < 0 && waitpid(kids[k], &st, WNOHANG) == kids[k]) {
        rc[k] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        left--;
      }
    }
  }
  for (int k = 0; k < 3; k++) ck_assert_msg(rc[k] == 0, "process %d ended with %d", k, rc[k]);
  const int64_t *n = pdshm_tensor_data(v);
  ck_assert_int_eq(n[0], MIX_ROUNDS / 4);
  ck_assert_int_eq(n[1], MIX_ROUNDS / 4);
}
END_TEST

/* The same between threads of one process (what ThreadSanitizer checks:
 * the writer's words are plain stores, which the lock must order).  They
 * go on past MIX_ROUNDS until some reader held an uncounted share, for
 * BOUND_S at most: on a busy machine the readers may take turns at first. */
struct rw_thread {
  pdshm_var *v;
  int writer, bad;
  int64_t writes, shares;
  _Atomic int64_t *uncounted; /* shares held while the word counted none */
  uint64_t deadline;
};

static void *rw_thread(void *arg) {
  struct rw_thread *t = arg;
  int64_t *n = pdshm_tensor_data(t->v);
  for (int i = 0; i < MIX_ROUNDS || (!atomic_load(t->uncounted) && tu_now_ns() < t->deadline);
       i++) {
    int excl = t->writer && i % 8 == 0;
    if (pdshm_var_lock(t->v, excl)) {
      t->bad++;
      continue;
    }
    if (excl) {
      n[0]++;
      n[1]++;
      t->writes++;
    } else {
      t->bad += n[0] != n[1];
      t->shares++;
      if (counted() == 0) atomic_fetch_add(t->uncounted, 1);
    }
    if (pdshm_var_unlock(t->v)) t->bad++;
  }
  return NULL;
}

START_TEST(threads_read_beside_a_writer) {
  struct rw_thread t[4];
  pthread_t th[4];
  _Atomic int64_t uncounted = 0;
  for (int i = 0; i < 4; i++) {
    t[i] = (struct rw_thread){.v = v, .writer = i == 0, .uncounted = &uncounted,
                              .deadline = tu_now_ns() + BOUND_S * SEC};
    ck_assert_int_eq(pthread_create(&th[i], NULL, rw_thread, &t[i]), 0);
  }
  int64_t shares = 0;
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    ck_assert_int_eq(t[i].bad, 0);
    shares += t[i].shares;
  }
  const int64_t *n = pdshm_tensor_data(v);
  ck_assert_int_eq(n[0], t[0].writes);
  ck_assert_int_eq(n[1], t[0].writes);
  ck_assert_msg(atomic_load(&uncounted) > 0, "no reader held an uncounted share in %d s",
                BOUND_S);
  printf("threads: %lld of %lld shares uncounted\n", (long long)atomic_load(&uncounted),
         (long long)shares);
}
END_TEST

static int share_and_die(void *arg) {
  (void)arg;
  pdshm_seg *s;
  pdshm_var *x = child_v(&s);
  if (!x || pdshm_var_lock(x, 0)) return 1;
  raise(SIGKILL);
  return 2;
}

START_TEST(a_killed_uncounted_reader_holds_up_no_writer) {
  bias_on();
  ck_assert_int_eq(tu_wait(tu_fork(share_and_die, NULL)), 128 + SIGKILL);
  ck_assert_uint_eq(counted(), 0);
  ck_assert_uint_eq(holders(), 0); /* a dead slot's record holds nothing */
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_var_lock(v, 1), 0);
  ck_assert_msg(tu_now_ns() - t0 < BOUND_S * SEC, "the writer waited %d s for a dead reader",
                BOUND_S);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  unsigned reaped = 0;
  ck_assert_int_eq(pdshm_reap(seg, &reaped), 0);
  ck_assert_uint_eq(reaped, 1);
  ck_assert_uint_eq(holders(), 0);
}
END_TEST

/* A reader stopped while it decides whether its uncounted take holds:
 * the writer cancels the take rather than wait for a process that may
 * never run again; continued, the reader steps back to a counted share. */
static int share_stopped_undecided(void *arg) {
  (void)arg;
  pdshm_seg *s;
  pdshm_var *x = child_v(&s);
  if (!x) return 1;
  pdshm__crash_arm_signal(1, "varlock.shared.trying", SIGSTOP);
  if (pdshm_var_lock(x, 0)) return 2;
  int counted_share = counted() == 1;
  if (pdshm_var_unlock(x)) return 3;
  return !counted_share ? 4 : pdshm_detach(s) ? 5 : 0;
}

START_TEST(a_reader_stopped_undecided_stalls_no_writer) {
  bias_on();
  pid_t kid = tu_fork(share_stopped_undecided, NULL);
  int st;
  ck_assert_int_eq(waitpid(kid, &st, WUNTRACED), kid);
  ck_assert_msg(WIFSTOPPED(st), "the reader did not stop in its window");
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_var_lock(v, 1), 0);
  ck_assert_msg(tu_now_ns() - t0 < BOUND_S * SEC, "the writer waited %d s for a stopped reader",
                BOUND_S);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  ck_assert_int_eq(kill(kid, SIGCONT), 0);
  ck_assert_int_eq(tu_wait(kid), 0);
}
END_TEST

static Suite *bias_suite(void) {
  Suite *s = suite_create("uncounted shared locks");
  TCase *tc = tcase_create("bias");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 3 * BOUND_S);
  tcase_add_test(tc, one_reader_keeps_the_counted_lock);
  tcase_add_test(tc, readers_that_meet_turn_the_bias_on);
  tcase_add_test(tc, a_writer_waits_for_an_uncounted_share);
  tcase_add_test(tc, writers_and_readers_exclude_while_the_bias_flips);
  tcase_add_test(tc, threads_read_beside_a_writer);
  tcase_add_test(tc, a_killed_uncounted_reader_holds_up_no_writer);
  tcase_add_test(tc, a_reader_stopped_undecided_stalls_no_writer);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(bias_suite()) ? 1 : 0; }
