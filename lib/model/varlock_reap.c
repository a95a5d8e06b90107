/*
 * varlock_reap.c - a dead slot's variable locks given back: the exclusive
 * holds its hold records show released, the shares they may have counted
 * recounted from the live slots' records.
 *
 * Owns: the emptying of a dead slot's vl[] hold records (layout.h), for its
 * reaper and for the detach of our own slot (reaper/reap.c); and the FROZEN
 * state of a variable's lock word (varlock.c's header comment: the word),
 * which only a recount sets.
 *
 * Invariants (on varlock.c's 2, the hold records, and 3, the TAG):
 *  1. A dead exclusive holder: its word names its slot.  Its reaper (found
 *     by a waiter that saw the owner's slot dead between sleeps, which then
 *     reaps) clears the owner of the variable each EXCL record of that slot
 *     names, when that variable is still of the record's generation, by CAS
 *     from exactly that owner and TAG: only that slot ever wrote its number
 *     there, so the word alone tells whether the take's CAS happened.  No
 *     journal runs under a variable lock (resize journals under the scope's
 *     lock, whose own repair finishes it), so there is nothing more to
 *     repair: the next taker gets the lock, the data as the dead holder left
 *     it, and the version it had.
 *  2. A dead shared holder: whether its CAS happened is not known from the
 *     word (others change it too), so nothing guesses.  Its reaper freezes
 *     the word (FROZEN, owner = the dead slot+1; takers and releasers that
 *     see FROZEN step back to CLAIMED or HELD and wait), waits until no live
 *     slot's record of that variable is TAKING or RELEASING, counts the
 *     live slots' HELD records of that variable and generation, and stores
 *     that count as it thaws the word.  A dead slot's records are never
 *     counted: each recount is right whoever else is dead.  A reaper killed
 *     while the word is frozen leaves its dead slot's records in place; the
 *     next reaper of that slot takes the freeze over (or anyone's, whose
 *     slot nobody holds any more) and recounts.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include "model/model.h"
#include "model/varlock.h"

/* The live variable a hold record names (its offset and generation), or
 * NULL: a take's CAS changes only its own generation's word (varlock.c,
 * invariant 3). */
static struct pdshm_var_rec *vl_var_of(pdshm_seg *seg, const struct pdshm_vl_hold *e) {
  pdshm_var *v = pdshm_varref_get(seg, (pdshm_varref){.off = vl_rec_var(e), .gen = vl_rec_gen(e)});
  return v ? pdshm__var_rec(v) : NULL;
}

/* Invariant 1: dead slot d's exclusive hold on r (of generation gen), if
 * its CAS happened.  Its version's waiters are woken either way: a holder
 * that died between its release (which moved the version) and its wakes
 * must not leave them asleep. */
static void vl_reap_excl(struct pdshm_var_rec *r, uint64_t gen, uint32_t d) {
  if (pdshm__vl_release_owner(r, pdshm__varlock_tag(gen), d + 1u, true))
    PDSHM_CRASHPOINT("varlock.reap.released");
  pdshm__futex_wake(pdshm__futex_low(&r->version), &r->vwaiters);
}

/* Invariant 2: freezes r's word for dead slot d.  False when there is
 * nothing to recount: held exclusively (so no share counted), or gone. */
static bool vl_freeze(pdshm_seg *seg, struct pdshm_var_rec *r, uint32_t d) {
  const uint64_t tag = pdshm__varlock_tag(r->gen);
  uint64_t w = atomic_load_explicit(&r->lk, memory_order_acquire);
  for (unsigned round = 0;; round++) {
    if (!vl_ours(w, tag)) return false;
    uint32_t who = (uint32_t)(w & VL_OWNER);
    if (!(w & VL_FROZEN) && who) return false;
    if (w & VL_FROZEN && who == d + 1u) return true; /* our slot's reaper died here */
    bool nobody = !who || who > seg->hdr->max_procs; /* a freeze no reaper could have made */
    if (!(w & VL_FROZEN) || nobody ||
        pdshm__vl_slot_abandoned(seg, who - 1)) { /* or left by a dead reaper */
      uint64_t next = (w & ~VL_OWNER) | VL_FROZEN | (d + 1u);
      if (atomic_compare_exchange_weak_explicit(&r->lk, &w, next, memory_order_acq_rel,
                                                memory_order_acquire))
        return true;
      continue;
    }
    pdshm__vl_pause(round + 64); /* another slot's reaper recounts: wait for it */
    w = atomic_load_explicit(&r->lk, memory_order_acquire);
  }
}

