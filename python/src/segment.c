/*
 * segment.c - the Segment type: one attachment, its lifetime, fork() and
 * pickling, and the calls that act on the whole segment.
 *
 * States: OPEN (seg set, not closed) -> CLOSED (detach() called: every scope
 * handle released, no new use) -> DETACHED (pdshm_detach ran, seg NULL).
 * CLOSED -> DETACHED happens at once when no Pin is alive and no call runs
 * without the GIL, otherwise when the last of them ends (pdshmpy_seg_pin_gone,
 * pdshmpy_seg_unhold), so that no view sees unmapped memory and no call a
 * freed handle.
 * A Segment used in a fork child (its fork generation differs) first drops
 * what it inherited and attaches again by name (invariant 3 of pdshmpy.h).
 */
#include "pdshmpy.h"

/* ---- attaching ------------------------------------------------------------------- */

static int seg_attach_now(PyObject *name, unsigned flags, const pdshm_options *o, int create,
                          pdshm_seg **out) {
  const char *cname = PyUnicode_AsUTF8(name);
  pdshm_options opt = o ? *o : (pdshm_options){0};
  opt.flags = flags;
  int rc;
  PDSHMPY_NOGIL(rc = create ? pdshm_create(cname, &opt, out) : pdshm_attach(cname, &opt, out));
  return rc;
}

PyObject *pdshmpy_seg_open(pdshmpy_state *st, PyObject *name, const pdshm_options *o,
                           int create) {
  if (!pdshmpy_utf8(name, "segment name")) return NULL;
  pdshm_seg *seg = NULL;
  int rc = seg_attach_now(name, o ? o->flags : 0, o, create, &seg);
  if (rc) return pdshmpy_raise_fmt(st, rc, "segment '%s'", PyUnicode_AsUTF8(name));
  pdshmpy_seg *s = PyObject_New(pdshmpy_seg, st->segment_type);
  if (!s) {
    PDSHMPY_NOGIL(pdshm_detach(seg));
    return NULL;
  }
  s->seg = seg;
  s->name = Py_NewRef(name);
  s->flags = o ? o->flags : 0;
  s->forkgen = pdshmpy_forkgen();
  s->closed = 0;
  s->npins = 0;
  s->busy = 0;
  s->old = NULL;
  s->nold = 0;
  s->weakrefs = NULL;
  pdshmpy_list_init(&s->scopes);
  pdshmpy_list_init(&s->pins);
  pdshmpy_list_init(&s->groups);
  pdshmpy_list_add(&st->segments, &s->link);
  return (PyObject *)s;
}

/* Unlists each object of the list and drops its handle; each leaves the list
 * before its handle goes, as dropping may release the GIL. */
static void seg_drop_all(pdshmpy_link *head) {
  while (head->next != head) {
    pdshmpy_link *l = head->next;
    pdshmpy_list_del(l);
    l->drop(l);
  }
}

/* In a fork child, before s->seg (inherited) is replaced: every inherited
 * scope handle and group membership goes first, then the handle itself --
 * detached at once (which unmaps its range) unless views still point into
 * it; then it waits in s->old for the last of them.  Freeing a fork parent's
 * copies takes no lock: the GIL stays.  The holds counted in s->busy were the
 * parent's threads', which the child does not have. */
static void seg_retire_inherited(pdshmpy_seg *s) {
  s->busy = 0;
  for (pdshmpy_link *l = s->scopes.next; l != &s->scopes; l = l->next)
    l->drop(l); /* the Scope stays listed: a named one opens again by path */
  seg_drop_all(&s->groups);
  pdshm_seg *old = s->seg;
  s->seg = NULL;
  if (!old) return;
  Py_ssize_t n = 0;
  for (pdshmpy_link *l = s->pins.next; l != &s->pins; l = l->next)
    n += PDSHMPY_CONTAINER(l, pdshmpy_pin, link)->mapping == old;
  if (n == 0) {
    pdshm_detach(old); /* in a child: unmaps the inherited range, frees the copy */
    return;
  }
  pdshmpy_mapping *more = PyMem_Realloc(s->old, (size_t)(s->nold + 1) * sizeof *more);
  if (!more) return; /* the range stays mapped: the views stay safe */
  s->old = more;
  s->old[s->nold++] = (pdshmpy_mapping){old, n};
}

