/*
 * import_ops_internal.h - what the files of the ONNX op mapping share: the
 * small helpers of the converters and the converters that the table in
 * onnx/import_ops.c names. Internal to onnx/import_ops*.c.
 *
 *   onnx/import_ops.c              the table (kOnnxOps): op types, version histories, converters
 *   onnx/import_ops_elementwise.c  folded ops (Constant, Identity, Dropout...) and elementwise ops
 *   onnx/import_ops_conv.c         Gemm, MatMul, Conv, the pools, BatchNormalization, ConvTranspose
 *   onnx/import_ops_index.c        Gather, GatherElements, Slice, Split, Expand, Tile,
 *                                  GatherND (as Gather)
 *   onnx/import_ops_shapecalc.c    Shape, Cast, CastLike, Range: shape arithmetic folded at
 *                                  import
 *   onnx/import_ops_fold.c         Add, Sub, Mul, Div, Sqrt, Reciprocal of float constants,
 *                                  Max and Min of integer constants, Transpose and
 *                                  ScatterND of constants
 *   onnx/import_ops_sequence.c     SplitToSequence, SequenceAt (Slices at import)
 *   onnx/import_ops_reduce.c       ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceL2
 *   onnx/import_ops_norm.c         LayerNormalization
 *   onnx/import_ops_loss.c         NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
 *   onnx/import_ops_math.c         Gelu, Erf, Exp, Log, Neg, Abs, Reciprocal and the GELU
 *                                  patterns of opsets < 20 (Pow: import_ops_elementwise.c)
 *   onnx/import_ops_select.c       Size (folded), Trilu, ArgMax, ArgMin
 *   onnx/import_ops_logic.c        Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Not, And,
 *                                  Or, Xor, Where (bool values)
 *   onnx/import_ops_einsum.c       Einsum (Transpose, Reshape, MatMul, ReduceSumTo, Slice)
 *   onnx/import_ops_shape.c        Softmax, LogSoftmax, LRN and the shape ops (Flatten, Reshape,
 *                                  Squeeze, Unsqueeze, Concat, Transpose, Pad)
 */
#ifndef GCC_ONNX_IMPORT_OPS_INTERNAL_H
#define GCC_ONNX_IMPORT_OPS_INTERNAL_H

#include "onnx/import_internal.h"

#define F32 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

/* ---- small helpers ---------------------------------------------------------------- */

static inline gcc_status oom(gcc_diag *d) {
  return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (ONNX import)");
}

static inline const tshape *in_sh(nctx *c, int k) {
  return &imp_val(c->I, in_idx(c, k))->sh;
}
static inline int in_dt(nctx *c, int k) {
  return imp_val(c->I, in_idx(c, k))->onnx_dt;
}

static inline gcc_status need_inputs(nctx *c, int lo, int hi, gcc_diag *d) {
  int n = n_in(c);
  if (n < lo || n > hi)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "takes %d to %d inputs, got %d", lo, hi, n);
  for (int k = 0; k < lo; k++)
    if (in_idx(c, k) < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "required input %d is empty", k);
  return GCC_OK;
}

/* Outputs from `from` on must be absent or unused. */
static inline gcc_status unused_outputs(nctx *c, int from, const char *what, gcc_diag *d) {
  for (int k = from; k < n_out(c); k++)
    if (out_used(c, k))
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "output %d (%s) is used; it is not supported", k,
                      what);
  return GCC_OK;
}

static inline gcc_status need_float(nctx *c, int k, gcc_diag *d) {
  int dt = in_dt(c, k);
  if (dt != F32)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "input %d ('%s') has dtype %s; this op is supported for float only", k,
                    imp_val(c->I, in_idx(c, k))->name, onnx_dtype_name(dt));
  return GCC_OK;
}

/* float, int64 or int32 (what Concat, Transpose, Pad and the integer
 * arithmetic of Add / Sub / Mul / Div take; bool is read by the comparison,
 * logical and Where ops of onnx/import_ops_logic.c only). */
