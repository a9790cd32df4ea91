/*
 * import_ops_math.c - ONNX -> gcc IR converters of the pointwise math of the
 * Transformer blocks (Gelu, Erf), and the GELU patterns that exporters write
 * before ONNX had a Gelu op (opset < 20), recognised as one Gelu node:
 *
 *   erf form (torch.onnx.export, TorchScript exporter, nn.GELU()):
 *     Mul(Mul(x, Add(Erf(Div(x, sqrt(2))), 1)), 0.5)
 *   tanh form (nn.GELU(approximate='tanh')):
 *     Mul(Mul(x, Add(Tanh(Mul(sqrt(2 / pi), Add(x, Mul(0.044715, Mul(x, Mul(x, x)))))), 1)), 0.5)
 *
 * in any order of the operands of Mul and Add, the outer product of x, 0.5
 * and the Add in either nesting, Div(x, sqrt(2)) also as Mul(x, 1 / sqrt(2)),
 * x^3 also as Pow(x, 3). Every intermediate must be read by the pattern alone
 * (not by another node, nor be a graph output); the pattern's last Mul then
 * converts to Gelu(x) and the IR nodes of the rest, which nothing reads any
 * more, are removed when the graph is finished (onnx/import.c). See
 * onnx/import_ops.c.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

/* ---- Gelu, Erf ------------------------------------------------------------------ */

/* Gelu-20: approximate "none" (default) or "tanh". */
gcc_status cv_gelu(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "approximate", (char *)NULL));
  char approx[16];
  GCC_TRY(a_string(c, "approximate", "none", approx, sizeof approx, d));
  if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                    "attribute 'approximate' is '%s'; it must be \"none\" or \"tanh\"", approx);
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  int x, node;
  GCC_TRY(in_ir(c, 0, &x, d));
  GCC_TRY(emit(c, GCC_OP_GELU, &x, 1, 0, F32, in_sh(c, 0), NULL, &node, d));
  return gcc_node_set_string(c->I->g, node, "approximate", approx) ? oom(d) : GCC_OK;
}

gcc_status cv_erf(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  int x, node;
  GCC_TRY(in_ir(c, 0, &x, d));
  return emit(c, GCC_OP_ERF, &x, 1, 0, F32, in_sh(c, 0), NULL, &node, d);
}

/* Exp, Log, Neg, Abs, Reciprocal: float, `consumed_inputs` (opset 1) unused. */
static gcc_status unary_math(nctx *c, int op, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  int x, node;
  GCC_TRY(in_ir(c, 0, &x, d));
  return emit(c, op, &x, 1, 0, F32, in_sh(c, 0), NULL, &node, d);
}

gcc_status cv_exp(nctx *c, gcc_diag *d) {
  return unary_math(c, GCC_OP_EXP, d);
}
gcc_status cv_log(nctx *c, gcc_diag *d) {
  return unary_math(c, GCC_OP_LOG, d);
}
gcc_status cv_neg(nctx *c, gcc_diag *d) {
  if (sym_neg_applies(c))
    return sym_neg(c, d); /* shape arithmetic (onnx/import_ops_select.c) */
  return unary_math(c, GCC_OP_NEG, d);
}
gcc_status cv_abs(nctx *c, gcc_diag *d) {
  return unary_math(c, GCC_OP_ABS, d);
}
gcc_status cv_reciprocal(nctx *c, gcc_diag *d) {
  if (fold_f32_applies(c)) /* a float constant: folded */
    return fold_f32(c, 'r', d);
  return unary_math(c, GCC_OP_RECIPROCAL, d);
}

/* ---- the GELU patterns ------------------------------------------------------------ */

/* Input k of ONNX node `node` as a root value index (-1: none). */
static int input_of(imp *I, int node, int k) {
  nctx t;
  memset(&t, 0, sizeof t);
  t.I = I;
  t.n = I->gp->node[node];
  return in_idx(&t, k);
}

/* The ONNX node of op type `op` (default domain, `n_inputs` inputs) that
 * produces value v, read by one node only and not a graph output; -1
 * otherwise. */
static int single_use_node(imp *I, int v, const char *op, int n_inputs) {
  if (v < 0)
    return -1;
  const ival *x = imp_val(I, v);
  if (x->producer < 0 || x->is_const || x->is_output || x->n_uses != 1)
    return -1;
  const Onnx__NodeProto *n = I->gp->node[x->producer];
  if (strcmp(n->op_type, op) != 0 || (n->domain && *n->domain && strcmp(n->domain, "ai.onnx")))
    return -1;
  if ((int)n->n_input != n_inputs || n->n_output != 1 || n->n_attribute != 0)
    return -1;
  return x->producer;
}

/* 1 when value v is a float32 constant of one element within 1e-6
 * (relative) of `want`: the float32 rounding of the exporters' constants. */
