/*
 * arena_table - the step arena the memory planner gives each model, for the
 * planner's before/after table in bench/RESULTS.md. For every model file
 * (either format, onnx/model_file.h), compiled for the CPU:
 *
 *   file mode=eval|train batch=B arena_bytes=A total_bytes=T nodes=N
 *
 * eval is GCC_MODE_EVAL; train is GCC_MODE_TRAIN with the model's training
 * spec, or for a model without one (the ONNX models) an MSELoss against a
 * target input shaped like its first output (SGD lr 0.01), to plan a
 * backward pass over the whole network. A model the compiler refuses in a
 * mode gets "refused: MESSAGE" in place of the figures. arena_bytes is the
 * peak of the CPU's step arena, total_bytes the planned bytes without reuse.
 *
 *   bazel run //bench:arena_table -- [--batch B] FILE...
 *   (B: the spec's batch size, else 1)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "graph/util.h"
#include "onnx/model_file.h"
#include "runtime/compile.h"

/* Gives a model without a training spec MSELoss(output 0, target). */
static gcc_status add_mse(gcc_graph *g, const gcc_options *eval, gcc_diag *d) {
  if (g->n_outputs < 1 || g->n_inputs < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "no input or output to train");
  int out = g->outputs[0], tgt, loss, node;
  /* the output's shape, from shape inference on a copy */
  gcc_graph *c;
  GCC_TRY(gcc_graph_clone(g, &c, d));
  gcc_status s = gcc_pass_infer(c, eval, d);
  int co = gcc_graph_find(c, g->values[out].name);
  gcc_shape shape = co >= 0 ? c->values[co].shape : (gcc_shape){0, {0}};
  gcc_graph_free(c);
  GCC_TRY(s);
  if (shape.ndim > 0)
    shape.dims[0] = GCC_BATCH_DIM;
  GCC_TRY(gcc_graph_add_value(g, "arena_table.target", GCC_DT_FLOAT32, &shape, GCC_VALUE_INPUT,
                              NULL, 0, &tgt, d));
  if (gcc_graph_add_input(g, tgt) != GCC_OK)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  gcc_shape scalar = {0, {0}};
  GCC_TRY(gcc_graph_add_value(g, "arena_table.loss", GCC_DT_FLOAT32, &scalar, GCC_VALUE_ACTIVATION,
                              NULL, 0, &loss, d));
  int ins[2] = {out, tgt};
  GCC_TRY(gcc_graph_add_node(g, "arena_table.loss", GCC_OP_MEAN_SQUARED_ERROR, ins, 2, &loss, 1,
                             &node, d));
  if (gcc_graph_add_output(g, loss) != GCC_OK)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  gcc_training *t = &g->training;
  t->present = 1;
  t->loss = gcc_strdup("arena_table.loss");
  t->prediction = gcc_strdup(g->values[out].name);
  t->input = gcc_strdup(g->values[g->inputs[0]].name);
  t->target = gcc_strdup("arena_table.target");
  t->opt.kind = GCC_OPT_SGD;
  t->opt.lr = 0.01f;
  t->batch_size = 1;
  t->epochs = 1;
  t->inline_inputs = t->inline_targets = -1;
  if (!t->loss || !t->prediction || !t->input || !t->target)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  return gcc_graph_link(g, d);
}

int main(int argc, char **argv) {
  int64_t batch = 0;
  int first = 1;
  if (argc > 2 && strcmp(argv[1], "--batch") == 0) {
    if (!gcc_parse_i64(argv[2], 1, 1 << 20, &batch)) {
      fprintf(stderr, "arena_table: --batch %s: expected 1..1048576\n", argv[2]);
      return 2;
    }
    first = 3;
  }
  if (first >= argc) {
    fprintf(stderr, "usage: arena_table [--batch B] FILE...\n");
    return 2;
  }
  FILE *devnull = fopen("/dev/null", "w");
  int rc = 0;
  for (int i = first; i < argc; i++) {
    gcc_graph *model;
    gcc_diag d = {0};
    if (gcc_model_open(argv[i], &model, NULL, &d) != GCC_OK) {
      fprintf(stderr, "arena_table: %s\n", d.msg);
      rc = 1;
      continue;
    }
    for (int m = 0; m < 2; m++) {
      gcc_mode mode = m ? GCC_MODE_TRAIN : GCC_MODE_EVAL;
      gcc_status s = GCC_OK;
      int64_t b = batch ? batch : (model->training.present ? model->training.batch_size : 1);
      gcc_options o = {0};
      o.mode = GCC_MODE_EVAL;
      o.batch_size = b;
      o.device = GCC_DEV_CPU;
      o.warn_file = devnull;
      o.target = gcc_default_target();
      if (mode == GCC_MODE_TRAIN && !model->training.present)
        s = add_mse(model, &o, &d);
      o.target = NULL;
      o.mode = mode;
      o.batch_size = b;
      o.opt = model->training.opt;
      o.device = GCC_DEV_CPU;
      o.warn_file = devnull;
      gcc_graph *g = NULL;
      gcc_mem_plan mem = {0};
      if (s == GCC_OK)
        s = gcc_compile_graph(model, &o, &g, &mem, &d);
      printf("%s mode=%s batch=%lld ", argv[i], m ? "train" : "eval", (long long)b);
      if (s == GCC_OK)
        printf("arena_bytes=%zu total_bytes=%zu nodes=%d\n", mem.arena_bytes, mem.total_bytes,
               g->n_nodes);
      else
        printf("refused: %s\n", d.msg);
      gcc_mem_plan_free(&mem);
      gcc_graph_free(g);
    }
    gcc_graph_free(model);
  }
  if (devnull)
    fclose(devnull);
  return rc;
}
