/*
 * layer_norm_grad.c - the LayerNorm-backward lowering (passes.h): where the
 * target runs LayerNormGradAll (the CPU), the LayerNormGrad nodes autodiff
 * makes for one LayerNormalization (output 0 dX, 1 dScale, 2 dB; each
 * reading dY and X again and recomputing the rows' statistics) become one
 * LayerNormGradAll node that reads dY and X once (PyTorch's
 * native_layer_norm_backward with its output mask):
 *
 *   dX     = LayerNormGrad(dY, X, Scale, output 0)
 *   dScale = LayerNormGrad(dY, X, Scale, output 1)      (any of the three
 *   dB     = LayerNormGrad(dY, X, Scale, output 2)       may be missing)
 *
 * becomes dX, dScale, dB = LayerNormGradAll(dY, X, Scale) with `outputs`
 * naming those present (bits 1, 2, 4), every reader kept. The nodes grouped
 * share dY, X, Scale, axis, epsilon, device and phase, and a group needs
 * two of them (one alone is left as it is; a second node of the same
 * output, which autodiff never makes, too). The group's first node becomes
 * LayerNormGradAll, keeping its name, phase and device: it comes before
 * every reader of the three outputs, and its inputs are the group's.
 *
 * The residual form: in a pre-LN Transformer the residual stream's gradient
 * is summed with LayerNorm's dX (d x = d x' + ln's dX, autodiff's
 * `grad_sum` Add). Where dX is read by one Add only,
 *
 *   S = Add(dX, R)   (or Add(R, dX); dX, R and S float32 of one shape)
 *
 * and dX is nothing the caller sees (not the loss, the prediction or a
 * graph output), R is LayerNormGradAll's fourth input and S its dX output:
 * the Add goes (Add's bits: dX rounded to float32, then + R). R must be
 * ready before the group's first node (autodiff makes d x' before the
 * LayerNorm's backward); the Add must share the group's device and phase.
 * A lone LayerNormGrad (dX only) with such an Add becomes LayerNormGradAll
 * too. GCC_CPU_LN_GRAD_RESIDUAL=0, or gcc_options.no_ln_grad_residual,
 * keeps the Adds.
 *
 * GCC_CPU_LN_GRAD_ALL=0 in the environment, or gcc_options.no_ln_grad_all,
 * turns the pass off.
 */
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "graph/util.h"
#include "passes/passes.h"

/* What each op is to the matcher (the pass's own table keyed by the op enum). */
enum { R_NONE = 0, R_LN_GRAD, R_ADD };
static const unsigned char kRole[GCC_OP_COUNT] = {
    [GCC_OP_LAYER_NORM_GRAD] = R_LN_GRAD,
    [GCC_OP_ADD] = R_ADD,
};

static int role_of(const gcc_graph *g, int node) {
  return node >= 0 ? kRole[g->nodes[node].op] : R_NONE;
}

/* Nodes a and b are LayerNormGrad of the same LayerNormalization. */
static int same_layer_norm(const gcc_graph *g, int a, int b) {
  const gcc_node *x = &g->nodes[a], *y = &g->nodes[b];
  if (role_of(g, b) != R_LN_GRAD || x->n_inputs != 3 || y->n_inputs != 3)
    return 0;
  for (int k = 0; k < 3; k++)
    if (x->inputs[k] != y->inputs[k])
      return 0;
  return x->av[LN_GRAD_AXIS].i == y->av[LN_GRAD_AXIS].i &&
         x->av[LN_GRAD_EPSILON].f == y->av[LN_GRAD_EPSILON].f && x->device == y->device &&
         x->phase == y->phase;
}

/* The Add that sums node first's dX (value v) with the residual gradient
 * R, or -1 (*r: R). */
static int residual_add(const gcc_graph *g, const int *seen, const char *dead, int first, int v,
                        int *r) {
  const gcc_value *x = &g->values[v];
  for (int k = 0; k < 2; k++)
    if (seen[k] == v)
      return -1;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v)
      return -1;
  if (x->n_consumers != 1 || x->dtype != GCC_DT_FLOAT32)
    return -1;
  const int a = x->consumers[0];
  const gcc_node *n = &g->nodes[a], *f = &g->nodes[first];
  if (role_of(g, a) != R_ADD || dead[a] || n->n_inputs != 2 || n->n_outputs != 1 || a <= first ||
      n->device != f->device || n->phase != f->phase)
    return -1;
  const int other = n->inputs[0] == v ? n->inputs[1] : n->inputs[0];
  if (other < 0 || other == v || (n->inputs[0] != v && n->inputs[1] != v))
    return -1;
  const gcc_value *o = &g->values[other], *s = &g->values[n->outputs[0]];
  if (o->dtype != GCC_DT_FLOAT32 || s->dtype != GCC_DT_FLOAT32 ||
      !gcc_shape_equal(&o->shape, &x->shape) || !gcc_shape_equal(&s->shape, &x->shape))
    return -1;
  if (o->producer >= first)
    return -1; /* R not ready where the group's first node runs */
  *r = other;
  return a;
}

/* Renames node's attribute "output" (LayerNormGrad's) to "outputs" and sets
 * it to mask (LayerNormGradAll's); adds it when the node had none. */
