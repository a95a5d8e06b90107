/*
 * attach_vars.c - the variables of one scope or of every scope (--vars
 * [PATH]): name, type, dtype, shape, bytes, label, readers and writers,
 * version, lock state.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "attach.h"

#define VAR_COLS 10

struct var_row {
  const struct scope_row *scope;
  char *col[VAR_COLS];          /* text cells, printable                    */
};

struct var_rows {
  struct ctx *c;
  const struct scope_row *scope;
  struct var_row *r;
  size_t n, cap;
  int first;                    /* JSON: no comma before the next variable  */
};

static const char *var_head[VAR_COLS] = {"NAME", "TYPE", "DTYPE", "SHAPE", "BYTES", "LABEL",
                                         "READERS", "WRITERS", "VERSION", "LOCK"};

static char *cell(const char *s) {
  char buf[4096];
  char *d = strdup(printable(s, buf, sizeof buf));
  if (!d) abort();
  return d;
}

static char *shape(const pdshm_var_info *vi) {
  char buf[256];
  size_t o = 0;
  buf[o++] = '[';
  for (int k = 0; k < vi->ndim; k++)
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%lld", k ? ", " : "", (long long)vi->dims[k]);
  snprintf(buf + o, sizeof buf - o, "]");
  return cell(vi->type == PDSHM_VAR_TENSOR ? buf : "-");
}

static char *ops(const char *const *names, uint32_t n) {
  size_t len = 2;
  for (uint32_t k = 0; k < n; k++) len += strlen(names[k]) + 1;
  char *s = malloc(len), *o = s;
  if (!s) abort();
  *o = '\0';
  for (uint32_t k = 0; k < n; k++) o += sprintf(o, "%s%s", k ? "," : "", names[k]);
  char *c = cell(n ? s : "-");
  free(s);
  return c;
}

static char *lock_cell(const pdshm_var_info *vi) {
  char buf[64];
  if (vi->lock_state == PDSHM_VLOCK_EXCLUSIVE) snprintf(buf, sizeof buf, "excl pid %u", vi->lock_holder_pid);
  else if (vi->lock_state == PDSHM_VLOCK_SHARED)
    snprintf(buf, sizeof buf, "shared x%llu", (unsigned long long)vi->lock_readers);
  else snprintf(buf, sizeof buf, "-");
  return cell(buf);
}

static int var_text_add(const pdshm_var_info *vi, void *arg) {
  struct var_rows *rs = arg;
  rs->r = grow(rs->r, rs->n, &rs->cap, sizeof *rs->r);
  struct var_row *r = &rs->r[rs->n++];
  char b[32], v[32];
  snprintf(v, sizeof v, "%llu", (unsigned long long)vi->version);
  r->scope = rs->scope;
  r->col[0] = cell(vi->name);
  r->col[1] = cell(vi->type == PDSHM_VAR_TENSOR ? "tensor" : "empty");
  r->col[2] = cell(vi->type == PDSHM_VAR_TENSOR ? dtype_name(vi->dtype) : "-");
  r->col[3] = shape(vi);
  r->col[4] = cell(human(vi->nbytes, b, sizeof b));
  r->col[5] = cell(vi->label[0] ? vi->label : "-");
  r->col[6] = ops(vi->readers, vi->nreaders);
  r->col[7] = ops(vi->writers, vi->nwriters);
  r->col[8] = cell(v);
  r->col[9] = lock_cell(vi);
  return 0;
}

static void strs_json(FILE *f, const char *const *s, uint32_t n) {
  fputc('[', f);
  for (uint32_t k = 0; k < n; k++) {
    if (k) fputc(',', f);
    json_str(f, s[k]);
  }
  fputc(']', f);
}

