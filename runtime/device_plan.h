/*
 * device_plan.h - executes a plan compiled for a CUDA device through a
 * device backend.
 *
 * The runner is device-independent: it lays out memory, binds every value,
 * turns fused groups into launches (generated kernels, cuBLASLt GEMMs with
 * their epilogue, cuDNN convolutions and poolings, copies) and issues them in schedule order through a table
 * of functions, gcc_device_backend. runtime/cuda_backend.c implements the
 * table with the CUDA runtime API, cuBLASLt and kernels loaded from NVRTC
 * cubins; the tests implement it on the host (generated kernels compiled
 * with codegen/cuda_host_shim.h, GEMMs with OpenBLAS in column-major mode),
 * which is how this file is exercised without a GPU.
 *
 * Memory. One device allocation per plan holds, 256-byte aligned:
 *   the step arena (passes/memplan.c, the device's peak), two slots per
 *   per-step input copy (double buffering: step i reads slot i % 2 while
 *   the copy stream fills the other), the ReLU bit-masks of RELU_AUX_BIAS
 *   GEMMs (gemm_map.h), the constants placed on the device (uploaded once,
 *   at compile), the loss kernels' bad-label flag, and the workspace of the
 *   plan's library calls (cuDNN), sized when the plan is built from every
 *   convolution of the plan (library_prepare), so that the plan's CUDA
 *   Graphs only ever refer to memory the plan owns.
 * Parameters, gradients and optimizer state are bound through `bind` (the
 * session's device mirror of its persistent arena); an optimizer group's
 * parameters must be consecutive there, in group order, with each tensor
 * padded to GCC_ARENA_ALIGN bytes (the contract of codegen/emit.h).
 *
 * A step: the host waits until the step that last used this step's input
 * slot (the plan's step i - 2) is done, copies each input batch into that
 * slot's pinned staging buffer and issues its H2D on the copy stream into
 * the slot; the compute stream waits for that copy, runs the step (or
 * replays its CUDA Graph), then copies the values read after the step (the
 * loss; in EVAL the prediction) and the loss kernels' bad-label flag D2D
 * into an entry of a read-back ring on the device, one entry per step. When
 * the host reads an entry (once per log interval) the whole ring comes back
 * in one D2H copy. So the host runs at most two steps of a plan ahead of
 * the device; it waits for nothing else per step unless a node of the plan
 * runs on the CPU.
 *
 * A step that fails after its first input reached the staging buffers
 * leaves the plan failed: its H2D may still be in flight, so the plan never
 * writes those buffers again and every later run returns GCC_ERR_DEVICE
 * naming the first failure (free the plan; gcc_dplan_free waits for the
 * device first).
 *
 * CUDA Graphs: with cfg.cuda_graph, the step of each input slot is
 * captured on its second use and replayed after that. The graphs belong to
 * the plan (capture_end hands them over) and are destroyed by
 * gcc_dplan_free before the plan's memory and kernels go, so plans of one
 * backend (a session's training, last-batch and evaluation plans) never
 * replay one another's steps. Plans whose kernel arguments change every
 * step (Adam's bias correction) or that have CPU nodes inside the step are
 * never captured (gcc_dplan_graph_note says why).
 *
 * GEMMs are prepared when the plan is built, with the real operand
 * addresses (gemm_prepare); when cuBLASLt offers no algorithm for a group's
 * epilogue, the plan runs the plain GEMM and a generated kernel that does
 * the epilogue's work (codegen/emit.h, gcc_codegen_gemm_epilogues).
 */
#ifndef GCC_RUNTIME_DEVICE_PLAN_H
#define GCC_RUNTIME_DEVICE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/emit.h"
#include "codegen/nvrtc.h"
#include "runtime/executor.h"
#include "runtime/gemm_map.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gcc_copy_kind { GCC_COPY_H2D = 0, GCC_COPY_D2H, GCC_COPY_D2D } gcc_copy_kind;

/* Streams of a backend. */
enum { GCC_STREAM_COMPUTE = 0, GCC_STREAM_COPY = 1 };

