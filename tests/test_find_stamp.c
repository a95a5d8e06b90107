/* test_find_stamp.c - lookups that never wait and say how long their answer
 * holds (pdshm_find_var_now, pdshm_find_stamp_holds): the same answers as
 * the waiting lookups; a stamp holds until a table the lookup read changes,
 * in this process or another, and only then; a table in the middle of a
 * change is EBUSY, not a wait; bad calls change nothing. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "testutil.h"

static const char *seg_name;
static pdshm_seg *seg;
static pdshm_scope *root, *params, *step;

static void setup(void) {
  seg_name = tu_name("stamp");
  seg = tu_create_as(seg_name, 8u << 20, 0);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, "params", &params), 0);
  ck_assert_int_eq(pdshm_scope_new(params, NULL, &step), 0);
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(params, "W", &v), 0);
  ck_assert_int_eq(pdshm_var_create(step, "tmp", &v), 0);
}

static void teardown(void) {
  pdshm_scope_release(step);
  pdshm_scope_release(params);
  pdshm_scope_release(root);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  pdshm_detach(seg);
  tu_cleanup();
}

static pdshm_var *now(pdshm_scope *s, const char *name, int up, pdshm_find_stamp *stamp) {
  pdshm_var *v = (pdshm_var *)stamp; /* a value the call must overwrite */
  ck_assert_int_eq(pdshm_find_var_now(s, name, up, &v, stamp), 0);
  return v;
}

START_TEST(the_same_answers_as_the_waiting_lookups) {
  pdshm_find_stamp st;
  const char *names[] = {"W", "tmp", "absent"};
  for (unsigned i = 0; i < 3; i++) {
    ck_assert_ptr_eq(now(step, names[i], 1, &st), pdshm_find_var(step, names[i]));
    ck_assert(pdshm_find_stamp_holds(&st));
    ck_assert_ptr_eq(now(step, names[i], 0, &st), pdshm_find_local_var(step, names[i]));
    ck_assert(pdshm_find_stamp_holds(&st));
  }
  ck_assert_ptr_null(now(step, "W", 0, &st)); /* not local */
  ck_assert_ptr_nonnull(now(step, "W", 1, &st));
}
END_TEST

/* A hit one scope up rests on both tables: a shadowing variable made below
 * ends it, as does the erase above; a third scope's change does not. */
START_TEST(a_stamp_holds_until_a_table_it_read_changes) {
  pdshm_find_stamp st;
  pdshm_var *v, *w = now(step, "W", 1, &st);
  ck_assert_ptr_nonnull(w);
  pdshm_scope *other;
  ck_assert_int_eq(pdshm_scope_new(root, "other", &other), 0);
  ck_assert_int_eq(pdshm_var_create(other, "W", &v), 0);
  ck_assert_int_eq(pdshm_var_create(root, "elsewhere", &v), 0); /* a table not read */
  ck_assert(pdshm_find_stamp_holds(&st));
  ck_assert_int_eq(pdshm_var_create(step, "W", &v), 0); /* shadows it */
  ck_assert(!pdshm_find_stamp_holds(&st));
  ck_assert_ptr_eq(now(step, "W", 1, &st), v);
  ck_assert_int_eq(pdshm_var_erase(step, "W"), 0);
  ck_assert(!pdshm_find_stamp_holds(&st));
  ck_assert_ptr_eq(now(step, "W", 1, &st), w);
  ck_assert_int_eq(pdshm_var_rename(params, "W", "W2"), 0);
  ck_assert(!pdshm_find_stamp_holds(&st));
  ck_assert_ptr_null(now(step, "W", 1, &st)); /* a miss holds as long */
  ck_assert(pdshm_find_stamp_holds(&st));
  ck_assert_int_eq(pdshm_var_create(root, "W", &v), 0);
  ck_assert(!pdshm_find_stamp_holds(&st));
  ck_assert_ptr_eq(now(step, "W", 1, &st), v);
  pdshm_scope_release(other);
}
END_TEST

static int shadow_in_a_child(void *arg) {
  (void)arg;
  pdshm_seg *s = NULL;
  pdshm_scope *p = NULL;
  pdshm_var *v;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_scope_open(s, "params", &p)) return 1;
  int rc = pdshm_var_erase(p, "W") || pdshm_var_create(p, "W", &v);
  pdshm_scope_release(p);
  pdshm_detach(s);
  return rc ? 2 : 0;
}

/* The change counts live in the segment: another process's change ends the
 * stamp, and the new lookup finds what it made. */
