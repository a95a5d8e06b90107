/*
 * fuzz_rw.c - damaged segment images through the writable paths.
 *
 * An input is a sparse segment image (fuzz_image.h) followed by a script:
 * its last byte k says that the k bytes before it (at most all there are)
 * are the script, two bytes an operation.  The image becomes a real segment
 * file; it is attached read-write, which reaps its dead slots (every slot is
 * dead: no process holds one), then reaped again, checked, and the script
 * runs over it: scopes and variables made, opened, resized, renamed and
 * erased, variable locks taken and given back, buffers pinned and unpinned,
 * groups joined and left, each with what the image already holds as well
 * as with what the script made; then it is detached.  Any result is a pass
 * (PDSHM_EBADSEG and a poisoned segment are the expected ones); a crash, a
 * hang or a sanitizer report is a failure.
 *
 * Two words of the image belong to the C library and the kernel rather
 * than to pdshm, and the harness writes them as a dead holder leaves them:
 * each robust mutex's type is the one create gave it, and a held mutex's
 * word carries the FUTEX_OWNER_DIED bit the kernel sets when its holder
 * dies (every holder in the image is dead).  A word without it names a live
 * holder, which a taker rightly waits for.  And the debug builds' check of
 * the order of locks (lockorder.c) trusts the ranks recorded in the lock
 * table, as it must to find the library's own mistakes, and stops the
 * process on a conflict: the harness ranks the fixed entries as create does
 * and leaves the lent ones unranked (release builds never read a rank).
 *
 * Variable locks are taken only when their word is clear: a word that names
 * holders no slot's records show is answered with EBADSEG only after the
 * taker waited some milliseconds for them (varlock.c, vl_unexplained), time
 * each run that met one would spend; test_varlock_stale covers those words.
 *
 * Built by `make fuzz-rw` as a libFuzzer target, and as the plain replay
 * driver `tests/fuzz_replay_rw` that `make check` runs over the stored
 * corpus (fuzz_replay.c).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_image.h"
#include "lifecycle/lifecycle.h"
#include "model/model.h"

#define RW_OPS_MAX 64u    /* operations of one input's script          */
#define RW_KEEP 4u        /* handles of each kind the script keeps     */
#define RW_WAIT_NS 1000000 /* every wait of the script: 1 ms           */

#define RW_FUTEX_OWNER_DIED 0x40000000u
#define RW_FUTEX_TID_MASK 0x3fffffffu

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

/* ---- the image's mutexes as dead holders leave them, and the ranks ---------- */

static int rw_mutex_kind(void) {
  static int kind = -1;
  if (kind < 0) {
    pthread_mutexattr_t a;
    pthread_mutex_t m;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&m, &a);
    kind = m.__data.__kind;
    pthread_mutex_destroy(&m);
    pthread_mutexattr_destroy(&a);
  }
  return kind;
}

static uint64_t rw_fix_mutexes(uint8_t *img, uint64_t size) {
  const struct pdshm_hdr *h = (const struct pdshm_hdr *)img;
  uint64_t at = h->locks_off, count = h->max_locks;
  if (at % PDSHM_REGION_ALIGN || at > size || count > (size - at) / sizeof(struct pdshm_lock))
    return 0; /* attach refuses such a header */
  for (uint64_t i = 0; i < count; i++) {
    pthread_mutex_t *m = &((struct pdshm_lock *)(img + at))[i].mutex;
    struct pdshm_lock *l = &((struct pdshm_lock *)(img + at))[i];
    l->rank = i == PDSHM_LOCK_HEAP     ? pdshm__lock_rank(PDSHM_LK_HEAP, 0)
              : i == PDSHM_LOCK_GROUPS ? pdshm__lock_rank(PDSHM_LK_GROUPS, 0)
                                       : 0;
    m->__data.__kind = rw_mutex_kind();
    unsigned w = (unsigned)m->__data.__lock;
    if (w && !(w & RW_FUTEX_OWNER_DIED))
      m->__data.__lock = (int)((w & RW_FUTEX_TID_MASK ? w & RW_FUTEX_TID_MASK : 1u) |
                               RW_FUTEX_OWNER_DIED);
  }
  return at + count * sizeof(struct pdshm_lock);
}

/* ---- the script ---------------------------------------------------------------- */

