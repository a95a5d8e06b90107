/*
 * group.c - the group registry: join, leave, the reaper's part.
 *
 * Owns: the list of GROUP records from hdr->groups and every rank's member
 * word (groups.h says what it means; the `reported` words are
 * group_break.c's).
 *
 * Invariants:
 *  1. The list, a record's next, and the member words change only under lock
 *     PDSHM_LOCK_GROUPS, in journals: a join or leave killed at any
 *     instruction is finished or rolled back by whoever takes the lock next.
 *     The one other change of member words, a regroup's, is a plan that
 *     whoever takes the lock next finishes (group_plan.c): every walk here
 *     settles a record before it looks at its seats (group_at).
 *  2. A record is on the list iff some seat (a rank, or a candidate's seat
 *     past the size: pdshm_group_enlist) is live or dead-unreaped; the
 *     journal that leaves none so (the last leave, the reap of the last
 *     member) unlinks and retires it, with its name.  Candidates are reaped
 *     like members, but a candidate's death breaks no round (it takes part
 *     in none).
 *  3. A death is announced once, under the lock, by whoever notices it
 *     first (group_break.c, invariant 1).
 *  4. A dead member's pins go (so that nobody writes a buffer the heap
 *     handed out again) only once no live member writes a collective, of any
 *     round, in a group where the member's word still holds a rank: its
 *     reaper marks the word (PDSHM_GM_DEAD), breaks its round, and then looks
 *     at the writers.  They stop within a chunk of the break, since no later
 *     round can reach its writing phase while the rank is dead.  Nobody waits
 *     for them while holding the lock: each look takes it, looks once, and
 *     lets it go.  A writer that does not stop in time (a stopped process:
 *     slow is not dead) makes the reaper give up (PDSHM_ETIMEDOUT) and leave
 *     the slot, pins and all, to the next reaper, which looks again.  A join
 *     that takes a dead member's rank over removes the word the reaper looks
 *     for, so it commits only after a look, under the lock, found no writer
 *     (it tries again until GROUP_TAKEOVER_NS has passed, then answers
 *     PDSHM_ETIMEDOUT): a writer that starts after that look sees its round
 *     broken and writes nothing, and later rounds write the new member's
 *     tensor.
 *  5. A leave waits for the groups lock GROUP_LEAVE_NS at most, and an
 *     enlist's withdrawal at its timeout 100 ms past it: a process stopped
 *     holding the lock stalls neither.  A membership that could not leave,
 *     or a candidacy that could not be withdrawn, keeps its seat and stays
 *     on the attachment's list (seg->groups), kept, its handle the
 *     caller's no more; the attachment's next join or enlist tries again,
 *     and so does detach, which, when it cannot either, leaves its slot as
 *     a dead process's (pdshm_detach): the reaper gives the seat up, as it
 *     does a death's, once it can take the lock.  A seat whose slot was
 *     given up FREE instead would keep its group on the list for ever
 *     (invariant 2: nobody reaps a FREE slot).
 */
#define PDSHM_LAYER 6 /* groups/ (lib/LAYERS) */
#include "config.h"

#include <string.h>
#include <time.h>

#include "groups/groups.h"

enum { GROUP_OP_JOIN = 0x4a47, GROUP_OP_LEAVE = 0x4c47, GROUP_OP_REAP = 0x5247 };

/* How long a join that takes a dead member's rank over tries to find its
 * group's writers stopped (invariant 4). */
#define GROUP_TAKEOVER_NS 1000000000ull
/* How long a leave waits for the groups lock (invariant 5). */
#define GROUP_LEAVE_NS 1000000000ull
/* group_join_locked: the rank to take over is not free yet; try again. */
#define GROUP_RETRY 1

uint64_t pdshm__group_my_member(pdshm_seg *seg) {
  uint64_t epoch = atomic_load(&pdshm__slot(seg, seg->slot)->epoch) & PDSHM_GM_EPOCH_MASK;
  return (uint64_t)seg->owner_tag | epoch << 16;
}

