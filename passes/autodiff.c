/*
 * autodiff.c - reverse-mode automatic differentiation and optimizer nodes.
 *
 * The forward nodes are visited once in reverse topological order. Each
 * value keeps the list of its gradient contributions; when a node is
 * visited, the contributions of its outputs are summed (Add nodes, in a
 * fixed order, so results are deterministic) and the op's gradient builder
 * adds the backward nodes for its inputs. Finally each parameter's summed
 * gradient is turned into the persistent GRAD value "<param>.grad" (the
 * node producing it writes straight into the persistent arena; no copy),
 * and one optimizer node per parameter is appended.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/autodiff.h"
#include "passes/grad_rules.h"
#include "passes/passes.h"

typedef struct contrib_list {
  int *v;
  int n, cap;
} contrib_list;

struct gcc_grad_ctx {
  gcc_graph *g;
  char *wanted; /* per value: gradient needed */
  int n_wanted; /* size of `wanted` (values created later are not wanted) */
  contrib_list *contrib;
  int n_contrib;
  int fwd; /* forward node being differentiated: backward nodes inherit its pin */
  int *io; /* dy and dx of the node being differentiated (any arity: Concat of 25) */
  int io_cap;
  char *dead; /* per node: a SliceGrad whose output a Concat replaced (removed at the end) */
  int dead_cap;
};

gcc_graph *gcc_grad_graph(gcc_grad_ctx *c) {
  return c->g;
}

int gcc_grad_wanted(gcc_grad_ctx *c, int value) {
  return value >= 0 && value < c->n_wanted && c->wanted[value];
}

gcc_status gcc_grad_add_node(gcc_grad_ctx *c, int op, const char *hint, const int *in, int n_in,
                             int *node, int *out, gcc_diag *d) {
  int v;
  GCC_TRY(gcc_graph_add_temp(c->g, hint, GCC_VALUE_ACTIVATION, &v, d));
  GCC_TRY(gcc_graph_add_node(c->g, hint, op, in, n_in, &v, 1, node, d));
  c->g->nodes[*node].phase = GCC_PHASE_BACKWARD;
  const char *pin = c->fwd >= 0 ? c->g->nodes[c->fwd].pin : NULL;
  if (pin && !(c->g->nodes[*node].pin = strdup(pin)))
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
  *out = v;
  return GCC_OK;
}

gcc_status gcc_grad_add_node_n(gcc_grad_ctx *c, int op, const char *hint, const char *const *outs,
                               int n_out, const int *in, int n_in, int *node, int *out,
                               gcc_diag *d) {
  if (n_out < 1 || n_out > 8)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "autodiff: %d outputs for '%s'", n_out, hint);
  int v[8];
  for (int k = 0; k < n_out; k++) {
    char name[600];
    snprintf(name, sizeof name, "%s/%s", hint, outs[k]);
    GCC_TRY(gcc_graph_add_temp(c->g, name, GCC_VALUE_ACTIVATION, &v[k], d));
  }
  GCC_TRY(gcc_graph_add_node(c->g, hint, op, in, n_in, v, n_out, node, d));
  c->g->nodes[*node].phase = GCC_PHASE_BACKWARD;
  const char *pin = c->fwd >= 0 ? c->g->nodes[c->fwd].pin : NULL;
  if (pin && !(c->g->nodes[*node].pin = strdup(pin)))
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
  for (int k = 0; k < n_out; k++)
    out[k] = v[k];
  return GCC_OK;
}

gcc_status gcc_grad_finish(gcc_grad_ctx *c, int node, gcc_diag *d) {
  GCC_TRY(gcc_op_resolve_attrs(c->g, node, d));
  return gcc_op(c->g->nodes[node].op)->shape(c->g, node, d);
}

static gcc_status add_contrib(gcc_grad_ctx *c, int value, int grad, gcc_diag *d) {
  contrib_list *l = &c->contrib[value];
  if (l->n == l->cap) {
    int nc = l->cap ? l->cap * 2 : 2;
    int *nv = realloc(l->v, (size_t)nc * sizeof *nv);
    if (!nv)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
    l->v = nv;
    l->cap = nc;
  }
  l->v[l->n++] = grad;
  return GCC_OK;
}

/* When the contributions of `value` are all SliceGrads along one axis (step
 * 1, every other dim whole) whose ranges tile that axis exactly once (the
 * q, k and v thirds of a fused projection, Split's pieces), their sum is the
 * Concat of their dY in start order: one copy instead of a zero-filled
 * tensor per piece and the Adds between them. The same values but the sign
 * of a zero (x + 0 is +0 for x = -0). *out = the Concat's output, or -1
 * when the form does not apply (nothing added). The SliceGrads are marked
 * dead and removed at the end of autodiff. */
