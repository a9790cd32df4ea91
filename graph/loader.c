/*
 * loader.c - graph.proto models (loader.h): reading (protobuf-c, every
 * field checked, errors naming the file and the node or value), writing
 * (serialize, then an atomic temp-file, fsync and rename), and the atomic
 * file writer the other layers use.
 */
#include "graph/loader.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/graph.pb-c.h"
#include "graph/ops.h"
#include "graph/outfile.h"
#include "graph/util.h"

#define INLINE_INPUTS_NAME  "training.inline_data.inputs"
#define INLINE_TARGETS_NAME "training.inline_data.targets"

/* ---- reading ---------------------------------------------------------- */

static gcc_status check_dtype(const char *src, const char *what, const char *name, int has, int dt,
                              gcc_diag *d) {
  if (!has || dt == GCC__DATA_TYPE__DT_UNDEFINED)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s '%s' has no dtype", src, what, name);
  if (dt < 0 || dt >= GCC_DT_COUNT || !gcc_dtype_supported((gcc_dtype)dt))
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s '%s' has dtype %s, which this version does not support "
                        "(supported: float32, int64, int32, bool)",
                        src, what, name,
                        dt >= 0 && dt < GCC_DT_COUNT ? gcc_dtype_name((gcc_dtype)dt) : "unknown");
  return GCC_OK;
}

static gcc_status read_dims(const char *src, const char *what, const char *name, size_t n_dims,
                            const int64_t *dims, int allow_batch, gcc_shape *out, gcc_diag *d) {
  if (n_dims > GCC_MAX_DIMS)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s '%s' has %zu dims (at most %d)", src, what,
                        name, n_dims, GCC_MAX_DIMS);
  out->ndim = (int)n_dims;
  for (size_t i = 0; i < n_dims; i++) {
    if (dims[i] == GCC_BATCH_DIM && allow_batch && i == 0) {
      out->dims[i] = dims[i];
      continue;
    }
    if (dims[i] <= 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: %s '%s': dim %zu is %" PRId64 " (dims must be > 0%s)", src, what,
                          name, i, dims[i], allow_batch ? "; -1 only as the batch dim 0" : "");
    out->dims[i] = dims[i];
  }
  int overflow = 0;
  gcc_shape tmp = *out;
  if (allow_batch && tmp.ndim > 0 && tmp.dims[0] == GCC_BATCH_DIM)
    tmp.dims[0] = 1;
  int64_t numel = gcc_shape_numel(&tmp, &overflow);
  if (overflow || numel > (INT64_MAX / 8))
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s '%s': element count overflows", src, what,
                        name);
  return GCC_OK;
}

/* Adds a tensor (initializer or inline data) as a value of `kind`. */
static gcc_status add_tensor(gcc_graph *g, const Gcc__Tensor *t, const char *what, const char *name,
                             int trainable, int *out, gcc_diag *d) {
  const char *src = g->source;
  if (!name || !*name)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s has an empty name", src, what);
  GCC_TRY(check_dtype(src, what, name, t->has_dtype, t->dtype, d));
  gcc_shape s;
  GCC_TRY(read_dims(src, what, name, t->n_dims, t->dims, 0, &s, d));
  int64_t numel = gcc_shape_numel(&s, NULL);
  size_t want = (size_t)numel * gcc_dtype_size((gcc_dtype)t->dtype);
  size_t have = t->has_raw_data ? t->raw_data.len : 0;
  if (have != want) {
    char sh[128];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s '%s': raw_data has %zu bytes, expected %zu (%s x %s of %zu "
                        "bytes)",
                        src, what, name, have, want, gcc_shape_str(&s, sh, sizeof sh),
                        gcc_dtype_name((gcc_dtype)t->dtype), gcc_dtype_size((gcc_dtype)t->dtype));
  }
  /* Tensor.constant: a float32 initializer that is not trained (a buffer) */
  int constant = t->has_constant && t->constant;
  gcc_value_kind kind = (trainable && !constant && t->dtype == GCC__DATA_TYPE__DT_FLOAT32)
                            ? GCC_VALUE_PARAM
                            : GCC_VALUE_CONST;
  int state = t->has_state && t->state;
  if (state && kind != GCC_VALUE_PARAM)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s '%s': `state` is set on a tensor that is not a FLOAT32 "
                        "non-constant initializer",
                        src, what, name);
  if (gcc_graph_find(g, name) >= 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: value '%s' is defined twice", src, name);
  int idx;
  GCC_TRY(gcc_graph_add_value(g, name, (gcc_dtype)t->dtype, &s, kind,
                              t->has_raw_data ? t->raw_data.data : NULL, want, &idx, d));
  g->values[idx].state = state;
  if (out)
    *out = idx;
  return GCC_OK;
}

static gcc_status check_device(const char *src, const char *node, const char *dev, gcc_diag *d) {
  if (!dev || !*dev)
    return GCC_OK;
  if (strcmp(dev, "cpu") == 0 || strcmp(dev, "cuda") == 0)
    return GCC_OK;
  if (strncmp(dev, "cuda:", 5) == 0 && dev[5]) {
    const char *p = dev + 5;
    while (*p >= '0' && *p <= '9')
      p++;
    if (*p == '\0' && p - (dev + 5) <= 4)
      return GCC_OK;
  }
  return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                      "%s: node '%s': device '%s' is not a device name (cpu, cuda, cuda:N)", src,
                      node, dev);
}

