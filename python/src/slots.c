/*
 * slots.c - the SlotReducer type: the all-reduce, broadcast and all-gather
 * of a small tensor, each in one C call (pdshm.distributed's path for
 * tensors of at most a slot's bytes).
 *
 * Each member of a group has a variable of two slots (its halves); the
 * collective numbered seq uses slot seq % 2.  A slot is a header of HEAD_WORDS
 * int64 words (seq, what, dtype, element count; `what` names the collective
 * and its op or root) and the data.  A call copies the caller's tensor (a
 * broadcast: the root's only) and its header into its own slot, passes the
 * group's barrier (which spins a little before it sleeps, adapting to how
 * soon the members meet), checks every member's header (members that do not
 * agree on the collective raise, all of them, and change nothing), and reads
 * the slots it needs straight into the caller's tensors: an all-reduce folds
 * every member's data in rank order (the same bits at every member), a
 * broadcast copies the root's, an all-gather every member's.  One barrier is
 * enough: a member writes a slot again two collectives later, after the
 * barrier of the one in between, which every member reaches only once it
 * has read the slot.
 *
 * Invariants:
 *  1. The Pins of every member's slot variable are held: the bytes stay
 *     mapped and allocated while the reducer lives, also once a member erased
 *     its variable (it left).
 *  2. From the copy in to the end of the fold the GIL is released, but for
 *     the checks between barrier slices (3); the tensor's bytes are kept by
 *     the DLPack capsule the call holds, the slots by (1), the membership by
 *     pdshmpy_group_begin, the reducer by the call's reference.
 *  3. The barrier is waited for in slices of LEFT_SLICE_NS (a barrier that
 *     timed out was not passed: slicing changes nothing); between slices, a
 *     member whose slot variable is gone (it closed its process group or
 *     exited) is PeerDied, as a death is, and Ctrl-C interrupts the call.
 *  4. One call at a time: the membership is marked busy (group.c's invariant
 *     2), so a second thread's call raises instead of entering.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fold.h"
#include "pdshmpy.h"

#define HEAD_WORDS 4          /* seq, what, dtype, count                        */
#define HEAD_BYTES (HEAD_WORDS * 8)
#define LEFT_SLICE_NS 50000000LL /* 50 ms: invariant 3                         */

typedef struct {
  PyObject_HEAD
  PyObject *group;       /* strong: the pdshm.Group                              */
  PyObject *to_dlpack;   /* strong: torch's tensor -> DLPack capsule              */
  Py_ssize_t n;          /* members                                              */
  int rank;
  size_t cap;            /* data bytes of a slot                                 */
  uint64_t seq;          /* collectives so far                                   */
  pdshmpy_pin **pins;    /* [n], strong: each member's slot variable (1)          */
} slots_obj;

#define SL(o) ((slots_obj *)(o))

/* ---- the caller's tensor ------------------------------------------------------------------------ */

typedef struct {
  PyObject *capsule; /* keeps the bytes                                          */
  void *data;
  enum kind kind;
  size_t count;
} tensor_arg;

/* The fold's kind of a DLPack type: its pdshm dtype's (dtype.c's table), or
 * complex, which pdshm has no dtype of. */
static int kind_of(const pdshmpy_dl_dtype *dt, enum kind *out) {
  int k = pdshmpy_dtype_kind(pdshmpy_dtype_from_dl(*dt));
  if (k < 0 && dt->code == PDSHMPY_DL_COMPLEX)
    k = dt->bits == 64 ? K_C64 : dt->bits == 128 ? K_C128 : -1;
  if (k < 0) return -1;
  *out = (enum kind)k;
  return 0;
}

/* The tensor's bytes, through its DLPack capsule: a contiguous CPU tensor of
 * a dtype the fold knows, at most cap bytes.  0, or -1 with an exception. */
