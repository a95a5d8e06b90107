/*
 * mpi_hier - run by tests/test_mpi.sh under mpirun (tests/mpirun.sh), with
 * simulated hosts (PDSHM_MPI_LOCAL_SIZE): libpdshm-mpi against flat MPI.
 *
 *  1. for every dtype and op of pdshm_group_allreduce, a hierarchical
 *     allreduce of each process's own tensor equals a flat MPI_Allreduce of
 *     the same values over the whole job: the integers byte for byte, in
 *     the tensor's own dtype, with sums that overflow it (they wrap, and
 *     MEAN is the wrapped sum divided once, truncating: DESIGN section 4);
 *     the floats (small integer values, so that every order of summation is
 *     exact; reduced flat in double, MEAN as a sum divided once) exactly
 *     but for MEAN, which rounds per step and is within a few units in the
 *     last place; and for the float dtypes, every op over values that
 *     round stays within the roundings' bound of the flat result (MAX and
 *     MIN exactly);
 *  2. each process handed MPI 1/L of the tensor's bytes (none on one host);
 *  3. mismatched calls (another element count on one host) fail at every
 *     process, none waits;
 *  4. pdshm_mpi_bcast_scope makes every host's scope equal the root's;
 *     pdshm_mpi_bcast_var fails with EINVAL at every process, none waiting,
 *     when one process of the root host or of a receiving host passes
 *     another variable than its host's (holding a tensor of the same shape,
 *     or none), a NULL variable, or another root host; so does
 *     pdshm_mpi_bcast_scope for another scope than its host's or another
 *     root host at one process;
 *  5. when one host's segment is not a segment, or one process passes a
 *     NULL argument, pdshm_mpi_open fails at every process, none waits;
 *  6. the handle's communicators have MPI_ERRORS_ARE_FATAL although the
 *     job's communicator was given MPI_ERRORS_RETURN;
 *  7. after pdshm_mpi_close at every process, a new open finds the host's
 *     segment with its named scope.
 * Prints "ok N - what" / "not ok N - what" (TAP) at rank 0; exits non-zero
 * on any failure.
 *
 * usage: mpirun -np P mpi_hier SEGMENT-PREFIX
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "groups/half.h"
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

static int is_int(pdshm_dtype dt) { return dt == PDSHM_I32 || dt == PDSHM_I64; }

/* Process r's element i: a small integer, different at every process. */
static double value(int r, size_t i) { return (double)((r * 7 + (int)i * 3) % 23) - 11; }

/* Process r's element i of an integer dtype: a small integer, or near half
 * the dtype's largest value (so that three or more of them overflow its
 * sum): all positive, all negative, or of the process's parity's sign. */
static int64_t int_value(pdshm_dtype dt, int r, size_t i) {
  int64_t small = (int64_t)value(r, i), big = dt == PDSHM_I32 ? INT32_MAX / 2 : INT64_MAX / 2;
  switch (i % 4) {
  case 0: return small;
  case 1: return big + small;
  case 2: return -big - 12 + small;
  default: return ((size_t)r + i) % 2 ? big + small : -big + small;
  }
}

static void store(void *p, pdshm_dtype dt, size_t i, double x) {
  switch (dt) {
  case PDSHM_F16: ((uint16_t *)p)[i] = pdshm__half_store((float)x); break;
  case PDSHM_BF16: ((uint16_t *)p)[i] = pdshm__bf16_store((float)x); break;
  case PDSHM_F32: ((float *)p)[i] = (float)x; break;
  case PDSHM_F64: ((double *)p)[i] = x; break;
  default: break;
  }
}

/* Fills p with process r's values of dtype dt. */
static void fill(void *p, pdshm_dtype dt, int r) {
  for (size_t i = 0; i < N; i++)
    if (dt == PDSHM_I32) ((int32_t *)p)[i] = (int32_t)int_value(dt, r, i);
    else if (dt == PDSHM_I64) ((int64_t *)p)[i] = int_value(dt, r, i);
    else store(p, dt, i, value(r, i));
}

static double load(const void *p, pdshm_dtype dt, size_t i) {
  switch (dt) {
  case PDSHM_F16: return pdshm__half_load(((const uint16_t *)p)[i]);
  case PDSHM_BF16: return pdshm__bf16_load(((const uint16_t *)p)[i]);
  case PDSHM_F32: return ((const float *)p)[i];
  default: return ((const double *)p)[i];
  }
}

