/*
 * ir.h - the Graph IR of gcc-train.
 *
 * A graph holds values and nodes in SSA form: every value is produced by
 * exactly one node output, or is a graph input, an initializer (parameter or
 * constant) or a value created by a pass (gradient, optimizer state). Values
 * and nodes live in growable arrays and are referred to by index (int), so
 * adding nodes never invalidates a reference held by a pass.
 *
 * Shapes are row-major (C order); image tensors are NCHW. A dim of -1 in
 * position 0 of a graph input is the symbolic batch size until
 * gcc_graph_bind_batch() replaces it.
 */
#ifndef GCC_GRAPH_IR_H
#define GCC_GRAPH_IR_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCC_MAX_DIMS  8
#define GCC_BATCH_DIM (-1)

/* Device ids used by placement: the CPU (host) is 0, cuda:N is N + 1. */
#define GCC_DEV_CPU            0
#define GCC_DEV_CUDA(n)        ((n) + 1)
#define GCC_DEV_IS_CUDA(id)    ((id) >= 1)
#define GCC_DEV_CUDA_INDEX(id) ((id)-1)

/* "cpu", "cuda:0", ... into buf; returns buf ("?" for a negative id). */
const char *gcc_dev_name(int id, char *buf, size_t cap);

/* Element types; numbering equals graph.proto's DataType. */
typedef enum gcc_dtype {
  GCC_DT_UNDEFINED = 0,
  GCC_DT_FLOAT32 = 1,
  GCC_DT_INT64 = 2,
  GCC_DT_INT32 = 3,
  GCC_DT_FLOAT16 = 4,
  GCC_DT_BFLOAT16 = 5,
  GCC_DT_FLOAT64 = 6,
  GCC_DT_UINT8 = 7,
  /* one byte, 0 or 1 (ONNX elem_type 9, numpy/torch bool): the results of
   * comparisons and logical ops, Where's condition */
  GCC_DT_BOOL = 8,
  GCC_DT_COUNT
} gcc_dtype;

/* Size of one element in bytes (0 for UNDEFINED). */
size_t gcc_dtype_size(gcc_dtype t);
/* "float32", "int64", ... ("?" when out of range). */
const char *gcc_dtype_name(gcc_dtype t);
/* 1 for the dtypes a model file may name (FLOAT32, INT64, INT32, BOOL). FLOAT16
 * and BFLOAT16 values are made by the autocast pass (--precision), not read
 * from files. */
int gcc_dtype_supported(gcc_dtype t);
/* 1 for FLOAT32, FLOAT16 and BFLOAT16 (the dtypes float math reads). */
int gcc_dtype_is_float(gcc_dtype t);

/* --precision: the floating-point format a plan computes in (PyTorch's
 * torch.autocast / torch.backends.cuda.matmul.allow_tf32). FP32 is the
 * default and leaves the graph as it is; TF32 keeps every value float32 and
 * lets cuBLASLt and cuDNN multiply in TF32 (math modes only); BF16 and FP16
 * make the autocast pass (passes/autocast.c) store the operands and results
 * of GEMMs and convolutions in 16 bits, accumulating in float32. */
typedef enum gcc_precision {
  GCC_PRECISION_FP32 = 0,
  GCC_PRECISION_TF32,
  GCC_PRECISION_BF16,
  GCC_PRECISION_FP16,
  GCC_PRECISION_COUNT
} gcc_precision;

/* "fp32", "tf32", "bf16", "fp16" ("?" when out of range). */
const char *gcc_precision_name(int p);
/* The precision called `name`, or -1. */
int gcc_precision_lookup(const char *name);
/* The 16-bit dtype of a BF16 / FP16 precision; GCC_DT_FLOAT32 otherwise. */
gcc_dtype gcc_precision_dtype(int p);

typedef struct gcc_shape {
  int ndim; /* 0 = scalar */
  int64_t dims[GCC_MAX_DIMS];
} gcc_shape;

/* Number of elements; -1 when a dim is symbolic; sets *overflow (if not NULL)
 * when the product does not fit in int64. */
int64_t gcc_shape_numel(const gcc_shape *s, int *overflow);
/* Writes "[64, 784]" into buf (always NUL-terminated); returns buf. */
char *gcc_shape_str(const gcc_shape *s, char *buf, size_t cap);
int gcc_shape_equal(const gcc_shape *a, const gcc_shape *b);

