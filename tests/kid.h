/* kid.h - what test_proc and test_journal share: the test's segment
 * (g_name, g_seg, made by make()), small assertions, and helper processes
 * ("kids"): forked, attached on their own, reporting through a pipe. */
#ifndef PDSHM_TEST_KID_H
#define PDSHM_TEST_KID_H

#include "testutil.h"

extern char g_name[PDSHM_SEG_NAME_MAX + 1];
extern pdshm_seg *g_seg;

void setup(void);
void teardown(void);
void make(size_t size, unsigned procs, unsigned locks);
pdshm_stats stats(pdshm_seg *s);
unsigned reap(pdshm_seg *s);
uint32_t slot_state(uint32_t i);
struct pdshm_lock *lk(uint32_t i);
uint32_t claim(pdshm_seg *s);

/* ---- helper processes --------------------------------------------------------- */
/* A kid is a forked helper with a pipe each way.  Kids never use Check: they
 * report through the pipe and their exit status.  They attach on their own:
 * a fork child inherits no attachment. */
struct kid {
  pid_t pid;
  int up[2];   /* kid -> test */
  int down[2]; /* test -> kid */
  int (*fn)(struct kid *);
  uint64_t arg[4];
  pdshm_seg *seg; /* the kid's own attachment (in the kid) */
};

void kid_start(struct kid *k, int (*fn)(struct kid *));
/* In the kid. */
int kid_say(struct kid *k, uint64_t v);
int kid_hear(struct kid *k, uint64_t *v);
int kid_attach(struct kid *k);
/* In the test. */
uint64_t kid_recv_within(struct kid *k, int ms, const char *what);
uint64_t kid_recv(struct kid *k);
void kid_send(struct kid *k, uint64_t v);
void await_slots_dead(pid_t pid);
int kid_end(struct kid *k);
void kid_kill(struct kid *k);
/* A test case with the shared fixture and a timeout, added to s. */
TCase *kid_tcase(Suite *s, const char *name, int timeout);

#endif
