/*
 * cpu_dnnl.c - the CPU backend's oneDNN kernels (cpu_dnnl.h): a node's
 * tensors and attributes turned into a dnnl_ops descriptor, once per plan.
 */
#include "runtime/cpu/cpu_dnnl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/ops.h"
#include "passes/memplan.h"
#include "runtime/cpu/cpu_choice.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/dnnl_ops.h"

/* The plan's oneDNN context and the scratch its nodes share. */
typedef struct cpu_dnnl_state {
  gcc_dnnl *dn;
  void *scratch; /* GCC_ARENA_ALIGN-aligned, scratch_bytes */
  size_t scratch_bytes;
  double timing_s; /* what choosing GEMM libraries has cost this plan (cpu_choice.h) */
  /* The whole-plan choice (gcc_cpu_dnnl_prepare_done): the plan's GEMM
   * nodes in order, what rules the choice out, the digest of their shapes
   * and per-node choices. */
  gcc_kernel_args **gemms;
  int n_gemms, cap_gemms;
  int no_plan;        /* a forced library, an untimed GEMM, another oneDNN primitive */
  int blas_parallel;  /* GEMMs not on OpenBLAS that it would run on several threads */
  char plan_desc[64]; /* "gemms=N hash=H" */
  unsigned long long plan_hash;
} cpu_dnnl_state;

/* Where operand i of the primitive's run comes from: input k (0..7),
 * output k (OUT0 + k), or nothing (NONE). */
enum { OUT0 = 8, NONE = -1, MAX_PTRS = 6 };

typedef struct cpu_prepared {
  gcc_dnnl_op *op; /* NULL: the op table's kernel runs the node (a GEMM
                      whose measured choice is OpenBLAS) */
  int n_ptrs;
  signed char src[MAX_PTRS];
  int copy_c;                 /* Gemm with a full C: Y = C before the run (beta as a sum
                 post-op) */
  char name[448];             /* a GEMM's: the library, how it was chosen, the shape */
  struct gemm_timing *timing; /* a GEMM's scratch operands until the whole plan is chosen */
  char blas_base[160];        /* a GEMM's name on OpenBLAS */
} cpu_prepared;

int gcc_cpu_dnnl_enabled(void) {
  const char *e = getenv("GCC_CPU_ONEDNN");
  return !(e && strcmp(e, "0") == 0);
}

static const char *src_of(const gcc_kernel_args *a) {
  return a->ctx->source ? a->ctx->source : "<model>";
}

static gcc_status context(gcc_kernel_args *a, cpu_dnnl_state **out, gcc_diag *d) {
  cpu_dnnl_state *st = a->ctx->state;
  if (!st) {
    st = calloc(1, sizeof *st);
    if (!st)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (oneDNN context)");
    gcc_status s = gcc_dnnl_create(a->ctx->max_threads > 0 ? a->ctx->max_threads : 1, &st->dn, d);
    if (s != GCC_OK) {
      free(st);
      return s;
    }
    a->ctx->state = st;
  }
  *out = st;
  return GCC_OK;
}

/* Grows the plan's scratch to what `op` (NULL: nothing) needs. */
static gcc_status grow_scratch(const gcc_kernel_args *a, cpu_dnnl_state *st, const gcc_dnnl_op *op,
                               gcc_diag *d) {
  size_t need = op ? gcc_dnnl_op_scratch_bytes(op) : 0;
  if (need <= st->scratch_bytes)
    return GCC_OK;
  size_t n = (need + GCC_ARENA_ALIGN - 1) / GCC_ARENA_ALIGN * GCC_ARENA_ALIGN;
  void *s = aligned_alloc(GCC_ARENA_ALIGN, n);
  if (!s)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                        "out of memory: %zu bytes of oneDNN scratch for node '%s'", n,
                        a->node->name);
  free(st->scratch);
  st->scratch = s;
  st->scratch_bytes = n;
  return GCC_OK;
}

/* Keeps the primitive `op` (made by `made`) for the node, growing the
 * plan's scratch to its need. A descriptor oneDNN has no implementation for
 * (GCC_ERR_UNSUPPORTED) or rejects (GCC_ERR_INVALID_ARGUMENT: the graph's
 * shape inference accepted the node, so the reference kernel runs what
 * oneDNN 2.6 does not take) leaves the node to the op table's kernel. */
