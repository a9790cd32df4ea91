/*
 * import_ops_affine.c - index tensors that depend on the symbolic batch N,
 * held at import as affine maps (ival.aff): element [i0, i1, ...] of a
 * value of shape sh is off + sum_d stride[d] * i_d. PyTorch's default
 * exporter writes Tensor.as_strided (torch.flatten of a [N, C, 1, 1]
 * pooled map, as Swin-T's head) as a Gather of the flattened input by such
 * indices: Range(0, N, 1) * stride, unsqueezed and added to the constant
 * ranges of the other dims. Range over N makes one; Mul by an integer
 * scalar, Add of another such map or of an integer constant that is
 * affine, and Squeeze / Unsqueeze / Reshape that only add or drop 1-dims
 * keep one; Gather of a 1-D value by one whose map is the identity of its
 * shape (offset 0, C-contiguous strides, as many elements as the data) is a
 * Reshape of the data, imported for every batch size. Any other reader is
 * an error naming the value (materialise in import.c). See
 * onnx/import_ops.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

#define I32 ONNX__TENSOR_PROTO__DATA_TYPE__INT32

/* The largest constant read as an affine map (its elements are checked). */
#define AFF_MAX_CONST_ELEMS ((int64_t)1 << 22)

int has_aff(nctx *c, int k) {
  int idx = in_idx(c, k);
  return idx >= 0 && imp_val(c->I, idx)->aff != NULL;
}

static gcc_status set_aff(nctx *c, const tshape *s, const iaff *a, int dt, gcc_diag *d) {
  iaff *copy = malloc(sizeof *copy);
  if (!copy)
    return oom(d);
  *copy = *a;
  for (int i = 0; i < s->ndim; i++) /* a 1-dim contributes nothing */
    if (!s->d[i].sym && s->d[i].v == 1)
      copy->stride[i] = 0;
  GCC_TRY(pool_add(c->I, copy, d));
  int o = out_idx(c, 0);
  if (o < 0)
    return GCC_OK;
  ival *v = imp_val(c->I, o);
  v->onnx_dt = dt;
  v->sh = *s;
  v->aff = copy;
  v->done = 1;
  mark_folded(c);
  return GCC_OK;
}

/* Input k as an affine map: an ival.aff, or an integer constant whose
 * elements are off + sum_d stride[d] * i_d (checked element by element). */
static gcc_status aff_in(nctx *c, int k, iaff *out, gcc_diag *d) {
  const ival *v = imp_val(c->I, in_idx(c, k));
  if (v->aff) {
    *out = *v->aff;
    return GCC_OK;
  }
  int64_t n = tshape_static_numel(&v->sh);
  if (!v->is_const || (v->onnx_dt != I64 && v->onnx_dt != I32) || n < 1 || n > AFF_MAX_CONST_ELEMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "input %d '%s' is not an integer constant, and input %d is an index tensor "
                    "computed from the batch size (Range over N) that only adds integer "
                    "constants",
                    k, v->name, 1 - k);
#define AT(i)                                                                                      \
  (v->onnx_dt == I32 ? (int64_t)((const int32_t *)v->data)[i] : ((const int64_t *)v->data)[i])
  memset(out, 0, sizeof *out);
  out->off = AT(0);
  int64_t step = n;
  for (int i = 0; i < v->sh.ndim; i++) {
    step /= v->sh.d[i].v;
    if (v->sh.d[i].v > 1)
      out->stride[i] = AT(step) - out->off;
  }
  for (int64_t e = 0; e < n; e++) {
    int64_t rest = e, want = out->off, m = n;
    for (int i = 0; i < v->sh.ndim; i++) {
      m /= v->sh.d[i].v;
      want += out->stride[i] * (rest / m);
      rest %= m;
    }
    if (AT(e) != want)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "input %d '%s' (element %" PRId64 " is %" PRId64 ", not %" PRId64
                      ") is not an affine function of its indices, and input %d is an index "
                      "tensor computed from the batch size (Range over N)",
                      k, v->name, e, AT(e), want, 1 - k);
  }
#undef AT
  return GCC_OK;
}

gcc_status aff_range(nctx *c, const int64_t iv[3], int k_sym, const sdim *limit, int dt,
                     gcc_diag *d) {
  /* only the limit may hold N: Range(start, k * N, delta) with start 0 and
   * delta dividing k has k / delta * N elements, start + delta * i */
  if (k_sym != 1 || iv[0] != 0 || iv[2] <= 0 || limit->v <= 0 || limit->v % iv[2] != 0)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "a range from %" PRId64 " to %" PRId64 " x the batch size by %" PRId64
                    ": only Range(0, k x N, delta) with delta dividing k is supported when a "
                    "bound depends on the batch",
                    iv[0], limit->v, iv[2]);
  tshape s = {1, {{limit->v / iv[2], 1}}};
  iaff a;
  memset(&a, 0, sizeof a);
  a.off = 0;
  a.stride[0] = iv[2];
  return set_aff(c, &s, &a, dt, d);
}

