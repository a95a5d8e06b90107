/* test_group_stall.c - a member stopped (SIGSTOP: slow, not dead) while it
 * writes its share of an allreduce, and the other member killed: nobody
 * waits on the stopped member while holding what others need.  Attaching,
 * reaping (which leaves the dead slot, PDSHM_ETIMEDOUT), joining another
 * group, taking the dead rank over (PDSHM_ETIMEDOUT) and the inspector each
 * return within seconds while the member stays stopped; once it goes on,
 * its allreduce answers EOWNERDEAD, the next reap finishes the dead slot,
 * the rank is taken over, pdshm_check is clean and every byte is back.  A
 * reaper that must leave the slot, killed at each of its crash windows,
 * leaves it to the next just the same.  A reaper stopped as it announces a
 * death, while the round the dead member had arrived at completes, breaks
 * the next round once it goes on. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define SEC 1000000000ull
#define FLOATS (1 << 20) /* 4 MiB a tensor: writing is most of a round */
#define BOUND (5 * SEC)  /* what a call may take while the member is stopped */
#define WINDOWS 4096     /* a reaper's windows recorded */

static char seg_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;
static uint64_t base_used;

static void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("stall"));
  seg = tu_create_as(seg_name, 24u << 20, 16); /* fits CI's 64 MiB /dev/shm beside others */
  base_used = tu_used(seg);
}

static void teardown(void) {
  if (seg) pdshm_detach(seg);
  seg = NULL;
  tu_cleanup();
}

struct board;
struct kid {
  struct board *b;
  int rank;
};

/* Shared with the children (mapped before the forks). */
struct board {
  struct kid kids[2];      /* the members' arguments                      */
  _Atomic int rc;          /* the allreduce result that ended rank 0's    */
  uint64_t k;              /* the window a reaper dies at (0: none)       */
  _Atomic uint64_t hits;   /* the windows it passed                       */
  char names[WINDOWS][64]; /* the point of each (up to WINDOWS)           */
};

/* Joins "stall" of 2 at its rank and runs allreduces until one fails;
 * exits 0 when that one was EOWNERDEAD and it then left and detached. */
static int kid_member(void *arg) {
  const struct kid *k = arg;
  pdshm_seg *s;
  pdshm_scope *root, *local; /* anonymous: it goes with its holder */
  pdshm_var *v;
  pdshm_group *g;
  int64_t n = FLOATS;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &root) ||
      pdshm_scope_new(root, NULL, &local) || pdshm_var_new(local, &v) ||
      pdshm_tensor_resize(v, PDSHM_F32, 1, &n))
    return 10;
  float *p = pdshm_tensor_data(v);
  for (int i = 0; i < FLOATS; i++) p[i] = 1.0f;
  if (pdshm_group_join(s, "stall", 2, k->rank, &g)) return 11;
  int rc;
  while (!(rc = pdshm_group_allreduce(g, v, PDSHM_MAX, 600 * (int64_t)SEC))) {
  }
  atomic_store(&k->b->rc, rc);
  if (pdshm_group_leave(g)) return 12;
  pdshm_scope_release(local);
  pdshm_scope_release(root);
  if (pdshm_detach(s)) return 13;
  return rc == PDSHM_EOWNERDEAD ? 0 : 14;
}

static int rank0_of(const pdshm_group_info *gi, void *arg) {
  if (!strcmp(gi->name, "stall")) *(pdshm_group_member_info *)arg = gi->members[0];
  return 0;
}

/* Rank 0 of "stall" as the inspector sees it (FREE when no such group). */
static pdshm_group_member_info rank0(void) {
  pdshm_group_member_info mi = {0};
  int rc = pdshm_inspect_groups(seg, rank0_of, &mi);
  if (rc) ck_abort_msg("pdshm_inspect_groups: %s", pdshm_err_name(rc));
  return mi;
}

/* Stops pid, rank 0, while it writes its share of an allreduce. */
static void stop_while_writing(pid_t pid) {
  for (uint64_t end = tu_now_ns() + 60 * SEC; tu_now_ns() < end;) {
    if (!rank0().writing) continue;
    kill(pid, SIGSTOP);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
    ck_assert(WIFSTOPPED(st));
    if (rank0().writing) return;
    kill(pid, SIGCONT);
  }
  ck_abort_msg("rank 0 was never caught writing");
}

/* Runs the inspector (pdshm-attach VIEW NAME) to its end: its exit status. */
static int inspector(const char *view) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execl(ATTACH_TOOL, ATTACH_TOOL, view, seg_name, (char *)NULL);
    _exit(127);
  }
  return tu_wait(pid);
}

/* Ends the stopwatch started at t0: what ran took less than BOUND. */
static void within_bound(uint64_t t0, const char *what) {
  uint64_t ns = tu_now_ns() - t0;
  ck_assert_msg(ns < BOUND, "%s took %.1f s while a member was stopped", what, ns / 1e9);
  fprintf(stderr, "test_group_stall: %s returned in %.1f ms\n", what, ns / 1e6);
}

/* Spawns fn(arg) and waits until it stopped itself (SIGSTOP at a crash
 * point). */
