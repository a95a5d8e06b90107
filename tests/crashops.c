/* crashops.c - the operations the crash suites kill (crashrun.h): each with
 * the preparation its child makes before the crash points count. */
#include <string.h>

#include "crashrun.h"
#include "model/varlock.h"

/* ---- operations, as the child runs them --------------------------------------------- */

int crash_open_params(struct cx *c) {
  return pdshm_root(c->seg, &c->root) || pdshm_scope_open(c->seg, "params", &c->params);
}
int crash_prep_var(struct cx *c, const char *name) {
  if (crash_open_params(c)) return 1;
  c->v = pdshm_find_local_var(c->params, name);
  return !c->v;
}
static int prep_w(struct cx *c) { return crash_prep_var(c, "w"); }
static int prep_b(struct cx *c) { return crash_prep_var(c, "b"); }
static int prep_e(struct cx *c) { return crash_prep_var(c, "e"); }
static int prep_lk(struct cx *c) { return crash_prep_var(c, "lk"); }
/* lk with its shared takes uncounted (lib/model/varlock_bias.c): a take
 * is then its record, a writer's take a revocation and a scan. */
static int prep_lk_biased(struct cx *c) {
  if (prep_lk(c)) return 1;
  atomic_store(&pdshm__var_rec(c->v)->lk_rbias, VL_BIAS_ON);
  return 0;
}

/* A local scope with three tensors, a label and operator lists. */
static int prep_local(struct cx *c) {
  pdshm_var *v;
  if (crash_open_params(c) || pdshm_scope_new(c->params, NULL, &c->s)) return 1;
  for (int i = 0; i < 3; i++) {
    const char *n[] = {"x", "y", "z"};
    int64_t d = (int64_t[]){16, 4096, 65536}[i];
    if (pdshm_var_create(c->s, n[i], &v) || pdshm_tensor_resize(v, PDSHM_F32, 1, &d)) return 1;
  }
  return pdshm_var_set_label(v, "input") || pdshm_var_add_reader(v, "mul") ||
         pdshm_var_lock(v, 1) || pdshm_var_unlock(v); /* a lock entry to give back */
}

/* A local scope whose parent is another local scope only it keeps alive. */
static int prep_chain(struct cx *c) {
  pdshm_scope *a;
  pdshm_var *v;
  int64_t d = 1024;
  if (crash_open_params(c) || pdshm_scope_new(c->params, NULL, &a) ||
      pdshm_scope_new(a, NULL, &c->s) || pdshm_var_get(a, "va", &v) ||
      pdshm_tensor_resize(v, PDSHM_U8, 1, &d) || pdshm_var_get(c->s, "vb", &v))
    return 1;
  return pdshm_scope_release(a);
}

/* big's 320 KiB freed with the retain budget spent (a hint this sets): its
 * pages are given back, and e's resize below carves from a block whose pages
 * must be reserved again. */
static int prep_holey(struct cx *c) {
  pdshm_var *big;
  int64_t one = 1;
  if (prep_e(c) || !(big = pdshm_find_local_var(c->params, "big"))) return 1;
  c->seg->hdr->heap.retained = CRASH_SEG_SIZE;
  return pdshm_tensor_resize(big, PDSHM_U8, 1, &one);
}

/* The child's own pins: on w, on b, on y of a local scope. */
static int prep_pin_w(struct cx *c) { return prep_w(c) || pdshm_tensor_pin(c->v, &c->pin, NULL); }
static int prep_pin_b(struct cx *c) { return prep_b(c) || pdshm_tensor_pin(c->v, &c->pin, NULL); }
static int prep_pin_local(struct cx *c) {
  return prep_local(c) || pdshm_tensor_pin(pdshm_find_local_var(c->s, "y"), &c->pin, NULL);
}
static int prep_big(struct cx *c) { return crash_prep_var(c, "big"); }
/* w pinned by the child and erased: its unpin frees the orphan. */
static int prep_orphan_w(struct cx *c) { return prep_pin_w(c) || pdshm_var_erase(c->params, "w"); }

