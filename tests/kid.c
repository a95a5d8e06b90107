/* kid.c - what test_proc and test_journal share: a segment per test, and
 * helper processes ("kids") that talk to the test through pipes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
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

#include "kid.h"

char g_name[PDSHM_SEG_NAME_MAX + 1];
pdshm_seg *g_seg;

void setup(void) { g_seg = NULL; }

void teardown(void) {
  if (g_seg) pdshm_detach(g_seg);
  g_seg = NULL;
  tu_cleanup();
}

void make(size_t size, unsigned procs, unsigned locks) {
  pdshm_options o = {.size = size, .max_procs = procs, .max_locks = locks, .max_size = size};
  snprintf(g_name, sizeof g_name, "%s", tu_name("proc"));
  g_seg = tu_create_opts(g_name, &o);
}

pdshm_stats stats(pdshm_seg *s) {
  pdshm_stats st;
  int rc = pdshm_seg_stats(s, &st);
  ck_assert_msg(rc == 0, "stats: %s", pdshm_strerror(rc));
  return st;
}

unsigned reap(pdshm_seg *s) {
  unsigned n = 999;
  int rc = pdshm_reap(s, &n);
  ck_assert_msg(rc == 0, "reap: %s (%s)", pdshm_err_name(rc), pdshm_last_error());
  return n;
}

uint32_t slot_state(uint32_t i) { return atomic_load(&pdshm__slot(g_seg, i)->state); }

struct pdshm_lock *lk(uint32_t i) { return pdshm__lockent(g_seg, i); }

uint32_t claim(pdshm_seg *s) {
  uint32_t i = 0;
  int rc = pdshm__lock_claim(s, PDSHM_LK_SCOPE, 0, &i);
  ck_assert_msg(rc == 0, "lock claim: %s", pdshm_strerror(rc));
  ck_assert_uint_ge(i, PDSHM_LOCK_FIXED);
  ck_assert_uint_lt(i, s->hdr->max_locks);
  return i;
}

/* ---- helper processes ---------------------------------------------------- */

static int kid_main(void *a) {
  struct kid *k = a;
  close(k->up[0]);
  close(k->down[1]);
  return k->fn(k);
}

void kid_start(struct kid *k, int (*fn)(struct kid *)) {
  ck_assert_int_eq(pipe(k->up), 0);
  ck_assert_int_eq(pipe(k->down), 0);
  k->fn = fn;
  k->pid = tu_spawn(kid_main, k);
  close(k->up[1]);
  close(k->down[0]);
}

/* In the kid. */
int kid_say(struct kid *k, uint64_t v) {
  return write(k->up[1], &v, sizeof v) == sizeof v ? 0 : -1;
}
int kid_hear(struct kid *k, uint64_t *v) {
  return read(k->down[0], v, sizeof *v) == sizeof *v ? 0 : -1;
}
int kid_attach(struct kid *k) {
  int rc = pdshm_attach(g_name, NULL, &k->seg);
  if (rc) return rc;
  return kid_say(k, k->seg->slot);
}

/* In the test: the kid's next word, within ms milliseconds. */
uint64_t kid_recv_within(struct kid *k, int ms, const char *what) {
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
uint64_t kid_recv(struct kid *k) { return kid_recv_within(k, 10000, "stuck"); }
void kid_send(struct kid *k, uint64_t v) {
  ck_assert_int_eq(write(k->down[1], &v, sizeof v), sizeof v);
}
/* The kernel drops a dead process's OFD locks when the last reference to its
 * open file description goes; that can come a moment after waitpid() when
 * someone else held the dead process's mm (a /proc reader, the OOM reaper).
 * So after a kid's death, wait (bounded) until its slots read as dead. */
void await_slots_dead(pid_t pid) {
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

int kid_end(struct kid *k) {
  close(k->up[0]);
  close(k->down[1]);
  int st = tu_wait(k->pid);
  if (g_seg) await_slots_dead(k->pid);
  return st;
}
void kid_kill(struct kid *k) {
  ck_assert_int_eq(kill(k->pid, SIGKILL), 0);
  ck_assert_int_eq(kid_end(k), 128 + SIGKILL);
}

TCase *kid_tcase(Suite *s, const char *name, int timeout) {
  return tu_tcase(s, name, timeout, setup, teardown);
}
