/* model_file.c - loading a model file of any supported format
 * (onnx/model_file.h). */
#include "onnx/model_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "graph/loader.h"
#include "graph/util.h"

/* deploy/bundle.h's GCC_BUNDLE_MAGIC (this layer does not include the
 * runtime) */
static const uint8_t kBundleMagic[8] = {'G', 'C', 'C', 'X', '\r', '\n', 0x1a, '\n'};

const char *gcc_model_format_name(gcc_model_format f) {
  switch (f) {
  case GCC_MODEL_FORMAT_ONNX: return "ONNX";
  case GCC_MODEL_FORMAT_BUNDLE: return "gccx bundle";
  default: return "gcc-train";
  }
}

gcc_model_format gcc_model_sniff(const uint8_t *bytes, size_t size) {
  if (size >= sizeof kBundleMagic && memcmp(bytes, kBundleMagic, sizeof kBundleMagic) == 0)
    return GCC_MODEL_FORMAT_BUNDLE;
  if (gcc_onnx_sniff(bytes, size))
    return GCC_MODEL_FORMAT_ONNX;
  return GCC_MODEL_FORMAT_GCC;
}

gcc_status gcc_model_open_memory_with(const uint8_t *bytes, size_t size, const char *source,
                                      const gcc_onnx_options *onnx, gcc_graph **out,
                                      gcc_model_info *info, gcc_diag *d) {
  *out = NULL;
  gcc_model_info local;
  if (!info)
    info = &local;
  memset(info, 0, sizeof *info);
  const char *src = source ? source : "<memory>";
  info->format = gcc_model_sniff(bytes, size);
  switch (info->format) {
  case GCC_MODEL_FORMAT_BUNDLE:
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: a .gccx deployment bundle, not a model: run it with gcc-run or the "
                        "C API",
                        src);
  case GCC_MODEL_FORMAT_ONNX:
    return gcc_onnx_import(bytes, size, source, onnx, out, &info->onnx, d);
  default: return gcc_model_parse(bytes, size, src, out, d);
  }
}

gcc_status gcc_model_open_memory(const uint8_t *bytes, size_t size, const char *source,
                                 gcc_graph **out, gcc_model_info *info, gcc_diag *d) {
  return gcc_model_open_memory_with(bytes, size, source, NULL, out, info, d);
}

gcc_status gcc_model_open_with(const char *path, const gcc_onnx_options *onnx, gcc_graph **out,
                               gcc_model_info *info, gcc_diag *d) {
  *out = NULL;
  uint8_t *buf;
  size_t size;
  GCC_TRY(gcc_read_file(path, GCC_MODEL_MAX_BYTES, &buf, &size, d));
  gcc_status s = gcc_model_open_memory_with(buf, size, path, onnx, out, info, d);
  free(buf);
  return s;
}

gcc_status gcc_model_open(const char *path, gcc_graph **out, gcc_model_info *info, gcc_diag *d) {
  return gcc_model_open_with(path, NULL, out, info, d);
}
