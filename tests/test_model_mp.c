/* test_model_mp.c - the seed model across processes and threads: trainers
 * attach a coordinator's segment, race on shared names, churn local scopes,
 * die by SIGKILL; afterwards every byte is back and every invariant holds.
 * pdshm_var_wait is woken by another process's exclusive unlock and resize,
 * without spinning. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define TRAINERS 4
#define NAMES 64
#define STEPS 200
#define PARAM_FLOATS 1024
#define SEC 1000000000ll

static char seg_name[PDSHM_SEG_NAME_MAX + 1];
static pdshm_seg *seg;
static pdshm_scope *root;

static void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("mp"));
  seg = tu_create_as(seg_name, 16u << 20, 0);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
}

static void teardown(void) {
  if (root) pdshm_scope_release(root);
  if (seg) pdshm_detach(seg);
  tu_cleanup();
}

static const char *our_name(void) { return seg_name; }

static pdshm_stats stats_now(void) {
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  return st;
}

static uint64_t used_now(void) { return stats_now().used; }

/* The coordinator's parameters: "params" with W (PARAM_FLOATS floats, W[i]=i). */
static void fill_params(void) {
  pdshm_scope *p;
  pdshm_var *w;
  int64_t d = PARAM_FLOATS;
  ck_assert_int_eq(pdshm_scope_new(root, "params", &p), 0);
  ck_assert_int_eq(pdshm_var_create(p, "W", &w), 0);
  ck_assert_int_eq(pdshm_tensor_resize(w, PDSHM_F32, 1, &d), 0);
  ck_assert_int_eq(pdshm_var_set_label(w, "parameter"), 0);
  float *f = pdshm_tensor_data(w);
  for (int i = 0; i < PARAM_FLOATS; i++) f[i] = (float)i;
  pdshm_scope *race;
  ck_assert_int_eq(pdshm_scope_new(root, "race", &race), 0);
  pdshm_scope_release(race);
  pdshm_scope_release(p);
}

/* ---- a trainer ------------------------------------------------------------------ */

struct trainer_args {
  const char *name;
  int k, out; /* pipe to report to the parent */
  int steps;
};

/* What a trainer reports: per shared name the generation get-or-create gave
 * it, and which strict creates it won. */
struct report {
  uint64_t gen[NAMES];
  uint64_t won;
  int params_ok;
};

static int check_params(pdshm_scope *params) {
  const float *f = pdshm_tensor_data(pdshm_find_var(params, "W"));
  for (int i = 0; f && i < PARAM_FLOATS; i++)
    if (f[i] != (float)i) return 0;
  return f != NULL;
}

static int churn(pdshm_scope *params, int steps) {
  for (int s = 0; s < steps; s++) {
    pdshm_scope *local;
    if (pdshm_scope_new(params, NULL, &local)) return 1;
    for (int v = 0; v < 10; v++) {
      char n[16];
      pdshm_var *var;
      int64_t d = 1024;
      snprintf(n, sizeof n, "t%d", v);
      if (pdshm_var_create(local, n, &var) || pdshm_tensor_resize(var, PDSHM_F32, 1, &d)) return 1;
      memset(pdshm_tensor_data(var), v, 4096);
    }
    if (!pdshm_find_var(local, "W")) return 1;
    if (pdshm_scope_release(local)) return 1;
  }
  return 0;
}

static int race(pdshm_scope *r, struct report *rep) {
  for (int i = 0; i < NAMES; i++) {
    char n[32];
    pdshm_var *v;
    snprintf(n, sizeof n, "shared-%d", i);
    if (pdshm_var_get(r, n, &v)) return 1;
    rep->gen[i] = pdshm_var_ref(v).gen;
    snprintf(n, sizeof n, "strict-%d", i);
    int rc = pdshm_var_create(r, n, &v);
    if (rc == 0) rep->won |= 1ull << i;
    else if (rc != PDSHM_EEXIST) return 1;
  }
  return 0;
}

