/*
 * emit_layernorm.c - CUDA C for LayerNormalization and LayerNormGrad:
 * a block per row with parallel, deterministic reductions, and the column
 * sums of dScale / dB over many blocks.
 * See emit.h for the conventions of the generated source.
 *
 * Legend: X seen as [ROWS, D] (graph/ops.h gcc_layer_norm_dims), a row r of
 * D elements; xhat = (x - mean_r) rstd_r with the row's mean and biased
 * variance, rstd_r = 1 / sqrtf(var_r + eps).
 *
 * Row reductions: rows grid-stride over the blocks; inside a row 256 lanes
 * (LN_LANES) take every 256th element, lane l run by thread l % blockDim.x,
 * and the lanes' float32 sums are added in a fixed tree in shared memory:
 * what each lane sums and the tree depend on the code only, so the bits are
 * the same for any grid and block, run after run (no atomics). The mean is
 * the sum / D, the variance the sum of squared deviations / D (two passes
 * over the row, the second from L1/L2).
 *
 * Column sums (dScale = sum_r dY xhat, dB = sum_r dY): the rows are cut into
 * P chunks of CH consecutive rows (P fixed at code generation from ROWS, D
 * and the SM count: about 8 blocks per SM); work item w = p * T + t is chunk
 * p of column tile t (256 columns, one per lane: coalesced loads), its lane
 * sums its column over the chunk's rows in row order into the plan's scratch
 * (GCC_KARG_SCRATCH); the last kernel adds a column's P partials in chunk
 * order, one thread a column.
 *
 * Kernels per group (launched in this order, the last named after the
 * group):
 *   LayerNormalization:     <group>           statistics (Mean, InvStdDev when
 *                                             the node has them) and Y, a block
 *                                             per row
 *   LayerNormGrad dX:       <group>_stats     mean and rstd of every row into
 *                                             scratch[2 r], scratch[2 r + 1]
 *                           <group>           mean(g), mean(g xhat) per row, dX
 *   LayerNormGrad dScale:   <group>_stats, <group>_part, <group> (one thread a column)
 *   LayerNormGrad dB:       <group>_part (no statistics), <group>
 */
#include "codegen/emit_internal.h"

#define LN_LANES 256

typedef struct ln_geo {
  int64_t rows, d;  /* X as [rows, D] */
  int64_t t;        /* column tiles of LN_LANES */
  int64_t p, ch;    /* row chunks of the column sums, rows per chunk */
  int64_t part_off; /* floats of scratch before the partials (2 * rows) */
} ln_geo;

static void ln_geometry(emitter *e, const gcc_node *nd, int xin, ln_geo *q) {
  gcc_layer_norm_dims(&e->g->values[nd->inputs[xin]].shape, nd->av[LN_AXIS].i, &q->rows, &q->d,
                      NULL);
  q->t = (q->d + LN_LANES - 1) / LN_LANES;
  int64_t sm = e->sm_count > 0 ? e->sm_count : 1, target = 8 * sm;
  int64_t p = (target + q->t - 1) / q->t, most = (q->rows + 3) / 4; /* >= 4 rows a chunk */
  if (p > most)
    p = most;
  if (p < 1)
    p = 1;
  q->ch = (q->rows + p - 1) / p;
  if (q->ch < 1)
    q->ch = 1;
  q->p = (q->rows + q->ch - 1) / q->ch;
  if (q->p < 1)
    q->p = 1;
  q->part_off = 2 * q->rows;
}

