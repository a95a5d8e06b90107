/*
 * heap.c - the in-segment allocator: size classes, blocks carved and freed,
 * the lane caches, and the heap's API (pdshm__alloc, pdshm__free, ...).
 * Beside it, each with one job: the bins (heap_bins.c), pages given back
 * and taken again (heap_pages.c), growth (heap_grow.c), the rebuild and the
 * sweeps (heap_sweep.c); heap_blocks.h is what they share.
 *
 * Owns: struct pdshm_blk, struct pdshm_heap (each of its parts kept by the
 * file that says so), the lanes' cache bins (layout.h), and every block
 * size.
 *
 * Invariants: layout.h's 2 (the chain; its bins, bitmap and prev16 are
 * rebuilt from it by pdshm__heap_rebuild, heap_sweep.c), 3, 4 and 6 (a
 * pinned TENSOR block is orphaned, never freed, by pdshm__free or a sweep)
 * are the heap's to keep, here and in the files beside it; H1 is
 * heap_pages.c's, H2 heap_bins.c's, H4 heap_grow.c's; and:
 *  H3. A lane cache's links are checked the same way (H2) before use: a
 *      CACHED block of the cache's class, owned by the lane's slot
 *      (cache_link); one that is not empties the cache (its blocks stay the
 *      slot's, and the sweep at its detach or reap frees them).
 *
 * Crash windows (a growth: heap_grow.c; a trim: heap_pages.c):
 *  - a cache pop or push is two stores (the block's word, the lane's head):
 *    dead lanes' lists are never read again; the reaper's sweep goes by the
 *    blocks' owner field instead;
 *  - inside the heap lock: anything, repaired by the rebuild.
 */
#define PDSHM_LAYER 3 /* heap/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "heap/heap.h"
#include "heap/heap_blocks.h"

#define SMALL_CLASSES 31u  /* 32..512 by 16                                */
#define CACHE_MAX 512u /* blocks of one class in a lane's cache          */
#define REFILL_MAX 16u /* blocks a locked allocation adds to its cache   */

/* ---- sizes ---------------------------------------------------------------- */

uint32_t pdshm__class_size(unsigned c) {
  if (c < SMALL_CLASSES) return 32u + 16u * c;
  unsigned k = c - SMALL_CLASSES;
  uint32_t base = 512u << (k / 4);
  return base + (k % 4 + 1) * (base / 4);
}

unsigned pdshm__class_of(size_t bytes) {
  if (bytes <= 512) return bytes <= 32 ? 0 : (unsigned)((bytes + 15) / 16 - 2);
  if (bytes > PDSHM_CLASS_MAX) return PDSHM_NCLASSES;
  /* base = 512 << d with base < bytes <= 2 base; quarters of base above it */
  unsigned d = 63u - (unsigned)__builtin_clzll((bytes - 1) / 512);
  /* base / 4 is 128 << d: a shift, not a division, on every allocation */
  uint64_t base = 512ull << d, q = (bytes - base + base / 4 - 1) >> (d + 7);
  return SMALL_CLASSES + d * 4 + (unsigned)q - 1;
}

/* Bytes a lane may keep cached, all its classes together: about 1/512 of
 * the arena (64 KiB to 2 MiB).  A bound on the lane, not on each class, so
 * that what caches strand stays a small share of the arena (32 lanes at
 * most 1/16 of it above the floor) whichever classes a process uses, while
 * a working set of one class (a step's ten 4 KiB tensors) stays cached
 * whole. */
static inline uint64_t lane_cap(const pdshm_seg *seg) {
  uint64_t bytes = (pdshm__seg_known(seg) - seg->hdr->arena_off) / 512;
  return bytes < (64u << 10) ? (64u << 10) : bytes > (2u << 20) ? (2u << 20) : bytes;
}

uint64_t pdshm__cache_cap(const pdshm_seg *seg) { return lane_cap(seg); }

