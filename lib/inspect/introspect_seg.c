/*
 * introspect_seg.c - pdshm_inspect_seg (the header) and pdshm_inspect_alloc
 * (the allocator, from the heap's own statistics walk, heap_check.c).
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "inspect/inspect.h"

PDSHM_API int pdshm_inspect_seg(pdshm_seg *seg, pdshm_seg_info *out) {
  int rc = pdshm__inspect_begin(seg, out != NULL, "output", 0);
  if (rc) return rc;
  const struct pdshm_hdr *h = seg->hdr;
  const uint64_t end = pdshm__seg_end(seg);
  *out = (pdshm_seg_info){
      .size = end, .max_size = h->max_size, .first_size = h->size,
      .growths = __atomic_load_n(&h->heap.growths, __ATOMIC_RELAXED), .layout_version = h->layout_version, .max_procs = h->max_procs,
      .max_locks = h->max_locks, .creator_pid = h->creator_pid, .creator_uid = h->creator_uid,
      .daemon_pid = atomic_load(&h->daemon_pid), .created_ns = h->created_ns,
      .daemon_beat_ns = atomic_load(&h->daemon_beat_ns), .reaped = atomic_load(&h->reaped),
      .poisoned = atomic_load(&h->poisoned) != 0};
  if (pdshm__arena_sane(seg, end)) out->arena = end - h->arena_off;
  return 0;
}

static void alloc_fill(const struct pdshm_heap_stats *hs, pdshm_alloc_info *out) {
  *out = (pdshm_alloc_info){
      .arena = hs->arena, .used = hs->used, .free = hs->free, .cached = hs->cached,
      .blocks_used = hs->blocks_used, .blocks_free = hs->blocks_free,
      .blocks_cached = hs->blocks_cached, .largest_free = hs->largest_free,
      .large_used = hs->large_used, .large_blocks = hs->large_blocks, .punched = hs->punched,
      .rebuilds = hs->rebuilds, .scope_bytes = hs->by_type[PDSHM_T_SCOPE],
      .var_bytes = hs->by_type[PDSHM_T_VAR], .name_bytes = hs->by_type[PDSHM_T_NAME],
      .table_bytes = hs->by_type[PDSHM_T_TABLE], .tensor_bytes = hs->by_type[PDSHM_T_TENSOR],
      .handle_bytes = hs->by_type[PDSHM_T_HANDLE], .oplist_bytes = hs->by_type[PDSHM_T_OPLIST],
      .hold_bytes = hs->by_type[PDSHM_T_HOLD], .raw_bytes = hs->by_type[PDSHM_T_RAW],
      .pin_bytes = hs->by_type[PDSHM_T_PIN], .orphan_bytes = hs->orphan_bytes,
      .orphan_blocks = hs->orphan_blocks};
  /* Cached blocks sit in process caches: only FREE blocks can merge. */
  uint64_t binned = hs->free - hs->cached;
  if (binned) out->fragmentation = 1.0 - (double)hs->largest_free / (double)binned;
  for (unsigned c = 0; c < PDSHM_ALLOC_CLASSES; c++)
    out->cls[c] = (pdshm_alloc_class){hs->cls[c].block_size, hs->cls[c].used, hs->cls[c].cached};
}

PDSHM_API int pdshm_inspect_alloc(pdshm_seg *seg, pdshm_alloc_info *out) {
  _Static_assert(PDSHM_ALLOC_CLASSES == PDSHM_NCLASSES, "one size-class count");
  int rc = pdshm__inspect_begin(seg, out != NULL, "output", 0);
  if (rc) return rc;
  struct pdshm_heap_stats hs;
  if ((rc = pdshm__heap_stats(seg, &hs))) return rc;
  alloc_fill(&hs, out);
  return 0;
}