static gcc_status adopt(gcc_kernel_args *a, cpu_dnnl_state *st, gcc_status made, gcc_dnnl_op *op,
                        int n_ptrs, const signed char *src, int copy_c, gcc_diag *d) {
  if (made == GCC_ERR_UNSUPPORTED || made == GCC_ERR_INVALID_ARGUMENT) {
    if (d) {
      d->status = GCC_OK;
      d->msg[0] = '\0';
    }
    return GCC_OK;
  }
  if (made != GCC_OK) {
    char msg[sizeof d->msg];
    snprintf(msg, sizeof msg, "%s", d ? d->msg : "");
    return gcc_diag_set(d, made, "%s: node '%s' (%s): %s", src_of(a), a->node->name,
                        gcc_op_name(a->node->op), msg);
  }
  cpu_prepared *p = calloc(1, sizeof *p);
  if (!p) {
    gcc_dnnl_op_free(op);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (oneDNN op of node '%s')",
                        a->node->name);
  }
  if (grow_scratch(a, st, op, d) != GCC_OK) {
    free(p);
    gcc_dnnl_op_free(op);
    return d ? d->status : GCC_ERR_OUT_OF_MEMORY;
  }
  p->op = op;
  p->n_ptrs = n_ptrs;
  memcpy(p->src, src, (size_t)n_ptrs);
  p->copy_c = copy_c;
  a->prepared = p;
  st->no_plan = 1; /* its OpenMP threads beside OpenBLAS's spinning ones: not timed together */
  return GCC_OK;
}

static int all_f32(const gcc_kernel_args *a) {
  for (int k = 0; k < a->n_in; k++)
    if (a->in[k] && a->in[k]->dtype != GCC_DT_FLOAT32)
      return 0;
  for (int k = 0; k < a->n_out; k++)
    if (a->out[k]->dtype != GCC_DT_FLOAT32)
      return 0;
  return 1;
}

/* ---- GEMMs ----------------------------------------------------------------
 */

/* Runs prepared node `p` on a's tensors with `scratch`. */
static gcc_status run_prepared(const cpu_prepared *p, const gcc_kernel_args *a, void *scratch) {
  if (!p->op) /* the measured choice: the op table's kernel (OpenBLAS) */
    return gcc_cpu_op_of(a->node->op)->kernel(a);
  void *ptrs[MAX_PTRS] = {0};
  for (int i = 0; i < p->n_ptrs; i++) {
    int s = p->src[i];
    ptrs[i] = s == NONE ? NULL : s >= OUT0 ? a->out[s - OUT0]->data : a->in[s]->data;
  }
  if (p->copy_c) /* Gemm's full C: Y = C, then Y = alpha A B + beta Y */
    memcpy(a->out[0]->data, a->in[2]->data, (size_t)a->out[0]->numel * sizeof(float));
  gcc_status s = gcc_dnnl_op_run(p->op, ptrs, scratch, a->ctx->diag);
  if (s != GCC_OK) {
    gcc_diag *d = a->ctx->diag;
    char msg[sizeof d->msg];
    snprintf(msg, sizeof msg, "%s", d ? d->msg : "");
    return gcc_diag_set(d, s, "%s: node '%s' (%s): %s", src_of(a), a->node->name,
                        gcc_op_name(a->node->op), msg);
  }
  return GCC_OK;
}

/* A GEMM is timed only below these sizes (one run of a larger one takes
 * longer than a node's whole timing budget, where the choice matters
 * least): oneDNN's primitive runs it untimed. */
#define TIMED_MAX_FLOPS 4e8
#define TIMED_MAX_BYTES ((size_t)64 << 20)

/* The candidates of one GEMM node run on scratch operands of its shapes
 * (the plan's buffers are not bound yet): cpu_choice.h's run function.
 * The operands are made at the first run, so a cache hit costs nothing. */
typedef struct gemm_timing gemm_timing;
struct gemm_timing {
  gcc_kernel_args args; /* the node's, on the tensors below */
  gcc_tensor t[5];      /* inputs (up to 4), then Y */
  gcc_tensor *in[4], *out[1];
  cpu_prepared cand[GCC_CPU_LIB_COUNT];
  void *scratch;
  size_t total; /* floats of all operands */
  float *mem;
};

