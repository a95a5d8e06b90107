/*
 * introspect.c - what pdshm-attach shows, as Python records: stats(),
 * info(), scopes(), vars_of(), procs(), locks(), alloc(), check().
 *
 * Records are struct sequences (attribute access, also tuples) whose field
 * names are those of the C structs of include/pdshm.h; enums come as short
 * strings ("alive", "tensor", "exclusive", "var", ...) and dtypes as names.
 * All of them work on a read-only attachment.  Walks that may be long run
 * with the GIL released, copying into private memory, and the records are
 * made afterwards.
 */
#include <stdarg.h>
#include <stdlib.h>

#include "pdshmpy.h"

#define F(name, doc) {name, doc}
static PyStructSequence_Field stats_fields[] = {
    F("size", "bytes of the arena"), F("used", "bytes handed out to live objects"),
    F("free", "bytes free (process caches included)"), F("scopes", "live scopes"),
    F("vars", "live variables"), F("tensor_bytes", "bytes of tensor data"),
    F("procs_alive", "attached processes"), F("procs_dead", "dead processes not yet reaped"),
    {NULL}};
static PyStructSequence_Field seginfo_fields[] = {
    F("size", "bytes of the segment now"), F("arena", "bytes of the arena"),
    F("layout_version", NULL), F("max_procs", NULL), F("max_locks", NULL),
    F("creator_pid", NULL), F("creator_uid", NULL), F("daemon_pid", "0 when none"),
    F("created_ns", "CLOCK_REALTIME"), F("daemon_beat_ns", "0 when none"),
    F("reaped", "slots reaped since create"), F("poisoned", "a repair failed"),
    F("max_size", "the most it grows to"), F("first_size", "bytes at create"),
    F("growths", "times it grew"), {NULL}};
static PyStructSequence_Field scopeinfo_fields[] = {
    F("id", "unique for the segment's life"), F("parent_id", "0 for the root"), F("depth", NULL),
    F("named", NULL), F("linked", "openable by path"), F("last", "last kid of its parent"),
    F("name", "\"\" for an anonymous scope and the root"), F("refs", "handles + kids + link"),
    F("kids", NULL), F("vars", NULL), F("bytes", "of its blocks, tensors included"),
    F("tensor_bytes", NULL), F("creator_pid", NULL), F("nholders", "processes holding a handle"),
    F("holders", "the first of their pids"), F("handles", NULL), F("created_ns", NULL), {NULL}};
static PyStructSequence_Field varinfo_fields[] = {
    F("scope_id", NULL), F("gen", "its incarnation"), F("name", NULL), F("label", NULL),
    F("type", "\"empty\" or \"tensor\""), F("dtype", "name, None unless a tensor"),
    F("shape", "tuple, None unless a tensor"), F("nbytes", "of the tensor's data"),
    F("bytes", "of its blocks"), F("version", NULL),
    F("lock_state", "\"free\", \"shared\" or \"exclusive\""), F("lock_readers", NULL),
    F("lock_holder_pid", NULL), F("lock", "lock-table entry, 0 before its first lock"),
    F("readers", "tuple of operator names"), F("writers", "tuple of operator names"), {NULL}};
static PyStructSequence_Field procinfo_fields[] = {
    F("slot", NULL), F("pid", NULL), F("state", "\"alive\", \"dead\" or \"reaping\""),
    F("reaper_pid", NULL), F("attach_ns", NULL), F("handles", NULL), F("bytes_held", NULL),
    {NULL}};
static PyStructSequence_Field lockinfo_fields[] = {
    F("index", NULL), F("kind", "\"heap\", \"scope\" or \"var\""), F("scope_id", NULL),
    F("var", "the variable's name, None unless kind is \"var\""), F("held", NULL),
    F("holder_pid", NULL), F("acquisitions", NULL), F("contended", NULL), F("wait_ns", NULL),
    F("owner_died", NULL), F("unrecoverable", NULL), {NULL}};
static PyStructSequence_Field allocinfo_fields[] = {
    F("arena", NULL), F("used", NULL), F("free", "cached included"), F("cached", NULL),
    F("blocks_used", NULL), F("blocks_free", NULL), F("blocks_cached", NULL),
    F("largest_free", NULL), F("large_used", NULL), F("large_blocks", NULL),
    F("punched", "bytes given back to the system"), F("rebuilds", NULL),
    F("fragmentation", NULL), F("scope_bytes", NULL), F("var_bytes", NULL),
    F("name_bytes", NULL), F("table_bytes", NULL), F("tensor_bytes", NULL),
    F("handle_bytes", NULL), F("oplist_bytes", NULL), F("hold_bytes", NULL),
    F("raw_bytes", NULL), F("classes", "tuple of AllocClass"), {NULL}};
