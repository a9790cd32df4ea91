/*
 * emit_dropout.c - CUDA C for Dropout in training and DropoutGrad.
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"
#include "graph/philox.h"

/* ---- Dropout ------------------------------------------------------------- */

int gcc_fits_dropout_identity(const gcc_graph *g, int node) {
  return !g->nodes[node].av[DROPOUT_TRAINING].i;
}

/* Y = X * (kept ? scale : 0): one thread per block of four elements, the
 * Philox-4x32-10 of graph/philox.h (its source put once into the
 * translation unit, before the first kernel that calls it), the optimizer
 * step an argument (GCC_KARG_STEP). The same operations as the CPU's
 * dropout_apply, so the same bits (a 16-bit X widened, the product rounded
 * to Y's 16 bits, as the CPU plan's shadows do). */
static gcc_status dropout_kernel(emitter *e, int gi, int ni, float ratio, int64_t key) {
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  if (!e->philox) {
    out(&e->src, "/* Philox-4x32-10 and Dropout's blocks (graph/philox.h) */\n%s\n\n",
        GCC_PHILOX_CUDA_SOURCE);
    e->philox = 1;
  }
  int64_t n = gcc_shape_numel(&g->values[nd->outputs[0]].shape, NULL), nq = (n + 3) / 4;
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  gcc_dtype tx = vdt(g, nd->inputs[0]), ty = vdt(g, nd->outputs[0]);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[0], in_type(tx), "in0");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], out_type(ty), "out0");
  param(e, &s, GCC_KARG_STEP, -1, "long long", "step");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  char ls[32];
  unsigned long long thr = (unsigned long long)gcc_dropout_threshold(ratio);
  out(&e->src,
      "  /* inverted dropout, ratio %.9g: element i is kept when word i %% 4 of its Philox block "
      "is >= %llu */\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < %" PRId64
      "LL; q += stride) {\n"
      "    unsigned int r[4];\n"
      "    gcc_dropout_block(%lluull, q, step, r);\n"
      "    for (int j = 0; j < 4; j++) {\n"
      "      const long long i = q * 4 + j;\n"
      "      if (i < %" PRId64
      "LL) out0[i] = %s%sin0[i]%s * ((unsigned long long)r[j] >= %lluull ? "
      "%s : 0.0f)%s;\n"
      "    }\n  }\n}\n",
      (double)ratio, thr, nq, (unsigned long long)key, n, st_open(ty), ld_open(tx), close16(tx),
      thr, float_lit(ls, sizeof ls, gcc_dropout_scale(ratio)), close16(ty));
  set_grid(e, k, nq);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

gcc_status gcc_emit_dropout_kernel(emitter *e, int gi, int ni) {
  const gcc_node *nd = &e->g->nodes[ni];
  return dropout_kernel(e, gi, ni, nd->av[DROPOUT_RATIO].f, nd->av[DROPOUT_KEY].i);
}

gcc_status gcc_emit_dropout_grad_kernel(emitter *e, int gi, int ni) {
  const gcc_node *nd = &e->g->nodes[ni];
  return dropout_kernel(e, gi, ni, nd->av[DROPOUT_GRAD_RATIO].f, nd->av[DROPOUT_GRAD_KEY].i);
}
