/*
 * import.h - ONNX models (ModelProto, onnx.proto of ONNX 1.12 as Debian's
 * libonnx-dev installs it, read with protobuf-c) into the gcc-train graph
 * IR (graph/ir.h).
 *
 * What is read:
 *  - opsets 1 to 21 of the default domain ("" or "ai.onnx"): each node is
 *    mapped with the semantics of its op's newest version <= the model's
 *    opset (ONNX's versioning rule), so opset-dependent behaviour (Softmax's
 *    axis before and after opset 13, Squeeze/Unsqueeze/Clip/Pad attributes
 *    becoming inputs, the legacy `broadcast` attribute before opset 7, ...)
 *    is decided per node;
 *  - initializers stored as raw_data or in the typed fields (float_data,
 *    int32_data, int64_data, double_data), and external data
 *    (data_location = EXTERNAL: location, offset, length) read from a file
 *    that must lie inside the model's folder;
 *  - graph inputs whose dims are all known, but for dim 0, which may be
 *    symbolic (dim_param, or no value): the batch, bound when the graph is
 *    compiled (GCC_BATCH_DIM);
 *  - graph inputs that are also initializers (IR version < 4) are constants.
 *
 * What is done at import:
 *  - Constant, ConstantOfShape and Identity are folded away, and so is
 *    Dropout unless the import is for training (the identity, whatever the
 *    export's training_mode or is_test says; its mask output must be
 *    unused);
 *    BatchNormalization (inference form) is folded into the Conv before it
 *    when its statistics are constants and nothing else reads the Conv's
 *    output (W' = W * s, B' = (B - mean) * s + beta, s = scale /
 *    sqrt(var + eps): what ONNX Runtime's fusion does), unless the import
 *    is for training (gcc_onnx_options.train, which gcc-train and
 *    gcc-import ask for when given a recipe: onnx/model_file.h);
 *  - shape inputs (Reshape's shape, Squeeze/Unsqueeze axes, Clip's min/max,
 *    Pad's pads, ConstantOfShape's shape) must be constants and are turned
 *    into attributes of the IR node;
 *  - 1-D convolutions and poolings become the 2-D IR ops over an H of 1.
 *
 * The mapping from ONNX op types to IR ops is one table (onnx/import.c,
 * kOnnxOps). An op outside it is refused naming the op, the node and the
 * supported ops; an attribute the mapping does not handle, or a value of
 * one it does not handle, is refused naming both, never ignored.
 *
 * Errors (every message names the file and, where one is at fault, the
 * node as "node 'name' (OpType)"):
 *   GCC_ERR_PARSE          not a protobuf, truncated, corrupt
 *   GCC_ERR_INVALID_GRAPH  no graph, a value produced twice or never, an
 *                          initializer named by a node but missing, a
 *                          cycle, a malformed tensor or attribute, external
 *                          data missing, short, or outside the model's
 *                          folder
 *   GCC_ERR_UNSUPPORTED    an unknown domain, an opset above 21, an op,
 *                          attribute, attribute value or dtype outside the
 *                          mapping
 *   GCC_ERR_SHAPE          a shape that does not infer (a symbolic dim
 *                          other than the batch, incompatible operands, a
 *                          shape input that is not a constant)
 *   GCC_ERR_OUT_OF_MEMORY
 */
#ifndef GCC_ONNX_IMPORT_H
#define GCC_ONNX_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The newest default-domain opset this importer knows. */
#define GCC_ONNX_MAX_OPSET  21
#define GCC_ONNX_REPORT_OPS 64

/* What an import did, for gcc-import's summary. */
typedef struct gcc_onnx_report {
  int64_t ir_version;
  int64_t opset;            /* of the default domain */
  char producer[128];       /* producer_name producer_version */
  int n_nodes;              /* ONNX nodes read */
  int n_ir_nodes;           /* IR nodes made */
  int n_initializers;       /* ONNX initializers read */
  int n_external;           /* of them with external data */
  size_t initializer_bytes; /* their element bytes */
  int n_params, n_consts;   /* IR initializers made (trainable / constant) */
  /* per ONNX op type: how many nodes, how many of them were folded away
   * (not mapped to an IR node), and the IR ops the mapped ones became */
  struct {
    char op[48];
    int count, folded;
    char ir[96];
  } ops[GCC_ONNX_REPORT_OPS];
  int n_ops;
  int n_bn_folded;     /* BatchNormalization nodes folded into their Conv */
  int n_bn_train;      /* BatchNormalization nodes kept for training (gcc_onnx_options.train) */
  int n_tied;          /* shared PARAMETER initializers kept as one parameter (training) */
  int n_torch_buffers; /* initializers the exporter marks BUFFER or CONSTANT_TENSOR */
} gcc_onnx_report;

/* A tensor given to the importer (gcc_onnx_options.frozen). */
typedef struct gcc_onnx_tensor {
  const char *name; /* the graph input it replaces */
  int onnx_dtype;   /* ONNX TensorProto.DataType */
  gcc_shape shape;
  const void *data; /* C order, numel elements of onnx_dtype; copied */
  size_t bytes;
} gcc_onnx_tensor;