static gcc_status timing_mem(gemm_timing *t, gcc_diag *d) {
  if (!t->mem) { /* small values: a GEMM's time does not depend on them (NaN or denormals could) */
    t->mem = aligned_alloc(GCC_ARENA_ALIGN, (t->total * sizeof(float) + GCC_ARENA_ALIGN - 1) /
                                                GCC_ARENA_ALIGN * GCC_ARENA_ALIGN);
    if (!t->mem)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                          "out of memory: %zu bytes to time the GEMM of node '%s'",
                          t->total * sizeof(float), t->args.node->name);
    for (size_t i = 0; i < t->total; i++)
      t->mem[i] = (float)((int)((i * 2654435761u) >> 24 & 15) - 8) * 0.0625f;
    float *p = t->mem;
    for (int k = 0; k < 5; k++)
      if (t->t[k].numel > 0 && (k == 4 || t->in[k])) {
        t->t[k].data = p;
        p += t->t[k].numel;
      }
  }
  return GCC_OK;
}

static gcc_status time_one(void *user, int lib, gcc_diag *d) {
  gemm_timing *t = user;
  GCC_TRY(timing_mem(t, d));
  return run_prepared(&t->cand[lib], &t->args, t->scratch);
}

static void timing_free(gemm_timing *t) {
  if (t)
    free(t->mem);
  free(t);
}

/* The scratch operands' tensors for the node's shapes. Returns 0 when they
 * would be too large to time. */
static int timing_setup(gemm_timing *t, const gcc_kernel_args *a, cpu_dnnl_state *st) {
  memset(t, 0, sizeof *t);
  if (a->n_in > 4 || a->n_out != 1)
    return 0;
  for (int k = 0; k < a->n_in; k++) {
    if (!a->in[k])
      continue;
    t->t[k] = *a->in[k];
    t->t[k].data = NULL;
    t->total += (size_t)a->in[k]->numel;
    t->in[k] = &t->t[k];
  }
  t->t[4] = *a->out[0];
  t->t[4].data = NULL;
  t->total += (size_t)a->out[0]->numel;
  t->out[0] = &t->t[4];
  if (t->total * sizeof(float) > TIMED_MAX_BYTES)
    return 0;
  t->args = *a;
  t->args.in = t->in;
  t->args.out = t->out;
  t->args.prepared = NULL;
  t->scratch = st->scratch;
  return 1;
}

/* Frees every candidate op but `keep`'s. */
static void free_ops(gcc_dnnl_op **ops, int keep) {
  for (int i = 0; i < GCC_CPU_LIB_COUNT; i++)
    if (i != keep)
      gcc_dnnl_op_free(ops[i]);
}

static void describe(char *buf, size_t size, const char *base, int lib, const char *how,
                     const gcc_cpu_choice *c, unsigned cand) {
  int w = snprintf(buf, size, "%s [%s: %s", base, gcc_cpu_lib_name(lib), how);
  for (int i = 0; c && c->how == GCC_CPU_CHOICE_TIMED && i < GCC_CPU_LIB_COUNT; i++)
    if ((cand & (1u << i)) && w > 0 && (size_t)w < size)
      w += snprintf(buf + w, size - (size_t)w, " %s %.0f us", gcc_cpu_lib_name(i), c->min_us[i]);
  if (c && c->note[0] && w > 0 && (size_t)w < size)
    w += snprintf(buf + w, size - (size_t)w, "; %s", c->note);
  if (w > 0 && (size_t)w < size)
    snprintf(buf + w, size - (size_t)w, "]");
  for (char *q = buf; *q; q++) /* the profile writes it into JSON unescaped */
    if (*q == '"' || *q == '\\' || (unsigned char)*q < ' ')
      *q = '?';
}

/* oneDNN's matmul primitive, OpenBLAS (the op table's kernel) and, at batch
 * 1, the hand-written GEMV: the one GCC_CPU_GEMM forces, else the one
 * cpu_choice.h measures fastest on the node's shapes. */
