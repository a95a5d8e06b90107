/*
 * mpimodule.c - the extension module pdshm._pdshm_mpi: libpdshm-mpi's job
 * (include/pdshm-mpi.h) for pdshm.mpi, which checks the arguments and
 * names the errors.  Built only where configure finds MPI and mpi4py.
 *
 * The communicator comes from mpi4py's C API (mpi4py.h, PyMPIComm_Get), the
 * variables from pdshm._pdshm's (pdshmpy_capi.h: the reference of a Var or
 * a view, resolved here through the job's own attachment, as the host's
 * group needs).
 *
 * Invariants:
 *  1. Every libpdshm-mpi call runs with the GIL released (it waits in MPI
 *     or for the host's group); one thread at a time uses the job: a call
 *     that finds it busy raises pdshm.Error (EBUSY) instead of entering.
 *     The collectives are not sliced (a timeout while members write would
 *     spoil the round); only the host barrier is, for Ctrl-C.
 *  2. A bad variable or scope argument still takes part in the call, as
 *     NULL: libpdshm-mpi then fails at every process alike (no process is
 *     left waiting for this one), and this process raises its own error.
 *  3. The local and cross communicators are libpdshm-mpi's; the mpi4py
 *     objects that show them are set to MPI.COMM_NULL when the job closes,
 *     so that no Python code reaches a freed communicator.
 *  4. No static PyObject *: the type and the imported module live in the
 *     module state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <mpi4py/mpi4py.h>

#include "pdshm-mpi.h"
#include "pdshmpy_capi.h"

typedef struct {
  PyTypeObject *job_type;
  PyObject *pdshm;          /* pdshm._pdshm: its exceptions, its C API      */
  const pdshmpy_capi *api;
} mpimod_state;

typedef struct {
  PyObject_HEAD
  pdshm_mpi *m;             /* NULL once closed                             */
  PyObject *local_comm, *cross_comm; /* mpi4py objects of m's communicators */
  uint64_t bytes_sent;      /* m's count when it closed                     */
  int busy;                 /* a call runs on m without the GIL             */
} mpimod_job;

#define JOB(o) ((mpimod_job *)(o))

static mpimod_state *mpimod_state_of(PyObject *job) {
  return PyType_GetModuleState(Py_TYPE(job));
}

static PyObject *mpimod_raise(mpimod_state *st, int rc, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  PyOS_vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return st->api->raise(st->pdshm, rc, msg);
}

/* m, or NULL with an error: closed or busy (invariant 1). */
static pdshm_mpi *job_handle(PyObject *self) {
  mpimod_state *st = mpimod_state_of(self);
  if (!JOB(self)->m) return mpimod_raise(st, PDSHM_EINVAL, "the job was closed"), NULL;
  if (JOB(self)->busy)
    return mpimod_raise(st, PDSHM_EBUSY, "another thread is in a call on this job"), NULL;
  return JOB(self)->m;
}

/* The exception of a call's rc at this process: PeerDied after a
 * replacement joined, else rc with what. */
static PyObject *job_failed(PyObject *self, int rc, const char *what) {
  mpimod_state *st = mpimod_state_of(self);
  int host = pdshm_mpi_host(JOB(self)->m);
  if (rc == PDSHM_EOWNERDEAD)
    return mpimod_raise(st, rc, "a trainer of host %d died during %s; its replacement joined: "
                        "redo the step", host, what);
  return mpimod_raise(st, rc, "%s (host %d, local rank %d; failed here or at another process)",
                      what, host, pdshm_mpi_local_rank(JOB(self)->m));
}

/* ---- open, close ------------------------------------------------------------------- */

/* An mpi4py communicator object showing c (invariant 3). */
static PyObject *comm_object(MPI_Comm c) { return PyMPIComm_New(c); }

/* Invariant 3: the objects show MPI.COMM_NULL from now on. */
static void comm_forget(PyObject *o) {
  MPI_Comm *c = o ? PyMPIComm_Get(o) : NULL;
  if (c) *c = MPI_COMM_NULL;
  else PyErr_Clear();
}

