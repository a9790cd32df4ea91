/*
 * cpu_math.c - the CPU backend's kernels of the pointwise math of the
 * Transformer blocks (Gelu, Erf, Exp, Log, Neg, Abs, Pow, Reciprocal, Max,
 * Min and their gradients) and torch.nn's activations (Elu, Selu, Celu,
 * Softplus, Softsign, ThresholdedRelu, Sin, Cos, PRelu). Plain loops over dense float32, compiled for
 * AVX2 and baseline x86-64 as cpu_kernels.c's hot loops; GELU's formulas are
 * PyTorch's CPU kernels (GeluKernelImpl, GeluBackwardKernelImpl) in float.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/cpu/cpu_vexp.h"

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define GCC_HOT    __attribute__((target_clones("avx2", "default")))
#define GCC_HOT512 __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GCC_HOT
#define GCC_HOT512
#endif

#define GELU_BETA        0.79788456080286536f /* sqrt(2 / pi) */
#define GELU_KAPPA       0.044715f
#define SQRT1_2          0.70710678118654752f
#define INV_SQRT_2PI     0.39894228040143268f /* 1 / sqrt(2 pi) */
#define TWO_OVER_SQRT_PI 1.12837916709551257f /* 2 / sqrt(pi) */

/* ---- exact GELU, vectorised ------------------------------------------------------
 * PyTorch's formulas, y = x Phi(x) and dx = dy (Phi(x) + x phi(x)), with
 * Phi(x) = 0.5 erfc(-x / sqrt 2) computed without libm's scalar erff: erfc
 * of z = |x| / sqrt 2 (clamped to 10) as e^(-z^2) Q(t), t = 1 / (1 + z / 2),
 * Q = erfcx a degree-9 polynomial in t fitted for relative error (3.2e-8 on
 * t in [1/6, 1]: tools/fit_erfcx.py; the form of Numerical Recipes' erfcc,
 * t e^(-z^2 - 1.27 + t P(t)), with its second exponential made part of the
 * polynomial), so Phi keeps its relative accuracy in the negative tail;
 * Phi = erfc / 2 for x < 0 and 1 - erfc / 2 otherwise, and e^(-z^2) =
 * e^(-x^2 / 2) is also phi(x) sqrt(2 pi): one exp per element for Phi and
 * phi together (GeluGrad, GeluAux), where the erfcc form took two. e^a
 * (a <= 0) is cpu_attention.c's: Cody-Waite reduction, Cephes' expf
 * polynomial, 2^k by the exponent bits, 0 below -87 (|x| > 13.2, Phi then
 * under 1e-39: 0, so that -Inf gives NaN as before).
 *
 * Written in GCC's generic vectors of GELU_LANES floats (one zmm in the
 * x86-64-v4 clone, two ymm in the x86-64-v3 one, four xmm in the baseline
 * one), selections as bit masks: GCC's if-conversion of the plain loop turned
 * the clamps into branches (jump threading), so it did not vectorise without
 * splitting the formula into a loop per step over a stack chunk. The loops are
 * bound by the FP ports, not memory, so the two loop functions allow FMA
 * contraction (optimize("fp-contract=fast")): in the v3 / v4 clones a * b + c
 * is one fused multiply-add (1.7x fewer cycles, measured), in the baseline
 * clone two roundings as before. Every element goes through the same code
 * (the tail through a padded block), so the bits do not depend on the element's
 * place, the thread count or the run; they may differ between the clones (FMA
 * or not), each within the bound. Error against float64
 * (tests/gelu_accuracy_test, which derives its bound): y within (17 +
 * 0.5 x^2) u relatively, u = 2^-24 (measured: 36 u at x = -8.3; 220 u at
 * x = -11.6 with the erfcc form), the gradient within (18 + 0.5 x^2) u of
 * its terms' magnitudes (measured 34 u); the x^2 part is the conditioning
 * of e^(-x^2 / 2) in float. NaN propagates through x. GeluAux computes Y
 * and GeluGrad's factor D in one pass with the same operations: Gelu's Y
 * and GeluGrad's dY * D bit for bit.
 * The tanh approximation (approximate='tanh') is in the same template: one
 * tanh per element (Cephes' tanhf in vectors) serves y and the derivative;
 * measured within 1.9 u (y) and 2.1 u (dx) of its terms' magnitudes
 * against float64 (gelu_accuracy_test; bounds 8 u and 16 u). It called
 * libm's scalar tanhf before, twice an element in GeluGrad and GeluAux:
 * GeluAux took 26.6 ns an element on one thread, now 0.46 (the exact form
 * 0.39). */
