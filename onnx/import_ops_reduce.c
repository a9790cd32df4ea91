/*
 * import_ops_reduce.c - ONNX -> gcc IR converters of the reductions
 * ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceL1, ReduceL2,
 * ReduceSumSquare, ReduceLogSum and ReduceLogSumExp (float32), every opset
 * form:
 * `axes` an attribute (before ReduceSum-13 and the others' 18) or an input,
 * `keepdims` (default 1), `noop_with_empty_axes` (ReduceSum-13, the others
 * from 18: no axes is the identity; otherwise no axes reduces every dim).
 *
 * A reduction over the two spatial dims of a 4-D NCHW tensor (the global
 * average pool and the squeeze-and-excitation mean that the default
 * exporter writes as ReduceMean(axes [-1, -2], keepdims 1)) becomes the
 * AveragePool (ReduceMean) or MaxPool (ReduceMax) of a window of the input's
 * size, with their gradients on the CPU and CUDA. Any other axes: ReduceSum
 * and ReduceMean become ReduceSumTo (ReduceMean with scale 1 / the reduced
 * count; the count may not depend on the symbolic batch) and ReduceL2
 * Sqrt(ReduceSumTo(X * X)); ReduceSumTo's gradient is an Expand of dY
 * back to X's shape (times the scale). ReduceMin over any axes is the IR
 * ReduceMin (torch.amin, its gradient split evenly among tied minima),
 * keepdims its attribute; ReduceMax over other axes is -ReduceMin(-X)
 * (torch.amax, the same tie rule). ReduceL1 is ReduceSumTo(Abs(X)),
 * ReduceSumSquare ReduceSumTo(X * X), ReduceLogSum Log(ReduceSumTo(X)),
 * ReduceLogSumExp the max-shifted M + Log(ReduceSumTo(Exp(X - M))).
 * keepdims 0 removes the reduced dims with a Reshape (a view). See
 * onnx/import_ops.c.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

enum { RED_SUM, RED_MEAN, RED_MAX, RED_L2, RED_MIN, RED_L1, RED_SUMSQ, RED_LOGSUM, RED_LOGSUMEXP };

/* The axes (attribute or input, as the op version says) into red[] (1 per
 * reduced dim); *identity when noop_with_empty_axes makes the node Y = X. */
static gcc_status reduce_axes(nctx *c, int kind, int rank, int *red, int *keepdims, int *identity,
                              gcc_diag *d) {
  int axes_input = kind == RED_SUM ? c->ver >= 13 : c->ver >= 18;
  int64_t keep = 1, noop = 0;
  const int64_t *axes = NULL;
  int64_t n = -1;
  if (axes_input) {
    GCC_TRY(allow_attrs(c, d, "keepdims", "noop_with_empty_axes", (char *)NULL));
    GCC_TRY(need_inputs(c, 1, 2, d));
    GCC_TRY(a_int(c, "noop_with_empty_axes", 0, &noop, d));
    if (n_in(c) > 1 && in_idx(c, 1) >= 0)
      GCC_TRY(const_ints(c, in_idx(c, 1), "axes input", &axes, &n, d));
  } else {
    GCC_TRY(allow_attrs(c, d, "axes", "keepdims", (char *)NULL));
    GCC_TRY(need_inputs(c, 1, 1, d));
    int ni;
    GCC_TRY(a_ints(c, "axes", &axes, &ni, d));
    n = ni;
  }
  GCC_TRY(a_int(c, "keepdims", 1, &keep, d));
  if (keep != 0 && keep != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "keepdims %" PRId64 " is not 0 or 1", keep);
  if (noop != 0 && noop != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "noop_with_empty_axes %" PRId64 " is not 0 or 1",
                    noop);
  *keepdims = (int)keep;
  *identity = 0;
  for (int i = 0; i < rank; i++)
    red[i] = 0;
  if (n <= 0) { /* none given or empty: all dims, or none with noop_with_empty_axes */
    *identity = (int)noop;
    for (int i = 0; i < rank; i++)
      red[i] = !noop;
    return GCC_OK;
  }
  for (int64_t k = 0; k < n; k++) {
    int64_t a = 0;
    GCC_TRY(norm_axis(c, axes[k], rank, 0, "axis", &a, d));
    if (red[a])
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "axis %" PRId64 " is given twice", axes[k]);
    red[a] = 1;
  }
  return GCC_OK;
}

