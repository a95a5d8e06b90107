/*
 * heap_blocks.h - what the allocator's own files share, and nothing outside
 * lib/heap/ includes: the access to a block and to the heap's struct
 * (inline), the constants more than one of them uses, and the calls between
 * them.  The allocator is heap.c (sizes, carving and freeing, the lane
 * caches, the API), the bins (heap_bins.c), pages given back and taken again
 * (heap_pages.c), growth (heap_grow.c), and the rebuild and the sweeps
 * (heap_sweep.c).  They call one way, with no cycle: heap.c, heap_grow.c and
 * heap_sweep.c call heap_pages.c and heap_bins.c; heap_pages.c calls
 * heap_bins.c; heap_sweep.c calls heap.c (pdshm__cache_forget), which never
 * calls it.
 */
#ifndef PDSHM_HEAP_BLOCKS_H
#define PDSHM_HEAP_BLOCKS_H

/* Layer 3 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 3
#error "heap/heap_blocks.h is layer 3, above the file that includes it (lib/LAYERS)"
#endif

#include "heap/heap.h"

#define PUNCH_MIN (PDSHM_CLASS_MAX + 1) /* frees above this give pages back */

/* ---- block access ----------------------------------------------------------- */

static inline struct pdshm_blk *blk_at(const pdshm_seg *seg, pdshm_off_t off) {
  return PDSHM_AT(seg->base, off, struct pdshm_blk);
}
static inline uint64_t blk_word(const struct pdshm_blk *b) {
  return atomic_load_explicit(&b->word, memory_order_acquire);
}
static inline void blk_set_word(struct pdshm_blk *b, uint64_t w) {
  atomic_store_explicit(&b->word, w, memory_order_release);
}
static inline struct pdshm_free_links *blk_links(const pdshm_seg *seg, pdshm_off_t off) {
  return PDSHM_AT(seg->base, off + PDSHM_BLK_HDR, struct pdshm_free_links);
}
static inline struct pdshm_heap *heap_of(const pdshm_seg *seg) { return &seg->hdr->heap; }

/* ---- heap_bins.c: the bins (heap lock) -------------------------------------- */
/* The size of the FREE block at off when it lies inside the arena, else 0. */
uint64_t pdshm__free_block_size(const pdshm_seg *seg, pdshm_off_t off);
/* Invariant H2: link o of bin b, or 0 when it names no FREE block of b. */
pdshm_off_t pdshm__bin_link(const pdshm_seg *seg, pdshm_off_t o, unsigned b);
/* The FREE block at off, of that size, onto its bin; off its bin. */
void pdshm__bin_insert(pdshm_seg *seg, pdshm_off_t off, uint64_t size);
void pdshm__bin_remove(pdshm_seg *seg, pdshm_off_t off, uint64_t size);
/* A FREE block of at least n bytes, or 0. */
pdshm_off_t pdshm__bin_search(pdshm_seg *seg, uint64_t n);
/* The prev16 hint of the block after off (or the tail hint) made off's
 * size: every block size the heap changes ends here. */
void pdshm__fix_next_prev(pdshm_seg *seg, pdshm_off_t off, uint64_t size);

/* ---- heap_pages.c: pages given back, taken again (heap lock) ------------------- */
/* Backs [lo, lo+len) of the file, trimming the FREE blocks once when
 * /dev/shm is full: 0, or ENOSPC (also for EFBIG) or -errno; a failure
 * leaves the file as it was. */
int pdshm__heap_fallocate_or_trim(pdshm_seg *seg, uint64_t lo, uint64_t len);
/* Invariant H1: reserves the whole pages under [off, off+size). */
int pdshm__heap_reserve(pdshm_seg *seg, pdshm_off_t off, uint64_t size);
/* Whether a large free of `bytes` stays backed (the retained budget). */
bool pdshm__heap_retain(pdshm_seg *seg, uint64_t bytes);
/* Punches the pages of [at, at+len) inside the FREE block at off. */
void pdshm__heap_punch_extent(pdshm_seg *seg, pdshm_off_t off, pdshm_off_t at, uint64_t len);
/* Gives back the retained bytes when they sat unused too long. */
void pdshm__heap_trim_aged(pdshm_seg *seg);

/* ---- heap_grow.c ------------------------------------------------------------ */
/* Invariant H4: grows the arena so that a FREE block of n bytes is binned
 * (heap lock held).  ENOMEM, ENOSPC or EBADSEG. */
int pdshm__heap_grow(pdshm_seg *seg, uint64_t n);

/* ---- heap.c, for heap_sweep.c ----------------------------------------------- */
/* Empties a swept slot's lane caches. */
void pdshm__cache_forget(struct pdshm_slot *s);

#endif /* PDSHM_HEAP_BLOCKS_H */
