/*
 * pdshmpy.h - the shared declarations of the extension module pdshm._pdshm.
 *
 * The module is a thin layer over include/pdshm.h.  Its objects:
 *   Segment  an attachment (pdshm_seg *), re-attached by name after fork();
 *   Scope    a scope handle (pdshm_scope *) owning one reference;
 *   Var      a WEAK reference (segment, offset, generation) resolved with
 *            pdshm_varref_get at every use: no pdshm_var * outlives a call;
 *   Pin      one pinned tensor buffer (pdshm_pin *): what every view holds;
 *   VarLock, VarRef  small helpers of Var.
 *
 * Invariants:
 *  1. Every Scope and Pin holds a strong reference to its Segment, so the C
 *     attachment outlives them; pdshm_detach runs only when the Segment is
 *     closed (detach() or dealloc) AND no Pin of it is alive AND no call is
 *     running on it with the GIL released (pdshmpy_seg_hold).
 *  2. A Segment lists its live Scope objects and Pins (borrowed links, kept
 *     under the GIL); detach() releases every scope handle of the list.
 *  3. After fork() the first use of a Segment in the child drops the inherited
 *     handles (scope handles first, then the attachment) and attaches again by
 *     name; a named Scope then reopens by path, an anonymous one raises Forked.
 *  4. No static PyObject *: types and exceptions live in the module state.
 */
#ifndef PDSHMPY_H
#define PDSHMPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sys/types.h>

#include "pdshm.h"

/* ---- intrusive lists (borrowed links, GIL held) ---------------------------- */
typedef struct pdshmpy_link {
  struct pdshmpy_link *prev, *next;
} pdshmpy_link;

static inline void pdshmpy_list_init(pdshmpy_link *head) { head->prev = head->next = head; }
static inline void pdshmpy_list_add(pdshmpy_link *head, pdshmpy_link *l) {
  l->next = head->next;
  l->prev = head;
  head->next->prev = l;
  head->next = l;
}
static inline void pdshmpy_list_del(pdshmpy_link *l) {
  if (!l->next) return;
  l->prev->next = l->next;
  l->next->prev = l->prev;
  l->prev = l->next = NULL;
}
#define PDSHMPY_CONTAINER(ptr, type, field) ((type *)((char *)(ptr)-offsetof(type, field)))

/* ---- module state ------------------------------------------------------------ */
typedef struct {
  PyTypeObject *segment_type, *scope_type, *var_type, *varref_type, *varlock_type,
      *pin_type;
  /* exceptions: Error and the subclasses that are also a builtin */
  PyObject *Error, *NotFound, *Exists, *NoMemory, *InvalidArgument, *PermissionDenied,
      *TimedOut, *BadSegment, *Forked, *PeerDied, *Stale, *WrongType;
  /* introspection records (struct sequences) */
  PyTypeObject *stats_type, *seginfo_type, *scopeinfo_type, *varinfo_type, *procinfo_type,
      *lockinfo_type, *allocinfo_type, *allocclass_type;
  pdshmpy_link segments; /* every live Segment, for the fork hook */
} pdshmpy_state;

pdshmpy_state *pdshmpy_state_of_type(PyTypeObject *tp);
#define PDSHMPY_STATE(obj) pdshmpy_state_of_type(Py_TYPE(obj))

/* ---- errors (errors.c) ----------------------------------------------------------- */
int pdshmpy_errors_init(PyObject *module, pdshmpy_state *st);
/* Raises the exception for rc (a negative PDSHM_E* code) with pdshm_strerror,
 * the library's detail (pdshm_last_error, read now) and what (may be NULL). */
PyObject *pdshmpy_raise(pdshmpy_state *st, int rc, const char *what);
/* pdshmpy_raise with `what` formatted by PyOS_snprintf (no %R). */
PyObject *pdshmpy_raise_fmt(pdshmpy_state *st, int rc, const char *fmt, ...);
/* Same, with a message of our own instead of the library's detail (for
 * failures the module itself detects). */
PyObject *pdshmpy_raise_msg(pdshmpy_state *st, int rc, const char *fmt, ...);

/* ---- objects ------------------------------------------------------------------------ */
typedef struct pdshmpy_seg {
  PyObject_HEAD
  pdshm_seg *seg;      /* the attachment; NULL once pdshm_detach ran        */
  PyObject *name;      /* str                                               */
  unsigned flags;      /* PDSHM_RDONLY, PDSHM_SHARED_USERS                  */
  pid_t pid;           /* the process that made seg                         */
  int closed;          /* detach() was called: no new use                   */
  Py_ssize_t npins;    /* live Pins of this attachment                      */
  Py_ssize_t busy;     /* calls running on seg with the GIL released        */
  pdshmpy_link scopes; /* live Scope objects                                */
  pdshmpy_link pins;   /* live Pin objects                                  */
  pdshmpy_link link;   /* in the state's segment list                       */
  PyObject *weakrefs;
} pdshmpy_seg;

typedef struct pdshmpy_scope {
  PyObject_HEAD
  pdshmpy_seg *seg;    /* strong                                            */
  pdshm_scope *h;      /* NULL once released or dropped after fork()        */
  PyObject *path;      /* str: path from the root ("" at the root); NULL for
                          an anonymous scope                                */
  pid_t pid;           /* the process h belongs to                          */
  int released;        /* release() or `with` exit                          */
  pdshmpy_link link;   /* in seg->scopes                                    */
  PyObject *weakrefs;
} pdshmpy_scope;

typedef struct pdshmpy_var {
  PyObject_HEAD
  pdshmpy_seg *seg;    /* strong                                            */
  pdshm_varref ref;    /* weak: resolved at every use                       */
  PyObject *scope_path;/* str: path of the variable's scope; NULL when it is
                          anonymous (then the Var cannot be pickled)        */
  PyObject *weakrefs;
} pdshmpy_var;

