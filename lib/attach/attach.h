/*
 * attach/attach.h - layer 1, this process's attachments: struct pdshm_seg,
 * the segment's size as every bound reads it (attach_size.c), the list a
 * fork child walks (attach_list.c, attach_inherit.c), the checks every
 * entry point makes (attach_state.c), and the lane a thread mutates
 * through (lane.c).  The common paths are inline here: the thread's last
 * attachment, the checks, the lane it used last; no call.
 */
#ifndef PDSHM_ATTACH_ATTACH_H
#define PDSHM_ATTACH_ATTACH_H

#include "base/base.h"

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

static inline struct pdshm_slot *pdshm__slot(const pdshm_seg *seg, uint32_t i) {
  return PDSHM_AT(seg->base, seg->hdr->slots_off, struct pdshm_slot) + i;
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

/* ---- attach_list.c: this process's attachments --------------------------- */
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
/* The attachment a pointer is in: from the thread's last answer when it
 * still holds, no lock, no call. */
/* Bumped whenever an attachment comes or goes, and in a fork child (after
 * pdshm__forkgen), so that the thread's last answer of pdshm__seg_of can
 * tell it may be stale. */
extern _Atomic uint64_t pdshm__seg_list_gen;
/* This thread's last answer of pdshm__seg_find: valid while the list's
 * generation is still gen (then seg is on the list, so not detached). */
struct pdshm_seg_last {
  pdshm_seg *seg;
  uint64_t gen;
};
extern PDSHM_TLS_HOT struct pdshm_seg_last pdshm__seg_last;
/* The attachment whose address range holds p, looked up in the list under
 * its mutex (and remembered in pdshm__seg_last), or NULL. */
pdshm_seg *pdshm__seg_find(const void *p);
/* The attachment whose address range holds p (a variable pointer), or NULL;
 * p is compared, never read.  The thread's last answer is tried first, its
 * generation before its handle is read: no lock, no call on the common path. */
static inline pdshm_seg *pdshm__seg_of(const void *p) {
  const uint8_t *b = p;
  const struct pdshm_seg_last *last = &pdshm__seg_last;
  if (__builtin_expect(
          last->seg &&
              last->gen == atomic_load_explicit(&pdshm__seg_list_gen, memory_order_acquire) &&
              b >= last->seg->base && b < last->seg->base + last->seg->size,
          1))
    return last->seg;
  return pdshm__seg_find(p);
}

/* ---- attach_state.c: the checks every entry point makes ------------------ */
/* Inline when the answer is yes. */
/* The handle is this process's: not NULL, not inherited across fork(). */
static inline bool pdshm__seg_ok(const pdshm_seg *seg) {
  return seg && seg->forkgen == atomic_load_explicit(&pdshm__forkgen, memory_order_relaxed);
}
/* ... and may mutate the segment: not read-only, not poisoned (the header
 * is read only once the handle is known to be mapped here). */
static inline bool pdshm__seg_ok_write(const pdshm_seg *seg) {
  return pdshm__seg_ok(seg) && !(seg->flags & PDSHM_RDONLY) &&
         !atomic_load_explicit(&seg->hdr->poisoned, memory_order_acquire);
}
/* Why pdshm__seg_ok, or pdshm__seg_ok_write, is false: the error, set. */
int pdshm__seg_unusable(const pdshm_seg *seg);
int pdshm__seg_unwritable(const pdshm_seg *seg);
/* 0, or PDSHM_EFORKED in a child of the process that attached, or EINVAL. */
static inline int pdshm__seg_usable(const pdshm_seg *seg) {
  return __builtin_expect(pdshm__seg_ok(seg), 1) ? 0 : pdshm__seg_unusable(seg);
}
/* 0, or EROFS / EFORKED / ENOTRECOVERABLE: may this handle mutate the segment? */
static inline int pdshm__seg_writable(const pdshm_seg *seg) {
  return __builtin_expect(pdshm__seg_ok_write(seg), 1) ? 0 : pdshm__seg_unwritable(seg);
}
/* The attachment holding variable pointer p, checked as pdshm__seg_ok_write
 * (writable) or pdshm__seg_ok asks, with the error of each way to fail:
 * NULL p, in no attachment, the check's.  NULL with *rc set, else *rc = 0.
 * The slow path of pdshm__var_seg and pdshm__var_attached (model.h). */
pdshm_seg *pdshm__seg_of_checked(const void *p, int *rc, bool writable);

/* ---- attach_inherit.c ---------------------------------------------------- */
/* In a fork child (atfork handler): swaps the inherited descriptor for one of
 * the child's own and maps the range again, or leaves it unmapped. */
void pdshm__seg_inherit(pdshm_seg *seg);

/* ---- lane.c: the lane a thread mutates through --------------------------- */
/* A thread takes the lane it used last with one compare-and-swap, no
 * call; lane.c looks further when that lane is busy or the thread has
 * none yet. */
/* The lane this thread used last, ~0u before its first (lane.c). */
extern PDSHM_TLS_HOT unsigned pdshm__lane_hint;

/* Takes ln if no thread of ours uses it. */
static inline bool pdshm__lane_try(struct pdshm_lane_ctx *ln) {
  int idle = 0;
  return atomic_load_explicit(&ln->busy, memory_order_relaxed) == 0 &&
         atomic_compare_exchange_strong_explicit(&ln->busy, &idle, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}

/* The rest of pdshm__lane_get: the other lanes, spinning, then yielding. */
struct pdshm_lane_ctx *pdshm__lane_get_slow(pdshm_seg *seg);

/* A lane of seg for this thread, held until pdshm__lane_put. */
static inline struct pdshm_lane_ctx *pdshm__lane_get(pdshm_seg *seg) {
  unsigned h = pdshm__lane_hint;
  if (__builtin_expect(h < PDSHM_LANES, 1) && pdshm__lane_try(&seg->lanes[h]))
    return &seg->lanes[h];
  return pdshm__lane_get_slow(seg);
}

static inline void pdshm__lane_put(struct pdshm_lane_ctx *ln) {
  atomic_store_explicit(&ln->busy, 0, memory_order_release);
}

#endif /* PDSHM_ATTACH_ATTACH_H */
