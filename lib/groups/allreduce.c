/*
 * allreduce.c - the group's collectives on tensors in the segment, in
 * place: pdshm_group_allreduce, pdshm_group_reduce_scatter and
 * pdshm_group_allgather, one code path with the kind as a parameter.
 *
 * A collective takes two rounds of the group (group_round.c), P and P+1:
 *   1. each member pins its tensor, describes it (and the kind) in its
 *      rank's ar[P & 1] and arrives at P (a timeout withdraws: nobody has
 *      written);
 *   2. once P completes, every member reads every description: if any
 *      differs (kind, dtype, count, op) or is not reducible (gatherable, for
 *      an allgather), all of them see it and return EINVAL, having written
 *      nothing;
 *   3. member k works on its share [k*n/size, (k+1)*n/size) of the elements
 *      (pdshm__share_first), chunk by chunk:
 *        allreduce       the op over every member's buffer into its own,
 *                        then copied to every other buffer;
 *        reduce_scatter  the op over every member's buffer into its own;
 *        allgather       its own buffer copied to every other buffer;
 *      it marks itself writing (round P+1) first and looks at the round
 *      between chunks, stopping when P+1 ended (broken by a death or a
 *      timeout);
 *   4. it arrives at P+1; once P+1 completes every share is written.
 * A barrier, and a collective that withdrew from P, describe "no tensor" for
 * their round instead: a member that meets it answers EINVAL (a mix of
 * barriers and collectives, or of two kinds, in one round writes nothing).
 * A member that gets an error after step 2 returns only once every live
 * member stopped writing P+1 (group_round.c, invariant 4), so that no member
 * reads or writes the caller's tensor after it returned.  The descriptions
 * of P stay put until P+1 ends: a member's next collective writes
 * ar[(P+2) & 1] only after P+1, which, completed, needs every member to
 * have finished reading; broken, it may end before a slow member read them,
 * so a verdict of step 2 against a round that has ended is not trusted: the
 * member answers the round's outcome instead (and writes nothing: step 3
 * looks at the round before each chunk, with writing set).
 * Each buffer is read and written once per member's share: every member
 * touches 2 * size * n / size elements in an allreduce, the bandwidth bound
 * of the scheme; a reduce_scatter reads size * n / size and writes n / size,
 * an allgather reads n / size and writes (size - 1) * n / size.
 */
#define PDSHM_LAYER 6 /* groups/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "groups/groups.h"

#define SHARE_CHUNK 16384 /* elements between two looks at the round */

static const char *const kind_names[] = {"allreduce", "reduce_scatter", "allgather", "regroup",
                                         "allreduce_private", "allreduce_private (small)"};

static const char *kind_name(unsigned kind) {
  return kind < sizeof kind_names / sizeof *kind_names ? kind_names[kind] : "no tensor";
}

/* The element size of d's tensor, 0 when its kind cannot take its dtype:
 * an allgather copies any dtype, the others reduce. */
static size_t desc_elem(const struct pdshm_group_desc *d) {
  if (d->kind == PDSHM_GK_ALLGATHER) return pdshm_dtype_size((pdshm_dtype)d->dtype);
  if (d->kind == PDSHM_GK_ALLREDUCE || d->kind == PDSHM_GK_REDUCE_SCATTER ||
      d->kind == PDSHM_GK_ALLREDUCE_PRIVATE || d->kind == PDSHM_GK_ALLREDUCE_SMALL)
    return pdshm__reduce_elem((int)d->dtype);
  return 0;
}

