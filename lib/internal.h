/*
 * internal.h - what the library's modules say to each other.  Nothing here is
 * installed.  Internal non-static functions are named pdshm__<module>_<verb>.
 */
#ifndef PDSHM_INTERNAL_H
#define PDSHM_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "pdshm.h"
#include "base/layout.h"
#include "base/crashpoint.h"
#include "base/cpu.h"

#define PDSHM_NOSLOT UINT32_MAX

/* Marks the optimistic side of a seqlock: it reads memory that a writer may
 * be changing (or that was freed and reused), then throws the result away if
 * the sequence moved.  ThreadSanitizer cannot model that; the writer side
 * stays instrumented. */
#define PDSHM_SEQLOCK_READ __attribute__((no_sanitize("thread")))

/* A lane as this process sees it: a process-local busy flag over one shared lane. */
struct pdshm_lane_ctx {
  _Atomic int busy;            /* one thread at a time uses the lane (lane.c)  */
  struct pdshm_lane *rec;      /* in the segment                               */
  uint32_t index;
  uint16_t tag;                /* owner tag its journals mark blocks with:     */
                               /* our slot+1, or a dead slot's for its reaper  */
  bool direct;                 /* a reaper's: frees go straight to the heap    */
  uint64_t id_next, id_end;    /* ids taken from hdr->id_counter, not yet used */
};

/* Thread-local variables that every call touches use the initial-exec
 * model: an %fs-relative access instead of a call to __tls_get_addr (which a
 * shared library's thread-locals otherwise cost, over a hundred instructions
 * per variable lock and unlock).
 *
 * The catch: once a library has one initial-exec variable, glibc places its
 * WHOLE TLS segment in the static TLS block, and a library loaded by dlopen()
 * (Python's ctypes, torch, any plugin host) gets only the surplus glibc
 * reserves for that: 512 bytes by default (glibc.rtld.optional_static_tls),
 * shared by every such library of the process.  So the library has no
 * thread-local of any other model, and its TLS segment stays within
 * PDSHM_TLS_BUDGET bytes (tests/test_load checks the built libpdshm.so):
 * today 48 bytes, the hot words of errors.c, attach_list.c, lane.c, varlock.c and
 * thread.c.  Anything larger lives in the thread's pdshm_thread block. */
#define PDSHM_TLS_HOT _Thread_local __attribute__((tls_model("initial-exec")))
#define PDSHM_TLS_BUDGET 64

/* ---- thread.c ------------------------------------------------------------- */
#define PDSHM_ERROR_MAX 256 /* bytes of pdshm_last_error()'s detail           */
#define PDSHM_VL_HELD_MAX 256 /* variable locks one thread may hold            */

/* One variable lock this thread holds (varlock.c). */
struct pdshm_held_lock {
  const void *var;   /* the record (its address in this mapping)            */
  uint64_t gen;      /* its generation when locked: an erased variable's
                        record may come back as a new variable at the same
                        address, which this hold is not on                 */
  uint64_t forkgen;  /* pdshm__forkgen when taken: a fork child's new
                        attachment may map the segment where its parent's
                        was, and must not take the parent's holds for its own */
  uint64_t attach_id;/* the attachment's id (pdshm_seg.id): one made after a
                        detach may map the segment at the same address, and
                        the detach let go of this hold already             */
  uint32_t count;    /* shared re-entries                                   */
  uint32_t ent;      /* its record in our slot's vl[] (layout.h)           */
  bool excl;
};

/* One segment lock a thread holds, as the lock-order check knows it. */
struct pdshm_lockorder_ent {
  const void *lock;        /* the struct pdshm_lock, in this mapping          */
  const void *base;        /* its segment's mapping: ranks compare within one */
  uint64_t forkgen;        /* pdshm__forkgen when taken                       */
  uint32_t index, rank;
};
#define PDSHM_LOCKORDER_MAX 64 /* locks tracked; more are taken unchecked     */
/* The segment locks a thread holds (lockorder.c). */
struct pdshm_lockorder {
  uint32_t n;              /* entries of held[] in use                        */
  uint32_t untracked;      /* locks held beyond PDSHM_LOCKORDER_MAX           */
  struct pdshm_lockorder_ent held[PDSHM_LOCKORDER_MAX];
};