/* Live or dead but not yet reaped: the rank keeps the group on the list. */
static bool group_rank_held(uint64_t m) { return m && !(m & PDSHM_GM_DEAD); }

/* A record that is what it claims, or NULL (hostile bytes). */
static struct pdshm_group_rec *group_at(pdshm_seg *seg, pdshm_off_t off) {
  if (!pdshm__block_live(seg, off, PDSHM_T_GROUP, sizeof(struct pdshm_group_rec))) return NULL;
  struct pdshm_group_rec *g = pdshm__group_rec(seg, off);
  if (g->magic != PDSHM_GROUP_MAGIC || g->size == 0 || g->cap > PDSHM_GROUP_MAX ||
      g->size > g->cap || pdshm__group_bytes(g->cap) > pdshm__alloc_usable(seg, off) ||
      !pdshm__plan_sane(g, atomic_load(&g->plan)))
    return NULL;
  pdshm__group_settle(g); /* every caller holds the lock */
  return g;
}

int pdshm__group_find(pdshm_seg *seg, const char *name, size_t len, pdshm_off_t *found,
                      pdshm_off_t *link) {
  pdshm_off_t at = pdshm__off(seg, &seg->hdr->groups);
  uint64_t bound = pdshm__seg_end(seg) / sizeof(struct pdshm_group_rec);
  *found = 0;
  for (pdshm_off_t off = seg->hdr->groups; off; bound--) {
    struct pdshm_group_rec *g = group_at(seg, off);
    if (!g || !bound) return pdshm__fail(PDSHM_EBADSEG, "the group registry is damaged");
    const struct pdshm_name *nm = pdshm__name_at(seg, g->name);
    if (nm && nm->len == len && !memcmp(nm->s, name, len)) {
      *found = off;
      *link = at;
      return 0;
    }
    at = PDSHM_FOFF(seg, g, next);
    off = g->next;
  }
  return 0;
}

/* Journaled: a new record for `name`, at the head of the list. */
static int group_create(pdshm_seg *seg, struct pdshm_lane_ctx *ln, const char *name, size_t len,
                        uint32_t size, pdshm_off_t *out) {
  pdshm_off_t nm, off;
  int rc = pdshm__name_new(seg, ln, name, len, &nm);
  if (!rc) rc = pdshm__j_alloc(seg, ln, pdshm__group_bytes(PDSHM_GROUP_MAX), PDSHM_T_GROUP, &off);
  if (rc) return rc;
  struct pdshm_group_rec *g = pdshm__group_rec(seg, off);
  memset(g, 0, pdshm__group_bytes(PDSHM_GROUP_MAX));
  *g = (struct pdshm_group_rec){.magic = PDSHM_GROUP_MAGIC, .size = size, .name = nm,
                                .cap = PDSHM_GROUP_MAX,
                                .next = seg->hdr->groups, .id = pdshm__new_id(seg, ln),
                                .created_ns = pdshm__now_ns(CLOCK_REALTIME)};
  atomic_store(&g->state, 1); /* round 1: an arrival word of 0 is "none" */
  PDSHM_CRASHPOINT("group.create.built");
  pdshm__j_set(seg, ln, pdshm__off(seg, &seg->hdr->groups), off);
  *out = off;
  return 0;
}

/* Lock held: does a live member wait in a regroup of the current round? */
static bool group_regrouping(pdshm_seg *seg, struct pdshm_group_rec *g) {
  uint32_t round = PDSHM_GS_ROUND(atomic_load(&g->state));
  for (uint32_t r = 0; r < g->size; r++)
    if (atomic_load(&g->rank[r].arrived) == round &&
        g->rank[r].ar[round & 1].kind == PDSHM_GK_REGROUP &&
        pdshm__group_member_live(seg, atomic_load(&g->rank[r].member)))
      return true;
  return false;
}

