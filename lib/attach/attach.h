/*
 * attach/attach.h - layer 1, this process's attachments: struct pdshm_seg,
 * the segment's size as every bound reads it (attach_size.c), the list a
 * fork child walks (attach_list.c, attach_inherit.c), the checks every
 * entry point makes (attach_state.c), and the lane a thread mutates
 * through (lane.c).  The common paths are inline (attach_list.h,
 * attach_state.h, lane.h, which only this header includes): the thread's
 * last attachment, the checks, the lane it used last; no call.
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
#include "attach/attach_list.h"

/* ---- attach_state.c: the checks every entry point makes ------------------ */
/* Inline when the answer is yes: attach_state.h. */
#include "attach/attach_state.h"

/* ---- attach_inherit.c ---------------------------------------------------- */
/* In a fork child (atfork handler): swaps the inherited descriptor for one of
 * the child's own and maps the range again, or leaves it unmapped. */
void pdshm__seg_inherit(pdshm_seg *seg);

/* ---- lane.c: the lane a thread mutates through --------------------------- */
/* Its common path inline: lane.h. */
#include "attach/lane.h"

#endif /* PDSHM_ATTACH_ATTACH_H */
