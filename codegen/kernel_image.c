/* kernel_image.c - freeing a gcc_nvrtc_output (kernel_image.h). */
#include "codegen/kernel_image.h"

#include <stdlib.h>
#include <string.h>

void gcc_nvrtc_output_free(gcc_nvrtc_output *out) {
  if (!out)
    return;
  free(out->ptx);
  free(out->cubin);
  free(out->log);
  memset(out, 0, sizeof *out);
}
