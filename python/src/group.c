/*
 * group.c - trainer groups and waiting (DESIGN section 4): Segment.group(),
 * Segment.enlist(), the Group type (rank, size, barrier, allreduce,
 * allreduce_private, reduce_scatter, allgather, regroup, share, holds,
 * leave) and Var.wait().
 *
 * Invariants:
 *  1. A Group holds its Segment; Segment.detach() (and a fork child's
 *     re-attach) leaves every Group of it first (its link's drop), as
 *     pdshm_detach would free the handles under them; a Group that another
 *     thread is using without the GIL leaves when that call ends (the call
 *     holds the Segment, so pdshm_detach waits for it too).
 *  2. One thread at a time uses a pdshm_group: a call that finds the Group
 *     busy (another thread inside a barrier or collective) raises pdshm.Error
 *     (EBUSY) instead of entering.
 *  3. Waits, barriers, regroups and enlists run with the GIL released, in
 *     slices of WAIT_SLICE_NS, checking for signals (Ctrl-C) between slices:
 *     a barrier or regroup that timed out has not been passed and its next
 *     call waits for the same round, and a candidate that timed out enlists
 *     again (a regroup in between admits it at the next one), so slicing
 *     changes nothing the caller can see.  The collectives are not sliced: a
 *     timeout while members write would spoil the round for all.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "pdshmpy.h"

#define WAIT_SLICE_NS 200000000LL /* 200 ms */

typedef struct pdshmpy_group {
  PyObject_HEAD
  pdshmpy_seg *seg;     /* strong                                          */
  pdshm_group *g;       /* NULL once left                                  */
  PyObject *name;
  int rank, size;
  unsigned long forkgen;/* pdshmpy_forkgen() when joined                   */
  int busy;             /* a call runs on g without the GIL                */
  int doomed;           /* dropped while busy: leave when that call ends   */
  pdshmpy_link link;    /* in seg->groups                                  */
} pdshmpy_group;

#define GR(o) ((pdshmpy_group *)(o))

int pdshmpy_timeout_ns(pdshmpy_state *st, PyObject *o, int64_t *out) {
  if (o == Py_None) {
    *out = -1;
    return 0;
  }
  double t = PyFloat_AsDouble(o);
  if (t == -1.0 && PyErr_Occurred()) return -1;
  if (!(t >= 0) || isinf(t)) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "timeout must be None or seconds >= 0, not %R", o);
    return -1;
  }
  *out = t >= 4e9 ? INT64_MAX / 2 : (int64_t)(t * 1e9);
  return 0;
}

/* The next slice of a wait with `left` ns to go (< 0: no limit). */
static int64_t slice_of(int64_t left) {
  return left < 0 || left > WAIT_SLICE_NS ? WAIT_SLICE_NS : left;
}

/* ---- Var.wait ------------------------------------------------------------------------- */

PyObject *pdshmpy_var_wait(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"seen", "timeout", NULL};
  pdshmpy_var *var = (pdshmpy_var *)self;
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *seeno, *timeo = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|O:wait", kwlist, &PyLong_Type, &seeno, &timeo))
    return NULL;
  unsigned long long seen = PyLong_AsUnsignedLongLong(seeno);
  int64_t left;
  if ((seen == (unsigned long long)-1 && PyErr_Occurred()) ||
      pdshmpy_timeout_ns(st, timeo, &left) < 0)
    return NULL;
  for (;;) {
    pdshm_var *v = pdshmpy_var_get(var);
    if (!v) return NULL;
    int64_t slice = slice_of(left);
    int rc;
    pdshmpy_seg_hold(var->seg);
    PDSHMPY_NOGIL(rc = pdshm_var_wait(v, seen, slice));
    pdshmpy_seg_unhold(var->seg);
    if (rc == 0) {
      v = pdshmpy_var_get(var);
      return v ? PyLong_FromUnsignedLongLong(pdshm_var_version(v)) : NULL;
    }
    if (rc != -ETIMEDOUT) return pdshmpy_raise(st, rc, "wait");
    if (left >= 0 && (left -= slice) <= 0)
      return pdshmpy_raise_msg(st, -ETIMEDOUT, "the version stayed %llu", seen);
    if (PyErr_CheckSignals() < 0) return NULL;
  }
}

