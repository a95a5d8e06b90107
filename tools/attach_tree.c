/*
 * attach_tree.c - the scope tree (paths, the drawing) and the default view:
 * the summary and the tree.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "attach.h"

#define TREE_DEPTH_MAX 4096 /* drawn levels; deeper ones are drawn at this depth */

struct tree_build {
  struct scope_list *l;
  char *last_at;               /* [depth]: that ancestor was its parent's last kid */
  int rc;
};

static char *xstrdup(const char *s) {
  char *d = strdup(s);
  if (!d) abort();
  return d;
}

/* "#12" for an anonymous scope, "/" for the root, else its name. */
static void row_label(struct scope_row *r) {
  char buf[32];
  snprintf(buf, sizeof buf, "#%llu", (unsigned long long)r->si.id);
  r->label = xstrdup(r->si.depth == 0 ? "/" : r->si.named ? r->si.name : buf);
}

/* The last of rows [0, end) whose scope has id `id`, or NULL. */
static const struct scope_row *row_by_id(const struct scope_list *l, size_t end, uint64_t id) {
  for (size_t i = end; i-- > 0;) /* parents come before kids: look back first */
    if (l->row[i].si.id == id) return &l->row[i];
  return NULL;
}

/* Parent's path + "/" + label (the root's kids have no leading "/").  The
 * parent is looked for among the rows before r's: in a damaged segment r's
 * parent may report r's own id, and r has no path yet. */
static void row_path(struct scope_list *l, struct scope_row *r) {
  const struct scope_row *p =
      r->si.depth ? row_by_id(l, (size_t)(r - l->row), r->si.parent_id) : NULL;
  if (!p || p->si.depth == 0) {
    r->path = xstrdup(r->label);
    return;
  }
  size_t n = strlen(p->path) + strlen(r->label) + 2;
  r->path = malloc(n);
  if (!r->path) abort();
  snprintf(r->path, n, "%s/%s", p->path, r->label);
}

/* "│   " or "    " per ancestor level, then "├── " or "└── ". */
static void row_prefix(struct tree_build *b, struct scope_row *r) {
  uint32_t d = r->si.depth < TREE_DEPTH_MAX ? r->si.depth : TREE_DEPTH_MAX - 1;
  b->last_at[d] = (char)r->si.last;
  r->prefix = malloc((size_t)d * 12 + 1);
  if (!r->prefix) abort();
  char *o = r->prefix;
  for (uint32_t k = 1; k < d; k++) o += sprintf(o, "%s", b->last_at[k] ? "    " : "\u2502   ");
  if (d) o += sprintf(o, "%s", r->si.last ? "\u2514\u2500\u2500 " : "\u251c\u2500\u2500 ");
  *o = '\0';
  r->prefix_cols = 4 * d;
}

static int tree_add(const pdshm_scope_info *si, void *arg) {
  struct tree_build *b = arg;
  struct scope_list *l = b->l;
  l->row = grow(l->row, l->n, &l->cap, sizeof *l->row);
  struct scope_row *r = &l->row[l->n++];
  *r = (struct scope_row){.si = *si};
  row_label(r);
  row_path(l, r);
  row_prefix(b, r);
  return 0;
}

int scopes_load(pdshm_seg *seg, struct scope_list *l) {
  *l = (struct scope_list){0};
  struct tree_build b = {.l = l, .last_at = calloc(TREE_DEPTH_MAX, 1)};
  if (!b.last_at) abort();
  int rc = pdshm_inspect_scopes(seg, tree_add, &b);
  free(b.last_at);
  if (rc) scopes_free(l);
  return rc;
}

void scopes_free(struct scope_list *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->row[i].path);
    free(l->row[i].label);
    free(l->row[i].prefix);
  }
  free(l->row);
  *l = (struct scope_list){0};
}

const struct scope_row *scope_by_id(const struct scope_list *l, uint64_t id) {
  return row_by_id(l, l->n, id);
}

const struct scope_row *scope_by_path(const struct scope_list *l, const char *path) {
  if (!*path) path = "/";
  for (size_t i = 0; i < l->n; i++)
    if (!strcmp(l->row[i].path, path) || (path[0] == '#' && !strcmp(l->row[i].label, path)))
      return &l->row[i];
  return NULL;
}

/* ---- the default view ------------------------------------------------------------- */

