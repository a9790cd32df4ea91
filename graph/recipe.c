/*
 * recipe.c - training recipes from command-line flags (recipe.h).
 */
#include "graph/recipe.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "graph/util.h"

static const char *const kLosses[] = {"cross-entropy", "mse", NULL};
static const char *const kOptimizers[] = {"sgd", "adam", "adamw", NULL};
static const char *const kDatasets[] = {"mnist", "cifar10", "npy", "text", "tokens", NULL};
static const char *const kDecayOn[] = {"matrices", "all", NULL};

void gcc_recipe_init(gcc_recipe *r) {
  memset(r, 0, sizeof *r);
  r->batch_size = -1;
  r->epochs = -1;
}

int gcc_recipe_given(const gcc_recipe *r) {
  return r->loss || r->optimizer || r->dataset || r->lr_schedule || r->n_mean || r->has_lr ||
         r->has_momentum || r->has_weight_decay || r->nesterov || r->batch_size >= 0 ||
         r->epochs >= 0 || r->has_seed || r->has_betas || r->decay_on || r->has_clip;
}

/* `v` if it is one of `names`, else an error listing them. */
static gcc_status one_of(const char *flag, const char *v, const char *const *names,
                         const char **out, gcc_diag *d) {
  char list[256] = "";
  for (int i = 0; names[i]; i++) {
    if (strcmp(v, names[i]) == 0) {
      *out = names[i];
      return GCC_OK;
    }
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
  }
  return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s '%s': unknown; expected one of %s", flag, v,
                      list);
}

/* A finite float, > 0 (positive) or >= 0, that a float holds. */
static gcc_status number(const char *flag, const char *s, int positive, float *out, gcc_diag *d) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v > 3e38 || (positive ? !(v > 0) : !(v >= 0)))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s '%s': expected a finite number %s 0", flag,
                        s, positive ? ">" : ">=");
  *out = (float)v;
  if (positive && *out == 0.0f)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s '%s': too small for a float32", flag, s);
  return GCC_OK;
}

static gcc_status integer(const char *flag, const char *s, int64_t lo, int64_t *out, gcc_diag *d) {
  if (gcc_parse_i64(s, lo, INT64_MAX, out))
    return GCC_OK;
  return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s '%s': expected an integer >= %lld", flag, s,
                      (long long)lo);
}

/* A finite double in [lo, hi] from all of `s`. */
static int parse_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
    return 0;
  *out = v;
  return 1;
}

/* warmup-cosine:WARMUP:MAX_STEPS:MIN_LR (after the kind's ':') */
static gcc_status parse_warmup_cosine(gcc_recipe *r, const char *v, char *rest, gcc_diag *d) {
  gcc_lr_schedule s = {0};
  s.kind = GCC_SCHED_WARMUP_COSINE;
  char *f[3] = {rest, NULL, NULL};
  for (int i = 1; i < 3 && f[i - 1]; i++)
    if ((f[i] = strchr(f[i - 1], ':')) != NULL)
      *f[i]++ = '\0';
  double min_lr = 0;
  if (!f[2] || strchr(f[2], ':') || !gcc_parse_i64(f[0], 0, INT64_MAX, &s.warmup) ||
      !gcc_parse_i64(f[1], 1, INT64_MAX, &s.t_max) || !parse_double(f[2], 0, 3e38, &min_lr))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--lr-schedule '%s': expected warmup-cosine:WARMUP:MAX_STEPS:MIN_LR "
                        "(optimizer steps: WARMUP an integer >= 0, MAX_STEPS > WARMUP, MIN_LR a "
                        "number >= 0)",
                        v);
  if (s.t_max <= s.warmup)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--lr-schedule '%s': MAX_STEPS (%lld) must be greater than WARMUP (%lld)",
                        v, (long long)s.t_max, (long long)s.warmup);
  s.eta_min = (float)min_lr;
  r->lr_schedule = v;
  r->sched = s;
  return GCC_OK;
}

