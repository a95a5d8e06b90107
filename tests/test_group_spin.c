/* test_group_spin.c - how long a group's waiter spins before it sleeps
 * (group_round.c, invariant 5): the spin grows while the members meet
 * within it, and falls to the least once they come late, so that a member
 * whose peers are slow stops taking their processor; a group of more
 * members than processors never spins (invariant 6). */
#include <stdlib.h>
#include <unistd.h>

#include "groups/groups.h"
#include "testutil.h"

#define SEC 1000000000ll
#define QUICK_ROUNDS 10  /* barriers the peer reaches first                */
#define LATE_ROUNDS 12   /* barriers with a peer that comes 20 ms late    */

static char seg_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;

static void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("spin"));
  seg = tu_create_as(seg_name, 8u << 20, 8);
}

static void teardown(void) {
  if (seg) pdshm_detach(seg);
  seg = NULL;
  tu_cleanup();
}

/* Rank 1 of "spin": QUICK_ROUNDS barriers at once (it waits in each for
 * rank 0), then LATE_ROUNDS each 20 ms late. */
static int kid_peer(void *arg) {
  (void)arg;
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_group_join(s, "spin", 2, 1, &g)) return 10;
  for (int i = 0; i < QUICK_ROUNDS; i++)
    if (pdshm_group_barrier(g, 20 * SEC)) return 11;
  for (int i = 0; i < LATE_ROUNDS; i++) {
    usleep(20000);
    if (pdshm_group_barrier(g, 20 * SEC)) return 12;
  }
  pdshm_group_leave(g);
  pdshm_detach(s);
  return 0;
}

static int arrivals(const pdshm_group_info *gi, void *arg) {
  *(uint32_t *)arg = gi->arrived;
  return 0;
}

/* Waits until n peers have arrived at the round in progress. */
static void await_peers(uint32_t n) {
  uint32_t arrived = 0;
  while (arrived < n) {
    ck_assert_int_eq(pdshm_inspect_groups(seg, arrivals, &arrived), 0);
    if (arrived < n) usleep(200);
  }
}
static void await_peer(void) { await_peers(1); }

START_TEST(the_spin_grows_while_members_meet_and_falls_once_they_come_late) {
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(seg, "spin", 2, 0, &g), 0);
  const struct pdshm_group *gr = (const struct pdshm_group *)g;
  ck_assert_uint_eq(gr->spin_ns, 0); /* the least, to start with */
  pid_t pid = tu_spawn(kid_peer, NULL);
  /* the peer waits in each barrier already: ours ends at its first look,
   * while spinning, and doubles the spin, from the least (1 us) to the most
   * (64 us) in 7 barriers */
  for (int i = 0; i < QUICK_ROUNDS; i++) {
    await_peer();
    ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  }
  ck_assert_uint_eq(gr->spin_ns, 64000);
  /* 20 ms is far past the most a spin lasts (64 us): every wait sleeps and
   * halves the spin, down to the least */
  for (int i = 0; i < LATE_ROUNDS; i++)
    ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  ck_assert_uint_le(gr->spin_ns, 1000);
  ck_assert_int_eq(tu_wait(pid), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
}
END_TEST

START_TEST(a_spin_ends_by_the_deadline) {
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(seg, "spin", 2, 0, &g), 0);
  struct pdshm_group *gr = (struct pdshm_group *)g;
  gr->spin_ns = 2000000000u; /* 2 s: far more than a spin is ever let grow to */
  /* nobody comes: a barrier of timeout 0 answers at once, not after the spin */
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_barrier(g, 0), PDSHM_ETIMEDOUT);
  uint64_t took = tu_now_ns() - t0;
  ck_assert_uint_lt(took, SEC);
  ck_assert_uint_eq(gr->spin_ns, 1000000000u); /* it slept: halved */
  fprintf(stderr, "test_group_spin: a barrier of timeout 0 answered in %.1f us\n", took / 1e3);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
}
END_TEST

#define CROWD_MAX 7 /* members: the segment's 8 slots, one left */

/* A member of "crowd" (of the size in *arg) at rank 1 and up: QUICK_ROUNDS
 * barriers at once. */
static int kid_crowd(void *arg) {
  const int *at = arg; /* size, rank */
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_group_join(s, "crowd", at[0], at[1], &g))
    return 10;
  for (int i = 0; i < QUICK_ROUNDS; i++)
    if (pdshm_group_barrier(g, 20 * SEC)) return 11;
  pdshm_group_leave(g);
  pdshm_detach(s);
  return 0;
}

/* A group of one member more than the processors online: its waiters yield
 * instead of spinning, so rank 0's spin stays the least (0) where, with the
 * peers waiting in each barrier already, a group that fits would have grown
 * it (the test above). */
START_TEST(a_group_of_more_members_than_processors_never_spins) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int size = (int)cpus + 1;
  if (size > CROWD_MAX) { /* not on this machine: say so */
    fprintf(stderr, "test_group_spin: %ld processors: a crowd needs more slots\n", cpus);
    return;
  }
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(seg, "crowd", (unsigned)size, 0, &g), 0);
  const struct pdshm_group *gr = (const struct pdshm_group *)g;
  int at[CROWD_MAX][2];
  pid_t pid[CROWD_MAX];
  for (int r = 1; r < size; r++) {
    at[r][0] = size;
    at[r][1] = r;
    pid[r] = tu_spawn(kid_crowd, at[r]);
  }
  for (int i = 0; i < QUICK_ROUNDS; i++) {
    await_peers((uint32_t)size - 1);
    ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  }
  ck_assert_uint_eq(gr->spin_ns, 0);
  for (int r = 1; r < size; r++) ck_assert_int_eq(tu_wait(pid[r]), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("group_spin");
  TCase *tc = tu_tcase(s, "spin", 60, setup, teardown);
  tcase_add_test(tc, the_spin_grows_while_members_meet_and_falls_once_they_come_late);
  tcase_add_test(tc, a_spin_ends_by_the_deadline);
  tcase_add_test(tc, a_group_of_more_members_than_processors_never_spins);
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
