/*
 * dnnl_ops.h - the CPU backend's library kernels: oneDNN 2.6 primitives
 * (Debian's libdnnl-dev, C API, OpenMP threading) behind a small interface
 * that knows nothing of the graph.
 *
 * What oneDNN is to the CPU is what cuBLASLt and cuDNN are to CUDA: a GEMM
 * with fused epilogues (the matmul primitive with a bias and post-ops), and
 * convolution, pooling, eltwise and batch-normalization primitives, JIT-
 * compiled for the machine's ISA (AVX-512 where the CPU has it).
 *
 * The life of an op:
 *   gcc_dnnl_create()         once per plan runner: engine, stream, primitive
 *                             cache, thread count;
 *   gcc_dnnl_*_create()       once per node, when the plan is built: the
 *                             primitive comes from the cache (keyed on every
 *                             field of the descriptor and the thread count, so
 *                             two nodes of the same shape share one
 *                             primitive) and the op gets memory objects with no
 *                             storage of their own;
 *   gcc_dnnl_op_scratch_bytes() the scratch the op needs per execution: oneDNN's
 *                             scratchpad (scratchpad_mode = user) plus this
 *                             layer's own temporaries. The memory planner
 *                             reserves it in the step arena;
 *   gcc_dnnl_op_run()         per step: points the memory objects at the
 *                             caller's buffers (the plan's arena, parameters,
 *                             bound inputs) and the scratch, and executes.
 *                             Nothing is allocated.
 *
 * Tensors are float32, dense and row-major (NCHW for activations, OIHW for
 * filters) unless a descriptor gives leading dimensions. Every oneDNN call
 * is checked; a failure returns GCC_ERR_UNSUPPORTED (oneDNN has no
 * implementation for the descriptor: dnnl_unimplemented), GCC_ERR_INVALID_ARGUMENT
 * (oneDNN rejected the descriptor: dnnl_invalid_arguments, or a field is out
 * of range here), GCC_ERR_OUT_OF_MEMORY, or GCC_ERR_DEVICE (any other oneDNN
 * status), with a message naming the oneDNN function, its status and the op.
 *
 * Threads. The Debian build of oneDNN runs on OpenMP (libgomp): a primitive
 * uses omp_get_max_threads() threads of the calling thread's OpenMP pool. A
 * context fixes that count (gcc_dnnl_create's `threads`) when it creates a
 * primitive and before each run, and this layer's own loops (the epilogue
 * loops below) run on the same OpenMP pool, so the process has one pool of
 * compute threads. With a fixed thread count every op is deterministic: the
 * same inputs give the same bits (oneDNN's f32 CPU kernels reduce in a fixed
 * order for a given thread count; the loops here split work by columns or
 * channels, never across a sum).
 *
 * A context and its ops belong to one thread at a time. Free every op before
 * its context.
 */
#ifndef GCC_RUNTIME_CPU_DNNL_OPS_H
#define GCC_RUNTIME_CPU_DNNL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_dnnl gcc_dnnl;       /* engine, stream, primitive cache */
typedef struct gcc_dnnl_op gcc_dnnl_op; /* one prepared primitive call */

/* Creates a context whose primitives run on `threads` OpenMP threads
 * (>= 1; 0 means omp_get_max_threads()). Errors: GCC_ERR_DEVICE when
 * oneDNN finds no CPU engine, GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_dnnl_create(int threads, gcc_dnnl **out, gcc_diag *d);
void gcc_dnnl_free(gcc_dnnl *dn);

/* The thread count of the context. */
int gcc_dnnl_threads(const gcc_dnnl *dn);

/* Primitive cache statistics: distinct primitives held, and how many op
 * creations found theirs in the cache (hits) or created it (misses). */
void gcc_dnnl_cache_stats(const gcc_dnnl *dn, int *entries, int64_t *hits, int64_t *misses);

/* oneDNN's version as "2.6.3" and the ISA its JIT targets on this machine
 * ("Intel AVX-512 with ..."), from dnnl_version and dnnl_get_effective_cpu_isa. */
const char *gcc_dnnl_version(void);
const char *gcc_dnnl_isa(void);

