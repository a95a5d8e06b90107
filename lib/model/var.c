/*
 * var.c - variables: create, get, find, erase, rename, enumerate, labels,
 * operator lists, weak references.
 *
 * Owns: struct pdshm_var_rec and struct pdshm_oplist (records.h).
 *
 * Invariants:
 *  1. A variable belongs to exactly one scope (v->scope never changes) and is
 *     reachable only through that scope's table.
 *  2. Every change to a variable or its scope's table is one journal under the
 *     scope's lock (lib/CRASH-SAFETY.md); a name, label or operator list is replaced whole (a new
 *     block published by one store), never edited in place, so lock-free
 *     readers see the old one or the new one.
 *  3. v->gen is unique among every variable the segment ever had, so a
 *     pdshm_varref naming an erased variable never finds its successor.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "model/model.h"

#define VAR_GEN_PREFIX "@var-" /* names of pdshm_var_new */

/* ---- creation ------------------------------------------------------------------- */

/* Under x's journal: a new variable named (name, len) in x. */
static int var_create_locked(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t x,
                             const char *name, size_t len, uint64_t hash, pdshm_off_t *out) {
  pdshm_off_t v, nm;
  int rc = pdshm__j_alloc(seg, ln, sizeof(struct pdshm_var_rec), PDSHM_T_VAR, &v);
  if (!rc) rc = pdshm__name_new(seg, ln, name, len, &nm);
  if (rc) return rc;
  struct pdshm_var_rec *r = pdshm__var_at(seg, v);
  memset(r, 0, sizeof *r);
  r->magic = PDSHM_VAR_MAGIC;
  r->self = v;
  r->gen = pdshm__new_id(seg, ln);
  atomic_store_explicit(&r->lk, pdshm__varlock_tag(r->gen), memory_order_relaxed);
  r->scope = x;
  r->name = nm;
  r->hash = hash;
  rc = pdshm__table_insert(seg, ln, pdshm__scope_at(seg, x), v, name, len, hash);
  if (!rc) *out = v;
  return rc;
}

enum var_mode { VAR_GET, VAR_CREATE };

static int var_make(pdshm_scope *s, const char *name, enum var_mode mode, pdshm_var **out) {
  size_t len;
  pdshm__fail_clear();
  int rc = s ? pdshm__seg_writable(s->seg) : pdshm__fail(PDSHM_EINVAL, "NULL scope handle");
  if (!rc && !out) rc = pdshm__fail(PDSHM_EINVAL, "NULL out pointer");
  if (!rc) rc = pdshm__name_check(name, false, &len);
  if (rc) return rc;
  pdshm_seg *seg = s->seg;
  struct pdshm_scope_rec *x = pdshm__scope_at(seg, s->rec);
  uint64_t hash = pdshm__hash(name, len), missed_at = 1; /* odd: no miss seen */
  pdshm_off_t v = mode == VAR_GET ? pdshm__table_find_seq(seg, x, name, len, hash, &missed_at) : 0;
  if (v) {
    *out = pdshm__var_handle(pdshm__var_at(seg, v));
    return 0;
  }
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  if ((rc = pdshm__j_begin(seg, ln, pdshm__scope_lock(seg, pdshm__off(seg, x)), PDSHM_OP_VAR_NEW))) goto out;
  /* The miss still holds when no writer touched the table since (seq even
   * and unchanged): no second probe. */
  bool unchanged = mode == VAR_GET && atomic_load_explicit(&x->seq, memory_order_relaxed) == missed_at;
  int64_t i = unchanged ? -1 : pdshm__table_find_locked(seg, x, name, len, hash);
  if (i >= 0) {
    v = pdshm__table_ent(seg, x, i)->var;
    if (mode == VAR_CREATE) rc = pdshm__fail(PDSHM_EEXIST, "variable \"%s\" exists", name);
  } else {
    rc = var_create_locked(seg, ln, s->rec, name, len, hash, &v);
  }
  if (rc || i >= 0) pdshm__j_abort(seg, ln);
  else pdshm__j_commit(seg, ln);
  if (!rc) *out = pdshm__var_handle(pdshm__var_at(seg, v));
out:
  pdshm__lane_put(ln);
  return rc;
}

