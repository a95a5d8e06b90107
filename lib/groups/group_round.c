/*
 * group_round.c - a group's rounds: arriving, waiting, completing a round
 * (a round broken early, by a death or a timeout: group_break.c).
 *
 * Owns: the state word of a group record and the arrived/writing words of
 * its ranks (groups.h describes them).
 *
 * Invariants:
 *  1. A round ends by exactly one CAS of `state` that moves the round number
 *     on (completion by the last arrival, or a break); so every member sees
 *     one outcome per round, read from the histories.
 *  2. An arrival is counted in `state` by CAS while the round is current, and
 *     withdrawn the same way (a timeout in a barrier, or before an allreduce
 *     wrote anything): a round cannot complete on a withdrawn arrival.
 *  3. A waiter sleeps on the futex of the round number in slices of
 *     SLICE_NS; between slices (and when the reaper wakes it) it checks
 *     every other member, and a dead one whose death was not yet announced
 *     breaks the round (group_break.c, pdshm__group_report_death).  Those
 *     that arrived too: a member stores its arrival word before it counts
 *     itself in `state`, and one killed between the two has arrived by its
 *     word but the round cannot complete without it.
 *  4. A writer stores writing := round, then reads `state`; a breaker ends
 *     the round, then reads writing (both sequentially consistent): either
 *     the writer sees the break before it writes, or the breaker sees it
 *     writing and waits until it stops (it looks between chunks).
 *  5. Before its first sleep a waiter spins for its membership's spin_ns
 *     (at least SPIN_MIN_NS).  A wait that ends while spinning doubles the
 *     next wait's spin (up to SPIN_MAX_NS); one that sleeps halves it.  So
 *     members that reach their rounds close together (a futex sleep and its
 *     wake cost tens of microseconds) hand over without sleeping, and a
 *     waiter whose peers come late soon stops taking processor time from
 *     them.  The spin never yields: on a busy machine a yield gives the
 *     processor away for a time slice (small all-reduces took 0.7 ms with
 *     one, 10 us without; bench/python/distbench.py beside 4 busy loops).
 *  6. But a group of more members than the machine has processors is its
 *     own crowd: the member a waiter waits for is most likely waiting for a
 *     processor, which a spinner keeps from it.  There a waiter yields
 *     instead of spinning, up to GS_YIELDS times, then sleeps (4 KiB
 *     allreduces in place among 4 processes on 2 cores took 17 us so,
 *     against 63 to 79 us spinning: bench/bench_allreduce --quick --procs 4).
 */
#define PDSHM_LAYER 6 /* groups/ (lib/LAYERS) */
#include "config.h"

#include <sched.h>
#include <time.h>

#include "base/cpu.h"
#include "groups/groups.h"

#define SLICE_NS 5000000 /* 5 ms: a death is noticed well within 100 ms */
#define SPIN_MIN_NS 1000u  /* invariant 5: the least and the most a wait */
#define SPIN_MAX_NS 64000u /* spins before it sleeps                      */
#define SPIN_LOOKS 32      /* looks at the state between looks at the clock */
#define GS_YIELDS 8        /* invariant 6: a crowded group's yields before it sleeps */

uint64_t pdshm__round_deadline(int64_t timeout_ns) {
  return timeout_ns < 0 ? UINT64_MAX : pdshm__now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ns;
}

int pdshm__round_outcome(uint64_t s, uint32_t round) {
  uint32_t d = PDSHM_GS_ROUND(s) - round;
  if (d > PDSHM_GS_HIST) return PDSHM_EOWNERDEAD; /* rounds broken while we slept */
  uint32_t bit = 1u << (d - 1);
  if (!(PDSHM_GS_BROKE(s) & bit)) return 0;
  return PDSHM_GS_TIMEO(s) & bit ? PDSHM_ETIMEDOUT : PDSHM_EOWNERDEAD;
}

void pdshm__round_arrive(struct pdshm_group_rec *g, uint32_t rank, uint32_t round) {
  bool regroup = g->rank[rank].ar[round & 1].kind == PDSHM_GK_REGROUP;
  atomic_store(&g->rank[rank].arrived, round);
  PDSHM_CRASHPOINT("group.round.arriving");
  uint64_t s = atomic_load(&g->state);
  while (PDSHM_GS_ROUND(s) == round) {
    bool last = !regroup && PDSHM_GS_ARRIVED(s) + 1 >= atomic_load(&g->size);
    uint64_t ns = last ? pdshm__gs_next(s, false, false) : s + (1ull << 32);
    if (atomic_compare_exchange_weak(&g->state, &s, ns)) {
      PDSHM_CRASHPOINT("group.round.arrived");
      if (last) pdshm__gs_wake(g);
      return;
    }
  }
}

/* Invariant 2. */
bool pdshm__round_withdraw(struct pdshm_group_rec *g, uint32_t rank, uint32_t round) {
  uint64_t s = atomic_load(&g->state);
  while (PDSHM_GS_ROUND(s) == round)
    if (atomic_compare_exchange_weak(&g->state, &s, s - (1ull << 32))) {
      atomic_store(&g->rank[rank].arrived, round - 1);
      return true;
    }
  return false;
}

/* Invariant 3. */
static void gs_check_deaths(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t me) {
  for (uint32_t r = 0; r < g->size; r++) {
    if (r == me) continue;
    uint64_t m = atomic_load(&g->rank[r].member);
    if (!m || atomic_load(&g->rank[r].reported) == (m & ~PDSHM_GM_DEAD)) continue;
    if (!pdshm__group_member_live(seg, m)) pdshm__group_report_death(seg, g, r, m);
  }
}

