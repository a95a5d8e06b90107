/* test_group.c - trainer groups (DESIGN §4): join's errors;
 * a group's memory back after its last member leaves or is reaped; barriers
 * over thousands of rounds among 4 processes; allreduce of every dtype and op
 * against a reference computed here, odd sizes, buffers anywhere; a mismatch
 * is EINVAL at every member; reduce_scatter and allgather the same way (each
 * share against the reference, the rest untouched; a round mixing kinds is
 * EINVAL at every member and writes nothing); timeouts; members SIGKILLed
 * inside barriers and each collective: every survivor gets EOWNERDEAD for the same round, soon, a
 * replacement takes the rank over and the next rounds are right. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "groups/half.h"
#include "testutil.h"

#define SEC 1000000000ll

static char seg_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;
static pdshm_scope *root;

static void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("group"));
  seg = tu_create_as(seg_name, 16u << 20, 32);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
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
  _Atomic int64_t progress[8];   /* last round each rank passed           */
  _Atomic int dead_round[8];     /* round of a member's EOWNERDEAD        */
  _Atomic uint64_t dead_ns[8];   /* when it got it                        */
  _Atomic uint64_t kill_ns;      /* when the victim was killed            */
  _Atomic int go;                /* children proceed (barrier tests)      */
  struct tu_report rep;
};

static void wait_ok(pid_t pid, struct board *b) {
  int st = tu_wait(pid);
  ck_assert_msg(st == 0, "child exited %d: %s", st, b ? b->rep.why : "");
}

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

/* ---- allreduce ------------------------------------------------------------------ */

static const int dtypes[] = {PDSHM_F32, PDSHM_F64, PDSHM_F16, PDSHM_BF16, PDSHM_I32, PDSHM_I64};
#define NDT 6
static const size_t counts[] = {1, 7, 1001, 40000 + 3};
#define NCOUNT 4

/* The value rank r holds at element i: small integers, exact in every dtype. */
static double val(int r, size_t i, int dt) {
  int64_t x = (int64_t)((i * 7 + (size_t)r * 13) % 29) - 14 + r;
  if (dt == PDSHM_I64) x *= 1000000007ll;
  return (double)x;
}

static double reference(int op, int size, size_t i, int dt) {
  double acc = val(0, i, dt);
  for (int r = 1; r < size; r++) {
    double x = val(r, i, dt);
    acc = op == PDSHM_MAX ? fmax(acc, x) : op == PDSHM_MIN ? fmin(acc, x) : acc + x;
  }
  if (op == PDSHM_MEAN) {
    acc /= size;
    if (dt == PDSHM_I32 || dt == PDSHM_I64) acc = trunc(acc);
  }
  return acc;
}

/* binary16 of a small integer (|x| < 2048: exact), and of any half back. */
static uint16_t half_of_int(double x) {
  uint16_t sign = x < 0 ? 0x8000 : 0;
  uint32_t a = (uint32_t)fabs(x), e = 0;
  if (!a) return sign;
  while (a >> (e + 1)) e++;
  return (uint16_t)(sign | (e + 15) << 10 | ((a << (10 - e)) & 0x3ff));
}
static double half_value(uint16_t h) {
  int exp = h >> 10 & 0x1f, man = h & 0x3ff;
  double v = exp ? ldexp(1024 + man, exp - 25) : ldexp(man, -24);
  if (exp == 0x1f) v = man ? NAN : INFINITY;
  return h & 0x8000 ? -v : v;
}

