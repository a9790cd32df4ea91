/*
 * models.h - the reference models of the PyTorch GPU tutorials, built with
 * graph/builder.h. models/make_models writes them to the models/ .pb files; tests
 * build them directly.
 */
#ifndef GCC_MODELS_MODELS_H
#define GCC_MODELS_MODELS_H

#include <stdint.h>

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Seeds the committed models/...pb files files were written with. */
#define GCC_MNIST_MLP_SEED   20261122u
#define GCC_LINEAR_SEED      3u
#define GCC_CIFAR_CNN_SEED   20261123u
#define GCC_MNIST_CNN_SEED   20261124u
#define GCC_CHAR_BIGRAM_SEED 20261128u
#define GCC_CHAR_GPT_SEED    1337u

/* The character-level bigram language model of Karpathy's "Let's build
 * GPT" (BigramLanguageModel): idx int64 (B, T) -> logits =
 * token_embedding_table(idx) (B, T, V), the table nn.Embedding(V, V)
 * ("wte.weight", N(0, 1) as PyTorch initialises it; a Gather); loss =
 * cross-entropy of the logits reshaped to (B*T, V) against the targets
 * (B, T) reshaped to (B*T), the mean over the B*T tokens
 * (F.cross_entropy(logits.view(-1, V), targets.view(-1))). Spec: dataset
 * text, AdamW lr 1e-2 (weight decay 0), batch 32, 1 epoch. models/
 * char_bigram.pb is (V, T) = (84, 64): the Shakespeare corpus's bytes. */
gcc_status gcc_model_char_bigram_sized(int64_t vocab, int64_t block, uint64_t seed, gcc_graph **out,
                                       gcc_diag *d);
gcc_status gcc_model_char_bigram(uint64_t seed, gcc_graph **out, gcc_diag *d);

/* The same model without an embedding op: x float32 one-hot rows
 * (B, T, V) -> nn.Linear(V, V) ("bigram.weight", "bigram.bias") over the
 * B*T rows -> logits (B, T, V), the same loss and spec. */
gcc_status gcc_model_char_bigram_onehot_sized(int64_t vocab, int64_t block, uint64_t seed,
                                              gcc_graph **out, gcc_diag *d);

/* nanoGPT's GPT (model.py) for characters, as models/char_gpt.c builds it:
 * idx (B, T) int64 -> wte Gather (V, C) + wpe Gather of the constant
 * positions 0..T-1 (T, C) -> Dropout -> n_layer pre-LN blocks
 * "transformer.h.<l>": x + attn(ln_1(x)), x + mlp(ln_2(x)) -> ln_f ->
 * lm_head = x wte^T (weight tying: the one "transformer.wte.weight" read by
 * the Gather and by the lm_head Gemm; its gradient is the sum of both) ->
 * logits (B, T, V); loss = cross-entropy of (B*T, V) against targets (B, T)
 * reshaped to (B*T), the mean over the tokens. The residual stream is kept
 * as rows (B*T, C), so every nn.Linear is one Gemm with PyTorch's (out, in)
 * weight (transB) and zero bias. attn: c_attn one (3C, C) Linear whose
 * output is split into q, k, v by three Slices (columns [0, C), [C, 2C),
 * [2C, 3C), nanoGPT's qkv.split), each reshaped to (B, T, H, C/H) and
 * transposed to (B, H, T, C/H); one fused causal Attention op (SDPA, scale
 * 1/sqrt(C/H)); back to rows; c_proj; resid_dropout. mlp: c_fc (4C, C),
 * Gelu (approximate "none", nn.GELU()), c_proj (C, 4C), dropout. Dropout
 * (ratio `dropout`, omitted when 0) where nanoGPT has transformer.drop,
 * resid_dropout and mlp.dropout, and nanoGPT's attn_dropout as the
 * Attention op's dropout_p (on the probabilities, ops.h).
 * LayerNorms: weight 1, bias 0, eps 1e-5. Init as nanoGPT's _init_weights:
 * every Linear and Embedding weight N(0, 0.02) (the tied wte once), both
 * c_proj weights N(0, 0.02 / sqrt(2 n_layer)), biases 0; the normals by
 * Box-Muller from the model's generator (`seed`), not torch's. Unlike
 * nanoGPT's train.py (bias = False) the Linears and LayerNorms have biases
 * (GPTConfig's default bias = True). Spec (config/train_shakespeare_char.py):
 * dataset text, AdamW lr 1e-3 betas (0.9, 0.99) eps 1e-8, weight decay 0.1
 * on the matrices only, gradient clipping 1.0, batch 64.
 * models/char_gpt.pb is (V, T, n_layer, n_head, C, dropout) = (84, 256, 6,
 * 6, 384, 0.2), seed GCC_CHAR_GPT_SEED. Errors: GCC_ERR_INVALID_ARGUMENT
 * (a size < 1, n_embd not a multiple of n_head, dropout outside [0, 1)),
 * GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_model_char_gpt_sized(int64_t vocab, int64_t block, int64_t n_layer, int64_t n_head,
                                    int64_t n_embd, float dropout, uint64_t seed, gcc_graph **out,
                                    gcc_diag *d);
gcc_status gcc_model_char_gpt(uint64_t seed, gcc_graph **out, gcc_diag *d);

/* The sizes of `make_models --char-gpt`: "N_LAYER,N_HEAD,N_EMBD,BLOCK,DROPOUT"
 * with an optional sixth field ",VOCAB" (default 84, models/char_gpt.pb's
 * vocabulary; 50257 makes GPT-2's token vocabulary for --dataset tokens).
 * Integers in base 10, DROPOUT a float; only the syntax is checked here
 * (gcc_model_char_gpt_sized checks the values). Errors:
 * GCC_ERR_INVALID_ARGUMENT (a NULL argument, a field missing, not a number,
 * or trailing text), the message quoting `text`. */
