/*
 * journal.c - crash-atomic mutations: a per-lane redo log.
 *
 * Owns: struct pdshm_journal (layout.h).  A mutation of the model (scopes,
 * variables, tables, lock entries, the lanes' todo) runs as one journal under
 * one lock L; what is not journaled (the heap and the pins, derived again by
 * a repair; the idempotent step of a scope's destruction) and how to write a
 * journal are in lib/CRASH-SAFETY.md:
 *
 *   IDLE --begin: lock:=L, take L--> ARMED --commit point--> COMMIT
 *        <-- release L, free oldb <-- state:=IDLE <-- apply, publish newb
 *
 * Invariants:
 *  1. state != IDLE only while the journal's owner holds `lock`; so whoever
 *     next holds L after the owner died finds every such journal and nobody
 *     else touches them meanwhile.
 *  2. Before COMMIT nothing shared outside newb has been written: rolling back
 *     frees newb (still owned, unpublished) and un-marks oldb (back to
 *     owner 0, except blocks the slot owned before, flagged JRN_KEEP).
 *  3. From COMMIT on, the redo list says everything: each entry is an absolute
 *     value for a word guarded by L, so applying the list twice is applying
 *     it once; except bumps (JRN_BUMP), which a repair may apply twice.  A
 *     bump happens once the stores are visible, so a reader that sees it
 *     sees the change it announces, and wakes the word's waiters (each
 *     bumped word is a version followed by its waiter count, as in struct
 *     pdshm_var_rec).  Publishing newb (owner := 0) and
 *     freeing oldb (only blocks still USED and marked with this slot, so
 *     never a block another slot reused since; for this slot's, see 5) are
 *     idempotent too; a pinned tensor buffer in oldb is orphaned (published
 *     again, owner 0) rather than freed, so a second pass skips it.
 *  4. A seqlock word the op made odd is made even by whoever finishes the op,
 *     so lock-free readers never wait on a dead writer.
 *  5. The owner marks its journal IDLE before it frees blocks (the retired
 *     ones of a commit, the new ones of an abort): a freed block may be
 *     handed at once to another thread of the same slot, with the same owner
 *     tag, and must not be freed again by a repair re-running the journal.
 *     Blocks not yet freed are still the slot's, freed by its reaper's sweep
 *     (a retired HANDLE record has its scope cleared by then).
 *
 * Crash windows (each one is finished by pdshm__journal_repair_lock):
 *  - after alloc, before newb is recorded: the block stays owned by the dead
 *    slot and its reaper's sweep frees it;
 *  - after oldb is recorded, before its owner mark: rollback keeps it anyway;
 *  - anywhere in ARMED: rolled back; anywhere in COMMIT: redone.
 */
#define PDSHM_LAYER 4 /* journal/ (lib/LAYERS) */
#include "config.h"

#include <assert.h>

#include "journal/journal.h"

static struct pdshm_journal *jrn(struct pdshm_lane_ctx *ln) { return &ln->rec->j; }

/* Invariant 1, as each step of an open journal needs it: ARMED, its lock
 * held by this thread. */
#define JRN_ASSERT_OPEN(seg, j)                                                   \
  PDSHM_ASSERT(atomic_load_explicit(&(j)->state, memory_order_relaxed) == PDSHM_J_ARMED && \
               pdshm__lock_mine((seg), atomic_load_explicit(&(j)->lock, memory_order_relaxed)))

static void jrn_arm(struct pdshm_journal *j, uint32_t op) {
  j->op = op;
  j->nredo = j->nnew = j->nold = 0;
  j->seq = 0;
  atomic_store_explicit(&j->state, PDSHM_J_ARMED, memory_order_release);
}

/* The two begins below, the lock taken with no limit when the deadline is
 * UINT64_MAX (pdshm__lock: the path of every mutation). */
static inline int jrn_begin(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint32_t lock, uint32_t op,
                            uint64_t deadline) {
  struct pdshm_journal *j = jrn(ln);
  assert(atomic_load(&j->state) == PDSHM_J_IDLE);
  atomic_store_explicit(&j->lock, lock, memory_order_relaxed);
  int rc = deadline == UINT64_MAX ? pdshm__lock(seg, lock) : pdshm__lock_until(seg, lock, deadline);
  if (rc) return rc;
  PDSHM_CRASHPOINT("j.locked");
  jrn_arm(j, op);
  PDSHM_CRASHPOINT("j.armed");
  return 0;
}

int pdshm__j_begin(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint32_t lock, uint32_t op) {
  return jrn_begin(seg, ln, lock, op, UINT64_MAX);
}

int pdshm__j_begin_until(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint32_t lock, uint32_t op,
                         uint64_t deadline) {
  return jrn_begin(seg, ln, lock, op, deadline);
}

