#include "runtime/executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "runtime/compile.h"
#include "passes/memplan.h"

typedef struct step {
  gcc_cpu_fn fn;
  gcc_kernel_args args;
  int site; /* profiler site, when profiling */
} step;

struct gcc_plan {
  gcc_graph *g;
  gcc_mem_plan mem;
  gcc_tensor *tensors;  /* per value */
  gcc_tensor **ptrs;    /* argument arrays of all steps */
  step *steps;
  int n_steps;
  void *arena;
  gcc_cpu_ctx ctx;
  gcc_diag run_diag;
  gcc_prof_track *prof; /* non-NULL: profile every step (gcc_plan_set_profiler) */
};

static gcc_status bind_values(gcc_plan *p, gcc_bind_fn bind, void *user, gcc_diag *d) {
  gcc_graph *g = p->g;
  for (int v = 0; v < g->n_values; v++) {
    gcc_value *val = &g->values[v];
    gcc_tensor *t = &p->tensors[v];
    t->dtype = val->dtype;
    t->shape = val->shape;
    t->numel = gcc_shape_numel(&val->shape, NULL);
    t->data = NULL;
  }
  for (int v = 0; v < g->n_values; v++) {
    gcc_value *val = &g->values[v];
    gcc_tensor *t = &p->tensors[v];
    int root = p->mem.root[v];
    if (root != v)
      continue; /* views: below */
    switch (val->kind) {
    case GCC_VALUE_ACTIVATION:
      if (p->mem.offset[v] >= 0)
        t->data = (char *)p->arena + p->mem.offset[v];
      break;
    case GCC_VALUE_CONST: t->data = val->data; break;
    case GCC_VALUE_PARAM:
    case GCC_VALUE_GRAD:
    case GCC_VALUE_OPT_STATE:
      t->data = bind ? bind(user, g, v) : NULL;
      if (!t->data && (p->mem.last[v] >= 0 || val->producer >= 0))
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: no persistent storage for %s '%s'",
                            g->source, gcc_value_kind_name(val->kind), val->name);
      break;
    case GCC_VALUE_INPUT: break; /* bound per run */
    default: break;
    }
  }
  for (int v = 0; v < g->n_values; v++)
    if (p->mem.root[v] != v)
      p->tensors[v].data = p->tensors[p->mem.root[v]].data;
  return GCC_OK;
}

gcc_status gcc_plan_compile(const gcc_graph *model, const gcc_options *opt, gcc_bind_fn bind,
                            void *user, int threads, gcc_plan **out, gcc_diag *d) {
  *out = NULL;
  gcc_plan *p = calloc(1, sizeof *p);
  if (!p)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (plan)");
  gcc_status s = gcc_compile_graph(model, opt, &p->g, &p->mem, d);
  if (s != GCC_OK) {
    gcc_plan_free(p);
    return s;
  }
  gcc_graph *g = p->g;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].device != GCC_DEV_CPU) {
      char desc[600], dev[32];
      gcc_diag_set(d, GCC_ERR_DEVICE,
                   "%s: %s is placed on %s, but this version executes plans on the CPU only",
                   g->source, gcc_node_desc(g, i, desc, sizeof desc),
                   gcc_dev_name(g->nodes[i].device, dev, sizeof dev));
      gcc_plan_free(p);
      return GCC_ERR_DEVICE;
    }
  size_t arena = p->mem.arena_bytes ? p->mem.arena_bytes : GCC_ARENA_ALIGN;
  p->arena = aligned_alloc(GCC_ARENA_ALIGN, arena);
  p->tensors = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *p->tensors);
  int n_args = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n_args += g->nodes[i].n_inputs + g->nodes[i].n_outputs;
  p->ptrs = calloc((size_t)(n_args ? n_args : 1), sizeof *p->ptrs);
  p->steps = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *p->steps);
  if (!p->arena || !p->tensors || !p->ptrs || !p->steps) {
    gcc_plan_free(p);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                        "out of memory: the per-step arena needs %zu bytes", arena);
  }
  s = bind_values(p, bind, user, d);
  if (s != GCC_OK) {
    gcc_plan_free(p);
    return s;
  }
  p->ctx.max_threads = threads > 0 ? threads : 1;
  p->ctx.diag = &p->run_diag;
  p->ctx.source = g->source;
  gcc_tensor **ptr = p->ptrs;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    const gcc_op_desc *op = gcc_op(n->op);
    if (op->flags & GCC_OPF_ALIAS)
      continue; /* a view: nothing to run */
    step *st = &p->steps[p->n_steps++];
    st->fn = gcc_cpu_op_of(n->op)->kernel;
    st->args.node = n;
    st->args.ctx = &p->ctx;
    st->args.in = ptr;
    st->args.n_in = n->n_inputs;
    for (int k = 0; k < n->n_inputs; k++)
      *ptr++ = n->inputs[k] >= 0 ? &p->tensors[n->inputs[k]] : NULL;
    st->args.out = ptr;
    st->args.n_out = n->n_outputs;
    for (int k = 0; k < n->n_outputs; k++)
      *ptr++ = &p->tensors[n->outputs[k]];
    if (p->mem.ws_bytes[i]) {
      st->args.workspace = (char *)p->arena + p->mem.ws_offset[i];
      st->args.workspace_bytes = p->mem.ws_bytes[i];
    }
  }
  *out = p;
  return GCC_OK;
}