/* The memory order of a 4-D value (passes/layout.c). A value's shape is
 * always its logical [N, C, H, W] (ONNX's and PyTorch's order); the layout
 * says how its elements lie in memory: NCHW (row-major in that order, the
 * default: every value before the layout pass, and every graph input,
 * output, parameter, gradient and optimizer state after it) or NHWC
 * (channels-last: the channel innermost, element (n, c, h, w) at
 * ((n * H + h) * W + w) * C + c; PyTorch's torch.channels_last). A filter
 * [K, C, R, S] in NHWC is cuDNN's KRSC. Values of another rank are NCHW. */
typedef enum gcc_layout { GCC_LAYOUT_NCHW = 0, GCC_LAYOUT_NHWC = 1, GCC_LAYOUT_COUNT } gcc_layout;

/* "NCHW", "NHWC" ("?" when out of range). */
const char *gcc_layout_name(int layout);
/* The dims of `logical` in memory order under `layout` (NHWC: [N, H, W, C]
 * for a 4-D shape; the shape itself otherwise). */
gcc_shape gcc_layout_physical(const gcc_shape *logical, int layout);
/* The physical axis of logical axis `axis` of a `ndim`-D value under
 * `layout`, and the logical axis of physical axis `axis` (`inverse` 1). */
int gcc_layout_axis(int layout, int ndim, int axis, int inverse);

/* What a value is, which decides where its storage lives. */
typedef enum gcc_value_kind {
  GCC_VALUE_ACTIVATION = 0, /* produced by a node, per-step arena */
  GCC_VALUE_INPUT,          /* graph input fed per step (batch) */
  GCC_VALUE_PARAM,          /* trainable FLOAT32 initializer: persistent arena */
  GCC_VALUE_CONST,          /* non-trainable initializer or pass-made constant */
  GCC_VALUE_GRAD,           /* gradient of a parameter: persistent arena */
  GCC_VALUE_OPT_STATE,      /* optimizer state (momentum, Adam moments) and the 16-bit
                               copy of a parameter that its update writes: persistent */
  GCC_VALUE_KIND_COUNT
} gcc_value_kind;

const char *gcc_value_kind_name(gcc_value_kind k);

typedef struct gcc_value {
  char *name;
  gcc_dtype dtype;
  gcc_shape shape;
  gcc_value_kind kind;
  /* node index, -1 if none; -1 too for the output of an optimizer update
   * (a parameter's 16-bit copy, written for the next step: graph/ops.h
   * GCC_OPF_OPTIMIZER) */
  int producer;
  int *consumers; /* node indices (filled by gcc_graph_link) */
  int n_consumers;
  void *data; /* PARAM/CONST: owned element data, row-major LE */
  size_t data_bytes;
  /* 1: `data` is another graph's (gcc_graph_clone_borrowing_params), read
   * only and never freed through this graph */
  int data_borrowed;
  int param_of; /* GRAD/OPT_STATE: value index of the parameter, else -1 */
  /* PARAM only: a running statistic (BatchNormalization's running mean and
   * variance, PyTorch's buffers): persistent, saved, checkpointed and
   * exported like a parameter, updated in place by its node's forward in
   * training, never differentiated nor updated by the optimizer */
  int state;
  int device; /* after placement: GCC_DEV_CPU or GCC_DEV_CUDA(n); -1 before */
  /* gcc_layout: NCHW (0) unless the layout pass made it NHWC (4-D only) */
  int layout;
} gcc_value;

typedef enum gcc_attr_type {
  GCC_ATTR_UNDEFINED = 0,
  GCC_ATTR_INT = 1,
  GCC_ATTR_FLOAT = 2,
  GCC_ATTR_STRING = 3,
  GCC_ATTR_INTS = 4,
  GCC_ATTR_FLOATS = 5,
} gcc_attr_type;

typedef struct gcc_attr {
  char *name;
  gcc_attr_type type;
  int64_t i;
  float f;
  char *s;
  int64_t *ints;
  int n_ints;
  float *floats;
  int n_floats;
} gcc_attr;

/* Training-time role of a node. */
typedef enum gcc_phase {
  GCC_PHASE_FORWARD = 0,
  GCC_PHASE_BACKWARD,
  GCC_PHASE_OPTIMIZER,
} gcc_phase;