static gcc_status read_attr(gcc_graph *g, int node, const Gcc__Attribute *a, gcc_diag *d) {
  const char *src = g->source;
  const char *nn = g->nodes[node].name;
  if (!a->name || !*a->name)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: node '%s': an attribute has no name", src,
                        nn);
  if (gcc_node_attr(&g->nodes[node], a->name))
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: node '%s': attribute '%s' given twice", src,
                        nn, a->name);
  gcc_status s;
  switch (a->has_type ? (int)a->type : 0) {
  case GCC__ATTRIBUTE__TYPE__INT: s = gcc_node_set_int(g, node, a->name, a->i); break;
  case GCC__ATTRIBUTE__TYPE__FLOAT: s = gcc_node_set_float(g, node, a->name, a->f); break;
  case GCC__ATTRIBUTE__TYPE__STRING:
    s = gcc_node_set_string(g, node, a->name, a->s ? a->s : "");
    break;
  case GCC__ATTRIBUTE__TYPE__INTS:
    if (a->n_ints > 64)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: node '%s': attribute '%s' is too long", src,
                          nn, a->name);
    s = gcc_node_set_ints(g, node, a->name, a->ints, (int)a->n_ints);
    break;
  case GCC__ATTRIBUTE__TYPE__FLOATS:
    if (a->n_floats > 4096)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: node '%s': attribute '%s' is too long", src,
                          nn, a->name);
    s = gcc_node_set_floats(g, node, a->name, a->floats, (int)a->n_floats);
    break;
  default:
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: node '%s': attribute '%s' has no valid type",
                        src, nn, a->name);
  }
  if (s != GCC_OK)
    return gcc_diag_set(d, s, "out of memory (attributes)");
  return GCC_OK;
}

static gcc_status need_value(const gcc_graph *g, const char *field, const char *name, gcc_diag *d) {
  if (name && *name && gcc_graph_find(g, name) < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: training.%s names value '%s', which the graph does not define",
                        g->source, field, name);
  return GCC_OK;
}

static gcc_status check_prediction(const gcc_graph *g, gcc_diag *d);

/* TrainingSpec.lr_schedule: the schedule's fields in PyTorch's ranges. */
static gcc_status read_schedule(gcc_training *tr, const Gcc__LrSchedule *ls, const char *src,
                                gcc_diag *d) {
  gcc_lr_schedule *s = &tr->sched;
  memset(s, 0, sizeof *s);
  if (!ls || ls->kind_case == GCC__LR_SCHEDULE__KIND__NOT_SET)
    return GCC_OK;
  if (ls->kind_case == GCC__LR_SCHEDULE__KIND_STEP && ls->step) {
    s->kind = GCC_SCHED_STEP;
    s->step_size = ls->step->has_step_size ? ls->step->step_size : 0;
    s->gamma = ls->step->gamma;
    if (s->step_size < 1 || !isfinite(s->gamma) || !(s->gamma > 0.0f))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.lr_schedule.step: step_size must be >= 1 and gamma a "
                          "finite number > 0 (got %" PRId64 ", %g)",
                          src, s->step_size, (double)s->gamma);
  } else if (ls->kind_case == GCC__LR_SCHEDULE__KIND_COSINE && ls->cosine) {
    s->kind = GCC_SCHED_COSINE;
    s->t_max = ls->cosine->has_t_max ? ls->cosine->t_max : 0;
    s->eta_min = ls->cosine->has_eta_min ? ls->cosine->eta_min : 0.0f;
    if (s->t_max < 0 || !isfinite(s->eta_min) || s->eta_min < 0.0f)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.lr_schedule.cosine: t_max must be >= 0 and eta_min a "
                          "finite number >= 0 (got %" PRId64 ", %g)",
                          src, s->t_max, (double)s->eta_min);
  } else if (ls->kind_case == GCC__LR_SCHEDULE__KIND_WARMUP_COSINE && ls->warmup_cosine) {
    const Gcc__WarmupCosineLR *w = ls->warmup_cosine;
    s->kind = GCC_SCHED_WARMUP_COSINE;
    s->warmup = w->has_warmup ? w->warmup : 0;
    s->t_max = w->has_max_steps ? w->max_steps : 0;
    s->eta_min = w->has_min_lr ? w->min_lr : 0.0f;
    if (s->warmup < 0 || s->t_max <= s->warmup || !isfinite(s->eta_min) || s->eta_min < 0.0f)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.lr_schedule.warmup_cosine: warmup must be >= 0, "
                          "max_steps > warmup and min_lr a finite number >= 0 (got %" PRId64
                          ", %" PRId64 ", %g)",
                          src, s->warmup, s->t_max, (double)s->eta_min);
  }
  return GCC_OK;
}

