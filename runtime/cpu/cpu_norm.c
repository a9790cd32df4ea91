/*
 * cpu_norm.c - LayerNormalization and LayerNormGrad on the CPU (see
 * cpu_norm.h): float32 row loops over rows that sit in L1, sums in 2 x 16
 * float32 lanes combined in a fixed tree, rows (and for dScale / dB chunks
 * of rows, then columns) split over the plan's OpenMP threads.
 */
#include "runtime/cpu/cpu_norm.h"

#include <math.h>
#include <string.h>

#include "graph/ops.h"
#include "runtime/cpu/cpu_parallel.h"

/* As runtime/cpu/cpu_math.c's GELU_HOT: the hot loops are compiled for
 * x86-64-v4 (AVX-512: one zmm per LN_LANES floats), x86-64-v3 (AVX2: two
 * ymm) and baseline x86-64 (four xmm) by function multi-versioning. ISO C,
 * no FMA contraction under GCC (-std=c11), and every lane adds its terms in
 * the same order in each clone, so the three clones give the same bits. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define GCC_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GCC_HOT
#endif

#define LN_LANES 16
typedef float ln_vf __attribute__((vector_size(4 * LN_LANES)));
typedef float ln_v8 __attribute__((vector_size(32)));
typedef float ln_v4 __attribute__((vector_size(16)));
/* ln_vf at any float's address (unaligned loads) */
typedef float ln_vfu __attribute__((vector_size(4 * LN_LANES), aligned(4), may_alias));
#define LOAD(p) (*(const ln_vfu *)(p))

/* A row's sums run in 2 x 16 float32 lanes: block k (16 consecutive
 * elements) goes to acc[k % 2] (two chains, so the adds overlap), the last
 * partial block padded with zero terms. The lanes are then combined in a
 * fixed tree: acc[0] + acc[1], then halves added pairwise. Error of a sum of
 * n terms: within (n / 32 + 5) u of the terms' absolute sum, u = 2^-24. */
static inline float combine(const ln_vf *acc) {
  const ln_vf v = acc[0] + acc[1];
  ln_v8 lo, hi;
  memcpy(&lo, &v, sizeof lo);
  memcpy(&hi, (const char *)&v + sizeof lo, sizeof hi);
  const ln_v8 v8 = lo + hi;
  ln_v4 l4, h4;
  memcpy(&l4, &v8, sizeof l4);
  memcpy(&h4, (const char *)&v8 + sizeof l4, sizeof h4);
  const ln_v4 v4 = l4 + h4;
  return (v4[0] + v4[2]) + (v4[1] + v4[3]);
}

/* Adds the tail's terms t[0 .. n - m) (zero-padded) to the chain of block m / 16. */
static inline void add_tail(ln_vf *acc, int64_t m, const float *t) {
  ln_vf v;
  memcpy(&v, t, sizeof v);
  acc[(m / LN_LANES) % 2] += v;
}

/* The row sums on a CPU with AVX2 but not AVX-512 (cpu_parallel.h,
 * gcc_cpu_narrow_vectors): the x86-64-v3 clone kept its 16-float
 * accumulators and broadcasts on the stack (LayerNormalization 1.74 ms and
 * LayerNormGradAll 1.52 ms a GPT step there, 0.42 and 1.06 on AVX-512).
 * Here each 16-lane vector is two 8-float halves (ymm) and every lane adds
 * its terms in the same order, combined by combine's tree: the same bits.
 * target("avx2"): no FMA instruction, as -std=c11 contracts nothing. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define LN_NARROW 1
typedef float ln_w8 __attribute__((vector_size(32)));
typedef float ln_w8u __attribute__((vector_size(32), aligned(4), may_alias));
#define LOAD8(p) (*(const ln_w8u *)(p))

/* combine of the 16-lane chains acc[chain][half] */
__attribute__((target("avx2"))) static inline float combine8(ln_w8 acc[2][2]) {
  const ln_w8 v8 = (acc[0][0] + acc[1][0]) + (acc[0][1] + acc[1][1]);
  ln_v4 l4, h4;
  memcpy(&l4, &v8, sizeof l4);
  memcpy(&h4, (const char *)&v8 + sizeof l4, sizeof h4);
  const ln_v4 v4 = l4 + h4;
  return (v4[0] + v4[2]) + (v4[1] + v4[3]);
}

