/*
 * peer_lmdb.c - LMDB as a store: a lookup is mdb_get in a read transaction
 * (reset and renewed for every lookup, so that each one sees the latest
 * commit, as a pdshm lookup does); get-or-create, erase and rename are each
 * one write transaction committed without sync (MDB_NOSYNC).  The
 * environment lives in /dev/shm (tmpfs, like the others' memory); every
 * process opens it itself (LMDB forbids using an environment across fork).
 * Keys form one flat namespace: a scope is a key prefix, with no parent chain.
 */
#include "config.h"

#include <lmdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

#define LMDB_MAP_SIZE (1ull << 30)

struct bstore {
  MDB_env *env;
  MDB_dbi dbi;
  MDB_txn *rtxn; /* the read transaction, reset between lookups */
  char dir[128];
};

struct lscope {
  struct bstore *st;
  char prefix[96]; /* "" at the root, "name/" below */
};

static bool lmdb_ok(int rc, const char *what) {
  if (rc) fprintf(stderr, "pdshm-bench: lmdb %s: %s\n", what, mdb_strerror(rc));
  return rc == 0;
}

static struct bstore *env_open(const char *tag, bool create) {
  struct bstore *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  snprintf(st->dir, sizeof st->dir, "/dev/shm/%s", tag);
  if (create && mkdir(st->dir, 0700)) {
    perror(st->dir);
    free(st);
    return NULL;
  }
  MDB_txn *txn = NULL;
  bool ok = lmdb_ok(mdb_env_create(&st->env), "env_create") &&
            lmdb_ok(mdb_env_set_mapsize(st->env, LMDB_MAP_SIZE), "set_mapsize") &&
            lmdb_ok(mdb_env_set_maxreaders(st->env, 64), "set_maxreaders") &&
            lmdb_ok(mdb_env_open(st->env, st->dir, MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOTLS, 0600),
                    "env_open") &&
            lmdb_ok(mdb_txn_begin(st->env, NULL, 0, &txn), "txn_begin") &&
            lmdb_ok(mdb_dbi_open(txn, NULL, 0, &st->dbi), "dbi_open") &&
            lmdb_ok(mdb_txn_commit(txn), "commit") &&
            lmdb_ok(mdb_txn_begin(st->env, NULL, MDB_RDONLY, &st->rtxn), "read txn");
  if (ok) {
    mdb_txn_reset(st->rtxn);
    return st;
  }
  if (st->env) mdb_env_close(st->env);
  free(st);
  return NULL;
}

static struct bstore *l_create(const char *tag) { return env_open(tag, true); }
static struct bstore *l_attach(const char *tag) { return env_open(tag, false); }

static void l_close(struct bstore *st, bool destroy) {
  mdb_txn_abort(st->rtxn);
  mdb_env_close(st->env);
  if (destroy) {
    char path[160];
    snprintf(path, sizeof path, "%s/data.mdb", st->dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/lock.mdb", st->dir);
    unlink(path);
    rmdir(st->dir);
  }
  free(st);
}

static void *scope_with(struct bstore *st, const char *prefix, const char *name) {
  struct lscope *s = calloc(1, sizeof *s);
  if (!s) bench_die("out of memory");
  s->st = st;
  if (name && snprintf(s->prefix, sizeof s->prefix, "%s%s/", prefix, name) >= (int)sizeof s->prefix)
    bench_die("lmdb: scope name %s too long", name);
  return s;
}

static void *l_root(struct bstore *st) { return scope_with(st, "", NULL); }

static void *l_scope_new(struct bstore *st, void *parent, const char *name) {
  char anon[64];
  return scope_with(st, parent ? ((struct lscope *)parent)->prefix : "",
                    name ? name : peer_anon(anon, sizeof anon));
}

static void *l_scope_open(struct bstore *st, const char *name) { return scope_with(st, "", name); }
static void l_scope_free(struct bstore *st, void *sc) { free(sc); }

static MDB_val key_of(const struct lscope *s, const char *name, char *buf, size_t cap) {
  const char *k = s->prefix[0] ? peer_key(buf, cap, s->prefix, name) : name;
  return (MDB_val){.mv_size = strlen(k), .mv_data = (void *)k};
}

static void *l_find(void *sc, const char *name) {
  struct lscope *s = sc;
  char buf[512];
  MDB_val k = key_of(s, name, buf, sizeof buf), v;
  if (mdb_txn_renew(s->st->rtxn)) bench_die("lmdb: mdb_txn_renew failed");
  int rc = mdb_get(s->st->rtxn, s->st->dbi, &k, &v);
  mdb_txn_reset(s->st->rtxn);
  return rc ? NULL : (void *)s;
}

/* One write transaction around op(txn, key, arg), committed without sync. */
static int write_txn(struct lscope *s, const char *name, const char *name2,
                     int (*op)(struct lscope *, MDB_txn *, MDB_val *, MDB_val *)) {
  char buf[512], buf2[512];
  MDB_val k = key_of(s, name, buf, sizeof buf), k2 = {0};
  if (name2) k2 = key_of(s, name2, buf2, sizeof buf2);
  MDB_txn *txn;
  int rc = mdb_txn_begin(s->st->env, NULL, 0, &txn);
  if (rc) return rc;
  if ((rc = op(s, txn, &k, &k2))) {
    mdb_txn_abort(txn);
    return rc;
  }
  return mdb_txn_commit(txn);
}

static int op_get(struct lscope *s, MDB_txn *txn, MDB_val *k, MDB_val *unused) {
  uint64_t zero = 0;
  MDB_val v = {.mv_size = sizeof zero, .mv_data = &zero};
  int rc = mdb_put(txn, s->st->dbi, k, &v, MDB_NOOVERWRITE);
  return rc == MDB_KEYEXIST ? 0 : rc;
}

static int op_erase(struct lscope *s, MDB_txn *txn, MDB_val *k, MDB_val *unused) {
  return mdb_del(txn, s->st->dbi, k, NULL);
}

static int op_rename(struct lscope *s, MDB_txn *txn, MDB_val *from, MDB_val *to) {
  MDB_val v;
  int rc = mdb_get(txn, s->st->dbi, from, &v);
  if (!rc) rc = mdb_put(txn, s->st->dbi, to, &v, MDB_NOOVERWRITE);
  if (!rc) rc = mdb_del(txn, s->st->dbi, from, NULL);
  return rc;
}

static int l_get(void *sc, const char *name) { return write_txn(sc, name, NULL, op_get); }
static int l_erase(void *sc, const char *name) { return write_txn(sc, name, NULL, op_erase); }
static int l_rename(void *sc, const char *from, const char *to) {
  return write_txn(sc, from, to, op_rename);
}

const struct store_ops store_lmdb = {
    .name = "lmdb", .shared = true, .chain = false,
    .create = l_create, .attach = l_attach, .close = l_close, .root = l_root,
    .scope_new = l_scope_new, .scope_open = l_scope_open, .scope_free = l_scope_free,
    .find = l_find, .get = l_get, .erase = l_erase, .rename = l_rename};
