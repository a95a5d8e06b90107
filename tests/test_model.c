/* test_model.c - the seed rules (DESIGN §1) one by one, in one process. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static pdshm_seg *seg;
static pdshm_scope *root;

static void setup(void) {
  seg = tu_create("model", 16u << 20, 0);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
}

static void teardown(void) {
  if (root) pdshm_scope_release(root);
  if (seg) {
    ck_assert_int_eq(pdshm_check(seg, stderr), 0);
    pdshm_detach(seg);
  }
  tu_cleanup();
}

static uint64_t used(void) {
  pdshm_stats st;
  ck_assert_int_eq(pdshm_seg_stats(seg, &st), 0);
  return st.used;
}

static pdshm_scope *kid(pdshm_scope *p, const char *name) {
  pdshm_scope *s = NULL;
  ck_assert_int_eq(pdshm_scope_new(p, name, &s), 0);
  return s;
}

/* S1: Var(name) gets or creates, locally. */
START_TEST(var_get_creates_then_gets) {
  pdshm_var *a, *b;
  ck_assert_int_eq(pdshm_var_get(root, "w", &a), 0);
  ck_assert_int_eq(pdshm_var_get(root, "w", &b), 0);
  ck_assert_ptr_eq(a, b);
  ck_assert_str_eq(pdshm_var_name(a), "w");
}
END_TEST

/* S1: get-or-create in a child shadows the parent's variable. */
START_TEST(var_get_shadows_parent) {
  pdshm_var *p, *c;
  pdshm_scope *child = kid(root, NULL);
  ck_assert_int_eq(pdshm_var_get(root, "x", &p), 0);
  ck_assert_int_eq(pdshm_var_get(child, "x", &c), 0);
  ck_assert_ptr_ne(p, c);
  ck_assert_ptr_eq(pdshm_find_var(child, "x"), c);
  ck_assert_ptr_eq(pdshm_find_var(root, "x"), p);
  pdshm_scope_release(child);
}
END_TEST

/* S2: CreateVariable fails on a local conflict and changes nothing. */
START_TEST(var_create_conflict) {
  pdshm_var *a, *b = (pdshm_var *)1;
  ck_assert_int_eq(pdshm_var_create(root, "dup", &a), 0);
  uint64_t before = used();
  ck_assert_int_eq(pdshm_var_create(root, "dup", &b), PDSHM_EEXIST);
  ck_assert_uint_eq(used(), before);
  ck_assert_ptr_eq(pdshm_find_local_var(root, "dup"), a);
}
END_TEST

/* S3: FindVar walks the parent chain, nearest wins, NULL when absent. */
START_TEST(find_var_up_the_chain) {
  pdshm_scope *a = kid(root, "a"), *b = kid(a, "b"), *c = kid(b, NULL);
  pdshm_var *v_root, *v_b;
  ck_assert_int_eq(pdshm_var_create(root, "n", &v_root), 0);
  ck_assert_ptr_eq(pdshm_find_var(c, "n"), v_root);
  ck_assert_ptr_null(pdshm_find_local_var(c, "n"));
  ck_assert_int_eq(pdshm_var_create(b, "n", &v_b), 0);
  ck_assert_ptr_eq(pdshm_find_var(c, "n"), v_b);
  ck_assert_ptr_null(pdshm_find_var(c, "absent"));
  ck_assert_ptr_null(pdshm_find_var(c, ""));
  ck_assert_ptr_null(pdshm_find_var(c, NULL));
  pdshm_scope_release(c);
  pdshm_scope_release(b);
  pdshm_scope_release(a);
}
END_TEST

/* S3: no upward leak: a child's variable is invisible from the parent. */
START_TEST(no_upward_leak) {
  pdshm_scope *c = kid(root, NULL);
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(c, "local", &v), 0);
  ck_assert_ptr_null(pdshm_find_var(root, "local"));
  pdshm_scope_release(c);
}
END_TEST

