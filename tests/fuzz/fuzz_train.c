/* libFuzzer harness: load + compile + two training steps. A graph.proto
 * model (gcc_model_parse, graph/loader.h) is compiled for the CPU
 * (runtime/compile.h) for inference and, when it has a training spec, for
 * training; then a session (runtime/session.h) runs two optimizer steps
 * and one evaluation on a small synthetic batch, as gcc-train would on its
 * first batches. Built and run by tools/fuzz.sh.
 *
 * Limits: the loader caps a model's bytes (GCC_MODEL_MAX_BYTES, and
 * libFuzzer's -max_len is far below); what a tiny file can still ask for
 * (activations of 10^9 elements, a Gemm of 10^12 multiply-adds) is refused
 * here before anything is allocated or run, from the compiled plan: a step
 * arena or persistent state over TRAIN_MAX_BYTES, or an estimated cost of
 * the step over TRAIN_MAX_COST. Those are the harness's limits (gcc-train
 * allocates what a valid model asks for), not findings. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "runtime/compile.h"
#include "runtime/session.h"

#define TRAIN_ROWS      3
#define TRAIN_MAX_BYTES ((size_t)64 << 20)
#define TRAIN_MAX_COST  2e8 /* element operations of one step */

static double numel_of(const gcc_graph *g, int v) {
  if (v < 0)
    return 0;
  int of = 0;
  int64_t n = gcc_shape_numel(&g->values[v].shape, &of);
  return of || n < 0 ? 1e30 : (double)n;
}

/* An upper estimate of a compiled step's element operations: every node
 * reads its inputs and writes its outputs; a node with two or more inputs
 * may contract them (Gemm M*N*K = sqrt(|A| |B| |C|)), times the window of
 * a convolution's or pool's kernel. */
static double step_cost(const gcc_graph *g) {
  double cost = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    double io = 0, window = 1;
    for (int k = 0; k < n->n_inputs; k++)
      io += numel_of(g, n->inputs[k]);
    for (int k = 0; k < n->n_outputs; k++)
      io += numel_of(g, n->outputs[k]);
    const gcc_attr *ks = gcc_node_attr(n, "kernel_shape");
    if (ks && ks->type == GCC_ATTR_INTS)
      for (int k = 0; k < ks->n_ints; k++)
        window *= ks->ints[k] > 0 ? (double)ks->ints[k] : 1e9;
    cost += io * window;
    if (n->n_inputs >= 2 && n->n_outputs >= 1)
      cost +=
          sqrt(numel_of(g, n->inputs[0]) * numel_of(g, n->inputs[1]) * numel_of(g, n->outputs[0])) *
          window;
  }
  return cost;
}

/* FUZZ_TRAIN_VERBOSE=1 in the environment: one line per stage on stderr
 * (to see how far a seed gets: `./fuzz_train corpus/x.pb`). */
static void say(const char *stage, gcc_status s, const gcc_diag *d) {
  static int verbose = -1;
  if (verbose < 0)
    verbose = getenv("FUZZ_TRAIN_VERBOSE") != NULL;
  if (verbose)
    fprintf(stderr, "fuzz_train: %s: %s\n", stage, s == GCC_OK ? "ok" : d->msg);
}

/* 1 when the compiled graph for `mode` fits the harness's limits. */
static int fits(const gcc_graph *model, gcc_mode mode) {
  gcc_options o = {0};
  o.mode = mode;
  o.batch_size = TRAIN_ROWS;
  o.opt = model->training.opt;
  o.device = GCC_DEV_CPU;
  static FILE *devnull;
  if (!devnull)
    devnull = fopen("/dev/null", "w");
  o.warn_file = devnull;
  gcc_graph *g = NULL;
  gcc_mem_plan mem = {0};
  gcc_diag d = {0};
  gcc_status st = gcc_compile_graph(model, &o, &g, &mem, &d);
  say(mode == GCC_MODE_TRAIN ? "compile train" : "compile eval", st, &d);
  if (st != GCC_OK)
    return 0; /* refused with a message: that path is covered */
  size_t persistent = 0;
  int ok = 1;
  for (int v = 0; v < g->n_values && ok; v++) {
    gcc_value_kind k = g->values[v].kind;
    if (k == GCC_VALUE_PARAM || k == GCC_VALUE_GRAD || k == GCC_VALUE_OPT_STATE)
      persistent += (size_t)numel_of(g, v) * 4;
    if (persistent > TRAIN_MAX_BYTES)
      ok = 0;
  }
  if (mem.arena_bytes > TRAIN_MAX_BYTES || step_cost(g) > TRAIN_MAX_COST)
    ok = 0;
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
  return ok;
}