static int run_pin(struct cx *c) { return pdshm_tensor_pin(c->v, &c->pin, NULL); }
static int run_unpin(struct cx *c) { return pdshm_tensor_unpin(c->pin); }
static int run_resize_small(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_U8, 1, (int64_t[]){100});
}

static int run_new_named(struct cx *c) { return pdshm_scope_new(c->params, "fresh", &c->s); }
static int run_new_anon(struct cx *c) {
  pdshm_var *v;
  int64_t d = 512;
  return pdshm_scope_new(c->params, NULL, &c->s) || pdshm_var_get(c->s, "t", &v) ||
         pdshm_tensor_resize(v, PDSHM_F32, 1, &d);
}
static int run_release(struct cx *c) { return pdshm_scope_release(c->s); }
static int run_handles(struct cx *c) {
  pdshm_scope *a, *b, *d;
  return pdshm_scope_dup(c->params, &a) || pdshm_scope_parent(c->params, &b) ||
         pdshm_scope_open(c->seg, "params/sub/deep", &d) || pdshm_scope_release(a) ||
         pdshm_scope_release(b) || pdshm_scope_release(d);
}
static int run_unlink(struct cx *c) { return pdshm_scope_unlink(c->params, "sub"); }
static int run_drop_kids(struct cx *c) { return pdshm_scope_drop_kids(c->params); }
static int run_get(struct cx *c) { return pdshm_var_get(c->params, "fresh", &c->v); }
static int run_create(struct cx *c) { return pdshm_var_create(c->params, "made", &c->v); }
static int run_var_new(struct cx *c) { return pdshm_var_new(c->params, &c->v); }
static int run_grow(struct cx *c) {
  pdshm_scope *full;
  return pdshm_scope_open(c->seg, "full", &full) || pdshm_var_get(full, "a5", &c->v);
}
static int run_erase(struct cx *c) { return pdshm_var_erase(c->params, "w"); }
static int run_rename(struct cx *c) { return pdshm_var_rename(c->params, "w", "w.renamed"); }
static int run_label_new(struct cx *c) { return pdshm_var_set_label(c->v, "input"); }
static int run_label_swap(struct cx *c) { return pdshm_var_set_label(c->v, "objective"); }
static int run_label_clear(struct cx *c) { return pdshm_var_set_label(c->v, NULL); }
static int run_reader(struct cx *c) { return pdshm_var_add_reader(c->v, "matmul"); }
static int run_writer(struct cx *c) { return pdshm_var_add_writer(c->v, "adam"); }
static int run_resize_grow(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_F32, 2, (int64_t[]){64, 64});
}
static int run_resize_same(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_I32, 2, (int64_t[]){64, 16});
}
static int run_resize_zero(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_F32, 2, (int64_t[]){0, 7});
}
static int run_resize_large(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_U8, 1, (int64_t[]){300 << 10});
}
/* More than the segment grows to: the allocator flushes its caches and
 * takes dead processes' before it answers ENOMEM, and nothing changes. */
static int run_resize_enomem(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_U8, 1, (int64_t[]){CRASH_SEG_MAX}) != PDSHM_ENOMEM;
}
/* More than the segment holds now: it grows (heap_grow.c). */
static int run_resize_beyond(struct cx *c) {
  return pdshm_tensor_resize(c->v, PDSHM_U8, 1, (int64_t[]){3 * CRASH_SEG_SIZE / 2});
}
static int run_lock_excl(struct cx *c) { return pdshm_var_lock(c->v, 1) || pdshm_var_unlock(c->v); }
static int run_lock_shared(struct cx *c) {
  return pdshm_var_lock(c->v, 0) || pdshm_var_unlock(c->v);
}
static int run_hold_excl(struct cx *c) { return pdshm_var_lock(c->v, 1); }
static int run_hold_shared(struct cx *c) { return pdshm_var_lock(c->v, 0); }
static int run_unique(struct cx *c) {
  char buf[64];
  return pdshm_unique_name(c->seg, "step", buf, sizeof buf);
}
static int run_detach(struct cx *c) { return pdshm_detach(c->seg); }
static int run_attach(struct cx *c) { return 0; } /* the attach itself, armed first */