static void put(void *p, int dt, size_t i, double x) {
  switch (dt) {
  case PDSHM_F32: ((float *)p)[i] = (float)x; break;
  case PDSHM_F64: ((double *)p)[i] = x; break;
  case PDSHM_F16: ((uint16_t *)p)[i] = half_of_int(x); break;
  case PDSHM_BF16: {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16); /* exact: small integers */
    break;
  }
  case PDSHM_I32: ((int32_t *)p)[i] = (int32_t)x; break;
  case PDSHM_I64: ((int64_t *)p)[i] = (int64_t)x; break;
  }
}
static double get(const void *p, int dt, size_t i) {
  switch (dt) {
  case PDSHM_F32: return ((const float *)p)[i];
  case PDSHM_F64: return ((const double *)p)[i];
  case PDSHM_F16: return half_value(((const uint16_t *)p)[i]);
  case PDSHM_BF16: {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  case PDSHM_I32: return ((const int32_t *)p)[i];
  default: return (double)((const int64_t *)p)[i];
  }
}
static double tolerance(int dt, double ref) {
  double rel = dt == PDSHM_F16 ? 1e-3 : dt == PDSHM_BF16 ? 8e-3 : dt == PDSHM_F32 ? 1e-6 : 0;
  return fabs(ref) * rel;
}

enum { K_BARRIER, K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_PRIVATE, K_KINDS };

/* The process's staging variable of K_PRIVATE; each child makes its own
 * (staging_new) before its first collective. */
static pdshm_var *staging;
static int staging_new(pdshm_scope *s) { return pdshm_var_new(s, &staging); }

/* K_PRIVATE: pdshm_group_allreduce_private of a private copy of v's tensor
 * through the staging variable (resized to fit), the copy written back to
 * v's tensor whatever the answer, so that callers check v as after an
 * allreduce. */
static int private_allreduce(pdshm_group *g, pdshm_var *v, int op, int64_t timeout_ns) {
  int dt = pdshm_tensor_dtype(v);
  if (dt < 0) return dt;
  size_t nbytes = pdshm_tensor_nbytes(v), es = pdshm_dtype_size((pdshm_dtype)dt);
  int64_t want = (int64_t)nbytes;
  int rc = pdshm_tensor_nbytes(staging) >= nbytes ? 0
           : pdshm_tensor_resize(staging, PDSHM_U8, 1, &want);
  void *data = malloc(nbytes + 1);
  if (rc || !data) {
    free(data);
    return rc ? rc : PDSHM_ENOMEM;
  }
  memcpy(data, pdshm_tensor_data(v), nbytes);
  rc = pdshm_group_allreduce_private(g, data, (pdshm_dtype)dt, nbytes / es, staging,
                                     (pdshm_reduce_op)op, timeout_ns);
  memcpy(pdshm_tensor_data(v), data, nbytes);
  free(data);
  return rc;
}

/* One collective of kind k (K_BARRIER: a barrier, v and op unused). */
static int collective(int k, pdshm_group *g, pdshm_var *v, int op, int64_t timeout_ns) {
  switch (k) {
  case K_ALLREDUCE: return pdshm_group_allreduce(g, v, op, timeout_ns);
  case K_PRIVATE: return private_allreduce(g, v, op, timeout_ns);
  case K_REDUCE_SCATTER: return pdshm_group_reduce_scatter(g, v, op, timeout_ns);
  case K_ALLGATHER: return pdshm_group_allgather(g, v, timeout_ns);
  default: return pdshm_group_barrier(g, timeout_ns);
  }
}

/* The rank whose share holds element i of n (pdshm_group_share's rule). */
static int owner(size_t i, size_t n, int size) {
  int r = 0;
  while (r + 1 < size && (size_t)((uint64_t)n * (uint64_t)(r + 1) / (uint64_t)size) <= i) r++;
  return r;
}

struct ar_arg {
  struct board *b;
  int rank, size;
  const char *group;
  int mismatch;    /* this rank passes one element more                  */
  int kind;        /* K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_PRIVATE */
};

/* What rank a holds at element i of n before its collective, and what it
 * must hold after: an allgather's members start with their own share and
 * -1000 elsewhere; the others with val() everywhere. */
static double before(const struct ar_arg *a, size_t i, size_t n, int dt) {
  if (a->kind == K_ALLGATHER && owner(i, n, a->size) != a->rank) return -1000;
  return val(a->rank, i, dt);
}
static double after(const struct ar_arg *a, int op, size_t i, size_t n, int dt) {
  if (a->kind == K_ALLGATHER) return val(owner(i, n, a->size), i, dt);
  if (a->kind == K_REDUCE_SCATTER && owner(i, n, a->size) != a->rank) return val(a->rank, i, dt);
  return reference(op, a->size, i, dt);
}

/* A tensor in a scope of its own, after a pad so buffers land anywhere. */
static int kid_allreduce(void *argp) {
  struct ar_arg *a = argp;
  pdshm_seg *s;
  pdshm_scope *r, *mine;
  pdshm_group *g;
  pdshm_var *pad, *v;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &r)) TU_FAIL_RETURN(&a->b->rep, "attach");
  if (pdshm_scope_new(r, NULL, &mine) || pdshm_var_new(mine, &pad) || pdshm_var_new(mine, &v) ||
      staging_new(mine))
    TU_FAIL_RETURN(&a->b->rep, "vars");
  int64_t padn = 1 + a->rank * 333;
  pdshm_tensor_resize(pad, PDSHM_U8, 1, &padn);
  if (pdshm_group_join(s, a->group, (unsigned)a->size, a->rank, &g))
    TU_FAIL_RETURN(&a->b->rep, "join");
  uint64_t first, end;
  if (pdshm_group_share(g, 10, &first, &end) || first != (uint64_t)(10 * a->rank / a->size) ||
      end != (uint64_t)(10 * (a->rank + 1) / a->size))
    TU_FAIL_RETURN(&a->b->rep, "rank %d's share of 10 is [%llu, %llu)", a->rank,
                   (unsigned long long)first, (unsigned long long)end);
  int last_op = a->kind == K_ALLGATHER ? PDSHM_SUM : PDSHM_MIN; /* an allgather has no op */
  for (int d = 0; d < NDT; d++)
    for (int c = 0; c < NCOUNT; c++)
      for (int op = PDSHM_SUM; op <= last_op; op++) {
        int dt = dtypes[d];
        int64_t n = (int64_t)counts[c] + (a->mismatch && c == 1);
        if (pdshm_tensor_resize(v, dt, 1, &n)) TU_FAIL_RETURN(&a->b->rep, "resize");
        void *p = pdshm_tensor_data(v);
        for (int64_t i = 0; i < n; i++)
          put(p, dt, (size_t)i, before(a, (size_t)i, (size_t)n, dt));
        int rc = collective(a->kind, g, v, op, 30 * SEC);
        if (c == 1 && a->mismatch >= 0) { /* one rank passed an element more */
          if (rc != PDSHM_EINVAL)
            TU_FAIL_RETURN(&a->b->rep, "mismatch: rank %d got %s", a->rank, pdshm_err_name(rc));
          if (!*pdshm_last_error()) /* the collective's unpin keeps the detail */
            TU_FAIL_RETURN(&a->b->rep, "mismatch: rank %d's EINVAL has no detail", a->rank);
          for (int64_t i = 0; i < n; i++)
            if (get(p, dt, (size_t)i) != before(a, (size_t)i, (size_t)n, dt))
              TU_FAIL_RETURN(&a->b->rep, "a refused collective changed element %lld", (long long)i);
          continue;
        }
        if (rc)
          TU_FAIL_RETURN(&a->b->rep, "rank %d kind %d dt %d n %lld op %d: %s", a->rank, a->kind, dt,
                         (long long)n, op, pdshm_err_name(rc));
        for (int64_t i = 0; i < n; i++) {
          double got = get(p, dt, (size_t)i), ref = after(a, op, (size_t)i, (size_t)n, dt);
          if (fabs(got - ref) > tolerance(dt, ref))
            TU_FAIL_RETURN(&a->b->rep, "rank %d kind %d dt %d n %lld op %d: [%lld] = %g, want %g",
                           a->rank, a->kind, dt, (long long)n, op, (long long)i, got, ref);
        }
      }
  pdshm_group_leave(g);
  pdshm_scope_release(mine);
  pdshm_scope_release(r);
  pdshm_detach(s);
  return 0;
}