static pid_t spawn_stopped(int (*fn)(void *), void *arg) {
  pid_t pid = tu_spawn(fn, arg);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
  ck_assert(WIFSTOPPED(st));
  return pid;
}

/* Tensors of 1 MiB holding 7s, in an anonymous scope, in every free MiB of
 * the arena: a buffer that a reap let go while a member still wrote into it
 * would be among them. */
#define FILL_MAX 64
struct fill {
  pdshm_scope *scope;
  pdshm_var *v[FILL_MAX];
  int n;
};

static void fill_arena(struct fill *f) {
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &f->scope), 0);
  pdshm_scope_release(root);
  int64_t n = 1 << 18;
  for (f->n = 0; f->n < FILL_MAX; f->n++) {
    pdshm_var *v;
    if (pdshm_var_new(f->scope, &v) || pdshm_tensor_resize(v, PDSHM_F32, 1, &n)) break;
    float *p = pdshm_tensor_data(v);
    for (int64_t i = 0; i < n; i++) p[i] = 7.0f;
    f->v[f->n] = v;
  }
  ck_assert_int_lt(f->n, FILL_MAX); /* the arena was filled */
}

/* Every 7 still there (an assertion per tensor: Check records each one);
 * the tensors go. */
static void fill_check_drop(struct fill *f) {
  for (int k = 0; k < f->n; k++) {
    const float *p = pdshm_tensor_data(f->v[k]);
    int64_t i = 0;
    while (i < 1 << 18 && p[i] == 7.0f) i++;
    ck_assert_msg(i == 1 << 18, "tensor %d of the filling: [%lld] = %g", k, (long long)i, p[i]);
  }
  ck_assert_int_eq(pdshm_scope_release(f->scope), 0);
}

/* Everything a stopped member must not hold up, with the dead member's
 * slot unreaped and the stopped one still writing. */
static void while_stopped(void) {
  uint64_t t0 = tu_now_ns();
  pdshm_seg *other;
  ck_assert_int_eq(pdshm_attach(seg_name, NULL, &other), 0);
  ck_assert_int_eq(pdshm_detach(other), 0);
  within_bound(t0, "attach");

  t0 = tu_now_ns();
  unsigned reaped = 1;
  ck_assert_int_eq(pdshm_reap(seg, &reaped), PDSHM_ETIMEDOUT);
  ck_assert_uint_eq(reaped, 0);
  within_bound(t0, "reap");

  t0 = tu_now_ns();
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(seg, "another", 2, -1, &g), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  within_bound(t0, "join of another group");

  t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_join(seg, "stall", 2, 1, &g), PDSHM_ETIMEDOUT);
  within_bound(t0, "takeover of the dead rank");

  t0 = tu_now_ns();
  ck_assert_int_eq(inspector("--groups"), 0);
  ck_assert_int_eq(inspector("--procs"), 0);
  within_bound(t0, "the inspector");

  ck_assert(rank0().writing);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0); /* a slot left is a dead slot */
}

