/*
 * var.c - the Var type: a weak reference (segment, offset, generation) to a
 * variable, resolved with pdshm_varref_get at every use.
 *
 * Invariants:
 *  1. No pdshm_var * is kept across calls: each method resolves, acts, and
 *     forgets it.  A variable erased (or whose scope died) in any process
 *     raises pdshm.Stale.
 *  2. Strings the segment holds are copied with a bound (PDSHM_NAME_MAX) and
 *     the reference is checked again after the copy, so a concurrent erase in
 *     another process gives the old value or Stale, never garbage.
 *  3. Tensor metadata (dtype, dims) is read between two reads of the version,
 *     and read again when a resize came in between.
 */
#include "pdshmpy.h"

#define VR(o) ((pdshmpy_var *)(o))

PyObject *pdshmpy_var_wrap_ref(pdshmpy_seg *seg, pdshm_varref ref, PyObject *scope_path,
                               PyObject *search_path) {
  pdshmpy_state *st = PDSHMPY_STATE(seg);
  pdshmpy_var *o = PyObject_New(pdshmpy_var, st->var_type);
  if (!o) return NULL;
  o->seg = (pdshmpy_seg *)Py_NewRef(seg);
  o->ref = ref;
  o->scope_path = Py_XNewRef(scope_path);
  o->search_path = scope_path ? NULL : Py_XNewRef(search_path);
  o->weakrefs = NULL;
  return (PyObject *)o;
}

pdshm_var *pdshmpy_var_get(pdshmpy_var *self) {
  pdshm_seg *seg = pdshmpy_seg_get(self->seg);
  if (!seg) return NULL;
  pdshm_var *v = pdshm_varref_get(seg, self->ref);
  if (!v)
    pdshmpy_raise_msg(PDSHMPY_STATE(self), PDSHM_ESTALE,
                      "the variable was erased or its scope died");
  return v;
}

pdshm_var *pdshmpy_var_begin(pdshmpy_var *self) {
  pdshm_var *v = pdshmpy_var_get(self);
  if (v) pdshmpy_seg_hold(self->seg);
  return v;
}

int pdshmpy_var_still(pdshmpy_var *self, pdshm_var *v) {
  if (self->seg->seg && pdshm_varref_get(self->seg->seg, self->ref) == v) return 0;
  pdshmpy_raise_msg(PDSHMPY_STATE(self), PDSHM_ESTALE, "the variable was erased or its scope died");
  return -1;
}

PyObject *pdshmpy_str_from_seg(const char *p) {
  if (!p) p = "";
  return PyUnicode_DecodeUTF8(p, (Py_ssize_t)strnlen(p, PDSHM_NAME_MAX), "replace");
}

/* A str copied from the segment, valid only if the variable is still there. */
static PyObject *var_copied(pdshmpy_var *self, pdshm_var *v, const char *p) {
  PyObject *s = pdshmpy_str_from_seg(p);
  if (s && pdshmpy_var_still(self, v) < 0) Py_CLEAR(s);
  return s;
}

/* ---- names, label, operators ------------------------------------------------------------- */

static PyObject *var_get_name(PyObject *self, void *closure) {
  pdshm_var *v = pdshmpy_var_get(VR(self));
  return v ? var_copied(VR(self), v, pdshm_var_name(v)) : NULL;
}

static PyObject *var_get_label(PyObject *self, void *closure) {
  pdshm_var *v = pdshmpy_var_get(VR(self));
  return v ? var_copied(VR(self), v, pdshm_var_label(v)) : NULL;
}

static int var_set_label(PyObject *self, PyObject *value, void *closure) {
  const char *l = NULL;
  if (value && value != Py_None && !(l = pdshmpy_utf8(value, "label"))) return -1;
  pdshm_var *v = pdshmpy_var_begin(VR(self));
  if (!v) return -1;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_var_set_label(v, l));
  pdshmpy_seg_unhold(VR(self)->seg);
  if (rc) {
    pdshmpy_raise(PDSHMPY_STATE(self), rc, "label");
    return -1;
  }
  return 0;
}

typedef int (*op_adder)(pdshm_var *, const char *);
typedef int (*op_lister)(const pdshm_var *, const char **, int);