static void collective_among(int kind, int size, const char *group, int mismatch_rank) {
  struct board *b = tu_shared(sizeof *b);
  struct ar_arg a[8];
  pid_t pid[8];
  for (int r = 0; r < size; r++) {
    a[r] = (struct ar_arg){.b = b, .rank = r, .size = size, .group = group, .kind = kind,
                           .mismatch = mismatch_rank < 0 ? -1 : r == mismatch_rank};
    pid[r] = tu_spawn(kid_allreduce, &a[r]);
  }
  for (int r = 0; r < size; r++) wait_ok(pid[r], b);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}

START_TEST(allreduce_every_dtype_and_op_three_members) {
  collective_among(K_ALLREDUCE, 3, "ar3", -1);
}
END_TEST
START_TEST(allreduce_one_member) { collective_among(K_ALLREDUCE, 1, "ar1", -1); }
END_TEST
START_TEST(allreduce_mismatch_is_einval_everywhere) {
  collective_among(K_ALLREDUCE, 3, "mis", 2);
}
END_TEST
/* 5 members: counts 1 and 7 leave some shares empty or of one element. */
START_TEST(reduce_scatter_every_dtype_and_op) {
  collective_among(K_REDUCE_SCATTER, 3, "rs3", -1);
  collective_among(K_REDUCE_SCATTER, 5, "rs5", -1);
  collective_among(K_REDUCE_SCATTER, 1, "rs1", -1);
}
END_TEST
START_TEST(allgather_every_dtype) {
  collective_among(K_ALLGATHER, 3, "ag3", -1);
  collective_among(K_ALLGATHER, 5, "ag5", -1);
  collective_among(K_ALLGATHER, 1, "ag1", -1);
}
END_TEST
/* 5 members: counts 1 and 7 leave some shares empty or of one element. */
START_TEST(private_allreduce_every_dtype_and_op) {
  collective_among(K_PRIVATE, 3, "pa3", -1);
  collective_among(K_PRIVATE, 5, "pa5", -1);
  collective_among(K_PRIVATE, 1, "pa1", -1);
  collective_among(K_PRIVATE, 3, "pamis", 1);
}
END_TEST
START_TEST(reduce_scatter_and_allgather_mismatch_is_einval_everywhere) {
  collective_among(K_REDUCE_SCATTER, 3, "rsmis", 0);
  collective_among(K_ALLGATHER, 3, "agmis", 1);
}
END_TEST

