/*
 * viewvar.c - a view as a collective's argument: the variable whose whole
 * current tensor a numpy array or torch tensor views, found among the live
 * Pins of a Segment (for Group's collectives and pdshm.mpi's).
 */
#include "pdshmpy.h"

/* The bytes of obj, a torch tensor (data_ptr(), contiguous) or anything with a
 * C-contiguous buffer (a numpy array): 0, or -1 with an exception. */
static int viewvar_bytes(pdshmpy_state *st, PyObject *obj, void **addr, size_t *len) {
  if (PyObject_HasAttrString(obj, "data_ptr") && PyObject_HasAttrString(obj, "is_contiguous")) {
    PyObject *c = PyObject_CallMethod(obj, "is_contiguous", NULL);
    int contiguous = c ? PyObject_IsTrue(c) : -1;
    Py_XDECREF(c);
    if (contiguous < 0) return -1;
    if (!contiguous) {
      pdshmpy_raise_msg(st, PDSHM_EINVAL, "a non-contiguous tensor is no whole variable");
      return -1;
    }
    PyObject *p = PyObject_CallMethod(obj, "data_ptr", NULL);
    PyObject *n = p ? PyObject_CallMethod(obj, "numel", NULL) : NULL;
    PyObject *e = n ? PyObject_CallMethod(obj, "element_size", NULL) : NULL;
    int rc = -1;
    if (e) {
      *addr = PyLong_AsVoidPtr(p);
      size_t numel = PyLong_AsSize_t(n), item = PyLong_AsSize_t(e);
      *len = numel * item;
      rc = PyErr_Occurred() ? -1 : 0;
    }
    Py_XDECREF(p);
    Py_XDECREF(n);
    Py_XDECREF(e);
    return rc;
  }
  Py_buffer b;
  if (PyObject_GetBuffer(obj, &b, PyBUF_C_CONTIGUOUS) < 0) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_BufferError))
      return -1;
    PyErr_Clear();
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "a collective takes a Var or a C-contiguous view of "
                                        "one (numpy array, torch tensor), not %R", Py_TYPE(obj));
    return -1;
  }
  *addr = b.buf;
  *len = (size_t)b.len;
  PyBuffer_Release(&b);
  return 0;
}

pdshm_var *pdshmpy_view_var(pdshmpy_seg *s, pdshm_seg *seg, PyObject *obj) {
  pdshmpy_state *st = PDSHMPY_STATE(s);
  void *addr;
  size_t len;
  if (viewvar_bytes(st, obj, &addr, &len) < 0) return NULL;
  for (pdshmpy_link *l = s->pins.next; l != &s->pins; l = l->next) {
    pdshmpy_pin *p = PDSHMPY_CONTAINER(l, pdshmpy_pin, link);
    if (p->mapping != seg || p->view.data != addr || p->view.nbytes != len) continue;
    pdshm_var *v = pdshm_varref_get(seg, p->var);
    /* the variable still has the bytes: not erased, not resized since */
    if (v && pdshm_tensor_data(v) == addr && pdshm_tensor_nbytes(v) == len) return v;
  }
  pdshmpy_raise_msg(st, PDSHM_EINVAL, "this %s is not a whole-tensor view of a variable of "
                    "segment %R (made by this Segment object, not resized since)",
                    Py_TYPE(obj)->tp_name, s->name);
  return NULL;
}