/* Lock held: the rank to take, or a negative code. */
static int group_pick(pdshm_seg *seg, struct pdshm_group_rec *g, int rank) {
  if (group_regrouping(seg, g))
    return pdshm__fail(PDSHM_EBUSY, "the group's members are regrouping: no rank to take");
  if (rank >= 0) {
    if ((uint32_t)rank >= g->size)
      return pdshm__fail(PDSHM_EINVAL, "rank %d of a group of %u", rank, g->size);
    if (pdshm__group_member_live(seg, atomic_load(&g->rank[rank].member)))
      return pdshm__fail(PDSHM_EBUSY, "rank %d is held by a live member", rank);
    return rank;
  }
  for (uint32_t r = 0; r < g->size; r++)
    if (!pdshm__group_member_live(seg, atomic_load(&g->rank[r].member))) return (int)r;
  return pdshm__fail(PDSHM_EUSERS, "every rank of the group is held by a live member");
}

/* Lock held, journaled: the join; GROUP_RETRY when the rank to take over is
 * not free yet and the deadline has not passed. */
static int group_join_locked(pdshm_seg *seg, struct pdshm_lane_ctx *ln, const char *name,
                             size_t len, unsigned size, int rank, uint64_t deadline,
                             struct pdshm_group *gr) {
  pdshm_off_t off, link;
  int rc = pdshm__group_find(seg, name, len, &off, &link);
  if (!rc && !off) rc = group_create(seg, ln, name, len, size, &off);
  if (rc) return rc;
  struct pdshm_group_rec *g = pdshm__group_rec(seg, off);
  if (g->size != size)
    return pdshm__fail(PDSHM_EINVAL, "group \"%s\" has %u members, not %u", name, g->size, size);
  int r = group_pick(seg, g, rank);
  if (r < 0) return r;
  uint64_t old = atomic_load(&g->rank[r].member);
  if (old) { /* a takeover: invariants 3 and 4 (the reaper may come later) */
    pdshm__group_announce(g, (uint32_t)r, old);
    if (pdshm__round_writing(seg, g, 0, -1))
      return pdshm__now_ns(CLOCK_MONOTONIC) < deadline
                 ? GROUP_RETRY
                 : pdshm__fail(PDSHM_ETIMEDOUT,
                               "rank %d of group \"%s\" is not free yet: a live member still "
                               "writes a collective its dead holder took part in (stopped?)",
                               r, name);
  }
  *gr = (struct pdshm_group){.seg = seg, .rec = off, .rank = (uint32_t)r, .size = size,
                             .member = pdshm__group_my_member(seg)};
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, g, rank[r].member), gr->member);
  return 0;
}

int pdshm__group_args(pdshm_seg *seg, const char *name, pdshm_group **out, size_t *len) {
  if (!seg || !out) return pdshm__fail(PDSHM_EINVAL, "NULL segment or result");
  *out = NULL;
  int rc = pdshm__seg_writable(seg);
  return rc ? rc : pdshm__name_check(name, false, len);
}

PDSHM_API int pdshm_group_join(pdshm_seg *seg, const char *name, unsigned size, int rank,
                               pdshm_group **out) {
  pdshm__fail_clear();
  size_t len;
  int rc = pdshm__group_args(seg, name, out, &len);
  if (rc) return rc;
  if (size == 0 || size > PDSHM_GROUP_MAX)
    return pdshm__fail(PDSHM_EINVAL, "a group has 1 to %u members, not %u", PDSHM_GROUP_MAX, size);
  if (rank >= (int)size) return pdshm__fail(PDSHM_EINVAL, "rank %d of a group of %u", rank, size);
  struct pdshm_group *gr = pdshm__zalloc(sizeof *gr);
  if (!gr) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  uint64_t deadline = pdshm__now_ns(CLOCK_MONOTONIC) + GROUP_TAKEOVER_NS;
  pdshm__group_give_up_kept(seg, deadline);
  do {
    struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
    rc = pdshm__j_begin_until(seg, ln, PDSHM_LOCK_GROUPS, GROUP_OP_JOIN, deadline);
    if (!rc) {
      rc = group_join_locked(seg, ln, name, len, size, rank, deadline, gr);
      if (rc) pdshm__j_abort(seg, ln);
      else {
        PDSHM_CRASHPOINT("group.join.ready");
        pdshm__j_commit(seg, ln);
      }
    }
    pdshm__lane_put(ln);
    if (rc == GROUP_RETRY) pdshm__round_pause();
  } while (rc == GROUP_RETRY);
  if (rc) {
    pdshm__xfree(gr);
    return rc;
  }
  /* Our rank cannot arrive anywhere without us: the current round is ours. */
  gr->round = PDSHM_GS_ROUND(atomic_load(&pdshm__group_rec(seg, gr->rec)->state));
  pdshm__group_list(seg, gr);
  *out = gr;
  return 0;
}

