/*
 * layout.h - every structure that lives in the segment, and offset helpers.
 *
 * Bump PDSHM_LAYOUT_VERSION whenever a struct, a constant or the meaning of a
 * field in this file changes: attach refuses a segment whose version or
 * fingerprint (sizes and offsets of these structs) differs from its own.
 *
 * Segment map (offsets from the start of the file; every region 4 KiB aligned):
 *
 *   0           struct pdshm_hdr       magic first: any damage there is EBADSEG
 *   slots_off   struct pdshm_slot[max_procs]
 *   locks_off   struct pdshm_lock[max_locks]
 *   arena_off   blocks, back to back, up to arena_end: the segment's current
 *               size, which grows (heap_grow.c) up to max_size
 *   arena_end   bytes of the file nobody counts yet (a grower that died before
 *               its publication), up to max_size; the mapping covers
 *               max_size, and nothing touches a byte at or past arena_end
 *
 * Invariants (checked by pdshm__heap_check and pdshm_check; how a death at
 * any instruction keeps them: lib/CRASH-SAFETY.md):
 *  1. Nothing in the segment holds a pointer: links are pdshm_off_t offsets from
 *     the start of the segment, 0 meaning none.
 *  2. The arena is a chain of blocks: from arena_off, adding each block's size
 *     lands exactly on arena_end, which only grows: under the heap lock, by one
 *     release store made after the file holds the new bytes and the new last
 *     block's header is written past the old end.  Every size is a multiple of PDSHM_ALIGN and at
 *     least PDSHM_BLK_MIN.  A block's size only changes under the heap lock, and
 *     always by one 8-byte store that keeps the chain walkable (a split writes
 *     the tail's header before shrinking the head; a merge grows the head over
 *     the tail's header), so a death at any instruction leaves a walkable chain.
 *  3. A FREE block is on exactly one bin list, its size's (rebuilt from the
 *     chain alone when a process dies holding the heap lock); no two FREE
 *     blocks are adjacent once the heap lock is released.
 *  4. A CACHED block sits in the cache of the lane of slot owner-1, which
 *     only that lane's thread touches, and keeps its size there; a USED
 *     block with owner != 0 is private to slot owner-1 (in flight, retired by a
 *     pending journal, or process-owned like a handle or pin record) and is
 *     reclaimed when that slot is reaped (a pinned TENSOR block is orphaned
 *     instead: invariant 6); a USED block with owner == 0 is published.
 *  5. A mutex in the lock table is initialised once, at create, and never
 *     destroyed or re-initialised; objects borrow lock-table entries by index.
 *  6. Pins (tensor_pins.c): a TENSOR block's payload starts with struct
 *     pdshm_tensor_buf.  Its pin count equals the number of USED PIN blocks
 *     whose target is that payload, whenever nobody holds the heap lock (both
 *     change only under it; a repair after the holder's death recounts).  A
 *     pinned buffer is never freed: where it would be, it is orphaned (flag
 *     set, owner 0, referenced by no variable) and freed by the unpin that
 *     takes its count to 0.  An orphan's count is never 0 under the lock.
 */
#ifndef PDSHM_LAYOUT_H
#define PDSHM_LAYOUT_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PDSHM_LAYOUT_VERSION 11u
#define PDSHM_MAGIC "\x89PDSHM\r\n" /* 8 bytes, no NUL needed */
#define PDSHM_MAGIC_LEN 8
#define PDSHM_CACHELINE 64
#define PDSHM_REGION_ALIGN 4096u

typedef uint64_t pdshm_off_t; /* bytes from the start of the segment; 0 = none */

/* ---- Blocks ------------------------------------------------------------ */
#define PDSHM_ALIGN 16u                 /* block size granule and payload alignment */
#define PDSHM_BLK_HDR 16u               /* sizeof(struct pdshm_blk)                 */
#define PDSHM_BLK_MIN 32u               /* header + two free-list links             */
#define PDSHM_BLK_MAX (1ull << 36)      /* prev16 is 32 bits of 16-byte units       */