/* S4: erase; erasing a shadow shows the parent's variable again. */
START_TEST(erase_falls_back_to_parent) {
  pdshm_scope *c = kid(root, NULL);
  pdshm_var *p, *s;
  ck_assert_int_eq(pdshm_var_create(root, "v", &p), 0);
  ck_assert_int_eq(pdshm_var_create(c, "v", &s), 0);
  ck_assert_int_eq(pdshm_var_erase(c, "v"), 0);
  ck_assert_ptr_eq(pdshm_find_var(c, "v"), p);
  ck_assert_int_eq(pdshm_var_erase(c, "v"), PDSHM_ENOENT); /* not local */
  ck_assert_ptr_eq(pdshm_find_var(root, "v"), p);
  pdshm_scope_release(c);
}
END_TEST

/* S4 + S6: erase gives every byte back, tensors included. */
START_TEST(erase_returns_memory) {
  uint64_t before = used();
  pdshm_var *v;
  int64_t dims[2] = {100, 100};
  ck_assert_int_eq(pdshm_var_create(root, "t", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 2, dims), 0);
  ck_assert_int_eq(pdshm_var_set_label(v, "parameter"), 0);
  ck_assert_int_eq(pdshm_var_add_reader(v, "mul"), 0);
  ck_assert_uint_gt(used(), before);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  /* the root's table may keep its size: compare after a second cycle */
  uint64_t after_one = used();
  ck_assert_int_eq(pdshm_var_create(root, "t", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 2, dims), 0);
  ck_assert_int_eq(pdshm_var_erase(root, "t"), 0);
  ck_assert_uint_eq(used(), after_one);
}
END_TEST

/* S6 + S7: a local scope's death frees its variables and buffers; the
 * parent outlives the child; used returns exactly to where it was. */
START_TEST(local_scope_reclaimed) {
  uint64_t before = used();
  pdshm_scope *c = kid(root, NULL);
  for (int i = 0; i < 50; i++) {
    char name[16];
    pdshm_var *v;
    int64_t d = 1000;
    snprintf(name, sizeof name, "v%d", i);
    ck_assert_int_eq(pdshm_var_create(c, name, &v), 0);
    ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F64, 1, &d), 0);
  }
  pdshm_scope *g = kid(c, NULL); /* a grandchild keeps c alive */
  ck_assert_int_eq(pdshm_scope_release(c), 0);
  ck_assert_ptr_nonnull(pdshm_find_var(g, "v7"));
  ck_assert_int_eq(pdshm_scope_release(g), 0);
  ck_assert_uint_eq(used(), before);
}
END_TEST

/* S7: the parent of a child; ENOENT at the root. */
START_TEST(scope_parent) {
  pdshm_scope *c = kid(root, NULL), *p = NULL, *pp = NULL;
  ck_assert_int_eq(pdshm_scope_parent(c, &p), 0);
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(root, "marker", &v), 0);
  ck_assert_ptr_eq(pdshm_find_local_var(p, "marker"), v);
  ck_assert_int_eq(pdshm_scope_parent(p, &pp), PDSHM_ENOENT);
  pdshm_scope_release(p);
  pdshm_scope_release(c);
}
END_TEST

/* S9: a weak reference reads NULL after erase, even when the name returns. */
START_TEST(varref_goes_stale) {
  pdshm_var *v, *w;
  ck_assert_int_eq(pdshm_var_create(root, "weak", &v), 0);
  pdshm_varref r = pdshm_var_ref(v);
  ck_assert_ptr_eq(pdshm_varref_get(seg, r), v);
  ck_assert_int_eq(pdshm_var_erase(root, "weak"), 0);
  ck_assert_ptr_null(pdshm_varref_get(seg, r));
  ck_assert_int_eq(pdshm_var_create(root, "weak", &w), 0);
  ck_assert_ptr_null(pdshm_varref_get(seg, r));
  ck_assert_ptr_eq(pdshm_varref_get(seg, pdshm_var_ref(w)), w);
}
END_TEST

