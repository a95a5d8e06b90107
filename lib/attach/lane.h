/*
 * lane.h - the inline half of lane.c: a thread takes the lane it used last
 * with one compare-and-swap, no call; lane.c looks further when that lane
 * is busy or the thread has none yet.  Included by attach.h, after
 * struct pdshm_seg.
 */
#ifndef PDSHM_LANE_H
#define PDSHM_LANE_H

/* The lane this thread used last, ~0u before its first (lane.c). */
extern PDSHM_TLS_HOT unsigned pdshm__lane_hint;

/* Takes ln if no thread of ours uses it. */
static inline bool pdshm__lane_try(struct pdshm_lane_ctx *ln) {
  int idle = 0;
  return atomic_load_explicit(&ln->busy, memory_order_relaxed) == 0 &&
         atomic_compare_exchange_strong_explicit(&ln->busy, &idle, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}

/* The rest of pdshm__lane_get: the other lanes, spinning, then yielding. */
struct pdshm_lane_ctx *pdshm__lane_get_slow(pdshm_seg *seg);

/* A lane of seg for this thread, held until pdshm__lane_put. */
static inline struct pdshm_lane_ctx *pdshm__lane_get(pdshm_seg *seg) {
  unsigned h = pdshm__lane_hint;
  if (__builtin_expect(h < PDSHM_LANES, 1) && pdshm__lane_try(&seg->lanes[h]))
    return &seg->lanes[h];
  return pdshm__lane_get_slow(seg);
}

static inline void pdshm__lane_put(struct pdshm_lane_ctx *ln) {
  atomic_store_explicit(&ln->busy, 0, memory_order_release);
}

#endif /* PDSHM_LANE_H */
