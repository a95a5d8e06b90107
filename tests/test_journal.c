/* test_journal.c - journals committed, aborted and killed in each crash
 * window, repaired by the next lock holder or the reaper; poisoning when a
 * repair cannot be trusted; threads on lanes and locks. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kid.h"

/* ---- journals ------------------------------------------------------------------ */

static uint32_t j_lock;          /* the lock the journals run under            */
static pdshm_off_t j_cell, j_old; /* a published cell of words; a published block */

/* The state of the block whose payload starts at p, or -1 when no block
 * starts there any more (merged into a free neighbour). */
static int blk_state_at(pdshm_off_t p) {
  const struct pdshm_hdr *h = g_seg->hdr;
  for (pdshm_off_t at = h->arena_off; at < h->arena_end;) {
    uint64_t w = atomic_load(&PDSHM_AT(g_seg->base, at, struct pdshm_blk)->word);
    if (at == p - PDSHM_BLK_HDR) return (int)pdshm__blk_state(w);
    if (at > p || pdshm__blk_size(w) == 0) return -1;
    at += pdshm__blk_size(w);
  }
  return -1;
}
static bool published(pdshm_off_t p) {
  return blk_state_at(p) == PDSHM_BLK_USED && pdshm__blk(g_seg, p)->owner == 0;
}
static uint64_t blk_bytes(pdshm_off_t p) { return pdshm__blk_size(atomic_load(&pdshm__blk(g_seg, p)->word)); }
static uint64_t *cell(unsigned k) { return PDSHM_AT(g_seg->base, j_cell + 8 * k, uint64_t); }

/* A segment, a claimed lock, and two blocks published by a journal. */
static void journal_fixture(void) {
  make(8u << 20, 8, 0);
  j_lock = claim(g_seg);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(g_seg);
  ck_assert_int_eq(pdshm__j_begin(g_seg, ln, j_lock, 0), 0);
  ck_assert_int_eq(pdshm__j_alloc(g_seg, ln, 64, PDSHM_T_RAW, &j_cell), 0);
  ck_assert_int_eq(pdshm__j_alloc(g_seg, ln, 96, PDSHM_T_RAW, &j_old), 0);
  ck_assert_uint_eq(pdshm__blk(g_seg, j_cell)->owner, g_seg->owner_tag); /* not yet */
  pdshm__j_commit(g_seg, ln);
  pdshm__lane_put(ln);
  ck_assert(published(j_cell));
  ck_assert(published(j_old));
  *cell(0) = 100;
  *cell(1) = 200;
  *cell(2) = 0; /* a seqlock word */
}

START_TEST(journal_commit_applies_and_publishes) {
  journal_fixture();
  uint64_t u0 = stats(g_seg).used, oldb = blk_bytes(j_old);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(g_seg);
  pdshm_off_t nb;
  ck_assert_int_eq(pdshm__j_begin(g_seg, ln, j_lock, 0), 0);
  ck_assert_int_eq(atomic_load(&ln->rec->j.state), PDSHM_J_ARMED);
  ck_assert_int_eq(pdshm__j_alloc(g_seg, ln, 200, PDSHM_T_RAW, &nb), 0);
  uint64_t newb = blk_bytes(nb);
  pdshm__j_set(g_seg, ln, j_cell, 111);
  pdshm__j_set(g_seg, ln, j_cell + 8, 222);
  pdshm__j_seq(g_seg, ln, j_cell + 16);
  pdshm__j_retire(g_seg, ln, j_old);
  /* nothing shared changes before the commit */
  ck_assert_uint_eq(*cell(0), 100);
  ck_assert_uint_eq(*cell(1), 200);
  ck_assert_uint_eq(pdshm__blk(g_seg, nb)->owner, g_seg->owner_tag);
  pdshm__j_commit(g_seg, ln);
  pdshm__lane_put(ln);
  ck_assert_uint_eq(*cell(0), 111);
  ck_assert_uint_eq(*cell(1), 222);
  ck_assert_uint_eq(*cell(2), 2); /* odd while applying, even after */
  ck_assert(published(nb));
  ck_assert_int_ne(blk_state_at(j_old), PDSHM_BLK_USED);
  ck_assert_int_eq(atomic_load(&ln->rec->j.state), PDSHM_J_IDLE);
  ck_assert_int_eq(pdshm__trylock(g_seg, j_lock), 0); /* released */
  pdshm__unlock(g_seg, j_lock);
  ck_assert_uint_eq(stats(g_seg).used, u0 + newb - oldb);
  ck_assert_int_eq(pdshm__heap_check(g_seg, stderr), 0);
}
END_TEST

