/*
 * emit_optim.c - CUDA C for OPTIMIZER groups (SGD, Adam) and fp16 loss scaling
 * (AmpNonFiniteCheck, AmpUpdateScale).
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"

/* ---- the optimizer ---------------------------------------------------- */

/* fp16 loss scaling (graph/ops.h SCALER_IN_*): the scale, found_inf and
 * applied_steps inputs of the group's first node (the same values for
 * every node of the group), read from device memory, never baked in */
static void scaler_params(emitter *e, sig *s, const gcc_node *n0, int at) {
  param(e, s, GCC_KARG_INPUT, n0->inputs[at + SCALER_IN_SCALE], "const float*", "scale");
  param(e, s, GCC_KARG_INPUT, n0->inputs[at + SCALER_IN_FOUND_INF], "const float*", "found_inf");
  param(e, s, GCC_KARG_INPUT, n0->inputs[at + SCALER_IN_STEPS], "const float*", "applied");
}

/* Loss scaling is on when the first scaler input is given (a clip input
 * after them leaves them -1 without it). */
static int has_scaler(const gcc_node *n0, int at) {
  return n0->n_inputs > at && n0->inputs[at] >= 0;
}

/* Gradient clipping (graph/ops.h GRAD_NORM_*): GradNorm's [norm, coef],
 * read from device memory; the gradient expression multiplied by coef */
static int has_clip(const gcc_node *n0, int at) {
  return n0->n_inputs > at && n0->inputs[at] >= 0;
}

static const char *const kClipPrologue =
    "  /* torch.nn.utils.clip_grad_norm_: every gradient times the clip coefficient\n"
    "     min(1, max_norm / (norm + 1e-6)) of GradNorm */\n"
    "  const float clip = clip_norm[1];\n";

static const char *const kScalerPrologue =
    "  /* torch.amp.GradScaler: a step with an Inf/NaN gradient updates nothing;\n"
    "     otherwise the gradients are unscaled by inv_scale = 1 / scale (float64,\n"
    "     rounded to float32) as they are read */\n"
    "  if (found_inf[0] != 0.0f) return;\n"
    "  const float inv = (float)(1.0 / (double)scale[0]);\n";

/* The optimizer kernel of group `gi`: its signature starts with the flat
 * parameter and gradient sections; *total is the floats they hold. */
static gcc_status optimizer_begin(emitter *e, int gi, gcc_kernel_info **kp, sig *s,
                                  int64_t *total) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  *total = 0;
  for (int i = 0; i < gr->n_nodes; i++)
    *total += padded(gcc_shape_numel(&g->values[g->nodes[gr->nodes[i]].inputs[0]].shape, NULL));
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  *s = (sig){.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, s, GCC_KARG_PARAMS, -1, "float*", "p");
  param(e, s, GCC_KARG_GRADS, -1, "const float*", "g");
  *kp = k;
  return GCC_OK;
}

/* --precision bf16|fp16: the group's updates write their parameters' 16-bit
 * copies (passes/autocast.c): the copy section's argument, and the store of
 * the updated weight p[i] (one read of it, one rounded 16-bit store). */
static void optimizer_copy_arg(emitter *e, int gi, sig *s) {
  const gcc_node *n0 = &e->g->nodes[e->g->groups[gi].nodes[0]];
  if (n0->n_outputs > 0)
    param(e, s, GCC_KARG_PARAM_COPY, -1, out_type(vdt(e->g, n0->outputs[0])), "h");
}

static const char *optimizer_copy(emitter *e, int gi, char *buf, size_t cap) {
  const gcc_node *n0 = &e->g->nodes[e->g->groups[gi].nodes[0]];
  buf[0] = 0;
  if (n0->n_outputs > 0) {
    gcc_dtype t = vdt(e->g, n0->outputs[0]);
    snprintf(buf, cap, "    h[i] = %sp[i]%s;\n", st_open(t), close16(t));
  }
  return buf;
}

static gcc_status optimizer_end(emitter *e, gcc_kernel_info *k, const sig *s, int64_t total) {
  set_grid(e, k, total);
  emit_wrapper(e, k, s->types);
  return GCC_OK;
}

