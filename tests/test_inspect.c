/* test_inspect.c - the read-only introspection API on a live multi-process
 * segment: every view is compared with what the test built. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

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
  const pdshm_off_t end = g_seg->hdr->arena_end;
  g_seg->hdr->arena_end = g_seg->size + 4096; /* past the mapping */
  ck_assert_int_eq(pdshm_procs(ro, pi, 8), PDSHM_EBADSEG);
  g_seg->hdr->arena_end = end + (1u << 20); /* inside it, past the file */
  ck_assert_int_eq(pdshm_procs(ro, pi, 8), PDSHM_EBADSEG);
  g_seg->hdr->arena_end = end;
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

/* ---- scopes ------------------------------------------------------------------- */

struct seen_scopes {
  pdshm_scope_info si[16];
  int n;
};

static int collect_scope(const pdshm_scope_info *si, void *arg) {
  struct seen_scopes *ss = arg;
  ck_assert_int_lt(ss->n, 16);
  ss->si[ss->n++] = *si;
  return 0;
}

static const pdshm_scope_info *by_id(const struct seen_scopes *ss, uint64_t id) {
  for (int i = 0; i < ss->n; i++)
    if (ss->si[i].id == id) return &ss->si[i];
  ck_abort_msg("scope %llu not in the walk", (unsigned long long)id);
  return NULL;
}

START_TEST(scopes_show_the_tree_built) {
  struct world wd;
  world_build(&wd);
  pdshm_seg *ro = attach_ro();
  struct seen_scopes ss = {.n = 0};
  ck_assert_int_eq(pdshm_inspect_scopes(ro, collect_scope, &ss), 0);
  ck_assert_int_eq(ss.n, 6); /* root, params, fc, data, two anonymous */
  const pdshm_scope_info *root = &ss.si[0], *params = by_id(&ss, scope_id(wd.params));
  const pdshm_scope_info *fc = by_id(&ss, scope_id(wd.fc)), *data = by_id(&ss, scope_id(wd.data));
  const pdshm_scope_info *live = by_id(&ss, wd.live_scope_id), *dead = by_id(&ss, wd.dead_scope_id);
  ck_assert_uint_eq(root->id, scope_id(wd.root));
  ck_assert_uint_eq(root->depth, 0);
  ck_assert_str_eq(root->name, "");
  /* root: 4 kids + 3 handles (ours, both kids') + the segment's own */
  ck_assert_uint_eq(root->kids, 4);
  ck_assert_uint_eq(root->refs, 8);
  ck_assert_uint_eq(root->handles, 3);
  ck_assert_uint_eq(root->nholders, 3);
  ck_assert_uint_eq(root->vars, 1);
  ck_assert_str_eq(params->name, "params");
  ck_assert(params->named && params->linked);
  ck_assert_uint_eq(params->depth, 1);
  ck_assert_uint_eq(params->refs, 3); /* link, fc, our handle */
  ck_assert_str_eq(fc->name, "fc");
  ck_assert_uint_eq(fc->depth, 2);
  ck_assert_uint_eq(fc->parent_id, params->id);
  ck_assert_uint_eq(fc->vars, 2);
  ck_assert_uint_eq(fc->tensor_bytes, 13 * 4 + 4);
  ck_assert_uint_eq(fc->handles, 2); /* ours and the live kid's (pdshm_scope_open) */
  ck_assert_uint_eq(data->tensor_bytes, 64 * 13 * 8);
  ck_assert_uint_ge(data->bytes, data->tensor_bytes + sizeof(struct pdshm_var_rec));
  ck_assert(!live->named && !live->linked);
  ck_assert_str_eq(live->name, "");
  ck_assert_uint_eq(live->nholders, 1);
  ck_assert_uint_eq(live->holders[0], (uint32_t)wd.live.pid);
  ck_assert_uint_eq(live->vars, 1);
  ck_assert_uint_eq(live->tensor_bytes, 40);
  ck_assert_uint_eq(dead->nholders, 1);
  ck_assert_uint_eq(dead->holders[0], (uint32_t)wd.dead.pid); /* dead, not yet reaped */
  ck_assert_uint_eq(dead->vars, 2);
  ck_assert_uint_eq(dead->tensor_bytes, 80);
  /* Order: each scope after its parent, kids by id, the last one flagged. */
  for (int i = 1; i < ss.n; i++) {
    int p = 0;
    while (p < i && ss.si[p].id != ss.si[i].parent_id) p++;
    ck_assert_int_lt(p, i);
    ck_assert_uint_eq(ss.si[i].depth, ss.si[p].depth + 1);
  }
  ck_assert(dead->last && !live->last); /* the dead kid's scope came later */
  ck_assert_int_eq(pdshm_detach(ro), 0);
  world_end(&wd);
}
END_TEST

