/*
 * errors.c - pdshm.Error and its subclasses; turning a PDSHM_E* code into one.
 *
 * Every failure raises pdshm.Error (an OSError): .code is the negative
 * PDSHM_E* code, .errno the positive errno when the code is one (None for
 * EBADSEG, ETYPE, EFORKED), str() carries pdshm_strerror and the library's
 * detail (pdshm_last_error).  Where a builtin fits, the class raised is a
 * subclass of both Error and that builtin:
 *   NotFound(Error, KeyError)                ENOENT
 *   Exists(Error, FileExistsError)           EEXIST
 *   NoMemory(Error, MemoryError)             ENOMEM, ENOSPC
 *   InvalidArgument(Error, ValueError)       EINVAL, ENAMETOOLONG, EOVERFLOW
 *   PermissionDenied(Error, PermissionError) EACCES, EPERM, EROFS
 *   TimedOut(Error, TimeoutError)            ETIMEDOUT
 *   WrongType(Error, TypeError)              ETYPE
 *   Stale(Error)  BadSegment(Error)  Forked(Error)  PeerDied(Error)
 */
#include <limits.h>
#include <stdarg.h>

#include "pdshmpy.h"

typedef struct {
  const char *name;   /* attribute of the module */
  const char *doc;
  size_t offset;      /* of the slot in pdshmpy_state */
  PyObject *builtin;  /* the second base, or NULL */
} err_class;

#define ERR_SLOT(f) offsetof(pdshmpy_state, f)
#define STATE_OBJ(st, off) (*(PyObject **)((char *)(st) + (off)))

static int err_make(PyObject *module, pdshmpy_state *st, const err_class *c) {
  char qual[64];
  PyOS_snprintf(qual, sizeof qual, "pdshm.%s", c->name);
  PyObject *bases = c->builtin ? PyTuple_Pack(2, st->Error, c->builtin)
                               : PyTuple_Pack(1, st->Error);
  if (!bases) return -1;
  PyObject *cls = PyErr_NewExceptionWithDoc(qual, c->doc, bases, NULL);
  Py_DECREF(bases);
  if (!cls) return -1;
  STATE_OBJ(st, c->offset) = cls;
  return PyModule_AddObjectRef(module, c->name, cls);
}

int pdshmpy_errors_init(PyObject *module, pdshmpy_state *st) {
  st->Error = PyErr_NewExceptionWithDoc(
      "pdshm.Error",
      "A pdshm failure (an OSError).\n\n"
      ".code is the negative PDSHM_E* code, .errno the positive errno where one\n"
      "fits (None otherwise); str() says pdshm_strerror and the library's detail.",
      PyExc_OSError, NULL);
  if (!st->Error || PyModule_AddObjectRef(module, "Error", st->Error) < 0) return -1;
  const err_class classes[] = {
      {"NotFound", "An absent segment, scope or variable (ENOENT); also a KeyError.",
       ERR_SLOT(NotFound), PyExc_KeyError},
      {"Exists", "The name is taken (EEXIST); also a FileExistsError.", ERR_SLOT(Exists),
       PyExc_FileExistsError},
      {"NoMemory", "The segment or /dev/shm is full (ENOMEM, ENOSPC); also a MemoryError.",
       ERR_SLOT(NoMemory), PyExc_MemoryError},
      {"InvalidArgument",
       "A bad argument, name or size (EINVAL, ENAMETOOLONG, EOVERFLOW); also a ValueError.",
       ERR_SLOT(InvalidArgument), PyExc_ValueError},
      {"PermissionDenied",
       "Not allowed (EACCES, EPERM), or a write to a read-only attachment (EROFS); "
       "also a PermissionError.",
       ERR_SLOT(PermissionDenied), PyExc_PermissionError},
      {"TimedOut", "A wait ran out of time (ETIMEDOUT); also a TimeoutError.",
       ERR_SLOT(TimedOut), PyExc_TimeoutError},
      {"WrongType", "The variable holds no tensor (ETYPE); also a TypeError.",
       ERR_SLOT(WrongType), PyExc_TypeError},
      {"Stale", "The variable was erased or its scope died (ESTALE).", ERR_SLOT(Stale), NULL},
      {"BadSegment", "Not a valid pdshm segment (EBADSEG).", ERR_SLOT(BadSegment), NULL},
      {"Forked",
       "A handle inherited across fork() that cannot be re-attached in the child "
       "(an anonymous scope).",
       ERR_SLOT(Forked), NULL},
      {"PeerDied", "A member of a group died (EOWNERDEAD).", ERR_SLOT(PeerDied), NULL},
  };
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
    if (err_make(module, st, &classes[i]) < 0) return -1;
  return 0;
}