static int trainer(void *arg) {
  struct trainer_args *a = arg;
  pdshm_seg *s;
  pdshm_scope *params, *r;
  struct report rep = {0};
  if (pdshm_attach(a->name, NULL, &s)) return 10;
  if (pdshm_scope_open(s, "params", &params) || pdshm_scope_open(s, "race", &r)) return 11;
  rep.params_ok = check_params(params);
  if (race(r, &rep)) return 12;
  if (churn(params, a->steps)) return 13;
  if (a->out >= 0 && write(a->out, &rep, sizeof rep) != sizeof rep) return 14;
  pdshm_scope_release(r);
  pdshm_scope_release(params);
  return pdshm_detach(s) ? 15 : 0;
}

/* ---- the tests --------------------------------------------------------------------- */

START_TEST(trainers_share_and_clean_up) {
  fill_params();
  uint64_t base = used_now();
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  struct trainer_args a[TRAINERS];
  pid_t pid[TRAINERS];
  for (int k = 0; k < TRAINERS; k++) {
    a[k] = (struct trainer_args){.name = our_name(), .k = k, .out = p[1], .steps = STEPS};
    pid[k] = tu_fork(trainer, &a[k]);
  }
  close(p[1]);
  struct report rep[TRAINERS];
  for (int k = 0; k < TRAINERS; k++)
    ck_assert_int_eq(read(p[0], &rep[k], sizeof rep[k]), (ssize_t)sizeof rep[k]);
  for (int k = 0; k < TRAINERS; k++) ck_assert_int_eq(tu_wait(pid[k]), 0);
  uint64_t won = 0;
  for (int k = 0; k < TRAINERS; k++) {
    ck_assert_int_eq(rep[k].params_ok, 1);
    ck_assert_uint_eq(won & rep[k].won, 0); /* never two winners */
    won |= rep[k].won;
    for (int i = 0; i < NAMES; i++) ck_assert_uint_eq(rep[k].gen[i], rep[0].gen[i]);
  }
  ck_assert_uint_eq(won, ~0ull); /* exactly one winner per name */
  ck_assert_int_eq(pdshm_scope_unlink(root, "race"), 0);
  pdshm_scope *again;
  ck_assert_int_eq(pdshm_scope_new(root, "race", &again), 0); /* as before the run */
  pdshm_scope_release(again);
  ck_assert_uint_eq(used_now(), base);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

static void dump_blocks(void) {
  const struct pdshm_hdr *h = seg->hdr;
  for (pdshm_off_t at = h->arena_off; at < h->arena_end;) {
    const struct pdshm_blk *b = PDSHM_AT(seg->base, at, const struct pdshm_blk);
    uint64_t w = atomic_load(&b->word);
    if (pdshm__blk_state(w) == PDSHM_BLK_USED || (pdshm__blk_state(w) == PDSHM_BLK_CACHED && !b->owner))
      fprintf(stderr, "%s %#llx size %llu type %u owner %u\n", pdshm__blk_state(w) == 1 ? "used" : "CACHED", (unsigned long long)at,
              (unsigned long long)pdshm__blk_size(w), b->type, b->owner);
    at += pdshm__blk_size(w);
  }
  for (unsigned i = 0; i < h->max_procs; i++) {
    struct pdshm_slot *sl = pdshm__slot(seg, i);
    for (unsigned k = 0; k < PDSHM_LANES; k++)
      if (sl->lane[k].todo.destroy || sl->lane[k].todo.chain || sl->lane[k].j.state)
        fprintf(stderr, "slot %u lane %u: todo %llx/%llu chain %llx j %u\n", i, k,
                (unsigned long long)sl->lane[k].todo.destroy,
                (unsigned long long)sl->lane[k].todo.phase,
                (unsigned long long)sl->lane[k].todo.chain, sl->lane[k].j.state);
  }
}

START_TEST(killed_trainers_are_reaped) {
  fill_params();
  pdshm_scope *r;
  ck_assert_int_eq(pdshm_scope_open(seg, "race", &r), 0);
  pdshm_var *v;
  for (int i = 0; i < NAMES; i++) { /* the names exist: the race adds nothing */
    char n[32];
    snprintf(n, sizeof n, "shared-%d", i);
    ck_assert_int_eq(pdshm_var_get(r, n, &v), 0);
    snprintf(n, sizeof n, "strict-%d", i);
    ck_assert_int_eq(pdshm_var_get(r, n, &v), 0);
  }
  uint64_t base = used_now();
  srand(7);
  for (int round = 0; round < 8; round++) {
    struct trainer_args a[TRAINERS];
    pid_t pid[TRAINERS];
    for (int k = 0; k < TRAINERS; k++) {
      a[k] = (struct trainer_args){.name = our_name(), .k = k, .out = -1, .steps = 100000};
      pid[k] = tu_fork(trainer, &a[k]);
    }
    usleep(20000 + (useconds_t)(rand() % 30000));
    for (int k = 0; k < TRAINERS; k++) kill(pid[k], SIGKILL);
    for (int k = 0; k < TRAINERS; k++) ck_assert_int_eq(tu_wait(pid[k]), 128 + SIGKILL);
    /* On a loaded machine a trainer may die before it attached: wait until
     * no slot but ours reads alive, then reap whatever did attach. */
    for (int ms = 0; ms < 5000 && stats_now().procs_alive > 1; ms++) usleep(1000);
    ck_assert_uint_eq(stats_now().procs_alive, 1);
    unsigned reaped = 0;
    ck_assert_int_eq(pdshm_reap(seg, &reaped), 0);
    ck_assert_uint_le(reaped, TRAINERS);
    ck_assert_uint_eq(stats_now().procs_dead, 0);
    uint64_t u1 = used_now();
    int c1 = pdshm_check(seg, stderr);
    uint64_t u2 = used_now();
    if (c1 || u1 != base || u2 != base) {
      fprintf(stderr, "round %d: u1 %llu c1 %d u2 %llu base %llu\n", round, (unsigned long long)u1, c1,
              (unsigned long long)u2, (unsigned long long)base);
      dump_blocks();
    }
    ck_assert_int_eq(c1, 0);
    ck_assert_uint_eq(u2, base);
  }
  float *w = pdshm_tensor_data(pdshm_find_var(root, "W"));
  ck_assert_ptr_null(w); /* W lives in params, not in the root */
  pdshm_scope *params;
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
  ck_assert_int_eq(check_params(params), 1); /* nothing committed was lost */
  pdshm_scope_release(params);
  pdshm_scope_release(r);
}
END_TEST

/* ---- threads racing get / erase / find in one scope ---------------------------------- */

struct thr {
  pdshm_scope *s;
  pdshm_var *fixed;
  int id, bad;
  _Atomic int *stop;
};

static void *thr_writer(void *arg) {
  struct thr *t = arg;
  char n[32];
  for (int i = 0; !*t->stop; i++) {
    pdshm_var *v;
    snprintf(n, sizeof n, "n%d", t->id * 8 + i % 8); /* each writer its own names */
    int rc = pdshm_var_get(t->s, n, &v);
    if (rc || strcmp(pdshm_var_name(v), n)) {
      fprintf(stderr, "writer: get %s: %d %s\n", n, rc, rc ? "" : pdshm_var_name(v));
      t->bad++;
    }
    rc = pdshm_var_erase(t->s, n);
    if (rc && rc != PDSHM_ENOENT) {
      fprintf(stderr, "writer: erase %s: %d\n", n, rc);
      t->bad++;
    }
  }
  return NULL;
}

/* A lookup racing erase returns the old variable or NULL, never garbage.
 * (Its name cannot be compared afterwards: the record may have been reused
 * for another name since, which is the caller's race.) */
static void *thr_reader(void *arg) {
  struct thr *t = arg;
  char n[32];
  const uint8_t *lo = (const uint8_t *)seg->base, *hi = lo + seg->size;
  for (int i = 0; !*t->stop; i++) {
    snprintf(n, sizeof n, "n%d", i % 16);
    const uint8_t *v = (const uint8_t *)pdshm_find_var(t->s, n);
    if (v && (v < lo || v >= hi || (v - lo) % PDSHM_ALIGN)) {
      fprintf(stderr, "reader: %s gave %p\n", n, (const void *)v);
      t->bad++;
    }
    if (pdshm_find_var(t->s, "fixed") != t->fixed) {
      fprintf(stderr, "reader: fixed not found\n");
      t->bad++;
    }
  }
  return NULL;
}

START_TEST(threads_race_in_one_scope) {
  pdshm_scope *s;
  pdshm_var *fixed;
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &s), 0);
  ck_assert_int_eq(pdshm_var_create(s, "fixed", &fixed), 0);
  _Atomic int stop = 0;
  pthread_t th[4];
  struct thr t[4];
  for (int i = 0; i < 4; i++) {
    t[i] = (struct thr){.s = s, .fixed = fixed, .id = i, .stop = &stop};
    pthread_create(&th[i], NULL, i < 2 ? thr_writer : thr_reader, &t[i]);
  }
  sleep(1);
  stop = 1;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    ck_assert_int_eq(t[i].bad, 0);
  }
  ck_assert_ptr_eq(pdshm_find_var(s, "fixed"), fixed);
  pdshm_scope_release(s);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

