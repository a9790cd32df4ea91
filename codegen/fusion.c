/*
 * fusion.c - groups the nodes placed on CUDA devices into launches: the
 * first step of the CUDA lowering. Which ops may join which group comes
 * from the lowering table (codegen/lowering.h), never from op names.
 *
 * In order:
 *  1. every optimizer update of a device with the same op and
 *     hyper-parameters -> one OPTIMIZER group (one kernel over the flat
 *     persistent arena: parameters, gradients and state are parallel
 *     arrays there);
 *  2. a loss and its gradient node -> one LOSS group (one kernel);
 *  3. GEMM epilogues, where cuBLASLt expresses them: Gemm + bias + Relu
 *     (RELU_BIAS, or RELU_AUX_BIAS when the backward needs the mask);
 *     dY W -> ReluGrad -> bias sum (DRELU_BGRAD); dW = dY^T X with the
 *     bias sum of dY (BGRADA). Not for shapes cuBLASLt offers no such
 *     epilogue for: a bias gradient of one element (BGRADA of a dW with one
 *     row: BGRADB with one output column after the column-major swap, as
 *     models/linear.pb's), or a ReLU gradient through a GEMM with k = 1
 *     (the gradient of a one-output layer); their ReluGrad and bias sums
 *     become generated kernels. (Shapes the device refuses otherwise are
 *     handled when the plan is built: runtime/device_plan.c.)
 *     Mixed precision: cuBLASLt's bias and bias-gradient vectors have D's
 *     type (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE and _BIAS_POINTER:
 *     float32 ones next to a 16-bit D are documented for FP8 and IMMA
 *     kernels only), so an epilogue forms only where the bias (or the sum)
 *     has the GEMM's dtype. The autocast pass makes them so: a 16-bit Gemm
 *     reads the 16-bit copy of its bias, and its bias gradient is summed
 *     in 16 bits from the 16-bit output gradient (passes/autocast.c), so
 *     16-bit plans get the epilogues of float32 plans.
 *  4. maximal chains of pointwise ops of one shape, each value consumed
 *     once inside the chain, optionally ending in one reduction
 *     (ReduceSumTo) -> one POINTWISE group;
 *  5. a float32 2-D Conv (a cuDNN call) whose output only a Relu on its
 *     device reads -> one CUDNN group of the two: the convolution, its bias
 *     and the ReLU in one cudnnConvolutionBiasActivationForward where the
 *     chosen algorithm allows it (runtime/cuda/cudnn_conv.h), else the
 *     convolution and cudnnActivationForward; either way no generated
 *     ReLU kernel, and the Conv's own output is never written (ReluGrad
 *     reads the Relu's output, not its input);
 *  6. everything else on a CUDA device is a group of its own (a Copy is a
 *     COPY group: a transfer, not a launch; a convolution or pooling node
 *     is a CUDNN group: one cuDNN call, as a cuBLAS GEMM is one call).
 * A group runs at one point of the schedule: a GEMM group at its first
 * node (the epilogue consumes only what the GEMM consumes, plus the forward
 * ReLU mask), the others at their last node. A candidate group is only
 * formed when that point respects every dependency in and out of it.
 * Nodes on the CPU are not grouped: the CPU backend runs them one by one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/fusion.h"
#include "codegen/lowering.h"
#include "graph/ops.h"

typedef struct cand {
  int nodes[64];
  int n;
  gcc_group_kind kind;
  gcc_epilogue epi;
  int closed; /* a pointwise group that ended in a reduction */
} cand;

static const gcc_lowering *lower(const gcc_graph *g, int node) {
  return gcc_lowering_of(g->nodes[node].op);
}

static int is_cuda(const gcc_graph *g, int node) {
  return node >= 0 && GCC_DEV_IS_CUDA(g->nodes[node].device);
}

static int only_consumer(const gcc_graph *g, int v) {
  return g->values[v].n_consumers == 1 ? g->values[v].consumers[0] : -1;
}

static int kept(const gcc_graph *g, int v) {
  const gcc_training *t = &g->training;
  const char *n = g->values[v].name;
  if ((t->loss && strcmp(n, t->loss) == 0) || (t->prediction && strcmp(n, t->prediction) == 0))
    return 1;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v)
      return 1;
  return 0;
}

static int in_cand(const cand *c, int node) {
  for (int i = 0; i < c->n; i++)
    if (c->nodes[i] == node)
      return 1;
  return 0;
}