/* ---- joining, leaving ------------------------------------------------------------------------ */

/* Leaves (in a fork child: frees the copy only).  A membership another
 * thread is using without the GIL is left when that call ends. */
static void group_drop(pdshmpy_group *gr) {
  pdshmpy_list_del(&gr->link);
  pdshm_group *g = gr->g;
  if (!g) return;
  if (gr->forkgen != pdshmpy_forkgen()) { /* a fork parent's: frees the copy, no lock */
    gr->g = NULL;
    pdshm_group_leave(g);
    return;
  }
  if (gr->busy) {
    gr->doomed = 1;
    return;
  }
  gr->g = NULL;
  pdshmpy_seg_hold(gr->seg);
  PDSHMPY_NOGIL(pdshm_group_leave(g));
  pdshmpy_seg_unhold(gr->seg);
}

/* After a call that ran without the GIL: a doomed membership is left before
 * the Segment is let go (its pdshm_detach would free the handle). */
static void group_call_done(pdshmpy_group *gr) {
  gr->busy = 0;
  if (gr->doomed) group_drop(gr);
  pdshmpy_seg_unhold(gr->seg);
}

/* The link's drop (pdshmpy_link): for the Segment's detach() and fork child. */
static void group_link_drop(pdshmpy_link *l) { group_drop(PDSHMPY_CONTAINER(l, pdshmpy_group, link)); }

/* A Group object for g, just joined (left again on failure, and when s was
 * detached meanwhile); the caller holds s. */
static PyObject *group_wrap(pdshmpy_seg *s, pdshm_group *g, PyObject *name) {
  pdshmpy_state *st = PDSHMPY_STATE(s);
  pdshmpy_group *gr = s->closed ? NULL : PyObject_New(pdshmpy_group, st->group_type);
  if (!gr) {
    PDSHMPY_NOGIL(pdshm_group_leave(g));
    return s->closed ? pdshmpy_raise_msg(st, PDSHM_EINVAL, "segment %R was detached", s->name)
                     : NULL;
  }
  gr->seg = (pdshmpy_seg *)Py_NewRef(s);
  gr->g = g;
  gr->name = Py_NewRef(name);
  gr->rank = pdshm_group_rank(g);
  gr->size = pdshm_group_size(g);
  gr->forkgen = pdshmpy_forkgen();
  gr->busy = 0;
  gr->doomed = 0;
  gr->link.drop = group_link_drop;
  pdshmpy_list_add(&s->groups, &gr->link);
  return (PyObject *)gr;
}

PyObject *pdshmpy_seg_group(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"name", "size", "rank", NULL};
  pdshmpy_seg *s = (pdshmpy_seg *)self;
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *name, *sizeo, *ranko = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:group", kwlist, &name, &sizeo, &ranko))
    return NULL;
  const char *n = pdshmpy_utf8(name, "group name");
  unsigned long long size, ranku;
  if (!n || pdshmpy_uint_arg(st, sizeo, "size", PDSHM_GROUP_MAX, &size) < 0 ||
      (ranko != Py_None && pdshmpy_uint_arg(st, ranko, "rank", PDSHM_GROUP_MAX - 1, &ranku) < 0))
    return NULL;
  int rank = ranko == Py_None ? -1 : (int)ranku;
  pdshm_seg *seg = pdshmpy_seg_begin(s);
  if (!seg) return NULL;
  pdshm_group *g = NULL;
  int rc;
  PDSHMPY_NOGIL(rc = pdshm_group_join(seg, n, (unsigned)size, rank, &g));
  PyObject *r = rc ? pdshmpy_raise_fmt(st, rc, "group '%s'", n) : group_wrap(s, g, name);
  pdshmpy_seg_unhold(s);
  return r;
}

/* enlist(name, timeout=None): a candidate until the members' regroup
 * admits it (invariant 3: in slices). */