/* The allocator on its own: every size class path, cache refills and
 * drains, a large block, a punched one reserved again. */
static int run_heap(struct cx *c) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(c->seg);
  pdshm_off_t p[48];
  int rc = 0;
  for (int i = 0; i < 48 && !rc; i++) {
    size_t n = i % 12 == 11 ? (size_t)(200u << 10) : (size_t)(24u << (i % 12));
    rc = pdshm__alloc(c->seg, ln, n, PDSHM_T_RAW, &p[i]);
  }
  for (int i = 0; i < 48 && !rc; i += 2) pdshm__free(c->seg, ln, p[i]);
  if (!rc) pdshm__cache_flush(c->seg, ln);
  for (int i = 1; i < 48 && !rc; i += 2) pdshm__free(c->seg, ln, p[i]);
  pdshm__lane_put(ln);
  return rc;
}

/* A large free kept backed that sat unused past its age: the next locked
 * allocation gives its pages back (heap_trim). */
static int prep_aged(struct cx *c) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(c->seg);
  pdshm_off_t p;
  c->seg->hdr->heap.retained = 0; /* the budget free for it */
  int rc = pdshm__alloc(c->seg, ln, 300u << 10, PDSHM_T_RAW, &p);
  if (!rc) pdshm__free(c->seg, ln, p);
  pdshm__lane_put(ln);
  if (!rc && !c->seg->hdr->heap.retained) return 1; /* nothing kept: nothing to age */
  c->seg->hdr->heap.retained_ns = 0; /* kept since boot */
  return rc;
}

static int run_trim(struct cx *c) {
  struct pdshm_lane_ctx *ln = pdshm__lane_get(c->seg);
  pdshm_off_t p;
  int rc = pdshm__alloc(c->seg, ln, 200u << 10, PDSHM_T_RAW, &p);
  bool trimmed = c->seg->hdr->heap.retained == 0;
  if (!rc) pdshm__free(c->seg, ln, p);
  pdshm__lane_put(ln);
  return rc || !trimmed;
}

/* A resize that happened bumped the version, whenever its process died: the
 * version is what other processes poll to see a change. */
static void resized_means_bumped(pdshm_seg *seg) {
  pdshm_scope *params;
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &params), 0);
  pdshm_var *b = pdshm_find_local_var(params, "b");
  if (pdshm_tensor_nbytes(b) != 32 * sizeof(float))
    ck_assert_msg(pdshm_var_version(b) > 1, "b was resized, its version was not bumped");
  ck_assert_int_eq(pdshm_scope_release(params), 0);
}

