/* test_torture.c - workers churn the model while a driver SIGKILLs them.
 *
 * Workers attach on their own and, in two threads each, loop at random over
 * local and named scopes, variables, tensors of 64 B to 1 MiB, labels,
 * operator lists, shared and exclusive variable locks, unique names and pins
 * of their local tensors (whose bytes must survive an erase, a resize or the
 * scope's release until the unpin); under a variable lock they verify the
 * committed parameters' bytes.  They also share one named scope,
 * work/shared, whose variables v0..v15 any of them gets, resizes, labels,
 * locks and erases: an edit through a pdshm_var * another worker erased
 * meanwhile must answer ESTALE and change nothing, unless the record was
 * handed out again meanwhile: it is then the new variable, which the edit
 * changes (pdshm.h), though it may be a variable of a scope another worker
 * owns alone.  So a worker writes its own tensors' bytes only through pins,
 * whose view no resize can take away.  A third thread of each
 * worker is a member of the workers' group: allreduces (checked) and
 * barriers, EOWNERDEAD when a worker is killed, the replacement taking its
 * rank over.  A fourth is a member of the group "elastic", which shrinks and
 * grows instead: a worker enlists (or, finding no group, makes one alone),
 * the members regroup after each death, and when rank 0 asks through the
 * allreduce, to take the candidates in.  The driver kills a random
 * worker at a random instant and starts another (whose attach reaps the
 * dead: a reaper that may be killed in turn), and now and then kills a
 * process in the middle of pdshm_reap.  After each round every process is
 * killed and the driver reaps, then requires: pdshm_check clean, every slot
 * and lock free, the parameters unchanged, and, once the named scopes the
 * workers made are dropped, `used` back to its baseline.  The segment
 * starts small and grows while they work and die (lib/heap/heap_grow.c).
 *
 * make check runs it for TORTURE_SECONDS (default 20); make torture runs
 * TORTURE_KILLS kills (default 10000).  Every random choice (the driver's
 * pauses and victims, each worker's operations) comes from one seed, which
 * the run prints first ("torture: seed N"); TORTURE_SEED=N runs with that
 * seed again, to replay a failure: the same choices, though not the same
 * interleaving, which the scheduler decides.
 *
 * Built with --enable-tsan, a worker's ThreadSanitizer sees its own threads
 * only: what another process did (took the heap lock after us, handed a
 * block we freed out again, filled it, released a scope lock we then take)
 * leaves no trace in it.  So it reports as a race one thread's earlier use
 * of some bytes (a free list's links, a tensor or a name it wrote) and
 * another thread's use of them now that another process owns them (a kid's
 * name compared, another member's buffer reduced or copied into), though
 * the two are ordered through that process.  No thread here writes a tensor
 * another one reads on purpose.  With WORKERS set to 1 the reports vanish.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crashsnap.h"
#include "model/model.h"
#include "testutil.h"

#define WORKERS 4
#define KILLS_PER_ROUND 25
#define NPARAMS 6
#define SEG_SIZE (8u << 20)      /* at first: the workers grow it ...           */
#define SEG_MAX_SIZE (24u << 20) /* ... to this, small enough to be filled now
                                    and then (and to fit CI's 64 MiB /dev/shm) */
#define WPINS 3              /* pins a worker thread keeps at most          */
#define GFLOATS 40000        /* the group's allreduce: 160 KiB a member     */

/* Shared with the workers through an anonymous MAP_SHARED mapping. */
struct board {
  uint64_t sums[NPARAMS];   /* checksums of the parameters' bytes         */
  _Atomic uint64_t ops;     /* operations the workers completed           */
  _Atomic uint64_t nomem;   /* of them, answered ENOMEM / ENOSPC          */
  _Atomic uint64_t group_rounds; /* allreduce + barrier rounds of the group */
  _Atomic uint64_t regroups;     /* regroups of the elastic group           */
  _Atomic int failed;       /* a worker saw something wrong               */
  char why[256];
};

static char g_name[PDSHM_SEG_NAME_MAX + 1];
static struct board *g_board;

static void setup(void) {
  snprintf(g_name, sizeof g_name, "%s", tu_name("torture"));
  g_board = tu_shared(sizeof *g_board);
}
static void teardown(void) {
  tu_cleanup();
  munmap(g_board, sizeof *g_board);
}

static uint64_t sum(const void *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ n;
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static const char *param_name(int i) {
  static const char *n[NPARAMS] = {"w0", "w1", "w2", "w3", "w4", "w5"};
  return n[i];
}

/* ---- a worker ---------------------------------------------------------------------- */

struct worker {
  pdshm_seg *seg;
  pdshm_scope *root, *params, *work, *shared;
  pdshm_scope *local[4];    /* anonymous scopes it holds                   */
  pdshm_scope *mine;        /* its current named scope under work/         */
  pdshm_pin *pin[WPINS];    /* buffers of its local scopes it pins          */
  pdshm_tensor_view view[WPINS];
  uint64_t rng;
};

/* A worker's seed: the run's, mixed with how many workers were started
 * before it (splitmix64), never 0. */
static uint64_t worker_seed(uint64_t seed, uint64_t started) {
  uint64_t z = seed + (started + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) | 1;
}

static uint64_t rnd(struct worker *w) {
  w->rng ^= w->rng << 13;
  w->rng ^= w->rng >> 7;
  w->rng ^= w->rng << 17;
  return w->rng;
}

static int w_fail(const char *what, int rc) {
  snprintf(g_board->why, sizeof g_board->why, "worker %d: %s: %s (%s)", (int)getpid(), what,
           pdshm_strerror(rc), pdshm_last_error());
  g_board->failed = 1;
  return 1;
}

/* rc is fine, or a full segment (the churn may fill it): counted. */
static int w_ok(const char *what, int rc) {
  if (rc == PDSHM_ENOMEM || rc == PDSHM_ENOSPC) {
    g_board->nomem++;
    return 0;
  }
  return rc ? w_fail(what, rc) : 0;
}

/* 64 B .. 1 MiB, log-uniform. */
static int64_t tensor_bytes(struct worker *w) { return (int64_t)64 << (rnd(w) % 15); }

/* Fills v's bytes with `byte`.  v is a variable of a scope this thread owns
 * alone, yet another worker's w_shared may resize it at any moment: the
 * pdshm_var * it got from work/shared before that variable was erased names
 * the same record, handed out again here.  Bytes written through
 * pdshm_tensor_data would then land in the buffer that resize freed, or past
 * the end of the one it made (the pointer and the size read across its
 * commit), over the heap's next block headers.  A pin's view is the buffer
 * and size of one instant, kept until the unpin, whatever the variable
 * becomes. */
static int w_write(pdshm_var *v, uint8_t byte) {
  pdshm_pin *pin;
  pdshm_tensor_view view;
  int rc = pdshm_tensor_pin(v, &pin, &view);
  if (rc) return w_ok("pin to fill", rc);
  memset(view.data, byte, view.nbytes);
  rc = pdshm_tensor_unpin(pin);
  return rc ? w_fail("unpin after fill", rc) : 0;
}

static int w_fill(struct worker *w, pdshm_scope *s) {
  char name[16];
  pdshm_var *v;
  snprintf(name, sizeof name, "v%u", (unsigned)(rnd(w) % 6));
  int rc = pdshm_var_get(s, name, &v);
  if (rc) return w_ok("var_get", rc);
  int64_t d = tensor_bytes(w) / 4;
  int resized = pdshm_tensor_resize(v, PDSHM_F32, 1, &d);
  rc = w_ok("resize", resized);
  if (!resized) rc = w_write(v, 0x5a);
  if (!rc && rnd(w) % 2) rc = w_ok("label", pdshm_var_set_label(v, rnd(w) % 2 ? "input" : "grad"));
  if (!rc && rnd(w) % 2) rc = w_ok("reader", pdshm_var_add_reader(v, rnd(w) % 2 ? "mul" : "add"));
  if (!rc && rnd(w) % 3 == 0) rc = w_ok("writer", pdshm_var_add_writer(v, "sgd"));
  if (!rc && rnd(w) % 4 == 0) {
    rc = pdshm_var_new(s, &v);
    rc = w_ok("var_new", rc);
  }
  if (!rc && rnd(w) % 5 == 0) {
    rc = pdshm_var_rename(s, name, "renamed");
    if (rc == PDSHM_EEXIST) rc = pdshm_var_erase(s, "renamed");
    rc = w_ok("rename/erase", rc);
  }
  return rc;
}

static int w_local(struct worker *w) {
  unsigned i = (unsigned)(rnd(w) % 4);
  if (w->local[i] && rnd(w) % 3 == 0) {
    int rc = pdshm_scope_release(w->local[i]);
    w->local[i] = NULL;
    return rc ? w_fail("release", rc) : 0;
  }
  if (!w->local[i]) {
    pdshm_scope *p = rnd(w) % 2 ? w->root : w->params;
    if (i && w->local[i - 1] && rnd(w) % 2) p = w->local[i - 1]; /* a chain of local scopes */
    int rc = pdshm_scope_new(p, NULL, &w->local[i]);
    if (rc) return w_ok("scope_new", rc);
  }
  return w_fill(w, w->local[i]);
}

static int w_named(struct worker *w) {
  char name[64];
  int rc;
  if (w->mine && rnd(w) % 3 == 0) {
    snprintf(name, sizeof name, "%s", pdshm_scope_name(w->mine));
    rc = pdshm_scope_release(w->mine);
    w->mine = NULL;
    if (!rc && rnd(w) % 2) rc = pdshm_scope_unlink(w->work, name);
    return rc == PDSHM_ENOENT ? 0 : rc ? w_fail("unlink", rc) : 0;
  }
  if (!w->mine) {
    if ((rc = pdshm_unique_name(w->seg, "job", name, sizeof name))) return w_fail("unique", rc);
    if ((rc = pdshm_scope_new(w->work, name, &w->mine))) return w_ok("named scope_new", rc);
    if (rnd(w) % 2) {
      pdshm_scope *k;
      if ((rc = pdshm_unique_name(w->seg, "kid", name, sizeof name))) return w_fail("unique", rc);
      if ((rc = pdshm_scope_new(w->mine, name, &k))) return w_ok("named kid", rc);
      rc = w_fill(w, k);
      int rc2 = pdshm_scope_release(k);
      return rc ? rc : rc2 ? w_fail("release kid", rc2) : 0;
    }
  }
  if (rnd(w) % 8 == 0) return w_ok("drop_kids", pdshm_scope_drop_kids(w->mine));
  return w_fill(w, w->mine);
}

/* Under a shared lock the parameter's bytes are what the driver wrote. */
static int w_params(struct worker *w) {
  int i = (int)(rnd(w) % NPARAMS), excl = rnd(w) % 3 == 0;
  pdshm_var *v = pdshm_find_var(w->params, param_name(i));
  if (!v) return w_fail("find parameter", PDSHM_ENOENT);
  int rc = pdshm_var_lock(v, excl);
  if (rc) return w_ok("var_lock", rc); /* a shared hold needs a block: a full segment refuses */
  if (sum(pdshm_tensor_data(v), pdshm_tensor_nbytes(v)) != g_board->sums[i])
    return w_fail(param_name(i), PDSHM_EBADSEG);
  if ((rc = pdshm_var_unlock(v))) return w_fail("var_unlock", rc);
  return 0;
}

/* What this process writes into byte j of a buffer it pins (two pins of
 * one buffer write the same). */
static uint8_t pin_byte(size_t j) { return (uint8_t)(j * 13 + (size_t)getpid()); }

/* A pin of a buffer of one of its local scopes, which it then owns alone:
 * it writes a pattern there and finds it again before it unpins, whatever
 * was erased, resized or released meanwhile (a buffer freed under a pin and
 * handed to someone else would not keep it). */
static int w_pin(struct worker *w) {
  unsigned i = (unsigned)(rnd(w) % WPINS), l = (unsigned)(rnd(w) % 4);
  char name[16];
  if (w->pin[i]) {
    const uint8_t *p = w->view[i].data;
    for (size_t j = 0; j < w->view[i].nbytes; j++)
      if (p[j] != pin_byte(j)) return w_fail("pinned bytes changed", PDSHM_EBADSEG);
    int rc = pdshm_tensor_unpin(w->pin[i]);
    w->pin[i] = NULL;
    return rc ? w_fail("unpin", rc) : 0;
  }
  snprintf(name, sizeof name, "v%u", (unsigned)(rnd(w) % 6));
  pdshm_var *v = w->local[l] ? pdshm_find_local_var(w->local[l], name) : NULL;
  if (!v || !pdshm_tensor_data(v)) return 0;
  int rc = pdshm_tensor_pin(v, &w->pin[i], &w->view[i]);
  if (rc) {
    w->pin[i] = NULL;
    return w_ok("pin", rc);
  }
  uint8_t *p = w->view[i].data;
  for (size_t j = 0; j < w->view[i].nbytes; j++) p[j] = pin_byte(j);
  return 0;
}

/* One edit of a variable of the scope every worker shares; an edit may find
 * the variable erased since the get (ESTALE), an erase may find it gone.
 * The bytes are not touched: another worker may free them at any moment. */
static int w_shared(struct worker *w) {
  char name[16];
  pdshm_var *v;
  snprintf(name, sizeof name, "v%u", (unsigned)(rnd(w) % 16));
  uint64_t what = rnd(w) % 6;
  if (what == 0) {
    int rc = pdshm_var_erase(w->shared, name);
    return rc == PDSHM_ENOENT ? 0 : w_ok("shared erase", rc);
  }
  int rc = pdshm_var_get(w->shared, name, &v);
  if (rc) return w_ok("shared var_get", rc);
  int64_t d = tensor_bytes(w) / 4;
  if (what <= 2) rc = pdshm_tensor_resize(v, PDSHM_F32, 1, &d);
  else if (what == 3) rc = pdshm_var_set_label(v, rnd(w) % 2 ? "input" : "grad");
  else if (what == 4) rc = pdshm_var_add_reader(v, rnd(w) % 2 ? "mul" : "add");
  else if (!(rc = pdshm_var_lock(v, (int)(rnd(w) % 2))) && (rc = pdshm_var_unlock(v)))
    return w_fail("shared var_unlock", rc);
  return rc == PDSHM_ESTALE ? 0 : w_ok("shared edit", rc);
}

static void *worker_loop(void *arg) {
  struct worker *w = arg;
  for (;;) {
    uint64_t r = rnd(w) % 15;
    int rc = r < 5    ? w_local(w)
             : r < 8  ? w_named(w)
             : r < 10 ? w_params(w)
             : r < 12 ? w_pin(w)
                      : w_shared(w);
    if (rc) _exit(1);
    g_board->ops++;
  }
  return NULL;
}

/* The worker's third thread: rank `rank` of the group "trainers" (its
 * predecessor's rank, taken over), allreduces and barriers with the other
 * workers while they are killed; every allreduce that succeeds must hold the
 * sum of the ranks' values. */
struct member {
  struct worker *w;
  int rank;
};

/* p is the view of a pin the member holds on its tensor's buffer (see
 * w_write): a resize through another worker's stale pdshm_var * can move
 * the tensor, but not the bytes written here out from under them. */
static int g_round(pdshm_group *g, pdshm_var *v, float *p, int rank) {
  for (int i = 0; i < GFLOATS; i++) p[i] = (float)(rank + 1) * (float)(i % 3 + 1);
  int rc = pdshm_group_allreduce(g, v, PDSHM_SUM, 10000000000ll);
  if (rc == PDSHM_EOWNERDEAD) return 0;
  if (rc) return w_fail("allreduce", rc);
  for (int i = 0; i < GFLOATS; i++)
    if (p[i] != (float)(WORKERS * (WORKERS + 1) / 2) * (float)(i % 3 + 1)) {
      snprintf(g_board->why, sizeof g_board->why, "worker %d: allreduce [%d] = %g", (int)getpid(),
               i, p[i]);
      g_board->failed = 1;
      return 1;
    }
  rc = pdshm_group_barrier(g, 10000000000ll);
  return rc && rc != PDSHM_EOWNERDEAD ? w_fail("barrier", rc) : 0;
}

static void *member_loop(void *arg) {
  struct member *m = arg;
  pdshm_scope *local;
  pdshm_var *v;
  pdshm_group *g;
  pdshm_pin *pin;
  pdshm_tensor_view view;
  int64_t n = GFLOATS;
  int rc = pdshm_scope_new(m->w->root, NULL, &local);
  if (!rc) rc = pdshm_var_new(local, &v);
  if (!rc) rc = pdshm_tensor_resize(v, PDSHM_F32, 1, &n);
  if (!rc) rc = pdshm_tensor_pin(v, &pin, &view); /* held for good: g_round */
  /* the predecessor's descriptors close a moment after its death */
  for (int tries = 0; !rc; tries++) {
    rc = pdshm_group_join(m->w->seg, "trainers", WORKERS, m->rank, &g);
    if (rc != PDSHM_EBUSY || tries == 5000) break;
    rc = 0;
    usleep(1000);
  }
  if (rc == PDSHM_ENOMEM || rc == PDSHM_ENOSPC) return NULL; /* the churn filled it */
  if (rc) _exit(w_fail("join", rc));
  for (;;) {
    if (g_round(g, v, view.data, m->rank)) _exit(1);
    g_board->group_rounds++;
  }
  return NULL;
}

/* The worker's fourth thread: a member of "elastic".  Every allreduce that
 * succeeds must hold size times each value; its last element is rank 0's
 * request to regroup (every 16th round), so that every member regroups at
 * the same round, as they do after EOWNERDEAD. */
#define EFLOATS 1000

static int e_join(pdshm_seg *seg, pdshm_group **g) {
  for (;;) {
    int rc = pdshm_group_enlist(seg, "elastic", 2000000000ll, g);
    if (rc == PDSHM_ENOENT) rc = pdshm_group_join(seg, "elastic", 1, 0, g);
    /* ETIMEDOUT: no live member regrouped (or a takeover waited in vain);
     * EBUSY, EINVAL: another worker made the group first, or its members
     * regroup: enlist again */
    if (rc != PDSHM_ETIMEDOUT && rc != PDSHM_EBUSY && rc != PDSHM_EINVAL) return rc;
  }
}

static int e_round(pdshm_group *g, pdshm_var *v, float *p, uint64_t n) {
  int size = pdshm_group_size(g), nr, ns;
  for (int i = 0; i < EFLOATS; i++) p[i] = (float)(i % 3 + 1);
  p[EFLOATS] = pdshm_group_rank(g) == 0 && n % 16 == 15;
  int rc = pdshm_group_allreduce(g, v, PDSHM_SUM, 10000000000ll);
  if (rc && rc != PDSHM_EOWNERDEAD) return w_fail("elastic allreduce", rc);
  for (int i = 0; !rc && i < EFLOATS; i++)
    if (p[i] != (float)size * (float)(i % 3 + 1)) {
      snprintf(g_board->why, sizeof g_board->why, "worker %d: elastic allreduce of %d [%d] = %g",
               (int)getpid(), size, i, p[i]);
      g_board->failed = 1;
      return 1;
    }
  if (!rc && p[EFLOATS] == 0) return 0;
  rc = pdshm_group_regroup(g, 10000000000ll, &nr, &ns);
  if (rc) return w_fail("regroup", rc);
  g_board->regroups++;
  return 0;
}

static void *elastic_loop(void *arg) {
  struct worker *w = arg;
  pdshm_scope *local;
  pdshm_var *v;
  pdshm_group *g;
  int64_t n = EFLOATS + 1;
  int rc = pdshm_scope_new(w->root, NULL, &local);
  if (!rc) rc = pdshm_var_new(local, &v);
  if (!rc) rc = pdshm_tensor_resize(v, PDSHM_F32, 1, &n);
  if (!rc) rc = e_join(w->seg, &g);
  if (rc == PDSHM_ENOMEM || rc == PDSHM_ENOSPC) return NULL; /* the churn filled it */
  if (rc) _exit(w_fail("elastic join", rc));
  for (uint64_t k = 0;; k++)
    if (e_round(g, v, pdshm_tensor_data(v), k)) _exit(1);
  return NULL;
}

/* What the driver hands a worker it starts. */
struct start {
  int rank;      /* its rank in the workers' group */
  uint64_t seed; /* of its random choices           */
};

/* Two threads, so that a death can leave journals open on two lanes, a
 * third that is a member of the workers' group, and a fourth of "elastic". */
static int worker_main(void *arg) {
  const struct start *st = arg;
  struct worker w = {.rng = st->seed}, w2, w3, w4;
  int rc = pdshm_attach(g_name, NULL, &w.seg);
  if (!rc) rc = pdshm_root(w.seg, &w.root);
  if (!rc) rc = pdshm_scope_open(w.seg, "params", &w.params);
  if (!rc) rc = pdshm_scope_open(w.seg, "work", &w.work);
  if (!rc) rc = pdshm_scope_open(w.seg, "work/shared", &w.shared);
  if (rc) return w_fail("attach", rc);
  w2 = w;
  w2.rng = ~w.rng | 1;
  w3 = w;
  w4 = w;
  struct member m = {.w = &w3, .rank = st->rank};
  pthread_t t, tm, te;
  if ((rc = pthread_create(&t, NULL, worker_loop, &w2))) return w_fail("thread", -rc);
  if ((rc = pthread_create(&tm, NULL, member_loop, &m))) return w_fail("thread", -rc);
  if ((rc = pthread_create(&te, NULL, elastic_loop, &w4))) return w_fail("thread", -rc);
  worker_loop(&w);
  return 1;
}

/* A process that does nothing but reap (the driver kills it mid-way). */
static int reaper_main(void *arg) {
  pdshm_seg *seg;
  (void)arg;
  if (pdshm_attach(g_name, NULL, &seg)) return 1;
  for (;;) pdshm_reap(seg, NULL);
}

/* ---- the driver ---------------------------------------------------------------------- */

struct driver {
  pdshm_seg *seg;
  pdshm_scope *work, *params;
  char *params_text;             /* the parameters' model text                 */
  uint64_t used;            /* baseline                                   */
  uint64_t kills, reaper_kills, rounds;
  pid_t pid[WORKERS];
  uint64_t seed, rng;       /* the run's seed; the driver's own generator */
  uint64_t started;         /* workers started                           */
};

static void build(struct driver *d) {
  pdshm_options o = {.size = SEG_SIZE, .max_procs = 16, .max_size = SEG_MAX_SIZE};
  d->seg = tu_create_opts(g_name, &o);
  pdshm_scope *root, *params;
  ck_assert_int_eq(pdshm_root(d->seg, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, "params", &params), 0);
  d->params = params;
  for (int i = 0; i < NPARAMS; i++) {
    pdshm_var *v;
    int64_t n = (int64_t)64 << (14 * i / 5); /* 64 B .. 1 MiB */
    ck_assert_int_eq(pdshm_var_create(params, param_name(i), &v), 0);
    ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_U8, 1, &n), 0);
    uint8_t *p = pdshm_tensor_data(v);
    for (int64_t j = 0; j < n; j++) p[j] = (uint8_t)(j * 7 + i);
    g_board->sums[i] = sum(p, (size_t)n);
    ck_assert_int_eq(pdshm_var_set_label(v, "parameter"), 0);
    ck_assert_int_eq(pdshm_var_lock(v, 0), 0); /* its lock entry, claimed once */
    ck_assert_int_eq(pdshm_var_unlock(v), 0);
  }
  ck_assert_int_eq(pdshm_scope_new(root, "work", &d->work), 0);
  d->params_text = snap_model(d->seg, params->rec, false);
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(d->seg, &st), 0);
  d->used = st.used;
}