/* add_tail: the 16 terms t to the chain of block m / 16 */
__attribute__((target("avx2"))) static inline void add_tail8(ln_w8 acc[2][2], int64_t m,
                                                             const float *t) {
  const int k = (int)((m / LN_LANES) % 2);
  acc[k][0] += LOAD8(t);
  acc[k][1] += LOAD8(t + 8);
}

/* row_stats, as there */
__attribute__((target("avx2"), noinline)) static void
row_stats8(const float *restrict x, int64_t n, double eps, float *mean, float *rstd) {
  const int64_t m = n - n % LN_LANES;
  ln_w8 acc[2][2] = {{{0}, {0}}, {{0}, {0}}}, q[2][2] = {{{0}, {0}}, {{0}, {0}}};
  for (int64_t i = 0; i < m; i += LN_LANES) {
    const int k = (int)((i / LN_LANES) % 2);
    acc[k][0] += LOAD8(x + i);
    acc[k][1] += LOAD8(x + i + 8);
  }
  if (m < n) {
    float t[LN_LANES] = {0};
    for (int64_t k = m; k < n; k++)
      t[k - m] = x[k];
    add_tail8(acc, m, t);
  }
  const float mu = combine8(acc) / (float)n;
  for (int64_t i = 0; i < m; i += LN_LANES) {
    const int k = (int)((i / LN_LANES) % 2);
    const ln_w8 t0 = LOAD8(x + i) - mu, t1 = LOAD8(x + i + 8) - mu;
    q[k][0] += t0 * t0;
    q[k][1] += t1 * t1;
  }
  if (m < n) {
    float t[LN_LANES] = {0};
    for (int64_t k = m; k < n; k++)
      t[k - m] = (x[k] - mu) * (x[k] - mu);
    add_tail8(q, m, t);
  }
  const float var = combine8(q) / (float)n;
  *mean = mu;
  *rstd = (float)(1.0 / sqrt((double)var + eps));
}

/* row_backward_stats, as there */
__attribute__((target("avx2"), noinline)) static void
row_backward_stats8(const float *restrict dy, const float *restrict x, const float *restrict s,
                    int64_t n, double eps, float *st) {
  const int64_t m = n - n % LN_LANES;
  ln_w8 ax[2][2] = {{{0}, {0}}, {{0}, {0}}}, ag[2][2] = {{{0}, {0}}, {{0}, {0}}};
  ln_w8 q[2][2] = {{{0}, {0}}, {{0}, {0}}}, agx[2][2] = {{{0}, {0}}, {{0}, {0}}};
  for (int64_t i = 0; i < m; i += LN_LANES) {
    const int k = (int)((i / LN_LANES) % 2);
    for (int h = 0; h < 2; h++) {
      ax[k][h] += LOAD8(x + i + 8 * h);
      ag[k][h] += LOAD8(dy + i + 8 * h) * LOAD8(s + i + 8 * h);
    }
  }
  if (m < n) {
    float tx[LN_LANES] = {0}, tg[LN_LANES] = {0};
    for (int64_t k = m; k < n; k++) {
      tx[k - m] = x[k];
      tg[k - m] = dy[k] * s[k];
    }
    add_tail8(ax, m, tx);
    add_tail8(ag, m, tg);
  }
  const float mu = combine8(ax) / (float)n, mg = combine8(ag) / (float)n;
  for (int64_t i = 0; i < m; i += LN_LANES) {
    const int k = (int)((i / LN_LANES) % 2);
    for (int h = 0; h < 2; h++) {
      const ln_w8 t = LOAD8(x + i + 8 * h) - mu;
      q[k][h] += t * t;
      agx[k][h] += LOAD8(dy + i + 8 * h) * LOAD8(s + i + 8 * h) * t;
    }
  }
  if (m < n) {
    float tq[LN_LANES] = {0}, tgx[LN_LANES] = {0};
    for (int64_t k = m; k < n; k++) {
      const float t = x[k] - mu;
      tq[k - m] = t * t;
      tgx[k - m] = dy[k] * s[k] * t;
    }
    add_tail8(q, m, tq);
    add_tail8(agx, m, tgx);
  }
  const float var = combine8(q) / (float)n;
  const float rstd = (float)(1.0 / sqrt((double)var + eps));
  st[0] = mu;
  st[1] = mg;
  st[2] = rstd;
  st[3] = rstd * (rstd * (combine8(agx) / (float)n));
}
#else
#define LN_NARROW 0
#endif

