/*
 * sc_procs.c - the scenarios of several processes (5 and 6 of the report).
 * Each measurement forks N = 1, 2, 4, 8 processes (bench_mp_rate): each opens
 * the shared store by name itself (pdshm attaches, Boost opens the segment,
 * LMDB opens the environment) or builds its own private copy (hash, Paddle),
 * then all start together and run for the same time:
 *  a. lookups in one shared parameter scope (10k names);
 *  b. get-or-create + erase in one shared scope (shared stores);
 *  c. get-or-create + erase in each process's own local scope;
 *  d. exclusive lock hand-off on one hot variable (+1 to its counter);
 *  e. shared locks on it (read the counter);
 *  f. a trainer-like step: a local scope under the parameters, 10 lookups up
 *     the chain, 4 variables with 4 KiB tensors, a shared lock on a parameter,
 *     an exclusive lock on the gradient, release;
 *  6. reading a 256 MiB parameter tensor from another process (under a
 *     shared lock) against the same read of a private buffer in that process.
 * The multi-process figures are medians of rounds that take every process
 * count and every subject in turn (per_procs), so that scalings, and pdshm
 * against its peers, compare figures of one moment.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "pdshm.h"

#define SHARED_NAMES 10000
#define TMP_NAMES 64
#define STEP_PARAMS 100
#define BIG_BYTES (256ull << 20)

static const int proc_counts[] = {1, 2, 4, 8};
#define NCOUNTS (sizeof proc_counts / sizeof proc_counts[0])
#define SCALE_ROUNDS 3
static volatile uintptr_t sink;

#define MAX_SUBJECTS 8 /* of one scenario */

/* One subject of a scenario: its name in the table and its measuring job. */
struct subject {
  const char *name;
  struct mp_job job;
};

/* Every subject at every process count once per round: the subjects in
 * turn (then the other way in the next round), each at counts 1, 2, 4, 8
 * (or the other way) back to back, so that an N-process figure and the
 * 1-process figure it is compared with come from the same second, and
 * pdshm's figures and a peer's from the same round: the table gets each
 * median rate, the scaling (ratio_add) the median of the rounds' ratios
 * N / 1.  A window is half the configured time box. */
static void per_procs(const char *scenario, const struct subject *subj, size_t nsubj) {
  double rate[MAX_SUBJECTS][NCOUNTS][SCALE_ROUNDS];
  if (nsubj > MAX_SUBJECTS) bench_die("%s: %zu subjects, at most %d", scenario, nsubj, MAX_SUBJECTS);
  for (int r = 0; r < SCALE_ROUNDS; r++)
    for (size_t m = 0; m < nsubj; m++)
      for (size_t k = 0; k < NCOUNTS; k++) {
        size_t s = r % 2 ? nsubj - 1 - m : m, i = (r + m) % 2 ? NCOUNTS - 1 - k : k;
        struct mp_job j = subj[s].job;
        if (!j.secs) j.secs = bconf.secs / 2 > 0.05 ? bconf.secs / 2 : 0.05;
        bench_progress("%s: %s, %d processes, round %d", scenario, subj[s].name, proc_counts[i],
                       r + 1);
        rate[s][i][r] = bench_mp_rate(&j, proc_counts[i]);
      }
  for (size_t s = 0; s < nsubj; s++)
    for (size_t i = 0; i < NCOUNTS; i++) {
      char param[8];
      double ratio[SCALE_ROUNDS];
      for (int r = 0; r < SCALE_ROUNDS; r++) ratio[r] = rate[s][i][r] / rate[s][0][r];
      snprintf(param, sizeof param, "%d", proc_counts[i]);
      result_add(scenario, param, subj[s].name, bench_median(rate[s][i], SCALE_ROUNDS) / 1e6,
                 U_MOPS);
      if (i) ratio_add(scenario, param, subj[s].name, bench_median(ratio, SCALE_ROUNDS));
    }
}

/* ---- a, b, c: stores --------------------------------------------------------- */

enum store_case { SHARED_LOOKUP, SHARED_CREATE, LOCAL_CREATE };