PDSHM_API int pdshm_var_get(pdshm_scope *s, const char *name, pdshm_var **out) {
  return var_make(s, name, VAR_GET, out);
}

PDSHM_API int pdshm_var_create(pdshm_scope *s, const char *name, pdshm_var **out) {
  return var_make(s, name, VAR_CREATE, out);
}

/* A generated name: the segment's counter makes it new; a user variable that
 * happens to carry it is skipped. */
PDSHM_API int pdshm_var_new(pdshm_scope *s, pdshm_var **out) {
  char name[32];
  for (;;) {
    pdshm__fail_clear();
    int rc = s ? pdshm__seg_writable(s->seg) : pdshm__fail(PDSHM_EINVAL, "NULL scope handle");
    if (rc) return rc;
    uint64_t n = atomic_fetch_add_explicit(&s->seg->hdr->name_counter, 1, memory_order_relaxed);
    PDSHM_CRASHPOINT("var.new.counted");
    snprintf(name, sizeof name, VAR_GEN_PREFIX "%llu", (unsigned long long)n);
    rc = var_make(s, name, VAR_CREATE, out);
    if (rc != PDSHM_EEXIST) return rc;
  }
}

/* ---- lookups ----------------------------------------------------------------------- */

/* The walk of every lookup, from s up its parents (or s alone): the first
 * variable of that name, or 0.  stamp NULL: each table is read by the
 * waiting lookup; else by the one that never waits (PDSHM_EBUSY when a
 * table is in a change), and stamp records the tables read and their seqs
 * (none when more than it holds were read). */
static inline __attribute__((always_inline)) int var_walk(pdshm_scope *s, const char *name,
                                                          size_t len, bool up, pdshm_off_t *out,
                                                          pdshm_find_stamp *stamp) {
  pdshm_seg *seg = s->seg;
  uint64_t hash = pdshm__hash(name, len);
  unsigned depth = 0, n = 0;
  pdshm_off_t v = 0;
  /* Parents never change while a descendant lives; the walk is bounded by the
   * depth recorded at creation in case the segment is damaged. */
  for (pdshm_off_t x = s->rec; x && depth <= pdshm__scope_at(seg, s->rec)->depth; depth++) {
    struct pdshm_scope_rec *r = pdshm__scope_at(seg, x);
    if (!stamp) {
      v = pdshm__table_find(seg, r, name, len, hash);
    } else {
      uint64_t seq;
      int rc = pdshm__table_find_now(seg, r, name, len, hash, &v, &seq);
      if (rc) return rc;
      if (n < PDSHM_FIND_STAMP_TABLES) {
        stamp->count[n] = &r->seq;
        stamp->at[n] = seq;
      }
      n++;
    }
    if (v || !up) break;
    x = r->parent;
    if (x && !pdshm__scope_rec_ok(seg, x)) break; /* damaged: no farther */
  }
  if (stamp) stamp->n = n <= PDSHM_FIND_STAMP_TABLES ? n : 0;
  *out = v;
  return 0;
}

static pdshm_var *var_find(pdshm_scope *s, const char *name, bool up) {
  if (!s || !name || pdshm__seg_usable(s->seg)) return NULL;
  size_t len = strnlen(name, PDSHM_NAME_MAX + 1);
  if (len == 0 || len > PDSHM_NAME_MAX) return NULL;
  pdshm_off_t v;
  var_walk(s, name, len, up, &v, NULL);
  return v ? pdshm__var_handle(pdshm__var_at(s->seg, v)) : NULL;
}