/* step:S[:G], cosine[:T] or warmup-cosine:W:M:MIN */
static gcc_status parse_schedule(gcc_recipe *r, const char *v, gcc_diag *d) {
  gcc_lr_schedule s = {0};
  char buf[128];
  snprintf(buf, sizeof buf, "%s", v);
  char *f1 = strchr(buf, ':'), *f2 = f1 ? strchr(f1 + 1, ':') : NULL;
  if (f1)
    *f1++ = '\0';
  int ok = strlen(v) < sizeof buf - 1;
  if (ok && strcmp(buf, "warmup-cosine") == 0)
    return parse_warmup_cosine(r, v, f1 ? f1 : buf + strlen(buf), d);
  if (f2)
    *f2++ = '\0';
  if (ok && strcmp(buf, "step") == 0) {
    s.kind = GCC_SCHED_STEP;
    s.gamma = 0.1f;
    ok = f1 && gcc_parse_i64(f1, 1, INT64_MAX, &s.step_size);
    if (ok && f2) {
      char *end;
      errno = 0;
      double gm = strtod(f2, &end);
      ok = !errno && end != f2 && !*end && isfinite(gm) && gm > 0 && gm <= 1e6;
      s.gamma = (float)gm;
    }
  } else if (ok && strcmp(buf, "cosine") == 0 && !f2) {
    s.kind = GCC_SCHED_COSINE;
    ok = !f1 || gcc_parse_i64(f1, 1, INT64_MAX, &s.t_max);
  } else {
    ok = 0;
  }
  if (!ok)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--lr-schedule '%s': expected step:STEP_SIZE[:GAMMA] (StepLR: an integer "
                        ">= 1 of epochs, GAMMA > 0, default 0.1), cosine[:T_MAX] "
                        "(CosineAnnealingLR, T_MAX default the epochs) or "
                        "warmup-cosine:WARMUP:MAX_STEPS:MIN_LR (by optimizer step)",
                        v);
  r->lr_schedule = v;
  r->sched = s;
  return GCC_OK;
}

gcc_status gcc_recipe_set(gcc_recipe *r, const char *flag, const char *value, gcc_diag *d) {
  if (strcmp(flag, "--nesterov") == 0) {
    r->nesterov = 1;
    return GCC_OK;
  }
  if (!value)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s needs a value", flag);
  if (strcmp(flag, "--loss") == 0)
    return one_of(flag, value, kLosses, &r->loss, d);
  if (strcmp(flag, "--optimizer") == 0)
    return one_of(flag, value, kOptimizers, &r->optimizer, d);
  if (strcmp(flag, "--dataset") == 0)
    return one_of(flag, value, kDatasets, &r->dataset, d);
  if (strcmp(flag, "--lr") == 0) {
    GCC_TRY(number(flag, value, 1, &r->lr, d));
    r->has_lr = 1;
    return GCC_OK;
  }
  if (strcmp(flag, "--momentum") == 0) {
    GCC_TRY(number(flag, value, 0, &r->momentum, d));
    if (r->momentum >= 1.0f)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s '%s': expected a number in [0, 1)", flag,
                          value);
    r->has_momentum = 1;
    return GCC_OK;
  }
  if (strcmp(flag, "--weight-decay") == 0) {
    GCC_TRY(number(flag, value, 0, &r->weight_decay, d));
    r->has_weight_decay = 1;
    return GCC_OK;
  }
  if (strcmp(flag, "--betas") == 0) {
    char buf[128], *comma;
    double b1 = 0, b2 = 0;
    snprintf(buf, sizeof buf, "%s", value);
    comma = strchr(buf, ',');
    if (comma)
      *comma++ = '\0';
    /* [0, 1) as torch.optim.Adam checks (0 <= beta < 1.0) */
    if (strlen(value) >= sizeof buf - 1 || !comma || !parse_double(buf, 0, 1, &b1) ||
        !parse_double(comma, 0, 1, &b2) || (float)b1 >= 1.0f || (float)b2 >= 1.0f)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "%s '%s': expected BETA1,BETA2, each a number in [0, 1) (Adam's "
                          "betas, e.g. 0.9,0.95)",
                          flag, value);
    r->beta1 = (float)b1;
    r->beta2 = (float)b2;
    r->has_betas = 1;
    return GCC_OK;
  }
  if (strcmp(flag, "--weight-decay-on") == 0)
    return one_of(flag, value, kDecayOn, &r->decay_on, d);
  if (strcmp(flag, "--clip-grad-norm") == 0) {
    GCC_TRY(number(flag, value, 1, &r->clip, d));
    r->has_clip = 1;
    return GCC_OK;
  }
  if (strcmp(flag, "--mean") == 0 || strcmp(flag, "--std") == 0) {
    int is_std = flag[2] == 's';
    float *v = is_std ? r->std : r->mean;
    int *n = is_std ? &r->n_std : &r->n_mean;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", value);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
      if (*n == GCC_MAX_CHANNELS)
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s '%s': at most %d values", flag, value,
                            GCC_MAX_CHANNELS);
      GCC_TRY(number(flag, tok, is_std, &v[*n], d));
      (*n)++;
    }
    if (*n == 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s '%s': expected one value per channel",
                          flag, value);
    return GCC_OK;
  }
  if (strcmp(flag, "--lr-schedule") == 0)
    return parse_schedule(r, value, d);
  if (strcmp(flag, "--batch-size") == 0)
    return integer(flag, value, 1, &r->batch_size, d);
  if (strcmp(flag, "--epochs") == 0)
    return integer(flag, value, 0, &r->epochs, d);
  return gcc_diag_set(d, GCC_ERR_INTERNAL, "recipe: unknown flag %s", flag);
}

