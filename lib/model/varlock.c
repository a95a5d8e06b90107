/*
 * varlock.c - pdshm_var_lock: a shared/exclusive lock on a variable, one
 * 64-bit word of its record, whose holder's death never blocks anyone.
 *
 * Owns: a variable's lk and lk_wwait fields (records.h), and the states a
 * take and a release store in the vl[] hold records of the process slots
 * (layout.h).  This thread's table of held variable locks, its reserved
 * record and the claiming of a free one are varlock_held.c's; a dead slot's
 * records are given back by varlock_reap.c; shares the word does not count,
 * and a writer's wait for them, are varlock_bias.c's.
 *
 * The word, r->lk (the version sits beside it: one 16-byte pair):
 *   bits  0-12  owner: slot+1 of the exclusive holder; while FROZEN, slot+1
 *               of the dead slot whose reaper recounts the readers
 *   bit  13     FROZEN: a reaper recounts the shared holders
 *               (varlock_reap.c, invariant 2)
 *   bits 14-29  shared holders
 *   bit  30     RSLEEP: a reader may sleep on the word (futex.c, inv. 4)
 *   bit  31     WSLEEP: a writer may sleep on the word
 *   bits 32-63  TAG: the variable's generation (pdshm__varlock_tag), set when
 *               the record is made and never changed (invariant 3)
 * The low half is the futex word.  A waiter spins a little first (vl_spin),
 * then sets its class's bit before it sleeps, as a writer or a reader (a
 * futex bitset).  Whoever takes away what
 * waiters wait for clears the bits in the same read-modify-write and, for
 * each that was set, wakes: an owner leaving, one writer and every reader;
 * the last reader leaving, one writer (readers do not wait for readers); a
 * thaw, everyone.  A writer that slept and takes the lock sets WSLEEP again,
 * since other writers may still sleep: its release wakes the next.  So a
 * hand-off costs one wake, and a release nobody waits for none.
 *
 * Invariants:
 *  1. Exclusive = owner set; then readers are 0 and the word is not FROZEN.
 *     Uncontended, lock is one CAS (0 -> owner) and unlock one 16-byte CAS
 *     that clears the owner and bumps the version (invariant 3), whose old
 *     value tells whether there is anyone to wake.
 *  2. Every hold, and every take or release in flight, is recorded in a
 *     struct pdshm_vl_hold of the holder's slot, written only by that
 *     process: CLAIMED (naming the variable and its generation) before the
 *     word is touched, then EXCL before an exclusive CAS; TAKING before a
 *     shared one and HELD after it; RELEASING before the shared release's
 *     CAS and IDLE after it (CLAIMED when the record is the thread's
 *     reserved one: varlock_held.c, invariant 1).  A shared take the word
 *     does not count is TRYING, then VISIBLE while it holds, and touches no
 *     word (varlock_bias.c).  State stores are
 *     releases and the word's CASes read-modify-writes, so whoever changes
 *     the word after a CAS sees the state its taker stored before it.  A
 *     CLAIMED record names nothing counted: reapers, recounts, waiters and
 *     pdshm_check pass it by as an idle one.  A dead process's locks are
 *     given back from its records (varlock_reap.c).
 *  3. A variable erased while held or waited for, its record freed and
 *     perhaps made again as another variable: every change to the word is a
 *     compare-and-swap from a value read with this variable's TAG, so a lock,
 *     unlock, undo, reap, freeze or thaw through a stale record changes
 *     nobody else's word (a new variable's word has another TAG; a block
 *     reused for anything else would have to hold, at that place, the very
 *     value read).  The exclusive release swaps the word and the version in
 *     one 16-byte compare-and-swap (cpu.h), so the bump cannot land on a
 *     successor either.  A shared release never takes a share the word does
 *     not count (readers 0).  A take whose CAS landed on a variable erased
 *     since undoes it (a CAS against the same TAG: after a reuse there is
 *     nothing of ours to undo) and returns ESTALE; so does any call that
 *     reads another TAG.  The TAG does not prove the variable live: an
 *     erased variable's block may keep its word until it is reused, and a
 *     CAS on it then succeeds; so a take checks the record (vl_same) after
 *     its CAS, and before it, lest a handle to a long-erased variable CAS
 *     whatever its block holds now.  The version moves in the owner's
 *     leaving CAS because a variable may be erased, and its record made
 *     again as another one, while it is held: a bump of its own would land
 *     on the successor's version.
 *  4. Writer preference: a writer waiting for readers to drain marks
 *     lk_wwait with its slot and epoch, and new readers back off for a
 *     bounded time, and not at all once that slot is dead or taken again (a
 *     writer that died waiting must not slow readers).  It reaps now and
 *     then, since a dead reader's share only goes away when someone reaps it.
 *  5. Holds are per thread: a thread unlocks what it locked, and what it
 *     still holds when it exits is let go then (thread.c's exit hook).
 *     This thread's holds are kept in a table in its block (varlock_held.c,
 *     invariant 2), which answers EDEADLK and EPERM.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <sched.h>
#include <time.h>

#include "model/model.h"
#include "model/varlock.h"
#include "model/varlock_held.h"

#define VL_SPIN_NS 2000ull            /* a taker spins this long, then     */
#define VL_SPIN_YIELDS 4              /* yields so often on a few cores,   */
#define VL_FEW_CPUS 4                 /* (fewer than this), then sleeps    */
#define VL_SLICE_MIN_NS 250000ll      /* a first sleep; then liveness is   */
#define VL_SLICE_NS 2000000ll         /* checked, and the sleep doubles    */
#define VL_REAP_EVERY_NS 10000000ull  /* a writer blocked by readers reaps */
#define VL_READER_BACKOFF 2000        /* rounds a reader defers to a writer */