/* Turns oneDNN's own verbose output (one line per primitive creation and
 * execution on stdout, with its implementation and time; DNNL_VERBOSE's
 * levels 0, 1, 2) on or off for the whole process. */
gcc_status gcc_dnnl_set_verbose(int level, gcc_diag *d);

/* ---- ops: common ---------------------------------------------------------- */

/* Bytes of scratch one run of `op` needs (its oneDNN scratchpad and this
 * layer's temporaries, each aligned to 64 bytes), 0 if none. The caller
 * passes that many bytes, 64-byte aligned, to every gcc_dnnl_op_run. */
size_t gcc_dnnl_op_scratch_bytes(const gcc_dnnl_op *op);

/* Bytes of the workspace a max-pooling forward op in training mode writes
 * for its backward (the argmax of every window), 0 for other ops. */
size_t gcc_dnnl_op_workspace_bytes(const gcc_dnnl_op *op);

/* "matmul (brg:avx512_core) 64x512x784 bias relu": the primitive kind, the
 * implementation oneDNN chose (dnnl_query_impl_info_str) and the shape, for
 * profiles and placement reports. Valid while the op lives. */
const char *gcc_dnnl_op_name(const gcc_dnnl_op *op);

/* The implementation oneDNN chose, alone ("brg:avx512_core", "gemm:jit",
 * "jit:avx512_core", "ref:any"...), or this layer's own loops ("gcc:gemv_avx512",
 * "gcc:max_pool_tiled", "gcc:max_pool"). */
const char *gcc_dnnl_op_impl(const gcc_dnnl_op *op);

/* Executes `op` on the buffers in `ptrs` (the order each create function
 * documents; NULL only where it says "optional" and the op was created
 * without that operand) with `scratch` (gcc_dnnl_op_scratch_bytes bytes;
 * NULL when that is 0). Synchronous: the outputs are written on return.
 * Errors: GCC_ERR_INVALID_ARGUMENT for a NULL buffer the op needs, and
 * oneDNN's failures as above, naming the op. */
gcc_status gcc_dnnl_op_run(gcc_dnnl_op *op, void *const *ptrs, void *scratch, gcc_diag *d);

void gcc_dnnl_op_free(gcc_dnnl_op *op);

/* ---- matmul with a fused epilogue ---------------------------------------- */

/* Y[m,n] = epilogue(alpha * op(A)[m,k] * op(B)[k,n] (+ bias[n]) (+ beta * Y))
 * in row-major terms, ONNX Gemm's semantics with the C operand split into
 * the two forms fusion produces:
 *  - bias: a row vector of n floats added to every row (nn.Linear's bias,
 *    ONNX's C of shape [n] or [1, n] with beta = 1); the matmul primitive's
 *    bias operand;
 *  - beta != 0: Y is read as it is before the run and added with weight
 *    beta (ONNX's full C: the caller copies C into Y first); the `sum`
 *    post-op;
 *  - relu: max(x, 0) of the whole sum (the eltwise post-op), which is
 *    torch.relu for finite values; the ReLU mask the backward needs is then
 *    the output itself (y > 0), see gcc_dnnl_relu_mask_bgrad.
 * op(A) is A [m, k] or, with trans_a, A^T for A stored [k, m] (the same for
 * B: [k, n], or [n, k] with trans_b: nn.Linear's weight). Leading
 * dimensions are the row lengths of the stored matrices in elements; 0
 * means dense (k or m for A, n or k for B, n for Y), and a larger one reads
 * or writes a sub-matrix. m, n, k >= 1. alpha scales the product only; the
 * bias is added unscaled, as in ONNX where the bias is C with beta = 1
 * (oneDNN's output scale would scale the bias too, so with alpha != 1 the
 * bias becomes a binary-add post-op).
 * A 1 x n x k product without a full C runs a hand-written AVX-512 / AVX2
 * GEMV of this layer instead of oneDNN (implementation "gcc:gemv_avx512"),
 * unless `no_gemv`.
 * Run pointers: {A, B, bias (optional: NULL unless `bias`), Y}. */