#define GELU_CHUNK 256 /* the parts' alignment over threads */
#define GELU_LANES GCC_VEXP_LANES

/* fp-contract=fast is GCC's function attribute; clang (the fuzzing build,
 * tools/fuzz.sh) has no such attribute and contracts within an expression
 * by default */
#if defined(__clang__)
#define GELU_CONTRACT
#else
#define GELU_CONTRACT __attribute__((optimize("fp-contract=fast")))
#endif
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define GELU_HOT                                                                                   \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) GELU_CONTRACT
#else
#define GELU_HOT GELU_CONTRACT
#endif

/* The exact GELU's loops (cpu_gelu_erf.h), twice: 16-float vectors in the
 * x86-64-v4 / v3 / baseline clones (GELU_HOT), and 8-float ones for a CPU
 * with AVX2 and FMA but not AVX-512 (cpu_parallel.h,
 * gcc_cpu_narrow_vectors: the v3 clone's 16-float comparisons and
 * selections were scalar, 5-6x slower than the v4 clone). Every element is
 * computed alone by the same operations, fused alike, so the two forms give
 * the same bits. */
#define GE_F       gcc_vexp_f
#define GE_I       gcc_vexp_i
#define GE_LANES   GCC_VEXP_LANES
#define GE_HOT     GELU_HOT
#define GE_NAME(x) x##_16
#include "runtime/cpu/cpu_gelu_erf.h"
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define GELU_NARROW 1
#define GE_F        gcc_vexp_f8
#define GE_I        gcc_vexp_i8
#define GE_LANES    8
#define GE_HOT      __attribute__((target("avx2,fma"))) GELU_CONTRACT
#define GE_NAME(x)  x##_8
#include "runtime/cpu/cpu_gelu_erf.h"
#else
#define GELU_NARROW 0
#endif

static void gelu_erf_loop(const float *restrict x, float *restrict y, int64_t n) {
#if GELU_NARROW
  if (gcc_cpu_narrow_vectors()) {
    gelu_erf_loop_8(x, y, n);
    return;
  }
#endif
  gelu_erf_loop_16(x, y, n);
}

static void gelu_erf_grad_loop(const float *restrict dy, const float *restrict x,
                               float *restrict dx, int64_t n) {
#if GELU_NARROW
  if (gcc_cpu_narrow_vectors()) {
    gelu_erf_grad_loop_8(dy, x, dx, n);
    return;
  }
#endif
  gelu_erf_grad_loop_16(dy, x, dx, n);
}

static void gelu_erf_aux_loop(const float *restrict x, float *restrict y, float *restrict dd,
                              int64_t n) {
#if GELU_NARROW
  if (gcc_cpu_narrow_vectors()) {
    gelu_erf_aux_loop_8(x, y, dd, n);
    return;
  }
#endif
  gelu_erf_aux_loop_16(x, y, dd, n);
}

static void gelu_tanh_loop(const float *restrict x, float *restrict y, int64_t n) {
#if GELU_NARROW
  if (gcc_cpu_narrow_vectors()) {
    gelu_tanh_loop_8(x, y, n);
    return;
  }
#endif
  gelu_tanh_loop_16(x, y, n);
}

