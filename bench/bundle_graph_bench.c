/*
 * bundle_graph_bench - a bundle's inference on a GPU through the C API that
 * gcc-run uses (deploy/gcc_api.h), per batch: launched kernel by kernel
 * (gccx_session_set_cuda_graphs(s, 0), gcc-run --no-cuda-graph) against
 * replayed from the CUDA Graph captured per batch size (the default), each
 * in two orders:
 *   - sequential: set batch i, run it, read its outputs;
 *   - pipelined (gcc-run's loop): run batch i, set batch i + 1 (its H2D
 *     issued on the copy stream while the GPU computes i), read i.
 * Synthetic float32 inputs (speed does not depend on them). Per row: ms per
 * batch (wall time of the timed batches / their number), images/s, and the
 * session's runs / replays / captures (gccx_session_stats) with the reason
 * when nothing is replayed.
 *
 *   bench/bundle_graph_bench [BUNDLE.gccx] [--batch N] [--batches N] [--warmup N]
 *                            [--device cuda|cuda:N|cpu]
 *
 * Without a bundle it exports models/mnist_mlp.pb (run from the repository
 * root) for the GPU's architecture at --batch (default 64). --device cpu
 * runs the same loops on the CPU (a dry run of the bench without a GPU: the
 * CPU replays nothing). Exit status: 0, 1 on an error, 4 when the device is
 * unusable.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/flags.h"
#include "deploy/export.h"
#include "deploy/gcc_api.h"
#include "graph/loader.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const gcc_diag *d) {
  fprintf(stderr, "bundle_graph_bench: %s\n", d->msg);
  return 1;
}

/* `warm` + `runs` batches of `rows` rows from x (n_rows rows, cycled);
 * *seconds: the timed ones' wall time. */
static gcc_status loop(gccx_session *s, const char *input, const float *x, int64_t n_rows,
                       int64_t per, int64_t rows, int pipelined, int warm, int runs,
                       double *seconds, gcc_diag *d) {
  const float *p;
  int64_t r, c;
  double t0 = 0;
  int total = warm + runs;
#define AT(i) (x + (((int64_t)(i)*rows) % (n_rows - rows + 1)) * per)
  if (pipelined)
    GCC_TRY(gccx_set_input(s, input, AT(0), rows, d));
  for (int i = 0; i < total; i++) {
    if (i == warm)
      t0 = now();
    if (!pipelined)
      GCC_TRY(gccx_set_input(s, input, AT(i), rows, d));
    GCC_TRY(gccx_run(s, d));
    if (pipelined && i + 1 < total)
      GCC_TRY(gccx_set_input(s, input, AT(i + 1), rows, d));
    GCC_TRY(gccx_get_output(s, "logits", &p, &r, &c, d));
    GCC_TRY(gccx_get_output(s, "probabilities", &p, &r, &c, d));
  }
#undef AT
  *seconds = now() - t0;
  return GCC_OK;
}