/* pdshm__class_of for the fast paths: the small classes without a call. */
static inline unsigned class_of_fast(uint64_t bytes) {
  return bytes <= 512 ? (bytes <= 32 ? 0 : (unsigned)((bytes + 15) / 16 - 2)) : pdshm__class_of(bytes);
}

/* ---- carving and freeing (heap lock) -------------------------------------------------- */

/* Records of what a process holds must read as empty until a journal (or,
 * for a pin, the heap lock) fills them in (records.h, layout.h invariant 6),
 * and a tensor buffer starts with no pin: they are zeroed before they
 * become USED. */
static inline void zero_if_record(pdshm_seg *seg, pdshm_off_t off, uint64_t size, unsigned type) {
  if (type == PDSHM_T_HANDLE || type == PDSHM_T_HOLD || type == PDSHM_T_PIN)
    memset(PDSHM_AT(seg->base, off + PDSHM_BLK_HDR, void), 0, size - PDSHM_BLK_HDR);
  if (type == PDSHM_T_TENSOR && size >= PDSHM_BLK_HDR + sizeof(struct pdshm_tensor_buf))
    memset(PDSHM_AT(seg->base, off + PDSHM_BLK_HDR, void), 0, sizeof(struct pdshm_tensor_buf));
}

/* Takes n bytes from the front of FREE block off, in state `state`, owned by
 * `owner`; the rest stays FREE. */
static int carve(pdshm_seg *seg, pdshm_off_t off, uint64_t n, unsigned state, uint16_t owner,
                 unsigned type) {
  struct pdshm_blk *b = blk_at(seg, off);
  uint64_t w = blk_word(b), size = pdshm__blk_size(w), holey = w & PDSHM_BLK_HOLEY;
  if (size - n < PDSHM_BLK_MIN) n = size;
  if (holey) { /* what we hand out, and the tail's header and links */
    int rc = pdshm__heap_reserve(seg, off, n < size ? n + PDSHM_BLK_MIN : n);
    if (rc) return rc;
    PDSHM_CRASHPOINT("heap.carve.reserved");
  }
  if (n > PDSHM_CLASS_MAX) /* a large block in use again: budget back */
    heap_of(seg)->retained -= heap_of(seg)->retained < n ? heap_of(seg)->retained : n;
  pdshm__bin_remove(seg, off, size);
  if (n < size) { /* invariant 2: the tail's header first */
    struct pdshm_blk *t = blk_at(seg, off + n);
    t->prev16 = (uint32_t)(n / 16);
    pdshm__blk_set_type(t, PDSHM_T_NONE);
    pdshm__blk_set_owner(t, 0);
    blk_set_word(t, (size - n) | PDSHM_BLK_FREE | holey);
    pdshm__fix_next_prev(seg, off + n, size - n);
    PDSHM_CRASHPOINT("heap.carve.tail");
  }
  zero_if_record(seg, off, n, type);
  pdshm__blk_set_type(b, (uint16_t)type);
  pdshm__blk_set_owner(b, owner);
  blk_set_word(b, n | state);
  PDSHM_CRASHPOINT("heap.carve.head");
  if (n < size) pdshm__bin_insert(seg, off + n, size - n);
  return 0;
}

/* Returns a USED or CACHED block to the bins, merging with FREE neighbours
 * (up to the largest block size).  The block turns FREE first, so that a
 * death at any later store leaves FREE blocks (merged and binned again by the
 * rebuild) that still carry their HOLEY flags; a block is flagged HOLEY before
 * its pages are punched, never after. */