/* A stopped process keeps its holds; the fork child cannot use the parent's. */
static int stop_child(void *arg) {
  (void)arg;
  pdshm_seg *s;
  pdshm_scope *r, *l;
  if (pdshm_attach(our_name(), NULL, &s) || pdshm_root(s, &r) || pdshm_scope_new(r, NULL, &l))
    return 1;
  raise(SIGSTOP);
  return pdshm_scope_release(l) || pdshm_scope_release(r) || pdshm_detach(s);
}

START_TEST(stopped_is_not_dead) {
  uint64_t base = used_now();
  pid_t pid = tu_fork(stop_child, NULL);
  int st;
  waitpid(pid, &st, WUNTRACED);
  ck_assert(WIFSTOPPED(st));
  unsigned reaped = 9;
  ck_assert_int_eq(pdshm_reap(seg, &reaped), 0);
  ck_assert_uint_eq(reaped, 0);
  ck_assert_uint_gt(used_now(), base);
  kill(pid, SIGCONT);
  ck_assert_int_eq(tu_wait(pid), 0);
  ck_assert_uint_eq(used_now(), base);
}
END_TEST

static int forked_use(void *arg) {
  pdshm_scope *r2;
  pdshm_var *v;
  if (pdshm_root(seg, &r2) != PDSHM_EFORKED) return 1;
  if (pdshm_var_get(root, "x", &v) != PDSHM_EFORKED) return 2;
  if (pdshm_find_var(root, "kept") != NULL) return 3;
  (void)arg;
  return pdshm_detach(seg) == PDSHM_EFORKED ? 0 : 4;
}

