/*
 * plan.h - the plan runner: compiles a model for a device, binds every
 * value to storage once, and runs steps through the device's backend
 * (runtime/backend.h). One runner for every device: a CPU plan is a plan
 * whose nodes all run on the CPU backend.
 *
 * The runner is device-independent: it lays out memory, binds every value,
 * turns the nodes on the CPU into node-by-node calls of the CPU backend
 * (its kernels, runtime/cpu) and the fused groups on a CUDA device into
 * launches (generated kernels, cuBLASLt GEMMs with their epilogue, cuDNN
 * convolutions and poolings, copies), and issues them in schedule order.
 * runtime/cuda/cuda_backend.c implements the device table with the CUDA
 * runtime API, cuBLASLt, cuDNN and kernels loaded from NVRTC cubins; the
 * tests implement it on the host (generated kernels compiled with
 * tests/cuda_host_shim.h, GEMMs with OpenBLAS in column-major mode), which
 * is how the CUDA path is exercised without a GPU.
 *
 * Memory. The host arena (the CPU backend's allocation) holds the CPU's
 * step arena (passes/memplan.c) with the CPU kernels' workspaces. On a
 * CUDA device, one device allocation per plan holds, 256-byte aligned:
 *   the device's step arena, two slots per per-step input copy (double
 *   buffering: step i reads slot i % 2 while the copy stream fills the
 *   other), the ReLU bit-masks of RELU_AUX_BIAS GEMMs (gemm_map.h), the
 *   constants placed on the device (uploaded once, at compile), the loss
 *   kernels' bad-label flag, and the workspace of the plan's library calls
 *   (cuDNN), sized when the plan is built from every convolution of the
 *   plan (library_prepare), so that the plan's CUDA Graphs only ever refer
 *   to memory the plan owns.
 * Parameters, gradients and optimizer state are bound through `bind` (the
 * caller's persistent storage, on the device that runs the plan); an
 * optimizer group's parameters on a CUDA device must be consecutive there,
 * in group order, with each tensor padded to GCC_ARENA_ALIGN bytes (the
 * contract of codegen/emit.h). Constants on the host point at their data;
 * graph inputs consumed on the host point at whatever buffer the caller
 * binds before each run (zero copy).
 *
 * A step: the host waits until the step that last used this step's input
 * slot (the plan's step i - 2) is done, copies each input batch consumed
 * on the device into that slot's pinned staging buffer and issues its H2D
 * on the copy stream into the slot; the compute stream waits for that
 * copy, runs the step (or replays its CUDA Graph), then copies the values
 * read after the step (the loss; in EVAL the prediction) and the loss
 * kernels' bad-label flag D2D into an entry of a read-back ring on the
 * device, one entry per step. When the host reads an entry (once per log
 * interval) the whole ring comes back in one D2H copy. So the host runs at
 * most two steps of a plan ahead of the device; it waits for nothing else
 * per step unless a node of the plan runs on the CPU. A CPU plan runs its
 * nodes in order and returns when they are done; it allocates nothing per
 * step.
 *
 * A device step that fails after its first input reached the staging
 * buffers leaves the plan failed: its H2D may still be in flight, so the
 * plan never writes those buffers again and every later run returns
 * GCC_ERR_DEVICE naming the first failure (free the plan; gcc_plan_free
 * waits for the device first).
 *
 * CUDA Graphs: with cfg.cuda_graph, the step of each input slot is
 * captured on its second use and replayed after that. The graphs belong to
 * the plan (capture_end hands them over) and are destroyed by
 * gcc_plan_free before the plan's memory and kernels go, so plans of one
 * backend (a session's training, last-batch and evaluation plans) never
 * replay one another's steps. Plans whose kernel arguments change every
 * step (Adam's bias correction) or that have CPU nodes inside the step are
 * never captured (gcc_plan_graph_note says why).
 *
 * GEMMs are prepared when the plan is built, with the real operand
 * addresses (gemm_prepare); when cuBLASLt offers no algorithm for a group's
 * epilogue, the plan runs the plain GEMM and a generated kernel that does
 * the epilogue's work (codegen/emit.h, gcc_codegen_gemm_epilogues).
 */
