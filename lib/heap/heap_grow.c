/*
 * heap_grow.c - the arena's growth: when no block fits, the segment grows
 * towards its max_size, geometrically (heap lock held).
 *
 * Owns: the growth of arena_end (layout.h, invariant 2) and struct
 * pdshm_heap's growths.
 *
 * Invariants:
 *  H4. The arena grows only here (pdshm__heap_grow, heap lock held), by
 *      layout.h's invariant 2: the file is extended first (fallocate: a full
 *      /dev/shm is ENOSPC, never a SIGBUS), then the new FREE block's header
 *      is written past the old end, then arena_end is published by one
 *      release store, then the block is merged with a FREE last block and
 *      binned.  Growth is geometric (the arena doubles, within max_size;
 *      when /dev/shm cannot hold a doubling, just what the allocation
 *      lacks), so N allocations cost O(log N) growths.
 *
 * Crash windows:
 *  - a growth: before the publication, the file holds bytes nobody counts
 *    (attach allows a file longer than arena_end; the next grower writes
 *    them again); after it, the chain ends with a FREE block, perhaps beside
 *    another, not yet binned: the rebuild merges and bins them.
 */
#define PDSHM_LAYER 3 /* heap/ (lib/LAYERS) */
#include "config.h"

#include "heap/heap.h"
#include "heap/heap_blocks.h"

/* ---- growing (heap lock) ------------------------------------------------------------ */

/* The last block of the chain, or 0 when the chain is broken: the tail hint
 * when the chain confirms it (its size ends the arena, and its prev16 names
 * a block that ends where it starts), else found by a walk. */
static int tail_visit(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  (void)b, (void)w;
  *(pdshm_off_t *)arg = at;
  return 0;
}

static pdshm_off_t tail_block(pdshm_seg *seg, uint64_t end) {
  const struct pdshm_hdr *hd = seg->hdr;
  pdshm_off_t t = heap_of(seg)->tail;
  if (t % PDSHM_ALIGN == 0 && t >= hd->arena_off && t < end &&
      pdshm__blk_size(blk_word(blk_at(seg, t))) == end - t) {
    uint64_t p = (uint64_t)blk_at(seg, t)->prev16 * 16;
    if (p ? p <= t - hd->arena_off && pdshm__blk_size(blk_word(blk_at(seg, t - p))) == p
          : t == hd->arena_off)
      return t;
  }
  t = 0;
  if (pdshm__chain_walk(seg, &(struct pdshm_walker){NULL, tail_visit, &t}, NULL)) return 0;
  return t;
}

#define GROW_MIN (1ull << 20)           /* the least a growth adds              */
#define GROW_MAX (PDSHM_BLK_MAX / 2)    /* the most: one block, merged or not   */

/* How far to grow for a block of n bytes when the last block is FREE with
 * `have` bytes: as much as the arena has (geometric), at least what n lacks,
 * at most what max_size leaves; 0 when even the least does not fit. */
static uint64_t grow_step(uint64_t arena, uint64_t room, uint64_t n, uint64_t have) {
  uint64_t need = n > have ? n - have : 0;
  need = (need + PDSHM_REGION_ALIGN - 1) / PDSHM_REGION_ALIGN * PDSHM_REGION_ALIGN;
  if (need < PDSHM_BLK_MIN) need = PDSHM_REGION_ALIGN;
  if (need > room || need > GROW_MAX) return 0;
  uint64_t step = arena < GROW_MIN ? GROW_MIN : arena;
  step = step > GROW_MAX ? GROW_MAX : step < need ? need : step;
  step = step / PDSHM_REGION_ALIGN * PDSHM_REGION_ALIGN;
  return step > room ? room / PDSHM_REGION_ALIGN * PDSHM_REGION_ALIGN : step;
}

/* Invariant H4: grows the arena so that a FREE block of n bytes is binned.
 * ENOMEM at max_size, ENOSPC when /dev/shm is full, EBADSEG on a damaged
 * size or chain; nothing changes then but the file's unused tail. */
int pdshm__heap_grow(pdshm_seg *seg, uint64_t n) {
  struct pdshm_hdr *hd = seg->hdr;
  uint64_t end = pdshm__seg_end(seg), max = hd->max_size < seg->size ? hd->max_size : seg->size;
  if (end != hd->arena_end || end > max)
    return pdshm__fail(PDSHM_EBADSEG, "the segment's size %llu lies past its file or max_size",
                       (unsigned long long)hd->arena_end);
  pdshm_off_t t = tail_block(seg, end);
  if (!t) return PDSHM_EBADSEG;
  uint64_t tw = blk_word(blk_at(seg, t)), have = 0;
  if (pdshm__blk_state(tw) == PDSHM_BLK_FREE) have = pdshm__blk_size(tw);
  uint64_t step = grow_step(end - hd->arena_off, max - end, n, have);
  if (have && have + step >= PDSHM_BLK_MAX) { /* too big to merge: n in the new block alone */
    have = 0;
    step = grow_step(end - hd->arena_off, max - end, n, 0);
  }
  if (!step) return PDSHM_ENOMEM;
  int rc = pdshm__heap_fallocate_or_trim(seg, end, step);
  uint64_t least = grow_step(0, max - end, n, have);
  if (rc == PDSHM_ENOSPC && least < step) { /* what /dev/shm still holds may do */
    step = least;
    pdshm__fail_clear();
    rc = pdshm__heap_fallocate_or_trim(seg, end, step);
  }
  if (rc) return rc;
  /* a full /dev/shm made pdshm__heap_fallocate_or_trim trim the FREE blocks,
   * the last one too: its HOLEY flag is the one to merge with, not the one
   * read above */
  tw = blk_word(blk_at(seg, t));
  PDSHM_CRASHPOINT("heap.grow.reserved");
  struct pdshm_blk *b = blk_at(seg, end);
  b->prev16 = (uint32_t)(pdshm__blk_size(tw) / 16);
  pdshm__blk_set_type(b, PDSHM_T_NONE);
  pdshm__blk_set_owner(b, 0);
  blk_set_word(b, step | PDSHM_BLK_FREE);
  PDSHM_CRASHPOINT("heap.grow.block");
  __atomic_store_n(&hd->arena_end, end + step, __ATOMIC_RELEASE);
  __atomic_store_n(&heap_of(seg)->growths, heap_of(seg)->growths + 1, __ATOMIC_RELAXED); /* read unlocked */
  PDSHM_CRASHPOINT("heap.grow.published");
  if (have) { /* invariant 3: one FREE block at the end */
    pdshm__bin_remove(seg, t, have);
    blk_set_word(blk_at(seg, t), (have + step) | PDSHM_BLK_FREE | (tw & PDSHM_BLK_HOLEY));
    PDSHM_CRASHPOINT("heap.grow.merged");
    pdshm__fix_next_prev(seg, t, have + step);
    pdshm__bin_insert(seg, t, have + step);
  } else {
    pdshm__fix_next_prev(seg, end, step);
    pdshm__bin_insert(seg, end, step);
  }
  return 0;
}