/* rows x (the value's shape without dim 0) elements of its dtype, from the
 * fuzz input: floats in [-1, 1], integers (labels) 0, 1, 2 and now and then
 * -1 or 99 (out of range for the loss to refuse). NULL when
 * the value is missing or too large. */
static void *batch_of(const gcc_graph *g, const char *name, const uint8_t *data, size_t size) {
  int v = name ? gcc_graph_find(g, name) : -1;
  if (v < 0)
    return NULL;
  const gcc_value *x = &g->values[v];
  double per_row = 1;
  for (int i = 1; i < x->shape.ndim; i++)
    per_row *= (double)x->shape.dims[i];
  size_t es = gcc_dtype_size(x->dtype);
  if (es == 0 || per_row * TRAIN_ROWS * (double)es > (double)TRAIN_MAX_BYTES)
    return NULL;
  size_t n = (size_t)per_row * TRAIN_ROWS;
  void *buf = malloc((n ? n : 1) * es);
  if (!buf)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    uint8_t b = size ? data[(i * 31u) % size] : 0;
    if (x->dtype == GCC_DT_FLOAT32)
      ((float *)buf)[i] = (float)b / 127.5f - 1.0f;
    else if (x->dtype == GCC_DT_INT64)
      ((int64_t *)buf)[i] = b == 255 ? -1 : b == 254 ? 99 : (int64_t)(b % 3);
    else if (x->dtype == GCC_DT_INT32)
      ((int32_t *)buf)[i] = b == 255 ? -1 : b == 254 ? 99 : (int32_t)(b % 3);
    else
      memset((char *)buf + i * es, 0, es);
  }
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gcc_graph *model = NULL;
  gcc_diag d = {0};
  gcc_status st = gcc_model_parse(data, size, "fuzz.pb", &model, &d);
  say("load", st, &d);
  if (st != GCC_OK)
    return 0;
  if (!model->training.present) {
    (void)fits(model, GCC_MODE_EVAL); /* inference compile only */
    gcc_graph_free(model);
    return 0;
  }
  if (!fits(model, GCC_MODE_TRAIN) || !fits(model, GCC_MODE_EVAL)) {
    say("compile", GCC_ERR_INVALID_ARGUMENT, &(gcc_diag){.msg = "refused or over the limits"});
    gcc_graph_free(model);
    return 0;
  }
  void *x = batch_of(model, model->training.input, data, size);
  void *y = batch_of(model, model->training.target, data, size);
  gcc_session_options so = {0};
  so.threads = 1;
  so.opt = model->training.opt;
  gcc_session *s = NULL;
  if (x && y && gcc_session_create(model, &so, &s, &d) == GCC_OK) {
    float loss;
    for (int step = 0; step < 2; step++) {
      st = gcc_session_train_step(s, x, y, TRAIN_ROWS, &loss, &d);
      say("train step", st, &d);
      if (st != GCC_OK)
        break;
    }
    int64_t correct;
    const gcc_tensor *pred;
    st = gcc_session_eval_batch(s, x, y, TRAIN_ROWS, &loss, &correct, &pred, &d);
    say("eval", st, &d);
    gcc_session_destroy(s);
  }
  free(x);
  free(y);
  gcc_graph_free(model);
  return 0;
}
