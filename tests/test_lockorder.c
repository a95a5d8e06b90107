/*
 * test_lockorder.c - the locks' ranks and the order check of lib/locks/lockorder.c:
 * the rule on a thread's list of held locks (every build), the ranks the
 * library gives its entries, and, in a debug build, a wrong order caught.
 */
#include "config.h"

#include <signal.h>

#include "model/model.h"
#include "testutil.h"

static struct pdshm_lockorder_ent lo_ent(const void *lock, const void *base, uint32_t rank) {
  return (struct pdshm_lockorder_ent){.lock = lock, .base = base, .rank = rank, .index = rank};
}

START_TEST(ranks_rise_in_the_documented_order) {
  ck_assert_uint_gt(pdshm__lock_rank(PDSHM_LK_SCOPE, 0), 0);
  ck_assert_uint_lt(pdshm__lock_rank(PDSHM_LK_SCOPE, 0), pdshm__lock_rank(PDSHM_LK_SCOPE, 1));
  ck_assert_uint_lt(pdshm__lock_rank(PDSHM_LK_SCOPE, UINT32_MAX), pdshm__lock_rank(PDSHM_LK_HEAP, 0));
  ck_assert_uint_eq(pdshm__lock_rank(PDSHM_LK_NONE, 0), 0);
}
END_TEST

START_TEST(a_higher_held_rank_conflicts_an_equal_one_does_not) {
  static int locks[3], base;
  struct pdshm_lockorder o = {0};
  struct pdshm_lockorder_ent child = lo_ent(&locks[0], &base, 5), sib = lo_ent(&locks[1], &base, 5);
  pdshm__lockorder_push(&o, &child);
  ck_assert_ptr_null(pdshm__lockorder_conflict(&o, &base, 0, 5));  /* a sibling */
  ck_assert_ptr_null(pdshm__lockorder_conflict(&o, &base, 0, 9));  /* deeper, heap */
  ck_assert_ptr_eq(pdshm__lockorder_conflict(&o, &base, 0, 4), &o.held[0]); /* the parent */
  ck_assert_ptr_null(pdshm__lockorder_conflict(&o, &base, 0, 0));  /* unranked */
  pdshm__lockorder_push(&o, &sib);
  pdshm__lockorder_pop(&o, &locks[0]);
  ck_assert_uint_eq(o.n, 1);
  ck_assert_ptr_eq(o.held[0].lock, &locks[1]);
  pdshm__lockorder_pop(&o, &locks[1]);
  ck_assert_ptr_null(pdshm__lockorder_conflict(&o, &base, 0, 1));
}
END_TEST

START_TEST(other_segments_and_forks_are_not_compared) {
  static int lock, base, other;
  struct pdshm_lockorder o = {0};
  struct pdshm_lockorder_ent e = lo_ent(&lock, &base, 7);
  e.forkgen = 3;
  pdshm__lockorder_push(&o, &e);
  ck_assert_ptr_nonnull(pdshm__lockorder_conflict(&o, &base, 3, 2));
  ck_assert_ptr_null(pdshm__lockorder_conflict(&o, &other, 3, 2));
  ck_assert_ptr_null(pdshm__lockorder_conflict(&o, &base, 4, 2));
}
END_TEST

START_TEST(a_full_list_counts_what_it_cannot_keep) {
  static int locks[PDSHM_LOCKORDER_MAX + 2], base;
  struct pdshm_lockorder o = {0};
  for (int k = 0; k < PDSHM_LOCKORDER_MAX + 2; k++) {
    struct pdshm_lockorder_ent e = lo_ent(&locks[k], &base, 3);
    pdshm__lockorder_push(&o, &e);
  }
  ck_assert_uint_eq(o.n, PDSHM_LOCKORDER_MAX);
  ck_assert_uint_eq(o.untracked, 2);
  pdshm__lockorder_pop(&o, &locks[PDSHM_LOCKORDER_MAX + 1]);
  ck_assert_uint_eq(o.untracked, 1);
  ck_assert_uint_eq(o.n, PDSHM_LOCKORDER_MAX);
}
END_TEST

