/*
 * ops.h - the op enum and the bottom op table.
 *
 * GCC_OP_LIST is the one list of operators. This layer describes each op
 * by what it means: name, arity, attribute schema, shape and dtype
 * inference, FLOPs and the source of its semantics. Each layer above keeps
 * its own table keyed by the same enum, as ggml keeps `enum ggml_op` in
 * its core and each backend's dispatch in the backend (and tinygrad hangs
 * its gradient and code tables off its `Ops` enum):
 *
 *   graph/ops.c              this table (semantics)
 *   passes/grad_rules.c      the gradient rule of each op (autodiff)
 *   runtime/cpu/cpu_ops.c    the CPU backend's kernel and workspace size
 *   codegen/lowering.c       how an op lowers to CUDA: a pointwise
 *                            expression, a GEMM, a library call, a view, a
 *                            copy, a loss or optimizer kernel, or none
 *   runtime/cuda/cuda_ops.c  the CUDA backend's library calls (cuDNN)
 *   onnx/export.c            the ONNX op an inference-graph node becomes
 *                            (gcc-train --export-onnx), or why none
 *
 * Every table is written with designated initializers and pinned to
 * GCC_OP_COUNT by a _Static_assert, so adding an op to the list fails to
 * compile until each table has its entry; tests/op_tables_test checks that
 * no entry is left empty. Nothing outside these tables switches over ops.
 *
 * Semantics follow ONNX operators where ONNX has one (Gemm, MatMul, Add,
 * Relu, Reshape, Flatten) and PyTorch where the op is a training construct
 * (SoftmaxCrossEntropy = nn.CrossEntropyLoss, MeanSquaredError =
 * nn.MSELoss, SGD = torch.optim.SGD, Adam = torch.optim.Adam). Softmax is
 * ONNX Softmax (opset 13: one axis, default -1); export adds it after the
 * logits of an inference graph (the `probabilities` output).
 */
#ifndef GCC_GRAPH_OPS_H
#define GCC_GRAPH_OPS_H

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the dtype and shape of every output of `node` from its inputs (and
 * checks them): GCC_ERR_SHAPE naming the node and both shapes on mismatch,
 * GCC_ERR_UNSUPPORTED for a dtype the op does not take. */
typedef gcc_status (*gcc_shape_fn)(gcc_graph *g, int node, gcc_diag *d);

/* Floating-point operations of one execution of `node` (shapes inferred):
 * 2MNK for a GEMM, about one per element for pointwise ops. For reports. */
typedef double (*gcc_flops_fn)(const gcc_graph *g, int node);

/* Schema of one attribute: name, type, whether required, default. */
typedef struct gcc_attr_spec {
  const char *name;
  gcc_attr_type type;
  int required;
  int64_t def_i;
  float def_f;
  const char *def_s;
  int is_bool;   /* an INT that must be 0 or 1 (transA, nesterov, ceil_mode) */
  int allow_inf; /* a FLOAT that may be +-Inf (Pad's value: -Inf pads a max pool; Clip's
                    bounds), never NaN; other FLOATs must be finite */
} gcc_attr_spec;

enum {
  GCC_OPF_ALIAS = 1u << 0, /* output 0 is a view of input 0 (no copy, no kernel) */
  /* updates input 0 (param) and state in place. Its one optional output
   * (n_outputs + opt_outputs) is the parameter's 16-bit copy under
   * --precision bf16|fp16 (passes/autocast.c): a persistent value
   * ("<param>.bf16", OPT_STATE) that the update writes from the updated
   * float32 weight for the next step. Like the parameter, the step reads it
   * before the update runs: it has no producer (gcc_graph_link leaves -1),
   * and every other reader comes before the update (gcc_verify). */
  GCC_OPF_OPTIMIZER = 1u << 2,
  GCC_OPF_INTERNAL = 1u << 3, /* made by passes (gradients); accepted in files too */
  GCC_OPF_LOSS = 1u << 4,     /* scalar loss of a training graph */
  GCC_OPF_COPY = 1u << 5,     /* a copy between devices, made by copy insertion */
  /* no outputs; sums its inputs (gradients) over the data-parallel ranks in
   * place, made by the all-reduce pass: every reader of an input that is not
   * its producer comes after it */
  GCC_OPF_COLLECTIVE = 1u << 6,
  /* made by a rewriting pass from a chain of ops that model files write
   * (the attention pass: MatMul -> Softmax -> MatMul becomes Attention);
   * differentiable, accepted in files too, but never in an exported
   * inference graph (which is made from the model before the passes), so
   * it needs no ONNX mapping */
  GCC_OPF_FUSED = 1u << 7,
  /* an integer output computed from a float input 0 (ArgMax / ArgMin of
   * logits): placed like the float ops, on the requested device where its
   * input is, not as host integer compute (shape arithmetic) as the other
   * ops with integer outputs are (passes/placement.c) */
  GCC_OPF_INDEX_OF_FLOAT = 1u << 8,
};

/* One op as this layer describes it (entries of graph/ops.c). */
typedef struct gcc_op_desc {
  const char *name;
  int min_inputs, max_inputs, n_outputs;
  const char *input_names; /* "A, B, C" for messages */
  const gcc_attr_spec *attrs;
  int n_attrs;
  unsigned flags;  /* GCC_OPF_* */
  int opt_outputs; /* outputs a node may add after the n_outputs required (0: none) */
  gcc_shape_fn shape;
  gcc_flops_fn flops;    /* NULL: none (views, copies) */
  const char *semantics; /* where the definition comes from */
  /* An attribute that the passes set and a model file may not (the loader
   * refuses a value other than its default, naming the node, the attribute
   * and pass_attr_why); NULL: none. BatchNormalization's `training`: its
   * training form, which autodiff sets in the training graph only. */
  const char *pass_attr, *pass_attr_why;
} gcc_op_desc;

