/*
 * varlock_check.c - pdshm_check's look at the variable locks: every live
 * variable's word agrees with the hold records of the slots (varlock.c,
 * invariants 1-3, and varlock_reap.c).
 *
 * Variable locks are taken and released with no scope or heap lock, so even
 * a stopped world moves them.  A word and the records are therefore compared
 * in several passes, each with a fresh census of the records, and a variable
 * is reported only when every pass disagrees and its word stayed the same
 * throughout: a word that moved is being used, and its holders' records
 * move with it.
 *
 * What agrees:
 *  1. The word's TAG is that of the variable's generation.
 *  2. An exclusive owner (not FROZEN) is a slot with an EXCL record of this
 *     variable, and no shared holder is counted beside it.
 *  3. The shared holders counted are at least the HELD records of live
 *     slots and at most every HELD, TAKING or RELEASING record (a take's
 *     or a release's CAS may or may not have happened; a dead slot's share
 *     stays counted until its reaper recounts).
 * A FROZEN word is a recount under way: only its tag is checked.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/varlock.h"

#define VC_PASSES 5

/* One hold record of the census. */
struct vc_rec {
  pdshm_off_t var;
  uint64_t gen;
  uint32_t slot, state;
};

struct vc_census {
  struct vc_rec *r;
  size_t n, cap;
  int8_t *alive; /* per slot: 1 live, 0 dead or being reaped, -1 free      */
};

static int vc_cmp(const void *a, const void *b) {
  const struct vc_rec *x = a, *y = b;
  if (x->var != y->var) return x->var < y->var ? -1 : 1;
  return x->gen < y->gen ? -1 : x->gen > y->gen;
}

static bool vc_push(struct vc_census *c, const struct pdshm_vl_hold *e, uint32_t slot,
                    uint32_t st) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    struct vc_rec *r = realloc(c->r, cap * sizeof *r);
    if (!r) return false;
    c->r = r;
    c->cap = cap;
  }
  c->r[c->n++] =
      (struct vc_rec){.var = vl_rec_var(e), .gen = vl_rec_gen(e), .slot = slot, .state = st};
  return true;
}

/* Every record of a non-free slot that names a variable, sorted by it. */
static int vc_take(pdshm_seg *seg, struct vc_census *c) {
  c->n = 0;
  memset(c->alive, -1, seg->hdr->max_procs); /* a FREE slot's stays so: the walk passes it by */
  VL_FOR_HOLDS(it, seg, VL_NO_SLOT) {
    if (it.i == 0) /* a slot's first record: asked before its records are read */
      c->alive[it.s] = it.sst == PDSHM_SLOT_LIVE && pdshm__slot_alive(seg, it.s) > 0;
    uint32_t st = atomic_load_explicit(&it.e->state, memory_order_acquire);
    if (st >= PDSHM_VL_TAKING && !vc_push(c, it.e, it.s, st))
      return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
  }
  if (c->n) qsort(c->r, c->n, sizeof *c->r, vc_cmp);
  return 0;
}

/* What is wrong with r's word w against the census, into why; NULL when
 * nothing is. */
static const char *vc_disagrees(pdshm_seg *seg, const struct vc_census *c,
                                const struct pdshm_var_rec *r, uint64_t w, char *why, size_t cap) {
  uint64_t tag = pdshm__varlock_tag(r->gen);
  if (!vl_ours(w, tag)) {
    snprintf(why, cap, "lock word tagged %#llx, its generation's tag is %#llx",
             (unsigned long long)(w >> 32), (unsigned long long)(tag >> 32));
    return why;
  }
  if (w & VL_FROZEN) return NULL;
  struct vc_rec key = {.var = r->self, .gen = r->gen};
  const struct vc_rec *at = c->n ? bsearch(&key, c->r, c->n, sizeof key, vc_cmp) : NULL;
  while (at && at > c->r && !vc_cmp(at - 1, &key)) at--;
  uint64_t lo = 0, hi = 0, owner = w & VL_OWNER, readers = (w & VL_READERS) / VL_READER;
  bool owner_recorded = false;
  for (; at && at < c->r + c->n && !vc_cmp(at, &key); at++) {
    if (vl_uncounted(at->state)) continue; /* varlock_bias.c */
    if (at->state == PDSHM_VL_EXCL) owner_recorded |= at->slot + 1u == owner;
    else hi++;
    lo += at->state == PDSHM_VL_HELD && c->alive[at->slot] > 0;
  }
  if (owner && (readers || !owner_recorded || owner > seg->hdr->max_procs))
    snprintf(why, cap, "held exclusively by slot %llu%s", (unsigned long long)owner - 1,
             readers ? " and shared" : ", which has no record of it");
  else if (readers < lo || readers > hi)
    snprintf(why, cap, "%llu shared holders counted, the slots' records say %llu to %llu",
             (unsigned long long)readers, (unsigned long long)lo, (unsigned long long)hi);
  else
    return NULL;
  return why;
}

static void vc_say(FILE *report, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vc_say(FILE *report, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pdshm__check_vsay(report, "", fmt, ap);
  va_end(ap);
}

int pdshm__varlock_check(pdshm_seg *seg, const pdshm_off_t *vars, size_t n, FILE *report) {
  struct vc_census c = {.alive = malloc(seg->hdr->max_procs ? seg->hdr->max_procs : 1)};
  uint64_t *seen = calloc(n ? n : 1, sizeof *seen); /* the word, while suspect; 0: cleared */
  int rc = c.alive && seen ? 0 : pdshm__fail(PDSHM_ENOMEM, "out of private memory"), problems = 0;
  char why[160];
  for (unsigned pass = 0; pass < VC_PASSES && !rc; pass++) {
    if (pass) sched_yield();
    if ((rc = vc_take(seg, &c))) break;
    for (size_t i = 0; i < n; i++) {
      const struct pdshm_var_rec *r = pdshm__var_at(seg, vars[i]);
      uint64_t w = atomic_load_explicit(&((struct pdshm_var_rec *)r)->lk, memory_order_acquire);
      bool suspect = (pass == 0 || seen[i] == w) && vc_disagrees(seg, &c, r, w, why, sizeof why);
      seen[i] = suspect ? w : 0;
      if (suspect && pass == VC_PASSES - 1) {
        vc_say(report, "variable %#llx: %s", (unsigned long long)vars[i], why);
        problems++;
      }
    }
  }
  free(c.r);
  free(c.alive);
  free(seen);
  return rc ? rc : problems;
}
