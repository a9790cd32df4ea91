/*
 * import_ops_conv.c - ONNX -> gcc IR converters of Gemm, MatMul, Conv, the pools,
 * BatchNormalization and ConvTranspose. See onnx/import_ops.c.
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

/* ---- GEMMs ---------------------------------------------------------------------- */

gcc_status cv_gemm(nctx *c, gcc_diag *d) {
  if (c->ver < 7)
    GCC_TRY(allow_attrs(c, d, "alpha", "beta", "transA", "transB", "broadcast", (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "alpha", "beta", "transA", "transB", (char *)NULL));
  GCC_TRY(need_inputs(c, c->ver < 11 ? 3 : 2, 3, d));
  for (int k = 0; k < n_in(c); k++)
    if (in_idx(c, k) >= 0)
      GCC_TRY(need_float(c, k, d));
  float alpha, beta;
  int64_t ta, tb, bc;
  GCC_TRY(a_float(c, "alpha", 1.0f, &alpha, d));
  GCC_TRY(a_float(c, "beta", 1.0f, &beta, d));
  GCC_TRY(a_int(c, "transA", 0, &ta, d));
  GCC_TRY(a_int(c, "transB", 0, &tb, d));
  GCC_TRY(a_int(c, "broadcast", 0, &bc, d));
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "transA and transB must be 0 or 1");
  const tshape *sa = in_sh(c, 0), *sb = in_sh(c, 1);
  char x[128], y[128];
  if (sa->ndim != 2 || sb->ndim != 2)
    return node_err(c, d, GCC_ERR_SHAPE, "A and B must be 2-D, got %s and %s",
                    tshape_str(sa, x, sizeof x), tshape_str(sb, y, sizeof y));
  sdim m = sa->d[ta ? 1 : 0], ka = sa->d[ta ? 0 : 1], kb = sb->d[tb ? 1 : 0],
       nn = sb->d[tb ? 0 : 1];
  if (ka.v != kb.v || ka.sym != kb.sym)
    return node_err(c, d, GCC_ERR_SHAPE, "inner dims of A %s and B %s differ",
                    tshape_str(sa, x, sizeof x), tshape_str(sb, y, sizeof y));
  tshape s = {2, {m, nn}};
  int ins[3] = {-1, -1, -1}, n = 2;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  GCC_TRY(in_ir(c, 1, &ins[1], d));
  int split = 0; /* C added by a separate node (below) */
  if (in_idx(c, 2) >= 0) {
    const tshape *sc = in_sh(c, 2);
    tshape r;
    int ok = tshape_broadcast(&s, sc, &r) && r.d[0].v == s.d[0].v && r.d[1].v == s.d[1].v &&
             r.d[0].sym == s.d[0].sym && r.ndim == 2;
    if (ok && c->ver < 7 && !bc)
      ok = sc->ndim == 2 && sc->d[0].v == m.v && sc->d[1].v == nn.v;
    if (!ok)
      return node_err(c, d, GCC_ERR_SHAPE, "C %s does not broadcast to (M, N) = %s",
                      tshape_str(sc, x, sizeof x), tshape_str(&s, y, sizeof y));
    /* a full (M, N) C, or a bias row with beta = 1, is one GEMM with its
     * epilogue on every backend (cuBLASLt takes nothing else); any other
     * broadcast C is added after the GEMM: Y = alpha A B + (beta C) */
    int full = sc->ndim == 2 && sc->d[0].v == m.v && sc->d[0].sym == m.sym && sc->d[1].v == nn.v;
    int row = (sc->ndim == 1 || (sc->ndim == 2 && sc->d[0].v == 1 && !sc->d[0].sym)) &&
              sc->d[sc->ndim - 1].v == nn.v && nn.v > 1;
    if (full || (row && beta == 1.0f)) {
      GCC_TRY(in_ir(c, 2, &ins[2], d));
      n = 3;
    } else {
      split = 1;
    }
  }
  int node, tmp;
  GCC_TRY(emit(c, GCC_OP_GEMM, ins, n, split ? -1 : 0, F32, &s, &tmp, &node, d));
  gcc_graph *g = c->I->g;
  if (gcc_node_set_float(g, node, "alpha", alpha) || gcc_node_set_float(g, node, "beta", beta) ||
      gcc_node_set_int(g, node, "transA", ta) || gcc_node_set_int(g, node, "transB", tb))
    return oom(d);
  if (!split)
    return GCC_OK;
  int cv;
  ival *C = imp_val(c->I, in_idx(c, 2));
  if (C->is_const) { /* beta C folded */
    int64_t cn = tshape_static_numel(&C->sh);
    float *sc = malloc((size_t)(cn > 0 ? cn : 1) * sizeof *sc);
    if (!sc)
      return oom(d);
    for (int64_t i = 0; i < cn; i++)
      sc[i] = beta * ((const float *)C->data)[i];
    gcc_shape cs = {C->sh.ndim, {0}};
    for (int i = 0; i < C->sh.ndim; i++)
      cs.dims[i] = C->sh.d[i].v;
    char base[600], name[620];
    snprintf(base, sizeof base, "%s/beta_C", c->ir_name);
    snprintf(name, sizeof name, "%s", base);
    for (int k = 1; gcc_graph_find(g, name) >= 0; k++)
      snprintf(name, sizeof name, "%s_%d", base, k);
    gcc_status st = gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &cs, GCC_VALUE_CONST, sc,
                                        (size_t)(cn > 0 ? cn : 1) * sizeof *sc, &cv, d);
    free(sc);
    GCC_TRY(st);
  } else {
    GCC_TRY(in_ir(c, 2, &cv, d));
    if (beta != 1.0f) {
      char base[600], name[620];
      snprintf(base, sizeof base, "%s/beta", c->ir_name);
      snprintf(name, sizeof name, "%s", base);
      for (int k = 1; gcc_graph_find(g, name) >= 0; k++)
        snprintf(name, sizeof name, "%s_%d", base, k);
      gcc_shape one = {0, {0}};
      int bv, scaled;
      GCC_TRY(gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &one, GCC_VALUE_CONST, &beta,
                                  sizeof beta, &bv, d));
      int mi[2] = {cv, bv};
      GCC_TRY(emit(c, GCC_OP_MUL, mi, 2, -1, F32, &C->sh, &scaled, &node, d));
      cv = scaled;
    }
  }
  int ai[2] = {tmp, cv};
  return emit(c, GCC_OP_ADD, ai, 2, 0, F32, &s, NULL, &node, d);
}

