/*
 * fit_a_line_mpi - fit_a_line across hosts: every MPI rank is a trainer;
 * the trainers of a host share one segment (libpdshm-mpi), which holds the
 * host's one copy of the parameters (named scope "params": W, b and the
 * step reached) and of the data (named scope "data").
 *
 * Each step, every trainer computes the gradient of its slice of the global
 * batch in a local scope, pdshm_mpi_allreduce averages the gradients over
 * the job (in the host through the segment, across hosts over MPI), and the
 * host's local rank 0 applies SGD to the host's parameters; a host barrier
 * publishes them.  Every host applies the same update to the same values,
 * so the hosts' copies stay equal.
 *
 * Restart without a checkpoint file: the parameters outlive the job in the
 * segments.  At start, the lowest host whose segment holds "params" is the
 * source, and every host's "params" is re-seeded from it
 * (pdshm_mpi_bcast_scope): a host whose segment is gone gets the others'
 * parameters, and training resumes at the step they reached.  --fresh
 * starts from zero parameters instead.  (The step counter is written after
 * W and b: local rank 0 killed between the two leaves its host one step
 * ahead of its counter, and that step is applied again after a restart.  A
 * death anywhere else leaves every host's parameters and counter in step.)
 *
 * usage: mpirun -np P fit_a_line_mpi [--epochs E] [--fresh] [--die STEP:RANK]
 *                                    [--replace-ms MS] [PREFIX]
 * P must divide 256 (the global batch).  Simulated hosts: PDSHM_MPI_LOCAL_SIZE.
 * --die: at that step, that rank kills itself with SIGKILL (a test of the
 * fault path: the job must end within seconds).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example.h"
#include "pdshm-mpi.h"
#include "synth.h"

#define GLOBAL_BATCH 256
#define STEPS_PER_EPOCH (ROWS / GLOBAL_BATCH)
#define LEARNING_RATE 0.02f
#define SEG_SIZE (8u << 20)
#define GRADS (FEATURES + 2) /* dW, db, loss */
#define WAIT_NS 60000000000ll /* the longest wait in a host */

struct opts {
  const char *prefix;
  int epochs, fresh, die_step, die_rank;
  long replace_ms;
};

struct job {
  pdshm_mpi *m;
  pdshm_scope *params, *data;
  int rank, size;
};

static int rank0(const struct job *j) { return j->rank == 0; }

/* The host's named scope NAME: local rank 0 makes it when missing (and says
 * whether it was there), the others open it after. */
static pdshm_scope *host_scope(struct job *j, const char *name, int *had) {
  pdshm_scope *root, *s = NULL;
  int there = 1;
  CHECK(pdshm_root(pdshm_mpi_segment(j->m), &root));
  if (pdshm_mpi_local_rank(j->m) == 0 && pdshm_scope_open(pdshm_mpi_segment(j->m), name, &s)) {
    there = 0;
    CHECK(pdshm_scope_new(root, name, &s));
  }
  MPI_Bcast(&there, 1, MPI_INT, 0, pdshm_mpi_local_comm(j->m));
  if (!s) CHECK(pdshm_scope_open(pdshm_mpi_segment(j->m), name, &s));
  pdshm_scope_release(root);
  if (had) *had = there;
  return s;
}

static pdshm_var *tensor(pdshm_scope *s, const char *name, pdshm_dtype dt, int64_t n,
                         const char *label) {
  pdshm_var *v;
  CHECK(pdshm_var_get(s, name, &v));
  CHECK(pdshm_tensor_resize(v, dt, 1, &n));
  memset(pdshm_tensor_data(v), 0, pdshm_tensor_nbytes(v));
  if (label) CHECK(pdshm_var_set_label(v, label));
  return v;
}

/* The host's data, made once per segment (the same rows on every host). */
static void open_data(struct job *j) {
  int had;
  j->data = host_scope(j, "data", &had);
  if (!had && pdshm_mpi_local_rank(j->m) == 0) {
    float *x = pdshm_tensor_data(tensor(j->data, "X", PDSHM_F32, ROWS * FEATURES, "input"));
    synth_rows(x, pdshm_tensor_data(tensor(j->data, "Y", PDSHM_F32, ROWS, "input")));
  }
  CHECK(pdshm_mpi_host_barrier(j->m, WAIT_NS));
}

/* The parameters: resumed from the segments, or fresh; returns the step. */
static int open_params(struct job *j, const struct opts *o) {
  int had, from;
  j->params = host_scope(j, "params", &had);
  int have = had && !o->fresh && pdshm_find_local_var(j->params, "step");
  CHECK(pdshm_mpi_first_host(j->m, have, &from));
  if (from < 0) {
    from = 0;
    if (pdshm_mpi_host(j->m) == 0 && pdshm_mpi_local_rank(j->m) == 0) {
      tensor(j->params, "W", PDSHM_F32, FEATURES, "parameter");
      tensor(j->params, "b", PDSHM_F32, 1, "parameter");
      tensor(j->params, "step", PDSHM_I64, 1, NULL);
    }
    CHECK(pdshm_mpi_host_barrier(j->m, WAIT_NS));
  } else if (!have && pdshm_mpi_local_rank(j->m) == 0) {
    printf("fit_a_line_mpi: host %d: no parameters in its segment, re-seeded from host %d\n",
           pdshm_mpi_host(j->m), from);
  }
  CHECK(pdshm_mpi_bcast_scope(j->m, j->params, from, WAIT_NS));
  int step = (int)*(int64_t *)pdshm_tensor_data(pdshm_find_local_var(j->params, "step"));
  if (rank0(j))
    printf(step ? "fit_a_line_mpi: resumed at step %d from host %d's segment\n"
                : "fit_a_line_mpi: fresh start (step %d, parameters of host %d)\n",
           step, from);
  return step;
}

