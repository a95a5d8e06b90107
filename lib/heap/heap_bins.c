/*
 * heap_bins.c - the heap's bins: the lists of FREE blocks by size and their
 * bitmap (heap lock held); and the prev16 and tail hints, which follow every
 * block size the heap changes.
 *
 * Owns: struct pdshm_heap's bins and nonempty bitmap (layout.h), and the bin
 * of each size (pdshm__bin_of, which the checker also uses).
 *
 * Invariants: layout.h's 3 (a FREE block is on exactly one bin list, its
 * size's) is kept by these and their callers (heap.c, heap_grow.c,
 * heap_sweep.c); and:
 *  H2. The bins' links are hints read from the segment: every one is checked
 *      to be a FREE block of its bin that fits the arena before it is
 *      followed or written through (pdshm__bin_link), and one that is not
 *      ends its list (damage, by another process or a bug: the blocks behind
 *      it are binned again by the next rebuild, and pdshm_check reports
 *      them).  A free merges only with neighbours that the chain confirms.
 */
#define PDSHM_LAYER 3 /* heap/ (lib/LAYERS) */
#include "config.h"

#include "heap/heap.h"
#include "heap/heap_blocks.h"

#define EXACT_BINS 62u     /* bins of sizes 32..1008, one per 16 bytes     */
#define SCAN_LIMIT 16u     /* entries examined in a non-exact bin          */

/* ---- bins (heap lock) ---------------------------------------------------------- */

/* The bin a FREE block of that size lives in. */
unsigned pdshm__bin_of(uint64_t size) {
  if (size < 1024) return (unsigned)(size / 16 - 2);
  unsigned l = 63u - (unsigned)__builtin_clzll(size);
  return EXACT_BINS + (l - 10) * 8 + (unsigned)((size >> (l - 3)) & 7);
}

/* The smallest size a block of bin b can have. */
static uint64_t bin_floor(unsigned b) {
  if (b < EXACT_BINS) return 32u + 16u * b;
  unsigned l = 10 + (b - EXACT_BINS) / 8;
  return (uint64_t)(8 + (b - EXACT_BINS) % 8) << (l - 3);
}

/* The size of the FREE block at off when it lies inside the arena, else 0. */
uint64_t pdshm__free_block_size(const pdshm_seg *seg, pdshm_off_t off) {
  if (off % PDSHM_ALIGN || off < seg->hdr->arena_off || !pdshm__seg_holds(seg, off, PDSHM_BLK_MIN))
    return 0;
  uint64_t w = blk_word(blk_at(seg, off)), size = pdshm__blk_size(w);
  if (pdshm__blk_state(w) != PDSHM_BLK_FREE || size < PDSHM_BLK_MIN || !pdshm__seg_holds(seg, off, size))
    return 0;
  return size;
}

/* Invariant H2: link o of bin b, or 0 when it names no FREE block of b. */
pdshm_off_t pdshm__bin_link(const pdshm_seg *seg, pdshm_off_t o, unsigned b) {
  uint64_t size = o ? pdshm__free_block_size(seg, o) : 0;
  return size && pdshm__bin_of(size) == b ? o : 0;
}

void pdshm__bin_insert(pdshm_seg *seg, pdshm_off_t off, uint64_t size) {
  struct pdshm_heap *h = heap_of(seg);
  unsigned b = pdshm__bin_of(size);
  struct pdshm_free_links *l = blk_links(seg, off);
  l->prev = 0;
  l->next = pdshm__bin_link(seg, h->bins[b], b);
  if (l->next) blk_links(seg, l->next)->prev = off;
  h->bins[b] = off;
  h->nonempty[b / 64] |= 1ull << (b % 64);
}

void pdshm__bin_remove(pdshm_seg *seg, pdshm_off_t off, uint64_t size) {
  struct pdshm_heap *h = heap_of(seg);
  unsigned b = pdshm__bin_of(size);
  struct pdshm_free_links *l = blk_links(seg, off);
  pdshm_off_t prev = pdshm__bin_link(seg, l->prev, b), next = pdshm__bin_link(seg, l->next, b);
  if (prev) blk_links(seg, prev)->next = next;
  if (h->bins[b] == off || !pdshm__bin_link(seg, h->bins[b], b)) h->bins[b] = next;
  if (next) blk_links(seg, next)->prev = prev;
  if (!h->bins[b]) h->nonempty[b / 64] &= ~(1ull << (b % 64));
}

/* The first non-empty bin at or after b, or PDSHM_NBINS. */
static unsigned bin_next(const struct pdshm_heap *h, unsigned b) {
  for (unsigned w = b / 64; w < PDSHM_NBINS / 64; w++) {
    uint64_t m = h->nonempty[w] & (w == b / 64 ? ~0ull << (b % 64) : ~0ull);
    if (m) return w * 64 + (unsigned)__builtin_ctzll(m);
  }
  return PDSHM_NBINS;
}

/* A FREE block of at least n bytes, or 0: first fit in n's own bin (bounded),
 * then any block of the next non-empty bin whose floor is >= n. */
pdshm_off_t pdshm__bin_search(pdshm_seg *seg, uint64_t n) {
  struct pdshm_heap *h = heap_of(seg);
  unsigned b = pdshm__bin_of(n), k = 0;
  for (pdshm_off_t o = pdshm__bin_link(seg, h->bins[b], b); o && k < SCAN_LIMIT;
       o = pdshm__bin_link(seg, blk_links(seg, o)->next, b), k++)
    if (pdshm__blk_size(blk_word(blk_at(seg, o))) >= n) return o;
  for (unsigned nb = bin_next(h, bin_floor(b) >= n && b < EXACT_BINS ? b : b + 1);
       nb < PDSHM_NBINS; nb = bin_next(h, nb + 1)) {
    pdshm_off_t o = pdshm__bin_link(seg, h->bins[nb], nb);
    if (o) return o;
    h->bins[nb] = 0; /* H2: a damaged head empties its bin */
    h->nonempty[nb / 64] &= ~(1ull << (nb % 64));
  }
  for (pdshm_off_t o = pdshm__bin_link(seg, h->bins[b], b); o; /* the rest of n's bin */
       o = pdshm__bin_link(seg, blk_links(seg, o)->next, b))
    if (pdshm__blk_size(blk_word(blk_at(seg, o))) >= n) return o;
  return 0;
}

/* ---- the hints beside the chain (heap lock) ---------------------------------------- */

/* Sets the hint of the block after off to off's size, or, when off is the
 * last block, the heap's tail hint to off: every block size the heap
 * changes ends here, so the hints follow the chain. */
void pdshm__fix_next_prev(pdshm_seg *seg, pdshm_off_t off, uint64_t size) {
  if (off + size < pdshm__seg_known(seg) || off + size < pdshm__seg_end(seg))
    blk_at(seg, off + size)->prev16 = (uint32_t)(size / 16);
  else
    heap_of(seg)->tail = off;
}
