/*
 * scope.c - the Scope type: a handle owning one reference on a scope, and the
 * calls on its variables and kids.
 *
 * A Scope knows its path from the root when it is the root or named ("" and
 * "params/fc"), so that it can pickle by path and reopen by path in a fork
 * child; an anonymous Scope has no path and raises Forked in a child.
 * Variables come back as weak Var objects carrying the path of the scope that
 * owns them (not the scope they were looked up from).
 *
 * Every call on the handle runs between scope_begin and scope_end, the
 * library's part without the GIL (pdshmpy.h, invariant 6): release() or
 * detach() from another thread meanwhile does not free the handle under the
 * call but leaves it to scope_end.  Segment.root and Segment.open live here
 * too, as they make Scopes.
 */
#include "pdshmpy.h"

#define SC(o) ((pdshmpy_scope *)(o))

/* Releases h, which this process made, with the GIL released: the Segment is
 * held so that it stays attached meanwhile. */
static void scope_release_handle(pdshmpy_seg *seg, pdshm_scope *h) {
  pdshmpy_seg_hold(seg);
  PDSHMPY_NOGIL(pdshm_scope_release(h));
  pdshmpy_seg_unhold(seg);
}

/* Drops the handle without touching the segment (fork child) or releases it,
 * now or, when a call runs on it without the GIL, at that call's end. */
static void scope_drop(pdshmpy_scope *sc) {
  pdshmpy_kept_clear(sc);
  pdshm_scope *h = sc->h;
  if (!h) return;
  if (sc->forkgen != pdshmpy_forkgen()) { /* a fork parent's: frees the copy, no lock */
    sc->h = NULL;
    sc->busy = 0; /* the parent's threads' calls */
    pdshm_scope_release(h);
    return;
  }
  if (sc->busy) return; /* the last call on it releases it (scope_end) */
  sc->h = NULL;
  scope_release_handle(sc->seg, h);
}

/* The link's drop (pdshmpy_link): for the Segment's detach() and fork child. */
static void scope_link_drop(pdshmpy_link *l) { scope_drop(PDSHMPY_CONTAINER(l, pdshmpy_scope, link)); }

PyObject *pdshmpy_scope_wrap(pdshmpy_seg *seg, pdshm_scope *h, PyObject *path, PyObject *base) {
  pdshmpy_state *st = PDSHMPY_STATE(seg);
  if (seg->closed) { /* detach() ran while h was made without the GIL */
    scope_release_handle(seg, h);
    return pdshmpy_raise_msg(st, PDSHM_EINVAL, "segment %R was detached", seg->name);
  }
  pdshmpy_scope *sc = PyObject_New(pdshmpy_scope, st->scope_type);
  if (!sc) {
    scope_release_handle(seg, h);
    return NULL;
  }
  sc->seg = (pdshmpy_seg *)Py_NewRef(seg);
  sc->h = h;
  sc->path = Py_XNewRef(path);
  sc->base = Py_XNewRef(path ? path : base);
  sc->forkgen = pdshmpy_forkgen();
  sc->busy = 0;
  sc->released = 0;
  sc->weakrefs = NULL;
  memset(sc->found, 0, sizeof sc->found);
  sc->kept = NULL;
  sc->link.drop = scope_link_drop;
  pdshmpy_list_add(&seg->scopes, &sc->link);
  return (PyObject *)sc;
}

/* In a fork child: the parent's copy goes and a named scope is opened again
 * by path; 0, or -1 with Forked raised.  The caller holds the Segment. */
