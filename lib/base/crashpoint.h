/*
 * crashpoint.h - named crash windows, for the crash tests only.
 *
 * PDSHM_CRASHPOINT("module.op.window") marks a point where a SIGKILL leaves a
 * state of its own (a journal half written, a block half split, a slot half
 * reaped).  The installed library compiles every mark to nothing.  The tests'
 * copy (lib/libpdshm_crash.la, built with -DPDSHM_CRASHPOINTS) counts the
 * hits and kills the process with SIGKILL at the hit it was told to
 * (pdshm__crash_arm, or PDSHM_CRASH in the environment: "K" for the K-th hit
 * of any point, "NAME:N" for the N-th hit of point NAME).  A test that must
 * act while a process sits in a window stops it there instead
 * (pdshm__crash_arm_signal with SIGSTOP), then continues it.
 */
#ifndef PDSHM_CRASHPOINT_H
#define PDSHM_CRASHPOINT_H

#include <stdint.h>

#ifdef PDSHM_CRASHPOINTS
void pdshm__crashpoint(const char *name);
#define PDSHM_CRASHPOINT(name) pdshm__crashpoint(name)

/* Starts counting hits from zero; the process dies at hit k (0: never), or,
 * when name is not NULL, at the k-th hit of that point. */
void pdshm__crash_arm(uint64_t k, const char *name);
/* The same, raising sig instead of SIGKILL (SIGSTOP: the process stops in
 * the window until it is sent SIGCONT). */
void pdshm__crash_arm_signal(uint64_t k, const char *name, int sig);
/* Hits since the last arm. */
uint64_t pdshm__crash_hits(void);
/* The point of hit i (1-based) since the last arm, NULL beyond the record. */
const char *pdshm__crash_name(uint64_t i);
#else
#define PDSHM_CRASHPOINT(name) ((void)0)
#endif

#endif /* PDSHM_CRASHPOINT_H */
