/*
 * emit_norm.c - CUDA C for the single-node kernels of Softmax, LogSoftmax, LRN (and
 * their gradients). BatchNormalization / BatchNormGrad: emit_batchnorm.c.
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"

/* The lines of a Softmax-family node (its axis attribute, negative counted
 * from the end): each `len` elements `inner` apart; line i starts at
 * (i / inner) * len * inner + i % inner. */
static void softmax_lines(const single *sk, int64_t *len, int64_t *inner, int64_t *lines) {
  const gcc_shape *Y = sk->Y;
  int64_t axis = sk->nd->av[SOFTMAX_AXIS].i, outer = 1;
  if (axis < 0)
    axis += Y->ndim;
  *inner = 1;
  for (int q = 0; q < axis; q++)
    outer *= Y->dims[q];
  for (int q = (int)axis + 1; q < Y->ndim; q++)
    *inner *= Y->dims[q];
  *len = Y->dims[axis];
  *lines = outer * *inner;
}

/* Softmax and LogSoftmax: a block per line along the axis (lines
 * grid-stride over the blocks). The line's max and sum of exponentials are
 * reduced over BLOCK lanes (lane l takes elements l, l + BLOCK, ...; run by
 * thread l % blockDim.x) in a fixed tree, the sum in float64 as the CPU
 * kernel: the bits do not depend on the launch shape, and differ from the
 * CPU's serial float64 sum only where the float64 results round to
 * different floats. */
static gcc_status softmax_kernel(emitter *e, int gi, int ni, int is_log) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  int64_t len, inner, lines;
  softmax_lines(&sk, &len, &inner, &lines);
  out(&e->src,
      "  (void)stride;\n"
      "  __shared__ float s_m[%d];\n  __shared__ double s_r[%d];\n"
      "  for (long long i = blockIdx.x; i < %" PRId64 "LL; i += gridDim.x) {\n"
      "    const long long base = (i / %" PRId64 "LL) * %" PRId64 "LL + i %% %" PRId64 "LL;\n"
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      float m = in0[base];\n"
      "      for (long long j = l; j < %" PRId64 "LL; j += %d) { const float v = in0[base + j * "
      "%" PRId64 "LL]; m = v > m ? v : m; }\n"
      "      s_m[l] = m;\n"
      "    }\n"
      "    __syncthreads();\n"
      "    for (int h = %d; h > 0; h >>= 1) {\n"
      "      for (int l = threadIdx.x; l < h; l += blockDim.x) s_m[l] = s_m[l + h] > s_m[l] ? "
      "s_m[l + h] : s_m[l];\n"
      "      __syncthreads();\n"
      "    }\n"
      "    const float mx = s_m[0];\n"
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      double se = 0.0;\n"
      "      for (long long j = l; j < %" PRId64 "LL; j += %d) se += exp((double)in0[base + j * "
      "%" PRId64 "LL] - mx);\n"
      "      s_r[l] = se;\n"
      "    }\n"
      "    __syncthreads();\n"
      "    for (int h = %d; h > 0; h >>= 1) {\n"
      "      for (int l = threadIdx.x; l < h; l += blockDim.x) s_r[l] += s_r[l + h];\n"
      "      __syncthreads();\n"
      "    }\n"
      "    const double se = s_r[0];\n",
      BLOCK, BLOCK, lines, inner, len * inner, inner, BLOCK, len, BLOCK, inner, BLOCK / 2, BLOCK,
      len, BLOCK, inner, BLOCK / 2);
  if (!is_log)
    out(&e->src,
        "    for (long long j = threadIdx.x; j < %" PRId64
        "LL; j += blockDim.x) out0[base + j * %" PRId64 "LL] = (float)(exp((double)in0[base + j * "
        "%" PRId64 "LL] - mx) / se);\n",
        len, inner, inner);
  else
    out(&e->src,
        "    const double lse = log(se);\n"
        "    for (long long j = threadIdx.x; j < %" PRId64
        "LL; j += blockDim.x) out0[base + j * %" PRId64 "LL] = (float)((double)in0[base + j * "
        "%" PRId64 "LL] - mx - lse);\n",
        len, inner, inner);
  out(&e->src, "    __syncthreads();\n  }\n}\n");
  return single_end(e, &sk, lines * BLOCK);
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