static int scope_reopen(pdshmpy_scope *sc) {
  pdshmpy_state *st = PDSHMPY_STATE(sc);
  scope_drop(sc);
  if (!sc->path) {
    pdshmpy_raise_msg(st, PDSHM_EFORKED,
                      "an anonymous scope of the parent process cannot be used after fork()");
    return -1;
  }
  const char *path = PyUnicode_AsUTF8(sc->path);
  if (!path) return -1;
  pdshm_seg *seg = sc->seg->seg;
  pdshm_scope *h = NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_scope_open(seg, path, &h));
  if (rc) {
    pdshmpy_raise_forked(st, rc, "scope '%s' cannot be opened again after fork()", path);
    return -1;
  }
  if (sc->h && sc->forkgen == pdshmpy_forkgen()) { /* another thread reopened it meanwhile */
    PDSHMPY_NOGIL(pdshm_scope_release(h));
    return 0;
  }
  sc->h = h;
  sc->forkgen = pdshmpy_forkgen();
  sc->busy = 0;
  return 0;
}

/* The handle for a call on sc (reopening a named scope after fork()), or NULL
 * with an exception.  Until scope_end the Segment stays attached and the
 * handle valid, whatever other threads do meanwhile (release(), detach()),
 * so the call may release the GIL. */
static pdshm_scope *scope_begin(pdshmpy_scope *sc) {
  if (sc->released) {
    pdshmpy_raise_msg(PDSHMPY_STATE(sc), PDSHM_EINVAL, "the scope was released");
    return NULL;
  }
  if (!pdshmpy_seg_begin(sc->seg)) return NULL;
  if ((!sc->h || sc->forkgen != pdshmpy_forkgen()) && scope_reopen(sc) < 0) {
    pdshmpy_seg_unhold(sc->seg);
    return NULL;
  }
  sc->busy++;
  return sc->h;
}

/* Ends a call begun by scope_begin: the handle goes now if release() or
 * detach() came meanwhile. */
static void scope_end(pdshmpy_scope *sc) {
  if (--sc->busy == 0 && sc->h && (sc->released || sc->seg->closed)) {
    pdshm_scope *h = sc->h;
    sc->h = NULL;
    PDSHMPY_NOGIL(pdshm_scope_release(h));
  }
  pdshmpy_seg_unhold(sc->seg);
}

static PyObject *scope_fail(PyObject *self, int rc, const char *kind, PyObject *name) {
  char what[PDSHM_NAME_MAX + 64];
  const char *n = name ? PyUnicode_AsUTF8(name) : NULL;
  if (n) PyOS_snprintf(what, sizeof what, "%s '%s'", kind, n);
  else PyOS_snprintf(what, sizeof what, "%s", kind);
  return pdshmpy_raise(PDSHMPY_STATE(self), rc, what);
}

/* ---- paths --------------------------------------------------------------------------- */

static PyObject *path_join(PyObject *parent, const char *name) {
  if (!parent) Py_RETURN_NONE;
  if (PyUnicode_GET_LENGTH(parent) == 0) return PyUnicode_FromString(name);
  return PyUnicode_FromFormat("%U/%s", parent, name);
}

/* The path of the scope h refers to: a str, None when anonymous, NULL on
 * error.  The caller holds the Segment. */
static PyObject *path_of(pdshmpy_state *st, pdshm_scope *h) {
  char name[PDSHM_NAME_MAX + 1];
  PyOS_snprintf(name, sizeof name, "%s", pdshm_scope_name(h));
  pdshm_scope *p = NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_scope_parent(h, &p));
  if (rc == PDSHM_ENOENT) return PyUnicode_FromString("");
  if (rc) return pdshmpy_raise(st, rc, "the parent scope");
  PyObject *r;
  if (!name[0]) {
    r = Py_NewRef(Py_None);
  } else {
    PyObject *pp = path_of(st, p);
    r = pp ? path_join(pp == Py_None ? NULL : pp, name) : NULL;
    Py_XDECREF(pp);
  }
  PDSHMPY_NOGIL(pdshm_scope_release(p));
  return r;
}

/* Without the GIL: a new handle on the nearest scope at or above h that is
 * named or the root (*root set for the root). */
