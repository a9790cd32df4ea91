/*
 * emit_kernels.h - the kernel emitters of LOSS, OPTIMIZER and KERNEL groups
 * (codegen/emit_*.c) and the fit tests of GEMM, LIBRARY and POINTWISE ops, named
 * by the lowering table (codegen/lowering.c).
 * Internal to codegen.
 */
#ifndef GCC_CODEGEN_EMIT_KERNELS_H
#define GCC_CODEGEN_EMIT_KERNELS_H

#include "codegen/lowering.h"

/* SoftmaxCrossEntropy and its gradient (a block per row; with the loss, a
 * second one-block kernel sums the rows' losses from the plan's scratch),
 * MeanSquaredError and its gradient (one block) (`fwd` / `grad`: the group's
 * loss and gradient nodes, -1 when absent). */
gcc_status gcc_emit_sce(struct gcc_emitter *e, int group, int fwd, int grad);
gcc_status gcc_emit_mse(struct gcc_emitter *e, int group, int fwd, int grad);
/* torch.optim.SGD and torch.optim.Adam over the flat sections. */
gcc_status gcc_emit_sgd(struct gcc_emitter *e, int group, int fwd, int grad);
gcc_status gcc_emit_adam(struct gcc_emitter *e, int group, int fwd, int grad);

/* Single-node kernels (GCC_LOWER_KERNEL, and the fallbacks of `fits`),
 * computing what the CPU kernels compute: Softmax and LogSoftmax (a block
 * per line along the axis, float64 sums in a fixed tree), LRN, Concat, Transpose,
 * Pad (constant, edge, reflect), numpy MatMul (batched, broadcast, 1-D
 * operands), MaxPool and AveragePool (and their gradients) with 16-bit
 * operands, dilations or asymmetric pads. */
gcc_status gcc_emit_softmax_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_log_softmax_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_lrn_kernel(struct gcc_emitter *e, int group, int node);
/* LogSoftmaxGrad and SoftmaxGrad (a block per line, the line's sum in
 * float64 over a fixed tree of lanes) and LRNGrad (one thread per element,
 * window sums in float64), as the CPU kernels. */
gcc_status gcc_emit_log_softmax_grad_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_softmax_grad_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_lrn_grad_kernel(struct gcc_emitter *e, int group, int node);
/* BatchNormalization (evaluation or training, updating the running
 * statistics in place) and BatchNormGrad: groups of two or three kernels
 * that reduce over many blocks per channel in float32, deterministically
 * (per-block partials through GCC_KARG_SCRATCH, merged in index order), and
 * one elementwise pass (codegen/emit_batchnorm.c). */
gcc_status gcc_emit_batch_norm_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_batch_norm_grad_kernel(struct gcc_emitter *e, int group, int node);
/* LayerNormalization (Y, and Mean / InvStdDev when the node has them) and
 * LayerNormGrad: a block per row, float32 sums over 256 lanes in a fixed
 * tree; dScale and dB summed over chunks of rows in many blocks, the
 * partials (GCC_KARG_SCRATCH) merged in chunk order (codegen/emit_layernorm.c).
 * Float32 operands only. */
gcc_status gcc_emit_layer_norm_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_layer_norm_grad_kernel(struct gcc_emitter *e, int group, int node);
/* Dropout in training and DropoutGrad: one thread per block of four
 * elements, the Philox mask of graph/philox.h at the step the kernel is
 * given (GCC_KARG_STEP), as the CPU kernels. */
gcc_status gcc_emit_dropout_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_dropout_grad_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_concat_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_transpose_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_pad_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_matmul_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_max_pool_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_average_pool_kernel(struct gcc_emitter *e, int group, int node);
/* MaxPoolGrad and AveragePoolGrad: one thread per element of dX, summing
 * the windows that hold it in the CPU kernels' order (bit for bit). */
gcc_status gcc_emit_max_pool_grad_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_average_pool_grad_kernel(struct gcc_emitter *e, int group, int node);
/* fp16 loss scaling: AmpNonFiniteCheck, a grid over the flat gradient
 * section (GCC_KARG_FLAT_INPUTS) whose last block writes found_inf, and
 * AmpUpdateScale, one thread updating
 * the scale, growth tracker and applied-step count in place, as the CPU
 * kernels (runtime/cpu/cpu_kernels.h). */
gcc_status gcc_emit_amp_non_finite_check_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_grad_norm_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_amp_update_scale_kernel(struct gcc_emitter *e, int group, int node);
/* The fused attention (codegen/emit_attention.c): Attention, one
 * flash-attention kernel (a block per (b, h, query tile), K / V tiles
 * through shared memory, online softmax); AttentionGrad, FlashAttention-2's
 * deterministic backward (D_i, then dK / dV a block per key tile, then dQ
 * a block per query tile). GCC_ERR_UNSUPPORTED for a head dim above 256. */
gcc_status gcc_emit_attention_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_attention_grad_kernel(struct gcc_emitter *e, int group, int node);

/* cuBLASLt runs a MatMul as one matmul when both operands are 2-D. */
/* Gather (one thread per element of Y, any element type; an index out of
 * range lowers the bad-label flag to -1 - its position) and GatherGrad (a
 * block per row of dX scanning the indices in order: deterministic, the
 * CPU kernel's additions bit for bit) (codegen/emit_index.c). */
gcc_status gcc_emit_gather_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_gather_grad_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_gather_elements_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_gather_elements_grad_kernel(struct gcc_emitter *e, int group, int node);
/* NegativeLogLikelihoodLoss (a thread per target for reduction none; per-block
 * float64 partials in the scratch and one block for sum and mean) and its
 * gradient (a thread per element of dInput; mean: the weight sum's partials
 * first, added in a fixed tree by every block): deterministic; a target out
 * of range lowers the bad-label flag to -1 - its position
 * (codegen/emit_nll.c). */
gcc_status gcc_emit_nll_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_nll_grad_kernel(struct gcc_emitter *e, int group, int node);
/* Slice (a thread per element of Y, any element type) and SliceGrad (a
 * thread per element of dX: dY's element or 0) (codegen/emit_index.c). */
gcc_status gcc_emit_slice_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_slice_grad_kernel(struct gcc_emitter *e, int group, int node);
/* Expand: a thread per element of Y (codegen/emit_index.c). */
gcc_status gcc_emit_expand_kernel(struct gcc_emitter *e, int group, int node);
/* Trilu: a thread per element of Y, X's element or 0 (any element type);
 * ArgMax / ArgMin: a block per output element, its threads scanning the
 * reduced axis and combining (value, index) pairs in a fixed tree in shared
 * memory (deterministic; ties resolved by index) (codegen/emit_select.c). */
gcc_status gcc_emit_trilu_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_reduce_min_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_reduce_min_grad_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_arg_max_kernel(struct gcc_emitter *e, int group, int node);
gcc_status gcc_emit_arg_min_kernel(struct gcc_emitter *e, int group, int node);

int gcc_fits_matmul_2d(const gcc_graph *g, int node);
/* cuDNN's pooling runs a float32 pooling (or its gradient) whose window has
 * no dilation and symmetric pads; a 16-bit one is a generated kernel
 * (cudnnPoolingForward/Backward do not promise CUDNN_DATA_BFLOAT16). */
int gcc_fits_cudnn_pool(const gcc_graph *g, int node);
/* Dropout in evaluation form is the identity, a pointwise "{0}" that fuses;
 * in training it is its own kernel (gcc_emit_dropout_kernel). */
int gcc_fits_dropout_identity(const gcc_graph *g, int node);

#endif /* GCC_CODEGEN_EMIT_KERNELS_H */