static inline gcc_status need_computable(nctx *c, int k, gcc_diag *d) {
  int dt = in_dt(c, k);
  gcc_dtype gdt = onnx_to_gcc_dtype(dt);
  if (gdt == GCC_DT_UNDEFINED || gdt == GCC_DT_BOOL)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "input %d ('%s') has dtype %s (supported: float, int64, int32)", k,
                    imp_val(c->I, in_idx(c, k))->name, onnx_dtype_name(dt));
  return GCC_OK;
}

/* float, int64, int32 or bool: what the data-movement ops (Concat,
 * Transpose, Slice, Expand, Gather, GatherElements) copy, bool included (the
 * attention masks the PyTorch exporters build). */
static inline gcc_status need_movable(nctx *c, int k, gcc_diag *d) {
  int dt = in_dt(c, k);
  if (onnx_to_gcc_dtype(dt) == GCC_DT_UNDEFINED)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "input %d ('%s') has dtype %s (supported: float, int64, int32, bool)", k,
                    imp_val(c->I, in_idx(c, k))->name, onnx_dtype_name(dt));
  return GCC_OK;
}

static inline gcc_status in_ir(nctx *c, int k, int *ir, gcc_diag *d) {
  return ir_of(c, in_idx(c, k), ir, d);
}

/* A normalised axis in [0, rank) (or [0, rank] when `inclusive`). */
static inline gcc_status norm_axis(nctx *c, int64_t axis, int rank, int inclusive, const char *what,
                                   int64_t *out, gcc_diag *d) {
  int64_t hi = inclusive ? rank : rank - 1;
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a > hi)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s %" PRId64 " is out of range for rank %d", what,
                    axis, rank);
  *out = a;
  return GCC_OK;
}

/* IR operand for value `idx` with another shape `ns` of the same numel: a
 * constant gets a reshaped copy, anything else an IR Reshape. */
static inline gcc_status reshaped(nctx *c, int idx, const tshape *ns, int *ir, gcc_diag *d) {
  ival *v = imp_val(c->I, idx);
  if (v->is_const) {
    gcc_dtype dt = onnx_to_gcc_dtype(v->onnx_dt);
    if (dt == GCC_DT_UNDEFINED)
      return ir_of(c, idx, ir, d); /* gives the dtype error */
    gcc_shape s = {ns->ndim, {0}};
    for (int i = 0; i < ns->ndim; i++)
      s.dims[i] = ns->d[i].v;
    char base[600], name[620];
    snprintf(base, sizeof base, "%s/reshaped", v->name);
    snprintf(name, sizeof name, "%s", base);
    for (int k = 1; gcc_graph_find(c->I->g, name) >= 0; k++)
      snprintf(name, sizeof name, "%s_%d", base, k);
    int kind = (v->trainable && dt == GCC_DT_FLOAT32) ? GCC_VALUE_PARAM : GCC_VALUE_CONST;
    return gcc_graph_add_value(c->I->g, name, dt, &s, kind, v->data, v->bytes, ir, d);
  }
  int x;
  GCC_TRY(ir_of(c, idx, &x, d));
  return emit_reshape(c, x, ns, -1, v->onnx_dt, ir, d);
}

/* ---- converters and helpers shared between the files ---------------------------- */

