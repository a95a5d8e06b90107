/*
 * ops.c - pdshm's dtypes and reduce ops in MPI terms.
 *
 * F32, F64, I32, I64 map to MPI's own types and ops.  MPI has no 16-bit
 * floats, so F16 and BF16 travel as 2-byte integers and are combined by
 * user-defined commutative ops that widen to float32, combine and narrow
 * with round-to-nearest-even (lib/groups/half.h's conversions, as the group's own
 * reduction uses).  MEAN crosses hosts as SUM: the caller divides.
 */
#include "config.h"

#include "groups/half.h"
#include "mpi_int.h"

typedef float (*half_load_fn)(uint16_t);
typedef uint16_t (*half_store_fn)(float);

static void half_combine(int kind, int hop, const uint16_t *in, uint16_t *io, int n) {
  half_load_fn load = kind == HALF_F16 ? pdshm__half_load : pdshm__bf16_load;
  half_store_fn store = kind == HALF_F16 ? pdshm__half_store : pdshm__bf16_store;
  for (int i = 0; i < n; i++) {
    float a = load(in[i]), b = load(io[i]), r;
    if (hop == HOP_SUM) r = a + b;
    else if (hop == HOP_MAX) r = a > b ? a : b;
    else r = a < b ? a : b;
    io[i] = store(r);
  }
}

#define HALF_OP_FN(kind, hop)                                                  \
  static void op_##kind##_##hop(void *in, void *io, int *n, MPI_Datatype *t) { \
    (void)t;                                                                   \
    half_combine(kind, hop, in, io, *n);                                       \
  }
HALF_OP_FN(HALF_F16, HOP_SUM)
HALF_OP_FN(HALF_F16, HOP_MAX)
HALF_OP_FN(HALF_F16, HOP_MIN)
HALF_OP_FN(HALF_BF16, HOP_SUM)
HALF_OP_FN(HALF_BF16, HOP_MAX)
HALF_OP_FN(HALF_BF16, HOP_MIN)

static MPI_User_function *const half_fns[HALF_KINDS][HOP_KINDS] = {
    {op_HALF_F16_HOP_SUM, op_HALF_F16_HOP_MAX, op_HALF_F16_HOP_MIN},
    {op_HALF_BF16_HOP_SUM, op_HALF_BF16_HOP_MAX, op_HALF_BF16_HOP_MIN},
};

int pdshm__mpi_ops_create(pdshm_mpi *m) {
  for (int k = 0; k < HALF_KINDS; k++)
    for (int h = 0; h < HOP_KINDS; h++)
      MPI_Op_create(half_fns[k][h], 1, &m->half_op[k][h]);
  return 0;
}

void pdshm__mpi_ops_free(pdshm_mpi *m) {
  for (int k = 0; k < HALF_KINDS; k++)
    for (int h = 0; h < HOP_KINDS; h++)
      if (m->half_op[k][h] != MPI_OP_NULL) MPI_Op_free(&m->half_op[k][h]);
}

MPI_Datatype pdshm__mpi_type(int dt) {
  switch (dt) {
  case PDSHM_F32: return MPI_FLOAT;
  case PDSHM_F64: return MPI_DOUBLE;
  case PDSHM_I32: return MPI_INT32_T;
  case PDSHM_I64: return MPI_INT64_T;
  case PDSHM_F16: case PDSHM_BF16: return MPI_UINT16_T;
  default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op pdshm__mpi_op(const pdshm_mpi *m, int dt, pdshm_reduce_op op) {
  int hop = op == PDSHM_MAX ? HOP_MAX : op == PDSHM_MIN ? HOP_MIN : HOP_SUM;
  if (dt == PDSHM_F16) return m->half_op[HALF_F16][hop];
  if (dt == PDSHM_BF16) return m->half_op[HALF_BF16][hop];
  return hop == HOP_MAX ? MPI_MAX : hop == HOP_MIN ? MPI_MIN : MPI_SUM;
}
