/*
 * models.c - the reference models built in code (models.h): the MNIST MLP,
 * a linear regression, and the CIFAR-10 / MNIST CNN of the PyTorch
 * tutorials, with their training specs.
 */
#include "models/models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph/builder.h"
#include "graph/ops.h"
#include "graph/rng.h"

gcc_status gcc_model_mnist_mlp(uint64_t seed, gcc_graph **out, gcc_diag *d) {
  gcc_builder *b = gcc_builder_new("mnist_mlp", seed);
  if (!b)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  int64_t img_dims[4] = {GCC_BATCH_DIM, 1, 28, 28}, lbl_dims[1] = {GCC_BATCH_DIM};
  int image = gcc_build_input(b, "image", GCC_DT_FLOAT32, 4, img_dims);
  int label = gcc_build_input(b, "label", GCC_DT_INT64, 1, lbl_dims);
  int x = gcc_build_flatten(b, "flatten", image, 1);
  static const int64_t widths[] = {784, 512, 256, 128, 64, 10};
  for (int i = 0; i < 5; i++) {
    char name[16], act[16];
    snprintf(name, sizeof name, "fc%d", i + 1);
    x = gcc_build_linear(b, name, x, widths[i], widths[i + 1]);
    if (i < 4) {
      snprintf(act, sizeof act, "relu%d", i + 1);
      x = gcc_build_relu(b, act, x);
    }
  }
  int logits = x;
  int loss = gcc_build_cross_entropy(b, "loss", logits, label, -1);
  gcc_build_output(b, loss);
  gcc_build_output(b, logits);
  gcc_build_training_spec t = {0};
  t.loss = "loss";
  t.prediction = "fc5.out";
  t.input = "image";
  t.target = "label";
  t.dataset = "mnist";
  t.opt.kind = GCC_OPT_SGD;
  t.opt.lr = 0.1f;
  t.opt.momentum = 0.5f;
  t.batch_size = 64;
  t.epochs = 5;
  t.n_norm = 1;
  t.mean[0] = 0.1307f;
  t.std[0] = 0.3081f;
  t.seed = seed;
  gcc_build_training(b, &t);
  return gcc_builder_finish(b, out, d);
}

gcc_status gcc_model_linear(uint64_t seed, gcc_graph **out, gcc_diag *d) {
  enum { N = 256 };
  gcc_builder *b = gcc_builder_new("linear", seed);
  if (!b)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  int64_t xd[2] = {GCC_BATCH_DIM, 3}, yd[2] = {GCC_BATCH_DIM, 1};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "y", GCC_DT_FLOAT32, 2, yd);
  int pred = gcc_build_linear(b, "fc", x, 3, 1);
  int loss = gcc_build_mse(b, "loss", pred, y);
  gcc_build_output(b, loss);
  gcc_build_output(b, pred);
  /* the data: its own stream of the same seed */
  static float xs[N * 3], ys[N];
  gcc_rng r;
  gcc_rng_seed(&r, seed, 0xda7au);
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < 3; k++)
      xs[i * 3 + k] = 2.0f * gcc_rng_uniform(&r) - 1.0f;
    /* Box-Muller: one standard normal from two uniforms */
    float u1 = gcc_rng_uniform(&r), u2 = gcc_rng_uniform(&r);
    float noise = sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.2831853f * u2);
    ys[i] = 2.0f * xs[i * 3] - 3.0f * xs[i * 3 + 1] + 0.5f * xs[i * 3 + 2] + 1.0f + 0.01f * noise;
  }
  gcc_build_training_spec t = {0};
  t.loss = "loss";
  t.prediction = "fc.out";
  t.input = "x";
  t.target = "y";
  t.dataset = "inline";
  t.opt.kind = GCC_OPT_SGD;
  t.opt.lr = 0.1f;
  t.batch_size = 16;
  t.epochs = 20;
  t.seed = seed;
  t.inline_inputs = xs;
  t.inline_inputs_shape = (gcc_shape){2, {N, 3}};
  t.inline_targets = ys;
  t.inline_targets_shape = (gcc_shape){2, {N, 1}};
  gcc_build_training(b, &t);
  return gcc_builder_finish(b, out, d);
}

/* The tutorial CNN on (channels, side, side) images; `flat` = 16 * 4 * 4
 * for 28x28 inputs, 16 * 5 * 5 for 32x32. */
