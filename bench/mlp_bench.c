/*
 * mlp_bench - gcc-train on the MNIST MLP (models/models.h gcc_model_mnist_mlp,
 * 784-512-256-128-64-10) on real MNIST, CPU:
 *
 *   - training step time at batch 64, 256, 1024: median over 200 timed
 *     gcc_session_train_step calls after 20 warm-up steps, on batches from a
 *     gcc_dataloader (shuffle, drop_last, normalisation) made synchronously
 *     before the timed call (no prefetch thread), so that the step runs
 *     alone on the cores, as PyTorch's does in bench/torch_mlp.py. The
 *     whole-epoch figure below measures the pipeline with its loader thread.
 *   - the tutorial's training, 5 epochs (--epochs) at batch 64, through
 *     gcc_train_run on a fresh session (what `gcc-train models/mnist_mlp.pb` does): epoch time
 *     = training seconds / 5 (shuffling, batching, normalisation, the plan
 *     compiles of the full and the last partial batch; the test-set
 *     evaluation after each epoch excluded), and the test accuracy at the end.
 *   - inference: batch-1 latency (median of 1000 gcc_session_eval_batch
 *     calls after 50 warm-up calls) and throughput at batch 64 and 1024
 *     (median of 200 calls after 20 warm-up); eval_batch computes logits,
 *     the loss and the argmax count.
 *   - peak RSS (getrusage ru_maxrss) at the end.
 *
 * Output: one "key=value" per line on stdout (logs go to stderr).
 *
 *   bazel run //bench:mlp_bench -- [--threads N] [--data DIR] [--steps N] [--epochs N]
 *   bazel run //bench:mlp_bench -- --model FILE.pb [--threads N] [--steps N]
 *       (any model with MNIST input, e.g. models/mnist_cnn.pb: only the
 *       training step at batch 64, printed as model_train_*_b64)
 *   bazel run //bench:mlp_bench -- [--model FILE.pb] --dump-init FILE  (the
 *       initial parameters of models/mnist_mlp.pb, or of --model, for
 *       bench/torch_mlp.py: per parameter, in
 *       graph order, u32 name length, name, u32 ndim, i64 dims, f32 data;
 *       little-endian)
 *   bazel run //bench:mlp_bench -- --sgemm-peak   (OpenBLAS 2048^3 sgemm
 *                                                  GFLOP/s, 1 and 2 threads)
 */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/flags.h"
#include "graph/loader.h"
#include "models/models.h"
#include "datasets/dataloader.h"
#include "datasets/dataset.h"
#include "runtime/session.h"
#include "runtime/trainer.h"
#include "graph/util.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void die(const char *what, const gcc_diag *d) {
  fprintf(stderr, "mlp_bench: %s: %s\n", what, d ? d->msg : "");
  exit(1);
}

/* 2048^3 sgemm, best of 8 after 2 warm-up calls (peak, not median) */
static double sgemm_gflops(int threads) {
  const int n = 2048;
  float *A = malloc(sizeof(float) * n * n), *B = malloc(sizeof(float) * n * n),
        *C = malloc(sizeof(float) * n * n);
  if (!A || !B || !C) {
    fprintf(stderr, "mlp_bench: out of memory\n");
    exit(1);
  }
  for (int i = 0; i < n * n; i++) {
    A[i] = (float)(i % 17) * 0.01f;
    B[i] = (float)(i % 13) * 0.02f;
  }
  openblas_set_num_threads(threads);
  double best = 1e30;
  for (int r = 0; r < 10; r++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
    double t = now() - t0;
    if (r >= 2 && t < best)
      best = t;
  }
  free(A);
  free(B);
  free(C);
  return 2.0 * n * n * (double)n / best / 1e9;
}

/* --dump-init: see the header comment for the format */
static int dump_init(const gcc_graph *g, const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "mlp_bench: --dump-init %s: %s\n", path, strerror(errno));
    return 1;
  }
  int ok = 1;
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *x = &g->values[v];
    if (x->kind != GCC_VALUE_PARAM)
      continue;
    uint32_t len = (uint32_t)strlen(x->name), nd = (uint32_t)x->shape.ndim;
    int64_t n = gcc_shape_numel(&x->shape, NULL);
    ok &= fwrite(&len, 4, 1, f) == 1 && fwrite(x->name, 1, len, f) == len &&
          fwrite(&nd, 4, 1, f) == 1 && fwrite(x->shape.dims, 8, nd, f) == nd &&
          fwrite(x->data, 4, (size_t)n, f) == (size_t)n;
  }
  if (fclose(f) != 0 || !ok) {
    fprintf(stderr, "mlp_bench: --dump-init %s: write failed\n", path);
    return 1;
  }
  return 0;
}

