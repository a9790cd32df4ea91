/*
 * dnnl_ops_bench - the oneDNN primitive layer (runtime/cpu/dnnl_ops) on the
 * shapes of the reference models: GEMMs against OpenBLAS, and convolutions
 * in plain NCHW against oneDNN's blocked layouts (format_tag any: nChw16c
 * activations, blocked filters) with the reorders from and to NCHW that the
 * layer makes inside the op; pooling.
 *
 *   bazel run -c opt //bench:dnnl_ops_bench -- [--threads N] [--reps N] [--only gemm|conv|pool]
 *   bazel run -c opt //bench:dnnl_ops_bench -- --sgemm-peak [--threads N]
 *       (key=value lines: dnnl_sgemm 2048^3 GFLOP/s on 1 .. N threads, best of 8;
 *       bench/compare.sh's limit)
 *
 * Each figure is the median of --reps timed runs (default 200) after 10
 * warm-up runs, in microseconds, with GFLOP/s where a FLOP count is
 * meaningful. Output: markdown tables on stdout.
 */
#include <cblas.h>
#include <inttypes.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cpu/dnnl_ops.h"

static int g_reps = 200;
static const char *g_only = NULL; /* --only gemm|conv|pool */
static int g_sgemm_only = 0;      /* --sgemm-peak */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef void (*bench_fn)(void *user);

static double median_us(bench_fn f, void *user) {
  double *t = malloc((size_t)g_reps * sizeof *t);
  for (int i = 0; i < 10; i++)
    f(user);
  for (int i = 0; i < g_reps; i++) {
    double t0 = now_us();
    f(user);
    t[i] = now_us() - t0;
  }
  qsort(t, (size_t)g_reps, sizeof *t, cmp_double);
  double m = t[g_reps / 2];
  free(t);
  return m;
}

static float *buf(size_t n) {
  float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  for (size_t i = 0; i < n; i++)
    p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  return p;
}

static void die(const gcc_diag *d) {
  fprintf(stderr, "dnnl_ops_bench: %s\n", d->msg);
  exit(1);
}

/* ---- a layer op with its buffers ---------------------------------------- */

typedef struct op_run {
  gcc_dnnl_op *op;
  void *ptrs[10];
  void *scratch;
} op_run;

static void run_op(void *u) {
  op_run *r = u;
  gcc_diag d = {0};
  if (gcc_dnnl_op_run(r->op, r->ptrs, r->scratch, &d) != GCC_OK)
    die(&d);
}

static void op_prepare(op_run *r) {
  size_t s = gcc_dnnl_op_scratch_bytes(r->op);
  r->scratch = s ? aligned_alloc(64, s) : NULL;
}

static void op_release(op_run *r) {
  free(r->scratch);
  gcc_dnnl_op_free(r->op);
}

/* ---- OpenBLAS --------------------------------------------------------------- */

typedef struct blas_run {
  int ta, tb;
  int64_t m, n, k;
  float *a, *b, *y;
} blas_run;

static void run_blas(void *u) {
  blas_run *r = u;
  cblas_sgemm(CblasRowMajor, r->ta ? CblasTrans : CblasNoTrans, r->tb ? CblasTrans : CblasNoTrans,
              (blasint)r->m, (blasint)r->n, (blasint)r->k, 1.0f, r->a,
              (blasint)(r->ta ? r->m : r->k), r->b, (blasint)(r->tb ? r->k : r->n), 0.0f, r->y,
              (blasint)r->n);
}

/* ---- GEMMs ---------------------------------------------------------------- */

/* oneDNN first, OpenBLAS afterwards: measured side by side, each library's
 * idle threads (OpenMP's and OpenBLAS's, both spin-wait for a while after
 * work) would slow the other down on 2 cores */
