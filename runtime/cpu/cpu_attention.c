/*
 * cpu_attention.c - the CPU kernels of Attention and AttentionGrad
 * (graph/ops.h: torch.nn.functional.scaled_dot_product_attention fused),
 * FlashAttention-2's algorithm on the CPU: the (B, H, Tq, Tk) scores are
 * never stored, only one BQ x BK tile of them per thread.
 *
 * Legend: b batch, h head, i query row (Tq), j key (Tk), d head dim of Q and
 * K (D), e head dim of V and O (Dv). Q [B, H, Tq, D], K [B, H, Tk, D],
 * V [B, H, Tk, Dv], O [B, H, Tq, Dv], L [B, H, Tq], all row-major float32.
 *
 * Forward: one work item per (b, h, query block of BQ rows); OpenMP threads
 * take work items. For each key block of BK keys: S = (Q * scale) K^T
 * (+ mask, causal -Inf) into a tile, then the online softmax (the row max
 * m, the sum l and the output accumulator rescaled by exp(m_old - m_new))
 * and acc += P V. At the end O = acc / l and L = m + log(l). Keys after the
 * last visible one of a causal block are skipped.
 *
 * Backward (deterministic, no atomics): pass 1, one work item per (b, h,
 * key block): for every query block that can see it, P = exp(S - L) is
 * recomputed, dV += P^T dO, dP = dO V^T, dS = P (dP - D_i) with
 * D_i = rowsum(dO * O), dK += dS^T Q; pass 2, one work item per (b, h,
 * query block): the same tiles, dQ += dS K. When the keys fit one block
 * (tk <= 64: a GPT's short context), one pass per (b, h) computes P and dS
 * once per query block and all three gradients from them. Every
 * accumulation runs in a fixed order inside one thread: the bits do not
 * depend on the thread count.
 *
 * Dropout on the probabilities (training form, dropout_p > 0): element
 * (b, h, i, j) of P is multiplied by (kept ? 1 / (1 - p) : 0) with exactly
 * Dropout's bits for the flat index ((b H + h) Tq + i) Tk + j of the
 * [B, H, Tq, Tk] probabilities (graph/philox.h), after the online softmax
 * summed the un-dropped P into l (so L is the un-dropped logsumexp). The
 * backward redraws the mask per tile: dV += (mask P)^T dO, dP = mask (dO
 * V^T), dS = P (dP - D_i) with D_i of the dropped O. Without dropout the
 * mask code is skipped by one test per tile row (forward) or per tile
 * (backward) on dr == NULL, never per element.
 *
 * The inner loops are axpy-shaped (contiguous, no reduction) so that the
 * compiler vectorises them without reassociating sums; exp is a Cephes-style
 * polynomial written in plain C (so it vectorises too); no FMA contraction
 * (ISO C mode), so the AVX-512, AVX2 and baseline clones give the same bits.
 * oneDNN 2.6 has no SDPA primitive; its matmul on 32 x 64 tiles was not
 * used (bench/attention_bench measures this kernel against the unfused
 * MatMul -> Softmax -> MatMul plan).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "graph/ops.h"
#include "graph/philox.h"
#include "runtime/cpu/cpu_attention.h"

#define BQ 32 /* query rows per tile */
#define BK 64 /* keys per tile */

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define ATTN_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ATTN_HOT
#endif

/* Per-thread scratch, in floats: the S / P tile, the dP tile, K^T and V^T
 * of one key block, and the accumulators (BQ x max(D, Dv) and BK x (D + Dv)). */
static size_t per_thread_floats(int64_t d, int64_t dv) {
  int64_t w = d > dv ? d : dv;
  return (size_t)(2 * BQ * BK + BK * (d + dv) + BQ * w + BK * (d + dv) + 4 * BQ + 2 * BK + 64);
}

