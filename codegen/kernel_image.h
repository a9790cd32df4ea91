/*
 * kernel_image.h - a plan's generated kernels compiled for a GPU: the PTX
 * and the cubin NVRTC made (codegen/nvrtc.h), or that a .gccx bundle
 * carries. A plain struct, so that code that only loads images (the plan
 * runner, the CUDA backend, gcc-run) needs no NVRTC.
 */
#ifndef GCC_CODEGEN_KERNEL_IMAGE_H
#define GCC_CODEGEN_KERNEL_IMAGE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one compilation produced. Zero-initialise it; every pointer in it is
 * owned by the struct (malloc'ed) and released by gcc_nvrtc_output_free. */
typedef struct gcc_nvrtc_output {
  char *ptx;            /* PTX text for compute_XX, NUL-terminated */
  size_t ptx_size;      /* strlen(ptx): bytes without the terminating NUL */
  void *cubin;          /* ELF cubin for sm_XX */
  size_t cubin_size;    /* bytes */
  char *log;            /* NVRTC's program log (warnings), NUL-terminated, maybe
                        ""; NULL when the output came from the kernel cache.
                        After a compile error it holds the full log. */
  double seconds;       /* wall time: gcc_nvrtc_compile: the NVRTC compilation;
                        gcc_kernel_cache_compile: the whole call (lookup,
                        compile on a miss, store) */
  char cache_note[512]; /* gcc_kernel_cache_compile only: "" when the cache
                           behaved normally (a hit, or a miss then stored,
                           or use_cache == 0); else one line saying why it
                           did not (unusable directory, failed write, corrupt
                           entry removed and rebuilt). Never an error. */
} gcc_nvrtc_output;

/* Frees what `out` owns and zeroes it. Accepts NULL and a zeroed struct;
 * safe to call twice. */
void gcc_nvrtc_output_free(gcc_nvrtc_output *out);

#ifdef __cplusplus
}
#endif

#endif /* GCC_CODEGEN_KERNEL_IMAGE_H */