/* X(ID, Name): the enum id and the name used in model files. */
#define GCC_OP_LIST(X)                                                                             \
  X(GEMM, Gemm)                                                                                    \
  X(MATMUL, MatMul)                                                                                \
  X(ADD, Add)                                                                                      \
  X(RELU, Relu)                                                                                    \
  X(RELU_GRAD, ReluGrad)                                                                           \
  X(IDENTITY, Identity)                                                                            \
  X(RESHAPE, Reshape)                                                                              \
  X(FLATTEN, Flatten)                                                                              \
  X(REDUCE_SUM_TO, ReduceSumTo)                                                                    \
  X(SOFTMAX_CROSS_ENTROPY, SoftmaxCrossEntropy)                                                    \
  X(SOFTMAX_CROSS_ENTROPY_GRAD, SoftmaxCrossEntropyGrad)                                           \
  X(MEAN_SQUARED_ERROR, MeanSquaredError)                                                          \
  X(MEAN_SQUARED_ERROR_GRAD, MeanSquaredErrorGrad)                                                 \
  X(SGD, SGD)                                                                                      \
  X(ADAM, Adam)                                                                                    \
  X(COPY, Copy)                                                                                    \
  X(SOFTMAX, Softmax)                                                                              \
  X(SOFTMAX_GRAD, SoftmaxGrad)                                                                     \
  X(CONV, Conv)                                                                                    \
  X(CONV_GRAD_DATA, ConvGradData)                                                                  \
  X(CONV_GRAD_FILTER, ConvGradFilter)                                                              \
  X(CONV_GRAD_BIAS, ConvGradBias)                                                                  \
  X(MAX_POOL, MaxPool)                                                                             \
  X(MAX_POOL_GRAD, MaxPoolGrad)                                                                    \
  X(AVERAGE_POOL, AveragePool)                                                                     \
  X(AVERAGE_POOL_GRAD, AveragePoolGrad)                                                            \
  X(SUB, Sub)                                                                                      \
  X(MUL, Mul)                                                                                      \
  X(DIV, Div)                                                                                      \
  X(SIGMOID, Sigmoid)                                                                              \
  X(TANH, Tanh)                                                                                    \
  X(SQRT, Sqrt)                                                                                    \
  X(LEAKY_RELU, LeakyRelu)                                                                         \
  X(CLIP, Clip)                                                                                    \
  X(LOG_SOFTMAX, LogSoftmax)                                                                       \
  X(LRN, LRN)                                                                                      \
  X(CONCAT, Concat)                                                                                \
  X(TRANSPOSE, Transpose)                                                                          \
  X(PAD, Pad)                                                                                      \
  X(CONV_TRANSPOSE, ConvTranspose)                                                                 \
  X(ALL_REDUCE, AllReduce)                                                                         \
  X(SIGMOID_GRAD, SigmoidGrad)                                                                     \
  X(TANH_GRAD, TanhGrad)                                                                           \
  X(SQRT_GRAD, SqrtGrad)                                                                           \
  X(LEAKY_RELU_GRAD, LeakyReluGrad)                                                                \
  X(CLIP_GRAD, ClipGrad)                                                                           \
  X(LOG_SOFTMAX_GRAD, LogSoftmaxGrad)                                                              \
  X(LRN_GRAD, LRNGrad)                                                                             \
  X(BATCH_NORM, BatchNormalization)                                                                \
  X(BATCH_NORM_GRAD, BatchNormGrad)                                                                \
  X(DROPOUT, Dropout)                                                                              \
  X(DROPOUT_GRAD, DropoutGrad)                                                                     \
  X(CAST, Cast)                                                                                    \
  X(AMP_NON_FINITE_CHECK, AmpNonFiniteCheck)                                                       \
  X(AMP_UPDATE_SCALE, AmpUpdateScale)                                                              \
  X(LAYER_NORM, LayerNormalization)                                                                \
  X(LAYER_NORM_GRAD, LayerNormGrad)                                                                \
  X(GATHER, Gather)                                                                                \
  X(GATHER_GRAD, GatherGrad)                                                                       \
  X(SLICE, Slice)                                                                                  \
  X(SLICE_GRAD, SliceGrad)                                                                         \
  X(EXPAND, Expand)                                                                                \
  X(GRAD_NORM, GradNorm)                                                                           \
  X(ATTENTION, Attention)                                                                          \
  X(ATTENTION_GRAD, AttentionGrad)                                                                 \
  X(GELU, Gelu)                                                                                    \
  X(GELU_GRAD, GeluGrad)                                                                           \
  X(ERF, Erf)                                                                                      \
  X(ERF_GRAD, ErfGrad)                                                                             \
  X(EXP, Exp)                                                                                      \
  X(LOG, Log)                                                                                      \
  X(NEG, Neg)                                                                                      \
  X(ABS, Abs)                                                                                      \
  X(ABS_GRAD, AbsGrad)                                                                             \
  X(POW, Pow)                                                                                      \
  X(POW_GRAD_BASE, PowGradBase)                                                                    \
  X(POW_GRAD_EXPONENT, PowGradExponent)                                                            \
  X(RECIPROCAL, Reciprocal)                                                                        \
  X(MAX, Max)                                                                                      \
  X(MIN, Min)                                                                                      \
  X(MAX_GRAD, MaxGrad)                                                                             \
  X(MIN_GRAD, MinGrad)                                                                             \
  X(ELU, Elu)                                                                                      \
  X(ELU_GRAD, EluGrad)                                                                             \
  X(SELU, Selu)                                                                                    \
  X(SELU_GRAD, SeluGrad)                                                                           \
  X(CELU, Celu)                                                                                    \
  X(CELU_GRAD, CeluGrad)                                                                           \
  X(SOFTPLUS, Softplus)                                                                            \
  X(SOFTPLUS_GRAD, SoftplusGrad)                                                                   \
  X(SOFTSIGN, Softsign)                                                                            \
  X(SOFTSIGN_GRAD, SoftsignGrad)                                                                   \
  X(THRESHOLDED_RELU, ThresholdedRelu)                                                             \
  X(THRESHOLDED_RELU_GRAD, ThresholdedReluGrad)                                                    \
  X(SIN, Sin)                                                                                      \
  X(COS, Cos)                                                                                      \
  X(PRELU, PRelu)                                                                                  \
  X(PRELU_GRAD, PReluGrad)                                                                         \
  X(PRELU_GRAD_SLOPE, PReluGradSlope)                                                              \
  X(TRILU, Trilu)                                                                                  \
  X(ARG_MAX, ArgMax)                                                                               \
  X(ARG_MIN, ArgMin)                                                                               \
  X(NLL_LOSS, NegativeLogLikelihoodLoss)                                                           \
  X(NLL_LOSS_GRAD, NegativeLogLikelihoodLossGrad)                                                  \
  X(EQUAL, Equal)                                                                                  \
  X(LESS, Less)                                                                                    \
  X(GREATER, Greater)                                                                              \
  X(LESS_OR_EQUAL, LessOrEqual)                                                                    \
  X(GREATER_OR_EQUAL, GreaterOrEqual)                                                              \
  X(NOT, Not)                                                                                      \
  X(AND, And)                                                                                      \
  X(OR, Or)                                                                                        \
  X(XOR, Xor)                                                                                      \
  X(WHERE, Where)                                                                                  \
  X(WHERE_GRAD_X, WhereGradX)                                                                      \
  X(WHERE_GRAD_Y, WhereGradY)                                                                      \
  X(GATHER_ELEMENTS, GatherElements)                                                               \
  X(GATHER_ELEMENTS_GRAD, GatherElementsGrad)                                                      \
  X(REDUCE_MIN, ReduceMin)                                                                         \
  X(REDUCE_MIN_GRAD, ReduceMinGrad)                                                                \
  X(ATTENTION_PACKED, AttentionPacked)                                                             \
  X(ATTENTION_PACKED_GRAD, AttentionPackedGrad)                                                    \
  X(GELU_AUX, GeluAux)                                                                             \
  X(LAYER_NORM_GRAD_ALL, LayerNormGradAll)