/* SoftmaxGrad, dX = Y * (dY - sum(dY * Y)), and LogSoftmaxGrad, dX = dY -
 * exp(Y) * sum(dY), along the axis: a block per line as the forward (lines
 * grid-stride over the blocks); the line's sum over BLOCK lanes (lane l
 * takes elements l, l + BLOCK, ...) in a fixed tree, in float64 as the CPU
 * kernels (gcc_cpu_softmax_grad), so the bits do not depend on the launch
 * shape (1000 classes were one thread walking the line twice). */
static gcc_status softmax_grad_kernel(emitter *e, int gi, int ni, int is_log) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  int64_t len, inner, lines;
  softmax_lines(&sk, &len, &inner, &lines);
  const char *r = is_log ? "sum" : "dot"; /* in0 = dY, in1 = Y */
  out(&e->src,
      "  (void)stride;\n"
      "  __shared__ double s_r[%d];\n"
      "  for (long long i = blockIdx.x; i < %" PRId64 "LL; i += gridDim.x) {\n"
      "    const long long base = (i / %" PRId64 "LL) * %" PRId64 "LL + i %% %" PRId64 "LL;\n"
      "    for (int l = threadIdx.x; l < %d; l += blockDim.x) {\n"
      "      double %s = 0.0;\n",
      BLOCK, lines, inner, len * inner, inner, BLOCK, r);
  if (is_log)
    out(&e->src,
        "      for (long long j = l; j < %" PRId64 "LL; j += %d) sum += (double)in0[base + j * "
        "%" PRId64 "LL];\n",
        len, BLOCK, inner);
  else
    out(&e->src,
        "      for (long long j = l; j < %" PRId64 "LL; j += %d) { const long long o = base + j * "
        "%" PRId64 "LL; dot += (double)in0[o] * (double)in1[o]; }\n",
        len, BLOCK, inner);
  out(&e->src,
      "      s_r[l] = %s;\n"
      "    }\n"
      "    __syncthreads();\n"
      "    for (int h = %d; h > 0; h >>= 1) {\n"
      "      for (int l = threadIdx.x; l < h; l += blockDim.x) s_r[l] += s_r[l + h];\n"
      "      __syncthreads();\n"
      "    }\n"
      "    const double %s = s_r[0];\n",
      r, BLOCK / 2, r);
  if (is_log)
    out(&e->src,
        "    for (long long j = threadIdx.x; j < %" PRId64 "LL; j += blockDim.x) out0[base + j * "
        "%" PRId64 "LL] = (float)((double)in0[base + j * %" PRId64 "LL] - exp((double)in1[base + "
        "j * %" PRId64 "LL]) * sum);\n",
        len, inner, inner, inner);
  else
    out(&e->src,
        "    for (long long j = threadIdx.x; j < %" PRId64 "LL; j += blockDim.x) { const long long "
        "o = base + j * %" PRId64 "LL; out0[o] = (float)((double)in1[o] * ((double)in0[o] - "
        "dot)); }\n",
        len, inner);
  out(&e->src, "    __syncthreads();\n  }\n}\n");
  return single_end(e, &sk, lines * BLOCK);
}

gcc_status gcc_emit_log_softmax_grad_kernel(emitter *e, int gi, int ni) {
  return softmax_grad_kernel(e, gi, ni, 1);
}

gcc_status gcc_emit_softmax_grad_kernel(emitter *e, int gi, int ni) {
  return softmax_grad_kernel(e, gi, ni, 0);
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
