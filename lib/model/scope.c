/*
 * scope.c - scopes: the root, local and named scopes, handles, lifetime.
 *
 * Owns: struct pdshm_scope_rec and struct pdshm_handle_rec (records.h), the
 * private struct pdshm_scope, and the lanes' todo queues.  records.h says which
 * lock guards which field; lib/CRASH-SAFETY.md how a scope is destroyed.
 *
 * Invariants:
 *  1. x->refs == (HANDLE blocks naming x) + (scopes whose parent is x) +
 *     x->linked.  Every change to it is one journal under x's lock.
 *  2. A named scope is on its parent's kid list while it can be opened; a
 *     scope off the list with linked == 1 sits on some lane's todo chain.
 *  3. refs == 0 is final (nothing can name an unreachable scope) and puts the
 *     scope on the todo of the lane that saw it, in the same journal.
 *  4. A lane's todo queue is empty when its operation returns, except after a
 *     death, when the reaper (acting as the dead slot) runs it to the end.
 *
 * Locks are taken parent first: open by path walks hand over hand; nothing
 * here holds two scope locks except that walk and the kid-to-handle step.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h"


static struct pdshm_scope_rec *scope_rec(const pdshm_seg *seg, pdshm_off_t off) {
  return pdshm__scope_at(seg, off);
}

/* ---- the root ------------------------------------------------------------------ */

int pdshm__scope_init_root(pdshm_seg *seg) {
  struct pdshm_lane_ctx *ln = &seg->lanes[0];
  uint32_t lk;
  pdshm_off_t off;
  int rc = pdshm__lock_claim(seg, PDSHM_LK_SCOPE, 0, &lk);
  if (!rc) rc = pdshm__alloc(seg, ln, sizeof(struct pdshm_scope_rec), PDSHM_T_SCOPE, &off);
  if (rc) return rc;
  struct pdshm_scope_rec *r = scope_rec(seg, off);
  memset(r, 0, sizeof *r);
  r->magic = PDSHM_SCOPE_MAGIC;
  r->flags = PDSHM_SF_ROOT;
  r->id = pdshm__new_id(seg, ln);
  r->lock = lk;
  r->refs = 1; /* the segment's own: the root never dies */
  r->linked = 1;
  r->creator_pid = (uint32_t)getpid();
  r->created_ns = pdshm__now_ns(CLOCK_REALTIME);
  pdshm__lockent(seg, lk)->guards = off;
  atomic_store(&pdshm__lockent(seg, lk)->alloc, PDSHM_LOCK_PUBLISHED);
  pdshm__blk_set_owner(pdshm__blk(seg, off), 0);
  seg->hdr->root = off;
  return 0;
}

/* ---- private handles --------------------------------------------------------------- */

static pthread_mutex_t scope_list_mu = PTHREAD_MUTEX_INITIALIZER;
static pdshm_scope *scope_list; /* every live private handle of the process */

static pdshm_scope *scope_priv_new(pdshm_seg *seg) {
  pdshm_scope *h = pdshm__zalloc(sizeof *h);
  if (h) h->seg = seg;
  return h;
}

static void scope_priv_link(pdshm_scope *h) {
  pthread_mutex_lock(&scope_list_mu);
  h->next = scope_list;
  h->prev = NULL;
  if (scope_list) scope_list->prev = h;
  scope_list = h;
  pthread_mutex_unlock(&scope_list_mu);
}

static void scope_priv_free(pdshm_scope *h) {
  pthread_mutex_lock(&scope_list_mu);
  if (h->prev) h->prev->next = h->next;
  else if (scope_list == h) scope_list = h->next;
  if (h->next) h->next->prev = h->prev;
  pthread_mutex_unlock(&scope_list_mu);
  pdshm__xfree(h);
}

/* Detach: the shared references were dropped by the slot release; free the
 * private handles that pointed into this attachment. */
void pdshm__scope_free_handles(pdshm_seg *seg) {
  pthread_mutex_lock(&scope_list_mu);
  for (pdshm_scope *h = scope_list, *next; h; h = next) {
    next = h->next;
    if (h->seg != seg) continue;
    if (h->prev) h->prev->next = h->next;
    else scope_list = h->next;
    if (h->next) h->next->prev = h->prev;
    pdshm__xfree(h);
  }
  pthread_mutex_unlock(&scope_list_mu);
}