struct totals {
  pdshm_seg_info info;
  pdshm_alloc_info alloc;
  unsigned alive, dead, reaping;
  uint64_t vars, tensor_bytes;
};

static int totals_load(struct ctx *c, const struct scope_list *l, struct totals *t) {
  int rc = pdshm_inspect_seg(c->seg, &t->info);
  if (rc) return fail_rc(c, "segment: ", rc);
  if ((rc = pdshm_inspect_alloc(c->seg, &t->alloc))) return fail_rc(c, "allocator: ", rc);
  pdshm_proc_info *pi;
  int n = procs_load(c, &pi);
  if (n < 0) return 2;
  for (int i = 0; i < n; i++) {
    t->alive += pi[i].state == PDSHM_PROC_ALIVE;
    t->dead += pi[i].state == PDSHM_PROC_DEAD;
    t->reaping += pi[i].state == PDSHM_PROC_REAPING;
  }
  free(pi);
  for (size_t i = 0; i < l->n; i++) {
    t->vars += l->row[i].si.vars;
    t->tensor_bytes += l->row[i].si.tensor_bytes;
  }
  return 0;
}

static void summary_text(struct ctx *c, const struct totals *t, size_t nscopes) {
  FILE *f = c->out;
  char a[32], b[32], d[64], e[32];
  const pdshm_alloc_info *al = &t->alloc;
  double pct = al->arena ? 100.0 * (double)al->used / (double)al->arena : 0.0;
  fprintf(f, "segment     %s  (/dev/shm/pdshm.%s)\n", c->name, c->name);
  fprintf(f, "size        %s  (arena %s), layout %u, %u slots, %u locks\n",
          human(t->info.size, a, sizeof a), human(al->arena, b, sizeof b),
          t->info.layout_version, t->info.max_procs, t->info.max_locks);
  if (t->info.max_size > t->info.first_size)
    fprintf(f, "growth      up to %s, from %s at create: grew %llu times\n",
            human(t->info.max_size, a, sizeof a), human(t->info.first_size, b, sizeof b),
            (unsigned long long)t->info.growths);
  else
    fprintf(f, "growth      none: a fixed size\n");
  fprintf(f, "created     %s by pid %u (uid %u)\n", when(t->info.created_ns, d, sizeof d),
          t->info.creator_pid, t->info.creator_uid);
  fprintf(f, "used        %s (%.1f%% of the arena), free %s\n", human(al->used, a, sizeof a), pct,
          human(al->free, b, sizeof b));
  fprintf(f, "processes   %u alive, %u dead (not yet reaped)%s, %llu reaped since create\n",
          t->alive, t->dead, t->reaping ? ", some being reaped" : "",
          (unsigned long long)t->info.reaped);
  if (t->info.daemon_pid)
    fprintf(f, "daemon      pid %u, last heartbeat %s ago\n", t->info.daemon_pid,
            ago(t->info.daemon_beat_ns, e, sizeof e));
  else
    fprintf(f, "daemon      none\n");
  fprintf(f, "contents    %zu scopes, %llu variables, %s in tensors\n", nscopes,
          (unsigned long long)t->vars, human(t->tensor_bytes, a, sizeof a));
  if (t->info.poisoned)
    fprintf(f, "state       POISONED: a repair failed, every change fails (ENOTRECOVERABLE)\n");
}

static void tree_text(struct ctx *c, const struct scope_list *l) {
  FILE *f = c->out;
  unsigned w = 5;
  char name[2 * PDSHM_NAME_MAX + 8], by[32];
  for (size_t i = 0; i < l->n; i++) {
    unsigned cols = l->row[i].prefix_cols + (unsigned)strlen(l->row[i].label);
    if (cols > w) w = cols;
  }
  fprintf(f, "\n%-*s  %6s  %6s  %10s  %s\n", (int)w, "SCOPE", "REFS", "VARS", "BYTES", "HELD BY");
  for (size_t i = 0; i < l->n; i++) {
    const struct scope_row *r = &l->row[i];
    printable(r->label, name, sizeof name);
    fprintf(f, "%s%s%*s  %6llu  %6llu  %10s", r->prefix, name,
            (int)(w - r->prefix_cols - strlen(r->label)), "", (unsigned long long)r->si.refs,
            (unsigned long long)r->si.vars, human(r->si.bytes, by, sizeof by));
    for (uint32_t k = 0; k < r->si.nholders && k < PDSHM_HOLDERS_MAX; k++)
      fprintf(f, "%s%u", k ? " " : "  pid ", r->si.holders[k]);
    if (r->si.nholders > PDSHM_HOLDERS_MAX) fprintf(f, " (+%u)", r->si.nholders - PDSHM_HOLDERS_MAX);
    if (r->si.named && !r->si.linked) fprintf(f, " (unlinked)");
    fputc('\n', f);
  }
}

