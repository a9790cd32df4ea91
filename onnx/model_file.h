/*
 * model_file.h - the one entry point that loads a model file of any format
 * gcc-train reads, recognised by its content (never its extension):
 *
 *   gcc-train model (graph/graph.proto Model)  -> graph/loader.h
 *   ONNX ModelProto                            -> onnx/import.h
 *
 * A .gccx bundle is recognised too and refused with a message pointing at
 * gcc-run and the C API, which read bundles (deploy/gcc_api.h).
 */
#ifndef GCC_ONNX_MODEL_FILE_H
#define GCC_ONNX_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"
#include "onnx/import.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gcc_model_format {
  GCC_MODEL_FORMAT_GCC = 0, /* graph.proto Model (anything not recognised as another) */
  GCC_MODEL_FORMAT_ONNX,    /* ONNX ModelProto */
  GCC_MODEL_FORMAT_BUNDLE,  /* .gccx deployment bundle */
} gcc_model_format;

/* "gcc-train", "ONNX", "gccx bundle". */
const char *gcc_model_format_name(gcc_model_format f);

/* The format of `size` bytes: the bundle magic, else an ONNX ModelProto by
 * gcc_onnx_sniff, else a gcc-train model (whose parser explains what is
 * wrong with anything else). */
gcc_model_format gcc_model_sniff(const uint8_t *bytes, size_t size);

/* What a load found. */
typedef struct gcc_model_info {
  gcc_model_format format;
  gcc_onnx_report onnx; /* for an ONNX model: what the import did */
} gcc_model_info;

/* Parses `size` bytes of a model of either format (`source` names it in
 * messages and, for ONNX, gives the folder of external data). On success
 * *out is as gcc_model_parse or gcc_onnx_import leave it (topologically
 * sorted, linked, shapes checked, batch symbolic); `info` may be NULL.
 * Errors: those of gcc_model_parse and gcc_onnx_import; GCC_ERR_INVALID_GRAPH
 * for a bundle ("a .gccx bundle, not a model: ..."). */
gcc_status gcc_model_open_memory(const uint8_t *bytes, size_t size, const char *source,
                                 gcc_graph **out, gcc_model_info *info, gcc_diag *d);

/* Reads the file at `path` (GCC_ERR_IO naming it when it cannot be read)
 * and parses it as gcc_model_open_memory. */
gcc_status gcc_model_open(const char *path, gcc_graph **out, gcc_model_info *info, gcc_diag *d);

/* The same with the options of an ONNX import (`onnx` may be NULL; a
 * gcc-train model ignores them): gcc-train and gcc-import pass
 * train = 1 when a recipe makes the model trainable, so that
 * BatchNormalization trains as nn.BatchNorm2d instead of being folded into
 * the Conv before it (onnx/import.h). The report says which was done
 * (info->onnx.n_bn_train, n_bn_folded). */
gcc_status gcc_model_open_with(const char *path, const gcc_onnx_options *onnx, gcc_graph **out,
                               gcc_model_info *info, gcc_diag *d);
gcc_status gcc_model_open_memory_with(const uint8_t *bytes, size_t size, const char *source,
                                      const gcc_onnx_options *onnx, gcc_graph **out,
                                      gcc_model_info *info, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_ONNX_MODEL_FILE_H */