/* Rank 0 stopped while it writes, rank 1 killed: rank 0's pid. */
static pid_t stall(struct board *b) {
  atomic_store(&b->rc, 0);
  b->kids[0] = (struct kid){.b = b, .rank = 0};
  b->kids[1] = (struct kid){.b = b, .rank = 1};
  pid_t stopped = tu_spawn(kid_member, &b->kids[0]), killed = tu_spawn(kid_member, &b->kids[1]);
  stop_while_writing(stopped);
  kill(killed, SIGKILL);
  ck_assert_int_eq(tu_wait(killed), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  return stopped;
}

/* The stopped member goes on, the arena filled meanwhile: its allreduce
 * answers EOWNERDEAD, having written nothing but the members' tensors; then
 * the dead slots are reaped (the first reap reaps the member's, and any a
 * killed reaper left), its rank is taken over, and everything is as
 * before. */
static void resume(pid_t stopped, struct board *b) {
  struct fill f;
  fill_arena(&f);
  kill(stopped, SIGCONT);
  ck_assert_msg(tu_wait(stopped) == 0, "the stopped member ended with %s",
                pdshm_err_name(atomic_load(&b->rc)));
  fill_check_drop(&f);
  unsigned reaped = 0;
  ck_assert_int_eq(pdshm_reap(seg, &reaped), 0);
  ck_assert_uint_ge(reaped, 1);
  pdshm_stats st;
  for (uint64_t end = tu_now_ns() + 5 * SEC;; usleep(1000)) { /* a killed reaper's slot */
    ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
    if (!st.procs_dead || tu_now_ns() > end) break;
    ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  }
  ck_assert_uint_eq(st.procs_dead, 0);
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(seg, "stall", 2, 1, &g), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}

START_TEST(stopped_writer_beside_a_dead_member_stalls_nobody) {
  struct board *b = tu_shared(sizeof *b);
  pid_t stopped = stall(b);
  while_stopped();
  resume(stopped, b);
}
END_TEST

/* A reaper that attaches (which reaps), then reaps, killed at its k-th crash
 * window (0: never); its hits up to there in b->hits. */
static int kid_reaper(void *arg) {
  struct board *b = arg;
  pdshm_seg *s;
  pdshm__crash_arm(b->k, NULL);
  int rc = pdshm_attach(seg_name, NULL, &s);
  if (!rc) rc = pdshm_reap(s, NULL);
  uint64_t n = pdshm__crash_hits();
  for (uint64_t i = 1; i <= n && i <= WINDOWS; i++)
    snprintf(b->names[i - 1], sizeof b->names[0], "%s", pdshm__crash_name(i));
  atomic_store(&b->hits, n);
  if (rc != PDSHM_ETIMEDOUT) return 1;
  return pdshm_detach(s) ? 2 : 0;
}

/* Each pass of the reaper must leave the slot; one killed at any of its
 * windows leaves it to the next just the same: left again while the member
 * is stopped, finished once it went on. */
START_TEST(reaper_that_must_leave_the_slot_killed_at_every_window) {
  struct board *b = tu_shared(sizeof *b);
  pid_t stopped = stall(b);
  b->k = 0;
  ck_assert_int_eq(tu_wait(tu_spawn(kid_reaper, b)), 0);
  uint64_t n = atomic_load(&b->hits);
  ck_assert_uint_gt(n, 0);
  resume(stopped, b);
  for (uint64_t k = 1; k <= n; k++) {
    stopped = stall(b);
    b->k = k;
    int st = tu_wait(tu_spawn(kid_reaper, b));
    ck_assert_msg(st == 128 + SIGKILL, "the reaper armed at window %llu (%s) exited %d",
                  (unsigned long long)k, k <= WINDOWS ? b->names[k - 1] : "?", st);
    ck_assert_int_eq(pdshm_reap(seg, NULL), PDSHM_ETIMEDOUT); /* still left */
    resume(stopped, b);
  }
  fprintf(stderr, "test_group_stall: a reaper leaving the slot killed at each of %llu windows\n",
          (unsigned long long)n);
}
END_TEST

/* ---- a member slow to read the descriptions ------------------------------------- */

/* "late" (3 members): rank 0 and 1 allreduce; rank 2 comes last, and stops
 * (a crash point armed with SIGSTOP) the moment its arrival completes the
 * first round.  Rank 1 is killed while ranks 0 and 1 wait in the second;
 * rank 0 gets EOWNERDEAD and calls again, with another element count, so
 * that its description for the next round overwrites the one rank 2 has not
 * read yet.  Rank 2, let go, must answer the broken round (EOWNERDEAD), not
 * EINVAL from the descriptions of a round it never took part in. */
struct late {
  _Atomic int rc[3];     /* each rank's answer (rank 0: of its first call) */
  _Atomic int second;    /* rank 0 started its second call                 */
};
struct late_arg {
  struct late *l;
  int rank;
};

static int kid_late(void *argp) {
  const struct late_arg *a = argp;
  struct late *l = a->l;
  int rank = a->rank;
  pdshm_seg *s;
  pdshm_scope *root, *local;
  pdshm_var *v, *w;
  pdshm_group *g;
  int64_t n = 1000, m = 500;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &root) ||
      pdshm_scope_new(root, NULL, &local) || pdshm_var_new(local, &v) ||
      pdshm_tensor_resize(v, PDSHM_F32, 1, &n) || pdshm_var_new(local, &w) ||
      pdshm_tensor_resize(w, PDSHM_F32, 1, &m))
    return 10;
  if (pdshm_group_join(s, "late", 3, rank, &g)) return 11;
  if (rank == 2) pdshm__crash_arm_signal(1, "group.round.arrived", SIGSTOP);
  int rc = pdshm_group_allreduce(g, v, PDSHM_SUM, 60 * (int64_t)SEC);
  atomic_store(&l->rc[rank], rc);
  if (rank == 0) {
    atomic_store(&l->second, 1);
    pdshm_group_allreduce(g, w, PDSHM_SUM, 3 * (int64_t)SEC);
  }
  return 0;
}

/* Group `name` of 3 as the inspector sees it. */
struct trio_look {
  const char *name;
  uint32_t round, arrived[3];
};
static int trio_of(const pdshm_group_info *gi, void *arg) {
  struct trio_look *l = arg;
  if (strcmp(gi->name, l->name)) return 0;
  l->round = gi->round;
  for (int r = 0; r < 3; r++) l->arrived[r] = gi->members[r].arrived;
  return 0;
}
/* Waits until the ranks in mask of group `name` (of 3) have arrived at its
 * current round, which is at least `round`; that round. */
static uint32_t trio_await(const char *name, unsigned mask, uint32_t round) {
  for (uint64_t end = tu_now_ns() + 30 * SEC; tu_now_ns() < end; usleep(1000)) {
    struct trio_look l = {.name = name};
    ck_assert_int_eq(pdshm_inspect_groups(seg, trio_of, &l), 0);
    bool all = l.round >= round;
    for (int r = 0; r < 3; r++)
      if (mask >> r & 1) all &= l.arrived[r] == l.round;
    if (all) return l.round;
  }
  ck_abort_msg("the members of \"%s\" never arrived", name);
  return 0;
}

