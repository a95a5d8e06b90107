/*
 * pdshm-attach - look inside a live segment, read-only.
 *
 * It attaches with PDSHM_RDONLY (no process slot, no lock, no store) and
 * prints one view; each view is an entry of the `views` table.
 *
 * Exit status: 0, 1 when --check found problems, 2 for a usage error or a
 * segment that cannot be read.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdshm.h"

struct view {
  const char *flag;
  const char *help;
  int (*run)(pdshm_seg *seg, const char *name, int json);
};

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

static int view_summary(pdshm_seg *seg, const char *name, int json) {
  pdshm_stats st;
  int rc = pdshm_seg_stats(seg, &st);
  if (rc) {
    fprintf(stderr, "pdshm-attach: %s: %s (%s)\n", name, pdshm_strerror(rc), pdshm_last_error());
    return 2;
  }
  if (json) {
    printf("{\"segment\":\"%s\",\"size\":%llu,\"used\":%llu,\"free\":%llu,\"procs_alive\":%u,"
           "\"procs_dead\":%u,\"scopes\":%llu,\"vars\":%llu,\"tensor_bytes\":%llu}\n",
           name, (unsigned long long)st.size, (unsigned long long)st.used,
           (unsigned long long)st.free, st.procs_alive, st.procs_dead,
           (unsigned long long)st.scopes, (unsigned long long)st.vars,
           (unsigned long long)st.tensor_bytes);
    return 0;
  }
  char a[32], b[32], c[32], d[32];
  printf("segment    %s (/dev/shm/pdshm.%s)\n", name, name);
  printf("arena      %s: %s used, %s free (%.1f%%)\n", human(st.size, a, sizeof a),
         human(st.used, b, sizeof b), human(st.free, c, sizeof c),
         st.size ? 100.0 * (double)st.used / (double)st.size : 0.0);
  printf("processes  %u alive, %u dead (not yet reaped)\n", st.procs_alive, st.procs_dead);
  printf("scopes     %llu\n", (unsigned long long)st.scopes);
  printf("variables  %llu, %s in tensors\n", (unsigned long long)st.vars,
         human(st.tensor_bytes, d, sizeof d));
  return 0;
}

static int view_check(pdshm_seg *seg, const char *name, int json) {
  (void)json;
  int rc = pdshm_check(seg, stdout);
  if (rc == 0) {
    printf("%s: every invariant holds\n", name);
    return 0;
  }
  if (rc == PDSHM_EBADSEG) return 1;
  fprintf(stderr, "pdshm-attach: %s: %s (%s)\n", name, pdshm_strerror(rc), pdshm_last_error());
  return 2;
}

static const struct view views[] = {
    {"", "a summary: size, use, processes, scopes, variables (default)", view_summary},
    {"--check", "walk the segment and report every broken invariant", view_check},
};

static void usage(FILE *to) {
  fprintf(to, "usage: pdshm-attach NAME [--json] [VIEW]\n       pdshm-attach --help | --version\n"
              "views:\n");
  for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
    fprintf(to, "  %-10s %s\n", views[i].flag[0] ? views[i].flag : "(none)", views[i].help);
}

int main(int argc, char **argv) {
  const char *name = NULL;
  const struct view *view = &views[0];
  int json = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--version")) {
      printf("pdshm-attach %s\n", PACKAGE_VERSION);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (a[0] == '-') {
      size_t k = 1;
      while (k < sizeof views / sizeof views[0] && strcmp(views[k].flag, a)) k++;
      if (k == sizeof views / sizeof views[0]) {
        fprintf(stderr, "pdshm-attach: unknown option %s\n", a);
        usage(stderr);
        return 2;
      }
      view = &views[k];
    } else if (!name) {
      name = a;
    } else {
      fprintf(stderr, "pdshm-attach: one segment at a time\n");
      return 2;
    }
  }
  if (!name) {
    usage(stderr);
    return 2;
  }
  pdshm_seg *seg;
  pdshm_options o = {.flags = PDSHM_RDONLY};
  int rc = pdshm_attach(name, &o, &seg);
  if (rc) {
    fprintf(stderr, "pdshm-attach: %s: %s%s%s\n", name, pdshm_strerror(rc),
            *pdshm_last_error() ? ": " : "", pdshm_last_error());
    return 2;
  }
  int status = view->run(seg, name, json);
  pdshm_detach(seg);
  return status;
}
