/*
 * introspect_locks.c - pdshm_inspect_locks: the lock table's entries in use,
 * what each guards, and its counters.
 *
 * An entry is in use when it is the heap's or published (lent to a scope or
 * a variable, layout.h); entries claimed for an object still being built are
 * left out.  Whether the mutex is held comes from pdshm__lock_held_hint (no
 * lock is touched; -1 where the C library does not let a reader tell); the
 * holder's pid is the best-effort field the holder sets.
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "inspect/inspect.h"

struct lk_walk {
  pdshm_seg *seg;
  struct pdshm_snap snap;
  pdshm_lock_info *li;
  size_t n, most;           /* entries filled, room                          */
};

/* What entry l guards, from the snapshot. */
static int lk_guards(struct lk_walk *w, const struct pdshm_lock *l, pdshm_lock_info *li) {
  pdshm_off_t at = l->guards;
  const struct pdshm_scope_rec *x = pdshm__snap_want(&w->snap, at, PDSHM_T_SCOPE, sizeof *x);
  if (!x || x->magic != PDSHM_SCOPE_MAGIC)
    return pdshm__fail(PDSHM_EBADSEG, "lock %u: guards no scope", li->index);
  li->scope_id = x->id;
  return 0;
}

static int lk_entry(struct lk_walk *w, uint32_t i) {
  const struct pdshm_lock *l = pdshm__lockent(w->seg, i);
  uint64_t alloc = atomic_load_explicit(&l->alloc, memory_order_acquire);
  /* The groups' registry lock is the groups view's business. */
  if (i == PDSHM_LOCK_GROUPS || (i != PDSHM_LOCK_HEAP && alloc != PDSHM_LOCK_PUBLISHED)) return 0;
  if (w->n == w->most)
    return pdshm__fail(PDSHM_EBADSEG, "more locks in use than scopes and variables");
  pdshm_lock_info *li = &w->li[w->n];
  *li = (pdshm_lock_info){.index = i, .acquisitions = l->acquisitions,
                          .contended = l->contended, .wait_ns = l->wait_ns,
                          .owner_died = l->owner_died,
                          .unrecoverable = atomic_load(&l->unrecoverable) != 0};
  li->held = pdshm__lock_held_hint(w->seg, i);
  if (li->held == 1) li->holder_pid = atomic_load_explicit(&l->holder_pid, memory_order_relaxed);
  switch (l->kind) {
  case PDSHM_LK_HEAP: li->kind = PDSHM_LOCK_OF_HEAP; break;
  case PDSHM_LK_SCOPE: li->kind = PDSHM_LOCK_OF_SCOPE; break;
  default: return pdshm__fail(PDSHM_EBADSEG, "lock %u: unknown kind %u", i, l->kind);
  }
  if ((i == PDSHM_LOCK_HEAP) != (li->kind == PDSHM_LOCK_OF_HEAP))
    return pdshm__fail(PDSHM_EBADSEG, "lock %u: kind %u in the wrong place", i, l->kind);
  int rc = li->kind == PDSHM_LOCK_OF_HEAP ? 0 : lk_guards(w, l, li);
  if (!rc) w->n++;
  return rc;
}

static void lk_free(struct lk_walk *w) {
  pdshm__snap_free(&w->snap);
  pdshm__xfree(w->li);
  w->li = NULL;
  w->n = 0;
}

static int lk_once(void *arg) {
  struct lk_walk *w = arg;
  lk_free(w);
  int rc = pdshm__snap_take(w->seg, &w->snap);
  if (rc) return rc;
  /* Entries in use guard the heap or a record the snapshot holds (inv. 4). */
  w->most = 1 + pdshm__snap_count(&w->snap, PDSHM_T_SCOPE) +
                pdshm__snap_count(&w->snap, PDSHM_T_VAR);
  w->li = pdshm__zalloc(w->most * sizeof *w->li);
  if (!w->li) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  for (uint32_t i = 0; !rc && i < w->seg->hdr->max_locks; i++) rc = lk_entry(w, i);
  return rc;
}

PDSHM_API int pdshm_inspect_locks(pdshm_seg *seg,
                                  int (*fn)(const pdshm_lock_info *li, void *arg), void *arg) {
  int rc = pdshm__inspect_begin(seg, fn != NULL, "callback", PDSHM_INSPECT_LOCKS);
  if (rc) return rc;
  struct lk_walk w = {.seg = seg};
  rc = pdshm__inspect_retry(seg, lk_once, &w);
  for (size_t i = 0; !rc && i < w.n; i++) rc = fn(&w.li[i], arg);
  lk_free(&w);
  return rc;
}