static const unsigned char kSliceGrad[GCC_OP_COUNT] = {[GCC_OP_SLICE_GRAD] = 1};

static gcc_status concat_slices(gcc_grad_ctx *c, int value, int *out, gcc_diag *d) {
  const contrib_list *l = &c->contrib[value];
  gcc_graph *g = c->g;
  *out = -1;
  if (l->n < 2 || l->n > 64 || g->values[value].dtype != GCC_DT_FLOAT32)
    return GCC_OK;
  const gcc_shape *xs = &g->values[value].shape;
  int node[64], axis = -1;
  int64_t first[64];
  for (int i = 0; i < l->n; i++) { /* (gcc_graph_add_node sets producers) */
    int v = l->v[i], p = g->values[v].producer;
    if (p < 0 || p >= g->n_nodes || g->nodes[p].op < 0 || g->nodes[p].op >= GCC_OP_COUNT ||
        !kSliceGrad[g->nodes[p].op] || g->nodes[p].n_inputs != 1 ||
        g->values[v].kind != GCC_VALUE_ACTIVATION)
      return GCC_OK;
    int64_t start[GCC_MAX_DIMS], step[GCC_MAX_DIMS];
    gcc_shape ys;
    gcc_diag quiet = {0};
    if (gcc_slice_resolve(&g->nodes[p], g->source, xs, start, step, &ys, &quiet) != GCC_OK ||
        ys.ndim != xs->ndim)
      return GCC_OK;
    int cut = -1;
    for (int k = 0; k < xs->ndim; k++) {
      if (step[k] != 1)
        return GCC_OK;
      if (start[k] != 0 || ys.dims[k] != xs->dims[k]) {
        if (cut >= 0)
          return GCC_OK; /* two cut dims */
        cut = k;
      }
    }
    if (cut < 0 || (axis >= 0 && cut != axis))
      return GCC_OK;
    axis = cut;
    node[i] = p;
    first[i] = start[cut];
  }
  /* start order (a handful of pieces: insertion sort), then an exact tiling */
  int order[64];
  for (int i = 0; i < l->n; i++) {
    int k = i;
    while (k > 0 && first[order[k - 1]] > first[i]) {
      order[k] = order[k - 1];
      k--;
    }
    order[k] = i;
  }
  int64_t at = 0;
  int in[64];
  for (int i = 0; i < l->n; i++) {
    const gcc_node *n = &g->nodes[node[order[i]]];
    if (first[order[i]] != at)
      return GCC_OK;
    in[i] = n->inputs[0];
    at += g->values[in[i]].shape.dims[axis];
  }
  if (at != xs->dims[axis])
    return GCC_OK;
  for (int j = 0; j < g->n_nodes; j++) /* the pieces are read by the sum only */
    for (int k = 0; k < g->nodes[j].n_inputs; k++)
      for (int i = 0; i < l->n; i++)
        if (g->nodes[j].inputs[k] == l->v[i])
          return GCC_OK;
  if (g->n_nodes > c->dead_cap) {
    int cap = g->n_nodes * 2;
    char *nd = realloc(c->dead, (size_t)cap);
    if (!nd)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
    memset(nd + c->dead_cap, 0, (size_t)(cap - c->dead_cap));
    c->dead = nd;
    c->dead_cap = cap;
  }
  for (int i = 0; i < l->n; i++)
    c->dead[node[i]] = 1;
  char hint[512];
  snprintf(hint, sizeof hint, "%s/grad_concat", g->values[value].name);
  int cn;
  GCC_TRY(gcc_grad_add_node(c, GCC_OP_CONCAT, hint, in, l->n, &cn, out, d));
  GCC_TRY(gcc_node_set_int(c->g, cn, "axis", axis));
  return gcc_grad_finish(c, cn, d);
}

/* Sums the contributions of `value` into one value (or -1 if none). */
static gcc_status total_grad(gcc_grad_ctx *c, int value, int *out, gcc_diag *d) {
  contrib_list *l = &c->contrib[value];
  *out = -1;
  if (l->n == 0)
    return GCC_OK;
  GCC_TRY(concat_slices(c, value, out, d));
  if (*out >= 0)
    return GCC_OK;
  int acc = l->v[0];
  for (int i = 1; i < l->n; i++) {
    char hint[512];
    snprintf(hint, sizeof hint, "%s/grad_sum", c->g->values[value].name);
    int in[2] = {acc, l->v[i]}, node = -1, sum = -1;
    GCC_TRY(gcc_grad_add_node(c, GCC_OP_ADD, hint, in, 2, &node, &sum, d));
    GCC_TRY(gcc_grad_finish(c, node, d));
    acc = sum;
  }
  *out = acc;
  return GCC_OK;
}

