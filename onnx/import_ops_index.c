/*
 * import_ops_index.c - ONNX -> gcc IR converters of the indexing ops:
 * Gather. See onnx/import_ops.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

#define I32 ONNX__TENSOR_PROTO__DATA_TYPE__INT32

static int64_t index_at(const ival *v, int64_t k) {
  return v->onnx_dt == I32 ? (int64_t)((const int32_t *)v->data)[k] : ((const int64_t *)v->data)[k];
}

/* Gather (1, 11, 13): Y = data.shape[:axis] + indices.shape +
 * data.shape[axis + 1:]. Constant data and indices (shape arithmetic: an
 * element of a shape vector) are folded; otherwise an IR Gather (an
 * embedding lookup of a weight by ids, an index select of an activation by
 * constant indices). Constant indices are checked against a known axis
 * here; the others when the step runs. */
gcc_status cv_gather(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  if (has_symv(c, 0))
    return sym_gather(c, d);
  if (has_aff(c, 1)) /* Tensor.as_strided over N: a reshape when the identity */
    return aff_gather(c, d);
  GCC_TRY(need_movable(c, 0, d));
  int idt = in_dt(c, 1);
  if (idt != I64 && idt != I32)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "indices have dtype %s (int64 or int32)",
                    onnx_dtype_name(idt));
  const tshape *x = in_sh(c, 0), *q = in_sh(c, 1);
  char a[128], b[128];
  if (x->ndim < 1)
    return node_err(c, d, GCC_ERR_SHAPE, "data must have rank >= 1");
  if (x->ndim - 1 + q->ndim > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "the output of data %s and indices %s has more "
                    "than %d dims",
                    tshape_str(x, a, sizeof a), tshape_str(q, b, sizeof b), GCC_MAX_DIMS);
  int64_t axis;
  GCC_TRY(a_int(c, "axis", 0, &axis, d));
  GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &axis, d));
  tshape s = {0, {{0, 0}}};
  for (int i = 0; i < axis; i++)
    s.d[s.ndim++] = x->d[i];
  for (int i = 0; i < q->ndim; i++)
    s.d[s.ndim++] = q->d[i];
  for (int i = (int)axis + 1; i < x->ndim; i++)
    s.d[s.ndim++] = x->d[i];
  const ival *xv = imp_val(c->I, in_idx(c, 0)), *iv = imp_val(c->I, in_idx(c, 1));
  sdim ns;
  if (!tshape_numel(&s, &ns))
    return node_err(c, d, GCC_ERR_SHAPE, "output %s has a product of batch dims",
                    tshape_str(&s, a, sizeof a));
  int64_t dim = x->d[axis].v, n_idx = tshape_static_numel(q);
  if (iv->is_const && !x->d[axis].sym)
    for (int64_t k = 0; k < n_idx; k++) {
      int64_t v = index_at(iv, k);
      if (v < -dim || v >= dim)
        return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                        "index %" PRId64 " at position %" PRId64 " is outside [-%" PRId64
                        ", %" PRId64 ") (axis %" PRId64 " of data %s)",
                        v, k, dim, dim, axis, tshape_str(x, a, sizeof a));
    }
  /* both known: fold (not a weight imported for training: it stays a
   * parameter that the gradient reaches) */
  if (xv->is_const && iv->is_const && !(xv->trainable && c->I->train)) {
    int dt = in_dt(c, 0);
    size_t es = onnx_dtype_size(dt);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
      outer *= x->d[i].v;
    for (int i = (int)axis + 1; i < x->ndim; i++)
      inner *= x->d[i].v;
    size_t bytes = (size_t)(outer * n_idx * inner) * es, row = (size_t)inner * es;
    uint8_t *data = malloc(bytes ? bytes : 1);
    if (!data)
      return oom(d);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < n_idx; j++) {
        int64_t v = index_at(iv, j);
        v += v < 0 ? dim : 0;
        memcpy(data + (size_t)(o * n_idx + j) * row,
               (const uint8_t *)xv->data + (size_t)(o * dim + v) * row, row);
      }
    GCC_TRY(set_const(c, 0, dt, &s, data, bytes, d));
    mark_folded(c);
    return GCC_OK;
  }
  int ins[2], node;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  GCC_TRY(in_ir(c, 1, &ins[1], d));
  GCC_TRY(emit(c, GCC_OP_GATHER, ins, 2, 0, in_dt(c, 0), &s, NULL, &node, d));
  return gcc_node_set_int(c->I->g, node, "axis", axis) ? oom(d) : GCC_OK;
}