static gcc_session *new_session(const gcc_graph *model, int threads) {
  gcc_diag d = {0};
  gcc_session_options so = {0};
  so.threads = threads;
  so.opt = model->training.opt;
  gcc_session *s;
  if (gcc_session_create(model, &so, &s, &d) != GCC_OK)
    die("session", &d);
  return s;
}

static float g_mean = 0.1307f, g_std = 0.3081f; /* the model's normalisation */

static gcc_dataloader *new_loader(const gcc_dataset *ds, int64_t batch, int prefetch) {
  gcc_diag d = {0};
  gcc_dataloader_options o = {0};
  o.batch_size = batch;
  o.shuffle = 1;
  o.seed = GCC_MNIST_MLP_SEED;
  o.drop_last = 1;
  o.mean = g_mean;
  o.std = g_std;
  o.prefetch = prefetch;
  gcc_dataloader *dl;
  if (gcc_dataloader_create(ds, &o, &dl, &d) != GCC_OK)
    die("dataloader", &d);
  return dl;
}

/* the next full batch, starting a new epoch when one runs out */
static void next_batch(gcc_dataloader *dl, int64_t *epoch, gcc_batch *b) {
  gcc_diag d = {0};
  int has = 0;
  if (gcc_dataloader_next(dl, b, &has, &d) != GCC_OK)
    die("dataloader_next", &d);
  if (!has) {
    ++*epoch;
    if (gcc_dataloader_start_epoch(dl, *epoch, &d) != GCC_OK ||
        gcc_dataloader_next(dl, b, &has, &d) != GCC_OK || !has)
      die("dataloader epoch", &d);
  }
}