static void ctx_free(gcc_grad_ctx *c) {
  for (int i = 0; i < c->n_contrib; i++)
    free(c->contrib[i].v);
  free(c->contrib);
  free(c->wanted);
  free(c->io);
  free(c->dead);
}

/* Renames value v (the name map is rebuilt by re-adding under the new name:
 * the old entry becomes a tombstone-free miss because names are unique). */
static gcc_status rename_value(gcc_grad_ctx *c, int v, const char *name, gcc_diag *d) {
  /* Make a fresh value with the new name, move v's identity into it, and
   * point every reference of v to it, pending gradient contributions
   * included: another parameter may share the value (dA = dB = dY of an
   * Add of two parameters of the same shape). */
  gcc_graph *g = c->g;
  int nv;
  GCC_TRY(gcc_graph_add_value(g, name, g->values[v].dtype, &g->values[v].shape, g->values[v].kind,
                              NULL, 0, &nv, d));
  for (int i = 0; i < c->n_contrib; i++)
    for (int k = 0; k < c->contrib[i].n; k++)
      if (c->contrib[i].v[k] == v)
        c->contrib[i].v[k] = nv;
  for (int i = 0; i < g->n_nodes; i++) {
    gcc_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] == v)
        n->inputs[k] = nv;
    for (int k = 0; k < n->n_outputs; k++)
      if (n->outputs[k] == v)
        n->outputs[k] = nv;
  }
  g->values[nv].param_of = g->values[v].param_of;
  return GCC_OK;
}

/* Makes the summed gradient `grad` of parameter p the persistent value
 * "<p>.grad". When `grad` is not a fresh activation of its own (it is an
 * alias, shared with another parameter, or a constant), an Identity node
 * copies it. Returns the GRAD value in *out. */
static gcc_status make_param_grad(gcc_grad_ctx *c, int p, int grad, int *out, gcc_diag *d) {
  gcc_graph *g = c->g;
  char name[512];
  snprintf(name, sizeof name, "%s.grad", g->values[p].name);
  GCC_TRY(gcc_graph_link(g, d));
  int prod = g->values[grad].producer;
  int owned = g->values[grad].kind == GCC_VALUE_ACTIVATION && prod >= 0 &&
              !(gcc_op(g->nodes[prod].op)->flags & GCC_OPF_ALIAS);
  if (!owned) {
    /* the copy gets a temporary name of its own: "<p>.grad" is the name the
     * rename below gives it */
    char hint[520];
    snprintf(hint, sizeof hint, "%s/grad_copy", g->values[p].name);
    int node, copy;
    GCC_TRY(gcc_grad_add_node(c, GCC_OP_IDENTITY, hint, &grad, 1, &node, &copy, d));
    GCC_TRY(gcc_grad_finish(c, node, d));
    grad = copy;
  }
  g = c->g;
  g->values[grad].kind = GCC_VALUE_GRAD;
  g->values[grad].param_of = p;
  GCC_TRY(rename_value(c, grad, name, d));
  *out = gcc_graph_find(g, name);
  /* the old value is now unreferenced; keep it out of every later pass */
  g->values[grad].kind = GCC_VALUE_ACTIVATION;
  g->values[grad].param_of = -1;
  return GCC_OK;
}

static gcc_status add_state(gcc_graph *g, int p, const char *suffix, int *out, gcc_diag *d) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", g->values[p].name, suffix);
  gcc_shape s = g->values[p].shape;
  GCC_TRY(gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &s, GCC_VALUE_OPT_STATE, NULL, 0, out, d));
  g->values[*out].param_of = p;
  return GCC_OK;
}

/* fp16 loss scaling's values (graph/ir.h GCC_SCALER_*): -1 when off; and
 * gradient clipping's GradNorm output (-1 when off) */
typedef struct scaler_values {
  int scale, found_inf, tracker, steps, scratch;
  int clip;
} scaler_values;

