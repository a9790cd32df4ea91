/*
 * emit_norm.c - CUDA C for the single-node kernels of Softmax, LogSoftmax, LRN (and
 * their gradients) and BatchNormalization / BatchNormGrad.
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"

/* Softmax and LogSoftmax: one thread per line along the axis, float64 sums as the CPU */
static gcc_status softmax_kernel(emitter *e, int gi, int ni, int is_log) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_graph *g = sk.g;
  const gcc_node *nd = sk.nd;
  const gcc_shape *Y = sk.Y;
  const int64_t ny = sk.ny;
  int64_t work = ny;
  const char *loop = kLoop;
  (void)g;
  int64_t axis = nd->av[SOFTMAX_AXIS].i, outer = 1, inner = 1;
  if (axis < 0)
    axis += Y->ndim;
  for (int q = 0; q < axis; q++)
    outer *= Y->dims[q];
  for (int q = (int)axis + 1; q < Y->ndim; q++)
    inner *= Y->dims[q];
  int64_t len = Y->dims[axis];
  work = outer * inner;
  out(&e->src, loop, work);
  out(&e->src,
      "    const long long base = (i / %" PRId64 "LL) * %" PRId64 "LL + i %% %" PRId64 "LL;\n"
      "    float mx = in0[base];\n"
      "    for (long long j = 1; j < %" PRId64 "LL; j++) { float v = in0[base + j * %" PRId64
      "LL]; mx = v > mx ? v : mx; }\n"
      "    double se = 0.0;\n"
      "    for (long long j = 0; j < %" PRId64 "LL; j++) se += exp((double)in0[base + j * %" PRId64
      "LL] - mx);\n",
      inner, len * inner, inner, len, inner, len, inner);
  if (!is_log)
    out(&e->src,
        "    for (long long j = 0; j < %" PRId64 "LL; j++) out0[base + j * %" PRId64
        "LL] = (float)(exp((double)in0[base + j * %" PRId64 "LL] - mx) / se);\n",
        len, inner, inner);
  else
    out(&e->src,
        "    const double lse = log(se);\n"
        "    for (long long j = 0; j < %" PRId64 "LL; j++) out0[base + j * %" PRId64
        "LL] = (float)((double)in0[base + j * %" PRId64 "LL] - mx - lse);\n",
        len, inner, inner);
  out(&e->src, "  }\n}\n");
  return single_end(e, &sk, work);
}

gcc_status gcc_emit_softmax_kernel(emitter *e, int gi, int ni) {
  return softmax_kernel(e, gi, ni, 0);
}

gcc_status gcc_emit_log_softmax_kernel(emitter *e, int gi, int ni) {
  return softmax_kernel(e, gi, ni, 1);
}

gcc_status gcc_emit_lrn_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_graph *g = sk.g;
  const gcc_node *nd = sk.nd;
  const gcc_shape *Y = sk.Y;
  const int64_t ny = sk.ny;
  int64_t work = ny;
  const char *loop = kLoop;
  (void)g;
  int64_t size = nd->av[LRN_SIZE].i, c = Y->dims[1], inner = 1;
  for (int q = 2; q < Y->ndim; q++)
    inner *= Y->dims[q];
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  char la[32], lb[32], lk[32];
  snprintf(la, sizeof la, "%.17g", (double)nd->av[LRN_ALPHA].f / (double)size);
  snprintf(lb, sizeof lb, "%.17g", (double)nd->av[LRN_BETA].f);
  snprintf(lk, sizeof lk, "%.17g", (double)nd->av[LRN_BIAS].f);
  out(&e->src, loop, ny);
  out(&e->src,
      "    const long long ci = (i / %" PRId64 "LL) %% %" PRId64 "LL, q = i %% %" PRId64
      "LL, b = i / (%" PRId64 "LL * %" PRId64 "LL);\n"
      "    const long long c0 = ci - %" PRId64 "LL < 0 ? 0 : ci - %" PRId64 "LL;\n"
      "    const long long c1 = ci + %" PRId64 "LL >= %" PRId64 "LL ? %" PRId64 "LL : ci + %" PRId64
      "LL;\n"
      "    double sq = 0.0;\n"
      "    for (long long kk = c0; kk <= c1; kk++) { double v = in0[(b * %" PRId64
      "LL + kk) * %" PRId64 "LL + q]; sq += v * v; }\n"
      "    out0[i] = (float)((double)in0[i] / pow(%s + %s * sq, %s));\n  }\n}\n",
      inner, c, inner, c, inner, lo, lo, hi, c, c - 1, hi, c, inner, lk, la, lb);
  return single_end(e, &sk, work);
}

