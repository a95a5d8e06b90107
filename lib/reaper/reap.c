/*
 * reap.c - the reaper: a dead process's slot settled and emptied, and our
 * own slot's holds released at detach.  Above the model, whose releases it
 * combines: sweeping the heap, finishing journals, dropping scope handles
 * and shared variable holds, leaving groups.  The layers below reach it only
 * through the pointers it registers once per process
 * (pdshm__reap_init_process): the heap's reclaim (an allocation that finds
 * nothing frees dead slots' caches, then tries again) and proc.c's reaper
 * (a variable lock whose holder looks dead).
 *
 * Invariants:
 *  1. A dead slot's reaper claims the slot's OFD lock first (proc.c,
 *     invariant 1), re-reads the state, and then, in this order: finishes or
 *     rolls back the journals of its lanes (taking each journal's lock),
 *     releases what it held (its groups, its todo queues, its handles and
 *     shared holds; its pins inside the sweep of its blocks), frees the
 *     blocks it owned (orphaning the pinned buffers among them), returns the
 *     lock entries it had claimed, and marks it FREE.  Every step is
 *     idempotent, so a reaper killed halfway leaves a dead slot that the
 *     next reaper finishes.  A reaper that gives up halfway does the same:
 *     when a live member still writes a collective into the slot's buffers
 *     after REAP_WRITERS_NS (a stopped process: group.c, invariant 4), it
 *     finishes the todo queues and gives back the variable locks, but
 *     leaves the blocks (the pins, which the first sweep drops, and the
 *     handles among them) and the slot, REAPING, to the next reaper, and
 *     goes on with the other slots (PDSHM_ETIMEDOUT).
 *  2. One reaper per attachment at a time (seg->reap_mu: OFD locks are per
 *     descriptor, not per thread).
 *  3. The allocation's reclaim frees only dead slots' CACHED blocks: their
 *     other blocks wait for a full reap, which may need locks the failing
 *     allocator's caller holds.
 *  4. A FREE slot holds nothing: its journals are IDLE, its todo queues and
 *     caches empty, its variable-lock records IDLE (a reap and a detach
 *     leave it so).  One that does not (a damaged segment) is reaped like
 *     a dead one before it is taken, so that a new owner never starts from
 *     what it cannot account for.
 */
#define PDSHM_LAYER 7 /* reaper/ (lib/LAYERS) */
#include "config.h"

#include <time.h>
#include <unistd.h>

#include "reaper/reaper.h"

/* How long a pass of the reaper lets live members go on writing into a dead
 * slot's buffers (they stop within a chunk of the break) before it leaves
 * the slot to the next reaper (invariant 1). */
#define REAP_WRITERS_NS 200000000ull

/* ---- releasing a slot's holds ------------------------------------------------- */

/* Acting as slot `slot` through lanes[]: leaves its groups (a dead slot's),
 * finishes its todo queues, drops its handle records and shared holds,
 * frees every block it still owns and returns the lock entries it claimed.
 * Shared by detach and the reaper; each step is idempotent (invariant 1).
 * PDSHM_ETIMEDOUT when members of its groups still write into its buffers
 * at the deadline: its todo queues finished and its variable locks given
 * back, but its blocks, pins and handles kept. */
static int reap_slot_holds(pdshm_seg *seg, uint32_t slot, struct pdshm_lane_ctx *lanes,
                           uint64_t deadline) {
  /* Groups first: survivors stop writing into the buffers this slot pins. */
  int writers = slot == seg->slot ? 0 : pdshm__group_reap_slot(seg, slot, &lanes[0], deadline);
  int rc = writers == PDSHM_ETIMEDOUT ? 0 : writers;
  PDSHM_CRASHPOINT("reap.groups.done");
  for (unsigned k = 0; k < PDSHM_LANES && !rc; k++) rc = pdshm__todo_run(seg, &lanes[k]);
  pdshm_off_t *kept = NULL;
  size_t nkept = 0;
  if (!rc) pdshm__varlock_reap_slot(seg, slot);
  if (!rc && writers) return writers; /* the sweeps unpin the buffers written into */
  if (!rc) rc = pdshm__heap_sweep_slot(seg, slot, 1u << PDSHM_T_HANDLE, &kept, &nkept);
  PDSHM_CRASHPOINT("reap.todo.done");
  for (size_t n = 0; n < nkept && !rc; n++) rc = pdshm__handle_drop(seg, &lanes[0], kept[n]);
  pdshm__xfree(kept);
  PDSHM_CRASHPOINT("reap.handles.dropped");
  if (!rc) rc = pdshm__heap_sweep_slot(seg, slot, 0, &kept, &nkept);
  if (!rc) pdshm__xfree(kept);
  PDSHM_CRASHPOINT("reap.swept");
  if (!rc) pdshm__lock_sweep_slot(seg, slot);
  return rc;
}

