/* plan.c - the plan runner (plan.h): one plan type for every device; the nodes on the CPU run
 * through the CPU backend one by one, the groups on a CUDA device through that device's backend.
 * This file compiles and frees plans; runtime/plan_run.c runs their steps. */
#include "runtime/plan.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lowering.h"
#include "codegen/program_split.h"
#include "graph/half.h"
#include "graph/ops.h"
#include "passes/memplan.h"
#include "runtime/comm.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/plan_internal.h"

static size_t up(size_t x) {
  return (x + DALIGN - 1) / DALIGN * DALIGN;
}

/* ---- the out-of-memory message ---------------------------------------- */

static gcc_status oom(gcc_plan *p, size_t want, const char *what, gcc_diag *d) {
  size_t fr = 0, tot = 0;
  gcc_diag ignore = {0};
  if (p->be.mem_info)
    p->be.mem_info(p->be.self, &fr, &tot, &ignore);
  /* the five largest device values */
  const gcc_graph *g = p->g;
  int top[5] = {-1, -1, -1, -1, -1};
  for (int v = 0; v < g->n_values; v++) {
    if (!GCC_DEV_IS_CUDA(g->values[v].device) || g->values[v].producer < 0 || p->mem.root[v] != v)
      continue;
    size_t b = gcc_plan_value_bytes_(g, v);
    for (int j = 0; j < 5; j++)
      if (top[j] < 0 || b > gcc_plan_value_bytes_(g, top[j])) {
        memmove(&top[j + 1], &top[j], (size_t)(4 - j) * sizeof(int));
        top[j] = v;
        break;
      }
  }
  char list[700] = "";
  for (int j = 0; j < 5 && top[j] >= 0; j++) {
    char item[160];
    snprintf(item, sizeof item, "%s%s %zu", j ? ", " : "", g->values[top[j]].name,
             gcc_plan_value_bytes_(g, top[j]));
    strncat(list, item, sizeof list - strlen(list) - 1);
  }
  char dev[32];
  return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                      "%s: out of memory on %s: %s needs %zu bytes; %zu of %zu bytes are free "
                      "(largest values of the step, bytes: %s; the per-step arena is %zu bytes; "
                      "try a smaller --batch-size)",
                      g->source, gcc_dev_name(p->device, dev, sizeof dev), what, want, fr, tot,
                      list[0] ? list : "none",
                      p->mem.n_devices > p->device ? p->mem.device_bytes[p->device] : 0);
}

/* ---- compile ------------------------------------------------------------ */

static int is_copy(const gcc_graph *g, int node) {
  return (gcc_op(g->nodes[node].op)->flags & GCC_OPF_COPY) != 0;
}

static gcc_status add_op(gcc_plan *p, const op *o, gcc_diag *d) {
  op *n = realloc(p->ops, (size_t)(p->n_ops + 1) * sizeof *n);
  if (!n)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  p->ops = n;
  p->ops[p->n_ops++] = *o;
  return GCC_OK;
}

/* the optimizer group's parameters, gradients and state must be
 * consecutive in group order, each padded to GCC_ARENA_ALIGN (emit.h) */
/* Data-parallel: the AllReduce buckets whose gradients kernel group `gr`
 * reads (an optimizer's, fp16 loss scaling's check; not gradients the group
 * makes itself), appended (each once) to p->waits; *n: how many. */
static gcc_status optimizer_waits(gcc_plan *p, const gcc_group *gr, int *n, gcc_diag *d) {
  const gcc_graph *g = p->g;
  *n = 0;
  for (int j = 0; j < gr->n_nodes; j++)
    for (int in = 0; in < g->nodes[gr->nodes[j]].n_inputs; in++) {
      const gcc_node *u = &g->nodes[gr->nodes[j]];
      if (u->inputs[in] < 0 || g->values[u->inputs[in]].kind != GCC_VALUE_GRAD)
        continue;
      const gcc_value *grad = &g->values[u->inputs[in]];
      if (grad->producer >= 0 && g->nodes[grad->producer].group == (int)(gr - g->groups))
        continue; /* made in this launch: before its all-reduce */
      for (int c = 0; c < grad->n_consumers; c++) {
        const gcc_node *ar = &g->nodes[grad->consumers[c]];
        if (!(gcc_op(ar->op)->flags & GCC_OPF_COLLECTIVE))
          continue;
        int bucket = (int)ar->av[ALL_REDUCE_BUCKET].i, seen = 0;
        for (int k = p->n_waits - *n; k < p->n_waits; k++)
          seen |= p->waits[k] == bucket;
        if (seen)
          continue;
        int *w = realloc(p->waits, (size_t)(p->n_waits + 1) * sizeof *w);
        if (!w)
          return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
        p->waits = w;
        p->waits[p->n_waits++] = bucket;
        (*n)++;
      }
    }
  return GCC_OK;
}

static gcc_status check_optimizer_layout(gcc_plan *p, const gcc_group *gr, gcc_diag *d) {
  const gcc_graph *g = p->g;
  const gcc_node *n0 = &g->nodes[gr->nodes[0]];
  for (int k = 0; k < n0->n_inputs; k++) {
    /* the flat sections: the parameter and what belongs to it (not the
     * loss-scaling scalars every update of the group shares) */
    const gcc_value *v0 = n0->inputs[k] >= 0 ? &g->values[n0->inputs[k]] : NULL;
    if (!v0 || (v0->kind != GCC_VALUE_PARAM && v0->param_of < 0))
      continue;
    char *base = p->addr[n0->inputs[k]];
    size_t off = 0;
    for (int i = 0; i < gr->n_nodes; i++) {
      const gcc_node *n = &g->nodes[gr->nodes[i]];
      int v = n->inputs[k];
      if (!base || v < 0 || (char *)p->addr[v] != base + off)
        return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                            "%s: optimizer kernel '%s': '%s' is not where the flat section "
                            "layout puts it (parameters, gradients and state of one optimizer "
                            "group must be consecutive in group order)",
                            g->source, gr->name, v >= 0 ? g->values[v].name : "?");
      size_t b = gcc_plan_value_bytes_(g, v);
      off += (b + GCC_ARENA_ALIGN - 1) / GCC_ARENA_ALIGN * GCC_ARENA_ALIGN;
    }
  }
  if (n0->n_outputs == 0)
    return GCC_OK;
  /* the 16-bit copies: at the parameters' element offsets (GCC_KARG_PARAM_COPY) */
  char *base = p->addr[n0->outputs[0]];
  size_t elems = 0;
  for (int i = 0; i < gr->n_nodes; i++) {
    const gcc_node *n = &g->nodes[gr->nodes[i]];
    int v = n->n_outputs > 0 ? n->outputs[0] : -1;
    if (!base || v < 0 || (char *)p->addr[v] != base + elems * gcc_dtype_size(g->values[v].dtype))
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: optimizer kernel '%s': the 16-bit copy '%s' is not at its "
                          "parameter's element offset in the copy section",
                          g->source, gr->name, v >= 0 ? g->values[v].name : "?");
    elems += (gcc_plan_value_bytes_(g, n->inputs[0]) + GCC_ARENA_ALIGN - 1) / GCC_ARENA_ALIGN *
             GCC_ARENA_ALIGN / sizeof(float);
  }
  return GCC_OK;
}

static gcc_status check_flat_inputs(gcc_plan *p, const gcc_kernel_info *k, gcc_diag *d) {
  const gcc_graph *g = p->g;
  const gcc_node *n = &g->nodes[g->groups[k->group].nodes[0]];
  char *base = n->n_inputs > 0 ? p->addr[n->inputs[gcc_plan_flat_first_(g, n)]] : NULL;
  size_t off = 0;
  for (int j = gcc_plan_flat_first_(g, n); j < n->n_inputs; j++) {
    int v = n->inputs[j];
    if (!base || v < 0 || (char *)p->addr[v] != base + off)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: kernel '%s': '%s' is not where the flat gradient section puts it "
                          "(the gradients it reads must be consecutive in input order)",
                          g->source, k->name, v >= 0 ? g->values[v].name : "?");
    off += (gcc_plan_value_bytes_(g, v) + GCC_ARENA_ALIGN - 1) / GCC_ARENA_ALIGN * GCC_ARENA_ALIGN;
  }
  return GCC_OK;
}

