/*
 * compile.c - the passes for this build's target, then memory planning
 * (compile.h).
 */
#include "runtime/compile.h"

#include <stdlib.h>
#include <string.h>

#include "codegen/fusion.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"

static int supports_op(int device, int op) {
  return GCC_DEV_IS_CUDA(device) ? gcc_cuda_supports_op(op) : gcc_cpu_supports_op(op);
}

/* packed-attention, gelu-aux and layer-norm-grad before fusion: they
 * rewrite nodes that fusion's groups would otherwise index */
static const gcc_pass kLowering[] = {{"packed-attention", gcc_pass_packed_attention},
                                     {"gelu-aux", gcc_pass_gelu_aux},
                                     {"layer-norm-grad", gcc_pass_layer_norm_grad},
                                     {"fusion", gcc_pass_fusion}};

static const gcc_target kTarget = {.supports_op = supports_op,
                                   .lower = kLowering,
                                   .n_lower = (int)(sizeof kLowering / sizeof kLowering[0]),
                                   .layout_class = gcc_cuda_layout_class};

const gcc_target *gcc_default_target(void) {
  return &kTarget;
}

/* The values read after a step: they must outlive it. The host reads the
 * loss and the prediction of a training model, or the graph outputs of an
 * inference graph (no training spec: an exported bundle's logits and
 * probabilities), or, where they live on a GPU, their copies to the host
 * (copy insertion's "<value>@cpu"): those are kept too, or a value computed
 * after them (the other host copy, in eval) could reuse their bytes before
 * the host reads them. `keep` has room for 2 * (2 + g->n_outputs). */
static int keep_values(const gcc_graph *g, int *keep) {
  int n = 0;
  for (int j = 0; j < 2 + g->n_outputs; j++) {
    int v = -1;
    if (j < 2 && g->training.present) {
      const char *name = j == 0 ? g->training.loss : g->training.prediction;
      v = name ? gcc_graph_find(g, name) : -1;
    } else if (j >= 2 && !g->training.present) {
      v = g->outputs[j - 2];
    }
    if (v < 0)
      continue;
    keep[n++] = v;
    for (int i = 0; i < g->n_nodes; i++) {
      const gcc_node *c = &g->nodes[i];
      if ((gcc_op(c->op)->flags & GCC_OPF_COPY) && c->inputs[0] == v && c->device == GCC_DEV_CPU) {
        keep[n++] = c->outputs[0];
        break;
      }
    }
  }
  return n;
}

gcc_status gcc_compile_graph(const gcc_graph *model, const gcc_options *opt, gcc_graph **out,
                             gcc_mem_plan *mem, gcc_diag *d) {
  *out = NULL;
  memset(mem, 0, sizeof *mem);
  gcc_graph *g;
  /* The parameters' data stays the model's: the passes read it where they
   * fold a value, and the plan binds every parameter to storage of its own
   * (runtime/plan.h), so the compiled graph keeps none (a copy per plan
   * was 498 MB of host memory for GPT-2 124M, each of its plans) */
  GCC_TRY(gcc_graph_clone_borrowing_params(model, &g, d));
  gcc_options o = *opt;
  if (!o.target)
    o.target = gcc_default_target();
  gcc_status s = gcc_run_passes(g, &o, d);
  gcc_graph_drop_param_data(g);
  int *keep = malloc((size_t)(2 * (2 + g->n_outputs)) * sizeof *keep);
  if (s == GCC_OK && !keep)
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
  if (s == GCC_OK)
    s = gcc_plan_memory(g, keep, keep_values(g, keep), gcc_cpu_workspace, mem, d);
  free(keep);
  if (s != GCC_OK) {
    gcc_graph_free(g);
    return s;
  }
  *out = g;
  return GCC_OK;
}
