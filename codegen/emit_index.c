/*
 * emit_index.c - CUDA C for the indexing ops: Gather (ONNX Gather-13,
 * nn.Embedding's lookup) and GatherGrad, its deterministic scatter-add;
 * GatherElements (torch.gather) and GatherElementsGrad; Slice and
 * SliceGrad; Expand. See emit.h for the conventions of the
 * generated source.
 *
 * Gather and GatherGrad view data as [outer, A, inner] (A the gathered axis) and Y / dY as
 * [outer, n, inner] (n indices).
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

typedef struct gather_geom {
  int64_t outer, a, inner, n;
} gather_geom;

static void geom_of(const gcc_shape *data, int64_t axis, int64_t n, gather_geom *g) {
  if (axis < 0)
    axis += data->ndim;
  g->outer = g->inner = 1;
  for (int i = 0; i < axis; i++)
    g->outer *= data->dims[i];
  for (int i = (int)axis + 1; i < data->ndim; i++)
    g->inner *= data->dims[i];
  g->a = data->dims[axis];
  g->n = n;
}

/* The signature: in0 (data or dY, element type `dt`), in1 (the indices),
 * out0, and for Gather the bad-index flag. */
static gcc_status begin(emitter *e, int gi, int ni, gcc_dtype dt, int flag, gcc_kernel_info **kp,
                        sig *s) {
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  *s = (sig){.k = k, .ok = 1};
  char t0[48], t1[48], t2[48];
  snprintf(t0, sizeof t0, "const %s*", elem_type(dt));
  snprintf(t1, sizeof t1, "const %s*", elem_type(vdt(g, nd->inputs[1])));
  snprintf(t2, sizeof t2, "%s*", elem_type(dt));
  const char *k0 = keep_str(e, t0), *k1 = keep_str(e, t1), *k2 = keep_str(e, t2);
  if (!k0 || !k1 || !k2)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, s, GCC_KARG_INPUT, nd->inputs[0], k0, "in0");
  param(e, s, GCC_KARG_INPUT, nd->inputs[1], k1, "in1");
  param(e, s, GCC_KARG_OUTPUT, nd->outputs[0], k2, "out0");
  if (flag)
    param(e, s, GCC_KARG_BAD_LABEL, -1, "int*", "bad_label");
  out(&e->src, ") {\n");
  if (!s->ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  *kp = k;
  return GCC_OK;
}

/* One thread per element of Y: a copy from data's row idx[j]. An index
 * outside [-A, A) writes nothing and lowers the bad-label flag to -1 - j
 * (the first such position wins whatever the thread order; the plan reports
 * it after the step, runtime/plan.c), as the CPU kernel fails. */
