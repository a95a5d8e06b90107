/*
 * clock.c - the one way the library reads a clock.
 */
#include "config.h"

#include <time.h>

#include "internal.h"

uint64_t pdshm__now_ns(int clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