static gcc_status prepare_gemm(gcc_kernel_args *a, int ta, int tb, float alpha, float beta,
                               gcc_diag *d) {
  if (!all_f32(a))
    return GCC_OK;
  const gcc_tensor *A = a->in[0], *C = a->n_in > 2 ? a->in[2] : NULL;
  const gcc_tensor *Y = a->out[0];
  if (Y->shape.ndim != 2 || A->shape.ndim != 2 || a->in[1]->shape.ndim != 2)
    return GCC_OK;
  gcc_dnnl_matmul_desc md = {0};
  md.m = Y->shape.dims[0];
  md.n = Y->shape.dims[1];
  md.k = ta ? A->shape.dims[0] : A->shape.dims[1];
  md.trans_a = ta;
  md.trans_b = tb;
  md.alpha = alpha;
  signed char src[4] = {0, 1, NONE, OUT0};
  int copy_c = 0;
  if (C && beta != 0.0f) {
    if (beta == 1.0f && C->numel == md.n && (C->shape.ndim == 1 || C->shape.dims[0] == 1)) {
      md.bias = 1; /* the nn.Linear bias row: the matmul's bias operand */
      src[2] = 2;
    } else if (C->numel == Y->numel) {
      md.beta = beta; /* Y = C, then the sum post-op */
      copy_c = 1;
    } else {
      return GCC_OK; /* another broadcast of C: the reference kernel */
    }
  }
  if (md.m < 1 || md.n < 1 || md.k < 1)
    return GCC_OK;
  int forced = -1;
  if (gcc_cpu_lib_forced("GCC_CPU_GEMM", &forced, d) != GCC_OK) {
    char msg[sizeof d->msg];
    snprintf(msg, sizeof msg, "%s", d->msg);
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: node '%s' (%s): %s", src_of(a),
                        a->node->name, gcc_op_name(a->node->op), msg);
  }
  cpu_dnnl_state *st = NULL;
  GCC_TRY(context(a, &st, d));

  /* The candidates. OpenBLAS only where it runs the node on one thread:
   * Debian's OpenBLAS (pthreads) keeps its workers spinning after a call,
   * and beside oneDNN's OpenMP threads on the same cores they take the
   * time of the nodes around it, which timing one node alone does not see
   * (MNIST MLP, 2 threads, a loaded EPYC: with a two-thread OpenBLAS fc1
   * the whole run took 34-52 s against 21-29 s on oneDNN alone). */
  gcc_dnnl_op *ops[GCC_CPU_LIB_COUNT] = {0};
  int blas_alone = gcc_cpu_blas_threads(md.m, md.n, md.k, a->ctx->max_threads) == 1;
  unsigned cand = blas_alone || forced == GCC_CPU_LIB_OPENBLAS ? 1u << GCC_CPU_LIB_OPENBLAS : 0;
  for (int gemv = 0; gemv <= (md.m == 1); gemv++) {
    md.no_gemv = !gemv;
    gcc_dnnl_op *op = NULL;
    gcc_status s = gcc_dnnl_matmul_create(st->dn, &md, &op, d);
    if (s == GCC_ERR_UNSUPPORTED || s == GCC_ERR_INVALID_ARGUMENT) {
      d->status = GCC_OK; /* oneDNN does not take it: not a candidate */
      d->msg[0] = '\0';
      continue;
    }
    if (s != GCC_OK) {
      free_ops(ops, -1);
      return adopt(a, st, s, NULL, 0, src, 0, d); /* names the node */
    }
    int lib = !gemv                                               ? GCC_CPU_LIB_ONEDNN
              : strncmp(gcc_dnnl_op_impl(op), "gcc:gemv", 8) == 0 ? GCC_CPU_LIB_GEMV
                                                                  : -1;
    if (lib < 0) {
      gcc_dnnl_op_free(op);
      continue;
    }
    ops[lib] = op;
    cand |= 1u << lib;
    if (grow_scratch(a, st, op, d) != GCC_OK) {
      free_ops(ops, -1);
      return d->status;
    }
  }
  if (!(cand & ~(1u << GCC_CPU_LIB_OPENBLAS)))
    return GCC_OK; /* the reference kernel alone, as for a GEMM oneDNN does not take */

  int lib;
  gcc_cpu_choice c;
  memset(&c, 0, sizeof c);
  const char *how;
  char how_buf[64];
  int chosen = 0; /* by gcc_cpu_choose */
  /* The node's shapes and the scratch operands that time it (here, and
   * with the whole plan in gcc_cpu_dnnl_prepare_done). */
  char shape[384];
  snprintf(shape, sizeof shape,
           "%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " ta=%d tb=%d alpha=%a beta=%a c=%s",
           gcc_op_name(a->node->op), md.m, md.n, md.k, ta, tb, (double)alpha, (double)md.beta,
           md.bias  ? "bias"
           : copy_c ? "full"
                    : "none");
  /* zeroed: freed untouched when too large to time (timing_setup not run) */
  gemm_timing *t = forced >= 0 ? NULL : calloc(1, sizeof *t);
  int timed = t && 2.0 * (double)md.m * (double)md.n * (double)md.k <= TIMED_MAX_FLOPS &&
              timing_setup(t, a, st);
  if (t) {
    for (int i = 0; i < GCC_CPU_LIB_COUNT; i++) {
      t->cand[i].op = ops[i];
      t->cand[i].n_ptrs = 4;
      memcpy(t->cand[i].src, src, sizeof src);
      t->cand[i].copy_c = copy_c;
    }
  }
  if (forced >= 0) {
    lib = (cand & (1u << forced))               ? forced
          : (cand & (1u << GCC_CPU_LIB_ONEDNN)) ? GCC_CPU_LIB_ONEDNN
                                                : GCC_CPU_LIB_OPENBLAS;
    snprintf(how_buf, sizeof how_buf, "GCC_CPU_GEMM=%s", gcc_cpu_lib_name(forced));
    how = how_buf;
  } else if (!(cand & (cand - 1))) { /* one candidate: nothing to choose */
    lib = __builtin_ctz(cand);
    snprintf(how_buf, sizeof how_buf, "the only candidate; OpenBLAS would use %d threads",
             gcc_cpu_blas_threads(md.m, md.n, md.k, a->ctx->max_threads));
    how = how_buf;
  } else {
    char machine[384], key[1001], cands[64] = "";
    gcc_cpu_choice_machine(gcc_dnnl_threads(st->dn), machine, sizeof machine);
    for (int i = 0; i < GCC_CPU_LIB_COUNT; i++)
      if (cand & (1u << i))
        snprintf(cands + strlen(cands), sizeof cands - strlen(cands), "%s%s", cands[0] ? "," : "",
                 gcc_cpu_lib_name(i));
    snprintf(key, sizeof key, "%s %s candidates=%s", machine, shape, cands);
    double left = GCC_CPU_CHOICE_PLAN_BUDGET_S - st->timing_s;
    gcc_cpu_choice_req r = {key,
                            cand,
                            time_one,
                            t,
                            NULL,
                            1,
                            !timed                                ? -1.0
                            : left < 0                            ? 0.0
                            : left < GCC_CPU_CHOICE_NODE_BUDGET_S ? left
                                                                  : GCC_CPU_CHOICE_NODE_BUDGET_S,
                            0};
    gcc_status s = gcc_cpu_choose(&r, &c, d);
    if (s != GCC_OK) {
      timing_free(t);
      free_ops(ops, -1);
      return s;
    }
    st->timing_s += c.seconds;
    lib = c.lib;
    chosen = 1;
    how = c.how == GCC_CPU_CHOICE_TIMED    ? (left > 0 ? "timed" : "timed once")
          : c.how == GCC_CPU_CHOICE_CACHED ? "cached"
          : c.how == GCC_CPU_CHOICE_MEMO   ? "chosen before"
                                           : "untimed (too large to time)";
  }
  free_ops(ops, lib);
  gcc_kernel_args **gl = st->gemms;
  if (st->n_gemms == st->cap_gemms) {
    int cap = st->cap_gemms ? 2 * st->cap_gemms : 16;
    gl = realloc(st->gemms, (size_t)cap * sizeof *gl);
    if (gl) {
      st->gemms = gl;
      st->cap_gemms = cap;
    }
  }
  cpu_prepared *p = gl ? calloc(1, sizeof *p) : NULL;
  if (!p) {
    timing_free(t);
    gcc_dnnl_op_free(ops[lib]);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (GEMM of node '%s')",
                        a->node->name);
  }
  p->op = lib == GCC_CPU_LIB_OPENBLAS ? NULL : ops[lib];
  p->n_ptrs = 4;
  memcpy(p->src, src, sizeof src);
  p->copy_c = copy_c;
  snprintf(p->blas_base, sizeof p->blas_base,
           "sgemm (OpenBLAS) %" PRId64 "x%" PRId64 "x%" PRId64 "%s%s%s", md.m, md.n, md.k,
           ta ? " A^T" : "", tb ? " B^T" : "",
           md.bias  ? " bias"
           : copy_c ? " C"
                    : "");
  describe(p->name, sizeof p->name, p->op ? gcc_dnnl_op_name(p->op) : p->blas_base, lib, how,
           chosen ? &c : NULL, cand);
  /* What the whole-plan choice needs: this node's operands, shape and choice */
  if (timed) {
    for (int i = 0; i < GCC_CPU_LIB_COUNT; i++)
      t->cand[i].op = NULL; /* freed above, but the chosen one (p's) */
    p->timing = t;
  } else {
    timing_free(t);
    st->no_plan = 1;
  }
  if (lib != GCC_CPU_LIB_OPENBLAS &&
      gcc_cpu_blas_threads(md.m, md.n, md.k, a->ctx->max_threads) > 1)
    st->blas_parallel++;
  char node[448];
  snprintf(node, sizeof node, "%016llx %s lib=%s", st->plan_hash, shape, gcc_cpu_lib_name(lib));
  st->plan_hash = gcc_cpu_choice_hash(node);
  st->gemms[st->n_gemms++] = a;
  a->prepared = p;
  return GCC_OK;
}