PDSHM_API pdshm_var *pdshm_find_var(pdshm_scope *s, const char *name) {
  return var_find(s, name, true);
}

PDSHM_API pdshm_var *pdshm_find_local_var(pdshm_scope *s, const char *name) {
  return var_find(s, name, false);
}

PDSHM_API int pdshm_find_var_now(pdshm_scope *s, const char *name, int up, pdshm_var **out,
                                 pdshm_find_stamp *stamp) {
  size_t len;
  pdshm__fail_clear();
  int rc = s ? pdshm__seg_usable(s->seg) : pdshm__fail(PDSHM_EINVAL, "NULL scope handle");
  if (!rc && (!out || !stamp)) rc = pdshm__fail(PDSHM_EINVAL, "NULL out or stamp pointer");
  if (!rc) rc = pdshm__name_check(name, false, &len);
  pdshm_find_stamp st;
  pdshm_off_t v;
  if (!rc) rc = var_walk(s, name, len, up != 0, &v, &st);
  if (rc == PDSHM_EBUSY) return pdshm__fail(rc, "a scope's table is in the middle of a change");
  if (rc) return rc;
  *stamp = st;
  *out = v ? pdshm__var_handle(pdshm__var_at(s->seg, v)) : NULL;
  return 0;
}

PDSHM_API int pdshm_find_stamp_holds(const pdshm_find_stamp *stamp) {
  if (!stamp || !stamp->n || stamp->n > PDSHM_FIND_STAMP_TABLES) return 0;
  for (unsigned i = 0; i < stamp->n; i++)
    if (atomic_load_explicit((const _Atomic uint64_t *)stamp->count[i], memory_order_acquire) !=
        stamp->at[i])
      return 0;
  return 1;
}

PDSHM_API int pdshm_scope_foreach_var(pdshm_scope *s, const char *label,
                                      int (*fn)(pdshm_var *v, void *arg), void *arg) {
  pdshm__fail_clear();
  int rc = s ? pdshm__seg_usable(s->seg) : pdshm__fail(PDSHM_EINVAL, "NULL scope handle");
  if (!rc && !fn) rc = pdshm__fail(PDSHM_EINVAL, "NULL callback");
  if (rc) return rc;
  pdshm_off_t *vars;
  size_t n;
  if ((rc = pdshm__table_snapshot(s->seg, pdshm__scope_at(s->seg, s->rec), &vars, &n))) return rc;
  for (size_t i = 0; i < n && !rc; i++) {
    pdshm_var *v = pdshm__var_handle(pdshm__var_at(s->seg, vars[i]));
    if (!label || !strcmp(pdshm_var_label(v), label)) rc = fn(v, arg);
  }
  pdshm__xfree(vars);
  return rc;
}

/* ---- erase and rename --------------------------------------------------------------- */

unsigned pdshm__var_blocks(pdshm_seg *seg, pdshm_off_t v, pdshm_off_t out[8]) {
  if (!pdshm__var_parts_ok(seg, v)) return 0;
  const struct pdshm_var_rec *r = pdshm__var_at(seg, v);
  unsigned n = 0;
  out[n++] = v; /* then the parts it has, without a copy of all of them first */
  if (r->name) out[n++] = r->name;
  if (r->label) out[n++] = r->label;
  if (r->readers) out[n++] = r->readers;
  if (r->writers) out[n++] = r->writers;
  if (r->buf) out[n++] = r->buf;
  return n;
}

/* Journaled: v's blocks go when the journal commits. */
static void var_retire(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t v) {
  pdshm_off_t blocks[8];
  unsigned n = pdshm__var_blocks(seg, v, blocks);
  for (unsigned i = 0; i < n; i++) pdshm__j_retire(seg, ln, blocks[i]);
}

