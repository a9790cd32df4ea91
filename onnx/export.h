/*
 * export.h - an inference graph of the gcc-train IR (graph/ir.h) written as
 * an ONNX ModelProto (onnx.proto of ONNX 1.12, Debian's libonnx-dev, written
 * with protobuf-c), for ONNX Runtime and every other ONNX consumer:
 * `gcc-train model --export-onnx model.onnx`.
 *
 * What is written:
 *  - ir_version 8, one opset import: the default domain ("") at opset
 *    GCC_ONNX_EXPORT_OPSET (17, what torch.onnx.export writes at most and
 *    what ONNX Runtime 1.12 and later run); producer_name "gcc-train";
 *  - the graph's inputs, each with its dtype and shape, the batch dim (-1)
 *    as the symbolic dim_param "N"; its outputs with the dtype and the
 *    shape that inference gives (a batch-dependent dim 0 as "N", any other
 *    batch-dependent dim left without a value);
 *  - every initializer a node reads (parameters, constants and the running
 *    statistics of BatchNormalization, which are state in training and
 *    plain inputs here) as a TensorProto with raw_data (little-endian, C
 *    order), under its IR name, once however many nodes read it (a tied
 *    weight stays one tensor), with a graph value_info entry whose
 *    metadata_props (ValueInfoProto field 4 of ONNX IR 10, written as an
 *    unknown field of the 1.12 schema) give the kind PyTorch's dynamo
 *    exporter writes, "pkg.torch.export.graph_signature.InputSpec.kind":
 *    PARAMETER for a trained parameter, BUFFER for a running statistic or a
 *    constant; gcc-train's import for training reads it back (onnx/import.h:
 *    a parameter read by several nodes stays one, a buffer is not trained);
 *  - the nodes in the IR's (topological) order, each with its IR name and
 *    value names; an omitted optional input is "" (ONNX's convention).
 *
 * The graph given must be an inference graph: no training spec (the loss,
 * the target, backward and optimizer nodes are never part of it). gcc-train
 * makes it with gcc_inference_graph (deploy/model_bundle.h): the trained
 * model pruned to its prediction, exposed as `logits`, and `probabilities`
 * = Softmax(logits, axis 1), the same graph a .gccx bundle holds. Dropout
 * and other training-only behaviour is never in it; BatchNormalization is
 * its inference form (Y = (X - mean) / sqrt(var + epsilon) * scale + B with
 * the running statistics the training left).
 *
 * The mapping is one table keyed by the IR op enum (onnx/export.c,
 * kOnnxExport; pinned to GCC_OP_COUNT, checked by tests/op_tables_test).
 * Each IR op of an inference graph becomes one ONNX node:
 *
 *   IR op               ONNX op (opset 17)   attributes and inputs written
 *   Gemm                Gemm                 alpha, beta, transA, transB
 *   MatMul              MatMul
 *   Add, Sub, Mul, Div  Add, Sub, Mul, Div   (multidirectional broadcast)
 *   Relu, Sigmoid,      Relu, Sigmoid,
 *   Tanh, Sqrt,         Tanh, Sqrt,
 *   Identity            Identity
 *   LeakyRelu           LeakyRelu            alpha
 *   Clip                Clip                 min and max as scalar float
 *                                            initializer inputs
 *   Reshape             Reshape              the shape as an int64
 *                                            initializer input (0 copies a
 *                                            dim, -1 infers one, as the IR)
 *   Flatten             Flatten              axis
 *   Softmax, LogSoftmax Softmax, LogSoftmax  axis (opset 13 semantics: one
 *                                            axis, as the IR)
 *   Conv                Conv                 kernel_shape (from W), strides,
 *                                            pads, dilations, group
 *   ConvTranspose       ConvTranspose        the same and output_padding
 *   MaxPool             MaxPool              kernel_shape, strides, pads,
 *                                            dilations, ceil_mode
 *   AveragePool         AveragePool          kernel_shape, strides, pads,
 *                                            ceil_mode, count_include_pad
 *                                            (no dilations before opset 19:
 *                                            a dilated one is refused)
 *   BatchNormalization  BatchNormalization   epsilon, momentum; inputs X,
 *                                            scale, B, mean, var (inference
 *                                            form, training_mode 0)
 *   LRN                 LRN                  size, alpha, beta, bias
 *   LayerNormalization  LayerNormalization   axis, epsilon; inputs X, Scale,
 *                                            B; outputs Y (, Mean,
 *                                            InvStdDev) (opset 17)
 *   Concat              Concat               axis
 *   Transpose           Transpose            perm
 *   Pad                 Pad                  mode; pads as an int64
 *                                            initializer input, the value
 *                                            as a scalar one
 *   Gelu                Gelu (opset 20)      approximate ("none" | "tanh");
 *                                            a graph holding one is written
 *                                            at opset 20, IR version 9
 *   NegativeLogLikelihoodLoss                reduction, ignore_index (when
 *                       NegativeLogLikelihoodLoss   set); inputs input, target
 *                                            (, weight). An imported
 *                                            SoftmaxCrossEntropyLoss is
 *                                            written as LogSoftmax (axis 1)
 *                                            and this, its ONNX definition
 *
 * Every other IR op (losses, gradients, optimizer updates, copies,
 * all-reduces, ReduceSumTo) is made by the training passes and has no ONNX
 * mapping; an inference graph holding one is refused naming the node.
 * Windows are 2-D in the IR (the importer turns 1-D ones into 2-D over an
 * H of 1 with Reshapes around them), and are written so.
 *
 * Errors (messages name the graph's source and, where one is at fault, the
 * node as "node 'name' (OpType)"):
 *   GCC_ERR_INVALID_ARGUMENT  a NULL argument
 *   GCC_ERR_INVALID_GRAPH     the graph has a training spec (export its
 *                             inference graph), or no input or output
 *   GCC_ERR_UNSUPPORTED       a node whose op has no ONNX mapping (the
 *                             message says why), an attribute value the
 *                             ONNX op cannot express at this opset (a
 *                             dilated AveragePool), a dtype ONNX has no
 *                             element type for
 *   GCC_ERR_SHAPE             the graph's shapes do not infer (at batch 1)
 *   GCC_ERR_OUT_OF_MEMORY
 *   GCC_ERR_IO                (gcc_onnx_export_file) the file cannot be
 *                             written: the message names `what` and the path
 */