static void bench_gemms(gcc_dnnl *dn, int threads) {
  /* the MLP's layers at batch 1, 64 and 1024: forward (bias + ReLU), dX, dW */
  static const int64_t layers[][2] = {{784, 512}, {512, 256}, {256, 128}, {128, 64}, {64, 10}};
  static const int64_t batches[] = {1, 64, 1024};
  enum { MAXG = 64 };
  gcc_dnnl_matmul_desc mds[MAXG];
  const char *names[MAXG];
  char impls[MAXG][48];
  double dus[MAXG], bus[MAXG];
  int ng = 0;
  for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++)
    for (size_t li = 0; li < sizeof layers / sizeof layers[0]; li++)
      for (int kind = 0; kind < 3; kind++) {
        int64_t b = batches[bi], in = layers[li][0], out = layers[li][1];
        if (b == 1 && kind)
          continue; /* inference only */
        gcc_dnnl_matmul_desc md = {0};
        md.alpha = 1.0f;
        if (kind == 0) { /* Y [b, out] = X [b, in] W^T + bias, relu */
          md.m = b, md.n = out, md.k = in, md.trans_b = 1, md.bias = 1, md.relu = out != 10;
          names[ng] = "fwd";
        } else if (kind == 1) { /* dX [b, in] = dY [b, out] W [out, in] */
          md.m = b, md.n = in, md.k = out;
          names[ng] = "dX";
        } else { /* dW [out, in] = dY^T [out, b] X [b, in] */
          md.m = out, md.n = in, md.k = b, md.trans_a = 1;
          names[ng] = "dW";
        }
        mds[ng++] = md;
      }
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      openblas_set_num_threads(threads);
      struct timespec ts = {0, 200 * 1000 * 1000};
      nanosleep(&ts, NULL); /* OpenMP's workers go back to sleep */
    }
    for (int i = 0; i < ng; i++) {
      const gcc_dnnl_matmul_desc *md = &mds[i];
      float *A = buf((size_t)(md->m * md->k)), *B = buf((size_t)(md->k * md->n));
      float *bias = buf((size_t)md->n), *Y = buf((size_t)(md->m * md->n));
      if (pass == 0) {
        gcc_diag d = {0};
        op_run r = {0};
        if (gcc_dnnl_matmul_create(dn, md, &r.op, &d) != GCC_OK)
          die(&d);
        op_prepare(&r);
        r.ptrs[0] = A, r.ptrs[1] = B, r.ptrs[2] = md->bias ? bias : NULL, r.ptrs[3] = Y;
        dus[i] = median_us(run_op, &r);
        snprintf(impls[i], sizeof impls[i], "%s", gcc_dnnl_op_impl(r.op));
        op_release(&r);
      } else {
        blas_run br = {md->trans_a, md->trans_b, md->m, md->n, md->k, A, B, Y};
        bus[i] = median_us(run_blas, &br);
      }
      free(A), free(B), free(bias), free(Y);
    }
    if (pass == 1) {
      openblas_set_num_threads(1);
      struct timespec ts = {0, 200 * 1000 * 1000};
      nanosleep(&ts, NULL); /* OpenBLAS's workers go back to sleep */
    }
  }
  printf("\n### GEMMs of the MNIST MLP, %d thread(s)\n\n", threads);
  printf("| GEMM | oneDNN matmul (impl) | us | GFLOP/s | OpenBLAS us | GFLOP/s |\n");
  printf("|---|---|---:|---:|---:|---:|\n");
  for (int i = 0; i < ng; i++) {
    const gcc_dnnl_matmul_desc *md = &mds[i];
    double flop = 2.0 * (double)(md->m * md->n * md->k);
    int64_t b = !strcmp(names[i], "dW") ? md->k : md->m;
    printf("| b%" PRId64 " %s %" PRId64 "x%" PRId64 "x%" PRId64 " | %s | %.2f | %.1f | %.2f | "
           "%.1f |\n",
           b, names[i], md->m, md->n, md->k, impls[i], dus[i], flop / dus[i] * 1e-3, bus[i],
           flop / bus[i] * 1e-3);
  }
}

/* ---- convolutions: plain against blocked layouts ------------------------------ */