/* numpy.matmul's shape rule. */
gcc_status cv_matmul(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  GCC_TRY(need_float(c, 0, d));
  GCC_TRY(need_float(c, 1, d));
  tshape a = *in_sh(c, 0), b = *in_sh(c, 1);
  char x[128], y[128];
  if (a.ndim < 1 || b.ndim < 1)
    return node_err(c, d, GCC_ERR_SHAPE, "operands must have at least one dim");
  int a1 = a.ndim == 1, b1 = b.ndim == 1;
  tshape pa = a, pb = b;
  if (a1) {
    pa.ndim = 2;
    pa.d[1] = a.d[0];
    pa.d[0] = (sdim){1, 0};
  }
  if (b1) {
    pb.ndim = 2;
    pb.d[1] = (sdim){1, 0};
  }
  sdim k1 = pa.d[pa.ndim - 1], k2 = pb.d[pb.ndim - 2];
  if (k1.v != k2.v || k1.sym != k2.sym)
    return node_err(c, d, GCC_ERR_SHAPE, "inner dims of %s and %s differ",
                    tshape_str(&a, x, sizeof x), tshape_str(&b, y, sizeof y));
  tshape ba = pa, bb = pb, batch;
  ba.ndim -= 2;
  bb.ndim -= 2;
  if (!tshape_broadcast(&ba, &bb, &batch))
    return node_err(c, d, GCC_ERR_SHAPE, "batch dims of %s and %s do not broadcast",
                    tshape_str(&a, x, sizeof x), tshape_str(&b, y, sizeof y));
  tshape s = batch;
  if (!a1)
    s.d[s.ndim++] = pa.d[pa.ndim - 2];
  if (!b1)
    s.d[s.ndim++] = pb.d[pb.ndim - 1];
  int ins[2], node;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  GCC_TRY(in_ir(c, 1, &ins[1], d));
  return emit(c, GCC_OP_MATMUL, ins, 2, 0, F32, &s, NULL, &node, d);
}

/* ---- windows: Conv and the pools ------------------------------------------------------ */

typedef struct window {
  int nsp; /* spatial dims: 1 or 2 */
  int64_t k[2], s[2], dl[2], pb[2], pe[2];
  int64_t out[2];
} window;

/* kernel (from the filter or kernel_shape), strides, dilations, pads and
 * auto_pad of a node over input spatial dims `in`; the output dims with
 * floor or ceil rounding (ceil: PyTorch's and ONNX Runtime's rule that the
 * last window starts inside the input or its left padding). */
static gcc_status read_window(nctx *c, const int64_t *in, int nsp, const int64_t *kernel,
                              int dilations_ok, int ceil_mode, window *w, gcc_diag *d) {
  const int64_t *v;
  int n;
  w->nsp = nsp;
  for (int i = 0; i < nsp; i++) {
    w->k[i] = kernel[i];
    w->s[i] = w->dl[i] = 1;
    w->pb[i] = w->pe[i] = 0;
  }
  GCC_TRY(a_ints(c, "strides", &v, &n, d));
  if (n >= 0 && n != nsp)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "strides has %d entries for %d spatial dims", n,
                    nsp);
  for (int i = 0; i < n; i++)
    w->s[i] = v[i];
  if (dilations_ok) {
    GCC_TRY(a_ints(c, "dilations", &v, &n, d));
    if (n >= 0 && n != nsp)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "dilations has %d entries for %d spatial dims",
                      n, nsp);
    for (int i = 0; i < n; i++)
      w->dl[i] = v[i];
  }
  GCC_TRY(a_ints(c, "pads", &v, &n, d));
  int has_pads = n >= 0;
  if (has_pads && n != 2 * nsp)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "pads has %d entries for %d spatial dims", n, nsp);
  for (int i = 0; has_pads && i < nsp; i++) {
    w->pb[i] = v[i];
    w->pe[i] = v[i + nsp];
  }
  for (int i = 0; i < nsp; i++)
    if (w->k[i] < 1 || w->s[i] < 1 || w->dl[i] < 1 || w->pb[i] < 0 || w->pe[i] < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                      "kernel, strides and dilations must be >= 1 and pads >= 0");
  char ap[32];
  GCC_TRY(a_string(c, "auto_pad", "NOTSET", ap, sizeof ap, d));
  int same_upper = strcmp(ap, "SAME_UPPER") == 0, same_lower = strcmp(ap, "SAME_LOWER") == 0;
  if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0 && !same_upper && !same_lower)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "auto_pad '%s' is not handled (NOTSET, VALID, SAME_UPPER, SAME_LOWER)", ap);
  if (strcmp(ap, "NOTSET") != 0 && has_pads) {
    int nonzero = 0;
    for (int i = 0; i < nsp; i++)
      nonzero |= w->pb[i] || w->pe[i];
    if (nonzero)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "auto_pad %s and explicit pads are both set",
                      ap);
  }
  for (int i = 0; i < nsp; i++) {
    int64_t span = (w->k[i] - 1) * w->dl[i] + 1;
    if (same_upper || same_lower) { /* out = ceil(in / stride) */
      int64_t out = (in[i] + w->s[i] - 1) / w->s[i];
      int64_t total = (out - 1) * w->s[i] + span - in[i];
      if (total < 0)
        total = 0;
      w->pb[i] = same_upper ? total / 2 : total - total / 2;
      w->pe[i] = total - w->pb[i];
      w->out[i] = out;
      continue;
    }
    if (strcmp(ap, "VALID") == 0)
      w->pb[i] = w->pe[i] = 0;
    int64_t room = in[i] + w->pb[i] + w->pe[i] - span;
    if (room < 0)
      return node_err(c, d, GCC_ERR_SHAPE,
                      "the window of %" PRId64
                      " (dilated) does not fit the padded input of %" PRId64,
                      span, in[i] + w->pb[i] + w->pe[i]);
    if (!ceil_mode) {
      w->out[i] = room / w->s[i] + 1;
    } else {
      w->out[i] = (room + w->s[i] - 1) / w->s[i] + 1;
      if ((w->out[i] - 1) * w->s[i] >= in[i] + w->pb[i])
        w->out[i]--;
    }
  }
  return GCC_OK;
}

