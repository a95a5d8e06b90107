/*
 * introspect_groups.c - pdshm_inspect_groups: the group registry as a reader
 * sees it.
 *
 * The list is followed in a snapshot of the blocks (introspect_snap.c): each
 * record must be a published GROUP block of the size it claims, the walk is
 * bounded by the number of GROUP blocks and stops at a cycle, and the member
 * words are read once each and judged as groups.h says (a member whose slot
 * lost its liveness lock is dead, reaped or not); seats past the size hold
 * candidates, counted, not listed.
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "inspect/inspect.h"

static void gi_member(pdshm_seg *seg, const struct pdshm_group_rank *rk,
                      pdshm_group_member_info *mi) {
  uint64_t m = atomic_load_explicit(&rk->member, memory_order_acquire);
  *mi = (pdshm_group_member_info){.arrived = atomic_load(&rk->arrived),
                                  .writing = atomic_load(&rk->writing) != 0};
  if (!m) return;
  mi->slot = (uint32_t)(m & 0xffff) - 1;
  if (mi->slot >= seg->hdr->max_procs) return; /* hostile: counted as free */
  bool live = pdshm__group_member_live(seg, m);
  mi->state = live ? PDSHM_MEMBER_ALIVE : PDSHM_MEMBER_DEAD;
  if (live) mi->pid = pdshm__slot(seg, mi->slot)->pid;
}

static int gi_one(pdshm_seg *seg, const struct pdshm_snap *snap, pdshm_off_t off,
                  pdshm_group_info *gi, pdshm_group_member_info *mi) {
  const struct pdshm_group_rec *g = pdshm__snap_want(snap, off, PDSHM_T_GROUP, sizeof *g);
  uint32_t size = g ? atomic_load(&g->size) : 0;
  if (!g || g->magic != PDSHM_GROUP_MAGIC || !size || size > g->cap || g->cap > PDSHM_GROUP_MAX ||
      !pdshm__snap_want(snap, off, PDSHM_T_GROUP, pdshm__group_bytes(g->cap)))
    return pdshm__fail(PDSHM_EBADSEG, "group record at %#llx is damaged", (unsigned long long)off);
  int rc = pdshm__snap_name(snap, g->name, gi->name);
  if (rc) return rc;
  uint64_t s = atomic_load(&g->state);
  gi->id = g->id;
  gi->size = size;
  gi->regrouped = atomic_load(&g->regrouped);
  gi->regroup_pending = (uint32_t)atomic_load(&g->plan);
  gi->round = PDSHM_GS_ROUND(s);
  gi->arrived = PDSHM_GS_ARRIVED(s);
  gi->broken = PDSHM_GS_BROKE(s);
  gi->timed_out = PDSHM_GS_TIMEO(s) & gi->broken;
  gi->created_ns = g->created_ns;
  gi->bytes = pdshm__snap_bytes(snap, off) + pdshm__snap_bytes(snap, g->name);
  gi->alive = gi->dead = 0;
  gi->candidates = 0;
  for (uint32_t r = 0; r < g->cap; r++) {
    gi_member(seg, &g->rank[r], &mi[r]);
    if (r >= size) {
      gi->candidates += mi[r].state == PDSHM_MEMBER_ALIVE;
      continue;
    }
    gi->alive += mi[r].state == PDSHM_MEMBER_ALIVE;
    gi->dead += mi[r].state == PDSHM_MEMBER_DEAD;
  }
  gi->members = mi;
  return 0;
}

struct gi_walk {
  pdshm_seg *seg;
  int (*fn)(const pdshm_group_info *gi, void *arg);
  void *arg;
  int fn_rc;
};

static int gi_once(void *argp) {
  struct gi_walk *w = argp;
  struct pdshm_snap snap = {0};
  int rc = pdshm__snap_take(w->seg, &snap);
  if (rc) return rc;
  pdshm_group_info *gi = pdshm__zalloc(sizeof *gi);
  pdshm_group_member_info *mi = pdshm__zalloc(PDSHM_GROUP_MAX * sizeof *mi);
  size_t bound = pdshm__snap_count(&snap, PDSHM_T_GROUP);
  if (!gi || !mi) rc = pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  pdshm_off_t off = atomic_load((_Atomic pdshm_off_t *)&w->seg->hdr->groups);
  for (size_t k = 0; !rc && off; k++) {
    if (k == bound) {
      rc = pdshm__fail(PDSHM_EBADSEG, "the group registry loops");
      break;
    }
    rc = gi_one(w->seg, &snap, off, gi, mi);
    if (!rc) off = pdshm__group_rec(w->seg, off)->next;
    if (!rc && (w->fn_rc = w->fn(gi, w->arg))) break;
  }
  pdshm__xfree(mi);
  pdshm__xfree(gi);
  pdshm__snap_free(&snap);
  return rc;
}

PDSHM_API int pdshm_inspect_groups(pdshm_seg *seg,
                                   int (*fn)(const pdshm_group_info *gi, void *arg), void *arg) {
  pdshm__fail_clear();
  int rc = pdshm__seg_usable(seg);
  if (rc) return rc;
  if (!fn) return pdshm__fail(PDSHM_EINVAL, "NULL callback");
  if (!pdshm__slots_sane(seg)) return pdshm__fail(PDSHM_EBADSEG, "process table is damaged");
  struct gi_walk w = {.seg = seg, .fn = fn, .arg = arg};
  rc = pdshm__inspect_retry(seg, gi_once, &w);
  return rc ? rc : w.fn_rc;
}
