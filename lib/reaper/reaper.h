/*
 * reaper/reaper.h - layer 7, the reaper: a dead slot settled and emptied,
 * and our own slot's holds at detach.
 */
#ifndef PDSHM_REAPER_REAPER_H
#define PDSHM_REAPER_REAPER_H

/* Layer 7 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 7
#error "reaper/reaper.h is layer 7, above the file that includes it (lib/LAYERS)"
#endif

#include "groups/groups.h"

/* Attach: claims a slot, reaping the dead ones met on the way, then reaps
 * every other dead slot (leaving those a stopped member holds up, as
 * pdshm__reap_dead does).  0, PDSHM_EUSERS, or the last slot's error when
 * none could be taken. */
int pdshm__reap_claim_own(pdshm_seg *seg);
/* Detach: releases our slot's holds, flushes its caches, gives it up. */
int pdshm__reap_release_own(pdshm_seg *seg);
/* Reaps every dead slot but ours; *reaped (may be NULL) counts them.  A slot
 * whose groups' live members still write into its buffers after a while (a
 * stopped process) is left to the next reaper, its variable locks given
 * back but not its blocks: PDSHM_ETIMEDOUT, once the other slots are
 * reaped. */
int pdshm__reap_dead(pdshm_seg *seg, unsigned *reaped);
/* Registers the heap's reclaim and the slots' reaper; once per process
 * (segment.c). */
void pdshm__reap_init_process(void);

#endif /* PDSHM_REAPER_REAPER_H */
