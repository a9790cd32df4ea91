/*
 * emit_nll.c - CUDA C for NegativeLogLikelihoodLoss (ONNX
 * NegativeLogLikelihoodLoss-13/22, torch.nn.functional.nll_loss) and its
 * gradient (semantics in graph/ops.h). See emit.h for the conventions of
 * the generated source.
 *
 * The input is viewed as (N, C, D) (D = d1 * ... * dk) and the target as
 * (N, D): M = N * D targets. Kernels:
 *   - reduction "none": one thread per target (grid-stride), loss[i] =
 *     -w[t] x[n, t, j];
 *   - "sum" / "mean": a partials kernel of at most NLL_PARTS blocks (each
 *     thread adds its grid-stride targets' losses and weights in float64, the
 *     block adds its threads' sums in a fixed tree and writes one partial of
 *     each to the plan's scratch), then one block adds the partials in a
 *     fixed tree and writes the loss (the sum, or the sum over the weight
 *     sum): no atomics, one order whatever order the blocks run in;
 *   - the gradient: one thread per element of dInput (grid-stride), each
 *     writing its element (zero, or -w[t] g at the target's class); for
 *     "mean" a partials kernel of the weights first, and every block of the
 *     elementwise kernel adds those (at most NLL_PARTS) partials in the same
 *     fixed tree (2 KB from L2 per block) for the denominator.
 * A target outside [0, C) that is not ignore_index writes zeros and lowers
 * the bad-label flag to -1 - its position (runtime/plan.c reports it after
 * the step, as for Gather's indices); the flag's atomicMin is the only
 * atomic, and its result does not depend on the order.
 */
#include "codegen/emit_internal.h"

/* Blocks of a partials kernel: one block of the next kernel adds them. */
#define NLL_PARTS BLOCK

typedef struct nll_geom {
  int64_t n, c, dd, m; /* N, C, D, M = N * D */
  int X, T, W, dY, Y;  /* value ids (-1: none) */
  int mean, none;
  int64_t ignore;
} nll_geom;

static void geom_of(const gcc_graph *g, const gcc_node *nd, int grad, nll_geom *q) {
  const gcc_shape *x = &g->values[grad ? nd->outputs[0] : nd->inputs[0]].shape;
  q->n = x->dims[0];
  q->c = x->dims[1];
  q->dd = 1;
  for (int i = 2; i < x->ndim; i++)
    q->dd *= x->dims[i];
  q->m = q->n * q->dd;
  q->dY = grad ? nd->inputs[0] : -1;
  q->X = grad ? -1 : nd->inputs[0];
  q->T = nd->inputs[1];
  q->W = nd->n_inputs > 2 ? nd->inputs[2] : -1;
  q->Y = nd->outputs[0];
  const char *r = nd->av[grad ? NLL_GRAD_REDUCTION : NLL_REDUCTION].s;
  q->mean = strcmp(r, "mean") == 0;
  q->none = strcmp(r, "none") == 0;
  q->ignore = nd->av[grad ? NLL_GRAD_IGNORE_INDEX : NLL_IGNORE_INDEX].i;
}

/* Kernel `k` renamed "<name><suffix>" (a node's kernels need distinct names). */
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

static gcc_status oom(emitter *e) {
  return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
}

static void target_param(emitter *e, sig *s, const nll_geom *q) {
  param(e, s, GCC_KARG_INPUT, q->T,
        vdt(e->g, q->T) == GCC_DT_INT32 ? "const int*" : "const long long*", "target");
  if (q->W >= 0)
    param(e, s, GCC_KARG_INPUT, q->W, "const float*", "weight");
}

/* The constants, then per target i: `t`, `ign` (ignored) and `bad` (outside
 * [0, C), not ignored). The ignore test is left out when none is set. */
static void emit_consts(emitter *e, const nll_geom *q) {
  out(&e->src,
      "  const long long N = %" PRId64 "LL, C = %" PRId64 "LL, D = %" PRId64 "LL, M = %" PRId64
      "LL;\n"
      "  (void)N; (void)D;\n",
      q->n, q->c, q->dd, q->m);
}

static void emit_target(emitter *e, const nll_geom *q, const char *i) {
  out(&e->src, "    const long long t = (long long)target[%s];\n", i);
  if (q->ignore == NLL_NO_IGNORE)
    out(&e->src, "    const bool ign = false;\n");
  else
    out(&e->src, "    const bool ign = t == %" PRId64 "LL;\n", q->ignore);
  out(&e->src, "    const bool bad = !ign && (t < 0 || t >= C);\n");
}

