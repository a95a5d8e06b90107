/*
 * pdshm-attach - look inside a live segment, safely.
 *
 *   pdshm-attach NAME [VIEW] [--json] [--watch SECONDS]
 *   pdshm-attach --help | --version
 *
 * It attaches with PDSHM_RDONLY (no process slot, no lock taken, nothing
 * stored) and prints one view; only --reap attaches for writing.  Every
 * view is one entry of `cmds` and one function (attach_*.c), reading the
 * segment only through the introspection API of the public header, so any
 * other program sees exactly what this one shows.
 *
 * A view writes into memory first and is printed only when it completed, so
 * a segment that turns out unreadable half way gives a reason, not half a
 * table or half a JSON document.
 *
 * Exit status: 0; 1 when --check found problems; 2 for a usage error or a
 * segment that cannot be read, with a one-line reason on stderr.
 */
#include "config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"

enum { CMD_ATTACH = 1, CMD_WRITES = 2 /* not with --watch */, CMD_PATH = 4 };

struct cmd {
  const char *flag;            /* "" for the default view                   */
  unsigned how;                /* CMD_*                                     */
  const char *args;            /* for --help                                */
  const char *help;
  int (*run)(struct ctx *c);
};

static int cmd_help(struct ctx *c);
static int cmd_version(struct ctx *c);

static const struct cmd cmds[] = {
    {"", CMD_ATTACH, "", "summary (size, use, processes, contents) and the scope tree",
     view_summary},
    {"--vars", CMD_ATTACH | CMD_PATH, "[PATH]",
     "variables of every scope, or of the scope at PATH (params/fc, #ID)", view_vars},
    {"--procs", CMD_ATTACH, "", "process slots: pid, alive or dead, since, handles, pins, bytes",
     view_procs},
    {"--locks", CMD_ATTACH, "", "locks: what each guards, holder, contention, wait", view_locks},
    {"--groups", CMD_ATTACH, "", "trainer groups: round, members alive or dead, who writes",
     view_groups},
    {"--alloc", CMD_ATTACH, "", "allocator: size classes, large blocks, fragmentation",
     view_alloc},
    {"--check", CMD_ATTACH, "", "the consistency walk's report (exit 1 when not clean)",
     view_check},
    {"--reap", CMD_ATTACH | CMD_WRITES, "",
     "release what dead processes held (the only option that writes)", view_reap},
    {"--help", 0, "", "this help", cmd_help},
    {"--version", 0, "", "the version", cmd_version},
};
static const size_t ncmds = sizeof cmds / sizeof cmds[0];

static int cmd_help(struct ctx *c) {
  fprintf(c->out, "usage: " PROG " NAME [VIEW] [--json] [--watch SECONDS]\n"
                  "       " PROG " --help | --version\n\n"
                  "Attaches the pdshm segment NAME (/dev/shm/pdshm.NAME) read-only and prints\n"
                  "one view of it.  Views:\n\n");
  for (size_t i = 0; i < ncmds; i++) {
    char flag[32];
    snprintf(flag, sizeof flag, "%s%s%s", cmds[i].flag[0] ? cmds[i].flag : "(default)",
             cmds[i].args[0] ? " " : "", cmds[i].args);
    fprintf(c->out, "  %-16s %s\n", flag, cmds[i].help);
  }
  fprintf(c->out, "\n  --json           any view as one JSON document (see pdshm-attach(1))\n"
                  "  --watch SECONDS  show the view again every SECONDS until interrupted\n"
                  "\nexit status: 0; 1 when --check finds problems; 2 for a usage error or an\n"
                  "unreadable segment.\n");
  return 0;
}

static int cmd_version(struct ctx *c) {
  fprintf(c->out, PROG " %s\n", PACKAGE_VERSION);
  return 0;
}

/* ---- arguments ------------------------------------------------------------------- */

struct args {
  struct ctx c;
  const struct cmd *cmd;
  double watch;                /* seconds, 0: once                           */
  const char *pos[2];          /* NAME, PATH                                 */
  int npos;
};

static const struct cmd *cmd_find(const char *flag) {
  for (size_t i = 0; i < ncmds; i++)
    if (!strcmp(cmds[i].flag, flag)) return &cmds[i];
  return NULL;
}