/* Invariant 6: true once the round of *s moved on within GS_YIELDS yields,
 * which end by the deadline (a yield may last a time slice). */
static bool gs_yield(struct pdshm_group_rec *g, uint32_t round, uint64_t deadline, uint64_t *s) {
  for (int y = 0;; y++) {
    *s = atomic_load_explicit(&g->state, memory_order_acquire);
    if (PDSHM_GS_ROUND(*s) != round) return true;
    if (y == GS_YIELDS || pdshm__now_ns(CLOCK_MONOTONIC) >= deadline) return false;
    sched_yield();
  }
}

/* Invariants 5 and 6: true once the round of *s moved on within the spin,
 * which ends by the deadline. */
static bool gs_spin(struct pdshm_group *gr, struct pdshm_group_rec *g, uint32_t round,
                    uint64_t deadline, uint64_t *s) {
  if (atomic_load(&g->size) > (uint32_t)pdshm__cpus_online())
    return gs_yield(g, round, deadline, s);
  uint32_t budget = gr->spin_ns < SPIN_MIN_NS ? SPIN_MIN_NS : gr->spin_ns;
  uint64_t start = pdshm__now_ns(CLOCK_MONOTONIC);
  uint64_t end = start + budget < deadline ? start + budget : deadline;
  for (;;) {
    for (int i = 0; i < SPIN_LOOKS; i++) {
      *s = atomic_load_explicit(&g->state, memory_order_acquire);
      if (PDSHM_GS_ROUND(*s) != round) {
        gr->spin_ns = budget >= SPIN_MAX_NS / 2 ? SPIN_MAX_NS : 2 * budget;
        return true;
      }
      pdshm__cpu_relax();
    }
    if (pdshm__now_ns(CLOCK_MONOTONIC) >= end) break;
  }
  gr->spin_ns = budget / 2;
  return false;
}

static uint64_t gs_wait_ended(struct pdshm_group *gr, struct pdshm_group_rec *g, uint32_t round,
                              uint64_t deadline, bool withdraw, int *rc) {
  uint64_t s;
  if (gs_spin(gr, g, round, deadline, &s)) return s;
  for (bool first = true;; first = false) {
    s = atomic_load(&g->state);
    if (PDSHM_GS_ROUND(s) != round) return s;
    if (!first) gs_check_deaths(gr->seg, g, gr->rank);
    uint64_t now = pdshm__now_ns(CLOCK_MONOTONIC);
    if (now >= deadline) {
      if (withdraw && pdshm__round_withdraw(g, gr->rank, round)) {
        *rc = PDSHM_ETIMEDOUT;
        return s;
      }
      if (!withdraw) pdshm__round_break(g, round, true);
      continue;
    }
    pdshm__round_sleep(g, round, deadline - now < SLICE_NS ? (int64_t)(deadline - now) : SLICE_NS);
  }
}

void pdshm__round_sleep(struct pdshm_group_rec *g, uint32_t round, int64_t slice_ns) {
  pdshm__futex_wait(pdshm__futex_low(&g->state), &g->waiters, round, slice_ns);
}

int pdshm__round_pass(struct pdshm_group *gr, uint64_t deadline, bool withdraw) {
  struct pdshm_group_rec *g = pdshm__group_rec(gr->seg, gr->rec);
  uint32_t round = gr->round;
  pdshm__round_arrive(g, gr->rank, round);
  int rc = 0;
  uint64_t s = gs_wait_ended(gr, g, round, deadline, withdraw, &rc);
  if (rc) return rc; /* withdrawn: the next call arrives at this round again */
  gr->round = round + 1;
  return pdshm__round_outcome(s, round);
}

void pdshm__round_no_tensor(struct pdshm_group *gr) {
  struct pdshm_group_rec *g = pdshm__group_rec(gr->seg, gr->rec);
  g->rank[gr->rank].ar[gr->round & 1] =
      (struct pdshm_group_desc){.dtype = UINT32_MAX, .op = UINT16_MAX, .kind = PDSHM_GK_NONE};
}

bool pdshm__round_writing(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t round,
                          int skip_rank) {
  for (uint32_t r = 0; r < g->size; r++) {
    if ((int)r == skip_rank) continue;
    uint32_t w = atomic_load(&g->rank[r].writing);
    if (w && (round == 0 || w == round) &&
        pdshm__group_member_live(seg, atomic_load(&g->rank[r].member)))
      return true;
  }
  return false;
}

void pdshm__round_pause(void) {
  const struct timespec pause = {.tv_nsec = 20000};
  nanosleep(&pause, NULL);
}

void pdshm__round_wait_writers(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t round,
                               int skip_rank) {
  while (pdshm__round_writing(seg, g, round, skip_rank)) pdshm__round_pause();
}

int pdshm__round_usable(struct pdshm_group *gr) {
  pdshm__fail_clear();
  if (!gr) return pdshm__fail(PDSHM_EINVAL, "NULL group");
  int rc = pdshm__seg_writable(gr->seg);
  if (rc || !gr->regroup_pending) return rc;
  return pdshm__fail(PDSHM_EBUSY, "this membership is still in a regroup (the groups lock was "
                                  "held past its timeout): call pdshm_group_regroup again");
}

PDSHM_API int pdshm_group_barrier(pdshm_group *gr, int64_t timeout_ns) {
  int rc = pdshm__round_usable(gr);
  if (rc) return rc;
  pdshm__round_no_tensor(gr);
  return pdshm__round_pass(gr, pdshm__round_deadline(timeout_ns), true);
}