gcc_status gcc_plan_bind_input(gcc_plan *p, const char *name, const void *data, gcc_diag *d) {
  int v = gcc_graph_find(p->g, name);
  if (v < 0 || p->g->values[v].kind != GCC_VALUE_INPUT)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: '%s' is not a graph input",
                        p->g->source, name);
  for (int u = 0; u < p->g->n_values; u++)
    if (p->mem.root[u] == v)
      p->tensors[u].data = (void *)data;
  return GCC_OK;
}

/* The profiled run loop: each kernel call timed (gcc_plan_set_profiler). */
static gcc_status run_profiled(gcc_plan *p, gcc_diag *d) {
  int64_t t0 = gcc_prof_now();
  for (int i = 0; i < p->n_steps; i++) {
    const step *st = &p->steps[i];
    gcc_status s = st->fn(&st->args);
    int64_t t1 = gcc_prof_now();
    gcc_prof_record(p->prof, st->site, t0, t1, p->ctx.optimizer_step);
    t0 = t1;
    if (s != GCC_OK) {
      if (d)
        *d = p->run_diag;
      return s;
    }
  }
  return GCC_OK;
}

gcc_status gcc_plan_run(gcc_plan *p, int64_t optimizer_step, gcc_diag *d) {
  p->ctx.optimizer_step = optimizer_step;
  for (int i = 0; i < p->g->n_inputs; i++) {
    int v = p->g->inputs[i];
    if (!p->tensors[v].data && p->mem.last[v] >= 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: graph input '%s' is not bound to data",
                          p->g->source, p->g->values[v].name);
  }
  if (p->prof)
    return run_profiled(p, d);
  for (int i = 0; i < p->n_steps; i++) {
    const step *st = &p->steps[i];
    gcc_status s = st->fn(&st->args);
    if (s != GCC_OK) {
      if (d)
        *d = p->run_diag;
      return s;
    }
  }
  return GCC_OK;
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

gcc_status gcc_plan_set_profiler(gcc_plan *p, gcc_profiler *prof, gcc_prof_track *track,
                                 const char *label, gcc_diag *d) {
  p->prof = NULL;
  if (!prof || !track)
    return GCC_OK;
  const gcc_graph *g = p->g;
  for (int i = 0; i < p->n_steps; i++) {
    step *st = &p->steps[i];
    const gcc_node *n = st->args.node;
    const gcc_op_desc *op = gcc_op(n->op);
    char name[512], *args = NULL;
    size_t args_len = 0;
    double bytes = 0;
    FILE *f = open_memstream(&args, &args_len);
    if (!f)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (profiler sites)");
    fputs("\"inputs\":", f);
    put_shapes(f, st->args.in, st->args.n_in, &bytes);
    fputs(",\"outputs\":", f);
    put_shapes(f, st->args.out, st->args.n_out, &bytes);
    char dev[32];
    fprintf(f, ",\"device\":\"%s\"", gcc_dev_name(n->device, dev, sizeof dev));
    int bad = fclose(f) != 0;
    snprintf(name, sizeof name, "%s (%s)", n->name, op->name);
    st->site = bad ? -1
                   : gcc_profiler_site(prof, (op->flags & GCC_OPF_COPY) ? GCC_PROF_COPY
                                                                      : GCC_PROF_OP,
                                       name, op->name, label, args,
                                       gcc_op_flops(g, (int)(n - g->nodes)), bytes);
    free(args);
    if (st->site < 0)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (profiler sites)");
  }
  p->prof = track;
  return GCC_OK;
}

const gcc_tensor *gcc_plan_tensor(const gcc_plan *p, const char *name) {
  int v = gcc_graph_find(p->g, name);
  return v >= 0 ? &p->tensors[v] : NULL;
}

const gcc_graph *gcc_plan_graph(const gcc_plan *p) { return p->g; }
size_t gcc_plan_arena_bytes(const gcc_plan *p) { return p->mem.arena_bytes; }
size_t gcc_plan_unshared_bytes(const gcc_plan *p) { return p->mem.total_bytes; }
int gcc_plan_num_steps(const gcc_plan *p) { return p->n_steps; }

void gcc_plan_free(gcc_plan *p) {
  if (!p)
    return;
  gcc_graph_free(p->g);
  gcc_mem_plan_free(&p->mem);
  free(p->tensors);
  free(p->ptrs);
  free(p->steps);
  free(p->arena);
  free(p);
}
