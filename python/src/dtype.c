/*
 * dtype.c - pdshm_dtype and its Python spellings: numpy-style names, buffer
 * formats, array-interface typestrs, DLPack types, the SlotReducer's fold
 * kinds (fold.h); parsing dtypes and shapes.  One table holds them all, a
 * row per dtype; the other files ask for them through the functions here.
 *
 * bfloat16 has no buffer format and no numpy dtype: it is exported as its raw
 * bits, 'H' (uint16) to the buffer protocol and '<u2' to numpy; DLPack
 * carries it as kDLBfloat, so torch sees torch.bfloat16.  bool goes to
 * DLPack as kDLUInt 8 bits (DLPack 0.6 and torch 1.13 have no bool), so a
 * kDLUInt 8 tensor comes back as uint8 and only kDLBool 8 as bool; the fold
 * has no bool.
 */
#include "fold.h"
#include "pdshmpy.h"

typedef struct {
  const char *name;    /* numpy's (and torch's, after "torch.")          */
  const char *format;  /* the buffer protocol's (the struct module's)    */
  const char *typestr; /* __array_interface__'s                          */
  pdshmpy_dl_dtype dl; /* DLPack's: code, bits, lanes                    */
  int kind;            /* the fold's enum kind, or -1: the fold takes none */
} dtype_row;

/* Indexed by pdshm_dtype. */
static const dtype_row dtype_rows[] = {
    [PDSHM_BOOL] = {"bool",     "?", "|b1", {PDSHMPY_DL_UINT,   8,  1}, -1},
    [PDSHM_U8]   = {"uint8",    "B", "|u1", {PDSHMPY_DL_UINT,   8,  1}, K_U8},
    [PDSHM_I8]   = {"int8",     "b", "|i1", {PDSHMPY_DL_INT,    8,  1}, K_I8},
    [PDSHM_I16]  = {"int16",    "h", "<i2", {PDSHMPY_DL_INT,    16, 1}, K_I16},
    [PDSHM_I32]  = {"int32",    "i", "<i4", {PDSHMPY_DL_INT,    32, 1}, K_I32},
    [PDSHM_I64]  = {"int64",    "q", "<i8", {PDSHMPY_DL_INT,    64, 1}, K_I64},
    [PDSHM_F16]  = {"float16",  "e", "<f2", {PDSHMPY_DL_FLOAT,  16, 1}, K_F16},
    [PDSHM_BF16] = {"bfloat16", "H", "<u2", {PDSHMPY_DL_BFLOAT, 16, 1}, K_BF16},
    [PDSHM_F32]  = {"float32",  "f", "<f4", {PDSHMPY_DL_FLOAT,  32, 1}, K_F32},
    [PDSHM_F64]  = {"float64",  "d", "<f8", {PDSHMPY_DL_FLOAT,  64, 1}, K_F64},
};
#define NDTYPES ((int)(sizeof dtype_rows / sizeof dtype_rows[0]))

const char *pdshmpy_dtype_name(int dt) {
  return dt >= 0 && dt < NDTYPES ? dtype_rows[dt].name : NULL;
}

const char *pdshmpy_dtype_format(int dt) {
  return dt >= 0 && dt < NDTYPES ? dtype_rows[dt].format : NULL;
}

const char *pdshmpy_dtype_typestr(int dt) {
  return dt >= 0 && dt < NDTYPES ? dtype_rows[dt].typestr : NULL;
}

pdshmpy_dl_dtype pdshmpy_dtype_dl(int dt) {
  return dt >= 0 && dt < NDTYPES ? dtype_rows[dt].dl : (pdshmpy_dl_dtype){0, 0, 0};
}

int pdshmpy_dtype_kind(int dt) { return dt >= 0 && dt < NDTYPES ? dtype_rows[dt].kind : -1; }

static int dtype_by_name(const char *s) {
  if (!strncmp(s, "torch.", 6)) s += 6;
  for (int i = 0; i < NDTYPES; i++)
    if (!strcmp(s, dtype_rows[i].name)) return i;
  return -1;
}