static void gelu_tanh_grad_loop(const float *restrict dy, const float *restrict x,
                                float *restrict dx, int64_t n) {
#if GELU_NARROW
  if (gcc_cpu_narrow_vectors()) {
    gelu_tanh_grad_loop_8(dy, x, dx, n);
    return;
  }
#endif
  gelu_tanh_grad_loop_16(dy, x, dx, n);
}

static void gelu_tanh_aux_loop(const float *restrict x, float *restrict y, float *restrict dd,
                               int64_t n) {
#if GELU_NARROW
  if (gcc_cpu_narrow_vectors()) {
    gelu_tanh_aux_loop_8(x, y, dd, n);
    return;
  }
#endif
  gelu_tanh_aux_loop_16(x, y, dd, n);
}

/* Gelu, GeluGrad and GeluAux over parts of whole GELU_CHUNKs
 * (cpu_parallel.h): every element is computed as on one thread. */
typedef struct gelu_job {
  const float *dy, *x;
  float *y, *d; /* d: GeluAux's derivative */
  int tanh_form;
} gelu_job;

static void gelu_range(void *u, int part, int64_t b, int64_t e) {
  const gelu_job *j = u;
  (void)part;
  if (j->tanh_form)
    gelu_tanh_loop(j->x + b, j->y + b, e - b);
  else
    gelu_erf_loop(j->x + b, j->y + b, e - b);
}

static void gelu_grad_range(void *u, int part, int64_t b, int64_t e) {
  const gelu_job *j = u;
  (void)part;
  if (j->tanh_form)
    gelu_tanh_grad_loop(j->dy + b, j->x + b, j->y + b, e - b);
  else
    gelu_erf_grad_loop(j->dy + b, j->x + b, j->y + b, e - b);
}

static void gelu_aux_range(void *u, int part, int64_t b, int64_t e) {
  const gelu_job *j = u;
  (void)part;
  if (j->tanh_form)
    gelu_tanh_aux_loop(j->x + b, j->y + b, j->d + b, e - b);
  else
    gelu_erf_aux_loop(j->x + b, j->y + b, j->d + b, e - b);
}

gcc_status gcc_cpu_gelu(const gcc_kernel_args *a) {
  gelu_job j = {NULL, (const float *)a->in[0]->data, (float *)a->out[0]->data, NULL,
                gcc_gelu_is_tanh(a->node)};
  const int64_t n = a->out[0]->numel;
  gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, n), n, GELU_CHUNK, gelu_range, &j);
  return GCC_OK;
}

gcc_status gcc_cpu_gelu_grad(const gcc_kernel_args *a) {
  gelu_job j = {(const float *)a->in[0]->data, (const float *)a->in[1]->data,
                (float *)a->out[0]->data, NULL, gcc_gelu_is_tanh(a->node)};
  const int64_t n = a->out[0]->numel;
  gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, n), n, GELU_CHUNK, gelu_grad_range, &j);
  return GCC_OK;
}

gcc_status gcc_cpu_gelu_aux(const gcc_kernel_args *a) {
  gelu_job j = {NULL, (const float *)a->in[0]->data, (float *)a->out[0]->data,
                (float *)a->out[1]->data, gcc_gelu_is_tanh(a->node)};
  const int64_t n = a->out[0]->numel;
  /* two outputs: the work of GeluGrad per element */
  gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, 2 * n), n, GELU_CHUNK, gelu_aux_range, &j);
  return GCC_OK;
}

GCC_HOT static void erf_loop(const float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = erff(x[i]);
}

GCC_HOT static void erf_grad_loop(const float *restrict dy, const float *restrict x,
                                  float *restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    dx[i] = dy[i] * TWO_OVER_SQRT_PI * expf(-x[i] * x[i]);
}

gcc_status gcc_cpu_erf(const gcc_kernel_args *a) {
  erf_loop((const float *)a->in[0]->data, (float *)a->out[0]->data, a->out[0]->numel);
  return GCC_OK;
}