/* A float32 shadow of value `v` replacing the tensor at *slot (an argument
 * of a CPU node). */
static gcc_status add_shadow(gcc_plan *p, gcc_tensor **slot, int v, int out, gcc_diag *d) {
  shadow **ns = realloc(p->shadows, (size_t)(p->n_shadows + 1) * sizeof *ns);
  if (!ns)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
  p->shadows = ns;
  shadow *s = calloc(1, sizeof *s);
  int64_t n = gcc_shape_numel(&p->g->values[v].shape, NULL);
  if (s)
    s->t.data = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!s || !s->t.data) {
    free(s);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
  }
  s->t.dtype = GCC_DT_FLOAT32;
  s->t.shape = p->g->values[v].shape;
  s->t.numel = n;
  s->real = *slot;
  s->out = out;
  p->shadows[p->n_shadows++] = s;
  *slot = &s->t;
  return GCC_OK;
}

static gcc_status build_ops(gcc_plan *p, gcc_diag *d) {
  gcc_graph *g = p->g;
  int n_args = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n_args += g->nodes[i].n_inputs + g->nodes[i].n_outputs;
  p->ptrs = calloc((size_t)(n_args ? n_args : 1), sizeof *p->ptrs);
  if (!p->ptrs)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  gcc_tensor **ptr = p->ptrs;
  int device_work = 0, cleared = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    const gcc_op_desc *od = gcc_op(n->op);
    if (od->flags & GCC_OPF_ALIAS)
      continue;
    if (is_copy(g, i) && (GCC_DEV_IS_CUDA(g->values[n->inputs[0]].device) ||
                          GCC_DEV_IS_CUDA(g->values[n->outputs[0]].device))) {
      /* a host-device copy (a copy on the host is a CPU node) */
      int src = n->inputs[0], dst = n->outputs[0];
      int input_copy_node = 0, rb = 0;
      for (int k = 0; k < p->n_inputs; k++)
        input_copy_node |= p->inputs[k].dst == dst;
      for (int k = 0; k < p->n_rb; k++)
        rb |= p->rb[k].dst == dst;
      if (input_copy_node || rb || n->av[COPY_ONCE].i)
        continue; /* issued around the step, or once at compile */
      int sd = g->values[src].device, dd = g->values[dst].device;
      op o = {.kind = OP_COPY,
              .src = src,
              .dst = dst,
              .node = i,
              .bytes = gcc_plan_value_bytes_(g, src)};
      o.ck = GCC_DEV_IS_CUDA(sd) && GCC_DEV_IS_CUDA(dd) ? GCC_COPY_D2D
             : GCC_DEV_IS_CUDA(dd)                      ? GCC_COPY_H2D
                                                        : GCC_COPY_D2H;
      GCC_TRY(add_op(p, &o, d));
      device_work = 1;
      continue;
    }
    if (n->device == GCC_DEV_CPU) {
      op o = {.kind = OP_NODE, .node = i, .needs_sync = device_work, .site = -1};
      o.cpu.node = n;
      o.cpu.ctx = &p->ctx;
      o.cpu.in = ptr;
      o.cpu.n_in = n->n_inputs;
      for (int k = 0; k < n->n_inputs; k++)
        *ptr++ = n->inputs[k] >= 0 ? &p->tensors[n->inputs[k]] : NULL;
      o.cpu.out = ptr;
      o.cpu.n_out = n->n_outputs;
      for (int k = 0; k < n->n_outputs; k++)
        *ptr++ = &p->tensors[n->outputs[k]];
      o.sh_first = p->n_shadows;
      if (!gcc_cpu_op_of(n->op)->reads_16bit) { /* float32 stand-ins for 16-bit operands */
        gcc_tensor **args = ptr - n->n_inputs - n->n_outputs;
        for (int k = 0; k < n->n_inputs + n->n_outputs; k++) {
          int v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
          if (v >= 0 && gcc_dtype_size(g->values[v].dtype) == 2)
            GCC_TRY(add_shadow(p, &args[k], v, k >= n->n_inputs, d));
        }
      }
      o.sh_n = p->n_shadows - o.sh_first;
      if (gcc_cpu_op_of(n->op)->bias_after_16bit && n->n_inputs > 2 && n->inputs[2] >= 0 &&
          gcc_dtype_size(g->values[n->outputs[0]].dtype) == 2) {
        gcc_tensor **args = ptr - n->n_inputs - n->n_outputs;
        o.bias_after = args[2]; /* float32: a shadow (widened before the node) or float32 */
        args[2] = NULL;
      }
      if (p->mem.ws_bytes && p->mem.ws_bytes[i]) { /* im2col scratch in the host arena */
        o.cpu.workspace = (char *)p->host_arena + p->mem.ws_offset[i];
        o.cpu.workspace_bytes = p->mem.ws_bytes[i];
      }
      device_work = 0;
      p->has_cpu_nodes = 1;
      GCC_TRY(add_op(p, &o, d));
      continue;
    }
    if (!p->has_be) {
      char desc[600], dev[32];
      return gcc_diag_set(d, GCC_ERR_DEVICE,
                          "%s: %s is placed on %s, but the plan has no backend for it (a plan "
                          "for the CPU)",
                          g->source, gcc_node_desc(g, i, desc, sizeof desc),
                          gcc_dev_name(n->device, dev, sizeof dev));
    }
    if (n->device != p->device) {
      char dev[32];
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: node '%s' is placed on %s, but a plan runs on one CUDA device",
                          g->source, n->name, gcc_dev_name(n->device, dev, sizeof dev));
    }
    int gi = n->group;
    if (gi < 0)
      return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: node '%s' on the GPU belongs to no group",
                          g->source, n->name);
    const gcc_group *gr = &g->groups[gi];
    if (gcc_group_point(gr) != i)
      continue;
    device_work = 1;
    if (gr->kind == GCC_GROUP_CUDNN) { /* one library call */
      op o = {.kind = OP_LIBRARY, .group = gi, .node = gr->nodes[0]};
      const gcc_node *ln = &g->nodes[gr->nodes[0]];
      if (gcc_op(ln->op)->flags & GCC_OPF_COLLECTIVE) { /* an all-reduce: pointers per run */
        if (!p->be.collective || !p->be.collective_wait || !p->ctx.comm)
          return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                              "%s: node '%s' (AllReduce) needs a communicator and a backend that "
                              "runs collectives (%s has %s)",
                              g->source, ln->name, p->be.name,
                              p->ctx.comm ? "no collective" : "a collective but no communicator");
        if (ln->n_inputs > p->coll_cap) {
          void **cp = realloc(p->coll_ptrs, (size_t)ln->n_inputs * sizeof *cp);
          if (cp)
            p->coll_ptrs = cp;
          int64_t *cn = realloc(p->coll_numel, (size_t)ln->n_inputs * sizeof *cn);
          if (cn)
            p->coll_numel = cn;
          if (!cp || !cn)
            return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
          p->coll_cap = ln->n_inputs;
        }
        p->has_collective = 1;
      }
      GCC_TRY(add_op(p, &o, d));
      continue;
    }
    if (gr->kind == GCC_GROUP_GEMM) {
      op o = {.kind = OP_GEMM, .group = gi};
      GCC_TRY(gcc_gemm_map(g, gi, &o.gemm, d));
      GCC_TRY(add_op(p, &o, d));
      continue;
    }
    int k0 = -1, k1 = -1; /* the group's kernels, consecutive, in launch order (emit.h) */
    for (int j = 0; j < p->ks.n_kernels; j++)
      if (p->ks.kernels[j].group == gi) {
        k0 = k0 < 0 ? j : k0;
        k1 = j;
      }
    if (k0 < 0)
      return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: group '%s' has no generated kernel", g->source,
                          gr->name);
    int wait_first = p->n_waits, n_wait = 0; /* the buckets of the grads it reads, each once */
    GCC_TRY(optimizer_waits(p, gr, &n_wait, d));
    for (int k = k0; k < k1; k++) { /* the earlier phases: buffers (GradNorm's flat gradients) */
      for (int a = 0; a < p->ks.kernels[k].n_args; a++) {
        gcc_karg_kind kk = p->ks.kernels[k].args[a].kind;
        if (kk == GCC_KARG_BAD_LABEL && !cleared) { /* a loss's rows kernel */
          op c = {.kind = OP_CLEAR_BAD_LABEL};
          GCC_TRY(add_op(p, &c, d));
          cleared = p->has_loss_kernel = 1;
        }
        if (kk == GCC_KARG_STEP) /* Philox's counter (AttentionGrad's _kv kernel) */
          p->varying_args |= 2;
        else if (kk == GCC_KARG_FLAT_INPUTS)
          GCC_TRY(check_flat_inputs(p, &p->ks.kernels[k], d));
        else if (kk != GCC_KARG_INPUT && kk != GCC_KARG_OUTPUT && kk != GCC_KARG_SCRATCH &&
                 kk != GCC_KARG_BAD_LABEL)
          return gcc_diag_set(d, GCC_ERR_INTERNAL,
                              "%s: kernel '%s' of group '%s' runs before the group's last and "
                              "takes argument '%s', which only a last kernel may take",
                              g->source, p->ks.kernels[k].name, gr->name,
                              p->ks.kernels[k].args[a].name);
      }
      op o = {.kind = OP_KERNEL, .kernel = k, .group = gi, .wait_first = wait_first};
      o.n_wait = k == k0 ? n_wait : 0; /* the first kernel waits */
      GCC_TRY(add_op(p, &o, d));
    }
    int k = k1;
    if (gr->kind == GCC_GROUP_OPTIMIZER)
      GCC_TRY(check_optimizer_layout(p, gr, d));
    for (int a = 0; a < p->ks.kernels[k].n_args; a++) {
      gcc_karg_kind kk = p->ks.kernels[k].args[a].kind;
      if (kk == GCC_KARG_FLAT_INPUTS)
        GCC_TRY(check_flat_inputs(p, &p->ks.kernels[k], d));
      if (kk == GCC_KARG_STEP_SIZE || kk == GCC_KARG_BC2_SQRT)
        p->varying_args |= 1;
      if (kk == GCC_KARG_STEP)
        p->varying_args |= 2;
      if (kk == GCC_KARG_BAD_LABEL && !cleared) {
        op c = {.kind = OP_CLEAR_BAD_LABEL};
        GCC_TRY(add_op(p, &c, d));
        cleared = p->has_loss_kernel = 1;
      }
    }
    op o = {.kind = OP_KERNEL, .kernel = k, .group = gi, .wait_first = wait_first};
    o.n_wait = k0 < k1 ? 0 : n_wait;
    if (gr->kind == GCC_GROUP_OPTIMIZER) /* each tensor padded to GCC_ARENA_ALIGN (emit.h) */
      for (int j = 0; j < gr->n_nodes; j++)
        o.numel += (long long)((gcc_plan_value_bytes_(g, g->nodes[gr->nodes[j]].inputs[0]) +
                                GCC_ARENA_ALIGN - 1) /
                               GCC_ARENA_ALIGN * GCC_ARENA_ALIGN / 4);
    GCC_TRY(add_op(p, &o, d));
  }
  return GCC_OK;
}