static int scope_usable(const pdshm_scope *h) {
  if (!h) return pdshm__fail(PDSHM_EINVAL, "NULL scope handle");
  return pdshm__seg_writable(h->seg);
}

/* ---- references ----------------------------------------------------------------- */

/* Within a journal under x's lock: one more HANDLE record on x. */
static int scope_handle_add(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t x,
                            pdshm_off_t *h) {
  int rc = pdshm__j_alloc_keep(seg, ln, sizeof(struct pdshm_handle_rec), PDSHM_T_HANDLE, h);
  if (rc) return rc;
  struct pdshm_handle_rec *hr = PDSHM_AT(seg->base, *h, struct pdshm_handle_rec);
  hr->epoch = atomic_load(&pdshm__slot(seg, ln->tag - 1u)->epoch);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, hr, scope), x); /* records.h: a handle counts once
                                                            its scope is set */
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, scope_rec(seg, x), refs), scope_rec(seg, x)->refs + 1);
  return 0;
}

/* Within a journal under x's lock: x loses one reference; invariant 3. */
static void scope_unref(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t x) {
  struct pdshm_scope_rec *r = scope_rec(seg, x);
  struct pdshm_lane_todo *t = &ln->rec->todo;
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, refs), r->refs - 1);
  if (r->refs != 1) return;
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, r, dying), 1);
  if (!t->destroy) {
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, destroy), x);
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, phase), PDSHM_DESTROY_UNHOOK);
  } else {
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, next), x);
  }
}

/* A new private handle on x, taking x's lock (or with it held: `locked`). */
static int scope_handle_new(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t x,
                            bool locked, pdshm_scope **out) {
  pdshm_scope *h = scope_priv_new(seg);
  int rc = h ? 0 : pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  if (!rc && locked) pdshm__j_begin_locked(seg, ln, pdshm__scope_lock(seg, x), PDSHM_OP_HANDLE);
  else if (!rc) rc = pdshm__j_begin(seg, ln, pdshm__scope_lock(seg, x), PDSHM_OP_HANDLE);
  if (rc) {
    pdshm__xfree(h);
    if (locked) pdshm__unlock(seg, pdshm__scope_lock(seg, x));
    return rc;
  }
  rc = scope_handle_add(seg, ln, x, &h->handle);
  if (rc) {
    pdshm__j_abort(seg, ln);
    pdshm__xfree(h);
    return rc;
  }
  pdshm__j_commit(seg, ln);
  h->rec = x;
  scope_priv_link(h);
  *out = h;
  return 0;
}

static bool handle_ok(pdshm_seg *seg, pdshm_off_t h, uint16_t tag) {
  return pdshm__block_live(seg, h, PDSHM_T_HANDLE, sizeof(struct pdshm_handle_rec)) &&
         pdshm__blk_owner(pdshm__blk(seg, h)) == tag;
}

int pdshm__handle_drop(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t h) {
  if (!handle_ok(seg, h, ln->tag)) return pdshm__fail(PDSHM_EINVAL, "not a handle record");
  pdshm_off_t x = PDSHM_AT(seg->base, h, struct pdshm_handle_rec)->scope;
  if (!x) return 0; /* never committed: no reference to drop; the sweep frees it */
  int rc = pdshm__j_begin(seg, ln, pdshm__scope_lock(seg, x), PDSHM_OP_UNHANDLE);
  if (rc) return rc;
  pdshm__j_retire_kept(seg, ln, h);
  scope_unref(seg, ln, x);
  pdshm__j_commit(seg, ln);
  PDSHM_CRASHPOINT("scope.handle.dropped");
  return pdshm__todo_run(seg, ln);
}

/* ---- kid lists (the parent's lock held) ------------------------------------------------ */

/* A link of a kid list, read from the segment: 0, or a scope record. */
static int kid_link(const pdshm_seg *seg, pdshm_off_t k) {
  if (!k || pdshm__scope_rec_ok(seg, k)) return 0;
  return pdshm__fail(PDSHM_EBADSEG, "a scope's kid list links to %#llx, no scope (damaged)",
                     (unsigned long long)k);
}

/* Bound on a kid-list walk: more kids than the arena holds scope records
 * is a cycle (a damaged list), walked no farther. */