gcc_status gcc_cpu_erf_grad(const gcc_kernel_args *a) {
  erf_grad_loop((const float *)a->in[0]->data, (const float *)a->in[1]->data,
                (float *)a->out[0]->data, a->out[0]->numel);
  return GCC_OK;
}

/* ---- Exp, Log, Neg, Abs, Reciprocal ---------------------------------------------- */

GCC_HOT static void exp_loop(const float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = expf(x[i]);
}
GCC_HOT static void log_loop(const float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = logf(x[i]);
}
GCC_HOT static void neg_loop(const float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = -x[i];
}
GCC_HOT static void abs_loop(const float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = fabsf(x[i]);
}
GCC_HOT static void reciprocal_loop(const float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = 1.0f / x[i];
}
GCC_HOT static void abs_grad_loop(const float *restrict dy, const float *restrict x,
                                  float *restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    dx[i] = x[i] > 0.0f ? dy[i] : (x[i] < 0.0f ? -dy[i] : 0.0f);
}

typedef void (*unary_loop)(const float *restrict, float *restrict, int64_t);

static gcc_status unary(const gcc_kernel_args *a, unary_loop f) {
  f((const float *)a->in[0]->data, (float *)a->out[0]->data, a->out[0]->numel);
  return GCC_OK;
}

gcc_status gcc_cpu_exp(const gcc_kernel_args *a) {
  return unary(a, exp_loop);
}
gcc_status gcc_cpu_log(const gcc_kernel_args *a) {
  return unary(a, log_loop);
}
gcc_status gcc_cpu_neg(const gcc_kernel_args *a) {
  return unary(a, neg_loop);
}
gcc_status gcc_cpu_abs(const gcc_kernel_args *a) {
  return unary(a, abs_loop);
}
gcc_status gcc_cpu_reciprocal(const gcc_kernel_args *a) {
  return unary(a, reciprocal_loop);
}
gcc_status gcc_cpu_abs_grad(const gcc_kernel_args *a) {
  abs_grad_loop((const float *)a->in[0]->data, (const float *)a->in[1]->data,
                (float *)a->out[0]->data, a->out[0]->numel);
  return GCC_OK;
}

/* ---- Pow, Max, Min and their gradients (broadcast operands) ---------------------- */

/* Strides (elements) of `in` broadcast to `out`: 0 on broadcast dims. */
static void bcast_strides(const gcc_shape *in, const gcc_shape *out, int64_t *st) {
  int64_t s = 1;
  for (int i = out->ndim - 1; i >= 0; i--) {
    int j = in->ndim - out->ndim + i;
    int64_t dim = j >= 0 ? in->dims[j] : 1;
    st[i] = dim == 1 ? 0 : s;
    s *= dim;
  }
}

/* The pointwise formulas over broadcast operands, by kind. */
enum {
  POW_FWD,
  POW_GRAD_A,
  POW_GRAD_B,
  MAX_FWD,
  MIN_FWD,
  MAX_GRAD,
  MIN_GRAD,
  PRELU_FWD,
  PRELU_GRAD_X,
  PRELU_GRAD_SLOPE
};

static inline float pow_elem(int kind, float g, float a, float b) {
  switch (kind) {
  case POW_FWD: return powf(a, b);
  case POW_GRAD_A: return b == 0.0f ? 0.0f : g * (b * powf(a, b - 1.0f));
  case POW_GRAD_B: return (a == 0.0f && b >= 0.0f) ? 0.0f : g * (powf(a, b) * logf(a));
  case MAX_FWD: return (a > b || a != a) ? a : b; /* NaN propagates */
  case MIN_FWD: return (a < b || a != a) ? a : b;
  case MAX_GRAD: return a < b ? 0.0f : (a == b ? 0.5f * g : g);
  case PRELU_FWD: return a < 0.0f ? b * a : a; /* a = X, b = slope */
  case PRELU_GRAD_X: return a < 0.0f ? b * g : g;
  case PRELU_GRAD_SLOPE: return a < 0.0f ? a * g : 0.0f;
  default: return a > b ? 0.0f : (a == b ? 0.5f * g : g); /* MIN_GRAD */
  }
}

