/*
 * varref.c - VarRef: Var.ref(), a callable weak reference.  r() is a Var of
 * the same variable while it lives, None once it was erased, its scope died
 * or its segment was detached.
 */
#include "pdshmpy.h"

typedef struct {
  PyObject_HEAD
  pdshmpy_var *var; /* strong: a Var is itself only a weak handle */
} varref;

#define RF(o) ((varref *)(o))

PyObject *pdshmpy_var_ref(PyObject *self, PyObject *unused) {
  varref *r = PyObject_New(varref, PDSHMPY_STATE(self)->varref_type);
  if (!r) return NULL;
  r->var = (pdshmpy_var *)Py_NewRef(self);
  return (PyObject *)r;
}

static PyObject *varref_call(PyObject *self, PyObject *args, PyObject *kw) {
  if ((kw && PyDict_GET_SIZE(kw)) || PyTuple_GET_SIZE(args)) {
    PyErr_SetString(PyExc_TypeError, "a VarRef is called without arguments");
    return NULL;
  }
  pdshmpy_var *var = RF(self)->var;
  if (var->seg->closed) Py_RETURN_NONE;
  if (!pdshmpy_var_get(var)) {
    if (!PyErr_ExceptionMatches(PDSHMPY_STATE(self)->Stale)) return NULL;
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return Py_NewRef((PyObject *)var);
}

static void varref_dealloc(PyObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  Py_CLEAR(RF(self)->var);
  tp->tp_free(self);
  Py_DECREF(tp);
}

static PyType_Slot varref_slots[] = {
    {Py_tp_doc, "A weak reference to a variable (Var.ref()): call it for the Var or None."},
    {Py_tp_dealloc, varref_dealloc},
    {Py_tp_call, varref_call},
    {0, NULL}};

PyType_Spec pdshmpy_varref_spec = {
    .name = "pdshm.VarRef",
    .basicsize = sizeof(varref),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = varref_slots,
};