/* Events a plan uses (backends create them on first use). */
enum {
  GCC_EVENT_INPUT_READY = 0, /* + slot (0, 1): the slot's H2D is done */
  GCC_EVENT_STEP_DONE = 2,   /* + slot: the step that read the slot is done */
  GCC_EVENT_READBACK = 4,    /* the read-back ring is on the host */
};

/* What the runner knows about one cuBLASLt matmul's operands when it
 * prepares it (gemm_prepare): the epilogue's device pointers, fixed for the
 * plan's life, and the alignment of every matrix operand (bytes, a power of
 * two <= 256: gcc_lt_alignment of every address the operand takes, both
 * input slots included). */
typedef struct gcc_gemm_operands {
  void *bias;  /* BIAS variants: the bias; BGRAD variants: the bias gradient; else NULL */
  void *aux;   /* RELU_AUX_BIAS / DRELU*: the ReLU bit-mask; else NULL */
  unsigned align_a, align_b, align_c, align_d;
} gcc_gemm_operands;

/* A device, as the runner sees it. Every function returns GCC_OK or an
 * error with a message naming the call (the CUDA backend: the CUDA,
 * cuBLAS or cuDNN call, its error string, file and line). Asynchronous
 * operations are ordered on `stream`; host pointers given to copies are
 * pinned (host_alloc) unless stated.
 *
 * Ownership: whatever a plan prepares on the backend (loaded kernels,
 * prepared GEMMs, captured CUDA Graphs) is returned to the plan as a handle
 * and released by the plan (gcc_dplan_free), graphs first, before the
 * memory they refer to is freed and the kernels they launch are unloaded.
 * The backend keeps nothing that points into a plan's memory. */
typedef struct gcc_device_backend {
  void *self;
  /* The device's compute capability, 10 * major + minor (90: an H100).
   * The runner chooses the kernel image (cubin or PTX) by it. */
  int arch;
  /* Device memory, at least 256-byte aligned. */
  gcc_status (*alloc)(void *self, size_t bytes, void **out, gcc_diag *d);
  void (*release)(void *self, void *p);
  /* Free and total device memory, bytes. */
  gcc_status (*mem_info)(void *self, size_t *free_bytes, size_t *total_bytes, gcc_diag *d);
  /* Pinned (page-locked) host memory. */
  gcc_status (*host_alloc)(void *self, size_t bytes, void **out, gcc_diag *d);
  void (*host_release)(void *self, void *p);
  gcc_status (*copy)(void *self, void *dst, const void *src, size_t bytes, gcc_copy_kind kind,
                     int stream, gcc_diag *d);
  gcc_status (*memset)(void *self, void *dst, int byte, size_t bytes, int stream, gcc_diag *d);
  /* Loads a plan's kernels from `image`, which holds exactly one image: a
   * cubin for sm_`image_arch` or PTX for compute_`image_arch` (the runner
   * chose it by `arch` and the CUDA binary compatibility rules), and
   * returns one handle per kernel of `ks` in kernels[]. Every kernel is on
   * the device when this returns: under lazy module loading an image the
   * device cannot run would otherwise only fail at its first launch. */
  gcc_status (*load)(void *self, const gcc_kernel_set *ks, const gcc_nvrtc_output *image,
                     int image_arch, void **module, void **kernels, gcc_diag *d);
  void (*unload)(void *self, void *module);
  /* Launches kernel `k` (grid k->grid_dim, block k->block_dim) on the
   * compute stream; args[i] points at argument i (cudaLaunchKernel). */
  gcc_status (*launch)(void *self, void *kernel, const gcc_kernel_info *k, void **args,
                       gcc_diag *d);
  /* Prepares the column-major matmul `g` (gemm_map.h) for the operands
   * `ops` describes, once, when the plan is built: cuBLASLt's heuristic is
   * asked with the real bias and aux pointers set and the operands' real
   * alignments as its minimum alignments. *out: a handle for gemm(),
   * released with gemm_release. GCC_ERR_UNSUPPORTED when the heuristic
   * offers no algorithm (the runner then falls back to a plain GEMM and a
   * generated kernel for the epilogue's work). */
  gcc_status (*gemm_prepare)(void *self, const gcc_colmajor_gemm *g, const gcc_gemm_operands *ops,
                             void **out, gcc_diag *d);
  /* D = epilogue(alpha op(A) op(B) + beta C) on the compute stream, with the
   * prepared matmul (its bias and aux pointers); every operand at least as
   * aligned as prepared. */
  gcc_status (*gemm)(void *self, void *prepared, const void *a, const void *b, const void *c,
                     void *dst, gcc_diag *d);
  void (*gemm_release)(void *self, void *prepared);
  /* Prepares node `node` of `g`, whose op is lowered to a library on the
   * device (GCC_CUDA_CUDNN: convolutions and poolings, forward and
   * backward), when the plan is built, never under capture: chooses its
   * algorithms and returns in *workspace_bytes the device workspace its
   * run needs (the plan owns that workspace). */
  gcc_status (*library_prepare)(void *self, const gcc_graph *g, int node,
                                size_t *workspace_bytes, gcc_diag *d);
  /* Runs prepared node `node` on the compute stream; in[k] / out[k] are the
   * device addresses of its inputs and outputs (NULL for an omitted
   * input); `workspace` holds at least the bytes library_prepare asked for. */
  gcc_status (*library_op)(void *self, const gcc_graph *g, int node, void *const *in,
                           void *const *out, void *workspace, size_t workspace_bytes,
                           gcc_diag *d);
  gcc_status (*event_record)(void *self, int event, int stream, gcc_diag *d);
  gcc_status (*stream_wait)(void *self, int stream, int event, gcc_diag *d);
  gcc_status (*event_sync)(void *self, int event, gcc_diag *d);
  gcc_status (*sync)(void *self, gcc_diag *d); /* both streams */
  /* CUDA Graphs: capture the compute stream's work between begin and end
   * into an executable graph (*graph, owned by the caller: graph_destroy);
   * replay it on the compute stream. */
  gcc_status (*capture_begin)(void *self, gcc_diag *d);
  gcc_status (*capture_end)(void *self, void **graph, gcc_diag *d);
  gcc_status (*graph_launch)(void *self, void *graph, gcc_diag *d);
  void (*graph_destroy)(void *self, void *graph);
} gcc_device_backend;