START_TEST(journal_abort_changes_nothing) {
  journal_fixture();
  uint64_t u0 = stats(g_seg).used;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(g_seg);
  pdshm_off_t nb;
  ck_assert_int_eq(pdshm__j_begin(g_seg, ln, j_lock, 0), 0);
  ck_assert_int_eq(pdshm__j_alloc(g_seg, ln, 200, PDSHM_T_RAW, &nb), 0);
  pdshm__j_set(g_seg, ln, j_cell, 111);
  pdshm__j_set(g_seg, ln, j_cell + 8, 222);
  pdshm__j_retire(g_seg, ln, j_old);
  ck_assert_uint_eq(pdshm__blk(g_seg, j_old)->owner, g_seg->owner_tag); /* marked */
  ck_assert_uint_gt(stats(g_seg).used, u0);
  pdshm__j_abort(g_seg, ln);
  pdshm__lane_put(ln);
  ck_assert_uint_eq(*cell(0), 100);
  ck_assert_uint_eq(*cell(1), 200);
  ck_assert_int_ne(blk_state_at(nb), PDSHM_BLK_USED);
  ck_assert(published(j_old));
  ck_assert_int_eq(atomic_load(&ln->rec->j.state), PDSHM_J_IDLE);
  ck_assert_int_eq(pdshm__trylock(g_seg, j_lock), 0);
  pdshm__unlock(g_seg, j_lock);
  ck_assert_uint_eq(stats(g_seg).used, u0);
  ck_assert_int_eq(pdshm__heap_check(g_seg, stderr), 0);
}
END_TEST

enum { W_ARMED, W_COMMIT, W_HALF_APPLIED };

/* Runs a journal on j_lock up to window arg[0] and dies there. */
static int kid_journal(struct kid *k) {
  if (kid_attach(k)) return 1;
  pdshm_seg *s = k->seg;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(s);
  pdshm_off_t nb;
  if (pdshm__j_begin(s, ln, j_lock, 0)) return 2;
  if (pdshm__j_alloc(s, ln, 200, PDSHM_T_RAW, &nb)) return 3;
  memset(PDSHM_AT(s->base, nb, void), 0x5a, 200);
  pdshm__j_set(s, ln, j_cell, 111);
  pdshm__j_set(s, ln, j_cell + 8, 222);
  pdshm__j_seq(s, ln, j_cell + 16);
  pdshm__j_retire(s, ln, j_old);
  if (kid_say(k, nb) || kid_say(k, ln->index)) return 4;
  if (k->arg[0] >= W_COMMIT) /* the commit point, stores not yet applied */
    atomic_store(&ln->rec->j.state, PDSHM_J_COMMIT);
  if (k->arg[0] == W_HALF_APPLIED) { /* seq odd, the first store made */
    *PDSHM_AT(s->base, j_cell + 16, uint64_t) = 1;
    *PDSHM_AT(s->base, j_cell, uint64_t) = 111;
  }
  raise(SIGKILL);
  return 5;
}

