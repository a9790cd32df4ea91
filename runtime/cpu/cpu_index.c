/*
 * cpu_index.c - the CPU kernels of the indexing ops: Gather (ONNX
 * Gather-13, nn.Embedding's lookup) and GatherGrad, its deterministic
 * scatter-add; GatherElements (torch.gather) and GatherElementsGrad; Slice,
 * SliceGrad and Expand (graph/ops.h).
 *
 * Both view data as [outer, A, inner] (A the gathered axis) and Y / dY as
 * [outer, n, inner] (n the number of indices): one index moves one
 * contiguous row of `inner` elements.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"

typedef struct gather_geom {
  int64_t outer, a, inner, n;
} gather_geom;

static void geom_of(const gcc_shape *data, int64_t axis, int64_t n, gather_geom *g) {
  if (axis < 0)
    axis += data->ndim;
  g->outer = g->inner = 1;
  for (int i = 0; i < axis; i++)
    g->outer *= data->dims[i];
  for (int i = (int)axis + 1; i < data->ndim; i++)
    g->inner *= data->dims[i];
  g->a = data->dims[axis];
  g->n = n;
}

static int64_t index_at(const gcc_tensor *t, int64_t k) {
  return t->dtype == GCC_DT_INT32 ? (int64_t)((const int32_t *)t->data)[k]
                                  : ((const int64_t *)t->data)[k];
}

/* Every index in [-a, a), or GCC_ERR_INVALID_ARGUMENT naming the node and
 * the first index outside. */
static gcc_status check_indices(const gcc_kernel_args *a, const gcc_tensor *ix, int64_t dim) {
  for (int64_t k = 0; k < ix->numel; k++) {
    int64_t v = index_at(ix, k);
    if (v < -dim || v >= dim)
      return gcc_diag_set(a->ctx->diag, GCC_ERR_INVALID_ARGUMENT,
                          "%s: node '%s' (%s): index %" PRId64 " at position %" PRId64
                          " of the indices is outside [-%" PRId64 ", %" PRId64 ")",
                          a->ctx->source ? a->ctx->source : "<model>", a->node->name,
                          gcc_op_name(a->node->op), v, k, dim, dim);
  }
  return GCC_OK;
}

gcc_status gcc_cpu_gather(const gcc_kernel_args *a) {
  const gcc_tensor *x = a->in[0], *ix = a->in[1];
  gather_geom g;
  geom_of(&x->shape, a->node->av[GATHER_AXIS].i, ix->numel, &g);
  GCC_TRY(check_indices(a, ix, g.a));
  size_t es = gcc_dtype_size(x->dtype), row = (size_t)g.inner * es;
  const uint8_t *src = x->data;
  uint8_t *y = a->out[0]->data;
  for (int64_t o = 0; o < g.outer; o++)
    for (int64_t j = 0; j < g.n; j++) {
      int64_t v = index_at(ix, j);
      v += v < 0 ? g.a : 0;
      memcpy(y + (size_t)(o * g.n + j) * row, src + (size_t)(o * g.a + v) * row, row);
    }
  return GCC_OK;
}

/* dX = 0; dX[o, idx[j], :] += dY[o, j, :] for j in index order: the same
 * float32 additions in the same order on every run (and in the order the
 * CUDA kernel adds them, codegen/emit_index.c). */
gcc_status gcc_cpu_gather_grad(const gcc_kernel_args *a) {
  const gcc_tensor *dy = a->in[0], *ix = a->in[1];
  gcc_tensor *dx = a->out[0];
  gather_geom g;
  geom_of(&dx->shape, a->node->av[GATHER_GRAD_AXIS].i, ix->numel, &g);
  GCC_TRY(check_indices(a, ix, g.a));
  const float *s = dy->data;
  float *y = dx->data;
  memset(y, 0, (size_t)dx->numel * sizeof *y);
  for (int64_t o = 0; o < g.outer; o++)
    for (int64_t j = 0; j < g.n; j++) {
      int64_t v = index_at(ix, j);
      v += v < 0 ? g.a : 0;
      float *d = y + (o * g.a + v) * g.inner;
      const float *r = s + (o * g.n + j) * g.inner;
      for (int64_t i = 0; i < g.inner; i++)
        d[i] += r[i];
    }
  return GCC_OK;
}

/* ---- GatherElements -------------------------------------------------------- */

/* The offset in data (shape `x`) of the element that position i of the
 * indices (shape `q`, same rank) reads: q's coordinates with the axis one
 * replaced by index v (already in [0, x.dims[axis])). */
static int64_t elem_offset(const gcc_shape *x, const gcc_shape *q, int axis, int64_t i, int64_t v) {
  int64_t off = 0, st = 1;
  for (int k = q->ndim - 1; k >= 0; k--) {
    int64_t c = i % q->dims[k];
    i /= q->dims[k];
    off += (k == axis ? v : c) * st;
    st *= x->dims[k];
  }
  return off;
}

