/*
 * emit_loss.c - CUDA C for LOSS groups (SoftmaxCrossEntropy, MeanSquaredError and
 * their gradients).
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"

/* ---- loss groups ------------------------------------------------------ */

/* A rename of kernel `k` to "<name><suffix>". */
static int rename_kernel(gcc_kernel_info *k, const char *suffix) {
  size_t len = strlen(k->name) + strlen(suffix) + 1;
  char *nm = malloc(len);
  if (!nm)
    return 0;
  snprintf(nm, len, "%s%s", k->name, suffix);
  free(k->name);
  k->name = nm;
  return 1;
}

/* Opens a loss group's last kernel, one block that sums the partial results
 * in scratch into the forward node's loss: its signature (scratch, loss) and
 * the group's nodes as a comment; `suffix` (or NULL) renames it. */
static gcc_status open_loss_sum(emitter *e, int gi, int fwd, const char *suffix,
                                gcc_kernel_info **kp, sig *sp) {
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k || (suffix && !rename_kernel(k, suffix)))
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  *sp = (sig){.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, sp, GCC_KARG_SCRATCH, -1, "const float*", "scratch");
  param(e, sp, GCC_KARG_OUTPUT, e->g->nodes[fwd].outputs[0], "float*", "loss");
  out(&e->src, ") {\n");
  if (!sp->ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &e->g->groups[gi]);
  *kp = k;
  return GCC_OK;
}

/* SoftmaxCrossEntropy (and its gradient) of a small batch of few classes
 * (C <= 32, N * C <= 16384: one SM's work of a few microseconds): one block,
 * a thread per row, the loss reduced in shared memory in a fixed order; one
 * launch where two would cost more than the work. */
