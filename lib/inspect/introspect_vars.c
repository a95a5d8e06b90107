/*
 * introspect_vars.c - pdshm_inspect_vars: the variables of one scope, from
 * one snapshot of the arena.
 *
 * A scope's variables are the published VAR records whose scope is that
 * scope's record (a variable being built or erased is private to its
 * journal's slot until the commit), so the view agrees with the scope walk
 * and never follows a half-updated index.  Names, labels and operator lists
 * are copied out (bounded by their blocks) before fn sees them.
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "inspect/inspect.h"

struct vr_ent {
  pdshm_var_info vi;
  char *ops;               /* readers then writers: pointers, then strings   */
};

struct vr_walk {
  pdshm_seg *seg;
  uint64_t scope_id;
  struct pdshm_snap snap;
  struct vr_ent *e;
  size_t n;
};

uint64_t pdshm__inspect_var_bytes(const struct pdshm_snap *s, pdshm_off_t v,
                                  const struct pdshm_var_rec *r) {
  uint64_t bytes = pdshm__snap_bytes(s, v) + pdshm__snap_bytes(s, r->name) +
                   pdshm__snap_bytes(s, r->label) + pdshm__snap_bytes(s, r->readers) +
                   pdshm__snap_bytes(s, r->writers);
  if (r->vtype == PDSHM_V_TENSOR) bytes += pdshm__snap_bytes(s, r->buf);
  return bytes;
}

/* The OPLIST block at off: where its strings are and how many bytes they
 * take (bounded by the block); *bytes 0 for none. */
static int vr_oplist(struct vr_walk *w, pdshm_off_t off, const char **names, uint64_t *bytes) {
  *bytes = 0;
  if (!off) return 0;
  const struct pdshm_oplist *ol = pdshm__snap_want(&w->snap, off, PDSHM_T_OPLIST, sizeof *ol);
  uint64_t room = ol ? pdshm__snap_bytes(&w->snap, off) - PDSHM_BLK_HDR - sizeof *ol : 0;
  uint64_t nb = ol ? __atomic_load_n(&ol->bytes, __ATOMIC_RELAXED) : 0;
  if (!ol || nb > room)
    return pdshm__fail(PDSHM_EBADSEG, "operator list at %#llx is malformed",
                       (unsigned long long)off);
  *names = ol->names;
  *bytes = nb;
  return 0;
}

/* Points ptr[0..) at the NUL-terminated strings of str[0..bytes) (our own
 * copy, so it cannot change under us); returns how many, or -1 when the
 * last one is not terminated. */
static int64_t vr_split(char *str, uint64_t bytes, const char **ptr) {
  int64_t n = 0;
  if (bytes && str[bytes - 1]) return -1;
  for (uint64_t at = 0; at < bytes; at += strlen(str + at) + 1) ptr[n++] = str + at;
  return n;
}

/* Copies both lists into one private block (pointers, then the strings)
 * and splits the copy. */
static int vr_ops(struct vr_walk *w, const struct pdshm_var_rec *r, struct vr_ent *e) {
  const char *rn = NULL, *wn = NULL;
  uint64_t rb, wb;
  int rc = vr_oplist(w, r->readers, &rn, &rb);
  if (!rc) rc = vr_oplist(w, r->writers, &wn, &wb);
  if (rc) return rc;
  size_t nptr = (size_t)(rb + wb); /* at most one string per byte */
  e->ops = pdshm__zalloc(nptr * sizeof(char *) + rb + wb);
  if (!e->ops) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  const char **ptr = (const char **)(void *)e->ops;
  char *str = e->ops + nptr * sizeof(char *);
  if (rb) memcpy(str, rn, rb);
  if (wb) memcpy(str + rb, wn, wb);
  int64_t nr = vr_split(str, rb, ptr), nw = nr < 0 ? -1 : vr_split(str + rb, wb, ptr + nr);
  if (nr < 0 || nw < 0)
    return pdshm__fail(PDSHM_EBADSEG, "variable %s: an operator list is not terminated",
                       e->vi.name);
  e->vi.readers = ptr;
  e->vi.writers = ptr + nr;
  e->vi.nreaders = (uint32_t)nr;
  e->vi.nwriters = (uint32_t)nw;
  return 0;
}

/* The variable lock: its word (varlock.c), and the exclusive holder's pid
 * from its slot. */