static PyObject *mod_open(PyObject *module, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"comm", "prefix", "local_size", "seg_size", "replace_timeout_ns",
                           NULL};
  mpimod_state *st = PyModule_GetState(module);
  PyObject *commo;
  const char *prefix;
  int local_size;
  unsigned long long seg_size;
  long long replace_ns;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OsiKL:open", kwlist, &commo, &prefix, &local_size,
                                   &seg_size, &replace_ns))
    return NULL;
  MPI_Comm *comm = PyMPIComm_Get(commo);
  if (!comm) return NULL;
  if (local_size < 0)
    return mpimod_raise(st, PDSHM_EINVAL, "local_size must be at least 1, not %d", local_size);
  mpimod_job *job = PyObject_New(mpimod_job, st->job_type);
  if (!job) return NULL;
  job->m = NULL;
  job->local_comm = job->cross_comm = NULL;
  job->bytes_sent = 0;
  job->busy = 0;
  pdshm_mpi_options o = {.prefix = prefix, .local_size = local_size,
                         .seg_size = (size_t)seg_size, .replace_timeout_ns = replace_ns};
  MPI_Comm c = *comm;
  pdshm_mpi *m = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = pdshm_mpi_open(c, &o, &m);
  Py_END_ALLOW_THREADS
  if (rc) {
    Py_DECREF(job);
    return mpimod_raise(st, rc, "opening the job's host segment \"%s.h<host>\" and group "
                        "(failed here or at another process)", prefix);
  }
  job->m = m;
  job->local_comm = comm_object(pdshm_mpi_local_comm(m));
  job->cross_comm = job->local_comm ? comm_object(pdshm_mpi_cross_comm(m)) : NULL;
  if (!job->cross_comm) {
    Py_DECREF(job); /* closes m */
    return NULL;
  }
  return (PyObject *)job;
}

/* Closes m (collective over the job, as freeing a communicator is). */
static int job_close_handle(mpimod_job *job) {
  pdshm_mpi *m = job->m;
  job->bytes_sent = pdshm_mpi_bytes_sent(m);
  job->m = NULL;
  comm_forget(job->local_comm);
  comm_forget(job->cross_comm);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = pdshm_mpi_close(m);
  Py_END_ALLOW_THREADS
  return rc;
}

static PyObject *job_close(PyObject *self, PyObject *unused) {
  if (!JOB(self)->m) Py_RETURN_NONE;
  if (!job_handle(self)) return NULL;
  int rc = job_close_handle(JOB(self));
  if (rc) return mpimod_raise(mpimod_state_of(self), rc, "closing the job");
  Py_RETURN_NONE;
}

/* ---- the calls ----------------------------------------------------------------------- */

/* The variable obj names (see pdshmpy_capi.var_ref), resolved through the
 * job's attachment; NULL with an exception. */
static pdshm_var *job_var(PyObject *self, PyObject *segment, PyObject *obj) {
  mpimod_state *st = mpimod_state_of(self);
  pdshm_varref ref;
  if (st->api->var_ref(st->pdshm, segment, obj, &ref) < 0) return NULL;
  pdshm_var *v = pdshm_varref_get(pdshm_mpi_segment(JOB(self)->m), ref);
  if (!v) mpimod_raise(st, PDSHM_ESTALE, "the variable was erased or its scope died");
  return v;
}

enum call { ALLREDUCE, BCAST };

/* allreduce(segment, x, op, timeout_ns) and bcast(segment, x, root_host,
 * timeout_ns): x a Var or view of segment's; invariant 2 for a bad x. */
static PyObject *job_var_call(PyObject *self, PyObject *args, enum call kind) {
  PyObject *segment, *obj;
  int arg;
  long long ns;
  if (!PyArg_ParseTuple(args, kind == ALLREDUCE ? "OOiL:allreduce" : "OOiL:bcast", &segment,
                        &obj, &arg, &ns))
    return NULL;
  pdshm_mpi *m = job_handle(self);
  if (!m) return NULL;
  if (kind == ALLREDUCE && (arg < PDSHM_SUM || arg > PDSHM_MIN))
    return mpimod_raise(mpimod_state_of(self), PDSHM_EINVAL, "no reduce op %d", arg);
  pdshm_var *v = obj == Py_None ? NULL : job_var(self, segment, obj);
  PyObject *type = NULL, *value = NULL, *tb = NULL;
  if (!v && obj != Py_None) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL; /* KeyboardInterrupt... */
    PyErr_Fetch(&type, &value, &tb);
  }
  int rc;
  JOB(self)->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  rc = kind == ALLREDUCE ? pdshm_mpi_allreduce(m, v, (pdshm_reduce_op)arg, ns)
                         : pdshm_mpi_bcast_var(m, v, arg, ns);
  Py_END_ALLOW_THREADS
  JOB(self)->busy = 0;
  if (type) { /* this process's own error, the others' EINVAL */
    PyErr_Restore(type, value, tb);
    return NULL;
  }
  if (rc) return job_failed(self, rc, kind == ALLREDUCE ? "an allreduce" : "a bcast");
  Py_RETURN_NONE;
}

static PyObject *job_allreduce(PyObject *self, PyObject *args) {
  return job_var_call(self, args, ALLREDUCE);
}

static PyObject *job_bcast(PyObject *self, PyObject *args) {
  return job_var_call(self, args, BCAST);
}

/* bcast_scope(path, root_host, timeout_ns): the named scope at path (None:
 * an anonymous scope, a bad argument: invariant 2). */