#ifndef GCC_RUNTIME_PLAN_H
#define GCC_RUNTIME_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "passes/memplan.h"
#include "passes/passes.h"
#include "runtime/backend.h"
#include "runtime/compile.h"
#include "runtime/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns the persistent storage (the value's numel elements of its dtype:
 * float32, or bfloat16 / float16 for a parameter's 16-bit copy that its
 * optimizer update writes; on the device that runs the plan) of a PARAM,
 * GRAD or OPT_STATE value of the compiled graph, or NULL if the caller has
 * none (an error naming the value follows). The copies of the parameters of
 * one optimizer group must sit at their parameters' element offsets from
 * the first one's (the optimizer kernel's GCC_KARG_PARAM_COPY section). */
typedef void *(*gcc_bind_fn)(void *user, const gcc_graph *g, int value);

/* Compiles a plan's generated kernels for sm_XX (NVRTC through the kernel
 * cache: codegen/kernel_cache.h gcc_kernel_cache_hook). Fills `out` as
 * gcc_nvrtc_compile does. */
typedef gcc_status (*gcc_kernel_compile_fn)(void *user, const char *source, const char *program,
                                            int sm, gcc_nvrtc_output *out, gcc_diag *d);

typedef struct gcc_plan_config {
  int threads; /* OpenBLAS threads of CPU nodes (<= 0: 1) */
  /* The backend of opt->device when it is a CUDA device (the CUDA backend,
   * or a test's emulation); NULL for a plan on the CPU. The CPU's backend
   * is always gcc_cpu_backend(). */
  const gcc_device_backend *device;
  int sm;            /* kernels' target, 10 * major + minor (90 for sm_90): the
                        device's compute capability, unless the caller compiles
                        for another one */
  int sm_count;      /* streaming multiprocessors (grid sizes) */
  int cuda_graph;    /* 1: capture and replay the step (--no-cuda-graph: 0) */
  int readback_ring; /* entries of the read-back ring (>= 1): steps between reads */
  /* 1: after every node run on the host, check its float32 outputs (and the
   * parameters and optimizer state it updates in place) for NaN and Inf, and
   * fail with GCC_ERR_NUMERIC naming the first node that produced one, as
   * torch.autograd.detect_anomaly does. Costs one pass over every output.
   * Under fp16 loss scaling the backward's outputs are not checked: an Inf
   * there is what the scaler looks for (the step is skipped). */
  int detect_anomaly;
  /* The plan's generated kernels: a prebuilt image (a .gccx bundle's cubin
   * or PTX for this plan's graph and batch size), loaded as is; else
   * compiled by `compile` (NULL: a CUDA plan that needs kernels fails with
   * GCC_ERR_UNSUPPORTED, as a program without NVRTC must). */
  const gcc_nvrtc_output *image;
  /* The architecture `image` was built for (10 * major + minor: the cubin's
   * sm_XX or the PTX's compute_XX); 0: `sm`. */
  int image_arch;
  gcc_kernel_compile_fn compile;
  void *compile_user;
  /* Threads that call `compile` at once (<= 0: the online CPUs): the
   * kernels are split into several NVRTC programs (codegen/program_split.h:
   * how many depends on the kernels only, so the programs and their cache
   * keys do not depend on this), each loaded as a module of its own;
   * `compile` must allow being called from several threads at once
   * (gcc_kernel_cache_hook does). */
  int compile_threads;
  /* Data-parallel training: the ranks' communicator (runtime/comm.h) that
   * the plan's AllReduce nodes sum over (the all-reduce pass adds them when
   * the gcc_options' world_size > 1); NULL: no all-reduce. */
  struct gcc_comm *comm;
  /* One step arena on the host for a caller's plans that run one at a time
   * (a session's training and evaluation plans on the CPU: a step's values
   * are dead once it returns). share_host_arena = 1: a training plan copies
   * its host read-backs (the loss) out of the arena after each step, into
   * the read-back ring as with several pending steps, so that another plan
   * may reuse the arena before the loss is read. shared_host_arena: the
   * arena (shared_host_arena_bytes long, GCC_ARENA_ALIGN-aligned) the plan
   * runs in instead of one of its own when its memory plan fits (NULL: its
   * own); the caller keeps it alive longer than the plan
   * (gcc_plan_host_arena). */
  int share_host_arena;
  void *shared_host_arena;
  size_t shared_host_arena_bytes;
  /* The same on a CUDA device (a session's plans on a GPU: they issue their
   * steps on the backend's streams in order, so the kernels of the next plan
   * run after the last one's step is done with its activations; PyTorch's
   * caching allocator serves training and evaluation from one pool the same
   * way). share_device_arena = 1: the plan's device step arena (the memory
   * plan's activations) is an allocation apart from the plan's other device
   * memory (input slots, constants, ReLU bit-masks, read-back ring, cuDNN
   * workspace, scratch, all still the plan's own), so that the caller can
   * take it over (gcc_plan_take_device_arena). shared_device_arena: the
   * arena (shared_device_arena_bytes long, from cfg.device's alloc) the
   * plan runs in instead of one of its own when its memory plan fits (NULL:
   * its own); the caller keeps it alive longer than the plan. Values read
   * after a step (the loss) are copied into the plan's read-back ring inside
   * the step, so another plan may reuse the arena before they are read. */
  int share_device_arena;
  void *shared_device_arena;
  size_t shared_device_arena_bytes;
} gcc_plan_config;

