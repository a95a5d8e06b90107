/*
 * varwait.c - pdshm_var_wait: sleeping until a variable's version moves.
 *
 * No lock and no spinning: the waiter sleeps on the futex of the version's
 * low 32 bits (futex.c), counted in the record's vwaiters; every bump of the
 * version (an exclusive unlock in varlock.c, a resize's journal, and the
 * repair that re-applies that journal after a death) wakes the waiters when
 * the count is nonzero.  A version that moved by a multiple of 2^32 between
 * two looks still differs in its 64 bits, which is what the caller compares.
 *
 * A read-only attachment cannot raise the count (its mapping is read-only),
 * so it is never woken: it looks again every RDONLY_SLICE_NS.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <time.h>

#include "model/model.h"

#define RDONLY_SLICE_NS 1000000 /* 1 ms */

static int64_t vw_left(uint64_t deadline) {
  uint64_t now = pdshm__now_ns(CLOCK_MONOTONIC);
  return now >= deadline ? 0 : (int64_t)(deadline - now);
}

PDSHM_API int pdshm_var_wait(const pdshm_var *v, uint64_t seen, int64_t timeout_ns) {
  pdshm__fail_clear();
  if (!v) return pdshm__fail(PDSHM_EINVAL, "NULL variable");
  pdshm_seg *seg = pdshm__seg_of(v);
  if (!seg) return pdshm__fail(PDSHM_EINVAL, "variable is in no attachment of this process");
  int rc = pdshm__seg_usable(seg);
  if (rc) return rc;
  struct pdshm_var_rec *r = (struct pdshm_var_rec *)(uintptr_t)v;
  bool counted = !(seg->flags & PDSHM_RDONLY);
  uint64_t deadline = timeout_ns < 0 ? UINT64_MAX
                                     : pdshm__now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ns;
  _Atomic uint32_t dummy = 0;
  for (;;) {
    uint64_t now_v = atomic_load_explicit(&r->version, memory_order_acquire);
    if (now_v != seen) return 0;
    int64_t left = timeout_ns < 0 ? -1 : vw_left(deadline);
    if (left == 0) return PDSHM_ETIMEDOUT;
    if (!counted && (left < 0 || left > RDONLY_SLICE_NS)) left = RDONLY_SLICE_NS;
    pdshm__futex_wait(pdshm__futex_low(&r->version), counted ? &r->vwaiters : &dummy,
                      (uint32_t)now_v, left);
  }
}
