/* libFuzzer harness: CIFAR-10 binary batches (gcc_cifar10_load,
 * datasets/dataset.h): the input is the test batch of a folder of its own.
 * Built and run by tools/fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "datasets/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[4096];
  if (!dir[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gcc_fuzz_cifar_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
      abort();
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/test_batch.bin", dir);
  FILE *f = fopen(path, "wb");
  if (!f)
    abort();
  if (size)
    fwrite(data, 1, size, f);
  fclose(f);
  gcc_dataset ds = {0};
  gcc_diag d = {0};
  if (gcc_cifar10_load(dir, 0, &ds, &d) == GCC_OK)
    gcc_dataset_free(&ds);
  return 0;
}
