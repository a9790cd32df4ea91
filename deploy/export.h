/*
 * export.h - gcc-train --export: the inference graph of a trained model and
 * the .gccx bundle written from it (format and reader: deploy/bundle.h).
 * Export compiles the graph for the CPU and, per architecture, for an
 * assumed CUDA device, and runs NVRTC for the cubins and the PTX: it is
 * the deployment piece that needs the compiler.
 */
#ifndef GCC_DEPLOY_EXPORT_H
#define GCC_DEPLOY_EXPORT_H

#include <stdint.h>

#include "deploy/bundle.h"
#include "graph/ir.h"

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
 * GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_inference_graph(const gcc_graph *model, gcc_graph **out, gcc_diag *d);

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
} gcc_export_options;

/* Parses "sm_80,sm_90" (comma-separated, each sm_XY or sm_XYZ that NVRTC
 * can target, no duplicates) into o->archs / o->n_archs (sorted).
 * Errors: GCC_ERR_INVALID_ARGUMENT naming the flag and the bad entry;
 * GCC_ERR_UNSUPPORTED for an architecture NVRTC cannot target. */
gcc_status gcc_export_parse_archs(const char *list, gcc_export_options *o, gcc_diag *d);

/* Parses "1,1000" (comma-separated integers in [1, 2^31), no duplicates)
 * into o->batch_sizes / o->n_batch_sizes (sorted). Errors:
 * GCC_ERR_INVALID_ARGUMENT naming --export-batch-sizes and the entry. */
gcc_status gcc_export_parse_batch_sizes(const char *list, gcc_export_options *o, gcc_diag *d);

/* Writes the bundle of `model` (a trained model with its training spec;
 * its initializers hold the weights to ship) to `path`, atomically (temp
 * file, fsync, rename). Compiles the inference graph for the CPU and, per
 * architecture, for an assumed CUDA device of it (no GPU needed; NVRTC
 * produces the cubin and the PTX). Errors: those of gcc_inference_graph,
 * compilation (GCC_ERR_UNSUPPORTED / GCC_ERR_INTERNAL from codegen or
 * NVRTC, naming the architecture), GCC_ERR_IO naming `path`. */
gcc_status gcc_export_bundle(const gcc_graph *model, const gcc_export_options *o,
                             const char *path, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_DEPLOY_EXPORT_H */
