/*
 * watch.c - pdshmd's loop: notices deaths, reaps, checks, beats.
 *
 * Deaths are noticed three ways, fastest first:
 *  1. a pidfd (pidfd_open(2), Linux >= 5.3) on the pid of every live slot,
 *     polled: it becomes readable when that process exits;
 *  2. a re-read of the process table (pdshm_procs) every PDSHMD_SCAN_MS (or
 *     every interval when that is shorter), which picks up new attachers to
 *     watch and reaps any slot it finds dead;
 *  3. the full pass every interval: pdshm_reap, pdshm_check.  The heartbeat
 *     goes into the header at every re-read and every pass.
 * A pidfd is only a hint: whether a slot is dead is always decided by its
 * liveness lock (pdshm_reap), so a recycled pid or a pid from another pid
 * namespace can cost a useless pass, never a wrong reap.  A process's
 * liveness lock can outlive its exit by a moment (another task may still
 * hold its memory map), so a slot whose pid exited but still reads alive is
 * re-read every RETRY_MS for a while.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pdshmd.h"

#define RETRY_MS 10         /* re-read period while an exited pid reads alive */
#define RETRY_FOR_MS 2000   /* ... for at most this long after its exit       */

struct watched {
  uint32_t slot, pid;       /* the slot and the pid it was claimed by          */
  uint64_t attach_ns;       /* tells a re-attach of the same pid apart         */
  int fd;                   /* its pidfd, -1 when none (or once it fired)      */
  uint64_t exited_ms;       /* when its pidfd fired, 0 before                  */
};

