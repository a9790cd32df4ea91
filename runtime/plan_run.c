/* plan_run.c - the plan runner's steps (plan.h): binding inputs, issuing each op of a compiled plan
 * (CPU nodes through the CPU backend, CUDA groups, GEMMs and epilogues through the device's
 * backend), the read-back ring, the anomaly check and the profiler's sites. Split from plan.c,
 * which compiles and frees plans. */
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

/* ---- run ---------------------------------------------------------------- */

/* Before a CPU node: its 16-bit inputs widened into their shadows. */
static void widen_shadows(const gcc_plan *p, const op *o) {
  for (int k = o->sh_first; k < o->sh_first + o->sh_n; k++) {
    const shadow *s = p->shadows[k];
    if (s->out)
      continue;
    const uint16_t *h = s->real->data;
    float *f = s->t.data;
    if (s->real->dtype == GCC_DT_BFLOAT16)
      for (int64_t i = 0; i < s->t.numel; i++)
        f[i] = gcc_bf16_to_f32(h[i]);
    else
      for (int64_t i = 0; i < s->t.numel; i++)
        f[i] = gcc_f16_to_f32(h[i]);
  }
}

/* A 16-bit Conv's / ConvTranspose's bias, as a GPU adds it: the result
 * [N, M, ...] rounded to its 16-bit dtype, plus B[m] in float32 (rounded
 * again by narrow_shadows). */
static void add_bias_after_rounding(const gcc_plan *p, const op *o) {
  const gcc_tensor *y = o->cpu.out[0];
  float *f = y->data;
  const float *b = o->bias_after->data;
  int bf16 = p->g->values[o->cpu.node->outputs[0]].dtype == GCC_DT_BFLOAT16;
  int64_t m = y->shape.dims[1], inner = 1;
  for (int q = 2; q < y->shape.ndim; q++)
    inner *= y->shape.dims[q];
  for (int64_t i = 0; i < y->numel; i++)
    f[i] = (bf16 ? gcc_round_bf16(f[i]) : gcc_round_f16(f[i])) + b[(i / inner) % m];
}

/* After it: its float32 results rounded into their 16-bit storage. */
static void narrow_shadows(const gcc_plan *p, const op *o) {
  for (int k = o->sh_first; k < o->sh_first + o->sh_n; k++) {
    const shadow *s = p->shadows[k];
    if (!s->out)
      continue;
    uint16_t *h = s->real->data;
    const float *f = s->t.data;
    if (s->real->dtype == GCC_DT_BFLOAT16)
      for (int64_t i = 0; i < s->t.numel; i++)
        h[i] = gcc_f32_to_bf16(f[i]);
    else
      for (int64_t i = 0; i < s->t.numel; i++)
        h[i] = gcc_f32_to_f16(f[i]);
  }
}

typedef union argval {
  void *p;
  long long ll;
  int i;
  float f;
} argval;

/* The learning rate of an optimizer node this step: the schedule's
 * (gcc_plan_set_lr), else the node's attribute (SGD and Adam both keep it
 * first). */
static float step_lr(const gcc_plan *p, const gcc_node *n) {
  _Static_assert(SGD_LR == 0 && ADAM_LR == 0, "lr is the optimizers' first attribute");
  return p->ctx.lr > 0.0f ? p->ctx.lr : n->av[0].f;
}

void gcc_plan_set_lr(gcc_plan *p, float lr) {
  if (p->ctx.lr == lr)
    return;
  p->ctx.lr = lr;
  /* a captured step holds the old value in its kernel arguments */
  for (int s = 0; s < 2; s++)
    if (p->graph[s]) {
      p->be.graph_destroy(p->be.self, p->graph[s]);
      p->graph[s] = NULL;
    }
}

static gcc_status issue_kernel(gcc_plan *p, const op *o, int slot, int64_t step, gcc_diag *d) {
  const gcc_graph *g = p->g;
  const gcc_kernel_info *k = &p->ks.kernels[o->kernel];
  const gcc_group *gr = &g->groups[k->group];
  const gcc_node *n0 = &g->nodes[gr->nodes[0]];
  argval vals[80];
  void *args[80];
  if (k->n_args > 80)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "kernel %s has %d arguments", k->name, k->n_args);
  for (int a = 0; a < k->n_args; a++) {
    const gcc_kernel_arg *ka = &k->args[a];
    switch (ka->kind) {
    case GCC_KARG_INPUT:
    case GCC_KARG_OUTPUT: vals[a].p = gcc_plan_ptr_of_(p, ka->value, slot); break;
    case GCC_KARG_PARAMS: vals[a].p = p->addr[n0->inputs[0]]; break;
    case GCC_KARG_GRADS: vals[a].p = p->addr[n0->inputs[1]]; break;
    case GCC_KARG_STATE0: vals[a].p = p->addr[n0->inputs[2]]; break;
    case GCC_KARG_STATE1: vals[a].p = p->addr[n0->inputs[3]]; break;
    case GCC_KARG_PARAM_COPY: vals[a].p = p->addr[n0->outputs[0]]; break;
    case GCC_KARG_NUMEL: vals[a].ll = o->numel; break;
    case GCC_KARG_FIRST_STEP: vals[a].i = step == 0; break;
    case GCC_KARG_LR: vals[a].f = step_lr(p, n0); break;
    case GCC_KARG_STEP_SIZE:
    case GCC_KARG_BC2_SQRT: {
      /* as gcc_cpu_adam: torch.optim.Adam's corrections in double */
      double t = (double)(step + 1);
      if (ka->kind == GCC_KARG_STEP_SIZE)
        vals[a].f = (float)((double)step_lr(p, n0) / (1.0 - pow((double)n0->av[ADAM_BETA1].f, t)));
      else
        vals[a].f = (float)sqrt(1.0 - pow((double)n0->av[ADAM_BETA2].f, t));
      break;
    }
    case GCC_KARG_BAD_LABEL: vals[a].p = (char *)p->dev + p->off_bad; break;
    case GCC_KARG_STEP: vals[a].ll = (long long)p->ctx.rng_step; break; /* Dropout's Philox */
    case GCC_KARG_FLAT_INPUTS: vals[a].p = p->addr[n0->inputs[gcc_plan_flat_first_(g, n0)]]; break;
    case GCC_KARG_SCRATCH: vals[a].p = (char *)p->dev + p->off_scratch; break;
    default:
      return gcc_diag_set(d, GCC_ERR_INTERNAL, "kernel %s: argument %d of unknown kind", k->name,
                          a);
    }
    args[a] = &vals[a];
  }
  return p->be.launch(p->be.self, p->kernels[o->kernel], k, args, d);
}

