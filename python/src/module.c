/*
 * module.c - the extension module pdshm._pdshm: multi-phase initialisation
 * (PEP 489), its state (PEP 573: heap types and exceptions, no static
 * PyObject *), and the module functions create, attach, unlink.  It sits
 * above every other file of the module: none calls it (state.c serves them).
 */
#include "pdshmpy.h"

/* ---- functions ------------------------------------------------------------------------- */

/* An option argument: None keeps the default (0), else a non-negative int. */
static int opt_ulong(pdshmpy_state *st, PyObject *o, const char *what, unsigned long long max,
                     unsigned long long *out) {
  if (o == Py_None) return 0;
  PyObject *i = PyNumber_Index(o);
  if (!i) return -1;
  int overflow;
  long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
  Py_DECREF(i);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (overflow || v <= 0 || (unsigned long long)v > max) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "%s must be between 1 and %llu", what, max);
    return -1;
  }
  *out = (unsigned long long)v;
  return 0;
}

static PyObject *mod_create(PyObject *module, PyObject *args, PyObject *kw) {
  /* max_size last: callers that pass max_procs or mode by position keep working */
  static char *kwlist[] = {"name", "size", "max_procs", "mode", "max_size", NULL};
  PyObject *name, *size = Py_None, *procs = Py_None, *mode = Py_None, *max = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "U|OOOO:create", kwlist, &name, &size, &procs,
                                   &mode, &max))
    return NULL;
  unsigned long long sz = 0, np = 0, md = 0, mx = 0;
  pdshmpy_state *st = PyModule_GetState(module);
  if (opt_ulong(st, size, "size", SIZE_MAX, &sz) ||
      opt_ulong(st, procs, "max_procs", UINT_MAX, &np) ||
      opt_ulong(st, mode, "mode", 07777, &md) || opt_ulong(st, max, "max_size", SIZE_MAX, &mx))
    return NULL;
  pdshm_options o = {.size = (size_t)sz, .max_procs = (unsigned)np, .mode = (unsigned)md,
                     .max_size = (size_t)mx};
  return pdshmpy_seg_open(st, name, &o, 1);
}

static PyObject *mod_attach(PyObject *module, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"name", "readonly", "shared_users", NULL};
  PyObject *name;
  int readonly = 0, shared = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "U|pp:attach", kwlist, &name, &readonly, &shared))
    return NULL;
  pdshm_options o = {.flags = (readonly ? PDSHM_RDONLY : 0) | (shared ? PDSHM_SHARED_USERS : 0)};
  return pdshmpy_seg_open(PyModule_GetState(module), name, &o, 0);
}

static PyObject *mod_unlink(PyObject *module, PyObject *name) {
  const char *n = pdshmpy_utf8(name, "segment name");
  if (!n) return NULL;
  int rc = pdshm_unlink(n);
  if (rc) return pdshmpy_raise_fmt(PyModule_GetState(module), rc, "segment '%s'", n);
  Py_RETURN_NONE;
}

static PyObject *mod_strerror(PyObject *module, PyObject *code) {
  int overflow;
  long c = PyLong_AsLongAndOverflow(code, &overflow);
  if (c == -1 && PyErr_Occurred()) return NULL;
  return PyUnicode_FromString(overflow || c < INT_MIN || c > INT_MAX ? "unknown error"
                                                                      : pdshm_strerror((int)c));
}

static PyMethodDef mod_methods[] = {
    {"create", (PyCFunction)(void (*)(void))mod_create, METH_VARARGS | METH_KEYWORDS,
     "create(name, size=None, max_procs=None, mode=None, max_size=None) -> Segment\n\n"
     "Makes the segment /dev/shm/pdshm.NAME and attaches it.  None takes the\n"
     "default (a few MiB, 128 process slots, mode 0o600).  The segment grows while\n"
     "attached, up to max_size (None: as much as /dev/shm holds; max_size=size: a\n"
     "fixed size): every attached process sees the new bytes at once.  Exists when\n"
     "it exists; NoMemory when /dev/shm cannot hold it (nothing is left behind)."},
    {"attach", (PyCFunction)(void (*)(void))mod_attach, METH_VARARGS | METH_KEYWORDS,
     "attach(name, readonly=False, shared_users=False) -> Segment\n\n"
     "Attaches an existing segment (releasing the GIL while it validates).\n"
     "readonly=True: for looking only (stats, check, the introspection calls);\n"
     "scope and variable calls raise PermissionError.  shared_users=True accepts a\n"
     "segment another user owns or that group/others may write."},
    {"unlink", mod_unlink, METH_O,
     "unlink(name)\n\nRemoves the segment's name; attached processes keep working."},
    {"strerror", mod_strerror, METH_O, "strerror(code) -> str\n\npdshm_strerror(code)."},
    {"_after_fork_child", pdshmpy_after_fork_child, METH_NOARGS,
     "os.register_at_fork(after_in_child=...) hook: keeps inherited views pinned."},
    {"_close_all", pdshmpy_close_all, METH_NOARGS,
     "atexit hook: closes every Segment of this process (as detach() does), so that its\n"
     "process slot is freed at a normal exit instead of waiting for a reaper."},
    {NULL}};

