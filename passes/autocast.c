/*
 * autocast.c - mixed precision (--precision bf16|fp16): torch.autocast's
 * rules applied to the whole training graph, after autodiff, as Cast nodes
 * that placement, copy insertion and fusion see like any other node.
 *
 * The pass's own per-op table (kAutocast, pinned to GCC_OP_COUNT) puts
 * every op in one class:
 *  - LOW: GEMMs (and 2-D MatMuls), convolutions and ConvTranspose compute
 *    in 16 bits: every float input is cast to the 16-bit dtype, the result
 *    is stored in it; the GEMM accumulates in float32 (cuBLASLt
 *    CUBLAS_COMPUTE_32F, cuDNN with a float32 convolution descriptor, the
 *    CPU's sgemm on the widened operands). torch.autocast's "lower
 *    precision" list (mm, addmm, linear, conv2d, conv_transpose2d).
 *  - FP32: reductions, softmax, log-softmax, the losses and their
 *    gradients, the optimizers, LRN, Sqrt, LayerNormalization and its
 *    gradient: 16-bit inputs are cast to float32. torch.autocast's
 *    "float32" list (sum, softmax, log_softmax, cross_entropy, layer_norm,
 *    ...). One exception: the bias gradient of a 16-bit Gemm (a
 *    ReduceSumTo, part of addmm's backward in PyTorch, not an autocast op)
 *    is LOW, see gemm_bias_grad.
 *  - PROMOTE: the ops on neither list run in the dtype of their inputs:
 *    elementwise ops and views (a ReLU of a bfloat16 GEMM output is
 *    bfloat16), the poolings and their gradients (max_pool2d, avg_pool2d,
 *    adaptive_avg_pool2d: cuDNN with 16-bit tensors, averages summed in
 *    float32), Concat, Transpose, Pad and Dropout (generated kernels that
 *    load 16 bits into float and store rounded to nearest even); mixed
 *    float inputs are cast to float32, the widest (torch's type
 *    promotion). BatchNormalization and BatchNormGrad are PROMOTE in X and
 *    dY only (f32_from): scale, bias and the running statistics stay
 *    float32 and so do dscale and dB, the statistics are float64 sums, as
 *    cuDNN's batch norm runs a 16-bit input under autocast.
 *  - KEEP: the node is left as it is (Cast itself, copies).
 * Values the runtime binds or reads keep their dtype: parameters,
 * gradients, optimizer state, graph outputs, the loss and the prediction.
 * When a 16-bit node produces one, it writes a 16-bit temporary and a Cast
 * to float32 writes the value (so parameter gradients are float32, as
 * PyTorch's .grad of a float32 parameter). The optimizer updates the
 * float32 parameters (master weights), and writes their 16-bit copies in
 * the same kernel: a parameter that a LOW node reads and an update node
 * updates gets a persistent copy "<param>.bf16" / "<param>.fp16"
 * (OPT_STATE, param_of the parameter), the update node's output (graph/ops.h
 * GCC_OPF_OPTIMIZER): the update rounds the updated float32 weight once to
 * nearest even and stores it, and the next step's GEMMs and convolutions
 * (forward and backward) read it; the session makes it from the parameters
 * when it starts, resumes, or is given parameters (runtime/session.h). No
 * per-step Cast of such a parameter is left. A parameter without an update
 * (no gradient reaches the loss) keeps a Cast, and so does every parameter
 * of an evaluation plan (no update to make the copy: one Cast per batch,
 * of the same float32 weights, so the same bits); options->param_copy_casts
 * makes the Casts of before for every parameter (tests compare the two).
 * Casts and copies are one per (value, dtype), shared by every reader in
 * the step (the forward and the backward GEMM of a layer read the same
 * one); a parameter that float32 nodes read too is read there as it is.
 *
 * Casts go right before the first node that reads them (or right after the
 * node whose output they convert), so the schedule keeps its order; fusion
 * (codegen/fusion.c) fuses them into the pointwise kernels next to them
 * (a Cast to float32 before a sum is one reduction kernel reading
 * bfloat16).
 *
 * FP32 and TF32 leave the graph unchanged: an FP32 plan is the plan of a
 * build without this pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/passes.h"

typedef enum ac_class {
  AC_UNSET = 0, /* an entry left empty (tests/op_tables_test fails on it) */
  AC_LOW,
  AC_FP32,
  AC_PROMOTE,
  AC_KEEP,
} ac_class;

