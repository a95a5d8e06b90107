/*
 * peer_hash.c - the limit for a lookup: a process-local open-addressing hash
 * table in C per scope (FNV-1a, linear probing, load <= 1/2, deletion by
 * backward shift), with a parent chain.  No lock, no sharing: each process
 * builds its own copy.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

struct hvar {
  char *name;
  uint64_t value;
};

struct hscope {
  struct hscope *parent;
  struct hvar **slots; /* NULL: empty */
  uint64_t *hashes;
  size_t cap, used; /* cap: a power of two */
};

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
  return h;
}

static size_t probe(const struct hscope *s, const char *name, uint64_t h) {
  size_t i = h & (s->cap - 1);
  while (s->slots[i] && (s->hashes[i] != h || strcmp(s->slots[i]->name, name)))
    i = (i + 1) & (s->cap - 1);
  return i;
}

static void grow(struct hscope *s) {
  struct hvar **old = s->slots;
  uint64_t *oldh = s->hashes;
  size_t oldcap = s->cap;
  s->cap = oldcap ? oldcap * 2 : 16;
  s->slots = calloc(s->cap, sizeof *s->slots);
  s->hashes = calloc(s->cap, sizeof *s->hashes);
  if (!s->slots || !s->hashes) bench_die("out of memory");
  for (size_t i = 0; i < oldcap; i++) {
    if (!old[i]) continue;
    size_t j = probe(s, old[i]->name, oldh[i]);
    s->slots[j] = old[i];
    s->hashes[j] = oldh[i];
  }
  free(old);
  free(oldh);
}

static void insert(struct hscope *s, struct hvar *v, uint64_t h) {
  if (2 * (s->used + 1) > s->cap) grow(s);
  size_t i = probe(s, v->name, h);
  s->slots[i] = v;
  s->hashes[i] = h;
  s->used++;
}

/* Removes slot i, shifting back the entries of its probe run. */
static void remove_at(struct hscope *s, size_t i) {
  size_t mask = s->cap - 1, j = i;
  s->slots[i] = NULL;
  for (;;) {
    j = (j + 1) & mask;
    if (!s->slots[j]) break;
    size_t home = s->hashes[j] & mask;
    /* the entry at j may move to i when its home is not in (i, j] */
    if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
      s->slots[i] = s->slots[j];
      s->hashes[i] = s->hashes[j];
      s->slots[j] = NULL;
      i = j;
    }
  }
  s->used--;
}

static struct hvar *take(struct hscope *s, const char *name) {
  if (!s->cap) return NULL;
  size_t i = probe(s, name, fnv1a(name));
  struct hvar *v = s->slots[i];
  if (v) remove_at(s, i);
  return v;
}

static void *h_find(void *sc, const char *name) {
  uint64_t h = fnv1a(name);
  for (struct hscope *s = sc; s; s = s->parent) {
    if (!s->cap) continue;
    struct hvar *v = s->slots[probe(s, name, h)];
    if (v) return v;
  }
  return NULL;
}

static int h_get(void *sc, const char *name) {
  struct hscope *s = sc;
  uint64_t h = fnv1a(name);
  if (s->cap && s->slots[probe(s, name, h)]) return 0;
  struct hvar *v = malloc(sizeof *v);
  if (!v || !(v->name = strdup(name))) bench_die("out of memory");
  v->value = 0;
  insert(s, v, h);
  return 0;
}

static int h_erase(void *sc, const char *name) {
  struct hvar *v = take(sc, name);
  if (!v) return -1;
  free(v->name);
  free(v);
  return 0;
}

static int h_rename(void *sc, const char *from, const char *to) {
  struct hscope *s = sc;
  if (s->cap && s->slots[probe(s, to, fnv1a(to))]) return -1;
  struct hvar *v = take(s, from);
  if (!v) return -1;
  char *n = strdup(to);
  if (!n) bench_die("out of memory");
  free(v->name);
  v->name = n;
  insert(s, v, fnv1a(to));
  return 0;
}

static void *h_scope_new(struct bstore *st, void *parent, const char *name) {
  struct hscope *s = calloc(1, sizeof *s);
  if (!s) bench_die("out of memory");
  s->parent = parent;
  return s;
}

static void *h_root(struct bstore *st) { return h_scope_new(st, NULL, NULL); }

static void h_scope_free(struct bstore *st, void *sc) {
  struct hscope *s = sc;
  for (size_t i = 0; i < s->cap; i++)
    if (s->slots[i]) free(s->slots[i]->name), free(s->slots[i]);
  free(s->slots);
  free(s->hashes);
  free(s);
}

/* A private store has no state of its own beyond its scopes. */
static struct bstore *h_create(const char *tag) { return (struct bstore *)(uintptr_t)1; }
static void h_close(struct bstore *st, bool destroy) {}

const struct store_ops store_hash = {
    .name = "hash", .shared = false, .chain = true,
    .create = h_create, .close = h_close, .root = h_root,
    .scope_new = h_scope_new, .scope_free = h_scope_free,
    .find = h_find, .get = h_get, .erase = h_erase, .rename = h_rename};