static int base_handle(pdshm_scope *h, pdshm_scope **out, int *root) {
  pdshm_scope *cur = NULL;
  int rc = pdshm_scope_dup(h, &cur);
  while (!rc && !pdshm_scope_name(cur)[0]) {
    pdshm_scope *up = NULL;
    rc = pdshm_scope_parent(cur, &up);
    if (rc == PDSHM_ENOENT) { /* cur is the root */
      *root = 1;
      rc = 0;
      break;
    }
    pdshm_scope_release(cur);
    cur = rc ? NULL : up;
  }
  *out = cur;
  return rc;
}

/* The path of the nearest scope at or above h that is named or the root. */
static PyObject *base_of(pdshmpy_state *st, pdshm_scope *h) {
  pdshm_scope *b = NULL;
  int root = 0, rc;
  PDSHMPY_NOGIL(rc = base_handle(h, &b, &root));
  if (rc) return pdshmpy_raise(st, rc, "the parent scope");
  PyObject *r = root ? PyUnicode_FromString("") : path_of(st, b);
  PDSHMPY_NOGIL(pdshm_scope_release(b));
  return r;
}

/* sc's base (see pdshmpy_scope), computed once. */
static PyObject *scope_base(pdshmpy_scope *sc, pdshm_scope *h) {
  if (!sc->base) {
    PyObject *b = base_of(PDSHMPY_STATE(sc), h);
    if (!b || b == Py_None) return b;
    if (sc->base) Py_DECREF(b); /* another thread found it meanwhile */
    else sc->base = b;
  }
  return Py_NewRef(sc->base);
}

/* ---- the Vars last found ----------------------------------------------------------------
 * A Var is a weak reference (segment, offset, generation), so the Var that a
 * lookup made serves the next lookup that finds the same variable again: the
 * same record and generation (a variable erased and made again at the same
 * record has a new generation), made the same way (owned by this scope, or
 * found up the chain from it, whose search path is this scope's base).  The
 * lookup itself runs every time: only the object is reused, so what a call
 * returns is what the segment holds now.  The slots are used under the GIL;
 * they point to Vars, which point to the Segment only (invariant 5 of
 * pdshmpy.h).  A Segment detached or forked needs nothing here: every call
 * on the Scope checks it first, and a Var resolves its reference at each use. */

#define FOUND_HALF (PDSHMPY_SCOPE_FOUND / 2)

/* The slot of the variable at record offset off (records are 64-byte
 * aligned, or more: the bits above the alignment pick it). */
static PyObject **found_slot(pdshmpy_scope *sc, uint64_t off, int up) {
  unsigned i = (unsigned)((off >> 6) ^ (off >> 12)) % FOUND_HALF;
  return &sc->found[up ? FOUND_HALF + i : i];
}

/* A Var of v: owned by sc (up 0), or found up the chain from sc (up 1, base
 * its search path, NULL when sc has none). */
static PyObject *scope_var_obj(pdshmpy_scope *sc, pdshm_var *v, int up, PyObject *base) {
  pdshm_varref ref = pdshm_var_ref(v);
  PyObject **slot = found_slot(sc, ref.off, up);
  pdshmpy_var *last = (pdshmpy_var *)*slot;
  if (last && last->ref.off == ref.off && last->ref.gen == ref.gen) return Py_NewRef(last);
  PyObject *o = up ? pdshmpy_var_wrap_ref(sc->seg, ref, NULL, base)
                   : pdshmpy_var_wrap_ref(sc->seg, ref, sc->path, NULL);
  if (o) Py_XSETREF(*slot, Py_NewRef(o)); /* the slot is set before the old Var goes */
  return o;
}

/* A Var owned by this scope. */
static PyObject *var_result(PyObject *self, pdshm_var *v) {
  return scope_var_obj(SC(self), v, 0, NULL);
}

/* ---- attributes ------------------------------------------------------------------------ */

static PyObject *scope_get_name(PyObject *self, void *closure) {
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  const char *n = pdshm_scope_name(h);
  PyObject *r = *n ? PyUnicode_DecodeUTF8(n, (Py_ssize_t)strnlen(n, PDSHM_NAME_MAX), "replace")
                   : Py_NewRef(Py_None); /* anonymous, or the root */
  scope_end(SC(self));
  return r;
}

