/*
 * emit_internal.h - what the emitter files of codegen share: the string
 * builder, the emitter and its kernel bookkeeping, 16-bit storage helpers
 * and the single-node kernel frame. Internal to codegen (emit*.c).
 */
#ifndef GCC_CODEGEN_EMIT_INTERNAL_H
#define GCC_CODEGEN_EMIT_INTERNAL_H

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit.h"
#include "codegen/emit_kernels.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "passes/memplan.h"

#define BLOCK 256

/* ---- a string builder ------------------------------------------------- */

typedef struct sb {
  char *buf;
  size_t len, cap;
  int oom;
} sb;

__attribute__((format(printf, 2, 3))) static inline void out(sb *s, const char *fmt, ...) {
  if (s->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? s->cap - s->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      s->oom = 1;
      return;
    }
    if (s->buf && s->len + (size_t)n < s->cap) {
      s->len += (size_t)n;
      return;
    }
    size_t nc = s->cap ? s->cap * 2 : 4096;
    while (nc < s->len + (size_t)n + 1)
      nc *= 2;
    char *nb = realloc(s->buf, nc);
    if (!nb) {
      s->oom = 1;
      return;
    }
    s->buf = nb;
    s->cap = nc;
  }
}

/* ---- kernel bookkeeping ----------------------------------------------- */

typedef struct gcc_emitter {
  const gcc_graph *g;
  int sm_count;
  sb src;
  gcc_kernel_set *ks;
  gcc_diag *d;
  int philox; /* the Philox source is in the translation unit */
} emitter;

static inline const char *keep_str(emitter *e, const char *s) {
  char **ns = realloc(e->ks->strings, (size_t)(e->ks->n_strings + 1) * sizeof *ns);
  if (!ns)
    return NULL;
  e->ks->strings = ns;
  char *c = strdup(s);
  if (!c)
    return NULL;
  ns[e->ks->n_strings++] = c;
  return c;
}

static inline gcc_kernel_info *new_kernel(emitter *e, int group) {
  gcc_kernel_info *nk = realloc(e->ks->kernels, (size_t)(e->ks->n_kernels + 1) * sizeof *nk);
  if (!nk)
    return NULL;
  e->ks->kernels = nk;
  gcc_kernel_info *k = &nk[e->ks->n_kernels++];
  memset(k, 0, sizeof *k);
  k->name = strdup(e->g->groups[group].name);
  k->group = group;
  k->block_dim = BLOCK;
  return k->name ? k : NULL;
}

static inline int add_arg(emitter *e, gcc_kernel_info *k, gcc_karg_kind kind, int value,
                          const char *name) {
  gcc_kernel_arg *na = realloc(k->args, (size_t)(k->n_args + 1) * sizeof *na);
  if (!na)
    return 0;
  k->args = na;
  na[k->n_args].kind = kind;
  na[k->n_args].value = value;
  na[k->n_args].name = keep_str(e, name);
  if (!na[k->n_args].name)
    return 0;
  k->n_args++;
  return 1;
}

static inline void set_grid(emitter *e, gcc_kernel_info *k, int64_t work) {
  int64_t blocks = (work + BLOCK - 1) / BLOCK,
          cap = 32 * (int64_t)(e->sm_count > 0 ? e->sm_count : 1);
  if (blocks > cap)
    blocks = cap;
  if (blocks > 65535)
    blocks = 65535;
  k->work_items = work;
  k->grid_dim = (int)(blocks > 0 ? blocks : 1);
}

static inline void comment_nodes(emitter *e, const gcc_group *gr) {
  out(&e->src, "  /* fuses:");
  for (int i = 0; i < gr->n_nodes; i++) {
    const gcc_node *n = &e->g->nodes[gr->nodes[i]];
    out(&e->src, "%s %s (%s)", i ? "," : "", n->name, gcc_op_name(n->op));
  }
  out(&e->src, " */\n");
}

/* Host-emulation wrapper: unpacks cudaLaunchKernel-style args (args[i]
 * points at argument i). */