static int stop_at_two(const pdshm_scope_info *si, void *arg) {
  (void)si;
  return ++*(int *)arg == 2 ? 42 : 0;
}

START_TEST(scopes_walk_stops_when_asked) {
  make(8u << 20, 8, 0);
  pdshm_scope *root, *a, *b;
  ck_assert_int_eq(pdshm_root(g_seg, &root), 0);
  ck_assert_int_eq(pdshm_scope_new(root, "a", &a), 0);
  ck_assert_int_eq(pdshm_scope_new(root, NULL, &b), 0);
  int calls = 0;
  ck_assert_int_eq(pdshm_inspect_scopes(g_seg, stop_at_two, &calls), 42);
  ck_assert_int_eq(calls, 2);
  ck_assert_int_eq(pdshm_inspect_scopes(g_seg, NULL, NULL), PDSHM_EINVAL);
  pdshm_scope_release(b);
  pdshm_scope_release(a);
  pdshm_scope_release(root);
}
END_TEST

/* ---- variables ------------------------------------------------------------------ */

struct seen_vars {
  pdshm_var_info vi[8];
  char ops[8][2][64];         /* readers, writers joined by ','              */
  int n;
};

static int collect_var(const pdshm_var_info *vi, void *arg) {
  struct seen_vars *sv = arg;
  ck_assert_int_lt(sv->n, 8);
  sv->vi[sv->n] = *vi;
  for (int rw = 0; rw < 2; rw++) {
    char *o = sv->ops[sv->n][rw];
    const char *const *names = rw ? vi->writers : vi->readers;
    *o = '\0';
    for (uint32_t k = 0; k < (rw ? vi->nwriters : vi->nreaders); k++)
      o += sprintf(o, "%s%s", k ? "," : "", names[k]);
    sv->vi[sv->n].readers = sv->vi[sv->n].writers = NULL; /* valid in the callback only */
  }
  sv->n++;
  return 0;
}

