/*
 * ops_shape_attention.c - shape inference and FLOPs of Attention and
 * AttentionGrad (graph/ops.h: torch.nn.functional.scaled_dot_product_attention
 * as one fused op), and the geometry the kernels of both backends read.
 */
#include "graph/ops_internal.h"

#include <math.h>
#include <stdio.h>

/* The 4-D reading of a rank-2, 3 or 4 operand: [N, T, D] is [N, 1, T, D],
 * [T, D] is [1, 1, T, D]. */
static void as4(const gcc_shape *s, int64_t out[4]) {
  if (s->ndim == 2) {
    out[0] = out[1] = 1;
    out[2] = s->dims[0];
    out[3] = s->dims[1];
  } else if (s->ndim == 3) {
    out[0] = s->dims[0];
    out[1] = 1;
    out[2] = s->dims[1];
    out[3] = s->dims[2];
  } else {
    for (int k = 0; k < 4; k++)
      out[k] = s->dims[k];
  }
}

void gcc_attn_geometry(const gcc_shape *q, const gcc_shape *k, const gcc_shape *v,
                       const gcc_shape *mask, const gcc_node *n, gcc_attn_geo *a) {
  int64_t Q[4], K[4], V[4];
  as4(q, Q);
  as4(k, K);
  as4(v, V);
  a->b = Q[0];
  a->h = Q[1];
  a->tq = Q[2];
  a->d = Q[3];
  a->tk = K[2];
  a->dv = V[3];
  a->causal = (int)n->av[ATTN_IS_CAUSAL].i;
  float sc = n->av[ATTN_SCALE].f;
  a->scale = sc != 0.0f ? sc : (float)(1.0 / sqrt((double)a->d));
  a->has_mask = mask != NULL;
  a->ms_b = a->ms_h = a->ms_i = a->ms_j = 0;
  if (!mask)
    return;
  /* right-aligned to Q's rank, then read as 4-D like Q */
  int64_t m[4] = {1, 1, 1, 1}, full[4] = {Q[0], Q[1], a->tq, a->tk};
  int r = q->ndim, off = r - mask->ndim;
  int64_t mr[4] = {1, 1, 1, 1};
  for (int i = 0; i < mask->ndim; i++)
    mr[off + i] = mask->dims[i];
  if (r == 2) {
    m[2] = mr[0];
    m[3] = mr[1];
  } else if (r == 3) {
    m[0] = mr[0];
    m[2] = mr[1];
    m[3] = mr[2];
  } else {
    for (int i = 0; i < 4; i++)
      m[i] = mr[i];
  }
  int64_t st = 1, strides[4];
  for (int i = 3; i >= 0; i--) {
    strides[i] = m[i] == 1 && full[i] != 1 ? 0 : st;
    st *= m[i];
  }
  a->ms_b = strides[0];
  a->ms_h = strides[1];
  a->ms_i = strides[2];
  a->ms_j = strides[3];
}

/* Q, K, V (and for the gradient O, dO) float32 of rank 2 to 4 with equal
 * leading dims, K and V the same keys, Q and K the same head dim; the mask
 * float32, broadcastable to the scores. The scale is finite (the
 * schema) and not negative. */