static int is_adam(const char *opt) {
  return opt && strcmp(opt, "sgd") != 0;
}

gcc_status gcc_recipe_check(const gcc_recipe *r, gcc_diag *d) {
  if (is_adam(r->optimizer) && r->has_momentum)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--momentum is an SGD setting; --optimizer %s has betas instead",
                        r->optimizer);
  if (is_adam(r->optimizer) && r->nesterov)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--nesterov is an SGD setting, not %s's",
                        r->optimizer);
  if (r->optimizer && !is_adam(r->optimizer) && r->has_betas)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--betas is an Adam setting; --optimizer sgd has --momentum instead");
  if (r->n_mean != r->n_std)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--mean and --std need as many values (one per channel), got %d and %d",
                        r->n_mean, r->n_std);
  if (r->nesterov && r->has_momentum && r->momentum == 0.0f)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--nesterov needs --momentum > 0 (as torch.optim.SGD)");
  return GCC_OK;
}

/* A value name not yet in `g`: `base`, else base_1, base_2, ... */
static void fresh_name(const gcc_graph *g, const char *base, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", base);
  for (int i = 1; gcc_graph_find(g, buf) >= 0; i++)
    snprintf(buf, cap, "%s_%d", base, i);
}

/* The shape of value `v` with the graph bound to `batch`. */
static gcc_status shape_at(const gcc_graph *g, int v, int64_t batch, gcc_shape *out, gcc_dtype *dt,
                           gcc_diag *d) {
  gcc_graph *probe;
  GCC_TRY(gcc_graph_clone_borrowing_params(g, &probe, d));
  gcc_status s = gcc_graph_bind_batch(probe, batch, d);
  if (s == GCC_OK)
    s = gcc_infer_shapes(probe, d);
  if (s == GCC_OK) {
    *out = probe->values[v].shape;
    *dt = probe->values[v].dtype;
  }
  gcc_graph_free(probe);
  return s;
}

/* Cross-entropy over sequences, as nanoGPT's
 * F.cross_entropy(logits.view(-1, V), targets.view(-1)): ins[0], logits
 * (B, T, V), and ins[1], targets (B, T), replaced by Reshapes to (B*T, V)
 * and (B*T), so that SoftmaxCrossEntropy keeps its (N, C) form and its mean
 * is over the B*T tokens. (ONNX's (N, C, d1) form has the classes on dim 1
 * and would need (B, T, V) transposed to (B, V, T).) The Reshapes are
 * views: nothing is copied. */