/* S9: ... and after its scope dies. */
START_TEST(varref_stale_after_scope_death) {
  pdshm_scope *c = kid(root, NULL);
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(c, "x", &v), 0);
  pdshm_varref r = pdshm_var_ref(v);
  pdshm_scope_release(c);
  ck_assert_ptr_null(pdshm_varref_get(seg, r));
  pdshm_varref junk = {.off = 12345, .gen = 1};
  ck_assert_ptr_null(pdshm_varref_get(seg, junk));
}
END_TEST

/* S10: drop_kids unlinks the kids, keeps the scope's own variables, and
 * handles that others hold stay usable. */
START_TEST(drop_kids) {
  pdshm_scope *p = kid(root, "p"), *named = kid(p, "k1"), *anon = kid(p, NULL);
  pdshm_var *own, *kv;
  ck_assert_int_eq(pdshm_var_create(p, "own", &own), 0);
  ck_assert_int_eq(pdshm_var_create(named, "kv", &kv), 0);
  ck_assert_int_eq(pdshm_scope_drop_kids(p), 0);
  pdshm_scope *again = NULL;
  ck_assert_int_eq(pdshm_scope_open(seg, "p/k1", &again), PDSHM_ENOENT);
  ck_assert_ptr_eq(pdshm_find_local_var(p, "own"), own);
  ck_assert_ptr_eq(pdshm_find_local_var(named, "kv"), kv); /* still usable */
  ck_assert_ptr_eq(pdshm_find_var(anon, "own"), own);
  pdshm_scope *k2 = kid(p, "k1"); /* the name is free again */
  pdshm_scope_release(k2);
  pdshm_scope_release(named);
  pdshm_scope_release(anon);
  pdshm_scope_release(p);
}
END_TEST

/* S10b: a named scope outlives its creator's handle until unlinked. */
START_TEST(named_scope_persists_until_unlinked) {
  uint64_t before = used();
  pdshm_scope *a = kid(root, "params"), *b = kid(a, "fc");
  pdshm_var *w;
  ck_assert_int_eq(pdshm_var_create(b, "w", &w), 0);
  pdshm_scope_release(b);
  pdshm_scope_release(a);
  pdshm_scope *o = NULL;
  ck_assert_int_eq(pdshm_scope_open(seg, "params/fc", &o), 0);
  ck_assert_ptr_eq(pdshm_find_local_var(o, "w"), w);
  ck_assert_str_eq(pdshm_scope_name(o), "fc");
  pdshm_scope_release(o);
  ck_assert_int_eq(pdshm_scope_unlink(root, "params"), 0); /* the whole subtree */
  ck_assert_int_eq(pdshm_scope_open(seg, "params", &o), PDSHM_ENOENT);
  ck_assert_int_eq(pdshm_scope_open(seg, "params/fc", &o), PDSHM_ENOENT);
  ck_assert_uint_eq(used(), before);
}
END_TEST

/* Named scopes: siblings unique, parent must be named, unlinked parents
 * accept no named kids, bad names rejected. */
