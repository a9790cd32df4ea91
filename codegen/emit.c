/*
 * emit.c - CUDA C for fused groups. See emit.h for the conventions.
 *
 * The generated code mirrors the CPU kernels of runtime/cpu/cpu_kernels.c
 * operation for operation (same association order, same float64
 * accumulation in losses), so the host-emulated kernels can be compared
 * with the CPU backend at 1e-6.
 */
#include "codegen/emit.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit_kernels.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "graph/philox.h"
#include "passes/memplan.h"

#define BLOCK 256

/* ---- a string builder ------------------------------------------------- */

typedef struct sb {
  char *buf;
  size_t len, cap;
  int oom;
} sb;

__attribute__((format(printf, 2, 3))) static void out(sb *s, const char *fmt, ...) {
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

static const char *keep_str(emitter *e, const char *s) {
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

static gcc_kernel_info *new_kernel(emitter *e, int group) {
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

static int add_arg(emitter *e, gcc_kernel_info *k, gcc_karg_kind kind, int value,
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

static void set_grid(emitter *e, gcc_kernel_info *k, int64_t work) {
  int64_t blocks = (work + BLOCK - 1) / BLOCK,
          cap = 32 * (int64_t)(e->sm_count > 0 ? e->sm_count : 1);
  if (blocks > cap)
    blocks = cap;
  if (blocks > 65535)
    blocks = 65535;
  k->work_items = work;
  k->grid_dim = (int)(blocks > 0 ? blocks : 1);
}

static void comment_nodes(emitter *e, const gcc_group *gr) {
  out(&e->src, "  /* fuses:");
  for (int i = 0; i < gr->n_nodes; i++) {
    const gcc_node *n = &e->g->nodes[gr->nodes[i]];
    out(&e->src, "%s %s (%s)", i ? "," : "", n->name, gcc_op_name(n->op));
  }
  out(&e->src, " */\n");
}

/* Host-emulation wrapper: unpacks cudaLaunchKernel-style args (args[i]
 * points at argument i). */
static void emit_wrapper(emitter *e, const gcc_kernel_info *k, const char *const *types) {
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

static void param(emitter *e, sig *s, gcc_karg_kind kind, int value, const char *type,
                  const char *name) {
  int ptr = strchr(type, '*') != NULL;
  out(&e->src, "%s%s%s%s", s->n ? ", " : "", type, ptr ? " __restrict__ " : " ", name);
  if (s->n < 72)
    s->types[s->n++] = type;
  else
    s->ok = 0;
  s->ok &= add_arg(e, s->k, kind, value, name);
}

static const char *float_lit(char *buf, size_t cap, float f) {
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
static int is16(gcc_dtype t) {
  return t == GCC_DT_FLOAT16 || t == GCC_DT_BFLOAT16;
}

static gcc_dtype vdt(const gcc_graph *g, int v) {
  return g->values[v].dtype;
}

static const char *in_type(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16  ? "const __nv_bfloat16*"
         : t == GCC_DT_FLOAT16 ? "const __half*"
                               : "const float*";
}

static const char *out_type(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16 ? "__nv_bfloat16*" : t == GCC_DT_FLOAT16 ? "__half*" : "float*";
}

/* "__bfloat162float(" ... ")" around a load; "" for float32 */
static const char *ld_open(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16 ? "__bfloat162float(" : t == GCC_DT_FLOAT16 ? "__half2float(" : "";
}

/* "__float2bfloat16_rn(" ... ")" around a stored float; "" for float32 */
static const char *st_open(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16  ? "__float2bfloat16_rn("
         : t == GCC_DT_FLOAT16 ? "__float2half_rn("
                               : "";
}

static const char *close16(gcc_dtype t) {
  return is16(t) ? ")" : "";
}

/* A kernel generator that reads and writes float32 (and integer labels)
 * only: GCC_ERR_UNSUPPORTED naming the group and value when a node of
 * group `gi` touches a 16-bit value (the autocast pass keeps those ops in
 * float32, so this is a bug guard, not a path users reach). */
static gcc_status need_f32(emitter *e, int gi) {
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

/* ---- single-node kernels: index maps and row reductions --------------------- */

/* "c0 = (i / s0) % d0; ..." for the output coordinates of linear index i. */
static void coords(sb *o, const gcc_shape *s, const char *var) {
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

static const char *const kLoop =
    "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < "
    "%" PRId64 "LL; i += stride) {\n";

/* A kernel whose lowering says kernel16 declares a 16-bit operand with its
 * 16-bit type, and its body wraps loads in ld_open / close16 and stores in
 * st_open / close16; the others take float32 only. */
static gcc_status single_begin(emitter *e, int gi, int ni, single *c) {
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
static gcc_status single_end(emitter *e, single *c, int64_t work) {
  set_grid(e, c->k, work);
  emit_wrapper(e, c->k, c->s.types);
  return GCC_OK;
}

/* Softmax and LogSoftmax: one thread per line along the axis, float64 sums as the CPU */
static gcc_status softmax_kernel(emitter *e, int gi, int ni, int is_log) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_graph *g = sk.g;
  const gcc_node *nd = sk.nd;
  const gcc_shape *Y = sk.Y;
  const int64_t ny = sk.ny;
  int64_t work = ny;
  const char *loop = kLoop;
  (void)g;
  int64_t axis = nd->av[SOFTMAX_AXIS].i, outer = 1, inner = 1;
  if (axis < 0)
    axis += Y->ndim;
  for (int q = 0; q < axis; q++)
    outer *= Y->dims[q];
  for (int q = (int)axis + 1; q < Y->ndim; q++)
    inner *= Y->dims[q];
  int64_t len = Y->dims[axis];
  work = outer * inner;
  out(&e->src, loop, work);
  out(&e->src,
      "    const long long base = (i / %" PRId64 "LL) * %" PRId64 "LL + i %% %" PRId64 "LL;\n"
      "    float mx = in0[base];\n"
      "    for (long long j = 1; j < %" PRId64 "LL; j++) { float v = in0[base + j * %" PRId64
      "LL]; mx = v > mx ? v : mx; }\n"
      "    double se = 0.0;\n"
      "    for (long long j = 0; j < %" PRId64 "LL; j++) se += exp((double)in0[base + j * %" PRId64
      "LL] - mx);\n",
      inner, len * inner, inner, len, inner, len, inner);
  if (!is_log)
    out(&e->src,
        "    for (long long j = 0; j < %" PRId64 "LL; j++) out0[base + j * %" PRId64
        "LL] = (float)(exp((double)in0[base + j * %" PRId64 "LL] - mx) / se);\n",
        len, inner, inner);
  else
    out(&e->src,
        "    const double lse = log(se);\n"
        "    for (long long j = 0; j < %" PRId64 "LL; j++) out0[base + j * %" PRId64
        "LL] = (float)((double)in0[base + j * %" PRId64 "LL] - mx - lse);\n",
        len, inner, inner);
  out(&e->src, "  }\n}\n");
  return single_end(e, &sk, work);
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

gcc_status gcc_emit_log_softmax_grad_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_shape *Y = sk.Y;
  int64_t axis = sk.nd->av[SOFTMAX_AXIS].i, outer = 1, inner = 1;
  if (axis < 0)
    axis += Y->ndim;
  for (int q = 0; q < axis; q++)
    outer *= Y->dims[q];
  for (int q = (int)axis + 1; q < Y->ndim; q++)
    inner *= Y->dims[q];
  int64_t len = Y->dims[axis], work = outer * inner;
  /* in0 = dY, in1 = Y */
  out(&e->src, kLoop, work);
  out(&e->src,
      "    const long long base = (i / %" PRId64 "LL) * %" PRId64 "LL + i %% %" PRId64 "LL;\n"
      "    double sum = 0.0;\n"
      "    for (long long j = 0; j < %" PRId64 "LL; j++) sum += (double)in0[base + j * %" PRId64
      "LL];\n"
      "    for (long long j = 0; j < %" PRId64 "LL; j++) out0[base + j * %" PRId64
      "LL] = (float)((double)in0[base + j * %" PRId64 "LL] - exp((double)in1[base + j * %" PRId64
      "LL]) * sum);\n  }\n}\n",
      inner, len * inner, inner, len, inner, len, inner, inner, inner);
  return single_end(e, &sk, work);
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

/* X [N, C, D1, ...] of BatchNormalization (input 0) or BatchNormGrad
 * (input 1): channels, samples and elements per sample and channel. */
static void bn_kernel_dims(const gcc_graph *g, const gcc_node *nd, int xin, int64_t *n, int64_t *c,
                           int64_t *inner) {
  const gcc_shape *X = &g->values[nd->inputs[xin]].shape;
  *n = X->dims[0];
  *c = X->dims[1];
  *inner = 1;
  for (int q = 2; q < X->ndim; q++)
    *inner *= X->dims[q];
}

/* The batch mean and biased variance of channel ci of `x` (of dtype `t`)
 * into mean, var (float64, the CPU's order of summation: a 16-bit x is
 * widened exactly, so the statistics are the CPU's bit for bit). */
static void bn_stats_src(emitter *e, const char *x, gcc_dtype t, int64_t n, int64_t c,
                         int64_t inner) {
  out(&e->src,
      "    double s = 0.0;\n"
      "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
      "LL; q++) s += %s%s[(b * %" PRId64 "LL + ci) * %" PRId64 "LL + q]%s;\n"
      "    mean = s / %" PRId64 ".0;\n"
      "    double v = 0.0;\n"
      "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
      "LL; q++) { double t = %s%s[(b * %" PRId64 "LL + ci) * %" PRId64
      "LL + q]%s - mean; v += t * t; }\n"
      "    var = v / %" PRId64 ".0;\n",
      n, inner, ld_open(t), x, c, inner, close16(t), n * inner, n, inner, ld_open(t), x, c, inner,
      close16(t), n * inner);
}

gcc_status gcc_emit_batch_norm_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_node *nd = sk.nd;
  int64_t n, c, inner;
  bn_kernel_dims(sk.g, nd, 0, &n, &c, &inner);
  int64_t m = n * inner;
  gcc_dtype tx = vdt(sk.g, nd->inputs[0]), ty = vdt(sk.g, nd->outputs[0]);
  char le[40], lm[40];
  snprintf(le, sizeof le, "%.17g", (double)nd->av[BN_EPSILON].f);
  snprintf(lm, sizeof lm, "%.17g", (double)nd->av[BN_MOMENTUM].f);
  /* in0 = X, in1 = scale, in2 = B, in3 = running_mean, in4 = running_var */
  out(&e->src, kLoop, c);
  out(&e->src, "    const long long ci = i;\n    double mean = in3[ci], var = in4[ci];\n");
  if (nd->av[BN_TRAINING].i) {
    bn_stats_src(e, "in0", tx, n, c, inner);
    /* the running variance takes the unbiased estimate, as PyTorch's */
    char unb[96];
    if (m > 1)
      snprintf(unb, sizeof unb, "var * %" PRId64 ".0 / %" PRId64 ".0", m, m - 1);
    else
      snprintf(unb, sizeof unb, "var");
    out(&e->src,
        "    ((float *)in3)[ci] = (float)((%s) * (double)in3[ci] + (1.0 - (%s)) * mean);\n"
        "    ((float *)in4)[ci] = (float)((%s) * (double)in4[ci] + (1.0 - (%s)) * (%s));\n",
        lm, lm, lm, lm, unb);
  }
  out(&e->src,
      "    const double k = (double)in1[ci] / sqrt(var + (%s)), b0 = (double)in2[ci] - mean * k;\n"
      "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
      "LL; q++) {\n"
      "      const long long at = (b * %" PRId64 "LL + ci) * %" PRId64 "LL + q;\n"
      "      out0[at] = %s(float)((double)%sin0[at]%s * k + b0)%s;\n    }\n  }\n}\n",
      le, n, inner, c, inner, st_open(ty), ld_open(tx), close16(tx), close16(ty));
  return single_end(e, &sk, c);
}

gcc_status gcc_emit_batch_norm_grad_kernel(emitter *e, int gi, int ni) {
  single sk;
  GCC_TRY(single_begin(e, gi, ni, &sk));
  const gcc_node *nd = sk.nd;
  int64_t n, c, inner;
  bn_kernel_dims(sk.g, nd, 1, &n, &c, &inner);
  int64_t m = n * inner, which = nd->av[BN_GRAD_OUTPUT].i;
  gcc_dtype tg = vdt(sk.g, nd->inputs[0]), tx = vdt(sk.g, nd->inputs[1]),
            ty = vdt(sk.g, nd->outputs[0]);
  char le[40];
  snprintf(le, sizeof le, "%.17g", (double)nd->av[BN_GRAD_EPSILON].f);
  /* in0 = dY, in1 = X, in2 = scale */
  out(&e->src, kLoop, c);
  out(&e->src, "    const long long ci = i;\n    double mean, var;\n");
  bn_stats_src(e, "in1", tx, n, c, inner);
  out(&e->src,
      "    const double invstd = 1.0 / sqrt(var + (%s));\n"
      "    double db = 0.0, ds = 0.0;\n"
      "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
      "LL; q++) {\n"
      "      const long long at = (b * %" PRId64 "LL + ci) * %" PRId64 "LL + q;\n"
      "      db += %sin0[at]%s;\n"
      "      ds += (double)%sin0[at]%s * ((double)%sin1[at]%s - mean) * invstd;\n    }\n",
      le, n, inner, c, inner, ld_open(tg), close16(tg), ld_open(tg), close16(tg), ld_open(tx),
      close16(tx));
  if (which == 1)
    out(&e->src, "    out0[ci] = (float)ds;\n");
  else if (which == 2)
    out(&e->src, "    out0[ci] = (float)db;\n");
  else
    out(&e->src,
        "    const double k = (double)in2[ci] * invstd / %" PRId64 ".0;\n"
        "    for (long long b = 0; b < %" PRId64 "LL; b++) for (long long q = 0; q < %" PRId64
        "LL; q++) {\n"
        "      const long long at = (b * %" PRId64 "LL + ci) * %" PRId64 "LL + q;\n"
        "      const double xhat = ((double)%sin1[at]%s - mean) * invstd;\n"
        "      out0[at] = %s(float)(k * (%" PRId64
        ".0 * (double)%sin0[at]%s - db - xhat * ds))%s;\n"
        "    }\n",
        m, n, inner, c, inner, ld_open(tx), close16(tx), st_open(ty), m, ld_open(tg), close16(tg),
        close16(ty));
  out(&e->src, "  }\n}\n");
  return single_end(e, &sk, c);
}

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
  const gcc_shape *X = &g->values[nd->inputs[0]].shape;
  int64_t xst[GCC_MAX_DIMS], acc = 1;
  for (int q = X->ndim - 1; q >= 0; q--) {
    xst[q] = acc;
    acc *= X->dims[q];
  }
  out(&e->src, loop, ny);
  coords(&e->src, Y, "i");
  gcc_dtype ty = vdt(g, nd->outputs[0]);
  out(&e->src, "    out0[i] = %s%sin0[0LL", st_open(ty), ld_open(ty));
  for (int q = 0; q < Y->ndim; q++)
    out(&e->src, " + c%d * %" PRId64 "LL", q, xst[nd->av[TRANSPOSE_PERM].ints[q]]);
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

int gcc_fits_matmul_2d(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  return g->values[n->inputs[0]].shape.ndim == 2 && g->values[n->inputs[1]].shape.ndim == 2;
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

static gcc_status emit_pointwise(emitter *e, int gi) {
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
  int vec = red < 0 && n % 4 == 0 && !is16(odt); /* float4: float32 operands only */
  for (int j = 0; j < n_ext && vec; j++)
    vec = gcc_shape_numel(&g->values[ext[j]].shape, NULL) == n && !is16(vdt(g, ext[j]));

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
      char a[2][32];
      for (int q = 0; q < nd->n_inputs && q < 2; q++) {
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
      if (lw->kind != GCC_LOWER_POINTWISE || !lw->expr)
        return gcc_diag_set(
            e->d, GCC_ERR_UNSUPPORTED,
            "%s: codegen: group '%s': node '%s' (%s) has no pointwise code generator", g->source,
            gr->name, nd->name, gcc_op_name(nd->op));
      out(&e->src, "  float t%d = ", ni);
      for (const char *c = lw->expr; *c; c++) /* {k}: operand k; {fk}: float attribute k */
        if (c[0] == '{' && (c[1] == '0' || c[1] == '1') && c[2] == '}') {
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
    param(e, &s, GCC_KARG_INPUT, ext[j], in_type(vdt(g, ext[j])), pname);
  }
  param(e, &s, GCC_KARG_OUTPUT, outv, out_type(odt), "out0");
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
        out(&e->src, "%s%sin%d[", j ? ", " : "", ld_open(vdt(g, ext[j])), j);
        bcast_index(&e->src, &g->values[ext[j]].shape, S, "i");
        out(&e->src, "]%s", close16(vdt(g, ext[j])));
      }
      out(&e->src, ");\n");
    } else {
      out(&e->src, "      acc += %sin0[i]%s;\n", ld_open(vdt(g, ext[0])), close16(vdt(g, ext[0])));
    }
    out(&e->src, "    }\n    out0[o] = %sacc%s%s%s;\n  }\n}\n", st_open(odt),
        scale != 1.0f ? " * " : "", scale != 1.0f ? float_lit(lit, sizeof lit, scale) : "",
        close16(odt));
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
        n, st_open(odt), k->name);
    for (int j = 0; j < n_ext; j++) {
      out(&e->src, "%s%sin%d[", j ? ", " : "", ld_open(vdt(g, ext[j])), j);
      bcast_index(&e->src, &g->values[ext[j]].shape, S, "i");
      out(&e->src, "]%s", close16(vdt(g, ext[j])));
    }
    out(&e->src, ")%s;\n}\n", close16(odt));
    set_grid(e, k, n);
  }
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* ---- loss groups ------------------------------------------------------ */

gcc_status gcc_emit_sce(emitter *e, int gi, int fwd, int grad) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  const gcc_node *any = &g->nodes[fwd >= 0 ? fwd : grad];
  int first = fwd >= 0 ? 0 : 1; /* where logits start in the node's inputs */
  int X = any->inputs[first], T = any->inputs[first + 1];
  int W = any->n_inputs > first + 2 ? any->inputs[first + 2] : -1;
  int64_t N = g->values[X].shape.dims[0], C = g->values[X].shape.dims[1];
  int mean = strcmp(any->av[SCE_REDUCTION].s, "mean") == 0;
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, X, "const float*", "logits");
  param(e, &s, GCC_KARG_INPUT, T,
        g->values[T].dtype == GCC_DT_INT64 ? "const long long*" : "const int*", "labels");
  if (W >= 0)
    param(e, &s, GCC_KARG_INPUT, W, "const float*", "weight");
  if (grad >= 0)
    param(e, &s, GCC_KARG_INPUT, g->nodes[grad].inputs[0], "const float*", "dloss");
  if (fwd >= 0)
    param(e, &s, GCC_KARG_OUTPUT, g->nodes[fwd].outputs[0], "float*", "loss");
  if (grad >= 0)
    param(e, &s, GCC_KARG_OUTPUT, g->nodes[grad].outputs[0], "float*", "dlogits");
  param(e, &s, GCC_KARG_BAD_LABEL, -1, "int*", "bad_label");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  out(&e->src,
      "  /* one block: the loss is reduced in shared memory in a fixed order (deterministic) */\n"
      "  const long long N = %" PRId64 "LL, C = %" PRId64 "LL, IGNORE = %" PRId64 "LL;\n"
      "  __shared__ double s_sum[%d];\n  __shared__ double s_w[%d];\n"
      "  if (blockIdx.x != 0) return;\n"
      "  double acc = 0.0, wacc = 0.0;\n"
      "  for (long long i = threadIdx.x; i < N; i += blockDim.x) {\n"
      "    long long y = (long long)labels[i];\n"
      "    if (y == IGNORE) continue;\n"
      "    if (y < 0 || y >= C) { atomicMin(bad_label, (int)i); continue; } /* the first bad row "
      "*/\n"
      "    double w = %s;\n"
      "    wacc += w;\n",
      N, C, any->av[SCE_IGNORE_INDEX].i, BLOCK, BLOCK, W >= 0 ? "(double)weight[y]" : "1.0");
  if (fwd >= 0)
    out(&e->src, "    const float *row = logits + i * C;\n"
                 "    float mx = row[0];\n"
                 "    for (long long j = 1; j < C; j++) mx = row[j] > mx ? row[j] : mx;\n"
                 "    double se = 0.0;\n"
                 "    for (long long j = 0; j < C; j++) se += exp((double)row[j] - mx);\n"
                 "    acc += w * (log(se) + mx - row[y]); /* -log_softmax(x)[y] */\n");
  out(&e->src, "  }\n"
               "  s_sum[threadIdx.x] = acc;\n  s_w[threadIdx.x] = wacc;\n  __syncthreads();\n"
               "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
               "    if (threadIdx.x < s) { s_sum[threadIdx.x] += s_sum[threadIdx.x + s]; "
               "s_w[threadIdx.x] += s_w[threadIdx.x + s]; }\n"
               "    __syncthreads();\n  }\n"
               "  const double wsum = s_w[0];\n");
  if (fwd >= 0)
    out(&e->src, "  if (threadIdx.x == 0) loss[0] = (float)(%s);\n",
        mean ? "s_sum[0] / wsum" : "s_sum[0]");
  if (grad >= 0)
    out(&e->src,
        "  const float dl = dloss[0];\n"
        "  for (long long i = threadIdx.x; i < N; i += blockDim.x) {\n"
        "    long long y = (long long)labels[i];\n"
        "    float *drow = dlogits + i * C;\n"
        "    if (y == IGNORE || y < 0 || y >= C) { for (long long j = 0; j < C; j++) drow[j] = "
        "0.0f; continue; }\n"
        "    const float *row = logits + i * C;\n"
        "    float mx = row[0];\n"
        "    for (long long j = 1; j < C; j++) mx = row[j] > mx ? row[j] : mx;\n"
        "    double se = 0.0;\n"
        "    for (long long j = 0; j < C; j++) se += exp((double)row[j] - mx);\n"
        "    double scale = (double)dl * %s / %s;\n"
        "    for (long long j = 0; j < C; j++) {\n"
        "      double p = exp((double)row[j] - mx) / se;\n"
        "      drow[j] = (float)(scale * (p - (j == y ? 1.0 : 0.0)));\n"
        "    }\n  }\n",
        W >= 0 ? "(double)weight[y]" : "1.0", mean ? "wsum" : "1.0");
  out(&e->src, "}\n");
  k->single_block = 1;
  k->grid_dim = 1;
  k->work_items = N;
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

gcc_status gcc_emit_mse(emitter *e, int gi, int fwd, int grad) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  const gcc_node *any = &g->nodes[fwd >= 0 ? fwd : grad];
  int first = fwd >= 0 ? 0 : 1;
  int P = any->inputs[first], T = any->inputs[first + 1];
  int64_t n = gcc_shape_numel(&g->values[P].shape, NULL);
  int mean = strcmp(any->av[MSE_REDUCTION].s, "mean") == 0;
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, P, "const float*", "pred");
  param(e, &s, GCC_KARG_INPUT, T, "const float*", "target");
  if (grad >= 0)
    param(e, &s, GCC_KARG_INPUT, g->nodes[grad].inputs[0], "const float*", "dloss");
  if (fwd >= 0)
    param(e, &s, GCC_KARG_OUTPUT, g->nodes[fwd].outputs[0], "float*", "loss");
  if (grad >= 0)
    param(e, &s, GCC_KARG_OUTPUT, g->nodes[grad].outputs[0], "float*", "dpred");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  out(&e->src,
      "  const long long N = %" PRId64 "LL;\n"
      "  __shared__ double s_sum[%d];\n"
      "  if (blockIdx.x != 0) return;\n",
      n, BLOCK);
  if (fwd >= 0)
    out(&e->src,
        "  double acc = 0.0;\n"
        "  for (long long i = threadIdx.x; i < N; i += blockDim.x) { double d = (double)pred[i] - "
        "target[i]; acc += d * d; }\n"
        "  s_sum[threadIdx.x] = acc;\n  __syncthreads();\n"
        "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
        "    if (threadIdx.x < s) s_sum[threadIdx.x] += s_sum[threadIdx.x + s];\n"
        "    __syncthreads();\n  }\n"
        "  if (threadIdx.x == 0) loss[0] = (float)(%s);\n",
        mean ? "s_sum[0] / (double)N" : "s_sum[0]");
  if (grad >= 0)
    out(&e->src,
        "  const float scale = (float)(2.0 * (double)dloss[0] / %s);\n"
        "  for (long long i = threadIdx.x; i < N; i += blockDim.x) dpred[i] = scale * (pred[i] - "
        "target[i]);\n",
        mean ? "(double)N" : "1.0");
  out(&e->src, "}\n");
  k->single_block = 1;
  k->grid_dim = 1;
  k->work_items = n;
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

static gcc_status emit_loss(emitter *e, int gi) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  int fwd = -1, grad = -1;
  for (int i = 0; i < gr->n_nodes; i++) {
    if (gcc_lowering_of(g->nodes[gr->nodes[i]].op)->kind == GCC_LOWER_LOSS)
      fwd = gr->nodes[i];
    else
      grad = gr->nodes[i];
  }
  const gcc_lowering *lw = gcc_lowering_of(g->nodes[fwd >= 0 ? fwd : grad].op);
  if (!lw->emit)
    return gcc_diag_set(e->d, GCC_ERR_UNSUPPORTED, "%s: codegen: loss group '%s' has no emitter",
                        g->source, gr->name);
  return lw->emit(e, gi, fwd, grad);
}

/* ---- the optimizer ---------------------------------------------------- */

/* each tensor of the flat sections is padded to GCC_ARENA_ALIGN bytes */
static int64_t padded(int64_t n) {
  const int64_t per = GCC_ARENA_ALIGN / (int64_t)sizeof(float);
  return (n + per - 1) / per * per;
}

/* fp16 loss scaling (graph/ops.h SCALER_IN_*): the scale, found_inf and
 * applied_steps inputs of the group's first node (the same values for
 * every node of the group), read from device memory, never baked in */
static void scaler_params(emitter *e, sig *s, const gcc_node *n0, int at) {
  param(e, s, GCC_KARG_INPUT, n0->inputs[at + SCALER_IN_SCALE], "const float*", "scale");
  param(e, s, GCC_KARG_INPUT, n0->inputs[at + SCALER_IN_FOUND_INF], "const float*", "found_inf");
  param(e, s, GCC_KARG_INPUT, n0->inputs[at + SCALER_IN_STEPS], "const float*", "applied");
}

static const char *const kScalerPrologue =
    "  /* torch.amp.GradScaler: a step with an Inf/NaN gradient updates nothing;\n"
    "     otherwise the gradients are unscaled by inv_scale = 1 / scale (float64,\n"
    "     rounded to float32) as they are read */\n"
    "  if (found_inf[0] != 0.0f) return;\n"
    "  const float inv = (float)(1.0 / (double)scale[0]);\n";

/* The optimizer kernel of group `gi`: its signature starts with the flat
 * parameter and gradient sections; *total is the floats they hold. */
static gcc_status optimizer_begin(emitter *e, int gi, gcc_kernel_info **kp, sig *s,
                                  int64_t *total) {
  const gcc_graph *g = e->g;
  const gcc_group *gr = &g->groups[gi];
  *total = 0;
  for (int i = 0; i < gr->n_nodes; i++)
    *total += padded(gcc_shape_numel(&g->values[g->nodes[gr->nodes[i]].inputs[0]].shape, NULL));
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  *s = (sig){.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, s, GCC_KARG_PARAMS, -1, "float*", "p");
  param(e, s, GCC_KARG_GRADS, -1, "const float*", "g");
  *kp = k;
  return GCC_OK;
}

/* --precision bf16|fp16: the group's updates write their parameters' 16-bit
 * copies (passes/autocast.c): the copy section's argument, and the store of
 * the updated weight p[i] (one read of it, one rounded 16-bit store). */
static void optimizer_copy_arg(emitter *e, int gi, sig *s) {
  const gcc_node *n0 = &e->g->nodes[e->g->groups[gi].nodes[0]];
  if (n0->n_outputs > 0)
    param(e, s, GCC_KARG_PARAM_COPY, -1, out_type(vdt(e->g, n0->outputs[0])), "h");
}

static const char *optimizer_copy(emitter *e, int gi, char *buf, size_t cap) {
  const gcc_node *n0 = &e->g->nodes[e->g->groups[gi].nodes[0]];
  buf[0] = 0;
  if (n0->n_outputs > 0) {
    gcc_dtype t = vdt(e->g, n0->outputs[0]);
    snprintf(buf, cap, "    h[i] = %sp[i]%s;\n", st_open(t), close16(t));
  }
  return buf;
}

static gcc_status optimizer_end(emitter *e, gcc_kernel_info *k, const sig *s, int64_t total) {
  set_grid(e, k, total);
  emit_wrapper(e, k, s->types);
  return GCC_OK;
}

gcc_status gcc_emit_sgd(emitter *e, int gi, int fwd, int grad) {
  (void)fwd;
  (void)grad;
  const gcc_group *gr = &e->g->groups[gi];
  const gcc_node *n0 = &e->g->nodes[gr->nodes[0]];
  gcc_kernel_info *k;
  sig s;
  int64_t total;
  char l2[32], l3[32], l4[32];
  GCC_TRY(optimizer_begin(e, gi, &k, &s, &total));
  int has_buf = n0->n_inputs > 2 && n0->inputs[2] >= 0;
  int scaled = n0->n_inputs > SGD_IN_SCALER;
  if (has_buf)
    param(e, &s, GCC_KARG_STATE0, -1, "float*", "buf");
  param(e, &s, GCC_KARG_NUMEL, -1, "long long", "n");
  if (!scaled)
    param(e, &s, GCC_KARG_FIRST_STEP, -1, "int", "first");
  param(e, &s, GCC_KARG_LR, -1, "float", "lr");
  if (scaled)
    scaler_params(e, &s, n0, SGD_IN_SCALER);
  optimizer_copy_arg(e, gi, &s);
  char copy[96];
  optimizer_copy(e, gi, copy, sizeof copy);
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  if (scaled)
    out(&e->src, "%s  const int first = applied[0] == 0.0f;\n", kScalerPrologue);
  out(&e->src,
      "  /* torch.optim.SGD over the flat parameter, gradient and momentum sections\n"
      "     (parallel arrays, each tensor padded to %d bytes): %" PRId64 " floats */\n"
      "  const float mom = %s, damp = %s, wd = %s;\n"
      "  (void)mom; (void)damp; (void)first;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) "
      "{\n",
      GCC_ARENA_ALIGN, total, float_lit(l2, sizeof l2, n0->av[SGD_MOMENTUM].f),
      float_lit(l3, sizeof l3, n0->av[SGD_DAMPENING].f),
      float_lit(l4, sizeof l4, n0->av[SGD_WEIGHT_DECAY].f));
  const char *gi_ = scaled ? "g[i] * inv" : "g[i]";
  if (!has_buf)
    out(&e->src, "    p[i] = p[i] + (-lr) * (%s + wd * p[i]);\n%s  }\n}\n", gi_, copy);
  else
    out(&e->src,
        "    float d = %s + wd * p[i];\n"
        "    float b = first ? d : buf[i] * mom + (1.0f - damp) * d;\n"
        "    buf[i] = b;\n"
        "    p[i] = p[i] + (-lr) * (%s);\n%s  }\n}\n",
        gi_, n0->av[SGD_NESTEROV].i ? "d + mom * b" : "b", copy);
  return optimizer_end(e, k, &s, total);
}

gcc_status gcc_emit_adam(emitter *e, int gi, int fwd, int grad) {
  (void)fwd;
  (void)grad;
  const gcc_group *gr = &e->g->groups[gi];
  const gcc_node *n0 = &e->g->nodes[gr->nodes[0]];
  gcc_kernel_info *k;
  sig s;
  int64_t total;
  char l1[32], l2[32], l3[32], l4[32];
  GCC_TRY(optimizer_begin(e, gi, &k, &s, &total));
  param(e, &s, GCC_KARG_STATE0, -1, "float*", "m");
  param(e, &s, GCC_KARG_STATE1, -1, "float*", "v");
  param(e, &s, GCC_KARG_NUMEL, -1, "long long", "n");
  int scaled = n0->n_inputs > ADAM_IN_SCALER;
  if (!scaled) {
    param(e, &s, GCC_KARG_STEP_SIZE, -1, "float", "step_size");
    param(e, &s, GCC_KARG_BC2_SQRT, -1, "float", "bc2_sqrt");
  }
  int decoupled = (int)n0->av[ADAM_DECOUPLED].i;
  if (decoupled || scaled)
    param(e, &s, GCC_KARG_LR, -1, "float", "lr");
  if (scaled)
    scaler_params(e, &s, n0, ADAM_IN_SCALER);
  optimizer_copy_arg(e, gi, &s);
  char copy[96];
  optimizer_copy(e, gi, copy, sizeof copy);
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, gr);
  if (scaled)
    out(&e->src,
        "%s"
        "  /* the bias corrections of the steps applied (skipped steps do not count), in\n"
        "     float64 as gcc_cpu_adam */\n"
        "  const double t = (double)applied[0] + 1.0;\n"
        "  const float step_size = (float)((double)lr / (1.0 - pow((double)%s, t)));\n"
        "  const float bc2_sqrt = (float)sqrt(1.0 - pow((double)%s, t));\n",
        kScalerPrologue, float_lit(l1, sizeof l1, n0->av[ADAM_BETA1].f),
        float_lit(l2, sizeof l2, n0->av[ADAM_BETA2].f));
  out(&e->src,
      "  /* torch.optim.Adam over the flat sections: %" PRId64
      " floats; step_size = lr / (1 - beta1^t),\n"
      "     bc2_sqrt = sqrt(1 - beta2^t), computed on the host in float64 each step */\n"
      "  const float b1 = %s, b2 = %s, eps = %s, wd = %s;\n"
      "%s"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) "
      "{\n"
      "%s"
      "    m[i] = m[i] * b1 + (1.0f - b1) * gi;\n"
      "    v[i] = v[i] * b2 + (1.0f - b2) * gi * gi;\n"
      "    float denom = sqrtf(v[i]) / bc2_sqrt + eps;\n"
      "    p[i] = p[i] + (-step_size) * (m[i] / denom);\n%s  }\n}\n",
      total, float_lit(l1, sizeof l1, n0->av[ADAM_BETA1].f),
      float_lit(l2, sizeof l2, n0->av[ADAM_BETA2].f), float_lit(l3, sizeof l3, n0->av[ADAM_EPS].f),
      float_lit(l4, sizeof l4, n0->av[ADAM_WEIGHT_DECAY].f),
      decoupled ? "  /* AdamW: decoupled weight decay, p * (1 - lr * wd) first (float64 as "
                  "torch's scalar) */\n"
                  "  const float decay = (float)(1.0 - (double)lr * (double)wd);\n"
                : "",
      decoupled ? (scaled ? "    p[i] = p[i] * decay;\n    float gi = g[i] * inv;\n"
                          : "    p[i] = p[i] * decay;\n    float gi = g[i];\n")
      : scaled  ? "    float gi = g[i] * inv + wd * p[i];\n"
                : "    float gi = g[i] + wd * p[i];\n",
      copy);
  return optimizer_end(e, k, &s, total);
}

static gcc_status emit_optimizer(emitter *e, int gi) {
  GCC_TRY(need_f32(e, gi));
  const gcc_group *gr = &e->g->groups[gi];
  const gcc_lowering *lw = gcc_lowering_of(e->g->nodes[gr->nodes[0]].op);
  if (!lw->emit)
    return gcc_diag_set(e->d, GCC_ERR_UNSUPPORTED,
                        "%s: codegen: optimizer group '%s' has no emitter", e->g->source, gr->name);
  return lw->emit(e, gi, -1, -1);
}

/* ---- entry ------------------------------------------------------------ */

gcc_status gcc_codegen_emit(const gcc_graph *g, int device, int sm_count, gcc_kernel_set *ks,
                            gcc_diag *d) {
  memset(ks, 0, sizeof *ks);
  emitter e = {g, sm_count, {0}, ks, d, 0};
  out(&e.src,
      "/* gcc-train generated kernels: %s, device %d, codegen version %d.\n"
      " * Every kernel is `extern \"C\" __global__`, grid-stride, 64-bit indexed. */\n\n",
      g->name, device, GCC_CODEGEN_VERSION);
  int half = 0; /* 16-bit values on this device: the headers of their types */
  for (int v = 0; v < g->n_values; v++)
    half |= is16(g->values[v].dtype) && g->values[v].device == device;
  if (half)
    out(&e.src, "/* float16 / bfloat16 storage (--precision): computed in float */\n"
                "#ifndef GCC_HOST_EMULATION\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
                "#endif\n\n");
  gcc_status s = GCC_OK;
  for (int gi = 0; gi < g->n_groups && s == GCC_OK; gi++) {
    const gcc_group *gr = &g->groups[gi];
    if (gr->device != device)
      continue;
    switch (gr->kind) {
    case GCC_GROUP_POINTWISE: s = emit_pointwise(&e, gi); break;
    case GCC_GROUP_LOSS: s = emit_loss(&e, gi); break;
    case GCC_GROUP_OPTIMIZER: s = emit_optimizer(&e, gi); break;
    default: break; /* GEMM: cuBLASLt; COPY: cudaMemcpyAsync */
    }
  }
  if (s == GCC_OK && e.src.oom)
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  if (s != GCC_OK) {
    free(e.src.buf);
    gcc_kernel_set_free(ks);
    return s;
  }
  ks->source = e.src.buf;
  return GCC_OK;
}

gcc_status gcc_codegen_gather(int sm_count, int64_t max_work, gcc_kernel_set *ks, gcc_diag *d) {
  memset(ks, 0, sizeof *ks);
  static const char src[] =
      "/* gcc-train: batches a dataset held on the device (--dataset-on-device). */\n"
      "extern \"C\" __global__ void " GCC_GATHER_KERNEL "(const unsigned int* __restrict__ src, "
      "const long long* __restrict__ perm, long long first, long long rows, long long row_words, "
      "unsigned int* __restrict__ dst) {\n"
      "  const long long total = rows * row_words;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += "
      "stride) {\n"
      "    long long r = i / row_words, w = i - r * row_words;\n"
      "    dst[i] = src[perm[first + r] * row_words + w];\n"
      "  }\n"
      "}\n"
      "#ifdef GCC_HOST_EMULATION\n"
      "extern \"C\" void " GCC_GATHER_KERNEL
      "_launch(unsigned grid, unsigned block, void **args) {\n"
      "  GCC_EMU_LAUNCH(" GCC_GATHER_KERNEL ", grid, block, *(const unsigned int* *)args[0], "
      "*(const long long* *)args[1], *(long long *)args[2], *(long long *)args[3], "
      "*(long long *)args[4], *(unsigned int* *)args[5]);\n"
      "}\n"
      "#endif\n";
  static const gcc_kernel_arg args[6] = {
      {GCC_KARG_INPUT, -1, "src"}, {GCC_KARG_INPUT, -1, "perm"},    {GCC_KARG_I64, -1, "first"},
      {GCC_KARG_I64, -1, "rows"},  {GCC_KARG_I64, -1, "row_words"}, {GCC_KARG_OUTPUT, -1, "dst"}};
  ks->source = strdup(src);
  ks->kernels = calloc(1, sizeof *ks->kernels);
  gcc_kernel_arg *a = malloc(sizeof args);
  char *name = strdup(GCC_GATHER_KERNEL);
  if (!ks->source || !ks->kernels || !a || !name) {
    free(a);
    free(name);
    gcc_kernel_set_free(ks);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  }
  memcpy(a, args, sizeof args);
  gcc_kernel_info *k = &ks->kernels[0];
  ks->n_kernels = 1;
  k->name = name;
  k->group = -1;
  k->args = a;
  k->n_args = 6;
  k->work_items = max_work;
  k->block_dim = BLOCK;
  int64_t blocks = (max_work + BLOCK - 1) / BLOCK,
          cap = 32 * (int64_t)(sm_count > 0 ? sm_count : 1);
  blocks = blocks > cap ? cap : blocks;
  blocks = blocks > 65535 ? 65535 : blocks;
  k->grid_dim = (int)(blocks > 0 ? blocks : 1);
  return GCC_OK;
}

/* ---- cuBLASLt epilogues cuBLASLt did not offer ------------------------- */

static gcc_status epilogue_kernel(emitter *e, const gcc_epilogue_work *w, int index) {
  const char *what;
  switch (w->kind) {
  case 4: what = "BIAS"; break;
  case 6: what = "RELU_BIAS"; break;
  case 134: what = "RELU_AUX_BIAS"; break;
  case 136: what = "DRELU"; break;
  case 152: what = "DRELU_BGRAD"; break;
  case 512: what = "BGRADB"; break;
  default:
    return gcc_diag_set(e->d, GCC_ERR_INVALID_ARGUMENT,
                        "codegen: cuBLASLt epilogue %d has no work to generate", w->kind);
  }
  int bias = w->kind == 4 || w->kind == 6 || w->kind == 134;
  int relu = w->kind == 6 || w->kind == 134, mask_out = w->kind == 134;
  int mask_in = w->kind == 136 || w->kind == 152, bgrad = w->kind == 152 || w->kind == 512;
  if (w->m <= 0 || w->n <= 0 || w->ldd < w->m || (w->kind == 512 && (w->k <= 0 || w->ldb <= 0)) ||
      ((mask_out || mask_in) && (w->aux_ld < w->m || w->aux_ld % 128 != 0)))
    return gcc_diag_set(e->d, GCC_ERR_INVALID_ARGUMENT,
                        "codegen: epilogue %s: bad sizes m %lld, n %lld, k %lld, ldd %lld, aux_ld "
                        "%lld",
                        what, (long long)w->m, (long long)w->n, (long long)w->k, (long long)w->ldd,
                        (long long)w->aux_ld);
  gcc_kernel_info *nk = realloc(e->ks->kernels, (size_t)(e->ks->n_kernels + 1) * sizeof *nk);
  if (!nk)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  e->ks->kernels = nk;
  gcc_kernel_info *k = &nk[e->ks->n_kernels++];
  memset(k, 0, sizeof *k);
  char name[64];
  snprintf(name, sizeof name, "gcc_epilogue_%d", index);
  k->name = strdup(name);
  k->group = -1;
  k->block_dim = BLOCK;
  if (!k->name)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig sg = {.k = k, .ok = 1};
  out(&e->src,
      "/* cuBLASLt's CUBLASLT_EPILOGUE_%s after a plain GEMM: D %lld x %lld (ldd %lld) */\n", what,
      (long long)w->m, (long long)w->n, (long long)w->ldd);
  out(&e->src, "extern \"C\" __global__ void %s(", name);
  const gcc_dtype t = w->dtype;
  const char *L = ld_open(t), *R = close16(t), *S = st_open(t); /* "" for float32 */
  if (w->kind != 512)
    param(e, &sg, GCC_KARG_OUTPUT, -1, out_type(t), "d");
  if (bias)
    param(e, &sg, GCC_KARG_INPUT, -1, in_type(t), "bias");
  if (mask_out)
    param(e, &sg, GCC_KARG_OUTPUT, -1, "unsigned*", "aux");
  if (mask_in)
    param(e, &sg, GCC_KARG_INPUT, -1, "const unsigned*", "aux");
  if (w->kind == 512)
    param(e, &sg, GCC_KARG_INPUT, -1, in_type(t), "b");
  if (bgrad)
    param(e, &sg, GCC_KARG_OUTPUT, -1, out_type(t), "bgrad");
  out(&e->src, ") {\n");
  if (!sg.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  out(&e->src,
      "  const long long M = %lldLL, N = %lldLL, K = %lldLL, LDD = %lldLL, LDB = %lldLL, "
      "AUX_LD = %lldLL;\n"
      "  (void)M; (void)N; (void)K; (void)LDD; (void)LDB; (void)AUX_LD;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
      (long long)w->m, (long long)w->n, (long long)w->k, (long long)w->ldd, (long long)w->ldb,
      (long long)w->aux_ld);
  int64_t work;
  if (mask_out) {
    /* one thread per 32-bit word of the mask: no two threads share a word */
    work = w->aux_ld / 32 * w->n;
    out(&e->src,
        "  for (long long wd = first; wd < AUX_LD / 32 * N; wd += stride) {\n"
        "    const long long j = wd * 32 / AUX_LD, i0 = wd * 32 - j * AUX_LD;\n"
        "    unsigned bits = 0u;\n"
        "    for (int b = 0; b < 32; b++) {\n"
        "      const long long i = i0 + b;\n"
        "      if (i >= M) break;\n"
        "      const float x = %sd[i + j * LDD]%s + %sbias[i]%s;\n"
        "      if (x > 0.0f) bits |= 1u << b;\n"
        "      d[i + j * LDD] = %sx > 0.0f ? x : 0.0f%s;\n"
        "    }\n"
        "    aux[wd] = bits;\n"
        "  }\n}\n\n",
        L, R, L, R, S, R);
  } else if (bias) {
    work = w->m * w->n;
    out(&e->src,
        "  for (long long e = first; e < M * N; e += stride) {\n"
        "    const long long j = e / M, i = e - j * M;\n"
        "    const float x = %sd[i + j * LDD]%s + %sbias[i]%s;\n"
        "    d[i + j * LDD] = %s%s%s;\n"
        "  }\n}\n\n",
        L, R, L, R, S, relu ? "x > 0.0f ? x : 0.0f" : "x", R);
  } else if (w->kind == 136) {
    work = w->m * w->n;
    out(&e->src,
        "  for (long long e = first; e < M * N; e += stride) {\n"
        "    const long long j = e / M, i = e - j * M, bit = j * AUX_LD + i;\n"
        "    if (!((aux[bit >> 5] >> (bit & 31)) & 1u)) d[i + j * LDD] = %s0.0f%s;\n"
        "  }\n}\n\n",
        S, R);
  } else if (w->kind == 152) {
    /* one thread per row i: masks the row, then sums it in column order */
    work = w->m;
    out(&e->src,
        "  for (long long i = first; i < M; i += stride) {\n"
        "    double s = 0.0;\n"
        "    for (long long j = 0; j < N; j++) {\n"
        "      const long long bit = j * AUX_LD + i;\n"
        "      float v = %sd[i + j * LDD]%s;\n"
        "      if (!((aux[bit >> 5] >> (bit & 31)) & 1u)) { v = 0.0f; d[i + j * LDD] = %sv%s; }\n"
        "      s += (double)v;\n"
        "    }\n"
        "    bgrad[i] = %s(float)s%s;\n"
        "  }\n}\n\n",
        L, R, S, R, S, R);
  } else {
    /* BGRADB: one thread per column j of op(B), summed over k in order */
    work = w->n;
    out(&e->src,
        "  for (long long j = first; j < N; j += stride) {\n"
        "    double s = 0.0;\n"
        "    for (long long kk = 0; kk < K; kk++) s += (double)%sb[%s]%s;\n"
        "    bgrad[j] = %s(float)s%s;\n"
        "  }\n}\n\n",
        L, w->trans_b ? "j + kk * LDB" : "kk + j * LDB", R, S, R);
  }
  set_grid(e, k, work);
  emit_wrapper(e, k, sg.types);
  return GCC_OK;
}

gcc_status gcc_codegen_gemm_epilogues(const gcc_epilogue_work *w, int n, int sm_count,
                                      gcc_kernel_set *ks, gcc_diag *d) {
  memset(ks, 0, sizeof *ks);
  emitter e = {NULL, sm_count, {0}, ks, d, 0};
  out(&e.src,
      "/* gcc-train: the work of cuBLASLt epilogues the heuristic did not offer, codegen "
      "version %d. */\n\n",
      GCC_CODEGEN_VERSION);
  int half = 0;
  for (int i = 0; i < n; i++)
    half |= is16(w[i].dtype);
  if (half)
    out(&e.src, "#ifndef GCC_HOST_EMULATION\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
                "#endif\n\n");
  gcc_status s = GCC_OK;
  for (int i = 0; i < n && s == GCC_OK; i++)
    s = epilogue_kernel(&e, &w[i], i);
  if (s == GCC_OK && e.src.oom)
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  if (s != GCC_OK) {
    free(e.src.buf);
    gcc_kernel_set_free(ks);
    return s;
  }
  ks->source = e.src.buf;
  return GCC_OK;
}

void gcc_kernel_set_free(gcc_kernel_set *ks) {
  if (!ks)
    return;
  for (int i = 0; i < ks->n_kernels; i++) {
    free(ks->kernels[i].name);
    free(ks->kernels[i].args);
  }
  free(ks->kernels);
  for (int i = 0; i < ks->n_strings; i++)
    free(ks->strings[i]);
  free(ks->strings);
  free(ks->source);
  memset(ks, 0, sizeof *ks);
}

/* ---- fp16 loss scaling (torch.amp.GradScaler) --------------------------- */

/* AmpNonFiniteCheck: a grid over the node's gradients, which lie in the
 * flat gradient section of the persistent arena, consecutive and each
 * padded to GCC_ARENA_ALIGN bytes (the padding is zeros; the runtime checks
 * the layout, GCC_KARG_FLAT_INPUTS). Each block ORs its threads' flags in
 * shared memory and, if set, the scratch flag; the last block to finish
 * (the scratch counter, after a __threadfence) writes found_inf and clears
 * the scratch for the next step: one launch, no memset, no host. The
 * result does not depend on the order blocks run in. */
gcc_status gcc_emit_amp_non_finite_check_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  int64_t total = 0;
  for (int j = AMP_CHECK_IN_GRADS; j < nd->n_inputs; j++)
    total += padded(gcc_shape_numel(&g->values[nd->inputs[j]].shape, NULL));
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_CHECK_IN_SCRATCH], "unsigned int*", "scratch");
  param(e, &s, GCC_KARG_FLAT_INPUTS, -1, "const float*", "g");
  param(e, &s, GCC_KARG_OUTPUT, nd->outputs[0], "float*", "found_inf");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  out(&e->src,
      "  /* found_inf of torch._amp_foreach_non_finite_check_and_unscale_ over the %d\n"
      "     gradients (%" PRId64 " floats with padding): Inf and NaN fail |x| <= FLT_MAX;\n"
      "     scratch[0] counts finished blocks, scratch[1] is set by a block that saw one */\n"
      "  __shared__ int s_bad, s_last;\n"
      "  if (threadIdx.x == 0) s_bad = 0;\n"
      "  __syncthreads();\n"
      "  int bad = 0;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < %" PRId64
      "LL; i += stride)\n"
      "    bad |= !(fabsf(g[i]) <= 3.402823466e+38f);\n"
      "  if (bad) s_bad = 1;\n"
      "  __syncthreads();\n"
      "  if (threadIdx.x == 0) {\n"
      "    if (s_bad) atomicExch((int*)(scratch + 1), 1);\n"
      "    __threadfence();\n"
      "    s_last = atomicAdd(scratch, 1u) == gridDim.x - 1;\n"
      "  }\n"
      "  __syncthreads();\n"
      "  if (s_last && threadIdx.x == 0) { /* every other block's flag is visible */\n"
      "    __threadfence();\n"
      "    found_inf[0] = atomicExch((int*)(scratch + 1), 0) != 0 ? 1.0f : 0.0f;\n"
      "    scratch[0] = 0u;\n"
      "  }\n"
      "}\n",
      nd->n_inputs - AMP_CHECK_IN_GRADS, total, total);
  set_grid(e, k, total);
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}

