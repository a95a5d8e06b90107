/* pdshm/pin.h - pins: views of a tensor's buffer that outlive their variable; unique names. */
#ifndef PDSHM_PIN_H
#define PDSHM_PIN_H

#include "pdshm/base.h"    /* PDSHM_API, the C types */
#include "pdshm/segment.h" /* pdshm_seg */
#include "pdshm/scope.h"   /* pdshm_var */
#include "pdshm/tensor.h"  /* PDSHM_NDIM_MAX */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Pins: views that outlive their variable --------------------------- */
/*
 * A pin keeps a tensor's buffer allocated.  While a buffer is pinned, an
 * erase, a resize, the death of its scope or a detach -- in any process --
 * unhooks the buffer from its variable but does not free it (a resize of a
 * pinned buffer always takes a new one); the bytes go back when the last pin
 * is dropped: by pdshm_tensor_unpin, by pdshm_detach of the attachment that
 * pinned, or by the reaper of a pinning process that died.  So the memory a
 * pin describes is never freed or reused while the pin lasts.  pdshm_check
 * verifies the pin counts; pdshm_inspect_alloc counts the pinned buffers
 * that were unhooked (orphan_blocks, orphan_bytes) and pdshm_procs the pins
 * of each process.  A pin is no reference on the variable or its scope.
 */
typedef struct pdshm_pin pdshm_pin; /* this process's pin: private memory      */
typedef struct pdshm_tensor_view {
  void *data;              /* the bytes (PDSHM_TENSOR_ALIGN aligned, never NULL) */
  size_t nbytes;
  int dtype;               /* pdshm_dtype                                        */
  int ndim;
  int64_t dims[PDSHM_NDIM_MAX];
  uint64_t version;        /* the variable's version when pinned                 */
} pdshm_tensor_view;
/* Pins v's current buffer and describes it in *view (may be NULL); every
 * tensor has a buffer, a 0-byte one too.  ETYPE when v holds no tensor;
 * ENOMEM when no block is left for the pin's record; EROFS on a read-only
 * attachment; EFORKED; EINVAL for a NULL v or out; ESTALE when v was seen
 * erased (using an erased pdshm_var * is the caller's race, as everywhere);
 * EBADSEG when the tensor's description lies outside its buffer (damaged).
 * A failure changes nothing. */
PDSHM_API int pdshm_tensor_pin(pdshm_var *v, pdshm_pin **out, pdshm_tensor_view *view);
/* The buffer the pin holds, as described when it was taken. */
PDSHM_API const pdshm_tensor_view *pdshm_pin_view(const pdshm_pin *p);
/* Drops the pin and frees the handle, also on error.  In a fork child it
 * frees the handle only and answers EFORKED (the parent's pin stays).
 * EINVAL for NULL; ENOTRECOVERABLE on a poisoned segment. */
PDSHM_API int pdshm_tensor_unpin(pdshm_pin *p);
/* In a fork child: a pin of this attachment (seg, attached in the child) on
 * the buffer that `inherited` -- a pin the parent took before the fork --
 * holds, so that the inherited view stays allocated after the parent lets go
 * or dies.  Its view's data is the inherited one's (the child keeps the
 * parent's address range mapped: see pdshm_detach).  ESTALE when the
 * parent's pin is gone; EINVAL when inherited is not a pin inherited from an
 * attachment of the same segment (the same file); ENOMEM; and, for seg,
 * EROFS and EFORKED.  pdshm_detach of seg drops the pin. */
PDSHM_API int pdshm_pin_inherit(pdshm_seg *seg, const pdshm_pin *inherited, pdshm_pin **out);

/* "prefix-N", N unique across every process of the segment.  ERANGE when cap
 * is too small (buf then holds "", and N is not handed out again);
 * ENAMETOOLONG for an over-long prefix; EINVAL for a NULL argument; EROFS,
 * EFORKED, ENOTRECOVERABLE as every call that writes. */
PDSHM_API int pdshm_unique_name(pdshm_seg *seg, const char *prefix, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_PIN_H */
