/*
 * base/base.h - layer 1, the utilities: what every other layer uses and
 * that needs no segment mapped.  Errors, each thread's private block, the
 * clock, futex waits, the size of /dev/shm, process-private memory; the
 * segment's structs (layout.h), the CPU's pause (cpu.h) and the crash
 * tests' marks (crashpoint.h).  Nothing here is installed.  Internal
 * non-static functions are named pdshm__<module>_<verb>.
 */
#ifndef PDSHM_BASE_BASE_H
#define PDSHM_BASE_BASE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "pdshm.h"
#include "base/layout.h"
#include "base/crashpoint.h"
#include "base/cpu.h"
#include "base/invariant.h"

#define PDSHM_NOSLOT UINT32_MAX


/* Marks the optimistic side of a seqlock: it reads memory that a writer may
 * be changing (or that was freed and reused), then throws the result away if
 * the sequence moved.  ThreadSanitizer cannot model that; the writer side
 * stays instrumented. */
#define PDSHM_SEQLOCK_READ __attribute__((no_sanitize("thread")))

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
 * today 48 bytes, the hot words of errors.c, attach_list.c, lane.c,
 * varlock_held.c and thread.c.  Anything larger lives in the thread's
 * pdshm_thread block. */
#define PDSHM_TLS_HOT _Thread_local __attribute__((tls_model("initial-exec")))
#define PDSHM_TLS_BUDGET 64

/* ---- thread.c ------------------------------------------------------------- */
#define PDSHM_ERROR_MAX 256 /* bytes of pdshm_last_error()'s detail           */
#define PDSHM_VL_HELD_MAX 256 /* variable locks one thread may hold            */

/* One variable lock this thread holds (varlock_held.c). */
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
  bool reserved;     /* that record is the thread's reserved one
                        (varlock_held.c)                                   */
};

/* The hold record (layout.h, struct pdshm_vl_hold) a thread keeps in its
 * slot of one attachment for the locks it takes there (varlock_held.c):
 * CLAIMED while it holds nothing through it, so that a take stores into it
 * and claims nothing. */
struct pdshm_vl_reserved {
  uint64_t attach_id;/* the attachment's id (pdshm_seg.id); 0: none.  Ids
                        are never reused in a process, nor by its fork
                        children, whose inherited handles take no locks    */
  uint32_t ent;      /* its index in the slot's vl[]                         */
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
  struct pdshm_held_lock held[PDSHM_VL_HELD_MAX];  /* varlock_held.c         */
  struct pdshm_vl_reserved vl_reserved;            /* varlock_held.c         */
#ifdef PDSHM_DEBUG
  struct pdshm_lockorder order;                    /* lockorder.c            */
#endif
};

/* Called with a thread's block as the thread exits, before the block goes
 * (varlock.c sets it: the variable locks the thread still holds are let
 * go, and its reserved hold record freed); NULL until then. */
extern void (*_Atomic pdshm__thread_exit_hook)(struct pdshm_thread *t);
/* This thread's block, or NULL before its first pdshm__thread() call. */
extern PDSHM_TLS_HOT struct pdshm_thread *pdshm__self;
/* Makes this thread's block: the slow path of pdshm__thread. */
struct pdshm_thread *pdshm__thread_make(void);
/* This thread's block, made if need be; NULL when out of memory. */
static inline struct pdshm_thread *pdshm__thread(void) {
  return pdshm__self ? pdshm__self : pdshm__thread_make();
}

/* Process-private memory comes from the process's malloc, whichever that is:
 * the library brings no allocator of its own (loaded by dlopen() into a
 * running process, an allocator that exports malloc/free would mix two heaps;
 * programs that want jemalloc link it themselves). */
static inline void *pdshm__zalloc(size_t n) { return calloc(1, n ? n : 1); }
static inline void pdshm__xfree(void *p) { free(p); }

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

/* ---- cpus.c --------------------------------------------------------------- */
/* Processors online (at least 1), asked of the system once per process. */
long pdshm__cpus_online(void);

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

#endif /* PDSHM_BASE_BASE_H */