/* This trainer's gradient of its slice of the step's batch, into g. */
static void gradient(struct job *j, int step, float *g) {
  const float *w = pdshm_tensor_data(pdshm_find_var(j->params, "W"));
  const float *b = pdshm_tensor_data(pdshm_find_var(j->params, "b"));
  const float *x = pdshm_tensor_data(pdshm_find_var(j->data, "X"));
  const float *y = pdshm_tensor_data(pdshm_find_var(j->data, "Y"));
  int batch = GLOBAL_BATCH / j->size;
  int first = (step * GLOBAL_BATCH + j->rank * batch) % ROWS;
  memset(g, 0, GRADS * sizeof *g);
  for (int i = 0; i < batch; i++) {
    const float *xi = x + (size_t)(first + i) * FEATURES;
    float err = b[0] - y[first + i];
    for (int k = 0; k < FEATURES; k++) err += w[k] * xi[k];
    for (int k = 0; k < FEATURES; k++) g[k] += 2 * err * xi[k] / (float)batch;
    g[FEATURES] += 2 * err / (float)batch;
    g[FEATURES + 1] += err * err / (float)batch;
  }
}

/* One step; returns its mean loss over the global batch. */
static float train_step(struct job *j, const struct opts *o, int step) {
  pdshm_scope *local;
  pdshm_var *gv;
  CHECK(pdshm_scope_new(j->params, NULL, &local));
  float *g = pdshm_tensor_data(gv = tensor(local, "grad", PDSHM_F32, GRADS, "gradient"));
  gradient(j, step, g);
  if (step == o->die_step && j->rank == o->die_rank) raise(SIGKILL);
  CHECK(pdshm_mpi_allreduce(j->m, gv, PDSHM_MEAN, WAIT_NS));
  float loss = g[FEATURES + 1];
  if (pdshm_mpi_local_rank(j->m) == 0) {
    float *w = pdshm_tensor_data(pdshm_find_var(j->params, "W"));
    float *b = pdshm_tensor_data(pdshm_find_var(j->params, "b"));
    for (int k = 0; k < FEATURES; k++) w[k] -= LEARNING_RATE * g[k];
    b[0] -= LEARNING_RATE * g[FEATURES];
    *(int64_t *)pdshm_tensor_data(pdshm_find_var(j->params, "step")) = step + 1;
  }
  CHECK(pdshm_scope_release(local));
  CHECK(pdshm_mpi_host_barrier(j->m, WAIT_NS)); /* the update is everyone's */
  return loss;
}

static void report(struct job *j) {
  const float *w = pdshm_tensor_data(pdshm_find_var(j->params, "W"));
  const float *b = pdshm_tensor_data(pdshm_find_var(j->params, "b"));
  float err = 0;
  for (int k = 0; k < FEATURES; k++) err = fmaxf(err, fabsf(w[k] - true_weight(k)));
  printf("noise floor %.5f; largest weight error %.4f\nparams", NOISE * NOISE, err);
  for (int k = 0; k < FEATURES; k++) printf(" %a", (double)w[k]);
  printf(" %a\n", (double)b[0]);
}

static void parse(int argc, char **argv, struct opts *o) {
  *o = (struct opts){.prefix = "fit_a_line_mpi", .epochs = 15, .die_step = -1,
                     .replace_ms = 1000};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--epochs") && i + 1 < argc) o->epochs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fresh")) o->fresh = 1;
    else if (!strcmp(argv[i], "--die") && i + 1 < argc &&
             sscanf(argv[++i], "%d:%d", &o->die_step, &o->die_rank) == 2) continue;
    else if (!strcmp(argv[i], "--replace-ms") && i + 1 < argc) o->replace_ms = atol(argv[++i]);
    else if (argv[i][0] != '-') o->prefix = argv[i];
    else {
      fprintf(stderr, "usage: mpirun -np P fit_a_line_mpi [--epochs E] [--fresh] "
                      "[--die STEP:RANK] [--replace-ms MS] [PREFIX]\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
}

int main(int argc, char **argv) {
  struct opts o;
  struct job j = {0};
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &j.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &j.size);
  parse(argc, argv, &o);
  if (GLOBAL_BATCH % j.size) {
    if (rank0(&j)) fprintf(stderr, "fit_a_line_mpi: the job's size must divide %d\n", GLOBAL_BATCH);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  pdshm_mpi_options mo = {.prefix = o.prefix, .seg_size = SEG_SIZE,
                          .replace_timeout_ns = o.replace_ms * 1000000};
  CHECK(pdshm_mpi_open(MPI_COMM_WORLD, &mo, &j.m));
  if (rank0(&j))
    printf("fit_a_line_mpi: %d hosts x %d trainers, %d rows per step (%d per trainer)\n",
           pdshm_mpi_hosts(j.m), pdshm_mpi_local_size(j.m), GLOBAL_BATCH, GLOBAL_BATCH / j.size);
  open_data(&j);
  int step = open_params(&j, &o), total = o.epochs * STEPS_PER_EPOCH;
  float sum = 0;
  for (; step < total; step++) {
    sum += train_step(&j, &o, step);
    if ((step + 1) % STEPS_PER_EPOCH == 0) {
      if (rank0(&j)) printf("  epoch %2d  loss %9.5f\n", (step + 1) / STEPS_PER_EPOCH,
                            sum / STEPS_PER_EPOCH);
      sum = 0;
    }
  }
  if (rank0(&j)) report(&j);
  pdshm_scope_release(j.params);
  pdshm_scope_release(j.data);
  CHECK(pdshm_mpi_close(j.m));
  MPI_Finalize();
  return 0;
}