static gcc_status flatten_sequence(gcc_graph *g, int ins[2], int64_t vocab, gcc_diag *d) {
  static const char *const base[2] = {"logits_flat", "target_flat"};
  for (int k = 0; k < 2; k++) {
    char name[256];
    fresh_name(g, base[k], name, sizeof name);
    int out, node;
    GCC_TRY(gcc_graph_add_value(g, name, GCC_DT_UNDEFINED, NULL, GCC_VALUE_ACTIVATION, NULL, 0,
                                &out, d));
    GCC_TRY(gcc_graph_add_node(g, name, GCC_OP_RESHAPE, &ins[k], 1, &out, 1, &node, d));
    const int64_t shape[2] = {-1, vocab};
    GCC_TRY(gcc_node_set_ints(g, node, "shape", shape, k == 0 ? 2 : 1));
    ins[k] = out;
  }
  return GCC_OK;
}

/* The loss on an inference model: a target input and the loss node on the
 * only output; the spec's names. */
static gcc_status add_loss(gcc_graph *g, const gcc_recipe *r, gcc_diag *d) {
  const char *src = g->source;
  int input = -1, n_in = 0;
  for (int i = 0; i < g->n_inputs; i++)
    if (g->values[g->inputs[i]].kind == GCC_VALUE_INPUT) {
      input = g->inputs[i];
      n_in++;
    }
  if (n_in != 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--loss %s: %s has %d graph inputs; a recipe from flags needs exactly one "
                        "(the batch of samples)",
                        r->loss, src, n_in);
  if (g->n_outputs != 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--loss %s: %s has %d outputs; a recipe from flags needs exactly one "
                        "(the prediction the loss is taken of)",
                        r->loss, src, g->n_outputs);
  int pred = g->outputs[0];
  gcc_shape s1, s2;
  gcc_dtype dt;
  GCC_TRY(shape_at(g, pred, 1, &s1, &dt, d));
  GCC_TRY(shape_at(g, pred, 2, &s2, &dt, d));
  char sh[128];
  if (dt != GCC_DT_FLOAT32 || s1.ndim < 1 || s1.dims[0] != 1 || s2.dims[0] != 2)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--loss %s: the output '%s' is %s %s at batch 1: the loss needs a "
                        "float32 prediction with the batch on dim 0",
                        r->loss, g->values[pred].name, gcc_dtype_name(dt),
                        gcc_shape_str(&s1, sh, sizeof sh));
  int ce = strcmp(r->loss, "cross-entropy") == 0;
  if (ce && s1.ndim != 2 && s1.ndim != 3)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--loss cross-entropy: the output '%s' is %s at batch 1; cross-entropy "
                        "needs logits (N, C), or (B, T, V) over sequences",
                        g->values[pred].name, gcc_shape_str(&s1, sh, sizeof sh));
  gcc_shape ts = s1;
  ts.dims[0] = GCC_BATCH_DIM;
  if (ce)
    ts.ndim = s1.ndim - 1; /* (N) class indices, or (B, T) next tokens */
  char tname[256], lname[256];
  fresh_name(g, "target", tname, sizeof tname);
  fresh_name(g, "loss", lname, sizeof lname);
  int target, loss, node;
  GCC_TRY(gcc_graph_add_value(g, tname, ce ? GCC_DT_INT64 : GCC_DT_FLOAT32, &ts, GCC_VALUE_INPUT,
                              NULL, 0, &target, d));
  if (gcc_graph_add_input(g, target) != GCC_OK)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  GCC_TRY(gcc_graph_add_value(g, lname, GCC_DT_UNDEFINED, NULL, GCC_VALUE_ACTIVATION, NULL, 0,
                              &loss, d));
  int ins[2] = {pred, target};
  if (ce && s1.ndim == 3) /* over sequences: (B*T, V) and (B*T) */
    GCC_TRY(flatten_sequence(g, ins, s1.dims[2], d));
  GCC_TRY(gcc_graph_add_node(g, lname,
                             ce ? GCC_OP_SOFTMAX_CROSS_ENTROPY : GCC_OP_MEAN_SQUARED_ERROR, ins, 2,
                             &loss, 1, &node, d));
  if (gcc_graph_add_output(g, loss) != GCC_OK)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  gcc_training *t = &g->training;
  t->present = 1;
  t->loss = gcc_strdup(lname);
  t->prediction = gcc_strdup(g->values[pred].name);
  t->input = gcc_strdup(g->values[input].name);
  t->target = gcc_strdup(tname);
  t->batch_size = 64;
  t->epochs = 1;
  t->inline_inputs = t->inline_targets = -1;
  t->opt.kind = GCC_OPT_NONE; /* set by the optimizer flags */
  if (!t->loss || !t->prediction || !t->input || !t->target)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  return GCC_OK;
}

