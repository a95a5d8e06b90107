/*
 * reduce.c - the element loops of pdshm_group_allreduce.
 *
 * Each dtype is reduced in an accumulator type: f32 and f64 in themselves,
 * f16 and bf16 in f32, i32 and i64 in themselves with wrap-around sums
 * (added as unsigned), as MPI's sums wrap.  A chunk of CHUNK elements is
 * accumulated in a buffer on the stack, one source at a time, so that every
 * loop is a plain stride-1 loop the compiler vectorises; MEAN divides once,
 * at the end: an integer MEAN is the wrapped sum divided, truncating towards
 * zero, so that it does not depend on how many members (or, through
 * libpdshm-mpi, hosts) took part in the sum (DESIGN section 4).
 */
#define PDSHM_LAYER 6 /* groups/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "groups/groups.h"
#include "groups/half.h"

#define CHUNK 2048

#pragma GCC optimize("O3", "tree-vectorize")

static inline float bf16_load(uint16_t h) { return pdshm__bf16_load(h); }
static inline uint16_t bf16_store(float f) { return pdshm__bf16_store(f); }
static inline float f16_load(uint16_t h) { return pdshm__half_load(h); }
static inline uint16_t f16_store(float f) { return pdshm__half_store(f); }
static inline float f32_id(float x) { return x; }
static inline double f64_id(double x) { return x; }
static inline int32_t i32_id(int32_t x) { return x; }
static inline int64_t i64_id(int64_t x) { return x; }

#define ADD_FLOAT(a, b) ((a) + (b))
#define ADD_WRAP32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define ADD_WRAP64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))

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
REDUCE_FN(reduce_f16_soft, uint16_t, float, f16_load, f16_store, ADD_FLOAT)
REDUCE_FN(reduce_bf16, uint16_t, float, bf16_load, bf16_store, ADD_FLOAT)
REDUCE_FN(reduce_i32, int32_t, int32_t, i32_id, i32_id, ADD_WRAP32)
REDUCE_FN(reduce_i64, int64_t, int64_t, i64_id, i64_id, ADD_WRAP64)

/* f16 with the F16C instructions, 8 conversions at a time: 30 times faster
 * than the conversions above.  Each
 * source chunk is widened into tmp, combined into acc with a plain f32
 * loop, and the result narrowed with round-to-nearest-even. */
#if defined(__x86_64__)
#include <cpuid.h>
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

/* F16C and AVX, with the AVX state enabled by the kernel; asked once. */
static bool f16c_usable(void) {
  static _Atomic int known; /* 0: not asked, 1: no, 2: yes */
  int k = atomic_load_explicit(&known, memory_order_relaxed);
  if (k) return k == 2;
  unsigned a, b, c, d, lo = 0, hi = 0;
  bool yes = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && (c & bit_AVX) &&
             (c & bit_OSXSAVE);
  if (yes) {
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    yes = (lo & 6) == 6; /* XMM and YMM state */
  }
  atomic_store_explicit(&known, yes ? 2 : 1, memory_order_relaxed);
  return yes;
}

static void reduce_f16(int op, void *dst, void *const *src, unsigned ns, size_t n) {
  if (f16c_usable()) reduce_f16_f16c(op, dst, src, ns, n);
  else reduce_f16_soft(op, dst, src, ns, n);
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