/* The name of op `o` in NVTX ranges and profiles: the node or group it
 * runs, and what runs it. */
static char *op_label(const gcc_plan *p, const op *o) {
  const gcc_graph *g = p->g;
  char buf[700];
  switch (o->kind) {
  case OP_KERNEL: snprintf(buf, sizeof buf, "%s (kernel)", p->ks.kernels[o->kernel].name); break;
  case OP_GEMM:
    snprintf(buf, sizeof buf, "%s (cuBLASLt %s)", g->groups[o->gemm.group].name,
             gcc_epilogue_name(o->gemm.epilogue));
    break;
  case OP_EPILOGUE:
    snprintf(buf, sizeof buf, "%s (epilogue kernel %s, %s not offered)", g->groups[o->group].name,
             p->epi_ks.kernels[o->kernel].name, gcc_epilogue_name(o->gemm.epilogue));
    break;
  case OP_LIBRARY:
  case OP_NODE:
    snprintf(buf, sizeof buf, "%s (%s)", g->nodes[o->node].name, gcc_op_name(g->nodes[o->node].op));
    break;
  case OP_COPY:
    snprintf(buf, sizeof buf, "%s (%s, %zu bytes)", g->nodes[o->node].name,
             o->ck == GCC_COPY_H2D   ? "H2D"
             : o->ck == GCC_COPY_D2H ? "D2H"
                                     : "D2D",
             o->bytes);
    break;
  case OP_CLEAR_BAD_LABEL: snprintf(buf, sizeof buf, "clear the bad-label flag (memset)"); break;
  }
  return strdup(buf);
}

static gcc_status label_ops(gcc_plan *p, gcc_diag *d) {
  p->labels = calloc((size_t)(p->n_ops ? p->n_ops : 1), sizeof *p->labels);
  if (!p->labels)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
  for (int i = 0; i < p->n_ops; i++)
    if (!(p->labels[i] = op_label(p, &p->ops[i])))
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
  return GCC_OK;
}

static void count_work(gcc_plan *p) {
  p->launches = p->copies = 0;
  for (int i = 0; i < p->n_ops; i++) {
    p->launches += p->ops[i].kind == OP_KERNEL || p->ops[i].kind == OP_GEMM ||
                   p->ops[i].kind == OP_LIBRARY || p->ops[i].kind == OP_EPILOGUE;
    p->copies += p->ops[i].kind == OP_COPY;
  }
  p->copies += p->n_inputs + p->n_rb;
}

static gcc_status compile_and_load(gcc_plan *p, const gcc_kernel_set *ks, const char *prog,
                                   void **module, void **kernels, gcc_diag *d);

/* The alignment cuBLASLt may assume for value `v`: the least over the
 * addresses it takes (an input copy has one per slot). */
static unsigned operand_alignment(const gcc_plan *p, int v) {
  if (v < 0)
    return 256;
  unsigned a0 = gcc_lt_alignment(gcc_plan_ptr_of_(p, v, 0)),
           a1 = gcc_lt_alignment(gcc_plan_ptr_of_(p, v, 1));
  return a0 < a1 ? a0 : a1;
}

static int lives_in_slot(const gcc_plan *p, int v) {
  return v >= 0 && p->slot_of[v] >= 0;
}

/* What the runner tells gemm_prepare about matmul `m`'s operands. */
static gcc_gemm_operands operands_of(const gcc_plan *p, const gcc_colmajor_gemm *m) {
  gcc_gemm_operands o = {0};
  o.bias = m->bias_value >= 0 ? gcc_plan_ptr_of_(p, m->bias_value, 0) : NULL;
  o.aux = m->aux_group >= 0 ? (char *)p->dev + p->aux_off[m->aux_group] : NULL;
  o.align_a = operand_alignment(p, m->a_value);
  o.align_b = operand_alignment(p, m->b_value);
  o.align_c = operand_alignment(p, m->c_value);
  o.align_d = operand_alignment(p, m->d_value);
  return o;
}

/* Prepares every GEMM of the plan on the backend with its real operands
 * (gemm_prepare). A GEMM whose epilogue cuBLASLt offers no algorithm for
 * (GCC_ERR_UNSUPPORTED), or whose epilogue pointer would change with the
 * input slot, runs as the plain GEMM followed by a generated kernel doing
 * the epilogue's work (gcc_codegen_gemm_epilogues), compiled and loaded
 * here. A ReLU bit-mask is then written and read by generated kernels
 * only: when one GEMM of a mask (the forward RELU_AUX_BIAS, a backward
 * DRELU) falls back, so do the others of that mask. */
