/*
 * make_models - writes the reference models:
 *   make_models OUTDIR        -> OUTDIR/mnist_mlp.pb, OUTDIR/linear.pb,
 *                                OUTDIR/cifar_cnn.pb, OUTDIR/mnist_cnn.pb,
 *                                OUTDIR/char_bigram.pb, OUTDIR/char_gpt.pb
 * The files are deterministic (fixed seeds, own RNG), so the committed model
 * files can be checked against a fresh run (tests/models_test).
 */
#include <stdio.h>

#include "graph/loader.h"
#include "models/models.h"

static int write_model(const char *dir, const char *name,
                       gcc_status (*build)(uint64_t, gcc_graph **, gcc_diag *), uint64_t seed) {
  gcc_diag d = {0};
  gcc_graph *g;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.pb", dir, name);
  if (build(seed, &g, &d) != GCC_OK || gcc_model_save(g, path, &d) != GCC_OK) {
    fprintf(stderr, "make_models: %s: %s\n", name, d.msg);
    return 1;
  }
  gcc_graph_free(g);
  printf("wrote %s\n", path);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_models OUTDIR\n");
    return 2;
  }
  int rc = write_model(argv[1], "mnist_mlp", gcc_model_mnist_mlp, GCC_MNIST_MLP_SEED);
  rc |= write_model(argv[1], "linear", gcc_model_linear, GCC_LINEAR_SEED);
  rc |= write_model(argv[1], "cifar_cnn", gcc_model_cifar_cnn, GCC_CIFAR_CNN_SEED);
  rc |= write_model(argv[1], "mnist_cnn", gcc_model_mnist_cnn, GCC_MNIST_CNN_SEED);
  rc |= write_model(argv[1], "char_bigram", gcc_model_char_bigram, GCC_CHAR_BIGRAM_SEED);
  rc |= write_model(argv[1], "char_gpt", gcc_model_char_gpt, GCC_CHAR_GPT_SEED);
  return rc;
}
