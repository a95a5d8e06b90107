/*
 * introspect_procs.c - pdshm_procs: the process table as a reader sees it.
 *
 * A slot's state comes from the slot and its liveness lock (proc.c): LIVE
 * with the lock held is ALIVE, REAPING with the lock held is a reaper at work,
 * and either without the lock is DEAD (a dead process, or a reaper that died
 * half way).  What a slot holds comes from one walk of the block chain: the
 * blocks whose owner is slot+1 (layout.h, invariant 4), and among them the
 * HANDLE records whose reference was counted (records.h) and the PIN records
 * that target a buffer (layout.h, invariant 6).
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "inspect/inspect.h"

struct procs_acc {
  uint64_t handles, bytes, pins;
};

struct procs_walk {
  struct procs_acc *acc;
  uint32_t nslots;
};

static void procs_reset(void *arg) {
  struct procs_walk *pw = arg;
  memset(pw->acc, 0, pw->nslots * sizeof *pw->acc);
}

static int procs_visit(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t word) {
  struct procs_walk *pw = arg;
  unsigned state = pdshm__blk_state(word);
  uint16_t owner = b->owner;
  if (owner == 0 || owner > pw->nslots) return 0;
  if (state != PDSHM_BLK_USED && state != PDSHM_BLK_CACHED) return 0;
  struct procs_acc *a = &pw->acc[owner - 1];
  uint64_t size = pdshm__blk_size(word);
  a->bytes += size;
  if (state == PDSHM_BLK_USED && b->type == PDSHM_T_HANDLE &&
      size >= PDSHM_BLK_HDR + sizeof(struct pdshm_handle_rec)) {
    const struct pdshm_handle_rec *hr = (const void *)((const uint8_t *)b + PDSHM_BLK_HDR);
    if (__atomic_load_n(&hr->scope, __ATOMIC_RELAXED)) a->handles++;
  }
  if (state == PDSHM_BLK_USED && b->type == PDSHM_T_PIN &&
      size >= PDSHM_BLK_HDR + sizeof(struct pdshm_pin_rec)) {
    const struct pdshm_pin_rec *pr = (const void *)((const uint8_t *)b + PDSHM_BLK_HDR);
    if (__atomic_load_n(&pr->target, __ATOMIC_RELAXED)) a->pins++;
  }
  (void)at;
  return 0;
}

static int procs_state(pdshm_seg *seg, uint32_t i, uint32_t slot_state) {
  int alive = pdshm__slot_alive(seg, i);
  if (alive <= 0) return PDSHM_PROC_DEAD;
  return slot_state == PDSHM_SLOT_REAPING ? PDSHM_PROC_REAPING : PDSHM_PROC_ALIVE;
}

static void procs_fill(pdshm_seg *seg, uint32_t i, uint32_t st, const struct procs_acc *a,
                       pdshm_proc_info *pi) {
  const struct pdshm_slot *s = pdshm__slot(seg, i);
  *pi = (pdshm_proc_info){.slot = i, .pid = s->pid, .state = procs_state(seg, i, st),
                          .attach_ns = s->attach_ns, .handles = a->handles,
                          .bytes_held = a->bytes, .pins = a->pins};
  if (pi->state == PDSHM_PROC_REAPING) pi->reaper_pid = s->reaper_pid;
}

PDSHM_API int pdshm_procs(pdshm_seg *seg, pdshm_proc_info *out, unsigned cap) {
  int rc = pdshm__inspect_begin(seg, out || !cap, "output with a nonzero cap", PDSHM_INSPECT_SLOTS);
  if (rc) return rc;
  struct procs_walk pw = {.nslots = seg->hdr->max_procs};
  pw.acc = pdshm__zalloc(pw.nslots * sizeof *pw.acc);
  if (!pw.acc) return pdshm__fail(PDSHM_ENOMEM, "no memory for %u slots", pw.nslots);
  rc = pdshm__walk_blocks(seg, &(struct pdshm_walker){procs_reset, procs_visit, &pw});
  unsigned n = 0;
  for (uint32_t i = 0; !rc && i < pw.nslots; i++) {
    uint32_t st = atomic_load_explicit(&pdshm__slot(seg, i)->state, memory_order_acquire);
    if (st == PDSHM_SLOT_FREE) continue;
    if (n < cap) procs_fill(seg, i, st, &pw.acc[i], &out[n]);
    n++;
  }
  pdshm__xfree(pw.acc);
  return rc ? rc : (int)n;
}
