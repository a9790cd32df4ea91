/*
 * cpu_select.c - the CPU kernels of the selection ops (graph/ops.h): Trilu
 * (ONNX Trilu-14: torch.triu / torch.tril), ArgMax / ArgMin (ONNX
 * ArgMax-13 / ArgMin-13) and ReduceMin (ONNX ReduceMin-13: torch.amin) with
 * its gradient. The float64 references of the tests and the
 * generated CUDA kernels (codegen/emit_select.c) follow the same rules.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"

/* X viewed as [batch, R, C] (the last two dims): element (r, c) is kept
 * when c - r >= k (upper) or c - r <= k (lower), else 0. Any element type
 * (a copy or a zero fill of each element's bytes). */
gcc_status gcc_cpu_trilu(const gcc_kernel_args *a) {
  const gcc_tensor *x = a->in[0];
  gcc_tensor *y = a->out[0];
  int r = x->shape.ndim;
  int64_t R = x->shape.dims[r - 2], C = x->shape.dims[r - 1], batch = x->numel / (R * C);
  int64_t k = a->node->av[TRILU_K].i;
  int upper = (int)a->node->av[TRILU_UPPER].i;
  size_t es = gcc_dtype_size(x->dtype);
  const uint8_t *src = x->data;
  uint8_t *dst = y->data;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < R; i++) {
      size_t row = (size_t)((b * R + i) * C) * es;
      /* kept columns: [lo, hi) */
      int64_t lo = upper ? i + k : 0, hi = upper ? C : i + k + 1;
      lo = lo < 0 ? 0 : lo > C ? C : lo;
      hi = hi < lo ? lo : hi > C ? C : hi;
      memset(dst + row, 0, (size_t)lo * es);
      memcpy(dst + row + (size_t)lo * es, src + row + (size_t)lo * es, (size_t)(hi - lo) * es);
      memset(dst + row + (size_t)hi * es, 0, (size_t)(C - hi) * es);
    }
  return GCC_OK;
}

/* X viewed as [outer, n, inner] (n the reduced axis). */
typedef struct arg_geom {
  int64_t outer, n, inner;
} arg_geom;

static void arg_geom_of(const gcc_shape *x, int64_t axis, arg_geom *g) {
  if (axis < 0)
    axis += x->ndim;
  g->outer = g->inner = 1;
  for (int i = 0; i < axis; i++)
    g->outer *= x->dims[i];
  for (int i = (int)axis + 1; i < x->ndim; i++)
    g->inner *= x->dims[i];
  g->n = x->dims[axis];
}

/* 1 when candidate value v (at a later position than the best b) replaces
 * it: strictly better, or equal with select_last_index. For ArgMax a NaN is
 * above every number (and equal to another NaN); for ArgMin below. */
static int better_f(float v, float b, int max, int last) {
  int vn = isnan(v), bn = isnan(b);
  if (vn || bn)
    return vn && (!bn || last);
  if (v == b)
    return last;
  return max ? v > b : v < b;
}

static int better_i(int64_t v, int64_t b, int max, int last) {
  if (v == b)
    return last;
  return max ? v > b : v < b;
}

static gcc_status arg_run(const gcc_kernel_args *a, int max) {
  const gcc_tensor *x = a->in[0];
  int64_t *y = a->out[0]->data;
  arg_geom g;
  arg_geom_of(&x->shape, a->node->av[ARG_AXIS].i, &g);
  int last = (int)a->node->av[ARG_SELECT_LAST_INDEX].i;
  for (int64_t o = 0; o < g.outer; o++)
    for (int64_t q = 0; q < g.inner; q++) {
      int64_t base = o * g.n * g.inner + q, best = 0;
      if (x->dtype == GCC_DT_FLOAT32) {
        const float *p = (const float *)x->data + base;
        for (int64_t j = 1; j < g.n; j++)
          if (better_f(p[j * g.inner], p[best * g.inner], max, last))
            best = j;
      } else if (x->dtype == GCC_DT_INT64) {
        const int64_t *p = (const int64_t *)x->data + base;
        for (int64_t j = 1; j < g.n; j++)
          if (better_i(p[j * g.inner], p[best * g.inner], max, last))
            best = j;
      } else {
        const int32_t *p = (const int32_t *)x->data + base;
        for (int64_t j = 1; j < g.n; j++)
          if (better_i(p[j * g.inner], p[best * g.inner], max, last))
            best = j;
      }
      y[o * g.inner + q] = best;
    }
  return GCC_OK;
}

gcc_status gcc_cpu_arg_max(const gcc_kernel_args *a) {
  return arg_run(a, 1);
}

gcc_status gcc_cpu_arg_min(const gcc_kernel_args *a) {
  return arg_run(a, 0);
}

/* ---- ReduceMin -------------------------------------------------------------- */

/* The index in Y (the reduced dims dropped, row-major over the kept ones)
 * of X's element i. */
static int64_t group_of(const gcc_shape *x, const int *red, int64_t i) {
  int64_t gidx = 0, gst = 1;
  for (int k = x->ndim - 1; k >= 0; k--) {
    int64_t c = i % x->dims[k];
    i /= x->dims[k];
    if (!red[k]) {
      gidx += c * gst;
      gst *= x->dims[k];
    }
  }
  return gidx;
}

/* Y[g] = the minimum of X's group g, visited in X's row-major order; a NaN
 * makes it NaN (torch.amin). */
gcc_status gcc_cpu_reduce_min(const gcc_kernel_args *a) {
  const gcc_tensor *x = a->in[0];
  gcc_tensor *yt = a->out[0];
  int red[GCC_MAX_DIMS];
  gcc_shape ys;
  GCC_TRY(gcc_reduce_min_resolve(a->node, a->ctx->source, &x->shape, red, &ys, a->ctx->diag));
  const float *xv = x->data;
  float *y = yt->data;
  for (int64_t g = 0; g < yt->numel; g++)
    y[g] = INFINITY;
  for (int64_t i = 0; i < x->numel; i++) {
    float *m = y + group_of(&x->shape, red, i);
    if (!isnan(*m) && (isnan(xv[i]) || xv[i] < *m))
      *m = xv[i];
  }
  return GCC_OK;
}

/* dX = X == Y ? dY / count : 0 with count the ties of X's group (PyTorch's
 * amin backward: (dY / count) * mask). */
gcc_status gcc_cpu_reduce_min_grad(const gcc_kernel_args *a) {
  const gcc_tensor *dyt = a->in[0], *x = a->in[1], *yt = a->in[2];
  gcc_tensor *dx = a->out[0];
  int red[GCC_MAX_DIMS];
  gcc_shape ys;
  GCC_TRY(gcc_reduce_min_resolve(a->node, a->ctx->source, &x->shape, red, &ys, a->ctx->diag));
  const float *xv = x->data, *y = yt->data, *dy = dyt->data;
  float *out = dx->data;
  int64_t *count = calloc((size_t)yt->numel, sizeof *count);
  if (!count)
    return gcc_diag_set(a->ctx->diag, GCC_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory",
                        a->node->name, gcc_op_name(a->node->op));
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t g = group_of(&x->shape, red, i);
    count[g] += xv[i] == y[g];
  }
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t g = group_of(&x->shape, red, i);
    out[i] = xv[i] == y[g] ? dy[g] / (float)count[g] : 0.0f;
  }
  free(count);
  return GCC_OK;
}