static PyObject *scope_get_path(PyObject *self, void *closure) {
  return Py_NewRef(SC(self)->path ? SC(self)->path : Py_None);
}

static PyObject *scope_parent_of(pdshmpy_scope *sc, pdshm_scope *h) {
  pdshm_scope *p = NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_scope_parent(h, &p));
  if (rc == PDSHM_ENOENT) Py_RETURN_NONE;
  if (rc) return pdshmpy_raise(PDSHMPY_STATE(sc), rc, "the parent scope");
  PyObject *path;
  if (sc->path) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(sc->path);
    Py_ssize_t slash = PyUnicode_FindChar(sc->path, '/', 0, n, -1);
    path = slash >= 0 ? PyUnicode_Substring(sc->path, 0, slash) : PyUnicode_FromString("");
  } else {
    path = path_of(PDSHMPY_STATE(sc), p);
  }
  if (!path) {
    PDSHMPY_NOGIL(pdshm_scope_release(p));
    return NULL;
  }
  PyObject *r = pdshmpy_scope_wrap(sc->seg, p, path == Py_None ? NULL : path, NULL);
  Py_DECREF(path);
  return r;
}

static PyObject *scope_get_parent(PyObject *self, void *closure) {
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  PyObject *r = scope_parent_of(SC(self), h);
  scope_end(SC(self));
  return r;
}

static PyObject *scope_get_segment(PyObject *self, void *closure) {
  return Py_NewRef((PyObject *)SC(self)->seg);
}

/* ---- kids ------------------------------------------------------------------------------- */

static PyObject *scope_kid(pdshmpy_scope *sc, pdshm_scope *h, const char *n, PyObject *name) {
  pdshm_scope *kid = NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_scope_new(h, n, &kid));
  if (rc) return scope_fail((PyObject *)sc, rc, "new scope", n ? name : NULL);
  PyObject *path = n ? path_join(sc->path, n) : Py_NewRef(Py_None);
  if (!path) {
    PDSHMPY_NOGIL(pdshm_scope_release(kid));
    return NULL;
  }
  PyObject *base = sc->path ? sc->path : sc->base;
  PyObject *r = pdshmpy_scope_wrap(sc->seg, kid, path == Py_None ? NULL : path, base);
  Py_DECREF(path);
  return r;
}

static PyObject *scope_new_scope(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"name", NULL};
  PyObject *name = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:new_scope", kwlist, &name)) return NULL;
  const char *n = name == Py_None ? NULL : pdshmpy_utf8(name, "scope name");
  if (!n && name != Py_None) return NULL;
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  PyObject *r = scope_kid(SC(self), h, n, name);
  scope_end(SC(self));
  return r;
}

static PyObject *scope_local(PyObject *self, PyObject *unused) {
  PyObject *args = PyTuple_New(0);
  if (!args) return NULL;
  PyObject *r = scope_new_scope(self, args, NULL);
  Py_DECREF(args);
  return r;
}

static PyObject *scope_unlink(PyObject *self, PyObject *name) {
  const char *n = pdshmpy_utf8(name, "scope name");
  if (!n) return NULL;
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_scope_unlink(h, n));
  scope_end(SC(self));
  if (rc) return scope_fail(self, rc, "scope", name);
  Py_RETURN_NONE;
}

static PyObject *scope_drop_kids(PyObject *self, PyObject *unused) {
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_scope_drop_kids(h));
  scope_end(SC(self));
  if (rc) return scope_fail(self, rc, "drop_kids", NULL);
  Py_RETURN_NONE;
}

/* ---- variables ------------------------------------------------------------------------- */

typedef int (*var_maker)(pdshm_scope *, const char *, pdshm_var **);