/* What a thread keeps that is too big for the static TLS block: private
 * memory (malloc), made at the thread's first need, freed when it exits. */
struct pdshm_thread {
  char error[PDSHM_ERROR_MAX];                     /* errors.c               */
  struct pdshm_held_lock held[PDSHM_VL_HELD_MAX];  /* varlock.c              */
#ifdef PDSHM_DEBUG
  struct pdshm_lockorder order;                    /* lockorder.c            */
#endif
};

/* Called with a thread's block as the thread exits, before the block goes
 * (varlock.c sets it: the variable locks the thread still holds are let
 * go); NULL until then. */
extern void (*_Atomic pdshm__thread_exit_hook)(struct pdshm_thread *t);
/* This thread's block, or NULL before its first pdshm__thread() call. */
extern PDSHM_TLS_HOT struct pdshm_thread *pdshm__self;
/* Makes this thread's block: the slow path of pdshm__thread. */
struct pdshm_thread *pdshm__thread_make(void);
/* This thread's block, made if need be; NULL when out of memory. */
static inline struct pdshm_thread *pdshm__thread(void) {
  return pdshm__self ? pdshm__self : pdshm__thread_make();
}

/* This process's attachment (private memory). */
struct pdshm_seg {
  uint8_t *base;               /* the mapping                                  */
  struct pdshm_hdr *hdr;       /* == base                                      */
  size_t size;                 /* bytes mapped (the header's max_size): only   */
                               /* those below pdshm__seg_end may be touched    */
  _Atomic uint64_t end;        /* the largest arena_end seen inside the file   */
                               /* (pdshm__seg_end); only grows                 */
  bool mapped;                 /* [base, base+size) maps the file here: false  */
                               /* in a fork child that could not map it again  */
  int fd;                      /* the segment file; owns our slot's OFD lock   */
                               /* (in a fork child: its own, lockless one)     */
  uint64_t dev, ino;           /* the file's st_dev, st_ino at attach: which   */
                               /* attachments share a segment (fork, pins)     */
  unsigned flags;              /* PDSHM_RDONLY, PDSHM_SHARED_USERS             */
  uint32_t slot;               /* our slot, PDSHM_NOSLOT when read-only        */
  uint16_t owner_tag;          /* slot + 1, what our blocks carry in `owner`   */
  uint64_t forkgen;            /* pdshm__forkgen at attach                     */
  uint64_t id;                 /* this process's count of attachments made so  */
                               /* far, at this one's: never reused            */
  uint32_t pid;                /* getpid() at attach (a syscall: kept here)    */
  pthread_mutex_t reap_mu;     /* one reaper per attachment (OFD locks are     */
                               /* per descriptor, not per thread)              */
  _Atomic bool daemon;         /* holds the daemon claim (daemon.c)            */
  struct pdshm_lane_ctx lanes[PDSHM_LANES];
  struct pdshm_group *groups;  /* memberships to leave at detach; reap_mu     */
  struct pdshm_seg *next;      /* the process's list of attachments (fork)     */
  char name[PDSHM_SEG_NAME_MAX + 1];
};

/* Process-private memory comes from the process's malloc, whichever that is:
 * the library brings no allocator of its own (loaded by dlopen() into a
 * running process, an allocator that exports malloc/free would mix two heaps;
 * programs that want jemalloc link it themselves). */
static inline void *pdshm__zalloc(size_t n) { return calloc(1, n ? n : 1); }
static inline void pdshm__xfree(void *p) { free(p); }

static inline struct pdshm_slot *pdshm__slot(const pdshm_seg *seg, uint32_t i) {
  return PDSHM_AT(seg->base, seg->hdr->slots_off, struct pdshm_slot) + i;
}
static inline struct pdshm_lock *pdshm__lockent(const pdshm_seg *seg, uint32_t i) {
  return PDSHM_AT(seg->base, seg->hdr->locks_off, struct pdshm_lock) + i;
}
/* attach_size.c: the slow path of pdshm__seg_end: arena_end read as `e` is past
 * what this process has seen the file hold. */