/* Names that mkseeds' images hold, and a few of the script's own. */
static const char *const rw_scope_paths[] = {"params", "params/fc", "params/emb", "data",
                                             "tmp",    "big",       "s0",         "params/s1"};
static const char *const rw_var_names[] = {"W",    "b",    "table", "x",       "y",
                                           "step", "held", "v1",    "renamed", "shown",
                                           "h",    "v0",   "v3",    "n0",      "n1"};
#define RW_N(a) (sizeof(a) / sizeof((a)[0]))

struct rw {
  pdshm_seg *seg;
  pdshm_scope *scopes[RW_KEEP]; /* [0] the root */
  pdshm_var *vars[RW_KEEP];
  pdshm_var *locked[RW_KEEP]; /* vars[] this thread holds locked, or NULL */
  pdshm_pin *pins[RW_KEEP];
  pdshm_group *groups[2];
};

static pdshm_scope *rw_scope(struct rw *w, unsigned a) {
  pdshm_scope *s = w->scopes[a % RW_KEEP];
  return s ? s : w->scopes[0];
}

static void rw_keep_scope(struct rw *w, unsigned a, pdshm_scope *s) {
  unsigned k = 1 + a % (RW_KEEP - 1);
  if (w->scopes[k]) pdshm_scope_release(w->scopes[k]);
  w->scopes[k] = s;
}

/* A variable kept at a; a lock held on the one it replaces is given back. */
static void rw_keep_var(struct rw *w, unsigned a, pdshm_var *v) {
  unsigned k = a % RW_KEEP;
  if (w->locked[k]) pdshm_var_unlock(w->locked[k]);
  w->locked[k] = NULL;
  w->vars[k] = v;
}

static void rw_lock(struct rw *w, unsigned a) {
  unsigned k = a % RW_KEEP;
  pdshm_var *v = w->vars[k];
  if (!v || w->locked[k]) return;
  uint64_t word = atomic_load(&pdshm__var_rec(v)->lk);
  if ((uint32_t)word) return; /* held, as far as the word says: see the file's comment */
  if (!pdshm_var_lock(v, a & 4)) w->locked[k] = v;
}

static void rw_unlock(struct rw *w, unsigned a) {
  unsigned k = a % RW_KEEP;
  if (!w->locked[k]) return;
  pdshm_var_unlock(w->locked[k]);
  w->locked[k] = NULL;
}

static void rw_pin(struct rw *w, unsigned a) {
  unsigned k = a % RW_KEEP;
  pdshm_tensor_view view;
  if (w->pins[k] || !w->vars[(a >> 2) % RW_KEEP]) return;
  if (pdshm_tensor_pin(w->vars[(a >> 2) % RW_KEEP], &w->pins[k], &view)) w->pins[k] = NULL;
  else memset(view.data, 0x5a, view.nbytes); /* as its holder may */
}

static void rw_unpin(struct rw *w, unsigned a) {
  unsigned k = a % RW_KEEP;
  if (!w->pins[k]) return;
  pdshm_tensor_unpin(w->pins[k]);
  w->pins[k] = NULL;
}

static void rw_resize(struct rw *w, unsigned a) {
  pdshm_var *v = w->vars[a % RW_KEEP];
  int64_t dims[2] = {(int64_t)(a >> 4) * 8, 3};
  if (v) pdshm_tensor_resize(v, (pdshm_dtype)((a >> 2) % 4), 1 + (a >> 7), dims);
}

static void rw_group(struct rw *w, unsigned a) {
  unsigned k = a & 1;
  if (w->groups[k]) {
    if (a & 2) pdshm_group_barrier(w->groups[k], RW_WAIT_NS);
    else {
      pdshm_group_leave(w->groups[k]); /* the handle goes, whatever it answers */
      w->groups[k] = NULL;
    }
    return;
  }
  if (pdshm_group_join(w->seg, a & 4 ? "trainers" : "g", 1 + (a >> 3) % 3,
                       (a & 0x80) ? -1 : (int)((a >> 5) & 3), &w->groups[k]))
    w->groups[k] = NULL;
}

static int rw_count(pdshm_var *v, void *arg) {
  (void)v;
  ++*(unsigned *)arg;
  return 0;
}

