/*
 * groups.h - trainer groups in the segment (DESIGN §4): the registry's
 * records, the round state word, and what group.c, group_break.c,
 * group_plan.c, group_round.c, group_regroup.c and allreduce.c (all three
 * collectives) say to each other.
 *
 * Bump PDSHM_LAYOUT_VERSION (layout.h) when anything here changes.
 *
 * The registry is a list of GROUP blocks from hdr->groups.  The list, each
 * record's next/name, and every rank's `member` and `reported` words change
 * only under lock PDSHM_LOCK_GROUPS (the list and `member` through journals,
 * or a regroup's plan, so a death leaves them whole); the rest of a record
 * is lock-free, but for what a regroup changes (below).
 *
 * A member is named by its word: slot+1 | slot epoch << 16 (the epoch tells
 * a replacement in the same slot apart).  A member is
 *   - free      when the word is 0 (never taken, or left);
 *   - dead      when PDSHM_GM_DEAD is set (its reaper marked it), or when its
 *               slot's epoch moved on, the slot is FREE, or nobody holds the
 *               slot's OFD lock (dead, not yet reaped);
 *   - live      otherwise (a stopped process is live: slow is not dead).
 * A free or dead rank may be joined; a group is freed (in the journal that
 * makes it so) when no rank is live or dead-unreaped: by the last leave, or
 * by the reaper of its last member.
 *
 * Rounds (group_round.c): `state` packs the current round number (low 32
 * bits: the futex word, which changes only when a round ends), the number of
 * arrivals in it, and two histories of the last PDSHM_GS_HIST rounds: which
 * ended broken, and which of those were broken by a timeout.  A round ends
 * by one CAS that moves the round on: completed by the last arrival, or
 * broken (a death, or a collective's timeout while members wrote).  So every
 * member sees one outcome per round.  A death breaks the round once:
 * `reported` keeps the member word whose death a broken round announced, so
 * the following rounds wait for the rank to be taken over instead.
 *
 * Seats (group_plan.c, group_regroup.c): a record has `cap` seats; seats
 * 0..size-1 are the ranks, the others hold the candidates that
 * pdshm_group_enlist registered (member words too, under the lock, through
 * journals), waiting for the members' next regroup.  A regroup (the only
 * change of `size`) is decided under the lock, once every live member has
 * arrived at its round: the new seats go to each seat's `planned` word, and
 * one store of `plan` commits the decision; applying it (ending the round,
 * moving the member words, the new size) is idempotent, and whoever takes
 * the lock next finishes it before touching the record.
 *
 * Bump the layout version when changing these structs.
 */
#ifndef PDSHM_GROUPS_GROUPS_H
#define PDSHM_GROUPS_GROUPS_H

/* Layer 6 (lib/LAYERS): a file of a lower layer that includes this fails
 * to compile; each lib/ file names its layer (PDSHM_LAYER) first. */
#if defined PDSHM_LAYER && PDSHM_LAYER < 6
#error "groups/groups.h is layer 6, above the file that includes it (lib/LAYERS)"
#endif

#include "model/model.h"

#define PDSHM_GROUP_MAGIC 0x50524747u /* "GGRP" */
#define PDSHM_GM_DEAD (1ull << 63)     /* member word: reaped dead member      */
#define PDSHM_GM_EPOCH_MASK ((1ull << 47) - 1)

/* state: round | arrivals << 32 | broken history << 44 | timeout history << 54 */
#define PDSHM_GS_HIST 10u
#define PDSHM_GS_ARRIVED(s) ((uint32_t)((s) >> 32) & 0xfffu)
#define PDSHM_GS_ROUND(s) ((uint32_t)(s))
#define PDSHM_GS_BROKE(s) ((uint32_t)((s) >> 44) & 0x3ffu)
#define PDSHM_GS_TIMEO(s) ((uint32_t)((s) >> 54) & 0x3ffu)

/* What a collective's round does (pdshm_group_desc.kind).  Allreduce is 0,
 * so a description written before the kind existed (when that half of the
 * word was op's, always 0) reads the same. */
