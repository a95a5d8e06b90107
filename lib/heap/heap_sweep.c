/*
 * heap_sweep.c - the heap's rebuild and its sweeps (under the heap lock): the
 * bins, their bitmap, prev16 and the tail hint made again from the chain
 * alone, by the heap lock's repair after its holder died
 * (pdshm__heap_rebuild) and after a sweep has freed a slot's blocks (its
 * reaper's, pdshm__heap_sweep_slot; or its CACHED blocks only,
 * pdshm__heap_sweep_cached).
 *
 * Owns: the heap lock's repair (pdshm__heap_init_process) and struct
 * pdshm_heap's rebuilds (layout.h).
 *
 * Invariants: layout.h's 2 and 3 (the chain, which the bins, bitmap and
 * prev16 are rebuilt from here; a merge grows the head over the tail's
 * header), and 4 and 6 at a slot's sweep (its blocks are freed, a pinned
 * TENSOR block among them orphaned, never freed).
 *
 * Crash windows: all of this runs inside the heap lock (heap.c: anything
 * there is repaired by the rebuild, which is this file's).
 */
#define PDSHM_LAYER 3 /* heap/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "heap/heap.h"
#include "heap/heap_blocks.h"

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
  if (rl->run) pdshm__bin_insert(rl->seg, rl->run, pdshm__blk_size(rl->run_word));
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
    blk_set_word(blk_at(rl->seg, rl->run), rl->run_word);
    rl->prev = run_size + size;
    return 0;
  }
  rl->last = at;
  relink_close(rl);
  struct pdshm_blk *b = blk_at(rl->seg, at);
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
  struct pdshm_heap *h = heap_of(seg);
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
  heap_of(seg)->rebuilds++;
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
  struct pdshm_blk *b = blk_at(sw->seg, at);
  blk_set_word(b, pdshm__blk_size(w) | PDSHM_BLK_FREE);
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
  pdshm__cache_forget(s);
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
  pdshm__cache_forget(s);
  rc = heap_relink(seg);
  pdshm__unlock(seg, PDSHM_LOCK_HEAP);
  return rc;
}
