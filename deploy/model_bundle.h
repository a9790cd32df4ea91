/*
 * model_bundle.h - the inference graph of a model and the .gccx bundle
 * made from it without a compiler: the CPU plan, the graph and the
 * weights. gcc-run and the C API open a model file (an ONNX model or a
 * gcc-train .pb, recognised by content) as such a CPU-only bundle;
 * gcc-train --export (deploy/export.h) adds the CUDA kernels through
 * NVRTC.
 */
#ifndef GCC_DEPLOY_MODEL_BUNDLE_H
#define GCC_DEPLOY_MODEL_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "deploy/bundle.h"
#include "deploy/bundle_internal.h"
#include "graph/ir.h"
#include "runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the inference graph ------------------------------------------------ */

/* Builds the inference graph of a (trained) model: a copy of `model` with
 * everything that does not lead to the training spec's prediction removed
 * (the loss, the target input; backward and optimizer nodes are never part
 * of a model), the prediction exposed as graph output `logits` (an Identity
 * node when the prediction has another name) and `probabilities` =
 * Softmax(logits, axis 1) added as the second output. The copy has no
 * training spec. Errors: GCC_ERR_INVALID_GRAPH when the model has no
 * training spec or no prediction, the prediction is not float32 (N, C), or
 * the names `logits`/`probabilities` are taken by other values;
 * GCC_ERR_OUT_OF_MEMORY. A model without a training spec and with one
 * input and one output keeps its graph: an output of float32 (N, C) (an
 * imported ONNX classifier) is exposed as `logits` with `probabilities`
 * added as above; any other output (e.g. nn.TransformerEncoder's (N, T, C))
 * stays the one output, under its own name and without a softmax (a tensor
 * bundle, deploy/bundle.h format version 3), and must be float32 with the
 * batch as dim 0 (shape inference at batch 1 and 2 gives (1, ...) and
 * (2, ...) with the same other dims), else GCC_ERR_INVALID_GRAPH naming the
 * output, its dtype or both shapes; shape inference's errors otherwise. One
 * with one input and the outputs `logits` and `probabilities` (an
 * inference graph read back, such as the ONNX file gcc-train --export-onnx
 * writes) is kept as it is. */
gcc_status gcc_inference_graph(const gcc_graph *model, gcc_graph **out, gcc_diag *d);

/* What the inference graph `ig` (from gcc_inference_graph) is:
 * GCC_BUNDLE_CLASSIFIER when its outputs are `logits` and `probabilities`,
 * else GCC_BUNDLE_TENSOR (one output, as the model computes it). */
gcc_bundle_kind gcc_inference_graph_kind(const gcc_graph *ig);

/* ---- export ------------------------------------------------------------- */

typedef struct gcc_export_options {
  /* CUDA architectures to compile cubins for, as 10 * major + minor (80 =
   * sm_80), n_archs in [1, GCC_BUNDLE_MAX_ARCHS]; the PTX is made for the
   * largest. */
  int archs[GCC_BUNDLE_MAX_ARCHS];
  int n_archs;
  /* Batch sizes to generate CUDA kernels for, ascending, n_batch_sizes in
   * [0, GCC_BUNDLE_MAX_BATCHES]; 0 sizes: 1 and 1000 (gcc-run's default). */
  int64_t batch_sizes[GCC_BUNDLE_MAX_BATCHES];
  int n_batch_sizes;
  int use_kernel_cache; /* read/write the NVRTC kernel cache (codegen/kernel_cache.h) */
  int64_t created;      /* creation time, seconds since the epoch (0: now) */
  /* --export-precision (graph/ir.h gcc_precision): GCC_PRECISION_FP32 (0,
   * the default: a version 1 bundle, float32 throughout), or BF16 / FP16: a
   * version 2 bundle whose plans, kernels and cubins are compiled with the
   * autocast pass at that precision (EVAL plans: torch.autocast's rules)
   * and whose weights section stores in that 16-bit dtype every
   * initializer the pass rounds to it for all of its readers (the weights
   * of GEMMs and convolutions and their biases; not normalization
   * parameters, which the pass keeps float32), rounded to nearest even
   * (graph/half.h). Inputs and outputs stay float32. TF32 is refused (a
   * math mode, not a storage format). */
  int precision;
} gcc_export_options;

/* gcc_bundle_parse, or, for bytes that are a model file rather than a
 * bundle (an ONNX model or a gcc-train .pb, recognised by content:
 * onnx/model_file.h), the CPU-only bundle of its inference graph
 * (gcc_inference_graph; no architectures, nothing for NVRTC). Errors: those
 * of the bundle reader for anything that is not a model file; the model
 * loader's, gcc_inference_graph's and compilation's for a model. */
gcc_status gcc_bundle_open_bytes(const uint8_t *bytes, size_t size, const char *source,
                                 gcc_bundle **out, gcc_diag *d);

/* Reads the file at `path` and opens it with gcc_bundle_open_bytes
 * (GCC_ERR_IO naming the path when it cannot be read). */
gcc_status gcc_bundle_open(const char *path, gcc_bundle **out, gcc_diag *d);

/* ---- for deploy/export.c ------------------------------------------------ */

/* Owned section bytes, freed at the end of the export. */
#define MAX_SECTIONS (8 + (3 * GCC_BUNDLE_MAX_ARCHS + 2) * GCC_BUNDLE_MAX_BATCHES)
typedef struct gcc_bundle_sections {
  gcc_bundle_section_ref ref[MAX_SECTIONS];
  void *own[MAX_SECTIONS];
  char names[MAX_SECTIONS][32];
  int n;
} gcc_bundle_sections;

/* Appends a section (`owned`: freed with the sections). */
void gcc_bundle_add_section(gcc_bundle_sections *s, const char *name, void *data, size_t size,
                            int owned);

/* Compiles the inference graph `ig` for device `dev`, `batch` rows and
 * `precision` (gcc_precision; the autocast pass for BF16 / FP16): the
 * compiled graph (*cg) and its JSON placement report (*report). */
gcc_status gcc_bundle_compile_for(const gcc_graph *ig, const gcc_device_info *devs, int n_devs,
                                  int dev, int64_t batch, int precision, gcc_graph **cg,
                                  char **report, gcc_diag *d);

/* Which initializers of the inference graph `ig` a bundle of `precision`
 * stores in 16 bits: is16[v] = 1 for a float32 initializer v that the
 * autocast pass (EVAL, batch 1) casts to the precision's 16-bit dtype for
 * every node that reads it, else 0 (all 0 for FP32). `is16` has
 * ig->n_values entries. Errors: shape inference's and the pass's;
 * GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_bundle_weights_16bit(const gcc_graph *ig, int precision, unsigned char *is16,
                                    gcc_diag *d);

/* Adds the CUDA sections of the bundle (export.c: NVRTC). */
typedef gcc_status (*gcc_bundle_cuda_fn)(const gcc_graph *ig, const gcc_export_options *o,
                                         const int64_t *batches, int n_batches,
                                         gcc_bundle_sections *secs, gcc_diag *d);

/* The bundle of `model` in memory (*out malloc'ed): the graph, weights
 * and CPU plan, and when o->n_archs > 0 what `cuda` adds (an error when
 * `cuda` is NULL). Errors: GCC_ERR_INVALID_ARGUMENT for bad options, those
 * of gcc_inference_graph and of compilation. */
gcc_status gcc_bundle_build(const gcc_graph *model, const gcc_export_options *o,
                            gcc_bundle_cuda_fn cuda, const char *source, uint8_t **out,
                            size_t *out_size, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_DEPLOY_MODEL_BUNDLE_H */
