/*
 * fit_a_line - linear regression with 13 features, data-parallel over N
 * trainer processes sharing one pdshm segment (the seed-004 program, made
 * real).
 *
 *   coordinator: creates the segment, the named scope "params" (W, b,
 *                labelled "parameter"), the named scope "data" (X, Y,
 *                labelled "input", deterministic synthetic rows) and the
 *                gradient accumulators in "grads"; then, step by step, lets
 *                the trainers compute, averages what they added, applies SGD.
 *   trainer k:   attaches by name, opens "params", "data" and "grads" by path,
 *                and for each step builds a local scope (a child of
 *                "params") for its minibatch's predictions and gradients,
 *                finds W and b through the parent chain, adds its gradient to
 *                the shared accumulators under their exclusive variable locks,
 *                and releases the local scope.
 *
 * usage: fit_a_line [--trainers N] [--epochs E] [--keep] [SEGMENT]
 * The segment is left in place with --keep (for pdshm-attach), else unlinked.
 */
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "example.h"
#include "synth.h"

#define GLOBAL_BATCH 256 /* rows per step, split between the trainers, so that an
                           epoch is the same SGD steps whatever their number */
#define SEG_SIZE (8u << 20) /* small: /dev/shm in a container is often 64 MiB */
#define LEARNING_RATE 0.02f
#define MAX_TRAINERS 64

struct opts {
  const char *name;
  int trainers, epochs, keep;
};

static pdshm_var *tensor(pdshm_scope *s, const char *name, const char *label, int64_t rows,
                         int64_t cols) {
  pdshm_var *v;
  int64_t dims[2] = {rows, cols};
  CHECK(pdshm_var_create(s, name, &v));
  CHECK(pdshm_tensor_resize(v, PDSHM_F32, 2, dims));
  if (label) CHECK(pdshm_var_set_label(v, label));
  memset(pdshm_tensor_data(v), 0, pdshm_tensor_nbytes(v));
  return v;
}

/* ---- the coordinator's set-up --------------------------------------------------- */

static void build_model(pdshm_seg *seg) {
  pdshm_scope *root, *params, *data, *grads;
  CHECK(pdshm_root(seg, &root));
  CHECK(pdshm_scope_new(root, "params", &params));
  CHECK(pdshm_scope_new(root, "data", &data));
  CHECK(pdshm_scope_new(root, "grads", &grads));
  pdshm_var *w = tensor(params, "W", "parameter", FEATURES, 1);
  tensor(params, "b", "parameter", 1, 1);
  CHECK(pdshm_var_add_reader(w, "fc"));
  float *x = pdshm_tensor_data(tensor(data, "X", "input", ROWS, FEATURES));
  float *y = pdshm_tensor_data(tensor(data, "Y", "input", ROWS, 1));
  synth_rows(x, y);
  tensor(grads, "dW", "gradient", FEATURES, 1);
  tensor(grads, "db", "gradient", 1, 1);
  tensor(grads, "loss", "objective", 1, 1);
  /* The named scopes persist after these handles go: they are linked. */
  pdshm_scope_release(grads);
  pdshm_scope_release(data);
  pdshm_scope_release(params);
  pdshm_scope_release(root);
}

/* ---- a trainer ------------------------------------------------------------------------- */

struct trainer {
  pdshm_seg *seg;
  pdshm_scope *params, *data, *grads;
  int k, n;
  int batch; /* rows of each step that are this trainer's */
};

static void add_locked(pdshm_var *acc, const float *g, int n) {
  CHECK(pdshm_var_lock(acc, 1));
  float *a = pdshm_tensor_data(acc);
  for (int i = 0; i < n; i++) a[i] += g[i];
  CHECK(pdshm_var_unlock(acc));
}