static PyObject *var_add_op(PyObject *self, PyObject *op, op_adder add) {
  const char *o = pdshmpy_utf8(op, "operator name");
  if (!o) return NULL;
  pdshm_var *v = pdshmpy_var_begin(VR(self));
  if (!v) return NULL;
  int rc;
  PDSHMPY_NOGIL(rc = add(v, o));
  pdshmpy_seg_unhold(VR(self)->seg);
  if (rc) return pdshmpy_raise(PDSHMPY_STATE(self), rc, "operator");
  Py_RETURN_NONE;
}

static PyObject *var_add_reader(PyObject *self, PyObject *op) {
  return var_add_op(self, op, pdshm_var_add_reader);
}

static PyObject *var_add_writer(PyObject *self, PyObject *op) {
  return var_add_op(self, op, pdshm_var_add_writer);
}

static PyObject *var_ops(PyObject *self, op_lister list) {
  pdshm_var *v = pdshmpy_var_get(VR(self));
  if (!v) return NULL;
  const char *small[32], **ops = small;
  int cap = 32, n;
  while ((n = list(v, ops, cap)) > cap) {
    if (ops != small) PyMem_Free(ops);
    cap = n;
    if (!(ops = PyMem_New(const char *, cap))) return PyErr_NoMemory();
  }
  PyObject *r = n < 0 ? pdshmpy_raise(PDSHMPY_STATE(self), n, "operators") : PyList_New(n);
  for (int i = 0; r && i < n; i++) {
    PyObject *s = pdshmpy_str_from_seg(ops[i]);
    if (!s) Py_CLEAR(r);
    else PyList_SET_ITEM(r, i, s);
  }
  if (ops != small) PyMem_Free(ops);
  if (r && pdshmpy_var_still(VR(self), v) < 0) Py_CLEAR(r);
  return r;
}

static PyObject *var_get_readers(PyObject *self, void *closure) {
  return var_ops(self, pdshm_var_readers);
}

static PyObject *var_get_writers(PyObject *self, void *closure) {
  return var_ops(self, pdshm_var_writers);
}

/* ---- version and tensor metadata ---------------------------------------------------------- */

static PyObject *var_get_version(PyObject *self, void *closure) {
  pdshm_var *v = pdshmpy_var_get(VR(self));
  return v ? PyLong_FromUnsignedLongLong(pdshm_var_version(v)) : NULL;
}

static PyObject *var_get_key(PyObject *self, void *closure) {
  pdshm_var *v = pdshmpy_var_get(VR(self));
  if (!v) return NULL;
  pdshm_varref r = pdshm_var_ref(v);
  return Py_BuildValue("(KK)", (unsigned long long)r.off, (unsigned long long)r.gen);
}

typedef struct {
  int dtype; /* < 0: not a tensor */
  int ndim;
  int64_t dims[PDSHM_NDIM_MAX];
  size_t nbytes;
} var_meta;

/* Reads the tensor's metadata consistently (invariant 3); -1 with an error. */
static int var_read_meta(pdshmpy_var *self, var_meta *m) {
  for (int tries = 0; tries < 100; tries++) {
    pdshm_var *v = pdshmpy_var_get(self);
    if (!v) return -1;
    uint64_t ver = pdshm_var_version(v);
    m->dtype = pdshm_tensor_dtype(v);
    m->ndim = m->dtype < 0 ? 0 : pdshm_tensor_ndim(v);
    const int64_t *dims = pdshm_tensor_dims(v);
    if (m->ndim < 0 || m->ndim > PDSHM_NDIM_MAX || (m->ndim > 0 && !dims)) continue;
    if (m->ndim) memcpy(m->dims, dims, sizeof(int64_t) * (size_t)m->ndim);
    m->nbytes = pdshm_tensor_nbytes(v);
    if (pdshmpy_var_still(self, v) < 0) return -1;
    if (pdshm_var_version(v) == ver) return 0;
  }
  pdshmpy_raise_msg(PDSHMPY_STATE(self), PDSHM_EAGAIN, "the tensor kept changing while read");
  return -1;
}

static PyObject *var_get_dtype(PyObject *self, void *closure) {
  var_meta m;
  if (var_read_meta(VR(self), &m) < 0) return NULL;
  if (m.dtype < 0) Py_RETURN_NONE;
  return PyUnicode_FromString(pdshmpy_dtype_name(m.dtype));
}

static PyObject *var_get_shape(PyObject *self, void *closure) {
  var_meta m;
  if (var_read_meta(VR(self), &m) < 0) return NULL;
  if (m.dtype < 0) Py_RETURN_NONE;
  PyObject *t = PyTuple_New(m.ndim);
  for (int i = 0; t && i < m.ndim; i++) {
    PyObject *d = PyLong_FromLongLong(m.dims[i]);
    if (!d) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, d);
  }
  return t;
}