enum {
  PDSHM_GK_ALLREDUCE = 0,      /* pdshm_group_allreduce                      */
  PDSHM_GK_REDUCE_SCATTER = 1, /* pdshm_group_reduce_scatter                 */
  PDSHM_GK_ALLGATHER = 2,      /* pdshm_group_allgather                      */
  PDSHM_GK_REGROUP = 3,        /* pdshm_group_regroup: no tensor, and its
                                  arrival never completes the round          */
  PDSHM_GK_ALLREDUCE_PRIVATE = 4, /* pdshm_group_allreduce_private: the
                                  description is of the staging tensor       */
  PDSHM_GK_ALLREDUCE_SMALL = 5, /* the same of at most PDSHM_PRIVATE_SMALL
                                  bytes, in two rounds                       */
  PDSHM_GK_NONE = 0xffff       /* no tensor: a barrier, or withdrawn         */
};

/* A collective round's description of one member's tensor. */
struct pdshm_group_desc {
  pdshm_off_t data;        /* the tensor's bytes (pinned by the member)        */
  uint64_t count;          /* elements                                         */
  uint32_t dtype;          /* pdshm_dtype                                      */
  uint16_t op;             /* pdshm_reduce_op (0 for an allgather)             */
  uint16_t kind;           /* PDSHM_GK_*                                       */
};

/* The first element of rank k's share of n elements among size ranks:
 * floor(n * k / size), without overflowing.  Rank k's share is
 * [pdshm__share_first(n, k, size), pdshm__share_first(n, k + 1, size)). */
static inline uint64_t pdshm__share_first(uint64_t n, uint32_t k, uint32_t size) {
  return n / size * k + n % size * k / size;
}

struct pdshm_group_rank {
  _Atomic uint64_t member;   /* see above; groups lock, journal                 */
  _Atomic uint64_t reported; /* the member word whose death a broken round
                                announced, 0 when none; groups lock           */
  _Atomic uint32_t arrived;  /* the last round this rank arrived at (stored
                                before it is counted in state); its member    */
  _Atomic uint32_t writing;  /* the round whose share of a collective the
                                member is reading and writing, 0 when none;
                                its member                                    */
  struct pdshm_group_desc ar[2]; /* the collective published at round R uses
                                ar[R & 1]; its member, before it arrives      */
  uint64_t planned;          /* the member word this seat gets when the
                                record's plan applies (meaningless while
                                plan is 0); groups lock                       */
  uint32_t planned_from;     /* the seat that word comes from; likewise      */
  uint32_t from;             /* the seat its member held before the regroup
                                `regrouped` moved it here (how each member
                                finds its new rank: one process may hold two
                                seats); groups lock                           */
  uint64_t pad[5];           /* to two cache lines: ranks do not share one    */
};

struct pdshm_group_rec {
  uint32_t magic;          /* PDSHM_GROUP_MAGIC; immutable                     */
  _Atomic uint32_t size;   /* ranks: seats 0..size-1; changes only when a plan
                              applies (group_plan.c); groups lock             */
  pdshm_off_t next;        /* next record of the registry; groups lock         */
  pdshm_off_t name;        /* NAME block; immutable                            */
  uint64_t id;             /* from hdr->id_counter; immutable                  */
  uint64_t created_ns;     /* CLOCK_REALTIME; immutable                        */
  uint32_t cap;            /* seats, ranks and candidates; immutable           */
  _Atomic uint32_t regrouped; /* the last round a regroup ended, 0 when none;
                              groups lock                                     */
  _Atomic uint64_t plan;   /* a regroup decided, not yet applied: its round |
                              new size << 32; 0 when none; groups lock        */
  uint64_t pad0;           /* state on a line of its own                      */
  _Atomic uint64_t state;  /* rounds, see above; CAS                          */
  _Atomic uint32_t waiters;/* sleepers on state's futex (futex.c)              */
  uint32_t pad;
  uint64_t pad1[6];        /* the ranks start on a line of their own          */
  struct pdshm_group_rank rank[];
};
/* Padded, not aligned: a block's payload is only PDSHM_ALIGN-aligned, so the
 * record keeps its words apart by offsets from its start (an alignas here
 * would promise the compiler an alignment the allocator does not give). */
_Static_assert(offsetof(struct pdshm_group_rec, state) == PDSHM_CACHELINE, "state's line");
_Static_assert(offsetof(struct pdshm_group_rec, rank) == 2 * PDSHM_CACHELINE, "ranks' lines");
_Static_assert(sizeof(struct pdshm_group_rank) == 2 * PDSHM_CACHELINE, "a rank's lines");

