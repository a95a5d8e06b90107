/*
 * chain.c - the one walk of the arena's chain of blocks (layout.h,
 * invariant 2), for the heap, the checker, the statistics and the
 * introspection calls.
 *
 * Invariants:
 *  1. A block is visited only once its size was found to fit: a multiple of
 *     PDSHM_ALIGN, at least PDSHM_BLK_MIN, and not past arena_end as read
 *     once before the walk (pdshm__seg_end: inside the file).  So every step
 *     moves forward, the walk ends, and it never leaves the arena, even on
 *     hostile bytes.  A growth during a walk without the heap lock only adds
 *     blocks past that end, which the walk does not visit.
 *  2. The walk steps over the size it read before the visit: a visitor may
 *     change the block it is given (state, owner, type; or make it the tail
 *     of a merge into an earlier block) but never its end.
 */
#define PDSHM_LAYER 3 /* heap/ (lib/LAYERS) */
#include "config.h"

#include "heap/heap.h"

/* The size of the block whose header word is w at `at`, if it fits, else 0. */
static uint64_t chain_size(uint64_t end, pdshm_off_t at, uint64_t w) {
  uint64_t size = pdshm__blk_size(w);
  if (size < PDSHM_BLK_MIN || size % PDSHM_ALIGN || size > end - at) return 0;
  return size;
}

int pdshm__chain_walk(const pdshm_seg *seg, const struct pdshm_walker *w, pdshm_off_t *broke) {
  const struct pdshm_hdr *h = seg->hdr;
  if (broke) *broke = 0;
  /* The raw field first: a growth between the two reads only raises the
   * second, so an end below the raw value is a size past the file. */
  uint64_t said = __atomic_load_n(&h->arena_end, __ATOMIC_ACQUIRE), end = pdshm__seg_end(seg);
  if (end < said)
    return pdshm__fail(PDSHM_EBADSEG, "arena_end %#llx lies past the file's %#llx bytes",
                       (unsigned long long)said, (unsigned long long)end);
  if (!pdshm__arena_sane(seg, end)) return pdshm__fail(PDSHM_EBADSEG, "arena bounds are damaged");
  if (w->reset) w->reset(w->arg);
  for (pdshm_off_t at = h->arena_off; at < end;) {
    const struct pdshm_blk *b = PDSHM_AT(seg->base, at, const struct pdshm_blk);
    uint64_t word = atomic_load_explicit(&b->word, memory_order_acquire);
    uint64_t size = chain_size(end, at, word);
    if (!size) {
      if (broke) *broke = at;
      return pdshm__fail(PDSHM_EBADSEG, "block chain broken at %#llx (size %llu)",
                         (unsigned long long)at, (unsigned long long)pdshm__blk_size(word));
    }
    int rc = w->visit(w->arg, at, b, word);
    if (rc) return rc;
    at += size;
  }
  return 0;
}
