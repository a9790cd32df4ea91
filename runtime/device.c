/*
 * device.c - device names, the host CPU's description and the CUDA
 * architectures --cuda-arch describes (device.h). No CUDA here: probing a
 * CUDA device is runtime/cuda/cuda_device.c.
 */
#include "runtime/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "graph/ir.h"
#include "graph/util.h"

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
  int64_t n;
  if (strncmp(s, "cuda:", 5) == 0 && s[5] >= '0' && s[5] <= '9' &&
      gcc_parse_i64(s + 5, 0, 4095, &n)) {
    out->kind = GCC_DEVICE_CUDA;
    out->index = (int)n;
    return GCC_OK;
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
