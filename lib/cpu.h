/*
 * cpu.h - the processor hints of spin waits, for every architecture the
 * library builds on.
 */
#ifndef PDSHM_CPU_H
#define PDSHM_CPU_H

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

#endif /* PDSHM_CPU_H */
