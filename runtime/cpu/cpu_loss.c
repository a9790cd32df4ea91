/*
 * cpu_loss.c - the CPU kernels of NegativeLogLikelihoodLoss (ONNX
 * NegativeLogLikelihoodLoss-13/22, torch.nn.functional.nll_loss),
 * SoftmaxCrossEntropy (torch.nn.functional.cross_entropy over [N, C]
 * logits) and their gradients (semantics in graph/ops.h).
 *
 * The NLL kernels view the input as (N, C, D) (D = d1 * ... * dk, 1 for a 2-D input)
 * and the target as (N, D): target[n, j] picks input[n, target[n, j], j].
 * Sums are float64 in the order of the target's elements: the same bits on
 * every run.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/cpu/cpu_vexp.h"

typedef enum { NLL_NONE, NLL_SUM, NLL_MEAN } nll_reduction;

static nll_reduction reduction_of(const char *s) {
  return strcmp(s, "none") == 0 ? NLL_NONE : strcmp(s, "sum") == 0 ? NLL_SUM : NLL_MEAN;
}

static int64_t target_at(const gcc_tensor *t, int64_t k) {
  return t->dtype == GCC_DT_INT32 ? (int64_t)((const int32_t *)t->data)[k]
                                  : ((const int64_t *)t->data)[k];
}

/* Every target in [0, C) or equal to ignore_index, else
 * GCC_ERR_INVALID_ARGUMENT naming the node and the first target outside;
 * *wsum: the sum of the weights of the targets not ignored (float64, in
 * order). */
static gcc_status check_targets(const gcc_kernel_args *a, const gcc_tensor *t, const float *w,
                                int64_t C, int64_t ignore, double *wsum) {
  double s = 0.0;
  for (int64_t k = 0; k < t->numel; k++) {
    int64_t v = target_at(t, k);
    if (v == ignore)
      continue;
    if (v < 0 || v >= C)
      return gcc_diag_set(a->ctx->diag, GCC_ERR_INVALID_ARGUMENT,
                          "%s: node '%s' (%s): target %" PRId64 " at position %" PRId64
                          " is outside [0, %" PRId64 ") and is not ignore_index",
                          a->ctx->source ? a->ctx->source : "<model>", a->node->name,
                          gcc_op_name(a->node->op), v, k, C);
    s += w ? (double)w[v] : 1.0;
  }
  *wsum = s;
  return GCC_OK;
}

gcc_status gcc_cpu_nll_loss(const gcc_kernel_args *a) {
  const gcc_tensor *x = a->in[0], *t = a->in[1];
  const float *w = a->n_in > 2 && a->in[2] ? a->in[2]->data : NULL;
  const int64_t N = x->shape.dims[0], C = x->shape.dims[1], D = N ? t->numel / N : 0;
  const int64_t ignore = a->node->av[NLL_IGNORE_INDEX].i;
  nll_reduction r = reduction_of(a->node->av[NLL_REDUCTION].s);
  double wsum;
  GCC_TRY(check_targets(a, t, w, C, ignore, &wsum));
  const float *xv = x->data;
  float *y = a->out[0]->data;
  double sum = 0.0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < D; j++) {
      int64_t v = target_at(t, n * D + j);
      double l = 0.0;
      if (v != ignore)
        l = -(w ? (double)w[v] : 1.0) * (double)xv[(n * C + v) * D + j];
      if (r == NLL_NONE)
        y[n * D + j] = (float)l;
      else
        sum += l;
    }
  if (r != NLL_NONE)
    y[0] = (float)(r == NLL_MEAN ? sum / wsum : sum);
  return GCC_OK;
}