PyObject *pdshmpy_seg_enlist(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"name", "timeout", NULL};
  pdshmpy_seg *s = (pdshmpy_seg *)self;
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *name, *timeo = Py_None;
  int64_t left;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:enlist", kwlist, &name, &timeo) ||
      pdshmpy_timeout_ns(st, timeo, &left) < 0)
    return NULL;
  const char *n = pdshmpy_utf8(name, "group name");
  if (!n) return NULL;
  pdshm_seg *seg = pdshmpy_seg_begin(s);
  if (!seg) return NULL;
  pdshm_group *g = NULL;
  int rc;
  for (;;) {
    int64_t slice = slice_of(left);
    PDSHMPY_NOGIL(rc = pdshm_group_enlist(seg, n, slice, &g));
    if (rc != -ETIMEDOUT || (left >= 0 && (left -= slice) <= 0)) break;
    if (PyErr_CheckSignals() < 0) {
      pdshmpy_seg_unhold(s);
      return NULL;
    }
  }
  PyObject *r = rc ? pdshmpy_raise_fmt(st, rc, "enlist in group '%s'", n) : group_wrap(s, g, name);
  pdshmpy_seg_unhold(s);
  return r;
}

/* The handle, or NULL with an error: left, forked, closed segment or busy. */
static pdshm_group *group_handle(pdshmpy_group *gr) {
  pdshmpy_state *st = PDSHMPY_STATE(gr);
  if (!pdshmpy_seg_get(gr->seg)) return NULL; /* closed; in a fork child drops g */
  if (gr->forkgen != pdshmpy_forkgen()) {
    group_drop(gr);
    pdshmpy_raise_msg(st, PDSHM_EFORKED, "a group membership of the parent process cannot be "
                                         "used after fork(): join again");
    return NULL;
  }
  if (!gr->g || gr->doomed) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "this member left the group");
    return NULL;
  }
  if (gr->busy) {
    pdshmpy_raise_msg(st, PDSHM_EBUSY, "another thread is in a call on this membership");
    return NULL;
  }
  return gr->g;
}

static PyObject *group_leave(PyObject *self, PyObject *unused) {
  pdshmpy_group *gr = GR(self);
  if (gr->busy) return pdshmpy_raise_msg(PDSHMPY_STATE(self), PDSHM_EBUSY,
                                         "another thread is in a call on this membership");
  group_drop(gr);
  Py_RETURN_NONE;
}

/* ---- for the other files' collectives (pdshmpy.h) ------------------------------------------- */

pdshm_group *pdshmpy_group_begin(PyObject *o, pdshmpy_seg **seg) {
  pdshmpy_state *st = PDSHMPY_STATE(o);
  if (!st->group_type || !PyObject_TypeCheck(o, st->group_type)) {
    PyErr_Format(PyExc_TypeError, "a pdshm.Group is wanted, not %.200s", Py_TYPE(o)->tp_name);
    return NULL;
  }
  pdshmpy_group *gr = GR(o);
  pdshm_group *g = group_handle(gr);
  if (!g) return NULL;
  gr->busy = 1;
  pdshmpy_seg_hold(gr->seg);
  *seg = gr->seg;
  return g;
}

void pdshmpy_group_end(PyObject *o) { group_call_done(GR(o)); }

/* ---- barrier, the collectives ---------------------------------------------------------------------- */

static PyObject *group_barrier(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"timeout", NULL};
  pdshmpy_group *gr = GR(self);
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *timeo = Py_None;
  int64_t left;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:barrier", kwlist, &timeo) ||
      pdshmpy_timeout_ns(st, timeo, &left) < 0)
    return NULL;
  pdshm_group *g = group_handle(gr);
  if (!g) return NULL;
  int rc;
  gr->busy = 1;
  pdshmpy_seg_hold(gr->seg);
  for (;;) {
    int64_t slice = slice_of(left);
    PDSHMPY_NOGIL(rc = pdshm_group_barrier(g, slice));
    if (rc != -ETIMEDOUT || (left >= 0 && (left -= slice) <= 0)) break;
    if (PyErr_CheckSignals() < 0) {
      rc = 1;
      break;
    }
  }
  group_call_done(gr);
  if (rc == 1) return NULL;
  if (rc == -EOWNERDEAD)
    return pdshmpy_raise_msg(st, rc, "a member of group %R died: the round was abandoned",
                             gr->name);
  if (rc) return pdshmpy_raise_fmt(st, rc, "barrier of group '%s'", PyUnicode_AsUTF8(gr->name));
  Py_RETURN_NONE;
}

