/*
 * job.c - pdshm_mpi_open/close: which host a process is on, the host's
 * segment and group, the local and cross communicators.
 *
 * Invariants:
 *  1. Every host has the same local size L (open checks it at every process
 *     and fails everywhere alike), so that cross communicator i holds exactly
 *     local rank i of every host and every host cuts a tensor into the same
 *     L shards.
 *  2. Host numbers are dense, 0..H-1, in the order of the hosts' lowest job
 *     rank; local ranks follow job ranks within a host.
 *  3. A host's segment is created only by its local rank 0, and the others
 *     attach after a barrier of the local communicator: nobody attaches a
 *     segment still being made.
 *  4. open succeeds at every process or at none (the processes agree on
 *     their arguments first and on the outcome last), so that no process
 *     goes on to wait in MPI for one that failed; a process with bad
 *     arguments still takes part in the agreement.
 *  5. The handle's communicators are its own: job is a duplicate of the
 *     caller's (no message of ours meets one of the caller's), with MPI's
 *     default handler MPI_ERRORS_ARE_FATAL whatever the caller's handler
 *     is (MPI's calls here are not checked), and local and cross, split
 *     from job, inherit that handler.  Freeing them is collective, so close
 *     is too.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_int.h"

/* The simulated local size: the option, else the environment, else 0. */
static int sim_local_size(const pdshm_mpi_options *o) {
  if (o->local_size) return o->local_size;
  const char *e = getenv(PDSHM_MPI_LOCAL_SIZE_ENV);
  if (!e || !*e) return 0;
  char *end;
  long v = strtol(e, &end, 10);
  return *end || v <= 0 || v > PDSHM_GROUP_MAX ? -1 : (int)v;
}

/* Step 0 (invariant 4): rc, this process's failure so far, or EINVAL for
 * its arguments; the job's most negative, the same at every process.  *sim
 * is the simulated local size (0: none). */
static int agree_args(MPI_Comm job, int rc, const pdshm_mpi_options *o, pdshm_mpi **out,
                      int *sim) {
  int size;
  MPI_Comm_size(job, &size);
  *sim = 0;
  if (!rc && (!o || !o->prefix || !*o->prefix || !out)) rc = PDSHM_EINVAL;
  if (!rc) *sim = sim_local_size(o);
  if (!rc && (*sim < 0 || (*sim > 0 && size % *sim != 0))) rc = PDSHM_EINVAL;
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, job);
  return rc;
}

/* Step 1: this process's host's communicator (invariant 2 for the order). */
static void split_hosts(pdshm_mpi *m, int sim) {
  int rank;
  MPI_Comm_rank(m->job, &rank);
  if (sim > 0) MPI_Comm_split(m->job, rank / sim, rank, &m->local);
  else MPI_Comm_split_type(m->job, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &m->local);
  MPI_Comm_rank(m->local, &m->local_rank);
  MPI_Comm_size(m->local, &m->local_size);
}

/* Step 2: host numbers (the local ranks 0 count themselves) and the
 * cross communicators; invariant 1 checked at every process. */
static int split_cross(pdshm_mpi *m) {
  int rank, size, sizes[2] = {m->local_size, -m->local_size};
  MPI_Comm_rank(m->job, &rank);
  MPI_Comm_size(m->job, &size);
  MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, m->job);
  if (sizes[0] != -sizes[1] || m->local_size > (int)PDSHM_GROUP_MAX) return PDSHM_EINVAL;
  MPI_Comm leaders;
  MPI_Comm_split(m->job, m->local_rank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders);
  if (leaders != MPI_COMM_NULL) {
    MPI_Comm_rank(leaders, &m->host);
    MPI_Comm_free(&leaders);
  }
  MPI_Bcast(&m->host, 1, MPI_INT, 0, m->local);
  m->hosts = size / m->local_size;
  MPI_Comm_split(m->job, m->local_rank, m->host, &m->cross);
  return 0;
}

