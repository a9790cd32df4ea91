/*
 * ops_internal.h - what the files of graph/ops*.c share: the helpers of the
 * shape functions and the shape and FLOPs functions that the table in
 * graph/ops.c names. Internal to graph/: nothing outside graph/ops*.c
 * includes it.
 *
 *   graph/ops.c              the table (kOps), attribute resolution, gcc_infer_shapes
 *   graph/ops_shape_core.c   GEMMs, elementwise, views, losses, optimizers, AllReduce, fp16 scaling
 *   graph/ops_shape_window.c Conv, the pools and their gradients (2-D, NCHW)
 *   graph/ops_shape_layers.c LRN, BatchNormalization, LayerNormalization, Dropout, Concat,
 *                            Transpose, Pad, ConvTranspose
 *   graph/ops_shape_index.c  Gather, Slice and their gradients, Expand
 *   graph/ops_shape_math.c   Gelu, Pow and the pointwise math of the Transformer blocks
 *   graph/ops_flops.c        the FLOPs functions
 *   graph/ops_shape_attention.c  Attention, AttentionGrad and their packed forms
 *   graph/ops_shape_logic.c  comparisons (Equal, Less, ...), Not / And / Or / Xor, Where
 */
#ifndef GCC_GRAPH_OPS_INTERNAL_H
#define GCC_GRAPH_OPS_INTERNAL_H

#include <stddef.h>

#include "graph/ops.h"

/* ---- helpers of the shape functions ---------------------------------------- */

static inline gcc_value *in_val(gcc_graph *g, int node, int k) {
  if (k >= g->nodes[node].n_inputs)
    return NULL; /* an optional input left out */
  int v = g->nodes[node].inputs[k];
  return v >= 0 ? &g->values[v] : NULL;
}

static inline gcc_value *out_val(gcc_graph *g, int node, int k) {
  return &g->values[g->nodes[node].outputs[k]];
}

static inline gcc_status shape_err(gcc_graph *g, int node, gcc_diag *d, const char *what,
                                   const gcc_shape *a, const gcc_shape *b) {
  char desc[600], sa[128], sb[128];
  gcc_shape_str(a, sa, sizeof sa);
  if (b)
    gcc_shape_str(b, sb, sizeof sb);
  return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: %s %s%s%s", g->source,
                      gcc_node_desc(g, node, desc, sizeof desc), what, sa, b ? " and " : "",
                      b ? sb : "");
}

static inline gcc_status need_dtype(gcc_graph *g, int node, int k, gcc_dtype want, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  if (v && v->dtype != want) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s: input %d ('%s') has dtype %s, expected %s",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), k, v->name,
                        gcc_dtype_name(v->dtype), gcc_dtype_name(want));
  }
  return GCC_OK;
}

/* Inputs first .. last (omitted ones skipped) of one float dtype: float32,
 * or float16 / bfloat16 (values the autocast pass made); into *dt. */
static inline gcc_status need_same_float(gcc_graph *g, int node, int first, int last, gcc_dtype *dt,
                                         gcc_diag *d) {
  gcc_value *v0 = in_val(g, node, first);
  *dt = v0 && gcc_dtype_is_float(v0->dtype) ? v0->dtype : GCC_DT_FLOAT32;
  for (int k = first; k <= last; k++)
    GCC_TRY(need_dtype(g, node, k, *dt, d));
  return GCC_OK;
}

static inline void set_out(gcc_graph *g, int node, int k, gcc_dtype dt, const gcc_shape *s) {
  gcc_value *o = out_val(g, node, k);
  o->dtype = dt;
  o->shape = *s;
}

static const gcc_shape kScalar = {0, {0}};

/* ---- shape, FLOPs and helper functions shared between the files ------------ */

gcc_status shape_gemm(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_matmul(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_add(gcc_graph *g, int node, gcc_diag *d);
gcc_status need_movable(gcc_graph *g, int node, int k, gcc_diag *d);
gcc_status need_copyable(gcc_graph *g, int node, int k, gcc_diag *d);
gcc_status shape_unary_same(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_elem_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_cast(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_identity(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_unary_any(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_softmax(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_relu_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_softmax_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_reshape(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_flatten(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_reduce_sum_to(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_sce(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_sce_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_mse(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_mse_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_all_reduce(gcc_graph *g, int node, gcc_diag *d);
double flops_all_reduce(const gcc_graph *g, int node);
gcc_status shape_sgd(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_adam(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_amp_check(gcc_graph *g, int node, gcc_diag *d);
double flops_amp_check(const gcc_graph *g, int node);
gcc_status shape_grad_norm(gcc_graph *g, int node, gcc_diag *d);
double flops_grad_norm(const gcc_graph *g, int node);
gcc_status shape_amp_update(gcc_graph *g, int node, gcc_diag *d);
double flops_amp_update(const gcc_graph *g, int node);
int64_t ints_at(const gcc_attr *a, int k, int64_t def);
gcc_status need_rank(gcc_graph *g, int node, int k, int rank, const char *what, gcc_diag *d);
gcc_status shape_conv(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_conv_grad_data(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_conv_grad_filter(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_conv_grad_bias(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_pool(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_max_pool_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_avg_pool_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_lrn(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_lrn_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_batch_norm(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_batch_norm_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_layer_norm(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_layer_norm_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_layer_norm_grad_all(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_dropout(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_concat(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_transpose(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_pad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_conv_transpose(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_gather(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_gather_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_gather_elements(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_gather_elements_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_reduce_min(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_reduce_min_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_nll(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_nll_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_slice(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_slice_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_expand(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_attention(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_attention_grad(gcc_graph *g, int node, gcc_diag *d);
double flops_attention(const gcc_graph *g, int node);
double flops_attention_grad(const gcc_graph *g, int node);
gcc_status shape_attention_packed(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_attention_packed_grad(gcc_graph *g, int node, gcc_diag *d);
double flops_attention_packed(const gcc_graph *g, int node);
double flops_attention_packed_grad(const gcc_graph *g, int node);
gcc_status shape_gelu(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_gelu_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_gelu_aux(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_pow(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_pow_grad(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_prelu(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_prelu_grad(gcc_graph *g, int node, gcc_diag *d);
/* graph/ops_shape_select.c: Trilu, ArgMax / ArgMin */
gcc_status shape_trilu(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_arg(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_compare(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_equal(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_logic(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_where(gcc_graph *g, int node, gcc_diag *d);
gcc_status shape_where_grad(gcc_graph *g, int node, gcc_diag *d);
double numel_out(const gcc_graph *g, int node);
double numel_in0(const gcc_graph *g, int node);
double flops_gemm(const gcc_graph *g, int node);
double flops_matmul(const gcc_graph *g, int node);
double flops_lrn(const gcc_graph *g, int node);
double flops_batch_norm(const gcc_graph *g, int node);
double flops_layer_norm(const gcc_graph *g, int node);
double flops_conv_transpose(const gcc_graph *g, int node);
double flops_sce(const gcc_graph *g, int node);
double flops_mse(const gcc_graph *g, int node);
double flops_sgd(const gcc_graph *g, int node);
double flops_adam(const gcc_graph *g, int node);
double flops_conv(const gcc_graph *g, int node);
double flops_conv_grad_data(const gcc_graph *g, int node);
double flops_conv_grad_filter(const gcc_graph *g, int node);
double flops_pool(const gcc_graph *g, int node);

#endif /* GCC_GRAPH_OPS_INTERNAL_H */