const struct op crash_ops[] = {
    {"attach", NULL, run_attach, NULL, true, NULL, NULL},
    {"detach", prep_local, run_detach, NULL, false, NULL, NULL},
    {"heap", NULL, run_heap, NULL, false, NULL, NULL},
    {"heap_trim", prep_aged, run_trim, NULL, false, NULL, NULL},
    {"scope_new_named", crash_open_params, run_new_named, NULL, false, NULL, NULL},
    {"scope_new_anon", crash_open_params, run_new_anon, NULL, false, NULL, NULL},
    {"scope_release", prep_local, run_release, NULL, false, NULL, NULL},
    {"scope_release_cascade", prep_chain, run_release, NULL, false, NULL, NULL},
    {"scope_handles", crash_open_params, run_handles, NULL, false, NULL, NULL},
    {"scope_unlink", crash_open_params, run_unlink, NULL, false, NULL, NULL},
    {"scope_drop_kids", crash_open_params, run_drop_kids, "scope.drop_kids.one", false, NULL, NULL},
    {"var_get", crash_open_params, run_get, NULL, false, NULL, NULL},
    {"var_create", crash_open_params, run_create, NULL, false, NULL, NULL},
    {"var_new", crash_open_params, run_var_new, NULL, false, NULL, NULL},
    {"var_get_grows_index", crash_open_params, run_grow, NULL, false, NULL, NULL},
    {"var_erase", crash_open_params, run_erase, NULL, false, NULL, NULL},
    {"var_rename", crash_open_params, run_rename, NULL, false, NULL, NULL},
    {"set_label_new", prep_e, run_label_new, NULL, false, NULL, NULL},
    {"set_label_replace", prep_w, run_label_swap, NULL, false, NULL, NULL},
    {"set_label_clear", prep_w, run_label_clear, NULL, false, NULL, NULL},
    {"add_reader", prep_w, run_reader, NULL, false, NULL, NULL},
    {"add_writer", prep_w, run_writer, NULL, false, NULL, NULL},
    {"resize_grow", prep_b, run_resize_grow, NULL, false, resized_means_bumped, NULL},
    {"resize_in_place", prep_w, run_resize_same, NULL, false, NULL, NULL},
    {"resize_to_zero", prep_w, run_resize_zero, NULL, false, NULL, NULL},
    {"resize_large", prep_e, run_resize_large, NULL, false, NULL, NULL},
    {"resize_reserve_again", prep_holey, run_resize_large, NULL, false, NULL, NULL},
    {"resize_enomem", prep_b, run_resize_enomem, NULL, false, NULL, NULL},
    {"resize_grows_segment", prep_e, run_resize_beyond, NULL, false, NULL, NULL},
    {"var_lock_first", prep_e, run_lock_excl, NULL, false, NULL, NULL},
    {"var_lock_exclusive", prep_lk, run_lock_excl, NULL, false, NULL, NULL},
    {"var_lock_shared", prep_lk, run_lock_shared, NULL, false, NULL, NULL},
    {"var_lock_die_exclusive", prep_lk, run_hold_excl, NULL, false, NULL, NULL},
    {"var_lock_die_shared", prep_lk, run_hold_shared, NULL, false, NULL, NULL},
    {"var_lock_shared_biased", prep_lk_biased, run_lock_shared, NULL, false, NULL, NULL},
    {"var_lock_exclusive_biased", prep_lk_biased, run_lock_excl, NULL, false, NULL, NULL},
    {"unique_name", NULL, run_unique, NULL, false, NULL, NULL},
    {"pin", prep_w, run_pin, NULL, false, NULL, NULL},
    {"unpin", prep_pin_w, run_unpin, NULL, false, NULL, NULL},
    {"unpin_orphan", prep_orphan_w, run_unpin, NULL, false, NULL, NULL},
    {"erase_own_pinned", prep_pin_w, run_erase, NULL, false, NULL, NULL},
    {"resize_own_pinned", prep_pin_b, run_resize_grow, NULL, false, NULL, NULL},
    {"release_own_pinned", prep_pin_local, run_release, NULL, false, NULL, NULL},
    {"detach_own_pinned", prep_pin_local, run_detach, NULL, false, NULL, NULL},
    {"erase_pinned", crash_open_params, run_erase, NULL, false, NULL, "params/w"},
    {"resize_pinned", prep_b, run_resize_grow, NULL, false, NULL, "params/b"},
    {"resize_large_pinned", prep_big, run_resize_small, NULL, false, NULL, "params/big"},
    {"unlink_pinned", crash_open_params, run_unlink, NULL, false, NULL, "params/sub/s"},
};
const size_t crash_nops = sizeof crash_ops / sizeof crash_ops[0];

static int run_reap(struct cx *c) { return pdshm_reap(c->seg, NULL); }
/* Attaching reaps the dead slot it is about to take: armed from the start. */
const struct op crash_reaper = {"reaper", NULL, run_reap, NULL, true, NULL, NULL};

const struct op *crash_op_named(const char *name) {
  for (size_t i = 0; i < crash_nops; i++)
    if (!strcmp(crash_ops[i].name, name)) return &crash_ops[i];
  ck_abort_msg("no op %s", name);
  return NULL;
}
