/* test_crash_locks.c - holders of each kind of lock killed: the next taker
 * gets the lock, with what it guards repaired (crashrun.h says how a death
 * is run and verified).  What the tests assert is the event (the repair,
 * the reap, the lock word); how long a take after a death lasts is
 * bench/bench_recovery's figure, against a baseline of its own run.  A take
 * still waiting after TAKE_BOUND_S seconds is a hang.
 */
#include <stdlib.h>
#include <string.h>

#include "crashrun.h"

/* ---- lock holders killed ------------------------------------------------------------ */

#define TAKE_BOUND_S 10

/* Takes v's lock (exclusive or shared) and lets it go; fails when the take
 * did not end within TAKE_BOUND_S seconds or failed. */
static void take_and_release(pdshm_var *v, int exclusive, const char *what) {
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_var_lock(v, exclusive), 0);
  ck_assert_msg(tu_now_ns() - t0 < TAKE_BOUND_S * 1000000000ull, "%s: still waiting after %d s",
                what, TAKE_BOUND_S);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
}

/* The slots reaped since the segment was made. */
static uint64_t reaped(pdshm_seg *seg) { return atomic_load(&seg->hdr->reaped); }

/* The world's params scope, opened, and its variable lk (crashops.c). */
static pdshm_var *world_lk(pdshm_seg *seg, pdshm_scope **params) {
  ck_assert_int_eq(pdshm_scope_open(seg, "params", params), 0);
  pdshm_var *v = pdshm_find_local_var(*params, "lk");
  ck_assert_ptr_nonnull(v);
  return v;
}

/* A child killed inside the heap lock (a block half split): the next
 * allocation gets the lock (EOWNERDEAD) and finds the bins rebuilt. */