typedef struct ac_rule {
  ac_class cls;
  int only_2d; /* LOW only when every input is 2-D (a cuBLASLt GEMM); else FP32 */
  /* PROMOTE: inputs from this one on are float32 whatever the others are
   * (BatchNormalization's scale, bias and running statistics); 0: none */
  int f32_from;
} ac_rule;

_Static_assert(GCC_OP_COUNT == 124, "a new op: add its autocast class to kAutocast");

/* Convolutions (forward, data and filter gradients) and ConvTranspose are
 * LOW: cuDNN with 16-bit tensors and a float32 convolution descriptor
 * (torch.autocast's list has conv_transpose2d). Poolings, Concat, Transpose
 * and Pad are on neither of autocast's lists, so they run in their input's
 * dtype (PROMOTE): max_pool2d, avg_pool2d, adaptive_avg_pool2d, cat, pad
 * and permute of a bfloat16 tensor are bfloat16 in PyTorch; cuDNN pools 16-bit
 * tensors (averages summed in float32) and the generated kernels load 16
 * bits into float and store 16 bits. BatchNormalization and its gradient
 * take a 16-bit X (and dY) and give a 16-bit Y (and dX) with float32 scale,
 * bias, running statistics, dscale and dB and float32 (float64 here)
 * statistics, as cuDNN's batch norm under autocast. Softmax, LogSoftmax, the
 * losses, LRN and Sqrt stay FP32 (autocast's float32 list). */
