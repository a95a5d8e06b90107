/* test_crash_pairs.c - two processes dying on one scope: a second process
 * finds a variable, then the first dies at each window of its journal under
 * the same scope lock, then the second (whose take of the lock repairs that
 * journal, possibly erasing its variable) dies at each of its windows; the
 * result is the first death's state with the second operation done or not
 * (crashrun.h says how a death is run and verified).
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crashrun.h"

/* ---- two processes dying on one scope ------------------------------------------------ */

/* The second process's operations: on a variable it found before the first
 * one died under the scope's lock, so that its own take of the lock repairs
 * the dead journal (the variable may be erased by that repair). */
static int prep_w_seen(struct cx *c) { return crash_prep_var(c, "w"); }
static int prep_b_seen(struct cx *c) { return crash_prep_var(c, "b"); }
static int may_be_stale(int rc) { return rc && rc != PDSHM_ESTALE; }
static int run_resize_seen(struct cx *c) {
  return may_be_stale(pdshm_tensor_resize(c->v, PDSHM_F32, 1, (int64_t[]){3000}));
}
static int run_reader_seen(struct cx *c) { return may_be_stale(pdshm_var_add_reader(c->v, "late")); }
static int run_erase_b(struct cx *c) { return pdshm_var_erase(c->params, "b"); }

static const struct {
  const char *first;       /* crash_ops[]: dies at each of its journal's windows  */
  struct op second;        /* prepared before, dies at each of its windows  */
} pairs[] = {
    {"var_erase", {"resize_erased_w", prep_w_seen, run_resize_seen, NULL, false, NULL, NULL}},
    {"var_erase", {"reader_erased_w", prep_w_seen, run_reader_seen, NULL, false, NULL, NULL}},
    {"resize_grow", {"erase_resized_b", prep_b_seen, run_erase_b, NULL, false, NULL, NULL}},
};

/* A fresh world; the child of plan b attaches and prepares; the child of
 * plan a runs and dies; then b runs and dies; then the bystander, the reap
 * and the check.  Returns b's outcome, `after` being the reaped model. */
static struct outcome run_pair(const struct plan *a, const struct plan *b) {
  struct outcome o = {0}, ignored = {0};
  int rep[2], ready[2], go[2];
  char byte = 0;
  pdshm_seg *seg = crash_world();
  o.before = snap_model(seg, 0, true);
  ck_assert_int_eq(pipe(rep), 0);
  ck_assert_int_eq(pipe(ready), 0);
  ck_assert_int_eq(pipe(go), 0);
  struct plan pb = *b;
  pb.fd = rep[1];
  pb.ready = ready[1];
  pb.go = go[0];
  pid_t pid = tu_spawn(crash_child_main, &pb);
  close(rep[1]);
  close(ready[1]);
  close(go[0]);
  ck_assert_msg(read(ready[0], &byte, 1) == 1, "%s: the second child did not get ready",
                b->op->name);
  close(ready[0]);
  crash_child_run(*a, &ignored);
  crash_outcome_free(&ignored);
  ck_assert_int_eq(write(go[1], &byte, 1), 1);
  close(go[1]);
  crash_read_report(rep[0], &o);
  close(rep[0]);
  int st = tu_wait(pid);
  ck_assert_msg(st == 128 + SIGKILL, "%s after %s k=%llu, k=%llu: the child ended with %d",
                b->op->name, a->op->name, (unsigned long long)a->k, (unsigned long long)b->k, st);
  crash_bystander(seg, b->op->name, b->k);
  crash_reap_verify(seg, b->op->name, b->k);
  o.after = snap_model(seg, 0, true);
  ck_assert_int_eq(pdshm_detach(seg), 0);
  ck_assert_int_eq(pdshm_unlink(crash_seg_name), 0);
  return o;
}

/* The first process dies at each window of its journal, holding the scope's
 * lock; the second, which found its variable before that death, takes the
 * lock (repairing the dead journal) and dies at each of its own windows,
 * the repair's included.  After the reap the segment checks clean and the
 * model is what the first death leaves with the second operation either
 * not done or done: never a buffer or a lock entry lost between the two. */
START_TEST(two_deaths_on_one_scope) {
  const struct op *first = crash_op_named(pairs[_i].first), *second = &pairs[_i].second;
  struct outcome o = crash_run_child(first, 0, NULL);
  uint64_t na = o.hits, tried = 0, passed = 0;
  char(*anames)[64] = o.names;
  o.names = NULL;
  crash_outcome_free(&o);
  for (uint64_t ka = 1; ka <= na; ka++) {
    if (strncmp(anames[ka - 1], "j.", 2) || crash_window_seen(anames, na, ka)) continue;
    struct plan a = {.op = first, .k = ka}, b = {.op = second, .k = 1, .point = CRASH_PREPARED};
    o = run_pair(&a, &b);
    char *undone = o.after, *done, d[400];
    o.after = NULL;
    crash_outcome_free(&o);
    b = (struct plan){.op = second};
    o = run_pair(&a, &b);
    ck_assert_msg(o.finished, "%s after %s k=%llu did not finish", second->name, first->name,
                  (unsigned long long)ka);
    done = o.after;
    o.after = NULL;
    uint64_t nb = o.hits;
    char(*bnames)[64] = o.names;
    o.names = NULL;
    crash_outcome_free(&o);
    for (b.k = 1; b.k <= nb; b.k++) {
      if (crash_window_seen(bnames, nb, b.k)) continue;
      o = run_pair(&a, &b);
      ck_assert_msg(!o.finished, "%s k=%llu finished", second->name, (unsigned long long)b.k);
      ck_assert_msg(!strcmp(o.after, undone) || !strcmp(o.after, done),
                    "%s killed at %llu (%s), then %s killed at %llu (%s): %s", first->name,
                    (unsigned long long)ka, anames[ka - 1], second->name,
                    (unsigned long long)b.k, bnames[b.k - 1],
                    crash_first_diff(o.after, undone, d, sizeof d));
      crash_outcome_free(&o);
      tried++;
    }
    passed += nb;
    free(bnames);
    free(undone);
    free(done);
  }
  crash_totals->passed += passed;
  crash_totals->tried += tried;
  printf("crash: %s after %-16s %4llu windows passed, %4llu tried\n", second->name,
         first->name, (unsigned long long)passed, (unsigned long long)tried);
  free(anames);
}
END_TEST

Suite *crash_pairs_suite(void);
Suite *crash_pairs_suite(void) {
  Suite *s = suite_create("crash_pairs");
  TCase *tc = tu_tcase(s, "pairs", 300, crash_setup, crash_teardown);
  tcase_add_loop_test(tc, two_deaths_on_one_scope, 0, sizeof pairs / sizeof pairs[0]);
  return s;
}

int main(void) { return crash_main(crash_pairs_suite()); }