static gcc_status issue_gemm(gcc_plan *p, const op *o, int slot, gcc_diag *d) {
  const gcc_colmajor_gemm *m = &o->gemm;
  return p->be.gemm(p->be.self, o->prepared, gcc_plan_ptr_of_(p, m->a_value, slot),
                    gcc_plan_ptr_of_(p, m->b_value, slot), gcc_plan_ptr_of_(p, m->c_value, slot),
                    gcc_plan_ptr_of_(p, m->d_value, slot), d);
}

/* the generated kernel of a refused epilogue, its arguments by name */
static gcc_status issue_epilogue(gcc_plan *p, const op *o, int slot, gcc_diag *d) {
  const gcc_kernel_info *k = &p->epi_ks.kernels[o->kernel];
  const gcc_colmajor_gemm *m = &o->gemm;
  void *vals[5], *args[5];
  if (k->n_args > 5)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "kernel %s has %d arguments", k->name, k->n_args);
  for (int a = 0; a < k->n_args; a++) {
    const char *nm = k->args[a].name;
    if (strcmp(nm, "d") == 0)
      vals[a] = gcc_plan_ptr_of_(p, m->d_value, slot);
    else if (strcmp(nm, "bias") == 0 || strcmp(nm, "bgrad") == 0)
      vals[a] = gcc_plan_ptr_of_(p, m->bias_value, slot);
    else if (strcmp(nm, "aux") == 0)
      vals[a] = (char *)p->dev + p->aux_off[m->aux_group];
    else if (strcmp(nm, "b") == 0)
      vals[a] = gcc_plan_ptr_of_(p, m->b_value, slot);
    else
      return gcc_diag_set(d, GCC_ERR_INTERNAL, "kernel %s: unknown argument '%s'", k->name, nm);
    args[a] = &vals[a];
  }
  return p->be.launch(p->be.self, p->epi_kernels[o->kernel], k, args, d);
}

/* The index of the first NaN or Inf of float32 value v, or -1. */
static int64_t first_nonfinite(const gcc_plan *p, int v) {
  const gcc_value *val = &p->g->values[v];
  const float *x = p->tensors[v].data;
  if (val->dtype != GCC_DT_FLOAT32 || !x)
    return -1;
  int64_t n = gcc_shape_numel(&val->shape, NULL);
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(x[i]))
      return i;
  return -1;
}

/* --detect-anomaly, after node `node` ran on the host: its outputs, then the
 * parameters and optimizer state among its inputs (updated in place by an
 * optimizer node, read by any other). The checks run in plan order, so the
 * first node reported is the first that produced a non-finite value. */
static gcc_status check_anomaly(const gcc_plan *p, int node, int64_t step, gcc_diag *d) {
  const gcc_graph *g = p->g;
  const gcc_node *n = &g->nodes[node];
  /* fp16 loss scaling: an Inf in the scaled backward is what the scaler
   * looks for (the step is skipped, the scale backs off), not an anomaly */
  if (n->phase == GCC_PHASE_BACKWARD && gcc_graph_find(g, GCC_SCALER_SCALE_NAME) >= 0)
    return GCC_OK;
  for (int pass = 0; pass < 2; pass++) {
    int count = pass == 0 ? n->n_outputs : n->n_inputs;
    for (int k = 0; k < count; k++) {
      int v = pass == 0 ? n->outputs[k] : n->inputs[k];
      if (v < 0)
        continue;
      int kind = g->values[v].kind;
      if (pass == 1 && kind != GCC_VALUE_PARAM && kind != GCC_VALUE_OPT_STATE)
        continue;
      int64_t i = first_nonfinite(p, v);
      if (i < 0)
        continue;
      float x = ((const float *)p->tensors[v].data)[i];
      int updates = n->phase == GCC_PHASE_OPTIMIZER; /* updates in place */
      return gcc_diag_set(
          d, GCC_ERR_NUMERIC,
          "%s: --detect-anomaly: node '%s' (%s) %s %s '%s' (%s at element %" PRId64 ") %s "
          "%" PRId64,
          g->source, n->name, gcc_op_name(n->op),
          pass == 0 || updates ? "produced a non-finite value in" : "read a non-finite",
          pass == 0                 ? "output"
          : kind == GCC_VALUE_PARAM ? "parameter"
                                    : "optimizer state",
          g->values[v].name,
          isnan(x) ? "NaN"
          : x > 0  ? "+Inf"
                   : "-Inf",
          i, p->mode == GCC_MODE_TRAIN ? "in training step" : "in an evaluation after step",
          p->mode == GCC_MODE_TRAIN ? step + 1 : step);
    }
  }
  return GCC_OK;
}

