/*
 * cpu_optim.c - the optimizer updates of the CPU backend (SGD, Adam/AdamW),
 * as torch.optim's single-tensor paths, with loss scaling's skip and
 * unscale and clip_grad_norm_'s coefficient read from their inputs. Each
 * update also reports whether the parameter it wrote holds a NaN or an Inf
 * (gcc_cpu_ctx.updates_checked / updates_nonfinite), so that the session's
 * divergence check needs no second pass over the parameters.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"

/* Hot loops compiled for AVX2 and baseline x86-64 (as cpu_kernels.c): both
 * clones give the same bits (ISO C, no FMA contraction). */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define GCC_HOT __attribute__((target_clones("avx2", "default")))
#else
#define GCC_HOT
#endif

/* 1 when the float32 `x` is a NaN or an Inf: its exponent bits all set (an
 * integer test, so that the loops below OR it up and still vectorise) */
static inline uint32_t nonfinite_bit(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
}

/* torch.optim.SGD for one parameter; `first` = no momentum history yet;
 * the gradient read as g * inv (loss scaling) * clip (clip_grad_norm_),
 * both 1 when off (x * 1 is x). Returns nonzero when an updated element of
 * p is a NaN or an Inf (gcc_cpu_ctx.updates_nonfinite): the session's
 * divergence check reads that instead of scanning the parameters again. */
GCC_HOT static uint32_t sgd_loop(float *restrict p, const float *restrict g, float *restrict buf,
                                 int64_t n, float lr, float mom, float damp, float wd, int nesterov,
                                 int first, float inv, float clip) {
  uint32_t bad = 0;
  if (!buf) {
    for (int64_t i = 0; i < n; i++) {
      float q = p[i] + (-lr) * (g[i] * inv * clip + wd * p[i]);
      p[i] = q;
      bad |= nonfinite_bit(q);
    }
    return bad;
  }
  for (int64_t i = 0; i < n; i++) {
    float d = g[i] * inv * clip + wd * p[i];
    float b = first ? d : buf[i] * mom + (1.0f - damp) * d;
    buf[i] = b;
    float q = p[i] + (-lr) * (nesterov ? d + mom * b : b);
    p[i] = q;
    bad |= nonfinite_bit(q);
  }
  return bad;
}

/* torch.optim.Adam (decay = 1: L2 weight decay `wd` in the gradient), or
 * AdamW (wd = 0, decay = 1 - lr * weight_decay applied to p first).
 * Returns nonzero when an updated element of p is a NaN or an Inf, as
 * sgd_loop. */
GCC_HOT static uint32_t adam_loop(float *restrict p, const float *restrict g, float *restrict m,
                                  float *restrict v, int64_t n, float b1, float b2, float eps,
                                  float wd, float step_size, float bc2_sqrt, float decay, float inv,
                                  float clip) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    p[i] = p[i] * decay;
    float gi = g[i] * inv * clip + wd * p[i];
    m[i] = m[i] * b1 + (1.0f - b1) * gi;
    v[i] = v[i] * b2 + (1.0f - b2) * gi * gi;
    float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    float q = p[i] + (-step_size) * (m[i] / denom);
    p[i] = q;
    bad |= nonfinite_bit(q);
  }
  return bad;
}

static float *F32(const gcc_tensor *t) {
  return (float *)t->data;
}

/* ---- optimizers ------------------------------------------------------- */

/* An update's output, the parameter's 16-bit copy (--precision bf16|fp16):
 * the plan runner gives the kernel a float32 stand-in and rounds it into the
 * copy right after the node (runtime/plan.c shadows), so the updated weight
 * is rounded once, to nearest even, as the CUDA optimizer kernel's store. */
static void store_copy(const gcc_kernel_args *a, const float *p) {
  if (a->n_out > 0 && a->out[0])
    memcpy(a->out[0]->data, p, (size_t)a->in[0]->numel * sizeof(float));
}

/* Loss scaling (inputs from `at` on, graph/ops.h SCALER_IN_*): 0 when the
 * step is skipped (found_inf), else 1 with GradScaler's inv_scale (float64
 * reciprocal rounded to float32) and the optimizer steps applied so far;
 * without those inputs inv 1 and the plan's step. */
static int scaler_step(const gcc_kernel_args *a, int at, float *inv, double *steps) {
  *inv = 1.0f;
  *steps = (double)a->ctx->optimizer_step;
  if (a->n_in <= at || !a->in[at])
    return 1;
  if (F32(a->in[at + SCALER_IN_FOUND_INF])[0] != 0.0f)
    return 0;
  *inv = (float)(1.0 / (double)F32(a->in[at + SCALER_IN_SCALE])[0]);
  *steps = (double)F32(a->in[at + SCALER_IN_STEPS])[0];
  return 1;
}

/* The update's report (gcc_cpu_ctx.updates_checked / updates_nonfinite):
 * one more parameter update ran, and whether its result holds a NaN or Inf.
 * The kernels run one at a time in the plan's order, so the counts are the
 * same on every run. */
