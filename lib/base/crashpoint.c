/*
 * crashpoint.c - the counting side of PDSHM_CRASHPOINT (crashpoint.h).  Only
 * the crash tests' copy of the library contains this file.
 */
#define PDSHM_LAYER 1 /* base/ (lib/LAYERS) */
#include "config.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/crashpoint.h"

#define CRASH_RECORD 8192 /* hits whose point is remembered */

static _Atomic uint64_t crash_hits;   /* since the last arm                 */
static _Atomic uint64_t crash_named;  /* hits of crash_point since the arm  */
static uint64_t crash_at;             /* die at this hit; 0: never          */
static int crash_signal = SIGKILL;    /* what the hit raises                */
static const char *crash_point;       /* only count hits of this point      */
static const char *crash_seen[CRASH_RECORD]; /* the point of each hit    */
static char crash_env_point[128];

void pdshm__crash_arm(uint64_t k, const char *name) { pdshm__crash_arm_signal(k, name, SIGKILL); }

void pdshm__crash_arm_signal(uint64_t k, const char *name, int sig) {
  crash_at = 0;
  crash_point = name;
  crash_signal = sig;
  atomic_store(&crash_hits, 0);
  atomic_store(&crash_named, 0);
  crash_at = k;
}

uint64_t pdshm__crash_hits(void) { return atomic_load(&crash_hits); }

const char *pdshm__crash_name(uint64_t i) {
  return i >= 1 && i <= CRASH_RECORD && i <= atomic_load(&crash_hits) ? crash_seen[i - 1] : NULL;
}

void pdshm__crashpoint(const char *name) {
  uint64_t n = atomic_fetch_add(&crash_hits, 1) + 1;
  if (n <= CRASH_RECORD) crash_seen[n - 1] = name;
  if (crash_point) {
    if (strcmp(name, crash_point)) return;
    n = atomic_fetch_add(&crash_named, 1) + 1;
  }
  if (crash_at && n == crash_at) raise(crash_signal);
}

/* PDSHM_CRASH="K" or "NAME:N", read once at load. */
__attribute__((constructor)) static void crash_from_env(void) {
  const char *e = getenv("PDSHM_CRASH");
  if (!e || !*e) return;
  const char *colon = strrchr(e, ':');
  if (!colon) {
    pdshm__crash_arm(strtoull(e, NULL, 10), NULL);
    return;
  }
  size_t n = (size_t)(colon - e) < sizeof crash_env_point - 1 ? (size_t)(colon - e)
                                                              : sizeof crash_env_point - 1;
  memcpy(crash_env_point, e, n);
  crash_env_point[n] = '\0';
  pdshm__crash_arm(strtoull(colon + 1, NULL, 10), crash_env_point);
}