static PyObject *var_get_nbytes(PyObject *self, void *closure) {
  var_meta m;
  if (var_read_meta(VR(self), &m) < 0) return NULL;
  return PyLong_FromSize_t(m.dtype < 0 ? 0 : m.nbytes);
}

static PyObject *var_resize(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"dtype", "shape", NULL};
  PyObject *dto, *shapeo;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:resize", kwlist, &dto, &shapeo)) return NULL;
  pdshm_dtype dt;
  int ndim;
  int64_t dims[PDSHM_NDIM_MAX];
  pdshmpy_state *st = PDSHMPY_STATE(self);
  if (pdshmpy_dtype_parse(st, dto, &dt) < 0 || pdshmpy_shape_parse(st, shapeo, &ndim, dims) < 0)
    return NULL;
  pdshm_var *v = pdshmpy_var_begin(VR(self));
  if (!v) return NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_tensor_resize(v, dt, ndim, dims));
  pdshmpy_seg_unhold(VR(self)->seg);
  if (rc) return pdshmpy_raise(st, rc, "resize");
  Py_RETURN_NONE;
}

/* ---- locks, references ---------------------------------------------------------------------- */

static PyObject *var_get_segment(PyObject *self, void *closure) {
  return Py_NewRef((PyObject *)VR(self)->seg);
}

/* The parent prefix of a path ("a/b" -> "a", "a" -> ""). */
static PyObject *path_up(PyObject *p) {
  Py_ssize_t slash = PyUnicode_FindChar(p, '/', 0, PyUnicode_GET_LENGTH(p), -1);
  if (slash == -2) return NULL;
  return slash >= 0 ? PyUnicode_Substring(p, 0, slash) : PyUnicode_FromString("");
}

/* Without the GIL: is v the local variable `name` of the scope at path? */
static int owns(pdshm_seg *seg, const char *path, const char *name, pdshm_var *v) {
  pdshm_scope *h = NULL;
  if (pdshm_scope_open(seg, path, &h)) return 0;
  int r = pdshm_find_local_var(h, name) == v;
  pdshm_scope_release(h);
  return r;
}

/* The first of path and its prefixes whose scope owns v (named `name`), or
 * None; the Segment is held. */
static PyObject *owner_along(pdshm_seg *seg, PyObject *path, const char *name, pdshm_var *v) {
  PyObject *p = Py_NewRef(path);
  for (;;) {
    const char *cp = PyUnicode_AsUTF8(p);
    int found;
    if (!cp) break;
    PDSHMPY_NOGIL(found = owns(seg, cp, name, v));
    if (found) return p;
    PyObject *up = PyUnicode_GET_LENGTH(p) ? path_up(p) : Py_NewRef(Py_None);
    Py_DECREF(p);
    p = up;
    if (!p || p == Py_None) return p;
  }
  Py_DECREF(p);
  return NULL;
}

/* The path of the scope that owns the variable (searched along search_path
 * and its prefixes, then kept), or None when that scope is anonymous. */
static PyObject *var_owner_path(pdshmpy_var *self) {
  if (self->scope_path || !self->search_path)
    return Py_NewRef(self->scope_path ? self->scope_path : Py_None);
  pdshm_var *v = pdshmpy_var_begin(self);
  if (!v) return NULL;
  char name[PDSHM_NAME_MAX + 1];
  PyOS_snprintf(name, sizeof name, "%s", pdshm_var_name(v));
  PyObject *search = Py_NewRef(self->search_path);
  PyObject *p = pdshmpy_var_still(self, v) < 0 ? NULL : owner_along(self->seg->seg, search, name, v);
  Py_DECREF(search);
  pdshmpy_seg_unhold(self->seg);
  if (!p) return NULL;
  if (!self->scope_path && self->search_path) { /* not found by another thread meanwhile */
    Py_CLEAR(self->search_path);
    if (p != Py_None) self->scope_path = Py_NewRef(p);
  }
  return p;
}

static PyObject *var_get_scope_path(PyObject *self, void *closure) {
  return var_owner_path(VR(self));
}

/* ---- identity, pickling, repr ------------------------------------------------------------- */

