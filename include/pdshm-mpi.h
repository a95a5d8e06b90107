/*
 * pdshm-mpi.h - data-parallel training past one host: one pdshm segment per
 * host, MPI between the hosts (libpdshm-mpi; pkg-config pdshm-mpi).
 *
 * A job is MPI_COMM_WORLD (or any communicator) split into hosts.  On each
 * host the processes share one segment and form one trainer group
 * (pdshm_group_join, local rank = group rank); between hosts, local rank i
 * of every host forms cross communicator i.  A hierarchical allreduce
 * reduce-scatters in the host through the group (in place in the segment:
 * local rank i's shard, its pdshm_group_share, of its own tensor holds the
 * host's result), then each local rank carries its shard, 1/L of the tensor,
 * across hosts on its cross communicator (MPI reads and writes the segment's
 * memory itself: no staging buffer), then the group allgathers the shards
 * into every local tensor.  Every process hands MPI 1/L of the bytes a flat
 * MPI_Allreduce would, all local ranks use the network at once, and each
 * process reads and writes about 2n elements of host memory (the bound of an
 * allreduce in the host).
 *
 * Which host a process is on: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED),
 * unless a local size is given (pdshm_mpi_options.local_size, else the
 * environment variable PDSHM_MPI_LOCAL_SIZE): then ranks [h*L, (h+1)*L) of
 * the communicator are host h, so that several hosts can be simulated on one
 * machine.  Host h's segment is named "<prefix>.h<h>".
 *
 * Faults: MPI is not fault-tolerant.  When the group reports a member's
 * death (PDSHM_EOWNERDEAD), the host waits up to replace_timeout_ns for the
 * dead rank to be taken over (pdshm_group_join with its rank) and a barrier
 * of the whole group to complete; the call then returns PDSHM_EOWNERDEAD (the
 * step's tensors are unspecified: redo it).  Otherwise it calls MPI_Abort on
 * the job's communicator, after one line on stderr: the job ends, never hangs.
 * A process that is itself an MPI rank cannot be replaced under OpenMPI (the
 * runtime ends the job when a rank dies); the replacement path serves jobs
 * whose runtime keeps going.
 *
 * Errors: 0 or a negative PDSHM_E* code as in pdshm.h.  MPI's own failures
 * are not returned: the handle's communicators (a duplicate of the one given
 * to pdshm_mpi_open, and the local and cross communicators split from it)
 * have MPI's default handler, MPI_ERRORS_ARE_FATAL, whatever the handler of
 * the communicator given.  Every function is collective over the processes
 * named with it and must be called by all of them in the same order; one
 * thread at a time uses a pdshm_mpi.  Unless a function says otherwise, a
 * failure at one process leaves the others' calls unfinished: treat it as the
 * end of the job (MPI_Abort).
 */
#ifndef PDSHM_MPI_H
#define PDSHM_MPI_H

#include <mpi.h>
#include <pdshm.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PDSHM_MPI_BUILDING) && defined(__GNUC__)
#define PDSHM_MPI_API __attribute__((visibility("default")))
#else
#define PDSHM_MPI_API
#endif

#define PDSHM_MPI_LOCAL_SIZE_ENV "PDSHM_MPI_LOCAL_SIZE"
#define PDSHM_MPI_GROUP "pdshm-mpi"      /* the host's trainer group            */
#define PDSHM_MPI_REPLACE_DEFAULT_NS 2000000000ll /* 2 s                          */

typedef struct pdshm_mpi pdshm_mpi; /* this process's place in the job: private */

typedef struct pdshm_mpi_options {
  const char *prefix;        /* host h's segment is "<prefix>.h<h>" (required)  */
  int local_size;            /* > 0: simulated hosts of this many ranks; 0: the
                                environment's PDSHM_MPI_LOCAL_SIZE, else MPI's
                                shared-memory split                            */
  size_t seg_size;           /* a segment made here: its bytes (0: default)     */
  int64_t replace_timeout_ns; /* < 0: PDSHM_MPI_REPLACE_DEFAULT_NS; 0: abort at
                                once on a death                                */
} pdshm_mpi_options;

/*
 * Collective over comm.  Finds the hosts, makes the local and cross
 * communicators, attaches this host's segment (its local rank 0 creates it
 * when it does not exist, and keeps one that does: a restarted job finds its
 * parameters there) and joins the host's group PDSHM_MPI_GROUP with the local
 * rank (taking over a rank whose holder died).  Errors: EINVAL for a NULL
 * o, out or prefix, an empty prefix, a local_size (or PDSHM_MPI_LOCAL_SIZE)
 * that is not a positive divisor of comm's size, or hosts of unequal sizes;
 * -ENOMEM; the errors of pdshm_create, pdshm_attach and pdshm_group_join.
 * It fails at every process of comm or at none: a process whose own
 * arguments and steps succeeded returns the error another process met (and
 * has undone its own steps).  Two exceptions, at the one process: EINVAL for
 * comm MPI_COMM_NULL (a process of no job), and EIO when MPI fails to
 * duplicate comm (MPI_Comm_dup returns an error only under a handler of
 * comm's that returns errors).
 */
PDSHM_MPI_API int pdshm_mpi_open(MPI_Comm comm, const pdshm_mpi_options *o, pdshm_mpi **out);
/* Leaves the group, detaches the segment (which stays, with its named
 * scopes), frees the communicators and the handle, also on error.
 * Collective over the job, as MPI_Comm_free of the handle's communicators
 * is: every process closes its handle.  Returns the first error of
 * pdshm_group_leave or pdshm_detach (this process's own); EINVAL for a NULL
 * m (which takes part in nothing). */
