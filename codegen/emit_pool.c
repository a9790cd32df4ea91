/*
 * emit_pool.c - CUDA C for MaxPool and AveragePool kernels and their gradients.
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"

/* MaxPool and AveragePool: 16-bit operands (cuDNN's legacy pooling API does
 * not promise bfloat16) and the windows cuDNN cannot express (dilations,
 * asymmetric pads), as the CPU kernels compute them (the same scan order,
 * so the same float32 sums) */
static gcc_status pool_kernel(emitter *e, int gi, int ni, int is_max) {
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
  gcc_window2d w;
  gcc_window2d_of(nd, NULL, &w);
  int64_t h = X->dims[2], wd = X->dims[3], oh = Y->dims[2], ow = Y->dims[3];
  gcc_dtype tx = vdt(g, nd->inputs[0]), ty = vdt(g, nd->outputs[0]);
  out(&e->src, loop, ny);
  out(&e->src,
      "    const long long ox = i %% %" PRId64 "LL, oy = (i / %" PRId64 "LL) %% %" PRId64
      "LL, pc = i / (%" PRId64 "LL * %" PRId64 "LL);\n"
      "    %s plane = in0 + pc * %" PRId64 "LL;\n",
      ow, ow, oh, oh, ow, in_type(tx), h * wd);
  if (is_max)
    out(&e->src, "    float best = __int_as_float((int)0xff800000u);\n    bool any = false;\n");
  else
    out(&e->src, "    float sum = 0.0f;\n    long long cnt = 0;\n");
  out(&e->src,
      "    for (long long a = 0; a < %" PRId64 "LL; a++) {\n"
      "      const long long iy = oy * %" PRId64 "LL - %" PRId64 "LL + a * %" PRId64 "LL;\n"
      "      if (iy < 0 || iy >= %" PRId64 "LL) continue;\n"
      "      for (long long b = 0; b < %" PRId64 "LL; b++) {\n"
      "        const long long ix = ox * %" PRId64 "LL - %" PRId64 "LL + b * %" PRId64 "LL;\n"
      "        if (ix < 0 || ix >= %" PRId64 "LL) continue;\n"
      "        const float v = %splane[iy * %" PRId64 "LL + ix]%s;\n",
      w.kh, w.sh, w.pt, w.dh, h, w.kw, w.sw, w.pl, w.dw, wd, ld_open(tx), wd, close16(tx));
  if (is_max)
    out(&e->src, "        if (!any || v > best || v != v) best = v; /* NaN wins */\n"
                 "        any = true;\n      }\n    }\n");
  else {
    char div[32]; /* count_include_pad: the whole window, else the taps inside */
    if (nd->av[POOL_COUNT_INCLUDE_PAD].i)
      snprintf(div, sizeof div, "%" PRId64 "LL", w.kh * w.kw);
    else
      snprintf(div, sizeof div, "cnt");
    out(&e->src,
        "        sum += v;\n        cnt++;\n      }\n    }\n    const float best = sum / "
        "(float)%s;\n",
        div);
  }
  out(&e->src, "    out0[i] = %sbest%s;\n", st_open(ty), close16(ty));
  out(&e->src, "  }\n}\n");
  return single_end(e, &sk, work);
}

gcc_status gcc_emit_max_pool_kernel(emitter *e, int gi, int ni) {
  return pool_kernel(e, gi, ni, 1);
}

gcc_status gcc_emit_average_pool_kernel(emitter *e, int gi, int ni) {
  return pool_kernel(e, gi, ni, 0);
}

/* MaxPoolGrad (dY, X, Y) -> dX and AveragePoolGrad (dY) -> dX: one thread
 * per element of dX, gathering the windows that hold it in ascending (oy,
 * ox) order, which is the order in which the CPU kernels scatter into that
 * element (so the float32 sums are the same, bit for bit). Max: dY of a
 * window goes to its first maximum in row-major window order, NaN winning
 * (the last NaN, as the CPU's max_pool_argmax), recomputed from X; average:
 * dY / divisor, the divisor the whole window with count_include_pad, else
 * the taps inside the input (rows inside times columns inside). */
