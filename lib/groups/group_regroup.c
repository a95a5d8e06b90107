/*
 * group_regroup.c - groups that shrink and grow: pdshm_group_regroup, the
 * live members' collective that drops the ranks of dead (or left) members
 * and admits the candidates, and pdshm_group_enlist, a newcomer's wait to be
 * admitted.  The plan it decides is applied by group_plan.c.
 *
 * A regroup takes one round R of the group (group_round.c):
 *   1. each caller describes "regroup" for R and arrives (such an arrival
 *      never completes the round: only a plan ends it completed);
 *   2. under lock PDSHM_LOCK_GROUPS, settled, any waiter looks at the seats:
 *      when every live rank has arrived at R for a regroup, it plans the new
 *      seats (the live ranks in the order of their ranks, then the live
 *      candidates in the order of their seats) and applies the plan, which
 *      ends R; when a live rank arrived at R for something else (a barrier, a
 *      collective), it withdraws and answers EINVAL; when its deadline
 *      passed, it withdraws and answers ETIMEDOUT (a stopped member stalls
 *      the others no longer than their timeout; nothing changed; nor does a
 *      process stopped holding the lock: invariant 5);
 *   3. once R ended, each caller, under the lock, reads its new seat: R
 *      ended by a plan (`regrouped` == R) is the success; R broken (a death
 *      announced meanwhile) is passed again, at R+1, until the deadline; R
 *      completed otherwise (a barrier's arrival was the last) is EINVAL.
 * Invariants:
 *  1. Arrivals and withdrawals count in the state as for any round, but a
 *     regroup withdraws under the lock, so a plan (made under it) never
 *     counts a member that is withdrawing.
 *  2. A plan is made only while every live rank has arrived at R for a
 *     regroup: none of them writes a collective, or arrives anywhere else,
 *     until it has read its new seat, so the seats can move under it.
 *  3. A dead rank's word leaves the seats with the plan: its reaper finds no
 *     group it took part in, and its pins go (nobody writes, by 2).
 *  4. A candidate holds a seat >= size (a member word, under the lock,
 *     journaled) and never arrives: its death or stop stalls nobody; a dead
 *     candidate is dropped by the next plan, a stopped one is admitted (and
 *     then waited for as any stopped member is).  A join (takeover) while
 *     members wait in a regroup is refused (group.c), so that no new rank
 *     appears in the round they wait to complete.
 *  5. A regroup never waits for the lock past its deadline (and a grace,
 *     within which a live holder lets go): one that cannot take it then (its
 *     holder stopped) cannot withdraw (invariant 1), so it stays arrived at
 *     R and answers ETIMEDOUT with its membership's `regroup_pending` set.
 *     Its next pdshm_group_regroup goes on at R without arriving again; its
 *     barriers and collectives answer EBUSY meanwhile (they would arrive at
 *     the round it is in); pdshm_group_leave, under the lock, withdraws it,
 *     or leaves the seat a plan gave it (group.c).
 */
#define PDSHM_LAYER 6 /* groups/ (lib/LAYERS) */
#include "config.h"

#include <time.h>

#include "groups/groups.h"

#define SLICE_NS 5000000 /* 5 ms between two looks at the seats */
enum { GROUP_OP_ENLIST = 0x4547, GROUP_OP_UNLIST = 0x5547 };

/* What a look at the seats of round R found (step 2). */
enum { RG_WAIT, RG_PLANNED, RG_MIXED };

static void rg_plan_seat(struct pdshm_group_rec *g, uint32_t to, uint32_t from, uint64_t m) {
  g->rank[to].planned = m;
  g->rank[to].planned_from = from;
}

/* Lock held, settled: step 2's look, and the plan when every live rank is
 * there (invariant 2). */