/* Invariant 3: r is still the live variable of generation gen. */
static bool vl_same(const pdshm_seg *seg, const struct pdshm_var_rec *r, uint64_t gen) {
  return pdshm__block_still(seg, pdshm__off(seg, r), PDSHM_T_VAR) &&
         r->magic == PDSHM_VAR_MAGIC && r->gen == gen;
}

/* ---- a take's hold record ------------------------------------------------------- */

static void vl_thread_exit(struct pdshm_thread *t);

/* A record of our slot for this thread's take of r: its reserved one
 * (varlock_held.c, invariant 1) when it is CLAIMED (not in use by another
 * hold of this thread), else one claimed now (pdshm__vl_claim), which
 * becomes the reserved one when there is none in seg.  Its index in *out,
 * the record in *rec, naming r and gen; *reserved says which.  The reserved one is the attachment's by its id alone: seg
 * took pdshm__var_seg's checks, which refuse a handle inherited through a
 * fork, and ids are not reused (struct pdshm_vl_reserved). */
static int vl_record(pdshm_seg *seg, const struct pdshm_var_rec *r, uint64_t gen, uint32_t *out,
                     struct pdshm_vl_hold **rec, bool *reserved) {
  struct pdshm_thread *t = pdshm__self;
  bool mine = t->vl_reserved.attach_id == seg->id;
  struct pdshm_vl_hold *e = mine ? vl_rec(seg, seg->slot, t->vl_reserved.ent) : NULL;
  if (e && atomic_load_explicit(&e->state, memory_order_relaxed) == PDSHM_VL_CLAIMED) {
    vl_rec_name(e, pdshm__off(seg, r), gen); /* published by the state's release store after */
    *out = t->vl_reserved.ent;
    *rec = e;
    *reserved = true;
    return 0;
  }
  *reserved = false;
  int rc = pdshm__vl_claim(seg, r, gen, out, rec);
  if (rc || mine || !pdshm__vl_unreserve(t)) return rc; /* kept: another attachment's, in use */
  if (!atomic_load_explicit(&pdshm__thread_exit_hook, memory_order_relaxed))
    atomic_store(&pdshm__thread_exit_hook, vl_thread_exit); /* frees it, and lets go */
  t->vl_reserved = (struct pdshm_vl_reserved){.attach_id = seg->id, .ent = *out};
  *reserved = true;
  return 0;
}

/* ---- waiting ----------------------------------------------------------------------- */

/* The process of slot s is gone and nobody reaps it now: its lock is free
 * while its state is not FREE. */
bool pdshm__vl_slot_abandoned(pdshm_seg *seg, uint32_t s) {
  if (s == seg->slot || s >= seg->hdr->max_procs) return false;
  if (atomic_load_explicit(&pdshm__slot(seg, s)->state, memory_order_acquire) == PDSHM_SLOT_FREE)
    return false;
  return pdshm__slot_alive(seg, s) == 0;
}

/* Invariant 2 read backwards, for a waiter whose wait no death explains:
 * the holders word w names are not in any slot's records (an owner with no
 * EXCL record of this variable, a recount by a slot nobody holds, more
 * shares than every slot's records of it), and w is still the word.  The
 * waiter's own record, mine, explains nothing.  Only damaged bytes make that
 * so; the waiter then answers EBADSEG rather than wait for ever.  (Two
 * waiters of one process on a word that names their slot as owner each see
 * the other's EXCL record, which may be a holder's: they keep waiting.) */
