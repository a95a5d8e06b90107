/*
 * bcast.c - parameters from one host to the others: a variable, a scope,
 * and which host a restarted job seeds the others from.
 *
 * A host keeps one copy of its parameters (variables of a named scope that
 * all its processes share).  A broadcast first checks that every process of
 * a host passed the same variable (its reference: record and incarnation),
 * then sends the root's tensor description (dtype, ndim, dims, read once,
 * by the root host's local rank 0) to every process; each other host's
 * local rank 0 resizes its copy when it differs, and the host's group
 * barrier publishes that; then local rank i sends bytes
 * [i N/L, (i+1) N/L) of the tensor on cross communicator i straight into
 * the segment, and a last barrier tells the host that every shard is in.
 * Every error is agreed on by all processes before anyone moves on, so
 * that no host is left waiting in MPI.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_int.h"

#define BYTE_CHUNK (1 << 30) /* bytes of one MPI_Bcast (its count is an int) */

/* rc agreed on by the whole job: the most negative of everyone's. */
static int agree(pdshm_mpi *m, int rc) {
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, m->job);
  return rc;
}

static int barrier(pdshm_mpi *m, int64_t timeout_ns) {
  return pdshm__mpi_group_rc(m, pdshm_group_barrier(m->group, timeout_ns), "a broadcast");
}

/* desc = {dtype or ETYPE, ndim, dims...} of v. */
static void describe(pdshm_var *v, int64_t desc[2 + PDSHM_NDIM_MAX]) {
  int dt = pdshm_tensor_dtype(v), nd = pdshm_tensor_ndim(v);
  memset(desc, 0, sizeof(int64_t) * (2 + PDSHM_NDIM_MAX));
  desc[0] = dt < 0 ? PDSHM_ETYPE : dt;
  if (dt < 0) return;
  desc[1] = nd;
  memcpy(desc + 2, pdshm_tensor_dims(v), sizeof(int64_t) * (size_t)nd);
}

/* Local rank 0 of a receiving host: v made like desc. */
static int shape_like(pdshm_var *v, const int64_t *desc) {
  int64_t mine[2 + PDSHM_NDIM_MAX];
  describe(v, mine);
  if (!memcmp(mine, desc, sizeof mine)) return 0;
  return pdshm_tensor_resize(v, (pdshm_dtype)desc[0], (int)desc[1], desc + 2);
}

static void send_shard(pdshm_mpi *m, pdshm_var *v, int root_host) {
  size_t n = pdshm_tensor_nbytes(v), lo, hi;
  char *base = pdshm_tensor_data(v);
  pdshm__mpi_shard(m, n, &lo, &hi);
  for (size_t i = lo; i < hi; i += BYTE_CHUNK) {
    int k = (int)(hi - i < BYTE_CHUNK ? hi - i : BYTE_CHUNK);
    MPI_Bcast(base + i, k, MPI_BYTE, root_host, m->cross);
  }
  if (m->host == root_host) m->bytes_sent += hi - lo;
}

/* Whether every process of this host passed v (the same variable: the
 * same record and incarnation); NULL counts as a variable of its own. */
static bool host_same_var(pdshm_mpi *m, pdshm_var *v) {
  pdshm_varref r = v ? pdshm_var_ref(v) : (pdshm_varref){UINT64_MAX, UINT64_MAX};
  /* the minimum of ~x is ~(the maximum of x) */
  uint64_t w[4] = {r.off, ~r.off, r.gen, ~r.gen};
  MPI_Allreduce(MPI_IN_PLACE, w, 4, MPI_UINT64_T, MPI_MIN, m->local);
  return w[0] == ~w[1] && w[2] == ~w[3];
}

/* A call's arguments, agreed on by the job before anything moves: rc (this
 * process's verdict on its other arguments), or EINVAL at every process when
 * any process passed a root_host out of range or other than the others'. */
static int check_root(pdshm_mpi *m, int rc, int root_host) {
  int64_t w[3] = {rc ? rc : root_host < 0 || root_host >= m->hosts ? PDSHM_EINVAL : 0,
                  root_host, -(int64_t)root_host};
  MPI_Allreduce(MPI_IN_PLACE, w, 3, MPI_INT64_T, MPI_MIN, m->job);
  return w[0] ? (int)w[0] : w[1] == -w[2] ? 0 : PDSHM_EINVAL;
}

/* count items of type t from the root host's local rank 0 to every
 * process: to every host's local rank 0 on cross communicator 0, then
 * within each host.  What one process of the root host read is what every
 * process acts on, so that they all take the same path. */