static const ac_rule kAutocast[GCC_OP_COUNT] = {
    [GCC_OP_GEMM] = {AC_LOW, 0, 0},
    [GCC_OP_MATMUL] = {AC_LOW, 1, 0},
    [GCC_OP_ADD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_RELU] = {AC_PROMOTE, 0, 0},
    [GCC_OP_RELU_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_IDENTITY] = {AC_PROMOTE, 0, 0},
    [GCC_OP_RESHAPE] = {AC_PROMOTE, 0, 0},
    [GCC_OP_FLATTEN] = {AC_PROMOTE, 0, 0},
    [GCC_OP_REDUCE_SUM_TO] = {AC_FP32, 0, 0},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY] = {AC_FP32, 0, 0},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_MEAN_SQUARED_ERROR] = {AC_FP32, 0, 0},
    [GCC_OP_MEAN_SQUARED_ERROR_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_SGD] = {AC_FP32, 0, 0},
    [GCC_OP_ADAM] = {AC_FP32, 0, 0},
    [GCC_OP_COPY] = {AC_KEEP, 0, 0},
    [GCC_OP_SOFTMAX] = {AC_FP32, 0, 0},
    [GCC_OP_SOFTMAX_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_CONV] = {AC_LOW, 0, 0},
    [GCC_OP_CONV_GRAD_DATA] = {AC_LOW, 0, 0},
    [GCC_OP_CONV_GRAD_FILTER] = {AC_LOW, 0, 0},
    [GCC_OP_CONV_GRAD_BIAS] = {AC_FP32, 0, 0},
    [GCC_OP_MAX_POOL] = {AC_PROMOTE, 0, 0},
    [GCC_OP_MAX_POOL_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_AVERAGE_POOL] = {AC_PROMOTE, 0, 0},
    [GCC_OP_AVERAGE_POOL_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SUB] = {AC_PROMOTE, 0, 0},
    [GCC_OP_MUL] = {AC_PROMOTE, 0, 0},
    [GCC_OP_DIV] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SIGMOID] = {AC_PROMOTE, 0, 0},
    [GCC_OP_TANH] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SQRT] = {AC_FP32, 0, 0},
    [GCC_OP_LEAKY_RELU] = {AC_PROMOTE, 0, 0},
    [GCC_OP_CLIP] = {AC_PROMOTE, 0, 0},
    [GCC_OP_LOG_SOFTMAX] = {AC_FP32, 0, 0},
    [GCC_OP_LRN] = {AC_FP32, 0, 0},
    [GCC_OP_CONCAT] = {AC_PROMOTE, 0, 0},
    [GCC_OP_TRANSPOSE] = {AC_PROMOTE, 0, 0},
    [GCC_OP_PAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_CONV_TRANSPOSE] = {AC_LOW, 0, 0},
    [GCC_OP_ALL_REDUCE] = {AC_FP32, 0, 0},
    [GCC_OP_SIGMOID_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_TANH_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SQRT_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_LEAKY_RELU_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_CLIP_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_LOG_SOFTMAX_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_LRN_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_BATCH_NORM] = {AC_PROMOTE, 0, 1},      /* X; scale, B, mean, var */
    [GCC_OP_BATCH_NORM_GRAD] = {AC_PROMOTE, 0, 2}, /* dY, X; scale */
    [GCC_OP_CAST] = {AC_KEEP, 0, 0},
    /* not on autocast's lists: nn.Dropout of a bfloat16 tensor is bfloat16 */
    [GCC_OP_DROPOUT] = {AC_PROMOTE, 0, 0},
    [GCC_OP_DROPOUT_GRAD] = {AC_PROMOTE, 0, 0},
    /* fp16 loss scaling: float32 gradients and scalars */
    [GCC_OP_AMP_NON_FINITE_CHECK] = {AC_FP32, 0, 0},
    [GCC_OP_AMP_UPDATE_SCALE] = {AC_FP32, 0, 0},
    /* torch.autocast's float32 list has layer_norm: 16-bit inputs are cast to
     * float32, and Y (and dX) are float32, as PyTorch's under autocast */
    [GCC_OP_LAYER_NORM] = {AC_FP32, 0, 0},
    [GCC_OP_LAYER_NORM_GRAD] = {AC_FP32, 0, 0},
    /* embedding is on neither of autocast's lists: nn.Embedding of a float32
     * table is float32 (the table is a float32 parameter), and its gradient
     * is float32 */
    [GCC_OP_GATHER] = {AC_FP32, 0, 0},
    [GCC_OP_GATHER_GRAD] = {AC_FP32, 0, 0},
    /* a bfloat16 tensor's slice is bfloat16 (as Concat, Pad) */
    [GCC_OP_SLICE] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SLICE_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_EXPAND] = {AC_PROMOTE, 0, 0},
    /* gradient clipping: float32 gradients */
    [GCC_OP_GRAD_NORM] = {AC_FP32, 0, 0},
    /* the fused attention's kernels read and write float32 (a 16-bit
     * flash-attention kernel and cuDNN's SDPA are the next step) */
    [GCC_OP_ATTENTION] = {AC_FP32, 0, 0},
    [GCC_OP_ATTENTION_GRAD] = {AC_FP32, 0, 0},
    /* not on autocast's lists: GELU of a bfloat16 tensor is bfloat16 (computed in float) */
    [GCC_OP_GELU] = {AC_PROMOTE, 0, 0},
    [GCC_OP_GELU_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_ERF] = {AC_PROMOTE, 0, 0},
    [GCC_OP_ERF_GRAD] = {AC_PROMOTE, 0, 0},
    /* torch.autocast's float32 list: exp, log, pow, reciprocal */
    [GCC_OP_EXP] = {AC_FP32, 0, 0},
    [GCC_OP_LOG] = {AC_FP32, 0, 0},
    [GCC_OP_NEG] = {AC_PROMOTE, 0, 0},
    [GCC_OP_ABS] = {AC_PROMOTE, 0, 0},
    [GCC_OP_ABS_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_POW] = {AC_FP32, 0, 0},
    [GCC_OP_POW_GRAD_BASE] = {AC_FP32, 0, 0},
    [GCC_OP_POW_GRAD_EXPONENT] = {AC_FP32, 0, 0},
    [GCC_OP_RECIPROCAL] = {AC_FP32, 0, 0},
    [GCC_OP_MAX] = {AC_PROMOTE, 0, 0},
    [GCC_OP_MIN] = {AC_PROMOTE, 0, 0},
    [GCC_OP_MAX_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_MIN_GRAD] = {AC_PROMOTE, 0, 0},
    /* torch.autocast's float32 list: softplus; the others run in the input's type */
    [GCC_OP_ELU] = {AC_PROMOTE, 0, 0},
    [GCC_OP_ELU_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SELU] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SELU_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_CELU] = {AC_PROMOTE, 0, 0},
    [GCC_OP_CELU_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SOFTPLUS] = {AC_FP32, 0, 0},
    [GCC_OP_SOFTPLUS_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_SOFTSIGN] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SOFTSIGN_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_THRESHOLDED_RELU] = {AC_PROMOTE, 0, 0},
    [GCC_OP_THRESHOLDED_RELU_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_SIN] = {AC_PROMOTE, 0, 0},
    [GCC_OP_COS] = {AC_PROMOTE, 0, 0},
    [GCC_OP_PRELU] = {AC_PROMOTE, 0, 0},
    [GCC_OP_PRELU_GRAD] = {AC_PROMOTE, 0, 0},
    [GCC_OP_PRELU_GRAD_SLOPE] = {AC_PROMOTE, 0, 0},
    [GCC_OP_TRILU] = {AC_PROMOTE, 0, 0},
    [GCC_OP_ARG_MAX] = {AC_FP32, 0, 0},
    [GCC_OP_ARG_MIN] = {AC_FP32, 0, 0},
    /* nll_loss is on autocast's float32 list (as the losses are) */
    [GCC_OP_NLL_LOSS] = {AC_FP32, 0, 0},
    [GCC_OP_NLL_LOSS_GRAD] = {AC_FP32, 0, 0},
    /* comparisons read float32 (a 16-bit operand widens exactly, so the
     * result is the same); the bool ops have no float operand; Where and
     * its gradients are on neither of autocast's lists, but stay float32
     * here (their condition is bool, and the kernels move float32) */
    [GCC_OP_EQUAL] = {AC_FP32, 0, 0},
    [GCC_OP_LESS] = {AC_FP32, 0, 0},
    [GCC_OP_GREATER] = {AC_FP32, 0, 0},
    [GCC_OP_LESS_OR_EQUAL] = {AC_FP32, 0, 0},
    [GCC_OP_GREATER_OR_EQUAL] = {AC_FP32, 0, 0},
    [GCC_OP_NOT] = {AC_KEEP, 0, 0},
    [GCC_OP_AND] = {AC_KEEP, 0, 0},
    [GCC_OP_OR] = {AC_KEEP, 0, 0},
    [GCC_OP_XOR] = {AC_KEEP, 0, 0},
    [GCC_OP_WHERE] = {AC_FP32, 0, 0},
    [GCC_OP_WHERE_GRAD_X] = {AC_FP32, 0, 0},
    [GCC_OP_WHERE_GRAD_Y] = {AC_FP32, 0, 0},
    [GCC_OP_GATHER_ELEMENTS] = {AC_FP32, 0, 0},
    [GCC_OP_GATHER_ELEMENTS_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_REDUCE_MIN] = {AC_FP32, 0, 0},
    [GCC_OP_REDUCE_MIN_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_ATTENTION_PACKED] = {AC_FP32, 0, 0},
    [GCC_OP_ATTENTION_PACKED_GRAD] = {AC_FP32, 0, 0},
    [GCC_OP_GELU_AUX] = {AC_FP32, 0, 0},
    [GCC_OP_LAYER_NORM_GRAD_ALL] = {AC_FP32, 0, 0},
};