/* Step 2; every member reaches the same verdict from the same words. */
int pdshm__ar_check(const pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t round) {
  const struct pdshm_group_desc *d0 = &g->rank[0].ar[round & 1];
  size_t es = desc_elem(d0);
  if (d0->kind == PDSHM_GK_NONE)
    return pdshm__fail(PDSHM_EINVAL, "rank 0 passed no tensor (a barrier, or bad arguments)");
  if (!es || (d0->kind != PDSHM_GK_ALLGATHER && d0->op > PDSHM_MIN))
    return pdshm__fail(PDSHM_EINVAL, "dtype %u cannot be taken by %s", d0->dtype,
                       kind_name(d0->kind));
  for (uint32_t r = 0; r < g->size; r++) {
    const struct pdshm_group_desc *d = &g->rank[r].ar[round & 1];
    if (d->kind != d0->kind || d->dtype != d0->dtype || d->count != d0->count ||
        d->op != d0->op)
      return pdshm__fail(PDSHM_EINVAL,
                         "rank %u passed %s of dtype %u, %llu elements, op %u; rank 0 %s of "
                         "dtype %u, %llu elements, op %u",
                         r, kind_name(d->kind), d->dtype, (unsigned long long)d->count, d->op,
                         kind_name(d0->kind), d0->dtype, (unsigned long long)d0->count, d0->op);
  }
  const uint64_t end = pdshm__seg_end(seg);
  for (uint32_t r = 0; r < g->size; r++) {
    const struct pdshm_group_desc *d = &g->rank[r].ar[round & 1];
    if (d->data < seg->hdr->arena_off || d->data > end || d->count > (end - d->data) / es)
      return pdshm__fail(PDSHM_EBADSEG, "rank %u's tensor lies outside the arena", r);
  }
  return 0;
}

/* Step 3: 0 when the share is written, 1 when the round ended first. */
static int ar_share(pdshm_seg *seg, struct pdshm_group_rec *g, uint32_t me, uint32_t round) {
  const struct pdshm_group_desc *d0 = &g->rank[0].ar[(round - 1) & 1];
  size_t es = desc_elem(d0), n = d0->count;
  size_t lo = pdshm__share_first(n, me, g->size), hi = pdshm__share_first(n, me + 1, g->size);
  bool reduce = d0->kind != PDSHM_GK_ALLGATHER, spread = d0->kind != PDSHM_GK_REDUCE_SCATTER;
  void *src[PDSHM_GROUP_MAX];
  for (size_t i = lo; i < hi; i += SHARE_CHUNK) {
    if (PDSHM_GS_ROUND(atomic_load_explicit(&g->state, memory_order_acquire)) != round)
      return 1;
    size_t k = hi - i < SHARE_CHUNK ? hi - i : SHARE_CHUNK;
    for (uint32_t r = 0; r < g->size; r++)
      src[r] = seg->base + g->rank[r].ar[(round - 1) & 1].data + i * es;
    if (reduce) {
      pdshm__reduce((int)d0->dtype, (int)d0->op, src[me], src, g->size, k);
      PDSHM_CRASHPOINT(spread ? "group.allreduce.chunk" : "group.reduce_scatter.chunk");
    }
    if (spread) {
      for (uint32_t r = 0; r < g->size; r++)
        if (r != me) memcpy(src[r], src[me], k * es);
      if (!reduce) PDSHM_CRASHPOINT("group.allgather.chunk");
    }
  }
  return 0;
}

int pdshm__ar_verdict(struct pdshm_group *gr, uint64_t deadline) {
  pdshm_seg *seg = gr->seg;
  struct pdshm_group_rec *g = pdshm__group_rec(seg, gr->rec);
  uint32_t round = gr->round;
  int rc = pdshm__ar_check(seg, g, round - 1);
  /* P+1 ended without us (broken): the others may have moved on and written
   * their next descriptions over the ones just read; its outcome is the
   * answer, not what they said */
  if (rc && PDSHM_GS_ROUND(atomic_load(&g->state)) != round) {
    int orc = pdshm__round_pass(gr, deadline, false);
    if (orc) { /* others may still write into our tensor: step 4's wait */
      pdshm__round_wait_writers(seg, g, round, (int)gr->rank);
      return orc;
    }
  }
  return rc;
}

int pdshm__ar_shares(struct pdshm_group *gr, uint64_t deadline) {
  pdshm_seg *seg = gr->seg;
  struct pdshm_group_rec *g = pdshm__group_rec(seg, gr->rec);
  uint32_t round = gr->round;
  atomic_store(&g->rank[gr->rank].writing, round);
  if (PDSHM_GS_ROUND(atomic_load(&g->state)) == round) ar_share(seg, g, gr->rank, round);
  atomic_store(&g->rank[gr->rank].writing, 0);
  /* When P+1 ended while we wrote, it was broken: passing it arrives nowhere
   * and answers its outcome at once. */
  int rc = pdshm__round_pass(gr, deadline, false);
  if (rc) pdshm__round_wait_writers(seg, g, round, (int)gr->rank);
  return rc;
}