START_TEST(vars_show_what_was_built) {
  struct world wd;
  world_build(&wd);
  pdshm_seg *ro = attach_ro();
  struct seen_vars sv = {.n = 0};
  ck_assert_int_eq(pdshm_inspect_vars(ro, scope_id(wd.fc), collect_var, &sv), 0);
  ck_assert_int_eq(sv.n, 2);
  const pdshm_var_info *w = &sv.vi[0], *b = &sv.vi[1]; /* sorted: "W" < "b" */
  ck_assert_str_eq(w->name, "W");
  ck_assert_str_eq(b->name, "b");
  ck_assert_uint_eq(w->scope_id, scope_id(wd.fc));
  ck_assert_uint_eq(w->gen, pdshm_var_ref(wd.w).gen);
  ck_assert_int_eq(w->type, PDSHM_VAR_TENSOR);
  ck_assert_int_eq(w->dtype, PDSHM_F32);
  ck_assert_int_eq(w->ndim, 2);
  ck_assert_int_eq(w->dims[0], 13);
  ck_assert_int_eq(w->dims[1], 1);
  ck_assert_uint_eq(w->nbytes, 52);
  ck_assert_uint_ge(w->bytes, 52 + sizeof(struct pdshm_var_rec));
  ck_assert_str_eq(w->label, "parameter");
  ck_assert_str_eq(sv.ops[0][0], "fc,fc_grad");
  ck_assert_str_eq(sv.ops[0][1], "sgd");
  ck_assert_uint_eq(w->version, pdshm_var_version(wd.w));
  ck_assert_int_eq(w->lock_state, PDSHM_VLOCK_EXCLUSIVE);
  ck_assert_uint_eq(w->lock_holder_pid, (uint32_t)wd.live.pid);
  ck_assert_uint_eq(w->lock, 0); /* a word of the record, no lock-table entry */
  ck_assert_int_eq(b->lock_state, PDSHM_VLOCK_FREE);
  ck_assert_uint_eq(b->lock, 0);
  ck_assert_str_eq(sv.ops[1][0], "");
  sv.n = 0;
  ck_assert_int_eq(pdshm_inspect_vars(ro, scope_id(wd.data), collect_var, &sv), 0);
  ck_assert_int_eq(sv.n, 1);
  ck_assert_int_eq(sv.vi[0].lock_state, PDSHM_VLOCK_SHARED);
  ck_assert_uint_eq(sv.vi[0].lock_readers, 1);
  ck_assert_int_eq(sv.vi[0].dtype, PDSHM_F64);
  sv.n = 0;
  ck_assert_int_eq(pdshm_inspect_vars(ro, 0, collect_var, &sv), 0); /* 0: the root */
  ck_assert_int_eq(sv.n, 1);
  ck_assert_str_eq(sv.vi[0].name, "step");
  ck_assert_int_eq(sv.vi[0].type, PDSHM_VAR_EMPTY);
  ck_assert_str_eq(sv.vi[0].label, "");
  sv.n = 0;
  ck_assert_int_eq(pdshm_inspect_vars(ro, wd.dead_scope_id, collect_var, &sv), 0);
  ck_assert_int_eq(sv.n, 2);
  ck_assert_str_eq(sv.vi[0].name, "h0");
  ck_assert_int_eq(sv.vi[1].dtype, PDSHM_I32);
  ck_assert_int_eq(pdshm_inspect_vars(ro, 999999, collect_var, &sv), PDSHM_ENOENT);
  ck_assert_int_eq(pdshm_detach(ro), 0);
  world_end(&wd);
}
END_TEST

/* ---- locks ----------------------------------------------------------------------- */

struct seen_locks {
  pdshm_lock_info li[32];
  int n;
};

static int collect_lock(const pdshm_lock_info *li, void *arg) {
  struct seen_locks *sl = arg;
  ck_assert_int_lt(sl->n, 32);
  sl->li[sl->n++] = *li;
  return 0;
}

static const pdshm_lock_info *lock_of(const struct seen_locks *sl, int kind, uint64_t scope,
                                      const char *var) {
  for (int i = 0; i < sl->n; i++)
    if (sl->li[i].kind == kind && sl->li[i].scope_id == scope && !strcmp(sl->li[i].var, var))
      return &sl->li[i];
  ck_abort_msg("no lock of kind %d on scope %llu var '%s'", kind, (unsigned long long)scope, var);
  return NULL;
}