/* make(h, name) without the GIL; name NULL for pdshm_var_new. */
static PyObject *scope_make_var(PyObject *self, PyObject *name, var_maker make) {
  const char *n = name ? pdshmpy_utf8(name, "variable name") : NULL;
  if (name && !n) return NULL;
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  pdshm_var *v = NULL;
  int rc;
  PDSHMPY_NOGIL(rc = n ? make(h, n, &v) : pdshm_var_new(h, &v));
  PyObject *r = rc ? scope_fail(self, rc, n ? "variable" : "new variable", name)
                   : var_result(self, v);
  scope_end(SC(self));
  return r;
}

static PyObject *scope_var(PyObject *self, PyObject *name) {
  return scope_make_var(self, name, pdshm_var_get);
}

static PyObject *scope_create_var(PyObject *self, PyObject *name) {
  return scope_make_var(self, name, pdshm_var_create);
}

static PyObject *scope_new_var(PyObject *self, PyObject *unused) {
  return scope_make_var(self, NULL, NULL);
}

/* find_var / find_local_var: a Var or None.  A variable found up the chain
 * gets its owner's path lazily (pdshmpy_var.search_path): finding stays one
 * lookup.  The lookup runs with the GIL held, as it never waits, and its
 * answer is kept (kept.c); when a writer is inside a table it must read, it
 * waits for the writer with the GIL released instead. */
static PyObject *scope_answer(PyObject *self, pdshm_scope *h, pdshm_var *v, int local) {
  if (!v) return Py_NewRef(Py_None);
  if (local) return var_result(self, v);
  PyObject *base = scope_base(SC(self), h);
  if (!base) return NULL;
  PyObject *r = scope_var_obj(SC(self), v, 1, base == Py_None ? NULL : base);
  Py_DECREF(base);
  return r;
}

static PyObject *scope_lookup_in(PyObject *self, pdshm_scope *h, PyObject *name, const char *n,
                                 int local) {
  pdshm_var *v;
  pdshm_find_stamp stamp;
  if (!pdshm_find_var_now(h, n, !local, &v, &stamp)) {
    PyObject *r = scope_answer(self, h, v, local);
    if (r) pdshmpy_kept_put(SC(self), name, !local, r, &stamp);
    return r;
  }
  PDSHMPY_NOGIL(v = local ? pdshm_find_local_var(h, n) : pdshm_find_var(h, n));
  return scope_answer(self, h, v, local);
}

static PyObject *scope_lookup(PyObject *self, PyObject *name, int local) {
  if (!PyUnicode_Check(name)) {
    pdshmpy_utf8(name, "variable name"); /* raises the TypeError */
    return NULL;
  }
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  PyObject *r = pdshmpy_kept_get(SC(self), name, !local);
  if (!r) {
    const char *n = pdshmpy_utf8(name, "variable name");
    r = n ? scope_lookup_in(self, h, name, n, local) : NULL;
  }
  scope_end(SC(self));
  return r;
}

static PyObject *scope_find_var(PyObject *self, PyObject *name) {
  return scope_lookup(self, name, 0);
}

static PyObject *scope_find_local_var(PyObject *self, PyObject *name) {
  return scope_lookup(self, name, 1);
}

static PyObject *scope_getitem(PyObject *self, PyObject *name) {
  PyObject *r = scope_lookup(self, name, 0);
  if (r != Py_None) return r;
  Py_DECREF(r);
  return scope_fail(self, PDSHM_ENOENT, "variable", name);
}

static int scope_contains(PyObject *self, PyObject *name) {
  if (!PyUnicode_Check(name)) return 0;
  PyObject *r = scope_lookup(self, name, 0);
  if (!r) return -1;
  int found = r != Py_None;
  Py_DECREF(r);
  return found;
}

static PyObject *scope_erase(PyObject *self, PyObject *name) {
  const char *n = pdshmpy_utf8(name, "variable name");
  if (!n) return NULL;
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_var_erase(h, n));
  scope_end(SC(self));
  if (rc) return scope_fail(self, rc, "variable", name);
  Py_RETURN_NONE;
}