/* The 2-D IR attributes of a window (1-D: over an H of 1). */
static gcc_status set_window_attrs(gcc_graph *g, int node, const window *w, int with_dilations,
                                   gcc_diag *d) {
  int64_t k[2], s[2], dl[2], p[4];
  int off = w->nsp == 1 ? 1 : 0;
  for (int i = 0; i < 2; i++) {
    int j = i - off;
    k[i] = j >= 0 ? w->k[j] : 1;
    s[i] = j >= 0 ? w->s[j] : 1;
    dl[i] = j >= 0 ? w->dl[j] : 1;
    p[i] = j >= 0 ? w->pb[j] : 0;
    p[i + 2] = j >= 0 ? w->pe[j] : 0;
  }
  if (gcc_node_set_ints(g, node, "kernel_shape", k, 2) ||
      gcc_node_set_ints(g, node, "strides", s, 2) || gcc_node_set_ints(g, node, "pads", p, 4) ||
      (with_dilations && gcc_node_set_ints(g, node, "dilations", dl, 2)))
    return oom(d);
  return GCC_OK;
}

/* X's spatial dims (rank 3: 1-D, rank 4: 2-D; the rest is refused). */
static gcc_status spatial(nctx *c, const tshape *x, const char *what, int64_t *in, int *nsp,
                          gcc_diag *d) {
  char sh[128];
  if (x->ndim != 3 && x->ndim != 4)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "%s over %s: only 1-D (N, C, L) and 2-D (N, C, H, W) inputs are supported",
                    what, tshape_str(x, sh, sizeof sh));
  *nsp = x->ndim - 2;
  for (int i = 0; i < *nsp; i++) {
    if (x->d[2 + i].sym)
      return node_err(c, d, GCC_ERR_SHAPE, "a spatial dim of %s depends on the batch",
                      tshape_str(x, sh, sizeof sh));
    in[i] = x->d[2 + i].v;
  }
  if (x->d[1].sym)
    return node_err(c, d, GCC_ERR_SHAPE, "the channels of %s depend on the batch",
                    tshape_str(x, sh, sizeof sh));
  return GCC_OK;
}

/* X as a 4-D IR operand: a 1-D input gets an H of 1. */
static gcc_status as_4d(nctx *c, int k, int nsp, int *ir, gcc_diag *d) {
  if (nsp == 2)
    return in_ir(c, k, ir, d);
  const tshape *x = in_sh(c, k);
  tshape s = {4, {x->d[0], x->d[1], {1, 0}, x->d[2]}};
  return reshaped(c, in_idx(c, k), &s, ir, d);
}

/* Emits `op` over 4-D operands and writes ONNX output 0 with `out` (a 1-D
 * result is reshaped back). Returns the IR node. */
static gcc_status emit_window_op(nctx *c, int op, const int *ins, int n, int nsp, const tshape *out,
                                 int *node, gcc_diag *d) {
  if (nsp == 2)
    return emit(c, op, ins, n, 0, F32, out, NULL, node, d);
  tshape s4 = {4, {out->d[0], out->d[1], {1, 0}, out->d[2]}};
  int tmp;
  GCC_TRY(emit(c, op, ins, n, -1, F32, &s4, &tmp, node, d));
  return emit_reshape(c, tmp, out, 0, F32, NULL, d);
}

static gcc_status emit_pad4(nctx *c, int x, const tshape *xs, const int64_t *pads, float value,
                            int *out, tshape *os, gcc_diag *d);

gcc_status cv_conv(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                      (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 3, d));
  for (int k = 0; k < n_in(c); k++)
    if (in_idx(c, k) >= 0)
      GCC_TRY(need_float(c, k, d));
  const tshape *x = in_sh(c, 0), *w = in_sh(c, 1);
  int64_t in[2];
  int nsp;
  char a[128], b[128];
  GCC_TRY(spatial(c, x, "Conv", in, &nsp, d));
  if (w->ndim != x->ndim || tshape_has_sym(w))
    return node_err(c, d, GCC_ERR_SHAPE, "filter W %s does not match input X %s",
                    tshape_str(w, a, sizeof a), tshape_str(x, b, sizeof b));
  int64_t group, kernel[2];
  GCC_TRY(a_int(c, "group", 1, &group, d));
  if (group < 1 || x->d[1].v % group != 0 || w->d[0].v % group != 0 ||
      w->d[1].v * group != x->d[1].v)
    return node_err(c, d, GCC_ERR_SHAPE,
                    "X %s and W %s do not agree with group = %" PRId64
                    " (C = W.dims[1] * group, M divisible by group)",
                    tshape_str(x, a, sizeof a), tshape_str(w, b, sizeof b), group);
  for (int i = 0; i < nsp; i++)
    kernel[i] = w->d[2 + i].v;
  const int64_t *ks;
  int nks;
  GCC_TRY(a_ints(c, "kernel_shape", &ks, &nks, d));
  if (nks >= 0) {
    int ok = nks == nsp;
    for (int i = 0; ok && i < nsp; i++)
      ok = ks[i] == kernel[i];
    if (!ok)
      return node_err(c, d, GCC_ERR_SHAPE, "kernel_shape does not match the filter %s",
                      tshape_str(w, a, sizeof a));
  }
  if (in_idx(c, 2) >= 0) {
    const tshape *bs = in_sh(c, 2);
    if (bs->ndim != 1 || bs->d[0].v != w->d[0].v || bs->d[0].sym)
      return node_err(c, d, GCC_ERR_SHAPE, "bias B %s must be [M] for filter %s",
                      tshape_str(bs, a, sizeof a), tshape_str(w, b, sizeof b));
  }
  window win;
  GCC_TRY(read_window(c, in, nsp, kernel, 1, 0, &win, d));
  tshape out = {x->ndim, {x->d[0], w->d[0]}};
  for (int i = 0; i < nsp; i++)
    out.d[2 + i] = (sdim){win.out[i], 0};
  int ins[3] = {-1, -1, -1}, n = in_idx(c, 2) >= 0 ? 3 : 2, node;
  GCC_TRY(as_4d(c, 0, nsp, &ins[0], d));
  GCC_TRY(as_4d(c, 1, nsp, &ins[1], d));
  if (n == 3)
    GCC_TRY(in_ir(c, 2, &ins[2], d));
  /* cuDNN takes one pad per dim: asymmetric pads (auto_pad SAME with an
   * even window, explicit ones) become an explicit zero Pad first */
  int asym = 0;
  for (int i = 0; i < nsp; i++)
    asym |= win.pb[i] != win.pe[i];
  if (asym) {
    int off = nsp == 1 ? 1 : 0;
    int64_t pads[8] = {0};
    tshape x4 = {4, {x->d[0], x->d[1], {1, 0}, {1, 0}}}, xp;
    for (int i = 0; i < nsp; i++) {
      pads[2 + off + i] = win.pb[i];
      pads[6 + off + i] = win.pe[i];
      x4.d[2 + off + i] = (sdim){in[i], 0};
      win.pb[i] = win.pe[i] = 0;
    }
    GCC_TRY(emit_pad4(c, ins[0], &x4, pads, 0.0f, &ins[0], &xp, d));
  }
  GCC_TRY(emit_window_op(c, GCC_OP_CONV, ins, n, nsp, &out, &node, d));
  GCC_TRY(set_window_attrs(c->I->g, node, &win, 1, d));
  if (gcc_node_set_int(c->I->g, node, "group", group))
    return oom(d);
  imp_val(c->I, out_idx(c, 0))->conv_node = node;
  return GCC_OK;
}