static void heap_release(pdshm_seg *seg, pdshm_off_t off) {
  struct pdshm_blk *b = blk_at(seg, off);
  const pdshm_off_t freed_at = off;
  const uint64_t freed = pdshm__blk_size(blk_word(b));
  uint64_t size = freed, holey = 0, end = pdshm__seg_end(seg);
  if (freed < PDSHM_BLK_MIN || freed > end - off)
    return; /* a size that is not the chain's: left for pdshm_check to report */
  blk_set_word(b, size | PDSHM_BLK_FREE);
  pdshm__blk_set_type(b, PDSHM_T_NONE);
  pdshm__blk_set_owner(b, 0);
  PDSHM_CRASHPOINT("heap.release.free");
  pdshm_off_t next = off + size;
  uint64_t nsize = next < end ? pdshm__free_block_size(seg, next) : 0;
  if (nsize && size + nsize < PDSHM_BLK_MAX) {
    uint64_t nw = blk_word(blk_at(seg, next));
    pdshm__bin_remove(seg, next, nsize);
    holey |= nw & PDSHM_BLK_HOLEY;
    size += nsize;
    blk_set_word(b, size | PDSHM_BLK_FREE | holey);
    PDSHM_CRASHPOINT("heap.release.merge_next");
  }
  if (off - seg->hdr->arena_off >= (uint64_t)b->prev16 * 16 && b->prev16) {
    pdshm_off_t prev = off - (uint64_t)b->prev16 * 16; /* a hint: H2 */
    uint64_t pw = blk_word(blk_at(seg, prev));
    if (pdshm__free_block_size(seg, prev) == off - prev &&
        size + pdshm__blk_size(pw) < PDSHM_BLK_MAX) {
      pdshm__bin_remove(seg, prev, pdshm__blk_size(pw));
      holey |= pw & PDSHM_BLK_HOLEY;
      size += pdshm__blk_size(pw);
      off = prev;
      b = blk_at(seg, prev);
      blk_set_word(b, size | PDSHM_BLK_FREE | holey);
      PDSHM_CRASHPOINT("heap.release.merge_prev");
    }
  }
  if (freed >= PUNCH_MIN) pdshm__heap_trim_aged(seg);
  bool give_back = freed >= PUNCH_MIN && !pdshm__heap_retain(seg, freed);
  if (give_back) blk_set_word(b, size | PDSHM_BLK_FREE | PDSHM_BLK_HOLEY);
  pdshm__fix_next_prev(seg, off, size);
  pdshm__bin_insert(seg, off, size);
  if (give_back) {
    PDSHM_CRASHPOINT("heap.release.punch");
    pdshm__heap_punch_extent(seg, off, freed_at, freed);
  }
}

/* ---- the lane caches ---------------------------------------------------------------- */

static pdshm_off_t *next_of(const pdshm_seg *seg, pdshm_off_t off) {
  return &blk_links(seg, off)->next;
}

static void cache_push(pdshm_seg *seg, struct pdshm_lane *l, unsigned c, pdshm_off_t off,
                       uint16_t tag) {
  struct pdshm_cache_bin *cb = &l->cache[c];
  struct pdshm_blk *b = blk_at(seg, off);
  pdshm__blk_set_owner(b, tag);
  pdshm__blk_set_type(b, PDSHM_T_NONE);
  /* CACHED before the link, which overwrites the payload's first word: a
   * recount that reads the link then sees the block cached (heap_pins.c). */
  blk_set_word(b, pdshm__blk_size(blk_word(b)) | PDSHM_BLK_CACHED);
  __atomic_store_n(next_of(seg, off), cb->head, __ATOMIC_RELEASE);
  PDSHM_CRASHPOINT("heap.cache.push");
  cb->head = off;
  cb->count++;
  l->cached += pdshm__class_size(c);
}

/* Invariant H3: the head of l's bin of class c when it is a CACHED block of
 * that class owned by `tag`; else 0, and the bin is emptied. */
