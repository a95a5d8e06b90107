/*
 * model/model.h - layer 6, the model: what its modules (names, table,
 * scope, var, tensor, varlock, pins) say to each other and to the layers
 * above them (groups, the reaper, the lifecycle, the read-only users).
 * Its records in the segment: records.h.
 */
#ifndef PDSHM_MODEL_MODEL_H
#define PDSHM_MODEL_MODEL_H

/* Layer 6 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 6
#error "model/model.h is layer 6, above the file that includes it (lib/LAYERS)"
#endif

#include <string.h>

#include "procs/procs.h"
#include "model/records.h"

/* A scope handle: one HANDLE record in the segment, one reference. */
struct pdshm_scope {
  pdshm_seg *seg;
  pdshm_off_t rec;             /* the scope record                           */
  pdshm_off_t handle;          /* our HANDLE block                           */
  struct pdshm_scope *next, *prev; /* the attachment's handles (detach)      */
};

/* What a journal is doing, for reports. */
enum pdshm_op {
  PDSHM_OP_NONE, PDSHM_OP_HANDLE, PDSHM_OP_UNHANDLE, PDSHM_OP_SCOPE_NEW, PDSHM_OP_UNLINK,
  PDSHM_OP_DESTROY, PDSHM_OP_VAR_NEW, PDSHM_OP_VAR_ERASE, PDSHM_OP_VAR_RENAME,
  PDSHM_OP_VAR_SET, PDSHM_OP_RESIZE, PDSHM_OP_VARLOCK
};

static inline struct pdshm_scope_rec *pdshm__scope_at(const pdshm_seg *seg, pdshm_off_t off) {
  return PDSHM_AT(seg->base, off, struct pdshm_scope_rec);
}
static inline struct pdshm_var_rec *pdshm__var_at(const pdshm_seg *seg, pdshm_off_t off) {
  return PDSHM_AT(seg->base, off, struct pdshm_var_rec);
}
/* A new scope id or variable generation.  A lane takes ids from the header's
 * counter PDSHM_ID_BATCH at a time, so that processes creating in their own
 * scopes do not bounce one cache line between cores.  Ids stay unique for the
 * segment's life (the unused rest of a dead process's batch is never handed
 * out) and increase within a lane, not across lanes. */
#define PDSHM_ID_BATCH 64
static inline uint64_t pdshm__new_id(pdshm_seg *seg, struct pdshm_lane_ctx *ln) {
  if (ln->id_next == ln->id_end) {
    ln->id_next = atomic_fetch_add(&seg->hdr->id_counter, PDSHM_ID_BATCH);
    ln->id_end = ln->id_next + PDSHM_ID_BATCH;
  }
  return ln->id_next++;
}

/* Journaled: a kept HANDLE or HOLD record h goes at the commit, and counts
 * for nothing from then on (records.h: scope 0), though it stays its slot's,
 * and is swept by that slot's reaper, until the journal frees it. */
static inline void pdshm__j_retire_kept(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t h) {
  pdshm__j_retire(seg, ln, h);
  pdshm__j_set(seg, ln, h + offsetof(struct pdshm_handle_rec, scope), 0);
}

static inline pdshm_off_t pdshm__off(const pdshm_seg *seg, const void *p) {
  return (pdshm_off_t)((const uint8_t *)p - seg->base);
}
/* A pdshm_var * is the variable's record in this mapping, and back. */
static inline struct pdshm_var_rec *pdshm__var_rec(const pdshm_var *v) {
  return (struct pdshm_var_rec *)(uintptr_t)(const void *)v;
}
static inline pdshm_var *pdshm__var_handle(struct pdshm_var_rec *r) {
  return (pdshm_var *)(void *)r;
}
/* The offset of a field of a record in the segment, for journal stores. */
#define PDSHM_FOFF(seg, rec, field) pdshm__off((seg), &(rec)->field)

/* ---- names.c ---- */
/* 0, EINVAL (NULL, empty, '/' in a scope name) or ENAMETOOLONG; *len set. */
int pdshm__name_check(const char *name, bool scope, size_t *len);
uint64_t pdshm__hash(const char *s, size_t n);
/* The n < 8 bytes at s as a little-endian word, zero above them (what
 * memcpy into a zeroed word gives, without a call for a variable n). */
static inline uint64_t pdshm__tail_word(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  if (n >= 4) {
    uint32_t lo, hi;
    memcpy(&lo, u, 4);
    memcpy(&hi, u + n - 4, 4);
    return (uint64_t)lo | (uint64_t)hi << ((n - 4) * 8);
  }
  if (!n) return 0;
  return (uint64_t)u[0] | (uint64_t)u[n / 2] << (n / 2 * 8) | (uint64_t)u[n - 1] << ((n - 1) * 8);
}
/* A journaled NAME block holding s[0..len). */
int pdshm__name_new(pdshm_seg *seg, struct pdshm_lane_ctx *ln, const char *s, size_t len,
                    pdshm_off_t *out);
