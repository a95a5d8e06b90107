/*
 * varlock_held.c - this thread's table of the variable locks it holds, and
 * the hold records of our slot it takes them with: the one it keeps
 * reserved, and the others it claims.
 *
 * Owns: this thread's table of held variable locks (t->held in its block,
 * thread.c, and its top pdshm__vl_top) and its reserved hold record
 * (t->vl_reserved), and the choice of a free vl[] hold record of our slot
 * (layout.h).  What every lock and unlock runs of this is inline, in
 * varlock_held.h; the states a record goes through are varlock.c's
 * (invariant 2).
 *
 * Invariants:
 *  1. A thread keeps one record reserved (in the attachment it last took a
 *     lock in, unless the one it had is in use: struct pdshm_vl_reserved):
 *     CLAIMED between its takes, so that a take stores the variable, its
 *     generation and the state into it and claims nothing (varlock.c,
 *     vl_record), and a release stores CLAIMED rather than IDLE (vl_put).
 *     Being CLAIMED, it names nothing counted (varlock.c, invariant 2); the
 *     reaper of its slot (or the detach) makes it IDLE, and so does the
 *     thread's exit (thread.c's exit hook), after letting its holds go.
 *  2. This thread's holds (varlock.c, invariant 5) are kept in a table in
 *     its block (thread.c), which answers EDEADLK and EPERM; a fork child
 *     inherits the table but none of the holds, and an attachment none of a
 *     detached one's (entries carry the attachment's id; those of a detached
 *     attachment are freed when the table is full).  Entries are found by
 *     the record's address and generation, since a new variable may get an
 *     erased one's record: lock finds only a hold on the variable there now;
 *     unlock lets go of that one, else of a hold on an erased variable that
 *     was there.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include "model/model.h"
#include "model/varlock.h"
#include "model/varlock_held.h"

PDSHM_TLS_HOT unsigned pdshm__vl_top; /* varlock_held.h */
/* Where this thread looks first for a free record in its slot's vl[]: the
 * one it used last, still in its cache. */
static PDSHM_TLS_HOT unsigned vl_hint;

/* ---- the table ------------------------------------------------------------------------ */

static void vl_attached(pdshm_seg *seg, void *arg) {
  (void)seg;
  (void)arg;
}

/* A full table: the entries of attachments detached since are freed (the
 * detach let go of their holds); the first of them, or NULL. */
struct pdshm_held_lock *pdshm__vl_held_sweep(struct pdshm_thread *t) {
  struct pdshm_held_lock *free = NULL;
  for (unsigned i = 0; i < pdshm__vl_top; i++)
    if (!pdshm__seg_list_with(t->held[i].attach_id, vl_attached, NULL)) {
      t->held[i].var = NULL;
      if (!free) free = &t->held[i];
    }
  return free;
}

/* ---- our slot's records ---------------------------------------------------------------- */

/* varlock.c, invariant 2: a free record of our slot, CLAIMED and naming r:
 * its index in *out, the record itself in *rec. */
int pdshm__vl_claim(pdshm_seg *seg, const struct pdshm_var_rec *r, uint64_t gen, uint32_t *out,
                    struct pdshm_vl_hold **rec) {
  struct pdshm_vl_hold *vl = vl_rec(seg, seg->slot, 0);
  for (unsigned k = 0; k < PDSHM_VL_SLOT_HOLDS; k++) {
    uint32_t i = (vl_hint + k) % PDSHM_VL_SLOT_HOLDS, idle = PDSHM_VL_IDLE;
    struct pdshm_vl_hold *e = &vl[i];
    if (atomic_load_explicit(&e->state, memory_order_relaxed) != idle) continue;
    /* acquire: the thread of ours that let the record go (a release store
     * of IDLE) wrote var and gen before; ours come after */
    if (!atomic_compare_exchange_strong_explicit(&e->state, &idle, PDSHM_VL_CLAIMED,
                                                 memory_order_acquire, memory_order_relaxed))
      continue;
    vl_rec_name(e, pdshm__off(seg, r), gen);
    vl_hint = i;
    *out = i;
    *rec = e;
    return 0;
  }
  return pdshm__fail(PDSHM_ENOLCK, "this process holds %u variable locks", PDSHM_VL_SLOT_HOLDS);
}

/* ---- the reserved record ----------------------------------------------------------- */

struct vl_unreserving {
  uint32_t ent;
  bool in_use;
};

/* Nothing of an attachment that is not usable is read, not even where its
 * slot is: a fork child's inherited one may have no mapping left
 * (attach_inherit.c), where a read faults. */
static void vl_unreserve_in(pdshm_seg *seg, void *arg) {
  struct vl_unreserving *u = arg;
  if (pdshm__seg_usable(seg)) return;
  struct pdshm_vl_hold *e = vl_rec(seg, seg->slot, u->ent);
  if (atomic_load_explicit(&e->state, memory_order_relaxed) == PDSHM_VL_CLAIMED)
    vl_state(e, PDSHM_VL_IDLE);
  else
    u->in_use = true;
}

/* This thread's reserved record goes back to IDLE, and the thread keeps
 * none; unless it is in use by a hold (whose release makes it CLAIMED
 * again), when it stays reserved and false is answered.  Of an attachment
 * detached since (the detach freed it) or made before a fork (the
 * parent's), nothing is touched. */
bool pdshm__vl_unreserve(struct pdshm_thread *t) {
  struct pdshm_vl_reserved *rv = &t->vl_reserved;
  struct vl_unreserving u = {.ent = rv->ent};
  if (rv->attach_id) pdshm__seg_list_with(rv->attach_id, vl_unreserve_in, &u);
  if (u.in_use) return false;
  rv->attach_id = 0;
  return true;
}