static PyStructSequence_Field allocclass_fields[] = {
    F("block_size", NULL), F("used", NULL), F("cached", NULL), {NULL}};

static int add_record_type(PyObject *module, PyTypeObject **slot, const char *name,
                           const char *doc, PyStructSequence_Field *fields) {
  PyStructSequence_Desc desc = {name, doc, fields, 0};
  for (PyStructSequence_Field *f = fields; f->name; f++) desc.n_in_sequence++;
  *slot = PyStructSequence_NewType(&desc);
  if (!*slot) return -1;
  return PyModule_AddObjectRef(module, strrchr(name, '.') + 1, (PyObject *)*slot);
}

int pdshmpy_introspect_init(PyObject *module, pdshmpy_state *st) {
  return add_record_type(module, &st->stats_type, "pdshm.Stats", "Segment.stats()", stats_fields) ||
         add_record_type(module, &st->seginfo_type, "pdshm.SegInfo", "Segment.info()",
                         seginfo_fields) ||
         add_record_type(module, &st->scopeinfo_type, "pdshm.ScopeInfo", "Segment.scopes()",
                         scopeinfo_fields) ||
         add_record_type(module, &st->varinfo_type, "pdshm.VarInfo", "Segment.vars_of()",
                         varinfo_fields) ||
         add_record_type(module, &st->procinfo_type, "pdshm.ProcInfo", "Segment.procs()",
                         procinfo_fields) ||
         add_record_type(module, &st->lockinfo_type, "pdshm.LockInfo", "Segment.locks()",
                         lockinfo_fields) ||
         add_record_type(module, &st->allocinfo_type, "pdshm.AllocInfo", "Segment.alloc()",
                         allocinfo_fields) ||
         add_record_type(module, &st->allocclass_type, "pdshm.AllocClass",
                         "AllocInfo.classes: one small size class", allocclass_fields)
             ? -1
             : 0;
}

/* A record of type tp from Py_BuildValue's "(...)" format. */
static PyObject *record(PyTypeObject *tp, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *t = Py_VaBuildValue(fmt, ap);
  va_end(ap);
  if (!t) return NULL;
  PyObject *r = PyStructSequence_New(tp);
  for (Py_ssize_t i = 0; r && i < PyTuple_GET_SIZE(t); i++)
    PyStructSequence_SetItem(r, i, Py_NewRef(PyTuple_GET_ITEM(t, i)));
  Py_DECREF(t);
  return r;
}

static PyObject *cstr(const char *s) {
  return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strnlen(s, PDSHM_NAME_MAX + 1), "replace");
}

static pdshm_seg *seg_of(PyObject *self) { return pdshmpy_seg_get((pdshmpy_seg *)self); }

static PyObject *fail(PyObject *self, int rc, const char *what) {
  return pdshmpy_raise(PDSHMPY_STATE(self), rc, what);
}

/* ---- stats, info, check -------------------------------------------------------------------- */

PyObject *pdshmpy_seg_stats(PyObject *self, PyObject *unused) {
  pdshm_seg *seg = seg_of(self);
  if (!seg) return NULL;
  pdshm_stats s;
  int rc;
  pdshmpy_seg_hold((pdshmpy_seg *)self);
  PDSHMPY_NOGIL(rc = pdshm_seg_stats(seg, &s));
  pdshmpy_seg_unhold((pdshmpy_seg *)self);
  if (rc) return fail(self, rc, "stats");
  return record(PDSHMPY_STATE(self)->stats_type, "(KKKKKKkk)", s.size, s.used, s.free, s.scopes,
                s.vars, s.tensor_bytes, (unsigned long)s.procs_alive,
                (unsigned long)s.procs_dead);
}

PyObject *pdshmpy_seg_info(PyObject *self, PyObject *unused) {
  pdshm_seg *seg = seg_of(self);
  if (!seg) return NULL;
  pdshm_seg_info i;
  int rc = pdshm_inspect_seg(seg, &i);
  if (rc) return fail(self, rc, "info");
  return record(PDSHMPY_STATE(self)->seginfo_type, "(KKIIIIIIKKKNKKK)", i.size, i.arena,
                i.layout_version, i.max_procs, i.max_locks, i.creator_pid, i.creator_uid,
                i.daemon_pid, i.created_ns, i.daemon_beat_ns, i.reaped,
                PyBool_FromLong(i.poisoned), i.max_size, i.first_size, i.growths);
}

