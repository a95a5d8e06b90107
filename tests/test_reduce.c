/*
 * test_reduce.c - the element loops of allreduce (lib/groups/reduce.c):
 * pdshm__reduce (AVX2's loops where the CPU has them) and its portable loops
 * give, for f32, f64, i32 and i64 and every op, the bits of an element-by-
 * element fold in rank order, ((s0 op s1) op s2) ..., on 2 to 5 sources of
 * 1, 7, 8, 9, 32, 33 and 1001 elements, at offsets that leave most sources
 * off a vector's alignment, with NaN, infinities, -0.0 and sums that wrap;
 * the result written into one of the sources, as allreduce does.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "groups/groups.h"
#include "testutil.h"

#define MAXN 1001
#define MAXS 5
#define PAD 8 /* elements: room for the offsets */

static const int dtypes[] = {PDSHM_F32, PDSHM_F64, PDSHM_I32, PDSHM_I64};
static const int ops[] = {PDSHM_SUM, PDSHM_MEAN, PDSHM_MAX, PDSHM_MIN};
static const size_t lengths[] = {1, 7, 8, 9, 32, 33, 1001};

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_rand(void) { /* xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Values where the order of a fold shows: magnitudes from 2^-30 to 2^30,
 * and one in 8 a special one. */
static double float_value(void) {
  static const double special[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 1e300};
  uint64_t r = next_rand();
  if (r % 8 == 0) return special[(r >> 8) % 6];
  double m = (double)(r >> 11) / 9007199254740992.0 - 0.5; /* [-0.5, 0.5) */
  return ldexp(m, (int)((r >> 3) % 61) - 30);
}

/* Integers near the ends of the range one time in 4, so that sums wrap. */
static int64_t int_value(void) {
  uint64_t r = next_rand();
  if (r % 4 == 0) return (r & 16) ? INT64_MAX - (int64_t)(r >> 60) : INT64_MIN + (int64_t)(r >> 60);
  return (int64_t)r >> (r % 40);
}

static void fill(int dtype, void *p, size_t n) {
  for (size_t i = 0; i < n; i++) switch (dtype) {
    case PDSHM_F32: ((float *)p)[i] = (float)float_value(); break;
    case PDSHM_F64: ((double *)p)[i] = float_value(); break;
    case PDSHM_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)int_value(); break;
    default: ((int64_t *)p)[i] = int_value(); break;
    }
}

/* The fold of element i of the ns sources, one element at a time. */
#define FOLD(T, ADD)                                                          \
  do {                                                                        \
    T a = ((const T *)src[0])[i];                                             \
    for (unsigned r = 1; r < ns; r++) {                                       \
      T x = ((const T *)src[r])[i];                                           \
      a = op == PDSHM_MAX ? (x > a ? x : a) : op == PDSHM_MIN ? (x < a ? x : a) \
                                                               : ADD;         \
    }                                                                         \
    ((T *)dst)[i] = op == PDSHM_MEAN ? a / (T)ns : a;                         \
  } while (0)

static void fold_by_element(int dtype, int op, void *dst, void *const *src, unsigned ns,
                            size_t n) {
  for (size_t i = 0; i < n; i++) switch (dtype) {
    case PDSHM_F32: FOLD(float, a + x); break;
    case PDSHM_F64: FOLD(double, a + x); break;
    case PDSHM_I32: FOLD(int32_t, (int32_t)((uint32_t)a + (uint32_t)x)); break;
    default: FOLD(int64_t, (int64_t)((uint64_t)a + (uint64_t)x)); break;
    }
}

/* Equal bits, or both NaN (a NaN's payload depends on which operand the
 * instruction names first, which is the compiler's choice). */
static void expect_same(int dtype, const void *want, const void *got, size_t n, const char *what) {
  size_t es = pdshm__reduce_elem(dtype);
  for (size_t i = 0; i < n; i++) {
    const char *w = (const char *)want + i * es, *g = (const char *)got + i * es;
    if (!memcmp(w, g, es)) continue;
    bool nans = dtype == PDSHM_F32 ? isnan(*(const float *)w) && isnan(*(const float *)g)
              : dtype == PDSHM_F64 ? isnan(*(const double *)w) && isnan(*(const double *)g)
                                   : false;
    ck_assert_msg(nans, "%s: dtype %d, %zu elements, element %zu differs", what, dtype, n, i);
  }
}

