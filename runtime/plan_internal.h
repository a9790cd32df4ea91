/*
 * plan_internal.h - the plan runner's state (runtime/plan.c), shared with
 * the files that implement parts of plan.h (runtime/plan_run.c: the steps;
 * runtime/plan_info.c: queries and input staging). Not a public interface.
 */
#ifndef GCC_RUNTIME_PLAN_INTERNAL_H
#define GCC_RUNTIME_PLAN_INTERNAL_H

#include "runtime/plan.h"

#define DALIGN 256

typedef enum op_kind {
  OP_KERNEL,
  OP_GEMM,
  OP_COPY,
  OP_NODE,
  OP_CLEAR_BAD_LABEL,
  OP_LIBRARY,
  OP_EPILOGUE, /* a generated kernel doing a refused cuBLASLt epilogue's work */
} op_kind;

typedef struct op {
  op_kind kind;
  int kernel;             /* OP_KERNEL: index in ks; OP_EPILOGUE: in epi_ks */
  int group;              /* OP_KERNEL / OP_GEMM */
  gcc_colmajor_gemm gemm; /* OP_GEMM (as issued); OP_EPILOGUE: the group's full matmul */
  void *prepared;         /* OP_GEMM: the backend's prepared matmul (gemm_release) */
  int src, dst;           /* OP_COPY: values */
  size_t bytes;
  gcc_copy_kind ck;
  int node;               /* OP_NODE / OP_COPY / OP_LIBRARY */
  long long numel;        /* OP_KERNEL of an optimizer: floats of its flat sections */
  gcc_kernel_args cpu;    /* OP_NODE: the node, run by the CPU backend */
  int needs_sync;         /* OP_NODE: wait for the device first */
  int site;               /* OP_NODE: profiler site, when profiling */
  int wait_first, n_wait; /* OP_KERNEL of an optimizer: its buckets in p->waits */
  int sh_first, sh_n;     /* OP_NODE: its float32 shadows in p->shadows (16-bit operands) */
  /* OP_NODE: the bias of a Conv / ConvTranspose with a 16-bit result, added
   * after the result is rounded to 16 bits (as cuDNN's cudnnAddTensor on a
   * GPU), then rounded again; the kernel itself runs without it */
  const gcc_tensor *bias_after;
} op;

typedef struct input_copy {
  int src, dst; /* host input value, device copy value */
  size_t bytes;
  void *staging[2]; /* pinned */
  void *slot[2];    /* device */
  const void *host; /* bound for the next run */
  /* or gathered on the device (--dataset-on-device) */
  const void *gsrc;     /* device rows */
  const int64_t *gperm; /* device permutation */
  int64_t gfirst;
} input_copy;

typedef struct readback {
  int src, dst; /* device value, its host copy ("<value>@cpu") */
  int kept;     /* the model's value (loss / prediction) */
  size_t bytes;
} readback;

/* A float32 stand-in for a float16 / bfloat16 operand of a node the CPU
 * runs: CPU kernels compute in float32, so the runner widens 16-bit inputs
 * into their shadows before the node (exact) and rounds the node's float32
 * results into their 16-bit storage after it (round to nearest even,
 * graph/half.h), exactly where a CUDA plan stores 16 bits. Allocated when
 * the plan is built, never per step. */
typedef struct shadow {
  gcc_tensor t;     /* float32, the operand's shape; data owned */
  gcc_tensor *real; /* the bound 16-bit tensor */
  int out;          /* 1: a result (rounded after the node), 0: an input (widened before) */
} shadow;

