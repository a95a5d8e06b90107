/*
 * heap.c - the in-segment allocator: blocks, size classes, lane caches, bins.
 *
 * Owns: struct pdshm_blk, struct pdshm_heap, the lanes' cache bins
 * (layout.h), and every block size.
 *
 * Invariants: layout.h's 2 (the chain; its bins, bitmap and prev16 are
 * rebuilt from it by pdshm__heap_rebuild), 3, 4 and 6 (a pinned TENSOR block
 * is orphaned, never freed, by pdshm__free or a sweep) are this file's to
 * keep; and:
 *  H1. Pages inside a HOLEY block may be missing from the file; every block
 *      carved from one is re-reserved (fallocate) before it is handed out,
 *      so first touch never raises SIGBUS on a full /dev/shm.
 *
 *  H2. The bins' links are hints read from the segment: every one is checked
 *      to be a FREE block of its bin that fits the arena before it is
 *      followed or written through (bin_link), and one that is not ends its
 *      list (damage, by another process or a bug: the blocks behind it are
 *      binned again by the next rebuild, and pdshm_check reports them).  A
 *      free merges only with neighbours that the chain confirms.
 *  H3. A lane cache's links are checked the same way before use: a CACHED
 *      block of the cache's class, owned by the lane's slot (cache_link);
 *      one that is not empties the cache (its blocks stay the slot's, and
 *      the sweep at its detach or reap frees them).
 *
 *  H4. The arena grows only here (heap_grow, heap lock held), by layout.h's
 *      invariant 2: the file is extended first (fallocate: a full /dev/shm
 *      is ENOSPC, never a SIGBUS), then the new FREE block's header is
 *      written past the old end, then arena_end is published by one release
 *      store, then the block is merged with a FREE last block and binned.
 *      Growth is geometric (the arena doubles, within max_size; when
 *      /dev/shm cannot hold a doubling, just what the allocation lacks), so
 *      N allocations cost O(log N) growths.
 *
 * Crash windows:
 *  - a growth: before the publication, the file holds bytes nobody counts
 *    (attach allows a file longer than arena_end; the next grower writes
 *    them again); after it, the chain ends with a FREE block, perhaps beside
 *    another, not yet binned: the rebuild merges and bins them;
 *  - a cache pop or push is two stores (the block's word, the lane's head):
 *    dead lanes' lists are never read again; the reaper's sweep goes by the
 *    blocks' owner field instead;
 *  - inside the heap lock: anything, repaired by the rebuild;
 *  - a trim (heap_trim: pressure on /dev/shm, or retained pages that sat
 *    unused) flags a FREE block HOLEY, then punches it: a death between
 *    leaves a HOLEY block with its pages, which H1 allows.
 */
#define PDSHM_LAYER 3 /* heap/ (lib/LAYERS) */
#include "config.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_PUNCH_HOLE
#include <linux/falloc.h>
#endif

#include "heap/heap.h"

#define SMALL_CLASSES 31u  /* 32..512 by 16                                */
#define EXACT_BINS 62u     /* bins of sizes 32..1008, one per 16 bytes     */
#define SCAN_LIMIT 16u     /* entries examined in a non-exact bin          */
#define CACHE_MAX 512u /* blocks of one class in a lane's cache          */
#define REFILL_MAX 16u /* blocks a locked allocation adds to its cache   */
#define PUNCH_MIN (PDSHM_CLASS_MAX + 1) /* frees above this give pages back */
#define RETAIN_SHARE 4u                 /* large frees kept backed: 1/4 of the arena */
#define RETAIN_MAX (1ull << 30)         /* ... and at most this                */
#define RETAIN_AGE_NS (5ull * 1000000000) /* no large free kept backed this long:
                                             the retained bytes go back at the next
                                             large free or locked allocation */

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

/* ---- block access ----------------------------------------------------------- */

