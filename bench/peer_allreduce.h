/*
 * peer_allreduce.h - the peers of bench_allreduce: a shared-memory allreduce
 * after the algorithm of DeepSpeed's CPU one (shm.cpp), and a one-pass float
 * sum loop with run-time AVX2 dispatch.
 *
 * The allreduce (float32 SUM) of S bytes among N processes, input and output
 * in each process's private memory:
 *  - one shared buffer per rank in a plain shared mapping (made before the
 *    fork), a flag word per rank (its own cache line) that only grows;
 *  - S < 1 MiB: each rank copies its input into its buffer, raises its flag,
 *    spins until every flag is up, then sums all N buffers into its output
 *    itself.  Two sets of buffers taken in turn, so that the next call's
 *    copy cannot overwrite a buffer a slower rank still reads: a rank writes
 *    set k%2 again only after every rank arrived at call k+1, which each did
 *    after reading set k%2;
 *  - S >= 1 MiB: each rank waits until every rank finished the previous
 *    call, copies its input into its buffer, raises its flag, spins; sums
 *    slice r (S/N bytes) of the N buffers into slice r of its own buffer
 *    (a reduce-scatter), raises its flag, spins; then copies slice j of
 *    rank j's buffer into its output for every j, and raises its flag.
 * The waits are bare spins on the flags (a pause instruction between
 * looks), never a sleep: the peer is as fast as a spin can be when every
 * rank has a core of its own, and takes the core from the rank it waits for
 * when they have not.
 */
#ifndef PDSHM_BENCH_PEER_ALLREDUCE_H
#define PDSHM_BENCH_PEER_ALLREDUCE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PEER_MAX_RANKS 8
#define PEER_SMALL_MAX (1u << 20) /* from here on, the reduce-scatter */

struct peer_flag {
  _Alignas(64) atomic_uint_fast64_t step; /* written by its rank only (release) */
};

/* What the parent maps before the fork (peer_region_bytes of it). */
struct peer_region {
  struct peer_flag flag[PEER_MAX_RANKS];
  /* then: 2 sets of nranks small buffers, then nranks buffers of max_bytes */
};

/* One rank's handle. */
struct peer {
  struct peer_region *region;
  int rank, nranks;
  uint64_t step;   /* this rank's flag as it last raised it */
  unsigned calls;  /* small calls so far: which set of small buffers */
  float *small[2][PEER_MAX_RANKS];
  float *big[PEER_MAX_RANKS];
};

/* Bytes to map for nranks ranks and tensors of at most max_bytes. */
size_t peer_region_bytes(int nranks, size_t max_bytes);
/* A rank's handle on a region mapped before the fork (zeroed). */
void peer_open(struct peer *p, void *region, int rank, int nranks, size_t max_bytes);
/* out = the sum over the ranks of their in (n floats; the same n at every
 * rank). */
void peer_allreduce(struct peer *p, const float *in, float *out, size_t n);

/* Returns once every rank called it (a spin on the flags, as the calls'). */
void peer_sync(struct peer *p);

/* dst[i] = src[0][i] + ... + src[nsrc-1][i], in that order, one pass (dst
 * may be one of the sources); AVX2 when the CPU has it. */
void peer_sum_f32(float *dst, const float *const *src, unsigned nsrc, size_t n);
/* "avx2" or "plain": what peer_sum_f32 runs on this CPU. */
const char *peer_sum_kind(void);

#endif