static int const_near(imp *I, int v, double want) {
  if (v < 0)
    return 0;
  const ival *x = imp_val(I, v);
  if (!x->is_const || x->onnx_dt != F32 || tshape_static_numel(&x->sh) != 1 || !x->data)
    return 0;
  double got = *(const float *)x->data;
  return fabs(got - want) <= 1e-6 * fabs(want);
}

/* For a two-input node whose input is the constant `want`: the other
 * input (-1 when neither input is). */
static int other_than_const(imp *I, int node, double want) {
  int a = input_of(I, node, 0), b = input_of(I, node, 1);
  if (const_near(I, b, want))
    return a;
  if (const_near(I, a, want))
    return b;
  return -1;
}

/* v = x * x * x (Mul(x, Mul(x, x)) in either order, or Pow(x, 3)). */
static int is_cube_of(imp *I, int v, int x) {
  int p = single_use_node(I, v, "Pow", 2);
  if (p >= 0)
    return input_of(I, p, 0) == x && const_near(I, input_of(I, p, 1), 3.0);
  int m = single_use_node(I, v, "Mul", 2);
  if (m < 0)
    return 0;
  for (int k = 0; k < 2; k++) {
    int sq = single_use_node(I, input_of(I, m, 1 - k), "Mul", 2);
    if (input_of(I, m, k) == x && sq >= 0 && input_of(I, sq, 0) == x && input_of(I, sq, 1) == x)
      return 1;
  }
  return 0;
}

/* a = Add(1, Erf(x / sqrt(2))): 0; a = Add(1, Tanh(sqrt(2 / pi) (x +
 * 0.044715 x^3))): 1; else -1. */
static int gelu_factor(imp *I, int a, int x) {
  int add = single_use_node(I, a, "Add", 2);
  int inner = add >= 0 ? other_than_const(I, add, 1.0) : -1;
  if (inner < 0)
    return -1;
  int erf = single_use_node(I, inner, "Erf", 1);
  if (erf >= 0) {
    int arg = input_of(I, erf, 0);
    int dv = single_use_node(I, arg, "Div", 2), mu = single_use_node(I, arg, "Mul", 2);
    if (dv >= 0 && input_of(I, dv, 0) == x && const_near(I, input_of(I, dv, 1), sqrt(2.0)))
      return 0;
    if (mu >= 0 && other_than_const(I, mu, sqrt(0.5)) == x)
      return 0;
    return -1;
  }
  int th = single_use_node(I, inner, "Tanh", 1);
  int scaled = th >= 0 ? single_use_node(I, input_of(I, th, 0), "Mul", 2) : -1;
  int sum = scaled >= 0 ? other_than_const(I, scaled, sqrt(2.0 / M_PI)) : -1;
  int s = single_use_node(I, sum, "Add", 2);
  if (s < 0)
    return -1;
  for (int k = 0; k < 2; k++) {
    if (input_of(I, s, k) != x)
      continue;
    int km = single_use_node(I, input_of(I, s, 1 - k), "Mul", 2);
    int cube = km >= 0 ? other_than_const(I, km, 0.044715) : -1;
    if (cube >= 0 && is_cube_of(I, cube, x))
      return 1;
  }
  return -1;
}

int onnx_gelu_pattern(nctx *c, int *x_out, int *tanh_form) {
  imp *I = c->I;
  if (n_in(c) != 2 || n_out(c) != 1 || c->n->n_attribute != 0)
    return 0;
  /* the factors of the product: this Mul's two inputs, one of them a
   * single-use Mul expanded into its two */
  int u = in_idx(c, 0), v = in_idx(c, 1);
  for (int side = 0; side < 2; side++) {
    int inner = single_use_node(I, side ? v : u, "Mul", 2);
    if (inner < 0)
      continue;
    int f[3] = {side ? u : v, input_of(I, inner, 0), input_of(I, inner, 1)};
    /* one factor is 0.5, one the Add, the third x */
    for (int h = 0; h < 3; h++) {
      if (!const_near(I, f[h], 0.5))
        continue;
      for (int q = 0; q < 3; q++) {
        if (q == h)
          continue;
        int x = f[3 - h - q];
        if (x < 0 || imp_val(I, x)->is_const || imp_val(I, x)->onnx_dt != F32)
          continue;
        int form = gelu_factor(I, f[q], x);
        if (form >= 0) {
          *x_out = x;
          *tanh_form = form;
          return 1;
        }
      }
    }
  }
  return 0;
}

gcc_status cv_gelu_pattern(nctx *c, int x, int tanh_form, gcc_diag *d) {
  int xi, node;
  GCC_TRY(ir_of(c, x, &xi, d));
  GCC_TRY(emit(c, GCC_OP_GELU, &xi, 1, 0, F32, &imp_val(c->I, x)->sh, NULL, &node, d));
  if (gcc_node_set_string(c->I->g, node, "approximate", tanh_form ? "tanh" : "none"))
    return oom(d);
  c->I->n_patterns++;
  return GCC_OK;
}

