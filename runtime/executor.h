/*
 * executor.h - compiled plans and their execution on the CPU backend.
 *
 * gcc_plan_compile() clones the model, runs the passes (shape inference,
 * autodiff for training, placement), plans the per-step arena and binds
 * every value to storage once: activations to offsets in the arena,
 * parameters / gradients / optimizer state to the caller's persistent
 * storage (through `bind`), constants to their data, graph inputs to
 * whatever buffer the caller binds before each run (zero copy). Running a
 * plan calls the kernels in order; it allocates nothing.
 */
#ifndef GCC_RUNTIME_EXECUTOR_H
#define GCC_RUNTIME_EXECUTOR_H

#include <stddef.h>

#include "passes/memplan.h"
#include "passes/passes.h"
#include "runtime/compile.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_plan gcc_plan;

/* Returns the persistent storage (float32, the value's numel elements) of
 * a PARAM, GRAD or OPT_STATE value of the compiled graph, or NULL if the
 * caller has none (an error naming the value follows). */
typedef void *(*gcc_bind_fn)(void *user, const gcc_graph *g, int value);

/* Compiles `model` for `opt` (mode, batch size, optimizer, device).
 * `threads` bounds OpenBLAS threads. Errors: those of the passes, and
 * GCC_ERR_OUT_OF_MEMORY for the arena. */
gcc_status gcc_plan_compile(const gcc_graph *model, const gcc_options *opt, gcc_bind_fn bind,
                            void *user, int threads, gcc_plan **out, gcc_diag *d);

/* Points graph input `name` (and every view of it) at `data`, which must
 * hold the input's numel elements of its dtype and stay valid during
 * gcc_plan_run. GCC_ERR_INVALID_ARGUMENT if there is no such input. */
gcc_status gcc_plan_bind_input(gcc_plan *p, const char *name, const void *data, gcc_diag *d);

/* Runs every step in order. `optimizer_step` is the number of optimizer
 * updates done before this run (Adam's bias correction, SGD's first
 * momentum step). Errors: GCC_ERR_INVALID_ARGUMENT for an unbound input or
 * bad data (a label out of range), naming the node. */
gcc_status gcc_plan_run(gcc_plan *p, int64_t optimizer_step, gcc_diag *d);

/* Profiling (gcc-train --profile): from now on every run records one event
 * per executed node on `track`: category "copy" for a copy node, "op"
 * otherwise, named "<node> (<OpType>)", with the plan label `label` ("train
 * b64"), the operand shapes, bytes and FLOPs as args (a site per node,
 * registered here). A NULL profiler turns it off; then a run costs one
 * branch more than without this hook. Errors: GCC_ERR_OUT_OF_MEMORY
 * (profiling stays off). */
gcc_status gcc_plan_set_profiler(gcc_plan *p, gcc_profiler *prof, gcc_prof_track *track,
                                 const char *label, gcc_diag *d);

/* The bound tensor of value `name` (NULL if the compiled graph has none). */
const gcc_tensor *gcc_plan_tensor(const gcc_plan *p, const char *name);

/* The compiled graph (after all passes). */
const gcc_graph *gcc_plan_graph(const gcc_plan *p);

/* Size of the per-step arena in bytes, and the bytes its values would take
 * without reuse. */
size_t gcc_plan_arena_bytes(const gcc_plan *p);
size_t gcc_plan_unshared_bytes(const gcc_plan *p);

/* Number of kernel launches per run (nodes minus views). */
int gcc_plan_num_steps(const gcc_plan *p);

void gcc_plan_free(gcc_plan *p);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_EXECUTOR_H */
