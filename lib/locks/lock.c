/*
 * lock.c - robust process-shared locks with contention counters, and the
 * lock table's entries lent to scopes (a variable's lock is a word of its
 * own record: varlock.c).
 *
 * Owns: struct pdshm_lock (layout.h), the EOWNERDEAD -> repair ->
 * pthread_mutex_consistent protocol, and the segment's poisoned flag.
 *
 * Invariants:
 *  1. Every mutex is PTHREAD_PROCESS_SHARED and PTHREAD_MUTEX_ROBUST, is
 *     initialised once at create and never destroyed or re-initialised.
 *  2. A lock whose holder died is made consistent only after what it guards
 *     was repaired, by the repairs the layers that own the lock kinds
 *     registered (pdshm__lock_on_repair), step by step: the heap's bins
 *     rebuilt (heap lock; heap_sweep.c), then the dead holder's journal finished or
 *     rolled back (any lock; journal.c).  This file calls no layer above it:
 *     it knows them only by those function pointers, in process memory.  A
 *     repair that fails poisons the segment and leaves the mutex
 *     unrecoverable: every later taker gets ENOTRECOVERABLE instead of a
 *     guess.
 *  3. acquisitions, contended and wait_ns change only under the mutex.
 *     acquisitions is counted as the mutex is taken, before its holder
 *     changes anything (but a repair, under a holder named first): the
 *     inspector reads the counts, the mutex's word and the holder's slot to
 *     tell a walk that writers tore (introspect_walk.c).
 *  4. An entry's alloc word moves AVAILABLE -> slot+1 by CAS (claim), then to
 *     PUBLISHED by a journal under the guarded object's parent lock (or back
 *     to AVAILABLE by the claimer, abandoned: pdshm__lock_unclaim).  The object's death moves it back to
 *     slot+1 in the journal that retires the object, and only once that
 *     journal is over does the slot give it back (CAS slot+1 -> AVAILABLE).
 *     A journal is re-applied by whoever repairs it after its owner's death,
 *     possibly much later: had it stored AVAILABLE itself, a re-application
 *     could take back an entry a new object had claimed since.  A reaper
 *     returns the slot+1 entries of a dead slot after settling its journals.
 */
#define PDSHM_LAYER 2 /* locks/ (lib/LAYERS) */
#include "config.h"

#include <assert.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "locks/locks.h"

#ifndef PDSHM_DEBUG /* only debug builds check the order (lockorder.c) */
#define pdshm__lockorder_check(seg, i) ((void)(seg), (void)(i))
#define pdshm__lockorder_took(seg, i) ((void)(seg), (void)(i))
#define pdshm__lockorder_released(seg, i) ((void)(seg), (void)(i))
#endif

void pdshm__lock_init_table(pdshm_seg *seg) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  for (uint32_t i = 0; i < seg->hdr->max_locks; i++) {
    struct pdshm_lock *l = pdshm__lockent(seg, i);
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->mutex, &a);
  }
  pthread_mutexattr_destroy(&a);
  struct pdshm_lock *heap = pdshm__lockent(seg, PDSHM_LOCK_HEAP);
  heap->kind = PDSHM_LK_HEAP;
  heap->rank = pdshm__lock_rank(PDSHM_LK_HEAP, 0);
  atomic_store(&heap->alloc, PDSHM_LOCK_PUBLISHED);
  struct pdshm_lock *groups = pdshm__lockent(seg, PDSHM_LOCK_GROUPS);
  groups->kind = PDSHM_LK_GROUPS;
  groups->rank = pdshm__lock_rank(PDSHM_LK_GROUPS, 0);
  atomic_store(&groups->alloc, PDSHM_LOCK_PUBLISHED);
}

void pdshm__poison(pdshm_seg *seg, const char *why) {
  uint32_t expected = 0;
  atomic_compare_exchange_strong(&seg->hdr->poisoned, &expected, 1);
  pdshm__fail(PDSHM_ENOTRECOVERABLE, "segment \"%s\" poisoned: %s", seg->name, why);
}

