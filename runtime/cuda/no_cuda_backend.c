/*
 * no_cuda_backend.c - the CUDA backend of a CPU-only build (bazel
 * --config=cpu_only): the functions of cuda_backend.h, so that the
 * programs link, each saying that this build has no CUDA. Nothing reaches
 * them in practice: the device probe (cuda_device.c under GCC_NO_CUDA)
 * finds no CUDA device, so --device cuda stops there with the same reason.
 */
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_device.h"

gcc_status gcc_cuda_backend_create(int ordinal, gcc_cuda_backend **out, gcc_diag *d) {
  *out = NULL;
  return gcc_diag_set(d, GCC_ERR_DEVICE, "cuda:%d: %s", ordinal, GCC_NO_CUDA_REASON);
}

const gcc_device_backend *gcc_cuda_backend_table(gcc_cuda_backend *b) {
  (void)b;
  return NULL;
}

void gcc_cuda_backend_destroy(gcc_cuda_backend *b) {
  (void)b;
}

gcc_status gcc_cuda_backend_set_algo_cache(gcc_cuda_backend *b, const char *dir, int use_cache,
                                           gcc_diag *d) {
  (void)b;
  (void)dir;
  (void)use_cache;
  (void)d;
  return GCC_OK;
}

void gcc_cuda_backend_conv_report(const gcc_cuda_backend *b, FILE *f) {
  (void)b;
  (void)f;
}