uint64_t pdshm__seg_end_slow(const pdshm_seg *seg, uint64_t e);

/* The segment's current size, arena_end (layout.h invariant 2), as far as
 * bytes may be touched: read once (acquire: a growth's new block header is
 * seen with it) and, when it exceeds every value seen before, checked
 * against the file's real size and the mapping (one fstat).  A value past
 * either is damage: the last good one is answered instead, so that no bound
 * drawn from it leads outside the file (pdshm_check reports it).  Every
 * hostile-input bound reads it once per check. */
static inline uint64_t pdshm__seg_end(const pdshm_seg *seg) {
  uint64_t e = __atomic_load_n(&seg->hdr->arena_end, __ATOMIC_ACQUIRE);
  if (__builtin_expect(e <= atomic_load_explicit(&seg->end, memory_order_relaxed), 1)) return e;
  return pdshm__seg_end_slow(seg, e);
}

/* The size this process has seen the file hold: a size once published,
 * inside the file, perhaps behind a growth since (or, after damage that
 * lowered arena_end, past it: still inside the file); a hint for sizing, and
 * the first bound the hot checks try (pdshm__seg_holds).  One private
 * load. */
static inline uint64_t pdshm__seg_known(const pdshm_seg *seg) {
  return atomic_load_explicit(&seg->end, memory_order_relaxed);
}

/* Whether [off, off + bytes) lies inside the segment as far as the file
 * holds it: below the size this process knows first, below the published
 * one (pdshm__seg_end) only when that is not enough, so that a hot check
 * costs one private load.  Walks and growth use pdshm__seg_end itself. */
bool pdshm__seg_holds_slow(const pdshm_seg *seg, uint64_t off, uint64_t bytes)
    __attribute__((cold));
static inline bool pdshm__seg_holds(const pdshm_seg *seg, uint64_t off, uint64_t bytes) {
  uint64_t end = pdshm__seg_known(seg);
  if (__builtin_expect(off <= end && end - off >= bytes, 1)) return true;
  return pdshm__seg_holds_slow(seg, off, bytes);
}

/* Walks trust the arena bounds only as far as the file goes: a header
 * scribbled after attach must not send them outside it.  end is
 * pdshm__seg_end, read once by the caller. */
static inline bool pdshm__arena_sane(const pdshm_seg *seg, uint64_t end) {
  const struct pdshm_hdr *h = seg->hdr;
  return h->arena_off >= sizeof *h && h->arena_off % PDSHM_ALIGN == 0 && h->arena_off < end;
}

static inline struct pdshm_blk *pdshm__blk(const pdshm_seg *seg, pdshm_off_t payload) {
  return PDSHM_AT(seg->base, payload - PDSHM_BLK_HDR, struct pdshm_blk);
}

/* ---- chain.c: the one walk of the block chain ------------------------------ */
/* Called for each block of the arena, in chain order (chain.c); a nonzero
 * return stops the walk and is returned by it.  b is the block at `at` and
 * word its header word as the walk read it. */
struct pdshm_walker {
  void (*reset)(void *arg); /* before the walk (and before each retry of    */
                            /* pdshm__walk_blocks); may be NULL             */
  int (*visit)(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t word);
  void *arg;
};
/* Walks the chain from arena_off to arena_end once: 0, what visit returned,
 * or EBADSEG (pdshm_last_error() says where) at damaged arena bounds or a
 * block whose size does not fit; *broke (may be NULL) is then that block's
 * offset, else 0.  The caller holds the heap lock, or copes with a chain
 * that changes under it (pdshm__walk_blocks retries). */
int pdshm__chain_walk(const pdshm_seg *seg, const struct pdshm_walker *w, pdshm_off_t *broke);

