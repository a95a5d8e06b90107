/*
 * fault.c - a member's death, seen by the host's group: wait for a
 * replacement, else end the job with MPI_Abort.  Never a hang: every wait
 * here is bounded by the handle's replace_ns.
 */
#include "config.h"

#include <stdio.h>
#include <time.h>

#include "mpi_int.h"

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int pdshm__mpi_group_rc(pdshm_mpi *m, int rc, const char *what) {
  if (rc != PDSHM_EOWNERDEAD) return rc;
  int64_t deadline = now_ns() + m->replace_ns;
  for (int64_t left = m->replace_ns; left > 0; left = deadline - now_ns()) {
    /* The barrier after a death waits for the dead rank to be taken over. */
    int brc = pdshm_group_barrier(m->group, left);
    if (brc == 0) return PDSHM_EOWNERDEAD;
    if (brc != PDSHM_EOWNERDEAD) break;
  }
  fprintf(stderr,
          "pdshm-mpi: host %d, local rank %d: a trainer of this host died during %s and "
          "none took its rank over within %.1f s: MPI_Abort\n",
          m->host, m->local_rank, what, (double)m->replace_ns / 1e9);
  fflush(stderr);
  MPI_Abort(m->job, 128 + 9);
  return PDSHM_EOWNERDEAD; /* not reached: MPI_Abort does not return */
}

int pdshm_mpi_host_barrier(pdshm_mpi *m, int64_t timeout_ns) {
  if (!m) return PDSHM_EINVAL;
  return pdshm__mpi_group_rc(m, pdshm_group_barrier(m->group, timeout_ns), "a barrier");
}
