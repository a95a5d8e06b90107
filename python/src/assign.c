/*
 * assign.c - Var.assign(src): copies an array-like into the variable,
 * resizing it to the source's dtype and shape.
 *
 * Sources, in this order: another Var (its pinned tensor, bfloat16 kept); an
 * object with the buffer protocol (numpy arrays, memoryview, bytes, ...); an
 * object with __dlpack__ on the CPU (torch tensors, bfloat16 included; a
 * tensor that requires grad is detached first); anything numpy.asarray
 * accepts.  A variable that holds a tensor of the source's dtype and shape
 * already is written in place, so that its views see the new values (and its
 * version does not move); any other is resized first (views keep the old
 * buffer).  The copy goes into a pin of the buffer (so a concurrent erase in
 * another process cannot make it write freed memory), strided sources are
 * gathered, overlapping ones go through a temporary, and a large copy runs
 * with the GIL released.
 */
#include "pdshmpy.h"
#include "dlpack.h"

#define COPY_NOGIL_BYTES (1 << 20)

typedef struct {
  const char *data;
  int dtype;
  int ndim;
  int64_t dims[PDSHM_NDIM_MAX];
  int64_t strides[PDSHM_NDIM_MAX]; /* bytes */
  size_t itemsize;
  Py_buffer buf;              /* when from the buffer protocol (buf.obj set) */
  pdshmpy_dl_managed *dl;     /* when from DLPack */
  PyObject *keep;             /* a Pin or a capsule */
} src_desc;

static void src_release(src_desc *s) {
  if (s->buf.obj) PyBuffer_Release(&s->buf);
  if (s->dl && s->dl->deleter) s->dl->deleter(s->dl);
  s->dl = NULL;
  Py_CLEAR(s->keep);
}

static void src_compact_strides(src_desc *s) {
  int64_t stride = (int64_t)s->itemsize;
  for (int i = s->ndim - 1; i >= 0; i--) {
    s->strides[i] = stride;
    stride *= s->dims[i] ? s->dims[i] : 1;
  }
}

static int src_from_var(pdshmpy_var *var, src_desc *s) {
  pdshmpy_pin *p = pdshmpy_pin_new(var);
  if (!p) return -1;
  s->keep = (PyObject *)p;
  s->data = p->view.data;
  s->dtype = p->view.dtype;
  s->ndim = p->view.ndim;
  memcpy(s->dims, p->view.dims, sizeof s->dims);
  s->itemsize = pdshm_dtype_size((pdshm_dtype)s->dtype);
  src_compact_strides(s);
  return 0;
}

/* 1: done; 0: o has no usable buffer (no error set); -1: error. */
static int src_from_buffer(pdshmpy_state *st, PyObject *o, src_desc *s) {
  if (!PyObject_CheckBuffer(o)) return 0;
  if (PyObject_GetBuffer(o, &s->buf, PyBUF_RECORDS_RO) < 0) {
    PyErr_Clear();
    return 0;
  }
  s->dtype = pdshmpy_dtype_from_format(s->buf.format, s->buf.itemsize);
  if (s->dtype < 0) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "cannot assign elements of buffer format '%s'",
                      s->buf.format ? s->buf.format : "B");
    return -1;
  }
  if (s->buf.ndim > PDSHM_NDIM_MAX || s->buf.suboffsets) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "cannot assign a %d-dimensional or indirect buffer",
                      s->buf.ndim);
    return -1;
  }
  s->data = s->buf.buf;
  s->ndim = s->buf.ndim;
  s->itemsize = (size_t)s->buf.itemsize;
  for (int i = 0; i < s->ndim; i++) s->dims[i] = s->buf.shape[i];
  if (s->buf.strides) {
    for (int i = 0; i < s->ndim; i++) s->strides[i] = s->buf.strides[i];
  } else {
    src_compact_strides(s);
  }
  return 1;
}

/* The capsule o.__dlpack__() gives (detaching a torch tensor that requires
 * grad), or NULL without an error when o cannot give one. */
static PyObject *dl_capsule_of(PyObject *o) {
  PyObject *cap = PyObject_CallMethod(o, "__dlpack__", NULL);
  if (!cap && PyObject_HasAttrString(o, "detach")) {
    PyErr_Clear();
    PyObject *d = PyObject_CallMethod(o, "detach", NULL);
    cap = d ? PyObject_CallMethod(d, "__dlpack__", NULL) : NULL;
    Py_XDECREF(d);
  }
  if (!cap || !PyCapsule_IsValid(cap, "dltensor")) {
    Py_XDECREF(cap);
    PyErr_Clear();
    return NULL;
  }
  return cap;
}

/* 1: done; 0: o cannot be read through DLPack (no error set); -1: error. */
static int src_from_dlpack(pdshmpy_state *st, PyObject *o, src_desc *s) {
  if (!PyObject_HasAttrString(o, "__dlpack__")) return 0;
  PyObject *cap = dl_capsule_of(o);
  if (!cap) return 0;
  pdshmpy_dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
  if (!m || PyCapsule_SetName(cap, "used_dltensor") < 0) {
    Py_DECREF(cap);
    return -1;
  }
  s->keep = cap;
  s->dl = m;
  const pdshmpy_dl_tensor *t = &m->dl_tensor;
  s->dtype = pdshmpy_dtype_from_dl(t->dtype);
  if (t->device.device_type != PDSHMPY_DL_CPU && t->device.device_type != PDSHMPY_DL_CUDA_HOST) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "cannot assign a tensor on DLPack device %d (not the CPU)",
                      (int)t->device.device_type);
    return -1;
  }
  if (s->dtype < 0 || t->ndim < 0 || t->ndim > PDSHM_NDIM_MAX) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "cannot assign a DLPack tensor of code %d, %d bits, %d dims",
                      t->dtype.code, t->dtype.bits, (int)t->ndim);
    return -1;
  }
  s->data = (const char *)t->data + t->byte_offset;
  s->ndim = t->ndim;
  s->itemsize = pdshm_dtype_size((pdshm_dtype)s->dtype);
  for (int i = 0; i < s->ndim; i++) s->dims[i] = t->shape[i];
  if (t->strides) {
    for (int i = 0; i < s->ndim; i++) s->strides[i] = t->strides[i] * (int64_t)s->itemsize;
  } else {
    src_compact_strides(s);
  }
  return 1;
}

