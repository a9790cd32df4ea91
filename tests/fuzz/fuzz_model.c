/* libFuzzer harness: graph.proto models through the loader's every check
 * (gcc_model_parse, graph/loader.h). Built and run by tools/fuzz.sh. */
#include <stddef.h>
#include <stdint.h>

#include "graph/loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gcc_graph *g = NULL;
  gcc_diag d = {0};
  if (gcc_model_parse(data, size, "fuzz.pb", &g, &d) == GCC_OK)
    gcc_graph_free(g);
  return 0;
}