static int rg_decide(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t round) {
  uint32_t size = atomic_load(&g->size), n = 0;
  bool missing = false;
  for (uint32_t r = 0; r < size; r++) {
    struct pdshm_group_rank *k = &g->rank[r];
    uint64_t m = atomic_load(&k->member);
    if (!pdshm__group_member_live(seg, m)) continue; /* dropped */
    if (atomic_load(&k->arrived) != round) missing = true;
    else if (k->ar[round & 1].kind != PDSHM_GK_REGROUP) return RG_MIXED;
    rg_plan_seat(g, n++, r, m); /* n <= r: seats not read again */
  }
  if (missing) return RG_WAIT;
  for (uint32_t r = size; r < g->cap; r++) {
    uint64_t m = atomic_load(&g->rank[r].member);
    if (pdshm__group_member_live(seg, m)) rg_plan_seat(g, n++, r, m);
  }
  atomic_store(&g->plan, pdshm__plan_word(round, n));
  PDSHM_CRASHPOINT("group.regroup.planned");
  pdshm__group_settle(g);
  return RG_PLANNED;
}

/* Invariant 5: the lock taken and g settled, or PDSHM_ETIMEDOUT with the
 * regroup left pending, or the lock's error. */
static int rg_lock(struct pdshm_group *gr, struct pdshm_group_rec *g, uint64_t deadline) {
  int rc = pdshm__group_lock_until(gr->seg, g, pdshm__group_lock_deadline(deadline));
  if (rc != PDSHM_ETIMEDOUT) return rc;
  gr->regroup_pending = true;
  return pdshm__fail(rc, "the groups lock stayed held past the timeout (its holder stopped?): "
                         "this process is still in the regroup, which its next "
                         "pdshm_group_regroup goes on with");
}

/* Step 2: 0 once round R ended, ETIMEDOUT or EINVAL withdrawn, or rg_lock's
 * error. */
static int rg_wait(struct pdshm_group *gr, struct pdshm_group_rec *g, uint32_t round,
                   uint64_t deadline) {
  for (;;) {
    if (PDSHM_GS_ROUND(atomic_load(&g->state)) != round) return 0;
    int rc = rg_lock(gr, g, deadline);
    if (rc) return rc;
    int look = RG_PLANNED;
    if (PDSHM_GS_ROUND(atomic_load(&g->state)) == round) look = rg_decide(gr->seg, g, round);
    bool late = look == RG_WAIT && pdshm__now_ns(CLOCK_MONOTONIC) >= deadline;
    if (look == RG_MIXED || late) {
      if (pdshm__round_withdraw(g, gr->rank, round)) {
        PDSHM_CRASHPOINT("group.regroup.withdrawn");
        pdshm__round_no_tensor(gr); /* no stale "regroup" (group_plan.c) */
        rc = late ? pdshm__fail(PDSHM_ETIMEDOUT, "a live member did not come to the regroup")
                  : pdshm__fail(PDSHM_EINVAL, "a member came to the regroup's round with a "
                                              "barrier or a collective");
      }
      look = RG_PLANNED; /* withdrawn, or the round ended: either way, done */
    }
    pdshm__unlock(gr->seg, PDSHM_LOCK_GROUPS);
    if (look != RG_WAIT) return rc;
    uint64_t left = deadline - pdshm__now_ns(CLOCK_MONOTONIC);
    pdshm__round_sleep(g, round, left < SLICE_NS ? (int64_t)left : SLICE_NS);
  }
}

/* Step 3, round R ended: 0 with gr's new rank and size, or how R ended, or
 * rg_lock's error. */
static int rg_after(struct pdshm_group *gr, struct pdshm_group_rec *g, uint32_t round,
                    uint64_t deadline) {
  int rc = rg_lock(gr, g, deadline);
  if (rc) return rc;
  bool planned = atomic_load(&g->regrouped) == round;
  uint32_t size = atomic_load(&g->size);
  int seat = planned ? pdshm__group_moved_to(g, gr->member, gr->rank)
             : atomic_load(&g->rank[gr->rank].member) == gr->member ? (int)gr->rank
                                                                     : -1;
  if (!planned && seat >= 0) /* no stale "regroup" (group_plan.c) */
    g->rank[seat].ar[round & 1] =
        (struct pdshm_group_desc){.dtype = UINT32_MAX, .op = UINT16_MAX, .kind = PDSHM_GK_NONE};
  pdshm__unlock(gr->seg, PDSHM_LOCK_GROUPS);
  gr->round = round + 1;
  if (seat < 0)
    return pdshm__fail(PDSHM_ESTALE, "this process no longer holds a rank of the group");
  gr->rank = (uint32_t)seat;
  gr->size = size;
  if (planned) return 0;
  rc = pdshm__round_outcome(atomic_load(&g->state), round);
  return rc ? rc
            : pdshm__fail(PDSHM_EINVAL, "a member passed the regroup's round with a barrier");
}

