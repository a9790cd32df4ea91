/*
 * cpu_kernels.c - the CPU reference backend. Plain loops the compiler can
 * vectorise, OpenBLAS for GEMM, float64 accumulation in the reductions
 * whose result is a single number (losses).
 */
#include "runtime/cpu_kernels.h"

#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "graph/ops.h"

/* ---- helpers ---------------------------------------------------------- */

/* Hot pointwise loops are compiled twice, for AVX2 and for baseline x86-64,
 * and the loader picks one at start-up (GCC function multi-versioning), so
 * one binary is fast on current CPUs and still runs on old ones. Without
 * -ffast-math and with ISO C (no FMA contraction) both clones give the same
 * bits. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define GCC_HOT __attribute__((target_clones("avx2", "default")))
#else
#define GCC_HOT
#endif

GCC_HOT static void relu_loop(const float *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN propagates, as torch.relu */
}

GCC_HOT static void relu_grad_loop(const float *restrict dy, const float *restrict y,
                                   float *restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

GCC_HOT static void add_loop(const float *restrict a, const float *restrict b, float *restrict y,
                             int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = a[i] + b[i];
}

GCC_HOT static void add_row_loop(const float *restrict a, const float *restrict row,
                                 float *restrict y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      y[r * cols + c] = a[r * cols + c] + row[c];
}

GCC_HOT static void col_sum_loop(const float *restrict x, float *restrict y, int64_t rows,
                                 int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      y[c] += x[r * cols + c];
}

/* torch.optim.SGD for one parameter; `first` = no momentum history yet */
GCC_HOT static void sgd_loop(float *restrict p, const float *restrict g, float *restrict buf,
                             int64_t n, float lr, float mom, float damp, float wd, int nesterov,
                             int first) {
  if (!buf) {
    for (int64_t i = 0; i < n; i++)
      p[i] = p[i] + (-lr) * (g[i] + wd * p[i]);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    float d = g[i] + wd * p[i];
    float b = first ? d : buf[i] * mom + (1.0f - damp) * d;
    buf[i] = b;
    p[i] = p[i] + (-lr) * (nesterov ? d + mom * b : b);
  }
}

GCC_HOT static void adam_loop(float *restrict p, const float *restrict g, float *restrict m,
                              float *restrict v, int64_t n, float b1, float b2, float eps,
                              float wd, float step_size, float bc2_sqrt) {
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] + wd * p[i];
    m[i] = m[i] * b1 + (1.0f - b1) * gi;
    v[i] = v[i] * b2 + (1.0f - b2) * gi * gi;
    float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    p[i] = p[i] + (-step_size) * (m[i] / denom);
  }
}

static float *F32(const gcc_tensor *t) { return (float *)t->data; }

/* Strides (in elements) of `in` broadcast to `out`: 0 on broadcast dims.
 * Both padded to out->ndim. */
static void bcast_strides(const gcc_shape *in, const gcc_shape *out, int64_t *st) {
  int64_t s = 1;
  for (int i = out->ndim - 1; i >= 0; i--) {
    int j = in->ndim - out->ndim + i;
    int64_t dim = j >= 0 ? in->dims[j] : 1;
    st[i] = dim == 1 ? 0 : s;
    s *= dim;
  }
}

/* Visits every element of `out` shape with the matching offsets of up to
 * two broadcast operands: calls f(o, ia, ib, user). */
typedef void (*bcast_visit)(int64_t o, int64_t ia, int64_t ib, void *user);

static void bcast_walk(const gcc_shape *out, const gcc_shape *a, const gcc_shape *b,
                       bcast_visit f, void *user) {
  int64_t sa[GCC_MAX_DIMS], sb[GCC_MAX_DIMS], idx[GCC_MAX_DIMS] = {0};
  bcast_strides(a, out, sa);
  if (b)
    bcast_strides(b, out, sb);
  else
    memset(sb, 0, sizeof sb);
  int64_t n = gcc_shape_numel(out, NULL), ia = 0, ib = 0;
  int nd = out->ndim;
  for (int64_t o = 0; o < n; o++) {
    f(o, ia, ib, user);
    for (int k = nd - 1; k >= 0; k--) {
      idx[k]++;
      ia += sa[k];
      ib += sb[k];
      if (idx[k] < out->dims[k])
        break;
      ia -= sa[k] * idx[k];
      ib -= sb[k] * idx[k];
      idx[k] = 0;
    }
  }
}

