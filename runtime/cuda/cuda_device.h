/*
 * cuda_device.h - CUDA devices as the CUDA runtime API reports them: the
 * availability probe, their descriptions, --list-devices, and resolving
 * the device a user asked for ("auto", "cuda:N") into the one that runs.
 * The runtime API only (cudaDriverGetVersion, cudaGetDeviceCount,
 * cudaGetDeviceProperties), never libcuda directly, so binaries start on
 * machines without a driver.
 */
#ifndef GCC_RUNTIME_CUDA_CUDA_DEVICE_H
#define GCC_RUNTIME_CUDA_CUDA_DEVICE_H

#include <stddef.h>
#include <stdio.h>

#include "graph/status.h"
#include "runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a CPU-only build (bazel --config=cpu_only, defining GCC_NO_CUDA;
 * what tools/install-deps.sh picks without the CUDA toolkit) says wherever
 * a CUDA device is asked for: there is none, and why. */
#define GCC_NO_CUDA_REASON                                                                         \
  "this gcc-train was built without CUDA (bazel --config=cpu_only: no CUDA toolkit at build "      \
  "time)"

/* Probes CUDA: returns the number of usable devices (0 if none) and, when
 * there are none, the reason in `reason` (e.g. "no NVIDIA driver is loaded
 * (cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime
 * version)"). Never fails. */
int gcc_cuda_device_count(char *reason, size_t cap);

/* The CUDA driver's and runtime's versions (1000 * major + 10 * minor, as
 * cudaDriverGetVersion; 0 when there is no driver). Either may be NULL. */
void gcc_cuda_versions(int *driver, int *runtime);

/* CUDA device `index` probed through cudaGetDeviceProperties. Errors:
 * GCC_ERR_DEVICE with the CUDA error when the device cannot be queried. */
gcc_status gcc_device_info_cuda(int index, gcc_device_info *out, gcc_diag *d);

/* Whether the program can run on the probed device `info` (gcc-train: its
 * NVRTC can target it, runtime/cuda/arch_check.h); GCC_ERR_DEVICE with the
 * reason if not. */
typedef gcc_status (*gcc_device_check_fn)(const gcc_device_info *info, gcc_diag *d);

/* --list-devices: writes every device to `out`: the CPU, then per CUDA
 * device (after CUDA_VISIBLE_DEVICES, whose value is shown) its index,
 * name, compute capability, memory (bytes), SM count and whether this
 * program can run on it (`check`; NULL: every probed device can), with the
 * driver and runtime versions; or the exact reason no CUDA device is
 * usable. Returns the number of usable CUDA devices. */
int gcc_list_devices(FILE *out, gcc_device_check_fn check);

/* Resolves the device the user asked for into the device that will run:
 * "auto" becomes cuda:0 when a GPU is usable (and passes `check`, if not
 * NULL), else cpu with *note set to the reason (for the user);
 * "cuda"/"cuda:N" fail with GCC_ERR_DEVICE and a message saying why no
 * usable GPU exists (no driver, driver older than the runtime, no device,
 * an index past the visible devices, a GPU `check` refuses). */
gcc_status gcc_device_resolve(const gcc_device *want, gcc_device_check_fn check, gcc_device *out,
                              char *note, size_t note_cap, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CUDA_CUDA_DEVICE_H */
