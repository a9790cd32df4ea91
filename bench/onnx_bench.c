/*
 * onnx_bench - CPU inference speed of an ONNX model through the C API that
 * gcc-run uses (deploy/gcc_api.h: gccx_bundle_open on the .onnx file,
 * which imports it and makes the CPU bundle of its inference graph): per
 * run, the float32 input is copied into the session (gccx_set_input), the
 * graph runs (gccx_run) and the logits are fetched (gccx_get_output).
 *
 *   onnx_bench MODEL.onnx [--threads N] [--batch B] [--runs R] [--warmup W]
 *
 * Times R runs of B rows after W warm-up runs and prints key=value lines:
 *   runtime=gcc-train model=... threads=N batch=B runs=R
 *   median_ms=... p10_ms=... p90_ms=... samples_per_s=...
 * (samples/s from the median). The input is make_onnx_models.py's
 * formula, ((i * 2654435761) mod 2^32) / 2^32 - 0.5; speed does not
 * depend on it. bench/onnx_compare.sh alternates it with ONNX Runtime.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "deploy/gcc_api.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && chdir(bwd) != 0)
    fprintf(stderr, "onnx_bench: warning: cannot enter %s: %s\n", bwd, strerror(errno));
  const char *path = NULL;
  int threads = 1, runs = 30, warm = 3;
  int64_t batch = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
      batch = atoll(argv[++i]);
    else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
      warm = atoi(argv[++i]);
    else if (argv[i][0] != '-' && !path)
      path = argv[i];
    else {
      fprintf(stderr, "usage: onnx_bench MODEL.onnx [--threads N] [--batch B] [--runs R] "
                      "[--warmup W]\n");
      return 2;
    }
  }
  if (!path || threads < 1 || batch < 1 || runs < 1 || warm < 0) {
    fprintf(stderr, "usage: onnx_bench MODEL.onnx [--threads N] [--batch B] [--runs R] "
                    "[--warmup W]\n");
    return 2;
  }
  gcc_diag d = {0};
  gccx_bundle *b = NULL;
  gccx_session *s = NULL;
  const gcc_bundle_info *info = NULL;
  gccx_session_options o = {"cpu", threads, batch};
  if (gccx_bundle_open(path, &b, &d) != GCC_OK || gccx_bundle_info(b, &info, &d) != GCC_OK ||
      gccx_session_create(b, &o, &s, NULL, 0, &d) != GCC_OK) {
    fprintf(stderr, "onnx_bench: %s\n", d.msg);
    gccx_bundle_close(&b);
    return 1;
  }
  int64_t per = 1;
  for (int i = 1; i < info->input.shape.ndim; i++)
    per *= info->input.shape.dims[i];
  float *x = malloc((size_t)(batch * per) * sizeof *x);
  double *t = malloc((size_t)runs * sizeof *t);
  int rc = x && t ? 0 : 1;
  for (int64_t i = 0; rc == 0 && i < batch * per; i++)
    x[i] = (float)((double)(((uint64_t)i * 2654435761ull) % (1ull << 32)) / (double)(1ull << 32) -
                   0.5);
  for (int i = -warm; rc == 0 && i < runs; i++) {
    const float *out;
    double t0 = now();
    if (gccx_set_input(s, info->input.name, x, batch, &d) != GCC_OK || gccx_run(s, &d) != GCC_OK ||
        gccx_get_output(s, "logits", &out, NULL, NULL, &d) != GCC_OK) {
      fprintf(stderr, "onnx_bench: %s\n", d.msg);
      rc = 1;
    }
    if (i >= 0)
      t[i] = now() - t0;
  }
  if (rc == 0) {
    qsort(t, (size_t)runs, sizeof t[0], cmp_double);
    double med = t[runs / 2];
    printf("runtime=gcc-train\nmodel=%s\nthreads=%d\nbatch=%" PRId64 "\nruns=%d\n", path, threads,
           batch, runs);
    printf("median_ms=%.4f\np10_ms=%.4f\np90_ms=%.4f\nsamples_per_s=%.1f\n", 1e3 * med,
           1e3 * t[runs / 10], 1e3 * t[runs * 9 / 10], (double)batch / med);
  }
  free(x);
  free(t);
  gccx_session_destroy(&s);
  gccx_bundle_close(&b);
  return rc;
}