struct watch {
  pdshm_seg *seg;
  const struct pdshmd_cfg *cfg;
  pdshm_proc_info *procs;   /* the last pdshm_procs answer                     */
  unsigned nprocs, cap;
  struct watched *w;        /* live slots, in slot order                       */
  unsigned nw;
  struct pollfd *pfd;       /* [0]: signals; [1 + i]: w[i].fd                  */
  bool have_pidfd;          /* pidfd_open works on this kernel                 */
  bool stop;
  uint64_t next_scan, next_pass; /* CLOCK_MONOTONIC ms                         */
  int procs_rc, reap_rc, check_rc; /* last results: errors logged on change    */
  char *check_report;       /* the last check's report, logged on change       */
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int pidfd_of(uint32_t pid) {
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0u);
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

static void log_rc_change(int *last, int rc, const char *what) {
  if (rc != *last && rc < 0)
    log_say(LVL_ERR, "%s: %s (%s)", what, pdshm_strerror(rc), pdshm_last_error());
  else if (rc != *last && *last < 0)
    log_say(LVL_INFO, "%s works again", what);
  *last = rc;
}

/* ---- the process table ---------------------------------------------------------- */

static int procs_read(struct watch *wt) {
  for (;;) {
    int n = pdshm_procs(wt->seg, wt->procs, wt->cap);
    log_rc_change(&wt->procs_rc, n < 0 ? n : 0, "reading the process table");
    if (n < 0) return n;
    if ((unsigned)n <= wt->cap) {
      wt->nprocs = (unsigned)n;
      return 0;
    }
    pdshm_proc_info *p = realloc(wt->procs, (size_t)n * sizeof *p);
    if (!p) return PDSHM_ENOMEM;
    wt->procs = p;
    wt->cap = (unsigned)n;
  }
}

static bool same_proc(const struct watched *w, const pdshm_proc_info *p) {
  return w->slot == p->slot && w->pid == p->pid && w->attach_ns == p->attach_ns;
}

static void watch_open(struct watch *wt, struct watched *w) {
  w->fd = -1;
  if (!wt->have_pidfd) return;
  w->fd = pidfd_of(w->pid);
  if (w->fd >= 0) return;
  if (errno == ESRCH) {
    w->exited_ms = now_ms(); /* gone already: the scan reaps it */
  } else if (errno == ENOSYS) {
    wt->have_pidfd = false;
    log_say(LVL_WARN, "no pidfd_open on this kernel: deaths are found by re-reading the "
                      "process table every %u ms", PDSHMD_SCAN_MS);
  } else {
    log_say(LVL_WARN, "pidfd_open(%u): %s: slot %u is watched by the scan only", w->pid,
            strerror(errno), w->slot);
  }
}

/* Watches the live slots of the last table read, keeping what was watched
 * before (both lists are in slot order). */
static int watch_sync(struct watch *wt) {
  struct watched *nw = calloc(wt->nprocs ? wt->nprocs : 1, sizeof *nw);
  struct pollfd *pfd = nw ? realloc(wt->pfd, (wt->nprocs + 1) * sizeof *pfd) : NULL;
  if (!pfd) {
    free(nw);
    return PDSHM_ENOMEM; /* keeps watching what it watched */
  }
  wt->pfd = pfd;
  unsigned n = 0, old = 0;
  for (unsigned i = 0; i < wt->nprocs; i++) {
    const pdshm_proc_info *p = &wt->procs[i];
    if (p->state != PDSHM_PROC_ALIVE || p->pid == (uint32_t)getpid()) continue;
    while (old < wt->nw && wt->w[old].slot < p->slot) {
      if (wt->w[old].fd >= 0) close(wt->w[old].fd);
      old++;
    }
    if (old < wt->nw && same_proc(&wt->w[old], p)) {
      nw[n++] = wt->w[old++];
      continue;
    }
    nw[n] = (struct watched){.slot = p->slot, .pid = p->pid, .attach_ns = p->attach_ns};
    watch_open(wt, &nw[n++]);
  }
  for (; old < wt->nw; old++)
    if (wt->w[old].fd >= 0) close(wt->w[old].fd);
  free(wt->w);
  wt->w = nw;
  wt->nw = n;
  for (unsigned i = 0; i < n; i++) pfd[1 + i] = (struct pollfd){.fd = nw[i].fd, .events = POLLIN};
  return 0;
}

static unsigned procs_dead(const struct watch *wt) {
  unsigned d = 0;
  for (unsigned i = 0; i < wt->nprocs; i++) d += wt->procs[i].state == PDSHM_PROC_DEAD;
  return d;
}

/* ---- reaping --------------------------------------------------------------------- */

static bool still_listed(const struct watch *wt, const pdshm_proc_info *p) {
  for (unsigned i = 0; i < wt->nprocs; i++)
    if (wt->procs[i].slot == p->slot && wt->procs[i].pid == p->pid &&
        wt->procs[i].attach_ns == p->attach_ns)
      return true;
  return false;
}

static void log_one(const pdshm_proc_info *p, const char *why) {
  log_say(LVL_INFO, "reaped pid %u (slot %u, found by %s): %llu scope handle(s), %llu bytes held",
          p->pid, p->slot, why, (unsigned long long)p->handles,
          (unsigned long long)p->bytes_held);
}

/* Logs the slots listed in was[] and gone now.  A dead one was reaped.  A
 * live one died after was[] was read: it was reaped too, as many of them as
 * pdshm_reap counted beyond the dead ones; any other one detached. */
static unsigned log_gone(const struct watch *wt, const pdshm_proc_info *was, unsigned n,
                         unsigned reaped, const char *why) {
  unsigned dead = 0, logged = 0;
  for (unsigned i = 0; i < n; i++)
    if (was[i].state == PDSHM_PROC_DEAD && !still_listed(wt, &was[i])) {
      log_one(&was[i], why);
      dead++;
    }
  unsigned extra = reaped > dead ? reaped - dead : 0;
  for (unsigned i = 0; i < n && logged < extra; i++)
    if (was[i].state == PDSHM_PROC_ALIVE && !still_listed(wt, &was[i])) {
      log_one(&was[i], why);
      logged++;
    }
  return dead + logged;
}

static uint64_t used_now(struct watch *wt) {
  pdshm_stats st;
  return pdshm_seg_stats(wt->seg, &st) == 0 ? st.used : 0;
}

/* pdshm_reap, with a line per process reaped; re-reads the table after.
 * `used` is measured (a walk under the allocator lock) only when somebody
 * is known to have died. */
static void reap_pass(struct watch *wt, const char *why) {
  unsigned n = wt->nprocs;
  pdshm_proc_info *was = malloc((n ? n : 1) * sizeof *was);
  if (!was) return;
  memcpy(was, wt->procs, n * sizeof *was);
  bool died = procs_dead(wt) || !strcmp(why, "pidfd");
  uint64_t before = died ? used_now(wt) : 0;
  unsigned reaped = 0;
  int rc = pdshm_reap(wt->seg, &reaped);
  log_rc_change(&wt->reap_rc, rc, "reaping");
  if (procs_read(wt) == 0) {
    if (log_gone(wt, was, n, reaped, why) && died)
      log_say(LVL_INFO, "used %llu -> %llu bytes", (unsigned long long)before,
              (unsigned long long)used_now(wt));
    watch_sync(wt);
  }
  free(was);
}

/* ---- checking -------------------------------------------------------------------- */

static void check_pass(struct watch *wt) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return;
  int rc = pdshm_check(wt->seg, f);
  fclose(f);
  bool changed = rc != wt->check_rc || !wt->check_report || strcmp(text, wt->check_report);
  if (changed && rc == 0) {
    log_say(LVL_INFO, "check: every invariant holds");
  } else if (changed && rc == PDSHM_EBADSEG) {
    log_say(LVL_ERR, "check: %s", pdshm_last_error());
    log_lines(LVL_ERR, "check: ", text);
  } else if (changed) {
    log_say(LVL_WARN, "check could not run: %s (%s)", pdshm_strerror(rc), pdshm_last_error());
  }
  wt->check_rc = rc;
  free(wt->check_report);
  wt->check_report = text;
}