gcc_status aff_arith(nctx *c, char how, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  int dt = in_dt(c, 0);
  if (in_dt(c, 1) != dt || (dt != I64 && dt != I32))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "operands are %s and %s (int64 or int32)",
                    onnx_dtype_name(dt), onnx_dtype_name(in_dt(c, 1)));
  tshape s;
  char x[128], y[128];
  if (!tshape_broadcast(in_sh(c, 0), in_sh(c, 1), &s))
    return node_err(c, d, GCC_ERR_SHAPE, "operands %s and %s do not broadcast",
                    tshape_str(in_sh(c, 0), x, sizeof x), tshape_str(in_sh(c, 1), y, sizeof y));
  iaff a[2], r;
  memset(&r, 0, sizeof r);
  for (int k = 0; k < 2; k++) {
    GCC_TRY(aff_in(c, k, &a[k], d));
    /* right-align the operand's strides with the result's dims */
    const tshape *ks = in_sh(c, k);
    iaff al;
    memset(&al, 0, sizeof al);
    al.off = a[k].off;
    for (int i = 0; i < ks->ndim; i++)
      al.stride[s.ndim - ks->ndim + i] = a[k].stride[i];
    a[k] = al;
  }
  if (how == '+') {
    r.off = a[0].off + a[1].off;
    for (int i = 0; i < s.ndim; i++)
      r.stride[i] = a[0].stride[i] + a[1].stride[i];
  } else { /* '*': one side a scalar constant */
    int sc = has_aff(c, 0) ? 1 : 0;
    if (has_aff(c, sc) || tshape_static_numel(in_sh(c, sc)) != 1 || tshape_has_sym(in_sh(c, sc)))
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "multiplies an index tensor computed from the batch size (Range over N) "
                      "by %s; only an integer scalar constant is supported",
                      tshape_str(in_sh(c, sc), x, sizeof x));
    int64_t f = a[sc].off;
    r.off = a[1 - sc].off * f;
    for (int i = 0; i < s.ndim; i++)
      r.stride[i] = a[1 - sc].stride[i] * f;
  }
  return set_aff(c, &s, &r, dt, d);
}

gcc_status aff_reshape(nctx *c, const tshape *s, gcc_diag *d) {
  const ival *x = imp_val(c->I, in_idx(c, 0));
  /* the dims that are not 1, in order, must be the same on both sides */
  int xs[GCC_MAX_DIMS], ss[GCC_MAX_DIMS], nx = 0, ns = 0;
  for (int i = 0; i < x->sh.ndim; i++)
    if (x->sh.d[i].sym || x->sh.d[i].v != 1)
      xs[nx++] = i;
  for (int i = 0; i < s->ndim; i++)
    if (s->d[i].sym || s->d[i].v != 1)
      ss[ns++] = i;
  int ok = nx == ns;
  for (int k = 0; k < ns && ok; k++)
    ok = x->sh.d[xs[k]].sym == s->d[ss[k]].sym && x->sh.d[xs[k]].v == s->d[ss[k]].v;
  if (!ok) {
    char a[128], b[128];
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "reshapes '%s', an index tensor computed from the batch size (Range over "
                    "N), from %s to %s; only adding or removing 1-dims is supported",
                    x->name, tshape_str(&x->sh, a, sizeof a), tshape_str(s, b, sizeof b));
  }
  iaff r;
  memset(&r, 0, sizeof r);
  r.off = x->aff->off;
  for (int k = 0; k < ns; k++)
    r.stride[ss[k]] = x->aff->stride[xs[k]];
  return set_aff(c, s, &r, x->onnx_dt, d);
}

gcc_status aff_gather(nctx *c, gcc_diag *d) {
  const tshape *x = in_sh(c, 0), *q = in_sh(c, 1);
  const ival *iv = imp_val(c->I, in_idx(c, 1));
  int64_t axis;
  GCC_TRY(a_int(c, "axis", 0, &axis, d));
  char a[128], b[128];
  if (x->ndim != 1 || (axis != 0 && axis != -1))
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "gathers from %s along axis %" PRId64
                    " by '%s', an index tensor computed from the batch size (Range over N); "
                    "only a 1-D data input is supported",
                    tshape_str(x, a, sizeof a), axis, iv->name);
  /* the identity of q's shape: offset 0, C-contiguous strides */
  int64_t want = 1;
  int is_id = iv->aff->off == 0, sym_seen = 0;
  for (int i = q->ndim - 1; i >= 0 && is_id; i--) {
    if (!q->d[i].sym && q->d[i].v == 1)
      continue;
    if (sym_seen || iv->aff->stride[i] != want)
      is_id = 0; /* a stride past a dim that holds N would be a multiple of N */
    want *= q->d[i].v;
    sym_seen |= q->d[i].sym;
  }
  sdim nq;
  if (!is_id || !tshape_numel(q, &nq) || nq.sym != x->d[0].sym || nq.v != x->d[0].v)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "gathers %s from data %s by '%s', an index tensor computed from the batch "
                    "size (Range over N) that is not the identity (a strided view, "
                    "Tensor.as_strided); only the identity (a reshape) is supported",
                    tshape_str(q, b, sizeof b), tshape_str(x, a, sizeof a), iv->name);
  int xi;
  GCC_TRY(in_ir(c, 0, &xi, d));
  return emit_reshape(c, xi, q, 0, in_dt(c, 0), NULL, d);
}
