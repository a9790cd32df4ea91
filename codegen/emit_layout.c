/*
 * emit_layout.c - CUDA C for Concat, Transpose, Pad and numpy MatMul kernels.
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"

gcc_status gcc_emit_concat_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_graph *g = sk.g;
  const gcc_node *nd = sk.nd;
  const gcc_shape *Y = sk.Y;
  const int64_t ny = sk.ny;
  int64_t work = ny;
  const char *loop = kLoop;
  (void)g;
  int64_t axis = nd->av[CONCAT_AXIS].i, inner = 1;
  if (axis < 0)
    axis += Y->ndim;
  for (int q = (int)axis + 1; q < Y->ndim; q++)
    inner *= Y->dims[q];
  int64_t ax = Y->dims[axis];
  out(&e->src, loop, ny);
  out(&e->src,
      "    const long long o = i / %" PRId64 "LL, a = (i / %" PRId64 "LL) %% %" PRId64
      "LL, q = i %% %" PRId64 "LL;\n",
      ax * inner, inner, ax, inner);
  int64_t off = 0;
  gcc_dtype ty = vdt(g, nd->outputs[0]); /* every input's too */
  for (int j = 0; j < nd->n_inputs; j++) {
    int64_t len = g->values[nd->inputs[j]].shape.dims[axis];
    out(&e->src,
        "    %sif (a < %" PRId64 "LL) out0[i] = %s%sin%d[(o * %" PRId64 "LL + a - %" PRId64
        "LL) * %" PRId64 "LL + q]%s%s;\n",
        j ? "else " : "", off + len, st_open(ty), ld_open(ty), j, len, off, inner, close16(ty),
        close16(ty));
    off += len;
  }
  out(&e->src, "  }\n}\n");
  return single_end(e, &sk, work);
}