/* GatherElements (11, 13): torch.gather. Y has the indices' shape (same
 * rank as data, no dim larger than data's but along the axis). An IR
 * GatherElements; constant indices are checked against the axis here, the
 * others when the step runs. */
gcc_status cv_gather_elements(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  GCC_TRY(need_movable(c, 0, d));
  int idt = in_dt(c, 1);
  if (idt != I64 && idt != I32)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "indices have dtype %s (int64 or int32)",
                    onnx_dtype_name(idt));
  const tshape *x = in_sh(c, 0), *q = in_sh(c, 1);
  char a[128], b[128];
  if (x->ndim < 1 || q->ndim != x->ndim)
    return node_err(c, d, GCC_ERR_SHAPE, "data %s and indices %s must have one rank >= 1",
                    tshape_str(x, a, sizeof a), tshape_str(q, b, sizeof b));
  int64_t axis;
  GCC_TRY(a_int(c, "axis", 0, &axis, d));
  GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &axis, d));
  if (x->d[axis].sym)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "axis %" PRId64 " of data %s is the symbolic batch (gathering along it is "
                    "not supported)",
                    axis, tshape_str(x, a, sizeof a));
  for (int i = 0; i < x->ndim; i++)
    if (i != axis && (q->d[i].sym != x->d[i].sym || (!q->d[i].sym && q->d[i].v > x->d[i].v)))
      return node_err(c, d, GCC_ERR_SHAPE,
                      "indices %s are larger than data %s in dim %d (only the axis %" PRId64
                      " may be)",
                      tshape_str(q, b, sizeof b), tshape_str(x, a, sizeof a), i, axis);
  const ival *iv = imp_val(c->I, in_idx(c, 1));
  int64_t dim = x->d[axis].v;
  if (iv->is_const)
    for (int64_t k = 0, n = tshape_static_numel(q); k < n; k++) {
      int64_t v = index_at(iv, k);
      if (v < -dim || v >= dim)
        return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                        "index %" PRId64 " at position %" PRId64 " is outside [-%" PRId64
                        ", %" PRId64 ") (axis %" PRId64 " of data %s)",
                        v, k, dim, dim, axis, tshape_str(x, a, sizeof a));
    }
  int ins[2], node;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  GCC_TRY(in_ir(c, 1, &ins[1], d));
  GCC_TRY(emit(c, GCC_OP_GATHER_ELEMENTS, ins, 2, 0, in_dt(c, 0), q, NULL, &node, d));
  return gcc_node_set_int(c->I->g, node, "axis", axis) ? oom(d) : GCC_OK;
}

/* ---- Slice and Split ---------------------------------------------------------- */

/* One sliced dim, with ONNX's clamping (graph/ops.h GCC_OP_SLICE): the
 * first position and the count; 0: a symbolic dim not kept whole. */
static int slice_dim(sdim dim, int64_t b, int64_t e, int64_t s, int64_t *start, sdim *len) {
  if (dim.sym) {
    *start = 0;
    *len = dim;
    return b == 0 && e >= INT32_MAX && s == 1;
  }
  int64_t n = dim.v;
  b += b < 0 ? n : 0;
  e += e < 0 ? n : 0;
  int64_t l;
  if (s > 0) {
    b = b < 0 ? 0 : b > n ? n : b;
    e = e < 0 ? 0 : e > n ? n : e;
    l = e > b ? (e - b + s - 1) / s : 0;
  } else {
    b = b < 0 ? 0 : b > n - 1 ? n - 1 : b;
    e = e < -1 ? -1 : e > n - 1 ? n - 1 : e;
    l = b > e ? (b - e - s - 1) / -s : 0;
  }
  *start = b;
  *len = (sdim){l, 0};
  return 1;
}