/* Timing markers of input slot `slot` (--profile on a device): the H2D
 * pair, then a pair per op; marker 0 is the anchor. */
static int marker_base(const gcc_plan *p, int slot) {
  return 1 + slot * (2 + 2 * p->n_ops);
}

/* One op of the step. *t0: when the previous CPU node's event ended (host
 * profiling). */
static gcc_status issue_one(gcc_plan *p, const op *o, int slot, int64_t step, int64_t *t0,
                            gcc_diag *d) {
  switch (o->kind) {
  case OP_KERNEL:
    for (int w = 0; w < o->n_wait; w++) /* the update waits for its gradients' buckets */
      GCC_TRY(p->be.collective_wait(p->be.self, p->waits[o->wait_first + w], d));
    GCC_TRY(issue_kernel(p, o, slot, step, d));
    break;
  case OP_GEMM: GCC_TRY(issue_gemm(p, o, slot, d)); break;
  case OP_EPILOGUE: GCC_TRY(issue_epilogue(p, o, slot, d)); break;
  case OP_LIBRARY: {
    const gcc_node *n = &p->g->nodes[o->node];
    if (gcc_op(n->op)->flags & GCC_OPF_COLLECTIVE) { /* a gradient bucket's all-reduce */
      for (int k = 0; k < n->n_inputs; k++) {
        p->coll_ptrs[k] = gcc_plan_ptr_of_(p, n->inputs[k], slot);
        p->coll_numel[k] = (int64_t)(gcc_plan_value_bytes_(p->g, n->inputs[k]) / sizeof(float));
      }
      float w =
          gcc_comm_weight((int)n->av[ALL_REDUCE_MEAN].i, p->ctx.shard_rows, p->ctx.global_rows);
      GCC_TRY(p->be.collective(p->be.self, p->ctx.comm, p->coll_ptrs, p->coll_numel, n->n_inputs, w,
                               (int)n->av[ALL_REDUCE_BUCKET].i, d));
      break;
    }
    void *in[8] = {0}, *outp[4] = {0};
    for (int k = 0; k < n->n_inputs && k < 8; k++)
      in[k] = gcc_plan_ptr_of_(p, n->inputs[k], slot);
    /* the group's last node's outputs: a Conv with its Relu fused
     * (codegen/fusion.h gcc_fusion_conv_relu) writes the Relu's */
    const gcc_group *lg = &p->g->groups[o->group];
    const gcc_node *on = &p->g->nodes[lg->nodes[lg->n_nodes - 1]];
    for (int k = 0; k < on->n_outputs && k < 4; k++)
      outp[k] = gcc_plan_ptr_of_(p, on->outputs[k], slot);
    GCC_TRY(p->be.library_op(p->be.self, p->g, o->node, in, outp,
                             p->ws_bytes ? (char *)p->dev + p->off_ws : NULL, p->ws_bytes, d));
    break;
  }
  case OP_CLEAR_BAD_LABEL:
    GCC_TRY(p->be.memset(p->be.self, (char *)p->dev + p->off_bad, GCC_BAD_LABEL_NONE_BYTE,
                         sizeof(int), GCC_STREAM_COMPUTE, d));
    break;
  case OP_COPY:
    GCC_TRY(p->be.copy(p->be.self, gcc_plan_ptr_of_(p, o->dst, slot),
                       gcc_plan_ptr_of_(p, o->src, slot), o->bytes, o->ck, GCC_STREAM_COMPUTE, d));
    break;
  case OP_NODE: {
    if (o->needs_sync)
      GCC_TRY(p->be.sync(p->be.self, d));
    widen_shadows(p, o);
    gcc_status s = p->cpu->run_node(p->cpu->self, &o->cpu);
    if (s == GCC_OK && o->bias_after)
      add_bias_after_rounding(p, o);
    if (s == GCC_OK)
      narrow_shadows(p, o);
    if (p->prof) {
      int64_t t1 = gcc_prof_now();
      gcc_prof_record(p->prof, o->site, *t0, t1, step);
      *t0 = t1;
    }
    if (s != GCC_OK) {
      if (d)
        *d = p->run_diag;
      return s;
    }
    if (p->cfg.detect_anomaly)
      GCC_TRY(check_anomaly(p, o->node, step, d));
    return GCC_OK;
  }
  }
  if (p->prof)
    *t0 = gcc_prof_now();
  return GCC_OK;
}

/* Issues the step's ops in order, each inside an NVTX range named after its node or group (the
 * backend's range_push; Nsight Systems shows the plan's names) and, when the plan is timed
 * (--profile on a device), between two timing markers on the compute stream. */
static gcc_status issue_ops(gcc_plan *p, int slot, int64_t step, gcc_diag *d) {
  p->ctx.optimizer_step = step;
  p->ctx.rng_step = p->ctx.micro ? p->ctx.micro_rng : step;
  int64_t t0 = p->prof ? gcc_prof_now() : 0; /* profiling: node events end to end */
  int ranges = p->has_be && p->be.range_push && p->be.range_pop && p->labels;
  int base = marker_base(p, slot);
  for (int i = 0; i < p->n_ops; i++) {
    const op *o = &p->ops[i];
    int timed = p->timed && o->kind != OP_NODE;
    if (ranges)
      p->be.range_push(p->be.self, p->labels[i]);
    gcc_status s = GCC_OK;
    if (timed)
      s = p->be.timer_record(p->be.self, base + 2 + 2 * i, GCC_STREAM_COMPUTE, d);
    if (s == GCC_OK)
      s = issue_one(p, o, slot, step, &t0, d);
    if (s == GCC_OK && timed)
      s = p->be.timer_record(p->be.self, base + 3 + 2 * i, GCC_STREAM_COMPUTE, d);
    if (ranges)
      p->be.range_pop(p->be.self);
    GCC_TRY(s);
  }
  return GCC_OK;
}