static uint64_t kids_max(const pdshm_seg *seg) {
  return (pdshm__seg_end(seg) - seg->hdr->arena_off) /
             (PDSHM_BLK_HDR + sizeof(struct pdshm_scope_rec)) + 1;
}

/* p's kid named name into *out (0 when none); EBADSEG. */
static int kid_find(pdshm_seg *seg, struct pdshm_scope_rec *p, const char *name, size_t len,
                    pdshm_off_t *out) {
  uint64_t n = 0, max = kids_max(seg);
  *out = 0;
  for (pdshm_off_t k = p->first_kid; k; k = scope_rec(seg, k)->next_sib) {
    if (n++ == max)
      return pdshm__fail(PDSHM_EBADSEG, "a scope's kid list has a cycle (damaged)");
    int rc = kid_link(seg, k);
    if (rc) return rc;
    const struct pdshm_name *nm = pdshm__name_at(seg, scope_rec(seg, k)->name);
    if (nm && nm->len == len && !memcmp(nm->s, name, len)) {
      *out = k;
      return 0;
    }
  }
  return 0;
}

/* Journaled: k off p's kid list; EBADSEG (nothing journaled) when its
 * neighbours are no scopes or do not link back to it, or k is p's first kid
 * and has a previous one or the other way round: so every delist shortens
 * the list, and a cycle is found rather than walked forever. */
static int kid_delist(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_scope_rec *p,
                      pdshm_off_t k) {
  struct pdshm_scope_rec *kr = scope_rec(seg, k);
  int rc = kid_link(seg, kr->prev_sib);
  if (!rc) rc = kid_link(seg, kr->next_sib);
  if (rc) return rc;
  if ((p->first_kid == k) != !kr->prev_sib ||
      (kr->prev_sib && scope_rec(seg, kr->prev_sib)->next_sib != k) ||
      (kr->next_sib && scope_rec(seg, kr->next_sib)->prev_sib != k))
    return pdshm__fail(PDSHM_EBADSEG, "scope %#llx's kid list does not link back (damaged)",
                       (unsigned long long)pdshm__off(seg, p));
  if (kr->prev_sib)
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, scope_rec(seg, kr->prev_sib), next_sib), kr->next_sib);
  else
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, p, first_kid), kr->next_sib);
  if (kr->next_sib)
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, scope_rec(seg, kr->next_sib), prev_sib), kr->prev_sib);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, kr, inlist), 0);
  return 0;
}

/* Journaled: a delisted named kid k goes on the lane's unlink chain. */
static void kid_chain(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t k) {
  struct pdshm_lane_todo *t = &ln->rec->todo;
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, scope_rec(seg, k), next_sib), t->chain);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, chain), k);
}

/* ---- creating scopes ---------------------------------------------------------------------- */

static int scope_check_parent(pdshm_seg *seg, struct pdshm_scope_rec *p, const char *name,
                              size_t len) {
  if (!name) return 0;
  if (!(p->flags & (PDSHM_SF_ROOT | PDSHM_SF_NAMED)))
    return pdshm__fail(PDSHM_EINVAL, "a named scope needs a named parent (or the root)");
  if (!p->linked) return pdshm__fail(PDSHM_ESTALE, "the parent scope has been unlinked");
  pdshm_off_t k;
  int rc = kid_find(seg, p, name, len, &k);
  if (!rc && k)
    return pdshm__fail(PDSHM_EEXIST, "the parent already has a scope named \"%s\"", name);
  return rc;
}

/* Off to the side: the new scope's record, owned until the journal commits. */
static int scope_build(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t p,
                       const char *name, size_t len, uint32_t lk, pdshm_off_t *out) {
  pdshm_off_t k, nm = 0;
  int rc = pdshm__j_alloc(seg, ln, sizeof(struct pdshm_scope_rec), PDSHM_T_SCOPE, &k);
  if (!rc && name) rc = pdshm__name_new(seg, ln, name, len, &nm);
  if (rc) return rc;
  struct pdshm_scope_rec *pr = scope_rec(seg, p), *r = scope_rec(seg, k);
  memset(r, 0, sizeof *r);
  r->magic = PDSHM_SCOPE_MAGIC;
  r->flags = name ? PDSHM_SF_NAMED : 0;
  r->id = pdshm__new_id(seg, ln);
  r->parent = p;
  r->name = nm;
  r->lock = lk;
  r->depth = pr->depth + 1;
  r->refs = name ? 1 : 0; /* the link; the handle adds one below */
  r->linked = name ? 1 : 0;
  r->inlist = 1;
  r->next_sib = pr->first_kid;
  r->creator_pid = seg->pid;
  r->creator_slot = ln->tag - 1u;
  r->created_ns = pdshm__now_ns(CLOCK_REALTIME);
  pdshm__lockent(seg, lk)->guards = k;
  pdshm__lockent(seg, lk)->rank = pdshm__lock_rank(PDSHM_LK_SCOPE, r->depth);
  *out = k;
  return 0;
}