static int elem_axis(const gcc_node *n, int rank, int attr) {
  int64_t axis = n->av[attr].i;
  return (int)(axis < 0 ? axis + rank : axis);
}

/* Y[c] = data[c with c[axis] = idx[c]]: any element type (a copy). */
gcc_status gcc_cpu_gather_elements(const gcc_kernel_args *a) {
  const gcc_tensor *x = a->in[0], *ix = a->in[1];
  int axis = elem_axis(a->node, x->shape.ndim, GATHER_ELEMENTS_AXIS);
  int64_t dim = x->shape.dims[axis];
  GCC_TRY(check_indices(a, ix, dim));
  size_t es = gcc_dtype_size(x->dtype);
  const uint8_t *src = x->data;
  uint8_t *y = a->out[0]->data;
  for (int64_t i = 0; i < ix->numel; i++) {
    int64_t v = index_at(ix, i);
    v += v < 0 ? dim : 0;
    memcpy(y + (size_t)i * es, src + (size_t)elem_offset(&x->shape, &ix->shape, axis, i, v) * es,
           es);
  }
  return GCC_OK;
}

/* dX = 0; dX[c with c[axis] = idx[c]] += dY[c] for c in row-major order:
 * the same float32 additions in the same order on every run (and in the
 * order the CUDA kernel adds them, codegen/emit_index.c). */
gcc_status gcc_cpu_gather_elements_grad(const gcc_kernel_args *a) {
  const gcc_tensor *dy = a->in[0], *ix = a->in[1];
  gcc_tensor *dx = a->out[0];
  int axis = elem_axis(a->node, dx->shape.ndim, GATHER_ELEMENTS_GRAD_AXIS);
  int64_t dim = dx->shape.dims[axis];
  GCC_TRY(check_indices(a, ix, dim));
  const float *s = dy->data;
  float *y = dx->data;
  memset(y, 0, (size_t)dx->numel * sizeof *y);
  for (int64_t i = 0; i < ix->numel; i++) {
    int64_t v = index_at(ix, i);
    v += v < 0 ? dim : 0;
    y[elem_offset(&dx->shape, &ix->shape, axis, i, v)] += s[i];
  }
  return GCC_OK;
}

/* ---- Slice -------------------------------------------------------------- */

/* The element strides of `s` (row-major). */
static void strides_of(const gcc_shape *s, int64_t *st) {
  int64_t acc = 1;
  for (int i = s->ndim - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= s->dims[i];
  }
}

/* Y[c] = X[start + c * step] per dim: an odometer over Y with the offset in
 * X kept incrementally. */
gcc_status gcc_cpu_slice(const gcc_kernel_args *a) {
  const gcc_tensor *x = a->in[0];
  gcc_tensor *yt = a->out[0];
  int64_t start[GCC_MAX_DIMS], step[GCC_MAX_DIMS], xst[GCC_MAX_DIMS], idx[GCC_MAX_DIMS] = {0};
  gcc_shape y;
  GCC_TRY(gcc_slice_resolve(a->node, a->ctx->source, &x->shape, start, step, &y, a->ctx->diag));
  strides_of(&x->shape, xst);
  int r = y.ndim;
  size_t es = gcc_dtype_size(x->dtype);
  int64_t ix = 0;
  for (int k = 0; k < r; k++)
    ix += start[k] * xst[k];
  const uint8_t *src = x->data;
  uint8_t *dst = yt->data;
  if (r > 0 && step[r - 1] == 1) { /* contiguous rows (a GPT's q, k, v split): one memcpy each */
    const int64_t row = y.dims[r - 1], rows = row > 0 ? yt->numel / row : 0;
    for (int64_t o = 0; o < rows; o++) {
      memcpy(dst + (size_t)(o * row) * es, src + (size_t)ix * es, (size_t)row * es);
      for (int k = r - 2; k >= 0; k--) {
        ix += step[k] * xst[k];
        if (++idx[k] < y.dims[k])
          break;
        ix -= step[k] * xst[k] * idx[k];
        idx[k] = 0;
      }
    }
    return GCC_OK;
  }
  for (int64_t o = 0; o < yt->numel; o++) {
    memcpy(dst + (size_t)o * es, src + (size_t)ix * es, es);
    for (int k = r - 1; k >= 0; k--) {
      ix += step[k] * xst[k];
      if (++idx[k] < y.dims[k])
        break;
      ix -= step[k] * xst[k] * idx[k];
      idx[k] = 0;
    }
  }
  return GCC_OK;
}

/* SliceGrad of a cut along one dim `ax` with step 1: dX seen as [outer, dim,
 * inner], dY as [outer, len, inner]; per outer block the zeros before, dY's
 * block, the zeros after (outer blocks split over the threads). */