static gcc_status add_optimizer_node(gcc_graph *g, const gcc_optimizer *o, int p, int grad,
                                     const scaler_values *sc, gcc_diag *d) {
  char name[512];
  snprintf(name, sizeof name, "%s/update", g->values[p].name);
  int in[8] = {p, grad, -1, -1, -1, -1, -1, -1}, n_in = 2, node;
  int op = o->kind == GCC_OPT_ADAM ? GCC_OP_ADAM : GCC_OP_SGD;
  if (o->kind == GCC_OPT_ADAM) {
    GCC_TRY(add_state(g, p, "exp_avg", &in[2], d));
    GCC_TRY(add_state(g, p, "exp_avg_sq", &in[3], d));
    n_in = 4;
  } else if (o->momentum != 0.0f) {
    GCC_TRY(add_state(g, p, "momentum_buffer", &in[2], d));
    n_in = 3;
  }
  if (sc->scale >= 0 || sc->clip >= 0) { /* after the optimizer's own inputs (graph/ops.h
                                            SCALER_IN_*), all -1 without loss scaling */
    n_in = o->kind == GCC_OPT_ADAM ? ADAM_IN_SCALER : SGD_IN_SCALER;
    in[n_in + SCALER_IN_SCALE] = sc->scale;
    in[n_in + SCALER_IN_FOUND_INF] = sc->found_inf;
    in[n_in + SCALER_IN_STEPS] = sc->steps;
    n_in += SCALER_N_IN;
  }
  if (sc->clip >= 0) /* then GradNorm's [norm, coefficient] */
    in[n_in++] = sc->clip;
  /* --weight-decay-on matrices: none on the parameters of < 2 dims */
  float wd = gcc_param_decayed(o, &g->values[p]) ? o->weight_decay : 0.0f;
  GCC_TRY(gcc_graph_add_node(g, name, op, in, n_in, NULL, 0, &node, d));
  g->nodes[node].phase = GCC_PHASE_OPTIMIZER;
  if (o->kind == GCC_OPT_ADAM) {
    GCC_TRY(gcc_node_set_float(g, node, "lr", o->lr));
    GCC_TRY(gcc_node_set_float(g, node, "beta1", o->beta1));
    GCC_TRY(gcc_node_set_float(g, node, "beta2", o->beta2));
    GCC_TRY(gcc_node_set_float(g, node, "eps", o->eps));
    GCC_TRY(gcc_node_set_float(g, node, "weight_decay", wd));
    GCC_TRY(gcc_node_set_int(g, node, "decoupled_weight_decay", o->decoupled));
  } else {
    GCC_TRY(gcc_node_set_float(g, node, "lr", o->lr));
    GCC_TRY(gcc_node_set_float(g, node, "momentum", o->momentum));
    GCC_TRY(gcc_node_set_float(g, node, "dampening", o->dampening));
    GCC_TRY(gcc_node_set_float(g, node, "weight_decay", wd));
    GCC_TRY(gcc_node_set_int(g, node, "nesterov", o->nesterov));
  }
  GCC_TRY(gcc_op_resolve_attrs(g, node, d));
  return gcc_op(g->nodes[node].op)->shape(g, node, d);
}

/* A persistent float32 scalar of loss scaling, starting at `init`. */
static gcc_status add_scaler_value(gcc_graph *g, const char *name, float init, int *out,
                                   gcc_diag *d) {
  gcc_shape scalar = {0, {0}}, two = {1, {2}};
  float zeros[2] = {0.0f, 0.0f};
  int scratch = strcmp(name, GCC_SCALER_SCRATCH_NAME) == 0;
  GCC_TRY(gcc_graph_add_value(g, name, GCC_DT_FLOAT32, scratch ? &two : &scalar,
                              GCC_VALUE_OPT_STATE, scratch ? (const void *)zeros : &init,
                              scratch ? sizeof zeros : sizeof init, out, d));
  g->values[*out].param_of = -1; /* the graph's, not a parameter's */
  return GCC_OK;
}

/* fp16 loss scaling after the backward: AmpNonFiniteCheck over every
 * gradient an update reads (grads[0 .. n)), its found_inf in sc. */
