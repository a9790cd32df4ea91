/*
 * emit_attention.c - CUDA C for the fused scaled dot-product attention
 * (graph/ops.h Attention, AttentionGrad): FlashAttention-2 as generated
 * kernels. See emit.h for the conventions of the generated source.
 *
 * Legend: bh = b * H + h, i a query row (Tq), j a key (Tk), D the head dim
 * of Q and K, E that of V and O; a query tile is BQ rows, a key tile BK
 * keys, a block NT = 128 threads. Shapes are baked into the source.
 *
 * Attention, one kernel <group>: one block per (bh, query tile) (blocks
 * grid-stride over the work items). The block keeps its Q tile (times the
 * scale) in shared memory and walks the key tiles: K and V tiles through
 * shared memory, the BQ x BK scores S into a shared tile (thread x takes
 * elements x, x + NT, ...), then the online softmax per row (the row max m,
 * the sum l and the correction exp(m_old - m_new); a tile row is BK
 * elements), then the output accumulator (BQ x E elements owned by the
 * threads, in registers) rescaled and added P V. At the end O = acc / l and
 * L = m + log(l) (-Inf and O = 0 for a row with every key masked). A causal
 * tile stops at the last key its rows can see. The (B, H, Tq, Tk) scores are
 * never written to global memory.
 *
 * AttentionGrad, three kernels (deterministic: every sum is one thread's
 * loop in a fixed order, no atomics):
 *   <group>_delta  D_i = rowsum(dO * O) into the plan's scratch (a row is E
 *                  elements: one thread a row, grid-stride)
 *   <group>_kv     one block per (bh, key tile): for every query tile that
 *                  can see it, P = exp(S - L) and dS = P (dO V^T - D_i)
 *                  recomputed into shared tiles, dV += P^T dO and
 *                  dK += dS^T Q accumulated in registers; dK scaled at the end
 *   <group>        one block per (bh, query tile): the same tiles for every
 *                  key tile it sees, dQ += dS K, scaled at the end
 *
 * Dropout on the probabilities (dropout_p > 0: the training form): the
 * element (bh, i, j) of P is multiplied by (kept ? 1 / (1 - p) : 0) with
 * Dropout's bits of the flat index (bh Tq + i) Tk + j (graph/philox.h, its
 * source put once into the translation unit; the step a GCC_KARG_STEP
 * argument), after the forward's row sum took the un-dropped P; the
 * backward's tiles take sP = mask P (for dV) and dS = P (mask dP - D_i).
 * One Philox block per element (four times the work of Dropout's kernel,
 * small against the tile's products).
 *
 * Shared memory is static (no dynamic shared memory: the host emulation
 * has none); K and V tile rows are padded by one float (no bank conflicts
 * where a warp reads a column of them); kept under 46 KiB per block by the
 * tile sizes: BQ x BK of
 * 16 x 32, 16 x 16, 8 x 16 or 8 x 8, the first that fits D and E; a head
 * dim above 256 is refused (GCC_ERR_UNSUPPORTED naming the node).
 */
#include "codegen/emit_internal.h"
#include "graph/philox.h"

#define ATTN_NT   128
#define SMEM_CAP  (46 * 1024)
#define ATTN_DMAX 256

typedef struct attn_emit {
  gcc_attn_geo a;
  int bq, bk;
  int mask_v; /* the mask's value, or -1 */
  float drop; /* dropout_p, 0 when the node has none (evaluation) */
  int64_t key;
} attn_emit;

static const int kTiles[][2] = {{16, 32}, {16, 16}, {8, 16}, {8, 8}};

/* Shared floats of the forward (fwd = 1) or of a backward kernel. */
static int64_t smem_floats(int fwd, int64_t bq, int64_t bk, int64_t d, int64_t e) {
  if (fwd)
    return bq * d + bk * (d + 1) + bk * (e + 1) + bq * bk + 3 * bq;
  return bq * d + bq * e + bk * (d + 1) + bk * (e + 1) + 2 * bq * bk + 2 * bq;
}

