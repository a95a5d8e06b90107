/*
 * heap_pins.c - the allocator's side of pins: pin counts, orphans, and their
 * repair.  Everything here but pdshm__tensor_pinned runs under the heap lock.
 *
 * Owns: struct pdshm_tensor_buf and the target of struct pdshm_pin_rec
 * (layout.h, invariant 6).
 *
 * Invariants:
 *  1. A PIN record's target and a buffer's pin count change only under the
 *     heap lock, the target first: a pin sets target then count + 1, an
 *     unpin sets target 0 then count - 1.  So, once the lock is released,
 *     count(T) == the USED PIN blocks whose target is T; and after a holder's
 *     death the count is derived again from the records (the rebuild's
 *     recount), with no journal, never passing through 0 on the way: a
 *     count of 0 the records disagree with is kept, and the records, all
 *     of dead holders, let go of it instead.
 *  2. An orphan is a USED TENSOR block with orphan = 1 that no variable
 *     references.  Orphaning sets the flag, then publishes the block
 *     (owner 0).  The unpin that takes an orphan's count to 0 frees it; so
 *     does the recount for an orphan it finds with no pin.
 *  3. A new pin needs the variable's scope lock and a hooked buffer
 *     (tensor_pins.c); a buffer being freed is unhooked already, so a count read as
 *     0 without the lock stays 0, and that free may take the unlocked path.
 *
 * Crash windows (each one is repaired by the recount of the next taker of
 * the heap lock, since each lies inside it):
 *  - pin: target set, count not yet raised (the record lets go when the
 *    count was 0);
 *  - unpin and reaper: target cleared, count not yet lowered;
 *  - orphaning: flag set, block still owned by the slot that was freeing it
 *    (its reaper's sweep orphans it again, or frees it when unpinned).
 */
#define PDSHM_LAYER 3 /* heap/ (lib/LAYERS) */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "heap/heap.h"

static struct pdshm_blk *ph_blk(const pdshm_seg *seg, pdshm_off_t at) {
  return PDSHM_AT(seg->base, at, struct pdshm_blk);
}

static uint64_t ph_word(const struct pdshm_blk *b) {
  return atomic_load_explicit(&b->word, memory_order_acquire);
}

/* The tensor header of the TENSOR block whose payload is at `payload`, or
 * NULL when that is not a live TENSOR block large enough to carry one. */
static struct pdshm_tensor_buf *ph_tbuf(const pdshm_seg *seg, pdshm_off_t payload) {
  if (!pdshm__block_live(seg, payload, PDSHM_T_TENSOR, sizeof(struct pdshm_tensor_buf)))
    return NULL;
  return PDSHM_AT(seg->base, payload, struct pdshm_tensor_buf);
}

/* The PIN record whose payload is at `payload`, or NULL when that is not a
 * live PIN block. */
static struct pdshm_pin_rec *ph_pin(const pdshm_seg *seg, pdshm_off_t payload) {
  if (!pdshm__block_live(seg, payload, PDSHM_T_PIN, sizeof(struct pdshm_pin_rec))) return NULL;
  return PDSHM_AT(seg->base, payload, struct pdshm_pin_rec);
}

/* Marks a USED block FREE in place, for a relink that follows to bin. */
static void ph_mark_free(pdshm_seg *seg, pdshm_off_t at) {
  struct pdshm_blk *b = ph_blk(seg, at);
  atomic_store_explicit(&b->word, pdshm__blk_size(ph_word(b)) | PDSHM_BLK_FREE,
                        memory_order_release);
  pdshm__blk_set_owner(b, 0);
  pdshm__blk_set_type(b, PDSHM_T_NONE);
}

/* What the walks of the chain below carry (pdshm__chain_walk). */
struct ph_walk {
  pdshm_seg *seg;
  uint16_t tag;            /* the sweep: the dead slot's owner tag             */
};

/* The heap lock is held: the chain is ours, a break is damage (EBADSEG). */
static int ph_walk(pdshm_seg *seg, uint16_t tag,
                   int (*visit)(void *, pdshm_off_t, const struct pdshm_blk *, uint64_t)) {
  struct ph_walk w = {seg, tag};
  return pdshm__chain_walk(seg, &(struct pdshm_walker){NULL, visit, &w}, NULL);
}

/* ---- the API ---------------------------------------------------------------- */

bool pdshm__tensor_pinned(const pdshm_seg *seg, pdshm_off_t payload) {
  const struct pdshm_tensor_buf *t = ph_tbuf(seg, payload);
  return t && atomic_load_explicit(&t->pins, memory_order_acquire) != 0;
}

uint64_t pdshm__tensor_pins(const pdshm_seg *seg, pdshm_off_t payload, bool *orphan) {
  const struct pdshm_tensor_buf *t = ph_tbuf(seg, payload);
  if (orphan) *orphan = t && t->orphan;
  return t ? atomic_load_explicit(&t->pins, memory_order_acquire) : 0;
}

