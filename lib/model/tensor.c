/*
 * tensor.c - a variable's tensor value: dtype, shape, a 64-byte-aligned
 * buffer in the segment.
 *
 * Invariants:
 *  1. A resize is one journal under the scope's lock: the new buffer is built
 *     off to the side, and dtype, shape, buffer and size change together at
 *     the commit; a failed resize changes nothing.  The version is bumped
 *     by the same journal, after the other stores (an atomic add, since
 *     exclusive unlocks bump it under another lock): a committed resize is
 *     always announced, even when its process dies right after the commit.
 *  2. buf starts with struct pdshm_tensor_buf (its pin count, layout.h
 *     invariant 6); data is 64-byte aligned after it (blocks are 16-byte
 *     aligned, so each buffer carries that header and up to 48 bytes of
 *     slack), and data + nbytes stays inside buf.  Every tensor has a buffer,
 *     even of 0 bytes, so pdshm_tensor_data is non-NULL exactly for tensors,
 *     and every tensor can be pinned.
 *  3. A buffer is reused by a resize when it is big enough, no more than
 *     twice what is needed, and not pinned (the scope lock we hold keeps new
 *     pins out); otherwise the old one is freed at the commit, which orphans
 *     it instead when it is pinned (tensor_pins.c).
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "model/model.h"

#define TENSOR_SLACK (sizeof(struct pdshm_tensor_buf) + PDSHM_TENSOR_ALIGN - PDSHM_ALIGN)

static const uint8_t dtype_sizes[] = {
    [PDSHM_BOOL] = 1, [PDSHM_U8] = 1,  [PDSHM_I8] = 1,   [PDSHM_I16] = 2, [PDSHM_I32] = 4,
    [PDSHM_I64] = 8,  [PDSHM_F16] = 2, [PDSHM_BF16] = 2, [PDSHM_F32] = 4, [PDSHM_F64] = 8};

PDSHM_API size_t pdshm_dtype_size(pdshm_dtype dt) {
  return (unsigned)dt < sizeof dtype_sizes ? dtype_sizes[dt] : 0;
}

/* 0 when v is a tensor of an attachment usable here; EFORKED for a handle
 * inherited across fork() (nothing of the segment is read then); ETYPE for
 * anything else. */
static int tensor_check(const pdshm_var *v) {
  int rc;
  if (!pdshm__var_attached(v, &rc)) return rc == PDSHM_EFORKED ? rc : PDSHM_ETYPE;
  return pdshm__var_rec(v)->vtype == PDSHM_V_TENSOR ? 0 : PDSHM_ETYPE;
}
static bool is_tensor(const pdshm_var *v) { return tensor_check(v) == 0; }

/* The byte size of a shape, or an error for a bad or overflowing one. */
static int tensor_size(pdshm_dtype dt, int ndim, const int64_t *dims, uint64_t *bytes) {
  uint64_t n = pdshm_dtype_size(dt);
  if (!n) return pdshm__fail(PDSHM_EINVAL, "unknown dtype %d", (int)dt);
  if (ndim < 0 || ndim > PDSHM_NDIM_MAX)
    return pdshm__fail(PDSHM_EINVAL, "ndim %d is outside [0, %d]", ndim, PDSHM_NDIM_MAX);
  if (ndim && !dims) return pdshm__fail(PDSHM_EINVAL, "NULL dims");
  for (int i = 0; i < ndim; i++) {
    if (dims[i] < 0) return pdshm__fail(PDSHM_EINVAL, "dimension %d is negative", i);
    if (__builtin_mul_overflow(n, (uint64_t)dims[i], &n))
      return pdshm__fail(PDSHM_EOVERFLOW, "shape overflows 64 bits");
  }
  if (n > PDSHM_SIZE_MAX) return pdshm__fail(PDSHM_EOVERFLOW, "tensor larger than any segment");
  *bytes = n;
  return 0;
}