/* --profile on a device: the device times of the step that last used input
 * slot `slot`, once it is known to be done, as events on the device tracks
 * (host clock: the anchor's host time plus the device time since the
 * anchor), and the sums of gcc_plan_device_profile. A marker that cannot be
 * read drops the step's events. */
static void harvest(gcc_plan *p, int slot) {
  if (!p->pending[slot])
    return;
  p->pending[slot] = 0;
  if (!p->timed || !p->be.timer_elapsed)
    return;
  gcc_diag ignore = {0};
  int base = marker_base(p, slot);
  double span0 = -1, span1 = -1;
  int64_t step = p->pend_step[slot];
  for (int i = 0; i < p->n_ops; i++) {
    const op *o = &p->ops[i];
    if (o->kind == OP_NODE)
      continue;
    double a = 0, b = 0;
    if (p->be.timer_elapsed(p->be.self, 0, base + 2 + 2 * i, &a, &ignore) != GCC_OK ||
        p->be.timer_elapsed(p->be.self, 0, base + 3 + 2 * i, &b, &ignore) != GCC_OK)
      return;
    double ms = b > a ? b - a : 0;
    switch (o->kind) {
    case OP_GEMM: p->dprof.gemm_ms += ms; break;
    case OP_LIBRARY: p->dprof.library_ms += ms; break;
    case OP_COPY:
      p->dprof.copy_ms += ms;
      p->dprof.copy_bytes += (double)o->bytes;
      break;
    default: p->dprof.kernel_ms += ms; break;
    }
    if (span0 < 0 || a < span0)
      span0 = a;
    if (b > span1)
      span1 = b;
    int64_t t0 = p->anchor_host + (int64_t)(a * 1e6), t1 = p->anchor_host + (int64_t)(b * 1e6);
    gcc_prof_record(p->dev_track[0], o->site, t0, t1 > t0 ? t1 : t0, step);
  }
  if (p->pend_h2d[slot]) {
    double h0 = 0, h1 = 0;
    if (p->be.timer_elapsed(p->be.self, 0, base, &h0, &ignore) == GCC_OK &&
        p->be.timer_elapsed(p->be.self, 0, base + 1, &h1, &ignore) == GCC_OK) {
      if (h1 < h0)
        h1 = h0;
      p->dprof.h2d_ms += h1 - h0;
      for (int k = 0; k < p->n_inputs; k++)
        p->dprof.h2d_bytes += p->inputs[k].gsrc ? 0.0 : (double)p->inputs[k].bytes;
      if (p->has_prev_span) { /* while the previous step computed */
        double lo = h0 > p->prev_span[0] ? h0 : p->prev_span[0];
        double hi = h1 < p->prev_span[1] ? h1 : p->prev_span[1];
        p->dprof.overlap_ms += hi > lo ? hi - lo : 0;
      }
      int64_t t0 = p->anchor_host + (int64_t)(h0 * 1e6), t1 = p->anchor_host + (int64_t)(h1 * 1e6);
      gcc_prof_record(p->dev_track[1], p->site_h2d, t0, t1, step);
    }
  }
  if (span0 >= 0) {
    p->prev_span[0] = span0;
    p->prev_span[1] = span1;
    p->has_prev_span = 1;
  }
  p->dprof.steps++;
}

/* both slots, oldest step first: the device is idle */
static void harvest_all(gcc_plan *p) {
  int first = p->pending[1] && (!p->pending[0] || p->pend_serial[1] < p->pend_serial[0]);
  harvest(p, first);
  harvest(p, !first);
}

void gcc_plan_device_profile_get(const gcc_plan *p, gcc_plan_device_profile *out) {
  *out = p->dprof;
}

gcc_status gcc_plan_bind_input(gcc_plan *p, const char *name, const void *data, gcc_diag *d) {
  int v = gcc_graph_find(p->g, name);
  if (v < 0 || p->g->values[v].kind != GCC_VALUE_INPUT)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: '%s' is not a graph input", p->g->source,
                        name);
  for (int k = 0; k < p->n_inputs; k++)
    if (p->inputs[k].src == v) {
      p->inputs[k].host = data;
      p->inputs[k].gsrc = NULL;
    }
  for (int u = 0; u < p->g->n_values; u++) /* the input and every view of it */
    if (p->mem.root[u] == v)
      p->tensors[u].data = (void *)data;
  return GCC_OK;
}

static gcc_status load_gather(gcc_plan *p, gcc_diag *d) {
  int64_t max_work = 1;
  for (int k = 0; k < p->n_inputs; k++)
    max_work =
        (int64_t)p->inputs[k].bytes / 4 > max_work ? (int64_t)p->inputs[k].bytes / 4 : max_work;
  GCC_TRY(gcc_codegen_gather(p->cfg.sm_count, max_work, &p->gather_ks, d));
  gcc_nvrtc_output img = {0};
  gcc_status s = gcc_plan_compile_kernels_(p, p->gather_ks.source, "gcc_gather.cu", &img, d);
  if (s == GCC_OK)
    s = gcc_plan_load_image_(p, &p->gather_ks, &img, p->cfg.sm, &p->gather_module,
                             &p->gather_kernel, d);
  gcc_nvrtc_output_free(&img);
  if (s != GCC_OK)
    p->gather_kernel =
        NULL; /* loaded perhaps, but not to be launched (the module goes with the plan) */
  return s;
}