START_TEST(scope_naming_rules) {
  pdshm_scope *a = kid(root, "a"), *x = NULL, *anon = kid(root, NULL);
  ck_assert_int_eq(pdshm_scope_new(root, "a", &x), PDSHM_EEXIST);
  ck_assert_int_eq(pdshm_scope_new(anon, "n", &x), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_scope_new(root, "has/slash", &x), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_scope_new(root, "", &x), PDSHM_EINVAL);
  char big[PDSHM_NAME_MAX + 2];
  memset(big, 'n', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  ck_assert_int_eq(pdshm_scope_new(root, big, &x), PDSHM_ENAMETOOLONG);
  big[PDSHM_NAME_MAX] = '\0';
  ck_assert_int_eq(pdshm_scope_new(root, big, &x), 0);
  pdshm_scope_release(x);
  ck_assert_int_eq(pdshm_scope_unlink(root, "a"), 0);
  ck_assert_int_ne(pdshm_scope_new(a, "late", &x), 0);
  ck_assert_int_eq(pdshm_scope_unlink(root, "a"), PDSHM_ENOENT);
  ck_assert_int_eq(pdshm_scope_open(seg, "", &x), 0); /* the root */
  pdshm_scope_release(x);
  ck_assert_int_eq(pdshm_scope_open(seg, "a//b", &x), PDSHM_EINVAL);
  pdshm_scope_release(a);
  pdshm_scope_release(anon);
}
END_TEST

/* S11: generated names never repeat and never collide with user names. */
START_TEST(var_new_names) {
  pdshm_var *v, *u;
  ck_assert_int_eq(pdshm_var_new(root, &v), 0);
  char first[64];
  snprintf(first, sizeof first, "%s", pdshm_var_name(v));
  ck_assert_int_eq(pdshm_var_erase(root, first), 0);
  /* a user takes the next likely names */
  for (int i = 0; i < 8; i++) {
    char n[64];
    snprintf(n, sizeof n, "@var-%d", atoi(first + 5) + 1 + i);
    ck_assert_int_eq(pdshm_var_create(root, n, &u), 0);
  }
  for (int i = 0; i < 32; i++) {
    ck_assert_int_eq(pdshm_var_new(root, &v), 0);
    ck_assert_str_ne(pdshm_var_name(v), first);
  }
}
END_TEST

/* S12: labels, and enumerating by label. */
static int count_cb(pdshm_var *v, void *arg) {
  (void)v;
  ++*(int *)arg;
  return 0;
}
static int stop_cb(pdshm_var *v, void *arg) {
  (void)v;
  (void)arg;
  return 42;
}
START_TEST(labels_and_foreach) {
  pdshm_var *v;
  for (int i = 0; i < 10; i++) {
    char n[16];
    snprintf(n, sizeof n, "p%d", i);
    ck_assert_int_eq(pdshm_var_create(root, n, &v), 0);
    ck_assert_str_eq(pdshm_var_label(v), "");
    if (i % 3 == 0) ck_assert_int_eq(pdshm_var_set_label(v, "parameter"), 0);
    else ck_assert_int_eq(pdshm_var_set_label(v, "input"), 0);
  }
  int n = 0;
  ck_assert_int_eq(pdshm_scope_foreach_var(root, "parameter", count_cb, &n), 0);
  ck_assert_int_eq(n, 4);
  n = 0;
  ck_assert_int_eq(pdshm_scope_foreach_var(root, NULL, count_cb, &n), 0);
  ck_assert_int_eq(n, 10);
  ck_assert_int_eq(pdshm_scope_foreach_var(root, NULL, stop_cb, NULL), 42);
  ck_assert_int_eq(pdshm_var_set_label(v, NULL), 0);
  ck_assert_str_eq(pdshm_var_label(v), "");
}
END_TEST

/* S13: readers and writers, as sets. */
START_TEST(readers_writers) {
  pdshm_var *v;
  const char *ops[4];
  ck_assert_int_eq(pdshm_var_create(root, "x", &v), 0);
  ck_assert_int_eq(pdshm_var_readers(v, ops, 4), 0);
  ck_assert_int_eq(pdshm_var_add_reader(v, "mul"), 0);
  ck_assert_int_eq(pdshm_var_add_reader(v, "add"), 0);
  ck_assert_int_eq(pdshm_var_add_reader(v, "mul"), 0);
  ck_assert_int_eq(pdshm_var_add_writer(v, "data"), 0);
  ck_assert_int_eq(pdshm_var_readers(v, ops, 4), 2);
  ck_assert_str_eq(ops[0], "mul");
  ck_assert_str_eq(ops[1], "add");
  ck_assert_int_eq(pdshm_var_readers(v, ops, 1), 2);
  ck_assert_int_eq(pdshm_var_writers(v, ops, 4), 1);
  ck_assert_str_eq(ops[0], "data");
  ck_assert_int_eq(pdshm_var_add_reader(v, ""), PDSHM_EINVAL);
}
END_TEST

/* S14: unique names, prefix-N, and a too-small buffer. */
START_TEST(unique_names) {
  char a[64], b[64], tiny[4];
  ck_assert_int_eq(pdshm_unique_name(seg, "fc", a, sizeof a), 0);
  ck_assert_int_eq(pdshm_unique_name(seg, "fc", b, sizeof b), 0);
  ck_assert_str_ne(a, b);
  ck_assert_int_eq(strncmp(a, "fc-", 3), 0);
  ck_assert_int_eq(pdshm_unique_name(seg, "fc", tiny, sizeof tiny), PDSHM_ERANGE);
  ck_assert_int_eq(pdshm_unique_name(seg, NULL, a, sizeof a), PDSHM_EINVAL);
}
END_TEST

/* S15: tensors: dtypes, shapes, zero dims, bad shapes, alignment, version. */
START_TEST(tensors) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(root, "t", &v), 0);
  ck_assert_ptr_null(pdshm_tensor_data(v));
  ck_assert_int_eq(pdshm_tensor_dtype(v), PDSHM_ETYPE);
  uint64_t v0 = pdshm_var_version(v);
  int64_t dims[PDSHM_NDIM_MAX + 1];
  for (int i = 0; i <= PDSHM_NDIM_MAX; i++) dims[i] = 2;
  for (int dt = PDSHM_BOOL; dt <= PDSHM_F64; dt++) {
    ck_assert_int_eq(pdshm_tensor_resize(v, dt, 3, dims), 0);
    ck_assert_int_eq(pdshm_tensor_dtype(v), dt);
    ck_assert_uint_eq(pdshm_tensor_nbytes(v), 8 * pdshm_dtype_size(dt));
    ck_assert_uint_eq((uintptr_t)pdshm_tensor_data(v) % PDSHM_TENSOR_ALIGN, 0);
  }
  ck_assert_uint_gt(pdshm_var_version(v), v0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, PDSHM_NDIM_MAX, dims), 0);
  ck_assert_int_eq(pdshm_tensor_ndim(v), PDSHM_NDIM_MAX);
  uint64_t before = used(), ver = pdshm_var_version(v);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, PDSHM_NDIM_MAX + 1, dims), PDSHM_EINVAL);
  int64_t neg[2] = {3, -1}, huge[2] = {INT64_MAX, 4}, zero[2] = {0, 7};
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 2, neg), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 2, huge), PDSHM_EOVERFLOW);
  ck_assert_int_eq(pdshm_tensor_resize(v, 99, 2, zero), PDSHM_EINVAL);
  ck_assert_uint_eq(used(), before); /* a failed resize changes nothing */
  ck_assert_uint_eq(pdshm_var_version(v), ver);
  ck_assert_int_eq(pdshm_tensor_ndim(v), PDSHM_NDIM_MAX);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 2, zero), 0);
  ck_assert_uint_eq(pdshm_tensor_nbytes(v), 0);
  ck_assert_ptr_nonnull(pdshm_tensor_data(v));
  ck_assert_int_eq(pdshm_tensor_dims(v)[1], 7);
}
END_TEST