static gcc_status data_error(const gcc_kernel_args *a, const char *fmt, int64_t x, int64_t row,
                             int64_t c) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, x, row, c);
  return gcc_diag_set(a->ctx->diag, GCC_ERR_INVALID_ARGUMENT, "%s: node '%s' (%s): %s",
                      a->ctx->source ? a->ctx->source : "<model>", a->node->name,
                      gcc_op_name(a->node->op), msg);
}

/* ---- GEMM ------------------------------------------------------------- */

/* When a second OpenBLAS thread pays off (bench/gemm_threads on 2 cores,
 * row-major Y (m x n) = A (m x k) B (k x n)): below ~4 MFLOP the wake-up and
 * synchronisation cost more than they save, and OpenBLAS splits narrow
 * outputs badly: n < 128, or n < 256 with a short k < 128, ran slower on
 * two threads than on one at every size measured. */
#define GCC_GEMM_PARALLEL_FLOPS (4.0 * 1000 * 1000)

int gcc_cpu_gemm_threads(int64_t m, int64_t n, int64_t k, int max_threads) {
  double flops = 2.0 * (double)m * (double)n * (double)k;
  if (max_threads <= 1 || flops < GCC_GEMM_PARALLEL_FLOPS || n < 128 || (k < 128 && n < 256))
    return 1;
  return max_threads;
}

/* The OpenBLAS thread count is process-wide, and every plan (training and
 * evaluation plans of a session, other sessions) changes it: compare with
 * what OpenBLAS has now, not with what this plan set last, or a GEMM runs
 * with the count another plan left behind (and, as OpenBLAS partitions by
 * thread count, gives bits that depend on which plans ran before). */
static void set_blas_threads(gcc_cpu_ctx *ctx, int t) {
  if (openblas_get_num_threads() != t)
    openblas_set_num_threads(t);
  ctx->blas_threads = t;
}

/* A matrix-vector product pays a second thread only when the matrix is large
 * (bench/gemm_threads, batch-1 table, on 2 cores: 784x512 takes 19.6 us on one thread
 * and 10.9 on two, 256x128 1.96 and 1.90, smaller ones no gain). */
#define GCC_GEMV_PARALLEL_ELEMS (64 * 1024)

static void gemm_rowmajor(gcc_cpu_ctx *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k,
                          float alpha, const float *A, const float *B, float beta, float *Y) {
  /* One row or one column of output is a matrix-vector product. OpenBLAS's
   * sgemm packs both operands even then (141 us for 1x784 . 784x512 against
   * 20 us as sgemv): batch-1 inference lives on this path. The vector
   * operand is contiguous whatever its transpose flag, as one of its
   * dimensions is 1. */
  if ((m == 1 || n == 1) && k > 0) {
    int64_t rows = m == 1 ? n : m; /* of the matrix in y = op(M) x */
    set_blas_threads(ctx, ctx->max_threads > 1 && rows * k >= GCC_GEMV_PARALLEL_ELEMS
                              ? ctx->max_threads
                              : 1);
    if (m == 1) /* y[n] = op(B)^T a: B is [n,k] when transposed, else [k,n] */
      cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, (blasint)(tb ? n : k),
                  (blasint)(tb ? k : n), alpha, B, (blasint)(tb ? k : n), A, 1, beta, Y, 1);
    else /* y[m] = op(A) b: A is [k,m] when transposed, else [m,k] */
      cblas_sgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, (blasint)(ta ? k : m),
                  (blasint)(ta ? m : k), alpha, A, (blasint)(ta ? m : k), B, 1, beta, Y, 1);
    return;
  }
  set_blas_threads(ctx, gcc_cpu_gemm_threads(m, n, k, ctx->max_threads));
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (blasint)m, (blasint)n, (blasint)k, alpha, A, (blasint)(ta ? m : k), B,
              (blasint)(tb ? k : n), beta, Y, (blasint)n);
}

