/*
 * introspect_scopes.c - pdshm_inspect_scopes: the scope tree from one
 * snapshot of the arena.
 *
 * The tree is built from the published scope records found in the chain,
 * not by following kid lists, so that kids unlinked by drop_kids (off their
 * parent's list, still held) are seen too.  Every record's parent must be
 * another record of the snapshot and every record must be reached from the
 * root exactly once (a parent cycle or an orphan is EBADSEG after retries):
 * the walk visits each record at most once, so it ends.
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "inspect/inspect.h"

struct sc_ent {
  pdshm_off_t off, parent;  /* record, parent record                          */
  size_t up;                /* index of the parent entry (SIZE_MAX: root)     */
  bool seen;                /* reached by the walk                            */
  pdshm_scope_info si;
  uint32_t slots_seen;      /* distinct holder slots counted so far           */
};

struct sc_walk {
  pdshm_seg *seg;
  struct pdshm_snap snap;
  struct sc_ent *e;         /* sorted by record offset                        */
  size_t n;
  size_t *order;            /* the walk's order, built by sc_order            */
  size_t norder;
};

static struct sc_ent *sc_by_off(struct sc_walk *w, pdshm_off_t off) {
  size_t lo = 0, hi = w->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (w->e[mid].off == off) return &w->e[mid];
    if (w->e[mid].off < off) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

/* One entry per published scope record, with what the record says. */
static int sc_collect(struct sc_walk *w) {
  w->e = pdshm__zalloc((pdshm__snap_count(&w->snap, PDSHM_T_SCOPE) + 1) * sizeof *w->e);
  if (!w->e) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  for (size_t i = 0; i < w->snap.n; i++) {
    const struct pdshm_snap_blk *b = &w->snap.b[i];
    if (!pdshm__snap_published(b, PDSHM_T_SCOPE)) continue;
    const struct pdshm_scope_rec *r = pdshm__snap_want(&w->snap, b->off, PDSHM_T_SCOPE, sizeof *r);
    if (!r || r->magic != PDSHM_SCOPE_MAGIC)
      return pdshm__fail(PDSHM_EBADSEG, "scope %#llx: bad record", (unsigned long long)b->off);
    struct sc_ent *e = &w->e[w->n++];
    e->off = b->off;
    e->parent = r->parent;
    e->si = (pdshm_scope_info){.id = r->id, .named = (r->flags & PDSHM_SF_NAMED) != 0,
                               .linked = r->linked != 0, .refs = r->refs,
                               .creator_pid = r->creator_pid, .created_ns = r->created_ns,
                               .bytes = b->size + pdshm__snap_bytes(&w->snap, r->table)};
    if (r->name) {
      int rc = pdshm__snap_name(&w->snap, r->name, e->si.name);
      if (rc) return rc;
      e->si.bytes += pdshm__snap_bytes(&w->snap, r->name);
    }
  }
  return 0;
}

/* Parents: each must be a record of the snapshot (the root has none). */
static int sc_link(struct sc_walk *w) {
  pdshm_off_t root = w->seg->hdr->root;
  if (!sc_by_off(w, root)) return pdshm__fail(PDSHM_EBADSEG, "no root scope record");
  for (size_t i = 0; i < w->n; i++) {
    struct sc_ent *e = &w->e[i], *p = e->off == root ? NULL : sc_by_off(w, e->parent);
    if (e->off != root && (!p || p == e))
      return pdshm__fail(PDSHM_EBADSEG, "scope %#llx: parent %#llx is not a scope",
                         (unsigned long long)e->off, (unsigned long long)e->parent);
    e->up = p ? (size_t)(p - w->e) : SIZE_MAX;
    if (p) {
      e->si.parent_id = p->si.id;
      p->si.kids++;
    }
  }
  return 0;
}

/* Variables: count, tensor bytes, and their blocks' bytes, per scope. */
static int sc_vars(struct sc_walk *w) {
  for (size_t i = 0; i < w->snap.n; i++) {
    const struct pdshm_snap_blk *b = &w->snap.b[i];
    if (!pdshm__snap_published(b, PDSHM_T_VAR)) continue;
    const struct pdshm_var_rec *r = pdshm__snap_want(&w->snap, b->off, PDSHM_T_VAR, sizeof *r);
    struct sc_ent *e = r && r->magic == PDSHM_VAR_MAGIC ? sc_by_off(w, r->scope) : NULL;
    if (!e) return pdshm__fail(PDSHM_EBADSEG, "variable %#llx: bad record or scope",
                               (unsigned long long)b->off);
    e->si.vars++;
    e->si.bytes += pdshm__inspect_var_bytes(&w->snap, b->off, r);
    if (r->vtype == PDSHM_V_TENSOR) e->si.tensor_bytes += r->nbytes;
  }
  return 0;
}

struct sc_hold {
  size_t ent;
  uint32_t slot;
};

static int sc_hold_cmp(const void *a, const void *b) {
  const struct sc_hold *x = a, *y = b;
  if (x->ent != y->ent) return x->ent < y->ent ? -1 : 1;
  return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* Handle records: how many per scope, and the pids of the distinct slots
 * that own them. */
static int sc_handles(struct sc_walk *w) {
  struct sc_hold *h = pdshm__zalloc((w->snap.n ? w->snap.n : 1) * sizeof *h);
  size_t nh = 0;
  if (!h) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  uint32_t nslots = w->seg->hdr->max_procs;
  for (size_t i = 0; i < w->snap.n; i++) {
    const struct pdshm_snap_blk *b = &w->snap.b[i];
    if (b->type != PDSHM_T_HANDLE || b->state != PDSHM_BLK_USED || !b->owner ||
        b->owner > nslots)
      continue;
    const struct pdshm_handle_rec *r = pdshm__payload_at(w->seg, b->off, PDSHM_T_HANDLE, sizeof *r);
    struct sc_ent *e = r && r->scope ? sc_by_off(w, r->scope) : NULL;
    if (e) h[nh++] = (struct sc_hold){(size_t)(e - w->e), b->owner - 1u};
  }
  qsort(h, nh, sizeof *h, sc_hold_cmp);
  for (size_t i = 0; i < nh; i++) {
    pdshm_scope_info *si = &w->e[h[i].ent].si;
    si->handles++;
    if (i && h[i - 1].ent == h[i].ent && h[i - 1].slot == h[i].slot) continue;
    if (si->nholders < PDSHM_HOLDERS_MAX)
      si->holders[si->nholders] = pdshm__slot(w->seg, h[i].slot)->pid;
    si->nholders++;
  }
  pdshm__xfree(h);
  return 0;
}

/* ---- the walk's order -------------------------------------------------------------- */

static int sc_kid_cmp(const void *a, const void *b, void *arg) {
  const struct sc_walk *w = arg;
  const struct sc_ent *x = &w->e[*(const size_t *)a], *y = &w->e[*(const size_t *)b];
  if (x->up != y->up) return x->up < y->up ? -1 : 1;
  return x->si.id < y->si.id ? -1 : x->si.id > y->si.id;
}

/* Pushes the kids of entry p (the run kids[at..)) in reverse, so that the
 * smallest id comes off the stack first. */
static void sc_push_kids(struct sc_walk *w, const size_t *kids, size_t at, size_t p,
                         size_t *stack, size_t *top) {
  size_t end = at;
  while (end < w->n && w->e[kids[end]].up == p) end++;
  for (size_t k = end; k > at; k--) {
    struct sc_ent *e = &w->e[kids[k - 1]];
    e->si.depth = w->e[p].si.depth + 1;
    e->si.last = k == end;
    stack[(*top)++] = kids[k - 1];
  }
}

/* Depth first from the root; every entry must be reached. */
static int sc_order(struct sc_walk *w) {
  size_t *kids = pdshm__zalloc(w->n * sizeof *kids), *first = pdshm__zalloc(w->n * sizeof *first);
  size_t *stack = pdshm__zalloc(w->n * sizeof *stack), top = 0;
  w->order = pdshm__zalloc(w->n * sizeof *w->order);
  int rc = kids && first && stack && w->order ? 0 : pdshm__fail(PDSHM_ENOMEM, "out of memory");
  for (size_t i = 0; !rc && i < w->n; i++) kids[i] = i;
  if (!rc) {
    qsort_r(kids, w->n, sizeof *kids, sc_kid_cmp, w);
    for (size_t i = w->n; i-- > 0;)
      if (w->e[kids[i]].up != SIZE_MAX) first[w->e[kids[i]].up] = i;
    struct sc_ent *root = sc_by_off(w, w->seg->hdr->root);
    root->si.last = 1;
    stack[top++] = (size_t)(root - w->e);
  }
  while (!rc && top) {
    size_t at = stack[--top];
    w->e[at].seen = true;
    w->order[w->norder++] = at;
    if (w->e[at].si.kids) sc_push_kids(w, kids, first[at], at, stack, &top);
  }
  if (!rc && w->norder != w->n)
    rc = pdshm__fail(PDSHM_EBADSEG, "%zu scope(s) not reachable from the root", w->n - w->norder);
  pdshm__xfree(kids);
  pdshm__xfree(first);
  pdshm__xfree(stack);
  return rc;
}

/* ---- the call ------------------------------------------------------------------------ */

static void sc_free(struct sc_walk *w) {
  pdshm__snap_free(&w->snap);
  pdshm__xfree(w->e);
  pdshm__xfree(w->order);
  w->e = NULL;
  w->order = NULL;
  w->n = w->norder = 0;
}

static int sc_once(void *arg) {
  struct sc_walk *w = arg;
  sc_free(w);
  int rc = pdshm__snap_take(w->seg, &w->snap);
  if (!rc) rc = sc_collect(w);
  if (!rc) rc = sc_link(w);
  if (!rc) rc = sc_vars(w);
  if (!rc) rc = sc_handles(w);
  if (!rc) rc = sc_order(w);
  return rc;
}

PDSHM_API int pdshm_inspect_scopes(pdshm_seg *seg,
                                   int (*fn)(const pdshm_scope_info *si, void *arg), void *arg) {
  int rc = pdshm__inspect_begin(seg, fn != NULL, "callback", PDSHM_INSPECT_SLOTS);
  if (rc) return rc;
  struct sc_walk w = {.seg = seg};
  rc = pdshm__inspect_retry(seg, sc_once, &w);
  for (size_t i = 0; !rc && i < w.norder; i++) rc = fn(&w.e[w.order[i]].si, arg);
  sc_free(&w);
  return rc;
}