gcc_status gcc_emit_sgd(emitter *e, int gi, int fwd, int grad) {
  (void)fwd;
  (void)grad;
  const gcc_group *gr = &e->g->groups[gi];
  const gcc_node *n0 = &e->g->nodes[gr->nodes[0]];
  gcc_kernel_info *k;
  sig s;
  int64_t total;
  char l2[32], l3[32], l4[32];
  GCC_TRY(optimizer_begin(e, gi, &k, &s, &total));
  int has_buf = n0->n_inputs > 2 && n0->inputs[2] >= 0;
  int scaled = has_scaler(n0, SGD_IN_SCALER), clipped = has_clip(n0, SGD_IN_CLIP);
  if (has_buf)
    param(e, &s, GCC_KARG_STATE0, -1, "float*", "buf");
  param(e, &s, GCC_KARG_NUMEL, -1, "long long", "n");
  if (!scaled)
    param(e, &s, GCC_KARG_FIRST_STEP, -1, "int", "first");
  param(e, &s, GCC_KARG_LR, -1, "float", "lr");
  if (scaled)
    scaler_params(e, &s, n0, SGD_IN_SCALER);
  if (clipped)
    param(e, &s, GCC_KARG_INPUT, n0->inputs[SGD_IN_CLIP], "const float*", "clip_norm");
  optimizer_copy_arg(e, gi, &s);
  char copy[96];
  optimizer_copy(e, gi, copy, sizeof copy);
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  if (scaled)
    out(&e->src, "%s  const int first = applied[0] == 0.0f;\n", kScalerPrologue);
  if (clipped)
    out(&e->src, "%s", kClipPrologue);
  out(&e->src,
      "  /* torch.optim.SGD over the flat parameter, gradient and momentum sections\n"
      "     (parallel arrays, each tensor padded to %d bytes): %" PRId64 " floats */\n"
      "  const float mom = %s, damp = %s, wd = %s;\n"
      "  (void)mom; (void)damp; (void)first;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) "
      "{\n",
      GCC_ARENA_ALIGN, total, float_lit(l2, sizeof l2, n0->av[SGD_MOMENTUM].f),
      float_lit(l3, sizeof l3, n0->av[SGD_DAMPENING].f),
      float_lit(l4, sizeof l4, n0->av[SGD_WEIGHT_DECAY].f));
  const char *gi_ =
      scaled ? (clipped ? "g[i] * inv * clip" : "g[i] * inv") : (clipped ? "g[i] * clip" : "g[i]");
  if (!has_buf)
    out(&e->src, "    p[i] = p[i] + (-lr) * (%s + wd * p[i]);\n%s  }\n}\n", gi_, copy);
  else
    out(&e->src,
        "    float d = %s + wd * p[i];\n"
        "    float b = first ? d : buf[i] * mom + (1.0f - damp) * d;\n"
        "    buf[i] = b;\n"
        "    p[i] = p[i] + (-lr) * (%s);\n%s  }\n}\n",
        gi_, n0->av[SGD_NESTEROV].i ? "d + mom * b" : "b", copy);
  return optimizer_end(e, k, &s, total);
}