/* ---- the whole plan's GEMMs -------------------------------------------------
 */

/* Runs every GEMM of the plan once, in the plan's order, on its scratch
 * operands: each on its own choice (lib ONEDNN) or all on OpenBLAS at the
 * plan's thread count (lib OPENBLAS). */
static gcc_status time_plan(void *user, int lib, gcc_diag *d) {
  cpu_dnnl_state *st = user;
  cpu_prepared blas;
  memset(&blas, 0, sizeof blas);
  for (int i = 0; i < st->n_gemms; i++) {
    const cpu_prepared *p = st->gemms[i]->prepared;
    GCC_TRY(timing_mem(p->timing, d));
    GCC_TRY(run_prepared(lib == GCC_CPU_LIB_OPENBLAS ? &blas : p, &p->timing->args, st->scratch));
  }
  return GCC_OK;
}

gcc_status gcc_cpu_dnnl_prepare_done(gcc_cpu_ctx *ctx, gcc_diag *d) {
  cpu_dnnl_state *st = ctx->state;
  if (!st || st->n_gemms == 0)
    return GCC_OK;
  gcc_status s = GCC_OK;
  if (!st->no_plan && st->blas_parallel > 0) {
    char machine[384], key[1001];
    gcc_cpu_choice_machine(gcc_dnnl_threads(st->dn), machine, sizeof machine);
    snprintf(key, sizeof key, "%s plan gemms=%d digest=%016llx candidates=onednn,openblas", machine,
             st->n_gemms, st->plan_hash);
    gcc_cpu_choice_req r = {key,
                            (1u << GCC_CPU_LIB_ONEDNN) | (1u << GCC_CPU_LIB_OPENBLAS),
                            time_plan,
                            st,
                            NULL,
                            1,
                            GCC_CPU_CHOICE_WHOLE_BUDGET_S,
                            1};
    gcc_cpu_choice c;
    s = gcc_cpu_choose(&r, &c, d);
    const char *how = c.how == GCC_CPU_CHOICE_TIMED    ? "timed"
                      : c.how == GCC_CPU_CHOICE_CACHED ? "cached"
                                                       : "chosen before";
    char times[160] = "";
    int won = c.lib, lost = GCC_CPU_LIB_ONEDNN + GCC_CPU_LIB_OPENBLAS - c.lib;
    if (s == GCC_OK && c.how == GCC_CPU_CHOICE_TIMED)
      snprintf(times, sizeof times, " (%.0f us against %.0f us)", c.min_us[won], c.min_us[lost]);
    for (int i = 0; s == GCC_OK && i < st->n_gemms; i++) {
      cpu_prepared *p = st->gemms[i]->prepared;
      char old[sizeof p->name];
      snprintf(old, sizeof old, "%s", p->name);
      char *node = strstr(old, " [");
      node = node ? node + 2 : old;
      size_t n = strlen(node);
      if (n > 0 && node[n - 1] == ']')
        node[n - 1] = '\0';
      if (c.lib == GCC_CPU_LIB_OPENBLAS) {
        gcc_dnnl_op_free(p->op);
        p->op = NULL;
        snprintf(p->name, sizeof p->name,
                 "%s [openblas: whole plan %s: all OpenBLAS%s; the node alone: %s]", p->blas_base,
                 how, times, node);
      } else {
        char base[sizeof p->name];
        snprintf(base, sizeof base, "%s", old);
        char *cut = strstr(base, " [");
        if (cut)
          *cut = '\0';
        snprintf(p->name, sizeof p->name, "%s [%s; whole plan %s: each node's choice%s]", base,
                 node, how, times);
      }
      for (char *q = p->name; *q; q++) /* the profile writes it into JSON unescaped */
        if (*q == '"' || *q == '\\' || (unsigned char)*q < ' ')
          *q = '?';
    }
    if (s == GCC_OK && c.how == GCC_CPU_CHOICE_TIMED) {
      /* OpenBLAS's workers spin for about 0.1 s after its last call (2^28
       * cycles, Debian's build): let them sleep before the next plan's
       * nodes are timed, or their spinning slows every candidate that
       * runs on the same cores (once per machine: later runs read the
       * cache) */
      struct timespec nap = {0, 150 * 1000 * 1000};
      nanosleep(&nap, NULL);
      st->timing_s += c.seconds + 0.150;
    }
  }
  for (int i = 0; i < st->n_gemms; i++) { /* the scratch operands go */
    cpu_prepared *p = st->gemms[i]->prepared;
    timing_free(p->timing);
    p->timing = NULL;
  }
  st->n_gemms = 0;
  return s;
}

