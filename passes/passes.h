/*
 * passes.h - the compiler passes and the pass manager.
 *
 * Every pass has the same entry shape (gcc_pass_fn),
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

/* Why placement put a node where it is (shown by --dump-placement). */
typedef enum gcc_placement_reason {
  GCC_PLACED_DEFAULT = 0,      /* the default device (no --device given) */
  GCC_PLACED_REQUESTED,        /* --device */
  GCC_PLACED_PINNED,           /* the node's own `device` pin in the model */
  GCC_PLACED_NO_KERNEL,        /* soft placement: no implementation on the requested device */
  GCC_PLACED_HOST_COMPUTE,     /* shape or index computation (integer outputs) kept on the host */
  GCC_PLACED_FOLLOWS_INPUT,    /* a view (Reshape, Flatten) stays with the value it views */
  GCC_PLACED_WITH_PARAMETER,   /* an optimizer update runs where its parameter lives */
  GCC_PLACED_COPY_DESTINATION, /* a copy node runs on (is issued for) its destination */
  GCC_PLACED_WITH_GRADIENTS,   /* an all-reduce runs where its gradients are */
  GCC_PLACED_LAYOUT,           /* a layout conversion runs where its value lives */
  GCC_PLACEMENT_REASON_COUNT
} gcc_placement_reason;

/* Short stable name of a reason ("pinned", "no-kernel", ...). */
const char *gcc_placement_reason_name(int reason);

struct gcc_options;

/* A pass: transforms the graph in place (see the top of this file). */
typedef gcc_status (*gcc_pass_fn)(gcc_graph *g, const struct gcc_options *opt, gcc_diag *d);

typedef struct gcc_pass {
  const char *name; /* for --dump-after and messages */
  gcc_pass_fn fn;
} gcc_pass;

/* What the passes need to know about the devices they compile for. The
 * layers above answer: runtime/compile.c fills it from each backend's
 * supports_op (runtime/cpu, codegen/lowering.h for CUDA devices), the CPU
 * backend's workspace sizes, and codegen's fusion pass. */
typedef struct gcc_target {
  /* 1 if `device` (GCC_DEV_CPU or GCC_DEV_CUDA(n)) can run op `op`; placement asks it */
  int (*supports_op)(int device, int op);
  /* passes that lower the placed graph for its devices (CUDA: fusion), run after copy
   * insertion, in order */
  const gcc_pass *lower;
  int n_lower;
  /* How node `node` (placed on a CUDA device) can run its 4-D float
   * operands (graph/ir.h gcc_layout), for the layout pass
   * (passes/layout.c): GCC_LAYOUT_CLASS_NCHW (NCHW only), _ANY
   * (elementwise over operands of one shape: either layout, all operands
   * alike), _NHWC (a library call that takes NHWC tensors: cuDNN's
   * convolutions and poolings). NULL: every node NCHW. */
  int (*layout_class)(const gcc_graph *g, int node);
} gcc_target;

enum { GCC_LAYOUT_CLASS_NCHW = 0, GCC_LAYOUT_CLASS_ANY, GCC_LAYOUT_CLASS_NHWC };

/* --layout: which layout convolution chains on CUDA devices run in. */
typedef enum gcc_layout_choice {
  GCC_LAYOUT_AUTO = 0, /* NHWC for tf32 / bf16 / fp16 plans, NCHW for fp32 */
  GCC_LAYOUT_CHOOSE_NCHW,
  GCC_LAYOUT_CHOOSE_NHWC,
  GCC_LAYOUT_CHOICE_COUNT
} gcc_layout_choice;

/* "auto", "nchw", "nhwc" ("?" out of range); the choice called `name`, or -1. */
const char *gcc_layout_choice_name(int c);
int gcc_layout_choice_lookup(const char *name);

