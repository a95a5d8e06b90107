/* test_group_regroup.c - groups that shrink and grow (pdshm_group_regroup,
 * pdshm_group_enlist): members SIGKILLed with no replacement (2 -> 1,
 * 3 -> 2, 4 -> 2 with two deaths), a member killed inside the regroup, a
 * newcomer admitted (and a shrink and a grow at once), allreduces right at
 * the new size and the new ranks in the order of the old ones; a stopped
 * member makes the regroup time out (nothing changed) and no longer; a
 * stopped or dead candidate holds nobody up; bad arguments are EINVAL and
 * change nothing; pdshm_check passes and every byte comes back. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "groups/groups.h"
#include "testutil.h"

#define SEC 1000000000ll
#define FLOATS 1003
#define MAXP 8

static char seg_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;
static pdshm_scope *root;
static uint64_t base_used;

static void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("regroup"));
  seg = tu_create_as(seg_name, 16u << 20, 32);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  base_used = tu_used(seg);
}

static void teardown(void) {
  if (root) pdshm_scope_release(root);
  if (seg) pdshm_detach(seg);
  root = NULL;
  seg = NULL;
  tu_cleanup();
}

/* Shared between the test and its children (mapped before the forks). */
struct board {
  _Atomic int stage[MAXP];   /* how far each member got (enum stage)        */
  _Atomic int new_rank[MAXP], new_size[MAXP];
  _Atomic int go;            /* members marked `hold` regroup once it is 1  */
  _Atomic int weights;       /* the sum of the weights of the new group     */
  struct tu_report rep;
};
enum stage { S_NONE, S_JOINED, S_TOLD, S_REGROUPING, S_DONE };

/* One process of a test: a member of `group` (rank `rank` of `size`), or a
 * newcomer (size 0) that enlists; `weight` is what it contributes to the
 * allreduce at the new size. */
struct member {
  struct board *b;
  const char *group;
  int size, rank, weight, slot; /* slot: its index on the board          */
  bool victim;                  /* killed by the test after joining       */
  bool hold;                    /* regroups only once b->go is set        */
};

static int until(_Atomic int *w, int v) {
  for (int i = 0; i < 20000 && atomic_load(w) < v; i++) usleep(1000);
  return atomic_load(w) >= v;
}

static int make_var(pdshm_seg *s, pdshm_var **out) {
  pdshm_scope *r, *mine; /* anonymous: it goes with the process */
  int64_t n = FLOATS;
  return pdshm_root(s, &r) || pdshm_scope_new(r, NULL, &mine) || pdshm_var_new(mine, out) ||
         pdshm_tensor_resize(*out, PDSHM_F32, 1, &n);
}

/* At the new size: an allreduce whose sum is the weights', then a barrier. */
static int member_after(struct member *a, pdshm_group *g, pdshm_var *v) {
  float *p = pdshm_tensor_data(v);
  for (int i = 0; i < FLOATS; i++) p[i] = (float)(a->weight * (i % 5));
  int rc = pdshm_group_allreduce(g, v, PDSHM_SUM, 20 * SEC);
  if (rc)
    TU_FAIL_RETURN(&a->b->rep, "slot %d: allreduce at the new size: %s", a->slot,
                   pdshm_err_name(rc));
  for (int i = 0; i < FLOATS; i++)
    if (p[i] != (float)(atomic_load(&a->b->weights) * (i % 5)))
      TU_FAIL_RETURN(&a->b->rep, "slot %d: [%d] = %g, not %d", a->slot, i, p[i],
                     atomic_load(&a->b->weights) * (i % 5));
  rc = pdshm_group_barrier(g, 20 * SEC);
  if (rc)
    TU_FAIL_RETURN(&a->b->rep, "slot %d: barrier at the new size: %s", a->slot, pdshm_err_name(rc));
  atomic_store(&a->b->stage[a->slot], S_DONE);
  pdshm_group_leave(g);
  return 0;
}

