/* test_proc.c - process slots, liveness and reaping; robust locks and their
 * counters; the lock table; journals committed, aborted and killed in each
 * crash window; poisoning; threads on lanes and locks. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* F_OFD_SETLK */
#endif
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static char g_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *g_seg;

static void setup(void) { g_seg = NULL; }

static void teardown(void) {
  if (g_seg) pdshm_detach(g_seg);
  g_seg = NULL;
  tu_cleanup();
}

static void make(size_t size, unsigned procs, unsigned locks) {
  pdshm_options o = {.size = size, .max_procs = procs, .max_locks = locks};
  snprintf(g_name, sizeof g_name, "%s", tu_name("proc"));
  g_seg = tu_create_opts(g_name, &o);
}

static pdshm_stats stats(pdshm_seg *s) {
  pdshm_stats st;
  int rc = pdshm_seg_stats(s, &st);
  ck_assert_msg(rc == 0, "stats: %s", pdshm_strerror(rc));
  return st;
}

static unsigned reap(pdshm_seg *s) {
  unsigned n = 999;
  int rc = pdshm_reap(s, &n);
  ck_assert_msg(rc == 0, "reap: %s (%s)", pdshm_err_name(rc), pdshm_last_error());
  return n;
}

static uint32_t slot_state(uint32_t i) { return atomic_load(&pdshm__slot(g_seg, i)->state); }

static struct pdshm_lock *lk(uint32_t i) { return pdshm__lockent(g_seg, i); }

static uint32_t claim(pdshm_seg *s) {
  uint32_t i = 0;
  int rc = pdshm__lock_claim(s, PDSHM_LK_VAR, 0, &i);
  ck_assert_msg(rc == 0, "lock claim: %s", pdshm_strerror(rc));
  ck_assert_uint_ge(i, PDSHM_LOCK_FIXED);
  ck_assert_uint_lt(i, s->hdr->max_locks);
  return i;
}

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

static int kid_main(void *a) {
  struct kid *k = a;
  close(k->up[0]);
  close(k->down[1]);
  return k->fn(k);
}

static void kid_start(struct kid *k, int (*fn)(struct kid *)) {
  ck_assert_int_eq(pipe(k->up), 0);
  ck_assert_int_eq(pipe(k->down), 0);
  k->fn = fn;
  k->pid = tu_spawn(kid_main, k);
  close(k->up[1]);
  close(k->down[0]);
}

/* In the kid. */
static int kid_say(struct kid *k, uint64_t v) {
  return write(k->up[1], &v, sizeof v) == sizeof v ? 0 : -1;
}
static int kid_hear(struct kid *k, uint64_t *v) {
  return read(k->down[0], v, sizeof *v) == sizeof *v ? 0 : -1;
}
static int kid_attach(struct kid *k) {
  int rc = pdshm_attach(g_name, NULL, &k->seg);
  if (rc) return rc;
  return kid_say(k, k->seg->slot);
}

/* In the test: the kid's next word, within ms milliseconds. */
static uint64_t kid_recv_within(struct kid *k, int ms, const char *what) {
  struct pollfd p = {.fd = k->up[0], .events = POLLIN};
  ck_assert_msg(poll(&p, 1, ms) == 1, "kid %d said nothing for %d ms: %s", (int)k->pid, ms, what);
  uint64_t v;
  ssize_t n = read(k->up[0], &v, sizeof v);
  if (n != sizeof v) {
    int st = tu_wait(k->pid);
    ck_abort_msg("kid %d went away (status %d)", (int)k->pid, st);
  }
  return v;
}
static uint64_t kid_recv(struct kid *k) { return kid_recv_within(k, 10000, "stuck"); }
static void kid_send(struct kid *k, uint64_t v) {
  ck_assert_int_eq(write(k->down[1], &v, sizeof v), sizeof v);
}
/* The kernel drops a dead process's OFD locks when the last reference to its
 * open file description goes; that can come a moment after waitpid() when
 * someone else held the dead process's mm (a /proc reader, the OOM reaper).
 * So after a kid's death, wait (bounded) until its slots read as dead. */
