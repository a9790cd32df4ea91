/*
 * make_models - writes the reference models:
 *   make_models OUTDIR [NAME...] -> OUTDIR/mnist_mlp.pb, OUTDIR/linear.pb,
 *                                OUTDIR/cifar_cnn.pb, OUTDIR/mnist_cnn.pb,
 *                                OUTDIR/char_bigram.pb, OUTDIR/char_gpt.pb
 *                                (only the NAMEs given, if any)
 *   make_models --char-gpt N_LAYER,N_HEAD,N_EMBD,BLOCK,DROPOUT[,VOCAB] FILE
 *                             -> FILE: nanoGPT's GPT of those sizes
 *                                (gcc_model_char_gpt_sized, vocabulary VOCAB,
 *                                default 84, seed GCC_CHAR_GPT_SEED;
 *                                gcc_char_gpt_sizes_parse), e.g. 4,4,128,64,0
 *                                for bench/gpt_cpu_bench.sh,
 *                                12,12,768,1024,0,50257 for GPT-2 124M's shape
 * The files are deterministic (fixed seeds, own RNG), so the committed model
 * files can be checked against a fresh run (tests/models_test). char_gpt.pb
 * (10.8M parameters, 43 MB) is not committed: `make_models models char_gpt`
 * writes it (the README's GPT section).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct model_entry {
  const char *name;
  gcc_status (*build)(uint64_t, gcc_graph **, gcc_diag *);
  uint64_t seed;
} model_entry;

/* --char-gpt L,H,C,T,DROPOUT[,VOCAB] FILE */
static int write_char_gpt(const char *sizes, const char *path) {
  gcc_diag d = {0};
  gcc_char_gpt_sizes z;
  if (gcc_char_gpt_sizes_parse(sizes, &z, &d) != GCC_OK) {
    fprintf(stderr, "make_models: --char-gpt: %s\n", d.msg);
    return 2;
  }
  gcc_graph *g;
  if (gcc_model_char_gpt_sized(z.vocab, z.block, z.n_layer, z.n_head, z.n_embd, z.dropout,
                               GCC_CHAR_GPT_SEED, &g, &d) != GCC_OK ||
      gcc_model_save(g, path, &d) != GCC_OK) {
    fprintf(stderr, "make_models: --char-gpt %s: %s\n", sizes, d.msg);
    return 1;
  }
  gcc_graph_free(g);
  printf("wrote %s\n", path);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "--char-gpt")) {
    if (argc != 4) {
      fprintf(stderr,
              "usage: make_models --char-gpt N_LAYER,N_HEAD,N_EMBD,BLOCK,DROPOUT[,VOCAB] FILE\n");
      return 2;
    }
    return write_char_gpt(argv[2], argv[3]);
  }
  static const model_entry models[] = {
      {"mnist_mlp", gcc_model_mnist_mlp, GCC_MNIST_MLP_SEED},
      {"linear", gcc_model_linear, GCC_LINEAR_SEED},
      {"cifar_cnn", gcc_model_cifar_cnn, GCC_CIFAR_CNN_SEED},
      {"mnist_cnn", gcc_model_mnist_cnn, GCC_MNIST_CNN_SEED},
      {"char_bigram", gcc_model_char_bigram, GCC_CHAR_BIGRAM_SEED},
      {"char_gpt", gcc_model_char_gpt, GCC_CHAR_GPT_SEED},
  };
  const int n = (int)(sizeof models / sizeof models[0]);
  if (argc < 2) {
    fprintf(stderr,
            "usage: make_models OUTDIR [NAME...]\n"
            "       make_models --char-gpt N_LAYER,N_HEAD,N_EMBD,BLOCK,DROPOUT[,VOCAB] FILE\n");
    return 2;
  }
  for (int a = 2; a < argc; a++) {
    int known = 0;
    for (int i = 0; i < n; i++)
      known |= strcmp(argv[a], models[i].name) == 0;
    if (!known) {
      fprintf(stderr, "make_models: no model '%s' (models:", argv[a]);
      for (int i = 0; i < n; i++)
        fprintf(stderr, " %s", models[i].name);
      fprintf(stderr, ")\n");
      return 2;
    }
  }
  int rc = 0;
  for (int i = 0; i < n; i++) {
    int wanted = argc == 2;
    for (int a = 2; a < argc; a++)
      wanted |= strcmp(argv[a], models[i].name) == 0;
    if (wanted)
      rc |= write_model(argv[1], models[i].name, models[i].build, models[i].seed);
  }
  return rc;
}