/* _i: window * 2 + (1 when the reaper repairs, 0 when the next locker does) */
START_TEST(journal_killed_in_window) {
  int window = _i / 2, by_reap = _i % 2;
  journal_fixture();
  uint64_t u0 = stats(g_seg).used, oldb = blk_bytes(j_old);
  uint64_t died0 = lk(j_lock)->owner_died;
  struct kid k = {.arg = {(uint64_t)window}};
  kid_start(&k, kid_journal);
  uint32_t slot = (uint32_t)kid_recv(&k);
  pdshm_off_t nb = kid_recv(&k);
  unsigned lane = (unsigned)kid_recv(&k);
  ck_assert_int_eq(kid_end(&k), 128 + SIGKILL);
  struct pdshm_journal *j = &pdshm__slot(g_seg, slot)->lane[lane].j;
  ck_assert_uint_eq(atomic_load(&j->state), window == W_ARMED ? PDSHM_J_ARMED : PDSHM_J_COMMIT);
  ck_assert_uint_eq(atomic_load(&j->lock), j_lock);
  ck_assert_uint_eq(pdshm__blk(g_seg, nb)->owner, slot + 1);
  ck_assert_uint_eq(pdshm__blk(g_seg, j_old)->owner, slot + 1);
  uint64_t newb = blk_bytes(nb);
  if (by_reap) {
    ck_assert_uint_eq(reap(g_seg), 1);
  } else {
    uint64_t t0 = tu_now_ns();
    ck_assert_int_eq(pdshm__lock(g_seg, j_lock), 0); /* EOWNERDEAD: counted below */
    ck_assert_uint_lt(tu_now_ns() - t0, 10000000000ull); /* a hang guard */
    pdshm__unlock(g_seg, j_lock);
    ck_assert_uint_eq(stats(g_seg).procs_dead, 1); /* repaired, not yet reaped */
  }
  ck_assert_uint_eq(lk(j_lock)->owner_died, died0 + 1);
  ck_assert_uint_eq(atomic_load(&j->state), PDSHM_J_IDLE);
  for (int pass = 0; pass < 2; pass++) {
    if (window == W_ARMED) { /* rolled back */
      ck_assert_uint_eq(*cell(0), 100);
      ck_assert_uint_eq(*cell(1), 200);
      ck_assert_uint_eq(*cell(2) % 2, 0);
      ck_assert_int_ne(blk_state_at(nb), PDSHM_BLK_USED);
      ck_assert(published(j_old));
      ck_assert_uint_eq(stats(g_seg).used, u0);
    } else { /* finished */
      ck_assert_uint_eq(*cell(0), 111);
      ck_assert_uint_eq(*cell(1), 222);
      ck_assert_uint_eq(*cell(2) % 2, 0);
      ck_assert_uint_ne(*cell(2), 0);
      ck_assert(published(nb));
      ck_assert_uint_eq(*PDSHM_AT(g_seg->base, nb + 199, uint8_t), 0x5a);
      ck_assert_int_ne(blk_state_at(j_old), PDSHM_BLK_USED);
      ck_assert_uint_eq(stats(g_seg).used, u0 + newb - oldb);
    }
    ck_assert_int_eq(pdshm__heap_check(g_seg, stderr), 0);
    if (pass == 0 && !by_reap) ck_assert_uint_eq(reap(g_seg), 1); /* changes nothing more */
  }
  ck_assert_uint_eq(stats(g_seg).procs_dead, 0);
  ck_assert_int_eq(pdshm__lock(g_seg, j_lock), 0);
  pdshm__unlock(g_seg, j_lock);
  ck_assert_uint_eq(lk(j_lock)->owner_died, died0 + 1);
  ck_assert_int_eq(atomic_load(&g_seg->hdr->poisoned), 0);
}
END_TEST

/* ---- poisoning ------------------------------------------------------------------ */

enum { P_BEYOND_END, P_IN_HEADER, P_MISALIGNED, P_TOO_MANY, P_NEWB_OUTSIDE, P_CASES };

/* Dies holding j_lock with a journal no repair may follow (arg[0]). */
static int kid_bad_journal(struct kid *k) {
  if (kid_attach(k)) return 1;
  pdshm_seg *s = k->seg;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(s);
  if (pdshm__j_begin(s, ln, j_lock, 0)) return 2;
  pdshm__j_set(s, ln, j_cell, 111);
  struct pdshm_journal *j = &ln->rec->j;
  switch (k->arg[0]) {
  case P_BEYOND_END: j->redo[0].at = s->size + 64; break;
  case P_IN_HEADER: j->redo[0].at = 8; break; /* over the layout version */
  case P_MISALIGNED: j->redo[0].at = j_cell + 4; break;
  case P_TOO_MANY: j->nredo = PDSHM_J_REDO + 1000; break;
  case P_NEWB_OUTSIDE:
    j->newb[0] = s->size + 4096;
    j->nnew = 1;
    break;
  }
  atomic_store(&j->state, PDSHM_J_COMMIT);
  if (kid_say(k, 0)) return 3;
  raise(SIGKILL);
  return 4;
}

/* Another process on the poisoned segment: attaches (which reaps the dead
 * journal owner, so tries its lock too), then tries the lock both ways;
 * reports each result. */