START_TEST(member_late_to_the_descriptions_answers_the_break) {
  struct late *l = tu_shared(sizeof *l);
  memset(l, 0, sizeof *l);
  struct late_arg arg[3];
  pid_t pid[3];
  for (int r = 0; r < 3; r++) arg[r] = (struct late_arg){.l = l, .rank = r};
  for (int r = 0; r < 2; r++) pid[r] = tu_spawn(kid_late, &arg[r]);
  uint32_t p = trio_await("late", 3u, 1);
  pid[2] = tu_spawn(kid_late, &arg[2]);
  int st;
  ck_assert_int_eq(waitpid(pid[2], &st, WUNTRACED), pid[2]);
  ck_assert(WIFSTOPPED(st)); /* its arrival completed round p */
  trio_await("late", 3u, p + 1); /* ranks 0 and 1 wrote their shares, wait in p+1 */
  kill(pid[1], SIGKILL);
  ck_assert_int_eq(tu_wait(pid[1]), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  trio_await("late", 1u, p + 2); /* rank 0 told the death of rank 1 (arrived at p+1):
                                    EOWNERDEAD, and its next call */
  ck_assert_int_eq(atomic_load(&l->rc[0]), PDSHM_EOWNERDEAD);
  ck_assert(atomic_load(&l->second));
  kill(pid[2], SIGCONT);
  ck_assert_int_eq(tu_wait(pid[2]), 0);
  ck_assert_msg(atomic_load(&l->rc[2]) == PDSHM_EOWNERDEAD, "the late member answered %s",
                pdshm_err_name(atomic_load(&l->rc[2])));
  ck_assert_int_eq(tu_wait(pid[0]), 0);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}
END_TEST

/* ---- a death announced as its round completes ---------------------------------- */

/* A member killed after it arrived at round R, whose death is announced by
 * the reaper of a process attaching, stopped between reading the round (R)
 * and breaking it.  Meanwhile the other two arrive and R completes; they
 * wait in R+1 (noticing the death needs the groups lock, which the reaper
 * holds).  Let go, the reaper must break R+1, the round the dead member
 * cannot complete: had it marked the death reported without a break, the
 * two would wait in R+1 until their deadlines. */
struct told {
  _Atomic int joined, go, attach_rc;
  _Atomic int rc[2][2]; /* ranks 0 and 1: their first and second barrier */
};
struct told_arg {
  struct told *t;
  int rank;
};

#define TOLD_WAIT (8 * (int64_t)SEC) /* the survivors' barriers */

/* Ranks 0 and 1: join, wait for the go, two barriers; rank 2: joins and
 * waits in a barrier until it is killed. */
static int kid_told(void *argp) {
  const struct told_arg *a = argp;
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_group_join(s, "told", 3, a->rank, &g)) return 10;
  if (a->rank == 2) return pdshm_group_barrier(g, 600 * (int64_t)SEC) + 20;
  atomic_fetch_add(&a->t->joined, 1);
  while (!atomic_load(&a->t->go)) usleep(1000);
  for (int i = 0; i < 2; i++) atomic_store(&a->t->rc[a->rank][i], pdshm_group_barrier(g, TOLD_WAIT));
  return pdshm_group_leave(g) || pdshm_detach(s) ? 11 : 0;
}

/* Attaches, its reaper stopping (SIGSTOP) as it announces the death, then
 * stays attached until it is killed. */
static int kid_told_reaper(void *argp) {
  const struct told_arg *a = argp;
  pdshm_seg *s;
  pdshm__crash_arm_signal(1, "group.death.announcing", SIGSTOP);
  int rc = pdshm_attach(seg_name, NULL, &s);
  atomic_store(&a->t->attach_rc, rc);
  while (!rc) pause();
  return 10;
}

START_TEST(death_announced_as_its_round_completes_breaks_the_next) {
  struct told *t = tu_shared(sizeof *t);
  memset(t, 0, sizeof *t);
  struct told_arg arg[3];
  pid_t pid[3];
  for (int r = 0; r < 3; r++) arg[r] = (struct told_arg){.t = t, .rank = r};
  for (int r = 0; r < 2; r++) pid[r] = tu_spawn(kid_told, &arg[r]);
  while (atomic_load(&t->joined) < 2) usleep(1000);
  pid[2] = tu_spawn(kid_told, &arg[2]);
  uint32_t round = trio_await("told", 4u, 1);
  kill(pid[2], SIGKILL); /* it had arrived at `round` */
  ck_assert_int_eq(tu_wait(pid[2]), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  atomic_store(&t->attach_rc, 1); /* none yet */
  pid_t reaper = spawn_stopped(kid_told_reaper, &arg[2]); /* as it announces the death */
  atomic_store(&t->go, 1);
  trio_await("told", 3u, round + 1); /* `round` completed: both wait in the next */
  kill(reaper, SIGCONT);
  uint64_t t0 = tu_now_ns();
  for (int r = 0; r < 2; r++) ck_assert_int_eq(tu_wait(pid[r]), 0);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(atomic_load(&t->rc[r][0]), 0);
    ck_assert_msg(atomic_load(&t->rc[r][1]) == PDSHM_EOWNERDEAD,
                  "rank %d's barrier after the death answered %s", r,
                  pdshm_err_name(atomic_load(&t->rc[r][1])));
  }
  fprintf(stderr, "test_group_stall: the death's break reached the next round's waiters in "
                  "%.1f ms\n", (tu_now_ns() - t0) / 1e6);
  for (uint64_t end = tu_now_ns() + 10 * SEC; atomic_load(&t->attach_rc) == 1;) {
    ck_assert_msg(tu_now_ns() < end, "the attach never returned");
    usleep(1000);
  }
  ck_assert_int_eq(atomic_load(&t->attach_rc), 0);
  kill(reaper, SIGKILL);
  ck_assert_int_eq(tu_wait(reaper), 128 + SIGKILL);
  tu_await_dead(seg, 1);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}