gcc_status cv_constant(nctx *c, gcc_diag *d);
gcc_status cv_constant_of_shape(nctx *c, gcc_diag *d);
gcc_status cv_identity(nctx *c, gcc_diag *d);
gcc_status cv_dropout(nctx *c, gcc_diag *d);
gcc_status no_consumed_inputs(nctx *c, gcc_diag *d);
gcc_status cv_relu(nctx *c, gcc_diag *d);
gcc_status cv_add(nctx *c, gcc_diag *d);
gcc_status cv_sub(nctx *c, gcc_diag *d);
gcc_status cv_mul(nctx *c, gcc_diag *d);
gcc_status cv_div(nctx *c, gcc_diag *d);
gcc_status cv_sigmoid(nctx *c, gcc_diag *d);
gcc_status cv_tanh(nctx *c, gcc_diag *d);
gcc_status cv_sqrt(nctx *c, gcc_diag *d);
gcc_status cv_leaky_relu(nctx *c, gcc_diag *d);
gcc_status cv_clip(nctx *c, gcc_diag *d);
gcc_status cv_sum(nctx *c, gcc_diag *d);
gcc_status cv_gemm(nctx *c, gcc_diag *d);
gcc_status cv_matmul(nctx *c, gcc_diag *d);
gcc_status cv_conv(nctx *c, gcc_diag *d);
gcc_status cv_maxpool(nctx *c, gcc_diag *d);
gcc_status cv_avgpool(nctx *c, gcc_diag *d);
gcc_status cv_global_avgpool(nctx *c, gcc_diag *d);
gcc_status cv_global_maxpool(nctx *c, gcc_diag *d);
gcc_status cv_batchnorm(nctx *c, gcc_diag *d);
gcc_status cv_conv_transpose(nctx *c, gcc_diag *d);
gcc_status cv_softmax(nctx *c, gcc_diag *d);
gcc_status cv_log_softmax(nctx *c, gcc_diag *d);
gcc_status cv_lrn(nctx *c, gcc_diag *d);
gcc_status cv_flatten(nctx *c, gcc_diag *d);
gcc_status cv_reshape(nctx *c, gcc_diag *d);
gcc_status cv_squeeze(nctx *c, gcc_diag *d);
gcc_status cv_unsqueeze(nctx *c, gcc_diag *d);
gcc_status cv_concat(nctx *c, gcc_diag *d);
gcc_status cv_transpose(nctx *c, gcc_diag *d);
gcc_status cv_pad(nctx *c, gcc_diag *d);
gcc_status cv_gelu(nctx *c, gcc_diag *d);
gcc_status cv_erf(nctx *c, gcc_diag *d);
gcc_status cv_exp(nctx *c, gcc_diag *d);
gcc_status cv_log(nctx *c, gcc_diag *d);
gcc_status cv_neg(nctx *c, gcc_diag *d);
gcc_status cv_abs(nctx *c, gcc_diag *d);
gcc_status cv_elu(nctx *c, gcc_diag *d);
gcc_status cv_selu(nctx *c, gcc_diag *d);
gcc_status cv_celu(nctx *c, gcc_diag *d);
gcc_status cv_softplus(nctx *c, gcc_diag *d);
gcc_status cv_softsign(nctx *c, gcc_diag *d);
gcc_status cv_thresholded_relu(nctx *c, gcc_diag *d);
gcc_status cv_sin(nctx *c, gcc_diag *d);
gcc_status cv_cos(nctx *c, gcc_diag *d);
gcc_status cv_prelu(nctx *c, gcc_diag *d);
/* onnx/import_ops_logic.c */
gcc_status cv_equal(nctx *c, gcc_diag *d);
gcc_status cv_less(nctx *c, gcc_diag *d);
gcc_status cv_greater(nctx *c, gcc_diag *d);
gcc_status cv_less_or_equal(nctx *c, gcc_diag *d);
gcc_status cv_greater_or_equal(nctx *c, gcc_diag *d);
gcc_status cv_not(nctx *c, gcc_diag *d);
gcc_status cv_and(nctx *c, gcc_diag *d);
gcc_status cv_or(nctx *c, gcc_diag *d);
gcc_status cv_xor(nctx *c, gcc_diag *d);
gcc_status cv_where(nctx *c, gcc_diag *d);
gcc_status cv_reciprocal(nctx *c, gcc_diag *d);
gcc_status cv_pow(nctx *c, gcc_diag *d);
gcc_status cv_max(nctx *c, gcc_diag *d);
gcc_status cv_min(nctx *c, gcc_diag *d);
/* 1 when the Mul being converted ends a GELU pattern (onnx/import_ops_math.c):
 * *x its input (a root value index), *tanh_form 1 for the tanh form. */
int onnx_gelu_pattern(nctx *c, int *x, int *tanh_form);
/* Converts that Mul as Gelu(x). */
gcc_status cv_gelu_pattern(nctx *c, int x, int tanh_form, gcc_diag *d);

