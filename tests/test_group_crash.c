/* test_group_crash.c - trainer groups killed at every crash window.
 *
 * For each operation on a group -- creating join, join of an existing group,
 * takeover of a dead member's rank, leave, last leave, barriers, allreduces,
 * reduce_scatters, allgathers, allreduces of private memory (large and
 * small), the reaper of a dead member, a regroup (with
 * this process, a third member dead), a regroup that times out, an enlist
 * admitted by this process's regroups, and an enlist that times out -- a
 * child attaches, prepares (not
 * counted), runs the operation with the crash points counting, and dies.  A
 * first run counts the windows the operation passes (N); then for every k in
 * 1..N a child dies at window k.  This process takes part where the
 * operation needs a partner (a barrier or collective of its own, which must
 * end, 0 or EOWNERDEAD, never hang); then it reaps, requires pdshm_check to
 * pass, a replacement to take the child's rank over and a barrier and a
 * correct allreduce with it, and every byte back once all have left.  After
 * a regroup or an enlist, this process regroups until the dead are dropped,
 * a newcomer enlists and is admitted, and the same barrier and allreduce
 * follow.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define SEC 1000000000ll
#define FLOATS 50000

static char g_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;
static pdshm_scope *root;
static uint64_t base_used;

struct shared {
  _Atomic uint64_t hits;   /* windows the last child passed                */
  _Atomic int ready;       /* the child prepared                            */
  char why[200];
};
static struct shared *sh;

static void setup(void) {
  snprintf(g_name, sizeof g_name, "%s", tu_name("gcrash"));
  seg = tu_create_as(g_name, 8u << 20, 16);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  pdshm_var *v;
  int64_t n = FLOATS;
  ck_assert_int_eq(pdshm_var_create(root, "mine", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &n), 0);
  sh = tu_shared(sizeof *sh);
  base_used = tu_used(seg);
}

static void teardown(void) {
  if (root) pdshm_scope_release(root);
  if (seg) pdshm_detach(seg);
  root = NULL;
  seg = NULL;
  tu_cleanup();
}

/* ---- the operations ------------------------------------------------------------- */

enum op { OP_JOIN_NEW, OP_JOIN, OP_TAKEOVER, OP_LEAVE, OP_LEAVE_LAST, OP_BARRIER, OP_ALLREDUCE,
          OP_REAP, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_ALLREDUCE_PRIVATE,
          OP_ALLREDUCE_PRIVATE_SMALL, OP_REGROUP, OP_REGROUP_TIMEOUT, OP_ENLIST,
          OP_ENLIST_TIMEOUT, NOPS };
static const char *const op_names[NOPS] = {"join-new", "join",      "takeover",       "leave",
                                           "leave-last", "barrier", "allreduce",      "reap",
                                           "reduce_scatter",        "allgather",
                                           "allreduce_private",     "allreduce_private-small",
                                           "regroup",
                                           "regroup-timeout",       "enlist",
                                           "enlist-timeout"};
/* Whether op regroups or enlists. */
static bool op_regroups(enum op op) { return op >= OP_REGROUP; }
/* The size of "cg" while op runs. */
static unsigned op_size(enum op op) {
  return op == OP_REGROUP ? 3 : op == OP_ENLIST || op == OP_ENLIST_TIMEOUT ? 1 : 2;
}
/* Whether op is a collective on a tensor. */
static bool op_tensor(enum op op) {
  return op == OP_ALLREDUCE || op == OP_REDUCE_SCATTER || op == OP_ALLGATHER ||
         op == OP_ALLREDUCE_PRIVATE || op == OP_ALLREDUCE_PRIVATE_SMALL;
}
/* The data of OP_ALLREDUCE_PRIVATE (v's tensor is its staging) and of
 * OP_ALLREDUCE_PRIVATE_SMALL (its first SMALL_FLOATS, two rounds' worth). */
#define SMALL_FLOATS 1000
static float private_data[FLOATS];
/* Whether op passes group rounds, with a partner in them. */
static bool op_rounds(enum op op) { return op == OP_BARRIER || op_tensor(op); }
/* Two of the rounds of op (a barrier's: three), 0 or the first error. */
static int op_rounds_run(enum op op, pdshm_group *g, pdshm_var *v) {
  int rc = 0;
  for (int i = 0; i < (op == OP_BARRIER ? 3 : 2) && !rc; i++)
    switch (op) {
    case OP_BARRIER: rc = pdshm_group_barrier(g, 10 * SEC); break;
    case OP_ALLREDUCE: rc = pdshm_group_allreduce(g, v, PDSHM_SUM, 10 * SEC); break;
    case OP_REDUCE_SCATTER: rc = pdshm_group_reduce_scatter(g, v, PDSHM_SUM, 10 * SEC); break;
    case OP_ALLREDUCE_PRIVATE: case OP_ALLREDUCE_PRIVATE_SMALL:
      rc = pdshm_group_allreduce_private(g, private_data, PDSHM_F32,
                                         op == OP_ALLREDUCE_PRIVATE ? FLOATS : SMALL_FLOATS, v,
                                         PDSHM_SUM, 10 * SEC);
      break;
    default: rc = pdshm_group_allgather(g, v, 10 * SEC); break;
    }
  return rc;
}
/* Whether this process holds rank 0 of "cg" (size 2) while the child runs. */
static bool op_partnered(enum op op) { return op != OP_JOIN_NEW && op != OP_LEAVE_LAST; }