struct gcc_plan {
  gcc_graph *g;
  gcc_mem_plan mem;
  const gcc_device_backend *cpu; /* the CPU backend: runs the nodes on the host */
  int has_be;                    /* 1: a CUDA device runs (part of) the plan ... */
  gcc_device_backend be;         /* ... through this backend */
  gcc_plan_config cfg;
  int device;
  gcc_mode mode;
  gcc_kernel_set ks;
  void *module;
  void **modules; /* the modules of ks's programs, when it was split (n_modules) */
  int n_modules;
  void **kernels;
  op *ops;
  int n_ops;
  input_copy *inputs;
  int n_inputs;
  readback *rb;
  int n_rb;
  int *hrb; /* values read after a step that are computed on the host */
  int n_hrb;
  gcc_tensor *hring; /* ring > 1: their copies, ring * n_hrb (data after the tensors) */
  int ring;          /* entries */
  void *ring_host;   /* pinned: ring * (rb bytes + bad-label int) */
  size_t ring_stride;
  size_t off_ring;         /* the device copy of the ring, in the plan's allocation */
  int64_t serial, fetched; /* steps issued; steps whose ring entries are on the host */
  int64_t checks_serial;   /* serial when gcc_plan_take_update_checks last read ctx's counts */
  int64_t *entry_serial;   /* per entry: the step serial that wrote it */
  size_t *rb_off;          /* per read-back: offset inside an entry */
  gcc_tensor *rb_tensors;  /* ring * n_rb */
  void *dev;               /* the plan's device allocation */
  size_t dev_bytes;
  /* cfg.share_device_arena: the device step arena, apart from `dev`
   * (dev_arena_bytes of it the memory plan's); else NULL, the arena being
   * at dev + off_arena */
  void *dev_arena;
  size_t dev_arena_bytes;
  int dev_arena_owned; /* 0: the caller's (cfg.shared_device_arena, or handed over) */
  size_t off_arena, off_aux, off_const, off_bad;
  size_t *aux_off;     /* per group: offset of its bit-mask, or SIZE_MAX */
  void **addr;         /* per value: storage (device or host), NULL when none */
  int *slot_of;        /* per value: input copy index whose slot it lives in, or -1 */
  gcc_tensor *tensors; /* per value, for CPU nodes */
  gcc_tensor **ptrs;
  void *host_arena;
  int host_arena_owned; /* 0: the caller's (cfg.shared_host_arena, or handed over) */
  gcc_cpu_ctx ctx;
  gcc_diag run_diag;
  int has_cpu_nodes, has_loss_kernel;
  int varying_args; /* kernel arguments set per step: 1 Adam's corrections, 2 the step (Dropout) */
  /* data-parallel: the buckets each optimizer kernel waits for, and the
   * gradient pointers and sizes of the largest AllReduce (filled per run) */
  int *waits, n_waits;
  void **coll_ptrs;
  int64_t *coll_numel;
  int coll_cap, has_collective;
  int64_t uses[2], replays, captures;
  void *graph[2];     /* per input slot: the captured step (graph_destroy), or NULL */
  int capture_failed; /* 1: a capture failed; the steps are launched (graph_note says why) */
  int staged, staged_copies, staged_h2d; /* gcc_plan_issue_inputs: 1 + its slot, its copies */
  int failed; /* a step failed after its inputs were staged: never run again */
  char fail_msg[400];
  size_t off_ws, ws_bytes;           /* the library calls' workspace in the plan's allocation */
  size_t off_scratch, scratch_bytes; /* the generated kernels' GCC_KARG_SCRATCH */
  gcc_kernel_set epi_ks;             /* generated epilogues of GEMMs cuBLASLt refused */
  void *epi_module, **epi_kernels;
  int n_fallbacks;
  int *fb_group;       /* per fallback: its GEMM group */
  int *fb_epilogue;    /* the epilogue cuBLASLt did not offer */
  char (*fb_why)[256]; /* and why (the heuristic's answer) */
  char graph_note[256];
  char saved_note[256]; /* the note before --profile turned capture off */
  int launches, copies;
  size_t *slot_off, *const_off; /* layout scratch (freed with the plan) */
  gcc_kernel_set gather_ks;     /* the row-gather kernel, loaded on first use */
  void *gather_module, *gather_kernel;
  gcc_prof_track *prof; /* non-NULL: profile every node run on the CPU */
  char **labels;        /* per op: its name for NVTX ranges and profiles */
  /* --profile on a device: CUDA event markers around every device op
   * (marker 0: the anchor; per input slot: the H2D pair, then a pair per
   * op), read when the step that recorded them is known to be done */
  int timed;
  gcc_prof_track *dev_track[2]; /* compute stream, copy stream */
  int site_h2d;
  int64_t anchor_host;    /* gcc_prof_now() when marker 0 was recorded; 0: not yet */
  int pending[2];         /* 1: slot's markers recorded, not read yet */
  int64_t pend_serial[2]; /* the step serial that recorded them */
  int64_t pend_step[2];   /* its optimizer step */
  int pend_h2d[2];        /* 1: its H2D pair was recorded */
  double prev_span[2];    /* device ms (from the anchor) of the last read step's compute */
  int has_prev_span;
  gcc_plan_device_profile dprof;
  shadow **shadows; /* float32 stand-ins of 16-bit operands of CPU nodes */
  int n_shadows;
};

/* The bytes of value v (its shape's elements times its dtype's size). */
static inline size_t gcc_plan_value_bytes_(const gcc_graph *g, int v) {
  return (size_t)gcc_shape_numel(&g->values[v].shape, NULL) * gcc_dtype_size(g->values[v].dtype);
}

/* GCC_KARG_FLAT_INPUTS: the node's inputs from its first gradient on lie one after another,
 * each padded to GCC_ARENA_ALIGN (the gradient section); 1: AmpNonFiniteCheck's scratch first */
static inline int gcc_plan_flat_first_(const gcc_graph *g, const gcc_node *n) {
  return n->n_inputs > 1 && (n->inputs[0] < 0 || g->values[n->inputs[0]].kind != GCC_VALUE_GRAD);
}

/* Where value v lives for input slot `slot` (a per-step input's slot
 * buffer, else its arena address); NULL for v < 0. */
static inline void *gcc_plan_ptr_of_(const gcc_plan *p, int v, int slot) {
  if (v < 0)
    return NULL;
  int k = p->slot_of[v];
  return k >= 0 ? p->inputs[k].slot[slot] : p->addr[v];
}

/* plan.c: NVRTC through the caller's hook (cfg.compile): `source` as
 * `program` into *out; GCC_ERR_UNSUPPORTED when the program links no
 * kernel compiler (gcc-run) */
gcc_status gcc_plan_compile_kernels_(const gcc_plan *p, const char *source, const char *program,
                                     gcc_nvrtc_output *out, gcc_diag *d);

/* plan.c: loads the image of `img` that the device runs (a cubin for
 * sm_`arch` or PTX for compute_`arch`) into *module and looks up the
 * kernels of ks into `kernels` */
gcc_status gcc_plan_load_image_(gcc_plan *p, const gcc_kernel_set *ks, const gcc_nvrtc_output *img,
                                int arch, void **module, void **kernels, gcc_diag *d);

/* plan.c: a step's inputs for input slot `slot`: host -> pinned staging
 * (no copy when the caller wrote there: gcc_plan_input_staging) -> the
 * slot, on the copy stream, once the step that last read this slot (the
 * plan's step i - 2) is done, then the slot's input-ready event. *copied:
 * the H2Ds issued; *h2d_marked: --profile's H2D markers recorded; *intact:
 * 1 when an error left nothing issued. */
gcc_status gcc_plan_stage_inputs_(gcc_plan *p, int slot, int *copied, int *h2d_marked, int *intact,
                                  gcc_diag *d);

#endif /* GCC_RUNTIME_PLAN_INTERNAL_H */
