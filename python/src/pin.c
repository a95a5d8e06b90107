/*
 * pin.c - Pin: one pinned tensor buffer (pdshm_tensor_pin), the object every
 * view holds.  While a Pin lives, an erase, resize, scope death or detach in
 * any process leaves its bytes allocated; the Pin's Segment stays attached
 * (invariant 1 of pdshmpy.h), and in a fork child the inherited mapping that
 * holds its bytes stays mapped (pdshmpy_mapping).  A Pin exports its bytes as a flat buffer
 * ('B'), which __array_interface__ hands to numpy as its data object.
 */
#include "pdshmpy.h"

#define PN(o) ((pdshmpy_pin *)(o))

static void pin_fill_layout(pdshmpy_pin *p) {
  size_t item = pdshm_dtype_size((pdshm_dtype)p->view.dtype);
  Py_ssize_t stride = (Py_ssize_t)item;
  for (int i = p->view.ndim - 1; i >= 0; i--) {
    p->shape[i] = (Py_ssize_t)p->view.dims[i];
    p->strides[i] = stride;
    stride *= p->shape[i] ? p->shape[i] : 1;
  }
}

/* The rest of pdshmpy_pin_new, the Segment held. */
static void pin_init(pdshmpy_pin *p, pdshmpy_var *var, pdshm_pin *pin,
                     const pdshm_tensor_view *view) {
  p->seg = (pdshmpy_seg *)Py_NewRef(var->seg);
  p->pin = pin;
  p->mapping = var->seg->seg;
  p->view = *view;
  p->var = var->ref;
  p->readonly = (var->seg->flags & PDSHM_RDONLY) != 0;
  pin_fill_layout(p);
  p->seg->npins++;
  p->link.drop = NULL; /* a view outlives detach() */
  pdshmpy_list_add(&p->seg->pins, &p->link);
}

pdshmpy_pin *pdshmpy_pin_new(pdshmpy_var *var) {
  pdshmpy_state *st = PDSHMPY_STATE(var);
  pdshm_var *v = pdshmpy_var_begin(var);
  if (!v) return NULL;
  pdshm_pin *pin = NULL;
  pdshm_tensor_view view;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_tensor_pin(v, &pin, &view));
  pdshmpy_pin *p = rc ? NULL : PyObject_New(pdshmpy_pin, st->pin_type);
  if (rc == PDSHM_ETYPE) pdshmpy_raise_msg(st, rc, "the variable holds no tensor");
  else if (rc) pdshmpy_raise(st, rc, "pinning the tensor");
  else if (!p) PDSHMPY_NOGIL(pdshm_tensor_unpin(pin));
  else pin_init(p, var, pin, &view);
  pdshmpy_seg_unhold(var->seg);
  return p;
}

static void pin_dealloc(PyObject *self) {
  pdshmpy_pin *p = PN(self);
  PyTypeObject *tp = Py_TYPE(self);
  pdshm_pin *pin = p->pin;
  p->pin = NULL;
  pdshmpy_list_del(&p->link); /* before the GIL goes: nobody finds it meanwhile */
  /* the bytes go back under the heap's lock (in a fork child: frees the
   * handle only); this pin's count keeps the Segment attached meanwhile */
  if (pin) PDSHMPY_NOGIL(pdshm_tensor_unpin(pin));
  pdshmpy_seg_pin_gone(p->seg, p->mapping);
  Py_CLEAR(p->seg);
  PyObject_Free(self);
  Py_DECREF(tp);
}

static int pin_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  pdshmpy_pin *p = PN(self);
  return PyBuffer_FillInfo(view, self, p->view.data, (Py_ssize_t)p->view.nbytes, p->readonly,
                           flags);
}

static PyObject *pin_get_nbytes(PyObject *self, void *closure) {
  return PyLong_FromSize_t(PN(self)->view.nbytes);
}

static PyObject *pin_get_version(PyObject *self, void *closure) {
  return PyLong_FromUnsignedLongLong(PN(self)->view.version);
}

static PyGetSetDef pin_getset[] = {
    {"nbytes", pin_get_nbytes, NULL, "Bytes of the pinned buffer.", NULL},
    {"version", pin_get_version, NULL, "The variable's version when pinned.", NULL},
    {NULL}};

static PyType_Slot pin_slots[] = {
    {Py_tp_doc,
     "A pinned tensor buffer: the bytes stay allocated while it lives (flat 'B' buffer)."},
    {Py_tp_dealloc, pin_dealloc},
    {Py_tp_getset, pin_getset},
    {Py_bf_getbuffer, pin_getbuffer},
    {0, NULL}};

PyType_Spec pdshmpy_pin_spec = {
    .name = "pdshm.Pin",
    .basicsize = sizeof(pdshmpy_pin),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = pin_slots,
};
