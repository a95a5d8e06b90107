/* test_group_deaths.c - trainer groups (DESIGN §4) whose members are
 * SIGKILLed inside barriers and each collective: every survivor gets
 * EOWNERDEAD for the same round, soon, a replacement takes the rank over and
 * the next rounds are right. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "grouputil.h"

/* ---- deaths ----------------------------------------------------------------------- */

struct die_arg {
  struct board *b;
  int rank, size, rounds, kind;
  const char *group;
};

/* What rank `rank` of `size` holds at k of n before a round of `kind`, and
 * after it: k % 5 everywhere (an allgather: in its own share, -1 elsewhere);
 * an allreduce makes it size times that, a reduce_scatter in its own share. */
static float round_before(int kind, int rank, int size, int64_t k, int64_t n) {
  if (kind == K_ALLGATHER && owner((size_t)k, (size_t)n, size) != rank) return -1;
  return (float)(k % 5);
}
static float round_after(int kind, int rank, int size, int64_t k, int64_t n) {
  bool mine = owner((size_t)k, (size_t)n, size) == rank;
  if (kind == K_ALLREDUCE || kind == K_PRIVATE || (kind == K_REDUCE_SCATTER && mine))
    return (float)(k % 5) * (float)size;
  return (float)(k % 5);
}

/* Rounds of barriers (or collectives on 100000 floats) until `rounds` passed
 * after the first EOWNERDEAD, which is recorded. */
static int kid_rounds(void *argp) {
  struct die_arg *a = argp;
  pdshm_seg *s;
  pdshm_scope *r;
  pdshm_group *g;
  pdshm_var *v;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &r)) TU_FAIL_RETURN(&a->b->rep, "attach");
  if (pdshm_var_new(r, &v) || staging_new(r)) TU_FAIL_RETURN(&a->b->rep, "var");
  int64_t n = 100000;
  if (pdshm_tensor_resize(v, PDSHM_F32, 1, &n)) TU_FAIL_RETURN(&a->b->rep, "resize");
  float *p = pdshm_tensor_data(v);
  if (pdshm_group_join(s, a->group, (unsigned)a->size, a->rank, &g))
    TU_FAIL_RETURN(&a->b->rep, "join");
  int after = -1;
  for (int i = 1; after < a->rounds; i++) {
    for (int64_t k = 0; k < n; k++) p[k] = round_before(a->kind, a->rank, a->size, k, n);
    int rc = collective(a->kind, g, v, PDSHM_SUM, 30 * SEC);
    if (rc == PDSHM_EOWNERDEAD && after < 0) {
      atomic_store(&a->b->dead_ns[a->rank], tu_now_ns());
      atomic_store(&a->b->dead_round[a->rank], i);
      after = 0;
      continue;
    }
    if (rc) TU_FAIL_RETURN(&a->b->rep, "rank %d round %d: %s", a->rank, i, pdshm_err_name(rc));
    atomic_store(&a->b->progress[a->rank], i);
    if (after >= 0) after++;
    if (a->kind != K_BARRIER && after > 0)
      for (int64_t k = 0; k < n; k++)
        if (p[k] != round_after(a->kind, a->rank, a->size, k, n))
          TU_FAIL_RETURN(&a->b->rep, "rank %d round %d: [%lld] = %g", a->rank, i, (long long)k,
                         p[k]);
  }
  pdshm_group_leave(g);
  pdshm_scope_release(r);
  pdshm_detach(s);
  return 0;
}

/* The victim: joins `rank`, does rounds until it is killed. */
static int kid_victim(void *argp) {
  struct die_arg *a = argp;
  a->rounds = 1 << 30;
  return kid_rounds(a);
}

static const char *const kind_names[K_KINDS] = {"barriers", "allreduces", "reduce_scatters",
                                                "allgathers", "private_allreduces"};

static void death_test(int kind, unsigned seed) {
  struct board *b = tu_shared(sizeof *b);
  const int size = 4, victim = 2;
  struct die_arg a[4];
  pid_t pid[4];
  srand(seed);
  for (int r = 0; r < size; r++) {
    a[r] = (struct die_arg){.b = b, .rank = r, .size = size, .rounds = 20,
                            .kind = kind, .group = kind_names[kind]};
    pid[r] = tu_spawn(r == victim ? kid_victim : kid_rounds, &a[r]);
  }
  while (!atomic_load(&b->progress[victim])) /* every member joined and passed a round */
    usleep(1000);
  usleep((unsigned)(rand() % 100000));
  atomic_store(&b->kill_ns, tu_now_ns());
  kill(pid[victim], SIGKILL);
  tu_wait(pid[victim]);
  /* survivors get EOWNERDEAD for the same round, not their 30 s timeout
   * (how soon is printed, not asserted: a loaded machine delays anyone) */
  for (uint64_t t0 = tu_now_ns(); tu_now_ns() - t0 < 10 * SEC;) {
    int seen = 0;
    for (int r = 0; r < size; r++) seen += r != victim && atomic_load(&b->dead_round[r]);
    if (seen == size - 1) break;
    usleep(1000);
  }
  int round = 0;
  uint64_t most = 0;
  for (int r = 0; r < size; r++) {
    if (r == victim) continue;
    ck_assert_msg(atomic_load(&b->dead_round[r]), "rank %d never got EOWNERDEAD: %s", r, b->rep.why);
    if (!round) round = b->dead_round[r];
    ck_assert_int_eq(b->dead_round[r], round);
    uint64_t lag = b->dead_ns[r] - b->kill_ns;
    most = lag > most ? lag : most;
  }
  fprintf(stderr, "test_group_deaths: survivors of a SIGKILL in %s told of it within %.1f ms\n",
          kind_names[kind], most / 1e6);
  /* a replacement takes the rank over and the rounds go on */
  a[victim].rounds = 20;
  a[victim].b = b;
  pid[victim] = tu_spawn(kid_rounds, &a[victim]);
  for (int r = 0; r < size; r++) {
    if (r == victim) continue;
    wait_ok(pid[r], b);
  }
  kill(pid[victim], SIGKILL); /* it counts its rounds from a death it never saw */
  tu_wait(pid[victim]);
  ck_assert_msg(!atomic_load(&b->dead_round[victim]),
                "the replacement was told of the death it replaced (round %d)", b->dead_round[victim]);
  tu_await_dead(seg, 1);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}

START_TEST(member_killed_in_barriers) { death_test(K_BARRIER, (unsigned)_i + 1); }
END_TEST
START_TEST(member_killed_in_allreduces) { death_test(K_ALLREDUCE, (unsigned)_i + 7); }
END_TEST
START_TEST(member_killed_in_reduce_scatters) { death_test(K_REDUCE_SCATTER, (unsigned)_i + 13); }
END_TEST
START_TEST(member_killed_in_allgathers) { death_test(K_ALLGATHER, (unsigned)_i + 19); }
END_TEST
START_TEST(member_killed_in_private_allreduces) { death_test(K_PRIVATE, (unsigned)_i + 25); }
END_TEST

int main(void) {
  Suite *s = suite_create("group_deaths");
  TCase *tc = tu_tcase(s, "death", 60, setup, teardown);
  tcase_add_loop_test(tc, member_killed_in_barriers, 0, 3);
  tcase_add_loop_test(tc, member_killed_in_allreduces, 0, 3);
  tcase_add_loop_test(tc, member_killed_in_reduce_scatters, 0, 3);
  tcase_add_loop_test(tc, member_killed_in_allgathers, 0, 3);
  tcase_add_loop_test(tc, member_killed_in_private_allreduces, 0, 3);
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