struct store_job {
  const struct store_ops *ops;
  enum store_case which;
  char tag[96];
  char **names; /* SHARED_NAMES names of the parameter scope */
};

/* One process's state. */
struct store_proc {
  const struct store_job *job;
  struct bstore *st;
  void *scope;
  char **tmp; /* this process's names for get-or-create + erase */
  uint32_t *order;
  uint64_t pos;
};

static void *store_setup(void *arg, int proc) {
  const struct store_job *j = arg;
  const struct store_ops *ops = j->ops;
  struct store_proc *p = calloc(1, sizeof *p);
  p->job = j;
  p->st = ops->shared ? ops->attach(j->tag) : ops->create(j->tag);
  if (!p->st) return NULL;
  if (!ops->shared) { /* a private store: this process's own copy */
    p->scope = ops->root(p->st);
    if (j->which == SHARED_LOOKUP) bench_fill(ops, p->scope, j->names, SHARED_NAMES);
  } else if (j->which == LOCAL_CREATE) {
    p->scope = ops->scope_new(p->st, NULL, NULL);
  } else {
    p->scope = ops->scope_open(p->st, "params");
  }
  if (!p->scope) return NULL;
  char prefix[16];
  snprintf(prefix, sizeof prefix, "p%d.tmp", proc);
  p->tmp = bench_names(TMP_NAMES, prefix, "");
  p->order = bench_order(SHARED_NAMES);
  p->pos = (uint64_t)proc * 7919;
  return p;
}

static void store_work(void *c, uint64_t n) {
  struct store_proc *p = c;
  const struct store_ops *ops = p->job->ops;
  for (uint64_t i = 0; i < n; i++) {
    if (p->job->which == SHARED_LOOKUP) {
      sink += (uintptr_t)ops->find(p->scope, p->job->names[p->order[p->pos++ & (BENCH_ORDER_LEN - 1)]]);
      continue;
    }
    const char *name = p->tmp[p->pos++ % TMP_NAMES];
    if (ops->get(p->scope, name) || ops->erase(p->scope, name))
      bench_die("%s: get-or-create + erase of %s failed", ops->name, name);
  }
}

static void store_teardown(void *c) {
  struct store_proc *p = c;
  p->job->ops->scope_free(p->st, p->scope);
  p->job->ops->close(p->st, false);
}

static void store_case(const char *scenario, enum store_case which, bool shared_only) {
  char **names = bench_names(SHARED_NAMES, "fc", ".w_0");
  struct store_job j[MAX_SUBJECTS];
  struct subject subj[MAX_SUBJECTS] = {{0}};
  struct bstore *st[MAX_SUBJECTS];
  void *params[MAX_SUBJECTS];
  size_t n = 0;
  for (int k = 0; bench_stores[k] && n < MAX_SUBJECTS; k++) {
    const struct store_ops *ops = bench_stores[k];
    if (shared_only && !ops->shared) continue;
    bench_progress("%s: %s, the store", scenario, ops->name);
    j[n] = (struct store_job){.ops = ops, .which = which, .names = names};
    bench_tag(j[n].tag, sizeof j[n].tag, ops->name);
    st[n] = NULL;
    params[n] = NULL;
    if (ops->shared) { /* made once; the processes open it by name */
      if (!(st[n] = ops->create(j[n].tag))) bench_die("%s: cannot create the store", ops->name);
      params[n] = ops->scope_new(st[n], NULL, "params");
      if (which == SHARED_LOOKUP) bench_fill(ops, params[n], names, SHARED_NAMES);
    }
    subj[n] = (struct subject){ops->name, {.setup = store_setup, .work = store_work,
                                           .teardown = store_teardown, .arg = &j[n]}};
    n++;
  }
  per_procs(scenario, subj, n);
  for (size_t k = 0; k < n; k++)
    if (st[k]) {
      j[k].ops->scope_free(st[k], params[k]);
      j[k].ops->close(st[k], true);
    }
  bench_names_free(names, SHARED_NAMES);
}

/* ---- d, e: one hot lock ------------------------------------------------------- */

struct lock_job {
  const struct lock_ops *ops;
  bool exclusive;
  char tag[96];
  void *made; /* what the parent's open returned */
};

