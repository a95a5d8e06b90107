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
 * Errors every function may return besides those it lists:
 *  - EINVAL for a NULL handle, variable or out pointer, or a variable that is
 *    in no attachment of this process;
 *  - EFORKED for a handle inherited across fork() (see below);
 *  - when it changes the segment: EROFS on a read-only attachment,
 *    ENOTRECOVERABLE once the segment is poisoned (a repair after a process
 *    death failed; it stays so until unlinked);
 *  - when it allocates in the segment: ENOMEM when nothing fits even after
 *    freeing the blocks cached by this process and by dead ones and growing
 *    the segment up to its max_size, ENOSPC when /dev/shm cannot hold the
 *    bytes a growth adds or back pages that had been given back to it,
 *    EBADSEG when a growth finds the segment's size or its block chain
 *    damaged, ENOLCK when a new scope or a variable's first lock finds no
 *    free lock-table entry.
 * pdshm_last_error() says more about each of them.
 *
 * Threads: every function is safe to call from several threads at once.
 * fork(): a child does not inherit attachments.  Every call on a segment handle
 * (or anything obtained through it: scopes, variables) made in the child fails
 * with PDSHM_EFORKED, or returns NULL / 0 / "" with pdshm_last_error() saying
 * why, and touches nothing; the child attaches again if it needs to.  The
 * child does keep the parent's address range of each attachment mapped (the
 * same file, read-write, shared, through a descriptor of its own, so that the
 * parent's death still frees the parent's slot): pointers taken before the
 * fork, such as pdshm_tensor_data's, stay valid and see every process's
 * writes.  That memory is freed by the segment's usual rules, not held for
 * the child: the child pins what it keeps using (pdshm_pin_inherit).
 *
 * Loading: libpdshm links no allocator (its private memory is the process's
 * malloc) and uses a few dozen bytes of static TLS, so it may be loaded with
 * dlopen() into any process (Python's ctypes, a plugin host).
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
#define PDSHM_SIZE_DEFAULT   (4ull << 20) /* the least a segment made without a
                                             size starts at: it grows         */
#define PDSHM_SIZE_DEFAULT_MIN (4ull << 20) /* the same                         */
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
 *   ENOTRECOVERABLE when a lock's repair fails).  Not thread-safe against
 *   other calls on the same handle: it frees the handle.
 * pdshm_unlink: removes the name; attached processes keep working.  The
 *   name's errors as for pdshm_create (EINVAL, ENAMETOOLONG); ENOENT when no
 *   segment has the name; other failures of shm_unlink as their errno.
 */
PDSHM_API int pdshm_create(const char *name, const pdshm_options *o, pdshm_seg **out);
PDSHM_API int pdshm_attach(const char *name, const pdshm_options *o, pdshm_seg **out);
PDSHM_API int pdshm_detach(pdshm_seg *seg);
PDSHM_API int pdshm_unlink(const char *name);

/* ---- Daemon ------------------------------------------------------------- */
/*
 * A segment may have one daemon (pdshmd): an attachment that claims it, reaps
 * dead processes and checks it.  The library needs none.  The claim is a lock
 * the kernel drops when its holder dies, so a daemon killed by SIGKILL never
 * blocks the next one; the header records the holder's pid and heartbeat.
 */
typedef struct pdshm_daemon_info {
  uint32_t pid;     /* the pid the header records: the holder's, or a dead  */
                    /* daemon's that never released; 0 when none            */
  int alive;        /* 1 while some attachment holds the claim              */
  uint64_t beat_ns; /* its last heartbeat, CLOCK_REALTIME ns; 0 when none   */
} pdshm_daemon_info;

/* Claims the segment for this attachment and records getpid() and a first
 * heartbeat in the header.  EBUSY when another attachment holds the claim
 * (pdshm_last_error() names its pid) or this one already does; EROFS on a
 * read-only attachment; EFORKED.  A failure changes nothing. */
PDSHM_API int pdshm_daemon_claim(pdshm_seg *seg);
/* Records a heartbeat (now).  EPERM unless this attachment holds the claim. */
PDSHM_API int pdshm_daemon_beat(pdshm_seg *seg);
/* Clears the pid and heartbeat and gives the claim up; pdshm_detach does the
 * same.  EPERM unless this attachment holds the claim. */
PDSHM_API int pdshm_daemon_release(pdshm_seg *seg);
/* Who holds the claim; works on a read-only attachment.  EINVAL, EFORKED, or
 * -errno when the kernel cannot be asked about the lock. */
PDSHM_API int pdshm_daemon_status(pdshm_seg *seg, pdshm_daemon_info *out);

/* ---- Scopes ------------------------------------------------------------- */
/*
 * A pdshm_scope * is a handle that owns one reference; release it with
 * pdshm_scope_release.  A scope lives while a handle, a child scope, or (for
 * a named scope) its link in the parent references it:
 *  - an anonymous scope (name NULL) is a process's local scope, reclaimed with
 *    its variables and buffers when its last handle is released or its holder
 *    dies;
 *  - a named scope is published: it outlives its creator until it is unlinked
 *    (pdshm_scope_unlink, or pdshm_scope_drop_kids on its parent; either
 *    unlinks the whole named subtree) and its last handle is gone.  Its parent
 *    must be the root or a linked named scope.
 * Names: 1 to PDSHM_NAME_MAX bytes, no '/' in scope names.
 */
typedef struct pdshm_scope pdshm_scope;
typedef struct pdshm_var pdshm_var; /* lives in the segment; borrowed          */
typedef struct { uint64_t off, gen; } pdshm_varref; /* weak                      */

/* A new handle on the global scope. */
PDSHM_API int pdshm_root(pdshm_seg *seg, pdshm_scope **out);
/* A child of parent.  EINVAL for an empty name or one with a '/', or a named
 * child of an anonymous parent; ENAMETOOLONG; ESTALE for a named child of an
 * unlinked parent; EEXIST for a sibling of the same name. */
PDSHM_API int pdshm_scope_new(pdshm_scope *parent, const char *name, pdshm_scope **out);
/* A new handle on the named scope at path ("params/fc") from the root; ""
 * is the root.  ENOENT, EINVAL (empty component), ENAMETOOLONG. */
PDSHM_API int pdshm_scope_open(pdshm_seg *seg, const char *path, pdshm_scope **out);
/* A second handle on the same scope. */
PDSHM_API int pdshm_scope_dup(pdshm_scope *s, pdshm_scope **out);
/* Drops the handle's reference (destroying the scope if it was the last) and
 * frees the handle, also on error.  Errors: EINVAL for NULL or a handle
 * whose record in the segment is damaged; EFORKED, which changes nothing in
 * the segment (the reference is the parent process's); ENOTRECOVERABLE or
 * EBADSEG when a lock's repair or the destruction failed: the reference, or
 * what is left of the destruction, is then released by this attachment's
 * detach or its reaper. */
PDSHM_API int pdshm_scope_release(pdshm_scope *s);
/* A new handle on the parent; ENOENT at the root. */
PDSHM_API int pdshm_scope_parent(pdshm_scope *s, pdshm_scope **out);
/* Unlinks the named child (and its named subtree, one scope at a time after
 * the child).  ENOENT when parent has no child of that name; EINVAL,
 * ENAMETOOLONG for a bad name.  A failure once the child is unlinked
 * (ENOTRECOVERABLE, EBADSEG) leaves it unlinked, and the rest of its subtree
 * is unlinked by this attachment's detach or its reaper. */
PDSHM_API int pdshm_scope_unlink(pdshm_scope *parent, const char *name);
/* Unlinks every child, one at a time: they can no longer be opened or
 * listed; handles that others hold stay usable until released.  The scope's
 * variables stay.  A failure (ENOTRECOVERABLE, EBADSEG) leaves the children
 * already unlinked so and the others linked; the named subtrees of those
 * unlinked are unlinked by this attachment's detach or its reaper. */
PDSHM_API int pdshm_scope_drop_kids(pdshm_scope *s);
/* The scope's name, "" for an anonymous one or the root. */
PDSHM_API const char *pdshm_scope_name(const pdshm_scope *s);

/* ---- Variables ---------------------------------------------------------- */
/*
 * A pdshm_var * stays valid until that variable is erased or its scope dies;
 * don't keep it.  Lookups take no lock and write nothing shared: they return
 * a variable that was, at some instant during the call, the one of that name.
 * Using a pdshm_var * that another process or thread erased meanwhile is the
 * caller's race; the edits (set_label, add_reader/writer, pdshm_tensor_resize,
 * pdshm_tensor_pin) check the record under the scope's lock and return
 * ESTALE, changing nothing, when it is no longer a variable; a record already
 * reused for a new variable is that new variable (pdshm_var_ref's generation
 * tells them apart).  The variable locks leave no race: a lock word carries
 * its variable's generation, so pdshm_var_lock and pdshm_var_unlock through a
 * variable erased before or during the call never change a variable made
 * since at the same record (see pdshm_var_lock).
 */
/* Gets the local variable of that name, or creates it (shadowing a parent's).
 * EINVAL for a NULL or empty name; ENAMETOOLONG. */
PDSHM_API int pdshm_var_get(pdshm_scope *s, const char *name, pdshm_var **out);
/* Creates it; EEXIST when the scope already has one of that name; EINVAL,
 * ENAMETOOLONG as pdshm_var_get. */
PDSHM_API int pdshm_var_create(pdshm_scope *s, const char *name, pdshm_var **out);
/* Creates one under a generated name, never reused, never colliding.  Only
 * the common errors; a failure may use up a number of the segment's name
 * counter (never handed out again), and changes nothing else. */
PDSHM_API int pdshm_var_new(pdshm_scope *s, pdshm_var **out);
/* Erases the scope's own variable (ENOENT when not local); EINVAL,
 * ENAMETOOLONG for a bad name. */
PDSHM_API int pdshm_var_erase(pdshm_scope *s, const char *name);
/* Renames the scope's own variable, keeping the object; ENOENT, EEXIST;
 * EINVAL, ENAMETOOLONG for a bad name. */
PDSHM_API int pdshm_var_rename(pdshm_scope *s, const char *from, const char *to);
/* The nearest variable of that name up the parent chain, or NULL. */
PDSHM_API pdshm_var *pdshm_find_var(pdshm_scope *s, const char *name);
/* The scope's own variable of that name, or NULL. */
PDSHM_API pdshm_var *pdshm_find_local_var(pdshm_scope *s, const char *name);
/* What a lookup's answer rests on: the tables it read and the change count
 * each stood at.  Private fields: fill it with pdshm_find_var_now, test it
 * with pdshm_find_stamp_holds. */
#define PDSHM_FIND_STAMP_TABLES 4
typedef struct pdshm_find_stamp {
  const void *count[PDSHM_FIND_STAMP_TABLES];
  uint64_t at[PDSHM_FIND_STAMP_TABLES];
  unsigned n; /* 0: a stamp that never holds */
} pdshm_find_stamp;
/* pdshm_find_var (up != 0) or pdshm_find_local_var (up == 0) that never
 * waits, for a caller that must not block (an interpreter's lock held) and
 * that keeps answers: 0 with *out the variable or NULL, and *stamp what the
 * answer rests on; PDSHM_EBUSY, *out and *stamp unset, when a table it must
 * read is in the middle of a change (call the waiting form then).  EINVAL
 * for a NULL argument, ENAMETOOLONG, and the common errors.  A lookup that
 * reads more than PDSHM_FIND_STAMP_TABLES tables gets a stamp that never
 * holds. */
PDSHM_API int pdshm_find_var_now(pdshm_scope *s, const char *name, int up, pdshm_var **out,
                                 pdshm_find_stamp *stamp);
/* True while the same lookup through the same scope would give the same
 * answer: no table the lookup read has changed since (a change to it now
 * under way counts as one).  Reads a change count per table and writes
 * nothing.  Valid only while the handle the lookup went through is held,
 * and never in a fork child for its parent's stamp (they point into that
 * attachment). */
PDSHM_API int pdshm_find_stamp_holds(const pdshm_find_stamp *stamp);
/* Calls fn for each of the scope's own variables (with that label unless
 * label is NULL) until fn returns nonzero, which is then returned.  The
 * variables are those of one instant before the first call (fn must not
 * erase one that is still to come).  EINVAL for a NULL fn; ENOMEM when no
 * private memory is left for that list. */
PDSHM_API int pdshm_scope_foreach_var(pdshm_scope *s, const char *label,
                                      int (*fn)(pdshm_var *v, void *arg), void *arg);

/* Name and label: "" for NULL and in a fork child (EFORKED). */
PDSHM_API const char *pdshm_var_name(const pdshm_var *v);
/* label NULL or "" clears it.  ENAMETOOLONG. */
PDSHM_API int pdshm_var_set_label(pdshm_var *v, const char *label);
PDSHM_API const char *pdshm_var_label(const pdshm_var *v); /* "" when none */
/* Operators reading / writing the variable (a set: adding twice is a no-op).
 * EINVAL for a NULL or empty op; ENAMETOOLONG. */
PDSHM_API int pdshm_var_add_reader(pdshm_var *v, const char *op);
PDSHM_API int pdshm_var_add_writer(pdshm_var *v, const char *op);
/* Fills ops[0..cap) and returns the count (which may exceed cap); the names
 * stay valid while the variable's list is unchanged.  EINVAL for cap < 0,
 * or a NULL ops with cap > 0.  Works on a read-only attachment. */
PDSHM_API int pdshm_var_readers(const pdshm_var *v, const char **ops, int cap);
PDSHM_API int pdshm_var_writers(const pdshm_var *v, const char **ops, int cap);
/* A robust lock, shared (exclusive == 0) or exclusive; a holder's death
 * releases it (found when a waiter sees the holder's process gone, or by any
 * reap).  EDEADLK when this thread already holds it; ENOMEM when (a thread's
 * first lock) there is no private memory for the thread's table of held
 * locks; ENOLCK when this thread holds 256 variable locks already, the
 * process 256 (all its threads together), or the variable 65535 shared
 * holders; ESTALE when v was erased, before the call or while it waited
 * (unlock then lets go of what lock took, whatever v has become, and touches
 * the word of no variable made since); EBADSEG when the lock's word names
 * holders that no process records (damaged bytes: found after a wait of
 * some milliseconds).  A failure holds nothing.  Holds are
 * per thread: a thread that exits still holding variable locks lets go of
 * them as it exits (a share it cannot give back then, its word frozen by a
 * reaper's recount, goes at the detach); a detach lets go of every hold its
 * attachment's threads had, and a later attachment inherits none. */
PDSHM_API int pdshm_var_lock(pdshm_var *v, int exclusive);
PDSHM_API int pdshm_var_unlock(pdshm_var *v); /* EPERM when not held */
/* Bumped by resize and by each unlock of an exclusive lock. */
PDSHM_API uint64_t pdshm_var_version(const pdshm_var *v);
PDSHM_API pdshm_varref pdshm_var_ref(const pdshm_var *v);
/* The variable, or NULL once it was erased or its scope died. */
PDSHM_API pdshm_var *pdshm_varref_get(pdshm_seg *seg, pdshm_varref r);

/* ---- Trainer groups: waiting, barriers, reduction ----------------------- */
/*
 * Blocks until v's version differs from `seen`; 0 (read the new version with
 * pdshm_var_version), PDSHM_ETIMEDOUT after timeout_ns (< 0: no limit).  No
 * lock, no busy spinning: a futex on the version word, woken by every bump
 * (an exclusive unlock, a resize, in any process).  A read-only attachment
 * cannot be woken and looks again every millisecond.  EINVAL for NULL or a
 * variable of no attachment of this process; EFORKED.
 */
PDSHM_API int pdshm_var_wait(const pdshm_var *v, uint64_t seen, int64_t timeout_ns);

#define PDSHM_GROUP_MAX 256u   /* members of one group                         */
#define PDSHM_GROUP_NAME_MAX PDSHM_NAME_MAX
typedef struct pdshm_group pdshm_group; /* this process's membership: private */
typedef enum { PDSHM_SUM, PDSHM_MEAN, PDSHM_MAX, PDSHM_MIN } pdshm_reduce_op;
/* A tensor's element type (below, Tensors). */
typedef enum { PDSHM_BOOL, PDSHM_U8, PDSHM_I8, PDSHM_I16, PDSHM_I32, PDSHM_I64,
               PDSHM_F16, PDSHM_BF16, PDSHM_F32, PDSHM_F64 } pdshm_dtype;

/*
 * Joins the group NAME (1 to PDSHM_GROUP_NAME_MAX bytes; created by its first
 * joiner) of `size` members (1 to PDSHM_GROUP_MAX).  rank < 0 takes the lowest
 * free rank (a rank whose holder died counts as free); a given rank held by a
 * live member is PDSHM_EBUSY, one held by a dead member is taken over (the
 * replacement; a process is dead once the kernel has closed its files, which
 * can be a few milliseconds after waitpid() reports it: a replacement started
 * at once may see EBUSY, and retries).  A takeover waits until no live member
 * writes a collective any more (they stop within a chunk of the death's
 * announcement); when one still does after 1 s (a stopped process: slow is
 * not dead), PDSHM_ETIMEDOUT, and a later join may try again; so too when
 * another process stopped in the middle of a join or a leave (any group's)
 * for that long.  While members
 * wait in a pdshm_group_regroup, PDSHM_EBUSY (join later, or enlist).  A
 * size other than the group's (it changes with each regroup that drops or
 * admits someone), or a rank >= size, is PDSHM_EINVAL; a full group
 * PDSHM_EUSERS; ENOMEM; EROFS; EFORKED.  A group's memory goes back when its
 * last member leaves (or dies and is reaped).  A failure changes nothing
 * (but a takeover's PDSHM_ETIMEDOUT announces the death to the survivors, as
 * they would find it themselves).  One thread at a time uses a pdshm_group.
 */
PDSHM_API int pdshm_group_join(pdshm_seg *seg, const char *name, unsigned size, int rank,
                               pdshm_group **out);
PDSHM_API int pdshm_group_rank(const pdshm_group *g);  /* EINVAL for NULL */
PDSHM_API int pdshm_group_size(const pdshm_group *g);  /* EINVAL for NULL */
/*
 * 0 once every rank has reached this barrier.  PDSHM_EOWNERDEAD when a member
 * died during or before this round: every survivor gets it for the same round
 * (within 100 ms of the death without pdshmd, at once with it), the round is
 * abandoned, and the next barrier waits for the dead rank to be taken over.
 * A replacement is not told of the death it replaced: its first barrier
 * joins the next round.  A rank left free by pdshm_group_leave is waited for
 * too.  PDSHM_ETIMEDOUT after timeout_ns (< 0: no limit): the caller then has
 * not passed the barrier, and its next barrier call waits for the same round
 * again.  EINVAL for NULL; EFORKED.
 */
PDSHM_API int pdshm_group_barrier(pdshm_group *g, int64_t timeout_ns);
/*
 * Every member passes its own tensor of the same dtype and element count,
 * with the same op (else PDSHM_EINVAL at every member, and no tensor
 * changed); on return each member's tensor holds the op over all members'
 * tensors.  The work is split between the members and done in place in the
 * segment.  The buffer is pinned meanwhile, and the membership keeps that
 * pin after the call, for its next collective on the same buffer (a pin
 * takes the heap's lock, which every process shares): it lets go of it at
 * its next collective on another buffer, or at pdshm_group_leave, so a
 * tensor resized or erased between collectives keeps its old buffer, an
 * orphan, until then.  F16 and BF16 are reduced in
 * f32; MEAN divides the sum once, at the end: integer MEAN truncates towards
 * zero, as C's division does.  Integer sums wrap around in the tensor's
 * dtype, under MEAN too (the wrapped sum is divided), so that an integer
 * result does not depend on the group's size.  Dtypes: F16,
 * BF16, F32, F64, I32, I64 (another dtype is EINVAL at every member, as is a
 * round where some members call pdshm_group_barrier, pdshm_group_reduce_scatter
 * or pdshm_group_allgather instead).  Errors as for
 * the barrier: after PDSHM_EOWNERDEAD or a
 * timeout while the members were writing (PDSHM_ETIMEDOUT at every member of
 * that round) the tensors' contents are unspecified; a timeout before any
 * member wrote leaves them unchanged and a later call takes part in the same
 * round.  Once the call returns, with any result, no other member writes the
 * caller's tensor.  A caller whose own arguments are wrong (v NULL, of
 * another attachment, holding no tensor: ETYPE; an unknown op: EINVAL) still
 * takes part in the round without a tensor and answers that error, the
 * others EINVAL.  EBADSEG at every member when a tensor's description lies
 * outside the arena (a damaged segment).  EINVAL for a NULL g.
 */
PDSHM_API int pdshm_group_allreduce(pdshm_group *g, pdshm_var *v, pdshm_reduce_op op,
                                    int64_t timeout_ns);
/*
 * Member k's share of count elements is [first, end) with first =
 * floor(count * k / size) and end the same for k + 1: the part of the
 * tensor that member k reduces in pdshm_group_allreduce and
 * pdshm_group_reduce_scatter and spreads in pdshm_group_allgather.  The
 * shares of ranks 0..size-1 are in order, disjoint, and cover [0, count);
 * with count < size some are empty.  Stores the caller's share; pure
 * arithmetic (no round, no access to the segment).  EINVAL for a NULL
 * argument (nothing stored).
 */
PDSHM_API int pdshm_group_share(const pdshm_group *g, uint64_t count, uint64_t *first,
                                uint64_t *end);
/*
 * The first half of an allreduce: the caller's share (pdshm_group_share) of
 * its own tensor ends up holding the op over every member's same share; the
 * rest of each member's tensor is left as it was.  Everything else as for
 * pdshm_group_allreduce: same dtypes, ops (MEAN divides once, at the end),
 * arguments and checks (a different dtype, element count or op at any
 * member, or a round where some members call pdshm_group_barrier,
 * pdshm_group_allreduce or pdshm_group_allgather instead, is PDSHM_EINVAL at
 * every member and no tensor changed), errors (after PDSHM_EOWNERDEAD or a
 * timeout while the members were working, the shares' contents are
 * unspecified and the rest of each tensor unchanged; a timeout before any
 * member wrote changes nothing and a later call takes part in the same
 * round), and once the call returns, with any result, no other member reads
 * or writes the caller's tensor.
 */
PDSHM_API int pdshm_group_reduce_scatter(pdshm_group *g, pdshm_var *v, pdshm_reduce_op op,
                                         int64_t timeout_ns);
/*
 * The second half of an allreduce: each member's share (pdshm_group_share)
 * of its own tensor is copied into the same share of every other member's
 * tensor, so that on return every tensor holds the concatenation of the
 * shares.  Any dtype (the bytes are copied).  Everything else as for
 * pdshm_group_allreduce: a different dtype or element count at any member,
 * or a round where some members call another collective or a barrier, is
 * PDSHM_EINVAL at every member and no tensor changed; after
 * PDSHM_EOWNERDEAD or a timeout while the members were copying, each
 * member's own share is unchanged and the others are unspecified; a timeout
 * before any member wrote changes nothing; once the call returns, with any
 * result, no other member reads or writes the caller's tensor.  Bad
 * arguments of the caller (v NULL, of another attachment: EINVAL; holding
 * no tensor: ETYPE) answer that error, the others EINVAL.  EINVAL for a NULL
 * g.
 */
PDSHM_API int pdshm_group_allgather(pdshm_group *g, pdshm_var *v, int64_t timeout_ns);
/*
 * An allreduce of count elements of dtype at data, in the caller's private
 * memory: on return data holds the op over every member's data.  staging is
 * a variable of the caller's, holding a tensor of at least count elements'
 * bytes (any dtype: its bytes are used), that does not overlap data; the
 * members read each other's staging tensors, so each copies into the
 * segment only the shares the others reduce and copies the others' reduced
 * shares straight from their staging into its data (per member, for S bytes
 * among n members: S - S/n copied each way, against 2S around
 * pdshm_group_allreduce of a staging tensor).  Three rounds of the group;
 * data of at most 64 KiB takes two, where the rounds cost more than the
 * bytes: each member copies all of it into its staging tensor, the staging
 * tensors are allreduced in place as pdshm_group_allreduce does, and each
 * member copies its own out (bench_allreduce: faster up to 64 KiB, slower
 * at 1 MiB).
 * Dtypes, ops, MEAN, integer wrapping, the result's bits (the same at every
 * member), the pin kept on the staging buffer and errors as for
 * pdshm_group_allreduce; members that pass
 * different dtypes, counts or ops, or call another collective or a barrier
 * in the same round, all answer EINVAL, no data changed.  After
 * PDSHM_EOWNERDEAD or a timeout while the members were working, data's
 * contents are unspecified; a timeout before any member read anything
 * changes nothing and a later call takes part in the same round.  Bad
 * arguments of the caller (data NULL with count > 0, a dtype that cannot
 * be reduced, an unknown op, staging NULL, of another attachment, or
 * smaller than the data: EINVAL; holding no tensor: ETYPE) answer that
 * error, the others EINVAL.  EINVAL for a NULL g.
 */
PDSHM_API int pdshm_group_allreduce_private(pdshm_group *g, void *data, pdshm_dtype dtype,
                                            uint64_t count, pdshm_var *staging,
                                            pdshm_reduce_op op, int64_t timeout_ns);
/* Frees the rank and the handle (also on error); the group's memory goes
 * back when this was its last member.  pdshm_detach leaves every group of
 * the attachment.  EINVAL for a NULL g; EROFS, EFORKED, ENOTRECOVERABLE as
 * every call that writes (the rank is not given up then); ENOTRECOVERABLE
 * or EBADSEG when the group's records cannot be changed. */
PDSHM_API int pdshm_group_leave(pdshm_group *g);
/*
 * Groups that shrink and grow.  A collective of the live members, at a round
 * boundary: the ranks whose members died (or left) and were not taken over
 * are dropped, and the processes waiting in pdshm_group_enlist are admitted.
 * Every live member calls it; once all of them have (the dead are not waited
 * for: a member that dies during the call is dropped with the others, or,
 * when it dies after the new ranks were decided, told of by the next round's
 * PDSHM_EOWNERDEAD as any death), each gets 0, the same new size in
 * *new_size, and its new rank in *new_rank: the live members keep the order
 * of their old ranks (0, 1, ... in that order), the admitted candidates
 * follow (in the order of the seats they enlisted into).  With nobody dead
 * and nobody waiting it changes nothing, and returns 0 as a barrier would.
 * The caller's handle takes the new rank and size (pdshm_group_rank,
 * pdshm_group_size, pdshm_group_share) and its next barrier or collective is
 * among the new members.  How long to wait for a
 * replacement before regrouping is the caller's choice (a barrier with a
 * timeout: PDSHM_EOWNERDEAD then PDSHM_ETIMEDOUT, say).
 * PDSHM_ETIMEDOUT after timeout_ns (< 0: no limit) when a live member has
 * not come (a stopped process: slow is not dead), or deaths kept breaking
 * its rounds until then: nothing changed, the
 * caller's rank and size are as before, and its next call (a regroup again,
 * or a barrier) waits for the same round.  PDSHM_EINVAL, nothing changed,
 * when a member came to the same round with a barrier or a collective instead
 * (the regroup's callers withdraw; the others wait as for a missing member),
 * and for a NULL argument.  While members wait in a regroup,
 * pdshm_group_join is refused (PDSHM_EBUSY): a rank taken over then would be
 * waited for.  PDSHM_ESTALE when the caller no longer holds a rank of the
 * group (its seat was given up for dead).  EROFS, EFORKED, and the lock's
 * errors (ENOTRECOVERABLE).  One thread at a time uses a pdshm_group.
 */
PDSHM_API int pdshm_group_regroup(pdshm_group *g, int64_t timeout_ns, int *new_rank,
                                  int *new_size);
/*
 * Enlists the calling process as a candidate of the existing group NAME and
 * waits, at most timeout_ns (< 0: no limit), for its members' next
 * pdshm_group_regroup to admit it: 0 and *out a membership whose rank and size
 * are the ones that regroup gave (its first barrier or collective takes part
 * in the round right after that regroup, as the members' next call does: if
 * a death broke it meanwhile, it answers PDSHM_EOWNERDEAD there too, and the
 * newcomer regroups with the others).  A candidate only waits: it holds up
 * no member, and one that dies or stops while waiting delays no regroup (a
 * dead one is dropped; a stopped one is admitted, and is then waited for as
 * any stopped member).  PDSHM_ETIMEDOUT: not admitted in time, no longer a candidate,
 * nothing changed.  PDSHM_ENOENT when there is no group NAME; PDSHM_EUSERS
 * when it has PDSHM_GROUP_MAX ranks and candidates already; EINVAL (NULL
 * seg or out, a bad name); ENOMEM; EROFS; EFORKED; ESTALE (the candidate's
 * seat was given up for dead).
 */
PDSHM_API int pdshm_group_enlist(pdshm_seg *seg, const char *name, int64_t timeout_ns,
                                 pdshm_group **out);

/* ---- Tensors ------------------------------------------------------------ */
#define PDSHM_NDIM_MAX 8
#define PDSHM_TENSOR_ALIGN 64 /* bytes: alignment of every tensor's data */

/* Makes v a tensor of that dtype and shape (ndim 0..PDSHM_NDIM_MAX, each dim
 * >= 0; a zero dim gives 0 bytes); data contents are unspecified afterwards.
 * EINVAL, EOVERFLOW, ENOMEM, ESTALE (v was erased), EBADSEG (its buffer is
 * damaged); a failure changes nothing. */
PDSHM_API int pdshm_tensor_resize(pdshm_var *v, pdshm_dtype dt, int ndim, const int64_t *dims);
/* The tensor as it is now.  A resize in any process frees the buffer and
 * changes the size, also one through another process's pdshm_var * of an
 * erased variable whose record v took over (see "Variables"): data and
 * nbytes read here hold only while nobody resizes v, and two such reads may
 * straddle a resize.  A pin's view (below) stays the bytes it describes
 * whatever becomes of v. */
PDSHM_API void *pdshm_tensor_data(const pdshm_var *v);     /* NULL unless a tensor */
PDSHM_API int pdshm_tensor_dtype(const pdshm_var *v);      /* or PDSHM_ETYPE */
PDSHM_API int pdshm_tensor_ndim(const pdshm_var *v);       /* or PDSHM_ETYPE */
PDSHM_API const int64_t *pdshm_tensor_dims(const pdshm_var *v); /* NULL unless a tensor */
PDSHM_API size_t pdshm_tensor_nbytes(const pdshm_var *v);  /* 0 unless a tensor */
PDSHM_API size_t pdshm_dtype_size(pdshm_dtype dt);         /* 0 for an unknown one */

/* ---- Pins: views that outlive their variable --------------------------- */
/*
 * A pin keeps a tensor's buffer allocated.  While a buffer is pinned, an
 * erase, a resize, the death of its scope or a detach -- in any process --
 * unhooks the buffer from its variable but does not free it (a resize of a
 * pinned buffer always takes a new one); the bytes go back when the last pin
 * is dropped: by pdshm_tensor_unpin, by pdshm_detach of the attachment that
 * pinned, or by the reaper of a pinning process that died.  So the memory a
 * pin describes is never freed or reused while the pin lasts.  pdshm_check
 * verifies the pin counts; pdshm_inspect_alloc counts the pinned buffers
 * that were unhooked (orphan_blocks, orphan_bytes) and pdshm_procs the pins
 * of each process.  A pin is no reference on the variable or its scope.
 */
typedef struct pdshm_pin pdshm_pin; /* this process's pin: private memory      */
typedef struct pdshm_tensor_view {
  void *data;              /* the bytes (PDSHM_TENSOR_ALIGN aligned, never NULL) */
  size_t nbytes;
  int dtype;               /* pdshm_dtype                                        */
  int ndim;
  int64_t dims[PDSHM_NDIM_MAX];
  uint64_t version;        /* the variable's version when pinned                 */
} pdshm_tensor_view;
/* Pins v's current buffer and describes it in *view (may be NULL); every
 * tensor has a buffer, a 0-byte one too.  ETYPE when v holds no tensor;
 * ENOMEM when no block is left for the pin's record; EROFS on a read-only
 * attachment; EFORKED; EINVAL for a NULL v or out; ESTALE when v was seen
 * erased (using an erased pdshm_var * is the caller's race, as everywhere);
 * EBADSEG when the tensor's description lies outside its buffer (damaged).
 * A failure changes nothing. */
PDSHM_API int pdshm_tensor_pin(pdshm_var *v, pdshm_pin **out, pdshm_tensor_view *view);
/* The buffer the pin holds, as described when it was taken. */
PDSHM_API const pdshm_tensor_view *pdshm_pin_view(const pdshm_pin *p);
/* Drops the pin and frees the handle, also on error.  In a fork child it
 * frees the handle only and answers EFORKED (the parent's pin stays).
 * EINVAL for NULL; ENOTRECOVERABLE on a poisoned segment. */
PDSHM_API int pdshm_tensor_unpin(pdshm_pin *p);
/* In a fork child: a pin of this attachment (seg, attached in the child) on
 * the buffer that `inherited` -- a pin the parent took before the fork --
 * holds, so that the inherited view stays allocated after the parent lets go
 * or dies.  Its view's data is the inherited one's (the child keeps the
 * parent's address range mapped: see pdshm_detach).  ESTALE when the
 * parent's pin is gone; EINVAL when inherited is not a pin inherited from an
 * attachment of the same segment (the same file); ENOMEM; and, for seg,
 * EROFS and EFORKED.  pdshm_detach of seg drops the pin. */
PDSHM_API int pdshm_pin_inherit(pdshm_seg *seg, const pdshm_pin *inherited, pdshm_pin **out);

/* "prefix-N", N unique across every process of the segment.  ERANGE when cap
 * is too small (buf then holds "", and N is not handed out again);
 * ENAMETOOLONG for an over-long prefix; EINVAL for a NULL argument; EROFS,
 * EFORKED, ENOTRECOVERABLE as every call that writes. */
PDSHM_API int pdshm_unique_name(pdshm_seg *seg, const char *prefix, char *buf, size_t cap);

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

/* ---- Introspection ------------------------------------------------------ */
/*
 * Read-only views of a live, possibly corrupt segment (pdshm-attach and the
 * daemon use these).  They work on a PDSHM_RDONLY attachment, store nothing
 * and take no lock (but pdshm_inspect_alloc on a writable attachment): every
 * offset is bounds-checked, every walk is bounded and detects cycles.  A
 * walk torn by writers (some lock of the segment held or taken while it
 * read) is walked again, so a healthy segment is never called damaged; one
 * that fails while nothing changes answers PDSHM_EBADSEG, and one torn by
 * writers for 5 seconds on end PDSHM_EAGAIN (pdshm_last_error() says what
 * was wrong).  The figures are those of some instant during the call.
 */
enum { PDSHM_PROC_ALIVE = 1, PDSHM_PROC_DEAD = 2, PDSHM_PROC_REAPING = 3 };
typedef struct pdshm_proc_info {
  uint32_t slot;        /* index in the process table                          */
  uint32_t pid;         /* the attacher's pid, in its own pid namespace        */
  int      state;       /* PDSHM_PROC_*: DEAD = its liveness lock is gone and  */
                        /* it is not yet reaped                                */
  uint32_t reaper_pid;  /* while REAPING                                       */
  uint64_t attach_ns;   /* CLOCK_REALTIME at attach                            */
  uint64_t handles;     /* scope handles it holds                              */
  uint64_t bytes_held;  /* bytes of blocks it owns (handles, holds, pins, in  */
                        /* flight, cached)                                     */
  uint64_t pins;        /* tensor buffers it pins (pdshm_tensor_pin)           */
} pdshm_proc_info;
/* Fills out[0..cap) with the slots in use (not FREE), in slot order, and returns
 * how many are in use (which may exceed cap), or a negative PDSHM_E* code:
 * EINVAL for a NULL out with cap > 0; ENOMEM (private memory); EBADSEG when
 * the process table or the block chain is damaged; EAGAIN (above).  Works on
 * a read-only attachment; takes no lock, stores nothing. */
PDSHM_API int pdshm_procs(pdshm_seg *seg, pdshm_proc_info *out, unsigned cap);

/* The segment as its header describes it. */
typedef struct pdshm_seg_info {
  uint64_t size;           /* bytes of the segment now (it grows up to max_size) */
  uint64_t arena;          /* bytes of the arena (blocks)                        */
  uint32_t layout_version; /* of the segment's structures                        */
  uint32_t max_procs;      /* process slots                                      */
  uint32_t max_locks;      /* lock-table entries                                 */
  uint32_t creator_pid;    /* who created it (its pid namespace)                 */
  uint32_t creator_uid;
  uint32_t daemon_pid;     /* pdshmd's pid, 0 when none                          */
  uint64_t created_ns;     /* CLOCK_REALTIME at create                           */
  uint64_t daemon_beat_ns; /* pdshmd's last heartbeat (CLOCK_REALTIME), 0: none  */
  uint64_t reaped;         /* slots reaped since create                          */
  int poisoned;            /* nonzero: a repair failed (ENOTRECOVERABLE)         */
  uint64_t max_size;       /* the most it grows to (== size at create: fixed)    */
  uint64_t first_size;     /* bytes at create                                    */
  uint64_t growths;        /* times it grew since create                         */
} pdshm_seg_info;
/* Copies the header's figures (no walk).  EINVAL for a NULL out. */
PDSHM_API int pdshm_inspect_seg(pdshm_seg *seg, pdshm_seg_info *out);

/* Scopes, as a walk of the tree: every scope in the arena, the root first,
 * each scope before its kids (depth first, kids by id), kids that were
 * unlinked (drop_kids) but are still held included under their parent. */
#define PDSHM_HOLDERS_MAX 8 /* holder pids a pdshm_scope_info lists            */
typedef struct pdshm_scope_info {
  uint64_t id;             /* unique for the segment's life                      */
  uint64_t parent_id;      /* 0 for the root                                     */
  uint32_t depth;          /* 0 for the root                                     */
  int named;               /* created with a name (the root is not)              */
  int linked;              /* openable by path (named and not unlinked)          */
  int last;                /* the last kid of its parent in this walk            */
  char name[PDSHM_NAME_MAX + 1]; /* "" for an anonymous scope and the root       */
  uint64_t refs;           /* handles + kids + link                              */
  uint64_t kids;           /* scopes whose parent it is                          */
  uint64_t vars;           /* its own variables                                  */
  uint64_t bytes;          /* of its blocks: record, name, index, variables and  */
                           /* everything they own (tensor buffers included)      */
  uint64_t tensor_bytes;   /* of its variables' tensors                          */
  uint32_t creator_pid;
  uint32_t nholders;       /* processes holding a handle on it                   */
  uint32_t holders[PDSHM_HOLDERS_MAX]; /* the first of their pids                */
  uint64_t handles;        /* handle records on it, all processes                */
  uint64_t created_ns;     /* CLOCK_REALTIME                                     */
} pdshm_scope_info;
/* Calls fn for each scope until fn returns nonzero, which is then returned.
 * The walk is taken from a snapshot: fn may call any introspection function.
 * ENOMEM (private memory), EBADSEG, EAGAIN. */
PDSHM_API int pdshm_inspect_scopes(pdshm_seg *seg,
                                   int (*fn)(const pdshm_scope_info *si, void *arg), void *arg);

enum { PDSHM_VAR_EMPTY = 0, PDSHM_VAR_TENSOR = 1 };       /* pdshm_var_info.type */
enum { PDSHM_VLOCK_FREE = 0, PDSHM_VLOCK_SHARED = 1, PDSHM_VLOCK_EXCLUSIVE = 2 };
typedef struct pdshm_var_info {
  uint64_t scope_id;       /* the scope it belongs to                            */
  uint64_t gen;            /* its incarnation (a pdshm_varref's gen)             */
  char name[PDSHM_NAME_MAX + 1];
  char label[PDSHM_NAME_MAX + 1]; /* "" when none                                */
  int type;                /* PDSHM_VAR_*                                        */
  int dtype;               /* pdshm_dtype, when a tensor                         */
  int ndim;                /* 0..PDSHM_NDIM_MAX, when a tensor                   */
  int64_t dims[PDSHM_NDIM_MAX];
  uint64_t nbytes;         /* of the tensor's data                               */
  uint64_t bytes;          /* of its blocks: record, name, label, operator lists */
                           /* and tensor buffer                                  */
  uint64_t version;        /* pdshm_var_version                                  */
  int lock_state;          /* PDSHM_VLOCK_*                                      */
  uint64_t lock_readers;   /* shared holders                                     */
  uint32_t lock_holder_pid;/* the exclusive holder (best effort), else 0         */
  uint32_t lock;           /* always 0: a variable's lock is a word of its own,  */
                           /* not a lock-table entry (kept for the layout of     */
                           /* this struct)                                       */
  uint32_t nreaders, nwriters;   /* operators reading / writing it               */
  const char *const *readers;    /* their names: valid during the callback only  */
  const char *const *writers;
} pdshm_var_info;
/* Calls fn for each variable of the scope whose id is scope_id (0: the root),
 * sorted by name, until fn returns nonzero, which is then returned.  ENOENT
 * when there is no such scope; ENOMEM; EBADSEG; EAGAIN. */
PDSHM_API int pdshm_inspect_vars(pdshm_seg *seg, uint64_t scope_id,
                                 int (*fn)(const pdshm_var_info *vi, void *arg), void *arg);

/* PDSHM_LOCK_OF_VAR is never reported any more: a variable's lock is a word
 * of its record, not a lock-table entry (pdshm_inspect_vars shows it). */
enum { PDSHM_LOCK_OF_HEAP = 1, PDSHM_LOCK_OF_SCOPE = 2, PDSHM_LOCK_OF_VAR = 3 };
typedef struct pdshm_lock_info {
  uint32_t index;          /* in the lock table                                  */
  int kind;                /* PDSHM_LOCK_OF_*: what it guards                    */
  uint64_t scope_id;       /* the scope it guards, or the variable's scope       */
  char var[PDSHM_NAME_MAX + 1]; /* the variable's name for PDSHM_LOCK_OF_VAR     */
  int held;                /* 1: its mutex is held right now, 0: it is not, -1: */
                           /* this C library does not let a reader tell          */
  uint32_t holder_pid;     /* who holds it (best effort), 0 when free            */
  uint64_t acquisitions;
  uint64_t contended;      /* acquisitions that had to wait                      */
  uint64_t wait_ns;        /* total time those waited                            */
  uint64_t owner_died;     /* holders that died holding it (recovered)           */
  int unrecoverable;       /* a repair failed: takers get ENOTRECOVERABLE        */
} pdshm_lock_info;
/* Calls fn for each lock-table entry in use (the heap's, and those lent to a
 * scope or a variable), in table order, until fn returns nonzero, which is
 * then returned.  ENOMEM, EBADSEG, EAGAIN. */
PDSHM_API int pdshm_inspect_locks(pdshm_seg *seg,
                                  int (*fn)(const pdshm_lock_info *li, void *arg), void *arg);

/* Trainer groups (pdshm_group_join), as the registry lists them. */
enum { PDSHM_MEMBER_FREE = 0, PDSHM_MEMBER_ALIVE = 1, PDSHM_MEMBER_DEAD = 2 };
typedef struct pdshm_group_member_info {
  int state;               /* PDSHM_MEMBER_*: FREE = never taken or left; DEAD = */
                           /* its process died (reaped or not)                   */
  uint32_t slot;           /* its process slot (ALIVE, DEAD)                     */
  uint32_t pid;            /* that slot's pid while ALIVE, else 0                */
  uint32_t arrived;        /* the last round it arrived at                       */
  int writing;             /* working on its share of a collective right now     */
} pdshm_group_member_info;
typedef struct pdshm_group_info {
  char name[PDSHM_GROUP_NAME_MAX + 1];
  uint64_t id;             /* unique for the segment's life                      */
  uint32_t size;           /* ranks                                              */
  uint32_t alive, dead;    /* members of each state                              */
  uint32_t round;          /* the round in progress (a barrier counts one, a     */
                           /* collective on tensors two)                         */
  uint32_t arrived;        /* members that arrived at it                         */
  uint32_t broken;         /* of the PDSHM_GROUP_HISTORY rounds before it, those */
  uint32_t timed_out;      /* broken by a death (bit 0: the last), or by a       */
                           /* timeout                                            */
  uint64_t bytes;          /* of its blocks: record and name                     */
  uint64_t created_ns;     /* CLOCK_REALTIME                                     */
  const pdshm_group_member_info *members; /* [size], rank order: valid during    */
                                          /* the callback only                   */
  uint32_t candidates;     /* live processes waiting in pdshm_group_enlist       */
  uint32_t regrouped;      /* the last round a pdshm_group_regroup ended, 0: none */
  uint32_t regroup_pending;/* the round of a regroup decided and not yet applied */
                           /* (its process died applying it; the next group call */
                           /* finishes it), 0 when none                          */
} pdshm_group_info;
#define PDSHM_GROUP_HISTORY 10
/* Calls fn for each group of the registry, newest first, until fn returns
 * nonzero, which is then returned.  Works on a read-only attachment; takes no
 * lock, stores nothing.  ENOMEM, EBADSEG, EAGAIN. */
PDSHM_API int pdshm_inspect_groups(pdshm_seg *seg,
                                   int (*fn)(const pdshm_group_info *gi, void *arg), void *arg);

#define PDSHM_ALLOC_CLASSES 59 /* small size classes */
typedef struct pdshm_alloc_class {
  uint32_t block_size;     /* bytes, header included                             */
  uint64_t used;           /* blocks handed out                                  */
  uint64_t cached;         /* blocks parked in process caches                    */
} pdshm_alloc_class;
typedef struct pdshm_alloc_info {
  uint64_t arena;          /* bytes of the arena                                 */
  uint64_t used, free;     /* bytes; free includes cached                        */
  uint64_t cached;         /* bytes parked in process caches                     */
  uint64_t blocks_used, blocks_free, blocks_cached;
  uint64_t largest_free;   /* bytes of the largest free block                    */
  uint64_t large_used;     /* bytes in blocks above the largest class            */
  uint64_t large_blocks;
  uint64_t punched;        /* bytes given back to the system (holes)             */
  uint64_t rebuilds;       /* free-list rebuilds after a death                   */
  double fragmentation;    /* 1 - largest_free / (free - cached); 0 when none    */
  /* USED bytes by what they hold */
  uint64_t scope_bytes, var_bytes, name_bytes, table_bytes, tensor_bytes, handle_bytes,
      oplist_bytes, hold_bytes, raw_bytes;
  pdshm_alloc_class cls[PDSHM_ALLOC_CLASSES];
  uint64_t pin_bytes;      /* USED bytes of pin records                          */
  uint64_t orphan_bytes;   /* bytes of pinned buffers no variable holds any more */
  uint64_t orphan_blocks;  /* (erased, resized or destroyed while pinned); they  */
                           /* are in tensor_bytes too                            */
} pdshm_alloc_info;
/* One walk of the arena (a writable attachment takes the heap lock for it,
 * a read-only one retries torn walks).  EBADSEG. */
PDSHM_API int pdshm_inspect_alloc(pdshm_seg *seg, pdshm_alloc_info *out);

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_H */
