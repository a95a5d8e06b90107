/*
 * fold.c - the element-wise folds of the SlotReducer (slots.c): out := p[0]
 * op p[1] op ... op p[n-1], in that order, for every kind and op it takes.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fold.h"

#define CHUNK 256 /* float16 and bfloat16 are folded in float32 by chunks */

#if !defined(__FLT16_MAX__)
#error "the float16 fold needs the compiler's _Float16"
#endif

const char *const pdshmpy_op_names[OP_COUNT] = {"sum", "mean", "product", "min",
                                                "max", "band", "bor",  "bxor"};
const char *const pdshmpy_kind_names[K_COUNT] = {"int8",    "int16",   "int32",   "int64",
                                                 "uint8",   "float16", "bfloat16", "float32",
                                                 "float64", "complex64", "complex128"};
const unsigned pdshmpy_kind_sizes[K_COUNT] = {1, 2, 4, 8, 1, 2, 2, 4, 8, 8, 16};

/* out = p[0] op p[1] op ... op p[n-1] (element-wise, in that order), for the
 * element expression EXPR of x (the running value) and y (the next part).
 * By blocks of FOLD_BLOCK elements, which the compiler vectorizes at -O2
 * (the parts are the slots, never the caller's tensor: no aliasing). */
#define FOLD_BLOCK 16
#define FOLD_LOOP(T, EXPR)                                                        \
  do {                                                                            \
    const T *a_ = (const T *)p[0];                                                \
    T *o_ = (T *)out;                                                             \
    for (int k_ = 1; k_ < n; k_++, a_ = o_) {                                     \
      const T *b_ = (const T *)p[k_];                                             \
      size_t i_ = 0;                                                              \
      for (; i_ + FOLD_BLOCK <= count; i_ += FOLD_BLOCK) {                        \
        _Pragma("GCC ivdep") for (size_t j_ = i_; j_ < i_ + FOLD_BLOCK; j_++) {   \
          T x = a_[j_], y = b_[j_];                                               \
          o_[j_] = (EXPR);                                                        \
        }                                                                         \
      }                                                                           \
      for (; i_ < count; i_++) {                                                  \
        T x = a_[i_], y = b_[i_];                                                 \
        o_[i_] = (EXPR);                                                          \
      }                                                                           \
    }                                                                             \
  } while (0)

/* Integers: sums and products wrap around in the dtype (computed unsigned);
 * the mean divides the wrapped sum, truncating towards zero. */
#define FOLD_INT(NAME, T, U)                                                             \
  static void NAME(void *out, const void *const *p, int n, size_t count, enum op op) {   \
    switch (op) {                                                                        \
      case OP_SUM:                                                                       \
      case OP_MEAN: FOLD_LOOP(T, (T)((U)x + (U)y)); break;                               \
      case OP_PRODUCT: FOLD_LOOP(T, (T)((U)x * (U)y)); break;                            \
      case OP_MIN: FOLD_LOOP(T, y < x ? y : x); break;                                   \
      case OP_MAX: FOLD_LOOP(T, y > x ? y : x); break;                                   \
      case OP_BAND: FOLD_LOOP(T, (T)(x & y)); break;                                     \
      case OP_BOR: FOLD_LOOP(T, (T)(x | y)); break;                                      \
      default: FOLD_LOOP(T, (T)(x ^ y)); break;                                          \
    }                                                                                    \
    if (op == OP_MEAN)                                                                   \
      for (size_t i = 0; i < count; i++) ((T *)out)[i] = (T)(((T *)out)[i] / n);         \
  }
FOLD_INT(fold_i8, int8_t, uint8_t)
FOLD_INT(fold_i16, int16_t, uint16_t)
FOLD_INT(fold_i32, int32_t, uint32_t)
FOLD_INT(fold_i64, int64_t, uint64_t)
FOLD_INT(fold_u8, uint8_t, uint8_t)

/* Floating point: min and max propagate NaN (as torch.minimum and maximum). */
#define FMIN(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (y) < (x) ? (y) : (x))
#define FMAX(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (y) > (x) ? (y) : (x))
#define FOLD_FLOAT(NAME, T)                                                              \
  static void NAME(void *out, const void *const *p, int n, size_t count, enum op op) {   \
    switch (op) {                                                                        \
      case OP_SUM:                                                                       \
      case OP_MEAN: FOLD_LOOP(T, x + y); break;                                          \
      case OP_PRODUCT: FOLD_LOOP(T, x * y); break;                                       \
      case OP_MIN: FOLD_LOOP(T, FMIN(x, y)); break;                                      \
      default: FOLD_LOOP(T, FMAX(x, y)); break;                                          \
    }                                                                                    \
    if (op == OP_MEAN)                                                                   \
      for (size_t i = 0; i < count; i++) ((T *)out)[i] /= (T)n;                          \
  }
