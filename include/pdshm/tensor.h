/* pdshm/tensor.h - tensors: a variable's dtype, shape and data. */
#ifndef PDSHM_TENSOR_H
#define PDSHM_TENSOR_H

#include "pdshm/base.h"  /* PDSHM_API, the C types */
#include "pdshm/scope.h" /* pdshm_var */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Tensors ------------------------------------------------------------ */
#define PDSHM_NDIM_MAX 8
#define PDSHM_TENSOR_ALIGN 64 /* bytes: alignment of every tensor's data */
/* A tensor's element type. */
typedef enum { PDSHM_BOOL, PDSHM_U8, PDSHM_I8, PDSHM_I16, PDSHM_I32, PDSHM_I64,
               PDSHM_F16, PDSHM_BF16, PDSHM_F32, PDSHM_F64 } pdshm_dtype;

/* Makes v a tensor of that dtype and shape (ndim 0..PDSHM_NDIM_MAX, each dim
 * >= 0; a zero dim gives 0 bytes); data contents are unspecified afterwards.
 * EINVAL, EOVERFLOW, ENOMEM, ESTALE (v was erased), EBADSEG (its buffer is
 * damaged); a failure changes nothing. */
PDSHM_API int pdshm_tensor_resize(pdshm_var *v, pdshm_dtype dt, int ndim, const int64_t *dims);
/* The tensor as it is now.  A resize in any process frees the buffer and
 * changes the size, also one through another process's pdshm_var * of an
 * erased variable whose record v took over (see "Variables"): data and
 * nbytes read here hold only while nobody resizes v, and two such reads may
 * straddle a resize.  A pin's view (below) stays the bytes it describes
 * whatever becomes of v. */
PDSHM_API void *pdshm_tensor_data(const pdshm_var *v);     /* NULL unless a tensor */
PDSHM_API int pdshm_tensor_dtype(const pdshm_var *v);      /* or PDSHM_ETYPE */
PDSHM_API int pdshm_tensor_ndim(const pdshm_var *v);       /* or PDSHM_ETYPE */
PDSHM_API const int64_t *pdshm_tensor_dims(const pdshm_var *v); /* NULL unless a tensor */
PDSHM_API size_t pdshm_tensor_nbytes(const pdshm_var *v);  /* 0 unless a tensor */
PDSHM_API size_t pdshm_dtype_size(pdshm_dtype dt);         /* 0 for an unknown one */

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_TENSOR_H */