static int64_t n_threads_for(const gcc_kernel_args *a, int64_t items) {
  int64_t t = a->ctx && a->ctx->max_threads > 0 ? a->ctx->max_threads : 1;
  if (t > GCC_ATTN_MAX_THREADS)
    t = GCC_ATTN_MAX_THREADS;
  if (t > items)
    t = items;
  return t < 1 ? 1 : t;
}

static void geo_of(const gcc_kernel_args *a, int iq, int imask, gcc_attn_geo *g) {
  const gcc_tensor *m = a->n_in > imask ? a->in[imask] : NULL;
  gcc_attn_geometry(&a->in[iq]->shape, &a->in[iq + 1]->shape, &a->in[iq + 2]->shape,
                    m ? &m->shape : NULL, a->node, g);
}

static size_t attn_workspace(const gcc_graph *g, const gcc_node *n, int iq, int imask) {
  int mv = n->n_inputs > imask ? n->inputs[imask] : -1;
  gcc_attn_geo a;
  gcc_attn_geometry(&g->values[n->inputs[iq]].shape, &g->values[n->inputs[iq + 1]].shape,
                    &g->values[n->inputs[iq + 2]].shape, mv >= 0 ? &g->values[mv].shape : NULL, n,
                    &a);
  return (size_t)GCC_ATTN_MAX_THREADS * per_thread_floats(a.d, a.dv) * sizeof(float);
}

size_t gcc_cpu_attention_workspace(const gcc_graph *g, int node) {
  return attn_workspace(g, &g->nodes[node], ATTN_IN_Q, ATTN_IN_MASK);
}

size_t gcc_cpu_attention_grad_workspace(const gcc_graph *g, int node) {
  return attn_workspace(g, &g->nodes[node], ATTN_GRAD_IN_Q, ATTN_GRAD_IN_MASK);
}

/* s[j] = e^(s[j] - sub) for j < n (n <= BK), where s[j] - sub <= 0 (the
 * scores less their row's max or logsumexp; -Inf for a masked key), to ~1
 * ulp: Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2, Cephes' expf
 * polynomial, 2^k by the exponent bits; 0 below -87. Three loops without
 * branches (clamp, polynomial, zero below -87), so that each vectorises:
 * GCC does not if-convert the clamp inside the polynomial's loop. */
static inline void exp_row(float *restrict s, int64_t n, float sub) {
  float x[BK];
  for (int64_t j = 0; j < n; j++) {
    float v = s[j] - sub;
    v = v < -87.0f ? -87.0f : v;
    x[j] = v > 0.0f ? 0.0f : v;
  }
  for (int64_t j = 0; j < n; j++) {
    const float xc = x[j];
    const int32_t k = (int32_t)(xc * 1.44269504088896341f - 0.5f); /* rounds: xc <= 0 */
    const float kf = (float)k;
    float r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const int32_t bits = (k + 127) * (1 << 23);
    float sc;
    memcpy(&sc, &bits, sizeof sc);
    x[j] = y * sc;
  }
  for (int64_t j = 0; j < n; j++)
    s[j] = s[j] - sub < -87.0f ? 0.0f : x[j];
}

/* e^x of one number (x <= 0), as exp_row. */
static inline float attn_exp1(float x) {
  float s = x;
  exp_row(&s, 1, 0.0f);
  return s;
}

/* Dropout on the probabilities: the node's key, the step, the threshold
 * and the kept elements' factor (graph/philox.h). */
typedef struct attn_drop {
  uint64_t key, thr;
  int64_t step;
  float scale;
} attn_drop;

/* The tile's geometry: rows [i0, i0 + nq) of head bh against keys [j0, j0 + nk). */
typedef struct tile {
  const gcc_attn_geo *g;
  const float *q, *k, *v; /* this head's Q, K, V */
  const float *mask;      /* the mask's base for this (b, h), or NULL */
  int64_t i0, nq, j0, nk;
  const attn_drop *dr; /* NULL: no dropout */
  int64_t bh;          /* the head's index b H + h */
} tile;