static inline __attribute__((always_inline)) pdshm_off_t cache_link(pdshm_seg *seg,
                                                                    struct pdshm_lane *l,
                                                                    unsigned c, uint16_t tag) {
  struct pdshm_cache_bin *cb = &l->cache[c];
  const uint64_t size = pdshm__class_size(c);
  pdshm_off_t off = cb->head;
  if (off % PDSHM_ALIGN == 0 && off >= seg->hdr->arena_off && pdshm__seg_holds(seg, off, size)) {
    const struct pdshm_blk *b = blk_at(seg, off);
    uint64_t w = blk_word(b);
    if (pdshm__blk_state(w) == PDSHM_BLK_CACHED && pdshm__blk_size(w) == size &&
        pdshm__blk_owner(b) == tag)
      return off;
  }
  l->cached -= l->cached < cb->count * size ? l->cached : cb->count * size;
  cb->head = 0;
  cb->count = 0;
  return 0;
}

/* The head of l's bin of class c, unlinked (0 when the bin is empty). */
static inline __attribute__((always_inline)) pdshm_off_t cache_take(pdshm_seg *seg,
                                                                    struct pdshm_lane *l,
                                                                    unsigned c, uint16_t tag) {
  pdshm_off_t off = cache_link(seg, l, c, tag);
  if (!off) return 0;
  l->cache[c].head = *next_of(seg, off);
  l->cache[c].count--;
  l->cached -= pdshm__class_size(c);
  return off;
}

/* A block of class c for `type` from l's cache, or 0 when it has none. */
static pdshm_off_t cache_pop(pdshm_seg *seg, struct pdshm_lane *l, unsigned c, unsigned type,
                             uint16_t tag) {
  pdshm_off_t off = cache_take(seg, l, c, tag);
  if (!off) return 0;
  PDSHM_CRASHPOINT("heap.cache.pop");
  const uint64_t size = pdshm__class_size(c);
  zero_if_record(seg, off, size, type);
  pdshm__blk_set_type(blk_at(seg, off), (uint16_t)type);
  blk_set_word(blk_at(seg, off), size | PDSHM_BLK_USED);
  return off;
}

/* Hands `n` cached blocks of class c back to the heap (lock held). */
static void cache_drain(pdshm_seg *seg, struct pdshm_lane *l, unsigned c, unsigned n,
                        uint16_t tag) {
  for (pdshm_off_t off; n-- && (off = cache_take(seg, l, c, tag));) {
    PDSHM_CRASHPOINT("heap.cache.drain");
    heap_release(seg, off);
  }
}

/* Whether l may keep what it caches: the lane's cap and CACHE_MAX blocks of
 * class c. */
static bool cache_within(const pdshm_seg *seg, const struct pdshm_lane *l, unsigned c) {
  return l->cached <= lane_cap(seg) && l->cache[c].count <= CACHE_MAX;
}

/* After a push of class c went past the cap or CACHE_MAX (lock held): the
 * other classes' blocks go back, the largest first, while the lane caches
 * more than its cap (c, just freed, is the size in use); then half of c's,
 * when that was not enough. */
static void cache_trim(pdshm_seg *seg, struct pdshm_lane *l, unsigned c, uint16_t tag) {
  for (unsigned k = PDSHM_NCLASSES; k-- && l->cached > lane_cap(seg);)
    if (k != c) cache_drain(seg, l, k, ~0u, tag);
  if (!cache_within(seg, l, c)) cache_drain(seg, l, c, (l->cache[c].count + 1) / 2, tag);
}

/* Adds class-c blocks to l's cache (lock held): REFILL_MAX of them, or
 * half of what the lane's cap leaves room for when that is fewer. */
static void cache_refill(pdshm_seg *seg, struct pdshm_lane *l, unsigned c, uint16_t tag) {
  struct pdshm_cache_bin *cb = &l->cache[c];
  const uint32_t size = pdshm__class_size(c);
  const uint64_t cap = lane_cap(seg), room = l->cached < cap ? (cap - l->cached) / size : 0;
  for (uint64_t k = room / 2 < REFILL_MAX ? room / 2 : REFILL_MAX; k; k--) {
    pdshm_off_t off = pdshm__bin_search(seg, size);
    if (!off || carve(seg, off, size, PDSHM_BLK_CACHED, tag, PDSHM_T_NONE)) return;
    if (pdshm__blk_size(blk_word(blk_at(seg, off))) != size) { /* too small a remainder */
      heap_release(seg, off);
      return;
    }
    PDSHM_CRASHPOINT("heap.cache.refill");
    *next_of(seg, off) = cb->head;
    cb->head = off;
    cb->count++;
    l->cached += size;
  }
}