typedef struct copy_ctx {
  float *out;
  const float *in;
  float scale;
} copy_ctx;

static void visit_copy(int64_t o, int64_t ia, int64_t ib, void *u) {
  (void)ib;
  copy_ctx *c = u;
  c->out[o] = c->in[ia];
}

gcc_status gcc_cpu_gemm(const gcc_kernel_args *a) {
  const gcc_node *n = a->node;
  const gcc_tensor *A = a->in[0], *B = a->in[1], *C = a->n_in > 2 ? a->in[2] : NULL;
  gcc_tensor *Y = a->out[0];
  int ta = (int)n->av[GEMM_TRANS_A].i, tb = (int)n->av[GEMM_TRANS_B].i;
  int64_t m = Y->shape.dims[0], nn = Y->shape.dims[1];
  int64_t k = ta ? A->shape.dims[0] : A->shape.dims[1];
  float beta = 0.0f;
  if (C) {
    float *y = F32(Y);
    const float *c = F32(C);
    if (C->numel == nn && (C->shape.ndim == 1 || C->shape.dims[0] == 1)) {
      for (int64_t i = 0; i < m; i++) /* bias row, the nn.Linear case */
        memcpy(y + i * nn, c, (size_t)nn * sizeof *y);
    } else if (C->numel == Y->numel) {
      memcpy(y, c, (size_t)Y->numel * sizeof *y);
    } else {
      copy_ctx cc = {y, c, 1.0f};
      bcast_walk(&Y->shape, &C->shape, NULL, visit_copy, &cc);
    }
    beta = n->av[GEMM_BETA].f;
  }
  gemm_rowmajor(a->ctx, ta, tb, m, nn, k, n->av[GEMM_ALPHA].f, F32(A), F32(B), beta, F32(Y));
  return GCC_OK;
}

gcc_status gcc_cpu_matmul(const gcc_kernel_args *a) {
  const gcc_tensor *A = a->in[0], *B = a->in[1];
  gcc_tensor *Y = a->out[0];
  gemm_rowmajor(a->ctx, 0, 0, Y->shape.dims[0], Y->shape.dims[1], A->shape.dims[1], 1.0f,
                F32(A), F32(B), 0.0f, F32(Y));
  return GCC_OK;
}

/* ---- elementwise ------------------------------------------------------ */

typedef struct add_ctx {
  float *y;
  const float *a, *b;
} add_ctx;

static void visit_add(int64_t o, int64_t ia, int64_t ib, void *u) {
  add_ctx *c = u;
  c->y[o] = c->a[ia] + c->b[ib];
}

gcc_status gcc_cpu_add(const gcc_kernel_args *a) {
  const gcc_tensor *A = a->in[0], *B = a->in[1];
  gcc_tensor *Y = a->out[0];
  float *y = F32(Y);
  const float *x0 = F32(A), *x1 = F32(B);
  int64_t n = Y->numel;
  if (A->numel == n && B->numel == n) {
    add_loop(x0, x1, y, n);
  } else if (A->numel == n && Y->shape.ndim >= 1 &&
             B->numel == Y->shape.dims[Y->shape.ndim - 1] &&
             (B->shape.ndim == 1 || B->numel == 1 ||
              B->shape.dims[B->shape.ndim - 1] == B->numel)) {
    int64_t cols = B->numel; /* row broadcast: x + bias */
    add_row_loop(x0, x1, y, n / cols, cols);
  } else {
    add_ctx c = {y, x0, x1};
    bcast_walk(&Y->shape, &A->shape, &B->shape, visit_add, &c);
  }
  return GCC_OK;
}

gcc_status gcc_cpu_relu(const gcc_kernel_args *a) {
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  relu_loop(x, y, a->out[0]->numel);
  return GCC_OK;
}

gcc_status gcc_cpu_relu_grad(const gcc_kernel_args *a) {
  const float *dy = F32(a->in[0]), *y = F32(a->in[1]);
  float *dx = F32(a->out[0]);
  relu_grad_loop(dy, y, dx, a->out[0]->numel);
  return GCC_OK;
}

