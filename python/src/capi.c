/*
 * capi.c - the capsule pdshm._pdshm._c_api (pdshmpy_capi.h): what another
 * extension module of the package needs of this one's objects.
 */
#include "pdshmpy.h"
#include "pdshmpy_capi.h"

static int capi_var_ref(PyObject *module, PyObject *segment, PyObject *obj, pdshm_varref *out) {
  pdshmpy_state *st = PyModule_GetState(module);
  if (!PyObject_TypeCheck(segment, st->segment_type)) {
    PyErr_Format(PyExc_TypeError, "a pdshm.Segment is needed, not %R", Py_TYPE(segment));
    return -1;
  }
  pdshmpy_seg *s = (pdshmpy_seg *)segment;
  pdshm_seg *seg = pdshmpy_seg_get(s);
  if (!seg) return -1;
  if (PyObject_TypeCheck(obj, st->var_type)) {
    pdshmpy_var *var = (pdshmpy_var *)obj;
    int same = PyObject_RichCompareBool(var->seg->name, s->name, Py_EQ);
    if (same <= 0) {
      if (same == 0)
        pdshmpy_raise_msg(st, PDSHM_EINVAL, "the variable lives in segment %R, not %R",
                          var->seg->name, s->name);
      return -1;
    }
    /* the offsets are the segment's: any attachment of it resolves them */
    if (!pdshm_varref_get(seg, var->ref)) {
      pdshmpy_raise_msg(st, PDSHM_ESTALE, "the variable was erased or its scope died");
      return -1;
    }
    *out = var->ref;
    return 0;
  }
  pdshm_var *v = pdshmpy_view_var(s, seg, obj);
  if (!v) return -1;
  *out = pdshm_var_ref(v);
  return 0;
}

static PyObject *capi_raise(PyObject *module, int rc, const char *msg) {
  return pdshmpy_raise_msg(PyModule_GetState(module), rc, "%s", msg);
}

static const pdshmpy_capi capi = {
    .version = PDSHMPY_CAPI_VERSION,
    .var_ref = capi_var_ref,
    .raise = capi_raise,
};

int pdshmpy_capi_init(PyObject *module) {
  PyObject *c = PyCapsule_New((void *)&capi, PDSHMPY_CAPI_CAPSULE, NULL);
  if (!c) return -1;
  int rc = PyModule_AddObjectRef(module, "_c_api", c);
  Py_DECREF(c);
  return rc;
}
