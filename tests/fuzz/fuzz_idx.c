/* libFuzzer harness: IDX files, gzip-compressed or plain (gcc_idx_read,
 * datasets/dataset.h), as images (3 dimensions) and as labels (1). The input
 * is handed over as a memory file (memfd), which the reader opens by path.
 * Built and run by tools/fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "datasets/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz.idx", MFD_CLOEXEC);
  if (fd < 0)
    return 0;
  if (size == 0 || write(fd, data, size) == (ssize_t)size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    for (int ndim = 1; ndim <= 3; ndim += 2) {
      int64_t dims[4];
      uint8_t *out = NULL;
      gcc_diag d = {0};
      if (gcc_idx_read(path, ndim, dims, &out, &d) == GCC_OK)
        free(out);
    }
  }
  close(fd);
  return 0;
}