static bool vl_unexplained(pdshm_seg *seg, struct pdshm_var_rec *r, uint64_t gen, uint64_t w,
                           const struct pdshm_vl_hold *mine) {
  uint32_t procs = seg->hdr->max_procs, who = (uint32_t)(w & VL_OWNER);
  if (who > procs) return atomic_load_explicit(&r->lk, memory_order_acquire) == w;
  uint64_t shares = 0;
  bool owner_recorded = false, owner_slot_used = false;
  VL_FOR_HOLDS(it, seg, VL_NO_SLOT) {
    owner_slot_used |= it.s + 1u == who; /* the walk passes FREE slots by */
    uint32_t st = atomic_load_explicit(&it.e->state, memory_order_acquire);
    if (st < PDSHM_VL_TAKING || vl_uncounted(st) || it.e == mine ||
        !vl_rec_names(it.e, r->self, gen))
      continue;
    if (st == PDSHM_VL_EXCL) owner_recorded |= it.s + 1u == who;
    else shares++;
  }
  bool bad = (w & VL_FROZEN) ? !who || !owner_slot_used
                             : (who && !owner_recorded) || (w & VL_READERS) / VL_READER > shares;
  return bad && atomic_load_explicit(&r->lk, memory_order_acquire) == w;
}

struct vl_waiter {
  uint64_t spin_end;  /* CLOCK_MONOTONIC ns; 0 before this spin's first look     */
  unsigned yields;    /* of this spin                                              */
  bool no_spin;       /* sleeps at once (a frozen word: a recount takes long)      */
  uint32_t as;        /* VL_AS_WRITER or VL_AS_READER                              */
  bool slept;         /* a writer's take then sets WSLEEP: its release wakes the next */
  int64_t slice;      /* the next sleep's bound, ns (0: VL_SLICE_MIN_NS)             */
  uint64_t next_reap; /* CLOCK_MONOTONIC ns; 0 before the first timed-out sleep */
};

/* The machine has fewer than VL_FEW_CPUS processors online: a spinner then
 * most likely keeps the holder it waits for off a processor. */
static bool vl_few_cpus(void) { return pdshm__cpus_online() < VL_FEW_CPUS; }

/* Before a sleep, a taker spins for VL_SPIN_NS (a hand-off mostly comes in
 * far less; a futex sleep and its wake cost tens of microseconds), then,
 * on a machine of few processors, yields VL_SPIN_YIELDS times, which lets
 * a holder that shares our processor run; true while it spins. */
static bool vl_spin(struct vl_waiter *wt) {
  if (wt->no_spin) return false;
  uint64_t now = pdshm__now_ns(CLOCK_MONOTONIC);
  if (!wt->spin_end) wt->spin_end = now + VL_SPIN_NS;
  if (now < wt->spin_end) {
    for (int i = 0; i < 8; i++) pdshm__cpu_relax();
    return true;
  }
  if (wt->yields < VL_SPIN_YIELDS && vl_few_cpus()) {
    wt->yields++;
    sched_yield();
    return true;
  }
  return false;
}

/* One wait of a taker that the word w stops: spins a little (vl_spin), then sets its
 * class's sleep bit and sleeps on the low half in slices.  After a slice that timed
 * out it reaps when the word names an abandoned slot (an owner, or a
 * reaper's frozen recount), or, stopped by readers alone, every
 * VL_REAP_EVERY_NS (a dead reader's share).  ESTALE when the variable is
 * gone (w is another's word, or the record no longer the variable),
 * EBADSEG when no record explains w (vl_unexplained; mine is the caller's
 * record); 0 to look at the word again. */