PDSHM_MPI_API int pdshm_mpi_close(pdshm_mpi *m);

/* The handle's parts; each is NULL / -1 / MPI_COMM_NULL for a NULL m.  The
 * segment and group belong to the handle: do not detach or leave them. */
PDSHM_MPI_API pdshm_seg *pdshm_mpi_segment(const pdshm_mpi *m);
PDSHM_MPI_API pdshm_group *pdshm_mpi_group(const pdshm_mpi *m);
PDSHM_MPI_API int pdshm_mpi_host(const pdshm_mpi *m);        /* 0 .. hosts-1     */
PDSHM_MPI_API int pdshm_mpi_hosts(const pdshm_mpi *m);
PDSHM_MPI_API int pdshm_mpi_local_rank(const pdshm_mpi *m);  /* the group rank  */
PDSHM_MPI_API int pdshm_mpi_local_size(const pdshm_mpi *m);
PDSHM_MPI_API MPI_Comm pdshm_mpi_local_comm(const pdshm_mpi *m); /* this host's  */
PDSHM_MPI_API MPI_Comm pdshm_mpi_cross_comm(const pdshm_mpi *m); /* rank = host  */
/* Bytes this process handed to MPI as payload of allreduces and broadcasts
 * since pdshm_mpi_open (on a cross communicator; a ring allreduce of s bytes
 * over H hosts then sends 2 s (H-1)/H of them). */
PDSHM_MPI_API uint64_t pdshm_mpi_bytes_sent(const pdshm_mpi *m);

/* A barrier of this host's group (pdshm_group_barrier) with the death path
 * above: 0, ETIMEDOUT after timeout_ns (< 0: none), EOWNERDEAD after a
 * replacement took a dead member's rank over.  Collective over the host. */
PDSHM_MPI_API int pdshm_mpi_host_barrier(pdshm_mpi *m, int64_t timeout_ns);

/*
 * Hierarchical allreduce, collective over the job.  Every process passes its
 * own tensor v in its host's segment (as for pdshm_group_allreduce: same
 * dtype and element count everywhere, same op); on return every process's
 * tensor holds op over every process's tensor.  Dtypes and ops: those of
 * pdshm_group_allreduce, with the same integer results whatever the layout
 * (a sum wraps in the dtype; MEAN divides the wrapped sum once, at the end,
 * truncating towards zero).  A float result may differ from one host's in
 * the last places: each host's result is rounded into the dtype before it
 * crosses, F16 and BF16 cross through MPI ops that compute in float32 and
 * round each combination, and a float MEAN is the hosts' sum of each host's
 * mean, divided by the number of hosts.  timeout_ns bounds
 * each wait in the host (< 0: none).  Errors of the first, in-host
 * reduce-scatter (those of pdshm_group_reduce_scatter: EINVAL, ETYPE,
 * ETIMEDOUT, EBADSEG, and EOWNERDEAD after a replacement took a dead member's
 * rank over, see above) are agreed on by the hosts before any data crosses,
 * and returned at every process of the job, as is EINVAL when hosts passed
 * different dtypes, element counts or ops; the tensors are then unspecified.
 * An error of the last, in-host allgather (ETIMEDOUT, EOWNERDEAD) is its
 * host's only: the other hosts have their result.
 */
PDSHM_MPI_API int pdshm_mpi_allreduce(pdshm_mpi *m, pdshm_var *v, pdshm_reduce_op op,
                                      int64_t timeout_ns);

/*
 * Broadcast from one host, collective over the job.  v is the same variable
 * for every process of a host (one copy of the parameters per host: a
 * variable of a named scope); on return every host's v holds root_host's
 * tensor (dtype, shape and bytes).  The other hosts' local rank 0 resizes v
 * first when needed; each local rank carries 1/L of the bytes.  Errors, the
 * same at every process: EINVAL when any process passed a NULL v, a
 * root_host out of range or other than the others', or another variable
 * than the other processes of its host (on the root host or any other,
 * whether it holds a tensor or not); ETYPE when root's v holds no tensor;
 * the errors of pdshm_tensor_resize;
 * the group's errors as for pdshm_mpi_allreduce.  After an error the
 * receiving hosts' v may be resized, its bytes unspecified.
 */
PDSHM_MPI_API int pdshm_mpi_bcast_var(pdshm_mpi *m, pdshm_var *v, int root_host,
                                      int64_t timeout_ns);
/*
 * Every tensor variable of root_host's scope s, by name, into s on every
 * host (variables created or resized as needed; others left alone); s is the
 * same named scope for every process of a host (else EINVAL at every
 * process, once a variable of s is met).  Errors as for
 * pdshm_mpi_bcast_var (a NULL s is EINVAL), and ENOMEM for more names than
 * fit in a message.
 */
PDSHM_MPI_API int pdshm_mpi_bcast_scope(pdshm_mpi *m, pdshm_scope *s, int root_host,
                                        int64_t timeout_ns);
/*
 * The lowest host whose `have` is nonzero, into *host (-1 when none): which
 * host a restarted job re-seeds the others from.  Collective over the job.
 * EINVAL for a NULL m or host (then this process takes no part: the others
 * wait in MPI).
 */
PDSHM_MPI_API int pdshm_mpi_first_host(pdshm_mpi *m, int have, int *host);

#ifdef __cplusplus
}
#endif
#endif