PDSHM_API int pdshm_group_regroup(pdshm_group *gr, int64_t timeout_ns, int *rank, int *size) {
  pdshm__fail_clear();
  if (!gr || !rank || !size) return pdshm__fail(PDSHM_EINVAL, "NULL group or result");
  int rc = pdshm__seg_writable(gr->seg);
  if (rc) return rc;
  struct pdshm_group_rec *g = pdshm__group_rec(gr->seg, gr->rec);
  uint64_t deadline = pdshm__round_deadline(timeout_ns);
  do {
    uint32_t round = gr->round;
    if (!gr->regroup_pending) { /* invariant 5: else arrived already */
      g->rank[gr->rank].ar[round & 1] = (struct pdshm_group_desc){
          .dtype = UINT32_MAX, .op = UINT16_MAX, .kind = PDSHM_GK_REGROUP};
      pdshm__round_arrive(g, gr->rank, round);
    }
    gr->regroup_pending = false;
    rc = rg_wait(gr, g, round, deadline);
    if (!rc) rc = rg_after(gr, g, round, deadline);
    /* broken by a death announced meanwhile: every caller passes the next
     * round the same way, and the dead rank goes with it */
  } while (rc == PDSHM_EOWNERDEAD && pdshm__now_ns(CLOCK_MONOTONIC) < deadline);
  if (rc == PDSHM_EOWNERDEAD) /* nothing pending: the next call regroups at the next round */
    return pdshm__fail(PDSHM_ETIMEDOUT, "deaths broke the regroup's rounds until the timeout");
  if (rc) return rc;
  *rank = (int)gr->rank;
  *size = (int)gr->size;
  return 0;
}

/* ---- candidates ------------------------------------------------------------- */

/* Journaled, lock held: a free candidate seat of group `name` takes our word. */
static int en_register(pdshm_seg *seg, struct pdshm_lane_ctx *ln, const char *name, size_t len,
                       struct pdshm_group *gr) {
  pdshm_off_t off, link;
  int rc = pdshm__group_find(seg, name, len, &off, &link);
  if (rc) return rc;
  if (!off) return pdshm__fail(PDSHM_ENOENT, "no group \"%s\" to enlist in", name);
  struct pdshm_group_rec *g = pdshm__group_rec(seg, off);
  for (uint32_t r = atomic_load(&g->size); r < g->cap; r++)
    if (!pdshm__group_member_live(seg, atomic_load(&g->rank[r].member))) {
      *gr = (struct pdshm_group){.seg = seg, .rec = off, .rank = r,
                                 .member = pdshm__group_my_member(seg),
                                 .regrouped = atomic_load(&g->regrouped)};
      pdshm__j_set(seg, ln, PDSHM_FOFF(seg, g, rank[r].member), gr->member);
      return 0;
    }
  return pdshm__fail(PDSHM_EUSERS, "group \"%s\" has no seat left for a candidate", name);
}

/* Journaled: our candidate seat emptied (the record goes if it was the last
 * seat held), unless a regroup came first (*waiting false).  0, or an error:
 * PDSHM_ETIMEDOUT when the groups lock stayed held 100 ms past the enlist's
 * deadline (the seat kept). */
static int en_withdraw(pdshm_seg *seg, struct pdshm_group *gr, uint64_t deadline,
                       bool *waiting) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  int rc = pdshm__j_begin_until(seg, ln, PDSHM_LOCK_GROUPS, GROUP_OP_UNLIST,
                                pdshm__group_lock_deadline(deadline));
  if (!rc) {
    struct pdshm_group_rec *g = pdshm__group_rec(seg, gr->rec);
    pdshm__group_settle(g);
    *waiting = atomic_load(&g->regrouped) == gr->regrouped;
    if (*waiting && atomic_load(&g->rank[gr->rank].member) == gr->member) {
      rc = pdshm__group_vacate(seg, ln, gr, "group.enlist.withdraw");
    } else {
      pdshm__j_abort(seg, ln); /* admitted meanwhile */
    }
  }
  pdshm__lane_put(ln);
  return rc;
}

