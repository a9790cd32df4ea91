/*
 * device_plan.h - executes a plan compiled for a CUDA device through a
 * device backend.
 *
 * The runner is device-independent: it lays out memory, binds every value,
 * turns fused groups into launches (generated kernels, cuBLASLt GEMMs with
 * their epilogue, cuDNN convolutions and poolings, copies) and issues them in schedule order through a table
 * of functions, gcc_device_backend. runtime/cuda/cuda_backend.c implements the
 * table with the CUDA runtime API, cuBLASLt and kernels loaded from NVRTC
 * cubins; the tests implement it on the host (generated kernels compiled
 * with tests/cuda_host_shim.h, GEMMs with OpenBLAS in column-major mode),
 * which is how this file is exercised without a GPU.
 *
 * Memory. One device allocation per plan holds, 256-byte aligned:
 *   the step arena (passes/memplan.c, the device's peak), two slots per
 *   per-step input copy (double buffering: step i reads slot i % 2 while
 *   the copy stream fills the other), the ReLU bit-masks of RELU_AUX_BIAS
 *   GEMMs (gemm_map.h), the constants placed on the device (uploaded once,
 *   at compile), and the loss kernels' bad-label flag.
 * Parameters, gradients and optimizer state are bound through `bind` (the
 * session's device mirror of its persistent arena); an optimizer group's
 * parameters must be consecutive there, in group order, with each tensor
 * padded to GCC_ARENA_ALIGN bytes (the contract of codegen/emit.h).
 *
 * A step: the host copies each input batch into a pinned staging buffer
 * and issues its H2D on the copy stream into this step's slot; the compute
 * stream waits for that copy, runs the step (or replays its CUDA Graph),
 * then copies the values read after the step (the loss; in EVAL the
 * prediction) and the loss kernels' bad-label flag D2D into an entry of a
 * read-back ring on the device, one entry per step. When the host reads an
 * entry (once per log interval) the whole ring comes back in one D2H copy.
 * Nothing is synchronised per step unless a node of the plan runs on the
 * CPU.
 *
 * CUDA Graphs: with cfg.cuda_graph, the step of each input slot is
 * captured on its second use and replayed after that. Plans whose kernel
 * arguments change every step (Adam's bias correction) or that have CPU
 * nodes inside the step are never captured (gcc_dplan_graph_note says why).
 */
#ifndef GCC_RUNTIME_DEVICE_PLAN_H
#define GCC_RUNTIME_DEVICE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/emit.h"
#include "codegen/nvrtc.h"
#include "runtime/executor.h"
#include "codegen/gemm_map.h"

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

/* A device, as the runner sees it. Every function returns GCC_OK or an
 * error with a message naming the call (the CUDA backend: the CUDA,
 * cuBLAS or cuDNN call, its error string, file and line). Asynchronous
 * operations are ordered on `stream`; host pointers given to copies are
 * pinned (host_alloc) unless stated. */
typedef struct gcc_device_backend {
  void *self;
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
  /* Loads a plan's kernels (NVRTC output `image`: cubin, else PTX) and
   * returns one handle per kernel of `ks` in kernels[]. */
  gcc_status (*load)(void *self, const gcc_kernel_set *ks, const gcc_nvrtc_output *image,
                     void **module, void **kernels, gcc_diag *d);
  void (*unload)(void *self, void *module);
  /* Launches kernel `k` (grid k->grid_dim, block k->block_dim) on the
   * compute stream; args[i] points at argument i (cudaLaunchKernel). */
  gcc_status (*launch)(void *self, void *kernel, const gcc_kernel_info *k, void **args,
                       gcc_diag *d);
  /* One column-major matmul on the compute stream (gemm_map.h): D =
   * epilogue(alpha op(A) op(B) + beta C); bias and aux as the epilogue
   * needs them, else NULL. */
  gcc_status (*gemm)(void *self, const gcc_colmajor_gemm *g, const void *a, const void *b,
                     const void *c, void *dst, void *bias, void *aux, gcc_diag *d);
  /* Runs node `node` of `g`, whose op is lowered to a library on the
   * device (GCC_CUDA_CUDNN: convolutions and poolings, forward and
   * backward), on the compute stream; in[k] / out[k] are the device
   * addresses of its inputs and outputs (NULL for an omitted input). */
  gcc_status (*library_op)(void *self, const gcc_graph *g, int node, void *const *in,
                           void *const *out, gcc_diag *d);
  gcc_status (*event_record)(void *self, int event, int stream, gcc_diag *d);
  gcc_status (*stream_wait)(void *self, int stream, int event, gcc_diag *d);
  gcc_status (*event_sync)(void *self, int event, gcc_diag *d);
  gcc_status (*sync)(void *self, gcc_diag *d); /* both streams */
  /* CUDA Graphs: capture the compute stream's work between begin and end
   * into graph `slot`; replay it. */
  gcc_status (*capture_begin)(void *self, gcc_diag *d);
  gcc_status (*capture_end)(void *self, int slot, gcc_diag *d);
  gcc_status (*graph_launch)(void *self, int slot, gcc_diag *d);
} gcc_device_backend;

typedef struct gcc_dplan_config {
  int sm;                       /* NVRTC target, 10 * major + minor (90 for sm_90) */
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
} gcc_dplan_config;

typedef struct gcc_dplan gcc_dplan;

/* Compiles `model` for opt->device (a CUDA device) and prepares it on `be`:
 * passes, memory plan, code generation, NVRTC (through the kernel cache),
 * kernel loading, the device allocation, constant upload. `bind` returns
 * the device address of PARAM / GRAD / OPT_STATE values (as gcc_plan_compile's).
 * Errors: those of the passes and of gcc_gemm_map; GCC_ERR_UNSUPPORTED for
 * a plan over several CUDA devices or an optimizer group whose parameters
 * are not laid out as emit.h requires; GCC_ERR_OUT_OF_MEMORY with the
 * requested, free and total device bytes and the largest consumers; the
 * backend's errors. */
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
 * entry. Returns without waiting for the device unless the plan has CPU
 * nodes. Errors: an unbound input; the backend's errors. */
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
/* Bytes of the plan's device allocation. */
size_t gcc_dplan_device_bytes(const gcc_dplan *p);
/* Steps replayed from a CUDA Graph so far, and why the plan is not
 * captured ("" when it is, or will be on its next steps). */
int64_t gcc_dplan_graph_replays(const gcc_dplan *p);
const char *gcc_dplan_graph_note(const gcc_dplan *p);

void gcc_dplan_free(gcc_dplan *p);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_DEVICE_PLAN_H */
