/*
 * ops.c - the bottom op table: per op its name, arity, attribute schema,
 * shape and dtype inference, FLOPs and the source of its semantics. The
 * layers above keep their own tables keyed by the same enum (see ops.h);
 * nothing here knows about gradients, kernels or devices.
 */
#include "graph/ops_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table -------------------------------------------------------- */

#define F(n, def)                                                                                  \
  { n, GCC_ATTR_FLOAT, 0, 0, def, NULL, 0, 0 }
#define FINF(n, def)                                                                               \
  { n, GCC_ATTR_FLOAT, 0, 0, def, NULL, 0, 1 } /* +-Inf allowed */
#define I(n, def)                                                                                  \
  { n, GCC_ATTR_INT, 0, def, 0, NULL, 0, 0 }
#define S(n, def)                                                                                  \
  { n, GCC_ATTR_STRING, 0, 0, 0, def, 0, 0 }
#define B(n, def)                                                                                  \
  { n, GCC_ATTR_INT, 0, def, 0, NULL, 1, 0 }
#define INTS_REQ(n)                                                                                \
  { n, GCC_ATTR_INTS, 1, 0, 0, NULL, 0, 0 }
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const gcc_attr_spec kGemmAttrs[] = {F("alpha", 1.0f), F("beta", 1.0f), B("transA", 0),
                                           B("transB", 0)};
static const gcc_attr_spec kReshapeAttrs[] = {INTS_REQ("shape")};
static const gcc_attr_spec kFlattenAttrs[] = {I("axis", 1)};
static const gcc_attr_spec kReduceSumToAttrs[] = {INTS_REQ("shape"), F("scale", 1.0f)};
static const gcc_attr_spec kSceAttrs[] = {S("reduction", "mean"), I("ignore_index", -100)};
static const gcc_attr_spec kMseAttrs[] = {S("reduction", "mean")};
static const gcc_attr_spec kSgdAttrs[] = {F("lr", 0.01f), F("momentum", 0.0f), F("dampening", 0.0f),
                                          F("weight_decay", 0.0f), B("nesterov", 0)};
static const gcc_attr_spec kCopyAttrs[] = {B("once", 0)};
static const gcc_attr_spec kAllReduceAttrs[] = {I("bucket", 0), B("mean", 1)};
static const gcc_attr_spec kSoftmaxAttrs[] = {I("axis", -1)};
static const gcc_attr_spec kAttentionAttrs[] = {B("is_causal", 0),    F("scale", 0.0f),
                                                F("dropout_p", 0.0f), I("seed", 0),
                                                B("training", 0),     I("key", 0)};
static const gcc_attr_spec kAttentionGradAttrs[] = {B("is_causal", 0), F("scale", 0.0f),
                                                    F("dropout_p", 0.0f), I("key", 0)};
/* Attention's and AttentionGrad's, then heads and seq (ATTN_PACKED_HEADS) */
static const gcc_attr_spec kAttentionPackedAttrs[] = {
    B("is_causal", 0), F("scale", 0.0f), F("dropout_p", 0.0f), I("seed", 0),
    B("training", 0),  I("key", 0),      I("heads", 1),        I("seq", 1)};
static const gcc_attr_spec kAttentionPackedGradAttrs[] = {B("is_causal", 0),    F("scale", 0.0f),
                                                          F("dropout_p", 0.0f), I("key", 0),
                                                          I("heads", 1),        I("seq", 1)};
static const gcc_attr_spec kAmpUpdateAttrs[] = {F("growth_factor", GCC_SCALER_GROWTH_FACTOR),
                                                F("backoff_factor", GCC_SCALER_BACKOFF_FACTOR),
                                                I("growth_interval", GCC_SCALER_GROWTH_INTERVAL)};
static const gcc_attr_spec kGradNormAttrs[] = {F("max_norm", 1.0f), B("scaled", 0)};
static const gcc_attr_spec kAdamAttrs[] = {F("lr", 0.001f),         F("beta1", 0.9f),
                                           F("beta2", 0.999f),      F("eps", 1e-8f),
                                           F("weight_decay", 0.0f), B("decoupled_weight_decay", 0)};

#define INTS(n)                                                                                    \
  { n, GCC_ATTR_INTS, 0, 0, 0, NULL, 0, 0 }
static const gcc_attr_spec kConvAttrs[] = {INTS("strides"), INTS("pads"), INTS("dilations"),
                                           I("group", 1), INTS("kernel_shape")};
static const gcc_attr_spec kConvGradDataAttrs[] = {INTS("strides"),      INTS("pads"),
                                                   INTS("dilations"),    I("group", 1),
                                                   INTS("kernel_shape"), INTS_REQ("input_shape")};
static const gcc_attr_spec kConvGradFilterAttrs[] = {
    INTS("strides"), INTS("pads"),         INTS("dilations"),
    I("group", 1),   INTS("kernel_shape"), INTS_REQ("filter_shape")};
static const gcc_attr_spec kMaxPoolAttrs[] = {INTS_REQ("kernel_shape"), INTS("strides"),
                                              INTS("pads"), INTS("dilations"), B("ceil_mode", 0)};
static const gcc_attr_spec kAvgPoolAttrs[] = {
    INTS_REQ("kernel_shape"), INTS("strides"),   INTS("pads"),
    INTS("dilations"),        B("ceil_mode", 0), B("count_include_pad", 0)};
static const gcc_attr_spec kAvgPoolGradAttrs[] = {
    INTS_REQ("kernel_shape"), INTS("strides"),           INTS("pads"),           INTS("dilations"),
    B("ceil_mode", 0),        B("count_include_pad", 0), INTS_REQ("input_shape")};

static const gcc_attr_spec kLeakyReluAttrs[] = {F("alpha", 0.01f)};
static const gcc_attr_spec kClipAttrs[] = {FINF("min", -FLT_MAX), FINF("max", FLT_MAX)};
static const gcc_attr_spec kLrnAttrs[] = {{"size", GCC_ATTR_INT, 1, 0, 0, NULL, 0, 0},
                                          F("alpha", 1e-4f),
                                          F("beta", 0.75f),
                                          F("bias", 1.0f)};
static const gcc_attr_spec kConcatAttrs[] = {{"axis", GCC_ATTR_INT, 1, 0, 0, NULL, 0, 0}};
static const gcc_attr_spec kTransposeAttrs[] = {INTS_REQ("perm")};
static const gcc_attr_spec kPadAttrs[] = {INTS_REQ("pads"), FINF("value", 0.0f),
                                          S("mode", "constant")};
static const gcc_attr_spec kBatchNormAttrs[] = {F("epsilon", 1e-5f), F("momentum", 0.9f),
                                                B("training", 0)};
static const gcc_attr_spec kBatchNormGradAttrs[] = {F("epsilon", 1e-5f), I("output", 0)};
static const gcc_attr_spec kDropoutAttrs[] = {F("ratio", 0.5f), I("seed", 0), B("training", 0),
                                              I("key", 0)};
static const gcc_attr_spec kDropoutGradAttrs[] = {F("ratio", 0.5f), I("key", 0)};
_Static_assert(DROPOUT_RATIO == 0 && DROPOUT_GRAD_RATIO == 0, "shape_dropout reads the ratio at 0");
static const gcc_attr_spec kLayerNormAttrs[] = {I("axis", -1), F("epsilon", 1e-5f),
                                                I("stash_type", 1)};
static const gcc_attr_spec kLayerNormGradAttrs[] = {I("axis", -1), F("epsilon", 1e-5f),
                                                    I("output", 0)};
static const gcc_attr_spec kLayerNormGradAllAttrs[] = {I("axis", -1), F("epsilon", 1e-5f),
                                                       I("outputs", 7)};
_Static_assert((int)LN_AXIS == (int)LN_GRAD_AXIS && (int)LN_EPSILON == (int)LN_GRAD_EPSILON,
               "LayerNormalization and LayerNormGrad share axis and epsilon positions");
static const gcc_attr_spec kCastAttrs[] = {{"to", GCC_ATTR_INT, 1, 0, 0, NULL, 0, 0}};
static const gcc_attr_spec kGatherAttrs[] = {I("axis", 0)};
static const gcc_attr_spec kGatherGradAttrs[] = {I("axis", 0), INTS_REQ("shape")};
static const gcc_attr_spec kExpandAttrs[] = {INTS_REQ("shape")};
static const gcc_attr_spec kSliceAttrs[] = {INTS_REQ("starts"), INTS_REQ("ends"), INTS("axes"),
                                            INTS("steps")};
static const gcc_attr_spec kSliceGradAttrs[] = {INTS_REQ("starts"), INTS_REQ("ends"), INTS("axes"),
                                                INTS("steps"), INTS_REQ("shape")};
static const gcc_attr_spec kNllAttrs[] = {S("reduction", "mean"), I("ignore_index", NLL_NO_IGNORE)};
static const gcc_attr_spec kNllGradAttrs[] = {S("reduction", "mean"),
                                              I("ignore_index", NLL_NO_IGNORE), INTS_REQ("shape")};
static const gcc_attr_spec kGeluAttrs[] = {S("approximate", "none")};
/* ONNX's defaults (opset 6..22); Selu's are float32 roundings of SELU's constants */
static const gcc_attr_spec kEluAttrs[] = {F("alpha", 1.0f)};
static const gcc_attr_spec kSeluAttrs[] = {F("alpha", 1.67326319217681884765625f),
                                           F("gamma", 1.05070102214813232421875f)};
static const gcc_attr_spec kThresholdedReluAttrs[] = {F("alpha", 1.0f)};
static const gcc_attr_spec kConvTransposeAttrs[] = {INTS("strides"),      INTS("pads"),
                                                    INTS("dilations"),    I("group", 1),
                                                    INTS("kernel_shape"), INTS("output_padding")};

/* Every entry names its fields. Adding an op to GCC_OP_LIST changes
 * GCC_OP_COUNT, which fails the _Static_assert below (and the one of every
 * other per-op table: passes/grad_rules.c, runtime/cpu/cpu_ops.c,
 * codegen/lowering.c, runtime/cuda/cuda_ops.c) until each table has been
 * given the op's entry; tests/op_tables_test checks that no entry is left
 * empty. */
