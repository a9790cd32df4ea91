/* cublaslt_api.c - cuBLASLt loaded with dlopen on first use (cublaslt_api.h). */
#include "runtime/cuda/cublaslt_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#ifndef GCC_CUDA_LIB_DIR
#define GCC_CUDA_LIB_DIR "/usr/local/cuda/lib64"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static gcc_cublaslt_api api;
static int loaded;
static char why[1024]; /* the loader's error when !loaded */

/* In load(): dlsym's void * converts to the function's pointer type (POSIX) */
#define GCC_CUBLASLT_RESOLVE(name)                                                                 \
  api.name = (__typeof__(api.name))dlsym(h, #name);                                                \
  if (!api.name) {                                                                                 \
    snprintf(why, sizeof why,                                                                      \
             "%s has no %s (a cuBLASLt older than the %d.%d headers of this "                      \
             "build?)",                                                                            \
             GCC_CUBLASLT_SONAME, #name, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);                      \
    return;                                                                                        \
  }

static void load(void) {
  static const char *const paths[] = {GCC_CUBLASLT_SONAME,
                                      GCC_CUDA_LIB_DIR "/" GCC_CUBLASLT_SONAME};
  void *h = NULL;
  size_t at = 0;
  for (size_t i = 0; i < sizeof paths / sizeof paths[0] && !h; i++) {
    h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
    if (!h && at < sizeof why) {
      const char *e = dlerror();
      int n = snprintf(why + at, sizeof why - at, "%s%s", at ? "; " : "", e ? e : paths[i]);
      at += n > 0 ? (size_t)n : 0;
    }
  }
  if (!h)
    return; /* why holds the reasons; gcc_cublaslt_load adds what to do */

  GCC_CUBLASLT_FUNCTIONS(GCC_CUBLASLT_RESOLVE)
#undef GCC_CUBLASLT_RESOLVE
  loaded = 1;
}

gcc_status gcc_cublaslt_load(const gcc_cublaslt_api **out, gcc_diag *d) {
  *out = NULL;
  if (pthread_once(&once, load) != 0)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "pthread_once failed loading cuBLASLt");
  if (!loaded)
    return gcc_diag_set(d, GCC_ERR_DEVICE,
                        "cuBLASLt could not be loaded: %s (install CUDA's cuBLAS %d, or add the "
                        "folder of %s to LD_LIBRARY_PATH)",
                        why, CUBLAS_VER_MAJOR, GCC_CUBLASLT_SONAME);
  *out = &api;
  return GCC_OK;
}

const char *gcc_cublaslt_status_name(cublasStatus_t s) {
  return loaded ? api.cublasLtGetStatusName(s) : "(cuBLASLt not loaded)";
}

const char *gcc_cublaslt_status_string(cublasStatus_t s) {
  return loaded ? api.cublasLtGetStatusString(s) : "(cuBLASLt not loaded)";
}
