/*
 * check.c - pdshm_check: walks the whole segment and verifies the
 * invariants of every module, writing one line per problem.
 *
 * Safe on hostile bytes: every offset is bounds-checked and looked up in the
 * list of blocks the walk found, every list walk is bounded, and nothing is
 * allocated in proportion to a number read from the segment (only to the
 * number of blocks actually walked).
 *
 * A writable attachment stops the world for the walk: it takes every scope
 * lock with trylock (releasing all and retrying when one is busy, so that it
 * never waits in an order others do not use), then the heap lock.  A
 * read-only attachment cannot lock; it walks the live segment and, when it
 * sees problems, looks again a few times, reporting only what persists.
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "inspect/inspect.h"

#define CK_RETRIES 5

struct ck_blk {
  pdshm_off_t off;   /* payload                                            */
  uint64_t size;     /* of the block, header included                      */
  uint16_t type, owner;
  uint8_t state;
  uint8_t reached;   /* referenced by a live structure                     */
  uint32_t refs;     /* for scopes: references counted from the outside;
                        for tensor buffers: PIN records targeting them     */
};

struct ck {
  pdshm_seg *seg;
  FILE *report;
  int problems;
  struct ck_blk *b;
  size_t n;          /* blocks in b                                        */
  int *slot_alive;   /* 1 live, 0 dead, -1 free                            */
};