struct plan {
  enum op op;
  uint64_t k;              /* die at hit k; 0: count                        */
};

static int child_fill_var(pdshm_seg *s, pdshm_var **out) {
  pdshm_scope *r, *local; /* anonymous: it goes with the child */
  if (pdshm_root(s, &r) || pdshm_scope_new(r, NULL, &local)) return 1;
  if (pdshm_var_new(local, out)) return 1;
  int64_t n = FLOATS;
  if (pdshm_tensor_resize(*out, PDSHM_F32, 1, &n)) return 1;
  float *p = pdshm_tensor_data(*out);
  for (int i = 0; i < FLOATS; i++) p[i] = (float)(i % 7);
  return 0;
}

static int partner_arrived(const pdshm_group_info *gi, void *arg) {
  *(bool *)arg = gi->members[0].arrived == gi->round;
  return 0;
}
static void await_partner_arrived(pdshm_seg *s) {
  bool arrived = false;
  for (int i = 0; i < 10000 && !arrived; i++) {
    usleep(1000);
    if (pdshm_inspect_groups(s, partner_arrived, &arrived)) break;
  }
}

static int child_main(void *arg) {
  const struct plan *pl = arg;
  pdshm_seg *s;
  pdshm_group *g = NULL;
  pdshm_var *v = NULL;
  int rc;
  /* The attach of OP_REAP reaps the dead member: the windows start there. */
  if (pl->op == OP_REAP) pdshm__crash_arm(pl->k, NULL);
  if (pdshm_attach(g_name, NULL, &s)) return 10;
  unsigned size = op_partnered(pl->op) ? op_size(pl->op) : 1;
  if (pl->op != OP_JOIN_NEW && pl->op != OP_JOIN && pl->op != OP_TAKEOVER && pl->op != OP_REAP &&
      pl->op != OP_ENLIST && pl->op != OP_ENLIST_TIMEOUT &&
      (rc = pdshm_group_join(s, "cg", size, -1, &g))) {
    snprintf(sh->why, sizeof sh->why, "join: %s (%s)", pdshm_err_name(rc), pdshm_last_error());
    return 11;
  }
  if (op_tensor(pl->op) && child_fill_var(s, &v)) return 12;
  atomic_store(&sh->ready, 1);
  if (pl->op == OP_REGROUP) await_partner_arrived(s); /* so that the child plans the regroup */
  if (pl->op != OP_REAP) pdshm__crash_arm(pl->k, NULL);
  rc = 0;
  switch (pl->op) {
  case OP_JOIN_NEW: rc = pdshm_group_join(s, "cg", 1, -1, &g); break;
  case OP_JOIN: rc = pdshm_group_join(s, "cg", 2, -1, &g); break;
  case OP_TAKEOVER: rc = pdshm_group_join(s, "cg", 2, 1, &g); break;
  case OP_LEAVE: case OP_LEAVE_LAST: rc = pdshm_group_leave(g); break;
  case OP_BARRIER: case OP_ALLREDUCE: case OP_REDUCE_SCATTER: case OP_ALLGATHER:
  case OP_ALLREDUCE_PRIVATE: case OP_ALLREDUCE_PRIVATE_SMALL:
    rc = op_rounds_run(pl->op, g, v);
    break;
  case OP_REAP: rc = pdshm_reap(s, NULL); break;
  case OP_REGROUP: case OP_REGROUP_TIMEOUT: {
    int nr, ns;
    rc = pdshm_group_regroup(g, pl->op == OP_REGROUP ? 10 * SEC : 50000000, &nr, &ns);
    if (pl->op == OP_REGROUP_TIMEOUT && rc == PDSHM_ETIMEDOUT) rc = 0;
    break;
  }
  case OP_ENLIST: rc = pdshm_group_enlist(s, "cg", 10 * SEC, &g); break;
  case OP_ENLIST_TIMEOUT:
    rc = pdshm_group_enlist(s, "cg", 50000000, &g);
    if (rc == PDSHM_ETIMEDOUT) rc = 0;
    break;
  default: break;
  }
  atomic_store(&sh->hits, pdshm__crash_hits());
  if (rc) {
    snprintf(sh->why, sizeof sh->why, "%s: %s", op_names[pl->op], pdshm_err_name(rc));
    return 13;
  }
  raise(SIGKILL);
  return 14;
}

