/*
 * placement.c - device placement and copy insertion.
 *
 * Placement decides where every node runs and why (like ggml's backend
 * scheduler, which records a cause for each assignment); copy insertion
 * then makes every cross-device edge an explicit Copy node, so the plan
 * shows each host-device transfer instead of discovering it at run time
 * ("Expected all tensors to be on the same device").
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/passes.h"
#include "graph/util.h"

const char *gcc_placement_reason_name(int reason) {
  static const char *const names[] = {
      "default device",
      "requested (--device)",
      "pinned in the model",
      "no kernel on the requested device (soft placement)",
      "shape/index computation kept on the host",
      "view follows its input",
      "with its parameter",
      "copy destination",
      "with its gradients",
      "layout conversion, where its value lives",
  };
  _Static_assert(sizeof names / sizeof names[0] == GCC_PLACEMENT_REASON_COUNT, "reasons");
  if (reason < 0 || reason >= GCC_PLACEMENT_REASON_COUNT)
    return "?";
  return names[reason];
}

/* "cpu" -> GCC_DEV_CPU, "cuda" -> cuda:0, "cuda:N"; -1 if not a device. */
static int parse_pin(const char *s) {
  if (strcmp(s, "cpu") == 0)
    return GCC_DEV_CPU;
  if (strcmp(s, "cuda") == 0)
    return GCC_DEV_CUDA(0);
  int64_t n;
  if (strncmp(s, "cuda:", 5) == 0 && s[5] && gcc_parse_i64(s + 5, 0, 4095, &n))
    return GCC_DEV_CUDA((int)n);
  return -1;
}

static int is_integer(gcc_dtype t) {
  return t == GCC_DT_INT64 || t == GCC_DT_INT32;
}

/* Integer values are computed on the host: a node whose outputs are all
 * integers, or all integers or bool with an integer input (a comparison
 * of int64 values, a Cast of int64 to bool: generated kernels compute in
 * float, which is not exact for integers above 2^24). */
static int all_outputs_integer(const gcc_graph *g, const gcc_node *n) {
  if (n->n_outputs == 0)
    return 0;
  int any_bool = 0, int_input = 0;
  for (int k = 0; k < n->n_outputs; k++) {
    gcc_dtype t = g->values[n->outputs[k]].dtype;
    if (t == GCC_DT_BOOL)
      any_bool = 1;
    else if (!is_integer(t))
      return 0;
  }
  for (int k = 0; k < n->n_inputs; k++)
    int_input |= n->inputs[k] >= 0 && is_integer(g->values[n->inputs[k]].dtype);
  return !any_bool || int_input;
}

/* The backend's answer (opt->target->supports_op), unless the caller
 * disabled the op on CUDA devices (opt->cuda_disabled). */
static int device_has_kernel(const gcc_options *opt, int op_id, int dev) {
  if (GCC_DEV_IS_CUDA(dev) && opt->cuda_disabled && opt->cuda_disabled[op_id])
    return 0;
  return opt->target->supports_op(dev, op_id);
}

/* 1 if value `v` is parameter `p`'s 16-bit copy (its update's output) */
static int is_copy_of(const gcc_graph *g, int v, int p) {
  return g->values[v].kind == GCC_VALUE_OPT_STATE && g->values[v].param_of == p &&
         g->values[v].dtype != GCC_DT_FLOAT32;
}