/* word bits 0..1: state; bit 2: flag; bits 4..63: size (a multiple of 16). */
#define PDSHM_BLK_FREE   0u /* on a bin list of the heap                        */
#define PDSHM_BLK_USED   1u /* handed out                                       */
#define PDSHM_BLK_CACHED 2u /* parked in a lane's cache: free for accounting    */
#define PDSHM_BLK_STATE  3u
#define PDSHM_BLK_HOLEY  4u /* FREE only: pages inside may have been punched out */
#define PDSHM_BLK_FLAGS  15u

/* What a USED block holds (the checker, the inspector and the reaper read it). */
enum pdshm_type {
  PDSHM_T_NONE = 0, /* free or cached                                    */
  PDSHM_T_RAW,      /* untyped (tests, benchmarks)                       */
  PDSHM_T_SCOPE,    /* struct pdshm_scope_rec                            */
  PDSHM_T_VAR,      /* struct pdshm_var_rec                              */
  PDSHM_T_NAME,     /* NUL-terminated name or label                      */
  PDSHM_T_TABLE,    /* a scope's variable hash table                     */
  PDSHM_T_TENSOR,   /* a tensor's data buffer                            */
  PDSHM_T_HANDLE,   /* a process's reference record on a scope           */
  PDSHM_T_OPLIST,   /* a variable's readers or writers                   */
  PDSHM_T_HOLD,     /* none made since layout 7 (a shared hold on a
                       variable lock is a struct pdshm_vl_hold of the slot) */
  PDSHM_T_PIN,      /* a process's pin on a tensor buffer (struct pdshm_pin_rec) */
  PDSHM_T_GROUP,    /* a trainer group (struct pdshm_group_rec, groups.h)  */
  PDSHM_T_COUNT
};

struct pdshm_blk {
  _Atomic uint64_t word; /* size | state | flags.  Size bits: heap lock only.
                            State CACHED<->USED: the owning lane, no lock (the
                            size is rewritten unchanged).  Release stores.      */
  uint32_t prev16;       /* size/16 of the block before (0 for the first): a
                            hint for coalescing, heap lock; rebuilt by repair    */
  uint16_t type;         /* enum pdshm_type, set by whoever allocates it         */
  uint16_t owner;        /* slot+1 while private to that slot (see inv. 4), 0
                            when published; written by the slot's lane, or
                            under the heap lock when the block is FREE           */
};

/* A FREE block's payload: its bin list links (heap lock). */
struct pdshm_free_links {
  pdshm_off_t next, prev; /* block offsets; 0 ends the list */
};

/* The head of every TENSOR block's payload; the data follows, aligned to
 * PDSHM_TENSOR_ALIGN.  Zeroed when the block is handed out. */
struct pdshm_tensor_buf {
  _Atomic uint64_t pins;   /* PIN records targeting this buffer; heap lock
                              (read without it only where no pin can appear:
                              the buffer is unhooked, so a zero stays zero) */
  uint64_t orphan;         /* 1 once unhooked while pinned: published, owned
                              by no variable, freed at the last unpin; heap
                              lock                                          */
};

/* A PIN block's payload: a process's pin (owner = slot+1, never published).
 * It comes out of the allocator zeroed: a target of 0 counts for nothing. */
struct pdshm_pin_rec {
  pdshm_off_t target;      /* the pinned TENSOR payload, 0 when none; heap lock */
  uint64_t epoch;          /* the owning slot's epoch when it was made        */
};

/* ---- Size classes and bins -------------------------------------------- */
/*
 * Small blocks (up to PDSHM_CLASS_MAX bytes including the header) come in
 * PDSHM_NCLASSES sizes: 32..512 by 16, then four per doubling up to 64 KiB.
 * Each lane caches up to a few blocks of each class.
 * Free blocks are binned two-level-segregated-fit style: PDSHM_NBINS lists,
 * exact 16-byte steps below 1 KiB, then eight bins per doubling.
 */
