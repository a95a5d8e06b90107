/*
 * varlock_bias.c - shared takes that the variable's word does not count:
 * the take is a record of the reader's own slot, which a writer finds by
 * scanning the slots' records (a reader-biased lock, after BRAVO).
 *
 * Why: readers of one variable in several processes would otherwise each
 * do two compare-and-swaps on its word a hold, and the word's cache line
 * would move between them at every one.  An uncounted take writes its own
 * slot's record and only reads the word, whose line stays shared.
 *
 * Owns: a variable's lk_rbias (records.h) and the TRYING, CANCELLED and
 * VISIBLE states of the hold records (layout.h); varlock.c takes and
 * releases such shares.
 *
 * lk_rbias is VL_BIAS_ON, or else a time (the low 32 bits of the monotonic
 * clock in microseconds) before which it may not be set again; 0 is no
 * time: it may be set at once.
 *
 * Invariants (on varlock.c's 2, the hold records, and 3, the TAG):
 *  1. An uncounted take stores TRYING, naming the variable and its
 *     generation, into its record, then reads lk_rbias, then the word (all
 *     sequentially consistent); when lk_rbias is ON and the word is its
 *     variable's, has no owner and is not FROZEN, it moves its record from
 *     TRYING to VISIBLE by compare-and-swap, and holds.  Otherwise, or when
 *     that CAS finds CANCELLED, its record goes back to CLAIMED and it
 *     takes a counted share instead.  Its release is the store of CLAIMED
 *     (or IDLE).
 *  2. A writer, once its compare-and-swap made it the owner (sequentially
 *     consistent), reads lk_rbias: when ON, it clears it and scans the
 *     records of the live slots for that variable and generation: a TRYING
 *     one it moves to CANCELLED by compare-and-swap, and it waits until no
 *     VISIBLE one is left.  A take of invariant 1 either read the word
 *     after that CAS (and saw the owner) or stored TRYING before it (and the
 *     scan sees it): the two orders of a store then a load, on each side,
 *     cannot both miss.  A take the scan finds undecided is cancelled, not
 *     waited for: a reader stopped (SIGSTOP) before it decided holds
 *     nothing, and stalls no writer; one stopped holding, holds.
 *  3. Only an owner clears lk_rbias, and it then scans (invariant 2);
 *     anyone may set it ON, at any time.  A take of invariant 1 that read
 *     it ON before the word, where a later owner reads it cleared after its
 *     CAS, read it before some owner's clear, so that owner's scan saw the
 *     take's record: the take was over, or never held, before that owner
 *     let go, hence before the later owner's CAS.
 *  4. A dead process's VISIBLE records hold nothing: the writer passes a
 *     dead slot's by, and its reaper makes them IDLE (varlock_reap.c), as
 *     its TRYING and CANCELLED ones.  The word needs no recount, having
 *     counted none of them.
 *  5. Revoking costs a scan of every slot's records, so a writer that
 *     revoked keeps lk_rbias off for VL_BIAS_INHIBIT times what the scan
 *     and wait took (at least VL_BIAS_MIN_US): under writes the lock
 *     stays counted, under reads it goes back to uncounted.  A reader sets
 *     it ON only after its counted take met another reader's (the word
 *     counted shares already, or its CAS failed): a variable that one
 *     thread reads at a time keeps the counted lock.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <sched.h>
#include <time.h>

#include "model/model.h"
#include "model/varlock.h"

#define VL_BIAS_INHIBIT 9      /* times a revocation's length        */
#define VL_BIAS_MIN_US 100u    /* a revocation keeps the bias off     */
#define VL_BIAS_MAX_US 1000000u /* this long at most: a time further  */
                               /* ahead is one the clock wrapped past */

static uint32_t vl_now_us(void) {
  return (uint32_t)(pdshm__now_ns(CLOCK_MONOTONIC) / 1000u);
}

/* Invariant 5: whether a bias off until `until` may be set again at `now`
 * (both wrapping microsecond counts; 0 is no time). */
