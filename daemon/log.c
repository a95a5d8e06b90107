/*
 * log.c - pdshmd's log: one line per event, on stderr with a UTC timestamp
 * and the daemon's pid, or through syslog(3) (facility daemon) with --syslog.
 * Every line names the segment.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "pdshmd.h"

static bool log_to_syslog;
static const char *log_name = "";

void log_open(const struct pdshmd_cfg *cfg) {
  log_name = cfg->name;
  log_to_syslog = cfg->syslog;
  if (log_to_syslog) openlog(PROG, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void log_close(void) {
  if (log_to_syslog) closelog();
}

static void log_stamp(char *buf, size_t cap) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static void log_emit(enum pdshmd_level lvl, const char *msg) {
  static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO};
  static const char *tag[] = {"error: ", "warning: ", ""};
  if (log_to_syslog) {
    syslog(prio[lvl], "%s: %s%s", log_name, tag[lvl], msg);
    return;
  }
  char stamp[40];
  log_stamp(stamp, sizeof stamp);
  /* One fprintf per line: lines of concurrent writers to one file stay whole. */
  fprintf(stderr, "%s " PROG "[%d] %s: %s%s\n", stamp, (int)getpid(), log_name, tag[lvl], msg);
  fflush(stderr);
}

void log_say(enum pdshmd_level lvl, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  log_emit(lvl, msg);
}

void log_lines(enum pdshmd_level lvl, const char *prefix, const char *text) {
  while (text && *text) {
    const char *nl = strchr(text, '\n');
    int len = nl ? (int)(nl - text) : (int)strlen(text);
    if (len) log_say(lvl, "%s%.*s", prefix, len, text);
    text += len + (nl != NULL);
  }
}
