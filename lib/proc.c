/*
 * proc.c - the process table: claiming a slot, liveness, reaping.
 *
 * Owns: struct pdshm_slot (layout.h) and the OFD byte locks that make a slot
 * alive.
 *
 * Invariants:
 *  1. Slot i is owned by whoever holds the write OFD lock on byte
 *     PDSHM_OFD_SLOT_BASE + i: its attachment, or a reaper.  The kernel drops
 *     the lock when the owner's last descriptor of that open file description
 *     closes (death included); pid reuse and pid namespaces do not matter.
 *  2. Only the slot's owner writes the slot, its lanes and blocks it owns.
 *  3. A slot whose state is not FREE and whose lock nobody holds is dead.  Its
 *     reaper claims the lock first, re-reads the state, and then, in this
 *     order: finishes or rolls back the journals of its lanes (taking each
 *     journal's lock), releases what it held (its pins first, inside the
 *     sweep of its blocks), frees the blocks it owned (orphaning the pinned
 *     buffers among them), returns the lock entries it had claimed, and
 *     marks it FREE.  Every step
 *     is idempotent, so a reaper killed halfway leaves a dead slot that the
 *     next reaper finishes.
 *  4. A stopped process still holds its lock: slow is not dead.
 *
 * State machine of a slot:
 *   FREE --attach--> LIVE --detach--> FREE
 *   LIVE --death--> (LIVE, unlocked) --reaper--> REAPING --> FREE
 *   REAPING --reaper's death--> (REAPING, unlocked) --next reaper--> ...
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model_int.h"

static off_t proc_byte(uint32_t i) { return (off_t)(PDSHM_OFD_SLOT_BASE + i); }

/* 1: we now own slot i; 0: somebody else does; negative: error. */
static int proc_try_claim(pdshm_seg *seg, uint32_t i) {
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = proc_byte(i), .l_len = 1};
  if (fcntl(seg->fd, F_OFD_SETLK, &fl) == 0) return 1;
  if (errno == EAGAIN || errno == EACCES) return 0;
  return pdshm__fail(-errno, "F_OFD_SETLK on slot %u: %s", i, strerror(errno));
}

static void proc_unclaim(pdshm_seg *seg, uint32_t i) {
  struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = proc_byte(i), .l_len = 1};
  fcntl(seg->fd, F_OFD_SETLK, &fl);
}

int pdshm__slot_alive(pdshm_seg *seg, uint32_t i) {
  if (i == seg->slot) return 1;
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = proc_byte(i), .l_len = 1};
  if (fcntl(seg->fd, F_OFD_GETLK, &fl) < 0) return -1;
  return fl.l_type != F_UNLCK;
}

/* ---- reaping a slot we hold the lock of -------------------------------------- */

/* Finishes or rolls back whatever the dead owner was doing under a lock. */
static int proc_settle_journals(pdshm_seg *seg, struct pdshm_slot *slot) {
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
static void proc_dead_lanes(pdshm_seg *seg, uint32_t i, struct pdshm_lane_ctx *lanes) {
  for (unsigned k = 0; k < PDSHM_LANES; k++)
    lanes[k] = (struct pdshm_lane_ctx){.rec = &pdshm__slot(seg, i)->lane[k], .index = k,
                                       .tag = (uint16_t)(i + 1), .direct = true};
}

static int proc_reap_claimed(pdshm_seg *seg, uint32_t i) {
  struct pdshm_slot *slot = pdshm__slot(seg, i);
  struct pdshm_lane_ctx lanes[PDSHM_LANES];
  atomic_store_explicit(&slot->state, PDSHM_SLOT_REAPING, memory_order_release);
  slot->reaper_pid = (uint32_t)getpid();
  PDSHM_CRASHPOINT("reap.claimed");
  proc_dead_lanes(seg, i, lanes);
  int rc = proc_settle_journals(seg, slot);
  PDSHM_CRASHPOINT("reap.settled");
  if (!rc) rc = pdshm__release_slot_holds(seg, i, lanes);
  if (rc) return rc;
  PDSHM_CRASHPOINT("reap.released");
  slot->pid = 0;
  slot->reaper_pid = 0;
  atomic_store_explicit(&slot->state, PDSHM_SLOT_FREE, memory_order_release);
  atomic_fetch_add_explicit(&seg->hdr->reaped, 1, memory_order_relaxed);
  return 0;
}

/* Claims slot i if its owner is gone; reaps it when it was not FREE.
 * 1: claimed (and clean), 0: somebody holds it, negative: error. */
static int proc_claim_clean(pdshm_seg *seg, uint32_t i, bool *was_dead) {
  int got = proc_try_claim(seg, i);
  if (got <= 0) return got;
  PDSHM_CRASHPOINT("slot.claimed");
  *was_dead = atomic_load_explicit(&pdshm__slot(seg, i)->state, memory_order_acquire) !=
              PDSHM_SLOT_FREE;
  int rc = *was_dead ? proc_reap_claimed(seg, i) : 0;
  if (rc) {
    proc_unclaim(seg, i);
    return rc;
  }
  return 1;
}

int pdshm__reap_dead(pdshm_seg *seg, unsigned *reaped) {
  unsigned n = 0;
  int rc = 0;
  pthread_mutex_lock(&seg->reap_mu);
  for (uint32_t i = 0; i < seg->hdr->max_procs && !rc; i++) {
    if (i == seg->slot) continue;
    if (atomic_load_explicit(&pdshm__slot(seg, i)->state, memory_order_acquire) ==
        PDSHM_SLOT_FREE)
      continue;
    bool was_dead = false;
    int got = proc_claim_clean(seg, i, &was_dead);
    if (got < 0) rc = got;
    if (got == 1) {
      n += was_dead;
      proc_unclaim(seg, i);
    }
  }
  pthread_mutex_unlock(&seg->reap_mu);
  if (reaped) *reaped = n;
  return rc;
}

/* Allocation failed: give the heap the caches of dead slots.  Only the
 * caches: their other blocks wait for a full reap, which may need locks the
 * failing allocator's caller holds. */
void pdshm__reap_caches(pdshm_seg *seg) {
  pthread_mutex_lock(&seg->reap_mu);
  for (uint32_t i = 0; i < seg->hdr->max_procs; i++) {
    if (i == seg->slot || atomic_load_explicit(&pdshm__slot(seg, i)->state,
                                               memory_order_acquire) == PDSHM_SLOT_FREE)
      continue;
    if (proc_try_claim(seg, i) != 1) continue;
    pdshm__heap_sweep_cached(seg, i);
    proc_unclaim(seg, i);
  }
  pthread_mutex_unlock(&seg->reap_mu);
}

/* ---- our own slot -------------------------------------------------------------- */

static uint64_t proc_start_time(void) {
  /* Field 22 of /proc/self/stat, after the parenthesised command name. */
  char buf[1024];
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  unsigned long long start = 0;
  if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                         "%*d %*d %llu", &start) == 1)
    return start;
  return 0;
}

