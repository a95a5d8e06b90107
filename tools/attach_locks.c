/*
 * attach_locks.c - the lock table (--locks): what each entry in use guards,
 * who holds it, and how contended it has been.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "attach.h"

struct lock_rows {
  pdshm_lock_info *li;
  size_t n, cap;
};

static int lock_add(const pdshm_lock_info *li, void *arg) {
  struct lock_rows *r = arg;
  r->li = grow(r->li, r->n, &r->cap, sizeof *r->li);
  r->li[r->n++] = *li;
  return 0;
}

/* "heap", "scope params/fc", "var params/fc/W" into buf. */
static const char *guards(const struct scope_list *l, const pdshm_lock_info *li, char *buf,
                          size_t cap) {
  const struct scope_row *s = scope_by_id(l, li->scope_id);
  const char *path = s ? s->path : "?";
  if (li->kind == PDSHM_LOCK_OF_HEAP) snprintf(buf, cap, "heap");
  else if (li->kind == PDSHM_LOCK_OF_SCOPE) snprintf(buf, cap, "scope %s", path);
  else if (s && s->si.depth == 0) snprintf(buf, cap, "var %s", li->var);
  else snprintf(buf, cap, "var %s/%s", path, li->var);
  return buf;
}

static double share(const pdshm_lock_info *li) {
  return li->acquisitions ? (double)li->contended / (double)li->acquisitions : 0.0;
}

static void locks_text(struct ctx *c, const struct scope_list *l, const struct lock_rows *r) {
  char g[1024], safe[1024];
  unsigned w = 6;
  for (size_t i = 0; i < r->n; i++) {
    size_t n = strlen(printable(guards(l, &r->li[i], g, sizeof g), safe, sizeof safe));
    if (n > w) w = (unsigned)n;
  }
  fprintf(c->out, "%6s  %-*s  %8s  %12s  %9s  %12s  %5s\n", "LOCK", (int)w, "GUARDS", "HOLDER",
          "ACQUIRED", "CONTENDED", "WAITED", "DIED");
  for (size_t i = 0; i < r->n; i++) {
    const pdshm_lock_info *li = &r->li[i];
    char holder[16];
    if (li->held) snprintf(holder, sizeof holder, "%u", li->holder_pid);
    else snprintf(holder, sizeof holder, "-");
    fprintf(c->out, "%6u  %-*s  %8s  %12llu  %8.1f%%  %10.3f s  %5llu%s\n", li->index, (int)w,
            printable(guards(l, li, g, sizeof g), safe, sizeof safe), holder,
            (unsigned long long)li->acquisitions, 100.0 * share(li), (double)li->wait_ns / 1e9,
            (unsigned long long)li->owner_died, li->unrecoverable ? "  UNRECOVERABLE" : "");
  }
}

static const char *kind_name(int kind) {
  return kind == PDSHM_LOCK_OF_HEAP ? "heap" : kind == PDSHM_LOCK_OF_SCOPE ? "scope" : "var";
}

static void locks_json(struct ctx *c, const struct scope_list *l, const struct lock_rows *r) {
  FILE *f = c->out;
  char g[1024];
  fprintf(f, "{\"schema\":%d,\"view\":\"locks\",\"segment\":", ATTACH_SCHEMA);
  json_str(f, c->name);
  fputs(",\"locks\":[", f);
  for (size_t i = 0; i < r->n; i++) {
    const pdshm_lock_info *li = &r->li[i];
    fprintf(f, "%s{\"index\":%u,\"kind\":\"%s\",\"guards\":", i ? "," : "", li->index,
            kind_name(li->kind));
    json_str(f, guards(l, li, g, sizeof g));
    fputs(",\"scope_id\":", f);
    if (li->kind == PDSHM_LOCK_OF_HEAP) fputs("null", f);
    else fprintf(f, "%llu", (unsigned long long)li->scope_id);
    fputs(",\"var\":", f);
    if (li->kind == PDSHM_LOCK_OF_VAR) json_str(f, li->var);
    else fputs("null", f);
    fprintf(f, ",\"held\":%s,\"holder_pid\":%u,\"acquisitions\":%llu,\"contended\":%llu,"
            "\"contended_share\":%.6f,\"wait_ns\":%llu,\"owner_died\":%llu,\"unrecoverable\":%s}",
            li->held ? "true" : "false", li->holder_pid, (unsigned long long)li->acquisitions,
            (unsigned long long)li->contended, share(li), (unsigned long long)li->wait_ns,
            (unsigned long long)li->owner_died, li->unrecoverable ? "true" : "false");
  }
  fputs("]}\n", f);
}

int view_locks(struct ctx *c) {
  struct scope_list l;
  struct lock_rows r = {0};
  int rc = scopes_load(c->seg, &l);
  if (rc) return fail_rc(c, "scopes: ", rc);
  if ((rc = pdshm_inspect_locks(c->seg, lock_add, &r))) {
    scopes_free(&l);
    free(r.li);
    return fail_rc(c, "locks: ", rc);
  }
  if (c->json) locks_json(c, &l, &r);
  else locks_text(c, &l, &r);
  scopes_free(&l);
  free(r.li);
  return 0;
}
