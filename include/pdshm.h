/*
 * pdshm.h - PaddlePaddle's Scope / Variable / Tensor model in one POSIX
 * shared-memory segment, shared by the processes of one host.
 *
 * This is the only installed header.  Every type is opaque but the options and
 * statistics structs.  Functions that can fail return 0 or a negative PDSHM_E*
 * code (-errno where one fits); unless a function says otherwise, a failure
 * changes nothing.  Lookups that can only fail by absence return a pointer or
 * NULL.  The library never prints and never exits.
 *
 * Threads: every function is safe to call from several threads at once.
 * fork(): a child does not inherit attachments.  Every call on a segment handle
 * (or anything obtained through it) made in the child fails with PDSHM_EFORKED,
 * or returns NULL, and touches nothing; the child attaches again if it needs to.
 */
#ifndef PDSHM_H
#define PDSHM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PDSHM_BUILDING) && defined(__GNUC__)
#define PDSHM_API __attribute__((visibility("default")))
#else
#define PDSHM_API
#endif

/* ---- Limits: each one is enforced with an error, never by truncation. ---- */
#define PDSHM_SEG_NAME_MAX   200          /* bytes of a segment NAME            */
#define PDSHM_NAME_MAX       255          /* bytes of a variable or scope name  */
#define PDSHM_SIZE_MIN       (1ull << 20) /* smallest segment                   */
#define PDSHM_SIZE_MAX       (1ull << 40) /* largest segment                    */
#define PDSHM_SIZE_DEFAULT   (64ull << 20)
#define PDSHM_PROCS_DEFAULT  128u
#define PDSHM_PROCS_MAX      4096u        /* process slots of one segment        */
#define PDSHM_LOCKS_MIN      64u          /* robust locks of one segment         */
#define PDSHM_LOCKS_MAX      (1u << 20)

/* ---- Errors ------------------------------------------------------------- */
/* X(name, value, message): one list makes the codes, their names and messages. */
#define PDSHM_ERRNO_MAP(X)                                                     \
  X(EPERM, -EPERM, "operation not permitted")                                  \
  X(ENOENT, -ENOENT, "no such segment, scope or variable")                     \
  X(EIO, -EIO, "input/output error on the segment file")                       \
  X(EAGAIN, -EAGAIN, "resource temporarily unavailable, try again")            \
  X(ENOMEM, -ENOMEM, "out of memory in the segment")                           \
  X(EACCES, -EACCES, "permission denied")                                      \
  X(EBUSY, -EBUSY, "resource busy")                                            \
  X(EEXIST, -EEXIST, "already exists")                                         \
  X(EINVAL, -EINVAL, "invalid argument")                                       \
  X(EMFILE, -EMFILE, "too many open files")                                    \
  X(EFBIG, -EFBIG, "too large")                                                \
  X(ENOSPC, -ENOSPC, "no space left on the shared-memory file system")         \
  X(EROFS, -EROFS, "segment is attached read-only")                            \
  X(ERANGE, -ERANGE, "result out of range")                                    \
  X(EDEADLK, -EDEADLK, "lock would deadlock (already held by this caller)")    \
  X(ENAMETOOLONG, -ENAMETOOLONG, "name too long")                              \
  X(ENOLCK, -ENOLCK, "no free lock in the segment's lock table")               \
  X(ENOSYS, -ENOSYS, "not supported on this system")                           \
  X(EOVERFLOW, -EOVERFLOW, "value too large (size overflow)")                  \
  X(EUSERS, -EUSERS, "every process slot of the segment is taken")             \
  X(ESTALE, -ESTALE, "stale reference")                                        \
  X(ENOTRECOVERABLE, -ENOTRECOVERABLE,                                         \
    "segment poisoned: a repair after a process death failed")                 \
  X(EBADSEG, -10001, "not a valid pdshm segment (bad header, layout or size)") \
  X(ETYPE, -10002, "variable holds a value of another type")                   \
  X(EFORKED, -10003, "handle inherited across fork(): attach again")

