/*
 * import_ops_logic.c - the ONNX comparisons (Equal, Less, Greater,
 * LessOrEqual, GreaterOrEqual), logical ops (Not, And, Or, Xor) and Where:
 * bool (elem_type 9) values, numpy broadcasting. Nodes whose inputs are
 * all constants are folded (the masks and shape selections exporters
 * compute from initializers), as are Equal and Where of shape values that
 * hold the symbolic batch (sym_equal, sym_where); the others become IR
 * nodes (graph/ops.h).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

#define BOOL_DT ONNX__TENSOR_PROTO__DATA_TYPE__BOOL
#define I32     ONNX__TENSOR_PROTO__DATA_TYPE__INT32

/* ---- folding ------------------------------------------------------------------------ */

static int64_t ld_int(int dt, const void *p, int64_t i) {
  return dt == I64   ? ((const int64_t *)p)[i]
         : dt == I32 ? ((const int32_t *)p)[i]
                     : ((const uint8_t *)p)[i];
}
static double ld_num(int dt, const void *p, int64_t i) {
  return dt == F32 ? ((const float *)p)[i] : (double)ld_int(dt, p, i);
}

/* Element offset of input shape `in` for linear index o of broadcast shape `s`. */
static int64_t bcast_off(const tshape *in, const tshape *s, int64_t o) {
  int64_t off = 0, st = 1;
  for (int j = s->ndim - 1; j >= 0; j--) {
    int64_t dj = s->d[j].v, c = o % dj;
    o /= dj;
    int ji = in->ndim - s->ndim + j;
    int64_t din = ji >= 0 ? in->d[ji].v : 1;
    if (din != 1)
      off += c * st;
    st *= din;
  }
  return off;
}

static int all_const(nctx *c) {
  for (int k = 0; k < n_in(c); k++) {
    const ival *v = imp_val(c->I, in_idx(c, k));
    if (!v->is_const || tshape_static_numel(&v->sh) < 0)
      return 0;
  }
  return 1;
}

enum { K_EQ, K_LT, K_GT, K_LE, K_GE, K_NOT, K_AND, K_OR, K_XOR, K_WHERE };

/* Output 0 of node kind `kind` over constant inputs, shape `s`, dtype out_dt. */
static gcc_status fold(nctx *c, int kind, const tshape *s, int out_dt, gcc_diag *d) {
  int64_t n = tshape_static_numel(s);
  size_t es = onnx_dtype_size(out_dt);
  uint8_t *o = malloc((size_t)(n > 0 ? n : 1) * es);
  if (!o)
    return oom(d);
  const ival *v[3] = {NULL, NULL, NULL};
  for (int k = 0; k < n_in(c) && k < 3; k++)
    v[k] = imp_val(c->I, in_idx(c, k));
  for (int64_t i = 0; i < n; i++) {
    int64_t off[3] = {0, 0, 0};
    for (int k = 0; k < 3 && v[k]; k++)
      off[k] = bcast_off(&v[k]->sh, s, i);
    if (kind == K_WHERE) {
      int take = ld_int(BOOL_DT, v[0]->data, off[0]) != 0;
      const ival *src = take ? v[1] : v[2];
      memcpy(o + (size_t)i * es, (const uint8_t *)src->data + (size_t)off[take ? 1 : 2] * es, es);
      continue;
    }
    int r;
    if (kind == K_NOT) {
      r = ld_int(BOOL_DT, v[0]->data, off[0]) == 0;
    } else if (kind >= K_AND) {
      int p = ld_int(BOOL_DT, v[0]->data, off[0]) != 0,
          q = ld_int(BOOL_DT, v[1]->data, off[1]) != 0;
      r = kind == K_AND ? p && q : kind == K_OR ? p || q : p != q;
    } else if (v[0]->onnx_dt == I64) { /* exact: int64 beyond 2^53 */
      int64_t p = ld_int(I64, v[0]->data, off[0]), q = ld_int(I64, v[1]->data, off[1]);
      r = kind == K_EQ   ? p == q
          : kind == K_LT ? p < q
          : kind == K_GT ? p > q
          : kind == K_LE ? p <= q
                         : p >= q;
    } else {
      double p = ld_num(v[0]->onnx_dt, v[0]->data, off[0]);
      double q = ld_num(v[1]->onnx_dt, v[1]->data, off[1]);
      r = kind == K_EQ   ? p == q
          : kind == K_LT ? p < q
          : kind == K_GT ? p > q
          : kind == K_LE ? p <= q
                         : p >= q;
    }
    o[i] = (uint8_t)r;
  }
  GCC_TRY(set_const(c, 0, out_dt, s, o, (size_t)n * es, d));
  mark_folded(c);
  return GCC_OK;
}

/* ---- converters ---------------------------------------------------------------------- */