/* Rank `rank` of "mix" (3), over every pair of different kinds: rank 2
 * calls one, the others the other, on 1001 floats holding rank + 1; a
 * barrier answers 0, every collective EINVAL, and no tensor changed. */
struct mix_arg {
  struct board *b;
  int rank;
};
static int kid_mixed(void *argp) {
  struct mix_arg *a = argp;
  pdshm_seg *s;
  pdshm_scope *r, *mine;
  pdshm_group *g;
  pdshm_var *v;
  int64_t n = 1001;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &r) || pdshm_scope_new(r, NULL, &mine) ||
      pdshm_var_new(mine, &v) || pdshm_tensor_resize(v, PDSHM_F32, 1, &n) || staging_new(mine))
    TU_FAIL_RETURN(&a->b->rep, "setup");
  if (pdshm_group_join(s, "mix", 3, a->rank, &g)) TU_FAIL_RETURN(&a->b->rep, "join");
  float *p = pdshm_tensor_data(v);
  for (int k0 = 0; k0 < K_KINDS; k0++)
    for (int k2 = 0; k2 < K_KINDS; k2++) {
      if (k0 == k2) continue;
      int kind = a->rank == 2 ? k2 : k0;
      for (int i = 0; i < n; i++) p[i] = (float)(a->rank + 1);
      int rc = collective(kind, g, v, PDSHM_SUM, 20 * SEC);
      if (rc != (kind == K_BARRIER ? 0 : PDSHM_EINVAL))
        TU_FAIL_RETURN(&a->b->rep, "rank %d, kind %d among %d and %d: %s", a->rank, kind, k0, k2,
                       pdshm_err_name(rc));
      for (int i = 0; i < n; i++)
        if (p[i] != (float)(a->rank + 1))
          TU_FAIL_RETURN(&a->b->rep, "rank %d, kinds %d and %d: [%d] = %g", a->rank, k0, k2, i,
                         p[i]);
    }
  /* and the group goes on: a reduce_scatter then an allgather make an allreduce */
  for (int i = 0; i < n; i++) p[i] = (float)(a->rank + 1);
  if (pdshm_group_reduce_scatter(g, v, PDSHM_SUM, 20 * SEC) ||
      pdshm_group_allgather(g, v, 20 * SEC))
    TU_FAIL_RETURN(&a->b->rep, "rank %d: the collectives after the mix failed", a->rank);
  for (int i = 0; i < n; i++)
    if (p[i] != 6) TU_FAIL_RETURN(&a->b->rep, "rank %d after the mix: [%d] = %g", a->rank, i, p[i]);
  pdshm_group_leave(g);
  pdshm_scope_release(mine);
  pdshm_scope_release(r);
  pdshm_detach(s);
  return 0;
}