static int vl_wait(pdshm_seg *seg, struct pdshm_var_rec *r, uint64_t gen, uint64_t w,
                   struct vl_waiter *wt, const struct pdshm_vl_hold *mine) {
  if (!vl_ours(w, pdshm__varlock_tag(gen)))
    return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  if (vl_spin(wt)) return 0;
  if (!vl_same(seg, r, gen)) return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  uint64_t bit = wt->as == VL_AS_WRITER ? VL_WSLEEP : VL_RSLEEP;
  if (!(w & bit) && !atomic_compare_exchange_strong_explicit(&r->lk, &w, w | bit,
                                                             memory_order_relaxed,
                                                             memory_order_relaxed))
    return 0;
  wt->slept = true;
  wt->spin_end = 0; /* woken, or timed out: a spin again before the next sleep */
  wt->yields = 0;
  if (pdshm__futex_wait_bits(pdshm__futex_low(&r->lk), (uint32_t)(w | bit), wt->as,
                             wt->slice ? wt->slice : VL_SLICE_MIN_NS) != PDSHM_ETIMEDOUT)
    return 0;
  wt->slice = wt->slice ? (wt->slice * 2 < VL_SLICE_NS ? wt->slice * 2 : VL_SLICE_NS)
                        : 2 * VL_SLICE_MIN_NS;
  uint32_t who = (uint32_t)(w & VL_OWNER);
  bool reap = who && pdshm__vl_slot_abandoned(seg, who - 1);
  if (!who && (w & VL_READERS)) {
    uint64_t now = pdshm__now_ns(CLOCK_MONOTONIC);
    reap = wt->next_reap && now >= wt->next_reap;
    if (reap || !wt->next_reap) wt->next_reap = now + VL_REAP_EVERY_NS;
  }
  if (reap) return pdshm__slot_reap_dead(seg);
  if (wt->slice == VL_SLICE_NS && vl_unexplained(seg, r, gen, w | bit, mine))
    return pdshm__fail(PDSHM_EBADSEG, "the lock word of variable %#llx names holders that no "
                       "process records", (unsigned long long)r->self);
  return 0;
}

/* Takes owner `who` (slot+1) off r's word of tag `tag`, with the sleep
 * bits, and wakes their sleepers (every writer when all_writers); false
 * when the word is not so held (another variable's now, or not that
 * owner's). */
bool pdshm__vl_release_owner(struct pdshm_var_rec *r, uint64_t tag, uint64_t who,
                             bool all_writers) {
  uint64_t w = atomic_load_explicit(&r->lk, memory_order_relaxed);
  while (vl_ours(w, tag) && (w & (VL_OWNER | VL_FROZEN)) == who)
    if (atomic_compare_exchange_weak_explicit(&r->lk, &w, w & ~(VL_OWNER | VL_SLEEPERS),
                                              memory_order_acq_rel, memory_order_relaxed)) {
      vl_wake(r, w, all_writers);
      return true;
    }
  return false;
}

/* A waiter's pause in its round-th round: a spin at first, then sleeps. */
void pdshm__vl_pause(unsigned round) {
  if (round < 64) {
    pdshm__cpu_relax();
    return;
  }
  long ns = round < 1024 ? 1000 : 100000;
  nanosleep(&(struct timespec){0, ns}, NULL);
}

/* ---- exclusive ---------------------------------------------------------------------- */

/* What a waiting writer leaves in lk_wwait: who it is. */
static uint64_t vl_writer_mark(pdshm_seg *seg) {
  return (seg->slot + 1u) | atomic_load(&pdshm__slot(seg, seg->slot)->epoch) << 16;
}

/* Invariant 4: a writer that died waiting (its slot dead, or taken again
 * since) no longer makes readers back off. */
static bool vl_writer_waits(pdshm_seg *seg, struct pdshm_var_rec *r) {
  uint64_t w = atomic_load_explicit(&r->lk_wwait, memory_order_relaxed), s = (w & 0xffff) - 1;
  if (!w) return false;
  if (s < seg->hdr->max_procs && w >> 16 == atomic_load(&pdshm__slot(seg, (uint32_t)s)->epoch) &&
      pdshm__slot_alive(seg, (uint32_t)s) != 0)
    return true;
  atomic_compare_exchange_strong(&r->lk_wwait, &w, 0);
  return false;
}

/* The exclusive take that its first CAS did not make, the word being w:
 * waits until the word lets it through and makes it (0), or answers why
 * not; *mark is what it left in lk_wwait (0: nothing). */
static __attribute__((noinline, cold)) int vl_lock_excl_wait(pdshm_seg *seg,
                                                             struct pdshm_var_rec *r,
                                                             uint64_t gen, uint64_t w,
                                                             struct pdshm_vl_hold *e,
                                                             uint64_t *mark_out) {
  const uint64_t me = seg->slot + 1u, tag = pdshm__varlock_tag(gen);
  uint64_t mark = 0;
  struct vl_waiter wt = {.as = VL_AS_WRITER};
  for (;;) {
    if (vl_ours(w, tag) && !(w & (VL_BUSY | VL_READERS))) {
      uint64_t next = w | me | (wt.slept ? VL_WSLEEP : 0);
      if (atomic_compare_exchange_weak_explicit(&r->lk, &w, next, memory_order_seq_cst,
                                                memory_order_relaxed))
        break;
      continue;
    }
    if (!(w & VL_BUSY) && !mark) { /* readers alone: invariant 4 */
      mark = vl_writer_mark(seg);
      atomic_store_explicit(&r->lk_wwait, mark, memory_order_relaxed);
      PDSHM_CRASHPOINT("varlock.excl.waiting");
    }
    int rc = vl_wait(seg, r, gen, w, &wt, e);
    if (rc) {
      if (mark) atomic_compare_exchange_strong(&r->lk_wwait, &mark, 0);
      return rc;
    }
    w = atomic_load_explicit(&r->lk, memory_order_relaxed);
  }
  *mark_out = mark;
  return 0;
}

