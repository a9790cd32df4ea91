/*
 * placement_report.c - the --dump-placement report (placement_report.h):
 * built once as JSON (jansson), then printed as JSON, text or Graphviz DOT
 * from the same data.
 */
#include "runtime/placement_report.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lowering.h"
#include "graph/ops.h"
#include "passes/passes.h"

gcc_status gcc_dump_format_parse(const char *s, gcc_dump_format *out, gcc_diag *d) {
  if (!s || strcmp(s, "text") == 0)
    *out = GCC_DUMP_TEXT;
  else if (strcmp(s, "json") == 0)
    *out = GCC_DUMP_JSON;
  else if (strcmp(s, "dot") == 0)
    *out = GCC_DUMP_DOT;
  else
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--dump-placement=%s: unknown format (text, json, dot)", s);
  return GCC_OK;
}

static const char *phase_name(gcc_phase p) {
  return p == GCC_PHASE_BACKWARD ? "backward" : p == GCC_PHASE_OPTIMIZER ? "optimizer" : "forward";
}

static int64_t value_bytes(const gcc_value *v) {
  return gcc_shape_numel(&v->shape, NULL) * (int64_t)gcc_dtype_size(v->dtype);
}

static const char *copy_kind(int from, int to) {
  if (from == GCC_DEV_CPU)
    return to == GCC_DEV_CPU ? "H2H" : "H2D";
  return to == GCC_DEV_CPU ? "D2H" : "D2D";
}

static json_t *shape_json(const gcc_shape *s) {
  json_t *a = json_array();
  for (int i = 0; i < s->ndim; i++)
    json_array_append_new(a, json_integer(s->dims[i]));
  return a;
}

static json_t *dev_json(int id) {
  char b[32];
  return json_string(gcc_dev_name(id, b, sizeof b));
}

/* value index -> 1 if some scheduled node reads or writes it */
static char *referenced(const gcc_graph *g) {
  char *r = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
  if (!r)
    return NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0)
        r[n->inputs[k]] = 1;
    for (int k = 0; k < n->n_outputs; k++)
      r[n->outputs[k]] = 1;
  }
  return r;
}

