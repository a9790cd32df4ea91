/*
 * backend.h - the device interface of the plan runner (runtime/plan.h): a
 * table of functions every device implements. The CPU
 * (runtime/cpu/cpu_backend.h) runs nodes one by one with its kernels; the
 * CUDA backend (runtime/cuda/cuda_backend.h) runs the lowered plan
 * (generated kernels, cuBLASLt GEMMs, cuDNN calls) on streams; the tests
 * add a third implementation that emulates a GPU on the host
 * (tests/host_backend.h). As ggml's backends and tinygrad's devices, a
 * device is allocator + copies + program loading and launch + sync.
 */
#ifndef GCC_RUNTIME_BACKEND_H
#define GCC_RUNTIME_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/emit.h"
#include "codegen/gemm_map.h"
#include "codegen/kernel_image.h"
#include "graph/ir.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gcc_comm; /* runtime/comm.h */

/* Per-plan execution context shared by the nodes a backend runs one by
 * one. */
typedef struct gcc_cpu_ctx {
  int max_threads;        /* upper bound for OpenBLAS threads (>= 1) */
  int64_t optimizer_step; /* optimizer steps completed before this one (Adam bias
                             correction, SGD's first-step momentum) */
  /* Dropout's Philox counter of this run: optimizer_step, or under gradient
   * accumulation the micro-step's index over the run (micro: 1 once
   * gcc_plan_set_micro_step set micro_rng and micro_ring, the ring index) */
  int64_t rng_step, micro_rng, micro_ring;
  int micro;
  float lr;           /* the learning rate of this step (an lr schedule's), or 0:
                             each optimizer node's own lr attribute */
  int blas_threads;   /* OpenBLAS threads currently set (0 = unknown) */
  gcc_diag *diag;     /* where kernels report data errors */
  const char *source; /* model file, for messages */
  /* Data-parallel training (AllReduce nodes): the ranks' communicator
   * (runtime/comm.h), the rows of the global batch this rank ran in this
   * step (0: it contributes nothing, its gradients are weighted by 0) and
   * the rows of the global batch. NULL comm: the plan has no AllReduce. */
  struct gcc_comm *comm;
  int64_t shard_rows, global_rows;
  void *state; /* the CPU backend's per-plan state (runtime/cpu: the
                             oneDNN context and scratchpad), made by its
                             prepare_node, freed by its release_ctx; NULL before */
  /* The optimizer updates' report (runtime/cpu/cpu_optim.c): every SGD or
   * Adam kernel adds 1 to updates_checked (a skipped update too: its
   * parameter is unchanged), and 1 to updates_nonfinite when the parameter
   * it wrote holds a NaN or an Inf; gcc_plan_take_update_checks reads and
   * clears them (the session's divergence check, gcc_session_check_params) */
  int64_t updates_checked, updates_nonfinite;
} gcc_cpu_ctx;

/* One node with its bound tensors, as a node-by-node backend runs it. */
typedef struct gcc_kernel_args {
  const gcc_node *node;
  gcc_tensor *const *in; /* n_in entries; NULL for an omitted optional input */
  int n_in;
  gcc_tensor *const *out;
  int n_out;
  gcc_cpu_ctx *ctx;
  void *workspace; /* scratch planned for this node (the backend's workspace answer), or NULL */
  size_t workspace_bytes; /* its size */
  void *prepared;         /* what the backend's prepare_node made for this node (a
                             oneDNN primitive), or NULL: the op table's kernel runs */
} gcc_kernel_args;

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
  void *bias; /* BIAS variants: the bias; BGRAD variants: the bias gradient; else NULL */
  void *aux;  /* RELU_AUX_BIAS / DRELU*: the ReLU bit-mask; else NULL */
  unsigned align_a, align_b, align_c, align_d;
} gcc_gemm_operands;

/* What a device allows one launch of a loaded kernel (launch_limits):
 * every launch's grid, block and dynamic shared memory are checked against
 * these when the plan is built, before anything is launched (a launch past
 * them fails on a GPU with cudaErrorInvalidConfiguration or
 * cudaErrorInvalidValue, and inside a CUDA Graph capture only at the end of
 * it). */
typedef struct gcc_launch_limits {
  int max_threads_per_block; /* the kernel's: cudaFuncAttributes.maxThreadsPerBlock
                                (<= cudaDevAttrMaxThreadsPerBlock; less when the
                                kernel uses many registers) */
  int max_grid_x;            /* blocks in x: cudaDevAttrMaxGridDimX */
  int max_block_x;           /* threads in x: cudaDevAttrMaxBlockDimX */
  size_t max_dynamic_smem;   /* dynamic shared memory bytes one launch may ask:
                                cudaDevAttrMaxSharedMemoryPerBlockOptin less the
                                kernel's static shared memory (the backend opts a
                                kernel in with cudaFuncAttributeMaxDynamicSharedMemorySize
                                at load when it asks more than 48 KiB) */
} gcc_launch_limits;

/* A device, as the plan runner sees it. Every function returns GCC_OK or
 * an error with a message naming the call (the CUDA backend: the CUDA,
 * cuBLAS or cuDNN call, its error string, file and line). Asynchronous
 * operations are ordered on `stream`; host pointers given to copies are
 * pinned (host_alloc) unless stated. A backend that cannot do something
 * (the CPU launches no generated kernels) returns GCC_ERR_UNSUPPORTED
 * naming it; the runner only asks what supports_op and the lowering allow.
 *
 * Ownership: whatever a plan prepares on the backend (loaded kernels,
 * prepared GEMMs, captured CUDA Graphs) is returned to the plan as a handle
 * and released by the plan (gcc_plan_free), graphs first, before the
 * memory they refer to is freed and the kernels they launch are unloaded.
 * The backend keeps nothing that points into a plan's memory. */
