/*
 * arch_check.h - whether gcc-train's generated kernels can run on a CUDA
 * device: this build's NVRTC must compile for its architecture. A library
 * of its own because it links NVRTC: programs that only run prebuilt
 * kernel images (gcc-run, the C API) check the bundle's images instead.
 */
#ifndef GCC_RUNTIME_CUDA_ARCH_CHECK_H
#define GCC_RUNTIME_CUDA_ARCH_CHECK_H

#include "graph/status.h"
#include "runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks that the probed CUDA device `info` can run gcc-train's generated
 * kernels: NVRTC must compile for its sm_XY (gcc_nvrtc_check_arch). Errors:
 * GCC_ERR_DEVICE naming the device, its compute capability and NVRTC's
 * supported range, and saying what to do (the case PyTorch reports as
 * "no longer supports this GPU"). A gcc_device_check_fn
 * (runtime/cuda/cuda_device.h). */
gcc_status gcc_cuda_check_supported(const gcc_device_info *info, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CUDA_ARCH_CHECK_H */