gcc_status gcc_cpu_nll_loss_grad(const gcc_kernel_args *a) {
  const gcc_tensor *dy = a->in[0], *t = a->in[1];
  const float *w = a->n_in > 2 && a->in[2] ? a->in[2]->data : NULL;
  gcc_tensor *dx = a->out[0];
  const int64_t N = dx->shape.dims[0], C = dx->shape.dims[1], D = N ? t->numel / N : 0;
  const int64_t ignore = a->node->av[NLL_GRAD_IGNORE_INDEX].i;
  nll_reduction r = reduction_of(a->node->av[NLL_GRAD_REDUCTION].s);
  double wsum;
  GCC_TRY(check_targets(a, t, w, C, ignore, &wsum));
  const float *g = dy->data;
  float *out = dx->data;
  memset(out, 0, (size_t)dx->numel * sizeof *out);
  /* the factor of every element: dY, or dY over the weight sum (float64, as
   * the CUDA kernel computes it) */
  const double g0 = r == NLL_NONE ? 0.0 : r == NLL_MEAN ? (double)g[0] / wsum : (double)g[0];
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < D; j++) {
      int64_t v = target_at(t, n * D + j);
      if (v == ignore)
        continue;
      double gv = r == NLL_NONE ? (double)g[n * D + j] : g0;
      out[(n * C + v) * D + j] = (float)(-(w ? (double)w[v] : 1.0) * gv);
    }
  return GCC_OK;
}

/* ---- SoftmaxCrossEntropy and its gradient ---------------------------- */

static float *F32(const gcc_tensor *t) {
  return (float *)t->data;
}

static gcc_status data_error(const gcc_kernel_args *a, const char *fmt, int64_t x, int64_t row,
                             int64_t c) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, x, row, c);
  return gcc_diag_set(a->ctx->diag, GCC_ERR_INVALID_ARGUMENT, "%s: node '%s' (%s): %s",
                      a->ctx->source ? a->ctx->source : "<model>", a->node->name,
                      gcc_op_name(a->node->op), msg);
}

static int64_t label_at(const gcc_tensor *t, int64_t i) {
  return t->dtype == GCC_DT_INT64 ? ((const int64_t *)t->data)[i]
                                  : (int64_t)((const int32_t *)t->data)[i];
}

/* Shared by forward and backward: checks labels, returns the weight sum
 * (the mean's denominator). */
static gcc_status sce_prepare(const gcc_kernel_args *a, int first, double *wsum) {
  const gcc_tensor *X = a->in[first], *T = a->in[first + 1];
  const gcc_tensor *W = a->n_in > first + 2 ? a->in[first + 2] : NULL;
  int64_t n = X->shape.dims[0], c = X->shape.dims[1];
  int64_t ignore = a->node->av[SCE_IGNORE_INDEX].i;
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t y = label_at(T, i);
    if (y == ignore)
      continue;
    if (y < 0 || y >= c)
      return data_error(a, "label %" PRId64 " in row %" PRId64 " is outside [0, %" PRId64 ")", y, i,
                        c);
    s += W ? (double)F32(W)[y] : 1.0;
  }
  *wsum = s;
  return GCC_OK;
}

/* The rows' exps: e^(x - max) in float32 by cpu_vexp.h's polynomial, GCC_VEXP_LANES
 * at a time (the row's last x % GCC_VEXP_LANES through a padded block), each
 * row's sum of them in float64 lanes added up in lane order: every row goes
 * through the same code wherever it lies, so its bits do not depend on the
 * part it falls in or the thread count. An exponent below -87 (e^-87 ~ 1.6e-38,
 * below a float's normal range and 38 decades under the row's largest term, 1)
 * counts 0. A NaN anywhere in the row (or +Inf, -Inf everywhere: x - max NaN)
 * makes the sum NaN, as e^NaN did in float64. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define SCE_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SCE_HOT
#endif

typedef double sce_vd __attribute__((vector_size(8 * GCC_VEXP_LANES)));

/* The row's max into *mx and sum_j e^(row[j] - max) (float64) returned; with
 * e, e[j] = e^(row[j] - max) in float32 (e may be row: each block is read
 * before it is written). */
