/* synth.h - fit_a_line's data: deterministic synthetic rows of 13 features
 * with a known linear truth plus gaussian noise (the same rows in every
 * process that makes them, so that every host of an MPI job can make its
 * own copy). */
#ifndef PDSHM_SYNTH_H
#define PDSHM_SYNTH_H

#include <math.h>
#include <stdint.h>

#define FEATURES 13
#define ROWS 4096
#define NOISE 0.1f
#define TRUE_BIAS 0.5f

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static inline float uniform01(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0));
}

static inline float gaussian(void) {
  float u = uniform01() + 1e-12f, v = uniform01();
  return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static inline float true_weight(int j) {
  return (float)(j % 5) - 2.0f + 0.25f * (float)j / FEATURES;
}

/* ROWS rows into x (ROWS x FEATURES) and y (ROWS). */
static inline void synth_rows(float *x, float *y) {
  for (int i = 0; i < ROWS; i++) {
    float t = TRUE_BIAS + NOISE * gaussian();
    for (int j = 0; j < FEATURES; j++) {
      x[i * FEATURES + j] = gaussian();
      t += true_weight(j) * x[i * FEATURES + j];
    }
    y[i] = t;
  }
}

#endif