void pdshm__pin_orphan_locked(pdshm_seg *seg, pdshm_off_t payload) {
  PDSHM_ASSERT(pdshm__lock_mine(seg, PDSHM_LOCK_HEAP));
  struct pdshm_tensor_buf *t = ph_tbuf(seg, payload);
  if (!t) return;
  t->orphan = 1;
  PDSHM_CRASHPOINT("pin.orphan.flagged");
  pdshm__blk_set_owner(pdshm__blk(seg, payload), 0);
  PDSHM_CRASHPOINT("pin.orphan.published");
}

int pdshm__pin_take_locked(pdshm_seg *seg, pdshm_off_t rec, pdshm_off_t target) {
  PDSHM_ASSERT(pdshm__lock_mine(seg, PDSHM_LOCK_HEAP));
  struct pdshm_tensor_buf *t = ph_tbuf(seg, target);
  struct pdshm_pin_rec *p = ph_pin(seg, rec);
  if (!t || !p || p->target)
    return pdshm__fail(PDSHM_EBADSEG, "pin of %#llx: not a live buffer, or a bad record",
                       (unsigned long long)target);
  p->target = target;
  PDSHM_CRASHPOINT("pin.take.targeted");
  atomic_fetch_add_explicit(&t->pins, 1, memory_order_release);
  PDSHM_CRASHPOINT("pin.take.counted");
  return 0;
}

pdshm_off_t pdshm__pin_drop_locked(pdshm_seg *seg, pdshm_off_t rec) {
  PDSHM_ASSERT(pdshm__lock_mine(seg, PDSHM_LOCK_HEAP));
  struct pdshm_pin_rec *p = ph_pin(seg, rec);
  if (!p || !p->target) return 0;
  pdshm_off_t target = p->target;
  struct pdshm_tensor_buf *t = ph_tbuf(seg, target);
  p->target = 0;
  PDSHM_CRASHPOINT("pin.drop.cleared");
  if (!t) return 0; /* a damaged target counted for nothing */
  uint64_t left = atomic_load_explicit(&t->pins, memory_order_relaxed);
  if (left) atomic_store_explicit(&t->pins, --left, memory_order_release);
  PDSHM_CRASHPOINT("pin.drop.counted");
  return !left && t->orphan ? target : 0;
}

/* ---- the reaper ------------------------------------------------------------- */

static int ph_sweep_one(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  const struct ph_walk *pw = arg;
  (void)w;
  if (pdshm__blk_owner(b) != pw->tag || !ph_pin(pw->seg, at + PDSHM_BLK_HDR)) return 0;
  pdshm_off_t freed = pdshm__pin_drop_locked(pw->seg, at + PDSHM_BLK_HDR);
  if (freed) {
    ph_mark_free(pw->seg, freed - PDSHM_BLK_HDR);
    PDSHM_CRASHPOINT("pin.sweep.freed");
  }
  return 0;
}

int pdshm__pin_sweep_slot_locked(pdshm_seg *seg, uint16_t tag) {
  PDSHM_ASSERT(pdshm__lock_mine(seg, PDSHM_LOCK_HEAP));
  return ph_walk(seg, tag, ph_sweep_one);
}

/* ---- the recount ------------------------------------------------------------ */

/* The recount runs under the heap lock while other threads free blocks with
 * no lock: a USED TENSOR block whose count reads 0 may be cached by its
 * holder at any moment (pdshm__free), and a cache push writes its list link
 * over the payload's first word, which is a buffer's count and a record's
 * target.  So the recount never lets a pinned buffer's count read 0, writes
 * a count only over one that is not 0 (such a buffer is never freed without
 * the lock), and stores into a field only after seeing the block still USED
 * of its type once the field was read: a push stores CACHED before the link,
 * so a link read is followed by a CACHED one. */

/* The sorted targets of every PIN record (ph_collect); without private
 * memory for them (`uncounted`), each count is checked by a walk of its own
 * instead: slower, but a repair must not fail for want of it. */
struct ph_targets {
  pdshm_seg *seg;
  pdshm_off_t *t;
  size_t n, cap;
  bool uncounted;
  pdshm_off_t counting;    /* ph_count_one: the buffer counted, and its count */
  uint64_t count;
};

/* The block at `at` is still USED of `type` (read after its payload). */
static bool ph_still(const pdshm_seg *seg, pdshm_off_t at, unsigned type) {
  return pdshm__block_live(seg, at + PDSHM_BLK_HDR, type, 0);
}

/* A record's target, read against a concurrent cache push of the record. */
static pdshm_off_t ph_pin_target(const struct pdshm_pin_rec *p) {
  return __atomic_load_n(&p->target, __ATOMIC_ACQUIRE);
}

/* Lets the PIN record at `at` count for nothing (its holder is dead). */
static void ph_untarget(const pdshm_seg *seg, pdshm_off_t at, struct pdshm_pin_rec *p) {
  if (ph_still(seg, at, PDSHM_T_PIN)) p->target = 0;
}

