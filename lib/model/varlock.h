/*
 * varlock.h - the variable lock's word (varlock.c's header comment says what
 * each field means), for the lock itself, its reaper (varlock_reap.c), the
 * table of this thread's holds (varlock_held.c) and the checker
 * (varlock_check.c); the walk over every slot's hold records that they and
 * varlock_bias.c scan with (VL_FOR_HOLDS); and what varlock.c lends them.
 */
#ifndef PDSHM_VARLOCK_H
#define PDSHM_VARLOCK_H

/* Layer 6 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 6
#error "model/varlock.h is layer 6, above the file that includes it (lib/LAYERS)"
#endif

#define VL_OWNER 0x1fffull
#define VL_FROZEN (1ull << 13)
#define VL_READER (1ull << 14)
#define VL_READERS (0xffffull << 14)
#define VL_RSLEEP (1ull << 30)
#define VL_WSLEEP (1ull << 31)
#define VL_BUSY (VL_OWNER | VL_FROZEN) /* what blocks a shared take        */
#define VL_SLEEPERS (VL_RSLEEP | VL_WSLEEP)
#define VL_TAG (0xffffffffull << 32)

#define VL_AS_WRITER 1u               /* futex bitsets: a waiter's class   */
#define VL_AS_READER 2u

_Static_assert(PDSHM_PROCS_MAX < VL_OWNER, "an owner's slot+1 fits bits 0-12");

/* Invariant 3: w is the word of the variable whose tag is `tag`. */
static inline bool vl_ours(uint64_t w, uint64_t tag) { return (w & VL_TAG) == tag; }

/* Hold record i of slot `slot` (varlock.c, invariant 2). */
static inline struct pdshm_vl_hold *vl_rec(const pdshm_seg *seg, uint32_t slot, uint32_t i) {
  return &pdshm__slot(seg, slot)->vl[i];
}

/* ---- the scans of every slot's hold records ---- */

/* A walk over the hold records of every slot that is not FREE, but slot
 * `except` (VL_NO_SLOT: none), for the scans of others' records (waiters,
 * recounts, writers revoking the bias, pdshm_check): each slot's state but
 * except's is read once (acquire, in it.sst) before its records, and a
 * FREE slot's records are not visited.  The records' states are the
 * callers' to read, in the order each needs:
 *   VL_FOR_HOLDS(it, seg, VL_NO_SLOT) { ... it.s, it.i, it.e ... }
 * A body's break ends the walk; vl_scan_pass_slot passes the rest of slot
 * it.s by. */
#define VL_NO_SLOT UINT32_MAX
#define VL_FOR_HOLDS(it, seg, except)                                                             \
  for (struct vl_scan it = vl_scan_of(seg, except); vl_scan_next(&it);)

struct vl_scan {
  const pdshm_seg *seg;
  uint32_t procs, except;
  uint32_t s, i;           /* the slot, and the record's index in it          */
  struct pdshm_vl_hold *e; /* that record                                     */
  uint32_t sst;            /* slot s's state, as read before its records      */
  int alive;               /* slot s's vl_scan_alive; -1 until asked          */
};

static inline struct vl_scan vl_scan_of(const pdshm_seg *seg, uint32_t except) {
  /* before slot 0, past the last record of a slot: the first step enters slot 0 */
  return (struct vl_scan){.seg = seg, .procs = seg->hdr->max_procs, .except = except,
                          .s = UINT32_MAX, .i = PDSHM_VL_SLOT_HOLDS - 1};
}

/* The next record (true), or the end of the walk. */
static inline bool vl_scan_next(struct vl_scan *it) {
  if (++it->i < PDSHM_VL_SLOT_HOLDS) {
    it->e++;
    return true;
  }
  while (++it->s < it->procs) {
    if (it->s == it->except) continue;
    struct pdshm_slot *sl = pdshm__slot(it->seg, it->s);
    it->sst = atomic_load_explicit(&sl->state, memory_order_acquire);
    if (it->sst == PDSHM_SLOT_FREE) continue;
    it->i = 0;
    it->e = sl->vl;
    it->alive = -1;
    return true;
  }
  return false;
}

/* The walk's next step goes to the next slot. */
static inline void vl_scan_pass_slot(struct vl_scan *it) { it->i = PDSHM_VL_SLOT_HOLDS - 1; }

