/*
 * bench_calls - N rounds of one hot path through the public API, in one
 * process, for callgrind: the instructions a round costs are the difference
 * between two runs of different N, divided by the difference of N (set-up
 * and tear-down cancel out).  bench/callcount.sh does that for each path.
 *
 * usage: bench_calls PATH N
 *   excl       pdshm_var_lock(v, 1) + pdshm_var_unlock(v)
 *   shared     pdshm_var_lock(v, 0) + pdshm_var_unlock(v)
 *   resize64   pdshm_tensor_resize to 64 B, then to 0 B (the bench's alloc + free)
 *   resize4k   the same with 4 KiB
 *   getcreate  pdshm_var_get of a new name + pdshm_var_erase, beside 10k names
 *   step       the bench's step cycle: a new local scope, 10 variables of
 *              4 KiB tensors (pdshm_var_get + pdshm_tensor_resize), release
 *   malloc64   the peer of resize64: malloc(64) + free, jemalloc's (linked
 *              into this program, as in pdshm-bench)
 *   malloc4k   the same with 4 KiB
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peers.h"
#include "pdshm.h"

static const char *const step_vars[10] = {"x", "h0", "h1", "h2", "h3", "y", "dy", "dh", "dx", "loss"};

static void check(int rc, const char *what) {
  if (!rc) return;
  fprintf(stderr, "bench_calls: %s: %s (%s)\n", what, pdshm_strerror(rc), pdshm_last_error());
  exit(1);
}

static void run_locks(pdshm_var *v, int exclusive, long n) {
  for (long i = 0; i < n; i++) {
    check(pdshm_var_lock(v, exclusive), "pdshm_var_lock");
    check(pdshm_var_unlock(v), "pdshm_var_unlock");
  }
}

static void run_resize(pdshm_var *v, int64_t bytes, long n) {
  const int64_t none = 0;
  for (long i = 0; i < n; i++) {
    check(pdshm_tensor_resize(v, PDSHM_U8, 1, &bytes), "pdshm_tensor_resize");
    check(pdshm_tensor_resize(v, PDSHM_U8, 1, &none), "pdshm_tensor_resize(0)");
  }
}

/* The block is written, as a tensor's would be, and the pointer kept in a
 * volatile so that the compiler keeps the pair. */
static void run_malloc(size_t bytes, long n) {
  for (long i = 0; i < n; i++) {
    void *volatile p = malloc(bytes);
    if (!p) check(PDSHM_ENOMEM, "malloc");
    *(char *)p = 1;
    free(p);
  }
}

static void run_getcreate(pdshm_scope *s, long n) {
  char name[32];
  pdshm_var *v;
  for (int k = 0; k < 10000; k++) {
    snprintf(name, sizeof name, "n%d", k);
    check(pdshm_var_get(s, name, &v), "pdshm_var_get (the 10k)");
  }
  for (long i = 0; i < n; i++) {
    check(pdshm_var_get(s, "tmp", &v), "pdshm_var_get");
    check(pdshm_var_erase(s, "tmp"), "pdshm_var_erase");
  }
}

static void run_step(pdshm_scope *s, long n) {
  const int64_t d = 1024; /* 4 KiB of F32 */
  for (long i = 0; i < n; i++) {
    pdshm_scope *local;
    pdshm_var *v;
    check(pdshm_scope_new(s, NULL, &local), "pdshm_scope_new");
    for (int k = 0; k < 10; k++) {
      check(pdshm_var_get(local, step_vars[k], &v), "pdshm_var_get");
      check(pdshm_tensor_resize(v, PDSHM_F32, 1, &d), "pdshm_tensor_resize");
    }
    check(pdshm_scope_release(local), "pdshm_scope_release");
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: bench_calls excl|shared|resize64|resize4k|getcreate|step|malloc64|malloc4k N\n");
    return 2;
  }
  const char *path = argv[1];
  long n = atol(argv[2]);
  if (!strncmp(path, "malloc", 6) && !peer_malloc_is_jemalloc(stderr)) {
    fprintf(stderr, "bench_calls: malloc is not jemalloc's: no peer to count\n");
    return 1;
  }
  char seg_name[64];
  snprintf(seg_name, sizeof seg_name, "bench_calls-%d", (int)getpid());
  pdshm_seg *seg;
  pdshm_scope *root, *hot;
  pdshm_var *v;
  check(pdshm_create(seg_name, &(pdshm_options){.size = 64u << 20}, &seg), "pdshm_create");
  check(pdshm_scope_open(seg, "", &root), "pdshm_scope_open");
  check(pdshm_scope_new(root, "hot", &hot), "pdshm_scope_new");
  check(pdshm_var_create(hot, "hot", &v), "pdshm_var_create");
  check(pdshm_tensor_resize(v, PDSHM_I64, 1, (int64_t[]){1}), "pdshm_tensor_resize");
  int rc = 0;
  if (!strcmp(path, "excl") || !strcmp(path, "shared")) run_locks(v, !strcmp(path, "excl"), n);
  else if (!strcmp(path, "resize64")) run_resize(v, 64, n);
  else if (!strcmp(path, "resize4k")) run_resize(v, 4096, n);
  else if (!strcmp(path, "getcreate")) run_getcreate(hot, n);
  else if (!strcmp(path, "step")) run_step(hot, n);
  else if (!strcmp(path, "malloc64")) run_malloc(64, n);
  else if (!strcmp(path, "malloc4k")) run_malloc(4096, n);
  else rc = 2;
  if (rc) fprintf(stderr, "bench_calls: no path \"%s\"\n", path);
  pdshm_scope_release(hot);
  pdshm_scope_release(root);
  pdshm_detach(seg);
  pdshm_unlink(seg_name);
  return rc;
}
