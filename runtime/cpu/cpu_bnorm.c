/*
 * cpu_bnorm.c - BatchNormalization and BatchNormGrad on the CPU (see
 * cpu_bnorm.h): one-pass float64 channel sums in 8 fixed partial sums per
 * plane, channels split over the plan's OpenMP threads.
 */
#include "runtime/cpu/cpu_bnorm.h"

#include <math.h>

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

/* The 8 partial sums in a fixed tree. */
static inline double combine(const double *acc) {
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* One channel: N planes of `inner` floats, `stride` floats apart. */
typedef struct bn_chan {
  int64_t n, inner, stride;
} bn_chan;

/* Channels and elements per channel of X [N, C, D1, ...]. */
static bn_chan bn_dims(const gcc_shape *s, int64_t *c) {
  bn_chan ch = {s->dims[0], 1, 0};
  *c = s->dims[1];
  for (int i = 2; i < s->ndim; i++)
    ch.inner *= s->dims[i];
  ch.stride = *c * ch.inner;
  return ch;
}

/* acc1 += x - sh, acc2 += (x - sh)^2 over one plane */
GCC_HOT static void plane_stats(const float *restrict x, int64_t len, double sh,
                                double *restrict acc1, double *restrict acc2) {
  int64_t m = len - len % LANES;
  for (int64_t i = 0; i < m; i += LANES)
    for (int l = 0; l < LANES; l++) {
      const double t = (double)x[i + l] - sh;
      acc1[l] += t;
      acc2[l] += t * t;
    }
  for (int64_t i = m; i < len; i++) {
    const double t = (double)x[i] - sh;
    acc1[i - m] += t;
    acc2[i - m] += t * t;
  }
}

/* the statistics' sums and, with dy, g1 += dy and g2 += dy (x - sh) */
GCC_HOT static void plane_grad_sums(const float *restrict x, const float *restrict dy, int64_t len,
                                    double sh, double *restrict acc1, double *restrict acc2,
                                    double *restrict g1, double *restrict g2) {
  int64_t m = len - len % LANES;
  for (int64_t i = 0; i < m; i += LANES)
    for (int l = 0; l < LANES; l++) {
      const double t = (double)x[i + l] - sh, g = (double)dy[i + l];
      acc1[l] += t;
      acc2[l] += t * t;
      g1[l] += g;
      g2[l] += g * t;
    }
  for (int64_t i = m; i < len; i++) {
    const double t = (double)x[i] - sh, g = (double)dy[i];
    acc1[i - m] += t;
    acc2[i - m] += t * t;
    g1[i - m] += g;
    g2[i - m] += g * t;
  }
}

GCC_HOT static void plane_sum(const float *restrict x, int64_t len, double *restrict acc) {
  int64_t m = len - len % LANES;
  for (int64_t i = 0; i < m; i += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] += (double)x[i + l];
  for (int64_t i = m; i < len; i++)
    acc[i - m] += (double)x[i];
}

/* y = x k + b0 */
GCC_HOT static void plane_affine(const float *restrict x, float *restrict y, int64_t len, double k,
                                 double b0) {
  for (int64_t i = 0; i < len; i++)
    y[i] = (float)((double)x[i] * k + b0);
}

/* dx = k (m dy - sdy - xhat sdyx), xhat = (x - mean) rstd */
GCC_HOT static void plane_dx(const float *restrict x, const float *restrict dy, float *restrict dx,
                             int64_t len, double k, double m, double sdy, double mean, double rstd,
                             double sdyx) {
  for (int64_t i = 0; i < len; i++) {
    const double xhat = ((double)x[i] - mean) * rstd;
    dx[i] = (float)(k * (m * (double)dy[i] - sdy - xhat * sdyx));
  }
}

/* The batch mean and biased variance of the channel at x (its first plane). */
static void chan_stats(const float *x, bn_chan ch, double *mean, double *var) {
  double a1[LANES] = {0}, a2[LANES] = {0}, sh = (double)x[0], m = (double)(ch.n * ch.inner);
  for (int64_t b = 0; b < ch.n; b++)
    plane_stats(x + b * ch.stride, ch.inner, sh, a1, a2);
  const double s1 = combine(a1) / m, v = combine(a2) / m - s1 * s1;
  *mean = sh + s1;
  *var = v > 0 ? v : 0;
}

/* The threads for `work` elements: one below 32 Ki (an OpenMP region costs
 * more than the loop), else the plan's. */
static int threads_for(const gcc_kernel_args *a, int64_t work) {
  int t = a->ctx && a->ctx->max_threads > 0 ? a->ctx->max_threads : 1;
  return work < 32768 ? 1 : t;
}

gcc_status gcc_cpu_batch_norm(const gcc_kernel_args *a) {
  const gcc_node *nd = a->node;
  const float *x = (const float *)a->in[0]->data, *scale = (const float *)a->in[1]->data,
              *bias = (const float *)a->in[2]->data;
  float *rmean = (float *)a->in[3]->data, *rvar = (float *)a->in[4]->data;
  float *y = (float *)a->out[0]->data;
  int64_t c;
  const bn_chan ch = bn_dims(&a->in[0]->shape, &c);
  const double eps = nd->av[BN_EPSILON].f, mom = nd->av[BN_MOMENTUM].f,
               m = (double)(ch.n * ch.inner);
  const int training = (int)nd->av[BN_TRAINING].i;
  const int t = threads_for(a, ch.n * ch.stride);
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t ci = 0; ci < c; ci++) {
    const float *xc = x + ci * ch.inner;
    double mean = rmean[ci], var = rvar[ci];
    if (training) {
      chan_stats(xc, ch, &mean, &var);
      /* PyTorch: the running variance takes the unbiased estimate */
      const double unbiased = m > 1 ? var * m / (m - 1) : var;
      rmean[ci] = (float)(mom * rmean[ci] + (1.0 - mom) * mean);
      rvar[ci] = (float)(mom * rvar[ci] + (1.0 - mom) * unbiased);
    }
    const double k = (double)scale[ci] / sqrt(var + eps), b0 = (double)bias[ci] - mean * k;
    for (int64_t b = 0; b < ch.n; b++)
      plane_affine(xc + b * ch.stride, y + ci * ch.inner + b * ch.stride, ch.inner, k, b0);
  }
  return GCC_OK;
}

