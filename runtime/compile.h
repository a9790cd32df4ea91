/*
 * compile.h - from a model to a compiled graph and its memory plan: the
 * passes (passes/passes.h) for the target of this build, then memory
 * planning. No storage is bound and nothing runs, so a plan for a CUDA
 * device compiles on a machine without a GPU (what --dump-placement and
 * export do); the plan runner (runtime/plan.h) binds and runs it.
 */
#ifndef GCC_RUNTIME_COMPILE_H
#define GCC_RUNTIME_COMPILE_H

#include "passes/memplan.h"
#include "passes/passes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The target of this build: the CPU backend's op table answers for the CPU
 * (runtime/cpu), codegen's lowering table for CUDA devices, and the CUDA
 * lowering pass is fusion (codegen/fusion.h). Static; never NULL. */
const gcc_target *gcc_default_target(void);

/* Clones `model`, runs the passes for opt->target (NULL: the default
 * target) and plans the step arenas, keeping the values the host reads
 * after a step live to its end (the loss and prediction of a training
 * model, or the outputs of an inference graph, and their host copies).
 * *out has no parameter data (its PARAM values' data is NULL): a plan binds
 * the parameters to storage of its own, and the passes read the model's.
 * The caller frees *out and the plan. Errors: those of the passes and of
 * memory planning. */
gcc_status gcc_compile_graph(const gcc_graph *model, const gcc_options *opt, gcc_graph **out,
                             gcc_mem_plan *mem, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_COMPILE_H */