static void bench_convs(gcc_dnnl *dn, int threads) {
  struct {
    const char *name;
    gcc_dnnl_conv_desc c;
  } convs[] = {
      {"MNIST CNN conv1, b64", {64, 1, 28, 28, 6, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0}},
      {"MNIST CNN conv2, b64", {64, 6, 12, 12, 16, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0}},
      {"CIFAR CNN conv1, b4", {4, 3, 32, 32, 6, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0}},
      {"CIFAR CNN conv2, b4", {4, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0}},
      {"3x3 64->64, 28x28, b32", {32, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}},
  };
  printf("\n### Convolutions, %d thread(s): plain NCHW against oneDNN's blocked layouts "
         "(reorders from and to NCHW included)\n\n",
         threads);
  printf("| conv | pass | plain impl | plain us | GFLOP/s | blocked (layout) | blocked us | "
         "GFLOP/s | AUTO picks |\n");
  printf("|---|---|---|---:|---:|---|---:|---:|---|\n");
  for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
    gcc_dnnl_conv_desc c = convs[i].c;
    int64_t oh, ow;
    gcc_dnnl_conv_out_dims(&c, &oh, &ow);
    double flop = 2.0 * (double)(c.n * c.m * oh * ow * c.c * c.kh * c.kw);
    size_t nx = (size_t)(c.n * c.c * c.h * c.w), ny = (size_t)(c.n * c.m * oh * ow);
    size_t nw = (size_t)(c.m * c.c * c.kh * c.kw);
    float *X = buf(nx), *W = buf(nw), *B = buf((size_t)c.m), *Y = buf(ny), *dY = buf(ny),
          *dX = buf(nx), *dW = buf(nw), *dB = buf((size_t)c.m);
    for (int dir = 0; dir < 3; dir++) {
      double us[3];
      char impl[3][200];
      for (int lay = 0; lay < 3; lay++) { /* PLAIN, BLOCKED, AUTO */
        gcc_diag d = {0};
        op_run r = {0};
        c.layout = lay == 0   ? GCC_DNNL_LAYOUT_PLAIN
                   : lay == 1 ? GCC_DNNL_LAYOUT_BLOCKED
                              : GCC_DNNL_LAYOUT_AUTO;
        gcc_status s = dir == 0   ? gcc_dnnl_conv_fwd_create(dn, &c, &r.op, &d)
                       : dir == 1 ? gcc_dnnl_conv_bwd_data_create(dn, &c, &r.op, &d)
                                  : gcc_dnnl_conv_bwd_weights_create(dn, &c, &r.op, &d);
        if (s != GCC_OK)
          die(&d);
        op_prepare(&r);
        if (dir == 0)
          r.ptrs[0] = X, r.ptrs[1] = W, r.ptrs[2] = B, r.ptrs[3] = Y;
        else if (dir == 1)
          r.ptrs[0] = dY, r.ptrs[1] = W, r.ptrs[2] = dX;
        else
          r.ptrs[0] = dY, r.ptrs[1] = X, r.ptrs[2] = dW, r.ptrs[3] = dB;
        us[lay] = lay < 2 ? median_us(run_op, &r) : 0;
        /* the implementation and layouts: the op's name up to the shape */
        const char *nm = strchr(gcc_dnnl_op_name(r.op), '(');
        const char *end = nm ? strchr(nm, ')') : NULL;
        snprintf(impl[lay], sizeof impl[lay], "%.*s", nm && end ? (int)(end - nm - 1) : 1,
                 nm ? nm + 1 : "?");
        op_release(&r);
      }
      static const char *dirs[] = {"fwd", "bwd data", "bwd weights"};
      printf("| %s | %s | %s | %.1f | %.1f | %s | %.1f | %.1f | %s |\n", convs[i].name, dirs[dir],
             impl[0], us[0], flop / us[0] * 1e-3, impl[1], us[1], flop / us[1] * 1e-3,
             strstr(impl[2], "reorders") || strcmp(impl[2], impl[0]) ? "blocked" : "plain");
    }
    free(X), free(W), free(B), free(Y), free(dY), free(dX), free(dW), free(dB);
  }
}

static void bench_pools(gcc_dnnl *dn, int threads) {
  printf("\n### Pooling, %d thread(s)\n\n| pool | pass | impl | us |\n|---|---|---|---:|\n",
         threads);
  gcc_dnnl_pool_desc ps[] = {
      {GCC_DNNL_POOL_MAX, 64, 6, 24, 24, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 1},
      {GCC_DNNL_POOL_MAX, 64, 16, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 1},
      /* ResNet's stem, MaxPool2d(3, 2, 1) at batch 16 (224x224 images):
       * the general loops against oneDNN's workspace forward and backward */
      {GCC_DNNL_POOL_MAX, 16, 64, 112, 112, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 1},
  };
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
    gcc_dnnl_pool_desc p = ps[i];
    int64_t oh, ow;
    gcc_dnnl_pool_out_dims(&p, &oh, &ow);
    size_t nx = (size_t)(p.n * p.c * p.h * p.w), ny = (size_t)(p.n * p.c * oh * ow);
    float *X = buf(nx), *Y = buf(ny), *dY = buf(ny), *dX = buf(nx);
    gcc_diag d = {0};
    op_run f = {0}, b = {0}, bx = {0};
    op_run fi = {0};
    gcc_dnnl_pool_desc pi = p;
    pi.training = 0; /* a plan's forward: this layer's loops */
    if (gcc_dnnl_pool_fwd_create(dn, &p, &f.op, &d) ||
        gcc_dnnl_pool_bwd_create(dn, &p, &b.op, &d) ||
        gcc_dnnl_max_pool_bwd_from_x_create(dn, &p, &bx.op, &d) ||
        gcc_dnnl_pool_fwd_create(dn, &pi, &fi.op, &d))
      die(&d);
    op_prepare(&fi);
    fi.ptrs[0] = X, fi.ptrs[1] = Y;
    op_prepare(&f), op_prepare(&b), op_prepare(&bx);
    void *ws = aligned_alloc(64, (gcc_dnnl_op_workspace_bytes(f.op) + 63) / 64 * 64);
    f.ptrs[0] = X, f.ptrs[1] = Y, f.ptrs[2] = ws;
    b.ptrs[0] = dY, b.ptrs[1] = ws, b.ptrs[2] = dX;
    bx.ptrs[0] = dY, bx.ptrs[1] = X, bx.ptrs[2] = dX;
    char name[64];
    snprintf(name, sizeof name,
             "max %" PRId64 "x%" PRId64 " s%" PRId64 " p%" PRId64 " %" PRId64 "x%" PRId64
             "x%" PRId64 "x%" PRId64,
             p.kh, p.kw, p.sh, p.pt, p.n, p.c, p.h, p.w);
    printf("| %s | fwd (training) | %s | %.1f |\n", name, gcc_dnnl_op_impl(f.op),
           median_us(run_op, &f));
    printf("| %s | bwd (workspace) | %s | %.1f |\n", name, gcc_dnnl_op_impl(b.op),
           median_us(run_op, &b));
    printf("| %s | bwd from X (the graph's MaxPoolGrad) | %s | %.1f |\n", name,
           gcc_dnnl_op_impl(bx.op), median_us(run_op, &bx));
    printf("| %s | fwd (no workspace) | %s | %.1f |\n", name, gcc_dnnl_op_impl(fi.op),
           median_us(run_op, &fi));
    op_release(&f), op_release(&b), op_release(&bx), op_release(&fi);
    free(ws), free(X), free(Y), free(dY), free(dX);
  }
}