/* ---- errors.c ------------------------------------------------------------- */
/* Records the detail pdshm_last_error() returns, and returns err. */
int pdshm__fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether, and how, this thread's last call failed (errors.c; 0: it did
 * not).  Every entry point clears it first, inline: it is on every path. */
extern PDSHM_TLS_HOT unsigned char pdshm__errors_state;
static inline void pdshm__fail_clear(void) { pdshm__errors_state = 0; }

/* ---- clock.c -------------------------------------------------------------- */
/* The time on `clock` (CLOCK_MONOTONIC, CLOCK_REALTIME), in nanoseconds. */
uint64_t pdshm__now_ns(int clock);

/* ---- attach_list.c: this process's attachments -------------------------------- */
extern _Atomic uint64_t pdshm__forkgen; /* bumped in every fork child           */
/* Registers the fork handlers; once per process, before its first segment. */
void pdshm__seg_list_atfork(void);
void pdshm__seg_list_add(pdshm_seg *seg);    /* at the end of create, attach  */
void pdshm__seg_list_remove(pdshm_seg *seg); /* at the start of detach        */
/* Calls fn(seg, arg) with this process's attachment of that id, under the
 * list's mutex so that no detach frees it meanwhile; false, calling
 * nothing, when it is detached (or was made before a fork). */
bool pdshm__seg_list_with(uint64_t id, void (*fn)(pdshm_seg *seg, void *arg), void *arg);
/* The attachment a pointer is in, looked up: attach_list.h (inline). */
#include "attach/attach_list.h"

/* ---- attach_state.c ----------------------------------------------------------- */
/* The checks every entry point makes: attach_state.h (inline). */
#include "attach/attach_state.h"

/* ---- attach_inherit.c --------------------------------------------------------- */
/* In a fork child (atfork handler): swaps the inherited descriptor for one of
 * the child's own and maps the range again, or leaves it unmapped. */
void pdshm__seg_inherit(pdshm_seg *seg);

/* ---- segment.c ----------------------------------------------------------------- */
/* A hash of the layout's sizes and offsets, kept in the header (attach
 * refuses a segment whose fingerprint differs). */
uint64_t pdshm__layout_fingerprint(void);

/* ---- shmfs.c -------------------------------------------------------------- */
/* Bytes of the shared-memory file system of fd (of /dev/shm when fd < 0):
 * 0, or -errno when it cannot be asked. */
int pdshm__shmfs_space(int fd, uint64_t *total, uint64_t *avail);
/* ENOSPC, with the message every part of pdshm gives for a full /dev/shm:
 * what was wanted, what is free of how much, and --shm-size. */
int pdshm__shmfs_full(int fd, uint64_t wanted);
/* The most a segment grows to without a max_size: /dev/shm's size, at most
 * PDSHM_SIZE_MAX. */
uint64_t pdshm__shmfs_max_size(void);

/* ---- tensor_pins.c ---------------------------------------------------------------- */
/* Detach: drops every pin the attachment holds (when it still may: not in a
 * fork child, not read-only) and frees their private handles. */
void pdshm__pin_drop_all(pdshm_seg *seg);
/* pdshm_tensor_unpin keeping the error detail of an earlier failure of the
 * same call (a collective unpins last, whatever its result). */
int pdshm__tensor_unpin(pdshm_pin *p);


/* ---- futex.c --------------------------------------------------------------- */
/* Sleeps while *word == expect, at most slice_ns (< 0: no limit), counted in
 * *waiters (futex.c, invariant 1).  0 when woken or the word differs (look
 * again), PDSHM_ETIMEDOUT when the slice ran out. */
int pdshm__futex_wait(_Atomic uint32_t *word, _Atomic uint32_t *waiters, uint32_t expect,
                      int64_t slice_ns);
/* Wakes every waiter of word, with no system call when *waiters is 0.  Call
 * it after changing the word. */
void pdshm__futex_wake(_Atomic uint32_t *word, _Atomic uint32_t *waiters);
/* The same after the caller changed the word by a sequentially consistent
 * read-modify-write, which orders it before the count's load (invariant 1)
 * without a fence. */