/* An IR Pad of 4-D IR value `x` (tracked shape `xs`) by pads[8] (ONNX
 * order: begins, then ends) with `value`; the result in *out, its shape in
 * *os. */
static gcc_status emit_pad4(nctx *c, int x, const tshape *xs, const int64_t *pads, float value,
                            int *out, tshape *os, gcc_diag *d) {
  *os = *xs;
  for (int i = 0; i < 4; i++)
    os->d[i].v += pads[i] + pads[i + 4];
  int node;
  GCC_TRY(emit(c, GCC_OP_PAD, &x, 1, -1, F32, os, out, &node, d));
  if (gcc_node_set_ints(c->I->g, node, "pads", pads, 8) ||
      gcc_node_set_float(c->I->g, node, "value", value))
    return oom(d);
  return GCC_OK;
}

/* MaxPool / AveragePool. The IR pools take floor rounding and pads of at
 * most half the kernel (PyTorch's rule); other windows (ceil_mode that
 * adds an output, larger pads) become an explicit Pad (-inf for MaxPool, 0
 * for AveragePool), the pool without padding, and for AveragePool a Mul by
 * the constant kh kw / divisor of each output position, the divisor
 * counting the window's taps inside the input (count_include_pad = 0) or
 * inside the explicitly padded input (1), as ONNX and PyTorch define it. */
static gcc_status pool(nctx *c, int op, int is_max, gcc_diag *d) {
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  const tshape *x = in_sh(c, 0);
  int64_t in[2];
  int nsp;
  GCC_TRY(spatial(c, x, c->n->op_type, in, &nsp, d));
  const int64_t *ks;
  int nks;
  GCC_TRY(a_ints(c, "kernel_shape", &ks, &nks, d));
  if (nks != nsp)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                    "kernel_shape needs %d entries (one per spatial dim)", nsp);
  int64_t ceil_mode = 0, cip = 0;
  GCC_TRY(a_int(c, "ceil_mode", 0, &ceil_mode, d));
  if (ceil_mode != 0 && ceil_mode != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "ceil_mode must be 0 or 1");
  if (!is_max) {
    GCC_TRY(a_int(c, "count_include_pad", 0, &cip, d));
    if (cip != 0 && cip != 1)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "count_include_pad must be 0 or 1");
  }
  int dil_ok = is_max ? c->ver >= 10 : c->ver >= 19;
  window win;
  GCC_TRY(read_window(c, in, nsp, ks, dil_ok, (int)ceil_mode, &win, d));
  tshape out = {x->ndim, {x->d[0], x->d[1]}};
  for (int i = 0; i < nsp; i++)
    out.d[2 + i] = (sdim){win.out[i], 0};
  int direct = 1;
  int64_t span[2], pe2[2];
  for (int i = 0; i < nsp; i++) {
    span[i] = (win.k[i] - 1) * win.dl[i] + 1;
    int64_t floor_out = (in[i] + win.pb[i] + win.pe[i] - span[i]) / win.s[i] + 1;
    pe2[i] = (win.out[i] - 1) * win.s[i] + span[i] - in[i] - win.pb[i];
    direct &= floor_out == win.out[i] && 2 * win.pb[i] <= win.k[i] && 2 * win.pe[i] <= win.k[i];
  }
  int xi, node;
  GCC_TRY(as_4d(c, 0, nsp, &xi, d));
  if (direct) {
    GCC_TRY(emit_window_op(c, op, &xi, 1, nsp, &out, &node, d));
    GCC_TRY(set_window_attrs(c->I->g, node, &win, 1, d));
    if (cip && gcc_node_set_int(c->I->g, node, "count_include_pad", 1))
      return oom(d);
    return GCC_OK;
  }
  /* Pad + pool without padding (+ the divisor correction) */
  int off = nsp == 1 ? 1 : 0;
  int64_t pads[8] = {0};
  for (int i = 0; i < nsp; i++) {
    pads[2 + off + i] = win.pb[i];
    pads[6 + off + i] = pe2[i];
  }
  tshape x4 = {4, {x->d[0], x->d[1], {1, 0}, {1, 0}}}, xp;
  for (int i = 0; i < nsp; i++)
    x4.d[2 + off + i] = (sdim){in[i], 0};
  int padded;
  GCC_TRY(emit_pad4(c, xi, &x4, pads, is_max ? -INFINITY : 0.0f, &padded, &xp, d));
  window w0 = win;
  for (int i = 0; i < nsp; i++)
    w0.pb[i] = w0.pe[i] = 0;
  tshape o4 = {4, {x->d[0], x->d[1], {1, 0}, {1, 0}}};
  for (int i = 0; i < nsp; i++)
    o4.d[2 + off + i] = out.d[2 + i];
  /* the divisor correction of AveragePool, separable per dim */
  float *corr = NULL;
  int needs_corr = 0;
  int64_t oh = o4.d[2].v, ow = o4.d[3].v;
  if (!is_max) {
    int64_t cnt[2][4096];
    for (int i = 0; i < nsp; i++) {
      if (win.out[i] > 4096)
        return node_err(c, d, GCC_ERR_UNSUPPORTED, "more than 4096 outputs along a dim");
      int64_t lo = cip ? -win.pb[i] : 0, hi = cip ? in[i] + win.pe[i] : in[i];
      for (int64_t o = 0; o < win.out[i]; o++) {
        int64_t n = 0;
        for (int64_t j = 0; j < win.k[i]; j++) {
          int64_t t = o * win.s[i] - win.pb[i] + j * win.dl[i];
          n += t >= lo && t < hi;
        }
        if (n == 0)
          return node_err(c, d, GCC_ERR_UNSUPPORTED,
                          "an averaging window lies entirely outside the %s",
                          cip ? "padded input" : "input");
        cnt[i][o] = n;
      }
    }
    corr = malloc((size_t)(oh * ow) * sizeof *corr);
    if (!corr)
      return oom(d);
    double full = (double)win.k[0] * (nsp == 2 ? (double)win.k[1] : 1.0);
    for (int64_t yy = 0; yy < oh; yy++)
      for (int64_t xx = 0; xx < ow; xx++) {
        double n = nsp == 2 ? (double)cnt[0][yy] * (double)cnt[1][xx] : (double)cnt[0][xx];
        corr[yy * ow + xx] = (float)(full / n);
        needs_corr |= corr[yy * ow + xx] != 1.0f;
      }
  }
  int pooled;
  int last = is_max || !needs_corr;
  if (nsp == 2 && last) {
    GCC_TRY(emit(c, op, &padded, 1, 0, F32, &out, NULL, &node, d));
  } else {
    GCC_TRY(emit(c, op, &padded, 1, -1, F32, &o4, &pooled, &node, d));
  }
  GCC_TRY(set_window_attrs(c->I->g, node, &w0, 1, d));
  if (!is_max && gcc_node_set_int(c->I->g, node, "count_include_pad", 1)) {
    free(corr);
    return oom(d);
  }
  if (last) {
    free(corr);
    return nsp == 2 ? GCC_OK : emit_reshape(c, pooled, &out, 0, F32, NULL, d);
  }
  /* Mul by the correction [oh, ow] */
  char base[600], name[620];
  snprintf(base, sizeof base, "%s/divisor_correction", c->ir_name);
  snprintf(name, sizeof name, "%s", base);
  for (int k = 1; gcc_graph_find(c->I->g, name) >= 0; k++)
    snprintf(name, sizeof name, "%s_%d", base, k);
  gcc_shape cs = {2, {oh, ow}};
  int cv;
  gcc_status st = gcc_graph_add_value(c->I->g, name, GCC_DT_FLOAT32, &cs, GCC_VALUE_CONST, corr,
                                      (size_t)(oh * ow) * sizeof *corr, &cv, d);
  free(corr);
  GCC_TRY(st);
  int ins[2] = {pooled, cv};
  if (nsp == 2)
    return emit(c, GCC_OP_MUL, ins, 2, 0, F32, &out, NULL, &node, d);
  int scaled;
  GCC_TRY(emit(c, GCC_OP_MUL, ins, 2, -1, F32, &o4, &scaled, &node, d));
  return emit_reshape(c, scaled, &out, 0, F32, NULL, d);
}

