/*
 * cublaslt_api.h - cuBLASLt, loaded when the first CUDA backend starts.
 *
 * The programs do not link libcublasLt: loading it costs about 150 MB of
 * resident memory before main() (measured: 1.2 -> 153 MB for the dlopen
 * alone on the CUDA 13.0 toolkit), which a CPU run, `gcc-run --help` or an
 * inference on the CPU never use. The CUDA backend (cuda_backend.c) loads
 * it with gcc_cublaslt_load() when it is created, as ONNX Runtime loads its
 * CUDA execution provider only when a session asks for one. The library
 * stays loaded for the rest of the process.
 *
 * Every member is the cuBLASLt function of the same name, typed from
 * cublasLt.h (__typeof__), so a call through the table is checked as a
 * direct call would be. The header major version is the library's
 * (libcublasLt.so.<CUBLAS_VER_MAJOR>).
 */
#ifndef GCC_RUNTIME_CUDA_CUBLASLT_API_H
#define GCC_RUNTIME_CUDA_CUBLASLT_API_H

#include <cublasLt.h>

#ifdef __cplusplus
extern "C" { /* cublasLt.h above is C++-aware; graph/status.h and ours are C */
#endif

#include "graph/status.h"

/* X(name): every cuBLASLt function the CUDA backend calls. */
#define GCC_CUBLASLT_FUNCTIONS(X)                                                                  \
  X(cublasLtGetStatusName)                                                                         \
  X(cublasLtGetStatusString)                                                                       \
  X(cublasLtCreate)                                                                                \
  X(cublasLtDestroy)                                                                               \
  X(cublasLtMatmul)                                                                                \
  X(cublasLtMatmulAlgoGetHeuristic)                                                                \
  X(cublasLtMatmulDescCreate)                                                                      \
  X(cublasLtMatmulDescDestroy)                                                                     \
  X(cublasLtMatmulDescSetAttribute)                                                                \
  X(cublasLtMatmulPreferenceCreate)                                                                \
  X(cublasLtMatmulPreferenceDestroy)                                                               \
  X(cublasLtMatmulPreferenceSetAttribute)                                                          \
  X(cublasLtMatrixLayoutCreate)                                                                    \
  X(cublasLtMatrixLayoutDestroy)

typedef struct gcc_cublaslt_api {
#define GCC_CUBLASLT_MEMBER(name) __typeof__(name) *name;
  GCC_CUBLASLT_FUNCTIONS(GCC_CUBLASLT_MEMBER)
#undef GCC_CUBLASLT_MEMBER
} gcc_cublaslt_api;

/* The library file the loader opens first: "libcublasLt.so.13" for the
 * CUDA 13 headers. */
#define GCC_CUBLASLT_SONAME_(major)  "libcublasLt.so." #major
#define GCC_CUBLASLT_SONAME_X(major) GCC_CUBLASLT_SONAME_(major)
#define GCC_CUBLASLT_SONAME          GCC_CUBLASLT_SONAME_X(CUBLAS_VER_MAJOR)

/* Loads cuBLASLt once per process (thread-safe) and sets *out to its
 * function table; later calls return the same table, or the same error.
 * The library is looked up as the dynamic loader does (LD_LIBRARY_PATH, the
 * program's run path, the ld.so cache), then in the toolkit's folder this
 * build was made with (GCC_CUDA_LIB_DIR, /usr/local/cuda/lib64).
 * Errors: GCC_ERR_DEVICE, *out NULL, when neither file loads (the message
 * gives both paths and the loader's reasons, and says to install cuBLAS or
 * set LD_LIBRARY_PATH) or a function is missing from the library (its name
 * and the file: a cuBLASLt older than this build's headers). */
gcc_status gcc_cublaslt_load(const gcc_cublaslt_api **out, gcc_diag *d);

/* cublasLtGetStatusName / cublasLtGetStatusString of `s` once the library is
 * loaded; "(cuBLASLt not loaded)" before (no cuBLASLt call, and so no
 * cuBLASLt status, exists before it is loaded). */
const char *gcc_cublaslt_status_name(cublasStatus_t s);
const char *gcc_cublaslt_status_string(cublasStatus_t s);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CUDA_CUBLASLT_API_H */
