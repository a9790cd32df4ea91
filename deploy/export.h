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
#include "deploy/model_bundle.h"
#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gcc_inference_graph and gcc_export_options: deploy/model_bundle.h */

/* Parses "sm_80,sm_90" (comma-separated, each sm_XY or sm_XYZ that NVRTC
 * can target, no duplicates) into o->archs / o->n_archs (sorted).
 * Errors: GCC_ERR_INVALID_ARGUMENT naming the flag and the bad entry;
 * GCC_ERR_UNSUPPORTED for an architecture NVRTC cannot target. */
gcc_status gcc_export_parse_archs(const char *list, gcc_export_options *o, gcc_diag *d);

/* Parses "1,1000" (comma-separated integers in [1, 2^31), no duplicates)
 * into o->batch_sizes / o->n_batch_sizes (sorted). Errors:
 * GCC_ERR_INVALID_ARGUMENT naming --export-batch-sizes and the entry. */
gcc_status gcc_export_parse_batch_sizes(const char *list, gcc_export_options *o, gcc_diag *d);

/* Parses --export-precision: "fp32", "bf16" or "fp16" into o->precision
 * (graph/ir.h gcc_precision; what each means: gcc_export_options in
 * deploy/model_bundle.h). Errors: GCC_ERR_INVALID_ARGUMENT naming
 * --export-precision and the value (also for "tf32", a math mode rather
 * than a storage format). */
gcc_status gcc_export_parse_precision(const char *name, gcc_export_options *o, gcc_diag *d);

/* Writes the bundle of `model` (a trained model with its training spec;
 * its initializers hold the weights to ship) to `path`, atomically (temp
 * file, fsync, rename). Compiles the inference graph for the CPU and, per
 * architecture, for an assumed CUDA device of it (no GPU needed; NVRTC
 * produces the cubin and the PTX). Errors: those of gcc_inference_graph,
 * compilation (GCC_ERR_UNSUPPORTED / GCC_ERR_INTERNAL from codegen or
 * NVRTC, naming the architecture), GCC_ERR_IO naming `path`. */
gcc_status gcc_export_bundle(const gcc_graph *model, const gcc_export_options *o, const char *path,
                             gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_DEPLOY_EXPORT_H */
