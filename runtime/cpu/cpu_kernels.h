/*
 * cpu_kernels.h - the CPU backend's kernels and its per-op table (which
 * kernel runs each op of graph/ops.h, and the scratch memory it needs).
 *
 * Tensors are dense, row-major, float32 unless stated. GEMMs go to OpenBLAS
 * (cblas_sgemm); the thread count of each GEMM is chosen from its size
 * (gcc_cpu_gemm_threads), because small GEMMs run slower on two threads
 * than on one on small machines.
 *
 * Kernels never allocate: everything they need is bound by the plan runner
 * when it builds the plan. They return GCC_OK, or GCC_ERR_INVALID_ARGUMENT when data is
 * out of range (a class label outside [0, C)), with a message naming the
 * node.
 */
#ifndef GCC_RUNTIME_CPU_KERNELS_H
#define GCC_RUNTIME_CPU_KERNELS_H

#include <stdint.h>

#include "graph/ir.h"
#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the node on the CPU; tensors are bound by the plan runner. */
typedef gcc_status (*gcc_cpu_fn)(const gcc_kernel_args *a);

/* Bytes of scratch memory one CPU execution of `node` needs (shapes
 * inferred), or 0. The memory planner reserves them in the step arena for
 * the node's lifetime only, and the runner hands them to the kernel
 * (gcc_kernel_args.workspace): kernels never allocate. */
typedef size_t (*gcc_workspace_fn)(const gcc_graph *g, int node);

/* Prepares a library kernel for one node when the plan is built (sets
 * a->prepared, or leaves it NULL for `kernel` to run the node): the oneDNN
 * primitives of runtime/cpu/cpu_dnnl.h. */
typedef gcc_status (*gcc_cpu_prepare_fn)(gcc_kernel_args *a, gcc_diag *d);

/* One entry of the CPU backend's op table (runtime/cpu/cpu_ops.c). */
typedef struct gcc_cpu_op {
  gcc_cpu_fn kernel;          /* the kernel (the reference where `prepare` is set), or NULL */
  gcc_cpu_prepare_fn prepare; /* NULL: `kernel` runs every node of the op */
  gcc_workspace_fn workspace; /* NULL: the kernel needs no scratch */
  int view;                   /* 1: a view of its input, nothing to run (no kernel) */
  const char *none;           /* no kernel and no view: why the CPU cannot run the op */
  /* 1: the kernel reads and writes float16 / bfloat16 storage itself (Cast).
   * Every other kernel computes in float32: the plan runner gives a node with
   * 16-bit operands float32 copies of them and rounds its 16-bit results
   * (runtime/plan.c), which is how the CPU emulates a mixed-precision plan. */
  int reads_16bit;
  /* 1: input 2, when present, is a per-channel bias (dim 1 of the output)
   * that a GPU adds after storing a 16-bit result (cuDNN's cudnnAddTensor
   * after a Conv / ConvTranspose): with a 16-bit output the plan runner
   * runs the kernel without it, rounds the result to 16 bits, adds it in
   * float32 and rounds again (runtime/plan.c), as the GPU does */
  int bias_after_16bit;
} gcc_cpu_op;

/* The entry of op `op`; NULL when `op` is out of range. */
const gcc_cpu_op *gcc_cpu_op_of(int op);

/* 1 if the CPU backend runs op `op` (a kernel, or a view that needs none). */
int gcc_cpu_supports_op(int op);

/* Scratch bytes of node `node` on the CPU (its entry's workspace, or 0). */
size_t gcc_cpu_workspace(const gcc_graph *g, int node);

/* OpenBLAS threads for an (m x k) @ (k x n) sgemm, at most max_threads:
 * one thread below a measured work threshold (bench/gemm_threads). */
int gcc_cpu_gemm_threads(int64_t m, int64_t n, int64_t k, int max_threads);

/* The OpenBLAS threads the op table's GEMM kernel uses for that product:
 * gcc_cpu_gemm_threads, or for one row or column of output (an sgemv) one
 * thread below 64 Ki matrix elements. */
int gcc_cpu_blas_threads(int64_t m, int64_t n, int64_t k, int max_threads);

