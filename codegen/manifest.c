/* manifest.c - the launch manifest of a kernel set (--dump-kernels). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit.h"
#include "codegen/fusion.h"
#include "codegen/lowering.h"
#include "graph/ops.h"

static const char *arg_kind_name(gcc_karg_kind k) {
  static const char *const names[] = {
      "input", "output",     "params",      "grads",      "state0", "state1",
      "numel", "first_step", "step_size",   "bc2_sqrt",   "lr",     "bad_label",
      "i64",   "step",       "flat_inputs", "param_copy", "scratch"};
  _Static_assert(sizeof names / sizeof names[0] == GCC_KARG_KIND_COUNT, "arg kinds");
  return (unsigned)k < GCC_KARG_KIND_COUNT ? names[k] : "?";
}

static json_t *node_names(const gcc_graph *g, const gcc_group *gr) {
  json_t *a = json_array();
  for (int i = 0; i < gr->n_nodes; i++)
    json_array_append_new(a, json_string(g->nodes[gr->nodes[i]].name));
  return a;
}

gcc_status gcc_codegen_manifest(const gcc_graph *g, int device, const char *arch,
                                const gcc_kernel_set *ks, char **json, gcc_diag *d) {
  char dev[32];
  json_t *root = json_object();
  json_object_set_new(root, "schema", json_string("gcc-train.kernels/1"));
  json_object_set_new(root, "model", json_string(g->source));
  json_object_set_new(root, "device", json_string(gcc_dev_name(device, dev, sizeof dev)));
  json_object_set_new(root, "arch", json_string(arch ? arch : ""));
  json_object_set_new(root, "codegen_version", json_integer(GCC_CODEGEN_VERSION));
  json_object_set_new(root, "program", json_string("kernels.cu"));
  json_t *kernels = json_array();
  for (int i = 0; i < ks->n_kernels; i++) {
    const gcc_kernel_info *k = &ks->kernels[i];
    const gcc_group *gr = &g->groups[k->group];
    json_t *kj = json_object();
    json_object_set_new(kj, "name", json_string(k->name));
    json_object_set_new(kj, "kind", json_string(gcc_group_kind_name(gr->kind)));
    json_object_set_new(kj, "nodes", node_names(g, gr));
    json_object_set_new(kj, "grid", json_integer(k->grid_dim));
    json_object_set_new(kj, "block", json_integer(k->block_dim));
    json_object_set_new(kj, "single_block", json_boolean(k->single_block));
    json_object_set_new(kj, "work_items", json_integer(k->work_items));
    if (k->scratch_bytes)
      json_object_set_new(kj, "scratch_bytes", json_integer((json_int_t)k->scratch_bytes));
    json_t *args = json_array();
    for (int a = 0; a < k->n_args; a++) {
      const gcc_kernel_arg *ar = &k->args[a];
      json_t *aj = json_object();
      json_object_set_new(aj, "name", json_string(ar->name));
      json_object_set_new(aj, "kind", json_string(arg_kind_name(ar->kind)));
      if (ar->value >= 0) {
        const gcc_value *v = &g->values[ar->value];
        json_object_set_new(aj, "value", json_string(v->name));
        json_object_set_new(aj, "dtype", json_string(gcc_dtype_name(v->dtype)));
        json_t *shape = json_array();
        for (int q = 0; q < v->shape.ndim; q++)
          json_array_append_new(shape, json_integer(v->shape.dims[q]));
        json_object_set_new(aj, "shape", shape);
      } else {
        json_object_set_new(aj, "value", json_null());
      }
      json_array_append_new(args, aj);
    }
    json_object_set_new(kj, "args", args);
    json_array_append_new(kernels, kj);
  }
  json_object_set_new(root, "kernels", kernels);
  json_t *calls = json_array();
  int launches = ks->n_kernels;
  for (int i = 0; i < g->n_groups; i++) {
    const gcc_group *gr = &g->groups[i];
    if (gr->device != device || (gr->kind != GCC_GROUP_GEMM && gr->kind != GCC_GROUP_CUDNN))
      continue;
    json_t *cj = json_object();
    json_object_set_new(cj, "name", json_string(gr->name));
    if (gr->kind == GCC_GROUP_GEMM) {
      json_object_set_new(cj, "library", json_string("cublasLt"));
      json_object_set_new(cj, "epilogue", json_string(gcc_epilogue_name(gr->epilogue)));
    } else if (gcc_fusion_conv_relu(g, gr->nodes[0]) >= 0) {
      /* Conv + Relu: which calls depends on the algorithm timed on the GPU */
      json_object_set_new(cj, "library", json_string("cudnn"));
      json_object_set_new(
          cj, "call",
          json_string("cudnnConvolutionBiasActivationForward (IMPLICIT_PRECOMP_GEMM "
                      "with a bias), else cudnnConvolutionForward + "
                      "cudnnActivationForward"));
      json_object_set_new(cj, "activation", json_string("relu"));
    } else { /* one node: its op names the cuDNN function */
      const gcc_lowering *lw = gcc_lowering_of(g->nodes[gr->nodes[0]].op);
      json_object_set_new(cj, "library", json_string("cudnn"));
      json_object_set_new(cj, "call", json_string(lw->call ? lw->call : "?"));
    }
    json_object_set_new(cj, "nodes", node_names(g, gr));
    json_array_append_new(calls, cj);
    launches++;
  }
  json_object_set_new(root, "library_calls", calls);
  json_object_set_new(root, "launches_per_step", json_integer(launches));
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!s)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (kernel manifest)");
  *json = s;
  return GCC_OK;
}