typedef struct slice_grad_job {
  const float *dy;
  float *dx;
  int64_t inner, dim, start, len;
} slice_grad_job;

static void slice_grad_range(void *u, int part, int64_t b, int64_t e) {
  const slice_grad_job *j = u;
  (void)part;
  const int64_t in = j->inner, head = j->start * in, body = j->len * in;
  const int64_t tail = (j->dim - j->start - j->len) * in;
  for (int64_t o = b; o < e; o++) {
    float *t = j->dx + o * j->dim * in;
    memset(t, 0, (size_t)head * sizeof *t);
    memcpy(t + head, j->dy + o * body, (size_t)body * sizeof *t);
    memset(t + head + body, 0, (size_t)tail * sizeof *t);
  }
}

/* dX = 0, then dX[start + c * step] = dY[c]: the positions are distinct. */
gcc_status gcc_cpu_slice_grad(const gcc_kernel_args *a) {
  const gcc_tensor *dy = a->in[0];
  gcc_tensor *dx = a->out[0];
  int64_t start[GCC_MAX_DIMS], step[GCC_MAX_DIMS], xst[GCC_MAX_DIMS], idx[GCC_MAX_DIMS] = {0};
  gcc_shape y;
  GCC_TRY(gcc_slice_resolve(a->node, a->ctx->source, &dx->shape, start, step, &y, a->ctx->diag));
  strides_of(&dx->shape, xst);
  int r = y.ndim;
  int64_t ix = 0;
  for (int k = 0; k < r; k++)
    ix += start[k] * xst[k];
  const float *s = dy->data;
  float *t = dx->data;
  int ax = -1, one_cut = r > 0; /* one dim cut, step 1 (a GPT's q, k, v split): one pass */
  for (int k = 0; k < r; k++)
    if (y.dims[k] != dx->shape.dims[k] || start[k] != 0 || step[k] != 1) {
      one_cut &= ax < 0 && step[k] == 1;
      ax = k;
    }
  if (ax < 0)
    ax = r - 1; /* nothing cut: a copy */
  if (one_cut && dx->numel > 0) {
    slice_grad_job j = {s, t, 1, dx->shape.dims[ax], start[ax], y.dims[ax]};
    for (int k = ax + 1; k < r; k++)
      j.inner *= dx->shape.dims[k];
    const int64_t outer = dx->numel / (j.inner * j.dim);
    gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, dx->numel), outer, 1, slice_grad_range, &j);
    return GCC_OK;
  }
  memset(t, 0, (size_t)dx->numel * sizeof *t);
  if (r > 0 && step[r - 1] == 1) { /* contiguous rows: one memcpy each */
    const int64_t row = y.dims[r - 1], rows = row > 0 ? dy->numel / row : 0;
    for (int64_t o = 0; o < rows; o++) {
      memcpy(t + ix, s + o * row, (size_t)row * sizeof *t);
      for (int k = r - 2; k >= 0; k--) {
        ix += step[k] * xst[k];
        if (++idx[k] < y.dims[k])
          break;
        ix -= step[k] * xst[k] * idx[k];
        idx[k] = 0;
      }
    }
    return GCC_OK;
  }
  for (int64_t o = 0; o < dy->numel; o++) {
    t[ix] = s[o];
    for (int k = r - 1; k >= 0; k--) {
      ix += step[k] * xst[k];
      if (++idx[k] < y.dims[k])
        break;
      ix -= step[k] * xst[k] * idx[k];
      idx[k] = 0;
    }
  }
  return GCC_OK;
}

/* ---- Expand ------------------------------------------------------------- */

/* Y = X broadcast to Y's shape: an odometer over Y, X's offset kept with
 * stride 0 on its broadcast (and missing leading) dims. */
gcc_status gcc_cpu_expand(const gcc_kernel_args *a) {
  const gcc_tensor *x = a->in[0];
  gcc_tensor *y = a->out[0];
  int r = y->shape.ndim, off = r - x->shape.ndim;
  int64_t xst[GCC_MAX_DIMS], st[GCC_MAX_DIMS], idx[GCC_MAX_DIMS] = {0}, ix = 0;
  strides_of(&x->shape, xst);
  for (int k = 0; k < r; k++)
    st[k] = k < off || x->shape.dims[k - off] == 1 ? 0 : xst[k - off];
  size_t es = gcc_dtype_size(x->dtype);
  const uint8_t *src = x->data;
  uint8_t *dst = y->data;
  for (int64_t o = 0; o < y->numel; o++) {
    memcpy(dst + (size_t)o * es, src + (size_t)ix * es, es);
    for (int k = r - 1; k >= 0; k--) {
      ix += st[k];
      if (++idx[k] < y->shape.dims[k])
        break;
      ix -= st[k] * idx[k];
      idx[k] = 0;
    }
  }
  return GCC_OK;
}