/* regroup(timeout=None) -> (rank, size), in slices (invariant 3). */
static PyObject *group_regroup(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"timeout", NULL};
  pdshmpy_group *gr = GR(self);
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *timeo = Py_None;
  int64_t left;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:regroup", kwlist, &timeo) ||
      pdshmpy_timeout_ns(st, timeo, &left) < 0)
    return NULL;
  pdshm_group *g = group_handle(gr);
  if (!g) return NULL;
  int rc, rank = -1, size = -1;
  gr->busy = 1;
  pdshmpy_seg_hold(gr->seg);
  for (;;) {
    int64_t slice = slice_of(left);
    PDSHMPY_NOGIL(rc = pdshm_group_regroup(g, slice, &rank, &size));
    if (rc != -ETIMEDOUT || (left >= 0 && (left -= slice) <= 0)) break;
    if (PyErr_CheckSignals() < 0) {
      rc = 1;
      break;
    }
  }
  if (!rc) {
    gr->rank = rank;
    gr->size = size;
  }
  group_call_done(gr);
  if (rc == 1) return NULL;
  if (rc) return pdshmpy_raise_fmt(st, rc, "regroup of group '%s'", PyUnicode_AsUTF8(gr->name));
  return Py_BuildValue("(ii)", rank, size);
}

static int reduce_op(pdshmpy_state *st, PyObject *o, pdshm_reduce_op *out) {
  static const struct {
    const char *name;
    pdshm_reduce_op op;
  } ops[] = {{"sum", PDSHM_SUM}, {"mean", PDSHM_MEAN}, {"max", PDSHM_MAX}, {"min", PDSHM_MIN}};
  const char *s = pdshmpy_utf8(o, "op");
  if (!s) return -1;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (!strcmp(s, ops[i].name)) {
      *out = ops[i].op;
      return 0;
    }
  pdshmpy_raise_msg(st, PDSHM_EINVAL, "op must be \"sum\", \"mean\", \"max\" or \"min\", not %R", o);
  return -1;
}

enum collective { ALLREDUCE, REDUCE_SCATTER, ALLGATHER };
static const char *const collective_names[] = {"allreduce", "reduce_scatter", "allgather"};

/* The variable a collective of the group works on: varo is a Var of the
 * group's Segment, or (views true) a whole-tensor view of one; NULL with
 * an exception. */
static pdshm_var *group_var(pdshmpy_group *gr, pdshm_seg *seg, PyObject *varo, bool views) {
  pdshmpy_state *st = PDSHMPY_STATE(gr);
  if (PyObject_TypeCheck(varo, st->var_type)) {
    pdshmpy_var *var = (pdshmpy_var *)varo;
    int same = PyObject_RichCompareBool(var->seg->name, gr->seg->name, Py_EQ);
    if (same <= 0) {
      if (!same)
        pdshmpy_raise_msg(st, PDSHM_EINVAL, "the variable lives in segment %R, the group in %R",
                          var->seg->name, gr->seg->name);
      return NULL;
    }
    /* Resolved through the group's attachment: the offsets are the segment's. */
    pdshm_var *v = pdshm_varref_get(seg, var->ref);
    if (!v) pdshmpy_raise_msg(st, PDSHM_ESTALE, "the variable was erased or its scope died");
    return v;
  }
  if (!views) {
    PyErr_Format(PyExc_TypeError, "a pdshm.Var is wanted, not %.100s", Py_TYPE(varo)->tp_name);
    return NULL;
  }
  return pdshmpy_view_var(gr->seg, seg, varo);
}

/* One collective on varo (a Var, or a whole-tensor view of one): None, or
 * NULL with an exception. */