typedef struct gcc_options {
  const gcc_target *target; /* the devices' answers (required by gcc_run_passes) */
  gcc_mode mode;
  int64_t batch_size;   /* binds the symbolic batch dim of the inputs */
  gcc_optimizer opt;    /* optimizer and hyper-parameters (TRAIN) */
  int device;           /* GCC_DEV_CPU or GCC_DEV_CUDA(n): where unpinned nodes go */
  int device_explicit;  /* 1 when the user chose it (--device), 0 for the default */
  int n_cuda_devices;   /* CUDA devices of the target (probed, or 1 from --cuda-arch) */
  int strict_placement; /* a soft fallback is an error instead */
  /* Per op id (GCC_OP_COUNT entries), or NULL: non-zero treats the op as
   * having no CUDA kernel on this target (a kernel missing for an
   * architecture, or comparing placements); the tests of soft placement
   * use it. */
  const unsigned char *cuda_disabled;
  /* Data-parallel training (TRAIN): the ranks (world size; <= 1: one
   * process, no all-reduce) and the bucket size of the gradient all-reduce
   * in bytes (<= 0: GCC_DEFAULT_BUCKET_BYTES). */
  int world_size;
  int64_t bucket_bytes;
  FILE *warn_file;        /* placement warnings (a copy inside the step); NULL: stderr */
  const char *dump_after; /* pass name, or "all"; NULL: no dump */
  /* --precision (graph/ir.h gcc_precision): BF16 / FP16 run the autocast
   * pass (mixed precision); FP32 (0, the default) and TF32 leave every value
   * float32 */
  int precision;
  /* --no-deterministic: 1 lets cuDNN's convolutions use algorithms whose
   * results vary run to run (recorded in g->nondeterministic by the
   * autocast pass); 0, the default: deterministic ones only */
  int nondeterministic;
  FILE *dump_file; /* where dumps go (stderr if NULL) */
  /* BF16 / FP16 training: 1 makes every parameter's 16-bit copy a Cast run
   * each step, as before the optimizer update wrote the copies
   * (passes/autocast.c); the same values, for tests to compare. No flag
   * sets it. */
  int param_copy_casts;
  /* 1: the attention pass leaves MatMul -> Softmax -> MatMul chains as they
   * are (bench/attention_bench's unfused plan). No flag sets it. */
  int no_attention_fusion;
  /* 1: the packed-attention lowering leaves Attention's Slice / Reshape /
   * Transpose chains as they are (as GCC_CPU_PACKED_ATTENTION=0 does). */
  int no_packed_attention;
  /* 1: the gelu-aux lowering leaves Gelu and GeluGrad as they are (as
   * GCC_CPU_GELU_AUX=0 does). */
  int no_gelu_aux;
  /* 1: the LayerNorm-backward lowering leaves the LayerNormGrad nodes as
   * they are (as GCC_CPU_LN_GRAD_ALL=0 does). */
  int no_ln_grad_all;
  /* 1: that lowering leaves the residual gradient's Add(dX, R) as it is
   * (as GCC_CPU_LN_GRAD_RESIDUAL=0 does). No flag sets it. */
  int no_ln_grad_residual;
  /* --layout (gcc_layout_choice; 0: auto) */
  int layout;
  /* Gradient accumulation (TRAIN; --grad-accum K): grad_accum K > 1
   * micro-batches per optimizer step, each one's backward seeded with 1/K
   * (PyTorch's (loss / K).backward()); accum_role says which micro-step the
   * plan runs (gcc_accum_role). K <= 1: one batch per step, role ignored. */
  int grad_accum;
  int accum_role;
} gcc_options;

/* The micro-steps of an optimizer step under gradient accumulation:
 * FIRST writes the gradients (no update), MIDDLE adds to them in place
 * (p.grad += g, no update), LAST adds to them and then clips, checks
 * (fp16 loss scaling) and updates once (optimizer.step()). */
typedef enum gcc_accum_role {
  GCC_ACCUM_FIRST = 0,
  GCC_ACCUM_MIDDLE,
  GCC_ACCUM_LAST,
} gcc_accum_role;

