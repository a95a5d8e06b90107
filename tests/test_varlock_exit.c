/* test_varlock_exit.c - where variable locks go when their holder goes: a
 * thread that exits holding shared and exclusive locks lets go of them; an
 * attachment made after a detach holds nothing of the detached one's, even
 * mapped at the same address; a holder killed between its exclusive
 * release and its wakes leaves no pdshm_var_wait asleep once reaped. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/crashpoint.h"
#include "model/model.h"
#include "testutil.h"

#define SEC 1000000000ll

static char seg_name[PDSHM_SEG_NAME_MAX + 1];

static pdshm_seg *make_seg(pdshm_var **a, pdshm_var **b) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("vlx"));
  pdshm_seg *seg = tu_create_as(seg_name, 4u << 20, 0);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  ck_assert_int_eq(pdshm_var_get(root, "a", a), 0);
  if (b) ck_assert_int_eq(pdshm_var_get(root, "b", b), 0);
  pdshm_scope_release(root);
  return seg;
}

struct exiter {
  pdshm_var *shared, *exclusive;
  int rc;
};

static void *lock_and_exit(void *arg) {
  struct exiter *x = arg;
  x->rc = pdshm_var_lock(x->shared, 0);
  if (!x->rc) x->rc = pdshm_var_lock(x->shared, 0); /* a re-entry: one hold, counted twice */
  if (!x->rc) x->rc = pdshm_var_lock(x->exclusive, 1);
  return NULL;
}

/* Another process (which waits for no thread of ours) takes both locks
 * exclusively: 0 when it got them within its bound. */
static int take_both(void *arg) {
  (void)arg;
  pdshm_seg *seg;
  pdshm_scope *root;
  if (pdshm_attach(seg_name, NULL, &seg) || pdshm_root(seg, &root)) return 90;
  const char *names[] = {"a", "b"};
  for (int i = 0; i < 2; i++) {
    pdshm_var *v = pdshm_find_local_var(root, names[i]);
    if (!v || pdshm_var_lock(v, 1) || pdshm_var_unlock(v)) return 91 + i;
  }
  pdshm_scope_release(root);
  return pdshm_detach(seg) ? 95 : 0;
}

START_TEST(thread_exit_lets_go) {
  pdshm_var *a, *b;
  pdshm_seg *seg = make_seg(&a, &b);
  struct exiter x = {.shared = a, .exclusive = b};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, lock_and_exit, &x), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(x.rc, 0);
  int owner;
  ck_assert_uint_eq(pdshm__varlock_readers(pdshm__var_rec(a), &owner), 0);
  ck_assert_uint_eq(pdshm__varlock_readers(pdshm__var_rec(b), &owner), 0);
  ck_assert_int_eq(owner, -1);
  ck_assert_int_eq(tu_wait(tu_spawn(take_both, NULL)), 0);
  ck_assert_int_eq(pdshm_var_unlock(a), PDSHM_EPERM); /* not this thread's */
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  tu_cleanup();
}
END_TEST

/* A lock taken through one attachment, which is then detached: the next
 * attachment (mapped where the first was, when the kernel picks the same
 * range) neither finds that hold (EDEADLK, EPERM) nor has the lock. */
START_TEST(detach_forgets_holds) {
  pdshm_var *a;
  pdshm_seg *seg = make_seg(&a, NULL);
  ck_assert_int_eq(pdshm_var_lock(a, 1), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_attach(seg_name, NULL, &seg), 0);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  pdshm_var *again = pdshm_find_local_var(root, "a");
  ck_assert_ptr_nonnull(again);
  ck_assert_int_eq(pdshm_var_unlock(again), PDSHM_EPERM);
  ck_assert_int_eq(pdshm_var_lock(again, 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(again), 0);
  ck_assert_int_eq(pdshm_var_lock(again, 0), 0);
  ck_assert_int_eq(pdshm_var_unlock(again), 0);
  pdshm_scope_release(root);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  tu_cleanup();
}
END_TEST

/* The holder: locks a exclusively, stops until continued, then dies between
 * its release and its wakes. */
static int hold_then_die_releasing(void *arg) {
  (void)arg;
  pdshm_seg *seg;
  pdshm_scope *root;
  if (pdshm_attach(seg_name, NULL, &seg) || pdshm_root(seg, &root)) return 90;
  pdshm_var *v = pdshm_find_local_var(root, "a");
  if (!v || pdshm_var_lock(v, 1)) return 91;
  raise(SIGSTOP);
  pdshm__crash_arm(1, "varlock.excl.released");
  pdshm_var_unlock(v);
  return 92; /* not reached: killed in the unlock */
}

struct waiter {
  pdshm_var *v;
  uint64_t seen;
  _Atomic int rc; /* 1 until pdshm_var_wait returns */
};

static void *wait_version(void *arg) {
  struct waiter *w = arg;
  atomic_store(&w->rc, pdshm_var_wait(w->v, w->seen, -1));
  return NULL;
}

START_TEST(reaper_wakes_version_waiters) {
  pdshm_var *a;
  pdshm_seg *seg = make_seg(&a, NULL);
  pid_t pid = tu_spawn(hold_then_die_releasing, NULL);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
  ck_assert(WIFSTOPPED(st));
  struct pdshm_var_rec *r = pdshm__var_rec(a);
  struct waiter w = {.v = a, .seen = pdshm_var_version(a), .rc = 1};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, wait_version, &w), 0);
  uint64_t t0 = tu_now_ns();
  while (!atomic_load(&r->vwaiters)) { /* asleep, or about to be, on the version */
    ck_assert_msg(tu_now_ns() - t0 < 10 * SEC, "the waiter never waited");
    usleep(1000);
  }
  usleep(20000);
  ck_assert_int_eq(kill(pid, SIGCONT), 0);
  ck_assert_int_eq(tu_wait(pid), 128 + SIGKILL);
  ck_assert_uint_eq(pdshm_var_version(a), w.seen + 1); /* released: the version moved */
  tu_await_dead(seg, 1);
  unsigned reaped = 0;
  ck_assert_int_eq(pdshm_reap(seg, &reaped), 0);
  ck_assert_uint_ge(reaped, 1);
  t0 = tu_now_ns();
  while (atomic_load(&w.rc) == 1) {
    ck_assert_msg(tu_now_ns() - t0 < 10 * SEC, "pdshm_var_wait still asleep after the reap");
    usleep(1000);
  }
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(atomic_load(&w.rc), 0);
  ck_assert_int_eq(pdshm_var_lock(a, 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(a), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  tu_cleanup();
}
END_TEST

static Suite *exit_suite(void) {
  Suite *s = suite_create("varlock_exit");
  TCase *tc = tu_tcase(s, "exits", 60, NULL, NULL);
  tcase_add_test(tc, thread_exit_lets_go);
  tcase_add_test(tc, detach_forgets_holds);
  tcase_add_test(tc, reaper_wakes_version_waiters);
  return s;
}

int main(void) { return tu_run(exit_suite()) ? 1 : 0; }
