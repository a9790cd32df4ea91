/*
 * import_ops_shapecalc.c - shape arithmetic at import: Shape and Cast, and
 * the int64 vectors they make that hold the symbolic batch N (ival.symv:
 * each element v or v * N), folded through Gather, Slice, Concat,
 * Squeeze, Unsqueeze and Reshape and read by Reshape's and Expand's shape
 * inputs, so that no shape op runs per step. See onnx/import_ops.c.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

#define I32 ONNX__TENSOR_PROTO__DATA_TYPE__INT32

int has_symv(nctx *c, int k) {
  int idx = in_idx(c, k);
  return idx >= 0 && imp_val(c->I, idx)->symv != NULL;
}

gcc_status sym_in(nctx *c, int k, const sdim **vals, int64_t *n, gcc_diag *d) {
  int idx = in_idx(c, k);
  const ival *v = idx >= 0 ? imp_val(c->I, idx) : NULL;
  if (v && v->symv) {
    *vals = v->symv;
    *n = tshape_static_numel(&v->sh);
    return GCC_OK;
  }
  if (!v || !v->is_const || (v->onnx_dt != I64 && v->onnx_dt != I32))
    return node_err(c, d, GCC_ERR_SHAPE,
                    "input %d is not an int64 or int32 constant nor a shape computed at import", k);
  int64_t m = tshape_static_numel(&v->sh);
  sdim *r = malloc((size_t)(m > 0 ? m : 1) * sizeof *r);
  if (!r)
    return oom(d);
  for (int64_t i = 0; i < m; i++)
    r[i] = (sdim){v->onnx_dt == I32 ? ((const int32_t *)v->data)[i] : ((const int64_t *)v->data)[i],
                  0};
  GCC_TRY(pool_add(c->I, r, d));
  *vals = r;
  *n = m;
  return GCC_OK;
}

gcc_status set_sym(nctx *c, int k, const tshape *s, const sdim *vals, int64_t n, gcc_diag *d) {
  int any = 0;
  for (int64_t i = 0; i < n; i++)
    any |= vals[i].sym;
  if (!any) {
    int64_t *data = malloc((size_t)(n > 0 ? n : 1) * sizeof *data);
    if (!data)
      return oom(d);
    for (int64_t i = 0; i < n; i++)
      data[i] = vals[i].v;
    return set_const(c, k, I64, s, data, (size_t)n * sizeof *data, d);
  }
  sdim *copy = malloc((size_t)n * sizeof *copy);
  if (!copy)
    return oom(d);
  memcpy(copy, vals, (size_t)n * sizeof *copy);
  GCC_TRY(pool_add(c->I, copy, d));
  int o = out_idx(c, k);
  if (o < 0)
    return GCC_OK;
  ival *v = imp_val(c->I, o);
  v->onnx_dt = I64;
  v->sh = *s;
  v->symv = copy;
  v->done = 1;
  return GCC_OK;
}

/* Shape (1, 13, 15 with start and end): X's dims, folded. */
gcc_status cv_shape(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "start", "end", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  const tshape *x = in_sh(c, 0);
  int64_t b, e, r = x->ndim;
  GCC_TRY(a_int(c, "start", 0, &b, d));
  GCC_TRY(a_int(c, "end", r, &e, d));
  b += b < 0 ? r : 0;
  e += e < 0 ? r : 0;
  b = b < 0 ? 0 : b > r ? r : b;
  e = e < 0 ? 0 : e > r ? r : e;
  if (e <= b)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "an empty shape (zero-size tensors are not "
                    "supported)");
  tshape s = {1, {{e - b, 0}}};
  GCC_TRY(set_sym(c, 0, &s, &x->d[b], e - b, d));
  mark_folded(c);
  return GCC_OK;
}

/* Cast (1, 6, 9, 13, 19, 21): folded for a constant or a shape computed at
 * import (to int64, int32 or float); the identity when the dtype does not
 * change; otherwise an IR Cast (float, int64, int32, bool). */
static gcc_status cast_to(nctx *c, int64_t to, gcc_diag *d);