static json_t *build(const gcc_graph *g, const gcc_mem_plan *mem, const gcc_device_info *devs,
                     int n_devs, gcc_mode mode, int64_t batch) {
  char *ref = referenced(g);
  if (!ref)
    return NULL;
  json_t *root = json_object();
  json_object_set_new(root, "schema", json_string("gcc-train.placement/1"));
  json_object_set_new(root, "model", json_string(g->source));
  json_object_set_new(root, "mode", json_string(mode == GCC_MODE_EVAL ? "eval" : "train"));
  json_object_set_new(root, "batch_size", json_integer(batch));

  /* devices used: every id a node or value is on, plus those described */
  int max_id = 0;
  for (int i = 0; i < g->n_nodes; i++)
    max_id = g->nodes[i].device > max_id ? g->nodes[i].device : max_id;
  for (int i = 0; i < n_devs; i++)
    max_id = devs[i].id > max_id ? devs[i].id : max_id;
  json_t *devices = json_array();
  int64_t total_launches = 0;
  for (int id = 0; id <= max_id; id++) {
    const gcc_device_info *info = NULL;
    for (int i = 0; i < n_devs; i++)
      if (devs[i].id == id)
        info = &devs[i];
    int64_t nodes = 0, launches = 0, persistent = 0;
    double flops = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const gcc_node *n = &g->nodes[i];
      if (n->device != id)
        continue;
      nodes++;
      const gcc_op_desc *op = gcc_op(n->op);
      int once = (op->flags & GCC_OPF_COPY) && n->n_av > COPY_ONCE && n->av[COPY_ONCE].i;
      if (!(op->flags & (GCC_OPF_ALIAS | GCC_OPF_COPY)) && n->group < 0)
        launches++; /* an unfused node is a launch of its own */
      if (!once)
        flops += gcc_op_flops(g, i);
    }
    for (int k = 0; k < g->n_groups; k++)
      if (g->groups[k].device == id && g->groups[k].kind != GCC_GROUP_COPY)
        launches++; /* a fused group is one launch */
    for (int v = 0; v < g->n_values; v++) {
      const gcc_value *val = &g->values[v];
      if (ref[v] && val->device == id &&
          (val->kind == GCC_VALUE_PARAM || val->kind == GCC_VALUE_GRAD ||
           val->kind == GCC_VALUE_OPT_STATE))
        persistent += value_bytes(val);
    }
    if (!info && nodes == 0 && id != GCC_DEV_CPU)
      continue;
    total_launches += launches;
    json_t *dj = json_object();
    json_object_set_new(dj, "id", dev_json(id));
    json_object_set_new(dj, "name", json_string(info ? info->name : "unknown"));
    if (info && GCC_DEV_IS_CUDA(id)) {
      char cc[16];
      snprintf(cc, sizeof cc, "%d.%d", info->cc_major, info->cc_minor);
      json_object_set_new(dj, "compute_capability", json_string(cc));
    } else {
      json_object_set_new(dj, "compute_capability", json_null());
    }
    json_object_set_new(dj, "memory_bytes",
                        json_integer(info ? (json_int_t)info->memory_bytes : 0));
    json_object_set_new(dj, "units", json_integer(info ? info->units : 0));
    json_object_set_new(dj, "assumed", json_boolean(info && info->assumed));
    json_object_set_new(dj, "nodes", json_integer(nodes));
    json_object_set_new(dj, "launches_per_step", json_integer(launches));
    json_object_set_new(dj, "flops_per_step", json_real(flops));
    json_object_set_new(dj, "persistent_bytes", json_integer(persistent));
    json_object_set_new(dj, "step_arena_bytes",
                        json_integer(id < mem->n_devices ? (json_int_t)mem->device_bytes[id] : 0));
    json_array_append_new(devices, dj);
  }
  json_object_set_new(root, "devices", devices);

  json_t *nodes = json_array();
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    json_t *nj = json_object();
    json_object_set_new(nj, "name", json_string(n->name));
    json_object_set_new(nj, "op", json_string(gcc_op_name(n->op)));
    json_object_set_new(nj, "device", dev_json(n->device));
    json_object_set_new(nj, "reason", json_string(gcc_placement_reason_name(n->reason)));
    json_object_set_new(nj, "phase", json_string(phase_name(n->phase)));
    json_object_set_new(nj, "flops", json_real(gcc_op_flops(g, i)));
    json_object_set_new(nj, "group",
                        n->group >= 0 ? json_string(g->groups[n->group].name) : json_null());
    json_t *outs = json_array();
    for (int k = 0; k < n->n_outputs; k++) {
      const gcc_value *v = &g->values[n->outputs[k]];
      json_t *oj = json_object();
      json_object_set_new(oj, "name", json_string(v->name));
      json_object_set_new(oj, "dtype", json_string(gcc_dtype_name(v->dtype)));
      json_object_set_new(oj, "shape", shape_json(&v->shape));
      json_array_append_new(outs, oj);
    }
    json_object_set_new(nj, "outputs", outs);
    json_array_append_new(nodes, nj);
  }
  json_object_set_new(root, "nodes", nodes);

  json_t *groups = json_array();
  for (int k = 0; k < g->n_groups; k++) {
    const gcc_group *gr = &g->groups[k];
    json_t *gj = json_object();
    json_object_set_new(gj, "name", json_string(gr->name));
    json_object_set_new(gj, "kind", json_string(gcc_group_kind_name(gr->kind)));
    json_object_set_new(gj, "device", dev_json(gr->device));
    json_object_set_new(gj, "epilogue",
                        gr->kind == GCC_GROUP_GEMM ? json_string(gcc_epilogue_name(gr->epilogue))
                                                   : json_null());
    const char *call =
        gr->kind == GCC_GROUP_CUDNN ? gcc_lowering_of(g->nodes[gr->nodes[0]].op)->call : NULL;
    json_object_set_new(gj, "call", call ? json_string(call) : json_null());
    json_t *members = json_array();
    for (int m = 0; m < gr->n_nodes; m++)
      json_array_append_new(members, json_string(g->nodes[gr->nodes[m]].name));
    json_object_set_new(gj, "nodes", members);
    json_array_append_new(groups, gj);
  }
  json_object_set_new(root, "groups", groups);

  json_t *copies = json_array();
  int64_t n_step = 0, b_step = 0, n_once = 0, b_once = 0;
  /* session-start uploads of parameters and constants read on a device */
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *val = &g->values[v];
    if (!ref[v] || val->device == GCC_DEV_CPU ||
        (val->kind != GCC_VALUE_PARAM && val->kind != GCC_VALUE_CONST))
      continue;
    json_t *cj = json_object();
    json_object_set_new(cj, "value", json_string(val->name));
    json_object_set_new(cj, "node", json_null());
    json_object_set_new(cj, "from", dev_json(GCC_DEV_CPU));
    json_object_set_new(cj, "to", dev_json(val->device));
    json_object_set_new(cj, "kind", json_string(copy_kind(GCC_DEV_CPU, val->device)));
    json_object_set_new(cj, "bytes", json_integer(value_bytes(val)));
    json_object_set_new(cj, "when", json_string("once"));
    json_array_append_new(copies, cj);
    n_once++;
    b_once += value_bytes(val);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    if (!(gcc_op(n->op)->flags & GCC_OPF_COPY))
      continue;
    const gcc_value *src = &g->values[n->inputs[0]];
    int once = n->n_av > COPY_ONCE && n->av[COPY_ONCE].i;
    json_t *cj = json_object();
    json_object_set_new(cj, "value", json_string(src->name));
    json_object_set_new(cj, "node", json_string(n->name));
    json_object_set_new(cj, "from", dev_json(src->device));
    json_object_set_new(cj, "to", dev_json(n->device));
    json_object_set_new(cj, "kind", json_string(copy_kind(src->device, n->device)));
    json_object_set_new(cj, "bytes", json_integer(value_bytes(src)));
    json_object_set_new(cj, "when", json_string(once ? "once" : "per_step"));
    json_array_append_new(copies, cj);
    if (once) {
      n_once++;
      b_once += value_bytes(src);
    } else {
      n_step++;
      b_step += value_bytes(src);
    }
  }
  json_object_set_new(root, "copies", copies);
  /* data-parallel: the gradient buckets' all-reduces, in schedule order */
  json_t *reduces = json_array();
  int64_t n_reduce = 0, b_reduce = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    if (!(gcc_op(n->op)->flags & GCC_OPF_COLLECTIVE))
      continue;
    int64_t bytes = 0;
    json_t *grads = json_array();
    for (int k = 0; k < n->n_inputs; k++) {
      bytes += value_bytes(&g->values[n->inputs[k]]);
      json_array_append_new(grads, json_string(g->values[n->inputs[k]].name));
    }
    json_t *aj = json_object();
    json_object_set_new(aj, "node", json_string(n->name));
    json_object_set_new(aj, "bucket", json_integer(n->av[ALL_REDUCE_BUCKET].i));
    json_object_set_new(aj, "device", dev_json(n->device));
    /* a GPU reduces on its communication stream (NCCL), overlapped with the
     * rest of the backward pass; the CPU in its step, in order (MPI) */
    json_object_set_new(aj, "stream", json_string(GCC_DEV_IS_CUDA(n->device) ? "comm" : "host"));
    json_object_set_new(aj, "bytes", json_integer(bytes));
    json_object_set_new(aj, "gradients", grads);
    json_array_append_new(reduces, aj);
    n_reduce++;
    b_reduce += bytes;
  }
  json_object_set_new(root, "all_reduces", reduces);
  json_t *totals = json_object();
  json_object_set_new(totals, "all_reduces_per_step", json_integer(n_reduce));
  json_object_set_new(totals, "all_reduce_bytes_per_step", json_integer(b_reduce));
  json_object_set_new(totals, "copies_per_step", json_integer(n_step));
  json_object_set_new(totals, "bytes_per_step", json_integer(b_step));
  json_object_set_new(totals, "copies_once", json_integer(n_once));
  json_object_set_new(totals, "bytes_once", json_integer(b_once));
  json_object_set_new(totals, "launches_per_step", json_integer(total_launches));
  json_object_set_new(root, "totals", totals);
  /* --precision: every value stored in 16 bits, and what that saves against
   * float32 storage of the same value */
  json_t *prec = json_object(), *halves = json_array();
  int64_t saved = 0, n_half = 0;
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *val = &g->values[v];
    if (!ref[v] || gcc_dtype_size(val->dtype) != 2)
      continue;
    int64_t bytes = value_bytes(val), s = gcc_shape_numel(&val->shape, NULL) * 4 - bytes;
    json_t *hj = json_object();
    json_object_set_new(hj, "name", json_string(val->name));
    json_object_set_new(hj, "dtype", json_string(gcc_dtype_name(val->dtype)));
    json_object_set_new(hj, "shape", shape_json(&val->shape));
    json_object_set_new(hj, "device", dev_json(val->device));
    json_object_set_new(hj, "bytes", json_integer(bytes));
    json_object_set_new(hj, "saved_bytes", json_integer(s));
    json_array_append_new(halves, hj);
    saved += s;
    n_half++;
  }
  json_object_set_new(prec, "mode", json_string(gcc_precision_name(g->precision)));
  json_object_set_new(prec, "values_16bit", json_integer(n_half));
  json_object_set_new(prec, "saved_bytes", json_integer(saved));
  json_object_set_new(prec, "values", halves);
  json_object_set_new(root, "precision", prec);
  /* the layout pass: every NHWC value and every conversion it inserted
   * (passes/layout.c); values not listed are NCHW */
  json_t *lay = json_object(), *nhwc = json_array(), *convs = json_array();
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *val = &g->values[v];
    if (!ref[v] || val->layout != GCC_LAYOUT_NHWC)
      continue;
    json_t *vj = json_object();
    json_object_set_new(vj, "name", json_string(val->name));
    json_object_set_new(vj, "shape", shape_json(&val->shape));
    json_object_set_new(vj, "device", dev_json(val->device));
    json_array_append_new(nhwc, vj);
  }
  int64_t conv_bytes = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (!gcc_layout_is_conversion(g, i))
      continue;
    const gcc_node *n = &g->nodes[i];
    const gcc_value *x = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
    json_t *cj = json_object();
    json_object_set_new(cj, "node", json_string(n->name));
    json_object_set_new(cj, "value", json_string(x->name));
    json_object_set_new(cj, "from", json_string(gcc_layout_name(x->layout)));
    json_object_set_new(cj, "to", json_string(gcc_layout_name(y->layout)));
    json_object_set_new(cj, "device", dev_json(n->device));
    json_object_set_new(cj, "phase", json_string(phase_name(n->phase)));
    json_object_set_new(cj, "bytes", json_integer(value_bytes(y)));
    json_array_append_new(convs, cj);
    conv_bytes += value_bytes(y);
  }
  json_object_set_new(lay, "values_nhwc", json_integer((json_int_t)json_array_size(nhwc)));
  json_object_set_new(lay, "conversions_per_step",
                      json_integer((json_int_t)json_array_size(convs)));
  json_object_set_new(lay, "conversion_bytes_per_step", json_integer(conv_bytes));
  json_object_set_new(lay, "nhwc", nhwc);
  json_object_set_new(lay, "conversions", convs);
  json_object_set_new(root, "layout", lay);
  free(ref);
  return root;
}

