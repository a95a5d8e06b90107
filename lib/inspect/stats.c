/*
 * stats.c - pdshm_seg_stats: what the arena holds and who is attached.
 *
 * The byte counts come from one walk of the block chain under the heap lock,
 * so they are exact: used is the sum of USED blocks, and a block parked in a
 * lane cache counts as free.  A read-only attachment cannot take the lock: it
 * walks the live chain, again when a walk is torn.
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "inspect/inspect.h"

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

struct stats_walk {
  pdshm_seg *seg;
  pdshm_stats *st;
};

static int stats_block(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  struct stats_walk *sw = arg;
  if (pdshm__blk_state(w) != PDSHM_BLK_USED) return 0;
  if (pdshm__blk_type(b) == PDSHM_T_SCOPE) sw->st->scopes++;
  if (pdshm__blk_type(b) == PDSHM_T_VAR &&
      pdshm__blk_size(w) >= PDSHM_BLK_HDR + sizeof(struct pdshm_var_rec)) {
    const struct pdshm_var_rec *r = pdshm__var_at(sw->seg, at + PDSHM_BLK_HDR);
    sw->st->vars++;
    if (r->vtype == PDSHM_V_TENSOR) sw->st->tensor_bytes += r->nbytes;
  }
  return 0;
}

/* Scopes, variables and tensor bytes, from one walk of the chain (heap lock
 * held, or none on a read-only attachment); a chain that breaks (the heap
 * walk before it did not) leaves the counts of the blocks before the break. */
static void stats_model(pdshm_seg *seg, pdshm_stats *st) {
  struct stats_walk sw = {seg, st};
  if (pdshm__chain_walk(seg, &(struct pdshm_walker){NULL, stats_block, &sw}, NULL))
    pdshm__fail_clear(); /* the call succeeds: no detail of a failure */
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
