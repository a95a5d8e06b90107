/*
 * allreduce.c - pdshm_mpi_allreduce: reduce in the host, allreduce 1/L
 * across hosts, share in the host.
 *
 * With H hosts of L trainers, each with its own tensor of n elements:
 *  1. the host's group reduces the L tensors in place (pdshm_group_allreduce;
 *     MEAN of an integer dtype as SUM, divided at the end so that it
 *     truncates as a flat MEAN does): every local tensor holds the host's
 *     result;
 *  2. the hosts agree on step 1's outcome and on the call (dtype, element
 *     count, op: the group checked them only within the host) in one small
 *     MPI_Allreduce on the cross communicator, so that a host whose step
 *     failed, or whose call differs, fails at every process instead of
 *     leaving the others waiting in step 3's MPI call;
 *  3. local rank i allreduces its shard [i n/L, (i+1) n/L) of its own tensor
 *     over cross communicator i, in place in the segment (MEAN: SUM, then the
 *     shard is divided by H for floats, whose step 1 took the host's mean,
 *     or by H L for integers);
 *  4. local rank i fills the rest of its tensor with op's identity (0, or
 *     -inf / +inf, the dtype's least / greatest integer) and the group
 *     reduces once more (SUM, MAX or MIN): each element is then its shard
 *     owner's value combined with identities, i.e. exactly that value, in
 *     every local tensor.
 * Step 4 costs the host a second pass over the tensors, but it is done by
 * the group: a death during it is noticed like any other, and no process
 * reads another's tensor outside the group's pins.
 */
#include "config.h"

#include <limits.h>
#include <stdbool.h>
#include <math.h>
#include <string.h>

#include "half.h"
#include "mpi_int.h"

#define MPI_CHUNK (1 << 30) /* elements of one MPI call (its count is an int) */

static bool is_int(int dt) { return dt == PDSHM_I32 || dt == PDSHM_I64; }

static void shard_divide(void *p, int dt, size_t n, int64_t by) {
  for (size_t i = 0; i < n; i++) switch (dt) {
    case PDSHM_F32: ((float *)p)[i] /= (float)by; break;
    case PDSHM_F64: ((double *)p)[i] /= (double)by; break;
    case PDSHM_I32: ((int32_t *)p)[i] = (int32_t)(((int32_t *)p)[i] / by); break;
    case PDSHM_I64: ((int64_t *)p)[i] /= by; break;
    case PDSHM_F16:
      ((uint16_t *)p)[i] = pdshm__half_store(pdshm__half_load(((uint16_t *)p)[i]) / (float)by);
      break;
    case PDSHM_BF16:
      ((uint16_t *)p)[i] = pdshm__bf16_store(pdshm__bf16_load(((uint16_t *)p)[i]) / (float)by);
      break;
    default: break;
    }
}

/* op's identity for dtype dt, into the element at p. */
static void identity(void *p, int dt, pdshm_reduce_op op) {
  int sign = op == PDSHM_MAX ? -1 : op == PDSHM_MIN ? 1 : 0;
  float f = sign ? (float)sign * INFINITY : 0.0f;
  switch (dt) {
  case PDSHM_F32: *(float *)p = f; break;
  case PDSHM_F64: *(double *)p = sign ? (double)sign * INFINITY : 0.0; break;
  case PDSHM_I32: *(int32_t *)p = sign < 0 ? INT32_MIN : sign > 0 ? INT32_MAX : 0; break;
  case PDSHM_I64: *(int64_t *)p = sign < 0 ? INT64_MIN : sign > 0 ? INT64_MAX : 0; break;
  case PDSHM_F16: *(uint16_t *)p = pdshm__half_store(f); break;
  case PDSHM_BF16: *(uint16_t *)p = pdshm__bf16_store(f); break;
  default: break;
  }
}

/* Step 4's fill: [0, lo) and [hi, n) of the tensor at base. */
static void fill_identity(char *base, int dt, size_t es, size_t n, size_t lo, size_t hi,
                          pdshm_reduce_op op) {
  if (n == 0) return;
  char one[8];
  identity(one, dt, op);
  bool zero = true;
  for (size_t b = 0; b < es; b++) zero = zero && one[b] == 0;
  if (zero) {
    memset(base, 0, lo * es);
    memset(base + hi * es, 0, (n - hi) * es);
    return;
  }
  for (size_t i = 0; i < n; i++)
    if (i < lo || i >= hi) memcpy(base + i * es, one, es);
}

/* Step 3 at this process; the tensor v holds the host's result. */
static void cross_hosts(pdshm_mpi *m, pdshm_var *v, pdshm_reduce_op op) {
  int dt = pdshm_tensor_dtype(v);
  size_t es = pdshm_dtype_size(dt), n = pdshm_tensor_nbytes(v) / es, lo, hi;
  char *base = pdshm_tensor_data(v);
  pdshm__mpi_shard(m, n, &lo, &hi);
  MPI_Datatype t = pdshm__mpi_type(dt);
  MPI_Op mop = pdshm__mpi_op(m, dt, op);
  for (size_t i = lo; i < hi; i += MPI_CHUNK) {
    int k = (int)(hi - i < MPI_CHUNK ? hi - i : MPI_CHUNK);
    MPI_Allreduce(MPI_IN_PLACE, base + i * es, k, t, mop, m->cross);
  }
  m->bytes_sent += (hi - lo) * es;
  if (op == PDSHM_MEAN)
    shard_divide(base + lo * es, dt, hi - lo,
                 is_int(dt) ? (int64_t)m->hosts * m->local_size : m->hosts);
  fill_identity(base, dt, es, n, lo, hi, op);
}

/* Step 2: rc, or EINVAL when the hosts' calls differ, the same everywhere. */
static int agree(pdshm_mpi *m, int rc, pdshm_var *v, pdshm_reduce_op op) {
  int64_t dt = rc ? -1 : pdshm_tensor_dtype(v), n = rc ? -1 : (int64_t)pdshm_tensor_nbytes(v);
  int64_t w[7] = {rc, dt, -dt, n, -n, op, -(int64_t)op};
  MPI_Allreduce(MPI_IN_PLACE, w, 7, MPI_INT64_T, MPI_MIN, m->cross);
  if (w[0]) return (int)w[0];
  return w[1] == -w[2] && w[3] == -w[4] && w[5] == -w[6] ? 0 : PDSHM_EINVAL;
}

int pdshm_mpi_allreduce(pdshm_mpi *m, pdshm_var *v, pdshm_reduce_op op, int64_t timeout_ns) {
  if (!m) return PDSHM_EINVAL;
  if (m->hosts == 1)
    return pdshm__mpi_group_rc(m, pdshm_group_allreduce(m->group, v, op, timeout_ns),
                               "an allreduce");
  int dt = pdshm_tensor_dtype(v);
  pdshm_reduce_op in_host = op == PDSHM_MEAN && is_int(dt) ? PDSHM_SUM : op;
  int rc = pdshm_group_allreduce(m->group, v, in_host, timeout_ns);
  rc = pdshm__mpi_group_rc(m, rc, "an allreduce");
  if ((rc = agree(m, rc, v, op))) return rc;
  cross_hosts(m, v, op);
  pdshm_reduce_op share = op == PDSHM_MAX || op == PDSHM_MIN ? op : PDSHM_SUM;
  rc = pdshm_group_allreduce(m->group, v, share, timeout_ns);
  return pdshm__mpi_group_rc(m, rc, "an allreduce's sharing round");
}
