/*
 * lowering.c - codegen's per-op table: what each op of graph/ops.h becomes
 * on a CUDA device (see lowering.h), and the names of group kinds and
 * epilogues.
 */
#include "codegen/lowering.h"

#include "codegen/emit_kernels.h"
#include "graph/ops.h"
#include "passes/passes.h"

/* GELU in float (PyTorch's CUDA kernels: GeluCUDAKernelImpl,
 * GeluBackwardCUDAKernelImpl): the erf form with M_SQRT1_2, the tanh form
 * with kBeta = sqrt(2 / pi) and kKappa = 0.044715. */
#define GELU_ERF "0.5f * {0} * (1.0f + erff({0} * 0.70710678118654752f))"
#define GELU_TANH                                                                                  \
  "0.5f * {0} * (1.0f + tanhf(0.79788456080286536f * ({0} + 0.044715f * {0} * {0} * {0})))"
/* dY (Phi(x) + x phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) */
#define GELU_GRAD_ERF                                                                              \
  "{0} * (0.5f * (1.0f + erff({1} * 0.70710678118654752f)) + {1} * 0.39894228040143268f * "        \
  "expf(-0.5f * {1} * {1}))"
/* dY (0.5 (1 + t) + 0.5 x (1 - t^2) kBeta (1 + 3 kKappa x^2)) */
#define GELU_TANH_T "tanhf(0.79788456080286536f * ({1} + 0.044715f * {1} * {1} * {1}))"
#define GELU_GRAD_TANH                                                                             \
  "{0} * (0.5f * (1.0f + " GELU_TANH_T ") + 0.5f * {1} * (1.0f - " GELU_TANH_T " * " GELU_TANH_T   \
  ") * 0.79788456080286536f * (1.0f + 0.134145f * {1} * {1}))"

static const char *gelu_expr(const gcc_node *n) {
  return gcc_gelu_is_tanh(n) ? GELU_TANH : GELU_ERF;
}
static const char *gelu_grad_expr(const gcc_node *n) {
  return gcc_gelu_is_tanh(n) ? GELU_GRAD_TANH : GELU_GRAD_ERF;
}

_Static_assert(GCC_OP_COUNT == 124, "a new op: add its CUDA lowering to kLowering");

