/*
 * emit_select.c - CUDA C for the selection ops (graph/ops.h): Trilu (ONNX
 * Trilu-14), ArgMax / ArgMin (ONNX ArgMax-13 / ArgMin-13) and ReduceMin
 * (ONNX ReduceMin-13) with its gradient. See emit.h
 * for the conventions of the generated source; the CPU kernels are
 * runtime/cpu/cpu_select.c.
 */
#include "codegen/emit_internal.h"

static const char *elem_type(gcc_dtype t) {
  switch (t) {
  case GCC_DT_INT64: return "long long";
  case GCC_DT_INT32: return "int";
  case GCC_DT_BOOL: return "unsigned char";
  case GCC_DT_FLOAT16: return "__half";
  case GCC_DT_BFLOAT16: return "__nv_bfloat16";
  default: return "float";
  }
}

/* The signature in0 (X), out0 (Y) with the element types of the node's
 * input and output. */
static gcc_status begin(emitter *e, int gi, int ni, gcc_kernel_info **kp, sig *s) {
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  char t0[48], t1[48];
  snprintf(t0, sizeof t0, "const %s*", elem_type(vdt(g, nd->inputs[0])));
  snprintf(t1, sizeof t1, "%s*", elem_type(vdt(g, nd->outputs[0])));
  const char *k0 = keep_str(e, t0), *k1 = keep_str(e, t1);
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k || !k0 || !k1)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  *s = (sig){.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, s, GCC_KARG_INPUT, nd->inputs[0], k0, "in0");
  param(e, s, GCC_KARG_OUTPUT, nd->outputs[0], k1, "out0");
  out(&e->src, ") {\n");
  if (!s->ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  *kp = k;
  return GCC_OK;
}

/* One thread per element of Y: X's element when its column c and row r of
 * the last two dims keep it (c - r >= k upper, c - r <= k lower), else a
 * zero of the element type (a copy: any element type, 16-bit included). */
gcc_status gcc_emit_trilu_kernel(emitter *e, int gi, int ni) {
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_value *x = &g->values[nd->inputs[0]];
  int r = x->shape.ndim;
  int64_t R = x->shape.dims[r - 2], C = x->shape.dims[r - 1];
  int64_t ny = gcc_shape_numel(&x->shape, NULL), k = nd->av[TRILU_K].i;
  gcc_kernel_info *kn;
  sig s;
  GCC_TRY(begin(e, gi, ni, &kn, &s));
  const char *zero = is16(x->dtype) ? (x->dtype == GCC_DT_FLOAT16 ? "__float2half_rn(0.0f)"
                                                                  : "__float2bfloat16_rn(0.0f)")
                                    : "0";
  out(&e->src,
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n" kLoop
      "    const long long c = i %% %" PRId64 "LL, r = (i / %" PRId64 "LL) %% %" PRId64 "LL;\n"
      "    const bool keep = c - r %s %" PRId64 "LL;\n"
      "    out0[i] = keep ? in0[i] : %s;\n"
      "  }\n}\n",
      ny, C, C, R, nd->av[TRILU_UPPER].i ? ">=" : "<=", k, zero);
  set_grid(e, kn, ny);
  emit_wrapper(e, kn, s.types);
  return GCC_OK;
}

/* The condition that (v, j) replaces the candidate (b, bj) (bj < 0: none). */
static void better(sb *o, int is_float, int is_max, int last, const char *v, const char *b,
                   const char *j, const char *bj) {
  const char *by_index = last ? ">" : "<", *by_value = is_max ? ">" : "<";
  out(o, "(%s < 0 || ", bj);
  if (is_float)
    out(o, "(isnan(%s) != isnan(%s) ? isnan(%s) : (isnan(%s) || %s == %s) ? ", v, b, v, v, v, b);
  else
    out(o, "(%s == %s ? ", v, b);
  out(o, "%s %s %s : %s %s %s))", j, by_index, bj, v, by_value, b);
}

/* A block per element of Y (grid-stride over them): thread t scans the
 * reduced positions t, t + BLOCK, ... keeping its best (value, index),
 * then the BLOCK candidates are combined pairwise in a fixed tree in
 * shared memory. `better` decides by value (a NaN beats every number, for
 * ArgMax and ArgMin alike: numpy's and PyTorch's first NaN) and, for equal
 * values (or two NaNs), by index: the smaller, or the larger with
 * select_last_index; so the result is the CPU kernel's whatever the order
 * of the combinations, and the same on every run. Bytes moved: X read
 * once, 8 bytes written per output; no thread walks a whole long row. */