static int vr_lock(struct vr_walk *w, const struct pdshm_var_rec *r, pdshm_var_info *vi) {
  int owner;
  vi->lock_readers = pdshm__varlock_readers(w->seg, r, &owner);
  vi->lock_state = vi->lock_readers ? PDSHM_VLOCK_SHARED : PDSHM_VLOCK_FREE;
  if (owner < 0) return 0;
  if ((uint32_t)owner >= w->seg->hdr->max_procs)
    return pdshm__fail(PDSHM_EBADSEG, "variable lock held by slot %d of %u", owner,
                       w->seg->hdr->max_procs);
  vi->lock_state = PDSHM_VLOCK_EXCLUSIVE;
  vi->lock_holder_pid = pdshm__slot(w->seg, (uint32_t)owner)->pid;
  return 0;
}

static int vr_fill(struct vr_walk *w, pdshm_off_t v, const struct pdshm_var_rec *r,
                   struct vr_ent *e) {
  pdshm_var_info *vi = &e->vi;
  vi->scope_id = w->scope_id;
  vi->gen = r->gen;
  vi->version = atomic_load_explicit(&r->version, memory_order_relaxed);
  vi->bytes = pdshm__inspect_var_bytes(&w->snap, v, r);
  int rc = pdshm__snap_name(&w->snap, r->name, vi->name);
  if (!rc && r->label) rc = pdshm__snap_name(&w->snap, r->label, vi->label);
  uint64_t dtype_ndim = __atomic_load_n(&r->dtype_ndim, __ATOMIC_RELAXED);
  if (!rc && r->vtype == PDSHM_V_TENSOR) {
    vi->type = PDSHM_VAR_TENSOR;
    vi->dtype = (int)(uint32_t)dtype_ndim;
    vi->ndim = (int)(dtype_ndim >> 32);
    vi->nbytes = r->nbytes;
    if (vi->ndim < 0 || vi->ndim > PDSHM_NDIM_MAX || vi->dtype < 0 || vi->dtype > PDSHM_F64)
      rc = pdshm__fail(PDSHM_EBADSEG, "variable %s: dtype %d, %d dims", vi->name, vi->dtype,
                       vi->ndim);
    else memcpy(vi->dims, r->dims, (size_t)vi->ndim * sizeof vi->dims[0]);
  }
  if (!rc) rc = vr_lock(w, r, vi);
  if (!rc) rc = vr_ops(w, r, e);
  return rc;
}

static int vr_collect(struct vr_walk *w, pdshm_off_t x) {
  w->e = pdshm__zalloc((pdshm__snap_count(&w->snap, PDSHM_T_VAR) + 1) * sizeof *w->e);
  if (!w->e) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  for (size_t i = 0; i < w->snap.n; i++) {
    const struct pdshm_snap_blk *b = &w->snap.b[i];
    if (!pdshm__snap_published(b, PDSHM_T_VAR)) continue;
    const struct pdshm_var_rec *r = pdshm__snap_want(&w->snap, b->off, PDSHM_T_VAR, sizeof *r);
    if (!r || r->magic != PDSHM_VAR_MAGIC)
      return pdshm__fail(PDSHM_EBADSEG, "variable %#llx: bad record", (unsigned long long)b->off);
    if (r->scope != x) continue;
    int rc = vr_fill(w, b->off, r, &w->e[w->n++]);
    if (rc) return rc;
  }
  return 0;
}

static void vr_free(struct vr_walk *w) {
  for (size_t i = 0; w->e && i < w->n; i++) pdshm__xfree(w->e[i].ops);
  pdshm__xfree(w->e);
  pdshm__snap_free(&w->snap);
  w->e = NULL;
  w->n = 0;
}

static int vr_once(void *arg) {
  struct vr_walk *w = arg;
  pdshm_off_t x;
  vr_free(w);
  int rc = pdshm__snap_take(w->seg, &w->snap);
  if (rc) return rc;
  if (!pdshm__snap_scope(&w->snap, w->scope_id, &x))
    return pdshm__fail(PDSHM_ENOENT, "no scope with id %llu", (unsigned long long)w->scope_id);
  return vr_collect(w, x);
}

static int vr_cmp(const void *a, const void *b) {
  return strcmp(((const struct vr_ent *)a)->vi.name, ((const struct vr_ent *)b)->vi.name);
}

PDSHM_API int pdshm_inspect_vars(pdshm_seg *seg, uint64_t scope_id,
                                 int (*fn)(const pdshm_var_info *vi, void *arg), void *arg) {
  int rc = pdshm__inspect_begin(seg, fn != NULL, "callback", 0);
  if (rc) return rc;
  struct vr_walk w = {.seg = seg, .scope_id = scope_id};
  rc = pdshm__inspect_retry(seg, vr_once, &w);
  if (!rc) qsort(w.e, w.n, sizeof *w.e, vr_cmp);
  for (size_t i = 0; !rc && i < w.n; i++) rc = fn(&w.e[i].vi, arg);
  vr_free(&w);
  return rc;
}
