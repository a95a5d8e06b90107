/*
 * peer_allreduce.c - the shared-memory allreduce and the sum loop that
 * bench_allreduce measures pdshm against (peer_allreduce.h says how they
 * work).
 */
#include "config.h"

#include <string.h>

#include "peer_allreduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PEER_X86 1
static inline void relax(void) { _mm_pause(); }
#else
#define PEER_X86 0
static inline void relax(void) {}
#endif

/* ---- the sum loop ---------------------------------------------------------- */

static void sum_plain(float *dst, const float *const *src, unsigned nsrc, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float acc = src[0][i];
    for (unsigned s = 1; s < nsrc; s++) acc += src[s][i];
    dst[i] = acc;
  }
}

#if PEER_X86
/* 32 floats a step in four registers: each source is read once and dst
 * written once, with no buffer in between. */
__attribute__((target("avx2"))) static void sum_avx2(float *dst, const float *const *src,
                                                      unsigned nsrc, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_loadu_ps(src[0] + i), a1 = _mm256_loadu_ps(src[0] + i + 8);
    __m256 a2 = _mm256_loadu_ps(src[0] + i + 16), a3 = _mm256_loadu_ps(src[0] + i + 24);
    for (unsigned s = 1; s < nsrc; s++) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(src[s] + i));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(src[s] + i + 8));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(src[s] + i + 16));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(src[s] + i + 24));
    }
    _mm256_storeu_ps(dst + i, a0);
    _mm256_storeu_ps(dst + i + 8, a1);
    _mm256_storeu_ps(dst + i + 16, a2);
    _mm256_storeu_ps(dst + i + 24, a3);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(src[0] + i);
    for (unsigned s = 1; s < nsrc; s++) a = _mm256_add_ps(a, _mm256_loadu_ps(src[s] + i));
    _mm256_storeu_ps(dst + i, a);
  }
  const float *tail[PEER_MAX_RANKS];
  for (unsigned s = 0; s < nsrc && s < PEER_MAX_RANKS; s++) tail[s] = src[s] + i;
  if (i < n) sum_plain(dst + i, tail, nsrc, n - i);
}

static int have_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}
#endif

typedef void (*sum_fn)(float *, const float *const *, unsigned, size_t);

static sum_fn chosen(void) {
  static sum_fn fn;
  if (!fn) {
#if PEER_X86
    fn = have_avx2() ? sum_avx2 : sum_plain;
#else
    fn = sum_plain;
#endif
  }
  return fn;
}

void peer_sum_f32(float *dst, const float *const *src, unsigned nsrc, size_t n) {
  chosen()(dst, src, nsrc, n);
}

const char *peer_sum_kind(void) {
#if PEER_X86
  return chosen() == sum_avx2 ? "avx2" : "plain";
#else
  return "plain";
#endif
}

/* ---- the allreduce ----------------------------------------------------------- */

size_t peer_region_bytes(int nranks, size_t max_bytes) {
  return sizeof(struct peer_region) + 2 * (size_t)nranks * PEER_SMALL_MAX +
         (size_t)nranks * max_bytes;
}

void peer_open(struct peer *p, void *region, int rank, int nranks, size_t max_bytes) {
  memset(p, 0, sizeof *p);
  p->region = region;
  p->rank = rank;
  p->nranks = nranks;
  char *at = (char *)region + sizeof(struct peer_region);
  for (int set = 0; set < 2; set++)
    for (int r = 0; r < nranks; r++, at += PEER_SMALL_MAX) p->small[set][r] = (float *)at;
  for (int r = 0; r < nranks; r++, at += max_bytes) p->big[r] = (float *)at;
}

static void raise_flag(struct peer *p) {
  atomic_store_explicit(&p->region->flag[p->rank].step, ++p->step, memory_order_release);
}

/* Spins until every rank's flag is at least this rank's. */
static void wait_all(const struct peer *p) {
  for (int r = 0; r < p->nranks; r++)
    while (atomic_load_explicit(&p->region->flag[r].step, memory_order_acquire) < p->step)
      relax();
}

void peer_sync(struct peer *p) {
  raise_flag(p);
  wait_all(p);
}

static void allreduce_small(struct peer *p, const float *in, float *out, size_t n) {
  float *const *set = p->small[p->calls++ & 1];
  memcpy(set[p->rank], in, n * sizeof *in);
  raise_flag(p);
  wait_all(p);
  peer_sum_f32(out, (const float *const *)set, (unsigned)p->nranks, n);
}

static void allreduce_big(struct peer *p, const float *in, float *out, size_t n) {
  size_t lo = n * (size_t)p->rank / (size_t)p->nranks;
  size_t hi = n * (size_t)(p->rank + 1) / (size_t)p->nranks;
  const float *src[PEER_MAX_RANKS];
  wait_all(p); /* every rank has copied the previous call's slices out */
  memcpy(p->big[p->rank], in, n * sizeof *in);
  raise_flag(p);
  wait_all(p);
  for (int r = 0; r < p->nranks; r++) src[r] = p->big[r] + lo;
  peer_sum_f32(p->big[p->rank] + lo, src, (unsigned)p->nranks, hi - lo);
  raise_flag(p);
  wait_all(p);
  for (int r = 0; r < p->nranks; r++) {
    size_t a = n * (size_t)r / (size_t)p->nranks, b = n * (size_t)(r + 1) / (size_t)p->nranks;
    memcpy(out + a, p->big[r] + a, (b - a) * sizeof *out);
  }
  raise_flag(p);
}

void peer_allreduce(struct peer *p, const float *in, float *out, size_t n) {
  if (n * sizeof *in < PEER_SMALL_MAX) allreduce_small(p, in, out, n);
  else allreduce_big(p, in, out, n);
}