pdshm_seg *pdshmpy_seg_get(pdshmpy_seg *s) {
  pdshmpy_state *st = PDSHMPY_STATE(s);
  if (!st->Error) { /* the module's state was cleared (interpreter shutdown) */
    PyErr_SetString(PyExc_RuntimeError, "the pdshm module was finalized");
    return NULL;
  }
  if (s->closed) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "segment %R was detached", s->name);
    return NULL;
  }
  if (s->forkgen == pdshmpy_forkgen() && s->seg) return s->seg;
  seg_retire_inherited(s);
  pdshm_seg *seg = NULL;
  int rc = seg_attach_now(s->name, s->flags, NULL, 0, &seg);
  if (rc) {
    pdshmpy_raise_forked(st, rc, "segment '%s' cannot be attached again after fork()",
                         PyUnicode_AsUTF8(s->name));
    return NULL;
  }
  if (s->forkgen == pdshmpy_forkgen() && s->seg) { /* another thread attached meanwhile */
    PDSHMPY_NOGIL(pdshm_detach(seg));
    return s->seg;
  }
  s->seg = seg;
  s->forkgen = pdshmpy_forkgen();
  return s->seg;
}

pdshm_seg *pdshmpy_seg_begin(pdshmpy_seg *s) {
  pdshm_seg *seg = pdshmpy_seg_get(s);
  if (seg) pdshmpy_seg_hold(s);
  return seg;
}

/* ---- closing ------------------------------------------------------------------------ */

static void seg_detach_now(pdshmpy_seg *s) {
  if (!s->seg) return;
  pdshm_seg *seg = s->seg;
  s->seg = NULL;
  PDSHMPY_NOGIL(pdshm_detach(seg));
}

/* Releasing a handle lets other threads run: the hold keeps the attachment
 * until the last one went. */
static void seg_close(pdshmpy_seg *s) {
  if (s->closed) return;
  s->closed = 1;
  pdshmpy_seg_hold(s);
  seg_drop_all(&s->scopes);
  seg_drop_all(&s->groups); /* leaves every group before the handle is detached */
  pdshmpy_seg_unhold(s);
}

void pdshmpy_seg_pin_gone(pdshmpy_seg *s, pdshm_seg *mapping) {
  for (Py_ssize_t i = 0; mapping != s->seg && i < s->nold; i++) {
    if (s->old[i].seg != mapping || --s->old[i].pins > 0) continue;
    pdshm_detach(mapping); /* a fork child's inherited range: unmapped now */
    s->old[i] = s->old[--s->nold];
    break;
  }
  if (--s->npins == 0 && s->busy == 0 && s->closed) seg_detach_now(s);
}

void pdshmpy_seg_unhold(pdshmpy_seg *s) {
  if (--s->busy == 0 && s->npins == 0 && s->closed) seg_detach_now(s);
}

PyObject *pdshmpy_close_all(PyObject *module, PyObject *unused) {
  pdshmpy_state *st = PyModule_GetState(module);
  /* Closing releases the GIL: the list is copied (with references) first. */
  PyObject *segs = PyList_New(0);
  if (!segs) return NULL;
  for (pdshmpy_link *l = st->segments.next; l != &st->segments; l = l->next) {
    pdshmpy_seg *s = PDSHMPY_CONTAINER(l, pdshmpy_seg, link);
    if (s->forkgen == pdshmpy_forkgen() && PyList_Append(segs, (PyObject *)s) < 0) {
      Py_DECREF(segs);
      return NULL;
    }
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(segs); i++)
    seg_close((pdshmpy_seg *)PyList_GET_ITEM(segs, i));
  Py_DECREF(segs);
  Py_RETURN_NONE;
}

static PyObject *seg_detach(PyObject *self, PyObject *unused) {
  seg_close((pdshmpy_seg *)self);
  Py_RETURN_NONE;
}

static PyObject *seg_enter(PyObject *self, PyObject *unused) {
  if (!pdshmpy_seg_get((pdshmpy_seg *)self)) return NULL;
  return Py_NewRef(self);
}

static PyObject *seg_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  seg_close((pdshmpy_seg *)self);
  Py_RETURN_FALSE;
}

static void seg_dealloc(PyObject *self) {
  pdshmpy_seg *s = (pdshmpy_seg *)self;
  PyTypeObject *tp = Py_TYPE(self);
  if (s->weakrefs) PyObject_ClearWeakRefs(self);
  /* Scopes and pins hold a reference: both lists are empty by now.  Off the
   * state's list before the GIL goes, so that nobody finds it meanwhile. */
  pdshmpy_list_del(&s->link);
  s->closed = 1;
  seg_detach_now(s);
  Py_CLEAR(s->name);
  PyMem_Free(s->old); /* empty: every pin is gone */
  tp->tp_free(self);
  Py_DECREF(tp);
}

/* ---- the fork hook ------------------------------------------------------------------- */

