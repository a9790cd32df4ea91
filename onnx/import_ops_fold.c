/*
 * import_ops_fold.c - float32 arithmetic on constants, folded at import:
 * Add, Sub, Mul, Div (numpy broadcasting), Sqrt and Reciprocal whose
 * inputs are all constants that are not weights (initializers train;
 * Constant nodes and values folded from them do not). PyTorch's default
 * exporter computes the attention's softmax scale so (CastLike(Shape(q)[-1])
 * -> Sqrt -> Div(1, .) -> Sqrt, one factor on Q and one on K): folded, the
 * scale is the constant that the attention pass (passes/attention.c)
 * reads, and nothing of it runs per step. Each result is what ONNX
 * Runtime computes: one float32 operation per element (IEEE-754 rounding
 * of +, -, *, / and sqrt). See onnx/import_ops.c.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/import_ops_internal.h"

/* Largest folded result (elements): a mask or a scale, not a weight. */
#define FOLD_MAX_ELEMS ((int64_t)1 << 24)

int fold_f32_applies(nctx *c) {
  int n = n_in(c);
  if (n < 1 || n > 2)
    return 0;
  for (int k = 0; k < n; k++) {
    int idx = in_idx(c, k);
    if (idx < 0)
      return 0;
    const ival *v = imp_val(c->I, idx);
    int64_t m = tshape_static_numel(&v->sh);
    if (!v->is_const || v->trainable || v->onnx_dt != F32 || !v->data || m < 1 ||
        m > FOLD_MAX_ELEMS)
      return 0;
  }
  return 1;
}

/* Element offset of input shape `in` for linear index o of broadcast shape `s`. */
static int64_t bcast_off(const tshape *in, const tshape *s, int64_t o) {
  int64_t off = 0, st = 1;
  for (int j = s->ndim - 1; j >= 0; j--) {
    int64_t dj = s->d[j].v, cj = o % dj;
    o /= dj;
    int ji = in->ndim - s->ndim + j;
    int64_t din = ji >= 0 ? in->d[ji].v : 1;
    if (din != 1)
      off += cj * st;
    st *= din;
  }
  return off;
}

gcc_status fold_f32(nctx *c, char how, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  int binary = how == '+' || how == '-' || how == '*' || how == '/';
  GCC_TRY(need_inputs(c, binary ? 2 : 1, binary ? 2 : 1, d));
  const ival *a = imp_val(c->I, in_idx(c, 0)), *b = binary ? imp_val(c->I, in_idx(c, 1)) : NULL;
  tshape s = a->sh;
  if (b && !tshape_broadcast(&a->sh, &b->sh, &s)) {
    char x[128], y[128];
    return node_err(c, d, GCC_ERR_SHAPE, "operands %s and %s do not broadcast",
                    tshape_str(&a->sh, x, sizeof x), tshape_str(&b->sh, y, sizeof y));
  }
  int64_t n = tshape_static_numel(&s);
  if (n < 1 || n > FOLD_MAX_ELEMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "the folded result has %lld elements", (long long)n);
  float *o = malloc((size_t)n * sizeof *o);
  if (!o)
    return oom(d);
  const float *pa = a->data, *pb = b ? b->data : NULL;
  for (int64_t i = 0; i < n; i++) {
    float x = pa[bcast_off(&a->sh, &s, i)], y = pb ? pb[bcast_off(&b->sh, &s, i)] : 0.0f;
    switch (how) {
    case '+': o[i] = x + y; break;
    case '-': o[i] = x - y; break;
    case '*': o[i] = x * y; break;
    case '/': o[i] = x / y; break;
    case 'q': o[i] = sqrtf(x); break;
    default: o[i] = 1.0f / x; break; /* 'r': Reciprocal */
    }
  }
  GCC_TRY(set_const(c, 0, F32, &s, o, (size_t)n * sizeof *o, d));
  mark_folded(c);
  return GCC_OK;
}

/* ---- Max and Min of integers ------------------------------------------------------- */