static int src_from_numpy(pdshmpy_state *st, PyObject *o, src_desc *s) {
  PyObject *asarray = pdshmpy_np_asarray(st);
  PyObject *arr = asarray ? PyObject_CallOneArg(asarray, o) : NULL;
  if (!arr) return -1;
  int rc = src_from_buffer(st, arr, s);
  Py_DECREF(arr); /* the buffer keeps the array */
  if (rc == 0) PyErr_Format(PyExc_TypeError, "cannot assign a %.100s", Py_TYPE(o)->tp_name);
  return rc == 1 ? 0 : -1;
}

static int src_open(pdshmpy_state *st, PyObject *o, src_desc *s) {
  if (Py_IS_TYPE(o, st->var_type)) return src_from_var((pdshmpy_var *)o, s);
  int rc = src_from_buffer(st, o, s);
  if (!rc) rc = src_from_dlpack(st, o, s);
  if (!rc) return src_from_numpy(st, o, s);
  return rc < 0 ? -1 : 0;
}

/* ---- the copy ----------------------------------------------------------------------------- */

static char *copy_dim(char *dst, const char *src, int d, const src_desc *s) {
  if (d == s->ndim) {
    memcpy(dst, src, s->itemsize);
    return dst + s->itemsize;
  }
  if (d == s->ndim - 1 && s->strides[d] == (int64_t)s->itemsize) {
    size_t n = (size_t)s->dims[d] * s->itemsize;
    memcpy(dst, src, n);
    return dst + n;
  }
  for (int64_t i = 0; i < s->dims[d]; i++) dst = copy_dim(dst, src + i * s->strides[d], d + 1, s);
  return dst;
}

/* The bytes [lo, hi) the source spans. */
static void src_extent(const src_desc *s, const char **lo, const char **hi) {
  const char *a = s->data, *b = s->data + s->itemsize;
  for (int i = 0; i < s->ndim; i++) {
    if (s->dims[i] == 0) {
      *lo = *hi = s->data;
      return;
    }
    int64_t span = (s->dims[i] - 1) * s->strides[i];
    if (span < 0) a += span;
    else b += span;
  }
  *lo = a;
  *hi = b;
}

static int copy_into(char *dst, size_t nbytes, const src_desc *s) {
  if (!nbytes) return 0;
  const char *lo, *hi;
  src_extent(s, &lo, &hi);
  char *tmp = NULL;
  src_desc c = *s;
  if (lo < dst + nbytes && dst < hi) { /* overlapping: gather through a copy */
    if (!(tmp = PyMem_RawMalloc((size_t)(hi - lo)))) return -1;
    memcpy(tmp, lo, (size_t)(hi - lo));
    c.data = tmp + (s->data - lo);
  }
  if (nbytes >= COPY_NOGIL_BYTES) {
    PDSHMPY_NOGIL(copy_dim(dst, c.data, 0, &c));
  } else {
    copy_dim(dst, c.data, 0, &c);
  }
  PyMem_RawFree(tmp);
  return 0;
}

/* Does v hold a tensor of the source's dtype and shape already? */
static int same_layout(const pdshm_var *v, const src_desc *s) {
  const int64_t *dims = pdshm_tensor_dims(v);
  return dims && pdshm_tensor_dtype(v) == s->dtype && pdshm_tensor_ndim(v) == s->ndim &&
         !memcmp(dims, s->dims, sizeof(int64_t) * (size_t)s->ndim);
}

PyObject *pdshmpy_var_assign(PyObject *self, PyObject *o) {
  pdshmpy_state *st = PDSHMPY_STATE(self);
  pdshmpy_var *var = (pdshmpy_var *)self;
  src_desc s;
  memset(&s, 0, sizeof s);
  PyObject *r = NULL;
  pdshmpy_pin *p = NULL;
  if (src_open(st, o, &s) < 0) goto done;
  pdshm_var *v = pdshmpy_var_begin(var);
  if (!v) goto done;
  int rc = 0;
  if (!same_layout(v, &s))
    PDSHMPY_NOGIL(rc = pdshm_tensor_resize(v, (pdshm_dtype)s.dtype, s.ndim, s.dims));
  pdshmpy_seg_unhold(var->seg);
  if (rc) {
    pdshmpy_raise(st, rc, "resize for assign");
    goto done;
  }
  if (!(p = pdshmpy_pin_new(var))) goto done;
  if (p->view.dtype != s.dtype || p->view.ndim != s.ndim ||
      memcmp(p->view.dims, s.dims, sizeof(int64_t) * (size_t)s.ndim)) {
    pdshmpy_raise_msg(st, PDSHM_EAGAIN, "the variable was resized by another process meanwhile");
    goto done;
  }
  if (copy_into(p->view.data, p->view.nbytes, &s) < 0) {
    PyErr_NoMemory();
    goto done;
  }
  r = Py_NewRef(Py_None);
done:
  Py_XDECREF(p);
  src_release(&s);
  return r;
}