/* Invariants 1 and 2: the record says EXCL, then one CAS sets the owner;
 * only a word that does not let it through goes to vl_lock_excl_wait. */
static int vl_lock_excl(pdshm_seg *seg, struct pdshm_var_rec *r, uint64_t gen,
                        struct pdshm_vl_hold *e) {
  const uint64_t me = seg->slot + 1u, tag = pdshm__varlock_tag(gen);
  vl_state(e, PDSHM_VL_EXCL);
  PDSHM_CRASHPOINT("varlock.excl.recorded");
  uint64_t w = atomic_load_explicit(&r->lk, memory_order_relaxed), mark = 0;
  if (!vl_ours(w, tag) || (w & (VL_BUSY | VL_READERS)) ||
      !atomic_compare_exchange_strong_explicit(&r->lk, &w, w | me, memory_order_seq_cst,
                                               memory_order_relaxed)) {
    int rc = vl_lock_excl_wait(seg, r, gen, w, e, &mark);
    if (rc) return rc;
  }
  PDSHM_CRASHPOINT("varlock.excl.held");
  if (vl_biased(r)) pdshm__vl_bias_revoke(seg, r, gen, e); /* varlock_bias.c, invariant 2 */
  if (!vl_same(seg, r, gen)) { /* invariant 3: erased since; the word is its own still */
    pdshm__vl_release_owner(r, tag, me, false);
    return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  }
  if (mark || atomic_load_explicit(&r->lk_wwait, memory_order_relaxed)) /* no store when clear */
    atomic_store_explicit(&r->lk_wwait, 0, memory_order_relaxed);
  return 0;
}

/* The owner leaves and the version moves in one step (invariant 3): of an
 * erased variable, nothing is touched. */
static void vl_unlock_excl(pdshm_seg *seg, struct pdshm_var_rec *r, uint64_t gen) {
  const uint64_t me = seg->slot + 1u, tag = pdshm__varlock_tag(gen);
  uint64_t w = atomic_load_explicit(&r->lk, memory_order_relaxed),
           v = atomic_load_explicit(&r->version, memory_order_relaxed);
  PDSHM_CRASHPOINT("varlock.excl.releasing");
  do {
    if (!vl_ours(w, tag) || (w & (VL_OWNER | VL_FROZEN)) != me) return;
  } while (!pdshm__cas_pair(&r->lk, &w, &v, w & ~(VL_OWNER | VL_SLEEPERS), v + 1));
  PDSHM_CRASHPOINT("varlock.excl.released");
  vl_wake(r, w, false);
  pdshm__futex_wake_after_rmw(pdshm__futex_low(&r->version), &r->vwaiters);
}

/* ---- shared ------------------------------------------------------------------------- */

enum vl_uncount_rc { VL_UNCOUNTED, VL_CHANGED, VL_NOT_COUNTED };

/* One share less of the variable whose tag is `tag`, *w being its word as
 * last read (not FROZEN): the last one clears WSLEEP and wakes a writer
 * (only writers wait for readers).  VL_CHANGED when the word changed from
 * *w first (*w is then what it is now); VL_NOT_COUNTED, touching nothing,
 * when *w is another variable's word or counts no share (invariant 3). */
static inline __attribute__((always_inline)) enum vl_uncount_rc
vl_uncount(struct pdshm_var_rec *r, uint64_t *w, uint64_t tag) {
  if (!vl_ours(*w, tag) || !(*w & VL_READERS)) return VL_NOT_COUNTED;
  uint64_t next = *w - VL_READER;
  bool last = !(next & VL_READERS);
  if (last) next &= ~VL_WSLEEP;
  if (!atomic_compare_exchange_weak_explicit(&r->lk, w, next, memory_order_acq_rel,
                                             memory_order_relaxed))
    return VL_CHANGED;
  if (last) vl_wake(r, *w & VL_WSLEEP, false);
  return VL_UNCOUNTED;
}

/* Invariant 3 after a counted CAS on a variable erased since: takes the
 * share back from its word, unless a recount (FROZEN) drops it anyway or
 * the record is another variable's by now. */
static void vl_uncount_stale(struct pdshm_var_rec *r, uint64_t tag) {
  PDSHM_CRASHPOINT("varlock.shared.undoing");
  uint64_t w = atomic_load_explicit(&r->lk, memory_order_relaxed);
  while (!(w & VL_FROZEN) && vl_uncount(r, &w, tag) == VL_CHANGED) {
  }
}