/* A resize too large for the segment fails cleanly. */
START_TEST(tensor_enomem) {
  pdshm_var *v;
  int64_t d = 64 << 20;
  ck_assert_int_eq(pdshm_var_create(root, "big", &v), 0);
  uint64_t before = used();
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_U8, 1, &d), PDSHM_ENOMEM);
  ck_assert_uint_eq(used(), before);
  d = 1 << 20;
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_U8, 1, &d), 0);
}
END_TEST

/* A pdshm_var * kept past the erase of its variable: every edit checks the
 * record under the scope's lock and answers ESTALE, writing nothing (a
 * resize used to journal into the freed record and publish a buffer no
 * variable reached).  The record reused for a new variable is that one. */
START_TEST(edits_of_an_erased_variable_are_estale) {
  pdshm_var *v, *w;
  pdshm_pin *pin = NULL;
  int64_t small = 16, big = 100000;
  ck_assert_int_eq(pdshm_var_get(root, "gone", &v), 0);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &small), 0);
  const uint64_t before = used();
  ck_assert_int_eq(pdshm_var_erase(root, "gone"), 0);
  const uint64_t after = used();
  ck_assert_uint_lt(after, before);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &big), PDSHM_ESTALE);
  ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &small), PDSHM_ESTALE);
  ck_assert_int_eq(pdshm_var_set_label(v, "lbl"), PDSHM_ESTALE);
  ck_assert_int_eq(pdshm_var_add_reader(v, "op"), PDSHM_ESTALE);
  ck_assert_int_eq(pdshm_var_add_writer(v, "op"), PDSHM_ESTALE);
  ck_assert_int_eq(pdshm_var_lock(v, 1), PDSHM_ESTALE);
  ck_assert_int_eq(pdshm_var_lock(v, 0), PDSHM_ESTALE);
  ck_assert_int_eq(pdshm_tensor_pin(v, &pin, NULL), PDSHM_ESTALE);
  ck_assert_ptr_null(pin);
  ck_assert_uint_eq(used(), after);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
  /* The same record handed out again (this lane's cache gives back what it
   * just took) is the new variable: the stale pointer now edits it. */
  ck_assert_int_eq(pdshm_var_get(root, "next", &w), 0);
  if (w == v) {
    ck_assert_int_eq(pdshm_tensor_resize(v, PDSHM_F32, 1, &big), 0);
    ck_assert_uint_eq(pdshm_tensor_nbytes(w), 400000);
  }
  ck_assert_int_eq(pdshm_var_erase(root, "next"), 0);
  ck_assert_int_eq(pdshm_check(seg, stderr), 0);
}
END_TEST