START_TEST(fork_child_inherits_nothing) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(root, "kept", &v), 0);
  uint64_t base = used_now();
  ck_assert_int_eq(tu_wait(tu_fork(forked_use, NULL)), 0);
  ck_assert_uint_eq(used_now(), base);
  ck_assert_ptr_eq(pdshm_find_var(root, "kept"), v);
}
END_TEST

/* Variable locks whose holders die: the next taker gets them promptly. */
static int lock_and_die(void *arg) {
  pdshm_seg *s;
  pdshm_scope *r;
  pdshm_var *v;
  if (pdshm_attach(our_name(), NULL, &s) || pdshm_root(s, &r)) return 1;
  if (!(v = pdshm_find_var(r, "guarded"))) return 2;
  if (pdshm_var_lock(v, (int)(intptr_t)arg)) return 3;
  raise(SIGKILL);
  return 4;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

START_TEST(var_lock_holders_die) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(root, "guarded", &v), 0);
  for (intptr_t excl = 1; excl >= 0; excl--) {
    ck_assert_int_eq(tu_wait(tu_fork(lock_and_die, (void *)excl)), 128 + SIGKILL);
    double t0 = seconds();
    ck_assert_int_eq(pdshm_var_lock(v, 1), 0); /* exclusive, past the dead holder */
    ck_assert_double_lt(seconds() - t0, 1.0);
    ck_assert_int_eq(pdshm_var_unlock(v), 0);
  }
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

/* Exclusive excludes shared and exclusive across processes. */
static int contend_lock(void *arg) {
  pdshm_seg *s;
  pdshm_scope *r;
  if (pdshm_attach(our_name(), NULL, &s) || pdshm_root(s, &r)) return 1;
  pdshm_var *v = pdshm_find_var(r, "counter");
  int64_t *n = pdshm_tensor_data(v);
  for (int i = 0; i < 2000; i++) {
    if (pdshm_var_lock(v, 1)) return 2;
    int64_t x = *n;
    if (i % 2) sched_yield();
    *n = x + 1;
    if (pdshm_var_unlock(v)) return 3;
    if (pdshm_var_lock(v, 0)) return 4;
    if (pdshm_var_unlock(v)) return 5;
  }
  (void)arg;
  return pdshm_detach(s) ? 6 : 0;
}