gcc_status gcc_emit_log_softmax_grad_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_shape *Y = sk.Y;
  int64_t axis = sk.nd->av[SOFTMAX_AXIS].i, outer = 1, inner = 1;
  if (axis < 0)
    axis += Y->ndim;
  for (int q = 0; q < axis; q++)
    outer *= Y->dims[q];
  for (int q = (int)axis + 1; q < Y->ndim; q++)
    inner *= Y->dims[q];
  int64_t len = Y->dims[axis], work = outer * inner;
  /* in0 = dY, in1 = Y */
  out(&e->src, kLoop, work);
  out(&e->src,
      "    const long long base = (i / %" PRId64 "LL) * %" PRId64 "LL + i %% %" PRId64 "LL;\n"
      "    double sum = 0.0;\n"
      "    for (long long j = 0; j < %" PRId64 "LL; j++) sum += (double)in0[base + j * %" PRId64
      "LL];\n"
      "    for (long long j = 0; j < %" PRId64 "LL; j++) out0[base + j * %" PRId64
      "LL] = (float)((double)in0[base + j * %" PRId64 "LL] - exp((double)in1[base + j * %" PRId64
      "LL]) * sum);\n  }\n}\n",
      inner, len * inner, inner, len, inner, len, inner, inner, inner);
  return single_end(e, &sk, work);
}

gcc_status gcc_emit_lrn_grad_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_node *nd = sk.nd;
  const gcc_shape *Y = sk.Y;
  const int64_t ny = sk.ny;
  int64_t size = nd->av[LRN_SIZE].i, c = Y->dims[1], inner = 1;
  for (int q = 2; q < Y->ndim; q++)
    inner *= Y->dims[q];
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  char la[32], lb[32], lk[32];
  snprintf(la, sizeof la, "%.17g", (double)nd->av[LRN_ALPHA].f / (double)size);
  snprintf(lb, sizeof lb, "%.17g", (double)nd->av[LRN_BETA].f);
  snprintf(lk, sizeof lk, "%.17g", (double)nd->av[LRN_BIAS].f);
  /* in0 = dY, in1 = X, in2 = Y; S(k) = bias + alpha / size * (sum of X^2 over k's window) */
  out(&e->src, kLoop, ny);
  out(&e->src,
      "    const long long ci = (i / %" PRId64 "LL) %% %" PRId64 "LL, q = i %% %" PRId64
      "LL, b = i / (%" PRId64 "LL * %" PRId64 "LL);\n"
      "    const long long k0 = ci - %" PRId64 "LL < 0 ? 0 : ci - %" PRId64 "LL;\n"
      "    const long long k1 = ci + %" PRId64 "LL >= %" PRId64 "LL ? %" PRId64 "LL : ci + %" PRId64
      "LL;\n"
      "    double acc = 0.0, si = 0.0;\n"
      "    for (long long k = k0 - 1; k <= k1; k++) {\n"
      "      const long long kk = k < k0 ? ci : k;\n"
      "      const long long c0 = kk - %" PRId64 "LL < 0 ? 0 : kk - %" PRId64 "LL;\n"
      "      const long long c1 = kk + %" PRId64 "LL >= %" PRId64 "LL ? %" PRId64
      "LL : kk + %" PRId64 "LL;\n"
      "      double sq = 0.0;\n"
      "      for (long long m = c0; m <= c1; m++) { double v = in1[(b * %" PRId64
      "LL + m) * %" PRId64 "LL + q]; sq += v * v; }\n"
      "      const double sk = %s + %s * sq;\n"
      "      const long long ak = (b * %" PRId64 "LL + kk) * %" PRId64 "LL + q;\n"
      "      if (k < k0) si = sk; else acc += (double)in0[ak] * (double)in2[ak] / sk;\n"
      "    }\n"
      "    out0[i] = (float)((double)in0[i] * pow(si, -(%s)) - 2.0 * (%s) * (%s) * (double)in1[i] "
      "* "
      "acc);\n  }\n}\n",
      inner, c, inner, c, inner, hi, hi, lo, c, c - 1, lo, lo, lo, hi, c, c - 1, hi, c, inner, lk,
      la, c, inner, lb, la, lb);
  return single_end(e, &sk, ny);
}

/* X [N, C, D1, ...] of BatchNormalization (input 0) or BatchNormGrad
 * (input 1): channels, samples and elements per sample and channel. */
static void bn_kernel_dims(const gcc_graph *g, const gcc_node *nd, int xin, int64_t *n, int64_t *c,
                           int64_t *inner) {
  const gcc_shape *X = &g->values[nd->inputs[xin]].shape;
  *n = X->dims[0];
  *c = X->dims[1];
  *inner = 1;
  for (int q = 2; q < X->ndim; q++)
    *inner *= X->dims[q];
}

/* The batch mean and biased variance of channel ci of `x` (of dtype `t`)
 * into mean, var (float64, the CPU's order of summation: a 16-bit x is
 * widened exactly, so the statistics are the CPU's bit for bit). */
static void bn_stats_src(emitter *e, const char *x, gcc_dtype t, int64_t n, int64_t c,
                         int64_t inner) {
  out(&e->src,
      "    double s = 0.0;\n"
      "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
      "LL; q++) s += %s%s[(b * %" PRId64 "LL + ci) * %" PRId64 "LL + q]%s;\n"
      "    mean = s / %" PRId64 ".0;\n"
      "    double v = 0.0;\n"
      "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
      "LL; q++) { double t = %s%s[(b * %" PRId64 "LL + ci) * %" PRId64
      "LL + q]%s - mean; v += t * t; }\n"
      "    var = v / %" PRId64 ".0;\n",
      n, inner, ld_open(t), x, c, inner, close16(t), n * inner, n, inner, ld_open(t), x, c, inner,
      close16(t), n * inner);
}