struct lock_proc {
  const struct lock_job *job;
  void *ctx; /* this process's open */
};

static void *lock_setup(void *arg, int proc) {
  struct lock_job *j = arg;
  struct lock_proc *p = malloc(sizeof *p);
  if (!p || !(p->ctx = j->ops->open(j->tag, j->made))) return NULL;
  p->job = j;
  return p;
}

static void lock_work(void *c, uint64_t n) {
  struct lock_proc *p = c;
  const struct lock_ops *ops = p->job->ops;
  for (uint64_t i = 0; i < n; i++) {
    ops->lock(p->ctx, p->job->exclusive);
    if (p->job->exclusive) ++*ops->counter(p->ctx);
    else sink += *ops->counter(p->ctx);
    ops->unlock(p->ctx);
  }
}

static void lock_teardown(void *c) {
  struct lock_proc *p = c;
  p->job->ops->close(p->ctx, false);
}

/* The peers: the robust mutex (shared takes are exclusive there) and, for
 * shared takes, a reader-writer lock that is not robust. */
static void lock_case(const char *scenario, bool exclusive) {
  static const struct lock_ops *const lockers[] = {&lock_pdshm, &lock_mutex, &lock_rwlock};
  const size_t n = exclusive ? 2u : 3u;
  struct lock_job j[3];
  struct subject subj[3];
  for (size_t k = 0; k < n; k++) {
    j[k] = (struct lock_job){.ops = lockers[k], .exclusive = exclusive};
    bench_tag(j[k].tag, sizeof j[k].tag, "lock");
    if (!(j[k].made = j[k].ops->open(j[k].tag, NULL)))
      bench_die("%s: cannot make the lock", j[k].ops->name);
    subj[k] = (struct subject){lockers[k]->name, {.setup = lock_setup, .work = lock_work,
                                                   .teardown = lock_teardown, .arg = &j[k]}};
  }
  per_procs(scenario, subj, n);
  for (size_t k = 0; k < n; k++) j[k].ops->close(j[k].made, true);
}

/* ---- f: a trainer-like step ------------------------------------------------- */

static const char *const step_vars[4] = {"x", "h", "y", "loss"};

struct trainer {
  char tag[96];
  char **params;     /* STEP_PARAMS names, each a 4 KiB tensor */
  void *mutex_made;  /* the Paddle-style side's gradient lock */
  struct bstore *st; /* per process: pdshm */
  pdshm_scope *scope;
  pdshm_var *grad, *w;
  void *pp_params, *mutex;
};

static void *pdshm_trainer_setup(void *arg, int proc) {
  struct trainer *t = malloc(sizeof *t);
  *t = *(struct trainer *)arg;
  if (!(t->st = store_pdshm.attach(t->tag)) || !(t->scope = store_pdshm.scope_open(t->st, "params")))
    return NULL;
  t->grad = pdshm_find_var(t->scope, "grad");
  t->w = pdshm_find_var(t->scope, t->params[0]);
  return t->grad && t->w ? t : NULL;
}

static void lock_or_die(pdshm_var *v, int exclusive) {
  int rc = pdshm_var_lock(v, exclusive);
  if (rc) bench_die("pdshm_var_lock: %s", pdshm_strerror(rc));
}

static void pdshm_trainer_work(void *c, uint64_t n) {
  struct trainer *t = c;
  int64_t d = 1024;
  for (uint64_t s = 0; s < n; s++) {
    pdshm_scope *local;
    pdshm_var *v;
    int rc = pdshm_scope_new(t->scope, NULL, &local);
    for (int i = 0; !rc && i < 10; i++)
      sink += (uintptr_t)pdshm_find_var(local, t->params[(s * 10 + (uint64_t)i) % STEP_PARAMS]);
    for (int i = 0; !rc && i < 4; i++)
      if (!(rc = pdshm_var_get(local, step_vars[i], &v))) rc = pdshm_tensor_resize(v, PDSHM_F32, 1, &d);
    if (rc) bench_die("trainer step: %s", pdshm_strerror(rc));
    lock_or_die(t->w, 0);
    sink += *(float *)pdshm_tensor_data(t->w);
    pdshm_var_unlock(t->w);
    lock_or_die(t->grad, 1);
    *(float *)pdshm_tensor_data(t->grad) += 1;
    pdshm_var_unlock(t->grad);
    pdshm_scope_release(local);
  }
}