/* AmpUpdateScale: one thread, the scalars in place (as gcc_cpu_amp_update_scale) */
gcc_status gcc_emit_amp_update_scale_kernel(emitter *e, int gi, int ni) {
  GCC_TRY(need_f32(e, gi));
  const gcc_graph *g = e->g;
  const gcc_node *nd = &g->nodes[ni];
  gcc_kernel_info *k = new_kernel(e, gi);
  if (!k)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig s = {.k = k, .ok = 1};
  out(&e->src, "extern \"C\" __global__ void %s(", k->name);
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_UPDATE_IN_SCALE], "float*", "scale");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_UPDATE_IN_FOUND_INF], "const float*", "found_inf");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_UPDATE_IN_TRACKER], "float*", "tracker");
  param(e, &s, GCC_KARG_INPUT, nd->inputs[AMP_UPDATE_IN_STEPS], "float*", "applied");
  out(&e->src, ") {\n");
  if (!s.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  comment_nodes(e, &g->groups[gi]);
  char lg[32], lb[32];
  out(&e->src,
      "  /* torch._amp_update_scale_, and the count of applied optimizer steps */\n"
      "  if (blockIdx.x != 0 || threadIdx.x != 0) return;\n"
      "  if (found_inf[0] != 0.0f) {\n"
      "    scale[0] = scale[0] * %s;\n"
      "    tracker[0] = 0.0f;\n"
      "    return;\n"
      "  }\n"
      "  const float successful = tracker[0] + 1.0f;\n"
      "  if (successful >= %" PRId64 ".0f) {\n"
      "    const float grown = scale[0] * %s;\n"
      "    if (fabsf(grown) <= 3.402823466e+38f) scale[0] = grown;\n"
      "    tracker[0] = 0.0f;\n"
      "  } else {\n"
      "    tracker[0] = successful;\n"
      "  }\n"
      "  applied[0] = applied[0] + 1.0f;\n"
      "}\n",
      float_lit(lb, sizeof lb, nd->av[AMP_UPDATE_BACKOFF_FACTOR].f),
      (int64_t)nd->av[AMP_UPDATE_GROWTH_INTERVAL].i,
      float_lit(lg, sizeof lg, nd->av[AMP_UPDATE_GROWTH_FACTOR].f));
  k->single_block = 1;
  k->grid_dim = 1;
  k->work_items = 1;
  emit_wrapper(e, k, s.types);
  return GCC_OK;
}