/* Under the lock, when it is free: our seat, and when it is a rank, the
 * membership ready; *admitted false when the lock is held (the next slice
 * looks again). */
static int en_look(pdshm_seg *seg, struct pdshm_group *gr, bool *admitted) {
  struct pdshm_group_rec *g = pdshm__group_rec(seg, gr->rec);
  int rc = pdshm__group_trylock(seg, g);
  *admitted = false;
  if (rc == PDSHM_EBUSY) return 0;
  if (rc) return rc;
  *admitted = atomic_load(&g->regrouped) != gr->regrouped; /* invariant 4: every live one */
  int seat = *admitted ? pdshm__group_moved_to(g, gr->member, gr->rank) : (int)gr->rank;
  bool ours = seat >= 0 && atomic_load(&g->rank[seat].member) == gr->member;
  if (*admitted && ours) {
    gr->rank = (uint32_t)seat;
    gr->size = atomic_load(&g->size);
    /* the round after the regroup, as the members': a death that broke it
     * is told to us too, so that we regroup with them */
    gr->round = atomic_load(&g->regrouped) + 1;
  }
  pdshm__unlock(seg, PDSHM_LOCK_GROUPS);
  if (!ours) return pdshm__fail(PDSHM_ESTALE, "the candidate's seat was taken from it");
  return 0;
}

/* Waits to be admitted: 0, ETIMEDOUT (withdrawn, or gr->kept when the
 * withdrawal could not take the lock: a candidate cannot give its seat up
 * without it, since a plan may be admitting it), or an error. */
static int en_wait(pdshm_seg *seg, struct pdshm_group *gr, uint64_t deadline) {
  struct pdshm_group_rec *g = pdshm__group_rec(seg, gr->rec);
  for (;;) {
    uint32_t round = PDSHM_GS_ROUND(atomic_load(&g->state));
    bool admitted;
    int rc = en_look(seg, gr, &admitted);
    if (rc || admitted) return rc;
    uint64_t now = pdshm__now_ns(CLOCK_MONOTONIC);
    if (now >= deadline) {
      bool waiting;
      rc = en_withdraw(seg, gr, deadline, &waiting);
      if (rc == PDSHM_ETIMEDOUT) gr->kept = true;
      if (rc) return rc;
      if (!waiting) continue; /* admitted after all: the look says where */
      return pdshm__fail(PDSHM_ETIMEDOUT, "no regroup admitted the candidate in time");
    }
    pdshm__round_sleep(g, round, deadline - now < SLICE_NS ? (int64_t)(deadline - now) : SLICE_NS);
  }
}

PDSHM_API int pdshm_group_enlist(pdshm_seg *seg, const char *name, int64_t timeout_ns,
                                 pdshm_group **out) {
  pdshm__fail_clear();
  size_t len;
  int rc = pdshm__group_args(seg, name, out, &len);
  if (rc) return rc;
  struct pdshm_group *gr = pdshm__zalloc(sizeof *gr);
  if (!gr) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  uint64_t deadline = pdshm__round_deadline(timeout_ns),
           locked_by = pdshm__group_lock_deadline(deadline);
  pdshm__group_give_up_kept(seg, locked_by);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  rc = pdshm__j_begin_until(seg, ln, PDSHM_LOCK_GROUPS, GROUP_OP_ENLIST, locked_by);
  if (!rc) {
    rc = en_register(seg, ln, name, len, gr);
    if (rc) pdshm__j_abort(seg, ln);
    else {
      PDSHM_CRASHPOINT("group.enlist.ready");
      pdshm__j_commit(seg, ln);
    }
  }
  pdshm__lane_put(ln);
  if (!rc) rc = en_wait(seg, gr, deadline);
  if (rc && gr->kept) { /* group.c, invariant 5 */
    pdshm__group_list(seg, gr);
    return pdshm__fail(rc, "no regroup admitted the candidate in time, and the groups lock "
                           "stayed held (its holder stopped?): its seat is given up by this "
                           "attachment's next join, enlist or detach, or after it by the "
                           "reaper");
  }
  if (rc) {
    pdshm__xfree(gr);
    return rc;
  }
  pdshm__group_list(seg, gr);
  *out = gr;
  return 0;
}