/* Re-attaches s in the child and inherits each of its pins. */
static void seg_inherit_pins(pdshmpy_seg *s) {
  pdshm_seg *seg = NULL;
  /* When attaching fails the views stay mapped but unpinned. */
  if (seg_attach_now(s->name, s->flags, NULL, 0, &seg)) return;
  for (pdshmpy_link *l = s->pins.next; l != &s->pins; l = l->next) {
    pdshmpy_pin *p = PDSHMPY_CONTAINER(l, pdshmpy_pin, link);
    pdshm_pin *np = NULL;
    if (!p->pin || pdshm_pin_inherit(seg, p->pin, &np)) continue;
    pdshm_tensor_unpin(p->pin); /* in the child: frees the handle only */
    p->pin = np;
  }
  seg_retire_inherited(s);
  s->seg = seg;
  s->forkgen = pdshmpy_forkgen();
}

PyObject *pdshmpy_after_fork_child(PyObject *module, PyObject *unused) {
  pdshmpy_state *st = PyModule_GetState(module);
  for (pdshmpy_link *l = st->segments.next; l != &st->segments; l = l->next) {
    pdshmpy_seg *s = PDSHMPY_CONTAINER(l, pdshmpy_seg, link);
    if (s->npins > 0 && s->seg && s->forkgen != pdshmpy_forkgen()) seg_inherit_pins(s);
  }
  Py_RETURN_NONE;
}

/* ---- calls on the segment ------------------------------------------------------------ */

static PyObject *seg_reap(PyObject *self, PyObject *unused) {
  pdshm_seg *seg = pdshmpy_seg_begin((pdshmpy_seg *)self);
  if (!seg) return NULL;
  unsigned n = 0;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_reap(seg, &n));
  pdshmpy_seg_unhold((pdshmpy_seg *)self);
  if (rc) return pdshmpy_raise(PDSHMPY_STATE(self), rc, "reap");
  return PyLong_FromUnsignedLong(n);
}

static PyObject *seg_unique_name(PyObject *self, PyObject *prefix) {
  const char *p = pdshmpy_utf8(prefix, "prefix");
  if (!p) return NULL;
  pdshm_seg *seg = pdshmpy_seg_get((pdshmpy_seg *)self);
  if (!seg) return NULL;
  char buf[PDSHM_NAME_MAX + 1];
  int rc = pdshm_unique_name(seg, p, buf, sizeof buf);
  if (rc) return pdshmpy_raise(PDSHMPY_STATE(self), rc, "unique_name");
  return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
}

static PyObject *seg_get_name(PyObject *self, void *closure) {
  return Py_NewRef(((pdshmpy_seg *)self)->name);
}

static PyObject *seg_get_readonly(PyObject *self, void *closure) {
  return PyBool_FromLong(((pdshmpy_seg *)self)->flags & PDSHM_RDONLY);
}

static PyObject *seg_get_closed(PyObject *self, void *closure) {
  return PyBool_FromLong(((pdshmpy_seg *)self)->closed);
}

static PyObject *seg_reduce(PyObject *self, PyObject *unused) {
  pdshmpy_seg *s = (pdshmpy_seg *)self;
  PyObject *mod = PyImport_ImportModule("pdshm._pickle");
  if (!mod) return NULL;
  PyObject *fn = PyObject_GetAttrString(mod, "segment");
  Py_DECREF(mod);
  if (!fn) return NULL;
  return Py_BuildValue("N(OOO)", fn, s->name, (s->flags & PDSHM_RDONLY) ? Py_True : Py_False,
                       (s->flags & PDSHM_SHARED_USERS) ? Py_True : Py_False);
}

static PyObject *seg_repr(PyObject *self) {
  pdshmpy_seg *s = (pdshmpy_seg *)self;
  return PyUnicode_FromFormat("<pdshm.Segment %R%s%s>", s->name,
                              (s->flags & PDSHM_RDONLY) ? " read-only" : "",
                              s->closed ? " detached" : "");
}