static PyObject *var_richcompare(PyObject *a, PyObject *b, int op) {
  if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != Py_TYPE(b)) Py_RETURN_NOTIMPLEMENTED;
  pdshmpy_var *x = VR(a), *y = VR(b);
  int same = x->ref.off == y->ref.off && x->ref.gen == y->ref.gen;
  if (same && x->seg != y->seg) {
    same = PyObject_RichCompareBool(x->seg->name, y->seg->name, Py_EQ);
    if (same < 0) return NULL;
  }
  return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static Py_hash_t var_hash(PyObject *self) {
  Py_hash_t h = (Py_hash_t)(VR(self)->ref.off * 1000003u ^ VR(self)->ref.gen);
  return h == -1 ? -2 : h;
}

static PyObject *var_reduce(PyObject *self, PyObject *unused) {
  pdshmpy_var *o = VR(self);
  PyObject *path = var_owner_path(o);
  if (!path) return NULL;
  if (path == Py_None) {
    Py_DECREF(path);
    PyErr_SetString(PyExc_TypeError, "a variable of an anonymous scope cannot be pickled");
    return NULL;
  }
  PyObject *name = var_get_name(self, NULL);
  PyObject *mod = name ? PyImport_ImportModule("pdshm._pickle") : NULL;
  PyObject *fn = mod ? PyObject_GetAttrString(mod, "var") : NULL;
  Py_XDECREF(mod);
  if (!fn) {
    Py_XDECREF(name);
    Py_DECREF(path);
    return NULL;
  }
  return Py_BuildValue("N(ONN)", fn, (PyObject *)o->seg, path, name);
}

static PyObject *var_repr(PyObject *self) {
  PyObject *name = var_get_name(self, NULL);
  var_meta m;
  if (!name || var_read_meta(VR(self), &m) < 0) {
    Py_XDECREF(name);
    PyErr_Clear();
    return PyUnicode_FromString("<pdshm.Var (stale)>");
  }
  PyObject *r;
  if (m.dtype < 0) {
    r = PyUnicode_FromFormat("<pdshm.Var %R (empty)>", name);
  } else {
    PyObject *shape = var_get_shape(self, NULL);
    r = shape ? PyUnicode_FromFormat("<pdshm.Var %R %s%R>", name, pdshmpy_dtype_name(m.dtype),
                                     shape)
              : NULL;
    Py_XDECREF(shape);
  }
  Py_DECREF(name);
  return r;
}

static void var_dealloc(PyObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  if (VR(self)->weakrefs) PyObject_ClearWeakRefs(self);
  Py_CLEAR(VR(self)->scope_path);
  Py_CLEAR(VR(self)->search_path);
  Py_CLEAR(VR(self)->seg);
  tp->tp_free(self);
  Py_DECREF(tp);
}

static PyMethodDef var_methods[] = {
    {"add_reader", var_add_reader, METH_O,
     "add_reader(op)\n\nRecords an operator that reads the variable (a set)."},
    {"add_writer", var_add_writer, METH_O,
     "add_writer(op)\n\nRecords an operator that writes the variable (a set)."},
    {"lock", (PyCFunction)(void (*)(void))pdshmpy_var_lock, METH_VARARGS | METH_KEYWORDS,
     "lock(exclusive=True) -> VarLock\n\nTakes the variable's robust lock (exclusive or "
     "shared; a holder's death\nreleases it) and returns it held: `with v.lock():`, or "
     "`lk = v.lock(); ...;\nlk.release()`.  Waits with the GIL released.  An exclusive "
     "unlock bumps\n.version."},
    {"wait", (PyCFunction)(void (*)(void))pdshmpy_var_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(seen, timeout=None) -> int\n\nBlocks until the variable's version differs from "
     "`seen` and returns the new\nversion; TimeoutError after timeout seconds.  No lock, no "
     "spinning (a futex,\nwoken by every exclusive unlock and resize, in any process); the "
     "GIL is\nreleased and Ctrl-C interrupts it."},
    {"ref", pdshmpy_var_ref, METH_NOARGS,
     "ref() -> VarRef\n\nA callable weak reference: r() is the Var, or None once stale."},
    {"resize", (PyCFunction)(void (*)(void))var_resize, METH_VARARGS | METH_KEYWORDS,
     "resize(dtype, shape)\n\nMakes the variable a tensor of that dtype (\"float32\", a "
     "numpy dtype or a\ntorch dtype) and shape; the contents are unspecified afterwards."},
    {"assign", pdshmpy_var_assign, METH_O,
     "assign(array)\n\nCopies an array-like (numpy array, buffer, torch tensor, nested "
     "lists) into\nthe variable.  Of the same dtype and shape already: in place (its views "
     "see\nthe new values); else resized to the source's dtype and shape first (views\n"
     "keep the old buffer)."},
    {"numpy", pdshmpy_var_numpy, METH_NOARGS,
     "numpy() -> numpy.ndarray\n\nA zero-copy view of the tensor (pinned while it lives).\n"
     "bfloat16 shows as uint16 (the raw bits)."},
    {"__dlpack__", (PyCFunction)(void (*)(void))pdshmpy_var_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, max_version=None, dl_device=None, copy=None) -> capsule\n\n"
     "A DLPack 0.6 \"dltensor\" capsule aliasing the "
     "tensor (pinned until the\nconsumer's deleter runs).  bfloat16 goes as kDLBfloat; bool "
     "as uint8 (DLPack\n0.6 has no bool)."},
    {"__dlpack_device__", pdshmpy_var_dlpack_device, METH_NOARGS,
     "__dlpack_device__() -> (1, 0)\n\nkDLCPU, device 0."},
    {"__reduce__", var_reduce, METH_NOARGS, NULL},
    {NULL}};

