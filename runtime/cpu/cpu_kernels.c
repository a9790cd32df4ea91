/*
 * cpu_kernels.c - the CPU reference backend. Plain loops the compiler can
 * vectorise, OpenBLAS for GEMM, float64 accumulation in the reductions
 * whose result is a single number (losses).
 */
#include "runtime/cpu/cpu_kernels.h"

#include <cblas.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/half.h"
#include "graph/ops.h"
#include "graph/philox.h"
#include "runtime/comm.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/cpu/cpu_philox.h"

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

/* y[c] += x[r][c] for the columns [c0, c1) of a rows x ld matrix, rows in
 * order: each column's additions in the same order whatever the columns */
GCC_HOT static void col_sum_loop(const float *restrict x, float *restrict y, int64_t rows,
                                 int64_t ld, int64_t c0, int64_t c1) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = c0; c < c1; c++)
      y[c] += x[r * ld + c];
}

static float *F32(const gcc_tensor *t) {
  return (float *)t->data;
}

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

/* The row length when `small` broadcast to `big` is one row repeated: its
 * dims, leading ones dropped, equal big's trailing dims (a bias over the
 * last axis, a position table (T, C) added to (B, T, C)); 0 otherwise.
 * small->numel == 0 gives 0 (the generic walk handles empty tensors). */
static int64_t suffix_row(const gcc_shape *small, const gcc_shape *big) {
  int lead = 0;
  while (lead < small->ndim && small->dims[lead] == 1)
    lead++;
  int k = small->ndim - lead; /* the dims that must match big's last k */
  if (k > big->ndim)
    return 0;
  int64_t cols = 1;
  for (int i = 0; i < k; i++) {
    if (small->dims[lead + i] != big->dims[big->ndim - k + i])
      return 0;
    cols *= small->dims[lead + i];
  }
  return cols;
}

/* Visits every element of `out` shape with the matching offsets of up to
 * two broadcast operands: calls f(o, ia, ib, user). */
typedef void (*bcast_visit)(int64_t o, int64_t ia, int64_t ib, void *user);