/* ---- in a segment ------------------------------------------------------------- */

static pdshm_seg *seg;
static pdshm_scope *root, *kid, *grandkid;

static void world_up(void) {
  seg = tu_create("lockorder", 0, 0);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, "kid", &kid), 0);
  ck_assert_int_eq(pdshm_scope_new(kid, NULL, &grandkid), 0);
}

static void world_down(void) {
  pdshm_detach(seg);
  tu_cleanup();
}

static uint32_t scope_lock(pdshm_scope *s) { return pdshm__scope_at(seg, s->rec)->lock; }

START_TEST(entries_carry_the_rank_of_what_they_guard) {
  ck_assert_uint_eq(pdshm__lockent(seg, PDSHM_LOCK_HEAP)->rank, PDSHM_RANK_HEAP);
  ck_assert_uint_eq(pdshm__lockent(seg, scope_lock(root))->rank, PDSHM_RANK_SCOPE);
  ck_assert_uint_eq(pdshm__lockent(seg, scope_lock(kid))->rank, PDSHM_RANK_SCOPE + 1);
  ck_assert_uint_eq(pdshm__lockent(seg, scope_lock(grandkid))->rank, PDSHM_RANK_SCOPE + 2);
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_get(grandkid, "w", &v), 0);
  ck_assert_int_eq(pdshm_var_lock(v, 1), 0);
  /* a user's exclusive hold (no entry of the table), then a scope lock and
   * the heap's: the order */
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, (int64_t[]){4}), 0);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
}
END_TEST

START_TEST(parent_then_child_then_heap_is_allowed) {
  ck_assert_int_eq(pdshm__lock(seg, scope_lock(kid)), 0);
  ck_assert_int_eq(pdshm__lock(seg, scope_lock(grandkid)), 0);
  ck_assert_int_eq(pdshm__lock(seg, PDSHM_LOCK_HEAP), 0);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  pdshm__unlock(seg, scope_lock(kid)); /* released out of order: hand over hand */
  pdshm__unlock(seg, scope_lock(grandkid));
  ck_assert_int_eq(pdshm__lock(seg, scope_lock(root)), 0);
  pdshm__unlock(seg, scope_lock(root));
}
END_TEST

#ifdef PDSHM_DEBUG
/* The parent's lock while holding the child's: the check stops the process. */
START_TEST(a_parent_after_its_child_aborts) {
  ck_assert_int_eq(pdshm__lock(seg, scope_lock(grandkid)), 0);
  pdshm__lock(seg, scope_lock(kid));
  ck_abort_msg("the wrong order was not caught");
}
END_TEST

START_TEST(a_scope_lock_under_the_heap_lock_aborts) {
  ck_assert_int_eq(pdshm__lock(seg, PDSHM_LOCK_HEAP), 0);
  pdshm__lock(seg, scope_lock(root));
  ck_abort_msg("the wrong order was not caught");
}
END_TEST
#endif

static Suite *lockorder_suite(void) {
  Suite *s = suite_create("lock order");
  TCase *tc = tu_tcase(s, "rule", 10, NULL, NULL);
  tcase_add_test(tc, ranks_rise_in_the_documented_order);
  tcase_add_test(tc, a_higher_held_rank_conflicts_an_equal_one_does_not);
  tcase_add_test(tc, other_segments_and_forks_are_not_compared);
  tcase_add_test(tc, a_full_list_counts_what_it_cannot_keep);
  tc = tu_tcase(s, "segment", 10, world_up, world_down);
  tcase_add_test(tc, entries_carry_the_rank_of_what_they_guard);
  tcase_add_test(tc, parent_then_child_then_heap_is_allowed);
#ifdef PDSHM_DEBUG
  tcase_add_test_raise_signal(tc, a_parent_after_its_child_aborts, SIGABRT);
  tcase_add_test_raise_signal(tc, a_scope_lock_under_the_heap_lock_aborts, SIGABRT);
#endif
  return s;
}

int main(void) { return tu_run(lockorder_suite()) ? 1 : 0; }
