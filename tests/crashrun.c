/* crashrun.c - the crash suites' world, children and verdicts (crashrun.h). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "crashrun.h"

char crash_seg_name[PDSHM_SEG_NAME_MAX + 1];
struct crash_totals *crash_totals;

int crash_main(Suite *s) {
  crash_totals = mmap(NULL, sizeof *crash_totals, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (crash_totals == MAP_FAILED) return EXIT_FAILURE;
  int failed = tu_run(s);
  printf("crash: %llu (op, k) crash points passed, %llu killed at and verified\n",
         (unsigned long long)crash_totals->passed, (unsigned long long)crash_totals->tried);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

void crash_setup(void) {
  snprintf(crash_seg_name, sizeof crash_seg_name, "%s", tu_name("crash"));
}
void crash_teardown(void) { tu_cleanup(); }

/* ---- the committed world ---------------------------------------------------------- */

static void fill(pdshm_var *v, unsigned seed) {
  uint8_t *p = pdshm_tensor_data(v);
  for (size_t i = 0; i < pdshm_tensor_nbytes(v); i++) p[i] = (uint8_t)(i * 31 + seed);
}

static pdshm_var *tensor(pdshm_scope *s, const char *name, pdshm_dtype dt, int ndim,
                         const int64_t *dims) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(s, name, &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, dt, ndim, dims), 0);
  fill(v, (unsigned)strlen(name));
  return v;
}

static void kid(pdshm_scope *p, const char *name, const char *var, int64_t elems) {
  pdshm_scope *s;
  ck_assert_int_eq(pdshm_scope_new(p, name, &s), 0);
  if (var) tensor(s, var, PDSHM_F32, 1, &elems);
  ck_assert_int_eq(pdshm_scope_release(s), 0);
}

pdshm_seg *crash_world(void) {
  pdshm_options o = {.size = CRASH_SEG_SIZE, .max_procs = 8, .max_locks = PDSHM_LOCKS_MIN,
                     .max_size = CRASH_SEG_MAX};
  pdshm_seg *seg = tu_create_opts(crash_seg_name, &o);
  pdshm_scope *root, *params, *anon, *full, *sub;
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, "params", &params), 0);
  pdshm_var *w = tensor(params, "w", PDSHM_F32, 2, (int64_t[]){32, 32}), *v;
  ck_assert_int_eq(pdshm_var_set_label(w, "parameter"), 0);
  ck_assert_int_eq(pdshm_var_add_reader(w, "fc"), 0);
  ck_assert_int_eq(pdshm_var_add_writer(w, "sgd"), 0);
  ck_assert_int_eq(pdshm_var_lock(w, 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(w), 0);
  tensor(params, "b", PDSHM_F32, 1, (int64_t[]){32});
  ck_assert_int_eq(pdshm_var_create(params, "e", &v), 0);
  tensor(params, "big", PDSHM_U8, 1, (int64_t[]){320 << 10});
  v = tensor(params, "lk", PDSHM_I64, 1, (int64_t[]){8});
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  kid(params, "fc", "w2", 16384);
  ck_assert_int_eq(pdshm_scope_new(params, "sub", &sub), 0);
  tensor(sub, "s", PDSHM_F64, 1, (int64_t[]){100});
  kid(sub, "deep", "d", 1000);
  ck_assert_int_eq(pdshm_scope_release(sub), 0);
  ck_assert_int_eq(pdshm_scope_new(params, NULL, &anon), 0);
  tensor(anon, "tmp", PDSHM_U8, 1, (int64_t[]){256});
  ck_assert_int_eq(pdshm_scope_new(root, "full", &full), 0);
  for (int i = 0; i < 5; i++) {
    char n[8];
    snprintf(n, sizeof n, "a%d", i);
    ck_assert_int_eq(pdshm_var_create(full, n, &v), 0);
  }
  ck_assert_int_eq(pdshm_scope_release(full), 0);
  return seg; /* root, params and anon stay held until detach */
}

/* ---- one child --------------------------------------------------------------------- */

const char CRASH_PREPARED[] = "test.prepared";

