/*
 * cpu_backend.h - the CPU as a gcc_device_backend (runtime/backend.h): the
 * device every plan has. Host memory (64-byte aligned) for its arenas,
 * memcpy for copies, no streams (events and syncs return at once:
 * everything completes in call order), and run_node: the kernel of the
 * node's op from the CPU op table (runtime/cpu/cpu_ops.c), with the node's
 * planned workspace. It launches no generated kernels, GEMMs or library
 * calls (a CPU GEMM is the Gemm node's kernel): those entries return
 * GCC_ERR_UNSUPPORTED.
 */
#ifndef GCC_RUNTIME_CPU_CPU_BACKEND_H
#define GCC_RUNTIME_CPU_CPU_BACKEND_H

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU backend: one static table, valid for the life of the process. */
const gcc_device_backend *gcc_cpu_backend(void);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_CPU_BACKEND_H */
