/* crashsnap.c - see crashsnap.h. */
#include "crashsnap.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"

struct sb {
  char *buf;
  size_t len;
  FILE *f;
};

static const char *snap_name(pdshm_seg *seg, pdshm_off_t off) {
  const struct pdshm_name *nm = pdshm__name_at(seg, off);
  return nm ? nm->s : "-";
}

/* A checksum of n bytes, a word at a time. */
static uint64_t snap_sum(const uint8_t *p, uint64_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ n, w;
  for (; n >= 8; p += 8, n -= 8) {
    memcpy(&w, p, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; n; p++, n--) h = (h ^ *p) * 0x100000001b3ull;
  return h;
}

static void snap_ops(FILE *f, pdshm_seg *seg, pdshm_off_t off) {
  if (!off) return;
  const struct pdshm_oplist *l = PDSHM_AT(seg->base, off, struct pdshm_oplist);
  const char *p = l->names;
  for (uint64_t i = 0; i < l->count; i++, p += strlen(p) + 1) fprintf(f, "%s,", p);
}

static void snap_var(FILE *f, pdshm_seg *seg, pdshm_off_t v) {
  const struct pdshm_var_rec *r = pdshm__var_at(seg, v);
  fprintf(f, "  var %s label=%s r=", snap_name(seg, r->name), snap_name(seg, r->label));
  snap_ops(f, seg, r->readers);
  fprintf(f, " w=");
  snap_ops(f, seg, r->writers);
  int owner;
  uint64_t readers = pdshm__varlock_readers(seg, r, &owner);
  fprintf(f, " owner=%d readers=%llu vt=%llu", owner, (unsigned long long)readers,
          (unsigned long long)r->vtype);
  if (r->vtype == PDSHM_V_TENSOR) {
    fprintf(f, " t=%llx [", (unsigned long long)r->dtype_ndim);
    for (unsigned i = 0; i < (r->dtype_ndim >> 32) && i < PDSHM_NDIM_MAX_; i++)
      fprintf(f, "%lld,", (long long)r->dims[i]);
    fprintf(f, "] %llu bytes sum=%llx", (unsigned long long)r->nbytes,
            (unsigned long long)snap_sum(seg->base + r->data, r->nbytes));
  }
  fputc('\n', f);
}

static int snap_cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Variables sorted by name: an index's order depends on its history. */
static void snap_vars(FILE *f, pdshm_seg *seg, const struct pdshm_scope_rec *x) {
  if (!x->table) return;
  const struct pdshm_table *t = PDSHM_AT(seg->base, x->table, struct pdshm_table);
  const char **names = calloc(t->cap + 1, sizeof *names);
  pdshm_off_t *offs = calloc(t->cap + 1, sizeof *offs);
  size_t n = 0;
  for (uint64_t i = 0; i < t->cap; i++)
    if (t->ent[i].var > PDSHM_TOMBSTONE) {
      offs[n] = t->ent[i].var;
      names[n++] = snap_name(seg, pdshm__var_at(seg, t->ent[i].var)->name);
    }
  qsort(names, n, sizeof *names, snap_cmp_names);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++)
      if (!strcmp(snap_name(seg, pdshm__var_at(seg, offs[j])->name), names[i])) {
        snap_var(f, seg, offs[j]);
        break;
      }
  free(names);
  free(offs);
}

static void snap_scope(FILE *f, pdshm_seg *seg, pdshm_off_t x, unsigned depth) {
  const struct pdshm_scope_rec *r = pdshm__scope_at(seg, x);
  fprintf(f, "%*sscope %s flags=%u linked=%llu refs=%llu nvars=%llu dying=%llu\n", (int)depth,
          "", snap_name(seg, r->name), r->flags, (unsigned long long)r->linked,
          (unsigned long long)r->refs, (unsigned long long)r->nvars,
          (unsigned long long)r->dying);
  snap_vars(f, seg, r);
  for (pdshm_off_t k = r->first_kid; k && depth < 64; k = pdshm__scope_at(seg, k)->next_sib)
    snap_scope(f, seg, k, depth + 1);
}

