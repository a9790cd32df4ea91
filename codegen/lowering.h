/*
 * lowering.h - how each op of graph/ops.h runs on a CUDA device, as plain
 * data: codegen's per-op table. Placement asks it whether a CUDA device can
 * run an op (gcc_cuda_supports_op: no GPU and no CUDA library needed), the
 * fusion pass (codegen/fusion.c) reads from it which nodes may share a
 * kernel or fold into a cuBLASLt GEMM as its epilogue, and the emitter
 * (codegen/emit.c) the code of each op. The CUDA backend
 * (runtime/cuda/cuda_ops.c) keeps the library calls of LIBRARY ops.
 *
 * The group kinds and the GEMM epilogues that fusion records in the IR
 * (gcc_group.kind, gcc_group.epilogue) are defined here too.
 */
#ifndef GCC_CODEGEN_LOWERING_H
#define GCC_CODEGEN_LOWERING_H

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What an op becomes on a CUDA device. */
typedef enum gcc_lowering_kind {
  GCC_LOWER_UNSET = 0, /* an entry left empty (tests/op_tables_test fails on it) */
  GCC_LOWER_NONE,      /* no CUDA implementation: soft placement runs it on the CPU */
  GCC_LOWER_POINTWISE, /* one element at a time (`expr`): fused into pointwise chains */
  GCC_LOWER_REDUCTION, /* a broadcast reduction: may end a pointwise chain */
  GCC_LOWER_GEMM,      /* a cuBLASLt matmul; epilogues fold into it */
  GCC_LOWER_LIBRARY,   /* one call of a library on the device (`call`: cuDNN) */
  GCC_LOWER_VIEW,      /* a view of its input: no kernel */
  GCC_LOWER_COPY,      /* cudaMemcpyAsync, not a launch */
  GCC_LOWER_LOSS,      /* a loss: one single-block kernel, fused with its gradient op */
  GCC_LOWER_LOSS_GRAD, /* the gradient of a loss: in its loss's kernel */
  GCC_LOWER_OPTIMIZER, /* one kernel per device over the flat persistent arena */
  GCC_LOWER_KERNEL,    /* a generated kernel of its own (`kernel`), never fused: row
                          reductions, index maps (Softmax, Concat, Transpose, Pad, ...) */
  GCC_LOWERING_KIND_COUNT
} gcc_lowering_kind;

/* How cuBLASLt can fold an op into the GEMM that produces its input. */
typedef enum gcc_epilogue_role {
  GCC_EPIROLE_NONE = 0,
  GCC_EPIROLE_RELU,      /* relu(GEMM + bias): RELU_BIAS / RELU_AUX_BIAS */
  GCC_EPIROLE_RELU_GRAD, /* dX masked by the forward ReLU's bit-mask: DRELU */
  GCC_EPIROLE_BIAS_GRAD, /* the column sums of a GEMM operand or output: BGRAD* */
} gcc_epilogue_role;

struct gcc_emitter;

/* Emits the kernel of a LOSS or OPTIMIZER group (codegen/emit.c): `fwd`
 * and `grad` are the loss node and its gradient node (-1 when absent; both
 * -1 for an optimizer group). */
typedef gcc_status (*gcc_group_emit_fn)(struct gcc_emitter *e, int group, int fwd, int grad);

/* Emits the generated kernel of node `node`, alone in group `group`
 * (codegen/emit.c): KERNEL ops, and GEMM, LIBRARY or POINTWISE ops whose `fits` says
 * the library cannot run this node. */
typedef gcc_status (*gcc_node_emit_fn)(struct gcc_emitter *e, int group, int node);

/* 1 if the GEMM, library call or pointwise expression of the op's kind can
 * run node `node` (its shapes and attributes); 0: it runs as the entry's
 * `kernel` instead. */
typedef int (*gcc_lowering_fits_fn)(const gcc_graph *g, int node);

