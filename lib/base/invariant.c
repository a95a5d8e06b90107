/*
 * invariant.c - a failed PDSHM_ASSERT (invariant.h): the library's own bug,
 * said where, and the process stopped, as a failed assert does.
 */
#define PDSHM_LAYER 1 /* base/ (lib/LAYERS) */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"

void pdshm__assert_fail(const char *cond, const char *file, int line, const char *func) {
  fprintf(stderr, "pdshm: %s:%d: %s: invariant failed: %s\n", file, line, func, cond);
  fflush(stderr);
  abort();
}
