/* pdshm/inspect.h - read-only introspection of a live, possibly damaged segment. */
#ifndef PDSHM_INSPECT_H
#define PDSHM_INSPECT_H

#include "pdshm/base.h"    /* PDSHM_API, the C types */
#include "pdshm/limits.h"  /* PDSHM_NAME_MAX */
#include "pdshm/segment.h" /* pdshm_seg */
#include "pdshm/tensor.h"  /* PDSHM_NDIM_MAX */
#include "pdshm/group.h"   /* PDSHM_GROUP_NAME_MAX */

#ifdef __cplusplus
extern "C" {
#endif

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
#endif /* PDSHM_INSPECT_H */
