/* test_group_stall.c - a member stopped (SIGSTOP: slow, not dead) while it
 * writes its share of an allreduce, and the other member killed: nobody
 * waits on the stopped member while holding what others need.  Attaching,
 * reaping (which leaves the dead slot, PDSHM_ETIMEDOUT), joining another
 * group, taking the dead rank over (PDSHM_ETIMEDOUT) and the inspector each
 * return within seconds while the member stays stopped; once it goes on,
 * its allreduce answers EOWNERDEAD, the next reap finishes the dead slot,
 * the rank is taken over, pdshm_check is clean and every byte is back. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define SEC 1000000000ull
#define FLOATS (1 << 21) /* 8 MiB a tensor: writing is most of a round */
#define BOUND (5 * SEC)  /* what a call may take while the member is stopped */

static char seg_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;
static uint64_t base_used;

static uint64_t used(void) {
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  return st.used;
}

static void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("stall"));
  seg = tu_create_as(seg_name, 64u << 20, 16);
  base_used = used();
}

static void teardown(void) {
  if (seg) pdshm_detach(seg);
  seg = NULL;
  tu_cleanup();
}

/* What a member child reports (mapped before the forks). */
struct board {
  _Atomic int rc;    /* the allreduce result that ended its rounds */
  char why[200];
};

struct kid {
  struct board *b;
  int rank;
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
  ck_assert_int_eq(pdshm_inspect_groups(seg, rank0_of, &mi), 0);
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

  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  ck_assert_uint_eq(st.procs_dead, 1);
  ck_assert(rank0().writing);
}

START_TEST(stopped_writer_beside_a_dead_member_stalls_nobody) {
  struct board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
  ck_assert_ptr_ne(b, MAP_FAILED);
  struct kid k0 = {.b = b, .rank = 0}, k1 = {.b = b, .rank = 1};
  pid_t stopped = tu_spawn(kid_member, &k0), killed = tu_spawn(kid_member, &k1);
  stop_while_writing(stopped);
  kill(killed, SIGKILL);
  ck_assert_int_eq(tu_wait(killed), 128 + SIGKILL);
  tu_await_dead(seg, 1);

  while_stopped();

  kill(stopped, SIGCONT);
  ck_assert_msg(tu_wait(stopped) == 0, "the stopped member ended with %s",
                pdshm_err_name(atomic_load(&b->rc)));
  unsigned reaped = 0;
  ck_assert_int_eq(pdshm_reap(seg, &reaped), 0);
  ck_assert_uint_eq(reaped, 1);
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(seg, "stall", 2, 1, &g), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(used(), base_used);
}
END_TEST

int main(void) {
  Suite *s = suite_create("group_stall");
  TCase *tc = tu_tcase(s, "stall", 120, setup, teardown);
  tcase_add_test(tc, stopped_writer_beside_a_dead_member_stalls_nobody);
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