static inline void emit_wrapper(emitter *e, const gcc_kernel_info *k, const char *const *types) {
  out(&e->src,
      "#ifdef GCC_HOST_EMULATION\nextern \"C\" void %s_launch(unsigned grid, unsigned block, void "
      "**args) {\n  GCC_EMU_LAUNCH(%s, grid, block",
      k->name, k->name);
  for (int i = 0; i < k->n_args; i++)
    out(&e->src, ", *(%s *)args[%d]", types[i], i);
  out(&e->src, ");\n}\n#endif\n\n");
}

/* One kernel parameter: declared in the signature being printed, recorded
 * in the kernel info, and its type kept for the host-emulation wrapper. */
typedef struct sig {
  gcc_kernel_info *k;
  const char *types[72];
  int n, ok;
} sig;

static inline void param(emitter *e, sig *s, gcc_karg_kind kind, int value, const char *type,
                         const char *name) {
  int ptr = strchr(type, '*') != NULL;
  out(&e->src, "%s%s%s%s", s->n ? ", " : "", type, ptr ? " __restrict__ " : " ", name);
  if (s->n < 72)
    s->types[s->n++] = type;
  else
    s->ok = 0;
  s->ok &= add_arg(e, s->k, kind, value, name);
}

static inline const char *float_lit(char *buf, size_t cap, float f) {
  snprintf(buf, cap, "%.9ef", (double)f);
  return buf;
}

/* ---- 16-bit storage ---------------------------------------------------- */

/* Values of float16 / bfloat16 dtype (the autocast pass's) are stored as
 * cuda_fp16.h's __half / cuda_bf16.h's __nv_bfloat16; generated code
 * computes in float: every load widens (exact), every store rounds to
 * nearest even (__float2half_rn / __float2bfloat16_rn), and so does every
 * 16-bit intermediate of a fused chain, so a fused kernel stores what the
 * nodes run one by one would (the CPU backend's emulation, runtime/plan.c).
 * Float32 code is printed exactly as before. */
static inline int is16(gcc_dtype t) {
  return t == GCC_DT_FLOAT16 || t == GCC_DT_BFLOAT16;
}

static inline gcc_dtype vdt(const gcc_graph *g, int v) {
  return g->values[v].dtype;
}

/* The pointer types of a kernel's operands: the 16-bit floats as above, the
 * integers and bool (one unsigned char, 0 or 1) as themselves (the copies
 * of Concat, Transpose, Slice, Expand and Gather move them unchanged),
 * float32 else. */
static inline const char *in_type(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16  ? "const __nv_bfloat16*"
         : t == GCC_DT_FLOAT16 ? "const __half*"
         : t == GCC_DT_INT64   ? "const long long*"
         : t == GCC_DT_INT32   ? "const int*"
         : t == GCC_DT_BOOL    ? "const unsigned char*"
                               : "const float*";
}

static inline const char *out_type(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16  ? "__nv_bfloat16*"
         : t == GCC_DT_FLOAT16 ? "__half*"
         : t == GCC_DT_INT64   ? "long long*"
         : t == GCC_DT_INT32   ? "int*"
         : t == GCC_DT_BOOL    ? "unsigned char*"
                               : "float*";
}

/* "__bfloat162float(" ... ")" around a load; "" for float32 */
static inline const char *ld_open(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16 ? "__bfloat162float(" : t == GCC_DT_FLOAT16 ? "__half2float(" : "";
}

/* "__float2bfloat16_rn(" ... ")" around a stored float; "" for float32 */
static inline const char *st_open(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16  ? "__float2bfloat16_rn("
         : t == GCC_DT_FLOAT16 ? "__float2half_rn("
                               : "";
}

static inline const char *close16(gcc_dtype t) {
  return is16(t) ? ")" : "";
}

/* A kernel generator that reads and writes float32 (and integer labels)
 * only: GCC_ERR_UNSUPPORTED naming the group and value when a node of
 * group `gi` touches a 16-bit value (the autocast pass keeps those ops in
 * float32, so this is a bug guard, not a path users reach). */