gcc_status gcc_emit_adam(emitter *e, int gi, int fwd, int grad) {
  (void)fwd;
  (void)grad;
  const gcc_group *gr = &e->g->groups[gi];
  const gcc_node *n0 = &e->g->nodes[gr->nodes[0]];
  gcc_kernel_info *k;
  sig s;
  int64_t total;
  char l1[32], l2[32], l3[32], l4[32];
  GCC_TRY(optimizer_begin(e, gi, &k, &s, &total));
  param(e, &s, GCC_KARG_STATE0, -1, "float*", "m");
  param(e, &s, GCC_KARG_STATE1, -1, "float*", "v");
  param(e, &s, GCC_KARG_NUMEL, -1, "long long", "n");
  int scaled = has_scaler(n0, ADAM_IN_SCALER), clipped = has_clip(n0, ADAM_IN_CLIP);
  if (!scaled) {
    param(e, &s, GCC_KARG_STEP_SIZE, -1, "float", "step_size");
    param(e, &s, GCC_KARG_BC2_SQRT, -1, "float", "bc2_sqrt");
  }
  int decoupled = (int)n0->av[ADAM_DECOUPLED].i;
  if (decoupled || scaled)
    param(e, &s, GCC_KARG_LR, -1, "float", "lr");
  if (scaled)
    scaler_params(e, &s, n0, ADAM_IN_SCALER);
  if (clipped)
    param(e, &s, GCC_KARG_INPUT, n0->inputs[ADAM_IN_CLIP], "const float*", "clip_norm");
  optimizer_copy_arg(e, gi, &s);
  char copy[96];
  optimizer_copy(e, gi, copy, sizeof copy);
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  if (scaled)
    out(&e->src,
        "%s"
        "  /* the bias corrections of the steps applied (skipped steps do not count), in\n"
        "     float64 as gcc_cpu_adam */\n"
        "  const double t = (double)applied[0] + 1.0;\n"
        "  const float step_size = (float)((double)lr / (1.0 - pow((double)%s, t)));\n"
        "  const float bc2_sqrt = (float)sqrt(1.0 - pow((double)%s, t));\n",
        kScalerPrologue, float_lit(l1, sizeof l1, n0->av[ADAM_BETA1].f),
        float_lit(l2, sizeof l2, n0->av[ADAM_BETA2].f));
  if (clipped)
    out(&e->src, "%s", kClipPrologue);
  /* the gradient as read: g * inv (loss scaling) * clip (clip_grad_norm_) */
  const char *gx =
      scaled ? (clipped ? "g[i] * inv * clip" : "g[i] * inv") : (clipped ? "g[i] * clip" : "g[i]");
  char gline[160];
  if (decoupled)
    snprintf(gline, sizeof gline, "    p[i] = p[i] * decay;\n    float gi = %s;\n", gx);
  else
    snprintf(gline, sizeof gline, "    float gi = %s + wd * p[i];\n", gx);
  out(&e->src,
      "  /* torch.optim.Adam over the flat sections: %" PRId64
      " floats; step_size = lr / (1 - beta1^t),\n"
      "     bc2_sqrt = sqrt(1 - beta2^t), computed on the host in float64 each step */\n"
      "  const float b1 = %s, b2 = %s, eps = %s, wd = %s;\n"
      "%s"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) "
      "{\n"
      "%s"
      "    m[i] = m[i] * b1 + (1.0f - b1) * gi;\n"
      "    v[i] = v[i] * b2 + (1.0f - b2) * gi * gi;\n"
      "    float denom = sqrtf(v[i]) / bc2_sqrt + eps;\n"
      "    p[i] = p[i] + (-step_size) * (m[i] / denom);\n%s  }\n}\n",
      total, float_lit(l1, sizeof l1, n0->av[ADAM_BETA1].f),
      float_lit(l2, sizeof l2, n0->av[ADAM_BETA2].f), float_lit(l3, sizeof l3, n0->av[ADAM_EPS].f),
      float_lit(l4, sizeof l4, n0->av[ADAM_WEIGHT_DECAY].f),
      decoupled ? "  /* AdamW: decoupled weight decay, p * (1 - lr * wd) first (float64 as "
                  "torch's scalar) */\n"
                  "  const float decay = (float)(1.0 - (double)lr * (double)wd);\n"
                : "",
      gline, copy);
  return optimizer_end(e, k, &s, total);
}

gcc_status gcc_emit_optimizer_group(emitter *e, int gi) {
  GCC_TRY(need_f32(e, gi));
  const gcc_group *gr = &e->g->groups[gi];
  const gcc_lowering *lw = gcc_lowering_of(e->g->nodes[gr->nodes[0]].op);
  if (!lw->emit)
    return gcc_diag_set(e->d, GCC_ERR_UNSUPPORTED,
                        "%s: codegen: optimizer group '%s' has no emitter", e->g->source, gr->name);
  return lw->emit(e, gi, -1, -1);
}

/* ---- fp16 loss scaling (torch.amp.GradScaler) --------------------------- */

/* AmpNonFiniteCheck: a grid over the node's gradients, which lie in the
 * flat gradient section of the persistent arena, consecutive and each
 * padded to GCC_ARENA_ALIGN bytes (the padding is zeros; the runtime checks
 * the layout, GCC_KARG_FLAT_INPUTS). Each block ORs its threads' flags in
 * shared memory and, if set, the scratch flag; the last block to finish
 * (the scratch counter, after a __threadfence) writes found_inf and clears
 * the scratch for the next step: one launch, no memset, no host. The
 * result does not depend on the order blocks run in. */