/* f[j] = (kept ? scale : 0) for keys j0 .. j0 + nk - 1 of row r of the
 * tile's head: the words of the Dropout blocks that cover flat indices
 * (bh Tq + r) Tk + j0 + j (nk <= BK). */
static void drop_factors(const tile *t, int64_t r, float *restrict f) {
  const attn_drop *dr = t->dr;
  const int64_t f0 = (t->bh * t->g->tq + r) * t->g->tk + t->j0;
  const int64_t q0 = f0 / 4, q1 = (f0 + t->nk - 1) / 4, off = f0 - q0 * 4;
  unsigned int w[BK + 8];
  for (int64_t q = q0; q <= q1; q++)
    gcc_dropout_block(dr->key, q, dr->step, w + (q - q0) * 4);
  for (int64_t j = 0; j < t->nk; j++)
    f[j] = (uint64_t)w[off + j] >= dr->thr ? dr->scale : 0.0f;
}

static void drop_of(const gcc_kernel_args *a, float p, int64_t key, attn_drop *dr) {
  dr->key = (uint64_t)key;
  dr->thr = gcc_dropout_threshold(p);
  dr->scale = gcc_dropout_scale(p);
  dr->step = a->ctx ? a->ctx->rng_step : 0;
}

/* kt[d][j] = K[j0 + j][d]: the key block transposed, BK wide. */
ATTN_HOT static void pack_t(const float *restrict src, int64_t n, int64_t w, float *restrict dst) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t c = 0; c < w; c++)
      dst[c * BK + j] = src[j * w + c];
  for (int64_t c = 0; c < w; c++) /* the tile's columns past n: zeros, never read back */
    for (int64_t j = n; j < BK; j++)
      dst[c * BK + j] = 0.0f;
}

/* 16 floats, for GCC's vector extensions: one zmm register in the AVX-512
 * clone, two ymm in the AVX2 one, four xmm in the baseline one; element-wise
 * IEEE operations, so every clone gives the same bits. aligned(4): loads and
 * stores of any float address. */
typedef float v16 __attribute__((vector_size(64), aligned(4)));
#define VW 16

/* out[i][j] = sum_d (a[i][d] * mul) bt[d][j] for i < nq, j < BK (row
 * strides BK; a's lda): the tile product with bt packed BK wide, four rows
 * at a time with the sums in registers; each element's sum runs over d in
 * order from 0, as a scalar loop would. */
ATTN_HOT static void tile_nt(const float *restrict a, int64_t lda, float mul, int64_t nq,
                             const float *restrict bt, int64_t K, float *restrict out) {
  int64_t i = 0;
  for (; i + 4 <= nq; i += 4)
    for (int64_t jc = 0; jc < BK; jc += VW) {
      v16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
      for (int64_t d = 0; d < K; d++) {
        const v16 b = *(const v16 *)(bt + d * BK + jc);
        c0 += (a[i * lda + d] * mul) * b;
        c1 += (a[(i + 1) * lda + d] * mul) * b;
        c2 += (a[(i + 2) * lda + d] * mul) * b;
        c3 += (a[(i + 3) * lda + d] * mul) * b;
      }
      *(v16 *)(out + i * BK + jc) = c0;
      *(v16 *)(out + (i + 1) * BK + jc) = c1;
      *(v16 *)(out + (i + 2) * BK + jc) = c2;
      *(v16 *)(out + (i + 3) * BK + jc) = c3;
    }
  for (; i < nq; i++)
    for (int64_t jc = 0; jc < BK; jc += VW) {
      v16 c0 = {0};
      for (int64_t d = 0; d < K; d++)
        c0 += (a[i * lda + d] * mul) * *(const v16 *)(bt + d * BK + jc);
      *(v16 *)(out + i * BK + jc) = c0;
    }
}