typedef struct gcc_node {
  char *name;
  int op;      /* gcc_op_id (graph/ops.h) */
  int *inputs; /* value indices; -1 = omitted optional input */
  int n_inputs;
  int *outputs; /* value indices */
  int n_outputs;
  gcc_attr *attrs; /* as written in the model */
  int n_attrs;
  /* Attributes resolved against the op's schema, in schema order, defaults
   * filled in (see gcc_op_resolve_attrs); kernels read these, never names. */
  gcc_attr *av;
  int n_av;
  char *pin; /* device pin from the model ("cpu", "cuda:0"), or NULL */
  gcc_phase phase;
  int device; /* after placement: GCC_DEV_CPU or GCC_DEV_CUDA(n); -1 before */
  int reason; /* after placement: gcc_placement_reason (passes/passes.h) */
  int group;  /* after fusion: index in gcc_graph.groups, -1 if none */
} gcc_node;

/* A group of nodes that runs as one launch on a device: a fused kernel, a
 * library call. The lowering pass that forms groups (CUDA: codegen/fusion.c)
 * gives them their meaning; the IR only records them, and when they run. */
typedef struct gcc_group {
  char *name; /* kernel / call name: "fused_relu1_grad_..." */
  int kind;   /* what the lowering makes of it (codegen/lowering.h gcc_group_kind) */
  int device;
  int *nodes; /* node indices in schedule order */
  int n_nodes;
  int epilogue; /* GEMM groups: the epilogue (codegen/lowering.h gcc_epilogue) */
  int at_first; /* 1: the group runs at its first node in schedule order (a GEMM whose
                     epilogue consumes only what the GEMM consumes), 0: at its last */
} gcc_group;

/* The schedule index (node) at which group `gr` runs, reading every input
 * of its nodes and writing every output there: its first node if
 * gr->at_first, else its last. */
int gcc_group_point(const gcc_group *gr);

typedef enum gcc_opt_kind { GCC_OPT_NONE = 0, GCC_OPT_SGD, GCC_OPT_ADAM } gcc_opt_kind;

/* fp16 loss scaling (--loss-scale), torch.amp.GradScaler's rules: the
 * backward starts from `init_scale` instead of 1 (the loss multiplied by
 * the scale), every gradient is checked for Inf/NaN (after the data-parallel
 * all-reduce) and unscaled (times 1 / scale, float32) inside the optimizer
 * kernel; a step with a non-finite gradient updates nothing (parameters,
 * momentum, Adam's moments and step count stay bit for bit) and multiplies
 * the scale by backoff_factor; after growth_interval good steps in a row
 * the scale is multiplied by growth_factor. FIXED keeps the scale (growth
 * and backoff factors 1) but still skips non-finite steps. The scale, the
 * growth tracker and the count of applied steps are float32 values of the
 * graph in the persistent arena (GCC_SCALER_*_NAME), on the parameters'
 * device: a step never reads them on the host. */
typedef enum gcc_loss_scale_mode {
  GCC_LOSS_SCALE_NONE = 0, /* no scaling (fp32, tf32, bf16: PyTorch uses no GradScaler) */
  GCC_LOSS_SCALE_DYNAMIC,  /* GradScaler() */
  GCC_LOSS_SCALE_FIXED,    /* a constant scale, non-finite steps still skipped */
} gcc_loss_scale_mode;

typedef struct gcc_loss_scale {
  gcc_loss_scale_mode mode;
  float init_scale;        /* GradScaler's init_scale (65536) */
  float growth_factor;     /* 2 (1 when FIXED) */
  float backoff_factor;    /* 0.5 (1 when FIXED) */
  int64_t growth_interval; /* 2000 */
} gcc_loss_scale;

/* torch.amp.GradScaler's defaults. */
#define GCC_SCALER_INIT_SCALE      65536.0f
#define GCC_SCALER_GROWTH_FACTOR   2.0f
#define GCC_SCALER_BACKOFF_FACTOR  0.5f
#define GCC_SCALER_GROWTH_INTERVAL 2000

/* The persistent scalar values a loss-scaled training graph holds (named
 * after GradScaler's state_dict keys), and its per-step flag. */
#define GCC_SCALER_SCALE_NAME     "grad_scaler.scale"
#define GCC_SCALER_TRACKER_NAME   "grad_scaler._growth_tracker"
#define GCC_SCALER_STEPS_NAME     "grad_scaler.applied_steps" /* Adam's `step`, SGD's first step */
#define GCC_SCALER_FOUND_INF_NAME "grad_scaler.found_inf"
/* gradient clipping's GradNorm output [norm, coefficient] (graph/ops.h) */
#define GCC_CLIP_NORM_NAME "clip_grad_norm.norm"
/* two 32-bit words the CUDA check kernel counts its blocks and ORs their
 * flags in; zero between launches (the last block clears them) */
#define GCC_SCALER_SCRATCH_NAME "grad_scaler.check_scratch"