int crash_child_main(void *arg) {
  const struct plan *pl = arg;
  struct cx c = {0};
  if (pl->op->arm_first || pl->point == CRASH_PREPARED) pdshm__crash_arm(pl->k, pl->point);
  if (pdshm_attach(crash_seg_name, NULL, &c.seg)) return 10;
  if (pl->op->prep && pl->op->prep(&c)) return 11;
  char byte = 1;
  if (pl->ready && (write(pl->ready, &byte, 1) != 1 || read(pl->go, &byte, 1) != 1)) return 16;
  pdshm__crashpoint(CRASH_PREPARED);
  if (!pl->op->arm_first) pdshm__crash_arm(pl->k, pl->point);
  if (pl->op->run(&c)) return 12;
  uint64_t hits = pdshm__crash_hits(); /* the names are read before any other hit */
  if (write(pl->fd, &hits, sizeof hits) != sizeof hits) return 13;
  for (uint64_t i = 1; i <= hits; i++) {
    const char *n = pdshm__crash_name(i);
    char line[64] = {0};
    snprintf(line, sizeof line, "%s", n ? n : "?");
    if (write(pl->fd, line, sizeof line) != sizeof line) return 14;
  }
  raise(SIGKILL);
  return 15;
}

void crash_outcome_free(struct outcome *o) {
  free(o->before);
  free(o->after);
  free(o->names);
  memset(o, 0, sizeof *o);
}

void crash_read_report(int fd, struct outcome *o) {
  uint64_t hits;
  if (read(fd, &hits, sizeof hits) != sizeof hits) return;
  o->finished = true;
  o->hits = hits;
  o->names = calloc(hits + 1, sizeof *o->names);
  for (uint64_t i = 0; i < hits; i++)
    if (read(fd, o->names[i], sizeof o->names[i]) != sizeof o->names[i]) break;
}

void crash_child_run(struct plan pl, struct outcome *o) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pl.fd = fds[1];
  pid_t pid = tu_spawn(crash_child_main, &pl);
  close(fds[1]);
  crash_read_report(fds[0], o);
  close(fds[0]);
  int st = tu_wait(pid);
  ck_assert_msg(st == 128 + SIGKILL, "%s k=%llu: the child ended with %d", pl.op->name,
                (unsigned long long)pl.k, st);
}

void crash_reap_verify(pdshm_seg *seg, const char *what, uint64_t k) {
  char why[1024];
  int rc = snap_reap_all(seg);
  ck_assert_msg(rc == 0, "%s k=%llu: reap: %s (%s)", what, (unsigned long long)k,
                pdshm_strerror(rc), pdshm_last_error());
  ck_assert_msg(!snap_clean(seg, why, sizeof why), "%s k=%llu: %s", what,
                (unsigned long long)k, why);
}

/* A live process at work next to the dead before anybody reaps them: it
 * takes every free lock entry for scopes of its own, locking each (so that
 * an entry a pending journal still names would be caught: see
 * lock_entry_given_back_by_a_killed_process), opens and locks what the dead
 * may have held, and checks the segment; then it lets everything go. */
void crash_bystander(pdshm_seg *seg, const char *what, uint64_t k) {
  pdshm_scope *full, *params, *s[PDSHM_LOCKS_MIN];
  pdshm_var *v;
  char *rep = NULL;
  size_t len = 0;
  int n = 0, rc = 0;
  ck_assert_int_eq(pdshm_scope_open(seg, "full", &full), 0);
  while (n < (int)PDSHM_LOCKS_MIN && !(rc = pdshm_scope_new(full, NULL, &s[n])))
    ck_assert_int_eq(pdshm_var_get(s[n++], "x", &v), 0);
  ck_assert_msg(rc == PDSHM_ENOLCK, "%s k=%llu: bystander: %s", what, (unsigned long long)k,
                pdshm_strerror(rc));
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
  v = pdshm_find_local_var(params, "lk");
  ck_assert_int_eq(pdshm_var_lock(v, 1), 0);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  FILE *f = open_memstream(&rep, &len);
  rc = pdshm_check(seg, f);
  fclose(f);
  ck_assert_msg(!rc && !len, "%s k=%llu: with a bystander: %s", what, (unsigned long long)k, rep);
  free(rep);
  for (int i = 0; i < n; i++) ck_assert_int_eq(pdshm_scope_release(s[i]), 0);
  ck_assert_int_eq(pdshm_scope_release(full), 0);
  ck_assert_int_eq(pdshm_scope_release(params), 0);
}

