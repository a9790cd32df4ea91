/*
 * import_internal.h - the state of one ONNX import, shared by the reader
 * (onnx/import.c: model, tensors, values, order, checks) and the op
 * mapping (onnx/import_ops.c: the table of ONNX op types and their
 * converters). Not a public header.
 *
 * Shapes at import: every dim is known but those that depend on the
 * symbolic batch N (dim 0 of the graph inputs that have one). Such a dim is
 * tracked as a multiple of N (sdim.sym = 1, sdim.v = the factor), which is
 * what Flatten and Reshape make of it ([N, 3, 4] flattened is [12N]); a dim
 * that would be a product of two batch dims is refused.
 */
#ifndef GCC_ONNX_IMPORT_INTERNAL_H
#define GCC_ONNX_IMPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"
#include "onnx/import.h"
#include "onnx/onnx.pb-c.h"

typedef struct sdim {
  int64_t v; /* the dim, or its factor of N when sym */
  int sym;   /* 1: v * N */
} sdim;

typedef struct tshape {
  int ndim;
  sdim d[GCC_MAX_DIMS];
} tshape;

/* One ONNX value (a name of the graph). */
typedef struct ival {
  const char *name; /* owned by the ModelProto */
  int producer;     /* ONNX node index, -1 for a graph input or initializer */
  int is_input;     /* graph input (not an initializer) */
  int is_init;      /* initializer */
  int is_output;    /* graph output */
  int n_uses;       /* node inputs reading it, + 1 if a graph output */
  int done;         /* has a meaning: an input, a constant, an IR value or an alias */
  int alias;        /* index of the value it stands for (Identity, Dropout), or -1 */
  int onnx_dt;      /* ONNX TensorProto.DataType */
  tshape sh;
  int ir; /* IR value, or -1 */
  /* a constant (initializer or folded): element data in ONNX's element
   * type (onnx_dt), C order; owned by the import's pool */
  int is_const;
  const void *data;
  size_t bytes;
  int trainable; /* a float32 initializer (a weight): an IR PARAM when materialised */
  /* the IR Conv node that produced it (for folding a BatchNormalization
   * into it), or -1 */
  int conv_node;
  /* the ONNX node whose input first materialised `ir` (an initializer), or
   * -1: importing for training, another node reading the same initializer
   * gets its own copy (see ir_of) */
  int ir_node;
  int copy_ir, copy_node; /* the last such copy and its node (-1: none) */
  /* the dynamo exporter marks it a PARAMETER (import_torch_meta.c): one
   * nn.Parameter however many nodes read it (tied weights), so importing for
   * training gives its readers one IR parameter, not a copy each;
   * tie_counted: counted in the report's n_tied */
  int tied, tie_counted;
  /* shape arithmetic (onnx/import_ops_index.c): an int64 scalar or vector
   * computed from shapes that holds the symbolic batch N: element k is
   * symv[k] (v, or v * N when sym); owned by the pool. Such a value is not
   * a constant (is_const 0): only the converters that fold shape
   * arithmetic read it (Shape, Gather, Slice, Concat, Squeeze, Unsqueeze,
   * Cast, Reshape's and Expand's shape input); any other use is an error
   * naming it. */
  const sdim *symv;
  /* a sequence made by SplitToSequence (onnx/import_ops_sequence.c), or
   * NULL; owned by the pool. Only SequenceAt at a constant position reads
   * it; any other use is an error naming it. */
  const struct iseq *seq;
  /* an integer index tensor that depends on the symbolic batch N, held as
   * an affine map of its indices (onnx/import_ops_affine.c), or NULL; owned
   * by the pool. Like symv, not a constant: only the converters that fold
   * it read it; any other use is an error naming it. */
  const struct iaff *aff;
} ival;

/* Element [i0, i1, ...] is off + sum_d stride[d] * i_d (stride 0 on a
 * 1-dim). */
typedef struct iaff {
  int64_t off;
  int64_t stride[GCC_MAX_DIMS];
} iaff;

/* A sequence of slices of one tensor: part k is src[.., off_k : off_k +
 * sizes[k], ..] along `axis` (off_k the sum of the sizes before it), that
 * axis removed when squeeze. */
typedef struct iseq {
  int src; /* root value index of the split tensor */
  int axis;
  int squeeze;
  int64_t n;
  const int64_t *sizes; /* owned by the pool */
} iseq;