int main(int argc, char **argv) {
  int max_threads = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      max_threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      g_reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      g_only = argv[++i];
    else if (!strcmp(argv[i], "--sgemm-peak"))
      g_sgemm_only = 1;
    else {
      fprintf(stderr, "usage: dnnl_ops_bench [--threads N] [--reps N] [--only gemm|conv|pool] "
                      "[--sgemm-peak]\n");
      return 2;
    }
  }
  if (max_threads < 1 || g_reps < 1) {
    fprintf(stderr, "dnnl_ops_bench: --threads and --reps must be >= 1\n");
    return 2;
  }
  if (g_sgemm_only) { /* key=value lines for bench/compare.sh */
    printf("dnnl_version=%s\ndnnl_isa=%s\n", gcc_dnnl_version(), gcc_dnnl_isa());
    for (int t = 1; t <= max_threads; t++) {
      gcc_dnnl *dn;
      gcc_diag d = {0};
      double peak;
      if (gcc_dnnl_create(t, &dn, &d) != GCC_OK ||
          gcc_dnnl_sgemm_gflops(dn, 2048, 2048, 2048, 8, &peak, &d) != GCC_OK)
        die(&d);
      printf("dnnl_sgemm_2048_gflops_%dt=%.1f\n", t, peak);
      gcc_dnnl_free(dn);
    }
    return 0;
  }
  printf("oneDNN %s, JIT for %s; OpenMP max threads %d\n", gcc_dnnl_version(), gcc_dnnl_isa(),
         omp_get_max_threads());
  for (int t = 1; t <= max_threads; t *= 2) {
    gcc_dnnl *dn;
    gcc_diag d = {0};
    if (gcc_dnnl_create(t, &dn, &d) != GCC_OK)
      die(&d);
    double peak;
    if (gcc_dnnl_sgemm_gflops(dn, 2048, 2048, 2048, 5, &peak, &d) != GCC_OK)
      die(&d);
    blas_run br = {0, 0, 2048, 2048, 2048, buf(2048 * 2048), buf(2048 * 2048), buf(2048 * 2048)};
    openblas_set_num_threads(t);
    int reps = g_reps;
    g_reps = 5;
    double bus = median_us(run_blas, &br);
    g_reps = reps;
    openblas_set_num_threads(1);
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    printf("\n%d thread(s): dnnl_sgemm 2048^3 %.1f GFLOP/s; OpenBLAS sgemm %.1f GFLOP/s\n", t, peak,
           2.0 * 2048 * 2048 * 2048 / bus * 1e-3);
    free(br.a), free(br.b), free(br.y);
    if (!g_only || !strcmp(g_only, "gemm"))
      bench_gemms(dn, t);
    if (!g_only || !strcmp(g_only, "conv"))
      bench_convs(dn, t);
    if (!g_only || !strcmp(g_only, "pool"))
      bench_pools(dn, t);
    gcc_dnnl_free(dn);
  }
  return 0;
}