static gcc_status read_training(gcc_graph *g, const Gcc__TrainingSpec *t, gcc_diag *d) {
  gcc_training *tr = &g->training;
  const char *src = g->source;
  tr->present = 1;
  tr->loss = gcc_strdup(t->loss && *t->loss ? t->loss : NULL);
  tr->prediction = gcc_strdup(t->prediction && *t->prediction ? t->prediction : NULL);
  tr->input = gcc_strdup(t->input && *t->input ? t->input : NULL);
  tr->target = gcc_strdup(t->target && *t->target ? t->target : NULL);
  tr->dataset = gcc_strdup(t->dataset && *t->dataset ? t->dataset : NULL);
  GCC_TRY(need_value(g, "loss", tr->loss, d));
  GCC_TRY(need_value(g, "prediction", tr->prediction, d));
  GCC_TRY(need_value(g, "input", tr->input, d));
  GCC_TRY(need_value(g, "target", tr->target, d));
  if (!tr->loss)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: training.loss is not set", src);
  tr->batch_size = t->has_batch_size ? t->batch_size : 64;
  tr->epochs = t->has_epochs ? t->epochs : 1;
  if (tr->batch_size <= 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: training.batch_size is %" PRId64 " (must be > 0)", src,
                        tr->batch_size);
  if (tr->epochs < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: training.epochs is %" PRId64 " (must be >= 0)", src, tr->epochs);
  if (t->n_mean > GCC_MAX_CHANNELS || t->n_std > GCC_MAX_CHANNELS || t->n_mean != t->n_std)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: training.mean and training.std must have the same length (at most "
                        "%d), got %zu and %zu",
                        src, GCC_MAX_CHANNELS, t->n_mean, t->n_std);
  tr->n_mean = (int)t->n_mean;
  tr->n_std = (int)t->n_std;
  for (size_t i = 0; i < t->n_mean; i++) {
    tr->mean[i] = t->mean[i];
    tr->std[i] = t->std[i];
    if (!(t->std[i] > 0.0f))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: training.std[%zu] must be > 0", src, i);
  }
  tr->seed = t->has_seed ? t->seed : 0;
  gcc_optimizer *o = &tr->opt;
  o->kind = GCC_OPT_SGD;
  o->lr = 0.01f;
  o->beta1 = 0.9f;
  o->beta2 = 0.999f;
  o->eps = 1e-8f;
  if (t->optimizer && t->optimizer->kind_case == GCC__OPTIMIZER__KIND_SGD && t->optimizer->sgd) {
    const Gcc__SGD *s = t->optimizer->sgd;
    if (!s->has_lr)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: training.optimizer.sgd.lr is not set",
                          src);
    o->lr = s->lr;
    o->momentum = s->has_momentum ? s->momentum : 0.0f;
    o->dampening = s->has_dampening ? s->dampening : 0.0f;
    o->weight_decay = s->has_weight_decay ? s->weight_decay : 0.0f;
    o->nesterov = s->has_nesterov && s->nesterov;
    if (o->nesterov && (o->momentum <= 0.0f || o->dampening != 0.0f))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.optimizer.sgd: nesterov needs momentum > 0 and zero "
                          "dampening (as torch.optim.SGD)",
                          src);
  } else if (t->optimizer && t->optimizer->kind_case == GCC__OPTIMIZER__KIND_ADAM &&
             t->optimizer->adam) {
    const Gcc__Adam *a = t->optimizer->adam;
    o->kind = GCC_OPT_ADAM;
    o->lr = a->lr;
    o->beta1 = a->beta1;
    o->beta2 = a->beta2;
    o->eps = a->eps;
    o->weight_decay = a->has_weight_decay ? a->weight_decay : 0.0f;
    o->decoupled = a->has_decoupled_weight_decay && a->decoupled_weight_decay;
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f && o->beta2 >= 0.0f && o->beta2 < 1.0f))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.optimizer.adam: betas must be in [0, 1)", src);
  } else {
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: training.optimizer is not set (sgd or adam)",
                        src);
  }
  o->decay_matrices_only =
      t->optimizer->has_decay_matrices_only && t->optimizer->decay_matrices_only;
  o->clip_grad_norm = t->optimizer->has_clip_grad_norm ? t->optimizer->clip_grad_norm : 0.0f;
  if (!isfinite(o->clip_grad_norm) || o->clip_grad_norm < 0.0f)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: training.optimizer.clip_grad_norm is %g: it must be a finite number "
                        ">= 0 (0: no clipping)",
                        src, (double)o->clip_grad_norm);
  /* every hyperparameter finite and in torch.optim's range: a NaN or Inf
   * here would make the first update non-finite */
  const char *kind = o->kind == GCC_OPT_ADAM ? "adam" : "sgd";
  const struct {
    const char *name;
    float v;
    int positive; /* > 0 rather than >= 0 */
  } hp[] = {{"lr", o->lr, 0},
            {"weight_decay", o->weight_decay, 0},
            {"momentum", o->momentum, 0},
            {"dampening", o->dampening, 0},
            {"eps", o->eps, o->kind == GCC_OPT_ADAM}};
  for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
    if (!isfinite(hp[i].v) || hp[i].v < 0.0f || (hp[i].positive && hp[i].v == 0.0f))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.optimizer.%s.%s is %g: it must be a finite number %s 0",
                          src, kind, hp[i].name, (double)hp[i].v, hp[i].positive ? ">" : ">=");
  if (t->inline_data) {
    if (!t->inline_data->inputs || !t->inline_data->targets)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.inline_data needs both inputs and targets", src);
    GCC_TRY(add_tensor(g, t->inline_data->inputs, "training.inline_data.inputs", INLINE_INPUTS_NAME,
                       0, &tr->inline_inputs, d));
    GCC_TRY(add_tensor(g, t->inline_data->targets, "training.inline_data.targets",
                       INLINE_TARGETS_NAME, 0, &tr->inline_targets, d));
    const gcc_shape *si = &g->values[tr->inline_inputs].shape;
    const gcc_shape *st = &g->values[tr->inline_targets].shape;
    if (si->ndim < 1 || st->ndim < 1 || si->dims[0] != st->dims[0])
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.inline_data: inputs and targets must have the same "
                          "number of samples (dim 0)",
                          src);
  }
  if (!tr->dataset)
    tr->dataset = gcc_strdup(tr->inline_inputs >= 0 ? "inline" : "mnist");
  if (t->has_vocab) {
    if (t->vocab.len < 1 || t->vocab.len > sizeof tr->vocab)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.vocab has %zu bytes (a byte vocabulary has 1 to 256)", src,
                          t->vocab.len);
    memcpy(tr->vocab, t->vocab.data, t->vocab.len);
    tr->n_vocab = (int)t->vocab.len;
  }
  return read_schedule(tr, t->lr_schedule, src, d);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Node names name nodes in every message and in placement pins of backward
 * nodes: two nodes of one name are refused (sorted, so 100k nodes are fast). */