SCE_HOT static double row_sum_exp(const float *row, float *e, int64_t c, float *mx) {
  const int64_t full = c - c % GCC_VEXP_LANES;
  float m = row[0];
  if (full > 0) {
    gcc_vexp_f vm;
    memcpy(&vm, row, sizeof vm);
    for (int64_t j = GCC_VEXP_LANES; j < full; j += GCC_VEXP_LANES) {
      gcc_vexp_f v;
      memcpy(&v, row + j, sizeof v);
      vm = GCC_VEXP_SEL(v > vm, v, vm);
    }
    for (int l = 0; l < GCC_VEXP_LANES; l++)
      m = vm[l] > m ? vm[l] : m;
  }
  for (int64_t j = full; j < c; j++)
    m = row[j] > m ? row[j] : m;
  *mx = m;
  const gcc_vexp_f zero = {0};
  sce_vd acc = {0};
  gcc_vexp_i bad = {0};
  for (int64_t j = 0; j < c; j += GCC_VEXP_LANES) {
    const int64_t n = c - j < GCC_VEXP_LANES ? c - j : GCC_VEXP_LANES;
    gcc_vexp_f v = zero + m; /* the padding's exponent 0: masked below */
    if (n == GCC_VEXP_LANES) /* a constant size: a vector load, not rep movs */
      memcpy(&v, row + j, sizeof v);
    else
      memcpy(&v, row + j, (size_t)n * sizeof(float));
    const gcc_vexp_f d = v - m;
    bad |= d != d;
    const gcc_vexp_i keep = d >= -87.0f; /* false for NaN and below -87 */
    gcc_vexp_f dc = GCC_VEXP_SEL(keep, d, zero - 87.0f);
    dc = GCC_VEXP_SEL(dc > 0.0f, zero, dc);
    gcc_vexp_f ev;
    GCC_VEXP_LE0(ev, dc);
    ev = (gcc_vexp_f)(keep & (gcc_vexp_i)ev);
    if (n < GCC_VEXP_LANES) {
      gcc_vexp_i lane;
      for (int l = 0; l < GCC_VEXP_LANES; l++)
        lane[l] = l;
      ev = (gcc_vexp_f)((lane < (int32_t)n) & (gcc_vexp_i)ev);
    }
    if (e && n == GCC_VEXP_LANES)
      memcpy(e + j, &ev, sizeof ev);
    else if (e)
      memcpy(e + j, &ev, (size_t)n * sizeof(float));
    acc += __builtin_convertvector(ev, sce_vd);
  }
  double s = 0.0;
  int any_bad = 0;
  for (int l = 0; l < GCC_VEXP_LANES; l++) {
    s += acc[l];
    any_bad |= bad[l] != 0;
  }
  return any_bad ? (double)NAN : s;
}