/* Whether the spec's target is float (a regression loss such as mse)
 * rather than class indices (cross-entropy); -1 when it has none. */
static int float_target(const gcc_graph *g) {
  int v = g->training.target ? gcc_graph_find(g, g->training.target) : -1;
  return v < 0 ? -1 : g->values[v].dtype == GCC_DT_FLOAT32;
}

/* The op name of the spec's loss, for messages. */
static const char *loss_op_name(const gcc_graph *g) {
  int v = g->training.loss ? gcc_graph_find(g, g->training.loss) : -1;
  return v >= 0 && g->values[v].producer >= 0 ? gcc_op_name(g->nodes[g->values[v].producer].op)
                                              : "no loss op";
}

static gcc_status set_optimizer(gcc_graph *g, const gcc_recipe *r, gcc_diag *d) {
  gcc_optimizer *o = &g->training.opt;
  gcc_opt_kind want = o->kind;
  int decoupled = o->decoupled;
  if (r->optimizer) {
    want = strcmp(r->optimizer, "sgd") == 0 ? GCC_OPT_SGD : GCC_OPT_ADAM;
    decoupled = strcmp(r->optimizer, "adamw") == 0;
  }
  if (want == GCC_OPT_NONE)
    want = GCC_OPT_SGD;
  if (want != o->kind || decoupled != o->decoupled) { /* the new kind's torch.optim defaults */
    gcc_loss_scale keep_scaler = o->scaler;
    float keep_clip = o->clip_grad_norm;
    memset(o, 0, sizeof *o);
    o->scaler = keep_scaler;
    o->clip_grad_norm = keep_clip;
    /* AdamW, the GPT recipe: weight decay on the matrices only, as nanoGPT's
     * configure_optimizers (--weight-decay-on all: every parameter) */
    o->decay_matrices_only = decoupled;
    o->kind = want;
    o->decoupled = decoupled;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    if (decoupled)
      o->weight_decay = 1e-2f; /* torch.optim.AdamW's default */
    if (want == GCC_OPT_ADAM)
      o->lr = 1e-3f;
    else if (!r->has_lr)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--optimizer sgd needs --lr (torch.optim.SGD has no default "
                          "learning rate)%s",
                          r->optimizer ? "" : "; the model has no training spec to take it from");
  }
  if (o->kind == GCC_OPT_ADAM && (r->has_momentum || r->nesterov))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: the model's optimizer is %s, which has no momentum; give "
                        "--optimizer sgd",
                        r->has_momentum ? "--momentum" : "--nesterov", gcc_optimizer_name(o));
  if (o->kind == GCC_OPT_SGD && r->has_betas)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--betas: the model's optimizer is sgd, which has no betas; give "
                        "--optimizer adam or adamw");
  if (r->has_betas) {
    o->beta1 = r->beta1;
    o->beta2 = r->beta2;
  }
  if (r->decay_on)
    o->decay_matrices_only = strcmp(r->decay_on, "matrices") == 0;
  if (r->has_clip)
    o->clip_grad_norm = r->clip;
  if (r->has_lr)
    o->lr = r->lr;
  if (r->has_momentum)
    o->momentum = r->momentum;
  if (r->has_weight_decay)
    o->weight_decay = r->weight_decay;
  if (r->nesterov)
    o->nesterov = 1;
  if (o->nesterov && (o->momentum <= 0.0f || o->dampening != 0.0f))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--nesterov needs --momentum > 0 and no dampening (as torch.optim.SGD)");
  return GCC_OK;
}

