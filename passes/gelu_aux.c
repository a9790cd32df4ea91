/*
 * gelu_aux.c - the gelu-aux lowering (passes.h): where the target runs
 * GeluAux (the CPU), a training graph's
 *
 *   Y  = Gelu(X)                     forward
 *   dX = GeluGrad(dY, X)             backward (autodiff's rule), one or more
 *
 * becomes
 *
 *   Y, D = GeluAux(X)                D = GeluGrad(1, X), the derivative
 *   dX   = Mul(dY, D)
 *
 * cuBLASLt's GELU_AUX idea on the CPU: the forward computes Phi(x) for Y
 * anyway, and phi(x) is its exp times a constant, while GeluGrad recomputed
 * both (the erfc polynomial, a division and an exp per element); the
 * backward becomes a product. The bits are GeluGrad's: GeluAux's D is the
 * factor GeluGrad multiplies dY by, computed by the same operations
 * (runtime/cpu/cpu_math.c), rounded to float there too. X stays read by
 * whatever else reads it; the backward no longer does, so a pre-activation
 * read by Gelu and GeluGrad only dies after the forward (D takes its place).
 * Every GeluGrad must read the Gelu's X as its X, have the Gelu's
 * `approximate` and run on the Gelu's device; the Gelu must be float32.
 * GCC_CPU_GELU_AUX=0 in the environment, or gcc_options.no_gelu_aux, turns
 * the pass off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/passes.h"

/* What each op is to the matcher (the pass's own table keyed by the op enum). */
enum { R_NONE = 0, R_GELU, R_GELU_GRAD };
static const unsigned char kRole[GCC_OP_COUNT] = {
    [GCC_OP_GELU] = R_GELU,
    [GCC_OP_GELU_GRAD] = R_GELU_GRAD,
};

static int env_off(void) {
  const char *e = getenv("GCC_CPU_GELU_AUX");
  return e && strcmp(e, "0") == 0;
}

/* The GeluGrad readers of Gelu node f's X (0 if some GeluGrad reading X
 * differs from the Gelu: another approximation, another device, X as dY). */
static int grads_of(const gcc_graph *g, int f, int *grads, int cap) {
  const gcc_node *n = &g->nodes[f];
  const int x = n->inputs[0];
  const gcc_value *xv = &g->values[x];
  int k = 0;
  for (int i = 0; i < xv->n_consumers; i++) {
    const int c = xv->consumers[i];
    if (kRole[g->nodes[c].op] != R_GELU_GRAD)
      continue;
    const gcc_node *gr = &g->nodes[c];
    if (gr->n_inputs != 2 || gr->inputs[1] != x || gr->inputs[0] == x || gr->device != n->device ||
        gcc_gelu_is_tanh(gr) != gcc_gelu_is_tanh(n) || k == cap)
      return 0;
    int seen = 0;
    for (int j = 0; j < k; j++)
      seen |= grads[j] == c;
    if (!seen)
      grads[k++] = c;
  }
  return k;
}

static gcc_status rewrite(gcc_graph *g, int f, const int *grads, int n_grads, gcc_diag *d) {
  char base[256];
  snprintf(base, sizeof base, "%s/dgelu", g->nodes[f].name ? g->nodes[f].name : "gelu");
  int dv;
  GCC_TRY(gcc_graph_add_temp(g, base, GCC_VALUE_ACTIVATION, &dv, d));
  gcc_node *n = &g->nodes[f];
  int *o2 = malloc(2 * sizeof *o2);
  if (!o2)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (gelu-aux pass)");
  o2[0] = n->outputs[0];
  o2[1] = dv;
  free(n->outputs);
  n->outputs = o2;
  n->n_outputs = 2;
  n->op = GCC_OP_GELU_AUX;
  g->values[dv].producer = f;
  GCC_TRY(gcc_op_resolve_attrs(g, f, d));
  GCC_TRY(gcc_op(GCC_OP_GELU_AUX)->shape(g, f, d));
  for (int k = 0; k < n_grads; k++) {
    gcc_node *gr = &g->nodes[grads[k]];
    gr->inputs[1] = dv; /* Mul(dY, D) */
    gr->op = GCC_OP_MUL;
    gcc_node_clear_attrs(g, grads[k]);
    GCC_TRY(gcc_op_resolve_attrs(g, grads[k], d));
    GCC_TRY(gcc_op(GCC_OP_MUL)->shape(g, grads[k], d));
  }
  return GCC_OK;
}

gcc_status gcc_pass_gelu_aux(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  if (!opt || !opt->target || opt->no_gelu_aux || env_off())
    return GCC_OK;
  GCC_TRY(gcc_graph_link(g, d));
  enum { MAX_GRADS = 8 };
  int changed = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    if (kRole[n->op] != R_GELU || n->n_inputs != 1 || n->n_outputs != 1 ||
        !opt->target->supports_op(n->device, GCC_OP_GELU_AUX) ||
        g->values[n->inputs[0]].dtype != GCC_DT_FLOAT32)
      continue;
    int grads[MAX_GRADS];
    const int k = grads_of(g, i, grads, MAX_GRADS);
    if (k == 0)
      continue;
    GCC_TRY(rewrite(g, i, grads, k, d));
    changed = 1;
  }
  return changed ? gcc_graph_link(g, d) : GCC_OK;
}