static gcc_status prepare_gemms(gcc_plan *p, gcc_diag *d) {
  const gcc_graph *g = p->g;
  int n_gemm = 0;
  for (int i = 0; i < p->n_ops; i++)
    n_gemm += p->ops[i].kind == OP_GEMM;
  if (n_gemm == 0)
    return GCC_OK;
  op *ops = calloc((size_t)(p->n_ops + n_gemm), sizeof *ops);
  gcc_epilogue_work *work = calloc((size_t)n_gemm, sizeof *work);
  char *refused = calloc((size_t)p->n_ops, 1);
  char *mask_refused = calloc((size_t)(g->n_groups ? g->n_groups : 1), 1);
  char(*why)[sizeof((gcc_diag *)0)->msg] = calloc((size_t)p->n_ops, sizeof *why);
  gcc_status st = GCC_OK;
  p->fb_group = calloc((size_t)n_gemm, sizeof *p->fb_group);
  p->fb_epilogue = calloc((size_t)n_gemm, sizeof *p->fb_epilogue);
  p->fb_why = calloc((size_t)n_gemm, sizeof *p->fb_why);
  if (!ops || !work || !refused || !mask_refused || !why || !p->fb_group || !p->fb_epilogue ||
      !p->fb_why)
    st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  /* 1. every GEMM with its epilogue */
  for (int i = 0; i < p->n_ops && st == GCC_OK; i++) {
    op *o = &p->ops[i];
    if (o->kind != OP_GEMM)
      continue;
    gcc_gemm_operands ops_of = operands_of(p, &o->gemm);
    gcc_status ps = GCC_ERR_UNSUPPORTED;
    gcc_diag w = {0};
    if (lives_in_slot(p, o->gemm.bias_value))
      snprintf(w.msg, sizeof w.msg, "its bias changes with the input slot");
    else
      ps = p->be.gemm_prepare(p->be.self, &o->gemm, &ops_of, &o->prepared, &w);
    if (ps == GCC_OK)
      continue;
    if (ps != GCC_ERR_UNSUPPORTED || o->gemm.epilogue == GCC_EPI_DEFAULT) {
      if (d)
        *d = w;
      gcc_diag_prefix(d, "%s: GEMM group '%s': ", g->source, g->groups[o->gemm.group].name);
      st = ps;
      break;
    }
    refused[i] = 1;
    memcpy(why[i], w.msg, sizeof why[i]);
    if (o->gemm.aux_group >= 0)
      mask_refused[o->gemm.aux_group] = 1;
  }
  /* 2. the other GEMMs of a refused GEMM's bit-mask */
  for (int i = 0; i < p->n_ops && st == GCC_OK; i++) {
    op *o = &p->ops[i];
    if (o->kind != OP_GEMM || refused[i] || o->gemm.aux_group < 0 ||
        !mask_refused[o->gemm.aux_group])
      continue;
    p->be.gemm_release(p->be.self, o->prepared);
    o->prepared = NULL;
    refused[i] = 1;
    snprintf(why[i], sizeof why[i], "its ReLU bit-mask is made by a generated kernel");
  }
  /* 3. the plain GEMM, then the epilogue's work in a generated kernel */
  int n = 0, n_work = 0;
  for (int i = 0; i < p->n_ops && st == GCC_OK; i++) {
    ops[n++] = p->ops[i];
    if (!refused[i])
      continue;
    op *o = &ops[n - 1];
    const gcc_colmajor_gemm full = p->ops[i].gemm;
    gcc_colmajor_gemm plain = full;
    plain.epilogue = GCC_EPI_DEFAULT;
    plain.bias_value = -1;
    plain.aux_group = -1;
    plain.aux_ld = 0;
    plain.aux_bytes = 0;
    gcc_gemm_operands plain_ops = operands_of(p, &plain);
    st = p->be.gemm_prepare(p->be.self, &plain, &plain_ops, &o->prepared, d);
    if (st != GCC_OK) {
      gcc_diag_prefix(d, "%s: GEMM group '%s' (%s not offered: %s), the plain GEMM: ", g->source,
                      g->groups[full.group].name, gcc_epilogue_name(full.epilogue), why[i]);
      break;
    }
    p->ops[i].prepared = o->prepared; /* released from p->ops on failure */
    o->gemm = plain;
    p->fb_group[n_work] = full.group;
    p->fb_epilogue[n_work] = (int)full.epilogue;
    snprintf(p->fb_why[n_work], sizeof p->fb_why[n_work], "%s", why[i]);
    gcc_epilogue_work *w = &work[n_work];
    w->kind = (int)full.epilogue;
    w->m = full.m;
    w->n = full.n;
    w->k = full.k;
    w->ldd = full.ldd;
    w->ldb = full.ldb;
    w->aux_ld = full.aux_ld;
    w->trans_b = full.trans_b;
    w->dtype = full.dtype;
    op e = {.kind = OP_EPILOGUE, .kernel = n_work++, .group = full.group, .gemm = full};
    ops[n++] = e;
  }
  if (st == GCC_OK) { /* the handles move to the new list */
    free(p->ops);
    p->ops = ops;
    p->n_ops = n;
    ops = NULL;
    p->n_fallbacks = n_work;
    if (n_work > 0) {
      char dev[32];
      st = gcc_codegen_gemm_epilogues(work, n_work, p->cfg.sm_count, &p->epi_ks, d);
      if (st == GCC_OK && !(p->epi_kernels = calloc((size_t)n_work, sizeof *p->epi_kernels)))
        st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
      if (st == GCC_OK && p->cfg.image)
        st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: cuBLASLt offers no algorithm for %d GEMM epilogue(s) of this "
                          "plan on %s, and the prebuilt kernel image has no kernels for their "
                          "work (this program runs without NVRTC)",
                          g->source, n_work, gcc_dev_name(p->device, dev, sizeof dev));
      if (st == GCC_OK)
        st = compile_and_load(p, &p->epi_ks, "gcc_epilogues.cu", &p->epi_module, p->epi_kernels, d);
    }
  }
  free(ops);
  free(work);
  free(refused);
  free(mask_refused);
  free(why);
  return st; /* on failure the prepared handles in p->ops go with the plan */
}

/* The values the host reads after a step that are computed on the host
 * (the ones copy insertion brings back from a device, gcc_pass_copy_insertion:
 * the loss, in EVAL the prediction; an inference graph's outputs). */
static gcc_status find_host_readbacks(gcc_plan *p, gcc_mode mode, gcc_diag *d) {
  gcc_graph *g = p->g;
  p->hrb = calloc((size_t)(2 + g->n_outputs), sizeof *p->hrb);
  if (!p->hrb)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
  for (int j = 0; j < 2 + g->n_outputs; j++) {
    int v = -1;
    if (j < 2 && g->training.present) {
      const char *name = j == 0                  ? g->training.loss
                         : mode == GCC_MODE_EVAL ? g->training.prediction
                                                 : NULL;
      v = name ? gcc_graph_find(g, name) : -1;
    } else if (j >= 2 && !g->training.present) {
      v = g->outputs[j - 2];
    }
    if (v < 0 || g->values[v].device != GCC_DEV_CPU || g->values[v].producer < 0)
      continue;
    int dup = 0;
    for (int k = 0; k < p->n_hrb; k++)
      dup |= p->hrb[k] == v;
    if (!dup)
      p->hrb[p->n_hrb++] = v;
  }
  return GCC_OK;
}

/* the values read after a step and the graph inputs copied per step */
static gcc_status find_boundary_copies(gcc_plan *p, gcc_diag *d) {
  gcc_graph *g = p->g;
  p->inputs = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *p->inputs);
  p->rb = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *p->rb);
  if (!p->inputs || !p->rb)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    if (!is_copy(g, i) || n->av[COPY_ONCE].i)
      continue;
    int src = n->inputs[0], dst = n->outputs[0];
    if (g->values[src].kind == GCC_VALUE_INPUT && GCC_DEV_IS_CUDA(g->values[dst].device)) {
      input_copy *ic = &p->inputs[p->n_inputs++];
      ic->src = src;
      ic->dst = dst;
      ic->bytes = gcc_plan_value_bytes_(g, src);
    } else if (GCC_DEV_IS_CUDA(g->values[src].device) && g->values[dst].device == GCC_DEV_CPU &&
               g->values[dst].n_consumers == 0) {
      readback *r = &p->rb[p->n_rb++];
      r->src = src;
      r->dst = dst;
      r->kept = src;
      r->bytes = gcc_plan_value_bytes_(g, src);
    }
  }
  return GCC_OK;
}