static gcc_status reduce(nctx *c, int kind, gcc_diag *d) {
  GCC_TRY(need_inputs(c, 1, 2, d));
  GCC_TRY(need_float(c, 0, d));
  GCC_TRY(need_computable(c, 0, d));
  GCC_TRY(unused_outputs(c, 1, "outputs", d));
  const tshape *x = in_sh(c, 0);
  int rank = x->ndim, red[GCC_MAX_DIMS], keepdims = 1, identity = 0;
  if (rank < 1)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "a scalar input (rank 0) is not supported");
  GCC_TRY(reduce_axes(c, kind, rank, red, &keepdims, &identity, d));
  int xi;
  GCC_TRY(in_ir(c, 0, &xi, d));
  if (identity)
    return emit_reshape(c, xi, x, 0, F32, NULL, d);
  /* the result with the reduced dims kept as 1, and as ONNX gives it */
  tshape kept = *x, out = {0, {{0, 0}}};
  int64_t count = 1, ints[GCC_MAX_DIMS];
  int count_sym = 0;
  for (int i = 0; i < rank; i++) {
    ints[i] = red[i] ? 1 : 0; /* ReduceSumTo: 1 reduces, 0 keeps the input's dim */
    if (red[i]) {
      count *= x->d[i].v;
      count_sym |= x->d[i].sym;
      kept.d[i] = (sdim){1, 0};
    } else {
      out.d[out.ndim++] = x->d[i];
    }
    if (keepdims && red[i])
      out.d[out.ndim++] = (sdim){1, 0};
  }
  if (keepdims)
    out = kept;
  int node, cur = xi, next; /* emit writes *tmp before it reads ins: never the same int */
  /* the global pools: the two spatial dims of NCHW */
  if ((kind == RED_MEAN || kind == RED_MAX) && rank == 4 && !red[0] && !red[1] && red[2] &&
      red[3] && !x->d[2].sym && !x->d[3].sym) {
    int op = kind == RED_MEAN ? GCC_OP_AVERAGE_POOL : GCC_OP_MAX_POOL;
    GCC_TRY(emit(c, op, &xi, 1, -1, F32, &kept, &next, &node, d));
    cur = next;
    int64_t k[2] = {x->d[2].v, x->d[3].v}, ones[2] = {1, 1}, pads[4] = {0, 0, 0, 0};
    gcc_graph *g = c->I->g;
    if (gcc_node_set_ints(g, node, "kernel_shape", k, 2) ||
        gcc_node_set_ints(g, node, "strides", ones, 2) ||
        gcc_node_set_ints(g, node, "pads", pads, 4))
      return oom(d);
    return emit_reshape(c, cur, &out, 0, F32, NULL, d);
  }
  if (kind == RED_MIN || kind == RED_MAX) {
    /* ReduceMin over any axes, keepdims its own; ReduceMax over other than
     * the spatial dims as -ReduceMin(-X) (negation is exact: the same
     * values and NaNs, and torch.amax's gradient, split evenly among tied
     * maxima, is amin's) */
    if (count_sym)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "a %s over the symbolic batch dim N is not supported; give the input a "
                      "fixed batch",
                      kind == RED_MIN ? "minimum" : "maximum");
    int64_t axes[GCC_MAX_DIMS];
    int n_axes = 0;
    for (int i = 0; i < rank; i++)
      if (red[i])
        axes[n_axes++] = i;
    if (kind == RED_MAX) {
      GCC_TRY(emit(c, GCC_OP_NEG, &xi, 1, -1, F32, x, &next, &node, d));
      cur = next;
    }
    int reduced;
    GCC_TRY(emit(c, GCC_OP_REDUCE_MIN, &cur, 1, kind == RED_MIN ? 0 : -1, F32, &out,
                 kind == RED_MIN ? NULL : &reduced, &node, d));
    if (gcc_node_set_ints(c->I->g, node, "axes", axes, n_axes) ||
        gcc_node_set_int(c->I->g, node, "keepdims", keepdims))
      return oom(d);
    if (kind == RED_MAX)
      GCC_TRY(emit(c, GCC_OP_NEG, &reduced, 1, 0, F32, &out, NULL, &node, d));
    return GCC_OK;
  }
  if (kind == RED_LOGSUMEXP) {
    /* torch.logsumexp's stable form: M + Log(ReduceSumTo(Exp(X - M))) with
     * M = -ReduceMin(-X) (keepdims; the broadcast Sub and Add take it), so
     * large inputs do not overflow (ONNX's reference sums exp(X) as is; the
     * two agree wherever that does not overflow) */
    if (count_sym)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "a log-sum-exp over the symbolic batch dim N is not supported; give the "
                      "input a fixed batch");
    int64_t axes[GCC_MAX_DIMS];
    int n_axes = 0;
    for (int i = 0; i < rank; i++)
      if (red[i])
        axes[n_axes++] = i;
    int neg, mn, m, diff, ex, sum, lg, lse;
    GCC_TRY(emit(c, GCC_OP_NEG, &xi, 1, -1, F32, x, &neg, &node, d));
    GCC_TRY(emit(c, GCC_OP_REDUCE_MIN, &neg, 1, -1, F32, &kept, &mn, &node, d));
    if (gcc_node_set_ints(c->I->g, node, "axes", axes, n_axes) ||
        gcc_node_set_int(c->I->g, node, "keepdims", 1))
      return oom(d);
    GCC_TRY(emit(c, GCC_OP_NEG, &mn, 1, -1, F32, &kept, &m, &node, d));
    int sub[2] = {xi, m};
    GCC_TRY(emit(c, GCC_OP_SUB, sub, 2, -1, F32, x, &diff, &node, d));
    GCC_TRY(emit(c, GCC_OP_EXP, &diff, 1, -1, F32, x, &ex, &node, d));
    GCC_TRY(emit(c, GCC_OP_REDUCE_SUM_TO, &ex, 1, -1, F32, &kept, &sum, &node, d));
    if (gcc_node_set_ints(c->I->g, node, "shape", ints, rank) ||
        gcc_node_set_float(c->I->g, node, "scale", 1.0f))
      return oom(d);
    GCC_TRY(emit(c, GCC_OP_LOG, &sum, 1, -1, F32, &kept, &lg, &node, d));
    int add[2] = {lg, m};
    GCC_TRY(emit(c, GCC_OP_ADD, add, 2, -1, F32, &kept, &lse, &node, d));
    return emit_reshape(c, lse, &out, 0, F32, NULL, d);
  }
  if (kind == RED_MEAN && count_sym)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "a mean over the symbolic batch dim N is not supported; give the input a "
                    "fixed batch");
  if (kind == RED_L2 || kind == RED_SUMSQ) {
    int sq[2] = {xi, xi};
    GCC_TRY(emit(c, GCC_OP_MUL, sq, 2, -1, F32, x, &next, &node, d));
    cur = next;
  } else if (kind == RED_L1) {
    GCC_TRY(emit(c, GCC_OP_ABS, &xi, 1, -1, F32, x, &next, &node, d));
    cur = next;
  }
  GCC_TRY(emit(c, GCC_OP_REDUCE_SUM_TO, &cur, 1, -1, F32, &kept, &next, &node, d));
  cur = next;
  double scale = kind == RED_MEAN ? 1.0 / (double)count : 1.0;
  if (gcc_node_set_ints(c->I->g, node, "shape", ints, rank) ||
      gcc_node_set_float(c->I->g, node, "scale", (float)scale))
    return oom(d);
  if (kind == RED_L2 || kind == RED_LOGSUM) {
    GCC_TRY(emit(c, kind == RED_L2 ? GCC_OP_SQRT : GCC_OP_LOG, &cur, 1, -1, F32, &kept, &next,
                 &node, d));
    cur = next;
  }
  return emit_reshape(c, cur, &out, 0, F32, NULL, d);
}

gcc_status cv_reduce_sum(nctx *c, gcc_diag *d) {
  return reduce(c, RED_SUM, d);
}

gcc_status cv_reduce_mean(nctx *c, gcc_diag *d) {
  return reduce(c, RED_MEAN, d);
}

gcc_status cv_reduce_max(nctx *c, gcc_diag *d) {
  return reduce(c, RED_MAX, d);
}

gcc_status cv_reduce_l2(nctx *c, gcc_diag *d) {
  return reduce(c, RED_L2, d);
}

gcc_status cv_reduce_min(nctx *c, gcc_diag *d) {
  return reduce(c, RED_MIN, d);
}

gcc_status cv_reduce_l1(nctx *c, gcc_diag *d) {
  return reduce(c, RED_L1, d);
}

gcc_status cv_reduce_sum_square(nctx *c, gcc_diag *d) {
  return reduce(c, RED_SUMSQ, d);
}

gcc_status cv_reduce_log_sum(nctx *c, gcc_diag *d) {
  return reduce(c, RED_LOGSUM, d);
}

gcc_status cv_reduce_log_sum_exp(nctx *c, gcc_diag *d) {
  return reduce(c, RED_LOGSUMEXP, d);
}