gcc_status gcc_recipe_apply(const gcc_graph *model, const gcc_recipe *r, gcc_graph **out,
                            gcc_diag *d) {
  *out = NULL;
  GCC_TRY(gcc_recipe_check(r, d));
  if (!model->training.present && !r->loss)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s has no training spec: give --loss cross-entropy|mse (and --lr, "
                        "--optimizer, --dataset ...) to train it",
                        model->source);
  gcc_graph *g;
  GCC_TRY(gcc_graph_clone(model, &g, d));
  gcc_status s = GCC_OK;
  if (!g->training.present) {
    s = add_loss(g, r, d);
  } else if (r->loss) {
    if (float_target(g) != (strcmp(r->loss, "mse") == 0))
      s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                       "--loss %s: %s already has the loss '%s' (%s); give the inference model "
                       "(without a spec) to build another",
                       r->loss, model->source, g->training.loss ? g->training.loss : "",
                       loss_op_name(g));
  }
  if (s == GCC_OK)
    s = set_optimizer(g, r, d);
  gcc_training *t = &g->training;
  if (s == GCC_OK) {
    if (r->batch_size > 0)
      t->batch_size = r->batch_size;
    if (r->epochs >= 0)
      t->epochs = r->epochs;
    if (r->has_seed)
      t->seed = r->seed;
    if (r->lr_schedule)
      t->sched = r->sched;
    if (r->n_mean > 0) {
      t->n_mean = t->n_std = r->n_mean;
      memcpy(t->mean, r->mean, sizeof t->mean);
      memcpy(t->std, r->std, sizeof t->std);
    }
    if (r->dataset || !t->dataset) {
      free(t->dataset);
      t->dataset = gcc_strdup(r->dataset ? r->dataset : "mnist");
      if (!t->dataset)
        s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
    }
  }
  if (s == GCC_OK && float_target(g) == 1 && strcmp(t->dataset, "inline") != 0 &&
      strcmp(t->dataset, "npy") != 0) /* .npy arrays may hold float32 targets */
    s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                     "--loss mse: --dataset %s has class labels, not float targets; use --loss "
                     "cross-entropy",
                     t->dataset);
  /* checked as a file would be: the loader's own checks of every field */
  uint8_t *bytes = NULL;
  size_t n = 0;
  if (s == GCC_OK)
    s = gcc_model_serialize(g, &bytes, &n, d);
  if (s == GCC_OK)
    s = gcc_model_parse(bytes, n, model->source, out, d);
  free(bytes);
  gcc_graph_free(g);
  return s;
}

int64_t gcc_lr_schedule_t_max(const gcc_training *t) {
  if (t->sched.kind == GCC_SCHED_WARMUP_COSINE)
    return t->sched.t_max;
  if (t->sched.kind != GCC_SCHED_COSINE)
    return 0;
  return t->sched.t_max > 0 ? t->sched.t_max : t->epochs;
}

double gcc_lr_at_epoch(const gcc_training *t, int64_t epoch) {
  double lr = t->opt.lr;
  const gcc_lr_schedule *s = &t->sched;
  if (s->kind == GCC_SCHED_STEP)
    return lr * pow((double)s->gamma, (double)(epoch / s->step_size));
  if (s->kind == GCC_SCHED_COSINE) {
    int64_t tm = gcc_lr_schedule_t_max(t);
    if (tm <= 0)
      return lr;
    double eta = s->eta_min;
    return eta + (lr - eta) * (1.0 + cos(M_PI * (double)epoch / (double)tm)) / 2.0;
  }
  return lr;
}

int gcc_lr_schedule_per_step(const gcc_training *t) {
  return t->sched.kind == GCC_SCHED_WARMUP_COSINE;
}

