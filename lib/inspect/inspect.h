/*
 * inspect.h - what the introspection modules (lib/introspect_*.c) share:
 * a bounded walk of the block chain and the checks that keep every read
 * inside the mapping.
 *
 * Introspection reads a live and possibly corrupt segment without taking a
 * lock or storing anything.  Its invariants:
 *  1. Every offset read from the segment is checked against the mapping (and
 *     the region it must point into) before it is followed.
 *  2. Every walk is bounded by a count derived from the mapping's size, and
 *     walks of linked lists detect cycles, so hostile bytes cannot make it
 *     loop.
 *  3. A walk that meets something inconsistent is retried.  A live segment
 *     changes under a walk (a walk reads blocks and records at different
 *     instants, with writers half way): that is a torn read, never damage.
 *     The lock table tells the two apart (introspect_walk.c): a walk during
 *     which some lock was held or taken may have been torn and is walked
 *     again, for up to PDSHM_INSPECT_BUSY_NS (then EAGAIN: the segment kept
 *     changing); a walk during which none was is not, and PDSHM_INSPECT_TRIES
 *     of those that fail answer PDSHM_EBADSEG.
 *  4. Memory allocated for an answer is sized by what the walk found (at most
 *     a few times the bytes of the records it describes, so a small multiple
 *     of the mapping's size), never by a count read from the segment.
 */
#ifndef PDSHM_INSPECT_INSPECT_H
#define PDSHM_INSPECT_INSPECT_H

/* Layer 8 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 8
#error "inspect/inspect.h is layer 8, above the file that includes it (lib/LAYERS)"
#endif

#include "groups/groups.h"

#define PDSHM_INSPECT_TRIES 8                     /* failed walks nothing changed */
#define PDSHM_INSPECT_BUSY_NS (5 * 1000000000ull) /* walks torn, one after another */

/* pdshm__chain_walk (heap.h) with retries (inv. 3): 0, EBADSEG (with
 * pdshm_last_error() saying where it broke), EAGAIN, or what visit
 * returned (EBADSEG from visit is retried as a broken chain is). */
int pdshm__walk_blocks(const pdshm_seg *seg, const struct pdshm_walker *w);

/* Tables an introspection call reads (pdshm__inspect_begin). */
enum pdshm_inspect_tables { PDSHM_INSPECT_SLOTS = 1u << 0, PDSHM_INSPECT_LOCKS = 1u << 1 };

/* How every introspection call starts: clears the last error; then 0, or
 * EINVAL / EFORKED for seg, EINVAL when the caller's `what` (its callback
 * or its output) is missing (!given), EBADSEG when a table of `tables`
 * lies outside the mapping. */
int pdshm__inspect_begin(const pdshm_seg *seg, bool given, const char *what, unsigned tables);

/* Do the process table and the lock table lie inside the mapping? */
bool pdshm__slots_sane(const pdshm_seg *seg);
bool pdshm__locks_sane(const pdshm_seg *seg);

/* The payload at `off` when it is that of a live block of `type` with at
 * least `bytes` of payload (pdshm__block_live), else NULL. */
const void *pdshm__payload_at(const pdshm_seg *seg, pdshm_off_t off, unsigned type, size_t bytes);

/* Runs once(arg) until it returns anything but EBADSEG (inv. 3), yielding
 * between tries: what it returned, EBADSEG once PDSHM_INSPECT_TRIES of its
 * failures saw seg unchanged, or EAGAIN when it failed on a changing seg
 * for PDSHM_INSPECT_BUSY_NS. */
int pdshm__inspect_retry(const pdshm_seg *seg, int (*once)(void *arg), void *arg);

/* ---- introspect_snap.c: the blocks of the arena at one instant ---------------- */
struct pdshm_snap_blk {
  pdshm_off_t off;         /* payload                                         */
  uint64_t size;           /* of the block, header included                   */
  uint16_t type, owner;    /* as the block header said                        */
  uint8_t state;           /* PDSHM_BLK_*                                     */
};
struct pdshm_snap {
  const pdshm_seg *seg;
  struct pdshm_snap_blk *b; /* in chain order (so sorted by offset)            */
  size_t n, cap;
};
/* One walk of the chain (pdshm__walk_blocks); 0, ENOMEM, EBADSEG.  Its memory
 * grows with the blocks found, so with the mapping's size (inv. 4). */
int pdshm__snap_take(const pdshm_seg *seg, struct pdshm_snap *s);
void pdshm__snap_free(struct pdshm_snap *s);
/* The block whose payload starts at off, or NULL. */
const struct pdshm_snap_blk *pdshm__snap_find(const struct pdshm_snap *s, pdshm_off_t off);
/* The payload at off if the snapshot has a USED block of that type there
 * with at least `need` payload bytes (and it still is one), else NULL. */
const void *pdshm__snap_want(const struct pdshm_snap *s, pdshm_off_t off, unsigned type,
                             size_t need);
/* Block bytes of the block at off (0 when none, or off is 0). */
uint64_t pdshm__snap_bytes(const struct pdshm_snap *s, pdshm_off_t off);
/* Copies the NAME block at off into buf (PDSHM_NAME_MAX + 1 bytes); 0 or
 * EBADSEG. */
int pdshm__snap_name(const struct pdshm_snap *s, pdshm_off_t off, char *buf);
/* Is b a published (owner 0) USED block of that type? */
static inline bool pdshm__snap_published(const struct pdshm_snap_blk *b, unsigned type) {
  return b->type == type && b->state == PDSHM_BLK_USED && !b->owner;
}
/* How many such blocks the snapshot has. */
size_t pdshm__snap_count(const struct pdshm_snap *s, unsigned type);
/* The published scope record with that id (0: the root), or NULL. */
const struct pdshm_scope_rec *pdshm__snap_scope(const struct pdshm_snap *s, uint64_t id,
                                                pdshm_off_t *off);

/* ---- introspect_vars.c ------------------------------------------------------- */
/* Block bytes of variable v (record r) and of everything it owns. */
uint64_t pdshm__inspect_var_bytes(const struct pdshm_snap *s, pdshm_off_t v,
                                  const struct pdshm_var_rec *r);

#endif /* PDSHM_INSPECT_INSPECT_H */
