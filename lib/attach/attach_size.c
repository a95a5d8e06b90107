/*
 * attach_size.c - the slow paths of the segment's size as this process checks
 * it (attach.h: pdshm__seg_end, pdshm__seg_holds): a published size past
 * what this process has seen is believed once the file holds it.
 *
 * Owns the handle's `end` (struct pdshm_seg): the largest arena_end this
 * process found inside the file.  It only grows; a size past the file or
 * the mapping (damage: max_size is immutable) leaves it as it was.  Calls
 * nothing of the library's: every layer's bounds come here.
 */
#define PDSHM_LAYER 1 /* attach/ (lib/LAYERS) */
#include "config.h"

#include <sys/stat.h>

#include "attach/attach.h"

uint64_t pdshm__seg_end_slow(const pdshm_seg *seg, uint64_t e) {
  pdshm_seg *s = (pdshm_seg *)seg; /* `end` is this process's cache, not the segment's */
  uint64_t known = atomic_load(&s->end);
  struct stat st;
  if (e > s->size || s->fd < 0 || fstat(s->fd, &st) < 0 || e > (uint64_t)st.st_size) return known;
  while (known < e && !atomic_compare_exchange_weak(&s->end, &known, e)) {
  }
  return e;
}

bool pdshm__seg_holds_slow(const pdshm_seg *seg, uint64_t off, uint64_t bytes) {
  uint64_t end = __atomic_load_n(&seg->hdr->arena_end, __ATOMIC_ACQUIRE);
  if (end > atomic_load_explicit(&seg->end, memory_order_relaxed))
    end = pdshm__seg_end_slow(seg, end);
  return off <= end && end - off >= bytes;
}