/* NULL unless off is a plausible NAME payload inside the arena. */
const struct pdshm_name *pdshm__name_at(const pdshm_seg *seg, pdshm_off_t off);

/* ---- table.c ---- */
/* How full a table of cap entries may get, in eighths, tombstones counted:
 * half up to 32 Ki entries (1 MiB), where fewer probes pay; 5/8 above, where
 * a bigger table's footprint in the caches costs more than its probes save
 * (renames at 100k names: 15% slower at half). */
#define PDSHM_TABLE_DENSE_CAP 32768u
static inline uint64_t pdshm__table_fill_eighths(uint64_t cap) {
  return cap <= PDSHM_TABLE_DENSE_CAP ? 4 : 5;
}
/* Lock-free lookup (seqlock): the variable of that name at some instant of
 * the call, or 0.  Writes nothing shared unless a writer died mid-update. */
pdshm_off_t pdshm__table_find(pdshm_seg *seg, struct pdshm_scope_rec *x, const char *name,
                              size_t len, uint64_t hash);
/* The same, and the (even) seq at which the answer held, or 1 when it gave
 * up without one: a writer that takes x's lock and finds seq still there
 * knows the table did not change since (table.c, invariant 1). */
pdshm_off_t pdshm__table_find_seq(pdshm_seg *seg, struct pdshm_scope_rec *x, const char *name,
                                  size_t len, uint64_t hash, uint64_t *seq);
/* Never waits: 0 with the answer in *v and the (even) seq it held at, or
 * PDSHM_EBUSY when a writer is inside x's table (or kept moving it). */
int pdshm__table_find_now(pdshm_seg *seg, struct pdshm_scope_rec *x, const char *name,
                          size_t len, uint64_t hash, pdshm_off_t *v, uint64_t *seq);
/* With x's lock held: the entry index of that name, or -1 (also when the
 * entry names no variable record: damaged). */
int64_t pdshm__table_find_locked(pdshm_seg *seg, struct pdshm_scope_rec *x, const char *name,
                                 size_t len, uint64_t hash);
/* Journaled insert of variable v (x's lock held; the name is not there). */
int pdshm__table_insert(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_scope_rec *x,
                        pdshm_off_t v, const char *name, size_t len, uint64_t hash);
/* Journaled move of entry i's variable to a new name's hash (rename). */
int pdshm__table_move(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_scope_rec *x,
                      int64_t i, const char *name, size_t len, uint64_t hash);
/* Journaled removal of entry i. */
void pdshm__table_remove(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_scope_rec *x,
                         int64_t i);
/* The table at off and its capacity, or NULL (*cap untouched) when off
 * holds none: bounds and capacity as its readers check them. */
struct pdshm_table *pdshm__table_at(const pdshm_seg *seg, pdshm_off_t off, uint64_t *cap);
struct pdshm_table_ent *pdshm__table_ent(pdshm_seg *seg, struct pdshm_scope_rec *x, int64_t i);
/* A consistent copy of x's variables (offsets), lock-free; *vars from
 * pdshm__zalloc.  0, ENOMEM. */
int pdshm__table_snapshot(pdshm_seg *seg, struct pdshm_scope_rec *x, pdshm_off_t **vars,
                          size_t *n);

/* ---- scope.c ---- */
int pdshm__scope_init_root(pdshm_seg *seg);
/* Runs the lane's todo queue (destructions, unlink chains) to the end. */
int pdshm__todo_run(pdshm_seg *seg, struct pdshm_lane_ctx *ln);
/* Drops the reference HANDLE block h holds (its owner is ln->tag). */
int pdshm__handle_drop(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t h);
/* Detach: frees every private handle of the attachment. */
void pdshm__scope_free_handles(pdshm_seg *seg);

/* ---- var.c ---- */
/* v is a variable's record (owned by anyone: marked for freeing too) and
 * every part it names a USED block inside the arena (var_live.c). */
bool pdshm__var_parts_ok(const pdshm_seg *seg, pdshm_off_t v);
/* v is a published variable record (var_live.c, invariant 1): what a
 * table's entry must name before a reader hands it out. */
bool pdshm__var_rec_ok(const pdshm_seg *seg, pdshm_off_t v);
/* v's blocks, record first, into out; none when v is damaged (a record or
 * a part that pdshm__var_parts_ok refuses: left to pdshm_check). */
unsigned pdshm__var_blocks(pdshm_seg *seg, pdshm_off_t v, pdshm_off_t out[8]);
/* Destruction phase 2: frees the variable of entry e of an unreachable scope. */
void pdshm__var_free_unreachable(pdshm_seg *seg, struct pdshm_lane_ctx *ln,
                                 struct pdshm_table_ent *e);