/* Y = X's slice (starts, ends, axes, steps of k_n entries), X the root
 * value x_idx: folded when X is a constant (an element range of a shape
 * vector when X is input 0), else an IR Slice into ONNX output out_k. */
gcc_status slice_of(nctx *c, int x_idx, int out_k, const int64_t *starts, const int64_t *ends,
                    const int64_t *axes, const int64_t *steps, int64_t k_n, gcc_diag *d) {
  const ival *xv = imp_val(c->I, x_idx);
  const tshape *x = &xv->sh;
  char a[128];
  if (k_n > x->ndim)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%" PRId64 " sliced axes for rank %d", k_n,
                    x->ndim);
  tshape s = *x;
  int64_t start[GCC_MAX_DIMS] = {0}, step[GCC_MAX_DIMS], ax[GCC_MAX_DIMS];
  int seen[GCC_MAX_DIMS] = {0};
  for (int i = 0; i < GCC_MAX_DIMS; i++)
    step[i] = 1;
  for (int64_t k = 0; k < k_n; k++) {
    int64_t axis = axes ? axes[k] : k;
    GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &axis, d));
    if (seen[axis])
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "axis %" PRId64 " is repeated", axis);
    seen[axis] = 1;
    ax[k] = axis;
    int64_t st = steps ? steps[k] : 1;
    if (st == 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "step 0 on axis %" PRId64, axis);
    if (!slice_dim(x->d[axis], starts[k], ends[k], st, &start[axis], &s.d[axis]))
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "slices axis %" PRId64 " of %s, which depends on the batch (only a slice "
                      "of all of it is supported)",
                      axis, tshape_str(x, a, sizeof a));
    int folds = xv->symv || (xv->is_const && !(xv->trainable && c->I->train));
    if (s.d[axis].v == 0 && !folds) /* an empty shape vector folds (a Concat drops it) */
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "the slice of axis %" PRId64 " of %s is empty (zero-size tensors are not "
                      "supported)",
                      axis, tshape_str(x, a, sizeof a));
    step[axis] = st;
  }
  if (xv->symv) /* input 0 (Slice, Split) */
    return sym_slice(c, out_k, start[0], step[0], s.d[0].v, d);
  if (xv->is_const && !(xv->trainable && c->I->train)) {
    int dt = xv->onnx_dt;
    size_t es = onnx_dtype_size(dt);
    int64_t n = tshape_static_numel(&s), xst[GCC_MAX_DIMS], acc = 1, idx[GCC_MAX_DIMS] = {0};
    for (int q = x->ndim - 1; q >= 0; q--) {
      xst[q] = acc;
      acc *= x->d[q].v;
    }
    uint8_t *data = malloc((size_t)(n > 0 ? n : 1) * es);
    if (!data)
      return oom(d);
    for (int64_t o = 0; o < n; o++) {
      int64_t src = 0;
      for (int q = 0; q < x->ndim; q++)
        src += (start[q] + idx[q] * step[q]) * xst[q];
      memcpy(data + (size_t)o * es, (const uint8_t *)xv->data + (size_t)src * es, es);
      for (int q = s.ndim - 1; q >= 0; q--) {
        if (++idx[q] < s.d[q].v)
          break;
        idx[q] = 0;
      }
    }
    return set_const(c, out_k, dt, &s, data, (size_t)n * es, d);
  }
  int xi, node, tmp;
  gcc_dtype gdt = onnx_to_gcc_dtype(xv->onnx_dt);
  if (gdt == GCC_DT_UNDEFINED) /* as need_movable: bool is copied too */
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "'%s' has dtype %s (supported: float, int64, int32, bool)", xv->name,
                    onnx_dtype_name(xv->onnx_dt));
  GCC_TRY(ir_of(c, x_idx, &xi, d));
  GCC_TRY(emit(c, GCC_OP_SLICE, &xi, 1, out_k, xv->onnx_dt, &s, &tmp, &node, d));
  gcc_graph *g = c->I->g;
  if (gcc_node_set_ints(g, node, "starts", starts, (int)k_n) ||
      gcc_node_set_ints(g, node, "ends", ends, (int)k_n) ||
      gcc_node_set_ints(g, node, "axes", ax, (int)k_n))
    return oom(d);
  if (steps && gcc_node_set_ints(g, node, "steps", steps, (int)k_n))
    return oom(d);
  return GCC_OK;
}

