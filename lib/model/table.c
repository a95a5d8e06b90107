/*
 * table.c - a scope's variable index, read without locks.
 *
 * Owns: struct pdshm_table (records.h).
 *
 * Invariants:
 *  1. Writers hold the scope's lock and change the index only through
 *     journals that declare the scope's seq: the seq is odd while their
 *     stores are applied, even otherwise.
 *  2. A table is never resized in place: growth or clean-up builds a new one
 *     off to the side and publishes it with the journal's store of x->table.
 *     At most half of a table's entries are used (live or tombstone), 5/8
 *     for big tables (pdshm__table_fill_eighths), so every probe sequence
 *     reaches an empty entry.
 *  3. Readers never store to shared memory but under the lock (invariant
 *     4's repair of a damaged seq).  They read seq, probe, read seq
 *     again, and retry when it moved; every offset they follow is
 *     bounds-checked first, so racing a writer (or reading memory freed and
 *     reused meanwhile) yields a retry, never a wild read or a wrong answer.
 *  4. A reader that keeps seeing an odd seq takes the scope's lock once
 *     (waiting out the writer, or repairing after its death) and retries.
 *     Under the lock the seq is even (writers and repairs leave it so): one
 *     still odd there was damaged, and the reader, holding the lock, makes
 *     it even as a repair would.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <sched.h>
#include <string.h>

#include "model/model.h"

#define TABLE_MIN_CAP 8u
#define TABLE_SPINS 128u   /* odd-seq retries before yielding            */
#define TABLE_YIELDS 2048u /* yields before taking the lock once         */
#define TABLE_NOW_LOOKS 4u /* looks of a lookup that never waits         */

PDSHM_SEQLOCK_READ static uint64_t ld(const void *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED); }

/* ---- bounds-checked views --------------------------------------------------- */

/* The table at off when it fits below `end`, else NULL. */
PDSHM_SEQLOCK_READ static inline const struct pdshm_table *tab_within(const pdshm_seg *seg,
                                                                      pdshm_off_t off,
                                                                      uint64_t *cap, uint64_t end) {
  if (off % 16 || off < seg->hdr->arena_off || off >= end - sizeof(struct pdshm_table)) return NULL;
  const struct pdshm_table *t = PDSHM_AT(seg->base, off, const struct pdshm_table);
  uint64_t c = ld(&t->cap);
  if (c < TABLE_MIN_CAP || (c & (c - 1)) ||
      c > (end - off - sizeof *t) / sizeof(struct pdshm_table_ent))
    return NULL;
  *cap = c;
  return t;
}

/* Past the size this process knows: the published size decides (a growth
 * it has not seen yet, or damage). */
PDSHM_SEQLOCK_READ __attribute__((noinline, cold)) static const struct pdshm_table *
tab_at_published(const pdshm_seg *seg, pdshm_off_t off, uint64_t *cap) {
  return tab_within(seg, off, cap, pdshm__seg_end(seg));
}

PDSHM_SEQLOCK_READ static const struct pdshm_table *tab_at(const pdshm_seg *seg, pdshm_off_t off, uint64_t *cap) {
  if (!off) return NULL;
  const struct pdshm_table *t = tab_within(seg, off, cap, pdshm__seg_known(seg));
  return t ? t : tab_at_published(seg, off, cap);
}

struct pdshm_table *pdshm__table_at(const pdshm_seg *seg, pdshm_off_t off, uint64_t *cap) {
  return (struct pdshm_table *)(uintptr_t)tab_at(seg, off, cap);
}

/* Word-wise compare of a NAME payload with (name, len): atomic loads only,
 * since the block may be reused under a lock-free reader (invariant 3).  The
 * last word may run past the NUL but stays inside the 16-byte-rounded block. */
PDSHM_SEQLOCK_READ static bool name_equals(const struct pdshm_name *nm, const char *name, size_t len) {
  if (ld(&nm->len) != len) return false;
  const uint64_t *w = (const uint64_t *)(const void *)nm->s;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t k;
    memcpy(&k, name + i, 8);
    if (ld(w + i / 8) != k) return false;
  }
  if (i == len) return true;
  uint64_t k = 0, mask = (1ull << ((len - i) * 8)) - 1;
  memcpy(&k, name + i, len - i);
  return (ld(w + i / 8) & mask) == k;
}

PDSHM_SEQLOCK_READ static bool var_is(const pdshm_seg *seg, pdshm_off_t v, const char *name, size_t len) {
  if (!pdshm__block_live(seg, v, PDSHM_T_VAR, sizeof(struct pdshm_var_rec))) return false;
  const struct pdshm_var_rec *r = pdshm__var_at(seg, v);
  const struct pdshm_name *nm = pdshm__name_at(seg, ld(&r->name));
  return nm && name_equals(nm, name, len);
}