/* Does running all of `c` at one schedule point respect every edge? */
static int placeable(const gcc_graph *g, const cand *c) {
  gcc_group gr = {.nodes = (int *)c->nodes, .n_nodes = c->n, .at_first = c->kind == GCC_GROUP_GEMM};
  int pos = gcc_group_point(&gr);
  for (int i = 0; i < c->n; i++) {
    const gcc_node *n = &g->nodes[c->nodes[i]];
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0)
        continue;
      int p = g->values[v].producer;
      if (p >= 0 && !in_cand(c, p) && p > pos)
        return 0;
    }
    for (int k = 0; k < n->n_outputs; k++) {
      const gcc_value *v = &g->values[n->outputs[k]];
      for (int j = 0; j < v->n_consumers; j++) {
        int u = v->consumers[j];
        if (!in_cand(c, u) && u < pos)
          return 0;
      }
    }
  }
  return 1;
}

static void sanitize(char *dst, size_t cap, const char *src) {
  size_t j = strlen(dst);
  for (; *src && j + 1 < cap; src++)
    dst[j++] = ((*src >= 'a' && *src <= 'z') || (*src >= 'A' && *src <= 'Z') ||
                (*src >= '0' && *src <= '9'))
                   ? *src
                   : '_';
  dst[j] = '\0';
}

static gcc_status commit(gcc_graph *g, const cand *c, const char *prefix, gcc_diag *d) {
  char name[128];
  snprintf(name, sizeof name, "%s", prefix);
  for (int i = 0; i < c->n && strlen(name) < 80; i++) {
    if (i)
      strncat(name, "_", sizeof name - strlen(name) - 1);
    sanitize(name, sizeof name, g->nodes[c->nodes[i]].name);
  }
  char uniq[160];
  snprintf(uniq, sizeof uniq, "%s_k%d", name, g->n_groups);
  int sorted[64];
  memcpy(sorted, c->nodes, (size_t)c->n * sizeof(int));
  for (int i = 1; i < c->n; i++) /* schedule order */
    for (int j = i; j > 0 && sorted[j] < sorted[j - 1]; j--) {
      int t = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = t;
    }
  int gi;
  GCC_TRY(gcc_graph_add_group(g, uniq, c->kind, g->nodes[c->nodes[0]].device, sorted, c->n, c->epi,
                              &gi, d));
  g->groups[gi].at_first = c->kind == GCC_GROUP_GEMM; /* the GEMM runs where it is */
  return GCC_OK;
}

static int grouped(const gcc_graph *g, int node) {
  return g->nodes[node].group >= 0;
}

static int same_attrs(const gcc_node *a, const gcc_node *b) {
  if (a->op != b->op || a->n_av != b->n_av || a->device != b->device)
    return 0;
  for (int k = 0; k < a->n_av; k++)
    if (a->av[k].i != b->av[k].i || a->av[k].f != b->av[k].f)
      return 0;
  return 1;
}

/* Updates `a` and `b` both write a 16-bit copy of their parameter of one
 * dtype (--precision bf16|fp16), or neither: one kernel has one copy section. */
static int same_copy(const gcc_graph *g, int a, int b) {
  const gcc_node *x = &g->nodes[a], *y = &g->nodes[b];
  if (x->n_outputs != y->n_outputs)
    return 0;
  return x->n_outputs == 0 || g->values[x->outputs[0]].dtype == g->values[y->outputs[0]].dtype;
}

/* Data-parallel: the gradient bucket of update `node` (the AllReduce that
 * sums its gradient), or -1 without one. */
static int bucket_of(const gcc_graph *g, int node) {
  const gcc_node *u = &g->nodes[node];
  if (u->n_inputs < 2 || u->inputs[1] < 0)
    return -1;
  const gcc_value *grad = &g->values[u->inputs[1]];
  for (int c = 0; c < grad->n_consumers; c++) {
    const gcc_node *ar = &g->nodes[grad->consumers[c]];
    if (gcc_op(ar->op)->flags & GCC_OPF_COLLECTIVE)
      return (int)ar->av[ALL_REDUCE_BUCKET].i;
  }
  return -1;
}

