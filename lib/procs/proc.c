/*
 * proc.c - the process table: claiming a slot, liveness, giving it back.
 *
 * Owns: struct pdshm_slot (layout.h) and the OFD byte locks that make a slot
 * alive.  Reaping a dead slot is reap.c's, above the model; this file only
 * keeps the pointer to it (pdshm__slot_reap_dead) for the layers below the
 * reaper that find a holder dead.
 *
 * Invariants:
 *  1. Slot i is owned by whoever holds the write OFD lock on byte
 *     PDSHM_OFD_SLOT_BASE + i: its attachment, or a reaper.  The kernel drops
 *     the lock when the owner's last descriptor of that open file description
 *     closes (death included); pid reuse and pid namespaces do not matter.
 *  2. Only the slot's owner writes the slot, its lanes and blocks it owns.
 *  3. A slot whose state is not FREE and whose lock nobody holds is dead; its
 *     reaper claims the lock first, re-reads the state, and reaps it (reap.c,
 *     invariant 1).
 *  4. A stopped process still holds its lock: slow is not dead.
 *
 * State machine of a slot:
 *   FREE --attach--> LIVE --detach--> FREE
 *   LIVE --death--> (LIVE, unlocked) --reaper--> REAPING --> FREE
 *   REAPING --reaper's death--> (REAPING, unlocked) --next reaper--> ...
 */
#define PDSHM_LAYER 5 /* procs/ (lib/LAYERS) */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "procs/procs.h"

static off_t proc_byte(uint32_t i) { return (off_t)(PDSHM_OFD_SLOT_BASE + i); }

int pdshm__slot_try_claim(pdshm_seg *seg, uint32_t i) {
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = proc_byte(i), .l_len = 1};
  if (fcntl(seg->fd, F_OFD_SETLK, &fl) == 0) return 1;
  if (errno == EAGAIN || errno == EACCES) return 0;
  return pdshm__fail(-errno, "F_OFD_SETLK on slot %u: %s", i, strerror(errno));
}

void pdshm__slot_unclaim(pdshm_seg *seg, uint32_t i) {
  struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = proc_byte(i), .l_len = 1};
  fcntl(seg->fd, F_OFD_SETLK, &fl);
}

int pdshm__slot_alive(const pdshm_seg *seg, uint32_t i) {
  if (i == seg->slot) return 1;
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = proc_byte(i), .l_len = 1};
  if (fcntl(seg->fd, F_OFD_GETLK, &fl) < 0) return -1;
  return fl.l_type != F_UNLCK;
}

/* ---- the reaper, as the layers below it know it ---------------------------------- */

/* Written once per process, before its first segment (segment.c, under
 * pthread_once), and only read after. */
static pdshm_slot_reaper_fn proc_reaper;

void pdshm__slot_set_reaper(pdshm_slot_reaper_fn fn) { proc_reaper = fn; }

int pdshm__slot_reap_dead(pdshm_seg *seg) { return proc_reaper ? proc_reaper(seg, NULL) : 0; }

/* ---- our own slot -------------------------------------------------------------- */

static uint64_t proc_start_time(void) {
  /* Field 22 of /proc/self/stat, after the parenthesised command name. */
  char buf[1024];
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  unsigned long long start = 0;
  if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                         "%*d %*d %llu", &start) == 1)
    return start;
  return 0;
}

void pdshm__slot_take(pdshm_seg *seg, uint32_t i) {
  struct pdshm_slot *slot = pdshm__slot(seg, i);
  seg->slot = i;
  seg->owner_tag = (uint16_t)(i + 1);
  slot->pid = (uint32_t)getpid();
  slot->attach_ns = pdshm__now_ns(CLOCK_REALTIME);
  slot->proc_start = proc_start_time();
  PDSHM_CRASHPOINT("slot.take.filled");
  atomic_fetch_add_explicit(&slot->epoch, 1, memory_order_relaxed);
  for (unsigned k = 0; k < PDSHM_LANES; k++) {
    seg->lanes[k].rec = &slot->lane[k];
    seg->lanes[k].tag = seg->owner_tag;
  }
  atomic_store_explicit(&slot->state, PDSHM_SLOT_LIVE, memory_order_release);
}

void pdshm__slot_give_up(pdshm_seg *seg) {
  struct pdshm_slot *slot = pdshm__slot(seg, seg->slot);
  slot->pid = 0;
  atomic_store_explicit(&slot->state, PDSHM_SLOT_FREE, memory_order_release);
  seg->slot = PDSHM_NOSLOT;
}