/* acc[r][e] += sum_c coef[r * cr + c * cc] m[c][e] for r < nr, c < nc,
 * e < w (acc's row stride w, m's ldm): the sum over c in order, 16 columns
 * at a time in a register (a scalar tail past the last multiple of 16). */
ATTN_HOT static void rows_axpy(float *restrict acc, int64_t nr, int64_t w,
                               const float *restrict coef, int64_t cr, int64_t cc, int64_t nc,
                               const float *restrict m, int64_t ldm) {
  const int64_t wv = w / VW * VW;
  for (int64_t r = 0; r < nr; r++) {
    float *restrict ar = acc + r * w;
    const float *restrict cf = coef + r * cr;
    for (int64_t e = 0; e < wv; e += VW) {
      v16 x = *(const v16 *)(ar + e);
      for (int64_t c = 0; c < nc; c++)
        x += cf[c * cc] * *(const v16 *)(m + c * ldm + e);
      *(v16 *)(ar + e) = x;
    }
    for (int64_t e = wv; e < w; e++) {
      float x = ar[e];
      for (int64_t c = 0; c < nc; c++)
        x += cf[c * cc] * m[c * ldm + e];
      ar[e] = x;
    }
  }
}

/* s[i][j] = (q_i * scale) . k_j (+ mask, -Inf where masked or after the
 * causal diagonal); kt is the key block transposed. */
ATTN_HOT static void scores(const tile *t, const float *restrict kt, float *restrict s) {
  const gcc_attn_geo *g = t->g;
  const int64_t D = g->d, nk = t->nk;
  tile_nt(t->q + t->i0 * D, D, g->scale, t->nq, kt, D, s);
  for (int64_t i = 0; i < t->nq; i++) {
    float *restrict si = s + i * BK;
    if (t->mask) {
      const int64_t sj = g->ms_j;
      const float *m = t->mask + (t->i0 + i) * g->ms_i + t->j0 * sj;
      for (int64_t j = 0; j < nk; j++)
        si[j] += m[j * sj];
    }
    if (g->causal)
      for (int64_t j = 0; j < nk; j++)
        si[j] = t->j0 + j > t->i0 + i ? -INFINITY : si[j];
  }
}

/* The keys a causal row block [i0, i0 + nq) can see end at i0 + nq. */
static int64_t keys_seen(const gcc_attn_geo *g, int64_t i0, int64_t nq) {
  if (!g->causal)
    return g->tk;
  int64_t e = i0 + nq;
  return e < g->tk ? e : g->tk;
}

static const float *mask_base(const gcc_attn_geo *g, const gcc_tensor *m, int64_t bh) {
  if (!m)
    return NULL;
  int64_t b = bh / g->h, h = bh % g->h;
  return (const float *)m->data + b * g->ms_b + h * g->ms_h;
}

/* ---- forward --------------------------------------------------------------- */