gcc_status cv_maxpool(nctx *c, gcc_diag *d) {
  if (c->ver < 8)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "kernel_shape", "pads", "strides", (char *)NULL));
  else if (c->ver < 10)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "kernel_shape", "pads", "strides", "storage_order",
                        (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                        "storage_order", "strides", (char *)NULL));
  /* storage_order only orders the Indices output */
  GCC_TRY(unused_outputs(c, 1, "Indices", d));
  return pool(c, GCC_OP_MAX_POOL, 1, d);
}

gcc_status cv_avgpool(nctx *c, gcc_diag *d) {
  if (c->ver < 7)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "kernel_shape", "pads", "strides", (char *)NULL));
  else if (c->ver < 10)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "count_include_pad", "kernel_shape", "pads", "strides",
                        (char *)NULL));
  else if (c->ver < 19)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads",
                        "strides", (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "auto_pad", "ceil_mode", "count_include_pad", "dilations",
                        "kernel_shape", "pads", "strides", (char *)NULL));
  return pool(c, GCC_OP_AVERAGE_POOL, 0, d);
}

/* GlobalAveragePool / GlobalMaxPool: the pool over the whole spatial
 * extent (a window of the input's size). */
static gcc_status global_pool(nctx *c, int op, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  const tshape *x = in_sh(c, 0);
  int64_t in[2];
  int nsp;
  GCC_TRY(spatial(c, x, c->n->op_type, in, &nsp, d));
  window win = {nsp, {0}, {1, 1}, {1, 1}, {0}, {0}, {1, 1}};
  for (int i = 0; i < nsp; i++)
    win.k[i] = in[i];
  tshape out = {x->ndim, {x->d[0], x->d[1], {1, 0}, {1, 0}}};
  int xi, node;
  GCC_TRY(as_4d(c, 0, nsp, &xi, d));
  GCC_TRY(emit_window_op(c, op, &xi, 1, nsp, &out, &node, d));
  return set_window_attrs(c->I->g, node, &win, 0, d);
}

gcc_status cv_global_avgpool(nctx *c, gcc_diag *d) {
  return global_pool(c, GCC_OP_AVERAGE_POOL, d);
}

gcc_status cv_global_maxpool(nctx *c, gcc_diag *d) {
  return global_pool(c, GCC_OP_MAX_POOL, d);
}

/* BatchNormalization whose statistics are computed at run time (graph
 * inputs): Y = (X - mean) * (scale / sqrt(var + eps)) + B with IR ops, the
 * [C] vectors viewed as [C, 1, ...]. */
static gcc_status batchnorm_runtime(nctx *c, float eps, gcc_diag *d) {
  const tshape *x = in_sh(c, 0);
  int64_t ch = x->d[1].v;
  tshape cs = {x->ndim - 1, {{ch, 0}}};
  for (int i = 1; i < cs.ndim; i++)
    cs.d[i] = (sdim){1, 0};
  int p[4]; /* scale, B, mean, var as [C, 1, ...] */
  for (int k = 0; k < 4; k++)
    GCC_TRY(reshaped(c, in_idx(c, k + 1), &cs, &p[k], d));
  gcc_graph *g = c->I->g;
  char base[600], name[620];
  snprintf(base, sizeof base, "%s/epsilon", c->ir_name);
  snprintf(name, sizeof name, "%s", base);
  for (int j = 1; gcc_graph_find(g, name) >= 0; j++)
    snprintf(name, sizeof name, "%s_%d", base, j);
  gcc_shape one = {0, {0}};
  int ev, t1, t2, t3, t4, t5, node, xi;
  GCC_TRY(gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &one, GCC_VALUE_CONST, &eps, sizeof eps, &ev,
                              d));
  GCC_TRY(in_ir(c, 0, &xi, d));
  int a1[2] = {p[3], ev};
  GCC_TRY(emit(c, GCC_OP_ADD, a1, 2, -1, F32, &cs, &t1, &node, d));
  GCC_TRY(emit(c, GCC_OP_SQRT, &t1, 1, -1, F32, &cs, &t2, &node, d));
  int a2[2] = {p[0], t2};
  GCC_TRY(emit(c, GCC_OP_DIV, a2, 2, -1, F32, &cs, &t3, &node, d));
  int a3[2] = {xi, p[2]};
  GCC_TRY(emit(c, GCC_OP_SUB, a3, 2, -1, F32, x, &t4, &node, d));
  int a4[2] = {t4, t3};
  GCC_TRY(emit(c, GCC_OP_MUL, a4, 2, -1, F32, x, &t5, &node, d));
  int a5[2] = {t5, p[1]};
  return emit(c, GCC_OP_ADD, a5, 2, 0, F32, x, NULL, &node, d);
}