gcc_status gcc_cpu_identity(const gcc_kernel_args *a) {
  memcpy(a->out[0]->data, a->in[0]->data,
         (size_t)a->out[0]->numel * gcc_dtype_size(a->out[0]->dtype));
  return GCC_OK;
}

typedef struct sum_ctx {
  float *out;
  const float *in;
} sum_ctx;

static void visit_sum(int64_t o, int64_t ia, int64_t ib, void *u) {
  (void)ib;
  sum_ctx *c = u;
  c->out[ia] += c->in[o];
}

gcc_status gcc_cpu_reduce_sum_to(const gcc_kernel_args *a) {
  const gcc_tensor *X = a->in[0];
  gcc_tensor *Y = a->out[0];
  const float *x = F32(X);
  float *y = F32(Y);
  float scale = a->node->av[REDUCE_SUM_TO_SCALE].f;
  memset(y, 0, (size_t)Y->numel * sizeof *y);
  int64_t last = X->shape.ndim ? X->shape.dims[X->shape.ndim - 1] : 1;
  if (Y->numel == last && X->shape.ndim >= 1 &&
      (Y->shape.ndim == 0 || Y->shape.dims[Y->shape.ndim - 1] == last)) {
    col_sum_loop(x, y, X->numel / last, last); /* column sums: the bias gradient */
  } else {
    /* walk the input; the output is the broadcast operand */
    sum_ctx c = {y, x};
    bcast_walk(&X->shape, &Y->shape, NULL, visit_sum, &c);
  }
  if (scale != 1.0f)
    for (int64_t i = 0; i < Y->numel; i++)
      y[i] *= scale;
  return GCC_OK;
}

/* ---- losses ----------------------------------------------------------- */

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
      return data_error(a, "label %" PRId64 " in row %" PRId64 " is outside [0, %" PRId64 ")", y,
                        i, c);
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

gcc_status gcc_cpu_sce_grad(const gcc_kernel_args *a) {
  const gcc_tensor *X = a->in[1], *T = a->in[2], *W = a->n_in > 3 ? a->in[3] : NULL;
  float dl = F32(a->in[0])[0];
  int64_t n = X->shape.dims[0], c = X->shape.dims[1];
  int64_t ignore = a->node->av[SCE_IGNORE_INDEX].i;
  int mean = strcmp(a->node->av[SCE_REDUCTION].s, "mean") == 0;
  double wsum;
  GCC_TRY(sce_prepare(a, 1, &wsum));
  float *dx = F32(a->out[0]);
  for (int64_t i = 0; i < n; i++) {
    int64_t y = label_at(T, i);
    float *drow = dx + i * c;
    if (y == ignore) {
      memset(drow, 0, (size_t)c * sizeof *drow);
      continue;
    }
    const float *row = F32(X) + i * c;
    float mx = row[0];
    for (int64_t j = 1; j < c; j++)
      mx = row[j] > mx ? row[j] : mx;
    double se = 0;
    for (int64_t j = 0; j < c; j++)
      se += exp((double)row[j] - mx);
    double scale = (double)dl * (W ? (double)F32(W)[y] : 1.0) / (mean ? wsum : 1.0);
    for (int64_t j = 0; j < c; j++) {
      double p = exp((double)row[j] - mx) / se;
      drow[j] = (float)(scale * (p - (j == y ? 1.0 : 0.0)));
    }
  }
  return GCC_OK;
}

gcc_status gcc_cpu_mse(const gcc_kernel_args *a) {
  const float *p = F32(a->in[0]), *t = F32(a->in[1]);
  int64_t n = a->in[0]->numel;
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = (double)p[i] - t[i];
    s += e * e;
  }
  int mean = strcmp(a->node->av[MSE_REDUCTION].s, "mean") == 0;
  F32(a->out[0])[0] = (float)(mean ? s / (double)n : s);
  return GCC_OK;
}

gcc_status gcc_cpu_mse_grad(const gcc_kernel_args *a) {
  float dl = F32(a->in[0])[0];
  const float *p = F32(a->in[1]), *t = F32(a->in[2]);
  float *dx = F32(a->out[0]);
  int64_t n = a->in[1]->numel;
  int mean = strcmp(a->node->av[MSE_REDUCTION].s, "mean") == 0;
  float scale = (float)(2.0 * (double)dl / (mean ? (double)n : 1.0)); /* exact for any n */
  for (int64_t i = 0; i < n; i++)
    dx[i] = scale * (p[i] - t[i]);
  return GCC_OK;
}