static gcc_status fuse_optimizers(gcc_graph *g, gcc_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    if (!is_cuda(g, i) || grouped(g, i) || lower(g, i)->kind != GCC_LOWER_OPTIMIZER)
      continue;
    int *members = malloc((size_t)g->n_nodes * sizeof *members), n = 0;
    if (!members)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (fusion)");
    int bucket = bucket_of(g, i);
    if (bucket < 0) {
      for (int j = i; j < g->n_nodes; j++)
        if (!grouped(g, j) && same_attrs(&g->nodes[i], &g->nodes[j])) {
          if (!same_copy(g, i, j))
            break; /* the copy section starts or ends: the parameters stay consecutive */
          members[n++] = j;
        }
    } else { /* data-parallel: one kernel per run of updates of one bucket, so that
                each waits for its own bucket's all-reduce only */
      for (int j = i; j < g->n_nodes && !grouped(g, j) && same_attrs(&g->nodes[i], &g->nodes[j]) &&
                      same_copy(g, i, j) && bucket_of(g, j) == bucket;
           j++)
        members[n++] = j;
    }
    char name[64], op[32];
    snprintf(op, sizeof op, "%s", gcc_op_name(g->nodes[i].op));
    for (char *ch = op; *ch; ch++)
      *ch = *ch >= 'A' && *ch <= 'Z' ? (char)(*ch - 'A' + 'a') : *ch;
    snprintf(name, sizeof name, "optimizer_%s_all_k%d", op, g->n_groups);
    gcc_status s = gcc_graph_add_group(g, name, GCC_GROUP_OPTIMIZER, g->nodes[i].device, members, n,
                                       GCC_EPI_DEFAULT, NULL, d);
    free(members);
    GCC_TRY(s);
  }
  return GCC_OK;
}

/* Step 5: Conv -> Relu into one cuDNN group (the Relu its last node). */
static gcc_status fuse_conv_relu(gcc_graph *g, gcc_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    if (lower(g, i)->conv != GCC_CONV_FORWARD || !is_cuda(g, i) || grouped(g, i) ||
        gcc_lowering_kind_of(g, i) != GCC_LOWER_LIBRARY)
      continue;
    int y = n->outputs[0];
    int r = only_consumer(g, y);
    if (r < 0 || lower(g, r)->epilogue != GCC_EPIROLE_RELU || g->nodes[r].device != n->device ||
        grouped(g, r) || kept(g, y) || g->values[y].dtype != GCC_DT_FLOAT32 ||
        g->values[y].shape.ndim != 4)
      continue;
    cand c = {.nodes = {i, r}, .n = 2, .kind = GCC_GROUP_CUDNN};
    if (placeable(g, &c))
      GCC_TRY(commit(g, &c, "cudnn_", d));
  }
  return GCC_OK;
}

int gcc_fusion_conv_relu(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  if (lower(g, node)->conv != GCC_CONV_FORWARD || n->group < 0 || n->group >= g->n_groups)
    return -1;
  const gcc_group *gr = &g->groups[n->group];
  if (gr->kind != GCC_GROUP_CUDNN || gr->n_nodes != 2 || gr->nodes[0] != node ||
      lower(g, gr->nodes[1])->epilogue != GCC_EPIROLE_RELU)
    return -1;
  return gr->nodes[1];
}

static gcc_status fuse_losses(gcc_graph *g, gcc_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *l = &g->nodes[i];
    if (!is_cuda(g, i) || grouped(g, i) || lower(g, i)->kind != GCC_LOWER_LOSS)
      continue;
    int grad_op = lower(g, i)->loss_grad;
    cand c = {.nodes = {i}, .n = 1, .kind = GCC_GROUP_LOSS};
    const gcc_value *x = &g->values[l->inputs[0]];
    for (int j = 0; j < x->n_consumers; j++) {
      int u = x->consumers[j];
      const gcc_node *gn = &g->nodes[u];
      if (gn->op != grad_op || gn->device != l->device || grouped(g, u))
        continue;
      int same = gn->n_inputs == l->n_inputs + 1;
      for (int k = 0; same && k < l->n_inputs; k++)
        same = gn->inputs[k + 1] == l->inputs[k];
      if (same) {
        c.nodes[c.n++] = u;
        break;
      }
    }
    if (!placeable(g, &c))
      c.n = 1;
    GCC_TRY(commit(g, &c, "loss_", d));
  }
  return GCC_OK;
}

/* the ReduceSumTo that turns `v` (M, N) into its column sums (N) */
static int bias_sum_of(const gcc_graph *g, int v) {
  const gcc_value *val = &g->values[v];
  if (val->shape.ndim != 2)
    return -1;
  for (int j = 0; j < val->n_consumers; j++) {
    int u = val->consumers[j];
    const gcc_node *n = &g->nodes[u];
    if (lower(g, u)->epilogue != GCC_EPIROLE_BIAS_GRAD || grouped(g, u) ||
        n->device != g->values[v].device)
      continue;
    const gcc_shape *s = &g->values[n->outputs[0]].shape;
    if (n->av[REDUCE_SUM_TO_SCALE].f == 1.0f && gcc_shape_numel(s, NULL) == val->shape.dims[1] &&
        (s->ndim == 1 || (s->ndim == 2 && s->dims[0] == 1)) &&
        g->values[n->outputs[0]].dtype == val->dtype) /* cuBLASLt: bgrad of D's type */
      return u;
  }
  return -1;
}

