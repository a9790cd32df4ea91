#include "runtime/session.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/memplan.h"

#define MAX_PLANS 8

typedef struct slot {
  int param;       /* value index in the model */
  size_t numel;
  float *data, *grad, *state[2];
} slot;

typedef struct cached_plan {
  gcc_mode mode;
  int64_t rows;
  gcc_plan *plan;
} cached_plan;

struct gcc_session {
  const gcc_graph *model;
  gcc_session_options opt;
  slot *slots;
  int n_slots;
  float *arena;
  size_t arena_bytes;
  cached_plan plans[MAX_PLANS];
  int n_plans;
  int dumped;
  int64_t steps;
  /* --profile: NULL track = off */
  gcc_profiler *prof;
  gcc_prof_track *track;
  int site_step, site_eval;
  int64_t eval_batches; /* evaluation batches run while profiling */
};

static size_t round_up(size_t n) {
  size_t per = GCC_ARENA_ALIGN / sizeof(float);
  return (n + per - 1) / per * per;
}

static int n_state(const gcc_optimizer *o) {
  if (o->kind == GCC_OPT_ADAM)
    return 2;
  return o->momentum != 0.0f ? 1 : 0;
}

gcc_status gcc_session_create(const gcc_graph *model, const gcc_session_options *o,
                              gcc_session **out, gcc_diag *d) {
  *out = NULL;
  if (!model->training.present)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: the model has no training spec",
                        model->source);
  gcc_session *s = calloc(1, sizeof *s);
  if (!s)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (session)");
  s->model = model;
  s->opt = *o;
  int np = 0;
  for (int v = 0; v < model->n_values; v++)
    np += model->values[v].kind == GCC_VALUE_PARAM;
  s->slots = calloc((size_t)(np ? np : 1), sizeof *s->slots);
  if (!s->slots) {
    gcc_session_destroy(s);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (session)");
  }
  size_t total = 0;
  for (int v = 0; v < model->n_values; v++) {
    if (model->values[v].kind != GCC_VALUE_PARAM)
      continue;
    slot *sl = &s->slots[s->n_slots++];
    sl->param = v;
    sl->numel = (size_t)gcc_shape_numel(&model->values[v].shape, NULL);
    total += round_up(sl->numel);
  }
  int ns = n_state(&o->opt);
  size_t floats = total * (size_t)(2 + ns);
  s->arena_bytes = floats * sizeof(float);
  s->arena = aligned_alloc(GCC_ARENA_ALIGN, s->arena_bytes ? s->arena_bytes : GCC_ARENA_ALIGN);
  if (!s->arena) {
    size_t b = s->arena_bytes;
    gcc_session_destroy(s);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                        "out of memory: the persistent arena needs %zu bytes", b);
  }
  memset(s->arena, 0, s->arena_bytes);
  /* [params][grads][state 0][state 1]: each section contiguous */
  size_t off = 0;
  for (int i = 0; i < s->n_slots; i++) {
    slot *sl = &s->slots[i];
    sl->data = s->arena + off;
    sl->grad = s->arena + total + off;
    for (int k = 0; k < ns; k++)
      sl->state[k] = s->arena + total * (size_t)(2 + k) + off;
    memcpy(sl->data, model->values[sl->param].data, sl->numel * sizeof(float));
    off += round_up(sl->numel);
  }
  *out = s;
  return GCC_OK;
}

void gcc_session_destroy(gcc_session *s) {
  if (!s)
    return;
  for (int i = 0; i < s->n_plans; i++)
    gcc_plan_free(s->plans[i].plan);
  free(s->slots);
  free(s->arena);
  free(s);
}

