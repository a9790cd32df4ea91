/*
 * cuda_backend.h - the CUDA implementation of gcc_device_backend
 * (runtime/backend.h): CUDA runtime API only (never libcuda), two
 * streams, cuBLASLt GEMMs with epilogues, NVRTC cubins loaded with
 * cudaLibraryLoadData / cudaLibraryGetKernel and launched with
 * cudaLaunchKernel, CUDA Graphs captured from the compute stream.
 *
 *  - Streams: a compute stream and a copy stream, both non-blocking (they
 *    do not synchronise with the legacy default stream); events (timing
 *    disabled) order them, created on first use.
 *  - GEMMs: cublasLtMatmul in float32 with CUBLAS_COMPUTE_32F (no TF32, as
 *    PyTorch's default torch.backends.cuda.matmul.allow_tf32 = False), the
 *    epilogue from gemm_map.h, a 32 MiB workspace allocated once (so that a
 *    GEMM can be captured into a CUDA Graph). Each GEMM of a plan is
 *    prepared when the plan is built (gemm_prepare): descriptor, layouts,
 *    the bias and aux pointers, and the heuristic's algorithm, asked with
 *    those pointers set and CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}
 *    _BYTES from the operands' real alignments (not the default 256: the
 *    persistent arena is 64-byte aligned); the plan owns the handle. No
 *    algorithm for an epilogue is GCC_ERR_UNSUPPORTED (the plan falls back
 *    to the plain GEMM and a generated epilogue kernel).
 *  - cuDNN: one handle and a per-shape cache of descriptors and
 *    algorithms (runtime/cuda/cudnn_conv.h: timed with
 *    cudnnFindConvolution*Algorithm when a plan is built, cached on disk,
 *    deterministic unless --no-deterministic, float32 FMA); each
 *    plan prepares its convolutions when it is built (library_prepare) and
 *    owns the workspace they need, so no graph refers to a workspace this
 *    backend could free.
 *  - Kernels: the image the runner chose by the device's compute
 *    capability (a cubin, or PTX the driver compiles), every kernel forced
 *    onto the device at load (cudaFuncGetAttributes) so that lazy module
 *    loading cannot defer a mismatch to the first launch.
 *  - CUDA Graphs: captured from the compute stream, instantiated, and
 *    handed to the plan, which launches and destroys them; the backend
 *    keeps none.
 *  - Every call is checked (runtime/cuda/cuda_check.h): errors are statuses with
 *    the call, the error name and string, file and line.
 * No GPU is needed to build or link this file; creating a backend without
 * one fails with GCC_ERR_DEVICE and the reason (gcc_cuda_device_count).
 */
#ifndef GCC_RUNTIME_CUDA_BACKEND_H
#define GCC_RUNTIME_CUDA_BACKEND_H

#include <stdio.h>

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_cuda_backend gcc_cuda_backend;

/* Bytes of the cuBLASLt workspace (32 MiB: NVIDIA's recommendation for Hopper). */
#define GCC_CUBLASLT_WORKSPACE (32u << 20)

/* Opens CUDA device `ordinal` (after CUDA_VISIBLE_DEVICES): sets it
 * current, reads its compute capability (the table's `arch`), creates the
 * streams, the cuBLASLt handle and the workspace.
 * Errors: GCC_ERR_DEVICE naming the failing call (no driver, no device,
 * ordinal out of range); GCC_ERR_OUT_OF_MEMORY for the workspace. */
gcc_status gcc_cuda_backend_create(int ordinal, gcc_cuda_backend **out, gcc_diag *d);

/* The function table for gcc_plan_config.device / gcc_session_options. Valid
 * until gcc_cuda_backend_destroy. */
const gcc_device_backend *gcc_cuda_backend_table(gcc_cuda_backend *b);

/* Synchronises, then releases streams, events, the cuDNN handle and
 * descriptor cache, the cuBLASLt workspace and handle. Accepts NULL. Plans
 * and sessions using the backend must be freed first (they own their
 * graphs, prepared GEMMs and workspaces). */
void gcc_cuda_backend_destroy(gcc_cuda_backend *b);

/* The disk cache of cuDNN algorithm choices (runtime/cuda/cudnn_conv.h
 * gcc_cudnn_conv_choose_cached): `dir` (copied; NULL: the kernel cache's
 * directory, the default) and use_cache (0: --no-kernel-cache, every shape
 * is timed and nothing written; 1 by default). Applies to the convolutions
 * prepared afterwards. Errors: GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_cuda_backend_set_algo_cache(gcc_cuda_backend *b, const char *dir, int use_cache,
                                           gcc_diag *d);

/* Writes to `f` the cuDNN algorithm chosen for each convolution shape the
 * backend's plans prepared (per direction: algorithm, math type,
 * workspace, measured time and the fastest non-deterministic candidate's),
 * how many shapes were timed and read from the choice cache, the total
 * cost of --deterministic where every shape was timed (else that it is
 * unmeasured), and the last choice-cache note. Nothing when no
 * convolution was prepared. */
void gcc_cuda_backend_conv_report(const gcc_cuda_backend *b, FILE *f);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CUDA_BACKEND_H */
