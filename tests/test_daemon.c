/* test_daemon.c - the built pdshmd against real processes: trainers killed
 * with SIGKILL have their holds released by the daemon, by pidfd well
 * before a long interval; a stopped trainer is not reaped; one daemon per
 * segment; --create / --adopt and usage errors; SIGTERM / SIGINT stop it
 * cleanly; --unlink-on-exit; a daemonized pdshmd and its pid file.
 *
 * The tests assert events (who reaped, what is free, what a waiter was
 * told), each awaited for at most REAP_BOUND_S seconds, a hang guard; how
 * soon pdshmd releases a dead process's holds is bench/bench_recovery's
 * figure ("the same, pdshmd running"), against a baseline of its run. */
#include "config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemonutil.h"

#define INTERVAL "1000" /* ms: the daemon's full pass */
#define REAP_BOUND_S 10

static char seg_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;

static void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("dmn"));
  seg = tu_create_as(seg_name, 16u << 20, 16);
  tr_params(seg);
}

static void teardown(void) {
  dm_cleanup();
  if (seg) pdshm_detach(seg);
  tu_cleanup();
}

static pdshm_stats stats_now(void) {
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  return st;
}

/* A daemon adopting our segment, in the foreground, once it holds the claim. */
static pid_t start_daemon(const char *log, const char *interval) {
  pid_t d = dm_start(log, (const char *[]){seg_name, "--adopt", "--foreground", "--interval",
                                           interval, NULL});
  dm_await_claim(seg, d);
  return d;
}

/* Waits until `alive` processes are attached, none dead, and used is back
 * to `used`; fails after REAP_BOUND_S seconds. */
static void await_reaped(unsigned alive, uint64_t used) {
  pdshm_stats st;
  uint64_t end = tu_now_ns() + REAP_BOUND_S * 1000000000ull;
  do {
    st = stats_now();
    if (st.procs_alive == alive && st.procs_dead == 0 && st.used == used) return;
    usleep(1000);
  } while (tu_now_ns() < end);
  ck_abort_msg("not reaped in %d s: %u alive, %u dead, used %llu (baseline %llu)", REAP_BOUND_S,
               st.procs_alive, st.procs_dead, (unsigned long long)st.used,
               (unsigned long long)used);
}

static int var_lock_state(const pdshm_var_info *vi, void *arg) {
  if (!strcmp(vi->name, "X") || !strcmp(vi->name, "S"))
    ck_assert_msg(vi->lock_state == PDSHM_VLOCK_FREE, "params/%s: lock state %d, %llu readers",
                  vi->name, vi->lock_state, (unsigned long long)vi->lock_readers);
  ++*(int *)arg;
  return 0;
}

static int params_id(const pdshm_scope_info *si, void *arg) {
  if (si->depth == 1 && !strcmp(si->name, "params")) *(uint64_t *)arg = si->id;
  return 0;
}

/* The lock words of params/X and params/S are free (the inspector's view:
 * no owner, no shared holder counted). */
static void params_locks_free(void) {
  uint64_t id = 0;
  int n = 0;
  ck_assert_int_eq(pdshm_inspect_scopes(seg, params_id, &id), 0);
  ck_assert_uint_ne(id, 0);
  ck_assert_int_eq(pdshm_inspect_vars(seg, id, var_lock_state, &n), 0);
  ck_assert_int_ge(n, 2);
}

static pdshm_var *param(const char *name) {
  pdshm_scope *p;
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &p), 0);
  pdshm_var *v = pdshm_find_local_var(p, name);
  pdshm_scope_release(p);
  ck_assert_ptr_nonnull(v);
  return v;
}

static void kill_all(const pid_t *pids, int n) {
  for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
  for (int i = 0; i < n; i++) ck_assert_int_eq(tu_wait(pids[i]), 128 + SIGKILL);
}

