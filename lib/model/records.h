/*
 * records.h - the seed model's records in the segment: scopes, variables,
 * their hash tables, handle records, operator lists.
 *
 * Bump PDSHM_LAYOUT_VERSION (layout.h) when anything here changes.
 *
 * Who guards what (X is a scope, P its parent):
 *  - X's lock (X->lock, an entry of the lock table) guards X->refs, X->table
 *    and everything in it, X->nvars, X->first_kid, and for each kid K of X:
 *    K->next_sib, K->prev_sib, K->inlist; and every field of X's variables
 *    but these: a variable's lk and lk_wwait (its lock itself: atomic, by
 *    varlock.c's protocol) and version (atomic bumps, one of them in the
 *    resize's journal).
 *  - K->linked is written under both P's lock and K's lock, so either one is
 *    enough to read it.
 *  - X->parent, X->name, X->id, X->lock never change while X lives.
 *
 * Lifetime (DESIGN §2): X->refs counts X's handle records, X's kids, and
 * X's link (named scopes, while linked).  A scope whose refs reach zero is
 * unreachable: no handle, no kid, no link, so no new reference can appear.
 * Its destruction runs in the phases of enum pdshm_destroy_phase (layout.h)
 * from the destroying lane's todo, so that a reaper finishes it after a
 * death: lib/CRASH-SAFETY.md, "Work longer than one journal".
 *
 * Lock order (ranks, checked by debug builds: lockorder.c): a variable's
 * lock (varlock.c: a word of its record, not ranked) before any scope's (a
 * user holds it across calls that take scope locks, as pdshm_tensor_resize
 * does, and its waiters reap); a parent's lock before a child's; the
 * group registry's lock after any scope's (group.c); any lock before the
 * heap lock (a pin takes its variable's scope lock, then the heap lock).
 */
#ifndef PDSHM_MODEL_RECORDS_H
#define PDSHM_MODEL_RECORDS_H

/* Layer 6 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 6
#error "model/records.h is layer 6, above the file that includes it (lib/LAYERS)"
#endif

#include "base/layout.h"

#define PDSHM_SCOPE_MAGIC 0x45504f43u /* "COPE" */
#define PDSHM_VAR_MAGIC 0x52415656u   /* "VVAR" */
#define PDSHM_TOMBSTONE ((pdshm_off_t)1) /* an erased table entry            */

enum pdshm_scope_flags {
  PDSHM_SF_ROOT = 1u << 0,     /* the segment's global scope                 */
  PDSHM_SF_NAMED = 1u << 1,    /* created with a name                        */
};

struct pdshm_scope_rec {
  uint32_t magic;          /* PDSHM_SCOPE_MAGIC                                */
  uint32_t flags;          /* enum pdshm_scope_flags; immutable                */
  uint64_t id;             /* from hdr->id_counter; immutable                  */
  pdshm_off_t parent;      /* 0 for the root; holds one ref on it; immutable   */
  pdshm_off_t name;        /* NAME block, 0 when anonymous; immutable          */
  uint32_t lock;           /* lock-table entry guarding this scope; immutable  */
  uint32_t depth;          /* 0 for the root; immutable                        */
  uint64_t refs;           /* handle records + kids + link; own lock           */
  uint64_t linked;         /* 1 while openable by path; parent's and own lock  */
  uint64_t inlist;         /* 1 while on the parent's kid list; parent's lock  */
  pdshm_off_t first_kid;   /* own lock                                          */
  pdshm_off_t next_sib;    /* parent's lock                                     */
  pdshm_off_t prev_sib;    /* parent's lock                                     */
  _Atomic uint64_t seq;    /* seqlock over table and the variables' names:
                              odd while a writer applies; own lock            */
  pdshm_off_t table;       /* TABLE block or 0; own lock, read lock-free       */
  uint64_t nvars;          /* live variables; own lock                         */
  uint64_t dying;          /* 1 once refs reached 0; own lock                  */
  uint32_t creator_pid;    /* for the inspector                                */
  uint32_t creator_slot;
  uint64_t created_ns;     /* CLOCK_REALTIME                                   */
};

/* A scope's variable index: open addressing, linear probing, power-of-two
 * capacity, at most half full counting tombstones (5/8 above 32 Ki entries,
 * pdshm__table_fill_eighths); replaced (not resized in
 * place) when it grows or is cleaned, so a lock-free reader always probes a
 * whole table. */
#define PDSHM_KEY_BYTES 16 /* name bytes an index entry carries */