static void pdshm_trainer_teardown(void *c) {
  struct trainer *t = c;
  pdshm_scope_release(t->scope);
  store_pdshm.close(t->st, false);
}

#if HAVE_CXX
/* The same step on a Paddle-style scope (each process its own parameters)
 * with the gradient under the plain robust mutex. */
static void *paddle_trainer_setup(void *arg, int proc) {
  struct trainer *t = malloc(sizeof *t);
  *t = *(struct trainer *)arg;
  t->pp_params = pp_scope_new(NULL);
  for (int i = 0; i < STEP_PARAMS; i++) pp_resize(pp_var(t->pp_params, t->params[i]), 4096);
  t->mutex = lock_mutex.open(NULL, t->mutex_made);
  return t;
}

static void paddle_trainer_work(void *c, uint64_t n) {
  struct trainer *t = c;
  for (uint64_t s = 0; s < n; s++) {
    void *local = pp_scope_new(t->pp_params);
    for (int i = 0; i < 10; i++)
      sink += (uintptr_t)store_paddle.find(local, t->params[(s * 10 + (uint64_t)i) % STEP_PARAMS]);
    for (int i = 0; i < 4; i++) sink += (uintptr_t)pp_resize(pp_var(local, step_vars[i]), 4096);
    lock_mutex.lock(t->mutex, false);
    sink += *lock_mutex.counter(t->mutex);
    lock_mutex.unlock(t->mutex);
    lock_mutex.lock(t->mutex, true);
    ++*lock_mutex.counter(t->mutex);
    lock_mutex.unlock(t->mutex);
    pp_scope_delete(local);
  }
}
#endif

static void trainer_case(const char *scenario) {
  struct trainer t = {.params = bench_names(STEP_PARAMS, "fc", ".w_0")};
  bench_tag(t.tag, sizeof t.tag, "trainer");
  struct bstore *st = store_pdshm.create(t.tag);
  if (!st) bench_die("pdshm: cannot create the segment");
  pdshm_scope *params = store_pdshm.scope_new(st, NULL, "params");
  int64_t d = 1024;
  for (int i = 0; i <= STEP_PARAMS; i++) {
    pdshm_var *v;
    int rc = pdshm_var_create(params, i < STEP_PARAMS ? t.params[i] : "grad", &v);
    if (rc || (rc = pdshm_tensor_resize(v, PDSHM_F32, 1, &d)))
      bench_die("trainer parameters: %s", pdshm_strerror(rc));
  }
  struct subject subj[2] = {{"pdshm", {.setup = pdshm_trainer_setup, .work = pdshm_trainer_work,
                                       .teardown = pdshm_trainer_teardown, .arg = &t}}};
  size_t n = 1;
#if HAVE_CXX
  t.mutex_made = lock_mutex.open(NULL, NULL);
  subj[n++] = (struct subject){"paddle", {.setup = paddle_trainer_setup,
                                          .work = paddle_trainer_work, .arg = &t}};
#endif
  per_procs(scenario, subj, n);
#if HAVE_CXX
  lock_mutex.close(t.mutex_made, true);
#endif
  store_pdshm.scope_free(st, params);
  store_pdshm.close(st, true);
  bench_names_free(t.params, STEP_PARAMS);
}

void sc_contention_stores(void) {
  store_case("5a lookups, one shared scope (10k names)", SHARED_LOOKUP, false);
  store_case("5b get-or-create + erase, one shared scope", SHARED_CREATE, true);
  store_case("5c get-or-create + erase, own local scopes", LOCAL_CREATE, false);
}

void sc_contention_locks(void) {
  lock_case("5d exclusive lock hand-off, one variable", true);
  lock_case("5e shared locks, one variable", false);
}

void sc_contention_trainer(void) {
  trainer_case("5f trainer step (scope, 10 finds, 4 tensors, 2 locks)");
}

