/* test_group.c - trainer groups (DESIGN §4): join's errors;
 * a group's memory back after its last member leaves or is reaped; detach
 * leaves every group; a damaged registry is EBADSEG; barriers over thousands
 * of rounds among 4 processes; a barrier's timeout; a stopped member is slow,
 * not dead.  The collectives: test_group_collectives.c; members killed
 * inside rounds: test_group_deaths.c. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grouputil.h"

/* ---- join, leave --------------------------------------------------------------- */

START_TEST(join_errors) {
  pdshm_group *a, *b, *x;
  ck_assert_int_eq(pdshm_group_join(seg, "g", 0, -1, &x), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_join(seg, "g", 2, 2, &x), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_join(seg, "", 2, -1, &x), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_join(seg, "g", PDSHM_GROUP_MAX + 1, -1, &x), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_join(seg, "g", 2, 1, &a), 0);
  ck_assert_int_eq(pdshm_group_rank(a), 1);
  ck_assert_int_eq(pdshm_group_size(a), 2);
  ck_assert_int_eq(pdshm_group_join(seg, "g", 3, -1, &x), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_join(seg, "g", 2, 1, &x), PDSHM_EBUSY);
  ck_assert_int_eq(pdshm_group_join(seg, "g", 2, -1, &b), 0);
  ck_assert_int_eq(pdshm_group_rank(b), 0);
  ck_assert_int_eq(pdshm_group_join(seg, "g", 2, -1, &x), PDSHM_EUSERS);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_group_leave(b), 0);
  ck_assert_int_eq(pdshm_group_join(seg, "g", 2, 0, &b), 0);
  ck_assert_int_eq(pdshm_group_leave(a), 0);
  ck_assert_int_eq(pdshm_group_leave(b), 0);
  ck_assert_int_eq(pdshm_group_rank(NULL), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_barrier(NULL, 0), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_leave(NULL), PDSHM_EINVAL);
}
END_TEST

START_TEST(memory_back_after_last_leave) {
  uint64_t u0 = tu_used(seg);
  pdshm_group *a, *b;
  ck_assert_int_eq(pdshm_group_join(seg, "mem", 4, -1, &a), 0);
  ck_assert_int_eq(pdshm_group_join(seg, "mem", 4, -1, &b), 0);
  ck_assert_uint_gt(tu_used(seg), u0);
  ck_assert_int_eq(pdshm_group_leave(a), 0);
  ck_assert_uint_gt(tu_used(seg), u0);
  ck_assert_int_eq(pdshm_group_leave(b), 0);
  ck_assert_uint_eq(tu_used(seg), u0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

static int kid_join_and_die(void *arg) {
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s)) return 2;
  if (pdshm_group_join(s, "mem", 3, -1, &g)) return 3;
  *(volatile int *)arg = 1;
  pause();
  return 0;
}