/* This process's membership. */
struct pdshm_group {
  pdshm_seg *seg;
  pdshm_off_t rec;         /* the GROUP record                                 */
  uint32_t rank, size;     /* a candidate's (an enlist not yet admitted): its
                              seat, 0 (group_regroup.c)                       */
  uint64_t member;         /* our member word                                  */
  uint32_t regrouped;      /* a candidate's: the record's `regrouped` when it
                              enlisted                                        */
  uint32_t round;          /* the round our next barrier or collective is in   */
  uint32_t spin_ns;        /* how long the next wait spins before it sleeps
                              (group_round.c, invariant 5); 0: the least      */
  bool regroup_pending;    /* arrived at `round` for a regroup that could not
                              end for want of the groups lock: the next
                              pdshm_group_regroup goes on with it, other
                              rounds wait (group_regroup.c, invariant 5)      */
  bool kept;               /* a seat its leave, or its enlist's timeout, could
                              not give up for want of the groups lock: listed
                              until the attachment's next join, enlist or
                              detach gives it up (group.c, invariant 5)       */
  struct pdshm_group *next;/* the attachment's memberships (seg->groups)       */
  /* The pin of our last collective's tensor, kept for the next one on the
   * same buffer (group_pin.c); NULL when none. */
  pdshm_pin *pin;
  const struct pdshm_var_rec *pin_rec; /* the variable record pinned through */
  uint64_t pin_gen;        /* that variable's generation then                  */
};

static inline struct pdshm_group_rec *pdshm__group_rec(const pdshm_seg *seg, pdshm_off_t off) {
  return PDSHM_AT(seg->base, off, struct pdshm_group_rec);
}
static inline size_t pdshm__group_bytes(uint32_t size) {
  return sizeof(struct pdshm_group_rec) + (size_t)size * sizeof(struct pdshm_group_rank);
}

/* The state that ends the round of s: the round number moved on, the
 * arrivals reset, and whether it broke (by a timeout) pushed on the
 * histories. */
static inline uint64_t pdshm__gs_next(uint64_t s, bool broken, bool timeout) {
  uint64_t b = ((uint64_t)PDSHM_GS_BROKE(s) << 1 | broken) & 0x3ff;
  uint64_t t = ((uint64_t)PDSHM_GS_TIMEO(s) << 1 | timeout) & 0x3ff;
  return (uint64_t)(uint32_t)(PDSHM_GS_ROUND(s) + 1) | b << 44 | t << 54;
}
/* Wakes the members asleep on the round number. */
static inline void pdshm__gs_wake(struct pdshm_group_rec *g) {
  pdshm__futex_wake(pdshm__futex_low(&g->state), &g->waiters);
}

/* The plan word of a regroup that ends `round` with `size` ranks. */
static inline uint64_t pdshm__plan_word(uint32_t round, uint32_t size) {
  return (uint64_t)round | (uint64_t)size << 32;
}

/* Whether plan word p (0: none) fits record g: 1 to cap ranks. */
static inline bool pdshm__plan_sane(const struct pdshm_group_rec *g, uint64_t p) {
  uint32_t size = (uint32_t)(p >> 32);
  return !p || (size >= 1 && size <= g->cap);
}

/* ---- group_plan.c ---- */
/* Groups lock held: applies g's plan if it has one (idempotent): ends the
 * plan's round completed unless it ended, seats 0..size-1 take their planned
 * words, the others are emptied, `size` and `regrouped` set, the plan
 * cleared, the members woken.  Every holder of the lock calls it before it
 * reads or writes a record's seats. */
void pdshm__group_settle(struct pdshm_group_rec *g);
/* Takes the groups lock, waiting until a CLOCK_MONOTONIC deadline at most,
 * and settles g; 0, PDSHM_ETIMEDOUT (nothing taken), or the lock's error. */
int pdshm__group_lock_until(pdshm_seg *seg, struct pdshm_group_rec *g, uint64_t deadline);
/* The deadline of a wait for the groups lock that must not outlast the
 * caller's: that deadline, or, when it comes sooner, 100 ms from now (a live
 * holder lets go within it; one that holds on longer is taken for stopped). */
uint64_t pdshm__group_lock_deadline(uint64_t deadline);
/* The same if the lock is free now; else PDSHM_EBUSY, nothing done. */
int pdshm__group_trylock(pdshm_seg *seg, struct pdshm_group_rec *g);
/* Lock held, settled: the rank that seat `from`'s member m got from the
 * last regroup, or -1. */
int pdshm__group_moved_to(struct pdshm_group_rec *g, uint64_t m, uint32_t from);