static void proc_take(pdshm_seg *seg, uint32_t i) {
  struct pdshm_slot *slot = pdshm__slot(seg, i);
  seg->slot = i;
  seg->owner_tag = (uint16_t)(i + 1);
  slot->pid = (uint32_t)getpid();
  slot->attach_ns = pdshm__now_ns(CLOCK_REALTIME);
  slot->proc_start = proc_start_time();
  PDSHM_CRASHPOINT("slot.take.filled");
  atomic_fetch_add_explicit(&slot->epoch, 1, memory_order_relaxed);
  for (unsigned k = 0; k < PDSHM_LANES; k++) {
    seg->lanes[k].rec = &slot->lane[k];
    seg->lanes[k].tag = seg->owner_tag;
  }
  atomic_store_explicit(&slot->state, PDSHM_SLOT_LIVE, memory_order_release);
}

/* A dead slot we cannot reap (its repair fails: the segment is poisoned) is
 * skipped, not taken and not fatal: attach looks for another slot. */
int pdshm__slot_claim_own(pdshm_seg *seg) {
  int last = 0;
  pthread_mutex_lock(&seg->reap_mu);
  for (uint32_t i = 0; i < seg->hdr->max_procs; i++) {
    bool was_dead = false;
    int got = proc_claim_clean(seg, i, &was_dead);
    if (got < 0) last = got;
    if (got == 1) {
      proc_take(seg, i);
      break;
    }
  }
  pthread_mutex_unlock(&seg->reap_mu);
  if (seg->slot == PDSHM_NOSLOT)
    return last ? last
                : pdshm__fail(PDSHM_EUSERS, "all %u process slots are held by live processes",
                              seg->hdr->max_procs);
  /* Any process reaps at attach: leave no dead slot behind us. */
  pdshm__reap_dead(seg, NULL);
  return 0;
}

int pdshm__slot_release_own(pdshm_seg *seg) {
  struct pdshm_slot *slot = pdshm__slot(seg, seg->slot);
  int rc = pdshm__release_slot_holds(seg, seg->slot, seg->lanes);
  PDSHM_CRASHPOINT("slot.release.holds");
  for (unsigned k = 0; k < PDSHM_LANES; k++) pdshm__cache_flush(seg, &seg->lanes[k]);
  PDSHM_CRASHPOINT("slot.release.flushed");
  slot->pid = 0;
  atomic_store_explicit(&slot->state, PDSHM_SLOT_FREE, memory_order_release);
  seg->slot = PDSHM_NOSLOT;
  return rc;
}

/* Shared by detach and the reaper; each step is idempotent (proc.c inv. 3). */
int pdshm__release_slot_holds(pdshm_seg *seg, uint32_t slot, struct pdshm_lane_ctx *lanes) {
  /* Groups first: survivors stop writing into the buffers this slot pins. */
  int rc = slot == seg->slot ? 0 : pdshm__group_reap_slot(seg, slot, &lanes[0]);
  PDSHM_CRASHPOINT("reap.groups.done");
  for (unsigned k = 0; k < PDSHM_LANES && !rc; k++) rc = pdshm__todo_run(seg, &lanes[k]);
  pdshm_off_t *kept = NULL;
  size_t nkept = 0;
  if (!rc) pdshm__varlock_reap_slot(seg, slot);
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

PDSHM_API int pdshm_reap(pdshm_seg *seg, unsigned *reaped) {
  pdshm__fail_clear();
  if (reaped) *reaped = 0;
  int rc = pdshm__seg_writable(seg);
  if (rc) return rc;
  return pdshm__reap_dead(seg, reaped);
}
