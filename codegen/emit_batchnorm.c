/*
 * emit_batchnorm.c - CUDA C for BatchNormalization (evaluation and training
 * forms) and BatchNormGrad: parallel, deterministic reductions.
 * See emit.h for the conventions of the generated source.
 *
 * Legend: X [N, C, S...], S the product of the spatial dims, M = N * S the
 * elements of one channel. A channel's M elements are read in units of V
 * floats (V = 4, float4 loads, when X is float32 and S % 4 == 0: every unit
 * is then 16-byte aligned in a 16-byte aligned tensor; else V = 1), cut into
 * P chunks of CH units (P and CH fixed at code generation from C, M and the
 * SM count: about 8 blocks per SM in all). Work item w = c * P + p is chunk p
 * of channel c; blocks take work items grid-stride, and inside a work item
 * 256 lanes (BN_LANES) take every 256th unit, each lane a loop of a thread
 * of the block (lane l is run by thread l % blockDim.x). So what each lane
 * sums, and the tree that combines the lanes, depend on the code only: the
 * bits of every result are the same for any grid and block (run-to-run
 * deterministic, no atomics).
 *
 * Statistics: each lane runs Welford's update in float32 (count, mean, M2)
 * over its units; the 256 lanes merge pairwise in a fixed tree (Chan et
 * al.'s formula) into the work item's partial, stored in the plan's scratch
 * (GCC_KARG_SCRATCH); the next kernel merges a channel's P partials in
 * index order. Gradients: (sum dy, sum dy * (x - mean)) per lane in
 * float32, the same fixed tree, partials merged in index order.
 *
 * Kernels per group (launched in this order, the last named after the
 * group):
 *   BatchNormalization, evaluation: <group>            y = x * k + b0 per work item
 *   BatchNormalization, training:   <group>_stats      partial statistics of X
 *                                   <group>            merge, running statistics
 *                                                      (work items of chunk 0), y
 *   BatchNormGrad dX:      <group>_stats, <group>_sums, <group> (dx, elementwise)
 *   BatchNormGrad dscale:  <group>_stats, <group>_sums, <group> (one thread a channel)
 *   BatchNormGrad dB:      <group>_sums (no statistics), <group> (one thread a channel)
 *
 * NHWC (X laid out channels-last by the layout pass, passes/layout.c): a
 * channel's M elements lie C floats apart, so a work item is a tile of CW
 * channels (a power of two, at most 32, covering min(C, 32)) by a chunk of
 * CH rows (a row: the C channels of one (n, h, w)), w = t * P + p. Its 256
 * lanes are RL = 256 / CW rows by CW channels, lane l = r * CW + j: the
 * threads of a warp read consecutive channels of consecutive rows
 * (coalesced), lane (r, j) takes rows u0 + r, u0 + r + RL, ... of channel
 * t * CW + j, and the RL lanes of a channel merge in a fixed tree (r with r
 * + s, s = RL / 2, ..., 1). Every channel still gets P partials, stored at
 * the same places as in NCHW (scratch[3 (c P + p)] ...), merged in index
 * order: deterministic, and the same kernels after the partials.
 */
#include "codegen/emit_internal.h"

#define BN_LANES 256

/* The geometry of a BatchNormalization / BatchNormGrad node. */
typedef struct bn_geo {
  int64_t n, c, s, m; /* N, C, S, M = N * S */
  int v;              /* elements per unit: 4 (float4) or 1 */
  int64_t su, u;      /* units per sample (S / V) and per channel (M / V) */
  int64_t p, ch;      /* chunks per channel, units per chunk */
  int64_t items;      /* work items: C * P (NHWC: CT * P) */
  int64_t parts;      /* partials: C * P */
  gcc_dtype tx;       /* X's dtype */
  int nhwc;           /* X (and dY, dX, Y) channels-last */
  int64_t cw, rl, ct; /* NHWC: channels and rows of a work item's lanes; channel tiles */
} bn_geo;

