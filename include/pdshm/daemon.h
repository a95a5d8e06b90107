/* pdshm/daemon.h - a segment's daemon: its claim and heartbeat. */
#ifndef PDSHM_DAEMON_H
#define PDSHM_DAEMON_H

#include "pdshm/base.h"    /* PDSHM_API, the C types */
#include "pdshm/segment.h" /* pdshm_seg */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Daemon ------------------------------------------------------------- */
/*
 * A segment may have one daemon (pdshmd): an attachment that claims it, reaps
 * dead processes and checks it.  The library needs none.  The claim is a lock
 * the kernel drops when its holder dies, so a daemon killed by SIGKILL never
 * blocks the next one; the header records the holder's pid and heartbeat.
 */
typedef struct pdshm_daemon_info {
  uint32_t pid;     /* the pid the header records: the holder's, or a dead  */
                    /* daemon's that never released; 0 when none            */
  int alive;        /* 1 while some attachment holds the claim              */
  uint64_t beat_ns; /* its last heartbeat, CLOCK_REALTIME ns; 0 when none   */
} pdshm_daemon_info;

/* Claims the segment for this attachment and records getpid() and a first
 * heartbeat in the header.  EBUSY when another attachment holds the claim
 * (pdshm_last_error() names its pid) or this one already does; EROFS on a
 * read-only attachment; EFORKED.  A failure changes nothing. */
PDSHM_API int pdshm_daemon_claim(pdshm_seg *seg);
/* Records a heartbeat (now).  EPERM unless this attachment holds the claim. */
PDSHM_API int pdshm_daemon_beat(pdshm_seg *seg);
/* Clears the pid and heartbeat and gives the claim up; pdshm_detach does the
 * same.  EPERM unless this attachment holds the claim. */
PDSHM_API int pdshm_daemon_release(pdshm_seg *seg);
/* Who holds the claim; works on a read-only attachment.  EINVAL, EFORKED, or
 * -errno when the kernel cannot be asked about the lock. */
PDSHM_API int pdshm_daemon_status(pdshm_seg *seg, pdshm_daemon_info *out);

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_DAEMON_H */