typedef struct gcc_char_gpt_sizes {
  int64_t n_layer, n_head, n_embd, block, vocab;
  float dropout;
} gcc_char_gpt_sizes;
gcc_status gcc_char_gpt_sizes_parse(const char *text, gcc_char_gpt_sizes *out, gcc_diag *d);

/* The MNIST MLP of the tutorial: image (N, 1, 28, 28) float32 -> Flatten
 * -> Linear 784-512 -> ReLU -> 512-256 -> ReLU -> 256-128 -> ReLU -> 128-64
 * -> ReLU -> 64-10 = logits (N, 10); loss = CrossEntropyLoss(logits, label)
 * with label (N) int64. Parameters fc1..fc5 ".weight" (out, in) and ".bias",
 * nn.Linear initialisation from `seed`. Training: SGD lr 0.1 momentum 0.5,
 * batch 64, 5 epochs, MNIST normalised with mean 0.1307 std 0.3081,
 * shuffle seed `seed`. */
gcc_status gcc_model_mnist_mlp(uint64_t seed, gcc_graph **out, gcc_diag *d);

/* nn.Linear(3, 1) regression: x (N, 3) -> pred (N, 1); loss = MSELoss(pred,
 * y). Data carried in the model: 256 samples x ~ U(-1, 1)^3,
 * y = 2 x0 - 3 x1 + 0.5 x2 + 1 + 0.01 * noise (noise ~ N(0, 1)). Training:
 * SGD lr 0.1, batch 16, 20 epochs. */
gcc_status gcc_model_linear(uint64_t seed, gcc_graph **out, gcc_diag *d);

/* The CNN of PyTorch's CIFAR-10 tutorial ("Training a classifier"):
 * image (N, 3, 32, 32) -> conv1 Conv2d(3, 6, 5) -> ReLU -> MaxPool2d(2, 2)
 * -> conv2 Conv2d(6, 16, 5) -> ReLU -> MaxPool2d(2, 2) -> Flatten (400)
 * -> fc1 400-120 -> ReLU -> fc2 120-84 -> ReLU -> fc3 84-10 = logits;
 * loss = CrossEntropyLoss(logits, label). PyTorch initialisation from
 * `seed`. Training: SGD lr 0.001 momentum 0.9, batch 4, 2 epochs, dataset
 * "cifar10" normalised per channel with mean 0.5 and std 0.5. */
gcc_status gcc_model_cifar_cnn(uint64_t seed, gcc_graph **out, gcc_diag *d);

/* The same network for MNIST: image (N, 1, 28, 28) -> conv1 Conv2d(1, 6, 5)
 * -> ReLU -> pool -> conv2 Conv2d(6, 16, 5) -> ReLU -> pool -> Flatten (256)
 * -> fc1 256-120 -> ReLU -> fc2 120-84 -> ReLU -> fc3 84-10. Training
 * recipe (measured in the README): SGD lr 0.02 momentum 0.9, batch 64,
 * 4 epochs, MNIST normalised with mean 0.1307 std 0.3081. */
gcc_status gcc_model_mnist_cnn(uint64_t seed, gcc_graph **out, gcc_diag *d);

/* A deep chain for compile-time scaling (bench/compile_bench, the planner's
 * tests; no .pb file): x (N, 16) -> fc Linear 16-16 -> `n_relu` ReLU nodes
 * "relu<i>" (n_relu >= 1) -> pred (N, 16); loss = MSELoss(pred, y) with
 * y (N, 16). Training: SGD lr 0.01, batch 8. Errors: GCC_ERR_INVALID_ARGUMENT
 * for n_relu < 1; GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_model_relu_chain(int64_t n_relu, uint64_t seed, gcc_graph **out, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_MODELS_MODELS_H */