static gcc_status add_scaler_check(gcc_graph *g, const int *grads, int n, scaler_values *sc,
                                   gcc_diag *d) {
  gcc_shape scalar = {0, {0}};
  GCC_TRY(gcc_graph_add_value(g, GCC_SCALER_FOUND_INF_NAME, GCC_DT_FLOAT32, &scalar,
                              GCC_VALUE_ACTIVATION, NULL, 0, &sc->found_inf, d));
  GCC_TRY(add_scaler_value(g, GCC_SCALER_SCRATCH_NAME, 0.0f, &sc->scratch, d));
  int *in = malloc((size_t)(n + 1) * sizeof *in), node;
  if (!in)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
  in[AMP_CHECK_IN_SCRATCH] = sc->scratch;
  memcpy(in + AMP_CHECK_IN_GRADS, grads, (size_t)n * sizeof *in);
  gcc_status st = gcc_graph_add_node(g, "grad_scaler/check", GCC_OP_AMP_NON_FINITE_CHECK, in, n + 1,
                                     &sc->found_inf, 1, &node, d);
  free(in);
  GCC_TRY(st);
  g->nodes[node].phase = GCC_PHASE_BACKWARD;
  GCC_TRY(gcc_op_resolve_attrs(g, node, d));
  return gcc_op(g->nodes[node].op)->shape(g, node, d);
}

/* Gradient clipping after the backward (and the all-reduce, which the
 * all-reduce pass puts before every reader of a gradient): GradNorm over
 * every gradient an update reads, its output in sc->clip. */
static gcc_status add_grad_norm(gcc_graph *g, const int *grads, int n, float max_norm,
                                scaler_values *sc, gcc_diag *d) {
  gcc_shape two = {1, {2}};
  GCC_TRY(gcc_graph_add_value(g, GCC_CLIP_NORM_NAME, GCC_DT_FLOAT32, &two, GCC_VALUE_ACTIVATION,
                              NULL, 0, &sc->clip, d));
  /* fp16 loss scaling: the scale first, the gradients unscaled as read */
  int scaled = sc->scale >= 0, node;
  int *in = malloc((size_t)(n + 1) * sizeof *in);
  if (!in)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
  in[0] = sc->scale;
  memcpy(in + scaled, grads, (size_t)n * sizeof *in);
  gcc_status st = gcc_graph_add_node(g, "clip_grad_norm/norm", GCC_OP_GRAD_NORM, in, n + scaled,
                                     &sc->clip, 1, &node, d);
  free(in);
  GCC_TRY(st);
  g->nodes[node].phase = GCC_PHASE_BACKWARD;
  GCC_TRY(gcc_node_set_float(g, node, "max_norm", max_norm));
  GCC_TRY(gcc_node_set_int(g, node, "scaled", scaled));
  GCC_TRY(gcc_op_resolve_attrs(g, node, d));
  return gcc_op(g->nodes[node].op)->shape(g, node, d);
}

/* ... and AmpUpdateScale after every update. */
static gcc_status add_scaler_update(gcc_graph *g, const gcc_loss_scale *ls, const scaler_values *sc,
                                    gcc_diag *d) {
  int in[4], node;
  in[AMP_UPDATE_IN_SCALE] = sc->scale;
  in[AMP_UPDATE_IN_FOUND_INF] = sc->found_inf;
  in[AMP_UPDATE_IN_TRACKER] = sc->tracker;
  in[AMP_UPDATE_IN_STEPS] = sc->steps;
  GCC_TRY(gcc_graph_add_node(g, "grad_scaler/update", GCC_OP_AMP_UPDATE_SCALE, in, 4, NULL, 0,
                             &node, d));
  g->nodes[node].phase = GCC_PHASE_OPTIMIZER;
  int fixed = ls->mode == GCC_LOSS_SCALE_FIXED;
  GCC_TRY(gcc_node_set_float(g, node, "growth_factor", fixed ? 1.0f : ls->growth_factor));
  GCC_TRY(gcc_node_set_float(g, node, "backoff_factor", fixed ? 1.0f : ls->backoff_factor));
  GCC_TRY(gcc_node_set_int(g, node, "growth_interval", ls->growth_interval));
  GCC_TRY(gcc_op_resolve_attrs(g, node, d));
  return gcc_op(g->nodes[node].op)->shape(g, node, d);
}

/* Gradient accumulation (MIDDLE and LAST micro-steps): `grad` (this
 * micro-batch's gradient of parameter p) becomes Add(<p>.grad_acc, grad),
 * where <p>.grad_acc is the gradient accumulated so far: a GRAD value
 * without producer, bound to the same persistent storage as <p>.grad, which
 * the Add then overwrites in place (elementwise, each element read before
 * it is written: PyTorch's p.grad += g of AccumulateGrad). */