START_TEST(another_process_change_ends_the_stamp) {
  pdshm_find_stamp st;
  pdshm_var *w = now(params, "W", 0, &st);
  pdshm_varref before = pdshm_var_ref(w);
  ck_assert_int_eq(tu_wait(tu_fork(shadow_in_a_child, NULL)), 0);
  ck_assert(!pdshm_find_stamp_holds(&st));
  pdshm_varref after = pdshm_var_ref(now(params, "W", 0, &st));
  ck_assert(after.gen != before.gen);
  ck_assert(pdshm_find_stamp_holds(&st));
}
END_TEST

/* A writer inside a table (its seq odd) makes the lookup EBUSY at once:
 * the caller then waits in the waiting form. */
START_TEST(a_table_in_a_change_is_ebusy) {
  pdshm_find_stamp st;
  pdshm_var *v = NULL;
  struct pdshm_scope_rec *x = pdshm__scope_at(seg, step->rec);
  atomic_fetch_add(&x->seq, 1);
  ck_assert_int_eq(pdshm_find_var_now(step, "W", 1, &v, &st), PDSHM_EBUSY);
  ck_assert_ptr_null(v);
  ck_assert_ptr_nonnull(now(params, "W", 1, &st)); /* that table is not read */
  atomic_fetch_add(&x->seq, 1);
  ck_assert_ptr_nonnull(now(step, "W", 1, &st));
}
END_TEST

/* A chain deeper than the stamp's tables: the answer is right, the stamp
 * never holds. */
START_TEST(a_deep_lookup_gets_a_stamp_that_never_holds) {
  pdshm_scope *s[PDSHM_FIND_STAMP_TABLES + 1];
  pdshm_scope *up = step;
  for (unsigned i = 0; i <= PDSHM_FIND_STAMP_TABLES; i++) {
    ck_assert_int_eq(pdshm_scope_new(up, NULL, &s[i]), 0);
    up = s[i];
  }
  pdshm_find_stamp st;
  ck_assert_ptr_eq(now(up, "W", 1, &st), pdshm_find_var(step, "W"));
  ck_assert(!pdshm_find_stamp_holds(&st));
  ck_assert_ptr_null(now(up, "W", 0, &st));
  ck_assert(pdshm_find_stamp_holds(&st)); /* one table */
  for (unsigned i = PDSHM_FIND_STAMP_TABLES + 1; i-- > 0;) pdshm_scope_release(s[i]);
}
END_TEST

START_TEST(bad_calls_change_nothing) {
  pdshm_find_stamp st;
  memset(&st, 0, sizeof st);
  pdshm_var *v = NULL;
  char longname[PDSHM_NAME_MAX + 2];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  ck_assert_int_eq(pdshm_find_var_now(NULL, "W", 1, &v, &st), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_find_var_now(step, NULL, 1, &v, &st), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_find_var_now(step, "", 1, &v, &st), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_find_var_now(step, "W", 1, NULL, &st), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_find_var_now(step, "W", 1, &v, NULL), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_find_var_now(step, longname, 1, &v, &st), PDSHM_ENAMETOOLONG);
  ck_assert_ptr_null(v);
  ck_assert(!pdshm_find_stamp_holds(&st)); /* zeroed: never holds */
  ck_assert(!pdshm_find_stamp_holds(NULL));
}
END_TEST

static int lookup_in_a_fork_child(void *arg) {
  pdshm_find_stamp st;
  pdshm_var *v;
  (void)arg;
  return pdshm_find_var_now(step, "W", 1, &v, &st) == PDSHM_EFORKED ? 0 : 1;
}

START_TEST(the_parents_handle_in_a_fork_child_is_eforked) {
  ck_assert_int_eq(tu_wait(tu_fork(lookup_in_a_fork_child, NULL)), 0);
}
END_TEST

static Suite *stamp_suite(void) {
  Suite *s = suite_create("find_stamp");
  TCase *tc = tu_tcase(s, "lookups", 30, setup, teardown);
  tcase_add_test(tc, the_same_answers_as_the_waiting_lookups);
  tcase_add_test(tc, a_stamp_holds_until_a_table_it_read_changes);
  tcase_add_test(tc, another_process_change_ends_the_stamp);
  tcase_add_test(tc, a_table_in_a_change_is_ebusy);
  tcase_add_test(tc, a_deep_lookup_gets_a_stamp_that_never_holds);
  tc = tu_tcase(s, "errors", 30, setup, teardown);
  tcase_add_test(tc, bad_calls_change_nothing);
  tcase_add_test(tc, the_parents_handle_in_a_fork_child_is_eforked);
  return s;
}

int main(void) { return tu_run(stamp_suite()) ? 1 : 0; }
