/*
 * introspect.h - what the introspection modules (lib/introspect_*.c) share:
 * a bounded walk of the block chain and the checks that keep every read
 * inside the mapping.
 *
 * Introspection reads a live and possibly corrupt segment without taking a
 * lock or storing anything.  Its invariants:
 *  1. Every offset read from the segment is checked against the mapping (and
 *     the region it must point into) before it is followed.
 *  2. Every walk is bounded by a count derived from the mapping's size, and
 *     walks of linked lists detect cycles, so hostile bytes cannot make it
 *     loop.
 *  3. A walk that meets something inconsistent is retried a bounded number of
 *     times (PDSHM_INSPECT_TRIES: a writer may have been half way), then
 *     answered with PDSHM_EBADSEG.
 *  4. Memory allocated for an answer is bounded by the mapping's size, never
 *     by a count read from the segment.
 */
#ifndef PDSHM_INTROSPECT_H
#define PDSHM_INTROSPECT_H

#include "model_int.h"

#define PDSHM_INSPECT_TRIES 8

/* Called for each block of the chain; a nonzero return stops the walk and is
 * returned by it. */
struct pdshm_walker {
  void (*reset)(void *arg); /* before each attempt (may be NULL)              */
  int (*visit)(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t word);
  void *arg;
};

/* Walks the block chain from arena_off to arena_end, with retries (inv. 3).
 * 0, EBADSEG (with pdshm_last_error() saying where it broke), or what visit
 * returned. */
int pdshm__walk_blocks(const pdshm_seg *seg, const struct pdshm_walker *w);

/* Do the process table and the lock table lie inside the mapping? */
bool pdshm__slots_sane(const pdshm_seg *seg);
bool pdshm__locks_sane(const pdshm_seg *seg);

/* The payload at `off` when it starts a USED block of `type` at least
 * `bytes` long inside the arena, else NULL. */
const void *pdshm__payload_at(const pdshm_seg *seg, pdshm_off_t off, unsigned type, size_t bytes);

#endif /* PDSHM_INTROSPECT_H */
