/*
 * kv_cache.c - the decoder form of a causal language model (kv_cache.h).
 */
#include "deploy/kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/passes.h"

/* The ops the rewrite looks at, by role (a table, as every op dispatch:
 * tests/op_tables_test) */
enum { K_OTHER = 0, K_GATHER, K_SLICE, K_RESHAPE, K_ATTENTION };
static const unsigned char kRole[GCC_OP_COUNT] = {
    [GCC_OP_GATHER] = K_GATHER,
    [GCC_OP_SLICE] = K_SLICE,
    [GCC_OP_RESHAPE] = K_RESHAPE,
    [GCC_OP_ATTENTION] = K_ATTENTION,
};

static int role(const gcc_node *n) {
  return n->op >= 0 && n->op < GCC_OP_COUNT ? kRole[n->op] : K_OTHER;
}

static gcc_status unsupported(gcc_diag *d, const char *why) {
  return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "no KV cache: %s", why);
}

/* A constant int64 [0, 1, ..., T-1] of shape (T) or (1, T): the positions. */
static int is_positions(const gcc_value *v, int64_t T) {
  if (v->kind != GCC_VALUE_CONST || v->dtype != GCC_DT_INT64 || !v->data ||
      v->data_bytes != (size_t)T * sizeof(int64_t))
    return 0;
  if (!(v->shape.ndim == 1 || (v->shape.ndim == 2 && v->shape.dims[0] == 1)))
    return 0;
  const int64_t *x = v->data;
  for (int64_t i = 0; i < T; i++)
    if (x[i] != i)
      return 0;
  return 1;
}

static gcc_status add_input(gcc_graph *g, const char *name, gcc_dtype dt, const gcc_shape *s,
                            int *v, gcc_diag *d) {
  GCC_TRY(gcc_graph_add_value(g, name, dt, s, GCC_VALUE_INPUT, NULL, 0, v, d));
  return gcc_graph_add_input(g, *v);
}

/* K' = Concat(cache, x) along the position axis for Attention node `n`. */
static gcc_status cached(gcc_graph *g, int node, const char *what, int x, int64_t T, char *cache,
                         int *out, gcc_diag *d) {
  const gcc_shape *xs = &g->values[x].shape;
  gcc_shape cs = *xs;
  cs.dims[2] = T - 1;
  snprintf(cache, 256, "%.200s.kv_cache.%s", g->nodes[node].name, what);
  int c;
  GCC_TRY(add_input(g, cache, GCC_DT_FLOAT32, &cs, &c, d));
  char name[300];
  snprintf(name, sizeof name, "%.200s.kv_cat.%s", g->nodes[node].name, what);
  GCC_TRY(gcc_graph_add_temp(g, name, GCC_VALUE_ACTIVATION, out, d));
  int in[2] = {c, x}, cn;
  GCC_TRY(gcc_graph_add_node(g, name, GCC_OP_CONCAT, in, 2, out, 1, &cn, d));
  GCC_TRY(gcc_node_set_int(g, cn, "axis", 2));
  return gcc_op_resolve_attrs(g, cn, d);
}

