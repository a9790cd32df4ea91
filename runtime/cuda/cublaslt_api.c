/* cublaslt_api.c - cuBLASLt loaded with dlopen on first use (cublaslt_api.h). */
#include "runtime/cuda/cublaslt_api.h"

#include <pthread.h>
#include <stdio.h>

#include "graph/dynlib.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static gcc_cublaslt_api api;
static int loaded;
static char why[1024]; /* the loader's error when !loaded */

static void load(void) {
  void *h = gcc_dlopen_cuda(GCC_CUBLASLT_SONAME, why, sizeof why);
  if (!h)
    return; /* why holds the reasons; gcc_cublaslt_load adds what to do */
#define GCC_CUBLASLT_RESOLVE(name) GCC_DLSYM_OR_RETURN(h, api, name, GCC_CUBLASLT_SONAME, why)
  GCC_CUBLASLT_FUNCTIONS(GCC_CUBLASLT_RESOLVE)
#undef GCC_CUBLASLT_RESOLVE
  loaded = 1;
}

gcc_status gcc_cublaslt_load(const gcc_cublaslt_api **out, gcc_diag *d) {
  *out = NULL;
  if (pthread_once(&once, load) != 0)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "pthread_once failed loading cuBLASLt");
  if (!loaded)
    return gcc_dlopen_error(d, "cuBLASLt", GCC_CUBLASLT_SONAME, why);
  *out = &api;
  return GCC_OK;
}

const char *gcc_cublaslt_status_name(cublasStatus_t s) {
  return loaded ? api.cublasLtGetStatusName(s) : "(cuBLASLt not loaded)";
}

const char *gcc_cublaslt_status_string(cublasStatus_t s) {
  return loaded ? api.cublasLtGetStatusString(s) : "(cuBLASLt not loaded)";
}
