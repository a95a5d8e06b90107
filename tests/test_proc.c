/* test_proc.c - process slots, liveness and reaping; robust locks and their
 * counters; the lock table. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* F_OFD_SETLK */
#endif
#include "config.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kid.h"

/* Attaches, reports its slot; with arg[0], first builds a local scope with a
 * 64 KiB tensor so that its death leaves something to release; then sleeps
 * until killed. */
static int kid_attach_pause(struct kid *k) {
  int rc = pdshm_attach(g_name, NULL, &k->seg);
  if (rc) return 1;
  if (k->arg[0]) {
    pdshm_scope *root, *local;
    pdshm_var *v;
    int64_t d = 16384;
    if (pdshm_root(k->seg, &root) || pdshm_scope_new(root, NULL, &local) ||
        pdshm_var_create(local, "t", &v) || pdshm_tensor_resize(v, PDSHM_F32, 1, &d))
      return 2;
  }
  if (kid_say(k, k->seg->slot)) return 3;
  for (;;) pause();
}

/* ---- slots -------------------------------------------------------------------- */

START_TEST(slot_exhaustion_then_reap) {
  make(8u << 20, 4, 0);
  struct kid k[3] = {0};
  uint32_t slots[3];
  for (int i = 0; i < 3; i++) {
    kid_start(&k[i], kid_attach_pause);
    slots[i] = (uint32_t)kid_recv(&k[i]);
  }
  ck_assert_uint_eq(stats(g_seg).procs_alive, 4);
  pdshm_seg *s = (pdshm_seg *)1;
  ck_assert_int_eq(pdshm_attach(g_name, NULL, &s), PDSHM_EUSERS);
  ck_assert_ptr_null(s);
  ck_assert_uint_eq(stats(g_seg).procs_alive, 4);
  kid_kill(&k[0]);
  ck_assert_uint_eq(stats(g_seg).procs_dead, 1);
  ck_assert_int_eq(pdshm_attach(g_name, NULL, &s), 0); /* reaps the dead slot, takes it */
  ck_assert_uint_eq(s->slot, slots[0]);
  pdshm_stats st = stats(g_seg);
  ck_assert_uint_eq(st.procs_alive, 4);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_int_eq(pdshm_detach(s), 0);
  kid_kill(&k[1]);
  kid_kill(&k[2]);
}
END_TEST

START_TEST(killed_child_is_dead_until_reaped) {
  make(8u << 20, 8, 0);
  uint64_t u0 = stats(g_seg).used, reaped0 = atomic_load(&g_seg->hdr->reaped);
  struct kid k = {.arg = {1}};
  kid_start(&k, kid_attach_pause);
  uint32_t slot = (uint32_t)kid_recv(&k);
  pdshm_stats st = stats(g_seg);
  ck_assert_uint_eq(st.procs_alive, 2);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_uint_gt(st.used, u0);
  kid_kill(&k);
  for (int i = 0; i < 2; i++) { /* looking does not reap */
    st = stats(g_seg);
    ck_assert_uint_eq(st.procs_alive, 1);
    ck_assert_uint_eq(st.procs_dead, 1);
    ck_assert_uint_eq(slot_state(slot), PDSHM_SLOT_LIVE);
  }
  ck_assert_uint_eq(reap(g_seg), 1);
  st = stats(g_seg);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_uint_eq(st.used, u0);
  ck_assert_uint_eq(slot_state(slot), PDSHM_SLOT_FREE);
  ck_assert_uint_eq(atomic_load(&g_seg->hdr->reaped), reaped0 + 1);
  ck_assert_uint_eq(reap(g_seg), 0);
  ck_assert_int_eq(pdshm_check(g_seg, stderr), 0);
}
END_TEST

/* Attaches with a local scope, stops itself, and once continued uses it. */
static int kid_stops(struct kid *k) {
  pdshm_scope *root, *local;
  pdshm_var *v;
  int64_t d = 1000;
  if (pdshm_attach(g_name, NULL, &k->seg) || pdshm_root(k->seg, &root) ||
      pdshm_scope_new(root, NULL, &local))
    return 1;
  if (kid_say(k, k->seg->slot)) return 2;
  raise(SIGSTOP);
  if (pdshm_var_create(local, "after", &v) || pdshm_tensor_resize(v, PDSHM_F64, 1, &d)) return 3;
  ((double *)pdshm_tensor_data(v))[999] = 2.5;
  pdshm_stats st;
  if (pdshm_seg_stats(k->seg, &st) || st.procs_alive != 2 || st.procs_dead != 0) return 4;
  if (kid_say(k, 0)) return 5;
  return pdshm_scope_release(local) || pdshm_scope_release(root) || pdshm_detach(k->seg) ? 6 : 0;
}

