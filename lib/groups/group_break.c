/*
 * group_break.c - a group's round broken before it completes: by a member's
 * death, noticed and announced, or by a timeout.  Below both the registry
 * (group.c) and the rounds (group_round.c), which each notice deaths; above
 * a regroup's plan (group_plan.c), settled before a death is reported.
 *
 * Owns: the liveness of a member word (groups.h says when one is live), the
 * CAS that ends a round broken, and every rank's `reported` word.
 *
 * Invariants:
 *  1. A death is announced under lock PDSHM_LOCK_GROUPS by whoever notices
 *     it first (a survivor, the joiner that takes the rank over, or the
 *     reaper): it breaks the current round, then sets reported[r] (a plain
 *     store).  Dying between the two leaves a broken round whose death is
 *     not marked reported, so the next to notice breaks another round for
 *     it: a death told twice, never one not told.
 *     A waiter that finds the lock busy looks again at its next slice
 *     (its holder may be stopped: a wait must still end at its deadline).
 *  2. A break is the one CAS of `state` that ends the round (group_round.c,
 *     invariant 1); a timeout's fails, changing nothing, once its round has
 *     ended.
 *  3. A death's break ends whichever round is current when its CAS lands:
 *     it tries again on the next round when the one it read completed
 *     first.  The dead member may have arrived at that round before it died
 *     (the survivor that noticed read its arrival word before it did), so
 *     the round could complete; the next one cannot without it, and a death
 *     marked reported must have broken a round the dead member never
 *     arrived at or one it could not complete, or its survivors would wait
 *     for it until their deadlines.
 */
#define PDSHM_LAYER 6 /* groups/ (lib/LAYERS) */
#include "config.h"

#include "groups/groups.h"

bool pdshm__group_member_live(pdshm_seg *seg, uint64_t m) {
  if (!m || (m & PDSHM_GM_DEAD)) return false;
  uint32_t slot = (uint32_t)(m & 0xffff) - 1;
  if (slot >= seg->hdr->max_procs) return false;
  struct pdshm_slot *sl = pdshm__slot(seg, slot);
  if ((atomic_load_explicit(&sl->epoch, memory_order_acquire) & PDSHM_GM_EPOCH_MASK) != m >> 16)
    return false;
  if (atomic_load_explicit(&sl->state, memory_order_acquire) != PDSHM_SLOT_LIVE) return false;
  return pdshm__slot_alive(seg, slot) != 0; /* -1, cannot tell: not dead */
}

/* Ends the round of state word s broken by one CAS of `state`; false when
 * the word had changed (*s then holds the new one). */
static bool round_break_cas(struct pdshm_group_rec *g, uint64_t *s, bool timeout) {
  if (!atomic_compare_exchange_weak(&g->state, s, pdshm__gs_next(*s, true, timeout)))
    return false;
  PDSHM_CRASHPOINT("group.round.broken");
  pdshm__gs_wake(g);
  return true;
}

void pdshm__round_break(struct pdshm_group_rec *g, uint32_t round, bool timeout) {
  uint64_t s = atomic_load(&g->state);
  while (PDSHM_GS_ROUND(s) == round)
    if (round_break_cas(g, &s, timeout)) return;
}

/* Invariant 3. */
void pdshm__group_announce(struct pdshm_group_rec *g, uint32_t r, uint64_t m) {
  uint64_t base = m & ~PDSHM_GM_DEAD;
  if (!base || atomic_load(&g->rank[r].reported) == base) return;
  uint64_t s = atomic_load(&g->state);
  PDSHM_CRASHPOINT("group.death.announcing");
  while (!round_break_cas(g, &s, false))
    continue; /* that round ended meanwhile: the one current now */
  PDSHM_CRASHPOINT("group.death.broken");
  atomic_store(&g->rank[r].reported, base);
}

int pdshm__group_report_death(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t r, uint64_t m) {
  int rc = pdshm__group_trylock(seg, g);
  if (rc) return rc;
  if (atomic_load(&g->rank[r].member) == m && !pdshm__group_member_live(seg, m))
    pdshm__group_announce(g, r, m);
  pdshm__unlock(seg, PDSHM_LOCK_GROUPS);
  pdshm__gs_wake(g);
  return 0;
}