gcc_status gcc_cpu_dnnl_gemm_prepare(gcc_kernel_args *a, gcc_diag *d) {
  const gcc_node *n = a->node;
  return prepare_gemm(a, (int)n->av[GEMM_TRANS_A].i, (int)n->av[GEMM_TRANS_B].i,
                      n->av[GEMM_ALPHA].f, n->av[GEMM_BETA].f, d);
}

gcc_status gcc_cpu_dnnl_matmul_prepare(gcc_kernel_args *a, gcc_diag *d) {
  return prepare_gemm(a, 0, 0, 1.0f, 0.0f, d);
}

/* ---- convolutions ---------------------------------------------------------
 */

/* x: the activation's shape [n, c, h, w]; wt: the filter's [m, c/group, kh,
 * kw]. */
static gcc_status prepare_conv(gcc_kernel_args *a, const gcc_shape *x, const gcc_shape *wt,
                               int bias, int which, const signed char *src, int n_ptrs,
                               gcc_diag *d) {
  if (!all_f32(a) || x->ndim != 4 || wt->ndim != 4)
    return GCC_OK;
  gcc_window2d w;
  gcc_window2d_of(a->node, wt, &w);
  gcc_dnnl_conv_desc cd = {0};
  cd.n = x->dims[0];
  cd.c = x->dims[1];
  cd.h = x->dims[2];
  cd.w = x->dims[3];
  cd.m = wt->dims[0];
  cd.kh = w.kh;
  cd.kw = w.kw;
  cd.sh = w.sh;
  cd.sw = w.sw;
  cd.pt = w.pt;
  cd.pl = w.pl;
  cd.pb = w.pb;
  cd.pr = w.pr;
  cd.dh = w.dh;
  cd.dw = w.dw;
  cd.group = a->node->av[CONV_GROUP].i > 0 ? a->node->av[CONV_GROUP].i : 1;
  cd.bias = bias;
  cd.layout = GCC_DNNL_LAYOUT_AUTO;
  cpu_dnnl_state *st = NULL;
  GCC_TRY(context(a, &st, d));
  gcc_dnnl_op *op = NULL;
  gcc_status s = which == 0   ? gcc_dnnl_conv_fwd_create(st->dn, &cd, &op, d)
                 : which == 1 ? gcc_dnnl_conv_bwd_data_create(st->dn, &cd, &op, d)
                              : gcc_dnnl_conv_bwd_weights_create(st->dn, &cd, &op, d);
  return adopt(a, st, s, op, n_ptrs, src, 0, d);
}