static MPI_Op mpi_op(pdshm_reduce_op op) {
  return op == PDSHM_MAX ? MPI_MAX : op == PDSHM_MIN ? MPI_MIN : MPI_SUM;
}

/* The flat reference of the integers: MPI_Allreduce over the job of every
 * process's values in the tensor's dtype (a sum wraps in it), MEAN that
 * sum divided once (C's division truncates towards zero). */
static void flat_int(void *out, pdshm_dtype dt, pdshm_reduce_op op) {
  fill(out, dt, world_rank);
  MPI_Allreduce(MPI_IN_PLACE, out, N, dt == PDSHM_I32 ? MPI_INT32_T : MPI_INT64_T, mpi_op(op),
                MPI_COMM_WORLD);
  for (size_t i = 0; op == PDSHM_MEAN && i < N; i++) {
    if (dt == PDSHM_I32) ((int32_t *)out)[i] /= world_size;
    else ((int64_t *)out)[i] /= world_size;
  }
}

/* The flat reference of the floats: d[i] of process r's values, reduced
 * over the job in double, MEAN divided once. */
static void flat_float(double *d, pdshm_dtype dt, pdshm_reduce_op op, double (*val)(int, size_t)) {
  static char mine[N * 8];
  for (size_t i = 0; i < N; i++) store(mine, dt, i, val(world_rank, i));
  for (size_t i = 0; i < N; i++) d[i] = load(mine, dt, i); /* as stored */
  MPI_Allreduce(MPI_IN_PLACE, d, N, MPI_DOUBLE, mpi_op(op), MPI_COMM_WORLD);
  if (op == PDSHM_MEAN)
    for (size_t i = 0; i < N; i++) d[i] /= world_size;
}

/* The unit in the last place of 1 in each float dtype. */
static const double ulp[] = {[PDSHM_F16] = 0x1p-10, [PDSHM_BF16] = 0x1p-7,
                             [PDSHM_F32] = 0x1p-23, [PDSHM_F64] = 0x1p-52};

/* The first element of v farther than tol from the flat result, or N. */
static size_t first_off(pdshm_var *v, pdshm_dtype dt, pdshm_reduce_op op, double tol) {
  static char want[N * 8];
  if (is_int(dt)) {
    flat_int(want, dt, op);
    for (size_t i = 0, es = pdshm_dtype_size(dt); i < N; i++)
      if (memcmp(want + i * es, (char *)pdshm_tensor_data(v) + i * es, es)) return i;
    return N;
  }
  double d[N];
  flat_float(d, dt, op, value);
  for (size_t i = 0; i < N; i++)
    if (!(fabs(load(pdshm_tensor_data(v), dt, i) - d[i]) <= tol)) return i;
  return N;
}

