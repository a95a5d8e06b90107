/* pdshm/stats.h - statistics, reaping dead processes, checking the whole segment. */
#ifndef PDSHM_STATS_H
#define PDSHM_STATS_H

#include "pdshm/base.h"    /* PDSHM_API, the C types */
#include "pdshm/segment.h" /* pdshm_seg */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Statistics, reaping ---------------------------------------------- */
typedef struct pdshm_stats {
  uint64_t size, used, free;        /* bytes of the arena                     */
  uint64_t scopes, vars, tensor_bytes;
  uint32_t procs_alive, procs_dead; /* dead = not yet reaped                  */
} pdshm_stats;

/* size (the arena's current size: it grows with the segment), used and free
 * come from one walk of the arena under the heap lock
 * (on a read-only attachment, which cannot lock: a walk repeated until it
 * is not torn), the model's counts from a second walk, the processes from
 * the slot table: each group is of some instant during the call.  EINVAL
 * for a NULL st; EBADSEG when the block chain is damaged or the segment's
 * size lies past its file; ENOTRECOVERABLE
 * when the heap lock's repair fails.  Works on a read-only attachment. */
PDSHM_API int pdshm_seg_stats(pdshm_seg *seg, pdshm_stats *st);
/* Releases what dead processes held; *reaped (may be NULL) counts the slots
 * reaped.  A dead member's buffers stay pinned while live members of its
 * groups may still write into them: they stop within a chunk of the death,
 * but one stopped inside a collective (SIGSTOP, a debugger, a frozen cgroup:
 * slow is not dead) does not.  A slot still written into after 200 ms has
 * its variable locks given back, but keeps its memory (its scope handles
 * too), and is left to a later reap (pdshm_reap, an attach, pdshmd), which
 * finishes it once the writer went on: PDSHM_ETIMEDOUT, after every other
 * dead slot was reaped.  So a pass never waits on a stopped process for
 * longer, nor holds what others need meanwhile.  EROFS on a read-only
 * attachment. */
PDSHM_API int pdshm_reap(pdshm_seg *seg, unsigned *reaped);

/* Walks the whole segment and verifies every invariant (the sizes against
 * the file: size at create <= current size <= file size <= max_size; block
 * chain, free lists, offsets and types, reference counts against the
 * references actually found, tables against their entries, no published
 * block unreachable);
 * writes one line per problem to report (may be NULL).  0 when everything
 * holds, EBADSEG when something does not (EAGAIN when, on a read-only
 * attachment, writers tore every walk of the chain for 5 seconds on end, as
 * for the introspection below).  Safe on a corrupt segment. */
PDSHM_API int pdshm_check(pdshm_seg *seg, FILE *report);

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_STATS_H */
