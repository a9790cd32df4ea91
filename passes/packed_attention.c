/*
 * packed_attention.c - the packed-attention lowering (passes.h): where the
 * target runs AttentionPacked (the CPU), the Slice / Reshape / Transpose
 * chain a GPT builds around its fused Attention, and the matching chain of
 * its AttentionGrad, become one AttentionPacked and one AttentionPackedGrad
 * that read Q, K, V in place from the packed c_attn output (llm.c's
 * attention_forward / attention_backward).
 *
 * Forward, for k = 0, 1, 2 (Q, K, V):
 *
 *   x_k     = Slice(P, last axis, [k C, (k + 1) C), step 1)   P [..., 3 C]
 *   heads_k = Reshape(x_k) -> [B, T, H, D]                  (H D = C, B T = P's rows)
 *   bhtd_k  = Transpose(heads_k, perm 0, 2, 1, 3)
 *   O, L    = Attention(bhtd_0, bhtd_1, bhtd_2)              (no mask)
 *   Y       = Reshape(Transpose(O, perm 0, 2, 1, 3)) -> x_0's shape
 *
 * becomes O', L = AttentionPacked(P) with Y as O' (the Reshape's output,
 * every reader of Y kept). Backward (autodiff's chain, when present):
 *
 *   dO      = Transpose(Reshape(dY) -> [B, T, H, D], perm 0, 2, 1, 3)
 *   dQ, dK, dV = AttentionGrad(bhtd_0, bhtd_1, bhtd_2, O, L, dO)
 *   dP      = Concat(Reshape(Transpose(dQ)), .. dK .., .. dV .., last axis)
 *
 * becomes dP = AttentionPackedGrad(P, Y, L, dY). Every value removed must
 * be read by the chain's next node only (bhtd_k by the Attention and its
 * AttentionGrad, O by the Transpose and the AttentionGrad, L by the
 * AttentionGrad) and be neither a graph output nor the training spec's
 * loss or prediction; anything else leaves the graph as it is. The nodes
 * keep their names, attributes (dropout's key: the same mask), phases and
 * devices. GCC_CPU_PACKED_ATTENTION=0 in the environment, or
 * gcc_options.no_packed_attention, turns the pass off.
 */
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/passes.h"

/* What each op is to the matcher (the pass's own table keyed by the op enum). */
enum { R_NONE = 0, R_SLICE, R_RESHAPE, R_TRANSPOSE, R_ATTENTION, R_ATTENTION_GRAD, R_CONCAT };
static const unsigned char kRole[GCC_OP_COUNT] = {
    [GCC_OP_SLICE] = R_SLICE,
    [GCC_OP_RESHAPE] = R_RESHAPE,
    [GCC_OP_TRANSPOSE] = R_TRANSPOSE,
    [GCC_OP_ATTENTION] = R_ATTENTION,
    [GCC_OP_ATTENTION_GRAD] = R_ATTENTION_GRAD,
    [GCC_OP_CONCAT] = R_CONCAT,
};

typedef struct pk {
  gcc_graph *g;
  int loss, pred;
  char *dead;
} pk;

static int role_of(const gcc_graph *g, int node) {
  return node >= 0 ? kRole[g->nodes[node].op] : R_NONE;
}

static int producer(const gcc_graph *g, int v) {
  return v >= 0 ? g->values[v].producer : -1;
}

/* Nothing the caller sees: not the loss, the prediction or a graph output. */
static int hidden(const pk *m, int v) {
  if (v < 0 || v == m->loss || v == m->pred)
    return 0;
  for (int i = 0; i < m->g->n_outputs; i++)
    if (m->g->outputs[i] == v)
      return 0;
  return 1;
}

/* Value v is hidden and read by nodes a and (b >= 0) b only, each once. */
static int read_by(const pk *m, int v, int a, int b) {
  if (!hidden(m, v))
    return 0;
  const gcc_value *x = &m->g->values[v];
  for (int i = 0; i < x->n_consumers; i++)
    if (x->consumers[i] != a && (b < 0 || x->consumers[i] != b))
      return 0;
  return x->n_consumers >= 1 && x->n_consumers <= (b >= 0 ? 2 : 1);
}

/* Node n is a Transpose with perm (0, 2, 1, 3) of a rank-4 input. */
static int swaps_1_2(const gcc_graph *g, int n) {
  if (role_of(g, n) != R_TRANSPOSE)
    return 0;
  const gcc_attr *a = gcc_node_attr(&g->nodes[n], "perm");
  return a && a->n_ints == 4 && a->ints[0] == 0 && a->ints[1] == 2 && a->ints[2] == 1 &&
         a->ints[3] == 3;
}

static const gcc_shape *shape_of(const gcc_graph *g, int v) {
  return &g->values[v].shape;
}