ATTN_HOT static void fwd_item(const gcc_attn_geo *g, const gcc_kernel_args *a, const attn_drop *dr,
                              int64_t item, float *restrict ws) {
  const int64_t nqb = (g->tq + BQ - 1) / BQ, bh = item / nqb, qb = item % nqb;
  const int64_t D = g->d, E = g->dv;
  tile t = {g,
            (const float *)a->in[ATTN_IN_Q]->data + bh * g->tq * D,
            (const float *)a->in[ATTN_IN_K]->data + bh * g->tk * D,
            (const float *)a->in[ATTN_IN_V]->data + bh * g->tk * E,
            mask_base(g, a->n_in > ATTN_IN_MASK ? a->in[ATTN_IN_MASK] : NULL, bh),
            qb * BQ,
            0,
            0,
            0,
            dr,
            bh};
  t.nq = g->tq - t.i0 < BQ ? g->tq - t.i0 : BQ;
  float *s = ws, *kt = s + BQ * BK, *acc = kt + BK * D, *m = acc + BQ * E, *l = m + BQ;
  for (int64_t i = 0; i < t.nq; i++) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  for (int64_t x = 0; x < t.nq * E; x++)
    acc[x] = 0.0f;
  const int64_t kend = keys_seen(g, t.i0, t.nq);
  for (t.j0 = 0; t.j0 < kend; t.j0 += BK) {
    t.nk = kend - t.j0 < BK ? kend - t.j0 : BK;
    pack_t(t.k + t.j0 * D, t.nk, D, kt);
    scores(&t, kt, s);
    for (int64_t i = 0; i < t.nq; i++) {
      float *restrict si = s + i * BK;
      float mx = m[i];
      for (int64_t j = 0; j < t.nk; j++)
        mx = si[j] > mx ? si[j] : mx;
      if (mx == -INFINITY) { /* every key so far masked: nothing to add */
        for (int64_t j = 0; j < t.nk; j++)
          si[j] = 0.0f;
        continue;
      }
      const float corr = attn_exp1(m[i] - mx);
      exp_row(si, t.nk, mx);
      float sum = 0.0f;
      for (int64_t j = 0; j < t.nk; j++)
        sum += si[j];
      l[i] = l[i] * corr + sum;
      m[i] = mx;
      float *restrict ai = acc + i * E;
      for (int64_t e = 0; e < E; e++)
        ai[e] *= corr;
      if (dr) { /* P's dropout, after its sum went into l */
        float f[BK];
        drop_factors(&t, t.i0 + i, f);
        for (int64_t j = 0; j < t.nk; j++)
          si[j] = si[j] * f[j];
      }
    }
    rows_axpy(acc, t.nq, E, s, BK, 1, t.nk, t.v + t.j0 * E, E); /* acc += P V */
  }
  float *o = (float *)a->out[0]->data + (bh * g->tq + t.i0) * E;
  float *lse = (float *)a->out[1]->data + bh * g->tq + t.i0;
  for (int64_t i = 0; i < t.nq; i++) {
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    for (int64_t e = 0; e < E; e++)
      o[i * E + e] = acc[i * E + e] * inv;
    lse[i] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
  }
}

gcc_status gcc_cpu_attention(const gcc_kernel_args *a) {
  gcc_attn_geo g;
  geo_of(a, ATTN_IN_Q, ATTN_IN_MASK, &g);
  attn_drop drop;
  const float p = a->node->av[ATTN_TRAINING].i ? a->node->av[ATTN_DROPOUT_P].f : 0.0f;
  drop_of(a, p, a->node->av[ATTN_KEY].i, &drop);
  const attn_drop *dr = p > 0.0f ? &drop : NULL;
  const int64_t items = g.b * g.h * ((g.tq + BQ - 1) / BQ);
  const int nt = (int)n_threads_for(a, items);
  const size_t per = per_thread_floats(g.d, g.dv);
  float *ws = a->workspace;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t it = 0; it < items; it++) {
#ifdef _OPENMP
    float *mine = ws + (size_t)omp_get_thread_num() * per;
#else
    float *mine = ws;
#endif
    fwd_item(&g, a, dr, it, mine);
  }
  return GCC_OK;
}

/* ---- backward --------------------------------------------------------------- */

/* The tile's P (in s, from L) and dS (in dp): P = exp(S - L_i) (0 on a row
 * with L = -Inf), dP = dO V^T, dS = P (dP - D_i) (0 past the tile's keys). vt is the key block of V
 * transposed; do_, o_ this head's dO and O; l_ this head's L. */