START_TEST(stopped_child_is_not_reaped) {
  make(8u << 20, 8, 0);
  uint64_t u0 = stats(g_seg).used;
  struct kid k = {0};
  kid_start(&k, kid_stops);
  uint32_t slot = (uint32_t)kid_recv(&k);
  int ws;
  ck_assert_int_eq(waitpid(k.pid, &ws, WUNTRACED), k.pid);
  ck_assert(WIFSTOPPED(ws));
  pdshm_stats st = stats(g_seg);
  ck_assert_uint_eq(st.procs_alive, 2);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_uint_eq(reap(g_seg), 0);
  ck_assert_uint_eq(slot_state(slot), PDSHM_SLOT_LIVE);
  ck_assert_uint_eq(stats(g_seg).procs_alive, 2);
  ck_assert_int_eq(kill(k.pid, SIGCONT), 0);
  ck_assert_uint_eq(kid_recv(&k), 0);
  ck_assert_int_eq(kid_end(&k), 0);
  st = stats(g_seg);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_uint_eq(st.used, u0);
}
END_TEST

START_TEST(liveness_ignores_the_pid) {
  make(8u << 20, 8, 0);
  struct kid dead = {0}, alive = {0};
  kid_start(&dead, kid_attach_pause);
  uint32_t ds = (uint32_t)kid_recv(&dead);
  kid_start(&alive, kid_attach_pause);
  uint32_t as = (uint32_t)kid_recv(&alive);
  kid_kill(&dead);
  /* the dead slot claims a live pid (ours: as if the pid had been reused),
   * the live one a pid nobody has */
  struct pdshm_slot *d = pdshm__slot(g_seg, ds), *a = pdshm__slot(g_seg, as);
  d->pid = (uint32_t)getpid();
  d->proc_start = pdshm__slot(g_seg, g_seg->slot)->proc_start;
  a->pid = 0x3ffffff0u;
  ck_assert_int_ne(kill((pid_t)a->pid, 0), 0);
  pdshm_stats st = stats(g_seg);
  ck_assert_uint_eq(st.procs_alive, 2);
  ck_assert_uint_eq(st.procs_dead, 1);
  ck_assert_uint_eq(reap(g_seg), 1);
  ck_assert_uint_eq(slot_state(ds), PDSHM_SLOT_FREE);
  ck_assert_uint_eq(slot_state(as), PDSHM_SLOT_LIVE);
  st = stats(g_seg);
  ck_assert_uint_eq(st.procs_alive, 2);
  ck_assert_uint_eq(st.procs_dead, 0);
  kid_kill(&alive);
}
END_TEST

/* Attaches, reports procs_alive | procs_dead << 32 as its attachment saw
 * them right after attaching, detaches. */
static int kid_attach_report(struct kid *k) {
  pdshm_stats st;
  if (pdshm_attach(g_name, NULL, &k->seg) || pdshm_seg_stats(k->seg, &st)) return 1;
  if (kid_say(k, st.procs_alive | (uint64_t)st.procs_dead << 32)) return 2;
  return pdshm_detach(k->seg) ? 3 : 0;
}

START_TEST(attach_reaps_the_dead) {
  make(8u << 20, 8, 0);
  uint64_t u0 = stats(g_seg).used, reaped0 = atomic_load(&g_seg->hdr->reaped);
  struct kid a = {.arg = {1}}, b = {0};
  kid_start(&a, kid_attach_pause);
  kid_recv(&a);
  kid_kill(&a);
  ck_assert_uint_eq(stats(g_seg).procs_dead, 1);
  kid_start(&b, kid_attach_report);
  uint64_t seen = kid_recv(&b);
  ck_assert_int_eq(kid_end(&b), 0);
  ck_assert_uint_eq(seen >> 32, 0);         /* dead, as b saw it */
  ck_assert_uint_eq(seen & 0xffffffff, 2); /* b and us */
  pdshm_stats st = stats(g_seg);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_uint_eq(st.used, u0);
  ck_assert_uint_eq(atomic_load(&g_seg->hdr->reaped), reaped0 + 1);
}
END_TEST