/* Whether a shared take may try its CAS on word w (of tag `tag`). */
static inline bool vl_share_through(const struct pdshm_var_rec *r, uint64_t w, uint64_t tag) {
  return vl_ours(w, tag) && !(w & VL_BUSY) && (w & VL_READERS) != VL_READERS &&
         !atomic_load_explicit(&((struct pdshm_var_rec *)r)->lk_wwait, memory_order_relaxed);
}

/* The shared take that its first CAS did not make, or did not try (a
 * writer waits), the word being w: waits until the word lets it through
 * and makes it (0), or answers why not; *met is set when it met another
 * reader (a CAS of ours failed, or the word counted shares already). */
static __attribute__((noinline, cold)) int vl_lock_shared_wait(pdshm_seg *seg,
                                                               struct pdshm_var_rec *r,
                                                               uint64_t gen, uint64_t w,
                                                               struct pdshm_vl_hold *e,
                                                               bool *met) {
  const uint64_t tag = pdshm__varlock_tag(gen);
  struct vl_waiter wt = {.as = VL_AS_READER};
  for (unsigned round = 0;; round++) {
    if (!vl_ours(w, tag)) return pdshm__fail(PDSHM_ESTALE, "variable was erased");
    bool defer = atomic_load_explicit(&r->lk_wwait, memory_order_relaxed) &&
                 round < VL_READER_BACKOFF && vl_writer_waits(seg, r);
    if (!(w & VL_BUSY) && !defer) {
      if ((w & VL_READERS) == VL_READERS)
        return pdshm__fail(PDSHM_ENOLCK, "%llu shared holders already",
                           (unsigned long long)(VL_READERS / VL_READER));
      vl_state(e, PDSHM_VL_TAKING);
      PDSHM_CRASHPOINT("varlock.shared.taking");
      uint64_t next = w + VL_READER;
      *met |= (w & VL_READERS) != 0;
      if (atomic_compare_exchange_weak_explicit(&r->lk, &w, next, memory_order_acq_rel,
                                                memory_order_relaxed))
        break;
      *met = true;
      continue;
    }
    if (atomic_load_explicit(&e->state, memory_order_relaxed) == PDSHM_VL_TAKING)
      vl_state(e, PDSHM_VL_CLAIMED); /* a recount must not wait for us */
    int rc = defer ? (pdshm__vl_pause(round), vl_same(seg, r, gen) ? 0 : PDSHM_ESTALE)
                   : vl_wait(seg, r, gen, w, &wt, e);
    if (rc) return rc == PDSHM_ESTALE ? pdshm__fail(rc, "variable was erased") : rc;
    w = atomic_load_explicit(&r->lk, memory_order_relaxed);
  }
  return 0;
}

/* varlock_bias.c, invariant 1: a share the word does not count, held when
 * the TRYING record, then lk_rbias, then the word let it, and no writer
 * cancelled it (0); else the record is CLAIMED again and 1 is answered, *w
 * being the word as read; ESTALE when the variable is gone. */
static inline __attribute__((always_inline)) int vl_lock_visible(pdshm_seg *seg,
                                                                  struct pdshm_var_rec *r,
                                                                  uint64_t gen,
                                                                  struct pdshm_vl_hold *e,
                                                                  uint64_t *w) {
  atomic_store_explicit(&e->state, PDSHM_VL_TRYING, memory_order_seq_cst);
  PDSHM_CRASHPOINT("varlock.shared.trying");
  bool biased = vl_biased(r);
  *w = atomic_load_explicit(&r->lk, memory_order_seq_cst);
  uint32_t trying = PDSHM_VL_TRYING;
  if (biased && vl_ours(*w, pdshm__varlock_tag(gen)) && !(*w & VL_BUSY) &&
      atomic_compare_exchange_strong_explicit(&e->state, &trying, PDSHM_VL_VISIBLE,
                                              memory_order_seq_cst, memory_order_relaxed)) {
    PDSHM_CRASHPOINT("varlock.shared.visible");
    if (vl_same(seg, r, gen)) return 0;
    vl_state(e, PDSHM_VL_CLAIMED);
    return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  }
  vl_state(e, PDSHM_VL_CLAIMED);
  return 1;
}

/* Invariants 2 and 4: an uncounted share when lk_rbias lets it
 * (vl_lock_visible), else TAKING, one CAS that counts the share, then HELD;
 * a word that does not let it through, or a writer that waits, sends the
 * take to vl_lock_shared_wait. */