gcc_status cv_cast(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "to", "saturate", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  int64_t to;
  GCC_TRY(a_int(c, "to", 0, &to, d));
  return cast_to(c, to, d);
}

/* CastLike (15, 19, 21): Cast of input 0 to the dtype of input 1 (whose
 * values are not read), folded or imported as Cast is. */
gcc_status cv_cast_like(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "saturate", (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  return cast_to(c, in_dt(c, 1), d);
}

static gcc_status cast_to(nctx *c, int64_t to, gcc_diag *d) {
  int from = in_dt(c, 0);
  const ival *x = imp_val(c->I, in_idx(c, 0));
  if (to == from) {
    set_alias(c, 0, in_idx(c, 0));
    mark_folded(c);
    return GCC_OK;
  }
  if (x->symv && (to == I64 || to == I32)) {
    GCC_TRY(set_sym(c, 0, &x->sh, x->symv, tshape_static_numel(&x->sh), d));
    imp_val(c->I, out_idx(c, 0))->onnx_dt = (int)to;
    mark_folded(c);
    return GCC_OK;
  }
  const int BOOL_DT = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
  if (x->is_const && (from == I64 || from == I32 || from == F32 || from == BOOL_DT) &&
      (to == I64 || to == I32 || to == F32 || to == BOOL_DT)) {
    int64_t n = tshape_static_numel(&x->sh);
    size_t es = onnx_dtype_size((int)to);
    uint8_t *data = malloc((size_t)(n > 0 ? n : 1) * es);
    if (!data)
      return oom(d);
    for (int64_t i = 0; i < n; i++) {
      double v = from == F32       ? ((const float *)x->data)[i]
                 : from == I32     ? ((const int32_t *)x->data)[i]
                 : from == BOOL_DT ? ((const uint8_t *)x->data)[i]
                                   : (double)((const int64_t *)x->data)[i];
      if (to == BOOL_DT) { /* nonzero (NaN too) is true */
        data[i] = v != 0.0;
      } else if (to == F32) {
        float f = (float)v;
        memcpy(data + i * es, &f, es);
      } else if (to == I32) {
        int32_t t = (int32_t)v;
        memcpy(data + i * es, &t, es);
      } else {
        int64_t t = from == I64 ? ((const int64_t *)x->data)[i] : (int64_t)v;
        memcpy(data + i * es, &t, es);
      }
    }
    GCC_TRY(set_const(c, 0, (int)to, &x->sh, data, (size_t)n * es, d));
    mark_folded(c);
    return GCC_OK;
  }
  /* at run time: an IR Cast between float, int64, int32 and bool */
  gcc_dtype gfrom = onnx_to_gcc_dtype(from), gto = onnx_to_gcc_dtype((int)to);
  if (gfrom == GCC_DT_UNDEFINED || gto == GCC_DT_UNDEFINED)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "casts '%s' (%s) to %s; this version casts between float, int64, int32 and "
                    "bool",
                    x->name, onnx_dtype_name(from), onnx_dtype_name((int)to));
  int in, node;
  GCC_TRY(in_ir(c, 0, &in, d));
  GCC_TRY(emit(c, GCC_OP_CAST, &in, 1, 0, (int)to, &x->sh, NULL, &node, d));
  return gcc_node_set_int(c->I->g, node, "to", gto) ? oom(d) : GCC_OK;
}

/* A shape vector (1-D, or a scalar) folded by Gather along axis 0. */
gcc_status sym_gather(nctx *c, gcc_diag *d) {
  const sdim *x;
  int64_t n, n_idx;
  GCC_TRY(sym_in(c, 0, &x, &n, d));
  const int64_t *idx;
  GCC_TRY(const_ints(c, in_idx(c, 1), "indices input", &idx, &n_idx, d));
  if (in_sh(c, 0)->ndim != 1)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "gathers from a %d-D shape value",
                    in_sh(c, 0)->ndim);
  sdim *r = malloc((size_t)(n_idx > 0 ? n_idx : 1) * sizeof *r);
  if (!r)
    return oom(d);
  for (int64_t j = 0; j < n_idx; j++) {
    int64_t v = idx[j] < 0 ? idx[j] + n : idx[j];
    if (v < 0 || v >= n) {
      free(r);
      return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                      "index %" PRId64 " is outside [-%" PRId64 ", %" PRId64 ")", idx[j], n, n);
    }
    r[j] = x[v];
  }
  gcc_status st = set_sym(c, 0, in_sh(c, 1), r, n_idx, d);
  free(r);
  if (st == GCC_OK)
    mark_folded(c);
  return st;
}

