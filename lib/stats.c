/*
 * stats.c - pdshm_seg_stats: what the arena holds and who is attached.
 *
 * The byte counts come from one walk of the block chain under the heap lock,
 * so they are exact: used is the sum of USED blocks, and a block parked in a
 * lane cache counts as free.
 */
#include "config.h"

#include <string.h>

#include "model_int.h"

static void stats_procs(pdshm_seg *seg, pdshm_stats *st) {
  for (uint32_t i = 0; i < seg->hdr->max_procs; i++) {
    if (atomic_load_explicit(&pdshm__slot(seg, i)->state, memory_order_acquire) ==
        PDSHM_SLOT_FREE)
      continue;
    if (pdshm__slot_alive(seg, i) > 0)
      st->procs_alive++;
    else
      st->procs_dead++;
  }
}

/* Scopes, variables and tensor bytes, from one walk of the chain (heap lock
 * held, or none on a read-only attachment: then bounded and validated). */
static void stats_model(pdshm_seg *seg, pdshm_stats *st) {
  const struct pdshm_hdr *h = seg->hdr;
  if (!pdshm__arena_sane(seg)) return;
  uint64_t guard = (h->arena_end - h->arena_off) / PDSHM_BLK_MIN;
  for (pdshm_off_t at = h->arena_off; at < h->arena_end && guard--;) {
    const struct pdshm_blk *b = PDSHM_AT(seg->base, at, const struct pdshm_blk);
    uint64_t w = atomic_load_explicit(&b->word, memory_order_acquire), size = pdshm__blk_size(w);
    if (size < PDSHM_BLK_MIN || size > h->arena_end - at) break;
    if (pdshm__blk_state(w) == PDSHM_BLK_USED && b->type == PDSHM_T_SCOPE) st->scopes++;
    if (pdshm__blk_state(w) == PDSHM_BLK_USED && b->type == PDSHM_T_VAR &&
        size >= PDSHM_BLK_HDR + sizeof(struct pdshm_var_rec)) {
      const struct pdshm_var_rec *r = pdshm__var_at(seg, at + PDSHM_BLK_HDR);
      st->vars++;
      if (r->vtype == PDSHM_V_TENSOR) st->tensor_bytes += r->nbytes;
    }
    at += size;
  }
}

PDSHM_API int pdshm_seg_stats(pdshm_seg *seg, pdshm_stats *st) {
  pdshm__fail_clear();
  if (!st) return pdshm__fail(PDSHM_EINVAL, "NULL stats pointer");
  int rc = pdshm__seg_usable(seg);
  if (rc) return rc;
  struct pdshm_heap_stats hs;
  if ((rc = pdshm__heap_stats(seg, &hs))) return rc;
  memset(st, 0, sizeof *st);
  st->size = hs.arena;
  st->used = hs.used;
  st->free = hs.free;
  bool locked = !(seg->flags & PDSHM_RDONLY) && !pdshm__lock(seg, PDSHM_LOCK_HEAP);
  stats_model(seg, st);
  if (locked) pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  stats_procs(seg, st);
  return 0;
}
