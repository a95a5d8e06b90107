/*
 * attach_state.c - what every entry point asks of an attachment before it
 * touches the segment: is the handle this process's (not inherited across
 * fork()), and may it write (not read-only, not poisoned)?  The checks are
 * inline (attach_state.h: pdshm__seg_ok, pdshm__seg_ok_write), on every entry
 * point's path; here are the errors when they fail.
 *
 * Owns nothing: it reads the handle (pdshm_seg), pdshm__forkgen
 * (attach_list.c) and the header's poisoned flag (lock.c sets it).  The slow
 * path of a variable pointer's lookup is here too, errors and all.
 */
#define PDSHM_LAYER 1 /* attach/ (lib/LAYERS) */
#include "config.h"

#include "attach/attach.h"

int pdshm__seg_unusable(const pdshm_seg *seg) {
  if (!seg) return pdshm__fail(PDSHM_EINVAL, "NULL segment handle");
  if (seg->forkgen != atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed))
    return pdshm__fail(PDSHM_EFORKED, "segment \"%s\" was attached by the parent process",
                       seg->name);
  return 0;
}

int pdshm__seg_unwritable(const pdshm_seg *seg) {
  int rc = pdshm__seg_unusable(seg);
  if (rc) return rc;
  if (seg->flags & PDSHM_RDONLY)
    return pdshm__fail(PDSHM_EROFS, "segment \"%s\" is attached read-only", seg->name);
  if (atomic_load_explicit(&seg->hdr->poisoned, memory_order_acquire))
    return pdshm__fail(PDSHM_ENOTRECOVERABLE, "segment \"%s\" is poisoned", seg->name);
  return 0;
}

pdshm_seg *pdshm__seg_of_checked(const void *p, int *rc, bool writable) {
  pdshm_seg *seg = p ? pdshm__seg_of(p) : NULL;
  if (!p) *rc = pdshm__fail(PDSHM_EINVAL, "NULL variable");
  else if (!seg) *rc = pdshm__fail(PDSHM_EINVAL, "variable is in no attachment of this process");
  else *rc = writable ? pdshm__seg_writable(seg) : pdshm__seg_usable(seg);
  return *rc ? NULL : seg;
}