static gcc_status pool_grad_kernel(emitter *e, int gi, int ni, int is_max) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_graph *g = sk.g;
  const gcc_node *nd = sk.nd;
  const gcc_shape *X = sk.Y; /* dX has X's shape */
  const int64_t nx = sk.ny;
  const gcc_shape *DY = &g->values[nd->inputs[0]].shape;
  gcc_window2d w;
  gcc_window2d_of(nd, NULL, &w);
  int64_t h = X->dims[2], wd = X->dims[3], oh = DY->dims[2], ow = DY->dims[3];
  gcc_dtype tdy = vdt(g, nd->inputs[0]), tdx = vdt(g, nd->outputs[0]);
  gcc_dtype tx = is_max ? vdt(g, nd->inputs[1]) : GCC_DT_FLOAT32;
  out(&e->src, kLoop, nx);
  out(&e->src,
      "    const long long ix = i %% %" PRId64 "LL, iy = (i / %" PRId64 "LL) %% %" PRId64
      "LL, pc = i / (%" PRId64 "LL * %" PRId64 "LL);\n"
      "    %s dyp = in0 + pc * %" PRId64 "LL;\n",
      wd, wd, h, h, wd, in_type(tdy), oh * ow);
  if (is_max)
    out(&e->src, "    %s plane = in1 + pc * %" PRId64 "LL;\n", in_type(tx), h * wd);
  /* the windows whose span [o * s - p, o * s - p + (k - 1) * d] holds the element */
  out(&e->src,
      "    float acc = 0.0f;\n"
      "    const long long ty = iy + %" PRId64 "LL - %" PRId64 "LL, tx = ix + %" PRId64
      "LL - %" PRId64 "LL;\n"
      "    const long long oy0 = ty <= 0 ? 0 : (ty + %" PRId64 "LL - 1) / %" PRId64 "LL;\n"
      "    const long long ox0 = tx <= 0 ? 0 : (tx + %" PRId64 "LL - 1) / %" PRId64 "LL;\n"
      "    long long oy1 = (iy + %" PRId64 "LL) / %" PRId64 "LL, ox1 = (ix + %" PRId64
      "LL) / %" PRId64 "LL;\n"
      "    if (oy1 > %" PRId64 "LL) oy1 = %" PRId64 "LL;\n"
      "    if (ox1 > %" PRId64 "LL) ox1 = %" PRId64 "LL;\n"
      "    for (long long oy = oy0; oy <= oy1; oy++) {\n"
      "      const long long ry = iy - (oy * %" PRId64 "LL - %" PRId64 "LL);\n"
      "      if (ry %% %" PRId64 "LL != 0 || ry / %" PRId64 "LL >= %" PRId64 "LL) continue;\n"
      "      for (long long ox = ox0; ox <= ox1; ox++) {\n"
      "        const long long rx = ix - (ox * %" PRId64 "LL - %" PRId64 "LL);\n"
      "        if (rx %% %" PRId64 "LL != 0 || rx / %" PRId64 "LL >= %" PRId64 "LL) continue;\n",
      w.pt, (w.kh - 1) * w.dh, w.pl, (w.kw - 1) * w.dw, w.sh, w.sh, w.sw, w.sw, w.pt, w.sh, w.pl,
      w.sw, oh - 1, oh - 1, ow - 1, ow - 1, w.sh, w.pt, w.dh, w.dh, w.kh, w.sw, w.pl, w.dw, w.dw,
      w.kw);
  if (is_max) {
    out(&e->src,
        "        long long bi = -1;\n        float best = 0.0f;\n"
        "        for (long long a = 0; a < %" PRId64 "LL; a++) {\n"
        "          const long long yy = oy * %" PRId64 "LL - %" PRId64 "LL + a * %" PRId64 "LL;\n"
        "          if (yy < 0 || yy >= %" PRId64 "LL) continue;\n"
        "          for (long long b = 0; b < %" PRId64 "LL; b++) {\n"
        "            const long long xx = ox * %" PRId64 "LL - %" PRId64 "LL + b * %" PRId64 "LL;\n"
        "            if (xx < 0 || xx >= %" PRId64 "LL) continue;\n"
        "            const float v = %splane[yy * %" PRId64 "LL + xx]%s;\n"
        "            if (bi < 0 || v > best || v != v) { best = v; bi = yy * %" PRId64
        "LL + xx; } /* NaN wins */\n"
        "          }\n        }\n"
        "        if (bi == iy * %" PRId64 "LL + ix) acc += %sdyp[oy * %" PRId64 "LL + ox]%s;\n",
        w.kh, w.sh, w.pt, w.dh, h, w.kw, w.sw, w.pl, w.dw, wd, ld_open(tx), wd, close16(tx), wd, wd,
        ld_open(tdy), ow, close16(tdy));
  } else {
    if (nd->av[POOL_COUNT_INCLUDE_PAD].i)
      out(&e->src, "        const long long div = %" PRId64 "LL;\n", w.kh * w.kw);
    else
      out(&e->src,
          "        long long ny_in = 0, nx_in = 0;\n"
          "        for (long long a = 0; a < %" PRId64 "LL; a++) {\n"
          "          const long long yy = oy * %" PRId64 "LL - %" PRId64 "LL + a * %" PRId64 "LL;\n"
          "          ny_in += yy >= 0 && yy < %" PRId64 "LL;\n        }\n"
          "        for (long long b = 0; b < %" PRId64 "LL; b++) {\n"
          "          const long long xx = ox * %" PRId64 "LL - %" PRId64 "LL + b * %" PRId64 "LL;\n"
          "          nx_in += xx >= 0 && xx < %" PRId64 "LL;\n        }\n"
          "        const long long div = ny_in * nx_in;\n",
          w.kh, w.sh, w.pt, w.dh, h, w.kw, w.sw, w.pl, w.dw, wd);
    out(&e->src, "        acc += %sdyp[oy * %" PRId64 "LL + ox]%s / (float)div;\n", ld_open(tdy),
        ow, close16(tdy));
  }
  out(&e->src, "      }\n    }\n    out0[i] = %sacc%s;\n  }\n}\n", st_open(tdx), close16(tdx));
  return single_end(e, &sk, nx);
}

gcc_status gcc_emit_max_pool_grad_kernel(emitter *e, int gi, int ni) {
  return pool_grad_kernel(e, gi, ni, 1);
}

gcc_status gcc_emit_average_pool_grad_kernel(emitter *e, int gi, int ni) {
  return pool_grad_kernel(e, gi, ni, 0);
}

int gcc_fits_cudnn_pool(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_inputs; k++)
    if (n->inputs[k] >= 0 && is16(vdt(g, n->inputs[k])))
      return 0;
  if (is16(vdt(g, n->outputs[0])))
    return 0;
  gcc_window2d w;
  gcc_window2d_of(n, NULL, &w);
  return w.dh == 1 && w.dw == 1 && w.pt == w.pb && w.pl == w.pr;
}