gcc_status gcc_plan_bind_input_gather(gcc_plan *p, const char *name, const void *rows,
                                      const int64_t *perm, int64_t first, gcc_diag *d) {
  int v = gcc_graph_find(p->g, name);
  int k = -1;
  for (int j = 0; v >= 0 && j < p->n_inputs; j++)
    if (p->inputs[j].src == v)
      k = j;
  if (k < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: '%s' is not a graph input copied to the device", p->g->source, name);
  if (p->inputs[k].bytes % 4 != 0 || p->g->values[v].shape.ndim < 1)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: input '%s' cannot be gathered in 32-bit words",
                        p->g->source, name);
  if (!p->gather_kernel)
    GCC_TRY(load_gather(p, d));
  p->inputs[k].host = NULL;
  p->inputs[k].gsrc = rows;
  p->inputs[k].gperm = perm;
  p->inputs[k].gfirst = first;
  return GCC_OK;
}

/* dst = the batch rows perm[first ..] of the device dataset, on the compute stream */
static gcc_status gather_input(gcc_plan *p, input_copy *ic, int slot, gcc_diag *d) {
  const gcc_value *v = &p->g->values[ic->src];
  long long rows = (long long)v->shape.dims[0];
  long long words = (long long)(ic->bytes / 4) / (rows > 0 ? rows : 1);
  const void *src = ic->gsrc;
  const int64_t *perm = ic->gperm;
  long long first = (long long)ic->gfirst;
  void *dst = ic->slot[slot];
  void *args[6] = {&src, &perm, &first, &rows, &words, &dst};
  return p->be.launch(p->be.self, p->gather_kernel, &p->gather_ks.kernels[0], args, d);
}

/* Graph inputs read on the host must be bound (those copied to a device are
 * checked as they are staged). */
static gcc_status check_host_inputs(const gcc_plan *p, gcc_diag *d) {
  const gcc_graph *g = p->g;
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i], copied = 0;
    if (p->tensors[v].data || p->mem.last[v] < 0)
      continue;
    for (int k = 0; k < p->n_inputs; k++)
      copied |= p->inputs[k].src == v;
    if (!copied)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: graph input '%s' is not bound to data",
                          g->source, g->values[v].name);
  }
  return GCC_OK;
}

/* the read-back values computed on the host, into the host ring's entry */
static void copy_host_readbacks(gcc_plan *p, int entry) {
  if (!p->hring)
    return;
  for (int k = 0; k < p->n_hrb; k++) {
    gcc_tensor *t = &p->hring[entry * p->n_hrb + k];
    memcpy(t->data, p->tensors[p->hrb[k]].data, gcc_plan_value_bytes_(p->g, p->hrb[k]));
  }
}

/* The step's work on a device after its inputs were staged: the step
 * (replayed, captured or issued), then the read-back copies. */
static gcc_status issue_step(gcc_plan *p, int slot, int entry, int64_t optimizer_step,
                             gcc_diag *d) {
  int can_graph = p->cfg.cuda_graph && !p->varying_args && !p->has_cpu_nodes &&
                  !p->has_collective && !p->timed && !p->capture_failed;
  if (can_graph && p->graph[slot]) {
    GCC_TRY(p->be.graph_launch(p->be.self, p->graph[slot], d));
    p->replays++;
  } else if (can_graph && p->uses[slot] >= 1 && optimizer_step > 0) {
    /* warm: the first-step flag of SGD is 0 from here on */
    gcc_diag cd = {0}, ignore = {0};
    void *graph = NULL;
    gcc_status c = p->be.capture_begin(p->be.self, &cd);
    gcc_status s = c == GCC_OK ? issue_ops(p, slot, optimizer_step, d) : GCC_OK;
    if (c == GCC_OK)
      c = p->be.capture_end(p->be.self, &graph, s == GCC_OK ? &cd : &ignore);
    if ((s != GCC_OK || c != GCC_OK) && graph)
      p->be.graph_destroy(p->be.self, graph);
    GCC_TRY(s);
    if (c != GCC_OK) { /* nothing ran: the same work launch by launch, now and from now on */
      p->capture_failed = 1;
      snprintf(p->graph_note, sizeof p->graph_note,
               "not used: the capture failed (%.180s); launches instead", cd.msg);
      GCC_TRY(issue_ops(p, slot, optimizer_step, d));
    } else {
      p->graph[slot] = graph;
      p->captures++;
      GCC_TRY(p->be.graph_launch(p->be.self, graph, d));
      p->replays++;
    }
  } else {
    GCC_TRY(issue_ops(p, slot, optimizer_step, d));
  }
  GCC_TRY(p->be.event_record(p->be.self, GCC_EVENT_STEP_DONE + slot, GCC_STREAM_COMPUTE, d));
  p->uses[slot]++;
  copy_host_readbacks(p, entry);
  /* the values read after the step go to the device ring entry (D2D): the
   * ring comes back D2H in one copy when the host reads it */
  p->serial++;
  p->entry_serial[entry] = p->serial;
  if (p->n_rb > 0 || p->has_loss_kernel) {
    char *e = (char *)p->dev + p->off_ring + (size_t)entry * p->ring_stride;
    for (int k = 0; k < p->n_rb; k++)
      GCC_TRY(p->be.copy(p->be.self, e + p->rb_off[k], gcc_plan_ptr_of_(p, p->rb[k].src, slot),
                         p->rb[k].bytes, GCC_COPY_D2D, GCC_STREAM_COMPUTE, d));
    if (p->has_loss_kernel)
      GCC_TRY(p->be.copy(p->be.self, e + p->ring_stride - 64, (char *)p->dev + p->off_bad,
                         sizeof(int), GCC_COPY_D2D, GCC_STREAM_COMPUTE, d));
  }
  return GCC_OK;
}

