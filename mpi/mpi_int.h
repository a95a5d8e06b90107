/*
 * mpi_int.h - libpdshm-mpi's private parts: the handle, and what its files
 * share (the MPI types and ops of pdshm's dtypes, the fault path).
 */
#ifndef PDSHM_MPI_INT_H
#define PDSHM_MPI_INT_H

#include "pdshm-mpi.h"

/* The MPI ops that reduce 16-bit floats in float32, made at open. */
enum { HALF_F16, HALF_BF16, HALF_KINDS };
enum { HOP_SUM, HOP_MAX, HOP_MIN, HOP_KINDS };

struct pdshm_mpi {
  MPI_Comm job;                 /* the communicator given to open (not ours)   */
  MPI_Comm local;               /* this host's processes, rank = local rank    */
  MPI_Comm cross;               /* local rank i of every host, rank = host     */
  pdshm_seg *seg;               /* this host's segment                          */
  pdshm_group *group;           /* this host's group PDSHM_MPI_GROUP           */
  int host, hosts, local_rank, local_size;
  int64_t replace_ns;           /* how long a death waits for a replacement    */
  uint64_t bytes_sent;          /* payload handed to MPI on cross              */
  MPI_Op half_op[HALF_KINDS][HOP_KINDS];
};

/* ops.c */
int pdshm__mpi_ops_create(pdshm_mpi *m);
void pdshm__mpi_ops_free(pdshm_mpi *m);
/* The MPI datatype carrying pdshm dtype dt (MPI_DATATYPE_NULL if none). */
MPI_Datatype pdshm__mpi_type(int dt);
/* The MPI op that combines dt's elements by op (SUM for MEAN). */
MPI_Op pdshm__mpi_op(const pdshm_mpi *m, int dt, pdshm_reduce_op op);

/* fault.c: a group call's result, with a death handled (replacement or
 * MPI_Abort): returns rc, or EOWNERDEAD once a replacement joined. */
int pdshm__mpi_group_rc(pdshm_mpi *m, int rc, const char *what);

/* This local rank's shard of n elements (or bytes): [lo, hi), its share in
 * the host's group (pdshm_group_share: local rank = group rank). */
static inline void pdshm__mpi_shard(const pdshm_mpi *m, size_t n, size_t *lo, size_t *hi) {
  uint64_t first, end;
  pdshm_group_share(m->group, n, &first, &end);
  *lo = (size_t)first;
  *hi = (size_t)end;
}

#endif