static void count_update(const gcc_kernel_args *a, uint32_t bad) {
  a->ctx->updates_checked++;
  a->ctx->updates_nonfinite += bad != 0;
}

/* Gradient clipping (input `at`, GradNorm's output): the coefficient, or 1 */
static float clip_coef(const gcc_kernel_args *a, int at) {
  return a->n_in > at && a->in[at] ? F32(a->in[at])[1] : 1.0f;
}

gcc_status gcc_cpu_sgd(const gcc_kernel_args *a) {
  const gcc_node *n = a->node;
  float *p = F32(a->in[0]);
  const float *g = F32(a->in[1]);
  float *buf = a->n_in > 2 && a->in[2] ? F32(a->in[2]) : NULL;
  float lr = a->ctx->lr > 0.0f ? a->ctx->lr : n->av[SGD_LR].f;
  float mom = n->av[SGD_MOMENTUM].f, damp = n->av[SGD_DAMPENING].f;
  float wd = n->av[SGD_WEIGHT_DECAY].f;
  int nesterov = (int)n->av[SGD_NESTEROV].i;
  float inv;
  double steps;
  if (!scaler_step(a, SGD_IN_SCALER, &inv, &steps)) {
    count_update(a, 0); /* unchanged: as finite as the session last found it */
    store_copy(a, p);   /* the parameter as it is: its float32 stand-in is rounded after */
    return GCC_OK;      /* GradScaler.step skips optimizer.step */
  }
  uint32_t bad = sgd_loop(p, g, buf, a->in[0]->numel, lr, mom, damp, wd, nesterov, steps == 0.0,
                          inv, clip_coef(a, SGD_IN_CLIP));
  count_update(a, bad);
  store_copy(a, p);
  return GCC_OK;
}

/* adam_loop over parts of the elements (cpu_parallel.h), each part's
 * non-finite flag in bad[part] */
typedef struct adam_job {
  float *p;
  const float *g;
  float *m, *v;
  float b1, b2, eps, wd, step_size, bc2_sqrt, decay, inv, clip;
  uint32_t bad[GCC_CPU_PARALLEL_MAX_PARTS];
} adam_job;

static void adam_range(void *u, int part, int64_t b, int64_t e) {
  adam_job *j = u;
  j->bad[part] = adam_loop(j->p + b, j->g + b, j->m + b, j->v + b, e - b, j->b1, j->b2, j->eps,
                           j->wd, j->step_size, j->bc2_sqrt, j->decay, j->inv, j->clip);
}

gcc_status gcc_cpu_adam(const gcc_kernel_args *a) {
  const gcc_node *n = a->node;
  float *p = F32(a->in[0]), *m = F32(a->in[2]), *v = F32(a->in[3]);
  const float *g = F32(a->in[1]);
  float lr = a->ctx->lr > 0.0f ? a->ctx->lr : n->av[ADAM_LR].f;
  float b1 = n->av[ADAM_BETA1].f, b2 = n->av[ADAM_BETA2].f;
  float eps = n->av[ADAM_EPS].f, wd = n->av[ADAM_WEIGHT_DECAY].f;
  float inv;
  double steps;
  if (!scaler_step(a, ADAM_IN_SCALER, &inv, &steps)) {
    count_update(a, 0); /* unchanged: as finite as the session last found it */
    store_copy(a, p);   /* the parameter as it is: its float32 stand-in is rounded after */
    return GCC_OK;      /* skipped: the moments and the step count stay */
  }
  double step = steps + 1.0;
  /* as torch.optim.Adam (1.13, single-tensor path): corrections in double */
  double bc1 = 1.0 - pow((double)b1, step), bc2 = 1.0 - pow((double)b2, step);
  float step_size = (float)((double)lr / bc1);
  float bc2_sqrt = (float)sqrt(bc2);
  /* AdamW: torch's param.mul_(1 - lr * weight_decay), in float32 */
  int decoupled = (int)n->av[ADAM_DECOUPLED].i;
  float decay = decoupled ? (float)(1.0 - (double)lr * wd) : 1.0f;
  adam_job j = {p,
                g,
                m,
                v,
                b1,
                b2,
                eps,
                decoupled ? 0.0f : wd,
                step_size,
                bc2_sqrt,
                decay,
                inv,
                clip_coef(a, ADAM_IN_CLIP),
                {0}};
  const int64_t numel = a->in[0]->numel;
  const int parts =
      gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, numel), numel, 16, adam_range, &j);
  uint32_t bad = 0;
  for (int i = 0; i < parts; i++)
    bad |= j.bad[i];
  count_update(a, bad);
  store_copy(a, p);
  return GCC_OK;
}

/* ---- gradient clipping (torch.nn.utils.clip_grad_norm_) ---------------- */

/* GradNorm's sum of squares over fixed blocks: every gradient cut into
 * blocks of GN_BLOCK << m elements (m the smallest that makes at most
 * GN_MAX_BLOCKS blocks in all; from the shapes only), each block's sum of
 * (g * inv)^2 in float64 lanes (sum_sq), the blocks' sums added in order
 * (gradient by gradient, block by block): the same bits for any thread
 * count, the blocks in parallel when they are at least two. When the
 * gradients are too many to fit (more than GN_MAX_BLOCKS non-empty), one
 * block per gradient, on one thread, in the same order. */
