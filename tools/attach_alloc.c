/*
 * attach_alloc.c - the allocator (--alloc) and the consistency walk
 * (--check).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "attach.h"

struct by_type {
  const char *name;
  uint64_t bytes;
};

#define ALLOC_TYPES 10

static void alloc_types(const pdshm_alloc_info *a, struct by_type t[ALLOC_TYPES]) {
  struct by_type v[ALLOC_TYPES] = {{"scope", a->scope_bytes},   {"var", a->var_bytes},
                                   {"name", a->name_bytes},     {"table", a->table_bytes},
                                   {"tensor", a->tensor_bytes}, {"handle", a->handle_bytes},
                                   {"oplist", a->oplist_bytes}, {"hold", a->hold_bytes},
                                   {"pin", a->pin_bytes},       {"raw", a->raw_bytes}};
  memcpy(t, v, sizeof v);
}

static void alloc_text(struct ctx *c, const pdshm_alloc_info *a) {
  FILE *f = c->out;
  char x[32], y[32], z[32], w[32];
  struct by_type t[ALLOC_TYPES];
  fprintf(f, "arena          %s: used %s, free %s (%s of it in process caches)\n",
          human(a->arena, x, sizeof x), human(a->used, y, sizeof y), human(a->free, z, sizeof z),
          human(a->cached, w, sizeof w));
  fprintf(f, "blocks         %llu used, %llu free, %llu cached\n",
          (unsigned long long)a->blocks_used, (unsigned long long)a->blocks_free,
          (unsigned long long)a->blocks_cached);
  fprintf(f, "largest free   %s; fragmentation %.1f%%\n", human(a->largest_free, x, sizeof x),
          100.0 * a->fragmentation);
  fprintf(f, "large blocks   %llu, %s\n", (unsigned long long)a->large_blocks,
          human(a->large_used, x, sizeof x));
  fprintf(f, "given back     %s (punched); %llu free-list rebuilds\n",
          human(a->punched, x, sizeof x), (unsigned long long)a->rebuilds);
  fprintf(f, "orphans        %llu pinned buffers no variable holds, %s\n",
          (unsigned long long)a->orphan_blocks, human(a->orphan_bytes, x, sizeof x));
  fprintf(f, "\n%-8s  %10s\n", "HOLDS", "BYTES");
  alloc_types(a, t);
  for (int i = 0; i < ALLOC_TYPES; i++)
    if (t[i].bytes) fprintf(f, "%-8s  %10s\n", t[i].name, human(t[i].bytes, x, sizeof x));
  fprintf(f, "\n%6s  %8s  %8s  %10s\n", "CLASS", "USED", "CACHED", "BYTES");
  for (unsigned k = 0; k < PDSHM_ALLOC_CLASSES; k++) {
    const pdshm_alloc_class *cl = &a->cls[k];
    if (!cl->used && !cl->cached) continue;
    fprintf(f, "%6u  %8llu  %8llu  %10s\n", cl->block_size, (unsigned long long)cl->used,
            (unsigned long long)cl->cached,
            human((cl->used + cl->cached) * cl->block_size, x, sizeof x));
  }
}

static void alloc_json(struct ctx *c, const pdshm_alloc_info *a) {
  FILE *f = c->out;
  struct by_type t[ALLOC_TYPES];
  fprintf(f, "{\"schema\":%d,\"view\":\"alloc\",\"segment\":", ATTACH_SCHEMA);
  json_str(f, c->name);
  fprintf(f, ",\"arena\":%llu,\"used\":%llu,\"free\":%llu,\"cached\":%llu,\"blocks_used\":%llu,"
          "\"blocks_free\":%llu,\"blocks_cached\":%llu,\"largest_free\":%llu,"
          "\"fragmentation\":%.6f,\"large_blocks\":%llu,\"large_used\":%llu,\"punched\":%llu,"
          "\"rebuilds\":%llu,\"orphan_blocks\":%llu,\"orphan_bytes\":%llu,\"by_type\":{",
          (unsigned long long)a->arena, (unsigned long long)a->used, (unsigned long long)a->free,
          (unsigned long long)a->cached, (unsigned long long)a->blocks_used,
          (unsigned long long)a->blocks_free, (unsigned long long)a->blocks_cached,
          (unsigned long long)a->largest_free, a->fragmentation,
          (unsigned long long)a->large_blocks, (unsigned long long)a->large_used,
          (unsigned long long)a->punched, (unsigned long long)a->rebuilds,
          (unsigned long long)a->orphan_blocks, (unsigned long long)a->orphan_bytes);
  alloc_types(a, t);
  for (int i = 0; i < ALLOC_TYPES; i++)
    fprintf(f, "%s\"%s\":%llu", i ? "," : "", t[i].name, (unsigned long long)t[i].bytes);
  fputs("},\"classes\":[", f);
  for (unsigned k = 0; k < PDSHM_ALLOC_CLASSES; k++)
    fprintf(f, "%s{\"block_size\":%u,\"used\":%llu,\"cached\":%llu}", k ? "," : "",
            a->cls[k].block_size, (unsigned long long)a->cls[k].used,
            (unsigned long long)a->cls[k].cached);
  fputs("]}\n", f);
}

int view_alloc(struct ctx *c) {
  pdshm_alloc_info a;
  int rc = pdshm_inspect_alloc(c->seg, &a);
  if (rc) return fail_rc(c, "allocator: ", rc);
  if (c->json) alloc_json(c, &a);
  else alloc_text(c, &a);
  return 0;
}

/* The report's lines as a JSON array of strings. */
static void check_json(struct ctx *c, int rc, char *report) {
  FILE *f = c->out;
  fprintf(f, "{\"schema\":%d,\"view\":\"check\",\"segment\":", ATTACH_SCHEMA);
  json_str(f, c->name);
  fprintf(f, ",\"clean\":%s,\"problems\":[", rc == 0 ? "true" : "false");
  int first = 1;
  for (char *line = report, *nl; line && *line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    if (!first) fputc(',', f);
    json_str(f, line);
    first = 0;
  }
  fputs("]}\n", f);
}

int view_check(struct ctx *c) {
  char *report = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&report, &len);
  if (!mem) abort();
  int rc = pdshm_check(c->seg, mem);
  fclose(mem);
  if (rc && rc != PDSHM_EBADSEG) {
    free(report);
    return fail_rc(c, "check: ", rc);
  }
  if (c->json) check_json(c, rc, report);
  else if (rc == 0) fprintf(c->out, "%s: every invariant holds\n", c->name);
  else fputs(report, c->out);
  free(report);
  return rc == 0 ? 0 : 1;
}