/* Node n is Slice(P) taking [k c, (k + 1) c) of P's last axis (3 c long), step 1. */
static int third_of(const gcc_graph *g, int n, int p, int k, int64_t c) {
  if (role_of(g, n) != R_SLICE || g->nodes[n].n_inputs != 1 || g->nodes[n].inputs[0] != p)
    return 0;
  const gcc_node *s = &g->nodes[n];
  const gcc_attr *st = gcc_node_attr(s, "starts"), *en = gcc_node_attr(s, "ends"),
                 *ax = gcc_node_attr(s, "axes"), *sp = gcc_node_attr(s, "steps");
  const int r = shape_of(g, p)->ndim;
  if (!st || !en || st->n_ints != 1 || en->n_ints != 1)
    return 0;
  if (ax ? ax->n_ints != 1 || (ax->ints[0] != r - 1 && ax->ints[0] != -1) : r != 1)
    return 0;
  if (sp && (sp->n_ints != 1 || sp->ints[0] != 1))
    return 0;
  /* the last third's end may be past the axis (x[..., 2C:] exports as end
   * INT64_MAX; ONNX clamps it to the dim) */
  return st->ints[0] == k * c && (en->ints[0] == (k + 1) * c || (k == 2 && en->ints[0] >= 3 * c));
}

/* The matched chain of one Attention node. */
typedef struct chain {
  int att, grad;          /* the Attention and its AttentionGrad (-1: none) */
  int p, y, dy, dp;       /* P, Y, dY, dP */
  int64_t heads, seq;     /* H, T */
  int fwd[3][3];          /* per k: Slice, Reshape, Transpose */
  int yt, yr;             /* O's Transpose and Reshape */
  int dot, dor;           /* dO's Transpose and Reshape */
  int back[3][2], concat; /* per k: dX's Transpose and Reshape; the Concat */
} chain;

/* The forward chain of Attention node f into *c (1: matched). */
static int match_forward(const pk *m, int f, chain *c) {
  const gcc_graph *g = m->g;
  const gcc_node *a = &g->nodes[f];
  if (a->n_inputs != 3 || a->n_outputs != 2)
    return 0;
  c->att = f;
  c->grad = -1;
  int64_t c3 = 0, rows = 1;
  for (int k = 0; k < 3; k++) {
    const int bhtd = a->inputs[k], tr = producer(g, bhtd);
    if (!swaps_1_2(g, tr))
      return 0;
    const int heads = g->nodes[tr].inputs[0], rs = producer(g, heads);
    if (role_of(g, rs) != R_RESHAPE || !read_by(m, heads, tr, -1))
      return 0;
    const int x = g->nodes[rs].inputs[0], sl = producer(g, x);
    if (sl < 0 || !read_by(m, x, rs, -1))
      return 0;
    const gcc_shape *hs = shape_of(g, heads);
    if (k == 0) {
      c->p = g->nodes[sl].n_inputs == 1 ? g->nodes[sl].inputs[0] : -1;
      if (c->p < 0 || hs->ndim != 4)
        return 0;
      const gcc_shape *ps = shape_of(g, c->p);
      if (ps->ndim < 2)
        return 0;
      c3 = ps->dims[ps->ndim - 1];
      for (int i = 0; i < ps->ndim - 1; i++)
        rows *= ps->dims[i];
      c->heads = hs->dims[2];
      c->seq = hs->dims[1];
      if (c3 != 3 * hs->dims[2] * hs->dims[3] || rows != hs->dims[0] * hs->dims[1])
        return 0;
    }
    const gcc_shape *xs = shape_of(g, x), *ps = shape_of(g, c->p);
    if (hs->ndim != 4 || hs->dims[1] != c->seq || hs->dims[2] != c->heads ||
        hs->dims[3] * c->heads * 3 != c3 || hs->dims[0] * hs->dims[1] != rows ||
        xs->ndim != ps->ndim || !third_of(g, sl, c->p, k, c3 / 3))
      return 0;
    c->fwd[k][0] = sl;
    c->fwd[k][1] = rs;
    c->fwd[k][2] = tr;
  }
  if (g->values[c->p].dtype != GCC_DT_FLOAT32)
    return 0;
  /* O's readers: the Transpose, and maybe the AttentionGrad (forward_private) */
  const int o = a->outputs[0];
  int ytn = -1;
  for (int i = 0; i < g->values[o].n_consumers; i++)
    if (swaps_1_2(g, g->values[o].consumers[i]))
      ytn = g->values[o].consumers[i];
  if (ytn < 0)
    return 0;
  const int ybthd = g->nodes[ytn].outputs[0];
  if (g->values[ybthd].n_consumers != 1)
    return 0;
  const int yr = g->values[ybthd].consumers[0];
  if (!read_by(m, ybthd, yr, -1))
    return 0;
  if (role_of(g, yr) != R_RESHAPE)
    return 0;
  c->yt = ytn;
  c->yr = yr;
  c->y = g->nodes[yr].outputs[0];
  return gcc_shape_equal(shape_of(g, c->y), shape_of(g, g->nodes[c->fwd[0][1]].inputs[0]));
}