START_TEST(locks_show_guards_holders_counters) {
  struct world wd;
  world_build(&wd);
  pdshm_seg *ro = attach_ro();
  struct seen_locks sl = {.n = 0};
  ck_assert_int_eq(pdshm_inspect_locks(ro, collect_lock, &sl), 0);
  /* heap + 6 scopes: variable locks are words of their records */
  ck_assert_int_eq(sl.n, 7);
  ck_assert_uint_eq(sl.li[0].index, PDSHM_LOCK_HEAP);
  ck_assert_int_eq(sl.li[0].kind, PDSHM_LOCK_OF_HEAP);
  for (int i = 1; i < sl.n; i++) ck_assert_uint_lt(sl.li[i - 1].index, sl.li[i].index);
  const pdshm_lock_info *fc = lock_of(&sl, PDSHM_LOCK_OF_SCOPE, scope_id(wd.fc), "");
  ck_assert_uint_eq(fc->index, pdshm__scope_at(g_seg, wd.fc->rec)->lock);
  struct pdshm_lock *e = lk(fc->index);
  ck_assert_uint_eq(fc->acquisitions, e->acquisitions);
  ck_assert_uint_gt(fc->acquisitions, 0);
  ck_assert(!fc->held);
  for (int i = 0; i < sl.n; i++) ck_assert_int_ne(sl.li[i].kind, PDSHM_LOCK_OF_VAR);
  lock_of(&sl, PDSHM_LOCK_OF_SCOPE, wd.dead_scope_id, "");
  ck_assert_int_eq(pdshm_detach(ro), 0);
  world_end(&wd);
}
END_TEST

/* A kid that takes variable "z" of the root exclusively and dies holding it. */
static int kid_die_holding(struct kid *k) {
  pdshm_scope *root;
  pdshm_var *z;
  if (kid_attach(k) || pdshm_root(k->seg, &root) || pdshm_var_get(root, "z", &z) ||
      pdshm_var_lock(z, 1) || kid_say(k, 0))
    return 1;
  for (;;) pause();
}

START_TEST(locks_count_waits_and_deaths) {
  make(8u << 20, 8, 0);
  pdshm_scope *root;
  ck_assert_int_eq(pdshm_root(g_seg, &root), 0);
  struct kid k = {0};
  kid_start(&k, kid_die_holding);
  kid_recv(&k);
  kid_recv(&k);
  kid_kill(&k);
  pdshm_var *z = pdshm_find_var(root, "z");
  ck_assert_ptr_nonnull(z);
  struct seen_vars sv = {.n = 0};
  ck_assert_int_eq(pdshm_inspect_vars(g_seg, 0, collect_var, &sv), 0);
  ck_assert_int_eq(sv.n, 1);
  ck_assert_int_eq(sv.vi[0].lock_state, PDSHM_VLOCK_EXCLUSIVE); /* the dead holder's */
  ck_assert_int_eq(pdshm_var_lock(z, 1), 0); /* recovers the dead holder's lock */
  ck_assert_int_eq(pdshm_var_unlock(z), 0);
  sv.n = 0;
  ck_assert_int_eq(pdshm_inspect_vars(g_seg, 0, collect_var, &sv), 0);
  ck_assert_int_eq(sv.vi[0].lock_state, PDSHM_VLOCK_FREE);
  ck_assert_uint_eq(sv.vi[0].version, 1); /* our unlock's: the death bumped nothing */
  pdshm_scope_release(root);
}
END_TEST

/* ---- segment, allocator ----------------------------------------------------------- */