/* y[i] = pow_elem(kind, g[i], a[ia], b[ib]) over y's shape (the kind is a
 * constant at each call: the compiler specialises the loops); g (NULL for the
 * forward) has y's shape, A and B are broadcast. */
static inline void pow_walk(int kind, const gcc_tensor *G, const gcc_tensor *A, const gcc_tensor *B,
                            gcc_tensor *Y) {
  const float *g = G ? (const float *)G->data : NULL, *av = (const float *)A->data,
              *bv = (const float *)B->data;
  float *y = (float *)Y->data;
  int64_t n = Y->numel;
  if (A->numel == n && B->numel == n) {
    for (int64_t i = 0; i < n; i++)
      y[i] = pow_elem(kind, g ? g[i] : 0.0f, av[i], bv[i]);
    return;
  }
  if (A->numel == n && B->numel == 1) { /* x^c: the exporters' x^3, x^2 */
    float b = bv[0];
    for (int64_t i = 0; i < n; i++)
      y[i] = pow_elem(kind, g ? g[i] : 0.0f, av[i], b);
    return;
  }
  const gcc_shape *s = &Y->shape;
  int64_t sa[GCC_MAX_DIMS], sb[GCC_MAX_DIMS], idx[GCC_MAX_DIMS] = {0}, ia = 0, ib = 0;
  bcast_strides(&A->shape, s, sa);
  bcast_strides(&B->shape, s, sb);
  for (int64_t o = 0; o < n; o++) {
    y[o] = pow_elem(kind, g ? g[o] : 0.0f, av[ia], bv[ib]);
    for (int k = s->ndim - 1; k >= 0; k--) {
      idx[k]++;
      ia += sa[k];
      ib += sb[k];
      if (idx[k] < s->dims[k])
        break;
      ia -= sa[k] * idx[k];
      ib -= sb[k] * idx[k];
      idx[k] = 0;
    }
  }
}

gcc_status gcc_cpu_pow(const gcc_kernel_args *a) {
  pow_walk(POW_FWD, NULL, a->in[0], a->in[1], a->out[0]);
  return GCC_OK;
}

gcc_status gcc_cpu_pow_grad_base(const gcc_kernel_args *a) {
  pow_walk(POW_GRAD_A, a->in[0], a->in[1], a->in[2], a->out[0]);
  return GCC_OK;
}

gcc_status gcc_cpu_pow_grad_exponent(const gcc_kernel_args *a) {
  pow_walk(POW_GRAD_B, a->in[0], a->in[1], a->in[2], a->out[0]);
  return GCC_OK;
}

/* ---- Max, Min and their gradients ------------------------------------------------ */

gcc_status gcc_cpu_max(const gcc_kernel_args *a) {
  pow_walk(MAX_FWD, NULL, a->in[0], a->in[1], a->out[0]);
  return GCC_OK;
}

gcc_status gcc_cpu_min(const gcc_kernel_args *a) {
  pow_walk(MIN_FWD, NULL, a->in[0], a->in[1], a->out[0]);
  return GCC_OK;
}

gcc_status gcc_cpu_max_grad(const gcc_kernel_args *a) {
  pow_walk(MAX_GRAD, a->in[0], a->in[1], a->in[2], a->out[0]);
  return GCC_OK;
}

gcc_status gcc_cpu_min_grad(const gcc_kernel_args *a) {
  pow_walk(MIN_GRAD, a->in[0], a->in[1], a->in[2], a->out[0]);
  return GCC_OK;
}

/* ---- Elu, Selu, Celu, Softplus, Softsign, ThresholdedRelu, Sin, Cos ---------------- */