/* One operation: op selects it, a is its argument. */
static void rw_op(struct rw *w, unsigned op, unsigned a) {
  pdshm_scope *s = rw_scope(w, a >> 4), *made;
  pdshm_var *v;
  const char *name = rw_var_names[a % RW_N(rw_var_names)];
  char buf[64];
  unsigned count = 0;
  switch (op % 20) {
  case 0:
    if (!pdshm_scope_open(w->seg, rw_scope_paths[a % RW_N(rw_scope_paths)], &made))
      rw_keep_scope(w, a >> 3, made);
    break;
  case 1:
    if (!pdshm_scope_new(s, a & 1 ? NULL : rw_scope_paths[(a >> 1) % 6], &made))
      rw_keep_scope(w, a >> 3, made);
    break;
  case 2:
    if (!pdshm_var_get(s, name, &v)) rw_keep_var(w, a >> 2, v);
    break;
  case 3:
    if ((v = pdshm_find_var(s, name))) rw_keep_var(w, a >> 2, v);
    break;
  case 4:
    if (!pdshm_var_new(s, &v)) rw_keep_var(w, a >> 2, v);
    break;
  case 5: rw_resize(w, a); break;
  case 6:
    for (unsigned k = 0; k < RW_KEEP; k++) /* its lock goes with it: unlock answers ESTALE */
      if (w->vars[k] && pdshm_find_local_var(s, name) == w->vars[k]) rw_keep_var(w, k, NULL);
    pdshm_var_erase(s, name);
    break;
  case 7: pdshm_var_rename(s, name, rw_var_names[(a >> 4) % RW_N(rw_var_names)]); break;
  case 8: rw_lock(w, a); break;
  case 9: rw_unlock(w, a); break;
  case 10: rw_pin(w, a); break;
  case 11: rw_unpin(w, a); break;
  case 12: rw_group(w, a); break;
  case 13:
    if (w->vars[a % RW_KEEP]) {
      pdshm_var_set_label(w->vars[a % RW_KEEP], a & 4 ? "parameter" : "feed");
      pdshm_var_add_reader(w->vars[a % RW_KEEP], "op");
      pdshm_var_wait(w->vars[a % RW_KEEP], 0, RW_WAIT_NS);
    }
    break;
  case 14: pdshm_scope_foreach_var(s, a & 1 ? "parameter" : NULL, rw_count, &count); break;
  case 15: pdshm_scope_unlink(s, rw_scope_paths[a % 6]); break;
  case 16:
    if (a & 1) pdshm_scope_drop_kids(s);
    else if (!pdshm_scope_parent(s, &made)) rw_keep_scope(w, a >> 3, made);
    break;
  case 17: pdshm_unique_name(w->seg, "n", buf, sizeof buf); break;
  case 18: pdshm_reap(w->seg, NULL); break;
  case 19: {
    pdshm_stats st;
    pdshm_seg_stats(w->seg, &st);
    pdshm_check(w->seg, NULL);
    break;
  }
  }
}

static void rw_run(struct rw *w, const uint8_t *script, size_t len) {
  if (pdshm_root(w->seg, &w->scopes[0])) return;
  for (size_t i = 0; i + 1 < len && i / 2 < RW_OPS_MAX; i += 2) rw_op(w, script[i], script[i + 1]);
  for (unsigned k = 0; k < RW_KEEP; k++) rw_unlock(w, k); /* holds are per thread */
  for (unsigned k = 0; k < RW_KEEP; k += 2) rw_unpin(w, k); /* the others go with detach */
  if (w->groups[0]) pdshm_group_leave(w->groups[0]);        /* [1] goes with detach */
  for (unsigned k = 1; k < RW_KEEP; k++)
    if (w->scopes[k]) pdshm_scope_release(w->scopes[k]);
  pdshm_scope_release(w->scopes[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  size_t script = n ? data[n - 1] : 0;
  if (n && script > n - 1) script = n - 1;
  size_t image = n ? n - 1 - script : 0;
  const char *name = fuzz_image_put(data, image, rw_fix_mutexes);
  pdshm_seg *seg;
  if (pdshm_attach(name, NULL, &seg)) return 0;
  pdshm_reap(seg, NULL);
  pdshm_check(seg, NULL);
  struct rw w = {.seg = seg};
  rw_run(&w, data + image, script);
  pdshm_detach(seg);
  return 0;
}