gcc_status gcc_emit_amp_non_finite_check_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  int64_t total = 0;
  for (int j = AMP_CHECK_IN_GRADS; j < nd->n_inputs; j++)
    total += padded(gcc_shape_numel(&g->values[nd->inputs[j]].shape, NULL));
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_CHECK_IN_SCRATCH], "unsigned int*", "scratch");
  param(e, &s, GCC_KARG_FLAT_INPUTS, -1, "const float*", "g");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], "float*", "found_inf");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  out(&e->src,
      "  /* found_inf of torch._amp_foreach_non_finite_check_and_unscale_ over the %d\n"
      "     gradients (%" PRId64 " floats with padding): Inf and NaN fail |x| <= FLT_MAX;\n"
      "     scratch[0] counts finished blocks, scratch[1] is set by a block that saw one */\n"
      "  __shared__ int s_bad, s_last;\n"
      "  if (threadIdx.x == 0) s_bad = 0;\n"
      "  __syncthreads();\n"
      "  int bad = 0;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < %" PRId64
      "LL; i += stride)\n"
      "    bad |= !(fabsf(g[i]) <= 3.402823466e+38f);\n"
      "  if (bad) s_bad = 1;\n"
      "  __syncthreads();\n"
      "  if (threadIdx.x == 0) {\n"
      "    if (s_bad) atomicExch((int*)(scratch + 1), 1);\n"
      "    __threadfence();\n"
      "    s_last = atomicAdd(scratch, 1u) == gridDim.x - 1;\n"
      "  }\n"
      "  __syncthreads();\n"
      "  if (s_last && threadIdx.x == 0) { /* every other block's flag is visible */\n"
      "    __threadfence();\n"
      "    found_inf[0] = atomicExch((int*)(scratch + 1), 0) != 0 ? 1.0f : 0.0f;\n"
      "    scratch[0] = 0u;\n"
      "  }\n"
      "}\n",
      nd->n_inputs - AMP_CHECK_IN_GRADS, total, total);
  set_grid(e, k, total);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* AmpUpdateScale: one thread, the scalars in place (as gcc_cpu_amp_update_scale) */
gcc_status gcc_emit_amp_update_scale_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_UPDATE_IN_SCALE], "float*", "scale");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_UPDATE_IN_FOUND_INF], "const float*", "found_inf");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_UPDATE_IN_TRACKER], "float*", "tracker");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_UPDATE_IN_STEPS], "float*", "applied");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  char lg[32], lb[32];
  out(&e->src,
      "  /* torch._amp_update_scale_, and the count of applied optimizer steps */\n"
      "  if (blockIdx.x != 0 || threadIdx.x != 0) return;\n"
      "  if (found_inf[0] != 0.0f) {\n"
      "    scale[0] = scale[0] * %s;\n"
      "    tracker[0] = 0.0f;\n"
      "    return;\n"
      "  }\n"
      "  const float successful = tracker[0] + 1.0f;\n"
      "  if (successful >= %" PRId64 ".0f) {\n"
      "    const float grown = scale[0] * %s;\n"
      "    if (fabsf(grown) <= 3.402823466e+38f) scale[0] = grown;\n"
      "    tracker[0] = 0.0f;\n"
      "  } else {\n"
      "    tracker[0] = successful;\n"
      "  }\n"
      "  applied[0] = applied[0] + 1.0f;\n"
      "}\n",
      float_lit(lb, sizeof lb, nd->av[AMP_UPDATE_BACKOFF_FACTOR].f),
      (int64_t)nd->av[AMP_UPDATE_GROWTH_INTERVAL].i,
      float_lit(lg, sizeof lg, nd->av[AMP_UPDATE_GROWTH_FACTOR].f));
  k->single_block = 1;
  k->grid_dim = 1;
  k->work_items = 1;
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* ---- gradient clipping (torch.nn.utils.clip_grad_norm_) ----------------- */

/* GradNorm: two kernels. The first is a grid of at most
 * GRAD_NORM_MAX_BLOCKS blocks over the node's gradients, which lie in the
 * flat gradient section of the persistent arena (consecutive, each padded
 * to GCC_ARENA_ALIGN bytes with zeros, which add nothing;
 * GCC_KARG_FLAT_INPUTS): each thread adds g^2 in float64 over its
 * grid-stride elements, the block adds its threads' sums in a fixed tree
 * and writes one partial to the scratch. The second is one block that adds
 * the partials in a fixed tree and writes [norm, coefficient]. Every sum
 * has one order whatever order the blocks run in: run-to-run bitwise equal,
 * no atomics. */