/* A member that joins "cg" of 2 as rank 1 and dies: the dead rank of
 * OP_TAKEOVER and OP_REAP; of 3 as rank 2 (arg not NULL): OP_REGROUP's. */
static int child_join_die(void *arg) {
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(g_name, NULL, &s) ||
      pdshm_group_join(s, "cg", arg ? 3 : 2, arg ? 2 : 1, &g))
    return 10;
  raise(SIGKILL);
  return 11;
}

/* The replacement: takes rank 1 over (arg not NULL: enlists, and is
 * admitted as rank 1), one barrier and one allreduce. */
static int child_replacement(void *arg) {
  pdshm_seg *s;
  pdshm_group *g;
  pdshm_var *v;
  if (pdshm_attach(g_name, NULL, &s) || child_fill_var(s, &v)) return 10;
  if (arg ? pdshm_group_enlist(s, "cg", 10 * SEC, &g) : pdshm_group_join(s, "cg", 2, 1, &g))
    return 11;
  if (pdshm_group_rank(g) != 1 || pdshm_group_size(g) != 2) return 17;
  if (pdshm_group_barrier(g, 10 * SEC)) return 12;
  if (pdshm_group_allreduce(g, v, PDSHM_SUM, 10 * SEC)) return 13;
  const float *p = pdshm_tensor_data(v);
  for (int i = 0; i < FLOATS; i++)
    if (p[i] != (float)(i % 7) * 2) return 14;
  if (pdshm_group_leave(g)) return 15;
  return pdshm_detach(s) ? 16 : 0;
}


/* Our side of a partnered operation while the child runs. */
/* Deaths of members this process was told of (EOWNERDEAD) in one run. */
static int g_told;

/* Whether child pid has ended (not reaped yet). */
static bool child_ended(pid_t pid) {
  siginfo_t si = {0};
  ck_assert_int_eq(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT), 0);
  return si.si_pid == pid;
}

/* Our side of a regroup or an enlist: regroups (OP_REGROUP), or admits the
 * candidate (OP_ENLIST) until it is a member or ended. */
static void partner_regroup(enum op op, pdshm_group *g, pid_t pid) {
  int nr, ns;
  if (op == OP_REGROUP) { /* once the child holds rank 1: else it regroups alone */
    for (int i = 0; i < 10000 && !atomic_load(&sh->ready) && !child_ended(pid); i++) usleep(1000);
    int rc = pdshm_group_regroup(g, 10 * SEC, &nr, &ns);
    ck_assert_msg(rc == 0, "regroup beside a dying member: %s", pdshm_err_name(rc));
    return;
  }
  if (op != OP_ENLIST) return;
  do {
    ck_assert_int_eq(pdshm_group_regroup(g, 10 * SEC, &nr, &ns), 0);
    usleep(1000);
  } while (ns == 1 && !child_ended(pid));
}

/* After a regroup or enlist op: the dead dropped, a newcomer admitted as
 * rank 1, a barrier and a correct allreduce with it, every byte back. */
