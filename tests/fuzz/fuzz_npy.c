/* libFuzzer harness: float32 .npy arrays (gcc_npy_parse_f32,
 * datasets/npy.h), and, for an input that starts as a zip archive does
 * ("PK"), the .npz data set reader (gcc_npy_dataset_load of the training
 * pair x_train.npy / y_train.npy: members, duplicated names, compression
 * methods, each array's header). The archive is written to a temporary
 * file under $TMPDIR (tools/fuzz.sh points it at the harness's folder).
 * Built and run by tools/fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "datasets/dataset.h"
#include "datasets/npy.h"

static void load_npz(const uint8_t *data, size_t size) {
  const char *dir = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/fuzz_npz_XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0)
    return;
  int ok = write(fd, data, size) == (ssize_t)size;
  close(fd);
  gcc_dataset ds;
  gcc_diag d = {0};
  if (ok && gcc_npy_dataset_load(path, 1, &ds, &d) == GCC_OK)
    gcc_dataset_free(&ds);
  unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
    load_npz(data, size);
    return 0;
  }
  gcc_shape shape;
  float *out = NULL;
  gcc_diag d = {0};
  if (gcc_npy_parse_f32(data, size, "fuzz.npy", &shape, &out, &d) == GCC_OK)
    free(out);
  return 0;
}
