/*
 * emit_loss.c - CUDA C for LOSS groups (SoftmaxCrossEntropy, MeanSquaredError and
 * their gradients).
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"

/* ---- loss groups ------------------------------------------------------ */

gcc_status gcc_emit_sce(emitter *e, int gi, int fwd, int grad) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  const gcc_node *any = &g->nodes[fwd >= 0 ? fwd : grad];
  int first = fwd >= 0 ? 0 : 1; /* where logits start in the node's inputs */
  int X = any->inputs[first], T = any->inputs[first + 1];
  int W = any->n_inputs > first + 2 ? any->inputs[first + 2] : -1;
  int64_t N = g->values[X].shape.dims[0], C = g->values[X].shape.dims[1];
  int mean = strcmp(any->av[SCE_REDUCTION].s, "mean") == 0;
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, X, "const float*", "logits");
  param(e, &s, GCC_KARG_INPUT, T,
        g->values[T].dtype == GCC_DT_INT64 ? "const long long*" : "const int*", "labels");
  if (W >= 0)
    param(e, &s, GCC_KARG_INPUT, W, "const float*", "weight");
  if (grad >= 0)
    param(e, &s, GCC_KARG_INPUT, g->nodes[grad].inputs[0], "const float*", "dloss");
  if (fwd >= 0)
    param(e, &s, GCC_KARG_OUTPUT, g->nodes[fwd].outputs[0], "float*", "loss");
  if (grad >= 0)
    param(e, &s, GCC_KARG_OUTPUT, g->nodes[grad].outputs[0], "float*", "dlogits");
  param(e, &s, GCC_KARG_BAD_LABEL, -1, "int*", "bad_label");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  out(&e->src,
      "  /* one block: the loss is reduced in shared memory in a fixed order (deterministic) */\n"
      "  const long long N = %" PRId64 "LL, C = %" PRId64 "LL, IGNORE = %" PRId64 "LL;\n"
      "  __shared__ double s_sum[%d];\n  __shared__ double s_w[%d];\n"
      "  if (blockIdx.x != 0) return;\n"
      "  double acc = 0.0, wacc = 0.0;\n"
      "  for (long long i = threadIdx.x; i < N; i += blockDim.x) {\n"
      "    long long y = (long long)labels[i];\n"
      "    if (y == IGNORE) continue;\n"
      "    if (y < 0 || y >= C) { atomicMin(bad_label, (int)i); continue; } /* the first bad row "
      "*/\n"
      "    double w = %s;\n"
      "    wacc += w;\n",
      N, C, any->av[SCE_IGNORE_INDEX].i, BLOCK, BLOCK, W >= 0 ? "(double)weight[y]" : "1.0");
  if (fwd >= 0)
    out(&e->src, "    const float *row = logits + i * C;\n"
                 "    float mx = row[0];\n"
                 "    for (long long j = 1; j < C; j++) mx = row[j] > mx ? row[j] : mx;\n"
                 "    double se = 0.0;\n"
                 "    for (long long j = 0; j < C; j++) se += exp((double)row[j] - mx);\n"
                 "    acc += w * (log(se) + mx - row[y]); /* -log_softmax(x)[y] */\n");
  out(&e->src, "  }\n"
               "  s_sum[threadIdx.x] = acc;\n  s_w[threadIdx.x] = wacc;\n  __syncthreads();\n"
               "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
               "    if (threadIdx.x < s) { s_sum[threadIdx.x] += s_sum[threadIdx.x + s]; "
               "s_w[threadIdx.x] += s_w[threadIdx.x + s]; }\n"
               "    __syncthreads();\n  }\n"
               "  const double wsum = s_w[0];\n");
  if (fwd >= 0)
    out(&e->src, "  if (threadIdx.x == 0) loss[0] = (float)(%s);\n",
        mean ? "s_sum[0] / wsum" : "s_sum[0]");
  if (grad >= 0)
    out(&e->src,
        "  const float dl = dloss[0];\n"
        "  for (long long i = threadIdx.x; i < N; i += blockDim.x) {\n"
        "    long long y = (long long)labels[i];\n"
        "    float *drow = dlogits + i * C;\n"
        "    if (y == IGNORE || y < 0 || y >= C) { for (long long j = 0; j < C; j++) drow[j] = "
        "0.0f; continue; }\n"
        "    const float *row = logits + i * C;\n"
        "    float mx = row[0];\n"
        "    for (long long j = 1; j < C; j++) mx = row[j] > mx ? row[j] : mx;\n"
        "    double se = 0.0;\n"
        "    for (long long j = 0; j < C; j++) se += exp((double)row[j] - mx);\n"
        "    double scale = (double)dl * %s / %s;\n"
        "    for (long long j = 0; j < C; j++) {\n"
        "      double p = exp((double)row[j] - mx) / se;\n"
        "      drow[j] = (float)(scale * (p - (j == y ? 1.0 : 0.0)));\n"
        "    }\n  }\n",
        W >= 0 ? "(double)weight[y]" : "1.0", mean ? "wsum" : "1.0");
  out(&e->src, "}\n");
  k->single_block = 1;
  k->grid_dim = 1;
  k->work_items = N;
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