START_TEST(mixed_kinds_are_einval_everywhere_and_write_nothing) {
  struct board *b = tu_shared(sizeof *b);
  struct mix_arg a[3];
  pid_t pid[3];
  for (int r = 0; r < 3; r++) {
    a[r] = (struct mix_arg){.b = b, .rank = r};
    pid[r] = tu_spawn(kid_mixed, &a[r]);
  }
  for (int r = 0; r < 3; r++) wait_ok(pid[r], b);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

START_TEST(share_errors_and_bounds) {
  pdshm_group *g;
  uint64_t first = 7, end = 7;
  ck_assert_int_eq(pdshm_group_share(NULL, 10, &first, &end), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_join(seg, "sh", 4, 3, &g), 0);
  ck_assert_int_eq(pdshm_group_share(g, 10, NULL, &end), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_share(g, 10, &first, NULL), PDSHM_EINVAL);
  ck_assert_uint_eq(first, 7);
  ck_assert_uint_eq(end, 7);
  ck_assert_int_eq(pdshm_group_share(g, 10, &first, &end), 0);
  ck_assert_uint_eq(first, 7); /* floor(10 * 3 / 4) */
  ck_assert_uint_eq(end, 10);
  ck_assert_int_eq(pdshm_group_share(g, 2, &first, &end), 0);
  ck_assert_uint_eq(first, 1);
  ck_assert_uint_eq(end, 2);
  ck_assert_int_eq(pdshm_group_share(g, UINT64_MAX, &first, &end), 0); /* no overflow */
  ck_assert_uint_eq(end, UINT64_MAX);
  ck_assert_uint_eq(first, UINT64_MAX / 4 * 3 + 2);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
}
END_TEST

/* The conversions the f16 and bf16 loops use where F16C is missing (and
 * around the F16C loops' f32 arithmetic): every half, and every midpoint
 * between two neighbours, to nearest, ties to even. */
START_TEST(half_conversions_round_to_nearest_even) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = pdshm__half_load((uint16_t)h);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
      ck_assert(f != f);
      ck_assert_uint_eq(pdshm__half_store(f) & 0x7e00, 0x7e00);
      continue;
    }
    ck_assert_msg(f == (float)half_value((uint16_t)h), "half %04x read as %g", h, f);
    ck_assert_uint_eq(pdshm__half_store(f), h);
    if ((h & 0x7fff) >= 0x7c00) continue;
    /* the midpoint to the next half away from zero (past 65504: 65536) */
    double next = (h & 0x7fff) == 0x7bff ? 65536.0 : half_value((uint16_t)(h + 1));
    if (h & 0x8000) next = (h & 0x7fff) == 0x7bff ? -65536.0 : half_value((uint16_t)(h + 1));
    float mid = (float)((f + next) / 2);
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    ck_assert_msg(pdshm__half_store(mid) == even, "midpoint after %04x: %04x", h,
                  pdshm__half_store(mid));
    ck_assert_uint_eq(pdshm__half_store(nextafterf(mid, (float)next)), (uint16_t)(h + 1));
    ck_assert_uint_eq(pdshm__half_store(nextafterf(mid, f)), h);
  }
  ck_assert_uint_eq(pdshm__bf16_store(1.0f), 0x3f80);
  ck_assert_uint_eq(pdshm__bf16_store(nextafterf(1.0f + 0x1p-8f, 2)), 0x3f81);
  ck_assert_uint_eq(pdshm__bf16_store(1.0f + 0x1p-8f), 0x3f80);          /* tie: even */
  ck_assert_uint_eq(pdshm__bf16_store(1.0f + 3 * 0x1p-8f), 0x3f82);      /* tie: even */
  ck_assert_float_eq(pdshm__bf16_load(0xc040), -3.0f);
}
END_TEST