END_TEST

/* ---- a process stopped holding the groups lock ---------------------------------- */

/* Rank 1 of "pair": one barrier with rank 0, then waits to be killed. */
static int kid_pair_rank1(void *arg) {
  (void)arg;
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_group_join(s, "pair", 2, 1, &g)) return 10;
  if (pdshm_group_barrier(g, 60 * (int64_t)SEC)) return 11;
  for (;;) pause();
}

/* Joins a group of its own and stops (SIGSTOP) holding the groups lock, at
 * the commit of its join; let go, it leaves and detaches. */
static int kid_stopped_joiner(void *arg) {
  (void)arg;
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s)) return 10;
  pdshm__crash_arm_signal(1, "group.join.ready", SIGSTOP);
  if (pdshm_group_join(s, "other", 1, 0, &g)) return 11;
  if (pdshm_group_leave(g)) return 12;
  return pdshm_detach(s) ? 13 : 0;
}

/* The stopped joiner goes on: g0's next barrier answers the death of its
 * other member, g0 leaves, the reap ends, and the segment is as it was. */
static void joiner_goes_on_then_death_answered(pid_t joiner, pdshm_group *g0) {
  kill(joiner, SIGCONT);
  ck_assert_int_eq(tu_wait(joiner), 0);
  ck_assert_int_eq(pdshm_group_barrier(g0, 10 * (int64_t)SEC), PDSHM_EOWNERDEAD);
  ck_assert_int_eq(pdshm_group_leave(g0), 0);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}

/* While a process stays stopped with the segment's groups lock held, and
 * rank 1 of "pair" is killed: rank 0's barrier ends at its own timeout
 * (noticing the death needs the lock: it looks again at each slice instead
 * of waiting for it), a reap leaves the dead slot to the next reaper
 * (PDSHM_ETIMEDOUT), and a join answers PDSHM_ETIMEDOUT, each within
 * seconds.  Once the process goes on, the next barrier answers the death,
 * the reap finishes the slot, and the segment is clean. */
START_TEST(process_stopped_holding_the_groups_lock_stalls_no_wait) {
  pdshm_group *g0, *g3 = NULL;
  ck_assert_int_eq(pdshm_group_join(seg, "pair", 2, 0, &g0), 0);
  pid_t rank1 = tu_spawn(kid_pair_rank1, NULL);
  ck_assert_int_eq(pdshm_group_barrier(g0, 60 * (int64_t)SEC), 0);
  pid_t joiner = spawn_stopped(kid_stopped_joiner, NULL);
  kill(rank1, SIGKILL);
  ck_assert_int_eq(tu_wait(rank1), 128 + SIGKILL);
  tu_await_dead(seg, 1);

  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_barrier(g0, 300 * (int64_t)1000000), PDSHM_ETIMEDOUT);
  within_bound(t0, "a barrier beside the dead member");
  t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_reap(seg, NULL), PDSHM_ETIMEDOUT);
  within_bound(t0, "pdshm_reap");
  t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_join(seg, "third", 1, 0, &g3), PDSHM_ETIMEDOUT);
  within_bound(t0, "pdshm_group_join");

  joiner_goes_on_then_death_answered(joiner, g0);
}
END_TEST

/* ---- a regroup beside a process stopped holding the groups lock ------------------ */

struct regroup_board {
  _Atomic int go;        /* rank 1 of "grow" may regroup                   */
  _Atomic int rank, size; /* what the candidate's enlist answered           */
};

/* Rank 1 of "grow": one barrier with rank 0, then, once told, a regroup and
 * a barrier of the regrouped group; leaves and detaches. */
static int kid_grow_rank1(void *arg) {
  struct regroup_board *b = arg;
  pdshm_seg *s;
  pdshm_group *g;
  int rank, size;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_group_join(s, "grow", 2, 1, &g)) return 10;
  if (pdshm_group_barrier(g, 60 * (int64_t)SEC)) return 11;
  while (!atomic_load(&b->go)) usleep(1000);
  if (pdshm_group_regroup(g, 30 * (int64_t)SEC, &rank, &size)) return 12;
  if (rank != 1 || size != 3) return 13;
  if (pdshm_group_barrier(g, 30 * (int64_t)SEC)) return 14;
  return pdshm_group_leave(g) || pdshm_detach(s) ? 15 : 0;
}