START_TEST(var_lock_excludes) {
  pdshm_var *v;
  int64_t one = 1;
  ck_assert_int_eq(pdshm_var_create(root, "counter", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_I64, 1, &one), 0);
  *(int64_t *)pdshm_tensor_data(v) = 0;
  uint64_t ver = pdshm_var_version(v);
  pid_t a = tu_fork(contend_lock, NULL), b = tu_fork(contend_lock, NULL);
  ck_assert_int_eq(tu_wait(a), 0);
  ck_assert_int_eq(tu_wait(b), 0);
  ck_assert_int_eq(*(int64_t *)pdshm_tensor_data(v), 4000);
  ck_assert_uint_eq(pdshm_var_version(v), ver + 4000);
}
END_TEST

/* Threads of one process: each has its own table of held locks (new
 * threads reuse the exited ones' memory), an exclusive lock excludes the
 * other threads, and a lock one thread holds is not another's to release. */
struct lock_thr {
  pdshm_var *v;
  int64_t *count;
  int rounds, bad;
};

static void *thr_locker(void *arg) {
  struct lock_thr *t = arg;
  for (int i = 0; i < t->rounds; i++) {
    int excl = i % 4 != 0;
    if (pdshm_var_lock(t->v, excl)) {
      t->bad++;
      continue;
    }
    if (excl) ++*t->count; /* a plain increment: the lock must exclude */
    if (pdshm_var_unlock(t->v)) t->bad++;
  }
  return NULL;
}

static void *thr_unlock_foreign(void *arg) {
  struct lock_thr *t = arg;
  if (pdshm_var_unlock(t->v) != PDSHM_EPERM) t->bad++;
  return NULL;
}