static gcc_status slice_to(nctx *c, int out_k, const int64_t *starts, const int64_t *ends,
                           const int64_t *axes, const int64_t *steps, int64_t k_n, gcc_diag *d) {
  return slice_of(c, in_idx(c, 0), out_k, starts, ends, axes, steps, k_n, d);
}

/* Slice (1: attributes; 10, 11, 13: constant inputs starts, ends, axes,
 * steps). */
gcc_status cv_slice(nctx *c, gcc_diag *d) {
  const int64_t *starts, *ends, *axes = NULL, *steps = NULL;
  int64_t k_n, n_e, n_a = 0, n_s = 0;
  if (c->ver == 1) {
    GCC_TRY(allow_attrs(c, d, "starts", "ends", "axes", (char *)NULL));
    GCC_TRY(need_inputs(c, 1, 1, d));
    int ns, ne, na;
    GCC_TRY(a_ints(c, "starts", &starts, &ns, d));
    GCC_TRY(a_ints(c, "ends", &ends, &ne, d));
    GCC_TRY(a_ints(c, "axes", &axes, &na, d));
    if (ns < 0 || ne < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attributes 'starts' and 'ends' are required");
    k_n = ns;
    n_e = ne;
    n_a = na < 0 ? 0 : na;
    if (na < 0)
      axes = NULL;
  } else {
    GCC_TRY(allow_attrs(c, d, (char *)NULL));
    GCC_TRY(need_inputs(c, 3, 5, d));
    GCC_TRY(const_ints(c, in_idx(c, 1), "starts input", &starts, &k_n, d));
    GCC_TRY(const_ints(c, in_idx(c, 2), "ends input", &ends, &n_e, d));
    if (n_in(c) > 3 && in_idx(c, 3) >= 0)
      GCC_TRY(const_ints(c, in_idx(c, 3), "axes input", &axes, &n_a, d));
    if (n_in(c) > 4 && in_idx(c, 4) >= 0)
      GCC_TRY(const_ints(c, in_idx(c, 4), "steps input", &steps, &n_s, d));
  }
  if (n_e != k_n || (axes && n_a != k_n) || (steps && n_s != k_n))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                    "starts, ends, axes and steps must have as many entries");
  GCC_TRY(slice_to(c, 0, starts, ends, axes, steps, k_n, d));
  if (!c->n_ir)
    mark_folded(c);
  return GCC_OK;
}

/* Split (1, 2, 11, 13, 18): one Slice per output along `axis`, the sizes
 * from `split` (attribute before 13, a constant input from 13), or equal
 * parts (the last smaller from 18 with num_outputs). */
gcc_status cv_split(nctx *c, gcc_diag *d) {
  if (c->ver >= 18)
    GCC_TRY(allow_attrs(c, d, "axis", "num_outputs", (char *)NULL));
  else if (c->ver >= 13)
    GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "axis", "split", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, c->ver >= 13 ? 2 : c->ver < 2 ? 2 : 1, d));
  const tshape *x = in_sh(c, 0);
  int64_t axis;
  GCC_TRY(a_int(c, "axis", 0, &axis, d));
  GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &axis, d));
  int n = n_out(c);
  const int64_t *split = NULL;
  int64_t n_split = 0;
  if (c->ver >= 13 || c->ver < 2) {
    if (n_in(c) > 1 && in_idx(c, 1) >= 0)
      GCC_TRY(const_ints(c, in_idx(c, 1), "split input", &split, &n_split, d));
  } else {
    int ns;
    GCC_TRY(a_ints(c, "split", &split, &ns, d));
    n_split = ns < 0 ? 0 : ns;
    if (ns < 0)
      split = NULL;
  }
  if (x->d[axis].sym)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "splits axis %" PRId64 ", the batch", axis);
  int64_t dim = x->d[axis].v, *sizes = calloc((size_t)(n > 0 ? n : 1), sizeof *sizes);
  if (!sizes)
    return oom(d);
  gcc_status st = GCC_OK;
  if (split && n_split != n)
    st = node_err(c, d, GCC_ERR_INVALID_GRAPH, "split has %" PRId64 " entries for %d outputs",
                  n_split, n);
  int64_t total = 0, part = 0;
  if (st == GCC_OK && !split) {
    int64_t k = n;
    if (c->ver >= 18) {
      int64_t no;
      st = a_int(c, "num_outputs", n, &no, d);
      k = no;
    }
    part = k > 0 ? (dim + k - 1) / k : 0;
    if (st == GCC_OK && (k != n || (c->ver < 18 && dim % n)))
      st = node_err(c, d, GCC_ERR_INVALID_GRAPH, "cannot split %" PRId64 " into %d equal parts",
                    dim, n);
  }
  for (int k = 0; st == GCC_OK && k < n; k++) {
    sizes[k] = split ? split[k] : (k < n - 1 ? part : dim - part * (n - 1));
    total += sizes[k];
  }
  if (st == GCC_OK && total != dim)
    st = node_err(c, d, GCC_ERR_INVALID_GRAPH,
                  "the parts add up to %" PRId64 ", not to the dim %" PRId64, total, dim);
  int64_t off = 0;
  for (int k = 0; st == GCC_OK && k < n; k++) {
    int64_t b = off, e = off + sizes[k];
    off = e;
    if (out_idx(c, k) < 0 || !out_used(c, k))
      continue;
    st = slice_to(c, k, &b, &e, &axis, NULL, 1, d);
  }
  free(sizes);
  if (st == GCC_OK && !c->n_ir)
    mark_folded(c);
  return st;
}