/* Waits while live slot s's record e of r is in flight; true when it is a
 * counted share of r's generation. */
static bool vl_counts(pdshm_seg *seg, uint32_t s, const struct pdshm_vl_hold *e,
                      const struct pdshm_var_rec *r) {
  for (unsigned round = 0;; round++) {
    uint32_t st = atomic_load_explicit(&((struct pdshm_vl_hold *)e)->state, memory_order_acquire);
    if (vl_rec_var(e) != r->self) return false;
    if (st == PDSHM_VL_HELD) return vl_rec_gen(e) == r->gen;
    if (st != PDSHM_VL_TAKING && st != PDSHM_VL_RELEASING) return false;
    if (round % 64 == 63 && pdshm__slot_alive(seg, s) == 0) return false; /* died meanwhile */
    pdshm__vl_pause(round + 64);
  }
}

/* Invariant 2: r's shared holders, recounted without dead slot d. */
static void vl_recount(pdshm_seg *seg, struct pdshm_var_rec *r, uint32_t d) {
  if (!vl_freeze(seg, r, d)) return;
  PDSHM_CRASHPOINT("varlock.reap.frozen");
  uint64_t n = 0;
  VL_FOR_HOLDS(it, seg, d) {
    if (it.sst != PDSHM_SLOT_LIVE) { /* REAPING: never counted (invariant 2) */
      vl_scan_pass_slot(&it);
      continue;
    }
    uint32_t st = atomic_load_explicit(&it.e->state, memory_order_acquire);
    if (st < PDSHM_VL_TAKING || st > PDSHM_VL_RELEASING || vl_rec_var(it.e) != r->self) continue;
    /* asked once, and only of a slot that has a record of r */
    if (vl_scan_alive(&it)) n += vl_counts(seg, it.s, it.e, r);
    else vl_scan_pass_slot(&it);
  }
  const uint64_t tag = pdshm__varlock_tag(r->gen);
  uint64_t w = atomic_load_explicit(&r->lk, memory_order_relaxed), next;
  do {
    if (!vl_ours(w, tag) || (w & (VL_FROZEN | VL_OWNER)) != (VL_FROZEN | (d + 1u)))
      return; /* erased meanwhile */
    next = (w & ~(VL_OWNER | VL_FROZEN | VL_READERS | VL_SLEEPERS)) | n * VL_READER;
  } while (!atomic_compare_exchange_weak_explicit(&r->lk, &w, next, memory_order_acq_rel,
                                                  memory_order_relaxed));
  PDSHM_CRASHPOINT("varlock.reap.thawed");
  vl_wake(r, w, true);
}

/* Reaper (or detach) of slot d: every lock its records show it held or was
 * taking is given back; each step is idempotent (proc.c, invariant 3). */
void pdshm__varlock_reap_slot(pdshm_seg *seg, uint32_t d) {
  for (uint32_t i = 0; i < PDSHM_VL_SLOT_HOLDS; i++) {
    struct pdshm_vl_hold *e = vl_rec(seg, d, i);
    uint32_t st = atomic_load_explicit(&e->state, memory_order_acquire);
    if (st == PDSHM_VL_IDLE) continue;
    /* a CLAIMED record names nothing held; an uncounted share nothing the
     * word counts (varlock_bias.c, invariant 4) */
    struct pdshm_var_rec *r =
        st == PDSHM_VL_CLAIMED || vl_uncounted(st) ? NULL : vl_var_of(seg, e);
    if (r && st == PDSHM_VL_EXCL) vl_reap_excl(r, vl_rec_gen(e), d);
    else if (r) vl_recount(seg, r, d);
    vl_state(e, PDSHM_VL_IDLE);
    PDSHM_CRASHPOINT("varlock.reap.record");
  }
}
