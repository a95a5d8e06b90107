/*
 * introspect_walk.c - the retried walk of the block chain and the checks
 * every introspection call starts with (introspect.h).
 */
#include "config.h"

#include "introspect.h"

bool pdshm__slots_sane(const pdshm_seg *seg) {
  const struct pdshm_hdr *h = seg->hdr;
  return h->max_procs >= 1 && h->max_procs <= PDSHM_PROCS_MAX && h->slots_off >= sizeof *h &&
         h->slots_off <= seg->size &&
         (uint64_t)h->max_procs * sizeof(struct pdshm_slot) <= seg->size - h->slots_off;
}

bool pdshm__locks_sane(const pdshm_seg *seg) {
  const struct pdshm_hdr *h = seg->hdr;
  return h->max_locks >= PDSHM_LOCKS_MIN && h->max_locks <= PDSHM_LOCKS_MAX &&
         h->locks_off >= sizeof *h && h->locks_off <= seg->size &&
         (uint64_t)h->max_locks * sizeof(struct pdshm_lock) <= seg->size - h->locks_off;
}

int pdshm__inspect_begin(const pdshm_seg *seg, bool given, const char *what, unsigned tables) {
  pdshm__fail_clear();
  int rc = pdshm__seg_usable(seg);
  if (rc) return rc;
  if (!given) return pdshm__fail(PDSHM_EINVAL, "NULL %s", what);
  if ((tables & PDSHM_INSPECT_SLOTS) && !pdshm__slots_sane(seg))
    return pdshm__fail(PDSHM_EBADSEG, "process table is damaged");
  if ((tables & PDSHM_INSPECT_LOCKS) && !pdshm__locks_sane(seg))
    return pdshm__fail(PDSHM_EBADSEG, "lock table is damaged");
  return 0;
}

/* A chain that breaks where a writer is half way is walked again. */
int pdshm__walk_blocks(const pdshm_seg *seg, const struct pdshm_walker *w) {
  int rc = 0;
  for (int tries = 0; tries < PDSHM_INSPECT_TRIES; tries++) {
    pdshm_off_t broke;
    rc = pdshm__chain_walk(seg, w, &broke);
    if (!broke) return rc;
  }
  return rc;
}

const void *pdshm__payload_at(const pdshm_seg *seg, pdshm_off_t off, unsigned type, size_t bytes) {
  const struct pdshm_hdr *h = seg->hdr;
  if (off % PDSHM_ALIGN || off < h->arena_off + PDSHM_BLK_HDR || off >= h->arena_end) return NULL;
  const struct pdshm_blk *b = pdshm__blk(seg, off);
  uint64_t word = atomic_load_explicit(&b->word, memory_order_acquire);
  uint64_t size = pdshm__blk_size(word);
  if (pdshm__blk_state(word) != PDSHM_BLK_USED || b->type != type) return NULL;
  if (size < PDSHM_BLK_HDR + bytes || size > h->arena_end - (off - PDSHM_BLK_HDR)) return NULL;
  return seg->base + off;
}