START_TEST(heap_lock_holder_killed) {
  pdshm_seg *seg = crash_world();
  uint64_t rebuilds = seg->hdr->heap.rebuilds;
  struct outcome o = {0};
  crash_child_run(
      (struct plan){.op = crash_op_named("heap"), .k = 1, .point = "heap.carve.tail"}, &o);
  uint64_t died = pdshm__lockent(seg, PDSHM_LOCK_HEAP)->owner_died;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm_off_t p;
  ck_assert_int_eq(pdshm__alloc(seg, ln, 100000, PDSHM_T_RAW, &p), 0);
  pdshm__free(seg, ln, p);
  pdshm__lane_put(ln);
  ck_assert_uint_eq(pdshm__lockent(seg, PDSHM_LOCK_HEAP)->owner_died, died + 1);
  ck_assert_uint_eq(seg->hdr->heap.rebuilds, rebuilds + 1);
  crash_reap_verify(seg, "heap lock", 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
}
END_TEST

/* Killed under a scope's lock with its journal half applied: the next
 * taker (EOWNERDEAD) redoes it (the variable is there) before it goes on. */
START_TEST(scope_lock_holder_killed) {
  pdshm_seg *seg = crash_world();
  struct outcome o = {0};
  crash_child_run(
      (struct plan){.op = crash_op_named("var_get"), .k = 2, .point = "j.apply.store"}, &o);
  pdshm_scope *params;
  pdshm_var *v;
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
  ck_assert_int_eq(pdshm_var_get(params, "after", &v), 0);
  /* a fresh world's lock: the one death, repaired by the first taker */
  ck_assert_uint_eq(pdshm__lockent(seg, pdshm__scope_at(seg, params->rec)->lock)->owner_died, 1);
  ck_assert_ptr_nonnull(pdshm_find_local_var(params, "fresh"));
  ck_assert_uint_eq(pdshm__scope_at(seg, params->rec)->seq % 2, 0);
  crash_reap_verify(seg, "scope lock", 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
}
END_TEST

/* An exclusive holder killed: the next exclusive taker finds its slot dead
 * and reaps it, then holds the lock; a shared holder killed: the waiting
 * writer reaps it too (its share is not told from the word), then holds
 * it.  Either way the taker itself reaped the dead holder. */
START_TEST(var_lock_holders_killed) {
  const char *ops_held[] = {"var_lock_die_exclusive", "var_lock_die_shared"};
  for (int i = 0; i < 2; i++) {
    pdshm_seg *seg = crash_world();
    struct outcome o = {0};
    crash_child_run((struct plan){.op = crash_op_named(ops_held[i])}, &o);
    crash_outcome_free(&o);
    pdshm_scope *params;
    pdshm_var *v = world_lk(seg, &params);
    uint64_t before = reaped(seg);
    take_and_release(v, 1, ops_held[i]);
    ck_assert_uint_eq(reaped(seg), before + 1);
    crash_reap_verify(seg, ops_held[i], 0);
    ck_assert_int_eq(pdshm_detach(seg), 0);
    ck_assert_int_eq(pdshm_unlink(crash_seg_name), 0);
  }
}
END_TEST

/* This process's share of params/lk, counted in its word, and the lock
 * let go of: the word is then free (no share left counted), so a writer
 * gets it with its first look. */
static void our_share_counted(pdshm_seg *seg, pdshm_var *v, const char *what, uint64_t k) {
  int owner;
  ck_assert_msg(pdshm__varlock_readers(seg, pdshm__var_rec(v), &owner) == 1 && owner < 0,
                "%s k=%llu: our share is not the only one counted", what, (unsigned long long)k);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  ck_assert_msg(pdshm__varlock_readers(seg, pdshm__var_rec(v), &owner) == 0 && owner < 0,
                "%s k=%llu: the lock is not free once our share went", what,
                (unsigned long long)k);
  take_and_release(v, 1, what);
  crash_reap_verify(seg, what, k);
}

/* Deaths whose share cannot be told from the word (varlock_reap.c, invariant 2):
 * a shared take and release killed at each of its windows, and the reaper
 * of a dead reader killed at each of its own (the word frozen, half
 * recounted), all while this process holds a share of the same variable:
 * the recount finds exactly that share, whoever reaps. */
static bool share_beside_death(bool reaper_dies, uint64_t k, const char *point) {
  pdshm_seg *seg = crash_world();
  pdshm_scope *params;
  pdshm_var *v = world_lk(seg, &params);
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
  struct outcome o = {0};
  struct plan a = {.op = crash_op_named(reaper_dies ? "var_lock_die_shared" : "var_lock_shared"),
                   .k = reaper_dies ? 0 : k, .point = reaper_dies ? NULL : point};
  struct plan b = {.op = &crash_reaper, .k = k, .point = point};
  crash_child_run(a, &o);
  if (reaper_dies) {
    crash_outcome_free(&o);
    crash_child_run(b, &o);
  }
  bool done = o.finished;
  crash_outcome_free(&o);
  ck_assert_int_eq(snap_reap_all(seg), 0);
  our_share_counted(seg, v, point ? point : reaper_dies ? "reaper of a reader" : "reader", k);
  ck_assert_int_eq(pdshm_scope_release(params), 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  ck_assert_int_eq(pdshm_unlink(crash_seg_name), 0);
  return done;
}

START_TEST(var_lock_recount_keeps_live_share) {
  static const char *const points[2][3] = {
      {"varlock.shared.taking", "varlock.shared.counted", "varlock.shared.uncounted"},
      {"varlock.reap.frozen", "varlock.reap.thawed", "varlock.reap.record"}};
  uint64_t k = 1;
  while (!share_beside_death(_i, k, NULL)) k++;
  printf("crash: %s beside a live share: %llu windows\n",
         _i ? "reaper of a dead reader" : "shared lock", (unsigned long long)k - 1);
  for (int p = 0; p < 3; p++) /* each window of its own is among them */
    ck_assert_msg(!share_beside_death(_i, 1, points[_i][p]), "%s never reached", points[_i][p]);
}
END_TEST

/* A writer killed while it waited for readers to drain leaves its "writer
 * waiting" mark: readers must not keep deferring to it.  The first reader
 * that looks finds its slot dead and clears the mark (varlock.c, inv. 4);
 * one deferring to it would leave the mark and take the lock only after
 * its bounded back-off. */
START_TEST(dead_waiting_writer_does_not_hold_readers) {
  pdshm_seg *seg = crash_world();
  pdshm_scope *params;
  pdshm_var *v = world_lk(seg, &params);
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
  struct outcome o = {0};
  crash_child_run((struct plan){.op = crash_op_named("var_lock_die_exclusive"), .k = 1,
                          .point = "varlock.excl.waiting"},
            &o);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  tu_await_dead(seg, 1); /* its slot shows dead (the OFD lock can trail waitpid) */
  struct pdshm_var_rec *r = pdshm__var_rec(v);
  ck_assert_uint_ne(atomic_load(&r->lk_wwait), 0); /* the dead writer's mark */
  take_and_release(v, 0, "a shared take");
  ck_assert_uint_eq(atomic_load(&r->lk_wwait), 0);
  crash_reap_verify(seg, "waiting writer", 0);
  ck_assert_int_eq(pdshm_detach(seg), 0);
}
END_TEST

/* Giving back a lock entry (a scope destroyed, a locked variable erased)
 * happens in a journal.  Killed while applying it, its process leaves the
 * entry AVAILABLE while the journal waits for a repair: a new scope may
 * claim and publish the entry meanwhile, and the repair (re-applying the
 * journal) would then give the new scope's entry back again. */
static const struct {
  const char *op, *after; /* the entry's store: the first after this point */
  const char *under;      /* where the new scopes go                       */
} giveback[] = {{"scope_release", "scope.destroy.vars", "params"}, {"var_erase", NULL, "full"}};

START_TEST(lock_entry_given_back_by_a_killed_process) {
  const struct op *op = crash_op_named(giveback[_i].op);
  struct outcome o = crash_run_child(op, 0, NULL);
  uint64_t k = 0;
  bool past = !giveback[_i].after;
  for (uint64_t i = 1; i <= o.hits && !k; i++) {
    past |= giveback[_i].after && !strcmp(o.names[i - 1], giveback[_i].after);
    if (past && !strcmp(o.names[i - 1], "j.apply.store")) k = i;
  }
  crash_outcome_free(&o);
  ck_assert_uint_gt(k, 0);
  pdshm_seg *seg = crash_world();
  crash_child_run((struct plan){.op = op, .k = k}, &o);
  pdshm_scope *under, *params, *s[PDSHM_LOCKS_MIN];
  ck_assert_int_eq(pdshm_scope_open(seg, giveback[_i].under, &under), 0);
  int n = 0, rc = 0;
  while (n < (int)PDSHM_LOCKS_MIN && !(rc = pdshm_scope_new(under, NULL, &s[n]))) {
    pdshm_var *v;
    ck_assert_int_eq(pdshm_var_get(s[n++], "x", &v), 0); /* takes the new scope's lock */
  }
  ck_assert_int_eq(rc, PDSHM_ENOLCK);
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0); /* its lock: repaired */
  crash_reap_verify(seg, "scopes on every lock", k);
  for (int i = 0; i < n; i++) ck_assert_int_eq(pdshm_scope_release(s[i]), 0);
  ck_assert_int_eq(pdshm_scope_release(under), 0);
  ck_assert_int_eq(pdshm_scope_release(params), 0);
  crash_reap_verify(seg, giveback[_i].op, k);
  ck_assert_int_eq(pdshm_detach(seg), 0);
}
END_TEST

Suite *crash_locks_suite(void);
Suite *crash_locks_suite(void) {
  Suite *s = suite_create("crash_locks");
  TCase *tc = tu_tcase(s, "locks", 30, crash_setup, crash_teardown);
  tcase_add_test(tc, heap_lock_holder_killed);
  tcase_add_test(tc, scope_lock_holder_killed);
  tcase_add_test(tc, var_lock_holders_killed);
  tcase_add_test(tc, dead_waiting_writer_does_not_hold_readers);
  tcase_add_loop_test(tc, var_lock_recount_keeps_live_share, 0, 2);
  tcase_add_loop_test(tc, lock_entry_given_back_by_a_killed_process, 0, 2);
  return s;
}

int main(void) { return tu_run(crash_locks_suite()) ? EXIT_FAILURE : EXIT_SUCCESS; }
