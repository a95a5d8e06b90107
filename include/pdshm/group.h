/* pdshm/group.h - trainer groups: barriers, collectives, regroups; waiting. */
#ifndef PDSHM_GROUP_H
#define PDSHM_GROUP_H

#include "pdshm/base.h"    /* PDSHM_API, the C types */
#include "pdshm/limits.h"  /* PDSHM_NAME_MAX */
#include "pdshm/segment.h" /* pdshm_seg */
#include "pdshm/scope.h"   /* pdshm_var */
#include "pdshm/tensor.h"  /* pdshm_dtype */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Trainer groups: waiting, barriers, reduction ----------------------- */
/*
 * Blocks until v's version differs from `seen`; 0 (read the new version with
 * pdshm_var_version), PDSHM_ETIMEDOUT after timeout_ns (< 0: no limit).  No
 * lock, no busy spinning: a futex on the version word, woken by every bump
 * (an exclusive unlock, a resize, in any process).  A read-only attachment
 * cannot be woken and looks again every millisecond.  EINVAL for NULL or a
 * variable of no attachment of this process; EFORKED.
 */
PDSHM_API int pdshm_var_wait(const pdshm_var *v, uint64_t seen, int64_t timeout_ns);

#define PDSHM_GROUP_MAX 256u   /* members of one group                         */
#define PDSHM_GROUP_NAME_MAX PDSHM_NAME_MAX
typedef struct pdshm_group pdshm_group; /* this process's membership: private */
typedef enum { PDSHM_SUM, PDSHM_MEAN, PDSHM_MAX, PDSHM_MIN } pdshm_reduce_op;

/*
 * Joins the group NAME (1 to PDSHM_GROUP_NAME_MAX bytes; created by its first
 * joiner) of `size` members (1 to PDSHM_GROUP_MAX).  rank < 0 takes the lowest
 * free rank (a rank whose holder died counts as free); a given rank held by a
 * live member is PDSHM_EBUSY, one held by a dead member is taken over (the
 * replacement; a process is dead once the kernel has closed its files, which
 * can be a few milliseconds after waitpid() reports it: a replacement started
 * at once may see EBUSY, and retries).  A takeover waits until no live member
 * writes a collective any more (they stop within a chunk of the death's
 * announcement); when one still does after 1 s (a stopped process: slow is
 * not dead), PDSHM_ETIMEDOUT, and a later join may try again; so too when
 * another process stopped in the middle of a join or a leave (any group's)
 * for that long.  While members
 * wait in a pdshm_group_regroup, PDSHM_EBUSY (join later, or enlist).  A
 * size other than the group's (it changes with each regroup that drops or
 * admits someone), or a rank >= size, is PDSHM_EINVAL; a full group
 * PDSHM_EUSERS; ENOMEM; EROFS; EFORKED.  A group's memory goes back when its
 * last member leaves (or dies and is reaped).  A failure changes nothing
 * (but a takeover's PDSHM_ETIMEDOUT announces the death to the survivors, as
 * they would find it themselves).  One thread at a time uses a pdshm_group.
 */
PDSHM_API int pdshm_group_join(pdshm_seg *seg, const char *name, unsigned size, int rank,
                               pdshm_group **out);
PDSHM_API int pdshm_group_rank(const pdshm_group *g);  /* EINVAL for NULL */
PDSHM_API int pdshm_group_size(const pdshm_group *g);  /* EINVAL for NULL */
/*
 * 0 once every rank has reached this barrier.  PDSHM_EOWNERDEAD when a member
 * died during or before this round: every survivor gets it for the same round
 * (within 100 ms of the death without pdshmd, at once with it), the round is
 * abandoned, and the next barrier waits for the dead rank to be taken over.
 * A replacement is not told of the death it replaced: its first barrier
 * joins the next round.  A rank left free by pdshm_group_leave is waited for
 * too.  PDSHM_ETIMEDOUT after timeout_ns (< 0: no limit): the caller then has
 * not passed the barrier, and its next barrier call waits for the same round
 * again.  PDSHM_EBUSY, nothing done, while the caller's last
 * pdshm_group_regroup is pending (see there); so too for the collectives.
 * EINVAL for NULL; EFORKED.
 */