static gcc_status attn_setup(emitter *e, int ni, int iq, int imask, int fwd, attn_emit *x) {
  const gcc_graph *g = e->g;
  const gcc_node *n = &g->nodes[ni];
  int mv = n->n_inputs > imask ? n->inputs[imask] : -1;
  const gcc_shape *ms = mv >= 0 ? &g->values[mv].shape : NULL;
  gcc_attn_geometry(&g->values[n->inputs[iq]].shape, &g->values[n->inputs[iq + 1]].shape,
                    &g->values[n->inputs[iq + 2]].shape, ms, n, &x->a);
  x->mask_v = mv;
  if (fwd) {
    x->drop = n->av[ATTN_TRAINING].i ? n->av[ATTN_DROPOUT_P].f : 0.0f;
    x->key = n->av[ATTN_KEY].i;
  } else {
    x->drop = n->av[ATTN_GRAD_DROPOUT_P].f;
    x->key = n->av[ATTN_GRAD_KEY].i;
  }
  if (x->drop > 0.0f && !e->philox) {
    out(&e->src, "/* Philox-4x32-10 and Dropout's blocks (graph/philox.h) */\n%s\n\n",
        GCC_PHILOX_CUDA_SOURCE);
    e->philox = 1;
  }
  if (x->a.d > ATTN_DMAX || x->a.dv > ATTN_DMAX)
    return gcc_diag_set(e->d, GCC_ERR_UNSUPPORTED,
                        "%s: codegen: node '%s' (%s): head dims %" PRId64 " and %" PRId64
                        ": the generated attention kernels take at most %d",
                        g->source, n->name, gcc_op_name(n->op), x->a.d, x->a.dv, ATTN_DMAX);
  for (size_t t = 0; t < sizeof kTiles / sizeof kTiles[0]; t++) {
    x->bq = kTiles[t][0];
    x->bk = kTiles[t][1];
    if (smem_floats(fwd, x->bq, x->bk, x->a.d, x->a.dv) * 4 <= SMEM_CAP)
      return GCC_OK;
  }
  return GCC_OK; /* 8 x 8 fits any head dim up to ATTN_DMAX */
}