static int tensor_get(slots_obj *s, PyObject *t, tensor_arg *a) {
  pdshmpy_state *st = PDSHMPY_STATE(s);
  pdshmpy_dl_borrowed b;
  if (pdshmpy_dl_borrow(st, PyObject_CallOneArg(s->to_dlpack, t), &b) < 0) return -1;
  a->capsule = b.capsule;
  a->data = b.data;
  a->count = (size_t)b.count;
  if (kind_of(&b.dtype, &a->kind) < 0) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "no all-reduce for a tensor of DLPack dtype code %d, "
                      "%d bits", b.dtype.code, b.dtype.bits);
    goto fail;
  }
  if (b.count * pdshmpy_kind_sizes[a->kind] > s->cap) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "%llu bytes of tensor: a slot holds %zu",
                      (unsigned long long)(b.count * pdshmpy_kind_sizes[a->kind]), s->cap);
    goto fail;
  }
  return 0;
fail:
  Py_CLEAR(a->capsule);
  return -1;
}

/* ---- the round ------------------------------------------------------------------------------ */

static int64_t *slot_head(slots_obj *s, Py_ssize_t r, uint64_t seq) {
  size_t slot = HEAD_BYTES + s->cap;
  return (int64_t *)((char *)s->pins[r]->view.data + (seq & 1) * slot);
}

/* Invariant 3: a member (not this one) whose slot variable is gone, or -1. */
static int member_departed(slots_obj *s) {
  for (Py_ssize_t r = 0; r < s->n; r++) {
    if (r == s->rank) continue;
    pdshm_seg *seg = pdshmpy_seg_get(s->pins[r]->seg);
    if (!seg) {
      PyErr_Clear(); /* a closed Segment: the group's calls say so */
      continue;
    }
    if (!pdshm_varref_get(seg, s->pins[r]->var)) return (int)r;
  }
  return -1;
}

/* The collectives of a round, as its header's second word says: the kind
 * in the high half, its argument (the op, the root) in the low. */
enum coll { C_ALLREDUCE, C_BROADCAST, C_ALLGATHER };
#define WHAT(coll, arg) ((int64_t)(coll) << 32 | (uint32_t)(arg))

/* What the collective `what` on a is, for an error message. */
static void describe(char *buf, size_t len, int64_t what, const tensor_arg *a) {
  unsigned arg = (uint32_t)what;
  switch ((enum coll)(what >> 32)) {
    case C_ALLREDUCE:
      snprintf(buf, len, "all_reduce of %s[%zu] by %s", pdshmpy_kind_names[a->kind], a->count,
               pdshmpy_op_names[arg]);
      break;
    case C_BROADCAST:
      snprintf(buf, len, "broadcast of %s[%zu] from rank %u", pdshmpy_kind_names[a->kind], a->count, arg);
      break;
    default: snprintf(buf, len, "all_gather of %s[%zu]", pdshmpy_kind_names[a->kind], a->count); break;
  }
}

/* Every member's header agrees with this one's: 0, or -1 with an exception. */
static int heads_agree(slots_obj *s, uint64_t seq, const int64_t *mine, const tensor_arg *a) {
  for (Py_ssize_t r = 0; r < s->n; r++) {
    const int64_t *h = slot_head(s, r, seq);
    if (r != s->rank && memcmp(h, mine, HEAD_BYTES)) {
      char what[128];
      describe(what, sizeof what, mine[1], a);
      pdshmpy_raise_msg(PDSHMPY_STATE(s), PDSHM_EINVAL,
                        "rank %zd did not take part in the same collective (this rank: %s)", r,
                        what);
      return -1;
    }
  }
  return 0;
}

/* The barrier in slices (invariant 3), the first slice already waited for
 * (its result rc); the GIL held.  0, 1 with an exception raised, or the
 * barrier's error code. */
static int barrier_rest(slots_obj *s, pdshm_group *g, int rc, int64_t left) {
  for (;;) {
    if (rc != PDSHM_ETIMEDOUT) return rc;
    if (left >= 0 && left <= LEFT_SLICE_NS) return rc;
    if (left >= 0) left -= LEFT_SLICE_NS;
    if (PyErr_CheckSignals() < 0) return 1;
    int gone = member_departed(s);
    if (gone >= 0) {
      pdshmpy_raise_msg(PDSHMPY_STATE(s), PDSHM_EOWNERDEAD,
                        "rank %d left the process group (it exited or destroyed the group) "
                        "while this rank waited for it", gone);
      return 1;
    }
    int64_t slice = left < 0 || left > LEFT_SLICE_NS ? LEFT_SLICE_NS : left;
    PDSHMPY_NOGIL(rc = pdshm_group_barrier(g, slice));
  }
}

