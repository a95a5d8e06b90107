/*
 * pdshmpy.h - the shared declarations of the extension module pdshm._pdshm.
 *
 * The module is a thin layer over include/pdshm.h.  Its objects:
 *   Segment  an attachment (pdshm_seg *), re-attached by name after fork();
 *   Scope    a scope handle (pdshm_scope *) owning one reference, and the
 *            Vars it last returned, returned again for the same variable;
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
 *  3. After fork() (the fork generation differs) the first use of a Segment in
 *     the child drops the inherited handles (scope handles first, then the
 *     attachment) and attaches again by name; a named Scope then reopens by
 *     path, an anonymous one raises Forked.
 *  4. No static PyObject *: types and exceptions live in the module state.
 *  5. References only point towards the Segment (Scope, Var, Pin -> Segment;
 *     Scope, VarRef, VarLock -> Var), never back, so no cycle can form and the
 *     objects are not tracked by the cyclic GC.
 *  6. Every call into libpdshm that may wait for a lock another process
 *     holds (a scope's, the heap's, a variable's, the groups' lock; attach,
 *     detach, reap) runs inside PDSHMPY_NOGIL (DESIGN section 5), deallocs
 *     included; what it works on stays alive across it (see there).  Calls
 *     that take no lock (name and version reads, varref resolution, a fork
 *     child freeing its inherited copies) keep the GIL, and so does the fork
 *     hook (pdshmpy_after_fork_child), which runs before the child has a
 *     second thread.
 */
#ifndef PDSHMPY_H
#define PDSHMPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "dlpack.h"
#include "pdshm.h"

/* ---- intrusive lists (borrowed links, GIL held) ---------------------------- */
/* drop: lets go of the C handle of the object on the link (a fork parent's
 * copy is only freed), for the Segment that lists it: segment.c sits below
 * the objects' files and knows them by this pointer only.  NULL on a Pin's. */
typedef struct pdshmpy_link {
  struct pdshmpy_link *prev, *next;
  void (*drop)(struct pdshmpy_link *l);
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

/* ---- calls that may wait --------------------------------------------------------------------
 * PDSHMPY_NOGIL(rc = pdshm_var_erase(h, n)) runs one such call with the GIL
 * released, so that the process's other threads go on while it waits.  The
 * statement uses only C values of the calling function, and no Python API:
 * it may read a str argument's UTF-8 (pdshmpy_utf8: immutable, kept by the
 * caller's reference) but nothing another thread may change under the GIL.
 * What it works on is held by the caller across it: the attachment by a hold
 * on its Segment (pdshmpy_seg_begin, pdshmpy_var_begin, pdshmpy_seg_hold), a
 * scope handle by its Scope's busy count (scope.c), a group membership by its
 * Group's; the Python objects by the call's own references.  Other threads may
 * run anything meanwhile, so borrowed links (the Segment's lists) are not
 * walked across it, and an object being deallocated is unlinked from them
 * first. */
#define PDSHMPY_NOGIL(stmt) \
  do {                      \
    Py_BEGIN_ALLOW_THREADS  \
    stmt;                   \
    Py_END_ALLOW_THREADS    \
  } while (0)

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
  PyTypeObject *group_type; /* NULL without the trainer-groups API */
  PyTypeObject *slots_type; /* SlotReducer (slots.c) */
  PyObject *np_asarray;  /* numpy.asarray, fetched at first use */
  pdshmpy_link segments; /* every live Segment, for the fork hook */
} pdshmpy_state;

pdshmpy_state *pdshmpy_state_of_type(PyTypeObject *tp);

/* This process's fork generation: bumped in every fork child (pthread_atfork),
 * so "made in this process" is a load, not a getpid() system call. */
unsigned long pdshmpy_forkgen(void);
void pdshmpy_forkgen_init(void);
#define PDSHMPY_STATE(obj) pdshmpy_state_of_type(Py_TYPE(obj))

/* ---- errors (errors.c) ----------------------------------------------------------- */
int pdshmpy_errors_init(PyObject *module, pdshmpy_state *st);
/* Raises the exception for rc (a negative PDSHM_E* code) with pdshm_strerror,
 * the library's detail (pdshm_last_error, read now) and what (may be NULL). */
PyObject *pdshmpy_raise(pdshmpy_state *st, int rc, const char *what);
/* pdshmpy_raise with `what` formatted by PyOS_snprintf (no %R). */
PyObject *pdshmpy_raise_fmt(pdshmpy_state *st, int rc, const char *fmt, ...);
/* pdshm.Forked for a handle a fork child could not take over: what (formatted
 * as for pdshmpy_raise_fmt), then why (rc's message and the library's detail). */
