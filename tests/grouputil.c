/* grouputil.c - helpers of the group suites (test_group,
 * test_group_collectives, test_group_deaths). */
#include <stdlib.h>
#include <string.h>

#include "grouputil.h"

char seg_name[PDSHM_SEG_NAME_MAX + 1];
pdshm_seg *seg;
pdshm_scope *root;

void setup(void) {
  snprintf(seg_name, sizeof seg_name, "%s", tu_name("group"));
  seg = tu_create_as(seg_name, 16u << 20, 32);
  ck_assert_int_eq(pdshm_root(seg, &root), 0);
}

void teardown(void) {
  if (root) pdshm_scope_release(root);
  if (seg) pdshm_detach(seg);
  root = NULL;
  seg = NULL;
  tu_cleanup();
}

void wait_ok(pid_t pid, struct board *b) {
  int st = tu_wait(pid);
  ck_assert_msg(st == 0, "child exited %d: %s", st, b ? b->rep.why : "");
}

int kid_f32_var(int64_t n, pdshm_seg **s, pdshm_scope **mine, pdshm_var **v) {
  pdshm_scope *r;
  int rc = pdshm_attach(seg_name, NULL, s);
  if (!rc) rc = pdshm_root(*s, &r);
  if (!rc) {
    rc = pdshm_scope_new(r, NULL, mine);
    pdshm_scope_release(r); /* *mine keeps the root */
  }
  if (!rc) rc = pdshm_var_new(*mine, v);
  if (!rc) rc = pdshm_tensor_resize(*v, PDSHM_F32, 1, &n);
  return rc;
}

/* The process's staging variable of K_PRIVATE; each child makes its own
 * (staging_new) before its first collective. */
static pdshm_var *staging;
int staging_new(pdshm_scope *s) { return pdshm_var_new(s, &staging); }

/* K_PRIVATE: pdshm_group_allreduce_private of a private copy of v's tensor
 * through the staging variable (resized to fit), the copy written back to
 * v's tensor whatever the answer, so that callers check v as after an
 * allreduce. */
static int private_allreduce(pdshm_group *g, pdshm_var *v, int op, int64_t timeout_ns) {
  int dt = pdshm_tensor_dtype(v);
  if (dt < 0) return dt;
  size_t nbytes = pdshm_tensor_nbytes(v), es = pdshm_dtype_size((pdshm_dtype)dt);
  int64_t want = (int64_t)nbytes;
  int rc = pdshm_tensor_nbytes(staging) >= nbytes ? 0
           : pdshm_tensor_resize(staging, PDSHM_U8, 1, &want);
  void *data = malloc(nbytes + 1);
  if (rc || !data) {
    free(data);
    return rc ? rc : PDSHM_ENOMEM;
  }
  memcpy(data, pdshm_tensor_data(v), nbytes);
  rc = pdshm_group_allreduce_private(g, data, (pdshm_dtype)dt, nbytes / es, staging,
                                     (pdshm_reduce_op)op, timeout_ns);
  memcpy(pdshm_tensor_data(v), data, nbytes);
  free(data);
  return rc;
}

int collective(int k, pdshm_group *g, pdshm_var *v, int op, int64_t timeout_ns) {
  switch (k) {
  case K_ALLREDUCE: return pdshm_group_allreduce(g, v, op, timeout_ns);
  case K_PRIVATE: return private_allreduce(g, v, op, timeout_ns);
  case K_REDUCE_SCATTER: return pdshm_group_reduce_scatter(g, v, op, timeout_ns);
  case K_ALLGATHER: return pdshm_group_allgather(g, v, timeout_ns);
  default: return pdshm_group_barrier(g, timeout_ns);
  }
}

int owner(size_t i, size_t n, int size) {
  int r = 0;
  while (r + 1 < size && (size_t)((uint64_t)n * (uint64_t)(r + 1) / (uint64_t)size) <= i) r++;
  return r;
}