static void bn_geometry(emitter *e, const gcc_node *nd, int xin, bn_geo *q) {
  const gcc_shape *X = &e->g->values[nd->inputs[xin]].shape;
  q->n = X->dims[0];
  q->c = X->dims[1];
  q->s = 1;
  for (int k = 2; k < X->ndim; k++)
    q->s *= X->dims[k];
  q->m = q->n * q->s;
  q->tx = vdt(e->g, nd->inputs[xin]);
  q->v = !is16(q->tx) && q->s % 4 == 0 ? 4 : 1;
  q->su = q->s / q->v;
  q->u = q->m / q->v;
  /* about 8 blocks of 256 threads per SM over all channels, and at least 4
   * units per lane in a chunk */
  int64_t sm = e->sm_count > 0 ? e->sm_count : 1, target = 8 * sm;
  int64_t p = (target + q->c - 1) / q->c, most = (q->u + 4 * BN_LANES - 1) / (4 * BN_LANES);
  if (p > most)
    p = most;
  if (p < 1)
    p = 1;
  q->ch = (q->u + p - 1) / p;
  if (q->ch < 1)
    q->ch = 1;
  q->p = (q->u + q->ch - 1) / q->ch;
  if (q->p < 1)
    q->p = 1;
  q->items = q->c * q->p;
  q->parts = q->items;
  const gcc_value *xv = &e->g->values[nd->inputs[xin]];
  q->nhwc = xv->layout == GCC_LAYOUT_NHWC && X->ndim == 4;
  if (!q->nhwc)
    return;
  q->v = 1;
  q->su = q->s;
  q->u = q->m;
  for (q->cw = 1; q->cw < q->c && q->cw < 32; q->cw *= 2) {
  }
  q->rl = BN_LANES / q->cw;
  q->ct = (q->c + q->cw - 1) / q->cw;
  p = (target + q->ct - 1) / q->ct;
  most = (q->m + 4 * q->rl - 1) / (4 * q->rl);
  if (p > most)
    p = most;
  if (p < 1)
    p = 1;
  q->ch = (q->m + p - 1) / p;
  if (q->ch < 1)
    q->ch = 1;
  q->p = (q->m + q->ch - 1) / q->ch;
  if (q->p < 1)
    q->p = 1;
  q->items = q->ct * q->p;
  q->parts = q->c * q->p;
}

/* NHWC: the work-item loop over (tile t, chunk p) with the chunk's rows
 * [u0, u1). */
static void bn_tiles_open(emitter *e, const bn_geo *q) {
  out(&e->src,
      "  for (long long w = blockIdx.x; w < %" PRId64 "LL; w += gridDim.x) {\n"
      "    const long long t = w / %" PRId64 "LL, p = w %% %" PRId64 "LL;\n"
      "    const long long u0 = p * %" PRId64 "LL, u1 = u0 + %" PRId64 "LL < %" PRId64
      "LL ? u0 + %" PRId64 "LL : %" PRId64 "LL;\n",
      q->items, q->p, q->p, q->ch, q->ch, q->m, q->ch, q->m);
}

/* NHWC: opens the lanes' loop: lane l = r * CW + j on channel c, its rows
 * u (declares `at`, the element u * C + c, inside "if (c < C)"). */
static void bn_lanes_open(emitter *e, const bn_geo *q, const char *init) {
  out(&e->src,
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      const long long j = l %% %" PRId64 "LL, r = l / %" PRId64 "LL, c = t * %" PRId64
      "LL + j;\n"
      "      %s\n"
      "      if (c < %" PRId64 "LL)\n"
      "      for (long long u = u0 + r; u < u1; u += %" PRId64 "LL) {\n"
      "        const long long at = u * %" PRId64 "LL + c;\n",
      BN_LANES, q->cw, q->cw, q->cw, init, q->c, q->rl, q->c);
}

/* NHWC: the RL lanes of each channel merged by the fixed tree with `merge`
 * (a statement on lanes l and l + h). */
static void bn_rows_tree(emitter *e, const bn_geo *q, const char *merge) {
  out(&e->src,
      "    __syncthreads();\n"
      "    for (long long h = %" PRId64 "LL; h > 0; h >>= 1) {\n"
      "      for (long long s = h * %" PRId64 "LL, l = threadIdx.x; l < s; l += blockDim.x) {\n"
      "        const long long m = l + s; %s }\n"
      "      __syncthreads();\n"
      "    }\n",
      q->rl / 2, q->cw, merge);
}

/* NHWC: "for each channel j of the tile (c < C): { <body>" opened */
static void bn_channels_open(emitter *e, const bn_geo *q) {
  out(&e->src,
      "    for (long long j = threadIdx.x; j < %" PRId64 "LL; j += blockDim.x) {\n"
      "      const long long c = t * %" PRId64 "LL + j;\n"
      "      if (c >= %" PRId64 "LL) continue;\n",
      q->cw, q->cw, q->c);
}