static void check_worker_status(int st) {
  ck_assert_msg(!g_board->failed, "%s", g_board->why);
  ck_assert_msg(st == 128 + SIGKILL, "a worker ended by itself (%d): %s", st, g_board->why);
}

static void kill_one(pid_t pid) {
  kill(pid, SIGKILL);
  check_worker_status(tu_wait(pid));
}

static void pause_us(struct driver *d, unsigned max) {
  d->rng = d->rng * 6364136223846793005ull + 1442695040888963407ull;
  nanosleep(&(struct timespec){0, (long)((d->rng >> 33) % max) * 1000}, NULL);
}

static void round_end(struct driver *d) {
  char why[1024];
  for (int i = 0; i < WORKERS; i++) kill_one(d->pid[i]);
  d->kills += WORKERS;
  int rc = snap_reap_all(d->seg);
  ck_assert_msg(rc == 0, "reap: %s (%s)", pdshm_strerror(rc), pdshm_last_error());
  ck_assert_msg(!snap_clean(d->seg, why, sizeof why), "round %llu: %s",
                (unsigned long long)d->rounds, why);
  char *now = snap_model(d->seg, d->params->rec, false);
  ck_assert_msg(!strcmp(now, d->params_text), "the parameters changed:\n%s\nwere\n%s", now,
                d->params_text);
  free(now);
  ck_assert_int_eq(pdshm_scope_drop_kids(d->work), 0);
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(d->seg, &st), 0);
  ck_assert_msg(st.used == d->used, "round %llu: used %llu, baseline %llu",
                (unsigned long long)d->rounds, (unsigned long long)st.used,
                (unsigned long long)d->used);
  ck_assert_msg(!snap_clean(d->seg, why, sizeof why), "after drop_kids: %s", why);
  d->rounds++;
}