void gcc_plan_set_micro_step(gcc_plan *p, int64_t ring_index, int64_t rng_step) {
  p->ctx.micro_ring = ring_index, p->ctx.micro_rng = rng_step, p->ctx.micro = 1;
}

void gcc_plan_set_shard(gcc_plan *p, int64_t shard_rows, int64_t global_rows) {
  p->ctx.shard_rows = shard_rows, p->ctx.global_rows = global_rows;
}

/* plan_internal.h */
gcc_status gcc_plan_stage_inputs_(gcc_plan *p, int slot, int *copied, int *h2d_marked, int *intact,
                                  gcc_diag *d) {
  *copied = *h2d_marked = 0;
  *intact = 1;
  if (p->uses[slot] > 0)
    GCC_TRY(p->be.event_sync(p->be.self, GCC_EVENT_STEP_DONE + slot, d));
  harvest(p, slot); /* --profile: that step's device times, before its markers are reused */
  if (p->timed && p->anchor_host == 0) {
    GCC_TRY(p->be.timer_record(p->be.self, 0, GCC_STREAM_COMPUTE, d));
    p->anchor_host = gcc_prof_now();
  }
  gcc_status st = GCC_OK;
  for (int k = 0; k < p->n_inputs && st == GCC_OK; k++) {
    input_copy *ic = &p->inputs[k];
    *intact = 0;
    if (ic->gsrc) {
      st = gather_input(p, ic, slot, d);
      continue;
    }
    if (!ic->host) {
      *intact = *copied == 0;
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: graph input '%s' is not bound to data",
                          p->g->source, p->g->values[ic->src].name);
    }
    ++*copied;
    if (p->timed && !*h2d_marked) {
      st = p->be.timer_record(p->be.self, marker_base(p, slot), GCC_STREAM_COPY, d);
      *h2d_marked = 1;
      if (st != GCC_OK)
        break;
    }
    if (ic->host != ic->staging[slot])
      memcpy(ic->staging[slot], ic->host, ic->bytes);
    st = p->be.copy(p->be.self, ic->slot[slot], ic->staging[slot], ic->bytes, GCC_COPY_H2D,
                    GCC_STREAM_COPY, d);
  }
  if (st == GCC_OK && *h2d_marked)
    st = p->be.timer_record(p->be.self, marker_base(p, slot) + 1, GCC_STREAM_COPY, d);
  if (st == GCC_OK && *copied > 0)
    st = p->be.event_record(p->be.self, GCC_EVENT_INPUT_READY + slot, GCC_STREAM_COPY, d);
  return st;
}

gcc_status gcc_plan_run(gcc_plan *p, int64_t optimizer_step, gcc_diag *d) {
  const gcc_graph *g = p->g;
  int64_t ring_index = p->ctx.micro ? p->ctx.micro_ring : optimizer_step;
  int entry = g->training.present && p->ring > 1 ? (int)(ring_index % p->ring) : 0;
  if (!p->has_be) { /* on the CPU: run the nodes, done */
    GCC_TRY(check_host_inputs(p, d));
    GCC_TRY(issue_ops(p, 0, optimizer_step, d));
    copy_host_readbacks(p, entry);
    p->serial++;
    p->entry_serial[entry] = p->serial;
    p->fetched = p->serial;
    return GCC_OK;
  }
  if (p->failed)
    return gcc_diag_set(d, GCC_ERR_DEVICE,
                        "%s: this device plan failed at an earlier step (%s); it does not run "
                        "again, because that step's input copies may still be in flight from "
                        "its staging buffers",
                        g->source, p->fail_msg);
  int slot = (int)(p->uses[0] + p->uses[1]) % 2;
  GCC_TRY(check_host_inputs(p, d));
  if (p->n_rb == 0 && p->n_inputs == 0 && p->n_ops == 0)
    return GCC_OK;
  /* 1. inputs (unless gcc_plan_issue_inputs issued them), then the step */
  int copied = p->staged_copies, h2d_marked = p->staged_h2d, intact = 0;
  gcc_status st = p->staged == slot + 1
                      ? GCC_OK
                      : gcc_plan_stage_inputs_(p, slot, &copied, &h2d_marked, &intact, d);
  p->staged = 0;
  if (st != GCC_OK && intact)
    return st; /* nothing issued yet: the plan is intact */
  if (st == GCC_OK && copied > 0)
    st = p->be.stream_wait(p->be.self, GCC_STREAM_COMPUTE, GCC_EVENT_INPUT_READY + slot, d);
  /* 2. the step and its read-back */
  if (st == GCC_OK)
    st = issue_step(p, slot, entry, optimizer_step, d);
  if (st == GCC_OK && p->timed) {
    p->pending[slot] = 1;
    p->pend_serial[slot] = p->serial;
    p->pend_step[slot] = optimizer_step;
    p->pend_h2d[slot] = h2d_marked;
  }
  if (st != GCC_OK) {
    /* an H2D from this slot's staging may still be in flight, and the
     * device may hold half a step: this plan is done */
    p->failed = 1;
    snprintf(p->fail_msg, sizeof p->fail_msg, "%s", d ? d->msg : "no message");
  }
  return st;
}

/* one D2H of the whole ring, then wait for it */
static gcc_status fetch_ring(gcc_plan *p, gcc_diag *d) {
  GCC_TRY(p->be.copy(p->be.self, p->ring_host, (char *)p->dev + p->off_ring,
                     p->ring_stride * (size_t)p->ring, GCC_COPY_D2H, GCC_STREAM_COMPUTE, d));
  GCC_TRY(p->be.event_record(p->be.self, GCC_EVENT_READBACK, GCC_STREAM_COMPUTE, d));
  GCC_TRY(p->be.event_sync(p->be.self, GCC_EVENT_READBACK, d));
  p->fetched = p->serial;
  harvest_all(p); /* the compute stream is idle, and the copies it waited for done */
  return GCC_OK;
}