int main(int argc, char **argv) {
  const char *bundle = NULL, *device = "cuda";
  int64_t batch = 64, batches = 200, warmup = 20;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      if (!gcc_flag_i64("bundle_graph_bench", "--batch", argv[++i], 1, &batch))
        return 2;
    } else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
      if (!gcc_flag_i64("bundle_graph_bench", "--batches", argv[++i], 1, &batches))
        return 2;
    } else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
      if (!gcc_flag_i64("bundle_graph_bench", "--warmup", argv[++i], 4, &warmup))
        return 2;
    } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      device = argv[++i];
    } else if (argv[i][0] != '-' && !bundle) {
      bundle = argv[i];
    } else {
      fprintf(stderr, "usage: bundle_graph_bench [BUNDLE.gccx] [--batch N] [--batches N] "
                      "[--warmup N >= 4] [--device cuda|cuda:N|cpu]\n");
      return 2;
    }
  }
  gcc_diag d = {0};
  int cuda = strncmp(device, "cuda", 4) == 0;
  char path[4200];
  if (!bundle) { /* the MNIST MLP for this GPU's architecture (sm_90 for a CPU dry run) */
    gcc_device_info gi;
    int arch = 90;
    if (cuda) {
      char why[512];
      if (gcc_cuda_device_count(why, sizeof why) < 1) {
        fprintf(stderr, "bundle_graph_bench: no usable CUDA GPU (%s)\n", why);
        return 4;
      }
      if (gcc_device_info_cuda(0, &gi, &d) != GCC_OK)
        return fail(&d);
      arch = gi.cc_major * 10 + gi.cc_minor;
    }
    gcc_graph *g = NULL;
    if (gcc_model_load("models/mnist_mlp.pb", &g, &d) != GCC_OK)
      return fail(&d);
    gcc_export_options o = {0};
    o.archs[0] = arch;
    o.n_archs = 1;
    o.batch_sizes[0] = batch;
    o.n_batch_sizes = 1;
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/bundle_graph_bench.%d.gccx", tmp ? tmp : "/tmp", (int)getpid());
    gcc_status st = gcc_export_bundle(g, &o, path, &d);
    gcc_graph_free(g);
    if (st != GCC_OK)
      return fail(&d);
    bundle = path;
  }
  gccx_bundle *b = NULL;
  if (gccx_bundle_open(bundle, &b, &d) != GCC_OK)
    return fail(&d);
  const gcc_bundle_info *info;
  gccx_bundle_info(b, &info, &d);
  int64_t per = 1;
  for (int i = 1; i < info->input.shape.ndim; i++)
    per *= info->input.shape.dims[i];
  int64_t n_rows = 4 * batch;
  float *x = malloc((size_t)(n_rows * per) * sizeof *x);
  if (!x) {
    fprintf(stderr, "bundle_graph_bench: out of memory\n");
    return 1;
  }
  uint32_t seed = 12345;
  for (int64_t i = 0; i < n_rows * per; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
  }
  printf("bundle_graph_bench: %s, batch %" PRId64 ", %" PRId64 " timed batches after %" PRId64
         " warm-up ones, device %s\n",
         bundle, batch, batches, warmup, device);
  printf("%-10s %-14s %12s %12s %22s  %s\n", "mode", "order", "ms/batch", "images/s",
         "runs/replays/captures", "note");
  int rc = 0;
  for (int graphs = 0; graphs < 2 && rc == 0; graphs++)
    for (int pipelined = 0; pipelined < 2 && rc == 0; pipelined++) {
      gccx_session_options so = {device, 0, batch};
      gccx_session *s = NULL;
      char note[768];
      if (gccx_session_create(b, &so, &s, note, sizeof note, &d) != GCC_OK) {
        rc = d.status == GCC_ERR_DEVICE || d.status == GCC_ERR_UNSUPPORTED ? 4 : 1;
        fail(&d);
        break;
      }
      double sec = 0;
      gcc_status st = gccx_session_set_cuda_graphs(s, graphs, &d);
      if (st == GCC_OK)
        st = loop(s, info->input.name, x, n_rows, per, batch, pipelined, (int)warmup, (int)batches,
                  &sec, &d);
      gccx_run_stats rs = {0};
      if (st == GCC_OK)
        st = gccx_session_stats(s, &rs, &d);
      if (st != GCC_OK) {
        rc = fail(&d);
      } else {
        printf("%-10s %-14s %12.4f %12.0f %8" PRId64 "/%" PRId64 "/%" PRId64 "       %s\n",
               graphs ? "replay" : "launches", pipelined ? "pipelined" : "sequential",
               1e3 * sec / (double)batches, (double)(batch * batches) / sec, rs.runs, rs.replays,
               rs.captures, rs.graph_note);
      }
      gccx_session_destroy(&s);
    }
  free(x);
  gccx_bundle_close(&b);
  if (bundle == path)
    unlink(path);
  return rc;
}