int pdshmpy_dtype_from_format(const char *fmt, Py_ssize_t itemsize) {
  if (!fmt) return PDSHM_U8;
  if (*fmt == '@' || *fmt == '=' || *fmt == '<' || (*fmt == '|' && fmt[1])) fmt++;
  if (!fmt[0] || fmt[1]) return -1;
  switch (*fmt) {
  case '?': return itemsize == 1 ? PDSHM_BOOL : -1;
  case 'B': return itemsize == 1 ? PDSHM_U8 : -1;
  case 'b': return itemsize == 1 ? PDSHM_I8 : -1;
  case 'h': case 'i': case 'l': case 'q': case 'n':
    return itemsize == 2 ? PDSHM_I16 : itemsize == 4 ? PDSHM_I32 : itemsize == 8 ? PDSHM_I64 : -1;
  case 'e': return itemsize == 2 ? PDSHM_F16 : -1;
  case 'f': return itemsize == 4 ? PDSHM_F32 : -1;
  case 'd': return itemsize == 8 ? PDSHM_F64 : -1;
  default: return -1;
  }
}

int pdshmpy_dtype_from_dl(pdshmpy_dl_dtype dt) {
  if (dt.code == PDSHMPY_DL_BOOL) return dt.bits == 8 && dt.lanes == 1 ? PDSHM_BOOL : -1;
  for (int i = 0; i < NDTYPES; i++) /* bool's kDLUInt 8 is uint8's */
    if (i != PDSHM_BOOL && dt.code == dtype_rows[i].dl.code && dt.bits == dtype_rows[i].dl.bits &&
        dt.lanes == dtype_rows[i].dl.lanes)
      return i;
  return -1;
}

/* The name of o as a dtype: a str as is, "torch.x" for a torch dtype, else
 * numpy.dtype(o).name (numpy dtypes and scalar types, Python types), NULL
 * with TypeError for what is none (None too, which numpy reads as float64)
 * and ValueError for a numpy dtype in the other byte order (its name is the
 * native one's). */
static PyObject *dtype_name_of(pdshmpy_state *st, PyObject *o) {
  if (PyUnicode_Check(o)) return Py_NewRef(o);
  if (o == Py_None) {
    PyErr_SetString(PyExc_TypeError, "not a dtype: None");
    return NULL;
  }
  PyObject *mod = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__module__");
  int is_torch = mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "torch") == 0;
  Py_XDECREF(mod);
  PyErr_Clear();
  if (is_torch) return PyObject_Str(o);
  PyObject *np = PyImport_ImportModule("numpy");
  if (!np) return NULL;
  PyObject *d = PyObject_CallMethod(np, "dtype", "O", o);
  Py_DECREF(np);
  if (!d) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "not a dtype: %R", o);
    return NULL;
  }
  PyObject *native = PyObject_GetAttrString(d, "isnative");
  int is_native = native ? PyObject_IsTrue(native) : -1;
  Py_XDECREF(native);
  PyObject *name = is_native > 0 ? PyObject_GetAttrString(d, "name") : NULL;
  if (is_native == 0)
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "dtype %R is not in this machine's byte order", d);
  Py_DECREF(d);
  return name;
}

int pdshmpy_dtype_parse(pdshmpy_state *st, PyObject *o, pdshm_dtype *out) {
  PyObject *name = dtype_name_of(st, o);
  if (!name) return -1;
  const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
  int dt = s ? dtype_by_name(s) : -1;
  if (dt < 0 && !PyErr_Occurred())
    pdshmpy_raise_msg(st, PDSHM_EINVAL,
                      "unsupported dtype %R (bool, uint8, int8, int16, int32, int64, float16, "
                      "bfloat16, float32, float64)",
                      o);
  Py_DECREF(name);
  if (dt < 0) return -1;
  *out = (pdshm_dtype)dt;
  return 0;
}

int pdshmpy_shape_parse(pdshmpy_state *st, PyObject *o, int *ndim, int64_t *dims) {
  if (PyLong_Check(o)) {
    *ndim = 1;
    dims[0] = PyLong_AsLongLong(o);
    if (dims[0] == -1 && PyErr_Occurred()) return -1;
    if (dims[0] < 0) goto negative;
    return 0;
  }
  PyObject *seq = PySequence_Fast(o, "shape must be an int or a sequence of ints");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > PDSHM_NDIM_MAX) {
    Py_DECREF(seq);
    pdshmpy_raise_msg(st, PDSHM_EINVAL, "shape has %zd dimensions, at most %d", n,
                      PDSHM_NDIM_MAX);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *d = PyNumber_Index(PySequence_Fast_GET_ITEM(seq, i));
    dims[i] = d ? PyLong_AsLongLong(d) : -1;
    Py_XDECREF(d);
    if (dims[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
    if (dims[i] < 0) {
      Py_DECREF(seq);
      goto negative;
    }
  }
  Py_DECREF(seq);
  *ndim = (int)n;
  return 0;
negative:
  pdshmpy_raise_msg(st, PDSHM_EINVAL, "a dimension is negative");
  return -1;
}