static void one_case(pdshm_mpi *m, pdshm_scope *local, int t, int o) {
  pdshm_dtype dt = dtypes[t].dt;
  pdshm_reduce_op op = ops[o].op;
  pdshm_var *v;
  int64_t dims[1] = {N};
  DIE(pdshm_var_get(local, "g", &v));
  DIE(pdshm_tensor_resize(v, dt, 1, dims));
  fill(pdshm_tensor_data(v), dt, world_rank);
  uint64_t before = pdshm_mpi_bytes_sent(m);
  int rc = pdshm_mpi_allreduce(m, v, op, 10000000000ll);
  /* small integers sum exactly in any order; a float MEAN rounds at each
   * step (the host's mean, the hosts' sum, its division): a few units in
   * the last place of a result of magnitude <= 16 */
  double tol = !is_int(dt) && op == PDSHM_MEAN ? 32 * ulp[dt] : 0;
  size_t bad = first_off(v, dt, op, tol);
  if (rc == 0 && bad < N)
    fprintf(stderr, "rank %d %s %s: element %zu differs\n", world_rank, dtypes[t].name,
            ops[o].name, bad);
  char what[128];
  snprintf(what, sizeof what, "hierarchical %s %s equals flat MPI_Allreduce", dtypes[t].name,
           ops[o].name);
  report(rc == 0 && bad == N, what);
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

/* 1b: values that round: the hierarchical op over the floats is within
 * the dtype's roundings of the flat result in double: a sum within a few
 * units in the last place of the inputs' magnitude, a mean within as many
 * of its own magnitude, MAX and MIN exact. */
static void rounding_case(pdshm_mpi *m, pdshm_scope *local, int t, int o) {
  pdshm_dtype dt = dtypes[t].dt;
  pdshm_reduce_op op = ops[o].op;
  pdshm_var *v;
  int64_t dims[1] = {N};
  DIE(pdshm_var_get(local, "g", &v));
  DIE(pdshm_tensor_resize(v, dt, 1, dims));
  double d[N];
  for (size_t i = 0; i < N; i++) store(pdshm_tensor_data(v), dt, i, noisy(world_rank, i));
  int rc = pdshm_mpi_allreduce(m, v, op, 10000000000ll);
  flat_float(d, dt, op, noisy);
  double worst = 0;
  for (size_t i = 0; i < N; i++) worst = fmax(worst, fabs(load(pdshm_tensor_data(v), dt, i) - d[i]));
  /* each of the log2(size)+2 roundings of a sum of magnitude <= size costs
   * at most half a unit of that magnitude; a mean's roundings (the host's
   * mean, each host's sum, the division) cost at most size + 2 halves */
  double bound = op == PDSHM_SUM    ? ulp[dt] * world_size * (log2((double)world_size) + 2)
                 : op == PDSHM_MEAN ? ulp[dt] * (world_size + 2)
                                    : 0;
  char what[128];
  snprintf(what, sizeof what, "hierarchical %s %s of values that round: within %g of flat",
           dtypes[t].name, ops[o].name, bound);
  if (rc || worst > bound)
    fprintf(stderr, "rank %d %s %s: rc %d, largest error %g\n", world_rank, dtypes[t].name,
            ops[o].name, rc, worst);
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

/* 4b: one process passes what its host's others do not: bcast_var is
 * EINVAL at every process (a hang ends in mpirun.sh's timeout). */
static void bcast_one_odd(pdshm_mpi *m, pdshm_var *w, int odd, pdshm_var *v, int root_host,
                          const char *what) {
  int rc = pdshm_mpi_bcast_var(m, odd ? v : w, odd ? root_host : 0, 1000000000ll);
  if (rc != PDSHM_EINVAL)
    fprintf(stderr, "rank %d: %s: %s\n", world_rank, what, pdshm_strerror(rc));
  report(rc == PDSHM_EINVAL, what);
}

/* The odd processes: local rank 1 of host h (another variable), or the
 * job's last process (a NULL variable, another root host, another scope
 * for bcast_scope: its own, with a W of W's shape). */
static void bcast_mismatches(pdshm_mpi *m, pdshm_scope *root, pdshm_scope *params,
                             pdshm_var *w) {
  pdshm_scope *mine;
  pdshm_var *full, *empty;
  int64_t dw[2] = {3, 5};
  DIE(pdshm_scope_new(root, NULL, &mine)); /* this process's own variables */
  DIE(pdshm_var_create(mine, "W", &full));
  DIE(pdshm_tensor_resize(full, PDSHM_F32, 2, dw)); /* W's shape: no size differs */
  DIE(pdshm_var_create(mine, "empty", &empty));
  int hosts = pdshm_mpi_hosts(m), last = world_rank == world_size - 1;
  char what[160];
  for (int h = 0; h < hosts && pdshm_mpi_local_size(m) > 1; h += hosts - 1 ? hosts - 1 : 1) {
    int odd = pdshm_mpi_host(m) == h && pdshm_mpi_local_rank(m) == 1;
    const char *where = h == 0 ? "the root host" : "a receiving host";
    snprintf(what, sizeof what, "bcast_var, another variable with a tensor on %s: EINVAL", where);
    bcast_one_odd(m, w, odd, full, 0, what);
    snprintf(what, sizeof what, "bcast_var, another variable with no tensor on %s: EINVAL", where);
    bcast_one_odd(m, w, odd, empty, 0, what);
  }
  bcast_one_odd(m, w, last, NULL, 0, "bcast_var, a NULL variable at one process: EINVAL");
  bcast_one_odd(m, w, last, w, hosts - 1 ? hosts - 1 : hosts,
                "bcast_var, another root host at one process: EINVAL");
  int rc;
  if (pdshm_mpi_local_size(m) > 1) { /* alone on its host, mine is its host's scope */
    rc = pdshm_mpi_bcast_scope(m, last ? mine : params, 0, 1000000000ll);
    report(rc == PDSHM_EINVAL, "bcast_scope, another scope at one process of a host: EINVAL");
  }
  rc = pdshm_mpi_bcast_scope(m, params, last ? hosts : 0, 1000000000ll);
  report(rc == PDSHM_EINVAL, "bcast_scope, a root host out of range at one process: EINVAL");
  pdshm_scope_release(mine);
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
  bcast_mismatches(m, root, params, w);
  pdshm_scope_release(params);
  pdshm_scope_release(root);
}

/* 5b: one process passes a NULL argument (opts at the last process, out
 * at the first): open fails at every process, and nobody waits. */
static void open_null_fails_everywhere(const char *prefix) {
  char name[256];
  snprintf(name, sizeof name, "%s-null", prefix);
  pdshm_mpi_options o = {.prefix = name, .seg_size = 4u << 20};
  pdshm_mpi *m = NULL;
  int rc = pdshm_mpi_open(MPI_COMM_WORLD, world_rank == world_size - 1 ? NULL : &o, &m);
  report(rc == PDSHM_EINVAL && !m, "NULL options at one process: open fails at every process");
  rc = pdshm_mpi_open(MPI_COMM_WORLD, &o, world_rank == 0 ? NULL : &m);
  report(rc == PDSHM_EINVAL && !m, "NULL out at one process: open fails at every process");
}

/* 6: the job's communicator returns errors; the handle's do not. */
static void errhandlers_fatal(const char *prefix) {
  MPI_Comm job;
  MPI_Comm_dup(MPI_COMM_WORLD, &job);
  MPI_Comm_set_errhandler(job, MPI_ERRORS_RETURN);
  pdshm_mpi *m;
  pdshm_mpi_options o = {.prefix = prefix, .seg_size = 4u << 20};
  DIE(pdshm_mpi_open(job, &o, &m));
  int ok = 1;
  MPI_Comm comms[2] = {pdshm_mpi_local_comm(m), pdshm_mpi_cross_comm(m)};
  for (int i = 0; i < 2; i++) {
    MPI_Errhandler e;
    MPI_Comm_get_errhandler(comms[i], &e);
    ok = ok && e == MPI_ERRORS_ARE_FATAL;
    MPI_Errhandler_free(&e);
  }
  report(ok, "the handle's communicators are MPI_ERRORS_ARE_FATAL under an ERRORS_RETURN job");
  DIE(pdshm_mpi_close(m));
  MPI_Comm_free(&job);
}

/* 7: every process closes; a new open finds the host's segment, with the
 * scope "params" that bcast() left there. */
static void reopen(const char *prefix) {
  pdshm_mpi *m;
  pdshm_mpi_options o = {.prefix = prefix, .seg_size = 4u << 20};
  DIE(pdshm_mpi_open(MPI_COMM_WORLD, &o, &m));
  pdshm_scope *params = NULL;
  int rc = pdshm_scope_open(pdshm_mpi_segment(m), "params", &params);
  pdshm_var *w = rc ? NULL : pdshm_find_local_var(params, "W");
  report(w && pdshm_tensor_nbytes(w) == 15 * sizeof(float),
         "closed at every process, reopened: the segment keeps its named scope");
  if (params) pdshm_scope_release(params);
  DIE(pdshm_mpi_close(m));
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
  for (size_t t = 0; t < 4; t++) /* the float dtypes */
    for (size_t o2 = 0; o2 < sizeof ops / sizeof *ops; o2++) rounding_case(m, local, (int)t, (int)o2);
  if (pdshm_mpi_hosts(m) > 1) mismatch(m, local);
  bcast(m);
  pdshm_scope_release(local);
  pdshm_scope_release(root);
  if (pdshm_mpi_hosts(m) > 1) open_fails_everywhere(argv[1]);
  open_null_fails_everywhere(argv[1]);
  int rc = pdshm_mpi_close(m);
  report(rc == 0, "close at every process: 0");
  report(pdshm_mpi_close(NULL) == PDSHM_EINVAL, "close of NULL: EINVAL");
  reopen(argv[1]);
  errhandlers_fatal(argv[1]);
  if (world_rank == 0) printf("1..%d\n", tests);
  MPI_Finalize();
  return failures ? 1 : 0;
}