int main(int argc, char **argv) {
  /* gcc-train's and gcc-run's own OpenMP wait policy (a short spin,
   * cli/flags.h, unless the environment says otherwise): this harness
   * measures them as they run */
  gcc_cli_omp_wait_policy(argv); /* before anything: it may re-execute */
  int64_t flag;                  /* an integer flag value (0, which every flag refuses, if none) */
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && chdir(bwd) != 0)
    fprintf(stderr, "mlp_bench: warning: cannot enter %s: %s\n", bwd, strerror(errno));
  const char *data_dir = "data/mnist";
  const char *init_path = NULL, *model_path = NULL;
  int threads = 2, steps = 200, sgemm_only = 0, epochs = 5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = gcc_parse_i64(argv[++i], 0, INT32_MAX, &flag) ? (int)flag : 0;
    else if (!strcmp(argv[i], "--data") && i + 1 < argc)
      data_dir = argv[++i];
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = gcc_parse_i64(argv[++i], 0, INT32_MAX, &flag) ? (int)flag : 0;
    else if (!strcmp(argv[i], "--epochs") && i + 1 < argc)
      epochs = gcc_parse_i64(argv[++i], 0, INT32_MAX, &flag) ? (int)flag : 0;
    else if (!strcmp(argv[i], "--model") && i + 1 < argc)
      model_path = argv[++i];
    else if (!strcmp(argv[i], "--dump-init") && i + 1 < argc)
      init_path = argv[++i];
    else if (!strcmp(argv[i], "--sgemm-peak"))
      sgemm_only = 1;
    else if (argv[i][0] != '-')
      data_dir = argv[i];
    else {
      fprintf(stderr, "usage: mlp_bench [--threads N] [--steps N] [--epochs N] "
                      "[--data DIR | DIR] [--model FILE.pb] [--sgemm-peak] "
                      "[--dump-init FILE]\n");
      return 2;
    }
  }
  if (threads < 1 || steps < 1 || epochs < 0) {
    fprintf(stderr, "mlp_bench: --threads and --steps must be >= 1, --epochs >= 0\n");
    return 2;
  }
  if (sgemm_only) {
    printf("sgemm_2048_gflops_1t=%.1f\n", sgemm_gflops(1));
    printf("sgemm_2048_gflops_2t=%.1f\n", sgemm_gflops(2));
    return 0;
  }

  gcc_diag d = {0};
  gcc_graph *model;
  if (model_path ? gcc_model_load(model_path, &model, &d) != GCC_OK
                 : gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &model, &d) != GCC_OK)
    die("model", &d);
  if (model->training.n_mean && model->training.n_std) {
    g_mean = model->training.mean[0];
    g_std = model->training.std[0];
  }
  if (init_path) {
    int rc = dump_init(model, init_path);
    gcc_graph_free(model);
    return rc;
  }
  gcc_dataset train = {0};
  if (gcc_mnist_load(data_dir, 1, &train, &d) != GCC_OK)
    die("mnist", &d);
  const char *key = model_path ? "model_" : ""; /* --model: batch 64 steps only */
  if (!model_path)
    printf("threads=%d\nsteps=%d\nwarmup=20\nepochs=%d\n", threads, steps, epochs);

  /* ---- training steps ---- */
  static const int64_t batches[] = {64, 256, 1024};
  const int n_batches = model_path ? 1 : 3;
  double *t = malloc(sizeof(double) * (size_t)(steps > 1000 ? steps : 1000));
  if (!t)
    return 1;
  gcc_session *s = new_session(model, threads);
  for (int bi = 0; bi < n_batches; bi++) {
    int64_t B = batches[bi], epoch = 0;
    gcc_dataloader *dl = new_loader(&train, B, 0);
    if (gcc_dataloader_start_epoch(dl, 0, &d) != GCC_OK)
      die("start_epoch", &d);
    float loss = 0;
    for (int i = 0; i < 20 + steps; i++) {
      gcc_batch b;
      next_batch(dl, &epoch, &b);
      double t0 = now();
      if (gcc_session_train_step(s, b.images, b.labels, b.rows, &loss, &d) != GCC_OK)
        die("train_step", &d);
      if (i >= 20)
        t[i - 20] = now() - t0;
    }
    double m = median(t, steps);
    printf("%strain_step_ms_b%" PRId64 "=%.4f\n", key, B, 1e3 * m);
    printf("%strain_samples_per_s_b%" PRId64 "=%.1f\n", key, B, (double)B / m);
    fprintf(stderr, "mlp_bench: batch %" PRId64 ": last loss %.4f\n", B, (double)loss);
    gcc_dataloader_destroy(dl);
  }

  if (model_path) {
    gcc_session_destroy(s);
    free(t);
    gcc_dataset_free(&train);
    gcc_graph_free(model);
    return 0;
  }

  /* ---- inference (same session: parameters after the steps above) ---- */
  {
    gcc_dataloader *dl = new_loader(&train, 1024, 0);
    int64_t epoch = 0;
    gcc_dataloader_start_epoch(dl, 0, &d);
    gcc_batch b;
    next_batch(dl, &epoch, &b); /* 1024 normalised rows, reused for every call */
    float loss;
    int64_t correct;
    for (int i = 0; i < 1050; i++) {
      double t0 = now();
      if (gcc_session_eval_batch(s, b.images + (size_t)(i % 1024) * 784, b.labels + (i % 1024), 1,
                                 &loss, &correct, NULL, &d) != GCC_OK)
        die("eval_batch", &d);
      if (i >= 50)
        t[i - 50] = now() - t0;
    }
    printf("infer_latency_us_b1=%.2f\n", 1e6 * median(t, 1000));
    static const int64_t ib[] = {64, 1024};
    for (int k = 0; k < 2; k++) {
      for (int i = 0; i < 220; i++) {
        double t0 = now();
        if (gcc_session_eval_batch(s, b.images, b.labels, ib[k], &loss, &correct, NULL, &d) !=
            GCC_OK)
          die("eval_batch", &d);
        if (i >= 20)
          t[i - 20] = now() - t0;
      }
      printf("infer_samples_per_s_b%" PRId64 "=%.1f\n", ib[k], (double)ib[k] / median(t, 200));
    }
    gcc_dataloader_destroy(dl);
  }
  gcc_session_destroy(s);

  /* ---- the tutorial's training: 5 epochs at batch 64 (gcc-train's default run) ----
   * (fewer with --epochs, for quick runs; none with --epochs 0) */
  if (epochs > 0) {
    gcc_session *es = new_session(model, threads);
    gcc_train_config cfg = {0};
    cfg.data_dir = data_dir;
    cfg.epochs = epochs;
    cfg.batch_size = 64;
    cfg.seed = GCC_MNIST_MLP_SEED;
    cfg.log_every = 0;
    cfg.eval_batch = 1000;
    cfg.quiet = 1;
    cfg.out = stderr;
    gcc_train_report r;
    if (gcc_train_run(es, model, &cfg, &r, &d) != GCC_OK)
      die("train_run", &d);
    printf("epoch_b64_s=%.3f\n", r.train_seconds / (double)cfg.epochs);
    printf("epoch_b64_samples_per_s=%.1f\n", (double)r.samples / r.train_seconds);
    printf("test_accuracy=%.4f\n", r.test_accuracy);
    gcc_session_destroy(es);
  }

  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("peak_rss_mib=%.1f\n", (double)ru.ru_maxrss / 1024.0);
  free(t);
  gcc_dataset_free(&train);
  gcc_graph_free(model);
  return 0;
}
