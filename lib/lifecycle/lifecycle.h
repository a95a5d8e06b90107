/*
 * lifecycle/lifecycle.h - layer 8, the lifecycle: create, attach, detach,
 * unlink (segment.c).
 */
#ifndef PDSHM_LIFECYCLE_LIFECYCLE_H
#define PDSHM_LIFECYCLE_LIFECYCLE_H

/* Layer 8 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 8
#error "lifecycle/lifecycle.h is layer 8, above the file that includes it (lib/LAYERS)"
#endif

#include "reaper/reaper.h"

/* A hash of the layout's sizes and offsets, kept in the header (attach
 * refuses a segment whose fingerprint differs). */
uint64_t pdshm__layout_fingerprint(void);

#endif /* PDSHM_LIFECYCLE_LIFECYCLE_H */