/* Step 3: the host's segment, made by local rank 0 when missing. */
static int open_segment(pdshm_mpi *m, const pdshm_mpi_options *o) {
  char name[PDSHM_SEG_NAME_MAX + 1];
  int n = snprintf(name, sizeof name, "%s.h%d", o->prefix, m->host), rc = 0;
  if (n < 0 || (size_t)n >= sizeof name) return PDSHM_ENAMETOOLONG;
  if (m->local_rank == 0) {
    pdshm_options co = {.size = o->seg_size};
    rc = pdshm_attach(name, NULL, &m->seg);
    if (rc == PDSHM_ENOENT) rc = pdshm_create(name, &co, &m->seg);
  }
  int made = rc;
  MPI_Bcast(&made, 1, MPI_INT, 0, m->local);
  if (made) return rc ? rc : made;
  if (m->local_rank != 0) rc = pdshm_attach(name, NULL, &m->seg);
  return rc;
}

static void job_free(pdshm_mpi *m) {
  pdshm__mpi_ops_free(m);
  if (m->local != MPI_COMM_NULL) MPI_Comm_free(&m->local);
  if (m->cross != MPI_COMM_NULL) MPI_Comm_free(&m->cross);
  MPI_Comm_free(&m->job);
  free(m);
}

/* The handle, or NULL and *rc = -ENOMEM; job becomes its own. */
static pdshm_mpi *job_new(MPI_Comm job, int *rc) {
  pdshm_mpi *m = calloc(1, sizeof *m);
  if (!m) {
    *rc = -ENOMEM;
    return NULL;
  }
  m->job = job;
  m->local = m->cross = MPI_COMM_NULL;
  for (int k = 0; k < HALF_KINDS; k++)
    for (int h = 0; h < HOP_KINDS; h++) m->half_op[k][h] = MPI_OP_NULL;
  return m;
}

int pdshm_mpi_open(MPI_Comm comm, const pdshm_mpi_options *o, pdshm_mpi **out) {
  if (comm == MPI_COMM_NULL) return PDSHM_EINVAL; /* of no job: nobody waits for it */
  MPI_Comm job; /* invariant 5 */
  if (MPI_Comm_dup(comm, &job) != MPI_SUCCESS) return PDSHM_EIO;
  MPI_Comm_set_errhandler(job, MPI_ERRORS_ARE_FATAL);
  int rc = 0, sim;
  pdshm_mpi *m = job_new(job, &rc);
  if ((rc = agree_args(job, rc, o, out, &sim))) {
    if (m) job_free(m);
    else MPI_Comm_free(&job);
    return rc;
  }
  m->replace_ns = o->replace_timeout_ns < 0 ? PDSHM_MPI_REPLACE_DEFAULT_NS : o->replace_timeout_ns;
  split_hosts(m, sim);
  rc = split_cross(m);
  if (!rc) rc = open_segment(m, o);
  if (!rc) rc = pdshm_group_join(m->seg, PDSHM_MPI_GROUP, (unsigned)m->local_size,
                                 m->local_rank, &m->group);
  if (!rc) rc = pdshm__mpi_ops_create(m);
  /* invariant 4: a failure anywhere is a failure everywhere */
  int all = rc;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, m->job);
  if (!rc) rc = all;
  if (rc) {
    if (m->group) pdshm_group_leave(m->group);
    if (m->seg) pdshm_detach(m->seg);
    job_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

int pdshm_mpi_close(pdshm_mpi *m) {
  if (!m) return PDSHM_EINVAL;
  int rc = pdshm_group_leave(m->group);
  int rc2 = pdshm_detach(m->seg);
  job_free(m);
  return rc ? rc : rc2;
}

pdshm_seg *pdshm_mpi_segment(const pdshm_mpi *m) { return m ? m->seg : NULL; }
pdshm_group *pdshm_mpi_group(const pdshm_mpi *m) { return m ? m->group : NULL; }
int pdshm_mpi_host(const pdshm_mpi *m) { return m ? m->host : -1; }
int pdshm_mpi_hosts(const pdshm_mpi *m) { return m ? m->hosts : -1; }
int pdshm_mpi_local_rank(const pdshm_mpi *m) { return m ? m->local_rank : -1; }
int pdshm_mpi_local_size(const pdshm_mpi *m) { return m ? m->local_size : -1; }
MPI_Comm pdshm_mpi_local_comm(const pdshm_mpi *m) { return m ? m->local : MPI_COMM_NULL; }
MPI_Comm pdshm_mpi_cross_comm(const pdshm_mpi *m) { return m ? m->cross : MPI_COMM_NULL; }
uint64_t pdshm_mpi_bytes_sent(const pdshm_mpi *m) { return m ? m->bytes_sent : 0; }