static int kid_member(void *argp) {
  struct member *a = argp;
  struct board *b = a->b;
  pdshm_seg *s;
  pdshm_group *g;
  pdshm_var *v;
  if (pdshm_attach(seg_name, NULL, &s) || make_var(s, &v)) TU_FAIL_RETURN(&b->rep, "setup");
  int rc = pdshm_group_join(s, a->group, (unsigned)a->size, a->rank, &g);
  if (rc) TU_FAIL_RETURN(&b->rep, "slot %d: join: %s", a->slot, pdshm_err_name(rc));
  if ((rc = pdshm_group_barrier(g, 20 * SEC)))
    TU_FAIL_RETURN(&b->rep, "first barrier: %s", pdshm_err_name(rc));
  atomic_store(&b->stage[a->slot], S_JOINED);
  if (a->victim) pause();
  rc = pdshm_group_barrier(g, 20 * SEC); /* the victims are killed meanwhile */
  if (rc != PDSHM_EOWNERDEAD)
    TU_FAIL_RETURN(&b->rep, "slot %d: barrier beside the dead: %s", a->slot, pdshm_err_name(rc));
  atomic_store(&b->stage[a->slot], S_TOLD);
  if (a->hold && !until(&b->go, 1)) TU_FAIL_RETURN(&b->rep, "slot %d: never let go", a->slot);
  atomic_store(&b->stage[a->slot], S_REGROUPING);
  int nr = -1, ns = -1;
  rc = pdshm_group_regroup(g, 20 * SEC, &nr, &ns);
  if (rc)
    TU_FAIL_RETURN(&b->rep, "slot %d: regroup: %s (%s)", a->slot, pdshm_err_name(rc),
                   pdshm_last_error());
  if (nr != pdshm_group_rank(g) || ns != pdshm_group_size(g))
    TU_FAIL_RETURN(&b->rep, "slot %d: regroup said %d of %d, the handle %d of %d", a->slot, nr, ns,
                   pdshm_group_rank(g), pdshm_group_size(g));
  atomic_store(&b->new_rank[a->slot], nr);
  atomic_store(&b->new_size[a->slot], ns);
  rc = member_after(a, g, v);
  pdshm_detach(s);
  return rc;
}

static int kid_newcomer(void *argp) {
  struct member *a = argp;
  struct board *b = a->b;
  pdshm_seg *s;
  pdshm_group *g;
  pdshm_var *v;
  if (pdshm_attach(seg_name, NULL, &s) || make_var(s, &v)) TU_FAIL_RETURN(&b->rep, "setup");
  atomic_store(&b->stage[a->slot], S_REGROUPING);
  int rc = pdshm_group_enlist(s, a->group, 20 * SEC, &g);
  if (rc)
    TU_FAIL_RETURN(&b->rep, "slot %d: enlist: %s (%s)", a->slot, pdshm_err_name(rc),
                   pdshm_last_error());
  atomic_store(&b->new_rank[a->slot], pdshm_group_rank(g));
  atomic_store(&b->new_size[a->slot], pdshm_group_size(g));
  rc = member_after(a, g, v);
  pdshm_detach(s);
  return rc;
}

static void wait_ok(pid_t pid, struct board *b) {
  int st = tu_wait(pid);
  ck_assert_msg(st == 0, "child exited %d: %s", st, b->rep.why);
}

/* pdshm_group_info of `name`: members' arrival and candidates. */
struct look {
  const char *name;
  pdshm_group_info gi;
  pdshm_group_member_info m[MAXP];
  bool found;
};
static int look_one(const pdshm_group_info *gi, void *arg) {
  struct look *l = arg;
  if (strcmp(gi->name, l->name)) return 0;
  l->gi = *gi;
  for (uint32_t r = 0; r < gi->size && r < MAXP; r++) l->m[r] = gi->members[r];
  l->found = true;
  return 1;
}
static struct look look(const char *name) {
  struct look l = {.name = name};
  int rc = pdshm_inspect_groups(seg, look_one, &l);
  ck_assert(rc == 0 || rc == 1);
  return l;
}
/* Waits until old rank r of `name` has arrived at the current round. */
static void await_arrived(const char *name, uint32_t r) {
  for (int i = 0; i < 20000; i++, usleep(1000)) {
    struct look l = look(name);
    if (l.found && l.m[r].arrived == l.gi.round) return;
  }
  ck_abort_msg("rank %u of %s never arrived", r, name);
}
static void await_candidates(const char *name, uint32_t n) {
  for (int i = 0; i < 20000; i++, usleep(1000))
    if (look(name).gi.candidates == n) return;
  ck_abort_msg("%s never had %u candidates", name, n);
}