static gcc_status check_unique_node_names(const gcc_graph *g, gcc_diag *d) {
  if (g->n_nodes < 2)
    return GCC_OK;
  const char **names = malloc((size_t)g->n_nodes * sizeof *names);
  if (!names)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (node names)");
  for (int i = 0; i < g->n_nodes; i++)
    names[i] = g->nodes[i].name;
  qsort(names, (size_t)g->n_nodes, sizeof *names, cmp_name);
  gcc_status s = GCC_OK;
  for (int i = 1; i < g->n_nodes && s == GCC_OK; i++)
    if (strcmp(names[i - 1], names[i]) == 0)
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                       "%s: two nodes are named '%s' (node names must be unique)", g->source,
                       names[i]);
  free(names);
  return s;
}

static gcc_status build_graph(gcc_graph *g, const Gcc__Model *m, gcc_diag *d) {
  const char *src = g->source;
  const Gcc__Graph *pg = m->graph;
  g->producer = gcc_strdup(m->producer);
  for (size_t i = 0; i < pg->n_initializers; i++) {
    const Gcc__Tensor *t = pg->initializers[i];
    char what[64];
    snprintf(what, sizeof what, "initializer %zu", i);
    GCC_TRY(add_tensor(g, t, "initializer", t->name ? t->name : what, 1, NULL, d));
  }
  for (size_t i = 0; i < pg->n_inputs; i++) {
    const Gcc__ValueInfo *vi = pg->inputs[i];
    const char *name = vi->name ? vi->name : "";
    if (!*name)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: graph input %zu has an empty name", src,
                          i);
    GCC_TRY(check_dtype(src, "graph input", name, vi->has_dtype, vi->dtype, d));
    gcc_shape s;
    GCC_TRY(read_dims(src, "graph input", name, vi->n_dims, vi->dims, 1, &s, d));
    int v;
    GCC_TRY(
        gcc_graph_add_value(g, name, (gcc_dtype)vi->dtype, &s, GCC_VALUE_INPUT, NULL, 0, &v, d));
    if (gcc_graph_add_input(g, v) != GCC_OK)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  }
  /* node outputs first (node order in the file is free) */
  for (size_t i = 0; i < pg->n_nodes; i++) {
    const Gcc__Node *pn = pg->nodes[i];
    char fallback[32];
    snprintf(fallback, sizeof fallback, "#%zu", i);
    const char *nn = pn->name && *pn->name ? pn->name : fallback;
    int op = pn->op_type ? gcc_op_lookup(pn->op_type) : -1;
    if (op < 0) {
      char known[1024] = "";
      for (int k = 0; k < GCC_OP_COUNT; k++) {
        strncat(known, gcc_op_name(k), sizeof known - strlen(known) - 1);
        if (k + 1 < GCC_OP_COUNT)
          strncat(known, ", ", sizeof known - strlen(known) - 1);
      }
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: node '%s': unknown op '%s' (known: %s)",
                          src, nn, pn->op_type ? pn->op_type : "", known);
    }
    GCC_TRY(check_device(src, nn, pn->device, d));
    if (pn->n_outputs > INT_MAX / 2 || pn->n_inputs > INT_MAX / 2)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: node '%s' has too many inputs/outputs",
                          src, nn);
    /* any arity (the op's schema bounds it: a Concat takes any number) */
    int *outs = malloc((pn->n_outputs ? pn->n_outputs : 1) * sizeof *outs), node;
    if (!outs)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
    gcc_status st = GCC_OK;
    for (size_t k = 0; k < pn->n_outputs && st == GCC_OK; k++) {
      const char *on = pn->outputs[k];
      if (!on || !*on)
        st = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: node '%s': output %zu has no name", src,
                          nn, k);
      else if (gcc_graph_find(g, on) >= 0)
        st = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: node '%s': output '%s' is already defined (values are SSA: one "
                          "producer each)",
                          src, nn, on);
      else
        st = gcc_graph_add_value(g, on, GCC_DT_UNDEFINED, NULL, GCC_VALUE_ACTIVATION, NULL, 0,
                                 &outs[k], d);
    }
    if (st == GCC_OK)
      st = gcc_graph_add_node(g, nn, op, NULL, 0, outs, (int)pn->n_outputs, &node, d);
    free(outs);
    GCC_TRY(st);
    if (pn->device && *pn->device && !(g->nodes[node].pin = gcc_strdup(pn->device)))
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t k = 0; k < pn->n_attributes; k++)
      GCC_TRY(read_attr(g, node, pn->attributes[k], d));
    /* an attribute of the passes (BatchNormalization's `training`: the
     * training form, set by autodiff, cleared in evaluation) is refused, not
     * ignored: a file that sets it would have evaluation update the running
     * statistics, which nn.BatchNorm2d in eval() never does */
    const gcc_op_desc *od = gcc_op(op);
    const gcc_attr *pa = od->pass_attr ? gcc_node_attr(&g->nodes[node], od->pass_attr) : NULL;
    if (pa) {
      int64_t def = 0;
      for (int j = 0; j < od->n_attrs; j++)
        if (strcmp(od->attrs[j].name, od->pass_attr) == 0)
          def = od->attrs[j].def_i;
      if (!(pa->type == GCC_ATTR_INT && pa->i == def))
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: node '%s' (%s): attribute '%s' is set; it is the compiler's: "
                            "%s: remove it",
                            src, nn, od->name, od->pass_attr, od->pass_attr_why);
    }
  }
  GCC_TRY(check_unique_node_names(g, d));
  /* then inputs by name */
  for (size_t i = 0; i < pg->n_nodes; i++) {
    const Gcc__Node *pn = pg->nodes[i];
    gcc_node *n = &g->nodes[i];
    free(n->inputs);
    n->inputs = malloc((pn->n_inputs ? pn->n_inputs : 1) * sizeof(int));
    if (!n->inputs)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
    n->n_inputs = 0; /* filled below; any arity */
    int *ins = n->inputs;
    for (size_t k = 0; k < pn->n_inputs; k++) {
      const char *in = pn->inputs[k];
      if (!in || !*in) {
        ins[k] = -1; /* omitted optional input */
        continue;
      }
      ins[k] = gcc_graph_find(g, in);
      if (ins[k] < 0)
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: node '%s' (%s): input '%s' is not defined (no graph input, "
                            "initializer or node output has that name)",
                            src, n->name, gcc_op_name(n->op), in);
    }
    n->n_inputs = (int)pn->n_inputs;
  }
  for (size_t i = 0; i < pg->n_outputs; i++) {
    const char *on = pg->outputs[i]->name;
    int v = on ? gcc_graph_find(g, on) : -1;
    if (v < 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: graph output '%s' is not defined by any node", src, on ? on : "");
    /* declared dims are optional, but when given they follow ValueInfo's
     * rule (> 0, or -1 as the batch dim 0), as an input's do */
    gcc_shape declared;
    GCC_TRY(read_dims(src, "graph output", on, pg->outputs[i]->n_dims, pg->outputs[i]->dims, 1,
                      &declared, d));
    if (gcc_graph_add_output(g, v) != GCC_OK)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  }
  GCC_TRY(gcc_graph_toposort(g, d));
  if (m->training)
    GCC_TRY(read_training(g, m->training, d));
  /* shape and dtype inference on a copy bound to the training batch size,
   * so that the model keeps its symbolic batch */
  gcc_graph *probe;
  GCC_TRY(gcc_graph_clone_borrowing_params(g, &probe, d));
  gcc_status s = gcc_graph_bind_batch(probe, g->training.present ? g->training.batch_size : 1, d);
  if (s == GCC_OK)
    s = gcc_infer_shapes(probe, d);
  for (size_t i = 0; s == GCC_OK && i < pg->n_outputs; i++) {
    const Gcc__ValueInfo *vi = pg->outputs[i];
    const gcc_value *v = &probe->values[gcc_graph_find(probe, vi->name)];
    if (vi->has_dtype && vi->dtype != GCC__DATA_TYPE__DT_UNDEFINED &&
        (int)vi->dtype != (int)v->dtype)
      s = gcc_diag_set(d, GCC_ERR_SHAPE, "%s: graph output '%s' is declared %s but computes %s",
                       src, vi->name, gcc_dtype_name((gcc_dtype)vi->dtype),
                       gcc_dtype_name(v->dtype));
  }
  if (s == GCC_OK && g->training.present && g->training.loss) {
    const gcc_value *l = &probe->values[gcc_graph_find(probe, g->training.loss)];
    if (l->dtype != GCC_DT_FLOAT32 || gcc_shape_numel(&l->shape, NULL) != 1) {
      char sh[128];
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                       "%s: training.loss '%s' must be a float32 "
                       "scalar, got %s %s",
                       src, l->name, gcc_dtype_name(l->dtype),
                       gcc_shape_str(&l->shape, sh, sizeof sh));
    }
  }
  gcc_graph_free(probe);
  if (s == GCC_OK && g->training.present && g->training.prediction)
    s = check_prediction(g, d);
  return s;
}