/* NVRTC through the caller's hook: a program that only runs prebuilt
 * images (gcc-run) links no compiler */
gcc_status gcc_plan_compile_kernels_(const gcc_plan *p, const char *source, const char *program,
                                     gcc_nvrtc_output *out, gcc_diag *d) {
  if (!p->cfg.compile)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: the plan needs generated kernels, and this program has no kernel "
                        "compiler (only prebuilt kernel images)",
                        p->g->source);
  return p->cfg.compile(p->cfg.compile_user, source, program, p->cfg.sm, out, d);
}

/* Where kernel i of `ks` comes from, for messages: its group and the
 * group's first node (a refused epilogue's kernel: its GEMM group). */
static void kernel_where(const gcc_plan *p, const gcc_kernel_set *ks, int i, char *buf,
                         size_t cap) {
  const gcc_graph *g = p->g;
  const gcc_kernel_info *k = &ks->kernels[i];
  /* a kernel of ks or of one of its programs (compile_and_load_programs) */
  int main_set = ks == &p->ks || (p->ks.n_kernels > 0 && ks->kernels >= p->ks.kernels &&
                                  ks->kernels < p->ks.kernels + p->ks.n_kernels);
  int gi = main_set ? k->group : ks == &p->epi_ks && p->fb_group ? p->fb_group[i] : -1;
  if (gi < 0 || gi >= g->n_groups) {
    snprintf(buf, cap, "kernel %s (%s)", k->name,
             ks == &p->gather_ks ? "the dataset row gather of --dataset-on-device"
                                 : "a generated kernel");
    return;
  }
  const gcc_group *gr = &g->groups[gi];
  char desc[600];
  snprintf(buf, cap, "kernel %s (%sgroup '%s', %s)", k->name,
           ks == &p->epi_ks ? "the epilogue of GEMM " : "", gr->name,
           gr->n_nodes > 0 ? gcc_node_desc(g, gr->nodes[0], desc, sizeof desc) : "no node");
}

/* Every launch of the kernels of `ks` (loaded as kernels[]) against the
 * device's limits (launch_limits: the kernel's maxThreadsPerBlock, the
 * device's grid and block dimensions, the dynamic shared memory it may
 * get), when the plan is built: a launch past them fails on a GPU only
 * when it is issued (cudaErrorInvalidConfiguration / InvalidValue), and in
 * a CUDA Graph capture only when the capture ends. Kernels are launched
 * with grid (grid_dim, 1, 1) and block (block_dim, 1, 1). */
static gcc_status check_launches(const gcc_plan *p, const gcc_kernel_set *ks, void **kernels,
                                 gcc_diag *d) {
  if (!p->be.launch_limits)
    return GCC_OK;
  char dev[32];
  gcc_dev_name(p->device, dev, sizeof dev);
  for (int i = 0; i < ks->n_kernels; i++) {
    const gcc_kernel_info *k = &ks->kernels[i];
    gcc_launch_limits lim;
    memset(&lim, 0, sizeof lim);
    GCC_TRY(p->be.launch_limits(p->be.self, kernels[i], &lim, d));
    char what[400] = "";
    int block_max =
        lim.max_threads_per_block < lim.max_block_x ? lim.max_threads_per_block : lim.max_block_x;
    if (k->block_dim < 1 || k->block_dim > block_max)
      snprintf(what, sizeof what,
               "it is launched with %d threads per block, and runs at most %d there (the "
               "kernel's maxThreadsPerBlock %d, the device's block x dimension %d)",
               k->block_dim, block_max, lim.max_threads_per_block, lim.max_block_x);
    else if (k->grid_dim < 1 || k->grid_dim > lim.max_grid_x)
      snprintf(what, sizeof what,
               "it is launched with %d blocks, and the device takes 1 to %d in x "
               "(cudaDevAttrMaxGridDimX)",
               k->grid_dim, lim.max_grid_x);
    else if (k->single_block && k->grid_dim != 1)
      snprintf(what, sizeof what, "it must run as one block and is launched with %d", k->grid_dim);
    else if (k->dynamic_smem > lim.max_dynamic_smem)
      snprintf(what, sizeof what,
               "it asks %zu bytes of dynamic shared memory per block, and at most %zu are "
               "available to it (the device's opt-in maximum less its static shared memory)",
               k->dynamic_smem, lim.max_dynamic_smem);
    if (what[0]) {
      char where[800];
      kernel_where(p, ks, i, where, sizeof where);
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s on %s (sm_%d): %s", p->g->source, where,
                          dev, p->be.arch, what);
    }
  }
  return GCC_OK;
}

/* Chooses the image of `img` (a cubin for sm_`arch` and/or PTX for
 * compute_`arch`) the device runs, by its compute capability and the CUDA
 * binary compatibility rules (as gcc_kernel_image_select does for bundles:
 * a cubin for sm_XY runs on a device of major X and minor >= Y; PTX for
 * compute_XY on any device of arch >= XY), and loads only that one: under
 * lazy module loading a cubin the device cannot run would load and fail
 * only at its first launch. */
gcc_status gcc_plan_load_image_(gcc_plan *p, const gcc_kernel_set *ks, const gcc_nvrtc_output *img,
                                int arch, void **module, void **kernels, gcc_diag *d) {
  char dev[32];
  gcc_dev_name(p->device, dev, sizeof dev);
  if (p->be.arch <= 0)
    return gcc_diag_set(d, GCC_ERR_INTERNAL,
                        "%s: the backend of %s reports no compute capability to choose the "
                        "kernel image by",
                        p->g->source, dev);
  int has_cubin = img->cubin && img->cubin_size > 0, has_ptx = img->ptx && img->ptx_size > 0;
  int dev_arch = p->be.arch;
  int cubin_runs = has_cubin && arch / 10 == dev_arch / 10 && arch % 10 <= dev_arch % 10;
  int ptx_runs = has_ptx && arch <= dev_arch;
  if (!cubin_runs && !ptx_runs) {
    char have[96] = "";
    if (has_cubin)
      snprintf(have, sizeof have, "a cubin for sm_%d", arch);
    if (has_ptx)
      snprintf(have + strlen(have), sizeof have - strlen(have), "%sPTX for compute_%d",
               has_cubin ? " and " : "", arch);
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: the plan's kernels are %s; %s is sm_%d, which runs neither (a cubin "
                        "runs on its major version with an equal or newer minor, PTX on its "
                        "architecture or newer): compile them for sm_%d",
                        p->g->source, has_cubin || has_ptx ? have : "no image", dev, p->be.arch,
                        p->be.arch);
  }
  gcc_nvrtc_output one = {0};
  if (cubin_runs) {
    one.cubin = img->cubin;
    one.cubin_size = img->cubin_size;
  } else {
    one.ptx = img->ptx;
    one.ptx_size = img->ptx_size;
  }
  GCC_TRY(p->be.load(p->be.self, ks, &one, arch, module, kernels, d));
  return check_launches(p, ks, kernels, d);
}

/* The plan's kernels as several NVRTC programs compiled on several threads
 * (codegen/program_split.h), each program's image loaded as a module of its
 * own (p->modules); its kernels are a contiguous run of p->ks. One program
 * (compile_and_load) when the split gives one, or refuses the source, or
 * finds the kernels in another order than the kernel set's. */