static PyObject *group_collective(pdshmpy_group *gr, enum collective kind, PyObject *varo,
                                  pdshm_reduce_op op, int64_t ns) {
  pdshmpy_state *st = PDSHMPY_STATE(gr);
  pdshm_group *g = group_handle(gr);
  pdshm_seg *seg = g ? pdshmpy_seg_get(gr->seg) : NULL;
  if (!seg) return NULL;
  pdshm_var *v = group_var(gr, seg, varo, true);
  if (!v) return NULL;
  int rc;
  gr->busy = 1;
  pdshmpy_seg_hold(gr->seg);
  PDSHMPY_NOGIL(rc = kind == ALLREDUCE        ? pdshm_group_allreduce(g, v, op, ns)
                     : kind == REDUCE_SCATTER ? pdshm_group_reduce_scatter(g, v, op, ns)
                                              : pdshm_group_allgather(g, v, ns));
  group_call_done(gr);
  if (rc == -EOWNERDEAD)
    return pdshmpy_raise_msg(st, rc, "a member of group %R died: the tensors are unspecified",
                             gr->name);
  if (rc)
    return pdshmpy_raise_fmt(st, rc, "%s in group '%s'", collective_names[kind],
                             PyUnicode_AsUTF8(gr->name));
  Py_RETURN_NONE;
}

/* allreduce and reduce_scatter: (var, op="sum", timeout=None). */
static PyObject *group_reducing(PyObject *self, PyObject *args, PyObject *kw,
                                enum collective kind) {
  static char *kwlist[] = {"var", "op", "timeout", NULL};
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *varo, *opo = NULL, *timeo = Py_None;
  pdshm_reduce_op op = PDSHM_SUM;
  int64_t ns;
  const char *format = kind == ALLREDUCE ? "O|OO:allreduce" : "O|OO:reduce_scatter";
  if (!PyArg_ParseTupleAndKeywords(args, kw, format, kwlist, &varo, &opo, &timeo) ||
      (opo && reduce_op(st, opo, &op) < 0) || pdshmpy_timeout_ns(st, timeo, &ns) < 0)
    return NULL;
  return group_collective(GR(self), kind, varo, op, ns);
}

static PyObject *group_allreduce(PyObject *self, PyObject *args, PyObject *kw) {
  return group_reducing(self, args, kw, ALLREDUCE);
}

static PyObject *group_reduce_scatter(PyObject *self, PyObject *args, PyObject *kw) {
  return group_reducing(self, args, kw, REDUCE_SCATTER);
}

static PyObject *group_allgather(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"var", "timeout", NULL};
  PyObject *varo, *timeo = Py_None;
  int64_t ns;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:allgather", kwlist, &varo, &timeo) ||
      pdshmpy_timeout_ns(PDSHMPY_STATE(self), timeo, &ns) < 0)
    return NULL;
  return group_collective(GR(self), ALLGATHER, varo, PDSHM_SUM, ns);
}

/* The bytes allreduce_private reduces: obj's buffer (writable, C-contiguous,
 * of a format that names a dtype), or, for an object that exports no buffer
 * but __dlpack__ (a torch tensor: bfloat16 has no buffer format), its DLPack
 * tensor, borrowed (dlborrow.c).  0 with *data, *dt and *count, to be given
 * back by private_bytes_release; or -1 with an exception. */
typedef struct {
  Py_buffer view;         /* view.obj NULL: none taken */
  pdshmpy_dl_borrowed dl; /* dl.capsule NULL: none     */
} private_bytes;

static int private_bytes_get(pdshmpy_state *st, PyObject *obj, private_bytes *b, void **data,
                             int *dt, uint64_t *count) {
  memset(b, 0, sizeof *b);
  if (!PyObject_CheckBuffer(obj) && PyObject_HasAttrString(obj, "__dlpack__")) {
    if (pdshmpy_dl_borrow(st, PyObject_CallMethod(obj, "__dlpack__", NULL), &b->dl) < 0)
      return -1;
    *dt = pdshmpy_dtype_from_dl(b->dl.dtype);
    if (*dt < 0) {
      pdshmpy_raise_msg(st, PDSHM_EINVAL, "no allreduce of a tensor of DLPack dtype code %d, "
                        "%d bits", b->dl.dtype.code, b->dl.dtype.bits);
      pdshmpy_dl_release(&b->dl);
      return -1;
    }
    *data = b->dl.data;
    *count = b->dl.count;
    return 0;
  }
  if (PyObject_GetBuffer(obj, &b->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
    return -1;
  *dt = pdshmpy_dtype_from_format(b->view.format, b->view.itemsize);
  if (*dt < 0) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "no allreduce of a buffer of format '%s'",
                      b->view.format);
    PyBuffer_Release(&b->view);
    return -1;
  }
  *data = b->view.buf;
  *count = (uint64_t)(b->view.len / b->view.itemsize);
  return 0;
}