static const gcc_lowering kLowering[GCC_OP_COUNT] = {
    [GCC_OP_GEMM] = {.kind = GCC_LOWER_GEMM, .gemm_attrs = 1},
    /* a batched or 1-D MatMul is a generated kernel */
    [GCC_OP_MATMUL] = {.kind = GCC_LOWER_GEMM,
                       .fits = gcc_fits_matmul_2d,
                       .kernel = gcc_emit_matmul_kernel},
    [GCC_OP_ADD] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} + {1}"},
    [GCC_OP_RELU] = {.kind = GCC_LOWER_POINTWISE,
                     .expr = "{0} < 0.0f ? 0.0f : {0}",
                     .epilogue = GCC_EPIROLE_RELU},
    [GCC_OP_RELU_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                          .expr = "{1} > 0.0f ? {0} : 0.0f",
                          .epilogue = GCC_EPIROLE_RELU_GRAD},
    [GCC_OP_IDENTITY] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0}"},
    [GCC_OP_RESHAPE] = {.kind = GCC_LOWER_VIEW},
    [GCC_OP_FLATTEN] = {.kind = GCC_LOWER_VIEW},
    [GCC_OP_REDUCE_SUM_TO] = {.kind = GCC_LOWER_REDUCTION, .epilogue = GCC_EPIROLE_BIAS_GRAD},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY] = {.kind = GCC_LOWER_LOSS,
                                      .loss_grad = GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD,
                                      .emit = gcc_emit_sce},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD] = {.kind = GCC_LOWER_LOSS_GRAD, .emit = gcc_emit_sce},
    [GCC_OP_MEAN_SQUARED_ERROR] = {.kind = GCC_LOWER_LOSS,
                                   .loss_grad = GCC_OP_MEAN_SQUARED_ERROR_GRAD,
                                   .emit = gcc_emit_mse},
    [GCC_OP_MEAN_SQUARED_ERROR_GRAD] = {.kind = GCC_LOWER_LOSS_GRAD, .emit = gcc_emit_mse},
    [GCC_OP_SGD] = {.kind = GCC_LOWER_OPTIMIZER, .emit = gcc_emit_sgd},
    [GCC_OP_ADAM] = {.kind = GCC_LOWER_OPTIMIZER, .emit = gcc_emit_adam},
    [GCC_OP_COPY] = {.kind = GCC_LOWER_COPY},
    [GCC_OP_SOFTMAX] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_softmax_kernel},
    [GCC_OP_SOFTMAX_GRAD] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_softmax_grad_kernel},
    [GCC_OP_CONV] = {.kind = GCC_LOWER_LIBRARY,
                     .call = "cudnnConvolutionForward",
                     .conv = GCC_CONV_FORWARD,
                     .nhwc = GCC_NHWC_LIBRARY},
    [GCC_OP_CONV_GRAD_DATA] = {.kind = GCC_LOWER_LIBRARY,
                               .call = "cudnnConvolutionBackwardData",
                               .conv = GCC_CONV_OTHER,
                               .nhwc = GCC_NHWC_LIBRARY},
    [GCC_OP_CONV_GRAD_FILTER] = {.kind = GCC_LOWER_LIBRARY,
                                 .call = "cudnnConvolutionBackwardFilter",
                                 .conv = GCC_CONV_OTHER,
                                 .nhwc = GCC_NHWC_LIBRARY},
    [GCC_OP_CONV_GRAD_BIAS] = {.kind = GCC_LOWER_LIBRARY,
                               .call = "cudnnConvolutionBackwardBias",
                               .nhwc = GCC_NHWC_LIBRARY},
    /* 16-bit operands, dilated or asymmetrically padded windows: a generated kernel */
    [GCC_OP_MAX_POOL] = {.kind = GCC_LOWER_LIBRARY,
                         .call = "cudnnPoolingForward",
                         .fits = gcc_fits_cudnn_pool,
                         .kernel = gcc_emit_max_pool_kernel,
                         .kernel16 = 1,
                         .nhwc = GCC_NHWC_LIBRARY},
    [GCC_OP_MAX_POOL_GRAD] = {.kind = GCC_LOWER_LIBRARY,
                              .call = "cudnnPoolingBackward",
                              .fits = gcc_fits_cudnn_pool,
                              .kernel = gcc_emit_max_pool_grad_kernel,
                              .kernel16 = 1,
                              .nhwc = GCC_NHWC_LIBRARY},
    [GCC_OP_AVERAGE_POOL] = {.kind = GCC_LOWER_LIBRARY,
                             .call = "cudnnPoolingForward",
                             .fits = gcc_fits_cudnn_pool,
                             .kernel = gcc_emit_average_pool_kernel,
                             .kernel16 = 1,
                             .nhwc = GCC_NHWC_LIBRARY},
    [GCC_OP_AVERAGE_POOL_GRAD] = {.kind = GCC_LOWER_LIBRARY,
                                  .call = "cudnnPoolingBackward",
                                  .fits = gcc_fits_cudnn_pool,
                                  .kernel = gcc_emit_average_pool_grad_kernel,
                                  .kernel16 = 1,
                                  .nhwc = GCC_NHWC_LIBRARY},
    [GCC_OP_SUB] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} - {1}"},
    [GCC_OP_MUL] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} * {1}"},
    [GCC_OP_DIV] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} / {1}"},
    [GCC_OP_SIGMOID] = {.kind = GCC_LOWER_POINTWISE, .expr = "1.0f / (1.0f + expf(-{0}))"},
    [GCC_OP_TANH] = {.kind = GCC_LOWER_POINTWISE, .expr = "tanhf({0})"},
    [GCC_OP_SQRT] = {.kind = GCC_LOWER_POINTWISE, .expr = "sqrtf({0})"},
    [GCC_OP_LEAKY_RELU] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} < 0.0f ? {f0} * {0} : {0}"},
    /* NaN stays NaN: both comparisons are false */
    [GCC_OP_CLIP] = {.kind = GCC_LOWER_POINTWISE,
                     .expr = "{0} < {f0} ? {f0} : ({0} > {f1} ? {f1} : {0})"},
    [GCC_OP_LOG_SOFTMAX] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_log_softmax_kernel},
    [GCC_OP_LRN] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_lrn_kernel},
    [GCC_OP_CONCAT] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_concat_kernel, .kernel16 = 1},
    [GCC_OP_TRANSPOSE] = {.kind = GCC_LOWER_KERNEL,
                          .kernel = gcc_emit_transpose_kernel,
                          .kernel16 = 1},
    [GCC_OP_PAD] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_pad_kernel, .kernel16 = 1},
    /* cudnnConvolutionBackwardData with X as dY and Y as dX, then the bias */
    [GCC_OP_CONV_TRANSPOSE] = {.kind = GCC_LOWER_LIBRARY,
                               .call = "cudnnConvolutionBackwardData",
                               .conv = GCC_CONV_OTHER,
                               .nhwc = GCC_NHWC_LIBRARY},
    /* on the communication stream (runtime/comm.h: NCCL on GPU ranks) */
    [GCC_OP_ALL_REDUCE] = {.kind = GCC_LOWER_LIBRARY, .call = "ncclAllReduce"},
    [GCC_OP_SIGMOID_GRAD] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} * {1} * (1.0f - {1})"},
    [GCC_OP_TANH_GRAD] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} * (1.0f - {1} * {1})"},
    [GCC_OP_SQRT_GRAD] = {.kind = GCC_LOWER_POINTWISE, .expr = "0.5f * {0} / {1}"},
    [GCC_OP_LEAKY_RELU_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                                .expr = "{1} < 0.0f ? {f0} * {0} : {0}"},
    [GCC_OP_CLIP_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                          .expr = "({1} >= {f0} && {1} <= {f1}) ? {0} : 0.0f"},
    [GCC_OP_LOG_SOFTMAX_GRAD] = {.kind = GCC_LOWER_KERNEL,
                                 .kernel = gcc_emit_log_softmax_grad_kernel},
    [GCC_OP_LRN_GRAD] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_lrn_grad_kernel},
    /* one thread per channel, float64 sums as the CPU (deterministic; the
     * running statistics are written in place in training) */
    [GCC_OP_BATCH_NORM] = {.kind = GCC_LOWER_KERNEL,
                           .kernel = gcc_emit_batch_norm_kernel,
                           .kernel16 = 1,
                           .nhwc = GCC_NHWC_KERNEL},
    [GCC_OP_BATCH_NORM_GRAD] = {.kind = GCC_LOWER_KERNEL,
                                .kernel = gcc_emit_batch_norm_grad_kernel,
                                .kernel16 = 1,
                                .nhwc = GCC_NHWC_KERNEL},
    /* the identity in evaluation (fused as "{0}"); in training a kernel of its own
     * drawing the Philox mask (graph/philox.h), as DropoutGrad */
    [GCC_OP_DROPOUT] = {.kind = GCC_LOWER_POINTWISE,
                        .expr = "{0}",
                        .fits = gcc_fits_dropout_identity,
                        .kernel = gcc_emit_dropout_kernel,
                        .kernel16 = 1},
    [GCC_OP_DROPOUT_GRAD] = {.kind = GCC_LOWER_KERNEL,
                             .kernel = gcc_emit_dropout_grad_kernel,
                             .kernel16 = 1},
    /* the conversion is the load and store of the operand's and the result's
     * dtypes (codegen/emit.c): fused into its neighbours' kernels */
    [GCC_OP_CAST] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0}"},
    /* fp16 loss scaling: a grid-wide check over every gradient, and a
     * one-thread update of the scale (the unscale is in the optimizer kernel) */
    [GCC_OP_AMP_NON_FINITE_CHECK] = {.kind = GCC_LOWER_KERNEL,
                                     .kernel = gcc_emit_amp_non_finite_check_kernel},
    [GCC_OP_AMP_UPDATE_SCALE] = {.kind = GCC_LOWER_KERNEL,
                                 .kernel = gcc_emit_amp_update_scale_kernel},
    /* a block per row (float32 tree reductions), the column sums of dScale / dB
     * over many blocks, merged in chunk order (codegen/emit_layernorm.c); float32
     * only (the autocast pass keeps it there) */
    [GCC_OP_LAYER_NORM] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_layer_norm_kernel},
    [GCC_OP_LAYER_NORM_GRAD] = {.kind = GCC_LOWER_KERNEL,
                                .kernel = gcc_emit_layer_norm_grad_kernel},
    /* an index map over any element type (a copy: 16-bit data stays 16-bit) */
    [GCC_OP_GATHER] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_gather_kernel, .kernel16 = 1},
    /* a block per row of dX scanning the indices: deterministic, no atomics */
    [GCC_OP_GATHER_GRAD] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_gather_grad_kernel},
    [GCC_OP_SLICE] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_slice_kernel, .kernel16 = 1},
    [GCC_OP_SLICE_GRAD] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_slice_grad_kernel},
    [GCC_OP_EXPAND] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_expand_kernel, .kernel16 = 1},
    /* gradient clipping: a deterministic grid-wide norm (the multiply by the
     * coefficient is in the optimizer kernel) */
    [GCC_OP_GRAD_NORM] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_grad_norm_kernel},
    [GCC_OP_ATTENTION] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_attention_kernel},
    [GCC_OP_ATTENTION_GRAD] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_attention_grad_kernel},
    [GCC_OP_GELU] = {.kind = GCC_LOWER_POINTWISE, .expr_of = gelu_expr},
    [GCC_OP_GELU_GRAD] = {.kind = GCC_LOWER_POINTWISE, .expr_of = gelu_grad_expr},
    [GCC_OP_ERF] = {.kind = GCC_LOWER_POINTWISE, .expr = "erff({0})"},
    /* 2 / sqrt(pi) exp(-x^2) */
    [GCC_OP_ERF_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                         .expr = "{0} * 1.12837916709551257f * expf(-{1} * {1})"},
    [GCC_OP_EXP] = {.kind = GCC_LOWER_POINTWISE, .expr = "expf({0})"},
    [GCC_OP_LOG] = {.kind = GCC_LOWER_POINTWISE, .expr = "logf({0})"},
    [GCC_OP_NEG] = {.kind = GCC_LOWER_POINTWISE, .expr = "-{0}"},
    [GCC_OP_ABS] = {.kind = GCC_LOWER_POINTWISE, .expr = "fabsf({0})"},
    /* dY sgn(X): torch.sgn is 0 at 0 */
    [GCC_OP_ABS_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                         .expr = "{1} > 0.0f ? {0} : ({1} < 0.0f ? -{0} : 0.0f)"},
    [GCC_OP_POW] = {.kind = GCC_LOWER_POINTWISE, .expr = "powf({0}, {1})"},
    /* pow_backward_self: 0 where the exponent is 0 */
    [GCC_OP_POW_GRAD_BASE] = {.kind = GCC_LOWER_POINTWISE,
                              .expr = "{2} == 0.0f ? 0.0f : {0} * ({2} * powf({1}, {2} - 1.0f))"},
    /* pow_backward_exponent: 0 where the base is 0 and the exponent >= 0 */
    [GCC_OP_POW_GRAD_EXPONENT] = {.kind = GCC_LOWER_POINTWISE,
                                  .expr = "({1} == 0.0f && {2} >= 0.0f) ? 0.0f : {0} * (powf({1}, "
                                          "{2}) * logf({1}))"},
    [GCC_OP_RECIPROCAL] = {.kind = GCC_LOWER_POINTWISE, .expr = "1.0f / {0}"},
    /* NaN propagates (torch.maximum): a NaN {0} is kept, a NaN {1} loses every comparison */
    [GCC_OP_MAX] = {.kind = GCC_LOWER_POINTWISE, .expr = "({0} > {1} || {0} != {0}) ? {0} : {1}"},
    [GCC_OP_MIN] = {.kind = GCC_LOWER_POINTWISE, .expr = "({0} < {1} || {0} != {0}) ? {0} : {1}"},
    /* PyTorch: where(self == other, grad / 2, grad).masked_fill_(self < other, 0) */
    [GCC_OP_MAX_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                         .expr = "{1} < {2} ? 0.0f : ({1} == {2} ? 0.5f * {0} : {0})"},
    [GCC_OP_MIN_GRAD] =
        {.kind = GCC_LOWER_POINTWISE,
         .expr =
             "{1} > {2} ? 0.0f : ({1} == {2} ? 0.5f * {0} : {0})"}, /* Softplus: max(x, 0) + log1p(e^-|x|), log(1 + e^x) without overflow (NaN stays NaN) */
    [GCC_OP_ELU] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} > 0.0f ? {0} : {f0} * expm1f({0})"},
    [GCC_OP_ELU_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                         .expr = "{1} > 0.0f ? {0} : {0} * {f0} * expf({1})"},
    [GCC_OP_SELU] = {.kind = GCC_LOWER_POINTWISE,
                     .expr = "{f1} * ({0} > 0.0f ? {0} : {f0} * expm1f({0}))"},
    [GCC_OP_SELU_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                          .expr = "{1} > 0.0f ? {f1} * {0} : {0} * {f1} * {f0} * expf({1})"},
    [GCC_OP_CELU] = {.kind = GCC_LOWER_POINTWISE,
                     .expr = "{0} > 0.0f ? {0} : {f0} * expm1f({0} / {f0})"},
    [GCC_OP_CELU_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                          .expr = "{1} > 0.0f ? {0} : {0} * expf({1} / {f0})"},
    [GCC_OP_SOFTPLUS] = {.kind = GCC_LOWER_POINTWISE,
                         .expr = "fmaxf({0}, 0.0f) + log1pf(expf(-fabsf({0})))"},
    [GCC_OP_SOFTPLUS_GRAD] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} / (1.0f + expf(-{1}))"},
    [GCC_OP_SOFTSIGN] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} / (1.0f + fabsf({0}))"},
    [GCC_OP_SOFTSIGN_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                              .expr = "{0} / ((1.0f + fabsf({1})) * (1.0f + fabsf({1})))"},
    [GCC_OP_THRESHOLDED_RELU] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} > {f0} ? {0} : 0.0f"},
    [GCC_OP_THRESHOLDED_RELU_GRAD] = {.kind = GCC_LOWER_POINTWISE,
                                      .expr = "{1} > {f0} ? {0} : 0.0f"},
    [GCC_OP_SIN] = {.kind = GCC_LOWER_POINTWISE, .expr = "sinf({0})"},
    [GCC_OP_COS] = {.kind = GCC_LOWER_POINTWISE, .expr = "cosf({0})"},
    /* the slope broadcast as Pow's operands */
    [GCC_OP_PRELU] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} < 0.0f ? {1} * {0} : {0}"},
    [GCC_OP_PRELU_GRAD] = {.kind = GCC_LOWER_POINTWISE, .expr = "{1} < 0.0f ? {2} * {0} : {0}"},
    [GCC_OP_PRELU_GRAD_SLOPE] = {.kind = GCC_LOWER_POINTWISE,
                                 .expr = "{1} < 0.0f ? {1} * {0} : 0.0f"},
    [GCC_OP_TRILU] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_trilu_kernel, .kernel16 = 1},
    [GCC_OP_ARG_MAX] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_arg_max_kernel},
    [GCC_OP_ARG_MIN] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_arg_min_kernel},
    /* a thread per target (none), or per-block partials and one block
     * (sum, mean): deterministic, no atomics but the bad-label flag */
    [GCC_OP_NLL_LOSS] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_nll_kernel},
    /* a thread per element of dInput (mean: the weight sum's partials first) */
    [GCC_OP_NLL_LOSS_GRAD] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_nll_grad_kernel},
    /* comparisons and logic: a bool operand loads as 0.0f / 1.0f and a bool
     * result stores (value != 0) as one byte (codegen/emit_pointwise.c); a
     * NaN compares false. Integer operands stay on the CPU (placement). */
    [GCC_OP_EQUAL] = {.kind = GCC_LOWER_POINTWISE, .expr = "({0} == {1}) ? 1.0f : 0.0f"},
    [GCC_OP_LESS] = {.kind = GCC_LOWER_POINTWISE, .expr = "({0} < {1}) ? 1.0f : 0.0f"},
    [GCC_OP_GREATER] = {.kind = GCC_LOWER_POINTWISE, .expr = "({0} > {1}) ? 1.0f : 0.0f"},
    [GCC_OP_LESS_OR_EQUAL] = {.kind = GCC_LOWER_POINTWISE, .expr = "({0} <= {1}) ? 1.0f : 0.0f"},
    [GCC_OP_GREATER_OR_EQUAL] = {.kind = GCC_LOWER_POINTWISE, .expr = "({0} >= {1}) ? 1.0f : 0.0f"},
    [GCC_OP_NOT] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} != 0.0f ? 0.0f : 1.0f"},
    [GCC_OP_AND] = {.kind = GCC_LOWER_POINTWISE,
                    .expr = "({0} != 0.0f && {1} != 0.0f) ? 1.0f : 0.0f"},
    [GCC_OP_OR] = {.kind = GCC_LOWER_POINTWISE,
                   .expr = "({0} != 0.0f || {1} != 0.0f) ? 1.0f : 0.0f"},
    [GCC_OP_XOR] = {.kind = GCC_LOWER_POINTWISE,
                    .expr = "(({0} != 0.0f) != ({1} != 0.0f)) ? 1.0f : 0.0f"},
    [GCC_OP_WHERE] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} != 0.0f ? {1} : {2}"},
    [GCC_OP_WHERE_GRAD_X] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} != 0.0f ? {1} : 0.0f"},
    [GCC_OP_WHERE_GRAD_Y] = {.kind = GCC_LOWER_POINTWISE, .expr = "{0} != 0.0f ? 0.0f : {1}"},
    [GCC_OP_GATHER_ELEMENTS] = {.kind = GCC_LOWER_KERNEL,
                                .kernel = gcc_emit_gather_elements_kernel},
    [GCC_OP_GATHER_ELEMENTS_GRAD] = {.kind = GCC_LOWER_KERNEL,
                                     .kernel = gcc_emit_gather_elements_grad_kernel},
    [GCC_OP_REDUCE_MIN] = {.kind = GCC_LOWER_KERNEL, .kernel = gcc_emit_reduce_min_kernel},
    [GCC_OP_REDUCE_MIN_GRAD] = {.kind = GCC_LOWER_KERNEL,
                                .kernel = gcc_emit_reduce_min_grad_kernel},
    /* the CPU's packed attention (codegen/packed_attention.c) runs only where
     * the target supports it: none here yet (cuDNN's SDPA takes strided Q, K,
     * V, so a GPU version is possible) */
    [GCC_OP_ATTENTION_PACKED] = {.kind = GCC_LOWER_NONE,
                                 .none = "internal: made by the CPU-only packed-attention "
                                         "lowering; cuDNN's SDPA could read strided Q, K, V"},
    [GCC_OP_ATTENTION_PACKED_GRAD] = {.kind = GCC_LOWER_NONE,
                                      .none = "internal: made by the CPU-only packed-attention "
                                              "lowering, with AttentionPacked"},
    [GCC_OP_GELU_AUX] = {.kind = GCC_LOWER_NONE,
                         .none = "internal: made by the CPU-only gelu-aux lowering; the CUDA "
                                 "plan fuses Gelu and GeluGrad into their neighbours instead"},
    /* the CPU's one-pass LayerNorm backward (passes/layer_norm_grad.c) runs
     * only where the target supports it: the generated LayerNormGrad
     * kernels stay separate here */
    [GCC_OP_LAYER_NORM_GRAD_ALL] = {.kind = GCC_LOWER_NONE,
                                    .none = "internal: made by the CPU-only LayerNorm-backward "
                                            "lowering; the generated LayerNormGrad kernels "
                                            "(one per output) run here instead"},
};

