/*
 * cpu_loss.c - the CPU kernels of NegativeLogLikelihoodLoss (ONNX
 * NegativeLogLikelihoodLoss-13/22, torch.nn.functional.nll_loss) and its
 * gradient (semantics in graph/ops.h).
 *
 * Both view the input as (N, C, D) (D = d1 * ... * dk, 1 for a 2-D input)
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
