/* crashsnap.h - what the crash suites compare and verify after a death:
 * a canonical text of the committed model, and the "clean" checks. */
#ifndef PDSHM_TEST_CRASHSNAP_H
#define PDSHM_TEST_CRASHSNAP_H

#include "lifecycle/lifecycle.h"

/* Text of the scope tree reachable from `from` (0: the root): per scope its
 * name, flags, links and refs, then its variables sorted by name with label,
 * operator lists, lock entry, tensor shape and a checksum of the bytes; with
 * `used`, a first line with the arena's used bytes and the object counts.
 * malloc'd; the caller frees it.  Only for a quiet segment (nobody else
 * mutating it). */
char *snap_model(pdshm_seg *seg, pdshm_off_t from, bool used);

/* 0 when, after reaping: pdshm_check passes with an empty report, every
 * slot but ours is FREE, every lock of the table can be taken at once, and
 * no variable counts a shared holder.  Otherwise 1, with the reason in why. */
int snap_clean(pdshm_seg *seg, char *why, size_t cap);

/* Reaps until no dead slot is left (a dead process's OFD lock may trail its
 * exit by a moment); 0, or the last error. */
int snap_reap_all(pdshm_seg *seg);

#endif