_Static_assert(GCC_OP_COUNT == 124, "a new op: add its entry to kOps (and to every per-op table)");

static const gcc_attr_spec kTriluAttrs[] = {B("upper", 1), I("k", 0)};
static const gcc_attr_spec kArgAttrs[] = {I("axis", 0), B("keepdims", 1),
                                          B("select_last_index", 0)};
static const gcc_attr_spec kGatherElementsAttrs[] = {I("axis", 0)};
static const gcc_attr_spec kGatherElementsGradAttrs[] = {I("axis", 0), INTS_REQ("shape")};
static const gcc_attr_spec kReduceMinAttrs[] = {INTS_REQ("axes"), B("keepdims", 1)};

static const gcc_op_desc kOps[GCC_OP_COUNT] = {
    [GCC_OP_GEMM] = {.name = "Gemm",
                     .min_inputs = 2,
                     .max_inputs = 3,
                     .n_outputs = 1,
                     .input_names = "A, B, C",
                     .attrs = kGemmAttrs,
                     .n_attrs = COUNT(kGemmAttrs),
                     .shape = shape_gemm,
                     .flops = flops_gemm,
                     .semantics = "ONNX Gemm: Y = alpha * op(A) op(B) + beta * C, C broadcast to "
                                  "(M, N)"},
    [GCC_OP_MATMUL] = {.name = "MatMul",
                       .min_inputs = 2,
                       .max_inputs = 2,
                       .n_outputs = 1,
                       .input_names = "A, B",
                       .shape = shape_matmul,
                       .flops = flops_matmul,
                       .semantics = "ONNX MatMul (numpy.matmul: 1-D operands promoted, batch dims "
                                    "broadcast)"},
    [GCC_OP_ADD] = {.name = "Add",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_add,
                    .flops = numel_out,
                    .semantics = "ONNX Add with multidirectional broadcasting"},
    [GCC_OP_RELU] = {.name = "Relu",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .shape = shape_unary_same,
                     .flops = numel_out,
                     .semantics = "ONNX Relu: max(x, 0)"},
    [GCC_OP_RELU_GRAD] = {.name = "ReluGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, Y",
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = dY where Y > 0 else 0 (PyTorch threshold_backward)"},
    [GCC_OP_IDENTITY] = {.name = "Identity",
                         .min_inputs = 1,
                         .max_inputs = 1,
                         .n_outputs = 1,
                         .input_names = "X",
                         .shape = shape_identity,
                         .semantics = "ONNX Identity (a copy into storage of its own)"},
    [GCC_OP_RESHAPE] = {.name = "Reshape",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kReshapeAttrs,
                        .n_attrs = COUNT(kReshapeAttrs),
                        .flags = GCC_OPF_ALIAS,
                        .shape = shape_reshape,
                        .semantics = "ONNX Reshape with the shape as an attribute (0 copies, -1 "
                                     "infers)"},
    [GCC_OP_FLATTEN] = {.name = "Flatten",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kFlattenAttrs,
                        .n_attrs = COUNT(kFlattenAttrs),
                        .flags = GCC_OPF_ALIAS,
                        .shape = shape_flatten,
                        .semantics = "ONNX Flatten"},
    [GCC_OP_REDUCE_SUM_TO] = {.name = "ReduceSumTo",
                              .min_inputs = 1,
                              .max_inputs = 1,
                              .n_outputs = 1,
                              .input_names = "X",
                              .attrs = kReduceSumToAttrs,
                              .n_attrs = COUNT(kReduceSumToAttrs),
                              .flags = GCC_OPF_INTERNAL,
                              .shape = shape_reduce_sum_to,
                              .flops = numel_in0,
                              .semantics = "scale * sum over the dims that broadcasting expanded "
                                           "(PyTorch sum_to_size); a 0 in `shape` keeps the "
                                           "input's dim (ONNX ReduceSum/ReduceMean import)"},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY] = {.name = "SoftmaxCrossEntropy",
                                      .min_inputs = 2,
                                      .max_inputs = 3,
                                      .n_outputs = 1,
                                      .input_names = "logits, labels, weight",
                                      .attrs = kSceAttrs,
                                      .n_attrs = COUNT(kSceAttrs),
                                      .flags = GCC_OPF_LOSS,
                                      .shape = shape_sce,
                                      .flops = flops_sce,
                                      .semantics = "torch.nn.CrossEntropyLoss (class indices, "
                                                   "weight, ignore_index, reduction mean|sum)"},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD] = {.name = "SoftmaxCrossEntropyGrad",
                                           .min_inputs = 3,
                                           .max_inputs = 4,
                                           .n_outputs = 1,
                                           .input_names = "dloss, logits, labels, weight",
                                           .attrs = kSceAttrs,
                                           .n_attrs = COUNT(kSceAttrs),
                                           .flags = GCC_OPF_INTERNAL,
                                           .shape = shape_sce_grad,
                                           .flops = flops_sce,
                                           .semantics = "gradient of CrossEntropyLoss w.r.t. "
                                                        "the logits"},
    [GCC_OP_MEAN_SQUARED_ERROR] = {.name = "MeanSquaredError",
                                   .min_inputs = 2,
                                   .max_inputs = 2,
                                   .n_outputs = 1,
                                   .input_names = "prediction, target",
                                   .attrs = kMseAttrs,
                                   .n_attrs = COUNT(kMseAttrs),
                                   .flags = GCC_OPF_LOSS,
                                   .shape = shape_mse,
                                   .flops = flops_mse,
                                   .semantics = "torch.nn.MSELoss (reduction mean|sum)"},
    [GCC_OP_MEAN_SQUARED_ERROR_GRAD] = {.name = "MeanSquaredErrorGrad",
                                        .min_inputs = 3,
                                        .max_inputs = 3,
                                        .n_outputs = 1,
                                        .input_names = "dloss, prediction, target",
                                        .attrs = kMseAttrs,
                                        .n_attrs = COUNT(kMseAttrs),
                                        .flags = GCC_OPF_INTERNAL,
                                        .shape = shape_mse_grad,
                                        .flops = flops_mse,
                                        .semantics = "gradient of MSELoss w.r.t. the "
                                                     "prediction"},
    [GCC_OP_SGD] = {.name = "SGD",
                    .min_inputs = 2,
                    .max_inputs = SGD_IN_CLIP + 1,
                    .n_outputs = 0,
                    .input_names = "param, grad, momentum_buffer, scale, found_inf, "
                                   "applied_steps",
                    .attrs = kSgdAttrs,
                    .n_attrs = COUNT(kSgdAttrs),
                    .flags = GCC_OPF_OPTIMIZER,
                    .opt_outputs = 1, /* the 16-bit copy */
                    .shape = shape_sgd,
                    .flops = flops_sgd,
                    .semantics = "torch.optim.SGD (momentum, dampening, weight_decay, "
                                 "nesterov)"},
    [GCC_OP_ADAM] = {.name = "Adam",
                     .min_inputs = 4,
                     .max_inputs = ADAM_IN_CLIP + 1,
                     .n_outputs = 0,
                     .input_names = "param, grad, exp_avg, exp_avg_sq, scale, found_inf, "
                                    "applied_steps",
                     .attrs = kAdamAttrs,
                     .n_attrs = COUNT(kAdamAttrs),
                     .flags = GCC_OPF_OPTIMIZER,
                     .opt_outputs = 1, /* the 16-bit copy */
                     .shape = shape_adam,
                     .flops = flops_adam,
                     .semantics = "torch.optim.Adam (L2 weight_decay, bias-corrected moments)"},
    [GCC_OP_COPY] = {.name = "Copy",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .attrs = kCopyAttrs,
                     .n_attrs = COUNT(kCopyAttrs),
                     .flags = GCC_OPF_COPY,
                     .shape = shape_unary_any,
                     .semantics = "a copy of X to the node's device (H2D, D2H or D2D by the "
                                  "devices); once = 1: done when the session starts, not per "
                                  "step"},
    [GCC_OP_SOFTMAX] = {.name = "Softmax",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kSoftmaxAttrs,
                        .n_attrs = COUNT(kSoftmaxAttrs),
                        .shape = shape_softmax,
                        .flops = numel_out,
                        .semantics = "ONNX Softmax (opset 13): exp(x - max) / sum exp(x - max) "
                                     "along axis (torch.softmax)"},
    [GCC_OP_SOFTMAX_GRAD] = {.name = "SoftmaxGrad",
                             .min_inputs = 2,
                             .max_inputs = 2,
                             .n_outputs = 1,
                             .input_names = "dY, Y",
                             .attrs = kSoftmaxAttrs,
                             .n_attrs = COUNT(kSoftmaxAttrs),
                             .flags = GCC_OPF_INTERNAL,
                             .shape = shape_softmax_grad,
                             .flops = numel_out,
                             .semantics = "dX = Y * (dY - sum(dY * Y) along axis) (PyTorch "
                                          "_softmax_backward_data)"},
    [GCC_OP_CONV] = {.name = "Conv",
                     .min_inputs = 2,
                     .max_inputs = 3,
                     .n_outputs = 1,
                     .input_names = "X, W, B",
                     .attrs = kConvAttrs,
                     .n_attrs = COUNT(kConvAttrs),
                     .shape = shape_conv,
                     .flops = flops_conv,
                     .semantics = "ONNX Conv, 2-D NCHW (torch.nn.Conv2d): group, strides, pads "
                                  "(top, left, bottom, right), dilations, optional bias"},
    [GCC_OP_CONV_GRAD_DATA] = {.name = "ConvGradData",
                               .min_inputs = 2,
                               .max_inputs = 2,
                               .n_outputs = 1,
                               .input_names = "dY, W",
                               .attrs = kConvGradDataAttrs,
                               .n_attrs = COUNT(kConvGradDataAttrs),
                               .flags = GCC_OPF_INTERNAL,
                               .shape = shape_conv_grad_data,
                               .flops = flops_conv_grad_data,
                               .semantics = "gradient of Conv w.r.t. X (PyTorch "
                                            "convolution_backward grad_input; "
                                            "cudnnConvolutionBackwardData)"},
    [GCC_OP_CONV_GRAD_FILTER] = {.name = "ConvGradFilter",
                                 .min_inputs = 2,
                                 .max_inputs = 2,
                                 .n_outputs = 1,
                                 .input_names = "dY, X",
                                 .attrs = kConvGradFilterAttrs,
                                 .n_attrs = COUNT(kConvGradFilterAttrs),
                                 .flags = GCC_OPF_INTERNAL,
                                 .shape = shape_conv_grad_filter,
                                 .flops = flops_conv_grad_filter,
                                 .semantics = "gradient of Conv w.r.t. W (PyTorch "
                                              "convolution_backward grad_weight; "
                                              "cudnnConvolutionBackwardFilter)"},
    [GCC_OP_CONV_GRAD_BIAS] = {.name = "ConvGradBias",
                               .min_inputs = 1,
                               .max_inputs = 1,
                               .n_outputs = 1,
                               .input_names = "dY",
                               .flags = GCC_OPF_INTERNAL,
                               .shape = shape_conv_grad_bias,
                               .flops = numel_in0,
                               .semantics = "gradient of Conv w.r.t. B: dY summed over N, H, W "
                                            "(cudnnConvolutionBackwardBias)"},
    [GCC_OP_MAX_POOL] = {.name = "MaxPool",
                         .min_inputs = 1,
                         .max_inputs = 1,
                         .n_outputs = 1,
                         .input_names = "X",
                         .attrs = kMaxPoolAttrs,
                         .n_attrs = COUNT(kMaxPoolAttrs),
                         .shape = shape_pool,
                         .flops = flops_pool,
                         .semantics = "ONNX MaxPool, 2-D NCHW, ceil_mode = 0 "
                                      "(torch.nn.MaxPool2d; padding is -inf)"},
    [GCC_OP_MAX_POOL_GRAD] = {.name = "MaxPoolGrad",
                              .min_inputs = 3,
                              .max_inputs = 3,
                              .n_outputs = 1,
                              .input_names = "dY, X, Y",
                              .attrs = kMaxPoolAttrs,
                              .n_attrs = COUNT(kMaxPoolAttrs),
                              .flags = GCC_OPF_INTERNAL,
                              .shape = shape_max_pool_grad,
                              .flops = flops_pool,
                              .semantics = "gradient of MaxPool: dY routed to the first maximum "
                                           "of each window, recomputed from X (PyTorch "
                                           "max_pool2d_with_indices_backward); Y, the forward "
                                           "output, is read by cudnnPoolingBackward"},
    [GCC_OP_AVERAGE_POOL] = {.name = "AveragePool",
                             .min_inputs = 1,
                             .max_inputs = 1,
                             .n_outputs = 1,
                             .input_names = "X",
                             .attrs = kAvgPoolAttrs,
                             .n_attrs = COUNT(kAvgPoolAttrs),
                             .shape = shape_pool,
                             .flops = flops_pool,
                             .semantics = "ONNX AveragePool, 2-D NCHW, ceil_mode = 0 "
                                          "(torch.nn.AvgPool2d; count_include_pad as ONNX, "
                                          "default 0)"},
    [GCC_OP_AVERAGE_POOL_GRAD] = {.name = "AveragePoolGrad",
                                  .min_inputs = 1,
                                  .max_inputs = 1,
                                  .n_outputs = 1,
                                  .input_names = "dY",
                                  .attrs = kAvgPoolGradAttrs,
                                  .n_attrs = COUNT(kAvgPoolGradAttrs),
                                  .flags = GCC_OPF_INTERNAL,
                                  .shape = shape_avg_pool_grad,
                                  .flops = flops_pool,
                                  .semantics = "gradient of AveragePool: dY / divisor spread "
                                               "over each window (PyTorch avg_pool2d_backward)"},
    /* ops of ONNX import: forward only (no gradient rule: training an
     * imported model is issue 15) */
    [GCC_OP_SUB] = {.name = "Sub",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_add,
                    .flops = numel_out,
                    .semantics = "ONNX Sub with multidirectional broadcasting"},
    [GCC_OP_MUL] = {.name = "Mul",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_add,
                    .flops = numel_out,
                    .semantics = "ONNX Mul with multidirectional broadcasting"},
    [GCC_OP_DIV] = {.name = "Div",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_add,
                    .flops = numel_out,
                    .semantics = "ONNX Div with multidirectional broadcasting (IEEE division)"},
    [GCC_OP_SIGMOID] = {.name = "Sigmoid",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .shape = shape_unary_same,
                        .flops = numel_out,
                        .semantics = "ONNX Sigmoid: 1 / (1 + exp(-x)) (torch.sigmoid)"},
    [GCC_OP_TANH] = {.name = "Tanh",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .shape = shape_unary_same,
                     .flops = numel_out,
                     .semantics = "ONNX Tanh (torch.tanh)"},
    [GCC_OP_SQRT] = {.name = "Sqrt",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .shape = shape_unary_same,
                     .flops = numel_out,
                     .semantics = "ONNX Sqrt (NaN for x < 0)"},
    [GCC_OP_LEAKY_RELU] = {.name = "LeakyRelu",
                           .min_inputs = 1,
                           .max_inputs = 1,
                           .n_outputs = 1,
                           .input_names = "X",
                           .attrs = kLeakyReluAttrs,
                           .n_attrs = COUNT(kLeakyReluAttrs),
                           .shape = shape_unary_same,
                           .flops = numel_out,
                           .semantics = "ONNX LeakyRelu: x < 0 ? alpha * x : x "
                                        "(torch.nn.LeakyReLU)"},
    [GCC_OP_CLIP] = {.name = "Clip",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .attrs = kClipAttrs,
                     .n_attrs = COUNT(kClipAttrs),
                     .shape = shape_unary_same,
                     .flops = numel_out,
                     .semantics = "ONNX Clip with min and max as attributes: x < min ? min : x > "
                                  "max ? max : x (NaN stays NaN; torch.clamp, ReLU6 is min 0 "
                                  "max 6)"},
    [GCC_OP_LOG_SOFTMAX] = {.name = "LogSoftmax",
                            .min_inputs = 1,
                            .max_inputs = 1,
                            .n_outputs = 1,
                            .input_names = "X",
                            .attrs = kSoftmaxAttrs,
                            .n_attrs = COUNT(kSoftmaxAttrs),
                            .shape = shape_softmax,
                            .flops = numel_out,
                            .semantics = "ONNX LogSoftmax (opset 13): x - max - log(sum exp(x - "
                                         "max)) along axis (torch.log_softmax)"},
    [GCC_OP_LRN] = {.name = "LRN",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .attrs = kLrnAttrs,
                    .n_attrs = COUNT(kLrnAttrs),
                    .shape = shape_lrn,
                    .flops = flops_lrn,
                    .semantics = "ONNX LRN: x / (bias + alpha / size * sum of x^2 over channels "
                                 "[c - (size - 1) / 2, c + size / 2])^beta "
                                 "(torch.nn.functional.local_response_norm)"},
    [GCC_OP_CONCAT] = {.name = "Concat",
                       .min_inputs = 1,
                       .max_inputs = 1 << 20, /* no limit: DenseNet-121 concatenates 25 */
                       .n_outputs = 1,
                       .input_names = "inputs",
                       .attrs = kConcatAttrs,
                       .n_attrs = COUNT(kConcatAttrs),
                       .shape = shape_concat,
                       .semantics = "ONNX Concat along axis (torch.cat)"},
    [GCC_OP_TRANSPOSE] = {.name = "Transpose",
                          .min_inputs = 1,
                          .max_inputs = 1,
                          .n_outputs = 1,
                          .input_names = "X",
                          .attrs = kTransposeAttrs,
                          .n_attrs = COUNT(kTransposeAttrs),
                          .shape = shape_transpose,
                          .semantics = "ONNX Transpose: Y.dims[i] = X.dims[perm[i]] "
                                       "(torch.permute, copied)"},
    [GCC_OP_PAD] = {.name = "Pad",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .attrs = kPadAttrs,
                    .n_attrs = COUNT(kPadAttrs),
                    .shape = shape_pad,
                    .semantics = "ONNX Pad with pads and the constant value as attributes; "
                                 "modes constant (negative pads crop), edge, reflect "
                                 "(torch.nn.functional.pad)"},
    [GCC_OP_CONV_TRANSPOSE] = {.name = "ConvTranspose",
                               .min_inputs = 2,
                               .max_inputs = 3,
                               .n_outputs = 1,
                               .input_names = "X, W, B",
                               .attrs = kConvTransposeAttrs,
                               .n_attrs = COUNT(kConvTransposeAttrs),
                               .shape = shape_conv_transpose,
                               .flops = flops_conv_transpose,
                               .semantics = "ONNX ConvTranspose, 2-D NCHW: the adjoint of Conv "
                                            "with the same window (torch.nn.ConvTranspose2d), "
                                            "groups, output_padding, optional bias"},
    [GCC_OP_ALL_REDUCE] = {.name = "AllReduce",
                           .min_inputs = 1,
                           .max_inputs = 1 << 20,
                           .n_outputs = 0,
                           .input_names = "[scale,] grads",
                           .attrs = kAllReduceAttrs,
                           .n_attrs = COUNT(kAllReduceAttrs),
                           .flags = GCC_OPF_INTERNAL | GCC_OPF_COLLECTIVE,
                           .shape = shape_all_reduce,
                           .flops = flops_all_reduce,
                           .semantics = "torch.distributed.all_reduce (ReduceOp.SUM) of one "
                                        "DistributedDataParallel gradient bucket, in place; with "
                                        "mean = 1 each rank first weights its gradients by its "
                                        "rows / the global batch, so the sum is the gradient "
                                        "of the loss averaged over the global batch"},
    [GCC_OP_SIGMOID_GRAD] = {.name = "SigmoidGrad",
                             .min_inputs = 2,
                             .max_inputs = 2,
                             .n_outputs = 1,
                             .input_names = "dY, Y",
                             .flags = GCC_OPF_INTERNAL,
                             .shape = shape_elem_grad,
                             .flops = numel_out,
                             .semantics = "dX = dY * Y * (1 - Y) (PyTorch sigmoid_backward)"},
    [GCC_OP_TANH_GRAD] = {.name = "TanhGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, Y",
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = dY * (1 - Y * Y) (PyTorch tanh_backward)"},
    [GCC_OP_SQRT_GRAD] = {.name = "SqrtGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, Y",
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = dY / (2 Y) (PyTorch: grad / (2 * result))"},
    [GCC_OP_LEAKY_RELU_GRAD] = {.name = "LeakyReluGrad",
                                .min_inputs = 2,
                                .max_inputs = 2,
                                .n_outputs = 1,
                                .input_names = "dY, X",
                                .attrs = kLeakyReluAttrs,
                                .n_attrs = COUNT(kLeakyReluAttrs),
                                .flags = GCC_OPF_INTERNAL,
                                .shape = shape_elem_grad,
                                .flops = numel_out,
                                .semantics = "dX = X < 0 ? alpha * dY : dY (the derivative of "
                                             "LeakyRelu's x < 0 ? alpha x : x)"},
    [GCC_OP_CLIP_GRAD] = {.name = "ClipGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, X",
                          .attrs = kClipAttrs,
                          .n_attrs = COUNT(kClipAttrs),
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = min <= X <= max ? dY : 0 (PyTorch clamp_backward)"},
    [GCC_OP_LOG_SOFTMAX_GRAD] = {.name = "LogSoftmaxGrad",
                                 .min_inputs = 2,
                                 .max_inputs = 2,
                                 .n_outputs = 1,
                                 .input_names = "dY, Y",
                                 .attrs = kSoftmaxAttrs,
                                 .n_attrs = COUNT(kSoftmaxAttrs),
                                 .flags = GCC_OPF_INTERNAL,
                                 .shape = shape_softmax_grad,
                                 .flops = numel_out,
                                 .semantics = "dX = dY - exp(Y) * sum(dY) along axis (PyTorch "
                                              "_log_softmax_backward_data)"},
    [GCC_OP_LRN_GRAD] = {.name = "LRNGrad",
                         .min_inputs = 3,
                         .max_inputs = 3,
                         .n_outputs = 1,
                         .input_names = "dY, X, Y",
                         .attrs = kLrnAttrs,
                         .n_attrs = COUNT(kLrnAttrs),
                         .flags = GCC_OPF_INTERNAL,
                         .shape = shape_lrn_grad,
                         .flops = flops_lrn,
                         .semantics = "the derivative of ONNX LRN: with S[c] = bias + alpha / size "
                                      "* sum of X^2 over c's window, dX[c] = dY[c] S[c]^-beta - "
                                      "2 alpha beta / size X[c] sum over the windows k that "
                                      "hold c of dY[k] Y[k] / S[k]"},
    [GCC_OP_BATCH_NORM] = {.name = "BatchNormalization",
                           .min_inputs = 5,
                           .max_inputs = 5,
                           .n_outputs = 1,
                           .input_names = "X, scale, B, running_mean, running_var",
                           .attrs = kBatchNormAttrs,
                           .n_attrs = COUNT(kBatchNormAttrs),
                           .shape = shape_batch_norm,
                           .flops = flops_batch_norm,
                           .semantics =
                               "ONNX BatchNormalization = torch.nn.BatchNorm2d (any rank >= 2, "
                               "per channel, dim 1). Evaluation: Y = scale (X - running_mean) / "
                               "sqrt(running_var + epsilon) + B. Training (`training`, set by "
                               "autodiff in the training graph only, cleared in evaluation, "
                               "refused in a model file): the batch's mean and biased variance "
                               "normalise, and "
                               "running = momentum running + (1 - momentum) batch statistic, with "
                               "the unbiased variance (n / (n - 1)) for running_var, in place "
                               "(ONNX's momentum 0.9 is PyTorch's momentum 0.1)",
                           .pass_attr = "training",
                           .pass_attr_why =
                               "autodiff sets it in the training graph only: a model file holds "
                               "the evaluation form, whose running statistics normalise and are "
                               "never updated (nn.BatchNorm2d in eval()), and gcc-train trains "
                               "it with batch statistics without the attribute"},
    [GCC_OP_BATCH_NORM_GRAD] = {.name = "BatchNormGrad",
                                .min_inputs = 3,
                                .max_inputs = 3,
                                .n_outputs = 1,
                                .input_names = "dY, X, scale",
                                .attrs = kBatchNormGradAttrs,
                                .n_attrs = COUNT(kBatchNormGradAttrs),
                                .flags = GCC_OPF_INTERNAL,
                                .shape = shape_batch_norm_grad,
                                .flops = flops_batch_norm,
                                .semantics =
                                    "the backward of training-mode BatchNormalization (PyTorch "
                                    "native_batch_norm_backward), the batch statistics recomputed "
                                    "from X: with xhat = (X - mean) invstd over the M = N D1 ... "
                                    "elements of a channel, dB = sum dY, dscale = sum dY xhat, dX "
                                    "= scale invstd / M (M dY - dB - xhat dscale)"},
    [GCC_OP_DROPOUT] = {.name = "Dropout",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kDropoutAttrs,
                        .n_attrs = COUNT(kDropoutAttrs),
                        .shape = shape_dropout,
                        .flops = numel_out,
                        .semantics =
                            "torch.nn.Dropout(p = ratio) = ONNX Dropout-13 (ratio as an "
                            "attribute). Evaluation: Y = X. Training (`training` and `key`, set "
                            "by autodiff): inverted dropout, Y = X * mask / (1 - ratio), mask ~ "
                            "Bernoulli(1 - ratio) per element drawn from Philox-4x32-10 "
                            "(graph/philox.h) keyed by `key`, counter {element / 4, step}; "
                            "ratio 0: Y = X, ratio 1: Y = X * 0"},
    [GCC_OP_DROPOUT_GRAD] = {.name = "DropoutGrad",
                             .min_inputs = 1,
                             .max_inputs = 1,
                             .n_outputs = 1,
                             .input_names = "dY",
                             .attrs = kDropoutGradAttrs,
                             .n_attrs = COUNT(kDropoutGradAttrs),
                             .flags = GCC_OPF_INTERNAL,
                             .shape = shape_dropout,
                             .flops = numel_out,
                             .semantics =
                                 "the backward of training-mode Dropout (PyTorch's "
                                 "native_dropout_backward): dX = dY * mask / (1 - ratio), the mask "
                                 "of the Dropout with this ratio and key redrawn at the same step"},
    [GCC_OP_CAST] = {.name = "Cast",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .attrs = kCastAttrs,
                     .n_attrs = COUNT(kCastAttrs),
                     /* made by the autocast pass, and imported (ONNX Cast at run time) */
                     .shape = shape_cast,
                     .flops = numel_out,
                     .semantics = "ONNX Cast between float32, float16, bfloat16, int64, int32 and "
                                  "bool (`to`: the graph.proto DataType); float32 -> 16 bits "
                                  "rounds to nearest, ties to even (PyTorch Tensor.to, CUDA "
                                  "__float2bfloat16_rn / __float2half_rn), 16 bits -> float32 is "
                                  "exact; to bool: nonzero (NaN too) is true; bool -> number: 0 "
                                  "or 1; float -> integer truncates toward zero (C, numpy)"},
    [GCC_OP_AMP_NON_FINITE_CHECK] = {.name = "AmpNonFiniteCheck",
                                     .min_inputs = 2,
                                     .max_inputs = 1 << 20,
                                     .n_outputs = 1,
                                     .input_names = "scratch, grads",
                                     .flags = GCC_OPF_INTERNAL, /* made by autodiff (fp16) */
                                     .shape = shape_amp_check,
                                     .flops = flops_amp_check,
                                     .semantics = "the found_inf of "
                                                  "torch._amp_foreach_non_finite_check_and_"
                                                  "unscale_ (torch.amp.GradScaler.unscale_): 1 "
                                                  "when any element of the scaled gradients is "
                                                  "Inf or NaN, else 0"},
    [GCC_OP_AMP_UPDATE_SCALE] = {.name = "AmpUpdateScale",
                                 .min_inputs = 4,
                                 .max_inputs = 4,
                                 .n_outputs = 0,
                                 .input_names = "scale, found_inf, growth_tracker, applied_steps",
                                 .attrs = kAmpUpdateAttrs,
                                 .n_attrs = COUNT(kAmpUpdateAttrs),
                                 /* updates its inputs in place after every other reader */
                                 .flags = GCC_OPF_OPTIMIZER | GCC_OPF_INTERNAL,
                                 .shape = shape_amp_update,
                                 .flops = flops_amp_update,
                                 .semantics = "torch._amp_update_scale_ "
                                              "(torch.amp.GradScaler.update: backoff on Inf/NaN, "
                                              "growth after growth_interval good steps), plus "
                                              "the count of optimizer steps not skipped"},
    [GCC_OP_LAYER_NORM] = {.name = "LayerNormalization",
                           .min_inputs = 2,
                           .max_inputs = 3,
                           .n_outputs = 1,
                           .opt_outputs = 2,
                           .input_names = "X, Scale, B",
                           .attrs = kLayerNormAttrs,
                           .n_attrs = COUNT(kLayerNormAttrs),
                           .shape = shape_layer_norm,
                           .flops = flops_layer_norm,
                           .semantics =
                               "ONNX LayerNormalization-17 = torch.nn.functional.layer_norm "
                               "(nn.LayerNorm): over the dims [axis, rank) of X, per row of the "
                               "leading dims, Y = (X - mean) / sqrt(var + epsilon) * Scale + B "
                               "with the row's mean and biased variance; optional outputs Mean "
                               "and InvStdDev = 1 / sqrt(var + epsilon), float32 (stash_type 1)"},
    [GCC_OP_LAYER_NORM_GRAD] = {.name = "LayerNormGrad",
                                .min_inputs = 3,
                                .max_inputs = 3,
                                .n_outputs = 1,
                                .input_names = "dY, X, Scale",
                                .attrs = kLayerNormGradAttrs,
                                .n_attrs = COUNT(kLayerNormGradAttrs),
                                .flags = GCC_OPF_INTERNAL,
                                .shape = shape_layer_norm_grad,
                                .flops = flops_layer_norm,
                                .semantics =
                                    "the backward of LayerNormalization (PyTorch "
                                    "native_layer_norm_backward), the row statistics recomputed "
                                    "from X: with xhat = (X - mean) rstd over the D elements of a "
                                    "row and g = dY Scale, dX = rstd (g - mean(g) - xhat "
                                    "mean(g xhat)) (output 0), dScale = sum over rows of dY xhat "
                                    "(1), dB = sum over rows of dY (2)"},
    [GCC_OP_GATHER] = {.name = "Gather",
                       .min_inputs = 2,
                       .max_inputs = 2,
                       .n_outputs = 1,
                       .input_names = "data, indices",
                       .attrs = kGatherAttrs,
                       .n_attrs = COUNT(kGatherAttrs),
                       .shape = shape_gather,
                       .semantics = "ONNX Gather-13 along axis (torch.index_select; axis 0 of a "
                                    "[V, C] table by [B, T] ids is nn.Embedding), negative "
                                    "indices counted from the end, an out-of-range index an "
                                    "error at run time"},
    [GCC_OP_GATHER_GRAD] = {.name = "GatherGrad",
                            .min_inputs = 2,
                            .max_inputs = 2,
                            .n_outputs = 1,
                            .input_names = "dY, indices",
                            .attrs = kGatherGradAttrs,
                            .n_attrs = COUNT(kGatherGradAttrs),
                            .flags = GCC_OPF_INTERNAL,
                            .shape = shape_gather_grad,
                            .flops = numel_in0,
                            .semantics = "the backward of Gather: zeros of data's shape, dY's "
                                         "slices added at their indices in index order (a "
                                         "deterministic scatter-add: torch index_add_, "
                                         "embedding_backward)"},
    [GCC_OP_SLICE] = {.name = "Slice",
                      .min_inputs = 1,
                      .max_inputs = 1,
                      .n_outputs = 1,
                      .input_names = "X",
                      .attrs = kSliceAttrs,
                      .n_attrs = COUNT(kSliceAttrs),
                      .shape = shape_slice,
                      .semantics = "ONNX Slice-13 with starts, ends, axes and steps as attributes "
                                   "(torch x[a:b:s]), ONNX's clamping of out-of-range bounds"},
    [GCC_OP_SLICE_GRAD] = {.name = "SliceGrad",
                           .min_inputs = 1,
                           .max_inputs = 1,
                           .n_outputs = 1,
                           .input_names = "dY",
                           .attrs = kSliceGradAttrs,
                           .n_attrs = COUNT(kSliceGradAttrs),
                           .flags = GCC_OPF_INTERNAL,
                           .shape = shape_slice_grad,
                           .semantics = "the backward of Slice: zeros of X's shape with dY at the "
                                        "sliced positions (torch slice_backward)"},
    [GCC_OP_EXPAND] = {.name = "Expand",
                       .min_inputs = 1,
                       .max_inputs = 2,
                       .n_outputs = 1,
                       .input_names = "X, like",
                       .attrs = kExpandAttrs,
                       .n_attrs = COUNT(kExpandAttrs),
                       .shape = shape_expand,
                       .semantics = "ONNX Expand-13 with the shape as an attribute: X broadcast "
                                    "(numpy rules) with `shape` (torch.Tensor.expand, copied)"},
    [GCC_OP_GRAD_NORM] = {.name = "GradNorm",
                          .min_inputs = 1,
                          .max_inputs = 1 << 20,
                          .n_outputs = 1,
                          .input_names = "grads",
                          .attrs = kGradNormAttrs,
                          .n_attrs = COUNT(kGradNormAttrs),
                          .flags = GCC_OPF_INTERNAL, /* made by autodiff (--clip-grad-norm) */
                          .shape = shape_grad_norm,
                          .flops = flops_grad_norm,
                          .semantics = "torch.nn.utils.clip_grad_norm_(grads, max_norm) without "
                                       "the in-place multiply: [total L2 norm, clip coefficient "
                                       "min(1, max_norm / (norm + 1e-6))] in float32; the "
                                       "optimizer updates multiply each gradient by the "
                                       "coefficient as they read it"},
    [GCC_OP_ATTENTION] = {.name = "Attention",
                          .min_inputs = 3,
                          .max_inputs = 4,
                          .n_outputs = 2,
                          .input_names = "Q, K, V, mask",
                          .attrs = kAttentionAttrs,
                          .n_attrs = COUNT(kAttentionAttrs),
                          .flags = GCC_OPF_FUSED,
                          .shape = shape_attention,
                          .flops = flops_attention,
                          .semantics =
                              "torch.nn.functional.scaled_dot_product_attention(Q, K, V, "
                              "attn_mask = mask, dropout_p, is_causal, scale) (scale 0: 1 / "
                              "sqrt(D); dropout on the probabilities only in the training form, "
                              "its mask Dropout's on the [B, H, Tq, Tk] probabilities under "
                              "`key`); second output L = logsumexp of each row of the scaled, "
                              "masked scores (FlashAttention-2's softmax_lse); made by the "
                              "attention pass from MatMul -> scale -> mask -> Softmax -> MatMul"},
    [GCC_OP_ATTENTION_GRAD] = {.name = "AttentionGrad",
                               .min_inputs = 6,
                               .max_inputs = 7,
                               .n_outputs = 3,
                               .input_names = "Q, K, V, O, L, dO, mask",
                               .attrs = kAttentionGradAttrs,
                               .n_attrs = COUNT(kAttentionGradAttrs),
                               .flags = GCC_OPF_INTERNAL,
                               .shape = shape_attention_grad,
                               .flops = flops_attention_grad,
                               .semantics =
                                   "the backward of scaled_dot_product_attention "
                                   "(FlashAttention-2): P = exp(S - L) recomputed, dV = P^T dO, "
                                   "dS = P (dO V^T - rowsum(dO * O)), dQ = scale dS K, dK = scale "
                                   "dS^T Q; with dropout_p the forward's mask redrawn from key"},
    [GCC_OP_GELU] = {.name = "Gelu",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .attrs = kGeluAttrs,
                     .n_attrs = COUNT(kGeluAttrs),
                     .shape = shape_gelu,
                     .flops = numel_out,
                     .semantics = "ONNX Gelu-20 = torch.nn.GELU: approximate \"none\": 0.5 x (1 + "
                                  "erf(x / sqrt(2))); \"tanh\": 0.5 x (1 + tanh(sqrt(2 / pi) (x + "
                                  "0.044715 x^3)))"},
    [GCC_OP_GELU_GRAD] = {.name = "GeluGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, X",
                          .attrs = kGeluAttrs,
                          .n_attrs = COUNT(kGeluAttrs),
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_gelu_grad,
                          .flops = numel_out,
                          .semantics = "the derivative of Gelu from X (PyTorch gelu_backward): "
                                       "\"none\": dY (Phi(x) + x phi(x)); \"tanh\": dY (0.5 (1 + "
                                       "t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 0.044715 x^2)), t "
                                       "= tanh(sqrt(2 / pi) (x + 0.044715 x^3))"},
    [GCC_OP_ERF] = {.name = "Erf",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .shape = shape_unary_same,
                    .flops = numel_out,
                    .semantics = "ONNX Erf (torch.erf): 2 / sqrt(pi) * integral of exp(-t^2) "
                                 "from 0 to x"},
    [GCC_OP_ERF_GRAD] = {.name = "ErfGrad",
                         .min_inputs = 2,
                         .max_inputs = 2,
                         .n_outputs = 1,
                         .input_names = "dY, X",
                         .flags = GCC_OPF_INTERNAL,
                         .shape = shape_elem_grad,
                         .flops = numel_out,
                         .semantics = "dX = dY * 2 / sqrt(pi) * exp(-X^2) (PyTorch's erf "
                                      "derivative)"},
    [GCC_OP_EXP] = {.name = "Exp",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .shape = shape_unary_same,
                    .flops = numel_out,
                    .semantics = "ONNX Exp (torch.exp)"},
    [GCC_OP_LOG] = {.name = "Log",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .shape = shape_unary_same,
                    .flops = numel_out,
                    .semantics = "ONNX Log (torch.log): natural logarithm, -Inf at 0, NaN below"},
    [GCC_OP_NEG] = {.name = "Neg",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .shape = shape_unary_same,
                    .flops = numel_out,
                    .semantics = "ONNX Neg (torch.neg): -x"},
    [GCC_OP_ABS] = {.name = "Abs",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .shape = shape_unary_same,
                    .flops = numel_out,
                    .semantics = "ONNX Abs (torch.abs)"},
    [GCC_OP_ABS_GRAD] = {.name = "AbsGrad",
                         .min_inputs = 2,
                         .max_inputs = 2,
                         .n_outputs = 1,
                         .input_names = "dY, X",
                         .flags = GCC_OPF_INTERNAL,
                         .shape = shape_elem_grad,
                         .flops = numel_out,
                         .semantics = "dX = dY * sgn(X), 0 at X = 0 (PyTorch abs_backward: grad "
                                      "* self.sgn())"},
    [GCC_OP_POW] = {.name = "Pow",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_pow,
                    .flops = numel_out,
                    .semantics = "ONNX Pow with multidirectional broadcasting (torch.pow, "
                                 "numpy.power): A^B, NaN for a negative base and a non-integer "
                                 "exponent"},
    [GCC_OP_POW_GRAD_BASE] = {.name = "PowGradBase",
                              .min_inputs = 3,
                              .max_inputs = 3,
                              .n_outputs = 1,
                              .input_names = "dY, A, B",
                              .flags = GCC_OPF_INTERNAL,
                              .shape = shape_pow_grad,
                              .flops = numel_out,
                              .semantics = "dA (before the broadcast's sum) = B == 0 ? 0 : dY * B "
                                           "* A^(B - 1) (PyTorch pow_backward_self)"},
    [GCC_OP_POW_GRAD_EXPONENT] = {.name = "PowGradExponent",
                                  .min_inputs = 3,
                                  .max_inputs = 3,
                                  .n_outputs = 1,
                                  .input_names = "dY, A, B",
                                  .flags = GCC_OPF_INTERNAL,
                                  .shape = shape_pow_grad,
                                  .flops = numel_out,
                                  .semantics = "dB (before the broadcast's sum) = (A == 0 and B >= "
                                               "0) ? 0 : dY * A^B * log(A) (PyTorch "
                                               "pow_backward_exponent)"},
    [GCC_OP_RECIPROCAL] = {.name = "Reciprocal",
                           .min_inputs = 1,
                           .max_inputs = 1,
                           .n_outputs = 1,
                           .input_names = "X",
                           .shape = shape_unary_same,
                           .flops = numel_out,
                           .semantics = "ONNX Reciprocal (torch.reciprocal): 1 / x"},
    [GCC_OP_MAX] = {.name = "Max",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_pow,
                    .flops = numel_out,
                    .semantics = "torch.maximum = ONNX Max of two inputs with multidirectional "
                                 "broadcasting (the importer chains more); NaN propagates"},
    [GCC_OP_MIN] = {.name = "Min",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_pow,
                    .flops = numel_out,
                    .semantics = "torch.minimum = ONNX Min of two inputs with multidirectional "
                                 "broadcasting (the importer chains more); NaN propagates"},
    [GCC_OP_MAX_GRAD] = {.name = "MaxGrad",
                         .min_inputs = 3,
                         .max_inputs = 3,
                         .n_outputs = 1,
                         .input_names = "dY, X, Other",
                         .flags = GCC_OPF_INTERNAL,
                         .shape = shape_pow_grad,
                         .flops = numel_out,
                         .semantics =
                             "X's share of max(X, Other)'s gradient before the broadcast's "
                             "sum: X < Other ? 0 : X == Other ? dY / 2 : dY (PyTorch's "
                             "maximum backward)"},
    [GCC_OP_MIN_GRAD] = {.name = "MinGrad",
                         .min_inputs = 3,
                         .max_inputs = 3,
                         .n_outputs = 1,
                         .input_names = "dY, X, Other",
                         .flags = GCC_OPF_INTERNAL,
                         .shape = shape_pow_grad,
                         .flops = numel_out,
                         .semantics =
                             "X's share of min(X, Other)'s gradient before the broadcast's "
                             "sum: X > Other ? 0 : X == Other ? dY / 2 : dY (PyTorch's "
                             "minimum backward)"},
    [GCC_OP_ELU] = {.name = "Elu",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .attrs = kEluAttrs,
                    .n_attrs = COUNT(kEluAttrs),
                    .shape = shape_unary_same,
                    .flops = numel_out,
                    .semantics = "ONNX Elu: x > 0 ? x : alpha (e^x - 1) (torch.nn.ELU; expm1)"},
    [GCC_OP_ELU_GRAD] = {.name = "EluGrad",
                         .min_inputs = 2,
                         .max_inputs = 2,
                         .n_outputs = 1,
                         .input_names = "dY, X",
                         .attrs = kEluAttrs,
                         .n_attrs = COUNT(kEluAttrs),
                         .flags = GCC_OPF_INTERNAL,
                         .shape = shape_elem_grad,
                         .flops = numel_out,
                         .semantics =
                             "dX = X > 0 ? dY : dY alpha e^X (torch elu_backward from the input)"},
    [GCC_OP_SELU] = {.name = "Selu",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .attrs = kSeluAttrs,
                     .n_attrs = COUNT(kSeluAttrs),
                     .shape = shape_unary_same,
                     .flops = numel_out,
                     .semantics = "ONNX Selu: gamma (x > 0 ? x : alpha (e^x - 1)) (torch.nn.SELU)"},
    [GCC_OP_SELU_GRAD] = {.name = "SeluGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, X",
                          .attrs = kSeluAttrs,
                          .n_attrs = COUNT(kSeluAttrs),
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = X > 0 ? gamma dY : dY gamma alpha e^X"},
    [GCC_OP_CELU] =
        {.name = "Celu",
         .min_inputs = 1,
         .max_inputs = 1,
         .n_outputs = 1,
         .input_names = "X",
         .attrs = kEluAttrs,
         .n_attrs = COUNT(kEluAttrs),
         .shape = shape_unary_same,
         .flops = numel_out,
         .semantics = "ONNX Celu: max(0, x) + min(0, alpha (e^(x / alpha) - 1)) (torch.nn.CELU)"},
    [GCC_OP_CELU_GRAD] = {.name = "CeluGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, X",
                          .attrs = kEluAttrs,
                          .n_attrs = COUNT(kEluAttrs),
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = X > 0 ? dY : dY e^(X / alpha)"},
    [GCC_OP_SOFTPLUS] =
        {.name = "Softplus",
         .min_inputs = 1,
         .max_inputs = 1,
         .n_outputs = 1,
         .input_names = "X",
         .shape = shape_unary_same,
         .flops = numel_out,
         .semantics =
             "ONNX Softplus: log(1 + e^x), computed as max(x, 0) + log1p(e^-|x|) (no overflow); "
             "torch.nn.Softplus() returns x above its threshold 20, where the two differ by "
             "log1p(e^-x) < 2.1e-9, under half an ulp of x: the same float32"},
    [GCC_OP_SOFTPLUS_GRAD] = {.name = "SoftplusGrad",
                              .min_inputs = 2,
                              .max_inputs = 2,
                              .n_outputs = 1,
                              .input_names = "dY, X",
                              .flags = GCC_OPF_INTERNAL,
                              .shape = shape_elem_grad,
                              .flops = numel_out,
                              .semantics = "dX = dY / (1 + e^-X) (dY sigmoid(X))"},
    [GCC_OP_SOFTSIGN] = {.name = "Softsign",
                         .min_inputs = 1,
                         .max_inputs = 1,
                         .n_outputs = 1,
                         .input_names = "X",
                         .shape = shape_unary_same,
                         .flops = numel_out,
                         .semantics = "ONNX Softsign: x / (1 + |x|) (torch.nn.Softsign)"},
    [GCC_OP_SOFTSIGN_GRAD] = {.name = "SoftsignGrad",
                              .min_inputs = 2,
                              .max_inputs = 2,
                              .n_outputs = 1,
                              .input_names = "dY, X",
                              .flags = GCC_OPF_INTERNAL,
                              .shape = shape_elem_grad,
                              .flops = numel_out,
                              .semantics = "dX = dY / (1 + |X|)^2"},
    [GCC_OP_THRESHOLDED_RELU] =
        {.name = "ThresholdedRelu",
         .min_inputs = 1,
         .max_inputs = 1,
         .n_outputs = 1,
         .input_names = "X",
         .attrs = kThresholdedReluAttrs,
         .n_attrs = COUNT(kThresholdedReluAttrs),
         .shape = shape_unary_same,
         .flops = numel_out,
         .semantics = "ONNX ThresholdedRelu: x > alpha ? x : 0 (torch.nn.Threshold(alpha, 0))"},
    [GCC_OP_THRESHOLDED_RELU_GRAD] = {.name = "ThresholdedReluGrad",
                                      .min_inputs = 2,
                                      .max_inputs = 2,
                                      .n_outputs = 1,
                                      .input_names = "dY, X",
                                      .attrs = kThresholdedReluAttrs,
                                      .n_attrs = COUNT(kThresholdedReluAttrs),
                                      .flags = GCC_OPF_INTERNAL,
                                      .shape = shape_elem_grad,
                                      .flops = numel_out,
                                      .semantics = "dX = X > alpha ? dY : 0"},
    [GCC_OP_SIN] = {.name = "Sin",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .shape = shape_unary_same,
                    .flops = numel_out,
                    .semantics = "ONNX Sin (torch.sin)"},
    [GCC_OP_COS] = {.name = "Cos",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .shape = shape_unary_same,
                    .flops = numel_out,
                    .semantics = "ONNX Cos (torch.cos)"},
    [GCC_OP_PRELU] = {.name = "PRelu",
                      .min_inputs = 2,
                      .max_inputs = 2,
                      .n_outputs = 1,
                      .input_names = "X, slope",
                      .shape = shape_prelu,
                      .flops = numel_out,
                      .semantics = "ONNX PRelu: x < 0 ? slope * x : x, slope unidirectionally "
                                   "broadcast to X (torch.nn.PReLU)"},
    [GCC_OP_PRELU_GRAD] = {.name = "PReluGrad",
                           .min_inputs = 3,
                           .max_inputs = 3,
                           .n_outputs = 1,
                           .input_names = "dY, X, slope",
                           .flags = GCC_OPF_INTERNAL,
                           .shape = shape_prelu_grad,
                           .flops = numel_out,
                           .semantics =
                               "dX = X < 0 ? slope * dY : dY (torch prelu backward, input)"},
    [GCC_OP_PRELU_GRAD_SLOPE] =
        {.name = "PReluGradSlope",
         .min_inputs = 3,
         .max_inputs = 3,
         .n_outputs = 1,
         .input_names = "dY, X, slope",
         .flags = GCC_OPF_INTERNAL,
         .shape = shape_prelu_grad,
         .flops = numel_out,
         .semantics = "the slope's gradient before the broadcast's sum: X < 0 ? X * dY : 0"},
    [GCC_OP_TRILU] = {.name = "Trilu",
                      .min_inputs = 1,
                      .max_inputs = 1,
                      .n_outputs = 1,
                      .input_names = "X",
                      .attrs = kTriluAttrs,
                      .n_attrs = COUNT(kTriluAttrs),
                      .shape = shape_trilu,
                      .flops = numel_out,
                      .semantics = "ONNX Trilu-14 with k as an attribute (torch.triu when upper, "
                                   "torch.tril otherwise): over the last two dims, X[.., r, c] "
                                   "where c - r >= k (upper) or c - r <= k (lower), else 0"},
    [GCC_OP_ARG_MAX] = {.name = "ArgMax",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kArgAttrs,
                        .n_attrs = COUNT(kArgAttrs),
                        .flags = GCC_OPF_INDEX_OF_FLOAT,
                        .shape = shape_arg,
                        .flops = numel_in0,
                        .semantics = "ONNX ArgMax-13 (torch.argmax): int64 index of the largest "
                                     "element along axis, first (or with select_last_index the "
                                     "last) of equal ones; a NaN is the largest"},
    [GCC_OP_ARG_MIN] = {.name = "ArgMin",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kArgAttrs,
                        .n_attrs = COUNT(kArgAttrs),
                        .flags = GCC_OPF_INDEX_OF_FLOAT,
                        .shape = shape_arg,
                        .flops = numel_in0,
                        .semantics = "ONNX ArgMin-13 (torch.argmin): int64 index of the smallest "
                                     "element along axis, first (or with select_last_index the "
                                     "last) of equal ones; a NaN is the smallest"},
    [GCC_OP_NLL_LOSS] = {.name = "NegativeLogLikelihoodLoss",
                         .min_inputs = 2,
                         .max_inputs = 3,
                         .n_outputs = 1,
                         .input_names = "input, target, weight",
                         .attrs = kNllAttrs,
                         .n_attrs = COUNT(kNllAttrs),
                         .shape = shape_nll,
                         .flops = numel_out,
                         .semantics =
                             "ONNX NegativeLogLikelihoodLoss-13/22 = "
                             "torch.nn.functional.nll_loss: -weight[t] input[n, t, d...] per "
                             "target t (class axis 1; ignore_index gives 0 and weight 0), "
                             "reduction none | sum | mean (the sum over the sum of the weights "
                             "of the targets not ignored); a target outside [0, C) an error at "
                             "run time"},
    [GCC_OP_NLL_LOSS_GRAD] = {.name = "NegativeLogLikelihoodLossGrad",
                              .min_inputs = 2,
                              .max_inputs = 3,
                              .n_outputs = 1,
                              .input_names = "dY, target, weight",
                              .attrs = kNllGradAttrs,
                              .n_attrs = COUNT(kNllGradAttrs),
                              .flags = GCC_OPF_INTERNAL,
                              .shape = shape_nll_grad,
                              .flops = numel_out,
                              .semantics = "the backward of NegativeLogLikelihoodLoss w.r.t. "
                                           "the input (torch nll_loss_backward): zeros of "
                                           "`shape`, -weight[t] g at each target t not ignored "
                                           "(g: dY's element, dY, or dY over the weight sum)"},
    [GCC_OP_EQUAL] =
        {.name = "Equal",
         .min_inputs = 2,
         .max_inputs = 2,
         .n_outputs = 1,
         .input_names = "A, B",
         .shape = shape_equal,
         .flops = numel_out,
         .semantics =
             "ONNX Equal-13 (torch.eq): A == B, broadcast, bool; NaN is unequal to everything"},
    [GCC_OP_LESS] = {.name = "Less",
                     .min_inputs = 2,
                     .max_inputs = 2,
                     .n_outputs = 1,
                     .input_names = "A, B",
                     .shape = shape_compare,
                     .flops = numel_out,
                     .semantics = "ONNX Less-13 (torch.lt): A < B, broadcast, bool"},
    [GCC_OP_GREATER] = {.name = "Greater",
                        .min_inputs = 2,
                        .max_inputs = 2,
                        .n_outputs = 1,
                        .input_names = "A, B",
                        .shape = shape_compare,
                        .flops = numel_out,
                        .semantics = "ONNX Greater-13 (torch.gt): A > B, broadcast, bool"},
    [GCC_OP_LESS_OR_EQUAL] = {.name = "LessOrEqual",
                              .min_inputs = 2,
                              .max_inputs = 2,
                              .n_outputs = 1,
                              .input_names = "A, B",
                              .shape = shape_compare,
                              .flops = numel_out,
                              .semantics =
                                  "ONNX LessOrEqual-16 (torch.le): A <= B, broadcast, bool"},
    [GCC_OP_GREATER_OR_EQUAL] = {.name = "GreaterOrEqual",
                                 .min_inputs = 2,
                                 .max_inputs = 2,
                                 .n_outputs = 1,
                                 .input_names = "A, B",
                                 .shape = shape_compare,
                                 .flops = numel_out,
                                 .semantics =
                                     "ONNX GreaterOrEqual-16 (torch.ge): A >= B, broadcast, bool"},
    [GCC_OP_NOT] = {.name = "Not",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .shape = shape_logic,
                    .flops = numel_out,
                    .semantics = "ONNX Not-1 (torch.logical_not): bool -> bool"},
    [GCC_OP_AND] = {.name = "And",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_logic,
                    .flops = numel_out,
                    .semantics = "ONNX And-7 (torch.logical_and): bool, broadcast"},
    [GCC_OP_OR] = {.name = "Or",
                   .min_inputs = 2,
                   .max_inputs = 2,
                   .n_outputs = 1,
                   .input_names = "A, B",
                   .shape = shape_logic,
                   .flops = numel_out,
                   .semantics = "ONNX Or-7 (torch.logical_or): bool, broadcast"},
    [GCC_OP_XOR] = {.name = "Xor",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_logic,
                    .flops = numel_out,
                    .semantics = "ONNX Xor-7 (torch.logical_xor): bool, broadcast"},
    [GCC_OP_WHERE] = {.name = "Where",
                      .min_inputs = 3,
                      .max_inputs = 3,
                      .n_outputs = 1,
                      .input_names = "condition, X, Y",
                      .shape = shape_where,
                      .flops = numel_out,
                      .semantics = "ONNX Where-16 (torch.where): condition ? X : Y, the three "
                                   "broadcast together"},
    [GCC_OP_WHERE_GRAD_X] = {.name = "WhereGradX",
                             .min_inputs = 2,
                             .max_inputs = 2,
                             .n_outputs = 1,
                             .input_names = "condition, dZ",
                             .flags = GCC_OPF_INTERNAL,
                             .shape = shape_where_grad,
                             .flops = numel_out,
                             .semantics = "X's gradient before the broadcast's sum: condition ? "
                                          "dZ : 0 (torch where backward)"},
    [GCC_OP_WHERE_GRAD_Y] = {.name = "WhereGradY",
                             .min_inputs = 2,
                             .max_inputs = 2,
                             .n_outputs = 1,
                             .input_names = "condition, dZ",
                             .flags = GCC_OPF_INTERNAL,
                             .shape = shape_where_grad,
                             .flops = numel_out,
                             .semantics = "Y's gradient before the broadcast's sum: condition ? "
                                          "0 : dZ (torch where backward)"},
    [GCC_OP_GATHER_ELEMENTS] = {.name = "GatherElements",
                                .min_inputs = 2,
                                .max_inputs = 2,
                                .n_outputs = 1,
                                .input_names = "data, indices",
                                .attrs = kGatherElementsAttrs,
                                .n_attrs = COUNT(kGatherElementsAttrs),
                                .shape = shape_gather_elements,
                                .semantics = "ONNX GatherElements-13 (torch.gather): Y of indices' "
                                             "shape, data's element at each position with the "
                                             "axis coordinate replaced by the index, negative "
                                             "indices counted from the end, an out-of-range "
                                             "index an error at run time"},
    [GCC_OP_GATHER_ELEMENTS_GRAD] = {.name = "GatherElementsGrad",
                                     .min_inputs = 2,
                                     .max_inputs = 2,
                                     .n_outputs = 1,
                                     .input_names = "dY, indices",
                                     .attrs = kGatherElementsGradAttrs,
                                     .n_attrs = COUNT(kGatherElementsGradAttrs),
                                     .flags = GCC_OPF_INTERNAL,
                                     .shape = shape_gather_elements_grad,
                                     .flops = numel_in0,
                                     .semantics = "the backward of GatherElements: zeros of "
                                                  "data's shape, dY's elements added at their "
                                                  "indices in row-major order (a deterministic "
                                                  "scatter-add: torch scatter_add_)"},
    [GCC_OP_REDUCE_MIN] = {.name = "ReduceMin",
                           .min_inputs = 1,
                           .max_inputs = 1,
                           .n_outputs = 1,
                           .input_names = "X",
                           .attrs = kReduceMinAttrs,
                           .n_attrs = COUNT(kReduceMinAttrs),
                           .shape = shape_reduce_min,
                           .flops = numel_in0,
                           .semantics = "ONNX ReduceMin-13 with the axes an attribute "
                                        "(torch.amin): the minimum over axes, kept as 1 or "
                                        "removed (keepdims); a NaN makes its group's minimum NaN"},
    [GCC_OP_REDUCE_MIN_GRAD] = {.name = "ReduceMinGrad",
                                .min_inputs = 3,
                                .max_inputs = 3,
                                .n_outputs = 1,
                                .input_names = "dY, X, Y",
                                .attrs = kReduceMinAttrs,
                                .n_attrs = COUNT(kReduceMinAttrs),
                                .flags = GCC_OPF_INTERNAL,
                                .shape = shape_reduce_min_grad,
                                .flops = numel_in0,
                                .semantics = "the backward of ReduceMin (torch amin backward): "
                                             "dY split evenly among the elements equal to their "
                                             "group's minimum, X == Y ? dY / count : 0"},
    [GCC_OP_ATTENTION_PACKED] = {.name = "AttentionPacked",
                                 .min_inputs = 1,
                                 .max_inputs = 1,
                                 .n_outputs = 2,
                                 .input_names = "QKV",
                                 .attrs = kAttentionPackedAttrs,
                                 .n_attrs = COUNT(kAttentionPackedAttrs),
                                 .flags = GCC_OPF_INTERNAL,
                                 .shape = shape_attention_packed,
                                 .flops = flops_attention_packed,
                                 .semantics =
                                     "Attention on Q, K, V = the three thirds of QKV's last "
                                     "axis (3 H D, rows B T of `seq` T) split into `heads` H "
                                     "heads (PyTorch: q, k, v = qkv.split(C, -1); each "
                                     "view(B, T, H, D).transpose(1, 2); SDPA; O transposed back "
                                     "to [..., H D]), L [B, H, T]; Attention's attributes and "
                                     "dropout bits; made by the CPU's packed-attention lowering"},
    [GCC_OP_ATTENTION_PACKED_GRAD] = {.name = "AttentionPackedGrad",
                                      .min_inputs = 4,
                                      .max_inputs = 4,
                                      .n_outputs = 1,
                                      .input_names = "QKV, O, L, dO",
                                      .attrs = kAttentionPackedGradAttrs,
                                      .n_attrs = COUNT(kAttentionPackedGradAttrs),
                                      .flags = GCC_OPF_INTERNAL,
                                      .shape = shape_attention_packed_grad,
                                      .flops = flops_attention_packed_grad,
                                      .semantics =
                                          "AttentionGrad of AttentionPacked: dQKV [..., 3 H D] "
                                          "= dQ, dK, dV of its thirds, packed as QKV (the "
                                          "Concat of their transposes back)"},
    [GCC_OP_GELU_AUX] = {.name = "GeluAux",
                         .min_inputs = 1,
                         .max_inputs = 1,
                         .n_outputs = 2,
                         .input_names = "X",
                         .attrs = kGeluAttrs,
                         .n_attrs = COUNT(kGeluAttrs),
                         .flags = GCC_OPF_INTERNAL,
                         .shape = shape_gelu_aux,
                         .flops = numel_out,
                         .semantics =
                             "Gelu's Y and, as a second output (cuBLASLt's GELU_AUX), its "
                             "derivative D = dY/dX at X, the factor GeluGrad multiplies dY "
                             "by (PyTorch gelu_backward with dY = 1), so that GeluGrad(dY, "
                             "X) = dY * D bitwise; made by the CPU's gelu-aux lowering"},
    [GCC_OP_LAYER_NORM_GRAD_ALL] = {.name = "LayerNormGradAll",
                                    .min_inputs = 3,
                                    .max_inputs = 4,
                                    .n_outputs = 1,
                                    .opt_outputs = 2,
                                    .input_names = "dY, X, Scale, R",
                                    .attrs = kLayerNormGradAllAttrs,
                                    .n_attrs = COUNT(kLayerNormGradAllAttrs),
                                    .flags = GCC_OPF_INTERNAL,
                                    .shape = shape_layer_norm_grad_all,
                                    .flops = flops_layer_norm,
                                    .semantics =
                                        "LayerNormGrad's outputs dX, dScale, dB (those named by "
                                        "the bits 1, 2, 4 of `outputs`, in that order) from one "
                                        "pass over dY and X (PyTorch native_layer_norm_backward "
                                        "with its output_mask), dX plus R when R is given (the "
                                        "residual stream's gradient, as Add(dX, R)); made by "
                                        "the CPU's lowering (passes/layer_norm_grad.c)"},
};

/* Every id of GCC_OP_LIST must have its entry, and names must match. */
#define GCC_OP_NAME_STR(id, name) #name,
static const char *const kOpNames[GCC_OP_COUNT] = {GCC_OP_LIST(GCC_OP_NAME_STR)};
#undef GCC_OP_NAME_STR

const gcc_op_desc *gcc_op(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return NULL;
  return &kOps[op];
}

const char *gcc_op_name(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return "?";
  return kOpNames[op];
}

int gcc_op_lookup(const char *name) {
  for (int i = 0; i < GCC_OP_COUNT; i++)
    if (kOps[i].name && strcmp(kOps[i].name, name) == 0 && strcmp(kOpNames[i], name) == 0)
      return i;
  return -1;
}

static const char *attr_type_name(gcc_attr_type t) {
  switch (t) {
  case GCC_ATTR_INT: return "int";
  case GCC_ATTR_FLOAT: return "float";
  case GCC_ATTR_STRING: return "string";
  case GCC_ATTR_INTS: return "ints";
  case GCC_ATTR_FLOATS: return "floats";
  default: return "undefined";
  }
}

gcc_status gcc_op_resolve_attrs(gcc_graph *g, int node, gcc_diag *d) {
  gcc_node *n = &g->nodes[node];
  const gcc_op_desc *op = gcc_op(n->op);
  char desc[600];
  gcc_node_desc(g, node, desc, sizeof desc);
  if (!op || !op->name)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: %s has no op descriptor", g->source, desc);
  if (n->n_inputs < op->min_inputs || n->n_inputs > op->max_inputs) {
    if (op->min_inputs == op->max_inputs)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s takes %d inputs (%s), got %d",
                          g->source, desc, op->min_inputs, op->input_names, n->n_inputs);
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s takes %d to %d inputs (%s), got %d",
                        g->source, desc, op->min_inputs, op->max_inputs, op->input_names,
                        n->n_inputs);
  }
  for (int k = 0; k < op->min_inputs; k++)
    if (n->inputs[k] < 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: required input %d (of %s) is empty",
                          g->source, desc, k, op->input_names);
  if (n->n_outputs < op->n_outputs || n->n_outputs > op->n_outputs + op->opt_outputs) {
    if (!op->opt_outputs)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s has %d outputs, got %d", g->source,
                          desc, op->n_outputs, n->n_outputs);
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s has %d to %d outputs, got %d", g->source,
                        desc, op->n_outputs, op->n_outputs + op->opt_outputs, n->n_outputs);
  }
  for (int k = 0; k < n->n_attrs; k++) {
    int found = 0;
    for (int j = 0; j < op->n_attrs; j++)
      if (strcmp(op->attrs[j].name, n->attrs[k].name) == 0)
        found = 1;
    if (!found)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: unknown attribute '%s'", g->source,
                          desc, n->attrs[k].name);
  }
  gcc_attr *av = calloc((size_t)(op->n_attrs ? op->n_attrs : 1), sizeof *av);
  if (!av)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
  gcc_status s = GCC_OK;
  for (int j = 0; j < op->n_attrs && s == GCC_OK; j++) {
    const gcc_attr_spec *sp = &op->attrs[j];
    const gcc_attr *a = gcc_node_attr(n, sp->name);
    gcc_attr *r = &av[j];
    r->type = sp->type;
    r->name = strdup(sp->name);
    if (!r->name) {
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
      break;
    }
    if (!a) {
      if (sp->required) {
        s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: missing required attribute '%s' (%s)",
                         g->source, desc, sp->name, attr_type_name(sp->type));
        break;
      }
      r->i = sp->def_i;
      r->f = sp->def_f;
      if (sp->def_s && !(r->s = strdup(sp->def_s)))
        s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
      continue;
    }
    if (a->type != sp->type) {
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                       "%s: %s: attribute '%s' must be of type %s, got %s", g->source, desc,
                       sp->name, attr_type_name(sp->type), attr_type_name(a->type));
      break;
    }
    if (sp->is_bool && a->i != 0 && a->i != 1) {
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                       "%s: %s: attribute '%s' is %lld; it must be 0 or 1", g->source, desc,
                       sp->name, (long long)a->i);
      break;
    }
    if (sp->type == GCC_ATTR_FLOAT && (sp->allow_inf ? isnan(a->f) : !isfinite(a->f))) {
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: attribute '%s' is %g; it must be %s",
                       g->source, desc, sp->name, (double)a->f,
                       sp->allow_inf ? "a number (+-Inf allowed)" : "finite");
      break;
    }
    r->i = a->i;
    r->f = a->f;
    if (a->s && !(r->s = strdup(a->s)))
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
    if (a->type == GCC_ATTR_INTS) {
      r->ints = malloc((size_t)(a->n_ints ? a->n_ints : 1) * sizeof *r->ints);
      if (!r->ints)
        s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
      else if (a->n_ints)
        memcpy(r->ints, a->ints, (size_t)a->n_ints * sizeof *r->ints);
      r->n_ints = a->n_ints;
    }
    if (a->type == GCC_ATTR_FLOATS) {
      r->floats = malloc((size_t)(a->n_floats ? a->n_floats : 1) * sizeof *r->floats);
      if (!r->floats)
        s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
      else if (a->n_floats)
        memcpy(r->floats, a->floats, (size_t)a->n_floats * sizeof *r->floats);
      r->n_floats = a->n_floats;
    }
  }
  if (s != GCC_OK) {
    for (int j = 0; j < op->n_attrs; j++) {
      free(av[j].name);
      free(av[j].s);
      free(av[j].ints);
      free(av[j].floats);
    }
    free(av);
    return s;
  }
  for (int j = 0; j < n->n_av; j++) {
    free(n->av[j].name);
    free(n->av[j].s);
    free(n->av[j].ints);
    free(n->av[j].floats);
  }
  free(n->av);
  n->av = av;
  n->n_av = op->n_attrs;
  return GCC_OK;
}

gcc_status gcc_infer_shapes(gcc_graph *g, gcc_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    GCC_TRY(gcc_op_resolve_attrs(g, i, d));
    const gcc_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0)
        continue;
      if (g->values[v].dtype == GCC_DT_UNDEFINED) {
        char desc[600];
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: %s: input '%s' has no dtype/shape (used before it is defined?)",
                            g->source, gcc_node_desc(g, i, desc, sizeof desc), g->values[v].name);
      }
    }
    GCC_TRY(gcc_op(n->op)->shape(g, i, d));
    for (int k = 0; k < n->n_outputs; k++) {
      gcc_value *o = &g->values[n->outputs[k]];
      int overflow = 0;
      if (gcc_shape_numel(&o->shape, &overflow) < 0 && overflow) {
        char desc[600];
        return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: output '%s' element count overflows",
                            g->source, gcc_node_desc(g, i, desc, sizeof desc), o->name);
      }
    }
  }
  return GCC_OK;
}
