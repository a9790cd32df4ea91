/*
 * cpu_ops.c - the CPU backend's op table: the kernel (runtime/cpu/cpu_kernels.c)
 * that runs each op of graph/ops.h, the scratch memory it needs, and for
 * GEMMs, convolutions and poolings the oneDNN primitive prepared per node
 * (runtime/cpu/cpu_dnnl.c) that runs instead of the kernel where it covers
 * the node.
 */
#include <stddef.h>

#include "graph/ops.h"
#include "runtime/cpu/cpu_attention.h"
#include "runtime/cpu/cpu_bnorm.h"
#include "runtime/cpu/cpu_dnnl.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_norm.h"

_Static_assert(GCC_OP_COUNT == 124, "a new op: add its CPU kernel to kCpuOps");

static const gcc_cpu_op kCpuOps[GCC_OP_COUNT] = {
    [GCC_OP_GEMM] = {.kernel = gcc_cpu_gemm, .prepare = gcc_cpu_dnnl_gemm_prepare},
    [GCC_OP_MATMUL] = {.kernel = gcc_cpu_matmul, .prepare = gcc_cpu_dnnl_matmul_prepare},
    [GCC_OP_ADD] = {.kernel = gcc_cpu_add},
    [GCC_OP_RELU] = {.kernel = gcc_cpu_relu},
    [GCC_OP_RELU_GRAD] = {.kernel = gcc_cpu_relu_grad},
    [GCC_OP_IDENTITY] = {.kernel = gcc_cpu_identity},
    [GCC_OP_RESHAPE] = {.view = 1},
    [GCC_OP_FLATTEN] = {.view = 1},
    [GCC_OP_REDUCE_SUM_TO] = {.kernel = gcc_cpu_reduce_sum_to},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY] = {.kernel = gcc_cpu_sce},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD] = {.kernel = gcc_cpu_sce_grad},
    [GCC_OP_MEAN_SQUARED_ERROR] = {.kernel = gcc_cpu_mse},
    [GCC_OP_MEAN_SQUARED_ERROR_GRAD] = {.kernel = gcc_cpu_mse_grad},
    [GCC_OP_SGD] = {.kernel = gcc_cpu_sgd},
    [GCC_OP_ADAM] = {.kernel = gcc_cpu_adam},
    [GCC_OP_COPY] = {.kernel = gcc_cpu_identity},
    [GCC_OP_SOFTMAX] = {.kernel = gcc_cpu_softmax},
    [GCC_OP_SOFTMAX_GRAD] = {.kernel = gcc_cpu_softmax_grad},
    [GCC_OP_CONV] = {.kernel = gcc_cpu_conv,
                     .prepare = gcc_cpu_dnnl_conv_prepare,
                     .workspace = gcc_cpu_conv_workspace,
                     .bias_after_16bit = 1},
    [GCC_OP_CONV_GRAD_DATA] = {.kernel = gcc_cpu_conv_grad_data,
                               .prepare = gcc_cpu_dnnl_conv_grad_data_prepare,
                               .workspace = gcc_cpu_conv_grad_data_workspace},
    [GCC_OP_CONV_GRAD_FILTER] = {.kernel = gcc_cpu_conv_grad_filter,
                                 .prepare = gcc_cpu_dnnl_conv_grad_filter_prepare,
                                 .workspace = gcc_cpu_conv_grad_filter_workspace},
    [GCC_OP_CONV_GRAD_BIAS] = {.kernel = gcc_cpu_conv_grad_bias},
    [GCC_OP_MAX_POOL] = {.kernel = gcc_cpu_max_pool, .prepare = gcc_cpu_dnnl_max_pool_prepare},
    [GCC_OP_MAX_POOL_GRAD] = {.kernel = gcc_cpu_max_pool_grad,
                              .prepare = gcc_cpu_dnnl_max_pool_grad_prepare},
    [GCC_OP_AVERAGE_POOL] = {.kernel = gcc_cpu_average_pool,
                             .prepare = gcc_cpu_dnnl_average_pool_prepare},
    [GCC_OP_AVERAGE_POOL_GRAD] = {.kernel = gcc_cpu_average_pool_grad,
                                  .prepare = gcc_cpu_dnnl_average_pool_grad_prepare},
    [GCC_OP_SUB] = {.kernel = gcc_cpu_sub},
    [GCC_OP_MUL] = {.kernel = gcc_cpu_mul},
    [GCC_OP_DIV] = {.kernel = gcc_cpu_div},
    [GCC_OP_SIGMOID] = {.kernel = gcc_cpu_sigmoid},
    [GCC_OP_TANH] = {.kernel = gcc_cpu_tanh},
    [GCC_OP_SQRT] = {.kernel = gcc_cpu_sqrt},
    [GCC_OP_LEAKY_RELU] = {.kernel = gcc_cpu_leaky_relu},
    [GCC_OP_CLIP] = {.kernel = gcc_cpu_clip},
    [GCC_OP_LOG_SOFTMAX] = {.kernel = gcc_cpu_log_softmax},
    [GCC_OP_LRN] = {.kernel = gcc_cpu_lrn},
    [GCC_OP_CONCAT] = {.kernel = gcc_cpu_concat},
    [GCC_OP_TRANSPOSE] = {.kernel = gcc_cpu_transpose},
    [GCC_OP_PAD] = {.kernel = gcc_cpu_pad},
    [GCC_OP_CONV_TRANSPOSE] = {.kernel = gcc_cpu_conv_transpose,
                               .workspace = gcc_cpu_conv_transpose_workspace,
                               .bias_after_16bit = 1},
    [GCC_OP_ALL_REDUCE] = {.kernel = gcc_cpu_all_reduce, .workspace = gcc_cpu_all_reduce_workspace},
    [GCC_OP_SIGMOID_GRAD] = {.kernel = gcc_cpu_sigmoid_grad},
    [GCC_OP_TANH_GRAD] = {.kernel = gcc_cpu_tanh_grad},
    [GCC_OP_SQRT_GRAD] = {.kernel = gcc_cpu_sqrt_grad},
    [GCC_OP_LEAKY_RELU_GRAD] = {.kernel = gcc_cpu_leaky_relu_grad},
    [GCC_OP_CLIP_GRAD] = {.kernel = gcc_cpu_clip_grad},
    [GCC_OP_LOG_SOFTMAX_GRAD] = {.kernel = gcc_cpu_log_softmax_grad},
    [GCC_OP_LRN_GRAD] = {.kernel = gcc_cpu_lrn_grad},
    [GCC_OP_BATCH_NORM] = {.kernel = gcc_cpu_batch_norm},
    [GCC_OP_BATCH_NORM_GRAD] = {.kernel = gcc_cpu_batch_norm_grad},
    [GCC_OP_DROPOUT] = {.kernel = gcc_cpu_dropout},
    [GCC_OP_DROPOUT_GRAD] = {.kernel = gcc_cpu_dropout_grad},
    /* converts 16-bit storage itself: the plan runs it without float32 shadows */
    [GCC_OP_CAST] = {.kernel = gcc_cpu_cast, .reads_16bit = 1},
    [GCC_OP_AMP_NON_FINITE_CHECK] = {.kernel = gcc_cpu_amp_non_finite_check},
    [GCC_OP_AMP_UPDATE_SCALE] = {.kernel = gcc_cpu_amp_update_scale},
    /* runtime/cpu/cpu_norm.c: float64 row statistics, rows over the OpenMP threads */
    [GCC_OP_LAYER_NORM] = {.kernel = gcc_cpu_layer_norm},
    [GCC_OP_LAYER_NORM_GRAD] = {.kernel = gcc_cpu_layer_norm_grad,
                                .workspace = gcc_cpu_layer_norm_grad_workspace},
    [GCC_OP_GATHER] = {.kernel = gcc_cpu_gather},
    [GCC_OP_GATHER_GRAD] = {.kernel = gcc_cpu_gather_grad},
    [GCC_OP_SLICE] = {.kernel = gcc_cpu_slice},
    [GCC_OP_SLICE_GRAD] = {.kernel = gcc_cpu_slice_grad},
    [GCC_OP_EXPAND] = {.kernel = gcc_cpu_expand},
    [GCC_OP_GRAD_NORM] = {.kernel = gcc_cpu_grad_norm},
    [GCC_OP_ATTENTION] = {.kernel = gcc_cpu_attention, .workspace = gcc_cpu_attention_workspace},
    [GCC_OP_ATTENTION_GRAD] = {.kernel = gcc_cpu_attention_grad,
                               .workspace = gcc_cpu_attention_grad_workspace},
    [GCC_OP_GELU] = {.kernel = gcc_cpu_gelu},
    [GCC_OP_GELU_GRAD] = {.kernel = gcc_cpu_gelu_grad},
    [GCC_OP_ERF] = {.kernel = gcc_cpu_erf},
    [GCC_OP_ERF_GRAD] = {.kernel = gcc_cpu_erf_grad},
    [GCC_OP_EXP] = {.kernel = gcc_cpu_exp},
    [GCC_OP_LOG] = {.kernel = gcc_cpu_log},
    [GCC_OP_NEG] = {.kernel = gcc_cpu_neg},
    [GCC_OP_ABS] = {.kernel = gcc_cpu_abs},
    [GCC_OP_ABS_GRAD] = {.kernel = gcc_cpu_abs_grad},
    [GCC_OP_POW] = {.kernel = gcc_cpu_pow},
    [GCC_OP_POW_GRAD_BASE] = {.kernel = gcc_cpu_pow_grad_base},
    [GCC_OP_POW_GRAD_EXPONENT] = {.kernel = gcc_cpu_pow_grad_exponent},
    [GCC_OP_RECIPROCAL] = {.kernel = gcc_cpu_reciprocal},
    [GCC_OP_MAX] = {.kernel = gcc_cpu_max},
    [GCC_OP_MIN] = {.kernel = gcc_cpu_min},
    [GCC_OP_MAX_GRAD] = {.kernel = gcc_cpu_max_grad},
    [GCC_OP_MIN_GRAD] = {.kernel = gcc_cpu_min_grad},
    [GCC_OP_ELU] = {.kernel = gcc_cpu_elu},
    [GCC_OP_ELU_GRAD] = {.kernel = gcc_cpu_elu_grad},
    [GCC_OP_SELU] = {.kernel = gcc_cpu_selu},
    [GCC_OP_SELU_GRAD] = {.kernel = gcc_cpu_selu_grad},
    [GCC_OP_CELU] = {.kernel = gcc_cpu_celu},
    [GCC_OP_CELU_GRAD] = {.kernel = gcc_cpu_celu_grad},
    [GCC_OP_SOFTPLUS] = {.kernel = gcc_cpu_softplus},
    [GCC_OP_SOFTPLUS_GRAD] = {.kernel = gcc_cpu_softplus_grad},
    [GCC_OP_SOFTSIGN] = {.kernel = gcc_cpu_softsign},
    [GCC_OP_SOFTSIGN_GRAD] = {.kernel = gcc_cpu_softsign_grad},
    [GCC_OP_THRESHOLDED_RELU] = {.kernel = gcc_cpu_thresholded_relu},
    [GCC_OP_THRESHOLDED_RELU_GRAD] = {.kernel = gcc_cpu_thresholded_relu_grad},
    [GCC_OP_SIN] = {.kernel = gcc_cpu_sin},
    [GCC_OP_COS] = {.kernel = gcc_cpu_cos},
    [GCC_OP_PRELU] = {.kernel = gcc_cpu_prelu},
    [GCC_OP_PRELU_GRAD] = {.kernel = gcc_cpu_prelu_grad},
    [GCC_OP_PRELU_GRAD_SLOPE] = {.kernel = gcc_cpu_prelu_grad_slope},
    [GCC_OP_TRILU] = {.kernel = gcc_cpu_trilu},
    [GCC_OP_ARG_MAX] = {.kernel = gcc_cpu_arg_max},
    [GCC_OP_ARG_MIN] = {.kernel = gcc_cpu_arg_min},
    [GCC_OP_NLL_LOSS] = {.kernel = gcc_cpu_nll_loss},
    [GCC_OP_NLL_LOSS_GRAD] = {.kernel = gcc_cpu_nll_loss_grad},
    /* runtime/cpu/cpu_logic.c */
    [GCC_OP_EQUAL] = {.kernel = gcc_cpu_equal},
    [GCC_OP_LESS] = {.kernel = gcc_cpu_less},
    [GCC_OP_GREATER] = {.kernel = gcc_cpu_greater},
    [GCC_OP_LESS_OR_EQUAL] = {.kernel = gcc_cpu_less_or_equal},
    [GCC_OP_GREATER_OR_EQUAL] = {.kernel = gcc_cpu_greater_or_equal},
    [GCC_OP_NOT] = {.kernel = gcc_cpu_not},
    [GCC_OP_AND] = {.kernel = gcc_cpu_and},
    [GCC_OP_OR] = {.kernel = gcc_cpu_or},
    [GCC_OP_XOR] = {.kernel = gcc_cpu_xor},
    [GCC_OP_WHERE] = {.kernel = gcc_cpu_where},
    [GCC_OP_WHERE_GRAD_X] = {.kernel = gcc_cpu_where_grad_x},
    [GCC_OP_WHERE_GRAD_Y] = {.kernel = gcc_cpu_where_grad_y},
    [GCC_OP_GATHER_ELEMENTS] = {.kernel = gcc_cpu_gather_elements},
    [GCC_OP_GATHER_ELEMENTS_GRAD] = {.kernel = gcc_cpu_gather_elements_grad},
    [GCC_OP_REDUCE_MIN] = {.kernel = gcc_cpu_reduce_min},
    [GCC_OP_REDUCE_MIN_GRAD] = {.kernel = gcc_cpu_reduce_min_grad},
    [GCC_OP_ATTENTION_PACKED] = {.kernel = gcc_cpu_attention_packed,
                                 .workspace = gcc_cpu_attention_packed_workspace},
    [GCC_OP_ATTENTION_PACKED_GRAD] = {.kernel = gcc_cpu_attention_packed_grad,
                                      .workspace = gcc_cpu_attention_packed_workspace},
    [GCC_OP_GELU_AUX] = {.kernel = gcc_cpu_gelu_aux},
    [GCC_OP_LAYER_NORM_GRAD_ALL] = {.kernel = gcc_cpu_layer_norm_grad_all,
                                    .workspace = gcc_cpu_layer_norm_grad_all_workspace},
};

const gcc_cpu_op *gcc_cpu_op_of(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return NULL;
  return &kCpuOps[op];
}

int gcc_cpu_supports_op(int op) {
  const gcc_cpu_op *e = gcc_cpu_op_of(op);
  return e && (e->kernel || e->view);
}

size_t gcc_cpu_workspace(const gcc_graph *g, int node) {
  const gcc_cpu_op *e = gcc_cpu_op_of(g->nodes[node].op);
  return e && e->workspace ? e->workspace(g, node) : 0;
}