static int ph_collect(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  struct ph_targets *pt = arg;
  struct pdshm_pin_rec *p = ph_pin(pt->seg, at + PDSHM_BLK_HDR);
  (void)b, (void)w;
  pdshm_off_t target = p ? ph_pin_target(p) : 0;
  if (!target) return 0;
  if (!ph_tbuf(pt->seg, target)) { /* names no buffer: let it count for nothing */
    ph_untarget(pt->seg, at, p);
    return 0;
  }
  if (pt->uncounted) return 0;
  if (pt->n == pt->cap) {
    size_t cap = pt->cap ? pt->cap * 2 : 64;
    pdshm_off_t *nt = pdshm__zalloc(cap * sizeof *nt);
    if (nt && pt->n) memcpy(nt, pt->t, pt->n * sizeof *nt);
    pdshm__xfree(pt->t);
    pt->t = nt;
    if (!nt) { /* the walk per buffer counts them instead */
      pt->cap = pt->n = 0;
      pt->uncounted = true;
      return 0;
    }
    pt->cap = cap;
  }
  pt->t[pt->n++] = target;
  return 0;
}

static int ph_count_one(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  struct ph_targets *pt = arg;
  const struct pdshm_pin_rec *p = ph_pin(pt->seg, at + PDSHM_BLK_HDR);
  (void)b, (void)w;
  if (p && ph_pin_target(p) == pt->counting) pt->count++;
  return 0;
}

static int ph_off_cmp(const void *a, const void *b) {
  pdshm_off_t x = *(const pdshm_off_t *)a, y = *(const pdshm_off_t *)b;
  return x < y ? -1 : x > y;
}

/* How many PIN records target `target`. */
static uint64_t ph_records_of(struct ph_targets *pt, pdshm_off_t target) {
  if (pt->uncounted) {
    pt->counting = target;
    pt->count = 0;
    (void)pdshm__chain_walk(pt->seg, &(struct pdshm_walker){NULL, ph_count_one, pt}, NULL);
    return pt->count;
  }
  size_t lo = 0, hi = pt->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (pt->t[mid] < target) lo = mid + 1;
    else hi = mid;
  }
  uint64_t n = 0;
  while (lo + n < pt->n && pt->t[lo + n] == target) n++;
  return n;
}

/* A count that disagrees with the records was left by a holder that died
 * half way through a pin, an unpin or a sweep.  Not 0: it becomes the
 * records' number.  0 with records: they are all dead holders' (a live pin
 * is counted under the lock we hold), and the buffer may be on its way to a
 * cache; those records are let go instead (ph_unpin_zeroed). */
static int ph_settle(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  struct ph_targets *pt = arg;
  struct pdshm_tensor_buf *t = ph_tbuf(pt->seg, at + PDSHM_BLK_HDR);
  (void)b, (void)w;
  if (!t) return 0;
  uint64_t pins = atomic_load_explicit(&t->pins, memory_order_acquire);
  if (!pins) return 0;
  uint64_t n = ph_records_of(pt, at + PDSHM_BLK_HDR);
  if (pins != n && ph_still(pt->seg, at, PDSHM_T_TENSOR))
    atomic_store_explicit(&t->pins, n, memory_order_release);
  return 0;
}

static int ph_unpin_zeroed(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  struct ph_targets *pt = arg;
  struct pdshm_pin_rec *p = ph_pin(pt->seg, at + PDSHM_BLK_HDR);
  (void)b, (void)w;
  pdshm_off_t target = p ? ph_pin_target(p) : 0;
  if (!target) return 0;
  const struct pdshm_tensor_buf *t = ph_tbuf(pt->seg, target);
  if (!t || !atomic_load_explicit(&t->pins, memory_order_acquire)) ph_untarget(pt->seg, at, p);
  return 0;
}

static int ph_free_unpinned(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  pdshm_seg *seg = ((const struct ph_targets *)arg)->seg;
  struct pdshm_tensor_buf *t = ph_tbuf(seg, at + PDSHM_BLK_HDR);
  (void)b, (void)w;
  if (t && t->orphan && !atomic_load_explicit(&t->pins, memory_order_relaxed)) {
    ph_mark_free(seg, at);
    PDSHM_CRASHPOINT("pin.recount.freed");
  }
  return 0;
}

static int ph_pass(struct ph_targets *pt,
                   int (*visit)(void *, pdshm_off_t, const struct pdshm_blk *, uint64_t)) {
  return pdshm__chain_walk(pt->seg, &(struct pdshm_walker){NULL, visit, pt}, NULL);
}

int pdshm__pin_recount_locked(pdshm_seg *seg) {
  PDSHM_ASSERT(pdshm__lock_mine(seg, PDSHM_LOCK_HEAP));
  struct ph_targets pt = {.seg = seg};
  int rc = ph_pass(&pt, ph_collect);
  if (!rc) {
    if (pt.n) qsort(pt.t, pt.n, sizeof *pt.t, ph_off_cmp);
    rc = ph_pass(&pt, ph_settle);
  }
  PDSHM_CRASHPOINT("pin.recount.counted");
  if (!rc) rc = ph_pass(&pt, ph_unpin_zeroed);
  PDSHM_CRASHPOINT("pin.recount.unpinned");
  if (!rc) rc = ph_pass(&pt, ph_free_unpinned);
  pdshm__xfree(pt.t);
  return rc;
}
