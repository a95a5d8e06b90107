/* daemonutil.c - running the built pdshmd from a test, and trainers to kill. */
#include "daemonutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PDSHMD_PATH
#error "PDSHMD_PATH: the built daemon (Makefile.am passes it)"
#endif

#define DM_MAX 16
#define DM_ARGS 24

static pid_t dm_pids[DM_MAX];
static int dm_npids;
static char dm_logs[DM_MAX][64];
static int dm_nlogs;

static void dm_exec(const char *log, const char *const *argv, bool die_with_test) {
  const char *args[DM_ARGS] = {PDSHMD_PATH};
  int n = 1;
  while (argv[n - 1] && n < DM_ARGS - 1) {
    args[n] = argv[n - 1];
    n++;
  }
  if (die_with_test) prctl(PR_SET_PDEATHSIG, SIGKILL);
  int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd >= 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  execv(PDSHMD_PATH, (char *const *)args);
  _exit(127);
}

static pid_t dm_fork(const char *log, const char *const *argv, bool die_with_test) {
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) dm_exec(log, argv, die_with_test);
  return pid;
}

pid_t dm_start(const char *log, const char *const *argv) {
  pid_t pid = dm_fork(log, argv, true);
  if (dm_npids < DM_MAX) dm_pids[dm_npids++] = pid;
  return pid;
}

int dm_wait(pid_t pid, int timeout_ms) {
  int st;
  for (int ms = 0; ms < timeout_ms; ms++) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
    ck_assert_msg(r == 0, "waitpid %d: %s", (int)pid, strerror(errno));
    usleep(1000);
  }
  kill(pid, SIGKILL);
  ck_abort_msg("pdshmd (pid %d) still running after %d ms", (int)pid, timeout_ms);
  return -1;
}

int dm_run(const char *log, const char *const *argv) {
  return dm_wait(dm_fork(log, argv, true), 10000);
}

void dm_await_claim(pdshm_seg *seg, pid_t pid) {
  pdshm_daemon_info di = {0};
  for (int ms = 0; ms < 10000; ms++) {
    ck_assert_int_eq(pdshm_daemon_status(seg, &di), 0);
    if (di.alive && di.pid == (uint32_t)pid) return;
    usleep(1000);
  }
  ck_abort_msg("pdshmd %d never claimed the segment (pid %u, alive %d)", (int)pid, di.pid,
               di.alive);
}

void dm_await_beats(pdshm_seg *seg) {
  pdshm_daemon_info di;
  ck_assert_int_eq(pdshm_daemon_status(seg, &di), 0);
  uint64_t last = di.beat_ns;
  int moved = 0;
  for (int ms = 0; ms < 10000 && moved < 2; ms++) {
    usleep(1000);
    ck_assert_int_eq(pdshm_daemon_status(seg, &di), 0);
    if (di.beat_ns != last) moved++;
    last = di.beat_ns;
  }
  ck_assert_msg(moved >= 2, "the daemon's heartbeat stopped");
}

const char *dm_log(void) {
  ck_assert_int_lt(dm_nlogs, DM_MAX);
  char *p = dm_logs[dm_nlogs++];
  snprintf(p, sizeof dm_logs[0], "/tmp/pdshmd-test-%d-%d.log", (int)getpid(), dm_nlogs);
  unlink(p);
  return p;
}

bool dm_log_line(const char *log, const char *text, const char *also) {
  FILE *f = fopen(log, "r");
  if (!f) return false;
  char line[2048];
  bool found = false;
  while (!found && fgets(line, sizeof line, f))
    found = strstr(line, text) && (!also || strstr(line, also));
  fclose(f);
  return found;
}

bool dm_log_has(const char *log, const char *text) { return dm_log_line(log, text, NULL); }

void dm_cleanup(void) {
  for (int i = 0; i < dm_npids; i++)
    if (kill(dm_pids[i], SIGKILL) == 0) waitpid(dm_pids[i], NULL, 0);
  dm_npids = 0;
  for (int i = 0; i < dm_nlogs; i++) unlink(dm_logs[i]);
  dm_nlogs = 0;
}

/* ---- trainers ------------------------------------------------------------------- */

void tr_params(pdshm_seg *seg) {
  pdshm_scope *root, *p;
  pdshm_var *v;
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, "params", &p), 0);
  ck_assert_int_eq(pdshm_var_create(p, "X", &v), 0);
  ck_assert_int_eq(pdshm_var_create(p, "S", &v), 0);
  pdshm_scope_release(p);
  pdshm_scope_release(root);
}

static int tr_anon(pdshm_seg *seg) {
  pdshm_scope *root, *s;
  int64_t dim = 1024;
  if (pdshm_root(seg, &root) || pdshm_scope_new(root, NULL, &s)) return 1;
  for (int i = 0; i < TR_VARS; i++) {
    pdshm_var *v;
    if (pdshm_var_new(s, &v) || pdshm_tensor_resize(v, PDSHM_F32, 1, &dim)) return 1;
  }
  return 0; /* the handles stay: the holder's death must release them */
}

static int tr_lock(pdshm_seg *seg, const char *var, int exclusive) {
  pdshm_scope *p;
  if (pdshm_scope_open(seg, "params", &p)) return 1;
  pdshm_var *v = pdshm_find_local_var(p, var);
  return !v || pdshm_var_lock(v, exclusive);
}

static int tr_body(const char *name, unsigned what, int ready) {
  pdshm_seg *seg;
  if (pdshm_attach(name, NULL, &seg)) return 1;
  if ((what & TR_ANON) && tr_anon(seg)) return 2;
  if ((what & TR_XLOCK) && tr_lock(seg, "X", 1)) return 3;
  if ((what & TR_SHOLD) && tr_lock(seg, "S", 0)) return 4;
  if (write(ready, "r", 1) != 1) return 5;
  for (;;) pause();
}

pid_t tr_start(const char *name, unsigned what) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(p[0]);
    _exit(tr_body(name, what, p[1]));
  }
  close(p[1]);
  struct pollfd pfd = {.fd = p[0], .events = POLLIN};
  char c = 0;
  ck_assert_msg(poll(&pfd, 1, 10000) == 1 && read(p[0], &c, 1) == 1,
                "trainer %d never got ready (what %u)", (int)pid, what);
  close(p[0]);
  return pid;
}