START_TEST(memory_back_after_last_member_reaped) {
  uint64_t u0 = tu_used(seg);
  int *flag = tu_shared(sizeof *flag);
  pid_t pid = tu_spawn(kid_join_and_die, flag);
  while (!*(volatile int *)flag) usleep(1000);
  ck_assert_uint_gt(tu_used(seg), u0);
  kill(pid, SIGKILL);
  tu_wait(pid);
  tu_await_dead(seg, 1);
  unsigned n;
  ck_assert_int_eq(pdshm_reap(seg, &n), 0);
  ck_assert_uint_eq(n, 1);
  ck_assert_uint_eq(tu_used(seg), u0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

START_TEST(detach_leaves_every_group) {
  pdshm_seg *s2 = tu_attach(seg_name);
  pdshm_group *a, *b, *x;
  ck_assert_int_eq(pdshm_group_join(s2, "d1", 1, -1, &a), 0);
  ck_assert_int_eq(pdshm_group_join(s2, "d2", 2, 0, &b), 0);
  ck_assert_int_eq(pdshm_group_join(seg, "d1", 1, -1, &x), PDSHM_EUSERS);
  ck_assert_int_eq(pdshm_detach(s2), 0);
  ck_assert_int_eq(pdshm_group_join(seg, "d1", 1, -1, &x), 0);
  ck_assert_int_eq(pdshm_group_barrier(x, 0), 0); /* a group of one */
  ck_assert_int_eq(pdshm_group_leave(x), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

static int count_groups(const pdshm_group_info *gi, void *arg) {
  ++*(int *)arg;
  return gi->size == 0;
}

/* A damaged registry is EBADSEG everywhere, never a wild write or a crash. */
START_TEST(damaged_registry_is_ebadseg) {
  pdshm_group *g, *x;
  ck_assert_int_eq(pdshm_group_join(seg, "ok", 2, 0, &g), 0);
  int n = 0;
  ck_assert_int_eq(pdshm_inspect_groups(seg, count_groups, &n), 0);
  ck_assert_int_eq(n, 1);
  pdshm_off_t keep = seg->hdr->groups;
  const pdshm_off_t bad[] = {8, seg->hdr->arena_off + 24, seg->size - 16, seg->hdr->root};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    seg->hdr->groups = bad[i];
    ck_assert_int_eq(pdshm_inspect_groups(seg, count_groups, &n), PDSHM_EBADSEG);
    ck_assert_int_eq(pdshm_check(seg, NULL), PDSHM_EBADSEG);
    ck_assert_int_eq(pdshm_group_join(seg, "other", 2, 0, &x), PDSHM_EBADSEG);
  }
  seg->hdr->groups = keep;
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
}
END_TEST

/* ---- barriers ------------------------------------------------------------------- */

struct bar_arg {
  struct board *b;
  int rank, size, rounds;
  const char *group;
};

static int kid_barriers(void *argp) {
  struct bar_arg *a = argp;
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s)) TU_FAIL_RETURN(&a->b->rep, "attach");
  if (pdshm_group_join(s, a->group, (unsigned)a->size, a->rank, &g))
    TU_FAIL_RETURN(&a->b->rep, "join");
  for (int i = 1; i <= a->rounds; i++) {
    atomic_store(&a->b->progress[a->rank], i);
    int rc = pdshm_group_barrier(g, 20 * SEC);
    if (rc) TU_FAIL_RETURN(&a->b->rep, "rank %d round %d: %s", a->rank, i, pdshm_err_name(rc));
    for (int r = 0; r < a->size; r++)
      if (atomic_load(&a->b->progress[r]) < i)
        TU_FAIL_RETURN(&a->b->rep, "rank %d passed round %d before rank %d reached it", a->rank, i,
                       r);
    rc = pdshm_group_barrier(g, 20 * SEC); /* nobody writes round i+1 before all read */
    if (rc) TU_FAIL_RETURN(&a->b->rep, "rank %d round %d': %s", a->rank, i, pdshm_err_name(rc));
  }
  pdshm_group_leave(g);
  pdshm_detach(s);
  return 0;
}

START_TEST(barriers_among_four_processes) {
  struct board *b = tu_shared(sizeof *b);
  struct bar_arg a[4];
  pid_t pid[4];
  for (int r = 0; r < 4; r++) {
    a[r] = (struct bar_arg){.b = b, .rank = r, .size = 4, .rounds = 2000, .group = "bar4"};
    pid[r] = tu_spawn(kid_barriers, &a[r]);
  }
  for (int r = 0; r < 4; r++) wait_ok(pid[r], b);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

START_TEST(barrier_times_out_and_resumes) {
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(seg, "tmo", 2, 0, &g), 0);
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_barrier(g, 100000000), PDSHM_ETIMEDOUT);
  ck_assert_uint_ge(tu_now_ns() - t0, 100000000);
  ck_assert_int_eq(pdshm_group_barrier(g, 0), PDSHM_ETIMEDOUT);
  struct board *b = tu_shared(sizeof *b);
  struct bar_arg a = {.b = b, .rank = 1, .size = 2, .rounds = 1, .group = "tmo"};
  pid_t pid = tu_spawn(kid_barriers, &a);
  atomic_store(&b->progress[0], 1);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  wait_ok(pid, b);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
}
END_TEST

static int arrivals_of(const pdshm_group_info *gi, void *arg) {
  if (!strcmp(gi->name, "stop")) *(int *)arg = (int)gi->arrived;
  return 0;
}

/* A stopped member is slow, not dead: the others time out, never EOWNERDEAD. */
START_TEST(stopped_member_is_not_dead) {
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(seg, "stop", 2, 0, &g), 0);
  struct board *b = tu_shared(sizeof *b);
  struct bar_arg a = {.b = b, .rank = 1, .size = 2, .rounds = 1, .group = "stop"};
  atomic_store(&b->progress[0], 1);
  pid_t pid = tu_spawn(kid_barriers, &a);
  for (int arrived = 0; !arrived; usleep(1000)) /* it waits in its first barrier */
    ck_assert_int_eq(pdshm_inspect_groups(seg, arrivals_of, &arrived), 0);
  kill(pid, SIGSTOP);
  ck_assert_int_eq(pdshm_group_barrier(g, 300000000), 0); /* it had arrived */
  ck_assert_int_eq(pdshm_group_barrier(g, 300000000), PDSHM_ETIMEDOUT);
  kill(pid, SIGCONT);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  wait_ok(pid, b);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("group");
  TCase *tc = tu_tcase(s, "join", 30, setup, teardown);
  tcase_add_test(tc, join_errors);
  tcase_add_test(tc, memory_back_after_last_leave);
  tcase_add_test(tc, memory_back_after_last_member_reaped);
  tcase_add_test(tc, detach_leaves_every_group);
  tcase_add_test(tc, damaged_registry_is_ebadseg);
  tc = tu_tcase(s, "barrier", 60, setup, teardown);
  tcase_add_test(tc, barriers_among_four_processes);
  tcase_add_test(tc, barrier_times_out_and_resumes);
  tcase_add_test(tc, stopped_member_is_not_dead);
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
