/* test_varlock_exit.c - where variable locks go when their holder goes: a
 * thread that exits holding shared and exclusive locks lets go of them; an
 * attachment made after a detach holds nothing of the detached one's, even
 * mapped at the same address; a holder killed between its exclusive
 * release and its wakes leaves no pdshm_var_wait asleep once reaped; the
 * hold record a thread reserves (CLAIMED between its takes) is freed when
 * the thread exits, and by the reaper of a killed process. */
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

/* The end of every test: seg checked clean, detached, unlinked. */
static void clean_end(pdshm_seg *seg) {
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  tu_cleanup();
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
  ck_assert_uint_eq(pdshm__varlock_readers(seg, pdshm__var_rec(a), &owner), 0);
  ck_assert_uint_eq(pdshm__varlock_readers(seg, pdshm__var_rec(b), &owner), 0);
  ck_assert_int_eq(owner, -1);
  ck_assert_int_eq(tu_wait(tu_spawn(take_both, NULL)), 0);
  ck_assert_int_eq(pdshm_var_unlock(a), PDSHM_EPERM); /* not this thread's */
  clean_end(seg);
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
  clean_end(seg);
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
  clean_end(seg);
}
END_TEST

/* A thread holds locks in two attachments at once: each hold is its own
 * (the other attachment's entry in the thread's table is no free one). */
START_TEST(holds_in_two_attachments) {
  pdshm_var *a, *c;
  pdshm_seg *seg = make_seg(&a, NULL);
  char other_name[PDSHM_SEG_NAME_MAX + 1];
  snprintf(other_name, sizeof other_name, "%s", tu_name("vlx2"));
  pdshm_seg *other = tu_create_as(other_name, 4u << 20, 0);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(other, &root), 0);
  ck_assert_int_eq(pdshm_var_get(root, "c", &c), 0);
  pdshm_scope_release(root);
  ck_assert_int_eq(pdshm_var_lock(a, 1), 0);
  ck_assert_int_eq(pdshm_var_lock(c, 1), 0);
  ck_assert_int_eq(pdshm_var_lock(a, 0), PDSHM_EDEADLK);
  ck_assert_int_eq(pdshm_var_unlock(c), 0);
  ck_assert_int_eq(pdshm_var_unlock(a), 0);
  ck_assert_int_eq(pdshm_var_unlock(a), PDSHM_EPERM);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_check(other, stderr), 0);
  ck_assert_int_eq(pdshm_detach(other), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  tu_cleanup();
}
END_TEST

/* More detaches holding a lock than the thread's table has entries: the
 * detached attachments' entries are freed when the table is full. */