static const char *wt(const nll_geom *q) {
  return q->W >= 0 ? "(double)weight[t]" : "1.0";
}

/* The first kernel of a reduction: per block, in a fixed tree, the sum of
 * the losses (with_loss) and of the weights of the targets not ignored,
 * into scratch[b] (losses) and scratch[NLL_PARTS + b] (weights). */
static gcc_status emit_partials(emitter *e, int gi, const gcc_node *nd, const nll_geom *q,
                                int with_loss, int *blocks) {
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k || !suffix_kernel(k, "_partials"))
    return oom(e);
  set_grid(e, k, q->m);
  if (k->grid_dim > NLL_PARTS)
    k->grid_dim = NLL_PARTS;
  *blocks = k->grid_dim;
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  if (with_loss)
    param(e, &s, GCC_KARG_INPUT, q->X, "const float*", "in");
  target_param(e, &s, q);
  param(e, &s, GCC_KARG_SCRATCH, -1, "double*", "partial");
  param(e, &s, GCC_KARG_BAD_LABEL, -1, "int*", "bad_label");
  out(&e->src, ") {\n");
  if (!s.ok)
    return oom(e);
  comment_nodes(e, &e->g->groups[gi]);
  out(&e->src,
      "  /* per thread in float64 over a grid-stride loop, then a fixed tree per block */\n"
      "  __shared__ double s_l[%d], s_w[%d];\n",
      BLOCK, BLOCK);
  emit_consts(e, q);
  out(&e->src, "  double al = 0.0, aw = 0.0;\n"
               "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
               "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < M; "
               "i += stride) {\n");
  emit_target(e, q, "i");
  out(&e->src,
      "    if (bad) { atomicMin(bad_label, -1 - (int)(i < 0x7ffffffeLL ? i : 0x7ffffffeLL)); "
      "continue; }\n"
      "    if (ign) continue;\n"
      "    const double w = %s;\n"
      "    aw += w;\n",
      wt(q));
  if (with_loss)
    out(&e->src, "    al += -w * (double)in[((i / D) * C + t) * D + i %% D];\n");
  out(&e->src,
      "  }\n"
      "  s_l[threadIdx.x] = al;\n  s_w[threadIdx.x] = aw;\n"
      "  __syncthreads();\n"
      "  for (int h = %d; h > 0; h >>= 1) {\n"
      "    if ((int)threadIdx.x < h) { s_l[threadIdx.x] += s_l[threadIdx.x + h]; "
      "s_w[threadIdx.x] += s_w[threadIdx.x + h]; }\n"
      "    __syncthreads();\n"
      "  }\n"
      "  if (threadIdx.x == 0) { partial[blockIdx.x] = s_l[0]; partial[%d + blockIdx.x] = "
      "s_w[0]; }\n"
      "}\n",
      BLOCK / 2, NLL_PARTS);
  (void)nd;
  k->scratch_bytes = (size_t)(2 * NLL_PARTS) * sizeof(double);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* Adds the `blocks` partials at partial[off ...] in a fixed tree over the
 * block's threads into `var` (every thread gets the same bits). */
static void emit_tree(emitter *e, int blocks, const char *off, const char *var) {
  out(&e->src,
      "  __shared__ double s_p[%d];\n"
      "  s_p[threadIdx.x] = (int)threadIdx.x < %d ? partial[%s + threadIdx.x] : 0.0;\n"
      "  __syncthreads();\n"
      "  for (int h = %d; h > 0; h >>= 1) {\n"
      "    if ((int)threadIdx.x < h) s_p[threadIdx.x] += s_p[threadIdx.x + h];\n"
      "    __syncthreads();\n"
      "  }\n"
      "  const double %s = s_p[0];\n",
      BLOCK, blocks, off, BLOCK / 2, var);
}