/* One scope as a JSON object (shared with --vars). */
void scope_json(FILE *f, const struct scope_row *r) {
  fprintf(f, "{\"id\":%llu,\"parent\":", (unsigned long long)r->si.id);
  if (r->si.depth) fprintf(f, "%llu", (unsigned long long)r->si.parent_id);
  else fputs("null", f);
  fputs(",\"path\":", f);
  json_str(f, r->path);
  fputs(",\"name\":", f);
  if (r->si.named) json_str(f, r->si.name);
  else fputs("null", f);
  fprintf(f, ",\"depth\":%u,\"linked\":%s,\"refs\":%llu,\"kids\":%llu,\"vars\":%llu,"
          "\"bytes\":%llu,\"tensor_bytes\":%llu,\"handles\":%llu,\"creator_pid\":%u,"
          "\"created_ns\":%llu,\"holders\":[",
          r->si.depth, r->si.linked ? "true" : "false", (unsigned long long)r->si.refs,
          (unsigned long long)r->si.kids, (unsigned long long)r->si.vars,
          (unsigned long long)r->si.bytes, (unsigned long long)r->si.tensor_bytes,
          (unsigned long long)r->si.handles, r->si.creator_pid,
          (unsigned long long)r->si.created_ns);
  for (uint32_t k = 0; k < r->si.nholders && k < PDSHM_HOLDERS_MAX; k++)
    fprintf(f, "%s%u", k ? "," : "", r->si.holders[k]);
  fprintf(f, "],\"nholders\":%u}", r->si.nholders);
}

static void summary_json(struct ctx *c, const struct totals *t, const struct scope_list *l) {
  FILE *f = c->out;
  const pdshm_seg_info *in = &t->info;
  fprintf(f, "{\"schema\":%d,\"view\":\"summary\",\"segment\":", ATTACH_SCHEMA);
  json_str(f, c->name);
  fprintf(f, ",\"size\":%llu,\"arena\":%llu,\"used\":%llu,\"free\":%llu,"
          "\"layout_version\":%u,\"max_procs\":%u,\"max_locks\":%u,\"created_ns\":%llu,"
          "\"creator_pid\":%u,\"creator_uid\":%u,\"daemon_pid\":%u,\"daemon_beat_ns\":%llu,"
          "\"poisoned\":%s,\"procs_alive\":%u,\"procs_dead\":%u,\"procs_reaping\":%u,"
          "\"reaped\":%llu,\"scopes\":%zu,\"vars\":%llu,\"tensor_bytes\":%llu,"
          "\"max_size\":%llu,\"first_size\":%llu,\"growths\":%llu,\"tree\":[",
          (unsigned long long)in->size, (unsigned long long)t->alloc.arena,
          (unsigned long long)t->alloc.used, (unsigned long long)t->alloc.free,
          in->layout_version, in->max_procs, in->max_locks, (unsigned long long)in->created_ns,
          in->creator_pid, in->creator_uid, in->daemon_pid, (unsigned long long)in->daemon_beat_ns,
          in->poisoned ? "true" : "false", t->alive, t->dead, t->reaping,
          (unsigned long long)in->reaped, l->n, (unsigned long long)t->vars,
          (unsigned long long)t->tensor_bytes, (unsigned long long)in->max_size,
          (unsigned long long)in->first_size, (unsigned long long)in->growths);
  for (size_t i = 0; i < l->n; i++) {
    if (i) fputc(',', f);
    scope_json(f, &l->row[i]);
  }
  fputs("]}\n", f);
}

int view_summary(struct ctx *c) {
  struct scope_list l;
  struct totals t = {0};
  int rc = scopes_load(c->seg, &l);
  if (rc) return fail_rc(c, "scopes: ", rc);
  int status = totals_load(c, &l, &t);
  if (!status && c->json) summary_json(c, &t, &l);
  if (!status && !c->json) {
    summary_text(c, &t, l.n);
    tree_text(c, &l);
  }
  scopes_free(&l);
  return status;
}