static void await_slots_dead(pid_t pid) {
  uint64_t deadline = tu_now_ns() + 5000000000ull;
  for (uint32_t i = 0; i < g_seg->hdr->max_procs; i++) {
    struct pdshm_slot *sl = pdshm__slot(g_seg, i);
    if (sl->pid != (uint32_t)pid) continue;
    while (atomic_load(&sl->state) != PDSHM_SLOT_FREE && pdshm__slot_alive(g_seg, i) > 0) {
      ck_assert_msg(tu_now_ns() < deadline, "slot %u of dead kid %d still held after 5 s", i,
                    (int)pid);
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
  }
}

static int kid_end(struct kid *k) {
  close(k->up[0]);
  close(k->down[1]);
  int st = tu_wait(k->pid);
  if (g_seg) await_slots_dead(k->pid);
  return st;
}
static void kid_kill(struct kid *k) {
  ck_assert_int_eq(kill(k->pid, SIGKILL), 0);
  ck_assert_int_eq(kid_end(k), 128 + SIGKILL);
}

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

/* Takes lock arg[0], reports, and leaves it held in the way arg[1] says. */
static int kid_lock_holder(struct kid *k) {
  if (pdshm_attach(g_name, NULL, &k->seg)) return 1;
  if (pdshm__lock(k->seg, (uint32_t)k->arg[0])) return 2;
  if (kid_say(k, k->seg->slot)) return 3;
  switch (k->arg[1]) {
  case HOLD_EXIT: _exit(0);
  case HOLD_RAISE_KILL: raise(SIGKILL); break;
  case HOLD_KILLED_WHILE_WAITED:
    nanosleep(&(struct timespec){0, 200 * 1000000}, NULL);
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
  ck_assert_int_eq(pdshm__lock(g_seg, li), 0);
  uint64_t dt = tu_now_ns() - t0;
  ck_assert_msg(dt < 500000000ull, "pdshm__lock took %llu ms after the holder died",
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
    ck_assert_uint_eq(lk(i)->kind, PDSHM_LK_VAR);
  }
  free(taken);
  uint32_t i = 12345;
  ck_assert_int_eq(pdshm__lock_claim(s, PDSHM_LK_VAR, 0, &i), PDSHM_ENOLCK);
  ck_assert_int_eq(pdshm__lock_claim(g_seg, PDSHM_LK_VAR, 0, &i), PDSHM_ENOLCK);
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
    ck_assert_int_eq(pdshm__lock(g_seg, j_lock), 0);
    ck_assert_uint_lt(tu_now_ns() - t0, 500000000ull);
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

static TCase *tcase(Suite *s, const char *name, int timeout) {
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, timeout);
  suite_add_tcase(s, tc);
  return tc;
}

static Suite *proc_suite(void) {
  Suite *s = suite_create("processes");
  TCase *tc = tcase(s, "slots", 15);
  tcase_add_test(tc, slot_exhaustion_then_reap);
  tcase_add_test(tc, killed_child_is_dead_until_reaped);
  tcase_add_test(tc, stopped_child_is_not_reaped);
  tcase_add_test(tc, liveness_ignores_the_pid);
  tcase_add_test(tc, attach_reaps_the_dead);
  tcase_add_test(tc, reaper_killed_mid_reap_marked_by_hand);
  tcase_add_test(tc, reaper_killed_mid_reap);
  tc = tcase(s, "locks", 15);
  tcase_add_loop_test(tc, robust_lock_holder_dies, 0, HOLD_MODES);
  tcase_add_test(tc, contention_is_counted);
  tcase_add_loop_test(tc, heap_lock_holder_killed, 0, 2);
  tcase_add_test(tc, lock_table_exhaustion);
  tcase_add_test(tc, dead_claims_return_to_the_table);
  tc = tcase(s, "journals", 15);
  tcase_add_test(tc, journal_commit_applies_and_publishes);
  tcase_add_test(tc, journal_abort_changes_nothing);
  tcase_add_loop_test(tc, journal_killed_in_window, 0, 6);
  tcase_add_loop_test(tc, failed_repair_poisons, 0, P_CASES);
  tc = tcase(s, "threads", 30);
  tcase_add_test(tc, threads_on_lanes_and_locks);
  return s;
}

int main(void) { return tu_run(proc_suite()) ? 1 : 0; }