gcc_status gcc_emit_nll_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  nll_geom q;
  geom_of(g, nd, 0, &q);
  int blocks = 0;
  if (!q.none)
    GCC_TRY(emit_partials(e, gi, nd, &q, 1, &blocks));
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return oom(e);
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  if (q.none) {
    param(e, &s, GCC_KARG_INPUT, q.X, "const float*", "in");
    target_param(e, &s, &q);
    param(e, &s, GCC_KARG_OUTPUT, q.Y, "float*", "loss");
    param(e, &s, GCC_KARG_BAD_LABEL, -1, "int*", "bad_label");
  } else {
    param(e, &s, GCC_KARG_SCRATCH, -1, "const double*", "partial");
    param(e, &s, GCC_KARG_OUTPUT, q.Y, "float*", "loss");
  }
  out(&e->src, ") {\n");
  if (!s.ok)
    return oom(e);
  comment_nodes(e, &g->groups[gi]);
  if (q.none) {
    emit_consts(e, &q);
    out(&e->src, "  /* reduction none: a thread per target */\n"
                 "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
                 "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < M; "
                 "i += stride) {\n");
    emit_target(e, &q, "i");
    out(&e->src,
        "    if (bad) atomicMin(bad_label, -1 - (int)(i < 0x7ffffffeLL ? i : 0x7ffffffeLL));\n"
        "    loss[i] = ign || bad ? 0.0f : (float)(-%s * (double)in[((i / D) * C + t) * D + i %% "
        "D]);\n"
        "  }\n}\n",
        wt(&q));
    set_grid(e, k, q.m);
  } else {
    out(&e->src,
        "  /* the %d blocks' partial losses and weights in a fixed tree (float64) */\n"
        "  __shared__ double s_l[%d], s_w[%d];\n"
        "  if (blockIdx.x != 0) return;\n"
        "  s_l[threadIdx.x] = (int)threadIdx.x < %d ? partial[threadIdx.x] : 0.0;\n"
        "  s_w[threadIdx.x] = (int)threadIdx.x < %d ? partial[%d + threadIdx.x] : 0.0;\n"
        "  __syncthreads();\n"
        "  for (int h = %d; h > 0; h >>= 1) {\n"
        "    if ((int)threadIdx.x < h) { s_l[threadIdx.x] += s_l[threadIdx.x + h]; "
        "s_w[threadIdx.x] += s_w[threadIdx.x + h]; }\n"
        "    __syncthreads();\n"
        "  }\n"
        "  if (threadIdx.x == 0) loss[0] = (float)(%s);\n}\n",
        blocks, BLOCK, BLOCK, blocks, blocks, NLL_PARTS, BLOCK / 2,
        q.mean ? "s_l[0] / s_w[0]" : "s_l[0]");
    k->single_block = 1;
    k->grid_dim = 1;
    k->work_items = blocks;
    k->scratch_bytes = (size_t)(2 * NLL_PARTS) * sizeof(double);
  }
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

gcc_status gcc_emit_nll_grad_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  nll_geom q;
  geom_of(g, nd, 1, &q);
  int blocks = 0;
  if (q.mean)
    GCC_TRY(emit_partials(e, gi, nd, &q, 0, &blocks));
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return oom(e);
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, q.dY, "const float*", "dy");
  target_param(e, &s, &q);
  if (q.mean)
    param(e, &s, GCC_KARG_SCRATCH, -1, "const double*", "partial");
  param(e, &s, GCC_KARG_OUTPUT, q.Y, "float*", "dx");
  param(e, &s, GCC_KARG_BAD_LABEL, -1, "int*", "bad_label");
  out(&e->src, ") {\n");
  if (!s.ok)
    return oom(e);
  comment_nodes(e, &g->groups[gi]);
  emit_consts(e, &q);
  if (q.mean) {
    out(&e->src, "  /* the mean's denominator: the %d partial weight sums in a fixed tree */\n",
        blocks);
    char off[32];
    snprintf(off, sizeof off, "%d", NLL_PARTS);
    emit_tree(e, blocks, off, "wsum");
    out(&e->src, "  const double g0 = (double)dy[0] / wsum;\n");
  } else if (!q.none) {
    out(&e->src, "  const double g0 = (double)dy[0];\n");
  }
  int64_t total = q.m * q.c;
  out(&e->src,
      "  /* a thread per element of dInput (N, C, D) */\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < %" PRId64
      "LL; e += stride) {\n"
      "    const long long j = e %% D, c = (e / D) %% C, i = (e / (C * D)) * D + j;\n",
      total);
  emit_target(e, &q, "i");
  out(&e->src,
      "    if (bad && c == 0) atomicMin(bad_label, -1 - (int)(i < 0x7ffffffeLL ? i : "
      "0x7ffffffeLL));\n"
      "    dx[e] = ign || bad || c != t ? 0.0f : (float)(-%s * %s);\n"
      "  }\n}\n",
      wt(&q), q.none ? "(double)dy[i]" : "g0");
  set_grid(e, k, total);
  if (q.mean)
    k->scratch_bytes = (size_t)(2 * NLL_PARTS) * sizeof(double);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}
