/*
 * arch_check.c - whether this build's NVRTC can compile gcc-train's kernels
 * for a CUDA device (arch_check.h).
 */
#include "runtime/cuda/arch_check.h"

#include <stdio.h>

#include "codegen/nvrtc.h"
#include "graph/ir.h"

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