typedef struct gcc_device_backend {
  void *self;
  /* "cpu", "cuda", "host-emulation": for messages */
  const char *name;
  /* A CUDA device's compute capability, 10 * major + minor (90: an H100);
   * the runner chooses the kernel image (cubin or PTX) by it. 0 for the
   * CPU. */
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
   * device (GCC_LOWER_LIBRARY: convolutions and poolings, forward and
   * backward), when the plan is built, never under capture: chooses its
   * algorithms and returns in *workspace_bytes the device workspace its
   * run needs (the plan owns that workspace). */
  gcc_status (*library_prepare)(void *self, const gcc_graph *g, int node, size_t *workspace_bytes,
                                gcc_diag *d);
  /* Runs prepared node `node` on the compute stream; in[k] / out[k] are the
   * device addresses of its inputs and outputs (NULL for an omitted
   * input); `workspace` holds at least the bytes library_prepare asked for. */
  gcc_status (*library_op)(void *self, const gcc_graph *g, int node, void *const *in,
                           void *const *out, void *workspace, size_t workspace_bytes, gcc_diag *d);
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
  /* 1 if the device runs op `op` (graph/ops.h) at all: the CPU from its op
   * table (runtime/cpu/cpu_ops.c), a CUDA device from codegen's lowering
   * (codegen/lowering.h). Placement asks the same question
   * (runtime/compile.c), without needing a backend instance. */
  int (*supports_op)(void *self, int op);
  /* Backends that execute nodes one by one (the CPU): runs one node with
   * its bound tensors, synchronously. NULL for a device whose plans are
   * lowered into kernels, GEMMs and library calls (CUDA). */
  gcc_status (*run_node)(void *self, const gcc_kernel_args *a);
  /* Node-by-node backends, optional (NULL: nothing to prepare): called once
   * per node when the plan is built, after its tensors' shapes are bound
   * (data pointers may change before each run). May set a->prepared (a
   * library primitive created for the node's shapes) and a->ctx->state;
   * release_node frees what prepare_node made, release_ctx the context's
   * state after every node of the plan is released. */
  gcc_status (*prepare_node)(void *self, gcc_kernel_args *a, gcc_diag *d);
  void (*release_node)(void *self, gcc_kernel_args *a);
  void (*release_ctx)(void *self, gcc_cpu_ctx *ctx);
  /* Optional: once after prepare_node has run on every node of the plan
   * (choices about the nodes together: the CPU backend's whole-plan GEMM
   * library, runtime/cpu/cpu_dnnl.h). */
  gcc_status (*prepare_done)(void *self, gcc_cpu_ctx *ctx, gcc_diag *d);
  /* The library implementation that runs a prepared node ("matmul
   * brg:avx512_core 64x512x784 bias"), for --profile; NULL when the node
   * runs the op table's own kernel. */
  const char *(*node_impl)(void *self, const gcc_kernel_args *a);
  /* Data-parallel training (optional; NULL: the device runs no AllReduce).
   * collective: once the compute stream's work issued so far is done, sums
   * the bucket's n gradients grads[k] (numel[k] float32 each, device
   * memory) over the ranks with `comm` (runtime/comm.h: NCCL), each rank's
   * weighted by `weight`, in place, on the backend's communication stream,
   * and marks bucket `bucket` done there; it returns without waiting (the
   * host emulation: when done). collective_wait: the compute stream's later
   * work waits for bucket `bucket` (an optimizer update waits for its own
   * gradients' bucket only). */
  gcc_status (*collective)(void *self, struct gcc_comm *comm, void *const *grads,
                           const int64_t *numel, int n, float weight, int bucket, gcc_diag *d);
  gcc_status (*collective_wait)(void *self, int bucket, gcc_diag *d);
  /* The launch limits of loaded kernel `kernel` on this device (optional;
   * NULL: the runner checks nothing). Asked once per kernel when the plan
   * is built; the runner refuses a plan with a launch past them, naming the
   * kernel and its node. */
  gcc_status (*launch_limits)(void *self, void *kernel, gcc_launch_limits *out, gcc_diag *d);
  /* Profiling (--profile; optional, NULL: device time is not measured).
   * timer_reserve: at least n timing markers exist (CUDA events created
   * with timing enabled), ids 0 .. n-1; never called under capture.
   * timer_record: records marker `id` on `stream` (cudaEventRecord).
   * timer_elapsed: the milliseconds from marker a to marker b, both
   * completed (the host waited for their streams; cudaEventElapsedTime,
   * about 0.5 us resolution). */
  gcc_status (*timer_reserve)(void *self, int n, gcc_diag *d);
  gcc_status (*timer_record)(void *self, int id, int stream, gcc_diag *d);
  gcc_status (*timer_elapsed)(void *self, int a, int b, double *ms, gcc_diag *d);
  /* NVTX (optional): a named range around the work the runner issues for
   * one node or group, so that Nsight Systems shows the plan's names
   * (nvtxRangePushA / nvtxRangePop; no cost without a tool attached). */
  void (*range_push)(void *self, const char *name);
  void (*range_pop)(void *self);
} gcc_device_backend;

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_BACKEND_H */