static int kid_poisoned_taker(struct kid *k) {
  int rc = pdshm_attach(g_name, NULL, &k->seg);
  if (kid_say(k, (uint64_t)(int64_t)rc)) return 1;
  if (rc) return 0;
  if (kid_say(k, (uint64_t)(int64_t)pdshm__trylock(k->seg, j_lock))) return 2;
  if (kid_say(k, (uint64_t)(int64_t)pdshm__lock(k->seg, j_lock))) return 3;
  pdshm_detach(k->seg);
  return 0;
}

START_TEST(failed_repair_poisons) {
  journal_fixture();
  struct pdshm_hdr hdr0;
  memcpy(&hdr0, g_seg->hdr, offsetof(struct pdshm_hdr, poisoned));
  struct kid k = {.arg = {(uint64_t)_i}};
  kid_start(&k, kid_bad_journal);
  kid_recv(&k);
  kid_recv(&k);
  ck_assert_int_eq(kid_end(&k), 128 + SIGKILL);
  ck_assert_int_eq(atomic_load(&g_seg->hdr->poisoned), 0);
  ck_assert_int_eq(pdshm__lock(g_seg, j_lock), PDSHM_ENOTRECOVERABLE);
  ck_assert_int_ne(atomic_load(&g_seg->hdr->poisoned), 0);
  /* no wild store was made */
  ck_assert_int_eq(memcmp(&hdr0, g_seg->hdr, offsetof(struct pdshm_hdr, poisoned)), 0);
  ck_assert_uint_eq(*cell(0), 100);
  /* the lock stays unrecoverable: every later taker, in this process or
   * another, gets ENOTRECOVERABLE at once, and nobody is left blocked */
  ck_assert_int_eq(pdshm__lock(g_seg, j_lock), PDSHM_ENOTRECOVERABLE);
  struct kid t = {0};
  kid_start(&t, kid_poisoned_taker);
  int rc = (int)(int64_t)kid_recv_within(&t, 3000, "its pdshm_attach blocked on the "
                                                   "unrecoverable lock (reaping at attach)");
  ck_assert_msg(rc == 0 || rc == PDSHM_ENOTRECOVERABLE, "attach: %s", pdshm_err_name(rc));
  if (rc == 0) {
    ck_assert_int_eq((int64_t)kid_recv_within(&t, 3000, "its pdshm__trylock blocked"),
                     PDSHM_ENOTRECOVERABLE);
    ck_assert_int_eq((int64_t)kid_recv_within(&t, 3000,
                                              "pdshm__lock on the unrecoverable lock blocked "
                                              "instead of returning ENOTRECOVERABLE"),
                     PDSHM_ENOTRECOVERABLE);
  }
  ck_assert_int_eq(kid_end(&t), 0);
  /* its attachment, failed or detached, left no slot behind */
  pdshm_stats st = stats(g_seg);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_msg(st.procs_dead == 1, "%u dead slots: a failed attach left its slot claimed",
                st.procs_dead);
  ck_assert_int_eq(pdshm__lock(g_seg, j_lock), PDSHM_ENOTRECOVERABLE);
  ck_assert_int_eq(pdshm__trylock(g_seg, j_lock), PDSHM_ENOTRECOVERABLE);
  ck_assert_int_eq(pdshm__lock(g_seg, j_lock), PDSHM_ENOTRECOVERABLE);
  unsigned n = 5;
  ck_assert_int_eq(pdshm_reap(g_seg, &n), PDSHM_ENOTRECOVERABLE);
  ck_assert_uint_eq(n, 0);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(g_seg, &root), PDSHM_ENOTRECOVERABLE);
  ck_assert_ptr_nonnull(strstr(pdshm_strerror(PDSHM_ENOTRECOVERABLE), "poisoned"));
  /* looking still works */
  ck_assert_int_eq(pdshm_seg_stats(g_seg, &st), 0);
}
END_TEST

/* ---- threads -------------------------------------------------------------------- */

#define NTHREADS 4
#define TITERS 3000
#define TLOCKS 3

struct tstate {
  uint32_t locks[TLOCKS];
  _Atomic int lane_busy[PDSHM_LANES];
  _Atomic uint64_t begun[TLOCKS], committed[TLOCKS];
  _Atomic int bad;
};
static struct tstate ts;

/* Each iteration: a lane, a journal under one of the locks that bumps that
 * lock's counter word and swaps its current block for a new one; one in
 * seven is aborted instead. */