gcc_status gcc_emit_transpose_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_graph *g = sk.g;
  const gcc_node *nd = sk.nd;
  const gcc_shape *Y = sk.Y;
  const int64_t ny = sk.ny;
  int64_t work = ny;
  const char *loop = kLoop;
  (void)g;
  /* in memory order (graph/ir.h gcc_layout): a layout conversion of the
   * layout pass is the logical identity between an NCHW and an NHWC value,
   * physically the transpose [0, 2, 3, 1] or [0, 3, 1, 2]. Physical axis q
   * of Y is logical axis ly(q) of Y, which is logical axis perm[ly(q)] of
   * X, at X's physical axis lx^-1(perm[ly(q)]). */
  const gcc_value *xv = &g->values[nd->inputs[0]], *yv = &g->values[nd->outputs[0]];
  const int64_t *perm = nd->av[TRANSPOSE_PERM].ints;
  if (xv->layout != yv->layout && Y->ndim == 4 && perm[0] == 0 && perm[1] == 1 && perm[2] == 2 &&
      perm[3] == 3) {
    /* a layout conversion: per sample, the [R, K] matrix (NCHW -> NHWC: [C,
     * H*W]; NHWC -> NCHW: [H*W, C]) transposed through 32 x 33 shared
     * tiles, so that both the reads and the writes of a warp are 32
     * consecutive elements (a gather per element would read C or H*W
     * elements apart) */
    const int64_t n = Y->dims[0], c = Y->dims[1], hw = Y->dims[2] * Y->dims[3];
    const int64_t r = xv->layout == GCC_LAYOUT_NCHW ? c : hw,
                  k = xv->layout == GCC_LAYOUT_NCHW ? hw : c;
    const int64_t tr = (r + 31) / 32, tk = (k + 31) / 32, tiles = n * tr * tk;
    gcc_dtype ty = vdt(g, nd->outputs[0]), tx = vdt(g, nd->inputs[0]);
    out(&e->src,
        "  (void)stride;\n"
        "  __shared__ float tile[32][33];\n"
        "  for (long long t = blockIdx.x; t < %" PRId64 "LL; t += gridDim.x) {\n"
        "    const long long s = t / %" PRId64 "LL, r0 = (t / %" PRId64 "LL) %% %" PRId64
        "LL * 32, k0 = t %% %" PRId64 "LL * 32;\n"
        "    const long long base = s * %" PRId64 "LL;\n"
        "    for (int i = threadIdx.x; i < 1024; i += blockDim.x) {\n"
        "      const long long a = r0 + i / 32, b = k0 + i %% 32;\n"
        "      if (a < %" PRId64 "LL && b < %" PRId64
        "LL) tile[i / 32][i %% 32] = %sin0[base + a * %" PRId64 "LL + b]%s;\n"
        "    }\n"
        "    __syncthreads();\n"
        "    for (int i = threadIdx.x; i < 1024; i += blockDim.x) {\n"
        "      const long long b = k0 + i / 32, a = r0 + i %% 32;\n"
        "      if (a < %" PRId64 "LL && b < %" PRId64 "LL) out0[base + b * %" PRId64
        "LL + a] = %stile[i %% 32][i / 32]%s;\n"
        "    }\n"
        "    __syncthreads();\n"
        "  }\n}\n",
        tiles, tr * tk, tk, tr, tk, r * k, r, k, ld_open(tx), k, close16(tx), r, k, r, st_open(ty),
        close16(ty));
    return single_end(e, &sk, tiles * BLOCK);
  }
  const gcc_shape Xp = gcc_layout_physical(&xv->shape, xv->layout);
  const gcc_shape Yp = gcc_layout_physical(Y, yv->layout);
  int64_t xst[GCC_MAX_DIMS], acc = 1;
  for (int q = Xp.ndim - 1; q >= 0; q--) {
    xst[q] = acc;
    acc *= Xp.dims[q];
  }
  out(&e->src, loop, ny);
  coords(&e->src, &Yp, "i");
  gcc_dtype ty = vdt(g, nd->outputs[0]);
  out(&e->src, "    out0[i] = %s%sin0[0LL", st_open(ty), ld_open(ty));
  for (int q = 0; q < Yp.ndim; q++) {
    int ly = gcc_layout_axis(yv->layout, Yp.ndim, q, 1);
    int px = gcc_layout_axis(xv->layout, Xp.ndim, (int)nd->av[TRANSPOSE_PERM].ints[ly], 0);
    out(&e->src, " + c%d * %" PRId64 "LL", q, xst[px]);
  }
  out(&e->src, "]%s%s;\n  }\n}\n", close16(ty), close16(ty));
  return single_end(e, &sk, work);
}

gcc_status gcc_emit_pad_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_graph *g = sk.g;
  const gcc_node *nd = sk.nd;
  const gcc_shape *Y = sk.Y;
  const int64_t ny = sk.ny;
  int64_t work = ny;
  const char *loop = kLoop;
  (void)g;
  const gcc_shape *X = &g->values[nd->inputs[0]].shape;
  const int64_t *pads = nd->av[PAD_PADS].ints;
  const char *mode = nd->av[PAD_MODE].s ? nd->av[PAD_MODE].s : "constant";
  int m = strcmp(mode, "edge") == 0 ? 1 : strcmp(mode, "reflect") == 0 ? 2 : 0;
  int64_t xst[GCC_MAX_DIMS], acc = 1;
  for (int q = X->ndim - 1; q >= 0; q--) {
    xst[q] = acc;
    acc *= X->dims[q];
  }
  char lit[64];
  float v = nd->av[PAD_VALUE].f;
  if (v == -INFINITY) /* the bits of -inf: no math.h macro under NVRTC */
    snprintf(lit, sizeof lit, "__int_as_float((int)0xff800000u)");
  else if (v == INFINITY)
    snprintf(lit, sizeof lit, "__int_as_float(0x7f800000)");
  else
    float_lit(lit, sizeof lit, v);
  out(&e->src, loop, ny);
  coords(&e->src, Y, "i");
  out(&e->src, "    long long src = 0;\n    bool inside = true;\n");
  for (int q = 0; q < X->ndim; q++) {
    int64_t in = X->dims[q], b = pads[q];
    out(&e->src, "    { long long t = c%d - %" PRId64 "LL;\n", q, b);
    if (m == 0)
      out(&e->src, "      if (t < 0 || t >= %" PRId64 "LL) inside = false;\n", in);
    else if (m == 1)
      out(&e->src, "      t = t < 0 ? 0 : (t >= %" PRId64 "LL ? %" PRId64 "LL : t);\n", in, in - 1);
    else
      out(&e->src, "      t = t < 0 ? -t : (t >= %" PRId64 "LL ? %" PRId64 "LL - t : t);\n", in,
          2 * (in - 1));
    out(&e->src, "      src += t * %" PRId64 "LL; }\n", xst[q]);
  }
  gcc_dtype ty = vdt(g, nd->outputs[0]);
  out(&e->src, "    out0[i] = %s(inside ? %sin0[src]%s : %s)%s;\n  }\n}\n", st_open(ty),
      ld_open(ty), close16(ty), lit, close16(ty));
  return single_end(e, &sk, work);
}

