/*
 * lane.c - which lane of our slot a thread mutates through.
 *
 * A slot has PDSHM_LANES lanes so that threads of one process build and
 * journal in parallel; a thread takes a lane by a compare-and-swap of its
 * process-local busy flag (lane.h) and holds it for one whole operation.  A thread keeps returning to the lane it last used
 * (its cache stays warm) and moves on when that lane is busy.  The try of
 * that lane is inline (lane.h); here is the rest.
 */
#define PDSHM_LAYER 1 /* attach/ (lib/LAYERS) */
#include "config.h"

#include <sched.h>

#include "attach/attach.h"

static _Atomic unsigned lane_next;        /* spreads new threads over lanes */
PDSHM_TLS_HOT unsigned pdshm__lane_hint = ~0u; /* lane.h */

/* Lanes are held for one operation (microseconds), so a thread that finds
 * them all busy spins, then yields. */
struct pdshm_lane_ctx *pdshm__lane_get_slow(pdshm_seg *seg) {
  if (pdshm__lane_hint == ~0u) pdshm__lane_hint = atomic_fetch_add(&lane_next, 1) % PDSHM_LANES;
  for (unsigned round = 0;; round++) {
    for (unsigned k = 0; k < PDSHM_LANES; k++) {
      struct pdshm_lane_ctx *ln = &seg->lanes[(pdshm__lane_hint + k) % PDSHM_LANES];
      if (pdshm__lane_try(ln)) {
        pdshm__lane_hint = ln->index;
        return ln;
      }
    }
    if (round < 64) pdshm__cpu_relax();
    else sched_yield();
  }
}
