/*
 * procs/procs.h - layer 5, the processes: slots (claim, liveness, take, give
 * up; proc.c) and the daemon's claim (daemon.c).  A lower layer that finds
 * a holder dead reaps through the reaper the reaper layer registered
 * (pdshm__slot_set_reaper).
 */
#ifndef PDSHM_PROCS_PROCS_H
#define PDSHM_PROCS_PROCS_H

/* Layer 5 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 5
#error "procs/procs.h is layer 5, above the file that includes it (lib/LAYERS)"
#endif

#include "journal/journal.h"

/* ---- proc.c ---------------------------------------------------------------- */
/* Slot i's OFD lock: 1 when we now hold it, 0 when somebody else does,
 * negative on error. */
int pdshm__slot_try_claim(pdshm_seg *seg, uint32_t i);
void pdshm__slot_unclaim(pdshm_seg *seg, uint32_t i);
/* Is slot i held by a live attachment?  Never true for our own slot's index
 * unless it is ours.  -1 when it cannot tell (I/O error). */
int pdshm__slot_alive(const pdshm_seg *seg, uint32_t i);
/* Slot i, whose OFD lock we hold and which is FREE, becomes our LIVE slot. */
void pdshm__slot_take(pdshm_seg *seg, uint32_t i);
/* Our slot, its holds released, becomes FREE (detach). */
void pdshm__slot_give_up(pdshm_seg *seg);
/* What reaps the dead slots (reap.c registers its reaper, once per process:
 * segment.c). */
typedef int (*pdshm_slot_reaper_fn)(pdshm_seg *seg, unsigned *reaped);
void pdshm__slot_set_reaper(pdshm_slot_reaper_fn fn);
/* For a layer below the reaper that finds a holder dead: reaps every dead
 * slot through the registered reaper, which gives back each one's holds even
 * when it must leave the slot itself to a later reaper (reap.c, invariant
 * 1).  0, or what the reaper returned. */
int pdshm__slot_reap_dead(pdshm_seg *seg);

/* ---- daemon.c ------------------------------------------------------------- */
/* Gives up the daemon claim if this attachment holds it (detach). */
void pdshm__daemon_drop(pdshm_seg *seg);

#endif /* PDSHM_PROCS_PROCS_H */
