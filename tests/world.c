/* world.c - the live multi-process segment of world.h. */
#include <stdio.h>
#include <unistd.h>

#include "world.h"

pdshm_seg *attach_ro(void) {
  pdshm_seg *ro;
  pdshm_options o = {.flags = PDSHM_RDONLY};
  ck_assert_int_eq(pdshm_attach(g_name, &o, &ro), 0);
  return ro;
}

pdshm_var *mk_tensor(pdshm_scope *s, const char *name, pdshm_dtype dt, int ndim,
                     const int64_t *dims, const char *label) {
  pdshm_var *v;
  ck_assert_int_eq(pdshm_var_create(s, name, &v), 0);
  if (ndim >= 0) ck_assert_int_eq(pdshm_tensor_resize(v, dt, ndim, dims), 0);
  if (label) ck_assert_int_eq(pdshm_var_set_label(v, label), 0);
  return v;
}

uint64_t scope_id(pdshm_scope *s) { return pdshm__scope_at(g_seg, s->rec)->id; }

/* A kid: an anonymous scope under the root with arg[0] tensors of 10 i32;
 * with arg[1], it then takes params/fc/W exclusively.  Reports its scope's
 * id, then waits until killed. */
static int kid_anon(struct kid *k) {
  pdshm_scope *root, *s, *fc;
  pdshm_var *v;
  int64_t d = 10;
  char name[16];
  if (kid_attach(k) || pdshm_root(k->seg, &root) || pdshm_scope_new(root, NULL, &s)) return 1;
  for (uint64_t i = 0; i < k->arg[0]; i++) {
    snprintf(name, sizeof name, "h%u", (unsigned)i);
    if (pdshm_var_create(s, name, &v) || pdshm_tensor_resize(v, PDSHM_I32, 1, &d)) return 2;
  }
  if (k->arg[1] && (pdshm_scope_open(k->seg, "params/fc", &fc) ||
                    pdshm_var_lock(pdshm_find_var(fc, "W"), 1)))
    return 3;
  if (kid_say(k, pdshm__scope_at(k->seg, s->rec)->id)) return 4;
  for (;;) pause();
}

void world_build(struct world *wd) {
  int64_t wdims[2] = {13, 1}, bdims[1] = {1}, xdims[2] = {64, 13};
  make(16u << 20, 8, 0);
  ck_assert_int_eq(pdshm_root(g_seg, &wd->root), 0);
  ck_assert_int_eq(pdshm_scope_new(wd->root, "params", &wd->params), 0);
  ck_assert_int_eq(pdshm_scope_new(wd->params, "fc", &wd->fc), 0);
  ck_assert_int_eq(pdshm_scope_new(wd->root, "data", &wd->data), 0);
  wd->w = mk_tensor(wd->fc, "W", PDSHM_F32, 2, wdims, "parameter");
  wd->b = mk_tensor(wd->fc, "b", PDSHM_F32, 1, bdims, "parameter");
  wd->x = mk_tensor(wd->data, "x", PDSHM_F64, 2, xdims, "feed");
  wd->step = mk_tensor(wd->root, "step", PDSHM_BOOL, -1, NULL, NULL);
  ck_assert_int_eq(pdshm_var_add_reader(wd->w, "fc"), 0);
  ck_assert_int_eq(pdshm_var_add_reader(wd->w, "fc_grad"), 0);
  ck_assert_int_eq(pdshm_var_add_writer(wd->w, "sgd"), 0);
  ck_assert_int_eq(pdshm_var_lock(wd->x, 0), 0);
  wd->live = (struct kid){.arg = {1, 1}};
  kid_start(&wd->live, kid_anon);
  kid_recv(&wd->live);
  wd->live_scope_id = kid_recv(&wd->live);
  wd->dead = (struct kid){.arg = {2, 0}};
  kid_start(&wd->dead, kid_anon);
  kid_recv(&wd->dead);
  wd->dead_scope_id = kid_recv(&wd->dead);
  kid_kill(&wd->dead); /* nobody attaches afterwards: it stays unreaped */
}

void world_end(struct world *wd) {
  kid_kill(&wd->live);
  reap(g_seg); /* the dead kid too, unless a test reaped it already */
  ck_assert_uint_eq(stats(g_seg).procs_dead, 0);
  ck_assert_int_eq(pdshm_var_unlock(wd->x), 0);
  pdshm_scope *s[] = {wd->data, wd->fc, wd->params, wd->root};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) ck_assert_int_eq(pdshm_scope_release(s[i]), 0);
  ck_assert_int_eq(pdshm_check(g_seg, stderr), 0);
}

