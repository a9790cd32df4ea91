/* dynlib.c - CUDA libraries loaded on first use (dynlib.h). */
#include "graph/dynlib.h"

void *gcc_dlopen_cuda(const char *soname, char *why, size_t why_size) {
  char full[4096];
  snprintf(full, sizeof full, "%s/%s", GCC_CUDA_LIB_DIR, soname);
  const char *paths[2] = {soname, full};
  size_t at = 0;
  if (why_size)
    why[0] = '\0';
  for (int i = 0; i < 2; i++) {
    void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
    if (h)
      return h;
    const char *e = dlerror();
    if (at < why_size) {
      int w = snprintf(why + at, why_size - at, "%s%s", at ? "; " : "", e ? e : paths[i]);
      at += w > 0 ? (size_t)w : 0;
    }
  }
  return NULL;
}

gcc_status gcc_dlopen_error(gcc_diag *d, const char *what, const char *soname, const char *why) {
  return gcc_diag_set(d, GCC_ERR_DEVICE,
                      "%s could not be loaded: %s (install CUDA's %s, or add the folder of %s to "
                      "LD_LIBRARY_PATH)",
                      what, why, what, soname);
}