void pdshm__futex_wake_after_rmw(_Atomic uint32_t *word, _Atomic uint32_t *waiters);
/* The futex word (low 32 bits) of a little-endian 64-bit word: of a
 * version, of a variable's lock word, of a group's state. */
static inline _Atomic uint32_t *pdshm__futex_low(_Atomic uint64_t *w64) {
  _Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "futex words are the low halves");
  return (_Atomic uint32_t *)(void *)w64;
}
/* A word with a contended bit of its own (futex.c, invariant 4): sleeps up
 * to slice_ns (>= 0) while it is `expect`, as one of the waiters of class
 * `bits`; 0 when woken or it differs, PDSHM_ETIMEDOUT after the slice. */
int pdshm__futex_wait_bits(_Atomic uint32_t *word, uint32_t expect, uint32_t bits,
                           int64_t slice_ns);
/* Wakes up to n waiters of the classes in `bits`; returns how many woke. */
int pdshm__futex_wake_bits(_Atomic uint32_t *word, uint32_t bits, int n);

/* ---- group.c ---------------------------------------------------------------- */
/* Detach: leaves every group of the attachment (when it still may) and
 * frees the handles. */
void pdshm__group_leave_all(pdshm_seg *seg);
/* Acting as dead slot `slot` through lane ln: its memberships marked dead,
 * their rounds broken, empty groups freed (group.c).  0 once no live member
 * writes a collective into its buffers any more, so that its pins may go;
 * PDSHM_ETIMEDOUT when one still does at `deadline` (CLOCK_MONOTONIC ns: a
 * stopped process), the slot then to be left to the next reaper. */
int pdshm__group_reap_slot(pdshm_seg *seg, uint32_t slot, struct pdshm_lane_ctx *ln,
                           uint64_t deadline);

/* ---- daemon.c ------------------------------------------------------------- */
/* Gives up the daemon claim if this attachment holds it (detach). */
void pdshm__daemon_drop(pdshm_seg *seg);

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
void pdshm__unlock(pdshm_seg *seg, uint32_t i);
/* For the inspector, without taking it: 1 when lock i is held right now, 0
 * when not, -1 when this C library does not let us tell. */
int pdshm__lock_held_hint(const pdshm_seg *seg, uint32_t i);
/* Likewise, the thread id of lock i's holder: 0 when nobody holds it or
 * its holder died (the kernel let go of the robust mutex for it), -1 when
 * this C library does not let us tell. */
int pdshm__lock_holder_hint(const pdshm_seg *seg, uint32_t i);
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

/* ---- journal.c ------------------------------------------------------------ */
/* One mutation under lock `lock`, on the caller's lane (see layout.h). */
int pdshm__j_begin(pdshm_seg *seg, struct pdshm_lane_ctx *ln, uint32_t lock, uint32_t op);
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

/* ---- lane.c ---------------------------------------------------------------- */
/* Which lane a thread mutates through: lane.h (its common path inline). */
#include "attach/lane.h"

/* ---- proc.c ---------------------------------------------------------------- */
/* Slot i's OFD lock: 1 when we now hold it, 0 when somebody else does,
 * negative on error. */
int pdshm__slot_try_claim(pdshm_seg *seg, uint32_t i);
void pdshm__slot_unclaim(pdshm_seg *seg, uint32_t i);
/* Is slot i held by a live attachment?  Never true for our own slot's index
 * unless it is ours.  -1 when it cannot tell (I/O error). */
int pdshm__slot_alive(const pdshm_seg *seg, uint32_t i);
/* Slot i, whose OFD lock we hold and which is FREE, becomes our LIVE slot. */
void pdshm__slot_take(pdshm_seg *seg, uint32_t i);
/* Our slot, its holds released, becomes FREE (detach). */
void pdshm__slot_give_up(pdshm_seg *seg);
/* What reaps the dead slots (reap.c registers its reaper, once per process:
 * segment.c). */