int gcc_autocast_is_cast_to(const gcc_node *n, gcc_dtype to) {
  const gcc_attr *a = n->op == GCC_OP_CAST ? gcc_node_attr(n, "to") : NULL;
  return a && a->i == (int64_t)to;
}

const char *gcc_autocast_class_name(int op) {
  static const char *const names[] = {NULL, "low", "fp32", "promote", "keep"};
  if (op < 0 || op >= GCC_OP_COUNT)
    return NULL;
  return names[kAutocast[op].cls];
}

/* A Cast made by the pass: (value, dtype) -> the cast value, and where it
 * goes in the schedule; or a parameter's copy its update node writes
 * (before and after -1, node the update). */
typedef struct ac_cast {
  int value;
  gcc_dtype dt;
  int cast_value, node;
  int before; /* the original node it runs right before, or -1 */
  int after;  /* the original node it runs right after, or -1 */
} ac_cast;

typedef struct ac_ctx {
  gcc_graph *g;
  ac_cast *casts; /* and the 16-bit copies updates write (no node of their own) */
  int n, cap;
  int param_casts; /* gcc_options.param_copy_casts */
} ac_ctx;

static gcc_status push_cast(ac_ctx *c, const ac_cast *k, gcc_diag *d) {
  if (c->n == c->cap) {
    int nc = c->cap ? 2 * c->cap : 16;
    ac_cast *n = realloc(c->casts, (size_t)nc * sizeof *n);
    if (!n)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autocast)");
    c->casts = n;
    c->cap = nc;
  }
  c->casts[c->n++] = *k;
  return GCC_OK;
}