gcc_status gcc_cpu_batch_norm_grad(const gcc_kernel_args *a) {
  const gcc_node *nd = a->node;
  const float *dy = (const float *)a->in[0]->data, *x = (const float *)a->in[1]->data,
              *scale = (const float *)a->in[2]->data;
  float *out = (float *)a->out[0]->data;
  int64_t c;
  const bn_chan ch = bn_dims(&a->in[1]->shape, &c);
  const double eps = nd->av[BN_GRAD_EPSILON].f, m = (double)(ch.n * ch.inner);
  const int64_t which = nd->av[BN_GRAD_OUTPUT].i;
  const int t = threads_for(a, ch.n * ch.stride);
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t ci = 0; ci < c; ci++) {
    const float *xc = x + ci * ch.inner, *dyc = dy + ci * ch.inner;
    if (which == 2) { /* dB needs dY only */
      double g1[LANES] = {0};
      for (int64_t b = 0; b < ch.n; b++)
        plane_sum(dyc + b * ch.stride, ch.inner, g1);
      out[ci] = (float)combine(g1);
      continue;
    }
    double a1[LANES] = {0}, a2[LANES] = {0}, g1[LANES] = {0}, g2[LANES] = {0};
    const double sh = (double)xc[0];
    for (int64_t b = 0; b < ch.n; b++)
      plane_grad_sums(xc + b * ch.stride, dyc + b * ch.stride, ch.inner, sh, a1, a2, g1, g2);
    const double s1 = combine(a1) / m, v = combine(a2) / m - s1 * s1;
    const double mean = sh + s1, var = v > 0 ? v : 0, rstd = 1.0 / sqrt(var + eps);
    /* sum dy xhat = rstd (sum dy (x - sh) - (mean - sh) sum dy) */
    const double sdy = combine(g1), sdyx = rstd * (combine(g2) - s1 * sdy);
    if (which == 1) {
      out[ci] = (float)sdyx;
      continue;
    }
    const double k = (double)scale[ci] * rstd / m;
    for (int64_t b = 0; b < ch.n; b++)
      plane_dx(xc + b * ch.stride, dyc + b * ch.stride, out + ci * ch.inner + b * ch.stride,
               ch.inner, k, m, sdy, mean, rstd, sdyx);
  }
  return GCC_OK;
}
