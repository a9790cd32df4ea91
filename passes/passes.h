/*
 * passes.h - the compiler passes and the pass manager.
 *
 * Every pass has the same entry shape,
 *     gcc_status gcc_pass_NAME(gcc_graph *g, const gcc_options *opt, gcc_diag *d),
 * transforms the graph in place and leaves it topologically sorted and
 * linked. gcc_run_passes() runs the pipeline in order, verifies the IR after
 * each pass, and prints the IR after the pass named by opt->dump_after (like
 * LLVM's -print-after).
 */
#ifndef GCC_PASSES_PASSES_H
#define GCC_PASSES_PASSES_H

#include <stdio.h>

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gcc_mode {
  GCC_MODE_TRAIN = 0, /* forward + backward + optimizer update */
  GCC_MODE_EVAL,      /* forward only, up to the loss and the prediction */
} gcc_mode;

typedef struct gcc_options {
  gcc_mode mode;
  int64_t batch_size;   /* binds the symbolic batch dim of the inputs */
  gcc_optimizer opt;    /* optimizer and hyper-parameters (TRAIN) */
  const char *device;   /* "cpu" (the only backend that runs in this version) */
  const char *dump_after; /* pass name, or "all"; NULL: no dump */
  FILE *dump_file;      /* where dumps go (stderr if NULL) */
} gcc_options;

/* Prepares a loaded model for compilation: binds the batch, infers shapes,
 * and for GCC_MODE_EVAL prunes everything that does not lead to the loss or
 * the prediction. Errors: GCC_ERR_SHAPE / GCC_ERR_INVALID_GRAPH naming the
 * node. */
gcc_status gcc_pass_infer(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* Reverse-mode automatic differentiation (TRAIN only; no-op in EVAL):
 * builds the backward graph from the scalar loss named by the training
 * spec, accumulating gradient contributions of values used more than once,
 * writes each parameter's gradient into a GRAD value "<param>.grad", then
 * appends one optimizer-update node per parameter (SGD or Adam) with its
 * state values ("<param>.momentum_buffer", "<param>.exp_avg",
 * "<param>.exp_avg_sq": PyTorch's state names). Parameters whose gradient
 * does not reach the loss are not updated (PyTorch: grad is None).
 * Errors: GCC_ERR_INVALID_GRAPH if the loss is missing or not a float32
 * scalar; GCC_ERR_UNSUPPORTED for a gradient an op does not provide. */
gcc_status gcc_pass_autodiff(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* Device placement: records the device of every node. This version runs
 * everything on the CPU; a node pinned to another device is an error that
 * names it (the CUDA backend is not part of this version). */
gcc_status gcc_pass_placement(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* Checks IR invariants: SSA (one producer per value), every input defined
 * before use, topological order, known dtypes and shapes of every value a
 * node touches. GCC_ERR_INTERNAL naming the offending node when one fails. */
gcc_status gcc_verify(const gcc_graph *g, gcc_diag *d);

/* Runs infer, autodiff and placement in order (verifying after each and
 * dumping where asked). */
gcc_status gcc_run_passes(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* Prints the IR: one line per node with phase, op, inputs, outputs, shapes. */
void gcc_dump_graph(const gcc_graph *g, FILE *f);

#ifdef __cplusplus
}
#endif

#endif /* GCC_PASSES_PASSES_H */
