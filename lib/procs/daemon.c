/*
 * daemon.c - claiming a segment as its daemon (pdshmd), and its heartbeat.
 *
 * Owns: the OFD byte lock at PDSHM_OFD_DAEMON and the header's daemon_pid and
 * daemon_beat_ns.
 *
 * Invariants:
 *  1. At most one attachment holds the claim: a write OFD lock on byte
 *     PDSHM_OFD_DAEMON of the segment file.  The kernel drops it with the
 *     claimer's last reference to its open file description (death included),
 *     so a dead daemon never blocks the next one.
 *  2. daemon_pid is written only by the claim's holder: its pid right after
 *     the lock is taken, 0 right before it is given back.  A daemon killed
 *     with SIGKILL leaves its pid there with no lock behind it; readers tell
 *     the two apart by asking the kernel about the lock (pdshm_daemon_status).
 *  3. daemon_beat_ns is written only by the holder: CLOCK_REALTIME at claim
 *     and at each pdshm_daemon_beat, 0 at release.
 */
#define PDSHM_LAYER 5 /* procs/ (lib/LAYERS) */
#include "config.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "procs/procs.h"

#define DAEMON_PID_WAIT_MS 100 /* a new holder stores its pid right after locking */

static int daemon_ofd(pdshm_seg *seg, int cmd, struct flock *fl, short type) {
  *fl = (struct flock){.l_type = type, .l_whence = SEEK_SET, .l_start = PDSHM_OFD_DAEMON,
                       .l_len = 1};
  return fcntl(seg->fd, cmd, fl);
}

/* 1 when some open file description holds the claim, 0 when none, or a code. */
static int daemon_claimed(pdshm_seg *seg) {
  struct flock fl;
  if (daemon_ofd(seg, F_OFD_GETLK, &fl, F_WRLCK) < 0)
    return pdshm__fail(-errno, "F_OFD_GETLK on the daemon byte: %s", strerror(errno));
  return fl.l_type != F_UNLCK;
}

/* The holder's pid for an EBUSY message: it may not have stored it yet. */
static uint32_t daemon_holder_pid(pdshm_seg *seg) {
  for (int ms = 0; ms < DAEMON_PID_WAIT_MS; ms++) {
    uint32_t pid = atomic_load_explicit(&seg->hdr->daemon_pid, memory_order_acquire);
    if (pid) return pid;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return 0;
}

PDSHM_API int pdshm_daemon_claim(pdshm_seg *seg) {
  pdshm__fail_clear();
  int rc = pdshm__seg_usable(seg);
  if (rc) return rc;
  if (seg->flags & PDSHM_RDONLY)
    return pdshm__fail(PDSHM_EROFS, "segment \"%s\" is attached read-only", seg->name);
  if (atomic_load(&seg->daemon))
    return pdshm__fail(PDSHM_EBUSY, "this attachment already holds the daemon claim of \"%s\"",
                       seg->name);
  struct flock fl;
  if (daemon_ofd(seg, F_OFD_SETLK, &fl, F_WRLCK) < 0) {
    if (errno != EAGAIN && errno != EACCES)
      return pdshm__fail(-errno, "F_OFD_SETLK on the daemon byte: %s", strerror(errno));
    uint32_t pid = daemon_holder_pid(seg);
    if (pid) return pdshm__fail(PDSHM_EBUSY, "segment \"%s\" has a daemon: pid %u", seg->name, pid);
    return pdshm__fail(PDSHM_EBUSY, "segment \"%s\" has a daemon (pid not yet recorded)",
                       seg->name);
  }
  atomic_store(&seg->daemon, true);
  atomic_store_explicit(&seg->hdr->daemon_beat_ns, pdshm__now_ns(CLOCK_REALTIME),
                        memory_order_relaxed);
  atomic_store_explicit(&seg->hdr->daemon_pid, seg->pid, memory_order_release);
  return 0;
}

static int daemon_held(pdshm_seg *seg) {
  int rc = pdshm__seg_usable(seg);
  if (rc) return rc;
  if (!atomic_load(&seg->daemon))
    return pdshm__fail(PDSHM_EPERM, "this attachment does not hold the daemon claim of \"%s\"",
                       seg->name);
  return 0;
}

PDSHM_API int pdshm_daemon_beat(pdshm_seg *seg) {
  pdshm__fail_clear();
  int rc = daemon_held(seg);
  if (rc) return rc;
  atomic_store_explicit(&seg->hdr->daemon_beat_ns, pdshm__now_ns(CLOCK_REALTIME),
                        memory_order_release);
  return 0;
}

void pdshm__daemon_drop(pdshm_seg *seg) {
  if (!atomic_exchange(&seg->daemon, false)) return;
  /* Invariant 2: the fields go before the lock, so that a new holder's
   * stores are never overwritten by ours. */
  atomic_store_explicit(&seg->hdr->daemon_beat_ns, 0, memory_order_relaxed);
  atomic_store_explicit(&seg->hdr->daemon_pid, 0, memory_order_release);
  struct flock fl;
  daemon_ofd(seg, F_OFD_SETLK, &fl, F_UNLCK);
}

PDSHM_API int pdshm_daemon_release(pdshm_seg *seg) {
  pdshm__fail_clear();
  int rc = daemon_held(seg);
  if (rc) return rc;
  pdshm__daemon_drop(seg);
  return 0;
}

PDSHM_API int pdshm_daemon_status(pdshm_seg *seg, pdshm_daemon_info *out) {
  pdshm__fail_clear();
  if (!out) return pdshm__fail(PDSHM_EINVAL, "NULL out pointer");
  int rc = pdshm__seg_usable(seg);
  if (rc) return rc;
  int held = daemon_claimed(seg);
  if (held < 0) return held;
  *out = (pdshm_daemon_info){
      .pid = atomic_load_explicit(&seg->hdr->daemon_pid, memory_order_acquire),
      .alive = held || atomic_load(&seg->daemon),
      .beat_ns = atomic_load_explicit(&seg->hdr->daemon_beat_ns, memory_order_acquire)};
  return 0;
}