static PyObject *scope_rename(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "rename(old, new) takes 2 arguments");
    return NULL;
  }
  const char *from = pdshmpy_utf8(args[0], "old name");
  const char *to = from ? pdshmpy_utf8(args[1], "new name") : NULL;
  if (!to) return NULL;
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_var_rename(h, from, to));
  scope_end(SC(self));
  if (rc) return scope_fail(self, rc, "variable", rc == PDSHM_EEXIST ? args[1] : args[0]);
  Py_RETURN_NONE;
}

/* The references of a scope's variables, collected without the GIL. */
typedef struct {
  pdshm_varref *refs;
  size_t n, cap;
} ref_list;

static int collect_ref(pdshm_var *v, void *arg) {
  ref_list *l = arg;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    pdshm_varref *more = PyMem_RawRealloc(l->refs, cap * sizeof *more);
    if (!more) return 1;
    l->refs = more;
    l->cap = cap;
  }
  l->refs[l->n++] = pdshm_var_ref(v);
  return 0;
}

static PyObject *vars_list(PyObject *self, const ref_list *l) {
  PyObject *list = PyList_New((Py_ssize_t)l->n);
  for (size_t i = 0; list && i < l->n; i++) {
    PyObject *o = pdshmpy_var_wrap_ref(SC(self)->seg, l->refs[i], SC(self)->path, NULL);
    if (!o) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, o);
  }
  return list;
}

static PyObject *scope_vars(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"label", NULL};
  PyObject *label = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:vars", kwlist, &label)) return NULL;
  const char *lab = label == Py_None ? NULL : pdshmpy_utf8(label, "label");
  if (!lab && label != Py_None) return NULL;
  pdshm_scope *h = scope_begin(SC(self));
  if (!h) return NULL;
  ref_list l = {NULL, 0, 0};
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_scope_foreach_var(h, lab, collect_ref, &l));
  scope_end(SC(self));
  PyObject *r = rc == 1 ? PyErr_NoMemory() : rc < 0 ? scope_fail(self, rc, "vars", NULL)
                                                    : vars_list(self, &l);
  PyMem_RawFree(l.refs);
  return r;
}

/* ---- Segment.root, Segment.open ---------------------------------------------------------- */

/* A Scope on the root (path NULL) or on the scope at path, opened with the
 * GIL released. */
static PyObject *seg_scope_at(pdshmpy_seg *s, PyObject *path) {
  const char *p = path ? pdshmpy_utf8(path, "path") : "";
  if (!p) return NULL;
  pdshm_seg *seg = pdshmpy_seg_begin(s);
  if (!seg) return NULL;
  pdshm_scope *h = NULL;
  int rc;
  PDSHMPY_NOGIL(rc = path ? pdshm_scope_open(seg, p, &h) : pdshm_root(seg, &h));
  PyObject *r = NULL;
  if (rc && path) pdshmpy_raise_fmt(PDSHMPY_STATE(s), rc, "scope path '%s'", p);
  else if (rc) pdshmpy_raise(PDSHMPY_STATE(s), rc, "the root scope");
  else if (path) r = pdshmpy_scope_wrap(s, h, path, NULL);
  else if ((path = PyUnicode_FromString(""))) {
    r = pdshmpy_scope_wrap(s, h, path, NULL);
    Py_DECREF(path);
  } else {
    PDSHMPY_NOGIL(pdshm_scope_release(h));
  }
  pdshmpy_seg_unhold(s);
  return r;
}

PyObject *pdshmpy_seg_root(PyObject *self, void *closure) {
  return seg_scope_at((pdshmpy_seg *)self, NULL);
}