/* onnx/import_ops_elementwise.c: HardSigmoid, HardSwish */
gcc_status cv_hard_sigmoid(nctx *c, gcc_diag *d);
gcc_status cv_hard_swish(nctx *c, gcc_diag *d);

/* onnx/import_ops_norm.c: LayerNormalization */
gcc_status cv_layer_norm(nctx *c, gcc_diag *d);
/* onnx/import_ops_loss.c: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
 * (LogSoftmax over axis 1 + NegativeLogLikelihoodLoss) */
gcc_status cv_nll_loss(nctx *c, gcc_diag *d);
gcc_status cv_softmax_cross_entropy_loss(nctx *c, gcc_diag *d);

/* onnx/import_ops_index.c: Gather, Slice, Split, Expand, Tile, GatherND */
gcc_status cv_gather(nctx *c, gcc_diag *d);
gcc_status cv_gather_elements(nctx *c, gcc_diag *d);
gcc_status cv_slice(nctx *c, gcc_diag *d);
gcc_status cv_split(nctx *c, gcc_diag *d);
gcc_status cv_expand(nctx *c, gcc_diag *d);
gcc_status cv_tile(nctx *c, gcc_diag *d);
gcc_status cv_gather_nd(nctx *c, gcc_diag *d);
/* Slice of the root value x_idx (starts, ends, axes, steps of k_n entries)
 * into output out_k: folded for a constant, else an IR Slice. */
gcc_status slice_of(nctx *c, int x_idx, int out_k, const int64_t *starts, const int64_t *ends,
                    const int64_t *axes, const int64_t *steps, int64_t k_n, gcc_diag *d);

/* onnx/import_ops_fold.c: float32 arithmetic of constants that are not
 * weights, folded. fold_f32_applies: every input (one or two) is such a
 * constant; fold_f32: how '+', '-', '*', '/' (broadcast), 'q' (Sqrt) or 'r'
 * (Reciprocal). */
int fold_f32_applies(nctx *c);
gcc_status fold_f32(nctx *c, char how, gcc_diag *d);
/* Max / Min (8+) whose inputs are all int64 (or all int32) constants or
 * shape values without the batch: folded (is_max 1: Max). */
int fold_int_applies(nctx *c);
gcc_status fold_int_minmax(nctx *c, int is_max, gcc_diag *d);
/* Input k is a constant that is not a weight (any dtype, at most 2^24
 * elements, none of them the batch). */
int fold_const_applies(nctx *c, int k);
/* Transpose of such a constant by perm into shape s: folded. */
gcc_status fold_transpose(nctx *c, const int64_t *perm, const tshape *s, gcc_diag *d);
/* ScatterND (11, 13, 16, 18): folded when data, indices and updates are
 * constants (the masks PyTorch's exporter builds by slice assignment, as
 * Swin-T's shifted-window mask); refused naming the node otherwise. */
gcc_status cv_scatter_nd(nctx *c, gcc_diag *d);

/* onnx/import_ops_sequence.c: SplitToSequence, SequenceAt */
gcc_status cv_split_to_sequence(nctx *c, gcc_diag *d);
gcc_status cv_sequence_at(nctx *c, gcc_diag *d);

/* onnx/import_ops_shapecalc.c: shape arithmetic (ival.symv). has_symv: input
 * k is a shape value holding N; sym_in: input k's elements as sdims (a
 * shape value or an int64 / int32 constant); set_sym: output k holds
 * `vals` (a constant when none holds N); the folds of Gather, Slice,
 * Concat and Squeeze / Unsqueeze / Reshape of shape values; sym_target:
 * Reshape's (expand 0) or Expand's (expand 1) shape input as int64 entries. */
gcc_status cv_shape(nctx *c, gcc_diag *d);
gcc_status cv_cast(nctx *c, gcc_diag *d);
/* CastLike: Cast to input 1's dtype. Range: folded to a constant (its
 * inputs constants or shape values without the batch). */