/* The dim 0 of the prediction and of the input as inferred with the graph
 * bound to `batch`, and the prediction's dtype and shape. */
static gcc_status prediction_rows(const gcc_graph *g, int64_t batch, gcc_dtype *dt, gcc_shape *pred,
                                  int64_t *input_rows, gcc_diag *d) {
  gcc_graph *probe;
  GCC_TRY(gcc_graph_clone_borrowing_params(g, &probe, d));
  gcc_status s = gcc_graph_bind_batch(probe, batch, d);
  if (s == GCC_OK)
    s = gcc_infer_shapes(probe, d);
  if (s == GCC_OK) {
    const gcc_value *v = &probe->values[gcc_graph_find(probe, g->training.prediction)];
    const gcc_value *in = &probe->values[gcc_graph_find(probe, g->training.input)];
    *dt = v->dtype;
    *pred = v->shape;
    *input_rows = in->shape.ndim > 0 ? in->shape.dims[0] : -1;
  }
  gcc_graph_free(probe);
  return s;
}

/* training.prediction is read back row by row, one row per sample of the
 * input (evaluation, --predictions, export): it must be float32 and its dim
 * 0 must be the input's. Inferred at two batch sizes, so that a value whose
 * dim 0 merely equals the batch size (a weight of 64 rows at batch 64) is
 * refused. Without a training.input nothing reads it row by row. */
static gcc_status check_prediction(const gcc_graph *g, gcc_diag *d) {
  if (!g->training.input)
    return GCC_OK;
  int64_t b = g->training.batch_size;
  for (int64_t batch = b; batch <= b + 1; batch++) {
    gcc_dtype dt;
    gcc_shape sh;
    int64_t rows;
    GCC_TRY(prediction_rows(g, batch, &dt, &sh, &rows, d));
    if (dt != GCC_DT_FLOAT32 || sh.ndim < 1 || sh.dims[0] != rows) {
      char str[128];
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: training.prediction '%s' must be float32 with one row per sample "
                          "of the input '%s' (dim 0 = %" PRId64 " at batch %" PRId64 "), got %s %s",
                          g->source, g->training.prediction, g->training.input, rows, batch,
                          gcc_dtype_name(dt), gcc_shape_str(&sh, str, sizeof str));
    }
  }
  return GCC_OK;
}

