/* testutil.c - helpers shared by the Check suites. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TU_MAX_SEGS 64

static char tu_made[TU_MAX_SEGS][PDSHM_SEG_NAME_MAX + 1];
static int tu_nmade;

const char *tu_name(const char *tag) {
  static char buf[8][PDSHM_SEG_NAME_MAX + 1];
  static unsigned n;
  char *b = buf[n % 8];
  snprintf(b, sizeof buf[0], "t-%s-%d-%u", tag, (int)getpid(), n++);
  return b;
}

const char *tu_path(const char *name) {
  static char buf[PDSHM_SEG_NAME_MAX + 32];
  snprintf(buf, sizeof buf, "/dev/shm/pdshm.%s", name);
  return buf;
}

pdshm_seg *tu_create(const char *tag, size_t size, unsigned procs) {
  return tu_create_as(tu_name(tag), size, procs);
}

/* pdshm_create, waiting up to TU_SPACE_WAIT_S for room while /dev/shm is
 * full: make check runs two programs at once (-j2), the Python suite among
 * them, and in a 64 MiB /dev/shm (CI's Docker-sized step) what the other
 * one holds at the moment can leave too little. */
#define TU_SPACE_WAIT_S 120
static int create_waiting(const char *name, const pdshm_options *o, pdshm_seg **seg) {
  int rc = pdshm_create(name, o, seg);
  for (int i = 0; rc == PDSHM_ENOSPC && i < TU_SPACE_WAIT_S * 20; i++) {
    if (!i) fprintf(stderr, "testutil: /dev/shm is full for %s; waiting for room\n", name);
    usleep(50000);
    rc = pdshm_create(name, o, seg);
  }
  return rc;
}

pdshm_seg *tu_create_as(const char *name, size_t size, unsigned procs) {
  size = size ? size : (8u << 20);
  pdshm_options o = {.size = size, .max_procs = procs, .max_size = size};
  pdshm_seg *seg = NULL;
  pdshm_unlink(name);
  int rc = create_waiting(name, &o, &seg);
  ck_assert_msg(rc == 0, "create %s: %s (%s)", name, pdshm_strerror(rc), pdshm_last_error());
  if (tu_nmade < TU_MAX_SEGS) snprintf(tu_made[tu_nmade++], sizeof tu_made[0], "%s", name);
  return seg;
}

void tu_track(const char *name) {
  for (int i = 0; i < tu_nmade; i++)
    if (!strcmp(tu_made[i], name)) return;
  if (tu_nmade < TU_MAX_SEGS) snprintf(tu_made[tu_nmade++], sizeof tu_made[0], "%s", name);
}

pdshm_seg *tu_create_opts(const char *name, const pdshm_options *o) {
  pdshm_seg *seg = NULL;
  pdshm_unlink(name);
  int rc = create_waiting(name, o, &seg);
  ck_assert_msg(rc == 0, "create %s: %s (%s)", name, pdshm_strerror(rc), pdshm_last_error());
  tu_track(name);
  return seg;
}

pdshm_seg *tu_attach(const char *name) {
  pdshm_seg *seg = NULL;
  int rc = pdshm_attach(name, NULL, &seg);
  ck_assert_msg(rc == 0, "attach %s: %s (%s)", name, pdshm_strerror(rc), pdshm_last_error());
  return seg;
}

void tu_cleanup(void) {
  for (int i = 0; i < tu_nmade; i++) pdshm_unlink(tu_made[i]);
  tu_nmade = 0;
}

pid_t tu_fork(int (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(fn(arg));
  return pid;
}

int tu_wait(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0) continue;
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return WEXITSTATUS(st);
}

/* The pid in a tu_name() name ("t-<tag>-<pid>-<n>"), or 0. */
static pid_t tu_name_pid(const char *name) {
  const char *last = strrchr(name, '-'), *p = last;
  if (!last || strspn(last + 1, "0123456789") != strlen(last + 1) || !last[1]) return 0;
  while (p > name && p[-1] != '-') p--;
  if (p == name || p == last || strspn(p, "0123456789") != (size_t)(last - p)) return 0;
  return (pid_t)atol(p);
}

/* A failed assertion ends a fork-mode test with _exit(), before its checked
 * teardown: unlink the segments of test processes that are gone. */
void tu_sweep_dead(void) {
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, "pdshm.t-", 8)) continue;
    pid_t pid = tu_name_pid(e->d_name + 8);
    if (pid > 0 && kill(pid, 0) < 0 && errno == ESRCH) pdshm_unlink(e->d_name + 6);
  }
  closedir(d);
}

int tu_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  tu_sweep_dead();
  return failed;
}

pid_t tu_spawn(int (*fn)(void *), void *arg) {
  pid_t parent = getpid();
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* the parent died before the prctl */
    _exit(fn(arg));
  }
  return pid;
}

uint64_t tu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tu_await_dead(pdshm_seg *seg, unsigned n) {
  for (int ms = 0; ms < 5000; ms++) {
    pdshm_stats st;
    ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
    if (st.procs_dead >= n) return;
    usleep(1000);
  }
  ck_abort_msg("%u dead slot(s) never showed up", n);
}

TCase *tu_tcase(Suite *s, const char *name, int timeout, void (*setup)(void),
                void (*teardown)(void)) {
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, timeout);
  suite_add_tcase(s, tc);
  return tc;
}

void *tu_shared(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(p, MAP_FAILED);
  return p; /* an anonymous mapping starts zeroed */
}

uint64_t tu_used(pdshm_seg *seg) {
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  return st.used;
}

uint64_t tu_my_pins(pdshm_seg *seg) {
  pdshm_proc_info pi[64];
  int n = pdshm_procs(seg, pi, 64);
  ck_assert_int_gt(n, 0);
  for (int i = 0; i < n && i < 64; i++)
    if (pi[i].pid == (uint32_t)getpid() && pi[i].state == PDSHM_PROC_ALIVE) return pi[i].pins;
  ck_abort_msg("our slot is missing");
  return 0;
}

pdshm_var *tu_filled(pdshm_scope *s, const char *name, int64_t n, float seed) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_get(s, name, &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &n), 0);
  float *f = pdshm_tensor_data(v);
  for (int64_t i = 0; i < n; i++) f[i] = (float)i + seed;
  return v;
}

void tu_report_fail(struct tu_report *rep, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rep->why, sizeof rep->why, fmt, ap);
  va_end(ap);
  atomic_fetch_add(&rep->fails, 1);
}
