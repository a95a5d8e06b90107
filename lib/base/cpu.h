/*
 * cpu.h - the processor hints of spin waits and the one 16-byte atomic, for
 * every architecture the library builds on.
 */
#ifndef PDSHM_CPU_H
#define PDSHM_CPU_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__SANITIZE_THREAD__)
#define PDSHM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PDSHM_TSAN 1
#endif
#endif

/* Tells the processor that this thread is spinning on a word another one
 * will change: x86's PAUSE, Arm's YIELD.  Elsewhere only a compiler
 * barrier, which keeps the loop re-reading memory. */
static inline void pdshm__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  __asm__ __volatile__("" ::: "memory");
#endif
}

/* One compare-and-swap of the 16-byte aligned pair of 64-bit words at pair
 * (*lo at the lower address, *hi after it): when both are what *lo and *hi say, they become
 * new_lo and new_hi and true is returned; else *lo and *hi get what they are
 * and false is returned.  A full barrier either way.  x86-64's CMPXCHG16B is
 * written out, since compilers call a library for it unless every build
 * passes -mcx16; a ThreadSanitizer build takes the builtin, which it sees as
 * an atomic; Arm's builtin is the library's own exclusive-pair loop or LSE's
 * CASP, chosen at run time by libgcc. */
static inline bool pdshm__cas_pair(void *pair, uint64_t *lo, uint64_t *hi,
                                   uint64_t new_lo, uint64_t new_hi) {
#if defined(__x86_64__) && !defined(PDSHM_TSAN)
  bool ok;
  __asm__ __volatile__("lock cmpxchg16b %1"
                       : "=@ccz"(ok), "+m"(*(volatile unsigned __int128 *)pair),
                         "+a"(*lo), "+d"(*hi)
                       : "b"(new_lo), "c"(new_hi)
                       : "memory");
  return ok;
#else
  unsigned __int128 want = (unsigned __int128)*hi << 64 | *lo,
                    next = (unsigned __int128)new_hi << 64 | new_lo,
                    was = __sync_val_compare_and_swap((unsigned __int128 *)pair, want, next);
  *lo = (uint64_t)was;
  *hi = (uint64_t)(was >> 64);
  return was == want;
#endif
}

#endif /* PDSHM_CPU_H */