static gcc_status accumulate_grad(gcc_grad_ctx *c, int p, int grad, int *out, gcc_diag *d) {
  gcc_graph *g = c->g;
  char name[512];
  snprintf(name, sizeof name, "%s.grad_acc", g->values[p].name);
  int prev;
  gcc_shape sh = g->values[p].shape;
  GCC_TRY(gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &sh, GCC_VALUE_GRAD, NULL, 0, &prev, d));
  g->values[prev].param_of = p;
  snprintf(name, sizeof name, "%s/grad_accumulate", g->values[p].name);
  int in[2] = {prev, grad}, node;
  GCC_TRY(gcc_grad_add_node(c, GCC_OP_ADD, name, in, 2, &node, out, d));
  return gcc_grad_finish(c, node, d);
}

static gcc_status differentiate(gcc_grad_ctx *c, int loss, const gcc_options *o, gcc_diag *d) {
  const gcc_optimizer *opt = &o->opt;
  int accum = o->grad_accum > 1, role = accum ? o->accum_role : GCC_ACCUM_LAST;
  gcc_graph *g = c->g;
  int n_fwd = g->n_nodes, n_vals = g->n_values;

  /* wanted = depends on a parameter AND the loss depends on it */
  char *dep = calloc((size_t)n_vals, 1), *reach = calloc((size_t)n_vals, 1);
  c->wanted = calloc((size_t)n_vals, 1);
  c->contrib = calloc((size_t)n_vals, sizeof *c->contrib);
  c->n_wanted = c->n_contrib = n_vals;
  if (!dep || !reach || !c->wanted || !c->contrib) {
    free(dep);
    free(reach);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
  }
  for (int v = 0; v < n_vals; v++)
    dep[v] = g->values[v].kind == GCC_VALUE_PARAM && !g->values[v].state;
  for (int i = 0; i < n_fwd; i++) {
    const gcc_node *n = &g->nodes[i];
    int any = 0;
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0 && dep[n->inputs[k]] && gcc_grad_rule_of(n->op)->fn)
        any = 1;
    for (int k = 0; k < n->n_outputs; k++)
      dep[n->outputs[k]] = (char)any;
  }
  reach[loss] = 1;
  for (int i = n_fwd - 1; i >= 0; i--) {
    const gcc_node *n = &g->nodes[i];
    int any = 0;
    for (int k = 0; k < n->n_outputs; k++)
      any |= reach[n->outputs[k]];
    if (any)
      for (int k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0)
          reach[n->inputs[k]] = 1;
  }
  for (int v = 0; v < n_vals; v++)
    c->wanted[v] = dep[v] && reach[v];
  free(dep);
  free(reach);
  if (!c->wanted[loss])
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: the loss '%s' does not depend on any parameter: nothing to train",
                        g->source, g->values[loss].name);

  /* seed: dL/dL = 1; under loss scaling the scale (the backward of
   * scaler.scale(loss)), read from the persistent arena each step */
  float one = 1.0f;
  gcc_shape scalar = {0, {0}};
  int seed;
  scaler_values sc = {-1, -1, -1, -1, -1, -1};
  const gcc_loss_scale *ls = &opt->scaler;
  if (!(opt->clip_grad_norm >= 0.0f) || !isfinite(opt->clip_grad_norm))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: the clip_grad_norm max_norm must be a finite number >= 0, got %g",
                        g->source, (double)opt->clip_grad_norm);
  if (ls->mode != GCC_LOSS_SCALE_NONE && opt->kind != GCC_OPT_NONE) {
    if (!(ls->init_scale > 0.0f) || ls->growth_interval < 1)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "%s: loss scaling needs a scale > 0 and a growth interval >= 1 (got "
                          "%g and %lld)",
                          g->source, (double)ls->init_scale, (long long)ls->growth_interval);
    GCC_TRY(add_scaler_value(g, GCC_SCALER_SCALE_NAME, ls->init_scale, &sc.scale, d));
    GCC_TRY(add_scaler_value(g, GCC_SCALER_TRACKER_NAME, 0.0f, &sc.tracker, d));
    GCC_TRY(add_scaler_value(g, GCC_SCALER_STEPS_NAME, 0.0f, &sc.steps, d));
    seed = sc.scale;
  } else {
    char seed_name[512];
    snprintf(seed_name, sizeof seed_name, "%s.grad_seed", g->values[loss].name);
    /* gradient accumulation: (loss / K).backward(), whose seed is the
     * float32 1/K (DivBackward's grad / K of a grad of 1) */
    if (accum)
      one = (float)(1.0 / (double)o->grad_accum);
    GCC_TRY(gcc_graph_add_value(g, seed_name, GCC_DT_FLOAT32, &scalar, GCC_VALUE_CONST, &one,
                                sizeof one, &seed, d));
  }
  if (accum && sc.scale >= 0) { /* scaler.scale(loss / K).backward(): the scale times 1/K */
    float inv = (float)(1.0 / (double)o->grad_accum);
    int k_inv, node, in[2];
    char name[512];
    snprintf(name, sizeof name, "%s.grad_accum_inv", g->values[loss].name);
    GCC_TRY(gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &scalar, GCC_VALUE_CONST, &inv, sizeof inv,
                                &k_inv, d));
    in[0] = sc.scale;
    in[1] = k_inv;
    snprintf(name, sizeof name, "%s.grad_seed", g->values[loss].name);
    GCC_TRY(gcc_grad_add_node(c, GCC_OP_MUL, name, in, 2, &node, &seed, d));
    GCC_TRY(gcc_grad_finish(c, node, d));
    g = c->g;
  }
  GCC_TRY(add_contrib(c, loss, seed, d));

  for (int i = n_fwd - 1; i >= 0; i--) {
    c->fwd = i;
    const gcc_node *n = &c->g->nodes[i];
    int n_out = n->n_outputs, n_in = n->n_inputs, op = n->op;
    if (n_out + n_in > c->io_cap) {
      int cap = n_out + n_in, *io = realloc(c->io, (size_t)cap * sizeof *io);
      if (!io)
        return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
      c->io = io;
      c->io_cap = cap;
    }
    int *dy = c->io, *dx = c->io + n_out, any = 0;
    for (int k = 0; k < n_out; k++) {
      int ov = c->g->nodes[i].outputs[k];
      if (!c->wanted[ov]) {
        dy[k] = -1;
        continue;
      }
      GCC_TRY(total_grad(c, ov, &dy[k], d));
      any |= dy[k] >= 0;
    }
    if (!any)
      continue;
    int need = 0;
    for (int k = 0; k < n_in; k++) {
      dx[k] = -1;
      need |= gcc_grad_wanted(c, c->g->nodes[i].inputs[k]);
    }
    if (!need)
      continue;
    const gcc_grad_rule *rule = gcc_grad_rule_of(op);
    if (!rule->fn) {
      char nd[600];
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s has no gradient (%s)", c->g->source,
                          gcc_node_desc(c->g, i, nd, sizeof nd),
                          rule->none ? rule->none : "no rule");
    }
    GCC_TRY(rule->fn(c, i, dy, dx, d));
    for (int k = 0; k < n_in; k++) {
      int iv = c->g->nodes[i].inputs[k];
      if (dx[k] >= 0 && gcc_grad_wanted(c, iv))
        GCC_TRY(add_contrib(c, iv, dx[k], d));
    }
  }

  /* parameters: persistent gradients, then (loss scaling: the check over
   * all of them) one update node each (loss scaling: then the scale's) */
  c->fwd = -1;
  int *params = malloc((size_t)(n_vals ? n_vals : 1) * 2 * sizeof *params), n_params = 0;
  if (!params)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
  int *grads = params + n_vals;
  gcc_status st = GCC_OK;
  for (int p = 0; p < n_vals && st == GCC_OK; p++) {
    if (c->g->values[p].kind != GCC_VALUE_PARAM || !c->wanted[p])
      continue;
    int grad;
    st = total_grad(c, p, &grad, d);
    if (st != GCC_OK || grad < 0)
      continue;
    if (role != GCC_ACCUM_FIRST && accum)
      st = accumulate_grad(c, p, grad, &grad, d);
    if (st == GCC_OK)
      st = make_param_grad(c, p, grad, &grads[n_params], d);
    params[n_params++] = p;
  }
  /* --weight-decay-on matrices: the decayed parameters' updates first, then
   * the others (each in value order), as the session lays the parameters
   * out (runtime/session.c): each kind's updates make one optimizer kernel
   * over consecutive parameters */
  if (opt->decay_matrices_only && st == GCC_OK) {
    int *tmp = malloc((size_t)(n_params ? n_params : 1) * 2 * sizeof *tmp), k = 0;
    if (!tmp)
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
    for (int pass = 0; pass < 2 && tmp; pass++)
      for (int i = 0; i < n_params; i++)
        if (gcc_param_decayed(opt, &c->g->values[params[i]]) == !pass) {
          tmp[k] = params[i];
          tmp[n_params + k++] = grads[i];
        }
    if (tmp) {
      memcpy(params, tmp, (size_t)n_params * sizeof *tmp);
      memcpy(grads, tmp + n_params, (size_t)n_params * sizeof *tmp);
      free(tmp);
    }
  }
  if (role != GCC_ACCUM_LAST) { /* a micro-step before the last: gradients only */
    free(params);
    return st;
  }
  if (st == GCC_OK && opt->clip_grad_norm > 0.0f && opt->kind != GCC_OPT_NONE && n_params > 0)
    st = add_grad_norm(c->g, grads, n_params, opt->clip_grad_norm, &sc, d);
  if (st == GCC_OK && sc.scale >= 0 && n_params > 0)
    st = add_scaler_check(c->g, grads, n_params, &sc, d);
  for (int i = 0; i < n_params && st == GCC_OK && opt->kind != GCC_OPT_NONE; i++)
    st = add_optimizer_node(c->g, opt, params[i], grads[i], &sc, d);
  if (st == GCC_OK && sc.found_inf >= 0)
    st = add_scaler_update(c->g, ls, &sc, d);
  free(params);
  return st;
}