static void bcast_walk(const gcc_shape *out, const gcc_shape *a, const gcc_shape *b, bcast_visit f,
                       void *user) {
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

int gcc_cpu_blas_threads(int64_t m, int64_t n, int64_t k, int max_threads) {
  if ((m == 1 || n == 1) && k > 0) {
    int64_t rows = m == 1 ? n : m; /* of the matrix in y = op(M) x */
    return max_threads > 1 && rows * k >= GCC_GEMV_PARALLEL_ELEMS ? max_threads : 1;
  }
  return gcc_cpu_gemm_threads(m, n, k, max_threads);
}

static void gemm_rowmajor(gcc_cpu_ctx *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k,
                          float alpha, const float *A, const float *B, float beta, float *Y) {
  /* One row or one column of output is a matrix-vector product. OpenBLAS's
   * sgemm packs both operands even then (141 us for 1x784 . 784x512 against
   * 20 us as sgemv): batch-1 inference lives on this path. The vector
   * operand is contiguous whatever its transpose flag, as one of its
   * dimensions is 1. */
  if ((m == 1 || n == 1) && k > 0) {
    set_blas_threads(ctx, gcc_cpu_blas_threads(m, n, k, ctx->max_threads));
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

/* numpy.matmul: one GEMM per element of the broadcast batch (the operands'
 * leading dims), 1-D operands as a row (A) or a column (B). */
gcc_status gcc_cpu_matmul(const gcc_kernel_args *a) {
  const gcc_tensor *A = a->in[0], *B = a->in[1];
  gcc_tensor *Y = a->out[0];
  const gcc_shape *sa = &A->shape, *sb = &B->shape;
  int64_t m = sa->ndim >= 2 ? sa->dims[sa->ndim - 2] : 1, k = sa->dims[sa->ndim - 1];
  int64_t n = sb->ndim >= 2 ? sb->dims[sb->ndim - 1] : 1;
  if (sa->ndim <= 2 && sb->ndim <= 2) {
    gemm_rowmajor(a->ctx, 0, 0, m, n, k, 1.0f, F32(A), F32(B), 0.0f, F32(Y));
    return GCC_OK;
  }
  /* the batch shape and each operand's batch strides (0 where broadcast) */
  gcc_shape bs = {Y->shape.ndim - (sa->ndim >= 2) - (sb->ndim >= 2), {0}};
  for (int i = 0; i < bs.ndim; i++)
    bs.dims[i] = Y->shape.dims[i];
  gcc_shape ba = {sa->ndim > 2 ? sa->ndim - 2 : 0, {0}},
            bb = {sb->ndim > 2 ? sb->ndim - 2 : 0, {0}};
  for (int i = 0; i < ba.ndim; i++)
    ba.dims[i] = sa->dims[i];
  for (int i = 0; i < bb.ndim; i++)
    bb.dims[i] = sb->dims[i];
  int64_t st_a[GCC_MAX_DIMS], st_b[GCC_MAX_DIMS], idx[GCC_MAX_DIMS] = {0};
  bcast_strides(&ba, &bs, st_a);
  bcast_strides(&bb, &bs, st_b);
  int64_t batches = gcc_shape_numel(&bs, NULL), oa = 0, ob = 0;
  const float *pa = F32(A), *pb = F32(B);
  float *py = F32(Y);
  for (int64_t t = 0; t < batches; t++) {
    gemm_rowmajor(a->ctx, 0, 0, m, n, k, 1.0f, pa + oa * m * k, pb + ob * k * n, 0.0f,
                  py + t * m * n);
    for (int d = bs.ndim - 1; d >= 0; d--) {
      idx[d]++;
      oa += st_a[d];
      ob += st_b[d];
      if (idx[d] < bs.dims[d])
        break;
      oa -= st_a[d] * idx[d];
      ob -= st_b[d] * idx[d];
      idx[d] = 0;
    }
  }
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

/* The arithmetic of Add, Sub, Mul and Div, as each kernel names it. */
typedef enum arith { ARITH_ADD, ARITH_SUB, ARITH_MUL, ARITH_DIV } arith;

static gcc_status int_binary(const gcc_kernel_args *a, arith op);

/* Add's same-shape and row-broadcast forms over parts of elements / rows
 * (cpu_parallel.h); cols: the row length (1 for the same-shape form). */
typedef struct add_job {
  const float *a, *b;
  float *y;
  int64_t cols;
} add_job;

static void add_range(void *u, int part, int64_t b, int64_t e) {
  const add_job *j = u;
  (void)part;
  add_loop(j->a + b, j->b + b, j->y + b, e - b);
}

static void add_rows_range(void *u, int part, int64_t b, int64_t e) {
  const add_job *j = u;
  (void)part;
  add_row_loop(j->a + b * j->cols, j->b, j->y + b * j->cols, e - b, j->cols);
}

gcc_status gcc_cpu_add(const gcc_kernel_args *a) {
  if (a->out[0]->dtype != GCC_DT_FLOAT32)
    return int_binary(a, ARITH_ADD);
  const gcc_tensor *A = a->in[0], *B = a->in[1];
  gcc_tensor *Y = a->out[0];
  float *y = F32(Y);
  const float *x0 = F32(A), *x1 = F32(B);
  int64_t n = Y->numel;
  const int t = gcc_cpu_pointwise_threads(a, n);
  int64_t cols = 0;
  if (A->numel == n && B->numel == n) {
    add_job j = {x0, x1, y, 1};
    gcc_cpu_parallel_for(t, n, 16, add_range, &j);
  } else if ((A->numel == n && (cols = suffix_row(&B->shape, &Y->shape)) > 0) ||
             (B->numel == n && (cols = suffix_row(&A->shape, &Y->shape)) > 0)) {
    /* row broadcast: x + bias, x + a position table; rows split. Addition
     * commutes bit for bit, so the full operand may be either one. */
    add_job j = A->numel == n ? (add_job){x0, x1, y, cols} : (add_job){x1, x0, y, cols};
    gcc_cpu_parallel_for(t, n / cols, 1, add_rows_range, &j);
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

/* Sub, Mul, Div: broadcast as Add. */
typedef struct bin_ctx {
  float *y;
  const float *a, *b;
  arith ar;
} bin_ctx;

static void visit_bin(int64_t o, int64_t ia, int64_t ib, void *u) {
  bin_ctx *c = u;
  float x = c->a[ia], z = c->b[ib];
  c->y[o] = c->ar == ARITH_SUB ? x - z : c->ar == ARITH_MUL ? x * z : x / z;
}

GCC_HOT static void bin_loop(arith op, const float *restrict a, const float *restrict b,
                             float *restrict y, int64_t n) {
  if (op == ARITH_SUB)
    for (int64_t i = 0; i < n; i++)
      y[i] = a[i] - b[i];
  else if (op == ARITH_MUL)
    for (int64_t i = 0; i < n; i++)
      y[i] = a[i] * b[i];
  else
    for (int64_t i = 0; i < n; i++)
      y[i] = a[i] / b[i];
}

/* Integer Add / Sub / Mul / Div (int64 or int32; division truncates toward
 * zero, as ONNX's reference casts a true quotient; a zero divisor is an
 * error, not a crash). */
typedef struct int_ctx {
  void *y;
  const void *a, *b;
  arith ar;
  int is64, div0;
} int_ctx;

static void visit_int(int64_t o, int64_t ia, int64_t ib, void *u) {
  int_ctx *c = u;
  int64_t x = c->is64 ? ((const int64_t *)c->a)[ia] : ((const int32_t *)c->a)[ia];
  int64_t z = c->is64 ? ((const int64_t *)c->b)[ib] : ((const int32_t *)c->b)[ib];
  int64_t r;
  switch (c->ar) {
  case ARITH_ADD: r = (int64_t)((uint64_t)x + (uint64_t)z); break;
  case ARITH_SUB: r = (int64_t)((uint64_t)x - (uint64_t)z); break;
  case ARITH_MUL: r = (int64_t)((uint64_t)x * (uint64_t)z); break;
  default:
    if (z == 0 || (x == INT64_MIN && z == -1)) {
      c->div0 = 1;
      r = 0;
    } else {
      r = x / z;
    }
  }
  if (c->is64)
    ((int64_t *)c->y)[o] = r;
  else
    ((int32_t *)c->y)[o] = (int32_t)r;
}

static gcc_status int_binary(const gcc_kernel_args *a, arith op) {
  int_ctx c = {
      a->out[0]->data, a->in[0]->data, a->in[1]->data, op, a->out[0]->dtype == GCC_DT_INT64, 0};
  bcast_walk(&a->out[0]->shape, &a->in[0]->shape, &a->in[1]->shape, visit_int, &c);
  if (c.div0)
    return gcc_diag_set(a->ctx->diag, GCC_ERR_INVALID_ARGUMENT,
                        "%s: node '%s' (Div): integer division by zero (or overflow)",
                        a->ctx->source ? a->ctx->source : "<model>", a->node->name);
  return GCC_OK;
}

/* Sub, Mul and Div of same-shape operands over parts of elements
 * (cpu_parallel.h): each element as on one thread */
typedef struct bin_job {
  arith op;
  const float *a, *b;
  float *y;
} bin_job;

static void bin_range(void *u, int part, int64_t b, int64_t e) {
  const bin_job *j = u;
  (void)part;
  bin_loop(j->op, j->a + b, j->b + b, j->y + b, e - b);
}

static gcc_status binary(const gcc_kernel_args *a, arith op) {
  const gcc_tensor *A = a->in[0], *B = a->in[1];
  gcc_tensor *Y = a->out[0];
  if (Y->dtype != GCC_DT_FLOAT32)
    return int_binary(a, op);
  if (A->numel == Y->numel && B->numel == Y->numel) {
    bin_job j = {op, F32(A), F32(B), F32(Y)};
    gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, Y->numel), Y->numel, 16, bin_range, &j);
  } else {
    bin_ctx c = {F32(Y), F32(A), F32(B), op};
    bcast_walk(&Y->shape, &A->shape, &B->shape, visit_bin, &c);
  }
  return GCC_OK;
}

gcc_status gcc_cpu_sub(const gcc_kernel_args *a) {
  return binary(a, ARITH_SUB);
}
gcc_status gcc_cpu_mul(const gcc_kernel_args *a) {
  return binary(a, ARITH_MUL);
}
gcc_status gcc_cpu_div(const gcc_kernel_args *a) {
  return binary(a, ARITH_DIV);
}

gcc_status gcc_cpu_sigmoid(const gcc_kernel_args *a) {
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    y[i] = 1.0f / (1.0f + expf(-x[i]));
  return GCC_OK;
}

gcc_status gcc_cpu_tanh(const gcc_kernel_args *a) {
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    y[i] = tanhf(x[i]);
  return GCC_OK;
}

gcc_status gcc_cpu_sqrt(const gcc_kernel_args *a) {
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    y[i] = sqrtf(x[i]);
  return GCC_OK;
}

gcc_status gcc_cpu_leaky_relu(const gcc_kernel_args *a) {
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  float alpha = a->node->av[LEAKY_RELU_ALPHA].f;
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    y[i] = x[i] < 0.0f ? alpha * x[i] : x[i];
  return GCC_OK;
}

GCC_HOT static void clip_loop(const float *restrict x, float *restrict y, int64_t n, float lo,
                              float hi) {
  for (int64_t i = 0; i < n; i++) /* NaN stays NaN (numpy.clip, torch.clamp) */
    y[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

gcc_status gcc_cpu_clip(const gcc_kernel_args *a) {
  clip_loop(F32(a->in[0]), F32(a->out[0]), a->out[0]->numel, a->node->av[CLIP_MIN].f,
            a->node->av[CLIP_MAX].f);
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

/* ReduceSumTo's column sums over parts of the columns (cpu_parallel.h) */
typedef struct col_sum_job {
  const float *x;
  float *y;
  int64_t rows, cols;
} col_sum_job;

static void col_sum_range(void *u, int part, int64_t b, int64_t e) {
  const col_sum_job *j = u;
  (void)part;
  col_sum_loop(j->x, j->y, j->rows, j->cols, b, e);
}

gcc_status gcc_cpu_reduce_sum_to(const gcc_kernel_args *a) {
  const gcc_tensor *X = a->in[0];
  gcc_tensor *Y = a->out[0];
  const float *x = F32(X);
  float *y = F32(Y);
  float scale = a->node->av[REDUCE_SUM_TO_SCALE].f;
  memset(y, 0, (size_t)Y->numel * sizeof *y);
  int64_t cols = suffix_row(&Y->shape, &X->shape);
  if (cols > 0) {
    /* the bias gradient, a position table's: column sums over the rows, each
     * column's additions in row order as the walk below would make them */
    col_sum_job j = {x, y, X->numel / cols, cols};
    gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, X->numel), cols, 16, col_sum_range, &j);
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

/* ---- losses (SoftmaxCrossEntropy: cpu_loss.c) ------------------------ */

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

gcc_status gcc_cpu_log_softmax(const gcc_kernel_args *a) {
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
      double lse = log(se);
      for (int64_t j = 0; j < len; j++)
        yr[j * inner] = (float)((double)xr[j * inner] - mx - lse);
    }
  return GCC_OK;
}

/* ONNX LRN over channels (dim 1): the window of channel c is
 * [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)], clipped. */
gcc_status gcc_cpu_lrn(const gcc_kernel_args *a) {
  const gcc_node *n = a->node;
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  const gcc_shape *s = &a->in[0]->shape;
  int64_t size = n->av[LRN_SIZE].i, nb = s->dims[0], c = s->dims[1], inner = 1;
  for (int i = 2; i < s->ndim; i++)
    inner *= s->dims[i];
  double alpha = n->av[LRN_ALPHA].f, beta = n->av[LRN_BETA].f, bias = n->av[LRN_BIAS].f;
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  for (int64_t b = 0; b < nb; b++)
    for (int64_t ci = 0; ci < c; ci++)
      for (int64_t q = 0; q < inner; q++) {
        double sq = 0;
        int64_t c0 = ci - lo < 0 ? 0 : ci - lo, c1 = ci + hi >= c ? c - 1 : ci + hi;
        for (int64_t k = c0; k <= c1; k++) {
          double v = x[(b * c + k) * inner + q];
          sq += v * v;
        }
        int64_t at = (b * c + ci) * inner + q;
        y[at] = (float)((double)x[at] / pow(bias + alpha / (double)size * sq, beta));
      }
  return GCC_OK;
}

gcc_status gcc_cpu_sigmoid_grad(const gcc_kernel_args *a) {
  const float *dy = F32(a->in[0]), *y = F32(a->in[1]);
  float *dx = F32(a->out[0]);
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    dx[i] = dy[i] * y[i] * (1.0f - y[i]);
  return GCC_OK;
}

gcc_status gcc_cpu_tanh_grad(const gcc_kernel_args *a) {
  const float *dy = F32(a->in[0]), *y = F32(a->in[1]);
  float *dx = F32(a->out[0]);
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    dx[i] = dy[i] * (1.0f - y[i] * y[i]);
  return GCC_OK;
}

gcc_status gcc_cpu_sqrt_grad(const gcc_kernel_args *a) {
  const float *dy = F32(a->in[0]), *y = F32(a->in[1]);
  float *dx = F32(a->out[0]);
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    dx[i] = 0.5f * dy[i] / y[i];
  return GCC_OK;
}

gcc_status gcc_cpu_leaky_relu_grad(const gcc_kernel_args *a) {
  const float *dy = F32(a->in[0]), *x = F32(a->in[1]);
  float *dx = F32(a->out[0]);
  float alpha = a->node->av[LEAKY_RELU_ALPHA].f;
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    dx[i] = x[i] < 0.0f ? alpha * dy[i] : dy[i];
  return GCC_OK;
}

gcc_status gcc_cpu_clip_grad(const gcc_kernel_args *a) {
  const float *dy = F32(a->in[0]), *x = F32(a->in[1]);
  float *dx = F32(a->out[0]);
  float lo = a->node->av[CLIP_MIN].f, hi = a->node->av[CLIP_MAX].f;
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    dx[i] = x[i] >= lo && x[i] <= hi ? dy[i] : 0.0f;
  return GCC_OK;
}

gcc_status gcc_cpu_log_softmax_grad(const gcc_kernel_args *a) {
  const float *dy = F32(a->in[0]), *y = F32(a->in[1]);
  float *dx = F32(a->out[0]);
  int64_t outer, len, inner;
  softmax_dims(a->in[1], a->node->av[SOFTMAX_AXIS].i, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * len * inner + i;
      double sum = 0;
      for (int64_t j = 0; j < len; j++)
        sum += (double)dy[base + j * inner];
      for (int64_t j = 0; j < len; j++)
        dx[base + j * inner] =
            (float)((double)dy[base + j * inner] - exp((double)y[base + j * inner]) * sum);
    }
  return GCC_OK;
}

/* S[c] = bias + alpha / size * (sum of X^2 over c's window) at one (b, q). */
static double lrn_s(const float *x, int64_t b, int64_t ci, int64_t q, int64_t c, int64_t inner,
                    int64_t lo, int64_t hi, double bias, double alpha_n) {
  double sq = 0;
  int64_t c0 = ci - lo < 0 ? 0 : ci - lo, c1 = ci + hi >= c ? c - 1 : ci + hi;
  for (int64_t k = c0; k <= c1; k++) {
    double v = x[(b * c + k) * inner + q];
    sq += v * v;
  }
  return bias + alpha_n * sq;
}

gcc_status gcc_cpu_lrn_grad(const gcc_kernel_args *a) {
  const gcc_node *n = a->node;
  const float *dy = F32(a->in[0]), *x = F32(a->in[1]), *y = F32(a->in[2]);
  float *dx = F32(a->out[0]);
  const gcc_shape *s = &a->in[1]->shape;
  int64_t size = n->av[LRN_SIZE].i, nb = s->dims[0], c = s->dims[1], inner = 1;
  for (int i = 2; i < s->ndim; i++)
    inner *= s->dims[i];
  double alpha_n = (double)n->av[LRN_ALPHA].f / (double)size, beta = n->av[LRN_BETA].f,
         bias = n->av[LRN_BIAS].f;
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  for (int64_t b = 0; b < nb; b++)
    for (int64_t ci = 0; ci < c; ci++)
      for (int64_t q = 0; q < inner; q++) {
        int64_t at = (b * c + ci) * inner + q;
        double acc = 0; /* windows k that hold ci: k in [ci - hi, ci + lo] */
        int64_t k0 = ci - hi < 0 ? 0 : ci - hi, k1 = ci + lo >= c ? c - 1 : ci + lo;
        for (int64_t k = k0; k <= k1; k++) {
          int64_t ak = (b * c + k) * inner + q;
          acc +=
              (double)dy[ak] * (double)y[ak] / lrn_s(x, b, k, q, c, inner, lo, hi, bias, alpha_n);
        }
        double si = lrn_s(x, b, ci, q, c, inner, lo, hi, bias, alpha_n);
        dx[at] =
            (float)((double)dy[at] * pow(si, -beta) - 2.0 * alpha_n * beta * (double)x[at] * acc);
      }
  return GCC_OK;
}

/* BatchNormalization and BatchNormGrad: runtime/cpu/cpu_bnorm.c. */

/* Y = X * (kept ? 1 / (1 - ratio) : 0) with the Philox mask of (key, step)
 * (graph/philox.h, the code the generated CUDA kernel runs), its words
 * drawn many blocks at a time (cpu_philox.h), the elements split over the
 * plan's threads: every element's factor is its own word's, so the bits do
 * not depend on the cut. */
typedef struct dropout_job {
  const float *x;
  float *y;
  uint64_t key, thr;
  int64_t step;
  float scale;
} dropout_job;

static void dropout_range(void *u, int part, int64_t b, int64_t e) {
  const dropout_job *j = u;
  (void)part;
  gcc_cpu_dropout_apply(j->x + b, j->y + b, b, e - b, j->key, j->step, j->thr, j->scale);
}

static void dropout_apply(const gcc_kernel_args *a, const float *x, float *y, int64_t n,
                          uint64_t key, float ratio) {
  dropout_job j = {x,
                   y,
                   key,
                   gcc_dropout_threshold(ratio),
                   a->ctx ? a->ctx->rng_step : 0,
                   gcc_dropout_scale(ratio)};
  gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, n), n, 64, dropout_range, &j);
}

gcc_status gcc_cpu_dropout(const gcc_kernel_args *a) {
  const gcc_node *nd = a->node;
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  int64_t n = a->out[0]->numel;
  if (!nd->av[DROPOUT_TRAINING].i) { /* evaluation: the identity */
    if (y != x)
      memmove(y, x, (size_t)n * sizeof(float));
    return GCC_OK;
  }
  dropout_apply(a, x, y, n, (uint64_t)nd->av[DROPOUT_KEY].i, nd->av[DROPOUT_RATIO].f);
  return GCC_OK;
}

gcc_status gcc_cpu_dropout_grad(const gcc_kernel_args *a) {
  const gcc_node *nd = a->node;
  dropout_apply(a, F32(a->in[0]), F32(a->out[0]), a->out[0]->numel,
                (uint64_t)nd->av[DROPOUT_GRAD_KEY].i, nd->av[DROPOUT_GRAD_RATIO].f);
  return GCC_OK;
}

gcc_status gcc_cpu_concat(const gcc_kernel_args *a) {
  const gcc_shape *ys = &a->out[0]->shape;
  int64_t axis = a->node->av[CONCAT_AXIS].i;
  if (axis < 0)
    axis += ys->ndim;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++)
    outer *= ys->dims[i];
  for (int i = (int)axis + 1; i < ys->ndim; i++)
    inner *= ys->dims[i];
  size_t es = gcc_dtype_size(a->out[0]->dtype);
  uint8_t *y = a->out[0]->data;
  int64_t off = 0, row = ys->dims[axis] * inner;
  for (int k = 0; k < a->n_in; k++) {
    int64_t len = a->in[k]->shape.dims[axis] * inner;
    const uint8_t *x = a->in[k]->data;
    for (int64_t o = 0; o < outer; o++)
      memcpy(y + (size_t)(o * row + off) * es, x + (size_t)(o * len) * es, (size_t)len * es);
    off += len;
  }
  return GCC_OK;
}

/* The input index along one dim of output index o for Pad's modes; -1:
 * the constant. */
static int64_t pad_src(int64_t o, int64_t begin, int64_t in, int mode) {
  int64_t i = o - begin;
  if (i >= 0 && i < in)
    return i;
  if (mode == 0)
    return -1;
  if (mode == 1) /* edge */
    return i < 0 ? 0 : in - 1;
  /* reflect (pads < in, so one reflection suffices) */
  return i < 0 ? -i : 2 * (in - 1) - i;
}

gcc_status gcc_cpu_pad(const gcc_kernel_args *a) {
  const gcc_node *nd = a->node;
  const gcc_shape *xs = &a->in[0]->shape, *ys = &a->out[0]->shape;
  const int64_t *pads = nd->av[PAD_PADS].ints;
  const char *ms = nd->av[PAD_MODE].s ? nd->av[PAD_MODE].s : "constant";
  int mode = strcmp(ms, "edge") == 0 ? 1 : strcmp(ms, "reflect") == 0 ? 2 : 0;
  float value = nd->av[PAD_VALUE].f;
  int r = ys->ndim;
  int64_t xst[GCC_MAX_DIMS], idx[GCC_MAX_DIMS] = {0}, acc = 1;
  for (int i = r - 1; i >= 0; i--) {
    xst[i] = acc;
    acc *= xs->dims[i];
  }
  const uint8_t *x = a->in[0]->data;
  uint8_t *y = a->out[0]->data;
  gcc_dtype dt = a->out[0]->dtype;
  size_t es = gcc_dtype_size(dt);
  uint8_t fill[8]; /* the constant in the element type */
  if (dt == GCC_DT_FLOAT32) {
    memcpy(fill, &value, 4);
  } else if (dt == GCC_DT_INT64) {
    int64_t v = (int64_t)value;
    memcpy(fill, &v, 8);
  } else {
    int32_t v = (int32_t)value;
    memcpy(fill, &v, 4);
  }
  int64_t n = a->out[0]->numel;
  for (int64_t o = 0; o < n; o++) {
    int64_t ix = 0;
    int inside = 1;
    for (int k = 0; k < r && inside; k++) {
      int64_t i = pad_src(idx[k], pads[k], xs->dims[k], mode);
      inside = i >= 0;
      ix += i * xst[k];
    }
    memcpy(y + (size_t)o * es, inside ? x + (size_t)ix * es : fill, es);
    for (int k = r - 1; k >= 0; k--) {
      if (++idx[k] < ys->dims[k])
        break;
      idx[k] = 0;
    }
  }
  return GCC_OK;
}

/* ---- convolution: im2col + sgemm ---------------------------------------- */

/* Sizes of one Conv (or of its gradients, or a ConvTranspose, the adjoint
 * of a Conv): X [n, c, h, w], W [m, c / group, kh, kw], Y [n, m, oh, ow];
 * per group cg = c / group input and mg = m / group output channels;
 * k = cg * kh * kw rows of the column matrix, p = oh * ow output pixels per
 * sample, `chunk` samples per GEMM. */
typedef struct conv_geom {
  int64_t n, c, h, w, m, oh, ow, k, p, chunk, group, cg, mg;
  gcc_window2d win;
} conv_geom;

static void conv_geom_make(const gcc_node *node, const gcc_shape *x, const gcc_shape *wt,
                           const gcc_shape *y, conv_geom *g) {
  gcc_window2d_of(node, wt, &g->win);
  g->n = x->dims[0];
  g->c = x->dims[1];
  g->h = x->dims[2];
  g->w = x->dims[3];
  g->m = y->dims[1];
  g->oh = y->dims[2];
  g->ow = y->dims[3];
  g->group = node->av[CONV_GROUP].i > 0 ? node->av[CONV_GROUP].i : 1;
  g->cg = g->c / g->group;
  g->mg = g->m / g->group;
  g->k = g->cg * g->win.kh * g->win.kw;
  g->p = g->oh * g->ow;
  size_t per_sample = (size_t)((g->k + g->mg) * g->p) * sizeof(float);
  int64_t fit = (int64_t)(GCC_CONV_CHUNK_BYTES / (per_sample ? per_sample : 1));
  g->chunk = fit < 1 ? 1 : (fit > g->n ? g->n : fit);
}

/* Which of the three convolutions a kernel computes: it decides where X, W
 * and Y are among the node's operands. */
typedef enum conv_role {
  CONV_FORWARD,     /* Conv: (X, W) -> Y */
  CONV_GRAD_DATA,   /* ConvGradData: (dY, W) -> dX */
  CONV_GRAD_FILTER, /* ConvGradFilter: (dY, X) -> dW */
} conv_role;

static void conv_shapes(conv_role role, const gcc_shape *in0, const gcc_shape *in1,
                        const gcc_shape *out0, const gcc_shape **x, const gcc_shape **wt,
                        const gcc_shape **y) {
  if (role == CONV_FORWARD) {
    *x = in0, *wt = in1, *y = out0;
  } else if (role == CONV_GRAD_DATA) {
    *x = out0, *wt = in1, *y = in0;
  } else {
    *x = in1, *wt = out0, *y = in0;
  }
}

static size_t conv_workspace(const gcc_graph *g, int node, conv_role role) {
  const gcc_node *n = &g->nodes[node];
  const gcc_shape *x, *wt, *y;
  conv_shapes(role, &g->values[n->inputs[0]].shape, &g->values[n->inputs[1]].shape,
              &g->values[n->outputs[0]].shape, &x, &wt, &y);
  conv_geom cg;
  conv_geom_make(n, x, wt, y, &cg);
  return (size_t)(cg.chunk * cg.p * (cg.k + cg.mg)) * sizeof(float);
}

size_t gcc_cpu_conv_workspace(const gcc_graph *g, int node) {
  return conv_workspace(g, node, CONV_FORWARD);
}

size_t gcc_cpu_conv_grad_data_workspace(const gcc_graph *g, int node) {
  return conv_workspace(g, node, CONV_GRAD_DATA);
}

/* ConvTranspose computes what ConvGradData does (Y plays dX). */
size_t gcc_cpu_conv_transpose_workspace(const gcc_graph *g, int node) {
  return conv_workspace(g, node, CONV_GRAD_DATA);
}

size_t gcc_cpu_conv_grad_filter_workspace(const gcc_graph *g, int node) {
  return conv_workspace(g, node, CONV_GRAD_FILTER);
}

static gcc_status conv_setup(const gcc_kernel_args *a, conv_role role, conv_geom *cg, float **col,
                             float **tmp) {
  const gcc_shape *x, *wt, *y;
  conv_shapes(role, &a->in[0]->shape, &a->in[1]->shape, &a->out[0]->shape, &x, &wt, &y);
  conv_geom_make(a->node, x, wt, y, cg);
  size_t need = (size_t)(cg->chunk * cg->p * (cg->k + cg->mg)) * sizeof(float);
  if (!a->workspace || a->workspace_bytes < need)
    return gcc_diag_set(a->ctx->diag, GCC_ERR_INTERNAL,
                        "%s: node '%s' (%s): the planned workspace has %zu bytes, it needs %zu",
                        a->ctx->source ? a->ctx->source : "<model>", a->node->name,
                        gcc_op_name(a->node->op), a->workspace_bytes, need);
  *col = a->workspace;
  *tmp = *col + cg->chunk * cg->p * cg->k;
  return GCC_OK;
}

/* floor(a / b) and ceil(a / b) for b > 0 and any sign of a (C division
 * truncates toward zero). */
static int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
static int64_t ceil_div(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -(-a / b);
}

/* The outputs o in [*lo, *hi) of [0, n_out) whose input o * stride + off
 * lies in [0, n_in): the rest of the row reads padding. */
static void valid_range(int64_t off, int64_t stride, int64_t n_in, int64_t n_out, int64_t *lo,
                        int64_t *hi) {
  int64_t a = ceil_div(-off, stride), b = floor_div(n_in - 1 - off, stride) + 1;
  *lo = a < 0 ? 0 : (a > n_out ? n_out : a);
  *hi = b < *lo ? *lo : (b > n_out ? n_out : b);
}

/* col[(ci*kh + i)*kw + j][s*p + oy*ow + ox] = X[n0+s][ci][iy][ix] or 0 in
 * the padding, for samples n0 .. n0+cn-1 (Caffe's im2col, batched). The
 * in-bounds part of each output row is found once, so the inner loop has no
 * bounds test (a plain copy when the stride is 1). */
static void im2col(const conv_geom *g, const float *x, int64_t n0, int64_t cn, int64_t c0,
                   float *col) {
  const gcc_window2d *w = &g->win;
  int64_t row_len = cn * g->p;
  for (int64_t ci = 0; ci < g->cg; ci++)
    for (int64_t i = 0; i < w->kh; i++)
      for (int64_t j = 0; j < w->kw; j++) {
        float *row = col + ((ci * w->kh + i) * w->kw + j) * row_len;
        int64_t xoff = j * w->dw - w->pl, lo, hi;
        valid_range(xoff, w->sw, g->w, g->ow, &lo, &hi);
        for (int64_t s = 0; s < cn; s++) {
          const float *plane = x + ((n0 + s) * g->c + c0 + ci) * g->h * g->w;
          float *out = row + s * g->p;
          for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t iy = oy * w->sh - w->pt + i * w->dh;
            float *o = out + oy * g->ow;
            if (iy < 0 || iy >= g->h) {
              memset(o, 0, (size_t)g->ow * sizeof *o);
              continue;
            }
            /* element ox of this row is src[ox * sw + xoff]; xoff may be
             * negative, so index from the row start (no pointer before it) */
            const float *src = plane + iy * g->w;
            for (int64_t ox = 0; ox < lo; ox++)
              o[ox] = 0.0f;
            if (w->sw == 1 && hi > lo)
              memcpy(o + lo, src + lo + xoff, (size_t)(hi - lo) * sizeof *o);
            else
              for (int64_t ox = lo; ox < hi; ox++)
                o[ox] = src[ox * w->sw + xoff];
            for (int64_t ox = hi; ox < g->ow; ox++)
              o[ox] = 0.0f;
          }
        }
      }
}

/* The adjoint of im2col: dX[n0+s][c0+ci][iy][ix] += col[...] (dX zeroed by
 * the caller). */
static void col2im(const conv_geom *g, const float *col, int64_t n0, int64_t cn, int64_t c0,
                   float *dx) {
  const gcc_window2d *w = &g->win;
  int64_t row_len = cn * g->p;
  for (int64_t ci = 0; ci < g->cg; ci++)
    for (int64_t i = 0; i < w->kh; i++)
      for (int64_t j = 0; j < w->kw; j++) {
        const float *row = col + ((ci * w->kh + i) * w->kw + j) * row_len;
        int64_t xoff = j * w->dw - w->pl, lo, hi;
        valid_range(xoff, w->sw, g->w, g->ow, &lo, &hi);
        for (int64_t s = 0; s < cn; s++) {
          float *plane = dx + ((n0 + s) * g->c + c0 + ci) * g->h * g->w;
          const float *in = row + s * g->p;
          for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t iy = oy * w->sh - w->pt + i * w->dh;
            if (iy < 0 || iy >= g->h)
              continue;
            float *dst = plane + iy * g->w;
            const float *c = in + oy * g->ow;
            for (int64_t ox = lo; ox < hi; ox++)
              dst[ox * w->sw + xoff] += c[ox];
          }
        }
      }
}

/* tmp[mi][s*p + q] = y[n0+s][m0+mi][q]: a chunk of NCHW dY (the mg channels
 * of one group from m0) as one [mg, cn*p] matrix. */
static void gather_chunk(const conv_geom *g, const float *y, int64_t n0, int64_t cn, int64_t m0,
                         float *tmp) {
  for (int64_t s = 0; s < cn; s++)
    for (int64_t mi = 0; mi < g->mg; mi++)
      memcpy(tmp + mi * cn * g->p + s * g->p, y + ((n0 + s) * g->m + m0 + mi) * g->p,
             (size_t)g->p * sizeof *tmp);
}

gcc_status gcc_cpu_conv(const gcc_kernel_args *a) {
  conv_geom g;
  float *col = NULL, *tmp = NULL;
  GCC_TRY(conv_setup(a, CONV_FORWARD, &g, &col, &tmp));
  const float *x = F32(a->in[0]), *wt = F32(a->in[1]);
  const float *b = a->n_in > 2 && a->in[2] ? F32(a->in[2]) : NULL;
  float *y = F32(a->out[0]);
  for (int64_t n0 = 0; n0 < g.n; n0 += g.chunk) {
    int64_t cn = g.n - n0 < g.chunk ? g.n - n0 : g.chunk;
    for (int64_t gi = 0; gi < g.group; gi++) {
      im2col(&g, x, n0, cn, gi * g.cg, col);
      /* tmp [mg, cn*p] = W_g [mg, k] col [k, cn*p] */
      gemm_rowmajor(a->ctx, 0, 0, g.mg, cn * g.p, g.k, 1.0f, wt + gi * g.mg * g.k, col, 0.0f, tmp);
      for (int64_t s = 0; s < cn; s++)
        for (int64_t mi = 0; mi < g.mg; mi++) {
          int64_t ch = gi * g.mg + mi;
          const float *src = tmp + mi * cn * g.p + s * g.p;
          float *dst = y + ((n0 + s) * g.m + ch) * g.p;
          float bias = b ? b[ch] : 0.0f;
          for (int64_t q = 0; q < g.p; q++)
            dst[q] = src[q] + bias;
        }
    }
  }
  return GCC_OK;
}

/* dX of a Conv, or the output of a ConvTranspose (the same computation:
 * col = W_g^T dY_g, then col2im), per group. */
static void conv_data(const gcc_kernel_args *a, const conv_geom *g, float *col, float *tmp,
                      const float *dy, const float *wt, float *dx) {
  memset(dx, 0, (size_t)a->out[0]->numel * sizeof *dx);
  for (int64_t n0 = 0; n0 < g->n; n0 += g->chunk) {
    int64_t cn = g->n - n0 < g->chunk ? g->n - n0 : g->chunk;
    for (int64_t gi = 0; gi < g->group; gi++) {
      gather_chunk(g, dy, n0, cn, gi * g->mg, tmp);
      /* col [k, cn*p] = W_g^T [k, mg] tmp [mg, cn*p] */
      gemm_rowmajor(a->ctx, 1, 0, g->k, cn * g->p, g->mg, 1.0f, wt + gi * g->mg * g->k, tmp, 0.0f,
                    col);
      col2im(g, col, n0, cn, gi * g->cg, dx);
    }
  }
}

gcc_status gcc_cpu_conv_grad_data(const gcc_kernel_args *a) {
  conv_geom g;
  float *col = NULL, *tmp = NULL;
  GCC_TRY(conv_setup(a, CONV_GRAD_DATA, &g, &col, &tmp));
  conv_data(a, &g, col, tmp, F32(a->in[0]), F32(a->in[1]), F32(a->out[0]));
  return GCC_OK;
}

/* ConvTranspose(X, W, B): X plays dY of the convolution whose input is Y;
 * W [C, M / group, kh, kw] is that convolution's filter. */
gcc_status gcc_cpu_conv_transpose(const gcc_kernel_args *a) {
  conv_geom g;
  float *col = NULL, *tmp = NULL;
  GCC_TRY(conv_setup(a, CONV_GRAD_DATA, &g, &col, &tmp));
  float *y = F32(a->out[0]);
  conv_data(a, &g, col, tmp, F32(a->in[0]), F32(a->in[1]), y);
  if (a->n_in > 2 && a->in[2]) {
    const float *b = F32(a->in[2]);
    int64_t plane = g.h * g.w;
    for (int64_t s = 0; s < g.n; s++)
      for (int64_t ch = 0; ch < g.c; ch++) {
        float *dst = y + (s * g.c + ch) * plane;
        for (int64_t q = 0; q < plane; q++)
          dst[q] += b[ch];
      }
  }
  return GCC_OK;
}

gcc_status gcc_cpu_conv_grad_filter(const gcc_kernel_args *a) {
  conv_geom g;
  float *col = NULL, *tmp = NULL;
  GCC_TRY(conv_setup(a, CONV_GRAD_FILTER, &g, &col, &tmp));
  const float *dy = F32(a->in[0]), *x = F32(a->in[1]);
  float *dw = F32(a->out[0]);
  for (int64_t n0 = 0; n0 < g.n; n0 += g.chunk) {
    int64_t cn = g.n - n0 < g.chunk ? g.n - n0 : g.chunk;
    for (int64_t gi = 0; gi < g.group; gi++) {
      im2col(&g, x, n0, cn, gi * g.cg, col);
      gather_chunk(&g, dy, n0, cn, gi * g.mg, tmp);
      /* dW_g [mg, k] (+)= tmp [mg, cn*p] col^T [cn*p, k] */
      gemm_rowmajor(a->ctx, 0, 1, g.mg, g.k, cn * g.p, 1.0f, tmp, col, n0 == 0 ? 0.0f : 1.0f,
                    dw + gi * g.mg * g.k);
    }
  }
  return GCC_OK;
}

gcc_status gcc_cpu_conv_grad_bias(const gcc_kernel_args *a) {
  const gcc_shape *s = &a->in[0]->shape;
  int64_t n = s->dims[0], m = s->dims[1], p = s->dims[2] * s->dims[3];
  const float *dy = F32(a->in[0]);
  float *db = F32(a->out[0]);
  for (int64_t mi = 0; mi < m; mi++) {
    double acc = 0.0; /* N*H*W terms: accumulate in double, round once */
    for (int64_t i = 0; i < n; i++) {
      const float *row = dy + (i * m + mi) * p;
      for (int64_t q = 0; q < p; q++)
        acc += row[q];
    }
    db[mi] = (float)acc;
  }
  return GCC_OK;
}

/* ---- pooling ------------------------------------------------------------- */

typedef struct pool_geom {
  int64_t nc, h, w, oh, ow;
  gcc_window2d win;
} pool_geom;

static void pool_geom_make(const gcc_node *node, const gcc_shape *x, const gcc_shape *y,
                           pool_geom *g) {
  gcc_window2d_of(node, NULL, &g->win);
  g->nc = x->dims[0] * x->dims[1];
  g->h = x->dims[2];
  g->w = x->dims[3];
  g->oh = y->dims[2];
  g->ow = y->dims[3];
}

/* The kernel taps t in [*lo, *hi) of window o whose input o * stride - pad
 * + t * dil lies in [0, n). */
static void tap_range(int64_t o, int64_t stride, int64_t pad, int64_t dil, int64_t k, int64_t n,
                      int64_t *lo, int64_t *hi) {
  int64_t start = o * stride - pad;
  int64_t a = ceil_div(-start, dil), b = floor_div(n - 1 - start, dil) + 1;
  *lo = a < 0 ? 0 : (a > k ? k : a);
  *hi = b < *lo ? *lo : (b > k ? k : b);
}

/* Flat index in the (h, w) plane of the first maximum of window (oy, ox),
 * in row-major window order; NaN counts as the maximum (PyTorch). */
static inline int64_t max_pool_argmax(const pool_geom *g, const float *plane, int64_t oy,
                                      int64_t ox) {
  const gcc_window2d *w = &g->win;
  int64_t y0 = oy * w->sh - w->pt, x0 = ox * w->sw - w->pl;
  int64_t i0 = 0, i1 = w->kh, j0 = 0, j1 = w->kw;
  /* the common case, a window inside the input, needs no division */
  if (y0 < 0 || y0 + (w->kh - 1) * w->dh >= g->h)
    tap_range(oy, w->sh, w->pt, w->dh, w->kh, g->h, &i0, &i1);
  if (x0 < 0 || x0 + (w->kw - 1) * w->dw >= g->w)
    tap_range(ox, w->sw, w->pl, w->dw, w->kw, g->w, &j0, &j1);
  int64_t best_i = -1;
  float best = 0.0f;
  for (int64_t i = i0; i < i1; i++) {
    int64_t row = (y0 + i * w->dh) * g->w + x0; /* + j * dw >= 0 for j in [j0, j1) */
    for (int64_t j = j0; j < j1; j++) {
      float v = plane[row + j * w->dw];
      if (best_i < 0 || v > best || isnan(v)) {
        best = v;
        best_i = row + j * w->dw;
      }
    }
  }
  return best_i; /* >= 0: pads are at most half the kernel (shape check) */
}

gcc_status gcc_cpu_max_pool(const gcc_kernel_args *a) {
  pool_geom g;
  pool_geom_make(a->node, &a->in[0]->shape, &a->out[0]->shape, &g);
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  for (int64_t pc = 0; pc < g.nc; pc++) {
    const float *plane = x + pc * g.h * g.w;
    float *out = y + pc * g.oh * g.ow;
    for (int64_t oy = 0; oy < g.oh; oy++)
      for (int64_t ox = 0; ox < g.ow; ox++) {
        int64_t i = max_pool_argmax(&g, plane, oy, ox);
        out[oy * g.ow + ox] = i >= 0 ? plane[i] : -INFINITY;
      }
  }
  return GCC_OK;
}

gcc_status gcc_cpu_max_pool_grad(const gcc_kernel_args *a) {
  pool_geom g;
  pool_geom_make(a->node, &a->in[1]->shape, &a->in[0]->shape, &g);
  const float *dy = F32(a->in[0]), *x = F32(a->in[1]);
  float *dx = F32(a->out[0]);
  memset(dx, 0, (size_t)a->out[0]->numel * sizeof *dx);
  for (int64_t pc = 0; pc < g.nc; pc++) {
    const float *plane = x + pc * g.h * g.w;
    const float *d = dy + pc * g.oh * g.ow;
    float *o = dx + pc * g.h * g.w;
    for (int64_t oy = 0; oy < g.oh; oy++)
      for (int64_t ox = 0; ox < g.ow; ox++) {
        int64_t i = max_pool_argmax(&g, plane, oy, ox);
        if (i >= 0)
          o[i] += d[oy * g.ow + ox];
      }
  }
  return GCC_OK;
}

/* The divisor of window (oy, ox): the whole window with count_include_pad,
 * else the input elements it covers. */
static int64_t avg_divisor(const pool_geom *g, int include_pad, int64_t oy, int64_t ox) {
  const gcc_window2d *w = &g->win;
  if (include_pad)
    return w->kh * w->kw;
  int64_t cnt = 0;
  for (int64_t i = 0; i < w->kh; i++) {
    int64_t iy = oy * w->sh - w->pt + i * w->dh;
    for (int64_t j = 0; j < w->kw; j++) {
      int64_t ix = ox * w->sw - w->pl + j * w->dw;
      cnt += iy >= 0 && iy < g->h && ix >= 0 && ix < g->w;
    }
  }
  return cnt;
}

gcc_status gcc_cpu_average_pool(const gcc_kernel_args *a) {
  pool_geom g;
  pool_geom_make(a->node, &a->in[0]->shape, &a->out[0]->shape, &g);
  int include_pad = (int)a->node->av[POOL_COUNT_INCLUDE_PAD].i;
  const gcc_window2d *w = &g.win;
  const float *x = F32(a->in[0]);
  float *y = F32(a->out[0]);
  for (int64_t pc = 0; pc < g.nc; pc++) {
    const float *plane = x + pc * g.h * g.w;
    float *out = y + pc * g.oh * g.ow;
    for (int64_t oy = 0; oy < g.oh; oy++)
      for (int64_t ox = 0; ox < g.ow; ox++) {
        float sum = 0.0f;
        for (int64_t i = 0; i < w->kh; i++) {
          int64_t iy = oy * w->sh - w->pt + i * w->dh;
          if (iy < 0 || iy >= g.h)
            continue;
          for (int64_t j = 0; j < w->kw; j++) {
            int64_t ix = ox * w->sw - w->pl + j * w->dw;
            if (ix >= 0 && ix < g.w)
              sum += plane[iy * g.w + ix];
          }
        }
        out[oy * g.ow + ox] = sum / (float)avg_divisor(&g, include_pad, oy, ox);
      }
  }
  return GCC_OK;
}

gcc_status gcc_cpu_average_pool_grad(const gcc_kernel_args *a) {
  pool_geom g;
  pool_geom_make(a->node, &a->out[0]->shape, &a->in[0]->shape, &g);
  int include_pad = (int)a->node->av[POOL_COUNT_INCLUDE_PAD].i;
  const gcc_window2d *w = &g.win;
  const float *dy = F32(a->in[0]);
  float *dx = F32(a->out[0]);
  memset(dx, 0, (size_t)a->out[0]->numel * sizeof *dx);
  for (int64_t pc = 0; pc < g.nc; pc++) {
    const float *d = dy + pc * g.oh * g.ow;
    float *o = dx + pc * g.h * g.w;
    for (int64_t oy = 0; oy < g.oh; oy++)
      for (int64_t ox = 0; ox < g.ow; ox++) {
        float v = d[oy * g.ow + ox] / (float)avg_divisor(&g, include_pad, oy, ox);
        for (int64_t i = 0; i < w->kh; i++) {
          int64_t iy = oy * w->sh - w->pt + i * w->dh;
          if (iy < 0 || iy >= g.h)
            continue;
          for (int64_t j = 0; j < w->kw; j++) {
            int64_t ix = ox * w->sw - w->pl + j * w->dw;
            if (ix >= 0 && ix < g.w)
              o[iy * g.w + ix] += v;
          }
        }
      }
  }
  return GCC_OK;
}

/* ---- AllReduce ------------------------------------------------------------ */

size_t gcc_cpu_all_reduce_workspace(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  size_t bytes = 0;
  for (int k = 0; k < n->n_inputs; k++)
    if (n->inputs[k] >= 0)
      bytes += (size_t)gcc_shape_numel(&g->values[n->inputs[k]].shape, NULL) * sizeof(float);
  return bytes;
}

gcc_status gcc_cpu_all_reduce(const gcc_kernel_args *a) {
  const gcc_node *n = a->node;
  gcc_cpu_ctx *c = a->ctx;
  if (!c->comm)
    return gcc_diag_set(c->diag, GCC_ERR_INTERNAL,
                        "%s: node '%s' (AllReduce) runs in a plan without a communicator",
                        c->source ? c->source : "?", n->name);
  float w = gcc_comm_weight((int)n->av[ALL_REDUCE_MEAN].i, c->shard_rows, c->global_rows);
  float *buf = a->workspace;
  int64_t off = 0;
  for (int k = 0; k < a->n_in; k++) {
    if (!a->in[k])
      continue;
    const float *g = F32(a->in[k]);
    memcpy(buf + off, g, (size_t)a->in[k]->numel * sizeof(float));
    off += a->in[k]->numel;
  }
  gcc_status s = c->comm->allreduce_f32(c->comm, buf, off, w, NULL, c->diag);
  if (s != GCC_OK)
    return gcc_diag_prefix(c->diag, "node '%s' (AllReduce, bucket %lld)", n->name,
                           (long long)n->av[ALL_REDUCE_BUCKET].i);
  off = 0;
  for (int k = 0; k < a->n_in; k++) {
    if (!a->in[k])
      continue;
    memcpy(F32(a->in[k]), buf + off, (size_t)a->in[k]->numel * sizeof(float));
    off += a->in[k]->numel;
  }
  return GCC_OK;
}

/* ---- Cast ----------------------------------------------------------------- */

static float load_float(const gcc_tensor *t, int64_t i) {
  switch (t->dtype) {
  case GCC_DT_BFLOAT16: return gcc_bf16_to_f32(((const uint16_t *)t->data)[i]);
  case GCC_DT_FLOAT16: return gcc_f16_to_f32(((const uint16_t *)t->data)[i]);
  case GCC_DT_INT64:
  case GCC_DT_INT32:
  case GCC_DT_BOOL: return gcc_cpu_load_int_as_float(t, i);
  default: return ((const float *)t->data)[i];
  }
}

gcc_status gcc_cpu_cast(const gcc_kernel_args *a) {
  const gcc_tensor *x = a->in[0];
  gcc_tensor *y = a->out[0];
  int64_t n = y->numel;
  if (x->dtype == y->dtype) {
    memcpy(y->data, x->data, (size_t)n * gcc_dtype_size(y->dtype));
    return GCC_OK;
  }
  if (gcc_cpu_dtype_is_int(y->dtype)) /* to int64, int32, bool: runtime/cpu/cpu_logic.c */
    return gcc_cpu_cast_to_int(a);
  if (y->dtype == GCC_DT_BFLOAT16) {
    uint16_t *o = y->data;
    for (int64_t i = 0; i < n; i++)
      o[i] = gcc_f32_to_bf16(load_float(x, i));
  } else if (y->dtype == GCC_DT_FLOAT16) {
    uint16_t *o = y->data;
    for (int64_t i = 0; i < n; i++)
      o[i] = gcc_f32_to_f16(load_float(x, i));
  } else {
    float *o = y->data;
    for (int64_t i = 0; i < n; i++)
      o[i] = load_float(x, i);
  }
  return GCC_OK;
}

/* ---- fp16 loss scaling (torch.amp.GradScaler) ------------------------- */

gcc_status gcc_cpu_amp_non_finite_check(const gcc_kernel_args *a) {
  int bad = 0; /* input 0, the CUDA kernel's scratch, is not needed here */
  for (int k = AMP_CHECK_IN_GRADS; k < a->n_in && !bad; k++) {
    const float *x = F32(a->in[k]);
    int64_t n = a->in[k]->numel;
    for (int64_t i = 0; i < n; i++)
      bad |= !(fabsf(x[i]) <= FLT_MAX); /* Inf or NaN */
  }
  F32(a->out[0])[0] = bad ? 1.0f : 0.0f;
  return GCC_OK;
}

/* ---- gradient clipping: GradNorm is in cpu_optim.c ------------------- */

/* torch._amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu),
 * in float32 as its kernel */
gcc_status gcc_cpu_amp_update_scale(const gcc_kernel_args *a) {
  const gcc_node *n = a->node;
  float *scale = F32(a->in[AMP_UPDATE_IN_SCALE]);
  float found_inf = F32(a->in[AMP_UPDATE_IN_FOUND_INF])[0];
  float *tracker = F32(a->in[AMP_UPDATE_IN_TRACKER]);
  float *steps = F32(a->in[AMP_UPDATE_IN_STEPS]);
  if (found_inf != 0.0f) {
    scale[0] = scale[0] * n->av[AMP_UPDATE_BACKOFF_FACTOR].f;
    tracker[0] = 0.0f;
    return GCC_OK;
  }
  float successful = tracker[0] + 1.0f;
  if (successful >= (float)n->av[AMP_UPDATE_GROWTH_INTERVAL].i) {
    float grown = scale[0] * n->av[AMP_UPDATE_GROWTH_FACTOR].f;
    if (fabsf(grown) <= FLT_MAX) /* PyTorch grows only to a finite scale */
      scale[0] = grown;
    tracker[0] = 0.0f;
  } else {
    tracker[0] = successful;
  }
  steps[0] = steps[0] + 1.0f;
  return GCC_OK;
}
