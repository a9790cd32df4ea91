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
#define GCC_MNIST_MLP_SEED 20261122u
#define GCC_LINEAR_SEED 3u

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

#ifdef __cplusplus
}
#endif

#endif /* GCC_MODELS_MODELS_H */