/* The row's mean and 1 / sqrt(biased variance + eps): two passes over the
 * row (the second from L1). */
static inline __attribute__((always_inline)) void row_stats(const float *restrict x, int64_t n,
                                                            double eps, float *mean, float *rstd) {
#if LN_NARROW
  if (gcc_cpu_narrow_vectors()) {
    row_stats8(x, n, eps, mean, rstd);
    return;
  }
#endif
  const int64_t m = n - n % LN_LANES;
  ln_vf acc[2] = {{0}, {0}}, q[2] = {{0}, {0}};
  int64_t i = 0;
  for (; i + 2 * LN_LANES <= m; i += 2 * LN_LANES) {
    acc[0] += LOAD(x + i);
    acc[1] += LOAD(x + i + LN_LANES);
  }
  if (i < m)
    acc[0] += LOAD(x + i);
  if (m < n) {
    float t[LN_LANES] = {0};
    for (int64_t k = m; k < n; k++)
      t[k - m] = x[k];
    add_tail(acc, m, t);
  }
  const float mu = combine(acc) / (float)n;
  for (i = 0; i + 2 * LN_LANES <= m; i += 2 * LN_LANES) {
    const ln_vf t0 = LOAD(x + i) - mu, t1 = LOAD(x + i + LN_LANES) - mu;
    q[0] += t0 * t0;
    q[1] += t1 * t1;
  }
  if (i < m) {
    const ln_vf t0 = LOAD(x + i) - mu;
    q[0] += t0 * t0;
  }
  if (m < n) {
    float t[LN_LANES] = {0};
    for (int64_t k = m; k < n; k++)
      t[k - m] = (x[k] - mu) * (x[k] - mu);
    add_tail(q, m, t);
  }
  const float var = combine(q) / (float)n;
  *mean = mu;
  *rstd = (float)(1.0 / sqrt((double)var + eps));
}

/* dX of one row: g = dY Scale, dx = rstd (g - mean(g) - xhat mean(g xhat))
 * = rstd (g - mg - (x - mu) c), c = rstd^2 mean(g (x - mu)). The row's mu,
 * mg, rstd and c in two passes (the second from L1): sum x and sum g; sum
 * (x - mu)^2 and sum g (x - mu). */
