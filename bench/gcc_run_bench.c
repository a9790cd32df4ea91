/*
 * gcc_run_bench - CPU inference speed of an exported bundle, through the C
 * API that gcc-run uses (deploy/gcc_api.h): per run, the raw MNIST test
 * images are normalized into the session (gccx_set_input_images), the
 * inference graph runs (gccx_run: 5 GEMMs with ReLU, the Softmax) and both
 * outputs are fetched (gccx_get_output).
 *
 *   - batch-1 latency: 2000 timed runs after 100 warm-up runs, one test
 *     image each (cycling through the test set); median and p90 in µs;
 *   - batch-1024 throughput: 60 timed runs after 5 warm-up runs over
 *     consecutive 1024-image slices; images/s from the median run time;
 *   - for reference, batch-1 latency of the same forward pass through
 *     gcc-train's evaluation (gcc_session_eval_batch on models/mnist_mlp.pb:
 *     logits and the loss, no softmax), measured the same way.
 *
 *   bazel run -c opt //bench:gcc_run_bench -- [BUNDLE.gccx] [--threads N] [--data DIR]
 *
 * Without a bundle it exports models/mnist_mlp.pb (its initial weights:
 * speed does not depend on them) to a temporary file first. Prints a table.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/flags.h"
#include "graph/loader.h"
#include "datasets/dataset.h"
#include "deploy/export.h"
#include "deploy/gcc_api.h"
#include "runtime/session.h"
#include "graph/util.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int fail(const gcc_diag *d) {
  fprintf(stderr, "gcc_run_bench: %s\n", d->msg);
  return 1;
}

/* Times `runs` inference runs of `rows` images starting at image `first`
 * (advancing by rows, wrapping); fills t[] with seconds per run. */
static int time_runs(gccx_session *s, const gcc_dataset *ds, int64_t rows, int warm, int runs,
                     double *t, gcc_diag *d) {
  int64_t px = ds->height * ds->width, at = 0;
  for (int i = -warm; i < runs; i++) {
    if (at + rows > ds->n)
      at = 0;
    const float *out;
    double t0 = now();
    if (gccx_set_input_images(s, ds->images + at * px, rows, d) != GCC_OK ||
        gccx_run(s, d) != GCC_OK || gccx_get_output(s, "logits", &out, NULL, NULL, d) != GCC_OK ||
        gccx_get_output(s, "probabilities", &out, NULL, NULL, d) != GCC_OK)
      return 0;
    double dt = now() - t0;
    if (i >= 0)
      t[i] = dt;
    at += rows;
  }
  return 1;
}

/* gcc-train's evaluation forward at batch 1 (median seconds), or -1. */
static double session_latency(const gcc_dataset *ds, int threads, int runs, double *t) {
  gcc_diag d = {0};
  gcc_graph *m = NULL;
  gcc_session *s = NULL;
  double r = -1;
  if (gcc_model_load("models/mnist_mlp.pb", &m, &d) == GCC_OK) {
    gcc_session_options so = {0};
    so.threads = threads;
    so.opt = m->training.opt;
    if (gcc_session_create(m, &so, &s, &d) == GCC_OK) {
      float x[784], loss;
      int64_t label = 0, correct;
      int ok = 1;
      for (int i = -100; i < runs && ok; i++) {
        const uint8_t *px = ds->images + (size_t)((i + 100) % ds->n) * 784;
        double t0 = now();
        for (int k = 0; k < 784; k++) /* the data loader's normalization */
          x[k] = ((float)px[k] / 255.0f - m->training.mean[0]) / m->training.std[0];
        ok = gcc_session_eval_batch(s, x, &label, 1, &loss, &correct, NULL, &d) == GCC_OK;
        if (i >= 0)
          t[i] = now() - t0;
      }
      if (ok) {
        qsort(t, (size_t)runs, sizeof t[0], cmp_double);
        r = t[runs / 2];
      }
    }
  }
  if (r < 0)
    fprintf(stderr, "gcc_run_bench: session reference: %s\n", d.msg);
  gcc_session_destroy(s);
  gcc_graph_free(m);
  return r;
}