/* 1 when value v must keep its name: a graph output, or the training
 * spec's loss or prediction (the trainer finds them by name). */
static int named_outside(const gcc_graph *g, int v) {
  for (int k = 0; k < g->n_outputs; k++)
    if (g->outputs[k] == v)
      return 1;
  const char *name = g->values[v].name;
  return name && ((g->training.loss && !strcmp(name, g->training.loss)) ||
                  (g->training.prediction && !strcmp(name, g->training.prediction)));
}

/* Removes the nodes whose evaluation form is the identity
 * (gcc_grad_rule.eval_identity: Dropout), their readers reading the node's
 * input instead: in evaluation a Dropout is a copy of its input otherwise
 * (a memmove of the activation on the CPU). */
static gcc_status drop_eval_identities(gcc_graph *g, gcc_diag *d) {
  char *dead = NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    const gcc_grad_rule *rule = gcc_grad_rule_of(n->op);
    if (!rule || !rule->eval_identity || n->n_inputs < 1 || n->n_outputs != 1 || n->inputs[0] < 0 ||
        named_outside(g, n->outputs[0]))
      continue;
    int x = n->inputs[0], y = n->outputs[0];
    if (!dead && !(dead = calloc((size_t)g->n_nodes, 1)))
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
    dead[i] = 1;
    for (int j = 0; j < g->n_nodes; j++)
      for (int k = 0; k < g->nodes[j].n_inputs; k++)
        if (g->nodes[j].inputs[k] == y)
          g->nodes[j].inputs[k] = x;
  }
  if (!dead)
    return GCC_OK;
  gcc_status s = gcc_graph_remove_nodes(g, dead, d);
  free(dead);
  return s;
}