ATTN_HOT static void probs_and_ds(const tile *t, const float *restrict kt, const float *restrict vt,
                                  const float *restrict l_, const float *restrict do_,
                                  const float *restrict o_, float *restrict s, float *restrict dp) {
  const int64_t E = t->g->dv, nk = t->nk;
  float Ds[BQ];
  scores(t, kt, s);
  for (int64_t i = 0; i < t->nq; i++) {
    const int64_t r = t->i0 + i;
    const float li = l_[r];
    float *restrict si = s + i * BK;
    const float *restrict doi = do_ + r * E, *restrict oi = o_ + r * E;
    if (li == -INFINITY) { /* P = 0, dS = 0 */
      for (int64_t j = 0; j < nk; j++)
        si[j] = 0.0f;
      Ds[i] = 0.0f;
      continue;
    }
    exp_row(si, nk, li);
    float Di = 0.0f;
    for (int64_t e = 0; e < E; e++)
      Di += doi[e] * oi[e];
    Ds[i] = Di;
  }
  /* dP = dO V^T, then dS = P (dP - D_i) */
  tile_nt(do_ + t->i0 * E, E, 1.0f, t->nq, vt, E, dp);
  if (t->dr) { /* dP = mask (dO V^T), dS = P (dP - D_i), then s = mask P for dV */
    for (int64_t i = 0; i < t->nq; i++) {
      float f[BK];
      drop_factors(t, t->i0 + i, f);
      float *restrict si = s + i * BK;
      float *restrict di = dp + i * BK;
      for (int64_t j = 0; j < nk; j++) {
        const float dpij = di[j] * f[j];
        di[j] = si[j] * (dpij - Ds[i]);
        si[j] = si[j] * f[j];
      }
    }
    return;
  }
  for (int64_t i = 0; i < t->nq; i++) {
    const float *restrict si = s + i * BK;
    float *restrict di = dp + i * BK;
    for (int64_t j = 0; j < nk; j++)
      di[j] = si[j] * (di[j] - Ds[i]);
  }
}

typedef struct bwd_ptrs {
  const float *q, *k, *v, *o, *l, *dout;
  const gcc_tensor *mask;
  float *dq, *dk, *dv;
  const attn_drop *dr;
} bwd_ptrs;

/* Pass 1: dK and dV of key block kb of head bh. */
ATTN_HOT static void bwd_kv_item(const gcc_attn_geo *g, const bwd_ptrs *p, int64_t item,
                                 float *restrict ws) {
  const int64_t nkb = (g->tk + BK - 1) / BK, bh = item / nkb, kb = item % nkb;
  const int64_t D = g->d, E = g->dv;
  tile t = {g,
            p->q + bh * g->tq * D,
            p->k + bh * g->tk * D,
            p->v + bh * g->tk * E,
            mask_base(g, p->mask, bh),
            0,
            0,
            kb * BK,
            0,
            p->dr,
            bh};
  t.nk = g->tk - t.j0 < BK ? g->tk - t.j0 : BK;
  float *s = ws, *dp = s + BQ * BK, *kt = dp + BQ * BK, *vt = kt + BK * D, *dk = vt + BK * E,
        *dv = dk + BK * D;
  pack_t(t.k + t.j0 * D, t.nk, D, kt);
  pack_t(t.v + t.j0 * E, t.nk, E, vt);
  for (int64_t x = 0; x < t.nk * D; x++)
    dk[x] = 0.0f;
  for (int64_t x = 0; x < t.nk * E; x++)
    dv[x] = 0.0f;
  const float *lh = p->l + bh * g->tq, *doh = p->dout + bh * g->tq * E, *oh = p->o + bh * g->tq * E;
  /* a causal key block is seen by rows i >= j0 only */
  int64_t i_start = g->causal ? t.j0 / BQ * BQ : 0;
  for (t.i0 = i_start; t.i0 < g->tq; t.i0 += BQ) {
    t.nq = g->tq - t.i0 < BQ ? g->tq - t.i0 : BQ;
    probs_and_ds(&t, kt, vt, lh, doh, oh, s, dp);
    rows_axpy(dv, t.nk, E, s, 1, BK, t.nq, doh + t.i0 * E, E);  /* dV += P^T dO */
    rows_axpy(dk, t.nk, D, dp, 1, BK, t.nq, t.q + t.i0 * D, D); /* dK += dS^T Q */
  }
  float *dko = p->dk + (bh * g->tk + t.j0) * D, *dvo = p->dv + (bh * g->tk + t.j0) * E;
  for (int64_t x = 0; x < t.nk * D; x++)
    dko[x] = dk[x] * g->scale;
  for (int64_t x = 0; x < t.nk * E; x++)
    dvo[x] = dv[x];
}