gcc_status gcc_pass_placement(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  char desc[600], a[32], b[32];
  int requested = opt->device >= 0 ? opt->device : GCC_DEV_CPU;
  for (int v = 0; v < g->n_values; v++)
    g->values[v].device = -1;
  for (int i = 0; i < g->n_inputs; i++)
    g->values[g->inputs[i]].device = GCC_DEV_CPU; /* the data loader fills host buffers */

  for (int i = 0; i < g->n_nodes; i++) {
    gcc_node *n = &g->nodes[i];
    const gcc_op_desc *op = gcc_op(n->op);
    if (op->flags & GCC_OPF_OPTIMIZER)
      continue; /* after the parameters have homes */
    int dev = requested;
    int reason = opt->device_explicit ? GCC_PLACED_REQUESTED : GCC_PLACED_DEFAULT;
    if (n->pin && *n->pin) {
      dev = parse_pin(n->pin);
      if (dev < 0)
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: device pin '%s' is not a device",
                            g->source, gcc_node_desc(g, i, desc, sizeof desc), n->pin);
      if (GCC_DEV_IS_CUDA(dev) && GCC_DEV_CUDA_INDEX(dev) >= opt->n_cuda_devices)
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: %s is pinned to %s, but the target has %d CUDA device(s)",
                            g->source, gcc_node_desc(g, i, desc, sizeof desc), n->pin,
                            opt->n_cuda_devices);
      reason = GCC_PLACED_PINNED;
    } else if ((op->flags & GCC_OPF_ALIAS) && n->inputs[0] >= 0 &&
               g->values[n->inputs[0]].producer >= 0 && g->values[n->inputs[0]].device >= 0) {
      /* a view of an activation stays where the activation is; a view of
       * a graph input or parameter goes where its consumers are asked to */
      dev = g->values[n->inputs[0]].device;
      reason = GCC_PLACED_FOLLOWS_INPUT;
    } else if ((op->flags & GCC_OPF_COLLECTIVE) && n->n_inputs > 0 && n->inputs[0] >= 0 &&
               g->values[n->inputs[0]].device >= 0) {
      /* an all-reduce sums its gradients where they are */
      dev = g->values[n->inputs[0]].device;
      reason = GCC_PLACED_WITH_GRADIENTS;
    } else if (all_outputs_integer(g, n) && !(op->flags & GCC_OPF_ALIAS) &&
               !((op->flags & GCC_OPF_INDEX_OF_FLOAT) && n->inputs[0] >= 0 &&
                 gcc_dtype_is_float(g->values[n->inputs[0]].dtype))) {
      /* (an integer view of a graph input goes where its consumers are asked
       * to, as above: the targets of a sequence loss, (B, T) viewed as
       * (B*T), are copied once and viewed on the device) */
      dev = GCC_DEV_CPU;
      reason = GCC_PLACED_HOST_COMPUTE;
    }
    if (!device_has_kernel(opt, n->op, dev)) {
      if (opt->strict_placement)
        return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                            "%s: %s has no implementation on %s; without --strict-placement it "
                            "would run on cpu (placement: %s)",
                            g->source, gcc_node_desc(g, i, desc, sizeof desc),
                            gcc_dev_name(dev, a, sizeof a), gcc_placement_reason_name(reason));
      dev = GCC_DEV_CPU;
      reason = GCC_PLACED_NO_KERNEL;
    }
    n->device = dev;
    n->reason = reason;
    for (int k = 0; k < n->n_outputs; k++)
      g->values[n->outputs[k]].device = dev;
  }

  /* parameters and constants live where their first consumer (or the first
   * reader of their 16-bit copy) runs (and the graph's own state, fp16 loss
   * scaling's, unless an update takes it home with its parameter below) */
  for (int v = 0; v < g->n_values; v++) {
    gcc_value *val = &g->values[v];
    if (val->kind != GCC_VALUE_PARAM && val->kind != GCC_VALUE_CONST &&
        !(val->kind == GCC_VALUE_OPT_STATE && val->param_of < 0) &&
        !(val->kind == GCC_VALUE_GRAD && val->producer < 0)) /* accumulated so far */
      continue;
    for (int i = 0; i < g->n_nodes && val->device < 0; i++) {
      const gcc_node *n = &g->nodes[i];
      if (gcc_op(n->op)->flags & GCC_OPF_OPTIMIZER)
        continue;
      for (int k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] == v || (n->inputs[k] >= 0 && is_copy_of(g, n->inputs[k], v))) {
          val->device = n->device;
          break;
        }
    }
    if (val->device < 0)
      val->device = GCC_DEV_CPU;
  }
  /* optimizer updates (and their state) with their parameter */
  for (int i = 0; i < g->n_nodes; i++) {
    gcc_node *n = &g->nodes[i];
    if (!(gcc_op(n->op)->flags & GCC_OPF_OPTIMIZER))
      continue;
    int home = g->values[n->inputs[0]].device;
    if (n->pin && *n->pin && parse_pin(n->pin) != home)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: %s is pinned to %s but its parameter '%s' lives on %s", g->source,
                          gcc_node_desc(g, i, desc, sizeof desc), n->pin,
                          g->values[n->inputs[0]].name, gcc_dev_name(home, b, sizeof b));
    n->device = home;
    n->reason = GCC_PLACED_WITH_PARAMETER;
    for (int k = 2; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0)
        g->values[n->inputs[k]].device = home; /* momentum / Adam moments */
    for (int k = 0; k < n->n_outputs; k++)
      g->values[n->outputs[k]].device = home; /* the 16-bit copy */
  }
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].device < 0)
      g->values[v].device = GCC_DEV_CPU; /* unreferenced leftovers */
  return GCC_OK;
}

/* ---- copy insertion --------------------------------------------------- */

typedef struct copy_key {
  int value, device, copy;
} copy_key;