typedef struct gcc_plan gcc_plan;

/* Compiles `model` for opt->device (runtime/compile.h) and prepares it:
 * memory plan, for a CUDA device code generation, kernel loading (cfg.image
 * or cfg.compile), the device allocation and the constant upload; then
 * binds every value. `bind` returns the storage of PARAM / GRAD /
 * OPT_STATE values (may be NULL when the graph has none). Every library
 * call (cuDNN) and GEMM of a CUDA plan is prepared here, and the kernel
 * image (cubin or PTX) is chosen by the backend's arch before it is
 * loaded. Errors: those of the passes and of gcc_gemm_map; GCC_ERR_DEVICE
 * for a node placed on a CUDA device without cfg.device;
 * GCC_ERR_UNSUPPORTED for a plan over several CUDA devices, a persistent
 * value placed on the CPU inside a CUDA plan, an optimizer group whose
 * parameters are not laid out as emit.h requires, or kernels the device
 * cannot run (naming the image's and the device's architectures);
 * GCC_ERR_OUT_OF_MEMORY with the requested, free and total device bytes
 * (the cuDNN workspace among them) and the largest consumers; the
 * backends' errors. */
gcc_status gcc_plan_compile(const gcc_graph *model, const gcc_options *opt,
                            const gcc_plan_config *cfg, gcc_bind_fn bind, void *user,
                            gcc_plan **out, gcc_diag *d);

/* Points graph input `name` (and every view of it) at host memory `data`
 * (the input's numel elements of its dtype) for the next gcc_plan_run.
 * Where the input is consumed on the host, the data is read in place and
 * must stay valid during the run; where it is copied to a device, it is
 * staged during gcc_plan_run, so it may be reused when that returns.
 * GCC_ERR_INVALID_ARGUMENT if there is no such input. */
gcc_status gcc_plan_bind_input(gcc_plan *p, const char *name, const void *data, gcc_diag *d);

/* --dataset-on-device: the next runs take input `name` from rows of a
 * dataset already on the device instead of host memory: batch row r is
 * row perm[first + r] of `rows` (device memory, rows of the input's
 * per-sample size), gathered by a generated kernel on the compute stream
 * (no H2D). `perm` is a device array of int64 row indices. Binding host
 * data again (gcc_plan_bind_input) switches back. Errors:
 * GCC_ERR_INVALID_ARGUMENT (no such input copied to the device);
 * GCC_ERR_UNSUPPORTED (a sample size that is not a multiple of 4 bytes, or
 * no kernel compiler); compile and backend errors loading the gather
 * kernel. */
gcc_status gcc_plan_bind_input_gather(gcc_plan *p, const char *name, const void *rows,
                                      const int64_t *perm, int64_t first, gcc_diag *d);