FOLD_FLOAT(fold_f32, float)
FOLD_FLOAT(fold_f64, double)

/* Complex: sum, mean and product, the product as (ac - bd, ad + bc). */
#define FOLD_COMPLEX(NAME, T)                                                            \
  static void NAME(void *out, const void *const *p, int n, size_t count, enum op op) {   \
    T *o = out;                                                                          \
    const T *a = p[0];                                                                   \
    for (int k = 1; k < n; k++, a = o) {                                                 \
      const T *b = p[k];                                                                 \
      for (size_t i = 0; i < 2 * count; i += 2) {                                        \
        T xr = a[i], xi = a[i + 1], yr = b[i], yi = b[i + 1];                            \
        if (op == OP_PRODUCT) {                                                          \
          o[i] = xr * yr - xi * yi;                                                      \
          o[i + 1] = xr * yi + xi * yr;                                                  \
        } else {                                                                         \
          o[i] = xr + yr;                                                                \
          o[i + 1] = xi + yi;                                                            \
        }                                                                                \
      }                                                                                  \
    }                                                                                    \
    if (op == OP_MEAN)                                                                   \
      for (size_t i = 0; i < 2 * count; i++) o[i] /= (T)n;                               \
  }
FOLD_COMPLEX(fold_c64, float)
FOLD_COMPLEX(fold_c128, double)

static float half_load(const void *p, size_t i, int bf) {
  uint16_t h;
  memcpy(&h, (const char *)p + 2 * i, 2);
  if (bf) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  _Float16 x;
  memcpy(&x, &h, 2);
  return (float)x;
}

/* Rounded to the nearest, ties to even (NaN stays a quiet NaN), as torch rounds. */
static void half_store(void *p, size_t i, float f, int bf) {
  uint16_t h;
  if (bf) {
    uint32_t u;
    memcpy(&u, &f, 4);
    h = isnan(f) ? 0x7fc0 : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  } else {
    _Float16 x = (_Float16)f;
    memcpy(&h, &x, 2);
  }
  memcpy((char *)p + 2 * i, &h, 2);
}

/* float16 and bfloat16: folded in float32, the mean divided there, rounded once. */
static void fold_half(void *out, const void *const *p, int n, size_t count, enum op op, int bf) {
  float acc[CHUNK];
  for (size_t lo = 0; lo < count; lo += CHUNK) {
    size_t m = count - lo < CHUNK ? count - lo : CHUNK;
    for (size_t i = 0; i < m; i++) acc[i] = half_load(p[0], lo + i, bf);
    for (int k = 1; k < n; k++)
      for (size_t i = 0; i < m; i++) {
        float x = acc[i], y = half_load(p[k], lo + i, bf);
        acc[i] = op == OP_PRODUCT ? x * y
                 : op == OP_MIN   ? FMIN(x, y)
                 : op == OP_MAX   ? FMAX(x, y)
                                  : x + y;
      }
    for (size_t i = 0; i < m; i++)
      half_store(out, lo + i, op == OP_MEAN ? acc[i] / (float)n : acc[i], bf);
  }
}

void pdshmpy_fold(enum kind kind, void *out, const void *const *p, int n, size_t count,
                  enum op op) {
  if (n == 1) {
    memcpy(out, p[0], count * pdshmpy_kind_sizes[kind]);
    return;
  }
  switch (kind) {
    case K_I8: fold_i8(out, p, n, count, op); break;
    case K_I16: fold_i16(out, p, n, count, op); break;
    case K_I32: fold_i32(out, p, n, count, op); break;
    case K_I64: fold_i64(out, p, n, count, op); break;
    case K_U8: fold_u8(out, p, n, count, op); break;
    case K_F16: fold_half(out, p, n, count, op, 0); break;
    case K_BF16: fold_half(out, p, n, count, op, 1); break;
    case K_F32: fold_f32(out, p, n, count, op); break;
    case K_F64: fold_f64(out, p, n, count, op); break;
    case K_C64: fold_c64(out, p, n, count, op); break;
    default: fold_c128(out, p, n, count, op); break;
  }
}

int pdshmpy_fold_defined(enum kind kind, enum op op) {
  if (kind <= K_U8) return 1;
  if (kind >= K_C64) return op == OP_SUM || op == OP_MEAN || op == OP_PRODUCT;
  return op <= OP_MAX;
}