int fold_int_applies(nctx *c) {
  int n = n_in(c);
  if (n < 1 || c->ver < 8)
    return 0;
  int dt = in_dt(c, 0);
  for (int k = 0; k < n; k++) {
    int idx = in_idx(c, k);
    if (idx < 0)
      return 0;
    const ival *v = imp_val(c->I, idx);
    int64_t m = tshape_static_numel(&v->sh);
    if (!(v->is_const || v->symv) || v->onnx_dt != dt ||
        (dt != I64 && dt != ONNX__TENSOR_PROTO__DATA_TYPE__INT32) || m < 1 || m > FOLD_MAX_ELEMS)
      return 0;
    for (int64_t i = 0; v->symv && i < m; i++)
      if (v->symv[i].sym)
        return 0; /* N against a number: unknown until the batch is bound */
  }
  return 1;
}

gcc_status fold_int_minmax(nctx *c, int is_max, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  int n = n_in(c), dt = in_dt(c, 0);
  tshape s = *in_sh(c, 0);
  for (int k = 1; k < n; k++) {
    tshape r;
    if (!tshape_broadcast(&s, in_sh(c, k), &r)) {
      char x[128], y[128];
      return node_err(c, d, GCC_ERR_SHAPE, "input %d %s does not broadcast with %s", k,
                      tshape_str(in_sh(c, k), y, sizeof y), tshape_str(&s, x, sizeof x));
    }
    s = r;
  }
  int64_t m = tshape_static_numel(&s);
  sdim *o = malloc((size_t)m * sizeof *o);
  if (!o)
    return oom(d);
  gcc_status st = GCC_OK;
  for (int k = 0; k < n && st == GCC_OK; k++) {
    const sdim *v;
    int64_t nv;
    st = sym_in(c, k, &v, &nv, d);
    for (int64_t i = 0; st == GCC_OK && i < m; i++) {
      int64_t x = v[bcast_off(in_sh(c, k), &s, i)].v;
      if (k == 0 || (is_max ? x > o[i].v : x < o[i].v))
        o[i] = (sdim){x, 0};
    }
  }
  if (st == GCC_OK)
    st = set_sym(c, 0, &s, o, m, d);
  free(o);
  if (st != GCC_OK)
    return st;
  imp_val(c->I, out_idx(c, 0))->onnx_dt = dt; /* set_sym makes int64 */
  if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT32) {
    ival *ov = imp_val(c->I, out_idx(c, 0));
    int32_t *w = malloc((size_t)m * sizeof *w);
    if (!w)
      return oom(d);
    for (int64_t i = 0; i < m; i++)
      w[i] = (int32_t)((const int64_t *)ov->data)[i];
    GCC_TRY(pool_add(c->I, w, d));
    ov->data = w;
    ov->bytes = (size_t)m * sizeof *w;
  }
  mark_folded(c);
  return GCC_OK;
}

/* ---- Transpose and ScatterND of constants ----------------------------------------- */

int fold_const_applies(nctx *c, int k) {
  int idx = in_idx(c, k);
  if (idx < 0)
    return 0;
  const ival *v = imp_val(c->I, idx);
  int64_t m = tshape_static_numel(&v->sh);
  return v->is_const && !v->trainable && v->data && m >= 1 && m <= FOLD_MAX_ELEMS &&
         onnx_dtype_size(v->onnx_dt) > 0;
}

/* C-order strides of s. */
static void strides_of(const tshape *s, int64_t *st) {
  int64_t acc = 1;
  for (int i = s->ndim - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= s->d[i].v;
  }
}

gcc_status fold_transpose(nctx *c, const int64_t *perm, const tshape *s, gcc_diag *d) {
  const ival *x = imp_val(c->I, in_idx(c, 0));
  size_t es = onnx_dtype_size(x->onnx_dt);
  int64_t n = tshape_static_numel(s), xst[GCC_MAX_DIMS], idx[GCC_MAX_DIMS] = {0};
  strides_of(&x->sh, xst);
  uint8_t *o = malloc((size_t)n * es);
  if (!o)
    return oom(d);
  for (int64_t e = 0; e < n; e++) {
    int64_t src = 0;
    for (int i = 0; i < s->ndim; i++)
      src += idx[i] * xst[perm[i]];
    memcpy(o + (size_t)e * es, (const uint8_t *)x->data + (size_t)src * es, es);
    for (int i = s->ndim - 1; i >= 0; i--) {
      if (++idx[i] < s->d[i].v)
        break;
      idx[i] = 0;
    }
  }
  GCC_TRY(set_const(c, 0, x->onnx_dt, s, o, (size_t)n * es, d));
  mark_folded(c);
  return GCC_OK;
}