gcc_status gcc_emit_mse(emitter *e, int gi, int fwd, int grad) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  const gcc_node *any = &g->nodes[fwd >= 0 ? fwd : grad];
  int first = fwd >= 0 ? 0 : 1;
  int P = any->inputs[first], T = any->inputs[first + 1];
  int64_t n = gcc_shape_numel(&g->values[P].shape, NULL);
  int mean = strcmp(any->av[MSE_REDUCTION].s, "mean") == 0;
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, P, "const float*", "pred");
  param(e, &s, GCC_KARG_INPUT, T, "const float*", "target");
  if (grad >= 0)
    param(e, &s, GCC_KARG_INPUT, g->nodes[grad].inputs[0], "const float*", "dloss");
  if (fwd >= 0)
    param(e, &s, GCC_KARG_OUTPUT, g->nodes[fwd].outputs[0], "float*", "loss");
  if (grad >= 0)
    param(e, &s, GCC_KARG_OUTPUT, g->nodes[grad].outputs[0], "float*", "dpred");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  out(&e->src,
      "  const long long N = %" PRId64 "LL;\n"
      "  __shared__ double s_sum[%d];\n"
      "  if (blockIdx.x != 0) return;\n",
      n, BLOCK);
  if (fwd >= 0)
    out(&e->src,
        "  double acc = 0.0;\n"
        "  for (long long i = threadIdx.x; i < N; i += blockDim.x) { double d = (double)pred[i] - "
        "target[i]; acc += d * d; }\n"
        "  s_sum[threadIdx.x] = acc;\n  __syncthreads();\n"
        "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
        "    if (threadIdx.x < s) s_sum[threadIdx.x] += s_sum[threadIdx.x + s];\n"
        "    __syncthreads();\n  }\n"
        "  if (threadIdx.x == 0) loss[0] = (float)(%s);\n",
        mean ? "s_sum[0] / (double)N" : "s_sum[0]");
  if (grad >= 0)
    out(&e->src,
        "  const float scale = (float)(2.0 * (double)dloss[0] / %s);\n"
        "  for (long long i = threadIdx.x; i < N; i += blockDim.x) dpred[i] = scale * (pred[i] - "
        "target[i]);\n",
        mean ? "(double)N" : "1.0");
  out(&e->src, "}\n");
  k->single_block = 1;
  k->grid_dim = 1;
  k->work_items = n;
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

gcc_status gcc_emit_loss_group(emitter *e, int gi) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  int fwd = -1, grad = -1;
  for (int i = 0; i < gr->n_nodes; i++) {
    if (gcc_lowering_of(g->nodes[gr->nodes[i]].op)->kind == GCC_LOWER_LOSS)
      fwd = gr->nodes[i];
    else
      grad = gr->nodes[i];
  }
  const gcc_lowering *lw = gcc_lowering_of(g->nodes[fwd >= 0 ? fwd : grad].op);
  if (!lw->emit)
    return gcc_diag_set(e->d, GCC_ERR_UNSUPPORTED, "%s: codegen: loss group '%s' has no emitter",
                        g->source, gr->name);
  return lw->emit(e, gi, fwd, grad);
}