/* Under p's journal: build k, link it first on p's list, take p's reference. */
static int scope_create_locked(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t p,
                               const char *name, size_t len, uint32_t lk, pdshm_scope *h) {
  struct pdshm_scope_rec *pr = scope_rec(seg, p);
  pdshm_off_t k;
  int rc = scope_check_parent(seg, pr, name, len);
  if (!rc) rc = kid_link(seg, pr->first_kid);
  if (!rc) rc = scope_build(seg, ln, p, name, len, lk, &k);
  PDSHM_CRASHPOINT("scope.new.built");
  if (!rc) rc = pdshm__j_alloc_keep(seg, ln, sizeof(struct pdshm_handle_rec), PDSHM_T_HANDLE,
                                    &h->handle);
  if (rc) return rc;
  struct pdshm_handle_rec *hr = PDSHM_AT(seg->base, h->handle, struct pdshm_handle_rec);
  hr->epoch = atomic_load(&pdshm__slot(seg, ln->tag - 1u)->epoch);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, hr, scope), k);
  scope_rec(seg, k)->refs++;
  if (pr->first_kid)
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, scope_rec(seg, pr->first_kid), prev_sib), k);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, pr, first_kid), k);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, pr, refs), pr->refs + 1);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, pdshm__lockent(seg, lk), alloc), PDSHM_LOCK_PUBLISHED);
  h->rec = k;
  return 0;
}

PDSHM_API int pdshm_scope_new(pdshm_scope *parent, const char *name, pdshm_scope **out) {
  size_t len = 0;
  uint32_t lk;
  pdshm__fail_clear();
  int rc = scope_usable(parent);
  if (rc) return rc;
  if (!out) return pdshm__fail(PDSHM_EINVAL, "NULL out pointer");
  if (name && (rc = pdshm__name_check(name, true, &len))) return rc;
  pdshm_seg *seg = parent->seg;
  pdshm_scope *h = scope_priv_new(seg);
  if (!h) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  if ((rc = pdshm__lock_claim(seg, PDSHM_LK_SCOPE, 0, &lk))) goto fail;
  PDSHM_CRASHPOINT("scope.new.claimed");
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  rc = pdshm__j_begin(seg, ln, pdshm__scope_lock(seg, parent->rec), PDSHM_OP_SCOPE_NEW);
  if (!rc) {
    rc = scope_create_locked(seg, ln, parent->rec, name, len, lk, h);
    if (rc) pdshm__j_abort(seg, ln);
    else pdshm__j_commit(seg, ln);
  }
  pdshm__lane_put(ln);
  if (rc) pdshm__lock_unclaim(seg, lk);
fail:
  if (rc) {
    pdshm__xfree(h);
    return rc;
  }
  scope_priv_link(h);
  *out = h;
  return 0;
}

PDSHM_API int pdshm_root(pdshm_seg *seg, pdshm_scope **out) {
  pdshm__fail_clear();
  int rc = pdshm__seg_writable(seg);
  if (rc) return rc;
  if (!out) return pdshm__fail(PDSHM_EINVAL, "NULL out pointer");
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  rc = scope_handle_new(seg, ln, seg->hdr->root, false, out);
  pdshm__lane_put(ln);
  return rc;
}

PDSHM_API int pdshm_scope_dup(pdshm_scope *s, pdshm_scope **out) {
  pdshm__fail_clear();
  int rc = scope_usable(s);
  if (rc) return rc;
  if (!out) return pdshm__fail(PDSHM_EINVAL, "NULL out pointer");
  struct pdshm_lane_ctx *ln = pdshm__lane_get(s->seg);
  rc = scope_handle_new(s->seg, ln, s->rec, false, out);
  pdshm__lane_put(ln);
  return rc;
}

