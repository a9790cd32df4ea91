#include "runtime/device.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gcc_status gcc_device_parse(const char *s, gcc_device *out, gcc_diag *d) {
  out->index = 0;
  if (!s)
    s = "";
  if (strcmp(s, "cpu") == 0) {
    out->kind = GCC_DEVICE_CPU;
    return GCC_OK;
  }
  if (strcmp(s, "auto") == 0) {
    out->kind = GCC_DEVICE_AUTO;
    return GCC_OK;
  }
  if (strcmp(s, "cuda") == 0) {
    out->kind = GCC_DEVICE_CUDA;
    return GCC_OK;
  }
  if (strncmp(s, "cuda:", 5) == 0 && s[5] >= '0' && s[5] <= '9') {
    char *end;
    long n = strtol(s + 5, &end, 10);
    if (*end == '\0' && n >= 0 && n < 4096) {
      out->kind = GCC_DEVICE_CUDA;
      out->index = (int)n;
      return GCC_OK;
    }
  }
  return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                      "--device '%s': not a device (use cpu, cuda, cuda:N or auto)", s);
}

const char *gcc_device_str(const gcc_device *dev, char *buf, size_t cap) {
  switch (dev->kind) {
  case GCC_DEVICE_CPU: snprintf(buf, cap, "cpu"); break;
  case GCC_DEVICE_CUDA: snprintf(buf, cap, "cuda:%d", dev->index); break;
  default: snprintf(buf, cap, "auto"); break;
  }
  return buf;
}

int gcc_cuda_device_count(char *reason, size_t cap) {
  int driver = 0, runtime = 0, count = 0;
  cudaError_t e = cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  if (e != cudaSuccess || driver == 0) {
    snprintf(reason, cap, "no NVIDIA driver is loaded (cudaDriverGetVersion reports %d; "
             "CUDA runtime %d.%d)", driver, runtime / 1000, (runtime % 1000) / 10);
    return 0;
  }
  e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (e == cudaErrorInsufficientDriver)
      snprintf(reason, cap, "the NVIDIA driver (CUDA %d.%d) is older than the CUDA runtime "
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

gcc_status gcc_device_resolve(const gcc_device *want, gcc_device *out, char *note,
                              size_t note_cap, gcc_diag *d) {
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
    if (count == 0)
      snprintf(note, note_cap, "--device auto: no usable CUDA GPU (%s); running on the CPU",
               reason);
    else
      snprintf(note, note_cap,
               "--device auto: %d CUDA GPU(s) found, but this version has no CUDA execution "
               "backend yet; running on the CPU",
               count);
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
    return gcc_diag_set(d, GCC_ERR_DEVICE, "--device %s: only %d CUDA device(s) are visible", ds,
                        count);
  return gcc_diag_set(d, GCC_ERR_DEVICE,
                      "--device %s: this version of gcc-train cannot execute plans on CUDA yet "
                      "(the CUDA backend is not built); use --device cpu or --device auto",
                      ds);
}