typedef enum gcc_op_id {
#define GCC_OP_ENUM(id, name) GCC_OP_##id,
  GCC_OP_LIST(GCC_OP_ENUM)
#undef GCC_OP_ENUM
      GCC_OP_COUNT
} gcc_op_id;

/* Attribute positions in gcc_node.av, per op (schema order). */
enum { GEMM_ALPHA, GEMM_BETA, GEMM_TRANS_A, GEMM_TRANS_B };
enum { RESHAPE_SHAPE };
enum { FLATTEN_AXIS };
/* ReduceSumTo: `shape` the target (broadcastable back to the input; a 0,
 * with as many dims as the input, keeps the input's dim: the symbolic
 * batch of an imported ReduceSum / ReduceMean), `scale` the factor. */
enum { REDUCE_SUM_TO_SHAPE, REDUCE_SUM_TO_SCALE };
enum { SCE_REDUCTION, SCE_IGNORE_INDEX };
enum { MSE_REDUCTION };
enum { SGD_LR, SGD_MOMENTUM, SGD_DAMPENING, SGD_WEIGHT_DECAY, SGD_NESTEROV };
enum { ADAM_LR, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAM_WEIGHT_DECAY, ADAM_DECOUPLED };
enum { COPY_ONCE };
enum { SOFTMAX_AXIS }; /* Softmax and SoftmaxGrad */

/* Conv and its gradients share the first four; ConvGradData adds the input
 * shape, ConvGradFilter the filter shape (the backward cannot infer them:
 * with stride > 1 several input sizes give the same output size). */
enum { CONV_STRIDES, CONV_PADS, CONV_DILATIONS, CONV_GROUP, CONV_KERNEL_SHAPE, CONV_SHAPE };
/* MaxPool / AveragePool and their gradients (AveragePoolGrad adds the input
 * shape; MaxPoolGrad reads X). */
enum {
  POOL_KERNEL_SHAPE,
  POOL_STRIDES,
  POOL_PADS,
  POOL_DILATIONS,
  POOL_CEIL_MODE,
  POOL_COUNT_INCLUDE_PAD,
  POOL_SHAPE
};

enum { LEAKY_RELU_ALPHA };                        /* LeakyRelu and LeakyReluGrad */
enum { CLIP_MIN, CLIP_MAX };                      /* Clip and ClipGrad */
enum { LRN_SIZE, LRN_ALPHA, LRN_BETA, LRN_BIAS }; /* LRN and LRNGrad */
/* LogSoftmaxGrad: SOFTMAX_AXIS */
/* BatchNormalization (X, scale, B, running_mean, running_var) -> Y over
 * X [N, C, D1, ...] per channel; `training` is set by autodiff (TRAIN mode),
 * never read from files. BatchNormGrad (dY, X, scale) -> dX (output = 0),
 * dscale (1) or dB (2). */
enum { BN_EPSILON, BN_MOMENTUM, BN_TRAINING };
enum { BN_GRAD_EPSILON, BN_GRAD_OUTPUT };
/* Dropout (X) -> Y, torch.nn.Dropout / ONNX Dropout-13 (float32, any
 * shape). Evaluation (`training` 0, what a model file says and what every
 * inference plan and exported bundle runs): Y = X. Training (autodiff sets
 * `training` and `key`): inverted dropout, Y = X * mask / (1 - ratio) with
 * mask ~ Bernoulli(1 - ratio) per element; ratio 0 is the identity, ratio 1
 * gives zeros (X * 0), as PyTorch. The mask is drawn from Philox-4x32-10
 * (graph/philox.h) keyed by `key` (gcc_dropout_key of the training spec's
 * seed, the node's name and `seed`) with the element index and the
 * optimizer step as counter, so the CPU and CUDA backends draw the same
 * mask, and a resumed run the masks the uninterrupted run would have.
 * `ratio` in [0, 1] (ONNX's ratio, PyTorch's p; default 0.5), `seed` the
 * node's own seed (ONNX Dropout's attribute; default 0).
 * DropoutGrad (dY) -> dX = dY * mask / (1 - ratio), the same mask
 * recomputed from `ratio` and `key` at the same step (nothing is stored). */