static void ck_say(struct ck *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ck_say(struct ck *c, const char *fmt, ...) {
  c->problems++;
  va_list ap;
  va_start(ap, fmt);
  pdshm__check_vsay(c->report, "", fmt, ap);
  va_end(ap);
}

/* The block whose payload starts at off, or NULL. */
static struct ck_blk *ck_find(struct ck *c, pdshm_off_t off) {
  size_t lo = 0, hi = c->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->b[mid].off == off) return &c->b[mid];
    if (c->b[mid].off < off) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

/* A USED block of that type at off, large enough for `need` bytes. */
static struct ck_blk *ck_want(struct ck *c, pdshm_off_t off, unsigned type, size_t need,
                              const char *what) {
  struct ck_blk *b = ck_find(c, off);
  if (!b || b->state != PDSHM_BLK_USED || b->type != type || b->size - PDSHM_BLK_HDR < need) {
    ck_say(c, "%s at %#llx is not a live block of type %u", what, (unsigned long long)off, type);
    return NULL;
  }
  return b;
}

/* ---- the block list -------------------------------------------------------------- */

/* The blocks, in chain order, from the introspection's snapshot; a damaged
 * chain is a problem reported. */
static int ck_walk_blocks(struct ck *c) {
  struct pdshm_snap s;
  int rc = pdshm__snap_take(c->seg, &s);
  if (rc == PDSHM_EBADSEG) ck_say(c, "%s", pdshm_last_error());
  if (rc) return rc == PDSHM_EBADSEG ? 0 : rc;
  c->b = pdshm__zalloc(s.n * sizeof *c->b);
  if (!c->b) rc = pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  for (size_t i = 0; c->b && i < s.n; i++)
    c->b[i] = (struct ck_blk){.off = s.b[i].off, .size = s.b[i].size, .type = s.b[i].type,
                              .owner = s.b[i].owner, .state = s.b[i].state};
  c->n = c->b ? s.n : 0;
  pdshm__snap_free(&s);
  return rc;
}

/* ---- scopes and variables --------------------------------------------------------- */

static const struct pdshm_name *ck_name(struct ck *c, pdshm_off_t off, const char *what) {
  struct ck_blk *b = ck_want(c, off, PDSHM_T_NAME, sizeof(struct pdshm_name), what);
  const struct pdshm_name *nm = b ? pdshm__name_at(c->seg, off) : NULL;
  if (b && (!nm || nm->len + 1 + sizeof *nm > b->size - PDSHM_BLK_HDR || nm->s[nm->len])) {
    ck_say(c, "%s at %#llx is malformed", what, (unsigned long long)off);
    return NULL;
  }
  if (b) b->reached = 1;
  return nm;
}

/* An OPLIST block: its strings fit the block and number `count`. */
static void ck_oplist(struct ck *c, pdshm_off_t off, const char *what) {
  struct ck_blk *b = off ? ck_want(c, off, PDSHM_T_OPLIST, sizeof(struct pdshm_oplist), what) : NULL;
  if (!b) return;
  b->reached = 1;
  const struct pdshm_oplist *ol = PDSHM_AT(c->seg->base, off, const struct pdshm_oplist);
  uint64_t bytes = ol->bytes, n = 0;
  if (bytes > b->size - PDSHM_BLK_HDR - sizeof *ol || (bytes && ol->names[bytes - 1])) {
    ck_say(c, "%s at %#llx: %llu bytes do not fit or end unterminated", what,
           (unsigned long long)off, (unsigned long long)bytes);
    return;
  }
  for (uint64_t at = 0; at < bytes; at += strlen(ol->names + at) + 1) n++;
  if (n != ol->count)
    ck_say(c, "%s at %#llx: %llu names, says %llu", what, (unsigned long long)off,
           (unsigned long long)n, (unsigned long long)ol->count);
}

static void ck_var(struct ck *c, pdshm_off_t x, pdshm_off_t v, const struct pdshm_table_ent *e) {
  uint64_t hash = e->hash;
  struct ck_blk *b = ck_want(c, v, PDSHM_T_VAR, sizeof(struct pdshm_var_rec), "variable");
  if (!b) return;
  b->reached = 1;
  const struct pdshm_var_rec *r = pdshm__var_at(c->seg, v);
  if (r->magic != PDSHM_VAR_MAGIC || r->self != v || r->scope != x)
    ck_say(c, "variable %#llx: bad magic, self or scope", (unsigned long long)v);
  const struct pdshm_name *nm = ck_name(c, r->name, "variable name");
  uint64_t key[PDSHM_KEY_BYTES / 8] = {0, 0};
  if (nm) memcpy(key, nm->s, nm->len < PDSHM_KEY_BYTES ? nm->len : PDSHM_KEY_BYTES);
  if (nm && (pdshm__hash(nm->s, nm->len) != hash || r->hash != hash || e->key[0] != key[0] ||
             e->key[1] != key[1]))
    ck_say(c, "variable \"%s\": its index entry does not match its name", nm->s);
  if (r->label) ck_name(c, r->label, "label");
  ck_oplist(c, r->readers, "readers list");
  ck_oplist(c, r->writers, "writers list");
  if (r->vtype == PDSHM_V_TENSOR &&
      ((r->dtype_ndim >> 32) > PDSHM_NDIM_MAX || (uint32_t)r->dtype_ndim > PDSHM_F64))
    ck_say(c, "variable %#llx: dtype %u with %u dims", (unsigned long long)v,
           (unsigned)(uint32_t)r->dtype_ndim, (unsigned)(r->dtype_ndim >> 32));
  if (r->vtype == PDSHM_V_TENSOR) {
    struct ck_blk *t = ck_want(c, r->buf, PDSHM_T_TENSOR, 0, "tensor buffer");
    if (t) t->reached = 1;
    if (t && (r->data % PDSHM_TENSOR_ALIGN || r->data < r->buf + sizeof(struct pdshm_tensor_buf) ||
              r->data + r->nbytes > r->buf + t->size - PDSHM_BLK_HDR))
      ck_say(c, "variable \"%s\": tensor data outside its buffer", nm ? nm->s : "?");
  }
}

static void ck_table(struct ck *c, pdshm_off_t x, const struct pdshm_scope_rec *r) {
  if (!r->table) {
    if (r->nvars) ck_say(c, "scope %#llx: %llu variables, no table", (unsigned long long)x,
                         (unsigned long long)r->nvars);
    return;
  }
  struct ck_blk *b = ck_want(c, r->table, PDSHM_T_TABLE, sizeof(struct pdshm_table), "table");
  if (!b) return;
  b->reached = 1;
  const struct pdshm_table *t = PDSHM_AT(c->seg->base, r->table, const struct pdshm_table);
  uint64_t cap = t->cap, live = 0, used = 0;
  if (!cap || (cap & (cap - 1)) || cap > (b->size - PDSHM_BLK_HDR - sizeof *t) / sizeof t->ent[0]) {
    ck_say(c, "scope %#llx: table capacity %llu is invalid", (unsigned long long)x,
           (unsigned long long)cap);
    return;
  }
  for (uint64_t i = 0; i < cap; i++) {
    pdshm_off_t v = t->ent[i].var;
    used += v != 0;
    if (v > PDSHM_TOMBSTONE) {
      live++;
      ck_var(c, x, v, &t->ent[i]);
    }
  }
  /* A dying scope's variables are freed entry by entry, without a journal
   * (PDSHM_DESTROY_VARS): its counts may lag. */
  if (!r->dying && (live != r->nvars || used != t->used || used * 8 > cap * pdshm__table_fill_eighths(cap)))
    ck_say(c, "scope %#llx: table counts disagree (live %llu/%llu, used %llu/%llu of %llu)",
           (unsigned long long)x, (unsigned long long)live, (unsigned long long)r->nvars,
           (unsigned long long)used, (unsigned long long)t->used, (unsigned long long)cap);
}

/* Whether scope x still holds its reference on its parent: a dying scope
 * drops it in PDSHM_DESTROY_UNHOOK, the first phase of its destruction,
 * which may be over while the rest is still to run: in another process, or
 * in a dead one's todo queue awaiting its reaper. */
static bool ck_holds_parent(struct ck *c, pdshm_off_t x, const struct pdshm_scope_rec *r) {
  if (!r->dying) return true;
  for (uint32_t s = 0; s < c->seg->hdr->max_procs; s++)
    for (unsigned k = 0; k < PDSHM_LANES; k++) {
      const struct pdshm_lane_todo *t = &pdshm__slot(c->seg, s)->lane[k].todo;
      if (t->destroy == x) return t->phase <= PDSHM_DESTROY_UNHOOK;
      if (t->next == x) return true;
    }
  return true;
}

/* References from outside: handle records, kids' parent pointers. */
static void ck_count_refs(struct ck *c) {
  for (size_t i = 0; i < c->n; i++) {
    struct ck_blk *b = &c->b[i];
    if (b->state != PDSHM_BLK_USED) continue;
    pdshm_off_t target = 0;
    if (b->type == PDSHM_T_HANDLE && b->size - PDSHM_BLK_HDR >= sizeof(struct pdshm_handle_rec))
      target = PDSHM_AT(c->seg->base, b->off, struct pdshm_handle_rec)->scope;
    if (b->type == PDSHM_T_SCOPE && !b->owner &&
        b->size - PDSHM_BLK_HDR >= sizeof(struct pdshm_scope_rec) &&
        ck_holds_parent(c, b->off, pdshm__scope_at(c->seg, b->off)))
      target = pdshm__scope_at(c->seg, b->off)->parent; /* published scopes only */
    struct ck_blk *s = target ? ck_find(c, target) : NULL;
    if (s && s->type == PDSHM_T_SCOPE) s->refs++;
    else if (target) ck_say(c, "block %#llx refers to %#llx, not a scope", (unsigned long long)b->off,
                            (unsigned long long)target);
  }
}

static void ck_scope(struct ck *c, struct ck_blk *b) {
  const struct pdshm_scope_rec *r = pdshm__scope_at(c->seg, b->off);
  if (b->size - PDSHM_BLK_HDR < sizeof *r || r->magic != PDSHM_SCOPE_MAGIC) {
    ck_say(c, "scope %#llx: bad magic", (unsigned long long)b->off);
    return;
  }
  b->reached = 1;
  uint64_t expect = b->refs + (r->linked && !(r->flags & PDSHM_SF_ROOT)) +
                    ((r->flags & PDSHM_SF_ROOT) != 0);
  if (!r->refs && !r->dying)
    ck_say(c, "scope %#llx: no reference left but not being destroyed", (unsigned long long)b->off);
  if (r->refs != expect && !r->dying)
    ck_say(c, "scope %#llx: refs %llu, counted %llu", (unsigned long long)b->off,
           (unsigned long long)r->refs, (unsigned long long)expect);
  if (r->name) ck_name(c, r->name, "scope name");
  if (r->lock >= c->seg->hdr->max_locks ||
      atomic_load(&pdshm__lockent(c->seg, r->lock)->alloc) != PDSHM_LOCK_PUBLISHED)
    ck_say(c, "scope %#llx: its lock %u is not published", (unsigned long long)b->off, r->lock);
  else if (pdshm__lockent(c->seg, r->lock)->guards != b->off) /* shared with another */
    ck_say(c, "scope %#llx: its lock %u guards %#llx", (unsigned long long)b->off, r->lock,
           (unsigned long long)pdshm__lockent(c->seg, r->lock)->guards);
  ck_table(c, b->off, r);
  uint64_t n = 0;
  for (pdshm_off_t k = r->first_kid, prev = 0; k; prev = k, k = pdshm__scope_at(c->seg, k)->next_sib) {
    struct ck_blk *kb = ck_want(c, k, PDSHM_T_SCOPE, sizeof *r, "kid");
    if (!kb || ++n > c->n) {
      if (kb) ck_say(c, "scope %#llx: kid list loops", (unsigned long long)b->off);
      break;
    }
    const struct pdshm_scope_rec *kr = pdshm__scope_at(c->seg, k);
    if (kr->parent != b->off || kr->prev_sib != prev || !kr->inlist)
      ck_say(c, "scope %#llx: kid %#llx has wrong links", (unsigned long long)b->off,
             (unsigned long long)k);
  }
}

/* ---- slots, locks, leaks ------------------------------------------------------------- */

static void ck_slots(struct ck *c) {
  const struct pdshm_hdr *h = c->seg->hdr;
  c->slot_alive = pdshm__zalloc(h->max_procs * sizeof *c->slot_alive);
  for (uint32_t i = 0; c->slot_alive && i < h->max_procs; i++) {
    uint32_t st = atomic_load(&pdshm__slot(c->seg, i)->state);
    c->slot_alive[i] = st == PDSHM_SLOT_FREE ? -1 : pdshm__slot_alive(c->seg, i) > 0;
  }
}

/* Every published lock-table entry guards a live object of its kind that
 * names it as its lock. */
static void ck_locks(struct ck *c) {
  for (uint32_t i = PDSHM_LOCK_FIXED; i < c->seg->hdr->max_locks; i++) {
    const struct pdshm_lock *l = pdshm__lockent(c->seg, i);
    if (atomic_load(&l->alloc) != PDSHM_LOCK_PUBLISHED) continue;
    bool scope = l->kind == PDSHM_LK_SCOPE;
    struct ck_blk *b = scope ? ck_find(c, l->guards) : NULL;
    uint64_t named = UINT64_MAX;
    if (b && b->state == PDSHM_BLK_USED && b->type == PDSHM_T_SCOPE &&
        b->size - PDSHM_BLK_HDR >= sizeof(struct pdshm_scope_rec))
      named = pdshm__scope_at(c->seg, b->off)->lock;
    if (named != i)
      ck_say(c, "lock %u (kind %u) guards %#llx, which does not use it", i, l->kind,
             (unsigned long long)l->guards);
  }
}

/* Pins (layout.h, invariant 6): every PIN record's target is a live buffer;
 * every buffer's count is the records found; an orphan is pinned, published
 * and hooked by no variable, and so accounted for here. */
static void ck_pins(struct ck *c) {
  for (size_t i = 0; i < c->n; i++) {
    struct ck_blk *b = &c->b[i];
    if (b->state != PDSHM_BLK_USED || b->type != PDSHM_T_PIN) continue;
    if (b->size - PDSHM_BLK_HDR < sizeof(struct pdshm_pin_rec) || !b->owner) {
      ck_say(c, "pin record %#llx: too small or published", (unsigned long long)b->off);
      continue;
    }
    pdshm_off_t target = PDSHM_AT(c->seg->base, b->off, struct pdshm_pin_rec)->target;
    struct ck_blk *t = target ? ck_want(c, target, PDSHM_T_TENSOR, sizeof(struct pdshm_tensor_buf),
                                        "pinned buffer") : NULL;
    if (t) t->refs++;
  }
  for (size_t i = 0; i < c->n; i++) {
    struct ck_blk *b = &c->b[i];
    if (b->state != PDSHM_BLK_USED || b->type != PDSHM_T_TENSOR ||
        b->size - PDSHM_BLK_HDR < sizeof(struct pdshm_tensor_buf))
      continue;
    bool orphan;
    uint64_t pins = pdshm__tensor_pins(c->seg, b->off, &orphan);
    if (pins != b->refs)
      ck_say(c, "buffer %#llx: %llu pins, %u pin records", (unsigned long long)b->off,
             (unsigned long long)pins, b->refs);
    if (!orphan) continue;
    if (!pins) ck_say(c, "buffer %#llx: an orphan with no pin", (unsigned long long)b->off);
    if (b->reached) ck_say(c, "buffer %#llx: an orphan still hooked", (unsigned long long)b->off);
    if (!b->owner) b->reached = 1;
  }
}

static void ck_leaks(struct ck *c) {
  for (size_t i = 0; i < c->n; i++) {
    struct ck_blk *b = &c->b[i];
    if (b->state == PDSHM_BLK_FREE) continue;
    if (b->owner) {
      if (b->owner > c->seg->hdr->max_procs || (c->slot_alive && c->slot_alive[b->owner - 1] < 0))
        ck_say(c, "block %#llx belongs to slot %u, which is free", (unsigned long long)b->off,
               b->owner - 1u);
      continue; /* private to a live slot, or awaiting its reaper */
    }
    if (b->state == PDSHM_BLK_CACHED) ck_say(c, "cached block %#llx has no owner",
                                             (unsigned long long)b->off);
    else if (!b->reached)
      ck_say(c, "block %#llx (type %u, %llu bytes) is published but unreachable",
             (unsigned long long)b->off, b->type, (unsigned long long)b->size);
  }
}

/* The group registry (group.c): every record a live GROUP block with its
 * name, members that name real slots, and no record left without one. */
static void ck_group(struct ck *c, pdshm_off_t off) {
  const struct pdshm_group_rec *g = pdshm__group_rec(c->seg, off);
  bool held = false;
  uint64_t plan = atomic_load(&g->plan); /* a regroup's applier died: the next holder applies */
  if (!pdshm__plan_sane(g, plan))
    ck_say(c, "group %#llx: a regroup plans %u ranks of %u seats", (unsigned long long)off,
           (uint32_t)(plan >> 32), g->cap);
  for (uint32_t r = 0; r < g->cap; r++) { /* ranks, then candidates */
    uint64_t m = atomic_load(&g->rank[r].member);
    uint32_t tag = (uint32_t)(m & 0xffff);
    if (m && (tag == 0 || tag > c->seg->hdr->max_procs))
      ck_say(c, "group %#llx: rank %u names slot %u", (unsigned long long)off, r, tag - 1);
    held |= m && !(m & PDSHM_GM_DEAD);
  }
  if (!held) ck_say(c, "group %#llx has no member left but is still listed",
                    (unsigned long long)off);
}

static void ck_groups(struct ck *c) {
  size_t bound = c->n;
  for (pdshm_off_t off = c->seg->hdr->groups; off; bound--) {
    struct ck_blk *b = ck_want(c, off, PDSHM_T_GROUP, sizeof(struct pdshm_group_rec), "group");
    if (!b || !bound || b->reached) {
      if (b) ck_say(c, "the group registry loops at %#llx", (unsigned long long)off);
      return;
    }
    const struct pdshm_group_rec *g = pdshm__group_rec(c->seg, off);
    if (g->magic != PDSHM_GROUP_MAGIC || g->size == 0 || g->size > g->cap ||
        g->cap > PDSHM_GROUP_MAX || pdshm__group_bytes(g->cap) > b->size - PDSHM_BLK_HDR) {
      ck_say(c, "group %#llx is malformed", (unsigned long long)off);
      return;
    }
    b->reached = 1;
    ck_name(c, g->name, "group name");
    ck_group(c, off);
    off = g->next;
  }
}

static void ck_model(struct ck *c) {
  ck_slots(c);
  ck_count_refs(c);
  struct ck_blk *root = ck_want(c, c->seg->hdr->root, PDSHM_T_SCOPE, sizeof(struct pdshm_scope_rec),
                                "root scope");
  if (!root) return;
  for (size_t i = 0; i < c->n; i++)
    if (c->b[i].state == PDSHM_BLK_USED && c->b[i].type == PDSHM_T_SCOPE && !c->b[i].owner)
      ck_scope(c, &c->b[i]);
  ck_locks(c);
  ck_pins(c);
  ck_groups(c);
  ck_leaks(c);
}

/* ---- stopping the world ---------------------------------------------------------------- */

static void ck_unlock_scopes(pdshm_seg *seg, const uint8_t *held) {
  for (uint32_t i = PDSHM_LOCK_GROUPS; i < seg->hdr->max_locks; i++)
    if (held[i / 8] & (1u << (i % 8))) pdshm__unlock(seg, i);
}

/* One pass of trylocks over the groups lock and the scope locks; 0, EBUSY or an error, with the
 * locks taken recorded in held (and released again on failure). */
static int ck_trylock_scopes(pdshm_seg *seg, uint8_t *held) {
  int rc = 0;
  memset(held, 0, (seg->hdr->max_locks + 7) / 8);
  for (uint32_t i = PDSHM_LOCK_GROUPS; i < seg->hdr->max_locks && !rc; i++) {
    struct pdshm_lock *l = pdshm__lockent(seg, i);
    if (i >= PDSHM_LOCK_FIXED &&
        (l->kind != PDSHM_LK_SCOPE || atomic_load(&l->alloc) == PDSHM_LOCK_AVAILABLE))
      continue;
    if (!(rc = pdshm__trylock(seg, i))) held[i / 8] |= (uint8_t)(1u << (i % 8));
  }
  if (rc) ck_unlock_scopes(seg, held);
  return rc;
}

/* The groups lock and every scope lock by trylock, then the heap lock. */
static int ck_lock_world(pdshm_seg *seg, uint8_t *held) {
  for (unsigned round = 0;; round++) {
    int rc = ck_trylock_scopes(seg, held);
    if (!rc) {
      if (!(rc = pdshm__lock(seg, PDSHM_LOCK_HEAP))) return 0;
      ck_unlock_scopes(seg, held);
      return rc;
    }
    if (rc != PDSHM_EBUSY) return rc;
    if (round > 100000) return pdshm__fail(PDSHM_EBUSY, "the segment never went quiet");
    sched_yield();
  }
}

/* The locks of the variables the model reached (varlock_check.c). */
static int ck_varlocks(struct ck *c) {
  size_t n = 0;
  pdshm_off_t *vars = pdshm__zalloc(c->n * sizeof *vars);
  if (!vars) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  for (size_t i = 0; i < c->n; i++)
    if (c->b[i].reached && c->b[i].type == PDSHM_T_VAR) vars[n++] = c->b[i].off;
  int found = pdshm__varlock_check(c->seg, vars, n, c->report);
  pdshm__xfree(vars);
  if (found < 0) return found;
  c->problems += found;
  return 0;
}

/* The sizes against the file (segment.c's invariant 2, as attach checks them):
 * size <= arena_end <= file size <= max_size, and max_size is what this
 * attachment mapped. */
static int ck_sizes(pdshm_seg *seg, FILE *report) {
  const struct pdshm_hdr *h = seg->hdr;
  uint64_t end = __atomic_load_n(&h->arena_end, __ATOMIC_ACQUIRE), max = h->max_size;
  struct stat st;
  if (fstat(seg->fd, &st) < 0) return pdshm__fail(-errno, "fstat: %s", strerror(errno));
  uint64_t file = (uint64_t)st.st_size;
  if (end < h->size || end > max || max != seg->size || file < end || file > max) {
    if (report)
      fprintf(report, "sizes: arena_end %llu, first %llu, max_size %llu (mapped %llu), file %llu\n",
              (unsigned long long)end, (unsigned long long)h->size, (unsigned long long)max,
              (unsigned long long)seg->size, (unsigned long long)file);
    return pdshm__fail(PDSHM_EBADSEG, "the segment's size %llu disagrees with its file (%llu "
                       "bytes) or max_size %llu", (unsigned long long)end,
                       (unsigned long long)file, (unsigned long long)max);
  }
  return 0;
}

static int ck_once(pdshm_seg *seg, FILE *report, int *problems) {
  struct ck c = {.seg = seg, .report = report};
  int rc = ck_sizes(seg, report);
  if (rc) return rc;
  rc = ck_walk_blocks(&c);
  if (!rc && !c.problems) ck_model(&c);
  if (!rc && !c.problems) rc = ck_varlocks(&c);
  if (!rc) {
    int heap = pdshm__heap_check_locked(seg, report);
    c.problems += heap > 0 ? heap : 0;
  }
  pdshm__xfree(c.b);
  pdshm__xfree(c.slot_alive);
  *problems = c.problems;
  return rc;
}

PDSHM_API int pdshm_check(pdshm_seg *seg, FILE *report) {
  pdshm__fail_clear();
  int rc = pdshm__seg_usable(seg), problems = 0;
  if (rc) return rc;
  if (seg->flags & PDSHM_RDONLY) {
    for (int i = 0; i < CK_RETRIES && !rc; i++) {
      rc = ck_once(seg, i == CK_RETRIES - 1 ? report : NULL, &problems);
      if (!problems) break;
    }
  } else {
    uint8_t *held = pdshm__zalloc((seg->hdr->max_locks + 7) / 8);
    if (!held) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
    if (!(rc = ck_lock_world(seg, held))) {
      rc = ck_once(seg, report, &problems);
      pdshm__unlock(seg, PDSHM_LOCK_HEAP);
      ck_unlock_scopes(seg, held);
    }
    pdshm__xfree(held);
  }
  if (rc) return rc;
  if (problems) return pdshm__fail(PDSHM_EBADSEG, "%d problem(s) found", problems);
  return 0;
}
