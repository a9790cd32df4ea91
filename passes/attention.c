/*
 * attention.c - the attention pass: finds scaled dot-product attention as
 * the exporters write it and replaces it with one fused Attention node
 * (graph/ops.h; torch.nn.functional.scaled_dot_product_attention), so that
 * the (B, H, Tq, Tk) scores and probabilities are never stored.
 *
 * The chain recognised, each link optional where marked:
 *
 *   Kt = Transpose(K')               perm swapping the last two dims
 *        K' = [Mul(K, c_k)]          K scaled on its own by a constant
 *        (or Mul(Transpose(K), c_k))
 *        or Reshape(Transpose(Reshape(K, [L, T, D])), [.., D, T]), the
 *        same (PyTorch's default exporter; see reshaped_transpose)
 *   S  = MatMul([Mul(Q, c_q)], Kt)   Q scaled on its own by a constant
 *   S' = [Mul(S, c) | Mul(c, S) | Div(S, c)]
 *   X  = [Add(S', M) | Add(M, S')]   a float32 mask broadcast to the scores
 *   P  = Softmax(X, axis -1)
 *   P' = [Dropout(P)]                ratio < 1 (the exporters' training exports)
 *   O  = MatMul(P', V)
 *
 * with c, c_q and c_k float32 constants of one element (their product, a
 * Div's reciprocal, is the op's scale: PyTorch's exporter scales Q and K by
 * sqrt(scale) each) and Q, K, V of rank 2 to 4 with equal leading dims. A
 * constant mask that is exactly 0 on and below the diagonal and -Inf (or
 * -FLT_MAX) above it (nn.Transformer.generate_square_subsequent_mask; any leading dims of 1)
 * becomes is_causal = 1 and is dropped; any other mask stays an input.
 * Every intermediate value (Kt, the scaled Q and K, S, S', X, P) must have
 * the chain's next node as its only reader and be neither a graph output
 * nor the training spec's loss or prediction, else the chain is left as it
 * is. The last MatMul becomes the Attention node (same name, output O,
 * a second output "<name>/lse"); the other nodes of the chain are removed.
 * With a Dropout, the Attention node takes its ratio as dropout_p, its seed
 * and its `training`, and its name (the MatMul's goes to the removed
 * Dropout): the training form derives the key from the name and seed as
 * Dropout's does, so the fused node draws the mask the Dropout would have.
 *
 * Compiled for training, a mask computed from a trainable parameter (a
 * learned position bias) leaves the chain unfused: the fused op gives the
 * mask no gradient (evaluation fuses it).
 *
 * Not recognised yet: a mask made by Where (no Where op yet), a K^T that is
 * not a Transpose (a stored transposed weight).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/passes.h"

/* What each op is to the matcher: the pass's own table keyed by the op enum. */
enum { R_NONE = 0, R_MATMUL, R_MUL, R_DIV, R_ADD, R_SOFTMAX, R_TRANSPOSE, R_RESHAPE, R_DROPOUT };
static const unsigned char kRole[GCC_OP_COUNT] = {
    [GCC_OP_MATMUL] = R_MATMUL,   [GCC_OP_MUL] = R_MUL,         [GCC_OP_DIV] = R_DIV,
    [GCC_OP_ADD] = R_ADD,         [GCC_OP_SOFTMAX] = R_SOFTMAX, [GCC_OP_TRANSPOSE] = R_TRANSPOSE,
    [GCC_OP_RESHAPE] = R_RESHAPE, [GCC_OP_DROPOUT] = R_DROPOUT,
};

typedef struct matcher {
  gcc_graph *g;
  int loss, pred; /* the training spec's values, or -1 */
  int train;      /* compiling for training (a backward pass follows) */
  char *dead;     /* nodes of matched chains */
} matcher;

static int role(const gcc_graph *g, int node) {
  return node >= 0 ? kRole[g->nodes[node].op] : R_NONE;
}

static int producer(const gcc_graph *g, int v) {
  return v >= 0 ? g->values[v].producer : -1;
}

/* Value v is read by `node` only and is nothing the caller sees. */
static int private_to(const matcher *m, int v, int node) {
  const gcc_graph *g = m->g;
  if (v < 0 || v == m->loss || v == m->pred || g->values[v].n_consumers != 1 ||
      g->values[v].consumers[0] != node)
    return 0;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v)
      return 0;
  return 1;
}

