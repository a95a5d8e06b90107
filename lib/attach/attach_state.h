/*
 * attach_state.h - the inline half of attach_state.c: what every entry point asks
 * of an attachment, without a call when the answer is yes.  Included by
 * attach.h, after struct pdshm_seg.
 */
#ifndef PDSHM_ATTACH_STATE_H
#define PDSHM_ATTACH_STATE_H

/* The handle is this process's: not NULL, not inherited across fork(). */
static inline bool pdshm__seg_ok(const pdshm_seg *seg) {
  return seg && seg->forkgen == atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed);
}
/* ... and may mutate the segment: not read-only, not poisoned (the header
 * is read only once the handle is known to be mapped here). */
static inline bool pdshm__seg_ok_write(const pdshm_seg *seg) {
  return pdshm__seg_ok(seg) && !(seg->flags & PDSHM_RDONLY) &&
         !atomic_load_explicit(&seg->hdr->poisoned, memory_order_acquire);
}
/* Why pdshm__seg_ok, or pdshm__seg_ok_write, is false: the error, set. */
int pdshm__seg_unusable(const pdshm_seg *seg);
int pdshm__seg_unwritable(const pdshm_seg *seg);
/* 0, or PDSHM_EFORKED in a child of the process that attached, or EINVAL. */
static inline int pdshm__seg_usable(const pdshm_seg *seg) {
  return __builtin_expect(pdshm__seg_ok(seg), 1) ? 0 : pdshm__seg_unusable(seg);
}
/* 0, or EROFS / EFORKED / ENOTRECOVERABLE: may this handle mutate the segment? */
static inline int pdshm__seg_writable(const pdshm_seg *seg) {
  return __builtin_expect(pdshm__seg_ok_write(seg), 1) ? 0 : pdshm__seg_unwritable(seg);
}
/* The attachment holding variable pointer p, checked as pdshm__seg_ok_write
 * (writable) or pdshm__seg_ok asks, with the error of each way to fail:
 * NULL p, in no attachment, the check's.  NULL with *rc set, else *rc = 0.
 * The slow path of pdshm__var_seg and pdshm__var_attached (model/model.h). */
pdshm_seg *pdshm__seg_of_checked(const void *p, int *rc, bool writable);

#endif /* PDSHM_ATTACH_STATE_H */
