/* libFuzzer harness: ONNX ModelProto bytes through the importer's every
 * check (gcc_onnx_import, onnx/import.h): protobuf-c parsing, opset and
 * domain checks, initializers, folding, op mapping and shape inference.
 * Seeded with the repository's .onnx models. External data is refused (no
 * base folder), so no input reaches the file system. Built and run by
 * tools/fuzz.sh. */
#include <stddef.h>
#include <stdint.h>

#include "onnx/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gcc_graph *g = NULL;
  gcc_diag d = {0};
  gcc_onnx_options o = {0};
  if (gcc_onnx_import(data, size, "fuzz.onnx", &o, &g, NULL, &d) == GCC_OK)
    gcc_graph_free(g);
  return 0;
}