static void *thread_body(void *arg) {
  unsigned t = (unsigned)(uintptr_t)arg;
  for (unsigned i = 0; i < TITERS && !ts.bad; i++) {
    struct pdshm_lane_ctx *ln = pdshm__lane_get(g_seg);
    if (atomic_exchange(&ts.lane_busy[ln->index], 1)) ts.bad = 1; /* two in one lane */
    unsigned k = (t + i) % TLOCKS;
    if (pdshm__j_begin(g_seg, ln, ts.locks[k], 0)) ts.bad = 2;
    atomic_fetch_add(&ts.begun[k], 1);
    uint64_t count = *cell(2 * k), cur = *cell(2 * k + 1);
    pdshm_off_t nb;
    if (pdshm__j_alloc(g_seg, ln, 32 + 16 * (i % 8), PDSHM_T_RAW, &nb)) ts.bad = 3;
    pdshm__j_set(g_seg, ln, j_cell + 16 * k, count + 1);
    pdshm__j_set(g_seg, ln, j_cell + 16 * k + 8, nb);
    if (cur) pdshm__j_retire(g_seg, ln, cur);
    atomic_store(&ts.lane_busy[ln->index], 0);
    if (i % 7 == 6) {
      pdshm__j_abort(g_seg, ln);
    } else {
      pdshm__j_commit(g_seg, ln);
      atomic_fetch_add(&ts.committed[k], 1);
    }
    pdshm__lane_put(ln);
  }
  return NULL;
}

START_TEST(threads_on_lanes_and_locks) {
  make(16u << 20, 8, 0);
  memset(&ts, 0, sizeof ts);
  uint64_t acq0[TLOCKS];
  for (int k = 0; k < TLOCKS; k++) ts.locks[k] = claim(g_seg);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(g_seg);
  ck_assert_int_eq(pdshm__j_begin(g_seg, ln, ts.locks[0], 0), 0);
  ck_assert_int_eq(pdshm__j_alloc(g_seg, ln, 16 * TLOCKS, PDSHM_T_RAW, &j_cell), 0);
  pdshm__j_commit(g_seg, ln);
  pdshm__lane_put(ln);
  memset(cell(0), 0, 16 * TLOCKS);
  for (int k = 0; k < TLOCKS; k++) acq0[k] = lk(ts.locks[k])->acquisitions;
  uint64_t u0 = stats(g_seg).used;
  pthread_t th[NTHREADS];
  for (uintptr_t t = 0; t < NTHREADS; t++)
    ck_assert_int_eq(pthread_create(&th[t], NULL, thread_body, (void *)t), 0);
  for (int t = 0; t < NTHREADS; t++) pthread_join(th[t], NULL);
  ck_assert_int_eq(ts.bad, 0);
  uint64_t cur_bytes = 0;
  for (int k = 0; k < TLOCKS; k++) {
    ck_assert_uint_eq(*cell(2 * k), ts.committed[k]);
    ck_assert_uint_eq(lk(ts.locks[k])->acquisitions - acq0[k], ts.begun[k]);
    ck_assert(published(*cell(2 * k + 1)));
    cur_bytes += blk_bytes(*cell(2 * k + 1));
  }
  ck_assert_uint_eq(ts.begun[0] + ts.begun[1] + ts.begun[2], NTHREADS * TITERS);
  ck_assert_uint_eq(stats(g_seg).used, u0 + cur_bytes);
  ck_assert_int_eq(pdshm__heap_check(g_seg, stderr), 0);
  ck_assert_int_eq(atomic_load(&g_seg->hdr->poisoned), 0);
}
END_TEST

/* ---- the suite -------------------------------------------------------------------- */

static Suite *journal_suite(void) {
  Suite *s = suite_create("journals");
  TCase *tc = kid_tcase(s, "journals", 15);
  tcase_add_test(tc, journal_commit_applies_and_publishes);
  tcase_add_test(tc, journal_abort_changes_nothing);
  tcase_add_loop_test(tc, journal_killed_in_window, 0, 6);
  tcase_add_loop_test(tc, failed_repair_poisons, 0, P_CASES);
  tc = kid_tcase(s, "threads", 30);
  tcase_add_test(tc, threads_on_lanes_and_locks);
  return s;
}

int main(void) { return tu_run(journal_suite()) ? 1 : 0; }