static PyMethodDef seg_methods[] = {
    {"open", pdshmpy_seg_open_path, METH_O,
     "open(path) -> Scope\n\nA new handle on the named scope at path from the root\n"
     "(\"params/fc\"; \"\" is the root).  NotFound when there is none."},
    {"stats", pdshmpy_seg_stats, METH_NOARGS,
     "stats() -> Stats\n\nA consistent snapshot: size used free scopes vars tensor_bytes\n"
     "procs_alive procs_dead."},
    {"check", pdshmpy_seg_check, METH_NOARGS,
     "check() -> list[str]\n\nWalks the whole segment and verifies every invariant;\n"
     "one string per problem, empty when everything holds."},
    {"reap", seg_reap, METH_NOARGS,
     "reap() -> int\n\nReleases what dead processes held; returns how many slots were "
     "reaped.\nTimeoutError (pdshm.TimedOut) when a dead slot is left to a later reap, "
     "the\nothers reaped: a live member of its groups, stopped inside a collective,\n"
     "still writes into its buffers after 200 ms."},
    {"unique_name", seg_unique_name, METH_O,
     "unique_name(prefix) -> str\n\n\"prefix-N\", N unique across every process of the "
     "segment."},
    {"detach", seg_detach, METH_NOARGS,
     "detach()\n\nReleases every scope handle (and group membership) this Segment holds "
     "and\ncloses it (later calls raise pdshm.Error).  The mapping goes when the last view of it is gone."},
    {"group", (PyCFunction)(void (*)(void))pdshmpy_seg_group, METH_VARARGS | METH_KEYWORDS,
     "group(name, size, rank=None) -> Group\n\nJoins the trainer group NAME of `size` "
     "members (made by its first joiner),\nas the lowest free rank or as `rank` (a live "
     "holder: pdshm.Error EBUSY; a\ndead one's rank is taken over, unless a live member "
     "still writes a\ncollective after 1 s, a stopped one: TimeoutError).  Waits with the "
     "GIL released."},
    {"enlist", (PyCFunction)(void (*)(void))pdshmpy_seg_enlist, METH_VARARGS | METH_KEYWORDS,
     "enlist(name, timeout=None) -> Group\n\nJoins the running group NAME as a newcomer: "
     "waits until its members'\nnext Group.regroup() admits it, and returns the "
     "membership (its rank and\nsize those that regroup gave; its first call takes part "
     "in the round after\nit, with the members' next call).  A waiting candidate holds "
     "nobody up.\nTimeoutError after timeout seconds (no longer a candidate); KeyError\n"
     "(pdshm.NotFound) when there is no group NAME; pdshm.Error (EUSERS) when it\nhas 256 "
     "ranks and candidates.  Waits with the GIL released; Ctrl-C\ninterrupts it."},
    {"info", pdshmpy_seg_info, METH_NOARGS,
     "info() -> SegInfo\n\nThe segment as its header describes it (as pdshm-attach shows)."},
    {"scopes", pdshmpy_seg_scopes, METH_NOARGS,
     "scopes() -> list[ScopeInfo]\n\nEvery scope, the root first, each before its kids."},
    {"vars_of", (PyCFunction)(void (*)(void))pdshmpy_seg_vars_of, METH_VARARGS | METH_KEYWORDS,
     "vars_of(scope_id=0) -> list[VarInfo]\n\nThe variables of the scope with that id "
     "(ScopeInfo.id; 0: the root), sorted by name."},
    {"procs", pdshmpy_seg_procs, METH_NOARGS,
     "procs() -> list[ProcInfo]\n\nThe process slots in use."},
    {"locks", pdshmpy_seg_locks, METH_NOARGS,
     "locks() -> list[LockInfo]\n\nThe lock-table entries in use, with their counters."},
    {"alloc", pdshmpy_seg_alloc, METH_NOARGS,
     "alloc() -> AllocInfo\n\nThe allocator: bytes by state and by use, size classes."},
    {"__enter__", seg_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))seg_exit, METH_FASTCALL, NULL},
    {"__reduce__", seg_reduce, METH_NOARGS, NULL},
    {NULL}};

static PyGetSetDef seg_getset[] = {
    {"name", seg_get_name, NULL, "The segment's NAME (the file /dev/shm/pdshm.NAME).", NULL},
    {"root", pdshmpy_seg_root, NULL, "A new handle on the global scope.", NULL},
    {"readonly", seg_get_readonly, NULL, "Attached read-only (for looking only).", NULL},
    {"closed", seg_get_closed, NULL, "detach() was called.", NULL},
    {NULL}};

static PyMemberDef seg_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pdshmpy_seg, weakrefs), READONLY},
    {NULL}};

static PyType_Slot seg_slots[] = {
    {Py_tp_doc,
     "An attachment of a pdshm segment (made by pdshm.create or pdshm.attach).\n\n"
     "`with` detaches at exit.  Pickles by name: unpickling attaches again.\n"
     "After fork() the child attaches again by name on first use."},
    {Py_tp_dealloc, seg_dealloc},
    {Py_tp_repr, seg_repr},
    {Py_tp_methods, seg_methods},
    {Py_tp_getset, seg_getset},
    {Py_tp_members, seg_members},
    {0, NULL}};

PyType_Spec pdshmpy_segment_spec = {
    .name = "pdshm.Segment",
    .basicsize = sizeof(pdshmpy_seg),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = seg_slots,
};
