/*
 * cpu_norm.c - LayerNormalization and LayerNormGrad on the CPU (see
 * cpu_norm.h): row loops the compiler vectorises, float64 sums in a fixed
 * order, rows (and for dScale / dB chunks of rows, then columns) split over
 * the plan's OpenMP threads.
 */
#include "runtime/cpu/cpu_norm.h"

#include <math.h>
#include <string.h>

#include "graph/ops.h"

/* As runtime/cpu/cpu_kernels.c: the hot loops are compiled for AVX2 and
 * for baseline x86-64 (GCC function multi-versioning); ISO C, no FMA
 * contraction, so both clones give the same bits. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define GCC_HOT __attribute__((target_clones("avx2", "default")))
#else
#define GCC_HOT
#endif

#define LANES 8
typedef double ln_vd __attribute__((vector_size(32))); /* 4 of the LANES */
typedef float ln_vf __attribute__((vector_size(16)));

/* The 8 partial sums in a fixed tree. */
static inline double combine(const double *acc) {
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* The row's mean and biased variance (two passes), in float64. */
GCC_HOT static void row_stats(const float *restrict x, int64_t n, double *mean, double *var) {
  double acc[LANES] = {0}, q[LANES] = {0};
  int64_t m = n - n % LANES;
  for (int64_t i = 0; i < m; i += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] += (double)x[i + l];
  for (int64_t i = m; i < n; i++)
    acc[i - m] += (double)x[i];
  const double mu = combine(acc) / (double)n;
  for (int64_t i = 0; i < m; i += LANES)
    for (int l = 0; l < LANES; l++) {
      const double t = (double)x[i + l] - mu;
      q[l] += t * t;
    }
  for (int64_t i = m; i < n; i++) {
    const double t = (double)x[i] - mu;
    q[i - m] += t * t;
  }
  *mean = mu;
  *var = combine(q) / (double)n;
}

GCC_HOT static void row_forward(const float *restrict x, const float *restrict s,
                                const float *restrict b, float *restrict y, int64_t n, double mu,
                                double rstd) {
  if (b) {
    for (int64_t i = 0; i < n; i++)
      y[i] = (float)(((double)x[i] - mu) * rstd * (double)s[i] + (double)b[i]);
  } else {
    for (int64_t i = 0; i < n; i++)
      y[i] = (float)(((double)x[i] - mu) * rstd * (double)s[i]);
  }
}

/* dX of one row: g = dY Scale, dx = rstd (g - mean(g) - xhat mean(g xhat)) */
GCC_HOT static void row_backward(const float *restrict dy, const float *restrict x,
                                 const float *restrict s, float *restrict dx, int64_t n, double mu,
                                 double rstd) {
  double a1[LANES] = {0}, a2[LANES] = {0};
  int64_t m = n - n % LANES;
  /* The LANES sums as two vectors of 4 (one ymm each in the AVX2 clone): GCC
   * left the plain 8-lane loop scalar (2,048 rows of 128: 0.53 -> 0.42 ms on
   * one thread, measured), and every lane adds its terms as before: the same
   * bits. */
  ln_vd v1[2] = {{0}}, v2[2] = {{0}};
  for (int64_t i = 0; i < m; i += LANES)
    for (int h = 0; h < 2; h++) {
      ln_vf fy, fs, fx;
      memcpy(&fy, dy + i + 4 * h, sizeof fy);
      memcpy(&fs, s + i + 4 * h, sizeof fs);
      memcpy(&fx, x + i + 4 * h, sizeof fx);
      const ln_vd g = __builtin_convertvector(fy, ln_vd) * __builtin_convertvector(fs, ln_vd);
      v1[h] += g;
      v2[h] += g * ((__builtin_convertvector(fx, ln_vd) - mu) * rstd);
    }
  memcpy(a1, v1, sizeof a1);
  memcpy(a2, v2, sizeof a2);
  for (int64_t i = m; i < n; i++) {
    const double g = (double)dy[i] * (double)s[i];
    a1[i - m] += g;
    a2[i - m] += g * (((double)x[i] - mu) * rstd);
  }
  const double mg = combine(a1) / (double)n, mgx = combine(a2) / (double)n;
  for (int64_t i = 0; i < n; i++) {
    const double xhat = ((double)x[i] - mu) * rstd;
    dx[i] = (float)(rstd * ((double)dy[i] * (double)s[i] - mg - xhat * mgx));
  }
}

/* acc[j] += dY[j] * xhat[j] (dScale) or dY[j] (dB) of one row */
GCC_HOT static void row_columns(const float *restrict dy, const float *restrict x,
                                double *restrict acc, int64_t n, double mu, double rstd,
                                int with_xhat) {
  if (with_xhat) {
    for (int64_t i = 0; i < n; i++)
      acc[i] += (double)dy[i] * (((double)x[i] - mu) * rstd);
  } else {
    for (int64_t i = 0; i < n; i++)
      acc[i] += (double)dy[i];
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
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t r = 0; r < rows; r++) {
    double mu, var;
    row_stats(x + r * n, n, &mu, &var);
    const double rstd = 1.0 / sqrt(var + eps);
    row_forward(x + r * n, s, b, y + r * n, n, mu, rstd);
    if (mean_out)
      mean_out[r] = (float)mu;
    if (istd_out)
      istd_out[r] = (float)rstd;
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
  return (size_t)(chunks * n) * sizeof(double);
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
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
    for (int64_t r = 0; r < rows; r++) {
      double mu, var;
      row_stats(x + r * n, n, &mu, &var);
      row_backward(dy + r * n, x + r * n, s, out + r * n, n, mu, 1.0 / sqrt(var + eps));
    }
    return GCC_OK;
  }
  /* dScale (1) / dB (2): per chunk of rows a float64 row of column sums in
   * the workspace, then the chunks added in order */
  int64_t chunks, per;
  gcc_ln_chunks(rows, &chunks, &per);
  double *part = (double *)a->workspace;
  const int with_xhat = which == 1;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t c = 0; c < chunks; c++) {
    double *acc = part + c * n;
    memset(acc, 0, (size_t)n * sizeof *acc);
    int64_t r1 = (c + 1) * per < rows ? (c + 1) * per : rows;
    for (int64_t r = c * per; r < r1; r++) {
      double mu = 0, var = 0;
      if (with_xhat)
        row_stats(x + r * n, n, &mu, &var);
      row_columns(dy + r * n, x + r * n, acc, n, mu, with_xhat ? 1.0 / sqrt(var + eps) : 0.0,
                  with_xhat);
    }
  }
  int tc = n * chunks < 32768 ? 1 : t;
  (void)tc;
#pragma omp parallel for num_threads(tc) schedule(static) if (tc > 1)
  for (int64_t j = 0; j < n; j++) {
    double v = 0;
    for (int64_t c = 0; c < chunks; c++)
      v += part[c * n + j];
    out[j] = (float)v;
  }
  return GCC_OK;
}