/* The inner dimension K of Gemm / MatMul node `node`. */
static int64_t gemm_k(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_shape *a = &g->values[n->inputs[0]].shape;
  int ta = lower(g, node)->gemm_attrs && n->av[GEMM_TRANS_A].i; /* Gemm's transA */
  return a->ndim == 2 ? (ta ? a->dims[0] : a->dims[1]) : -1;
}

static gcc_status fuse_gemms(gcc_graph *g, gcc_diag *d) {
  /* backward DRELU(_BGRAD) first: they claim the bias sums of ReLU layers */
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    if (!is_cuda(g, i) || grouped(g, i) || gcc_lowering_kind_of(g, i) != GCC_LOWER_GEMM ||
        (lower(g, i)->gemm_attrs && n->n_inputs > 2 && n->inputs[2] >= 0))
      continue;
    int r = only_consumer(g, n->outputs[0]);
    if (r < 0 || grouped(g, r) || lower(g, r)->epilogue != GCC_EPIROLE_RELU_GRAD ||
        g->nodes[r].inputs[0] != n->outputs[0] || g->nodes[r].device != n->device ||
        kept(g, n->outputs[0]) || gemm_k(g, i) == 1) /* cuBLASLt: no DRELU with k = 1 */
      continue;
    cand c = {.nodes = {i, r}, .n = 2, .kind = GCC_GROUP_GEMM, .epi = GCC_EPI_DRELU};
    int s = bias_sum_of(g, g->nodes[r].outputs[0]);
    if (s >= 0) {
      c.nodes[c.n++] = s;
      c.epi = GCC_EPI_DRELU_BGRAD;
      if (!placeable(g, &c)) {
        c.n = 2;
        c.epi = GCC_EPI_DRELU;
      }
    }
    if (placeable(g, &c))
      GCC_TRY(commit(g, &c, "gemm_", d));
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    if (!is_cuda(g, i) || grouped(g, i) || gcc_lowering_kind_of(g, i) != GCC_LOWER_GEMM)
      continue;
    cand c = {.nodes = {i}, .n = 1, .kind = GCC_GROUP_GEMM, .epi = GCC_EPI_DEFAULT};
    int attrs = lower(g, i)->gemm_attrs;
    int bias = attrs && n->n_inputs > 2 && n->inputs[2] >= 0;
    if (bias) {
      const gcc_shape *cs = &g->values[n->inputs[2]].shape;
      const gcc_shape *ys = &g->values[n->outputs[0]].shape;
      int row = gcc_shape_numel(cs, NULL) == ys->dims[1] &&
                (cs->ndim == 1 || (cs->ndim == 2 && cs->dims[0] == 1)) &&
                g->values[n->inputs[2]].dtype == g->values[n->outputs[0]].dtype;
      if (row && n->av[GEMM_BETA].f == 1.0f) {
        c.epi = GCC_EPI_BIAS;
        int r = only_consumer(g, n->outputs[0]);
        if (r >= 0 && !grouped(g, r) && lower(g, r)->epilogue == GCC_EPIROLE_RELU &&
            g->nodes[r].device == n->device && !kept(g, n->outputs[0])) {
          int aux = 0;
          const gcc_value *y = &g->values[g->nodes[r].outputs[0]];
          for (int j = 0; j < y->n_consumers; j++) { /* a DRELU GEMM reads the mask */
            const gcc_node *u = &g->nodes[y->consumers[j]];
            aux |= lower(g, y->consumers[j])->epilogue == GCC_EPIROLE_RELU_GRAD && u->group >= 0 &&
                   g->groups[u->group].kind == GCC_GROUP_GEMM;
          }
          c.nodes[c.n++] = r;
          c.epi = aux ? GCC_EPI_RELU_AUX_BIAS : GCC_EPI_RELU_BIAS;
          if (!placeable(g, &c)) {
            c.n = 1;
            c.epi = GCC_EPI_BIAS;
          }
        }
      }
    } else if (attrs && n->av[GEMM_TRANS_A].i) {
      /* dW = dY^T X: the bias gradient is the column sums of dY (operand A) */
      int s = bias_sum_of(g, n->inputs[0]);
      const gcc_shape *ys = &g->values[n->outputs[0]].shape;
      if (s >= 0 && !(ys->ndim == 2 && ys->dims[0] == 1)) { /* cuBLASLt: no BGRADB with n = 1 */
        c.nodes[c.n++] = s;
        c.epi = GCC_EPI_BGRADA;
        if (!placeable(g, &c)) {
          c.n = 1;
          c.epi = GCC_EPI_DEFAULT;
        }
      }
    }
    GCC_TRY(commit(g, &c, "gemm_", d));
  }
  return GCC_OK;
}