typedef struct gcc_dplan_config {
  int sm;                       /* NVRTC target, 10 * major + minor (90 for sm_90): the
                                   device's compute capability, unless the caller
                                   compiles for another one */
  int sm_count;                 /* streaming multiprocessors (grid sizes) */
  const char *kernel_cache_dir; /* NULL: the default (codegen/kernel_cache.h) */
  int use_kernel_cache;         /* 0: --no-kernel-cache */
  int cuda_graph;               /* 1: capture and replay the step (--no-cuda-graph: 0) */
  int readback_ring;            /* entries of the read-back ring (>= 1): steps between reads */
  int threads;                  /* OpenBLAS threads of CPU nodes */
  /* A prebuilt image of the plan's generated kernels (a .gccx bundle's
   * cubin or PTX for this plan's graph and batch size): loaded as is,
   * NVRTC is not called. NULL: compile with NVRTC (through the cache). */
  const gcc_nvrtc_output *image;
  /* The architecture `image` was built for (10 * major + minor: the cubin's
   * sm_XX or the PTX's compute_XX); 0: `sm`. */
  int image_arch;
} gcc_dplan_config;

typedef struct gcc_dplan gcc_dplan;

/* Compiles `model` for opt->device (a CUDA device) and prepares it on `be`:
 * passes, memory plan, code generation, NVRTC (through the kernel cache),
 * kernel loading, the device allocation, constant upload. `bind` returns
 * the device address of PARAM / GRAD / OPT_STATE values (as gcc_plan_compile's).
 * Every library call (cuDNN) and GEMM of the plan is prepared here, and the
 * kernel image (cubin or PTX) is chosen by be->arch before it is loaded.
 * Errors: those of the passes and of gcc_gemm_map; GCC_ERR_UNSUPPORTED for
 * a plan over several CUDA devices, an optimizer group whose parameters
 * are not laid out as emit.h requires, or kernels the device cannot run
 * (naming the image's and the device's architectures); GCC_ERR_OUT_OF_MEMORY
 * with the requested, free and total device bytes (the cuDNN workspace
 * among them) and the largest consumers; the backend's errors. */
