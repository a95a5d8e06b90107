/*
 * half.h - 16-bit floats by hand: IEEE binary16 (f16) and bfloat16 (bf16)
 * to and from f32, rounding to nearest, ties to even; NaN stays NaN (quiet).
 * (_Float16 is missing from some compilers, and without F16C its
 * conversions are library calls anyway.)  Used by reduce.c and the tests.
 */
#ifndef PDSHM_HALF_H
#define PDSHM_HALF_H

/* Layer 6 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 6
#error "groups/half.h is layer 6, above the file that includes it (lib/LAYERS)"
#endif

#include <stdint.h>
#include <string.h>

static inline float pdshm__bf16_load(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t pdshm__bf16_store(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40); /* quiet NaN */
  u += 0x7fffu + (u >> 16 & 1); /* round to nearest even */
  return (uint16_t)(u >> 16);
}
static inline float pdshm__half_load(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = h >> 10 & 0x1fu, man = h & 0x3ffu, u;
  float f;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | man << 13; /* infinity, NaN */
  } else if (exp) {
    u = sign | (exp + 112) << 23 | man << 13;
  } else { /* zero or subnormal: man * 2^-24, exact in a float */
    f = (float)man * 0x1p-24f;
    memcpy(&u, &f, 4);
    u |= sign;
  }
  memcpy(&f, &u, 4);
  return f;
}
/* Round to nearest, ties to even. */
static inline uint16_t pdshm__half_store(float f) {
  uint32_t u, a;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
  a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;    /* NaN, quiet */
  if (a >= 0x477ff000u) return sign | 0x7c00u;   /* 65520 and up: infinity */
  uint32_t h, rem, half;
  if (a >= 0x38800000u) {                        /* a normal half */
    h = (a >> 13) - (112u << 10);
    rem = a & 0x1fffu;
    half = 0x1000u;
  } else {                                       /* subnormal: units of 2^-24 */
    uint32_t e = a >> 23, s = 126 - e, mant = (a & 0x7fffffu) | 0x800000u;
    if (s > 24) return sign;                     /* below 2^-25: zero */
    h = mant >> s;
    rem = mant & ((1u << s) - 1);
    half = 1u << (s - 1);
  }
  if (rem > half || (rem == half && (h & 1))) h++; /* a carry moves the exponent */
  return sign | (uint16_t)h;
}
#endif /* PDSHM_HALF_H */