#define GN_BLOCK      8192
#define GN_MAX_BLOCKS 1024
#define GN_LANES      4 /* float64 lanes of one accumulator: one ymm */

/* arch=x86-64-v3 rather than cpu_optim.c's "avx2": GCC's "avx2" clone moved
 * the float64 accumulators through the stack every step (measured). All
 * clones give the same bits (ISO C: no FMA contraction). */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define GN_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GN_HOT
#endif

typedef float gn_vf __attribute__((vector_size(4 * GN_LANES)));
typedef double gn_vd __attribute__((vector_size(8 * GN_LANES)));

/* sum of (x[i] * inv)^2 (the product rounded to float32, as
 * scaler.unscale_ leaves the gradient, squared and summed in float64): four
 * accumulators of GN_LANES lanes over 4 GN_LANES elements a step, the tail
 * zero-padded into the first, the accumulators and then the lanes added in
 * a fixed order */
GN_HOT static double sum_sq(const float *x, int64_t n, float inv) {
  gn_vd acc[4] = {{0}, {0}, {0}, {0}};
  int64_t i = 0;
  for (; i + 4 * GN_LANES <= n; i += 4 * GN_LANES)
    for (int q = 0; q < 4; q++) {
      gn_vf u;
      memcpy(&u, x + i + q * GN_LANES, sizeof u);
      const gn_vd d = __builtin_convertvector(u * inv, gn_vd);
      acc[q] += d * d;
    }
  for (; i < n; i += GN_LANES) {
    gn_vf u = {0};
    memcpy(&u, x + i, (size_t)(n - i < GN_LANES ? n - i : GN_LANES) * sizeof(float));
    const gn_vd d = __builtin_convertvector(u * inv, gn_vd);
    acc[0] += d * d;
  }
  const gn_vd t = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  return (t[0] + t[1]) + (t[2] + t[3]);
}

typedef struct gn_job {
  const gcc_kernel_args *a;
  float inv;
  int64_t block;
  const int *tensor;     /* [blocks]: the input */
  const int64_t *offset; /* [blocks]: the first element */
  double *part;          /* [blocks] */
} gn_job;

static void gn_range(void *u, int part, int64_t b, int64_t e) {
  const gn_job *j = u;
  (void)part;
  for (int64_t k = b; k < e; k++) {
    const gcc_tensor *t = j->a->in[j->tensor[k]];
    const int64_t n = t->numel - j->offset[k] < j->block ? t->numel - j->offset[k] : j->block;
    j->part[k] = sum_sq((const float *)t->data + j->offset[k], n, j->inv);
  }
}

gcc_status gcc_cpu_grad_norm(const gcc_kernel_args *a) {
  int scaled = (int)a->node->av[GRAD_NORM_SCALED].i;
  /* fp16 loss scaling: the unscaled gradients, g * inv_scale in float32 as
   * scaler.unscale_ leaves them (inv 1 otherwise: g * 1 is g) */
  float inv = scaled ? (float)(1.0 / (double)((const float *)a->in[0]->data)[0]) : 1.0f;
  int64_t total = 0, nonempty = 0;
  for (int k = scaled; k < a->n_in; k++) {
    total += a->in[k]->numel;
    nonempty += a->in[k]->numel > 0;
  }
  double ss = 0.0;
  if (nonempty > GN_MAX_BLOCKS) {
    for (int k = scaled; k < a->n_in; k++)
      ss += sum_sq((const float *)a->in[k]->data, a->in[k]->numel, inv);
  } else {
    int64_t block = GN_BLOCK, blocks;
    for (;; block *= 2) {
      blocks = 0;
      for (int k = scaled; k < a->n_in; k++)
        blocks += (a->in[k]->numel + block - 1) / block;
      if (blocks <= GN_MAX_BLOCKS)
        break;
    }
    int tensor[GN_MAX_BLOCKS];
    int64_t offset[GN_MAX_BLOCKS];
    double part[GN_MAX_BLOCKS];
    int64_t nb = 0;
    for (int k = scaled; k < a->n_in; k++)
      for (int64_t o = 0; o < a->in[k]->numel; o += block) {
        tensor[nb] = k;
        offset[nb++] = o;
      }
    gn_job j = {a, inv, block, tensor, offset, part};
    gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, total), nb, 1, gn_range, &j);
    for (int64_t k = 0; k < nb; k++)
      ss += part[k];
  }
  float norm = (float)sqrt(ss);
  /* clip_coef = max_norm / (total_norm + 1e-6): Tensor.__rtruediv__ is
   * reciprocal() * max_norm, each rounded to float32; clamp(max=1) keeps NaN */
  float coef = (1.0f / (norm + 1e-6f)) * a->node->av[GRAD_NORM_MAX_NORM].f;
  float *out = a->out[0]->data;
  out[0] = norm;
  out[1] = coef > 1.0f ? 1.0f : coef;
  return GCC_OK;
}