/* One case: source r at element offset r + 1 of its buffer (no two alike,
 * most off a vector's alignment), the result written into source `into` by
 * pdshm__reduce, then by the portable loops; the other sources unchanged. */
static void one_case(int dtype, int op, unsigned ns, size_t n, unsigned into) {
  size_t es = pdshm__reduce_elem(dtype);
  static char buf[MAXS][(MAXN + PAD) * 8], orig[MAXS][MAXN * 8], want[MAXN * 8];
  void *src[MAXS];
  for (unsigned r = 0; r < ns; r++) {
    fill(dtype, orig[r], n);
    src[r] = orig[r];
  }
  fold_by_element(dtype, op, want, src, ns, n);
  void (*const fns[])(int, int, void *, void *const *, unsigned, size_t) = {
      pdshm__reduce, pdshm__reduce_portable};
  for (int f = 0; f < 2; f++) {
    for (unsigned r = 0; r < ns; r++) {
      src[r] = buf[r] + (r + 1) * es;
      memcpy(src[r], orig[r], n * es);
    }
    fns[f](dtype, op, src[into], src, ns, n);
    expect_same(dtype, want, src[into], n, f ? "portable" : "pdshm__reduce");
    for (unsigned r = 0; r < ns; r++)
      if (r != into) ck_assert(!memcmp(src[r], orig[r], n * es));
  }
}

START_TEST(every_path_folds_in_rank_order) {
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
      for (unsigned ns = 2; ns <= MAXS; ns++)
        for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++)
          one_case(dtypes[d], ops[o], ns, lengths[l], (unsigned)(l + o) % ns);
}
END_TEST

/* The cases the random values may miss, by hand: -0.0 and 0.0 (MAX and MIN
 * keep the first of equals), NaN (kept when first, skipped when later), a
 * sum that wraps; 40 elements: a block of 32 in the vector loops (128
 * bytes of f32), 8 after it one at a time. */
#define NH 40
START_TEST(signed_zeros_nans_and_wraps) {
  float f[2][NH];
  int32_t w[2][NH];
  for (int i = 0; i < NH; i++) {
    f[0][i] = i & 1 ? -0.0f : NAN;
    f[1][i] = i & 1 ? 0.0f : 1.0f;
    w[0][i] = INT32_MAX;
    w[1][i] = i;
  }
  for (int p = 0; p < 2; p++) {
    float a[2][NH];
    memcpy(a, f, sizeof a);
    void *src[2] = {a[0], a[1]};
    (p ? pdshm__reduce_portable : pdshm__reduce)(PDSHM_F32, PDSHM_MAX, a[1], src, 2, NH);
    for (int i = 0; i < NH; i++)
      if (i & 1) ck_assert(a[1][i] == 0 && signbit(a[1][i])); /* -0.0 kept */
      else ck_assert(isnan(a[1][i]));
    memcpy(a, f, sizeof a);
    src[0] = a[1], src[1] = a[0]; /* NaN second: not picked */
    (p ? pdshm__reduce_portable : pdshm__reduce)(PDSHM_F32, PDSHM_MIN, a[1], src, 2, NH);
    for (int i = 0; i < NH; i++)
      if (i & 1) ck_assert(a[1][i] == 0 && !signbit(a[1][i]));
      else ck_assert(a[1][i] == 1.0f);
    int32_t b[2][NH];
    memcpy(b, w, sizeof b);
    void *isrc[2] = {b[0], b[1]};
    (p ? pdshm__reduce_portable : pdshm__reduce)(PDSHM_I32, PDSHM_SUM, b[0], isrc, 2, NH);
    for (int i = 0; i < NH; i++) ck_assert_int_eq(b[0][i], i ? INT32_MIN + i - 1 : INT32_MAX);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("reduce");
  TCase *tc = tu_tcase(s, "loops", 60, NULL, NULL);
  tcase_add_test(tc, every_path_folds_in_rank_order);
  tcase_add_test(tc, signed_zeros_nans_and_wraps);
  printf("pdshm__reduce takes %s loops\n", pdshm__reduce_avx2() ? "AVX2's" : "the portable");
  return tu_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