/* The attachment a variable pointer belongs to (read-only ones too), found by
 * its address alone, or NULL with *rc and the error set: EINVAL (NULL, or in
 * no attachment), EFORKED (a handle inherited across fork()).  Every entry
 * point taking a pdshm_var * calls this (or the next) before it reads v. */
static inline pdshm_seg *pdshm__var_attached(const pdshm_var *v, int *rc) {
  pdshm_seg *seg = v ? pdshm__seg_of(v) : NULL;
  if (__builtin_expect(!pdshm__seg_ok(seg), 0)) return pdshm__seg_of_checked(v, rc, false);
  *rc = 0;
  return seg;
}

/* The same, writable: also EROFS, ENOTRECOVERABLE.  Both check inline and
 * leave the errors to pdshm__seg_of_checked (attach.h), which checks
 * again, each way to fail with its own. */
static inline pdshm_seg *pdshm__var_seg(const pdshm_var *v, int *rc) {
  pdshm_seg *seg = v ? pdshm__seg_of(v) : NULL;
  if (__builtin_expect(!pdshm__seg_ok_write(seg), 0)) return pdshm__seg_of_checked(v, rc, true);
  *rc = 0;
  return seg;
}

/* ---- var_live.c ---- */
/* The lock of r's scope when r is a live variable of a live scope, else 0;
 * read without the lock: a hint. */
uint32_t pdshm__var_scope_lock(const pdshm_seg *seg, const struct pdshm_var_rec *r);
/* Offsets read from the segment that name a scope (the root, a parent, a
 * kid, a todo's) are checked before they are followed: true when x is a
 * published SCOPE block that holds a scope record. */
bool pdshm__scope_rec_ok(const pdshm_seg *seg, pdshm_off_t x);
/* The lock of the scope record at x, when x is one (pdshm__scope_rec_ok)
 * and its lock is a lent entry of the table (never a fixed one: a scope
 * taking the heap's lock would deadlock at its next allocation) that guards
 * x; else, the segment being damaged, PDSHM_LOCK_NONE, which pdshm__lock
 * refuses with EBADSEG. */
uint32_t pdshm__scope_lock(const pdshm_seg *seg, pdshm_off_t x);
/* Tensor record r's bytes, [data, data + nbytes), lie in its buffer, a
 * TENSOR block inside the arena (its scope's lock held: a resize moves
 * them). */
bool pdshm__tensor_span_ok(const pdshm_seg *seg, const struct pdshm_var_rec *r);
/* With lk held: r is still a live variable of the scope lk guards. */
bool pdshm__var_live_locked(const pdshm_seg *seg, const struct pdshm_var_rec *r, uint32_t lk);
/* pdshm__j_begin under r's scope lock, refusing (ESTALE, nothing written, the
 * lock released) a record that is no longer a variable. */
int pdshm__var_j_begin(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_var_rec *r,
                       uint32_t op);

/* ---- varlock.c ---- */
/* A variable's lock word when it is made: free, tagged with its generation
 * (varlock.c, invariant 3).  The tag's top bit is set, so that no tag is
 * that of a zeroed word. */
static inline uint64_t pdshm__varlock_tag(uint64_t gen) {
  return (uint64_t)((uint32_t)gen | 0x80000000u) << 32;
}

/* ---- varlock_reap.c ---- */
/* Reaper (and detach) of slot d: gives back every variable lock its hold
 * records (layout.h, struct pdshm_vl_hold) show held or being taken. */
void pdshm__varlock_reap_slot(pdshm_seg *seg, uint32_t d);

/* ---- varlock_check.c ---- */
/* pdshm_check's look at the locks of the live variables at vars[0, n):
 * writes one line per variable whose word disagrees with the slots' hold
 * records to report (may be NULL); returns the count, or a negative code
 * (ENOMEM) when it could not look. */
int pdshm__varlock_check(pdshm_seg *seg, const pdshm_off_t *vars, size_t n, FILE *report);
/* A variable lock's shared holders now (those its word counts, and those
 * of live slots it does not: varlock_bias.c), and *owner_slot its
 * exclusive holder's slot, -1 when none: for the inspector, read without a
 * lock. */
uint64_t pdshm__varlock_readers(const pdshm_seg *seg, const struct pdshm_var_rec *r,
                                int *owner_slot);

/* ---- tensor_pins.c ---- */
/* Detach: drops every pin the attachment holds (when it still may: not in a
 * fork child, not read-only) and frees their private handles. */
void pdshm__pin_drop_all(pdshm_seg *seg);
/* pdshm_tensor_unpin keeping the error detail of an earlier failure of the
 * same call (a collective unpins last, whatever its result). */
int pdshm__tensor_unpin(pdshm_pin *p);

#endif /* PDSHM_MODEL_MODEL_H */
