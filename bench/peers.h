/*
 * peers.h - the subjects pdshm-bench measures, pdshm and its peers, behind
 * three small C interfaces so that one scenario loop drives every one of them.
 *
 *  store   named variables in scopes: find, get-or-create, erase, rename
 *          (pdshm, a C hash table, a Paddle-style C++ scope, Boost.Interprocess
 *          named objects, LMDB);
 *  allocator  a block of n bytes and its free (pdshm tensors, jemalloc, Boost);
 *  locker  one hot lock, exclusive or shared (pdshm variable locks, a plain
 *          robust process-shared mutex, a process-shared reader-writer lock
 *          that is not robust).
 *
 * A store is shared (every process opens the same one by its tag: pdshm,
 * Boost, LMDB) or private (each process builds its own copy: hash, Paddle).
 * Stores without parent chains (Boost, LMDB) give each scope a key prefix.
 */
#ifndef PDSHM_BENCH_PEERS_H
#define PDSHM_BENCH_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct bstore; /* one process's handle on one subject's store */

struct store_ops {
  const char *name;
  bool shared; /* one store seen by every process (opened by tag)            */
  bool chain;  /* scopes have parents and lookups walk up the chain          */
  /* Makes an empty store called tag (the caller's process); NULL on failure,
   * with a message on stderr. */
  struct bstore *(*create)(const char *tag);
  /* Opens the store another process made (shared stores only). */
  struct bstore *(*attach)(const char *tag);
  /* Closes this handle; destroy also removes the store's name and files. */
  void (*close)(struct bstore *st, bool destroy);
  /* The root scope (a handle to free with scope_free); stores without
   * chains: the unprefixed namespace. */
  void *(*root)(struct bstore *st);
  /* A new scope under parent (NULL: the root).  name: a named scope other
   * processes open with scope_open; NULL: an anonymous (local) scope. */
  void *(*scope_new)(struct bstore *st, void *parent, const char *name);
  void *(*scope_open)(struct bstore *st, const char *name);
  void (*scope_free)(struct bstore *st, void *sc);
  /* Non-NULL when found (up the chain for chained stores). */
  void *(*find)(void *sc, const char *name);
  /* Get-or-create / erase / rename a variable of the scope; 0 on success. */
  int (*get)(void *sc, const char *name);
  int (*erase)(void *sc, const char *name);
  int (*rename)(void *sc, const char *from, const char *to); /* NULL: none */
};

struct alloc_ops {
  const char *name;
  void *(*open)(const char *tag); /* NULL on failure */
  void *(*alloc)(void *ctx, size_t n);
  void (*free)(void *ctx, void *p);
  void (*close)(void *ctx);
};

struct lock_ops {
  const char *name;
  /* create in the parent (made = NULL) or open in a process (made = what
   * create returned): a context whose lock protects one uint64_t counter. */
  void *(*open)(const char *tag, void *made);
  void (*lock)(void *ctx, bool exclusive);
  void (*unlock)(void *ctx);
  unsigned long long *(*counter)(void *ctx);
  void (*close)(void *ctx, bool destroy);
};

extern const struct store_ops store_pdshm, store_hash, store_paddle, store_boost, store_lmdb;
extern const struct alloc_ops alloc_pdshm, alloc_jemalloc, alloc_boost;
extern const struct lock_ops lock_pdshm, lock_mutex, lock_rwlock;

/* The Paddle-style scope's own calls, for the step-cycle scenarios. */
void *pp_scope_new(void *parent);
void pp_scope_delete(void *s);
void *pp_var(void *s, const char *name); /* get or create */
void *pp_resize(void *var, size_t bytes);

/* Says on out where malloc resolves; false unless it is jemalloc's. */
bool peer_malloc_is_jemalloc(FILE *out);

/* "prefix" + "name" into buf (the key of a name in a prefixed scope). */
const char *peer_key(char *buf, size_t cap, const char *prefix, const char *name);
/* A name for an anonymous scope, unique across the processes of the run. */
const char *peer_anon(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