/* A variable erased while this thread holds its lock: a new variable whose
 * record is the erased one's is not taken for held, nor locked by the old
 * hold (locking it would wait for ourselves), and the unlock through the
 * erased pdshm_var * lets go of the old hold, once. */
START_TEST(var_lock_held_across_its_erase) {
  pdshm_options o = {.size = 4u << 20};
  pdshm_seg *few = tu_create_opts(tu_name("fewlocks"), &o);
  pdshm_scope *top;
  pdshm_var *w, *n = NULL;
  char nm[16];
  ck_assert_int_eq(pdshm_root(few, &top), 0);
  for (int excl = 0; excl < 2; excl++) {
    ck_assert_int_eq(pdshm_var_get(top, "held", &w), 0);
    ck_assert_int_eq(pdshm_var_lock(w, excl), 0);
    ck_assert_int_eq(pdshm_var_erase(top, "held"), 0);
    bool reused = false;
    for (int made = 0; made < 32; made++) {
      snprintf(nm, sizeof nm, "new%d", made);
      ck_assert_int_eq(pdshm_var_get(top, nm, &n), 0);
      reused |= n == w;
      ck_assert_int_eq(pdshm_var_lock(n, made % 2), 0);
      ck_assert_int_eq(pdshm_var_unlock(n), 0);
    }
    ck_assert_int_eq(pdshm_var_unlock(w), 0); /* a new one may sit where w was: not its hold */
    ck_assert_int_eq(pdshm_var_unlock(w), PDSHM_EPERM);
    if (reused) { /* the new variable at w's record was never locked by the old hold */
      ck_assert_int_eq(pdshm_var_lock(w, 1), 0);
      ck_assert_int_eq(pdshm_var_unlock(w), 0);
    }
    for (int made = 0; made < 32; made++) {
      snprintf(nm, sizeof nm, "new%d", made);
      ck_assert_int_eq(pdshm_var_erase(top, nm), 0);
    }
  }
  ck_assert_int_eq(pdshm_check(few, stderr), 0);
  ck_assert_int_eq(pdshm_scope_release(top), 0);
  ck_assert_int_eq(pdshm_detach(few), 0);
}
END_TEST

