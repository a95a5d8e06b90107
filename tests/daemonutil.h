/* daemonutil.h - running the built pdshmd from a test, and trainers to kill. */
#ifndef PDSHM_DAEMONUTIL_H
#define PDSHM_DAEMONUTIL_H

#include <stdbool.h>
#include <sys/types.h>

#include "testutil.h"

/* Starts PDSHMD_PATH with argv (NULL-terminated, argv[0] excluded) in the
 * background, its stdout and stderr appended to log (a path; NULL: nothing).
 * A daemon that stays in the foreground is killed when the test ends. */
pid_t dm_start(const char *log, const char *const *argv);
/* Runs PDSHMD_PATH to its end; returns its exit status (128+signal when
 * killed); its stdout and stderr go to log.  Fails the test after 10 s. */
int dm_run(const char *log, const char *const *argv);
/* Waits (bounded) for pid to exit; returns its status as dm_run does. */
int dm_wait(pid_t pid, int timeout_ms);
/* Waits (up to 10 s) until the segment's daemon claim is held by pid. */
void dm_await_claim(pdshm_seg *seg, pid_t pid);
/* Waits (up to 10 s) until the daemon's heartbeat has moved twice since now:
 * it has read the process table at least once since this call. */
void dm_await_beats(pdshm_seg *seg);
/* A fresh log file name, removed by dm_cleanup; and whether it holds text. */
const char *dm_log(void);
bool dm_log_has(const char *log, const char *text);
/* Whether one line of it holds text and also `also` (NULL: anything). */
bool dm_log_line(const char *log, const char *text, const char *also);
/* Kills (SIGKILL) the daemons dm_start left running, removes the logs. */
void dm_cleanup(void);

/* What a trainer holds before it waits to be killed. */
enum {
  TR_ANON = 1,  /* an anonymous scope with TR_VARS variables of 4 KiB tensors */
  TR_XLOCK = 2, /* the exclusive lock of variable "params/X"                 */
  TR_SHOLD = 4, /* a shared hold on variable "params/S"                      */
};
#define TR_VARS 32
/* The named scope "params" with variables X and S, in seg. */
void tr_params(pdshm_seg *seg);
/* A process that attaches `name`, takes what `what` says, and waits
 * (pause()) until it is killed; returned once it holds everything. */
pid_t tr_start(const char *name, unsigned what);

#endif