static int vl_lock_shared(pdshm_seg *seg, struct pdshm_var_rec *r, uint64_t gen,
                          struct pdshm_vl_hold *e) {
  const uint64_t tag = pdshm__varlock_tag(gen);
  uint64_t w = atomic_load_explicit(&r->lk, memory_order_relaxed);
  bool through = vl_share_through(r, w, tag), met = false;
  if (through && vl_biased(r)) {
    int rc = vl_lock_visible(seg, r, gen, e, &w);
    if (rc <= 0) return rc;
    through = vl_share_through(r, w, tag);
  }
  if (through) {
    vl_state(e, PDSHM_VL_TAKING);
    PDSHM_CRASHPOINT("varlock.shared.taking");
    met = (w & VL_READERS) != 0;
    through = atomic_compare_exchange_strong_explicit(&r->lk, &w, w + VL_READER,
                                                      memory_order_acq_rel, memory_order_relaxed);
    met |= !through;
  }
  if (!through) {
    int rc = vl_lock_shared_wait(seg, r, gen, w, e, &met);
    if (rc) return rc;
  }
  PDSHM_CRASHPOINT("varlock.shared.counted");
  if (!vl_same(seg, r, gen)) {
    vl_uncount_stale(r, tag);
    return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  }
  if (met) pdshm__vl_bias_allow(r); /* readers meet on the word: varlock_bias.c, inv. 5 */
  vl_state(e, PDSHM_VL_HELD);
  return 0;
}

/* Gives a share back; a frozen word waits for its recount
 * (varlock_reap.c, invariant 2).
 * Of an erased variable, its word gets the share back while the record is
 * not yet another variable's, and nothing is touched after. */
static __attribute__((noinline, cold)) int vl_unlock_shared_wait(pdshm_seg *seg,
                                                                 struct pdshm_var_rec *r,
                                                                 uint64_t gen,
                                                                 struct pdshm_vl_hold *e) {
  const uint64_t tag = pdshm__varlock_tag(gen);
  struct vl_waiter wt = {.no_spin = true, .as = VL_AS_READER}; /* a recount takes long */
  for (;;) {
    vl_state(e, PDSHM_VL_RELEASING);
    PDSHM_CRASHPOINT("varlock.shared.releasing");
    uint64_t w = atomic_load_explicit(&r->lk, memory_order_relaxed);
    while (!(w & VL_FROZEN)) {
      enum vl_uncount_rc rc = vl_uncount(r, &w, tag);
      if (rc == VL_NOT_COUNTED) return 0;
      if (rc == VL_UNCOUNTED) {
        PDSHM_CRASHPOINT("varlock.shared.uncounted");
        return 0;
      }
    }
    vl_state(e, PDSHM_VL_HELD);
    int rc = vl_wait(seg, r, gen, w, &wt, e);
    if (rc == PDSHM_ESTALE) return 0;
    if (rc) return rc;
  }
}

/* The same, its first CAS tried here: only a frozen word, or one that
 * changed meanwhile, goes to vl_unlock_shared_wait. */
static inline __attribute__((always_inline)) int vl_unlock_shared(pdshm_seg *seg,
                                                                   struct pdshm_var_rec *r,
                                                                   uint64_t gen,
                                                                   struct pdshm_vl_hold *e) {
  if (atomic_load_explicit(&e->state, memory_order_relaxed) == PDSHM_VL_VISIBLE)
    return 0; /* the caller's vl_put is the release (varlock_bias.c, invariant 1) */
  vl_state(e, PDSHM_VL_RELEASING);
  PDSHM_CRASHPOINT("varlock.shared.releasing");
  uint64_t w = atomic_load_explicit(&r->lk, memory_order_relaxed);
  enum vl_uncount_rc rc = w & VL_FROZEN ? VL_CHANGED : vl_uncount(r, &w, pdshm__varlock_tag(gen));
  if (rc == VL_NOT_COUNTED) return 0;
  if (rc == VL_CHANGED) return vl_unlock_shared_wait(seg, r, gen, e);
  PDSHM_CRASHPOINT("varlock.shared.uncounted");
  return 0;
}

/* ---- the API ------------------------------------------------------------------------- */

/* Lets go of this thread's hold `held` in seg (its last re-entry): 0, or
 * the error that leaves it held. */
static inline __attribute__((always_inline)) int vl_let_go(pdshm_seg *seg,
                                                            struct pdshm_held_lock *held) {
  struct pdshm_var_rec *r = (struct pdshm_var_rec *)(uintptr_t)held->var;
  struct pdshm_vl_hold *e = vl_rec(seg, seg->slot, held->ent);
  if (held->excl) {
    vl_unlock_excl(seg, r, held->gen);
  } else {
    int rc = vl_unlock_shared(seg, r, held->gen, e);
    if (rc) return rc;
  }
  vl_put(e, held->reserved);
  vl_held_release(held);
  return 0;
}

