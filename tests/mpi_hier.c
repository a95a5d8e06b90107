/*
 * mpi_hier - run by tests/test_mpi.sh under mpirun (tests/mpirun.sh), with
 * simulated hosts (PDSHM_MPI_LOCAL_SIZE): libpdshm-mpi against flat MPI.
 *
 *  1. for every dtype and op of pdshm_group_allreduce, a hierarchical
 *     allreduce of each process's own tensor equals a flat MPI_Allreduce of
 *     the same values over the whole job, byte for byte (values are small
 *     integers, so that every order of summation is exact; F16 and BF16 are
 *     reduced flat in float32, MEAN flat as a sum divided once);
 *     and for the float dtypes, a sum of values that round stays within
 *     the roundings' bound of the exact sum;
 *  2. each process handed MPI 1/L of the tensor's bytes (none on one host);
 *  3. mismatched calls (another element count on one host) fail at every
 *     process, none waits;
 *  4. pdshm_mpi_bcast_scope makes every host's scope equal the root's;
 *  5. when one host's segment is not a segment, pdshm_mpi_open fails at
 *     every process, none waits.
 * Prints "ok N - what" / "not ok N - what" (TAP) at rank 0; exits non-zero
 * on any failure.
 *
 * usage: mpirun -np P mpi_hier SEGMENT-PREFIX
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "pdshm-mpi.h"

#define N 1003 /* elements: not a multiple of any local size */

static int failures, tests, world_rank, world_size;

static void report(int ok, const char *what) {
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  tests++;
  if (!ok) failures++;
  if (world_rank == 0) {
    printf("%s %d - %s\n", ok ? "ok" : "not ok", tests, what);
    fflush(stdout);
  }
}

#define DIE(call)                                                                  \
  do {                                                                             \
    int rc_ = (call);                                                              \
    if (rc_) {                                                                     \
      fprintf(stderr, "rank %d: %s: %s (%s)\n", world_rank, #call, pdshm_strerror(rc_), \
              pdshm_last_error());                                                 \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                \
    }                                                                              \
  } while (0)

static const struct { pdshm_dtype dt; const char *name; } dtypes[] = {
    {PDSHM_F16, "float16"}, {PDSHM_BF16, "bfloat16"}, {PDSHM_F32, "float32"},
    {PDSHM_F64, "float64"}, {PDSHM_I32, "int32"},     {PDSHM_I64, "int64"}};
static const struct { pdshm_reduce_op op; const char *name; } ops[] = {
    {PDSHM_SUM, "sum"}, {PDSHM_MEAN, "mean"}, {PDSHM_MAX, "max"}, {PDSHM_MIN, "min"}};

/* Process r's element i: a small integer, different at every process. */
static double value(int r, size_t i) { return (double)((r * 7 + (int)i * 3) % 23) - 11; }

static void store(void *p, pdshm_dtype dt, size_t i, double x) {
  switch (dt) {
  case PDSHM_F16: ((uint16_t *)p)[i] = pdshm__half_store((float)x); break;
  case PDSHM_BF16: ((uint16_t *)p)[i] = pdshm__bf16_store((float)x); break;
  case PDSHM_F32: ((float *)p)[i] = (float)x; break;
  case PDSHM_F64: ((double *)p)[i] = x; break;
  case PDSHM_I32: ((int32_t *)p)[i] = (int32_t)x; break;
  case PDSHM_I64: ((int64_t *)p)[i] = (int64_t)x; break;
  default: break;
  }
}

/* The flat reference: MPI_Allreduce over the job of every process's values,
 * in double for the floats and int64 for the integers, then stored as dt. */
static void flat(void *out, pdshm_dtype dt, pdshm_reduce_op op) {
  int integer = dt == PDSHM_I32 || dt == PDSHM_I64;
  MPI_Op mop = op == PDSHM_MAX ? MPI_MAX : op == PDSHM_MIN ? MPI_MIN : MPI_SUM;
  double d[N];
  int64_t q[N];
  for (size_t i = 0; i < N; i++) d[i] = value(world_rank, i), q[i] = (int64_t)d[i];
  if (integer) MPI_Allreduce(MPI_IN_PLACE, q, N, MPI_INT64_T, mop, MPI_COMM_WORLD);
  else MPI_Allreduce(MPI_IN_PLACE, d, N, MPI_DOUBLE, mop, MPI_COMM_WORLD);
  for (size_t i = 0; i < N; i++) {
    if (op == PDSHM_MEAN) q[i] /= world_size, d[i] /= world_size;
    store(out, dt, i, integer ? (double)q[i] : d[i]);
  }
}

