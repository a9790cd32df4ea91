/*
 * nvrtc.h - compiles one generated CUDA C translation unit (all kernels of a
 * plan, codegen/emit.h) with NVRTC to PTX and to a cubin.
 *
 * One NVRTC compilation with `-arch=sm_XX` yields both: the cubin (SASS for
 * sm_XX, what the CUDA device loads) and the PTX for compute_XX (byte for
 * byte what `-arch=compute_XX` gives; kept so that a newer GPU can JIT it).
 * Measured with NVRTC 13.0; gcc_nvrtc_compile checks that both are there.
 *
 * Options (gcc_nvrtc_options): `-arch=sm_XX --std=c++17 -lineinfo
 * --fmad=false --include-path=$CUDA_HOME/include` (CUDA_HOME unset:
 * /usr/local/cuda). No `--use_fast_math` and no FMA contraction: the
 * kernels must round like the CPU backend (which never fuses a*b+c). No
 * `-default-device` (generated helpers are declared __device__). The
 * include path is for cuda_fp16.h and cuda_bf16.h, which the kernels of a
 * mixed-precision plan (--precision bf16|fp16) include; float32 kernels
 * include no header.
 *
 * Shapes and dtypes: not applicable here (they are constants in the source).
 * Thread safety: every function may be called from several threads at once.
 * No GPU and no driver are needed.
 */
#ifndef GCC_CODEGEN_NVRTC_H
#define GCC_CODEGEN_NVRTC_H

#include <stddef.h>

#include "codegen/kernel_image.h"
#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The NVRTC program name used when the caller gives none. */
#define GCC_NVRTC_DEFAULT_PROGRAM_NAME "gcc_kernels.cu"

/* The NVRTC library's version (13, 0 for CUDA 13.0). Errors: none in
 * practice; GCC_ERR_INTERNAL if nvrtcVersion fails. Either pointer may be
 * NULL. */
gcc_status gcc_nvrtc_version(int *major, int *minor);

/* Checks that NVRTC can compile for sm_XX (sm = 10 * major + minor, e.g.
 * 80, 90). Errors: GCC_ERR_INVALID_ARGUMENT for an sm that is no
 * architecture number (<= 0 or > 1000); GCC_ERR_UNSUPPORTED naming sm_XX,
 * the NVRTC version and the supported list (older than the oldest supported
 * arch: "no longer supported"; newer than the newest: "too new"); GCC_ERR_
 * INTERNAL if NVRTC cannot list its archs. */
gcc_status gcc_nvrtc_check_arch(int sm, gcc_diag *d);

/* The NVRTC options gcc_nvrtc_compile passes for sm_XX (part of the kernel
 * cache key): opts.v[0 .. opts.n) ("-arch=sm_XX" lives in opts.arch, so
 * use the struct where it was filled; don't copy it). */
typedef struct gcc_nvrtc_opts {
  char arch[24];
  char include[300]; /* "--include-path=..." */
  const char *v[8];
  int n;
} gcc_nvrtc_opts;
void gcc_nvrtc_options(int sm, gcc_nvrtc_opts *opts);

/* Compiles `source` (NUL-terminated CUDA C++, all kernels of a plan) as one
 * NVRTC program named `program_name` (it names the fused nodes; it appears
 * in NVRTC's messages and in the PTX's .file directive; NULL or ""
 * gives GCC_NVRTC_DEFAULT_PROGRAM_NAME) for sm_XX, filling `out` (zeroed first) with the PTX,
 * the cubin, the log and the compile time.
 *
 * Ownership: on success the caller owns out's buffers (free them with
 * gcc_nvrtc_output_free). On failure out->ptx and out->cubin are NULL; out->log
 * may hold NVRTC's log: call gcc_nvrtc_output_free in every case.
 *
 * Errors:
 *  - GCC_ERR_INVALID_ARGUMENT: source or out is NULL, or sm is no arch number;
 *  - GCC_ERR_UNSUPPORTED: NVRTC cannot target sm_XX (gcc_nvrtc_check_arch);
 *  - GCC_ERR_INTERNAL: the source does not compile (generated code that does
 *    not compile is a gcc-train bug). The message names the program and the
 *    arch, quotes the source lines the log points at (with line numbers),
 *    then NVRTC's log (truncated to the diagnostic's size; out->log holds
 *    all of it). Also GCC_ERR_INTERNAL: any other NVRTC call failing
 *    (message: the call, its NVRTC error string, file:line) or NVRTC
 *    producing no PTX or no cubin;
 *  - GCC_ERR_OUT_OF_MEMORY: malloc or NVRTC ran out of memory. */
gcc_status gcc_nvrtc_compile(const char *source, const char *program_name, int sm,
                             gcc_nvrtc_output *out, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_CODEGEN_NVRTC_H */