enum { DROPOUT_RATIO, DROPOUT_SEED, DROPOUT_TRAINING, DROPOUT_KEY };
enum { DROPOUT_GRAD_RATIO, DROPOUT_GRAD_KEY };
enum { CONCAT_AXIS };
enum { TRANSPOSE_PERM };
enum { PAD_PADS, PAD_VALUE, PAD_MODE };
/* ConvTranspose shares Conv's first five positions (strides, pads,
 * dilations, group, kernel_shape; gcc_window2d_of reads them) and adds the
 * output padding. */
enum { CONVT_OUTPUT_PADDING = CONV_KERNEL_SHAPE + 1 };
/* AllReduce: the bucket's index (0 = reduced first) and whether the loss is
 * a mean over the batch (each rank's gradient is then weighted by its share
 * of the global batch before the sum; a sum loss is summed as it is). */
enum { ALL_REDUCE_BUCKET, ALL_REDUCE_MEAN };
/* Cast: the dtype to convert to (graph.proto DataType numbering: gcc_dtype). */
enum { CAST_TO };
/* fp16 loss scaling (graph/ir.h gcc_loss_scale; torch.amp.GradScaler).
 * AmpNonFiniteCheck (scratch, grads...) -> found_inf, a float32 scalar: 1
 * when an element of any gradient is Inf or NaN, else 0 (the check half of
 * torch._amp_foreach_non_finite_check_and_unscale_, on the scaled
 * gradients; the unscale is fused into the optimizer kernels). `scratch`
 * (2 float32-sized words, zero between steps) is the CUDA kernel's block
 * counter and flag: its blocks scan the gradients in parallel and the last
 * one to finish writes found_inf and clears the scratch; the CPU ignores
 * it.
 * AmpUpdateScale (scale, found_inf, growth_tracker, applied_steps) updates
 * its inputs in place, as torch._amp_update_scale_: found_inf != 0:
 * scale *= backoff_factor, tracker = 0; else tracker += 1 and, when it
 * reaches growth_interval, scale *= growth_factor, tracker = 0; and
 * applied_steps += 1 (the optimizer steps not skipped). Runs after every
 * update that reads the scale. */
enum { AMP_CHECK_IN_SCRATCH, AMP_CHECK_IN_GRADS };
enum { AMP_UPDATE_GROWTH_FACTOR, AMP_UPDATE_BACKOFF_FACTOR, AMP_UPDATE_GROWTH_INTERVAL };
enum { AMP_UPDATE_IN_SCALE, AMP_UPDATE_IN_FOUND_INF, AMP_UPDATE_IN_TRACKER, AMP_UPDATE_IN_STEPS };
/* SGD and Adam under loss scaling take three more inputs after their own
 * (SGD's momentum_buffer may then be omitted: -1): the scale, found_inf and
 * applied_steps. The update reads grad * (1 / scale) (1 / scale in float64,
 * rounded to float32, as GradScaler's inv_scale), does nothing when
 * found_inf != 0, and takes applied_steps as its step count (Adam's bias
 * corrections with t = applied_steps + 1; SGD's first momentum step when it
 * is 0). */
enum { SGD_IN_SCALER = 3, ADAM_IN_SCALER = 4 };
/* Gather (data, indices) -> Y, ONNX Gather-13 (torch.index_select; with
 * axis 0 of a [V, C] table and [B, T] ids, nn.Embedding's lookup): data of
 * rank r >= 1 (float32, int64, int32; float16 / bfloat16 under autocast),
 * indices int64 or int32 of any shape q, Y = data.shape[:axis] + q +
 * data.shape[axis + 1:], Y[o, j, i] = data[o, idx[j], i] with a negative
 * index counting from the end (idx + data.dims[axis]). An index outside
 * [-dims[axis], dims[axis]) is an error when the step runs
 * (GCC_ERR_INVALID_ARGUMENT naming the node and the index's position), never
 * a read outside data.
 * GatherGrad (dY, indices) -> dX of `shape` (data's shape), the adjoint:
 * zeros, then dX[o, idx[j], i] += dY[o, j, i] for every j in index order (a
 * deterministic scatter-add, torch.Tensor.index_add_ / embedding_backward);
 * float32 only. */
enum { GATHER_AXIS };
enum { GATHER_GRAD_AXIS, GATHER_GRAD_SHAPE };
/* GatherElements (data, indices) -> Y, ONNX GatherElements-13
 * (torch.gather(data, axis, indices)): data of rank r >= 1 (any dtype Gather
 * takes, bool too), indices int64 or int32 of the same rank with
 * indices.dims[k] <= data.dims[k] for k != axis, Y of indices' shape and
 * data's dtype, Y[c] = data[c with c[axis] replaced by idx[c]]; a negative
 * index counts from the end (idx + data.dims[axis]). An index outside
 * [-dims[axis], dims[axis]) is an error when the step runs
 * (GCC_ERR_INVALID_ARGUMENT naming the node and the index's position, as
 * Gather's), never a read outside data.
 * GatherElementsGrad (dY, indices) -> dX of `shape` (data's shape), the
 * adjoint: zeros, then dX[c with c[axis] = idx[c]] += dY[c] for every c of
 * dY in row-major order (a deterministic scatter-add: torch.Tensor.
 * scatter_add_, gather's backward); float32 only. */