/* row_sum_exp on a CPU with AVX2 and FMA but not AVX-512 (cpu_parallel.h,
 * gcc_cpu_narrow_vectors): the x86-64-v3 clone compared and selected its
 * 16-float vectors lane by lane in scalar code (0.79 ms a GPT step against
 * 0.11 on AVX-512). The same 16-lane blocks as two 8-float halves, each
 * half's maxima and float64 sums in their own lanes, reduced in lane
 * order 0-15, every exp by the same operations (-std=c11: no contraction
 * in either form): row_sum_exp's bits. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define SCE_NARROW 1
typedef double sce_vd8 __attribute__((vector_size(64)));
__attribute__((target("avx2,fma"))) static double row_sum_exp_8(const float *row, float *e,
                                                                int64_t c, float *mx) {
  const int64_t full = c - c % GCC_VEXP_LANES;
  float m = row[0];
  if (full > 0) {
    gcc_vexp_f8 vm[2];
    memcpy(vm, row, sizeof vm);
    for (int64_t j = GCC_VEXP_LANES; j < full; j += GCC_VEXP_LANES)
      for (int h = 0; h < 2; h++) {
        gcc_vexp_f8 v;
        memcpy(&v, row + j + 8 * h, sizeof v);
        vm[h] = GCC_VEXP_SEL_T(gcc_vexp_f8, gcc_vexp_i8, v > vm[h], v, vm[h]);
      }
    for (int l = 0; l < GCC_VEXP_LANES; l++)
      m = vm[l / 8][l % 8] > m ? vm[l / 8][l % 8] : m;
  }
  for (int64_t j = full; j < c; j++)
    m = row[j] > m ? row[j] : m;
  *mx = m;
  const gcc_vexp_f8 zero = {0};
  const gcc_vexp_i8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  sce_vd8 acc[2] = {{0}, {0}};
  gcc_vexp_i8 bad[2] = {{0}, {0}};
  for (int64_t j = 0; j < c; j += 8) {
    const int h = (int)(j / 8 % 2); /* the half of the 16-lane block */
    const int64_t n = c - j < 8 ? c - j : 8;
    gcc_vexp_f8 v = zero + m; /* the padding's exponent 0: masked below */
    if (n == 8)
      memcpy(&v, row + j, sizeof v);
    else
      memcpy(&v, row + j, (size_t)n * sizeof(float));
    const gcc_vexp_f8 d = v - m;
    bad[h] |= d != d;
    const gcc_vexp_i8 keep = d >= -87.0f;
    gcc_vexp_f8 dc = GCC_VEXP_SEL_T(gcc_vexp_f8, gcc_vexp_i8, keep, d, zero - 87.0f);
    dc = GCC_VEXP_SEL_T(gcc_vexp_f8, gcc_vexp_i8, dc > 0.0f, zero, dc);
    gcc_vexp_f8 ev;
    GCC_VEXP_LE0_T(gcc_vexp_f8, gcc_vexp_i8, ev, dc);
    ev = (gcc_vexp_f8)(keep & (gcc_vexp_i8)ev);
    if (n < 8)
      ev = (gcc_vexp_f8)((lane < (int32_t)n) & (gcc_vexp_i8)ev);
    if (e && n == 8)
      memcpy(e + j, &ev, sizeof ev);
    else if (e)
      memcpy(e + j, &ev, (size_t)n * sizeof(float));
    acc[h] += __builtin_convertvector(ev, sce_vd8);
  }
  double s = 0.0;
  int any_bad = 0;
  for (int l = 0; l < GCC_VEXP_LANES; l++) {
    s += acc[l / 8][l % 8];
    any_bad |= bad[l / 8][l % 8] != 0;
  }
  return any_bad ? (double)NAN : s;
}
#else
#define SCE_NARROW 0
#endif

/* row_sum_exp in the form the machine runs */
static double row_sum_exp_any(const float *row, float *e, int64_t c, float *mx) {
#if SCE_NARROW
  if (gcc_cpu_narrow_vectors())
    return row_sum_exp_8(row, e, c, mx);
#endif
  return row_sum_exp(row, e, c, mx);
}

/* SoftmaxCrossEntropy: blocks of rows (their size from N only), each
 * block's weighted -log_softmax(x)[y] summed in float64 in row order, the
 * blocks' sums added in block order: the same bits for any thread count. */
#define SCE_MAX_BLOCKS 256
#define SCE_MIN_ROWS   64

typedef struct sce_job {
  const gcc_tensor *X, *T, *W;
  int64_t n, c, ignore, rows; /* rows per block */
  double *part;               /* [blocks] */
} sce_job;

static void sce_range(void *u, int part, int64_t b, int64_t e) {
  const sce_job *j = u;
  (void)part;
  for (int64_t blk = b; blk < e; blk++) {
    const int64_t r1 = (blk + 1) * j->rows < j->n ? (blk + 1) * j->rows : j->n;
    double s = 0.0;
    for (int64_t i = blk * j->rows; i < r1; i++) {
      const int64_t y = label_at(j->T, i);
      if (y == j->ignore)
        continue;
      const float *row = F32(j->X) + i * j->c;
      float mx;
      const double se = row_sum_exp_any(row, NULL, j->c, &mx);
      const double nll = log(se) + mx - row[y]; /* -log_softmax(x)[y] */
      s += (j->W ? (double)F32(j->W)[y] : 1.0) * nll;
    }
    j->part[blk] = s;
  }
}