struct pdshm_table_ent {
  pdshm_off_t var;         /* VAR record payload, 0 empty, PDSHM_TOMBSTONE      */
  uint64_t hash;           /* of the name                                       */
  uint64_t key[PDSHM_KEY_BYTES / 8]; /* the name's first 16 bytes, zero padded:
                              a name that fits is matched here, without
                              touching the variable's record                   */
};
struct pdshm_table {
  uint64_t cap;            /* entries, a power of two                           */
  uint64_t used;           /* live entries + tombstones                         */
  struct pdshm_table_ent ent[];
};

#define PDSHM_NDIM_MAX_ 8 /* == PDSHM_NDIM_MAX of pdshm.h */

enum pdshm_value_type { PDSHM_V_NONE = 0, PDSHM_V_TENSOR = 1 };

struct pdshm_var_rec {
  uint32_t magic;          /* PDSHM_VAR_MAGIC                                   */
  uint32_t pad;
  pdshm_off_t self;        /* this record's own offset: pdshm_var * -> base     */
  uint64_t gen;            /* incarnation, from hdr->id_counter; immutable      */
  pdshm_off_t scope;       /* owning scope record; immutable                    */
  pdshm_off_t name;        /* NAME block (rename replaces it); scope lock, seq  */
  uint64_t hash;           /* of the name; scope lock, seq                      */
  pdshm_off_t label;       /* NAME block or 0; scope lock                       */
  pdshm_off_t readers;     /* OPLIST block or 0; scope lock                     */
  pdshm_off_t writers;     /* OPLIST block or 0; scope lock                     */
  uint64_t vtype;          /* enum pdshm_value_type; scope lock                 */
  /* lk and version share a 16-byte aligned pair (records are 16-aligned),
   * so one cache line: an exclusive unlock writes both. */
  _Atomic uint64_t lk;     /* pdshm_var_lock's word (varlock.c): owner slot,
                              shared holders, and sleepers on its low half    */
  _Atomic uint64_t version;/* bumped by resize and by exclusive unlocks; its low
                              32 bits are the futex word of pdshm_var_wait    */
  _Atomic uint32_t vwaiters;/* threads in pdshm_var_wait on this variable: a
                              bump wakes them only when nonzero (futex.c)     */
  _Atomic uint32_t lk_rbias;/* whether shared takes may go uncounted, as
                              records of their slots a writer scans for:
                              varlock_bias.c                                  */
  /* The tensor; every word below changes in one journal (resize). */
  uint64_t dtype_ndim;     /* dtype | ndim << 32                                */
  int64_t dims[PDSHM_NDIM_MAX_];
  pdshm_off_t buf;         /* TENSOR block payload: every tensor has one, of
                              0 bytes too; 0 before the first resize          */
  pdshm_off_t data;        /* 64-aligned start of the data inside buf           */
  uint64_t nbytes;
  _Atomic uint64_t lk_wwait;/* a writer waits for readers to drain: its slot+1
                              | its slot's epoch << 16, 0 when none (varlock.c,
                              invariant 4)                                    */
};
_Static_assert(offsetof(struct pdshm_var_rec, lk) % 16 == 0 &&
                   offsetof(struct pdshm_var_rec, version) == offsetof(struct pdshm_var_rec, lk) + 8,
               "a variable's lock word and version share a cache line");

/* A NAME block: a name or label, NUL-terminated, never changed once
 * published (rename and set_label replace the block). */
struct pdshm_name {
  uint64_t len;            /* bytes before the NUL                              */
  char s[];
};

/* What a process holds, in blocks it owns (owner = slot+1, never published):
 * the reaper releases each kept HANDLE or HOLD block of a dead slot (and
 * drops the pins of its PIN blocks, struct pdshm_pin_rec in layout.h).  Such a
 * block comes out of the allocator zeroed, and `scope` is set by the journal
 * that counts the reference: a record whose scope is 0 counts for nothing. */
struct pdshm_handle_rec {
  pdshm_off_t scope;       /* HANDLE: the scope this record holds one ref on;
                              HOLD: the variable it holds a share of; set at
                              the commit                                      */
  union {
    uint64_t epoch;        /* HANDLE: the slot's epoch when it was made (read
                              by nothing: for whoever examines a segment)     */
    uint64_t gen;          /* HOLD: the variable's generation (pdshm_varref)  */
  };
};

/* Operator names of a variable's readers or writers: count, then count NUL-
 * terminated strings back to back.  Replaced whole on every change. */
struct pdshm_oplist {
  uint64_t count;
  uint64_t bytes;          /* of the strings                                    */
  char names[];
};

#endif /* PDSHM_MODEL_RECORDS_H */