static bool vl_bias_due(uint32_t until, uint32_t now) {
  if (!until) return true;
  int32_t ahead = (int32_t)(until - now);
  return ahead <= 0 || ahead > (int32_t)VL_BIAS_MAX_US;
}

void pdshm__vl_bias_allow(struct pdshm_var_rec *r) {
  uint32_t b = atomic_load_explicit(&r->lk_rbias, memory_order_relaxed);
  if (b == VL_BIAS_ON || !vl_bias_due(b, vl_now_us())) return;
  atomic_compare_exchange_strong_explicit(&r->lk_rbias, &b, VL_BIAS_ON, memory_order_seq_cst,
                                          memory_order_relaxed);
}

/* A bias off until `us` microseconds from now (never 0 or ON). */
static uint32_t vl_bias_off_for(uint32_t us) {
  uint32_t until = vl_now_us() + us;
  return until > VL_BIAS_ON ? until : VL_BIAS_ON + 1;
}

/* Waits while record e of live slot s is an uncounted share of r's
 * generation gen (invariant 4: not once the slot is dead), cancelling it
 * while it is undecided (invariant 2).  A spin, then yields, then sleeps of
 * a microsecond, then of 100: a reader holds as long as it likes. */
static void vl_bias_wait_record(const pdshm_seg *seg, uint32_t s, struct pdshm_vl_hold *e,
                                const struct pdshm_var_rec *r, uint64_t gen) {
  for (unsigned round = 0;; round++) {
    uint32_t st = atomic_load_explicit(&e->state, memory_order_seq_cst);
    if (!vl_uncounted(st) || st == PDSHM_VL_CANCELLED || !vl_rec_names(e, r->self, gen)) return;
    if (st == PDSHM_VL_TRYING) {
      if (atomic_compare_exchange_strong_explicit(&e->state, &st, PDSHM_VL_CANCELLED,
                                                  memory_order_seq_cst, memory_order_relaxed))
        return;
      continue; /* it decided meanwhile */
    }
    if (round % 64 == 63 && pdshm__slot_alive(seg, s) == 0) return;
    if (round < 64) pdshm__cpu_relax();
    else if (round < 128) sched_yield();
    else nanosleep(&(struct timespec){0, round < 1024 ? 1000 : 100000}, NULL);
  }
}

void pdshm__vl_bias_revoke(pdshm_seg *seg, struct pdshm_var_rec *r, uint64_t gen,
                           const struct pdshm_vl_hold *mine) {
  if (atomic_load_explicit(&r->lk_rbias, memory_order_seq_cst) != VL_BIAS_ON) return;
  uint64_t t0 = pdshm__now_ns(CLOCK_MONOTONIC);
  atomic_store_explicit(&r->lk_rbias, vl_bias_off_for(VL_BIAS_MIN_US), memory_order_seq_cst);
  PDSHM_CRASHPOINT("varlock.bias.revoking");
  VL_FOR_HOLDS(it, seg, VL_NO_SLOT)
    if (it.e != mine) vl_bias_wait_record(seg, it.s, it.e, r, gen);
  uint64_t took_us = (pdshm__now_ns(CLOCK_MONOTONIC) - t0) / 1000u;
  uint64_t off = took_us * VL_BIAS_INHIBIT;
  off = off < VL_BIAS_MIN_US ? VL_BIAS_MIN_US : off > VL_BIAS_MAX_US ? VL_BIAS_MAX_US : off;
  atomic_store_explicit(&r->lk_rbias, vl_bias_off_for((uint32_t)off), memory_order_relaxed);
}

uint64_t pdshm__vl_bias_readers(const pdshm_seg *seg, const struct pdshm_var_rec *r) {
  uint64_t n = 0;
  VL_FOR_HOLDS(it, seg, VL_NO_SLOT) {
    if (atomic_load_explicit(&it.e->state, memory_order_acquire) != PDSHM_VL_VISIBLE ||
        !vl_rec_names(it.e, r->self, r->gen))
      continue;
    n += vl_scan_alive(&it); /* asked once, and only of a slot that has such a record */
  }
  return n;
}