static gcc_status check_qkv(gcc_graph *g, int node, int iq, int imask, gcc_diag *d) {
  for (int k = iq; k < iq + 3; k++) {
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
    gcc_value *x = in_val(g, node, k);
    if (!x)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: node '%s': input %d is required",
                          g->source, g->nodes[node].name, k);
    if (x->shape.ndim < 2 || x->shape.ndim > 4)
      return shape_err(g, node, d, "Q, K and V are [B, H, T, D], [N, T, D] or [T, D], got",
                       &x->shape, NULL);
  }
  gcc_value *q = in_val(g, node, iq), *kk = in_val(g, node, iq + 1), *v = in_val(g, node, iq + 2);
  int r = q->shape.ndim;
  if (kk->shape.ndim != r || v->shape.ndim != r)
    return shape_err(g, node, d, "Q and K / V differ in rank:", &q->shape,
                     kk->shape.ndim != r ? &kk->shape : &v->shape);
  for (int i = 0; i < r - 2; i++)
    if (kk->shape.dims[i] != q->shape.dims[i] || v->shape.dims[i] != q->shape.dims[i])
      return shape_err(g, node, d,
                       "Q, K and V differ in their leading (batch, head) dims:", &q->shape,
                       kk->shape.dims[i] != q->shape.dims[i] ? &kk->shape : &v->shape);
  if (kk->shape.dims[r - 1] != q->shape.dims[r - 1])
    return shape_err(g, node, d, "Q and K differ in the head dim (last):", &q->shape, &kk->shape);
  if (kk->shape.dims[r - 2] != v->shape.dims[r - 2])
    return shape_err(g, node, d, "K and V differ in the key count (dim -2):", &kk->shape,
                     &v->shape);
  for (int i = 0; i < r; i++)
    if (q->shape.dims[i] < 1 || kk->shape.dims[i] < 1 || v->shape.dims[i] < 1)
      return shape_err(g, node, d, "Q, K and V must not be empty:", &q->shape, &kk->shape);
  char desc[600];
  if (g->nodes[node].av[ATTN_SCALE].f < 0.0f)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: scale %g is negative", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc),
                        (double)g->nodes[node].av[ATTN_SCALE].f);
  gcc_value *m = in_val(g, node, imask);
  if (m) {
    if (m->dtype != GCC_DT_FLOAT32)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: %s: the mask '%s' has dtype %s: an additive float32 mask is "
                          "expected",
                          g->source, gcc_node_desc(g, node, desc, sizeof desc), m->name,
                          gcc_dtype_name(m->dtype));
    gcc_shape scores = q->shape;
    scores.dims[r - 1] = kk->shape.dims[r - 2];
    int ok = m->shape.ndim <= r;
    for (int i = 0; ok && i < m->shape.ndim; i++) {
      int64_t md = m->shape.dims[m->shape.ndim - 1 - i], sd = scores.dims[r - 1 - i];
      ok = md == 1 || md == sd;
    }
    if (!ok)
      return shape_err(g, node, d, "the mask does not broadcast to the scores:", &m->shape,
                       &scores);
  }
  return GCC_OK;
}

/* dropout_p (ATTN_DROPOUT_P = ATTN_GRAD_DROPOUT_P) in [0, 1): p = 1 would
 * drop every probability (O = 0, no gradient), which no model asks for. */
static gcc_status check_dropout_p(gcc_graph *g, int node, gcc_diag *d) {
  float p = g->nodes[node].av[ATTN_DROPOUT_P].f;
  if (p >= 0.0f && p < 1.0f)
    return GCC_OK;
  char desc[600];
  return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: dropout_p %g is outside [0, 1)", g->source,
                      gcc_node_desc(g, node, desc, sizeof desc), (double)p);
}

/* Attention (Q, K, V [, mask]) -> O [..., Tq, Dv], L [..., Tq]. */
gcc_status shape_attention(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(check_qkv(g, node, ATTN_IN_Q, ATTN_IN_MASK, d));
  GCC_TRY(check_dropout_p(g, node, d));
  gcc_value *q = in_val(g, node, ATTN_IN_Q), *v = in_val(g, node, ATTN_IN_V);
  gcc_shape o = q->shape, l = q->shape;
  o.dims[o.ndim - 1] = v->shape.dims[v->shape.ndim - 1];
  l.ndim--;
  set_out(g, node, 0, GCC_DT_FLOAT32, &o);
  set_out(g, node, 1, GCC_DT_FLOAT32, &l);
  return GCC_OK;
}

/* AttentionGrad (Q, K, V, O, L, dO [, mask]) -> dQ, dK, dV of Q's, K's, V's
 * shapes; O and dO the forward's O shape, L its L shape. */