gcc_status gcc_cpu_sce(const gcc_kernel_args *a) {
  const gcc_tensor *X = a->in[0], *T = a->in[1], *W = a->n_in > 2 ? a->in[2] : NULL;
  int64_t n = X->shape.dims[0], c = X->shape.dims[1];
  int mean = strcmp(a->node->av[SCE_REDUCTION].s, "mean") == 0;
  double wsum;
  GCC_TRY(sce_prepare(a, 0, &wsum));
  int64_t rows = (n + SCE_MAX_BLOCKS - 1) / SCE_MAX_BLOCKS;
  rows = rows < SCE_MIN_ROWS ? SCE_MIN_ROWS : rows;
  const int64_t blocks = (n + rows - 1) / rows;
  double part[SCE_MAX_BLOCKS];
  sce_job j = {X, T, W, n, c, a->node->av[SCE_IGNORE_INDEX].i, rows, part};
  gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, n * c), blocks, 1, sce_range, &j);
  double total = 0;
  for (int64_t k = 0; k < blocks; k++)
    total += part[k];
  /* PyTorch: mean over zero samples (all ignored) is NaN */
  F32(a->out[0])[0] = (float)(mean ? total / wsum : total);
  return GCC_OK;
}

/* SoftmaxCrossEntropyGrad's rows over parts (cpu_parallel.h), each row on
 * its own (the bits do not depend on the cut): e^(x - max) written into the
 * row of dX (no buffer), then scaled by dL w_y / (denom sum_e) in float32;
 * the label's element (p_y - 1, the one that cancels) in float64. */
typedef struct sce_grad_job {
  const gcc_tensor *X, *T, *W;
  float *dx;
  int64_t c, ignore;
  double dl, denom; /* dL; wsum for the mean, else 1 */
} sce_grad_job;

SCE_HOT static void scale_row(float *d, int64_t c, float s) {
  for (int64_t k = 0; k < c; k++)
    d[k] *= s;
}

static void sce_grad_range(void *u, int part, int64_t b, int64_t e) {
  const sce_grad_job *j = u;
  (void)part;
  const int64_t c = j->c;
  for (int64_t i = b; i < e; i++) {
    int64_t y = label_at(j->T, i);
    float *drow = j->dx + i * c;
    if (y == j->ignore) {
      memset(drow, 0, (size_t)c * sizeof *drow);
      continue;
    }
    const float *row = F32(j->X) + i * c;
    float mx;
    const double se = row_sum_exp_any(row, drow, c, &mx);
    const double scale = j->dl * (j->W ? (double)F32(j->W)[y] : 1.0) / j->denom;
    const double ey = (double)drow[y];
    scale_row(drow, c, (float)(scale / se));
    drow[y] = (float)(scale * (ey / se - 1.0));
  }
}

gcc_status gcc_cpu_sce_grad(const gcc_kernel_args *a) {
  const gcc_tensor *X = a->in[1], *T = a->in[2], *W = a->n_in > 3 ? a->in[3] : NULL;
  float dl = F32(a->in[0])[0];
  int64_t n = X->shape.dims[0], c = X->shape.dims[1];
  int mean = strcmp(a->node->av[SCE_REDUCTION].s, "mean") == 0;
  double wsum;
  GCC_TRY(sce_prepare(a, 1, &wsum));
  sce_grad_job j = {
      X, T, W, F32(a->out[0]), c, a->node->av[SCE_IGNORE_INDEX].i, (double)dl, mean ? wsum : 1.0};
  gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, n * c), n, 1, sce_grad_range, &j);
  return GCC_OK;
}