/* Pass 2: dQ of query block qb of head bh. */
ATTN_HOT static void bwd_q_item(const gcc_attn_geo *g, const bwd_ptrs *p, int64_t item,
                                float *restrict ws) {
  const int64_t nqb = (g->tq + BQ - 1) / BQ, bh = item / nqb, qb = item % nqb;
  const int64_t D = g->d, E = g->dv;
  tile t = {g,
            p->q + bh * g->tq * D,
            p->k + bh * g->tk * D,
            p->v + bh * g->tk * E,
            mask_base(g, p->mask, bh),
            qb * BQ,
            0,
            0,
            0,
            p->dr,
            bh};
  t.nq = g->tq - t.i0 < BQ ? g->tq - t.i0 : BQ;
  float *s = ws, *dp = s + BQ * BK, *kt = dp + BQ * BK, *vt = kt + BK * D, *dq = vt + BK * E;
  for (int64_t x = 0; x < t.nq * D; x++)
    dq[x] = 0.0f;
  const float *lh = p->l + bh * g->tq, *doh = p->dout + bh * g->tq * E, *oh = p->o + bh * g->tq * E;
  const int64_t kend = keys_seen(g, t.i0, t.nq);
  for (t.j0 = 0; t.j0 < kend; t.j0 += BK) {
    t.nk = kend - t.j0 < BK ? kend - t.j0 : BK;
    pack_t(t.k + t.j0 * D, t.nk, D, kt);
    pack_t(t.v + t.j0 * E, t.nk, E, vt);
    probs_and_ds(&t, kt, vt, lh, doh, oh, s, dp);
    rows_axpy(dq, t.nq, D, dp, BK, 1, t.nk, t.k + t.j0 * D, D); /* dQ += dS K */
  }
  float *dqo = p->dq + (bh * g->tq + t.i0) * D;
  for (int64_t x = 0; x < t.nq * D; x++)
    dqo[x] = dq[x] * g->scale;
}

/* One key block (tk <= BK, a GPT's short context): dK, dV and dQ of head bh
 * in one pass, P and dS computed once per query block instead of once for
 * dK/dV and again for dQ. dQ of a query block is complete after its one key
 * block (dS is 0 past the causal edge, so summing all nk keys adds zeros to
 * what the two-pass dQ sums). */