PDSHM_API int pdshm_scope_parent(pdshm_scope *s, pdshm_scope **out) {
  pdshm__fail_clear();
  int rc = scope_usable(s);
  if (rc) return rc;
  if (!out) return pdshm__fail(PDSHM_EINVAL, "NULL out pointer");
  pdshm_off_t p = scope_rec(s->seg, s->rec)->parent;
  if (!p) return pdshm__fail(PDSHM_ENOENT, "the root has no parent");
  struct pdshm_lane_ctx *ln = pdshm__lane_get(s->seg);
  rc = scope_handle_new(s->seg, ln, p, false, out);
  pdshm__lane_put(ln);
  return rc;
}

PDSHM_API int pdshm_scope_release(pdshm_scope *s) {
  pdshm__fail_clear();
  if (!s) return pdshm__fail(PDSHM_EINVAL, "NULL scope handle");
  int rc = pdshm__seg_usable(s->seg);
  if (!rc) {
    struct pdshm_lane_ctx *ln = pdshm__lane_get(s->seg);
    rc = pdshm__handle_drop(s->seg, ln, s->handle);
    pdshm__lane_put(ln);
  }
  scope_priv_free(s);
  return rc;
}

PDSHM_API const char *pdshm_scope_name(const pdshm_scope *s) {
  if (!s || pdshm__seg_usable(s->seg)) return "";
  const struct pdshm_name *nm = pdshm__name_at(s->seg, scope_rec(s->seg, s->rec)->name);
  return nm ? nm->s : "";
}

/* ---- open by path -------------------------------------------------------------------------- */

/* The next '/'-separated component of *path; 0 at the end, or an error. */
static int path_next(const char **path, const char **comp, size_t *len) {
  const char *p = *path, *slash = strchr(p, '/');
  size_t n = slash ? (size_t)(slash - p) : strlen(p);
  if (n == 0) return pdshm__fail(PDSHM_EINVAL, "empty component in a scope path");
  if (n > PDSHM_NAME_MAX) return pdshm__fail(PDSHM_ENAMETOOLONG, "path component too long");
  *comp = p;
  *len = n;
  *path = slash ? slash + 1 : p + n;
  return 0;
}

/* Every component well formed, before anything is looked up. */
static int path_check(const char *path) {
  const char *comp;
  size_t len;
  int rc = 0;
  while (!rc && *path) rc = path_next(&path, &comp, &len);
  return rc;
}

/* Hand over hand from the root; returns with the found scope's lock held. */
static int scope_walk(pdshm_seg *seg, const char *path, pdshm_off_t *found) {
  pdshm_off_t cur = seg->hdr->root;
  int rc = pdshm__lock(seg, pdshm__scope_lock(seg, cur));
  while (!rc && *path) {
    const char *comp = NULL;
    size_t len = 0;
    pdshm_off_t k = 0;
    rc = path_next(&path, &comp, &len);
    if (!rc) rc = kid_find(seg, scope_rec(seg, cur), comp, len, &k);
    if (!rc && !k) rc = pdshm__fail(PDSHM_ENOENT, "no scope \"%.*s\"", (int)len, comp);
    if (!rc) rc = pdshm__lock(seg, pdshm__scope_lock(seg, k));
    pdshm__unlock(seg, pdshm__scope_lock(seg, cur));
    if (!rc) cur = k;
    else return rc;
  }
  *found = cur;
  return rc;
}

PDSHM_API int pdshm_scope_open(pdshm_seg *seg, const char *path, pdshm_scope **out) {
  pdshm__fail_clear();
  int rc = pdshm__seg_writable(seg);
  if (rc) return rc;
  if (!path || !out) return pdshm__fail(PDSHM_EINVAL, "NULL path or out pointer");
  if (*path == '/') path++;
  if ((rc = path_check(path))) return rc;
  pdshm_off_t x;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  rc = scope_walk(seg, path, &x);
  if (!rc) rc = scope_handle_new(seg, ln, x, true, out);
  pdshm__lane_put(ln);
  return rc;
}

/* ---- unlinking ------------------------------------------------------------------------------ */