gcc_status gcc_cpu_gemm(const gcc_kernel_args *a);
gcc_status gcc_cpu_matmul(const gcc_kernel_args *a);
gcc_status gcc_cpu_add(const gcc_kernel_args *a);
gcc_status gcc_cpu_relu(const gcc_kernel_args *a);
gcc_status gcc_cpu_relu_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_identity(const gcc_kernel_args *a);
gcc_status gcc_cpu_reduce_sum_to(const gcc_kernel_args *a);
gcc_status gcc_cpu_sce(const gcc_kernel_args *a);
gcc_status gcc_cpu_sce_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_mse(const gcc_kernel_args *a);
gcc_status gcc_cpu_mse_grad(const gcc_kernel_args *a);
/* The optimizer updates (runtime/cpu/cpu_optim.c), in place on in[0]:
 * torch.optim.SGD (in: param, grad, [momentum_buffer], [loss scaling's
 * scale, found_inf, applied_steps], [GradNorm's output]) and
 * torch.optim.Adam/AdamW (param, grad, exp_avg, exp_avg_sq, then the same
 * optional inputs), float32, any shape; out[0], when bound, the updated
 * parameter (its 16-bit copy's float32 stand-in). Each call adds 1 to
 * a->ctx->updates_checked, and 1 to a->ctx->updates_nonfinite when the
 * updated parameter holds a NaN or an Inf. */
gcc_status gcc_cpu_sgd(const gcc_kernel_args *a);
gcc_status gcc_cpu_adam(const gcc_kernel_args *a);
/* Softmax along node attribute `axis` (negative counts from the end); the
 * max is subtracted first, exp and the sum are taken in float64, so a row of
 * huge logits neither overflows nor loses its smallest terms. */
gcc_status gcc_cpu_softmax(const gcc_kernel_args *a);
/* dX = Y * (dY - sum(dY * Y)) along `axis`, the sum in float64. */
gcc_status gcc_cpu_softmax_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_log_softmax(const gcc_kernel_args *a);
/* ops of ONNX import (issue 14); semantics in graph/ops.c's table */
gcc_status gcc_cpu_sub(const gcc_kernel_args *a);
gcc_status gcc_cpu_mul(const gcc_kernel_args *a);
gcc_status gcc_cpu_div(const gcc_kernel_args *a);
gcc_status gcc_cpu_sigmoid(const gcc_kernel_args *a);
gcc_status gcc_cpu_tanh(const gcc_kernel_args *a);
gcc_status gcc_cpu_sqrt(const gcc_kernel_args *a);
gcc_status gcc_cpu_leaky_relu(const gcc_kernel_args *a);
gcc_status gcc_cpu_clip(const gcc_kernel_args *a);
gcc_status gcc_cpu_lrn(const gcc_kernel_args *a);
gcc_status gcc_cpu_concat(const gcc_kernel_args *a);
gcc_status gcc_cpu_transpose(const gcc_kernel_args *a);
gcc_status gcc_cpu_pad(const gcc_kernel_args *a);
/* Gather and GatherGrad (runtime/cpu/cpu_index.c): an index outside
 * [-dims[axis], dims[axis]) is GCC_ERR_INVALID_ARGUMENT naming the node and
 * the index's position; GatherGrad adds in index order (deterministic). */
gcc_status gcc_cpu_gather(const gcc_kernel_args *a);
gcc_status gcc_cpu_gather_grad(const gcc_kernel_args *a);
/* GatherElements and its gradient (graph/ops.h GCC_OP_GATHER_ELEMENTS):
 * runtime/cpu/cpu_index.c. */
gcc_status gcc_cpu_gather_elements(const gcc_kernel_args *a);
gcc_status gcc_cpu_gather_elements_grad(const gcc_kernel_args *a);
/* Slice and SliceGrad (runtime/cpu/cpu_index.c). */
gcc_status gcc_cpu_slice(const gcc_kernel_args *a);
gcc_status gcc_cpu_slice_grad(const gcc_kernel_args *a);
/* Expand: X broadcast to Y's shape (runtime/cpu/cpu_index.c). */
gcc_status gcc_cpu_expand(const gcc_kernel_args *a);
/* Gradients of the import set's ops (issue 15); formulas in graph/ops.c's
 * table. SigmoidGrad, TanhGrad, SqrtGrad read the forward's output Y;
 * LeakyReluGrad and ClipGrad its input X; LogSoftmaxGrad sums along the
 * axis in float64; LRNGrad recomputes each window's sum in float64. */