START_TEST(threads_take_variable_locks) {
  pdshm_var *v;
  int64_t one = 1;
  ck_assert_int_eq(pdshm_var_create(root, "tcount", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_I64, 1, &one), 0);
  int64_t *count = pdshm_tensor_data(v);
  *count = 0;
  uint64_t ver = pdshm_var_version(v);
  for (int wave = 0; wave < 3; wave++) { /* later waves: in the exited threads' place */
    pthread_t th[4];
    struct lock_thr t[4];
    for (int i = 0; i < 4; i++) {
      t[i] = (struct lock_thr){.v = v, .count = count, .rounds = 2000};
      ck_assert_int_eq(pthread_create(&th[i], NULL, thr_locker, &t[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
      pthread_join(th[i], NULL);
      ck_assert_int_eq(t[i].bad, 0);
    }
  }
  ck_assert_int_eq(*count, 3 * 4 * 1500);
  ck_assert_uint_eq(pdshm_var_version(v), ver + 3 * 4 * 1500);
  ck_assert_int_eq(pdshm_var_lock(v, 1), 0);
  struct lock_thr foreign = {.v = v};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, thr_unlock_foreign, &foreign), 0);
  pthread_join(th, NULL);
  ck_assert_int_eq(foreign.bad, 0);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

/* ---- processes editing variables that others erase -------------------------------- */

#define EDITORS 3
#define EDIT_NS 300000000ull /* each editor's run */

/* Gets, edits and erases the variables v0..v15 of "p" at random, as two
 * trainers sharing a scope would: the pdshm_var * of a get is often erased
 * by another editor before the edit.  Any answer but success, ESTALE (the
 * variable went meanwhile) and ENOENT (erasing what is gone) fails. */
static int editor(void *arg) {
  const unsigned *seed = arg;
  pdshm_seg *s;
  pdshm_scope *p;
  if (pdshm_attach(our_name(), NULL, &s)) return 10;
  if (pdshm_scope_open(s, "p", &p)) return 11;
  unsigned r = *seed;
  const uint64_t end = tu_now_ns() + EDIT_NS;
  while (tu_now_ns() < end) {
    char nm[8];
    pdshm_var *v;
    r = r * 1103515245u + 12345u;
    snprintf(nm, sizeof nm, "v%u", (r >> 8) % 16);
    unsigned what = (r >> 16) % 6;
    int rc = what == 5 ? pdshm_var_erase(p, nm) : pdshm_var_get(p, nm, &v);
    if (what == 5) {
      if (rc && rc != PDSHM_ENOENT) return 20;
      continue;
    }
    if (rc) return 21;
    int64_t d = 1 + (int64_t)((r >> 4) % 4096);
    if (what <= 1) rc = pdshm_tensor_resize(v, PDSHM_F32, 1, &d);
    else if (what == 2) rc = pdshm_var_set_label(v, (r & 1) ? "a" : "bb");
    else if (what == 3) rc = pdshm_var_add_reader(v, (r & 1) ? "op1" : "op2");
    else if (!(rc = pdshm_var_lock(v, (int)(r & 1)))) rc = pdshm_var_unlock(v);
    if (rc && rc != PDSHM_ESTALE) return 22;
  }
  pdshm_scope_release(p);
  return pdshm_detach(s) ? 15 : 0;
}

START_TEST(processes_edit_variables_others_erase) {
  pdshm_scope *p;
  const uint64_t base = used_now();
  ck_assert_int_eq(pdshm_scope_new(root, "p", &p), 0);
  pid_t pid[EDITORS];
  unsigned seed[EDITORS];
  for (int k = 0; k < EDITORS; k++) {
    seed[k] = 1234567u * (unsigned)(k + 1);
    pid[k] = tu_fork(editor, &seed[k]);
  }
  for (int k = 0; k < EDITORS; k++) ck_assert_int_eq(tu_wait(pid[k]), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  /* Everything the editors left is reachable from "p": it all goes with it. */
  ck_assert_int_eq(pdshm_scope_unlink(root, "p"), 0);
  ck_assert_int_eq(pdshm_scope_release(p), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_uint_eq(used_now(), base);
}
END_TEST

/* A pdshm_var * whose variable was erased meanwhile names a record that the
 * eraser's next variable takes again (its lane's cache gives back what it
 * just took): an edit through it is that new variable's (pdshm.h), though
 * the new one lives in a scope its owner holds alone.  So the owner cannot
 * write its tensor through pdshm_tensor_data, whose buffer the stale resize
 * frees; through a pin it can: the resize leaves the pinned buffer to the pin
 * (an orphan), and the unpin frees it.  test_torture's workers write their
 * own tensors so, beside w_shared's stale edits. */
static int stale_resizer(void *arg) {
  pdshm_seg *s;
  pdshm_scope *sh;
  pdshm_var *v;
  int64_t d = 16;
  (void)arg;
  if (pdshm_attach(our_name(), NULL, &s)) return 10;
  if (pdshm_scope_open(s, "shared", &sh) || pdshm_var_get(sh, "v", &v)) return 11;
  raise(SIGSTOP); /* meanwhile "v" is erased and its record taken again */
  int rc = pdshm_tensor_resize(v, PDSHM_F32, 1, &d);
  pdshm_scope_release(sh);
  return rc ? 20 : pdshm_detach(s) ? 15 : 0;
}

START_TEST(stale_resize_of_a_private_variable_spares_its_pin) {
  const uint64_t base = used_now();
  pdshm_scope *sh, *mine;
  pdshm_var *v, *w;
  pdshm_pin *pin;
  pdshm_tensor_view view;
  int64_t big = 65536; /* 256 KiB: a buffer of the heap's, not of a lane cache */
  int st;
  ck_assert_int_eq(pdshm_scope_new(root, "shared", &sh), 0);
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &mine), 0);
  ck_assert_int_eq(pdshm_var_get(sh, "v", &v), 0);
  pid_t pid = tu_fork(stale_resizer, NULL);
  ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
  ck_assert(WIFSTOPPED(st));
  const pdshm_varref was = pdshm_var_ref(v);
  ck_assert_int_eq(pdshm_var_erase(sh, "v"), 0);
  ck_assert_int_eq(pdshm_var_get(mine, "w", &w), 0);
  ck_assert_uint_eq(pdshm_var_ref(w).off, was.off); /* the erased record, taken again */
  ck_assert_int_eq(pdshm_tensor_resize(w, PDSHM_F32, 1, &big), 0);
  ck_assert_int_eq(pdshm_tensor_pin(w, &pin, &view), 0);
  ck_assert_uint_eq(view.nbytes, 4 * (uint64_t)big);
  kill(pid, SIGCONT);
  ck_assert_int_eq(tu_wait(pid), 0);
  ck_assert_uint_eq(pdshm_tensor_nbytes(w), 64); /* the stale resize was w's */
  ck_assert_ptr_ne(pdshm_tensor_data(w), view.data);
  memset(view.data, 0x5a, view.nbytes); /* the orphan is still the pin's */
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_tensor_unpin(pin), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(mine), 0);
  ck_assert_int_eq(pdshm_scope_unlink(root, "shared"), 0);
  ck_assert_int_eq(pdshm_scope_release(sh), 0);
  ck_assert_uint_eq(used_now(), base);
}
END_TEST

/* ---- pdshm_var_wait across processes ------------------------------------------------------------------ */

static uint64_t cpu_ns(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * SEC +
         (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

START_TEST(var_wait_times_out) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(root, "w", &v), 0);
  uint64_t t0 = tu_now_ns(), c0 = cpu_ns();
  ck_assert_int_eq(pdshm_var_wait(v, pdshm_var_version(v), 200000000), PDSHM_ETIMEDOUT);
  uint64_t dt = tu_now_ns() - t0, dc = cpu_ns() - c0;
  ck_assert_uint_ge(dt, 200000000);
  ck_assert_msg(dc < 20000000, "waiting 200 ms took %llu ns of CPU", (unsigned long long)dc);
  /* a version that already differs returns at once */
  ck_assert_int_eq(pdshm_var_wait(v, pdshm_var_version(v) + 1, 0), 0);
  ck_assert_int_eq(pdshm_var_wait(NULL, 0, 0), PDSHM_EINVAL);
}
END_TEST

static int kid_bump(void *arg) {
  int how = *(int *)arg;
  pdshm_seg *s;
  pdshm_scope *r;
  pdshm_var *v;
  if (pdshm_attach(seg_name, NULL, &s) || pdshm_root(s, &r)) return 2;
  if (!(v = pdshm_find_var(r, "w"))) return 3;
  usleep(100000);
  if (how == 0) {
    if (pdshm_var_lock(v, 1) || pdshm_var_unlock(v)) return 4;
  } else {
    int64_t d = 1000;
    if (pdshm_tensor_resize(v, PDSHM_F32, 1, &d)) return 5;
  }
  pdshm_scope_release(r);
  pdshm_detach(s);
  return 0;
}

static void var_wait_woken(int how) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(root, "w", &v), 0);
  uint64_t seen = pdshm_var_version(v);
  pid_t pid = tu_spawn(kid_bump, &how);
  uint64_t t0 = tu_now_ns(), c0 = cpu_ns();
  ck_assert_int_eq(pdshm_var_wait(v, seen, 10 * SEC), 0);
  uint64_t dt = tu_now_ns() - t0, dc = cpu_ns() - c0;
  ck_assert_uint_ne(pdshm_var_version(v), seen);
  ck_assert_msg(dt < 5 * SEC, "woken after %llu ns", (unsigned long long)dt);
  ck_assert_msg(dc < 20000000, "waiting took %llu ns of CPU", (unsigned long long)dc);
  ck_assert_int_eq(tu_wait(pid), 0);
}
START_TEST(var_wait_woken_by_exclusive_unlock) { var_wait_woken(0); }
END_TEST
START_TEST(var_wait_woken_by_resize) { var_wait_woken(1); }
END_TEST

static Suite *mp_suite(void) {
  Suite *s = suite_create("model across processes");
  TCase *tc = tcase_create("processes");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, trainers_share_and_clean_up);
  tcase_add_test(tc, killed_trainers_are_reaped);
  tcase_add_test(tc, threads_race_in_one_scope);
  tcase_add_test(tc, stopped_is_not_dead);
  tcase_add_test(tc, fork_child_inherits_nothing);
  tcase_add_test(tc, var_lock_holders_die);
  tcase_add_test(tc, var_lock_excludes);
  tcase_add_test(tc, threads_take_variable_locks);
  tcase_add_test(tc, processes_edit_variables_others_erase);
  tcase_add_test(tc, stale_resize_of_a_private_variable_spares_its_pin);
  tcase_add_test(tc, var_wait_times_out);
  tcase_add_test(tc, var_wait_woken_by_exclusive_unlock);
  tcase_add_test(tc, var_wait_woken_by_resize);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(mp_suite()) ? 1 : 0; }