/* A reaper that died after marking a dead slot REAPING leaves it to the next. */
START_TEST(reaper_killed_mid_reap_marked_by_hand) {
  make(8u << 20, 8, 0);
  uint64_t u0 = stats(g_seg).used;
  struct kid a = {.arg = {1}};
  kid_start(&a, kid_attach_pause);
  uint32_t slot = (uint32_t)kid_recv(&a);
  kid_kill(&a);
  struct pdshm_slot *s = pdshm__slot(g_seg, slot);
  atomic_store(&s->state, PDSHM_SLOT_REAPING);
  s->reaper_pid = 0x3ffffff0u;
  ck_assert_uint_eq(stats(g_seg).procs_dead, 1);
  ck_assert_uint_eq(reap(g_seg), 1);
  ck_assert_uint_eq(slot_state(slot), PDSHM_SLOT_FREE);
  ck_assert_uint_eq(s->reaper_pid, 0);
  pdshm_stats st = stats(g_seg);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_uint_eq(st.used, u0);
  ck_assert_int_eq(pdshm__heap_check(g_seg, stderr), 0);
  ck_assert_int_eq(pdshm_check(g_seg, stderr), 0);
}
END_TEST

/* Waits to be told a dead slot, claims it as a reaper does (its OFD lock,
 * then REAPING), and dies there. */
static int kid_half_reaper(struct kid *k) {
  if (kid_attach(k)) return 1;
  uint64_t victim;
  if (kid_hear(k, &victim)) return 2;
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                     .l_start = (off_t)(PDSHM_OFD_SLOT_BASE + victim), .l_len = 1};
  if (fcntl(k->seg->fd, F_OFD_SETLK, &fl) < 0) return 3;
  struct pdshm_slot *s = pdshm__slot(k->seg, (uint32_t)victim);
  atomic_store(&s->state, PDSHM_SLOT_REAPING);
  s->reaper_pid = (uint32_t)getpid();
  if (kid_say(k, 1)) return 4;
  raise(SIGKILL);
  return 5;
}

START_TEST(reaper_killed_mid_reap) {
  make(8u << 20, 8, 0);
  uint64_t u0 = stats(g_seg).used;
  struct kid a = {.arg = {1}}, r = {0};
  kid_start(&a, kid_attach_pause);
  uint32_t as = (uint32_t)kid_recv(&a);
  kid_start(&r, kid_half_reaper);
  uint32_t rs = (uint32_t)kid_recv(&r);
  kid_kill(&a);
  kid_send(&r, as);
  ck_assert_uint_eq(kid_recv(&r), 1);
  ck_assert_int_eq(kid_end(&r), 128 + SIGKILL);
  ck_assert_uint_eq(slot_state(as), PDSHM_SLOT_REAPING);
  pdshm_stats st = stats(g_seg);
  ck_assert_uint_eq(st.procs_dead, 2);
  ck_assert_uint_eq(st.procs_alive, 1);
  ck_assert_uint_eq(reap(g_seg), 2);
  ck_assert_uint_eq(slot_state(as), PDSHM_SLOT_FREE);
  ck_assert_uint_eq(slot_state(rs), PDSHM_SLOT_FREE);
  st = stats(g_seg);
  ck_assert_uint_eq(st.procs_dead, 0);
  ck_assert_uint_eq(st.used, u0);
  ck_assert_int_eq(pdshm__heap_check(g_seg, stderr), 0);
  ck_assert_int_eq(pdshm_check(g_seg, stderr), 0);
}
END_TEST

/* ---- robust locks ------------------------------------------------------------- */

enum { HOLD_EXIT, HOLD_RAISE_KILL, HOLD_KILLED, HOLD_KILLED_WHILE_WAITED, HOLD_MODES };

/* Until someone sleeps on lock i, which this process holds: glibc's futex
 * word says so (FUTEX_WAITERS); elsewhere, time enough for the test to
 * block on it.  At most 10 s. */