/* ---- repairs, registered per lock kind (invariant 2) ----------------------- */

/* Written once per process, before its first segment (segment.c, under
 * pthread_once), and only read after. */
static pdshm_lock_repair_fn lock_repairs[PDSHM_LK_COUNT][PDSHM_REPAIR_STEPS];

void pdshm__lock_on_repair(unsigned kind, unsigned step, pdshm_lock_repair_fn fn) {
  assert(kind < PDSHM_LK_COUNT && step < PDSHM_REPAIR_STEPS);
  lock_repairs[kind][step] = fn;
}

/* The kind whose repairs lock i gets: a fixed entry's by its index, so that
 * a kind scribbled in the segment cannot run the heap's repair under another
 * lock; a lent entry's as recorded when it is a scope's (the one kind entries are lent for),
 * else NONE, which has the repairs registered for every kind (the
 * journal's). */
static unsigned lock_repair_kind(const pdshm_seg *seg, uint32_t i) {
  if (i == PDSHM_LOCK_HEAP) return PDSHM_LK_HEAP;
  if (i == PDSHM_LOCK_GROUPS) return PDSHM_LK_GROUPS;
  unsigned kind = pdshm__lockent(seg, i)->kind;
  return kind == PDSHM_LK_SCOPE ? kind : PDSHM_LK_NONE;
}

/* Repairs what lock i guards; 0 or a negative code. */
static int lock_repair(pdshm_seg *seg, uint32_t i) {
  const pdshm_lock_repair_fn *steps = lock_repairs[lock_repair_kind(seg, i)];
  for (unsigned s = 0; s < PDSHM_REPAIR_STEPS; s++) {
    int rc = steps[s] ? steps[s](seg, i) : 0;
    if (rc) return rc;
  }
  return 0;
}

static int lock_recover(pdshm_seg *seg, uint32_t i, struct pdshm_lock *l) {
  l->owner_died++;
  PDSHM_CRASHPOINT("lock.recover.begin");
  int rc = lock_repair(seg, i);
  if (rc) {
    pdshm__poison(seg, "repair after a holder's death failed");
    atomic_store_explicit(&l->unrecoverable, 1, memory_order_release);
    pthread_mutex_unlock(&l->mutex); /* without consistent: unrecoverable */
    return PDSHM_ENOTRECOVERABLE;
  }
  PDSHM_CRASHPOINT("lock.recover.repaired");
  pthread_mutex_consistent(&l->mutex);
  return 0;
}

/* The holder fields name the last holder and stay at release (the futex
 * word says whether the lock is held): stored only when the holder changes,
 * they leave the entry's second cache line clean while one process takes
 * the lock again and again. */
static void lock_note_slot(pdshm_seg *seg, struct pdshm_lock *l) {
  if (atomic_load_explicit(&l->holder_pid, memory_order_relaxed) != seg->pid)
    atomic_store_explicit(&l->holder_pid, seg->pid, memory_order_relaxed);
  if (atomic_load_explicit(&l->holder_slot, memory_order_relaxed) != seg->slot)
    atomic_store_explicit(&l->holder_slot, seg->slot, memory_order_relaxed);
}

static void lock_note_holder(pdshm_seg *seg, struct pdshm_lock *l) {
  l->acquisitions++;
  lock_note_slot(seg, l);
}

static int lock_result(pdshm_seg *seg, uint32_t i, struct pdshm_lock *l, int e) {
  if (e == EOWNERDEAD) {
    /* Named before the repair, which changes what the lock guards before
     * the acquisition is counted: an inspector sees a live holder at work
     * (introspect_walk.c), not the dead one. */
    lock_note_slot(seg, l);
    int rc = lock_recover(seg, i, l);
    if (rc) return rc;
  } else if (e == ENOTRECOVERABLE) {
    pdshm__poison(seg, "a lock is unrecoverable");
    return PDSHM_ENOTRECOVERABLE;
  } else if (e) {
    return -e;
  }
  lock_note_holder(seg, l);
  pdshm__lockorder_took(seg, i);
  return 0;
}

