/*
 * varlock.c - pdshm_var_lock: a shared/exclusive lock on a variable, built
 * from one robust mutex, so that a holder's death never blocks anyone.
 *
 * Owns: a variable's lock entry (r->lock, claimed on first use), its
 * lk_readers / lk_wwait fields, HOLD blocks, and this thread's table of held
 * variable locks.
 *
 * Invariants:
 *  1. Exclusive = holding the mutex with lk_readers == 0.  The mutex is
 *     robust, so an exclusive holder's death hands it to the next taker.
 *  2. Shared holders do not hold the mutex: each one owns a HOLD block
 *     (owner = its slot, never published) naming the variable, and
 *     lk_readers counts them; both change together in one journal under the
 *     mutex.  A dead reader's HOLD blocks are found by its reaper, which drops
 *     each share the same way.
 *  3. A writer waiting for readers to drain does not hold the mutex while it
 *     sleeps; it marks lk_wwait with its slot and epoch so new readers back
 *     off (for a bounded time; and not at all once that slot is dead or taken
 *     again: a writer that died waiting must not slow readers), and it reaps
 *     dead processes now and then, since a dead reader's share only goes
 *     away when someone reaps it.
 *  4. pthread mutexes are per thread: a thread unlocks what it locked.  This
 *     thread's holds are kept in a table in its block (thread.c), which
 *     answers EDEADLK and EPERM; a fork child inherits the table but none of
 *     the holds.  An entry remembers the lock-table entry it took, and
 *     unlock lets go of that one.  Entries are found by the record's address
 *     and generation, since a new variable may get an erased one's record:
 *     lock finds only a hold on the variable there now; unlock lets go of
 *     that one, else of a hold on an erased variable that was there.
 *  5. The variable may be erased by another process while a thread holds or
 *     waits for its lock (erase takes the scope's lock, not this one), and
 *     the lock-table entry given back and claimed for another variable.  So
 *     each time the mutex is taken the record is checked to be a live
 *     variable still bound to that entry (vl_bound); one that is not gets
 *     ESTALE, and its fields (readers, waiting writer, version) are written
 *     only while it is.  A thread that holds an entry through an erased
 *     variable gets EDEADLK for another variable the entry now guards,
 *     rather than waiting for itself.
 */
#include "config.h"

#include <string.h>
#include <time.h>

#include "model_int.h"

#define VL_READER_BACKOFF 2000   /* rounds a reader defers to a waiting writer */
#define VL_REAP_EVERY_NS 10000000ull /* a waiting writer reaps every 10 ms     */

/* This thread's held locks are in its block (thread.c): t->held[0, vl_top),
 * which is a few entries for a thread holding a few locks (a scan of all
 * PDSHM_VL_HELD_MAX entries cost more than the lock itself).  The block is
 * made at the thread's first lock; while vl_top is 0 it is not looked at. */
static PDSHM_TLS_HOT unsigned vl_top;

/* This thread's entry for var of generation vgen (any generation when
 * any_gen), or (var NULL) a free one; entries made before a fork are free
 * in the child. */
static struct pdshm_held_lock *vl_find_gen(const void *var, uint64_t vgen, bool any_gen) {
  uint64_t gen = atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed);
  struct pdshm_held_lock *held = vl_top ? pdshm__self->held : NULL;
  for (unsigned i = 0; i < vl_top; i++) {
    bool live = held[i].var && held[i].forkgen == gen;
    if (live ? held[i].var == var && (any_gen || held[i].gen == vgen) : !var) return &held[i];
  }
  return NULL;
}

static struct pdshm_held_lock *vl_find(const void *var) { return vl_find_gen(var, 0, true); }

/* A free entry: a hole below vl_top, else the one at vl_top.  ENOLCK when
 * the table is full, ENOMEM when the thread's block cannot be made. */
static int vl_slot_free(struct pdshm_held_lock **out) {
  struct pdshm_thread *t = pdshm__thread();
  if (!t) return pdshm__fail(PDSHM_ENOMEM, "out of private memory for this thread's lock table");
  struct pdshm_held_lock *h = vl_find(NULL);
  if (!h && vl_top < PDSHM_VL_HELD_MAX) h = &t->held[vl_top++];
  if (!h) return pdshm__fail(PDSHM_ENOLCK, "this thread holds %d variable locks", PDSHM_VL_HELD_MAX);
  *out = h;
  return 0;
}