/* ---- optimizers ------------------------------------------------------- */

gcc_status gcc_cpu_sgd(const gcc_kernel_args *a) {
  const gcc_node *n = a->node;
  float *p = F32(a->in[0]);
  const float *g = F32(a->in[1]);
  float *buf = a->n_in > 2 && a->in[2] ? F32(a->in[2]) : NULL;
  float lr = n->av[SGD_LR].f, mom = n->av[SGD_MOMENTUM].f, damp = n->av[SGD_DAMPENING].f;
  float wd = n->av[SGD_WEIGHT_DECAY].f;
  int nesterov = (int)n->av[SGD_NESTEROV].i;
  sgd_loop(p, g, buf, a->in[0]->numel, lr, mom, damp, wd, nesterov,
           a->ctx->optimizer_step == 0);
  return GCC_OK;
}

gcc_status gcc_cpu_adam(const gcc_kernel_args *a) {
  const gcc_node *n = a->node;
  float *p = F32(a->in[0]), *m = F32(a->in[2]), *v = F32(a->in[3]);
  const float *g = F32(a->in[1]);
  float lr = n->av[ADAM_LR].f, b1 = n->av[ADAM_BETA1].f, b2 = n->av[ADAM_BETA2].f;
  float eps = n->av[ADAM_EPS].f, wd = n->av[ADAM_WEIGHT_DECAY].f;
  double step = (double)(a->ctx->optimizer_step + 1);
  /* as torch.optim.Adam (1.13, single-tensor path): corrections in double */
  double bc1 = 1.0 - pow((double)b1, step), bc2 = 1.0 - pow((double)b2, step);
  float step_size = (float)((double)lr / bc1);
  float bc2_sqrt = (float)sqrt(bc2);
  adam_loop(p, g, m, v, a->in[0]->numel, b1, b2, eps, wd, step_size, bc2_sqrt);
  return GCC_OK;
}

/* ---- Softmax ------------------------------------------------------------ */

/* The (outer, axis, inner) factorisation of a shape around `axis`. */
static void softmax_dims(const gcc_tensor *t, int64_t axis, int64_t *outer, int64_t *len,
                         int64_t *inner) {
  int nd = t->shape.ndim;
  if (axis < 0)
    axis += nd;
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; i++)
    *outer *= t->shape.dims[i];
  *len = t->shape.dims[axis];
  for (int i = (int)axis + 1; i < nd; i++)
    *inner *= t->shape.dims[i];
}

gcc_status gcc_cpu_softmax(const gcc_kernel_args *a) {
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  int64_t outer, len, inner;
  softmax_dims(a->in[0], a->node->av[SOFTMAX_AXIS].i, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const float *xr = x + o * len * inner + i;
      float *yr = y + o * len * inner + i;
      float mx = xr[0];
      for (int64_t j = 1; j < len; j++)
        mx = xr[j * inner] > mx ? xr[j * inner] : mx;
      double se = 0;
      for (int64_t j = 0; j < len; j++)
        se += exp((double)xr[j * inner] - mx);
      for (int64_t j = 0; j < len; j++)
        yr[j * inner] = (float)(exp((double)xr[j * inner] - mx) / se);
    }
  return GCC_OK;
}

gcc_status gcc_cpu_softmax_grad(const gcc_kernel_args *a) {
  const float *dy = F32(a->in[0]), *y = F32(a->in[1]);
  float *dx = F32(a->out[0]);
  int64_t outer, len, inner;
  softmax_dims(a->in[1], a->node->av[SOFTMAX_AXIS].i, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * len * inner + i;
      double dot = 0;
      for (int64_t j = 0; j < len; j++)
        dot += (double)dy[base + j * inner] * (double)y[base + j * inner];
      for (int64_t j = 0; j < len; j++)
        dx[base + j * inner] =
            (float)((double)y[base + j * inner] * ((double)dy[base + j * inner] - dot));
    }
  return GCC_OK;
}