/* Pins the variable at "SCOPE/VAR" (op->pinned) from this process, through
 * a scope handle it lets go of at once: a pin is no reference on the scope. */
static pdshm_pin *pin_path(pdshm_seg *seg, const char *path) {
  char scope[128];
  const char *slash = strrchr(path, '/');
  snprintf(scope, sizeof scope, "%.*s", (int)(slash - path), path);
  pdshm_scope *s;
  pdshm_pin *p;
  ck_assert_int_eq(pdshm_scope_open(seg, scope, &s), 0);
  ck_assert_int_eq(pdshm_tensor_pin(pdshm_find_local_var(s, slash + 1), &p, NULL), 0);
  ck_assert_int_eq(pdshm_scope_release(s), 0);
  return p;
}

struct outcome crash_run_plans(const struct plan *a, const struct plan *b) {
  struct outcome o = {0}, ignored = {0};
  pdshm_seg *seg = crash_world();
  pdshm_pin *ours = a->op->pinned ? pin_path(seg, a->op->pinned) : NULL;
  o.before = snap_model(seg, 0, true);
  crash_child_run(*a, b ? &ignored : &o);
  crash_outcome_free(&ignored);
  if (b) crash_child_run(*b, &o);
  crash_bystander(seg, (b ? b : a)->op->name, (b ? b : a)->k);
  crash_reap_verify(seg, (b ? b : a)->op->name, (b ? b : a)->k);
  if (ours) {
    ck_assert_int_eq(pdshm_tensor_unpin(ours), 0);
    crash_reap_verify(seg, "our unpin", (b ? b : a)->k);
  }
  o.after = snap_model(seg, 0, true);
  if ((b ? b : a)->op->verify) (b ? b : a)->op->verify(seg);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  ck_assert_int_eq(pdshm_unlink(crash_seg_name), 0);
  return o;
}

struct outcome crash_run_child(const struct op *op, uint64_t k, const char *point) {
  struct plan pl = {.op = op, .k = k, .point = point};
  return crash_run_plans(&pl, NULL);
}

/* ---- the states an operation may leave ---------------------------------------------- */

void crash_refs_add(struct crash_refs *r, const char *s) {
  for (unsigned i = 0; i < r->n; i++)
    if (!strcmp(r->s[i], s)) return;
  ck_assert_uint_lt(r->n, CRASH_MAX_REFS);
  r->s[r->n++] = strdup(s);
}

bool crash_refs_has(const struct crash_refs *r, const char *s) {
  for (unsigned i = 0; i < r->n; i++)
    if (!strcmp(r->s[i], s)) return true;
  return false;
}

void crash_refs_free(struct crash_refs *r) {
  for (unsigned i = 0; i < r->n; i++) free(r->s[i]);
  r->n = 0;
}

const char *crash_first_diff(const char *a, const char *b, char *out, size_t cap) {
  size_t i = 0, line = 0;
  while (a[i] && a[i] == b[i]) {
    if (a[i] == '\n') line = i + 1;
    i++;
  }
  const char *e1 = strchr(a + line, '\n'), *e2 = strchr(b + line, '\n');
  snprintf(out, cap, "got \"%.*s\" where a state has \"%.*s\"",
           (int)(e1 ? e1 - (a + line) : 80), a + line, (int)(e2 ? e2 - (b + line) : 80),
           b + line);
  return out;
}

bool crash_window_seen(char (*names)[64], uint64_t n, uint64_t k) {
  if (getenv("CRASH_ALL")) return false;
  unsigned same = 0;
  for (uint64_t j = 3; j < k && same < 2; j++) {
    bool eq = true;
    for (int d = -2; d <= 1 && eq; d++) {
      uint64_t a = j + d, b = k + d;
      eq = (a > n) == (b > n) && (a > n || !strcmp(names[a - 1], names[b - 1]));
    }
    same += eq;
  }
  return same >= 2;
}

unsigned crash_points(char (*names)[64], uint64_t n) {
  unsigned distinct = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t j = 0;
    while (j < i && strcmp(names[j], names[i])) j++;
    if (j < i) continue;
    distinct++;
    if (getenv("CRASH_NAMES")) printf("crash:   %s\n", names[i]);
  }
  return distinct;
}