/* A "reaped pid N" line, noticed by `how` (NULL: any way), within
 * REAP_BOUND_S: the daemon writes it after the reap's commit, which is
 * what await_reaped sees, so on a busy machine it can come a moment later. */
static bool reaped_logged(const char *log, pid_t pid, const char *how) {
  char text[64], by[32];
  snprintf(text, sizeof text, "reaped pid %d (slot", (int)pid);
  snprintf(by, sizeof by, "found by %s)", how ? how : "");
  for (uint64_t t0 = tu_now_ns(); tu_now_ns() - t0 < REAP_BOUND_S * 1000000000ull;
       usleep(10000))
    if (dm_log_line(log, text, how ? by : NULL)) return true;
  return false;
}

START_TEST(killed_trainers_released_by_the_daemon) {
  const char *log = dm_log();
  pid_t d = start_daemon(log, INTERVAL);
  uint64_t used = stats_now().used;
  pid_t tr[4] = {tr_start(seg_name, TR_ANON), tr_start(seg_name, TR_ANON | TR_XLOCK),
                 tr_start(seg_name, TR_SHOLD), tr_start(seg_name, TR_ANON | TR_SHOLD)};
  ck_assert_uint_gt(stats_now().used, used + 4 * TR_VARS * 4096u);
  kill_all(tr, 4);
  await_reaped(2, used);
  for (int i = 0; i < 4; i++)
    ck_assert_msg(reaped_logged(log, tr[i], NULL), "no log line for pid %d", (int)tr[i]);
  /* The daemon's reaps freed the lock words: a take finds them free. */
  params_locks_free();
  ck_assert_int_eq(pdshm_var_lock(param("X"), 1), 0);
  ck_assert_int_eq(pdshm_var_lock(param("S"), 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(param("X")), 0);
  ck_assert_int_eq(pdshm_var_unlock(param("S")), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(kill(d, SIGTERM), 0);
  ck_assert_int_eq(dm_wait(d, 10000), 0);
}
END_TEST

START_TEST(pidfd_reaps_before_a_long_interval) {
  const char *log = dm_log();
  start_daemon(log, "60000");
  uint64_t used = stats_now().used;
  pid_t tr = tr_start(seg_name, TR_ANON | TR_XLOCK);
  dm_await_beats(seg); /* the daemon has read the table: it watches tr */
  kill_all(&tr, 1);
  await_reaped(2, used); /* REAP_BOUND_S, well before the interval */
  bool pidfd = !dm_log_has(log, "no pidfd_open");
  ck_assert_msg(reaped_logged(log, tr, pidfd ? "pidfd" : "scan"), "reap of %d not logged as %s",
                (int)tr, pidfd ? "pidfd" : "scan");
}
END_TEST

/* A group member that waits to be killed. */
static int member_main(void *arg) {
  pdshm_seg *s;
  pdshm_group *g;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_group_join(s, "dg", 2, 1, &g)) return 1;
  *(volatile int *)arg = 1;
  pause();
  return 0;
}

/* Kills the member once this thread's caller may be in its barrier. */
static void *kill_later(void *arg) {
  usleep(100000);
  kill(*(pid_t *)arg, SIGKILL);
  return NULL;
}

/* The daemon's pidfd notices the death, its reap breaks the round and wakes
 * the survivor in its barrier (or the survivor's own look between its
 * slices gets there first): told of the death (EOWNERDEAD), not left to
 * its 10 s timeout. */
START_TEST(group_survivor_told_at_once) {
  const char *log = dm_log();
  pid_t d = start_daemon(log, "60000");
  pdshm_group *g;
  ck_assert_int_eq(pdshm_group_join(seg, "dg", 2, 0, &g), 0);
  int *joined = tu_shared(sizeof *joined);
  pid_t member = tu_spawn(member_main, joined);
  while (!*(volatile int *)joined) usleep(1000);
  dm_await_beats(seg); /* the daemon has read the table: it watches the member */
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, kill_later, &member), 0);
  ck_assert_int_eq(pdshm_group_barrier(g, 10000000000ll), PDSHM_EOWNERDEAD);
  pthread_join(t, NULL);
  tu_wait(member);
  /* The daemon reaps it, unless the survivor's own look at its members'
   * liveness got there first (a loaded machine): either way, it is reaped. */
  bool reaped = false;
  for (uint64_t end = tu_now_ns() + REAP_BOUND_S * 1000000000ull; !reaped && tu_now_ns() < end;) {
    reaped = reaped_logged(log, member, NULL) || stats_now().procs_dead == 0;
    if (!reaped) usleep(10000);
  }
  ck_assert_msg(reaped, "pid %d was not reaped", (int)member);
  ck_assert_int_eq(pdshm_group_leave(g), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(kill(d, SIGTERM), 0);
  ck_assert_int_eq(dm_wait(d, 10000), 0);
}
END_TEST