enum { GATHER_ELEMENTS_AXIS };
enum { GATHER_ELEMENTS_GRAD_AXIS, GATHER_ELEMENTS_GRAD_SHAPE };
/* ReduceMin (X) -> Y, ONNX ReduceMin-13 with the axes an attribute
 * (torch.amin(X, axes, keepdim)): X float32 of rank >= 1, `axes` the
 * reduced dims (at least one, each once, negative counting from the end),
 * Y the minimum over them, those dims kept as 1 (keepdims 1) or removed
 * (0). A NaN in a group makes its minimum NaN (torch.amin).
 * ReduceMinGrad (dY, X, Y) -> dX of X's shape, same attributes: PyTorch's
 * amin backward, the gradient split evenly among the tied minima:
 * dX = X == Y ? dY / count : 0, count the number of elements of X's group
 * equal to its minimum. float32. */
enum { REDUCE_MIN_AXES, REDUCE_MIN_KEEPDIMS };
/* A ReduceMin or ReduceMinGrad node's axes (attributes resolved: av) over
 * an input of shape `x`: red[i] = 1 for each reduced dim of x, *y the
 * output shape (keepdims applied). GCC_ERR_SHAPE naming `source` and the
 * node for no axes, an axis out of range or repeated, a reduced dim that
 * is empty or symbolic. */
gcc_status gcc_reduce_min_resolve(const gcc_node *n, const char *source, const gcc_shape *x,
                                  int *red, gcc_shape *y, gcc_diag *d);
/* Slice (X) -> Y, ONNX Slice-13 with starts, ends, axes and steps as
 * attributes (torch's x[a:b:s] on several dims; any dtype Concat takes):
 * along axes[k] (default 0, 1, ...; negative counts from the end) the
 * elements start, start + step, ... before end, with ONNX's clamping
 * (negative starts and ends count from the end, then are clamped to
 * [0, dim] for a positive step and [-1, dim - 1] for a negative one; step
 * != 0). A symbolic batch dim may only be kept whole (start 0, end >= the
 * largest int32, step 1). An empty result is an error.
 * SliceGrad (dY) -> dX of `shape` (X's shape), same attributes: zeros with
 * dY scattered at the sliced positions (the adjoint; no two positions
 * coincide, so it is a plain copy: deterministic). float32 only. */
enum { SLICE_STARTS, SLICE_ENDS, SLICE_AXES, SLICE_STEPS, SLICE_SHAPE };
/* Expand (X[, like]) -> Y, ONNX Expand-13 with the shape as an attribute
 * (torch.Tensor.expand, copied): Y's shape is the numpy broadcast of X's
 * shape and `shape` (a 1 in either keeps the other's dim), any dtype
 * Concat takes. An entry 0 of `shape` is the batch size: dim 0 of `like`
 * (a graph input whose dim 0 is the symbolic batch; only its shape is
 * read, never its data), as ViT's class token is expanded to the batch.
 * Its gradient is ReduceSumTo (dY summed back to X's shape). */
enum { EXPAND_SHAPE };

/* A Slice or SliceGrad node's resolved slice (attributes resolved: av) of
 * an input of shape `x`: per dim of x, the first element (start), the step
 * (1 on dims not sliced) and the output dim (*y). GCC_ERR_SHAPE naming
 * `source` and the node for a step of 0, an axis out of range or repeated,
 * a partial slice of a symbolic dim, an empty result. */
gcc_status gcc_slice_resolve(const gcc_node *n, const char *source, const gcc_shape *x,
                             int64_t *start, int64_t *step, gcc_shape *y, gcc_diag *d);
/* Gelu (X) -> Y and GeluGrad (dY, X) -> dX: `approximate` "none" (the erf
 * form, ONNX Gelu-20's default, torch.nn.GELU()) or "tanh"
 * (torch.nn.GELU(approximate='tanh')); gcc_gelu_is_tanh reads it. */
enum { GELU_APPROXIMATE };
/* The activations (X) -> Y, float, Y of X's shape, with their gradient ops
 * (dY, X) -> dX (formulas: graph/ops.c kOps semantics):
 *   Elu (alpha 1) = torch.nn.ELU, Selu (alpha 1.6732632, gamma 1.0507010) =
 *   torch.nn.SELU, Celu (alpha 1) = torch.nn.CELU, Softplus = log(1 + e^x)
 *   (ONNX Softplus; torch.nn.Softplus(beta 1, threshold 20) agrees to float32
 *   rounding: see graph/ops.c), Softsign = torch.nn.Softsign, ThresholdedRelu
 *   (alpha 1) = torch.nn.Threshold(alpha, 0), Sin, Cos (no gradient op: Mul
 *   with Cos / Neg(Sin)). Attribute positions: */
enum { ACT_ALPHA, ACT_GAMMA };
/* PRelu (X, slope) -> Y = X < 0 ? slope X : X, ONNX PRelu-16 / torch.nn.PReLU:
 * float, slope unidirectionally broadcast to X (torch's [C, 1, 1] for NCHW,
 * or [1]), Y of X's shape. PReluGrad (dY, X, slope) -> dX = X < 0 ? slope dY
 * : dY and PReluGradSlope (dY, X, slope) -> X < 0 ? X dY : 0, both of dY's
 * shape (the slope's gradient is the latter summed by ReduceSumTo). */