gcc_status gcc_cpu_sigmoid_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_tanh_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_sqrt_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_leaky_relu_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_clip_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_log_softmax_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_lrn_grad(const gcc_kernel_args *a);
/* BatchNormalization and BatchNormGrad: runtime/cpu/cpu_bnorm.h. */
/* Dropout: the identity in evaluation form; in training Y = X * mask / (1 -
 * ratio) with the Philox mask of the node's key at ctx->rng_step
 * (graph/philox.h). DropoutGrad: dX = dY * the same mask / (1 - ratio). */
gcc_status gcc_cpu_dropout(const gcc_kernel_args *a);
gcc_status gcc_cpu_dropout_grad(const gcc_kernel_args *a);
/* Cast between float32, float16 and bfloat16 (graph/half.h: round to nearest
 * even into 16 bits, exact out of them). */
gcc_status gcc_cpu_cast(const gcc_kernel_args *a);
/* fp16 loss scaling (graph/ops.h AmpNonFiniteCheck, AmpUpdateScale;
 * torch.amp.GradScaler). The check writes 1.0f to its output when any
 * element of its float32 inputs is Inf or NaN, else 0.0f; the update
 * changes scale, growth tracker and applied-step count in place. SGD and
 * Adam with the three loss-scaling inputs read grad * inv_scale (inv_scale
 * = (float)(1.0 / scale)) and return at once when found_inf != 0. */
gcc_status gcc_cpu_amp_non_finite_check(const gcc_kernel_args *a);
/* GradNorm (graph/ops.h GRAD_NORM_*): the sum of squares in float64 over
 * every gradient element in input order, its square root rounded to
 * float32, and the clip coefficient from it in float32 */
gcc_status gcc_cpu_grad_norm(const gcc_kernel_args *a);
gcc_status gcc_cpu_amp_update_scale(const gcc_kernel_args *a);
/* The pointwise math of the Transformer blocks (runtime/cpu/cpu_math.c),
 * float32, dense: Gelu (X) -> Y and GeluGrad (dY, X) -> dX, both
 * approximations (`approximate`), as PyTorch's CPU GELU kernels. */
gcc_status gcc_cpu_gelu(const gcc_kernel_args *a);
gcc_status gcc_cpu_gelu_grad(const gcc_kernel_args *a);
/* GeluAux (graph/ops.h): Y = Gelu(X) and D = GeluGrad(1, X), bit for bit as
 * gcc_cpu_gelu and gcc_cpu_gelu_grad compute them (GeluGrad(dY, X) = dY * D). */
gcc_status gcc_cpu_gelu_aux(const gcc_kernel_args *a);
/* Erf (X) -> Y (erff) and ErfGrad (dY, X) -> dY * 2 / sqrt(pi) * exp(-X^2). */
gcc_status gcc_cpu_erf(const gcc_kernel_args *a);
gcc_status gcc_cpu_erf_grad(const gcc_kernel_args *a);
/* Exp, Log, Neg, Abs, Reciprocal (X) -> Y (expf, logf, -x, fabsf, 1 / x);
 * AbsGrad (dY, X) -> dY sgn(X) (0 at X = 0); Pow (A, B) -> A^B (powf) with
 * A and B broadcast (ONNX multidirectional broadcasting); PowGradBase and
 * PowGradExponent (dY, A, B), A and B broadcast to dY's shape: PyTorch's
 * pow_backward_self and pow_backward_exponent (formulas in graph/ops.c). */
gcc_status gcc_cpu_exp(const gcc_kernel_args *a);
gcc_status gcc_cpu_log(const gcc_kernel_args *a);
gcc_status gcc_cpu_neg(const gcc_kernel_args *a);
gcc_status gcc_cpu_abs(const gcc_kernel_args *a);
gcc_status gcc_cpu_abs_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_pow(const gcc_kernel_args *a);
gcc_status gcc_cpu_pow_grad_base(const gcc_kernel_args *a);
gcc_status gcc_cpu_pow_grad_exponent(const gcc_kernel_args *a);
gcc_status gcc_cpu_reciprocal(const gcc_kernel_args *a);
/* Max, Min (A, B) -> the larger / smaller, broadcast, NaN propagated
 * (torch.maximum / torch.minimum); MaxGrad, MinGrad (dY, X, Other) -> X's
 * share: 0 where X loses, dY / 2 on a tie, else dY (PyTorch's rule). */