/* Rename keeps the object; errors leave the scope unchanged. */
START_TEST(var_rename) {
  pdshm_var *a, *b;
  ck_assert_int_eq(pdshm_var_create(root, "a", &a), 0);
  ck_assert_int_eq(pdshm_var_create(root, "b", &b), 0);
  ck_assert_int_eq(pdshm_var_rename(root, "a", "c"), 0);
  ck_assert_ptr_eq(pdshm_find_var(root, "c"), a);
  ck_assert_ptr_null(pdshm_find_var(root, "a"));
  ck_assert_str_eq(pdshm_var_name(a), "c");
  ck_assert_int_eq(pdshm_var_rename(root, "c", "b"), PDSHM_EEXIST);
  ck_assert_int_eq(pdshm_var_rename(root, "zz", "q"), PDSHM_ENOENT);
  ck_assert_int_eq(pdshm_var_rename(root, "c", ""), PDSHM_EINVAL);
  ck_assert_ptr_eq(pdshm_find_var(root, "c"), a);
  ck_assert_ptr_eq(pdshm_find_var(root, "b"), b);
  for (int i = 0; i < 200; i++) { /* across table growth */
    char from[16], to[16];
    snprintf(from, sizeof from, i ? "r%d" : "c", i - 1);
    snprintf(to, sizeof to, "r%d", i);
    ck_assert_int_eq(pdshm_var_rename(root, from, to), 0);
    pdshm_var *filler;
    snprintf(from, sizeof from, "f%d", i);
    ck_assert_int_eq(pdshm_var_create(root, from, &filler), 0);
  }
  ck_assert_ptr_eq(pdshm_find_var(root, "r199"), a);
}
END_TEST

/* Many variables: growth keeps every one findable. */
START_TEST(many_vars) {
  pdshm_scope *c = kid(root, NULL);
  for (int i = 0; i < 5000; i++) {
    char n[16];
    pdshm_var *v;
    snprintf(n, sizeof n, "v%d", i);
    ck_assert_int_eq(pdshm_var_create(c, n, &v), 0);
  }
  for (int i = 0; i < 5000; i += 2) {
    char n[16];
    snprintf(n, sizeof n, "v%d", i);
    ck_assert_int_eq(pdshm_var_erase(c, n), 0);
  }
  for (int i = 0; i < 5000; i++) {
    char n[16];
    snprintf(n, sizeof n, "v%d", i);
    pdshm_var *v = pdshm_find_var(c, n);
    if (i % 2) ck_assert_str_eq(pdshm_var_name(v), n);
    else ck_assert_ptr_null(v);
  }
  pdshm_scope_release(c);
}
END_TEST

/* Variable locks: shared with shared, exclusive alone, errors. */
START_TEST(var_lock_rules) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(root, "l", &v), 0);
  ck_assert_int_eq(pdshm_var_unlock(v), PDSHM_EPERM);
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0);
  ck_assert_int_eq(pdshm_var_lock(v, 0), 0); /* shared again */
  ck_assert_int_eq(pdshm_var_lock(v, 1), PDSHM_EDEADLK);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  uint64_t ver = pdshm_var_version(v);
  ck_assert_int_eq(pdshm_var_lock(v, 1), 0);
  ck_assert_int_eq(pdshm_var_lock(v, 0), PDSHM_EDEADLK);
  ck_assert_int_eq(pdshm_var_unlock(v), 0);
  ck_assert_uint_eq(pdshm_var_version(v), ver + 1);
}
END_TEST

/* Handles: dup, release, double release through the API is the caller's
 * business, but NULLs are errors. */
