/*
 * conv_algos.c - what --deterministic costs on ResNet-50's convolutions
 * (issue 29): for each distinct convolution shape of torchvision's
 * ResNet-50 (v1.5: stride on the 3x3; 53 convolutions, 23 distinct shapes
 * at 224x224), the algorithms gcc-train's plan build chooses in each
 * direction (runtime/cuda/cudnn_conv.h: cudnnFindConvolution*Algorithm
 * timing, no disk cache) with only deterministic algorithms and with any,
 * and the device time of each chosen algorithm measured here with CUDA
 * events over --iters runs on real buffers. Totals are weighted by how
 * often each shape occurs in the network; the training total leaves out
 * the stem's backward-data (the image needs no gradient).
 *
 *   bazel run //bench:conv_algos -- [--batch N] [--precision fp32|tf32|bf16|fp16]
 *                                   [--iters N]
 *
 * Needs a CUDA GPU: without one it says so and exits with status 2 (the
 * cost is then unmeasured). Speed figures belong here, never in tests.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"
#include "runtime/cuda/cudnn_conv.h"

typedef struct conv_layer {
  const char *name;
  int c, hw, m, k, stride, count;
} conv_layer;

/* torchvision resnet50: Bottleneck(inplanes, planes, stride), 3-4-6-3 */
static const conv_layer LAYERS[] = {
    {"conv1 7x7/2", 3, 224, 64, 7, 2, 1},
    {"layer1 1x1 64-64", 64, 56, 64, 1, 1, 1},
    {"layer1 3x3 64-64", 64, 56, 64, 3, 1, 3},
    {"layer1 1x1 64-256 (+ds)", 64, 56, 256, 1, 1, 4},
    {"layer1 1x1 256-64", 256, 56, 64, 1, 1, 2},
    {"layer2 1x1 256-128", 256, 56, 128, 1, 1, 1},
    {"layer2 3x3/2 128-128", 128, 56, 128, 3, 2, 1},
    {"layer2 1x1 128-512", 128, 28, 512, 1, 1, 4},
    {"layer2 ds 1x1/2 256-512", 256, 56, 512, 1, 2, 1},
    {"layer2 1x1 512-128", 512, 28, 128, 1, 1, 3},
    {"layer2 3x3 128-128", 128, 28, 128, 3, 1, 3},
    {"layer3 1x1 512-256", 512, 28, 256, 1, 1, 1},
    {"layer3 3x3/2 256-256", 256, 28, 256, 3, 2, 1},
    {"layer3 1x1 256-1024", 256, 14, 1024, 1, 1, 6},
    {"layer3 ds 1x1/2 512-1024", 512, 28, 1024, 1, 2, 1},
    {"layer3 1x1 1024-256", 1024, 14, 256, 1, 1, 5},
    {"layer3 3x3 256-256", 256, 14, 256, 3, 1, 5},
    {"layer4 1x1 1024-512", 1024, 14, 512, 1, 1, 1},
    {"layer4 3x3/2 512-512", 512, 14, 512, 3, 2, 1},
    {"layer4 1x1 512-2048", 512, 7, 2048, 1, 1, 3},
    {"layer4 ds 1x1/2 1024-2048", 1024, 14, 2048, 1, 2, 1},
    {"layer4 1x1 2048-512", 2048, 7, 512, 1, 1, 2},
    {"layer4 3x3 512-512", 512, 7, 512, 3, 1, 2},
};
enum { N_LAYERS = sizeof LAYERS / sizeof LAYERS[0] };

#define CUDA_OR_DIE(call)                                                                          \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "conv_algos: %s failed: %s\n", #call, cudaGetErrorString(e_));               \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static void die(const gcc_diag *d) {
  fprintf(stderr, "conv_algos: %s\n", d->msg);
  exit(1);
}

/* Average device milliseconds of one direction of `c` over `iters` runs
 * (after one warm-up run). */
