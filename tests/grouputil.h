/* grouputil.h - helpers of the group suites (test_group,
 * test_group_collectives, test_group_deaths): the segment fixture, the
 * board a test shares with its children, one round of any kind, and which
 * rank's share holds an element. */
#ifndef PDSHM_TEST_GROUPUTIL_H
#define PDSHM_TEST_GROUPUTIL_H

#include "testutil.h"

#define SEC 1000000000ll

/* The segment a test works on (16 MiB, 32 slots) and its root scope, for
 * the children it forks. */
extern char seg_name[PDSHM_SEG_NAME_MAX + 1];
extern pdshm_seg *seg;
extern pdshm_scope *root;

void setup(void);
void teardown(void);

/* Shared between the test and its children (mapped before the forks). */
struct board {
  _Atomic int64_t progress[8];   /* last round each rank passed           */
  _Atomic int dead_round[8];     /* round of a member's EOWNERDEAD        */
  _Atomic uint64_t dead_ns[8];   /* when it got it                        */
  _Atomic uint64_t kill_ns;      /* when the victim was killed            */
  _Atomic int go;                /* children proceed (barrier tests)      */
  struct tu_report rep;
};

/* Waits for pid; fails the test unless it exited 0, saying b's report (b
 * may be NULL). */
void wait_ok(pid_t pid, struct board *b);

/* The kinds of round collective() does (K_KINDS: how many). */
enum { K_BARRIER, K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_PRIVATE, K_KINDS };

/* A child's start: attaches to seg_name and makes, in a new local scope of
 * its root (*mine), a variable of n float32 (*v); 0, or the failing call's
 * error. */
int kid_f32_var(int64_t n, pdshm_seg **s, pdshm_scope **mine, pdshm_var **v);

/* Makes the process's staging variable of K_PRIVATE in s; each child calls
 * it before its first collective. */
int staging_new(pdshm_scope *s);

/* One collective of kind k (K_BARRIER: a barrier, v and op unused). */
int collective(int k, pdshm_group *g, pdshm_var *v, int op, int64_t timeout_ns);

/* The rank whose share holds element i of n (pdshm_group_share's rule). */
int owner(size_t i, size_t n, int size);

#endif