gcc_status gcc_plan_wait_readback(gcc_plan *p, int entry, gcc_diag *d) {
  if (entry < 0 || entry >= p->ring)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "read-back entry %d outside [0, %d)", entry,
                        p->ring);
  if (!p->has_be)
    return GCC_OK; /* the CPU is done when gcc_plan_run returns */
  if (p->n_rb == 0 && !p->has_loss_kernel)
    return gcc_plan_sync(p, d);
  if (p->entry_serial[entry] > p->fetched)
    GCC_TRY(fetch_ring(p, d));
  if (p->has_loss_kernel) {
    int *bad = (int *)((char *)p->ring_host + (size_t)entry * p->ring_stride + p->ring_stride - 64);
    if (*bad != GCC_BAD_LABEL_NONE) {
      int row = *bad;
      *bad = GCC_BAD_LABEL_NONE;
      if (row < 0) /* -1 - the position (codegen/emit_index.c, codegen/emit_nll.c) */
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "%s: a Gather / GatherElements index or a NegativeLogLikelihoodLoss "
                            "target at position %d is outside its range (found on the GPU)",
                            p->g->source, -1 - row);
      const char *loss = "the loss";
      for (int i = 0; i < p->g->n_nodes; i++)
        if (gcc_op(p->g->nodes[i].op)->flags & GCC_OPF_LOSS)
          loss = p->g->nodes[i].name;
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "%s: node '%s': the label in row %d is outside [0, classes) (found by "
                          "the loss kernel on the GPU)",
                          p->g->source, loss, row);
    }
  }
  return GCC_OK;
}

const gcc_tensor *gcc_plan_readback(const gcc_plan *p, const char *name, int entry) {
  if (entry < 0 || entry >= p->ring)
    return NULL;
  for (int k = 0; k < p->n_rb; k++)
    if (strcmp(p->g->values[p->rb[k].src].name, name) == 0 ||
        strcmp(p->g->values[p->rb[k].dst].name, name) == 0)
      return &p->rb_tensors[entry * p->n_rb + k];
  for (int k = 0; k < p->n_hrb; k++)
    if (strcmp(p->g->values[p->hrb[k]].name, name) == 0)
      return p->hring ? &p->hring[entry * p->n_hrb + k] : &p->tensors[p->hrb[k]];
  return NULL;
}

gcc_status gcc_plan_sync(gcc_plan *p, gcc_diag *d) {
  if (!p->has_be)
    return GCC_OK;
  GCC_TRY(p->be.sync(p->be.self, d));
  harvest_all(p);
  return GCC_OK;
}

const gcc_tensor *gcc_plan_host_tensor(gcc_plan *p, const char *name, gcc_diag *d) {
  if (gcc_plan_wait_readback(p, 0, d) != GCC_OK || gcc_plan_sync(p, d) != GCC_OK)
    return NULL;
  int v = gcc_graph_find(p->g, name);
  if (v < 0)
    return NULL;
  if (p->g->values[v].device == GCC_DEV_CPU)
    return p->tensors[v].data ? &p->tensors[v] : NULL;
  const gcc_tensor *t = gcc_plan_readback(p, name, 0);
  if (t)
    return t;
  char host[512];
  snprintf(host, sizeof host, "%s@cpu", name);
  int h = gcc_graph_find(p->g, host);
  return h >= 0 && p->tensors[h].data ? &p->tensors[h] : NULL;
}

/* appends "[d0,d1,...]" for each tensor */
static void put_shapes(FILE *f, gcc_tensor *const *t, int n, double *bytes) {
  fputc('[', f);
  for (int k = 0; k < n; k++) {
    fputs(k ? ",[" : "[", f);
    if (t[k]) {
      for (int j = 0; j < t[k]->shape.ndim; j++)
        fprintf(f, j ? ",%lld" : "%lld", (long long)t[k]->shape.dims[j]);
      *bytes += (double)t[k]->numel * (double)gcc_dtype_size(t[k]->dtype);
    }
    fputc(']', f);
  }
  fputc(']', f);
}

/* --profile on a device: a site per device op, the device tracks and the
 * timing markers; capture goes off (each launch is timed as issued). */
