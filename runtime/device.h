/*
 * device.h - device names (parsing, printing) and device descriptions: the
 * host CPU, and CUDA devices described by their architecture for compiling
 * without a GPU. Probing real CUDA devices is runtime/cuda/cuda_device.h.
 *
 * Device strings follow PyTorch's torch.device: "cpu", "cuda" (= the
 * current device, index 0), "cuda:N"; plus "auto" (CUDA when a usable GPU
 * exists, else the CPU, saying why).
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

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_DEVICE_H */
