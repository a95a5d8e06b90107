/*
 * names.c - names: validation, hashing, NAME blocks, pdshm_unique_name.
 *
 * A NAME block holds struct pdshm_name: the length, then the bytes and a NUL.
 * Names are never truncated: a name too long for its limit is an error.
 */
#define PDSHM_LAYER 6 /* model/ (lib/LAYERS) */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "model/model.h"

int pdshm__name_check(const char *name, bool scope, size_t *len) {
  if (!name) return pdshm__fail(PDSHM_EINVAL, "NULL name");
  size_t n = strnlen(name, PDSHM_NAME_MAX + 1);
  if (n == 0) return pdshm__fail(PDSHM_EINVAL, "empty name");
  if (n > PDSHM_NAME_MAX)
    return pdshm__fail(PDSHM_ENAMETOOLONG, "name longer than %d bytes", PDSHM_NAME_MAX);
  if (scope && memchr(name, '/', n))
    return pdshm__fail(PDSHM_EINVAL, "scope name \"%s\" contains '/'", name);
  *len = n;
  return 0;
}

/* A 64-bit multiply-xorshift hash over 8-byte words; good spread for short
 * identifiers, one multiply per word. */
uint64_t pdshm__hash(const char *s, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
  for (; n >= 8; s += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  h = (h ^ pdshm__tail_word(s, n)) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 32);
}

int pdshm__name_new(pdshm_seg *seg, struct pdshm_lane_ctx *ln, const char *s, size_t len,
                    pdshm_off_t *out) {
  int rc = pdshm__j_alloc(seg, ln, sizeof(struct pdshm_name) + len + 1, PDSHM_T_NAME, out);
  if (rc) return rc;
  struct pdshm_name *nm = PDSHM_AT(seg->base, *out, struct pdshm_name);
  nm->len = len;
  memcpy(nm->s, s, len);
  nm->s[len] = '\0';
  return 0;
}

/* Bounds-checked: NULL unless off names a live NAME block whose payload
 * holds the whole name. */
PDSHM_SEQLOCK_READ const struct pdshm_name *pdshm__name_at(const pdshm_seg *seg, pdshm_off_t off) {
  if (!pdshm__block_live(seg, off, PDSHM_T_NAME, sizeof(struct pdshm_name) + 1)) return NULL;
  const struct pdshm_name *nm = PDSHM_AT(seg->base, off, const struct pdshm_name);
  uint64_t len = __atomic_load_n(&nm->len, __ATOMIC_RELAXED);
  if (len > PDSHM_NAME_MAX || !pdshm__block_live(seg, off, PDSHM_T_NAME, sizeof *nm + len + 1))
    return NULL;
  return nm;
}

PDSHM_API int pdshm_unique_name(pdshm_seg *seg, const char *prefix, char *buf, size_t cap) {
  pdshm__fail_clear();
  int rc = pdshm__seg_writable(seg);
  if (rc) return rc;
  if (!prefix || !buf) return pdshm__fail(PDSHM_EINVAL, "NULL prefix or buffer");
  if (strnlen(prefix, PDSHM_NAME_MAX + 1) + 21 > PDSHM_NAME_MAX)
    return pdshm__fail(PDSHM_ENAMETOOLONG, "prefix leaves no room for \"-N\" in a name");
  uint64_t n = atomic_fetch_add_explicit(&seg->hdr->name_counter, 1, memory_order_relaxed);
  PDSHM_CRASHPOINT("names.unique.counted");
  int w = snprintf(buf, cap, "%s-%llu", prefix, (unsigned long long)n);
  if (w < 0 || (size_t)w >= cap) {
    if (cap) buf[0] = '\0';
    return pdshm__fail(PDSHM_ERANGE, "\"%s-%llu\" needs %d bytes, the buffer has %zu", prefix,
                       (unsigned long long)n, w + 1, cap);
  }
  return 0;
}
