/*
 * dynlib.h - libraries loaded on first use with dlopen: the CUDA libraries
 * a run on the CPU never calls (cuBLASLt in runtime/cuda/cublaslt_api.c,
 * NVRTC in codegen/nvrtc.c), so that a process pays for their resident
 * memory only when it uses a GPU.
 */
#ifndef GCC_GRAPH_DYNLIB_H
#define GCC_GRAPH_DYNLIB_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#include "graph/status.h"

/* The CUDA toolkit's library folder this build was made with (the @cuda
 * repository's path in WORKSPACE). */
#define GCC_CUDA_LIB_DIR "/usr/local/cuda/lib64"

/* dlopen (RTLD_NOW | RTLD_LOCAL) of `soname` (LD_LIBRARY_PATH, the calling
 * program's run path, the ld.so cache), else of GCC_CUDA_LIB_DIR/soname:
 * the handle, which the callers never close; or NULL, with the loader's
 * reason for each path ("; "-separated, truncated to why_size) in `why`. */
void *gcc_dlopen_cuda(const char *soname, char *why, size_t why_size);

/* GCC_ERR_DEVICE: "<what> could not be loaded: <why> (install CUDA's
 * <what>, or add the folder of <soname> to LD_LIBRARY_PATH)". */
gcc_status gcc_dlopen_error(gcc_diag *d, const char *what, const char *soname, const char *why);

/* In a void function that fills a table of typed function pointers from
 * handle h: table.name = the library's `name` (dlsym's void * converted to
 * the member's type, as POSIX allows), or else `why` (a char array) says
 * which function `file` lacks and the function returns. */
#define GCC_DLSYM_OR_RETURN(h, table, name, file, why)                                             \
  table.name = (__typeof__(table.name))dlsym(h, #name);                                            \
  if (!table.name) {                                                                               \
    snprintf(why, sizeof why, "%s has no %s (older than this build's headers?)", file, #name);     \
    return;                                                                                        \
  }

#endif /* GCC_GRAPH_DYNLIB_H */