/* Runs (on the CPU) or issues (on a device) one step. `optimizer_step` is
 * the number of optimizer updates done before this run (Adam's bias
 * correction, SGD's first momentum step). The read-back values of this
 * step go to ring entry `optimizer_step % readback_ring` (in EVAL: entry
 * 0) and may be read after gcc_plan_wait_readback of that entry. On a
 * device, waits for the plan's step i - 2 (the last user of this step's
 * input slot), not for this one, unless the plan has CPU nodes. Errors:
 * GCC_ERR_INVALID_ARGUMENT for an unbound input or bad data (a label out of
 * range, found by a CPU kernel), naming the node; the backends' errors
 * (after which a device plan is failed, see above); GCC_ERR_DEVICE for a
 * device plan that failed before. */
gcc_status gcc_plan_run(gcc_plan *p, int64_t optimizer_step, gcc_diag *d);

/* Gradient accumulation (runtime/session.c): the next runs of this plan (a
 * micro-step's) put their read-back values in ring entry `ring_index %
 * readback_ring` instead of optimizer_step's, and draw Dropout's masks from
 * counter `rng_step` (the micro-step's index over the run) instead of
 * optimizer_step; optimizer_step still drives the updates. */
void gcc_plan_set_micro_step(gcc_plan *p, int64_t ring_index, int64_t rng_step);

/* Data-parallel training: the next runs' AllReduce nodes weight this
 * rank's gradients as `shard_rows` rows of a global batch of `global_rows`
 * (runtime/cpu/cpu_kernels.h gcc_cpu_all_reduce); shard_rows 0: this rank
 * ran a placeholder batch and contributes nothing. */
void gcc_plan_set_shard(gcc_plan *p, int64_t shard_rows, int64_t global_rows);

/* The learning rate of the following steps (an lr schedule's, > 0), or 0
 * for each optimizer node's own lr attribute. A step captured as a CUDA
 * Graph is dropped when it changes (captured again at the next step). */
void gcc_plan_set_lr(gcc_plan *p, float lr);

/* Brings the ring to the host (one D2H) if `entry` was written after the
 * last time, waits for it, then checks the loss kernels' bad-label flag of
 * that step: GCC_ERR_INVALID_ARGUMENT naming the node and the row, as the
 * CPU backend reports it. Returns at once for a CPU plan. */
gcc_status gcc_plan_wait_readback(gcc_plan *p, int entry, gcc_diag *d);

/* The host copy in ring entry `entry` of value `name` (the loss or the
 * prediction, by their names in the model), or NULL if it is not read
 * back. A value computed on the host is read back too: its tensor when the
 * ring has one entry, else its copy in the host ring. */
const gcc_tensor *gcc_plan_readback(const gcc_plan *p, const char *name, int entry);

/* After a run: waits for it, then returns the host tensor of value `name`:
 * a value computed on the CPU, or the host copy ("<name>@cpu") of one
 * computed on the device. NULL when the plan has neither (or on a device
 * error, which *d then describes). For inference plans (gcc-run). */
const gcc_tensor *gcc_plan_host_tensor(gcc_plan *p, const char *name, gcc_diag *d);

/* The step arena the plan runs in on the host (NULL when its memory plan
 * needs none), *bytes of it used by its memory plan; *owned (may be NULL):
 * 1 when gcc_plan_free releases it, 0 when it is the caller's
 * (cfg.shared_host_arena, or taken). */
void *gcc_plan_host_arena(const gcc_plan *p, size_t *bytes, int *owned);

/* Hands the plan's own host step arena over (NULL, *bytes 0, when it has
 * none of its own): the plan goes on running in it, gcc_plan_free leaves
 * it, and the caller releases it (gcc_cpu_backend()'s release) after the
 * plan and every plan given it as shared_host_arena are freed. */
void *gcc_plan_take_host_arena(gcc_plan *p, size_t *bytes);

/* The device step arena of a plan made with cfg.share_device_arena (NULL
 * otherwise, or when its memory plan needs none on the device), *bytes of
 * it used by its memory plan; *owned (may be NULL): 1 when gcc_plan_free
 * releases it, 0 when it is the caller's (cfg.shared_device_arena, or
 * taken). */
void *gcc_plan_device_arena(const gcc_plan *p, size_t *bytes, int *owned);

/* Hands the plan's own device step arena over (NULL, *bytes 0, when it has
 * none of its own): the plan goes on running in it, gcc_plan_free leaves
 * it, and the caller releases it (cfg.device's release) after the plan and
 * every plan given it as shared_device_arena are freed. */
void *gcc_plan_take_device_arena(gcc_plan *p, size_t *bytes);

