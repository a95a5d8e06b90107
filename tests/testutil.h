/* testutil.h - helpers shared by the Check suites. */
#ifndef PDSHM_TESTUTIL_H
#define PDSHM_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lifecycle/lifecycle.h"

/* A segment name of its own for each test: "t-<tag>-<pid>-<n>". */
const char *tu_name(const char *tag);
/* pdshm_create of a fixed segment of `size` bytes (0: 8 MiB; max_size ==
 * size: it never grows) and `procs` slots (0: default); registers the name
 * so tu_cleanup() unlinks it.  Fails the test on error.  A growing segment:
 * tu_create_opts with a max_size. */
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
/* Waits (up to 5 s) until seg sees at least n dead slots.  The kernel drops a
 * dead process's OFD lock when its last file reference goes, which can be a
 * moment after waitpid() has returned. */
void tu_await_dead(pdshm_seg *seg, unsigned n);
/* A test case added to s, with a checked fixture and a timeout (seconds). */
TCase *tu_tcase(Suite *s, const char *name, int timeout, void (*setup)(void),
                void (*teardown)(void));
/* A suite runner: fork mode, per-case timeout (seconds), returns failures.
 * Ends with tu_sweep_dead(). */
int tu_run(Suite *s);
/* Unlinks every tu_name() segment whose maker's pid no longer exists: a
 * failed assertion ends a fork-mode test before its checked teardown. */
void tu_sweep_dead(void);

/* pdshm_create with the caller's options under a given name (stale file
 * unlinked first, name registered for tu_cleanup).  Fails the test on error. */
pdshm_seg *tu_create_opts(const char *name, const pdshm_options *o);
/* Registers a name for tu_cleanup without creating it (a segment made by the
 * code under test, or a file a test plants under /dev/shm). */
void tu_track(const char *name);
/* Like tu_fork, but the child is killed (SIGKILL) when the forking thread
 * exits, so that helpers never outlive a failed test.  Don't use it for a
 * child that must outlive its parent. */
pid_t tu_spawn(int (*fn)(void *), void *arg);
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t tu_now_ns(void);

/* `size` zeroed bytes shared with the children a test forks after this
 * call (an anonymous shared mapping).  Fails the test on error. */
void *tu_shared(size_t size);
/* The used bytes of seg (pdshm_seg_stats).  Fails the test on error. */
uint64_t tu_used(pdshm_seg *seg);
/* The tensor buffers this process's slot of seg pins, as pdshm_procs counts
 * them.  Fails the test on error. */
uint64_t tu_my_pins(pdshm_seg *seg);
/* A float tensor named `name` in s (made when absent) of n elements,
 * data[i] = i + seed.  Fails the test on error. */
pdshm_var *tu_filled(pdshm_scope *s, const char *name, int64_t n, float seed);

/* How forked children report to the test through tu_shared memory: the
 * number of failures, and the reason of the latest. */
struct tu_report {
  _Atomic int fails;
  char why[256];
};
void tu_report_fail(struct tu_report *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* In a child: reports a failure and returns 1 (its exit status) from the
 * calling function. */
#define TU_FAIL_RETURN(rep, ...)         \
  do {                                   \
    tu_report_fail((rep), __VA_ARGS__);  \
    return 1;                            \
  } while (0)

#endif