void pdshm__var_free_unreachable(pdshm_seg *seg, struct pdshm_lane_ctx *ln,
                                 struct pdshm_table_ent *e) {
  pdshm_off_t v = e->var, blocks[8];
  unsigned n = pdshm__var_blocks(seg, v, blocks);
  /* Marked first: if we die after clearing the entry, the reaper's sweep
   * frees what is marked; before clearing, it redoes all of this. */
  for (unsigned i = 0; i < n; i++) {
    pdshm__blk_set_owner(pdshm__blk(seg, blocks[i]), ln->tag);
    PDSHM_CRASHPOINT("var.free.mark");
  }
  atomic_store_explicit((_Atomic uint64_t *)&e->var, 0, memory_order_release);
  PDSHM_CRASHPOINT("var.free.cleared");
  for (unsigned i = 0; i < n; i++) pdshm__free(seg, ln->direct ? NULL : ln, blocks[i]);
}

static int var_edit_begin(pdshm_scope *s, struct pdshm_lane_ctx **ln, unsigned op) {
  pdshm__fail_clear();
  int rc = s ? pdshm__seg_writable(s->seg) : pdshm__fail(PDSHM_EINVAL, "NULL scope handle");
  if (rc) return rc;
  *ln = pdshm__lane_get(s->seg);
  rc = pdshm__j_begin(s->seg, *ln, pdshm__scope_lock(s->seg, s->rec), op);
  if (rc) pdshm__lane_put(*ln);
  return rc;
}

static int var_edit_end(pdshm_scope *s, struct pdshm_lane_ctx *ln, int rc) {
  if (rc) pdshm__j_abort(s->seg, ln);
  else pdshm__j_commit(s->seg, ln);
  pdshm__lane_put(ln);
  return rc;
}

PDSHM_API int pdshm_var_erase(pdshm_scope *s, const char *name) {
  size_t len;
  int rc = pdshm__name_check(name, false, &len);
  struct pdshm_lane_ctx *ln;
  if (rc || (rc = var_edit_begin(s, &ln, PDSHM_OP_VAR_ERASE))) return rc;
  struct pdshm_scope_rec *x = pdshm__scope_at(s->seg, s->rec);
  int64_t i = pdshm__table_find_locked(s->seg, x, name, len, pdshm__hash(name, len));
  if (i < 0) {
    rc = pdshm__fail(PDSHM_ENOENT, "no variable \"%s\" in this scope", name);
  } else {
    var_retire(s->seg, ln, pdshm__table_ent(s->seg, x, i)->var);
    pdshm__table_remove(s->seg, ln, x, i);
  }
  rc = var_edit_end(s, ln, rc);
  return rc;
}

PDSHM_API int pdshm_var_rename(pdshm_scope *s, const char *from, const char *to) {
  size_t flen, tlen;
  int rc = pdshm__name_check(from, false, &flen);
  if (!rc) rc = pdshm__name_check(to, false, &tlen);
  struct pdshm_lane_ctx *ln;
  if (rc || (rc = var_edit_begin(s, &ln, PDSHM_OP_VAR_RENAME))) return rc;
  pdshm_seg *seg = s->seg;
  struct pdshm_scope_rec *x = pdshm__scope_at(seg, s->rec);
  uint64_t thash = pdshm__hash(to, tlen);
  int64_t i = pdshm__table_find_locked(seg, x, from, flen, pdshm__hash(from, flen));
  pdshm_off_t nm;
  if (i < 0) rc = pdshm__fail(PDSHM_ENOENT, "no variable \"%s\" in this scope", from);
  else if (pdshm__table_find_locked(seg, x, to, tlen, thash) >= 0)
    rc = pdshm__fail(PDSHM_EEXIST, "variable \"%s\" exists", to);
  else if (!(rc = pdshm__name_new(seg, ln, to, tlen, &nm))) {
    struct pdshm_var_rec *r = pdshm__var_at(seg, pdshm__table_ent(seg, x, i)->var);
    pdshm__j_retire(seg, ln, r->name);
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, name), nm);
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, hash), thash);
    rc = pdshm__table_move(seg, ln, x, i, to, tlen, thash);
  }
  return var_edit_end(s, ln, rc);
}

