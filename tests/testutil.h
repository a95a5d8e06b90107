/* testutil.h - helpers shared by the Check suites. */
#ifndef PDSHM_TESTUTIL_H
#define PDSHM_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <sys/types.h>

#include "internal.h"

/* A segment name of its own for each test: "t-<tag>-<pid>-<n>". */
const char *tu_name(const char *tag);
/* pdshm_create with `size` bytes (0: 8 MiB) and `procs` slots (0: default);
 * registers the name so tu_cleanup() unlinks it.  Fails the test on error. */
pdshm_seg *tu_create(const char *tag, size_t size, unsigned procs);
/* The same under a given name (e.g. one kept from tu_name). */
pdshm_seg *tu_create_as(const char *name, size_t size, unsigned procs);
pdshm_seg *tu_attach(const char *name);
/* Unlinks every segment this process made through tu_create. */
void tu_cleanup(void);
/* The file behind a segment name: "/dev/shm/pdshm.NAME". */
const char *tu_path(const char *name);
/* Forks a child that runs fn(arg) and _exit()s with its return value. */
pid_t tu_fork(int (*fn)(void *), void *arg);
/* Waits for pid; returns its exit status, or 128+signal when killed. */
int tu_wait(pid_t pid);
/* A suite runner: fork mode, per-case timeout (seconds), returns failures. */
int tu_run(Suite *s);

#endif