static PyObject *job_bcast_scope(PyObject *self, PyObject *args) {
  const char *path;
  int root;
  long long ns;
  if (!PyArg_ParseTuple(args, "ziL:bcast_scope", &path, &root, &ns)) return NULL;
  pdshm_mpi *m = job_handle(self);
  if (!m) return NULL;
  pdshm_scope *s = NULL;
  int rc;
  JOB(self)->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  if (path) pdshm_scope_open(pdshm_mpi_segment(m), path, &s); /* NULL when gone: EINVAL */
  rc = pdshm_mpi_bcast_scope(m, s, root, ns);
  if (s) pdshm_scope_release(s);
  Py_END_ALLOW_THREADS
  JOB(self)->busy = 0;
  if (rc) return job_failed(self, rc, "a bcast_scope");
  Py_RETURN_NONE;
}

/* A host barrier waits in slices, checking for signals (Ctrl-C) between
 * them, as Group.barrier does: one that timed out has not been passed, and
 * the next waits for the same round. */
#define BARRIER_SLICE_NS 200000000LL /* 200 ms */

static PyObject *job_barrier(PyObject *self, PyObject *arg) {
  long long left = PyLong_AsLongLong(arg);
  if (left == -1 && PyErr_Occurred()) return NULL;
  pdshm_mpi *m = job_handle(self);
  if (!m) return NULL;
  int rc;
  JOB(self)->busy = 1;
  for (;;) {
    long long slice = left < 0 || left > BARRIER_SLICE_NS ? BARRIER_SLICE_NS : left;
    Py_BEGIN_ALLOW_THREADS
    rc = pdshm_mpi_host_barrier(m, slice);
    Py_END_ALLOW_THREADS
    if (rc != PDSHM_ETIMEDOUT || (left >= 0 && (left -= slice) <= 0)) break;
    if (PyErr_CheckSignals() < 0) {
      JOB(self)->busy = 0;
      return NULL;
    }
  }
  JOB(self)->busy = 0;
  if (rc) return job_failed(self, rc, "a barrier");
  Py_RETURN_NONE;
}

static PyObject *job_first_host(PyObject *self, PyObject *arg) {
  int have = PyObject_IsTrue(arg);
  if (have < 0) return NULL;
  pdshm_mpi *m = job_handle(self);
  if (!m) return NULL;
  int host, rc;
  JOB(self)->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  rc = pdshm_mpi_first_host(m, have, &host);
  Py_END_ALLOW_THREADS
  JOB(self)->busy = 0;
  if (rc) return job_failed(self, rc, "first_host");
  if (host < 0) Py_RETURN_NONE;
  return PyLong_FromLong(host);
}

/* ---- the type ------------------------------------------------------------------------ */

/* The handle's numbers, kept readable after close. */
#define JOB_INT_GETTER(field)                                                      \
  static PyObject *job_get_##field(PyObject *self, void *closure) {                \
    if (!JOB(self)->m) return mpimod_raise(mpimod_state_of(self), PDSHM_EINVAL,    \
                                           "the job was closed");                  \
    return PyLong_FromLong(pdshm_mpi_##field(JOB(self)->m));                       \
  }
JOB_INT_GETTER(host)
JOB_INT_GETTER(hosts)
JOB_INT_GETTER(local_rank)
JOB_INT_GETTER(local_size)

/* Also after close: the job's total. */
static PyObject *job_get_bytes_sent(PyObject *self, void *closure) {
  pdshm_mpi *m = JOB(self)->m;
  return PyLong_FromUnsignedLongLong(m ? pdshm_mpi_bytes_sent(m) : JOB(self)->bytes_sent);
}

static PyObject *job_get_local_comm(PyObject *self, void *closure) {
  return Py_NewRef(JOB(self)->local_comm);
}

static PyObject *job_get_cross_comm(PyObject *self, void *closure) {
  return Py_NewRef(JOB(self)->cross_comm);
}

static PyObject *job_get_closed(PyObject *self, void *closure) {
  return PyBool_FromLong(JOB(self)->m == NULL);
}

/* A job never closed: closed here while MPI runs (the process's share of
 * the collective close; MPI frees communicators without waiting), else
 * left to the process's end (no MPI call after MPI_Finalize). */
static void job_dealloc(PyObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (JOB(self)->m && !finalized) job_close_handle(JOB(self));
  Py_CLEAR(JOB(self)->local_comm);
  Py_CLEAR(JOB(self)->cross_comm);
  tp->tp_free(self);
  Py_DECREF(tp);
}

