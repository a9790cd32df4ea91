#include "runtime/device.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "codegen/nvrtc.h"
#include "graph/ir.h"

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
    if (count == 0) {
      snprintf(note, note_cap, "--device auto: no usable CUDA GPU (%s); running on the CPU",
               reason);
      return GCC_OK;
    }
    gcc_device_info info;
    gcc_diag why = {0};
    if (gcc_device_info_cuda(0, &info, &why) != GCC_OK ||
        gcc_cuda_check_supported(&info, &why) != GCC_OK) {
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
  GCC_TRY(gcc_cuda_check_supported(&info, d));
  *out = *want;
  return GCC_OK;
}

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

gcc_status gcc_cuda_check_supported(const gcc_device_info *info, gcc_diag *d) {
  int sm = info->cc_major * 10 + info->cc_minor;
  gcc_diag why = {0};
  if (gcc_nvrtc_check_arch(sm, &why) == GCC_OK)
    return GCC_OK;
  char dev[32];
  return gcc_diag_set(d, GCC_ERR_DEVICE,
                      "%s (%s) has compute capability %d.%d, which this gcc-train cannot run "
                      "kernels on: %s. Use --device cpu, or a gcc-train built with a CUDA "
                      "toolkit that supports this GPU",
                      gcc_dev_name(info->id, dev, sizeof dev), info->name, info->cc_major,
                      info->cc_minor, why.msg);
}

int gcc_list_devices(FILE *out) {
  gcc_device_info cpu;
  gcc_device_info_cpu(&cpu);
  fprintf(out, "cpu     %s, %d cores, %" PRIu64 " bytes of memory\n", cpu.name, cpu.units,
          cpu.memory_bytes);
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
    int ok = gcc_cuda_check_supported(&info, &why) == GCC_OK;
    usable += ok;
    fprintf(out,
            "cuda:%d  %s, compute capability %d.%d, %" PRIu64 " bytes of memory, %d SMs: %s\n", i,
            info.name, info.cc_major, info.cc_minor, info.memory_bytes, info.units,
            ok ? "usable" : why.msg);
  }
  return usable;
}

void gcc_device_info_cpu(gcc_device_info *out) {
  memset(out, 0, sizeof *out);
  out->id = GCC_DEV_CPU;
  struct utsname u;
  snprintf(out->name, sizeof out->name, "%s CPU", uname(&u) == 0 ? u.machine : "host");
  long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES),
       page = sysconf(_SC_PAGESIZE);
  out->units = cores > 0 ? (int)cores : 1;
  out->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

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

gcc_status gcc_device_info_from_arch(const char *arch, int index, gcc_device_info *out,
                                     gcc_diag *d) {
  static const struct {
    const char *arch, *name;
    int major, minor, sms;
    uint64_t gib;
  } known[] = {
      {"sm_80", "NVIDIA A100 80GB (assumed from sm_80)", 8, 0, 108, 80},
      {"sm_86", "NVIDIA A10 (assumed from sm_86)", 8, 6, 72, 24},
      {"sm_89", "NVIDIA L4 (assumed from sm_89)", 8, 9, 58, 24},
      {"sm_90", "NVIDIA H100 80GB (assumed from sm_90)", 9, 0, 132, 80},
  };
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (arch && strcmp(arch, known[i].arch) == 0) {
      out->id = GCC_DEV_CUDA(index);
      snprintf(out->name, sizeof out->name, "%s", known[i].name);
      out->cc_major = known[i].major;
      out->cc_minor = known[i].minor;
      out->units = known[i].sms;
      out->memory_bytes = known[i].gib << 30;
      out->assumed = 1;
      return GCC_OK;
    }
  return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                      "--cuda-arch '%s': unknown architecture (known: sm_80, sm_86, sm_89, sm_90)",
                      arch ? arch : "");
}
