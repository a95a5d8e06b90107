/* crashrun.h - what the crash suites (test_crash.c, test_crash_locks.c,
 * test_crash_pairs.c) share: a committed world, the operations a child runs
 * and dies in (crashops.c), and the running, reaping and comparing of those
 * deaths (crashrun.c).
 *
 * A fresh segment holds a committed world (named scopes, tensors, labels,
 * operator lists, variable locks, an anonymous scope this process holds); a
 * child attaches, prepares (not counted), runs an operation with the crash
 * points counting, and dies: at window k (die at the k-th hit), or after
 * the operation, having reported the points it passed.  After each death,
 * before anyone reaps, this process works beside the dead (the bystander);
 * then it reaps, requires pdshm_check to pass with an empty report, every
 * slot and lock to be free, and compares the model (crashsnap.h) with the
 * states the operation may leave.
 */
#ifndef PDSHM_TEST_CRASHRUN_H
#define PDSHM_TEST_CRASHRUN_H

#include "crashsnap.h"
#include "model/model.h"
#include "testutil.h"

#define CRASH_SEG_SIZE (2u << 20) /* bytes of the world's segment at first */
#define CRASH_SEG_MAX (8u << 20)  /* ... and the most it grows to          */
#define CRASH_MAX_REFS 64         /* states an operation may leave   */

/* ---- the committed world (crashrun.c) ---- */
/* The segment's name, for the current test (crash_setup). */
extern char crash_seg_name[PDSHM_SEG_NAME_MAX + 1];
/* Totals over the whole run: each test runs in a process of its own, so
 * they live in a mapping shared with the runner (crash_main). */
extern struct crash_totals {
  _Atomic uint64_t passed, tried; /* (op, k) windows passed, and killed at */
} *crash_totals;
/* A suite's main: runs s with the totals mapped, and prints them last.
 * EXIT_SUCCESS or EXIT_FAILURE. */
int crash_main(Suite *s);
void crash_setup(void);    /* a fresh segment name per test */
void crash_teardown(void); /* removes what the test left     */
/* root/params {w, b, e, big, lk} with kids fc, sub/deep and one anonymous
 * scope this process holds; root/full with five variables (its index grows
 * at the next one).  Few locks, so that the bystander takes every free
 * entry. */
pdshm_seg *crash_world(void);

/* ---- operations, as the child runs them (crashops.c) ---- */
/* What the child's operation works on: its attachment, and what its
 * preparation opened, found or made. */
struct cx {
  pdshm_seg *seg;
  pdshm_scope *root, *params, *s;
  pdshm_var *v;
  pdshm_pin *pin;
};

/* An operation the crash suites kill. */
struct op {
  const char *name;
  int (*prep)(struct cx *);  /* in the child, before counting; NULL: none */
  int (*run)(struct cx *);   /* the operation                            */
  const char *boundary;      /* crash point between its atomic steps     */
  bool arm_first;            /* count from before the attach             */
  void (*verify)(pdshm_seg *); /* more to require once the dead are reaped */
  const char *pinned;        /* "SCOPE/VAR" this process pins while the child
                                runs (unpinned once the dead are reaped)  */
};

extern const struct op crash_ops[];
extern const size_t crash_nops;
extern const struct op crash_reaper; /* pdshm_reap, as a plan's op */
const struct op *crash_op_named(const char *name);
/* Preparations: root and params opened; and variable `name` of params. */
int crash_open_params(struct cx *c);
int crash_prep_var(struct cx *c, const char *name);

/* ---- one child (crashrun.c) ---- */
/* Where the child is once prepared: a preparation that changes committed
 * state (prep_holey) makes that state one the operation may leave too. */
extern const char CRASH_PREPARED[];

struct plan {
  const struct op *op;
  uint64_t k;            /* die at this hit (0: run to the end)           */
  const char *point;     /* count only this point's hits                  */
  int fd;                /* the child reports its hit count here          */
  int ready, go;         /* a child that starts before another one dies:
                            prepared, it writes a byte on ready and waits
                            for one on go before it runs (0: not used)    */
};

struct outcome {
  char *before, *after;  /* the model before the child ran, and after      */
  uint64_t hits;         /* when the child ran to the end                   */
  char (*names)[64];     /* the point of each hit (counting run)            */
  bool finished;         /* the child reached the end of the operation      */
};

/* In the child of plan arg (a struct plan *): attach, prepare, run armed;
 * a finished run reports its hits and dies anyway, so that every state is
 * seen after a death and a reap. */
int crash_child_main(void *arg);
void crash_outcome_free(struct outcome *o);
/* Reads a finished child's report from fd into o. */
void crash_read_report(int fd, struct outcome *o);
/* Forks the child of plan pl and waits for its death; its report, when it
 * ran to the end, goes to o. */
void crash_child_run(struct plan pl, struct outcome *o);
/* Reaps what the dead left and verifies the segment is clean. */
void crash_reap_verify(pdshm_seg *seg, const char *what, uint64_t k);
/* A live process at work next to the dead before anybody reaps them (see
 * crashrun.c). */
void crash_bystander(pdshm_seg *seg, const char *what, uint64_t k);
/* A fresh world, the child of plan a (then, if b is not NULL, the child of
 * plan b: a reaper), then reap and verify; with a pin of ours (a->op->pinned)
 * held throughout, verified with it and again once it is dropped.  The
 * outcome's `after` is the model once the dead have been reaped and our pin
 * dropped; its report is the last child's. */
struct outcome crash_run_plans(const struct plan *a, const struct plan *b);
struct outcome crash_run_child(const struct op *op, uint64_t k, const char *point);

/* ---- the states an operation may leave (crashrun.c) ---- */
struct crash_refs {
  char *s[CRASH_MAX_REFS];
  unsigned n;
};

void crash_refs_add(struct crash_refs *r, const char *s);
bool crash_refs_has(const struct crash_refs *r, const char *s);
void crash_refs_free(struct crash_refs *r);
/* The first line where a and b differ, for a failure message. */
const char *crash_first_diff(const char *a, const char *b, char *out, size_t cap);
/* Loops pass the same window many times (a cache refill carves a block per
 * turn): window k is tried unless the same point between the same
 * neighbours was tried twice already.  CRASH_ALL=1 tries every k. */
bool crash_window_seen(char (*names)[64], uint64_t n, uint64_t k);
/* How many distinct crash points the hits name; CRASH_NAMES=1 lists them. */
unsigned crash_points(char (*names)[64], uint64_t n);

#endif