static void vl_release(struct pdshm_held_lock *h) {
  memset(h, 0, sizeof *h);
  while (vl_top && !pdshm__self->held[vl_top - 1].var) vl_top--;
}

/* Invariant 5, with lk held: r is a live variable and lk is its entry. */
static bool vl_bound(pdshm_seg *seg, const struct pdshm_var_rec *r, uint32_t lk) {
  const struct pdshm_lock *l = pdshm__lockent(seg, lk);
  return pdshm__var_scope_lock(seg, r) && __atomic_load_n(&r->lock, __ATOMIC_ACQUIRE) == lk &&
         l->guards == r->self &&
         atomic_load_explicit(&((struct pdshm_lock *)l)->alloc, memory_order_acquire) ==
             PDSHM_LOCK_PUBLISHED;
}

/* r is still the USED variable record our HOLD names (its generation is
 * compared by the caller), also while an erase of it is under way: its block
 * then carries the eraser's tag until the commit frees it, and a share
 * counted on it must be given back even if that erase is rolled back. */
static bool vl_same_record(const pdshm_seg *seg, const struct pdshm_var_rec *r) {
  const struct pdshm_blk *b = pdshm__blk(seg, r->self);
  uint64_t w = atomic_load_explicit(&((struct pdshm_blk *)b)->word, memory_order_acquire);
  return r->self == pdshm__off(seg, r) && pdshm__blk_state(w) == PDSHM_BLK_USED &&
         b->type == PDSHM_T_VAR && r->magic == PDSHM_VAR_MAGIC;
}

/* This thread's hold on entry lk, through whatever variable. */
static bool vl_holds_entry(uint32_t lk) {
  uint64_t gen = atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed);
  const struct pdshm_held_lock *held = vl_top ? pdshm__self->held : NULL;
  for (unsigned i = 0; i < vl_top; i++)
    if (held[i].var && held[i].forkgen == gen && held[i].lock == lk) return true;
  return false;
}

static int vl_stale(pdshm_seg *seg, uint32_t lk) {
  pdshm__unlock(seg, lk);
  return pdshm__fail(PDSHM_ESTALE, "variable was erased");
}

static void vl_pause(unsigned round) {
  if (round < 64) {
    pdshm__cpu_relax();
    return;
  }
  long ns = round < 1024 ? 1000 : 100000;
  nanosleep(&(struct timespec){0, ns}, NULL);
}

/* The variable's lock entry, claimed (in a journal under the scope's lock)
 * the first time anyone locks it. */
static int vl_entry(pdshm_seg *seg, struct pdshm_var_rec *r, uint32_t *out) {
  uint64_t idx = __atomic_load_n(&r->lock, __ATOMIC_ACQUIRE);
  if (idx) {
    *out = (uint32_t)idx;
    return 0;
  }
  uint32_t lk;
  int rc = pdshm__lock_claim(seg, PDSHM_LK_VAR, r->self, &lk);
  if (rc) return rc;
  PDSHM_CRASHPOINT("varlock.entry.claimed");
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  rc = pdshm__var_j_begin(seg, ln, r, PDSHM_OP_VARLOCK);
  bool first = !rc && !r->lock;
  if (first) {
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, lock), lk);
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, pdshm__lockent(seg, lk), alloc), PDSHM_LOCK_PUBLISHED);
    pdshm__j_commit(seg, ln);
  } else if (!rc) { /* somebody else was first */
    pdshm__j_abort(seg, ln);
  }
  if (!first) pdshm__lock_unclaim(seg, lk); /* ours is not needed, or could not be published */
  pdshm__lane_put(ln);
  *out = (uint32_t)r->lock;
  return rc;
}

/* ---- shared ----------------------------------------------------------------------- */

/* With the mutex held: one more share, recorded in a HOLD block; unlocks. */
/* Takes r's scope lock (a variable's lock comes first in the lock order)
 * so that no erase can free r while a share is counted on it or given back:
 * 0 with *sl held while r is a live variable, else ESTALE or a lock error
 * with *sl 0 (nothing held). */
static int vl_hold_scope(pdshm_seg *seg, const struct pdshm_var_rec *r, uint32_t *sl) {
  uint32_t lk = pdshm__var_scope_lock(seg, r);
  *sl = 0;
  if (!lk) return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  int rc = pdshm__lock(seg, lk);
  if (rc) return rc;
  if (!pdshm__var_live_locked(seg, r, lk)) {
    pdshm__unlock(seg, lk);
    return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  }
  *sl = lk;
  return 0;
}