typedef struct imp {
  const char *src;     /* file name for messages */
  char base_dir[4096]; /* "" when there is none */
  Onnx__ModelProto *m;
  const Onnx__GraphProto *gp;
  int64_t opset;
  gcc_graph *g;
  ival *v;
  int n_v, cap_v;
  int *map; /* open-addressing name -> value index (-1 empty) */
  int map_cap;
  void **pool; /* owned buffers */
  int n_pool, cap_pool;
  gcc_onnx_report *rep;
  int cur_node;                  /* ONNX node being converted (for messages), -1 */
  const gcc_onnx_tensor *frozen; /* graph inputs given as constants */
  int n_frozen;
  int train; /* gcc_onnx_options.train */
  /* IR activations that take a graph output's name when the graph is
   * finished (the output was an alias of them) */
  struct {
    int ir;
    const char *name;
  } * rename;
  int n_rename, cap_rename;
  /* patterns converted as one IR node (onnx/import_ops_math.c: GELU): the IR
   * nodes of their other ONNX nodes are removed when the graph is done */
  int n_patterns;
} imp;

/* A node being converted. */
typedef struct nctx {
  imp *I;
  const Onnx__NodeProto *n;
  int index;      /* in the graph */
  int ver;        /* the op version whose semantics apply */
  char desc[400]; /* "node 'conv1' (Conv)" */
  char ir_name[256];
  int n_ir;        /* IR nodes made for it */
  int folded;      /* 1 when it made no IR node */
  char ir_ops[96]; /* IR ops made, for the report */
} nctx;

/* ---- shapes (import.c) ---- */
char *tshape_str(const tshape *s, char *buf, size_t cap);
int tshape_has_sym(const tshape *s);
/* numel as a multiple of N (sym) or a number; 0 on overflow or a product of
 * two batch dims. */
int tshape_numel(const tshape *s, sdim *out);
int64_t tshape_static_numel(const tshape *s); /* -1 if symbolic */
/* ONNX multidirectional broadcast; 0 if incompatible. */
int tshape_broadcast(const tshape *a, const tshape *b, tshape *out);

/* ---- values (import.c) ---- */
ival *imp_val(imp *I, int idx);
/* The index of the value named `name`, -1 if none. */
int imp_find(const imp *I, const char *name);
/* ---- the exporter's metadata (import_torch_meta.c) ---- */
/* Reads the InputSpec.kind that PyTorch's dynamo exporter writes on each
 * initializer's ValueInfoProto (metadata_props): PARAMETER sets ival.tied,
 * BUFFER and CONSTANT_TENSOR clear ival.trainable (a constant, or a running
 * statistic that BatchNormalization makes state). Files without it are
 * left as they are. */
gcc_status read_torch_kinds(imp *I, gcc_diag *d);
/* The value `idx` stands for (follows aliases). */
int imp_root(imp *I, int idx);
/* Input k of the node as a root value index; -1 if omitted or absent. */
int in_idx(nctx *c, int k);
int n_in(nctx *c);
/* Output k's value index (-1 if omitted or absent); out_used: read by a node
 * or a graph output. */
int out_idx(nctx *c, int k);
int out_used(nctx *c, int k);
int n_out(nctx *c);

/* The IR value of a root value, materialising a constant as an IR
 * initializer (PARAM when trainable, else CONST) the first time. Importing
 * for training (imp.train), a trainable initializer that several nodes read
 * is materialised once per node: exporters store equal initializers once
 * (the TorchScript exporter's deduplication: a fresh BatchNorm's weight and
 * running_var are both ones), while PyTorch trains each parameter on its
 * own; the copies are named "<name>_1", "<name>_2"... -- except an
 * initializer the dynamo exporter marks a PARAMETER (ival.tied): that is
 * one nn.Parameter read by several nodes (nanoGPT's wte.weight, the
 * embedding, is lm_head.weight), so every reader gets the one IR parameter
 * and autodiff sums their gradients, as PyTorch's does. Errors: a dtype the IR
 * does not compute or a zero-size constant (UNSUPPORTED, naming the consumer
 * node). */
gcc_status ir_of(nctx *c, int idx, int *ir, gcc_diag *d);

/* A new IR initializer holding a copy of constant `idx` (a root value with
 * data), named "<name>_<k>"; for a running statistic that must not share
 * storage with another reader. Errors as ir_of. */