/* Enlists in "grow", stopping (SIGSTOP) at the commit of its registration,
 * the groups lock held; let go, waits to be admitted, then one barrier. */
static int kid_stopped_enlister(void *arg) {
  struct regroup_board *b = arg;
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s)) return 10;
  pdshm__crash_arm_signal(1, "group.enlist.ready", SIGSTOP);
  if (pdshm_group_enlist(s, "grow", 60 * (int64_t)SEC, &g)) return 11;
  atomic_store(&b->rank, pdshm_group_rank(g));
  atomic_store(&b->size, pdshm_group_size(g));
  if (pdshm_group_barrier(g, 30 * (int64_t)SEC)) return 12;
  return pdshm_group_leave(g) || pdshm_detach(s) ? 13 : 0;
}

/* While a process stays stopped with the groups lock held, a regroup
 * answers PDSHM_ETIMEDOUT at its timeout, still in the regroup: a barrier
 * then answers PDSHM_EBUSY, and an enlist PDSHM_ETIMEDOUT, nothing
 * changed.  Once the process goes on, the next regroup ends the same one,
 * admitting the stopped process's candidacy with the other member. */
START_TEST(regroup_beside_a_process_stopped_holding_the_groups_lock) {
  struct regroup_board *b = tu_shared(sizeof *b);
  pdshm_group *g0, *cand = NULL;
  int rank = -1, size = -1;
  ck_assert_int_eq(pdshm_group_join(seg, "grow", 2, 0, &g0), 0);
  pid_t rank1 = tu_spawn(kid_grow_rank1, b);
  ck_assert_int_eq(pdshm_group_barrier(g0, 60 * (int64_t)SEC), 0);
  pid_t enlister = spawn_stopped(kid_stopped_enlister, b);

  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_regroup(g0, 300 * (int64_t)1000000, &rank, &size),
                   PDSHM_ETIMEDOUT);
  within_bound(t0, "pdshm_group_regroup");
  ck_assert_int_eq(rank, -1);
  ck_assert_int_eq(pdshm_group_barrier(g0, 300 * (int64_t)1000000), PDSHM_EBUSY);
  t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_enlist(seg, "grow", 300 * (int64_t)1000000, &cand),
                   PDSHM_ETIMEDOUT);
  within_bound(t0, "pdshm_group_enlist");
  ck_assert_ptr_null(cand);
  ck_assert_int_eq(pdshm_group_size(g0), 2);

  kill(enlister, SIGCONT);
  atomic_store(&b->go, 1);
  ck_assert_int_eq(pdshm_group_regroup(g0, 30 * (int64_t)SEC, &rank, &size), 0);
  ck_assert_int_eq(rank, 0);
  ck_assert_int_eq(size, 3);
  ck_assert_int_eq(pdshm_group_barrier(g0, 30 * (int64_t)SEC), 0);
  ck_assert_int_eq(tu_wait(enlister), 0);
  ck_assert_int_eq(atomic_load(&b->rank), 2);
  ck_assert_int_eq(atomic_load(&b->size), 3);
  ck_assert_int_eq(tu_wait(rank1), 0);
  ck_assert_int_eq(pdshm_group_leave(g0), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}
END_TEST

/* A member whose regroup was left pending (the groups lock held by a
 * stopped process past its timeout) and then ended by the others' plan,
 * which moved it from rank 2 to rank 1, leaves: the seat it gives up is the
 * one the plan gave it, so the next regroup drops that rank. */