/* What a collective does once every member's slot is written: with the GIL
 * released, the slots of round seq read, the caller's tensors written. */
typedef void after_fn(slots_obj *s, uint64_t seq, const tensor_arg *a, void *ctx);

/* One collective `what` on a: a's bytes (when put) and the header into this
 * member's slot, the barrier, every header checked, then after().  Returns
 * None, or NULL with an exception (a death: PeerDied; the members' calls
 * differ: InvalidArgument at every member). */
static PyObject *slot_round(slots_obj *s, const tensor_arg *a, int64_t what, bool put,
                            int64_t left, after_fn *after, void *ctx) {
  pdshmpy_state *st = PDSHMPY_STATE(s);
  pdshmpy_seg *gseg;
  pdshm_group *g = pdshmpy_group_begin((PyObject *)s->group, &gseg);
  if (!g) return NULL;
  Py_INCREF(s); /* invariant 2 */
  uint64_t seq = s->seq++;
  int64_t head[HEAD_WORDS] = {(int64_t)seq, what, a->kind, (int64_t)a->count};
  int64_t *mine = slot_head(s, s->rank, seq);
  size_t nbytes = put ? a->count * pdshmpy_kind_sizes[a->kind] : 0;
  int64_t first = left < 0 || left > LEFT_SLICE_NS ? LEFT_SLICE_NS : left;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  memcpy(mine + HEAD_WORDS, a->data, nbytes);
  memcpy(mine, head, HEAD_BYTES);
  rc = pdshm_group_barrier(g, first);
  Py_END_ALLOW_THREADS
  rc = barrier_rest(s, g, rc, left);
  if (!rc && heads_agree(s, seq, mine, a) < 0) rc = 1;
  if (!rc) PDSHMPY_NOGIL(after(s, seq, a, ctx));
  pdshmpy_group_end(s->group);
  Py_DECREF(s);
  if (!rc) Py_RETURN_NONE;
  if (rc == 1) return NULL;
  char name[128];
  describe(name, sizeof name, what, a);
  if (rc == PDSHM_EOWNERDEAD)
    return pdshmpy_raise_msg(st, rc, "a member of the group died: the %s was abandoned", name);
  return pdshmpy_raise(st, rc, name);
}

/* The arguments (x, y, timeout=None) of every collective: x, y and the
 * timeout in ns (-1: none).  0, or -1 with an exception. */
static int parse_args(PyObject *const *argv, Py_ssize_t nargs, PyObject *kwnames,
                      const char *usage, pdshmpy_state *st, PyObject **x, PyObject **y,
                      int64_t *left) {
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  PyObject *timeout = nargs == 3 ? argv[2] : nkw ? argv[nargs] : Py_None;
  if (nargs > 3 || nargs < 2 || nkw > 1 || (nkw && nargs == 3) ||
      (nkw && !PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0))) ||
      (nkw && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "timeout"))) {
    PyErr_SetString(PyExc_TypeError, usage);
    return -1;
  }
  *x = argv[0];
  *y = argv[1];
  return pdshmpy_timeout_ns(st, timeout, left);
}

/* ---- all_reduce ----------------------------------------------------------------------------- */

static void reduce_after(slots_obj *s, uint64_t seq, const tensor_arg *a, void *ctx) {
  const void *parts[PDSHM_GROUP_MAX];
  for (Py_ssize_t r = 0; r < s->n; r++) parts[r] = slot_head(s, r, seq) + HEAD_WORDS;
  pdshmpy_fold(a->kind, a->data, parts, (int)s->n, a->count, *(enum op *)ctx);
}