typedef int (*pdshm_slot_reaper_fn)(pdshm_seg *seg, unsigned *reaped);
void pdshm__slot_set_reaper(pdshm_slot_reaper_fn fn);
/* For a layer below the reaper that finds a holder dead: reaps every dead
 * slot through the registered reaper, which gives back each one's holds even
 * when it must leave the slot itself to a later reaper (reap.c, invariant
 * 1).  0, or what the reaper returned. */
int pdshm__slot_reap_dead(pdshm_seg *seg);

/* ---- reap.c: the reaper, above the model ------------------------------------ */
/* Attach: claims a slot, reaping the dead ones met on the way, then reaps
 * every other dead slot (leaving those a stopped member holds up, as
 * pdshm__reap_dead does).  0, PDSHM_EUSERS, or the last slot's error when
 * none could be taken. */
int pdshm__reap_claim_own(pdshm_seg *seg);
/* Detach: releases our slot's holds, flushes its caches, gives it up. */
int pdshm__reap_release_own(pdshm_seg *seg);
/* Reaps every dead slot but ours; *reaped (may be NULL) counts them.  A slot
 * whose groups' live members still write into its buffers after a while (a
 * stopped process) is left to the next reaper, its variable locks given
 * back but not its blocks: PDSHM_ETIMEDOUT, once the other slots are
 * reaped. */
int pdshm__reap_dead(pdshm_seg *seg, unsigned *reaped);
/* Registers the heap's reclaim and the slots' reaper; once per process
 * (segment.c). */
void pdshm__reap_init_process(void);

/* ---- heap.c ---------------------------------------------------------------- */
/* Lays out the arena as FREE blocks (create only). */
void pdshm__heap_init(pdshm_seg *seg);
/* What an allocation that finds no block calls before its last try, to have
 * blocks given back (reap.c registers one that frees the caches of dead
 * slots, once per process: segment.c). */
typedef void (*pdshm_heap_reclaim_fn)(pdshm_seg *seg);
void pdshm__heap_set_reclaim(pdshm_heap_reclaim_fn fn);
/* A USED block of at least `bytes` payload bytes, 16-aligned, of `type`,
 * owned by our slot (owner = slot+1) until a journal publishes it.  The lane
 * must be held by the caller.  ENOMEM when nothing fits even after flushing
 * our caches and the registered reclaim; ENOSPC when /dev/shm cannot back
 * pages that had been given back; EOVERFLOW for absurd sizes. */
int pdshm__alloc(pdshm_seg *seg, struct pdshm_lane_ctx *ln, size_t bytes,
                 unsigned type, pdshm_off_t *payload);
/* Frees a USED block (any process's) into the lane's cache or the heap; with
 * ln == NULL (repairs, reapers) straight to the heap. */
void pdshm__free(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t payload);
/* Returns every block cached by the lane to the heap. */
void pdshm__cache_flush(pdshm_seg *seg, struct pdshm_lane_ctx *ln);
/* Usable payload bytes of a USED block. */
size_t pdshm__alloc_usable(const pdshm_seg *seg, pdshm_off_t payload);
/* True when payload is that of a USED block inside the arena with at least
 * `bytes` of payload (owned by anyone): what an offset read from the
 * segment must be before a block is freed, retired or read through it. */
bool pdshm__payload_used(const pdshm_seg *seg, pdshm_off_t payload, size_t bytes);
/* Heap lock held, its previous holder dead: recount the pins from the PIN
 * records (heap_pins.c), then rebuild the bins from the chain.  0, or EBADSEG
 * when the chain itself is broken. */
int pdshm__heap_rebuild(pdshm_seg *seg);
/* Registers the rebuild as the heap lock's repair (pdshm__lock_on_repair);
 * once per process (segment.c). */
void pdshm__heap_init_process(void);
/* Reaper: drops the pins of slot `slot`'s PIN records, frees the CACHED and
 * USED blocks it owns (owner == slot+1; a pinned TENSOR block among them is
 * orphaned instead) and clears its lane caches; blocks whose type bit is set in
 * keep_mask are left alone and returned in *kept (pdshm__zalloc'd payload offsets,
 * *nkept of them) for the caller to release first. */