/* The key an index entry carries for a name. */
static void tab_key(const char *name, size_t len, uint64_t key[PDSHM_KEY_BYTES / 8]) {
  _Static_assert(PDSHM_KEY_BYTES == 16, "the key is two words");
  if (len >= 16) {
    memcpy(key, name, 16);
  } else if (len >= 8) {
    memcpy(&key[0], name, 8);
    key[1] = pdshm__tail_word(name + 8, len - 8);
  } else {
    key[0] = pdshm__tail_word(name, len);
    key[1] = 0;
  }
}

/* Does entry e hold (name, len)?  Names that fit in the key are decided by
 * it (the zero padding tells lengths apart, names have no NUL); longer ones
 * are confirmed against the record. */
PDSHM_SEQLOCK_READ static bool ent_is(const pdshm_seg *seg, const struct pdshm_table_ent *e, pdshm_off_t v,
                   const char *name, size_t len, const uint64_t key[PDSHM_KEY_BYTES / 8]) {
  if (ld(&e->key[0]) != key[0] || ld(&e->key[1]) != key[1]) return false;
  return len <= PDSHM_KEY_BYTES || var_is(seg, v, name, len);
}

/* Probe for name: its entry index, or -1.  Bounded by cap. */
PDSHM_SEQLOCK_READ static int64_t tab_probe(const pdshm_seg *seg, const struct pdshm_table *t, uint64_t cap,
                         const char *name, size_t len, uint64_t hash) {
  uint64_t key[PDSHM_KEY_BYTES / 8];
  tab_key(name, len, key);
  for (uint64_t n = 0, i = hash & (cap - 1); n < cap; n++, i = (i + 1) & (cap - 1)) {
    pdshm_off_t v = ld(&t->ent[i].var);
    if (v == 0) return -1;
    if (v != PDSHM_TOMBSTONE && ld(&t->ent[i].hash) == hash &&
        ent_is(seg, &t->ent[i], v, name, len, key))
      return (int64_t)i;
  }
  return -1;
}

/* ---- readers ------------------------------------------------------------------- */

/* Invariant 4: wait for an odd seq to turn even; true when it is time to take
 * the lock.  A read-only attachment cannot lock: it waits longer, then gives up. */
static bool tab_wait(unsigned tries) {
  if (tries < TABLE_SPINS) {
    pdshm__cpu_relax();
    return false;
  }
  sched_yield();
  return tries >= TABLE_SPINS + TABLE_YIELDS;
}

/* Invariant 4, after an odd seq: 0 to look again, else why the reader
 * gives up (a read-only attachment, which cannot lock, after its wait; a
 * lock that failed).  *tries counts the looks. */
static int tab_settle(pdshm_seg *seg, struct pdshm_scope_rec *x, unsigned *tries) {
  if (!tab_wait((*tries)++)) return 0;
  if (seg->flags & PDSHM_RDONLY)
    return pdshm__fail(PDSHM_EBUSY, "a scope's table stays in the middle of a change");
  uint32_t lk = pdshm__scope_lock(seg, pdshm__off(seg, x));
  int rc = pdshm__lock(seg, lk);
  if (rc) return rc;
  uint64_t s2 = atomic_load_explicit(&x->seq, memory_order_relaxed);
  if (s2 & 1) atomic_store_explicit(&x->seq, s2 + 1, memory_order_release);
  pdshm__unlock(seg, lk);
  *tries = 0;
  return 0;
}

/* A live entry's variable, as the table holds it: 0 when the offset names
 * no variable record (damaged; a reader racing an erase sees the seq move
 * and looks again). */
PDSHM_SEQLOCK_READ static pdshm_off_t tab_var(const pdshm_seg *seg, const struct pdshm_table_ent *e) {
  pdshm_off_t v = ld(&e->var);
  return v > PDSHM_TOMBSTONE && pdshm__var_rec_ok(seg, v) ? v : 0;
}

PDSHM_SEQLOCK_READ pdshm_off_t pdshm__table_find(pdshm_seg *seg, struct pdshm_scope_rec *x, const char *name,
                              size_t len, uint64_t hash) {
  uint64_t seq;
  return pdshm__table_find_seq(seg, x, name, len, hash, &seq);
}

/* One look at x's table, begun at the even seq s1: true when no writer came
 * meanwhile, and *v is then the answer at s1. */