static const char *short_dtype(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16 ? "bf16" : t == GCC_DT_FLOAT16 ? "fp16" : "fp32";
}

/* A Cast node from value `in` to value `out` (dtype `dt`), placed like node
 * `like` (its phase and pin). */
static gcc_status cast_node(gcc_graph *g, int in, int out, gcc_dtype dt, int like, int *node,
                            gcc_diag *d) {
  char name[600];
  snprintf(name, sizeof name, "%s/cast_%s", g->values[in].name, short_dtype(dt));
  GCC_TRY(gcc_graph_add_node(g, name, GCC_OP_CAST, &in, 1, &out, 1, node, d));
  GCC_TRY(gcc_node_set_int(g, *node, "to", (int64_t)dt));
  GCC_TRY(gcc_op_resolve_attrs(g, *node, d));
  gcc_node *n = &g->nodes[*node];
  n->phase = g->nodes[like].phase;
  if (g->nodes[like].pin && !(n->pin = strdup(g->nodes[like].pin)))
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autocast)");
  return gcc_op(GCC_OP_CAST)->shape(g, *node, d);
}

/* The update node of parameter `v`, or -1 (not trained: no gradient reaches
 * the loss, or a running statistic). */
static int update_of(const gcc_graph *g, int v) {
  const gcc_value *val = &g->values[v];
  if (val->kind != GCC_VALUE_PARAM || val->state)
    return -1;
  for (int c = 0; c < val->n_consumers; c++) {
    const gcc_node *u = &g->nodes[val->consumers[c]];
    if ((gcc_op(u->op)->flags & GCC_OPF_OPTIMIZER) && u->inputs[0] == v)
      return val->consumers[c];
  }
  return -1;
}

/* Parameter `v`'s 16-bit copy "<param>.bf16" written by its update node `u`
 * (its output) for the next step, in place of a Cast. */
static gcc_status update_copy(ac_ctx *c, int v, gcc_dtype dt, int u, int *out, gcc_diag *d) {
  gcc_graph *g = c->g;
  char base[600];
  snprintf(base, sizeof base, "%s.%s", g->values[v].name, short_dtype(dt));
  ac_cast k = {.value = v, .dt = dt, .node = u, .before = -1, .after = -1}; /* no new node */
  GCC_TRY(gcc_graph_add_temp(g, base, GCC_VALUE_OPT_STATE, &k.cast_value, d));
  gcc_value *cv = &g->values[k.cast_value];
  cv->dtype = dt;
  cv->shape = g->values[v].shape;
  cv->param_of = v;
  gcc_node *n = &g->nodes[u];
  int *outs = realloc(n->outputs, sizeof *outs);
  if (!outs)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autocast)");
  outs[0] = k.cast_value;
  n->outputs = outs;
  n->n_outputs = 1;
  GCC_TRY(gcc_op_resolve_attrs(g, u, d));
  GCC_TRY(gcc_op(n->op)->shape(g, u, d));
  GCC_TRY(push_cast(c, &k, d));
  *out = k.cast_value;
  return GCC_OK;
}

/* Value `v` in dtype `dt` for node `reader`: an existing cast or copy, the
 * 16-bit copy its update writes (a trained parameter), or a new Cast that
 * runs right before `reader`. */