static inline gcc_status need_f32(emitter *e, int gi) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  for (int i = 0; i < gr->n_nodes; i++) {
    const gcc_node *n = &g->nodes[gr->nodes[i]];
    /* an update's 16-bit output: the copy its kernel stores (optimizer_copy) */
    int n_out = (gcc_op(n->op)->flags & GCC_OPF_OPTIMIZER) ? 0 : n->n_outputs;
    for (int k = 0; k < n->n_inputs + n_out; k++) {
      int v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
      if (v >= 0 && is16(vdt(g, v)))
        return gcc_diag_set(e->d, GCC_ERR_UNSUPPORTED,
                            "%s: codegen: group '%s': node '%s' (%s) reads or writes '%s' of "
                            "dtype %s, and its kernel generator takes float32 only",
                            g->source, gr->name, n->name, gcc_op_name(n->op), g->values[v].name,
                            gcc_dtype_name(vdt(g, v)));
    }
  }
  return GCC_OK;
}

/* ---- single-node kernels: index maps and row reductions --------------------- */

/* "c0 = (i / s0) % d0; ..." for the output coordinates of linear index i. */
static inline void coords(sb *o, const gcc_shape *s, const char *var) {
  int64_t st = 1;
  for (int k = s->ndim - 1; k >= 0; k--) {
    out(o, "    const long long c%d = (%s / %" PRId64 "LL) %% %" PRId64 "LL;\n", k, var, st,
        s->dims[k]);
    st *= s->dims[k];
  }
}

/* The start of a single-node kernel (node `ni`, alone in group `gi`): its
 * signature (every input, then the output) and the grid-stride loop's
 * stride. */
typedef struct single {
  const gcc_graph *g;
  const gcc_node *nd;
  const gcc_shape *Y;
  int64_t ny;
  gcc_kernel_info *k;
  sig s;
} single;

#define kLoop                                                                                      \
  "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < "                    \
  "%" PRId64 "LL; i += stride) {\n"

/* A kernel whose lowering says kernel16 declares a 16-bit operand with its
 * 16-bit type, and its body wraps loads in ld_open / close16 and stores in
 * st_open / close16; the others take float32 only. */
static inline gcc_status single_begin(emitter *e, int gi, int ni, single *c) {
  if (!gcc_lowering_of(e->g->nodes[ni].op)->kernel16)
    GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  c->g = g;
  c->nd = &g->nodes[ni];
  c->Y = &g->values[c->nd->outputs[0]].shape;
  c->ny = gcc_shape_numel(c->Y, NULL);
  c->k = new_kernel(e, gi);
  if (!c->k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  c->s = (sig){.k = c->k, .ok = 1};
  char pname[32];
  out(&e->src, "extern \"C\" __global__ void %s(", c->k->name);
  for (int j = 0; j < c->nd->n_inputs; j++) {
    int v = c->nd->inputs[j];
    snprintf(pname, sizeof pname, "in%d", j);
    param(e, &c->s, GCC_KARG_INPUT, v, in_type(v >= 0 ? vdt(g, v) : GCC_DT_FLOAT32), pname);
  }
  param(e, &c->s, GCC_KARG_OUTPUT, c->nd->outputs[0], out_type(vdt(g, c->nd->outputs[0])), "out0");
  out(&e->src, ") {\n");
  if (!c->s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  out(&e->src, "  const long long stride = (long long)gridDim.x * blockDim.x;\n");
  return GCC_OK;
}

/* The end: a grid for `work` threads, and the launch wrapper. */
static inline gcc_status single_end(emitter *e, single *c, int64_t work) {
  set_grid(e, c->k, work);
  emit_wrapper(e, c->k, c->s.types);
  return GCC_OK;
}

/* each tensor of the flat sections is padded to GCC_ARENA_ALIGN bytes */
static inline int64_t padded(int64_t n) {
  const int64_t per = GCC_ARENA_ALIGN / (int64_t)sizeof(float);
  return (n + per - 1) / per * per;
}

/* The group emitters gcc_codegen_emit dispatches to (emit_pointwise.c,
 * emit_loss.c, emit_optim.c). */
gcc_status gcc_emit_pointwise_group(emitter *e, int gi);
gcc_status gcc_emit_loss_group(emitter *e, int gi);
gcc_status gcc_emit_optimizer_group(emitter *e, int gi);

#endif /* GCC_CODEGEN_EMIT_INTERNAL_H */