/* ---- Expand and Tile ---------------------------------------------------------- */

/* X broadcast to `t` (k dims; numpy rules, a 1 on either side keeps the
 * other's dim): folded for a constant, else an IR Expand into output
 * out_k or a temporary (*tmp). A symbolic (batch) dim of X is kept where t
 * has 1 there. */
static gcc_status expand_to(nctx *c, int idx, const int64_t *t, int k, int out_k, int *tmp,
                            int batch_from, gcc_diag *d) {
  const tshape *x = &imp_val(c->I, idx)->sh;
  char a[128];
  int n = x->ndim > k ? x->ndim : k;
  if (n > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "the result has more than %d dims", GCC_MAX_DIMS);
  tshape s = {n, {{0, 0}}};
  int64_t ir_shape[GCC_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    int ix = x->ndim - n + i, it = k - n + i;
    sdim dx = ix >= 0 ? x->d[ix] : (sdim){1, 0};
    int64_t dt = it >= 0 ? t[it] : 1;
    if (dt == 0 && batch_from >= 0 && (ix < 0 || (!dx.sym && dx.v == 1))) {
      s.d[i] = (sdim){1, 1}; /* the batch (sym_target) */
      ir_shape[i] = 0;
      continue;
    }
    if (dt < 1)
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "shape entry %" PRId64 " (dims must be >= 1)", dt);
    if (dx.sym && dt != 1)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "expands %s, whose dim %d depends on the batch, to %" PRId64,
                      tshape_str(x, a, sizeof a), ix, dt);
    if (!dx.sym && dx.v != 1 && dt != 1 && dx.v != dt)
      return node_err(c, d, GCC_ERR_SHAPE, "%s does not broadcast to a dim %" PRId64,
                      tshape_str(x, a, sizeof a), dt);
    s.d[i] = dx.sym || dt == 1 ? dx : (sdim){dt, 0};
    ir_shape[i] = dt;
  }
  const ival *xv = imp_val(c->I, idx);
  int dt = xv->onnx_dt;
  int needs_batch = 0;
  for (int i = 0; i < n; i++)
    needs_batch |= ir_shape[i] == 0;
  if (xv->is_const && out_k >= 0 && !needs_batch && !(xv->trainable && c->I->train)) {
    size_t es = onnx_dtype_size(dt);
    int64_t numel = tshape_static_numel(&s), xst[GCC_MAX_DIMS], acc = 1, cidx[GCC_MAX_DIMS] = {0};
    for (int i = n - 1; i >= 0; i--) {
      int ix = x->ndim - n + i;
      xst[i] = ix < 0 || x->d[ix].v == 1 ? 0 : acc;
      acc *= ix < 0 ? 1 : x->d[ix].v;
    }
    uint8_t *data = malloc((size_t)numel * es);
    if (!data)
      return oom(d);
    for (int64_t o = 0; o < numel; o++) {
      int64_t src = 0;
      for (int i = 0; i < n; i++)
        src += cidx[i] * xst[i];
      memcpy(data + (size_t)o * es, (const uint8_t *)xv->data + (size_t)src * es, es);
      for (int i = n - 1; i >= 0; i--) {
        if (++cidx[i] < s.d[i].v)
          break;
        cidx[i] = 0;
      }
    }
    return set_const(c, out_k, dt, &s, data, (size_t)numel * es, d);
  }
  int node;
  if (onnx_to_gcc_dtype(dt) == GCC_DT_UNDEFINED)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "input '%s' has dtype %s (float, int64, int32)",
                    xv->name, onnx_dtype_name(dt));
  int ins[2];
  GCC_TRY(ir_of(c, idx, &ins[0], d));
  if (needs_batch)
    GCC_TRY(ir_of(c, batch_from, &ins[1], d));
  GCC_TRY(emit(c, GCC_OP_EXPAND, ins, needs_batch ? 2 : 1, out_k, dt, &s, tmp, &node, d));
  return gcc_node_set_ints(c->I->g, node, "shape", ir_shape, n) ? oom(d) : GCC_OK;
}