PyObject *pdshmpy_seg_open_path(PyObject *self, PyObject *path) {
  return seg_scope_at((pdshmpy_seg *)self, path);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static void scope_release_now(pdshmpy_scope *sc) {
  sc->released = 1;
  pdshmpy_list_del(&sc->link);
  scope_drop(sc);
}

static PyObject *scope_release(PyObject *self, PyObject *unused) {
  scope_release_now(SC(self));
  Py_RETURN_NONE;
}

static PyObject *scope_enter(PyObject *self, PyObject *unused) {
  if (!scope_begin(SC(self))) return NULL;
  scope_end(SC(self));
  return Py_NewRef(self);
}

static PyObject *scope_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  scope_release_now(SC(self));
  Py_RETURN_FALSE;
}

static PyObject *scope_reduce(PyObject *self, PyObject *unused) {
  pdshmpy_scope *sc = SC(self);
  if (!sc->path) {
    PyErr_SetString(PyExc_TypeError, "an anonymous scope cannot be pickled");
    return NULL;
  }
  PyObject *mod = PyImport_ImportModule("pdshm._pickle");
  if (!mod) return NULL;
  PyObject *fn = PyObject_GetAttrString(mod, "scope");
  Py_DECREF(mod);
  if (!fn) return NULL;
  return Py_BuildValue("N(OO)", fn, (PyObject *)sc->seg, sc->path);
}

/* == : the same object, or the same named scope (or root) of the same
 * segment, by path; an anonymous scope equals only itself. */
static PyObject *scope_richcompare(PyObject *a, PyObject *b, int op) {
  if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != Py_TYPE(b)) Py_RETURN_NOTIMPLEMENTED;
  pdshmpy_scope *x = SC(a), *y = SC(b);
  int same = a == b;
  if (!same && x->path && y->path) {
    same = PyObject_RichCompareBool(x->path, y->path, Py_EQ);
    if (same > 0) same = PyObject_RichCompareBool(x->seg->name, y->seg->name, Py_EQ);
    if (same < 0) return NULL;
  }
  return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static Py_hash_t scope_hash(PyObject *self) {
  pdshmpy_scope *sc = SC(self);
  if (!sc->path) { /* identity, as object.__hash__ */
    Py_hash_t p = (Py_hash_t)((uintptr_t)self >> 4);
    return p == -1 ? -2 : p;
  }
  Py_hash_t h = PyObject_Hash(sc->path), n = PyObject_Hash(sc->seg->name);
  if (h == -1 || n == -1) return -1;
  h ^= n * 1000003;
  return h == -1 ? -2 : h;
}

static PyObject *scope_repr(PyObject *self) {
  pdshmpy_scope *sc = SC(self);
  const char *state = sc->released ? " released" : "";
  if (!sc->path) return PyUnicode_FromFormat("<pdshm.Scope anonymous in %R%s>", sc->seg->name, state);
  if (PyUnicode_GET_LENGTH(sc->path) == 0)
    return PyUnicode_FromFormat("<pdshm.Scope root of %R%s>", sc->seg->name, state);
  return PyUnicode_FromFormat("<pdshm.Scope %R in %R%s>", sc->path, sc->seg->name, state);
}

static void scope_dealloc(PyObject *self) {
  pdshmpy_scope *sc = SC(self);
  PyTypeObject *tp = Py_TYPE(self);
  if (sc->weakrefs) PyObject_ClearWeakRefs(self);
  pdshmpy_list_del(&sc->link); /* before the GIL goes: nobody finds it meanwhile */
  scope_drop(sc);
  Py_CLEAR(sc->path);
  Py_CLEAR(sc->base);
  for (int i = 0; i < PDSHMPY_SCOPE_FOUND; i++) Py_CLEAR(sc->found[i]);
  pdshmpy_kept_clear(sc);
  Py_CLEAR(sc->seg);
  tp->tp_free(self);
  Py_DECREF(tp);
}