/* numpy.matmul, one thread per output element */
gcc_status gcc_emit_matmul_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_graph *g = sk.g;
  const gcc_node *nd = sk.nd;
  const gcc_shape *Y = sk.Y;
  const int64_t ny = sk.ny;
  int64_t work = ny;
  const char *loop = kLoop;
  (void)g;
  const gcc_shape *A = &g->values[nd->inputs[0]].shape, *B = &g->values[nd->inputs[1]].shape;
  int64_t m = A->ndim >= 2 ? A->dims[A->ndim - 2] : 1, kk = A->dims[A->ndim - 1];
  int64_t n = B->ndim >= 2 ? B->dims[B->ndim - 1] : 1;
  int nb = Y->ndim - (A->ndim >= 2) - (B->ndim >= 2);
  out(&e->src, loop, ny);
  out(&e->src,
      "    const long long r = (i / %" PRId64 "LL) %% %" PRId64 "LL, col = i %% %" PRId64
      "LL, t = i / (%" PRId64 "LL * %" PRId64 "LL);\n",
      n, m, n, m, n);
  /* the batch offsets of A and B from t (broadcast dims read element 0) */
  out(&e->src, "    long long ta = 0, tb = 0;\n");
  int64_t st = 1, sa = 1, sbb = 1;
  for (int q = nb - 1; q >= 0; q--) {
    int qa = q - (nb - (A->ndim > 2 ? A->ndim - 2 : 0));
    int qb = q - (nb - (B->ndim > 2 ? B->ndim - 2 : 0));
    int64_t da = qa >= 0 ? A->dims[qa] : 1, db = qb >= 0 ? B->dims[qb] : 1;
    out(&e->src, "    { const long long cq = (t / %" PRId64 "LL) %% %" PRId64 "LL;", st,
        Y->dims[q]);
    if (da != 1)
      out(&e->src, " ta += cq * %" PRId64 "LL;", sa);
    if (db != 1)
      out(&e->src, " tb += cq * %" PRId64 "LL;", sbb);
    out(&e->src, " }\n");
    st *= Y->dims[q];
    sa *= da;
    sbb *= db;
  }
  out(&e->src,
      "    const float* a = in0 + ta * %" PRId64 "LL + r * %" PRId64 "LL;\n"
      "    const float* b = in1 + tb * %" PRId64 "LL + col;\n"
      "    float acc = 0.0f;\n"
      "    for (long long j = 0; j < %" PRId64 "LL; j++) acc += a[j] * b[j * %" PRId64 "LL];\n"
      "    out0[i] = acc;\n  }\n}\n",
      m * kk, kk, kk * n, kk, n);
  return single_end(e, &sk, work);
}

int gcc_fits_matmul_2d(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  return g->values[n->inputs[0]].shape.ndim == 2 && g->values[n->inputs[1]].shape.ndim == 2;
}