/* A kernel of group `gi` named "<group><suffix>"; begins its signature. */
static gcc_status attn_kernel(emitter *e, int gi, const char *suffix, sig *s) {
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
  k->block_dim = ATTN_NT;
  *s = (sig){.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  return GCC_OK;
}

static gcc_status attn_open(emitter *e, int gi, sig *s) {
  out(&e->src, ") {\n");
  if (!s->ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &e->g->groups[gi]);
  return GCC_OK;
}

/* Blocks for `items` work items (one block each, at most 65535: the blocks
 * grid-stride over the rest). */
static void attn_close(emitter *e, sig *s, int64_t items, size_t scratch) {
  s->k->work_items = items * ATTN_NT;
  s->k->grid_dim = (int)(items < 1 ? 1 : items > 65535 ? 65535 : items);
  s->k->scratch_bytes = scratch;
  emit_wrapper(e, s->k, s->types);
}

/* The constants every kernel body starts with. */
static void attn_consts(emitter *e, const attn_emit *x) {
  const gcc_attn_geo *a = &x->a;
  char sc[32];
  out(&e->src,
      "  const long long BH = %" PRId64 "LL, TQ = %" PRId64 "LL, TK = %" PRId64 "LL;\n"
      "  const int H = %" PRId64 ", D = %" PRId64 ", E = %" PRId64
      ", BQ = %d, BK = %d, NT = %d, SK = D + 1, SV = E + 1;\n"
      "  const float scale = %s;\n"
      "  const float NEG_INF = __int_as_float((int)0xff800000u);\n"
      "  (void)H; (void)NEG_INF; (void)TQ; (void)TK; (void)SK; (void)SV;\n",
      a->b * a->h, a->tq, a->tk, a->h, a->d, a->dv, x->bq, x->bk, ATTN_NT,
      float_lit(sc, sizeof sc, a->scale));
  if (x->drop > 0.0f) {
    char ds[32];
    out(&e->src,
        "  /* dropout %.9g on P: element f of the [B, H, Tq, Tk] P is kept when word f %% 4 of "
        "its Philox block is >= %llu */\n"
        "  const unsigned long long DKEY = %lluull, DTHR = %lluull;\n"
        "  const float DSCALE = %s;\n",
        (double)x->drop, (unsigned long long)gcc_dropout_threshold(x->drop),
        (unsigned long long)x->key, (unsigned long long)gcc_dropout_threshold(x->drop),
        float_lit(ds, sizeof ds, gcc_dropout_scale(x->drop)));
  }
}

/* `fac` = Dropout's factor of element (r, c) of the tile at (i0, j0) of head
 * bh (0 past the tile's rows or keys). */
static void attn_drop_factor(emitter *e) {
  out(&e->src, "        float fac = 0.0f;\n"
               "        if (r < nq && c < nk) {\n"
               "          const long long f = (bh * TQ + i0 + r) * TK + j0 + c;\n"
               "          unsigned int w4[4];\n"
               "          gcc_dropout_block(DKEY, f >> 2, step, w4);\n"
               "          fac = (unsigned long long)w4[f & 3] >= DTHR ? DSCALE : 0.0f;\n"
               "        }\n");
}

/* `s` = the score of row r (of the tile at i0) and key c (of the tile at
 * j0): sQ holds Q times the scale; then the mask, and -Inf where the
 * key is after the causal diagonal or either index is past the end. */
static void attn_score(emitter *e, const attn_emit *x, const char *q_scaled) {
  const gcc_attn_geo *a = &x->a;
  out(&e->src,
      "        float s = 0.0f;\n"
      "        for (int d = 0; d < D; d++) s += %s * sK[c * SK + d];\n",
      q_scaled);
  if (x->mask_v >= 0)
    out(&e->src,
        "        if (r < nq && c < nk) s += mk[(bh / H) * %" PRId64 "LL + (bh %% H) * %" PRId64
        "LL + (i0 + r) * %" PRId64 "LL + (j0 + c) * %" PRId64 "LL];\n",
        a->ms_b, a->ms_h, a->ms_i, a->ms_j);
  if (a->causal)
    out(&e->src, "        if (j0 + c > i0 + r) s = NEG_INF;\n");
  out(&e->src, "        if (r >= nq || c >= nk) s = NEG_INF;\n");
}

/* Loads rows [base, base + n) of a [*, W] tensor `src` into shared `dst`
 * [ROWS, ST] (row stride ST: W, or W + 1 for the K and V tiles, whose rows
 * the score loops read across the threads of a warp: the padding puts those
 * reads in different banks), zeros past n, times `mul` ("" or " * scale").
 * Coalesced: consecutive threads read consecutive elements. */
static void attn_load(emitter *e, const char *dst, const char *src, const char *rows, const char *w,
                      const char *st, const char *base, const char *n, const char *mul) {
  out(&e->src,
      "    for (int x = threadIdx.x; x < %s * %s; x += NT) { const int rr = x / %s; %s[rr * %s + x "
      "%% %s] = rr < %s ? %s[(%s + rr) * %s + x %% %s]%s : 0.0f; }\n",
      rows, w, w, dst, st, w, n, src, base, w, w, mul);
}

static void attn_params(emitter *e, sig *s, const gcc_node *nd, int iq, const attn_emit *x) {
  param(e, s, GCC_KARG_INPUT, nd->inputs[iq], "const float*", "q");
  param(e, s, GCC_KARG_INPUT, nd->inputs[iq + 1], "const float*", "k");
  param(e, s, GCC_KARG_INPUT, nd->inputs[iq + 2], "const float*", "v");
  if (x->mask_v >= 0)
    param(e, s, GCC_KARG_INPUT, x->mask_v, "const float*", "mk");
  if (x->drop > 0.0f)
    param(e, s, GCC_KARG_STEP, -1, "long long", "step");
}

gcc_status gcc_emit_attention_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_node *nd = &e->g->nodes[ni];
  attn_emit x;
  GCC_TRY(attn_setup(e, ni, ATTN_IN_Q, ATTN_IN_MASK, 1, &x));
  const gcc_attn_geo *a = &x.a;
  int64_t nqb = (a->tq + x.bq - 1) / x.bq, items = a->b * a->h * nqb;
  int na = (int)((x.bq * a->dv + ATTN_NT - 1) / ATTN_NT);
  sig s;
  GCC_TRY(attn_kernel(e, gi, "", &s));
  attn_params(e, &s, nd, ATTN_IN_Q, &x);
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], "float*", "o");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[1], "float*", "lse");
  GCC_TRY(attn_open(e, gi, &s));
  attn_consts(e, &x);
  out(&e->src,
      "  const long long NQB = %" PRId64 "LL;\n"
      "  __shared__ float sQ[%" PRId64 "], sK[%" PRId64 "], sV[%" PRId64 "], sS[%d], sM[%d], "
      "sL[%d], sC[%d];\n"
      "  for (long long w = blockIdx.x; w < BH * NQB; w += gridDim.x) {\n"
      "    const long long bh = w / NQB, i0 = (w %% NQB) * BQ;\n"
      "    const int nq = TQ - i0 < BQ ? (int)(TQ - i0) : BQ;\n"
      "    const float *qh = q + bh * TQ * D, *kh = k + bh * TK * D, *vh = v + bh * TK * E;\n",
      nqb, x.bq * a->d, x.bk * (a->d + 1), x.bk * (a->dv + 1), x.bq * x.bk, x.bq, x.bq, x.bq);
  attn_load(e, "sQ", "qh", "BQ", "D", "D", "i0", "nq", " * scale");
  out(&e->src,
      "    for (int r = threadIdx.x; r < BQ; r += NT) { sM[r] = NEG_INF; sL[r] = 0.0f; }\n"
      "    float acc[%d];\n"
      "    for (int n = 0; n < %d; n++) acc[n] = 0.0f;\n"
      "    const long long kend = %s;\n"
      "    __syncthreads();\n"
      "    for (long long j0 = 0; j0 < kend; j0 += BK) {\n"
      "      const int nk = kend - j0 < BK ? (int)(kend - j0) : BK;\n",
      na, na, a->causal ? "i0 + nq < TK ? i0 + nq : TK" : "TK");
  attn_load(e, "sK", "kh", "BK", "D", "SK", "j0", "nk", "");
  attn_load(e, "sV", "vh", "BK", "E", "SV", "j0", "nk", "");
  out(&e->src, "      __syncthreads();\n"
               "      for (int x = threadIdx.x; x < BQ * BK; x += NT) {\n"
               "        const int r = x / BK, c = x %% BK;\n");
  attn_score(e, &x, "sQ[r * D + d]");
  out(&e->src,
      "        sS[x] = s;\n"
      "      }\n"
      "      __syncthreads();\n"
      "      /* the online softmax of each row of the tile (BK elements) */\n"
      "      for (int r = threadIdx.x; r < BQ; r += NT) {\n"
      "        float mx = sM[r];\n"
      "        for (int c = 0; c < BK; c++) mx = sS[r * BK + c] > mx ? sS[r * BK + c] : mx;\n"
      "        if (mx == NEG_INF) { sC[r] = 1.0f; for (int c = 0; c < BK; c++) sS[r * BK + c] = "
      "0.0f; continue; }\n"
      "        const float corr = expf(sM[r] - mx);\n"
      "        float sum = 0.0f;\n"
      "        for (int c = 0; c < BK; c++) { const float p = expf(sS[r * BK + c] - mx); sS[r * "
      "BK + c] = p; sum += p; }\n"
      "        sL[r] = sL[r] * corr + sum;\n"
      "        sM[r] = mx;\n"
      "        sC[r] = corr;\n"
      "%s"
      "      }\n"
      "      __syncthreads();\n"
      "      for (int n = 0; n < %d; n++) {\n"
      "        const int x = threadIdx.x + n * NT;\n"
      "        if (x >= BQ * E) break;\n"
      "        const int r = x / E, ee = x %% E;\n"
      "        float t = acc[n] * sC[r];\n"
      "        for (int c = 0; c < BK; c++) t += sS[r * BK + c] * sV[c * SV + ee];\n"
      "        acc[n] = t;\n"
      "      }\n"
      "      __syncthreads();\n"
      "    }\n"
      "    for (int n = 0; n < %d; n++) {\n"
      "      const int x = threadIdx.x + n * NT;\n"
      "      if (x >= BQ * E) break;\n"
      "      const int r = x / E, ee = x %% E;\n"
      "      if (r < nq) o[(bh * TQ + i0 + r) * E + ee] = sL[r] > 0.0f ? acc[n] / sL[r] : 0.0f;\n"
      "    }\n"
      "    for (int r = threadIdx.x; r < nq; r += NT) lse[bh * TQ + i0 + r] = sL[r] > 0.0f ? "
      "sM[r] + logf(sL[r]) : NEG_INF;\n"
      "    __syncthreads();\n"
      "  }\n"
      "}\n",
      x.drop > 0.0f
          ? "        /* P's dropout, after its sum went into l */\n"
            "        for (int c = 0; c < nk; c++) {\n"
            "          const long long f = (bh * TQ + i0 + r) * TK + j0 + c;\n"
            "          unsigned int w4[4];\n"
            "          gcc_dropout_block(DKEY, f >> 2, step, w4);\n"
            "          sS[r * BK + c] = sS[r * BK + c] * ((unsigned long long)w4[f & 3] >= DTHR ? "
            "DSCALE : 0.0f);\n"
            "        }\n"
          : "",
      na, na);
  attn_close(e, &s, items, 0);
  return GCC_OK;
}