/* Ranks 0..n-1 of `name` (and a newcomer at index n when `newcomer`): the
 * ones in `victims` are to be killed after joining; members hold for the
 * test's go when `hold`.  Sets the board's weights to the survivors'. */
static void members_of(struct board *b, struct member *m, const char *name, int n,
                       unsigned victims, bool hold, bool newcomer) {
  int weights = 0;
  for (int r = 0; r < n + newcomer; r++) {
    m[r] = (struct member){.b = b, .group = name, .size = n, .rank = r, .weight = r + 1,
                           .slot = r, .victim = victims >> r & 1, .hold = hold};
    if (!m[r].victim) weights += r + 1;
  }
  atomic_store(&b->weights, weights);
}

/* Starts the n members and kills the victims once all have joined. */
static void start_and_kill(struct board *b, struct member *m, pid_t *pid, int n) {
  for (int r = 0; r < n; r++) pid[r] = tu_spawn(kid_member, &m[r]);
  for (int r = 0; r < n; r++) ck_assert_msg(until(&b->stage[r], S_JOINED), "%s", b->rep.why);
  for (int r = 0; r < n; r++)
    if (m[r].victim) {
      kill(pid[r], SIGKILL);
      ck_assert_int_eq(tu_wait(pid[r]), 128 + SIGKILL);
    }
}

/* The survivors among m[0..count) ended well, with new ranks in the order
 * of their old ones and one new size; nothing of the group is left. */
static void expect_regrouped(struct board *b, const struct member *m, const pid_t *pid,
                             int count) {
  int k = 0;
  for (int r = 0; r < count; r++) {
    if (m[r].victim) continue;
    wait_ok(pid[r], b);
    ck_assert_int_eq(atomic_load(&b->new_rank[r]), k++);
  }
  for (int r = 0; r < count; r++)
    if (!m[r].victim) ck_assert_int_eq(atomic_load(&b->new_size[r]), k);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}

/* n members of `name`, the ones in `victims` killed after joining; the
 * survivors regroup and must come out in the order of their old ranks. */
static void shrink_test(const char *name, int n, unsigned victims) {
  struct board *b = tu_shared(sizeof *b);
  struct member m[MAXP];
  pid_t pid[MAXP];
  members_of(b, m, name, n, victims, false, false);
  start_and_kill(b, m, pid, n);
  expect_regrouped(b, m, pid, n);
}

START_TEST(shrink_two_to_one) { shrink_test("s21", 2, 1u << 1); }
END_TEST
START_TEST(shrink_three_to_two) { shrink_test("s32", 3, 1u << 0); }
END_TEST
START_TEST(shrink_four_to_two_after_two_deaths) { shrink_test("s42", 4, 1u << 1 | 1u << 2); }
END_TEST

/* 4 members: rank 3 killed; rank 2 killed inside its regroup, while ranks 0
 * and 1 have not come yet; they regroup to 2. */