static void private_bytes_release(private_bytes *b) {
  if (b->view.obj) PyBuffer_Release(&b->view);
  pdshmpy_dl_release(&b->dl);
}

/* allreduce_private(buffer, staging, op="sum", timeout=None): see the method's doc. */
static PyObject *group_allreduce_private(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"buffer", "staging", "op", "timeout", NULL};
  pdshmpy_group *gr = GR(self);
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *bufo, *stagingo, *opo = NULL, *timeo = Py_None;
  pdshm_reduce_op op = PDSHM_SUM;
  int64_t ns;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO:allreduce_private", kwlist, &bufo,
                                   &stagingo, &opo, &timeo) ||
      (opo && reduce_op(st, opo, &op) < 0) || pdshmpy_timeout_ns(st, timeo, &ns) < 0)
    return NULL;
  pdshm_group *g = group_handle(gr);
  pdshm_seg *seg = g ? pdshmpy_seg_get(gr->seg) : NULL;
  if (!seg) return NULL;
  pdshm_var *staging = group_var(gr, seg, stagingo, false);
  if (!staging) return NULL;
  private_bytes bytes;
  void *data;
  int dt, rc;
  uint64_t count;
  if (private_bytes_get(st, bufo, &bytes, &data, &dt, &count) < 0) return NULL;
  gr->busy = 1;
  pdshmpy_seg_hold(gr->seg);
  PDSHMPY_NOGIL(rc = pdshm_group_allreduce_private(g, data, (pdshm_dtype)dt, count, staging, op,
                                                   ns));
  group_call_done(gr);
  private_bytes_release(&bytes);
  if (rc == -EOWNERDEAD)
    return pdshmpy_raise_msg(st, rc, "a member of group %R died: the buffer is unspecified",
                             gr->name);
  if (rc)
    return pdshmpy_raise_fmt(st, rc, "allreduce_private in group '%s'",
                             PyUnicode_AsUTF8(gr->name));
  Py_RETURN_NONE;
}

/* holds(view): whether a collective takes view itself, as the whole tensor
 * of a variable of the group's Segment: True or False, never an error for
 * a view that is not one. */
static PyObject *group_holds(PyObject *self, PyObject *obj) {
  pdshmpy_group *gr = GR(self);
  pdshm_group *g = group_handle(gr);
  pdshm_seg *seg = g ? pdshmpy_seg_get(gr->seg) : NULL;
  if (!seg) return NULL;
  if (pdshmpy_view_var(gr->seg, seg, obj)) Py_RETURN_TRUE;
  if (!PyErr_ExceptionMatches(PDSHMPY_STATE(self)->InvalidArgument)) return NULL;
  PyErr_Clear();
  Py_RETURN_FALSE;
}

/* share(n): this member's (first, end) of n elements. */
static PyObject *group_share(PyObject *self, PyObject *arg) {
  unsigned long long n = PyLong_AsUnsignedLongLong(arg);
  if (n == (unsigned long long)-1 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      return pdshmpy_raise_msg(PDSHMPY_STATE(self), PDSHM_EINVAL,
                               "share takes an element count 0 <= n < 2**64, not %R", arg);
    }
    return NULL;
  }
  pdshm_group *g = group_handle(GR(self));
  if (!g) return NULL;
  uint64_t first, end;
  int rc = pdshm_group_share(g, n, &first, &end);
  if (rc) return pdshmpy_raise_fmt(PDSHMPY_STATE(self), rc, "share");
  return Py_BuildValue("(KK)", (unsigned long long)first, (unsigned long long)end);
}