static gcc_status sce_one_block(emitter *e, int gi, int fwd, int grad) {
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

/* SoftmaxCrossEntropy (and its gradient), larger: a block per row, rows grid-stride.
 * The row's max and sum of exponentials are reduced over BLOCK lanes (lane l
 * takes classes l, l + BLOCK, ...; run by thread l % blockDim.x) in a fixed
 * tree, in float64 as the CPU kernel; the gradient row is written by the same
 * block. With the loss, each row's weighted loss and weight go to the plan's
 * scratch (float) and a second kernel of one block sums them over the rows in
 * a fixed tree, in float64: the bits do not depend on the launch shape. */
gcc_status gcc_emit_sce(emitter *e, int gi, int fwd, int grad) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  const gcc_node *any = &g->nodes[fwd >= 0 ? fwd : grad];
  int first = fwd >= 0 ? 0 : 1; /* where logits start in the node's inputs */
  int X = any->inputs[first], T = any->inputs[first + 1];
  int W = any->n_inputs > first + 2 ? any->inputs[first + 2] : -1;
  int64_t N = g->values[X].shape.dims[0], C = g->values[X].shape.dims[1];
  int mean = strcmp(any->av[SCE_REDUCTION].s, "mean") == 0;
  if (C <= 32 && N * C <= 16384)
    return sce_one_block(e, gi, fwd, grad);
  const char *wy = W >= 0 ? "(double)weight[y]" : "1.0";
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k || (fwd >= 0 && !rename_kernel(k, "_rows")))
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, X, "const float*", "logits");
  param(e, &s, GCC_KARG_INPUT, T,
        g->values[T].dtype == GCC_DT_INT64 ? "const long long*" : "const int*", "labels");
  if (W >= 0)
    param(e, &s, GCC_KARG_INPUT, W, "const float*", "weight");
  if (grad >= 0) {
    param(e, &s, GCC_KARG_INPUT, g->nodes[grad].inputs[0], "const float*", "dloss");
    param(e, &s, GCC_KARG_OUTPUT, g->nodes[grad].outputs[0], "float*", "dlogits");
  }
  if (fwd >= 0)
    param(e, &s, GCC_KARG_SCRATCH, -1, "float*", "scratch");
  param(e, &s, GCC_KARG_BAD_LABEL, -1, "int*", "bad_label");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  out(&e->src,
      "  /* a block per row: max and sum of exp over %d lanes in a fixed tree (deterministic)%s "
      "*/\n"
      "  const long long N = %" PRId64 "LL, C = %" PRId64 "LL, IGNORE = %" PRId64 "LL;\n"
      "  __shared__ float s_m[%d];\n  __shared__ double s_r[%d];\n",
      BLOCK, fwd >= 0 ? "; row losses to scratch[i], weights to scratch[N + i]" : "", N, C,
      any->av[SCE_IGNORE_INDEX].i, BLOCK, BLOCK);
  if (grad >= 0 && mean)
    out(&e->src,
        "  /* the mean's denominator: the weights of the rows with a label, over %d lanes (lane l "
        "takes rows l, l + %d, ...) in a fixed tree, in float64 */\n"
        "  for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
        "    double ws = 0.0;\n"
        "    for (long long i = l; i < N; i += %d) { const long long y = (long long)labels[i]; "
        "if (y != IGNORE && y >= 0 && y < C) ws += %s; }\n"
        "    s_r[l] = ws;\n"
        "  }\n"
        "  __syncthreads();\n"
        "  for (int h = %d; h > 0; h >>= 1) {\n"
        "    for (int l = threadIdx.x; l < h; l += blockDim.x) s_r[l] += s_r[l + h];\n"
        "    __syncthreads();\n"
        "  }\n"
        "  const double wsum = s_r[0];\n"
        "  __syncthreads();\n",
        BLOCK, BLOCK, BLOCK, BLOCK, wy, BLOCK / 2);
  if (grad >= 0)
    out(&e->src, "  const float dl = dloss[0];\n");
  out(&e->src, "  for (long long i = blockIdx.x; i < N; i += gridDim.x) {\n"
               "    const long long y = (long long)labels[i];\n"
               "    const float *row = logits + i * C;\n");
  if (grad >= 0)
    out(&e->src, "    float *drow = dlogits + i * C;\n");
  out(&e->src, "    if (y == IGNORE || y < 0 || y >= C) {\n"
               "      if (y != IGNORE && threadIdx.x == 0) atomicMin(bad_label, (int)i); /* the "
               "first bad row */\n");
  if (grad >= 0)
    out(&e->src, "      for (long long j = threadIdx.x; j < C; j += blockDim.x) drow[j] = 0.0f;\n");
  if (fwd >= 0)
    out(&e->src, "      if (threadIdx.x == 0) { scratch[i] = 0.0f; scratch[N + i] = 0.0f; }\n");
  out(&e->src,
      "      continue;\n"
      "    }\n"
      "    const double w = %s;\n"
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      float m = row[0];\n"
      "      for (long long j = l; j < C; j += %d) m = row[j] > m ? row[j] : m;\n"
      "      s_m[l] = m;\n"
      "    }\n"
      "    __syncthreads();\n"
      "    for (int h = %d; h > 0; h >>= 1) {\n"
      "      for (int l = threadIdx.x; l < h; l += blockDim.x) s_m[l] = s_m[l + h] > s_m[l] ? "
      "s_m[l + h] : s_m[l];\n"
      "      __syncthreads();\n"
      "    }\n"
      "    const float mx = s_m[0];\n"
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      double se = 0.0;\n"
      "      for (long long j = l; j < C; j += %d) se += exp((double)row[j] - mx);\n"
      "      s_r[l] = se;\n"
      "    }\n"
      "    __syncthreads();\n"
      "    for (int h = %d; h > 0; h >>= 1) {\n"
      "      for (int l = threadIdx.x; l < h; l += blockDim.x) s_r[l] += s_r[l + h];\n"
      "      __syncthreads();\n"
      "    }\n"
      "    const double se = s_r[0];\n",
      wy, BLOCK, BLOCK, BLOCK / 2, BLOCK, BLOCK, BLOCK / 2);
  if (fwd >= 0)
    out(&e->src, "    if (threadIdx.x == 0) { scratch[i] = (float)(w * (log(se) + mx - row[y])); "
                 "scratch[N + i] = (float)w; } /* -log_softmax(x)[y] */\n");
  if (grad >= 0)
    out(&e->src,
        "    const double scale = (double)dl * w / %s;\n"
        "    for (long long j = threadIdx.x; j < C; j += blockDim.x) {\n"
        "      const double p = exp((double)row[j] - mx) / se;\n"
        "      drow[j] = (float)(scale * (p - (j == y ? 1.0 : 0.0)));\n"
        "    }\n",
        mean ? "wsum" : "1.0");
  out(&e->src, "    __syncthreads();\n  }\n}\n");
  set_grid(e, k, N * BLOCK);
  if (fwd >= 0)
    k->scratch_bytes = (size_t)(2 * N) * sizeof(float);
  emit_wrapper(e, k, s.types);
  if (fwd < 0)
    return GCC_OK;

  /* the loss: one block sums the rows' losses and weights */
  GCC_TRY(open_loss_sum(e, gi, fwd, NULL, &k, &s));
  out(&e->src,
      "  /* the %" PRId64 " rows' losses and weights (%s_rows) summed over %d lanes in a fixed "
      "tree, in float64 */\n"
      "  const long long N = %" PRId64 "LL;\n"
      "  __shared__ double s_l[%d], s_w[%d];\n"
      "  if (blockIdx.x != 0) return;\n"
      "  for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "    double a = 0.0, b = 0.0;\n"
      "    for (long long i = l; i < N; i += %d) { a += (double)scratch[i]; b += "
      "(double)scratch[N + i]; }\n"
      "    s_l[l] = a; s_w[l] = b;\n"
      "  }\n"
      "  __syncthreads();\n"
      "  for (int h = %d; h > 0; h >>= 1) {\n"
      "    for (int l = threadIdx.x; l < h; l += blockDim.x) { s_l[l] += s_l[l + h]; s_w[l] += "
      "s_w[l + h]; }\n"
      "    __syncthreads();\n"
      "  }\n"
      "  if (threadIdx.x == 0) loss[0] = (float)(%s);\n}\n",
      N, gr->name, BLOCK, N, BLOCK, BLOCK, BLOCK, BLOCK, BLOCK / 2,
      mean ? "s_l[0] / s_w[0]" : "s_l[0]");
  k->single_block = 1;
  k->grid_dim = 1;
  k->work_items = N;
  k->scratch_bytes = (size_t)(2 * N) * sizeof(float);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