static int lock_gone(pdshm_seg *seg, const struct pdshm_lock *l) {
  if (!atomic_load_explicit(&l->unrecoverable, memory_order_acquire)) return 0;
  pdshm__poison(seg, "a lock is unrecoverable");
  return PDSHM_ENOTRECOVERABLE;
}

/* An index read from the segment (a scope's, a journal's) is checked: a
 * damaged one must not reach outside the table. */
static int lock_bad_index(const pdshm_seg *seg, uint32_t i) {
  return pdshm__fail(PDSHM_EBADSEG, "lock %u is no entry of the segment's %u (damaged)", i,
                     seg->hdr->max_locks);
}

/* pthread_mutex_timedlock counts on CLOCK_REALTIME: each wait aims at the
 * monotonic deadline from the wall clock's now, and a wall clock that jumped
 * makes it wait again for what is left. */
static int lock_wait_until(pthread_mutex_t *m, uint64_t deadline) {
  for (;;) {
    uint64_t now = pdshm__now_ns(CLOCK_MONOTONIC);
    if (now >= deadline) return ETIMEDOUT;
    uint64_t at = pdshm__now_ns(CLOCK_REALTIME) + (deadline - now);
    struct timespec ts = {.tv_sec = (time_t)(at / 1000000000u), .tv_nsec = (long)(at % 1000000000u)};
    int e = pthread_mutex_timedlock(m, &ts);
    if (e != ETIMEDOUT) return e;
  }
}

/* Takes lock i, waiting until deadline at most (UINT64_MAX: no limit).
 * Contention is a trylock that fails: an uncontended lock costs the one
 * atomic exchange it costs anyway, and only a waiter reads the clock. */
static inline int lock_take(pdshm_seg *seg, uint32_t i, uint64_t deadline) {
  if (i >= seg->hdr->max_locks) return lock_bad_index(seg, i);
  struct pdshm_lock *l = pdshm__lockent(seg, i);
  int rc = lock_gone(seg, l);
  if (rc) return rc;
  pdshm__lockorder_check(seg, i); /* whether it would wait this time or not */
  int e = pthread_mutex_trylock(&l->mutex);
  if (e != EBUSY) return lock_result(seg, i, l, e);
  uint64_t t0 = pdshm__now_ns(CLOCK_MONOTONIC);
  e = deadline == UINT64_MAX ? pthread_mutex_lock(&l->mutex) : lock_wait_until(&l->mutex, deadline);
  if (e == ETIMEDOUT)
    return pdshm__fail(PDSHM_ETIMEDOUT, "lock %u stayed held until the deadline (its holder "
                       "stopped?)", i);
  rc = lock_result(seg, i, l, e);
  if (!rc) {
    l->contended++;
    l->wait_ns += pdshm__now_ns(CLOCK_MONOTONIC) - t0;
  }
  return rc;
}

int pdshm__lock(pdshm_seg *seg, uint32_t i) { return lock_take(seg, i, UINT64_MAX); }

int pdshm__lock_until(pdshm_seg *seg, uint32_t i, uint64_t deadline) {
  return lock_take(seg, i, deadline);
}

int pdshm__trylock(pdshm_seg *seg, uint32_t i) {
  if (i >= seg->hdr->max_locks) return lock_bad_index(seg, i);
  struct pdshm_lock *l = pdshm__lockent(seg, i);
  int rc = lock_gone(seg, l);
  if (rc) return rc;
  int e = pthread_mutex_trylock(&l->mutex);
  if (e == EBUSY) return PDSHM_EBUSY;
  return lock_result(seg, i, l, e);
}

void pdshm__unlock(pdshm_seg *seg, uint32_t i) {
  if (i >= seg->hdr->max_locks) return; /* never taken: lock_bad_index */
  pdshm__lockorder_released(seg, i);
  pthread_mutex_unlock(&pdshm__lockent(seg, i)->mutex);
}