/* ---- renderings ------------------------------------------------------- */

static const char *str(const json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "null";
}

static long long num(const json_t *o, const char *k) {
  return (long long)json_integer_value(json_object_get(o, k));
}

static void shape_text(const json_t *shape, char *buf, size_t cap) {
  size_t used = (size_t)snprintf(buf, cap, "[");
  size_t i;
  json_t *dim;
  json_array_foreach(shape, i, dim) {
    if (used < cap)
      used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "",
                               (long long)json_integer_value(dim));
  }
  if (used < cap)
    snprintf(buf + used, cap - used, "]");
}

static void render_text(const json_t *r, FILE *f) {
  fprintf(f, "placement of %s (%s, batch %lld)\n\ndevices\n", str(r, "model"), str(r, "mode"),
          num(r, "batch_size"));
  size_t i;
  json_t *dj;
  json_array_foreach(json_object_get(r, "devices"), i, dj) {
    const json_t *cc = json_object_get(dj, "compute_capability");
    int cuda = json_is_string(cc);
    fprintf(f, "  %-7s %s%s%s, %lld %s, %lld bytes of memory%s\n", str(dj, "id"), str(dj, "name"),
            cuda ? ", compute capability " : "", cuda ? json_string_value(cc) : "",
            num(dj, "units"), cuda ? "SMs" : "cores", num(dj, "memory_bytes"),
            json_is_true(json_object_get(dj, "assumed")) ? " (no GPU probed: from --cuda-arch)"
                                                         : "");
    fprintf(f,
            "          %lld nodes, %lld launches per step, %.1f MFLOP per step, persistent arena "
            "%lld bytes, step arena %lld bytes\n",
            num(dj, "nodes"), num(dj, "launches_per_step"),
            json_real_value(json_object_get(dj, "flops_per_step")) / 1e6,
            num(dj, "persistent_bytes"), num(dj, "step_arena_bytes"));
  }
  fprintf(f, "\nnodes\n  %-26s %-24s %-8s %-9s %-44s %s\n", "name", "op", "device", "phase",
          "reason", "output");
  json_t *nj;
  json_array_foreach(json_object_get(r, "nodes"), i, nj) {
    char sh[128] = "-";
    const json_t *outs = json_object_get(nj, "outputs");
    const json_t *o0 = json_array_get(outs, 0);
    char out[256] = "-";
    if (o0) {
      shape_text(json_object_get(o0, "shape"), sh, sizeof sh);
      snprintf(out, sizeof out, "%s %s%s", str(o0, "name"), str(o0, "dtype"), sh);
    }
    fprintf(f, "  %-26s %-24s %-8s %-9s %-44s %s\n", str(nj, "name"), str(nj, "op"),
            str(nj, "device"), str(nj, "phase"), str(nj, "reason"), out);
  }
  const json_t *t = json_object_get(r, "totals");
  fprintf(f,
          "\ncopies: %lld per step (%lld bytes per step), %lld once (%lld bytes at session "
          "start)\n  %-28s %-8s    %-8s %-5s %12s  %s\n",
          num(t, "copies_per_step"), num(t, "bytes_per_step"), num(t, "copies_once"),
          num(t, "bytes_once"), "value", "from", "to", "kind", "bytes", "when");
  json_t *cj;
  json_array_foreach(json_object_get(r, "copies"), i, cj) {
    fprintf(f, "  %-28s %-8s -> %-8s %-5s %12lld  %s\n", str(cj, "value"), str(cj, "from"),
            str(cj, "to"), str(cj, "kind"), num(cj, "bytes"),
            strcmp(str(cj, "when"), "once") == 0 ? "once" : "per step");
  }
  const json_t *reduces = json_object_get(r, "all_reduces");
  if (json_array_size(reduces) > 0) {
    fprintf(f,
            "\nall-reduces (data-parallel gradient buckets): %lld per step (%lld bytes per step "
            "per rank)\n  %-24s %6s %-8s %-6s %12s  %s\n",
            num(t, "all_reduces_per_step"), num(t, "all_reduce_bytes_per_step"), "node", "bucket",
            "device", "stream", "bytes", "gradients");
    json_t *aj;
    json_array_foreach(reduces, i, aj) {
      char grads[512] = "";
      size_t m;
      json_t *mj;
      json_array_foreach(json_object_get(aj, "gradients"), m, mj) {
        if (m)
          strncat(grads, ", ", sizeof grads - strlen(grads) - 1);
        strncat(grads, json_string_value(mj), sizeof grads - strlen(grads) - 1);
      }
      fprintf(f, "  %-24s %6lld %-8s %-6s %12lld  %s\n", str(aj, "node"), num(aj, "bucket"),
              str(aj, "device"), str(aj, "stream"), num(aj, "bytes"), grads);
    }
  }
  const json_t *groups = json_object_get(r, "groups");
  if (json_array_size(groups) > 0) {
    fprintf(f, "\nfused groups (one launch each, copies excepted)\n  %-40s %-9s %-8s %-32s %s\n",
            "name", "kind", "device", "epilogue / library call", "nodes");
    json_t *gj;
    json_array_foreach(groups, i, gj) {
      char members[512] = "";
      size_t m;
      json_t *mj;
      json_array_foreach(json_object_get(gj, "nodes"), m, mj) {
        if (m)
          strncat(members, ", ", sizeof members - strlen(members) - 1);
        strncat(members, json_string_value(mj), sizeof members - strlen(members) - 1);
      }
      const char *epi = json_string_value(json_object_get(gj, "epilogue"));
      if (!epi)
        epi = json_string_value(json_object_get(gj, "call"));
      fprintf(f, "  %-40s %-9s %-8s %-32s %s\n", str(gj, "name"), str(gj, "kind"),
              str(gj, "device"), epi ? epi : "-", members);
    }
  }
  fprintf(f, "\nlaunches per step (kernels and library calls, all devices): %lld\n",
          num(t, "launches_per_step"));
  const json_t *prec = json_object_get(r, "precision");
  const json_t *halves = json_object_get(prec, "values");
  if (json_array_size(halves) > 0) {
    fprintf(f,
            "\nprecision %s: %lld values stored in 16 bits, %lld bytes fewer than in float32\n"
            "  %-36s %-9s %-8s %-20s %12s %12s\n",
            str(prec, "mode"), num(prec, "values_16bit"), num(prec, "saved_bytes"), "value",
            "dtype", "device", "shape", "bytes", "saved");
    json_t *hj;
    json_array_foreach(halves, i, hj) {
      char sh[128] = "";
      shape_text(json_object_get(hj, "shape"), sh, sizeof sh);
      fprintf(f, "  %-36s %-9s %-8s %-20s %12lld %12lld\n", str(hj, "name"), str(hj, "dtype"),
              str(hj, "device"), sh, num(hj, "bytes"), num(hj, "saved_bytes"));
    }
  } else if (strcmp(str(prec, "mode"), "fp32") != 0) {
    fprintf(f, "\nprecision %s: every value float32\n", str(prec, "mode"));
  }
  const json_t *lay = json_object_get(r, "layout");
  if (num(lay, "values_nhwc") > 0) {
    fprintf(f,
            "\nlayout: %lld values NHWC (channels-last), every other value NCHW; %lld layout "
            "conversions (Transpose nodes), %lld bytes per step\n  %-40s %-12s %-8s %-5s %12s\n",
            num(lay, "values_nhwc"), num(lay, "conversions_per_step"),
            num(lay, "conversion_bytes_per_step"), "conversion", "layouts", "device", "phase",
            "bytes");
    size_t li;
    json_t *cj;
    json_array_foreach(json_object_get(lay, "conversions"), li, cj) {
      char ft[32];
      snprintf(ft, sizeof ft, "%s->%s", str(cj, "from"), str(cj, "to"));
      fprintf(f, "  %-40s %-12s %-8s %-5s %12lld\n", str(cj, "node"), ft, str(cj, "device"),
              str(cj, "phase"), num(cj, "bytes"));
    }
    fprintf(f, "  NHWC values:");
    json_t *vj;
    json_array_foreach(json_object_get(lay, "nhwc"), li, vj) {
      char sh[128] = "";
      shape_text(json_object_get(vj, "shape"), sh, sizeof sh);
      fprintf(f, "%s %s%s", li ? "," : "", str(vj, "name"), sh);
    }
    fprintf(f, "\n");
  }
}