static gcc_status set_mask(gcc_graph *g, int node, int64_t mask, gcc_diag *d) {
  gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_attrs; k++)
    if (strcmp(n->attrs[k].name, "output") == 0) {
      char *nm = gcc_strdup("outputs");
      if (!nm)
        return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (layer-norm-grad pass)");
      free(n->attrs[k].name);
      n->attrs[k].name = nm;
    }
  if (gcc_node_set_int(g, node, "outputs", mask) != GCC_OK)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (layer-norm-grad pass)");
  return GCC_OK;
}

/* Makes node `first` the group's LayerNormGradAll: outputs slot[k]'s
 * output for each k with slot[k] >= 0, in order; the others dead. With
 * add >= 0 (the residual Add, R its other input), R is the fourth input,
 * the Add's output is dX, and the Add is dead. */
static gcc_status rewrite(gcc_graph *g, int first, const int *slot, int add, int r, char *dead,
                          gcc_diag *d) {
  int out[3], n_out = 0;
  int64_t mask = 0;
  for (int k = 0; k < 3; k++)
    if (slot[k] >= 0) {
      out[n_out++] = k == 0 && add >= 0 ? g->nodes[add].outputs[0] : g->nodes[slot[k]].outputs[0];
      mask |= (int64_t)1 << k;
      if (slot[k] != first)
        dead[slot[k]] = 1;
    }
  gcc_node *n = &g->nodes[first];
  int *o2 = malloc((size_t)n_out * sizeof *o2), *i2 = malloc(4 * sizeof *i2);
  if (!o2 || !i2) {
    free(o2);
    free(i2);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (layer-norm-grad pass)");
  }
  memcpy(o2, out, (size_t)n_out * sizeof *o2);
  free(n->outputs);
  n->outputs = o2;
  n->n_outputs = n_out;
  memcpy(i2, n->inputs, 3 * sizeof *i2);
  i2[LN_GRAD_ALL_IN_R] = r;
  free(n->inputs);
  n->inputs = i2;
  n->n_inputs = add >= 0 ? 4 : 3;
  if (add >= 0)
    dead[add] = 1;
  for (int k = 0; k < n_out; k++)
    g->values[out[k]].producer = first;
  n->op = GCC_OP_LAYER_NORM_GRAD_ALL;
  GCC_TRY(set_mask(g, first, mask, d));
  GCC_TRY(gcc_op_resolve_attrs(g, first, d));
  return gcc_op(GCC_OP_LAYER_NORM_GRAD_ALL)->shape(g, first, d);
}

static int env_off(const char *name) {
  const char *e = getenv(name);
  return e && strcmp(e, "0") == 0;
}

gcc_status gcc_pass_layer_norm_grad(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  if (!opt || !opt->target || opt->no_ln_grad_all || env_off("GCC_CPU_LN_GRAD_ALL"))
    return GCC_OK;
  GCC_TRY(gcc_graph_link(g, d));
  /* values the caller sees: the loss and the prediction */
  int seen[2] = {-1, -1};
  if (g->training.present) {
    seen[0] = g->training.loss ? gcc_graph_find(g, g->training.loss) : -1;
    seen[1] = g->training.prediction ? gcc_graph_find(g, g->training.prediction) : -1;
  }
  char *dead = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
  char *done = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
  if (!dead || !done) {
    free(dead);
    free(done);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (layer-norm-grad pass)");
  }
  int n = 0;
  gcc_status s = GCC_OK;
  for (int i = 0; i < g->n_nodes && s == GCC_OK; i++) {
    const gcc_node *a = &g->nodes[i];
    if (done[i] || role_of(g, i) != R_LN_GRAD || a->n_inputs != 3 || a->n_outputs != 1 ||
        !opt->target->supports_op(a->device, GCC_OP_LAYER_NORM_GRAD_ALL))
      continue;
    /* the group: LayerNormGrad readers of dY (i the first in node order);
     * one node per output, the first of each */
    int slot[3] = {-1, -1, -1}, members = 0;
    const gcc_value *dy = &g->values[a->inputs[0]];
    for (int c = 0; c < dy->n_consumers; c++) {
      const int j = dy->consumers[c];
      if (j < i || done[j] || !same_layer_norm(g, i, j) || g->nodes[j].n_outputs != 1)
        continue;
      const int64_t k = g->nodes[j].av[LN_GRAD_OUTPUT].i;
      if (k < 0 || k > 2 || (slot[k] >= 0 && slot[k] < j))
        continue;
      members += slot[k] < 0;
      slot[k] = j;
    }
    /* i is its output's first node (earlier ones are skipped above) */
    int has_i = 0;
    for (int k = 0; k < 3; k++)
      has_i |= slot[k] == i;
    int r = -1, add = -1;
    if (slot[0] >= 0 && !opt->no_ln_grad_residual && !env_off("GCC_CPU_LN_GRAD_RESIDUAL"))
      add = residual_add(g, seen, dead, i, g->nodes[slot[0]].outputs[0], &r);
    if (!has_i || members + (add >= 0) < 2)
      continue;
    for (int k = 0; k < 3; k++)
      if (slot[k] >= 0)
        done[slot[k]] = 1;
    s = rewrite(g, i, slot, add, r, dead, d);
    n++;
  }
  if (s == GCC_OK && n > 0)
    s = gcc_graph_remove_nodes(g, dead, d);
  free(dead);
  free(done);
  return s;
}
