/*
 * emit_kernels.h - the kernel emitters of LOSS and OPTIMIZER groups
 * (codegen/emit.c), named by the lowering table (codegen/lowering.c).
 * Internal to codegen.
 */
#ifndef GCC_CODEGEN_EMIT_KERNELS_H
#define GCC_CODEGEN_EMIT_KERNELS_H

#include "codegen/lowering.h"

/* SoftmaxCrossEntropy and its gradient, MeanSquaredError and its gradient
 * (`fwd` / `grad`: the group's loss and gradient nodes, -1 when absent). */
gcc_status gcc_emit_sce(struct gcc_emitter *e, int group, int fwd, int grad);
gcc_status gcc_emit_mse(struct gcc_emitter *e, int group, int fwd, int grad);
/* torch.optim.SGD and torch.optim.Adam over the flat sections. */
gcc_status gcc_emit_sgd(struct gcc_emitter *e, int group, int fwd, int grad);
gcc_status gcc_emit_adam(struct gcc_emitter *e, int group, int fwd, int grad);

#endif /* GCC_CODEGEN_EMIT_KERNELS_H */
