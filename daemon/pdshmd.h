/* pdshmd.h - what the daemon's files say to each other (only the public header below). */
#ifndef PDSHMD_H
#define PDSHMD_H

#include <stdbool.h>
#include <stdint.h>

#include "pdshm.h"

#define PROG "pdshmd"
#define PDSHMD_INTERVAL_DEFAULT 5000u    /* ms between full passes            */
#define PDSHMD_INTERVAL_MAX 86400000u    /* one day                           */
#define PDSHMD_SCAN_MS 200u              /* process-table re-reads, at most   */

enum pdshmd_mode { MODE_ANY, MODE_CREATE, MODE_ADOPT };

/* The command line, parsed (pdshmd.c). */
struct pdshmd_cfg {
  const char *name;        /* the segment's NAME                              */
  uint64_t size;           /* --size, 0 for the library's default             */
  unsigned max_procs;      /* --max-procs, 0 for the library's default        */
  enum pdshmd_mode mode;   /* --create, --adopt, or whichever applies         */
  bool foreground;         /* --foreground: no fork, no setsid                */
  char *pidfile;           /* --pidfile made absolute (malloc), or NULL       */
  unsigned interval_ms;    /* --interval                                      */
  bool unlink_on_exit;     /* --unlink-on-exit                                */
  bool syslog;             /* --syslog: log there instead of stderr           */
};

/* ---- log.c ------------------------------------------------------------------- */
enum pdshmd_level { LVL_ERR, LVL_WARN, LVL_INFO };
void log_open(const struct pdshmd_cfg *cfg);
void log_close(void);
/* One line, with a UTC timestamp on stderr, or through syslog(3). */
void log_say(enum pdshmd_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Each line of a buffer (a check's report), at that level, prefixed. */
void log_lines(enum pdshmd_level lvl, const char *prefix, const char *text);

/* ---- watch.c ----------------------------------------------------------------- */
/* The main loop: watches, reaps, checks and beats until SIGTERM or SIGINT;
 * sigfd is a signalfd for those (and SIGHUP: a pass at once).  0 on a clean
 * stop, 1 when the loop could not go on. */
int watch_run(pdshm_seg *seg, const struct pdshmd_cfg *cfg, int sigfd);

#endif