/* A kernel of group `gi` named "<group><suffix>"; begins its signature. */
static gcc_status ln_kernel(emitter *e, int gi, const char *suffix, sig *s) {
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  if (suffix[0]) {
    size_t len = strlen(k->name) + strlen(suffix) + 1;
    char *nm = malloc(len);
    if (!nm)
      return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
    snprintf(nm, len, "%s%s", k->name, suffix);
    free(k->name);
    k->name = nm;
  }
  *s = (sig){.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  return GCC_OK;
}

static gcc_status ln_open(emitter *e, int gi, sig *s) {
  out(&e->src, ") {\n");
  if (!s->ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &e->g->groups[gi]);
  return GCC_OK;
}

static void ln_close(emitter *e, sig *s, int64_t work, size_t scratch) {
  set_grid(e, s->k, work);
  s->k->scratch_bytes = scratch;
  emit_wrapper(e, s->k, s->types);
}

static size_t ln_scratch(const ln_geo *q, int with_parts) {
  return (size_t)(q->part_off + (with_parts ? q->p * q->d : 0)) * sizeof(float);
}

/* The fixed tree over the LN_LANES lanes: `merge` a statement on lanes l
 * and l + h. */
static void ln_tree(emitter *e, const char *merge) {
  out(&e->src,
      "    __syncthreads();\n"
      "    for (int h = %d; h > 0; h >>= 1) {\n"
      "      for (int l = threadIdx.x; l < h; l += blockDim.x) { %s }\n"
      "      __syncthreads();\n"
      "    }\n",
      LN_LANES / 2, merge);
}

/* Statements of row r (`xr` its first element): the row's mean and rstd
 * into the shared s_stat[0], s_stat[1] and the locals mean, rstd. */
static void ln_row_stats(emitter *e, const ln_geo *q, const char *eps) {
  out(&e->src,
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      float acc = 0.0f;\n"
      "      for (long long j = l; j < %" PRId64 "LL; j += %d) acc += xr[j];\n"
      "      s_a[l] = acc;\n"
      "    }\n",
      LN_LANES, q->d, LN_LANES);
  ln_tree(e, "s_a[l] += s_a[l + h];");
  out(&e->src,
      "    if (threadIdx.x == 0) s_stat[0] = s_a[0] / %" PRId64 ".0f;\n"
      "    __syncthreads();\n"
      "    const float mean = s_stat[0];\n"
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      float acc = 0.0f;\n"
      "      for (long long j = l; j < %" PRId64 "LL; j += %d) { const float t = xr[j] - mean; "
      "acc += t * t; }\n"
      "      s_a[l] = acc;\n"
      "    }\n",
      q->d, LN_LANES, q->d, LN_LANES);
  ln_tree(e, "s_a[l] += s_a[l + h];");
  out(&e->src,
      "    if (threadIdx.x == 0) s_stat[1] = 1.0f / sqrtf(s_a[0] / %" PRId64 ".0f + %s);\n"
      "    __syncthreads();\n"
      "    const float rstd = s_stat[1];\n",
      q->d, eps);
}

gcc_status gcc_emit_layer_norm_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_node *nd = &e->g->nodes[ni];
  ln_geo q;
  ln_geometry(e, nd, 0, &q);
  const int has_b = nd->n_inputs > 2 && nd->inputs[2] >= 0;
  char eps[40];
  float_lit(eps, sizeof eps, nd->av[LN_EPSILON].f);
  sig s;
  GCC_TRY(ln_kernel(e, gi, "", &s));
  param(e, &s, GCC_KARG_INPUT, nd->inputs[0], "const float*", "in0");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[1], "const float*", "in1");
  if (has_b)
    param(e, &s, GCC_KARG_INPUT, nd->inputs[2], "const float*", "in2");
  static const char *const outs[3] = {"out0", "out1", "out2"};
  for (int k = 0; k < nd->n_outputs && k < 3; k++)
    param(e, &s, GCC_KARG_OUTPUT, nd->outputs[k], "float*", outs[k]);
  GCC_TRY(ln_open(e, gi, &s));
  out(&e->src,
      "  /* X [%" PRId64 ", %" PRId64 "]: a block per row */\n"
      "  __shared__ float s_a[%d];\n  __shared__ float s_stat[2];\n"
      "  for (long long r = blockIdx.x; r < %" PRId64 "LL; r += gridDim.x) {\n"
      "    const float *xr = in0 + r * %" PRId64 "LL;\n",
      q.rows, q.d, LN_LANES, q.rows, q.d);
  ln_row_stats(e, &q, eps);
  if (nd->n_outputs > LN_OUT_MEAN)
    out(&e->src, "    if (threadIdx.x == 0) out1[r] = mean;\n");
  if (nd->n_outputs > LN_OUT_INV_STD_DEV)
    out(&e->src, "    if (threadIdx.x == 0) out2[r] = rstd;\n");
  out(&e->src,
      "    for (long long j = threadIdx.x; j < %" PRId64 "LL; j += blockDim.x) out0[r * %" PRId64
      "LL + j] = (xr[j] - mean) * rstd * in1[j]%s;\n"
      "    __syncthreads();\n  }\n}\n",
      q.d, q.d, has_b ? " + in2[j]" : "");
  ln_close(e, &s, q.rows * LN_LANES, 0);
  return GCC_OK;
}