/* allreduce(tensor, op, timeout=None): see the method's doc. */
static PyObject *slots_allreduce(PyObject *self, PyObject *const *argv, Py_ssize_t nargs,
                                 PyObject *kwnames) {
  slots_obj *s = SL(self);
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *tensor, *opname;
  int64_t left;
  if (parse_args(argv, nargs, kwnames, "allreduce takes (tensor, op, timeout=None)", st,
                 &tensor, &opname, &left) < 0)
    return NULL;
  const char *name = pdshmpy_utf8(opname, "op");
  if (!name) return NULL;
  enum op op = OP_COUNT;
  for (int i = 0; i < OP_COUNT; i++)
    if (!strcmp(name, pdshmpy_op_names[i])) op = (enum op)i;
  if (op == OP_COUNT)
    return pdshmpy_raise_msg(st, PDSHM_EINVAL, "op must be one of sum, mean, product, min, max, "
                             "band, bor, bxor, not %R", opname);
  tensor_arg a;
  if (tensor_get(s, tensor, &a) < 0) return NULL;
  PyObject *res;
  if (!pdshmpy_fold_defined(a.kind, op))
    res = pdshmpy_raise_msg(st, PDSHM_EINVAL, "no %s of %s", pdshmpy_op_names[op], pdshmpy_kind_names[a.kind]);
  else
    res = slot_round(s, &a, WHAT(C_ALLREDUCE, op), true, left, reduce_after, &op);
  Py_DECREF(a.capsule);
  return res;
}

/* ---- broadcast ------------------------------------------------------------------------------ */

static void broadcast_after(slots_obj *s, uint64_t seq, const tensor_arg *a, void *ctx) {
  int root = *(int *)ctx;
  if (root != s->rank)
    memcpy(a->data, slot_head(s, root, seq) + HEAD_WORDS, a->count * pdshmpy_kind_sizes[a->kind]);
}

/* broadcast(tensor, root, timeout=None): see the method's doc. */
static PyObject *slots_broadcast(PyObject *self, PyObject *const *argv, Py_ssize_t nargs,
                                 PyObject *kwnames) {
  slots_obj *s = SL(self);
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *tensor, *rootobj;
  int64_t left;
  if (parse_args(argv, nargs, kwnames, "broadcast takes (tensor, root, timeout=None)", st,
                 &tensor, &rootobj, &left) < 0)
    return NULL;
  long root = PyLong_AsLong(rootobj);
  if (root == -1 && PyErr_Occurred()) return NULL;
  if (root < 0 || root >= s->n)
    return pdshmpy_raise_msg(st, PDSHM_EINVAL, "root %ld is not a rank of a group of %zd", root,
                             s->n);
  tensor_arg a;
  if (tensor_get(s, tensor, &a) < 0) return NULL;
  int r = (int)root;
  PyObject *res = slot_round(s, &a, WHAT(C_BROADCAST, r), r == s->rank, left, broadcast_after, &r);
  Py_DECREF(a.capsule);
  return res;
}

/* ---- all_gather ----------------------------------------------------------------------------- */

static void gather_after(slots_obj *s, uint64_t seq, const tensor_arg *a, void *ctx) {
  const tensor_arg *outs = ctx;
  for (Py_ssize_t r = 0; r < s->n; r++)
    memcpy(outs[r].data, slot_head(s, r, seq) + HEAD_WORDS, a->count * pdshmpy_kind_sizes[a->kind]);
}

/* allgather(tensor, outputs, timeout=None): see the method's doc. */
static PyObject *slots_allgather(PyObject *self, PyObject *const *argv, Py_ssize_t nargs,
                                 PyObject *kwnames) {
  slots_obj *s = SL(self);
  pdshmpy_state *st = PDSHMPY_STATE(self);
  PyObject *tensor, *outputs;
  int64_t left;
  if (parse_args(argv, nargs, kwnames, "allgather takes (tensor, outputs, timeout=None)", st,
                 &tensor, &outputs, &left) < 0)
    return NULL;
  PyObject *list = PySequence_Fast(outputs, "outputs must be a sequence of tensors");
  if (!list) return NULL;
  PyObject *res = NULL;
  tensor_arg a = {0}, outs[PDSHM_GROUP_MAX] = {{0}};
  Py_ssize_t got = 0;
  if (PySequence_Fast_GET_SIZE(list) != s->n) {
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "%zd outputs for a group of %zd",
                      PySequence_Fast_GET_SIZE(list), s->n);
    goto done;
  }
  if (tensor_get(s, tensor, &a) < 0) goto done;
  for (; got < s->n; got++) {
    if (tensor_get(s, PySequence_Fast_GET_ITEM(list, got), &outs[got]) < 0) goto done;
    if (outs[got].kind != a.kind || outs[got].count != a.count) {
      pdshmpy_raise_msg(st, PDSHM_EINVAL, "outputs[%zd] is %s[%zu], the tensor %s[%zu]", got,
                        pdshmpy_kind_names[outs[got].kind], outs[got].count, pdshmpy_kind_names[a.kind],
                        a.count);
      got++;
      goto done;
    }
  }
  res = slot_round(s, &a, WHAT(C_ALLGATHER, 0), true, left, gather_after, outs);