PDSHM_SEQLOCK_READ static inline __attribute__((always_inline)) bool
tab_look(pdshm_seg *seg, struct pdshm_scope_rec *x, uint64_t s1, const char *name, size_t len,
         uint64_t hash, pdshm_off_t *v) {
  uint64_t cap;
  const struct pdshm_table *t = tab_at(seg, ld(&x->table), &cap);
  int64_t i = t ? tab_probe(seg, t, cap, name, len, hash) : -1;
  *v = i >= 0 ? tab_var(seg, &t->ent[i]) : 0;
  atomic_thread_fence(memory_order_acquire);
  return atomic_load_explicit(&x->seq, memory_order_relaxed) == s1;
}

PDSHM_SEQLOCK_READ pdshm_off_t pdshm__table_find_seq(pdshm_seg *seg, struct pdshm_scope_rec *x,
                                                     const char *name, size_t len, uint64_t hash,
                                                     uint64_t *seq) {
  *seq = 1; /* odd: no answer held at any seq (a give-up below) */
  for (unsigned tries = 0;;) {
    uint64_t s1 = atomic_load_explicit(&x->seq, memory_order_acquire);
    if (s1 & 1) {
      if (tab_settle(seg, x, &tries)) return 0;
      continue;
    }
    pdshm_off_t v;
    if (tab_look(seg, x, s1, name, len, hash, &v)) {
      *seq = s1;
      return v;
    }
  }
}

PDSHM_SEQLOCK_READ int pdshm__table_find_now(pdshm_seg *seg, struct pdshm_scope_rec *x,
                                             const char *name, size_t len, uint64_t hash,
                                             pdshm_off_t *v, uint64_t *seq) {
  for (unsigned tries = 0; tries < TABLE_NOW_LOOKS; tries++) {
    uint64_t s1 = atomic_load_explicit(&x->seq, memory_order_acquire);
    if (s1 & 1) break;
    if (tab_look(seg, x, s1, name, len, hash, v)) {
      *seq = s1;
      return 0;
    }
  }
  return PDSHM_EBUSY;
}

PDSHM_SEQLOCK_READ int pdshm__table_snapshot(pdshm_seg *seg, struct pdshm_scope_rec *x, pdshm_off_t **vars,
                          size_t *n) {
  for (unsigned tries = 0;;) {
    uint64_t s1 = atomic_load_explicit(&x->seq, memory_order_acquire), cap = 0;
    if (s1 & 1) {
      int rc = tab_settle(seg, x, &tries);
      if (rc) return rc;
      continue;
    }
    const struct pdshm_table *t = tab_at(seg, ld(&x->table), &cap);
    pdshm_off_t *out = pdshm__zalloc((cap ? cap : 1) * sizeof *out);
    if (!out) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
    size_t k = 0;
    for (uint64_t i = 0; t && i < cap; i++) {
      pdshm_off_t v = tab_var(seg, &t->ent[i]);
      if (v) out[k++] = v;
    }
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&x->seq, memory_order_relaxed) == s1) {
      *vars = out;
      *n = k;
      return 0;
    }
    pdshm__xfree(out);
  }
}

/* ---- writers (x's lock held) ----------------------------------------------------- */

int64_t pdshm__table_find_locked(pdshm_seg *seg, struct pdshm_scope_rec *x, const char *name,
                                 size_t len, uint64_t hash) {
  PDSHM_ASSERT(pdshm__lock_mine(seg, x->lock));
  uint64_t cap;
  const struct pdshm_table *t = tab_at(seg, x->table, &cap);
  int64_t i = t ? tab_probe(seg, t, cap, name, len, hash) : -1;
  return i >= 0 && !tab_var(seg, &t->ent[i]) ? -1 : i; /* damaged: no variable */
}

struct pdshm_table_ent *pdshm__table_ent(pdshm_seg *seg, struct pdshm_scope_rec *x, int64_t i) {
  return &PDSHM_AT(seg->base, x->table, struct pdshm_table)->ent[i];
}

/* The first entry free for hash; cap when there is none (a table whose
 * `used` count lies: damaged), which a fresh table never is (invariant 2). */
static uint64_t tab_slot_for(const struct pdshm_table *t, uint64_t cap, uint64_t hash) {
  uint64_t i = hash & (cap - 1);
  for (uint64_t n = 0; n < cap; n++, i = (i + 1) & (cap - 1))
    if (t->ent[i].var <= PDSHM_TOMBSTONE) return i;
  return cap;
}

/* Invariant 2: a fresh table holding x's live entries but v, then (v, hash).
 * An eighth below its bound, so that cap/8 insertions at least come before
 * the next rebuild.  Its size comes from the entries counted, not from the
 * scope's count of them: a damaged count must not size it. */
