/*
 * pdshmd - the optional owner and reaper of one pdshm segment.
 *
 *   pdshmd NAME [--size SIZE] [--max-procs N] [--create|--adopt] [--foreground]
 *               [--pidfile FILE] [--interval MS] [--unlink-on-exit] [--syslog]
 *   pdshmd --help | --version
 *
 * It creates the segment NAME (--create), attaches an existing one (--adopt),
 * or, with neither, attaches it when it exists and creates it otherwise; then
 * claims it as its daemon (a second pdshmd on the same segment is refused),
 * and until SIGTERM or SIGINT reaps dead processes as they die, runs
 * pdshm_check every interval and logs what it found and reaped (watch.c).
 * Unless --foreground it detaches from the terminal first (fork, setsid,
 * fork); the command returns once the daemon is ready, with its status.
 *
 * Exit status: 0 after a clean stop (or --help, --version); 1 when the
 * segment cannot be created, adopted or claimed; 2 for a usage error, with a
 * one-line reason on stderr.  Only the public header is used.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pdshmd.h"

/* ---- the command line ---------------------------------------------------------- */

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs(PROG ": ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(" (see --help)\n", stderr);
  va_end(ap);
  return 2;
}

static void help(void) {
  printf("usage: " PROG " NAME [--size SIZE] [--max-procs N] [--create|--adopt] [--foreground]\n"
         "              [--pidfile FILE] [--interval MS] [--unlink-on-exit] [--syslog]\n"
         "       " PROG " --help | --version\n\n"
         "Owns or adopts the pdshm segment NAME (/dev/shm/pdshm.NAME): reaps the processes\n"
         "that die attached to it, checks it every interval, logs what it found.\n\n"
         "  --create          create the segment (it must not exist)\n"
         "  --adopt           attach the existing segment (default: adopt it if it exists,\n"
         "                    create it otherwise)\n"
         "  --size SIZE       bytes of a segment it creates, with K, M, G or T (default 64M, less when\n"
         "                    /dev/shm has under 128M free: see pdshm_create)\n"
         "  --max-procs N     process slots of a segment it creates (default %u)\n"
         "  --interval MS     period of the reap and check pass (default %u)\n"
         "  --foreground      do not detach from the terminal\n"
         "  --pidfile FILE    write the daemon's pid there (removed at exit)\n"
         "  --unlink-on-exit  remove the segment's name when stopping\n"
         "  --syslog          log to syslog (facility daemon) instead of stderr\n\n"
         "SIGTERM or SIGINT stop it cleanly; SIGHUP asks for a pass at once.\n"
         "exit status: 0 after a clean stop; 1 when the segment cannot be created, adopted\n"
         "or claimed; 2 for a usage error.\n",
         PDSHM_PROCS_DEFAULT, PDSHMD_INTERVAL_DEFAULT);
}

/* "64M" and the like (binary multiples).  0, or -1 when it is not a size. */
static int parse_size(const char *s, uint64_t *out) {
  static const char units[] = "KMGT";
  char *end;
  errno = 0;
  if (*s < '0' || *s > '9') return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return -1;
  unsigned shift = 0;
  if (*end) {
    const char *u = strchr(units, end[0] & ~0x20);
    if (!u || !end[0]) return -1;
    shift = 10u * (unsigned)(u - units + 1);
    end++;
    if (*end == 'i' && end[1] == 'B') end += 2;
    else if (*end == 'B') end++;
    if (*end) return -1;
  }
  if (v > (UINT64_MAX >> shift)) return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

/* A whole number in [lo, hi], or -1. */
static int parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned *out) {
  char *end;
  errno = 0;
  if (*s < '0' || *s > '9') return -1;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = (unsigned)v;
  return 0;
}

/* The daemon changes to "/": a relative pid file name must not follow it. */
static char *absolute(const char *path) {
  if (path[0] == '/') return strdup(path);
  char cwd[PATH_MAX], *out = NULL;
  if (!getcwd(cwd, sizeof cwd) || asprintf(&out, "%s/%s", cwd, path) < 0) return NULL;
  return out;
}

enum { OPT_SIZE = 256, OPT_PROCS, OPT_CREATE, OPT_ADOPT, OPT_FG, OPT_PIDFILE, OPT_INTERVAL,
       OPT_UNLINK, OPT_SYSLOG, OPT_HELP, OPT_VERSION };

static const struct option opts[] = {
    {"size", required_argument, NULL, OPT_SIZE},     {"max-procs", required_argument, NULL, OPT_PROCS},
    {"create", no_argument, NULL, OPT_CREATE},       {"adopt", no_argument, NULL, OPT_ADOPT},
    {"foreground", no_argument, NULL, OPT_FG},       {"pidfile", required_argument, NULL, OPT_PIDFILE},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"unlink-on-exit", no_argument, NULL, OPT_UNLINK},
    {"syslog", no_argument, NULL, OPT_SYSLOG},       {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},     {NULL, 0, NULL, 0}};

