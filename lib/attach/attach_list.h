/*
 * attach_list.h - the inline half of attach_list.c: the attachment a pointer is
 * in, from the thread's last answer when it still holds.  Included by
 * attach.h, after struct pdshm_seg.
 */
#ifndef PDSHM_ATTACH_LIST_H
#define PDSHM_ATTACH_LIST_H

/* Bumped whenever an attachment comes or goes, and in a fork child (after
 * pdshm__forkgen), so that the thread's last answer of pdshm__seg_of can
 * tell it may be stale. */
extern _Atomic uint64_t pdshm__seg_list_gen;
/* This thread's last answer of pdshm__seg_find: valid while the list's
 * generation is still gen (then seg is on the list, so not detached). */
struct pdshm_seg_last {
  pdshm_seg *seg;
  uint64_t gen;
};
extern PDSHM_TLS_HOT struct pdshm_seg_last pdshm__seg_last;
/* The attachment whose address range holds p, looked up in the list under
 * its mutex (and remembered in pdshm__seg_last), or NULL. */
pdshm_seg *pdshm__seg_find(const void *p);
/* The attachment whose address range holds p (a variable pointer), or NULL;
 * p is compared, never read.  The thread's last answer is tried first, its
 * generation before its handle is read: no lock, no call on the common path. */
static inline pdshm_seg *pdshm__seg_of(const void *p) {
  const uint8_t *b = p;
  const struct pdshm_seg_last *last = &pdshm__seg_last;
  if (__builtin_expect(
          last->seg &&
              last->gen == atomic_load_explicit(&pdshm__seg_list_gen, memory_order_acquire) &&
              b >= last->seg->base && b < last->seg->base + last->seg->size,
          1))
    return last->seg;
  return pdshm__seg_find(p);
}

#endif /* PDSHM_ATTACH_LIST_H */
