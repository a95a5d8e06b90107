/*
 * dlpack.c - Var.__dlpack__ and __dlpack_device__: exporting a tensor to
 * DLPack consumers (torch.from_dlpack) without a copy.
 *
 * The DLManagedTensor's manager_ctx is a Pin: the bytes stay allocated until
 * the consumer's deleter runs.  The deleter may be called without the GIL
 * (torch frees tensors from any thread): it takes the GIL to drop the Pin.
 * A capsule never consumed (still named "dltensor") runs the deleter itself.
 * Newer consumers' max_version is accepted and answered with this
 * unversioned capsule, as the protocol allows; dl_device must be the CPU and
 * copy cannot be True (the export is in place).
 * dtypes go as dtype.c's table says: bfloat16 as kDLBfloat (torch.bfloat16);
 * bool as kDLUInt 8 bits, because DLPack 0.6 and torch 1.13 have no bool.
 */
#include "pdshmpy.h"

typedef struct {
  pdshmpy_dl_managed m;
  int64_t shape[PDSHM_NDIM_MAX];
  int64_t strides[PDSHM_NDIM_MAX];
} dl_export;

static void dl_deleter(pdshmpy_dl_managed *m) {
  if (!m) return;
  if (Py_IsInitialized()) {
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF((PyObject *)m->manager_ctx);
    PyGILState_Release(g);
  }
  PyMem_RawFree(m);
}

static void dl_capsule_destructor(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, "dltensor")) return; /* consumed: the consumer owns it */
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  pdshmpy_dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
  if (m && m->deleter) m->deleter(m);
  PyErr_Restore(type, value, tb);
}

/* dl_device: None or (kDLCPU, 0). */
static int dl_check_device(PyObject *device) {
  if (device == Py_None) return 0;
  int type, id;
  if (!PyTuple_Check(device)) { /* PyArg_ParseTuple takes a tuple only */
    PyErr_Format(PyExc_TypeError, "dl_device must be a (type, id) pair, not %.100s",
                 Py_TYPE(device)->tp_name);
    return -1;
  }
  if (!PyArg_ParseTuple(device, "ii;dl_device must be a (type, id) pair", &type, &id)) return -1;
  if (type == PDSHMPY_DL_CPU && id == 0) return 0;
  PyErr_Format(PyExc_BufferError, "pdshm tensors are on the CPU (1, 0), not on (%d, %d)", type,
               id);
  return -1;
}

PyObject *pdshmpy_var_dlpack(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *max_version = Py_None, *device = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kwlist, &stream, &max_version,
                                   &device, &copy))
    return NULL;
  if (stream != Py_None) {
    PyErr_SetString(PyExc_ValueError, "pdshm tensors are on the CPU: stream must be None");
    return NULL;
  }
  if (dl_check_device(device) < 0) return NULL;
  if (copy == Py_True) {
    PyErr_SetString(PyExc_BufferError, "pdshm exports its tensors in place, not copies");
    return NULL;
  }
  pdshmpy_pin *p = pdshmpy_pin_new((pdshmpy_var *)self);
  if (!p) return NULL;
  if (p->readonly) {
    Py_DECREF(p);
    PyErr_SetString(PyExc_BufferError,
                    "DLPack cannot say read-only: the segment is attached read-only");
    return NULL;
  }
  dl_export *e = PyMem_RawCalloc(1, sizeof *e);
  if (!e) {
    Py_DECREF(p);
    return PyErr_NoMemory();
  }
  size_t item = pdshm_dtype_size((pdshm_dtype)p->view.dtype);
  for (int i = 0; i < p->view.ndim; i++) {
    e->shape[i] = p->view.dims[i];
    e->strides[i] = p->strides[i] / (Py_ssize_t)item;
  }
  e->m.dl_tensor = (pdshmpy_dl_tensor){
      .data = p->view.data,
      .device = {PDSHMPY_DL_CPU, 0},
      .ndim = p->view.ndim,
      .dtype = pdshmpy_dtype_dl(p->view.dtype),
      .shape = e->shape,
      .strides = e->strides,
      .byte_offset = 0,
  };
  e->m.manager_ctx = p; /* the reference pdshmpy_pin_new gave */
  e->m.deleter = dl_deleter;
  PyObject *cap = PyCapsule_New(&e->m, "dltensor", dl_capsule_destructor);
  if (!cap) dl_deleter(&e->m);
  return cap;
}

PyObject *pdshmpy_var_dlpack_device(PyObject *self, PyObject *unused) {
  if (!pdshmpy_var_get((pdshmpy_var *)self)) return NULL;
  return Py_BuildValue("(ii)", PDSHMPY_DL_CPU, 0);
}