PDSHM_API int pdshm_var_lock(pdshm_var *v, int exclusive) {
  int rc;
  pdshm__fail_clear();
  pdshm_seg *seg = pdshm__var_seg(v, &rc);
  if (!seg) return rc;
  struct pdshm_var_rec *r = pdshm__var_rec(v);
  uint64_t gen = r->gen;
  struct pdshm_held_lock *hole = NULL,
                         *held = pdshm__vl_top ? vl_find_gen(seg, r, gen, false, &hole) : NULL;
  if (held && (held->excl || exclusive))
    return pdshm__fail(PDSHM_EDEADLK, "this thread already holds the lock of \"%s\"",
                       pdshm_var_name(v));
  if (held) {
    held->count++;
    return 0;
  }
  if (!vl_same(seg, r, gen)) return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  uint32_t ent = 0;
  struct pdshm_vl_hold *e = NULL; /* vl_record sets it when it answers 0 */
  bool reserved = false;
  if ((rc = vl_held_free(hole, &held))) return rc;
  if ((rc = vl_record(seg, r, gen, &ent, &e, &reserved))) {
    vl_held_release(held);
    return rc;
  }
  rc = exclusive ? vl_lock_excl(seg, r, gen, e) : vl_lock_shared(seg, r, gen, e);
  if (rc) {
    vl_put(e, reserved);
    vl_held_release(held); /* the entry stays free */
    return rc;
  }
  *held = (struct pdshm_held_lock){.var = r, .gen = gen, .count = 1, .ent = ent,
                                   .excl = exclusive != 0, .reserved = reserved,
                                   .attach_id = seg->id,
                                   .forkgen = atomic_load_explicit(&pdshm__forkgen,
                                                                   memory_order_relaxed)};
  return 0;
}

PDSHM_API int pdshm_var_unlock(pdshm_var *v) {
  int rc;
  pdshm__fail_clear();
  pdshm_seg *seg = pdshm__var_seg(v, &rc);
  if (!seg) return rc;
  struct pdshm_var_rec *r = pdshm__var_rec(v);
  /* The hold on the variable at r now, else one on an erased one that was
   * there (varlock_held.c, invariant 2). */
  struct pdshm_held_lock *held = vl_find_held(seg, r, r->gen);
  if (!held) held = vl_find(seg, r);
  if (!held) return pdshm__fail(PDSHM_EPERM, "this thread does not hold that variable's lock");
  if (!held->excl && --held->count) return 0;
  if ((rc = vl_let_go(seg, held))) /* the share stays, and so does the hold: unlock may be called again */
    held->count = 1;
  return rc;
}

/* Invariant 5: a thread that exits lets go of the locks it still holds in
 * attachments not detached since (a detach let go of them already); a
 * share a recount keeps frozen past the wait stays until the detach. */
static void vl_exit_let_go(pdshm_seg *seg, void *arg) {
  if (!pdshm__seg_usable(seg)) (void)vl_let_go(seg, arg);
}

static void vl_thread_exit(struct pdshm_thread *t) {
  uint64_t forkgen = atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed);
  for (unsigned i = pdshm__vl_top; i-- > 0;) {
    struct pdshm_held_lock *h = &t->held[i];
    if (h->var && h->forkgen == forkgen) pdshm__seg_list_with(h->attach_id, vl_exit_let_go, h);
  }
  pdshm__vl_top = 0;
  (void)pdshm__vl_unreserve(t); /* in use: a share a recount kept, until the detach */
}

/* The inspector's view of r's lock: holders, and the exclusive one's slot
 * (-1 when none). */
uint64_t pdshm__varlock_readers(const pdshm_seg *seg, const struct pdshm_var_rec *r,
                                int *owner_slot) {
  uint64_t w = atomic_load_explicit(&((struct pdshm_var_rec *)r)->lk, memory_order_relaxed);
  *owner_slot = !(w & VL_FROZEN) && (w & VL_OWNER) ? (int)(w & VL_OWNER) - 1 : -1;
  uint64_t counted = (w & VL_READERS) / VL_READER;
  /* Uncounted shares exist while the bias is on, or while a writer that
   * revoked it waits for them (varlock_bias.c): only then are the slots'
   * records scanned. */
  return counted + (vl_biased(r) || *owner_slot >= 0 ? pdshm__vl_bias_readers(seg, r) : 0);
}