/* Starts the worker of rank i (a fork: it gets its own copy of st). */
static void start_worker(struct driver *d, int i) {
  struct start st = {.rank = i, .seed = worker_seed(d->seed, d->started++)};
  d->pid[i] = tu_spawn(worker_main, &st);
}

static void round_run(struct driver *d) {
  pdshm_scope *shared; /* dropped with work's other kids at the round's end */
  ck_assert_int_eq(pdshm_scope_new(d->work, "shared", &shared), 0);
  ck_assert_int_eq(pdshm_scope_release(shared), 0);
  for (int i = 0; i < WORKERS; i++) start_worker(d, i);
  for (int n = 0; n < KILLS_PER_ROUND; n++) {
    pause_us(d, 20000);
    if ((d->rng >> 45) % 8 == 0) { /* a reaper, killed mid-reap (an LCG's high bits) */
      pid_t r = tu_spawn(reaper_main, NULL);
      pause_us(d, 3000);
      kill(r, SIGKILL);
      tu_wait(r);
      d->reaper_kills++;
    }
    int i = (int)((d->rng >> 53) % WORKERS);
    kill_one(d->pid[i]);
    d->kills++;
    start_worker(d, i);
  }
  round_end(d);
}

/* TORTURE_SEED, else one of this run's own; printed (and flushed, so that
 * a run that dies still shows it). */