/* One minibatch in a local scope: forward, loss, gradients, contribution. */
static void train_step(struct trainer *t, int step) {
  pdshm_scope *local;
  CHECK(pdshm_scope_new(t->params, NULL, &local));
  /* W and b are found through the parent chain, read in place. */
  const float *w = pdshm_tensor_data(pdshm_find_var(local, "W"));
  const float *b = pdshm_tensor_data(pdshm_find_var(local, "b"));
  const float *x = pdshm_tensor_data(pdshm_find_var(t->data, "X"));
  const float *y = pdshm_tensor_data(pdshm_find_var(t->data, "Y"));
  CHECK(pdshm_var_lock(pdshm_find_var(local, "W"), 0)); /* a consistent read */
  float *pred = pdshm_tensor_data(tensor(local, "pred", NULL, t->batch, 1));
  float *dw = pdshm_tensor_data(tensor(local, "dW", "gradient", FEATURES, 1));
  float *db = pdshm_tensor_data(tensor(local, "db", "gradient", 1, 1));
  float loss = 0;
  int first = (step * GLOBAL_BATCH + t->k * t->batch) % ROWS;
  for (int i = 0; i < t->batch; i++) {
    const float *xi = x + (size_t)(first + i) * FEATURES;
    pred[i] = b[0];
    for (int j = 0; j < FEATURES; j++) pred[i] += w[j] * xi[j];
    float err = pred[i] - y[first + i];
    loss += err * err;
    db[0] += 2 * err;
    for (int j = 0; j < FEATURES; j++) dw[j] += 2 * err * xi[j];
  }
  CHECK(pdshm_var_unlock(pdshm_find_var(local, "W")));
  add_locked(pdshm_find_var(t->grads, "dW"), dw, FEATURES);
  add_locked(pdshm_find_var(t->grads, "db"), db, 1);
  add_locked(pdshm_find_var(t->grads, "loss"), &loss, 1);
  CHECK(pdshm_scope_release(local)); /* its variables and buffers go with it */
}

/* Waits for a step number on `in`, trains, acknowledges on `out`. */
static int trainer_main(const struct opts *o, int k, int in, int out) {
  struct trainer t = {.k = k, .n = o->trainers, .batch = GLOBAL_BATCH / o->trainers};
  CHECK(pdshm_attach(o->name, NULL, &t.seg));
  CHECK(pdshm_scope_open(t.seg, "params", &t.params));
  CHECK(pdshm_scope_open(t.seg, "data", &t.data));
  CHECK(pdshm_scope_open(t.seg, "grads", &t.grads));
  int step;
  while (read(in, &step, sizeof step) == sizeof step && step >= 0) {
    train_step(&t, step);
    if (write(out, &step, sizeof step) != sizeof step) return 1;
  }
  pdshm_scope_release(t.grads);
  pdshm_scope_release(t.data);
  pdshm_scope_release(t.params);
  CHECK(pdshm_detach(t.seg));
  return 0;
}

/* ---- the coordinator's loop --------------------------------------------------------------- */

struct crew {
  pid_t pid[MAX_TRAINERS];
  int go[MAX_TRAINERS], done;
};

static void spawn(const struct opts *o, struct crew *c) {
  int back[2];
  if (pipe(back)) exit(1);
  for (int k = 0; k < o->trainers; k++) {
    int p[2];
    if (pipe(p)) exit(1);
    fflush(NULL);
    if ((c->pid[k] = fork()) == 0) {
      close(p[1]);
      close(back[0]);
      _exit(trainer_main(o, k, p[0], back[1]));
    }
    close(p[0]);
    c->go[k] = p[1];
  }
  close(back[1]);
  c->done = back[0];
}

/* Stops the job when a trainer is gone: the others would wait for it forever. */
static void lost_trainer(const struct opts *o, struct crew *c) {
  fprintf(stderr, "fit_a_line: a trainer died; stopping the others\n");
  for (int k = 0; k < o->trainers; k++) kill(c->pid[k], SIGKILL);
  exit(1);
}

/* The next acknowledgement; a trainer that exits meanwhile ends the job. */
static void await_ack(const struct opts *o, struct crew *c) {
  struct pollfd p = {.fd = c->done, .events = POLLIN};
  int s;
  while (poll(&p, 1, 200) == 0)
    if (waitpid(-1, NULL, WNOHANG) > 0) lost_trainer(o, c);
  if (read(c->done, &s, sizeof s) != sizeof s) lost_trainer(o, c);
}

static void run_step(const struct opts *o, struct crew *c, int step) {
  for (int k = 0; k < o->trainers; k++)
    if (write(c->go[k], &step, sizeof step) != sizeof step) lost_trainer(o, c);
  for (int k = 0; k < o->trainers; k++) await_ack(o, c);
}