/* The AttentionGrad of c->att and its chain (1: matched; 0: none or a
 * chain that differs). */
static int match_backward(const pk *m, chain *c) {
  const gcc_graph *g = m->g;
  const gcc_node *a = &g->nodes[c->att];
  const int o = a->outputs[0], l = a->outputs[1];
  int gn = -1;
  for (int i = 0; i < g->values[l].n_consumers; i++)
    if (role_of(g, g->values[l].consumers[i]) == R_ATTENTION_GRAD)
      gn = g->values[l].consumers[i];
  if (gn < 0)
    return 0;
  const gcc_node *gr = &g->nodes[gn];
  if (gr->n_inputs != 6 || gr->n_outputs != 3 || gr->inputs[ATTN_GRAD_IN_O] != o ||
      gr->inputs[ATTN_GRAD_IN_L] != l)
    return 0;
  for (int k = 0; k < 3; k++)
    if (gr->inputs[ATTN_GRAD_IN_Q + k] != a->inputs[k])
      return 0;
  /* dO = Transpose(Reshape(dY)) */
  const int dov = gr->inputs[ATTN_GRAD_IN_DO], dot = producer(g, dov);
  if (!swaps_1_2(g, dot) || !read_by(m, dov, gn, -1))
    return 0;
  const int dyh = g->nodes[dot].inputs[0], dor = producer(g, dyh);
  if (role_of(g, dor) != R_RESHAPE || !read_by(m, dyh, dot, -1))
    return 0;
  c->dy = g->nodes[dor].inputs[0];
  if (!gcc_shape_equal(shape_of(g, c->dy), shape_of(g, c->y)))
    return 0;
  /* dQ, dK, dV: Transpose, Reshape to x_k's shape, Concat input k */
  int cc = -1;
  for (int k = 0; k < 3; k++) {
    const int dx = gr->outputs[k];
    if (g->values[dx].n_consumers != 1)
      return 0;
    const int tr = g->values[dx].consumers[0];
    if (!swaps_1_2(g, tr) || !read_by(m, dx, tr, -1))
      return 0;
    const int t = g->nodes[tr].outputs[0];
    if (g->values[t].n_consumers != 1)
      return 0;
    const int rs = g->values[t].consumers[0];
    if (role_of(g, rs) != R_RESHAPE || !read_by(m, t, rs, -1))
      return 0;
    const int r = g->nodes[rs].outputs[0];
    if (g->values[r].n_consumers != 1 ||
        !gcc_shape_equal(shape_of(g, r), shape_of(g, g->nodes[c->fwd[k][1]].inputs[0])))
      return 0;
    const int cn = g->values[r].consumers[0];
    if (role_of(g, cn) != R_CONCAT || !read_by(m, r, cn, -1) || (cc >= 0 && cn != cc) ||
        g->nodes[cn].n_inputs != 3 || g->nodes[cn].inputs[k] != r)
      return 0;
    cc = cn;
    c->back[k][0] = tr;
    c->back[k][1] = rs;
  }
  const gcc_attr *ax = gcc_node_attr(&g->nodes[cc], "axis");
  const int rk = shape_of(g, c->p)->ndim;
  if (!ax || (ax->i != -1 && ax->i != rk - 1))
    return 0;
  c->dp = g->nodes[cc].outputs[0];
  if (!gcc_shape_equal(shape_of(g, c->dp), shape_of(g, c->p)))
    return 0;
  c->grad = gn;
  c->dot = dot;
  c->dor = dor;
  c->concat = cc;
  return 1;
}

/* The readers of the forward's removed values, given whether the backward
 * matched: bhtd_k by the Attention and the AttentionGrad, O by the
 * Transpose and the AttentionGrad, L by the AttentionGrad (or nobody). */
static int forward_private(const pk *m, const chain *c) {
  const gcc_graph *g = m->g;
  const gcc_node *a = &g->nodes[c->att];
  for (int k = 0; k < 3; k++)
    if (!read_by(m, a->inputs[k], c->att, c->grad))
      return 0;
  if (!read_by(m, a->outputs[0], c->yt, c->grad))
    return 0;
  const int l = a->outputs[1];
  if (c->grad >= 0)
    return read_by(m, l, c->grad, -1);
  return hidden(m, l) && g->values[l].n_consumers == 0;
}