gcc_status gcc_cpu_dnnl_conv_prepare(gcc_kernel_args *a, gcc_diag *d) {
  /* Conv(X, W, B?) -> Y: {X, W, B, Y} */
  int bias = a->n_in > 2 && a->in[2];
  signed char src[4] = {0, 1, (signed char)(bias ? 2 : NONE), OUT0};
  return prepare_conv(a, &a->in[0]->shape, &a->in[1]->shape, bias, 0, src, 4, d);
}

gcc_status gcc_cpu_dnnl_conv_grad_data_prepare(gcc_kernel_args *a, gcc_diag *d) {
  /* ConvGradData(dY, W) -> dX: {dY, W, dX} */
  static const signed char src[3] = {0, 1, OUT0};
  return prepare_conv(a, &a->out[0]->shape, &a->in[1]->shape, 0, 1, src, 3, d);
}

gcc_status gcc_cpu_dnnl_conv_grad_filter_prepare(gcc_kernel_args *a, gcc_diag *d) {
  /* ConvGradFilter(dY, X) -> dW: {dY, X, dW, dB = none} */
  static const signed char src[4] = {0, 1, OUT0, NONE};
  return prepare_conv(a, &a->in[1]->shape, &a->out[0]->shape, 0, 2, src, 4, d);
}

/* ---- pooling ----------------------------------------------------------------
 */