static void from_root(pdshm_mpi *m, void *buf, int count, MPI_Datatype t, int root_host) {
  if (m->local_rank == 0) MPI_Bcast(buf, count, t, root_host, m->cross);
  MPI_Bcast(buf, count, t, 0, m->local);
}

int pdshm_mpi_bcast_var(pdshm_mpi *m, pdshm_var *v, int root_host, int64_t timeout_ns) {
  if (!m) return PDSHM_EINVAL;
  bool same = host_same_var(m, v); /* collective over the host: even for a NULL v */
  int rc = check_root(m, v && same ? 0 : PDSHM_EINVAL, root_host);
  if (rc) return rc;
  int64_t desc[2 + PDSHM_NDIM_MAX];
  if (m->host == root_host && m->local_rank == 0) describe(v, desc);
  from_root(m, desc, 2 + PDSHM_NDIM_MAX, MPI_INT64_T, root_host);
  if (desc[0] < 0) return (int)desc[0]; /* ETYPE everywhere */
  if (m->host != root_host && m->local_rank == 0) rc = shape_like(v, desc);
  if (!(rc = agree(m, rc))) rc = agree(m, barrier(m, timeout_ns));
  if (rc) return rc;
  send_shard(m, v, root_host);
  return agree(m, barrier(m, timeout_ns));
}

struct names {
  char *buf;     /* name\0name\0...                                  */
  size_t len, cap;
  int count;
};

static int add_name(pdshm_var *v, void *arg) {
  struct names *ns = arg;
  if (pdshm_tensor_dtype(v) < 0) return 0;
  const char *name = pdshm_var_name(v);
  size_t k = strlen(name) + 1;
  if (ns->len + k > ns->cap) {
    size_t cap = ns->cap ? ns->cap * 2 : 4096;
    while (cap < ns->len + k) cap *= 2;
    char *b = realloc(ns->buf, cap);
    if (!b) return -ENOMEM;
    ns->buf = b;
    ns->cap = cap;
  }
  memcpy(ns->buf + ns->len, name, k);
  ns->len += k;
  ns->count++;
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names of the root host's local rank 0's s, sorted (the same order at
 * every process), in *list. */
static int root_names(pdshm_mpi *m, pdshm_scope *s, int root_host, struct names *ns,
                      const char ***list) {
  int rc = 0;
  bool reader = m->host == root_host && m->local_rank == 0;
  if (reader) rc = pdshm_scope_foreach_var(s, NULL, add_name, ns);
  if (ns->len > INT32_MAX) rc = PDSHM_ENOMEM;
  if ((rc = agree(m, rc))) return rc;
  int64_t hdr[2] = {(int64_t)ns->len, ns->count};
  from_root(m, hdr, 2, MPI_INT64_T, root_host);
  if (!reader) {
    free(ns->buf);
    ns->buf = malloc(hdr[0] ? (size_t)hdr[0] : 1);
    if (!ns->buf) rc = -ENOMEM;
  }
  if ((rc = agree(m, rc))) return rc;
  ns->len = (size_t)hdr[0];
  ns->count = (int)hdr[1];
  from_root(m, ns->buf, (int)hdr[0], MPI_CHAR, root_host);
  *list = calloc((size_t)ns->count + 1, sizeof **list);
  if ((rc = agree(m, *list ? 0 : -ENOMEM))) return rc;
  size_t off = 0;
  for (int i = 0; i < ns->count; i++, off += strlen(ns->buf + off) + 1) (*list)[i] = ns->buf + off;
  qsort(*list, (size_t)ns->count, sizeof **list, cmp_str);
  return 0;
}

int pdshm_mpi_bcast_scope(pdshm_mpi *m, pdshm_scope *s, int root_host, int64_t timeout_ns) {
  if (!m) return PDSHM_EINVAL;
  struct names ns = {0};
  const char **list = NULL;
  int rc = check_root(m, s ? 0 : PDSHM_EINVAL, root_host);
  if (!rc) rc = root_names(m, s, root_host, &ns, &list);
  for (int i = 0; !rc && i < ns.count; i++) {
    pdshm_var *v = NULL;
    rc = agree(m, pdshm_var_get(s, list[i], &v));
    if (!rc) rc = pdshm_mpi_bcast_var(m, v, root_host, timeout_ns);
  }
  free(list);
  free(ns.buf);
  return rc;
}

int pdshm_mpi_first_host(pdshm_mpi *m, int have, int *host) {
  if (!m || !host) return PDSHM_EINVAL;
  int h = have ? m->host : m->hosts;
  MPI_Allreduce(MPI_IN_PLACE, &h, 1, MPI_INT, MPI_MIN, m->job);
  *host = h == m->hosts ? -1 : h;
  return 0;
}