/* Steps 2 to 4, once round P completed; the caller is in round P+1. */
static int ar_reduce(struct pdshm_group *gr, uint64_t deadline) {
  int rc = pdshm__ar_verdict(gr, deadline);
  return rc ? rc : pdshm__ar_shares(gr, deadline);
}

/* What is wrong with v and op, if anything (0 when v may be pinned). */
static int ar_args(pdshm_group *gr, pdshm_var *v, pdshm_reduce_op op, unsigned kind) {
  if (!v) return pdshm__fail(PDSHM_EINVAL, "NULL variable");
  if (pdshm__seg_of(v) != gr->seg)
    return pdshm__fail(PDSHM_EINVAL, "the variable is not in the group's attachment");
  if (kind != PDSHM_GK_ALLGATHER && (unsigned)op > PDSHM_MIN)
    return pdshm__fail(PDSHM_EINVAL, "unknown reduce op %d", (int)op);
  int rc = pdshm_tensor_dtype(v);
  return rc < 0 ? rc : 0;
}

int pdshm__ar_without_tensor(pdshm_group *gr, int why, int64_t timeout_ns) {
  pdshm__round_no_tensor(gr);
  int rc = pdshm__round_pass(gr, pdshm__round_deadline(timeout_ns), true);
  return rc ? rc : why;
}

/* The three collectives; op is 0 for an allgather. */
static int collective(pdshm_group *gr, pdshm_var *v, pdshm_reduce_op op, unsigned kind,
                      int64_t timeout_ns) {
  int rc = pdshm__round_usable(gr);
  if (rc) return rc;
  pdshm_tensor_view view;
  if ((rc = ar_args(gr, v, op, kind)) || (rc = pdshm__group_pin(gr, v, &view)))
    return pdshm__ar_without_tensor(gr, rc, timeout_ns);
  pdshm_seg *seg = gr->seg;
  struct pdshm_group_rec *g = pdshm__group_rec(seg, gr->rec);
  struct pdshm_group_desc d = {
      .data = (pdshm_off_t)((uint8_t *)view.data - seg->base), .op = (uint16_t)op,
      .kind = (uint16_t)kind, .dtype = (uint32_t)view.dtype};
  size_t es = desc_elem(&d);
  d.count = es ? view.nbytes / es : 0;
  if (!es) d.dtype = UINT32_MAX;
  uint32_t round = gr->round;
  g->rank[gr->rank].ar[round & 1] = d;
  uint64_t deadline = pdshm__round_deadline(timeout_ns);
  rc = pdshm__round_pass(gr, deadline, true);
  if (!rc) rc = ar_reduce(gr, deadline);
  else if (rc == PDSHM_ETIMEDOUT && gr->round == round) /* withdrawn */
    pdshm__round_no_tensor(gr);
  return rc;
}

PDSHM_API int pdshm_group_allreduce(pdshm_group *gr, pdshm_var *v, pdshm_reduce_op op,
                                    int64_t timeout_ns) {
  return collective(gr, v, op, PDSHM_GK_ALLREDUCE, timeout_ns);
}

PDSHM_API int pdshm_group_reduce_scatter(pdshm_group *gr, pdshm_var *v, pdshm_reduce_op op,
                                         int64_t timeout_ns) {
  return collective(gr, v, op, PDSHM_GK_REDUCE_SCATTER, timeout_ns);
}

PDSHM_API int pdshm_group_allgather(pdshm_group *gr, pdshm_var *v, int64_t timeout_ns) {
  return collective(gr, v, 0, PDSHM_GK_ALLGATHER, timeout_ns);
}

PDSHM_API int pdshm_group_share(const pdshm_group *gr, uint64_t count, uint64_t *first,
                                uint64_t *end) {
  if (!gr || !first || !end) return PDSHM_EINVAL;
  *first = pdshm__share_first(count, gr->rank, gr->size);
  *end = pdshm__share_first(count, gr->rank + 1, gr->size);
  return 0;
}