static gcc_status arg_kernel(emitter *e, int gi, int ni, int is_max) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_value *x = &g->values[nd->inputs[0]];
  int64_t axis = nd->av[ARG_AXIS].i;
  if (axis < 0)
    axis += x->shape.ndim;
  int64_t outer = 1, inner = 1, n = x->shape.dims[axis];
  for (int i = 0; i < axis; i++)
    outer *= x->shape.dims[i];
  for (int i = (int)axis + 1; i < x->shape.ndim; i++)
    inner *= x->shape.dims[i];
  int64_t ny = outer * inner;
  int last = (int)nd->av[ARG_SELECT_LAST_INDEX].i;
  int is_float = x->dtype == GCC_DT_FLOAT32;
  const char *vt = is_float ? "float" : "long long";
  gcc_kernel_info *k;
  sig s;
  GCC_TRY(begin(e, gi, ni, &k, &s));
  out(&e->src,
      "  __shared__ %s sv[%d];\n"
      "  __shared__ long long sj[%d];\n"
      "  const int t = threadIdx.x;\n"
      "  for (long long o = blockIdx.x; o < %" PRId64 "LL; o += gridDim.x) {\n"
      "    const long long base = (o / %" PRId64 "LL) * %" PRId64 "LL + o %% %" PRId64 "LL;\n"
      "    %s bv = 0;\n"
      "    long long bj = -1;\n"
      "    for (long long j = t; j < %" PRId64 "LL; j += %d) {\n"
      "      const %s v = (%s)in0[base + j * %" PRId64 "LL];\n",
      vt, BLOCK, BLOCK, ny, inner, n * inner, inner, vt, n, BLOCK, vt, vt, inner);
  out(&e->src, "      if ");
  better(&e->src, is_float, is_max, last, "v", "bv", "j", "bj");
  out(&e->src,
      " { bv = v; bj = j; }\n"
      "    }\n"
      "    __syncthreads();\n"
      "    sv[t] = bv;\n"
      "    sj[t] = bj;\n"
      "    __syncthreads();\n"
      "    for (int h = %d; h > 0; h >>= 1) {\n"
      "      if (t < h && sj[t + h] >= 0) {\n"
      "        const %s v = sv[t + h];\n"
      "        const long long j = sj[t + h];\n"
      "        if ",
      BLOCK / 2, vt);
  better(&e->src, is_float, is_max, last, "v", "sv[t]", "j", "sj[t]");
  out(&e->src, " { sv[t] = v; sj[t] = j; }\n"
               "      }\n"
               "      __syncthreads();\n"
               "    }\n"
               "    if (t == 0) out0[o] = sj[0];\n"
               "  }\n}\n");
  set_grid(e, k, ny * BLOCK);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

gcc_status gcc_emit_arg_max_kernel(emitter *e, int gi, int ni) {
  return arg_kernel(e, gi, ni, 1);
}

gcc_status gcc_emit_arg_min_kernel(emitter *e, int gi, int ni) {
  return arg_kernel(e, gi, ni, 0);
}

/* ---- ReduceMin ------------------------------------------------------------ */

typedef struct rmin_geom {
  int red[GCC_MAX_DIMS];
  int64_t xst[GCC_MAX_DIMS]; /* X's row-major strides */
  int64_t n_red;             /* elements per group */
} rmin_geom;

static gcc_status rmin_geom_of(emitter *e, int ni, const gcc_shape *x, rmin_geom *q) {
  gcc_shape y;
  GCC_TRY(gcc_reduce_min_resolve(&e->g->nodes[ni], e->g->source, x, q->red, &y, e->d));
  int64_t acc = 1;
  q->n_red = 1;
  for (int k = x->ndim - 1; k >= 0; k--) {
    q->xst[k] = acc;
    acc *= x->dims[k];
    if (q->red[k])
      q->n_red *= x->dims[k];
  }
  return GCC_OK;
}

/* "for (r = t; r < n; r += BLOCK) { long long rr = r, p = base; p += ..." over
 * this thread's share of the group, in X's row-major order (r = 0 first). */
static void group_loop(emitter *e, const gcc_shape *x, const rmin_geom *q, const char *ind) {
  out(&e->src,
      "%sfor (long long r = t; r < %" PRId64 "LL; r += %d) {\n"
      "%s  long long rr = r, p = base;\n",
      ind, q->n_red, BLOCK, ind);
  for (int k = x->ndim - 1; k >= 0; k--)
    if (q->red[k])
      out(&e->src, "%s  p += (rr %% %" PRId64 "LL) * %" PRId64 "LL; rr /= %" PRId64 "LL;\n", ind,
          x->dims[k], q->xst[k], x->dims[k]);
}

/* "base": the offset in X of output group `o`'s first element (the kept
 * coordinates of o, Y's row-major index). */
static void group_base(emitter *e, const gcc_shape *x, const rmin_geom *q) {
  out(&e->src, "    long long o = o0, base = 0;\n");
  for (int c = x->ndim - 1; c >= 0; c--)
    if (!q->red[c])
      out(&e->src, "    base += (o %% %" PRId64 "LL) * %" PRId64 "LL; o /= %" PRId64 "LL;\n",
          x->dims[c], q->xst[c], x->dims[c]);
}