typedef struct gcc_optimizer {
  gcc_opt_kind kind;
  float lr, momentum, dampening, weight_decay; /* SGD (weight_decay shared) */
  int nesterov;
  float beta1, beta2, eps; /* Adam */
  int decoupled;           /* Adam: decoupled weight decay (torch.optim.AdamW) */
  gcc_loss_scale scaler;   /* fp16 loss scaling; mode NONE (zeroed): none */
  /* weight_decay on the parameters of >= 2 dims only (nanoGPT's
   * configure_optimizers; gcc_param_decayed); 0: on every parameter */
  int decay_matrices_only;
  /* > 0: torch.nn.utils.clip_grad_norm_(max_norm) before the updates (a
   * GradNorm node over every gradient, graph/ops.h GRAD_NORM_*); 0: none */
  float clip_grad_norm;
} gcc_optimizer;

/* Whether the optimizer's weight decay applies to parameter value `v`:
 * always, or with decay_matrices_only when its shape has >= 2 dims. */
int gcc_param_decayed(const gcc_optimizer *o, const gcc_value *v);

/* LrSchedule of graph.proto: the learning rate of each epoch
 * (graph/recipe.h gcc_lr_at_epoch). */
typedef enum gcc_sched_kind {
  GCC_SCHED_NONE = 0,
  GCC_SCHED_STEP,
  GCC_SCHED_COSINE,
  GCC_SCHED_WARMUP_COSINE, /* by optimizer step, not by epoch (gcc_lr_at_step) */
} gcc_sched_kind;

typedef struct gcc_lr_schedule {
  gcc_sched_kind kind;
  int64_t step_size; /* StepLR */
  float gamma;       /* StepLR */
  int64_t t_max;     /* CosineAnnealingLR (0: the spec's epochs); WarmupCosineLR's max_steps */
  float eta_min;     /* CosineAnnealingLR; WarmupCosineLR's min_lr */
  int64_t warmup;    /* WarmupCosineLR */
} gcc_lr_schedule;

#define GCC_MAX_CHANNELS 4

/* TrainingSpec of graph.proto, with defaults filled in. */
typedef struct gcc_training {
  int present;
  char *loss, *prediction, *input, *target, *dataset;
  gcc_optimizer opt;
  int64_t batch_size, epochs;
  int n_mean, n_std;
  float mean[GCC_MAX_CHANNELS], std[GCC_MAX_CHANNELS];
  uint64_t seed;
  int inline_inputs, inline_targets; /* CONST value indices of the inline dataset, or -1 */
  gcc_lr_schedule sched;
  /* TrainingSpec.vocab: token id i is the byte vocab[i] (--dataset text);
   * n_vocab 0: none */
  int n_vocab;
  uint8_t vocab[256];
} gcc_training;

typedef struct gcc_graph {
  char *name;
  char *source; /* file it came from, for messages ("<memory>" if none) */
  char *producer;
  gcc_value *values;
  int n_values, cap_values;
  gcc_node *nodes;
  int n_nodes, cap_nodes;
  int *inputs, n_inputs, cap_inputs;    /* graph input value indices */
  int *outputs, n_outputs, cap_outputs; /* graph output value indices */
  gcc_training training;
  struct gcc_name_map *names; /* value name -> index */
  gcc_group *groups;          /* after fusion */
  int n_groups;
  /* the --precision the graph is compiled for (gcc_precision; set by the
   * autocast pass, 0 = FP32): the math mode of its GEMMs and convolutions */
  int precision;
  /* --no-deterministic (gcc_options.nondeterministic, set by the autocast
   * pass): 1 lets cuDNN choose non-deterministic convolution algorithms */
  int nondeterministic;
} gcc_graph;

/* Drops every fusion group (node->group = -1). */
void gcc_graph_clear_groups(gcc_graph *g);

/* Appends a group of `n` nodes (copied) of lowering kind `kind` with
 * epilogue `epi` (both the lowering's), running at its last node, and sets
 * their node->group; returns its index in *out (out may be NULL). */
gcc_status gcc_graph_add_group(gcc_graph *g, const char *name, int kind, int device,
                               const int *nodes, int n, int epi, int *out, gcc_diag *d);

/* Creates an empty graph; NULL on allocation failure. */
gcc_graph *gcc_graph_new(const char *name, const char *source);
void gcc_graph_free(gcc_graph *g);
/* Deep copy (values, nodes, attributes, initializer data, training spec).
 * Fusion groups are not copied: fusion runs last, on the compiled copy. */
