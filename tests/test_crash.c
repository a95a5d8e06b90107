/* test_crash.c - every mutating operation killed at every crash window,
 * and reapers killed at each of theirs (crashrun.h says how a death is run
 * and verified).
 *
 * For each operation of crashops.c: a first run counts the windows the
 * operation passes (N) and gives the state after it; then for every k in
 * 1..N a child dies at window k (inside loops, each window twice:
 * crash_window_seen; CRASH_ALL=1: every k).  After the reap, the model must
 * be one of the states the operation may leave: before it, after it, or,
 * for operations made of several atomic steps, between two of them (the
 * steps' boundary crash point names them).
 * Pins: the child pins, unpins, and erases, resizes or releases what it
 * pinned; or this process pins a variable the child erases, resizes or
 * unlinks, and the segment must check clean with the orphan and again
 * once that pin is dropped.
 */
#include <stdlib.h>
#include <string.h>

#include "crashrun.h"

/* ---- the states an operation may leave ---------------------------------------------- */

/* Counts the op's windows, collects its before/after (and in-between) states. */
static uint64_t op_count(const struct op *op, struct crash_refs *r, char (**names)[64]) {
  struct outcome o = crash_run_child(op, 0, NULL);
  ck_assert_msg(o.finished, "%s did not finish", op->name);
  uint64_t n = o.hits;
  crash_refs_add(r, o.before);
  crash_refs_add(r, o.after);
  *names = o.names;
  o.names = NULL;
  crash_outcome_free(&o);
  o = crash_run_child(op, 1, CRASH_PREPARED);
  crash_refs_add(r, o.after);
  crash_outcome_free(&o);
  for (uint64_t b = 1; op->boundary; b++) {
    o = crash_run_child(op, b, op->boundary);
    bool done = o.finished;
    crash_refs_add(r, o.after);
    crash_outcome_free(&o);
    if (done) break;
  }
  return n;
}

static void op_all_windows(const struct op *op) {
  struct crash_refs r = {0};
  char (*names)[64];
  uint64_t n = op_count(op, &r, &names), tried = 0;
  ck_assert_msg(n > 0, "%s passes no crash window", op->name);
  for (uint64_t k = 1; k <= n; k++) {
    if (crash_window_seen(names, n, k)) continue;
    tried++;
    struct outcome o = crash_run_child(op, k, NULL);
    char d[400];
    ck_assert_msg(!o.finished, "%s k=%llu: finished (the window count moved)", op->name,
                  (unsigned long long)k);
    ck_assert_msg(!strcmp(o.before, r.s[0]), "%s: the world is not deterministic", op->name);
    ck_assert_msg(crash_refs_has(&r, o.after), "%s: died at window %llu (%s): %s", op->name,
                  (unsigned long long)k, names[k - 1],
                  crash_first_diff(o.after, r.s[0], d, sizeof d));
    crash_outcome_free(&o);
  }
  crash_totals->passed += n;
  crash_totals->tried += tried;
  printf("crash: %-24s %3llu windows passed, %3llu tried, %u states accepted, %u points\n",
         op->name, (unsigned long long)n, (unsigned long long)tried, r.n, crash_points(names, n));
  free(names);
  crash_refs_free(&r);
}
/* ---- reapers killed mid-reap ------------------------------------------------------- */

/* Deaths that leave a reaper work of each kind: a destruction half done, an
 * unlink chain pending, a shared and an exclusive hold, a committed journal
 * not applied, an armed one with a new block, a detach half done, an armed
 * one that retired published blocks, a pin on an orphan, a buffer half
 * orphaned under another's pin, an unpin half done inside the heap lock (of
 * a hooked buffer, and of an orphan: the recount frees it). */
static const struct {
  const char *op, *point;
  uint64_t n;
} dead[] = {
    {"scope_release", "scope.destroy.unhooked", 1}, {"scope_drop_kids", "scope.drop_kids.one", 1},
    {"var_lock_die_shared", NULL, 0},               {"resize_large", "j.commit.after", 1},
    {"var_lock_die_exclusive", NULL, 0},
    {"scope_new_named", "j.alloc.recorded", 1},     {"detach", "slot.release.holds", 1},
    {"var_erase", "j.retire.marked", 2},
    {"erase_own_pinned", NULL, 0},                  {"erase_pinned", "pin.orphan.flagged", 1},
    {"unpin", "pin.drop.cleared", 1},               {"unpin_orphan", "pin.drop.cleared", 1},
};

/* A reaper killed at each of its windows leaves work the next reaper
 * finishes: the result is what one undisturbed reap gives, nothing undone
 * and nothing done twice. */
START_TEST(reaper_killed_at_every_window) {
  struct plan a = {.op = crash_op_named(dead[_i].op), .k = dead[_i].n, .point = dead[_i].point};
  struct outcome o = crash_run_plans(&a, NULL);
  char *expect = o.after, d[400];
  o.after = NULL;
  crash_outcome_free(&o);
  struct plan b = {.op = &crash_reaper};
  o = crash_run_plans(&a, &b);
  ck_assert_msg(o.finished && !strcmp(o.after, expect), "the reaper's own run differs");
  uint64_t n = o.hits, tried = 0;
  char(*names)[64] = o.names;
  o.names = NULL;
  crash_outcome_free(&o);
  for (b.k = 1; b.k <= n; b.k++) {
    if (crash_window_seen(names, n, b.k)) continue;
    o = crash_run_plans(&a, &b);
    ck_assert_msg(!o.finished, "reaper k=%llu finished", (unsigned long long)b.k);
    ck_assert_msg(!strcmp(o.after, expect), "after %s, a reaper killed at %llu (%s): %s",
                  dead[_i].op, (unsigned long long)b.k, names[b.k - 1],
                  crash_first_diff(o.after, expect, d, sizeof d));
    crash_outcome_free(&o);
    tried++;
  }
  crash_totals->passed += n;
  crash_totals->tried += tried;
  printf("crash: reaper after %-20s %3llu windows passed, %3llu tried, %u points\n",
         dead[_i].op, (unsigned long long)n, (unsigned long long)tried, crash_points(names, n));
  free(names);
  free(expect);
}
END_TEST
/* Check runs each loop iteration as a test of its own. */
START_TEST(every_window_of_every_op) {
  op_all_windows(&crash_ops[_i]);
}
END_TEST

Suite *crash_suite(void);
Suite *crash_suite(void) {
  Suite *s = suite_create("crash");
  TCase *tc = tu_tcase(s, "windows", 120, crash_setup, crash_teardown);
  tcase_add_loop_test(tc, every_window_of_every_op, 0, (int)crash_nops);
  tc = tu_tcase(s, "reapers", 120, crash_setup, crash_teardown);
  tcase_add_loop_test(tc, reaper_killed_at_every_window, 0, sizeof dead / sizeof dead[0]);
  return s;
}

int main(void) { return crash_main(crash_suite()); }