START_TEST(allreduce_errors) {
  pdshm_group *g;
  pdshm_var *v, *t;
  ck_assert_int_eq(pdshm_group_join(seg, "are", 1, -1, &g), 0);
  ck_assert_int_eq(pdshm_var_create(root, "notensor", &v), 0);
  ck_assert_int_eq(pdshm_group_allreduce(g, v, PDSHM_SUM, 0), PDSHM_ETYPE);
  ck_assert_int_eq(pdshm_var_create(root, "t", &t), 0);
  int64_t n = 5;
  ck_assert_int_eq(pdshm_tensor_resize(t, PDSHM_U8, 1, &n), 0);
  ck_assert_int_eq(pdshm_group_allreduce(g, t, PDSHM_SUM, SEC), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_tensor_resize(t, PDSHM_F32, 1, &n), 0);
  ck_assert_int_eq(pdshm_group_allreduce(g, t, (pdshm_reduce_op)9, SEC), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_allreduce(g, NULL, PDSHM_SUM, SEC), PDSHM_EINVAL);
  float *p = pdshm_tensor_data(t);
  for (int i = 0; i < 5; i++) p[i] = (float)i;
  ck_assert_int_eq(pdshm_group_allreduce(g, t, PDSHM_MEAN, SEC), 0);
  for (int i = 0; i < 5; i++) ck_assert_float_eq(p[i], (float)i);
  ck_assert_int_eq(pdshm_group_reduce_scatter(g, v, PDSHM_SUM, SEC), PDSHM_ETYPE);
  ck_assert_int_eq(pdshm_group_reduce_scatter(g, t, (pdshm_reduce_op)9, SEC), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_reduce_scatter(NULL, t, PDSHM_SUM, SEC), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_allgather(g, v, SEC), PDSHM_ETYPE);
  ck_assert_int_eq(pdshm_group_allgather(g, NULL, SEC), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_allgather(NULL, t, SEC), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_reduce_scatter(g, t, PDSHM_MEAN, SEC), 0);
  ck_assert_int_eq(pdshm_group_allgather(g, t, SEC), 0);
  for (int i = 0; i < 5; i++) ck_assert_float_eq(p[i], (float)i);
  /* reduce_scatter reduces, allgather copies any dtype: u8 only gathers */
  ck_assert_int_eq(pdshm_tensor_resize(t, PDSHM_U8, 1, &n), 0);
  ck_assert_int_eq(pdshm_group_reduce_scatter(g, t, PDSHM_SUM, SEC), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_allgather(g, t, SEC), 0);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
}
END_TEST

