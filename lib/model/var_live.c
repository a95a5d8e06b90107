/*
 * var_live.c - is a pdshm_var * still a variable?  Edits of a variable
 * check it under its scope's lock before they touch the record.
 *
 * A pdshm_var * is the address of a record; another process or thread may
 * erase the variable while a caller still holds that address (pdshm.h calls
 * it the caller's race).  The record's block then goes back to the heap, or
 * is retired and left to a dead slot's reaper, or is handed out again as
 * something else.  Journaling an edit of such a record would write into a
 * block that is no variable, retire blocks it no longer owns (marking a
 * cached or free block with our tag) and publish a new buffer no variable
 * reaches: a leak pdshm_check reports and nothing ever frees.
 *
 * Invariants:
 *  1. Only a published (owner 0), USED block of type VAR with the variable
 *     magic and its own offset in `self` is a live variable.  Erase retires
 *     the record (owner := the eraser's tag) in the journal that unhooks it,
 *     under the scope lock; so, under that lock, a record that passes is
 *     reachable from its scope's table, and one that fails never is again.
 *  2. The lock to take is read from the record's scope without any lock: a
 *     hint, validated first (a SCOPE block with the scope magic and a lock
 *     index in the table), and checked again once held: the record must
 *     still name that scope and the scope that lock.  A record that fails
 *     is refused with ESTALE and nothing is written.
 *  3. A record erased and reused as a new variable of a scope passes: it is
 *     a variable, though not the one the caller looked up (its generation,
 *     pdshm_var_ref, tells them apart).
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include "model/model.h"

/* The two checks below also run on the optimistic side of a scope table's
 * seqlock (table.c's lookups), over a record another thread may be writing:
 * what they answer then is thrown away when the sequence moved. */
PDSHM_SEQLOCK_READ static bool block_is(const pdshm_seg *seg, pdshm_off_t payload, unsigned type,
                                        size_t bytes) {
  return pdshm__block_live(seg, payload, type, bytes) &&
         pdshm__blk_owner(pdshm__blk(seg, payload)) == 0;
}

PDSHM_SEQLOCK_READ bool pdshm__var_rec_ok(const pdshm_seg *seg, pdshm_off_t v) {
  return block_is(seg, v, PDSHM_T_VAR, sizeof(struct pdshm_var_rec)) &&
         pdshm__var_at(seg, v)->magic == PDSHM_VAR_MAGIC && pdshm__var_at(seg, v)->self == v;
}

bool pdshm__var_parts_ok(const pdshm_seg *seg, pdshm_off_t v) {
  if (!pdshm__block_live(seg, v, PDSHM_T_VAR, sizeof(struct pdshm_var_rec))) return false;
  const struct pdshm_var_rec *r = pdshm__var_at(seg, v);
  const pdshm_off_t parts[] = {r->name, r->label, r->readers, r->writers, r->buf};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (parts[i] && !pdshm__block_live(seg, parts[i], PDSHM_T_ANY, 0)) return false;
  return r->magic == PDSHM_VAR_MAGIC && r->self == v;
}

bool pdshm__scope_rec_ok(const pdshm_seg *seg, pdshm_off_t x) {
  return block_is(seg, x, PDSHM_T_SCOPE, sizeof(struct pdshm_scope_rec)) &&
         pdshm__scope_at(seg, x)->magic == PDSHM_SCOPE_MAGIC;
}

/* The lock of x when x is a live scope record whose lock entry guards it,
 * else 0 (never a lendable entry: entries below PDSHM_LOCK_FIXED are not
 * scopes'). */
static uint32_t scope_lock_of(const pdshm_seg *seg, pdshm_off_t x) {
  if (!pdshm__scope_rec_ok(seg, x)) return 0;
  uint32_t lk = pdshm__scope_at(seg, x)->lock;
  if (lk < PDSHM_LOCK_FIXED || lk >= seg->hdr->max_locks || pdshm__lockent(seg, lk)->guards != x)
    return 0;
  return lk;
}

bool pdshm__tensor_span_ok(const pdshm_seg *seg, const struct pdshm_var_rec *r) {
  pdshm_off_t buf = r->buf;
  if (!pdshm__block_live(seg, buf, PDSHM_T_TENSOR, sizeof(struct pdshm_tensor_buf))) return false;
  uint64_t end = buf + pdshm__alloc_usable(seg, buf);
  return r->data >= buf + sizeof(struct pdshm_tensor_buf) && r->data <= end &&
         r->nbytes <= end - r->data;
}

uint32_t pdshm__scope_lock(const pdshm_seg *seg, pdshm_off_t x) {
  uint32_t lk = scope_lock_of(seg, x);
  return lk ? lk : PDSHM_LOCK_NONE;
}

static bool var_rec_live(const pdshm_seg *seg, const struct pdshm_var_rec *r) {
  pdshm_off_t self = pdshm__off(seg, r);
  return block_is(seg, self, PDSHM_T_VAR, sizeof *r) && r->magic == PDSHM_VAR_MAGIC &&
         r->self == self;
}

uint32_t pdshm__var_scope_lock(const pdshm_seg *seg, const struct pdshm_var_rec *r) {
  if (!var_rec_live(seg, r)) return 0;
  return scope_lock_of(seg, r->scope);
}

bool pdshm__var_live_locked(const pdshm_seg *seg, const struct pdshm_var_rec *r, uint32_t lk) {
  PDSHM_ASSERT(!lk || pdshm__lock_mine(seg, lk));
  return lk && pdshm__var_scope_lock(seg, r) == lk;
}

int pdshm__var_j_begin(pdshm_seg *seg, struct pdshm_lane_ctx *ln, struct pdshm_var_rec *r,
                       uint32_t op) {
  uint32_t lk = pdshm__var_scope_lock(seg, r);
  if (!lk) return pdshm__fail(PDSHM_ESTALE, "variable was erased");
  int rc = pdshm__j_begin(seg, ln, lk, op);
  if (rc) return rc;
  if (pdshm__var_live_locked(seg, r, lk)) return 0;
  pdshm__j_abort(seg, ln);
  return pdshm__fail(PDSHM_ESTALE, "variable was erased");
}
