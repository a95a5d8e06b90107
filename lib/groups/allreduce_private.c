/*
 * allreduce_private.c - pdshm_group_allreduce_private: the allreduce of a
 * tensor in the caller's private memory, through a staging tensor of the
 * segment, each byte of it copied in and out at most once.
 *
 * Three rounds of the group (group_round.c), P, P+1 and P+2:
 *   1. each member copies into its staging tensor the shares of its data that
 *      the others reduce (every share but its own: pdshm__share_first), pins
 *      the staging tensor, describes it (kind PDSHM_GK_ALLREDUCE_PRIVATE) in
 *      its rank's ar[P & 1] and arrives at P (a timeout withdraws: nobody
 *      read anything);
 *   2. once P completes, every member checks every description, as
 *      allreduce.c's step 2 does (the same verdict everywhere; on EINVAL
 *      nothing was read or written);
 *   3. in round P+1, member k folds its share k of its own data and of every
 *      other member's staging tensor, in rank order, into its data, copies
 *      the result into its staging share k, and arrives at P+1;
 *   4. in round P+2, once P+1 completed, member k copies every other member
 *      r's share r from r's staging tensor straight into its data, and
 *      arrives at P+2.
 * Data of at most PDSHM_PRIVATE_SMALL bytes goes in two rounds instead
 * (kind PDSHM_GK_ALLREDUCE_SMALL), where the rounds cost more than the
 * bytes (bench_allreduce): each member copies all its data into its
 * staging tensor and arrives at P; once P completed and the descriptions
 * agree, the staging tensors are allreduced in place, as
 * pdshm_group_allreduce does (allreduce.c, steps 3 and 4: each member
 * reduces its share of every staging tensor and spreads it, and arrives at
 * P+1); once P+1 completed, every share is in every staging tensor, and
 * each member copies its own into its data.  The kind follows from the
 * data's bytes, the same at every member.
 * In the three rounds a member writes only its own data and staging
 * tensor, and the others read the staging tensor; in the small kind's two
 * they write their shares into it too.  Step 1 of a member's next call
 * rewrites its staging only once the call's last round completed, so after
 * every member is done with it.  Each member marks itself writing
 * (group_round.c, invariant 4) in the rounds after P and looks at the round
 * between chunks; a member that gets an error after step 2 returns only
 * once no live member is in them: nobody reads or writes a staging tensor
 * after its owner returned.  Per member, for S bytes of data among n
 * members: S - S/n copied in, S read and 2S/n written by the fold, S - S/n
 * copied out (the small kind: S in, S out, and the allreduce's 2S).
 */
#define PDSHM_LAYER 6 /* groups/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "groups/groups.h"

#define CHUNK_BYTES (1u << 18) /* between two looks at the round */

/* What the member `me` does in round `round` (the descriptions published at
 * P): FOLD, step 3; COPY, step 4. */
enum ap_work { FOLD, COPY };

/* That work, chunk by chunk: 0 when done, 1 when the round ended first. */
static int ap_step(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t me, uint32_t round,
                   enum ap_work work, uint8_t *data, const struct pdshm_group_desc *d0,
                   size_t es) {
  const bool copy = work == COPY;
  const uint32_t size = g->size, published = (round - 1 - copy) & 1;
  const size_t chunk = CHUNK_BYTES / es;
  void *src[PDSHM_GROUP_MAX];
  for (uint32_t k = copy ? 0 : me; k < (copy ? size : me + 1); k++) {
    if (copy && k == me) continue;
    size_t lo = pdshm__share_first(d0->count, k, size),
           hi = pdshm__share_first(d0->count, k + 1, size);
    for (size_t i = lo; i < hi; i += chunk) {
      if (PDSHM_GS_ROUND(atomic_load_explicit(&g->state, memory_order_acquire)) != round)
        return 1;
      size_t n = hi - i < chunk ? hi - i : chunk;
      for (uint32_t r = 0; r < size; r++)
        src[r] = r == me ? data + i * es : seg->base + g->rank[r].ar[published].data + i * es;
      if (copy) {
        memcpy(data + i * es, src[k], n * es);
        PDSHM_CRASHPOINT("group.allreduce_private.out");
      } else {
        pdshm__reduce((int)d0->dtype, (int)d0->op, data + i * es, src, size, n);
        memcpy(seg->base + g->rank[me].ar[published].data + i * es, data + i * es, n * es);
        PDSHM_CRASHPOINT("group.allreduce_private.fold");
      }
    }
  }
  return 0;
}

/* One work as round gr->round, then its pass. */
static int ap_round(struct pdshm_group *gr, enum ap_work work, uint8_t *data,
                    const struct pdshm_group_desc *d0, size_t es, uint64_t deadline) {
  pdshm_seg *seg = gr->seg;
  struct pdshm_group_rec *g = pdshm__group_rec(seg, gr->rec);
  uint32_t round = gr->round;
  atomic_store(&g->rank[gr->rank].writing, round);
  ap_step(seg, g, gr->rank, round, work, data, d0, es);
  atomic_store(&g->rank[gr->rank].writing, 0);
  /* When the round ended while we worked, it was broken: passing it arrives
   * nowhere and answers its outcome at once. */
  int rc = pdshm__round_pass(gr, deadline, false);
  if (rc) pdshm__round_wait_writers(seg, g, round, (int)gr->rank);
  return rc;
}