gcc_status gcc_dplan_compile(const gcc_graph *model, const gcc_options *opt,
                             const gcc_dplan_config *cfg, const gcc_device_backend *be,
                             gcc_bind_fn bind, void *user, gcc_dplan **out, gcc_diag *d);

/* Points graph input `name` at host memory `data` (the input's numel
 * elements) for the next gcc_dplan_run; it is copied into pinned staging
 * during that call, so it may be reused when the call returns.
 * GCC_ERR_INVALID_ARGUMENT if there is no such input. */
gcc_status gcc_dplan_bind_input(gcc_dplan *p, const char *name, const void *data, gcc_diag *d);

/* --dataset-on-device: the next runs take input `name` from rows of a
 * dataset already on the device instead of host memory: batch row r is
 * row perm[first + r] of `rows` (device memory, rows of the input's
 * per-sample size), gathered by a generated kernel on the compute stream
 * (no H2D). `perm` is a device array of int64 row indices. Binding host
 * data again (gcc_dplan_bind_input) switches back. Errors:
 * GCC_ERR_INVALID_ARGUMENT (no such input copied to the device);
 * GCC_ERR_UNSUPPORTED (a sample size that is not a multiple of 4 bytes);
 * NVRTC and backend errors loading the gather kernel. */
gcc_status gcc_dplan_bind_input_gather(gcc_dplan *p, const char *name, const void *rows,
                                       const int64_t *perm, int64_t first, gcc_diag *d);

/* Issues one step. `optimizer_step` as gcc_plan_run's. The read-back
 * values of this step go to ring entry `optimizer_step % readback_ring`
 * (in EVAL: entry 0) and may be read after gcc_dplan_wait_readback of that
 * entry. Waits for the plan's step i - 2 (the last user of this step's
 * input slot), not for this one, unless the plan has CPU nodes. Errors: an
 * unbound input; the backend's errors (after which the plan is failed, see
 * above); GCC_ERR_DEVICE for a plan that failed before. */
gcc_status gcc_dplan_run(gcc_dplan *p, int64_t optimizer_step, gcc_diag *d);

/* Brings the ring to the host (one D2H) if `entry` was written after the
 * last time, waits for it, then checks the
 * loss kernels' bad-label flag of that step: GCC_ERR_INVALID_ARGUMENT
 * naming the node and the row, as the CPU backend reports it. */
gcc_status gcc_dplan_wait_readback(gcc_dplan *p, int entry, gcc_diag *d);

/* The host copy in ring entry `entry` of value `name` (the loss or the
 * prediction, by their names in the model), or NULL if it is not read back. */
const gcc_tensor *gcc_dplan_readback(const gcc_dplan *p, const char *name, int entry);

/* After a run: waits for it, then returns the host tensor of value `name`:
 * a value computed on the CPU, or the host copy ("<name>@cpu") of one
 * computed on the device. NULL when the plan has neither (or on a device
 * error, which *d then describes). For inference plans (gcc-run). */
const gcc_tensor *gcc_dplan_host_tensor(gcc_dplan *p, const char *name, gcc_diag *d);

/* Waits for all work of the plan. */
gcc_status gcc_dplan_sync(gcc_dplan *p, gcc_diag *d);

const gcc_graph *gcc_dplan_graph(const gcc_dplan *p);
/* Launches (kernels and GEMMs) and copies issued per step. */
int gcc_dplan_launches(const gcc_dplan *p);
int gcc_dplan_copies(const gcc_dplan *p);
/* Bytes of the plan's device allocation, and of the library workspace in it. */
size_t gcc_dplan_device_bytes(const gcc_dplan *p);
size_t gcc_dplan_workspace_bytes(const gcc_dplan *p);
/* GEMM groups whose epilogue cuBLASLt did not offer, run as a plain GEMM and
 * a generated epilogue kernel. */
int gcc_dplan_epilogue_fallbacks(const gcc_dplan *p);
/* Steps replayed from a CUDA Graph so far, and why the plan is not
 * captured ("" when it is, or will be on its next steps). */
int64_t gcc_dplan_graph_replays(const gcc_dplan *p);
const char *gcc_dplan_graph_note(const gcc_dplan *p);

void gcc_dplan_free(gcc_dplan *p);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_DEVICE_PLAN_H */