#define PDSHM_NCLASSES 59u
#define PDSHM_CLASS_MAX (64u << 10)
#define PDSHM_NBINS 320u

struct pdshm_heap {
  uint64_t nonempty[PDSHM_NBINS / 64]; /* bit b: bins[b] has a block (heap lock) */
  pdshm_off_t bins[PDSHM_NBINS];       /* heads of the FREE lists (heap lock)    */
  uint64_t rebuilds;                   /* free-list rebuilds after a death        */
  uint64_t punched;                    /* bytes given back with PUNCH_HOLE        */
  uint64_t retained;                   /* bytes of large frees kept backed: up to
                                          a budget, to spare alloc/free cycles a
                                          punch and a re-reserve each; a hint     */
  uint64_t retained_ns;                /* CLOCK_MONOTONIC instant of the last
                                          large free kept backed; a hint          */
  pdshm_off_t tail;                    /* the last block of the chain: a hint,
                                          checked before use and set again by
                                          every rebuild                          */
  uint64_t growths;                    /* growths of arena_end since create      */
};

/* ---- Locks -------------------------------------------------------------- */
#define PDSHM_LOCK_HEAP 0u   /* the heap's bins and every block size         */
#define PDSHM_LOCK_GROUPS 1u /* the group registry and every group's members */
#define PDSHM_LOCK_FIXED 2u  /* entries below this index are not allocatable */

#define PDSHM_LOCK_AVAILABLE 0ull    /* alloc: nobody has this entry           */
#define PDSHM_LOCK_PUBLISHED (~0ull) /* alloc: borrowed by a live object       */
                                         /* any other value: slot+1 creating   */

/* A variable's lock is no kind of entry: it is a word of the variable's
 * record (lib/model/varlock.c), taken before any entry (lib/locks/lockorder.c). */
enum pdshm_lock_kind {
  PDSHM_LK_NONE, PDSHM_LK_HEAP, PDSHM_LK_SCOPE, PDSHM_LK_GROUPS,
  PDSHM_LK_COUNT /* not a kind: how many there are (lock.c's repair table) */
};

/* Ranks (struct pdshm_lock.rank): a thread takes locks in rising rank
 * (lib/locks/lockorder.c).  0 is an entry nobody ranked: never checked. */
#define PDSHM_RANK_SCOPE 1u       /* + the scope's depth: a parent's first     */
#define PDSHM_RANK_GROUPS (UINT32_MAX - 1) /* the group registry: after any */
                                          /* scope's, before the heap's        */
#define PDSHM_RANK_HEAP UINT32_MAX /* the heap lock, always last               */

struct pdshm_lock {
  pthread_mutex_t mutex; /* robust, process-shared, never re-initialised      */
  uint64_t acquisitions; /* under mutex                                        */
  uint64_t contended;    /* acquisitions that had to wait; under mutex          */
  uint64_t wait_ns;      /* total time those waited; under mutex                */
  /* second cache line: who borrows it, who holds it */
  alignas(PDSHM_CACHELINE) _Atomic uint64_t alloc; /* PDSHM_LOCK_* or slot+1:
                            CAS AVAILABLE -> slot+1 claims it for an object
                            being built; that object's journal publishes it
                            (PUBLISHED) and, when the object dies, frees it
                            (AVAILABLE); a reaper returns what a dead slot had
                            claimed but not published                          */
  pdshm_off_t guards;    /* offset of the object it guards, 0 for fixed locks;
                            written by the claimer before publication          */
  uint32_t kind;         /* enum pdshm_lock_kind; written by the claimer        */
  uint32_t rank;         /* PDSHM_RANK_*: acquisition order, checked by debug
                            builds (lockorder.c); written by the claimer      */
  _Atomic uint32_t holder_pid;  /* the last holder, best effort, for the       */
  _Atomic uint32_t holder_slot; /* inspector: set after acquiring when it      */
                                /* changed, kept at release (held or not: the  */
                                /* mutex's futex word)                         */
  uint64_t owner_died;   /* EOWNERDEAD recoveries; under mutex                  */
  _Atomic uint64_t unrecoverable; /* set (before the mutex is released for good)
                            when a repair failed: takers get ENOTRECOVERABLE
                            without touching the mutex (glibc's trylock on a
                            not-recoverable robust mutex leaves it held)      */
  uint64_t reserved[2];
};