gcc_status gcc_pass_autodiff(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  if (opt->mode != GCC_MODE_TRAIN) { /* the evaluation form of every node that has two */
    for (int i = 0; i < g->n_nodes; i++) {
      const gcc_grad_rule *rule = gcc_grad_rule_of(g->nodes[i].op);
      if (rule && rule->eval)
        GCC_TRY(rule->eval(g, i, d));
    }
    return drop_eval_identities(g, d);
  }
  if (!g->training.present || !g->training.loss)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: training.loss is not set: the model has no loss to train", g->source);
  int loss = gcc_graph_find(g, g->training.loss);
  if (loss < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: training.loss names value '%s', which the graph does not define",
                        g->source, g->training.loss);
  if (g->values[loss].dtype != GCC_DT_FLOAT32 ||
      gcc_shape_numel(&g->values[loss].shape, NULL) != 1) {
    char s[128];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: the loss '%s' must be a float32 scalar, got %s %s", g->source,
                        g->training.loss, gcc_dtype_name(g->values[loss].dtype),
                        gcc_shape_str(&g->values[loss].shape, s, sizeof s));
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_grad_rule *rule = gcc_grad_rule_of(g->nodes[i].op);
    if (rule && rule->train)
      GCC_TRY(rule->train(g, i, d));
  }
  gcc_grad_ctx c = {0};
  c.g = g;
  c.fwd = -1;
  gcc_status s = differentiate(&c, loss, opt, d);
  if (s == GCC_OK && c.dead) { /* the SliceGrads concat_slices replaced */
    char *dead = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
    if (!dead)
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (autodiff)");
    for (int i = 0; dead && i < g->n_nodes && i < c.dead_cap; i++)
      dead[i] = c.dead[i];
    if (dead)
      s = gcc_graph_remove_nodes(g, dead, d);
    free(dead);
  }
  ctx_free(&c);
  if (s != GCC_OK)
    return s;
  return gcc_graph_toposort(g, d);
}