START_TEST(member_killed_inside_the_regroup) {
  struct board *b = tu_shared(sizeof *b);
  struct member m[4];
  pid_t pid[4];
  for (int r = 0; r < 4; r++)
    m[r] = (struct member){.b = b, .group = "sk", .size = 4, .rank = r, .weight = r + 1,
                           .slot = r, .victim = r == 3, .hold = r < 2};
  atomic_store(&b->weights, 1 + 2);
  for (int r = 0; r < 4; r++) pid[r] = tu_spawn(kid_member, &m[r]);
  for (int r = 0; r < 4; r++) ck_assert_msg(until(&b->stage[r], S_JOINED), "%s", b->rep.why);
  kill(pid[3], SIGKILL);
  ck_assert_int_eq(tu_wait(pid[3]), 128 + SIGKILL);
  ck_assert_msg(until(&b->stage[2], S_REGROUPING), "%s", b->rep.why);
  await_arrived("sk", 2);
  kill(pid[2], SIGKILL);
  ck_assert_int_eq(tu_wait(pid[2]), 128 + SIGKILL);
  atomic_store(&b->go, 1);
  for (int r = 0; r < 2; r++) {
    wait_ok(pid[r], b);
    ck_assert_int_eq(atomic_load(&b->new_rank[r]), r);
    ck_assert_int_eq(atomic_load(&b->new_size[r]), 2);
  }
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}
END_TEST

/* Members of `name` (n, `victims` killed, all others hold) and a newcomer:
 * once it waits, the survivors regroup; it comes last. */
static void grow_test(const char *name, int n, unsigned victims) {
  struct board *b = tu_shared(sizeof *b);
  struct member m[MAXP];
  pid_t pid[MAXP];
  members_of(b, m, name, n, victims, true, true);
  start_and_kill(b, m, pid, n);
  pid[n] = tu_spawn(kid_newcomer, &m[n]);
  await_candidates(name, 1);
  atomic_store(&b->go, 1);
  expect_regrouped(b, m, pid, n + 1);
}

/* The members' barrier beside the dead needs a death: grow_test's groups
 * start with one victim (ranks 3 of 4: 4 -> 3 + 1; rank 0 of 2: 2 -> 1 + 1). */
START_TEST(grow_by_a_newcomer_and_shrink_at_once) { grow_test("g4", 4, 1u << 3); }
END_TEST
START_TEST(grow_after_the_first_rank_died) { grow_test("g2", 2, 1u << 0); }
END_TEST

/* Without a death: the members regroup at a boundary and take the newcomer
 * in; this process is rank 0 of 1. */
START_TEST(grow_a_live_group) {
  pdshm_group *g;
  pdshm_var *v;
  ck_assert_int_eq(pdshm_group_join(seg, "gl", 1, 0, &g), 0);
  ck_assert_int_eq(make_var(seg, &v), 0);
  struct board *b = tu_shared(sizeof *b);
  struct member nc = {.b = b, .group = "gl", .weight = 5, .slot = 1};
  atomic_store(&b->weights, 1 + 5);
  pid_t pid = tu_spawn(kid_newcomer, &nc);
  await_candidates("gl", 1);
  int nr, ns;
  ck_assert_int_eq(pdshm_group_regroup(g, 20 * SEC, &nr, &ns), 0);
  ck_assert_int_eq(nr, 0);
  ck_assert_int_eq(ns, 2);
  ck_assert_int_eq(pdshm_group_size(g), 2);
  struct member me = {.b = b, .weight = 1, .slot = 0};
  ck_assert_int_eq(member_after(&me, g, v), 0); /* leaves */
  wait_ok(pid, b);
  ck_assert_int_eq(atomic_load(&b->new_rank[1]), 1);
  ck_assert_int_eq(atomic_load(&b->new_size[1]), 2);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

static int kid_enlist_die(void *arg) {
  pdshm_seg *s;
  pdshm_group *g;
  (void)arg;
  if (pdshm_attach(seg_name, NULL, &s)) return 10;
  return pdshm_group_enlist(s, (const char *)arg, 20 * SEC, &g) == 0 ? 0 : 11;
}

/* A candidate that stops, or dies, while waiting holds nobody up: the
 * stopped one is admitted (and then waited for, as a stopped member is),
 * the dead one dropped. */
START_TEST(stopped_or_dead_candidate_stalls_nobody) {
  pdshm_group *g;
  int nr, ns;
  ck_assert_int_eq(pdshm_group_join(seg, "gc", 1, 0, &g), 0);
  pid_t dead = tu_spawn(kid_enlist_die, "gc");
  await_candidates("gc", 1);
  kill(dead, SIGKILL);
  ck_assert_int_eq(tu_wait(dead), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  ck_assert_int_eq(pdshm_group_regroup(g, 20 * SEC, &nr, &ns), 0);
  ck_assert_int_eq(ns, 1);
  pid_t stopped = tu_spawn(kid_enlist_die, "gc");
  await_candidates("gc", 1);
  kill(stopped, SIGSTOP);
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_regroup(g, 20 * SEC, &nr, &ns), 0);
  ck_assert_uint_lt(tu_now_ns() - t0, 10 * SEC);
  ck_assert_int_eq(ns, 2);
  ck_assert_int_eq(pdshm_group_barrier(g, 200000000), PDSHM_ETIMEDOUT);
  kill(stopped, SIGCONT);
  ck_assert_int_eq(tu_wait(stopped), 0); /* admitted; it exits: its rank's holder is dead */
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), PDSHM_EOWNERDEAD);
  ck_assert_int_eq(pdshm_group_regroup(g, 20 * SEC, &nr, &ns), 0);
  ck_assert_int_eq(ns, 1);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}
