/*
 * demo - several processes on one segment, one of them killed.
 *
 *   coordinator: creates the segment NAME (default "demo") and a named scope
 *                "params" holding the tensor W; forks 4 trainers.
 *   trainer k:   attaches the segment by name (a fork child never uses its
 *                parent's handle), prints what it sees, waits until all four
 *                are attached, then builds a local scope with its gradient
 *                W@GRAD, reading W in place through the scope chain.
 *   coordinator: SIGKILLs one trainer while it holds its local scope, shows
 *                the dead process in the statistics, reaps it and shows its
 *                slot and memory back; the others release and detach cleanly.
 *
 * The segment stays in /dev/shm for `pdshm-attach NAME`; a segment of that
 * name left by an earlier run is replaced.  `demo --unlink NAME` removes it.
 * Only the public header is used.
 *
 * usage: demo [NAME]
 *        demo --unlink [NAME]
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "example.h"

#define TRAINERS 4
#define VICTIM 2            /* the trainer that is killed                  */
#define SEG_SIZE (16u << 20)
#define W_ROWS 512          /* W and each W@GRAD: f32[512][512], 1 MiB       */
#define W_COLS 512
#define TIMEOUT 60          /* seconds before the demo gives up              */

static void die(const char *what, int rc) {
  fprintf(stderr, "demo: %s: %s%s%s\n", what, pdshm_strerror(rc),
          *pdshm_last_error() ? ": " : "", pdshm_last_error());
  exit(1);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "demo: timed out\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
  _exit(1);
}

/* "12.3 MiB" and the like. */
static const char *human(uint64_t bytes, char *buf, size_t cap) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  unsigned u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

/* One line: who, pid, what (printf-style).  Whole lines, flushed at once, so
 * the processes' lines interleave but never mix. */