done:
  for (Py_ssize_t r = 0; r < got; r++) Py_DECREF(outs[r].capsule);
  Py_XDECREF(a.capsule);
  Py_DECREF(list);
  return res;
}

/* ---- the type ------------------------------------------------------------------------------- */

static void slots_clear_pins(slots_obj *s) {
  if (!s->pins) return;
  for (Py_ssize_t r = 0; r < s->n; r++) Py_XDECREF(s->pins[r]);
  PyMem_Free(s->pins);
  s->pins = NULL;
}

/* SlotReducer(group, slots, slot_bytes) */
static PyObject *slots_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"group", "slots", "slot_bytes", NULL};
  pdshmpy_state *st = pdshmpy_state_of_type(tp);
  PyObject *group, *seq;
  Py_ssize_t cap;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OOn:SlotReducer", kwlist, &group, &seq, &cap))
    return NULL;
  pdshmpy_seg *gseg;
  pdshm_group *g = pdshmpy_group_begin(group, &gseg);
  if (!g) return NULL;
  int rank = pdshm_group_rank(g), size = pdshm_group_size(g);
  pdshmpy_group_end(group);
  if (cap <= 0 || cap % HEAD_BYTES)
    return pdshmpy_raise_msg(st, PDSHM_EINVAL, "slot_bytes must be a positive multiple of %d, "
                             "not %zd", HEAD_BYTES, cap);
  PyObject *list = PySequence_Fast(seq, "slots must be a sequence of Var");
  if (!list) return NULL;
  if (PySequence_Fast_GET_SIZE(list) != size) {
    Py_DECREF(list);
    return pdshmpy_raise_msg(st, PDSHM_EINVAL, "%zd slot variables for a group of %d",
                             PySequence_Fast_GET_SIZE(list), size);
  }
  slots_obj *s = (slots_obj *)tp->tp_alloc(tp, 0);
  if (!s) {
    Py_DECREF(list);
    return NULL;
  }
  s->n = size;
  s->rank = rank;
  s->cap = (size_t)cap;
  s->group = Py_NewRef(group);
  s->pins = PyMem_Calloc((size_t)size, sizeof *s->pins);
  if (!s->pins) {
    PyErr_NoMemory();
    goto fail;
  }
  for (Py_ssize_t r = 0; r < size; r++) {
    PyObject *v = PySequence_Fast_GET_ITEM(list, r);
    if (!PyObject_TypeCheck(v, st->var_type)) {
      PyErr_Format(PyExc_TypeError, "slots[%zd] is a %.100s, not a pdshm.Var", r,
                   Py_TYPE(v)->tp_name);
      goto fail;
    }
    if (!(s->pins[r] = pdshmpy_pin_new((pdshmpy_var *)v))) goto fail;
    if (s->pins[r]->view.nbytes < 2 * (HEAD_BYTES + s->cap)) {
      pdshmpy_raise_msg(st, PDSHM_EINVAL, "slots[%zd] holds %zu bytes, not the %zu of two "
                        "slots", r, (size_t)s->pins[r]->view.nbytes, 2 * (HEAD_BYTES + s->cap));
      goto fail;
    }
  }
  PyObject *dlmod = PyImport_ImportModule("torch.utils.dlpack");
  if (!dlmod) goto fail;
  s->to_dlpack = PyObject_GetAttrString(dlmod, "to_dlpack");
  Py_DECREF(dlmod);
  if (!s->to_dlpack) goto fail;
  Py_DECREF(list);
  return (PyObject *)s;