static PyGetSetDef var_getset[] = {
    {"name", var_get_name, NULL, "The variable's name.", NULL},
    {"label", var_get_label, var_set_label,
     "Its label (\"parameter\", \"input\", ...; \"\" when none).  Assign None or \"\" to "
     "clear it.",
     NULL},
    {"readers", var_get_readers, NULL, "The operators that read it (list of str).", NULL},
    {"writers", var_get_writers, NULL, "The operators that write it (list of str).", NULL},
    {"version", var_get_version, NULL,
     "Bumped by resize and by each release of an exclusive lock.", NULL},
    {"key", var_get_key, NULL,
     "The variable's identity in its segment, a tuple of two ints (pdshm_var_ref): equal "
     "for two Vars of one variable, in any process attached to the segment; another for a "
     "variable erased and made again.",
     NULL},
    {"dtype", var_get_dtype, NULL,
     "The tensor's dtype as a numpy-style name (\"float32\", \"bfloat16\", ...); None when "
     "it holds no tensor.",
     NULL},
    {"shape", var_get_shape, NULL, "The tensor's shape (tuple); None when no tensor.", NULL},
    {"nbytes", var_get_nbytes, NULL, "Bytes of the tensor's data (0 when no tensor).", NULL},
    {"__array_interface__", pdshmpy_var_array_interface, NULL,
     "numpy's array interface (v3); its data is a pinned buffer (bfloat16 as '<u2').", NULL},
    {"segment", var_get_segment, NULL, "The Segment the variable lives in.", NULL},
    {"scope_path", var_get_scope_path, NULL,
     "The path of the scope that owns it; None for an anonymous scope.", NULL},
    {NULL}};

static PyMemberDef var_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pdshmpy_var, weakrefs), READONLY},
    {NULL}};

static PyType_Slot var_slots[] = {
    {Py_tp_doc,
     "A weak handle on a variable: every use raises pdshm.Stale once it was erased\n"
     "or its scope died, in any process.  Exports zero-copy views: the buffer\n"
     "protocol (memoryview, np.asarray), __array_interface__ and DLPack\n"
     "(torch.from_dlpack); each holds a pin, so the bytes outlive an erase.\n"
     "Buffer formats: '?' 'B' 'b' 'h' 'i' 'q' 'e' 'f' 'd'; bfloat16 as 'H' (raw bits).\n"
     "== compares the variable's identity.  A Var of a named scope pickles as\n"
     "(segment, scope path, name)."},
    {Py_tp_dealloc, var_dealloc},
    {Py_tp_repr, var_repr},
    {Py_tp_hash, var_hash},
    {Py_tp_richcompare, var_richcompare},
    {Py_tp_methods, var_methods},
    {Py_tp_getset, var_getset},
    {Py_tp_members, var_members},
    {Py_bf_getbuffer, pdshmpy_var_getbuffer},
    {Py_bf_releasebuffer, pdshmpy_var_releasebuffer},
    {0, NULL}};

PyType_Spec pdshmpy_var_spec = {
    .name = "pdshm.Var",
    .basicsize = sizeof(pdshmpy_var),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = var_slots,
};