gcc_status ir_private_copy(nctx *c, int idx, int *ir, gcc_diag *d);

/* Makes output k an alias of value `idx`. */
void set_alias(nctx *c, int k, int idx);
/* Makes output k a constant with `data` (taken over by the pool). */
gcc_status set_const(nctx *c, int k, int onnx_dt, const tshape *s, void *data, size_t bytes,
                     gcc_diag *d);
/* Adds an owned buffer to the pool (freed with the import). */
gcc_status pool_add(imp *I, void *p, gcc_diag *d);

/* Emits an IR node of op `op` reading IR values `ins` (-1: omitted) and
 * writing one IR value: the ONNX output k when out_k >= 0 (given dtype and
 * tracked shape `s`), else a new temporary named after the node (its index
 * in *tmp). Returns the IR node in *node. */
gcc_status emit(nctx *c, int op, const int *ins, int n_ins, int out_k, int onnx_dt, const tshape *s,
                int *tmp, int *node, gcc_diag *d);
/* Appends one more output to IR node `node` (made by emit): the ONNX output
 * out_k when it has a name (given dtype and tracked shape `s`), else a new
 * temporary named after the node and out_k. For the optional outputs of a
 * multi-output op (LayerNormalization's Mean and InvStdDev). */
gcc_status emit_output(nctx *c, int node, int out_k, int onnx_dt, const tshape *s, gcc_diag *d);
/* An IR Reshape of IR value `x` to `s` (a batch-dependent dim written -1;
 * at most one), into ONNX output out_k or a temporary (*tmp). */
gcc_status emit_reshape(nctx *c, int x, const tshape *s, int out_k, int onnx_dt, int *tmp,
                        gcc_diag *d);

/* ---- attributes (import.c) ---- */
/* Refuses every attribute of the node not in the NULL-terminated list. */
gcc_status allow_attrs(nctx *c, gcc_diag *d, ...);
const Onnx__AttributeProto *attr(nctx *c, const char *name);
gcc_status a_int(nctx *c, const char *name, int64_t def, int64_t *out, gcc_diag *d);
gcc_status a_float(nctx *c, const char *name, float def, float *out, gcc_diag *d);
/* *n = -1 when absent. */
gcc_status a_ints(nctx *c, const char *name, const int64_t **v, int *n, gcc_diag *d);
gcc_status a_string(nctx *c, const char *name, const char *def, char *out, size_t cap, gcc_diag *d);
/* Reads a TensorProto (attribute or initializer) into host memory. */
gcc_status read_tensor(imp *I, const Onnx__TensorProto *t, const char *what, int *onnx_dt,
                       tshape *s, void **data, size_t *bytes, gcc_diag *d);

/* A constant input's elements as int64 (INT64 or INT32 constants); *n its
 * element count. Errors: not a constant (SHAPE: "shape input ... is not a
 * constant"), another dtype. The array is owned by the pool. */
gcc_status const_ints(nctx *c, int idx, const char *what, const int64_t **v, int64_t *n,
                      gcc_diag *d);
/* A constant scalar input as a double (any numeric dtype). */
gcc_status const_scalar(nctx *c, int idx, const char *what, double *out, gcc_diag *d);

size_t onnx_dtype_size(int onnx_dt);
const char *onnx_dtype_name(int onnx_dt);
/* The IR dtype of an ONNX one, GCC_DT_UNDEFINED if the IR has none. */
gcc_dtype onnx_to_gcc_dtype(int onnx_dt);

gcc_status node_err(nctx *c, gcc_diag *d, gcc_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- the op table (import_ops.c) ---- */
typedef gcc_status (*onnx_convert_fn)(nctx *c, gcc_diag *d);

typedef struct onnx_op_map {
  const char *op_type;
  /* the op's since_versions up to GCC_ONNX_MAX_OPSET (ONNX's history),
   * ascending, 0-terminated: a node gets the newest <= the model's opset */
  int versions[12];
  onnx_convert_fn convert;
  const char *ir; /* what it becomes, for docs and reports */
} onnx_op_map;

const onnx_op_map *onnx_op_find(const char *op_type);
int onnx_op_count(void);
const onnx_op_map *onnx_op_at(int i);

/* Finishes the conversion of a node whose outputs are all constants or
 * aliases. */
void mark_folded(nctx *c);

#endif /* GCC_ONNX_IMPORT_INTERNAL_H */
