/*
 * stats.c - pdshm_seg_stats: what the arena holds and who is attached.
 *
 * The byte counts come from one walk of the block chain under the heap lock,
 * so they are exact: used is the sum of USED blocks, and a block parked in a
 * lane cache counts as free.
 */
#include "config.h"

#include <string.h>

#include "internal.h"

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
  stats_procs(seg, st);
  return 0;
}