/* ---- reaping a slot we hold the lock of -------------------------------------- */

/* Finishes or rolls back whatever the dead owner was doing under a lock. */
static int reap_settle_journals(pdshm_seg *seg, struct pdshm_slot *slot) {
  for (unsigned k = 0; k < PDSHM_LANES; k++) {
    struct pdshm_journal *j = &slot->lane[k].j;
    if (atomic_load_explicit(&j->state, memory_order_acquire) == PDSHM_J_IDLE) continue;
    uint32_t lock = atomic_load_explicit(&j->lock, memory_order_relaxed);
    if (lock >= seg->hdr->max_locks) return PDSHM_EBADSEG;
    /* Taking the lock repairs the journal (EOWNERDEAD), unless another
     * process already did; repair again in case the lock was free. */
    int rc = pdshm__lock(seg, lock);
    if (rc) return rc;
    rc = pdshm__journal_repair_lock(seg, lock);
    pdshm__unlock(seg, lock);
    if (rc) return rc;
  }
  return 0;
}

/* Lane contexts that act as dead slot i: its tag, frees straight to the heap. */
static void reap_dead_lanes(pdshm_seg *seg, uint32_t i, struct pdshm_lane_ctx *lanes) {
  for (unsigned k = 0; k < PDSHM_LANES; k++)
    lanes[k] = (struct pdshm_lane_ctx){.rec = &pdshm__slot(seg, i)->lane[k], .index = k,
                                       .tag = (uint16_t)(i + 1), .direct = true};
}

/* Invariant 1, for slot i whose OFD lock we hold. */
static int reap_claimed(pdshm_seg *seg, uint32_t i, uint64_t deadline) {
  struct pdshm_slot *slot = pdshm__slot(seg, i);
  struct pdshm_lane_ctx lanes[PDSHM_LANES];
  atomic_store_explicit(&slot->state, PDSHM_SLOT_REAPING, memory_order_release);
  slot->reaper_pid = (uint32_t)getpid();
  PDSHM_CRASHPOINT("reap.claimed");
  reap_dead_lanes(seg, i, lanes);
  int rc = reap_settle_journals(seg, slot);
  PDSHM_CRASHPOINT("reap.settled");
  if (!rc) rc = reap_slot_holds(seg, i, lanes, deadline);
  if (rc) return rc;
  PDSHM_CRASHPOINT("reap.released");
  slot->pid = 0;
  slot->reaper_pid = 0;
  atomic_store_explicit(&slot->state, PDSHM_SLOT_FREE, memory_order_release);
  atomic_fetch_add_explicit(&seg->hdr->reaped, 1, memory_order_relaxed);
  return 0;
}

/* Invariant 4. */
static bool reap_slot_clean(const pdshm_seg *seg, uint32_t i) {
  const struct pdshm_slot *s = pdshm__slot(seg, i);
  for (unsigned k = 0; k < PDSHM_LANES; k++) {
    const struct pdshm_lane *l = &s->lane[k];
    if (atomic_load_explicit(&l->j.state, memory_order_acquire) != PDSHM_J_IDLE ||
        l->todo.destroy || l->todo.chain)
      return false;
    if (l->cached) return false;
    for (unsigned c = 0; c < PDSHM_NCLASSES; c++)
      if (l->cache[c].head || l->cache[c].count) return false;
  }
  for (unsigned v = 0; v < PDSHM_VL_SLOT_HOLDS; v++)
    if (atomic_load_explicit(&s->vl[v].state, memory_order_acquire) != PDSHM_VL_IDLE) return false;
  return true;
}

/* Claims slot i if its owner is gone; reaps it when it was not FREE, or
 * FREE but not clean (invariant 4).
 * 1: claimed (and clean), 0: somebody holds it, negative: error
 * (PDSHM_ETIMEDOUT: left to the next reaper). */
static int reap_claim_clean(pdshm_seg *seg, uint32_t i, bool *was_dead, uint64_t deadline) {
  int got = pdshm__slot_try_claim(seg, i);
  if (got <= 0) return got;
  PDSHM_CRASHPOINT("slot.claimed");
  *was_dead = atomic_load_explicit(&pdshm__slot(seg, i)->state, memory_order_acquire) !=
                  PDSHM_SLOT_FREE ||
              !reap_slot_clean(seg, i);
  int rc = *was_dead ? reap_claimed(seg, i, deadline) : 0;
  if (rc) {
    pdshm__slot_unclaim(seg, i);
    return rc;
  }
  return 1;
}