/* Whether value v is computed from a trainable parameter (a PARAM reached
 * through its producers): in a graph that trains, such a mask needs a
 * gradient, which the fused Attention does not give (its mask is a
 * constant or an input), so the chain stays unfused and trains as the
 * MatMul -> Softmax -> MatMul it is (Swin-T's relative-position bias,
 * gathered from a trained table). `seen` has a byte and `stack` an int per
 * value (an explicit stack: a mask can descend from the whole graph). */
static int from_param(const gcc_graph *g, int v, char *seen, int *stack) {
  int top = 0, found = 0;
  stack[top++] = v;
  seen[v] = 1;
  while (top > 0 && !found) {
    int u = stack[--top];
    if (g->values[u].kind == GCC_VALUE_PARAM) {
      found = 1;
      break;
    }
    int n = producer(g, u);
    for (int k = 0; n >= 0 && k < g->nodes[n].n_inputs; k++) {
      int w = g->nodes[n].inputs[k];
      if (w >= 0 && !seen[w]) {
        seen[w] = 1;
        stack[top++] = w; /* each value is pushed once: n_values entries suffice */
      }
    }
  }
  return found;
}

/* The float32 constant of one element, or NAN. A graph without a training
 * spec never trains: a one-element float initializer there (a PARAM: the
 * importer makes every float initializer one) is read as the constant it
 * is, as the scale that PyTorch's default exporter's optimizer stores as an
 * initializer. */
static float scalar_const(const gcc_graph *g, int v) {
  if (v < 0)
    return NAN;
  const gcc_value *x = &g->values[v];
  int fixed = x->kind == GCC_VALUE_CONST || (x->kind == GCC_VALUE_PARAM && !g->training.present);
  if (!fixed || x->dtype != GCC_DT_FLOAT32 || !x->data || x->data_bytes != sizeof(float) ||
      gcc_shape_numel(&x->shape, NULL) != 1)
    return NAN;
  float f;
  memcpy(&f, x->data, sizeof f);
  return f;
}

/* If node `n` is Mul(x, c) / Mul(c, x) (or with allow_div Div(x, c)) with c a
 * scalar constant: *x the other operand, *f the factor; else 0. */
static int scaling(const gcc_graph *g, int n, int allow_div, int *x, float *f) {
  int r = role(g, n);
  if (r != R_MUL && !(allow_div && r == R_DIV))
    return 0;
  const gcc_node *nd = &g->nodes[n];
  if (nd->n_inputs != 2)
    return 0;
  float c1 = scalar_const(g, nd->inputs[1]);
  if (r == R_DIV) {
    if (!(isfinite(c1) && c1 > 0.0f))
      return 0;
    *x = nd->inputs[0];
    *f = 1.0f / c1;
    return 1;
  }
  float c0 = scalar_const(g, nd->inputs[0]);
  if (isfinite(c1) && c1 > 0.0f) {
    *x = nd->inputs[0];
    *f = c1;
    return 1;
  }
  if (isfinite(c0) && c0 > 0.0f) {
    *x = nd->inputs[1];
    *f = c0;
    return 1;
  }
  return 0;
}

/* Transpose swapping the last two dims (and nothing else). */
static int swaps_last_two(const gcc_graph *g, int n) {
  const gcc_node *nd = &g->nodes[n];
  const gcc_attr *p = &nd->av[TRANSPOSE_PERM];
  int r = g->values[nd->inputs[0]].shape.ndim;
  if (p->n_ints != r || r < 2)
    return 0;
  for (int i = 0; i < r - 2; i++)
    if (p->ints[i] != i)
      return 0;
  return p->ints[r - 2] == r - 1 && p->ints[r - 1] == r - 2;
}

/* Kt = Reshape(Transpose(Reshape(K, [L, T, D]), swap), [.., D, T]) with K
 * [.., T, D] and Kt's leading dims K's: K^T as PyTorch's default exporter
 * writes it for scaled_dot_product_attention (the leading dims merged, each
 * T x D matrix transposed, split again), the same values as a Transpose of
 * the last two dims. Node `r2` is the outer Reshape (its input and the
 * inner values private to the chain); *k the K, the two inner nodes marked
 * in chain[]. */