PDSHM_API int pdshm_group_barrier(pdshm_group *g, int64_t timeout_ns);
/*
 * Every member passes its own tensor of the same dtype and element count,
 * with the same op (else PDSHM_EINVAL at every member, and no tensor
 * changed); on return each member's tensor holds the op over all members'
 * tensors.  The work is split between the members and done in place in the
 * segment.  The buffer is pinned meanwhile, and the membership keeps that
 * pin after the call, for its next collective on the same buffer (a pin
 * takes the heap's lock, which every process shares): it lets go of it at
 * its next collective on another buffer, or at pdshm_group_leave, so a
 * tensor resized or erased between collectives keeps its old buffer, an
 * orphan, until then.  F16 and BF16 are reduced in
 * f32; MEAN divides the sum once, at the end: integer MEAN truncates towards
 * zero, as C's division does.  Integer sums wrap around in the tensor's
 * dtype, under MEAN too (the wrapped sum is divided), so that an integer
 * result does not depend on the group's size.  Dtypes: F16,
 * BF16, F32, F64, I32, I64 (another dtype is EINVAL at every member, as is a
 * round where some members call pdshm_group_barrier, pdshm_group_reduce_scatter
 * or pdshm_group_allgather instead).  Errors as for
 * the barrier: after PDSHM_EOWNERDEAD or a
 * timeout while the members were writing (PDSHM_ETIMEDOUT at every member of
 * that round) the tensors' contents are unspecified; a timeout before any
 * member wrote leaves them unchanged and a later call takes part in the same
 * round.  Once the call returns, with any result, no other member writes the
 * caller's tensor.  A caller whose own arguments are wrong (v NULL, of
 * another attachment, holding no tensor: ETYPE; an unknown op: EINVAL) still
 * takes part in the round without a tensor and answers that error, the
 * others EINVAL.  EBADSEG at every member when a tensor's description lies
 * outside the arena (a damaged segment).  EINVAL for a NULL g.
 */
PDSHM_API int pdshm_group_allreduce(pdshm_group *g, pdshm_var *v, pdshm_reduce_op op,
                                    int64_t timeout_ns);
/*
 * Member k's share of count elements is [first, end) with first =
 * floor(count * k / size) and end the same for k + 1: the part of the
 * tensor that member k reduces in pdshm_group_allreduce and
 * pdshm_group_reduce_scatter and spreads in pdshm_group_allgather.  The
 * shares of ranks 0..size-1 are in order, disjoint, and cover [0, count);
 * with count < size some are empty.  Stores the caller's share; pure
 * arithmetic (no round, no access to the segment).  EINVAL for a NULL
 * argument (nothing stored).
 */
PDSHM_API int pdshm_group_share(const pdshm_group *g, uint64_t count, uint64_t *first,
                                uint64_t *end);
/*
 * The first half of an allreduce: the caller's share (pdshm_group_share) of
 * its own tensor ends up holding the op over every member's same share; the
 * rest of each member's tensor is left as it was.  Everything else as for
 * pdshm_group_allreduce: same dtypes, ops (MEAN divides once, at the end),
 * arguments and checks (a different dtype, element count or op at any
 * member, or a round where some members call pdshm_group_barrier,
 * pdshm_group_allreduce or pdshm_group_allgather instead, is PDSHM_EINVAL at
 * every member and no tensor changed), errors (after PDSHM_EOWNERDEAD or a
 * timeout while the members were working, the shares' contents are
 * unspecified and the rest of each tensor unchanged; a timeout before any
 * member wrote changes nothing and a later call takes part in the same
 * round), and once the call returns, with any result, no other member reads
 * or writes the caller's tensor.
 */
PDSHM_API int pdshm_group_reduce_scatter(pdshm_group *g, pdshm_var *v, pdshm_reduce_op op,
                                         int64_t timeout_ns);