/* Dying with `lock` held before ARMED leaves nothing to repair: IDLE journals
 * are skipped, whatever their lock says. */
void pdshm__j_begin_locked(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint32_t lock, uint32_t op) {
  struct pdshm_journal *j = jrn(ln);
  assert(atomic_load(&j->state) == PDSHM_J_IDLE);
  PDSHM_ASSERT(pdshm__lock_mine(seg, lock));
  atomic_store_explicit(&j->lock, lock, memory_order_relaxed);
  jrn_arm(j, op);
  PDSHM_CRASHPOINT("j.armed");
}

/* newb entries are 16-aligned; bit 0 marks a block the slot keeps owning
 * after the commit (a handle record): published nowhere, freed on rollback. */
#define JRN_KEEP 1u

static pdshm_off_t jrn_off(pdshm_off_t e) { return e & ~(pdshm_off_t)JRN_KEEP; }

static int jrn_alloc(pdshm_seg *seg, struct pdshm_lane_ctx *ln, size_t bytes, unsigned type,
                     pdshm_off_t *payload, pdshm_off_t keep) {
  struct pdshm_journal *j = jrn(ln);
  JRN_ASSERT_OPEN(seg, j);
  assert(j->nnew < PDSHM_J_BLOCKS);
  int rc = pdshm__alloc(seg, ln, bytes, type, payload);
  if (rc) return rc;
  PDSHM_CRASHPOINT("j.alloc.unrecorded");
  j->newb[j->nnew] = *payload | keep;
  atomic_thread_fence(memory_order_release); /* entry before count */
  j->nnew++;
  PDSHM_CRASHPOINT("j.alloc.recorded");
  return 0;
}

int pdshm__j_alloc(pdshm_seg *seg, struct pdshm_lane_ctx *ln, size_t bytes, unsigned type,
                   pdshm_off_t *payload) {
  return jrn_alloc(seg, ln, bytes, type, payload, 0);
}

int pdshm__j_alloc_keep(pdshm_seg *seg, struct pdshm_lane_ctx *ln, size_t bytes, unsigned type,
                        pdshm_off_t *payload) {
  return jrn_alloc(seg, ln, bytes, type, payload, JRN_KEEP);
}

/* Redo entries' offsets are 8-aligned; bit 0 marks a bump. */
#define JRN_BUMP 1u

static void jrn_redo(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t at, uint64_t val,
                     pdshm_off_t bump) {
  struct pdshm_journal *j = jrn(ln);
  JRN_ASSERT_OPEN(seg, j);
  assert(j->nredo < PDSHM_J_REDO && at % 8 == 0 && at < seg->size); /* our own word */
  j->redo[j->nredo] = (struct pdshm_redo){.at = at | bump, .val = val};
  atomic_thread_fence(memory_order_release);
  j->nredo++;
  PDSHM_CRASHPOINT("j.set");
}

void pdshm__j_set(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t at, uint64_t val) {
  jrn_redo(seg, ln, at, val, 0);
}

void pdshm__j_bump(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t at) {
  jrn_redo(seg, ln, at, 1, JRN_BUMP);
}

void pdshm__j_retire(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t payload) {
  struct pdshm_journal *j = jrn(ln);
  JRN_ASSERT_OPEN(seg, j);
  assert(j->nold < PDSHM_J_BLOCKS);
  /* An offset read from a damaged record may name no block: freeing it
   * would write through it.  pdshm_check reports what is left. */
  if (!pdshm__block_live(seg, payload, PDSHM_T_ANY, 0)) return;
  /* A block we already own (a handle record) must stay ours on rollback:
   * the entry says so with JRN_KEEP; a published one goes back to owner 0. */
  pdshm_off_t keep = pdshm__blk_owner(pdshm__blk(seg, payload)) == ln->tag ? JRN_KEEP : 0;
  j->oldb[j->nold] = payload | keep;
  atomic_thread_fence(memory_order_release);
  j->nold++;
  PDSHM_CRASHPOINT("j.retire.unmarked");
  pdshm__blk_set_owner(pdshm__blk(seg, payload), ln->tag);
  PDSHM_CRASHPOINT("j.retire.marked");
}

void pdshm__j_seq(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t seq) {
  JRN_ASSERT_OPEN(seg, jrn(ln));
  (void)seg;
  jrn(ln)->seq = seq;
}

/* ---- applying and rolling back: shared by the owner and by repairers ------- */

static _Atomic uint64_t *jrn_word(pdshm_seg *seg, pdshm_off_t at) {
  return PDSHM_AT(seg->base, at, _Atomic uint64_t);
}