/* DOT strings: escape quotes and backslashes, newlines as \\n */
static void dot_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '\n') { /* a DOT line break inside a label */
      fputs("\\n", f);
      continue;
    }
    if (*s == '"' || *s == '\\')
      fputc('\\', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static const char *dev_color(int id) {
  static const char *const c[] = {"#9ecae1", "#a1d99b", "#fdd0a2", "#dadaeb", "#fcbba1"};
  return c[id < 0 ? 0 : id % 5];
}

/* One node statement (indented by `ind` spaces). */
static void dot_node(const gcc_graph *g, int i, int ind, FILE *f) {
  const gcc_node *n = &g->nodes[i];
  char dev[32], label[1024];
  if (gcc_op(n->op)->flags & GCC_OPF_COPY) {
    const gcc_value *src = &g->values[n->inputs[0]];
    char from[32];
    snprintf(label, sizeof label, "%s\n%s %s -> %s\n%" PRId64 " bytes%s", n->name,
             copy_kind(src->device, n->device), gcc_dev_name(src->device, from, sizeof from),
             gcc_dev_name(n->device, dev, sizeof dev), value_bytes(src),
             n->n_av > COPY_ONCE && n->av[COPY_ONCE].i ? " once" : " per step");
    fprintf(f, "%*s\"n%d\" [label=", ind, "", i);
    dot_str(f, label);
    fprintf(f, ", shape=box, style=\"filled,dashed\", fillcolor=\"#fd8d3c\"];\n");
  } else {
    snprintf(label, sizeof label, "%s\n%s\n%s", n->name, gcc_op_name(n->op),
             gcc_dev_name(n->device, dev, sizeof dev));
    fprintf(f, "%*s\"n%d\" [label=", ind, "", i);
    dot_str(f, label);
    fprintf(f, ", shape=box, fillcolor=\"%s\"];\n", dev_color(n->device));
  }
}

/* A value without a producer (input, parameter, state): an ellipse. */
static void dot_value(const gcc_graph *g, int v, int ind, FILE *f) {
  const gcc_value *val = &g->values[v];
  char sh[128], label[1024];
  snprintf(label, sizeof label, "%s\n%s %s%s", val->name, gcc_value_kind_name(val->kind),
           gcc_dtype_name(val->dtype), gcc_shape_str(&val->shape, sh, sizeof sh));
  fprintf(f, "%*s\"v%d\" [label=", ind, "", v);
  dot_str(f, label);
  fprintf(f, ", shape=ellipse, fontsize=8, fillcolor=\"%s\"];\n", dev_color(val->device));
}

/* The one phase whose bit is set in `mask`, else -1. */
static int value_phase(unsigned mask) {
  return mask == 1 ? 0 : mask == 2 ? 1 : mask == 4 ? 2 : -1;
}

/* Graphviz, drawn left to right: a legend (devices, copies, launches,
 * values); the forward, backward and optimizer phases as clusters in that
 * order; inside them, each fused group (one launch: a generated kernel or
 * a library call with its epilogue) as a cluster of its nodes, named as
 * the profile and the text report name it. Values without a producer
 * (inputs, parameters, optimizer state) are ellipses; edges carry the
 * value's name as a tooltip (in SVG), not as a label. */
static void render_dot(const gcc_graph *g, FILE *f) {
  static const char *const kPhase[] = {"forward", "backward", "optimizer"};
  fprintf(f, "digraph placement {\n  rankdir=LR;\n  newrank=true;\n  ranksep=0.3;\n"
             "  node [style=filled, fontname=\"Helvetica\", fontsize=10];\n"
             "  edge [color=\"#666666\", arrowsize=0.6];\n");
  char dev[32];
  fprintf(f, "  subgraph cluster_legend {\n    label=\"legend\";\n    style=dashed;\n"
             "    fontname=\"Helvetica\";\n");
  int max_id = 0;
  for (int i = 0; i < g->n_nodes; i++)
    max_id = g->nodes[i].device > max_id ? g->nodes[i].device : max_id;
  for (int id = 0; id <= max_id; id++)
    fprintf(f, "    \"legend_%d\" [label=\"runs on %s\", shape=box, fillcolor=\"%s\"];\n", id,
            gcc_dev_name(id, dev, sizeof dev), dev_color(id));
  fprintf(f, "    \"legend_copy\" [label=\"copy between devices\\n(H2D, D2H, D2D) and its "
             "bytes\", shape=box, style=\"filled,dashed\", fillcolor=\"#fd8d3c\"];\n"
             "    \"legend_value\" [label=\"input, parameter,\\noptimizer state\", "
             "shape=ellipse, fillcolor=\"#ffffff\"];\n"
             "    subgraph cluster_legend_launch {\n      label=\"one launch (fused group)\";\n"
             "      style=\"rounded,filled\";\n      fillcolor=\"#eeeeee\";\n"
             "      \"legend_launch\" [label=\"nodes it runs\", shape=box, "
             "fillcolor=\"#ffffff\"];\n    }\n  }\n");
  char *ref = referenced(g);
  /* the phases that read each value without a producer: one read by a
   * single phase (optimizer state, the loss's seed) is drawn in it */
  unsigned char *readers = calloc((size_t)g->n_values + 1, 1);
  for (int i = 0; i < g->n_nodes && readers; i++)
    for (int k = 0; k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] >= 0 && (int)g->nodes[i].phase >= 0 && g->nodes[i].phase < 3)
        readers[g->nodes[i].inputs[k]] |= (unsigned char)(1u << g->nodes[i].phase);
  for (int v = 0; v < g->n_values && ref; v++) {
    const gcc_value *val = &g->values[v];
    if (!ref[v] || val->producer >= 0 || (readers && value_phase(readers[v]) >= 0))
      continue;
    dot_value(g, v, 2, f);
  }
  /* a group is drawn in the phase of its first node */
  for (int p = 0; p < 3; p++) {
    int any = 0;
    for (int i = 0; i < g->n_nodes && !any; i++)
      any = (int)g->nodes[i].phase == p;
    if (!any)
      continue;
    fprintf(f,
            "  subgraph cluster_%s {\n    label=\"%s\";\n    style=rounded;\n"
            "    color=\"#999999\";\n    fontname=\"Helvetica\";\n",
            kPhase[p], kPhase[p]);
    for (int k = 0; k < g->n_groups; k++) {
      const gcc_group *gr = &g->groups[k];
      if (gr->n_nodes == 0 || (int)g->nodes[gr->nodes[0]].phase != p)
        continue;
      fprintf(f, "    subgraph cluster_group_%d {\n      label=", k);
      dot_str(f, gr->name);
      fprintf(f, ";\n      style=\"rounded,filled\";\n      fillcolor=\"#eeeeee\";\n"
                 "      fontsize=9;\n");
      for (int j = 0; j < gr->n_nodes; j++)
        dot_node(g, gr->nodes[j], 6, f);
      fprintf(f, "    }\n");
    }
    for (int i = 0; i < g->n_nodes; i++)
      if ((int)g->nodes[i].phase == p && g->nodes[i].group < 0)
        dot_node(g, i, 4, f);
    for (int v = 0; v < g->n_values && ref && readers; v++)
      if (ref[v] && g->values[v].producer < 0 && value_phase(readers[v]) == p)
        dot_value(g, v, 4, f);
    fprintf(f, "  }\n");
  }
  for (int i = 0; i < g->n_nodes; i++) { /* phases beyond the three, if any */
    int p = (int)g->nodes[i].phase;
    if ((p < 0 || p > 2) && g->nodes[i].group < 0)
      dot_node(g, i, 2, f);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0)
        continue;
      int p = g->values[v].producer;
      if (p >= 0)
        fprintf(f, "  \"n%d\" -> \"n%d\" [tooltip=", p, i);
      else
        fprintf(f, "  \"v%d\" -> \"n%d\" [tooltip=", v, i);
      dot_str(f, g->values[v].name);
      fprintf(f, "];\n");
    }
  }
  free(ref);
  free(readers);
  fprintf(f, "}\n");
}