const gcc_lowering *gcc_lowering_of(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return NULL;
  return &kLowering[op];
}

int gcc_cuda_supports_op(int op) {
  const gcc_lowering *l = gcc_lowering_of(op);
  return l && l->kind != GCC_LOWER_UNSET && l->kind != GCC_LOWER_NONE;
}

gcc_lowering_kind gcc_lowering_kind_of(const gcc_graph *g, int node) {
  const gcc_lowering *l = gcc_lowering_of(g->nodes[node].op);
  if (!l)
    return GCC_LOWER_UNSET;
  if (l->fits && l->kernel && !l->fits(g, node))
    return GCC_LOWER_KERNEL;
  return l->kind;
}

int gcc_cuda_layout_class(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_lowering *l = gcc_lowering_of(n->op);
  gcc_lowering_kind kind = gcc_lowering_kind_of(g, node);
  if (l && (((l->nhwc & GCC_NHWC_LIBRARY) && kind == GCC_LOWER_LIBRARY) ||
            ((l->nhwc & GCC_NHWC_KERNEL) && kind == GCC_LOWER_KERNEL)))
    return GCC_LAYOUT_CLASS_NHWC;
  if (kind != GCC_LOWER_POINTWISE || n->n_outputs < 1 || n->outputs[0] < 0)
    return GCC_LAYOUT_CLASS_NCHW;
  const gcc_shape *y = &g->values[n->outputs[0]].shape;
  if (y->ndim != 4)
    return GCC_LAYOUT_CLASS_NCHW;
  for (int k = 0; k < n->n_inputs + n->n_outputs; k++) {
    int v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
    if (v < 0)
      continue;
    if (!gcc_dtype_is_float(g->values[v].dtype) || !gcc_shape_equal(&g->values[v].shape, y))
      return GCC_LAYOUT_CLASS_NCHW;
  }
  return GCC_LAYOUT_CLASS_ANY;
}