gcc_status shape_attention_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(check_qkv(g, node, ATTN_GRAD_IN_Q, ATTN_GRAD_IN_MASK, d));
  GCC_TRY(check_dropout_p(g, node, d));
  for (int k = ATTN_GRAD_IN_O; k <= ATTN_GRAD_IN_DO; k++)
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  gcc_value *q = in_val(g, node, ATTN_GRAD_IN_Q), *v = in_val(g, node, ATTN_GRAD_IN_V);
  gcc_value *o = in_val(g, node, ATTN_GRAD_IN_O), *l = in_val(g, node, ATTN_GRAD_IN_L),
            *dout = in_val(g, node, ATTN_GRAD_IN_DO);
  if (!o || !l || !dout)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: node '%s': O, L and dO are required",
                        g->source, g->nodes[node].name);
  gcc_shape os = q->shape, ls = q->shape;
  os.dims[os.ndim - 1] = v->shape.dims[v->shape.ndim - 1];
  ls.ndim--;
  if (!gcc_shape_equal(&o->shape, &os))
    return shape_err(g, node, d, "O must be [..., Tq, Dv]:", &o->shape, &os);
  if (!gcc_shape_equal(&dout->shape, &os))
    return shape_err(g, node, d, "dO must be [..., Tq, Dv]:", &dout->shape, &os);
  if (!gcc_shape_equal(&l->shape, &ls))
    return shape_err(g, node, d, "L must be [..., Tq]:", &l->shape, &ls);
  for (int k = 0; k < 3; k++)
    set_out(g, node, k, GCC_DT_FLOAT32, &in_val(g, node, ATTN_GRAD_IN_Q + k)->shape);
  return GCC_OK;
}

/* Forward: 2 Tq Tk (D + Dv) per (b, h) (the two GEMMs; half with a causal
 * mask is not subtracted), backward about 2.5 times that (QK^T, dO V^T, dV,
 * dQ, dK: five GEMMs). */
static double attn_flops(const gcc_graph *g, int node, int base) {
  const gcc_node *n = &g->nodes[node];
  const gcc_shape *q = &g->values[n->inputs[base]].shape,
                  *k = &g->values[n->inputs[base + 1]].shape,
                  *v = &g->values[n->inputs[base + 2]].shape;
  gcc_attn_geo a;
  gcc_attn_geometry(q, k, v, NULL, n, &a);
  double f = 2.0 * (double)(a.b * a.h) * (double)a.tq * (double)a.tk * (double)(a.d + a.dv);
  return f;
}

double flops_attention(const gcc_graph *g, int node) {
  return attn_flops(g, node, ATTN_IN_Q);
}

double flops_attention_grad(const gcc_graph *g, int node) {
  return 2.5 * attn_flops(g, node, ATTN_GRAD_IN_Q);
}

/* ---- AttentionPacked, AttentionPackedGrad ---------------------------------- */

void gcc_attn_packed_geometry(const gcc_shape *qkv, const gcc_node *n, int iheads, int iseq,
                              gcc_attn_geo *a) {
  int64_t rows = 1;
  for (int i = 0; i < qkv->ndim - 1; i++)
    rows *= qkv->dims[i];
  const int64_t h = n->av[iheads].i, t = n->av[iseq].i;
  a->h = h;
  a->tq = a->tk = t;
  a->b = t > 0 ? rows / t : 0;
  a->d = a->dv = h > 0 ? qkv->dims[qkv->ndim - 1] / (3 * h) : 0;
  a->causal = (int)n->av[ATTN_IS_CAUSAL].i;
  float sc = n->av[ATTN_SCALE].f;
  a->scale = sc != 0.0f ? sc : (float)(1.0 / sqrt((double)a->d));
  a->has_mask = 0;
  a->ms_b = a->ms_h = a->ms_i = a->ms_j = 0;
}

/* QKV float32 of rank >= 2, last dim 3 heads D (D >= 1), its rows a
 * multiple of seq >= 1; scale >= 0, dropout_p in [0, 1). Fills *a and the
 * shapes of O ([..., H D]) and L ([B, H, T]). */
