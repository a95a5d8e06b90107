/*
 * locks/locks.h - layer 2, the locks: robust locks, the lock table's entries
 * lent to objects, the lock order (debug builds).  A dead holder's lock is
 * repaired by what the layer owning its kind registered
 * (pdshm__lock_on_repair).
 */
#ifndef PDSHM_LOCKS_LOCKS_H
#define PDSHM_LOCKS_LOCKS_H

/* Layer 2 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 2
#error "locks/locks.h is layer 2, above the file that includes it (lib/LAYERS)"
#endif

#include "attach/attach.h"

static inline struct pdshm_lock *pdshm__lockent(const pdshm_seg *seg, uint32_t i) {
  return PDSHM_AT(seg->base, seg->hdr->locks_off, struct pdshm_lock) + i;
}

/* ---- lock.c --------------------------------------------------------------- */
void pdshm__lock_init_table(pdshm_seg *seg); /* create only */
/* Repairs what lock i guards, its holder dead and the lock now ours: 0, or a
 * negative code (the segment is then poisoned). */
typedef int (*pdshm_lock_repair_fn)(pdshm_seg *seg, uint32_t i);
/* A repair's steps, run in this order. */
enum pdshm_repair_step {
  PDSHM_REPAIR_STATE,   /* state the lock's kind derives (the heap's bins)  */
  PDSHM_REPAIR_JOURNAL, /* the journals that ran under the lock             */
  PDSHM_REPAIR_STEPS
};
/* Registers fn as step `step` of the repair of every lock of `kind` (enum
 * pdshm_lock_kind); by the layer that owns what such a lock guards, once per
 * process, before its first segment (segment.c). */
void pdshm__lock_on_repair(unsigned kind, unsigned step, pdshm_lock_repair_fn fn);
/* Takes lock i, counting contention.  When its holder died, runs the repairs
 * registered for its kind first (lock.c, invariant 2); 0 or ENOTRECOVERABLE
 * (the segment is then poisoned and the lock released). */
/* No entry of the lock table: what a damaged index becomes
 * (pdshm__scope_lock), and what pdshm__lock and pdshm__trylock answer
 * EBADSEG for, as for any index beyond the table. */
#define PDSHM_LOCK_NONE UINT32_MAX
int pdshm__lock(pdshm_seg *seg, uint32_t i);
int pdshm__trylock(pdshm_seg *seg, uint32_t i); /* 0, EBUSY, ENOTRECOVERABLE */
/* pdshm__lock that waits until a CLOCK_MONOTONIC deadline (UINT64_MAX:
 * none) at most: PDSHM_ETIMEDOUT then, for a caller that must not wait on a
 * stopped holder past its own timeout. */
int pdshm__lock_until(pdshm_seg *seg, uint32_t i, uint64_t deadline);
void pdshm__unlock(pdshm_seg *seg, uint32_t i);
/* For the inspector, without taking it: 1 when lock i is held right now, 0
 * when not, -1 when this C library does not let us tell. */
int pdshm__lock_held_hint(const pdshm_seg *seg, uint32_t i);
/* Likewise, the thread id of lock i's holder: 0 when nobody holds it or
 * its holder died (the kernel let go of the robust mutex for it), -1 when
 * this C library does not let us tell. */
int pdshm__lock_holder_hint(const pdshm_seg *seg, uint32_t i);
/* For PDSHM_ASSERT: false only when lock i is known not to be held by this
 * thread (true when this C library does not let us tell). */
bool pdshm__lock_mine(const pdshm_seg *seg, uint32_t i);
/* Claims a free lock-table entry for an object being built (alloc = slot+1),
 * ranked for its kind (a scope's builder ranks it again for its depth). */
int pdshm__lock_claim(pdshm_seg *seg, unsigned kind, pdshm_off_t guards, uint32_t *out);
/* Gives back an entry we claimed and did not publish (an abandoned build). */
void pdshm__lock_unclaim(pdshm_seg *seg, uint32_t i);
/* Gives back entry i if it is held by slot tag `tag` (slot+1): what an
 * object's death does once the journal that moved the entry to `tag` is
 * over (lock.c, invariant 4). */
void pdshm__lock_return(pdshm_seg *seg, uint32_t i, uint16_t tag);
/* Reaper: returns the entries slot `slot` claimed but never published. */
void pdshm__lock_sweep_slot(pdshm_seg *seg, uint32_t slot);
void pdshm__poison(pdshm_seg *seg, const char *why);

/* ---- lockorder.c ----------------------------------------------------------- */
/* The rank of a lock guarding an object of `kind` (a scope: at `depth`). */
uint32_t pdshm__lock_rank(unsigned kind, uint32_t depth);
/* The held entry of o, in the segment mapped at base, that taking a lock of
 * `rank` would wait under against the order (the highest such), or NULL;
 * always NULL for rank 0 (unranked). */
const struct pdshm_lockorder_ent *pdshm__lockorder_conflict(const struct pdshm_lockorder *o,
                                                            const void *base, uint64_t forkgen,
                                                            uint32_t rank);
void pdshm__lockorder_push(struct pdshm_lockorder *o, const struct pdshm_lockorder_ent *e);
void pdshm__lockorder_pop(struct pdshm_lockorder *o, const void *lock);
/* Debug builds only (lock.c makes them nothing otherwise): */
/* Before waiting for lock i: aborts the process, naming both locks, when
 * this thread holds one of a higher rank (lockorder.c, invariant 1). */
void pdshm__lockorder_check(const pdshm_seg *seg, uint32_t i);
/* Lock i is now held by this thread; it is released. */
void pdshm__lockorder_took(const pdshm_seg *seg, uint32_t i);
void pdshm__lockorder_released(const pdshm_seg *seg, uint32_t i);

#endif /* PDSHM_LOCKS_LOCKS_H */