/* <group>_stats: mean and rstd of every row of X into scratch[2 r ..] */
static gcc_status ln_stats_kernel(emitter *e, int gi, int xv, const ln_geo *q, const char *eps,
                                  size_t scratch) {
  sig s;
  GCC_TRY(ln_kernel(e, gi, "_stats", &s));
  param(e, &s, GCC_KARG_INPUT, xv, "const float*", "x");
  param(e, &s, GCC_KARG_SCRATCH, -1, "float*", "scratch");
  GCC_TRY(ln_open(e, gi, &s));
  out(&e->src,
      "  /* X [%" PRId64 ", %" PRId64 "]: a block per row */\n"
      "  __shared__ float s_a[%d];\n  __shared__ float s_stat[2];\n"
      "  for (long long r = blockIdx.x; r < %" PRId64 "LL; r += gridDim.x) {\n"
      "    const float *xr = x + r * %" PRId64 "LL;\n",
      q->rows, q->d, LN_LANES, q->rows, q->d);
  ln_row_stats(e, q, eps);
  out(&e->src, "    if (threadIdx.x == 0) { scratch[2 * r] = mean; scratch[2 * r + 1] = rstd; }\n"
               "    __syncthreads();\n  }\n}\n");
  ln_close(e, &s, q->rows * LN_LANES, scratch);
  return GCC_OK;
}

/* <group>_part: chunk p's sums of column tile t into scratch[part_off + p D + j] */
static gcc_status ln_part_kernel(emitter *e, int gi, const gcc_node *nd, const ln_geo *q,
                                 int with_xhat, size_t scratch) {
  sig s;
  GCC_TRY(ln_kernel(e, gi, "_part", &s));
  param(e, &s, GCC_KARG_INPUT, nd->inputs[0], "const float*", "dy");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[1], "const float*", "x");
  param(e, &s, GCC_KARG_SCRATCH, -1, "float*", "scratch");
  GCC_TRY(ln_open(e, gi, &s));
  out(&e->src,
      "  /* [%" PRId64 ", %" PRId64 "]: %" PRId64 " chunks of %" PRId64 " rows x %" PRId64
      " column tiles */\n"
      "  (void)x;\n"
      "  for (long long w = blockIdx.x; w < %" PRId64 "LL; w += gridDim.x) {\n"
      "    const long long p = w / %" PRId64 "LL, t = w %% %" PRId64 "LL;\n"
      "    const long long r0 = p * %" PRId64 "LL, r1 = r0 + %" PRId64 "LL < %" PRId64
      "LL ? r0 + %" PRId64 "LL : %" PRId64 "LL;\n"
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      const long long j = t * %d + l;\n"
      "      if (j >= %" PRId64 "LL) continue;\n"
      "      float acc = 0.0f;\n"
      "      for (long long r = r0; r < r1; r++) {\n"
      "        const long long at = r * %" PRId64 "LL + j;\n",
      q->rows, q->d, q->p, q->ch, q->t, q->p * q->t, q->t, q->t, q->ch, q->ch, q->rows, q->ch,
      q->rows, LN_LANES, LN_LANES, q->d, q->d);
  if (with_xhat)
    out(&e->src, "        acc += dy[at] * ((x[at] - scratch[2 * r]) * scratch[2 * r + 1]);\n");
  else
    out(&e->src, "        acc += dy[at];\n");
  out(&e->src,
      "      }\n"
      "      scratch[%" PRId64 "LL + p * %" PRId64 "LL + j] = acc;\n"
      "    }\n  }\n}\n",
      q->part_off, q->d);
  ln_close(e, &s, q->p * q->t * LN_LANES, scratch);
  return GCC_OK;
}