static gcc_status check_packed(gcc_graph *g, int node, int iheads, int iseq, gcc_attn_geo *a,
                               gcc_shape *o, gcc_shape *l, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  GCC_TRY(check_dropout_p(g, node, d));
  gcc_value *x = in_val(g, node, 0);
  const gcc_node *n = &g->nodes[node];
  int64_t rows = 1;
  for (int i = 0; x->shape.ndim >= 2 && i < x->shape.ndim - 1; i++)
    rows *= x->shape.dims[i];
  const int64_t h = n->av[iheads].i, t = n->av[iseq].i;
  const int64_t last = x->shape.ndim >= 2 ? x->shape.dims[x->shape.ndim - 1] : 0;
  if (x->shape.ndim < 2 || h < 1 || t < 1 || rows < 1 || rows % t != 0 || last < 1 ||
      last % (3 * h) != 0) {
    char desc[600], sh[200];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: QKV must be [..., 3 heads D] with its rows a multiple of seq "
                        "(heads %lld, seq %lld), got %s",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), (long long)h,
                        (long long)t, gcc_shape_str(&x->shape, sh, sizeof sh));
  }
  if (n->av[ATTN_SCALE].f < 0.0f)
    return shape_err(g, node, d, "scale is negative; QKV:", &x->shape, NULL);
  gcc_attn_packed_geometry(&x->shape, n, iheads, iseq, a);
  *o = x->shape;
  o->dims[o->ndim - 1] = a->h * a->d;
  l->ndim = 3;
  l->dims[0] = a->b;
  l->dims[1] = a->h;
  l->dims[2] = a->tq;
  return GCC_OK;
}

/* AttentionPacked (QKV [..., 3 H D]) -> O [..., H D], L [B, H, T]. */
gcc_status shape_attention_packed(gcc_graph *g, int node, gcc_diag *d) {
  gcc_attn_geo a;
  gcc_shape o, l;
  GCC_TRY(check_packed(g, node, ATTN_PACKED_HEADS, ATTN_PACKED_SEQ, &a, &o, &l, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &o);
  set_out(g, node, 1, GCC_DT_FLOAT32, &l);
  return GCC_OK;
}

/* AttentionPackedGrad (QKV, O, L, dO) -> dQKV of QKV's shape. */
gcc_status shape_attention_packed_grad(gcc_graph *g, int node, gcc_diag *d) {
  gcc_attn_geo a;
  gcc_shape os, ls;
  GCC_TRY(check_packed(g, node, ATTN_PACKED_GRAD_HEADS, ATTN_PACKED_GRAD_SEQ, &a, &os, &ls, d));
  for (int k = ATTN_PACKED_GRAD_IN_O; k <= ATTN_PACKED_GRAD_IN_DO; k++)
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  gcc_value *o = in_val(g, node, ATTN_PACKED_GRAD_IN_O),
            *l = in_val(g, node, ATTN_PACKED_GRAD_IN_L),
            *dout = in_val(g, node, ATTN_PACKED_GRAD_IN_DO);
  if (!gcc_shape_equal(&o->shape, &os))
    return shape_err(g, node, d, "O must be [..., H D]:", &o->shape, &os);
  if (!gcc_shape_equal(&dout->shape, &os))
    return shape_err(g, node, d, "dO must be [..., H D]:", &dout->shape, &os);
  if (!gcc_shape_equal(&l->shape, &ls))
    return shape_err(g, node, d, "L must be [B, H, T]:", &l->shape, &ls);
  set_out(g, node, 0, GCC_DT_FLOAT32, &in_val(g, node, 0)->shape);
  return GCC_OK;
}

static double packed_flops(const gcc_graph *g, int node, int iheads, int iseq) {
  const gcc_node *n = &g->nodes[node];
  gcc_attn_geo a;
  gcc_attn_packed_geometry(&g->values[n->inputs[0]].shape, n, iheads, iseq, &a);
  return 2.0 * (double)(a.b * a.h) * (double)a.tq * (double)a.tk * (double)(a.d + a.dv);
}

double flops_attention_packed(const gcc_graph *g, int node) {
  return packed_flops(g, node, ATTN_PACKED_HEADS, ATTN_PACKED_SEQ);
}

double flops_attention_packed_grad(const gcc_graph *g, int node) {
  return 2.5 * packed_flops(g, node, ATTN_PACKED_GRAD_HEADS, ATTN_PACKED_GRAD_SEQ);
}