START_TEST(detached_holds_leave_the_table) {
  pdshm_var *a;
  pdshm_seg *seg = make_seg(&a, NULL);
  for (int i = 0; i < PDSHM_VL_HELD_MAX + 8; i++) {
    pdshm_seg *again;
    pdshm_scope *root;
    ck_assert_int_eq(pdshm_attach(seg_name, NULL, &again), 0);
    ck_assert_int_eq(pdshm_root(again, &root), 0);
    pdshm_var *v = pdshm_find_local_var(root, "a");
    ck_assert_ptr_nonnull(v);
    pdshm_scope_release(root);
    ck_assert_msg(pdshm_var_lock(v, 1) == 0, "take %d: %s", i, pdshm_last_error());
    ck_assert_int_eq(pdshm_detach(again), 0);
  }
  ck_assert_int_eq(pdshm_var_lock(a, 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(a), 0);
  clean_end(seg);
}
END_TEST

/* Records of slot s of seg that are not IDLE; of every slot when s < 0. */
static unsigned records_in_use(pdshm_seg *seg, int s) {
  unsigned n = 0;
  for (uint32_t k = 0; k < seg->hdr->max_procs; k++) {
    if (s >= 0 && k != (uint32_t)s) continue;
    for (uint32_t i = 0; i < PDSHM_VL_SLOT_HOLDS; i++)
      n += atomic_load(&pdshm__slot(seg, k)->vl[i].state) != PDSHM_VL_IDLE;
  }
  return n;
}

struct reserver {
  pdshm_seg *seg, *other;
  pdshm_var *a, *b, *c; /* a and b in seg, c in other */
  unsigned after_one, while_two, after_two, after_other, other_after;
  int rc;
};

/* Takes locks as a thread of the process: one record stays CLAIMED (the
 * reserved one) between takes; a second hold takes another, which goes
 * back to IDLE; a take in another attachment while the reserved record is
 * in use there claims and frees one of that attachment's. */
static void *reserve_and_exit(void *arg) {
  struct reserver *x = arg;
  int s = (int)x->seg->slot;
  x->rc = pdshm_var_lock(x->a, 1);
  if (!x->rc) x->rc = pdshm_var_unlock(x->a);
  x->after_one = records_in_use(x->seg, s);
  if (!x->rc) x->rc = pdshm_var_lock(x->a, 0);
  if (!x->rc) x->rc = pdshm_var_lock(x->b, 1);
  x->while_two = records_in_use(x->seg, s);
  if (!x->rc) x->rc = pdshm_var_unlock(x->b);
  if (!x->rc) x->rc = pdshm_var_unlock(x->a);
  x->after_two = records_in_use(x->seg, s);
  if (!x->rc) x->rc = pdshm_var_lock(x->a, 1);
  if (!x->rc) x->rc = pdshm_var_lock(x->c, 1);
  if (!x->rc) x->rc = pdshm_var_unlock(x->c);
  if (!x->rc) x->rc = pdshm_var_unlock(x->a);
  x->after_other = records_in_use(x->seg, s);
  x->other_after = records_in_use(x->other, (int)x->other->slot);
  return NULL;
}

START_TEST(thread_exit_frees_reserved_record) {
  struct reserver x = {0};
  x.seg = make_seg(&x.a, &x.b);
  char other_name[PDSHM_SEG_NAME_MAX + 1];
  snprintf(other_name, sizeof other_name, "%s", tu_name("vlx2"));
  x.other = tu_create_as(other_name, 4u << 20, 0);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(x.other, &root), 0);
  ck_assert_int_eq(pdshm_var_get(root, "c", &x.c), 0);
  pdshm_scope_release(root);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, reserve_and_exit, &x), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_int_eq(x.rc, 0);
  ck_assert_uint_eq(x.after_one, 1);
  ck_assert_uint_eq(x.while_two, 2);
  ck_assert_uint_eq(x.after_two, 1);
  ck_assert_uint_eq(x.after_other, 1);
  ck_assert_uint_eq(x.other_after, 0);
  ck_assert_uint_eq(records_in_use(x.seg, -1), 0); /* the exit freed the reserved one */
  ck_assert_uint_eq(records_in_use(x.other, -1), 0);
  ck_assert_int_eq(pdshm_check(x.seg, stderr), 0);
  ck_assert_int_eq(pdshm_detach(x.other), 0);
  ck_assert_int_eq(pdshm_detach(x.seg), 0);
  tu_cleanup();
}
END_TEST

/* Locks and unlocks a, then dies holding nothing: its reserved record is
 * CLAIMED. */
static int take_then_die(void *arg) {
  (void)arg;
  pdshm_seg *seg;
  pdshm_scope *root;
  if (pdshm_attach(seg_name, NULL, &seg) || pdshm_root(seg, &root)) return 90;
  pdshm_var *v = pdshm_find_local_var(root, "a");
  if (!v || pdshm_var_lock(v, 1) || pdshm_var_unlock(v)) return 91;
  if (records_in_use(seg, (int)seg->slot) != 1) return 92;
  raise(SIGKILL);
  return 93;
}

START_TEST(reaper_frees_reserved_record) {
  pdshm_var *a;
  pdshm_seg *seg = make_seg(&a, NULL);
  ck_assert_int_eq(tu_wait(tu_spawn(take_then_die, NULL)), 128 + SIGKILL);
  ck_assert_uint_eq(records_in_use(seg, -1), 1);
  tu_await_dead(seg, 1);
  unsigned reaped = 0;
  ck_assert_int_eq(pdshm_reap(seg, &reaped), 0);
  ck_assert_uint_ge(reaped, 1);
  ck_assert_uint_eq(records_in_use(seg, -1), 0);
  ck_assert_int_eq(pdshm_var_lock(a, 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(a), 0);
  clean_end(seg);
}
END_TEST

static Suite *exit_suite(void) {
  Suite *s = suite_create("varlock_exit");
  TCase *tc = tu_tcase(s, "exits", 60, NULL, NULL);
  tcase_add_test(tc, thread_exit_lets_go);
  tcase_add_test(tc, detach_forgets_holds);
  tcase_add_test(tc, reaper_wakes_version_waiters);
  tcase_add_test(tc, holds_in_two_attachments);
  tcase_add_test(tc, detached_holds_leave_the_table);
  tcase_add_test(tc, thread_exit_frees_reserved_record);
  tcase_add_test(tc, reaper_frees_reserved_record);
  return s;
}

int main(void) { return tu_run(exit_suite()) ? 1 : 0; }