/* ---- state ----------------------------------------------------------------------------- */

#define STATE_OBJECTS(X)                                                                     \
  X(segment_type) X(scope_type) X(var_type) X(varref_type) X(varlock_type) X(pin_type)        \
  X(Error) X(NotFound) X(Exists) X(NoMemory) X(InvalidArgument) X(PermissionDenied)          \
  X(TimedOut) X(BadSegment) X(Forked) X(PeerDied) X(Stale) X(WrongType) X(stats_type)        \
  X(seginfo_type) X(scopeinfo_type) X(varinfo_type) X(procinfo_type) X(lockinfo_type)        \
  X(allocinfo_type) X(allocclass_type) X(np_asarray) X(group_type) X(slots_type)

static int mod_traverse(PyObject *module, visitproc visit, void *arg) {
  pdshmpy_state *st = PyModule_GetState(module);
#define VISIT(f) Py_VISIT(st->f);
  STATE_OBJECTS(VISIT)
#undef VISIT
  return 0;
}

static int mod_clear(PyObject *module) {
  pdshmpy_state *st = PyModule_GetState(module);
#define CLEAR(f) Py_CLEAR(st->f);
  STATE_OBJECTS(CLEAR)
#undef CLEAR
  return 0;
}

static void mod_free(void *module) { mod_clear(module); }

static int add_type(PyObject *module, PyTypeObject **slot, PyType_Spec *spec, int public) {
  *slot = (PyTypeObject *)PyType_FromModuleAndSpec(module, spec, NULL);
  if (!*slot) return -1;
  return public ? PyModule_AddType(module, *slot) : 0;
}

static int mod_exec(PyObject *module) {
  pdshmpy_state *st = PyModule_GetState(module);
  pdshmpy_forkgen_init();
  pdshmpy_list_init(&st->segments);
  if (add_type(module, &st->segment_type, &pdshmpy_segment_spec, 1) ||
      add_type(module, &st->scope_type, &pdshmpy_scope_spec, 1) ||
      add_type(module, &st->var_type, &pdshmpy_var_spec, 1) ||
      add_type(module, &st->varref_type, &pdshmpy_varref_spec, 1) ||
      add_type(module, &st->varlock_type, &pdshmpy_varlock_spec, 1) ||
      add_type(module, &st->pin_type, &pdshmpy_pin_spec, 1))
    return -1;
  if (pdshmpy_errors_init(module, st) || pdshmpy_introspect_init(module, st) ||
      pdshmpy_group_init(module, st) || pdshmpy_slots_init(module, st) ||
      pdshmpy_capi_init(module))
    return -1;
  if (PyModule_AddIntConstant(module, "NAME_MAX", PDSHM_NAME_MAX) ||
      PyModule_AddIntConstant(module, "NDIM_MAX", PDSHM_NDIM_MAX) ||
      PyModule_AddIntConstant(module, "SEG_NAME_MAX", PDSHM_SEG_NAME_MAX))
    return -1;
#define ADD_CODE(name, value, msg) \
  if (PyModule_AddIntConstant(module, #name, value)) return -1;
  PDSHM_ERRNO_MAP(ADD_CODE)
#undef ADD_CODE
  return 0;
}

static PyModuleDef_Slot mod_slots[] = {{Py_mod_exec, mod_exec}, {0, NULL}};

static struct PyModuleDef pdshmpy_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pdshm._pdshm",
    .m_doc = "The C part of pdshm: PaddlePaddle's Scope / Variable / Tensor model in one\n"
             "POSIX shared-memory segment.  Use it through the package `pdshm`.",
    .m_size = sizeof(pdshmpy_state),
    .m_methods = mod_methods,
    .m_slots = mod_slots,
    .m_traverse = mod_traverse,
    .m_clear = mod_clear,
    .m_free = mod_free,
};

PyMODINIT_FUNC PyInit__pdshm(void);
PyMODINIT_FUNC PyInit__pdshm(void) { return PyModuleDef_Init(&pdshmpy_module); }