int main(int argc, char **argv) {
  /* gcc-train's and gcc-run's own OpenMP wait policy (a short spin,
   * cli/flags.h, unless the environment says otherwise): this harness
   * measures them as they run */
  gcc_cli_omp_wait_policy(argv); /* before anything: it may re-execute */
  int64_t flag;                  /* an integer flag value (0, which every flag refuses, if none) */
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && chdir(bwd) != 0)
    fprintf(stderr, "gcc_run_bench: warning: cannot enter %s: %s\n", bwd, strerror(errno));
  const char *bundle_path = NULL, *data = "data/mnist";
  int threads = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = gcc_parse_i64(argv[++i], 0, INT32_MAX, &flag) ? (int)flag : 0;
    else if (strcmp(argv[i], "--data") == 0 && i + 1 < argc)
      data = argv[++i];
    else if (argv[i][0] != '-')
      bundle_path = argv[i];
    else {
      fprintf(stderr, "usage: gcc_run_bench [BUNDLE.gccx] [--threads N] [--data DIR]\n");
      return 2;
    }
  }
  gcc_diag d = {0};
  char tmp[4096];
  const char *tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(tmp, sizeof tmp, "%s/gcc_run_bench_XXXXXX.gccx", tmpdir);
  if (!bundle_path) {
    gcc_graph *m;
    if (gcc_model_load("models/mnist_mlp.pb", &m, &d) != GCC_OK)
      return fail(&d);
    int fd = mkstemps(tmp, 5);
    if (fd < 0) {
      perror("gcc_run_bench: mkstemps");
      gcc_graph_free(m);
      return 1;
    }
    close(fd);
    gcc_export_options o = {0};
    o.archs[0] = 90;
    o.n_archs = 1;
    o.use_kernel_cache = 1;
    gcc_status s = gcc_export_bundle(m, &o, tmp, &d);
    gcc_graph_free(m);
    if (s != GCC_OK) {
      unlink(tmp);
      return fail(&d);
    }
    bundle_path = tmp;
  }
  gcc_dataset ds = {0};
  gccx_bundle *b = NULL;
  gccx_session *s1 = NULL, *sb = NULL;
  int rc = 1;
  enum { LAT_RUNS = 2000, TPUT_RUNS = 60, BIG = 1024 };
  static double lat[LAT_RUNS], tput[TPUT_RUNS];
  gccx_session_options o1 = {"cpu", threads, 1}, ob = {"cpu", threads, BIG};
  if (gcc_mnist_load(data, 0, &ds, &d) == GCC_OK &&
      gccx_bundle_open(bundle_path, &b, &d) == GCC_OK &&
      gccx_session_create(b, &o1, &s1, NULL, 0, &d) == GCC_OK &&
      gccx_session_create(b, &ob, &sb, NULL, 0, &d) == GCC_OK &&
      time_runs(s1, &ds, 1, 100, LAT_RUNS, lat, &d) &&
      time_runs(sb, &ds, BIG, 5, TPUT_RUNS, tput, &d)) {
    qsort(lat, LAT_RUNS, sizeof lat[0], cmp_double);
    qsort(tput, TPUT_RUNS, sizeof tput[0], cmp_double);
    printf("gcc-run CPU inference, MNIST MLP 784-512-256-128-64-10 + softmax, %d thread%s\n",
           threads, threads == 1 ? "" : "s");
    printf("| what | figure |\n|---|---|\n");
    printf("| batch-1 latency, median | %.1f us |\n", 1e6 * lat[LAT_RUNS / 2]);
    printf("| batch-1 latency, p90 | %.1f us |\n", 1e6 * lat[LAT_RUNS * 9 / 10]);
    printf("| batch-%d run, median | %.2f ms |\n", BIG, 1e3 * tput[TPUT_RUNS / 2]);
    printf("| batch-%d throughput | %.0f images/s |\n", BIG, BIG / tput[TPUT_RUNS / 2]);
    double ref = session_latency(&ds, threads, LAT_RUNS, lat);
    if (ref >= 0)
      printf("| reference: gcc-train evaluation forward, batch 1, median | %.1f us |\n", 1e6 * ref);
    rc = 0;
  } else {
    fail(&d);
  }
  gccx_session_destroy(&s1);
  gccx_session_destroy(&sb);
  gccx_bundle_close(&b);
  gcc_dataset_free(&ds);
  if (bundle_path == tmp)
    unlink(tmp);
  return rc;
}