/* A block per element of Y (grid-stride over Y): each thread takes the
 * minimum of every BLOCK-th element of the group, then a tree in shared
 * memory combines them. Every candidate carries its position r in the group
 * and a tie (equal values, -0 and +0 included) or a second NaN goes to the
 * smaller r, so the result is the CPU kernel's (the first minimum in
 * row-major order, the first NaN sticking), bit for bit and on every run.
 * Bytes moved: X read once, Y written once. */
gcc_status gcc_emit_reduce_min_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_shape *x = &g->values[nd->inputs[0]].shape;
  rmin_geom q;
  GCC_TRY(rmin_geom_of(e, ni, x, &q));
  int64_t ny = gcc_shape_numel(&g->values[nd->outputs[0]].shape, NULL);
  gcc_kernel_info *k;
  sig s;
  GCC_TRY(begin(e, gi, ni, &k, &s));
  /* (v, j) replaces (m, mj): m is no candidate yet, or a NaN and v a NaN
   * earlier in the group, or m a number and v a NaN, a smaller number or
   * an equal one earlier in the group */
#define RMIN_BETTER(v, j, m, mj)                                                                   \
  "(" mj " < 0 || (isnan(" m ") ? (isnan(" v ") && " j " < " mj ") : (isnan(" v ") || " v " < " m  \
  " || (" v " == " m " && " j " < " mj "))))"
  out(&e->src,
      "  __shared__ float sv[%d];\n"
      "  __shared__ long long sj[%d];\n"
      "  const int t = threadIdx.x;\n"
      "  for (long long o0 = blockIdx.x; o0 < %" PRId64 "LL; o0 += gridDim.x) {\n",
      BLOCK, BLOCK, ny);
  group_base(e, x, &q);
  out(&e->src, "    float m = __int_as_float(0x7f800000);\n"
               "    long long mj = -1;\n");
  group_loop(e, x, &q, "    ");
  out(&e->src,
      "      const float v = in0[p];\n"
      "      if " RMIN_BETTER("v", "r", "m",
                              "mj") " { m = v; mj = r; }\n"
                                    "    }\n"
                                    "    __syncthreads();\n"
                                    "    sv[t] = m;\n"
                                    "    sj[t] = mj;\n"
                                    "    __syncthreads();\n"
                                    "    for (int h = %d; h > 0; h >>= 1) {\n"
                                    "      if (t < h && sj[t + h] >= 0) {\n"
                                    "        const float v = sv[t + h];\n"
                                    "        const long long j = sj[t + h];\n"
                                    "        if " RMIN_BETTER(
                                        "v", "j", "sv[t]",
                                        "sj[t]") " { sv[t] = v; sj[t] = j; }\n"
                                                 "      }\n"
                                                 "      __syncthreads();\n"
                                                 "    }\n"
                                                 "    if (t == 0) out0[o0] = sj[0] >= 0 ? sv[0] : "
                                                 "__int_as_float(0x7f800000);\n"
                                                 "  }\n}\n",
      BLOCK / 2);
#undef RMIN_BETTER
  set_grid(e, k, ny * BLOCK);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* A block per group of X (grid-stride over Y): the block counts the group's
 * elements equal to its minimum Y (an integer sum in shared memory: exact
 * in any order), then writes the group's dX: X == Y ? dY / count : 0 (the
 * CPU kernel's float32 division). Bytes moved: X read twice, dX written
 * once, dY and Y read once per group; the ties are counted once per group,
 * not once per element. */
gcc_status gcc_emit_reduce_min_grad_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_shape *x = &g->values[nd->inputs[1]].shape;
  rmin_geom q;
  GCC_TRY(rmin_geom_of(e, ni, x, &q));
  int64_t ny = gcc_shape_numel(&g->values[nd->inputs[2]].shape, NULL);
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[0], "const float*", "in0");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[1], "const float*", "in1");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[2], "const float*", "in2");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], "float*", "out0");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  out(&e->src,
      "  __shared__ long long sc[%d];\n"
      "  const int t = threadIdx.x;\n"
      "  for (long long o0 = blockIdx.x; o0 < %" PRId64 "LL; o0 += gridDim.x) {\n",
      BLOCK, ny);
  group_base(e, x, &q);
  out(&e->src, "    const float y = in2[o0];\n"
               "    long long c = 0;\n");
  group_loop(e, x, &q, "    ");
  out(&e->src,
      "      c += in1[p] == y;\n"
      "    }\n"
      "    __syncthreads();\n"
      "    sc[t] = c;\n"
      "    __syncthreads();\n"
      "    for (int h = %d; h > 0; h >>= 1) {\n"
      "      if (t < h) sc[t] += sc[t + h];\n"
      "      __syncthreads();\n"
      "    }\n"
      "    const float d = sc[0] > 0 ? in0[o0] / (float)sc[0] : 0.0f;\n",
      BLOCK / 2);
  group_loop(e, x, &q, "    ");
  out(&e->src, "      out0[p] = in1[p] == y ? d : 0.0f;\n"
               "    }\n"
               "  }\n}\n");
  set_grid(e, k, ny * BLOCK);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}