void pdshm__group_list(pdshm_seg *seg, struct pdshm_group *gr) {
  pthread_mutex_lock(&seg->reap_mu);
  gr->next = seg->groups;
  seg->groups = gr;
  pthread_mutex_unlock(&seg->reap_mu);
}

PDSHM_API int pdshm_group_rank(const pdshm_group *g) {
  return g ? (int)g->rank : pdshm__fail(PDSHM_EINVAL, "NULL group");
}
PDSHM_API int pdshm_group_size(const pdshm_group *g) {
  return g ? (int)g->size : pdshm__fail(PDSHM_EINVAL, "NULL group");
}

/* Invariant 2: candidates' seats count. */
int pdshm__group_set_member(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t off,
                            uint32_t r, uint64_t to) {
  struct pdshm_group_rec *g = pdshm__group_rec(seg, off);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, g, rank[r].member), to);
  for (uint32_t k = 0; k < g->cap; k++)
    if (k != r && group_rank_held(atomic_load(&g->rank[k].member))) return 0;
  if (group_rank_held(to)) return 0;
  const struct pdshm_name *nm = pdshm__name_at(seg, g->name);
  pdshm_off_t found = 0, link = 0;
  int rc = nm ? pdshm__group_find(seg, nm->s, nm->len, &found, &link) : PDSHM_EBADSEG;
  if (rc || found != off) return PDSHM_EBADSEG;
  pdshm__j_set(seg, ln, link, g->next);
  pdshm__j_retire(seg, ln, g->name);
  pdshm__j_retire(seg, ln, off);
  return 1;
}

int pdshm__group_vacate(pdshm_seg *seg, struct pdshm_lane_ctx *ln, const struct pdshm_group *gr,
                        const char *point) {
  int rc = pdshm__group_set_member(seg, ln, gr->rec, gr->rank, 0);
  if (rc < 0) {
    pdshm__j_abort(seg, ln);
    return rc;
  }
  PDSHM_CRASHPOINT(point);
  pdshm__j_commit(seg, ln);
  return 0;
}

/* Lock held, settled: a regroup gr could not end (group_regroup.c,
 * invariant 5) withdrawn if its round is still current, or gr moved to the
 * seat its plan gave it; a candidacy that could not be withdrawn
 * (invariant 5) moved to the rank a regroup admitted it to, if one did;
 * false when a plan gave it no seat. */
static bool group_leave_pending(struct pdshm_group_rec *g, struct pdshm_group *gr) {
  if (gr->size == 0) { /* a kept candidacy (group_regroup.c: size 0 until admitted) */
    if (atomic_load(&g->regrouped) == gr->regrouped) return true; /* still a candidate */
  } else {
    if (!gr->regroup_pending || pdshm__round_withdraw(g, gr->rank, gr->round)) return true;
    if (atomic_load(&g->regrouped) != gr->round) return true; /* ended otherwise: same seat */
  }
  int seat = pdshm__group_moved_to(g, gr->member, gr->rank);
  if (seat < 0) return false;
  gr->rank = (uint32_t)seat;
  return true;
}

static int group_leave_one(pdshm_seg *seg, struct pdshm_group *gr, uint64_t deadline) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  int rc = pdshm__j_begin_until(seg, ln, PDSHM_LOCK_GROUPS, GROUP_OP_LEAVE, deadline);
  if (!rc) {
    struct pdshm_group_rec *g = pdshm__group_rec(seg, gr->rec);
    pdshm__group_settle(g);
    if (!group_leave_pending(g, gr) || atomic_load(&g->rank[gr->rank].member) != gr->member) {
      pdshm__j_abort(seg, ln); /* taken over after we were given up for dead, or no seat left
                                  to us by the plan of a regroup we were pending in */
    } else {
      rc = pdshm__group_vacate(seg, ln, gr, "group.leave.ready");
    }
  }
  pdshm__lane_put(ln);
  return rc;
}