static gcc_status cast_of(ac_ctx *c, int v, gcc_dtype dt, int reader, int *out, gcc_diag *d) {
  for (int i = 0; i < c->n; i++)
    if (c->casts[i].value == v && c->casts[i].dt == dt) {
      *out = c->casts[i].cast_value;
      return GCC_OK;
    }
  gcc_graph *g = c->g;
  int u = dt != GCC_DT_FLOAT32 && !c->param_casts ? update_of(g, v) : -1;
  if (u >= 0)
    return update_copy(c, v, dt, u, out, d);
  char base[600];
  snprintf(base, sizeof base, "%s.%s", g->values[v].name, short_dtype(dt));
  ac_cast k = {.value = v, .dt = dt, .before = reader, .after = -1};
  GCC_TRY(gcc_graph_add_temp(g, base, GCC_VALUE_ACTIVATION, &k.cast_value, d));
  GCC_TRY(cast_node(g, v, k.cast_value, dt, reader, &k.node, d));
  GCC_TRY(push_cast(c, &k, d));
  *out = k.cast_value;
  return GCC_OK;
}

/* Values whose dtype the runtime relies on: bound by the caller, or read
 * after a step. */
static int keeps_dtype(const gcc_graph *g, int v) {
  const gcc_value *val = &g->values[v];
  if (val->kind != GCC_VALUE_ACTIVATION)
    return 1;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v)
      return 1;
  const gcc_training *t = &g->training;
  return (t->loss && strcmp(val->name, t->loss) == 0) ||
         (t->prediction && strcmp(val->name, t->prediction) == 0);
}

static ac_class class_of(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  ac_rule r = kAutocast[n->op];
  if (r.cls == AC_LOW && r.only_2d)
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0 && g->values[n->inputs[k]].shape.ndim != 2)
        return AC_FP32;
  return r.cls;
}

/* 1 if ReduceSumTo node `node` is the bias gradient of a 16-bit Gemm: its
 * output is the gradient of a parameter that a LOW Gemm reads as C (through
 * the parameter's 16-bit Cast), summed over the rows of a 2-D gradient.
 * torch.autocast casts nn.Linear's bias to 16 bits with the other operands,
 * so addmm's backward sums the 16-bit output gradient into a 16-bit bias
 * gradient and the float32 .grad is its Cast: the sum runs in the low dtype
 * here too (reading the 16-bit gradient the dW GEMM reads). That is also the
 * type cuBLASLt's BGRAD epilogues write next to a 16-bit D (cublasLt.h,
 * CUBLASLT_MATMUL_DESC_BIAS_POINTER: "Bias gradient vector elements are the
 * same type as the output elements (Ctype)"), so codegen/fusion.c folds the
 * sum into the GEMM as in a float32 plan. */
static int gemm_bias_grad(const ac_ctx *c, int node) {
  const gcc_graph *g = c->g;
  const gcc_node *n = &g->nodes[node];
  if (n->op != GCC_OP_REDUCE_SUM_TO || n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1)
    return 0;
  const gcc_value *x = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
  if (y->kind != GCC_VALUE_GRAD || y->param_of < 0 || x->shape.ndim != 2 ||
      gcc_shape_numel(&y->shape, NULL) != x->shape.dims[1] ||
      !(y->shape.ndim == 1 || (y->shape.ndim == 2 && y->shape.dims[0] == 1)))
    return 0;
  int p = y->param_of;
  for (int j = 0; j < node; j++) {
    const gcc_node *m = &g->nodes[j];
    if (m->op != GCC_OP_GEMM || m->n_inputs < 3 || m->inputs[2] < 0 || class_of(g, j) != AC_LOW)
      continue;
    int cv = m->inputs[2];
    if (cv == p)
      return 1;
    for (int k = 0; k < c->n; k++) /* the parameter's 16-bit copy */
      if (c->casts[k].value == p && c->casts[k].cast_value == cv)
        return 1;
  }
  return 0;
}