enum { SCALER_IN_SCALE, SCALER_IN_FOUND_INF, SCALER_IN_STEPS, SCALER_N_IN };
/* LayerNormalization (X, Scale, B?) -> Y (, Mean, InvStdDev), ONNX
 * LayerNormalization-17 = torch.nn.functional.layer_norm: X is seen as
 * [rows, D] with rows = X.dims[0] ... X.dims[axis - 1] and D = X.dims[axis]
 * ... X.dims[rank - 1] (`axis` in [-rank, rank), default -1); each row is
 * normalised by its mean and biased variance: Y = (X - mean) / sqrt(var +
 * epsilon) * Scale + B, Scale and B of shape X.dims[axis:] (float32). The
 * optional outputs are ONNX's Mean and InvStdDev (1 / sqrt(var + epsilon)),
 * of shape X.dims[:axis] followed by rank - axis ones, float32
 * (`stash_type` 1, the only one supported). Under --precision bf16|fp16 it
 * runs in float32, as torch.autocast's float32 list has layer_norm.
 * LayerNormGrad (dY, X, Scale) -> dX (output = 0), dScale (1) or dB (2):
 * PyTorch's native_layer_norm_backward, the row statistics recomputed from
 * X; dScale and dB are sums over the rows. */
enum { LN_AXIS, LN_EPSILON, LN_STASH_TYPE };
enum { LN_GRAD_AXIS, LN_GRAD_EPSILON, LN_GRAD_OUTPUT };
/* LayerNormGradAll (dY, X, Scale [, R]) -> the outputs named by the bits of
 * `outputs` (1 dX, 2 dScale, 4 dB), in that order: the LayerNormGrad nodes
 * of one LayerNormalization as one node, made by the CPU's lowering
 * (passes/layer_norm_grad.c); each output bitwise LayerNormGrad's. With R
 * (dX's shape, float32; passes/layer_norm_grad.c's residual form) dX = R +
 * LayerNormGrad's dX (its float32 value, then the float32 add: Add's
 * bits). axis and epsilon at LayerNormGrad's positions. */
enum { LN_GRAD_ALL_OUTPUTS = LN_GRAD_EPSILON + 1 };
enum { LN_GRAD_ALL_DX = 1, LN_GRAD_ALL_DSCALE = 2, LN_GRAD_ALL_DB = 4 };
enum { LN_GRAD_ALL_IN_DY, LN_GRAD_ALL_IN_X, LN_GRAD_ALL_IN_SCALE, LN_GRAD_ALL_IN_R };
enum { LN_OUT_Y, LN_OUT_MEAN, LN_OUT_INV_STD_DEV };

/* The [rows, D] view of a LayerNormalization / LayerNormGrad node's X of
 * shape `x` with attribute axis `axis` (negative from the end, already
 * checked by the shape function): *axis_out in [0, rank). */
void gcc_layer_norm_dims(const gcc_shape *x, int64_t axis, int64_t *rows, int64_t *d,
                         int *axis_out);
/* Gradient clipping (--clip-grad-norm; torch.nn.utils.clip_grad_norm_).
 * GradNorm ([scale,] grads...) -> out, float32 (2): out[0] the L2 norm of
 * all the float32 gradients together, sqrt(sum of g^2) accumulated in
 * float64 (torch's total_norm is the norm of the per-tensor float32 norms:
 * equal to rounding), out[1] the clip coefficient min(1, (1 / (out[0] +
 * 1e-6)) * max_norm) in float32 as clip_grad_norm_ computes it (NaN when
 * the norm is). `scaled` (fp16 loss scaling): input 0 is the loss scale and
 * each gradient element is unscaled first, g * inv_scale in float32 with
 * inv_scale = 1 / scale in float64 rounded to float32 (scaler.unscale_
 * before clip_grad_norm_); a step with an Inf/NaN gradient is skipped by
 * the updates whatever the coefficient. On CUDA a grid of at most
 * GRAD_NORM_MAX_BLOCKS blocks writes its per-block partial sums and one
 * block adds them in a fixed tree (deterministic, no atomics).
 * SGD and Adam take the GradNorm output as one more input after the
 * scaler's three (those -1 when there is no loss scaling): the update
 * reads grad * inv_scale * out[1]. */
enum { GRAD_NORM_MAX_NORM, GRAD_NORM_SCALED };
enum { GRAD_NORM_MAX_BLOCKS = 1024 };
enum { SGD_IN_CLIP = SGD_IN_SCALER + SCALER_N_IN, ADAM_IN_CLIP = ADAM_IN_SCALER + SCALER_N_IN };

/* Trilu (X) -> Y, ONNX Trilu-14 with k as an attribute (torch.triu /
 * torch.tril): X of rank >= 2 (float32, int64, int32; float16 / bfloat16
 * under autocast), Y of X's shape; over the last two dims [.., r, c],
 * `upper` 1 keeps the elements with c - r >= k and zeros the others, `upper`
 * 0 keeps c - r <= k. k may be any integer (a diagonal outside the matrix
 * keeps all or nothing). Its gradient is Trilu of dY (same attributes). */
enum { TRILU_UPPER, TRILU_K };
/* ArgMax / ArgMin (X) -> Y, ONNX ArgMax-13 / ArgMin-13 (torch.argmax /
 * torch.argmin with keepdim): the int64 position along `axis` (negative
 * counts from the end) of the largest / smallest element of X (float32,
 * int64, int32); Y is X's shape with that dim 1 (`keepdims` 1) or removed
 * (0). Ties go to the first position, or to the last with
 * `select_last_index` 1. A NaN compares above every number for ArgMax and
 * below for ArgMin (so the first NaN wins, as numpy and PyTorch). No
 * gradient (an integer output). */
enum { ARG_AXIS, ARG_KEEPDIMS, ARG_SELECT_LAST_INDEX };