/* SGD on the averaged gradient; returns the step's mean loss. */
static float apply(pdshm_scope *params, pdshm_scope *grads, int rows) {
  pdshm_var *wv = pdshm_find_var(params, "W"), *bv = pdshm_find_var(params, "b");
  float *w = pdshm_tensor_data(wv), *b = pdshm_tensor_data(bv);
  float *dw = pdshm_tensor_data(pdshm_find_var(grads, "dW"));
  float *db = pdshm_tensor_data(pdshm_find_var(grads, "db"));
  float *loss = pdshm_tensor_data(pdshm_find_var(grads, "loss"));
  CHECK(pdshm_var_lock(wv, 1));
  for (int j = 0; j < FEATURES; j++) w[j] -= LEARNING_RATE * dw[j] / (float)rows;
  b[0] -= LEARNING_RATE * db[0] / (float)rows;
  CHECK(pdshm_var_unlock(wv));
  float mean = loss[0] / (float)rows;
  memset(dw, 0, FEATURES * sizeof *dw);
  db[0] = loss[0] = 0;
  return mean;
}

static void coordinate(const struct opts *o, pdshm_seg *seg) {
  struct crew c;
  pdshm_scope *params, *grads;
  CHECK(pdshm_scope_open(seg, "params", &params));
  CHECK(pdshm_scope_open(seg, "grads", &grads));
  spawn(o, &c);
  int steps = ROWS / GLOBAL_BATCH;
  printf("fit_a_line: %d trainers, %d rows, %d steps of %d rows (%d per trainer) per epoch\n",
         o->trainers, ROWS, steps, GLOBAL_BATCH, GLOBAL_BATCH / o->trainers);
  for (int e = 0; e < o->epochs; e++) {
    float sum = 0;
    for (int s = 0; s < steps; s++) {
      run_step(o, &c, e * steps + s);
      sum += apply(params, grads, GLOBAL_BATCH);
    }
    printf("  epoch %2d  loss %9.5f\n", e + 1, sum / (float)steps);
  }
  int stop = -1;
  for (int k = 0; k < o->trainers; k++)
    if (write(c.go[k], &stop, sizeof stop) != sizeof stop) exit(1);
  for (int k = 0, st; k < o->trainers; k++) waitpid(c.pid[k], &st, 0);
  const float *w = pdshm_tensor_data(pdshm_find_var(params, "W"));
  float err = 0;
  for (int j = 0; j < FEATURES; j++) err = fmaxf(err, fabsf(w[j] - true_weight(j)));
  printf("noise floor %.5f; largest weight error %.4f\n", NOISE * NOISE, err);
  pdshm_scope_release(grads);
  pdshm_scope_release(params);
}

static void parse(int argc, char **argv, struct opts *o) {
  *o = (struct opts){.name = "fit_a_line", .trainers = 4, .epochs = 15};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--trainers") && i + 1 < argc) o->trainers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) o->epochs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--keep")) o->keep = 1;
    else if (argv[i][0] != '-') o->name = argv[i];
    else {
      fprintf(stderr, "usage: fit_a_line [--trainers N] [--epochs E] [--keep] [SEGMENT]\n");
      exit(2);
    }
  }
  if (o->trainers < 1 || o->trainers > MAX_TRAINERS || GLOBAL_BATCH % o->trainers) {
    fprintf(stderr, "fit_a_line: --trainers must divide %d and be at most %d\n", GLOBAL_BATCH,
            MAX_TRAINERS);
    exit(2);
  }
}

int main(int argc, char **argv) {
  struct opts o;
  pdshm_seg *seg;
  parse(argc, argv, &o);
  signal(SIGPIPE, SIG_IGN); /* a trainer gone is noticed by lost_trainer */
  pdshm_unlink(o.name);
  pdshm_options so = {.size = SEG_SIZE};
  CHECK(pdshm_create(o.name, &so, &seg));
  build_model(seg);
  coordinate(&o, seg);
  CHECK(pdshm_detach(seg));
  if (!o.keep) pdshm_unlink(o.name);
  return 0;
}
