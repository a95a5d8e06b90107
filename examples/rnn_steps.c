/*
 * rnn_steps - one step function run over a fresh local scope per time step
 * (the seeds' StepNet), and a scope stack whose bottom is the global scope
 * (seed 003: parameters go to the global scope, step variables to the top).
 *
 *   h_t = tanh(W_x * x_t + W_h * h_{t-1})
 *
 * The weights live once, in the named scope "rnn"; each step's scope is an
 * anonymous child of it holding x_t and h_t; the step finds W_x and W_h up the
 * parent chain and h_{t-1} in the previous step's scope.  Releasing the step
 * scopes reclaims their variables; the weights stay.
 *
 * usage: rnn_steps [--steps T] [SEGMENT]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example.h"

#define HIDDEN 8
#define MAX_STEPS 256
#define STACK_MAX 16

/* ---- a scope stack (seed 003) --------------------------------------------- */

struct scope_stack {
  pdshm_scope *s[STACK_MAX];
  int n;
};

static void stack_init(struct scope_stack *st, pdshm_scope *global) {
  st->s[0] = global;
  st->n = 1;
}
static pdshm_scope *stack_top(struct scope_stack *st) { return st->s[st->n - 1]; }
static pdshm_scope *stack_global(struct scope_stack *st) { return st->s[0]; }

/* Pushes a new local scope, a child of the current top. */
static pdshm_scope *stack_push(struct scope_stack *st) {
  if (st->n == STACK_MAX) exit(1);
  CHECK(pdshm_scope_new(stack_top(st), NULL, &st->s[st->n]));
  return st->s[st->n++];
}

static void stack_pop(struct scope_stack *st) {
  if (st->n > 1) CHECK(pdshm_scope_release(st->s[--st->n]));
}

/* ---- the step net ------------------------------------------------------------- */

static float *matrix(pdshm_scope *s, const char *name, const char *label, int rows, int cols) {
  pdshm_var *v;
  int64_t dims[2] = {rows, cols};
  CHECK(pdshm_var_get(s, name, &v));
  CHECK(pdshm_tensor_resize(v, PDSHM_F32, 2, dims));
  if (label) CHECK(pdshm_var_set_label(v, label));
  return pdshm_tensor_data(v);
}

static const float *find(pdshm_scope *s, const char *name) {
  pdshm_var *v = pdshm_find_var(s, name);
  if (!v) {
    fprintf(stderr, "rnn_steps: no variable %s\n", name);
    exit(1);
  }
  return pdshm_tensor_data(v);
}

/* One time step, in its own scope `step`; prev is the previous step's scope. */
static void step_net(pdshm_scope *step, pdshm_scope *prev, int t) {
  const float *wx = find(step, "W_x"), *wh = find(step, "W_h");
  float *x = matrix(step, "x", "input", HIDDEN, 1);
  float *h = matrix(step, "h", NULL, HIDDEN, 1);
  const float *hp = prev ? pdshm_tensor_data(pdshm_find_local_var(prev, "h")) : NULL;
  for (int i = 0; i < HIDDEN; i++) x[i] = sinf(0.3f * (float)(t + i));
  for (int i = 0; i < HIDDEN; i++) {
    float a = 0;
    for (int j = 0; j < HIDDEN; j++) a += wx[i * HIDDEN + j] * x[j] + (hp ? wh[i * HIDDEN + j] * hp[j] : 0);
    h[i] = tanhf(a);
  }
}

static int count_var(pdshm_var *v, void *arg) {
  (void)v;
  ++*(int *)arg;
  return 0;
}

static void run(pdshm_seg *seg, int steps) {
  struct scope_stack st;
  pdshm_scope *global, *rnn, *scopes[MAX_STEPS];
  CHECK(pdshm_root(seg, &global));
  stack_init(&st, global);
  CHECK(pdshm_scope_new(stack_global(&st), "rnn", &rnn));
  float *wx = matrix(rnn, "W_x", "parameter", HIDDEN, HIDDEN);
  float *wh = matrix(rnn, "W_h", "parameter", HIDDEN, HIDDEN);
  for (int i = 0; i < HIDDEN * HIDDEN; i++) {
    wx[i] = 0.5f * cosf((float)i);
    wh[i] = 0.4f * sinf((float)i * 0.7f);
  }
  for (int t = 0; t < steps; t++) {
    CHECK(pdshm_scope_new(rnn, NULL, &scopes[t]));
    step_net(scopes[t], t ? scopes[t - 1] : NULL, t);
  }
  const float *h = pdshm_tensor_data(pdshm_find_local_var(scopes[steps - 1], "h"));
  printf("rnn_steps: %d steps over one StepNet, each in its own local scope\n", steps);
  printf("  h_%d =", steps);
  for (int i = 0; i < HIDDEN; i++) printf(" %+.4f", h[i]);
  printf("\n");
  for (int t = 0; t < steps; t++) CHECK(pdshm_scope_release(scopes[t]));

  /* The stack: a sub-block's variables go to the top, parameters to the bottom. */
  pdshm_scope *block = stack_push(&st);
  pdshm_var *tmp, *param;
  CHECK(pdshm_var_new(block, &tmp));
  CHECK(pdshm_var_get(stack_global(&st), "fc.w", &param));
  CHECK(pdshm_var_set_label(param, "parameter"));
  printf("  in a sub-block: %s is local, fc.w is %s\n", pdshm_var_name(tmp),
         pdshm_find_var(block, "fc.w") ? "visible from the block" : "missing");
  stack_pop(&st);
  int nparams = 0;
  CHECK(pdshm_scope_foreach_var(global, "parameter", count_var, &nparams));
  printf("  after the block: %d parameter(s) in the global scope\n", nparams);
  CHECK(pdshm_scope_release(rnn));
  CHECK(pdshm_scope_release(global));
}

int main(int argc, char **argv) {
  const char *name = "rnn_steps";
  int steps = 16;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (argv[i][0] != '-') name = argv[i];
    else {
      fprintf(stderr, "usage: rnn_steps [--steps T] [SEGMENT]\n");
      return 2;
    }
  }
  if (steps < 1 || steps > MAX_STEPS) {
    fprintf(stderr, "rnn_steps: --steps must be in [1, %d]\n", MAX_STEPS);
    return 2;
  }
  pdshm_seg *seg;
  pdshm_unlink(name);
  CHECK(pdshm_create(name, NULL, &seg));
  run(seg, steps);
  CHECK(pdshm_detach(seg));
  pdshm_unlink(name);
  return 0;
}