/* BatchNormalization for training (gcc_onnx_options.train): the IR op, its
 * running mean and var (initializers) as state values. */
static gcc_status batchnorm_train(nctx *c, float eps, gcc_diag *d) {
  float momentum;
  GCC_TRY(a_float(c, "momentum", 0.9f, &momentum, d));
  if (!(momentum >= 0.0f && momentum <= 1.0f))
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "momentum %g is outside [0, 1]", (double)momentum);
  GCC_TRY(unused_outputs(c, 1, "running or saved statistics (training mode)", d));
  const tshape *x = in_sh(c, 0);
  char a[128];
  if (x->ndim < 2 || x->d[1].sym)
    return node_err(c, d, GCC_ERR_SHAPE, "X %s has no channel dim", tshape_str(x, a, sizeof a));
  int ins[5];
  for (int k = 0; k < 5; k++) {
    ival *pv = imp_val(c->I, in_idx(c, k));
    if (k >= 3 && !(pv->is_init && pv->is_const))
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "input %d ('%s', the running %s) must be an initializer to train", k,
                      pv->name, k == 3 ? "mean" : "variance");
    /* a running statistic is updated in place: stored once with another
     * input (equal initializers deduplicated by the exporter: a fresh
     * BatchNorm's bias and running_mean are both zeros), it gets its own copy */
    if (k >= 3 && pv->n_uses > 1)
      GCC_TRY(ir_private_copy(c, in_idx(c, k), &ins[k], d));
    else
      GCC_TRY(in_ir(c, k, &ins[k], d));
  }
  gcc_graph *g = c->I->g;
  for (int k = 3; k < 5; k++) {
    gcc_value *v = &g->values[ins[k]];
    if (v->kind != GCC_VALUE_PARAM && v->kind != GCC_VALUE_CONST)
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "the running statistic '%s' is not an initializer",
                      v->name);
    v->kind = GCC_VALUE_PARAM;
    v->state = 1;
  }
  int node;
  GCC_TRY(emit(c, GCC_OP_BATCH_NORM, ins, 5, 0, F32, x, NULL, &node, d));
  if (gcc_node_set_float(g, node, "epsilon", eps) ||
      gcc_node_set_float(g, node, "momentum", momentum))
    return oom(d);
  c->I->rep->n_bn_train++;
  return GCC_OK;
}

/* BatchNormalization, inference form: Y = (X - mean) / sqrt(var + eps) *
 * scale + B per channel (dim 1). Folded into the Conv that produces X when
 * nothing else reads X and the statistics are constants. */