static gcc_status lenet(const char *name, uint64_t seed, int64_t channels, int64_t side,
                        const gcc_build_training_spec *t, gcc_graph **out, gcc_diag *d) {
  gcc_builder *b = gcc_builder_new(name, seed);
  if (!b)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  int64_t img_dims[4] = {GCC_BATCH_DIM, channels, side, side}, lbl_dims[1] = {GCC_BATCH_DIM};
  int image = gcc_build_input(b, "image", GCC_DT_FLOAT32, 4, img_dims);
  int label = gcc_build_input(b, "label", GCC_DT_INT64, 1, lbl_dims);
  int x = gcc_build_conv2d(b, "conv1", image, channels, 6, 5, 1, 0);
  x = gcc_build_relu(b, "relu1", x);
  x = gcc_build_max_pool2d(b, "pool1", x, 2, 2);
  x = gcc_build_conv2d(b, "conv2", x, 6, 16, 5, 1, 0);
  x = gcc_build_relu(b, "relu2", x);
  x = gcc_build_max_pool2d(b, "pool2", x, 2, 2);
  x = gcc_build_flatten(b, "flatten", x, 1);
  int64_t s = ((side - 4) / 2 - 4) / 2;
  x = gcc_build_linear(b, "fc1", x, 16 * s * s, 120);
  x = gcc_build_relu(b, "relu3", x);
  x = gcc_build_linear(b, "fc2", x, 120, 84);
  x = gcc_build_relu(b, "relu4", x);
  int logits = gcc_build_linear(b, "fc3", x, 84, 10);
  int loss = gcc_build_cross_entropy(b, "loss", logits, label, -1);
  gcc_build_output(b, loss);
  gcc_build_output(b, logits);
  gcc_build_training(b, t);
  return gcc_builder_finish(b, out, d);
}

gcc_status gcc_model_cifar_cnn(uint64_t seed, gcc_graph **out, gcc_diag *d) {
  gcc_build_training_spec t = {0};
  t.loss = "loss";
  t.prediction = "fc3.out";
  t.input = "image";
  t.target = "label";
  t.dataset = "cifar10";
  t.opt.kind = GCC_OPT_SGD;
  t.opt.lr = 0.001f;
  t.opt.momentum = 0.9f;
  t.batch_size = 4;
  t.epochs = 2;
  t.n_norm = 3;
  for (int c = 0; c < 3; c++) {
    t.mean[c] = 0.5f;
    t.std[c] = 0.5f;
  }
  t.seed = seed;
  return lenet("cifar_cnn", seed, 3, 32, &t, out, d);
}

gcc_status gcc_model_mnist_cnn(uint64_t seed, gcc_graph **out, gcc_diag *d) {
  gcc_build_training_spec t = {0};
  t.loss = "loss";
  t.prediction = "fc3.out";
  t.input = "image";
  t.target = "label";
  t.dataset = "mnist";
  t.opt.kind = GCC_OPT_SGD;
  t.opt.lr = 0.02f;
  t.opt.momentum = 0.9f;
  t.batch_size = 64;
  t.epochs = 4;
  t.n_norm = 1;
  t.mean[0] = 0.1307f;
  t.std[0] = 0.3081f;
  t.seed = seed;
  return lenet("mnist_cnn", seed, 1, 28, &t, out, d);
}

gcc_status gcc_model_relu_chain(int64_t n_relu, uint64_t seed, gcc_graph **out, gcc_diag *d) {
  if (n_relu < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "relu chain: %lld ReLU nodes (at least 1)",
                        (long long)n_relu);
  gcc_builder *b = gcc_builder_new("relu_chain", seed);
  if (!b)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  int64_t dims[2] = {GCC_BATCH_DIM, 16};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, dims);
  int y = gcc_build_input(b, "y", GCC_DT_FLOAT32, 2, dims);
  int h = gcc_build_linear(b, "fc", x, 16, 16);
  char name[32];
  for (int64_t i = 0; i < n_relu; i++) {
    snprintf(name, sizeof name, "relu%lld", (long long)i);
    h = gcc_build_relu(b, name, h);
  }
  int loss = gcc_build_mse(b, "loss", h, y);
  gcc_build_output(b, loss);
  gcc_build_output(b, h);
  char pred[40] = "";
  if (h >= 0)
    snprintf(pred, sizeof pred, "%s", b->g->values[h].name);
  gcc_build_training_spec t = {0};
  t.loss = "loss";
  t.prediction = pred;
  t.input = "x";
  t.target = "y";
  t.opt.kind = GCC_OPT_SGD;
  t.opt.lr = 0.01f;
  t.batch_size = 8;
  t.epochs = 1;
  t.seed = seed;
  gcc_build_training(b, &t);
  return gcc_builder_finish(b, out, d);
}

static void bigram_spec(gcc_builder *b, const char *input, uint64_t seed);

