/*
 * heap_check.c - the allocator seen from outside: statistics and the check
 * of its invariants (layout.h, 2-4).  Both walk the chain (pdshm__chain_walk)
 * and check every offset they follow, so a corrupt arena gives an error or
 * a report, never a crash or a hang.  A read-only attachment walks without the lock (it cannot
 * take it): the figures are then a best effort on a live segment.
 */
#define PDSHM_LAYER 3 /* heap/ (lib/LAYERS) */
#include "config.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "heap/heap.h"

static const struct pdshm_blk *hc_blk(const pdshm_seg *seg, pdshm_off_t off) {
  return PDSHM_AT(seg->base, off, const struct pdshm_blk);
}

/* The size of the block at `at` if it is plausible there, else 0. */
static uint64_t hc_size(const pdshm_seg *seg, pdshm_off_t at) {
  uint64_t size = pdshm__blk_size(atomic_load_explicit(&hc_blk(seg, at)->word,
                                                       memory_order_acquire));
  if (size < PDSHM_BLK_MIN || size % PDSHM_ALIGN || size > pdshm__seg_end(seg) - at) return 0;
  return size;
}

/* ---- statistics ------------------------------------------------------------------ */

static void hs_count(const pdshm_seg *seg, struct pdshm_heap_stats *st, pdshm_off_t at,
                     const struct pdshm_blk *b, uint64_t w) {
  uint64_t size = pdshm__blk_size(w);
  unsigned state = pdshm__blk_state(w), c = pdshm__class_of(size);
  bool exact = c < PDSHM_NCLASSES && pdshm__class_size(c) == size;
  if (state == PDSHM_BLK_FREE) {
    st->free += size;
    st->blocks_free++;
    if (size > st->largest_free) st->largest_free = size;
    return;
  }
  if (state == PDSHM_BLK_CACHED) {
    st->cached += size;
    st->free += size;
    st->blocks_cached++;
    if (exact) st->cls[c].cached++;
    return;
  }
  st->used += size;
  st->blocks_used++;
  if (b->type < PDSHM_T_COUNT) st->by_type[b->type] += size;
  bool orphan = false;
  if (b->type == PDSHM_T_TENSOR && !b->owner)
    pdshm__tensor_pins(seg, at + PDSHM_BLK_HDR, &orphan);
  if (orphan) {
    st->orphan_bytes += size;
    st->orphan_blocks++;
  }
  if (size > PDSHM_CLASS_MAX) {
    st->large_used += size;
    st->large_blocks++;
  } else if (exact) {
    st->cls[c].used++;
  }
}

struct hs_walk {
  pdshm_seg *seg;
  struct pdshm_heap_stats *st;
  pdshm_off_t end;         /* where the last block visited ends: the arena's
                              end as this walk saw it (a growth may follow) */
};

static void hs_reset(void *arg) {
  struct hs_walk *hw = arg;
  struct pdshm_heap_stats *st = hw->st;
  hw->end = hw->seg->hdr->arena_off;
  memset(st, 0, sizeof *st);
  for (unsigned c = 0; c < PDSHM_NCLASSES; c++) st->cls[c].block_size = pdshm__class_size(c);
}

static int hs_visit(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  struct hs_walk *hw = arg;
  hs_count(hw->seg, hw->st, at, b, w);
  hw->end = at + pdshm__blk_size(w);
  return 0;
}

static int hs_walk(pdshm_seg *seg, struct pdshm_heap_stats *st) {
  const struct pdshm_hdr *h = seg->hdr;
  struct hs_walk hw = {seg, st, h->arena_off};
  int rc = pdshm__chain_walk(seg, &(struct pdshm_walker){hs_reset, hs_visit, &hw}, NULL);
  if (rc) return rc;
  st->arena = hw.end - h->arena_off;
  st->rebuilds = h->heap.rebuilds;
  st->punched = h->heap.punched;
  return 0;
}

int pdshm__heap_stats(pdshm_seg *seg, struct pdshm_heap_stats *st) {
  if (seg->flags & PDSHM_RDONLY) {
    int rc = 0;
    for (int tries = 0; tries < 8; tries++) /* a torn walk: look again */
      if (!(rc = hs_walk(seg, st))) return 0;
    return rc;
  }
  int rc = pdshm__lock(seg, PDSHM_LOCK_HEAP);
  if (rc) return rc;
  rc = hs_walk(seg, st);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  return rc;
}

/* ---- the check ----------------------------------------------------------------------- */

struct hc {
  pdshm_seg *seg;
  FILE *report;
  int problems;
  uint64_t free_blocks;
  uint64_t prev;           /* the chain walk: the previous block's size,      */
  unsigned prev_state;     /* and its state (~0u before the first)            */
};

void pdshm__check_vsay(FILE *report, const char *what, const char *fmt, va_list ap) {
  if (!report) return;
  fprintf(report, "pdshm_check: %s", what);
  vfprintf(report, fmt, ap);
  fputc('\n', report);
}

