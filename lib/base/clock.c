/*
 * clock.c - the one way the library reads a clock.
 */
#define PDSHM_LAYER 1 /* base/ (lib/LAYERS) */
#include "config.h"

#include <time.h>

#include "base/base.h"

uint64_t pdshm__now_ns(int clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
