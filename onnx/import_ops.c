/*
 * import_ops.c - the ONNX op -> gcc IR mapping: one table (kOnnxOps) of op
 * types, their version histories and converters.
 *
 * A converter checks the node against the op version that applies
 * (c->ver), refuses every attribute and attribute value it does not handle,
 * tracks the output shapes (with the symbolic batch, see
 * onnx/import_internal.h) and either folds the node (its outputs become
 * constants or aliases) or emits IR nodes. Semantics are ONNX's operator
 * documentation (docs/Operators.md and docs/Changelog.md of the ONNX
 * repository) for each version.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

/* ---- the table ---------------------------------------------------------------- */

/* Alphabetical. versions: ONNX's since_version history of the op up to
 * opset 21 (onnx.defs.get_all_schemas_with_history). */
static const onnx_op_map kOnnxOps[] = {
    {"Abs", {1, 6, 13}, cv_abs, "Abs"},
    {"Add", {1, 6, 7, 13, 14}, cv_add, "Add"},
    {"ArgMax", {1, 11, 12, 13}, cv_arg_max, "ArgMax"},
    {"ArgMin", {1, 11, 12, 13}, cv_arg_min, "ArgMin"},
    {"And", {1, 7}, cv_and, "And (folded for constants)"},
    {"AveragePool",
     {1, 7, 10, 11, 19},
     cv_avgpool,
     "AveragePool (Pad + AveragePool + Mul for ceil_mode)"},
    {"BatchNormalization", {1, 6, 7, 9, 14, 15}, cv_batchnorm, "folded into Conv, or Mul + Add"},
    {"Cast", {1, 6, 9, 13, 19, 21}, cv_cast, "folded (constants and shapes), or the identity"},
    {"CastLike", {15, 19, 21}, cv_cast_like, "folded (constants and shapes), or Cast"},
    {"Celu", {12}, cv_celu, "Celu"},
    {"Clip", {1, 6, 11, 12, 13}, cv_clip, "Clip"},
    {"Concat", {1, 4, 11, 13}, cv_concat, "Concat (folded for constants)"},
    {"Constant", {1, 9, 11, 12, 13, 19, 21}, cv_constant, "folded"},
    {"ConstantOfShape", {9, 20, 21}, cv_constant_of_shape, "folded"},
    {"Conv", {1, 11}, cv_conv, "Conv"},
    {"ConvTranspose", {1, 11}, cv_conv_transpose, "ConvTranspose"},
    {"Cos", {7}, cv_cos, "Cos"},
    {"Div", {1, 6, 7, 13, 14}, cv_div, "Div"},
    {"Dropout", {1, 6, 7, 10, 12, 13}, cv_dropout, "folded (identity), or Dropout to train"},
    {"Expand", {8, 13}, cv_expand, "Expand (folded for constants)"},
    {"Elu", {1, 6}, cv_elu, "Elu"},
    {"Einsum", {12}, cv_einsum, "Transpose + Reshape + MatMul + ReduceSumTo + Slice"},
    {"Equal", {1, 7, 11, 13, 19}, cv_equal, "Equal (folded for constants)"},
    {"Erf", {9, 13}, cv_erf, "Erf"},
    {"Exp", {1, 6, 13}, cv_exp, "Exp"},
    {"Flatten", {1, 9, 11, 13, 21}, cv_flatten, "Reshape"},
    {"Gather", {1, 11, 13}, cv_gather, "Gather (folded for constants)"},
    {"GatherElements", {11, 13}, cv_gather_elements, "GatherElements"},
    {"GatherND", {11, 12, 13}, cv_gather_nd, "Gather (one index per tuple, batch_dims 0)"},
    {"Gelu", {20}, cv_gelu, "Gelu"},
    {"Gemm", {1, 6, 7, 9, 11, 13}, cv_gemm, "Gemm"},
    {"GlobalAveragePool", {1}, cv_global_avgpool, "AveragePool"},
    {"GlobalMaxPool", {1}, cv_global_maxpool, "MaxPool"},
    {"Greater", {1, 7, 9, 13}, cv_greater, "Greater (folded for constants)"},
    {"GreaterOrEqual", {12, 16}, cv_greater_or_equal, "GreaterOrEqual (folded for constants)"},
    {"HardSigmoid", {1, 6}, cv_hard_sigmoid, "Clip(Add(Mul(X, alpha), beta), 0, 1)"},
    {"HardSwish", {14}, cv_hard_swish, "Mul(X, Clip(X / 6 + 1 / 2, 0, 1))"},
    {"Identity", {1, 13, 14, 16, 19, 21}, cv_identity, "folded"},
    {"LRN", {1, 13}, cv_lrn, "LRN"},
    {"LayerNormalization", {17}, cv_layer_norm, "LayerNormalization"},
    {"LeakyRelu", {1, 6, 16}, cv_leaky_relu, "LeakyRelu"},
    {"Less", {1, 7, 9, 13}, cv_less, "Less (folded for constants)"},
    {"LessOrEqual", {12, 16}, cv_less_or_equal, "LessOrEqual (folded for constants)"},
    {"Log", {1, 6, 13}, cv_log, "Log"},
    {"LogSoftmax", {1, 11, 13}, cv_log_softmax, "LogSoftmax"},
    {"MatMul", {1, 9, 13}, cv_matmul, "MatMul"},
    {"Max", {1, 6, 8, 12, 13}, cv_max, "Max (chained, broadcast)"},
    {"MaxPool", {1, 8, 10, 11, 12}, cv_maxpool, "MaxPool (Pad + MaxPool for ceil_mode)"},
    {"Mod", {10, 13}, cv_mod, "folded (integer constants and shapes)"},
    {"Min", {1, 6, 8, 12, 13}, cv_min, "Min (chained, broadcast)"},
    {"Mul", {1, 6, 7, 13, 14}, cv_mul, "Mul"},
    {"Neg", {1, 6, 13}, cv_neg, "Neg"},
    {"NegativeLogLikelihoodLoss", {12, 13}, cv_nll_loss, "NegativeLogLikelihoodLoss"},
    {"Not", {1}, cv_not, "Not (folded for constants)"},
    {"Or", {1, 7}, cv_or, "Or (folded for constants)"},
    {"PRelu", {1, 6, 7, 9, 16}, cv_prelu, "PRelu (a 1-D slope per channel before opset 7)"},
    {"Pad", {1, 2, 11, 13, 18, 19, 21}, cv_pad, "Pad"},
    {"Pow", {1, 7, 12, 13, 15}, cv_pow, "Pow"},
    {"Range", {11}, cv_range, "folded (constants and shapes without the batch)"},
    {"Reciprocal", {1, 6, 13}, cv_reciprocal, "Reciprocal"},
    {"ReduceL1", {1, 11, 13, 18}, cv_reduce_l1, "ReduceSumTo(Abs(X))"},
    {"ReduceL2", {1, 11, 13, 18}, cv_reduce_l2, "Sqrt(ReduceSumTo(X * X))"},
    {"ReduceLogSum", {1, 11, 13, 18}, cv_reduce_log_sum, "Log(ReduceSumTo(X))"},
    {"ReduceLogSumExp",
     {1, 11, 13, 18},
     cv_reduce_log_sum_exp,
     "M + Log(ReduceSumTo(Exp(X - M))), M the maximum"},
    {"ReduceMax",
     {1, 11, 12, 13, 18, 20},
     cv_reduce_max,
     "MaxPool (spatial dims of NCHW), else -ReduceMin(-X)"},
    {"ReduceMin", {1, 11, 12, 13, 18, 20}, cv_reduce_min, "ReduceMin"},
    {"ReduceMean",
     {1, 11, 13, 18},
     cv_reduce_mean,
     "AveragePool (spatial dims of NCHW), else ReduceSumTo"},
    {"ReduceSum", {1, 11, 13}, cv_reduce_sum, "ReduceSumTo"},
    {"ReduceSumSquare", {1, 11, 13, 18}, cv_reduce_sum_square, "ReduceSumTo(X * X)"},
    {"Relu", {1, 6, 13, 14}, cv_relu, "Relu"},
    {"Reshape", {1, 5, 13, 14, 19, 21}, cv_reshape, "Reshape"},
    {"ScatterND", {11, 13, 16, 18}, cv_scatter_nd, "folded (constants)"},
    {"Selu", {1, 6}, cv_selu, "Selu"},
    {"SequenceAt", {11}, cv_sequence_at, "Slice of the split tensor (constant positions)"},
    {"Shape", {1, 13, 15, 19, 21}, cv_shape, "folded (with the symbolic batch)"},
    {"Sigmoid", {1, 6, 13}, cv_sigmoid, "Sigmoid"},
    {"Sin", {7}, cv_sin, "Sin"},
    {"Size", {1, 13, 19, 21}, cv_size, "folded (with the symbolic batch)"},
    {"Slice", {1, 10, 11, 13}, cv_slice, "Slice (folded for constants)"},
    {"Softmax", {1, 11, 13}, cv_softmax, "Softmax"},
    {"SoftmaxCrossEntropyLoss",
     {12, 13},
     cv_softmax_cross_entropy_loss,
     "LogSoftmax (axis 1) + NegativeLogLikelihoodLoss"},
    {"Softplus", {1}, cv_softplus, "Softplus"},
    {"Softsign", {1}, cv_softsign, "Softsign"},
    {"Split", {1, 2, 11, 13, 18}, cv_split, "Slice per output (folded for constants)"},
    {"SplitToSequence",
     {11},
     cv_split_to_sequence,
     "folded (a sequence of slices, read by SequenceAt)"},
    {"Sqrt", {1, 6, 13}, cv_sqrt, "Sqrt"},
    {"Squeeze", {1, 11, 13, 21}, cv_squeeze, "Reshape"},
    {"Sub", {1, 6, 7, 13, 14}, cv_sub, "Sub"},
    {"Sum", {1, 6, 8, 13}, cv_sum, "Add"},
    {"Tanh", {1, 6, 13}, cv_tanh, "Tanh"},
    {"ThresholdedRelu", {10}, cv_thresholded_relu, "ThresholdedRelu"},
    {"Tile", {1, 6, 13}, cv_tile, "Reshape + Expand + Reshape"},
    {"Transpose", {1, 13, 21}, cv_transpose, "Transpose"},
    {"Trilu", {14}, cv_trilu, "Trilu"},
    {"Unsqueeze", {1, 11, 13, 21}, cv_unsqueeze, "Reshape"},
    {"Where", {9, 16}, cv_where, "Where (folded for constants)"},
    {"Xor", {1, 7}, cv_xor, "Xor (folded for constants)"},
};

const onnx_op_map *onnx_op_find(const char *op_type) {
  for (size_t i = 0; i < sizeof kOnnxOps / sizeof kOnnxOps[0]; i++)
    if (strcmp(kOnnxOps[i].op_type, op_type) == 0)
      return &kOnnxOps[i];
  return NULL;
}

int onnx_op_count(void) {
  return (int)(sizeof kOnnxOps / sizeof kOnnxOps[0]);
}

const onnx_op_map *onnx_op_at(int i) {
  return &kOnnxOps[i];
}
