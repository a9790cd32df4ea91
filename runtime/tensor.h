/*
 * tensor.h - a bound tensor: a value of a compiled graph with the address
 * of its storage (host or device memory, as the plan runner bound it).
 */
#ifndef GCC_RUNTIME_TENSOR_H
#define GCC_RUNTIME_TENSOR_H

#include <stdint.h>

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dtype, shape (row-major), element count and the storage address. */
typedef struct gcc_tensor {
  gcc_dtype dtype;
  gcc_shape shape;
  int64_t numel;
  void *data;
} gcc_tensor;

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_TENSOR_H */