START_TEST(private_allreduce_errors) {
  pdshm_group *g;
  pdshm_var *notensor, *small, *st;
  float data[5] = {0, 1, 2, 3, 4};
  int64_t n = 5, four = 4 * 4;
  ck_assert_int_eq(pdshm_group_join(seg, "pae", 1, -1, &g), 0);
  ck_assert_int_eq(pdshm_var_create(root, "notensor", &notensor), 0);
  ck_assert_int_eq(pdshm_var_create(root, "small", &small), 0);
  ck_assert_int_eq(pdshm_tensor_resize(small, PDSHM_U8, 1, &four), 0);
  ck_assert_int_eq(pdshm_var_create(root, "st", &st), 0);
  ck_assert_int_eq(pdshm_tensor_resize(st, PDSHM_F32, 1, &n), 0);
  ck_assert_int_eq(pdshm_group_allreduce_private(NULL, data, PDSHM_F32, 5, st, PDSHM_SUM, SEC),
                   PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_allreduce_private(g, NULL, PDSHM_F32, 5, st, PDSHM_SUM, SEC),
                   PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_allreduce_private(g, data, PDSHM_U8, 5, st, PDSHM_SUM, SEC),
                   PDSHM_EINVAL);
  ck_assert_int_eq(
      pdshm_group_allreduce_private(g, data, PDSHM_F32, 5, st, (pdshm_reduce_op)9, SEC),
      PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_group_allreduce_private(g, data, PDSHM_F32, 5, NULL, PDSHM_SUM, SEC),
                   PDSHM_EINVAL);
  ck_assert_int_eq(
      pdshm_group_allreduce_private(g, data, PDSHM_F32, 5, notensor, PDSHM_SUM, SEC),
      PDSHM_ETYPE);
  ck_assert_int_eq(pdshm_group_allreduce_private(g, data, PDSHM_F32, 5, small, PDSHM_SUM, SEC),
                   PDSHM_EINVAL);
  ck_assert_str_eq(pdshm_last_error(), "the staging tensor holds 16 bytes, not the 20 of the data");
  ck_assert_int_eq(
      pdshm_group_allreduce_private(g, data, PDSHM_F32, UINT64_MAX / 2, st, PDSHM_SUM, SEC),
      PDSHM_EINVAL);
  for (int i = 0; i < 5; i++) ck_assert_float_eq(data[i], (float)i);
  /* the group is not stuck in a round: a good call works, and so does 0 elements */
  ck_assert_int_eq(pdshm_group_allreduce_private(g, data, PDSHM_F32, 5, st, PDSHM_MEAN, SEC), 0);
  ck_assert_int_eq(pdshm_group_allreduce_private(g, NULL, PDSHM_F32, 0, st, PDSHM_SUM, SEC), 0);
  for (int i = 0; i < 5; i++) ck_assert_float_eq(data[i], (float)i);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

/* A member of "art" (2): waits for the go, then one allreduce of 1000 floats
 * (its rank + 1 each), or a barrier when b->go is 2. */
static int kid_one_allreduce(void *argp) {
  struct board *b = argp;
  pdshm_seg *s;
  pdshm_scope *r, *mine;
  pdshm_group *g;
  pdshm_var *v;
  int64_t n = 1000;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &r) || pdshm_scope_new(r, NULL, &mine) ||
      pdshm_var_new(mine, &v) || pdshm_tensor_resize(v, PDSHM_F32, 1, &n))
    TU_FAIL_RETURN(&b->rep, "setup");
  float *p = pdshm_tensor_data(v);
  for (int i = 0; i < n; i++)
    p[i] = 2;
  if (pdshm_group_join(s, "art", 2, 1, &g)) TU_FAIL_RETURN(&b->rep, "join");
  int go = atomic_load(&b->go), rc;
  if (go == 3) { /* a variable without a tensor: ETYPE here, EINVAL there */
    pdshm_var *empty;
    if (pdshm_var_new(mine, &empty)) TU_FAIL_RETURN(&b->rep, "var");
    rc = pdshm_group_allreduce(g, empty, PDSHM_SUM, 20 * SEC);
    if (rc != PDSHM_ETYPE) TU_FAIL_RETURN(&b->rep, "kid without a tensor: %s", pdshm_err_name(rc));
    rc = 0;
  } else {
    rc = go == 2 ? pdshm_group_barrier(g, 20 * SEC)
                 : pdshm_group_allreduce(g, v, PDSHM_SUM, 20 * SEC);
  }
  if (rc) TU_FAIL_RETURN(&b->rep, "kid: %s", pdshm_err_name(rc));
  if (go < 2)
    for (int i = 0; i < n; i++)
      if (p[i] != 3) TU_FAIL_RETURN(&b->rep, "kid: [%d] = %g", i, p[i]);
  pdshm_group_leave(g); /* a clean leave: the next kid's takeover is no death */
  pdshm_detach(s);
  return 0;
}

