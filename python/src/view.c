/*
 * view.c - the zero-copy views of a Var: the buffer protocol (memoryview,
 * np.asarray), __array_interface__ and numpy().  Each export holds a Pin for
 * as long as it lives: the buffer protocol keeps it in Py_buffer.internal,
 * the array interface hands it to numpy as the array's data object.
 */
#include "pdshmpy.h"

int pdshmpy_var_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  pdshmpy_pin *p = pdshmpy_pin_new((pdshmpy_var *)self);
  if (!p) return -1;
  if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && p->readonly) {
    Py_DECREF(p);
    PyErr_SetString(PyExc_BufferError, "the segment is attached read-only");
    return -1;
  }
  view->obj = Py_NewRef(self);
  view->buf = p->view.data;
  view->len = (Py_ssize_t)p->view.nbytes;
  view->readonly = p->readonly;
  view->itemsize = (Py_ssize_t)pdshm_dtype_size((pdshm_dtype)p->view.dtype);
  view->format = (flags & PyBUF_FORMAT) ? (char *)pdshmpy_dtype_format(p->view.dtype) : NULL;
  view->ndim = (flags & PyBUF_ND) == PyBUF_ND ? p->view.ndim : 1;
  view->shape = (flags & PyBUF_ND) == PyBUF_ND ? p->shape : NULL;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? p->strides : NULL;
  view->suboffsets = NULL;
  view->internal = p;
  /* The tensor is C-contiguous: a request for Fortran order fails unless
   * both orders coincide (at most one dimension above 1). */
  if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && view->ndim > 1 &&
      !PyBuffer_IsContiguous(view, 'F')) {
    view->internal = NULL;
    Py_CLEAR(view->obj);
    Py_DECREF(p);
    PyErr_SetString(PyExc_BufferError, "the tensor is C-contiguous, not Fortran-contiguous");
    return -1;
  }
  return 0;
}

void pdshmpy_var_releasebuffer(PyObject *self, Py_buffer *view) {
  PyObject *pin = view->internal;
  view->internal = NULL; /* before the Pin's dealloc releases the GIL */
  Py_XDECREF(pin);
}

PyObject *pdshmpy_var_array_interface(PyObject *self, void *closure) {
  pdshmpy_pin *p = pdshmpy_pin_new((pdshmpy_var *)self);
  if (!p) return NULL;
  PyObject *shape = PyTuple_New(p->view.ndim);
  for (int i = 0; shape && i < p->view.ndim; i++) {
    PyObject *d = PyLong_FromSsize_t(p->shape[i]);
    if (!d) Py_CLEAR(shape);
    else PyTuple_SET_ITEM(shape, i, d);
  }
  PyObject *r = shape ? Py_BuildValue("{s:i,s:N,s:s,s:O,s:O}", "version", 3, "shape", shape,
                                      "typestr", pdshmpy_dtype_typestr(p->view.dtype), "data",
                                      (PyObject *)p, "strides", Py_None)
                      : NULL;
  Py_DECREF(p);
  return r;
}

PyObject *pdshmpy_var_numpy(PyObject *self, PyObject *unused) {
  PyObject *asarray = pdshmpy_np_asarray(PDSHMPY_STATE(self));
  return asarray ? PyObject_CallOneArg(asarray, self) : NULL;
}