/* Expand (8, 13): the shape a constant input. */
gcc_status cv_expand(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  const int64_t *t;
  int64_t k;
  if (has_symv(c, 1))
    GCC_TRY(sym_target(c, 1, in_sh(c, 0), 1, &t, &k, d));
  else
    GCC_TRY(const_ints(c, in_idx(c, 1), "shape input", &t, &k, d));
  if (k > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "shape has %" PRId64 " entries", k);
  int batch_from = -1; /* a graph input whose dim 0 is the symbolic batch */
  for (int i = 0; i < c->I->n_v && batch_from < 0; i++)
    if (c->I->v[i].is_input && c->I->v[i].sh.ndim > 0 && c->I->v[i].sh.d[0].sym &&
        c->I->v[i].sh.d[0].v == 1)
      batch_from = i;
  GCC_TRY(expand_to(c, in_idx(c, 0), t, (int)k, 0, NULL, batch_from, d));
  if (!c->n_ir)
    mark_folded(c);
  return GCC_OK;
}

/* Tile (1 (tiles, axis), 6, 13: repeats a constant input): X [d0, ..] is
 * reshaped to [1, d0, 1, d1, ...], expanded to [r0, d0, r1, d1, ...] and
 * reshaped to [r0 d0, r1 d1, ...] (torch.Tensor.repeat), so that its
 * gradient is the Expand's ReduceSumTo. */
gcc_status cv_tile(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  if (c->ver < 6)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "Tile-1 (tiles and axis inputs) is not supported");
  GCC_TRY(need_inputs(c, 2, 2, d));
  const tshape *x = in_sh(c, 0);
  const int64_t *rep;
  int64_t k;
  char a[128];
  GCC_TRY(const_ints(c, in_idx(c, 1), "repeats input", &rep, &k, d));
  if (k != x->ndim)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "repeats has %" PRId64 " entries for rank %d", k,
                    x->ndim);
  if (2 * x->ndim > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "Tile of rank %d (at most %d)", x->ndim,
                    GCC_MAX_DIMS / 2);
  tshape mid = {2 * x->ndim, {{0, 0}}}, y = {x->ndim, {{0, 0}}};
  int64_t big[GCC_MAX_DIMS];
  for (int i = 0; i < x->ndim; i++) {
    if (rep[i] < 1)
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "repeats entry %" PRId64 " (must be >= 1)",
                      rep[i]);
    if (x->d[i].sym && rep[i] != 1)
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "tiles dim %d of %s, which depends on the batch",
                      i, tshape_str(x, a, sizeof a));
    mid.d[2 * i] = (sdim){1, 0};
    mid.d[2 * i + 1] = x->d[i];
    big[2 * i] = rep[i];
    big[2 * i + 1] = 1;
    y.d[i] = x->d[i].sym ? x->d[i] : (sdim){x->d[i].v * rep[i], 0};
  }
  tshape ex = mid; /* [r0, d0, r1, d1, ...] */
  for (int i = 0; i < x->ndim; i++)
    ex.d[2 * i] = (sdim){rep[i], 0};
  int r1, r2, node;
  GCC_TRY(reshaped(c, in_idx(c, 0), &mid, &r1, d));
  GCC_TRY(emit(c, GCC_OP_EXPAND, &r1, 1, -1, in_dt(c, 0), &ex, &r2, &node, d));
  if (gcc_node_set_ints(c->I->g, node, "shape", big, mid.ndim))
    return oom(d);
  return emit_reshape(c, r2, &y, 0, in_dt(c, 0), NULL, d);
}