/* POSIX has no way to ask whether a mutex is held without taking it, and a
 * read-only attachment cannot take it: only glibc's futex word tells, read
 * here and nowhere else (configure checks that the field exists).  The word
 * is the holder's thread id, with flag bits above it; a robust holder's
 * death makes the kernel clear the id and set FUTEX_OWNER_DIED.  -1 when
 * this C library does not let us tell. */
static int64_t lock_word(const pdshm_seg *seg, uint32_t i) {
#ifdef HAVE_GLIBC_MUTEX_LOCK_WORD
  const pthread_mutex_t *m = &pdshm__lockent(seg, i)->mutex;
  return (uint32_t)__atomic_load_n(&m->__data.__lock, __ATOMIC_ACQUIRE);
#else
  (void)seg;
  (void)i;
  return -1;
#endif
}

int pdshm__lock_held_hint(const pdshm_seg *seg, uint32_t i) {
  int64_t w = lock_word(seg, i);
  return w < 0 ? -1 : w != 0;
}

int pdshm__lock_holder_hint(const pdshm_seg *seg, uint32_t i) {
  int64_t w = lock_word(seg, i);
  return w < 0 ? -1 : (int)(w & FUTEX_TID_MASK);
}

/* The holder's id is ours from the moment the lock is taken, a dead
 * holder's too (its repair runs under it). */
bool pdshm__lock_mine(const pdshm_seg *seg, uint32_t i) {
  if (i >= seg->hdr->max_locks) return false;
  int holder = pdshm__lock_holder_hint(seg, i);
  return holder < 0 || holder == (int)syscall(SYS_gettid);
}

/* ---- entries lent to objects ---------------------------------------------- */

/* Where this process starts looking for a free entry: spreads claimers. */
static _Atomic uint32_t lock_hint;

int pdshm__lock_claim(pdshm_seg *seg, unsigned kind, pdshm_off_t guards, uint32_t *out) {
  uint32_t n = seg->hdr->max_locks - PDSHM_LOCK_FIXED;
  uint32_t start = atomic_fetch_add_explicit(&lock_hint, 1, memory_order_relaxed);
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = PDSHM_LOCK_FIXED + (start + k) % n;
    struct pdshm_lock *l = pdshm__lockent(seg, i);
    uint64_t expected = PDSHM_LOCK_AVAILABLE;
    if (atomic_load_explicit(&l->alloc, memory_order_relaxed) != expected) continue;
    if (!atomic_compare_exchange_strong(&l->alloc, &expected, seg->owner_tag)) continue;
    PDSHM_CRASHPOINT("lock.claimed");
    l->kind = kind;
    l->rank = pdshm__lock_rank(kind, 0);
    l->guards = guards;
    atomic_store_explicit(&lock_hint, i, memory_order_relaxed);
    *out = i;
    return 0;
  }
  return pdshm__fail(PDSHM_ENOLCK, "all %u locks of the segment are in use (max_locks)",
                     seg->hdr->max_locks);
}

/* Entry i back to AVAILABLE if slot tag `tag` holds it (invariant 4). */
void pdshm__lock_return(pdshm_seg *seg, uint32_t i, uint16_t tag) {
  uint64_t expected = tag;
  atomic_compare_exchange_strong(&pdshm__lockent(seg, i)->alloc, &expected,
                                 PDSHM_LOCK_AVAILABLE);
}

void pdshm__lock_unclaim(pdshm_seg *seg, uint32_t i) { pdshm__lock_return(seg, i, seg->owner_tag); }

void pdshm__lock_sweep_slot(pdshm_seg *seg, uint32_t slot) {
  for (uint32_t i = PDSHM_LOCK_FIXED; i < seg->hdr->max_locks; i++)
    pdshm__lock_return(seg, i, (uint16_t)(slot + 1));
}
