/* Writes the seed corpus of tests/fuzz/fuzz_train.c: tiny models with a
 * training spec (a few hundred bytes each, so that the fuzzer mutates
 * structure rather than weights) covering the ops and optimizers gcc-train
 * trains, and one without a spec (inference only).
 *
 *   bazel run //tests/fuzz:make_train_corpus -- $PWD/tests/fuzz/corpus/train
 */
#include <stdio.h>
#include <string.h>

#include "graph/builder.h"
#include "graph/loader.h"
#include "graph/ops.h"

static int finish(gcc_builder *b, const char *dir, const char *name) {
  gcc_graph *g;
  gcc_diag d = {0};
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.pb", dir, name);
  if (gcc_builder_finish(b, &g, &d) != GCC_OK || gcc_model_save(g, path, &d) != GCC_OK) {
    fprintf(stderr, "make_train_corpus: %s: %s\n", name, d.msg);
    return 1;
  }
  gcc_graph_free(g);
  return 0;
}

static gcc_build_training_spec spec(const char *loss, const char *pred, gcc_opt_kind opt) {
  gcc_build_training_spec t = {0};
  t.loss = loss;
  t.prediction = pred;
  t.input = "x";
  t.target = "y";
  t.opt.kind = opt;
  t.opt.lr = 0.05f;
  t.opt.momentum = opt == GCC_OPT_SGD ? 0.9f : 0.0f;
  t.opt.beta1 = 0.9f;
  t.opt.beta2 = 0.999f;
  t.opt.eps = 1e-8f;
  t.batch_size = 3;
  t.epochs = 1;
  t.seed = 7;
  return t;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_train_corpus DIR\n");
    return 2;
  }
  const char *dir = argv[1];
  int rc = 0;
  int64_t lbl[1] = {GCC_BATCH_DIM};

  { /* MLP, CrossEntropyLoss, SGD with momentum */
    gcc_builder *b = gcc_builder_new("mlp_ce", 1);
    int64_t xd[2] = {GCC_BATCH_DIM, 4};
    int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
    int y = gcc_build_input(b, "y", GCC_DT_INT64, 1, lbl);
    int h = gcc_build_relu(b, "relu", gcc_build_linear(b, "fc1", x, 4, 5));
    int logits = gcc_build_linear(b, "fc2", h, 5, 3);
    int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
    gcc_build_output(b, loss);
    gcc_build_output(b, logits);
    gcc_build_training_spec t = spec("loss", "fc2.out", GCC_OPT_SGD);
    gcc_build_training(b, &t);
    rc |= finish(b, dir, "mlp_ce");
  }
  { /* CNN: Conv, MaxPool, Flatten, CrossEntropyLoss, Adam */
    gcc_builder *b = gcc_builder_new("cnn", 2);
    int64_t xd[4] = {GCC_BATCH_DIM, 1, 6, 6};
    int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 4, xd);
    int y = gcc_build_input(b, "y", GCC_DT_INT64, 1, lbl);
    int c = gcc_build_relu(b, "relu", gcc_build_conv2d(b, "conv", x, 1, 2, 3, 1, 0));
    int p = gcc_build_max_pool2d(b, "pool", c, 2, 2);
    int f = gcc_build_flatten(b, "flat", p, 1);
    int logits = gcc_build_linear(b, "fc", f, 8, 3);
    int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
    gcc_build_output(b, loss);
    gcc_build_output(b, logits);
    gcc_build_training_spec t = spec("loss", "fc.out", GCC_OPT_ADAM);
    gcc_build_training(b, &t);
    rc |= finish(b, dir, "cnn_adam");
  }
  { /* regression: ReLU and Identity + Softmax branches, Add, MSELoss, plain SGD */
    gcc_builder *b = gcc_builder_new("mse", 3);
    int64_t xd[2] = {GCC_BATCH_DIM, 3}, yd[2] = {GCC_BATCH_DIM, 2};
    int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
    int y = gcc_build_input(b, "y", GCC_DT_FLOAT32, 2, yd);
    int r = gcc_build_relu(b, "relu", gcc_build_linear(b, "a", x, 3, 2));
    int c = gcc_build_linear(b, "c", x, 3, 2);
    int id = gcc_build_op(b, GCC_OP_IDENTITY, "id", "id.out", &c, 1);
    int sm = gcc_build_op(b, GCC_OP_SOFTMAX, "softmax", "softmax.out", &id, 1);
    int ins[2] = {r, sm};
    int sum = gcc_build_op(b, GCC_OP_ADD, "add", "add.out", ins, 2);
    int loss = gcc_build_mse(b, "loss", sum, y);
    gcc_build_output(b, loss);
    gcc_build_output(b, sum);
    gcc_build_training_spec t = spec("loss", "add.out", GCC_OPT_SGD);
    t.opt.momentum = 0;
    gcc_build_training(b, &t);
    rc |= finish(b, dir, "mse_branches");
  }
  { /* inference only: no training spec */
    gcc_builder *b = gcc_builder_new("infer", 4);
    int64_t xd[2] = {GCC_BATCH_DIM, 3};
    int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
    int fc = gcc_build_linear(b, "fc", x, 3, 4);
    int o = gcc_build_op(b, GCC_OP_SIGMOID, "sigmoid", "sigmoid.out", &fc, 1);
    gcc_build_output(b, o);
    rc |= finish(b, dir, "inference_only");
  }
  return rc;
}