typedef struct gcc_dnnl_matmul_desc {
  int64_t m, n, k;
  int trans_a, trans_b;
  int64_t lda, ldb, ldy;
  float alpha;
  float beta;
  int bias;
  int relu;
  int no_gemv; /* 1: oneDNN's primitive even where the hand-written GEMV
                  applies (runtime/cpu/cpu_choice.h times both) */
} gcc_dnnl_matmul_desc;

gcc_status gcc_dnnl_matmul_create(gcc_dnnl *dn, const gcc_dnnl_matmul_desc *md, gcc_dnnl_op **out,
                                  gcc_diag *d);

/* ---- the backward epilogues no oneDNN primitive fuses --------------------- */

/* The ReLU backward of a fused layer and, optionally, its bias gradient, in
 * one pass over dH [rows, cols] (row-major, dense):
 *     dX[r][c] = y[r][c] > 0 ? dH[r][c] : 0        (ReluGrad: torch.relu's backward)
 *     db[c]    = sum over r of dX[r][c]            (when db != NULL)
 * y is the forward ReLU's output (its sign is the mask cuBLASLt keeps as
 * bits). dX may be dH (in place). The sums run in float, rows in order, so
 * they are those of runtime/cpu_kernels' ReduceSumTo bit for bit, whatever
 * the thread count; columns are split between `threads` OpenMP threads. */
void gcc_dnnl_relu_mask_bgrad(const float *dh, const float *y, float *dx, float *db, int64_t rows,
                              int64_t cols, int threads);

/* db[c] = sum over r of x[r][c] for x [rows, cols] (row-major, dense): the
 * bias gradient beside dW = dY^T X (cuBLASLt's BGRADB). Float sums, rows in
 * order, as gcc_dnnl_relu_mask_bgrad. */
void gcc_dnnl_col_sums(const float *x, float *db, int64_t rows, int64_t cols, int threads);

/* ---- convolution ----------------------------------------------------------- */

/* 2-D convolution, ONNX Conv / torch.nn.functional.conv2d semantics:
 *   X [n, c, h, w] (NCHW), W [m, c / group, kh, kw] (OIHW), B [m],
 *   Y [n, m, oh, ow] with oh = (h + pt + pb - (dh * (kh - 1) + 1)) / sh + 1
 *   (floor; the same for ow);
 * strides sh, sw >= 1; pads top, left, bottom, right >= 0 (ONNX's order
 * is pt, pl, pb, pr); dilations dh, dw >= 1 (ONNX's convention: 1 is a dense
 * kernel; oneDNN's is one less); group >= 1 dividing c and m. The caller's
 * operands are always in the plain layouts (NCHW / OIHW / x). `layout`
 * chooses what oneDNN computes in:
 *   GCC_DNNL_LAYOUT_PLAIN:   the plain layouts themselves (its gemm-based
 *                            kernels, for the small channel counts here);
 *   GCC_DNNL_LAYOUT_BLOCKED: the layouts oneDNN prefers (format_tag any:
 *                            nChw16c activations, 16o16i-blocked filters),
 *                            with a reorder from each plain input into the
 *                            op's scratch before the convolution and from
 *                            the scratch into each plain output after it;
 *                            the op's name lists those layouts;
 *   GCC_DNNL_LAYOUT_AUTO:    BLOCKED, but for the backward-data pass of a
 *                            convolution with fewer than 4 input channels per
 *                            group (measured; see conv_layout in dnnl_ops.c).
 *   forward:          Y = conv(X, W) (+ B) (then relu when `relu`);
 *                     run pointers {X, W, B (optional: with `bias`), Y};
 *   backward data:    dX = conv_transpose(dY, W); {dY, W, dX};
 *   backward weights: dW (and dB = sums of dY over n, oh, ow when `bias`);
 *                     {dY, X, dW, dB (optional: with `bias`)}.
 * Errors: GCC_ERR_INVALID_ARGUMENT naming the field for a size out of range
 * (an output size below 1, a group that does not divide c and m). */
typedef enum gcc_dnnl_layout {
  GCC_DNNL_LAYOUT_AUTO = 0,
  GCC_DNNL_LAYOUT_PLAIN,
  GCC_DNNL_LAYOUT_BLOCKED,
} gcc_dnnl_layout;