PyObject *pdshmpy_seg_check(PyObject *self, PyObject *unused) {
  pdshm_seg *seg = seg_of(self);
  if (!seg) return NULL;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return PyErr_SetFromErrno(PyExc_OSError);
  int rc;
  pdshmpy_seg_hold((pdshmpy_seg *)self);
  PDSHMPY_NOGIL(rc = pdshm_check(seg, f));
  pdshmpy_seg_unhold((pdshmpy_seg *)self);
  fclose(f);
  PyObject *lines = NULL;
  if (rc && rc != PDSHM_EBADSEG) {
    fail(self, rc, "check");
  } else {
    PyObject *s = PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "replace");
    lines = s ? PyUnicode_Splitlines(s, 0) : NULL;
    Py_XDECREF(s);
    if (lines && rc && PyList_GET_SIZE(lines) == 0) {
      PyObject *said = PyUnicode_FromFormat("pdshm_check: %s", pdshm_strerror(rc));
      if (!said || PyList_Append(lines, said) < 0) Py_CLEAR(lines);
      Py_XDECREF(said);
    }
  }
  free(text);
  return lines;
}

/* ---- scopes ---------------------------------------------------------------------------------- */

typedef struct {
  void *items;
  size_t n, cap, size;
} grow_buf;

static int grow_push(grow_buf *g, const void *item) {
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 64;
    void *p = realloc(g->items, cap * g->size);
    if (!p) return PDSHM_ENOMEM;
    g->items = p;
    g->cap = cap;
  }
  memcpy((char *)g->items + g->n++ * g->size, item, g->size);
  return 0;
}

static int scope_copy(const pdshm_scope_info *si, void *arg) { return grow_push(arg, si); }

static PyObject *scope_record(pdshmpy_state *st, const pdshm_scope_info *si) {
  uint32_t nh = si->nholders < PDSHM_HOLDERS_MAX ? si->nholders : PDSHM_HOLDERS_MAX;
  PyObject *holders = PyTuple_New(nh);
  for (uint32_t k = 0; holders && k < nh; k++) {
    PyObject *pid = PyLong_FromUnsignedLong(si->holders[k]);
    if (!pid) Py_CLEAR(holders);
    else PyTuple_SET_ITEM(holders, k, pid);
  }
  if (!holders) return NULL;
  return record(st->scopeinfo_type, "(KKINNNNKKKKKIINKK)", si->id, si->parent_id, si->depth,
                PyBool_FromLong(si->named), PyBool_FromLong(si->linked), PyBool_FromLong(si->last),
                cstr(si->name), si->refs, si->kids, si->vars, si->bytes, si->tensor_bytes,
                si->creator_pid, si->nholders, holders, si->handles, si->created_ns);
}

PyObject *pdshmpy_seg_scopes(PyObject *self, PyObject *unused) {
  pdshm_seg *seg = seg_of(self);
  if (!seg) return NULL;
  grow_buf g = {NULL, 0, 0, sizeof(pdshm_scope_info)};
  int rc;
  pdshmpy_seg_hold((pdshmpy_seg *)self);
  PDSHMPY_NOGIL(rc = pdshm_inspect_scopes(seg, scope_copy, &g));
  pdshmpy_seg_unhold((pdshmpy_seg *)self);
  PyObject *list = rc ? fail(self, rc, "scopes") : PyList_New((Py_ssize_t)g.n);
  for (size_t i = 0; list && i < g.n; i++) {
    PyObject *r = scope_record(PDSHMPY_STATE(self), (pdshm_scope_info *)g.items + i);
    if (!r) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, r);
  }
  free(g.items);
  return list;
}

/* ---- variables --------------------------------------------------------------------------------- */

static PyObject *str_tuple(const char *const *names, uint32_t n) {
  PyObject *t = PyTuple_New(n);
  for (uint32_t k = 0; t && k < n; k++) {
    PyObject *s = cstr(names[k]);
    if (!s) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, k, s);
  }
  return t;
}

static PyObject *dims_tuple(const int64_t *dims, int ndim) {
  PyObject *t = PyTuple_New(ndim);
  for (int k = 0; t && k < ndim; k++) {
    PyObject *d = PyLong_FromLongLong(dims[k]);
    if (!d) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, k, d);
  }
  return t;
}

/* A variable's record copied out of the walk: the operator names the
 * callback sees are valid during the callback only. */
typedef struct {
  pdshm_var_info vi;
  char **ops; /* nreaders readers, then nwriters writers (strdup) */
} var_copy;

