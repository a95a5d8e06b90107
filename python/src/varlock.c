/*
 * varlock.c - VarLock: a variable's robust lock, held from Var.lock() until
 * release() or `with` exit.
 *
 * States: HELD (made by Var.lock, which waits with the GIL released) ->
 * RELEASED.  The library's lock belongs to the thread that took it, so
 * release from another thread answers EPERM.  A VarLock collected while held
 * (in the process that took it) releases its lock, errors ignored.
 *
 * The release works from what the lock kept when it was taken (the
 * pdshm_var * and the attachment), not from the Var: a variable erased
 * meanwhile (by any process) makes its Var stale, but its lock must still be
 * let go, and pdshm_var_unlock does that for an erased variable too.  Once
 * the Segment was detached or re-attached after fork(), the attachment the
 * lock was taken in is gone and release() only says so.
 */
#include "pdshmpy.h"

typedef struct {
  PyObject_HEAD
  pdshmpy_var *var; /* strong: keeps the Segment */
  pdshm_var *v;      /* the variable when taken (unlock needs no live Var) */
  pdshm_seg *seg;    /* the attachment it was taken in                    */
  int exclusive;
  int held;
  unsigned long forkgen; /* pdshmpy_forkgen() when taken */
} varlock;

#define VL(o) ((varlock *)(o))

static PyObject *varlock_new(pdshmpy_var *var, int exclusive) {
  pdshmpy_state *st = PDSHMPY_STATE(var);
  pdshm_var *v = pdshmpy_var_begin(var);
  if (!v) return NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_var_lock(v, exclusive));
  varlock *lk = rc ? NULL : PyObject_New(varlock, st->varlock_type);
  if (rc) {
    pdshmpy_raise(st, rc, exclusive ? "exclusive lock" : "shared lock");
  } else if (!lk) {
    PDSHMPY_NOGIL(pdshm_var_unlock(v));
  } else {
    lk->var = (pdshmpy_var *)Py_NewRef(var);
    lk->v = v;
    lk->seg = var->seg->seg;
    lk->exclusive = exclusive;
    lk->held = 1;
    lk->forkgen = pdshmpy_forkgen();
  }
  pdshmpy_seg_unhold(var->seg);
  return (PyObject *)lk;
}

PyObject *pdshmpy_var_lock(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"exclusive", NULL};
  int exclusive = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:lock", kwlist, &exclusive)) return NULL;
  return varlock_new((pdshmpy_var *)self, exclusive);
}

/* Lets the lock go (a shared unlock may wait for a dead holder's recount). */
static int varlock_unlock(varlock *lk) {
  int rc;
  pdshmpy_seg_hold(lk->var->seg);
  PDSHMPY_NOGIL(rc = pdshm_var_unlock(lk->v));
  pdshmpy_seg_unhold(lk->var->seg);
  return rc;
}

/* Is the attachment the lock was taken in still the Segment's? */
static int varlock_attached(const varlock *lk) {
  return lk->forkgen == pdshmpy_forkgen() && lk->seg && lk->var->seg->seg == lk->seg;
}

static PyObject *varlock_release(PyObject *self, PyObject *unused) {
  varlock *lk = VL(self);
  if (!lk->held) {
    pdshmpy_raise_msg(PDSHMPY_STATE(self), PDSHM_EPERM, "the lock was already released");
    return NULL;
  }
  if (!varlock_attached(lk)) {
    lk->held = 0;
    pdshmpy_raise_msg(PDSHMPY_STATE(self), PDSHM_EINVAL,
                      "the segment was detached or re-attached since the lock was taken");
    return NULL;
  }
  int rc = varlock_unlock(lk);
  if (rc) return pdshmpy_raise(PDSHMPY_STATE(self), rc, "unlock");
  lk->held = 0;
  Py_RETURN_NONE;
}

static PyObject *varlock_enter(PyObject *self, PyObject *unused) { return Py_NewRef(self); }

static PyObject *varlock_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *r = varlock_release(self, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static PyObject *varlock_get_held(PyObject *self, void *closure) {
  return PyBool_FromLong(VL(self)->held);
}

static PyObject *varlock_get_exclusive(PyObject *self, void *closure) {
  return PyBool_FromLong(VL(self)->exclusive);
}

static void varlock_dealloc(PyObject *self) {
  varlock *lk = VL(self);
  PyTypeObject *tp = Py_TYPE(self);
  if (lk->held && varlock_attached(lk)) varlock_unlock(lk);
  Py_CLEAR(lk->var);
  tp->tp_free(self);
  Py_DECREF(tp);
}

static PyObject *varlock_repr(PyObject *self) {
  return PyUnicode_FromFormat("<pdshm.VarLock %s %s>", VL(self)->exclusive ? "exclusive" : "shared",
                              VL(self)->held ? "held" : "released");
}

static PyMethodDef varlock_methods[] = {
    {"release", varlock_release, METH_NOARGS,
     "release()\n\nReleases the lock (an exclusive release bumps the variable's version).\n"
     "A variable erased meanwhile, by any process, is no error: the lock is let go."},
    {"__enter__", varlock_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))varlock_exit, METH_FASTCALL, NULL},
    {NULL}};

static PyGetSetDef varlock_getset[] = {
    {"held", varlock_get_held, NULL, "Not yet released.", NULL},
    {"exclusive", varlock_get_exclusive, NULL, "Taken exclusive (else shared).", NULL},
    {NULL}};

static PyType_Slot varlock_slots[] = {
    {Py_tp_doc, "A held variable lock (Var.lock()); a context manager."},
    {Py_tp_dealloc, varlock_dealloc},
    {Py_tp_repr, varlock_repr},
    {Py_tp_methods, varlock_methods},
    {Py_tp_getset, varlock_getset},
    {0, NULL}};

PyType_Spec pdshmpy_varlock_spec = {
    .name = "pdshm.VarLock",
    .basicsize = sizeof(varlock),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = varlock_slots,
};