static int parse_opt(int c, const char *arg, struct pdshmd_cfg *cfg) {
  switch (c) {
  case OPT_SIZE:
    if (parse_size(arg, &cfg->size) || cfg->size < PDSHM_SIZE_MIN || cfg->size > PDSHM_SIZE_MAX)
      return usage_error("--size %s: not a size from 1M to 1T (e.g. 256M)", arg);
    return 0;
  case OPT_PROCS:
    if (parse_uint(arg, 1, PDSHM_PROCS_MAX, &cfg->max_procs))
      return usage_error("--max-procs %s: not a number from 1 to %u", arg, PDSHM_PROCS_MAX);
    return 0;
  case OPT_INTERVAL:
    if (parse_uint(arg, 1, PDSHMD_INTERVAL_MAX, &cfg->interval_ms))
      return usage_error("--interval %s: not a number of ms from 1 to %u", arg,
                         PDSHMD_INTERVAL_MAX);
    return 0;
  case OPT_CREATE:
  case OPT_ADOPT: {
    enum pdshmd_mode m = c == OPT_CREATE ? MODE_CREATE : MODE_ADOPT;
    if (cfg->mode != MODE_ANY && cfg->mode != m) return usage_error("--create and --adopt exclude each other");
    cfg->mode = m;
    return 0;
  }
  case OPT_FG: cfg->foreground = true; return 0;
  case OPT_PIDFILE:
    if (!*arg) return usage_error("--pidfile: empty file name");
    free(cfg->pidfile);
    cfg->pidfile = absolute(arg);
    return cfg->pidfile ? 0 : usage_error("--pidfile %s: %s", arg, strerror(errno));
  case OPT_UNLINK: cfg->unlink_on_exit = true; return 0;
  case OPT_SYSLOG: cfg->syslog = true; return 0;
  default: return 2;
  }
}

/* 0 to run, 2 for a usage error, -1 when --help or --version was answered. */
static int parse_args(int argc, char **argv, struct pdshmd_cfg *cfg) {
  *cfg = (struct pdshmd_cfg){.interval_ms = PDSHMD_INTERVAL_DEFAULT};
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
    if (c == OPT_HELP || c == 'h') return help(), -1;
    if (c == OPT_VERSION) return printf(PROG " %s\n", PACKAGE_VERSION), -1;
    if (c == ':') return usage_error("%s needs a value", argv[optind - 1]);
    if (c == '?') return usage_error("unknown option %s", argv[optind - 1]);
    if (parse_opt(c, optarg, cfg)) return 2;
  }
  if (optind >= argc) return usage_error("missing segment NAME");
  if (optind + 1 < argc) return usage_error("one segment at a time: %s and %s", argv[optind], argv[optind + 1]);
  cfg->name = argv[optind];
  if (cfg->mode == MODE_ADOPT && (cfg->size || cfg->max_procs))
    return usage_error("--size and --max-procs apply to a segment it creates, not with --adopt");
  return 0;
}

/* ---- the segment ---------------------------------------------------------------- */

static int fail_seg(const char *what, int rc) {
  const char *detail = pdshm_last_error();
  log_say(LVL_ERR, "%s: %s%s%s", what, pdshm_strerror(rc), *detail ? ": " : "", detail);
  return 1;
}

/* Creates or attaches the segment as cfg says; *created tells which. */
static int seg_open(const struct pdshmd_cfg *cfg, pdshm_seg **seg, bool *created) {
  pdshm_options o = {.size = cfg->size, .max_procs = cfg->max_procs};
  int rc = PDSHM_ENOENT;
  *created = false;
  if (cfg->mode != MODE_CREATE) rc = pdshm_attach(cfg->name, NULL, seg);
  if (rc == PDSHM_ENOENT && cfg->mode != MODE_ADOPT) {
    rc = pdshm_create(cfg->name, &o, seg);
    *created = rc == 0;
    /* Somebody created it first: adopt theirs. */
    if (rc == PDSHM_EEXIST && cfg->mode == MODE_ANY) rc = pdshm_attach(cfg->name, NULL, seg);
  }
  if (rc == PDSHM_EINVAL || rc == PDSHM_ENAMETOOLONG)
    return usage_error("%s: %s", cfg->name, pdshm_last_error());
  if (rc == PDSHM_EEXIST) return fail_seg("create (it exists: use --adopt)", rc);
  if (rc == PDSHM_ENOENT) return fail_seg("adopt (no such segment: use --create)", rc);
  if (rc) return fail_seg(cfg->mode == MODE_CREATE ? "create" : "attach", rc);
  if (!*created && (cfg->size || cfg->max_procs))
    log_say(LVL_WARN, "the segment exists: --size and --max-procs are ignored");
  return 0;
}