PDSHM_API int pdshm_scope_unlink(pdshm_scope *parent, const char *name) {
  size_t len;
  pdshm__fail_clear();
  int rc = scope_usable(parent);
  if (!rc) rc = pdshm__name_check(name, true, &len);
  if (rc) return rc;
  pdshm_seg *seg = parent->seg;
  struct pdshm_scope_rec *p = scope_rec(seg, parent->rec);
  struct pdshm_lane_ctx *ln = pdshm__lane_get(seg);
  rc = pdshm__j_begin(seg, ln, pdshm__scope_lock(seg, parent->rec), PDSHM_OP_UNLINK);
  if (!rc) {
    pdshm_off_t k;
    rc = kid_find(seg, p, name, len, &k);
    if (!rc && !k) rc = pdshm__fail(PDSHM_ENOENT, "no scope \"%s\" here", name);
    if (!rc) rc = kid_delist(seg, ln, p, k);
    if (rc) {
      pdshm__j_abort(seg, ln);
    } else {
      kid_chain(seg, ln, k);
      pdshm__j_commit(seg, ln);
      PDSHM_CRASHPOINT("scope.unlink.chained");
      rc = pdshm__todo_run(seg, ln);
    }
  }
  pdshm__lane_put(ln);
  return rc;
}

/* One kid off x's list (onto the chain when named); 1 when x had none. */
static int drop_one(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t xo) {
  struct pdshm_scope_rec *x = scope_rec(seg, xo);
  int rc = pdshm__j_begin(seg, ln, pdshm__scope_lock(seg, xo), PDSHM_OP_UNLINK);
  if (rc) return rc;
  pdshm_off_t k = x->first_kid;
  if (!k || (rc = kid_link(seg, k)) || (rc = kid_delist(seg, ln, x, k))) {
    pdshm__j_abort(seg, ln);
    return k ? rc : 1;
  }
  if (scope_rec(seg, k)->flags & PDSHM_SF_NAMED) kid_chain(seg, ln, k);
  pdshm__j_commit(seg, ln);
  PDSHM_CRASHPOINT("scope.drop_kids.one");
  return pdshm__todo_run(seg, ln);
}

PDSHM_API int pdshm_scope_drop_kids(pdshm_scope *s) {
  pdshm__fail_clear();
  int rc = scope_usable(s);
  if (rc) return rc;
  struct pdshm_lane_ctx *ln = pdshm__lane_get(s->seg);
  while ((rc = drop_one(s->seg, ln, s->rec)) == 0) continue;
  pdshm__lane_put(ln);
  return rc == 1 ? 0 : rc;
}

/* ---- the todo queue: unlink chains and destruction -------------------------------------- */

/* The chain's head h: move one of its named kids onto the chain, or, when it
 * has none left, drop its link reference and pop it. */
static int chain_step(pdshm_seg *seg, struct pdshm_lane_ctx *ln) {
  struct pdshm_lane_todo *t = &ln->rec->todo;
  pdshm_off_t h = t->chain;
  int rc = pdshm__j_begin(seg, ln, pdshm__scope_lock(seg, h), PDSHM_OP_UNLINK);
  if (rc) return rc;
  struct pdshm_scope_rec *hr = scope_rec(seg, h);
  pdshm_off_t k = hr->first_kid;
  uint64_t n = 0;
  while (!(rc = kid_link(seg, k)) && k && !(scope_rec(seg, k)->flags & PDSHM_SF_NAMED) &&
         n++ < kids_max(seg))
    k = scope_rec(seg, k)->next_sib;
  if (!rc && k && !(rc = kid_delist(seg, ln, hr, k))) {
    kid_chain(seg, ln, k);
  } else if (!rc) {
    pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, chain), hr->next_sib);
    if (hr->linked) {
      pdshm__j_set(seg, ln, PDSHM_FOFF(seg, hr, linked), 0);
      scope_unref(seg, ln, h);
    }
  }
  if (rc) {
    pdshm__j_abort(seg, ln);
    return rc;
  }
  pdshm__j_commit(seg, ln);
  PDSHM_CRASHPOINT("scope.chain.step");
  return 0;
}

/* PDSHM_DESTROY_UNHOOK (parent's lock): off the parent's list, drop the
 * parent's ref. */
static int destroy_unhook(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t x) {
  struct pdshm_lane_todo *t = &ln->rec->todo;
  struct pdshm_scope_rec *r = scope_rec(seg, x);
  int rc = pdshm__j_begin(seg, ln, pdshm__scope_lock(seg, r->parent), PDSHM_OP_DESTROY);
  if (rc) return rc;
  if (r->inlist && (rc = kid_delist(seg, ln, scope_rec(seg, r->parent), x))) {
    pdshm__j_abort(seg, ln);
    return rc;
  }
  scope_unref(seg, ln, r->parent);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, phase), PDSHM_DESTROY_VARS);
  pdshm__j_commit(seg, ln);
  PDSHM_CRASHPOINT("scope.destroy.unhooked");
  return 0;
}