START_TEST(seg_and_alloc_match_the_segment) {
  struct world wd;
  world_build(&wd);
  pdshm_seg *ro = attach_ro();
  pdshm_seg_info si;
  ck_assert_int_eq(pdshm_inspect_seg(ro, &si), 0);
  ck_assert_uint_eq(si.size, 16u << 20);
  ck_assert_uint_eq(si.layout_version, PDSHM_LAYOUT_VERSION);
  ck_assert_uint_eq(si.max_procs, 8);
  ck_assert_uint_eq(si.max_locks, g_seg->hdr->max_locks);
  ck_assert_uint_eq(si.creator_pid, (uint32_t)getpid());
  ck_assert_uint_eq(si.creator_uid, (uint32_t)geteuid());
  ck_assert_uint_eq(si.created_ns, g_seg->hdr->created_ns);
  ck_assert_uint_eq(si.daemon_pid, 0);
  ck_assert_int_eq(si.poisoned, 0);
  ck_assert_uint_eq(si.reaped, 0);
  g_seg->hdr->daemon_pid = 4242; /* what pdshmd would store */
  g_seg->hdr->daemon_beat_ns = 123456789;
  ck_assert_int_eq(pdshm_inspect_seg(ro, &si), 0);
  ck_assert_uint_eq(si.daemon_pid, 4242);
  ck_assert_uint_eq(si.daemon_beat_ns, 123456789);
  g_seg->hdr->daemon_pid = 0;
  pdshm_alloc_info a;
  struct pdshm_heap_stats hs;
  pdshm_stats st;
  ck_assert_int_eq(pdshm_inspect_alloc(ro, &a), 0);
  ck_assert_int_eq(pdshm__heap_stats(g_seg, &hs), 0);
  ck_assert_int_eq(pdshm_seg_stats(g_seg, &st), 0);
  ck_assert_uint_eq(a.arena, st.size);
  ck_assert_uint_eq(a.used, st.used);
  ck_assert_uint_eq(a.free, st.free);
  ck_assert_uint_eq(a.largest_free, hs.largest_free);
  ck_assert_uint_eq(a.blocks_used, hs.blocks_used);
  ck_assert_uint_ge(a.tensor_bytes, st.tensor_bytes);
  ck_assert_uint_eq(a.scope_bytes, hs.by_type[PDSHM_T_SCOPE]);
  uint64_t classed = 0;
  for (unsigned c = 0; c < PDSHM_ALLOC_CLASSES; c++) {
    ck_assert_uint_eq(a.cls[c].block_size, pdshm__class_size(c));
    ck_assert_uint_eq(a.cls[c].used, hs.cls[c].used);
    classed += a.cls[c].used * a.cls[c].block_size;
  }
  ck_assert_uint_le(classed + a.large_used, a.used);
  ck_assert(a.fragmentation >= 0.0 && a.fragmentation < 1.0);
  ck_assert_int_eq(pdshm_detach(ro), 0);
  world_end(&wd);
}
END_TEST

static int count_scope(const pdshm_scope_info *si, void *arg) { return (void)si, ++*(int *)arg, 0; }
static int count_var(const pdshm_var_info *vi, void *arg) { return (void)vi, ++*(int *)arg, 0; }
static int count_lock(const pdshm_lock_info *li, void *arg) { return (void)li, ++*(int *)arg, 0; }

/* Damage the walks must notice (EBADSEG, no callback made) and the checker
 * too; undone, everything reads again. */
START_TEST(views_refuse_damage) {
  struct world wd;
  world_build(&wd);
  pdshm_seg *ro = attach_ro();
  int calls = 0;
  struct pdshm_var_rec *w = pdshm__var_at(g_seg, pdshm_var_ref(wd.w).off);
  uint64_t dn = w->dtype_ndim;
  w->dtype_ndim = (uint64_t)1000 << 32 | PDSHM_F32;
  ck_assert_int_eq(pdshm_inspect_vars(ro, scope_id(wd.fc), count_var, &calls), PDSHM_EBADSEG);
  ck_assert_int_eq(pdshm_check(ro, NULL), PDSHM_EBADSEG);
  w->dtype_ndim = dn;
  struct pdshm_lock *l = lk(pdshm__scope_at(g_seg, wd.fc->rec)->lock);
  pdshm_off_t guards = l->guards;
  l->guards = g_seg->hdr->arena_off + 8; /* not a block */
  ck_assert_int_eq(pdshm_inspect_locks(ro, count_lock, &calls), PDSHM_EBADSEG);
  ck_assert_int_eq(pdshm_check(ro, NULL), PDSHM_EBADSEG);
  l->guards = guards;
  struct pdshm_scope_rec *params = pdshm__scope_at(g_seg, wd.params->rec);
  pdshm_off_t parent = params->parent;
  params->parent = wd.fc->rec; /* params <-> fc: a cycle off the root */
  ck_assert_int_eq(pdshm_inspect_scopes(ro, count_scope, &calls), PDSHM_EBADSEG);
  ck_assert_ptr_nonnull(strstr(pdshm_last_error(), "not reachable"));
  params->parent = parent;
  ck_assert_int_eq(calls, 0);
  ck_assert_int_eq(pdshm_inspect_scopes(ro, count_scope, &calls), 0);
  ck_assert_int_eq(pdshm_inspect_locks(ro, count_lock, &calls), 0);
  ck_assert_int_eq(pdshm_inspect_vars(ro, scope_id(wd.fc), count_var, &calls), 0);
  ck_assert_int_eq(calls, 6 + 7 + 2);
  ck_assert_int_eq(pdshm_detach(ro), 0);
  world_end(&wd);
}
END_TEST