START_TEST(allreduce_times_out_unchanged_and_resumes) {
  pdshm_group *g;
  pdshm_var *v;
  int64_t n = 1000;
  ck_assert_int_eq(pdshm_var_create(root, "t", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &n), 0);
  float *p = pdshm_tensor_data(v);
  for (int i = 0; i < n; i++) p[i] = 1;
  ck_assert_int_eq(pdshm_group_join(seg, "art", 2, 0, &g), 0);
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm_group_allreduce(g, v, PDSHM_SUM, 100000000), PDSHM_ETIMEDOUT);
  ck_assert_uint_ge(tu_now_ns() - t0, 100000000);
  for (int i = 0; i < n; i++) ck_assert_float_eq(p[i], 1);
  struct board *b = tu_shared(sizeof *b);
  pid_t pid = tu_spawn(kid_one_allreduce, b);
  ck_assert_int_eq(pdshm_group_allreduce(g, v, PDSHM_SUM, 20 * SEC), 0);
  for (int i = 0; i < n; i++) ck_assert_float_eq(p[i], 3);
  wait_ok(pid, b);
  /* a barrier where the other member allreduces: EINVAL there, nothing written */
  atomic_store(&b->go, 2);
  for (int i = 0; i < n; i++) p[i] = 1;
  pid = tu_spawn(kid_one_allreduce, b);
  ck_assert_int_eq(pdshm_group_allreduce(g, v, PDSHM_SUM, 20 * SEC), PDSHM_EINVAL);
  for (int i = 0; i < n; i++) ck_assert_float_eq(p[i], 1);
  wait_ok(pid, b);
  /* a member whose variable holds no tensor: it takes part, nobody waits */
  atomic_store(&b->go, 3);
  pid = tu_spawn(kid_one_allreduce, b);
  ck_assert_int_eq(pdshm_group_allreduce(g, v, PDSHM_SUM, 20 * SEC), PDSHM_EINVAL);
  for (int i = 0; i < n; i++) ck_assert_float_eq(p[i], 1);
  wait_ok(pid, b);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

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
  fprintf(stderr, "test_group: survivors of a SIGKILL in %s told of it within %.1f ms\n",
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
  Suite *s = suite_create("group");
  TCase *tc = tu_tcase(s, "wait", 30, setup, teardown);
  tc = tu_tcase(s, "join", 30, setup, teardown);
  tcase_add_test(tc, join_errors);
  tcase_add_test(tc, memory_back_after_last_leave);
  tcase_add_test(tc, memory_back_after_last_member_reaped);
  tcase_add_test(tc, detach_leaves_every_group);
  tcase_add_test(tc, damaged_registry_is_ebadseg);
  tc = tu_tcase(s, "barrier", 60, setup, teardown);
  tcase_add_test(tc, barriers_among_four_processes);
  tcase_add_test(tc, barrier_times_out_and_resumes);
  tcase_add_test(tc, stopped_member_is_not_dead);
  tc = tu_tcase(s, "allreduce", 60, setup, teardown);
  tcase_add_test(tc, allreduce_every_dtype_and_op_three_members);
  tcase_add_test(tc, allreduce_one_member);
  tcase_add_test(tc, allreduce_mismatch_is_einval_everywhere);
  tcase_add_test(tc, allreduce_errors);
  tcase_add_test(tc, half_conversions_round_to_nearest_even);
  tcase_add_test(tc, allreduce_times_out_unchanged_and_resumes);
  tcase_add_test(tc, reduce_scatter_every_dtype_and_op);
  tcase_add_test(tc, allgather_every_dtype);
  tcase_add_test(tc, private_allreduce_every_dtype_and_op);
  tcase_add_test(tc, private_allreduce_errors);
  tcase_add_test(tc, reduce_scatter_and_allgather_mismatch_is_einval_everywhere);
  tcase_add_test(tc, mixed_kinds_are_einval_everywhere_and_write_nothing);
  tcase_add_test(tc, share_errors_and_bounds);
  tc = tu_tcase(s, "death", 60, setup, teardown);
  tcase_add_loop_test(tc, member_killed_in_barriers, 0, 3);
  tcase_add_loop_test(tc, member_killed_in_allreduces, 0, 3);
  tcase_add_loop_test(tc, member_killed_in_reduce_scatters, 0, 3);
  tcase_add_loop_test(tc, member_killed_in_allgathers, 0, 3);
  tcase_add_loop_test(tc, member_killed_in_private_allreduces, 0, 3);
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