static slot *find_slot(gcc_session *s, const char *param_name) {
  for (int i = 0; i < s->n_slots; i++)
    if (strcmp(s->model->values[s->slots[i].param].name, param_name) == 0)
      return &s->slots[i];
  return NULL;
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void *bind_persistent(void *user, const gcc_graph *g, int v) {
  gcc_session *s = user;
  const gcc_value *val = &g->values[v];
  int p = val->kind == GCC_VALUE_PARAM ? v : val->param_of;
  if (p < 0)
    return NULL;
  slot *sl = find_slot(s, g->values[p].name);
  if (!sl)
    return NULL;
  switch (val->kind) {
  case GCC_VALUE_PARAM: return sl->data;
  case GCC_VALUE_GRAD: return sl->grad;
  case GCC_VALUE_OPT_STATE:
    if (ends_with(val->name, ".exp_avg_sq"))
      return sl->state[1];
    return sl->state[0]; /* momentum_buffer or exp_avg */
  default: return NULL;
  }
}

static void plan_label(gcc_mode mode, int64_t rows, char *buf, size_t cap) {
  snprintf(buf, cap, "%s b%" PRId64, mode == GCC_MODE_TRAIN ? "train" : "eval", rows);
}

gcc_status gcc_session_set_profiler(gcc_session *s, gcc_profiler *prof, gcc_prof_track *track,
                                    gcc_diag *d) {
  s->prof = NULL;
  s->track = NULL;
  for (int i = 0; i < s->n_plans; i++) {
    char label[64];
    plan_label(s->plans[i].mode, s->plans[i].rows, label, sizeof label);
    GCC_TRY(gcc_plan_set_profiler(s->plans[i].plan, prof, track, label, d));
  }
  if (!prof || !track)
    return GCC_OK;
  s->site_step = gcc_profiler_site(prof, GCC_PROF_STEP, "train step", NULL, NULL, NULL, 0, 0);
  s->site_eval = gcc_profiler_site(prof, GCC_PROF_EVAL, "eval batch", NULL, NULL, NULL, 0, 0);
  if (s->site_step < 0 || s->site_eval < 0)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (profiler sites)");
  s->prof = prof;
  s->track = track;
  return GCC_OK;
}

gcc_status gcc_session_plan(gcc_session *s, gcc_mode mode, int64_t rows, gcc_plan **out,
                            gcc_diag *d) {
  for (int i = 0; i < s->n_plans; i++)
    if (s->plans[i].mode == mode && s->plans[i].rows == rows) {
      *out = s->plans[i].plan;
      return GCC_OK;
    }
  gcc_options o = {0};
  o.mode = mode;
  o.batch_size = rows;
  o.opt = s->opt.opt;
  o.device = GCC_DEV_CPU;
  if (!s->dumped && s->opt.dump_after && mode == GCC_MODE_TRAIN) {
    o.dump_after = s->opt.dump_after;
    o.dump_file = s->opt.dump_file;
    s->dumped = 1;
  }
  gcc_plan *p;
  int64_t t0 = s->track ? gcc_prof_now() : 0;
  GCC_TRY(gcc_plan_compile(s->model, &o, bind_persistent, s, s->opt.threads, &p, d));
  if (s->track) {
    char label[64];
    plan_label(mode, rows, label, sizeof label);
    gcc_status ps = gcc_plan_set_profiler(p, s->prof, s->track, label, d);
    if (ps != GCC_OK) {
      gcc_plan_free(p);
      return ps;
    }
    char name[96];
    snprintf(name, sizeof name, "compile %s", label);
    gcc_prof_record(s->track, gcc_profiler_site(s->prof, GCC_PROF_COMPILE, name, NULL, label,
                                                NULL, 0, 0),
                    t0, gcc_prof_now(), s->n_plans);
  }
  if (s->n_plans == MAX_PLANS) { /* evict the oldest */
    gcc_plan_free(s->plans[0].plan);
    memmove(&s->plans[0], &s->plans[1], (MAX_PLANS - 1) * sizeof s->plans[0]);
    s->n_plans--;
  }
  s->plans[s->n_plans].mode = mode;
  s->plans[s->n_plans].rows = rows;
  s->plans[s->n_plans].plan = p;
  s->n_plans++;
  *out = p;
  return GCC_OK;
}

static gcc_status bind_batch(gcc_session *s, gcc_plan *p, const void *input, const void *target,
                             gcc_diag *d) {
  const gcc_training *t = &s->model->training;
  if (!t->input || !t->target)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: training.input and training.target must name the graph inputs "
                        "fed with data",
                        s->model->source);
  GCC_TRY(gcc_plan_bind_input(p, t->input, input, d));
  return gcc_plan_bind_input(p, t->target, target, d);
}

static float read_loss(const gcc_plan *p, const gcc_training *t) {
  const gcc_tensor *l = gcc_plan_tensor(p, t->loss);
  return ((const float *)l->data)[0];
}