static struct pdshm_blk *heap_blk(const pdshm_seg *seg, pdshm_off_t off) {
  return PDSHM_AT(seg->base, off, struct pdshm_blk);
}
static uint64_t word(const struct pdshm_blk *b) {
  return atomic_load_explicit(&b->word, memory_order_acquire);
}
static void set_word(struct pdshm_blk *b, uint64_t w) {
  atomic_store_explicit(&b->word, w, memory_order_release);
}
static struct pdshm_free_links *links(const pdshm_seg *seg, pdshm_off_t off) {
  return PDSHM_AT(seg->base, off + PDSHM_BLK_HDR, struct pdshm_free_links);
}
static struct pdshm_heap *heap(const pdshm_seg *seg) { return &seg->hdr->heap; }

/* Sets the hint of the block after off to off's size, or, when off is the
 * last block, the heap's tail hint to off: every block size the heap
 * changes ends here, so the hints follow the chain. */
static void fix_next_prev(pdshm_seg *seg, pdshm_off_t off, uint64_t size) {
  if (off + size < pdshm__seg_known(seg) || off + size < pdshm__seg_end(seg))
    heap_blk(seg, off + size)->prev16 = (uint32_t)(size / 16);
  else
    heap(seg)->tail = off;
}

/* ---- bins (heap lock) ---------------------------------------------------------- */

/* The size of the FREE block at off when it lies inside the arena, else 0. */
static uint64_t free_block_size(const pdshm_seg *seg, pdshm_off_t off) {
  if (off % PDSHM_ALIGN || off < seg->hdr->arena_off || !pdshm__seg_holds(seg, off, PDSHM_BLK_MIN))
    return 0;
  uint64_t w = word(heap_blk(seg, off)), size = pdshm__blk_size(w);
  if (pdshm__blk_state(w) != PDSHM_BLK_FREE || size < PDSHM_BLK_MIN || !pdshm__seg_holds(seg, off, size))
    return 0;
  return size;
}

/* Invariant H2: link o of bin b, or 0 when it names no FREE block of b. */
static pdshm_off_t bin_link(const pdshm_seg *seg, pdshm_off_t o, unsigned b) {
  uint64_t size = o ? free_block_size(seg, o) : 0;
  return size && pdshm__bin_of(size) == b ? o : 0;
}

static void bin_insert(pdshm_seg *seg, pdshm_off_t off, uint64_t size) {
  struct pdshm_heap *h = heap(seg);
  unsigned b = pdshm__bin_of(size);
  struct pdshm_free_links *l = links(seg, off);
  l->prev = 0;
  l->next = bin_link(seg, h->bins[b], b);
  if (l->next) links(seg, l->next)->prev = off;
  h->bins[b] = off;
  h->nonempty[b / 64] |= 1ull << (b % 64);
}