gcc_status gcc_emit_batch_norm_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_node *nd = sk.nd;
  int64_t n, c, inner;
  bn_kernel_dims(sk.g, nd, 0, &n, &c, &inner);
  int64_t m = n * inner;
  gcc_dtype tx = vdt(sk.g, nd->inputs[0]), ty = vdt(sk.g, nd->outputs[0]);
  char le[40], lm[40];
  snprintf(le, sizeof le, "%.17g", (double)nd->av[BN_EPSILON].f);
  snprintf(lm, sizeof lm, "%.17g", (double)nd->av[BN_MOMENTUM].f);
  /* in0 = X, in1 = scale, in2 = B, in3 = running_mean, in4 = running_var */
  out(&e->src, kLoop, c);
  out(&e->src, "    const long long ci = i;\n    double mean = in3[ci], var = in4[ci];\n");
  if (nd->av[BN_TRAINING].i) {
    bn_stats_src(e, "in0", tx, n, c, inner);
    /* the running variance takes the unbiased estimate, as PyTorch's */
    char unb[96];
    if (m > 1)
      snprintf(unb, sizeof unb, "var * %" PRId64 ".0 / %" PRId64 ".0", m, m - 1);
    else
      snprintf(unb, sizeof unb, "var");
    out(&e->src,
        "    ((float *)in3)[ci] = (float)((%s) * (double)in3[ci] + (1.0 - (%s)) * mean);\n"
        "    ((float *)in4)[ci] = (float)((%s) * (double)in4[ci] + (1.0 - (%s)) * (%s));\n",
        lm, lm, lm, lm, unb);
  }
  out(&e->src,
      "    const double k = (double)in1[ci] / sqrt(var + (%s)), b0 = (double)in2[ci] - mean * k;\n"
      "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
      "LL; q++) {\n"
      "      const long long at = (b * %" PRId64 "LL + ci) * %" PRId64 "LL + q;\n"
      "      out0[at] = %s(float)((double)%sin0[at]%s * k + b0)%s;\n    }\n  }\n}\n",
      le, n, inner, c, inner, st_open(ty), ld_open(tx), close16(tx), close16(ty));
  return single_end(e, &sk, c);
}

gcc_status gcc_emit_batch_norm_grad_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_node *nd = sk.nd;
  int64_t n, c, inner;
  bn_kernel_dims(sk.g, nd, 1, &n, &c, &inner);
  int64_t m = n * inner, which = nd->av[BN_GRAD_OUTPUT].i;
  gcc_dtype tg = vdt(sk.g, nd->inputs[0]), tx = vdt(sk.g, nd->inputs[1]),
            ty = vdt(sk.g, nd->outputs[0]);
  char le[40];
  snprintf(le, sizeof le, "%.17g", (double)nd->av[BN_GRAD_EPSILON].f);
  /* in0 = dY, in1 = X, in2 = scale */
  out(&e->src, kLoop, c);
  out(&e->src, "    const long long ci = i;\n    double mean, var;\n");
  bn_stats_src(e, "in1", tx, n, c, inner);
  out(&e->src,
      "    const double invstd = 1.0 / sqrt(var + (%s));\n"
      "    double db = 0.0, ds = 0.0;\n"
      "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
      "LL; q++) {\n"
      "      const long long at = (b * %" PRId64 "LL + ci) * %" PRId64 "LL + q;\n"
      "      db += %sin0[at]%s;\n"
      "      ds += (double)%sin0[at]%s * ((double)%sin1[at]%s - mean) * invstd;\n    }\n",
      le, n, inner, c, inner, ld_open(tg), close16(tg), ld_open(tg), close16(tg), ld_open(tx),
      close16(tx));
  if (which == 1)
    out(&e->src, "    out0[ci] = (float)ds;\n");
  else if (which == 2)
    out(&e->src, "    out0[ci] = (float)db;\n");
  else
    out(&e->src,
        "    const double k = (double)in2[ci] * invstd / %" PRId64 ".0;\n"
        "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
        "LL; q++) {\n"
        "      const long long at = (b * %" PRId64 "LL + ci) * %" PRId64 "LL + q;\n"
        "      const double xhat = ((double)%sin1[at]%s - mean) * invstd;\n"
        "      out0[at] = %s(float)(k * (%" PRId64
        ".0 * (double)%sin0[at]%s - db - xhat * ds))%s;\n"
        "    }\n",
        m, n, inner, c, inner, ld_open(tx), close16(tx), st_open(ty), m, ld_open(tg), close16(tg),
        close16(ty));
  out(&e->src, "  }\n}\n");
  return single_end(e, &sk, c);
}
