/*
 * attach_procs.c - the process table (--procs) and --reap, the one view
 * that writes.
 */
#include "config.h"

#include <stdlib.h>

#include "attach.h"

int procs_load(struct ctx *c, pdshm_proc_info **out) {
  for (int tries = 0; tries < 8; tries++) { /* slots may be taken meanwhile */
    int n = pdshm_procs(c->seg, NULL, 0);
    if (n < 0) return fail_rc(c, "processes: ", n), -2;
    *out = calloc((size_t)n + 1, sizeof **out);
    if (!*out) abort();
    int m = pdshm_procs(c->seg, *out, (unsigned)n + 1);
    if (m >= 0 && m <= n + 1) return m;
    free(*out);
    if (m < 0) return fail_rc(c, "processes: ", m), -2;
  }
  return fail("%s: processes: the table kept changing", c->name), -2;
}

static const char *state_name(int state) {
  return state == PDSHM_PROC_ALIVE ? "alive" : state == PDSHM_PROC_DEAD ? "dead"
         : state == PDSHM_PROC_REAPING ? "reaping" : "?";
}

static void procs_text(struct ctx *c, const pdshm_proc_info *pi, int n) {
  char since[32], at[64], held[32];
  fprintf(c->out, "%5s  %8s  %-7s  %9s  %-23s  %8s  %6s  %10s\n", "SLOT", "PID", "STATE",
          "SINCE", "ATTACHED", "HANDLES", "PINS", "HELD");
  for (int i = 0; i < n; i++) {
    fprintf(c->out, "%5u  %8u  %-7s  %9s  %-23s  %8llu  %6llu  %10s", pi[i].slot, pi[i].pid,
            state_name(pi[i].state), ago(pi[i].attach_ns, since, sizeof since),
            when(pi[i].attach_ns, at, sizeof at), (unsigned long long)pi[i].handles,
            (unsigned long long)pi[i].pins, human(pi[i].bytes_held, held, sizeof held));
    if (pi[i].state == PDSHM_PROC_REAPING) fprintf(c->out, "  (reaper pid %u)", pi[i].reaper_pid);
    fputc('\n', c->out);
  }
  if (!n) fprintf(c->out, "(no process attached)\n");
}

static void procs_json(struct ctx *c, const pdshm_proc_info *pi, int n) {
  fprintf(c->out, "{\"schema\":%d,\"view\":\"procs\",\"segment\":", ATTACH_SCHEMA);
  json_str(c->out, c->name);
  fputs(",\"procs\":[", c->out);
  for (int i = 0; i < n; i++)
    fprintf(c->out,
            "%s{\"slot\":%u,\"pid\":%u,\"state\":\"%s\",\"reaper_pid\":%u,\"attach_ns\":%llu,"
            "\"handles\":%llu,\"pins\":%llu,\"bytes_held\":%llu}",
            i ? "," : "", pi[i].slot, pi[i].pid, state_name(pi[i].state), pi[i].reaper_pid,
            (unsigned long long)pi[i].attach_ns, (unsigned long long)pi[i].handles,
            (unsigned long long)pi[i].pins, (unsigned long long)pi[i].bytes_held);
  fputs("]}\n", c->out);
}

int view_procs(struct ctx *c) {
  pdshm_proc_info *pi;
  int n = procs_load(c, &pi);
  if (n < 0) return 2;
  if (c->json) procs_json(c, pi, n);
  else procs_text(c, pi, n);
  free(pi);
  return 0;
}

/* Attaching for writing reaps already (the library reaps at attach), so the
 * count is the segment's own counter of reaped slots, before and after. */
int view_reap(struct ctx *c) {
  pdshm_seg_info before, after;
  pdshm_seg *rw;
  int rc = pdshm_inspect_seg(c->seg, &before);
  if (rc) return fail_rc(c, "segment: ", rc);
  if ((rc = pdshm_attach(c->name, NULL, &rw))) return fail_rc(c, "attach for writing: ", rc);
  rc = pdshm_reap(rw, NULL);
  pdshm_detach(rw);
  if (rc) return fail_rc(c, "reap: ", rc);
  if ((rc = pdshm_inspect_seg(c->seg, &after))) return fail_rc(c, "segment: ", rc);
  unsigned long long reaped = after.reaped - before.reaped;
  if (c->json) {
    fprintf(c->out, "{\"schema\":%d,\"view\":\"reap\",\"segment\":", ATTACH_SCHEMA);
    json_str(c->out, c->name);
    fprintf(c->out, ",\"reaped\":%llu}\n", reaped);
  } else {
    fprintf(c->out, "%s: reaped %llu dead process slot%s\n", c->name, reaped,
            reaped == 1 ? "" : "s");
  }
  return 0;
}