static void group_unlist(pdshm_seg *seg, struct pdshm_group *gr) {
  pthread_mutex_lock(&seg->reap_mu);
  for (struct pdshm_group **p = &seg->groups; *p; p = &(*p)->next)
    if (*p == gr) {
      *p = gr->next;
      break;
    }
  pthread_mutex_unlock(&seg->reap_mu);
}

/* gr, off the attachment's list, left and freed: 0 or the error; or
 * PDSHM_ETIMEDOUT, gr kept as it is (invariant 5). */
static int group_leave_free(pdshm_seg *seg, struct pdshm_group *gr, uint64_t deadline) {
  int rc = group_leave_one(seg, gr, deadline);
  if (rc == PDSHM_ETIMEDOUT) return rc;
  if (!rc) pdshm__group_unpin(gr); /* else detach drops it, with the process's other pins */
  pdshm__xfree(gr);
  return rc;
}

PDSHM_API int pdshm_group_leave(pdshm_group *gr) {
  pdshm__fail_clear();
  if (!gr) return pdshm__fail(PDSHM_EINVAL, "NULL group");
  pdshm_seg *seg = gr->seg;
  int rc = pdshm__seg_writable(seg);
  group_unlist(seg, gr);
  if (rc) { /* detach drops its pin, with the process's other pins */
    pdshm__xfree(gr);
    return rc;
  }
  rc = group_leave_free(seg, gr, pdshm__now_ns(CLOCK_MONOTONIC) + GROUP_LEAVE_NS);
  if (rc == PDSHM_ETIMEDOUT) { /* invariant 5 */
    gr->kept = true;
    pdshm__group_list(seg, gr);
    return pdshm__fail(rc, "the groups lock stayed held for 1 s (its holder stopped?): the "
                           "rank is given up by this attachment's next join, enlist or "
                           "detach, or after it by the reaper");
  }
  return rc;
}

void pdshm__group_give_up_kept(pdshm_seg *seg, uint64_t deadline) {
  struct pdshm_group *kept = NULL;
  pthread_mutex_lock(&seg->reap_mu);
  for (struct pdshm_group **p = &seg->groups; *p;) {
    struct pdshm_group *gr = *p;
    if (!gr->kept) {
      p = &gr->next;
      continue;
    }
    *p = gr->next;
    gr->next = kept;
    kept = gr;
  }
  pthread_mutex_unlock(&seg->reap_mu);
  while (kept) {
    struct pdshm_group *gr = kept;
    kept = gr->next;
    if (group_leave_free(seg, gr, deadline) == PDSHM_ETIMEDOUT) pdshm__group_list(seg, gr);
  }
}

bool pdshm__group_leave_all(pdshm_seg *seg) {
  uint64_t deadline = pdshm__now_ns(CLOCK_MONOTONIC) + GROUP_LEAVE_NS;
  bool left = true;
  while (seg->groups) {
    struct pdshm_group *gr = seg->groups;
    seg->groups = gr->next;
    if (pdshm__seg_writable(seg)) { /* nothing this attachment may change: the copy goes */
      pdshm__xfree(gr);
    } else if (group_leave_free(seg, gr, deadline) == PDSHM_ETIMEDOUT) {
      left = false; /* the seat goes with the slot, to the reaper (pdshm_detach) */
      pdshm__xfree(gr);
    }
  }
  return left;
}

/* ---- the reaper's part ------------------------------------------------------ */

/* Lock held, journaled: marks slot's member of one group dead (the first
 * group that has one); 1 when it did, 0 when no group has one. */