gcc_status gcc_model_char_bigram_onehot_sized(int64_t vocab, int64_t block, uint64_t seed,
                                              gcc_graph **out, gcc_diag *d) {
  gcc_builder *b = gcc_builder_new("char_bigram", seed);
  const int64_t xd[3] = {GCC_BATCH_DIM, block, vocab}, yd[2] = {GCC_BATCH_DIM, block};
  const int64_t lshape[2] = {-1, vocab}, tshape[1] = {-1}, sshape[3] = {-1, block, vocab};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 3, xd);
  int y = gcc_build_input(b, "targets", GCC_DT_INT64, 2, yd);
  int rows = gcc_build_op(b, GCC_OP_RESHAPE, "x_flat", "x_flat", &x, 1);
  gcc_build_set_ints(b, rows, "shape", lshape, 2);
  int fc = gcc_build_linear(b, "bigram", rows, vocab, vocab);
  int logits = gcc_build_op(b, GCC_OP_RESHAPE, "logits", "logits", &fc, 1);
  gcc_build_set_ints(b, logits, "shape", sshape, 3);
  int flat = gcc_build_op(b, GCC_OP_RESHAPE, "logits_flat", "logits_flat", &logits, 1);
  gcc_build_set_ints(b, flat, "shape", lshape, 2);
  int yflat = gcc_build_op(b, GCC_OP_RESHAPE, "target_flat", "target_flat", &y, 1);
  gcc_build_set_ints(b, yflat, "shape", tshape, 1);
  int loss = gcc_build_cross_entropy(b, "loss", flat, yflat, -1);
  gcc_build_output(b, loss);
  gcc_build_output(b, logits);
  bigram_spec(b, "x", seed);
  return gcc_builder_finish(b, out, d);
}

/* The spec both bigram models train with. */
static void bigram_spec(gcc_builder *b, const char *input, uint64_t seed) {
  gcc_build_training_spec t = {0};
  t.loss = "loss";
  t.prediction = "logits";
  t.input = input;
  t.target = "targets";
  t.dataset = "text";
  t.opt.kind = GCC_OPT_ADAM;
  t.opt.decoupled = 1;
  t.opt.lr = 1e-2f;
  t.opt.beta1 = 0.9f;
  t.opt.beta2 = 0.999f;
  t.opt.eps = 1e-8f;
  t.batch_size = 32;
  t.epochs = 1;
  t.seed = seed;
  gcc_build_training(b, &t);
}

gcc_status gcc_model_char_bigram_sized(int64_t vocab, int64_t block, uint64_t seed, gcc_graph **out,
                                       gcc_diag *d) {
  const int64_t xd[2] = {GCC_BATCH_DIM, block}, wd[2] = {vocab, vocab};
  const int64_t lshape[2] = {-1, vocab}, tshape[1] = {-1};
  /* nn.Embedding's N(0, 1), by Box-Muller from the model's own generator */
  float *w = malloc((size_t)(vocab * vocab) * sizeof *w);
  if (!w)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (char_bigram)");
  gcc_rng rng;
  gcc_rng_seed(&rng, seed, 1);
  for (int64_t i = 0; i < vocab * vocab; i += 2) {
    double u1 = ((double)gcc_rng_u32(&rng) + 1.0) / 4294967297.0, u2 = gcc_rng_uniform(&rng);
    double r = sqrt(-2.0 * log(u1));
    w[i] = (float)(r * cos(2.0 * M_PI * u2));
    if (i + 1 < vocab * vocab)
      w[i + 1] = (float)(r * sin(2.0 * M_PI * u2));
  }
  gcc_builder *b = gcc_builder_new("char_bigram", seed);
  int idx = gcc_build_input(b, "idx", GCC_DT_INT64, 2, xd);
  int y = gcc_build_input(b, "targets", GCC_DT_INT64, 2, xd);
  int table = gcc_build_param(b, "wte.weight", 2, wd, w);
  free(w);
  int ins[2] = {table, idx};
  int logits = gcc_build_op(b, GCC_OP_GATHER, "wte", "logits", ins, 2);
  int flat = gcc_build_op(b, GCC_OP_RESHAPE, "logits_flat", "logits_flat", &logits, 1);
  gcc_build_set_ints(b, flat, "shape", lshape, 2);
  int yflat = gcc_build_op(b, GCC_OP_RESHAPE, "target_flat", "target_flat", &y, 1);
  gcc_build_set_ints(b, yflat, "shape", tshape, 1);
  int loss = gcc_build_cross_entropy(b, "loss", flat, yflat, -1);
  gcc_build_output(b, loss);
  gcc_build_output(b, logits);
  bigram_spec(b, "idx", seed);
  return gcc_builder_finish(b, out, d);
}

gcc_status gcc_model_char_bigram(uint64_t seed, gcc_graph **out, gcc_diag *d) {
  return gcc_model_char_bigram_sized(84, 64, seed, out, d);
}