END_TEST

/* Rank 0 here, rank 1 a member that is stopped before its regroup, rank 2
 * killed: the regroup times out (nothing changed), then passes once the
 * stopped member goes on. */
START_TEST(stopped_member_times_the_regroup_out) {
  pdshm_group *g;
  pdshm_var *v;
  int nr = -1, ns = -1;
  ck_assert_int_eq(pdshm_group_join(seg, "st", 3, 0, &g), 0);
  ck_assert_int_eq(make_var(seg, &v), 0);
  struct board *b = tu_shared(sizeof *b);
  struct member m1 = {.b = b, .group = "st", .size = 3, .rank = 1, .weight = 2, .slot = 1,
                      .hold = true};
  struct member m2 = {.b = b, .group = "st", .size = 3, .rank = 2, .slot = 2, .victim = true};
  atomic_store(&b->weights, 1 + 2);
  pid_t p1 = tu_spawn(kid_member, &m1), p2 = tu_spawn(kid_member, &m2);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  ck_assert(until(&b->stage[2], S_JOINED));
  kill(p2, SIGKILL);
  ck_assert_int_eq(tu_wait(p2), 128 + SIGKILL);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), PDSHM_EOWNERDEAD);
  ck_assert_msg(until(&b->stage[1], S_TOLD), "%s", b->rep.why);
  kill(p1, SIGSTOP);
  atomic_store(&b->go, 1);
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_regroup(g, 300000000, &nr, &ns), PDSHM_ETIMEDOUT);
  uint64_t took = tu_now_ns() - t0;
  ck_assert_uint_ge(took, 300000000);
  ck_assert_uint_lt(took, 10 * SEC);
  ck_assert_int_eq(nr, -1); /* nothing stored, nothing changed */
  ck_assert_int_eq(pdshm_group_rank(g), 0);
  ck_assert_int_eq(pdshm_group_size(g), 3);
  ck_assert_int_eq(look("st").gi.size, 3);
  kill(p1, SIGCONT);
  ck_assert_int_eq(pdshm_group_regroup(g, 20 * SEC, &nr, &ns), 0);
  ck_assert_int_eq(nr, 0);
  ck_assert_int_eq(ns, 2);
  struct member me = {.b = b, .weight = 1, .slot = 0};
  ck_assert_int_eq(member_after(&me, g, v), 0);
  wait_ok(p1, b);
  ck_assert_int_eq(atomic_load(&b->new_rank[1]), 1);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

static int kid_barrier_once(void *arg) {
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_group_join(s, (const char *)arg, 2, 1, &g))
    return 10;
  int rc = pdshm_group_barrier(g, 20 * SEC);
  return rc ? 11 : 0;
}