static void one_case(pdshm_mpi *m, pdshm_scope *local, int t, int o) {
  pdshm_dtype dt = dtypes[t].dt;
  pdshm_var *v;
  int64_t dims[1] = {N};
  DIE(pdshm_var_get(local, "g", &v));
  DIE(pdshm_tensor_resize(v, dt, 1, dims));
  for (size_t i = 0; i < N; i++) store(pdshm_tensor_data(v), dt, i, value(world_rank, i));
  uint64_t before = pdshm_mpi_bytes_sent(m);
  int rc = pdshm_mpi_allreduce(m, v, ops[o].op, 10000000000ll);
  static char want[N * 8];
  flat(want, dt, ops[o].op);
  int ok = rc == 0 && !memcmp(want, pdshm_tensor_data(v), pdshm_tensor_nbytes(v));
  if (rc == 0 && !ok)
    for (size_t i = 0, es = pdshm_dtype_size(dt); i < N; i++)
      if (memcmp(want + i * es, (char *)pdshm_tensor_data(v) + i * es, es)) {
        fprintf(stderr, "rank %d %s %s: element %zu differs\n", world_rank, dtypes[t].name,
                ops[o].name, i);
        break;
      }
  char what[128];
  snprintf(what, sizeof what, "hierarchical %s %s equals flat MPI_Allreduce", dtypes[t].name,
           ops[o].name);
  report(ok, what);
  uint64_t sent = pdshm_mpi_bytes_sent(m) - before, es = pdshm_dtype_size(dt);
  uint64_t share = N / (uint64_t)pdshm_mpi_local_size(m) + 1;
  snprintf(what, sizeof what, "%s %s: 1/L of the bytes over MPI", dtypes[t].name, ops[o].name);
  if (pdshm_mpi_hosts(m) == 1) report(sent == 0, what); /* one host: nothing crosses */
  else report(sent >= (share - 1) * es && sent <= share * es, what);
}

/* Process r's element i for the rounding case: in [-1, 1), not exact. */
static double noisy(int r, size_t i) {
  uint64_t x = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)(i + 1) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return (double)(x >> 11) / 4503599627370496.0 - 1.0;
}

static double load(const void *p, pdshm_dtype dt, size_t i) {
  switch (dt) {
  case PDSHM_F16: return pdshm__half_load(((const uint16_t *)p)[i]);
  case PDSHM_BF16: return pdshm__bf16_load(((const uint16_t *)p)[i]);
  case PDSHM_F32: return ((const float *)p)[i];
  default: return ((const double *)p)[i];
  }
}

/* 1b: values that round: the hierarchical sum of the floats is within the
 * dtype's rounding of the exact sum (summed flat in double), a few units in
 * the last place of the inputs' magnitude. */