/* Invariant 3: the buffer that will hold nbytes (maybe the current one). */
static int tensor_buffer(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_var_rec *r,
                         uint64_t nbytes, pdshm_off_t *buf) {
  uint64_t need = nbytes + TENSOR_SLACK;
  if (r->buf && !pdshm__block_live(seg, r->buf, PDSHM_T_TENSOR, sizeof(struct pdshm_tensor_buf)))
    return pdshm__fail(PDSHM_EBADSEG, "the variable's buffer at %#llx is none (damaged)",
                       (unsigned long long)r->buf);
  if (r->buf) {
    size_t have = pdshm__alloc_usable(seg, r->buf);
    if (have >= need && have / 2 <= need && !pdshm__tensor_pinned(seg, r->buf)) {
      *buf = r->buf;
      return 0;
    }
  }
  int rc = pdshm__j_alloc(seg, ln, need, PDSHM_T_TENSOR, buf);
  if (rc) return rc;
  if (r->buf) pdshm__j_retire(seg, ln, r->buf);
  return 0;
}

struct resize_args {
  pdshm_dtype dt;
  int ndim;
  const int64_t *dims;
  uint64_t nbytes;
};

static int resize_locked(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_var_rec *r,
                         const struct resize_args *a) {
  pdshm_off_t buf;
  int rc = tensor_buffer(seg, ln, r, a->nbytes, &buf);
  if (rc) return rc;
  pdshm_off_t data = (buf + sizeof(struct pdshm_tensor_buf) + PDSHM_TENSOR_ALIGN - 1) &
                     ~(pdshm_off_t)(PDSHM_TENSOR_ALIGN - 1);
  /* Only the words that change are journaled (the scope's lock keeps the
   * others as they are): a resize to a shape of the same rank in the same
   * buffer stores its dims, its size and the version. */
  uint64_t dtype_ndim = (uint64_t)a->dt | (uint64_t)a->ndim << 32;
  if (r->dtype_ndim != dtype_ndim) pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, dtype_ndim), dtype_ndim);
  for (int i = 0; i < PDSHM_NDIM_MAX; i++)
    if (r->dims[i] != (i < a->ndim ? a->dims[i] : 0))
      pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, dims[i]), (uint64_t)(i < a->ndim ? a->dims[i] : 0));
  if (r->buf != buf) pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, buf), buf);
  if (r->data != data) pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, data), data);
  if (r->nbytes != a->nbytes) pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, nbytes), a->nbytes);
  if (r->vtype != PDSHM_V_TENSOR) pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, vtype), PDSHM_V_TENSOR);
  pdshm__j_bump(seg, ln, PDSHM_FOFF(seg, r, version)); /* invariant 1 */
  return 0;
}

PDSHM_API int pdshm_tensor_resize(pdshm_var *v, pdshm_dtype dt, int ndim, const int64_t *dims) {
  int rc;
  pdshm__fail_clear();
  pdshm_seg *seg = pdshm__var_seg(v, &rc);
  if (!seg) return rc;
  struct resize_args a = {.dt = dt, .ndim = ndim, .dims = dims};
  if ((rc = tensor_size(dt, ndim, dims, &a.nbytes))) return rc;
  struct pdshm_var_rec *r = pdshm__var_rec(v);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  rc = pdshm__var_j_begin(seg, ln, r, PDSHM_OP_RESIZE);
  if (!rc) {
    rc = resize_locked(seg, ln, r, &a);
    if (rc) pdshm__j_abort(seg, ln);
    else pdshm__j_commit(seg, ln);
  }
  pdshm__lane_put(ln);
  return rc;
}

PDSHM_API void *pdshm_tensor_data(const pdshm_var *v) {
  if (!is_tensor(v)) return NULL;
  const struct pdshm_var_rec *r = pdshm__var_rec(v);
  return (uint8_t *)(uintptr_t)r - r->self + r->data;
}

PDSHM_API int pdshm_tensor_dtype(const pdshm_var *v) {
  int rc = tensor_check(v);
  if (rc) return rc == PDSHM_ETYPE ? pdshm__fail(rc, "not a tensor") : rc;
  return (int)(pdshm__var_rec(v)->dtype_ndim & 0xffffffffu);
}

PDSHM_API int pdshm_tensor_ndim(const pdshm_var *v) {
  int rc = tensor_check(v);
  if (rc) return rc == PDSHM_ETYPE ? pdshm__fail(rc, "not a tensor") : rc;
  return (int)(pdshm__var_rec(v)->dtype_ndim >> 32);
}

PDSHM_API const int64_t *pdshm_tensor_dims(const pdshm_var *v) {
  return is_tensor(v) ? pdshm__var_rec(v)->dims : NULL;
}

PDSHM_API size_t pdshm_tensor_nbytes(const pdshm_var *v) {
  return is_tensor(v) ? (size_t)pdshm__var_rec(v)->nbytes : 0;
}