static gcc_status compile_and_load_programs(gcc_plan *p, const char *prog, gcc_diag *d) {
  gcc_program_split sp;
  gcc_diag ignore = {0};
  int split = gcc_program_split_source(p->ks.source, &sp, &ignore) == GCC_OK && sp.n_programs > 1 &&
              sp.n_kernels == p->ks.n_kernels;
  for (int k = 0; split && k < sp.n_kernels; k++)
    split = strcmp(sp.kernel_names[k], p->ks.kernels[k].name) == 0;
  if (!split) {
    gcc_program_split_free(&sp);
    return compile_and_load(p, &p->ks, prog, &p->module, p->kernels, d);
  }
  if (!p->cfg.compile) {
    gcc_program_split_free(&sp);
    return gcc_plan_compile_kernels_(p, NULL, prog, NULL, d); /* the "no kernel compiler" error */
  }
  gcc_nvrtc_output *img = calloc((size_t)sp.n_programs, sizeof *img);
  p->modules = calloc((size_t)sp.n_programs, sizeof *p->modules);
  gcc_status s = GCC_OK;
  if (!img || !p->modules)
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  if (s == GCC_OK)
    s = gcc_compile_programs(&sp, prog, p->cfg.sm, p->cfg.compile_threads, p->cfg.compile,
                             p->cfg.compile_user, img, NULL, d);
  for (int i = 0; s == GCC_OK && i < sp.n_programs; i++) {
    const gcc_program *pr = &sp.programs[i];
    gcc_kernel_set view = {sp.programs[i].source, p->ks.kernels + pr->first, pr->count, NULL, 0};
    s = gcc_plan_load_image_(p, &view, &img[i], p->cfg.sm, &p->modules[i], p->kernels + pr->first,
                             d);
    if (p->modules[i])
      p->n_modules = i + 1;
  }
  for (int i = 0; img && i < sp.n_programs; i++)
    gcc_nvrtc_output_free(&img[i]);
  free(img);
  gcc_program_split_free(&sp);
  return s; /* on failure the loaded modules go with the plan */
}

/* The kernel compiler (cfg.compile) for cfg.sm, then load_image. */
static gcc_status compile_and_load(gcc_plan *p, const gcc_kernel_set *ks, const char *prog,
                                   void **module, void **kernels, gcc_diag *d) {
  gcc_nvrtc_output img = {0};
  gcc_status s = gcc_plan_compile_kernels_(p, ks->source, prog, &img, d);
  if (s == GCC_OK)
    s = gcc_plan_load_image_(p, ks, &img, p->cfg.sm, module, kernels, d);
  gcc_nvrtc_output_free(&img);
  return s;
}

static gcc_status load_kernels(gcc_plan *p, const gcc_plan_config *cfg, gcc_diag *d) {
  if (!p->has_be)
    return GCC_OK; /* the CPU runs no generated kernels */
  GCC_TRY(gcc_codegen_emit(p->g, p->device, cfg->sm_count, &p->ks, d));
  if (p->ks.n_kernels == 0)
    return GCC_OK;
  p->kernels = calloc((size_t)p->ks.n_kernels, sizeof *p->kernels);
  if (!p->kernels)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  if (cfg->image) /* prebuilt (an exported bundle): no NVRTC */
    return gcc_plan_load_image_(p, &p->ks, cfg->image,
                                cfg->image_arch > 0 ? cfg->image_arch : cfg->sm, &p->module,
                                p->kernels, d);
  char prog[200];
  snprintf(prog, sizeof prog, "%s.cu", p->g->name && *p->g->name ? p->g->name : "gcc_kernels");
  return compile_and_load_programs(p, prog, d);
}

/* Every library call of the plan (cuDNN) chooses its algorithms now, and
 * the plan's workspace is the largest any of them needs: it lives in the
 * plan's allocation, so graphs captured from this plan never refer to a
 * workspace someone else may free or move. */
static gcc_status prepare_library(gcc_plan *p, gcc_diag *d) {
  if (!p->has_be)
    return GCC_OK;
  const gcc_graph *g = p->g;
  for (int gi = 0; gi < g->n_groups; gi++) {
    const gcc_group *gr = &g->groups[gi];
    if (gr->kind != GCC_GROUP_CUDNN || gr->device != p->device ||
        (gcc_op(g->nodes[gr->nodes[0]].op)->flags & GCC_OPF_COLLECTIVE))
      continue;
    size_t ws = 0;
    GCC_TRY(p->be.library_prepare(p->be.self, g, gr->nodes[0], &ws, d));
    p->ws_bytes = ws > p->ws_bytes ? ws : p->ws_bytes;
  }
  return GCC_OK;
}

/* The plan's device allocation: arena | input slots | bit-masks | constants
 * | bad label | read-back ring; and the pinned staging of the input copies. */
static gcc_status layout_device(gcc_plan *p, gcc_diag *d) {
  gcc_graph *g = p->g;
  int nv = g->n_values;
  size_t *const_off = p->const_off;
  /* device layout: arena | input slots | bit-masks | constants | bad label */
  size_t off = 0;
  const size_t arena = p->mem.n_devices > p->device ? p->mem.device_bytes[p->device] : 0;
  p->off_arena = off;
  if (!p->cfg.share_device_arena) /* else an allocation of its own (device_arena below) */
    off += up(arena);
  size_t *slot_off = p->slot_off =
      calloc((size_t)(p->n_inputs ? p->n_inputs : 1) * 2, sizeof *slot_off);
  if (!slot_off)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  for (int k = 0; k < p->n_inputs; k++)
    for (int s = 0; s < 2; s++) {
      slot_off[2 * k + s] = off;
      off += up(p->inputs[k].bytes);
    }
  p->off_aux = off;
  for (int gi = 0; gi < g->n_groups; gi++) {
    p->aux_off[gi] = SIZE_MAX;
    if (g->groups[gi].kind != GCC_GROUP_GEMM || g->groups[gi].epilogue != GCC_EPI_RELU_AUX_BIAS ||
        g->groups[gi].device != p->device)
      continue;
    gcc_colmajor_gemm m;
    gcc_status s = gcc_gemm_map(g, gi, &m, d);
    if (s != GCC_OK) {
      return s;
    }
    p->aux_off[gi] = off;
    off += up((size_t)m.aux_bytes);
  }
  if (off == 0)
    off = DALIGN; /* const_off 0 means "none" below */
  p->off_const = off;
  for (int v = 0; v < nv; v++) {
    const gcc_value *val = &g->values[v];
    int once_copy =
        val->producer >= 0 && is_copy(g, val->producer) && g->nodes[val->producer].av[COPY_ONCE].i;
    if (GCC_DEV_IS_CUDA(val->device) && (val->kind == GCC_VALUE_CONST || once_copy) &&
        p->mem.root[v] == v && (val->n_consumers > 0 || val->producer >= 0)) {
      const_off[v] = off;
      off += up(gcc_plan_value_bytes_(g, v));
    }
  }
  p->off_bad = off;
  off += DALIGN;
  p->off_ring = off;
  off += up(p->ring_stride * (size_t)p->ring);
  p->off_ws = off;
  off += up(p->ws_bytes);
  for (int i = 0; i < p->ks.n_kernels; i++) /* one region: the kernels run in stream order */
    if (p->ks.kernels[i].scratch_bytes > p->scratch_bytes)
      p->scratch_bytes = p->ks.kernels[i].scratch_bytes;
  p->off_scratch = off;
  off += up(p->scratch_bytes);
  p->dev_bytes = off;
  if (p->cfg.share_device_arena && arena > 0) {
    /* the caller's arena where the memory plan fits, else one of the plan's own */
    p->dev_arena_bytes = arena;
    if (p->cfg.shared_device_arena && arena <= p->cfg.shared_device_arena_bytes) {
      p->dev_arena = p->cfg.shared_device_arena;
    } else {
      gcc_status as = p->be.alloc(p->be.self, up(arena), &p->dev_arena, d);
      if (as == GCC_ERR_OUT_OF_MEMORY)
        return oom(p, up(arena), "the plan's device step arena", d);
      if (as != GCC_OK)
        return as;
      p->dev_arena_owned = 1;
    }
  }
  gcc_status s = p->be.alloc(p->be.self, p->dev_bytes, &p->dev, d);
  if (s == GCC_ERR_OUT_OF_MEMORY || (s != GCC_OK && !p->dev)) {
    if (s == GCC_ERR_OUT_OF_MEMORY) {
      char what[160];
      const char *mem = p->cfg.share_device_arena ? "the plan's device memory beside its step arena"
                                                  : "the plan's device arena";
      snprintf(what, sizeof what, "%s (%zu bytes of it the cuDNN workspace)", mem, p->ws_bytes);
      return oom(p, p->dev_bytes, p->ws_bytes ? what : mem, d);
    }
    return s;
  }
  char *base = p->dev;
  for (int k = 0; k < p->n_inputs; k++)
    for (int sl = 0; sl < 2; sl++) {
      p->inputs[k].slot[sl] = base + slot_off[2 * k + sl];
      GCC_TRY(p->be.host_alloc(p->be.self, p->inputs[k].bytes ? p->inputs[k].bytes : 1,
                               &p->inputs[k].staging[sl], d));
    }
  return GCC_OK;
}