static int group_reap_one(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint32_t slot) {
  uint64_t bound = pdshm__seg_end(seg) / sizeof(struct pdshm_group_rec);
  for (pdshm_off_t off = seg->hdr->groups; off; bound--) {
    struct pdshm_group_rec *g = group_at(seg, off);
    if (!g || !bound) return pdshm__fail(PDSHM_EBADSEG, "the group registry is damaged");
    for (uint32_t r = 0; r < g->cap; r++) { /* candidates too */
      uint64_t m = atomic_load(&g->rank[r].member);
      if (!group_rank_held(m) || (m & 0xffff) != slot + 1) continue;
      if (r < g->size) pdshm__group_announce(g, r, m); /* breaks the round, wakes them */
      int rc = pdshm__group_set_member(seg, ln, off, r, m | PDSHM_GM_DEAD);
      return rc < 0 ? rc : 1;
    }
    off = g->next;
  }
  return 0;
}

/* Lock held: the first group where member word m (marked dead or not)
 * holds a rank and a live member writes; 0 when none, or EBADSEG. */
static int group_writing_beside(pdshm_seg *seg, uint64_t m, struct pdshm_group_rec **busy) {
  uint64_t bound = pdshm__seg_end(seg) / sizeof(struct pdshm_group_rec);
  *busy = NULL;
  for (pdshm_off_t off = seg->hdr->groups; off; bound--) {
    struct pdshm_group_rec *g = group_at(seg, off);
    if (!g || !bound) return pdshm__fail(PDSHM_EBADSEG, "the group registry is damaged");
    for (uint32_t r = 0; r < g->size; r++)
      if ((atomic_load(&g->rank[r].member) & ~PDSHM_GM_DEAD) == m &&
          pdshm__round_writing(seg, g, 0, -1)) {
        *busy = g;
        return 0;
      }
    off = g->next;
  }
  return 0;
}

/* Invariant 4: 0 once no live member writes beside dead slot `slot`'s
 * member words; PDSHM_ETIMEDOUT when one still does at the deadline. */
static int group_writers_stopped(pdshm_seg *seg, uint32_t slot, uint64_t deadline) {
  uint64_t epoch = atomic_load(&pdshm__slot(seg, slot)->epoch) & PDSHM_GM_EPOCH_MASK;
  uint64_t m = (uint64_t)(slot + 1) | epoch << 16;
  for (;;) {
    int rc = pdshm__lock_until(seg, PDSHM_LOCK_GROUPS, deadline);
    if (rc == PDSHM_ETIMEDOUT)
      return pdshm__fail(rc, "dead slot %u is left to the next reaper: the groups lock stayed "
                             "held until the deadline (its holder stopped?)", slot);
    if (rc) return rc;
    struct pdshm_group_rec *busy;
    rc = group_writing_beside(seg, m, &busy);
    if (busy && pdshm__now_ns(CLOCK_MONOTONIC) >= deadline) {
      const struct pdshm_name *nm = pdshm__name_at(seg, busy->name);
      rc = pdshm__fail(PDSHM_ETIMEDOUT,
                       "dead slot %u is left to the next reaper: a live member of group "
                       "\"%.*s\" still writes a collective it took part in (stopped?)",
                       slot, nm ? (int)nm->len : 0, nm ? nm->s : "");
    }
    pdshm__unlock(seg, PDSHM_LOCK_GROUPS);
    if (rc || !busy) return rc;
    pdshm__round_pause();
  }
}

int pdshm__group_reap_slot(pdshm_seg *seg, uint32_t slot, struct pdshm_lane_ctx *ln,
                           uint64_t deadline) {
  /* A holder of the lock that stopped leaves the slot to the next reaper,
   * as a stopped writer does; a live one lets go within the grace. */
  uint64_t until = pdshm__group_lock_deadline(deadline);
  for (;;) {
    int rc = pdshm__j_begin_until(seg, ln, PDSHM_LOCK_GROUPS, GROUP_OP_REAP, until);
    if (rc) return rc;
    rc = group_reap_one(seg, ln, slot);
    if (rc <= 0) {
      pdshm__j_abort(seg, ln);
      return rc ? rc : group_writers_stopped(seg, slot, deadline);
    }
    PDSHM_CRASHPOINT("group.reap.ready");
    pdshm__j_commit(seg, ln);
  }
}