static gcc_status set_ins_outs(gcc_graph *g, int node, const int *in, int n_in, const int *out,
                               int n_out, gcc_diag *d) {
  gcc_node *n = &g->nodes[node];
  int *i2 = malloc((size_t)n_in * sizeof *i2), *o2 = malloc((size_t)n_out * sizeof *o2);
  if (!i2 || !o2) {
    free(i2);
    free(o2);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (packed-attention pass)");
  }
  memcpy(i2, in, (size_t)n_in * sizeof *i2);
  memcpy(o2, out, (size_t)n_out * sizeof *o2);
  free(n->inputs);
  free(n->outputs);
  n->inputs = i2;
  n->n_inputs = n_in;
  n->outputs = o2;
  n->n_outputs = n_out;
  for (int k = 0; k < n_out; k++)
    g->values[out[k]].producer = node;
  return GCC_OK;
}

static gcc_status rewrite(pk *m, const chain *c, gcc_diag *d) {
  gcc_graph *g = m->g;
  const int l = g->nodes[c->att].outputs[1];
  for (int k = 0; k < 3; k++)
    for (int j = 0; j < 3; j++)
      m->dead[c->fwd[k][j]] = 1;
  m->dead[c->yt] = m->dead[c->yr] = 1;
  int in[4] = {c->p, c->y, l, c->dy}, out[2] = {c->y, l};
  GCC_TRY(set_ins_outs(g, c->att, in, 1, out, 2, d));
  g->nodes[c->att].op = GCC_OP_ATTENTION_PACKED;
  GCC_TRY(gcc_node_set_int(g, c->att, "heads", c->heads));
  GCC_TRY(gcc_node_set_int(g, c->att, "seq", c->seq));
  GCC_TRY(gcc_op_resolve_attrs(g, c->att, d));
  GCC_TRY(gcc_op(GCC_OP_ATTENTION_PACKED)->shape(g, c->att, d));
  if (c->grad < 0)
    return GCC_OK;
  for (int k = 0; k < 3; k++)
    m->dead[c->back[k][0]] = m->dead[c->back[k][1]] = 1;
  m->dead[c->dot] = m->dead[c->dor] = m->dead[c->concat] = 1;
  GCC_TRY(set_ins_outs(g, c->grad, in, 4, &c->dp, 1, d));
  g->nodes[c->grad].op = GCC_OP_ATTENTION_PACKED_GRAD;
  GCC_TRY(gcc_node_set_int(g, c->grad, "heads", c->heads));
  GCC_TRY(gcc_node_set_int(g, c->grad, "seq", c->seq));
  GCC_TRY(gcc_op_resolve_attrs(g, c->grad, d));
  return gcc_op(GCC_OP_ATTENTION_PACKED_GRAD)->shape(g, c->grad, d);
}

static int env_off(void) {
  const char *e = getenv("GCC_CPU_PACKED_ATTENTION");
  return e && strcmp(e, "0") == 0;
}

gcc_status gcc_pass_packed_attention(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  if (!opt || !opt->target || opt->no_packed_attention || env_off())
    return GCC_OK;
  GCC_TRY(gcc_graph_link(g, d));
  pk m = {g, -1, -1, NULL};
  if (g->training.present) {
    m.loss = g->training.loss ? gcc_graph_find(g, g->training.loss) : -1;
    m.pred = g->training.prediction ? gcc_graph_find(g, g->training.prediction) : -1;
  }
  m.dead = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
  if (!m.dead)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (packed-attention pass)");
  int n = 0;
  gcc_status s = GCC_OK;
  for (int i = 0; i < g->n_nodes && s == GCC_OK; i++) {
    const gcc_node *a = &g->nodes[i];
    if (m.dead[i] || role_of(g, i) != R_ATTENTION ||
        !opt->target->supports_op(a->device, GCC_OP_ATTENTION_PACKED))
      continue;
    chain c;
    memset(&c, 0, sizeof c);
    if (!match_forward(&m, i, &c))
      continue;
    if (!match_backward(&m, &c))
      c.grad = -1;
    /* an AttentionGrad whose chain differs keeps reading the unpacked Q, K, V */
    if (!forward_private(&m, &c))
      continue;
    /* the chain's nodes run where the Attention does */
    int same = 1;
    for (int k = 0; k < 3; k++)
      for (int j = 0; j < 3; j++)
        same &= g->nodes[c.fwd[k][j]].device == a->device;
    if (!same || (c.grad >= 0 && g->nodes[c.grad].device != a->device))
      continue;
    s = rewrite(&m, &c, d);
    n++;
  }
  if (s == GCC_OK && n > 0)
    s = gcc_graph_remove_nodes(g, m.dead, d);
  free(m.dead);
  return s;
}
