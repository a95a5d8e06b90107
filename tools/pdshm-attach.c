/*
 * pdshm-attach - look inside a live segment, read-only.
 *
 *   pdshm-attach NAME [--json] [VIEW]      VIEW: one of the table below
 *   pdshm-attach --help | --version
 *
 * It attaches with PDSHM_RDONLY (no process slot, no lock taken, nothing
 * stored) and prints one view.  Every subcommand is one entry of `cmds`:
 * adding a view (--vars, --procs, --locks, --alloc, ...) is adding an entry
 * and its function.  Only the public header is used.
 *
 * Exit status: 0; 1 when --check found problems; 2 for a usage error or a
 * segment that cannot be read, with a one-line reason on stderr.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pdshm.h"

#define PROG "pdshm-attach"

struct ctx {
  const char *name;            /* the segment's NAME                      */
  pdshm_seg *seg;              /* read-only attachment (NULL for --help)  */
  int json;                    /* --json                                  */
};

struct cmd {
  const char *flag;            /* "" for the default view                 */
  int attach;                  /* needs the segment                       */
  int json;                    /* has a --json form                       */
  const char *help;
  int (*run)(struct ctx *c);
};

/* A one-line reason, exit status 2. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs(PROG ": ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

static int fail_rc(const char *name, const char *what, int rc) {
  const char *detail = pdshm_last_error();
  return fail("%s: %s%s%s%s", name, what, pdshm_strerror(rc), *detail ? ": " : "", detail);
}

/* "12.3 MiB" and the like. */
static const char *human(uint64_t bytes, char *buf, size_t cap) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  unsigned u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

/* Bytes of the segment file (0 when it cannot be seen, e.g. unlinked). */
static uint64_t file_size(const char *name) {
  char path[PDSHM_SEG_NAME_MAX + 32];
  struct stat sb;
  snprintf(path, sizeof path, "/dev/shm/pdshm.%s", name);
  return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* ---- views ----------------------------------------------------------------------- */

static void summary_json(const struct ctx *c, const pdshm_stats *st, uint64_t fsize) {
  printf("{\"segment\":\"%s\",\"file_size\":%llu,\"size\":%llu,\"used\":%llu,\"free\":%llu,"
         "\"procs_alive\":%u,\"procs_dead\":%u,\"scopes\":%llu,\"vars\":%llu,"
         "\"tensor_bytes\":%llu}\n",
         c->name, (unsigned long long)fsize, (unsigned long long)st->size,
         (unsigned long long)st->used, (unsigned long long)st->free, st->procs_alive,
         st->procs_dead, (unsigned long long)st->scopes, (unsigned long long)st->vars,
         (unsigned long long)st->tensor_bytes);
}

static void summary_text(const struct ctx *c, const pdshm_stats *st, uint64_t fsize) {
  char a[32], b[32], d[32], e[32];
  double pct = st->size ? 100.0 * (double)st->used / (double)st->size : 0.0;
  printf("segment     %s  (/dev/shm/pdshm.%s)\n", c->name, c->name);
  if (fsize) printf("size        %s  (arena %s)\n", human(fsize, a, sizeof a), human(st->size, b, sizeof b));
  else printf("size        arena %s\n", human(st->size, b, sizeof b));
  printf("used        %-10s (%.1f%% of the arena)\n", human(st->used, d, sizeof d), pct);
  printf("free        %s\n", human(st->free, e, sizeof e));
  printf("processes   %u alive, %u dead (not yet reaped)\n", st->procs_alive, st->procs_dead);
  printf("scopes      %llu\n", (unsigned long long)st->scopes);
  printf("variables   %llu\n", (unsigned long long)st->vars);
  printf("tensors     %s  (%llu bytes)\n", human(st->tensor_bytes, a, sizeof a),
         (unsigned long long)st->tensor_bytes);
}

static int cmd_summary(struct ctx *c) {
  pdshm_stats st;
  int rc = pdshm_seg_stats(c->seg, &st);
  if (rc) return fail_rc(c->name, "statistics: ", rc);
  uint64_t fsize = file_size(c->name);
  if (c->json) summary_json(c, &st, fsize);
  else summary_text(c, &st, fsize);
  return 0;
}

static int cmd_check(struct ctx *c) {
  int rc = pdshm_check(c->seg, stdout);
  if (rc == 0) {
    printf("%s: every invariant holds\n", c->name);
    return 0;
  }
  if (rc == PDSHM_EBADSEG) return 1;
  return fail_rc(c->name, "check: ", rc);
}

static int cmd_help(struct ctx *c);
static int cmd_version(struct ctx *c);

static const struct cmd cmds[] = {
    {"", 1, 1, "summary: size, used/free, processes, scopes, variables, tensor bytes",
     cmd_summary},
    {"--check", 1, 0, "walk the whole segment and report every broken invariant", cmd_check},
    {"--help", 0, 0, "this help", cmd_help},
    {"--version", 0, 0, "the version", cmd_version},
};
static const size_t ncmds = sizeof cmds / sizeof cmds[0];

static int cmd_help(struct ctx *c) {
  (void)c;
  printf("usage: " PROG " NAME [--json] [VIEW]\n"
         "       " PROG " --help | --version\n\n"
         "Attaches the pdshm segment NAME (/dev/shm/pdshm.NAME) read-only and prints\n"
         "one view of it.\n\n");
  for (size_t i = 0; i < ncmds; i++)
    printf("  %-10s %s%s\n", cmds[i].flag[0] ? cmds[i].flag : "(default)", cmds[i].help,
           cmds[i].json ? " (--json)" : "");
  printf("\nexit status: 0; 1 when --check finds problems; 2 for a usage error or an\n"
         "unreadable segment.\n");
  return 0;
}

static int cmd_version(struct ctx *c) {
  (void)c;
  printf(PROG " %s\n", PACKAGE_VERSION);
  return 0;
}

/* ---- main ------------------------------------------------------------------------ */

static const struct cmd *cmd_find(const char *flag) {
  for (size_t i = 0; i < ncmds; i++)
    if (!strcmp(cmds[i].flag, flag)) return &cmds[i];
  return NULL;
}

int main(int argc, char **argv) {
  struct ctx c = {0};
  const struct cmd *cmd = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) {
      c.json = 1;
    } else if (a[0] == '-' && a[1]) {
      const struct cmd *k = cmd_find(!strcmp(a, "-h") ? "--help" : a);
      if (!k) return fail("unknown option %s (see --help)", a);
      if (cmd && cmd != k) return fail("one view at a time: %s and %s", cmd->flag, a);
      cmd = k;
    } else if (!c.name) {
      c.name = a;
    } else {
      return fail("one segment at a time: %s and %s", c.name, a);
    }
  }
  if (!cmd) cmd = cmd_find("");
  if (!cmd->attach) return cmd->run(&c);
  if (!c.name) return fail("missing segment NAME (see --help)");
  if (c.json && !cmd->json) return fail("%s has no --json form", cmd->flag);

  pdshm_options o = {.flags = PDSHM_RDONLY};
  int rc = pdshm_attach(c.name, &o, &c.seg);
  if (rc) return fail_rc(c.name, "", rc);
  int status = cmd->run(&c);
  pdshm_detach(c.seg);
  return status;
}