static void await_a_waiter(pdshm_seg *seg, uint32_t i) {
#ifdef HAVE_GLIBC_MUTEX_LOCK_WORD
  const pthread_mutex_t *m = &pdshm__lockent(seg, i)->mutex;
  for (int ms = 0; ms < 10000; ms++) {
    if (__atomic_load_n(&m->__data.__lock, __ATOMIC_ACQUIRE) & FUTEX_WAITERS) return;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
#else
  (void)seg;
  (void)i;
  nanosleep(&(struct timespec){0, 200 * 1000000}, NULL);
#endif
}

/* Takes lock arg[0], reports, and leaves it held in the way arg[1] says. */
static int kid_lock_holder(struct kid *k) {
  if (pdshm_attach(g_name, NULL, &k->seg)) return 1;
  if (pdshm__lock(k->seg, (uint32_t)k->arg[0])) return 2;
  if (kid_say(k, k->seg->slot)) return 3;
  switch (k->arg[1]) {
  case HOLD_EXIT: _exit(0);
  case HOLD_RAISE_KILL: raise(SIGKILL); break;
  case HOLD_KILLED_WHILE_WAITED:
    await_a_waiter(k->seg, (uint32_t)k->arg[0]);
    raise(SIGKILL);
    break;
  }
  for (;;) pause();
}

START_TEST(robust_lock_holder_dies) {
  int mode = _i;
  make(8u << 20, 8, 0);
  uint32_t li = claim(g_seg);
  struct pdshm_lock *l = lk(li);
  uint64_t acq0 = l->acquisitions, died0 = l->owner_died, cont0 = l->contended;
  struct kid k = {.arg = {li, (uint64_t)mode}};
  kid_start(&k, kid_lock_holder);
  kid_recv(&k);
  if (mode == HOLD_KILLED) kid_kill(&k);
  else if (mode != HOLD_KILLED_WHILE_WAITED)
    ck_assert_int_eq(kid_end(&k), mode == HOLD_EXIT ? 0 : 128 + SIGKILL);
  uint64_t t0 = tu_now_ns();
  ck_assert_int_eq(pdshm__lock(g_seg, li), 0); /* EOWNERDEAD: counted below */
  uint64_t dt = tu_now_ns() - t0;
  ck_assert_msg(dt < 10000000000ull, "pdshm__lock hung %llu ms after the holder died",
                (unsigned long long)(dt / 1000000));
  ck_assert_uint_eq(l->owner_died, died0 + 1);
  ck_assert_uint_eq(atomic_load(&l->holder_slot), g_seg->slot);
  pdshm__unlock(g_seg, li);
  if (mode == HOLD_KILLED_WHILE_WAITED) {
    ck_assert_int_eq(kid_end(&k), 128 + SIGKILL);
    ck_assert_uint_eq(l->contended, cont0 + 1); /* we did wait for it */
    ck_assert_uint_gt(l->wait_ns, 0);
  }
  /* made consistent: the next taker sees an ordinary lock */
  ck_assert_int_eq(pdshm__lock(g_seg, li), 0);
  ck_assert_uint_eq(l->owner_died, died0 + 1);
  pdshm__unlock(g_seg, li);
  ck_assert_int_eq(pdshm__trylock(g_seg, li), 0);
  pdshm__unlock(g_seg, li);
  ck_assert_uint_eq(l->acquisitions, acq0 + 4);
  ck_assert_int_eq(atomic_load(&g_seg->hdr->poisoned), 0);
}
END_TEST

#define HAMMER_MS 100

/* Meets the other hammerer at a barrier (word arg[1] + 8), then for
 * HAMMER_MS takes lock arg[0] over and over, incrementing the word at arg[1]
 * under it; reports how many times it took it. */
static int kid_hammer(struct kid *k) {
  if (kid_attach(k)) return 1;
  uint32_t li = (uint32_t)k->arg[0];
  volatile uint64_t *w = PDSHM_AT(k->seg->base, k->arg[1], uint64_t);
  _Atomic uint64_t *arrived = PDSHM_AT(k->seg->base, k->arg[1] + 8, _Atomic uint64_t);
  atomic_fetch_add(arrived, 1);
  while (atomic_load(arrived) < 2) continue;
  uint64_t n = 0, end = tu_now_ns() + HAMMER_MS * 1000000ull;
  do {
    for (int i = 0; i < 100; i++, n++) {
      if (pdshm__lock(k->seg, li)) return 3;
      uint64_t v = *w;
      for (volatile int spin = 0; spin < 50; spin++) continue;
      *w = v + 1;
      pdshm__unlock(k->seg, li);
    }
  } while (tu_now_ns() < end);
  if (kid_say(k, n)) return 4;
  return pdshm_detach(k->seg) ? 5 : 0;
}

START_TEST(contention_is_counted) {
  make(8u << 20, 8, 0);
  uint32_t li = claim(g_seg);
  struct pdshm_lock *l = lk(li);
  uint64_t acq0 = l->acquisitions, cont0 = l->contended, wait0 = l->wait_ns;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(g_seg);
  pdshm_off_t word;
  ck_assert_int_eq(pdshm__alloc(g_seg, ln, 16, PDSHM_T_RAW, &word), 0);
  pdshm__lane_put(ln);
  memset(PDSHM_AT(g_seg->base, word, void), 0, 16);
  struct kid k[2] = {{.arg = {li, word}}, {.arg = {li, word}}};
  for (int i = 0; i < 2; i++) kid_start(&k[i], kid_hammer);
  uint64_t n = 0;
  for (int i = 0; i < 2; i++) {
    kid_recv(&k[i]); /* its slot */
    n += kid_recv(&k[i]);
  }
  for (int i = 0; i < 2; i++) ck_assert_int_eq(kid_end(&k[i]), 0);
  ck_assert_uint_eq(*PDSHM_AT(g_seg->base, word, uint64_t), n); /* exclusion */
  ck_assert_uint_eq(l->acquisitions - acq0, n);
  ck_assert_uint_gt(l->contended - cont0, 0);
  ck_assert_uint_le(l->contended - cont0, n);
  ck_assert_uint_gt(l->wait_ns - wait0, 0);
  ck_assert_uint_eq(l->owner_died, 0);
}
END_TEST

/* Takes the heap lock; with arg[0], empties the bins as a death in the middle
 * of an update could; then waits to be killed. */
static int kid_heap_holder(struct kid *k) {
  if (pdshm_attach(g_name, NULL, &k->seg)) return 1;
  if (pdshm__lock(k->seg, PDSHM_LOCK_HEAP)) return 2;
  if (k->arg[0]) {
    struct pdshm_heap *h = &k->seg->hdr->heap;
    memset(h->nonempty, 0, sizeof h->nonempty);
    memset(h->bins, 0, sizeof h->bins);
  }
  if (kid_say(k, k->seg->slot)) return 3;
  for (;;) pause();
}

START_TEST(heap_lock_holder_killed) {
  make(8u << 20, 8, 0);
  uint64_t u0 = stats(g_seg).used;
  uint64_t rebuilds0 = g_seg->hdr->heap.rebuilds, died0 = lk(PDSHM_LOCK_HEAP)->owner_died;
  struct kid k = {.arg = {(uint64_t)_i}};
  kid_start(&k, kid_heap_holder);
  kid_recv(&k);
  kid_kill(&k);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(g_seg);
  pdshm_off_t big, small;
  int rc = pdshm__alloc(g_seg, ln, 256u << 10, PDSHM_T_RAW, &big); /* takes the heap lock */
  ck_assert_msg(rc == 0, "alloc after the heap lock's holder died: %s", pdshm_err_name(rc));
  memset(PDSHM_AT(g_seg->base, big, void), 0xab, 256u << 10);
  ck_assert_int_eq(pdshm__alloc(g_seg, ln, 100, PDSHM_T_RAW, &small), 0);
  pdshm__free(g_seg, ln, small);
  pdshm__free(g_seg, ln, big);
  pdshm__lane_put(ln);
  ck_assert_uint_eq(g_seg->hdr->heap.rebuilds, rebuilds0 + 1);
  ck_assert_uint_eq(lk(PDSHM_LOCK_HEAP)->owner_died, died0 + 1);
  ck_assert_int_eq(pdshm__heap_check(g_seg, stderr), 0);
  ck_assert_uint_eq(reap(g_seg), 1);
  ck_assert_int_eq(pdshm__heap_check(g_seg, stderr), 0);
  ck_assert_uint_eq(stats(g_seg).used, u0);
  ck_assert_int_eq(atomic_load(&g_seg->hdr->poisoned), 0);
}
END_TEST

/* ---- the lock table ------------------------------------------------------------ */

static unsigned locks_available(void) {
  unsigned n = 0;
  for (uint32_t i = PDSHM_LOCK_FIXED; i < g_seg->hdr->max_locks; i++)
    n += atomic_load(&lk(i)->alloc) == PDSHM_LOCK_AVAILABLE;
  return n;
}

START_TEST(lock_table_exhaustion) {
  make(8u << 20, 8, PDSHM_LOCKS_MIN);
  ck_assert_uint_eq(g_seg->hdr->max_locks, PDSHM_LOCKS_MIN);
  unsigned avail = locks_available();
  ck_assert_uint_gt(avail, 0);
  pdshm_seg *s = tu_attach(g_name);
  bool *taken = calloc(PDSHM_LOCKS_MIN, 1);
  for (unsigned n = 0; n < avail; n++) {
    uint32_t i = claim(s);
    ck_assert_msg(!taken[i], "lock %u handed out twice", i);
    taken[i] = true;
    ck_assert_uint_eq(atomic_load(&lk(i)->alloc), s->owner_tag);
    ck_assert_uint_eq(lk(i)->kind, PDSHM_LK_SCOPE);
  }
  free(taken);
  uint32_t i = 12345;
  ck_assert_int_eq(pdshm__lock_claim(s, PDSHM_LK_SCOPE, 0, &i), PDSHM_ENOLCK);
  ck_assert_int_eq(pdshm__lock_claim(g_seg, PDSHM_LK_SCOPE, 0, &i), PDSHM_ENOLCK);
  ck_assert_uint_eq(i, 12345);
  ck_assert_uint_eq(locks_available(), 0);
  /* detach returns the entries claimed but never published */
  ck_assert_int_eq(pdshm_detach(s), 0);
  ck_assert_uint_eq(locks_available(), avail);
  claim(g_seg);
  ck_assert_uint_eq(locks_available(), avail - 1);
}
END_TEST

/* Claims arg[0] lock entries, reports them, waits to be killed. */
static int kid_claimer(struct kid *k) {
  if (kid_attach(k)) return 1;
  for (uint64_t n = 0; n < k->arg[0]; n++) {
    uint32_t i;
    if (pdshm__lock_claim(k->seg, PDSHM_LK_SCOPE, 0, &i) || kid_say(k, i)) return 2;
  }
  for (;;) pause();
}

START_TEST(dead_claims_return_to_the_table) {
  make(8u << 20, 8, PDSHM_LOCKS_MIN);
  unsigned avail = locks_available();
  struct kid k = {.arg = {10}};
  kid_start(&k, kid_claimer);
  uint32_t slot = (uint32_t)kid_recv(&k), idx[10];
  for (int n = 0; n < 10; n++) idx[n] = (uint32_t)kid_recv(&k);
  kid_kill(&k);
  for (int n = 0; n < 10; n++) ck_assert_uint_eq(atomic_load(&lk(idx[n])->alloc), slot + 1);
  ck_assert_uint_eq(locks_available(), avail - 10);
  ck_assert_uint_eq(reap(g_seg), 1);
  for (int n = 0; n < 10; n++)
    ck_assert_uint_eq(atomic_load(&lk(idx[n])->alloc), PDSHM_LOCK_AVAILABLE);
  ck_assert_uint_eq(locks_available(), avail);
}
END_TEST

/* ---- the suite -------------------------------------------------------------------- */

static Suite *proc_suite(void) {
  Suite *s = suite_create("processes");
  TCase *tc = kid_tcase(s, "slots", 15);
  tcase_add_test(tc, slot_exhaustion_then_reap);
  tcase_add_test(tc, killed_child_is_dead_until_reaped);
  tcase_add_test(tc, stopped_child_is_not_reaped);
  tcase_add_test(tc, liveness_ignores_the_pid);
  tcase_add_test(tc, attach_reaps_the_dead);
  tcase_add_test(tc, reaper_killed_mid_reap_marked_by_hand);
  tcase_add_test(tc, reaper_killed_mid_reap);
  tc = kid_tcase(s, "locks", 15);
  tcase_add_loop_test(tc, robust_lock_holder_dies, 0, HOLD_MODES);
  tcase_add_test(tc, contention_is_counted);
  tcase_add_loop_test(tc, heap_lock_holder_killed, 0, 2);
  tcase_add_test(tc, lock_table_exhaustion);
  tcase_add_test(tc, dead_claims_return_to_the_table);
  return s;
}

int main(void) { return tu_run(proc_suite()) ? 1 : 0; }
