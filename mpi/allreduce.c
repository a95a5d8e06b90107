/*
 * allreduce.c - pdshm_mpi_allreduce: reduce-scatter in the host, allreduce
 * each shard across hosts, allgather in the host.
 *
 * With H hosts of L trainers, each with its own tensor of n elements, local
 * rank i's shard is its share in the host's group, [i n/L, (i+1) n/L)
 * (pdshm_group_share):
 *  1. the host's group reduce-scatters the L tensors in place
 *     (pdshm_group_reduce_scatter; MEAN of an integer dtype as SUM, divided
 *     at the end so that the wrapped sum is divided once and truncates as a
 *     flat MEAN does; a float MEAN as the host's mean, which keeps a 16-bit
 *     float's sum of H means in range where a sum of H L values may not
 *     be): local rank i's shard of its own tensor holds the host's result
 *     for that shard;
 *  2. the hosts agree on step 1's outcome and on the call (dtype, element
 *     count, op: the group checked them only within the host) in one small
 *     MPI_Allreduce on the cross communicator, so that a host whose step
 *     failed, or whose call differs, fails at every process instead of
 *     leaving the others waiting in step 3's MPI call;
 *  3. local rank i allreduces its shard of its own tensor over cross
 *     communicator i, in place in the segment (MEAN: SUM, then the shard is
 *     divided by H for floats, whose step 1 took the host's mean, or by H L
 *     for integers).  It holds no pin: once step 1's call returned, no other
 *     member reads or writes the caller's tensor (pdshm.h), which is the
 *     caller's to keep alive, as for every write through pdshm_tensor_data;
 *  4. the host's group allgathers (pdshm_group_allgather): each local rank's
 *     shard is copied into the same shard of every other local tensor, which
 *     then all hold the job's result.
 * Host memory traffic per process, in elements: step 1 reads L shards of
 * n/L and writes one (n + n/L), step 4 reads one shard and writes L - 1 (n):
 * about 2n, against 4n when each step was a full allreduce of the group.
 * MPI carries n/L per process, as before.  Every step that touches another
 * process's tensor is the group's: a death during it is noticed like any
 * other, and no process reads another's tensor outside the group's pins.
 */
#include "config.h"

#include <stdbool.h>

#include "groups/half.h"
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

/* Step 3 at this process; its shard of v holds the host's result. */
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
  int rc = pdshm_group_reduce_scatter(m->group, v, in_host, timeout_ns);
  rc = pdshm__mpi_group_rc(m, rc, "an allreduce's reduce-scatter");
  if ((rc = agree(m, rc, v, op))) return rc;
  cross_hosts(m, v, op);
  rc = pdshm_group_allgather(m->group, v, timeout_ns);
  return pdshm__mpi_group_rc(m, rc, "an allreduce's allgather");
}