START_TEST(stopped_trainer_is_not_reaped) {
  const char *log = dm_log();
  start_daemon(log, "50");
  uint64_t used = stats_now().used;
  pid_t tr = tr_start(seg_name, TR_ANON | TR_XLOCK);
  uint64_t held = stats_now().used;
  ck_assert_int_eq(kill(tr, SIGSTOP), 0);
  /* Several full passes (one per 50 ms) run while it is stopped. */
  for (int i = 0; i < 5; i++) dm_await_beats(seg);
  pdshm_stats st = stats_now();
  ck_assert_uint_eq(st.procs_alive, 3);
  ck_assert_uint_eq(st.used, held);
  ck_assert(!reaped_logged(log, tr, NULL));
  kill_all(&tr, 1);
  await_reaped(2, used);
}
END_TEST

START_TEST(one_daemon_per_segment) {
  const char *log = dm_log(), *log2 = dm_log();
  pid_t d = start_daemon(log, INTERVAL);
  int st = dm_run(log2, (const char *[]){seg_name, "--adopt", "--foreground", NULL});
  ck_assert_int_eq(st, 1);
  char text[64];
  snprintf(text, sizeof text, "has a daemon: pid %d", (int)d);
  ck_assert_msg(dm_log_has(log2, text), "second daemon's reason lacks \"%s\"", text);
  /* The library says the same to anyone. */
  ck_assert_int_eq(pdshm_daemon_claim(seg), PDSHM_EBUSY);
  ck_assert_ptr_nonnull(strstr(pdshm_last_error(), text));
  /* A read-only attachment (an inspector) sees who holds it. */
  pdshm_options ro = {.flags = PDSHM_RDONLY};
  pdshm_seg *r;
  ck_assert_int_eq(pdshm_attach(seg_name, &ro, &r), 0);
  pdshm_daemon_info di;
  ck_assert_int_eq(pdshm_daemon_status(r, &di), 0);
  ck_assert_uint_eq(di.pid, (uint32_t)d);
  ck_assert_int_eq(di.alive, 1);
  ck_assert_uint_gt(di.beat_ns, 0);
  ck_assert_int_eq(pdshm_daemon_claim(r), PDSHM_EROFS);
  ck_assert_int_eq(pdshm_daemon_status(r, NULL), PDSHM_EINVAL);
  pdshm_detach(r);
}
END_TEST