gcc_status cv_batchnorm(nctx *c, gcc_diag *d) {
  switch (c->ver) {
  case 1:
    GCC_TRY(allow_attrs(c, d, "consumed_inputs", "epsilon", "is_test", "momentum", "spatial",
                        (char *)NULL));
    break;
  case 6:
    GCC_TRY(allow_attrs(c, d, "epsilon", "is_test", "momentum", "spatial", (char *)NULL));
    break;
  case 7: GCC_TRY(allow_attrs(c, d, "epsilon", "momentum", "spatial", (char *)NULL)); break;
  case 9: GCC_TRY(allow_attrs(c, d, "epsilon", "momentum", (char *)NULL)); break;
  default: GCC_TRY(allow_attrs(c, d, "epsilon", "momentum", "training_mode", (char *)NULL));
  }
  GCC_TRY(no_consumed_inputs(c, d));
  GCC_TRY(need_inputs(c, 5, 5, d));
  for (int k = 0; k < 5; k++)
    GCC_TRY(need_float(c, k, d));
  int64_t v;
  if (c->I->train) {
    GCC_TRY(a_int(c, "spatial", 1, &v, d));
    if (!v)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "spatial = 0 (statistics per element, not per channel) is not supported");
    float eps;
    GCC_TRY(a_float(c, "epsilon", 1e-5f, &eps, d));
    return batchnorm_train(c, eps, d);
  }
  GCC_TRY(a_int(c, "is_test", 0, &v, d));
  if (c->ver <= 6 && !v && n_out(c) > 1)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "is_test = 0 with the running statistics as outputs is training mode; only "
                    "inference is supported");
  GCC_TRY(a_int(c, "spatial", 1, &v, d));
  if (!v)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "spatial = 0 (statistics per element, not per channel) is not supported");
  GCC_TRY(a_int(c, "training_mode", 0, &v, d));
  if (v)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "training_mode = 1 (batch statistics) is not supported; only inference");
  GCC_TRY(unused_outputs(c, 1, "running or saved statistics (training mode)", d));
  float eps;
  GCC_TRY(a_float(c, "epsilon", 1e-5f, &eps, d));
  const tshape *x = in_sh(c, 0);
  char a[128];
  if (x->ndim < 2 || x->d[1].sym)
    return node_err(c, d, GCC_ERR_SHAPE, "X %s has no channel dim", tshape_str(x, a, sizeof a));
  int64_t ch = x->d[1].v;
  const float *p[4];
  static const char *const names[4] = {"scale", "B", "mean", "var"};
  int all_const = 1;
  for (int k = 0; k < 4; k++) {
    ival *pv = imp_val(c->I, in_idx(c, k + 1));
    if (pv->sh.ndim != 1 || pv->sh.d[0].v != ch || pv->sh.d[0].sym)
      return node_err(c, d, GCC_ERR_SHAPE, "%s %s must be [C] = [%" PRId64 "]", names[k],
                      tshape_str(&pv->sh, a, sizeof a), ch);
    all_const &= pv->is_const;
    p[k] = pv->data;
  }
  if (!all_const)
    return batchnorm_runtime(c, eps, d);
  /* s = scale / sqrt(var + eps), t = B - mean * s, in double */
  double *s = malloc((size_t)ch * 2 * sizeof *s);
  if (!s)
    return oom(d);
  GCC_TRY(pool_add(c->I, s, d));
  double *t = s + ch;
  for (int64_t i = 0; i < ch; i++) {
    s[i] = (double)p[0][i] / sqrt((double)p[3][i] + (double)eps);
    t[i] = (double)p[1][i] - (double)p[2][i] * s[i];
  }
  int xi = in_idx(c, 0);
  ival *xv = imp_val(c->I, xi);
  gcc_graph *g = c->I->g;
  if (xv->conv_node >= 0 && xv->n_uses == 1 && !xv->is_output) {
    gcc_node *cn = &g->nodes[xv->conv_node];
    int wv = cn->inputs[1], bv = cn->n_inputs > 2 ? cn->inputs[2] : -1;
    const gcc_value *W = &g->values[wv];
    if ((W->kind == GCC_VALUE_PARAM || W->kind == GCC_VALUE_CONST) && W->data) {
      int64_t per = gcc_shape_numel(&W->shape, NULL) / ch;
      float *nw = malloc((size_t)(per * ch) * sizeof *nw), *nb = malloc((size_t)ch * sizeof *nb);
      if (!nw || !nb) {
        free(nw);
        free(nb);
        return oom(d);
      }
      const float *ow = W->data;
      const float *ob = bv >= 0 ? g->values[bv].data : NULL;
      for (int64_t m = 0; m < ch; m++) {
        for (int64_t j = 0; j < per; j++)
          nw[m * per + j] = (float)((double)ow[m * per + j] * s[m]);
        nb[m] = (float)((ob ? (double)ob[m] : 0.0) * s[m] + t[m]);
      }
      char base[600], wname[620], bname[620];
      snprintf(base, sizeof base, "%s/bn_folded", W->name);
      snprintf(wname, sizeof wname, "%s", base);
      for (int k = 1; gcc_graph_find(g, wname) >= 0; k++)
        snprintf(wname, sizeof wname, "%s_%d", base, k);
      snprintf(base, sizeof base, "%s/bias_bn_folded", g->nodes[xv->conv_node].name);
      snprintf(bname, sizeof bname, "%s", base);
      for (int k = 1; gcc_graph_find(g, bname) >= 0; k++)
        snprintf(bname, sizeof bname, "%s_%d", base, k);
      gcc_shape ws = W->shape, bs = {1, {ch}};
      int nwv, nbv;
      gcc_status st = gcc_graph_add_value(g, wname, GCC_DT_FLOAT32, &ws, GCC_VALUE_PARAM, nw,
                                          (size_t)(per * ch) * sizeof *nw, &nwv, d);
      if (st == GCC_OK)
        st = gcc_graph_add_value(g, bname, GCC_DT_FLOAT32, &bs, GCC_VALUE_PARAM, nb,
                                 (size_t)ch * sizeof *nb, &nbv, d);
      free(nw);
      free(nb);
      GCC_TRY(st);
      cn = &g->nodes[xv->conv_node]; /* adding values does not move nodes, but be safe */
      if (cn->n_inputs < 3) {
        int *ni = realloc(cn->inputs, 3 * sizeof *ni);
        if (!ni)
          return oom(d);
        cn->inputs = ni;
        cn->n_inputs = 3;
      }
      cn->inputs[1] = nwv;
      cn->inputs[2] = nbv;
      set_alias(c, 0, xi);
      c->I->rep->n_bn_folded++;
      mark_folded(c);
      return GCC_OK;
    }
  }
  /* not foldable: Y = X * s + t with s, t of shape [C, 1, ...] */
  tshape cs = {x->ndim - 1, {{ch, 0}}};
  for (int i = 1; i < cs.ndim; i++)
    cs.d[i] = (sdim){1, 0};
  gcc_shape gs = {cs.ndim, {ch}};
  for (int i = 1; i < cs.ndim; i++)
    gs.dims[i] = 1;
  float *sf = malloc((size_t)ch * 2 * sizeof *sf);
  if (!sf)
    return oom(d);
  for (int64_t i = 0; i < ch; i++) {
    sf[i] = (float)s[i];
    sf[ch + i] = (float)t[i];
  }
  int sv = -1, tv = -1;
  char base[600], name[620];
  gcc_status st = GCC_OK;
  for (int k = 0; k < 2 && st == GCC_OK; k++) {
    snprintf(base, sizeof base, "%s/%s", c->ir_name, k ? "shift" : "scale");
    snprintf(name, sizeof name, "%s", base);
    for (int j = 1; gcc_graph_find(g, name) >= 0; j++)
      snprintf(name, sizeof name, "%s_%d", base, j);
    st = gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &gs, GCC_VALUE_CONST, sf + k * ch,
                             (size_t)ch * sizeof *sf, k ? &tv : &sv, d);
  }
  free(sf);
  GCC_TRY(st);
  int xir, scaled, node;
  GCC_TRY(ir_of(c, xi, &xir, d));
  int m1[2] = {xir, sv};
  GCC_TRY(emit(c, GCC_OP_MUL, m1, 2, -1, F32, x, &scaled, &node, d));
  int a1[2] = {scaled, tv};
  return emit(c, GCC_OP_ADD, a1, 2, 0, F32, x, NULL, &node, d);
}

/* ConvTranspose, 1-D and 2-D: output_shape and auto_pad become pads (ONNX's
 * rule: total = stride (in - 1) + output_padding + (k - 1) dilation + 1 -
 * out; SAME_UPPER puts the odd unit at the end, otherwise at the start). */
gcc_status cv_conv_transpose(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                      "output_shape", "pads", "strides", (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 3, d));
  for (int k = 0; k < n_in(c); k++)
    if (in_idx(c, k) >= 0)
      GCC_TRY(need_float(c, k, d));
  const tshape *x = in_sh(c, 0), *w = in_sh(c, 1);
  int64_t in[2];
  int nsp;
  char a[128], b[128];
  GCC_TRY(spatial(c, x, "ConvTranspose", in, &nsp, d));
  int64_t group;
  GCC_TRY(a_int(c, "group", 1, &group, d));
  if (w->ndim != x->ndim || tshape_has_sym(w) || group < 1 || w->d[0].v != x->d[1].v ||
      x->d[1].v % group != 0)
    return node_err(c, d, GCC_ERR_SHAPE,
                    "filter W %s does not match X %s (W [C, M / group, k...], group %" PRId64 ")",
                    tshape_str(w, a, sizeof a), tshape_str(x, b, sizeof b), group);
  int64_t m = w->d[1].v * group;
  if (in_idx(c, 2) >= 0) {
    const tshape *bs = in_sh(c, 2);
    if (bs->ndim != 1 || bs->d[0].v != m)
      return node_err(c, d, GCC_ERR_SHAPE, "bias B %s must be [%" PRId64 "]",
                      tshape_str(bs, a, sizeof a), m);
  }
  int64_t k[2], s[2] = {1, 1}, dl[2] = {1, 1}, pb[2] = {0, 0}, pe[2] = {0, 0}, op[2] = {0, 0};
  for (int i = 0; i < nsp; i++)
    k[i] = w->d[2 + i].v;
  const int64_t *v;
  int nv;