char *snap_model(pdshm_seg *seg, pdshm_off_t from, bool used) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (used) {
    pdshm_stats st;
    pdshm_seg_stats(seg, &st);
    fprintf(f, "used=%llu scopes=%llu vars=%llu tensor_bytes=%llu alive=%u dead=%u\n",
            (unsigned long long)st.used, (unsigned long long)st.scopes,
            (unsigned long long)st.vars, (unsigned long long)st.tensor_bytes, st.procs_alive,
            st.procs_dead);
  }
  snap_scope(f, seg, from ? from : seg->hdr->root, 0);
  fclose(f);
  return buf;
}

static int snap_fail(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int snap_fail(char *why, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, cap, fmt, ap);
  va_end(ap);
  return 1;
}

/* Every lock of the table free: the next taker gets it at once (a dead
 * holder's is repaired on the way). */
static int snap_locks_free(pdshm_seg *seg, char *why, size_t cap) {
  for (uint32_t i = 0; i < seg->hdr->max_locks; i++) {
    int rc = pdshm__trylock(seg, i);
    if (rc) return snap_fail(why, cap, "lock %u: %s", i, pdshm_strerror(rc));
    pdshm__unlock(seg, i);
    uint64_t a = atomic_load(&pdshm__lockent(seg, i)->alloc);
    if (a != PDSHM_LOCK_AVAILABLE && a != PDSHM_LOCK_PUBLISHED)
      return snap_fail(why, cap, "lock entry %u still claimed by slot %llu", i,
                       (unsigned long long)a - 1);
  }
  return 0;
}

static int snap_holds_free(pdshm_seg *seg, char *why, size_t cap) {
  const struct pdshm_hdr *h = seg->hdr;
  for (pdshm_off_t at = h->arena_off; at < h->arena_end;) {
    const struct pdshm_blk *b = PDSHM_AT(seg->base, at, struct pdshm_blk);
    uint64_t w = atomic_load(&b->word), size = pdshm__blk_size(w);
    if (pdshm__blk_state(w) == PDSHM_BLK_USED && b->type == PDSHM_T_VAR) {
      const struct pdshm_var_rec *r = pdshm__var_at(seg, at + PDSHM_BLK_HDR);
      int owner;
      uint64_t readers = pdshm__varlock_readers(seg, r, &owner);
      if (readers || owner >= 0)
        return snap_fail(why, cap, "variable %s counts %llu shared holders, exclusive slot %d",
                         snap_name(seg, r->name), (unsigned long long)readers, owner);
    }
    if (size < PDSHM_BLK_MIN) return snap_fail(why, cap, "chain broken at %#llx",
                                               (unsigned long long)at);
    at += size;
  }
  return 0;
}

int snap_clean(pdshm_seg *seg, char *why, size_t cap) {
  char *rep = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&rep, &len);
  int rc = pdshm_check(seg, f);
  fclose(f);
  if (rc || len) {
    snap_fail(why, cap, "pdshm_check %d: %.*s", rc, (int)(len < 600 ? len : 600), rep);
    free(rep);
    return 1;
  }
  free(rep);
  for (uint32_t i = 0; i < seg->hdr->max_procs; i++)
    if (i != seg->slot && atomic_load(&pdshm__slot(seg, i)->state) != PDSHM_SLOT_FREE)
      return snap_fail(why, cap, "slot %u is not free (state %u)", i,
                       atomic_load(&pdshm__slot(seg, i)->state));
  if (snap_locks_free(seg, why, cap)) return 1;
  return snap_holds_free(seg, why, cap);
}

int snap_reap_all(pdshm_seg *seg) {
  int rc = 0;
  for (int tries = 0; tries < 5000; tries++) {
    rc = pdshm_reap(seg, NULL);
    pdshm_stats st;
    if (!rc) rc = pdshm_seg_stats(seg, &st);
    if (rc) return rc;
    if (!st.procs_dead && st.procs_alive == 1) return 0;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return PDSHM_EBUSY;
}