static inline __attribute__((always_inline)) void
row_backward_stats(const float *restrict dy, const float *restrict x, const float *restrict s,
                   int64_t n, double eps, float *st) {
#if LN_NARROW
  if (gcc_cpu_narrow_vectors()) {
    row_backward_stats8(dy, x, s, n, eps, st);
    return;
  }
#endif
  const int64_t m = n - n % LN_LANES;
  ln_vf ax[2] = {{0}, {0}}, ag[2] = {{0}, {0}}, q[2] = {{0}, {0}}, agx[2] = {{0}, {0}};
  for (int64_t i = 0; i < m; i += LN_LANES) {
    const int k = (int)((i / LN_LANES) % 2);
    ax[k] += LOAD(x + i);
    ag[k] += LOAD(dy + i) * LOAD(s + i);
  }
  if (m < n) {
    float tx[LN_LANES] = {0}, tg[LN_LANES] = {0};
    for (int64_t k = m; k < n; k++) {
      tx[k - m] = x[k];
      tg[k - m] = dy[k] * s[k];
    }
    add_tail(ax, m, tx);
    add_tail(ag, m, tg);
  }
  const float mu = combine(ax) / (float)n, mg = combine(ag) / (float)n;
  for (int64_t i = 0; i < m; i += LN_LANES) {
    const int k = (int)((i / LN_LANES) % 2);
    const ln_vf t = LOAD(x + i) - mu;
    q[k] += t * t;
    agx[k] += LOAD(dy + i) * LOAD(s + i) * t;
  }
  if (m < n) {
    float tq[LN_LANES] = {0}, tgx[LN_LANES] = {0};
    for (int64_t k = m; k < n; k++) {
      const float t = x[k] - mu;
      tq[k - m] = t * t;
      tgx[k - m] = dy[k] * s[k] * t;
    }
    add_tail(q, m, tq);
    add_tail(agx, m, tgx);
  }
  const float var = combine(q) / (float)n;
  const float rstd = (float)(1.0 / sqrt((double)var + eps));
  st[0] = mu;
  st[1] = mg;
  st[2] = rstd;
  st[3] = rstd * (rstd * (combine(agx) / (float)n));
}

/* Rows per call of rows_forward / rows_backward. */
#define LN_ROW_BLOCK 32

/* The cloned loops over rows r0 .. r1 - 1, r1 - r0 <= LN_ROW_BLOCK: first
 * the rows' statistics (independent rows, so their latency chains overlap),
 * then the outputs. */
GCC_HOT static void rows_forward(const float *restrict x, const float *restrict s,
                                 const float *restrict b, float *restrict y,
                                 float *restrict mean_out, float *restrict istd_out, int64_t n,
                                 double eps, int64_t r0, int64_t r1) {
  float mus[LN_ROW_BLOCK], rss[LN_ROW_BLOCK];
  for (int64_t r = r0; r < r1; r++)
    row_stats(x + r * n, n, eps, &mus[r - r0], &rss[r - r0]);
  for (int64_t r = r0; r < r1; r++) {
    const float mu = mus[r - r0], rstd = rss[r - r0];
    const float *restrict xr = x + r * n;
    float *restrict yr = y + r * n;
    if (b) {
      for (int64_t i = 0; i < n; i++)
        yr[i] = (xr[i] - mu) * rstd * s[i] + b[i];
    } else {
      for (int64_t i = 0; i < n; i++)
        yr[i] = (xr[i] - mu) * rstd * s[i];
    }
    if (mean_out)
      mean_out[r] = mu;
    if (istd_out)
      istd_out[r] = rstd;
  }
}

GCC_HOT static void rows_backward(const float *restrict dy, const float *restrict x,
                                  const float *restrict s, float *restrict dx, int64_t n,
                                  double eps, int64_t r0, int64_t r1) {
  float st[LN_ROW_BLOCK][4];
  for (int64_t r = r0; r < r1; r++)
    row_backward_stats(dy + r * n, x + r * n, s, n, eps, st[r - r0]);
  for (int64_t r = r0; r < r1; r++) {
    const float mu = st[r - r0][0], mg = st[r - r0][1], rstd = st[r - r0][2], c = st[r - r0][3];
    const float *restrict dyr = dy + r * n, *restrict xr = x + r * n;
    float *restrict dxr = dx + r * n;
    for (int64_t i = 0; i < n; i++)
      dxr[i] = rstd * (dyr[i] * s[i] - mg - (xr[i] - mu) * c);
  }
}

/* acc[j] = sum over rows r0 .. r1 - 1 in order of dY[r, j] xhat[r, j]
 * (dScale) or dY[r, j] (dB) */
