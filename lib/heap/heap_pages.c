/*
 * heap_pages.c - the heap's pages given back to /dev/shm and taken again:
 * the file backed (fallocate) before a growth or a carve from a HOLEY block
 * uses it, the pages of large frees punched out, a budget of large frees
 * kept backed, and the trim that gives pages back under pressure or age
 * (heap lock held).
 *
 * Owns: struct pdshm_heap's punched, retained and retained_ns (layout.h;
 * heap.c's carve spends the budget of retained bytes).
 *
 * Invariants:
 *  H1. Pages inside a HOLEY block may be missing from the file; every block
 *      carved from one is re-reserved (fallocate) before it is handed out,
 *      so first touch never raises SIGBUS on a full /dev/shm.
 *
 * Crash windows:
 *  - a trim (heap_trim: pressure on /dev/shm, or retained pages that sat
 *    unused) flags a FREE block HOLEY, then punches it: a death between
 *    leaves a HOLEY block with its pages, which H1 allows.
 */
#define PDSHM_LAYER 3 /* heap/ (lib/LAYERS) */
#include "config.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>
#ifdef HAVE_PUNCH_HOLE
#include <linux/falloc.h>
#endif

#include "heap/heap.h"
#include "heap/heap_blocks.h"

#define RETAIN_SHARE 4u                 /* large frees kept backed: 1/4 of the arena */
#define RETAIN_MAX (1ull << 30)         /* ... and at most this                */
#define RETAIN_AGE_NS (5ull * 1000000000) /* no large free kept backed this long:
                                             the retained bytes go back at the next
                                             large free or locked allocation */

/* ---- giving pages back, taking them again ------------------------------------------ */

static uint64_t heap_trim(pdshm_seg *seg, uint64_t want);

/* Backs [lo, lo+len) of the file (fallocate), extending it when that lies
 * past its end.  When /dev/shm is full, the backed FREE blocks of the
 * segment give their pages back (heap_trim) and it is tried once more; then
 * ENOSPC, with the one /dev/shm message (also for EFBIG: a file larger than
 * the file system allows).  A failed fallocate leaves the file as it was. */
int pdshm__heap_fallocate_or_trim(pdshm_seg *seg, uint64_t lo, uint64_t len) {
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
int pdshm__heap_reserve(pdshm_seg *seg, pdshm_off_t off, uint64_t size) {
  uint64_t pg = seg->hdr->page_size, lo = off / pg * pg, hi = (off + size + pg - 1) / pg * pg;
  return pdshm__heap_fallocate_or_trim(seg, lo, hi - lo);
}

/* Keeps a large free backed while the budget (1/RETAIN_SHARE of the arena, at
 * most RETAIN_MAX) allows: a tensor freed and allocated again each step then
 * costs neither a punch nor a re-reserve.  Carving a large block spends it;
 * pressure on /dev/shm and age give it back (heap_trim). */
bool pdshm__heap_retain(pdshm_seg *seg, uint64_t bytes) {
  struct pdshm_heap *h = heap_of(seg);
  uint64_t budget = (pdshm__seg_known(seg) - seg->hdr->arena_off) / RETAIN_SHARE;
  if (budget > RETAIN_MAX) budget = RETAIN_MAX;
  if (h->retained > budget) h->retained = budget; /* a hint: clamp after a death */
  if (h->retained + bytes > budget) return false;
  h->retained += bytes;
  h->retained_ns = pdshm__now_ns(CLOCK_MONOTONIC);
  return true;
}

/* Punches the pages of a freed extent [at, at+len) that lie inside the FREE
 * block at off, sparing its header and bin links (off .. off+BLK_MIN). */
void pdshm__heap_punch_extent(pdshm_seg *seg, pdshm_off_t off, pdshm_off_t at,
                              uint64_t len) {
#ifdef HAVE_PUNCH_HOLE
  uint64_t pg = seg->hdr->page_size, keep = off + PDSHM_BLK_MIN;
  uint64_t lo = ((at > keep ? at : keep) + pg - 1) / pg * pg, hi = (at + len) / pg * pg;
  if (hi > lo && fallocate(seg->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
                           (off_t)(hi - lo)) == 0)
    heap_of(seg)->punched += hi - lo;
#else
  (void)seg, (void)off, (void)at, (void)len;
#endif
}

/* Gives back the pages of backed FREE blocks above PUNCH_MIN, biggest bins
 * first, until `want` bytes are punched or none is left (heap lock held);
 * of a block bigger than what is still wanted, only its front.  Retained
 * frees merge with their FREE neighbours, so which pages were retained is
 * not known: the bytes are what counts.  Each block is flagged HOLEY before
 * its pages go, as heap.c's heap_release does, and stays where it is in its
 * bin: a death between the two leaves a HOLEY block whose pages are still
 * there, which invariant H1 allows.  Returns the bytes punched. */
static uint64_t heap_trim(pdshm_seg *seg, uint64_t want) {
  struct pdshm_heap *h = heap_of(seg);
  uint64_t done = 0, was = h->punched;
  for (unsigned b = PDSHM_NBINS; b-- > pdshm__bin_of(PUNCH_MIN) && done < want;) {
    for (pdshm_off_t o = pdshm__bin_link(seg, h->bins[b], b); o && done < want;
         o = pdshm__bin_link(seg, blk_links(seg, o)->next, b)) {
      struct pdshm_blk *blk = blk_at(seg, o);
      uint64_t w = blk_word(blk);
      if (w & PDSHM_BLK_HOLEY) continue;
      blk_set_word(blk, w | PDSHM_BLK_HOLEY);
      PDSHM_CRASHPOINT("heap.trim.holey");
      uint64_t size = pdshm__blk_size(w), len = size; /* the header is spared */
      if (want - done < size - PDSHM_BLK_MIN) len = want - done + PDSHM_BLK_MIN;
      pdshm__heap_punch_extent(seg, o, o, len);
      done = h->punched - was;
    }
  }
  h->retained = done >= h->retained ? 0 : h->retained - done;
  return done;
}

/* Retained bytes that sat unused for RETAIN_AGE_NS go back (heap lock held). */
void pdshm__heap_trim_aged(pdshm_seg *seg) {
  struct pdshm_heap *h = heap_of(seg);
  if (h->retained && pdshm__now_ns(CLOCK_MONOTONIC) - h->retained_ns > RETAIN_AGE_NS) heap_trim(seg, h->retained);
}