/* ---- 6: reading a 256 MiB tensor from another process ----------------------- */

/* A process that attached the segment copies the tensor (under a shared
 * lock) into a private buffer, and, in turn in the same process, copies a
 * private buffer of the same size into the same destination: the bound is
 * the same read of private memory, same size, same pattern, same moment. */

#define READ_ROUNDS 5

struct reader {
  char tag[96];
  double tensor_gbs[READ_ROUNDS], private_gbs[READ_ROUNDS]; /* written by the child */
};

static void read_once(const void *src, void *dst, pdshm_var *lock) {
  if (lock) lock_or_die(lock, 0);
  memcpy(dst, src, BIG_BYTES);
  if (lock) pdshm_var_unlock(lock);
  __asm__ volatile("" ::: "memory"); /* every copy is made */
}

/* GB/s of copies of src for secs (at least two). */
static double read_rate(const void *src, void *dst, pdshm_var *lock, double secs) {
  double t0 = bench_now(), t;
  int n = 0;
  do {
    read_once(src, dst, lock);
    n++;
  } while ((t = bench_now()) - t0 < secs || n < 2);
  return n * (double)BIG_BYTES / (t - t0) / 1e9;
}

static int reader_main(struct reader *r) {
  struct bstore *st = store_pdshm.attach(r->tag);
  pdshm_scope *scope = st ? store_pdshm.scope_open(st, "params") : NULL;
  pdshm_var *big = scope ? pdshm_find_var(scope, "big") : NULL;
  char *dst = malloc(BIG_BYTES), *mine = malloc(BIG_BYTES);
  if (!big || !dst || !mine) return 1;
  memset(mine, 1, BIG_BYTES);
  memset(dst, 0, BIG_BYTES);
  const void *tensor = pdshm_tensor_data(big);
  read_once(tensor, dst, big); /* maps every page */
  read_once(mine, dst, NULL);
  double secs = bconf.secs > 0.3 ? bconf.secs : 0.3;
  for (int k = 0; k < READ_ROUNDS; k++) { /* the order turns each round */
    if (k % 2) r->private_gbs[k] = read_rate(mine, dst, NULL, secs);
    r->tensor_gbs[k] = read_rate(tensor, dst, big, secs);
    if (!(k % 2)) r->private_gbs[k] = read_rate(mine, dst, NULL, secs);
  }
  return 0;
}

void sc_tensor_read(void) {
  static const char scenario[] = "6 read a 256 MiB tensor, vs the same read of private memory";
  struct reader *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) bench_die("mmap: %s", strerror(errno));
  bench_tag(r->tag, sizeof r->tag, "read");
  bench_progress("%s", scenario);
  struct bstore *st = store_pdshm.create(r->tag);
  if (!st) bench_die("pdshm: cannot create the segment");
  pdshm_scope *params = store_pdshm.scope_new(st, NULL, "params");
  pdshm_var *big;
  int64_t d = BIG_BYTES / 4;
  int rc = pdshm_var_create(params, "big", &big);
  if (rc || (rc = pdshm_tensor_resize(big, PDSHM_F32, 1, &d)))
    bench_die("the 256 MiB tensor: %s", pdshm_strerror(rc));
  memset(pdshm_tensor_data(big), 1, BIG_BYTES);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) bench_die("fork: %s", strerror(errno));
  if (pid == 0) _exit(reader_main(r));
  int status;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
    bench_die("the reading process failed");
  store_pdshm.scope_free(st, params);
  store_pdshm.close(st, true);
  double ratio[READ_ROUNDS];
  for (int k = 0; k < READ_ROUNDS; k++) ratio[k] = r->tensor_gbs[k] / r->private_gbs[k];
  result_add(scenario, "1", "pdshm", bench_median(r->tensor_gbs, READ_ROUNDS), U_GBS);
  result_add(scenario, "1", "private", bench_median(r->private_gbs, READ_ROUNDS), U_GBS);
  ratio_add(scenario, "1", "pdshm", bench_median(ratio, READ_ROUNDS));
  munmap(r, sizeof *r);
}