/* ---- labels and operator lists -------------------------------------------------------- */

/* The name at off (a variable's name or label), "" when off holds none. */
static const char *var_string(const pdshm_seg *seg, pdshm_off_t off) {
  const struct pdshm_name *nm = off ? pdshm__name_at(seg, off) : NULL;
  return nm ? nm->s : "";
}

PDSHM_API const char *pdshm_var_name(const pdshm_var *v) {
  int rc;
  const pdshm_seg *seg = pdshm__var_attached(v, &rc);
  return seg ? var_string(seg, pdshm__var_rec(v)->name) : "";
}

PDSHM_API const char *pdshm_var_label(const pdshm_var *v) {
  int rc;
  const pdshm_seg *seg = pdshm__var_attached(v, &rc);
  return seg ? var_string(seg, pdshm__var_rec(v)->label) : "";
}

/* Runs one journaled edit of v under its scope's lock. */
static int var_edit(pdshm_var *v, unsigned op,
                    int (*edit)(pdshm_seg *, struct pdshm_lane_ctx *, struct pdshm_var_rec *,
                                const void *),
                    const void *arg) {
  int rc;
  pdshm__fail_clear();
  pdshm_seg *seg = pdshm__var_seg(v, &rc);
  if (!seg) return rc;
  struct pdshm_var_rec *r = pdshm__var_rec(v);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  rc = pdshm__var_j_begin(seg, ln, r, op);
  if (!rc) {
    rc = edit(seg, ln, r, arg);
    if (rc) pdshm__j_abort(seg, ln);
    else pdshm__j_commit(seg, ln);
  }
  pdshm__lane_put(ln);
  return rc;
}

static int label_edit(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_var_rec *r,
                      const void *arg) {
  const char *label = arg;
  pdshm_off_t nm = 0;
  size_t len = label ? strlen(label) : 0;
  int rc = len ? pdshm__name_new(seg, ln, label, len, &nm) : 0;
  if (rc) return rc;
  if (r->label) pdshm__j_retire(seg, ln, r->label);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, label), nm);
  return 0;
}

PDSHM_API int pdshm_var_set_label(pdshm_var *v, const char *label) {
  if (label && strnlen(label, PDSHM_NAME_MAX + 1) > PDSHM_NAME_MAX)
    return pdshm__fail(PDSHM_ENAMETOOLONG, "label longer than %d bytes", PDSHM_NAME_MAX);
  return var_edit(v, PDSHM_OP_VAR_SET, label_edit, label);
}

/* The list at off, NULL when there is none or it is damaged: a block
 * inside the arena holding `bytes` of strings, `count` of them whole. */
static const struct pdshm_oplist *oplist_at(const pdshm_seg *seg, pdshm_off_t off) {
  if (!off || !pdshm__block_live(seg, off, PDSHM_T_OPLIST, sizeof(struct pdshm_oplist))) return NULL;
  const struct pdshm_oplist *l = PDSHM_AT(seg->base, off, const struct pdshm_oplist);
  uint64_t room = pdshm__alloc_usable(seg, off) - sizeof *l, ends = 0;
  if (l->bytes > room || l->count > l->bytes) return NULL;
  for (uint64_t i = 0; i < l->bytes; i++) ends += l->names[i] == '\0';
  return ends >= l->count && (!l->bytes || l->names[l->bytes - 1] == '\0') ? l : NULL;
}

static bool oplist_has(const struct pdshm_oplist *l, const char *op) {
  const char *p = l ? l->names : NULL;
  for (uint64_t i = 0; l && i < l->count; i++, p += strlen(p) + 1)
    if (!strcmp(p, op)) return true;
  return false;
}

struct op_add {
  const char *op;
  bool writers;
};