/* Waits for all work of the plan. */
gcc_status gcc_plan_sync(gcc_plan *p, gcc_diag *d);

/* Profiling (gcc-train --profile): from now on every run records one event
 * per node run on the CPU on `track`: category "copy" for a copy node, "op"
 * otherwise, named "<node> (<OpType>)", with the plan label `label` ("train
 * b64"), the operand shapes, bytes and FLOPs as args (a site per node,
 * registered here). On a CUDA device whose backend has timers, every
 * kernel launch, GEMM, library call and copy of the step is timed with
 * CUDA events (device time, on a track "<device> compute (<label>)"; the
 * input H2D copies on "<device> copy stream (<label>)"), placed on the
 * host clock from an anchor event recorded at the first profiled step;
 * the step is then issued launch by launch, not replayed from a CUDA
 * Graph (gcc_plan_graph_note says so). A NULL profiler turns it off; then
 * a run costs one branch more than without this hook. Errors:
 * GCC_ERR_OUT_OF_MEMORY (profiling stays off); the backend's timer
 * errors. */
gcc_status gcc_plan_set_profiler(gcc_plan *p, gcc_profiler *prof, gcc_prof_track *track,
                                 const char *label, gcc_diag *d);

/* Device time of a plan profiled on a CUDA device (gcc_plan_set_profiler
 * with a profiler: every launch, library call and copy is bracketed by a
 * pair of CUDA events, and CUDA Graph capture is off so that each launch is
 * timed as issued). Summed over the steps read so far (a step's events are
 * read once the host knows it is done: when its input slot is reused, at
 * gcc_plan_wait_readback and gcc_plan_sync). Milliseconds; bytes. */
typedef struct gcc_plan_device_profile {
  int64_t steps;                         /* steps whose events were read */
  double kernel_ms, gemm_ms, library_ms; /* generated kernels (epilogue fallbacks
                                             included), cuBLASLt, cuDNN */
  double copy_ms, copy_bytes;            /* copies inside the step (copy nodes) */
  double h2d_ms, h2d_bytes;              /* the input batches' H2D (copy stream) */
  double overlap_ms;                     /* of h2d_ms: while the compute stream ran
                                             the previous step (double buffering) */
} gcc_plan_device_profile;
void gcc_plan_device_profile_get(const gcc_plan *p, gcc_plan_device_profile *out);

/* The bound tensor of value `name` (NULL if the compiled graph has none);
 * its data is host memory for values on the CPU, device memory else. */
const gcc_tensor *gcc_plan_tensor(const gcc_plan *p, const char *name);

/* The compiled graph (after all passes). */
const gcc_graph *gcc_plan_graph(const gcc_plan *p);

/* The parameter (a value index of the compiled graph) that node `node`
 * updates when it is an optimizer update of a parameter (GCC_OPF_OPTIMIZER
 * with a GCC_VALUE_PARAM as input 0: SGD, Adam), else -1. */
int gcc_plan_update_param(const gcc_plan *p, int node);

/* The optimizer updates' own check of their results (gcc_cpu_ctx's counts,
 * runtime/cpu/cpu_optim.c) since the previous call: returns 1 when every
 * parameter update of every step this plan completed since then reported
 * (a CPU plan whose steps all ran to the end), with *nonfinite the updates
 * that left a NaN or an Inf in their parameter; 0 when that is not known
 * (a device plan, a step that stopped half-way), *nonfinite then 0. Clears
 * the counts either way. */
int gcc_plan_take_update_checks(gcc_plan *p, int64_t *nonfinite);

/* Size of the host (CPU) step arena in bytes, and the bytes its values
 * would take without reuse. */
size_t gcc_plan_arena_bytes(const gcc_plan *p);
size_t gcc_plan_unshared_bytes(const gcc_plan *p);
/* Bytes of the plan's per-step memory on its device: the device
 * allocation of a CUDA plan, the host arena of a CPU plan. */
size_t gcc_plan_step_bytes(const gcc_plan *p);

/* Work issued per run: nodes run one by one, kernels, GEMMs, library
 * calls and copies (a CPU plan: its nodes minus views). */
int gcc_plan_num_steps(const gcc_plan *p);
/* Launches (kernels, GEMMs, library calls) and copies issued per step on
 * the device. */
