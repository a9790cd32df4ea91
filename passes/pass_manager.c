/*
 * pass_manager.c - runs the passes in order, verifies the IR after each one
 * and dumps it on request (--dump-after=PASS). Also holds the two small
 * pass of shape inference.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/passes.h"

gcc_status gcc_pass_infer(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  GCC_TRY(gcc_graph_bind_batch(g, opt->batch_size, d));
  GCC_TRY(gcc_graph_toposort(g, d));
  GCC_TRY(gcc_infer_shapes(g, d));
  if (opt->mode == GCC_MODE_EVAL && g->training.present) {
    int keep[2], n = 0;
    int loss = g->training.loss ? gcc_graph_find(g, g->training.loss) : -1;
    int pred = g->training.prediction ? gcc_graph_find(g, g->training.prediction) : -1;
    if (loss >= 0)
      keep[n++] = loss;
    if (pred >= 0)
      keep[n++] = pred;
    if (n > 0)
      GCC_TRY(gcc_graph_prune(g, keep, n, d));
  }
  return GCC_OK;
}

gcc_status gcc_verify(const gcc_graph *g, gcc_diag *d) {
  char desc[600];
  int *defined_at = malloc((size_t)(g->n_values ? g->n_values : 1) * sizeof *defined_at);
  int *last_read = malloc((size_t)(g->n_values ? g->n_values : 1) * sizeof *last_read);
  if (!defined_at || !last_read) {
    free(defined_at);
    free(last_read);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (verify)");
  }
  gcc_status s = GCC_OK;
  for (int v = 0; v < g->n_values; v++) {
    gcc_value_kind k = g->values[v].kind;
    /* (a GRAD value without producer is the gradient accumulated by the
     * earlier micro-steps: persistent, read by this step's accumulation) */
    defined_at[v] = k == GCC_VALUE_ACTIVATION || (k == GCC_VALUE_GRAD && g->values[v].producer >= 0)
                        ? INT32_MAX
                        : -1;
    last_read[v] = -1;
  }
  for (int i = 0; i < g->n_nodes && s == GCC_OK; i++) {
    const gcc_node *n = &g->nodes[i];
    if (!gcc_op(n->op)) {
      s = gcc_diag_set(d, GCC_ERR_INTERNAL, "verify: node %d has op id %d", i, n->op);
      break;
    }
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0)
        continue;
      if (v >= g->n_values || defined_at[v] > i) {
        s = gcc_diag_set(d, GCC_ERR_INTERNAL, "verify: %s reads value '%s' before it is defined",
                         gcc_node_desc(g, i, desc, sizeof desc),
                         v < g->n_values ? g->values[v].name : "?");
        break;
      }
      if (g->values[v].dtype == GCC_DT_UNDEFINED) {
        s = gcc_diag_set(d, GCC_ERR_INTERNAL, "verify: %s reads value '%s' of unknown dtype",
                         gcc_node_desc(g, i, desc, sizeof desc), g->values[v].name);
        break;
      }
      if (!(gcc_op(n->op)->flags & GCC_OPF_OPTIMIZER))
        last_read[v] = i;
    }
    for (int k = 0; k < n->n_outputs && s == GCC_OK; k++) {
      int v = n->outputs[k];
      if (gcc_op(n->op)->flags & GCC_OPF_OPTIMIZER) { /* a 16-bit copy for the next step */
        if (g->values[v].kind != GCC_VALUE_OPT_STATE || defined_at[v] != -1) {
          s = gcc_diag_set(d, GCC_ERR_INTERNAL,
                           "verify: %s writes '%s', which is not a parameter copy of its own",
                           gcc_node_desc(g, i, desc, sizeof desc), g->values[v].name);
          break;
        }
        defined_at[v] = -2; /* persistent: read from the start of the step */
        continue;
      }
      if (defined_at[v] != INT32_MAX) {
        s = gcc_diag_set(d, GCC_ERR_INTERNAL, "verify: %s writes value '%s' defined elsewhere",
                         gcc_node_desc(g, i, desc, sizeof desc), g->values[v].name);
        break;
      }
      defined_at[v] = i;
    }
  }
  /* an optimizer update must come after every other reader of its parameter */
  for (int i = 0; i < g->n_nodes && s == GCC_OK; i++) {
    const gcc_node *n = &g->nodes[i];
    if (!(gcc_op(n->op)->flags & GCC_OPF_OPTIMIZER))
      continue;
    for (int k = -1; k < n->n_outputs && s == GCC_OK; k++) { /* the parameter, its copy */
      int p = k < 0 ? n->inputs[0] : n->outputs[k];
      if (last_read[p] > i)
        s = gcc_diag_set(d, GCC_ERR_INTERNAL, "verify: %s updates '%s' before node '%s' reads it",
                         gcc_node_desc(g, i, desc, sizeof desc), g->values[p].name,
                         g->nodes[last_read[p]].name);
    }
  }
  /* an AllReduce must come before every reader of its gradients but their producer */
  for (int i = 0; i < g->n_nodes && s == GCC_OK; i++) {
    const gcc_node *n = &g->nodes[i];
    if (!(gcc_op(n->op)->flags & GCC_OPF_COLLECTIVE))
      continue;
    for (int j = 0; j < i && s == GCC_OK; j++) {
      const gcc_node *r = &g->nodes[j];
      for (int k = 0; k < n->n_inputs && s == GCC_OK; k++) {
        int v = n->inputs[k];
        if (v < 0 || g->values[v].producer == j)
          continue;
        for (int q = 0; q < r->n_inputs; q++)
          if (r->inputs[q] == v) {
            s = gcc_diag_set(d, GCC_ERR_INTERNAL, "verify: node '%s' reads '%s' before %s sums it",
                             r->name, g->values[v].name, gcc_node_desc(g, i, desc, sizeof desc));
            break;
          }
      }
    }
  }
  free(defined_at);
  free(last_read);
  return s;
}