gcc_status gcc_model_parse(const uint8_t *bytes, size_t size, const char *source, gcc_graph **out,
                           gcc_diag *d) {
  *out = NULL;
  const char *src = source ? source : "<memory>";
  Gcc__Model *m = gcc__model__unpack(NULL, size, bytes);
  if (!m)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: not a gcc-train model: the protobuf could not be parsed (%zu bytes; "
                        "truncated, corrupted, or not a protobuf)",
                        src, size);
  gcc_status s = GCC_OK;
  if (!m->has_format_version)
    s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                     "%s: Model.format_version is missing (not a gcc-train model?)", src);
  else if (m->format_version != GCC_FORMAT_VERSION)
    s = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                     "%s: Model.format_version is %u; this gcc-train reads version %d", src,
                     m->format_version, GCC_FORMAT_VERSION);
  else if (!m->graph)
    s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: Model.graph is missing", src);
  gcc_graph *g = NULL;
  if (s == GCC_OK) {
    g = gcc_graph_new(m->graph->name && *m->graph->name ? m->graph->name : "graph", src);
    if (!g)
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (s == GCC_OK)
    s = build_graph(g, m, d);
  gcc__model__free_unpacked(m, NULL);
#ifdef __GLIBC__
  /* The message's copies of the tensors were as large as the weights, and
   * most of them sat in the heap below blocks the graph still holds (below
   * glibc's mmap threshold, raised up to 32 MB by the first large free):
   * glibc returns such memory to the system only from the heap's top, so
   * it is given back here (gcc-train on GPT-2 124M's shape, batch 1: peak
   * resident memory 4.46 -> 4.12 GB) */
  malloc_trim(0);
#endif
  if (s != GCC_OK) {
    gcc_graph_free(g);
    return s;
  }
  *out = g;
  return GCC_OK;
}

gcc_status gcc_model_load(const char *path, gcc_graph **out, gcc_diag *d) {
  *out = NULL;
  uint8_t *buf;
  size_t size;
  GCC_TRY(gcc_read_file(path, GCC_MODEL_MAX_BYTES, &buf, &size, d));
  gcc_status s = gcc_model_parse(buf, size, path, out, d);
  free(buf);
  return s;
}

/* ---- writing ---------------------------------------------------------- */

typedef struct writer {
  Gcc__Tensor *tensors;
  Gcc__Tensor **tensor_ptrs;
  Gcc__ValueInfo *infos;
  Gcc__ValueInfo **in_ptrs, **out_ptrs;
  Gcc__Node *nodes;
  Gcc__Node **node_ptrs;
  Gcc__Attribute *attrs;
  Gcc__Attribute **attr_ptrs;
  char **names; /* node input/output name arrays */
  int64_t *dims;
} writer;

static void writer_free(writer *w) {
  free(w->tensors);
  free(w->tensor_ptrs);
  free(w->infos);
  free(w->in_ptrs);
  free(w->out_ptrs);
  free(w->nodes);
  free(w->node_ptrs);
  free(w->attrs);
  free(w->attr_ptrs);
  free(w->names);
  free(w->dims);
}

static void fill_tensor(Gcc__Tensor *t, const gcc_value *v, int64_t *dims) {
  gcc__tensor__init(t);
  t->name = v->name;
  t->has_dtype = 1;
  t->dtype = (Gcc__DataType)v->dtype;
  for (int k = 0; k < v->shape.ndim; k++)
    dims[k] = v->shape.dims[k];
  t->n_dims = (size_t)v->shape.ndim;
  t->dims = dims;
  t->has_raw_data = 1;
  t->raw_data.len = v->data_bytes;
  t->raw_data.data = v->data;
}

/* Bytes the packer appends, to an output file as they come. */
typedef struct outfile_sink {
  ProtobufCBuffer base;
  gcc_outfile *o;
} outfile_sink;

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  gcc_outfile_write(((outfile_sink *)b)->o, data, len);
}

/* The model message of `g`, packed into a malloc'ed buffer (*bytes, *size),
 * or, with `o`, appended to that file as the packer makes it: a model is
 * then written with no copy of its weights in memory. */