int gcc_plan_launches(const gcc_plan *p);
int gcc_plan_copies(const gcc_plan *p);
/* Bytes of the device memory the plan runs in (0 for a CPU plan): its
 * allocation and its step arena (cfg.share_device_arena: apart, its own or
 * shared, the bytes its memory plan uses of it); and of the library
 * workspace in the allocation. */
size_t gcc_plan_device_bytes(const gcc_plan *p);
size_t gcc_plan_workspace_bytes(const gcc_plan *p);
/* GEMM groups whose epilogue cuBLASLt did not offer, run as a plain GEMM and
 * a generated epilogue kernel. */
int gcc_plan_epilogue_fallbacks(const gcc_plan *p);
/* Fallback i (0 <= i < gcc_plan_epilogue_fallbacks): the GEMM group's name,
 * the epilogue it asked for ("CUBLASLT_EPILOGUE_DRELU_BGRAD") and why it was
 * not used (cuBLASLt's heuristic offered no algorithm for the operands'
 * shape, transposes and alignments; or the GEMM shares a ReLU bit-mask with
 * one that fell back). Returns 0, or -1 for an i out of range. The strings
 * live as long as the plan. */
int gcc_plan_epilogue_fallback(const gcc_plan *p, int i, const char **group, const char **epilogue,
                               const char **why);
/* The fallbacks as text for reports (--dump-placement on a GPU, the run
 * summary): one line per fallback, "  GEMM group 'G': EPILOGUE not
 * offered (WHY); plain GEMM + generated kernel gcc_epilogue_K\n", or
 * "" when there are none. Truncated to `cap` bytes (NUL included). */
void gcc_plan_fallback_text(const gcc_plan *p, char *buf, size_t cap);
/* The library kernel of every node the plan's CPU backend prepared one for
 * (gcc_device_backend.node_impl: a GEMM's library chosen by measurement,
 * runtime/cpu/cpu_choice.h, a convolution's or pooling's oneDNN primitive),
 * one line per node: "  fc1 (Gemm): sgemm (OpenBLAS) 64x512x784 B^T bias
 * [openblas: cached]\n"; "" when there is none. Truncated to `cap` bytes
 * (NUL included). */
void gcc_plan_cpu_library_text(const gcc_plan *p, char *buf, size_t cap);
/* Steps replayed from a CUDA Graph so far, the graphs captured (at most
 * one per input slot), and why the plan is not captured ("" when it is, or
 * will be on its next steps; "not used: the capture failed (WHY); launches
 * instead" after a capture_begin / capture_end error: that step and every
 * later one are issued launch by launch, and nothing is lost). */
int64_t gcc_plan_graph_replays(const gcc_plan *p);
int64_t gcc_plan_graph_captures(const gcc_plan *p);
const char *gcc_plan_graph_note(const gcc_plan *p);

/* Inference pipelines on a device (deploy/gcc_api.c): the caller writes the
 * next step's input straight into its pinned staging buffer (no host copy
 * in gcc_plan_run), issues its H2D early, and reads the previous step's
 * results while the copy is in flight.
 * gcc_plan_input_staging: *buf = the pinned staging buffer of input `name`
 * (its numel elements of its dtype) for the next gcc_plan_run, once it is
 * free: waits for the step that last read that input slot (step i - 2) and
 * for an H2D issued from it and not yet run. Bind it with
 * gcc_plan_bind_input(p, name, *buf) (the run then copies nothing on the
 * host). Errors: GCC_ERR_INVALID_ARGUMENT (a CPU plan, or no input `name`
 * copied to the device), GCC_ERR_DEVICE (a failed plan), the backend's.
 * gcc_plan_issue_inputs: issues the next step's input H2Ds on the copy
 * stream now (as gcc_plan_run would, which then only makes the compute
 * stream wait for them); returns without waiting for them. GCC_OK at once
 * for a CPU plan. Errors: as gcc_plan_run's for its inputs. */
gcc_status gcc_plan_input_staging(gcc_plan *p, const char *name, void **buf, gcc_diag *d);
gcc_status gcc_plan_issue_inputs(gcc_plan *p, gcc_diag *d);

void gcc_plan_free(gcc_plan *p);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_PLAN_H */