/*
 * The second half of an allreduce: each member's share (pdshm_group_share)
 * of its own tensor is copied into the same share of every other member's
 * tensor, so that on return every tensor holds the concatenation of the
 * shares.  Any dtype (the bytes are copied).  Everything else as for
 * pdshm_group_allreduce: a different dtype or element count at any member,
 * or a round where some members call another collective or a barrier, is
 * PDSHM_EINVAL at every member and no tensor changed; after
 * PDSHM_EOWNERDEAD or a timeout while the members were copying, each
 * member's own share is unchanged and the others are unspecified; a timeout
 * before any member wrote changes nothing; once the call returns, with any
 * result, no other member reads or writes the caller's tensor.  Bad
 * arguments of the caller (v NULL, of another attachment: EINVAL; holding
 * no tensor: ETYPE) answer that error, the others EINVAL.  EINVAL for a NULL
 * g.
 */
PDSHM_API int pdshm_group_allgather(pdshm_group *g, pdshm_var *v, int64_t timeout_ns);
/*
 * An allreduce of count elements of dtype at data, in the caller's private
 * memory: on return data holds the op over every member's data.  staging is
 * a variable of the caller's, holding a tensor of at least count elements'
 * bytes (any dtype: its bytes are used), that does not overlap data; the
 * members read each other's staging tensors, so each copies into the
 * segment only the shares the others reduce and copies the others' reduced
 * shares straight from their staging into its data (per member, for S bytes
 * among n members: S - S/n copied each way, against 2S around
 * pdshm_group_allreduce of a staging tensor).  Three rounds of the group;
 * data of at most 64 KiB takes two, where the rounds cost more than the
 * bytes: each member copies all of it into its staging tensor, the staging
 * tensors are allreduced in place as pdshm_group_allreduce does, and each
 * member copies its own out (bench_allreduce: faster up to 64 KiB, slower
 * at 1 MiB).
 * Dtypes, ops, MEAN, integer wrapping, the result's bits (the same at every
 * member), the pin kept on the staging buffer and errors as for
 * pdshm_group_allreduce; members that pass
 * different dtypes, counts or ops, or call another collective or a barrier
 * in the same round, all answer EINVAL, no data changed.  After
 * PDSHM_EOWNERDEAD or a timeout while the members were working, data's
 * contents are unspecified; a timeout before any member read anything
 * changes nothing and a later call takes part in the same round.  Bad
 * arguments of the caller (data NULL with count > 0, a dtype that cannot
 * be reduced, an unknown op, staging NULL, of another attachment, or
 * smaller than the data: EINVAL; holding no tensor: ETYPE) answer that
 * error, the others EINVAL.  EINVAL for a NULL g.
 */
PDSHM_API int pdshm_group_allreduce_private(pdshm_group *g, void *data, pdshm_dtype dtype,
                                            uint64_t count, pdshm_var *staging,
                                            pdshm_reduce_op op, int64_t timeout_ns);
/* Frees the rank and the handle (also on error); the group's memory goes
 * back when this was its last member.  pdshm_detach leaves every group of
 * the attachment.  EINVAL for a NULL g; EROFS, EFORKED, ENOTRECOVERABLE as
 * every call that writes (the rank is not given up then); ENOTRECOVERABLE
 * or EBADSEG when the group's records cannot be changed.  PDSHM_ETIMEDOUT
 * when the groups' lock stays held for 1 s (its holder, a process stopped in
 * a join, a leave or an enlist, stalls no leave): the rank stays this
 * attachment's until its next pdshm_group_join, pdshm_group_enlist or
 * pdshm_detach gives it up, or, when the lock is still held at the detach,
 * the reaper after it (pdshm_detach). */