START_TEST(bad_arguments_are_einval_and_change_nothing) {
  pdshm_group *g, *x = (pdshm_group *)&x;
  int nr = -7, ns = -7;
  ck_assert_int_eq(pdshm_group_regroup(NULL, SEC, &nr, &ns), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_enlist(seg, "nope", SEC, &x), PDSHM_ENOENT);
  ck_assert_ptr_null(x);
  ck_assert_int_eq(pdshm_group_join(seg, "be", 2, 0, &g), 0);
  uint64_t before = tu_used(seg);
  ck_assert_int_eq(pdshm_group_regroup(g, SEC, NULL, &ns), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_regroup(g, SEC, &nr, NULL), PDSHM_EINVAL);
  ck_assert_int_eq(nr, -7);
  ck_assert_int_eq(ns, -7);
  ck_assert_int_eq(pdshm_group_enlist(NULL, "be", SEC, &x), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_enlist(seg, "be", SEC, NULL), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_enlist(seg, "", SEC, &x), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_enlist(seg, NULL, SEC, &x), PDSHM_EINVAL);
  /* a candidate nobody admits: ETIMEDOUT, and no longer a candidate */
  ck_assert_int_eq(pdshm_group_enlist(seg, "be", 100000000, &x), PDSHM_ETIMEDOUT);
  ck_assert_ptr_null(x);
  ck_assert_uint_eq(look("be").gi.candidates, 0);
  ck_assert_uint_eq(tu_used(seg), before);
  ck_assert_int_eq(pdshm_group_rank(g), 0);
  ck_assert_int_eq(pdshm_group_size(g), 2);
  /* rank 1 in a barrier, this one regroups: EINVAL here, the barrier waits
   * on, and passes with this process's next barrier */
  pid_t pid = tu_spawn(kid_barrier_once, "be");
  await_arrived("be", 1);
  ck_assert_int_eq(pdshm_group_regroup(g, 20 * SEC, &nr, &ns), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_size(g), 2);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  ck_assert_int_eq(tu_wait(pid), 0);
  /* alone with nobody dead and nobody waiting: a barrier */
  pdshm_group *one;
  ck_assert_int_eq(pdshm_group_join(seg, "one", 1, 0, &one), 0);
  ck_assert_int_eq(pdshm_group_regroup(one, SEC, &nr, &ns), 0);
  ck_assert_int_eq(nr, 0);
  ck_assert_int_eq(ns, 1);
  ck_assert_int_eq(pdshm_group_barrier(one, SEC), 0);
  ck_assert_int_eq(pdshm_group_leave(one), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

/* A join that would take a dead member's rank over while a member waits in
 * a regroup is refused (the regroup would wait for it); the regroup then
 * drops the rank, and the old size is EINVAL. */
START_TEST(join_refused_while_members_regroup) {
  pdshm_group *g, *x;
  pdshm_var *v;
  int nr, ns;
  ck_assert_int_eq(pdshm_group_join(seg, "jr", 3, 0, &g), 0);
  ck_assert_int_eq(make_var(seg, &v), 0);
  struct board *b = tu_shared(sizeof *b);
  struct member m1 = {.b = b, .group = "jr", .size = 3, .rank = 1, .weight = 2, .slot = 1};
  struct member m2 = {.b = b, .group = "jr", .size = 3, .rank = 2, .slot = 2, .victim = true};
  atomic_store(&b->weights, 1 + 2);
  pid_t p1 = tu_spawn(kid_member, &m1), p2 = tu_spawn(kid_member, &m2);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  ck_assert(until(&b->stage[2], S_JOINED));
  kill(p2, SIGKILL);
  ck_assert_int_eq(tu_wait(p2), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), PDSHM_EOWNERDEAD);
  ck_assert_msg(until(&b->stage[1], S_REGROUPING), "%s", b->rep.why);
  await_arrived("jr", 1);
  ck_assert_int_eq(pdshm_group_join(seg, "jr", 3, 2, &x), PDSHM_EBUSY);
  ck_assert_int_eq(pdshm_group_join(seg, "jr", 3, -1, &x), PDSHM_EBUSY);
  ck_assert_int_eq(pdshm_group_regroup(g, 20 * SEC, &nr, &ns), 0);
  ck_assert_int_eq(nr, 0);
  ck_assert_int_eq(ns, 2);
  ck_assert_int_eq(pdshm_group_join(seg, "jr", 3, 2, &x), PDSHM_EINVAL);
  struct member me = {.b = b, .weight = 1, .slot = 0};
  ck_assert_int_eq(member_after(&me, g, v), 0);
  wait_ok(p1, b);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

/* A newcomer that enlists and barriers: its first barrier must answer the
 * round after its admission (EOWNERDEAD: a death broke it), then it regroups
 * with the others. */
static int kid_newcomer_told(void *argp) {
  struct member *a = argp;
  struct board *b = a->b;
  pdshm_seg *s;
  pdshm_group *g;
  pdshm_var *v;
  int nr, ns;
  if (pdshm_attach(seg_name, NULL, &s) || make_var(s, &v)) TU_FAIL_RETURN(&b->rep, "setup");
  int rc = pdshm_group_enlist(s, a->group, 20 * SEC, &g);
  if (rc) TU_FAIL_RETURN(&b->rep, "enlist: %s", pdshm_err_name(rc));
  rc = pdshm_group_barrier(g, 20 * SEC);
  if (rc != PDSHM_EOWNERDEAD) TU_FAIL_RETURN(&b->rep, "first barrier: %s", pdshm_err_name(rc));
  rc = pdshm_group_regroup(g, 20 * SEC, &nr, &ns);
  if (rc) TU_FAIL_RETURN(&b->rep, "regroup: %s (%s)", pdshm_err_name(rc), pdshm_last_error());
  atomic_store(&b->new_rank[a->slot], nr);
  atomic_store(&b->new_size[a->slot], ns);
  rc = member_after(a, g, v);
  pdshm_detach(s);
  return rc;
}

/* Rank 1 of "nt" (2): a barrier, a regroup once b->go is set, then it
 * waits to be killed. */
static int kid_regroup_then_pause(void *argp) {
  struct board *b = argp;
  pdshm_seg *s;
  pdshm_group *g;
  int nr, ns;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_group_join(s, "nt", 2, 1, &g))
    TU_FAIL_RETURN(&b->rep, "join");
  if (pdshm_group_barrier(g, 20 * SEC)) TU_FAIL_RETURN(&b->rep, "barrier");
  if (!until(&b->go, 1)) TU_FAIL_RETURN(&b->rep, "never let go");
  int rc = pdshm_group_regroup(g, 20 * SEC, &nr, &ns);
  if (rc || ns != 3)
    TU_FAIL_RETURN(&b->rep, "rank 1: regroup: %s, size %d", pdshm_err_name(rc), ns);
  atomic_store(&b->stage[1], S_DONE);
  pause();
  return 0;
}

/* Rank 0 here and rank 1 admit a newcomer while it is stopped; rank 1 dies
 * and breaks the round after the regroup; the newcomer, let go, is told of
 * that death by its first barrier, as this process was, and the two
 * regroup together. */
START_TEST(newcomer_is_told_of_a_death_after_its_admission) {
  pdshm_group *g;
  pdshm_var *v;
  int nr, ns;
  ck_assert_int_eq(pdshm_group_join(seg, "nt", 2, 0, &g), 0);
  ck_assert_int_eq(make_var(seg, &v), 0);
  struct board *b = tu_shared(sizeof *b);
  struct member nc = {.b = b, .group = "nt", .weight = 7, .slot = 2};
  atomic_store(&b->weights, 1 + 7);
  pid_t p1 = tu_spawn(kid_regroup_then_pause, b);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), 0);
  pid_t pn = tu_spawn(kid_newcomer_told, &nc);
  await_candidates("nt", 1);
  kill(pn, SIGSTOP);
  atomic_store(&b->go, 1);
  ck_assert_int_eq(pdshm_group_regroup(g, 20 * SEC, &nr, &ns), 0);
  ck_assert_int_eq(ns, 3);
  ck_assert_msg(until(&b->stage[1], S_DONE), "%s", b->rep.why);
  kill(p1, SIGKILL);
  ck_assert_int_eq(tu_wait(p1), 128 + SIGKILL);
  ck_assert_int_eq(pdshm_group_barrier(g, 20 * SEC), PDSHM_EOWNERDEAD);
  kill(pn, SIGCONT);
  ck_assert_int_eq(pdshm_group_regroup(g, 20 * SEC, &nr, &ns), 0);
  ck_assert_int_eq(nr, 0);
  ck_assert_int_eq(ns, 2);
  struct member me = {.b = b, .weight = 1, .slot = 0};
  ck_assert_int_eq(member_after(&me, g, v), 0);
  int st = tu_wait(pn);
  ck_assert_msg(st == 0, "newcomer exited %d: %s", st, b->rep.why);
  ck_assert_int_eq(atomic_load(&b->new_rank[2]), 1);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