gcc_status gcc_emit_gather_kernel(emitter *e, int gi, int ni) {
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_value *x = &g->values[nd->inputs[0]];
  gather_geom q;
  geom_of(&x->shape, nd->av[GATHER_AXIS].i, gcc_shape_numel(&g->values[nd->inputs[1]].shape, NULL),
          &q);
  int64_t ny = q.outer * q.n * q.inner;
  gcc_kernel_info *k;
  sig s;
  GCC_TRY(begin(e, gi, ni, x->dtype, 1, &k, &s));
  out(&e->src,
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n" kLoop
      "    const long long q = i %% %" PRId64 "LL, j = (i / %" PRId64 "LL) %% %" PRId64
      "LL, o = i / %" PRId64 "LL;\n"
      "    long long v = (long long)in1[j];\n"
      "    if (v < 0) v += %" PRId64 "LL;\n"
      "    if (v < 0 || v >= %" PRId64 "LL) {\n"
      "      if (q == 0) atomicMin(bad_label, -1 - (int)(j < 0x7ffffffeLL ? j : 0x7ffffffeLL));\n"
      "      continue;\n"
      "    }\n"
      "    out0[i] = in0[(o * %" PRId64 "LL + v) * %" PRId64 "LL + q];\n"
      "  }\n}\n",
      ny, q.inner, q.inner, q.n, q.inner * q.n, q.a, q.a, q.a, q.inner);
  set_grid(e, k, ny);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* Columns of dX one block accumulates per pass over the indices: CHUNKS
 * registers per thread. */
#define CHUNKS 4

/* A block per row (o, a) of dX (rows grid-stride over the blocks): the
 * block reads the indices in tiles of BLOCK into shared memory and adds,
 * in index order, the dY row of every position j with idx[j] == a to its
 * accumulators (thread t owns columns t, t + BLOCK, ..., up to
 * CHUNKS * BLOCK columns per pass), then stores the row: the float32
 * additions of the CPU kernel in the same order (bit for bit), no atomics.
 * Bytes moved: dY read once, dX written once, the indices read by every
 * row's block (from L2: n * 8 bytes per row and pass), which suits
 * vocabularies of up to some thousands of rows (character-level models);
 * a counting sort of the positions by index would replace the per-row
 * scan for a GPT-2-sized vocabulary. */
gcc_status gcc_emit_gather_grad_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_value *dx = &g->values[nd->outputs[0]];
  gather_geom q;
  geom_of(&dx->shape, nd->av[GATHER_GRAD_AXIS].i,
          gcc_shape_numel(&g->values[nd->inputs[1]].shape, NULL), &q);
  int64_t rows = q.outer * q.a;
  gcc_kernel_info *k;
  sig s;
  GCC_TRY(begin(e, gi, ni, GCC_DT_FLOAT32, 0, &k, &s));
  out(&e->src,
      "  __shared__ long long tile[%d];\n"
      "  for (long long r = blockIdx.x; r < %" PRId64 "LL; r += gridDim.x) {\n"
      "    const long long o = r / %" PRId64 "LL, a = r %% %" PRId64 "LL;\n"
      "    for (long long c0 = 0; c0 < %" PRId64 "LL; c0 += %d) {\n"
      "      float acc[%d];\n"
      "      for (int c = 0; c < %d; c++) acc[c] = 0.0f;\n"
      "      for (long long t0 = 0; t0 < %" PRId64 "LL; t0 += %d) {\n"
      "        const long long j = t0 + threadIdx.x;\n"
      "        long long v = -1;\n"
      "        if (j < %" PRId64 "LL) { v = (long long)in1[j]; if (v < 0) v += %" PRId64 "LL; }\n"
      "        __syncthreads();\n"
      "        tile[threadIdx.x] = v;\n"
      "        __syncthreads();\n"
      "        const int m = %" PRId64 "LL - t0 < %d ? (int)(%" PRId64 "LL - t0) : %d;\n"
      "        for (int t = 0; t < m; t++) {\n"
      "          if (tile[t] != a) continue;\n"
      "          const float* row = in0 + (o * %" PRId64 "LL + t0 + t) * %" PRId64 "LL;\n"
      "          for (int c = 0; c < %d; c++) {\n"
      "            const long long col = c0 + c * %d + threadIdx.x;\n"
      "            if (col < %" PRId64 "LL) acc[c] += row[col];\n"
      "          }\n"
      "        }\n"
      "      }\n"
      "      for (int c = 0; c < %d; c++) {\n"
      "        const long long col = c0 + c * %d + threadIdx.x;\n"
      "        if (col < %" PRId64 "LL) out0[r * %" PRId64 "LL + col] = acc[c];\n"
      "      }\n"
      "    }\n"
      "  }\n}\n",
      BLOCK, rows, q.a, q.a, q.inner, CHUNKS * BLOCK, CHUNKS, CHUNKS, q.n, BLOCK, q.n, q.a, q.n,
      BLOCK, q.n, BLOCK, q.n, q.inner, CHUNKS, BLOCK, q.inner, CHUNKS, BLOCK, q.inner, q.inner);
  set_grid(e, k, rows * BLOCK);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* ---- GatherElements -------------------------------------------------------- */

/* One thread per element of Y (the indices' shape): data's element at Y's
 * coordinates with the axis one replaced by the index. An index outside
 * [-A, A) writes nothing and lowers the bad-label flag to -1 - i, as
 * Gather's. */
gcc_status gcc_emit_gather_elements_kernel(emitter *e, int gi, int ni) {
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_value *x = &g->values[nd->inputs[0]];
  const gcc_shape *q = &g->values[nd->inputs[1]].shape;
  int64_t axis = nd->av[GATHER_ELEMENTS_AXIS].i;
  axis += axis < 0 ? x->shape.ndim : 0;
  int64_t ny = gcc_shape_numel(q, NULL), xst[GCC_MAX_DIMS], acc = 1, a = x->shape.dims[axis];
  for (int k = x->shape.ndim - 1; k >= 0; k--) {
    xst[k] = acc;
    acc *= x->shape.dims[k];
  }
  gcc_kernel_info *k;
  sig s;
  GCC_TRY(begin(e, gi, ni, x->dtype, 1, &k, &s));
  out(&e->src, "  const long long stride = (long long)gridDim.x * blockDim.x;\n" kLoop, ny);
  coords(&e->src, q, "i");
  out(&e->src,
      "    long long v = (long long)in1[i];\n"
      "    if (v < 0) v += %" PRId64 "LL;\n"
      "    if (v < 0 || v >= %" PRId64 "LL) {\n"
      "      atomicMin(bad_label, -1 - (int)(i < 0x7ffffffeLL ? i : 0x7ffffffeLL));\n"
      "      continue;\n"
      "    }\n"
      "    out0[i] = in0[0LL",
      a, a);
  for (int c = 0; c < q->ndim; c++)
    if (c == axis)
      out(&e->src, " + v * %" PRId64 "LL", xst[c]);
    else
      out(&e->src, " + c%d * %" PRId64 "LL", c, xst[c]);
  out(&e->src, "];\n  }\n}\n");
  set_grid(e, k, ny);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* One thread per element of dX: the sum, in increasing position j along
 * the axis, of dY at (dX's coordinates with the axis one j) wherever the
 * index there names dX's axis coordinate; 0 outside the indices' extent.
 * These are the additions the CPU kernel makes into that element, in its
 * row-major order (bit for bit), with no atomics. An index out of range
 * adds nothing (the forward reports it). */
gcc_status gcc_emit_gather_elements_grad_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_shape *X = &g->values[nd->outputs[0]].shape;
  const gcc_shape *q = &g->values[nd->inputs[1]].shape;
  int64_t axis = nd->av[GATHER_ELEMENTS_GRAD_AXIS].i;
  axis += axis < 0 ? X->ndim : 0;
  int64_t nx = gcc_shape_numel(X, NULL), qst[GCC_MAX_DIMS], acc = 1, a = X->dims[axis];
  for (int k = q->ndim - 1; k >= 0; k--) {
    qst[k] = acc;
    acc *= q->dims[k];
  }
  gcc_kernel_info *k;
  sig s;
  GCC_TRY(begin(e, gi, ni, GCC_DT_FLOAT32, 0, &k, &s));
  out(&e->src, "  const long long stride = (long long)gridDim.x * blockDim.x;\n" kLoop, nx);
  coords(&e->src, X, "i");
  out(&e->src, "    float acc = 0.0f;\n    if (true");
  for (int c = 0; c < X->ndim; c++)
    if (c != axis && q->dims[c] < X->dims[c])
      out(&e->src, " && c%d < %" PRId64 "LL", c, q->dims[c]);
  out(&e->src, ") {\n      const long long base = 0LL");
  for (int c = 0; c < X->ndim; c++)
    if (c != axis)
      out(&e->src, " + c%d * %" PRId64 "LL", c, qst[c]);
  out(&e->src,
      ";\n"
      "      for (long long j = 0; j < %" PRId64 "LL; j++) {\n"
      "        const long long p = base + j * %" PRId64 "LL;\n"
      "        long long v = (long long)in1[p];\n"
      "        if (v < 0) v += %" PRId64 "LL;\n"
      "        if (v == c%d) acc += in0[p];\n"
      "      }\n"
      "    }\n"
      "    out0[i] = acc;\n  }\n}\n",
      q->dims[axis], qst[axis], a, (int)axis);
  set_grid(e, k, nx);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* ---- Slice ---------------------------------------------------------------- */

/* The slice of node `ni` over input shape `x` (resolved as the CPU does). */
static gcc_status slice_of(emitter *e, int ni, const gcc_shape *x, int64_t *start, int64_t *step,
                           gcc_shape *y) {
  return gcc_slice_resolve(&e->g->nodes[ni], e->g->source, x, start, step, y, e->d);
}

/* One thread per element of Y: Y[c] = X[start + c * step], any element
 * type (a copy). */
gcc_status gcc_emit_slice_kernel(emitter *e, int gi, int ni) {
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_value *x = &g->values[nd->inputs[0]];
  int64_t start[GCC_MAX_DIMS], step[GCC_MAX_DIMS], xst[GCC_MAX_DIMS], acc = 1, base = 0;
  gcc_shape y;
  GCC_TRY(slice_of(e, ni, &x->shape, start, step, &y));
  for (int q = x->shape.ndim - 1; q >= 0; q--) {
    xst[q] = acc;
    acc *= x->shape.dims[q];
    base += start[q] * xst[q];
  }
  int64_t ny = gcc_shape_numel(&y, NULL);
  gcc_kernel_info *k;
  sig s;
  char t0[48], t1[48];
  snprintf(t0, sizeof t0, "const %s*", elem_type(x->dtype));
  snprintf(t1, sizeof t1, "%s*", elem_type(x->dtype));
  const char *k0 = keep_str(e, t0), *k1 = keep_str(e, t1);
  k = new_kernel(e, gi);
  if (!k || !k0 || !k1)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  s = (sig){.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[0], k0, "in0");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], k1, "out0");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  out(&e->src, "  const long long stride = (long long)gridDim.x * blockDim.x;\n" kLoop, ny);
  coords(&e->src, &y, "i");
  out(&e->src, "    out0[i] = in0[%" PRId64 "LL", base);
  for (int q = 0; q < y.ndim; q++)
    out(&e->src, " + c%d * %" PRId64 "LL", q, step[q] * xst[q]);
  out(&e->src, "];\n  }\n}\n");
  set_grid(e, k, ny);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* One thread per element of dX: dY's element when the coordinate lies on
 * the slice's lattice in every dim, else 0 (no two threads write one
 * element: deterministic). */
gcc_status gcc_emit_slice_grad_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_shape *X = sk.Y;
  int64_t start[GCC_MAX_DIMS], step[GCC_MAX_DIMS], yst[GCC_MAX_DIMS], acc = 1;
  gcc_shape y;
  GCC_TRY(slice_of(e, ni, X, start, step, &y));
  for (int q = y.ndim - 1; q >= 0; q--) {
    yst[q] = acc;
    acc *= y.dims[q];
  }
  out(&e->src, kLoop, sk.ny);
  coords(&e->src, X, "i");
  out(&e->src, "    long long src = 0;\n    bool on = true;\n");
  for (int q = 0; q < X->ndim; q++) {
    if (step[q] == 1 && start[q] == 0 && y.dims[q] == X->dims[q]) {
      out(&e->src, "    src += c%d * %" PRId64 "LL;\n", q, yst[q]);
      continue;
    }
    out(&e->src,
        "    { const long long t = c%d - %" PRId64 "LL, j = t / %" PRId64 "LL;\n"
        "      if (j * %" PRId64 "LL != t || j < 0 || j >= %" PRId64 "LL) on = false;\n"
        "      src += j * %" PRId64 "LL; }\n",
        q, start[q], step[q], step[q], y.dims[q], yst[q]);
  }
  out(&e->src, "    out0[i] = on ? in0[src] : 0.0f;\n  }\n}\n");
  return single_end(e, &sk, sk.ny);
}