/* Invariant 4: readers see an even sequence again once we are done. */
static void jrn_seq_even(pdshm_seg *seg, struct pdshm_journal *j) {
  if (!j->seq) return;
  _Atomic uint64_t *w = jrn_word(seg, j->seq);
  uint64_t v = atomic_load_explicit(w, memory_order_relaxed);
  if (v & 1) atomic_store_explicit(w, v + 1, memory_order_release);
}

static bool jrn_marked(pdshm_seg *seg, pdshm_off_t payload, uint16_t tag) {
  return pdshm__block_live(seg, payload, PDSHM_T_ANY, 0) &&
         pdshm__blk_owner(pdshm__blk(seg, payload)) == tag;
}

/* A bumped word is a version: a 64-bit counter followed by the 32-bit count
 * of its waiters (struct pdshm_var_rec); a bump wakes them (futex.c). */
static void jrn_bump_wake(pdshm_seg *seg, pdshm_off_t at) {
  if (!pdshm__seg_holds(seg, at, 12)) return;
  pdshm__futex_wake(pdshm__futex_low(jrn_word(seg, at)),
                    PDSHM_AT(seg->base, at + 8, _Atomic uint32_t));
}

/* Invariant 3, first the stores and the publications. */
static void jrn_apply_stores(pdshm_seg *seg, struct pdshm_journal *j, uint16_t tag) {
  uint32_t nredo = j->nredo < PDSHM_J_REDO ? j->nredo : PDSHM_J_REDO;
  if (j->seq) {
    _Atomic uint64_t *seq = jrn_word(seg, j->seq);
    uint64_t v = atomic_load_explicit(seq, memory_order_relaxed);
    if (!(v & 1)) atomic_store_explicit(seq, v + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* odd before the stores */
  }
  for (uint32_t i = 0; i < nredo; i++) {
    pdshm_off_t at = j->redo[i].at & ~(pdshm_off_t)JRN_BUMP;
    if (j->redo[i].at & JRN_BUMP) {
      atomic_fetch_add_explicit(jrn_word(seg, at), j->redo[i].val, memory_order_release);
      jrn_bump_wake(seg, at);
    } else
      atomic_store_explicit(jrn_word(seg, at), j->redo[i].val, memory_order_release);
    PDSHM_CRASHPOINT("j.apply.store");
  }
  jrn_seq_even(seg, j);
  for (uint32_t i = 0; i < j->nnew && i < PDSHM_J_BLOCKS; i++)
    if (!(j->newb[i] & JRN_KEEP) && jrn_marked(seg, j->newb[i], tag)) {
      pdshm__blk_set_owner(pdshm__blk(seg, j->newb[i]), 0);
      PDSHM_CRASHPOINT("j.apply.publish");
    }
}

/* Frees the blocks of a list (oldb or newb) still marked with this slot.
 * ln is the caller's lane when it is the journal's owner, NULL for a
 * repairer (blocks go straight to the heap). */
static void jrn_free_list(pdshm_seg *seg, const pdshm_off_t *list, uint32_t n, uint16_t tag,
                          struct pdshm_lane_ctx *ln) {
  for (uint32_t i = 0; i < n && i < PDSHM_J_BLOCKS; i++)
    if (jrn_marked(seg, jrn_off(list[i]), tag)) {
      pdshm__free(seg, ln, jrn_off(list[i]));
      PDSHM_CRASHPOINT("j.free");
    }
}

/* A repairer's: the owner is dead, nobody can take the freed blocks back
 * before the journal reads IDLE. */
static void jrn_apply(pdshm_seg *seg, struct pdshm_journal *j, uint16_t tag) {
  jrn_apply_stores(seg, j, tag);
  jrn_free_list(seg, j->oldb, j->nold, tag, NULL);
}

/* Invariant 2: the retired blocks back to their owners, before the new
 * ones are freed (jrn_free_list on newb). */
static void jrn_unretire(pdshm_seg *seg, struct pdshm_journal *j, uint16_t tag) {
  for (uint32_t i = 0; i < j->nold && i < PDSHM_J_BLOCKS; i++)
    if (!(j->oldb[i] & JRN_KEEP) && jrn_marked(seg, j->oldb[i], tag)) {
      pdshm__blk_set_owner(pdshm__blk(seg, j->oldb[i]), 0);
      PDSHM_CRASHPOINT("j.rollback.unmark");
    }
  jrn_seq_even(seg, j);
}

void pdshm__j_commit(pdshm_seg *seg, struct pdshm_lane_ctx *ln) {
  struct pdshm_journal *j = jrn(ln);
  JRN_ASSERT_OPEN(seg, j);
  PDSHM_CRASHPOINT("j.commit.before");
  atomic_store_explicit(&j->state, PDSHM_J_COMMIT, memory_order_release); /* commit point */
  PDSHM_CRASHPOINT("j.commit.after");
  jrn_apply_stores(seg, j, ln->tag);
  /* IDLE before the frees: a freed block may at once be handed to another
   * thread of this slot, with the same owner tag, and a repair re-running
   * this journal after a death would free that thread's block.  A death
   * during the frees leaves retired blocks owned by the slot (kept records
   * with their scope cleared), which its reaper's sweep frees. */
  atomic_store_explicit(&j->state, PDSHM_J_IDLE, memory_order_release);
  PDSHM_CRASHPOINT("j.idle");
  jrn_free_list(seg, j->oldb, j->nold, ln->tag, ln->direct ? NULL : ln);
  pdshm__unlock(seg, atomic_load_explicit(&j->lock, memory_order_relaxed));
}

/* IDLE before the frees, as for a commit; the new blocks are still ours
 * until freed, so a death in between leaves them to the reaper's sweep. */
void pdshm__j_abort(pdshm_seg *seg, struct pdshm_lane_ctx *ln) {
  struct pdshm_journal *j = jrn(ln);
  JRN_ASSERT_OPEN(seg, j);
  jrn_unretire(seg, j, ln->tag);
  atomic_store_explicit(&j->state, PDSHM_J_IDLE, memory_order_release);
  PDSHM_CRASHPOINT("j.idle");
  jrn_free_list(seg, j->newb, j->nnew, ln->tag, ln->direct ? NULL : ln);
  pdshm__unlock(seg, atomic_load_explicit(&j->lock, memory_order_relaxed));
}

/* ---- repair ------------------------------------------------------------------ */

/* Redo entries must stay inside the segment and aligned, even when the dead
 * process scribbled over its journal: refuse rather than write wild. */
static int jrn_sane(pdshm_seg *seg, const struct pdshm_journal *j) {
  const pdshm_off_t lo = seg->hdr->arena_off + PDSHM_BLK_HDR, hi = pdshm__seg_end(seg);
  if (j->nredo > PDSHM_J_REDO || j->nnew > PDSHM_J_BLOCKS || j->nold > PDSHM_J_BLOCKS)
    return PDSHM_EBADSEG;
  for (uint32_t i = 0; i < j->nredo; i++) {
    pdshm_off_t at = j->redo[i].at & ~(pdshm_off_t)JRN_BUMP;
    bool registry = at == offsetof(struct pdshm_hdr, groups); /* group.c's list head */
    if (at % 8 || (at < seg->hdr->slots_off && !registry) || at >= hi) return PDSHM_EBADSEG;
  }
  for (uint32_t i = 0; i < j->nnew; i++) {
    pdshm_off_t b = jrn_off(j->newb[i]);
    if (b < lo || b >= hi || b % PDSHM_ALIGN) return PDSHM_EBADSEG;
  }
  for (uint32_t i = 0; i < j->nold; i++)
    if (jrn_off(j->oldb[i]) < lo || jrn_off(j->oldb[i]) >= hi || jrn_off(j->oldb[i]) % PDSHM_ALIGN)
      return PDSHM_EBADSEG;
  if (j->seq && (j->seq % 8 || j->seq >= hi)) return PDSHM_EBADSEG;
  return 0;
}

static int jrn_repair_one(pdshm_seg *seg, struct pdshm_journal *j, uint16_t tag) {
  int rc = jrn_sane(seg, j);
  if (rc) return rc;
  if (atomic_load_explicit(&j->state, memory_order_acquire) == PDSHM_J_COMMIT)
    jrn_apply(seg, j, tag);
  else {
    jrn_unretire(seg, j, tag);
    jrn_free_list(seg, j->newb, j->nnew, tag, NULL);
  }
  PDSHM_CRASHPOINT("j.repair.done");
  atomic_store_explicit(&j->state, PDSHM_J_IDLE, memory_order_release);
  return 0;
}

int pdshm__journal_repair_lock(pdshm_seg *seg, uint32_t lock) {
  for (uint32_t s = 0; s < seg->hdr->max_procs; s++) {
    struct pdshm_slot *slot = pdshm__slot(seg, s);
    for (unsigned k = 0; k < PDSHM_LANES; k++) {
      struct pdshm_journal *j = &slot->lane[k].j;
      if (atomic_load_explicit(&j->state, memory_order_acquire) == PDSHM_J_IDLE) continue;
      if (atomic_load_explicit(&j->lock, memory_order_relaxed) != lock) continue;
      int rc = jrn_repair_one(seg, j, (uint16_t)(s + 1));
      if (rc) return rc;
    }
  }
  return 0;
}

void pdshm__journal_init_process(void) {
  for (unsigned kind = 0; kind < PDSHM_LK_COUNT; kind++)
    pdshm__lock_on_repair(kind, PDSHM_REPAIR_JOURNAL, pdshm__journal_repair_lock);
}