/* With the mutex held: one more share, recorded in a HOLD block; unlocks.
 * The count is written under the scope lock too: an erase running beside
 * it could otherwise free r and let the journal's store land in the next
 * variable made there, a count no holder would ever give back. */
static int vl_share(pdshm_seg *seg, struct pdshm_var_rec *r, uint32_t lk, pdshm_off_t *hold) {
  uint32_t sl;
  int rc = vl_hold_scope(seg, r, &sl);
  if (rc) {
    pdshm__unlock(seg, lk);
    return rc;
  }
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  pdshm__j_begin_locked(seg, ln, lk, PDSHM_OP_VARLOCK);
  rc = pdshm__j_alloc_keep(seg, ln, sizeof(struct pdshm_handle_rec), PDSHM_T_HOLD, hold);
  if (rc) {
    pdshm__j_abort(seg, ln);
  } else {
    struct pdshm_handle_rec *h = PDSHM_AT(seg->base, *hold, struct pdshm_handle_rec);
    h->gen = r->gen;
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, h, scope), r->self); /* the variable */
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, lk_readers), r->lk_readers + 1);
    pdshm__j_commit(seg, ln);
  }
  pdshm__lane_put(ln);
  pdshm__unlock(seg, sl);
  return rc;
}

/* What a waiting writer leaves in lk_wwait: who it is. */
static uint64_t vl_writer_mark(pdshm_seg *seg) {
  return (seg->slot + 1u) | atomic_load(&pdshm__slot(seg, seg->slot)->epoch) << 16;
}

/* Invariant 3: a writer that died waiting (its slot dead, or taken again
 * since) no longer makes readers back off.  The var lock is held. */
static bool vl_writer_waits(pdshm_seg *seg, struct pdshm_var_rec *r) {
  uint64_t w = r->lk_wwait, s = (w & 0xffff) - 1;
  if (!w) return false;
  if (s < seg->hdr->max_procs && w >> 16 == atomic_load(&pdshm__slot(seg, (uint32_t)s)->epoch) &&
      pdshm__slot_alive(seg, (uint32_t)s) != 0)
    return true;
  r->lk_wwait = 0;
  return false;
}

static int vl_lock_shared(pdshm_seg *seg, struct pdshm_var_rec *r, uint32_t lk,
                          pdshm_off_t *hold) {
  for (unsigned round = 0;; round++) {
    int rc = pdshm__lock(seg, lk);
    if (rc) return rc;
    if (!vl_bound(seg, r, lk)) return vl_stale(seg, lk);
    if (round >= VL_READER_BACKOFF || !vl_writer_waits(seg, r)) return vl_share(seg, r, lk, hold);
    pdshm__unlock(seg, lk);
    vl_pause(round);
  }
}

/* Drops the share HOLD block h gives (ln's slot owns h); the count is the
 * variable's only while h's variable is still r, bound to lk (invariant 5). */
static int vl_unshare(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_var_rec *r,
                      uint32_t lk, pdshm_off_t h) {
  int rc = pdshm__j_begin(seg, ln, lk, PDSHM_OP_VARLOCK);
  if (rc) return rc;
  const struct pdshm_handle_rec *hr = PDSHM_AT(seg->base, h, struct pdshm_handle_rec);
  uint32_t sl = 0; /* held while r is the variable our share is counted on */
  bool ours = hr->scope == r->self && hr->gen == r->gen && vl_same_record(seg, r) &&
              vl_hold_scope(seg, r, &sl) == 0 && hr->gen == r->gen;
  pdshm__j_retire_kept(seg, ln, h);
  if (ours && r->lk_readers) pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, lk_readers), r->lk_readers - 1);
  pdshm__j_commit(seg, ln);
  if (sl) pdshm__unlock(seg, sl);
  return 0;
}

/* ---- exclusive ---------------------------------------------------------------------- */

