/*
 * emit_pointwise.c - CUDA C for POINTWISE groups (fused elementwise and broadcast chains).
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"

/* ---- operand types ----------------------------------------------------- */

/* Pointwise code computes in float. Beyond the 16-bit floats of
 * emit_internal.h, a bool value (GCC_DT_BOOL) is one unsigned char that
 * loads as 0.0f / 1.0f and stores (value != 0.0f); an int64 / int32 operand
 * (a Cast to float) loads converted to float. */
static int is_byte_or_int(gcc_dtype t) {
  return t == GCC_DT_BOOL || t == GCC_DT_INT64 || t == GCC_DT_INT32;
}
static const char *pw_in_type(gcc_dtype t) {
  return t == GCC_DT_BOOL    ? "const unsigned char*"
         : t == GCC_DT_INT64 ? "const long long*"
         : t == GCC_DT_INT32 ? "const int*"
                             : in_type(t);
}
static const char *pw_out_type(gcc_dtype t) {
  return t == GCC_DT_BOOL ? "unsigned char*" : out_type(t);
}
static const char *pw_ld_open(gcc_dtype t) {
  return is_byte_or_int(t) ? "(float)(" : ld_open(t);
}
static const char *pw_ld_close(gcc_dtype t) {
  return is_byte_or_int(t) ? ")" : close16(t);
}
static const char *pw_st_open(gcc_dtype t) {
  return t == GCC_DT_BOOL ? "(unsigned char)((" : st_open(t);
}
static const char *pw_st_close(gcc_dtype t) {
  return t == GCC_DT_BOOL ? ") != 0.0f)" : close16(t);
}

/* ---- pointwise groups ------------------------------------------------- */

static int member(const gcc_group *gr, int node) {
  for (int i = 0; i < gr->n_nodes; i++)
    if (gr->nodes[i] == node)
      return 1;
  return 0;
}

/* index into an operand of shape `in` broadcast to `s`, at linear index
 * variable `var` of `s` */
static void bcast_index(sb *o, const gcc_shape *in, const gcc_shape *s, const char *var) {
  int64_t nin = gcc_shape_numel(in, NULL), ns = gcc_shape_numel(s, NULL);
  if (nin == ns) {
    out(o, "%s", var);
    return;
  }
  if (nin == 1) {
    out(o, "0LL");
    return;
  }
  int first = 1;
  int64_t in_stride = 1;
  out(o, "(");
  for (int j = s->ndim - 1; j >= 0; j--) {
    int ji = in->ndim - s->ndim + j;
    int64_t din = ji >= 0 ? in->dims[ji] : 1;
    if (din != 1) {
      int64_t st = 1;
      for (int k = j + 1; k < s->ndim; k++)
        st *= s->dims[k];
      out(o, "%s((%s / %" PRId64 "LL) %% %" PRId64 "LL) * %" PRId64 "LL", first ? "" : " + ", var,
          st, s->dims[j], in_stride);
      first = 0;
    }
    in_stride *= din;
  }
  out(o, ")");
}