gcc_status gcc_cpu_max(const gcc_kernel_args *a);
gcc_status gcc_cpu_min(const gcc_kernel_args *a);
gcc_status gcc_cpu_max_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_min_grad(const gcc_kernel_args *a);

/* Convolution (ONNX Conv, 2-D, NCHW, groups) by im2col + sgemm per group, and its
 * gradients. The batch is processed in chunks of samples: one chunk's
 * column matrix col [C*kh*kw, chunk*oh*ow] and one GEMM output
 * [M, chunk*oh*ow] live in the node's planned workspace, whose size
 * gcc_cpu_conv_workspace gives (the chunk is as many samples as fit in
 * GCC_CONV_CHUNK_BYTES, at least one). So a GEMM is large enough for
 * OpenBLAS while the workspace stays bounded for big evaluation batches.
 *   Conv(X [N,C,H,W], W [M,C,kh,kw], B [M]?) -> Y [N,M,oh,ow]
 *   ConvGradData(dY, W) -> dX [input_shape]          (col2im of W^T dY)
 *   ConvGradFilter(dY, X) -> dW [filter_shape]       (sum over chunks of dY col^T)
 *   ConvGradBias(dY) -> dB [M]                       (no workspace) */
#define GCC_CONV_CHUNK_BYTES ((size_t)4 << 20)
size_t gcc_cpu_conv_workspace(const gcc_graph *g, int node);
size_t gcc_cpu_conv_grad_data_workspace(const gcc_graph *g, int node);
size_t gcc_cpu_conv_grad_filter_workspace(const gcc_graph *g, int node);
/* ConvTranspose(X, W, B) -> Y is ConvGradData with X as dY and Y as dX
 * (plus the bias per output channel); its workspace is ConvGradData's. */
size_t gcc_cpu_conv_transpose_workspace(const gcc_graph *g, int node);
/* AllReduce: the bucket's gradients are weighted (attribute mean: by
 * ctx->shard_rows / ctx->global_rows; else by 1, or 0 for a rank without
 * rows) into the workspace (one flat float32 buffer, the bucket: DDP's
 * flat bucket), summed over the ranks by ctx->comm in one call, and copied
 * back in place. Errors: GCC_ERR_INTERNAL without a communicator; the
 * communicator's (GCC_ERR_DEVICE naming the MPI call). */
gcc_status gcc_cpu_all_reduce(const gcc_kernel_args *a);
size_t gcc_cpu_all_reduce_workspace(const gcc_graph *g, int node);
gcc_status gcc_cpu_conv(const gcc_kernel_args *a);
gcc_status gcc_cpu_conv_grad_data(const gcc_kernel_args *a);
gcc_status gcc_cpu_conv_transpose(const gcc_kernel_args *a);
gcc_status gcc_cpu_conv_grad_filter(const gcc_kernel_args *a);
gcc_status gcc_cpu_conv_grad_bias(const gcc_kernel_args *a);

/* Pooling (ONNX MaxPool / AveragePool, 2-D, NCHW, ceil_mode = 0).
 * MaxPool's backward recomputes each window's argmax from X instead of
 * storing indices: the first maximal element in row-major window order
 * (NaN counts as the maximum), as PyTorch's CPU max_pool2d picks it, so
 * the gradient goes where PyTorch sends it. AveragePool divides by the
 * window size (count_include_pad = 1) or by the number of input elements
 * in the window (0). */
gcc_status gcc_cpu_max_pool(const gcc_kernel_args *a);
gcc_status gcc_cpu_max_pool_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_average_pool(const gcc_kernel_args *a);
gcc_status gcc_cpu_average_pool_grad(const gcc_kernel_args *a);

/* Elu, Selu, Celu, Softplus, Softsign, ThresholdedRelu (X) -> Y and their
 * gradients (dY, X) -> dX, float32, attributes alpha / gamma at ACT_ALPHA /
 * ACT_GAMMA (graph/ops.h; formulas in graph/ops.c); Sin, Cos (X) -> Y. */
