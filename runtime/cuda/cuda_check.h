/*
 * cuda_check.h - status checks for CUDA runtime, cuBLAS(Lt) and NVRTC calls.
 *
 * Every call into a CUDA library goes through one of these macros. On
 * failure they fill the gcc_diag `d` in scope with GCC_ERR_DEVICE (or
 * GCC_ERR_OUT_OF_MEMORY for an allocation that ran out) and a message naming
 * the call as written, the library's error name and string, and the file and
 * line, then return that status from the enclosing function: errors travel
 * up as statuses, nothing exits (STYLE.md: llm.c's cudaCheck, as a status).
 */
#ifndef GCC_RUNTIME_CUDA_CHECK_H
#define GCC_RUNTIME_CUDA_CHECK_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "graph/status.h"

#define GCC_CUDA_CHECK(call)                                                                       \
  do {                                                                                             \
    cudaError_t gcc_ce_ = (call);                                                                  \
    if (gcc_ce_ != cudaSuccess)                                                                    \
      return gcc_diag_set(                                                                         \
          d, gcc_ce_ == cudaErrorMemoryAllocation ? GCC_ERR_OUT_OF_MEMORY : GCC_ERR_DEVICE,        \
          "%s failed: %s (%s) at %s:%d", #call, cudaGetErrorName(gcc_ce_),                         \
          cudaGetErrorString(gcc_ce_), __FILE__, __LINE__);                                        \
  } while (0)

/* For cuBLASLt calls through the loaded table (cublaslt_api.h, which the
 * file that uses this macro includes): the status names come from it. */
#define GCC_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                             \
    cublasStatus_t gcc_bs_ = (call);                                                               \
    if (gcc_bs_ != CUBLAS_STATUS_SUCCESS)                                                          \
      return gcc_diag_set(                                                                         \
          d, gcc_bs_ == CUBLAS_STATUS_ALLOC_FAILED ? GCC_ERR_OUT_OF_MEMORY : GCC_ERR_DEVICE,       \
          "%s failed: %s (%s) at %s:%d", #call, gcc_cublaslt_status_name(gcc_bs_),                 \
          gcc_cublaslt_status_string(gcc_bs_), __FILE__, __LINE__);                                \
  } while (0)

#endif /* GCC_RUNTIME_CUDA_CHECK_H */