static void hc_say(struct hc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hc_say(struct hc *c, const char *fmt, ...) {
  c->problems++;
  va_list ap;
  va_start(ap, fmt);
  pdshm__check_vsay(c->report, "heap: ", fmt, ap);
  va_end(ap);
}

/* Invariants 2, 3 (adjacency) and 4 (cache owners), along the chain. */
static int hc_block(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t w) {
  struct hc *c = arg;
  const struct pdshm_hdr *h = c->seg->hdr;
  uint64_t size = pdshm__blk_size(w), prev = c->prev;
  unsigned state = pdshm__blk_state(w), prev_state = c->prev_state;
  if (b->prev16 != prev / 16)
    hc_say(c, "block at %#llx: prev16 %u, the previous block has %llu bytes",
           (unsigned long long)at, b->prev16, (unsigned long long)prev);
  if (state == PDSHM_BLK_FREE && prev_state == PDSHM_BLK_FREE && prev + size < PDSHM_BLK_MAX)
    hc_say(c, "FREE blocks adjacent at %#llx", (unsigned long long)at);
  if (state > PDSHM_BLK_CACHED) hc_say(c, "block at %#llx: state %u", (unsigned long long)at, state);
  if (state == PDSHM_BLK_CACHED && (!b->owner || b->owner > h->max_procs))
    hc_say(c, "cached block at %#llx has owner %u", (unsigned long long)at, b->owner);
  if (state == PDSHM_BLK_FREE && b->owner)
    hc_say(c, "free block at %#llx has owner %u", (unsigned long long)at, b->owner);
  c->free_blocks += state == PDSHM_BLK_FREE;
  c->prev = size;
  c->prev_state = state;
  return 0;
}

static void hc_chain(struct hc *c) {
  c->prev = 0;
  c->prev_state = ~0u;
  if (pdshm__chain_walk(c->seg, &(struct pdshm_walker){NULL, hc_block, c}, NULL))
    hc_say(c, "%s", pdshm_last_error());
}

static bool hc_is_block(struct hc *c, pdshm_off_t off) {
  return off >= c->seg->hdr->arena_off && off < pdshm__seg_end(c->seg) && off % PDSHM_ALIGN == 0 &&
         hc_size(c->seg, off);
}

static int hc_cmp(const void *a, const void *b) {
  pdshm_off_t x = *(const pdshm_off_t *)a, y = *(const pdshm_off_t *)b;
  return x < y ? -1 : x > y;
}

/* One bin's list: well formed, each entry FREE, of this bin's sizes, linked
 * both ways; entries appended to seen (at most cap). */
static void hc_bin(struct hc *c, unsigned b, pdshm_off_t *seen, uint64_t *n, uint64_t cap) {
  const struct pdshm_heap *hp = &c->seg->hdr->heap;
  pdshm_off_t prev = 0;
  for (pdshm_off_t o = hp->bins[b]; o; prev = o,
                   o = PDSHM_AT(c->seg->base, o + PDSHM_BLK_HDR, struct pdshm_free_links)->next) {
    if (!hc_is_block(c, o) || *n >= cap) {
      hc_say(c, "bin %u: list runs off the chain or loops at %#llx", b, (unsigned long long)o);
      return;
    }
    const struct pdshm_free_links *l = PDSHM_AT(c->seg->base, o + PDSHM_BLK_HDR,
                                                struct pdshm_free_links);
    uint64_t w = atomic_load(&hc_blk(c->seg, o)->word);
    if (pdshm__blk_state(w) != PDSHM_BLK_FREE || l->prev != prev ||
        pdshm__bin_of(pdshm__blk_size(w)) != b)
      hc_say(c, "bin %u: entry %#llx is not FREE, not of this bin, or badly linked", b,
             (unsigned long long)o);
    seen[(*n)++] = o;
  }
}

/* Invariant 3 (bins): the bitmap says which lists are non-empty; every FREE
 * block is on exactly one list. */
static void hc_bins(struct hc *c) {
  const struct pdshm_heap *hp = &c->seg->hdr->heap;
  uint64_t cap = c->free_blocks + 1, n = 0;
  pdshm_off_t *seen = pdshm__zalloc(cap * sizeof *seen);
  if (!seen) {
    hc_say(c, "out of private memory for the bin check");
    return;
  }
  for (unsigned b = 0; b < PDSHM_NBINS; b++) {
    bool bit = hp->nonempty[b / 64] >> (b % 64) & 1;
    if (bit != (hp->bins[b] != 0)) hc_say(c, "bin %u: bitmap says %d", b, bit);
    hc_bin(c, b, seen, &n, cap);
  }
  qsort(seen, n, sizeof *seen, hc_cmp);
  for (uint64_t i = 1; i < n; i++)
    if (seen[i] == seen[i - 1]) hc_say(c, "block %#llx is on a bin list twice", (unsigned long long)seen[i]);
  if (n != c->free_blocks)
    hc_say(c, "%llu FREE blocks in the chain, %llu on bin lists",
           (unsigned long long)c->free_blocks, (unsigned long long)n);
  pdshm__xfree(seen);
}

int pdshm__heap_check_locked(pdshm_seg *seg, FILE *report) {
  PDSHM_ASSERT((seg->flags & PDSHM_RDONLY) || pdshm__lock_mine(seg, PDSHM_LOCK_HEAP));
  struct hc c = {.seg = seg, .report = report};
  hc_chain(&c);
  if (!c.problems) hc_bins(&c);
  return c.problems;
}

int pdshm__heap_check(pdshm_seg *seg, FILE *report) {
  if (seg->flags & PDSHM_RDONLY) return pdshm__heap_check_locked(seg, report);
  int rc = pdshm__lock(seg, PDSHM_LOCK_HEAP);
  if (rc) return rc;
  rc = pdshm__heap_check_locked(seg, report);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  return rc;
}
