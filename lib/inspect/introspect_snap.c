/*
 * introspect_snap.c - a snapshot of the arena's blocks, which every model
 * view reads through: an offset is followed only when the snapshot has a
 * live block of the expected type and size there (inspect.h, inv. 1).
 */
#define PDSHM_LAYER 8 /* inspect/ (lib/LAYERS) */
#include "config.h"

#include <string.h>

#include "inspect/inspect.h"

static void snap_reset(void *arg) { ((struct pdshm_snap *)arg)->n = 0; }

static int snap_visit(void *arg, pdshm_off_t at, const struct pdshm_blk *b, uint64_t word) {
  struct pdshm_snap *s = arg;
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 1024;
    struct pdshm_snap_blk *nb = realloc(s->b, cap * sizeof *nb);
    if (!nb) return pdshm__fail(PDSHM_ENOMEM, "out of private memory");
    s->b = nb;
    s->cap = cap;
  }
  s->b[s->n++] = (struct pdshm_snap_blk){.off = at + PDSHM_BLK_HDR, .size = pdshm__blk_size(word),
                                         .type = b->type, .owner = b->owner,
                                         .state = (uint8_t)pdshm__blk_state(word)};
  return 0;
}

int pdshm__snap_take(const pdshm_seg *seg, struct pdshm_snap *s) {
  *s = (struct pdshm_snap){.seg = seg};
  int rc = pdshm__walk_blocks(seg, &(struct pdshm_walker){snap_reset, snap_visit, s});
  if (rc) pdshm__snap_free(s);
  return rc;
}

void pdshm__snap_free(struct pdshm_snap *s) {
  pdshm__xfree(s->b);
  s->b = NULL;
  s->n = s->cap = 0;
}

const struct pdshm_snap_blk *pdshm__snap_find(const struct pdshm_snap *s, pdshm_off_t off) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->b[mid].off == off) return &s->b[mid];
    if (s->b[mid].off < off) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

const void *pdshm__snap_want(const struct pdshm_snap *s, pdshm_off_t off, unsigned type,
                             size_t need) {
  const struct pdshm_snap_blk *b = off ? pdshm__snap_find(s, off) : NULL;
  if (!b || b->state != PDSHM_BLK_USED || b->type != type || b->size - PDSHM_BLK_HDR < need)
    return NULL;
  return pdshm__payload_at(s->seg, off, type, need); /* and still is one */
}

uint64_t pdshm__snap_bytes(const struct pdshm_snap *s, pdshm_off_t off) {
  const struct pdshm_snap_blk *b = off ? pdshm__snap_find(s, off) : NULL;
  return b ? b->size : 0;
}

int pdshm__snap_name(const struct pdshm_snap *s, pdshm_off_t off, char *buf) {
  const struct pdshm_snap_blk *b = pdshm__snap_find(s, off);
  const struct pdshm_name *nm = pdshm__snap_want(s, off, PDSHM_T_NAME, sizeof *nm)
                                    ? pdshm__name_at(s->seg, off) : NULL;
  uint64_t len = nm ? __atomic_load_n(&nm->len, __ATOMIC_RELAXED) : 0;
  if (!nm || len > PDSHM_NAME_MAX || sizeof *nm + len + 1 > b->size - PDSHM_BLK_HDR)
    return pdshm__fail(PDSHM_EBADSEG, "name at %#llx is malformed", (unsigned long long)off);
  memcpy(buf, nm->s, len);
  buf[len] = '\0';
  return 0;
}

size_t pdshm__snap_count(const struct pdshm_snap *s, unsigned type) {
  size_t n = 0;
  for (size_t i = 0; i < s->n; i++)
    n += pdshm__snap_published(&s->b[i], type);
  return n;
}

const struct pdshm_scope_rec *pdshm__snap_scope(const struct pdshm_snap *s, uint64_t id,
                                                pdshm_off_t *off) {
  if (id == 0) {
    *off = s->seg->hdr->root;
    const struct pdshm_scope_rec *r =
        pdshm__snap_want(s, *off, PDSHM_T_SCOPE, sizeof(struct pdshm_scope_rec));
    return r && r->magic == PDSHM_SCOPE_MAGIC ? r : NULL;
  }
  for (size_t i = 0; i < s->n; i++) {
    const struct pdshm_snap_blk *b = &s->b[i];
    if (!pdshm__snap_published(b, PDSHM_T_SCOPE)) continue;
    const struct pdshm_scope_rec *r =
        pdshm__snap_want(s, b->off, PDSHM_T_SCOPE, sizeof(struct pdshm_scope_rec));
    if (r && r->magic == PDSHM_SCOPE_MAGIC && r->id == id) {
      *off = b->off;
      return r;
    }
  }
  return NULL;
}