gcc_status gcc_graph_clone(const gcc_graph *g, gcc_graph **out, gcc_diag *d);
/* gcc_graph_clone, but the copy's PARAM values point at g's element data
 * instead of copies of it (data_borrowed): read only, never freed through
 * the copy, valid while g lives and is not changed. For a compile whose plan
 * binds the parameters to storage of its own (a session's arena, a
 * bundle's weights): the passes still read the values they fold (a
 * one-element scale), and no second copy of the weights is made (GPT-2
 * 124M: 498 MB a plan). Call gcc_graph_drop_param_data on the copy before g
 * may go. */
gcc_status gcc_graph_clone_borrowing_params(const gcc_graph *g, gcc_graph **out, gcc_diag *d);
/* Forgets the element data of every PARAM value (data NULL, data_bytes 0;
 * freed unless borrowed): a compiled graph's parameters live in the storage
 * its plan binds (runtime/plan.h), not in the graph. */
void gcc_graph_drop_param_data(gcc_graph *g);

/* Index of the value called `name`, or -1. */
int gcc_graph_find(const gcc_graph *g, const char *name);

/* Adds a value; fails with GCC_ERR_INVALID_GRAPH if the name exists.
 * `data` (may be NULL) is copied. Returns the index in *out_index. */
gcc_status gcc_graph_add_value(gcc_graph *g, const char *name, gcc_dtype dt, const gcc_shape *shape,
                               gcc_value_kind kind, const void *data, size_t data_bytes,
                               int *out_index, gcc_diag *d);
/* Adds a value whose name is made unique from `base` ("base", "base_1", ...). */
gcc_status gcc_graph_add_temp(gcc_graph *g, const char *base, gcc_value_kind kind, int *out_index,
                              gcc_diag *d);

/* Adds a node with op `op`; inputs/outputs are value indices (outputs must
 * not have a producer yet). Attributes are added with gcc_node_set_*. */
gcc_status gcc_graph_add_node(gcc_graph *g, const char *name, int op, const int *inputs,
                              int n_inputs, const int *outputs, int n_outputs, int *out_index,
                              gcc_diag *d);
gcc_status gcc_node_set_int(gcc_graph *g, int node, const char *name, int64_t v);
gcc_status gcc_node_set_float(gcc_graph *g, int node, const char *name, float v);
gcc_status gcc_node_set_string(gcc_graph *g, int node, const char *name, const char *v);
gcc_status gcc_node_set_ints(gcc_graph *g, int node, const char *name, const int64_t *v, int n);
gcc_status gcc_node_set_floats(gcc_graph *g, int node, const char *name, const float *v, int n);
/* Attribute `name` as written, or NULL. */
const gcc_attr *gcc_node_attr(const gcc_node *n, const char *name);
/* Removes every attribute of `node`, as written and as resolved (a lowering
 * pass that changes a node's op; gcc_op_resolve_attrs fills the new op's
 * defaults). */
void gcc_node_clear_attrs(gcc_graph *g, int node);

gcc_status gcc_graph_add_input(gcc_graph *g, int value);
gcc_status gcc_graph_add_output(gcc_graph *g, int value);

/* Recomputes every value's producer and consumers from the nodes. */
gcc_status gcc_graph_link(gcc_graph *g, gcc_diag *d);

/* Reorders nodes topologically (stable: among ready nodes, the earliest in
 * the current order first). Fails with GCC_ERR_INVALID_GRAPH naming a node
 * on the cycle if there is one, or a value used before it is defined. */
gcc_status gcc_graph_toposort(gcc_graph *g, gcc_diag *d);

/* Replaces the symbolic batch dim (-1) of every graph input by `batch`. */
gcc_status gcc_graph_bind_batch(gcc_graph *g, int64_t batch, gcc_diag *d);

/* Removes the nodes that do not contribute to any of the `keep` values (all
 * graph outputs when keep is NULL). Values stay (unreferenced ones are
 * harmless: only values of scheduled nodes get storage). Used to build the
 * inference graph from a training graph. */
gcc_status gcc_graph_prune(gcc_graph *g, const int *keep, int n_keep, gcc_diag *d);

/* Removes the nodes i with dead[i] != 0 (dead has n_nodes entries), keeping
 * the others in order, and relinks. The caller makes sure no remaining node
 * reads what a removed one wrote. */
gcc_status gcc_graph_remove_nodes(gcc_graph *g, const char *dead, gcc_diag *d);
/* A one-line human description of a node: "node 'fc1' (Gemm)". */
const char *gcc_node_desc(const gcc_graph *g, int node, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* GCC_GRAPH_IR_H */