int pdshm__heap_sweep_slot(pdshm_seg *seg, uint32_t slot, unsigned keep_mask,
                           pdshm_off_t **kept, size_t *nkept);

struct pdshm_heap_class_stats {
  uint32_t block_size;         /* bytes, header included                       */
  uint64_t used, cached;       /* blocks of that size USED, CACHED             */
};
struct pdshm_heap_stats {
  uint64_t arena, used, free, cached;  /* bytes; free includes cached          */
  uint64_t blocks_used, blocks_free, blocks_cached;
  uint64_t largest_free;               /* bytes of the largest FREE block      */
  uint64_t large_used, large_blocks;   /* above PDSHM_CLASS_MAX                */
  uint64_t by_type[PDSHM_T_COUNT];     /* USED bytes of each type              */
  uint64_t rebuilds, punched;
  uint64_t orphan_bytes, orphan_blocks; /* pinned buffers no variable holds    */
  struct pdshm_heap_class_stats cls[PDSHM_NCLASSES];
};
/* Walks the chain under the heap lock (a snapshot). */
int pdshm__heap_stats(pdshm_seg *seg, struct pdshm_heap_stats *st);
/* Walks the chain and the bins and verifies invariants 2-4 of layout.h; writes
 * one line per problem to report (may be NULL); returns the problem count, or
 * a negative code when it could not look. */
int pdshm__heap_check(pdshm_seg *seg, FILE *report);
/* One line of a check's report ("pdshm_check: <what><message>"); report may
 * be NULL. */
void pdshm__check_vsay(FILE *report, const char *what, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* The same with the heap lock already held (pdshm_check stops the world). */
int pdshm__heap_check_locked(pdshm_seg *seg, FILE *report);
/* Heap lock held: returns a USED block to the bins at once. */
void pdshm__heap_release_locked(pdshm_seg *seg, pdshm_off_t payload);

/* ---- heap_pins.c: pin counts and orphans (layout.h, invariant 6) ----------- */
/* Whether the TENSOR block at payload has pins (no lock: see heap_pins.c, 3). */
bool pdshm__tensor_pinned(const pdshm_seg *seg, pdshm_off_t payload);
/* Its pin count and orphan flag (0 / false unless a USED TENSOR block). */
uint64_t pdshm__tensor_pins(const pdshm_seg *seg, pdshm_off_t payload, bool *orphan);
/* Heap lock held: the buffer at payload is unhooked while pinned. */
void pdshm__pin_orphan_locked(pdshm_seg *seg, pdshm_off_t payload);
/* Heap lock held: PIN record rec (empty) now pins the buffer `target`.
 * EBADSEG when either is not what it should be. */
int pdshm__pin_take_locked(pdshm_seg *seg, pdshm_off_t rec, pdshm_off_t target);
/* Heap lock held: PIN record rec lets go of its buffer; returns that buffer
 * when it was an orphan and this was its last pin (the caller frees it),
 * else 0. */
pdshm_off_t pdshm__pin_drop_locked(pdshm_seg *seg, pdshm_off_t rec);
/* Heap lock held: drops the pins of the PIN records slot tag-1 owns, marking
 * the orphans that lose their last pin FREE (a relink must follow). */
int pdshm__pin_sweep_slot_locked(pdshm_seg *seg, uint16_t tag);
/* Heap lock held, its holder dead: every pin count from the PIN records,
 * orphans left without a pin marked FREE (a relink must follow). */
int pdshm__pin_recount_locked(pdshm_seg *seg);

/* Frees the CACHED blocks of slot `slot` (whose OFD lock the caller holds). */
int pdshm__heap_sweep_cached(pdshm_seg *seg, uint32_t slot);
/* The free-list bin of a FREE block of that size (heap.c; the checker). */
unsigned pdshm__bin_of(uint64_t size);
/* Size class helpers (exposed for the tests). */
unsigned pdshm__class_of(size_t block_bytes); /* PDSHM_NCLASSES when large */
uint32_t pdshm__class_size(unsigned cls);

#endif /* PDSHM_INTERNAL_H */
