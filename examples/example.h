/* example.h - what the example programs share. */
#ifndef PDSHM_EXAMPLE_H
#define PDSHM_EXAMPLE_H

#include <stdio.h>
#include <stdlib.h>

#include "pdshm.h"

/* Runs a pdshm call; on failure says which, why, and exits. */
#define CHECK(call)                                                                  \
  do {                                                                               \
    int rc_ = (call);                                                                \
    if (rc_) {                                                                       \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,             \
              pdshm_strerror(rc_), pdshm_last_error());                              \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

#endif