static void say(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *who, const char *fmt, ...) {
  char line[512];
  int n = snprintf(line, sizeof line, "%-12s pid %-7d ", who, (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  printf("%s\n", line);
  fflush(stdout);
}

/* "alive 5  dead 0   used   1.2 MiB  free  14.7 MiB   scopes 3  vars 2";
 * *out (may be NULL) gets the numbers. */
static const char *view(pdshm_seg *seg, char *buf, size_t cap, pdshm_stats *out) {
  pdshm_stats st;
  CHECK(pdshm_seg_stats(seg, &st));
  if (out) *out = st;
  char u[32], f[32];
  snprintf(buf, cap, "alive %u  dead %u   used %9s  free %9s   scopes %llu  vars %llu",
           st.procs_alive, st.procs_dead, human(st.used, u, sizeof u),
           human(st.free, f, sizeof f), (unsigned long long)st.scopes,
           (unsigned long long)st.vars);
  return buf;
}

/* ---- the pipes that pace the processes ------------------------------------------ */

/* ready:  trainers -> coordinator, one byte per trainer per phase;
 * start, finish: coordinator -> trainers, released all at once when the
 *         coordinator closes the write end (the trainers read end-of-file). */
static int ready[2], start[2], finish[2];

static void wait_bytes(int fd, int n, const char *what) {
  char c;
  for (int i = 0; i < n; i++) {
    ssize_t r = read(fd, &c, 1);
    if (r != 1) {
      fprintf(stderr, "demo: %s: %s\n", what, r == 0 ? "a process is gone" : strerror(errno));
      exit(1);
    }
  }
}

static void send_byte(int fd) {
  if (write(fd, "r", 1) != 1) {
    perror("demo: write");
    exit(1);
  }
}

/* Blocks until the coordinator closes the pipe's write end. */
static void wait_release(int fd) {
  char c;
  while (read(fd, &c, 1) != 0) continue;
}

/* ---- a trainer -------------------------------------------------------------------- */

static void trainer_step(pdshm_scope *local, const char *who) {
  pdshm_var *w = pdshm_find_var(local, "W"); /* in "params", up the chain */
  pdshm_var *g;
  if (!w) die("find W", PDSHM_ENOENT);
  CHECK(pdshm_var_get(local, "W@GRAD", &g));
  CHECK(pdshm_tensor_resize(g, PDSHM_F32, 2, (int64_t[]){W_ROWS, W_COLS}));
  const float *wd = pdshm_tensor_data(w);
  float *gd = pdshm_tensor_data(g);
  double sum = 0;
  for (size_t i = 0; i < (size_t)W_ROWS * W_COLS; i++) {
    gd[i] = 0.5f * wd[i];
    sum += wd[i];
  }
  char b[32];
  say(who, "step       read params/W in place (sum %.0f), wrote W@GRAD %s in a local scope",
      sum, human(pdshm_tensor_nbytes(g), b, sizeof b));
}

static void trainer(const char *name, int k) {
  char who[16], v[160];
  snprintf(who, sizeof who, "trainer %d", k);
  close(ready[0]);
  close(start[1]);
  close(finish[1]);
  pdshm_seg *seg; /* our own attachment: never the parent's handle */
  CHECK(pdshm_attach(name, NULL, &seg));
  say(who, "attached   %s", view(seg, v, sizeof v, NULL));
  send_byte(ready[1]);
  wait_release(start[0]); /* all four are attached now */

  pdshm_scope *params, *local;
  CHECK(pdshm_scope_open(seg, "params", &params));
  CHECK(pdshm_scope_new(params, NULL, &local));
  trainer_step(local, who);
  send_byte(ready[1]);
  wait_release(finish[0]); /* the victim is killed while waiting here */

  CHECK(pdshm_scope_release(local));
  CHECK(pdshm_scope_release(params));
  CHECK(pdshm_detach(seg));
  say(who, "detached   (local scope released)");
  _exit(0);
}

/* ---- the coordinator -------------------------------------------------------------- */

static pdshm_seg *coordinator_create(const char *name) {
  pdshm_seg *seg;
  pdshm_options o = {.size = SEG_SIZE};
  int rc = pdshm_create(name, &o, &seg);
  if (rc == PDSHM_EEXIST) {
    say("coordinator", "replacing the segment '%s' an earlier run left", name);
    CHECK(pdshm_unlink(name));
    rc = pdshm_create(name, &o, &seg);
  }
  if (rc) die("pdshm_create", rc);

  pdshm_scope *root, *params;
  pdshm_var *w;
  CHECK(pdshm_root(seg, &root));
  CHECK(pdshm_scope_new(root, "params", &params));
  CHECK(pdshm_var_create(params, "W", &w));
  CHECK(pdshm_tensor_resize(w, PDSHM_F32, 2, (int64_t[]){W_ROWS, W_COLS}));
  CHECK(pdshm_var_set_label(w, "parameter"));
  float *wd = pdshm_tensor_data(w);
  for (size_t i = 0; i < (size_t)W_ROWS * W_COLS; i++) wd[i] = 1.0f;
  CHECK(pdshm_scope_release(params)); /* "params" is named: it stays */
  CHECK(pdshm_scope_release(root));

  char sz[32], wb[32];
  say("coordinator", "created    '%s' (/dev/shm/pdshm.%s, %s) with params/W f32[%d x %d], %s",
      name, name, human(SEG_SIZE, sz, sizeof sz), W_ROWS, W_COLS,
      human(pdshm_tensor_nbytes(w), wb, sizeof wb));
  return seg;
}

static void kill_and_reap(pdshm_seg *seg, pid_t victim) {
  char v[160];
  say("coordinator", "SIGKILL    trainer %d (pid %d), which holds a local scope and W@GRAD",
      VICTIM, (int)victim);
  kill(victim, SIGKILL);
  int status;
  if (waitpid(victim, &status, 0) != victim || !WIFSIGNALED(status)) {
    fprintf(stderr, "demo: trainer %d did not die of SIGKILL\n", VICTIM);
    exit(1);
  }
  pdshm_stats dead, after;
  say("coordinator", "killed     %s", view(seg, v, sizeof v, &dead));
  unsigned reaped = 0;
  CHECK(pdshm_reap(seg, &reaped));
  say("coordinator", "reaped     %u slot%s: its scope, tensor and slot came back", reaped,
      reaped == 1 ? "" : "s");
  say("coordinator", "after reap %s", view(seg, v, sizeof v, &after));
  if (dead.procs_dead != 1 || reaped != 1 || after.procs_dead != 0 ||
      after.procs_alive != dead.procs_alive || after.used >= dead.used ||
      after.scopes != dead.scopes - 1) {
    fprintf(stderr, "demo: unexpected: procs_dead %u after the kill, %u reaped, "
                    "procs_dead %u and %llu -> %llu bytes used after the reap\n",
            dead.procs_dead, reaped, after.procs_dead, (unsigned long long)dead.used,
            (unsigned long long)after.used);
    exit(1);
  }
}

int main(int argc, char **argv) {
  int unlink_only = argc > 1 && !strcmp(argv[1], "--unlink");
  const char *name = argc > 1 + unlink_only ? argv[1 + unlink_only] : "demo";
  if (argc > 2 + unlink_only || name[0] == '-') {
    fprintf(stderr, "usage: demo [NAME] | demo --unlink [NAME]\n");
    return 2;
  }
  if (unlink_only) {
    int rc = pdshm_unlink(name);
    if (rc) die("pdshm_unlink", rc);
    printf("removed '%s' (/dev/shm/pdshm.%s)\n", name, name);
    return 0;
  }
  signal(SIGALRM, on_alarm);
  alarm(TIMEOUT);
  printf("pdshm demo: one segment, a coordinator and %d trainer processes\n\n", TRAINERS);
  fflush(stdout);
  pdshm_seg *seg = coordinator_create(name);
  if (pipe(ready) || pipe(start) || pipe(finish)) {
    perror("demo: pipe");
    return 1;
  }

  pid_t pid[TRAINERS];
  for (int k = 0; k < TRAINERS; k++) {
    fflush(NULL);
    pid[k] = fork();
    if (pid[k] < 0) {
      perror("demo: fork");
      return 1;
    }
    if (pid[k] == 0) trainer(name, k); /* does not return */
  }
  close(ready[1]);
  close(start[0]);
  close(finish[0]);

  char v[160];
  wait_bytes(ready[0], TRAINERS, "attach");
  say("coordinator", "barrier    %s", view(seg, v, sizeof v, NULL));
  close(start[1]);
  wait_bytes(ready[0], TRAINERS, "step");
  say("coordinator", "mid-run    %s", view(seg, v, sizeof v, NULL));

  kill_and_reap(seg, pid[VICTIM]);

  close(finish[1]); /* the survivors finish */
  int failed = 0;
  for (int k = 0; k < TRAINERS; k++) {
    int status;
    if (k == VICTIM) continue;
    if (waitpid(pid[k], &status, 0) != pid[k] || !WIFEXITED(status) || WEXITSTATUS(status))
      failed++;
  }
  say("coordinator", "all done   %s", view(seg, v, sizeof v, NULL));
  CHECK(pdshm_detach(seg));
  say("coordinator", "detached;  '%s' stays in /dev/shm for: pdshm-attach %s", name, name);
  if (failed) fprintf(stderr, "demo: %d trainer(s) failed\n", failed);
  return failed ? 1 : 0;
}