void gcc_dump_graph(const gcc_graph *g, FILE *f) {
  static const char *const phase[] = {"fwd", "bwd", "opt"};
  fprintf(f, "graph %s (%s): %d nodes, %d values\n", g->name, g->source, g->n_nodes, g->n_values);
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    char dev[32];
    fprintf(f, "  %3d %s %-7s %-22s %-24s (", i, phase[n->phase],
            n->device >= 0 ? gcc_dev_name(n->device, dev, sizeof dev) : "-", n->name,
            gcc_op_name(n->op));
    for (int k = 0; k < n->n_inputs; k++)
      fprintf(f, "%s%s", k ? ", " : "", n->inputs[k] >= 0 ? g->values[n->inputs[k]].name : "-");
    fprintf(f, ") -> ");
    for (int k = 0; k < n->n_outputs; k++) {
      char s[128];
      const gcc_value *v = &g->values[n->outputs[k]];
      fprintf(f, "%s%s %s%s%s", k ? ", " : "", v->name, gcc_dtype_name(v->dtype),
              gcc_shape_str(&v->shape, s, sizeof s), v->layout == GCC_LAYOUT_NHWC ? " NHWC" : "");
    }
    if (n->group >= 0)
      fprintf(f, "  [%s]", g->groups[n->group].name);
    fprintf(f, "\n");
  }
}

static const gcc_pass kPasses[] = {
    {"infer", gcc_pass_infer},
    {"attention", gcc_pass_attention},
    {"autodiff", gcc_pass_autodiff},
    {"all-reduce", gcc_pass_all_reduce},
    {"autocast", gcc_pass_autocast},
    {"placement", gcc_pass_placement},
    {"copy-insertion", gcc_pass_copy_insertion},
    {"layout", gcc_pass_layout},
};

gcc_status gcc_check_dump_after(const char *name, const gcc_target *t, gcc_diag *d) {
  if (!name || strcmp(name, "all") == 0)
    return GCC_OK;
  int n_fixed = (int)(sizeof kPasses / sizeof kPasses[0]), n = n_fixed + (t ? t->n_lower : 0);
  char names[512] = "";
  for (int i = 0; i < n; i++) {
    const char *pn = i < n_fixed ? kPasses[i].name : t->lower[i - n_fixed].name;
    if (strcmp(pn, name) == 0)
      return GCC_OK;
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s, ", pn);
  }
  return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--dump-after=%s: no such pass (passes: %sall)",
                      name, names);
}

gcc_status gcc_run_passes(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  const gcc_target *t = opt->target;
  if (!t || !t->supports_op)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: no compilation target (gcc_options.target)", g->source);
  int n_fixed = (int)(sizeof kPasses / sizeof kPasses[0]), n = n_fixed + t->n_lower;
  GCC_TRY(gcc_check_dump_after(opt->dump_after, t, d));
  for (int i = 0; i < n; i++) {
    const gcc_pass *p = i < n_fixed ? &kPasses[i] : &t->lower[i - n_fixed];
    gcc_status s = p->fn(g, opt, d);
    if (s != GCC_OK)
      return s;
    s = gcc_verify(g, d);
    if (s != GCC_OK)
      return gcc_diag_prefix(d, "after pass %s", p->name);
    if (opt->dump_after &&
        (strcmp(opt->dump_after, "all") == 0 || strcmp(opt->dump_after, p->name) == 0)) {
      FILE *f = opt->dump_file ? opt->dump_file : stderr;
      fprintf(f, "; IR after pass %s\n", p->name);
      gcc_dump_graph(g, f);
    }
  }
  return GCC_OK;
}
