/*
 * dlborrow.c - another library's CPU tensor as bytes for the length of one
 * call, through its DLPack capsule (dlpack.h).
 *
 * The capsule is held, not consumed (it keeps its name "dltensor"), while
 * the call uses the bytes; dropping it then runs the capsule's destructor,
 * which calls the producer's deleter, as DLPack asks of a capsule nobody
 * consumed.  So the producer's tensor lives as long as the borrow, whatever
 * the caller does with its own reference meanwhile.
 */
#include "pdshmpy.h"

int pdshmpy_dl_borrow(pdshmpy_state *st, PyObject *capsule, pdshmpy_dl_borrowed *out) {
  out->capsule = capsule;
  if (!capsule) return -1;
  pdshmpy_dl_managed *m = PyCapsule_GetPointer(capsule, "dltensor");
  if (!m) goto fail;
  const pdshmpy_dl_tensor *dl = &m->dl_tensor;
  if (dl->device.device_type != PDSHMPY_DL_CPU) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "the tensor is not in CPU memory");
    goto fail;
  }
  if (dl->dtype.lanes != 1) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "a tensor of %d lanes per element", dl->dtype.lanes);
    goto fail;
  }
  uint64_t count = 1, want = 1;
  for (int d = dl->ndim - 1; d >= 0; d--) {
    if (dl->strides && dl->shape[d] != 1 && (uint64_t)dl->strides[d] != want) {
      pdshmpy_raise_msg(st, PDSHM_EINVAL, "the tensor is not contiguous");
      goto fail;
    }
    want *= (uint64_t)dl->shape[d];
    count *= (uint64_t)dl->shape[d];
  }
  out->data = (char *)dl->data + dl->byte_offset;
  out->dtype = dl->dtype;
  out->count = count;
  return 0;
fail:
  Py_CLEAR(out->capsule);
  return -1;
}

void pdshmpy_dl_release(pdshmpy_dl_borrowed *b) { Py_CLEAR(b->capsule); }