fail:
  Py_DECREF(list);
  Py_DECREF(s);
  return NULL;
}

static void slots_dealloc(PyObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  slots_clear_pins(SL(self));
  Py_CLEAR(SL(self)->group);
  Py_CLEAR(SL(self)->to_dlpack);
  tp->tp_free(self);
  Py_DECREF(tp);
}

static PyObject *slots_get_seq(PyObject *self, void *closure) {
  return PyLong_FromUnsignedLongLong(SL(self)->seq);
}

static PyMethodDef slots_methods[] = {
    {"allreduce", (PyCFunction)(void (*)(void))slots_allreduce, METH_FASTCALL | METH_KEYWORDS,
     "allreduce(tensor, op, timeout=None)\n\nEvery member passes a contiguous CPU torch tensor "
     "of at most slot_bytes,\nof the same dtype and element count, and the same op (\"sum\", "
     "\"mean\",\n\"product\", \"min\", \"max\"; integers also \"band\", \"bor\", \"bxor\"); "
     "on return each\ntensor holds the op over every member's, folded in rank order (the "
     "same\nbits everywhere; float16 and bfloat16 in float32, rounded once; integer\nsums "
     "wrap, the integer mean truncates).  Dtypes: int8/16/32/64, uint8,\nfloat16, bfloat16, "
     "float32, float64, complex64, complex128 (a bool tensor\ngoes as uint8 with bor, band "
     "or bxor).  One barrier of the group,\nwaited for with the GIL released; timeout in "
     "seconds or None.  Raises\nPeerDied when a member died or left, TimeoutError after "
     "timeout (the\ntensor unchanged), InvalidArgument when the members' calls differ "
     "(every\nmember raises, no tensor changed) or for a bad argument (no round)."},
    {"broadcast", (PyCFunction)(void (*)(void))slots_broadcast, METH_FASTCALL | METH_KEYWORDS,
     "broadcast(tensor, root, timeout=None)\n\nEvery member passes a contiguous CPU torch "
     "tensor of at most slot_bytes,\nof the same dtype and element count, and the same root "
     "rank; on return\neach tensor holds the root's bytes.  One barrier, errors as for\n"
     "allreduce."},
    {"allgather", (PyCFunction)(void (*)(void))slots_allgather, METH_FASTCALL | METH_KEYWORDS,
     "allgather(tensor, outputs, timeout=None)\n\nEvery member passes a contiguous CPU torch "
     "tensor of at most slot_bytes,\nof the same dtype and element count, and a sequence of "
     "one contiguous\ntensor per member, each of that dtype and count; on return outputs[r]\n"
     "holds member r's tensor, at every member.  One barrier, errors as for\nallreduce (the "
     "outputs unchanged when it raises)."},
    {NULL}};

static PyGetSetDef slots_getset[] = {
    {"seq", slots_get_seq, NULL, "The collectives this reducer ran (each a round).", NULL},
    {NULL}};

static PyType_Slot slots_slots[] = {
    {Py_tp_doc,
     "SlotReducer(group, slots, slot_bytes)\n\n"
     "The all-reduce, broadcast and all-gather of tensors of at most slot_bytes\n"
     "(a positive multiple of 32), each in one call: group is this member's pdshm.Group, slots every member's\n"
     "slot variable in rank order (each at least 2 * (32 + slot_bytes) bytes,\n"
     "made and sized by its member before the group's first barrier); pinned\n"
     "for the reducer's life.  Every member makes one at the same point of\n"
     "its group's rounds."},
    {Py_tp_new, slots_new},
    {Py_tp_dealloc, slots_dealloc},
    {Py_tp_methods, slots_methods},
    {Py_tp_getset, slots_getset},
    {0, NULL}};

static PyType_Spec slots_spec = {
    .name = "pdshm.SlotReducer",
    .basicsize = sizeof(slots_obj),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = slots_slots,
};

int pdshmpy_slots_init(PyObject *module, pdshmpy_state *st) {
  st->slots_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &slots_spec, NULL);
  if (!st->slots_type) return -1;
  return PyModule_AddType(module, st->slots_type);
}