GCC_HOT static void rows_columns(const float *restrict dy, const float *restrict x,
                                 float *restrict acc, int64_t n, double eps, int64_t r0, int64_t r1,
                                 int with_xhat) {
  memset(acc, 0, (size_t)n * sizeof *acc);
  for (int64_t r = r0; r < r1; r++) {
    const float *restrict yr = dy + r * n;
    if (with_xhat) {
      const float *restrict xr = x + r * n;
      float mu, rstd;
      row_stats(xr, n, eps, &mu, &rstd);
      for (int64_t i = 0; i < n; i++)
        acc[i] += yr[i] * ((xr[i] - mu) * rstd);
    } else {
      for (int64_t i = 0; i < n; i++)
        acc[i] += yr[i];
    }
  }
}

/* LayerNormGradAll's rows r0 .. r1 - 1 (r1 - r0 <= LN_ROW_BLOCK): the
 * rows' statistics once (row_backward_stats with dX, whose mean and rstd
 * are row_stats' bits: the same sums in the same lanes; row_stats without),
 * then per row dX (+ R) as rows_backward and the dScale / dB column sums
 * as rows_columns, added to ps / pb in row order. */
GCC_HOT static void rows_all(const float *restrict dy, const float *restrict x,
                             const float *restrict s, const float *r, float *dx, float *restrict ps,
                             float *restrict pb, int64_t n, double eps, int64_t r0, int64_t r1) {
  float st[LN_ROW_BLOCK][4];
  for (int64_t q = r0; q < r1; q++) {
    if (dx)
      row_backward_stats(dy + q * n, x + q * n, s, n, eps, st[q - r0]);
    else
      row_stats(x + q * n, n, eps, &st[q - r0][0], &st[q - r0][2]);
  }
  for (int64_t q = r0; q < r1; q++) {
    const float mu = st[q - r0][0], rstd = st[q - r0][2];
    const float *restrict dyr = dy + q * n, *restrict xr = x + q * n;
    if (dx) {
      const float mg = st[q - r0][1], c = st[q - r0][3];
      float *dxr = dx + q * n;
      if (r) {
        /* Add's bits: LayerNormGrad's float32 dX, then + R */
        const float *rr = r + q * n;
        for (int64_t i = 0; i < n; i++) {
          const float v = rstd * (dyr[i] * s[i] - mg - (xr[i] - mu) * c);
          dxr[i] = v + rr[i];
        }
      } else {
        for (int64_t i = 0; i < n; i++)
          dxr[i] = rstd * (dyr[i] * s[i] - mg - (xr[i] - mu) * c);
      }
    }
    if (ps)
      for (int64_t i = 0; i < n; i++)
        ps[i] += dyr[i] * ((xr[i] - mu) * rstd);
    if (pb)
      for (int64_t i = 0; i < n; i++)
        pb[i] += dyr[i];
  }
}

/* The threads for `work` elements: one below 32 Ki (an OpenMP region costs
 * more than the loop), else the plan's. */
static int threads_for(const gcc_kernel_args *a, int64_t work) {
  int t = a->ctx && a->ctx->max_threads > 0 ? a->ctx->max_threads : 1;
  return work < 32768 ? 1 : t;
}

void gcc_ln_chunks(int64_t rows, int64_t *n_chunks, int64_t *rows_per_chunk) {
  int64_t c = rows < GCC_LN_CHUNKS ? rows : GCC_LN_CHUNKS;
  if (c < 1)
    c = 1;
  int64_t per = (rows + c - 1) / c;
  if (per < 1)
    per = 1;
  *rows_per_chunk = per;
  *n_chunks = (rows + per - 1) / per;
  if (*n_chunks < 1)
    *n_chunks = 1;
}

