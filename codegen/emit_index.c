/*
 * emit_index.c - CUDA C for Gather (ONNX Gather-13, nn.Embedding's lookup)
 * and GatherGrad, its deterministic scatter-add. See emit.h for the
 * conventions of the generated source.
 *
 * Both view data as [outer, A, inner] (A the gathered axis) and Y / dY as
 * [outer, n, inner] (n indices).
 */
#include "codegen/emit_internal.h"

static const char *elem_type(gcc_dtype t) {
  switch (t) {
  case GCC_DT_INT64: return "long long";
  case GCC_DT_INT32: return "int";
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