static int vl_lock_excl(pdshm_seg *seg, struct pdshm_var_rec *r, uint32_t lk) {
  uint64_t next_reap = 0;
  for (unsigned round = 0;; round++) {
    int rc = pdshm__lock(seg, lk);
    if (rc) return rc;
    if (!vl_bound(seg, r, lk)) return vl_stale(seg, lk);
    if (!r->lk_readers) {
      if (r->lk_wwait) r->lk_wwait = 0; /* no store (no dirty line) when clear */
      PDSHM_CRASHPOINT("varlock.excl.held");
      return 0;
    }
    r->lk_wwait = vl_writer_mark(seg);
    PDSHM_CRASHPOINT("varlock.excl.waiting");
    pdshm__unlock(seg, lk);
    uint64_t now = pdshm__now_ns(CLOCK_MONOTONIC);
    if (now >= next_reap) { /* invariant 3: a dead reader may be what we wait for */
      if (next_reap) pdshm__slot_reap_dead(seg);
      next_reap = now + VL_REAP_EVERY_NS;
    }
    vl_pause(round);
  }
}

/* ---- the API ------------------------------------------------------------------------- */

PDSHM_API int pdshm_var_lock(pdshm_var *v, int exclusive) {
  int rc;
  uint32_t lk;
  pdshm__fail_clear();
  pdshm_seg *seg = pdshm__var_seg(v, &rc);
  if (!seg) return rc;
  struct pdshm_var_rec *r = pdshm__var_rec(v);
  struct pdshm_held_lock *held = vl_find_gen(r, r->gen, false);
  if (held && (held->excl || exclusive))
    return pdshm__fail(PDSHM_EDEADLK, "this thread already holds the lock of \"%s\"",
                       pdshm_var_name(v));
  if (held) {
    held->count++;
    return 0;
  }
  if ((rc = vl_slot_free(&held))) return rc;
  pdshm_off_t hold = 0;
  if (!(rc = vl_entry(seg, r, &lk)) && vl_holds_entry(lk))
    rc = pdshm__fail(PDSHM_EDEADLK, "this thread holds lock entry %u through an erased variable",
                     lk);
  if (!rc)
    rc = exclusive ? vl_lock_excl(seg, r, lk) : vl_lock_shared(seg, r, lk, &hold);
  if (rc) {
    vl_release(held); /* the entry stays free */
    return rc;
  }
  *held = (struct pdshm_held_lock){.var = r, .gen = r->gen, .hold = hold, .count = 1, .lock = lk,
                                   .excl = exclusive != 0,
                                   .forkgen = atomic_load(&pdshm__forkgen)};
  return 0;
}

PDSHM_API int pdshm_var_unlock(pdshm_var *v) {
  int rc;
  pdshm__fail_clear();
  pdshm_seg *seg = pdshm__var_seg(v, &rc);
  if (!seg) return rc;
  struct pdshm_var_rec *r = pdshm__var_rec(v);
  /* The hold on the variable at r now, else one on an erased one that was
   * there (invariant 5). */
  struct pdshm_held_lock *held = vl_find_gen(r, r->gen, false);
  if (!held) held = vl_find(r);
  if (!held) return pdshm__fail(PDSHM_EPERM, "this thread does not hold that variable's lock");
  if (!held->excl && --held->count) return 0;
  uint32_t lk = held->lock; /* invariant 4 */
  if (held->excl) {
    bool bound = vl_bound(seg, r, lk); /* else the variable was erased: only unlock */
    if (bound) atomic_fetch_add_explicit(&r->version, 1, memory_order_release);
    PDSHM_CRASHPOINT("varlock.excl.bumped");
    pdshm__unlock(seg, lk);
    if (bound) pdshm__futex_wake(pdshm__futex_low(&r->version), &r->vwaiters);
  } else {
    struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
    rc = vl_unshare(seg, ln, r, lk, held->hold);
    pdshm__lane_put(ln);
  }
  vl_release(held);
  return rc;
}

/* Reaper: the share a dead process's HOLD block h gives back. */
int pdshm__varlock_drop_hold(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t h) {
  const struct pdshm_handle_rec *hr = PDSHM_AT(seg->base, h, struct pdshm_handle_rec);
  pdshm_varref ref = {.off = hr->scope, .gen = hr->gen};
  pdshm_var *v = pdshm_varref_get(seg, ref);
  if (!v || !pdshm__var_rec(v)->lock) return 0; /* the variable is gone: the sweep frees h */
  return vl_unshare(seg, ln, pdshm__var_rec(v), (uint32_t)pdshm__var_rec(v)->lock, h);
}