typedef struct gcc_dnnl_conv_desc {
  int64_t n, c, h, w;
  int64_t m, kh, kw;
  int64_t sh, sw;
  int64_t pt, pl, pb, pr;
  int64_t dh, dw;
  int64_t group;
  int bias;
  int relu; /* forward only */
  gcc_dnnl_layout layout;
} gcc_dnnl_conv_desc;

/* The output height and width of `cd` (< 1 when the kernel does not fit). */
void gcc_dnnl_conv_out_dims(const gcc_dnnl_conv_desc *cd, int64_t *oh, int64_t *ow);

gcc_status gcc_dnnl_conv_fwd_create(gcc_dnnl *dn, const gcc_dnnl_conv_desc *cd, gcc_dnnl_op **out,
                                    gcc_diag *d);
gcc_status gcc_dnnl_conv_bwd_data_create(gcc_dnnl *dn, const gcc_dnnl_conv_desc *cd,
                                         gcc_dnnl_op **out, gcc_diag *d);
gcc_status gcc_dnnl_conv_bwd_weights_create(gcc_dnnl *dn, const gcc_dnnl_conv_desc *cd,
                                            gcc_dnnl_op **out, gcc_diag *d);

/* ---- pooling ------------------------------------------------------------ */

typedef enum gcc_dnnl_pool_kind {
  GCC_DNNL_POOL_MAX = 0,     /* ONNX MaxPool / torch max_pool2d */
  GCC_DNNL_POOL_AVG_INCLUDE, /* AveragePool count_include_pad = 1 */
  GCC_DNNL_POOL_AVG_EXCLUDE, /* AveragePool count_include_pad = 0 (ONNX's default) */
} gcc_dnnl_pool_kind;

/* 2-D pooling, ONNX MaxPool / AveragePool and PyTorch max_pool2d /
 * avg_pool2d semantics: X [n, c, h, w] -> Y [n, c, oh, ow] with
 *   oh = floor_or_ceil((h + pt + pb - (dh * (kh - 1) + 1)) / sh) + 1,
 * ceil with ceil_mode, where a last window that would start past the
 * input and its top/left padding is dropped (PyTorch's rule; ONNX's
 * reference does the same); the same for ow. Padding never wins a max (it
 * is -inf). An average divides by the taps inside the input
 * (AVG_EXCLUDE), or by the taps inside the padded input [-pt, h + pb) x
 * [-pl, w + pr) (AVG_INCLUDE: the whole window, but for a ceil_mode window
 * that hangs past the padding, as PyTorch counts it). Dilations >= 1 (ONNX
 * convention).
 *   forward:  {X, Y}, and for MAX with `training` also the workspace (the
 *             argmax of each window, gcc_dnnl_op_workspace_bytes):
 *             {X, Y, WS};
 *   backward: dX from dY: MAX {dY, WS} with the workspace of the forward
 *             op of the same descriptor; AVG {dY}; dX is the last pointer:
 *             {dY, WS, dX} or {dY, dX};
 *   backward from X (MAX only): {dY, X, dX}: recomputes the forward's
 *             argmax into the scratch first (the graph's MaxPoolGrad reads
 *             X, not a workspace).
 * MAX without a workspace (the forward of a plan) and the backward from X
 * run on this layer's own loops, never on oneDNN, on every ISA: the
 * maximum of a window is PyTorch's (max_pool2d on CPU and CUDA), the first
 * largest value in row-major window order, a NaN winning (the last NaN), and
 * the window's gradient goes to that element; overlapping windows sum their
 * gradients into dX in output order (deterministic). oneDNN's JIT kernels
 * break ties differently on AVX2 and AVX-512, so the workspace forms
 * ({X, Y, WS} and {dY, WS, dX}), which are oneDNN's, leave the element that
 * takes a tied window's gradient and NaN inputs undefined; no plan uses them.
 * Windows that tile the input (kernel = stride, no pads, no dilation, floor
 * mode: MaxPool2d(2, 2)) take a faster loop (impl "gcc:max_pool_tiled"),
 * others the general one ("gcc:max_pool"). */
typedef struct gcc_dnnl_pool_desc {
  gcc_dnnl_pool_kind kind;
  int64_t n, c, h, w;
  int64_t kh, kw;
  int64_t sh, sw;
  int64_t pt, pl, pb, pr;
  int64_t dh, dw;
  int ceil_mode;
  int training; /* forward MAX: write the workspace for the backward */
} gcc_dnnl_pool_desc;