static gcc_status add_copy(gcc_graph *g, int v, int dev, int once, copy_key **keys, int *n_keys,
                           int *out, gcc_diag *d) {
  for (int i = 0; i < *n_keys; i++)
    if ((*keys)[i].value == v && (*keys)[i].device == dev) {
      *out = (*keys)[i].copy;
      return GCC_OK;
    }
  char name[512], dn[32];
  snprintf(name, sizeof name, "%s@%s", g->values[v].name, gcc_dev_name(dev, dn, sizeof dn));
  int c, node;
  GCC_TRY(gcc_graph_add_value(g, name, g->values[v].dtype, &g->values[v].shape,
                              GCC_VALUE_ACTIVATION, NULL, 0, &c, d));
  g->values[c].device = dev;
  GCC_TRY(gcc_graph_add_node(g, name, GCC_OP_COPY, &v, 1, &c, 1, &node, d));
  if (once)
    GCC_TRY(gcc_node_set_int(g, node, "once", 1));
  GCC_TRY(gcc_op_resolve_attrs(g, node, d));
  gcc_node *n = &g->nodes[node];
  n->device = dev;
  n->reason = GCC_PLACED_COPY_DESTINATION;
  n->phase = g->values[v].producer >= 0 ? g->nodes[g->values[v].producer].phase : GCC_PHASE_FORWARD;
  copy_key *nk = realloc(*keys, (size_t)(*n_keys + 1) * sizeof *nk);
  if (!nk)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (copy insertion)");
  *keys = nk;
  nk[*n_keys].value = v;
  nk[*n_keys].device = dev;
  nk[*n_keys].copy = c;
  (*n_keys)++;
  *out = c;
  return GCC_OK;
}

gcc_status gcc_pass_copy_insertion(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  copy_key *keys = NULL;
  int n_keys = 0, n_nodes = g->n_nodes;
  gcc_status s = GCC_OK;
  FILE *warn = opt->warn_file ? opt->warn_file : stderr;
  for (int i = 0; i < n_nodes && s == GCC_OK; i++) {
    int dst = g->nodes[i].device;
    for (int k = 0; k < g->nodes[i].n_inputs && s == GCC_OK; k++) {
      int v = g->nodes[i].inputs[k];
      if (v < 0 || g->values[v].device == dst)
        continue;
      int c = -1, once = g->values[v].kind == GCC_VALUE_CONST, before = n_keys;
      s = add_copy(g, v, dst, once, &keys, &n_keys, &c, d);
      if (s != GCC_OK)
        break;
      int prod = g->values[v].producer;
      if (n_keys > before && prod >= 0 && g->values[v].kind == GCC_VALUE_ACTIVATION &&
          g->nodes[prod].device >= 0) {
        char a[32], b[32];
        fprintf(warn,
                "gcc-train: warning: value '%s' crosses %s -> %s inside the step: node '%s' (%s) "
                "runs on %s (%s) and node '%s' (%s) on %s (%s)\n",
                g->values[v].name, gcc_dev_name(g->values[v].device, a, sizeof a),
                gcc_dev_name(dst, b, sizeof b), g->nodes[prod].name, gcc_op_name(g->nodes[prod].op),
                a, gcc_placement_reason_name(g->nodes[prod].reason), g->nodes[i].name,
                gcc_op_name(g->nodes[i].op), b, gcc_placement_reason_name(g->nodes[i].reason));
      }
      g->nodes[i].inputs[k] = c;
    }
  }
  /* values the host reads after a step: the graph outputs of an inference
   * graph (no training spec; an exported bundle's logits and probabilities) */
  for (int j = 0; s == GCC_OK && !g->training.present && j < g->n_outputs; j++) {
    int v = g->outputs[j];
    if (g->values[v].device != GCC_DEV_CPU && g->values[v].producer >= 0) {
      int c;
      s = add_copy(g, v, GCC_DEV_CPU, 0, &keys, &n_keys, &c, d);
    }
  }
  /* ... and the loss and prediction of a training model */
  if (s == GCC_OK && g->training.present) {
    const char *names[2] = {g->training.loss,
                            opt->mode == GCC_MODE_EVAL ? g->training.prediction : NULL};
    for (int j = 0; j < 2 && s == GCC_OK; j++) {
      int v = names[j] ? gcc_graph_find(g, names[j]) : -1;
      if (v >= 0 && g->values[v].device != GCC_DEV_CPU) {
        int c;
        s = add_copy(g, v, GCC_DEV_CPU, 0, &keys, &n_keys, &c, d);
      }
    }
  }
  free(keys);
  if (s != GCC_OK)
    return s;
  return gcc_graph_toposort(g, d);
}