/* Steps 2 to 4 (a small one's: 2, the allreduce of the staging tensors and
 * the copy out of `staging`, ours), once round P completed; the caller is
 * in round P+1. */
static int ap_rounds(struct pdshm_group *gr, uint8_t *data, const void *staging, size_t es,
                     uint64_t deadline) {
  struct pdshm_group_rec *g = pdshm__group_rec(gr->seg, gr->rec);
  uint32_t round = gr->round;
  int rc = pdshm__ar_verdict(gr, deadline);
  if (rc) return rc;
  /* a copy: the descriptions of P are rewritten from round P+2 on */
  const struct pdshm_group_desc d0 = g->rank[0].ar[(round - 1) & 1];
  if (d0.kind == PDSHM_GK_ALLREDUCE_SMALL) {
    if ((rc = pdshm__ar_shares(gr, deadline))) return rc;
    if (d0.count) memcpy(data, staging, d0.count * es); /* data may be NULL for none */
    return 0;
  }
  if ((rc = ap_round(gr, FOLD, data, &d0, es, deadline))) return rc;
  return ap_round(gr, COPY, data, &d0, es, deadline);
}

/* What is wrong with the arguments, if anything. */
static int ap_args(pdshm_group *gr, const void *data, pdshm_dtype dtype, uint64_t count,
                   pdshm_var *staging, pdshm_reduce_op op, size_t *es) {
  if (!data && count) return pdshm__fail(PDSHM_EINVAL, "NULL data");
  if ((unsigned)op > PDSHM_MIN) return pdshm__fail(PDSHM_EINVAL, "unknown reduce op %d", (int)op);
  if (!(*es = pdshm__reduce_elem((int)dtype)))
    return pdshm__fail(PDSHM_EINVAL, "dtype %d cannot be reduced", (int)dtype);
  if (count > SIZE_MAX / *es) return pdshm__fail(PDSHM_EINVAL, "%llu elements overflow",
                                                 (unsigned long long)count);
  if (!staging) return pdshm__fail(PDSHM_EINVAL, "NULL staging variable");
  if (pdshm__seg_of(staging) != gr->seg)
    return pdshm__fail(PDSHM_EINVAL, "the staging variable is not in the group's attachment");
  return 0;
}

PDSHM_API int pdshm_group_allreduce_private(pdshm_group *gr, void *data, pdshm_dtype dtype,
                                            uint64_t count, pdshm_var *staging,
                                            pdshm_reduce_op op, int64_t timeout_ns) {
  int rc = pdshm__round_usable(gr);
  if (rc) return rc;
  size_t es = 0; /* set by ap_args */
  pdshm_tensor_view view;
  if ((rc = ap_args(gr, data, dtype, count, staging, op, &es)) ||
      (rc = pdshm__group_pin(gr, staging, &view)))
    return pdshm__ar_without_tensor(gr, rc, timeout_ns);
  if (view.nbytes / es < count) {
    rc = pdshm__fail(PDSHM_EINVAL, "the staging tensor holds %zu bytes, not the %llu of the data",
                     (size_t)view.nbytes, (unsigned long long)(count * es));
    return pdshm__ar_without_tensor(gr, rc, timeout_ns);
  }
  pdshm_seg *seg = gr->seg;
  struct pdshm_group_rec *g = pdshm__group_rec(seg, gr->rec);
  uint32_t me = gr->rank, size = gr->size;
  bool small = count * es <= PDSHM_PRIVATE_SMALL;
  uint64_t lo = small ? count : pdshm__share_first(count, me, size),
           hi = small ? count : pdshm__share_first(count, me + 1, size);
  if (count) { /* step 1: the shares the others fold (data may be NULL for none) */
    memcpy(view.data, data, lo * es);
    memcpy((uint8_t *)view.data + hi * es, (uint8_t *)data + hi * es, (count - hi) * es);
  }
  uint32_t round = gr->round;
  g->rank[me].ar[round & 1] = (struct pdshm_group_desc){
      .data = (pdshm_off_t)((uint8_t *)view.data - seg->base), .count = count,
      .dtype = (uint32_t)dtype, .op = (uint16_t)op,
      .kind = small ? PDSHM_GK_ALLREDUCE_SMALL : PDSHM_GK_ALLREDUCE_PRIVATE};
  uint64_t deadline = pdshm__round_deadline(timeout_ns);
  rc = pdshm__round_pass(gr, deadline, true);
  if (!rc) rc = ap_rounds(gr, data, view.data, es, deadline);
  else if (rc == PDSHM_ETIMEDOUT && gr->round == round) /* withdrawn */
    pdshm__round_no_tensor(gr);
  return rc;
}