/* Kernel `k` renamed "<name><suffix>" (a group's two kernels need two names). */
static int suffix_kernel(gcc_kernel_info *k, const char *suffix) {
  size_t len = strlen(k->name) + strlen(suffix) + 1;
  char *nm = malloc(len);
  if (!nm)
    return 0;
  snprintf(nm, len, "%s%s", k->name, suffix);
  free(k->name);
  k->name = nm;
  return 1;
}

gcc_status gcc_emit_grad_norm_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  int scaled = (int)nd->av[GRAD_NORM_SCALED].i; /* input 0: fp16 loss scaling's scale */
  int64_t total = 0;
  for (int j = scaled; j < nd->n_inputs; j++)
    total += padded(gcc_shape_numel(&g->values[nd->inputs[j]].shape, NULL));
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k || !suffix_kernel(k, "_partials"))
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  set_grid(e, k, total);
  if (k->grid_dim > GRAD_NORM_MAX_BLOCKS)
    k->grid_dim = GRAD_NORM_MAX_BLOCKS;
  int blocks = k->grid_dim;
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_FLAT_INPUTS, -1, "const float*", "g");
  param(e, &s, GCC_KARG_SCRATCH, -1, "double*", "partial");
  if (scaled)
    param(e, &s, GCC_KARG_INPUT, nd->inputs[0], "const float*", "scale");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  out(&e->src,
      "  /* the sum of squares of the %d gradients (%" PRId64 " floats with padding):\n"
      "     float64 per thread over a grid-stride loop, then a fixed tree per block */\n"
      "  __shared__ double s_ss[%d];\n"
      "%s"
      "  double acc = 0.0;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < %" PRId64
      "LL; i += stride) {\n"
      "    const double x = (double)(g[i]%s);\n"
      "    acc += x * x;\n"
      "  }\n"
      "  s_ss[threadIdx.x] = acc;\n"
      "  __syncthreads();\n"
      "  for (int h = %d; h > 0; h >>= 1) {\n"
      "    if ((int)threadIdx.x < h) s_ss[threadIdx.x] += s_ss[threadIdx.x + h];\n"
      "    __syncthreads();\n"
      "  }\n"
      "  if (threadIdx.x == 0) partial[blockIdx.x] = s_ss[0];\n"
      "}\n",
      nd->n_inputs - scaled, total, BLOCK,
      scaled ? "  /* fp16 loss scaling: the unscaled gradients (scaler.unscale_ first) */\n"
               "  const float inv = (float)(1.0 / (double)scale[0]);\n"
             : "",
      total, scaled ? " * inv" : "", BLOCK / 2);
  k->scratch_bytes = (size_t)blocks * sizeof(double);
  emit_wrapper(e, k, s.types);

  /* the norm and the coefficient: one block over the partials */
  k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  s = (sig){.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_SCRATCH, -1, "const double*", "partial");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], "float*", "out");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  char lm[32];
  out(&e->src,
      "  /* the %d blocks' partial sums in a fixed tree (float64); clip_grad_norm_'s\n"
      "     total_norm and clip_coef = (1 / (total_norm + 1e-6)) * max_norm (Tensor\n"
      "     .__rtruediv__), clamped to 1 keeping NaN, in float32 */\n"
      "  __shared__ double s_ss[%d];\n"
      "  if (blockIdx.x != 0) return;\n"
      "  double acc = 0.0;\n"
      "  for (int b = threadIdx.x; b < %d; b += blockDim.x) acc += partial[b];\n"
      "  s_ss[threadIdx.x] = acc;\n"
      "  __syncthreads();\n"
      "  for (int h = %d; h > 0; h >>= 1) {\n"
      "    if ((int)threadIdx.x < h) s_ss[threadIdx.x] += s_ss[threadIdx.x + h];\n"
      "    __syncthreads();\n"
      "  }\n"
      "  if (threadIdx.x == 0) {\n"
      "    const float norm = (float)sqrt(s_ss[0]);\n"
      "    const float coef = (1.0f / (norm + 1e-6f)) * %s;\n"
      "    out[0] = norm;\n"
      "    out[1] = coef > 1.0f ? 1.0f : coef;\n"
      "  }\n"
      "}\n",
      blocks, BLOCK, blocks, BLOCK / 2, float_lit(lm, sizeof lm, nd->av[GRAD_NORM_MAX_NORM].f));
  k->single_block = 1;
  k->grid_dim = 1;
  k->work_items = blocks;
  k->scratch_bytes = (size_t)blocks * sizeof(double);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}
