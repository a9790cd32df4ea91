/*
 * cuda_device.c - CUDA devices probed through the CUDA runtime API
 * (cuda_device.h).
 */
#include "runtime/cuda/cuda_device.h"

#ifndef GCC_NO_CUDA
#include <cuda_runtime_api.h>
#endif
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"

#ifdef GCC_NO_CUDA
/* --config=cpu_only: no CUDA toolkit at build time, so no CUDA device */
int gcc_cuda_device_count(char *reason, size_t cap) {
  snprintf(reason, cap, "%s", GCC_NO_CUDA_REASON);
  return 0;
}
#else
int gcc_cuda_device_count(char *reason, size_t cap) {
  int driver = 0, runtime = 0, count = 0;
  cudaError_t e = cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  if (e != cudaSuccess || driver == 0) {
    snprintf(reason, cap,
             "no NVIDIA driver is loaded (cudaDriverGetVersion reports %d; "
             "CUDA runtime %d.%d)",
             driver, runtime / 1000, (runtime % 1000) / 10);
    return 0;
  }
  e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (e == cudaErrorInsufficientDriver)
      snprintf(reason, cap,
               "the NVIDIA driver (CUDA %d.%d) is older than the CUDA runtime "
               "(%d.%d): update the driver (cudaGetDeviceCount: %s)",
               driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10,
               cudaGetErrorString(e));
    else
      snprintf(reason, cap, "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e),
               cudaGetErrorName(e));
    return 0;
  }
  if (count == 0)
    snprintf(reason, cap, "the driver reports no CUDA device (check CUDA_VISIBLE_DEVICES)");
  return count;
}
#endif

gcc_status gcc_device_resolve(const gcc_device *want, gcc_device_check_fn check, gcc_device *out,
                              char *note, size_t note_cap, gcc_diag *d) {
  if (note_cap)
    note[0] = '\0';
  if (want->kind == GCC_DEVICE_CPU) {
    *out = *want;
    return GCC_OK;
  }
  char reason[512] = "";
  int count = gcc_cuda_device_count(reason, sizeof reason);
  if (want->kind == GCC_DEVICE_AUTO) {
    out->kind = GCC_DEVICE_CPU;
    out->index = 0;
    if (count == 0) {
      snprintf(note, note_cap, "--device auto: no usable CUDA GPU (%s); running on the CPU",
               reason);
      return GCC_OK;
    }
    gcc_device_info info;
    gcc_diag why = {0};
    if (gcc_device_info_cuda(0, &info, &why) != GCC_OK || (check && check(&info, &why) != GCC_OK)) {
      snprintf(note, note_cap, "--device auto: cuda:0 is not usable (%s); running on the CPU",
               why.msg);
      return GCC_OK;
    }
    out->kind = GCC_DEVICE_CUDA;
    out->index = 0;
    snprintf(note, note_cap, "--device auto: running on cuda:0 (%s)", info.name);
    return GCC_OK;
  }
  char ds[32];
  gcc_device_str(want, ds, sizeof ds);
  if (count == 0)
    return gcc_diag_set(d, GCC_ERR_DEVICE,
                        "--device %s: no usable CUDA GPU: %s. Use --device cpu, or --device auto "
                        "to fall back to the CPU",
                        ds, reason);
  if (want->index >= count)
    return gcc_diag_set(d, GCC_ERR_DEVICE,
                        "--device %s: only %d CUDA device(s) are visible (cuda:0 to cuda:%d; "
                        "CUDA_VISIBLE_DEVICES=%s)",
                        ds, count, count - 1,
                        getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
  gcc_device_info info;
  GCC_TRY(gcc_device_info_cuda(want->index, &info, d));
  if (check)
    GCC_TRY(check(&info, d));
  *out = *want;
  return GCC_OK;
}

#ifdef GCC_NO_CUDA
void gcc_cuda_versions(int *driver, int *runtime) {
  if (driver)
    *driver = 0;
  if (runtime)
    *runtime = 0;
}
#else
void gcc_cuda_versions(int *driver, int *runtime) {
  int dv = 0, rv = 0;
  if (cudaDriverGetVersion(&dv) != cudaSuccess)
    dv = 0;
  if (cudaRuntimeGetVersion(&rv) != cudaSuccess)
    rv = 0;
  if (driver)
    *driver = dv;
  if (runtime)
    *runtime = rv;
}
#endif

int gcc_list_devices(FILE *out, gcc_device_check_fn check) {
  gcc_device_info cpu;
  gcc_device_info_cpu(&cpu);
  fprintf(out, "cpu     %s, %d cores, %" PRIu64 " bytes of memory\n", cpu.name, cpu.units,
          cpu.memory_bytes);
#ifdef GCC_NO_CUDA
  fprintf(out, "cuda    none: %s\n", GCC_NO_CUDA_REASON);
  return 0;
#endif
  int driver = 0, runtime = 0;
  gcc_cuda_versions(&driver, &runtime);
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  fprintf(out, "CUDA runtime %d.%d, driver %d.%d, CUDA_VISIBLE_DEVICES %s\n", runtime / 1000,
          (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10, vis ? vis : "unset");
  char reason[512] = "";
  int count = gcc_cuda_device_count(reason, sizeof reason);
  if (count == 0) {
    fprintf(out, "no usable CUDA device: %s\n", reason);
    return 0;
  }
  int usable = 0;
  for (int i = 0; i < count; i++) {
    gcc_device_info info;
    gcc_diag d = {0};
    if (gcc_device_info_cuda(i, &info, &d) != GCC_OK) {
      fprintf(out, "cuda:%d  %s\n", i, d.msg);
      continue;
    }
    gcc_diag why = {0};
    int ok = !check || check(&info, &why) == GCC_OK;
    usable += ok;
    fprintf(out, "cuda:%d  %s, compute capability %d.%d, %" PRIu64 " bytes of memory, %d SMs: %s\n",
            i, info.name, info.cc_major, info.cc_minor, info.memory_bytes, info.units,
            ok ? "usable" : why.msg);
  }
  return usable;
}

#ifdef GCC_NO_CUDA
gcc_status gcc_device_info_cuda(int index, gcc_device_info *out, gcc_diag *d) {
  memset(out, 0, sizeof *out);
  return gcc_diag_set(d, GCC_ERR_DEVICE, "cuda:%d: %s", index, GCC_NO_CUDA_REASON);
}
#else
gcc_status gcc_device_info_cuda(int index, gcc_device_info *out, gcc_diag *d) {
  memset(out, 0, sizeof *out);
  struct cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, index);
  if (e != cudaSuccess)
    return gcc_diag_set(d, GCC_ERR_DEVICE, "cuda:%d: cudaGetDeviceProperties failed: %s (%s)",
                        index, cudaGetErrorString(e), cudaGetErrorName(e));
  out->id = GCC_DEV_CUDA(index);
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  out->memory_bytes = (uint64_t)p.totalGlobalMem;
  out->units = p.multiProcessorCount;
  return GCC_OK;
}
#endif