/* The device helpers, once per translation unit (a preprocessor guard, so
 * the emitter keeps no state for it). */
static void bn_helpers(emitter *e) {
  out(&e->src,
      "#ifndef GCC_BN_HELPERS\n#define GCC_BN_HELPERS\n"
      "/* Welford's update of (count, mean, M2) by one value */\n"
      "__device__ __forceinline__ void gcc_bn_push(float *n, float *mean, float *m2, float v) {\n"
      "  *n += 1.0f;\n"
      "  const float d = v - *mean;\n"
      "  *mean += d / *n;\n"
      "  *m2 += d * (v - *mean);\n"
      "}\n"
      "/* Chan et al.'s merge of (nb, mb, qb) into (na, ma, qa) */\n"
      "__device__ __forceinline__ void gcc_bn_merge(float *na, float *ma, float *qa, float nb, "
      "float mb, float qb) {\n"
      "  if (nb == 0.0f) return;\n"
      "  const float n = *na + nb, d = mb - *ma, f = nb / n;\n"
      "  *ma += d * f;\n"
      "  *qa += qb + d * d * *na * f;\n"
      "  *na = n;\n"
      "}\n"
      "#endif\n\n");
}

/* A kernel of group `gi` named "<group><suffix>"; begins its signature. */
static gcc_status bn_kernel(emitter *e, int gi, const char *suffix, sig *s) {
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

static gcc_status bn_open(emitter *e, int gi, sig *s) {
  out(&e->src, ") {\n");
  if (!s->ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &e->g->groups[gi]);
  return GCC_OK;
}

static void bn_close(emitter *e, sig *s, int64_t work, size_t scratch) {
  set_grid(e, s->k, work);
  s->k->scratch_bytes = scratch;
  emit_wrapper(e, s->k, s->types);
}

/* The work-item loop: c, p, and the chunk's units [u0, u1). */
static void bn_items_open(emitter *e, const bn_geo *q) {
  out(&e->src,
      "  for (long long w = blockIdx.x; w < %" PRId64 "LL; w += gridDim.x) {\n"
      "    const long long c = w / %" PRId64 "LL, p = w %% %" PRId64 "LL;\n"
      "    const long long u0 = p * %" PRId64 "LL, u1 = u0 + %" PRId64 "LL < %" PRId64
      "LL ? u0 + %" PRId64 "LL : %" PRId64 "LL;\n",
      q->items, q->p, q->p, q->ch, q->ch, q->u, q->ch, q->u);
}

/* Loads of unit u of channel c: `x` and `y` (or NULL) as scalars
 * "<name>_0" .. "<name>_{V-1}" in the lane body `body` (printf format with
 * one %d: the element). Opens "for (long long u = <from>; u < u1; u +=
 * <step>) {" and declares the element address. */
static void bn_units_open(emitter *e, const bn_geo *q, const char *from, const char *step) {
  out(&e->src,
      "      for (long long u = %s; u < u1; u += %s) {\n"
      "        const long long b = u / %" PRId64 "LL, at = (b * %" PRId64 "LL + c) * %" PRId64
      "LL + (u - b * %" PRId64 "LL);\n",
      from, step, q->su, q->c, q->su, q->su);
}

/* float e<j> = element j of unit `at` of `name` (dtype t) */
static void bn_load(emitter *e, const bn_geo *q, const char *name, gcc_dtype t, const char *var) {
  if (q->v == 4)
    out(&e->src,
        "        const float4 %s4 = ((const float4 *)%s)[at];\n"
        "        const float %s[4] = {%s4.x, %s4.y, %s4.z, %s4.w};\n",
        var, name, var, var, var, var, var);
  else
    out(&e->src, "        const float %s[1] = {%s%s[at]%s};\n", var, ld_open(t), name, close16(t));
}

/* The 256 lanes' values s_a..s_<k> reduced by the fixed tree with `merge`
 * (a statement on lanes l and l + s). */
static void bn_tree(emitter *e, const char *merge) {
  out(&e->src,
      "    __syncthreads();\n"
      "    for (int s = %d; s > 0; s >>= 1) {\n"
      "      for (int l = threadIdx.x; l < s; l += blockDim.x) { %s }\n"
      "      __syncthreads();\n"
      "    }\n",
      BN_LANES / 2, merge);
}

/* <group>_stats: the work items' (count, mean, M2) of X into scratch[3 w ..] */
static gcc_status bn_stats_kernel(emitter *e, int gi, int xv, const bn_geo *q) {
  sig s;
  GCC_TRY(bn_kernel(e, gi, "_stats", &s));
  param(e, &s, GCC_KARG_INPUT, xv, in_type(q->tx), "x");
  param(e, &s, GCC_KARG_SCRATCH, -1, "float*", "scratch");
  GCC_TRY(bn_open(e, gi, &s));
  out(&e->src,
      "  /* X [%" PRId64 ", %" PRId64 ", %" PRId64 "]: %" PRId64 " chunks of %" PRId64
      " units of %d per channel */\n"
      "  __shared__ float s_n[%d], s_mean[%d], s_m2[%d];\n",
      q->n, q->c, q->s, q->p, q->ch, q->v, BN_LANES, BN_LANES, BN_LANES);
  if (q->nhwc) {
    bn_tiles_open(e, q);
    bn_lanes_open(e, q, "float n = 0.0f, mean = 0.0f, m2 = 0.0f;");
    out(&e->src,
        "        gcc_bn_push(&n, &mean, &m2, %sx[at]%s);\n"
        "      }\n"
        "      s_n[l] = n; s_mean[l] = mean; s_m2[l] = m2;\n"
        "    }\n",
        ld_open(q->tx), close16(q->tx));
    bn_rows_tree(e, q, "gcc_bn_merge(&s_n[l], &s_mean[l], &s_m2[l], s_n[m], s_mean[m], s_m2[m]);");
    bn_channels_open(e, q);
    out(&e->src,
        "      const long long o = 3 * (c * %" PRId64 "LL + p);\n"
        "      scratch[o] = s_n[j]; scratch[o + 1] = s_mean[j]; scratch[o + 2] = s_m2[j];\n"
        "    }\n"
        "    __syncthreads();\n  }\n}\n",
        q->p);
    bn_close(e, &s, q->items * BN_LANES, (size_t)(3 * q->parts) * sizeof(float));
    return GCC_OK;
  }
  bn_items_open(e, q);
  out(&e->src,
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      float n = 0.0f, mean = 0.0f, m2 = 0.0f;\n",
      BN_LANES);
  bn_units_open(e, q, "u0 + l", "256");
  bn_load(e, q, "x", q->tx, "xv");
  out(&e->src,
      "        for (int j = 0; j < %d; j++) gcc_bn_push(&n, &mean, &m2, xv[j]);\n"
      "      }\n"
      "      s_n[l] = n; s_mean[l] = mean; s_m2[l] = m2;\n"
      "    }\n",
      q->v);
  bn_tree(e, "gcc_bn_merge(&s_n[l], &s_mean[l], &s_m2[l], s_n[l + s], s_mean[l + s], s_m2[l + "
             "s]);");
  out(&e->src, "    if (threadIdx.x == 0) { scratch[3 * w] = s_n[0]; scratch[3 * w + 1] = "
               "s_mean[0]; scratch[3 * w + 2] = s_m2[0]; }\n"
               "    __syncthreads();\n  }\n}\n");
  bn_close(e, &s, q->items * BN_LANES, (size_t)(3 * q->parts) * sizeof(float));
  return GCC_OK;
}

/* Statements merging channel c's P partial statistics, in index order, into
 * `mean` and `var` (biased: M2 / M). */
static void bn_merge_stats(emitter *e, const bn_geo *q, const char *ind) {
  out(&e->src,
      "%sfloat sn = 0.0f, mean = 0.0f, sm2 = 0.0f;\n"
      "%sfor (long long j = c * %" PRId64 "LL; j < (c + 1) * %" PRId64
      "LL; j++) gcc_bn_merge(&sn, &mean, &sm2, scratch[3 * j], scratch[3 * j + 1], scratch[3 * j + "
      "2]);\n"
      "%sconst float var = sm2 / %" PRId64 ".0f;\n",
      ind, ind, q->p, q->p, ind, q->m);
}

gcc_status gcc_emit_batch_norm_kernel(emitter *e, int gi, int ni) {
  if (!gcc_lowering_of(e->g->nodes[ni].op)->kernel16)
    GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  bn_geo q;
  bn_geometry(e, nd, 0, &q);
  const int training = (int)nd->av[BN_TRAINING].i;
  gcc_dtype ty = vdt(g, nd->outputs[0]);
  bn_helpers(e);
  if (training)
    GCC_TRY(bn_stats_kernel(e, gi, nd->inputs[0], &q));
  char le[40], lm[40], lm1[40];
  float_lit(le, sizeof le, nd->av[BN_EPSILON].f);
  float_lit(lm, sizeof lm, nd->av[BN_MOMENTUM].f);
  float_lit(lm1, sizeof lm1, 1.0f - nd->av[BN_MOMENTUM].f);
  sig s;
  GCC_TRY(bn_kernel(e, gi, "", &s));
  /* in0 = X, in1 = scale, in2 = B, in3 = running_mean, in4 = running_var (updated in place in
   * training, as PyTorch's buffers) */
  const char *names[5] = {"in0", "in1", "in2", "in3", "in4"};
  for (int j = 0; j < 5; j++) {
    int v = nd->inputs[j];
    param(e, &s, GCC_KARG_INPUT, v,
          j == 0 ? in_type(q.tx) : (training && j >= 3 ? "float*" : "const float*"), names[j]);
  }
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], out_type(ty), "out0");
  if (training)
    param(e, &s, GCC_KARG_SCRATCH, -1, "const float*", "scratch");
  GCC_TRY(bn_open(e, gi, &s));
  if (q.nhwc) {
    out(&e->src, "  __shared__ float s_k[32], s_b[32];\n");
    bn_tiles_open(e, &q);
    bn_channels_open(e, &q);
  } else {
    out(&e->src, "  __shared__ float s_k, s_b;\n");
    bn_items_open(e, &q);
    out(&e->src, "    if (threadIdx.x == 0) {\n");
  }
  if (training) {
    bn_merge_stats(e, &q, "      ");
    /* the running variance takes the unbiased estimate, as PyTorch's */
    out(&e->src,
        "      if (p == 0) {\n"
        "        in3[c] = %s * in3[c] + %s * mean;\n"
        "        in4[c] = %s * in4[c] + %s * (var * %" PRId64 ".0f / %" PRId64 ".0f);\n"
        "      }\n",
        lm, lm1, lm, lm1, q.m, q.m > 1 ? q.m - 1 : 1);
  } else {
    out(&e->src, "      const float mean = in3[c], var = in4[c];\n");
  }
  if (q.nhwc) {
    out(&e->src,
        "      const float k = in1[c] / sqrtf(var + %s);\n"
        "      s_k[j] = k; s_b[j] = in2[c] - mean * k;\n"
        "    }\n"
        "    __syncthreads();\n"
        "    for (long long i = threadIdx.x; i < (u1 - u0) * %" PRId64 "LL; i += blockDim.x) {\n"
        "      const long long j = i %% %" PRId64 "LL, c = t * %" PRId64 "LL + j;\n"
        "      if (c >= %" PRId64 "LL) continue;\n"
        "      const long long at = (u0 + i / %" PRId64 "LL) * %" PRId64 "LL + c;\n"
        "      out0[at] = %s%sin0[at]%s * s_k[j] + s_b[j]%s;\n"
        "    }\n"
        "    __syncthreads();\n  }\n}\n",
        le, q.cw, q.cw, q.cw, q.c, q.cw, q.c, st_open(ty), ld_open(q.tx), close16(q.tx),
        close16(ty));
    bn_close(e, &s, q.items * BN_LANES, 0);
    return GCC_OK;
  }
  out(&e->src,
      "      const float k = in1[c] / sqrtf(var + %s);\n"
      "      s_k = k; s_b = in2[c] - mean * k;\n"
      "    }\n"
      "    __syncthreads();\n"
      "    const float k = s_k, b0 = s_b;\n",
      le);
  if (q.v == 4)
    out(&e->src,
        "    for (long long u = u0 + threadIdx.x; u < u1; u += blockDim.x) {\n"
        "      const long long b = u / %" PRId64 "LL, at = (b * %" PRId64 "LL + c) * %" PRId64
        "LL + (u - b * %" PRId64 "LL);\n"
        "      const float4 xv = ((const float4 *)in0)[at];\n"
        "      ((float4 *)out0)[at] = make_float4(xv.x * k + b0, xv.y * k + b0, xv.z * k + b0, "
        "xv.w * k + b0);\n"
        "    }\n",
        q.su, q.c, q.su, q.su);
  else
    out(&e->src,
        "    for (long long u = u0 + threadIdx.x; u < u1; u += blockDim.x) {\n"
        "      const long long b = u / %" PRId64 "LL, at = (b * %" PRId64 "LL + c) * %" PRId64
        "LL + (u - b * %" PRId64 "LL);\n"
        "      out0[at] = %s%sin0[at]%s * k + b0%s;\n"
        "    }\n",
        q.su, q.c, q.su, q.su, st_open(ty), ld_open(q.tx), close16(q.tx), close16(ty));
  out(&e->src, "    __syncthreads();\n  }\n}\n");
  bn_close(e, &s, q.items * BN_LANES, 0);
  return GCC_OK;
}