START_TEST(handles) {
  pdshm_scope *d = NULL;
  ck_assert_int_eq(pdshm_scope_dup(root, &d), 0);
  ck_assert_int_eq(pdshm_scope_release(d), 0);
  ck_assert_int_eq(pdshm_scope_release(NULL), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_scope_new(NULL, NULL, &d), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_var_get(root, NULL, NULL), PDSHM_EINVAL);
  ck_assert_int_eq(pdshm_scope_open(seg, "nope", &d), PDSHM_ENOENT);
}
END_TEST

/* Detach releases every reference: anonymous scopes go, named stay. */
START_TEST(detach_releases) {
  const char *name = tu_name("detach");
  pdshm_seg *s2;
  pdshm_scope *r2, *local, *named;
  pdshm_unlink(name);
  pdshm_options small = {.size = 4u << 20};
  ck_assert_int_eq(pdshm_create(name, &small, &s2), 0);
  ck_assert_int_eq(pdshm_root(s2, &r2), 0);
  pdshm_stats st0, st1;
  ck_assert_int_eq(pdshm_seg_stats(s2, &st0), 0);
  pdshm_seg *s3 = tu_attach(name);
  pdshm_scope *r3;
  ck_assert_int_eq(pdshm_root(s3, &r3), 0);
  ck_assert_int_eq(pdshm_scope_new(r3, NULL, &local), 0);
  ck_assert_int_eq(pdshm_scope_new(r3, "kept", &named), 0);
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(local, "x", &v), 0);
  ck_assert_int_eq(pdshm_detach(s3), 0);
  ck_assert_int_eq(pdshm_seg_stats(s2, &st1), 0);
  ck_assert_uint_eq(st1.scopes, st0.scopes + 1);
  pdshm_scope *k;
  ck_assert_int_eq(pdshm_scope_open(s2, "kept", &k), 0);
  pdshm_scope_release(k);
  ck_assert_int_eq(pdshm_scope_unlink(r2, "kept"), 0);
  ck_assert_int_eq(pdshm_seg_stats(s2, &st1), 0);
  ck_assert_uint_eq(st1.used, st0.used);
  ck_assert_int_eq(pdshm_check(s2, stderr), 0);
  pdshm_scope_release(r2);
  pdshm_detach(s2);
  pdshm_unlink(name);
}
END_TEST

static Suite *model_suite(void) {
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("seed rules");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, var_get_creates_then_gets);
  tcase_add_test(tc, var_get_shadows_parent);
  tcase_add_test(tc, var_create_conflict);
  tcase_add_test(tc, find_var_up_the_chain);
  tcase_add_test(tc, no_upward_leak);
  tcase_add_test(tc, erase_falls_back_to_parent);
  tcase_add_test(tc, erase_returns_memory);
  tcase_add_test(tc, local_scope_reclaimed);
  tcase_add_test(tc, scope_parent);
  tcase_add_test(tc, varref_goes_stale);
  tcase_add_test(tc, varref_stale_after_scope_death);
  tcase_add_test(tc, drop_kids);
  tcase_add_test(tc, named_scope_persists_until_unlinked);
  tcase_add_test(tc, scope_naming_rules);
  tcase_add_test(tc, var_new_names);
  tcase_add_test(tc, labels_and_foreach);
  tcase_add_test(tc, readers_writers);
  tcase_add_test(tc, unique_names);
  tcase_add_test(tc, tensors);
  tcase_add_test(tc, tensor_enomem);
  tcase_add_test(tc, var_rename);
  tcase_add_test(tc, edits_of_an_erased_variable_are_estale);
  tcase_add_test(tc, var_lock_held_across_its_erase);
  tcase_add_test(tc, many_vars);
  tcase_add_test(tc, var_lock_rules);
  tcase_add_test(tc, handles);
  tcase_add_test(tc, detach_releases);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(model_suite()) ? 1 : 0; }