static int reshaped_transpose(const matcher *m, int r2, int *k, char *chain) {
  const gcc_graph *g = m->g;
  if (role(g, r2) != R_RESHAPE)
    return 0;
  int tv = g->nodes[r2].inputs[0], t = producer(g, tv);
  if (role(g, t) != R_TRANSPOSE || !swaps_last_two(g, t) || !private_to(m, tv, r2))
    return 0;
  int rv = g->nodes[t].inputs[0], r1 = producer(g, rv);
  if (role(g, r1) != R_RESHAPE || !private_to(m, rv, t))
    return 0;
  int kv = g->nodes[r1].inputs[0];
  const gcc_shape *ks = &g->values[kv].shape, *ms = &g->values[rv].shape,
                  *os = &g->values[g->nodes[r2].outputs[0]].shape;
  int r = ks->ndim;
  if (r < 2 || os->ndim != r || ms->ndim < 2 || ms->dims[ms->ndim - 2] != ks->dims[r - 2] ||
      ms->dims[ms->ndim - 1] != ks->dims[r - 1] || os->dims[r - 2] != ks->dims[r - 1] ||
      os->dims[r - 1] != ks->dims[r - 2])
    return 0;
  for (int i = 0; i < r - 2; i++)
    if (os->dims[i] != ks->dims[i])
      return 0;
  chain[r1] = chain[t] = 1;
  *k = kv;
  return 1;
}

/* A constant [.., Tq, Tk] (leading dims 1) that is 0 where j <= i and -Inf
 * (or the lowest float, -FLT_MAX: PyTorch's default exporter's
 * Where(mask, finfo.min, 0)) where j > i: PyTorch's causal mask, top-left
 * aligned. Either masked value makes exp() 0 in the softmax, as the
 * diagonal is never masked. */
static int is_causal_mask(const gcc_graph *g, int v, int64_t tq, int64_t tk) {
  const gcc_value *x = &g->values[v];
  if (x->kind != GCC_VALUE_CONST || x->dtype != GCC_DT_FLOAT32 || !x->data || x->shape.ndim < 2)
    return 0;
  int r = x->shape.ndim;
  for (int i = 0; i < r - 2; i++)
    if (x->shape.dims[i] != 1)
      return 0;
  if (x->shape.dims[r - 2] != tq || x->shape.dims[r - 1] != tk ||
      x->data_bytes != (size_t)(tq * tk) * sizeof(float))
    return 0;
  const float *m = x->data;
  for (int64_t i = 0; i < tq; i++)
    for (int64_t j = 0; j < tk; j++) {
      float x = m[i * tk + j];
      if (j > i ? !(x == -INFINITY || x == -FLT_MAX) : x != 0.0f)
        return 0;
    }
  return 1;
}

static int rank234(const gcc_graph *g, int v) {
  return v >= 0 && g->values[v].dtype == GCC_DT_FLOAT32 && g->values[v].shape.ndim >= 2 &&
         g->values[v].shape.ndim <= 4;
}

/* Tries the chain that ends at MatMul node `f`; rewrites it and marks the
 * other nodes dead on success. */
