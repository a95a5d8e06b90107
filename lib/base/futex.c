/*
 * futex.c - waiting on a 32-bit word of the shared mapping, and waking.
 *
 * Owns: the futex calls of the library (non-private futexes: the word is in
 * a MAP_SHARED mapping that other processes map at other addresses) and the
 * waiter counts next to the words waited on.
 *
 * Invariants:
 *  1. A waiter adds itself to the word's waiter count before it reads the
 *     word and sleeps, and takes itself off after it woke; a waker changes
 *     the word before it reads the count.  Both sides are sequentially
 *     consistent, so a waker that reads 0 changed the word before any
 *     waiter read it: that waiter sees the new value and does not sleep.
 *     So a waker makes no system call while nobody waits.
 *  2. A waiter that dies leaves its count raised: the count only costs
 *     wakers a needless FUTEX_WAKE, it never loses one.
 *  3. Sleeps are bounded by the caller's slice, so that whoever waits on
 *     another process checks that process's liveness between slices.
 *  4. A word may instead carry a "contended" bit of its own (a variable's
 *     lock word, varlock.c): a waiter sets it by CAS before it sleeps on the
 *     value with the bit, and a waker's read-modify-write that clears it
 *     tells whether anyone may sleep, so it needs no second load and no
 *     fence.  Such waiters name a class (a bitset) so that a waker can wake
 *     one writer, or else every reader, rather than everyone.
 */
#define PDSHM_LAYER 1 /* base/ (lib/LAYERS) */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

static long futex_call(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts) {
  return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

int pdshm__futex_wait(_Atomic uint32_t *word, _Atomic uint32_t *waiters, uint32_t expect,
                      int64_t slice_ns) {
  atomic_fetch_add_explicit(waiters, 1, memory_order_seq_cst);
  int rc = 0;
  if (atomic_load_explicit(word, memory_order_seq_cst) == expect) {
    struct timespec ts = {.tv_sec = slice_ns / 1000000000, .tv_nsec = slice_ns % 1000000000};
    if (futex_call(word, FUTEX_WAIT, expect, slice_ns >= 0 ? &ts : NULL) < 0)
      rc = errno == ETIMEDOUT ? PDSHM_ETIMEDOUT : 0; /* EAGAIN, EINTR: look again */
  }
  atomic_fetch_sub_explicit(waiters, 1, memory_order_seq_cst);
  return rc;
}

void pdshm__futex_wake(_Atomic uint32_t *word, _Atomic uint32_t *waiters) {
  atomic_thread_fence(memory_order_seq_cst); /* invariant 1: the change first */
  pdshm__futex_wake_after_rmw(word, waiters);
}

void pdshm__futex_wake_after_rmw(_Atomic uint32_t *word, _Atomic uint32_t *waiters) {
  if (atomic_load_explicit(waiters, memory_order_seq_cst))
    futex_call(word, FUTEX_WAKE, INT_MAX, NULL);
}

int pdshm__futex_wait_bits(_Atomic uint32_t *word, uint32_t expect, uint32_t bits,
                           int64_t slice_ns) {
  struct timespec ts; /* FUTEX_WAIT_BITSET's timeout is a CLOCK_MONOTONIC instant */
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += slice_ns / 1000000000;
  ts.tv_nsec += slice_ns % 1000000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET, expect, &ts, NULL, bits) < 0)
    return errno == ETIMEDOUT ? PDSHM_ETIMEDOUT : 0; /* EAGAIN, EINTR: look again */
  return 0;
}

int pdshm__futex_wake_bits(_Atomic uint32_t *word, uint32_t bits, int n) {
  long woken = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_BITSET, n, NULL, NULL, bits);
  return woken > 0 ? (int)woken : 0;
}