static int tab_rebuild(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_scope_rec *x,
                       const struct pdshm_table_ent *add) {
  uint64_t ocap = 0, nlive = 1;
  const struct pdshm_table *ot = tab_at(seg, x->table, &ocap);
  for (uint64_t i = 0; ot && i < ocap; i++)
    nlive += ot->ent[i].var > PDSHM_TOMBSTONE && ot->ent[i].var != add->var;
  uint64_t cap = TABLE_MIN_CAP;
  while (cap * (pdshm__table_fill_eighths(cap) - 1) < nlive * 8) cap <<= 1;
  pdshm_off_t off;
  int rc = pdshm__j_alloc(seg, ln, sizeof(struct pdshm_table) + cap * sizeof(struct pdshm_table_ent),
                          PDSHM_T_TABLE, &off);
  if (rc) return rc;
  struct pdshm_table *nt = PDSHM_AT(seg->base, off, struct pdshm_table);
  memset(nt->ent, 0, cap * sizeof nt->ent[0]);
  nt->cap = cap;
  nt->used = nlive;
  for (uint64_t i = 0; ot && i < ocap; i++)
    if (ot->ent[i].var > PDSHM_TOMBSTONE && ot->ent[i].var != add->var)
      nt->ent[tab_slot_for(nt, cap, ot->ent[i].hash)] = ot->ent[i];
  nt->ent[tab_slot_for(nt, cap, add->hash)] = *add;
  if (x->table) pdshm__j_retire(seg, ln, x->table);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, x, table), off);
  return 0;
}

static int tab_damaged(pdshm_seg *seg, const struct pdshm_scope_rec *x) {
  return pdshm__fail(PDSHM_EBADSEG, "scope %#llx's table at %#llx is damaged",
                     (unsigned long long)pdshm__off(seg, x), (unsigned long long)x->table);
}

/* Puts entry `add` where a probe for its hash will find it. */
static int tab_put(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_scope_rec *x,
                   const struct pdshm_table_ent *add) {
  pdshm__j_seq(seg, ln, PDSHM_FOFF(seg, x, seq));
  uint64_t cap = 0;
  struct pdshm_table *t = pdshm__table_at(seg, x->table, &cap);
  if (x->table && !t) return tab_damaged(seg, x);
  if (!t || (t->used + 1) * 8 > cap * pdshm__table_fill_eighths(cap))
    return tab_rebuild(seg, ln, x, add);
  uint64_t at = tab_slot_for(t, cap, add->hash);
  if (at == cap) return tab_damaged(seg, x);
  struct pdshm_table_ent *e = &t->ent[at];
  /* The entry is empty or a tombstone, which every probe passes without
   * reading its hash or key: those are stored in place now, and only var,
   * which makes the entry live, goes through the journal (a death or an
   * abort leaves them in an entry nobody reads; lib/CRASH-SAFETY.md). */
  __atomic_store_n(&e->hash, add->hash, __ATOMIC_RELAXED);
  __atomic_store_n(&e->key[0], add->key[0], __ATOMIC_RELAXED);
  __atomic_store_n(&e->key[1], add->key[1], __ATOMIC_RELAXED);
  if (e->var == 0) pdshm__j_set(seg, ln, PDSHM_FOFF(seg, t, used), t->used + 1);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, e, var), add->var);
  return 0;
}

static struct pdshm_table_ent tab_entry(pdshm_off_t v, const char *name, size_t len,
                                        uint64_t hash) {
  struct pdshm_table_ent e = {.var = v, .hash = hash};
  tab_key(name, len, e.key);
  return e;
}

int pdshm__table_insert(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_scope_rec *x,
                        pdshm_off_t v, const char *name, size_t len, uint64_t hash) {
  struct pdshm_table_ent add = tab_entry(v, name, len, hash);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, x, nvars), x->nvars + 1);
  return tab_put(seg, ln, x, &add);
}

int pdshm__table_move(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_scope_rec *x,
                      int64_t i, const char *name, size_t len, uint64_t hash) {
  struct pdshm_table_ent *e = pdshm__table_ent(seg, x, i);
  struct pdshm_table_ent add = tab_entry(e->var, name, len, hash);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, e, var), PDSHM_TOMBSTONE);
  return tab_put(seg, ln, x, &add);
}

void pdshm__table_remove(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_scope_rec *x,
                         int64_t i) {
  struct pdshm_table_ent *e = pdshm__table_ent(seg, x, i);
  pdshm__j_seq(seg, ln, PDSHM_FOFF(seg, x, seq));
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, e, var), PDSHM_TOMBSTONE);
  pdshm__j_set(seg, ln, PDSHM_FOFF(seg, x, nvars), x->nvars - 1);
}