/* Empties a swept slot's caches: their blocks were freed by the walk. */
void pdshm__cache_forget(struct pdshm_slot *s) {
  for (unsigned k = 0; k < PDSHM_LANES; k++) {
    memset(s->lane[k].cache, 0, sizeof s->lane[k].cache);
    s->lane[k].cached = 0;
  }
}

/* ---- the API ---------------------------------------------------------------------- */

void pdshm__heap_init(pdshm_seg *seg) {
  const struct pdshm_hdr *hd = seg->hdr;
  memset(heap_of(seg), 0, sizeof *heap_of(seg));
  uint64_t prev = 0;
  for (pdshm_off_t at = hd->arena_off; at < hd->arena_end;) {
    uint64_t size = hd->arena_end - at, max = PDSHM_BLK_MAX - PDSHM_ALIGN;
    heap_of(seg)->tail = at;
    if (size > max) size = size - max < PDSHM_BLK_MIN ? max - PDSHM_BLK_MIN : max;
    struct pdshm_blk *b = blk_at(seg, at);
    b->prev16 = (uint32_t)(prev / 16);
    pdshm__blk_set_type(b, PDSHM_T_NONE);
    pdshm__blk_set_owner(b, 0);
    blk_set_word(b, size | PDSHM_BLK_FREE);
    pdshm__bin_insert(seg, at, size);
    prev = size;
    at += size;
  }
}

size_t pdshm__alloc_usable(const pdshm_seg *seg, pdshm_off_t payload) {
  return pdshm__blk_size(blk_word(blk_at(seg, payload - PDSHM_BLK_HDR))) - PDSHM_BLK_HDR;
}

/* One attempt under the heap lock: the block itself (a little bigger than
 * asked when the rest would be too small to stand alone), growing the
 * segment for it when `grow` and no block fits, then, for a small class,
 * more of the same into the lane's cache. */
static int alloc_locked(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint64_t n, unsigned c,
                        unsigned type, bool grow, pdshm_off_t *blk) {
  int rc = pdshm__lock(seg, PDSHM_LOCK_HEAP);
  if (rc) return rc;
  PDSHM_CRASHPOINT("heap.locked");
  pdshm__heap_trim_aged(seg);
  if (c < PDSHM_NCLASSES) n = pdshm__class_size(c);
  pdshm_off_t off = pdshm__bin_search(seg, n);
  rc = off ? 0 : grow ? pdshm__heap_grow(seg, n) : PDSHM_ENOMEM;
  if (!rc && !off) off = pdshm__bin_search(seg, n);
  if (!rc) rc = off ? carve(seg, off, n, PDSHM_BLK_USED, ln->tag, type) : PDSHM_ENOMEM;
  if (!rc) *blk = off;
  if (!rc && c < PDSHM_NCLASSES) cache_refill(seg, ln->rec, c, ln->tag);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  return rc;
}

/* Gives every cached block of the lane back (lock taken here). */
void pdshm__cache_flush(pdshm_seg *seg, struct pdshm_lane_ctx *ln) {
  if (pdshm__lock(seg, PDSHM_LOCK_HEAP)) return;
  for (unsigned c = 0; c < PDSHM_NCLASSES; c++)
    cache_drain(seg, ln->rec, c, ~0u, ln->tag);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
}

/* Written once per process, before its first segment (segment.c, under
 * pthread_once), and only read after. */
static pdshm_heap_reclaim_fn heap_reclaim;

void pdshm__heap_set_reclaim(pdshm_heap_reclaim_fn fn) { heap_reclaim = fn; }