static double time_direction(const gcc_cudnn_conv *c, cudnnHandle_t h, int dir, void *x, void *w,
                             void *y, void *ws, size_t ws_bytes, int iters) {
  cudaEvent_t e0, e1;
  CUDA_OR_DIE(cudaEventCreate(&e0));
  CUDA_OR_DIE(cudaEventCreate(&e1));
  gcc_diag d = {0};
  for (int i = -1; i < iters; i++) {
    if (i == 0)
      CUDA_OR_DIE(cudaEventRecord(e0, 0));
    gcc_status s = dir == 0   ? gcc_cudnn_conv_forward(c, h, x, w, NULL, y, ws, ws_bytes, &d)
                   : dir == 1 ? gcc_cudnn_conv_backward_data(c, h, y, w, x, ws, ws_bytes, &d)
                              : gcc_cudnn_conv_backward_filter(c, h, y, x, w, ws, ws_bytes, &d);
    if (s != GCC_OK)
      die(&d);
  }
  CUDA_OR_DIE(cudaEventRecord(e1, 0));
  CUDA_OR_DIE(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_OR_DIE(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return (double)ms / iters;
}

int main(int argc, char **argv) {
  int batch = 64, iters = 20;
  int precision = GCC_PRECISION_FP32;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--precision") && i + 1 < argc)
      precision = gcc_precision_lookup(argv[++i]);
    else {
      fprintf(stderr, "usage: conv_algos [--batch N] [--precision fp32|tf32|bf16|fp16] "
                      "[--iters N]\n");
      return 2;
    }
  }
  if (batch < 1 || iters < 1 || precision < 0) {
    fprintf(stderr, "conv_algos: --batch and --iters must be >= 1 and --precision one of fp32, "
                    "tf32, bf16, fp16\n");
    return 2;
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
    printf("conv_algos: no CUDA GPU: the cost of --deterministic is unmeasured here\n");
    return 2;
  }
  struct cudaDeviceProp prop;
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, 0));
  gcc_diag d = {0};
  cudnnHandle_t h = NULL;
  if (gcc_cudnn_handle_create(&h, &d) != GCC_OK)
    die(&d);
  gcc_dtype dt = gcc_precision_dtype(precision);
  size_t elem = gcc_dtype_size(dt);
  const size_t cap = (size_t)256 << 20; /* the CUDA backend's GCC_CUDNN_WORKSPACE_CAP */
  printf("ResNet-50 convolutions on %s (sm_%d%d), cuDNN %zu, batch %d, %s, %d timed runs "
         "each; ms per call (cudnnFind's own time in brackets)\n",
         prop.name, prop.major, prop.minor, cudnnGetVersion(), batch, gcc_precision_name(precision),
         iters);
  printf("%-26s %3s  %-10s %-40s %-40s\n", "layer", "n", "direction", "deterministic",
         "any (--no-deterministic)");
  double total[2][3] = {{0}};
  for (int li = 0; li < N_LAYERS; li++) {
    const conv_layer *L = &LAYERS[li];
    int pad = L->k / 2;
    int oh = (L->hw + 2 * pad - L->k) / L->stride + 1;
    size_t xb = (size_t)batch * L->c * L->hw * L->hw * elem;
    size_t wb = (size_t)L->m * L->c * L->k * L->k * elem;
    size_t yb = (size_t)batch * L->m * oh * oh * elem;
    void *x, *w, *y, *ws = NULL;
    CUDA_OR_DIE(cudaMalloc(&x, xb));
    CUDA_OR_DIE(cudaMalloc(&w, wb));
    CUDA_OR_DIE(cudaMalloc(&y, yb));
    CUDA_OR_DIE(cudaMemset(x, 0, xb)); /* zeros: no NaN or Inf to slow anything */
    CUDA_OR_DIE(cudaMemset(w, 0, wb));
    CUDA_OR_DIE(cudaMemset(y, 0, yb));
    char line[2][3][64];
    double ms[2][3];
    for (int nondet = 0; nondet < 2; nondet++) {
      gcc_conv2d_shape s;
      memset(&s, 0, sizeof s);
      s.n = batch, s.c = L->c, s.h = s.w = L->hw, s.m = L->m;
      s.win = (gcc_window2d){L->k, L->k, L->stride, L->stride, pad, pad, pad, pad, 1, 1};
      s.group = 1;
      s.tf32 = precision == GCC_PRECISION_TF32;
      s.dtype = dt;
      s.nondeterministic = nondet;
      gcc_cudnn_conv *c = NULL;
      if (gcc_cudnn_conv_create(&s, &c, &d) != GCC_OK ||
          gcc_cudnn_conv_prepare_cached(c, h, cap, NULL, NULL, &d) != GCC_OK)
        die(&d);
      size_t wsb = gcc_cudnn_conv_workspace_bytes(c);
      CUDA_OR_DIE(cudaMalloc(&ws, wsb ? wsb : 1));
      int algo[3];
      gcc_cudnn_conv_algorithms(c, &algo[0], &algo[1], &algo[2]);
      float tc[3], tf[3];
      gcc_cudnn_conv_choice_times(c, tc, tf);
      for (int k = 0; k < 3; k++) {
        ms[nondet][k] = time_direction(c, h, k, x, w, y, ws, wsb, iters);
        snprintf(line[nondet][k], sizeof line[nondet][k], "%-22s %8.3f [%7.3f]",
                 gcc_cudnn_algo_name(k, algo[k]), ms[nondet][k], (double)tc[k]);
        if (!(li == 0 && k == 1)) /* the stem's dX is never computed */
          total[nondet][k] += L->count * ms[nondet][k];
      }
      cudaFree(ws);
      gcc_cudnn_conv_destroy(c);
    }
    static const char *const dirs[3] = {"forward", "bwd-data", "bwd-filter"};
    for (int k = 0; k < 3; k++) {
      char count[16] = "";
      if (!k)
        snprintf(count, sizeof count, "%d", L->count);
      printf("%-26s %3s  %-10s %-40s %-40s\n", k ? "" : L->name, count, dirs[k], line[0][k],
             line[1][k]);
    }
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
  }
  double fwd[2] = {total[0][0], total[1][0]};
  double train[2] = {total[0][0] + total[0][1] + total[0][2],
                     total[1][0] + total[1][1] + total[1][2]};
  printf("inference (53 forwards): deterministic %.3f ms, any %.3f ms: determinism costs "
         "%+.1f%%\n",
         fwd[0], fwd[1], 100.0 * (fwd[0] - fwd[1]) / fwd[1]);
  printf("training (forward + backward-data + backward-filter): deterministic %.3f ms, any "
         "%.3f ms: determinism costs %+.1f%%\n",
         train[0], train[1], 100.0 * (train[0] - train[1]) / train[1]);
  gcc_cudnn_handle_destroy(h);
  return 0;
}