/* ---- the loop ---------------------------------------------------------------------- */

static void on_signal(struct watch *wt, int sigfd) {
  struct signalfd_siginfo si;
  while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
    if (si.ssi_signo == SIGHUP) {
      log_say(LVL_INFO, "SIGHUP: a pass now");
      wt->next_pass = now_ms();
    } else {
      log_say(LVL_INFO, "%s: stopping", si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
      wt->stop = true;
    }
  }
}

/* Closes the pidfds that fired; true when one did. */
static bool on_exits(struct watch *wt) {
  bool any = false;
  for (unsigned i = 0; i < wt->nw; i++) {
    if (!(wt->pfd[1 + i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    close(wt->w[i].fd);
    wt->w[i].fd = wt->pfd[1 + i].fd = -1;
    wt->w[i].exited_ms = now_ms();
    any = true;
  }
  return any;
}

/* When to read the table again: soon while an exited pid still reads alive. */
static uint64_t scan_period(const struct watch *wt, uint64_t now) {
  uint64_t p = wt->cfg->interval_ms < PDSHMD_SCAN_MS ? wt->cfg->interval_ms : PDSHMD_SCAN_MS;
  for (unsigned i = 0; i < wt->nw; i++)
    if (wt->w[i].exited_ms && now - wt->w[i].exited_ms < RETRY_FOR_MS) return RETRY_MS;
  return p;
}

/* True when a pidfd fired since the last poll: a death the scan finds may
 * have been signalled already, and then the pidfd gets the credit. */
static bool exits_pending(struct watch *wt) {
  return wt->nw && poll(wt->pfd + 1, wt->nw, 0) > 0 && on_exits(wt);
}

static void scan(struct watch *wt, uint64_t now) {
  pdshm_daemon_beat(wt->seg);
  if (procs_read(wt) == 0) {
    if (procs_dead(wt)) reap_pass(wt, exits_pending(wt) ? "pidfd" : "scan");
    else watch_sync(wt);
  }
  wt->next_scan = now + scan_period(wt, now);
}

static void full_pass(struct watch *wt, uint64_t now) {
  pdshm_daemon_beat(wt->seg);
  if (procs_read(wt) == 0) reap_pass(wt, "interval");
  check_pass(wt);
  wt->next_pass = now + wt->cfg->interval_ms;
  if (wt->next_scan > now + scan_period(wt, now)) wt->next_scan = now + scan_period(wt, now);
}

static void watch_free(struct watch *wt) {
  for (unsigned i = 0; i < wt->nw; i++)
    if (wt->w[i].fd >= 0) close(wt->w[i].fd);
  free(wt->w);
  free(wt->pfd);
  free(wt->procs);
  free(wt->check_report);
}

int watch_run(pdshm_seg *seg, const struct pdshmd_cfg *cfg, int sigfd) {
  struct watch wt = {.seg = seg, .cfg = cfg, .have_pidfd = true, .check_rc = 1};
  wt.pfd = calloc(1, sizeof *wt.pfd);
  if (!wt.pfd) return 1;
  wt.next_scan = wt.next_pass = now_ms();
  while (!wt.stop) {
    uint64_t now = now_ms(), due = wt.next_scan < wt.next_pass ? wt.next_scan : wt.next_pass;
    wt.pfd[0] = (struct pollfd){.fd = sigfd, .events = POLLIN};
    int n = poll(wt.pfd, 1 + wt.nw, due > now ? (int)(due - now) : 0);
    if (n < 0 && errno != EINTR) {
      log_say(LVL_ERR, "poll: %s", strerror(errno));
      break;
    }
    if (n > 0 && wt.pfd[0].revents) on_signal(&wt, sigfd);
    if (wt.stop) break;
    if (n > 0 && on_exits(&wt)) {
      if (procs_read(&wt) == 0) reap_pass(&wt, "pidfd");
      wt.next_scan = now_ms() + scan_period(&wt, now_ms());
    }
    now = now_ms();
    if (now >= wt.next_pass) full_pass(&wt, now);
    else if (now >= wt.next_scan) scan(&wt, now);
  }
  watch_free(&wt);
  return wt.stop ? 0 : 1;
}
