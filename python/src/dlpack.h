/*
 * dlpack.h - the DLPack 0.6 ABI (as torch 1.13 speaks it), declared from the
 * specification: a capsule named "dltensor" holds a DLManagedTensor; the
 * consumer renames it "used_dltensor" and calls the deleter when done.
 */
#ifndef PDSHMPY_DLPACK_H
#define PDSHMPY_DLPACK_H

#include <stdint.h>

enum { PDSHMPY_DL_CPU = 1, PDSHMPY_DL_CUDA_HOST = 3 };            /* DLDeviceType */
enum { PDSHMPY_DL_INT = 0, PDSHMPY_DL_UINT = 1, PDSHMPY_DL_FLOAT = 2,
       PDSHMPY_DL_BFLOAT = 4, PDSHMPY_DL_COMPLEX = 5, PDSHMPY_DL_BOOL = 6 };                 /* DLDataTypeCode */

typedef struct {
  int32_t device_type;
  int32_t device_id;
} pdshmpy_dl_device;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} pdshmpy_dl_dtype;

typedef struct {
  void *data;
  pdshmpy_dl_device device;
  int32_t ndim;
  pdshmpy_dl_dtype dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL: compact row-major */
  uint64_t byte_offset;
} pdshmpy_dl_tensor;

typedef struct pdshmpy_dl_managed {
  pdshmpy_dl_tensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct pdshmpy_dl_managed *self);
} pdshmpy_dl_managed;

#endif