ATTN_HOT static void bwd_head_item(const gcc_attn_geo *g, const bwd_ptrs *p, int64_t bh,
                                   float *restrict ws) {
  const int64_t D = g->d, E = g->dv;
  tile t = {g,
            p->q + bh * g->tq * D,
            p->k + bh * g->tk * D,
            p->v + bh * g->tk * E,
            mask_base(g, p->mask, bh),
            0,
            0,
            0,
            0,
            p->dr,
            bh};
  t.nk = g->tk;
  float *s = ws, *dp = s + BQ * BK, *kt = dp + BQ * BK, *vt = kt + BK * D, *dk = vt + BK * E,
        *dv = dk + BK * D, *dq = dv + BK * E;
  pack_t(t.k, t.nk, D, kt);
  pack_t(t.v, t.nk, E, vt);
  for (int64_t x = 0; x < t.nk * D; x++)
    dk[x] = 0.0f;
  for (int64_t x = 0; x < t.nk * E; x++)
    dv[x] = 0.0f;
  const float *lh = p->l + bh * g->tq, *doh = p->dout + bh * g->tq * E, *oh = p->o + bh * g->tq * E;
  for (t.i0 = 0; t.i0 < g->tq; t.i0 += BQ) {
    t.nq = g->tq - t.i0 < BQ ? g->tq - t.i0 : BQ;
    probs_and_ds(&t, kt, vt, lh, doh, oh, s, dp);
    rows_axpy(dv, t.nk, E, s, 1, BK, t.nq, doh + t.i0 * E, E);  /* dV += P^T dO */
    rows_axpy(dk, t.nk, D, dp, 1, BK, t.nq, t.q + t.i0 * D, D); /* dK += dS^T Q */
    for (int64_t x = 0; x < t.nq * D; x++)
      dq[x] = 0.0f;
    rows_axpy(dq, t.nq, D, dp, BK, 1, t.nk, t.k, D); /* dQ = dS K */
    float *dqo = p->dq + (bh * g->tq + t.i0) * D;
    for (int64_t x = 0; x < t.nq * D; x++)
      dqo[x] = dq[x] * g->scale;
  }
  float *dko = p->dk + bh * g->tk * D, *dvo = p->dv + bh * g->tk * E;
  for (int64_t x = 0; x < t.nk * D; x++)
    dko[x] = dk[x] * g->scale;
  for (int64_t x = 0; x < t.nk * E; x++)
    dvo[x] = dv[x];
}

gcc_status gcc_cpu_attention_grad(const gcc_kernel_args *a) {
  gcc_attn_geo g;
  geo_of(a, ATTN_GRAD_IN_Q, ATTN_GRAD_IN_MASK, &g);
  bwd_ptrs p = {a->in[ATTN_GRAD_IN_Q]->data,
                a->in[ATTN_GRAD_IN_K]->data,
                a->in[ATTN_GRAD_IN_V]->data,
                a->in[ATTN_GRAD_IN_O]->data,
                a->in[ATTN_GRAD_IN_L]->data,
                a->in[ATTN_GRAD_IN_DO]->data,
                a->n_in > ATTN_GRAD_IN_MASK ? a->in[ATTN_GRAD_IN_MASK] : NULL,
                a->out[0]->data,
                a->out[1]->data,
                a->out[2]->data,
                NULL};
  attn_drop drop;
  const float dp_ = a->node->av[ATTN_GRAD_DROPOUT_P].f;
  drop_of(a, dp_, a->node->av[ATTN_GRAD_KEY].i, &drop);
  if (dp_ > 0.0f)
    p.dr = &drop;
  const size_t per = per_thread_floats(g.d, g.dv);
  float *ws = a->workspace;
  const int64_t kv_items = g.b * g.h * ((g.tk + BK - 1) / BK);
  const int64_t q_items = g.b * g.h * ((g.tq + BQ - 1) / BQ);
  int nt;
  if (g.tk <= BK) { /* one key block: one pass per head */
    nt = (int)n_threads_for(a, g.b * g.h);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t it = 0; it < g.b * g.h; it++) {
#ifdef _OPENMP
      float *mine = ws + (size_t)omp_get_thread_num() * per;
#else
      float *mine = ws;
#endif
      bwd_head_item(&g, &p, it, mine);
    }
    return GCC_OK;
  }
  nt = (int)n_threads_for(a, kv_items);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t it = 0; it < kv_items; it++) {
#ifdef _OPENMP
    float *mine = ws + (size_t)omp_get_thread_num() * per;
#else
    float *mine = ws;
#endif
    bwd_kv_item(&g, &p, it, mine);
  }
  nt = (int)n_threads_for(a, q_items);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t it = 0; it < q_items; it++) {
#ifdef _OPENMP
    float *mine = ws + (size_t)omp_get_thread_num() * per;
#else
    float *mine = ws;
#endif
    bwd_q_item(&g, &p, it, mine);
  }
  return GCC_OK;
}
