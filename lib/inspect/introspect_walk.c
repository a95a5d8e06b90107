/*
 * introspect_walk.c - the retried walk of the block chain and the checks
 * every introspection call starts with (inspect.h).
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "inspect/inspect.h"

bool pdshm__slots_sane(const pdshm_seg *seg) {
  const struct pdshm_hdr *h = seg->hdr;
  const uint64_t end = pdshm__seg_end(seg);
  return h->max_procs >= 1 && h->max_procs <= PDSHM_PROCS_MAX && h->slots_off >= sizeof *h &&
         h->slots_off <= end &&
         (uint64_t)h->max_procs * sizeof(struct pdshm_slot) <= end - h->slots_off;
}

bool pdshm__locks_sane(const pdshm_seg *seg) {
  const struct pdshm_hdr *h = seg->hdr;
  const uint64_t end = pdshm__seg_end(seg);
  return h->max_locks >= PDSHM_LOCKS_MIN && h->max_locks <= PDSHM_LOCKS_MAX &&
         h->locks_off >= sizeof *h && h->locks_off <= end &&
         (uint64_t)h->max_locks * sizeof(struct pdshm_lock) <= end - h->locks_off;
}

int pdshm__inspect_begin(const pdshm_seg *seg, bool given, const char *what, unsigned tables) {
  pdshm__fail_clear();
  int rc = pdshm__seg_usable(seg);
  if (rc) return rc;
  if (!given) return pdshm__fail(PDSHM_EINVAL, "NULL %s", what);
  if ((tables & PDSHM_INSPECT_SLOTS) && !pdshm__slots_sane(seg))
    return pdshm__fail(PDSHM_EBADSEG, "process table is damaged");
  if ((tables & PDSHM_INSPECT_LOCKS) && !pdshm__locks_sane(seg))
    return pdshm__fail(PDSHM_EBADSEG, "lock table is damaged");
  return 0;
}

/* ---- torn reads told from damage (inspect.h, inv. 3) --------------------------- */

/* What a writer leaves behind in the lock table: every change of the
 * model and of the chain's shape is made under some entry's mutex, whose
 * taker counts the acquisition before it changes anything, or, repairing
 * after a dead holder, names itself the holder first (lock.c, inv. 3). */
struct inspect_mark {
  uint64_t taken; /* acquisitions, summed over the table                       */
  bool busy;      /* another live thread held an entry when it was read (this  */
                  /* one's holds change nothing while it reads: pdshm_check)   */
};

/* Is lock i held by a live thread other than this one?  The mutex's word
 * names the holding thread, the entry the slot of the process that took it
 * last (lock.c): a writer at work shows in both, its slot alive, where bytes
 * left in a damaged table would not. */
static bool inspect_busy(const pdshm_seg *seg, uint32_t i, int me) {
  int holder = pdshm__lock_holder_hint(seg, i);
  if (holder <= 0 || holder == me) return false;
  uint32_t slot = atomic_load_explicit(&pdshm__lockent(seg, i)->holder_slot, memory_order_relaxed);
  return slot < seg->hdr->max_procs && pdshm__slot_alive(seg, slot) == 1;
}

/* The mark now; all zero when the lock table lies outside the mapping (a
 * damaged segment: nothing then tells a change, and every failed walk
 * counts as one that saw none). */
static struct inspect_mark inspect_mark(const pdshm_seg *seg) {
  struct inspect_mark m = {0};
  if (!pdshm__locks_sane(seg)) return m;
  const int me = (int)gettid();
  for (uint32_t i = 0; i < seg->hdr->max_locks; i++) {
    m.busy |= inspect_busy(seg, i, me);
    m.taken += __atomic_load_n(&pdshm__lockent(seg, i)->acquisitions, __ATOMIC_RELAXED);
  }
  return m;
}

/* Did anything change the segment between the two marks?  A hold that
 * began before `before` shows as busy there; one that began after it
 * counted its acquisition before its first store, so `after` differs. */
static bool inspect_changed(const struct inspect_mark *before, const struct inspect_mark *after) {
  return before->busy || after->busy || before->taken != after->taken;
}

int pdshm__inspect_retry(const pdshm_seg *seg, int (*once)(void *arg), void *arg) {
  uint64_t give_up = 0;
  for (int quiet = 0;;) {
    struct inspect_mark before = inspect_mark(seg);
    int rc = once(arg);
    if (rc != PDSHM_EBADSEG) return rc;
    struct inspect_mark after = inspect_mark(seg);
    if (!inspect_changed(&before, &after)) {
      if (++quiet == PDSHM_INSPECT_TRIES) return rc;
    } else {
      uint64_t now = pdshm__now_ns(CLOCK_MONOTONIC);
      if (!give_up) {
        give_up = now + PDSHM_INSPECT_BUSY_NS;
      } else if (now >= give_up) {
        char why[200];
        snprintf(why, sizeof why, "%s", pdshm_last_error());
        return pdshm__fail(PDSHM_EAGAIN, "the segment changed under every read for %llu s (%s)",
                           (unsigned long long)(PDSHM_INSPECT_BUSY_NS / 1000000000u), why);
      }
    }
    sched_yield();
  }
}

struct walk_once {
  const pdshm_seg *seg;
  const struct pdshm_walker *w;
};

static int walk_once(void *arg) {
  const struct walk_once *wo = arg;
  return pdshm__chain_walk(wo->seg, wo->w, NULL);
}

int pdshm__walk_blocks(const pdshm_seg *seg, const struct pdshm_walker *w) {
  return pdshm__inspect_retry(seg, walk_once, &(struct walk_once){seg, w});
}

const void *pdshm__payload_at(const pdshm_seg *seg, pdshm_off_t off, unsigned type, size_t bytes) {
  return pdshm__block_live(seg, off, type, bytes) ? seg->base + off : NULL;
}