/* Scaled dot-product attention, torch.nn.functional.scaled_dot_product_attention
 * (dropout_p = 0; enable_gqa = False) computed flash-attention style: the
 * (B, H, Tq, Tk) scores are never stored (FlashAttention-2's online
 * softmax over key blocks).
 *   Attention (Q, K, V [, mask]) -> O, L
 *     Q [B, H, Tq, D], K [B, H, Tk, D], V [B, H, Tk, Dv] (float32; rank 3
 *     [N, T, D] is read as H = 1, rank 2 [T, D] as B = H = 1; leading dims
 *     equal, no broadcast);
 *     mask (optional) broadcastable to [B, H, Tq, Tk] (each dim 1 or full,
 *     right-aligned), float32, added to the scaled scores (-Inf masks; a
 *     PyTorch boolean attn_mask is where(mask, 0, -Inf): the IR has no
 *     boolean dtype).
 *     O [B, H, Tq, Dv] = softmax(Q K^T * scale + mask) V; L [B, H, Tq] the
 *     natural logsumexp of each row of the masked, scaled scores (kept for
 *     the backward, as FlashAttention-2's softmax_lse). `is_causal`:
 *     PyTorch's top-left alignment, query i sees keys j <= i (with Tq > Tk
 *     too). `scale`: 0 (the default) means 1 / sqrt(D), PyTorch's
 *     scale = None. A row whose keys are all masked gives O = 0 and L = -Inf
 *     (the flash kernels' and PyTorch's math backend's answer since 2.5).
 *     `dropout_p` in [0, 1) (PyTorch's dropout_p, default 0), `seed` the
 *     node's own seed, `training` and `key` as Dropout's (set by autodiff's
 *     training form, never read from files): in evaluation (`training` 0,
 *     what files say and every inference plan runs) no dropout. In training,
 *     O = (D(P)) V with P = softmax(Q K^T * scale + mask) and D exactly
 *     Dropout (ratio dropout_p, the same key) on the [B, H, Tq, Tk] P:
 *     element (b, h, i, j), flat index f = ((b H + h) Tq + i) Tk + j, takes
 *     word f % 4 of gcc_dropout_block(key, f / 4, step), kept iff >=
 *     gcc_dropout_threshold(p), scaled by gcc_dropout_scale(p); so the fused
 *     op equals MatMul -> Softmax -> Dropout -> MatMul. L is that of the
 *     un-dropped P (dropout follows the normalisation).
 *   AttentionGrad (Q, K, V, O, L, dO [, mask]) -> dQ, dK, dV: FlashAttention-2's
 *     backward (P recomputed per block from L, D_i = rowsum(dO * O),
 *     dS = P (dP - D_i)); is_causal and scale as the forward's, dropout_p
 *     (0 in evaluation) and key: with dropout, D_i = rowsum(dO * O) of the
 *     dropped O, dV = (mask scale P)^T dO, dP = mask scale (dO V^T), the
 *     mask redrawn at the same step (nothing stored). The mask gets no
 *     gradient. */
/* NegativeLogLikelihoodLoss (input, target[, weight]) -> loss, ONNX
 * NegativeLogLikelihoodLoss-13/22 = torch.nn.functional.nll_loss: input
 * float32 (N, C) or (N, C, d1, ..., dk) (log-probabilities, class axis 1),
 * target int64 or int32 (N) or (N, d1, ..., dk), weight float32 (C)
 * (default all ones). With D = d1 * ... * dk and t = target[n, j]:
 * loss[n, j] = -weight[t] * input[n, t, j], and 0 (weight 0) where t equals
 * ignore_index. reduction "none": the loss of target's shape; "sum": the
 * scalar sum; "mean": the scalar sum / the sum of weight[t] over the
 * targets that are not ignored (0 / 0 = NaN when all are ignored, as
 * PyTorch and ONNX's reference give). ignore_index NLL_NO_IGNORE (the
 * default): none ignored (ONNX's attribute absent). A target outside
 * [0, C) that is not ignore_index is an error when the step runs
 * (GCC_ERR_INVALID_ARGUMENT naming the node and the target's position;
 * on a GPU the bad-label flag, as Gather's), never a read outside input.
 * Sums are float64 in a fixed order (run-to-run bitwise equal).
 * NegativeLogLikelihoodLossGrad (dY, target[, weight]) -> dInput of
 * `shape` (the input's shape): zeros, and at [n, t, j] for every target
 * not ignored -weight[t] * g with g = dY[n, j] ("none"), dY ("sum"),
 * dY / (sum of the weights of the targets not ignored) ("mean"). */
enum { NLL_REDUCTION, NLL_IGNORE_INDEX };
enum { NLL_GRAD_REDUCTION, NLL_GRAD_IGNORE_INDEX, NLL_GRAD_SHAPE };
#define NLL_NO_IGNORE INT64_MIN
enum { ATTN_IS_CAUSAL, ATTN_SCALE, ATTN_DROPOUT_P, ATTN_SEED, ATTN_TRAINING, ATTN_KEY };
enum { ATTN_GRAD_DROPOUT_P = ATTN_DROPOUT_P, ATTN_GRAD_KEY };
enum { ATTN_IN_Q, ATTN_IN_K, ATTN_IN_V, ATTN_IN_MASK };
enum {
  ATTN_GRAD_IN_Q,
  ATTN_GRAD_IN_K,
  ATTN_GRAD_IN_V,
  ATTN_GRAD_IN_O,
  ATTN_GRAD_IN_L,
  ATTN_GRAD_IN_DO,
  ATTN_GRAD_IN_MASK
};

/* The geometry of an Attention / AttentionGrad node, read as 4-D: batch b,
 * heads h, rows tq, keys tk, head dims d (Q, K) and dv (V, O); the mask's
 * element strides over (b, h, i, j), 0 on a broadcast dim; has_mask, causal
 * and the resolved scale. */
typedef struct gcc_attn_geo {
  int64_t b, h, tq, tk, d, dv;
  int64_t ms_b, ms_h, ms_i, ms_j;
  int has_mask, causal;
  float scale;
} gcc_attn_geo;