/* ---- the type ------------------------------------------------------------------------------- */

static PyObject *group_get_rank(PyObject *self, void *closure) {
  return PyLong_FromLong(GR(self)->rank);
}

static PyObject *group_get_size(PyObject *self, void *closure) {
  return PyLong_FromLong(GR(self)->size);
}

static PyObject *group_get_name(PyObject *self, void *closure) {
  return Py_NewRef(GR(self)->name);
}

static PyObject *group_get_left(PyObject *self, void *closure) {
  return PyBool_FromLong(GR(self)->g == NULL || GR(self)->doomed);
}

static PyObject *group_enter(PyObject *self, PyObject *unused) {
  if (!group_handle(GR(self))) return NULL;
  return Py_NewRef(self);
}

static PyObject *group_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  group_drop(GR(self));
  Py_RETURN_FALSE;
}

static PyObject *group_repr(PyObject *self) {
  pdshmpy_group *gr = GR(self);
  return PyUnicode_FromFormat("<pdshm.Group %R rank %d of %d%s>", gr->name, gr->rank, gr->size,
                              gr->g ? "" : " (left)");
}

static void group_dealloc(PyObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  group_drop(GR(self));
  Py_CLEAR(GR(self)->name);
  Py_CLEAR(GR(self)->seg);
  tp->tp_free(self);
  Py_DECREF(tp);
}