/* Y = f(X) and dX = f'(X) dY; p = alpha, q = gamma (formulas: graph/ops.c). */
#define ACT_LOOPS(name, fwd, bwd)                                                                  \
  GCC_HOT static void name##_loop(const float *restrict xs, float *restrict ys, int64_t n,         \
                                  float p, float q) {                                              \
    (void)p, (void)q;                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                              \
      float x = xs[i];                                                                             \
      ys[i] = (fwd);                                                                               \
    }                                                                                              \
  }                                                                                                \
  GCC_HOT static void name##_grad_loop(const float *restrict dys, const float *restrict xs,        \
                                       float *restrict dxs, int64_t n, float p, float q) {         \
    (void)p, (void)q;                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                              \
      float x = xs[i], g = dys[i];                                                                 \
      dxs[i] = (bwd);                                                                              \
    }                                                                                              \
  }                                                                                                \
  gcc_status gcc_cpu_##name(const gcc_kernel_args *a) {                                            \
    const gcc_node *nd = a->node;                                                                  \
    name##_loop((const float *)a->in[0]->data, (float *)a->out[0]->data, a->out[0]->numel,         \
                nd->n_av > ACT_ALPHA ? nd->av[ACT_ALPHA].f : 0.0f,                                 \
                nd->n_av > ACT_GAMMA ? nd->av[ACT_GAMMA].f : 0.0f);                                \
    return GCC_OK;                                                                                 \
  }                                                                                                \
  gcc_status gcc_cpu_##name##_grad(const gcc_kernel_args *a) {                                     \
    const gcc_node *nd = a->node;                                                                  \
    name##_grad_loop((const float *)a->in[0]->data, (const float *)a->in[1]->data,                 \
                     (float *)a->out[0]->data, a->out[0]->numel,                                   \
                     nd->n_av > ACT_ALPHA ? nd->av[ACT_ALPHA].f : 0.0f,                            \
                     nd->n_av > ACT_GAMMA ? nd->av[ACT_GAMMA].f : 0.0f);                           \
    return GCC_OK;                                                                                 \
  }

ACT_LOOPS(elu, x > 0.0f ? x : p * expm1f(x), x > 0.0f ? g : g * p * expf(x))
ACT_LOOPS(selu, q *(x > 0.0f ? x : p * expm1f(x)), x > 0.0f ? q * g : g * q * p * expf(x))
ACT_LOOPS(celu, x > 0.0f ? x : p * expm1f(x / p), x > 0.0f ? g : g * expf(x / p))
/* log(1 + e^x) without overflow; NaN stays NaN through log1pf */
ACT_LOOPS(softplus, fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))), g / (1.0f + expf(-x)))
ACT_LOOPS(softsign, x / (1.0f + fabsf(x)), g / ((1.0f + fabsf(x)) * (1.0f + fabsf(x))))
ACT_LOOPS(thresholded_relu, x > p ? x : 0.0f, x > p ? g : 0.0f)

GCC_HOT static void sin_loop(const float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = sinf(x[i]);
}
GCC_HOT static void cos_loop(const float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = cosf(x[i]);
}
gcc_status gcc_cpu_sin(const gcc_kernel_args *a) {
  return unary(a, sin_loop);
}
gcc_status gcc_cpu_cos(const gcc_kernel_args *a) {
  return unary(a, cos_loop);
}

/* ---- PRelu and its gradients (the slope broadcast) ------------------------------- */

gcc_status gcc_cpu_prelu(const gcc_kernel_args *a) {
  pow_walk(PRELU_FWD, NULL, a->in[0], a->in[1], a->out[0]);
  return GCC_OK;
}

gcc_status gcc_cpu_prelu_grad(const gcc_kernel_args *a) {
  pow_walk(PRELU_GRAD_X, a->in[0], a->in[1], a->in[2], a->out[0]);
  return GCC_OK;
}

gcc_status gcc_cpu_prelu_grad_slope(const gcc_kernel_args *a) {
  pow_walk(PRELU_GRAD_SLOPE, a->in[0], a->in[1], a->in[2], a->out[0]);
  return GCC_OK;
}
