/* test_group_collectives.c - trainer groups' collectives (DESIGN §4):
 * allreduce of every dtype and op against a reference computed here, odd
 * sizes, buffers anywhere; a mismatch is EINVAL at every member;
 * reduce_scatter and allgather the same way (each share against the
 * reference, the rest untouched; a round mixing kinds is EINVAL at every
 * member and writes nothing); pdshm_group_allreduce_private the same way;
 * their errors, pdshm_group_share's bounds, the half conversions; an
 * allreduce's timeout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "groups/half.h"
#include "locks/locks.h"
#include "grouputil.h"

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
/* ---- the pin a membership keeps (group_pin.c) -------------------------------------- */

static uint64_t orphans(void) {
  pdshm_alloc_info a;
  ck_assert_int_eq(pdshm_inspect_alloc(seg, &a), 0);
  return a.orphan_blocks;
}

/* A sum over a group of one of n float32 holding 1 + i % 5: unchanged. */
static void sum_alone(pdshm_group *g, pdshm_var *v, int64_t n) {
  float *p = pdshm_tensor_data(v);
  for (int64_t i = 0; i < n; i++) p[i] = (float)(1 + i % 5);
  ck_assert_int_eq(pdshm_group_allreduce(g, v, PDSHM_SUM, 10 * SEC), 0);
  for (int64_t i = 0; i < n; i++) ck_assert_float_eq(p[i], (float)(1 + i % 5));
}

/* Collectives on one tensor call after call keep one pin and take no heap
 * lock for it; a resize between them gives the tensor a new buffer, which
 * the next collective pins, letting the old one (an orphan) go; the leave
 * lets the last go. */
START_TEST(a_membership_keeps_its_tensors_pin) {
  const struct pdshm_lock *heap = pdshm__lockent(seg, PDSHM_LOCK_HEAP);
  int64_t n = 1000, m = 3000;
  pdshm_var *v, *w;
  pdshm_group *g;
  ck_assert_int_eq(pdshm_var_create(root, "kept", &v), 0);
  ck_assert_int_eq(pdshm_var_create(root, "other", &w), 0);
  ck_assert_int_eq(pdshm_tensor_resize(w, PDSHM_F32, 1, &n), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &n), 0);
  uint64_t used = tu_used(seg), pins = tu_my_pins(seg);
  ck_assert_int_eq(pdshm_group_join(seg, "kept", 1, 0, &g), 0);
  sum_alone(g, v, n);
  ck_assert_uint_eq(tu_my_pins(seg), pins + 1);
  uint64_t taken = heap->acquisitions;
  for (int i = 0; i < 10; i++) sum_alone(g, v, n);
  ck_assert_uint_eq(heap->acquisitions, taken);
  ck_assert_uint_eq(tu_my_pins(seg), pins + 1);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &m), 0); /* a new buffer */
  ck_assert_uint_eq(orphans(), 1);
  sum_alone(g, v, m);
  ck_assert_uint_eq(orphans(), 0);
  ck_assert_uint_eq(tu_my_pins(seg), pins + 1);
  sum_alone(g, w, n); /* another tensor: its pin instead */
  ck_assert_uint_eq(tu_my_pins(seg), pins + 1);
  ck_assert_int_eq(pdshm_var_erase(root, "other"), 0);
  ck_assert_uint_eq(orphans(), 1);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_uint_eq(orphans(), 0);
  ck_assert_uint_eq(tu_my_pins(seg), pins);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &n), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_var_create(root, "other", &w), 0);
  ck_assert_int_eq(pdshm_tensor_resize(w, PDSHM_F32, 1, &n), 0);
  ck_assert_uint_eq(tu_used(seg), used);
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
  pdshm_scope *mine;
  pdshm_group *g;
  pdshm_var *v;
  int64_t n = 1001;
  if (kid_f32_var(n, &s, &mine, &v) || staging_new(mine)) TU_FAIL_RETURN(&a->b->rep, "setup");
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
  pdshm_scope *mine;
  pdshm_group *g;
  pdshm_var *v;
  int64_t n = 1000;
  if (kid_f32_var(n, &s, &mine, &v)) TU_FAIL_RETURN(&b->rep, "setup");
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

int main(void) {
  Suite *s = suite_create("group_collectives");
  TCase *tc = tu_tcase(s, "allreduce", 60, setup, teardown);
  tcase_add_test(tc, allreduce_every_dtype_and_op_three_members);
  tcase_add_test(tc, allreduce_one_member);
  tcase_add_test(tc, allreduce_mismatch_is_einval_everywhere);
  tcase_add_test(tc, allreduce_errors);
  tcase_add_test(tc, half_conversions_round_to_nearest_even);
  tcase_add_test(tc, allreduce_times_out_unchanged_and_resumes);
  tcase_add_test(tc, reduce_scatter_every_dtype_and_op);
  tcase_add_test(tc, allgather_every_dtype);
  tcase_add_test(tc, private_allreduce_every_dtype_and_op);
  tcase_add_test(tc, a_membership_keeps_its_tensors_pin);
  tcase_add_test(tc, private_allreduce_errors);
  tcase_add_test(tc, reduce_scatter_and_allgather_mismatch_is_einval_everywhere);
  tcase_add_test(tc, mixed_kinds_are_einval_everywhere_and_write_nothing);
  tcase_add_test(tc, share_errors_and_bounds);
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