static void rounding_case(pdshm_mpi *m, pdshm_scope *local, int t) {
  pdshm_dtype dt = dtypes[t].dt;
  static const double ulp[] = {[PDSHM_F16] = 0x1p-10, [PDSHM_BF16] = 0x1p-7,
                               [PDSHM_F32] = 0x1p-23, [PDSHM_F64] = 0x1p-52};
  pdshm_var *v;
  int64_t dims[1] = {N};
  DIE(pdshm_var_get(local, "g", &v));
  DIE(pdshm_tensor_resize(v, dt, 1, dims));
  double d[N];
  for (size_t i = 0; i < N; i++) store(pdshm_tensor_data(v), dt, i, noisy(world_rank, i));
  for (size_t i = 0; i < N; i++) d[i] = load(pdshm_tensor_data(v), dt, i); /* as stored */
  int rc = pdshm_mpi_allreduce(m, v, PDSHM_SUM, 10000000000ll);
  MPI_Allreduce(MPI_IN_PLACE, d, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double worst = 0;
  for (size_t i = 0; i < N; i++) worst = fmax(worst, fabs(load(pdshm_tensor_data(v), dt, i) - d[i]));
  /* each of the log2(size)+2 roundings of a sum of magnitude <= size costs
   * at most half a unit of that magnitude */
  double bound = ulp[dt] * world_size * (log2((double)world_size) + 2);
  char what[128];
  snprintf(what, sizeof what, "hierarchical %s sum of values that round: within %g of exact",
           dtypes[t].name, bound);
  if (rc || worst > bound)
    fprintf(stderr, "rank %d %s: rc %d, largest error %g\n", world_rank, dtypes[t].name, rc, worst);
  report(rc == 0 && worst <= bound, what);
}

/* 3: host 1's processes pass another element count than host 0's. */
static void mismatch(pdshm_mpi *m, pdshm_scope *local) {
  pdshm_var *v;
  int64_t dims[1] = {pdshm_mpi_host(m) == 1 ? N - 1 : N};
  DIE(pdshm_var_get(local, "g", &v));
  DIE(pdshm_tensor_resize(v, PDSHM_F32, 1, dims));
  int rc = pdshm_mpi_allreduce(m, v, PDSHM_SUM, 10000000000ll);
  /* each host is consistent in itself: the hosts' agreement finds it */
  report(rc == PDSHM_EINVAL, "another element count on one host: EINVAL at every process");
}

/* 5: when host 1's segment is not a segment, open fails at every process
 * (host 0's own steps succeeded: it must not go on alone). */
static void open_fails_everywhere(const char *prefix) {
  char bad[256], path[300];
  snprintf(bad, sizeof bad, "%s-bad", prefix);
  snprintf(path, sizeof path, "/dev/shm/pdshm.%s.h1", bad);
  if (world_rank == 0) {
    FILE *f = fopen(path, "w");
    if (!f || fputs("not a pdshm segment\n", f) < 0 || fclose(f)) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  pdshm_mpi *m = NULL;
  pdshm_mpi_options o = {.prefix = bad, .seg_size = 4u << 20};
  int rc = pdshm_mpi_open(MPI_COMM_WORLD, &o, &m);
  report(rc == PDSHM_EBADSEG && !m, "one host's bad segment: open fails at every process");
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank == 0) {
    remove(path);
    snprintf(path, sizeof path, "%s.h0", bad);
    pdshm_unlink(path);
  }
}

/* 4: host 0's "params" (made here) into every host's. */
static void bcast(pdshm_mpi *m) {
  pdshm_scope *root, *params = NULL;
  DIE(pdshm_root(pdshm_mpi_segment(m), &root));
  if (pdshm_mpi_local_rank(m) == 0) {
    pdshm_scope_unlink(root, "params");
    DIE(pdshm_scope_new(root, "params", &params));
    if (pdshm_mpi_host(m) == 0) {
      pdshm_var *w, *b;
      int64_t dw[2] = {3, 5}, db[1] = {7};
      DIE(pdshm_var_create(params, "W", &w));
      DIE(pdshm_tensor_resize(w, PDSHM_F32, 2, dw));
      for (int i = 0; i < 15; i++) ((float *)pdshm_tensor_data(w))[i] = 0.5f * (float)i;
      DIE(pdshm_var_create(params, "b", &b));
      DIE(pdshm_tensor_resize(b, PDSHM_I64, 1, db));
      for (int i = 0; i < 7; i++) ((int64_t *)pdshm_tensor_data(b))[i] = 1000 + i;
    }
  }
  MPI_Barrier(pdshm_mpi_local_comm(m));
  if (!params) DIE(pdshm_scope_open(pdshm_mpi_segment(m), "params", &params));
  int rc = pdshm_mpi_bcast_scope(m, params, 0, 10000000000ll);
  pdshm_var *w = pdshm_find_local_var(params, "W"), *b = pdshm_find_local_var(params, "b");
  int ok = rc == 0 && w && b && pdshm_tensor_ndim(w) == 2 && pdshm_tensor_dims(w)[1] == 5 &&
           pdshm_tensor_dtype(b) == PDSHM_I64 && pdshm_tensor_dims(b)[0] == 7;
  for (int i = 0; ok && i < 15; i++) ok = ((float *)pdshm_tensor_data(w))[i] == 0.5f * (float)i;
  for (int i = 0; ok && i < 7; i++) ok = ((int64_t *)pdshm_tensor_data(b))[i] == 1000 + i;
  report(ok, "bcast_scope: every host's params equal host 0's");
  rc = pdshm_mpi_bcast_var(m, w, pdshm_mpi_hosts(m), 1000000000ll);
  report(rc == PDSHM_EINVAL, "bcast_var from a host out of range: EINVAL");
  pdshm_scope_release(params);
  pdshm_scope_release(root);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (argc != 2) {
    fprintf(stderr, "usage: mpirun -np P %s SEGMENT-PREFIX\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  pdshm_mpi *m;
  pdshm_mpi_options o = {.prefix = argv[1], .seg_size = 4u << 20, .replace_timeout_ns = 0};
  DIE(pdshm_mpi_open(MPI_COMM_WORLD, &o, &m));
  if (world_rank == 0)
    printf("# %d hosts of %d trainers\n", pdshm_mpi_hosts(m), pdshm_mpi_local_size(m));
  pdshm_scope *root, *local;
  DIE(pdshm_root(pdshm_mpi_segment(m), &root));
  DIE(pdshm_scope_new(root, NULL, &local));
  for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++)
    for (size_t o2 = 0; o2 < sizeof ops / sizeof *ops; o2++) one_case(m, local, (int)t, (int)o2);
  for (size_t t = 0; t < 4; t++) rounding_case(m, local, (int)t); /* the float dtypes */
  if (pdshm_mpi_hosts(m) > 1) mismatch(m, local);
  bcast(m);
  pdshm_scope_release(local);
  pdshm_scope_release(root);
  if (pdshm_mpi_hosts(m) > 1) open_fails_everywhere(argv[1]);
  if (world_rank == 0) printf("1..%d\n", tests);
  int rc = pdshm_mpi_close(m);
  MPI_Finalize();
  return failures || rc ? 1 : 0;
}
