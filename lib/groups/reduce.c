/*
 * reduce.c - the element loops of pdshm_group_allreduce.
 *
 * Each dtype is reduced in an accumulator type: f32 and f64 in themselves,
 * f16 and bf16 in f32, i32 and i64 in themselves with wrap-around sums
 * (added as unsigned), as MPI's sums wrap.  Every element is folded in rank
 * order, ((s0 op s1) op s2) ..., on every path, so that each member computes
 * the same bits (DESIGN section 4).  f32, f64, i32 and i64 take one pass:
 * a block of BLOCK_BYTES of every source is folded in registers and stored
 * once, in AVX2 registers where the CPU has them (asked once, at run time);
 * f16 and bf16 widen a chunk of CHUNK elements into a buffer on the stack,
 * one source at a time (F16C's conversions for f16, AVX2's registers for
 * bf16, where the CPU has them).  MEAN divides once, at the end: an integer MEAN is
 * the wrapped sum divided, truncating towards zero, so that it does not
 * depend on how many members (or, through libpdshm-mpi, hosts) took part in
 * the sum (DESIGN section 4).
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

#define ADD_FLOAT(a, b) ((a) + (b))
#define ADD_WRAP32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define ADD_WRAP64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))

/* One dtype: T the element, A the accumulator, LOAD/STORE convert, ADD sums;
 * ATTR: the function's attributes (its target). */
