/*
 * varlock.h - the variable lock's word (varlock.c's header comment says what
 * each field means), for the lock itself and for its checker
 * (varlock_check.c).
 */
#ifndef PDSHM_VARLOCK_H
#define PDSHM_VARLOCK_H

/* Layer 6 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 6
#error "model/varlock.h is layer 6, above the file that includes it (lib/LAYERS)"
#endif

#define VL_OWNER 0x1fffull
#define VL_FROZEN (1ull << 13)
#define VL_READER (1ull << 14)
#define VL_READERS (0xffffull << 14)
#define VL_RSLEEP (1ull << 30)
#define VL_WSLEEP (1ull << 31)
#define VL_BUSY (VL_OWNER | VL_FROZEN) /* what blocks a shared take        */
#define VL_SLEEPERS (VL_RSLEEP | VL_WSLEEP)
#define VL_TAG (0xffffffffull << 32)

_Static_assert(PDSHM_PROCS_MAX < VL_OWNER, "an owner's slot+1 fits bits 0-12");

/* Invariant 5: w is the word of the variable whose tag is `tag`. */
static inline bool vl_ours(uint64_t w, uint64_t tag) { return (w & VL_TAG) == tag; }

#endif /* PDSHM_VARLOCK_H */