/* A damaged plan (no rank, more ranks than seats) is EBADSEG for
 * pdshm_check and the next call that takes the group's lock, and changes
 * nothing; the plan of a regroup whose process died applying it is a state
 * pdshm_check accepts, and the next call finishes it. */
START_TEST(plans_damaged_or_left_half_applied) {
  pdshm_group *g, *x;
  ck_assert_int_eq(pdshm_group_join(seg, "pl", 2, 0, &g), 0);
  struct pdshm_group_rec *rec = pdshm__group_rec(seg, seg->hdr->groups);
  uint32_t round = PDSHM_GS_ROUND(atomic_load(&rec->state));
  const uint64_t bad[] = {pdshm__plan_word(round, 0), pdshm__plan_word(round, rec->cap + 1)};
  for (size_t i = 0; i < 2; i++) {
    atomic_store(&rec->plan, bad[i]);
    ck_assert_int_eq(pdshm_check(seg, NULL), PDSHM_EBADSEG);
    ck_assert_int_eq(pdshm_group_join(seg, "pl", 2, 1, &x), PDSHM_EBADSEG);
    ck_assert_int_eq(atomic_load(&rec->size), 2);
  }
  /* rank 1 never taken: a regroup keeps rank 0 alone; its applier "died"
   * after deciding */
  rec->rank[0].planned = atomic_load(&rec->rank[0].member);
  rec->rank[0].planned_from = 0;
  atomic_store(&rec->plan, pdshm__plan_word(round, 1));
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_group_join(seg, "other", 1, 0, &x), 0); /* the lock: settled */
  ck_assert_uint_eq(atomic_load(&rec->plan), 0);
  ck_assert_uint_eq(atomic_load(&rec->size), 1);
  ck_assert_uint_eq(atomic_load(&rec->regrouped), round);
  ck_assert_uint_ne(PDSHM_GS_ROUND(atomic_load(&rec->state)), round);
  /* this handle still says 2: its next regroup finds where it went */
  ck_assert_int_eq(pdshm_group_size(g), 2);
  ck_assert_int_eq(pdshm_group_leave(x), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}
END_TEST

int main(void) {
  Suite *s = suite_create("group_regroup");
  TCase *tc = tu_tcase(s, "regroup", 120, setup, teardown);
  tcase_add_test(tc, shrink_two_to_one);
  tcase_add_test(tc, shrink_three_to_two);
  tcase_add_test(tc, shrink_four_to_two_after_two_deaths);
  tcase_add_test(tc, member_killed_inside_the_regroup);
  tcase_add_test(tc, grow_by_a_newcomer_and_shrink_at_once);
  tcase_add_test(tc, grow_after_the_first_rank_died);
  tcase_add_test(tc, grow_a_live_group);
  tcase_add_test(tc, stopped_or_dead_candidate_stalls_nobody);
  tcase_add_test(tc, stopped_member_times_the_regroup_out);
  tcase_add_test(tc, bad_arguments_are_einval_and_change_nothing);
  tcase_add_test(tc, join_refused_while_members_regroup);
  tcase_add_test(tc, newcomer_is_told_of_a_death_after_its_admission);
  tcase_add_test(tc, plans_damaged_or_left_half_applied);
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