double gcc_lr_at_step(const gcc_training *t, int64_t it) {
  const gcc_lr_schedule *s = &t->sched;
  double lr = t->opt.lr, min_lr = s->eta_min;
  if (s->kind != GCC_SCHED_WARMUP_COSINE)
    return lr;
  if (it < s->warmup) /* nanoGPT's get_lr: never 0 at it = 0 */
    return lr * (double)(it + 1) / (double)(s->warmup + 1);
  if (it > s->t_max)
    return min_lr;
  double ratio = (double)(it - s->warmup) / (double)(s->t_max - s->warmup);
  double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
  return min_lr + coeff * (lr - min_lr);
}

const char *gcc_lr_schedule_str(const gcc_training *t, char *buf, size_t cap) {
  const gcc_lr_schedule *s = &t->sched;
  if (s->kind == GCC_SCHED_WARMUP_COSINE)
    snprintf(buf, cap, "warmup-cosine:%lld:%lld:%g", (long long)s->warmup, (long long)s->t_max,
             (double)s->eta_min);
  else if (s->kind == GCC_SCHED_STEP)
    snprintf(buf, cap, "step:%lld:%g", (long long)s->step_size, (double)s->gamma);
  else if (s->kind == GCC_SCHED_COSINE)
    snprintf(buf, cap, "cosine:%lld", (long long)gcc_lr_schedule_t_max(t));
  else
    snprintf(buf, cap, "none");
  return buf;
}

const char *gcc_optimizer_name(const gcc_optimizer *o) {
  if (o->kind == GCC_OPT_ADAM)
    return o->decoupled ? "adamw" : "adam";
  return o->kind == GCC_OPT_SGD ? "sgd" : "none";
}

const char *gcc_recipe_describe(const gcc_graph *g, char *buf, size_t cap) {
  const gcc_training *t = &g->training;
  const gcc_optimizer *o = &t->opt;
  int64_t n_dec = 0, n_keep = 0, e_dec = 0, e_keep = 0;
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *pv = &g->values[v];
    if (pv->kind != GCC_VALUE_PARAM || pv->state)
      continue;
    int64_t numel = gcc_shape_numel(&pv->shape, NULL);
    if (gcc_param_decayed(o, pv)) {
      n_dec++;
      e_dec += numel;
    } else {
      n_keep++;
      e_keep += numel;
    }
  }
  size_t at = 0;
#define PUT(...)                                                                                   \
  do {                                                                                             \
    if (at < cap)                                                                                  \
      at += (size_t)snprintf(buf + at, cap - at, __VA_ARGS__);                                     \
  } while (0)
  PUT("optimizer %s:", gcc_optimizer_name(o));
  if (o->kind == GCC_OPT_ADAM)
    PUT(" betas (%g, %g), eps %g,", (double)o->beta1, (double)o->beta2, (double)o->eps);
  else
    PUT(" momentum %g%s,", (double)o->momentum, o->nesterov ? " (nesterov)" : "");
  if (o->weight_decay == 0.0f)
    PUT(" no weight decay");
  else if (!o->decay_matrices_only)
    PUT(" weight decay %g on all %" PRId64 " tensors (%" PRId64 " parameters)",
        (double)o->weight_decay, n_dec, e_dec);
  else
    PUT(" weight decay %g on %" PRId64 " tensors of >= 2 dims (%" PRId64
        " parameters), none on %" PRId64 " others (%" PRId64 " parameters)",
        (double)o->weight_decay, n_dec, e_dec, n_keep, e_keep);
  if (o->clip_grad_norm > 0.0f)
    PUT("; clip-grad-norm %g", (double)o->clip_grad_norm);
  if (t->sched.kind != GCC_SCHED_NONE) {
    char sb[96];
    PUT("; lr schedule %s by %s", gcc_lr_schedule_str(t, sb, sizeof sb),
        gcc_lr_schedule_per_step(t) ? "optimizer step" : "epoch");
  }
#undef PUT
  return buf;
}