START_TEST(sigterm_stops_cleanly) {
  const char *log = dm_log();
  pid_t d = start_daemon(log, "100");
  pdshm_daemon_info a, b;
  ck_assert_int_eq(pdshm_daemon_status(seg, &a), 0);
  dm_await_beats(seg);
  ck_assert_int_eq(pdshm_daemon_status(seg, &b), 0);
  ck_assert_uint_gt(b.beat_ns, a.beat_ns);
  ck_assert_int_eq(kill(d, SIGTERM), 0);
  ck_assert_int_eq(dm_wait(d, 10000), 0);
  ck_assert_int_eq(pdshm_daemon_status(seg, &a), 0);
  ck_assert_uint_eq(a.pid, 0);
  ck_assert_int_eq(a.alive, 0);
  ck_assert_uint_eq(a.beat_ns, 0);
  ck_assert_int_eq(stats_now().procs_alive, 1);
  ck_assert(dm_log_has(log, "stopping"));
  /* Not unlinked without --unlink-on-exit; a new daemon may claim it. */
  struct stat sb;
  ck_assert_int_eq(stat(tu_path(seg_name), &sb), 0);
  ck_assert_int_eq(pdshm_daemon_claim(seg), 0);
  ck_assert_int_eq(pdshm_daemon_release(seg), 0);
  ck_assert_int_eq(pdshm_daemon_release(seg), PDSHM_EPERM);
}
END_TEST

START_TEST(killed_daemon_leaves_no_claim) {
  pid_t d = start_daemon(dm_log(), INTERVAL);
  kill(d, SIGKILL);
  ck_assert_int_eq(dm_wait(d, 10000), 128 + SIGKILL);
  pdshm_daemon_info di = {0};
  for (int ms = 0; ms < 5000; ms++) { /* the lock goes with its last file reference */
    ck_assert_int_eq(pdshm_daemon_status(seg, &di), 0);
    if (!di.alive) break;
    usleep(1000);
  }
  ck_assert_int_eq(di.alive, 0);
  ck_assert_uint_eq(di.pid, (uint32_t)d); /* what the header recorded */
  pid_t d2 = start_daemon(dm_log(), INTERVAL);
  ck_assert_int_ne(d2, d);
}
END_TEST

START_TEST(create_and_adopt) {
  const char *log = dm_log();
  const char *fresh = tu_name("dmn-new");
  tu_track(fresh);
  ck_assert_int_eq(dm_run(log, (const char *[]){fresh, "--adopt", "--foreground", NULL}), 1);
  ck_assert(dm_log_has(log, "no such segment"));
  ck_assert_int_eq(dm_run(log, (const char *[]){seg_name, "--create", "--foreground", NULL}), 1);
  ck_assert(dm_log_has(log, "it exists"));
  /* --create makes it with the size asked for; SIGINT stops it. */
  pid_t d = dm_start(log, (const char *[]){fresh, "--create", "--size", "4M", "--max-procs", "8",
                                           "--foreground", NULL});
  pdshm_seg *s = NULL;
  for (int ms = 0; ms < 10000 && pdshm_attach(fresh, NULL, &s); ms++) usleep(1000);
  ck_assert_ptr_nonnull(s);
  dm_await_claim(s, d);
  struct stat sb;
  ck_assert_int_eq(stat(tu_path(fresh), &sb), 0);
  ck_assert_int_eq(sb.st_size, 4 << 20);
  kill(d, SIGINT);
  ck_assert_int_eq(dm_wait(d, 10000), 0);
  pdshm_detach(s);
  ck_assert_int_eq(stat(tu_path(fresh), &sb), 0);
}
END_TEST

START_TEST(unlink_on_exit) {
  const char *fresh = tu_name("dmn-unl");
  tu_track(fresh);
  pid_t d = dm_start(dm_log(), (const char *[]){fresh, "--size", "2M", "--foreground",
                                                "--unlink-on-exit", NULL});
  pdshm_seg *s = NULL;
  for (int ms = 0; ms < 10000 && pdshm_attach(fresh, NULL, &s); ms++) usleep(1000);
  ck_assert_ptr_nonnull(s);
  dm_await_claim(s, d);
  kill(d, SIGTERM);
  ck_assert_int_eq(dm_wait(d, 10000), 0);
  struct stat sb;
  ck_assert_int_eq(stat(tu_path(fresh), &sb), -1);
  /* An attachment outlives the name. */
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(s, &root), 0);
  pdshm_scope_release(root);
  pdshm_detach(s);
}
END_TEST