gcc_status gcc_cpu_layer_norm(const gcc_kernel_args *a) {
  const gcc_node *nd = a->node;
  const float *x = (const float *)a->in[0]->data, *s = (const float *)a->in[1]->data;
  const float *b = a->n_in > 2 && a->in[2] ? (const float *)a->in[2]->data : NULL;
  float *y = (float *)a->out[LN_OUT_Y]->data;
  float *mean_out = a->n_out > LN_OUT_MEAN ? (float *)a->out[LN_OUT_MEAN]->data : NULL;
  float *istd_out =
      a->n_out > LN_OUT_INV_STD_DEV ? (float *)a->out[LN_OUT_INV_STD_DEV]->data : NULL;
  int64_t rows, n;
  gcc_layer_norm_dims(&a->in[0]->shape, nd->av[LN_AXIS].i, &rows, &n, NULL);
  const double eps = nd->av[LN_EPSILON].f;
  int t = threads_for(a, rows * n);
  (void)t;
  const int64_t blocks = (rows + LN_ROW_BLOCK - 1) / LN_ROW_BLOCK;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t k = 0; k < blocks; k++) {
    const int64_t r0 = k * LN_ROW_BLOCK, r1 = r0 + LN_ROW_BLOCK < rows ? r0 + LN_ROW_BLOCK : rows;
    rows_forward(x, s, b, y, mean_out, istd_out, n, eps, r0, r1);
  }
  return GCC_OK;
}

size_t gcc_cpu_layer_norm_grad_workspace(const gcc_graph *g, int node) {
  const gcc_node *nd = &g->nodes[node];
  if (nd->av[LN_GRAD_OUTPUT].i == 0)
    return 0;
  int64_t rows, n, chunks, per;
  gcc_layer_norm_dims(&g->values[nd->inputs[1]].shape, nd->av[LN_GRAD_AXIS].i, &rows, &n, NULL);
  gcc_ln_chunks(rows, &chunks, &per);
  return (size_t)(chunks * n) * sizeof(float);
}

gcc_status gcc_cpu_layer_norm_grad(const gcc_kernel_args *a) {
  const gcc_node *nd = a->node;
  const float *dy = (const float *)a->in[0]->data, *x = (const float *)a->in[1]->data;
  const float *s = (const float *)a->in[2]->data;
  float *out = (float *)a->out[0]->data;
  int64_t rows, n;
  gcc_layer_norm_dims(&a->in[1]->shape, nd->av[LN_GRAD_AXIS].i, &rows, &n, NULL);
  const double eps = nd->av[LN_GRAD_EPSILON].f;
  const int64_t which = nd->av[LN_GRAD_OUTPUT].i;
  int t = threads_for(a, rows * n);
  (void)t;
  if (which == 0) {
    const int64_t blocks = (rows + LN_ROW_BLOCK - 1) / LN_ROW_BLOCK;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
    for (int64_t k = 0; k < blocks; k++) {
      const int64_t r0 = k * LN_ROW_BLOCK, r1 = r0 + LN_ROW_BLOCK < rows ? r0 + LN_ROW_BLOCK : rows;
      rows_backward(dy, x, s, out, n, eps, r0, r1);
    }
    return GCC_OK;
  }
  /* dScale (1) / dB (2): per chunk of rows a float32 row of column sums in
   * the workspace (the chunk's rows added in order), then the chunks added
   * in order in float64 */
  int64_t chunks, per;
  gcc_ln_chunks(rows, &chunks, &per);
  float *part = (float *)a->workspace;
  const int with_xhat = which == 1;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t c = 0; c < chunks; c++) {
    const int64_t r1 = (c + 1) * per < rows ? (c + 1) * per : rows;
    rows_columns(dy, x, part + c * n, n, eps, c * per, r1, with_xhat);
  }
  int tc = n * chunks < 32768 ? 1 : t;
  (void)tc;
#pragma omp parallel for num_threads(tc) schedule(static) if (tc > 1)
  for (int64_t j = 0; j < n; j++) {
    double v = 0;
    for (int64_t c = 0; c < chunks; c++)
      v += (double)part[c * n + j];
    out[j] = (float)v;
  }
  return GCC_OK;
}