static gcc_status need_dt(nctx *c, int k, int bool_ok, int num_ok, gcc_diag *d) {
  int dt = in_dt(c, k);
  if ((dt == BOOL_DT && bool_ok) || (num_ok && (dt == F32 || dt == I64 || dt == I32)))
    return GCC_OK;
  return node_err(c, d, GCC_ERR_UNSUPPORTED, "input %d ('%s') has dtype %s (supported: %s)", k,
                  imp_val(c->I, in_idx(c, k))->name, onnx_dtype_name(dt),
                  num_ok && bool_ok ? "float, int64, int32, bool"
                  : num_ok          ? "float, int64, int32"
                                    : "bool");
}

static gcc_status broadcast_all(nctx *c, tshape *s, gcc_diag *d) {
  *s = *in_sh(c, 0);
  for (int k = 1; k < n_in(c); k++) {
    tshape t;
    if (!tshape_broadcast(s, in_sh(c, k), &t)) {
      char x[128], y[128];
      return node_err(c, d, GCC_ERR_SHAPE, "operands %s and %s do not broadcast",
                      tshape_str(s, x, sizeof x), tshape_str(in_sh(c, k), y, sizeof y));
    }
    *s = t;
  }
  return GCC_OK;
}

static gcc_status emit_n(nctx *c, int op, int kind, int out_dt, gcc_diag *d) {
  tshape s;
  GCC_TRY(broadcast_all(c, &s, d));
  if (all_const(c))
    return fold(c, kind, &s, out_dt, d);
  int ins[3], node, n = n_in(c);
  for (int k = 0; k < n; k++)
    GCC_TRY(in_ir(c, k, &ins[k], d));
  return emit(c, op, ins, n, 0, out_dt, &s, NULL, &node, d);
}

/* Equal of shape values that hold the symbolic batch N (sym_in: v or v * N
 * per element) against each other or integer constants, 1-D or scalars:
 * decided for every N >= 1 or refused. v * N == c holds for no N >= 1
 * unless c / v is a whole number >= 1 (so [N, -1] == -1 is [false, true]),
 * v * N == w * N iff v == w; what depends on N's value (2N == 4) is refused
 * naming the elements. The TorchScript
 * exporter's `x.expand(N, -1, -1)` (ViT's class token) writes
 * Where(Equal([N, -1, -1], [-1, -1, -1]), 1, [N, -1, -1]) into Expand's
 * shape. */
static gcc_status sym_equal(nctx *c, gcc_diag *d) {
  const sdim *a, *b;
  int64_t na, nb;
  GCC_TRY(sym_in(c, 0, &a, &na, d));
  GCC_TRY(sym_in(c, 1, &b, &nb, d));
  if (na != nb && na != 1 && nb != 1)
    return node_err(c, d, GCC_ERR_SHAPE, "operands of %" PRId64 " and %" PRId64 " elements", na,
                    nb);
  int64_t n = na > nb ? na : nb;
  uint8_t *r = malloc((size_t)(n > 0 ? n : 1));
  if (!r)
    return oom(d);
  for (int64_t i = 0; i < n; i++) {
    sdim x = a[na == 1 ? 0 : i], y = b[nb == 1 ? 0 : i];
    if (x.sym && y.sym) {
      r[i] = x.v == y.v;
      continue;
    }
    if (!x.sym && !y.sym) {
      r[i] = x.v == y.v;
      continue;
    }
    sdim s = x.sym ? x : y, k = x.sym ? y : x; /* s.v * N against the constant k.v */
    /* s.v * N == k.v for some N >= 1 only if k.v / s.v is a whole number >= 1 */
    if (s.v == 0 || k.v == 0 || k.v % s.v != 0 || k.v / s.v < 1) {
      r[i] = s.v == 0 && k.v == 0;
      continue;
    }
    free(r);
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "shape arithmetic %" PRId64 "N == %" PRId64
                    " depends on the symbolic batch N's value; it cannot be folded",
                    s.v, k.v);
  }
  tshape sh = na >= nb ? *in_sh(c, 0) : *in_sh(c, 1);
  GCC_TRY(set_const(c, 0, BOOL_DT, &sh, r, (size_t)n, d));
  mark_folded(c);
  return GCC_OK;
}

/* Where with a constant condition choosing between shape values holding N
 * and integer constants (1-D or scalars): the chosen elements, a shape value
 * again (see sym_equal). */