typedef struct pdshmpy_pin {
  PyObject_HEAD
  pdshmpy_seg *seg;    /* strong                                            */
  pdshm_pin *pin;      /* NULL when pinning failed                          */
  pdshm_tensor_view view;
  int readonly;
  Py_ssize_t shape[PDSHM_NDIM_MAX], strides[PDSHM_NDIM_MAX];
  pdshmpy_link link;   /* in seg->pins                                      */
} pdshmpy_pin;

/* ---- segment.c ------------------------------------------------------------------------ */
extern PyType_Spec pdshmpy_segment_spec;
/* The attachment for this process (re-attaching after fork), or NULL with an
 * exception (closed segment, failed attach). */
pdshm_seg *pdshmpy_seg_get(pdshmpy_seg *s);
PyObject *pdshmpy_seg_open(pdshmpy_state *st, PyObject *name, const pdshm_options *o,
                           int create);
/* Called when a pin of s goes: detaches a closed segment after its last pin. */
void pdshmpy_seg_pin_gone(pdshmpy_seg *s);
/* Around a call that releases the GIL: detach() from another thread meanwhile
 * closes the Segment but leaves pdshm_detach to the last of these. */
static inline void pdshmpy_seg_hold(pdshmpy_seg *s) { s->busy++; }
void pdshmpy_seg_unhold(pdshmpy_seg *s);
/* The fork hook (after_in_child): re-attaches segments that have pins and
 * inherits each pin so that inherited views stay backed. */
PyObject *pdshmpy_after_fork_child(PyObject *module, PyObject *unused);

/* ---- scope.c --------------------------------------------------------------------------- */
extern PyType_Spec pdshmpy_scope_spec;
/* A new Scope object owning h (released on failure); path may be NULL. */
PyObject *pdshmpy_scope_wrap(pdshmpy_seg *seg, pdshm_scope *h, PyObject *path);
/* Drops the handle without touching the segment (fork child) or releases it. */
void pdshmpy_scope_drop(pdshmpy_scope *sc);

/* ---- var.c, varlock.c, varref.c ------------------------------------------------------- */
extern PyType_Spec pdshmpy_var_spec, pdshmpy_varlock_spec, pdshmpy_varref_spec;
PyObject *pdshmpy_var_wrap(pdshmpy_seg *seg, pdshm_var *v, PyObject *scope_path);
/* The variable now, or NULL with pdshm.Stale (or another error) raised. */
pdshm_var *pdshmpy_var_get(pdshmpy_var *self);
/* Copies a string the segment holds (at most PDSHM_NAME_MAX bytes). */
PyObject *pdshmpy_str_from_seg(const char *p);
/* Raises Stale unless self still resolves to v (after a copy from it). */
int pdshmpy_var_still(pdshmpy_var *self, pdshm_var *v);
PyObject *pdshmpy_varlock_new(pdshmpy_var *var, int exclusive);
PyObject *pdshmpy_varref_new(pdshmpy_var *var);

/* ---- dtype.c --------------------------------------------------------------------------- */
const char *pdshmpy_dtype_name(int dt);     /* "float32"; NULL for unknown   */
const char *pdshmpy_dtype_format(int dt);   /* buffer-protocol format        */
const char *pdshmpy_dtype_typestr(int dt);  /* __array_interface__ typestr   */
int pdshmpy_dtype_parse(PyObject *o, pdshm_dtype *out);  /* -1 with error */
/* A buffer format (with its itemsize) as a dtype; -1 when none fits. */
int pdshmpy_dtype_from_format(const char *fmt, Py_ssize_t itemsize);
int pdshmpy_shape_parse(PyObject *o, int *ndim, int64_t *dims);

/* ---- pin.c, view.c, dlpack.c, assign.c ---------------------------------------------- */
extern PyType_Spec pdshmpy_pin_spec;
/* Pins the variable's tensor: a new Pin, or NULL with an exception. */
pdshmpy_pin *pdshmpy_pin_new(pdshmpy_var *var);
int pdshmpy_var_getbuffer(PyObject *self, Py_buffer *view, int flags);
void pdshmpy_var_releasebuffer(PyObject *self, Py_buffer *view);
PyObject *pdshmpy_var_array_interface(PyObject *self, void *closure);
PyObject *pdshmpy_var_numpy(PyObject *self, PyObject *unused);
PyObject *pdshmpy_var_dlpack(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pdshmpy_var_dlpack_device(PyObject *self, PyObject *unused);
PyObject *pdshmpy_var_assign(PyObject *self, PyObject *src);

/* ---- introspect.c ------------------------------------------------------------------------ */
int pdshmpy_introspect_init(PyObject *module, pdshmpy_state *st);
PyObject *pdshmpy_seg_stats(PyObject *self, PyObject *unused);
PyObject *pdshmpy_seg_info(PyObject *self, PyObject *unused);
PyObject *pdshmpy_seg_scopes(PyObject *self, PyObject *unused);
PyObject *pdshmpy_seg_vars_of(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pdshmpy_seg_procs(PyObject *self, PyObject *unused);
PyObject *pdshmpy_seg_locks(PyObject *self, PyObject *unused);
PyObject *pdshmpy_seg_alloc(PyObject *self, PyObject *unused);
PyObject *pdshmpy_seg_check(PyObject *self, PyObject *unused);

/* ---- util ------------------------------------------------------------------------------- */
/* A str argument as UTF-8 without NUL bytes; NULL with TypeError/ValueError. */
const char *pdshmpy_utf8(PyObject *o, const char *what);

#endif /* PDSHMPY_H */
