/*
 * reduce.c - the element loops of pdshm_group_allreduce.
 *
 * Each dtype is reduced in an accumulator type: f32 and f64 in themselves,
 * f16 and bf16 in f32, i32 in i64 (exact for up to 2^32 members), i64 in
 * itself with wrap-around sums (added as unsigned).  A chunk of CHUNK
 * elements is accumulated in a buffer on the stack, one source at a time,
 * so that every loop is a plain stride-1 loop the compiler vectorises; MEAN
 * divides once, at the end (integers truncate towards zero).
 */
#include "config.h"

#include <string.h>

#include "group.h"

#define CHUNK 2048

#pragma GCC optimize("O3", "tree-vectorize")

static inline float bf16_load(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t bf16_store(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40); /* quiet NaN */
  u += 0x7fffu + (u >> 16 & 1); /* round to nearest even */
  return (uint16_t)(u >> 16);
}
static inline float f16_load(_Float16 h) { return (float)h; }
static inline _Float16 f16_store(float f) { return (_Float16)f; }
static inline float f32_id(float x) { return x; }
static inline double f64_id(double x) { return x; }
static inline int64_t i32_load(int32_t x) { return x; }
static inline int32_t i32_store(int64_t x) { return (int32_t)(uint32_t)(uint64_t)x; }
static inline int64_t i64_id(int64_t x) { return x; }

#define ADD_FLOAT(a, b) ((a) + (b))
#define ADD_WRAP(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))

/* One dtype: T the element, A the accumulator, LOAD/STORE convert, ADD sums. */
#define REDUCE_FN(name, T, A, LOAD, STORE, ADD)                                      \
  static void name(int op, void *dstv, void *const *srcv, unsigned ns, size_t n) {  \
    A acc[CHUNK];                                                                    \
    T *dst = dstv;                                                                   \
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {                                       \
      size_t k = n - i0 < CHUNK ? n - i0 : CHUNK;                                    \
      const T *s0 = (const T *)srcv[0] + i0;                                         \
      for (size_t i = 0; i < k; i++) acc[i] = LOAD(s0[i]);                           \
      for (unsigned r = 1; r < ns; r++) {                                            \
        const T *s = (const T *)srcv[r] + i0;                                        \
        if (op == PDSHM_SUM || op == PDSHM_MEAN)                                     \
          for (size_t i = 0; i < k; i++) acc[i] = ADD(acc[i], LOAD(s[i]));           \
        else if (op == PDSHM_MAX)                                                    \
          for (size_t i = 0; i < k; i++) {                                           \
            A x = LOAD(s[i]);                                                        \
            acc[i] = x > acc[i] ? x : acc[i];                                        \
          }                                                                          \
        else                                                                         \
          for (size_t i = 0; i < k; i++) {                                           \
            A x = LOAD(s[i]);                                                        \
            acc[i] = x < acc[i] ? x : acc[i];                                        \
          }                                                                          \
      }                                                                              \
      if (op == PDSHM_MEAN)                                                          \
        for (size_t i = 0; i < k; i++) acc[i] = acc[i] / (A)ns;                      \
      for (size_t i = 0; i < k; i++) dst[i0 + i] = STORE(acc[i]);                    \
    }                                                                                \
  }

REDUCE_FN(reduce_f32, float, float, f32_id, f32_id, ADD_FLOAT)
REDUCE_FN(reduce_f64, double, double, f64_id, f64_id, ADD_FLOAT)
REDUCE_FN(reduce_f16_soft, _Float16, float, f16_load, f16_store, ADD_FLOAT)
REDUCE_FN(reduce_bf16, uint16_t, float, bf16_load, bf16_store, ADD_FLOAT)
REDUCE_FN(reduce_i32, int32_t, int64_t, i32_load, i32_store, ADD_WRAP)
REDUCE_FN(reduce_i64, int64_t, int64_t, i64_id, i64_id, ADD_WRAP)

/* f16 with the F16C instructions, 8 conversions at a time: _Float16's own
 * conversions are calls into libgcc without them, 15 times slower.  Each
 * source chunk is widened into tmp, combined into acc with a plain f32
 * loop, and the result narrowed with round-to-nearest-even. */
#if defined(__x86_64__)
#include <immintrin.h>
#define F16C __attribute__((target("f16c,avx")))

F16C static void f16_widen(float *d, const uint16_t *s, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
  for (; i < n; i++) d[i] = _cvtsh_ss(s[i]);
}

F16C static void f16_narrow(uint16_t *d, const float *s, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) d[i] = _cvtss_sh(s[i], _MM_FROUND_TO_NEAREST_INT);
}

static void f32_combine(int op, float *acc, const float *x, size_t k) {
  if (op == PDSHM_SUM || op == PDSHM_MEAN)
    for (size_t i = 0; i < k; i++) acc[i] += x[i];
  else if (op == PDSHM_MAX)
    for (size_t i = 0; i < k; i++) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
  else
    for (size_t i = 0; i < k; i++) acc[i] = x[i] < acc[i] ? x[i] : acc[i];
}

static void reduce_f16_f16c(int op, void *dstv, void *const *srcv, unsigned ns, size_t n) {
  float acc[CHUNK], tmp[CHUNK];
  for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
    size_t k = n - i0 < CHUNK ? n - i0 : CHUNK;
    f16_widen(acc, (const uint16_t *)srcv[0] + i0, k);
    for (unsigned r = 1; r < ns; r++) {
      f16_widen(tmp, (const uint16_t *)srcv[r] + i0, k);
      f32_combine(op, acc, tmp, k);
    }
    if (op == PDSHM_MEAN)
      for (size_t i = 0; i < k; i++) acc[i] = acc[i] / (float)ns;
    f16_narrow((uint16_t *)dstv + i0, acc, k);
  }
}

static void reduce_f16(int op, void *dst, void *const *src, unsigned ns, size_t n) {
  if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"))
    reduce_f16_f16c(op, dst, src, ns, n);
  else
    reduce_f16_soft(op, dst, src, ns, n);
}
#else
#define reduce_f16 reduce_f16_soft
#endif

size_t pdshm__reduce_elem(int dtype) {
  switch (dtype) {
  case PDSHM_F16: case PDSHM_BF16: return 2;
  case PDSHM_F32: case PDSHM_I32: return 4;
  case PDSHM_F64: case PDSHM_I64: return 8;
  default: return 0;
  }
}

void pdshm__reduce(int dtype, int op, void *dst, void *const *src, unsigned nsrc, size_t n) {
  switch (dtype) {
  case PDSHM_F32: reduce_f32(op, dst, src, nsrc, n); break;
  case PDSHM_F64: reduce_f64(op, dst, src, nsrc, n); break;
  case PDSHM_F16: reduce_f16(op, dst, src, nsrc, n); break;
  case PDSHM_BF16: reduce_bf16(op, dst, src, nsrc, n); break;
  case PDSHM_I32: reduce_i32(op, dst, src, nsrc, n); break;
  case PDSHM_I64: reduce_i64(op, dst, src, nsrc, n); break;
  default: break;
  }
}