/* ---- Process slots, lanes, journals ----------------------------------- */
/*
 * A slot is one attachment.  Liveness is an open-file-description lock
 * (F_OFD_SETLK) on byte PDSHM_OFD_SLOT_BASE + index of the segment file: the
 * kernel drops it when the last descriptor of the attachment closes, whatever
 * the pid namespace, and a recycled pid cannot hold it.  Whoever holds that
 * lock owns the slot: its process, or a reaper cleaning up after it.
 *
 * A slot has PDSHM_LANES lanes so that threads of one process mutate in
 * parallel; a lane is taken by one thread at a time (a process-local mutex).
 * A lane holds an allocation cache and a journal.
 */
#define PDSHM_OFD_SLOT_BASE (1ll << 40) /* beyond any segment's last byte       */
#define PDSHM_OFD_INIT (PDSHM_OFD_SLOT_BASE - 1) /* held while creating         */
#define PDSHM_OFD_DAEMON (PDSHM_OFD_SLOT_BASE - 2) /* held by pdshmd            */
#define PDSHM_LANES 4u

enum pdshm_slot_state {
  PDSHM_SLOT_FREE = 0, /* never used, or released cleanly                     */
  PDSHM_SLOT_LIVE,     /* claimed by an attachment (dead if its lock is free)  */
  PDSHM_SLOT_REAPING   /* a reaper owns it and is releasing what it held       */
};

struct pdshm_cache_bin {
  pdshm_off_t head; /* CACHED blocks of one class, linked through payloads     */
  uint32_t count;
  uint32_t pad;
};

/*
 * Journal: a redo log for one mutation under one lock L (journal.c owns it
 * and states its protocol; lib/CRASH-SAFETY.md says how to use it).  Whoever
 * next holds L after the owner's death finishes a COMMIT journal and rolls
 * back an ARMED one.
 */
#define PDSHM_J_REDO 24u
#define PDSHM_J_BLOCKS 8u

enum pdshm_jstate { PDSHM_J_IDLE = 0, PDSHM_J_ARMED, PDSHM_J_COMMIT };

struct pdshm_redo {
  pdshm_off_t at; /* an 8-byte aligned word guarded by the journal's lock */
  uint64_t val;
};

struct pdshm_journal {
  _Atomic uint32_t state; /* enum pdshm_jstate; release stores               */
  _Atomic uint32_t lock;  /* lock index the op runs under                    */
  uint32_t op;            /* what the op is, for reports                     */
  uint32_t nredo, nnew, nold;
  pdshm_off_t unused;     /* always 0: kept so that the layout stays         */
  pdshm_off_t seq;        /* a seqlock word the op made odd: repair makes it
                             even again so that lock-free readers go on       */
  pdshm_off_t newb[PDSHM_J_BLOCKS];
  pdshm_off_t oldb[PDSHM_J_BLOCKS];
  struct pdshm_redo redo[PDSHM_J_REDO];
};

/* How far a scope's destruction has got (lib/CRASH-SAFETY.md, "Work longer
 * than one journal"): each phase is the next one to run. */