/* The tiles' P (sP) and dS (sdS) of query tile i0 and key tile j0: sQ, sdO,
 * sLs (L), sDi (D_i), sK, sV loaded. */
static void attn_p_ds(emitter *e, const attn_emit *x) {
  out(&e->src, "      for (int x = threadIdx.x; x < BQ * BK; x += NT) {\n"
               "        const int r = x / BK, c = x %% BK;\n");
  attn_score(e, x, "(sQ[r * D + d] * scale)");
  out(&e->src, "        const float li = sLs[r];\n"
               "        const float p = li == NEG_INF ? 0.0f : expf(s - li);\n"
               "        float dp = 0.0f;\n"
               "        for (int ee = 0; ee < E; ee++) dp += sdO[r * E + ee] * sV[c * SV + ee];\n");
  if (x->drop > 0.0f) {
    attn_drop_factor(e);
    out(&e->src, "        sP[x] = p * fac;\n"
                 "        sdS[x] = p * (dp * fac - sDi[r]);\n");
  } else {
    out(&e->src, "        sP[x] = p;\n"
                 "        sdS[x] = p * (dp - sDi[r]);\n");
  }
  out(&e->src, "      }\n"
               "      __syncthreads();\n");
}

static void attn_bwd_shared(emitter *e, const attn_emit *x) {
  const gcc_attn_geo *a = &x->a;
  out(&e->src,
      "  __shared__ float sQ[%" PRId64 "], sdO[%" PRId64 "], sK[%" PRId64 "], sV[%" PRId64
      "], sP[%d], sdS[%d], sLs[%d], sDi[%d];\n",
      x->bq * a->d, x->bq * a->dv, x->bk * (a->d + 1), x->bk * (a->dv + 1), x->bq * x->bk,
      x->bq * x->bk, x->bq, x->bq);
}

