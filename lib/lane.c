/*
 * lane.c - which lane of our slot a thread mutates through.
 *
 * A slot has PDSHM_LANES lanes so that threads of one process build and
 * journal in parallel; each lane is guarded by a process-local mutex held for
 * one whole operation.  A thread keeps returning to the lane it last used
 * (its cache stays warm) and moves on when that lane is busy.
 */
#include "config.h"

#include <sched.h>

#include "internal.h"

static _Atomic unsigned lane_next;        /* spreads new threads over lanes */
static PDSHM_TLS_HOT unsigned lane_hint = ~0u;

static bool lane_try(struct pdshm_lane_ctx *ln) {
  int idle = 0;
  return atomic_load_explicit(&ln->busy, memory_order_relaxed) == 0 &&
         atomic_compare_exchange_strong_explicit(&ln->busy, &idle, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}

/* Lanes are held for one operation (microseconds), so a thread that finds
 * them all busy spins, then yields. */
struct pdshm_lane_ctx *pdshm__lane_get(pdshm_seg *seg) {
  if (lane_hint == ~0u) lane_hint = atomic_fetch_add(&lane_next, 1) % PDSHM_LANES;
  for (unsigned round = 0;; round++) {
    for (unsigned k = 0; k < PDSHM_LANES; k++) {
      struct pdshm_lane_ctx *ln = &seg->lanes[(lane_hint + k) % PDSHM_LANES];
      if (lane_try(ln)) {
        lane_hint = ln->index;
        return ln;
      }
    }
    if (round < 64) pdshm__cpu_relax();
    else sched_yield();
  }
}

void pdshm__lane_put(struct pdshm_lane_ctx *ln) {
  atomic_store_explicit(&ln->busy, 0, memory_order_release);
}