static void verify_regroup(enum op op, pdshm_group *g, pdshm_var *v) {
  unsigned n;
  int nr, ns, rc = pdshm_reap(seg, &n);
  ck_assert_msg(rc == 0, "%s: reap: %s (%s)", op_names[op], pdshm_err_name(rc),
                pdshm_last_error());
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  for (int i = 0; i < 4 && pdshm_group_size(g) > 1; i++) {
    rc = pdshm_group_regroup(g, 10 * SEC, &nr, &ns);
    ck_assert_msg(rc == 0, "%s: regroup: %s", op_names[op], pdshm_err_name(rc));
  }
  ck_assert_int_eq(pdshm_group_size(g), 1);
  ck_assert_int_eq(pdshm_group_rank(g), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  pid_t pid = tu_spawn(child_replacement, "enlist");
  do {
    ck_assert_int_eq(pdshm_group_regroup(g, 10 * SEC, &nr, &ns), 0);
    usleep(1000);
  } while (ns == 1 && !child_ended(pid));
  ck_assert_int_eq(ns, 2);
  ck_assert_int_eq(pdshm_group_barrier(g, 10 * SEC), 0);
  float *p = pdshm_tensor_data(v);
  for (int i = 0; i < FLOATS; i++) p[i] = (float)(i % 7);
  ck_assert_int_eq(pdshm_group_allreduce(g, v, PDSHM_SUM, 10 * SEC), 0);
  for (int i = 0; i < FLOATS; i++) ck_assert_float_eq(p[i], (float)(i % 7) * 2);
  ck_assert_int_eq(tu_wait(pid), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}

static void partner(enum op op, pdshm_group *g, pdshm_var *v) {
  int rc = op_rounds_run(op, g, v);
  ck_assert_msg(rc == 0 || rc == PDSHM_EOWNERDEAD, "%s beside a dying member: %s",
                op_names[op], pdshm_err_name(rc));
  g_told += rc == PDSHM_EOWNERDEAD;
}

/* After the death: reaped, checked, the rank taken over, every byte back. */
static void verify(enum op op, pdshm_group *g, pdshm_var *v) {
  unsigned n;
  int rrc = pdshm_reap(seg, &n);
  ck_assert_msg(rrc == 0, "%s: reap: %s (%s)", op_names[op], pdshm_err_name(rrc),
                pdshm_last_error());
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  if (g) {
    pid_t pid = tu_spawn(child_replacement, NULL);
    /* told of each death: the child's, the one a takeover replaced; at most
     * twice each (a death whose announcer died half way is told again) */
    int rc = pdshm_group_barrier(g, 10 * SEC);
    while (rc == PDSHM_EOWNERDEAD && ++g_told <= 4) rc = pdshm_group_barrier(g, 10 * SEC);
    /* a member certainly died: the child of a barrier or a collective, the
     * member a takeover or a reap was about */
    if (op_rounds(op) || op == OP_TAKEOVER || op == OP_REAP)
      ck_assert_msg(g_told > 0, "%s: never told of the death", op_names[op]);
    ck_assert_msg(rc == 0, "%s: barrier with the replacement: %s", op_names[op],
                  pdshm_err_name(rc));
    float *p = pdshm_tensor_data(v);
    for (int i = 0; i < FLOATS; i++) p[i] = (float)(i % 7);
    ck_assert_int_eq(pdshm_group_allreduce(g, v, PDSHM_SUM, 10 * SEC), 0);
    for (int i = 0; i < FLOATS; i++) ck_assert_float_eq(p[i], (float)(i % 7) * 2);
    ck_assert_int_eq(tu_wait(pid), 0);
    ck_assert_int_eq(pdshm_group_leave(g), 0);
  }
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(tu_used(seg), base_used);
}

static uint64_t run_once(enum op op, uint64_t k) {
  pdshm_group *g = NULL;
  pdshm_var *v = pdshm_find_var(root, "mine");
  if (op_partnered(op)) ck_assert_int_eq(pdshm_group_join(seg, "cg", op_size(op), 0, &g), 0);
  if (op == OP_TAKEOVER || op == OP_REAP || op == OP_REGROUP) {
    tu_wait(tu_spawn(child_join_die, op == OP_REGROUP ? "3" : NULL));
    tu_await_dead(seg, 1);
  }
  float *p = pdshm_tensor_data(v);
  for (int i = 0; i < FLOATS; i++) p[i] = (float)(i % 7);
  atomic_store(&sh->hits, 0);
  atomic_store(&sh->ready, 0);
  g_told = 0;
  struct plan pl = {.op = op, .k = k};
  pid_t pid = tu_spawn(child_main, &pl);
  if (g && op_rounds(op)) partner(op, g, v);
  if (op_regroups(op)) partner_regroup(op, g, pid);
  int st = tu_wait(pid);
  ck_assert_msg(st == 128 + SIGKILL, "%s k=%llu: child exited %d (%s)", op_names[op],
                (unsigned long long)k, st, sh->why);
  /* A reaper killed before it took a slot of its own leaves no dead slot but
   * the half-reaped one; give the kernel a moment to drop its OFD locks. */
  if (op == OP_REAP) usleep(20000);
  else tu_await_dead(seg, 1);
  if (op_regroups(op)) verify_regroup(op, g, v);
  else verify(op, g, v);
  return atomic_load(&sh->hits);
}

START_TEST(every_window_of_every_group_op) {
  enum op op = (enum op)_i;
  uint64_t n = run_once(op, 0);
  ck_assert_uint_gt(n, 0);
  for (uint64_t k = 1; k <= n; k++) run_once(op, k);
  fprintf(stderr, "test_group_crash: %s killed at each of %llu windows\n", op_names[op],
          (unsigned long long)n);
}
END_TEST

int main(void) {
  Suite *s = suite_create("group_crash");
  TCase *tc = tu_tcase(s, "windows", 240, setup, teardown);
  tcase_add_loop_test(tc, every_window_of_every_group_op, 0, NOPS);
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
