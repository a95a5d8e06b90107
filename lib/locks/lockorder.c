/*
 * lockorder.c - the order in which a thread may take the segment's locks,
 * and, in debug builds (--enable-debug), the per-thread check of it.
 *
 * Owns: the ranks of struct pdshm_lock (layout.h) and struct
 * pdshm_lockorder, a thread's list of the locks it holds (in its block,
 * thread.c, debug builds only).
 *
 * Invariants:
 *  1. A thread that waits for a lock holds none of a higher rank in the same
 *     segment.  Ranks rise in the order locks are taken: scope locks by
 *     depth (a parent's before its child's), the groups' registry, the heap
 *     lock last.  Equal ranks are unordered (sibling scopes).  A variable's
 *     lock is no entry of the table and has no rank: it comes before all of
 *     them (a user holds it across calls that take scope locks, and its
 *     waiters reap, which takes them too), and its order among variable
 *     locks is the user's.
 *  2. A trylock waits for nothing, so it cannot close a cycle: it is recorded
 *     but not checked (pdshm_check takes every lock that way).
 *  3. Entries recorded before a fork are not the child's (pdshm__forkgen).
 *  4. Rank 0 is an entry nobody ranked (a kind this file does not know, a
 *     segment made before ranks were written): taking it is not checked,
 *     and holding it never conflicts.
 */
#define PDSHM_LAYER 2 /* locks/ (lib/LAYERS) */
#include "config.h"

#include <stdio.h>

#include "locks/locks.h"

uint32_t pdshm__lock_rank(unsigned kind, uint32_t depth) {
  switch (kind) {
  case PDSHM_LK_SCOPE:
    return depth < PDSHM_RANK_GROUPS - PDSHM_RANK_SCOPE ? PDSHM_RANK_SCOPE + depth
                                                        : PDSHM_RANK_GROUPS - 1;
  case PDSHM_LK_GROUPS: return PDSHM_RANK_GROUPS;
  case PDSHM_LK_HEAP: return PDSHM_RANK_HEAP;
  default: return 0;
  }
}

static bool lo_live(const struct pdshm_lockorder_ent *e, const void *base, uint64_t forkgen) {
  return e->lock && e->base == base && e->forkgen == forkgen;
}

const struct pdshm_lockorder_ent *pdshm__lockorder_conflict(const struct pdshm_lockorder *o,
                                                            const void *base, uint64_t forkgen,
                                                            uint32_t rank) {
  const struct pdshm_lockorder_ent *worst = NULL;
  if (!rank) return NULL; /* an entry nobody ranked is not checked */
  for (uint32_t k = 0; k < o->n; k++) {
    const struct pdshm_lockorder_ent *e = &o->held[k];
    if (lo_live(e, base, forkgen) && e->rank > rank && (!worst || e->rank > worst->rank))
      worst = e;
  }
  return worst;
}

void pdshm__lockorder_push(struct pdshm_lockorder *o, const struct pdshm_lockorder_ent *e) {
  if (o->n < PDSHM_LOCKORDER_MAX) o->held[o->n++] = *e;
  else o->untracked++;
}

void pdshm__lockorder_pop(struct pdshm_lockorder *o, const void *lock) {
  for (uint32_t k = o->n; k-- > 0;)
    if (o->held[k].lock == lock) {
      o->held[k] = o->held[--o->n];
      return;
    }
  if (o->untracked) o->untracked--;
}

#ifdef PDSHM_DEBUG
/* Invariant 1 broken is the library's own bug: like a failed assert, it
 * says which two locks and stops the process. */
static void lo_abort(const struct pdshm_lockorder_ent *held, const struct pdshm_lockorder_ent *e) {
  fprintf(stderr, "pdshm: lock order: waiting for lock %u (rank %u) while holding lock %u "
          "(rank %u)\n", e->index, e->rank, held->index, held->rank);
  fflush(stderr);
  abort();
}

static struct pdshm_lockorder_ent lo_ent(const pdshm_seg *seg, uint32_t i) {
  const struct pdshm_lock *l = pdshm__lockent(seg, i);
  return (struct pdshm_lockorder_ent){
      .lock = l, .base = seg->base, .index = i, .rank = l->rank,
      .forkgen = atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed)};
}

void pdshm__lockorder_check(const pdshm_seg *seg, uint32_t i) {
  if (!pdshm__self) return; /* no block: nothing recorded to check against */
  struct pdshm_lockorder_ent e = lo_ent(seg, i);
  const struct pdshm_lockorder_ent *bad =
      pdshm__lockorder_conflict(&pdshm__self->order, e.base, e.forkgen, e.rank);
  if (bad) lo_abort(bad, &e);
}

void pdshm__lockorder_took(const pdshm_seg *seg, uint32_t i) {
  struct pdshm_thread *t = pdshm__thread();
  struct pdshm_lockorder_ent e = lo_ent(seg, i);
  if (t) pdshm__lockorder_push(&t->order, &e); /* no block: unchecked, not wrong */
}

void pdshm__lockorder_released(const pdshm_seg *seg, uint32_t i) {
  if (pdshm__self) pdshm__lockorder_pop(&pdshm__self->order, pdshm__lockent(seg, i));
}
#endif
