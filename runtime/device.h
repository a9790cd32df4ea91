/*
 * device.h - device names and the CUDA availability probe.
 *
 * Device strings follow PyTorch's torch.device: "cpu", "cuda" (= the
 * current device, index 0), "cuda:N"; plus "auto" (CUDA when a usable GPU
 * exists, else the CPU, saying why). The probe uses the CUDA runtime API
 * only (cudaDriverGetVersion, cudaGetDeviceCount), never libcuda directly,
 * so binaries start on machines without a driver.
 */
#ifndef GCC_RUNTIME_DEVICE_H
#define GCC_RUNTIME_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gcc_device_kind {
  GCC_DEVICE_CPU = 0,
  GCC_DEVICE_CUDA,
  GCC_DEVICE_AUTO,
} gcc_device_kind;

typedef struct gcc_device {
  gcc_device_kind kind;
  int index; /* CUDA ordinal (0 for "cuda"), 0 for the CPU */
} gcc_device;

/* What a device is, for placement reports and planning. */
typedef struct gcc_device_info {
  int id;                 /* GCC_DEV_CPU or GCC_DEV_CUDA(n) (graph/ir.h) */
  char name[128];         /* "x86_64 CPU", "NVIDIA H100 80GB HBM3" */
  int cc_major, cc_minor; /* CUDA compute capability; 0.0 for the CPU */
  uint64_t memory_bytes;  /* host RAM or device memory, bytes */
  int units;              /* CPU cores online, or CUDA streaming multiprocessors */
  int assumed;            /* 1: described from --cuda-arch, not probed from hardware */
} gcc_device_info;

/* The host CPU: name from the architecture, cores online, physical RAM. */
void gcc_device_info_cpu(gcc_device_info *out);

/* CUDA device `index` probed through cudaGetDeviceProperties. Errors:
 * GCC_ERR_DEVICE with the CUDA error when the device cannot be queried. */
gcc_status gcc_device_info_cuda(int index, gcc_device_info *out, gcc_diag *d);

/* A CUDA device described by its architecture, for compiling without a GPU:
 * "sm_80" (A100 80GB, 108 SMs), "sm_86" (A10, 24 GB, 72), "sm_89" (L4, 24 GB,
 * 58), "sm_90" (H100 80GB, 132). Errors: GCC_ERR_INVALID_ARGUMENT naming
 * the string and the known architectures. */
gcc_status gcc_device_info_from_arch(const char *arch, int index, gcc_device_info *out,
                                     gcc_diag *d);

/* Parses a device string. GCC_ERR_INVALID_ARGUMENT naming the string and
 * the accepted forms if it is not one of them. */
gcc_status gcc_device_parse(const char *s, gcc_device *out, gcc_diag *d);

/* "cpu", "cuda:0", "auto". */
const char *gcc_device_str(const gcc_device *dev, char *buf, size_t cap);

/* Probes CUDA: returns the number of usable devices (0 if none) and, when
 * there are none, the reason in `reason` (e.g. "no NVIDIA driver is loaded
 * (cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime
 * version)"). Never fails. */
int gcc_cuda_device_count(char *reason, size_t cap);

/* The CUDA driver's and runtime's versions (1000 * major + 10 * minor, as
 * cudaDriverGetVersion; 0 when there is no driver). Either may be NULL. */
void gcc_cuda_versions(int *driver, int *runtime);

/* Checks that the probed CUDA device `info` can run gcc-train's generated
 * kernels: NVRTC must compile for its sm_XY (gcc_nvrtc_check_arch). Errors:
 * GCC_ERR_DEVICE naming the device, its compute capability and NVRTC's
 * supported range, and saying what to do (the case PyTorch reports as
 * "no longer supports this GPU"). */
gcc_status gcc_cuda_check_supported(const gcc_device_info *info, gcc_diag *d);

/* --list-devices: writes every device to `out`: the CPU, then per CUDA
 * device (after CUDA_VISIBLE_DEVICES, whose value is shown) its index,
 * name, compute capability, memory (bytes), SM count and whether this
 * build can run on it, with the driver and runtime versions; or the exact
 * reason no CUDA device is usable. Returns the number of usable CUDA
 * devices. */
int gcc_list_devices(FILE *out);

/* Resolves the device the user asked for into the device that will run:
 * "auto" becomes cuda:0 when a GPU is usable, else cpu with *note set to
 * the reason (for the user); "cuda"/"cuda:N" fail with GCC_ERR_DEVICE and a
 * message saying why no usable GPU exists (no driver, driver older than
 * the runtime, no device, an index past the visible devices, a GPU this
 * build cannot target). */
gcc_status gcc_device_resolve(const gcc_device *want, gcc_device *out, char *note,
                              size_t note_cap, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_DEVICE_H */