/* Fills *a from the shapes of Q, K, V and the mask (NULL: none) and the
 * node's resolved attributes (is_causal, scale), for an Attention or
 * AttentionGrad node whose shapes were checked by shape inference. */
void gcc_attn_geometry(const gcc_shape *q, const gcc_shape *k, const gcc_shape *v,
                       const gcc_shape *mask, const gcc_node *n, gcc_attn_geo *a);

/* AttentionPacked (QKV [..., 3 H D] -> O [..., H D], L [B, H, T]) and
 * AttentionPackedGrad (QKV, O, L, dO -> dQKV): Attention's / AttentionGrad's
 * attributes at the same positions, then heads H and seq T; the rows of
 * QKV (the product of its leading dims) are B T, batch-major. */
enum { ATTN_PACKED_HEADS = ATTN_KEY + 1, ATTN_PACKED_SEQ };
enum { ATTN_PACKED_GRAD_HEADS = ATTN_GRAD_KEY + 1, ATTN_PACKED_GRAD_SEQ };
enum {
  ATTN_PACKED_GRAD_IN_QKV,
  ATTN_PACKED_GRAD_IN_O,
  ATTN_PACKED_GRAD_IN_L,
  ATTN_PACKED_GRAD_IN_DO
};

/* The geometry of an AttentionPacked / AttentionPackedGrad node from QKV's
 * shape and its attributes heads (at position iheads) and seq (iseq):
 * b = rows / seq, h = heads, tq = tk = seq, d = dv = last / (3 heads), no
 * mask. For a node whose shapes were checked. */
void gcc_attn_packed_geometry(const gcc_shape *qkv, const gcc_node *n, int iheads, int iseq,
                              gcc_attn_geo *a);

/* The 2-D window of a Conv, MaxPool or AveragePool node (or of their
 * gradient nodes), attributes resolved: kernel (kh, kw), strides, ONNX pads
 * (top, left, bottom, right) and dilations. For Conv the kernel comes from
 * the filter W [M, C, kh, kw] (`kernel` argument: its dims 2 and 3). */
typedef struct gcc_window2d {
  int64_t kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
} gcc_window2d;

/* Fills *w from node `node`'s resolved attributes; kh/kw from kernel_shape
 * (pools) or from `filter` (conv ops, may be NULL for pools). */
void gcc_window2d_of(const gcc_node *n, const gcc_shape *filter, gcc_window2d *w);

/* ONNX/PyTorch output size of one spatial dim (ceil_mode = 0):
 * floor((in + pad0 + pad1 - dil * (k - 1) - 1) / stride) + 1; <= 0 when the
 * (dilated) kernel does not fit in the padded input. */
int64_t gcc_window_out_dim(int64_t in, int64_t k, int64_t stride, int64_t pad0, int64_t pad1,
                           int64_t dil);

/* 1 when the Gelu / GeluGrad node's resolved `approximate` is "tanh", 0
 * for "none" (the shape function refuses any other value). */
int gcc_gelu_is_tanh(const gcc_node *n);

/* Comparisons and logic (graph/ops_shape_logic.c), numpy / ONNX
 * multidirectional broadcasting, outputs bool (GCC_DT_BOOL: one byte, 0 or
 * 1):
 *   Equal, Less, Greater, LessOrEqual, GreaterOrEqual (A, B) -> C: ONNX
 *   Equal-13 / Less-13 / Greater-13 / LessOrEqual-16 / GreaterOrEqual-16
 *   (torch.eq, lt, gt, le, ge): A and B of one dtype, float32 (16-bit floats
 *   are compared in float32 under --precision), int64 or int32; Equal also
 *   takes bool. A NaN compares false (Equal too). Not differentiable: they
 *   have no gradient rule, so autodiff treats C as a constant.
 *   Not (X) -> Y, And / Or / Xor (A, B) -> C: bool in, bool out (ONNX Not-1,
 *   And-7, Or-7, Xor-7; torch.logical_not, logical_and, ...).
 * Where (cond, X, Y) -> Z = cond ? X : Y, ONNX Where-16 (torch.where):
 * cond bool, X and Y of one dtype (float32, int64, int32 or bool), the
 * three broadcast together. Its gradient: WhereGradX (cond, dZ) = cond ? dZ
 * : 0 and WhereGradY (cond, dZ) = cond ? 0 : dZ (float32, dZ's shape, cond
 * broadcast to it), each then summed by ReduceSumTo to X's / Y's shape
 * (torch's where backward). */

/* The descriptor of op `op` (0 <= op < GCC_OP_COUNT). */
const gcc_op_desc *gcc_op(int op);
/* The op's name ("Gemm"), "?" when out of range. */
const char *gcc_op_name(int op);
/* The op called `name` (exact, case-sensitive, as ONNX), or -1. */
int gcc_op_lookup(const char *name);

/* Checks `node`'s arity and attributes against its op's schema and fills
 * node->av (schema order, defaults applied). Errors (GCC_ERR_INVALID_GRAPH):
 * wrong number of inputs or outputs, a missing required attribute, an
 * attribute of the wrong type, an unknown attribute. Messages name the node. */
gcc_status gcc_op_resolve_attrs(gcc_graph *g, int node, gcc_diag *d);

/* Runs gcc_op_resolve_attrs and the shape function of every node, in node
 * order (the graph must be topologically sorted), then checks that every
 * graph output has a known shape. */
gcc_status gcc_infer_shapes(gcc_graph *g, gcc_diag *d);

/* Floating-point operations of one run of `node` (0 if the op has none). */
double gcc_op_flops(const gcc_graph *g, int node);

/* Numpy-style broadcast of a and b into out (ONNX multidirectional
 * broadcasting); 0 if incompatible. */
int gcc_broadcast_shapes(const gcc_shape *a, const gcc_shape *b, gcc_shape *out);

#ifdef __cplusplus
}
#endif

#endif /* GCC_GRAPH_OPS_H */
