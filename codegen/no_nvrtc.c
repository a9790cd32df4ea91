/*
 * no_nvrtc.c - NVRTC in a CPU-only build (bazel --config=cpu_only, no CUDA
 * toolkit): the functions of nvrtc.h, each refusing with the reason, so
 * that --dump-kernels and --export's cubins fail with a message instead of
 * the build failing. gcc_nvrtc_options is the real one (the options do not
 * need NVRTC).
 */
#include "codegen/nvrtc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_NVRTC "this gcc-train was built without CUDA (bazel --config=cpu_only): no NVRTC"

gcc_status gcc_nvrtc_version(int *major, int *minor) {
  if (major)
    *major = 0;
  if (minor)
    *minor = 0;
  return GCC_ERR_UNSUPPORTED;
}

gcc_status gcc_nvrtc_check_arch(int sm, gcc_diag *d) {
  return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "sm_%d: %s", sm, NO_NVRTC);
}

void gcc_nvrtc_options(int sm, gcc_nvrtc_opts *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->arch, sizeof o->arch, "-arch=sm_%d", sm);
  o->v[o->n++] = o->arch;
  o->v[o->n++] = "--std=c++17";
  o->v[o->n++] = "-lineinfo";
  o->v[o->n++] = "--fmad=false";
  const char *cuda = getenv("CUDA_HOME");
  snprintf(o->include, sizeof o->include, "--include-path=%s/include",
           cuda && *cuda ? cuda : "/usr/local/cuda");
  o->v[o->n++] = o->include;
}

gcc_status gcc_nvrtc_compile(const char *source, const char *program_name, int sm,
                             gcc_nvrtc_output *out, gcc_diag *d) {
  (void)source;
  if (out)
    memset(out, 0, sizeof *out);
  return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s for sm_%d: %s",
                      program_name && *program_name ? program_name : GCC_NVRTC_DEFAULT_PROGRAM_NAME,
                      sm, NO_NVRTC);
}