static uint64_t reap_deadline(void) {
  return pdshm__now_ns(CLOCK_MONOTONIC) + REAP_WRITERS_NS;
}

/* Every dead slot but ours, each given until `deadline` for its groups'
 * writers (one look each once it passed); a slot left to the next reaper
 * does not stop the pass, and is answered last (PDSHM_ETIMEDOUT). */
static int reap_pass(pdshm_seg *seg, unsigned *reaped, uint64_t deadline) {
  unsigned n = 0;
  int rc = 0, left = 0;
  pthread_mutex_lock(&seg->reap_mu);
  for (uint32_t i = 0; i < seg->hdr->max_procs && !rc; i++) {
    if (i == seg->slot) continue;
    if (atomic_load_explicit(&pdshm__slot(seg, i)->state, memory_order_acquire) ==
        PDSHM_SLOT_FREE)
      continue;
    bool was_dead = false;
    int got = reap_claim_clean(seg, i, &was_dead, deadline);
    if (got == PDSHM_ETIMEDOUT) left = got;
    else if (got < 0) rc = got;
    if (got == 1) {
      n += was_dead;
      pdshm__slot_unclaim(seg, i);
    }
  }
  pthread_mutex_unlock(&seg->reap_mu);
  if (reaped) *reaped = n;
  return rc ? rc : left;
}

int pdshm__reap_dead(pdshm_seg *seg, unsigned *reaped) {
  return reap_pass(seg, reaped, reap_deadline());
}

/* proc.c's reaper, for a layer below that finds a holder dead (a variable
 * lock's): one look at the writers, since what it waits for (the holds) is
 * given back before the pins, also by a reap that leaves the slot. */
static int reap_for_holder(pdshm_seg *seg, unsigned *reaped) {
  int rc = reap_pass(seg, reaped, 0);
  return rc == PDSHM_ETIMEDOUT ? 0 : rc;
}

/* The heap's reclaim (invariant 3): the caches of dead slots. */
static void reap_caches(pdshm_seg *seg) {
  pthread_mutex_lock(&seg->reap_mu);
  for (uint32_t i = 0; i < seg->hdr->max_procs; i++) {
    if (i == seg->slot || atomic_load_explicit(&pdshm__slot(seg, i)->state,
                                               memory_order_acquire) == PDSHM_SLOT_FREE)
      continue;
    if (pdshm__slot_try_claim(seg, i) != 1) continue;
    pdshm__heap_sweep_cached(seg, i);
    pdshm__slot_unclaim(seg, i);
  }
  pthread_mutex_unlock(&seg->reap_mu);
}

void pdshm__reap_init_process(void) {
  pdshm__heap_set_reclaim(reap_caches);
  pdshm__slot_set_reaper(reap_for_holder);
}

/* ---- our own slot -------------------------------------------------------------- */

/* A dead slot we cannot reap (its repair fails: the segment is poisoned; or
 * a stopped member still writes into its buffers) is skipped, not taken and
 * not fatal: attach looks for another slot. */
int pdshm__reap_claim_own(pdshm_seg *seg) {
  int last = 0;
  uint64_t deadline = reap_deadline();
  pthread_mutex_lock(&seg->reap_mu);
  for (uint32_t i = 0; i < seg->hdr->max_procs; i++) {
    bool was_dead = false;
    int got = reap_claim_clean(seg, i, &was_dead, deadline);
    if (got < 0) last = got;
    if (got == 1) {
      pdshm__slot_take(seg, i);
      break;
    }
  }
  pthread_mutex_unlock(&seg->reap_mu);
  if (seg->slot == PDSHM_NOSLOT)
    return last ? last
                : pdshm__fail(PDSHM_EUSERS, "all %u process slots are held by live processes",
                              seg->hdr->max_procs);
  /* Any process reaps at attach: leave no dead slot behind us (but those
   * that wait for a stopped member, within the same deadline). */
  reap_pass(seg, NULL, deadline);
  return 0;
}

int pdshm__reap_release_own(pdshm_seg *seg) {
  int rc = reap_slot_holds(seg, seg->slot, seg->lanes, 0);
  PDSHM_CRASHPOINT("slot.release.holds");
  for (unsigned k = 0; k < PDSHM_LANES; k++) pdshm__cache_flush(seg, &seg->lanes[k]);
  PDSHM_CRASHPOINT("slot.release.flushed");
  pdshm__slot_give_up(seg);
  return rc;
}

PDSHM_API int pdshm_reap(pdshm_seg *seg, unsigned *reaped) {
  pdshm__fail_clear();
  if (reaped) *reaped = 0;
  int rc = pdshm__seg_writable(seg);
  if (rc) return rc;
  return pdshm__reap_dead(seg, reaped);
}
