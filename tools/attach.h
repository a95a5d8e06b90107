/*
 * attach.h - what the parts of pdshm-attach share: the run's context, the
 * views (one function each, listed in the table of pdshm-attach.c) and the
 * output helpers.  Only the public header is used.
 */
#ifndef PDSHM_ATTACH_H
#define PDSHM_ATTACH_H

#include <stdint.h>
#include <stdio.h>

#include "pdshm.h"

#define PROG "pdshm-attach"
#define ATTACH_SCHEMA 1 /* the "schema" of every JSON document; bumped only
                           when a field changes meaning or goes away */

struct ctx {
  const char *name;            /* the segment's NAME                        */
  pdshm_seg *seg;              /* the attachment (NULL for --help)          */
  int json;                    /* --json                                    */
  const char *path;            /* --vars PATH, or NULL for every scope      */
  FILE *out;                   /* where the view goes (stdout)              */
};

/* Views: 0, 1 (--check found problems) or 2 (reason said on stderr). */
int view_summary(struct ctx *c);
int view_vars(struct ctx *c);
int view_procs(struct ctx *c);
int view_locks(struct ctx *c);
int view_groups(struct ctx *c);
int view_alloc(struct ctx *c);
int view_check(struct ctx *c);
int view_reap(struct ctx *c);

/* ---- attach_util.c ------------------------------------------------------ */
extern FILE *attach_err;       /* where reasons go (stderr)                 */
/* A one-line reason, exit status 2. */
int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "NAME: what: message: detail" for a failed pdshm call; 2. */
int fail_rc(const struct ctx *c, const char *what, int rc);
/* "12.3 MiB" and the like. */
const char *human(uint64_t bytes, char *buf, size_t cap);
/* "2026-11-23 09:30:11 UTC", or "-" for 0. */
const char *when(uint64_t realtime_ns, char *buf, size_t cap);
/* "3m12s" since realtime_ns, or "-" for 0. */
const char *ago(uint64_t realtime_ns, char *buf, size_t cap);
/* s with every byte that is not printable ASCII or part of valid UTF-8
 * replaced by '?', for text output; buf has cap bytes. */
const char *printable(const char *s, char *buf, size_t cap);
/* s as a JSON string (quotes included): escapes, invalid UTF-8 as U+FFFD. */
void json_str(FILE *f, const char *s);
const char *dtype_name(int dtype);
/* An array of n elements of `size` bytes with room for one more: doubles
 * *cap when it is full (aborts when memory runs out). */
void *grow(void *array, size_t n, size_t *cap, size_t size);

/* ---- attach_tree.c: the scope tree, shared by the views ------------------- */
struct scope_row {
  pdshm_scope_info si;
  char *path;                  /* "params/fc", "params/#12", "/" for root   */
  char *label;                 /* "fc", "#12" or "/": the tree's label      */
  char *prefix;                /* the tree's drawing before the label       */
  unsigned prefix_cols;        /* its width in columns                      */
};
struct scope_list {
  struct scope_row *row;
  size_t n, cap;
};
/* The walk of pdshm_inspect_scopes, with paths and the tree drawn; 0 or a
 * negative PDSHM_E* code. */
int scopes_load(pdshm_seg *seg, struct scope_list *l);
void scopes_free(struct scope_list *l);
const struct scope_row *scope_by_id(const struct scope_list *l, uint64_t id);
/* A row whose path, "#id" or name PATH is; NULL when none or ambiguous. */
const struct scope_row *scope_by_path(const struct scope_list *l, const char *path);

/* One scope as a JSON object (attach_tree.c). */
void scope_json(FILE *f, const struct scope_row *r);
/* Every slot in use, in *out (malloc'd); the count, or -2 after saying why
 * (attach_procs.c). */
int procs_load(struct ctx *c, pdshm_proc_info **out);

#endif
