/*
 * group_plan.c - a regroup's plan applied: the one change of a group's size
 * and seats (group_regroup.c decides it).  Below the death reports
 * (group_break.c), the registry (group.c) and the rounds, which all settle a
 * record before they look at its seats.
 *
 * Owns: a record's `plan`, `size` and `regrouped` words, and the seats'
 * `planned`, `planned_from` and `from` words (groups.h).
 *
 * Invariants:
 *  1. A plan is decided under lock PDSHM_LOCK_GROUPS by one store of `plan`
 *     (round | size << 32), after the planned words of seats 0..size-1:
 *     before that store nothing changed; after it, the plan is a pure
 *     function of words nobody else writes until it is cleared.
 *  2. Nobody touches a record's seats under the lock while its plan is set
 *     but this file: every holder settles first, so a plan whose applier
 *     died is finished by the next holder, before anything else.
 *  3. Applying is idempotent: the round ends by a CAS that fails, changing
 *     nothing, once it ended (nothing but the plan ends a regroup's round
 *     while its plan is set: its deaths are announced under the lock, after
 *     settling, and its arrivals never complete it); every other store is
 *     an absolute value; `plan` is cleared last.
 *  4. The plan's round ends before the seats move: a member woken by the end
 *     reads its seat only under the lock, after settling.
 */
#define PDSHM_LAYER 6 /* groups/ (lib/LAYERS) */
#include "config.h"

#include <time.h>

#include "groups/groups.h"

#define GROUP_LOCK_GRACE_NS 100000000ull /* pdshm__group_lock_deadline's */

static void plan_end_round(struct pdshm_group_rec *g, uint32_t round) {
  uint64_t s = atomic_load(&g->state);
  while (PDSHM_GS_ROUND(s) == round)
    if (atomic_compare_exchange_weak(&g->state, &s, pdshm__gs_next(s, false, false))) break;
}

void pdshm__group_settle(struct pdshm_group_rec *g) {
  uint64_t p = atomic_load(&g->plan);
  if (!p) return;
  uint32_t round = (uint32_t)p, size = (uint32_t)(p >> 32);
  if (!pdshm__plan_sane(g, p)) return; /* damaged: group.c and pdshm_check say EBADSEG */
  plan_end_round(g, round);
  PDSHM_CRASHPOINT("group.regroup.ended");
  for (uint32_t r = 0; r < g->cap; r++) {
    struct pdshm_group_rank *k = &g->rank[r];
    atomic_store(&k->member, r < size ? k->planned : 0);
    k->from = r < size ? k->planned_from : UINT32_MAX;
    atomic_store(&k->reported, 0);
    atomic_store(&k->writing, 0);
    atomic_store(&k->arrived, r < size ? round : 0);
    /* no stale "regroup" left where a collective's second round, which
     * writes no description, would be taken for one (group.c) */
    k->ar[0] = k->ar[1] = (struct pdshm_group_desc){.dtype = UINT32_MAX, .op = UINT16_MAX,
                                                    .kind = PDSHM_GK_NONE};
  }
  atomic_store(&g->size, size);
  atomic_store(&g->regrouped, round);
  PDSHM_CRASHPOINT("group.regroup.applied");
  atomic_store(&g->plan, 0);
  pdshm__gs_wake(g);
}

int pdshm__group_lock_until(pdshm_seg *seg, struct pdshm_group_rec *g, uint64_t deadline) {
  int rc = pdshm__lock_until(seg, PDSHM_LOCK_GROUPS, deadline);
  if (!rc) pdshm__group_settle(g);
  return rc;
}

uint64_t pdshm__group_lock_deadline(uint64_t deadline) {
  uint64_t grace = pdshm__now_ns(CLOCK_MONOTONIC) + GROUP_LOCK_GRACE_NS;
  return deadline > grace ? deadline : grace;
}

int pdshm__group_trylock(pdshm_seg *seg, struct pdshm_group_rec *g) {
  int rc = pdshm__trylock(seg, PDSHM_LOCK_GROUPS);
  if (!rc) pdshm__group_settle(g);
  return rc;
}

int pdshm__group_moved_to(struct pdshm_group_rec *g, uint64_t m, uint32_t from) {
  uint32_t size = atomic_load(&g->size);
  for (uint32_t r = 0; r < size; r++)
    if (g->rank[r].from == from && atomic_load(&g->rank[r].member) == m) return (int)r;
  return -1;
}