static void bin_remove(pdshm_seg *seg, pdshm_off_t off, uint64_t size) {
  struct pdshm_heap *h = heap(seg);
  unsigned b = pdshm__bin_of(size);
  struct pdshm_free_links *l = links(seg, off);
  pdshm_off_t prev = bin_link(seg, l->prev, b), next = bin_link(seg, l->next, b);
  if (prev) links(seg, prev)->next = next;
  if (h->bins[b] == off || !bin_link(seg, h->bins[b], b)) h->bins[b] = next;
  if (next) links(seg, next)->prev = prev;
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
static pdshm_off_t bin_search(pdshm_seg *seg, uint64_t n) {
  struct pdshm_heap *h = heap(seg);
  unsigned b = pdshm__bin_of(n), k = 0;
  for (pdshm_off_t o = bin_link(seg, h->bins[b], b); o && k < SCAN_LIMIT;
       o = bin_link(seg, links(seg, o)->next, b), k++)
    if (pdshm__blk_size(word(heap_blk(seg, o))) >= n) return o;
  for (unsigned nb = bin_next(h, bin_floor(b) >= n && b < EXACT_BINS ? b : b + 1);
       nb < PDSHM_NBINS; nb = bin_next(h, nb + 1)) {
    pdshm_off_t o = bin_link(seg, h->bins[nb], nb);
    if (o) return o;
    h->bins[nb] = 0; /* H2: a damaged head empties its bin */
    h->nonempty[nb / 64] &= ~(1ull << (nb % 64));
  }
  for (pdshm_off_t o = bin_link(seg, h->bins[b], b); o; /* the rest of n's bin */
       o = bin_link(seg, links(seg, o)->next, b))
    if (pdshm__blk_size(word(heap_blk(seg, o))) >= n) return o;
  return 0;
}

/* ---- giving pages back, taking them again ------------------------------------------ */

static uint64_t heap_trim(pdshm_seg *seg, uint64_t want);

/* Backs [lo, lo+len) of the file (fallocate), extending it when that lies
 * past its end.  When /dev/shm is full, the backed FREE blocks of the
 * segment give their pages back (heap_trim) and it is tried once more; then
 * ENOSPC, with the one /dev/shm message (also for EFBIG: a file larger than
 * the file system allows).  A failed fallocate leaves the file as it was. */
static int fallocate_or_trim(pdshm_seg *seg, uint64_t lo, uint64_t len) {
  if (fallocate(seg->fd, 0, (off_t)lo, (off_t)len) == 0) return 0;
  if (errno == ENOSPC && heap_trim(seg, UINT64_MAX) &&
      fallocate(seg->fd, 0, (off_t)lo, (off_t)len) == 0)
    return 0;
  if (errno == ENOSPC || errno == EFBIG) return pdshm__shmfs_full(seg->fd, len);
  return pdshm__fail(-errno, "fallocate: %s", strerror(errno));
}

/* Invariant H1: reserve the whole pages under [off, off+size) (the block
 * being carved is not FREE, so a trim spares it: its pages are the ones
 * wanted). */
static int reserve(pdshm_seg *seg, pdshm_off_t off, uint64_t size) {
  uint64_t pg = seg->hdr->page_size, lo = off / pg * pg, hi = (off + size + pg - 1) / pg * pg;
  return fallocate_or_trim(seg, lo, hi - lo);
}

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

/* Keeps a large free backed while the budget (1/RETAIN_SHARE of the arena, at
 * most RETAIN_MAX) allows: a tensor freed and allocated again each step then
 * costs neither a punch nor a re-reserve.  Carving a large block spends it;
 * pressure on /dev/shm and age give it back (heap_trim). */
static bool retain(pdshm_seg *seg, uint64_t bytes) {
  struct pdshm_heap *h = heap(seg);
  uint64_t budget = (pdshm__seg_known(seg) - seg->hdr->arena_off) / RETAIN_SHARE;
  if (budget > RETAIN_MAX) budget = RETAIN_MAX;
  if (h->retained > budget) h->retained = budget; /* a hint: clamp after a death */
  if (h->retained + bytes > budget) return false;
  h->retained += bytes;
  h->retained_ns = pdshm__now_ns(CLOCK_MONOTONIC);
  return true;
}

static void punch_extent(pdshm_seg *seg, pdshm_off_t off, pdshm_off_t at, uint64_t len);

/* Gives back the pages of backed FREE blocks above PUNCH_MIN, biggest bins
 * first, until `want` bytes are punched or none is left (heap lock held);
 * of a block bigger than what is still wanted, only its front.  Retained
 * frees merge with their FREE neighbours, so which pages were retained is
 * not known: the bytes are what counts.  Each block is flagged HOLEY before
 * its pages go, as heap_release does, and stays where it is in its bin: a
 * death between the two leaves a HOLEY block whose pages are still there,
 * which invariant H1 allows.  Returns the bytes punched. */
static uint64_t heap_trim(pdshm_seg *seg, uint64_t want) {
  struct pdshm_heap *h = heap(seg);
  uint64_t done = 0, was = h->punched;
  for (unsigned b = PDSHM_NBINS; b-- > pdshm__bin_of(PUNCH_MIN) && done < want;) {
    for (pdshm_off_t o = bin_link(seg, h->bins[b], b); o && done < want;
         o = bin_link(seg, links(seg, o)->next, b)) {
      struct pdshm_blk *blk = heap_blk(seg, o);
      uint64_t w = word(blk);
      if (w & PDSHM_BLK_HOLEY) continue;
      set_word(blk, w | PDSHM_BLK_HOLEY);
      PDSHM_CRASHPOINT("heap.trim.holey");
      uint64_t size = pdshm__blk_size(w), len = size; /* the header is spared */
      if (want - done < size - PDSHM_BLK_MIN) len = want - done + PDSHM_BLK_MIN;
      punch_extent(seg, o, o, len);
      done = h->punched - was;
    }
  }
  h->retained = done >= h->retained ? 0 : h->retained - done;
  return done;
}

/* Retained bytes that sat unused for RETAIN_AGE_NS go back (heap lock held). */
static void trim_aged(pdshm_seg *seg) {
  struct pdshm_heap *h = heap(seg);
  if (h->retained && pdshm__now_ns(CLOCK_MONOTONIC) - h->retained_ns > RETAIN_AGE_NS) heap_trim(seg, h->retained);
}

/* ---- carving and freeing (heap lock) -------------------------------------------------- */

/* Takes n bytes from the front of FREE block off, in state `state`, owned by
 * `owner`; the rest stays FREE. */
static int carve(pdshm_seg *seg, pdshm_off_t off, uint64_t n, unsigned state, uint16_t owner,
                 unsigned type) {
  struct pdshm_blk *b = heap_blk(seg, off);
  uint64_t w = word(b), size = pdshm__blk_size(w), holey = w & PDSHM_BLK_HOLEY;
  if (size - n < PDSHM_BLK_MIN) n = size;
  if (holey) { /* what we hand out, and the tail's header and links */
    int rc = reserve(seg, off, n < size ? n + PDSHM_BLK_MIN : n);
    if (rc) return rc;
    PDSHM_CRASHPOINT("heap.carve.reserved");
  }
  if (n > PDSHM_CLASS_MAX) /* a large block in use again: budget back */
    heap(seg)->retained -= heap(seg)->retained < n ? heap(seg)->retained : n;
  bin_remove(seg, off, size);
  if (n < size) { /* invariant 2: the tail's header first */
    struct pdshm_blk *t = heap_blk(seg, off + n);
    t->prev16 = (uint32_t)(n / 16);
    pdshm__blk_set_type(t, PDSHM_T_NONE);
    pdshm__blk_set_owner(t, 0);
    set_word(t, (size - n) | PDSHM_BLK_FREE | holey);
    fix_next_prev(seg, off + n, size - n);
    PDSHM_CRASHPOINT("heap.carve.tail");
  }
  zero_if_record(seg, off, n, type);
  pdshm__blk_set_type(b, (uint16_t)type);
  pdshm__blk_set_owner(b, owner);
  set_word(b, n | state);
  PDSHM_CRASHPOINT("heap.carve.head");
  if (n < size) bin_insert(seg, off + n, size - n);
  return 0;
}

/* Punches the pages of a freed extent [at, at+len) that lie inside the FREE
 * block at off, sparing its header and bin links (off .. off+BLK_MIN). */
static void punch_extent(pdshm_seg *seg, pdshm_off_t off, pdshm_off_t at, uint64_t len) {
#ifdef HAVE_PUNCH_HOLE
  uint64_t pg = seg->hdr->page_size, keep = off + PDSHM_BLK_MIN;
  uint64_t lo = ((at > keep ? at : keep) + pg - 1) / pg * pg, hi = (at + len) / pg * pg;
  if (hi > lo && fallocate(seg->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
                           (off_t)(hi - lo)) == 0)
    heap(seg)->punched += hi - lo;
#else
  (void)seg, (void)off, (void)at, (void)len;
#endif
}

/* Returns a USED or CACHED block to the bins, merging with FREE neighbours
 * (up to the largest block size).  The block turns FREE first, so that a
 * death at any later store leaves FREE blocks (merged and binned again by the
 * rebuild) that still carry their HOLEY flags; a block is flagged HOLEY before
 * its pages are punched, never after. */
static void heap_release(pdshm_seg *seg, pdshm_off_t off) {
  struct pdshm_blk *b = heap_blk(seg, off);
  const pdshm_off_t freed_at = off;
  const uint64_t freed = pdshm__blk_size(word(b));
  uint64_t size = freed, holey = 0, end = pdshm__seg_end(seg);
  if (freed < PDSHM_BLK_MIN || freed > end - off)
    return; /* a size that is not the chain's: left for pdshm_check to report */
  set_word(b, size | PDSHM_BLK_FREE);
  pdshm__blk_set_type(b, PDSHM_T_NONE);
  pdshm__blk_set_owner(b, 0);
  PDSHM_CRASHPOINT("heap.release.free");
  pdshm_off_t next = off + size;
  uint64_t nsize = next < end ? free_block_size(seg, next) : 0;
  if (nsize && size + nsize < PDSHM_BLK_MAX) {
    uint64_t nw = word(heap_blk(seg, next));
    bin_remove(seg, next, nsize);
    holey |= nw & PDSHM_BLK_HOLEY;
    size += nsize;
    set_word(b, size | PDSHM_BLK_FREE | holey);
    PDSHM_CRASHPOINT("heap.release.merge_next");
  }
  if (off - seg->hdr->arena_off >= (uint64_t)b->prev16 * 16 && b->prev16) {
    pdshm_off_t prev = off - (uint64_t)b->prev16 * 16; /* a hint: H2 */
    uint64_t pw = word(heap_blk(seg, prev));
    if (free_block_size(seg, prev) == off - prev && size + pdshm__blk_size(pw) < PDSHM_BLK_MAX) {
      bin_remove(seg, prev, pdshm__blk_size(pw));
      holey |= pw & PDSHM_BLK_HOLEY;
      size += pdshm__blk_size(pw);
      off = prev;
      b = heap_blk(seg, prev);
      set_word(b, size | PDSHM_BLK_FREE | holey);
      PDSHM_CRASHPOINT("heap.release.merge_prev");
    }
  }
  if (freed >= PUNCH_MIN) trim_aged(seg);
  bool give_back = freed >= PUNCH_MIN && !retain(seg, freed);
  if (give_back) set_word(b, size | PDSHM_BLK_FREE | PDSHM_BLK_HOLEY);
  fix_next_prev(seg, off, size);
  bin_insert(seg, off, size);
  if (give_back) {
    PDSHM_CRASHPOINT("heap.release.punch");
    punch_extent(seg, off, freed_at, freed);
  }
}

/* ---- the lane caches ---------------------------------------------------------------- */

static pdshm_off_t *next_of(const pdshm_seg *seg, pdshm_off_t off) {
  return &links(seg, off)->next;
}

static void cache_push(pdshm_seg *seg, struct pdshm_lane *l, unsigned c, pdshm_off_t off,
                       uint16_t tag) {
  struct pdshm_cache_bin *cb = &l->cache[c];
  struct pdshm_blk *b = heap_blk(seg, off);
  pdshm__blk_set_owner(b, tag);
  pdshm__blk_set_type(b, PDSHM_T_NONE);
  /* CACHED before the link, which overwrites the payload's first word: a
   * recount that reads the link then sees the block cached (heap_pins.c). */
  set_word(b, pdshm__blk_size(word(b)) | PDSHM_BLK_CACHED);
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
    const struct pdshm_blk *b = heap_blk(seg, off);
    uint64_t w = word(b);
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
  pdshm__blk_set_type(heap_blk(seg, off), (uint16_t)type);
  set_word(heap_blk(seg, off), size | PDSHM_BLK_USED);
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
    pdshm_off_t off = bin_search(seg, size);
    if (!off || carve(seg, off, size, PDSHM_BLK_CACHED, tag, PDSHM_T_NONE)) return;
    if (pdshm__blk_size(word(heap_blk(seg, off))) != size) { /* too small a remainder */
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
static void cache_forget(struct pdshm_slot *s) {
  for (unsigned k = 0; k < PDSHM_LANES; k++) {
    memset(s->lane[k].cache, 0, sizeof s->lane[k].cache);
    s->lane[k].cached = 0;
  }
}

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
  pdshm_off_t t = heap(seg)->tail;
  if (t % PDSHM_ALIGN == 0 && t >= hd->arena_off && t < end &&
      pdshm__blk_size(word(heap_blk(seg, t))) == end - t) {
    uint64_t p = (uint64_t)heap_blk(seg, t)->prev16 * 16;
    if (p ? p <= t - hd->arena_off && pdshm__blk_size(word(heap_blk(seg, t - p))) == p
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
static int heap_grow(pdshm_seg *seg, uint64_t n) {
  struct pdshm_hdr *hd = seg->hdr;
  uint64_t end = pdshm__seg_end(seg), max = hd->max_size < seg->size ? hd->max_size : seg->size;
  if (end != hd->arena_end || end > max)
    return pdshm__fail(PDSHM_EBADSEG, "the segment's size %llu lies past its file or max_size",
                       (unsigned long long)hd->arena_end);
  pdshm_off_t t = tail_block(seg, end);
  if (!t) return PDSHM_EBADSEG;
  uint64_t tw = word(heap_blk(seg, t)), have = 0;
  if (pdshm__blk_state(tw) == PDSHM_BLK_FREE) have = pdshm__blk_size(tw);
  uint64_t step = grow_step(end - hd->arena_off, max - end, n, have);
  if (have && have + step >= PDSHM_BLK_MAX) { /* too big to merge: n in the new block alone */
    have = 0;
    step = grow_step(end - hd->arena_off, max - end, n, 0);
  }
  if (!step) return PDSHM_ENOMEM;
  int rc = fallocate_or_trim(seg, end, step);
  uint64_t least = grow_step(0, max - end, n, have);
  if (rc == PDSHM_ENOSPC && least < step) { /* what /dev/shm still holds may do */
    step = least;
    pdshm__fail_clear();
    rc = fallocate_or_trim(seg, end, step);
  }
  if (rc) return rc;
  /* a full /dev/shm made fallocate_or_trim trim the FREE blocks, the last one
   * too: its HOLEY flag is the one to merge with, not the one read above */
  tw = word(heap_blk(seg, t));
  PDSHM_CRASHPOINT("heap.grow.reserved");
  struct pdshm_blk *b = heap_blk(seg, end);
  b->prev16 = (uint32_t)(pdshm__blk_size(tw) / 16);
  pdshm__blk_set_type(b, PDSHM_T_NONE);
  pdshm__blk_set_owner(b, 0);
  set_word(b, step | PDSHM_BLK_FREE);
  PDSHM_CRASHPOINT("heap.grow.block");
  __atomic_store_n(&hd->arena_end, end + step, __ATOMIC_RELEASE);
  __atomic_store_n(&heap(seg)->growths, heap(seg)->growths + 1, __ATOMIC_RELAXED); /* read unlocked */
  PDSHM_CRASHPOINT("heap.grow.published");
  if (have) { /* invariant 3: one FREE block at the end */
    bin_remove(seg, t, have);
    set_word(heap_blk(seg, t), (have + step) | PDSHM_BLK_FREE | (tw & PDSHM_BLK_HOLEY));
    PDSHM_CRASHPOINT("heap.grow.merged");
    fix_next_prev(seg, t, have + step);
    bin_insert(seg, t, have + step);
  } else {
    fix_next_prev(seg, end, step);
    bin_insert(seg, end, step);
  }
  return 0;
}

/* ---- the API ---------------------------------------------------------------------- */

void pdshm__heap_init(pdshm_seg *seg) {
  const struct pdshm_hdr *hd = seg->hdr;
  memset(heap(seg), 0, sizeof *heap(seg));
  uint64_t prev = 0;
  for (pdshm_off_t at = hd->arena_off; at < hd->arena_end;) {
    uint64_t size = hd->arena_end - at, max = PDSHM_BLK_MAX - PDSHM_ALIGN;
    heap(seg)->tail = at;
    if (size > max) size = size - max < PDSHM_BLK_MIN ? max - PDSHM_BLK_MIN : max;
    struct pdshm_blk *b = heap_blk(seg, at);
    b->prev16 = (uint32_t)(prev / 16);
    pdshm__blk_set_type(b, PDSHM_T_NONE);
    pdshm__blk_set_owner(b, 0);
    set_word(b, size | PDSHM_BLK_FREE);
    bin_insert(seg, at, size);
    prev = size;
    at += size;
  }
}

size_t pdshm__alloc_usable(const pdshm_seg *seg, pdshm_off_t payload) {
  return pdshm__blk_size(word(heap_blk(seg, payload - PDSHM_BLK_HDR))) - PDSHM_BLK_HDR;
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
  trim_aged(seg);
  if (c < PDSHM_NCLASSES) n = pdshm__class_size(c);
  pdshm_off_t off = bin_search(seg, n);
  rc = off ? 0 : grow ? heap_grow(seg, n) : PDSHM_ENOMEM;
  if (!rc && !off) off = bin_search(seg, n);
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
  uint64_t size = pdshm__blk_size(word(heap_blk(seg, off)));
  if (pdshm__blk_type(heap_blk(seg, off)) == PDSHM_T_TENSOR && pdshm__tensor_pinned(seg, payload)) {
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

/* ---- rebuilding and sweeping (heap lock held) ------------------------------------------ */

struct relink {
  pdshm_seg *seg;
  pdshm_off_t last;        /* the last block that stays: the tail hint       */
  pdshm_off_t run;         /* the FREE block the FREE blocks after it merge
                              into, 0 when the last block was not FREE      */
  uint64_t run_word;       /* its header word, as we last stored it          */
  uint64_t prev;           /* the size of the last block that stays          */
};

/* The run is complete: onto its bin. */
static void relink_close(struct relink *rl) {
  if (rl->run) bin_insert(rl->seg, rl->run, pdshm__blk_size(rl->run_word));
  rl->run = 0;
}

/* A FREE block after a FREE run becomes the run's tail: the run grows over
 * its header with one store (layout.h, invariant 2), and the walk steps
 * over it by the size it read first. */
static int relink_block(void *arg, pdshm_off_t at, const struct pdshm_blk *cb, uint64_t w) {
  struct relink *rl = arg;
  uint64_t size = pdshm__blk_size(w), run_size = pdshm__blk_size(rl->run_word);
  bool free = pdshm__blk_state(w) == PDSHM_BLK_FREE;
  (void)cb;
  if (free && rl->run && run_size + size < PDSHM_BLK_MAX) {
    rl->run_word = (run_size + size) | PDSHM_BLK_FREE | ((rl->run_word | w) & PDSHM_BLK_HOLEY);
    set_word(heap_blk(rl->seg, rl->run), rl->run_word);
    rl->prev = run_size + size;
    return 0;
  }
  rl->last = at;
  relink_close(rl);
  struct pdshm_blk *b = heap_blk(rl->seg, at);
  b->prev16 = (uint32_t)(rl->prev / 16);
  if (free) { /* a death may leave these set */
    pdshm__blk_set_owner(b, 0);
    pdshm__blk_set_type(b, PDSHM_T_NONE);
    rl->run = at;
    rl->run_word = w;
  }
  rl->prev = size;
  return 0;
}

/* Walks the chain, merging adjacent FREE blocks, fixing prev16, re-binning.
 * EBADSEG when the chain itself is broken. */
static int heap_relink(pdshm_seg *seg) {
  struct pdshm_heap *h = heap(seg);
  memset(h->nonempty, 0, sizeof h->nonempty);
  memset(h->bins, 0, sizeof h->bins);
  PDSHM_CRASHPOINT("heap.relink.emptied");
  struct relink rl = {.seg = seg};
  int rc = pdshm__chain_walk(seg, &(struct pdshm_walker){NULL, relink_block, &rl}, NULL);
  if (!rc) relink_close(&rl);
  if (!rc) h->tail = rl.last;
  return rc;
}

/* The pin counts are derived from the PIN records first (heap_pins.c): the
 * dead holder may have been half way through a pin, an unpin or a sweep. */
int pdshm__heap_rebuild(pdshm_seg *seg) {
  heap(seg)->rebuilds++;
  int rc = pdshm__pin_recount_locked(seg);
  return rc ? rc : heap_relink(seg);
}

static int heap_repair(pdshm_seg *seg, uint32_t lock) {
  (void)lock; /* PDSHM_LOCK_HEAP: the one lock of its kind */
  return pdshm__heap_rebuild(seg);
}

void pdshm__heap_init_process(void) {
  pdshm__lock_on_repair(PDSHM_LK_HEAP, PDSHM_REPAIR_STATE, heap_repair);
}

struct sweep {
  pdshm_seg *seg;
  uint16_t tag;            /* the slot's owner tag                            */
  bool cached_only;        /* free its CACHED blocks only                     */
  unsigned keep_mask;      /* 1 << type: USED blocks handed to the caller      */
  pdshm_off_t *kept;       /* their payloads (pdshm__zalloc'd)                */
  size_t nkept, cap;
};

static int sweep_keep(struct sweep *sw, pdshm_off_t payload) {
  if (sw->nkept == sw->cap) {
    size_t cap = sw->cap ? sw->cap * 2 : 64;
    pdshm_off_t *nk = pdshm__zalloc(cap * sizeof *nk);
    if (!nk) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
    if (sw->kept) memcpy(nk, sw->kept, sw->nkept * sizeof *nk);
    pdshm__xfree(sw->kept);
    sw->kept = nk;
    sw->cap = cap;
  }
  sw->kept[sw->nkept++] = payload;
  return 0;
}

/* One block of the slot's: kept, orphaned (retired while pinned), or marked
 * FREE, to be merged and binned by the relink that follows. */
static int sweep_block(void *arg, pdshm_off_t at, const struct pdshm_blk *cb, uint64_t w) {
  struct sweep *sw = arg;
  unsigned st = pdshm__blk_state(w);
  if (pdshm__blk_owner(cb) != sw->tag || st == PDSHM_BLK_FREE) return 0;
  if (sw->cached_only && st != PDSHM_BLK_CACHED) return 0;
  unsigned type = pdshm__blk_type(cb); /* from the segment: any number */
  if (st == PDSHM_BLK_USED && type < 32 && (sw->keep_mask >> type & 1))
    return sweep_keep(sw, at + PDSHM_BLK_HDR);
  if (st == PDSHM_BLK_USED && type == PDSHM_T_TENSOR &&
      pdshm__tensor_pinned(sw->seg, at + PDSHM_BLK_HDR)) {
    pdshm__pin_orphan_locked(sw->seg, at + PDSHM_BLK_HDR);
    return 0;
  }
  struct pdshm_blk *b = heap_blk(sw->seg, at);
  set_word(b, pdshm__blk_size(w) | PDSHM_BLK_FREE);
  pdshm__blk_set_owner(b, 0);
  pdshm__blk_set_type(b, PDSHM_T_NONE);
  PDSHM_CRASHPOINT("heap.sweep.freed");
  return 0;
}

int pdshm__heap_sweep_slot(pdshm_seg *seg, uint32_t slot, unsigned keep_mask,
                           pdshm_off_t **kept, size_t *nkept) {
  struct sweep sw = {.seg = seg, .tag = (uint16_t)(slot + 1), .keep_mask = keep_mask};
  *kept = NULL;
  *nkept = 0;
  int rc = pdshm__lock(seg, PDSHM_LOCK_HEAP);
  if (rc) return rc;
  rc = pdshm__pin_sweep_slot_locked(seg, sw.tag); /* its pins first: they may free orphans */
  PDSHM_CRASHPOINT("heap.sweep.unpinned");
  if (!rc) rc = pdshm__chain_walk(seg, &(struct pdshm_walker){NULL, sweep_block, &sw}, NULL);
  *kept = sw.kept;
  *nkept = sw.nkept;
  struct pdshm_slot *s = pdshm__slot(seg, slot);
  cache_forget(s);
  if (!rc) rc = heap_relink(seg);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  if (rc) {
    pdshm__xfree(*kept);
    *kept = NULL;
    *nkept = 0;
  }
  return rc;
}

/* Frees the CACHED blocks of slot `slot` only (lock taken here). */
int pdshm__heap_sweep_cached(pdshm_seg *seg, uint32_t slot) {
  struct sweep sw = {.seg = seg, .tag = (uint16_t)(slot + 1), .cached_only = true};
  int rc = pdshm__lock(seg, PDSHM_LOCK_HEAP);
  if (rc) return rc;
  /* A broken chain stops this walk where it stops the relink's: the
   * relink's EBADSEG reports it. */
  (void)pdshm__chain_walk(seg, &(struct pdshm_walker){NULL, sweep_block, &sw}, NULL);
  struct pdshm_slot *s = pdshm__slot(seg, slot);
  cache_forget(s);
  rc = heap_relink(seg);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  return rc;
}