/* <group>_sums: per work item (sum dy, sum dy * (x - mean)) into
 * scratch[3 C P + 2 w ..]; without statistics (dB only) the second is 0. */
static gcc_status bn_sums_kernel(emitter *e, int gi, const gcc_node *nd, const bn_geo *q,
                                 int with_stats) {
  gcc_dtype tg = vdt(e->g, nd->inputs[0]);
  bn_geo qg = *q; /* dY has X's shape; float4 when both are float32 */
  sig s;
  GCC_TRY(bn_kernel(e, gi, "_sums", &s));
  param(e, &s, GCC_KARG_INPUT, nd->inputs[0], in_type(tg), "dy");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[1], in_type(q->tx), "x");
  param(e, &s, GCC_KARG_SCRATCH, -1, "float*", "scratch");
  GCC_TRY(bn_open(e, gi, &s));
  if (q->nhwc) {
    out(&e->src, "  __shared__ float s_dy[%d], s_dx[%d], s_mean[32];\n", BN_LANES, BN_LANES);
    bn_tiles_open(e, q);
    bn_channels_open(e, q);
    if (with_stats) {
      bn_merge_stats(e, q, "      ");
      out(&e->src, "      (void)var;\n      s_mean[j] = mean;\n    }\n");
    } else {
      out(&e->src, "      s_mean[j] = 0.0f;\n    }\n");
    }
    out(&e->src, "    __syncthreads();\n");
    char init[160];
    snprintf(init, sizeof init,
             "float sdy = 0.0f, sdx = 0.0f; const float mean = c < %" PRId64
             "LL ? s_mean[j] : 0.0f;",
             q->c);
    bn_lanes_open(e, q, init);
    out(&e->src,
        "        const float gv = %sdy[at]%s;\n"
        "        sdy += gv; sdx += gv * (%sx[at]%s - mean);\n"
        "      }\n"
        "      s_dy[l] = sdy; s_dx[l] = sdx;\n"
        "    }\n",
        ld_open(tg), close16(tg), ld_open(q->tx), close16(q->tx));
    bn_rows_tree(e, q, "s_dy[l] += s_dy[m]; s_dx[l] += s_dx[m];");
    bn_channels_open(e, q);
    out(&e->src,
        "      const long long o = %" PRId64 "LL + 2 * (c * %" PRId64 "LL + p);\n"
        "      scratch[o] = s_dy[j]; scratch[o + 1] = s_dx[j];\n"
        "    }\n"
        "    __syncthreads();\n  }\n}\n",
        3 * q->parts, q->p);
    bn_close(e, &s, q->items * BN_LANES, (size_t)(5 * q->parts) * sizeof(float));
    return GCC_OK;
  }
  out(&e->src, "  __shared__ float s_dy[%d], s_dx[%d], s_mean;\n", BN_LANES, BN_LANES);
  bn_items_open(e, q);
  if (with_stats) {
    out(&e->src, "    if (threadIdx.x == 0) {\n");
    bn_merge_stats(e, q, "      ");
    out(&e->src, "      (void)var;\n      s_mean = mean;\n    }\n");
  } else {
    out(&e->src, "    if (threadIdx.x == 0) s_mean = 0.0f;\n");
  }
  out(&e->src,
      "    __syncthreads();\n"
      "    const float mean = s_mean;\n"
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      float sdy = 0.0f, sdx = 0.0f;\n",
      BN_LANES);
  bn_units_open(e, q, "u0 + l", "256");
  if (is16(tg))
    qg.v = 1;
  bn_load(e, &qg, "dy", tg, "gv");
  bn_load(e, q, "x", q->tx, "xv");
  out(&e->src,
      "        for (int j = 0; j < %d; j++) { sdy += gv[j]; sdx += gv[j] * (xv[j] - mean); }\n"
      "      }\n"
      "      s_dy[l] = sdy; s_dx[l] = sdx;\n"
      "    }\n",
      q->v);
  bn_tree(e, "s_dy[l] += s_dy[l + s]; s_dx[l] += s_dx[l + s];");
  out(&e->src,
      "    if (threadIdx.x == 0) { scratch[%" PRId64 "LL + 2 * w] = s_dy[0]; scratch[%" PRId64
      "LL + 2 * w + 1] = s_dx[0]; }\n"
      "    __syncthreads();\n  }\n}\n",
      3 * q->parts, 3 * q->parts);
  bn_close(e, &s, q->items * BN_LANES, (size_t)(5 * q->parts) * sizeof(float));
  return GCC_OK;
}