gcc_status gcc_session_train_step(gcc_session *s, const void *input, const void *target,
                                  int64_t rows, float *loss, gcc_diag *d) {
  gcc_plan *p;
  GCC_TRY(gcc_session_plan(s, GCC_MODE_TRAIN, rows, &p, d));
  int64_t t0 = s->track ? gcc_prof_now() : 0;
  GCC_TRY(bind_batch(s, p, input, target, d));
  GCC_TRY(gcc_plan_run(p, s->steps, d));
  s->steps++;
  *loss = read_loss(p, &s->model->training);
  if (s->track)
    gcc_prof_record(s->track, s->site_step, t0, gcc_prof_now(), s->steps - 1);
  if (!isfinite(*loss))
    return gcc_diag_set(d, GCC_ERR_NUMERIC,
                        "%s: the loss became %f at optimizer step %lld (learning rate too high?)",
                        s->model->source, (double)*loss, (long long)s->steps);
  return GCC_OK;
}

gcc_status gcc_session_eval_batch(gcc_session *s, const void *input, const void *target,
                                  int64_t rows, float *loss, int64_t *correct,
                                  const gcc_tensor **pred_out, gcc_diag *d) {
  gcc_plan *p;
  GCC_TRY(gcc_session_plan(s, GCC_MODE_EVAL, rows, &p, d));
  int64_t t0 = s->track ? gcc_prof_now() : 0;
  GCC_TRY(bind_batch(s, p, input, target, d));
  GCC_TRY(gcc_plan_run(p, s->steps, d));
  const gcc_training *t = &s->model->training;
  *loss = read_loss(p, t);
  *correct = -1;
  const gcc_tensor *pred = t->prediction ? gcc_plan_tensor(p, t->prediction) : NULL;
  const gcc_tensor *tgt = gcc_plan_tensor(p, t->target);
  if (pred_out)
    *pred_out = pred;
  if (pred && tgt && pred->shape.ndim == 2 && pred->dtype == GCC_DT_FLOAT32 &&
      (tgt->dtype == GCC_DT_INT64 || tgt->dtype == GCC_DT_INT32)) {
    int64_t c = pred->shape.dims[1], ok = 0;
    const float *x = pred->data;
    for (int64_t i = 0; i < rows; i++) {
      int64_t best = 0;
      for (int64_t j = 1; j < c; j++)
        if (x[i * c + j] > x[i * c + best])
          best = j;
      int64_t y = tgt->dtype == GCC_DT_INT64 ? ((const int64_t *)tgt->data)[i]
                                             : ((const int32_t *)tgt->data)[i];
      ok += best == y;
    }
    *correct = ok;
  }
  if (s->track)
    gcc_prof_record(s->track, s->site_eval, t0, gcc_prof_now(), s->eval_batches++);
  return GCC_OK;
}

gcc_status gcc_session_export(const gcc_session *s, gcc_graph **out, gcc_diag *d) {
  gcc_graph *g;
  GCC_TRY(gcc_graph_clone(s->model, &g, d));
  for (int i = 0; i < s->n_slots; i++) {
    const slot *sl = &s->slots[i];
    memcpy(g->values[sl->param].data, sl->data, sl->numel * sizeof(float));
  }
  *out = g;
  return GCC_OK;
}

float *gcc_session_param(gcc_session *s, const char *name, int64_t *numel) {
  slot *sl = find_slot(s, name);
  if (!sl)
    return NULL;
  if (numel)
    *numel = (int64_t)sl->numel;
  return sl->data;
}

float *gcc_session_grad(gcc_session *s, const char *name, int64_t *numel) {
  slot *sl = find_slot(s, name);
  if (!sl)
    return NULL;
  if (numel)
    *numel = (int64_t)sl->numel;
  return sl->grad;
}

int64_t gcc_session_steps(const gcc_session *s) { return s->steps; }
size_t gcc_session_persistent_bytes(const gcc_session *s) { return s->arena_bytes; }

size_t gcc_session_step_arena_bytes(const gcc_session *s) {
  size_t m = 0;
  for (int i = 0; i < s->n_plans; i++) {
    size_t b = gcc_plan_arena_bytes(s->plans[i].plan);
    m = b > m ? b : m;
  }
  return m;
}