PDSHM_API int pdshm_group_leave(pdshm_group *g);
/*
 * Groups that shrink and grow.  A collective of the live members, at a round
 * boundary: the ranks whose members died (or left) and were not taken over
 * are dropped, and the processes waiting in pdshm_group_enlist are admitted.
 * Every live member calls it; once all of them have (the dead are not waited
 * for: a member that dies during the call is dropped with the others, or,
 * when it dies after the new ranks were decided, told of by the next round's
 * PDSHM_EOWNERDEAD as any death), each gets 0, the same new size in
 * *new_size, and its new rank in *new_rank: the live members keep the order
 * of their old ranks (0, 1, ... in that order), the admitted candidates
 * follow (in the order of the seats they enlisted into).  With nobody dead
 * and nobody waiting it changes nothing, and returns 0 as a barrier would.
 * The caller's handle takes the new rank and size (pdshm_group_rank,
 * pdshm_group_size, pdshm_group_share) and its next barrier or collective is
 * among the new members.  How long to wait for a
 * replacement before regrouping is the caller's choice (a barrier with a
 * timeout: PDSHM_EOWNERDEAD then PDSHM_ETIMEDOUT, say).
 * PDSHM_ETIMEDOUT after timeout_ns (< 0: no limit) when a live member has
 * not come (a stopped process: slow is not dead), or deaths kept breaking
 * its rounds until then: nothing changed, the
 * caller's rank and size are as before, and its next call (a regroup again,
 * or a barrier) waits for the same round.  PDSHM_ETIMEDOUT too when the
 * groups' lock stays held past timeout_ns (and 100 ms more): its holder, a
 * process stopped in a join, a leave or an enlist, holds up no member past
 * its timeout; but the caller, which cannot withdraw without that lock,
 * stays in the regroup (pending): its next pdshm_group_regroup goes on with
 * the same one, its barriers and collectives answer PDSHM_EBUSY until then,
 * and pdshm_group_leave leaves it.  PDSHM_EINVAL, nothing changed,
 * when a member came to the same round with a barrier or a collective instead
 * (the regroup's callers withdraw; the others wait as for a missing member),
 * and for a NULL argument.  While members wait in a regroup,
 * pdshm_group_join is refused (PDSHM_EBUSY): a rank taken over then would be
 * waited for.  PDSHM_ESTALE when the caller no longer holds a rank of the
 * group (its seat was given up for dead).  EROFS, EFORKED, and the lock's
 * errors (ENOTRECOVERABLE).  One thread at a time uses a pdshm_group.
 */
PDSHM_API int pdshm_group_regroup(pdshm_group *g, int64_t timeout_ns, int *new_rank,
                                  int *new_size);
/*
 * Enlists the calling process as a candidate of the existing group NAME and
 * waits, at most timeout_ns (< 0: no limit), for its members' next
 * pdshm_group_regroup to admit it: 0 and *out a membership whose rank and size
 * are the ones that regroup gave (its first barrier or collective takes part
 * in the round right after that regroup, as the members' next call does: if
 * a death broke it meanwhile, it answers PDSHM_EOWNERDEAD there too, and the
 * newcomer regroups with the others).  A candidate only waits: it holds up
 * no member, and one that dies or stops while waiting delays no regroup (a
 * dead one is dropped; a stopped one is admitted, and is then waited for as
 * any stopped member).  PDSHM_ETIMEDOUT: not admitted in time, no longer a candidate,
 * nothing changed; or the groups' lock held past timeout_ns (and 100 ms
 * more) before the candidacy was made, nothing changed; or held 100 ms past
 * timeout_ns when the candidacy was to be given up: the seat stays the
 * attachment's (a regroup may still admit it, and its members then wait for
 * a rank nobody uses) until its next pdshm_group_join, pdshm_group_enlist or
 * pdshm_detach gives it up, or, when the lock is still held at the detach,
 * the reaper after it (pdshm_detach).  PDSHM_ENOENT when there is no group
 * NAME; PDSHM_EUSERS when it has PDSHM_GROUP_MAX ranks and candidates
 * already; EINVAL (NULL seg or out, a bad name); ENOMEM; EROFS; EFORKED;
 * ESTALE (the candidate's seat was given up for dead).
 */
PDSHM_API int pdshm_group_enlist(pdshm_seg *seg, const char *name, int64_t timeout_ns,
                                 pdshm_group **out);

#ifdef __cplusplus
}
#endif
#endif /* PDSHM_GROUP_H */