/* ---- group_break.c ---- */
/* Is member word m live (see above)?  Free and dead words are not. */
bool pdshm__group_member_live(pdshm_seg *seg, uint64_t m);
/* Ends round `round` broken (timeout: by a timeout) unless it already ended. */
void pdshm__round_break(struct pdshm_group_rec *g, uint32_t round, bool timeout);
/* Groups lock held: rank r's death (member word m) announced, unless it
 * was: the round current at the break broken (group_break.c, invariant 3),
 * then reported[r] set. */
void pdshm__group_announce(struct pdshm_group_rec *g, uint32_t r, uint64_t m);
/* A dead member's death, announced once: under the groups lock, if rank r
 * still holds m and its death was not reported, records it and breaks the
 * round current then (pdshm__group_announce).  0, PDSHM_EBUSY when the lock is held (look again later:
 * its holder may be stopped), or a lock error. */
int pdshm__group_report_death(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t r, uint64_t m);

/* ---- group.c ---- */
/* Detach: leaves every group of the attachment (when it still may) and
 * frees the handles; false when a seat could not be given up because the
 * groups lock stayed held (group.c, invariant 5). */
bool pdshm__group_leave_all(pdshm_seg *seg);
/* Join and enlist: the seats kept by leaves and enlists that could not take
 * the groups lock (group.c, invariant 5) given up, those whose lock can be
 * taken by the CLOCK_MONOTONIC deadline. */
void pdshm__group_give_up_kept(pdshm_seg *seg, uint64_t deadline);
/* The reaper's part, idempotent: acting as dead slot `slot` through lane
 * ln, its memberships marked dead, their rounds broken, empty groups freed.
 * 0 once no live member writes a collective the dead member took part in
 * into its buffers any more (group.c, invariant 4), so that its pins may go;
 * PDSHM_ETIMEDOUT when one still does at `deadline` (CLOCK_MONOTONIC ns: a
 * stopped process), the slot then to be left to the next reaper. */
int pdshm__group_reap_slot(pdshm_seg *seg, uint32_t slot, struct pdshm_lane_ctx *ln,
                           uint64_t deadline);
/* The arguments every joining call checks: EINVAL for a NULL seg or out (else
 * *out = NULL), the attachment's writability, the name's check (*len set). */
int pdshm__group_args(pdshm_seg *seg, const char *name, pdshm_group **out, size_t *len);
/* Lock held: the record named `name` (settled), and the offset of the word
 * that links it; *found 0 when absent; EBADSEG on a broken list. */
int pdshm__group_find(pdshm_seg *seg, const char *name, size_t len, pdshm_off_t *found,
                      pdshm_off_t *link);
/* Journaled, lock held: seat r's word becomes `to`; the record goes when no
 * seat is held any more.  1 when it went, 0, or EBADSEG. */
int pdshm__group_set_member(pdshm_seg *seg, struct pdshm_lane_ctx *ln, pdshm_off_t off,
                            uint32_t r, uint64_t to);
/* Journal begun on ln under the groups lock, gr's seat still its own: the
 * seat emptied (pdshm__group_set_member) and the journal committed, a crash
 * point named `point` between; on an error the journal is aborted.  0 or
 * that error. */
int pdshm__group_vacate(pdshm_seg *seg, struct pdshm_lane_ctx *ln, const struct pdshm_group *gr,
                        const char *point);
/* This process's member word in seg. */
uint64_t pdshm__group_my_member(pdshm_seg *seg);
/* Links a membership into the attachment's list (left at detach). */
void pdshm__group_list(pdshm_seg *seg, struct pdshm_group *gr);

/* ---- group_round.c ---- */
/* The checks before a barrier or a collective arrives (the error set, the
 * last error cleared first): EINVAL for a NULL gr, the attachment's
 * writability, EBUSY while gr's regroup is pending (group_regroup.c,
 * invariant 5: it is arrived at its round already). */
int pdshm__round_usable(struct pdshm_group *gr);
/* Arrives at `round` (an arrival whose description is a regroup's never
 * completes it); does nothing once the round ended. */
void pdshm__round_arrive(struct pdshm_group_rec *g, uint32_t rank, uint32_t round);
/* Withdraws the arrival of `rank` at `round`: true, or false when the round
 * had ended. */
bool pdshm__round_withdraw(struct pdshm_group_rec *g, uint32_t rank, uint32_t round);
/* The outcome of `round` from state s, which has moved past it: 0,
 * EOWNERDEAD or ETIMEDOUT. */