gcc_status gcc_emit_layer_norm_grad_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_node *nd = &e->g->nodes[ni];
  ln_geo q;
  ln_geometry(e, nd, 1, &q);
  const int64_t which = nd->av[LN_GRAD_OUTPUT].i;
  char eps[40];
  float_lit(eps, sizeof eps, nd->av[LN_GRAD_EPSILON].f);
  const size_t scratch = ln_scratch(&q, which != 0);
  if (which != 2)
    GCC_TRY(ln_stats_kernel(e, gi, nd->inputs[1], &q, eps, scratch));
  if (which != 0)
    GCC_TRY(ln_part_kernel(e, gi, nd, &q, which == 1, scratch));
  sig s;
  GCC_TRY(ln_kernel(e, gi, "", &s));
  /* in0 = dY, in1 = X, in2 = Scale */
  param(e, &s, GCC_KARG_INPUT, nd->inputs[0], "const float*", "in0");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[1], "const float*", "in1");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[2], "const float*", "in2");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], "float*", "out0");
  param(e, &s, GCC_KARG_SCRATCH, -1, "const float*", "scratch");
  GCC_TRY(ln_open(e, gi, &s));
  out(&e->src, "  (void)in0; (void)in1; (void)in2;\n");
  if (which != 0) { /* one thread a column: the chunks' partials in chunk order */
    out(&e->src,
        "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
        "  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < %" PRId64
        "LL; j += stride) {\n"
        "    float v = 0.0f;\n"
        "    for (long long p = 0; p < %" PRId64 "LL; p++) v += scratch[%" PRId64
        "LL + p * %" PRId64 "LL + j];\n"
        "    out0[j] = v;\n  }\n}\n",
        q.d, q.p, q.part_off, q.d);
    ln_close(e, &s, q.d, scratch);
    return GCC_OK;
  }
  /* dX = rstd (g - mean(g) - xhat mean(g xhat)), g = dY Scale */
  out(&e->src,
      "  /* [%" PRId64 ", %" PRId64 "]: a block per row */\n"
      "  __shared__ float s_a[%d], s_b[%d];\n  __shared__ float s_stat[2];\n"
      "  for (long long r = blockIdx.x; r < %" PRId64 "LL; r += gridDim.x) {\n"
      "    const float *gr = in0 + r * %" PRId64 "LL, *xr = in1 + r * %" PRId64 "LL;\n"
      "    const float mean = scratch[2 * r], rstd = scratch[2 * r + 1];\n"
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      float a1 = 0.0f, a2 = 0.0f;\n"
      "      for (long long j = l; j < %" PRId64 "LL; j += %d) {\n"
      "        const float g = gr[j] * in2[j];\n"
      "        a1 += g; a2 += g * ((xr[j] - mean) * rstd);\n"
      "      }\n"
      "      s_a[l] = a1; s_b[l] = a2;\n"
      "    }\n",
      q.rows, q.d, LN_LANES, LN_LANES, q.rows, q.d, q.d, LN_LANES, q.d, LN_LANES);
  ln_tree(e, "s_a[l] += s_a[l + h]; s_b[l] += s_b[l + h];");
  out(&e->src,
      "    if (threadIdx.x == 0) { s_stat[0] = s_a[0] / %" PRId64 ".0f; s_stat[1] = s_b[0] / "
      "%" PRId64 ".0f; }\n"
      "    __syncthreads();\n"
      "    const float mg = s_stat[0], mgx = s_stat[1];\n"
      "    for (long long j = threadIdx.x; j < %" PRId64 "LL; j += blockDim.x) {\n"
      "      const float xhat = (xr[j] - mean) * rstd;\n"
      "      out0[r * %" PRId64 "LL + j] = rstd * (gr[j] * in2[j] - mg - xhat * mgx);\n"
      "    }\n"
      "    __syncthreads();\n  }\n}\n",
      q.d, q.d, q.d, q.d);
  ln_close(e, &s, q.rows * LN_LANES, scratch);
  return GCC_OK;
}