typedef enum {
#define PDSHM__ERR_ENUM(name, value, msg) PDSHM_##name = (value),
  PDSHM_ERRNO_MAP(PDSHM__ERR_ENUM)
#undef PDSHM__ERR_ENUM
  PDSHM_OK = 0
} pdshm_errno;

/* "invalid argument" for a known code, "unknown error" otherwise; never NULL. */
PDSHM_API const char *pdshm_strerror(int err);
/* "PDSHM_EINVAL" and so on, or "PDSHM_E?" for an unknown code. */
PDSHM_API const char *pdshm_err_name(int err);
/* What the last failing call of this thread said beyond its code, e.g. for
 * ENOSPC how big /dev/shm is and how much is free, or for EBADSEG which check
 * failed; "" when it said nothing.  Valid until this thread's next call. */
PDSHM_API const char *pdshm_last_error(void);

/* ---- Segments ----------------------------------------------------------- */
typedef struct pdshm_seg pdshm_seg; /* this process's attachment */

#define PDSHM_RDONLY       0x1u /* attach: map read-only, claim no process slot  */
#define PDSHM_SHARED_USERS 0x2u /* attach: accept a segment that another user    */
                                /* owns, or that group/others may write          */

typedef struct pdshm_options {
  size_t size;         /* create: bytes of the segment (default 64 MiB)         */
  unsigned max_procs;  /* create: process slots (default 128)                   */
  unsigned mode;       /* create: permission bits (default 0600)                */
  unsigned flags;      /* PDSHM_RDONLY (attach), PDSHM_SHARED_USERS (attach)    */
  unsigned max_locks;  /* create: robust locks (default: 1 per 16 KiB, >= 1024) */
} pdshm_options;

/*
 * A segment called NAME is the POSIX shared-memory object "/pdshm.NAME"; NAME
 * is 1 to PDSHM_SEG_NAME_MAX of [A-Za-z0-9._-], and neither "." nor "..".
 * options may be NULL, and a zero field takes its default.
 *
 * pdshm_create: makes the segment and attaches it.  EEXIST if it exists;
 *   EINVAL for a bad name, size, max_procs, max_locks, mode or flag;
 *   ENAMETOOLONG; ENOSPC when /dev/shm cannot hold it (nothing is left behind);
 *   EACCES.
 * pdshm_attach: attaches an existing segment.  ENOENT; EBADSEG when the file is
 *   not a complete segment of this layout (bad magic, fingerprint, or a size
 *   that disagrees with the file); EACCES when another user owns it, or group or
 *   others may write it, unless PDSHM_SHARED_USERS; EUSERS when every slot is
 *   held by a live process.  Attaching reaps the slots of dead processes.
 * pdshm_detach: releases every reference this attachment holds, its slot and
 *   its mapping; the handle is freed even when an error is returned.
 * pdshm_unlink: removes the name; attached processes keep working.
 */
PDSHM_API int pdshm_create(const char *name, const pdshm_options *o, pdshm_seg **out);
PDSHM_API int pdshm_attach(const char *name, const pdshm_options *o, pdshm_seg **out);
PDSHM_API int pdshm_detach(pdshm_seg *seg);
PDSHM_API int pdshm_unlink(const char *name);

/* ---- Statistics, reaping ---------------------------------------------- */
typedef struct pdshm_stats {
  uint64_t size, used, free;        /* bytes of the arena                     */
  uint64_t scopes, vars, tensor_bytes;
  uint32_t procs_alive, procs_dead; /* dead = not yet reaped                  */
} pdshm_stats;

/* A consistent snapshot taken under the allocator lock. */
PDSHM_API int pdshm_seg_stats(pdshm_seg *seg, pdshm_stats *st);
/* Releases what dead processes held; *reaped (may be NULL) counts the slots.
 * EROFS on a read-only attachment. */
PDSHM_API int pdshm_reap(pdshm_seg *seg, unsigned *reaped);

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_H */