#define REDUCE_FN(name, ATTR, T, A, LOAD, STORE, ADD)                                \
  ATTR static void name(int op, void *dstv, void *const *srcv, unsigned ns, size_t n) { \
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

REDUCE_FN(reduce_f16_soft, , uint16_t, float, f16_load, f16_store, ADD_FLOAT)
REDUCE_FN(reduce_bf16_port, , uint16_t, float, bf16_load, bf16_store, ADD_FLOAT)

/* ---- one pass: f32, f64, i32, i64 ---- */

/* GCC's vectors of W bytes (vf32_16: four floats): 16 for the portable
 * loops, the registers of SSE2 and of NEON, 32 for AVX2's.  A comparison
 * gives the integer vector of the same width, all ones where true. */
#define VTYPES(W)                                                    \
  typedef float vf32_##W __attribute__((vector_size(W)));           \
  typedef double vf64_##W __attribute__((vector_size(W)));          \
  typedef int32_t vi32_##W __attribute__((vector_size(W)));         \
  typedef int64_t vi64_##W __attribute__((vector_size(W)));         \
  typedef uint32_t vu32_##W __attribute__((vector_size(W)));        \
  typedef uint64_t vu64_##W __attribute__((vector_size(W)));
VTYPES(16)
VTYPES(32)

/* A block: BLOCK_BYTES of every source, folded in registers (8 SSE2 or
 * NEON ones, 4 AVX2 ones). */
#define BLOCK_BYTES 128

/* The element ops, a the fold so far and x the next source's element. */
#define MAX_OF(a, x) ((x) > (a) ? (x) : (a))
#define MIN_OF(a, x) ((x) < (a) ? (x) : (a))
/* The same on vectors (M: the mask type, U: the unsigned one), choosing as
 * the ones above do. */
#define VADD(a, x, M, U) ((a) + (x))
#define VADD_WRAP(a, x, M, U) ((M)((U)(a) + (U)(x)))
#define VPICK(m, x, a, M) ((__typeof__(a))(((M)(x) & (m)) | ((M)(a) & ~(m))))
#define VMAX(a, x, M, U) VPICK((x) > (a), x, a, M)
#define VMIN(a, x, M, U) VPICK((x) < (a), x, a, M)

/* dst[i] = ((s0[i] OP s1[i]) OP s2[i]) ..., divided by ns when MEAN: blocks
 * of BLOCK_BYTES in vectors V (masks M, unsigned U), then one element at a
 * time.  dst is one of the sources or apart from them: a block is read from
 * every source before it is stored. */
#define ONEPASS_FN(name, ATTR, T, V, M, U, OP, VOP, MEAN)                                \
  ATTR static void name(T *dst, void *const *src, unsigned ns, size_t n) {             \
    enum { L = sizeof(V) / sizeof(T), NV = BLOCK_BYTES / sizeof(V) };                   \
    size_t i = 0;                                                                       \
    for (; i + NV * L <= n; i += NV * L) {                                              \
      V a[NV], x; /* x: a copy, so that a stays in registers */                         \
      for (int v = 0; v < NV; v++) {                                                    \
        memcpy(&x, (const T *)src[0] + i + v * L, sizeof x);                            \
        a[v] = x;                                                                       \
      }                                                                                 \
      for (unsigned r = 1; r < ns; r++)                                                 \
        for (int v = 0; v < NV; v++) {                                                  \
          memcpy(&x, (const T *)src[r] + i + v * L, sizeof x);                          \
          a[v] = VOP(a[v], x, M, U);                                                    \
        }                                                                               \
      if (MEAN)                                                                         \
        for (int v = 0; v < NV; v++) a[v] = a[v] / (T)ns;                               \
      for (int v = 0; v < NV; v++) {                                                    \
        x = a[v];                                                                       \
        memcpy(dst + i + v * L, &x, sizeof x);                                          \
      }                                                                                 \
    }                                                                                   \
    for (; i < n; i++) {                                                                \
      T e = ((const T *)src[0])[i];                                                     \
      for (unsigned r = 1; r < ns; r++) e = OP(e, ((const T *)src[r])[i]);              \
      dst[i] = MEAN ? e / (T)ns : e;                                                    \
    }                                                                                   \
  }

/* The four ops of one dtype (vectors of W bytes), and the dispatch. */
#define ONEPASS_TYPE(name, ATTR, T, W, V, M, U, ADD, VADD_OP)                           \
  ONEPASS_FN(name##_sum, ATTR, T, V##_##W, M##_##W, U##_##W, ADD, VADD_OP, 0)          \
  ONEPASS_FN(name##_mean, ATTR, T, V##_##W, M##_##W, U##_##W, ADD, VADD_OP, 1)         \
  ONEPASS_FN(name##_max, ATTR, T, V##_##W, M##_##W, U##_##W, MAX_OF, VMAX, 0)          \
  ONEPASS_FN(name##_min, ATTR, T, V##_##W, M##_##W, U##_##W, MIN_OF, VMIN, 0)          \
  ATTR static void name(int op, void *dst, void *const *src, unsigned ns, size_t n) {   \
    switch (op) {                                                                       \
    case PDSHM_SUM: name##_sum(dst, src, ns, n); break;                                 \
    case PDSHM_MEAN: name##_mean(dst, src, ns, n); break;                               \
    case PDSHM_MAX: name##_max(dst, src, ns, n); break;                                 \
    default: name##_min(dst, src, ns, n); break;                                        \
    }                                                                                   \
  }

/* The portable loops (W 16), and the same C compiled for AVX2 (W 32). */
#define ONEPASS_ALL(suffix, ATTR, W)                                                    \
  ONEPASS_TYPE(reduce_f32##suffix, ATTR, float, W, vf32, vi32, vu32, ADD_FLOAT, VADD)  \
  ONEPASS_TYPE(reduce_f64##suffix, ATTR, double, W, vf64, vi64, vu64, ADD_FLOAT, VADD) \
  ONEPASS_TYPE(reduce_i32##suffix, ATTR, int32_t, W, vi32, vi32, vu32, ADD_WRAP32,     \
               VADD_WRAP)                                                               \
  ONEPASS_TYPE(reduce_i64##suffix, ATTR, int64_t, W, vi64, vi64, vu64, ADD_WRAP64,     \
               VADD_WRAP)

ONEPASS_ALL(_port, , 16)

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

/* AVX with its state enabled by the kernel (xgetbv), and F16C in cpuid
 * leaf 1's ecx when f16c. */
static bool avx_enabled(bool f16c) {
  unsigned a, b, c, d, lo = 0, hi = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_AVX) || !(c & bit_OSXSAVE) ||
      (f16c && !(c & bit_F16C)))
    return false;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6) == 6; /* XMM and YMM state */
}

/* F16C and AVX, with the AVX state enabled by the kernel; asked once. */
static bool f16c_usable(void) {
  static _Atomic int known; /* 0: not asked, 1: no, 2: yes */
  int k = atomic_load_explicit(&known, memory_order_relaxed);
  if (k) return k == 2;
  bool yes = avx_enabled(true);
  atomic_store_explicit(&known, yes ? 2 : 1, memory_order_relaxed);
  return yes;
}

/* AVX2 (cpuid leaf 7's ebx) with the AVX state enabled; asked once. */
static bool avx2_usable(void) {
  static _Atomic int known; /* 0: not asked, 1: no, 2: yes */
  int k = atomic_load_explicit(&known, memory_order_relaxed);
  if (k) return k == 2;
  unsigned a, b = 0, c, d;
  bool yes = avx_enabled(false) && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_AVX2);
  atomic_store_explicit(&known, yes ? 2 : 1, memory_order_relaxed);
  return yes;
}

/* No FMA in this target: a fold is adds (or compares) only, as in the
 * portable loops, so both give the same bits.  bf16's conversions are
 * integer shifts and adds, which AVX2 does 8 at a time. */
ONEPASS_ALL(_avx2, __attribute__((target("avx2"))), 32)
REDUCE_FN(reduce_bf16_avx2, __attribute__((target("avx2"))), uint16_t, float, bf16_load,
          bf16_store, ADD_FLOAT)

static void reduce_f16(int op, void *dst, void *const *src, unsigned ns, size_t n) {
  if (f16c_usable()) reduce_f16_f16c(op, dst, src, ns, n);
  else reduce_f16_soft(op, dst, src, ns, n);
}
#else
#define reduce_f16 reduce_f16_soft
static bool avx2_usable(void) { return false; }
#define reduce_bf16_avx2 reduce_bf16_port
#define reduce_f32_avx2 reduce_f32_port
#define reduce_f64_avx2 reduce_f64_port
#define reduce_i32_avx2 reduce_i32_port
#define reduce_i64_avx2 reduce_i64_port
#endif

size_t pdshm__reduce_elem(int dtype) {
  switch (dtype) {
  case PDSHM_F16: case PDSHM_BF16: return 2;
  case PDSHM_F32: case PDSHM_I32: return 4;
  case PDSHM_F64: case PDSHM_I64: return 8;
  default: return 0;
  }
}

/* The one-pass loops, AVX2's when avx2. */
static void reduce_onepass(bool avx2, int dtype, int op, void *dst, void *const *src,
                           unsigned nsrc, size_t n) {
  switch (dtype) {
  case PDSHM_F32: (avx2 ? reduce_f32_avx2 : reduce_f32_port)(op, dst, src, nsrc, n); break;
  case PDSHM_F64: (avx2 ? reduce_f64_avx2 : reduce_f64_port)(op, dst, src, nsrc, n); break;
  case PDSHM_I32: (avx2 ? reduce_i32_avx2 : reduce_i32_port)(op, dst, src, nsrc, n); break;
  case PDSHM_I64: (avx2 ? reduce_i64_avx2 : reduce_i64_port)(op, dst, src, nsrc, n); break;
  default: break;
  }
}

void pdshm__reduce(int dtype, int op, void *dst, void *const *src, unsigned nsrc, size_t n) {
  switch (dtype) {
  case PDSHM_F16: reduce_f16(op, dst, src, nsrc, n); break;
  case PDSHM_BF16:
    (avx2_usable() ? reduce_bf16_avx2 : reduce_bf16_port)(op, dst, src, nsrc, n);
    break;
  default: reduce_onepass(avx2_usable(), dtype, op, dst, src, nsrc, n); break;
  }
}

void pdshm__reduce_portable(int dtype, int op, void *dst, void *const *src, unsigned nsrc,
                            size_t n) {
  switch (dtype) {
  case PDSHM_F16: reduce_f16_soft(op, dst, src, nsrc, n); break;
  case PDSHM_BF16: reduce_bf16_port(op, dst, src, nsrc, n); break;
  default: reduce_onepass(false, dtype, op, dst, src, nsrc, n); break;
  }
}

bool pdshm__reduce_avx2(void) { return avx2_usable(); }