static gcc_status mse_one_block(emitter *e, int gi, int fwd, int grad) {
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

/* MSELoss (and its gradient), larger than one block's worth: the forward in
 * two kernels, P fixed chunks of the elements each summed by a block over
 * BLOCK lanes (lane l takes the chunk's elements l, l + BLOCK, ...) in a
 * fixed tree, in float64, into the plan's scratch (P doubles), then one
 * block summing the P partials in a fixed tree; P and the chunks depend on
 * the size only, so the bits do not depend on the launch shape. The
 * gradient is an elementwise grid-stride kernel. */
enum { MSE_CHUNK = BLOCK * 8, MSE_MAX_PARTS = 1024 };

gcc_status gcc_emit_mse(emitter *e, int gi, int fwd, int grad) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  const gcc_node *any = &g->nodes[fwd >= 0 ? fwd : grad];
  int first = fwd >= 0 ? 0 : 1;
  int P = any->inputs[first], T = any->inputs[first + 1];
  int64_t n = gcc_shape_numel(&g->values[P].shape, NULL);
  if (n <= 16384) /* the tutorials' regressions: one launch */
    return mse_one_block(e, gi, fwd, grad);
  int mean = strcmp(any->av[MSE_REDUCTION].s, "mean") == 0;
  int64_t parts = (n + MSE_CHUNK - 1) / MSE_CHUNK;
  if (parts > MSE_MAX_PARTS)
    parts = MSE_MAX_PARTS;
  int64_t chunk = (n + parts - 1) / parts;
  char mean_of[96], scale_by[48]; /* the mean's divisor, N, as a literal */
  snprintf(scale_by, sizeof scale_by, "%s", "1.0");
  if (mean)
    snprintf(scale_by, sizeof scale_by, "(double)%" PRId64 "LL", n);
  snprintf(mean_of, sizeof mean_of, "s_r[0] / %s", scale_by);
  gcc_kernel_info *k;
  sig s;
  if (fwd >= 0) {
    k = new_kernel(e, gi);
    if (!k || !rename_kernel(k, "_parts"))
      return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
    s = (sig){.k = k, .ok = 1};
    out(&e->src, "extern \"C\" __global__ void %s(", k->name);
    param(e, &s, GCC_KARG_INPUT, P, "const float*", "pred");
    param(e, &s, GCC_KARG_INPUT, T, "const float*", "target");
    param(e, &s, GCC_KARG_SCRATCH, -1, "float*", "scratch");
    out(&e->src, ") {\n");
    if (!s.ok)
      return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
    comment_nodes(e, gr);
    out(&e->src,
        "  /* %" PRId64 " chunks of %" PRId64 " elements: each a block's sum of squared "
        "differences over %d lanes in a fixed tree, in float64, to part[b] */\n"
        "  const long long N = %" PRId64 "LL, CHUNK = %" PRId64 "LL;\n"
        "  double *part = (double *)scratch;\n"
        "  __shared__ double s_r[%d];\n"
        "  for (long long b = blockIdx.x; b < %" PRId64 "LL; b += gridDim.x) {\n"
        "    const long long lo = b * CHUNK, hi = lo + CHUNK < N ? lo + CHUNK : N;\n"
        "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
        "      double acc = 0.0;\n"
        "      for (long long i = lo + l; i < hi; i += %d) { const double d = (double)pred[i] - "
        "(double)target[i]; acc += d * d; }\n"
        "      s_r[l] = acc;\n"
        "    }\n"
        "    __syncthreads();\n"
        "    for (int h = %d; h > 0; h >>= 1) {\n"
        "      for (int l = threadIdx.x; l < h; l += blockDim.x) s_r[l] += s_r[l + h];\n"
        "      __syncthreads();\n"
        "    }\n"
        "    if (threadIdx.x == 0) part[b] = s_r[0];\n"
        "    __syncthreads();\n"
        "  }\n}\n",
        parts, chunk, BLOCK, n, chunk, BLOCK, parts, BLOCK, BLOCK, BLOCK / 2);
    set_grid(e, k, parts * BLOCK);
    k->scratch_bytes = (size_t)parts * sizeof(double);
    emit_wrapper(e, k, s.types);

    /* the group's last kernel is named after it */
    GCC_TRY(open_loss_sum(e, gi, fwd, grad >= 0 ? "_sum" : NULL, &k, &s));
    out(&e->src,
        "  /* the %" PRId64 " partial sums (%s_parts) over %d lanes in a fixed tree */\n"
        "  const double *part = (const double *)scratch;\n"
        "  __shared__ double s_r[%d];\n"
        "  if (blockIdx.x != 0) return;\n"
        "  for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
        "    double a = 0.0;\n"
        "    for (long long b = l; b < %" PRId64 "LL; b += %d) a += part[b];\n"
        "    s_r[l] = a;\n"
        "  }\n"
        "  __syncthreads();\n"
        "  for (int h = %d; h > 0; h >>= 1) {\n"
        "    for (int l = threadIdx.x; l < h; l += blockDim.x) s_r[l] += s_r[l + h];\n"
        "    __syncthreads();\n"
        "  }\n"
        "  if (threadIdx.x == 0) loss[0] = (float)(%s);\n}\n",
        parts, gr->name, BLOCK, BLOCK, BLOCK, parts, BLOCK, BLOCK / 2, mean ? mean_of : "s_r[0]");
    k->single_block = 1;
    k->grid_dim = 1;
    k->work_items = parts;
    k->scratch_bytes = (size_t)parts * sizeof(double);
    emit_wrapper(e, k, s.types);
  }
  if (grad < 0)
    return GCC_OK;
  k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  s = (sig){.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, P, "const float*", "pred");
  param(e, &s, GCC_KARG_INPUT, T, "const float*", "target");
  param(e, &s, GCC_KARG_INPUT, g->nodes[grad].inputs[0], "const float*", "dloss");
  param(e, &s, GCC_KARG_OUTPUT, g->nodes[grad].outputs[0], "float*", "dpred");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  out(&e->src,
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  const float scale = (float)(2.0 * (double)dloss[0] / %s);\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < %" PRId64
      "LL; i += stride) dpred[i] = scale * (pred[i] - target[i]);\n}\n",
      scale_by, n);
  set_grid(e, k, n);
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