static gcc_status try_chain(matcher *m, int f, int *done, gcc_diag *d) {
  gcc_graph *g = m->g;
  *done = 0;
  const gcc_node *fn = &g->nodes[f];
  if (fn->n_inputs != 2 || fn->n_attrs != 0)
    return GCC_OK;
  int p = fn->inputs[0], V = fn->inputs[1];
  int sm = producer(g, p), dn = -1;
  if (role(g, sm) == R_DROPOUT) { /* P' = Dropout(P) */
    if (!private_to(m, p, f) || !(g->nodes[sm].av[DROPOUT_RATIO].f < 1.0f))
      return GCC_OK;
    dn = sm;
    p = g->nodes[dn].inputs[0];
    sm = producer(g, p);
  }
  if (role(g, sm) != R_SOFTMAX || !private_to(m, p, dn >= 0 ? dn : f))
    return GCC_OK;
  int64_t axis = g->nodes[sm].av[SOFTMAX_AXIS].i;
  int x = g->nodes[sm].inputs[0];
  int xr = g->values[x].shape.ndim;
  if (!(axis == -1 || axis == xr - 1) || !private_to(m, x, sm))
    return GCC_OK;
  char *chain = calloc((size_t)g->n_nodes, 1);
  if (!chain)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attention pass)");
  chain[sm] = 1;
  if (dn >= 0)
    chain[dn] = 1;
  /* optional Add of a mask */
  int mask = -1, cur = x, n = producer(g, cur);
  if (role(g, n) == R_ADD && g->nodes[n].n_inputs == 2) {
    int a0 = g->nodes[n].inputs[0], a1 = g->nodes[n].inputs[1];
    /* the scores are the operand with the result's shape made by a MatMul
     * or a scaling; the mask is the other */
    int s_in = -1;
    for (int k = 0; k < 2 && s_in < 0; k++) {
      int v = k ? a1 : a0, pr = producer(g, v), r = role(g, pr);
      if ((r == R_MATMUL || r == R_MUL || r == R_DIV) &&
          gcc_shape_equal(&g->values[v].shape, &g->values[cur].shape))
        s_in = v;
    }
    if (s_in >= 0) {
      mask = s_in == a0 ? a1 : a0;
      int trained = 0;
      if (m->train) {
        size_t nv = (size_t)(g->n_values ? g->n_values : 1);
        char *seen = calloc(nv, 1);
        int *stack = malloc(nv * sizeof *stack);
        if (!seen || !stack) {
          free(seen);
          free(stack);
          free(chain);
          return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attention pass)");
        }
        trained = from_param(g, mask, seen, stack);
        free(seen);
        free(stack);
      }
      if (g->values[mask].dtype != GCC_DT_FLOAT32 || !private_to(m, s_in, n) || trained) {
        free(chain);
        return GCC_OK;
      }
      chain[n] = 1;
      cur = s_in;
      n = producer(g, cur);
    }
  }
  /* optional scaling of the scores */
  float scale = 1.0f, f1;
  int inner;
  if (scaling(g, n, 1, &inner, &f1)) {
    if (!private_to(m, inner, n)) {
      free(chain);
      return GCC_OK;
    }
    chain[n] = 1;
    scale *= f1;
    cur = inner;
    n = producer(g, cur);
  }
  /* S = MatMul(Q', Kt) */
  if (role(g, n) != R_MATMUL || g->nodes[n].n_inputs != 2) {
    free(chain);
    return GCC_OK;
  }
  chain[n] = 1;
  int q = g->nodes[n].inputs[0], kt = g->nodes[n].inputs[1], qn = producer(g, q);
  if (scaling(g, qn, 0, &inner, &f1) && private_to(m, q, n)) {
    chain[qn] = 1;
    scale *= f1;
    q = inner;
  }
  int k, tn = producer(g, kt), kn, kt_reader = n;
  if (scaling(g, tn, 0, &inner, &f1) && private_to(m, kt, n)) { /* Mul(Transpose(K), c) */
    chain[tn] = 1;
    scale *= f1;
    kt_reader = tn;
    kt = inner;
    tn = producer(g, kt);
  }
  if (!private_to(m, kt, kt_reader) || !((role(g, tn) == R_TRANSPOSE && swaps_last_two(g, tn)) ||
                                         reshaped_transpose(m, tn, &k, chain))) {
    free(chain);
    return GCC_OK;
  }
  chain[tn] = 1;
  if (role(g, tn) == R_TRANSPOSE)
    k = g->nodes[tn].inputs[0];
  kn = producer(g, k);
  if (scaling(g, kn, 0, &inner, &f1) && private_to(m, k, tn)) { /* Transpose(Mul(K, c)) */
    chain[kn] = 1;
    scale *= f1;
    k = inner;
  }
  /* shapes: Q [.., Tq, D], K [.., Tk, D], V [.., Tk, Dv], equal leading dims */
  int ok = rank234(g, q) && rank234(g, k) && rank234(g, V) && isfinite(scale) && scale > 0.0f;
  if (ok) {
    const gcc_shape *qs = &g->values[q].shape, *ks = &g->values[k].shape, *vs = &g->values[V].shape;
    int r = qs->ndim;
    ok = ks->ndim == r && vs->ndim == r && ks->dims[r - 1] == qs->dims[r - 1] &&
         ks->dims[r - 2] == vs->dims[r - 2];
    for (int i = 0; ok && i < r - 2; i++)
      ok = ks->dims[i] == qs->dims[i] && vs->dims[i] == qs->dims[i];
  }
  if (!ok) {
    free(chain);
    return GCC_OK;
  }
  const gcc_shape *qs = &g->values[q].shape;
  int64_t tq = qs->dims[qs->ndim - 2], tk = g->values[k].shape.dims[qs->ndim - 2];
  int causal = mask >= 0 && is_causal_mask(g, mask, tq, tk);
  if (causal)
    mask = -1;

  /* the rewrite: the last MatMul becomes the Attention node */
  int lv;
  char lname[600];
  snprintf(lname, sizeof lname, "%s/lse", g->nodes[f].name);
  gcc_status s = gcc_graph_add_temp(g, lname, GCC_VALUE_ACTIVATION, &lv, d);
  if (s != GCC_OK) {
    free(chain);
    return s;
  }
  gcc_node *an = &g->nodes[f];
  int n_in = mask >= 0 ? 4 : 3;
  int *ins = malloc((size_t)n_in * sizeof *ins), *outs = malloc(2 * sizeof *outs);
  if (!ins || !outs) {
    free(ins);
    free(outs);
    free(chain);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attention pass)");
  }
  ins[ATTN_IN_Q] = q;
  ins[ATTN_IN_K] = k;
  ins[ATTN_IN_V] = V;
  if (mask >= 0)
    ins[ATTN_IN_MASK] = mask;
  outs[0] = an->outputs[0];
  outs[1] = lv;
  free(an->inputs);
  free(an->outputs);
  an->inputs = ins;
  an->n_inputs = n_in;
  an->outputs = outs;
  an->n_outputs = 2;
  an->op = GCC_OP_ATTENTION;
  g->values[lv].producer = f;
  for (int i = 0; i < g->n_nodes; i++)
    if (chain[i])
      m->dead[i] = 1;
  free(chain);
  GCC_TRY(gcc_node_set_int(g, f, "is_causal", causal));
  GCC_TRY(gcc_node_set_float(g, f, "scale", scale));
  if (dn >= 0) {
    const gcc_node *dr = &g->nodes[dn];
    float ratio = dr->av[DROPOUT_RATIO].f;
    int64_t seed = dr->av[DROPOUT_SEED].i, training = dr->av[DROPOUT_TRAINING].i;
    GCC_TRY(gcc_node_set_float(g, f, "dropout_p", ratio));
    GCC_TRY(gcc_node_set_int(g, f, "seed", seed));
    GCC_TRY(gcc_node_set_int(g, f, "training", training));
    if (training) /* a key already set (autodiff's): the Dropout's */
      GCC_TRY(gcc_node_set_int(g, f, "key", dr->av[DROPOUT_KEY].i));
    char *name = g->nodes[f].name; /* the Dropout's name: its key */
    g->nodes[f].name = g->nodes[dn].name;
    g->nodes[dn].name = name;
  }
  GCC_TRY(gcc_op_resolve_attrs(g, f, d));
  GCC_TRY(gcc_op(g->nodes[f].op)->shape(g, f, d));
  *done = 1;
  return GCC_OK;
}

gcc_status gcc_pass_attention(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  if (opt && opt->no_attention_fusion)
    return GCC_OK;
  GCC_TRY(gcc_graph_link(g, d));
  matcher m = {g, -1, -1, g->training.present && (!opt || opt->mode == GCC_MODE_TRAIN), NULL};
  if (g->training.present) {
    m.loss = g->training.loss ? gcc_graph_find(g, g->training.loss) : -1;
    m.pred = g->training.prediction ? gcc_graph_find(g, g->training.prediction) : -1;
  }
  m.dead = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
  if (!m.dead)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attention pass)");
  int n_fused = 0;
  gcc_status s = GCC_OK;
  for (int i = 0; i < g->n_nodes && s == GCC_OK; i++) {
    if (m.dead[i] || role(g, i) != R_MATMUL)
      continue;
    int done = 0;
    s = try_chain(&m, i, &done, d);
    n_fused += done;
  }
  if (s == GCC_OK && n_fused > 0)
    s = gcc_graph_remove_nodes(g, m.dead, d);
  free(m.dead);
  return s;
}