/* A 1-D shape vector sliced (start, step, count). */
gcc_status sym_slice(nctx *c, int out_k, int64_t start, int64_t step, int64_t len, gcc_diag *d) {
  const sdim *x;
  int64_t n;
  GCC_TRY(sym_in(c, 0, &x, &n, d));
  sdim *r = malloc((size_t)(len > 0 ? len : 1) * sizeof *r);
  if (!r)
    return oom(d);
  for (int64_t j = 0; j < len; j++)
    r[j] = x[start + j * step];
  tshape s = {1, {{len, 0}}};
  gcc_status st = set_sym(c, out_k, &s, r, len, d);
  free(r);
  return st;
}

/* Concat of 1-D shape vectors (constants among them). */
gcc_status sym_concat(nctx *c, gcc_diag *d) {
  int64_t total = 0;
  sdim *r = NULL;
  gcc_status st = GCC_OK;
  for (int k = 0; k < n_in(c) && st == GCC_OK; k++) {
    const sdim *x;
    int64_t n;
    st = sym_in(c, k, &x, &n, d);
    if (st == GCC_OK && in_sh(c, k)->ndim != 1)
      st =
          node_err(c, d, GCC_ERR_UNSUPPORTED, "concatenates a %d-D shape value", in_sh(c, k)->ndim);
    if (st != GCC_OK)
      break;
    sdim *nr = realloc(r, (size_t)(total + n + 1) * sizeof *nr);
    if (!nr) {
      st = oom(d);
      break;
    }
    r = nr;
    memcpy(r + total, x, (size_t)n * sizeof *r);
    total += n;
  }
  if (st == GCC_OK) {
    tshape s = {1, {{total, 0}}};
    st = set_sym(c, 0, &s, r, total, d);
  }
  free(r);
  if (st == GCC_OK)
    mark_folded(c);
  return st;
}

/* Input 0, a shape value, with another shape (Squeeze, Unsqueeze,
 * Reshape). */
gcc_status sym_reshape(nctx *c, const tshape *s, gcc_diag *d) {
  const ival *x = imp_val(c->I, in_idx(c, 0));
  GCC_TRY(set_sym(c, 0, s, x->symv, tshape_static_numel(&x->sh), d));
  mark_folded(c);
  return GCC_OK;
}

/* A shape input that holds N, as the int64 entries of Reshape (each v * N
 * entry equal to the input's dim at that position becomes 0, copy; one
 * other becomes -1, inferred) or of Expand (an entry equal to the input's
 * dim becomes 1, keep); anything else is an error naming the input. */
gcc_status sym_target(nctx *c, int k, const tshape *x, int expand, const int64_t **out, int64_t *n,
                      gcc_diag *d) {
  const sdim *t;
  GCC_TRY(sym_in(c, k, &t, n, d));
  int64_t *r = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *r);
  if (!r)
    return oom(d);
  GCC_TRY(pool_add(c->I, r, d));
  int inferred = 0;
  for (int64_t i = 0; i < *n; i++) {
    r[i] = t[i].v;
    if (!t[i].sym)
      continue;
    int64_t xi = expand ? x->ndim - *n + i : i;
    if (xi >= 0 && xi < x->ndim && x->d[xi].sym && x->d[xi].v == t[i].v) {
      r[i] = expand ? 1 : 0;
    } else if (expand && t[i].v == 1 && (xi < 0 || (!x->d[xi].sym && x->d[xi].v == 1))) {
      r[i] = 0; /* the batch size, from a graph input (Expand's `like`) */
    } else if (!expand && !inferred) {
      r[i] = -1;
      inferred = 1;
    } else {
      char a[128];
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "shape entry %" PRId64 " is %" PRId64 " x the batch size, which the "
                      "input %s does not have there",
                      i, t[i].v, tshape_str(x, a, sizeof a));
    }
  }
  *out = r;
  return GCC_OK;
}

