/*
 * gemm_threads - measures OpenBLAS sgemm at 1 and 2 threads for the GEMM
 * shapes of the MNIST MLP training step (forward Y = X W^T, backward
 * dX = dY W and dW = dY^T X) at several batch sizes, and prints which thread
 * count gcc_cpu_gemm_threads() picks for each. This is where the threshold
 * GCC_GEMM_PARALLEL_FLOPS in runtime/cpu/cpu_kernels.c comes from. A second
 * table times the batch-1 forward GEMMs as sgemm and as sgemv on 1 and 2
 * threads (GCC_GEMV_PARALLEL_ELEMS and the m == 1 path of the CPU GEMM).
 *
 *   bazel run //bench:gemm_threads
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/cpu/cpu_kernels.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* median of `reps` timings of one sgemm, in seconds */
static double time_gemm(int threads, int ta, int tb, int m, int n, int k, const float *A,
                        const float *B, float *C) {
  enum { REPS = 41 };
  double t[REPS];
  openblas_set_num_threads(threads);
  for (int w = 0; w < 5; w++)
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, 1.0f, A, ta ? m : k, B, tb ? k : n, 0.0f, C, n);
  for (int r = 0; r < REPS; r++) {
    double t0 = now();
    int inner = 1 + (int)(2e6 / (2.0 * m * n * k)); /* >= ~1 ms per sample for tiny GEMMs */
    for (int i = 0; i < inner; i++)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                  n, k, 1.0f, A, ta ? m : k, B, tb ? k : n, 0.0f, C, n);
    t[r] = (now() - t0) / inner;
  }
  for (int i = 1; i < REPS; i++) /* insertion sort */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  return t[REPS / 2];
}

/* median of `reps` timings of y = W x (W row-major [n,k]) as sgemv */
static double time_gemv(int threads, int n, int k, const float *W, const float *x, float *y) {
  enum { REPS = 41 };
  double t[REPS];
  openblas_set_num_threads(threads);
  int inner = 1 + (int)(1e6 / (2.0 * n * k));
  for (int r = 0; r < REPS; r++) {
    double t0 = now();
    for (int i = 0; i < inner; i++)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, W, k, x, 1, 0.0f, y, 1);
    t[r] = (now() - t0) / inner;
  }
  for (int i = 1; i < REPS; i++)
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double v = t[j];
      t[j] = t[j - 1];
      t[j - 1] = v;
    }
  return t[REPS / 2];
}

int main(void) {
  static const int widths[] = {784, 512, 256, 128, 64, 10};
  static const int batches[] = {64, 256, 1024};
  float *A = malloc(sizeof(float) * 1024 * 1024), *B = malloc(sizeof(float) * 1024 * 1024),
        *C = malloc(sizeof(float) * 1024 * 1024);
  if (!A || !B || !C)
    return 1;
  for (int i = 0; i < 1024 * 1024; i++) {
    A[i] = (float)(i % 17) * 0.01f;
    B[i] = (float)(i % 13) * 0.02f;
  }
  printf("| GEMM (row-major)            | M x N x K         | MFLOP | 1 thread GFLOP/s | 2 threads "
         "GFLOP/s | faster | gcc picks |\n");
  printf("|---|---|---|---|---|---|---|\n");
  int agree = 0, total = 0;
  for (int bi = 0; bi < 3; bi++) {
    int b = batches[bi];
    for (int l = 0; l < 5; l++) {
      int in = widths[l], out = widths[l + 1];
      struct {
        const char *what;
        int ta, tb, m, n, k;
      } cases[3] = {
          {"fwd  Y = X W^T", 0, 1, b, out, in},
          {"bwd dX = dY W", 0, 0, b, in, out},
          {"bwd dW = dY^T X", 1, 0, out, in, b},
      };
      for (int c = 0; c < 3; c++) {
        if (l == 0 && c == 1)
          continue; /* the input needs no gradient */
        double t1 =
            time_gemm(1, cases[c].ta, cases[c].tb, cases[c].m, cases[c].n, cases[c].k, A, B, C);
        double t2 =
            time_gemm(2, cases[c].ta, cases[c].tb, cases[c].m, cases[c].n, cases[c].k, A, B, C);
        double flop = 2.0 * cases[c].m * cases[c].n * cases[c].k;
        int best = t2 < t1 ? 2 : 1;
        int pick = gcc_cpu_gemm_threads(cases[c].m, cases[c].n, cases[c].k, 2);
        agree += best == pick;
        total++;
        printf("| %-27s | %4d x %4d x %4d | %5.2f | %16.1f | %17.1f | %6d | %9d |\n", cases[c].what,
               cases[c].m, cases[c].n, cases[c].k, flop / 1e6, flop / t1 / 1e9, flop / t2 / 1e9,
               best, pick);
      }
    }
  }
  printf("\ngcc_cpu_gemm_threads picks the faster thread count for %d of %d shapes\n", agree,
         total);

  printf("\nbatch 1, forward Y = x W^T (median microseconds)\n\n");
  printf("| layer | sgemm 1 thread | sgemv 1 thread | sgemv 2 threads |\n|---|---:|---:|---:|\n");
  for (int l = 0; l < 5; l++) {
    int in = widths[l], out = widths[l + 1];
    printf("| %4d -> %4d | %14.2f | %14.2f | %15.2f |\n", in, out,
           1e6 * time_gemm(1, 0, 1, 1, out, in, A, B, C), 1e6 * time_gemv(1, out, in, B, A, C),
           1e6 * time_gemv(2, out, in, B, A, C));
  }
  free(A);
  free(B);
  free(C);
  return 0;
}
