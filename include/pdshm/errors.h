/* pdshm/errors.h - the PDSHM_E* codes, their names and messages, a call's last error. */
#ifndef PDSHM_ERRORS_H
#define PDSHM_ERRORS_H

#include "pdshm/base.h" /* PDSHM_API, the C types */

#ifdef __cplusplus
extern "C" {
#endif

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
  X(EFORKED, -10003, "handle inherited across fork(): attach again")          \
  X(ETIMEDOUT, -ETIMEDOUT, "timed out")                                        \
  X(EOWNERDEAD, -EOWNERDEAD, "a member of the group died")

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
/* A damaged segment (bytes another process, or a bug, wrote where they do
 * not belong): a call that finds an offset or an index of the segment naming
 * nothing it may name answers EBADSEG and rolls back what it began, or, when
 * a repair fails, poisons the segment (ENOTRECOVERABLE from then on).
 * pdshm_check says what is wrong. */

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_ERRORS_H */