/* Integer arithmetic on shape values and integer constants (scalars or
 * vectors, a scalar broadcast): folded, so that the TorchScript exporter's
 * size computations (H / patch, N * heads, dim % heads) run at import. */
int sym_arith_applies(nctx *c) {
  if (c->ver < 7 || n_in(c) != 2)
    return 0;
  for (int k = 0; k < 2; k++) {
    int idx = in_idx(c, k);
    if (idx < 0)
      return 0;
    const ival *v = imp_val(c->I, idx);
    if (!(v->symv || v->is_const) || (v->onnx_dt != I64 && v->onnx_dt != I32) || v->sh.ndim > 1)
      return 0;
  }
  return 1;
}

gcc_status sym_arith(nctx *c, char how, gcc_diag *d) {
  if (how != '%')
    GCC_TRY(allow_attrs(c, d, (char *)NULL));
  const sdim *a, *b;
  int64_t na, nb;
  GCC_TRY(sym_in(c, 0, &a, &na, d));
  GCC_TRY(sym_in(c, 1, &b, &nb, d));
  if (na != nb && na != 1 && nb != 1)
    return node_err(c, d, GCC_ERR_SHAPE, "operands of %" PRId64 " and %" PRId64 " elements", na,
                    nb);
  int64_t n = na > nb ? na : nb;
  sdim *r = malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
  if (!r)
    return oom(d);
  GCC_TRY(pool_add(c->I, r, d));
  for (int64_t i = 0; i < n; i++) {
    sdim x = a[na == 1 ? 0 : i], y = b[nb == 1 ? 0 : i];
    int ok = 1;
    switch (how) {
    case '+':
    case '-':
      ok = x.sym == y.sym || (x.sym ? y.v == 0 : x.v == 0);
      r[i] = (sdim){how == '+' ? x.v + y.v : x.v - y.v, x.sym || y.sym};
      if (!x.sym && y.sym && how == '-')
        ok = 0;
      break;
    case '*':
      ok = !(x.sym && y.sym);
      r[i] = (sdim){x.v * y.v, x.sym || y.sym};
      break;
    case '/':
    case '%':
      ok = !y.sym && y.v != 0 && (!x.sym || (how == '/' && x.v % y.v == 0));
      if (ok && how == '/')
        r[i] = (sdim){x.v / y.v, x.sym};
      else if (ok) /* ONNX Mod with fmod 0: the sign of the divisor, as Python */
        r[i] = (sdim){((x.v % y.v) + y.v) % y.v, 0};
      break;
    default: ok = 0;
    }
    if (!ok)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "shape arithmetic %" PRId64 "%s %c %" PRId64 "%s cannot be folded with the "
                      "symbolic batch N",
                      x.v, x.sym ? "N" : "", how, y.v, y.sym ? "N" : "");
  }
  tshape s = na >= nb ? *in_sh(c, 0) : *in_sh(c, 1);
  GCC_TRY(set_sym(c, 0, &s, r, n, d));
  imp_val(c->I, out_idx(c, 0))->onnx_dt = in_dt(c, 0);
  mark_folded(c);
  return GCC_OK;
}

/* Mod (10, 13): folded for integer constants and shape values (fmod 0). */
gcc_status cv_mod(nctx *c, gcc_diag *d) {
  int64_t fmod;
  GCC_TRY(a_int(c, "fmod", 0, &fmod, d));
  if (fmod == 0 && sym_arith_applies(c)) {
    GCC_TRY(allow_attrs(c, d, "fmod", (char *)NULL));
    return sym_arith(c, '%', d);
  }
  return node_err(c, d, GCC_ERR_UNSUPPORTED,
                  "Mod at run time is not supported here: only integer constants and shapes "
                  "are folded");
}