enum pdshm_destroy_phase {
  PDSHM_DESTROY_NONE = 0,   /* nothing being destroyed                          */
  PDSHM_DESTROY_UNHOOK = 1, /* off the parent's kid list, the parent's ref
                               dropped: a journal under the parent's lock      */
  PDSHM_DESTROY_VARS = 2,   /* every variable freed, under the scope's own
                               lock (no journal): idempotent                   */
  PDSHM_DESTROY_RECORD = 3  /* table, name, record and lock entry retired: a
                               journal under the scope's own lock              */
};

/* Work that must survive the lane owner's death, resumed by its reaper
 * (lib/CRASH-SAFETY.md).  Written through the lane's journals, or by the one
 * release store that ends PDSHM_DESTROY_VARS. */
struct pdshm_lane_todo {
  pdshm_off_t destroy;    /* a scope whose refs reached 0, being destroyed    */
  pdshm_off_t next;       /* its parent, when that one's refs reached 0 too    */
  uint64_t phase;         /* enum pdshm_destroy_phase: what `destroy` runs next */
  pdshm_off_t chain;      /* scopes taken off their parent's kid list whose
                             link reference is still to be dropped, linked
                             through their next_sib                           */
};

struct pdshm_lane {
  struct pdshm_cache_bin cache[PDSHM_NCLASSES]; /* the lane's thread only     */
  uint64_t cached; /* bytes in those bins, all classes: heap.c keeps it under
                      the lane's cap (the thread's, or the sweep's, which
                      empties the bins)                                       */
  struct pdshm_journal j;
  struct pdshm_lane_todo todo;
};

/* A variable lock one thread of the slot's process holds or is taking
 * (lib/model/varlock.c owns the protocol): written only by that process, read by
 * reapers, and by a reaper recounting a variable's shared holders. */
#define PDSHM_VL_SLOT_HOLDS 256u

enum pdshm_vl_state {
  PDSHM_VL_IDLE = 0,   /* free                                                 */
  PDSHM_VL_CLAIMED,    /* a thread's, naming nothing counted                   */
  PDSHM_VL_TAKING,     /* a shared take: the count's CAS may have happened     */
  PDSHM_VL_HELD,       /* a shared hold, counted in the variable's word        */
  PDSHM_VL_RELEASING,  /* a shared release: the count's CAS may have happened  */
  PDSHM_VL_EXCL,       /* an exclusive take or hold: the word's owner tells    */
  /* Shared takes the word does not count, which a writer finds by scanning
   * (lib/model/varlock_bias.c): */
  PDSHM_VL_TRYING,     /* deciding whether it holds                            */
  PDSHM_VL_CANCELLED,  /* a writer made it step back before it decided         */
  PDSHM_VL_VISIBLE     /* a shared hold                                        */
};

struct pdshm_vl_hold {
  _Atomic uint32_t state; /* enum pdshm_vl_state                               */
  uint32_t pad;
  pdshm_off_t var;        /* the variable's record, set before state leaves    */
  uint64_t gen;           /* CLAIMED, with its generation                      */
};

struct pdshm_slot {
  _Atomic uint32_t state; /* enum pdshm_slot_state; written by the slot's owner */
  uint32_t pid;           /* of the attacher, in its own pid namespace       */
  uint64_t attach_ns;     /* CLOCK_REALTIME at attach                        */
  _Atomic uint64_t epoch; /* bumped at every claim                           */
  uint64_t proc_start;    /* the attacher's start time (/proc starttime)     */
  uint32_t reaper_pid;    /* pid of the reaper while REAPING                 */
  uint32_t pad;
  uint64_t reserved[3];
  struct pdshm_lane lane[PDSHM_LANES];
  struct pdshm_vl_hold vl[PDSHM_VL_SLOT_HOLDS]; /* varlock.c                  */
} __attribute__((aligned(PDSHM_CACHELINE)));