/* PDSHM_DESTROY_VARS (x's lock): free every variable; a re-run after a death
 * skips the entries already cleared.  x is unreachable, but a pdshm_var *
 * into it may still be in use (the caller's race, pdshm.h): its edits and
 * pins check the record under x's lock, and must find it a variable, buffer
 * and all, for as long as they hold the lock (var_live.c, invariant 1).  One
 * release store of the next phase ends it. */
static int destroy_vars(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t x) {
  struct pdshm_scope_rec *r = scope_rec(seg, x);
  if (r->table) {
    const uint32_t lk = pdshm__scope_lock(seg, x);
    int rc = pdshm__lock(seg, lk);
    if (rc) return rc;
    uint64_t cap = 0;
    struct pdshm_table *tb = pdshm__table_at(seg, r->table, &cap);
    for (uint64_t i = 0; i < cap; i++)
      if (tb->ent[i].var > PDSHM_TOMBSTONE) pdshm__var_free_unreachable(seg, ln, &tb->ent[i]);
    pdshm__unlock(seg, lk);
    if (!tb)
      return pdshm__fail(PDSHM_EBADSEG, "scope %#llx's table, %#llx, is none (damaged)",
                         (unsigned long long)x, (unsigned long long)r->table);
  }
  atomic_store_explicit((_Atomic uint64_t *)&ln->rec->todo.phase, PDSHM_DESTROY_RECORD,
                        memory_order_release);
  PDSHM_CRASHPOINT("scope.destroy.vars");
  return 0;
}

/* PDSHM_DESTROY_RECORD (x's lock): the record itself, and the queue moves
 * on. */
static int destroy_record(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t x) {
  struct pdshm_lane_todo *t = &ln->rec->todo;
  struct pdshm_scope_rec *r = scope_rec(seg, x);
  const uint32_t lk = pdshm__scope_lock(seg, x);
  int rc = pdshm__j_begin(seg, ln, lk, PDSHM_OP_DESTROY);
  if (rc) return rc;
  if (r->table) pdshm__j_retire(seg, ln, r->table);
  if (r->name) pdshm__j_retire(seg, ln, r->name);
  pdshm__j_retire(seg, ln, x);
  /* The entry comes back to us, and is given back once the journal is over
   * (lock.c, invariant 4); a death in between leaves it to our reaper. */
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, pdshm__lockent(seg, lk), alloc), ln->tag);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, destroy), t->next);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, next), 0);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, phase),
                t->next ? PDSHM_DESTROY_UNHOOK : PDSHM_DESTROY_NONE);
  pdshm__j_commit(seg, ln);
  PDSHM_CRASHPOINT("scope.destroy.record");
  pdshm__lock_return(seg, lk, ln->tag);
  return 0;
}

static int destroy_step(pdshm_seg *seg, struct pdshm_lane_ctx *ln) {
  struct pdshm_lane_todo *t = &ln->rec->todo;
  pdshm_off_t x = t->destroy;
  if (!pdshm__scope_rec_ok(seg, x))
    return pdshm__fail(PDSHM_EBADSEG, "the scope to destroy, %#llx, is none (damaged)",
                       (unsigned long long)x);
  switch (t->phase) {
  case PDSHM_DESTROY_UNHOOK: return destroy_unhook(seg, ln, x);
  case PDSHM_DESTROY_VARS: return destroy_vars(seg, ln, x);
  case PDSHM_DESTROY_RECORD: return destroy_record(seg, ln, x);
  default: return pdshm__fail(PDSHM_EBADSEG, "todo phase %llu", (unsigned long long)t->phase);
  }
}

int pdshm__todo_run(pdshm_seg *seg, struct pdshm_lane_ctx *ln) {
  struct pdshm_lane_todo *t = &ln->rec->todo;
  for (;;) {
    int rc = 0;
    if (t->destroy) rc = destroy_step(seg, ln);
    else if (t->chain) rc = chain_step(seg, ln);
    else return 0;
    if (rc) return rc;
  }
}