static gcc_status serialize(const gcc_graph *g, gcc_outfile *o, uint8_t **bytes, size_t *size,
                            gcc_diag *d) {
  writer w = {0};
  size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
  size_t n_attr = 1, n_names = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    n_attr += (size_t)g->nodes[i].n_attrs;
    n_names += (size_t)(g->nodes[i].n_inputs + g->nodes[i].n_outputs);
  }
  w.tensors = calloc(nv, sizeof *w.tensors);
  w.tensor_ptrs = calloc(nv, sizeof *w.tensor_ptrs);
  w.infos = calloc((size_t)(g->n_inputs + g->n_outputs + 1), sizeof *w.infos);
  w.in_ptrs = calloc((size_t)g->n_inputs + 1, sizeof *w.in_ptrs);
  w.out_ptrs = calloc((size_t)g->n_outputs + 1, sizeof *w.out_ptrs);
  w.nodes = calloc(nn, sizeof *w.nodes);
  w.node_ptrs = calloc(nn, sizeof *w.node_ptrs);
  w.attrs = calloc(n_attr, sizeof *w.attrs);
  w.attr_ptrs = calloc(n_attr, sizeof *w.attr_ptrs);
  w.names = calloc(n_names, sizeof *w.names);
  w.dims =
      calloc((nv + (size_t)g->n_inputs + (size_t)g->n_outputs + 2) * GCC_MAX_DIMS, sizeof *w.dims);
  if (!w.tensors || !w.tensor_ptrs || !w.infos || !w.in_ptrs || !w.out_ptrs || !w.nodes ||
      !w.node_ptrs || !w.attrs || !w.attr_ptrs || !w.names || !w.dims) {
    writer_free(&w);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (serialize)");
  }
  int64_t *dims = w.dims;
  Gcc__Graph pg = GCC__GRAPH__INIT;
  pg.name = g->name;
  size_t nt = 0;
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *val = &g->values[v];
    if ((val->kind != GCC_VALUE_PARAM && val->kind != GCC_VALUE_CONST) || !val->data ||
        v == g->training.inline_inputs || v == g->training.inline_targets)
      continue;
    fill_tensor(&w.tensors[nt], val, dims);
    /* a float32 constant would read back as a trainable parameter without
     * the mark; other dtypes are constants anyway (and keep their bytes) */
    if (val->kind == GCC_VALUE_CONST && val->dtype == GCC_DT_FLOAT32)
      w.tensors[nt].has_constant = w.tensors[nt].constant = 1;
    if (val->kind == GCC_VALUE_PARAM && val->state)
      w.tensors[nt].has_state = w.tensors[nt].state = 1;
    dims += GCC_MAX_DIMS;
    w.tensor_ptrs[nt] = &w.tensors[nt];
    nt++;
  }
  pg.n_initializers = nt;
  pg.initializers = w.tensor_ptrs;
  size_t ni = 0;
  for (int i = 0; i < g->n_inputs; i++, ni++) {
    const gcc_value *val = &g->values[g->inputs[i]];
    Gcc__ValueInfo *vi = &w.infos[ni];
    gcc__value_info__init(vi);
    vi->name = val->name;
    vi->has_dtype = 1;
    vi->dtype = (Gcc__DataType)val->dtype;
    for (int k = 0; k < val->shape.ndim; k++)
      dims[k] = val->shape.dims[k];
    vi->n_dims = (size_t)val->shape.ndim;
    vi->dims = dims;
    dims += GCC_MAX_DIMS;
    w.in_ptrs[i] = vi;
  }
  pg.n_inputs = (size_t)g->n_inputs;
  pg.inputs = w.in_ptrs;
  for (int i = 0; i < g->n_outputs; i++, ni++) {
    Gcc__ValueInfo *vi = &w.infos[ni];
    gcc__value_info__init(vi);
    vi->name = g->values[g->outputs[i]].name;
    w.out_ptrs[i] = vi;
  }
  pg.n_outputs = (size_t)g->n_outputs;
  pg.outputs = w.out_ptrs;
  size_t ai = 0, si = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    Gcc__Node *pn = &w.nodes[i];
    gcc__node__init(pn);
    pn->name = n->name;
    pn->op_type = (char *)gcc_op_name(n->op);
    pn->device = n->pin;
    pn->inputs = &w.names[si];
    for (int k = 0; k < n->n_inputs; k++)
      w.names[si++] = n->inputs[k] >= 0 ? g->values[n->inputs[k]].name : "";
    pn->n_inputs = (size_t)n->n_inputs;
    pn->outputs = &w.names[si];
    for (int k = 0; k < n->n_outputs; k++)
      w.names[si++] = g->values[n->outputs[k]].name;
    pn->n_outputs = (size_t)n->n_outputs;
    pn->attributes = &w.attr_ptrs[ai];
    for (int k = 0; k < n->n_attrs; k++) {
      const gcc_attr *a = &n->attrs[k];
      Gcc__Attribute *pa = &w.attrs[ai];
      gcc__attribute__init(pa);
      pa->name = a->name;
      pa->has_type = 1;
      pa->type = (Gcc__Attribute__Type)a->type;
      switch (a->type) {
      case GCC_ATTR_INT:
        pa->has_i = 1;
        pa->i = a->i;
        break;
      case GCC_ATTR_FLOAT:
        pa->has_f = 1;
        pa->f = a->f;
        break;
      case GCC_ATTR_STRING: pa->s = a->s; break;
      case GCC_ATTR_INTS:
        pa->n_ints = (size_t)a->n_ints;
        pa->ints = a->ints;
        break;
      case GCC_ATTR_FLOATS:
        pa->n_floats = (size_t)a->n_floats;
        pa->floats = a->floats;
        break;
      default: break;
      }
      w.attr_ptrs[ai++] = pa;
    }
    pn->n_attributes = (size_t)n->n_attrs;
    w.node_ptrs[i] = pn;
  }
  pg.n_nodes = (size_t)g->n_nodes;
  pg.nodes = w.node_ptrs;

  Gcc__Model m = GCC__MODEL__INIT;
  m.has_format_version = 1;
  m.format_version = GCC_FORMAT_VERSION;
  m.producer = g->producer;
  m.graph = &pg;
  Gcc__TrainingSpec ts = GCC__TRAINING_SPEC__INIT;
  Gcc__Optimizer po = GCC__OPTIMIZER__INIT;
  Gcc__SGD sgd = GCC__SGD__INIT;
  Gcc__Adam adam = GCC__ADAM__INIT;
  Gcc__LrSchedule sched = GCC__LR_SCHEDULE__INIT;
  Gcc__StepLR step_lr = GCC__STEP_LR__INIT;
  Gcc__CosineAnnealingLR cos_lr = GCC__COSINE_ANNEALING_LR__INIT;
  Gcc__WarmupCosineLR wc_lr = GCC__WARMUP_COSINE_LR__INIT;
  Gcc__InlineDataset inl = GCC__INLINE_DATASET__INIT;
  Gcc__Tensor inl_in, inl_tg;
  int64_t inl_dims[2][GCC_MAX_DIMS];
  const gcc_training *t = &g->training;
  if (t->present) {
    ts.loss = t->loss;
    ts.prediction = t->prediction;
    ts.input = t->input;
    ts.target = t->target;
    ts.dataset = t->dataset;
    ts.has_batch_size = 1;
    ts.batch_size = t->batch_size;
    ts.has_epochs = 1;
    ts.epochs = t->epochs;
    ts.n_mean = (size_t)t->n_mean;
    ts.mean = (float *)t->mean;
    ts.n_std = (size_t)t->n_std;
    ts.std = (float *)t->std;
    ts.has_seed = 1;
    ts.seed = t->seed;
    if (t->opt.kind == GCC_OPT_ADAM) {
      adam.has_lr = adam.has_beta1 = adam.has_beta2 = adam.has_eps = adam.has_weight_decay = 1;
      adam.lr = t->opt.lr;
      adam.beta1 = t->opt.beta1;
      adam.beta2 = t->opt.beta2;
      adam.eps = t->opt.eps;
      adam.weight_decay = t->opt.weight_decay;
      adam.has_decoupled_weight_decay = t->opt.decoupled;
      adam.decoupled_weight_decay = t->opt.decoupled;
      po.kind_case = GCC__OPTIMIZER__KIND_ADAM;
      po.adam = &adam;
    } else {
      sgd.has_lr = sgd.has_momentum = sgd.has_dampening = sgd.has_weight_decay = 1;
      sgd.has_nesterov = 1;
      sgd.lr = t->opt.lr;
      sgd.momentum = t->opt.momentum;
      sgd.dampening = t->opt.dampening;
      sgd.weight_decay = t->opt.weight_decay;
      sgd.nesterov = t->opt.nesterov;
      po.kind_case = GCC__OPTIMIZER__KIND_SGD;
      po.sgd = &sgd;
    }
    po.has_decay_matrices_only = t->opt.decay_matrices_only != 0;
    po.decay_matrices_only = t->opt.decay_matrices_only != 0;
    po.has_clip_grad_norm = t->opt.clip_grad_norm > 0.0f;
    po.clip_grad_norm = t->opt.clip_grad_norm;
    ts.optimizer = &po;
    if (t->sched.kind == GCC_SCHED_STEP) {
      step_lr.has_step_size = step_lr.has_gamma = 1;
      step_lr.step_size = t->sched.step_size;
      step_lr.gamma = t->sched.gamma;
      sched.kind_case = GCC__LR_SCHEDULE__KIND_STEP;
      sched.step = &step_lr;
      ts.lr_schedule = &sched;
    } else if (t->sched.kind == GCC_SCHED_COSINE) {
      cos_lr.has_t_max = cos_lr.has_eta_min = 1;
      cos_lr.t_max = t->sched.t_max;
      cos_lr.eta_min = t->sched.eta_min;
      sched.kind_case = GCC__LR_SCHEDULE__KIND_COSINE;
      sched.cosine = &cos_lr;
      ts.lr_schedule = &sched;
    } else if (t->sched.kind == GCC_SCHED_WARMUP_COSINE) {
      wc_lr.has_warmup = wc_lr.has_max_steps = wc_lr.has_min_lr = 1;
      wc_lr.warmup = t->sched.warmup;
      wc_lr.max_steps = t->sched.t_max;
      wc_lr.min_lr = t->sched.eta_min;
      sched.kind_case = GCC__LR_SCHEDULE__KIND_WARMUP_COSINE;
      sched.warmup_cosine = &wc_lr;
      ts.lr_schedule = &sched;
    }
    if (t->n_vocab > 0) {
      ts.has_vocab = 1;
      ts.vocab.len = (size_t)t->n_vocab;
      ts.vocab.data = (uint8_t *)t->vocab;
    }
    if (t->inline_inputs >= 0 && t->inline_targets >= 0) {
      fill_tensor(&inl_in, &g->values[t->inline_inputs], inl_dims[0]);
      fill_tensor(&inl_tg, &g->values[t->inline_targets], inl_dims[1]);
      inl_in.name = "inputs";
      inl_tg.name = "targets";
      inl.inputs = &inl_in;
      inl.targets = &inl_tg;
      ts.inline_data = &inl;
    }
    m.training = &ts;
  }
  size_t n = gcc__model__get_packed_size(&m);
  if (o) {
    outfile_sink sink = {{sink_append}, o};
    size_t packed = gcc__model__pack_to_buffer(&m, &sink.base);
    writer_free(&w);
    if (packed != n)
      return gcc_diag_set(d, GCC_ERR_INTERNAL, "serialize: packed %zu of %zu bytes", packed, n);
    return GCC_OK;
  }
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    writer_free(&w);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (serialize %zu bytes)", n);
  }
  size_t packed = gcc__model__pack(&m, buf);
  writer_free(&w);
  if (packed != n) {
    free(buf);
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "serialize: packed %zu of %zu bytes", packed, n);
  }
  *bytes = buf;
  *size = n;
  return GCC_OK;
}

gcc_status gcc_write_file_atomic(const char *path, const void *bytes, size_t size, gcc_diag *d) {
  return gcc_outfile_write_all(path, "", bytes, size, d);
}

gcc_status gcc_model_serialize(const gcc_graph *g, uint8_t **bytes, size_t *size, gcc_diag *d) {
  return serialize(g, NULL, bytes, size, d);
}

gcc_status gcc_model_save(const gcc_graph *g, const char *path, gcc_diag *d) {
  gcc_outfile o;
  GCC_TRY(gcc_outfile_open(&o, path, "", d));
  gcc_status s = serialize(g, &o, NULL, NULL, d);
  if (s != GCC_OK) {
    gcc_outfile_abort(&o);
    return s;
  }
  return gcc_outfile_commit(&o, d);
}