gcc_status cv_cast_like(nctx *c, gcc_diag *d);
gcc_status cv_range(nctx *c, gcc_diag *d);
int has_symv(nctx *c, int k);
gcc_status sym_in(nctx *c, int k, const sdim **vals, int64_t *n, gcc_diag *d);
gcc_status set_sym(nctx *c, int k, const tshape *s, const sdim *vals, int64_t n, gcc_diag *d);
gcc_status sym_gather(nctx *c, gcc_diag *d);
gcc_status sym_slice(nctx *c, int out_k, int64_t start, int64_t step, int64_t len, gcc_diag *d);
gcc_status sym_concat(nctx *c, gcc_diag *d);
gcc_status sym_reshape(nctx *c, const tshape *s, gcc_diag *d);
gcc_status sym_target(nctx *c, int k, const tshape *x, int expand, const int64_t **out, int64_t *n,
                      gcc_diag *d);
/* Add, Sub, Mul, Div and Mod of integer constants and shape values
 * (scalars or vectors), folded: sym_arith_applies says whether the node's
 * operands are such; how is '+', '-', '*', '/' or '%'. */
int sym_arith_applies(nctx *c);
gcc_status sym_arith(nctx *c, char how, gcc_diag *d);
gcc_status cv_mod(nctx *c, gcc_diag *d);

/* onnx/import_ops_affine.c: index tensors that depend on N (ival.aff),
 * the indices of Tensor.as_strided as the default exporter writes it.
 * has_aff: input k is one. aff_range: Range(0, k x N, delta) (iv: the
 * start, limit factor and delta; k_sym: which input holds N); aff_arith:
 * Add ('+') of two such maps or of an affine integer constant, Mul ('*')
 * by an integer scalar constant; aff_reshape: input 0 to shape s when only
 * 1-dims are added or removed; aff_gather: Gather of 1-D data by an
 * identity map, imported as a Reshape of the data. Each refuses anything
 * else naming the node. */
int has_aff(nctx *c, int k);
gcc_status aff_range(nctx *c, const int64_t iv[3], int k_sym, const sdim *limit, int dt,
                     gcc_diag *d);
gcc_status aff_arith(nctx *c, char how, gcc_diag *d);
gcc_status aff_reshape(nctx *c, const tshape *s, gcc_diag *d);
gcc_status aff_gather(nctx *c, gcc_diag *d);

/* onnx/import_ops_reduce.c: ReduceSum, ReduceMean, ReduceMax, ReduceL2 */
gcc_status cv_reduce_sum(nctx *c, gcc_diag *d);
gcc_status cv_reduce_mean(nctx *c, gcc_diag *d);
gcc_status cv_reduce_max(nctx *c, gcc_diag *d);
gcc_status cv_reduce_min(nctx *c, gcc_diag *d);
gcc_status cv_reduce_l2(nctx *c, gcc_diag *d);
gcc_status cv_reduce_l1(nctx *c, gcc_diag *d);
gcc_status cv_reduce_sum_square(nctx *c, gcc_diag *d);
gcc_status cv_reduce_log_sum(nctx *c, gcc_diag *d);
gcc_status cv_reduce_log_sum_exp(nctx *c, gcc_diag *d);

/* onnx/import_ops_select.c: Size, Trilu, ArgMax, ArgMin */
gcc_status cv_size(nctx *c, gcc_diag *d);
gcc_status cv_trilu(nctx *c, gcc_diag *d);
gcc_status cv_arg_max(nctx *c, gcc_diag *d);
gcc_status cv_arg_min(nctx *c, gcc_diag *d);
/* Neg of an int64 constant or a shape value (the expanded LayerNormalization's
 * -axis), folded: sym_neg_applies says whether the node's input is one. */
int sym_neg_applies(nctx *c);
gcc_status sym_neg(nctx *c, gcc_diag *d);

/* onnx/import_ops_einsum.c: Einsum-12 lowered onto Transpose, Reshape,
 * MatMul, ReduceSumTo and Slice (diagonals) */
gcc_status cv_einsum(nctx *c, gcc_diag *d);

#endif /* GCC_ONNX_IMPORT_OPS_INTERNAL_H */