int pdshm__alloc(pdshm_seg *seg, struct pdshm_lane_ctx *ln, size_t bytes, unsigned type,
                 pdshm_off_t *payload) {
  if (bytes > PDSHM_BLK_MAX - 2 * PDSHM_ALIGN)
    return pdshm__fail(PDSHM_EOVERFLOW, "%zu bytes is more than one block can hold", bytes);
  uint64_t n = (bytes + PDSHM_BLK_HDR + PDSHM_ALIGN - 1) & ~(uint64_t)(PDSHM_ALIGN - 1);
  if (n < PDSHM_BLK_MIN) n = PDSHM_BLK_MIN;
  unsigned c = class_of_fast(n);
  pdshm_off_t blk = 0;
  if (c < PDSHM_NCLASSES && ln->rec->cache[c].head)
    blk = cache_pop(seg, ln->rec, c, type, ln->tag); /* no lock */
  if (!blk) {
    int rc = alloc_locked(seg, ln, n, c, type, false, &blk);
    if (rc == PDSHM_ENOMEM) { /* our own caches, what the reclaim gives back, growth */
      pdshm__cache_flush(seg, ln);
      if (heap_reclaim) heap_reclaim(seg);
      rc = alloc_locked(seg, ln, n, c, type, true, &blk);
    }
    if (rc == PDSHM_ENOMEM)
      return pdshm__fail(PDSHM_ENOMEM,
                         "no free block of %llu bytes in the segment (%llu MiB, at most %llu MiB)",
                         (unsigned long long)n, (unsigned long long)(pdshm__seg_end(seg) >> 20),
                         (unsigned long long)(seg->hdr->max_size >> 20));
    if (rc) return rc;
  }
  *payload = blk + PDSHM_BLK_HDR;
  PDSHM_ASSERT(pdshm__block_live(seg, *payload, type, bytes));
  return 0;
}

void pdshm__heap_release_locked(pdshm_seg *seg, pdshm_off_t payload) {
  PDSHM_ASSERT(pdshm__lock_mine(seg, PDSHM_LOCK_HEAP));
  if (pdshm__block_live(seg, payload, PDSHM_T_ANY, 0)) heap_release(seg, payload - PDSHM_BLK_HDR);
}

/* A pinned buffer is orphaned, not freed (layout.h, invariant 6); its pins
 * may have gone meanwhile, so the lock decides. */
static void free_pinned(pdshm_seg *seg, pdshm_off_t payload) {
  if (pdshm__lock(seg, PDSHM_LOCK_HEAP)) return;
  if (pdshm__tensor_pinned(seg, payload)) pdshm__pin_orphan_locked(seg, payload);
  else pdshm__heap_release_locked(seg, payload);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
}

void pdshm__free(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t payload) {
  /* Freed already (never twice), or, read from a damaged record, no block. */
  if (!pdshm__block_live(seg, payload, PDSHM_T_ANY, 0)) return;
  pdshm_off_t off = payload - PDSHM_BLK_HDR;
  uint64_t size = pdshm__blk_size(blk_word(blk_at(seg, off)));
  if (pdshm__blk_type(blk_at(seg, off)) == PDSHM_T_TENSOR && pdshm__tensor_pinned(seg, payload)) {
    free_pinned(seg, payload);
    return;
  }
  unsigned c = size <= PDSHM_CLASS_MAX ? class_of_fast(size) : PDSHM_NCLASSES;
  if (ln && c < PDSHM_NCLASSES && pdshm__class_size(c) == size) {
    cache_push(seg, ln->rec, c, off, ln->tag);
    if (cache_within(seg, ln->rec, c)) return;
    if (pdshm__lock(seg, PDSHM_LOCK_HEAP)) return;
    cache_trim(seg, ln->rec, c, ln->tag);
    pdshm__unlock(seg, PDSHM_LOCK_HEAP);
    return;
  }
  if (pdshm__lock(seg, PDSHM_LOCK_HEAP)) return;
  heap_release(seg, off);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
}