static gcc_status sym_where(nctx *c, gcc_diag *d) {
  const ival *cv = imp_val(c->I, in_idx(c, 0));
  int64_t nc = tshape_static_numel(&cv->sh);
  const sdim *x, *y;
  int64_t nx, ny;
  GCC_TRY(sym_in(c, 1, &x, &nx, d));
  GCC_TRY(sym_in(c, 2, &y, &ny, d));
  int64_t n = nc > nx ? nc : nx;
  n = ny > n ? ny : n;
  if ((nc != n && nc != 1) || (nx != n && nx != 1) || (ny != n && ny != 1) ||
      in_sh(c, 0)->ndim > 1 || in_sh(c, 1)->ndim > 1 || in_sh(c, 2)->ndim > 1)
    return node_err(c, d, GCC_ERR_SHAPE,
                    "a selection between shape values needs 1-D operands of one length or "
                    "scalars (%" PRId64 ", %" PRId64 " and %" PRId64 " elements)",
                    nc, nx, ny);
  sdim *r = malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
  if (!r)
    return oom(d);
  GCC_TRY(pool_add(c->I, r, d));
  for (int64_t i = 0; i < n; i++)
    r[i] = ((const uint8_t *)cv->data)[nc == 1 ? 0 : i] ? x[nx == 1 ? 0 : i] : y[ny == 1 ? 0 : i];
  tshape sh = {1, {{n, 0}}};
  if (in_sh(c, 0)->ndim == 0 && in_sh(c, 1)->ndim == 0 && in_sh(c, 2)->ndim == 0)
    sh.ndim = 0;
  GCC_TRY(set_sym(c, 0, &sh, r, n, d));
  imp_val(c->I, out_idx(c, 0))->onnx_dt = in_dt(c, 1);
  mark_folded(c);
  return GCC_OK;
}

/* Equal (1, 7, 11, 13, 19), Less / Greater (1, 7, 9, 13), LessOrEqual /
 * GreaterOrEqual (12, 16): two inputs of one dtype; bool only for Equal
 * (from opset 11). Opset < 7 (legacy `broadcast` attribute) is refused. */
static gcc_status comparison(nctx *c, int op, int kind, int bool_ok, gcc_diag *d) {
  if (c->ver < 7)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "opset %d (legacy broadcast) is not supported",
                    c->ver);
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  GCC_TRY(need_dt(c, 0, bool_ok, 1, d));
  if (in_dt(c, 1) != in_dt(c, 0))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "A is %s but B is %s",
                    onnx_dtype_name(in_dt(c, 0)), onnx_dtype_name(in_dt(c, 1)));
  if (kind == K_EQ && (has_symv(c, 0) || has_symv(c, 1)))
    return sym_equal(c, d);
  return emit_n(c, op, kind, BOOL_DT, d);
}

gcc_status cv_equal(nctx *c, gcc_diag *d) {
  return comparison(c, GCC_OP_EQUAL, K_EQ, 1, d);
}
gcc_status cv_less(nctx *c, gcc_diag *d) {
  return comparison(c, GCC_OP_LESS, K_LT, 0, d);
}
gcc_status cv_greater(nctx *c, gcc_diag *d) {
  return comparison(c, GCC_OP_GREATER, K_GT, 0, d);
}
gcc_status cv_less_or_equal(nctx *c, gcc_diag *d) {
  return comparison(c, GCC_OP_LESS_OR_EQUAL, K_LE, 0, d);
}
gcc_status cv_greater_or_equal(nctx *c, gcc_diag *d) {
  return comparison(c, GCC_OP_GREATER_OR_EQUAL, K_GE, 0, d);
}

/* Not (1), And / Or / Xor (1, 7): bool. */
static gcc_status logical(nctx *c, int op, int kind, int arity, gcc_diag *d) {
  if (c->ver < 7 && arity == 2)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "opset %d (legacy broadcast) is not supported",
                    c->ver);
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, arity, arity, d));
  for (int k = 0; k < arity; k++)
    GCC_TRY(need_dt(c, k, 1, 0, d));
  return emit_n(c, op, kind, BOOL_DT, d);
}

gcc_status cv_not(nctx *c, gcc_diag *d) {
  return logical(c, GCC_OP_NOT, K_NOT, 1, d);
}
gcc_status cv_and(nctx *c, gcc_diag *d) {
  return logical(c, GCC_OP_AND, K_AND, 2, d);
}
gcc_status cv_or(nctx *c, gcc_diag *d) {
  return logical(c, GCC_OP_OR, K_OR, 2, d);
}
gcc_status cv_xor(nctx *c, gcc_diag *d) {
  return logical(c, GCC_OP_XOR, K_XOR, 2, d);
}

/* Where (9, 16): condition bool, X and Y of one dtype. */
gcc_status cv_where(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 3, 3, d));
  if (in_dt(c, 0) != BOOL_DT)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "the condition '%s' is %s, not bool",
                    imp_val(c->I, in_idx(c, 0))->name, onnx_dtype_name(in_dt(c, 0)));
  GCC_TRY(need_dt(c, 1, 1, 1, d));
  if (in_dt(c, 2) != in_dt(c, 1))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "X is %s but Y is %s",
                    onnx_dtype_name(in_dt(c, 1)), onnx_dtype_name(in_dt(c, 2)));
  const ival *cond = imp_val(c->I, in_idx(c, 0));
  if ((has_symv(c, 1) || has_symv(c, 2)) && cond->is_const)
    return sym_where(c, d);
  return emit_n(c, GCC_OP_WHERE, K_WHERE, in_dt(c, 1), d);
}