gcc_status gcc_emit_pointwise_group(emitter *e, int gi) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  if (gr->n_nodes == 1 && gcc_lowering_kind_of(g, gr->nodes[0]) == GCC_LOWER_KERNEL)
    return gcc_lowering_of(g->nodes[gr->nodes[0]].op)->kernel(e, gi, gr->nodes[0]);
  int tail = gr->nodes[gr->n_nodes - 1];
  int red = gcc_lowering_of(g->nodes[tail].op)->kind == GCC_LOWER_REDUCTION ? tail : -1;
  int chain_end = red >= 0 ? (gr->n_nodes >= 2 ? gr->nodes[gr->n_nodes - 2] : -1) : tail;
  /* shape of the pointwise domain */
  const gcc_shape *S = red >= 0 ? &g->values[g->nodes[red].inputs[0]].shape
                                : &g->values[g->nodes[tail].outputs[0]].shape;
  int64_t n = gcc_shape_numel(S, NULL);
  /* external inputs, in first-use order */
  int ext[64], n_ext = 0;
  for (int m = 0; m < gr->n_nodes; m++) {
    const gcc_node *nd = &g->nodes[gr->nodes[m]];
    for (int k = 0; k < nd->n_inputs; k++) {
      int v = nd->inputs[k];
      if (v < 0 || (g->values[v].producer >= 0 && member(gr, g->values[v].producer)))
        continue;
      int seen = 0;
      for (int j = 0; j < n_ext; j++)
        seen |= ext[j] == v;
      if (!seen && n_ext == 64)
        return gcc_diag_set(e->d, GCC_ERR_UNSUPPORTED,
                            "%s: codegen: group '%s' reads more than 64 operands", g->source,
                            gr->name);
      if (!seen)
        ext[n_ext++] = v;
    }
  }
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  char pname[32];
  int outv = g->nodes[tail].outputs[0];
  gcc_dtype odt = vdt(g, outv);
  /* float4: float32 operands only */
  int vec = red < 0 && n % 4 == 0 && odt == GCC_DT_FLOAT32;
  for (int j = 0; j < n_ext && vec; j++)
    vec = gcc_shape_numel(&g->values[ext[j]].shape, NULL) == n && vdt(g, ext[j]) == GCC_DT_FLOAT32;

  /* the element function: the chain at one element */
  if (chain_end >= 0) {
    out(&e->src, "__device__ __forceinline__ float %s_elem(", k->name);
    for (int j = 0; j < n_ext; j++)
      out(&e->src, "%sfloat in%d", j ? ", " : "", j);
    out(&e->src, ") {\n");
    for (int m = 0; m < gr->n_nodes; m++) {
      int ni = gr->nodes[m];
      if (ni == red)
        continue;
      const gcc_node *nd = &g->nodes[ni];
      char a[3][32];
      for (int q = 0; q < nd->n_inputs && q < 3; q++) {
        int v = nd->inputs[q];
        int p = g->values[v].producer;
        if (p >= 0 && member(gr, p)) {
          snprintf(a[q], sizeof a[q], "t%d", p);
        } else {
          for (int j = 0; j < n_ext; j++)
            if (ext[j] == v)
              snprintf(a[q], sizeof a[q], "in%d", j);
        }
      }
      const gcc_lowering *lw = gcc_lowering_of(nd->op);
      const char *expr = lw->expr_of ? lw->expr_of(nd) : lw->expr;
      if (lw->kind != GCC_LOWER_POINTWISE || !expr)
        return gcc_diag_set(
            e->d, GCC_ERR_UNSUPPORTED,
            "%s: codegen: group '%s': node '%s' (%s) has no pointwise code generator", g->source,
            gr->name, nd->name, gcc_op_name(nd->op));
      out(&e->src, "  float t%d = ", ni);
      for (const char *c = expr; *c; c++) /* {k}: operand k; {fk}: float attribute k */
        if (c[0] == '{' && c[1] >= '0' && c[1] <= '2' && c[1] - '0' < nd->n_inputs && c[2] == '}') {
          out(&e->src, "%s", a[c[1] - '0']);
          c += 2;
        } else if (c[0] == '{' && c[1] == 'f' && c[2] >= '0' && c[2] <= '9' && c[3] == '}' &&
                   c[2] - '0' < nd->n_av) {
          char lit[32];
          out(&e->src, "%s", float_lit(lit, sizeof lit, nd->av[c[2] - '0'].f));
          c += 3;
        } else {
          out(&e->src, "%c", *c);
        }
      out(&e->src, "; /* %s */\n", nd->name);
      gcc_dtype t = vdt(g, nd->outputs[0]);
      if (is16(t)) /* a 16-bit value: what storing and loading it gives */
        out(&e->src, "  t%d = %s%st%d%s%s; /* %s */\n", ni, ld_open(t), st_open(t), ni, close16(t),
            close16(t), gcc_dtype_name(t));
    }
    out(&e->src, "  return t%d;\n}\n\n", chain_end);
  }

  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  for (int j = 0; j < n_ext; j++) {
    snprintf(pname, sizeof pname, "in%d", j);
    param(e, &s, GCC_KARG_INPUT, ext[j], pw_in_type(vdt(g, ext[j])), pname);
  }
  param(e, &s, GCC_KARG_OUTPUT, outv, pw_out_type(odt), "out0");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  out(&e->src, "  const long long stride = (long long)gridDim.x * blockDim.x;\n");
  if (red >= 0) {
    /* one thread per output element; the reduced elements in ascending
     * linear order, as the CPU backend, accumulating in float */
    const gcc_shape *Y = &g->values[outv].shape;
    int64_t ny = gcc_shape_numel(Y, NULL), nr = n / (ny > 0 ? ny : 1);
    float scale = g->nodes[red].av[REDUCE_SUM_TO_SCALE].f;
    char lit[32];
    out(&e->src,
        "  for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < %" PRId64
        "LL; o += stride) {\n    float acc = 0.0f;\n    for (long long r = 0; r < %" PRId64
        "LL; r++) {\n      long long i = ",
        ny, nr);
    /* i = base(o) + off(r): kept dims from o, reduced dims from r */
    int first = 1;
    int64_t ostride = 1, rstride = 1;
    for (int j = S->ndim - 1; j >= 0; j--) {
      int jy = Y->ndim - S->ndim + j;
      int64_t dy = jy >= 0 ? Y->dims[jy] : 1, st = 1;
      for (int q = j + 1; q < S->ndim; q++)
        st *= S->dims[q];
      if (dy == S->dims[j] && dy != 1) {
        out(&e->src, "%s((o / %" PRId64 "LL) %% %" PRId64 "LL) * %" PRId64 "LL", first ? "" : " + ",
            ostride, dy, st);
        ostride *= dy;
        first = 0;
      } else if (S->dims[j] != 1) {
        out(&e->src, "%s((r / %" PRId64 "LL) %% %" PRId64 "LL) * %" PRId64 "LL", first ? "" : " + ",
            rstride, S->dims[j], st);
        rstride *= S->dims[j];
        first = 0;
      }
    }
    out(&e->src, "%s;\n", first ? "0LL" : "");
    if (chain_end >= 0) {
      out(&e->src, "      acc += %s_elem(", k->name);
      for (int j = 0; j < n_ext; j++) {
        out(&e->src, "%s%sin%d[", j ? ", " : "", pw_ld_open(vdt(g, ext[j])), j);
        bcast_index(&e->src, &g->values[ext[j]].shape, S, "i");
        out(&e->src, "]%s", pw_ld_close(vdt(g, ext[j])));
      }
      out(&e->src, ");\n");
    } else {
      out(&e->src, "      acc += %sin0[i]%s;\n", pw_ld_open(vdt(g, ext[0])),
          pw_ld_close(vdt(g, ext[0])));
    }
    out(&e->src, "    }\n    out0[o] = %sacc%s%s%s;\n  }\n}\n", pw_st_open(odt),
        scale != 1.0f ? " * " : "", scale != 1.0f ? float_lit(lit, sizeof lit, scale) : "",
        pw_st_close(odt));
    set_grid(e, k, ny);
  } else if (vec) {
    out(&e->src,
        "  /* float4: every operand has the full %" PRId64 " elements */\n"
        "  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < %" PRId64
        "LL; q += stride) {\n",
        n, n / 4);
    for (int j = 0; j < n_ext; j++)
      out(&e->src, "    float4 a%d = reinterpret_cast<const float4*>(in%d)[q];\n", j, j);
    out(&e->src, "    float4 r;\n");
    const char *comp[4] = {"x", "y", "z", "w"};
    for (int c = 0; c < 4; c++) {
      out(&e->src, "    r.%s = %s_elem(", comp[c], k->name);
      for (int j = 0; j < n_ext; j++)
        out(&e->src, "%sa%d.%s", j ? ", " : "", j, comp[c]);
      out(&e->src, ");\n");
    }
    out(&e->src, "    reinterpret_cast<float4*>(out0)[q] = r;\n  }\n}\n");
    set_grid(e, k, n / 4);
  } else {
    out(&e->src,
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < %" PRId64
        "LL; i += stride)\n    out0[i] = %s%s_elem(",
        n, pw_st_open(odt), k->name);
    for (int j = 0; j < n_ext; j++) {
      out(&e->src, "%s%sin%d[", j ? ", " : "", pw_ld_open(vdt(g, ext[j])), j);
      bcast_index(&e->src, &g->values[ext[j]].shape, S, "i");
      out(&e->src, "]%s", pw_ld_close(vdt(g, ext[j])));
    }
    out(&e->src, ")%s;\n}\n", pw_st_close(odt));
    set_grid(e, k, n);
  }
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}