/* ---- detaching from the terminal, the pid file ------------------------------------ */

/* The command waits here for the daemon's first byte: its exit status. */
static int wait_ready(int rd, pid_t child) {
  unsigned char status = 1;
  ssize_t n;
  while ((n = read(rd, &status, 1)) < 0 && errno == EINTR) continue;
  waitpid(child, NULL, 0); /* the middle process exits at once */
  return n == 1 ? status : 1;
}

/* fork, setsid, fork: the grandchild is the daemon, in a session of its own
 * with no terminal; the command's process exits with the status the daemon
 * writes to the returned pipe (report_ready).  Returns in the daemon only. */
static int daemonize(void) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) {
    log_say(LVL_ERR, "pipe: %s", strerror(errno));
    exit(1);
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    log_say(LVL_ERR, "fork: %s", strerror(errno));
    exit(1);
  }
  if (pid > 0) {
    close(p[1]);
    _exit(wait_ready(p[0], pid));
  }
  close(p[0]);
  if (setsid() < 0 || (pid = fork()) < 0) _exit(1);
  if (pid > 0) _exit(0);
  if (chdir("/") < 0) _exit(1);
  return p[1];
}

static void report_ready(int *fd, unsigned char status) {
  if (*fd < 0) return;
  if (write(*fd, &status, 1) < 0) { /* the caller is gone: nobody to tell */ }
  close(*fd);
  *fd = -1;
  if (status) return;
  /* Ready: let go of the terminal.  stderr stays when it is the log. */
  int null = open("/dev/null", O_RDWR);
  if (null < 0) return;
  dup2(null, STDIN_FILENO);
  dup2(null, STDOUT_FILENO);
  if (null > STDERR_FILENO) close(null);
}

/* Written to FILE.PID.tmp, then renamed: readers never see half a pid file. */
static int pidfile_write(const char *path) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof tmp)
    return log_say(LVL_ERR, "pid file name too long: %s", path), 1;
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0 || rename(tmp, path) < 0) {
    log_say(LVL_ERR, "pid file %s: %s", path, strerror(errno));
    unlink(tmp);
    return 1;
  }
  return 0;
}

/* ---- main -------------------------------------------------------------------------- */

/* SIGTERM, SIGINT and SIGHUP come through a signalfd, polled by the loop. */
static int signals_fd(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Room for a pidfd per process slot. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* A segment we created and could not serve goes again; one that another
 * daemon claimed first is left to it. */
static void seg_close(const struct pdshmd_cfg *cfg, pdshm_seg *seg, bool claimed, int status,
                      bool created) {
  pdshm_detach(seg);
  if (!claimed || !(cfg->unlink_on_exit || (status && created))) return;
  int rc = pdshm_unlink(cfg->name);
  if (rc && rc != PDSHM_ENOENT) fail_seg("unlink", rc);
  else log_say(LVL_INFO, "unlinked the segment");
}

static int serve(const struct pdshmd_cfg *cfg, int *ready) {
  pdshm_seg *seg = NULL;
  bool created, claimed = false;
  int sigfd = signals_fd();
  if (sigfd < 0) return log_say(LVL_ERR, "signalfd: %s", strerror(errno)), 1;
  int status = seg_open(cfg, &seg, &created);
  if (!status) {
    int rc = pdshm_daemon_claim(seg);
    if (rc) status = fail_seg("claim", rc);
    claimed = rc == 0;
  }
  if (!status && cfg->pidfile) status = pidfile_write(cfg->pidfile);
  if (!status) {
    log_say(LVL_INFO, "%s the segment; interval %u ms", created ? "created" : "adopted",
            cfg->interval_ms);
    report_ready(ready, 0);
    status = watch_run(seg, cfg, sigfd);
    if (cfg->pidfile) unlink(cfg->pidfile);
  }
  if (claimed) pdshm_daemon_release(seg);
  if (seg) seg_close(cfg, seg, claimed, status, created);
  close(sigfd);
  if (claimed) log_say(status ? LVL_ERR : LVL_INFO, "exiting with status %d", status);
  return status;
}

int main(int argc, char **argv) {
  struct pdshmd_cfg cfg;
  int rc = parse_args(argc, argv, &cfg);
  if (rc) {
    free(cfg.pidfile);
    return rc < 0 ? 0 : rc;
  }
  log_open(&cfg);
  raise_fd_limit();
  int ready = cfg.foreground ? -1 : daemonize();
  int status = serve(&cfg, &ready);
  report_ready(&ready, (unsigned char)status);
  free(cfg.pidfile);
  log_close();
  return status;
}
