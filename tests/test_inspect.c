/* test_inspect.c - the read-only introspection API on a live multi-process
 * segment: every view is compared with what the test built. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kid.h"

/* Attaches, takes arg[0] extra anonymous scopes (one handle each, plus the
 * root's), reports its slot, then waits until killed. */
static int kid_hold_scopes(struct kid *k) {
  pdshm_scope *root, *s;
  if (kid_attach(k)) return 1;
  if (pdshm_root(k->seg, &root)) return 2;
  for (uint64_t i = 0; i < k->arg[0]; i++)
    if (pdshm_scope_new(root, NULL, &s)) return 3;
  if (kid_say(k, 0)) return 4;
  for (;;) pause();
}

static pdshm_seg *attach_ro(void) {
  pdshm_seg *ro;
  pdshm_options o = {.flags = PDSHM_RDONLY};
  ck_assert_int_eq(pdshm_attach(g_name, &o, &ro), 0);
  return ro;
}

static const pdshm_proc_info *proc_of(const pdshm_proc_info *pi, int n, uint32_t pid) {
  for (int i = 0; i < n; i++)
    if (pi[i].pid == pid) return &pi[i];
  ck_abort_msg("pid %u not in the process table", pid);
  return NULL;
}

/* ---- pdshm_procs ---------------------------------------------------------------- */

START_TEST(procs_alive_dead_and_held) {
  make(8u << 20, 8, 0);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(g_seg, &root), 0);
  struct kid live = {.arg = {2}}, dead = {.arg = {1}};
  kid_start(&live, kid_hold_scopes);
  uint32_t live_slot = (uint32_t)kid_recv(&live);
  kid_recv(&live);
  kid_start(&dead, kid_hold_scopes);
  uint32_t dead_slot = (uint32_t)kid_recv(&dead);
  kid_recv(&dead);
  pid_t dead_pid = dead.pid;
  kid_kill(&dead); /* nobody attaches afterwards: it stays unreaped */

  pdshm_seg *ro = attach_ro();
  pdshm_proc_info pi[8];
  int n = pdshm_procs(ro, pi, 8);
  ck_assert_int_eq(n, 3);
  for (int i = 1; i < n; i++) ck_assert_uint_lt(pi[i - 1].slot, pi[i].slot);
  const pdshm_proc_info *me = proc_of(pi, n, (uint32_t)getpid());
  const pdshm_proc_info *l = proc_of(pi, n, (uint32_t)live.pid);
  const pdshm_proc_info *d = proc_of(pi, n, (uint32_t)dead_pid);
  ck_assert_uint_eq(me->slot, g_seg->slot);
  ck_assert_uint_eq(l->slot, live_slot);
  ck_assert_uint_eq(d->slot, dead_slot);
  ck_assert_int_eq(me->state, PDSHM_PROC_ALIVE);
  ck_assert_int_eq(l->state, PDSHM_PROC_ALIVE);
  ck_assert_int_eq(d->state, PDSHM_PROC_DEAD);
  ck_assert_uint_eq(me->handles, 1);
  ck_assert_uint_eq(l->handles, 3);
  ck_assert_uint_eq(d->handles, 2);
  ck_assert_uint_eq(me->attach_ns, pdshm__slot(g_seg, g_seg->slot)->attach_ns);
  for (int i = 0; i < n; i++) {
    ck_assert_uint_ge(pi[i].bytes_held, pi[i].handles * (PDSHM_BLK_HDR + 16));
    ck_assert_uint_eq(pi[i].reaper_pid, 0);
  }
  /* A short buffer still gets the count; NULL with cap 0 too. */
  ck_assert_int_eq(pdshm_procs(ro, pi, 1), 3);
  ck_assert_int_eq(pdshm_procs(ro, NULL, 0), 3);
  ck_assert_int_eq(pdshm_procs(ro, NULL, 1), PDSHM_EINVAL);
  /* Reaped, the dead one is gone. */
  ck_assert_uint_eq(reap(g_seg), 1);
  ck_assert_int_eq(pdshm_procs(ro, pi, 8), 2);
  ck_assert_int_eq(pdshm_detach(ro), 0);
  kid_kill(&live);
  ck_assert_int_eq(pdshm_scope_release(root), 0);
}
END_TEST

START_TEST(procs_on_a_damaged_table) {
  make(8u << 20, 8, 0);
  pdshm_seg *ro = attach_ro();
  pdshm_proc_info pi[8];
  ck_assert_int_eq(pdshm_procs(ro, pi, 8), 1);
  g_seg->hdr->max_procs = PDSHM_PROCS_MAX + 1; /* scribbled after attach */
  ck_assert_int_eq(pdshm_procs(ro, pi, 8), PDSHM_EBADSEG);
  g_seg->hdr->max_procs = 8;
  g_seg->hdr->arena_end = g_seg->size + 4096;
  ck_assert_int_eq(pdshm_procs(ro, pi, 8), PDSHM_EBADSEG);
  g_seg->hdr->arena_end = g_seg->size;
  struct pdshm_blk *first = pdshm__blk(g_seg, g_seg->hdr->arena_off + PDSHM_BLK_HDR);
  uint64_t word = first->word;
  first->word = 17; /* size 16: less than a block */
  ck_assert_int_eq(pdshm_procs(ro, pi, 8), PDSHM_EBADSEG);
  ck_assert_ptr_nonnull(strstr(pdshm_last_error(), "chain"));
  first->word = word;
  ck_assert_int_eq(pdshm_procs(ro, pi, 8), 1);
  ck_assert_int_eq(pdshm_detach(ro), 0);
}
END_TEST

static Suite *inspect_suite(void) {
  Suite *s = suite_create("inspect");
  TCase *tc = kid_tcase(s, "procs", 20);
  tcase_add_test(tc, procs_alive_dead_and_held);
  tcase_add_test(tc, procs_on_a_damaged_table);
  return s;
}

int main(void) { return tu_run(inspect_suite()) ? 1 : 0; }