#ifndef GCC_ONNX_EXPORT_H
#define GCC_ONNX_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default-domain opset and the IR version of every exported model
 * (opset 20 and IR version 9 for a graph with an op ONNX added later:
 * Gelu). */
#define GCC_ONNX_EXPORT_OPSET      17
#define GCC_ONNX_EXPORT_IR_VERSION 8

typedef struct gcc_onnx_export_options {
  const char *producer_version; /* ModelProto.producer_version; NULL: none */
  const char *doc_string;       /* ModelProto.doc_string (e.g. the source model); NULL: none */
} gcc_onnx_export_options;

/* One entry of the IR op -> ONNX table: the ONNX op type, or NULL and why
 * the IR op has none. */
typedef struct gcc_onnx_export_op {
  const char *onnx; /* "Gemm", ...; NULL when the op does not map */
  const char *none; /* why not (when onnx is NULL) */
  int has_attrs;    /* 1 when attributes or constant inputs are written */
} gcc_onnx_export_op;

/* The table's entry of IR op `op`, NULL out of range. */
const gcc_onnx_export_op *gcc_onnx_export_op_of(int op);

/* Checks that `g` exports: everything gcc_onnx_export_memory does short of
 * serializing (every node maps, every attribute and dtype is expressible,
 * shapes infer). For checking a model before training it. Errors: above. */
gcc_status gcc_onnx_export_check(const gcc_graph *g, gcc_diag *d);

/* Serializes inference graph `g` as an ONNX ModelProto into a malloc'ed
 * *bytes of *size bytes (the caller frees it). `o` may be NULL. The bytes
 * depend only on the graph and the options (no time stamp). Errors: above. */
gcc_status gcc_onnx_export_memory(const gcc_graph *g, const gcc_onnx_export_options *o,
                                  uint8_t **bytes, size_t *size, gcc_diag *d);

/* gcc_onnx_export_memory, written to `path` as every output of gcc-train is
 * (graph/outfile.h: atomically for a regular file, through a symbolic
 * link to its target, directly to a device or FIFO); `what` names it in
 * messages ("--export-onnx"; NULL: the path). Errors: above. */
gcc_status gcc_onnx_export_file(const gcc_graph *g, const gcc_onnx_export_options *o,
                                const char *path, const char *what, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_ONNX_EXPORT_H */