/* GatherND (11, 12, 13) with batch_dims 0 and indices [..., 1] (one index
 * per tuple, into data's dim 0): Gather(data, indices[..., 0], axis 0), as
 * PyTorch's default exporter writes a table lookup by an index tensor
 * (torchvision Swin-T's relative_position_bias_table[index]). Other forms
 * are refused naming the node. */
gcc_status cv_gather_nd(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver >= 12 ? "batch_dims" : NULL, (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  int64_t bd;
  GCC_TRY(a_int(c, "batch_dims", 0, &bd, d));
  const tshape *x = in_sh(c, 0), *q = in_sh(c, 1);
  char a[128], b[128];
  int idt = in_dt(c, 1);
  if (idt != I64)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "indices have dtype %s (int64)",
                    onnx_dtype_name(idt));
  if (bd != 0 || q->ndim < 1 || q->d[q->ndim - 1].sym || q->d[q->ndim - 1].v != 1 || x->ndim < 1)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "data %s, indices %s, batch_dims %" PRId64
                    ": only batch_dims 0 with one index per tuple (indices [..., 1]) is "
                    "supported",
                    tshape_str(x, a, sizeof a), tshape_str(q, b, sizeof b), bd);
  GCC_TRY(need_computable(c, 0, d));
  tshape qi = *q; /* indices without their last dim */
  qi.ndim--;
  if (qi.ndim == 0)
    qi = (tshape){1, {{1, 0}}};
  tshape s = {0, {{0, 0}}};
  for (int i = 0; i < q->ndim - 1; i++)
    s.d[s.ndim++] = q->d[i];
  if (q->ndim == 1)
    s.d[s.ndim++] = (sdim){1, 0};
  if (s.ndim + x->ndim - 1 > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "the output has more than %d dims", GCC_MAX_DIMS);
  for (int i = 1; i < x->ndim; i++)
    s.d[s.ndim++] = x->d[i];
  const ival *iv = imp_val(c->I, in_idx(c, 1));
  int64_t dim = x->d[0].v, n_idx = tshape_static_numel(q);
  if (iv->is_const && !x->d[0].sym)
    for (int64_t k = 0; k < n_idx; k++) {
      int64_t v = index_at(iv, k);
      if (v < -dim || v >= dim)
        return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                        "index %" PRId64 " at position %" PRId64 " is outside [-%" PRId64
                        ", %" PRId64 ") (dim 0 of data %s)",
                        v, k, dim, dim, tshape_str(x, a, sizeof a));
    }
  int ins[2], node;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  GCC_TRY(reshaped(c, in_idx(c, 1), &qi, &ins[1], d));
  if (q->ndim == 1) { /* indices [1]: the output keeps no index dim */
    int tmp;
    tshape s1 = s;
    GCC_TRY(emit(c, GCC_OP_GATHER, ins, 2, -1, in_dt(c, 0), &s1, &tmp, &node, d));
    if (gcc_node_set_int(c->I->g, node, "axis", 0))
      return oom(d);
    tshape s0 = {0, {{0, 0}}};
    for (int i = 1; i < s.ndim; i++)
      s0.d[s0.ndim++] = s.d[i];
    return emit_reshape(c, tmp, &s0, 0, in_dt(c, 0), NULL, d);
  }
  GCC_TRY(emit(c, GCC_OP_GATHER, ins, 2, 0, in_dt(c, 0), &s, NULL, &node, d));
  return gcc_node_set_int(c->I->g, node, "axis", 0) ? oom(d) : GCC_OK;
}