static int pointwise(const gcc_graph *g, int node) {
  return gcc_lowering_kind_of(g, node) == GCC_LOWER_POINTWISE; /* not one `fits` refuses */
}

static gcc_status fuse_pointwise(gcc_graph *g, gcc_diag *d) {
  cand *open = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *open);
  int *where = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *where);
  int n_open = 0;
  if (!open || !where) {
    free(open);
    free(where);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (fusion)");
  }
  for (int i = 0; i < g->n_nodes; i++)
    where[i] = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    int red = lower(g, i)->kind == GCC_LOWER_REDUCTION;
    if (!is_cuda(g, i) || grouped(g, i) || (!pointwise(g, i) && !red))
      continue;
    int joined = -1;
    for (int k = 0; k < n->n_inputs && joined < 0; k++) {
      int v = n->inputs[k];
      if (v < 0)
        continue;
      int p = g->values[v].producer;
      if (p < 0 || where[p] < 0 || only_consumer(g, v) != i || kept(g, v))
        continue;
      cand *c = &open[where[p]];
      /* at most 32 nodes: a kernel then has at most 33 operands (emit.c) */
      if (c->closed || c->n >= 32 || g->nodes[p].device != n->device)
        continue;
      if (!red && !gcc_shape_equal(&g->values[v].shape, &g->values[n->outputs[0]].shape))
        continue;
      c->nodes[c->n++] = i;
      if (placeable(g, c)) {
        joined = where[p];
        c->closed = red;
      } else {
        c->n--;
      }
    }
    if (joined < 0) {
      joined = n_open++;
      open[joined].nodes[0] = i;
      open[joined].n = 1;
      open[joined].kind = GCC_GROUP_POINTWISE;
      open[joined].closed = red;
    }
    where[i] = joined;
  }
  gcc_status s = GCC_OK;
  for (int j = 0; j < n_open && s == GCC_OK; j++)
    s = commit(g, &open[j], "fused_", d);
  free(open);
  free(where);
  return s;
}

gcc_status gcc_pass_fusion(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  (void)opt;
  gcc_graph_clear_groups(g);
  GCC_TRY(gcc_graph_link(g, d));
  int any = 0;
  for (int i = 0; i < g->n_nodes; i++)
    any |= is_cuda(g, i);
  if (!any)
    return GCC_OK; /* the CPU backend runs nodes one by one */
  GCC_TRY(fuse_optimizers(g, d));
  GCC_TRY(fuse_losses(g, d));
  GCC_TRY(fuse_gemms(g, d));
  GCC_TRY(fuse_conv_relu(g, d));
  GCC_TRY(fuse_pointwise(g, d));
  for (int i = 0; i < g->n_nodes; i++) { /* the rest: one group each */
    gcc_lowering_kind k = gcc_lowering_kind_of(g, i);
    if (!is_cuda(g, i) || grouped(g, i) || k == GCC_LOWER_VIEW)
      continue;
    cand c = {.nodes = {i}, .n = 1};
    c.kind = k == GCC_LOWER_COPY                               ? GCC_GROUP_COPY
             : k == GCC_LOWER_GEMM                             ? GCC_GROUP_GEMM
             : k == GCC_LOWER_LIBRARY                          ? GCC_GROUP_CUDNN
             : k == GCC_LOWER_LOSS || k == GCC_LOWER_LOSS_GRAD ? GCC_GROUP_LOSS
                                                               : GCC_GROUP_POINTWISE;
    /* a KERNEL node is a pointwise group of one: emit.c gives it its kernel */
    GCC_TRY(commit(g, &c,
                   c.kind == GCC_GROUP_COPY    ? "copy_"
                   : c.kind == GCC_GROUP_CUDNN ? "cudnn_"
                                               : "k_",
                   d));
  }
  return GCC_OK;
}