/* ---- The header --------------------------------------------------------- */
struct pdshm_hdr {
  /* Immutable once the magic is stored (create writes the magic last). */
  uint8_t magic[PDSHM_MAGIC_LEN];
  uint32_t layout_version;
  uint32_t hdr_bytes;       /* sizeof(struct pdshm_hdr)                        */
  uint64_t fingerprint;     /* pdshm__layout_fingerprint()                     */
  uint64_t size;            /* bytes of the segment at create: where arena_end
                               started (the current size is arena_end)        */
  uint32_t max_procs;
  uint32_t max_locks;
  uint32_t page_size;
  uint32_t creator_uid;
  pdshm_off_t slots_off;    /* struct pdshm_slot[max_procs]                    */
  pdshm_off_t locks_off;    /* struct pdshm_lock[max_locks]                    */
  pdshm_off_t arena_off;    /* first block                                     */
  pdshm_off_t arena_end;    /* one past the last block: the segment's current
                               size (layout invariant 2: grows under the heap
                               lock by one release store, never shrinks); read
                               it through pdshm__seg_end, which checks it
                               against the file                                */
  uint64_t created_ns;      /* CLOCK_REALTIME                                  */
  uint32_t creator_pid;
  uint32_t pad0;
  uint64_t max_size;        /* the most arena_end grows to (== size: fixed);
                               every attachment maps this many bytes          */
  uint64_t reserved[7];

  /* Mutable counters, each changed by one atomic operation. */
  alignas(PDSHM_CACHELINE) _Atomic uint32_t poisoned; /* nonzero: a repair
                                  failed; every mutation returns
                                  ENOTRECOVERABLE from then on              */
  _Atomic uint32_t daemon_pid;    /* pdshmd's pid, 0 when none                 */
  _Atomic uint64_t daemon_beat_ns;/* pdshmd's last heartbeat (CLOCK_REALTIME)  */
  _Atomic uint64_t name_counter;  /* pdshm_unique_name's N                     */
  _Atomic uint64_t id_counter;    /* scope ids and variable generations        */
  _Atomic uint64_t reaped;        /* slots reaped since create                 */
  pdshm_off_t root;               /* the root scope record, 0 before it exists */
  pdshm_off_t groups;             /* first group record (groups.h), 0 when none;
                                     lock PDSHM_LOCK_GROUPS, through journals  */

  /* The heap: every field under lock PDSHM_LOCK_HEAP. */
  alignas(PDSHM_CACHELINE) struct pdshm_heap heap;
};

/* ---- Offset helpers ----------------------------------------------------- */
#define PDSHM_AT(base, off, type) ((type *)((uint8_t *)(base) + (off)))

static inline uint64_t pdshm__blk_size(uint64_t word) { return word & ~(uint64_t)PDSHM_BLK_FLAGS; }
static inline unsigned pdshm__blk_state(uint64_t word) { return (unsigned)(word & PDSHM_BLK_STATE); }

/* A block's owner is read by sweeps (under the heap lock) of every block in
 * the chain, while the owning slot publishes or retires its own blocks under
 * other locks: every access outside the heap checker is one relaxed atomic
 * access, so a sweep sees the old tag or the new one, never a torn value
 * (and neither is the dead slot's tag it looks for). */
static inline uint16_t pdshm__blk_owner(const struct pdshm_blk *b) {
  return __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
}
static inline void pdshm__blk_set_owner(struct pdshm_blk *b, uint16_t owner) {
  __atomic_store_n(&b->owner, owner, __ATOMIC_RELAXED);
}

/* A block's type likewise: a lane caches and hands out its own blocks with
 * no lock while the sweeps and the recount read every block's type under the
 * heap lock (and the liveness checks under none); what they decide from it
 * they confirm by the word or by a lock. */
static inline uint16_t pdshm__blk_type(const struct pdshm_blk *b) {
  return __atomic_load_n(&b->type, __ATOMIC_RELAXED);
}
static inline void pdshm__blk_set_type(struct pdshm_blk *b, uint16_t type) {
  __atomic_store_n(&b->type, type, __ATOMIC_RELAXED);
}

#endif /* PDSHM_LAYOUT_H */
