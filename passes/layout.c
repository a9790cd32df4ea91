/*
 * layout.c - the layout pass: convolution chains on CUDA devices in NHWC
 * (channels-last), with explicit conversions at the chains' boundaries
 * (see passes.h gcc_pass_layout and graph/ir.h gcc_layout).
 *
 * Which node can run NHWC is the target's answer (gcc_target.layout_class:
 * the CUDA lowering table, codegen/lowering.c), so this file has no op
 * table. Decisions are made in topological order: a node of class NHWC
 * (cuDNN's convolutions and poolings) runs NHWC; a node of class ANY
 * (elementwise over equal shapes: Relu, ReluGrad, Add, ...) follows an NHWC
 * input, so the chain conv -> relu -> conv stays NHWC and the backward
 * chain (ConvGradData -> ReluGrad -> ConvGradData) too; everything else
 * (BatchNormalization, Flatten, Gemm, CPU nodes, copies) reads NCHW.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/passes.h"

static const char *const kChoiceNames[GCC_LAYOUT_CHOICE_COUNT] = {"auto", "nchw", "nhwc"};

const char *gcc_layout_choice_name(int c) {
  return (unsigned)c < GCC_LAYOUT_CHOICE_COUNT ? kChoiceNames[c] : "?";
}

int gcc_layout_choice_lookup(const char *name) {
  for (int i = 0; name && i < GCC_LAYOUT_CHOICE_COUNT; i++)
    if (strcmp(name, kChoiceNames[i]) == 0)
      return i;
  return -1;
}

int gcc_layout_wants_nhwc(const gcc_options *opt) {
  if (opt->layout == GCC_LAYOUT_CHOOSE_NHWC)
    return 1;
  if (opt->layout == GCC_LAYOUT_CHOOSE_NCHW)
    return 0;
  return opt->precision == GCC_PRECISION_TF32 || opt->precision == GCC_PRECISION_BF16 ||
         opt->precision == GCC_PRECISION_FP16;
}

int gcc_layout_is_conversion(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  return n->n_inputs == 1 && n->n_outputs == 1 && n->inputs[0] >= 0 && n->outputs[0] >= 0 &&
         g->values[n->inputs[0]].layout != g->values[n->outputs[0]].layout &&
         gcc_shape_equal(&g->values[n->inputs[0]].shape, &g->values[n->outputs[0]].shape);
}

/* The operands a layout applies to: 4-D floating-point values. */
static int laid_out(const gcc_graph *g, int v) {
  return v >= 0 && g->values[v].shape.ndim == 4 && gcc_dtype_is_float(g->values[v].dtype);
}

/* Values the user, the optimizer or a checkpoint sees: NCHW always. */
static int stays_nchw(const gcc_graph *g, int v) {
  const gcc_value *val = &g->values[v];
  if (val->kind != GCC_VALUE_ACTIVATION)
    return 1;
  for (int j = 0; j < g->n_outputs; j++)
    if (g->outputs[j] == v)
      return 1;
  const char *names[2] = {g->training.loss, g->training.prediction};
  for (int j = 0; g->training.present && j < 2; j++)
    if (names[j] && strcmp(names[j], val->name) == 0)
      return 1;
  return 0;
}

typedef struct conv_key {
  int value, layout, out;
} conv_key;

/* Where a conversion goes in the schedule: right before node `at` (the
 * first reader of the value it converts) or right after it (the node whose
 * output it converts), so that everything else keeps its order: the
 * optimizer updates' order is the persistent arena's (runtime/session.c). */
typedef struct placed {
  int node, at, after;
} placed;

typedef struct layout_state {
  gcc_graph *g;
  conv_key *keys;
  int n_keys;
  placed *conv;
  int n_conv;
} layout_state;

static gcc_status schedule(layout_state *st, int node, int at, int after, gcc_diag *d) {
  placed *np = realloc(st->conv, (size_t)(st->n_conv + 1) * sizeof *np);
  if (!np)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (layout pass)");
  st->conv = np;
  np[st->n_conv++] = (placed){node, at, after};
  return GCC_OK;
}

/* The node array in the order `schedule` asked for. */
static gcc_status reorder(layout_state *st, int n0, gcc_diag *d) {
  gcc_graph *g = st->g;
  int n = g->n_nodes, m = 0;
  gcc_node *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  if (!order)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (layout pass)");
  for (int i = 0; i < n0; i++) {
    for (int k = 0; k < st->n_conv; k++)
      if (st->conv[k].at == i && !st->conv[k].after)
        order[m++] = g->nodes[st->conv[k].node];
    order[m++] = g->nodes[i];
    for (int k = 0; k < st->n_conv; k++)
      if (st->conv[k].at == i && st->conv[k].after)
        order[m++] = g->nodes[st->conv[k].node];
  }
  if (m != n) {
    free(order);
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "layout pass: %d of %d nodes scheduled", m, n);
  }
  memcpy(g->nodes, order, (size_t)n * sizeof *order);
  free(order);
  return gcc_graph_link(g, d);
}