static int arg_view(struct args *a, const char *arg) {
  char flag[32];
  const char *eq = strchr(arg, '=');
  snprintf(flag, sizeof flag, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
  const struct cmd *k = cmd_find(!strcmp(flag, "-h") ? "--help" : flag);
  if (!k) return fail("unknown option %s (see --help)", arg);
  if (eq && !(k->how & CMD_PATH)) return fail("%s takes no value", flag);
  if (a->cmd && a->cmd != k) return fail("one view at a time: %s and %s", a->cmd->flag, flag);
  a->cmd = k;
  if (eq) a->c.path = eq + 1;
  return 0;
}

static int arg_watch(struct args *a, const char *val) {
  char *end;
  a->watch = val ? strtod(val, &end) : 0;
  if (!val || end == val || *end || !(a->watch >= 0.1 && a->watch <= 86400))
    return fail("--watch wants SECONDS between 0.1 and 86400");
  return 0;
}

static int args_parse(struct args *a, int argc, char **argv) {
  int rc = 0;
  for (int i = 1; i < argc && !rc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--json")) a->c.json = 1;
    else if (!strcmp(arg, "--watch")) rc = arg_watch(a, i + 1 < argc ? argv[++i] : NULL);
    else if (arg[0] == '-' && arg[1]) rc = arg_view(a, arg);
    else if (a->npos < 2) a->pos[a->npos++] = arg;
    else rc = fail("unexpected argument %s (see --help)", arg);
  }
  if (rc) return rc;
  if (!a->cmd) a->cmd = cmd_find("");
  a->c.name = a->pos[0];
  if (a->npos == 2 && (!(a->cmd->how & CMD_PATH) || a->c.path))
    return fail("unexpected argument %s (see --help)", a->pos[1]);
  if (a->npos == 2) a->c.path = a->pos[1];
  if (!(a->cmd->how & CMD_ATTACH)) return 0;
  if (!a->c.name) return fail("missing segment NAME (see --help)");
  if (a->watch && (a->cmd->how & CMD_WRITES)) return fail("--watch does not go with %s", a->cmd->flag);
  return 0;
}

/* ---- running a view ------------------------------------------------------------- */

static volatile sig_atomic_t stop;
static void on_signal(int sig) { stop = sig; }

/* The mapping covers the file as it was at attach: if someone truncates the
 * file meanwhile, reading past its new end raises SIGBUS.  That is the one
 * fault a read can meet that no bounds check prevents; it ends the run with
 * the usual one-line reason (write(2) and _exit are async-signal-safe). */
static char sigbus_msg[PDSHM_SEG_NAME_MAX + 96];
static void on_sigbus(int sig) {
  (void)sig;
  ssize_t rc = write(2, sigbus_msg, strlen(sigbus_msg));
  (void)rc;
  _exit(2);
}

static void catch_sigbus(const char *name) {
  snprintf(sigbus_msg, sizeof sigbus_msg,
           PROG ": %s: the segment file shrank while being read (SIGBUS)\n", name);
  struct sigaction sa = {.sa_handler = on_sigbus};
  sigaction(SIGBUS, &sa, NULL);
}

/* The view into memory, then to stdout when it completed. */
static int run_once(struct args *a, int clear) {
  char *buf = NULL;
  size_t len = 0;
  FILE *real = stdout;
  a->c.out = open_memstream(&buf, &len);
  if (!a->c.out) abort();
  int status = a->cmd->run(&a->c);
  fclose(a->c.out);
  a->c.out = real;
  if (status < 2) {
    if (clear) fputs("\033[H\033[2J", stdout);
    fwrite(buf, 1, len, stdout);
    fflush(stdout);
  }
  free(buf);
  return status;
}

static int run_watch(struct args *a) {
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  struct timespec ts = {(time_t)a->watch, (long)((a->watch - (double)(time_t)a->watch) * 1e9)};
  for (;;) {
    int status = run_once(a, !a->c.json);
    if (status == 2) return status;
    nanosleep(&ts, NULL);
    if (stop) return 0;
  }
}

int main(int argc, char **argv) {
  struct args a = {.c = {.out = stdout}};
  int rc = args_parse(&a, argc, argv);
  if (rc) return rc;
  if (!(a.cmd->how & CMD_ATTACH)) return a.cmd->run(&a.c);
  catch_sigbus(a.c.name);
  pdshm_options o = {.flags = PDSHM_RDONLY}; /* --reap attaches for writing itself */
  if ((rc = pdshm_attach(a.c.name, &o, &a.c.seg))) return fail_rc(&a.c, "", rc);
  int status = a.watch ? run_watch(&a) : run_once(&a, 0);
  pdshm_detach(a.c.seg);
  return status;
}
