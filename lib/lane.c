/*
 * lane.c - which lane of our slot a thread mutates through.
 *
 * A slot has PDSHM_LANES lanes so that threads of one process build and
 * journal in parallel; each lane is guarded by a process-local mutex held for
 * one whole operation.  A thread keeps returning to the lane it last used
 * (its cache stays warm) and moves on when that lane is busy.
 */
#include "config.h"

#include "internal.h"

static _Atomic unsigned lane_next;        /* spreads new threads over lanes */
static _Thread_local unsigned lane_hint = ~0u;

struct pdshm_lane_ctx *pdshm__lane_get(pdshm_seg *seg) {
  if (lane_hint == ~0u) lane_hint = atomic_fetch_add(&lane_next, 1) % PDSHM_LANES;
  for (unsigned k = 0; k < PDSHM_LANES; k++) {
    struct pdshm_lane_ctx *ln = &seg->lanes[(lane_hint + k) % PDSHM_LANES];
    if (pthread_mutex_trylock(&ln->mu) == 0) {
      lane_hint = ln->index;
      return ln;
    }
  }
  struct pdshm_lane_ctx *ln = &seg->lanes[lane_hint];
  pthread_mutex_lock(&ln->mu);
  return ln;
}

void pdshm__lane_put(struct pdshm_lane_ctx *ln) { pthread_mutex_unlock(&ln->mu); }
