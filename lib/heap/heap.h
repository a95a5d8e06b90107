/*
 * heap/heap.h - layer 3, the heap: the walk of the block chain (chain.c),
 * pin counts and orphans (heap_pins.c), the allocator (heap.c, and beside
 * it heap_bins.c, heap_pages.c, heap_grow.c, heap_sweep.c, which share
 * heap_blocks.h) and its checker (heap_check.c).  An allocation that finds
 * nothing calls the reclaim a higher layer registered
 * (pdshm__heap_set_reclaim).
 */
#ifndef PDSHM_HEAP_HEAP_H
#define PDSHM_HEAP_HEAP_H

/* Layer 3 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 3
#error "heap/heap.h is layer 3, above the file that includes it (lib/LAYERS)"
#endif

#include "locks/locks.h"

static inline struct pdshm_blk *pdshm__blk(const pdshm_seg *seg, pdshm_off_t payload) {
  return PDSHM_AT(seg->base, payload - PDSHM_BLK_HDR, struct pdshm_blk);
}

/* Any type, for pdshm__block_live. */
#define PDSHM_T_ANY 0xffffu

/* The one test of an offset read from the segment that should name a live
 * block (hostile bytes: a record's field, a journal's entry, a handle the
 * caller passed): true when payload is aligned, inside the arena, and the
 * payload of a USED block of `type` (PDSHM_T_ANY: of any type) that has at
 * least `bytes` of payload and lies, whole as its header word says, inside
 * the file (pdshm__seg_holds: the one bound).  Whose it is (its owner) is
 * the caller's question.  What an offset must be before a block is freed,
 * retired or read through it.  It reads the header word once (acquire),
 * also on the optimistic side of a seqlock (a table's lookup), whose reader
 * throws the answer away when the sequence moved. */
PDSHM_SEQLOCK_READ static inline bool pdshm__block_live(const pdshm_seg *seg, pdshm_off_t payload,
                                                        unsigned type, size_t bytes) {
  const uint64_t at = payload - PDSHM_BLK_HDR, end = pdshm__seg_known(seg);
  if (payload % PDSHM_ALIGN || payload < seg->hdr->arena_off + PDSHM_BLK_HDR) return false;
  /* the bound this process knows first (one private load), the published
   * one only when that is not enough (pdshm__seg_holds) */
  if (!(at <= end && end - at >= PDSHM_BLK_HDR + bytes) &&
      !pdshm__seg_holds_slow(seg, at, PDSHM_BLK_HDR + bytes))
    return false;
  const struct pdshm_blk *b = pdshm__blk(seg, payload);
  uint64_t w = atomic_load_explicit(&b->word, memory_order_acquire), size = pdshm__blk_size(w);
  return pdshm__blk_state(w) == PDSHM_BLK_USED && size >= PDSHM_BLK_HDR + bytes &&
         (type == PDSHM_T_ANY || pdshm__blk_type(b) == type) &&
         ((at <= end && end - at >= size) || pdshm__seg_holds_slow(seg, at, size));
}

/* Whether the record at payload, which this process reached through a
 * handle it checked with pdshm__block_live when it made it, is still the
 * payload of a USED block of `type`: the re-check of a hot path (a variable's
 * lock), which needs no bound again, since the mapping never shrinks while
 * attached and the record's place was in it. */
PDSHM_SEQLOCK_READ static inline bool pdshm__block_still(const pdshm_seg *seg, pdshm_off_t payload,
                                                         unsigned type) {
  const struct pdshm_blk *b = pdshm__blk(seg, payload);
  uint64_t w = atomic_load_explicit(&b->word, memory_order_acquire);
  return pdshm__blk_state(w) == PDSHM_BLK_USED && pdshm__blk_type(b) == type;
}

/* ---- chain.c: the one walk of the block chain ------------------------------ */
/* Called for each block of the arena, in chain order (chain.c); a nonzero
 * return stops the walk and is returned by it.  b is the block at `at` and
 * word its header word as the walk read it. */
struct pdshm_walker {
  void (*reset)(void *arg); /* before the walk (and before each retry of    */
                            /* pdshm__walk_blocks); may be NULL             */
  int (*visit)(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t word);
  void *arg;
};
/* Walks the chain from arena_off to arena_end once: 0, what visit returned,
 * or EBADSEG (pdshm_last_error() says where) at damaged arena bounds or a
 * block whose size does not fit; *broke (may be NULL) is then that block's
 * offset, else 0.  The caller holds the heap lock, or copes with a chain
 * that changes under it (pdshm__walk_blocks retries). */
int pdshm__chain_walk(const pdshm_seg *seg, const struct pdshm_walker *w, pdshm_off_t *broke);

/* ---- heap.c; the rebuild and the sweeps: heap_sweep.c ---------------------- */
/* Lays out the arena as FREE blocks (create only). */
void pdshm__heap_init(pdshm_seg *seg);
/* What an allocation that finds no block calls before its last try, to have
 * blocks given back (reap.c registers one that frees the caches of dead
 * slots, once per process: segment.c). */
typedef void (*pdshm_heap_reclaim_fn)(pdshm_seg *seg);
void pdshm__heap_set_reclaim(pdshm_heap_reclaim_fn fn);
/* A USED block of at least `bytes` payload bytes, 16-aligned, of `type`,
 * owned by our slot (owner = slot+1) until a journal publishes it.  The lane
 * must be held by the caller.  ENOMEM when nothing fits even after flushing
 * our caches and the registered reclaim; ENOSPC when /dev/shm cannot back
 * pages that had been given back; EOVERFLOW for absurd sizes. */