static gcc_status set_device_profiler(gcc_plan *p, gcc_profiler *prof, const char *label,
                                      gcc_diag *d) {
  const gcc_graph *g = p->g;
  char dev[32], name[800];
  gcc_dev_name(p->device, dev, sizeof dev);
  for (int i = 0; i < p->n_ops; i++) {
    op *o = &p->ops[i];
    if (o->kind == OP_NODE)
      continue;
    const char *type = "kernel", *kind = "kernel";
    double flops = 0, bytes = 0;
    char args[600];
    switch (o->kind) {
    case OP_GEMM:
      type = kind = "Gemm (cuBLASLt)";
      flops = 2.0 * (double)o->gemm.m * (double)o->gemm.n * (double)o->gemm.k;
      snprintf(args, sizeof args,
               "\"device\":\"%s\",\"kind\":\"cublasLtMatmul\",\"m\":%lld,"
               "\"n\":%lld,\"k\":%lld,\"epilogue\":\"%s\"",
               dev, (long long)o->gemm.m, (long long)o->gemm.n, (long long)o->gemm.k,
               gcc_epilogue_name(o->gemm.epilogue));
      break;
    case OP_LIBRARY:
      type = gcc_op_name(g->nodes[o->node].op);
      kind = "library";
      flops = gcc_op_flops(g, o->node);
      snprintf(args, sizeof args, "\"device\":\"%s\",\"kind\":\"library call\"", dev);
      break;
    case OP_COPY:
      type = kind = o->ck == GCC_COPY_H2D   ? "Copy H2D"
                    : o->ck == GCC_COPY_D2H ? "Copy D2H"
                                            : "Copy D2D";
      bytes = (double)o->bytes;
      snprintf(args, sizeof args, "\"device\":\"%s\",\"kind\":\"%s\",\"copy_bytes\":%zu", dev, kind,
               o->bytes);
      break;
    case OP_CLEAR_BAD_LABEL:
      type = kind = "Memset";
      snprintf(args, sizeof args, "\"device\":\"%s\",\"kind\":\"memset\"", dev);
      break;
    default: {
      const gcc_kernel_info *k =
          o->kind == OP_EPILOGUE ? &p->epi_ks.kernels[o->kernel] : &p->ks.kernels[o->kernel];
      if (o->kind == OP_EPILOGUE)
        type = "GEMM epilogue (kernel)";
      snprintf(args, sizeof args,
               "\"device\":\"%s\",\"kind\":\"kernel\",\"kernel\":\"%s\",\"grid\":%d,"
               "\"block\":%d",
               dev, k->name, k->grid_dim, k->block_dim);
      break;
    }
    }
    snprintf(name, sizeof name, "%s", p->labels[i]);
    o->site = gcc_profiler_site(prof, o->kind == OP_COPY ? GCC_PROF_COPY : GCC_PROF_OP, name, type,
                                label, args, flops, bytes);
    if (o->site < 0)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (profiler sites)");
  }
  double in_bytes = 0;
  for (int k = 0; k < p->n_inputs; k++)
    in_bytes += (double)p->inputs[k].bytes;
  char args[200];
  snprintf(args, sizeof args, "\"device\":\"%s\",\"kind\":\"H2D\",\"copy_bytes\":%.0f", dev,
           in_bytes);
  snprintf(name, sizeof name, "input batch H2D (%.0f bytes)", in_bytes);
  p->site_h2d =
      gcc_profiler_site(prof, GCC_PROF_COPY, name, "Copy H2D (inputs)", label, args, 0, in_bytes);
  snprintf(name, sizeof name, "%s compute (%s)", dev, label ? label : "plan");
  p->dev_track[0] = gcc_profiler_track(prof, name);
  snprintf(name, sizeof name, "%s copy stream (%s)", dev, label ? label : "plan");
  p->dev_track[1] = gcc_profiler_track(prof, name);
  if (p->site_h2d < 0 || !p->dev_track[0] || !p->dev_track[1])
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (profiler sites)");
  GCC_TRY(p->be.timer_reserve(p->be.self, marker_base(p, 2), d));
  if (!p->timed) {
    memcpy(p->saved_note, p->graph_note, sizeof p->saved_note);
    if (!p->graph_note[0])
      snprintf(p->graph_note, sizeof p->graph_note,
               "not used: --profile times every launch with CUDA events");
  }
  p->timed = 1;
  return GCC_OK;
}

gcc_status gcc_plan_set_profiler(gcc_plan *p, gcc_profiler *prof, gcc_prof_track *track,
                                 const char *label, gcc_diag *d) {
  p->prof = NULL;
  if (p->timed) { /* off: capture may go on; unread markers are dropped */
    memcpy(p->graph_note, p->saved_note, sizeof p->graph_note);
    p->timed = 0;
    p->pending[0] = p->pending[1] = 0;
  }
  if (!prof || !track)
    return GCC_OK;
  if (p->has_be && p->be.timer_reserve && p->be.timer_record && p->be.timer_elapsed)
    GCC_TRY(set_device_profiler(p, prof, label, d));
  const gcc_graph *g = p->g;
  for (int i = 0; i < p->n_ops; i++) {
    op *o = &p->ops[i];
    if (o->kind != OP_NODE)
      continue;
    const gcc_node *n = o->cpu.node;
    const gcc_op_desc *od = gcc_op(n->op);
    char name[512], *args = NULL;
    size_t args_len = 0;
    double bytes = 0;
    FILE *f = open_memstream(&args, &args_len);
    if (!f)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (profiler sites)");
    fputs("\"inputs\":", f);
    put_shapes(f, o->cpu.in, o->cpu.n_in, &bytes);
    fputs(",\"outputs\":", f);
    put_shapes(f, o->cpu.out, o->cpu.n_out, &bytes);
    char dev[32];
    fprintf(f, ",\"device\":\"%s\"", gcc_dev_name(n->device, dev, sizeof dev));
    const char *impl = p->cpu->node_impl ? p->cpu->node_impl(p->cpu->self, &o->cpu) : NULL;
    if (impl)
      fprintf(f, ",\"impl\":\"%s\"", impl); /* oneDNN's names: no quotes or escapes */
    int bad = fclose(f) != 0;
    if (impl) /* the slowest-nodes table shows which library kernel ran */
      snprintf(name, sizeof name, "%s [%s] (%s)", n->name, impl, od->name);
    else
      snprintf(name, sizeof name, "%s (%s)", n->name, od->name);
    o->site = bad ? -1
                  : gcc_profiler_site(
                        prof, (od->flags & GCC_OPF_COPY) ? GCC_PROF_COPY : GCC_PROF_OP, name,
                        od->name, label, args, gcc_op_flops(g, (int)(n - g->nodes)), bytes);
    free(args);
    if (o->site < 0)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (profiler sites)");
  }
  p->prof = track;
  return GCC_OK;
}