/* x: the pooling's input shape, which: 0 forward, 1 backward, 2 MaxPool's
 * backward from X. */
static gcc_status prepare_pool(gcc_kernel_args *a, gcc_dnnl_pool_kind kind, const gcc_shape *x,
                               int which, const signed char *src, int n_ptrs, gcc_diag *d) {
  if (!all_f32(a) || x->ndim != 4)
    return GCC_OK;
  gcc_window2d w;
  gcc_window2d_of(a->node, NULL, &w);
  gcc_dnnl_pool_desc pd = {0};
  pd.kind = kind;
  pd.n = x->dims[0];
  pd.c = x->dims[1];
  pd.h = x->dims[2];
  pd.w = x->dims[3];
  pd.kh = w.kh;
  pd.kw = w.kw;
  pd.sh = w.sh;
  pd.sw = w.sw;
  pd.pt = w.pt;
  pd.pl = w.pl;
  pd.pb = w.pb;
  pd.pr = w.pr;
  pd.dh = w.dh;
  pd.dw = w.dw;
  pd.ceil_mode = (int)a->node->av[POOL_CEIL_MODE].i;
  cpu_dnnl_state *st = NULL;
  GCC_TRY(context(a, &st, d));
  gcc_dnnl_op *op = NULL;
  gcc_status s = which == 0   ? gcc_dnnl_pool_fwd_create(st->dn, &pd, &op, d)
                 : which == 1 ? gcc_dnnl_pool_bwd_create(st->dn, &pd, &op, d)
                              : gcc_dnnl_max_pool_bwd_from_x_create(st->dn, &pd, &op, d);
  return adopt(a, st, s, op, n_ptrs, src, 0, d);
}

gcc_status gcc_cpu_dnnl_max_pool_prepare(gcc_kernel_args *a, gcc_diag *d) {
  static const signed char src[2] = {0, OUT0}; /* {X, Y} */
  return prepare_pool(a, GCC_DNNL_POOL_MAX, &a->in[0]->shape, 0, src, 2, d);
}

gcc_status gcc_cpu_dnnl_max_pool_grad_prepare(gcc_kernel_args *a, gcc_diag *d) {
  static const signed char src[3] = {0, 1, OUT0}; /* MaxPoolGrad(dY, X) -> dX */
  return prepare_pool(a, GCC_DNNL_POOL_MAX, &a->in[1]->shape, 2, src, 3, d);
}

static gcc_dnnl_pool_kind avg_kind(const gcc_node *n) {
  return n->av[POOL_COUNT_INCLUDE_PAD].i ? GCC_DNNL_POOL_AVG_INCLUDE : GCC_DNNL_POOL_AVG_EXCLUDE;
}

gcc_status gcc_cpu_dnnl_average_pool_prepare(gcc_kernel_args *a, gcc_diag *d) {
  static const signed char src[2] = {0, OUT0}; /* {X, Y} */
  return prepare_pool(a, avg_kind(a->node), &a->in[0]->shape, 0, src, 2, d);
}

gcc_status gcc_cpu_dnnl_average_pool_grad_prepare(gcc_kernel_args *a, gcc_diag *d) {
  static const signed char src[2] = {0, OUT0}; /* AveragePoolGrad(dY) -> dX */
  return prepare_pool(a, avg_kind(a->node), &a->out[0]->shape, 1, src, 2, d);
}

/* ---- run, names, release
 * ------------------------------------------------------ */

gcc_status gcc_cpu_dnnl_run(const gcc_kernel_args *a) {
  const cpu_dnnl_state *st = a->ctx->state;
  return run_prepared(a->prepared, a, st->scratch);
}

const char *gcc_cpu_dnnl_name(const gcc_kernel_args *a) {
  const cpu_prepared *p = a->prepared;
  return !p ? NULL : p->name[0] ? p->name : gcc_dnnl_op_name(p->op);
}

void gcc_cpu_dnnl_release(gcc_kernel_args *a) {
  cpu_prepared *p = a->prepared;
  if (!p)
    return;
  gcc_dnnl_op_free(p->op);
  timing_free(p->timing);
  free(p);
  a->prepared = NULL;
}

void gcc_cpu_dnnl_release_ctx(gcc_cpu_ctx *ctx) {
  cpu_dnnl_state *st = ctx->state;
  if (!st)
    return;
  gcc_dnnl_free(st->dn);
  free(st->gemms);
  free(st->scratch);
  free(st);
  ctx->state = NULL;
}