/* One entry of the table (codegen/lowering.c). */
typedef struct gcc_lowering {
  gcc_lowering_kind kind;
  /* POINTWISE: the float expression of one element, with {0}, {1}, {2} for
   * the op's inputs ("{0} + {1}") and {f0}, {f1} for the node's float
   * attributes at those schema positions (graph/ops.h), as literals */
  const char *expr;
  /* POINTWISE ops whose expression depends on a string attribute (Gelu's
   * `approximate`): the expression of node `n` (attributes resolved); NULL:
   * `expr` */
  const char *(*expr_of)(const gcc_node *n);
  gcc_epilogue_role epilogue;
  /* GEMM: 1 when the op has Gemm's attributes (alpha, beta, transA, transB)
   * and optional C input; 0 for a plain A @ B (MatMul) */
  int gemm_attrs;
  const char *call;          /* LIBRARY: the library function, for reports and manifests */
  int loss_grad;             /* LOSS: the op of its gradient node */
  gcc_group_emit_fn emit;    /* LOSS, LOSS_GRAD, OPTIMIZER: the kernel's emitter */
  const char *none;          /* NONE: why there is no CUDA implementation */
  gcc_node_emit_fn kernel;   /* KERNEL: the emitter; GEMM / LIBRARY / POINTWISE: the fallback
                              when `fits` refuses a node */
  gcc_lowering_fits_fn fits; /* GEMM / LIBRARY / POINTWISE: NULL = every node fits (a
                              POINTWISE op that does not fit is a KERNEL: Dropout in
                              training) */
  /* 1: `kernel` loads float16 / bfloat16 operands into float and stores
   * 16-bit results rounded to nearest even (an op the autocast pass may put
   * in 16 bits); 0: it reads and writes float32 only, and a 16-bit operand
   * is an error naming the node */
  int kernel16;
  /* LIBRARY convolutions, whose cuDNN algorithm is chosen by timing when a
   * plan is built (runtime/cuda/cudnn_conv.h): GCC_CONV_FORWARD for Conv
   * (a ReLU that alone reads its float32 output joins its call:
   * codegen/fusion.h gcc_fusion_conv_relu), GCC_CONV_OTHER for the
   * backward-data, backward-filter and ConvTranspose calls; 0 otherwise
   * (ConvGradBias has no algorithm) */
  int conv;
  /* GCC_NHWC_LIBRARY: the LIBRARY call takes NHWC tensors (cuDNN's
   * convolutions and poolings: CUDNN_TENSOR_NHWC descriptors, filters in
   * KRSC); GCC_NHWC_KERNEL: the generated `kernel` reads and writes its 4-D
   * operands in either layout (BatchNormalization, BatchNormGrad:
   * codegen/emit_batchnorm.c). The layout pass may run such a node
   * channels-last (gcc_cuda_layout_class); 0: NCHW only */
  int nhwc;
} gcc_lowering;
enum { GCC_CONV_FORWARD = 1, GCC_CONV_OTHER = 2 };
enum { GCC_NHWC_LIBRARY = 1, GCC_NHWC_KERNEL = 2 };

/* The entry of op `op`; NULL when `op` is out of range. */
const gcc_lowering *gcc_lowering_of(int op);

/* 1 if a CUDA device runs op `op` (its lowering is not NONE). */
int gcc_cuda_supports_op(int op);

/* The kind node `node` lowers to: its op's kind, or KERNEL when the op's
 * `fits` refuses the node (a batched MatMul, a pooling cuDNN cannot
 * express, Dropout in training). */
gcc_lowering_kind gcc_lowering_kind_of(const gcc_graph *g, int node);

/* The layout class of node `node` on a CUDA device, for the layout pass
 * (passes/passes.h gcc_target.layout_class): GCC_LAYOUT_CLASS_NHWC for a
 * node whose entry's `nhwc` covers the way it runs (GCC_NHWC_LIBRARY and
 * its library runs it: a pooling `fits` refuses is a generated NCHW
 * kernel; GCC_NHWC_KERNEL and it is a generated KERNEL); GCC_LAYOUT_CLASS_ANY
 * for a POINTWISE node whose inputs and outputs are all floating-point of
 * one 4-D shape (no broadcast: element i of every operand is the same
 * logical element in either layout); GCC_LAYOUT_CLASS_NCHW otherwise. */
int gcc_cuda_layout_class(const gcc_graph *g, int node);

/* What one fused group becomes on a CUDA device (gcc_group.kind). */
typedef enum gcc_group_kind {
  GCC_GROUP_POINTWISE = 0, /* elementwise/broadcast ops, optionally ending in a
                              reduction: one generated kernel */
  GCC_GROUP_GEMM,          /* a GEMM with the epilogue folded into it: one cuBLASLt call */
  GCC_GROUP_LOSS,          /* a loss and its gradient: one generated kernel */
  GCC_GROUP_OPTIMIZER,     /* every update of one optimizer on a device: one generated
                              kernel over the flat persistent arena */
  GCC_GROUP_COPY,          /* a host-device copy: cudaMemcpyAsync, not a launch */
  GCC_GROUP_CUDNN,         /* one cuDNN call (convolution or pooling, forward or backward;
                              the lowering's `call` names it): a launch of its own, never
                              fused with generated kernels */
  GCC_GROUP_KIND_COUNT
} gcc_group_kind;

/* cuBLASLt epilogues (gcc_group.epilogue, and the column-major call of
 * codegen/gemm_map.h), with the values of cublasLtEpilogue_t of the same
 * names (CUDA 11.3+). Fusion forms the row-major ones; gemm_map turns
 * BGRADA into BGRADB when it swaps the operands. */
typedef enum gcc_epilogue {
  GCC_EPI_DEFAULT = 1,         /* plain GEMM (beta * C added by the GEMM itself) */
  GCC_EPI_BIAS = 4,            /* + bias broadcast over rows */
  GCC_EPI_RELU_BIAS = 6,       /* relu(x + bias) */
  GCC_EPI_RELU_AUX_BIAS = 134, /* relu(x + bias), keeping the ReLU mask for DRELU */
  GCC_EPI_DRELU = 136,         /* dX masked by the forward ReLU */
  GCC_EPI_DRELU_BGRAD = 152,   /* dX masked by the forward ReLU, and its column sums (bias grad) */
  GCC_EPI_BGRADA = 256,        /* also the bias gradient: row sums of operand A */
  GCC_EPI_BGRADB = 512,        /* also the bias gradient: row sums of operand B */
} gcc_epilogue;

/* "pointwise", "gemm", ... ("?" when out of range). */
const char *gcc_group_kind_name(int kind);
/* "CUBLASLT_EPILOGUE_RELU_BIAS", ... ("?" for another value). */
const char *gcc_epilogue_name(int epilogue);

#ifdef __cplusplus
}
#endif

#endif /* GCC_CODEGEN_LOWERING_H */