/* Range (11): start, limit and delta scalars, each a constant or a shape
 * value computed at import (int64, int32) or a float constant: folded to
 * the constant [start, start + delta, ...) of max(ceil((limit - start) /
 * delta), 0) elements (ONNX's definition; torch.arange as the exporters
 * write it). Range(0, k x N, delta), the limit from the batch, is the
 * affine index tensor of onnx/import_ops_affine.c (Tensor.as_strided's
 * indices); any other bound that depends on the batch, or an empty range,
 * is refused naming the node. */
gcc_status cv_range(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 3, 3, d));
  int dt = in_dt(c, 0);
  static const char *const kWhat[3] = {"start input", "limit input", "delta input"};
  double v[3];
  int64_t iv[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++) {
    if (in_dt(c, k) != dt)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s is %s but start is %s", kWhat[k],
                      onnx_dtype_name(in_dt(c, k)), onnx_dtype_name(dt));
    if (tshape_static_numel(in_sh(c, k)) != 1)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s is not a scalar", kWhat[k]);
    if ((dt == I64 || dt == I32) && !has_symv(c, k)) {
      const int64_t *x;
      int64_t n;
      GCC_TRY(const_ints(c, in_idx(c, k), kWhat[k], &x, &n, d));
      iv[k] = x[0];
      v[k] = (double)x[0];
    } else if (dt == I64 || dt == I32) {
      const sdim *x;
      int64_t n;
      GCC_TRY(sym_in(c, k, &x, &n, d));
      if (x[0].sym) { /* as_strided's indices: an affine map over N */
        if (k != 1 || !(iv[0] == 0 && !has_symv(c, 0)) || has_symv(c, 2))
          return node_err(c, d, GCC_ERR_UNSUPPORTED,
                          "%s is %" PRId64 " x the batch size: only the limit of Range(0, k x N, "
                          "delta) may depend on the batch",
                          kWhat[k], x[0].v);
        const int64_t *dl;
        int64_t nd;
        GCC_TRY(const_ints(c, in_idx(c, 2), kWhat[2], &dl, &nd, d));
        int64_t abc[3] = {0, x[0].v, dl[0]};
        return aff_range(c, abc, 1, &x[0], dt, d);
      }
      iv[k] = x[0].v;
      v[k] = (double)x[0].v;
    } else if (dt == F32) {
      GCC_TRY(const_scalar(c, in_idx(c, k), kWhat[k], &v[k], d));
    } else {
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "dtype %s (int64, int32 or float)",
                      onnx_dtype_name(dt));
    }
  }
  if (v[2] == 0.0 || v[2] != v[2])
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "delta is %g", v[2]);
  int64_t n;
  if (dt == F32) {
    double len = ceil(((double)(float)v[1] - (double)(float)v[0]) / (double)(float)v[2]);
    if (!(len < (double)((int64_t)1 << 32)))
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "the range has %g elements", len);
    n = len > 0 ? (int64_t)len : 0;
  } else {
    int64_t span = iv[1] - iv[0], dl = iv[2];
    /* ceil(span / dl) in integers */
    n = span / dl + ((span % dl != 0) && ((span > 0) == (dl > 0)));
    n = n > 0 ? n : 0;
    if (n > ((int64_t)1 << 32))
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "the range has %" PRId64 " elements", n);
  }
  if (n == 0)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "the range from %g to %g by %g is empty (zero-size tensors are not "
                    "supported)",
                    v[0], v[1], v[2]);
  size_t es = onnx_dtype_size(dt);
  uint8_t *data = malloc((size_t)n * es);
  if (!data)
    return oom(d);
  for (int64_t i = 0; i < n; i++) {
    if (dt == I64) {
      int64_t x = iv[0] + i * iv[2];
      memcpy(data + i * es, &x, es);
    } else if (dt == I32) {
      int32_t x = (int32_t)(iv[0] + i * iv[2]);
      memcpy(data + i * es, &x, es);
    } else {
      float x = (float)((double)(float)v[0] + (double)i * (double)(float)v[2]);
      memcpy(data + i * es, &x, es);
    }
  }
  tshape s = {1, {{n, 0}}};
  GCC_TRY(set_const(c, 0, dt, &s, data, (size_t)n * es, d));
  mark_folded(c);
  return GCC_OK;
}