const char *gcc_group_kind_name(int kind) {
  static const char *const names[] = {"pointwise", "gemm", "loss", "optimizer", "copy", "cudnn"};
  _Static_assert(sizeof names / sizeof names[0] == GCC_GROUP_KIND_COUNT, "group kinds");
  return (unsigned)kind < GCC_GROUP_KIND_COUNT ? names[kind] : "?";
}

const char *gcc_epilogue_name(int epilogue) {
  switch ((gcc_epilogue)epilogue) {
  case GCC_EPI_DEFAULT: return "CUBLASLT_EPILOGUE_DEFAULT";
  case GCC_EPI_BIAS: return "CUBLASLT_EPILOGUE_BIAS";
  case GCC_EPI_RELU_BIAS: return "CUBLASLT_EPILOGUE_RELU_BIAS";
  case GCC_EPI_RELU_AUX_BIAS: return "CUBLASLT_EPILOGUE_RELU_AUX_BIAS";
  case GCC_EPI_DRELU: return "CUBLASLT_EPILOGUE_DRELU";
  case GCC_EPI_DRELU_BGRAD: return "CUBLASLT_EPILOGUE_DRELU_BGRAD";
  case GCC_EPI_BGRADA: return "CUBLASLT_EPILOGUE_BGRADA";
  case GCC_EPI_BGRADB: return "CUBLASLT_EPILOGUE_BGRADB";
  }
  return "?";
}
