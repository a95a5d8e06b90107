/* pdshm/limits.h - the limits on names, segment sizes, process slots and locks. */
#ifndef PDSHM_LIMITS_H
#define PDSHM_LIMITS_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Limits: each one is enforced with an error, never by truncation. ---- */
#define PDSHM_SEG_NAME_MAX   200          /* bytes of a segment NAME            */
#define PDSHM_NAME_MAX       255          /* bytes of a variable or scope name  */
#define PDSHM_SIZE_MIN       (1ull << 20) /* smallest segment                   */
#define PDSHM_SIZE_MAX       (1ull << 40) /* largest segment                    */
#define PDSHM_SIZE_DEFAULT   (4ull << 20) /* the least a segment made without a
                                             size starts at: it grows         */
#define PDSHM_SIZE_DEFAULT_MIN (4ull << 20) /* the same                         */
#define PDSHM_PROCS_DEFAULT  128u
#define PDSHM_PROCS_MAX      4096u        /* process slots of one segment        */
#define PDSHM_LOCKS_MIN      64u          /* robust locks of one segment         */
#define PDSHM_LOCKS_MAX      (1u << 20)

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_LIMITS_H */
