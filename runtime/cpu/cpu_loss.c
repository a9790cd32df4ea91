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
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"

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

gcc_status gcc_cpu_sce(const gcc_kernel_args *a) {
  const gcc_tensor *X = a->in[0], *T = a->in[1], *W = a->n_in > 2 ? a->in[2] : NULL;
  int64_t n = X->shape.dims[0], c = X->shape.dims[1];
  int64_t ignore = a->node->av[SCE_IGNORE_INDEX].i;
  int mean = strcmp(a->node->av[SCE_REDUCTION].s, "mean") == 0;
  double wsum;
  GCC_TRY(sce_prepare(a, 0, &wsum));
  double total = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t y = label_at(T, i);
    if (y == ignore)
      continue;
    const float *row = F32(X) + i * c;
    float mx = row[0];
    for (int64_t j = 1; j < c; j++)
      mx = row[j] > mx ? row[j] : mx;
    double se = 0;
    for (int64_t j = 0; j < c; j++)
      se += exp((double)row[j] - mx);
    double nll = log(se) + mx - row[y]; /* -log_softmax(x)[y] */
    total += (W ? (double)F32(W)[y] : 1.0) * nll;
  }
  /* PyTorch: mean over zero samples (all ignored) is NaN */
  F32(a->out[0])[0] = (float)(mean ? total / wsum : total);
  return GCC_OK;
}

/* SoftmaxCrossEntropyGrad's rows over parts (cpu_parallel.h): each row's
 * e^(x - max) computed once into the part's float64 buffer (without one,
 * twice: the same values) */
typedef struct sce_grad_job {
  const gcc_tensor *X, *T, *W;
  float *dx;
  int64_t c, ignore;
  double dl, denom; /* dL; wsum for the mean, else 1 */
} sce_grad_job;

static void sce_grad_range(void *u, int part, int64_t b, int64_t e) {
  const sce_grad_job *j = u;
  (void)part;
  const int64_t c = j->c;
  double *ex = malloc((size_t)c * sizeof *ex);
  for (int64_t i = b; i < e; i++) {
    int64_t y = label_at(j->T, i);
    float *drow = j->dx + i * c;
    if (y == j->ignore) {
      memset(drow, 0, (size_t)c * sizeof *drow);
      continue;
    }
    const float *row = F32(j->X) + i * c;
    float mx = row[0];
    for (int64_t k = 1; k < c; k++)
      mx = row[k] > mx ? row[k] : mx;
    double se = 0;
    for (int64_t k = 0; k < c; k++) {
      const double v = exp((double)row[k] - mx);
      if (ex)
        ex[k] = v;
      se += v;
    }
    double scale = j->dl * (j->W ? (double)F32(j->W)[y] : 1.0) / j->denom;
    for (int64_t k = 0; k < c; k++) {
      double p = (ex ? ex[k] : exp((double)row[k] - mx)) / se;
      drow[k] = (float)(scale * (p - (k == y ? 1.0 : 0.0)));
    }
  }
  free(ex);
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