int pdshm__round_outcome(uint64_t s, uint32_t round);
/* Sleeps on the round number while it is `round`, at most slice_ns. */
void pdshm__round_sleep(struct pdshm_group_rec *g, uint32_t round, int64_t slice_ns);
/* Arrives at the caller's round and waits for its outcome: 0, EOWNERDEAD,
 * ETIMEDOUT (the round broken by a timeout); when the deadline passes first,
 * withdraws (withdraw) or breaks the round (!withdraw) and answers ETIMEDOUT.
 * Moves gr->round on unless it withdrew. */
int pdshm__round_pass(struct pdshm_group *gr, uint64_t deadline, bool withdraw);
/* The caller's description for its round says "no tensor": a member that
 * meets it in a collective's round answers EINVAL and writes nothing (a
 * barrier's, or a withdrawn collective's, whose buffer is no longer pinned). */
void pdshm__round_no_tensor(struct pdshm_group *gr);
/* Does a live member but skip_rank write round `round` (any round when 0)?
 * Looks once: it never waits. */
bool pdshm__round_writing(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t round,
                          int skip_rank);
/* The pause between two looks at the writers (20 us). */
void pdshm__round_pause(void);
/* Waits, as long as it takes, until pdshm__round_writing is false: only for
 * a member's own collective, which must not return while others may still
 * touch its tensor, and which holds no lock meanwhile.  The reaper and a
 * takeover look with pdshm__round_writing instead, the groups lock held only
 * for each look, and give up in time (group.c, invariant 4). */
void pdshm__round_wait_writers(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t round,
                               int skip_rank);
/* The deadline of a timeout: UINT64_MAX for none (< 0). */
uint64_t pdshm__round_deadline(int64_t timeout_ns);

/* ---- allreduce_private.c ---- */
#define PDSHM_PRIVATE_SMALL (64u << 10) /* bytes: up to this, two rounds       */

/* ---- group_pin.c ---- */
/* v's tensor pinned for a collective of gr, its view in *view: the pin
 * kept from gr's last collective when v still holds that buffer, else a
 * new one, kept in its place (the old one let go). */
int pdshm__group_pin(struct pdshm_group *gr, pdshm_var *v, pdshm_tensor_view *view);
/* Lets go of gr's kept pin (a leave). */
void pdshm__group_unpin(struct pdshm_group *gr);

/* ---- allreduce.c ---- */
/* Step 2 of a collective (allreduce.c) whose descriptions were published at
 * `round`: 0 when every member's matches rank 0's and can be taken, else
 * EINVAL (or EBADSEG for a tensor outside the arena), the same verdict at
 * every member. */
int pdshm__ar_check(const pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t round);
/* Step 2 for a member in round P+1 (gr->round) of a collective published at
 * P: pdshm__ar_check's verdict, or, when P+1 ended without the caller (broken
 * by the others), that round's outcome, once no live member still writes
 * it. */
int pdshm__ar_verdict(struct pdshm_group *gr, uint64_t deadline);
/* Steps 3 and 4 for a member in round P+1 whose verdict passed: its share
 * of every member's tensor (described at P) reduced and spread, then P+1
 * passed; after an error, once no live member writes P+1. */
int pdshm__ar_shares(struct pdshm_group *gr, uint64_t deadline);
/* A caller with bad arguments still takes part in the round, describing no
 * tensor, so that the others answer EINVAL instead of waiting for it; its
 * own answer is `why` (or how the round ended, if not completed). */
int pdshm__ar_without_tensor(struct pdshm_group *gr, int why, int64_t timeout_ns);

/* ---- reduce.c ---- */
/* Element size of a dtype allreduce takes, 0 for others. */
size_t pdshm__reduce_elem(int dtype);
/* dst[0..n) := op over src[0..nsrc)[0..n), folded in rank order
 * (((s0 op s1) op s2) ...); MEAN divides by nsrc.  dst may be one of the
 * sources; it overlaps none of the others. */
void pdshm__reduce(int dtype, int op, void *dst, void *const *src, unsigned nsrc, size_t n);
/* pdshm__reduce with the portable loops whatever the CPU, for the tests to
 * compare with; pdshm__reduce_avx2 says whether pdshm__reduce takes AVX2's. */
void pdshm__reduce_portable(int dtype, int op, void *dst, void *const *src, unsigned nsrc,
                            size_t n);
bool pdshm__reduce_avx2(void);

#endif /* PDSHM_GROUPS_GROUPS_H */