static gcc_status autocast_node(ac_ctx *c, int i, gcc_dtype low, gcc_diag *d) {
  gcc_graph *g = c->g;
  ac_class cls = gemm_bias_grad(c, i) ? AC_LOW : class_of(g, i);
  if (cls == AC_KEEP)
    return GCC_OK;
  gcc_dtype want = cls == AC_LOW ? low : GCC_DT_FLOAT32;
  int f32_from = cls == AC_PROMOTE && kAutocast[g->nodes[i].op].f32_from
                     ? kAutocast[g->nodes[i].op].f32_from
                     : g->nodes[i].n_inputs;
  if (cls == AC_PROMOTE) { /* the inputs' dtype if they agree, else float32 */
    gcc_dtype seen = GCC_DT_UNDEFINED;
    want = GCC_DT_UNDEFINED;
    for (int k = 0; k < f32_from && k < g->nodes[i].n_inputs; k++) {
      int v = g->nodes[i].inputs[k];
      if (v < 0 || !gcc_dtype_is_float(g->values[v].dtype))
        continue;
      if (seen == GCC_DT_UNDEFINED)
        seen = want = g->values[v].dtype;
      else if (g->values[v].dtype != seen)
        want = GCC_DT_FLOAT32;
    }
    if (want == GCC_DT_UNDEFINED)
      return GCC_OK; /* no float input */
  }
  for (int k = 0; k < g->nodes[i].n_inputs; k++) {
    int v = g->nodes[i].inputs[k];
    gcc_dtype wk = k < f32_from ? want : GCC_DT_FLOAT32;
    if (v < 0 || !gcc_dtype_is_float(g->values[v].dtype) || g->values[v].dtype == wk)
      continue;
    int cv = -1;
    GCC_TRY(cast_of(c, v, wk, i, &cv, d));
    g->nodes[i].inputs[k] = cv;
  }
  /* the node's outputs in their new dtype */
  gcc_dtype before[8];
  int n_out = g->nodes[i].n_outputs < 8 ? g->nodes[i].n_outputs : 8;
  for (int k = 0; k < n_out; k++)
    before[k] = g->values[g->nodes[i].outputs[k]].dtype;
  GCC_TRY(gcc_op(g->nodes[i].op)->shape(g, i, d));
  for (int k = 0; k < n_out; k++) {
    int v = g->nodes[i].outputs[k];
    gcc_dtype now = g->values[v].dtype;
    if (now == before[k] || !keeps_dtype(g, v))
      continue;
    /* the node writes a temporary of its dtype; a Cast writes the value */
    char base[600];
    snprintf(base, sizeof base, "%s.%s", g->values[v].name, short_dtype(now));
    ac_cast t = {.value = -1, .dt = before[k], .before = -1, .after = i};
    GCC_TRY(gcc_graph_add_temp(g, base, GCC_VALUE_ACTIVATION, &t.cast_value, d));
    g->values[t.cast_value].dtype = now;
    g->values[t.cast_value].shape = g->values[v].shape;
    g->nodes[i].outputs[k] = t.cast_value;
    g->values[v].dtype = before[k];
    int tmp = t.cast_value;
    t.cast_value = v;
    GCC_TRY(cast_node(g, tmp, v, before[k], i, &t.node, d));
    GCC_TRY(push_cast(c, &t, d));
  }
  return GCC_OK;
}

/* The schedule with every cast right before its first reader, or right
 * after the node whose output it converts. */
static gcc_status reorder(ac_ctx *c, int n0, gcc_diag *d) {
  gcc_graph *g = c->g;
  int n = g->n_nodes;
  gcc_node *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  if (!order)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autocast)");
  int m = 0;
  for (int i = 0; i < n0; i++) {
    for (int k = 0; k < c->n; k++)
      if (c->casts[k].before == i)
        order[m++] = g->nodes[c->casts[k].node];
    order[m++] = g->nodes[i];
    for (int k = 0; k < c->n; k++)
      if (c->casts[k].after == i)
        order[m++] = g->nodes[c->casts[k].node];
  }
  if (m != n) {
    free(order);
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "autocast: %d of %d nodes scheduled", m, n);
  }
  memcpy(g->nodes, order, (size_t)n * sizeof *order);
  free(order);
  return gcc_graph_link(g, d);
}

gcc_status gcc_pass_autocast(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  g->precision = opt->precision;
  g->nondeterministic = opt->nondeterministic;
  gcc_dtype low = gcc_precision_dtype(opt->precision);
  if (low == GCC_DT_FLOAT32)
    return GCC_OK;
  ac_ctx c = {.g = g, .param_casts = opt->param_copy_casts};
  int n0 = g->n_nodes;
  gcc_status s = GCC_OK;
  for (int i = 0; i < n0 && s == GCC_OK; i++)
    s = autocast_node(&c, i, low, d);
  if (s == GCC_OK)
    s = reorder(&c, n0, d);
  free(c.casts);
  return s;
}