gcc_status gcc_placement_report_string(const gcc_graph *g, const gcc_mem_plan *mem,
                                       const gcc_device_info *devices, int n_devices, gcc_mode mode,
                                       int64_t batch, gcc_dump_format fmt, char **out,
                                       gcc_diag *d) {
  *out = NULL;
  json_t *r = build(g, mem, devices, n_devices, mode, batch);
  if (!r)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (placement report)");
  char *buf = NULL;
  size_t len = 0;
  if (fmt == GCC_DUMP_JSON) {
    buf = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  } else {
    FILE *m = open_memstream(&buf, &len);
    if (m) {
      if (fmt == GCC_DUMP_TEXT)
        render_text(r, m);
      else
        render_dot(g, m);
      if (fclose(m) != 0) {
        free(buf);
        buf = NULL;
      }
    }
  }
  json_decref(r);
  if (!buf)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (placement report)");
  if (fmt == GCC_DUMP_JSON) { /* json_dumps has no final newline */
    size_t n = strlen(buf);
    char *nb = realloc(buf, n + 2);
    if (!nb) {
      free(buf);
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (placement report)");
    }
    nb[n] = '\n';
    nb[n + 1] = '\0';
    buf = nb;
  }
  *out = buf;
  return GCC_OK;
}

gcc_status gcc_placement_report_write(const gcc_graph *g, const gcc_mem_plan *mem,
                                      const gcc_device_info *devices, int n_devices, gcc_mode mode,
                                      int64_t batch, gcc_dump_format fmt, FILE *f, gcc_diag *d) {
  char *s;
  GCC_TRY(gcc_placement_report_string(g, mem, devices, n_devices, mode, batch, fmt, &s, d));
  size_t n = strlen(s);
  int ok = fwrite(s, 1, n, f) == n && fflush(f) == 0;
  free(s);
  if (!ok)
    return gcc_diag_set(d, GCC_ERR_IO, "cannot write the placement report");
  return GCC_OK;
}
