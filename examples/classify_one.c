/*
 * classify_one: classifies one image of an IDX file with an exported
 * bundle, through the C API (deploy/gcc_api.h).
 *
 *   classify_one BUNDLE.gccx IMAGES.idx[.gz] INDEX
 *
 * Prints "image INDEX: class K (probability P)" and the ten probabilities.
 * Exit status: 0 ok, 1 failure (the message says which), 2 bad arguments.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/dataset.h"
#include "deploy/gcc_api.h"
#include "graph/util.h"

int main(int argc, char **argv) {
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY"); /* bazel run */
  if (bwd && chdir(bwd) != 0)
    fprintf(stderr, "classify_one: warning: cannot enter %s: %s\n", bwd, strerror(errno));
  if (argc != 4) {
    fprintf(stderr, "usage: classify_one BUNDLE.gccx IMAGES.idx[.gz] INDEX\n");
    return 2;
  }
  int64_t index;
  if (!gcc_parse_i64(argv[3], 0, INT64_MAX, &index)) {
    fprintf(stderr, "classify_one: INDEX '%s' is not an integer >= 0\n", argv[3]);
    return 2;
  }
  gcc_diag d = {0};
  int64_t dims[4];
  uint8_t *images = NULL;
  if (gcc_idx_read(argv[2], 3, dims, &images, &d) != GCC_OK) {
    fprintf(stderr, "classify_one: %s\n", d.msg);
    return 1;
  }
  if (index >= dims[0]) {
    fprintf(stderr, "classify_one: %s has %" PRId64 " images; index %lld is out of range\n",
            argv[2], dims[0], (long long)index);
    free(images);
    return 1;
  }
  gccx_bundle *b = NULL;
  gccx_session *s = NULL;
  gccx_session_options o = {"cpu", 1, 1}; /* the CPU, one thread, one image per run */
  const float *probs = NULL, *logits = NULL;
  int64_t rows = 0, classes = 0;
  int rc = 1;
  if (gccx_bundle_open(argv[1], &b, &d) == GCC_OK &&
      gccx_session_create(b, &o, &s, NULL, 0, &d) == GCC_OK &&
      gccx_set_input_images(s, images + index * dims[1] * dims[2], 1, &d) == GCC_OK &&
      gccx_run(s, &d) == GCC_OK &&
      gccx_get_output(s, "logits", &logits, &rows, &classes, &d) == GCC_OK &&
      gccx_get_output(s, "probabilities", &probs, &rows, &classes, &d) == GCC_OK) {
    int64_t best = 0; /* argmax of the logits, the first on ties (as gcc-run) */
    for (int64_t j = 1; j < classes; j++)
      if (logits[j] > logits[best])
        best = j;
    printf("image %lld: class %" PRId64 " (probability %.4f)\n", (long long)index, best,
           (double)probs[best]);
    for (int64_t j = 0; j < classes; j++)
      printf("  %" PRId64 ": %.6f\n", j, (double)probs[j]);
    rc = 0;
  } else {
    fprintf(stderr, "classify_one: %s\n", d.msg);
  }
  gccx_session_destroy(&s);
  gccx_bundle_close(&b);
  free(images);
  return rc;
}