static PyMethodDef job_methods[] = {
    {"allreduce", job_allreduce, METH_VARARGS,
     "allreduce(segment, x, op, timeout_ns): pdshm_mpi_allreduce."},
    {"bcast", job_bcast, METH_VARARGS,
     "bcast(segment, x, root_host, timeout_ns): pdshm_mpi_bcast_var."},
    {"bcast_scope", job_bcast_scope, METH_VARARGS,
     "bcast_scope(path, root_host, timeout_ns): pdshm_mpi_bcast_scope."},
    {"barrier", job_barrier, METH_O, "barrier(timeout_ns): pdshm_mpi_host_barrier."},
    {"first_host", job_first_host, METH_O,
     "first_host(have) -> int or None: pdshm_mpi_first_host."},
    {"close", job_close, METH_NOARGS, "close(): pdshm_mpi_close (once closed, nothing)."},
    {NULL}};

static PyGetSetDef job_getset[] = {
    {"host", job_get_host, NULL, NULL, NULL},
    {"hosts", job_get_hosts, NULL, NULL, NULL},
    {"local_rank", job_get_local_rank, NULL, NULL, NULL},
    {"local_size", job_get_local_size, NULL, NULL, NULL},
    {"bytes_sent", job_get_bytes_sent, NULL, NULL, NULL},
    {"local_comm", job_get_local_comm, NULL, NULL, NULL},
    {"cross_comm", job_get_cross_comm, NULL, NULL, NULL},
    {"closed", job_get_closed, NULL, NULL, NULL},
    {NULL}};

static PyType_Slot job_slots[] = {
    {Py_tp_doc, "libpdshm-mpi's job (pdshm_mpi): made by open(), used by pdshm.mpi.Job."},
    {Py_tp_dealloc, job_dealloc},
    {Py_tp_methods, job_methods},
    {Py_tp_getset, job_getset},
    {0, NULL}};

static PyType_Spec job_spec = {
    .name = "pdshm._pdshm_mpi.Job",
    .basicsize = sizeof(mpimod_job),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = job_slots,
};

/* ---- the module ---------------------------------------------------------------------- */

static PyMethodDef mod_methods[] = {
    {"open", (PyCFunction)(void (*)(void))mod_open, METH_VARARGS | METH_KEYWORDS,
     "open(comm, prefix, local_size, seg_size, replace_timeout_ns) -> Job\n\n"
     "pdshm_mpi_open over the mpi4py communicator comm (collective over it)."},
    {NULL}};

static int mod_exec(PyObject *module) {
  mpimod_state *st = PyModule_GetState(module);
  if (import_mpi4py() < 0) return -1;
  st->pdshm = PyImport_ImportModule("pdshm._pdshm");
  if (!st->pdshm) return -1;
  st->api = PyCapsule_Import(PDSHMPY_CAPI_CAPSULE, 0);
  if (!st->api) return -1;
  if (st->api->version != PDSHMPY_CAPI_VERSION) {
    PyErr_Format(PyExc_ImportError, "pdshm._pdshm's C API is version %u, not %u",
                 st->api->version, PDSHMPY_CAPI_VERSION);
    return -1;
  }
  st->job_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &job_spec, NULL);
  if (!st->job_type || PyModule_AddType(module, st->job_type) < 0) return -1;
  if (PyModule_AddIntConstant(module, "SUM", PDSHM_SUM) ||
      PyModule_AddIntConstant(module, "MEAN", PDSHM_MEAN) ||
      PyModule_AddIntConstant(module, "MAX", PDSHM_MAX) ||
      PyModule_AddIntConstant(module, "MIN", PDSHM_MIN) ||
      PyModule_AddStringConstant(module, "GROUP", PDSHM_MPI_GROUP) ||
      PyModule_AddStringConstant(module, "LOCAL_SIZE_ENV", PDSHM_MPI_LOCAL_SIZE_ENV))
    return -1;
  return 0;
}

static int mod_traverse(PyObject *module, visitproc visit, void *arg) {
  mpimod_state *st = PyModule_GetState(module);
  Py_VISIT(st->job_type);
  Py_VISIT(st->pdshm);
  return 0;
}

static int mod_clear(PyObject *module) {
  mpimod_state *st = PyModule_GetState(module);
  Py_CLEAR(st->job_type);
  Py_CLEAR(st->pdshm);
  return 0;
}

static void mod_free(void *module) { mod_clear(module); }

static PyModuleDef_Slot mod_slots[] = {{Py_mod_exec, mod_exec}, {0, NULL}};

static struct PyModuleDef mpimod_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pdshm._pdshm_mpi",
    .m_doc = "libpdshm-mpi for pdshm.mpi: use it through pdshm.mpi.Job.",
    .m_size = sizeof(mpimod_state),
    .m_methods = mod_methods,
    .m_slots = mod_slots,
    .m_traverse = mod_traverse,
    .m_clear = mod_clear,
    .m_free = mod_free,
};

PyMODINIT_FUNC PyInit__pdshm_mpi(void);
PyMODINIT_FUNC PyInit__pdshm_mpi(void) { return PyModuleDef_Init(&mpimod_module); }