PyObject *pdshmpy_raise_forked(pdshmpy_state *st, int rc, const char *fmt, ...);
/* Same, with a message of our own instead of the library's detail (for
 * failures the module itself detects). */
PyObject *pdshmpy_raise_msg(pdshmpy_state *st, int rc, const char *fmt, ...);

/* ---- objects ------------------------------------------------------------------------ */
/* A handle inherited across fork() that views still point into: in a child,
 * pdshm_detach of an inherited handle unmaps the parent's range, so it waits
 * for the last of those views. */
typedef struct {
  pdshm_seg *seg;
  Py_ssize_t pins; /* live Pins whose bytes lie in its range */
} pdshmpy_mapping;

typedef struct pdshmpy_seg {
  PyObject_HEAD
  pdshm_seg *seg;      /* the attachment; NULL once pdshm_detach ran        */
  PyObject *name;      /* str                                               */
  unsigned flags;      /* PDSHM_RDONLY, PDSHM_SHARED_USERS                  */
  unsigned long forkgen; /* pdshmpy_forkgen() when seg was made            */
  int closed;          /* detach() was called: no new use                   */
  Py_ssize_t npins;    /* live Pins of this attachment                      */
  Py_ssize_t busy;     /* calls running on seg with the GIL released        */
  pdshmpy_link scopes; /* live Scope objects                                */
  pdshmpy_link pins;   /* live Pin objects                                  */
  pdshmpy_link groups; /* live group memberships (group.c)                  */
  pdshmpy_mapping *old;/* inherited handles kept for views (fork child)     */
  Py_ssize_t nold;
  pdshmpy_link link;   /* in the state's segment list                       */
  PyObject *weakrefs;
} pdshmpy_seg;

/* A Scope's slots for the Vars its lookups last returned: half for variables
 * it owns, half for those found up the chain (scope.c). */
#define PDSHMPY_SCOPE_FOUND 16
#define PDSHMPY_NAMES_KEPT 16

/* A lookup's answer, kept while its stamp holds (kept.c). */
typedef struct pdshmpy_kept {
  PyObject *name;      /* exact str, strong; NULL: an empty entry           */
  PyObject *var;       /* the Var found, or None; strong                     */
  int up;              /* find_var (1) or find_local_var (0)                 */
  pdshm_find_stamp stamp;
} pdshmpy_kept;

typedef struct pdshmpy_scope {
  PyObject_HEAD
  pdshmpy_seg *seg;    /* strong                                            */
  pdshm_scope *h;      /* NULL once released or dropped after fork()        */
  PyObject *path;      /* str: path from the root ("" at the root); NULL for
                          an anonymous scope                                */
  PyObject *base;      /* str: path of the nearest scope at or above this one
                          that is named or the root; NULL until known       */
  unsigned long forkgen; /* pdshmpy_forkgen() when h was made              */
  Py_ssize_t busy;     /* calls running on h with the GIL released: h is
                          released when the last ends (after release() or
                          detach() meanwhile)                              */
  int released;        /* release() or `with` exit                          */
  pdshmpy_link link;   /* in seg->scopes                                    */
  PyObject *weakrefs;
  PyObject *found[PDSHMPY_SCOPE_FOUND]; /* Vars it last returned (scope.c) */
  pdshmpy_kept *kept;  /* PDSHMPY_NAMES_KEPT answers of lookups by name, made
                          at the first (kept.c); only while h is the handle
                          they were found through                          */
} pdshmpy_scope;

typedef struct pdshmpy_var {
  PyObject_HEAD
  pdshmpy_seg *seg;    /* strong                                            */
  pdshm_varref ref;    /* weak: resolved at every use                       */
  PyObject *scope_path;/* str: path of the variable's scope, when known     */
  PyObject *search_path;/* when scope_path is NULL: the owner is the first
                          scope along this path and its prefixes that has
                          the variable (else an anonymous scope below it);
                          both NULL: an anonymous owner (not picklable)     */
  PyObject *weakrefs;
} pdshmpy_var;