static int oplist_edit(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_var_rec *r,
                       const void *arg) {
  const struct op_add *a = arg;
  pdshm_off_t *field = a->writers ? &r->writers : &r->readers, nl;
  const struct pdshm_oplist *old = oplist_at(seg, *field);
  if (oplist_has(old, a->op)) return 0;
  size_t len = strlen(a->op) + 1, had = old ? old->bytes : 0;
  int rc = pdshm__j_alloc(seg, ln, sizeof(struct pdshm_oplist) + had + len, PDSHM_T_OPLIST, &nl);
  if (rc) return rc;
  struct pdshm_oplist *l = PDSHM_AT(seg->base, nl, struct pdshm_oplist);
  l->count = (old ? old->count : 0) + 1;
  l->bytes = had + len;
  if (old) memcpy(l->names, old->names, had);
  memcpy(l->names + had, a->op, len);
  if (*field) pdshm__j_retire(seg, ln, *field);
  pdshm__j_set(seg, ln, pdshm__off(seg, field), nl);
  return 0;
}

static int var_add_op(pdshm_var *v, const char *op, bool writers) {
  size_t len;
  int rc = pdshm__name_check(op, false, &len);
  if (rc) return rc;
  struct op_add a = {.op = op, .writers = writers};
  return var_edit(v, PDSHM_OP_VAR_SET, oplist_edit, &a);
}

PDSHM_API int pdshm_var_add_reader(pdshm_var *v, const char *op) { return var_add_op(v, op, false); }
PDSHM_API int pdshm_var_add_writer(pdshm_var *v, const char *op) { return var_add_op(v, op, true); }

static int var_ops(const pdshm_var *v, const char **ops, int cap, bool writers) {
  int rc;
  const pdshm_seg *seg = pdshm__var_attached(v, &rc);
  if (!seg) return rc;
  if (cap < 0 || (cap > 0 && !ops)) return pdshm__fail(PDSHM_EINVAL, "bad arguments");
  const struct pdshm_var_rec *r = pdshm__var_rec(v);
  const struct pdshm_oplist *l = oplist_at(seg, writers ? r->writers : r->readers);
  if (!l) return 0;
  const char *p = l->names;
  for (uint64_t i = 0; i < l->count; i++, p += strlen(p) + 1)
    if ((int64_t)i < cap) ops[i] = p;
  return (int)l->count;
}

PDSHM_API int pdshm_var_readers(const pdshm_var *v, const char **ops, int cap) {
  return var_ops(v, ops, cap, false);
}

PDSHM_API int pdshm_var_writers(const pdshm_var *v, const char **ops, int cap) {
  return var_ops(v, ops, cap, true);
}

/* ---- versions and weak references ---------------------------------------------------- */

PDSHM_API uint64_t pdshm_var_version(const pdshm_var *v) {
  int rc;
  if (!pdshm__var_attached(v, &rc)) return 0;
  return atomic_load_explicit(&pdshm__var_rec(v)->version, memory_order_acquire);
}

PDSHM_API pdshm_varref pdshm_var_ref(const pdshm_var *v) {
  int rc;
  pdshm_varref ref = {0, 0};
  if (pdshm__var_attached(v, &rc))
    ref = (pdshm_varref){.off = pdshm__var_rec(v)->self, .gen = pdshm__var_rec(v)->gen};
  return ref;
}

PDSHM_API pdshm_var *pdshm_varref_get(pdshm_seg *seg, pdshm_varref ref) {
  if (pdshm__seg_usable(seg)) return NULL;
  if (!pdshm__block_live(seg, ref.off, PDSHM_T_VAR, sizeof(struct pdshm_var_rec))) return NULL;
  struct pdshm_var_rec *r = pdshm__var_at(seg, ref.off);
  if (r->magic != PDSHM_VAR_MAGIC || r->self != ref.off || r->gen != ref.gen) return NULL;
  return pdshm__var_handle(r);
}