/* LayerNormGradAll's outputs by the bits of `outputs`, in order. */
static void grad_all_outputs(const gcc_kernel_args *a, float **dx, float **ds, float **db) {
  const int64_t mask = a->node->av[LN_GRAD_ALL_OUTPUTS].i;
  int k = 0;
  *dx = mask & LN_GRAD_ALL_DX ? (float *)a->out[k++]->data : NULL;
  *ds = mask & LN_GRAD_ALL_DSCALE ? (float *)a->out[k++]->data : NULL;
  *db = mask & LN_GRAD_ALL_DB ? (float *)a->out[k++]->data : NULL;
}

size_t gcc_cpu_layer_norm_grad_all_workspace(const gcc_graph *g, int node) {
  const gcc_node *nd = &g->nodes[node];
  const int64_t mask = nd->av[LN_GRAD_ALL_OUTPUTS].i;
  const int64_t sums = ((mask >> 1) & 1) + ((mask >> 2) & 1);
  int64_t rows, n, chunks, per;
  gcc_layer_norm_dims(&g->values[nd->inputs[LN_GRAD_ALL_IN_X]].shape, nd->av[LN_GRAD_AXIS].i, &rows,
                      &n, NULL);
  gcc_ln_chunks(rows, &chunks, &per);
  return (size_t)(sums * chunks * n) * sizeof(float);
}

gcc_status gcc_cpu_layer_norm_grad_all(const gcc_kernel_args *a) {
  const gcc_node *nd = a->node;
  const float *dy = (const float *)a->in[LN_GRAD_ALL_IN_DY]->data;
  const float *x = (const float *)a->in[LN_GRAD_ALL_IN_X]->data;
  const float *s = (const float *)a->in[LN_GRAD_ALL_IN_SCALE]->data;
  const float *r = a->n_in > LN_GRAD_ALL_IN_R && a->in[LN_GRAD_ALL_IN_R]
                       ? (const float *)a->in[LN_GRAD_ALL_IN_R]->data
                       : NULL;
  float *dx, *ds, *db;
  grad_all_outputs(a, &dx, &ds, &db);
  int64_t rows, n;
  gcc_layer_norm_dims(&a->in[LN_GRAD_ALL_IN_X]->shape, nd->av[LN_GRAD_AXIS].i, &rows, &n, NULL);
  const double eps = nd->av[LN_GRAD_EPSILON].f;
  int t = threads_for(a, rows * n);
  (void)t;
  /* the column sums' chunks as LayerNormGrad's (the cut depends on the
   * shape only), each chunk's rows in blocks of LN_ROW_BLOCK */
  int64_t chunks, per;
  gcc_ln_chunks(rows, &chunks, &per);
  float *ps = ds ? (float *)a->workspace : NULL;
  float *pb = db ? (float *)a->workspace + (ds ? chunks * n : 0) : NULL;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t c = 0; c < chunks; c++) {
    const int64_t c1 = (c + 1) * per < rows ? (c + 1) * per : rows;
    float *pc = ps ? ps + c * n : NULL, *bc = pb ? pb + c * n : NULL;
    if (pc)
      memset(pc, 0, (size_t)n * sizeof *pc);
    if (bc)
      memset(bc, 0, (size_t)n * sizeof *bc);
    for (int64_t r0 = c * per; r0 < c1; r0 += LN_ROW_BLOCK)
      rows_all(dy, x, s, r, dx, pc, bc, n, eps, r0,
               r0 + LN_ROW_BLOCK < c1 ? r0 + LN_ROW_BLOCK : c1);
  }
  if (!ds && !db)
    return GCC_OK;
  /* the chunks added in chunk order per column in float64, as LayerNormGrad */
  int tc = n * chunks < 32768 ? 1 : t;
  (void)tc;
#pragma omp parallel for num_threads(tc) schedule(static) if (tc > 1)
  for (int64_t j = 0; j < n; j++) {
    if (ds) {
      double v = 0;
      for (int64_t c = 0; c < chunks; c++)
        v += (double)ps[c * n + j];
      ds[j] = (float)v;
    }
    if (db) {
      double v = 0;
      for (int64_t c = 0; c < chunks; c++)
        v += (double)pb[c * n + j];
      db[j] = (float)v;
    }
  }
  return GCC_OK;
}