static gcc_status layout_and_allocate(gcc_plan *p, gcc_bind_fn bind, void *user, gcc_diag *d) {
  gcc_graph *g = p->g;
  int nv = g->n_values;
  p->addr = calloc((size_t)(nv ? nv : 1), sizeof *p->addr);
  p->slot_of = malloc((size_t)(nv ? nv : 1) * sizeof *p->slot_of);
  p->tensors = calloc((size_t)(nv ? nv : 1), sizeof *p->tensors);
  p->aux_off = malloc((size_t)(g->n_groups ? g->n_groups : 1) * sizeof *p->aux_off);
  if (!p->addr || !p->slot_of || !p->tensors || !p->aux_off)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  for (int v = 0; v < nv; v++)
    p->slot_of[v] = -1;
  size_t *const_off = p->const_off = calloc((size_t)(nv ? nv : 1), sizeof *const_off);
  if (!const_off)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  if (p->has_be)
    GCC_TRY(layout_device(p, d));
  char *base = p->dev;
  /* the activations on the device: the arena apart (cfg.share_device_arena), or in `dev` */
  char *dev_arena = p->dev_arena ? (char *)p->dev_arena : base ? base + p->off_arena : NULL;
  /* the host arena of the CPU nodes: the caller's shared one where the
   * memory plan fits in it, else one of its own from the CPU backend */
  if (p->cfg.shared_host_arena && p->mem.arena_bytes <= p->cfg.shared_host_arena_bytes) {
    p->host_arena = p->cfg.shared_host_arena;
  } else {
    if (p->cpu->alloc(p->cpu->self, p->mem.arena_bytes, &p->host_arena, d) != GCC_OK)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                          "out of memory: the per-step arena needs %zu bytes", p->mem.arena_bytes);
    p->host_arena_owned = 1;
  }
  for (int v = 0; v < nv; v++) {
    const gcc_value *val = &g->values[v];
    gcc_tensor *t = &p->tensors[v];
    t->dtype = val->dtype;
    t->shape = val->shape;
    t->numel = gcc_shape_numel(&val->shape, NULL);
    if (p->mem.root[v] != v)
      continue;
    int cuda = GCC_DEV_IS_CUDA(val->device);
    switch (val->kind) {
    case GCC_VALUE_ACTIVATION:
      if (const_off[v])
        p->addr[v] = base + const_off[v];
      else if (p->mem.offset[v] >= 0)
        p->addr[v] = cuda ? (void *)(dev_arena + p->mem.offset[v])
                          : (void *)((char *)p->host_arena + p->mem.offset[v]);
      break;
    case GCC_VALUE_CONST: p->addr[v] = cuda ? (void *)(base + const_off[v]) : val->data; break;
    case GCC_VALUE_PARAM:
    case GCC_VALUE_GRAD:
    case GCC_VALUE_OPT_STATE:
      if (!cuda && p->has_be && (p->mem.last[v] >= 0 || val->producer >= 0)) {
        return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                            "%s: %s '%s' is placed on the CPU inside a CUDA plan; pin its "
                            "layer to the GPU or run the whole model with --device cpu",
                            g->source, gcc_value_kind_name(val->kind), val->name);
      }
      p->addr[v] = bind ? bind(user, g, v) : NULL;
      if (!p->addr[v] && (p->mem.last[v] >= 0 || val->producer >= 0)) {
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: no persistent storage for %s '%s'", g->source,
                            gcc_value_kind_name(val->kind), val->name);
      }
      break;
    default: break;
    }
  }
  for (int k = 0; k < p->n_inputs; k++)
    p->slot_of[p->inputs[k].dst] = k;
  for (int v = 0; v < nv; v++)
    if (p->mem.root[v] != v) {
      p->addr[v] = p->addr[p->mem.root[v]];
      p->slot_of[v] = p->slot_of[p->mem.root[v]];
    }
  for (int v = 0; v < nv; v++)
    p->tensors[v].data = p->addr[v];
  /* constants: upload once */
  gcc_status st = GCC_OK;
  for (int v = 0; v < nv && st == GCC_OK; v++) {
    const gcc_value *val = &g->values[v];
    if (!const_off[v])
      continue;
    const void *src = val->data;
    if (val->producer >= 0) /* a once-copy: its source's data */
      src = g->values[g->nodes[val->producer].inputs[0]].data;
    if (!src) {
      st = gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: constant '%s' has no data to upload", g->source,
                        val->name);
      break;
    }
    void *stage = NULL;
    size_t b = gcc_plan_value_bytes_(g, v);
    st = p->be.host_alloc(p->be.self, b ? b : 1, &stage, d);
    if (st == GCC_OK) {
      memcpy(stage, src, b);
      st = p->be.copy(p->be.self, base + const_off[v], stage, b, GCC_COPY_H2D, GCC_STREAM_COMPUTE,
                      d);
      if (st == GCC_OK)
        st = p->be.sync(p->be.self, d);
      p->be.host_release(p->be.self, stage);
    }
  }
  return st;
}

/* an entry of the read-back ring: each read-back value, then the bad-label flag */
static gcc_status ring_layout(gcc_plan *p, gcc_diag *d) {
  p->rb_off = calloc((size_t)(p->n_rb ? p->n_rb : 1), sizeof *p->rb_off);
  p->entry_serial = calloc((size_t)p->ring, sizeof *p->entry_serial);
  if (!p->rb_off || !p->entry_serial)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  size_t off = 0;
  for (int k = 0; k < p->n_rb; k++) {
    p->rb_off[k] = off;
    off += (p->rb[k].bytes + 63) / 64 * 64;
  }
  p->ring_stride = off + 64; /* + the bad-label flag */
  return GCC_OK;
}

static gcc_status allocate_ring(gcc_plan *p, gcc_diag *d) {
  p->rb_tensors = calloc((size_t)p->ring * (size_t)(p->n_rb ? p->n_rb : 1), sizeof *p->rb_tensors);
  if (!p->rb_tensors)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (device plan)");
  if (p->has_be) {
    GCC_TRY(p->be.host_alloc(p->be.self, p->ring_stride * (size_t)p->ring, &p->ring_host, d));
    memset(p->ring_host, GCC_BAD_LABEL_NONE_BYTE, p->ring_stride * (size_t)p->ring);
  }
  for (int e = 0; e < p->ring; e++)
    for (int k = 0; k < p->n_rb; k++) {
      gcc_tensor *t = &p->rb_tensors[e * p->n_rb + k];
      *t = p->tensors[p->rb[k].src];
      t->data = (char *)p->ring_host + (size_t)e * p->ring_stride + p->rb_off[k];
    }
  /* values computed on the host: copied after each step when several steps
   * may be pending, or when another plan may reuse a training plan's arena
   * before they are read (with one entry and an arena of its own, their
   * tensor is the entry) */
  if ((p->ring > 1 || (p->mode == GCC_MODE_TRAIN && p->cfg.share_host_arena)) && p->n_hrb > 0) {
    size_t stride = 0;
    for (int k = 0; k < p->n_hrb; k++)
      stride += (gcc_plan_value_bytes_(p->g, p->hrb[k]) + 63) / 64 * 64;
    size_t n = (size_t)p->ring * (size_t)p->n_hrb;
    p->hring = calloc(1, n * sizeof *p->hring + stride * (size_t)p->ring + 64);
    if (!p->hring)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (read-back ring)");
    char *data = (char *)(p->hring + n);
    data += (64 - (uintptr_t)data % 64) % 64;
    for (int e = 0; e < p->ring; e++)
      for (int k = 0; k < p->n_hrb; k++) {
        gcc_tensor *t = &p->hring[e * p->n_hrb + k];
        *t = p->tensors[p->hrb[k]];
        t->data = data;
        data += (gcc_plan_value_bytes_(p->g, p->hrb[k]) + 63) / 64 * 64;
      }
  }
  return GCC_OK;
}