START_TEST(member_leaving_a_pending_regroup_leaves_the_seat_its_plan_gave) {
  pdshm_group *g[3];
  int rank = -1, size = -1;
  for (int r = 0; r < 3; r++) ck_assert_int_eq(pdshm_group_join(seg, "shrink", 3, r, &g[r]), 0);
  ck_assert_int_eq(pdshm_group_leave(g[0]), 0);
  pid_t joiner = spawn_stopped(kid_stopped_joiner, NULL);
  ck_assert_int_eq(pdshm_group_regroup(g[2], 200 * (int64_t)1000000, &rank, &size),
                   PDSHM_ETIMEDOUT);
  kill(joiner, SIGCONT);
  ck_assert_int_eq(tu_wait(joiner), 0);
  ck_assert_int_eq(pdshm_group_regroup(g[1], 10 * (int64_t)SEC, &rank, &size), 0);
  ck_assert_int_eq(rank, 0);
  ck_assert_int_eq(size, 2);
  ck_assert_int_eq(pdshm_group_leave(g[2]), 0);
  ck_assert_int_eq(pdshm_group_regroup(g[1], 10 * (int64_t)SEC, &rank, &size), 0);
  ck_assert_int_eq(rank, 0);
  ck_assert_int_eq(size, 1);
  ck_assert_int_eq(pdshm_group_barrier(g[1], 10 * (int64_t)SEC), 0);
  ck_assert_int_eq(pdshm_group_leave(g[1]), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}
END_TEST

/* ---- leave and detach beside a process stopped holding the groups lock ---------- */

struct leave_board {
  _Atomic int go;                    /* the lock is held by a stopped process  */
  _Atomic int call_rc, detach_rc;    /* what the child's leave or enlist, then
                                        its detach, answered                   */
  _Atomic uint64_t call_ns, detach_ns;
};

/* The child's detach, timed; 0. */
static int timed_detach(struct leave_board *b, pdshm_seg *s) {
  uint64_t t0 = tu_now_ns();
  atomic_store(&b->detach_rc, pdshm_detach(s));
  atomic_store(&b->detach_ns, tu_now_ns() - t0);
  return 0;
}

/* The child's call and its detach both answered PDSHM_ETIMEDOUT, in time. */
static void both_timed_out(struct leave_board *b, const char *call) {
  ck_assert_int_eq(atomic_load(&b->call_rc), PDSHM_ETIMEDOUT);
  ck_assert_int_eq(atomic_load(&b->detach_rc), PDSHM_ETIMEDOUT);
  ck_assert_uint_lt(atomic_load(&b->call_ns), BOUND);
  ck_assert_uint_lt(atomic_load(&b->detach_ns), BOUND);
  fprintf(stderr, "test_group_stall: %s returned in %.1f ms, a detach in %.1f ms\n", call,
          atomic_load(&b->call_ns) / 1e6, atomic_load(&b->detach_ns) / 1e6);
}

/* In a child: attaches (*s), joins "duo" as rank 1 (*g), meets rank 0 at a
 * barrier, and waits for *go; 0, or the child's exit code. */
static int duo_rank1(_Atomic int *go, pdshm_seg **s, pdshm_group **g) {
  if (pdshm_attach(seg_name, NULL, s) || pdshm_group_join(*s, "duo", 2, 1, g)) return 10;
  if (pdshm_group_barrier(*g, 60 * (int64_t)SEC)) return 11;
  while (!atomic_load(go)) usleep(1000);
  return 0;
}

/* Rank 1 of "duo": once told, leaves and detaches, each timed. */
static int kid_leaver(void *arg) {
  struct leave_board *b = arg;
  pdshm_seg *s;
  pdshm_group *g;
  int rc = duo_rank1(&b->go, &s, &g);
  if (rc) return rc;
  uint64_t t0 = tu_now_ns();
  atomic_store(&b->call_rc, pdshm_group_leave(g));
  atomic_store(&b->call_ns, tu_now_ns() - t0);
  return timed_detach(b, s);
}

/* Rank 0 of "duo" (*g0) and, spawned, fn(board) as rank 1, after a barrier
 * together; then a process stopped holding the groups lock (*joiner), and
 * *go set: the pid of fn's process. */
static pid_t duo_then_stopped_holder(int (*fn)(void *), void *board, _Atomic int *go,
                                     pdshm_group **g0, pid_t *joiner) {
  ck_assert_int_eq(pdshm_group_join(seg, "duo", 2, 0, g0), 0);
  pid_t kid = tu_spawn(fn, board);
  ck_assert_int_eq(pdshm_group_barrier(*g0, 60 * (int64_t)SEC), 0);
  *joiner = spawn_stopped(kid_stopped_joiner, NULL);
  atomic_store(go, 1);
  return kid;
}

/* While a process stays stopped with the groups lock held, a member's leave
 * answers PDSHM_ETIMEDOUT within seconds, its rank kept, and its detach
 * too, leaving the slot to the reaper: once the process goes on, the other
 * member's barrier answers the departure as a death, and the reap gives the
 * rank up, leaving the segment as it was. */
START_TEST(leave_and_detach_beside_a_process_stopped_holding_the_groups_lock) {
  struct leave_board *b = tu_shared(sizeof *b);
  pdshm_group *g0;
  pid_t joiner, leaver = duo_then_stopped_holder(kid_leaver, b, &b->go, &g0, &joiner);
  ck_assert_int_eq(tu_wait(leaver), 0);
  both_timed_out(b, "a leave");

  joiner_goes_on_then_death_answered(joiner, g0);
}
END_TEST

struct rejoin_board {
  _Atomic int go, leave_rc, left, again, join_rc, rank;
};

/* Rank 1 of "duo": once told, a leave; once told again, a join of "duo" at
 * any rank, a barrier, a leave and a detach. */
static int kid_rejoiner(void *arg) {
  struct rejoin_board *b = arg;
  pdshm_seg *s;
  pdshm_group *g;
  int rc = duo_rank1(&b->go, &s, &g);
  if (rc) return rc;
  atomic_store(&b->leave_rc, pdshm_group_leave(g));
  atomic_store(&b->left, 1);
  while (!atomic_load(&b->again)) usleep(1000);
  g = NULL;
  atomic_store(&b->join_rc, pdshm_group_join(s, "duo", 2, -1, &g));
  if (!g) return 12;
  atomic_store(&b->rank, pdshm_group_rank(g));
  if (pdshm_group_barrier(g, 30 * (int64_t)SEC)) return 13;
  return pdshm_group_leave(g) || pdshm_detach(s) ? 14 : 0;
}

/* A rank whose leave answered PDSHM_ETIMEDOUT (the groups lock held by a
 * stopped process) is given up by the same attachment's next join, once
 * the lock is free: the join gets that rank back, where it would find every
 * rank held by a live member (PDSHM_EUSERS). */
START_TEST(rank_kept_by_a_timed_out_leave_is_given_up_at_the_next_join) {
  struct rejoin_board *b = tu_shared(sizeof *b);
  pdshm_group *g0;
  pid_t joiner, kid = duo_then_stopped_holder(kid_rejoiner, b, &b->go, &g0, &joiner);
  for (int ms = 0; ms < 20000 && !atomic_load(&b->left); ms++) usleep(1000);
  ck_assert_int_eq(atomic_load(&b->leave_rc), PDSHM_ETIMEDOUT);
  kill(joiner, SIGCONT);
  ck_assert_int_eq(tu_wait(joiner), 0);
  atomic_store(&b->again, 1);
  ck_assert_int_eq(pdshm_group_barrier(g0, 30 * (int64_t)SEC), 0);
  ck_assert_int_eq(tu_wait(kid), 0);
  ck_assert_int_eq(atomic_load(&b->join_rc), 0);
  ck_assert_int_eq(atomic_load(&b->rank), 1);
  ck_assert_int_eq(pdshm_group_leave(g0), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}
END_TEST

/* ---- an enlist that times out beside a process stopped holding the groups lock -- */

static int candidates_of(const pdshm_group_info *gi, void *arg) {
  if (strcmp(gi->name, "host")) return 0;
  *(uint32_t *)arg = gi->candidates;
  return 1;
}

/* Enlists in "host" with a 1.5 s timeout, then detaches, each timed. */
static int kid_timed_enlister(void *arg) {
  struct leave_board *b = arg;
  pdshm_seg *s;
  pdshm_group *g = NULL;
  if (pdshm_attach(seg_name, NULL, &s)) return 10;
  uint64_t t0 = tu_now_ns();
  atomic_store(&b->call_rc, pdshm_group_enlist(s, "host", 1500 * (int64_t)1000000, &g));
  atomic_store(&b->call_ns, tu_now_ns() - t0);
  return g ? 11 : timed_detach(b, s);
}

/* A candidate whose enlist times out while a process stays stopped with
 * the groups lock held cannot give its seat up: the enlist answers
 * PDSHM_ETIMEDOUT within seconds all the same, and so does its detach,
 * leaving the seat to the reaper, which gives it up once the process goes
 * on. */
START_TEST(enlist_timing_out_beside_a_process_stopped_holding_the_groups_lock) {
  struct leave_board *b = tu_shared(sizeof *b);
  pdshm_group *g0;
  int rank = -1, size = -1;
  ck_assert_int_eq(pdshm_group_join(seg, "host", 1, 0, &g0), 0);
  pid_t enlister = tu_spawn(kid_timed_enlister, b);
  uint32_t candidates = 0;
  for (int ms = 0; ms < 20000 && candidates == 0; ms++, usleep(1000))
    ck_assert_int_ge(pdshm_inspect_groups(seg, candidates_of, &candidates), 0);
  ck_assert_uint_eq(candidates, 1);
  pid_t joiner = spawn_stopped(kid_stopped_joiner, NULL);
  ck_assert_int_eq(tu_wait(enlister), 0);
  both_timed_out(b, "an enlist");

  kill(joiner, SIGCONT);
  ck_assert_int_eq(tu_wait(joiner), 0);
  ck_assert_int_eq(pdshm_reap(seg, NULL), 0);
  ck_assert_int_eq(pdshm_group_regroup(g0, 10 * (int64_t)SEC, &rank, &size), 0);
  ck_assert_int_eq(size, 1);
  ck_assert_int_eq(pdshm_group_leave(g0), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}
END_TEST

int main(void) {
  Suite *s = suite_create("group_stall");
  TCase *tc = tu_tcase(s, "stall", 120, setup, teardown);
  tcase_add_test(tc, stopped_writer_beside_a_dead_member_stalls_nobody);
  tcase_add_test(tc, member_late_to_the_descriptions_answers_the_break);
  tcase_add_test(tc, death_announced_as_its_round_completes_breaks_the_next);
  tcase_add_test(tc, process_stopped_holding_the_groups_lock_stalls_no_wait);
  tcase_add_test(tc, regroup_beside_a_process_stopped_holding_the_groups_lock);
  tcase_add_test(tc, member_leaving_a_pending_regroup_leaves_the_seat_its_plan_gave);
  tcase_add_test(tc, leave_and_detach_beside_a_process_stopped_holding_the_groups_lock);
  tcase_add_test(tc, enlist_timing_out_beside_a_process_stopped_holding_the_groups_lock);
  tcase_add_test(tc, rank_kept_by_a_timed_out_leave_is_given_up_at_the_next_join);
  tc = tu_tcase(s, "reapers", 600, setup, teardown);
  tcase_add_test(tc, reaper_that_must_leave_the_slot_killed_at_every_window);
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
