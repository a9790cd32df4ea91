/*
 * gpu_step: time one training step of the MNIST MLP on cuda:0, replayed from
 * a CUDA Graph and issued launch by launch, at batch 64 and 1024, on
 * random batches (the data loader is not timed). Prints key=value lines.
 *
 *   bazel run //bench:gpu_step            (needs a usable CUDA GPU; exit 4 without)
 *
 * Steps are asynchronous: losses are collected every 100 steps, as gcc-train
 * does with its default --log-every, so the host never waits per step.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "models/models.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/device.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/arch_check.h"
#include "runtime/session.h"
#include "codegen/kernel_cache.h"

static const gcc_kernel_cache_config kKernelCache = {NULL, 1};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int run(const gcc_graph *model, gcc_cuda_backend *be, const gcc_device_info *info,
               int graphs, int64_t batch) {
  gcc_session_options so = {0};
  so.threads = 1;
  so.opt = model->training.opt;
  so.backend = gcc_cuda_backend_table(be);
  so.device = GCC_DEV_CUDA(0);
  so.plan.sm = info->cc_major * 10 + info->cc_minor;
  so.plan.sm_count = info->units;
  so.plan.compile = gcc_kernel_cache_hook;
  so.plan.compile_user = (void *)&kKernelCache;
  so.plan.cuda_graph = graphs;
  so.max_pending = 100;
  gcc_diag d = {0};
  gcc_session *s = NULL;
  float *x = malloc((size_t)batch * 784 * sizeof *x), losses[100];
  int64_t *y = malloc((size_t)batch * sizeof *y);
  if (!x || !y)
    return 1;
  for (int64_t i = 0; i < batch * 784; i++)
    x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  for (int64_t i = 0; i < batch; i++)
    y[i] = i % 10;
  int rc = 0, n = 0;
  if (gcc_session_create(model, &so, &s, &d) != GCC_OK)
    goto fail;
  for (int i = 0; i < 100; i++) /* warm-up: compile, capture */
    if (gcc_session_train_step_async(s, x, y, batch, &d) != GCC_OK)
      goto fail;
  if (gcc_session_collect_losses(s, losses, 100, &n, &d) != GCC_OK)
    goto fail;
  const int steps = 1000;
  double t0 = now();
  for (int i = 0; i < steps; i++) {
    if (gcc_session_train_step_async(s, x, y, batch, &d) != GCC_OK)
      goto fail;
    if ((i + 1) % 100 == 0 && gcc_session_collect_losses(s, losses, 100, &n, &d) != GCC_OK)
      goto fail;
  }
  double sec = now() - t0;
  gcc_plan *p = NULL;
  if (gcc_session_plan(s, GCC_MODE_TRAIN, batch, &p, &d) != GCC_OK)
    goto fail;
  printf("batch=%" PRId64 " cuda_graph=%s step_us=%.1f samples_per_s=%.0f launches=%d copies=%d "
         "replays=%" PRId64 "%s%s\n",
         batch, graphs ? "on" : "off", 1e6 * sec / steps, (double)batch * steps / sec,
         gcc_plan_launches(p), gcc_plan_copies(p), gcc_plan_graph_replays(p),
         gcc_plan_graph_note(p)[0] ? " note=" : "", gcc_plan_graph_note(p));
  goto done;
fail:
  fprintf(stderr, "gpu_step: %s\n", d.msg);
  rc = 1;
done:
  gcc_session_destroy(s);
  free(x);
  free(y);
  return rc;
}

int main(void) {
  char reason[512] = "";
  if (gcc_cuda_device_count(reason, sizeof reason) == 0) {
    fprintf(stderr, "gpu_step: no usable CUDA GPU: %s\n", reason);
    return 4;
  }
  gcc_diag d = {0};
  gcc_device_info info;
  gcc_cuda_backend *be = NULL;
  gcc_graph *model = NULL;
  if (gcc_device_info_cuda(0, &info, &d) != GCC_OK ||
      gcc_cuda_check_supported(&info, &d) != GCC_OK ||
      gcc_cuda_backend_create(0, &be, &d) != GCC_OK ||
      gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &model, &d) != GCC_OK) {
    fprintf(stderr, "gpu_step: %s\n", d.msg);
    return 4;
  }
  printf("device=\"%s\" cc=%d.%d sms=%d\n", info.name, info.cc_major, info.cc_minor, info.units);
  int rc = 0;
  for (int b = 0; b < 2; b++)
    for (int g = 1; g >= 0; g--)
      rc |= run(model, be, &info, g, b ? 1024 : 64);
  gcc_graph_free(model);
  gcc_cuda_backend_destroy(be);
  return rc;
}