static gcc_status rewrite(gcc_graph *g, int64_t T, gcc_kv_decoder *k, gcc_diag *d) {
  if (T < 2)
    return unsupported(d, "a window of one position has nothing to cache");
  GCC_TRY(gcc_graph_bind_batch(g, 1, d));
  GCC_TRY(gcc_infer_shapes(g, d));
  gcc_options o;
  memset(&o, 0, sizeof o);
  o.mode = GCC_MODE_EVAL;
  o.batch_size = 1;
  GCC_TRY(gcc_pass_attention(g, &o, d));
  GCC_TRY(gcc_graph_link(g, d));
  /* the ids: (1, T) -> (1, 1) */
  if (g->n_inputs != 1)
    return unsupported(d, "the model has more than one input");
  gcc_value *ids = &g->values[g->inputs[0]];
  if (ids->dtype != GCC_DT_INT64 || ids->shape.ndim != 2 || ids->shape.dims[1] != T)
    return unsupported(d, "the input is not int64 token ids (B, T)");
  ids->shape.dims[1] = 1;
  /* the positions: a constant arange(T) read as Gather indices only */
  int pos = -1, n_pos = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (!is_positions(&g->values[v], T))
      continue;
    for (int i = 0; i < g->n_nodes; i++)
      for (int j = 0; j < g->nodes[i].n_inputs; j++) {
        if (g->nodes[i].inputs[j] != v)
          continue;
        if (role(&g->nodes[i]) != K_GATHER || j != 1)
          return unsupported(d, "the positions are read by something else than a Gather");
        if (pos < 0) {
          gcc_shape ps = {1, {1}};
          GCC_TRY(add_input(g, GCC_KV_POS_INPUT, GCC_DT_INT64, &ps, &pos, d));
        }
        g->nodes[i].inputs[j] = pos;
        n_pos++;
      }
  }
  /* or rows 0 .. T-1 of a parameter (the default exporter's wpe[:T] for
   * wpe(arange(t))): a Gather of the new position's row instead */
  int n_nodes0 = g->n_nodes;
  for (int i = 0; i < n_nodes0; i++) {
    const gcc_node *n = &g->nodes[i];
    if (role(n) != K_SLICE || n->inputs[0] < 0 || g->values[n->inputs[0]].kind != GCC_VALUE_PARAM)
      continue;
    const gcc_shape *xs = &g->values[n->inputs[0]].shape;
    int64_t start[GCC_MAX_DIMS], step[GCC_MAX_DIMS];
    gcc_shape ys;
    gcc_diag quiet = {0};
    if (xs->ndim != 2 || gcc_slice_resolve(n, g->source, xs, start, step, &ys, &quiet) != GCC_OK ||
        start[0] != 0 || step[0] != 1 || ys.dims[0] != T || start[1] != 0 || step[1] != 1 ||
        ys.dims[1] != xs->dims[1])
      continue;
    if (pos < 0) {
      gcc_shape ps = {1, {1}};
      GCC_TRY(add_input(g, GCC_KV_POS_INPUT, GCC_DT_INT64, &ps, &pos, d));
    }
    char name[300];
    snprintf(name, sizeof name, "%.200s.kv_position_row", g->nodes[i].name);
    int row, gn, in[2] = {g->nodes[i].inputs[0], pos}, old = g->nodes[i].outputs[0];
    GCC_TRY(gcc_graph_add_temp(g, name, GCC_VALUE_ACTIVATION, &row, d));
    GCC_TRY(gcc_graph_add_node(g, name, GCC_OP_GATHER, in, 2, &row, 1, &gn, d));
    GCC_TRY(gcc_op_resolve_attrs(g, gn, d));
    for (int j = 0; j < g->n_nodes; j++) /* the Slice is left unread (pruned) */
      for (int q = 0; j != gn && q < g->nodes[j].n_inputs; q++)
        if (g->nodes[j].inputs[q] == old)
          g->nodes[j].inputs[q] = row;
    for (int q = 0; q < g->n_outputs; q++)
      if (g->outputs[q] == old)
        return unsupported(d, "the position rows are an output");
    n_pos++;
  }
  if (n_pos == 0)
    return unsupported(d, "no position table (a constant arange(T) gathered, or rows 0 .. T-1 "
                          "of a parameter)");
  /* the token dim of the Reshapes' targets */
  for (int i = 0; i < g->n_nodes; i++) {
    gcc_node *n = &g->nodes[i];
    if (role(n) != K_RESHAPE)
      continue;
    const gcc_attr *a = &n->av[RESHAPE_SHAPE];
    if (n->n_inputs > 1 && n->inputs[1] >= 0) {
      gcc_value *sv = &g->values[n->inputs[1]];
      int64_t *x = sv->data;
      int64_t m = (int64_t)(sv->data_bytes / sizeof(int64_t));
      if (sv->kind != GCC_VALUE_CONST || sv->dtype != GCC_DT_INT64 || !x)
        return unsupported(d, "a Reshape's target shape is computed");
      if (m >= 3 && x[1] == T)
        x[1] = 1;
    } else if (a->n_ints >= 3 && a->ints[1] == T) {
      int64_t s[GCC_MAX_DIMS];
      memcpy(s, a->ints, (size_t)a->n_ints * sizeof *s);
      s[1] = 1;
      GCC_TRY(gcc_node_set_ints(g, i, "shape", s, a->n_ints));
      GCC_TRY(gcc_op_resolve_attrs(g, i, d));
    }
  }
  /* the attentions */
  int mask = -1;
  int n_nodes = g->n_nodes;
  for (int i = 0; i < n_nodes; i++) {
    if (role(&g->nodes[i]) != K_ATTENTION)
      continue;
    if (g->nodes[i].av[ATTN_IS_CAUSAL].i != 1 || g->nodes[i].n_inputs != 3)
      return unsupported(d, "an attention is not causal or has a mask");
    if (k->n_layers == GCC_KV_MAX_LAYERS)
      return unsupported(d, "more than 256 attentions");
    int q = g->nodes[i].inputs[ATTN_IN_Q], kv = g->nodes[i].inputs[ATTN_IN_K],
        vv = g->nodes[i].inputs[ATTN_IN_V];
    const gcc_shape *ks = &g->values[kv].shape, *vs = &g->values[vv].shape;
    if (ks->ndim != 4 || vs->ndim != 4 || ks->dims[2] != T || vs->dims[2] != T ||
        g->values[q].shape.ndim != 4)
      return unsupported(d, "an attention's K or V is not [1, H, T, D]");
    gcc_kv_layer *l = &k->layer[k->n_layers++];
    l->heads = ks->dims[1];
    l->dk = ks->dims[3];
    l->dv = vs->dims[3];
    if (mask < 0) {
      gcc_shape ms = {4, {1, 1, 1, T}};
      GCC_TRY(add_input(g, GCC_KV_MASK_INPUT, GCC_DT_FLOAT32, &ms, &mask, d));
    }
    int kc, vc;
    GCC_TRY(cached(g, i, "k", kv, T, l->k_cache, &kc, d));
    GCC_TRY(cached(g, i, "v", vv, T, l->v_cache, &vc, d));
    gcc_node *n = &g->nodes[i];
    int *in = realloc(n->inputs, 4 * sizeof *in);
    if (!in)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (KV cache)");
    n->inputs = in;
    n->n_inputs = 4;
    in[ATTN_IN_K] = kc;
    in[ATTN_IN_V] = vc;
    in[ATTN_IN_MASK] = mask;
    GCC_TRY(gcc_node_set_int(g, i, "is_causal", 0));
    GCC_TRY(gcc_op_resolve_attrs(g, i, d));
    snprintf(l->k_new, sizeof l->k_new, "%s", g->values[kv].name);
    snprintf(l->v_new, sizeof l->v_new, "%s", g->values[vv].name);
    GCC_TRY(gcc_graph_add_output(g, kv));
    GCC_TRY(gcc_graph_add_output(g, vv));
  }
  if (k->n_layers == 0)
    return unsupported(d, "no causal attention");
  GCC_TRY(gcc_graph_link(g, d));
  GCC_TRY(gcc_graph_toposort(g, d));
  gcc_diag shape_d = {0};
  if (gcc_infer_shapes(g, &shape_d) != GCC_OK) {
    char why[600];
    snprintf(why, sizeof why, "one position does not go through: %s", shape_d.msg);
    return unsupported(d, why);
  }
  const gcc_shape *ls = &g->values[g->outputs[0]].shape;
  if (ls->ndim != 3 || ls->dims[0] != 1 || ls->dims[1] != 1)
    return unsupported(d, "the logits of one position are not (1, 1, V)");
  for (int i = 0; i < k->n_layers; i++) {
    const gcc_kv_layer *l = &k->layer[i];
    const gcc_shape *ks = &g->values[gcc_graph_find(g, l->k_new)].shape;
    const gcc_shape *vs = &g->values[gcc_graph_find(g, l->v_new)].shape;
    if (ks->dims[2] != 1 || vs->dims[2] != 1 || ks->dims[1] != l->heads || vs->dims[1] != l->heads)
      return unsupported(d, "an attention's new K or V is not [1, H, 1, D]");
  }
  return GCC_OK;
}

gcc_status gcc_kv_decoder_build(const gcc_graph *logits_g, int64_t T, gcc_kv_decoder *k,
                                gcc_diag *d) {
  memset(k, 0, sizeof *k);
  gcc_graph *g;
  GCC_TRY(gcc_graph_clone_borrowing_params(logits_g, &g, d));
  gcc_status s = rewrite(g, T, k, d);
  if (s != GCC_OK) {
    gcc_graph_free(g);
    k->n_layers = 0;
    return s;
  }
  k->g = g;
  return GCC_OK;
}

void gcc_kv_decoder_free(gcc_kv_decoder *k) {
  if (!k)
    return;
  gcc_graph_free(k->g);
  k->g = NULL;
  k->n_layers = 0;
}
