/*
 * loader.h - reading and writing models in the .pb format (graph/graph.proto,
 * through protobuf-c).
 *
 * Loading validates everything a later stage relies on, so that a bad file
 * gets one clear message naming the file and the node, value or field, and
 * never a crash:
 *   - not a protobuf / truncated bytes (GCC_ERR_PARSE)
 *   - format_version other than 1 (GCC_ERR_UNSUPPORTED)
 *   - unknown op_type, wrong arity, missing / unknown / mistyped attribute,
 *     undefined or duplicated value name, a cycle (GCC_ERR_INVALID_GRAPH)
 *   - dims <= 0 (but the batch dim -1 of an input), element count overflow,
 *     raw_data size != numel * dtype size (GCC_ERR_INVALID_GRAPH)
 *   - dtype other than float32 / int64 / int32 (GCC_ERR_UNSUPPORTED)
 *   - incompatible shapes found by shape inference (GCC_ERR_SHAPE, naming the
 *     node and both shapes)
 *   - a training spec naming values the graph lacks (GCC_ERR_INVALID_GRAPH)
 */
#ifndef GCC_GRAPH_LOADER_H
#define GCC_GRAPH_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCC_FORMAT_VERSION 1

/* The largest model file gcc_model_load reads: protobuf messages stop at
 * 2 GiB, and a model is refused by its size before it is read. */
#define GCC_MODEL_MAX_BYTES ((size_t)1 << 30)

/* Parses `size` bytes of a serialized Model. `source` names them in
 * messages (a path). On success *out is a topologically sorted, linked,
 * shape-checked graph (batch dim still symbolic) that the caller frees with
 * gcc_graph_free. */
gcc_status gcc_model_parse(const uint8_t *bytes, size_t size, const char *source, gcc_graph **out,
                           gcc_diag *d);

/* Reads and parses the file at `path` (GCC_ERR_IO if it cannot be read). */
gcc_status gcc_model_load(const char *path, gcc_graph **out, gcc_diag *d);

/* Serializes `g` (nodes, initializers with their current data, inputs,
 * outputs, training spec) into a malloc'ed buffer the caller frees. Only
 * values of kind PARAM and CONST that are initializers are written (pass-made
 * gradients and state are not part of a model). */
gcc_status gcc_model_serialize(const gcc_graph *g, uint8_t **bytes, size_t *size, gcc_diag *d);

/* Writes `g` to `path` as graph/outfile.h writes every output: a symbolic
 * link is followed; a regular file is replaced atomically (a temporary file
 * in the same directory, fsync, rename, fsync of the directory) keeping its
 * mode and owner, a new file gets 0666 less the umask; a character device or
 * FIFO is written directly. On any failure the temporary is removed and
 * `path` is untouched. GCC_ERR_IO names the path and the system error. */
gcc_status gcc_model_save(const gcc_graph *g, const char *path, gcc_diag *d);

/* Writes `size` bytes to `path` as gcc_model_save does. */
gcc_status gcc_write_file_atomic(const char *path, const void *bytes, size_t size, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_GRAPH_LOADER_H */