static void var_copies_free(grow_buf *g) {
  for (size_t i = 0; i < g->n; i++) {
    var_copy *c = (var_copy *)g->items + i;
    for (uint32_t k = 0; c->ops && k < c->vi.nreaders + c->vi.nwriters; k++) free(c->ops[k]);
    free(c->ops);
  }
  free(g->items);
}

static int var_copy_add(const pdshm_var_info *vi, void *arg) {
  var_copy c = {*vi, NULL};
  uint32_t n = vi->nreaders + vi->nwriters;
  if (n && !(c.ops = calloc(n, sizeof *c.ops))) return PDSHM_ENOMEM;
  for (uint32_t k = 0; k < n; k++) {
    const char *s = k < vi->nreaders ? vi->readers[k] : vi->writers[k - vi->nreaders];
    if (!(c.ops[k] = strndup(s, PDSHM_NAME_MAX))) goto nomem;
  }
  c.vi.readers = c.vi.writers = NULL;
  if (grow_push(arg, &c) == 0) return 0;
nomem:
  for (uint32_t k = 0; k < n; k++) free(c.ops[k]);
  free(c.ops);
  return PDSHM_ENOMEM;
}

static PyObject *var_record(pdshmpy_state *st, const var_copy *c) {
  static const char *lock_names[] = {"free", "shared", "exclusive"};
  const pdshm_var_info *vi = &c->vi;
  int tensor = vi->type == PDSHM_VAR_TENSOR && vi->ndim >= 0 && vi->ndim <= PDSHM_NDIM_MAX;
  const char *dt = tensor ? pdshmpy_dtype_name(vi->dtype) : NULL;
  PyObject *dtype = dt ? PyUnicode_FromString(dt) : Py_NewRef(Py_None);
  PyObject *shape = tensor ? dims_tuple(vi->dims, vi->ndim) : Py_NewRef(Py_None);
  PyObject *rd = str_tuple((const char *const *)c->ops, vi->nreaders);
  PyObject *wr = str_tuple((const char *const *)c->ops + vi->nreaders, vi->nwriters);
  if (!dtype || !shape || !rd || !wr) {
    Py_XDECREF(dtype), Py_XDECREF(shape), Py_XDECREF(rd), Py_XDECREF(wr);
    return NULL;
  }
  int ls = vi->lock_state >= 0 && vi->lock_state <= 2 ? vi->lock_state : 0;
  return record(st->varinfo_type, "(KKNNsNNKKKsKIINN)", vi->scope_id, vi->gen, cstr(vi->name),
                cstr(vi->label), vi->type == PDSHM_VAR_TENSOR ? "tensor" : "empty", dtype, shape,
                vi->nbytes, vi->bytes, vi->version, lock_names[ls], vi->lock_readers,
                vi->lock_holder_pid, vi->lock, rd, wr);
}

PyObject *pdshmpy_seg_vars_of(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"scope_id", NULL};
  PyObject *ido = NULL;
  unsigned long long id = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:vars_of", kwlist, &ido) ||
      (ido && pdshmpy_uint_arg(PDSHMPY_STATE(self), ido, "scope_id", UINT64_MAX, &id) < 0))
    return NULL;
  pdshm_seg *seg = seg_of(self);
  if (!seg) return NULL;
  grow_buf g = {NULL, 0, 0, sizeof(var_copy)};
  int rc;
  pdshmpy_seg_hold((pdshmpy_seg *)self);
  PDSHMPY_NOGIL(rc = pdshm_inspect_vars(seg, id, var_copy_add, &g));
  pdshmpy_seg_unhold((pdshmpy_seg *)self);
  PyObject *list = rc ? fail(self, rc, "vars_of") : PyList_New((Py_ssize_t)g.n);
  for (size_t i = 0; list && i < g.n; i++) {
    PyObject *r = var_record(PDSHMPY_STATE(self), (var_copy *)g.items + i);
    if (!r) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, r);
  }
  var_copies_free(&g);
  return list;
}

/* ---- processes, locks, allocator ----------------------------------------------------------- */

/* Without the GIL: the process slots in use, in *out (free() it), or a
 * negative code. */
static int procs_copy(pdshm_seg *seg, pdshm_proc_info **out) {
  pdshm_proc_info *p = NULL;
  unsigned cap = 64;
  int n;
  for (;;) {
    pdshm_proc_info *q = realloc(p, cap * sizeof *p);
    if (!q) {
      n = PDSHM_ENOMEM;
      break;
    }
    p = q;
    n = pdshm_procs(seg, p, cap);
    if (n <= (int)cap) break;
    cap = (unsigned)n;
  }
  *out = p;
  return n;
}

