/*
 * subj_pdshm.c - pdshm as a subject of the benchmark, through the public API
 * only: scopes and variables as a store, tensors as an allocator (a resize to
 * n bytes, then to 0 bytes, which frees the buffer), a variable's lock as a
 * locker.  Every segment is named after the run's tag and unlinked by its
 * creator.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "pdshm.h"

#define STORE_SEG_SIZE (512ull << 20) /* 100k names at depth 8, 8 processes */
#define ALLOC_SEG_SIZE (256ull << 20) /* tensors up to 16 MiB               */
#define LOCK_SEG_SIZE (8ull << 20)

struct bstore {
  pdshm_seg *seg;
  pdshm_scope *root;
  char name[96];
};

static void fail(const char *what, int rc) {
  fprintf(stderr, "pdshm-bench: %s: %s (%s)\n", what, pdshm_strerror(rc), pdshm_last_error());
}

/* Creates (create) or attaches the segment called tag, with its root. */
static struct bstore *seg_open(const char *tag, size_t size, bool create) {
  struct bstore *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  snprintf(st->name, sizeof st->name, "%s", tag);
  pdshm_options o = {.size = size};
  int rc = create ? pdshm_create(tag, &o, &st->seg) : pdshm_attach(tag, NULL, &st->seg);
  if (rc) {
    fail(create ? "pdshm_create" : "pdshm_attach", rc);
    free(st);
    return NULL;
  }
  if ((rc = pdshm_root(st->seg, &st->root))) {
    fail("pdshm_root", rc);
    pdshm_detach(st->seg);
    if (create) pdshm_unlink(tag);
    free(st);
    return NULL;
  }
  return st;
}

static void seg_close(struct bstore *st, bool destroy) {
  pdshm_scope_release(st->root);
  pdshm_detach(st->seg);
  if (destroy) pdshm_unlink(st->name);
  free(st);
}

/* ---- store ------------------------------------------------------------------ */

static struct bstore *store_create(const char *tag) { return seg_open(tag, STORE_SEG_SIZE, true); }
static struct bstore *store_attach(const char *tag) { return seg_open(tag, 0, false); }

static void *root(struct bstore *st) {
  pdshm_scope *s;
  int rc = pdshm_scope_dup(st->root, &s);
  if (rc) fail("pdshm_scope_dup", rc);
  return rc ? NULL : s;
}

static void *scope_new(struct bstore *st, void *parent, const char *name) {
  pdshm_scope *s;
  int rc = pdshm_scope_new(parent ? parent : st->root, name, &s);
  if (rc) fail("pdshm_scope_new", rc);
  return rc ? NULL : s;
}

static void *scope_open(struct bstore *st, const char *name) {
  pdshm_scope *s;
  int rc = pdshm_scope_open(st->seg, name, &s);
  if (rc) fail("pdshm_scope_open", rc);
  return rc ? NULL : s;
}

/* A named scope stays linked (others may still open it) until the segment
 * goes with its store. */
static void scope_free(struct bstore *st, void *sc) { pdshm_scope_release(sc); }

static void *find(void *sc, const char *name) { return pdshm_find_var(sc, name); }

static int get(void *sc, const char *name) {
  pdshm_var *v;
  return pdshm_var_get(sc, name, &v);
}

static int erase(void *sc, const char *name) { return pdshm_var_erase(sc, name); }
static int rename_var(void *sc, const char *from, const char *to) {
  return pdshm_var_rename(sc, from, to);
}

const struct store_ops store_pdshm = {
    .name = "pdshm", .shared = true, .chain = true,
    .create = store_create, .attach = store_attach, .close = seg_close, .root = root,
    .scope_new = scope_new, .scope_open = scope_open, .scope_free = scope_free,
    .find = find, .get = get, .erase = erase, .rename = rename_var};

/* ---- allocator: one tensor resized to n bytes, then to none ------------------ */

struct one_var {
  struct bstore *st;
  pdshm_scope *scope;
  pdshm_var *var;
};

/* A segment with the named scope "hot" holding the variable "hot". */
static struct one_var *one_var_open(const char *tag, size_t size, bool create) {
  struct one_var *o = calloc(1, sizeof *o);
  if (!o || !(o->st = seg_open(tag, size, create))) {
    free(o);
    return NULL;
  }
  int rc = create ? pdshm_scope_new(o->st->root, "hot", &o->scope)
                  : pdshm_scope_open(o->st->seg, "hot", &o->scope);
  if (!rc) rc = create ? pdshm_var_create(o->scope, "hot", &o->var)
                       : (o->var = pdshm_find_var(o->scope, "hot")) ? 0 : PDSHM_ENOENT;
  if (!rc && create) rc = pdshm_tensor_resize(o->var, PDSHM_I64, 1, (int64_t[]){1});
  if (rc) {
    fail("the hot variable", rc);
    if (o->scope) pdshm_scope_release(o->scope);
    seg_close(o->st, create);
    free(o);
    return NULL;
  }
  return o;
}

static void one_var_close(struct one_var *o, bool destroy) {
  pdshm_scope_release(o->scope);
  seg_close(o->st, destroy);
  free(o);
}

static void *alloc_open(const char *tag) { return one_var_open(tag, ALLOC_SEG_SIZE, true); }

static void *tensor_alloc(void *ctx, size_t n) {
  struct one_var *o = ctx;
  int rc = pdshm_tensor_resize(o->var, PDSHM_U8, 1, (int64_t[]){(int64_t)n});
  if (rc) bench_die("pdshm_tensor_resize(%zu): %s", n, pdshm_strerror(rc));
  return pdshm_tensor_data(o->var);
}

static void tensor_free(void *ctx, void *p) {
  struct one_var *o = ctx;
  int rc = pdshm_tensor_resize(o->var, PDSHM_U8, 1, (int64_t[]){0});
  if (rc) bench_die("pdshm_tensor_resize(0): %s", pdshm_strerror(rc));
}

static void alloc_close(void *ctx) { one_var_close(ctx, true); }

const struct alloc_ops alloc_pdshm = {.name = "pdshm", .open = alloc_open, .alloc = tensor_alloc,
                                      .free = tensor_free, .close = alloc_close};

/* ---- locker: the hot variable's lock --------------------------------------- */

static void *lock_open(const char *tag, void *made) {
  return one_var_open(tag, LOCK_SEG_SIZE, made == NULL);
}

static void var_lock(void *ctx, bool exclusive) {
  int rc = pdshm_var_lock(((struct one_var *)ctx)->var, exclusive);
  if (rc) bench_die("pdshm_var_lock: %s", pdshm_strerror(rc));
}

static void var_unlock(void *ctx) {
  int rc = pdshm_var_unlock(((struct one_var *)ctx)->var);
  if (rc) bench_die("pdshm_var_unlock: %s", pdshm_strerror(rc));
}

static unsigned long long *var_counter(void *ctx) {
  return pdshm_tensor_data(((struct one_var *)ctx)->var);
}

static void lock_close(void *ctx, bool destroy) { one_var_close(ctx, destroy); }

const struct lock_ops lock_pdshm = {.name = "pdshm", .open = lock_open, .lock = var_lock,
                                    .unlock = var_unlock, .counter = var_counter,
                                    .close = lock_close};
