/*
 * invariant.h - PDSHM_ASSERT, the library's own invariants checked in debug
 * builds (invariant.c reports one that fails).  Included by base.h.
 */
#ifndef PDSHM_BASE_INVARIANT_H
#define PDSHM_BASE_INVARIANT_H

/* An invariant of the library's own, checked in debug builds
 * (--enable-debug) where that is cheap: a `*_locked` function's lock is held
 * by its caller, a block is of the type the code takes it for, a journal is
 * in the state its step needs.  One that fails is the library's bug: the
 * process says which and where, and aborts.  Other builds compile the
 * condition out (it is not evaluated). */
void pdshm__assert_fail(const char *cond, const char *file, int line, const char *func)
    __attribute__((noreturn, cold));
#ifdef PDSHM_DEBUG
#define PDSHM_ASSERT(cond)                                                                   \
  (__builtin_expect(!!(cond), 1) ? (void)0                                                   \
                                 : pdshm__assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define PDSHM_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

#endif /* PDSHM_BASE_INVARIANT_H */