PyObject *pdshmpy_seg_procs(PyObject *self, PyObject *unused) {
  pdshm_seg *seg = seg_of(self);
  if (!seg) return NULL;
  static const char *states[] = {"?", "alive", "dead", "reaping"};
  pdshm_proc_info *p = NULL;
  int n, rc;
  pdshmpy_seg_hold((pdshmpy_seg *)self);
  PDSHMPY_NOGIL(n = procs_copy(seg, &p));
  pdshmpy_seg_unhold((pdshmpy_seg *)self);
  rc = n < 0 ? n : 0;
  PyObject *list = rc ? fail(self, rc, "procs") : PyList_New(n);
  for (int i = 0; list && i < n; i++) {
    int s = p[i].state >= 1 && p[i].state <= 3 ? p[i].state : 0;
    PyObject *r = record(PDSHMPY_STATE(self)->procinfo_type, "(IIsIKKK)", p[i].slot, p[i].pid,
                         states[s], p[i].reaper_pid, p[i].attach_ns, p[i].handles,
                         p[i].bytes_held);
    if (!r) Py_CLEAR(list);
    else PyList_SET_ITEM(list, i, r);
  }
  free(p);
  return list;
}

static int lock_copy(const pdshm_lock_info *li, void *arg) { return grow_push(arg, li); }

PyObject *pdshmpy_seg_locks(PyObject *self, PyObject *unused) {
  pdshm_seg *seg = seg_of(self);
  if (!seg) return NULL;
  static const char *kinds[] = {"?", "heap", "scope", "var"};
  grow_buf g = {NULL, 0, 0, sizeof(pdshm_lock_info)};
  int rc;
  pdshmpy_seg_hold((pdshmpy_seg *)self);
  PDSHMPY_NOGIL(rc = pdshm_inspect_locks(seg, lock_copy, &g));
  pdshmpy_seg_unhold((pdshmpy_seg *)self);
  PyObject *list = rc ? fail(self, rc, "locks") : PyList_New((Py_ssize_t)g.n);
  for (size_t i = 0; list && i < g.n; i++) {
    const pdshm_lock_info *li = (pdshm_lock_info *)g.items + i;
    int k = li->kind >= 1 && li->kind <= 3 ? li->kind : 0;
    PyObject *var = li->kind == PDSHM_LOCK_OF_VAR ? cstr(li->var) : Py_NewRef(Py_None);
    PyObject *r = var ? record(PDSHMPY_STATE(self)->lockinfo_type, "(IsKNNIKKKKN)", li->index,
                               kinds[k], li->scope_id, var, PyBool_FromLong(li->held),
                               li->holder_pid, li->acquisitions, li->contended, li->wait_ns,
                               li->owner_died, PyBool_FromLong(li->unrecoverable))
                      : NULL;
    if (!r) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, r);
  }
  free(g.items);
  return list;
}

PyObject *pdshmpy_seg_alloc(PyObject *self, PyObject *unused) {
  pdshm_seg *seg = seg_of(self);
  if (!seg) return NULL;
  pdshmpy_state *st = PDSHMPY_STATE(self);
  pdshm_alloc_info *a = PyMem_Malloc(sizeof *a);
  if (!a) return PyErr_NoMemory();
  int rc;
  pdshmpy_seg_hold((pdshmpy_seg *)self);
  PDSHMPY_NOGIL(rc = pdshm_inspect_alloc(seg, a));
  pdshmpy_seg_unhold((pdshmpy_seg *)self);
  PyObject *classes = rc ? fail(self, rc, "alloc") : PyTuple_New(PDSHM_ALLOC_CLASSES);
  for (int i = 0; classes && i < PDSHM_ALLOC_CLASSES; i++) {
    PyObject *c = record(st->allocclass_type, "(IKK)", a->cls[i].block_size, a->cls[i].used,
                         a->cls[i].cached);
    if (!c) Py_CLEAR(classes);
    else PyTuple_SET_ITEM(classes, i, c);
  }
  PyObject *r = classes ? record(st->allocinfo_type, "(KKKKKKKKKKKKdKKKKKKKKKN)", a->arena,
                                 a->used, a->free, a->cached, a->blocks_used, a->blocks_free,
                                 a->blocks_cached, a->largest_free, a->large_used,
                                 a->large_blocks, a->punched, a->rebuilds, a->fragmentation,
                                 a->scope_bytes, a->var_bytes, a->name_bytes, a->table_bytes,
                                 a->tensor_bytes, a->handle_bytes, a->oplist_bytes,
                                 a->hold_bytes, a->raw_bytes, classes)
                        : NULL;
  PyMem_Free(a);
  return r;
}
