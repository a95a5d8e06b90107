/*
 * varlock_held.h - this thread's table of held variable locks, and a hold
 * record given back: what every lock and unlock runs, inline for varlock.c
 * (varlock_held.c's header comment says what the table keeps).
 */
#ifndef PDSHM_VARLOCK_HELD_H
#define PDSHM_VARLOCK_HELD_H

/* Layer 6 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 6
#error "model/varlock_held.h is layer 6, above the file that includes it (lib/LAYERS)"
#endif

#include "model/varlock.h"

/* This thread's held locks are in its block (thread.c):
 * t->held[0, pdshm__vl_top), which is a few entries for a thread holding a
 * few locks (a scan of all PDSHM_VL_HELD_MAX entries cost more than the lock
 * itself).  The block is made at the thread's first lock; while
 * pdshm__vl_top is 0 it is not looked at. */
extern PDSHM_TLS_HOT unsigned pdshm__vl_top;

/* ---- varlock_held.c ---- */
/* A full table: the entries of attachments detached since are freed; the
 * first of them, or NULL. */
struct pdshm_held_lock *pdshm__vl_held_sweep(struct pdshm_thread *t);
/* A free record of our slot in seg, CLAIMED and naming r of generation gen:
 * its index in *out, the record in *rec; ENOLCK when there is none. */
int pdshm__vl_claim(pdshm_seg *seg, const struct pdshm_var_rec *r, uint64_t gen, uint32_t *out,
                    struct pdshm_vl_hold **rec);
/* This thread's reserved record goes back to IDLE and the thread keeps
 * none: true; false, and it stays reserved, when a hold uses it. */
bool pdshm__vl_unreserve(struct pdshm_thread *t);

/* ---- the table, inline ---- */

/* This thread's entry for var of generation vgen (any generation when
 * any_gen) in attachment seg, or NULL; *hole, when asked for, gets the first
 * free entry below pdshm__vl_top (or NULL) on the same walk.  Entries made
 * before a fork are free in the child.  Another attachment's entries are
 * not: it may be attached still, with its holds (those of a detached one
 * are freed when the table is full, pdshm__vl_held_sweep). */
static inline struct pdshm_held_lock *vl_find_gen(const pdshm_seg *seg, const void *var,
                                                  uint64_t vgen, bool any_gen,
                                                  struct pdshm_held_lock **hole) {
  uint64_t gen = atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed);
  struct pdshm_held_lock *held = pdshm__vl_top ? pdshm__self->held : NULL, *free = NULL;
  for (unsigned i = 0; i < pdshm__vl_top; i++) {
    if (!held[i].var || held[i].forkgen != gen) {
      if (!free) free = &held[i];
    } else if (held[i].var == var && held[i].attach_id == seg->id &&
               (any_gen || held[i].gen == vgen)) {
      return &held[i];
    }
  }
  if (hole) *hole = free;
  return NULL;
}

static inline struct pdshm_held_lock *vl_find(const pdshm_seg *seg, const void *var) {
  return vl_find_gen(seg, var, 0, true, NULL);
}

/* This thread's entry for var of generation vgen, tried first at the top
 * of the table, where the last lock taken is (locks are mostly released in
 * the reverse order of their taking): no walk for the common unlock. */
static inline struct pdshm_held_lock *vl_find_held(const pdshm_seg *seg, const void *var,
                                                   uint64_t vgen) {
  if (!pdshm__vl_top) return NULL;
  struct pdshm_held_lock *top = &pdshm__self->held[pdshm__vl_top - 1];
  if (top->var == var && top->gen == vgen && top->attach_id == seg->id &&
      top->forkgen == atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed))
    return top;
  return vl_find_gen(seg, var, vgen, false, NULL);
}

/* A free entry: the hole vl_find_gen found below pdshm__vl_top, else the
 * one at pdshm__vl_top.  ENOLCK when the table is full, ENOMEM when the
 * thread's block cannot be made.  (The exit hook is set with the first
 * reserved record, varlock.c's vl_record, which every hold's take makes or
 * finds.) */
static inline int vl_held_free(struct pdshm_held_lock *hole, struct pdshm_held_lock **out) {
  struct pdshm_thread *t = pdshm__thread();
  if (!t) return pdshm__fail(PDSHM_ENOMEM, "out of private memory for this thread's lock table");
  struct pdshm_held_lock *h = hole;
  if (!h)
    h = pdshm__vl_top < PDSHM_VL_HELD_MAX ? &t->held[pdshm__vl_top++] : pdshm__vl_held_sweep(t);
  if (!h) return pdshm__fail(PDSHM_ENOLCK, "this thread holds %d variable locks", PDSHM_VL_HELD_MAX);
  *out = h;
  return 0;
}

static inline void vl_held_release(struct pdshm_held_lock *h) {
  h->var = NULL; /* all vl_find_gen looks at of a free entry */
  const struct pdshm_held_lock *held = pdshm__self->held;
  unsigned top = pdshm__vl_top;
  if (h != &held[top - 1]) return; /* a hole below the top */
  while (--top && !held[top - 1].var) {
  }
  pdshm__vl_top = top;
}

/* A record of ours goes back: to CLAIMED when it is this thread's reserved
 * one, else to IDLE. */
static inline void vl_put(struct pdshm_vl_hold *e, bool reserved) {
  vl_state(e, reserved ? PDSHM_VL_CLAIMED : PDSHM_VL_IDLE);
}

#endif /* PDSHM_VARLOCK_HELD_H */