static PyObject *err_class_for(pdshmpy_state *st, int rc) {
  switch (rc) {
  case PDSHM_ENOENT: return st->NotFound;
  case PDSHM_EEXIST: return st->Exists;
  case PDSHM_ENOMEM:
  case PDSHM_ENOSPC: return st->NoMemory;
  case PDSHM_EINVAL:
  case PDSHM_ENAMETOOLONG:
  case PDSHM_EOVERFLOW: return st->InvalidArgument;
  case PDSHM_EACCES:
  case PDSHM_EPERM:
  case PDSHM_EROFS: return st->PermissionDenied;
  case -ETIMEDOUT: return st->TimedOut;
  case PDSHM_ETYPE: return st->WrongType;
  case PDSHM_ESTALE: return st->Stale;
  case PDSHM_EBADSEG: return st->BadSegment;
  case PDSHM_EFORKED: return st->Forked;
  case -EOWNERDEAD: return st->PeerDied;
  default: return st->Error;
  }
}

/* Raises cls(errno, message) (or cls(message) without an errno) with .code. */
static PyObject *err_raise(pdshmpy_state *st, int rc, PyObject *msg) {
  PyObject *cls = err_class_for(st, rc);
  if (!cls) cls = PyExc_OSError; /* the state was cleared (interpreter shutdown) */
  PyObject *exc = rc < 0 && rc > -4096 ? PyObject_CallFunction(cls, "iO", -rc, msg)
                                       : PyObject_CallFunctionObjArgs(cls, msg, NULL);
  Py_DECREF(msg);
  if (!exc) return NULL;
  PyObject *code = PyLong_FromLong(rc);
  if (!code || PyObject_SetAttrString(exc, "code", code) < 0) {
    Py_XDECREF(code);
    Py_DECREF(exc);
    return NULL;
  }
  Py_DECREF(code);
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  return NULL;
}

PyObject *pdshmpy_raise(pdshmpy_state *st, int rc, const char *what) {
  const char *detail = pdshm_last_error();
  PyObject *msg;
  if (what && *detail)
    msg = PyUnicode_FromFormat("%s: %s (%s)", pdshm_strerror(rc), what, detail);
  else if (what || *detail)
    msg = PyUnicode_FromFormat("%s: %s", pdshm_strerror(rc), what ? what : detail);
  else
    msg = PyUnicode_FromString(pdshm_strerror(rc));
  return msg ? err_raise(st, rc, msg) : NULL;
}

PyObject *pdshmpy_raise_fmt(pdshmpy_state *st, int rc, const char *fmt, ...) {
  char what[PDSHM_NAME_MAX * 2 + 128];
  va_list ap;
  va_start(ap, fmt);
  PyOS_vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return pdshmpy_raise(st, rc, what);
}

PyObject *pdshmpy_raise_forked(pdshmpy_state *st, int rc, const char *fmt, ...) {
  const char *detail = pdshm_last_error();
  char what[PDSHM_NAME_MAX * 2 + 128];
  va_list ap;
  va_start(ap, fmt);
  PyOS_vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  PyObject *msg = PyUnicode_FromFormat("%s: %s: %s%s%s", pdshm_strerror(PDSHM_EFORKED), what,
                                       pdshm_strerror(rc), *detail ? " -- " : "", detail);
  return msg ? err_raise(st, PDSHM_EFORKED, msg) : NULL;
}

PyObject *pdshmpy_raise_msg(pdshmpy_state *st, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *detail = PyUnicode_FromFormatV(fmt, ap);
  va_end(ap);
  if (!detail) return NULL;
  PyObject *msg = PyUnicode_FromFormat("%s: %U", pdshm_strerror(rc), detail);
  Py_DECREF(detail);
  return msg ? err_raise(st, rc, msg) : NULL;
}

const char *pdshmpy_utf8(PyObject *o, const char *what) {
  if (!PyUnicode_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", what, Py_TYPE(o)->tp_name);
    return NULL;
  }
  Py_ssize_t n;
  const char *s = PyUnicode_AsUTF8AndSize(o, &n);
  if (s && (Py_ssize_t)strlen(s) != n) {
    PyErr_Format(PyExc_ValueError, "%s contains a NUL character", what);
    return NULL;
  }
  return s;
}

int pdshmpy_uint_arg(pdshmpy_state *st, PyObject *o, const char *what, unsigned long long max,
                     unsigned long long *out) {
  PyObject *i = PyNumber_Index(o);
  if (!i) return -1;
  unsigned long long v = PyLong_AsUnsignedLongLong(i);
  Py_DECREF(i);
  int outside = v == ULLONG_MAX && PyErr_Occurred(); /* negative, or beyond 64 bits */
  if (outside) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
    PyErr_Clear();
  }
  if (outside || v > max) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "%s must be between 0 and %llu, not %R", what, max, o);
    return -1;
  }
  *out = v;
  return 0;
}