/* Loads the query tile's Q, dO, L and D_i. */
static void attn_bwd_load_q(emitter *e) {
  attn_load(e, "sQ", "qh", "BQ", "D", "D", "i0", "nq", "");
  attn_load(e, "sdO", "doh", "BQ", "E", "E", "i0", "nq", "");
  out(&e->src, "    for (int r = threadIdx.x; r < BQ; r += NT) { sLs[r] = r < nq ? lse[bh * TQ + "
               "i0 + r] : NEG_INF; sDi[r] = r < nq ? scratch[bh * TQ + i0 + r] : 0.0f; }\n");
}

gcc_status gcc_emit_attention_grad_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_node *nd = &e->g->nodes[ni];
  attn_emit x;
  GCC_TRY(attn_setup(e, ni, ATTN_GRAD_IN_Q, ATTN_GRAD_IN_MASK, 0, &x));
  const gcc_attn_geo *a = &x.a;
  const int64_t rows = a->b * a->h * a->tq;
  const size_t scratch = (size_t)rows * sizeof(float);
  sig s;

  /* D_i = rowsum(dO * O) */
  GCC_TRY(attn_kernel(e, gi, "_delta", &s));
  param(e, &s, GCC_KARG_INPUT, nd->inputs[ATTN_GRAD_IN_O], "const float*", "o");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[ATTN_GRAD_IN_DO], "const float*", "dout");
  param(e, &s, GCC_KARG_SCRATCH, -1, "float*", "scratch");
  GCC_TRY(attn_open(e, gi, &s));
  out(&e->src,
      "  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < %" PRId64
      "LL; r += (long long)gridDim.x * blockDim.x) {\n"
      "    float t = 0.0f;\n"
      "    for (int ee = 0; ee < %" PRId64 "; ee++) t += dout[r * %" PRId64
      "LL + ee] * o[r * %" PRId64 "LL + ee];\n"
      "    scratch[r] = t;\n"
      "  }\n"
      "}\n",
      rows, a->dv, a->dv, a->dv);
  s.k->block_dim = BLOCK;
  set_grid(e, s.k, rows);
  s.k->scratch_bytes = scratch;
  emit_wrapper(e, s.k, s.types);

  /* dK, dV: a block per key tile */
  int64_t nkb = (a->tk + x.bk - 1) / x.bk, nqb = (a->tq + x.bq - 1) / x.bq;
  int nkd = (int)((x.bk * a->d + ATTN_NT - 1) / ATTN_NT),
      nke = (int)((x.bk * a->dv + ATTN_NT - 1) / ATTN_NT);
  GCC_TRY(attn_kernel(e, gi, "_kv", &s));
  attn_params(e, &s, nd, ATTN_GRAD_IN_Q, &x);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[ATTN_GRAD_IN_L], "const float*", "lse");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[ATTN_GRAD_IN_DO], "const float*", "dout");
  param(e, &s, GCC_KARG_SCRATCH, -1, "const float*", "scratch");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[1], "float*", "dk");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[2], "float*", "dv");
  GCC_TRY(attn_open(e, gi, &s));
  attn_consts(e, &x);
  attn_bwd_shared(e, &x);
  out(&e->src,
      "  const long long NKB = %" PRId64 "LL;\n"
      "  for (long long w = blockIdx.x; w < BH * NKB; w += gridDim.x) {\n"
      "    const long long bh = w / NKB, j0 = (w %% NKB) * BK;\n"
      "    const int nk = TK - j0 < BK ? (int)(TK - j0) : BK;\n"
      "    const float *qh = q + bh * TQ * D, *kh = k + bh * TK * D, *vh = v + bh * TK * E, *doh "
      "= dout + bh * TQ * E;\n",
      nkb);
  attn_load(e, "sK", "kh", "BK", "D", "SK", "j0", "nk", "");
  attn_load(e, "sV", "vh", "BK", "E", "SV", "j0", "nk", "");
  out(&e->src,
      "    float ak[%d], av[%d];\n"
      "    for (int n = 0; n < %d; n++) ak[n] = 0.0f;\n"
      "    for (int n = 0; n < %d; n++) av[n] = 0.0f;\n"
      "    for (long long i0 = %s; i0 < TQ; i0 += BQ) {\n"
      "      const int nq = TQ - i0 < BQ ? (int)(TQ - i0) : BQ;\n",
      nkd, nke, nkd, nke, a->causal ? "j0 / BQ * BQ" : "0");
  attn_bwd_load_q(e);
  out(&e->src, "      __syncthreads();\n");
  attn_p_ds(e, &x);
  out(&e->src,
      "      for (int n = 0; n < %d; n++) {\n"
      "        const int x = threadIdx.x + n * NT;\n"
      "        if (x >= BK * D) break;\n"
      "        const int c = x / D, d = x %% D;\n"
      "        float t = ak[n];\n"
      "        for (int r = 0; r < BQ; r++) t += sdS[r * BK + c] * sQ[r * D + d];\n"
      "        ak[n] = t;\n"
      "      }\n"
      "      for (int n = 0; n < %d; n++) {\n"
      "        const int x = threadIdx.x + n * NT;\n"
      "        if (x >= BK * E) break;\n"
      "        const int c = x / E, ee = x %% E;\n"
      "        float t = av[n];\n"
      "        for (int r = 0; r < BQ; r++) t += sP[r * BK + c] * sdO[r * E + ee];\n"
      "        av[n] = t;\n"
      "      }\n"
      "      __syncthreads();\n"
      "    }\n"
      "    for (int n = 0; n < %d; n++) {\n"
      "      const int x = threadIdx.x + n * NT;\n"
      "      if (x >= BK * D) break;\n"
      "      const int c = x / D, d = x %% D;\n"
      "      if (c < nk) dk[(bh * TK + j0 + c) * D + d] = ak[n] * scale;\n"
      "    }\n"
      "    for (int n = 0; n < %d; n++) {\n"
      "      const int x = threadIdx.x + n * NT;\n"
      "      if (x >= BK * E) break;\n"
      "      const int c = x / E, ee = x %% E;\n"
      "      if (c < nk) dv[(bh * TK + j0 + c) * E + ee] = av[n];\n"
      "    }\n"
      "  }\n"
      "}\n",
      nkd, nke, nkd, nke);
  attn_close(e, &s, a->b * a->h * nkb, scratch);

  /* dQ: a block per query tile */
  int nqd = (int)((x.bq * a->d + ATTN_NT - 1) / ATTN_NT);
  GCC_TRY(attn_kernel(e, gi, "", &s));
  attn_params(e, &s, nd, ATTN_GRAD_IN_Q, &x);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[ATTN_GRAD_IN_L], "const float*", "lse");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[ATTN_GRAD_IN_DO], "const float*", "dout");
  param(e, &s, GCC_KARG_SCRATCH, -1, "const float*", "scratch");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], "float*", "dq");
  GCC_TRY(attn_open(e, gi, &s));
  attn_consts(e, &x);
  attn_bwd_shared(e, &x);
  out(&e->src,
      "  const long long NQB = %" PRId64 "LL;\n"
      "  for (long long w = blockIdx.x; w < BH * NQB; w += gridDim.x) {\n"
      "    const long long bh = w / NQB, i0 = (w %% NQB) * BQ;\n"
      "    const int nq = TQ - i0 < BQ ? (int)(TQ - i0) : BQ;\n"
      "    const float *qh = q + bh * TQ * D, *kh = k + bh * TK * D, *vh = v + bh * TK * E, *doh "
      "= dout + bh * TQ * E;\n",
      nqb);
  attn_bwd_load_q(e);
  out(&e->src,
      "    float aq[%d];\n"
      "    for (int n = 0; n < %d; n++) aq[n] = 0.0f;\n"
      "    const long long kend = %s;\n"
      "    for (long long j0 = 0; j0 < kend; j0 += BK) {\n"
      "      const int nk = kend - j0 < BK ? (int)(kend - j0) : BK;\n",
      nqd, nqd, a->causal ? "i0 + nq < TK ? i0 + nq : TK" : "TK");
  attn_load(e, "sK", "kh", "BK", "D", "SK", "j0", "nk", "");
  attn_load(e, "sV", "vh", "BK", "E", "SV", "j0", "nk", "");
  out(&e->src, "      __syncthreads();\n");
  attn_p_ds(e, &x);
  out(&e->src,
      "      for (int n = 0; n < %d; n++) {\n"
      "        const int x = threadIdx.x + n * NT;\n"
      "        if (x >= BQ * D) break;\n"
      "        const int r = x / D, d = x %% D;\n"
      "        float t = aq[n];\n"
      "        for (int c = 0; c < BK; c++) t += sdS[r * BK + c] * sK[c * SK + d];\n"
      "        aq[n] = t;\n"
      "      }\n"
      "      __syncthreads();\n"
      "    }\n"
      "    for (int n = 0; n < %d; n++) {\n"
      "      const int x = threadIdx.x + n * NT;\n"
      "      if (x >= BQ * D) break;\n"
      "      const int r = x / D, d = x %% D;\n"
      "      if (r < nq) dq[(bh * TQ + i0 + r) * D + d] = aq[n] * scale;\n"
      "    }\n"
      "    __syncthreads();\n"
      "  }\n"
      "}\n",
      nqd, nqd);
  attn_close(e, &s, a->b * a->h * nqb, scratch);
  return GCC_OK;
}
