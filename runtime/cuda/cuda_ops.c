/*
 * cuda_ops.c - the CUDA backend's per-op table (cuda_ops.h): the cuDNN call
 * of each op that codegen/lowering.c lowers to a library call.
 */
#include "runtime/cuda/cuda_ops.h"

#include <stddef.h>

#include "graph/ops.h"

#define NOT_LIBRARY "not a library call: a generated kernel, a GEMM, a view or a copy"
#define IN          GCC_CUDA_IN
#define OUT         GCC_CUDA_OUT

_Static_assert(GCC_OP_COUNT == 124, "a new op: add its entry to kCudaOps");

static const gcc_cuda_op kCudaOps[GCC_OP_COUNT] = {
    [GCC_OP_GEMM] = {.call = GCC_CUDA_CALL_NONE, .none = "a cuBLASLt GEMM (gemm_map.h)"},
    [GCC_OP_MATMUL] = {.call = GCC_CUDA_CALL_NONE, .none = "a cuBLASLt GEMM (gemm_map.h)"},
    [GCC_OP_ADD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_RELU] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_RELU_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_IDENTITY] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_RESHAPE] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_FLATTEN] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_REDUCE_SUM_TO] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_MEAN_SQUARED_ERROR] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_MEAN_SQUARED_ERROR_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SGD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ADAM] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_COPY] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SOFTMAX] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SOFTMAX_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    /* Conv (X, W, B) -> Y */
    [GCC_OP_CONV] = {.call = GCC_CUDA_CALL_CONV_FORWARD,
                     .xs = IN(0),
                     .ws = IN(1),
                     .x = IN(0),
                     .w = IN(1),
                     .b = IN(2),
                     .y = OUT(0)},
    /* ConvGradData (dY, W) -> dX */
    [GCC_OP_CONV_GRAD_DATA] = {.call = GCC_CUDA_CALL_CONV_BACKWARD_DATA,
                               .xs = OUT(0),
                               .ws = IN(1),
                               .dy = IN(0),
                               .w = IN(1),
                               .dx = OUT(0)},
    /* ConvGradFilter (dY, X) -> dW */
    [GCC_OP_CONV_GRAD_FILTER] = {.call = GCC_CUDA_CALL_CONV_BACKWARD_FILTER,
                                 .xs = IN(1),
                                 .ws = OUT(0),
                                 .dy = IN(0),
                                 .x = IN(1),
                                 .dw = OUT(0)},
    /* ConvGradBias (dY) -> dB: reads only dY, so no X and W shapes */
    [GCC_OP_CONV_GRAD_BIAS] = {.call = GCC_CUDA_CALL_CONV_BACKWARD_BIAS, .dy = IN(0), .db = OUT(0)},
    /* MaxPool (X) -> Y */
    [GCC_OP_MAX_POOL] =
        {.call = GCC_CUDA_CALL_POOL_FORWARD, .xs = IN(0), .x = IN(0), .y = OUT(0), .max_pool = 1},
    /* MaxPoolGrad (dY, X, Y) -> dX */
    [GCC_OP_MAX_POOL_GRAD] = {.call = GCC_CUDA_CALL_POOL_BACKWARD,
                              .xs = IN(1),
                              .y = IN(2),
                              .dy = IN(0),
                              .x = IN(1),
                              .dx = OUT(0),
                              .max_pool = 1},
    /* AveragePool (X) -> Y */
    [GCC_OP_AVERAGE_POOL] = {.call = GCC_CUDA_CALL_POOL_FORWARD,
                             .xs = IN(0),
                             .x = IN(0),
                             .y = OUT(0)},
    /* AveragePoolGrad (dY) -> dX: cuDNN reads neither X nor Y for averages but
     * wants pointers of their shapes: dX and dY are */
    [GCC_OP_AVERAGE_POOL_GRAD] = {.call = GCC_CUDA_CALL_POOL_BACKWARD,
                                  .xs = OUT(0),
                                  .y = IN(0),
                                  .dy = IN(0),
                                  .x = OUT(0),
                                  .dx = OUT(0)},
    [GCC_OP_SUB] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_MUL] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_DIV] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SIGMOID] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_TANH] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SQRT] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LEAKY_RELU] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_CLIP] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LOG_SOFTMAX] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LRN] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_CONCAT] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_TRANSPOSE] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_PAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    /* ConvTranspose (X, W, B) -> Y: the backward data of the convolution
     * whose input has Y's shape, so Y gives the descriptors' X shape */
    [GCC_OP_CONV_TRANSPOSE] = {.call = GCC_CUDA_CALL_CONV_TRANSPOSE,
                               .xs = OUT(0),
                               .ws = IN(1),
                               .x = IN(0),
                               .w = IN(1),
                               .b = IN(2),
                               .y = OUT(0)},
    /* every input: a gradient of the bucket, summed in place */
    [GCC_OP_ALL_REDUCE] = {.call = GCC_CUDA_CALL_ALL_REDUCE},
    [GCC_OP_SIGMOID_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_TANH_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SQRT_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LEAKY_RELU_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_CLIP_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LOG_SOFTMAX_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LRN_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_BATCH_NORM] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_BATCH_NORM_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_DROPOUT] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_DROPOUT_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_CAST] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_AMP_NON_FINITE_CHECK] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_AMP_UPDATE_SCALE] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LAYER_NORM] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LAYER_NORM_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GATHER] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GATHER_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SLICE] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SLICE_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_EXPAND] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GRAD_NORM] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    /* generated flash-attention kernels (codegen/emit_attention.c); cuDNN's
     * SDPA through the v9 graph API is the next step, once it can be checked
     * on a GPU */
    [GCC_OP_ATTENTION] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ATTENTION_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GELU] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GELU_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ERF] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ERF_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_EXP] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LOG] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_NEG] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ABS] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ABS_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_POW] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_POW_GRAD_BASE] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_POW_GRAD_EXPONENT] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_RECIPROCAL] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_MAX] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_MIN] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_MAX_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_MIN_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ELU] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ELU_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SELU] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SELU_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_CELU] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_CELU_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SOFTPLUS] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SOFTPLUS_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SOFTSIGN] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SOFTSIGN_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_THRESHOLDED_RELU] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_THRESHOLDED_RELU_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_SIN] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_COS] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_PRELU] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_PRELU_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_PRELU_GRAD_SLOPE] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_TRILU] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ARG_MAX] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ARG_MIN] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_NLL_LOSS] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_NLL_LOSS_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_EQUAL] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LESS] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GREATER] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LESS_OR_EQUAL] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GREATER_OR_EQUAL] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_NOT] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_AND] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_OR] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_XOR] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_WHERE] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_WHERE_GRAD_X] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_WHERE_GRAD_Y] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GATHER_ELEMENTS] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GATHER_ELEMENTS_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_REDUCE_MIN] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_REDUCE_MIN_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ATTENTION_PACKED] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_ATTENTION_PACKED_GRAD] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_GELU_AUX] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
    [GCC_OP_LAYER_NORM_GRAD_ALL] = {.call = GCC_CUDA_CALL_NONE, .none = NOT_LIBRARY},
};

const gcc_cuda_op *gcc_cuda_op_of(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return NULL;
  return &kCudaOps[op];
}