gcc_status gcc_emit_batch_norm_grad_kernel(emitter *e, int gi, int ni) {
  if (!gcc_lowering_of(e->g->nodes[ni].op)->kernel16)
    GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  bn_geo q;
  bn_geometry(e, nd, 1, &q);
  gcc_dtype tg = vdt(g, nd->inputs[0]), ty = vdt(g, nd->outputs[0]);
  if (q.v == 4 && is16(tg))
    q.v = 1, q.su = q.s, q.u = q.m, q.ch *= 4; /* the same chunks in elements */
  const int64_t which = nd->av[BN_GRAD_OUTPUT].i;
  char le[40];
  float_lit(le, sizeof le, nd->av[BN_GRAD_EPSILON].f);
  bn_helpers(e);
  if (which != 2)
    GCC_TRY(bn_stats_kernel(e, gi, nd->inputs[1], &q));
  GCC_TRY(bn_sums_kernel(e, gi, nd, &q, which != 2));
  sig s;
  GCC_TRY(bn_kernel(e, gi, "", &s));
  /* in0 = dY, in1 = X, in2 = scale */
  param(e, &s, GCC_KARG_INPUT, nd->inputs[0], in_type(tg), "in0");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[1], in_type(q.tx), "in1");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[2], "const float*", "in2");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], out_type(ty), "out0");
  param(e, &s, GCC_KARG_SCRATCH, -1, "const float*", "scratch");
  GCC_TRY(bn_open(e, gi, &s));
  out(&e->src, "  (void)in0; (void)in1; (void)in2;\n");
  const int64_t sums = 3 * q.parts;
  if (which != 0) { /* dscale = sum dy * xhat, dB = sum dy: one thread a channel */
    out(&e->src,
        "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
        "  for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < %" PRId64
        "LL; c += stride) {\n"
        "    float sdy = 0.0f, sdx = 0.0f;\n"
        "    for (long long j = c * %" PRId64 "LL; j < (c + 1) * %" PRId64
        "LL; j++) { sdy += scratch[%" PRId64 "LL + 2 * j]; sdx += scratch[%" PRId64
        "LL + 2 * j + 1]; }\n",
        q.c, q.p, q.p, sums, sums);
    if (which == 1) {
      bn_merge_stats(e, &q, "    ");
      out(&e->src, "    (void)mean;\n    out0[c] = sdx / sqrtf(var + %s);\n", le);
    } else {
      out(&e->src, "    (void)sdx;\n    out0[c] = sdy;\n");
    }
    out(&e->src, "  }\n}\n");
    set_grid(e, s.k, q.c);
    s.k->scratch_bytes = (size_t)(5 * q.parts) * sizeof(float);
    emit_wrapper(e, s.k, s.types);
    return GCC_OK;
  }
  /* dX = scale * invstd * (dy - sum dy / M - xhat * sum(dy * xhat) / M) */
  if (q.nhwc) {
    out(&e->src, "  __shared__ float s_mean[32], s_invstd[32], s_k[32], s_db[32], s_ds[32];\n");
    bn_tiles_open(e, &q);
    bn_channels_open(e, &q);
    bn_merge_stats(e, &q, "      ");
    out(&e->src,
        "      float sdy = 0.0f, sdx = 0.0f;\n"
        "      for (long long i = c * %" PRId64 "LL; i < (c + 1) * %" PRId64
        "LL; i++) { sdy += scratch[%" PRId64 "LL + 2 * i]; sdx += scratch[%" PRId64
        "LL + 2 * i + 1]; }\n"
        "      const float invstd = 1.0f / sqrtf(var + %s);\n"
        "      s_mean[j] = mean; s_invstd[j] = invstd; s_k[j] = in2[c] * invstd;\n"
        "      s_db[j] = sdy / %" PRId64 ".0f; s_ds[j] = sdx * invstd / %" PRId64 ".0f;\n"
        "    }\n"
        "    __syncthreads();\n"
        "    for (long long i = threadIdx.x; i < (u1 - u0) * %" PRId64 "LL; i += blockDim.x) {\n"
        "      const long long j = i %% %" PRId64 "LL, c = t * %" PRId64 "LL + j;\n"
        "      if (c >= %" PRId64 "LL) continue;\n"
        "      const long long at = (u0 + i / %" PRId64 "LL) * %" PRId64 "LL + c;\n"
        "      const float xhat = (%sin1[at]%s - s_mean[j]) * s_invstd[j];\n"
        "      out0[at] = %ss_k[j] * (%sin0[at]%s - s_db[j] - xhat * s_ds[j])%s;\n"
        "    }\n"
        "    __syncthreads();\n  }\n}\n",
        q.p, q.p, sums, sums, le, q.m, q.m, q.cw, q.cw, q.cw, q.c, q.cw, q.c, ld_open(q.tx),
        close16(q.tx), st_open(ty), ld_open(tg), close16(tg), close16(ty));
    bn_close(e, &s, q.items * BN_LANES, (size_t)(5 * q.parts) * sizeof(float));
    return GCC_OK;
  }
  out(&e->src, "  __shared__ float s_mean, s_invstd, s_k, s_db, s_ds;\n");
  bn_items_open(e, &q);
  out(&e->src, "    if (threadIdx.x == 0) {\n");
  bn_merge_stats(e, &q, "      ");
  out(&e->src,
      "      float sdy = 0.0f, sdx = 0.0f;\n"
      "      for (long long j = c * %" PRId64 "LL; j < (c + 1) * %" PRId64
      "LL; j++) { sdy += scratch[%" PRId64 "LL + 2 * j]; sdx += scratch[%" PRId64
      "LL + 2 * j + 1]; }\n"
      "      const float invstd = 1.0f / sqrtf(var + %s);\n"
      "      s_mean = mean; s_invstd = invstd; s_k = in2[c] * invstd;\n"
      "      s_db = sdy / %" PRId64 ".0f; s_ds = sdx * invstd / %" PRId64 ".0f;\n"
      "    }\n"
      "    __syncthreads();\n"
      "    const float mean = s_mean, invstd = s_invstd, k = s_k, db = s_db, ds = s_ds;\n"
      "    for (long long u = u0 + threadIdx.x; u < u1; u += blockDim.x) {\n"
      "      const long long b = u / %" PRId64 "LL, at0 = (b * %" PRId64 "LL + c) * %" PRId64
      "LL + (u - b * %" PRId64 "LL);\n",
      q.p, q.p, sums, sums, le, q.m, q.m, q.su, q.c, q.su, q.su);
  if (q.v == 4)
    out(&e->src,
        "      const float4 g4 = ((const float4 *)in0)[at0], x4 = ((const float4 *)in1)[at0];\n"
        "      ((float4 *)out0)[at0] = make_float4(\n"
        "          k * (g4.x - db - (x4.x - mean) * invstd * ds), k * (g4.y - db - (x4.y - mean) * "
        "invstd * ds),\n"
        "          k * (g4.z - db - (x4.z - mean) * invstd * ds), k * (g4.w - db - (x4.w - mean) * "
        "invstd * ds));\n");
  else
    out(&e->src,
        "      const float xhat = (%sin1[at0]%s - mean) * invstd;\n"
        "      out0[at0] = %sk * (%sin0[at0]%s - db - xhat * ds)%s;\n",
        ld_open(q.tx), close16(q.tx), st_open(ty), ld_open(tg), close16(tg), close16(ty));
  out(&e->src, "    }\n    __syncthreads();\n  }\n}\n");
  bn_close(e, &s, q.items * BN_LANES, (size_t)(5 * q.parts) * sizeof(float));
  return GCC_OK;
}