/* The output height and width of `pd` (< 1 when the window does not fit). */
void gcc_dnnl_pool_out_dims(const gcc_dnnl_pool_desc *pd, int64_t *oh, int64_t *ow);

gcc_status gcc_dnnl_pool_fwd_create(gcc_dnnl *dn, const gcc_dnnl_pool_desc *pd, gcc_dnnl_op **out,
                                    gcc_diag *d);
gcc_status gcc_dnnl_pool_bwd_create(gcc_dnnl *dn, const gcc_dnnl_pool_desc *pd, gcc_dnnl_op **out,
                                    gcc_diag *d);
gcc_status gcc_dnnl_max_pool_bwd_from_x_create(gcc_dnnl *dn, const gcc_dnnl_pool_desc *pd,
                                               gcc_dnnl_op **out, gcc_diag *d);

/* ---- eltwise -------------------------------------------------------------- */

/* ReLU of `numel` floats: forward {X, Y} (Y = max(X, 0)); backward from the
 * forward's output {dY, Y, dX} (dX = Y > 0 ? dY : 0, oneDNN's
 * eltwise_relu_use_dst_for_bwd: the graph's ReluGrad). In place (Y = X,
 * dX = dY) is allowed. */
gcc_status gcc_dnnl_relu_fwd_create(gcc_dnnl *dn, int64_t numel, gcc_dnnl_op **out, gcc_diag *d);
gcc_status gcc_dnnl_relu_bwd_create(gcc_dnnl *dn, int64_t numel, gcc_dnnl_op **out, gcc_diag *d);

/* ---- batch normalization -------------------------------------------------- */

/* Batch normalization over X [n, c, h, w] (NCHW; h = w = 1 for [n, c]),
 * per channel, with scale (gamma) and shift (beta), ONNX
 * BatchNormalization / torch.nn.functional.batch_norm:
 *   training forward:  mean, var = the batch's mean and biased variance
 *                      per channel (outputs), Y = gamma (X - mean) /
 *                      sqrt(var + eps) + beta;
 *                      {X, gamma, beta, Y, mean, var};
 *   inference forward: the same with the given running mean and variance;
 *                      {X, gamma, beta, mean, var, Y};
 *   backward:          dX, dgamma, dbeta from dY with the training
 *                      forward's mean and var;
 *                      {X, dY, gamma, beta, mean, var, dX, dgamma, dbeta}
 *                      (oneDNN 2.6 takes beta as an input here, unused by
 *                      the math).
 * The running statistics' update (momentum, and PyTorch's unbiased variance
 * n/(n-1)) is not part of these ops: it is pointwise work on the mean and
 * var outputs. */
typedef struct gcc_dnnl_bnorm_desc {
  int64_t n, c, h, w;
  float eps;
} gcc_dnnl_bnorm_desc;

gcc_status gcc_dnnl_bnorm_fwd_train_create(gcc_dnnl *dn, const gcc_dnnl_bnorm_desc *bd,
                                           gcc_dnnl_op **out, gcc_diag *d);
gcc_status gcc_dnnl_bnorm_fwd_infer_create(gcc_dnnl *dn, const gcc_dnnl_bnorm_desc *bd,
                                           gcc_dnnl_op **out, gcc_diag *d);
gcc_status gcc_dnnl_bnorm_bwd_create(gcc_dnnl *dn, const gcc_dnnl_bnorm_desc *bd, gcc_dnnl_op **out,
                                     gcc_diag *d);

/* ---- the limit ------------------------------------------------------------ */

/* dnnl_sgemm's rate on an (m x k) @ (k x n) float32 product with the
 * context's threads, in GFLOP/s: the best of `reps` timed calls after one
 * warm-up. For benchmark reports ("the run's oneDNN sgemm peak"). Errors:
 * GCC_ERR_OUT_OF_MEMORY, oneDNN's. */
gcc_status gcc_dnnl_sgemm_gflops(gcc_dnnl *dn, int64_t m, int64_t n, int64_t k, int reps,
                                 double *gflops, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_DNNL_OPS_H */
