/* pdshm/segment.h - segments: create, attach, detach, unlink. */
#ifndef PDSHM_SEGMENT_H
#define PDSHM_SEGMENT_H

#include "pdshm/base.h" /* PDSHM_API, the C types */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Segments ----------------------------------------------------------- */
typedef struct pdshm_seg pdshm_seg; /* this process's attachment */

#define PDSHM_RDONLY       0x1u /* attach: map read-only, claim no process slot  */
#define PDSHM_SHARED_USERS 0x2u /* attach: accept a segment that another user    */
                                /* owns, or that group/others may write          */

typedef struct pdshm_options {
  size_t size;         /* create: bytes of the segment (default: see pdshm_create) */
  unsigned max_procs;  /* create: process slots (default 128)                   */
  unsigned mode;       /* create: permission bits (default 0600)                */
  unsigned flags;      /* PDSHM_RDONLY (attach), PDSHM_SHARED_USERS (attach)    */
  unsigned max_locks;  /* create: robust locks (default: 1 per 16 KiB, >= 1024) */
  size_t max_size;     /* create: the most the segment grows to while attached
                          (0: as much as /dev/shm holds, at most PDSHM_SIZE_MAX;
                          == size: a fixed size)                                */
} pdshm_options;

/*
 * A segment called NAME is the POSIX shared-memory object "/pdshm.NAME"; NAME
 * is 1 to PDSHM_SEG_NAME_MAX of [A-Za-z0-9._-], and neither "." nor "..".
 * options may be NULL, and a zero field takes its default.
 *
 * pdshm_create: makes the segment and attaches it.  EEXIST if it exists;
 *   EINVAL for a bad name, size, max_procs, max_locks, mode or flag;
 *   ENAMETOOLONG; ENOSPC when /dev/shm cannot hold it (nothing is left behind;
 *   pdshm_last_error() says how big /dev/shm is, what is free, and that a
 *   container raises it with --shm-size); EACCES.  Without a size, the segment
 *   starts at what its slots and locks take and a 2 MiB arena (at least
 *   PDSHM_SIZE_DEFAULT).  Either way it grows, while attached, up to
 *   max_size: an allocation that finds no room extends it (a full /dev/shm
 *   is then that allocation's ENOSPC, never a SIGBUS; max_size reached, its
 *   ENOMEM), and every attached process sees the new bytes at once.  EINVAL
 *   for a max_size below the size or above PDSHM_SIZE_MAX.
 *   pdshm_inspect_seg tells the size, max_size and the growths made.
 * pdshm_attach: attaches an existing segment.  ENOENT; EBADSEG when the file is
 *   not a complete segment of this layout (bad magic, fingerprint, or sizes
 *   that disagree with the file: its current size past the file or past its
 *   max_size, a file longer than max_size); EACCES when another user owns it, or group or
 *   others may write it, unless PDSHM_SHARED_USERS; EUSERS when every slot is
 *   held by a live process.  Attaching reaps the slots of dead processes, as
 *   pdshm_reap does: a dead slot whose reap a stopped group member holds up
 *   costs it at most about 200 ms, and is left to a later reap.
 * pdshm_detach: releases every reference this attachment holds (scope
 *   handles, variable locks, pins: their private handles are freed too), its
 *   slot and its mapping, so views of its pins must be gone first; the handle
 *   is freed even when an error is returned.  On a handle inherited across
 *   fork() it only unmaps the inherited range and frees the handle, and
 *   answers EFORKED.  EINVAL for a NULL seg (nothing done); otherwise the
 *   first error met while letting go (EBADSEG on damaged bytes,
 *   ENOTRECOVERABLE when a lock's repair fails).  When a group's rank cannot
 *   be given up because the groups' lock stays held for 1 s (a process
 *   stopped in a join, a leave or an enlist), PDSHM_ETIMEDOUT: everything
 *   else is let go as usual, and the slot is left to the reaper, as a dead
 *   process's (the group's other members see a death).  Not thread-safe
 *   against other calls on the same handle: it frees the handle.
 * pdshm_unlink: removes the name; attached processes keep working.  The
 *   name's errors as for pdshm_create (EINVAL, ENAMETOOLONG); ENOENT when no
 *   segment has the name; other failures of shm_unlink as their errno.
 */
PDSHM_API int pdshm_create(const char *name, const pdshm_options *o, pdshm_seg **out);
PDSHM_API int pdshm_attach(const char *name, const pdshm_options *o, pdshm_seg **out);
PDSHM_API int pdshm_detach(pdshm_seg *seg);
PDSHM_API int pdshm_unlink(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_SEGMENT_H */