/* Prepares a loaded model for compilation: binds the batch, infers shapes,
 * and for GCC_MODE_EVAL prunes everything that does not lead to the loss or
 * the prediction. Errors: GCC_ERR_SHAPE / GCC_ERR_INVALID_GRAPH naming the
 * node. */
gcc_status gcc_pass_infer(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* The attention pass (passes/attention.c): MatMul(Q, Transpose(K)) -> scale
 * (Mul or Div by constants, on the scores or on Q and K) -> optional Add of
 * a float32 mask -> Softmax(axis -1) -> MatMul(., V), every intermediate
 * read by the chain only, becomes one Attention node (graph/ops.h; a
 * constant causal -Inf or -FLT_MAX triangle becomes is_causal; K^T may be
 * PyTorch's default exporter's Reshape -> Transpose -> Reshape). Runs after infer in
 * every mode. Errors: GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_pass_attention(gcc_graph *g, const struct gcc_options *opt, gcc_diag *d);

/* The packed-attention lowering (passes/packed_attention.c; a target's
 * lowering pass, before fusion): where opt->target supports AttentionPacked
 * on the Attention node's device, an Attention whose Q, K, V are
 * Transpose(Reshape(Slice(P))) of the three thirds of P's last axis, and
 * whose O goes through Transpose and Reshape back to rows, becomes
 * AttentionPacked(P); its AttentionGrad, with dO from Transpose(Reshape(dY))
 * and dQ, dK, dV transposed back and concatenated along the last axis,
 * becomes AttentionPackedGrad(P, Y, L, dY). Chains whose values are read
 * elsewhere or seen by the caller are left as they are. Off under
 * GCC_CPU_PACKED_ATTENTION=0 or opt->no_packed_attention. Errors: out of
 * memory. */
gcc_status gcc_pass_packed_attention(gcc_graph *g, const struct gcc_options *opt, gcc_diag *d);

/* The gelu-aux lowering (passes/gelu_aux.c; a target's lowering pass,
 * before fusion): where opt->target supports GeluAux on the Gelu node's
 * device, a float32 Gelu(X) whose X is also read by GeluGrad(dY, X) nodes
 * (autodiff's backward, same approximation and device) becomes
 * Y, D = GeluAux(X), and each such GeluGrad becomes Mul(dY, D): the same
 * bits, the derivative computed in the forward's pass instead of
 * recomputing Phi and phi. Off under GCC_CPU_GELU_AUX=0 or
 * opt->no_gelu_aux. Errors: out of memory. */
gcc_status gcc_pass_gelu_aux(gcc_graph *g, const struct gcc_options *opt, gcc_diag *d);

/* The LayerNorm-backward lowering (passes/layer_norm_grad.c; a target's
 * lowering pass): where opt->target supports LayerNormGradAll on their
 * device, two or three LayerNormGrad nodes of one LayerNormalization (the
 * same dY, X, Scale, axis, epsilon, device and phase; outputs dX, dScale,
 * dB) become one LayerNormGradAll writing the same values (bitwise), in
 * the place of the group's first node; an Add(dX, R) that is dX's only
 * reader (the residual stream's gradient, R ready before the group) goes
 * into it too (R its fourth input, dX + R its dX, Add's bits; off under
 * GCC_CPU_LN_GRAD_RESIDUAL=0 or opt->no_ln_grad_residual). Off under
 * GCC_CPU_LN_GRAD_ALL=0 or opt->no_ln_grad_all. Errors: out of memory. */
gcc_status gcc_pass_layer_norm_grad(gcc_graph *g, const struct gcc_options *opt, gcc_diag *d);

/* Reverse-mode automatic differentiation (TRAIN). In every other mode it
 * puts each node that has two forms in its evaluation form
 * (BatchNormalization normalises with its running estimates, Dropout and
 * the attention's dropout are off: passes/grad_rules.h `eval`), then
 * removes the nodes whose evaluation form is the identity (Dropout:
 * `eval_identity`), their readers reading the input, unless the output is
 * a graph output or the training spec's loss or prediction. In TRAIN it
 * builds the backward graph from the scalar loss named by the training
 * spec, accumulating gradient contributions of values used more than once,
 * writes each parameter's gradient into a GRAD value "<param>.grad", then
 * appends one optimizer-update node per parameter (SGD or Adam) with its
 * state values ("<param>.momentum_buffer", "<param>.exp_avg",
 * "<param>.exp_avg_sq": PyTorch's state names). Parameters whose gradient
 * does not reach the loss are not updated (PyTorch: grad is None). With
 * fp16 loss scaling (opt->opt.scaler, graph/ir.h gcc_loss_scale) the
 * backward starts from the persistent value GCC_SCALER_SCALE_NAME instead
 * of the constant 1, one AmpNonFiniteCheck over every gradient precedes the
 * updates, which take the scale, found_inf and the applied-step count as
 * their last inputs (graph/ops.h SCALER_IN_*), and one AmpUpdateScale
 * follows them (torch.amp.GradScaler's scale, unscale_, step, update).
 * Gradient accumulation (opt->grad_accum K > 1): the seed is 1/K (times
 * the scale under loss scaling); in the FIRST micro-step's plan the
 * gradients are written and nothing else follows; in the MIDDLE and LAST
 * ones each parameter's gradient of the micro-batch is added in place to
 * the accumulated one, read as the GRAD value "<param>.grad_acc" (no
 * producer; the same persistent storage as "<param>.grad", which the Add
 * writes), and only LAST has the clipping, the loss-scaling check, the
 * updates and the scale's update.
 * Errors: GCC_ERR_INVALID_GRAPH if the loss is missing or not a float32
 * scalar; GCC_ERR_UNSUPPORTED for a gradient an op does not provide. */
gcc_status gcc_pass_autodiff(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* DistributedDataParallel's default bucket_cap_mb: 25 MiB. */
#define GCC_DEFAULT_BUCKET_BYTES ((int64_t)25 << 20)

/* The all-reduce of data-parallel training (TRAIN with opt->world_size > 1;
 * a no-op otherwise): groups the gradients read by optimizer updates into
 * buckets of opt->bucket_bytes in the order the backward pass produces them
 * (DistributedDataParallel's bucketing), and adds one AllReduce node per
 * bucket ("all_reduce/bucketK", attributes bucket = K and mean = 1 unless the
 * loss's reduction is "sum") right after the node that produces the bucket's
 * last gradient; every update comes after the AllReduce of its gradient.
 * Errors: GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_pass_all_reduce(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* Mixed precision (opt->precision BF16 or FP16; FP32 and TF32 only record
 * the precision in g->precision): torch.autocast's rules over the whole
 * training graph, after autodiff (passes/autocast.c): GEMMs read and write
 * 16-bit values and accumulate in float32; reductions, softmax, losses,
 * normalization and the optimizer read float32; elementwise ops run in
 * their inputs' dtype. Conversions are Cast nodes (one per value and
 * dtype), scheduled right before their first reader; parameters,
 * gradients, optimizer state, graph outputs, the loss and the prediction
 * keep their dtype (a 16-bit result is cast back into them). A trained
 * parameter's 16-bit copy is no Cast: its update node writes it as its
 * output ("<param>.bf16" / "<param>.fp16", a persistent OPT_STATE value)
 * for the next step (unless opt->param_copy_casts). Errors:
 * GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_pass_autocast(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* The autocast class of op `op` ("low", "fp32", "promote" or "keep"), from
 * the pass's per-op table; NULL for an op without an entry or out of range. */
const char *gcc_autocast_class_name(int op);

/* 1 when node `n` is a Cast (made by the autocast pass) whose output is of
 * dtype `to`; 0 otherwise. */
int gcc_autocast_is_cast_to(const gcc_node *n, gcc_dtype to);

/* Device placement: gives every node and value a device and every node
 * the reason for it. Precedence: the node's pin > --device > the default.
 * Rules, in order: an optimizer update runs where its parameter lives; a
 * view stays with its input; a node whose outputs are all integers
 * (shape/index computation) stays on the host; an op without an
 * implementation on the chosen device falls back to the CPU (an error
 * naming the node, its op and both devices under strict placement).
 * Graph inputs live on the host (the data loader fills them); a parameter
 * lives on the device of its first consumer, with its gradient and
 * optimizer state. Errors: GCC_ERR_INVALID_GRAPH for a pin naming a device
 * the target lacks; GCC_ERR_UNSUPPORTED under strict placement. */
gcc_status gcc_pass_placement(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* Copy insertion: exactly one Copy node per (value, destination device),
 * named "<value>@<device>" (e.g. "image@cuda:0"), on every edge that
 * crosses devices, plus a copy to the host of the values read after a step
 * (the loss; in EVAL also the prediction). Copies of constants are marked
 * once (done when the session starts). A per-step copy of an activation
 * inside the step (a CPU-only node between device nodes) is reported on
 * opt->warn_file naming the nodes responsible. */
gcc_status gcc_pass_copy_insertion(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* 1 when the layout pass makes the convolution chains of CUDA nodes NHWC
 * under `opt`: --layout nhwc, or auto with precision tf32, bf16 or fp16
 * (cuDNN's tensor-core kernels read and write NHWC natively; NCHW tensors
 * are transposed inside cuDNN). fp32 stays NCHW under auto: without tensor
 * cores cuDNN's NCHW FMA kernels are its best-tuned ones, and NHWC only adds
 * the boundary transposes. */
int gcc_layout_wants_nhwc(const gcc_options *opt);

/* The layout pass (passes/layout.c; after copy insertion, before the
 * target's lowering, when gcc_layout_wants_nhwc): every CUDA node of class
 * NHWC (opt->target->layout_class) runs NHWC, and every node of class ANY
 * whose 4-D float input is NHWC follows it; their 4-D float outputs become
 * NHWC values. Explicit layout conversions are inserted where a value
 * crosses layouts: one Transpose node per (value, layout), named
 * "<value>@NHWC" / "<value>@NCHW", with perm [0, 1, 2, 3] (logically the
 * identity; the input's and output's layouts make it a physical transpose),
 * on the value's device. Graph inputs and outputs, parameters, gradients,
 * optimizer state, the loss and the prediction stay NCHW: an NHWC node that
 * writes one writes an NHWC temporary "<value>.nhwc" converted into it.
 * Errors: GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_pass_layout(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* 1 when node `node` is a layout conversion made by the layout pass (one
 * input and one output of one shape and different layouts). */
int gcc_layout_is_conversion(const gcc_graph *g, int node);

/* Checks IR invariants: SSA (one producer per value), every input defined
 * before use, topological order, known dtypes and shapes of every value a
 * node touches. GCC_ERR_INTERNAL naming the offending node when one fails. */
gcc_status gcc_verify(const gcc_graph *g, gcc_diag *d);

/* Runs infer, autodiff, placement, copy insertion, then the target's
 * lowering passes (opt->target->lower: fusion) in order, verifying after
 * each and dumping where asked. GCC_ERR_INVALID_ARGUMENT without a target
 * or for a --dump-after naming no pass. */
gcc_status gcc_run_passes(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* Checks a --dump-after name against the passes gcc_run_passes runs for
 * target `t` ("all" or a pass name; NULL is fine), before anything is
 * compiled, so that a mistyped name is a command-line error. Errors:
 * GCC_ERR_INVALID_ARGUMENT naming the flag and listing the passes. */
gcc_status gcc_check_dump_after(const char *name, const gcc_target *t, gcc_diag *d);

/* Prints the IR: one line per node with phase, op, inputs, outputs, shapes. */
void gcc_dump_graph(const gcc_graph *g, FILE *f);

#ifdef __cplusplus
}
#endif

#endif /* GCC_PASSES_PASSES_H */