static uint64_t torture_seed(void) {
  const char *e = getenv("TORTURE_SEED");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t seed = e && *e ? strtoull(e, NULL, 0)
                          : (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  printf("torture: seed %llu (TORTURE_SEED=%llu replays its choices)\n", (unsigned long long)seed,
         (unsigned long long)seed);
  fflush(stdout);
  return seed;
}

START_TEST(workers_killed_at_random) {
  const char *k = getenv("TORTURE_KILLS"), *s = getenv("TORTURE_SECONDS");
  uint64_t want = k ? strtoull(k, NULL, 10) : 0, secs = s ? strtoull(s, NULL, 10) : 20;
  struct driver d = {.seed = torture_seed()};
  d.rng = d.seed;
  build(&d);
  uint64_t t0 = tu_now_ns();
  while (want ? d.kills + d.reaper_kills < want
              : tu_now_ns() - t0 < secs * 1000000000ull)
    round_run(&d);
  printf("torture: seed %llu: %llu kills of workers and %llu of reapers in %llu rounds, %.1f s, "
         "%llu operations (%llu answered ENOMEM/ENOSPC), %llu group rounds, %llu regroups\n",
         (unsigned long long)d.seed, (unsigned long long)d.kills,
         (unsigned long long)d.reaper_kills,
         (unsigned long long)d.rounds, (double)(tu_now_ns() - t0) / 1e9,
         (unsigned long long)g_board->ops, (unsigned long long)g_board->nomem,
         (unsigned long long)g_board->group_rounds, (unsigned long long)g_board->regroups);
  pdshm_seg_info si;
  ck_assert_int_eq(pdshm_inspect_seg(d.seg, &si), 0);
  printf("torture: the segment grew %llu times, from %llu MiB to %llu MiB (at most %llu MiB)\n",
         (unsigned long long)si.growths, (unsigned long long)(si.first_size >> 20),
         (unsigned long long)(si.size >> 20), (unsigned long long)(si.max_size >> 20));
  ck_assert_uint_ge(si.growths, 1);
  free(d.params_text);
  ck_assert_int_eq(pdshm_detach(d.seg), 0);
}
END_TEST

static Suite *torture_suite(void) {
  Suite *s = suite_create("torture");
  const char *k = getenv("TORTURE_KILLS");
  /* about 50 ms a kill, with room to spare */
  int timeout = k ? (int)(strtoull(k, NULL, 10) / 5 + 120) : 240;
  TCase *tc = tu_tcase(s, "torture", timeout, setup, teardown);
  tcase_add_test(tc, workers_killed_at_random);
  return s;
}

int main(void) { return tu_run(torture_suite()) ? EXIT_FAILURE : EXIT_SUCCESS; }