typedef struct gcc_onnx_options {
  /* Folder that external data locations are relative to (and must stay
   * inside); NULL: the folder of `source` in gcc_onnx_import, or none (an
   * external tensor is then an error). */
  const char *base_dir;
  /* Graph inputs to take as constants with these values, specialising the
   * model (what onnx-simplifier's --overwrite-input-shape with values and
   * TVM's freeze_params do): the way to import a graph that feeds a shape
   * input (Reshape's shape, Squeeze's axes) from a graph input. Each must
   * name a graph input and match its declared dtype and dims. */
  const gcc_onnx_tensor *frozen;
  int n_frozen;
  /* Import for training (issue 15): every BatchNormalization becomes the IR
   * BatchNormalization (torch.nn.BatchNorm2d: batch statistics in training,
   * running estimates in evaluation) with its scale and B trainable and its
   * mean and var as state (running statistics), instead of being folded
   * into the Conv before it; exports made in training mode
   * (training_mode = 1, is_test = 0, the running statistics as unused
   * outputs) import the same way. The running statistics must be
   * initializers.
   * And every Dropout becomes the IR Dropout (graph/ops.h: torch.nn.Dropout
   * and ONNX Dropout-13; inverted dropout, Y = X * mask / (1 - ratio), in
   * training, the identity in evaluation and in exported bundles) with the
   * model's ratio (the attribute before opset 12, the `ratio` input from
   * opset 12, default 0.5) and its `seed` attribute. Exports made with
   * torch.onnx.TrainingMode.TRAINING (training_mode = true), PRESERVE and
   * EVAL (no training_mode; PyTorch's EVAL exports drop Dropout altogether)
   * import alike: the import decides, not the export's mode. The ratio
   * must be a constant (an initializer or a Constant) in [0, 1]: a ratio
   * computed at run time is GCC_ERR_SHAPE, one outside [0, 1]
   * GCC_ERR_INVALID_GRAPH, both naming the node. The mask output must be
   * unused. The masks come from the training spec's seed (graph/philox.h).
   * An initializer read by several nodes is one parameter per reader (the
   * TorchScript exporter stores equal initializers once: a fresh
   * BatchNorm's weight and running_var are both ones, two parameters in
   * PyTorch) unless PyTorch's dynamo exporter marks it a PARAMETER (its
   * ValueInfoProto's metadata_props InputSpec.kind): then it is one
   * nn.Parameter, tied weights (nanoGPT's lm_head.weight is wte.weight),
   * kept as one IR parameter whose gradient is the sum over its readers;
   * the report counts them (n_tied). Initializers it marks BUFFER or
   * CONSTANT_TENSOR are not trained (constants; a running statistic
   * becomes BatchNormalization's state). Export with optimize=False: the
   * exporter's optimizer merges initializers of equal value (<= 1024
   * elements, e.g. every zero bias) into one that keeps the PARAMETER mark,
   * which would then train as one tied parameter. */
  int train;
} gcc_onnx_options;

/* Imports `size` bytes of an ONNX ModelProto. `source` names them in
 * messages (the path) and, unless o->base_dir is set, gives the folder of
 * external data. On success *out is a linked, topologically sorted graph
 * whose shapes infer (batch still symbolic), with no training spec, that
 * the caller frees with gcc_graph_free; `rep` (may be NULL) says what was
 * done. Errors: see the top of this file. `o` may be NULL. */
gcc_status gcc_onnx_import(const uint8_t *bytes, size_t size, const char *source,
                           const gcc_onnx_options *o, gcc_graph **out, gcc_onnx_report *rep,
                           gcc_diag *d);

/* Reads the file at `path` (GCC_ERR_IO naming it if it cannot be read) and
 * imports it with its folder as the base of external data. */
gcc_status gcc_onnx_import_file(const char *path, gcc_graph **out, gcc_onnx_report *rep,
                                gcc_diag *d);

/* The ONNX op types the importer maps, comma-separated ("Add, AveragePool,
 * ..."), alphabetical; a static string. */
const char *gcc_onnx_supported_ops(void);

/* 1 if `op_type` (default domain) is in the mapping table. */
int gcc_onnx_op_supported(const char *op_type);

/* 1 if the bytes look like an ONNX ModelProto: a top-level field 7 (graph)
 * or 8 (opset_import) of wire type 2 before anything that is not protobuf.
 * Reads only the field keys and lengths; a truncated ONNX file still
 * answers 1 so that its import gives the parse error. */
int gcc_onnx_sniff(const uint8_t *bytes, size_t size);

/* Parses a serialized TensorProto (the conformance cases' input_N.pb and
 * output_N.pb; raw_data or typed fields, not external data): its ONNX
 * element type (TensorProto.DataType) in *onnx_dtype, its dims in *shape
 * (zero-size dims allowed here), and its elements, C order, in a malloc'ed
 * *data of *bytes bytes (the caller frees it). Errors: GCC_ERR_PARSE (not
 * a TensorProto), GCC_ERR_INVALID_GRAPH (sizes disagree),
 * GCC_ERR_UNSUPPORTED (string or complex elements, more than 8 dims). */
gcc_status gcc_onnx_parse_tensor(const uint8_t *bytes, size_t size, const char *source,
                                 int *onnx_dtype, gcc_shape *shape, void **data, size_t *nbytes,
                                 gcc_diag *d);

/* The IR dtype of an ONNX element type (GCC_DT_UNDEFINED when the IR has
 * none), and ONNX's name of one ("float", "int64", "uint8"). */
gcc_dtype gcc_onnx_dtype(int onnx_dtype);
const char *gcc_onnx_dtype_name(int onnx_dtype);

/* Prints the report as gcc-import does (opset, producer, per-op counts,
 * initializers, what was folded) into buf; returns buf. */
char *gcc_onnx_report_str(const gcc_onnx_report *rep, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* GCC_ONNX_IMPORT_H */