static PyMethodDef group_methods[] = {
    {"barrier", (PyCFunction)(void (*)(void))group_barrier, METH_VARARGS | METH_KEYWORDS,
     "barrier(timeout=None)\n\nReturns once every rank has reached this barrier.  PeerDied "
     "when a member\ndied during or before this round (every survivor gets it, and the "
     "next\nbarrier waits for a replacement); TimeoutError after timeout seconds (the\n"
     "barrier is not passed: the next call waits for the same round).  Waits with\nthe GIL "
     "released; Ctrl-C interrupts it."},
    {"allreduce", (PyCFunction)(void (*)(void))group_allreduce, METH_VARARGS | METH_KEYWORDS,
     "allreduce(var, op=\"sum\", timeout=None)\n\nEvery member passes its own tensor "
     "variable of the same dtype and element\ncount (a Var, or a whole-tensor view of one "
     "made by this Segment: a numpy\narray or torch tensor from Var.numpy() or "
     "torch.from_dlpack); on return each holds the op (\"sum\", "
     "\"mean\", \"max\", \"min\") over all\nmembers' tensors, computed in place in the "
     "segment.  Dtypes: float16,\nbfloat16, float32, float64, int32, int64.  PeerDied or "
     "TimeoutError as for\nbarrier (then the tensors' contents are unspecified)."},
    {"allreduce_private", (PyCFunction)(void (*)(void))group_allreduce_private,
     METH_VARARGS | METH_KEYWORDS,
     "allreduce_private(buffer, staging, op=\"sum\", timeout=None)\n\nThe allreduce of "
     "a buffer in this process's memory (a writable,\nC-contiguous buffer of float16, "
     "float32, float64, int32 or int64, such\nas a numpy array; or a contiguous CPU tensor "
     "through its __dlpack__,\nsuch as a torch tensor, bfloat16 too), through staging: a Var of "
     "this member's holding a\ntensor of at least the buffer's bytes.  Each member copies "
     "into its\nstaging only the shares the others reduce, and copies their reduced\n"
     "shares straight into its buffer.  op, the result's bits and the\nerrors as for "
     "allreduce (after PeerDied or a timeout while the\nmembers worked, the buffer is "
     "unspecified)."},
    {"reduce_scatter", (PyCFunction)(void (*)(void))group_reduce_scatter,
     METH_VARARGS | METH_KEYWORDS,
     "reduce_scatter(var, op=\"sum\", timeout=None)\n\nThe first half of allreduce: "
     "arguments as for allreduce; on return this\nmember's share (share()) of its own "
     "tensor holds the op over every\nmember's same share, and the rest of its tensor is "
     "as it was.  A round where\nmembers call different collectives (or a barrier) is "
     "ValueError at every\nmember and changes nothing.  PeerDied or TimeoutError as for "
     "allreduce\n(then the shares are unspecified, the rest unchanged)."},
    {"allgather", (PyCFunction)(void (*)(void))group_allgather, METH_VARARGS | METH_KEYWORDS,
     "allgather(var, timeout=None)\n\nThe second half of allreduce: every member's share "
     "(share()) of its own\ntensor is copied into the same share of every other member's "
     "tensor.  Any\ndtype; same dtype and element count at every member (else ValueError "
     "at\nevery member, nothing changed).  PeerDied or TimeoutError as for allreduce\n"
     "(then this member's own share is unchanged, the rest unspecified)."},
    {"regroup", (PyCFunction)(void (*)(void))group_regroup, METH_VARARGS | METH_KEYWORDS,
     "regroup(timeout=None) -> (rank, size)\n\nThe group shrinks and grows: every live "
     "member calls it at the same round\n(after PeerDied, say, when no replacement came "
     "in time, or at a step\nboundary); the ranks of dead (or left) members are dropped "
     "and the processes\nwaiting in Segment.enlist() admitted.  Returns this member's new "
     "rank and\nthe new size, the same at every member; the survivors keep the order of "
     "their\nold ranks, the newcomers follow.  rank, size and share() follow.  A member\n"
     "that dies during the call is dropped too.  With nobody dead and nobody\nwaiting it "
     "changes nothing (a barrier).  TimeoutError after timeout\nseconds when a live "
     "member did not come (a stopped process): nothing\nchanged.  ValueError when a member "
     "came to the round with a barrier or\na collective instead (nothing changed).  Waits "
     "with the GIL released;\nCtrl-C interrupts it."},
    {"share", group_share, METH_O,
     "share(n) -> (first, end)\n\nThis member's share of n elements: the elements "
     "[first, end) it reduces\nin allreduce and reduce_scatter and spreads in allgather, "
     "first =\nn * rank // size and end the same for rank + 1.  Pure arithmetic."},
    {"holds", group_holds, METH_O,
     "holds(view) -> bool\n\nTrue when a collective of this group takes view itself: a "
     "whole-tensor\nview (numpy array, torch tensor) of a variable of this Segment object, "
     "not\nresized since; False for anything else.  No collective: this member only."},
    {"leave", group_leave, METH_NOARGS,
     "leave()\n\nFrees this rank (a replacement may take it); the group's memory goes "
     "back\nwith its last member.  Later calls raise pdshm.Error."},
    {"__enter__", group_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))group_exit, METH_FASTCALL, NULL},
    {NULL}};

static PyGetSetDef group_getset[] = {
    {"rank", group_get_rank, NULL, "This member's rank, 0 <= rank < size.", NULL},
    {"size", group_get_size, NULL, "The group's number of members.", NULL},
    {"name", group_get_name, NULL, "The group's name.", NULL},
    {"left", group_get_left, NULL, "leave() was called (or the segment detached).", NULL},
    {NULL}};

static PyType_Slot group_slots[] = {
    {Py_tp_doc,
     "This process's membership of a trainer group (Segment.group(), or\n"
     "Segment.enlist() for a running group): barriers and in-place allreduce,\n"
     "reduce_scatter and allgather that survive a member's death (PeerDied, not\n"
     "a hang), and regroup() to go on without the dead and take newcomers in.\n"
     "`with` leaves at exit; detaching the segment leaves too."},
    {Py_tp_dealloc, group_dealloc},
    {Py_tp_repr, group_repr},
    {Py_tp_methods, group_methods},
    {Py_tp_getset, group_getset},
    {0, NULL}};

static PyType_Spec group_spec = {
    .name = "pdshm.Group",
    .basicsize = sizeof(pdshmpy_group),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = group_slots,
};

int pdshmpy_group_init(PyObject *module, pdshmpy_state *st) {
  st->group_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &group_spec, NULL);
  if (!st->group_type) return -1;
  return PyModule_AddType(module, st->group_type);
}