typedef struct pdshmpy_pin {
  PyObject_HEAD
  pdshmpy_seg *seg;    /* strong                                            */
  pdshm_pin *pin;      /* NULL when pinning failed                          */
  pdshm_seg *mapping;  /* the attachment whose mapping holds the bytes      */
  pdshm_tensor_view view;
  pdshm_varref var;    /* the variable pinned (its buffer may have changed)  */
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
/* Called when a pin of s goes: unmaps an inherited range after its last view,
 * detaches a closed segment after its last pin. */
void pdshmpy_seg_pin_gone(pdshmpy_seg *s, pdshm_seg *mapping);
/* Around a call that releases the GIL: detach() from another thread meanwhile
 * closes the Segment but leaves pdshm_detach to the last of these. */
static inline void pdshmpy_seg_hold(pdshmpy_seg *s) { s->busy++; }
void pdshmpy_seg_unhold(pdshmpy_seg *s);
/* pdshmpy_seg_get, held (pdshmpy_seg_unhold ends it) when it succeeds. */
pdshm_seg *pdshmpy_seg_begin(pdshmpy_seg *s);
/* The fork hook (after_in_child): re-attaches segments that have pins and
 * inherits each pin so that inherited views stay backed. */
PyObject *pdshmpy_after_fork_child(PyObject *module, PyObject *unused);
/* The exit hook (atexit): closes every Segment of this process, as detach()
 * does (an attachment with live views stays mapped until the process ends). */
PyObject *pdshmpy_close_all(PyObject *module, PyObject *unused);

/* ---- scope.c --------------------------------------------------------------------------- */
extern PyType_Spec pdshmpy_scope_spec;
/* Segment.root and Segment.open(path). */
PyObject *pdshmpy_seg_root(PyObject *self, void *closure);
PyObject *pdshmpy_seg_open_path(PyObject *self, PyObject *path);
/* A new Scope object owning h (released on failure, and when seg was
 * detached meanwhile); path and base may be NULL (base is path when path is
 * given).  The caller holds seg. */
PyObject *pdshmpy_scope_wrap(pdshmpy_seg *seg, pdshm_scope *h, PyObject *path, PyObject *base);

/* ---- var.c, varlock.c, varref.c ------------------------------------------------------- */
extern PyType_Spec pdshmpy_var_spec, pdshmpy_varlock_spec, pdshmpy_varref_spec;
/* A new Var of the variable ref names. */
PyObject *pdshmpy_var_wrap_ref(pdshmpy_seg *seg, pdshm_varref ref, PyObject *scope_path,
                               PyObject *search_path);
/* The variable now, or NULL with pdshm.Stale (or another error) raised. */
pdshm_var *pdshmpy_var_get(pdshmpy_var *self);
/* pdshmpy_var_get for a call that releases the GIL: the Segment is held
 * (pdshmpy_seg_unhold(self->seg) ends it) when it succeeds. */
pdshm_var *pdshmpy_var_begin(pdshmpy_var *self);
/* Copies a string the segment holds (at most PDSHM_NAME_MAX bytes). */
PyObject *pdshmpy_str_from_seg(const char *p);
/* Raises Stale unless self still resolves to v (after a copy from it). */
int pdshmpy_var_still(pdshmpy_var *self, pdshm_var *v);
/* Var.lock() (varlock.c) and Var.ref() (varref.c). */
PyObject *pdshmpy_var_lock(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pdshmpy_var_ref(PyObject *self, PyObject *unused);

/* ---- dtype.c --------------------------------------------------------------------------- */
const char *pdshmpy_dtype_name(int dt);     /* "float32"; NULL for unknown   */
const char *pdshmpy_dtype_format(int dt);   /* buffer-protocol format        */
const char *pdshmpy_dtype_typestr(int dt);  /* __array_interface__ typestr   */
pdshmpy_dl_dtype pdshmpy_dtype_dl(int dt);  /* DLPack's type; 0s for unknown */
int pdshmpy_dtype_kind(int dt);             /* fold.h's enum kind; -1: none  */
/* -1 with TypeError for what is no dtype, InvalidArgument (EINVAL) for one
 * pdshm does not hold or a bad shape. */
int pdshmpy_dtype_parse(pdshmpy_state *st, PyObject *o, pdshm_dtype *out);
/* A buffer format (with its itemsize) as a dtype; -1 when none fits. */
int pdshmpy_dtype_from_format(const char *fmt, Py_ssize_t itemsize);
/* A DLPack element type as a dtype; -1 when pdshm has none like it. */
int pdshmpy_dtype_from_dl(pdshmpy_dl_dtype dt);
int pdshmpy_shape_parse(pdshmpy_state *st, PyObject *o, int *ndim, int64_t *dims);

/* ---- dlborrow.c ------------------------------------------------------------------------- */
/* A CPU tensor's bytes, borrowed for one call through its DLPack capsule,
 * which keeps them (unconsumed: dropping it gives them back). */
typedef struct {
  PyObject *capsule; /* strong                                              */
  void *data;
  pdshmpy_dl_dtype dtype;
  uint64_t count;    /* elements                                            */
} pdshmpy_dl_borrowed;
/* Borrows the bytes of the tensor capsule (a new reference, or NULL with an
 * exception, as a call that makes one returns) holds: 0, *out owning the
 * capsule; or -1 with an exception (InvalidArgument for a tensor that is
 * not compact in CPU memory), the capsule dropped. */
int pdshmpy_dl_borrow(pdshmpy_state *st, PyObject *capsule, pdshmpy_dl_borrowed *out);
void pdshmpy_dl_release(pdshmpy_dl_borrowed *b);

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

/* ---- kept.c ----------------------------------------------------------------------------- */
/* The answer (a new reference: a Var or None) of the lookup of name (an exact
 * str; up: find_var) through sc's handle, kept from an earlier lookup whose
 * stamp still holds; else NULL, with no exception.  sc's handle must be
 * usable (the caller is inside scope_begin). */
PyObject *pdshmpy_kept_get(pdshmpy_scope *sc, PyObject *name, int up);
/* Keeps answer (a Var or None) of that lookup while stamp holds.  Keeping
 * is a cache: without memory for it, nothing is kept and nothing raised. */
void pdshmpy_kept_put(pdshmpy_scope *sc, PyObject *name, int up, PyObject *answer,
                      const pdshm_find_stamp *stamp);
/* Forgets every answer: sc's handle is going or was replaced. */
void pdshmpy_kept_clear(pdshmpy_scope *sc);

/* ---- viewvar.c -------------------------------------------------------------------------- */
/* The variable whose whole current tensor obj views (Var.numpy(), np.asarray,
 * torch.from_dlpack, or a reshape of one that keeps the bytes), found among
 * the live Pins of s whose bytes lie in seg (s's attachment now); NULL with
 * pdshm.InvalidArgument (or the error of reading obj). */
pdshm_var *pdshmpy_view_var(pdshmpy_seg *s, pdshm_seg *seg, PyObject *obj);

/* ---- capi.c: the C API of other extension modules (pdshmpy_capi.h) ------------------ */
int pdshmpy_capi_init(PyObject *module);

/* ---- group.c (the Group type, Segment.group, Var.wait) ---------------------------------- */
int pdshmpy_group_init(PyObject *module, pdshmpy_state *st);
PyObject *pdshmpy_seg_group(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pdshmpy_seg_enlist(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pdshmpy_var_wait(PyObject *self, PyObject *args, PyObject *kw);
/* A timeout argument: None -> *out = -1 (no limit), else seconds >= 0 ->
 * ns; 0, or -1 with an exception (InvalidArgument for a negative, NaN or
 * infinite one). */
int pdshmpy_timeout_ns(pdshmpy_state *st, PyObject *o, int64_t *out);
/* For a collective that another file runs on a Group's membership: the
 * handle, marked busy (invariant 2 of group.c) and its Segment held, *seg
 * that Segment; or NULL with an exception (TypeError for what is no Group,
 * pdshm.Error when it left, was forked or is busy).  pdshmpy_group_end,
 * with the GIL held, ends it (a membership dropped meanwhile leaves then). */
pdshm_group *pdshmpy_group_begin(PyObject *group, pdshmpy_seg **seg);
void pdshmpy_group_end(PyObject *group);

/* ---- slots.c (the SlotReducer type) ---------------------------------------------------------- */
int pdshmpy_slots_init(PyObject *module, pdshmpy_state *st);

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

/* numpy.asarray (a borrowed reference kept in the state), or NULL. */
PyObject *pdshmpy_np_asarray(pdshmpy_state *st);

/* ---- util ------------------------------------------------------------------------------- */
/* A str argument as UTF-8 without NUL bytes; NULL with TypeError/ValueError. */
const char *pdshmpy_utf8(PyObject *o, const char *what);
/* An int argument (anything with __index__) in [0, max] into *out:
 * 0, or -1 with TypeError (no int) or pdshm.InvalidArgument (outside, beyond
 * 64 bits included). */
int pdshmpy_uint_arg(pdshmpy_state *st, PyObject *o, const char *what, unsigned long long max,
                     unsigned long long *out);

#endif /* PDSHMPY_H */