/* ---- Expand --------------------------------------------------------------- */

/* One thread per element of Y: X's element at the broadcast coordinate
 * (any element type: a copy). */
gcc_status gcc_emit_expand_kernel(emitter *e, int gi, int ni) {
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  const gcc_value *x = &g->values[nd->inputs[0]];
  const gcc_shape *y = &g->values[nd->outputs[0]].shape;
  int off = y->ndim - x->shape.ndim;
  int64_t xst[GCC_MAX_DIMS], acc = 1, ny = gcc_shape_numel(y, NULL);
  for (int q = x->shape.ndim - 1; q >= 0; q--) {
    xst[q] = acc;
    acc *= x->shape.dims[q];
  }
  char t0[48], t1[48];
  snprintf(t0, sizeof t0, "const %s*", elem_type(x->dtype));
  snprintf(t1, sizeof t1, "%s*", elem_type(x->dtype));
  const char *k0 = keep_str(e, t0), *k1 = keep_str(e, t1);
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k || !k0 || !k1)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[0], k0, "in0");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], k1, "out0");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  out(&e->src, "  const long long stride = (long long)gridDim.x * blockDim.x;\n" kLoop, ny);
  coords(&e->src, y, "i");
  out(&e->src, "    out0[i] = in0[0LL");
  for (int q = off; q < y->ndim; q++)
    if (x->shape.dims[q - off] != 1)
      out(&e->src, " + c%d * %" PRId64 "LL", q, xst[q - off]);
  out(&e->src, "];\n  }\n}\n");
  set_grid(e, k, ny);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}