/* Every node runs on the CPU or on the plan's device, which needs a backend. */
static gcc_status check_devices(const gcc_plan *p, gcc_diag *d) {
  const gcc_graph *g = p->g;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].device != GCC_DEV_CPU && !p->has_be) {
      char desc[600], dev[32];
      return gcc_diag_set(d, GCC_ERR_DEVICE,
                          "%s: %s is placed on %s, but the plan runs on the CPU only (no "
                          "backend for that device)",
                          g->source, gcc_node_desc(g, i, desc, sizeof desc),
                          gcc_dev_name(g->nodes[i].device, dev, sizeof dev));
    }
  return GCC_OK;
}

static gcc_status prepare_cpu_nodes(gcc_plan *p, gcc_diag *d);

gcc_status gcc_plan_compile(const gcc_graph *model, const gcc_options *opt,
                            const gcc_plan_config *cfg, gcc_bind_fn bind, void *user,
                            gcc_plan **out, gcc_diag *d) {
  *out = NULL;
  static const gcc_plan_config kCpuPlan = {0};
  if (!cfg)
    cfg = &kCpuPlan;
  if (cfg->device && !GCC_DEV_IS_CUDA(opt->device))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: a device backend was given for a plan on the CPU", model->source);
  gcc_plan *p = calloc(1, sizeof *p);
  if (!p)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
  p->cpu = gcc_cpu_backend();
  p->has_be = cfg->device != NULL;
  if (p->has_be)
    p->be = *cfg->device;
  p->cfg = *cfg;
  p->device = opt->device;
  p->mode = opt->mode;
  p->ring = cfg->readback_ring > 0 ? cfg->readback_ring : 1;
  p->ctx.max_threads = cfg->threads > 0 ? cfg->threads : 1;
  p->ctx.diag = &p->run_diag;
  p->ctx.comm = cfg->comm;
  gcc_status s = gcc_compile_graph(model, opt, &p->g, &p->mem, d);
  if (s == GCC_OK) {
    p->ctx.source = p->g->source;
    s = check_devices(p, d);
  }
  if (s == GCC_OK)
    s = find_boundary_copies(p, d);
  if (s == GCC_OK)
    s = find_host_readbacks(p, opt->mode, d);
  if (s == GCC_OK)
    s = ring_layout(p, d);
  if (s == GCC_OK)
    s = prepare_library(p, d);
  if (s == GCC_OK)
    s = load_kernels(p, cfg, d);
  if (s == GCC_OK)
    s = layout_and_allocate(p, bind, user, d);
  if (s == GCC_OK)
    s = build_ops(p, d);
  if (s == GCC_OK)
    s = prepare_cpu_nodes(p, d);
  if (s == GCC_OK)
    s = prepare_gemms(p, d);
  if (s == GCC_OK) {
    count_work(p);
    s = allocate_ring(p, d);
  }
  if (s == GCC_OK)
    s = label_ops(p, d);
  if (s != GCC_OK) {
    gcc_plan_free(p);
    return s;
  }
  if (!p->has_be)
    p->graph_note[0] = '\0'; /* nothing to capture on the CPU */
  else if (!cfg->cuda_graph)
    snprintf(p->graph_note, sizeof p->graph_note, "disabled (--no-cuda-graph)");
  else if (p->varying_args)
    snprintf(p->graph_note, sizeof p->graph_note,
             "not used: %s changes kernel arguments every step",
             p->varying_args & 1 ? "Adam's bias correction" : "Dropout's mask (the step)");
  else if (p->has_collective)
    snprintf(p->graph_note, sizeof p->graph_note,
             "not used: the gradient all-reduce's weight (this rank's share) is set per step");
  else if (p->has_cpu_nodes)
    snprintf(p->graph_note, sizeof p->graph_note, "not used: nodes on the CPU run inside the step");
  *out = p;
  return GCC_OK;
}

/* The CPU backend's per-node preparation (its oneDNN primitives, created
 * once here for the nodes' shapes, not per step), then the whole plan's. */
static gcc_status prepare_cpu_nodes(gcc_plan *p, gcc_diag *d) {
  for (int i = 0; i < p->n_ops && p->cpu->prepare_node; i++)
    if (p->ops[i].kind == OP_NODE)
      GCC_TRY(p->cpu->prepare_node(p->cpu->self, &p->ops[i].cpu, d));
  return p->cpu->prepare_done ? p->cpu->prepare_done(p->cpu->self, &p->ctx, d) : GCC_OK;
}

void gcc_plan_free(gcc_plan *p) {
  if (!p)
    return;
  if (p->has_be && (p->dev || p->module || p->n_modules || p->ring_host)) {
    gcc_diag ignore = {0};
    p->be.sync(p->be.self, &ignore);
  }
  /* the graphs first: they refer to this plan's memory, GEMM descriptors
   * and kernels */
  for (int s = 0; s < 2; s++)
    if (p->graph[s])
      p->be.graph_destroy(p->be.self, p->graph[s]);
  for (int i = 0; i < p->n_ops; i++)
    if (p->ops[i].kind == OP_GEMM && p->ops[i].prepared)
      p->be.gemm_release(p->be.self, p->ops[i].prepared);
  for (int k = 0; k < p->n_inputs; k++)
    for (int s = 0; s < 2; s++)
      if (p->inputs[k].staging[s])
        p->be.host_release(p->be.self, p->inputs[k].staging[s]);
  if (p->ring_host)
    p->be.host_release(p->be.self, p->ring_host);
  if (p->dev)
    p->be.release(p->be.self, p->dev);
  if (p->dev_arena && p->dev_arena_owned)
    p->be.release(p->be.self, p->dev_arena);
  if (p->module)
    p->be.unload(p->be.self, p->module);
  for (int i = 0; i < p->n_modules; i++)
    if (p->modules[i])
      p->be.unload(p->be.self, p->modules[i]);
  free(p->modules);
  if (p->gather_module)
    p->be.unload(p->be.self, p->gather_module);
  for (int i = 0; i < p->n_ops; i++)
    if (p->ops[i].kind == OP_NODE && p->ops[i].cpu.prepared && p->cpu->release_node)
      p->cpu->release_node(p->cpu->self, &p->ops[i].cpu);
  if (p->ctx.state && p->cpu->release_ctx)
    p->cpu->release_ctx(p->cpu->self, &p->ctx);
  if (p->epi_module)
    p->be.unload(p->be.self, p->epi_module);
  gcc_kernel_set_free(&p->gather_ks);
  gcc_kernel_set_free(&p->epi_ks);
  free(p->epi_kernels);
  free(p->fb_group);
  free(p->fb_epilogue);
  free(p->fb_why);
  if (p->labels)
    for (int i = 0; i < p->n_ops; i++)
      free(p->labels[i]);
  free(p->labels);
  gcc_kernel_set_free(&p->ks);
  gcc_graph_free(p->g);
  gcc_mem_plan_free(&p->mem);
  free(p->kernels);
  free(p->ops);
  free(p->inputs);
  free(p->rb);
  free(p->rb_off);
  free(p->entry_serial);
  free(p->slot_off);
  free(p->const_off);
  free(p->rb_tensors);
  free(p->aux_off);
  free(p->addr);
  free(p->slot_of);
  free(p->tensors);
  free(p->ptrs);
  free(p->hrb);
  free(p->hring);
  if (p->host_arena && p->host_arena_owned)
    p->cpu->release(p->cpu->self, p->host_arena);
  free(p->waits);
  free(p->coll_ptrs);
  free(p->coll_numel);
  for (int k = 0; k < p->n_shadows; k++) {
    free(p->shadows[k]->t.data);
    free(p->shadows[k]);
  }
  free(p->shadows);
  free(p);
}
