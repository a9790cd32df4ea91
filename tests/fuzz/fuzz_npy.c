/* libFuzzer harness: float32 .npy arrays (gcc_npy_parse_f32,
 * datasets/npy.h). Built and run by tools/fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "datasets/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gcc_shape shape;
  float *out = NULL;
  gcc_diag d = {0};
  if (gcc_npy_parse_f32(data, size, "fuzz.npy", &shape, &out, &d) == GCC_OK)
    free(out);
  return 0;
}