/* The conversion node `in` -> `out` (same logical shape, out's layout). */
static gcc_status add_conversion(gcc_graph *g, int in, int out, int phase, int *node_out,
                                 gcc_diag *d) {
  static const int64_t kIdentity[4] = {0, 1, 2, 3};
  char name[512];
  snprintf(name, sizeof name, "%s@%s", g->values[in].name, gcc_layout_name(g->values[out].layout));
  int node;
  GCC_TRY(gcc_graph_add_node(g, name, GCC_OP_TRANSPOSE, &in, 1, &out, 1, &node, d));
  GCC_TRY(gcc_node_set_ints(g, node, "perm", kIdentity, 4));
  GCC_TRY(gcc_op_resolve_attrs(g, node, d));
  gcc_node *n = &g->nodes[node];
  n->device = g->values[in].device;
  n->reason = GCC_PLACED_LAYOUT;
  n->phase = phase;
  *node_out = node;
  return GCC_OK;
}

/* The value `v` in `layout`: v itself, or its conversion (one per value
 * and layout). */
static gcc_status converted(layout_state *st, int v, int layout, int reader, int *out,
                            gcc_diag *d) {
  gcc_graph *g = st->g;
  if (g->values[v].layout == layout) {
    *out = v;
    return GCC_OK;
  }
  for (int i = 0; i < st->n_keys; i++)
    if (st->keys[i].value == v && st->keys[i].layout == layout) {
      *out = st->keys[i].out;
      return GCC_OK;
    }
  char name[512];
  snprintf(name, sizeof name, "%s@%s", g->values[v].name, gcc_layout_name(layout));
  int c;
  GCC_TRY(gcc_graph_add_value(g, name, g->values[v].dtype, &g->values[v].shape,
                              GCC_VALUE_ACTIVATION, NULL, 0, &c, d));
  g->values[c].device = g->values[v].device;
  g->values[c].layout = layout;
  int node;
  GCC_TRY(add_conversion(g, v, c, (int)g->nodes[reader].phase, &node, d));
  GCC_TRY(schedule(st, node, reader, 0, d));
  conv_key *nk = realloc(st->keys, (size_t)(st->n_keys + 1) * sizeof *nk);
  if (!nk)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (layout pass)");
  st->keys = nk;
  nk[st->n_keys++] = (conv_key){v, layout, c};
  *out = c;
  return GCC_OK;
}

/* Node `i` writes NHWC: its 4-D float outputs become NHWC; one that must
 * stay NCHW is written as an NHWC temporary "<value>.nhwc" and converted. */
static gcc_status write_nhwc(layout_state *st, int i, gcc_diag *d) {
  gcc_graph *g = st->g;
  for (int k = 0; k < g->nodes[i].n_outputs; k++) {
    int v = g->nodes[i].outputs[k];
    if (!laid_out(g, v))
      continue;
    if (!stays_nchw(g, v)) {
      g->values[v].layout = GCC_LAYOUT_NHWC;
      continue;
    }
    char name[512];
    snprintf(name, sizeof name, "%s.nhwc", g->values[v].name);
    int t;
    GCC_TRY(gcc_graph_add_value(g, name, g->values[v].dtype, &g->values[v].shape,
                                GCC_VALUE_ACTIVATION, NULL, 0, &t, d));
    g->values[t].device = g->values[v].device;
    g->values[t].layout = GCC_LAYOUT_NHWC;
    g->nodes[i].outputs[k] = t; /* producers are set again when the graph is linked */
    int node;
    GCC_TRY(add_conversion(g, t, v, (int)g->nodes[i].phase, &node, d));
    GCC_TRY(schedule(st, node, i, 1, d));
  }
  return GCC_OK;
}

gcc_status gcc_pass_layout(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  const gcc_target *t = opt->target;
  if (!gcc_layout_wants_nhwc(opt) || !t || !t->layout_class)
    return GCC_OK;
  int n0 = g->n_nodes, any = 0;
  unsigned char *nhwc = calloc((size_t)(n0 ? n0 : 1), 1);
  if (!nhwc)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (layout pass)");
  gcc_status s = GCC_OK;
  layout_state st = {g, NULL, 0, NULL, 0};
  /* decisions, in topological order (the graph is sorted) */
  for (int i = 0; i < n0 && s == GCC_OK; i++) {
    const gcc_node *n = &g->nodes[i];
    if (!GCC_DEV_IS_CUDA(n->device))
      continue;
    int cls = t->layout_class(g, i), follows = 0, operands = 0;
    for (int k = 0; k < n->n_inputs; k++)
      if (laid_out(g, n->inputs[k])) {
        operands = 1;
        follows |= g->values[n->inputs[k]].layout == GCC_LAYOUT_NHWC;
      }
    for (int k = 0; k < n->n_outputs; k++)
      operands |= laid_out(g, n->outputs[k]);
    if (!operands || !(cls == GCC_LAYOUT_CLASS_NHWC || (cls == GCC_LAYOUT_CLASS_ANY && follows)))
      continue;
    nhwc[i] = 1;
    any = 1;
    s = write_nhwc(&st, i, d);
  }
  /* conversions of the inputs that arrive in the other layout */
  for (int i = 0; any && i < n0 && s == GCC_OK; i++)
    for (int k = 0; k < g->nodes[i].n_inputs && s == GCC_OK; k++) {
      int v = g->nodes[i].inputs[k], c;
      if (!laid_out(g, v))
        continue;
      s = converted(&st, v, nhwc[i] ? GCC_LAYOUT_NHWC : GCC_LAYOUT_NCHW, i, &c, d);
      if (s == GCC_OK)
        g->nodes[i].inputs[k] = c;
    }
  if (s == GCC_OK && any)
    s = reorder(&st, n0, d);
  free(st.keys);
  free(st.conv);
  free(nhwc);
  return s;
}