#define READ(name, dst, len)                                                                       \
  GCC_TRY(a_ints(c, name, &v, &nv, d));                                                            \
  if (nv >= 0 && nv != (len))                                                                      \
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s has %d entries for %d spatial dims", name,    \
                    nv, nsp);                                                                      \
  for (int i = 0; i < nv && nv == (len); i++)                                                      \
    dst[i] = v[i];
  READ("strides", s, nsp);
  READ("dilations", dl, nsp);
  READ("output_padding", op, nsp);
  GCC_TRY(a_ints(c, "kernel_shape", &v, &nv, d));
  for (int i = 0; i < nv; i++)
    if (nv != nsp || v[i] != k[i])
      return node_err(c, d, GCC_ERR_SHAPE, "kernel_shape does not match the filter %s",
                      tshape_str(w, a, sizeof a));
  GCC_TRY(a_ints(c, "pads", &v, &nv, d));
  if (nv >= 0 && nv != 2 * nsp)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "pads has %d entries for %d spatial dims", nv,
                    nsp);
  for (int i = 0; i < nsp && nv > 0; i++) {
    pb[i] = v[i];
    pe[i] = v[i + nsp];
  }
#undef READ
  char ap[32];
  GCC_TRY(a_string(c, "auto_pad", "NOTSET", ap, sizeof ap, d));
  int upper = strcmp(ap, "SAME_UPPER") == 0, lower = strcmp(ap, "SAME_LOWER") == 0;
  if (!upper && !lower && strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "auto_pad '%s' is not handled", ap);
  const int64_t *os;
  int nos;
  GCC_TRY(a_ints(c, "output_shape", &os, &nos, d));
  if (nos >= 0 && nos != nsp && nos != nsp + 2)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "output_shape has %d entries", nos);
  for (int i = 0; i < nsp; i++) {
    if (s[i] < 1 || dl[i] < 1)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "strides and dilations must be >= 1");
    int64_t want = -1;
    if (nos >= 0)
      want = os[nos - nsp + i];
    else if (upper || lower)
      want = in[i] * s[i];
    if (strcmp(ap, "VALID") == 0)
      pb[i] = pe[i] = 0;
    if (want >= 0) {
      int64_t total = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * dl[i] + 1 - want;
      if (total < 0) { /* a larger output than the window reaches: output padding */
        op[i] -= total;
        total = 0;
      }
      if (upper) {
        pb[i] = total / 2;
        pe[i] = total - total / 2;
      } else {
        pb[i] = total - total / 2;
        pe[i] = total / 2;
      }
    }
  }
  tshape out = {x->ndim, {x->d[0], {m, 0}}};
  for (int i = 0; i < nsp; i++) {
    int64_t o = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * dl[i] + 1 - pb[i] - pe[i];
    if (o <= 0 || pb[i] < 0 || pe[i] < 0 || op[i] < 0)
      return node_err(c, d, GCC_ERR_SHAPE, "the pads leave no output");
    out.d[2 + i] = (sdim){o, 0};
  }
  int ins[3] = {-1, -1, -1}, n = in_idx(c, 2) >= 0 ? 3 : 2, node;
  GCC_TRY(as_4d(c, 0, nsp, &ins[0], d));
  GCC_TRY(as_4d(c, 1, nsp, &ins[1], d));
  if (n == 3)
    GCC_TRY(in_ir(c, 2, &ins[2], d));
  /* cuDNN takes one pad per dim: with asymmetric pads the transposed
   * convolution runs with the smaller pad on both sides and the surplus
   * is cropped (a Pad with negative pads) */
  int asym = 0;
  int64_t sym[2] = {pb[0], pb[1]}, crop[8] = {0};
  int off = nsp == 1 ? 1 : 0;
  for (int i = 0; i < nsp; i++)
    if (pb[i] != pe[i]) {
      asym = 1;
      sym[i] = pb[i] < pe[i] ? pb[i] : pe[i];
      crop[2 + off + i] = -(pb[i] - sym[i]);
      crop[6 + off + i] = -(pe[i] - sym[i]);
    }
  window win = {nsp,   {k[0], k[1]}, {s[0], s[1]}, {dl[0], dl[1]}, {pb[0], pb[1]}, {pe[0], pe[1]},
                {0, 0}};
  if (asym) {
    tshape full = {4, {x->d[0], {m, 0}, {1, 0}, {1, 0}}}, cropped;
    for (int i = 0; i < nsp; i++) {
      win.pb[i] = win.pe[i] = sym[i];
      full.d[2 + off + i] =
          (sdim){s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * dl[i] + 1 - 2 * sym[i], 0};
    }
    int tmp;
    GCC_TRY(emit(c, GCC_OP_CONV_TRANSPOSE, ins, n, -1, F32, &full, &tmp, &node, d));
    GCC_TRY(set_window_attrs(c->I->g, node, &win, 1, d));
    int64_t op4[2] = {nsp == 1 ? 0 : op[0], nsp == 1 ? op[0] : op[1]};
    if (gcc_node_set_int(c->I->g, node, "group", group) ||
        gcc_node_set_ints(c->I->g, node, "output_padding", op4, 2))
      return oom(d);
    if (nsp == 2) {
      int pnode;
      GCC_TRY(emit(c, GCC_OP_PAD, &tmp, 1, 0, F32, &out, NULL, &pnode, d));
      return gcc_node_set_ints(c->I->g, pnode, "pads", crop, 8) ? oom(d) : GCC_OK;
    }
    int cr;
    GCC_TRY(emit_pad4(c, tmp, &full, crop, 0.0f, &cr, &cropped, d));
    return emit_reshape(c, cr, &out, 0, F32, NULL, d);
  }
  GCC_TRY(emit_window_op(c, GCC_OP_CONV_TRANSPOSE, ins, n, nsp, &out, &node, d));
  GCC_TRY(set_window_attrs(c->I->g, node, &win, 1, d));
  int64_t op4[2] = {nsp == 1 ? 0 : op[0], nsp == 1 ? op[0] : op[1]};
  if (gcc_node_set_int(c->I->g, node, "group", group) ||
      gcc_node_set_ints(c->I->g, node, "output_padding", op4, 2))
    return oom(d);
  return GCC_OK;
}