/* pdshm_inspect_scopes in a thread of its own, on a read-only attachment. */
struct view_call {
  pdshm_seg *ro;
  int calls, rc;
  char why[256];
  _Atomic int done;
};

static void *view_thread(void *arg) {
  struct view_call *vc = arg;
  vc->rc = pdshm_inspect_scopes(vc->ro, count_scope, &vc->calls);
  snprintf(vc->why, sizeof vc->why, "%s", pdshm_last_error());
  atomic_store(&vc->done, 1);
  return NULL;
}

static void view_start(struct view_call *vc, pthread_t *t, pdshm_seg *ro) {
  *vc = (struct view_call){.ro = ro};
  ck_assert_int_eq(pthread_create(t, NULL, view_thread, vc), 0);
}

/* What a writer half way leaves (here: params' parent wrong, under
 * params' lock, held) is no damage: the view walks again until the writer
 * is done, then answers with the data; a writer that stays half way for
 * PDSHM_INSPECT_BUSY_NS gets EAGAIN (the segment kept changing), never
 * EBADSEG. */
START_TEST(views_wait_for_a_writer_half_way) {
  struct world wd;
  world_build(&wd);
  pdshm_seg *ro = attach_ro();
  struct pdshm_scope_rec *params = pdshm__scope_at(g_seg, wd.params->rec);
  pdshm_off_t parent = params->parent;
  ck_assert_int_eq(pdshm__lock(g_seg, params->lock), 0);
  params->parent = wd.fc->rec; /* params <-> fc: a cycle off the root */
  struct view_call vc;
  pthread_t t;
  view_start(&vc, &t, ro);
  nanosleep(&(struct timespec){0, 200000000}, NULL); /* time for it to walk and fail */
  ck_assert_msg(!atomic_load(&vc.done), "answered while the writer was half way: %s (%s)",
                pdshm_err_name(vc.rc), vc.why);
  params->parent = parent;
  pdshm__unlock(g_seg, params->lock);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_msg(vc.rc == 0, "%s (%s)", pdshm_err_name(vc.rc), vc.why);
  ck_assert_int_eq(vc.calls, 6);
  /* the same, left half way */
  ck_assert_int_eq(pdshm__lock(g_seg, params->lock), 0);
  params->parent = wd.fc->rec;
  view_start(&vc, &t, ro);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_msg(vc.rc == PDSHM_EAGAIN, "%s (%s)", pdshm_err_name(vc.rc), vc.why);
  ck_assert_ptr_nonnull(strstr(vc.why, "not reachable"));
  params->parent = parent;
  pdshm__unlock(g_seg, params->lock);
  ck_assert_int_eq(pdshm_detach(ro), 0);
  world_end(&wd);
}
END_TEST

/* A kid that churns for arg[0] ms: local scopes with tensors, named scopes
 * made and unlinked, variables created, renamed, erased, locked. */