static int var_json(const pdshm_var_info *vi, void *arg) {
  struct var_rows *rs = arg;
  FILE *f = rs->c->out;
  static const char *lock[] = {"free", "shared", "exclusive"};
  fputs(rs->first ? "{\"name\":" : ",{\"name\":", f);
  rs->first = 0;
  json_str(f, vi->name);
  fprintf(f, ",\"gen\":%llu,\"type\":\"%s\",\"dtype\":", (unsigned long long)vi->gen,
          vi->type == PDSHM_VAR_TENSOR ? "tensor" : "empty");
  if (vi->type == PDSHM_VAR_TENSOR) fprintf(f, "\"%s\",\"shape\":[", dtype_name(vi->dtype));
  else fputs("null,\"shape\":null", f);
  for (int k = 0; vi->type == PDSHM_VAR_TENSOR && k < vi->ndim; k++)
    fprintf(f, "%s%lld", k ? "," : "", (long long)vi->dims[k]);
  fprintf(f, "%s,\"nbytes\":%llu,\"bytes\":%llu,\"label\":", vi->type == PDSHM_VAR_TENSOR ? "]" : "",
          (unsigned long long)vi->nbytes, (unsigned long long)vi->bytes);
  if (vi->label[0]) json_str(f, vi->label);
  else fputs("null", f);
  fputs(",\"readers\":", f);
  strs_json(f, vi->readers, vi->nreaders);
  fputs(",\"writers\":", f);
  strs_json(f, vi->writers, vi->nwriters);
  fprintf(f, ",\"version\":%llu,\"lock\":{\"state\":\"%s\",\"readers\":%llu,\"holder_pid\":%u}}",
          (unsigned long long)vi->version, lock[vi->lock_state % 3],
          (unsigned long long)vi->lock_readers, vi->lock_holder_pid);
  return 0;
}

/* One aligned line: BYTES and VERSION to the right, the last cell unpadded. */
static void var_line(FILE *f, const unsigned *w, const char *const *cells) {
  for (int k = 0; k < VAR_COLS - 1; k++)
    fprintf(f, k == 4 || k == 8 ? "  %*s" : "  %-*s", (int)w[k], cells[k]);
  fprintf(f, "  %s\n", cells[VAR_COLS - 1]);
}

static void vars_text(struct ctx *c, const struct var_rows *rs) {
  unsigned w[VAR_COLS];
  for (int k = 0; k < VAR_COLS; k++) w[k] = (unsigned)strlen(var_head[k]);
  for (size_t i = 0; i < rs->n; i++)
    for (int k = 0; k < VAR_COLS; k++)
      if (strlen(rs->r[i].col[k]) > w[k]) w[k] = (unsigned)strlen(rs->r[i].col[k]);
  const struct scope_row *cur = NULL;
  for (size_t i = 0; i < rs->n; i++) {
    if (rs->r[i].scope != cur) {
      char p[4096];
      cur = rs->r[i].scope;
      fprintf(c->out, "%s%s  (scope #%llu)\n", i ? "\n" : "", printable(cur->path, p, sizeof p),
              (unsigned long long)cur->si.id);
      var_line(c->out, w, var_head);
    }
    var_line(c->out, w, (const char *const *)rs->r[i].col);
  }
  if (!rs->n) fprintf(c->out, "(no variables)\n");
}

static void rows_free(struct var_rows *rs) {
  for (size_t i = 0; i < rs->n; i++)
    for (int k = 0; k < VAR_COLS; k++) free(rs->r[i].col[k]);
  free(rs->r);
}

/* Every scope of l, or just `only`. */
static int vars_walk(struct ctx *c, const struct scope_list *l, const struct scope_row *only) {
  struct var_rows rs = {.c = c};
  int rc = 0, shown = 0;
  if (c->json) {
    fprintf(c->out, "{\"schema\":%d,\"view\":\"vars\",\"segment\":", ATTACH_SCHEMA);
    json_str(c->out, c->name);
    fputs(",\"scopes\":[", c->out);
  }
  for (size_t i = 0; !rc && i < l->n; i++) {
    if (only && &l->row[i] != only) continue;
    rs.scope = &l->row[i];
    if (c->json) {
      fputs(shown++ ? ",{\"scope\":" : "{\"scope\":", c->out);
      scope_json(c->out, rs.scope);
      fputs(",\"vars\":[", c->out);
      rs.first = 1;
    }
    rc = pdshm_inspect_vars(c->seg, rs.scope->si.id, c->json ? var_json : var_text_add, &rs);
    if (c->json) fputs("]}", c->out);
  }
  if (c->json && !rc) fputs("]}\n", c->out);
  if (!c->json && !rc) vars_text(c, &rs);
  rows_free(&rs);
  return rc ? fail_rc(c, "variables: ", rc) : 0;
}

int view_vars(struct ctx *c) {
  struct scope_list l;
  int rc = scopes_load(c->seg, &l);
  if (rc) return fail_rc(c, "scopes: ", rc);
  const struct scope_row *only = c->path ? scope_by_path(&l, c->path) : NULL;
  int status = c->path && !only ? fail("%s: no scope at %s", c->name, c->path)
                                : vars_walk(c, &l, only);
  scopes_free(&l);
  return status;
}