gcc_status gcc_cpu_elu(const gcc_kernel_args *a);
gcc_status gcc_cpu_elu_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_selu(const gcc_kernel_args *a);
gcc_status gcc_cpu_selu_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_celu(const gcc_kernel_args *a);
gcc_status gcc_cpu_celu_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_softplus(const gcc_kernel_args *a);
gcc_status gcc_cpu_softplus_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_softsign(const gcc_kernel_args *a);
gcc_status gcc_cpu_softsign_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_thresholded_relu(const gcc_kernel_args *a);
gcc_status gcc_cpu_thresholded_relu_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_sin(const gcc_kernel_args *a);
gcc_status gcc_cpu_cos(const gcc_kernel_args *a);
/* PRelu (X, slope) -> Y, PReluGrad and PReluGradSlope (dY, X, slope) -> of
 * dY's shape, the slope broadcast (formulas in graph/ops.h). */
gcc_status gcc_cpu_prelu(const gcc_kernel_args *a);
gcc_status gcc_cpu_prelu_grad(const gcc_kernel_args *a);
gcc_status gcc_cpu_prelu_grad_slope(const gcc_kernel_args *a);
/* Trilu (X) -> Y (any element type) and ArgMax / ArgMin (X) -> int64 Y
 * (float32, int64, int32 X), graph/ops.h (runtime/cpu/cpu_select.c). */
gcc_status gcc_cpu_trilu(const gcc_kernel_args *a);
gcc_status gcc_cpu_arg_max(const gcc_kernel_args *a);
gcc_status gcc_cpu_arg_min(const gcc_kernel_args *a);
/* ReduceMin and its gradient (graph/ops.h GCC_OP_REDUCE_MIN):
 * runtime/cpu/cpu_select.c. */
gcc_status gcc_cpu_reduce_min(const gcc_kernel_args *a);
gcc_status gcc_cpu_reduce_min_grad(const gcc_kernel_args *a);
/* NegativeLogLikelihoodLoss (input, target[, weight]) -> loss and its
 * gradient (dY, target[, weight]) -> dInput (runtime/cpu/cpu_loss.c;
 * semantics in graph/ops.h): a target outside [0, C) that is not
 * ignore_index is GCC_ERR_INVALID_ARGUMENT naming the node and the target's
 * position; sums in float64 in target order (deterministic). */
gcc_status gcc_cpu_nll_loss(const gcc_kernel_args *a);
gcc_status gcc_cpu_nll_loss_grad(const gcc_kernel_args *a);

/* runtime/cpu/cpu_logic.c (semantics: graph/ops.h). Equal, Less, Greater,
 * LessOrEqual, GreaterOrEqual (A, B) -> C bool: A, B float32 (16-bit
 * operands widened by the runner), int64, int32 or (Equal) bool; broadcast.
 * Not (X) -> Y, And / Or / Xor (A, B) -> C: bool. Where (cond, X, Y) -> Z of
 * X's dtype (any of 1, 4 or 8 bytes). WhereGradX / WhereGradY (cond, dZ) ->
 * float32 of dZ's shape. */
gcc_status gcc_cpu_equal(const gcc_kernel_args *a);
gcc_status gcc_cpu_less(const gcc_kernel_args *a);
gcc_status gcc_cpu_greater(const gcc_kernel_args *a);
gcc_status gcc_cpu_less_or_equal(const gcc_kernel_args *a);
gcc_status gcc_cpu_greater_or_equal(const gcc_kernel_args *a);
gcc_status gcc_cpu_not(const gcc_kernel_args *a);
gcc_status gcc_cpu_and(const gcc_kernel_args *a);
gcc_status gcc_cpu_or(const gcc_kernel_args *a);
gcc_status gcc_cpu_xor(const gcc_kernel_args *a);
gcc_status gcc_cpu_where(const gcc_kernel_args *a);
gcc_status gcc_cpu_where_grad_x(const gcc_kernel_args *a);
gcc_status gcc_cpu_where_grad_y(const gcc_kernel_args *a);
/* Cast's integer side (gcc_cpu_cast calls it): X of any castable dtype ->
 * Y int64, int32 or bool (nonzero, NaN included, is true; a float truncates
 * toward zero, saturating out of range). */
gcc_status gcc_cpu_cast_to_int(const gcc_kernel_args *a);
/* 1 for int64, int32 and bool; element i of such a tensor as a float. */
int gcc_cpu_dtype_is_int(gcc_dtype t);
float gcc_cpu_load_int_as_float(const gcc_tensor *t, int64_t i);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_KERNELS_H */