/* Whether slot it->s's process lives (pdshm__slot_alive, an error counted
 * as alive): asked once a slot, and only when a caller needs it. */
static inline bool vl_scan_alive(struct vl_scan *it) {
  if (it->alive < 0) it->alive = pdshm__slot_alive(it->seg, it->s) != 0;
  return it->alive;
}

/* A record's variable and generation: stored by its own process's thread,
 * read by the scans of others (reapers, recounts, writers waiting for
 * uncounted shares), hence relaxed atomics, which cost plain moves; the
 * state's release store after them, and its acquire load before, order
 * them. */
static inline void vl_rec_name(struct pdshm_vl_hold *e, pdshm_off_t var, uint64_t gen) {
  __atomic_store_n(&e->var, var, __ATOMIC_RELAXED);
  __atomic_store_n(&e->gen, gen, __ATOMIC_RELAXED);
}
static inline pdshm_off_t vl_rec_var(const struct pdshm_vl_hold *e) {
  return __atomic_load_n(&e->var, __ATOMIC_RELAXED);
}
static inline uint64_t vl_rec_gen(const struct pdshm_vl_hold *e) {
  return __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
}
/* Whether record e names variable var of generation gen. */
static inline bool vl_rec_names(const struct pdshm_vl_hold *e, pdshm_off_t var, uint64_t gen) {
  return vl_rec_var(e) == var && vl_rec_gen(e) == gen;
}

/* A state of a share the word does not count (varlock_bias.c). */
static inline bool vl_uncounted(uint32_t st) { return st >= PDSHM_VL_TRYING; }

static inline void vl_state(struct pdshm_vl_hold *e, uint32_t st) {
  atomic_store_explicit(&e->state, st, memory_order_release);
}

/* After a read-modify-write that took away what waiters wait for and
 * cleared the sleep bits set in `cleared` (its old value, masked): one
 * writer (every writer when all_writers) and every reader. */
static inline void vl_wake(struct pdshm_var_rec *r, uint64_t cleared, bool all_writers) {
  _Atomic uint32_t *f = pdshm__futex_low(&r->lk);
  if (cleared & VL_WSLEEP) pdshm__futex_wake_bits(f, VL_AS_WRITER, all_writers ? INT32_MAX : 1);
  if (cleared & VL_RSLEEP) pdshm__futex_wake_bits(f, VL_AS_READER, INT32_MAX);
}

/* ---- varlock_bias.c: shared takes recorded, not counted ---- */
#define VL_BIAS_ON 1u /* r->lk_rbias: shared takes may go uncounted        */
/* Whether r's shared takes may go uncounted now: a sequentially
 * consistent load (varlock_bias.c, invariants 1 and 2), a plain one on
 * x86-64. */
static inline bool vl_biased(const struct pdshm_var_rec *r) {
  return atomic_load_explicit(&((struct pdshm_var_rec *)r)->lk_rbias, memory_order_seq_cst) ==
         VL_BIAS_ON;
}
/* Lets r's shared takes go uncounted unless a writer revoked that lately. */
void pdshm__vl_bias_allow(struct pdshm_var_rec *r);
/* By the exclusive owner of r (generation gen), after its CAS: when shared
 * takes may go uncounted, stops them and waits until every uncounted share
 * of a live process, but the caller's record `mine`, is gone. */
void pdshm__vl_bias_revoke(pdshm_seg *seg, struct pdshm_var_rec *r, uint64_t gen,
                           const struct pdshm_vl_hold *mine);
/* The uncounted shares of r held by live processes. */
uint64_t pdshm__vl_bias_readers(const pdshm_seg *seg, const struct pdshm_var_rec *r);

/* ---- varlock.c, for the reaper (varlock_reap.c) ---- */
/* Takes owner `who` (slot+1) off r's word of tag `tag`, with the sleep
 * bits, and wakes their sleepers (every writer when all_writers); false
 * when the word is not so held. */
bool pdshm__vl_release_owner(struct pdshm_var_rec *r, uint64_t tag, uint64_t who,
                             bool all_writers);
/* The process of slot s is gone and nobody reaps it now. */
bool pdshm__vl_slot_abandoned(pdshm_seg *seg, uint32_t s);
/* A waiter's pause in its round-th round: a spin at first, then sleeps of
 * a microsecond, then of 100. */
void pdshm__vl_pause(unsigned round);

#endif /* PDSHM_VARLOCK_H */