/* The first number in a file, or -1. */
static long read_pid(const char *path) {
  FILE *f = fopen(path, "r");
  long pid = -1;
  if (f && fscanf(f, "%ld", &pid) != 1) pid = -1;
  if (f) fclose(f);
  return pid;
}

START_TEST(daemonized_with_pidfile) {
  char pidfile[64]; /* relative: the daemon, which changes to /, makes it absolute */
  snprintf(pidfile, sizeof pidfile, "pdshmd-test-%d.pid", (int)getpid());
  /* The daemon's parent exits: adopt it, so that it can be waited for. */
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int st = dm_run(dm_log(), (const char *[]){seg_name, "--adopt", "--pidfile", pidfile,
                                             "--interval", "100", NULL});
  ck_assert_int_eq(st, 0);
  long pid = read_pid(pidfile); /* written before the command returned */
  ck_assert_int_gt(pid, 0);
  ck_assert_int_eq(kill((pid_t)pid, 0), 0);
  ck_assert_int_ne(getsid((pid_t)pid), getsid(0));
  dm_await_claim(seg, (pid_t)pid);
  ck_assert_int_eq(kill((pid_t)pid, SIGTERM), 0);
  ck_assert_int_eq(dm_wait((pid_t)pid, 10000), 0);
  ck_assert_int_eq(access(pidfile, F_OK), -1);
}
END_TEST

START_TEST(usage_errors) {
  const char *log = dm_log();
  static const char *const bad[][6] = {
      {NULL},
      {"a", "b", NULL},
      {"a", "--create", "--adopt", NULL},
      {"a", "--adopt", "--size", "8M", NULL},
      {"a", "--size", "12X", NULL},
      {"a", "--size", "0", NULL},
      {"a", "--interval", "0", NULL},
      {"a", "--max-procs", "x", NULL},
      {"a", "--interval", NULL},
      {"a", "--bogus", NULL},
      {"a/b", "--foreground", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    FILE *f = fopen(log, "w");
    if (f) fclose(f);
    ck_assert_msg(dm_run(log, bad[i]) == 2, "case %zu: not a usage error", i);
    FILE *r = fopen(log, "r");
    char line[512] = "", extra[8];
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, r));
    ck_assert_msg(!fgets(extra, sizeof extra, r), "case %zu: more than one line", i);
    fclose(r);
    ck_assert_msg(!strncmp(line, "pdshmd: ", 8), "case %zu: %s", i, line);
  }
  ck_assert_int_eq(dm_run(log, (const char *[]){"--help", NULL}), 0);
  ck_assert(dm_log_has(log, "usage: pdshmd NAME"));
  ck_assert_int_eq(dm_run(log, (const char *[]){"--version", NULL}), 0);
  ck_assert(dm_log_has(log, "pdshmd " PACKAGE_VERSION));
}
END_TEST

static Suite *daemon_suite(void) {
  Suite *s = suite_create("daemon");
  TCase *tc = tu_tcase(s, "pdshmd", 30, setup, teardown);
  tcase_add_test(tc, killed_trainers_released_by_the_daemon);
  tcase_add_test(tc, pidfd_reaps_before_a_long_interval);
  tcase_add_test(tc, group_survivor_told_at_once);
  tcase_add_test(tc, stopped_trainer_is_not_reaped);
  tcase_add_test(tc, one_daemon_per_segment);
  tcase_add_test(tc, sigterm_stops_cleanly);
  tcase_add_test(tc, killed_daemon_leaves_no_claim);
  tcase_add_test(tc, create_and_adopt);
  tcase_add_test(tc, unlink_on_exit);
  tcase_add_test(tc, daemonized_with_pidfile);
  tcase_add_test(tc, usage_errors);
  return s;
}

int main(void) { return tu_run(daemon_suite()) ? 1 : 0; }
