/* gemm_map.c - row-major GEMM groups onto column-major cuBLASLt calls (see gemm_map.h). */
#include "codegen/gemm_map.h"

#include <stdint.h>

#include "graph/ops.h"

unsigned gcc_lt_alignment(const void *p) {
  uintptr_t v = (uintptr_t)p;
  unsigned a = 256;
  while (a > 1 && v % a != 0)
    a /= 2;
  return a;
}

/* the group's node lowered as `kind` with epilogue role `role`, or -1 */
static int member(const gcc_graph *g, const gcc_group *gr, gcc_lowering_kind kind,
                  gcc_epilogue_role role) {
  for (int i = 0; i < gr->n_nodes; i++) {
    const gcc_lowering *lw = gcc_lowering_of(g->nodes[gr->nodes[i]].op);
    if (lw->kind == kind && lw->epilogue == role)
      return gr->nodes[i];
  }
  return -1;
}

static int is_matrix(const gcc_graph *g, int v) {
  return v >= 0 && gcc_dtype_is_float(g->values[v].dtype) && g->values[v].shape.ndim == 2;
}

static int64_t round128(int64_t x) {
  return (x + 127) / 128 * 128;
}

gcc_status gcc_gemm_map(const gcc_graph *g, int group, gcc_colmajor_gemm *o, gcc_diag *d) {
  if (group < 0 || group >= g->n_groups || g->groups[group].kind != GCC_GROUP_GEMM)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: group %d is not a GEMM group", g->source,
                        group);
  const gcc_group *gr = &g->groups[group];
  int gn = member(g, gr, GCC_LOWER_GEMM, GCC_EPIROLE_NONE);
  if (gn < 0)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: GEMM group '%s' has no Gemm or MatMul node",
                        g->source, gr->name);
  const gcc_node *n = &g->nodes[gn];
  char desc[600];
  gcc_node_desc(g, gn, desc, sizeof desc);
  int gemm = gcc_lowering_of(n->op)->gemm_attrs;
  int ta = gemm ? (int)n->av[GEMM_TRANS_A].i : 0, tb = gemm ? (int)n->av[GEMM_TRANS_B].i : 0;
  int A = n->inputs[0], B = n->inputs[1];
  int C = gemm && n->n_inputs > 2 ? n->inputs[2] : -1;
  int Y = n->outputs[0];
  if (!is_matrix(g, A) || !is_matrix(g, B) || !is_matrix(g, Y) ||
      g->values[B].dtype != g->values[A].dtype || g->values[Y].dtype != g->values[A].dtype)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: cuBLASLt runs 2-D GEMMs of one float dtype only (group '%s')",
                        g->source, desc, gr->name);
  const int64_t *ad = g->values[A].shape.dims, *bd = g->values[B].shape.dims;
  int64_t M = g->values[Y].shape.dims[0], N = g->values[Y].shape.dims[1];
  int64_t K = ta ? ad[0] : ad[1];

  *o = (gcc_colmajor_gemm){0};
  o->group = group;
  o->trans_a = tb;
  o->trans_b = ta;
  o->m = N;
  o->n = M;
  o->k = K;
  o->a_value = B;
  o->lda = bd[1]; /* the stored row length of B */
  o->b_value = A;
  o->ldb = ad[1];
  o->ldd = N;
  o->d_value = Y;
  o->c_value = -1;
  o->alpha = gemm ? n->av[GEMM_ALPHA].f : 1.0f;
  o->beta = 0.0f;
  o->bias_value = -1;
  o->aux_group = -1;
  o->dtype = g->values[A].dtype;
  o->tf32 = g->precision == GCC_PRECISION_TF32 && o->dtype == GCC_DT_FLOAT32;

  int relu = member(g, gr, GCC_LOWER_POINTWISE, GCC_EPIROLE_RELU);
  int rgrad = member(g, gr, GCC_LOWER_POINTWISE, GCC_EPIROLE_RELU_GRAD);
  int rsum = member(g, gr, GCC_LOWER_REDUCTION, GCC_EPIROLE_BIAS_GRAD);
  switch (gr->epilogue) {
  case GCC_EPI_DEFAULT:
  case GCC_EPI_BIAS:
  case GCC_EPI_RELU_BIAS:
  case GCC_EPI_RELU_AUX_BIAS:
  case GCC_EPI_DRELU:
  case GCC_EPI_DRELU_BGRAD: o->epilogue = (gcc_epilogue)gr->epilogue; break;
  case GCC_EPI_BGRADA: o->epilogue = GCC_EPI_BGRADB; break; /* the operand swap */
  default:
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: group '%s': epilogue %s has no cuBLASLt mapping", g->source, gr->name,
                        gcc_epilogue_name(gr->epilogue));
  }

  if (C >= 0) {
    const gcc_shape *cs = &g->values[C].shape;
    int64_t cn = gcc_shape_numel(cs, NULL);
    int row = cn == N && (cs->ndim == 1 || (cs->ndim == 2 && cs->dims[0] == 1));
    int full = cs->ndim == 2 && cs->dims[0] == M && cs->dims[1] == N;
    if (o->epilogue == GCC_EPI_BIAS || o->epilogue == GCC_EPI_RELU_BIAS ||
        o->epilogue == GCC_EPI_RELU_AUX_BIAS) {
      if (!row || n->av[GEMM_BETA].f != 1.0f)
        return gcc_diag_set(d, GCC_ERR_INTERNAL,
                            "%s: %s: a bias epilogue needs a row-vector C and beta = 1", g->source,
                            desc);
      if (g->values[C].dtype != o->dtype)
        return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                            "%s: %s: a %s bias with %s D: cuBLASLt's bias vector has D's type "
                            "(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE; other types for FP8 and IMMA "
                            "kernels only) (group '%s')",
                            g->source, desc, gcc_dtype_name(g->values[C].dtype),
                            gcc_dtype_name(o->dtype), gr->name);
      o->bias_value = C;
    } else if (full && g->values[C].dtype == o->dtype) {
      o->c_value = C;
      o->beta = n->av[GEMM_BETA].f;
    } else {
      char s1[64];
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: %s: C of shape %s is neither [%lld, %lld] nor a row vector with "
                          "beta = 1, which cuBLASLt cannot broadcast (group '%s')",
                          g->source, desc, gcc_shape_str(cs, s1, sizeof s1), (long long)M,
                          (long long)N, gr->name);
    }
  }
  if (o->epilogue == GCC_EPI_RELU_BIAS || o->epilogue == GCC_EPI_RELU_AUX_BIAS) {
    if (relu < 0)
      return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: group '%s' has a ReLU epilogue but no Relu",
                          g->source, gr->name);
    o->d_value = g->nodes[relu].outputs[0];
  }
  if (o->epilogue == GCC_EPI_RELU_AUX_BIAS) {
    o->aux_group = group;
    o->aux_ld = round128(o->m);
    o->aux_bytes = o->aux_ld / 8 * o->n;
  }
  if (o->epilogue == GCC_EPI_DRELU || o->epilogue == GCC_EPI_DRELU_BGRAD) {
    if (rgrad < 0)
      return gcc_diag_set(d, GCC_ERR_INTERNAL,
                          "%s: group '%s' has a DRELU epilogue but no ReluGrad", g->source,
                          gr->name);
    const gcc_node *r = &g->nodes[rgrad];
    o->d_value = r->outputs[0];
    int y = r->inputs[1], p = g->values[y].producer;
    int fg = p >= 0 ? g->nodes[p].group : -1;
    gcc_colmajor_gemm f;
    int ok = fg >= 0 && gcc_lowering_of(g->nodes[p].op)->epilogue == GCC_EPIROLE_RELU &&
             g->groups[fg].kind == GCC_GROUP_GEMM &&
             g->groups[fg].epilogue == GCC_EPI_RELU_AUX_BIAS &&
             gcc_gemm_map(g, fg, &f, NULL) == GCC_OK && f.m == o->m && f.n == o->n;
    if (!ok)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: group '%s': its ReLU gradient reads '%s', which is not the output "
                          "of a GEMM with the RELU_AUX_BIAS epilogue of the same shape, so "
                          "cuBLASLt has no ReLU bit-mask to read",
                          g->source, gr->name, g->values[y].name);
    o->aux_group = fg;
    o->aux_ld = f.aux_ld;
    o->aux_bytes = f.aux_bytes;
  }
  if (o->epilogue == GCC_EPI_DRELU_BGRAD || o->epilogue == GCC_EPI_BGRADB) {
    if (rsum < 0)
      return gcc_diag_set(d, GCC_ERR_INTERNAL,
                          "%s: group '%s' has a BGRAD epilogue but no ReduceSumTo", g->source,
                          gr->name);
    o->bias_value = g->nodes[rsum].outputs[0];
    if (g->values[o->bias_value].dtype != o->dtype)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: group '%s': a %s bias gradient with %s D: cuBLASLt writes it in "
                          "D's type (CUBLASLT_MATMUL_DESC_BIAS_POINTER)",
                          g->source, gr->name, gcc_dtype_name(g->values[o->bias_value].dtype),
                          gcc_dtype_name(o->dtype));
    int64_t want = o->epilogue == GCC_EPI_DRELU_BGRAD ? o->m : o->n;
    if (gcc_shape_numel(&g->values[o->bias_value].shape, NULL) != want)
      return gcc_diag_set(d, GCC_ERR_INTERNAL,
                          "%s: group '%s': bias gradient '%s' is not %lld long", g->source,
                          gr->name, g->values[o->bias_value].name, (long long)want);
  }
  return GCC_OK;
}