static PyMethodDef scope_methods[] = {
    {"new_scope", (PyCFunction)(void (*)(void))scope_new_scope, METH_VARARGS | METH_KEYWORDS,
     "new_scope(name=None) -> Scope\n\nA child scope.  Anonymous (name None): reclaimed "
     "when its last\nhandle is released.  Named: published under this (root or named) "
     "scope,\nopenable by path until unlinked; Exists for a taken name."},
    {"local", scope_local, METH_NOARGS,
     "local() -> Scope\n\nAn anonymous child, for `with scope.local() as s:` (released at "
     "exit)."},
    {"var", scope_var, METH_O,
     "var(name) -> Var\n\nThe local variable of that name, created when absent "
     "(shadowing a parent's)."},
    {"create_var", scope_create_var, METH_O,
     "create_var(name) -> Var\n\nCreates the variable; Exists when the scope has one of "
     "that name."},
    {"new_var", scope_new_var, METH_NOARGS,
     "new_var() -> Var\n\nA variable under a generated name, never reused."},
    {"find_var", scope_find_var, METH_O,
     "find_var(name) -> Var | None\n\nThe nearest variable of that name up the parent "
     "chain.  A Var it returned before may come back for the same variable."},
    {"find_local_var", scope_find_local_var, METH_O,
     "find_local_var(name) -> Var | None\n\nThis scope's own variable of that name."},
    {"erase", scope_erase, METH_O,
     "erase(name)\n\nErases this scope's own variable (NotFound when not local)."},
    {"rename", (PyCFunction)(void (*)(void))scope_rename, METH_FASTCALL,
     "rename(old, new)\n\nRenames this scope's own variable, keeping the object."},
    {"vars", (PyCFunction)(void (*)(void))scope_vars, METH_VARARGS | METH_KEYWORDS,
     "vars(label=None) -> list[Var]\n\nThis scope's own variables, only those with that "
     "label unless None."},
    {"unlink", scope_unlink, METH_O,
     "unlink(name)\n\nUnlinks the named child scope (and its named subtree)."},
    {"drop_kids", scope_drop_kids, METH_NOARGS,
     "drop_kids()\n\nUnlinks every child; handles others hold stay usable until "
     "released.\nThe scope's own variables stay."},
    {"release", scope_release, METH_NOARGS,
     "release()\n\nDrops this handle's reference (an anonymous scope without other "
     "holders\ngoes with its variables).  Later calls raise pdshm.Error."},
    {"__enter__", scope_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))scope_exit, METH_FASTCALL, NULL},
    {"__reduce__", scope_reduce, METH_NOARGS, NULL},
    {NULL}};

static PyGetSetDef scope_getset[] = {
    {"name", scope_get_name, NULL, "The scope's name; None if anonymous and for the root (path \"\").",
     NULL},
    {"path", scope_get_path, NULL,
     "The path from the root (\"\" for the root, \"a/b\"); None if anonymous.", NULL},
    {"parent", scope_get_parent, NULL, "A new handle on the parent; None at the root.", NULL},
    {"segment", scope_get_segment, NULL, "The Segment this scope belongs to.", NULL},
    {NULL}};

static PyMemberDef scope_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pdshmpy_scope, weakrefs), READONLY},
    {NULL}};

static PyType_Slot scope_slots[] = {
    {Py_tp_doc,
     "A handle on a scope: one reference, released by release(), `with` exit or\n"
     "garbage collection.  s[name] looks up the parent chain (KeyError when absent);\n"
     "`name in s` likewise.  A named scope pickles by its path.  Two handles on the\n"
     "same named scope (or root) compare equal; an anonymous one equals only itself."},
    {Py_tp_dealloc, scope_dealloc},
    {Py_tp_repr, scope_repr},
    {Py_tp_richcompare, scope_richcompare},
    {Py_tp_hash, scope_hash},
    {Py_tp_methods, scope_methods},
    {Py_tp_getset, scope_getset},
    {Py_tp_members, scope_members},
    {Py_mp_subscript, scope_getitem},
    {Py_sq_contains, scope_contains},
    {0, NULL}};

PyType_Spec pdshmpy_scope_spec = {
    .name = "pdshm.Scope",
    .basicsize = sizeof(pdshmpy_scope),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = scope_slots,
};