int pdshm__alloc(pdshm_seg *seg, struct pdshm_lane_ctx *ln, size_t bytes,
                 unsigned type, pdshm_off_t *payload);
/* Frees a USED block (any process's) into the lane's cache or the heap; with
 * ln == NULL (repairs, reapers) straight to the heap. */
void pdshm__free(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t payload);
/* Returns every block cached by the lane to the heap. */
void pdshm__cache_flush(pdshm_seg *seg, struct pdshm_lane_ctx *ln);
/* The bytes one lane may keep cached, all size classes together. */
uint64_t pdshm__cache_cap(const pdshm_seg *seg);
/* Usable payload bytes of a USED block. */
size_t pdshm__alloc_usable(const pdshm_seg *seg, pdshm_off_t payload);
/* Heap lock held, its previous holder dead: recount the pins from the PIN
 * records (heap_pins.c), then rebuild the bins from the chain.  0, or EBADSEG
 * when the chain itself is broken. */
int pdshm__heap_rebuild(pdshm_seg *seg);
/* Registers the rebuild as the heap lock's repair (pdshm__lock_on_repair);
 * once per process (segment.c). */
void pdshm__heap_init_process(void);
/* Reaper: drops the pins of slot `slot`'s PIN records, frees the CACHED and
 * USED blocks it owns (owner == slot+1; a pinned TENSOR block among them is
 * orphaned instead) and clears its lane caches; blocks whose type bit is set in
 * keep_mask are left alone and returned in *kept (pdshm__zalloc'd payload offsets,
 * *nkept of them) for the caller to release first. */
int pdshm__heap_sweep_slot(pdshm_seg *seg, uint32_t slot, unsigned keep_mask,
                           pdshm_off_t **kept, size_t *nkept);

struct pdshm_heap_class_stats {
  uint32_t block_size;         /* bytes, header included                       */
  uint64_t used, cached;       /* blocks of that size USED, CACHED             */
};
struct pdshm_heap_stats {
  uint64_t arena, used, free, cached;  /* bytes; free includes cached          */
  uint64_t blocks_used, blocks_free, blocks_cached;
  uint64_t largest_free;               /* bytes of the largest FREE block      */
  uint64_t large_used, large_blocks;   /* above PDSHM_CLASS_MAX                */
  uint64_t by_type[PDSHM_T_COUNT];     /* USED bytes of each type              */
  uint64_t rebuilds, punched;
  uint64_t orphan_bytes, orphan_blocks; /* pinned buffers no variable holds    */
  struct pdshm_heap_class_stats cls[PDSHM_NCLASSES];
};
/* Walks the chain under the heap lock (a snapshot). */
int pdshm__heap_stats(pdshm_seg *seg, struct pdshm_heap_stats *st);
/* Walks the chain and the bins and verifies invariants 2-4 of layout.h; writes
 * one line per problem to report (may be NULL); returns the problem count, or
 * a negative code when it could not look. */
int pdshm__heap_check(pdshm_seg *seg, FILE *report);
/* One line of a check's report ("pdshm_check: <what><message>"); report may
 * be NULL. */
void pdshm__check_vsay(FILE *report, const char *what, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* The same with the heap lock already held (pdshm_check stops the world),
 * or, on a read-only attachment, which cannot take it, none. */
int pdshm__heap_check_locked(pdshm_seg *seg, FILE *report);
/* Heap lock held: returns a USED block to the bins at once. */
void pdshm__heap_release_locked(pdshm_seg *seg, pdshm_off_t payload);

/* ---- heap_pins.c: pin counts and orphans (layout.h, invariant 6) ----------- */
/* Whether the TENSOR block at payload has pins (no lock: see heap_pins.c, 3). */
bool pdshm__tensor_pinned(const pdshm_seg *seg, pdshm_off_t payload);
/* Its pin count and orphan flag (0 / false unless a USED TENSOR block). */
uint64_t pdshm__tensor_pins(const pdshm_seg *seg, pdshm_off_t payload, bool *orphan);
/* Heap lock held: the buffer at payload is unhooked while pinned. */
void pdshm__pin_orphan_locked(pdshm_seg *seg, pdshm_off_t payload);
/* Heap lock held: PIN record rec (empty) now pins the buffer `target`.
 * EBADSEG when either is not what it should be. */
int pdshm__pin_take_locked(pdshm_seg *seg, pdshm_off_t rec, pdshm_off_t target);
/* Heap lock held: PIN record rec lets go of its buffer; returns that buffer
 * when it was an orphan and this was its last pin (the caller frees it),
 * else 0. */
pdshm_off_t pdshm__pin_drop_locked(pdshm_seg *seg, pdshm_off_t rec);
/* Heap lock held: drops the pins of the PIN records slot tag-1 owns, marking
 * the orphans that lose their last pin FREE (a relink must follow). */
int pdshm__pin_sweep_slot_locked(pdshm_seg *seg, uint16_t tag);
/* Heap lock held, its holder dead: every pin count from the PIN records,
 * orphans left without a pin marked FREE (a relink must follow). */
int pdshm__pin_recount_locked(pdshm_seg *seg);

/* Frees the CACHED blocks of slot `slot` (whose OFD lock the caller holds). */
int pdshm__heap_sweep_cached(pdshm_seg *seg, uint32_t slot);
/* The free-list bin of a FREE block of that size (heap_bins.c; the checker). */
unsigned pdshm__bin_of(uint64_t size);
/* Size class helpers (exposed for the tests). */
unsigned pdshm__class_of(size_t block_bytes); /* PDSHM_NCLASSES when large */
uint32_t pdshm__class_size(unsigned cls);

#endif /* PDSHM_HEAP_HEAP_H */