gcc_status cv_scatter_nd(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver >= 16 ? "reduction" : NULL, (char *)NULL));
  GCC_TRY(need_inputs(c, 3, 3, d));
  char red[32];
  GCC_TRY(a_string(c, "reduction", "none", red, sizeof red, d));
  if (strcmp(red, "none") != 0)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "reduction '%s' (only 'none')", red);
  /* an initializer is a weight only when importing for training (the
   * exporter's optimizer stores folded constants as initializers too) */
  for (int k = 0; k < 3; k++)
    if (!fold_const_applies(c, k) &&
        !(!c->I->train && in_idx(c, k) >= 0 && imp_val(c->I, in_idx(c, k))->is_init &&
          imp_val(c->I, in_idx(c, k))->data))
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "input %d ('%s') is not a constant: ScatterND is folded at import only "
                      "(masks built from constants), not computed per step",
                      k, imp_val(c->I, in_idx(c, k))->name);
  const ival *x = imp_val(c->I, in_idx(c, 0)), *u = imp_val(c->I, in_idx(c, 2));
  const tshape *xs = &x->sh, *is = in_sh(c, 1), *us = &u->sh;
  const int64_t *ind;
  int64_t n_ind;
  GCC_TRY(const_ints(c, in_idx(c, 1), "indices input", &ind, &n_ind, d));
  if (u->onnx_dt != x->onnx_dt)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "updates are %s but data is %s",
                    onnx_dtype_name(u->onnx_dt), onnx_dtype_name(x->onnx_dt));
  int q = is->ndim;
  int64_t k = q > 0 ? is->d[q - 1].v : 0;
  /* updates.shape = indices.shape[:-1] + data.shape[k:] */
  int ok = q >= 1 && k >= 1 && k <= xs->ndim && us->ndim == q - 1 + xs->ndim - k;
  for (int i = 0; ok && i < q - 1; i++)
    ok = us->d[i].v == is->d[i].v;
  for (int i = 0; ok && i < xs->ndim - k; i++)
    ok = us->d[q - 1 + i].v == xs->d[k + i].v;
  if (!ok) {
    char a[128], b[128], e[128];
    return node_err(c, d, GCC_ERR_SHAPE, "data %s, indices %s and updates %s do not agree",
                    tshape_str(xs, a, sizeof a), tshape_str(is, b, sizeof b),
                    tshape_str(us, e, sizeof e));
  }
  size_t es = onnx_dtype_size(x->onnx_dt);
  int64_t n = tshape_static_numel(xs), xst[GCC_MAX_DIMS], slice = 1;
  strides_of(xs, xst);
  for (int i = (int)k; i < xs->ndim; i++)
    slice *= xs->d[i].v;
  uint8_t *o = malloc((size_t)n * es);
  if (!o)
    return oom(d);
  memcpy(o, x->data, (size_t)n * es);
  int64_t n_tuples = n_ind / k;
  for (int64_t t = 0; t < n_tuples; t++) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; j++) {
      int64_t v = ind[t * k + j], dim = xs->d[j].v;
      v += v < 0 ? dim : 0;
      if (v < 0 || v >= dim) {
        free(o);
        return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                        "index %" PRId64 " of tuple %" PRId64 " is outside [-%" PRId64 ", %" PRId64
                        ")",
                        ind[t * k + j], t, dim, dim);
      }
      off += v * xst[j];
    }
    memcpy(o + (size_t)off * es, (const uint8_t *)u->data + (size_t)(t * slice) * es,
           (size_t)slice * es);
  }
  GCC_TRY(set_const(c, 0, x->onnx_dt, xs, o, (size_t)n * es, d));
  mark_folded(c);
  return GCC_OK;
}