static int kid_churn(struct kid *k) {
  pdshm_scope *root, *local, *named;
  pdshm_var *v;
  char name[32];
  int64_t d = 64;
  if (kid_attach(k) || pdshm_root(k->seg, &root)) return 1;
  uint64_t end = tu_now_ns() + k->arg[0] * 1000000ull;
  for (unsigned i = 0; tu_now_ns() < end; i++) {
    snprintf(name, sizeof name, "n%d-%u", (int)getpid(), i % 4);
    if (pdshm_scope_new(root, NULL, &local) || pdshm_var_create(local, "t", &v) ||
        pdshm_tensor_resize(v, PDSHM_F32, 1, &d) || pdshm_var_add_reader(v, "op") ||
        pdshm_var_lock(v, 1) || pdshm_var_unlock(v) || pdshm_var_rename(local, "t", "u"))
      return 2;
    if (pdshm_scope_new(root, name, &named) == 0) {
      if (pdshm_var_get(named, "w", &v) || pdshm_scope_release(named)) return 3;
    }
    if (i % 2 && pdshm_scope_unlink(root, name)) return 4;
    if (pdshm_var_erase(local, "u") || pdshm_scope_release(local)) return 5;
  }
  return 0;
}

static int visit_vars(const pdshm_scope_info *si, void *arg) {
  int n = 0, rc = pdshm_inspect_vars(arg, si->id, count_var, &n);
  return rc == PDSHM_ENOENT ? 0 : rc; /* gone since the walk: fine */
}

/* One view of the churn loop below; its result. */
static int churn_view(pdshm_seg *ro, int view) {
  int n = 0;
  pdshm_alloc_info a;
  switch (view) {
  case 0: return pdshm_inspect_scopes(ro, visit_vars, ro);
  case 1: return pdshm_inspect_locks(ro, count_lock, &n);
  case 2: return pdshm_inspect_alloc(ro, &a);
  default: return pdshm_procs(ro, NULL, 0);
  }
}

/* Views taken while two processes churn: a walk torn by a writer is walked
 * again, so every call answers with the data, every time; a healthy
 * segment is never called damaged (EBADSEG).  The views run for about a
 * second of the churn, and at least ten rounds however slow the machine. */
START_TEST(views_on_a_churning_segment) {
  static const char *const views[] = {"scopes and their variables", "locks", "alloc", "procs"};
  make(16u << 20, 8, 0);
  struct kid k[2] = {{.arg = {1500}}, {.arg = {1500}}};
  for (int i = 0; i < 2; i++) kid_start(&k[i], kid_churn);
  for (int i = 0; i < 2; i++) kid_recv(&k[i]);
  pdshm_seg *ro = attach_ro();
  uint64_t end = tu_now_ns() + 1000000000ull;
  for (unsigned round = 0; round < 10 || tu_now_ns() < end; round++)
    for (int i = 0; i < 4; i++) {
      int rc = churn_view(ro, i);
      ck_assert_msg(rc >= 0, "view of %s, round %u: %s (%s)", views[i], round,
                    pdshm_err_name(rc), pdshm_last_error());
    }
  for (int i = 0; i < 2; i++) ck_assert_int_eq(kid_end(&k[i]), 0);
  ck_assert_int_eq(pdshm_detach(ro), 0);
  ck_assert_int_eq(pdshm_check(g_seg, stderr), 0);
}
END_TEST

static Suite *inspect_suite(void) {
  Suite *s = suite_create("inspect");
  TCase *tc = kid_tcase(s, "procs", 20);
  tcase_add_test(tc, procs_alive_dead_and_held);
  tcase_add_test(tc, procs_on_a_damaged_table);
  tc = kid_tcase(s, "views", 30);
  tcase_add_test(tc, scopes_show_the_tree_built);
  tcase_add_test(tc, scopes_walk_stops_when_asked);
  tcase_add_test(tc, vars_show_what_was_built);
  tcase_add_test(tc, locks_show_guards_holders_counters);
  tcase_add_test(tc, locks_count_waits_and_deaths);
  tcase_add_test(tc, seg_and_alloc_match_the_segment);
  tcase_add_test(tc, views_refuse_damage);
  tcase_add_test(tc, views_wait_for_a_writer_half_way);
  tcase_add_test(tc, views_on_a_churning_segment);
  return s;
}

int main(void) { return tu_run(inspect_suite()) ? 1 : 0; }