/* Elu, Selu, Celu, ThresholdedRelu, Softplus, Softsign, Sin, Cos: float X,
 * the float attributes named (ONNX's defaults; graph/ops.h ACT_ALPHA,
 * ACT_GAMMA order), `consumed_inputs` allowed and unused at opset 1. */
static gcc_status activation(nctx *c, int op, const char *a0, float d0, const char *a1, float d1,
                             int alpha_divides, gcc_diag *d) {
  const char *cons = c->ver == 1 ? "consumed_inputs" : NULL;
  if (!a0)
    GCC_TRY(allow_attrs(c, d, cons, (char *)NULL));
  else if (!a1)
    GCC_TRY(allow_attrs(c, d, a0, cons, (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, a0, a1, cons, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  float v0 = d0, v1 = d1;
  if (a0)
    GCC_TRY(a_float(c, a0, d0, &v0, d));
  if (a1)
    GCC_TRY(a_float(c, a1, d1, &v1, d));
  if (alpha_divides && v0 == 0.0f) /* Celu: x / alpha */
    return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                    "attribute 'alpha' is 0; it must not be (x / alpha)");
  int x, node;
  GCC_TRY(in_ir(c, 0, &x, d));
  GCC_TRY(emit(c, op, &x, 1, 0, F32, in_sh(c, 0), NULL, &node, d));
  if (a0 && gcc_node_set_float(c->I->g, node, a0, v0))
    return oom(d);
  if (a1 && gcc_node_set_float(c->I->g, node, a1, v1))
    return oom(d);
  return GCC_OK;
}

gcc_status cv_elu(nctx *c, gcc_diag *d) {
  return activation(c, GCC_OP_ELU, "alpha", 1.0f, NULL, 0, 0, d);
}
gcc_status cv_selu(nctx *c, gcc_diag *d) {
  return activation(c, GCC_OP_SELU, "alpha", 1.67326319217681884765625f, "gamma",
                    1.05070102214813232421875f, 0, d);
}
gcc_status cv_celu(nctx *c, gcc_diag *d) {
  return activation(c, GCC_OP_CELU, "alpha", 1.0f, NULL, 0, 1, d);
}
gcc_status cv_thresholded_relu(nctx *c, gcc_diag *d) {
  return activation(c, GCC_OP_THRESHOLDED_RELU, "alpha", 1.0f, NULL, 0, 0, d);
}
gcc_status cv_softplus(nctx *c, gcc_diag *d) {
  return activation(c, GCC_OP_SOFTPLUS, NULL, 0, NULL, 0, 0, d);
}
gcc_status cv_softsign(nctx *c, gcc_diag *d) {
  return activation(c, GCC_OP_SOFTSIGN, NULL, 0, NULL, 0, 0, d);
}
gcc_status cv_sin(nctx *c, gcc_diag *d) {
  return activation(c, GCC_OP_SIN, NULL, 0, NULL, 0, 0, d);
}
gcc_status cv_cos(nctx *c, gcc_diag *d) {
  return activation(c, GCC_OP_COS, NULL, 0, NULL, 0, 0, d);
}

/* PRelu (X, slope): float. From opset 7 the slope broadcasts to X
 * unidirectionally (numpy); PRelu-1/6 (the pytorch-converted cases) give a
 * per-channel slope as 1-D [C], C = X's dim 1: reshaped to [C, 1, ...] so it
 * broadcasts along dim 1 (a 1-element slope broadcasts either way). */
gcc_status cv_prelu(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  GCC_TRY(need_inputs(c, 2, 2, d));
  GCC_TRY(need_float(c, 0, d));
  GCC_TRY(need_float(c, 1, d));
  const tshape *xs = in_sh(c, 0);
  tshape ss = *in_sh(c, 1), b;
  int ins[2], node;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  GCC_TRY(in_ir(c, 1, &ins[1], d));
  if (c->ver < 7 && ss.ndim == 1 && xs->ndim >= 2 && !ss.d[0].sym && !xs->d[1].sym &&
      ss.d[0].v == xs->d[1].v && ss.d[0].v != 1) {
    tshape r = {xs->ndim - 1, {{0, 0}}};
    r.d[0] = ss.d[0];
    for (int i = 1; i < r.ndim; i++)
      r.d[i] = (sdim){1, 0};
    GCC_TRY(emit_reshape(c, ins[1], &r, -1, F32, &ins[1], d));
    ss = r;
  }
  if (!tshape_broadcast(xs, &ss, &b) || b.ndim != xs->ndim) {
    char x[128], y[128];
    return node_err(c, d, GCC_ERR_SHAPE, "the slope %s does not broadcast to X %s",
                    tshape_str(&ss, y, sizeof y), tshape_str(xs, x, sizeof x));
  }
  return emit(c, GCC_OP_PRELU, ins, 2, 0, F32, xs, NULL, &node, d);
}
