/*
 * journal/journal.h - layer 4, the journal: crash-atomic mutations under one
 * lock (lib/CRASH-SAFETY.md).
 */
#ifndef PDSHM_JOURNAL_JOURNAL_H
#define PDSHM_JOURNAL_JOURNAL_H

/* Layer 4 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 4
#error "journal/journal.h is layer 4, above the file that includes it (lib/LAYERS)"
#endif

#include "heap/heap.h"

/* ---- journal.c ------------------------------------------------------------ */
/* One mutation under lock `lock`, on the caller's lane (see layout.h). */
int pdshm__j_begin(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint32_t lock, uint32_t op);
/* The same, waiting for the lock until a CLOCK_MONOTONIC deadline at most
 * (pdshm__lock_until): PDSHM_ETIMEDOUT then, nothing begun. */
int pdshm__j_begin_until(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint32_t lock, uint32_t op,
                         uint64_t deadline);
/* pdshm__alloc, recorded so that a rollback frees the block. */
int pdshm__j_alloc(pdshm_seg *seg, struct pdshm_lane_ctx *ln, size_t bytes, unsigned type,
                   pdshm_off_t *payload);
/* Likewise for a block the slot keeps owning after the commit (handles). */
int pdshm__j_alloc_keep(pdshm_seg *seg, struct pdshm_lane_ctx *ln, size_t bytes, unsigned type,
                        pdshm_off_t *payload);
/* Begin when the caller already holds `lock` (hand-over-hand walks). */
void pdshm__j_begin_locked(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint32_t lock, uint32_t op);
/* A word store applied at commit (absolute value: redo is idempotent). */
void pdshm__j_set(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t at, uint64_t val);
/* A counter incremented at commit, after the stores.  Not idempotent: a
 * repair may apply it twice, so only for words whose readers look for a
 * change (versions), never for a count. */
void pdshm__j_bump(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t at);
/* A block freed at commit. */
void pdshm__j_retire(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t payload);
/* The seqlock word this op makes odd while it applies its stores. */
void pdshm__j_seq(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t seq);
void pdshm__j_commit(pdshm_seg *seg, struct pdshm_lane_ctx *ln);
void pdshm__j_abort(pdshm_seg *seg, struct pdshm_lane_ctx *ln);
/* Repairs every journal that ran under lock i (we hold i; its holder died). */
int pdshm__journal_repair_lock(pdshm_seg *seg, uint32_t i);
/* Registers that repair for locks of every kind (pdshm__lock_on_repair);
 * once per process (segment.c). */
void pdshm__journal_init_process(void);

#endif /* PDSHM_JOURNAL_JOURNAL_H */
