/*
 * session.c - a training/inference session (session.h): the persistent
 * arena and its device mirror, the plan cache, steps and their pending
 * losses, evaluation, the dataset on the device, export of the trained
 * parameters.
 */
#include "runtime/session.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/half.h"
#include "passes/memplan.h"
#include "runtime/comm.h"
#include "runtime/cpu/cpu_backend.h"

#define MAX_PLANS 8

typedef struct slot {
  int param; /* value index in the model */
  size_t numel;
  float *data, *grad, *state[2];
  uint16_t *copy; /* --precision bf16|fp16: its 16-bit copy (host), else NULL */
  int updated;    /* a training plan's optimizer update writes it (and checks the result) */
} slot;

typedef struct cached_plan {
  gcc_mode mode;
  int64_t rows;
  int role; /* gradient accumulation: the micro-step's gcc_accum_role; -1: none */
  gcc_plan *plan;
} cached_plan;

/* a step whose loss is not collected yet: ring entry `entry` of `plan` */
typedef struct pending {
  gcc_plan *plan;
  int entry;
  int64_t step;
  /* gradient accumulation: `plan` is the LAST micro-step's; the FIRST's
   * loss is in its ring entry `entry`, the MIDDLE's K - 2 in entries
   * mid_base .. mid_base + K - 3 (mod its ring) */
  gcc_plan *first, *middle;
  int64_t mid_base;
} pending;

/* The step arenas the session took over from its plans: each the largest a
 * plan needed when it was made; the plans made after it run in the last
 * one where they fit. */
typedef struct arena_pool {
  void **a;
  int n;
  size_t bytes; /* the last one's */
} arena_pool;

/* The pool's last arena, NULL if none. */
static void *pool_last(const arena_pool *pool) {
  return pool->n ? pool->a[pool->n - 1] : NULL;
}

/* Takes plan p's own step arena into the pool (take: gcc_plan_take_host_arena
 * or gcc_plan_take_device_arena) when it is larger than the pool's last;
 * own_bytes: its size as gcc_plan_host_arena / gcc_plan_device_arena gave it.
 * Out of memory, the plan keeps it (later plans make their own). */
static void pool_adopt(arena_pool *pool, gcc_plan *p, size_t own_bytes,
                       void *(*take)(gcc_plan *, size_t *)) {
  if (own_bytes <= pool->bytes)
    return;
  void **a = realloc(pool->a, (size_t)(pool->n + 1) * sizeof *a);
  if (!a)
    return;
  pool->a = a;
  a[pool->n++] = take(p, &own_bytes);
  pool->bytes = own_bytes;
}

/* Releases every arena of the pool through backend `be`. */
static void pool_release(arena_pool *pool, const gcc_device_backend *be) {
  for (int i = 0; i < pool->n; i++)
    be->release(be->self, pool->a[i]);
  free(pool->a);
  *pool = (arena_pool){0};
}

struct gcc_session {
  const gcc_graph *model;
  /* On the CPU, the plans' step arenas (gcc_plan_config.share_host_arena) */
  arena_pool host_arenas;
  /* On a GPU, their device step arenas (gcc_plan_config.share_device_arena),
   * allocated by opt.backend */
  arena_pool dev_step_arenas;
  gcc_session_options opt;
  slot *slots;
  int n_slots;
  float *arena;
  size_t arena_bytes;
  float *scaler; /* fp16 loss scaling: [scale, growth tracker, applied steps] after the
                    optimizer state (GCC_ARENA_ALIGN bytes), or NULL */
  cached_plan plans[MAX_PLANS];
  int n_plans;
  int dumped;
  int64_t steps;
  float lr; /* gcc_session_set_lr: 0 = the optimizer nodes' own */
  /* device sessions */
  int on_device;
  void *dev_arena; /* the mirror of `arena` */
  int host_stale;  /* the device has newer parameters than `arena` */
  /* --precision bf16|fp16: the parameters' 16-bit copies ("<param>.bf16"),
   * at the parameters' element offsets, that the optimizer updates write
   * (passes/autocast.c) and the next step's GEMMs read; not part of `arena`
   * (nor of a checkpoint): made from the parameters whenever those are set
   * from outside the steps (refresh_copies) */
  gcc_dtype copy_dt; /* GCC_DT_FLOAT32: no copies */
  uint16_t *copies;
  size_t copies_bytes;
  void *dev_copies; /* the device's (the one the steps use) */
  int copies_stale; /* a CPU session's parameters were handed out writable */
  pending *pend;
  int n_pend, max_pend;
  /* --dataset-on-device: [x rows | y | perm] on the device */
  void *ds_dev;
  int64_t ds_n, ds_xw;
  void *ds_x, *ds_y;
  int64_t *ds_perm;
  /* --profile: NULL track = off */
  gcc_profiler *prof;
  gcc_prof_track *track;
  int site_step, site_eval;
  int64_t eval_batches;            /* evaluation batches run while profiling */
  int64_t shard_rows, global_rows; /* gcc_session_set_shard; global 0: whole batches */
  int accum;                       /* --grad-accum K (1: none) */
  /* gcc_session_check_params: the parameters may hold a NaN or Inf that no
   * check has seen (set from outside the steps, or a check failed), so the
   * next check scans them all; `updated` of the slots is known */
  int params_unchecked, updated_known;
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

/* H2D through pinned staging, waited for */
static gcc_status upload(gcc_session *s, void *dst, const void *src, size_t bytes, gcc_diag *d) {
  const gcc_device_backend *be = s->opt.backend;
  void *stage = NULL;
  GCC_TRY(be->host_alloc(be->self, bytes ? bytes : 1, &stage, d));
  memcpy(stage, src, bytes);
  gcc_status st = be->copy(be->self, dst, stage, bytes, GCC_COPY_H2D, GCC_STREAM_COMPUTE, d);
  if (st == GCC_OK)
    st = be->sync(be->self, d);
  be->host_release(be->self, stage);
  return st;
}

/* Device sessions: the persistent arena is mirrored on the device, uploaded
 * once through pinned staging. */
static gcc_status upload_arena(gcc_session *s, gcc_diag *d) {
  const gcc_device_backend *be = s->opt.backend;
  size_t bytes = s->arena_bytes ? s->arena_bytes : GCC_ARENA_ALIGN;
  gcc_status st = be->alloc(be->self, bytes, &s->dev_arena, d);
  if (st != GCC_OK) {
    if (st == GCC_ERR_OUT_OF_MEMORY) {
      size_t fr = 0, tot = 0;
      gcc_diag ignore = {0};
      if (be->mem_info)
        be->mem_info(be->self, &fr, &tot, &ignore);
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                          "%s: out of memory on the GPU: the persistent arena (parameters, "
                          "gradients, optimizer state) needs %zu bytes; %zu of %zu bytes are free",
                          s->model->source, bytes, fr, tot);
    }
    return st;
  }
  s->on_device = 1;
  return upload(s, s->dev_arena, s->arena, s->arena_bytes, d);
}

/* Refreshes the host arena from the device (after training steps). */
static gcc_status download_arena(gcc_session *s, gcc_diag *d) {
  if (!s->on_device || !s->host_stale)
    return GCC_OK;
  const gcc_device_backend *be = s->opt.backend;
  GCC_TRY(be->sync(be->self, d));
  void *stage = NULL;
  GCC_TRY(be->host_alloc(be->self, s->arena_bytes ? s->arena_bytes : 1, &stage, d));
  gcc_status st =
      be->copy(be->self, stage, s->dev_arena, s->arena_bytes, GCC_COPY_D2H, GCC_STREAM_COMPUTE, d);
  if (st == GCC_OK)
    st = be->sync(be->self, d);
  if (st == GCC_OK) {
    memcpy(s->arena, stage, s->arena_bytes);
    s->host_stale = 0;
  }
  be->host_release(be->self, stage);
  return st;
}

/* The 16-bit copies of the host arena's parameters (all of them, or `only`'s),
 * rounded to nearest even as the optimizer kernels round them
 * (graph/half.h), and on a device uploaded: after the session starts, and
 * whenever parameters are set from outside the steps (checkpoint restore,
 * broadcast, gcc_session_set_param, writes through gcc_session_param on the
 * CPU), so that the next step reads the copy of the parameters it updates.
 * Device errors. */
static gcc_status refresh_copies(gcc_session *s, const slot *only, gcc_diag *d) {
  if (!s->copies)
    return GCC_OK;
  for (int i = 0; i < s->n_slots; i++) {
    const slot *sl = &s->slots[i];
    if (only && sl != only)
      continue;
    if (s->copy_dt == GCC_DT_BFLOAT16)
      for (size_t k = 0; k < sl->numel; k++)
        sl->copy[k] = gcc_f32_to_bf16(sl->data[k]);
    else
      for (size_t k = 0; k < sl->numel; k++)
        sl->copy[k] = gcc_f32_to_f16(sl->data[k]);
    if (s->on_device && only) {
      size_t at = (size_t)((char *)sl->copy - (char *)s->copies);
      GCC_TRY(upload(s, (char *)s->dev_copies + at, sl->copy, sl->numel * sizeof(uint16_t), d));
    }
  }
  if (only)
    return GCC_OK;
  s->copies_stale = 0;
  return s->on_device ? upload(s, s->dev_copies, s->copies, s->copies_bytes, d) : GCC_OK;
}

gcc_status gcc_session_create(const gcc_graph *model, const gcc_session_options *o,
                              gcc_session **out, gcc_diag *d) {
  *out = NULL;
  if (!model->training.present)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: the model has no training spec",
                        model->source);
  if (o->backend && o->plan.detect_anomaly)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: --detect-anomaly checks every node on the host: use --device cpu",
                        model->source);
  gcc_session *s = calloc(1, sizeof *s);
  if (!s)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (session)");
  s->model = model;
  s->opt = *o;
  s->params_unchecked = 1;
  s->accum = o->grad_accum > 1 ? o->grad_accum : 1;
  if (s->accum > 1 && o->comm && o->comm->size > 1) {
    gcc_session_destroy(s);
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: --grad-accum %d with data-parallel training (%d ranks) is not "
                        "supported: the all-reduce would run on every micro-step; use a larger "
                        "global batch",
                        model->source, o->grad_accum, o->comm->size);
  }
  int np = 0;
  for (int v = 0; v < model->n_values; v++)
    np += model->values[v].kind == GCC_VALUE_PARAM;
  s->slots = calloc((size_t)(np ? np : 1), sizeof *s->slots);
  if (!s->slots) {
    gcc_session_destroy(s);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (session)");
  }
  size_t total = 0;
  /* the trained parameters first, then the state values (running
   * statistics: no gradient, no update), so that the parameters an
   * optimizer kernel walks stay consecutive in the flat sections; with
   * weight decay on the matrices only, the decayed parameters before the
   * others (the order of autodiff's updates: one kernel each) */
  for (int pass = 0; pass < 3; pass++)
    for (int v = 0; v < model->n_values; v++) {
      const gcc_value *pv = &model->values[v];
      if (pv->kind != GCC_VALUE_PARAM || pv->state != (pass == 2) ||
          (pass < 2 && gcc_param_decayed(&o->opt, pv) != (pass == 0)))
        continue;
      slot *sl = &s->slots[s->n_slots++];
      sl->param = v;
      sl->numel = (size_t)gcc_shape_numel(&model->values[v].shape, NULL);
      total += round_up(sl->numel);
    }
  int ns = n_state(&o->opt);
  size_t floats = total * (size_t)(2 + ns);
  int scaled = o->opt.scaler.mode != GCC_LOSS_SCALE_NONE && o->opt.kind != GCC_OPT_NONE;
  if (scaled) /* the loss scaling scalars: one aligned block after the state */
    floats += GCC_ARENA_ALIGN / sizeof(float);
  s->arena_bytes = floats * sizeof(float);
  s->arena = aligned_alloc(GCC_ARENA_ALIGN, s->arena_bytes ? s->arena_bytes : GCC_ARENA_ALIGN);
  if (!s->arena) {
    size_t b = s->arena_bytes;
    gcc_session_destroy(s);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                        "out of memory: the persistent arena needs %zu bytes", b);
  }
  memset(s->arena, 0, s->arena_bytes);
  s->copy_dt = gcc_precision_dtype(o->precision);
  if (s->copy_dt != GCC_DT_FLOAT32) {
    s->copies_bytes = total * sizeof(uint16_t);
    /* aligned_alloc takes a multiple of the alignment */
    size_t alloc = (s->copies_bytes / GCC_ARENA_ALIGN + 1) * GCC_ARENA_ALIGN;
    s->copies = aligned_alloc(GCC_ARENA_ALIGN, alloc);
    if (!s->copies) {
      size_t b = s->copies_bytes;
      gcc_session_destroy(s);
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                          "out of memory: the parameters' 16-bit copies need %zu bytes", b);
    }
    memset(s->copies, 0, s->copies_bytes);
  }
  s->max_pend = o->max_pending > 0 ? o->max_pending : 1;
  s->pend = calloc((size_t)s->max_pend, sizeof *s->pend);
  if (!s->pend) {
    gcc_session_destroy(s);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (session)");
  }
  /* [params][grads][state 0][state 1]: each section contiguous */
  size_t off = 0;
  for (int i = 0; i < s->n_slots; i++) {
    slot *sl = &s->slots[i];
    sl->data = s->arena + off;
    sl->grad = s->arena + total + off;
    for (int k = 0; k < ns; k++)
      sl->state[k] = s->arena + total * (size_t)(2 + k) + off;
    if (s->copies)
      sl->copy = s->copies + off;
    memcpy(sl->data, model->values[sl->param].data, sl->numel * sizeof(float));
    off += round_up(sl->numel);
  }
  if (scaled) { /* GradScaler(init_scale=...): tracker and applied steps 0 */
    s->scaler = s->arena + total * (size_t)(2 + ns);
    const gcc_loss_scale *ls = &o->opt.scaler;
    int fixed = ls->mode == GCC_LOSS_SCALE_FIXED;
    s->scaler[GCC_SESSION_SCALER_SCALE] = ls->init_scale;
    s->scaler[GCC_SESSION_SCALER_GROWTH_FACTOR] = fixed ? 1.0f : ls->growth_factor;
    s->scaler[GCC_SESSION_SCALER_BACKOFF_FACTOR] = fixed ? 1.0f : ls->backoff_factor;
    s->scaler[GCC_SESSION_SCALER_GROWTH_INTERVAL] = (float)ls->growth_interval;
    s->scaler[GCC_SESSION_SCALER_MODE] = (float)ls->mode;
  }
  gcc_status st = GCC_OK;
  if (o->backend)
    st = upload_arena(s, d);
  if (st == GCC_OK && s->copies && o->backend)
    st = s->opt.backend->alloc(s->opt.backend->self,
                               s->copies_bytes ? s->copies_bytes : GCC_ARENA_ALIGN, &s->dev_copies,
                               d);
  if (st == GCC_OK)
    st = refresh_copies(s, NULL, d);
  if (st != GCC_OK) {
    gcc_session_destroy(s);
    return st;
  }
  *out = s;
  return GCC_OK;
}

void gcc_session_destroy(gcc_session *s) {
  if (!s)
    return;
  for (int i = 0; i < s->n_plans; i++)
    gcc_plan_free(s->plans[i].plan);
  pool_release(&s->host_arenas, gcc_cpu_backend()); /* after every plan that ran in them */
  if (s->dev_step_arenas.n) { /* after every plan that ran in them, and their work */
    gcc_diag ignore = {0};
    s->opt.backend->sync(s->opt.backend->self, &ignore);
    pool_release(&s->dev_step_arenas, s->opt.backend);
  }
  if (s->dev_arena) {
    gcc_diag ignore = {0};
    s->opt.backend->sync(s->opt.backend->self, &ignore);
    s->opt.backend->release(s->opt.backend->self, s->dev_arena);
  }
  if (s->ds_dev)
    s->opt.backend->release(s->opt.backend->self, s->ds_dev);
  if (s->dev_copies)
    s->opt.backend->release(s->opt.backend->self, s->dev_copies);
  free(s->copies);
  free(s->pend);
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
  if (val->kind == GCC_VALUE_OPT_STATE && val->param_of < 0) { /* loss scaling's */
    if (!s->scaler)
      return NULL;
    if (strcmp(val->name, GCC_SCALER_SCALE_NAME) == 0)
      return &s->scaler[GCC_SESSION_SCALER_SCALE];
    if (strcmp(val->name, GCC_SCALER_TRACKER_NAME) == 0)
      return &s->scaler[GCC_SESSION_SCALER_TRACKER];
    if (strcmp(val->name, GCC_SCALER_STEPS_NAME) == 0)
      return &s->scaler[GCC_SESSION_SCALER_STEPS];
    if (strcmp(val->name, GCC_SCALER_SCRATCH_NAME) == 0)
      return &s->scaler[GCC_SESSION_SCALER_SCRATCH];
    return NULL;
  }
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
    if (val->dtype != GCC_DT_FLOAT32) /* the parameter's 16-bit copy */
      return val->dtype == s->copy_dt ? sl->copy : NULL;
    if (ends_with(val->name, ".exp_avg_sq"))
      return sl->state[1];
    return sl->state[0]; /* momentum_buffer or exp_avg */
  default: return NULL;
  }
}

static void plan_label(gcc_mode mode, int64_t rows, int role, char *buf, size_t cap) {
  static const char *const roles[] = {" first", " middle", " last"};
  snprintf(buf, cap, "%s b%" PRId64 "%s", mode == GCC_MODE_TRAIN ? "train" : "eval", rows,
           role >= 0 && role < 3 ? roles[role] : "");
}

gcc_status gcc_session_set_profiler(gcc_session *s, gcc_profiler *prof, gcc_prof_track *track,
                                    gcc_diag *d) {
  s->prof = NULL;
  s->track = NULL;
  for (int i = 0; i < s->n_plans; i++) {
    char label[64];
    plan_label(s->plans[i].mode, s->plans[i].rows, s->plans[i].role, label, sizeof label);
    /* a device plan times its launches with CUDA events (gcc_plan_set_profiler) */
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

/* The persistent arena where the plans run: the host arena, or its device
 * mirror (the same offsets). */
static void *bind_storage(void *user, const gcc_graph *g, int v) {
  gcc_session *s = user;
  char *host = bind_persistent(user, g, v);
  if (!host || !s->on_device)
    return host;
  if (s->copies && host >= (char *)s->copies && host < (char *)s->copies + s->copies_bytes)
    return (char *)s->dev_copies + (host - (char *)s->copies);
  return (char *)s->dev_arena + (host - (char *)s->arena);
}

static cached_plan *find_plan(gcc_session *s, gcc_mode mode, int64_t rows, int role) {
  for (int i = 0; i < s->n_plans; i++)
    if (s->plans[i].mode == mode && s->plans[i].rows == rows && s->plans[i].role == role)
      return &s->plans[i];
  return NULL;
}

/* a free cache entry; evicts the oldest plan no pending step uses */
static cached_plan *new_plan_entry(gcc_session *s, gcc_mode mode, int64_t rows, int role) {
  if (s->n_plans == MAX_PLANS) {
    int victim = 0;
    for (; victim < s->n_plans - 1; victim++) {
      int busy = 0;
      for (int j = 0; j < s->n_pend; j++)
        busy |= s->pend[j].plan == s->plans[victim].plan ||
                s->pend[j].first == s->plans[victim].plan ||
                s->pend[j].middle == s->plans[victim].plan;
      if (!busy)
        break;
    }
    gcc_plan_free(s->plans[victim].plan);
    memmove(&s->plans[victim], &s->plans[victim + 1],
            (size_t)(MAX_PLANS - 1 - victim) * sizeof s->plans[0]);
    s->n_plans--;
  }
  cached_plan *c = &s->plans[s->n_plans++];
  memset(c, 0, sizeof *c);
  c->mode = mode;
  c->rows = rows;
  c->role = role;
  return c;
}

static gcc_options plan_options(gcc_session *s, gcc_mode mode, int64_t rows, int role) {
  gcc_options o = {0};
  o.grad_accum = role >= 0 ? s->accum : 1;
  o.accum_role = role;
  o.mode = mode;
  o.batch_size = rows;
  o.opt = s->opt.opt;
  o.device = s->on_device ? s->opt.device : GCC_DEV_CPU;
  o.device_explicit = s->on_device;
  o.n_cuda_devices = s->on_device ? GCC_DEV_CUDA_INDEX(s->opt.device) + 1 : 0;
  o.world_size = s->opt.comm ? s->opt.comm->size : 1;
  o.bucket_bytes = s->opt.bucket_bytes;
  o.precision = s->opt.precision;
  o.nondeterministic = s->opt.nondeterministic;
  o.layout = s->opt.layout;
  o.param_copy_casts = s->opt.param_copy_casts;
  if (!s->dumped && s->opt.dump_after && mode == GCC_MODE_TRAIN) {
    o.dump_after = s->opt.dump_after;
    o.dump_file = s->opt.dump_file;
    s->dumped = 1;
  }
  return o;
}

int gcc_session_on_device(const gcc_session *s) {
  return s->on_device;
}

/* The plan of (mode, rows) and, under gradient accumulation, of the
 * micro-step `role` (-1: none). The MIDDLE plan runs K - 2 times a step:
 * its read-back ring has that many entries per pending step. */
static gcc_status role_plan(gcc_session *s, gcc_mode mode, int64_t rows, int role, gcc_plan **out,
                            gcc_diag *d) {
  cached_plan *c = find_plan(s, mode, rows, role);
  if (c) {
    *out = c->plan;
    return GCC_OK;
  }
  gcc_options o = plan_options(s, mode, rows, role);
  gcc_plan_config cfg = s->opt.plan;
  cfg.device = s->on_device ? s->opt.backend : NULL;
  cfg.readback_ring = mode != GCC_MODE_TRAIN     ? 1
                      : role == GCC_ACCUM_MIDDLE ? s->max_pend * (s->accum - 2)
                                                 : s->max_pend;
  cfg.threads = s->opt.threads;
  cfg.comm = mode == GCC_MODE_TRAIN ? s->opt.comm : NULL;
  /* On the CPU the plans run one at a time and a step's values are dead
   * when it returns: one step arena serves them all (PyTorch's caching
   * allocator does as much). On a GPU the plans issue their steps on the
   * backend's streams in order, so a step's activations are dead before
   * the next plan's kernels run: one device step arena serves them too. */
  if (!s->on_device) {
    cfg.share_host_arena = 1;
    cfg.shared_host_arena = pool_last(&s->host_arenas);
    cfg.shared_host_arena_bytes = s->host_arenas.bytes;
  } else {
    cfg.share_device_arena = 1;
    cfg.shared_device_arena = pool_last(&s->dev_step_arenas);
    cfg.shared_device_arena_bytes = s->dev_step_arenas.bytes;
  }
  gcc_plan *p;
  int profile = s->track != NULL; /* device plans: their launches timed with CUDA events */
  int64_t t0 = profile ? gcc_prof_now() : 0;
  GCC_TRY(gcc_plan_compile(s->model, &o, &cfg, bind_storage, s, &p, d));
  size_t own_bytes = 0;
  int owned = 0;
  if (!s->on_device && gcc_plan_host_arena(p, &own_bytes, &owned) && owned)
    pool_adopt(&s->host_arenas, p, own_bytes, gcc_plan_take_host_arena);
  if (s->on_device && gcc_plan_device_arena(p, &own_bytes, &owned) && owned)
    pool_adopt(&s->dev_step_arenas, p, own_bytes, gcc_plan_take_device_arena);
  gcc_plan_set_lr(p, s->lr);
  if (profile) {
    char label[64];
    plan_label(mode, rows, role, label, sizeof label);
    gcc_status ps = gcc_plan_set_profiler(p, s->prof, s->track, label, d);
    if (ps != GCC_OK) {
      gcc_plan_free(p);
      return ps;
    }
    char name[96];
    snprintf(name, sizeof name, "compile %s", label);
    gcc_prof_record(s->track,
                    gcc_profiler_site(s->prof, GCC_PROF_COMPILE, name, NULL, label, NULL, 0, 0), t0,
                    gcc_prof_now(), s->n_plans);
  }
  c = new_plan_entry(s, mode, rows, role);
  c->plan = p;
  *out = p;
  return GCC_OK;
}

gcc_status gcc_session_plan(gcc_session *s, gcc_mode mode, int64_t rows, gcc_plan **out,
                            gcc_diag *d) {
  if (mode != GCC_MODE_TRAIN || s->accum <= 1)
    return role_plan(s, mode, rows, -1, out, d);
  for (int role = GCC_ACCUM_FIRST; role <= GCC_ACCUM_LAST; role++)
    if (role != GCC_ACCUM_MIDDLE || s->accum > 2)
      GCC_TRY(role_plan(s, mode, rows, role, out, d));
  return GCC_OK; /* the LAST's */
}

void gcc_session_set_shard(gcc_session *s, int64_t shard_rows, int64_t global_rows) {
  s->shard_rows = shard_rows;
  s->global_rows = global_rows;
}

static void set_shard(gcc_session *s, gcc_plan *p, int64_t rows) {
  if (s->global_rows > 0)
    gcc_plan_set_shard(p, s->shard_rows, s->global_rows);
  else
    gcc_plan_set_shard(p, rows, rows);
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

static int64_t sample_numel(const gcc_value *v);

/* Bytes of one row of graph input `name` of the model. */
static size_t row_bytes(const gcc_session *s, const char *name) {
  int v = gcc_graph_find(s->model, name);
  return v < 0 ? 0
               : (size_t)sample_numel(&s->model->values[v]) *
                     gcc_dtype_size(s->model->values[v].dtype);
}

/* Gradient accumulation: the K micro-steps of one optimizer step (session.h
 * grad_accum), micro-batch k = rows [k * rows / K, (k + 1) * rows / K). Each
 * micro-step's Dropout counter is steps * K + k; the FIRST and LAST plans
 * run once per step (ring entry: the step), the MIDDLE one K - 2 times
 * (ring entries steps * (K - 2) + k - 1). */
static gcc_status accum_step(gcc_session *s, const void *input, const void *target, int64_t rows,
                             pending *pe, gcc_diag *d) {
  int64_t K = s->accum, mr = rows / K;
  if (rows % K != 0 || mr < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: --grad-accum %" PRId64 ": a step of %" PRId64 " rows is not %" PRId64
                        " micro-batches of equal size",
                        s->model->source, K, rows, K);
  const gcc_training *t = &s->model->training;
  size_t xb = row_bytes(s, t->input), yb = row_bytes(s, t->target);
  pe->mid_base = s->steps * (K - 2);
  for (int64_t k = 0; k < K; k++) {
    int role = k == 0 ? GCC_ACCUM_FIRST : k == K - 1 ? GCC_ACCUM_LAST : GCC_ACCUM_MIDDLE;
    gcc_plan *p;
    GCC_TRY(role_plan(s, GCC_MODE_TRAIN, mr, role, &p, d));
    GCC_TRY(bind_batch(s, p, (const char *)input + (size_t)(k * mr) * xb,
                       (const char *)target + (size_t)(k * mr) * yb, d));
    set_shard(s, p, mr);
    gcc_plan_set_micro_step(p, role == GCC_ACCUM_MIDDLE ? pe->mid_base + k - 1 : s->steps,
                            s->steps * K + k);
    GCC_TRY(gcc_plan_run(p, s->steps, d));
    if (role == GCC_ACCUM_FIRST)
      pe->first = p;
    else if (role == GCC_ACCUM_MIDDLE)
      pe->middle = p;
    else
      pe->plan = p;
  }
  return GCC_OK;
}

gcc_status gcc_session_train_step_async(gcc_session *s, const void *input, const void *target,
                                        int64_t rows, gcc_diag *d) {
  if (s->n_pend >= s->max_pend)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: %d steps are pending: collect their losses first", s->model->source,
                        s->n_pend);
  if (s->copies_stale)
    GCC_TRY(refresh_copies(s, NULL, d));
  pending *pe = &s->pend[s->n_pend];
  memset(pe, 0, sizeof *pe);
  pe->step = s->steps;
  int64_t t0 = s->track ? gcc_prof_now() : 0;
  if (s->accum > 1) {
    GCC_TRY(accum_step(s, input, target, rows, pe, d));
  } else {
    gcc_plan *p;
    GCC_TRY(gcc_session_plan(s, GCC_MODE_TRAIN, rows, &p, d));
    GCC_TRY(bind_batch(s, p, input, target, d));
    set_shard(s, p, rows);
    GCC_TRY(gcc_plan_run(p, s->steps, d));
    pe->plan = p;
  }
  pe->entry = (int)(s->steps % s->max_pend);
  s->host_stale = s->on_device;
  if (s->track) /* on a GPU: the time to issue the step */
    gcc_prof_record(s->track, s->site_step, t0, gcc_prof_now(), s->steps);
  s->steps++;
  s->n_pend++;
  return GCC_OK;
}

static int64_t sample_numel(const gcc_value *v) {
  int64_t n = 1;
  for (int i = 1; i < v->shape.ndim; i++)
    n *= v->shape.dims[i];
  return n;
}

gcc_status gcc_session_device_memory(gcc_session *s, size_t *fr, size_t *tot, gcc_diag *d) {
  if (!s->on_device)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: the session runs on the CPU",
                        s->model->source);
  return s->opt.backend->mem_info(s->opt.backend->self, fr, tot, d);
}

gcc_status gcc_session_upload_dataset(gcc_session *s, const float *x, const int64_t *y, int64_t n,
                                      gcc_diag *d) {
  const gcc_graph *m = s->model;
  const gcc_training *t = &m->training;
  if (!s->on_device)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: --dataset-on-device needs a GPU session",
                        m->source);
  int xv = t->input ? gcc_graph_find(m, t->input) : -1;
  int yv = t->target ? gcc_graph_find(m, t->target) : -1;
  if (xv < 0 || yv < 0 || m->values[xv].dtype != GCC_DT_FLOAT32 ||
      m->values[yv].dtype != GCC_DT_INT64 || sample_numel(&m->values[yv]) != 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: --dataset-on-device needs a float32 input and int64 class labels",
                        m->source);
  const gcc_device_backend *be = s->opt.backend;
  if (s->ds_dev) {
    be->release(be->self, s->ds_dev);
    s->ds_dev = NULL;
  }
  int64_t xw = sample_numel(&m->values[xv]);
  size_t xb = (size_t)(n * xw) * sizeof(float), yb = (size_t)n * sizeof(int64_t);
  size_t xo = 0, yo = (xb + 255) / 256 * 256, po = yo + (yb + 255) / 256 * 256;
  size_t total = po + (yb + 255) / 256 * 256;
  gcc_status st = be->alloc(be->self, total, &s->ds_dev, d);
  if (st == GCC_ERR_OUT_OF_MEMORY) {
    size_t fr = 0, tot = 0;
    gcc_diag ignore = {0};
    be->mem_info(be->self, &fr, &tot, &ignore);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                        "%s: --dataset-on-device: the training set needs %zu bytes on the GPU; "
                        "%zu of %zu bytes are free (use --dataset-on-device off)",
                        m->source, total, fr, tot);
  }
  GCC_TRY(st);
  s->ds_n = n;
  s->ds_xw = xw;
  s->ds_x = (char *)s->ds_dev + xo;
  s->ds_y = (char *)s->ds_dev + yo;
  s->ds_perm = (int64_t *)(void *)((char *)s->ds_dev + po);
  GCC_TRY(upload(s, s->ds_x, x, xb, d));
  return upload(s, s->ds_y, y, yb, d);
}

gcc_status gcc_session_set_order(gcc_session *s, const int64_t *perm, gcc_diag *d) {
  if (!s->ds_dev)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: no dataset uploaded", s->model->source);
  GCC_TRY(s->opt.backend->sync(s->opt.backend->self, d)); /* steps still read the old order */
  return upload(s, s->ds_perm, perm, (size_t)s->ds_n * sizeof(int64_t), d);
}

gcc_status gcc_session_train_step_uploaded(gcc_session *s, int64_t first, int64_t rows,
                                           gcc_diag *d) {
  if (!s->ds_dev)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: no dataset uploaded", s->model->source);
  if (s->accum > 1)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: --grad-accum with --dataset-on-device is not supported",
                        s->model->source);
  if (first < 0 || rows <= 0 || first + rows > s->ds_n)
    return gcc_diag_set(
        d, GCC_ERR_INVALID_ARGUMENT, "%s: batch [%lld, %lld) is outside the %lld uploaded samples",
        s->model->source, (long long)first, (long long)(first + rows), (long long)s->ds_n);
  if (s->n_pend >= s->max_pend)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: %d steps are pending: collect their losses first", s->model->source,
                        s->n_pend);
  const gcc_training *t = &s->model->training;
  gcc_plan *p;
  GCC_TRY(gcc_session_plan(s, GCC_MODE_TRAIN, rows, &p, d));
  GCC_TRY(gcc_plan_bind_input_gather(p, t->input, s->ds_x, s->ds_perm, first, d));
  GCC_TRY(gcc_plan_bind_input_gather(p, t->target, s->ds_y, s->ds_perm, first, d));
  set_shard(s, p, rows);
  GCC_TRY(gcc_plan_run(p, s->steps, d));
  pending *pe = &s->pend[s->n_pend++];
  memset(pe, 0, sizeof *pe);
  pe->step = s->steps;
  pe->plan = p;
  pe->entry = (int)(s->steps % s->max_pend);
  s->host_stale = 1;
  s->steps++;
  return GCC_OK;
}

gcc_status gcc_session_collect_losses(gcc_session *s, float *losses, int cap, int *n, gcc_diag *d) {
  *n = 0;
  if (cap < s->n_pend)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: %d losses pending, room for %d",
                        s->model->source, s->n_pend, cap);
  int done = 0;
  gcc_status st = GCC_OK;
  for (; done < s->n_pend; done++) {
    pending *pe = &s->pend[done];
    /* the step's micro-steps (one without gradient accumulation), in order */
    double sum = 0;
    for (int64_t k = 0; k < s->accum && st == GCC_OK; k++) {
      gcc_plan *p = s->accum == 1 || k == s->accum - 1 ? pe->plan : k == 0 ? pe->first : pe->middle;
      int entry = s->accum == 1 || k == 0 || k == s->accum - 1
                      ? pe->entry
                      : (int)((pe->mid_base + k - 1) % (s->max_pend * (s->accum - 2)));
      st = gcc_plan_wait_readback(p, entry, d);
      const gcc_tensor *t =
          st == GCC_OK ? gcc_plan_readback(p, s->model->training.loss, entry) : NULL;
      if (st == GCC_OK && !t)
        st = gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: the loss '%s' is not read back",
                          s->model->source, s->model->training.loss);
      if (st == GCC_OK)
        sum += ((const float *)t->data)[0];
    }
    if (st != GCC_OK)
      break;
    /* the mean over the K micro-batches (each a mean over its rows) */
    float l = s->accum == 1 ? (float)sum : (float)(sum / (double)s->accum);
    losses[(*n)++] = l;
    if (!isfinite(l)) {
      st = gcc_diag_set(d, GCC_ERR_NUMERIC,
                        "%s: the loss became %f at optimizer step %lld (learning rate too high?)",
                        s->model->source, (double)l, (long long)pe->step + 1);
      done++;
      break;
    }
  }
  memmove(s->pend, s->pend + done, (size_t)(s->n_pend - done) * sizeof *s->pend);
  s->n_pend -= done;
  if (st != GCC_OK)
    s->n_pend = 0; /* the rest is meaningless after a failure */
  return st;
}

int gcc_session_max_pending(const gcc_session *s) {
  return s->max_pend;
}

gcc_status gcc_session_train_step(gcc_session *s, const void *input, const void *target,
                                  int64_t rows, float *loss, gcc_diag *d) {
  float buf[1];
  int n = 0;
  if (s->n_pend > 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: asynchronous steps are pending: collect their losses first",
                        s->model->source);
  GCC_TRY(gcc_session_train_step_async(s, input, target, rows, d));
  GCC_TRY(gcc_session_collect_losses(s, buf, 1, &n, d));
  *loss = buf[0];
  return GCC_OK;
}

gcc_status gcc_session_eval_batch(gcc_session *s, const void *input, const void *target,
                                  int64_t rows, float *loss, int64_t *correct,
                                  const gcc_tensor **pred_out, gcc_diag *d) {
  int64_t t0 = s->track ? gcc_prof_now() : 0;
  const gcc_training *t = &s->model->training;
  const gcc_tensor *pred = NULL, *tgt = NULL;
  gcc_tensor tgt_host;
  gcc_plan *p;
  GCC_TRY(gcc_session_plan(s, GCC_MODE_EVAL, rows, &p, d));
  GCC_TRY(bind_batch(s, p, input, target, d));
  GCC_TRY(gcc_plan_run(p, s->steps, d));
  GCC_TRY(gcc_plan_wait_readback(p, 0, d));
  const gcc_tensor *l = gcc_plan_readback(p, t->loss, 0);
  if (!l)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: the loss '%s' is not read back", s->model->source,
                        t->loss);
  *loss = ((const float *)l->data)[0];
  pred = t->prediction ? gcc_plan_readback(p, t->prediction, 0) : NULL;
  if (pred && (pred->shape.ndim < 1 || pred->shape.dims[0] < rows)) {
    char sh[128];
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: the prediction '%s' has shape %s, fewer rows than the batch's %lld",
                        s->model->source, t->prediction, gcc_shape_str(&pred->shape, sh, sizeof sh),
                        (long long)rows);
  }
  int tv = gcc_graph_find(gcc_plan_graph(p), t->target);
  if (tv >= 0) { /* the labels the caller passed, as the plan sees them */
    const gcc_value *val = &gcc_plan_graph(p)->values[tv];
    tgt_host =
        (gcc_tensor){val->dtype, val->shape, gcc_shape_numel(&val->shape, NULL), (void *)target};
    tgt = &tgt_host;
  }
  *correct = -1;
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

/* Points every PARAM value of g (the session's model or a clone of it) at
 * its slot in the host arena, borrowed; free_own: free the copies the
 * values held first. */
static void borrow_slots(const gcc_session *s, gcc_graph *g, int free_own) {
  for (int i = 0; i < s->n_slots; i++) {
    const slot *sl = &s->slots[i];
    gcc_value *v = &g->values[sl->param];
    if (free_own && !v->data_borrowed)
      free(v->data);
    v->data = sl->data;
    v->data_bytes = sl->numel * sizeof(float);
    v->data_borrowed = 1;
  }
}

gcc_status gcc_session_export_view(gcc_session *s, gcc_graph **out, gcc_diag *d) {
  *out = NULL;
  GCC_TRY(download_arena(s, d));
  gcc_graph *g;
  GCC_TRY(gcc_graph_clone_borrowing_params(s->model, &g, d));
  borrow_slots(s, g, 0); /* the clone's PARAM values borrow the model's */
  *out = g;
  return GCC_OK;
}

gcc_status gcc_session_lend_params(gcc_session *s, gcc_graph *model, gcc_diag *d) {
  if (model != s->model)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: gcc_session_lend_params: not the model the session was created from",
                        model->source);
  borrow_slots(s, model, 1);
  return GCC_OK;
}

gcc_status gcc_session_export(gcc_session *s, gcc_graph **out, gcc_diag *d) {
  gcc_graph *g;
  GCC_TRY(gcc_session_export_view(s, &g, d));
  for (int v = 0; v < g->n_values; v++) { /* every parameter: a copy of its own */
    gcc_value *val = &g->values[v];
    if (!val->data_borrowed)
      continue;
    void *own = malloc(val->data_bytes ? val->data_bytes : 1);
    if (!own) {
      size_t b = val->data_bytes;
      gcc_graph_free(g);
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                          "out of memory: %zu bytes for parameter '%s' of the trained model", b,
                          s->model->values[v].name);
    }
    memcpy(own, val->data, val->data_bytes);
    val->data = own;
    val->data_borrowed = 0;
  }
  *out = g;
  return GCC_OK;
}

/* The slot of parameter `name`, the host arena refreshed from the device:
 * GCC_ERR_INVALID_ARGUMENT naming the parameter (and the model) when there
 * is none, the device's error when the download fails. */
static gcc_status host_slot(gcc_session *s, const char *fn, const char *name, slot **out,
                            gcc_diag *d) {
  *out = name ? find_slot(s, name) : NULL;
  if (!*out)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: %s: '%s' is not a parameter of the model",
                        s->model->source, fn, name ? name : "(null)");
  gcc_status st = download_arena(s, d);
  if (st != GCC_OK)
    return gcc_diag_prefix(d, "%s: %s: reading '%s' back from the device", s->model->source, fn,
                           name);
  return GCC_OK;
}

gcc_status gcc_session_param(gcc_session *s, const char *name, float **data, int64_t *numel,
                             gcc_diag *d) {
  *data = NULL;
  slot *sl;
  GCC_TRY(host_slot(s, "gcc_session_param", name, &sl, d));
  *data = sl->data;
  s->copies_stale |= s->copies && !s->on_device; /* the caller may write the parameter */
  s->params_unchecked = 1;
  if (numel)
    *numel = (int64_t)sl->numel;
  return GCC_OK;
}

gcc_status gcc_session_set_param(gcc_session *s, const char *name, const float *data, int64_t numel,
                                 gcc_diag *d) {
  slot *sl = name ? find_slot(s, name) : NULL;
  if (!sl)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: gcc_session_set_param: '%s' is not a parameter of the model",
                        s->model->source, name ? name : "(null)");
  if (!data || numel != (int64_t)sl->numel)
    return gcc_diag_set(
        d, GCC_ERR_INVALID_ARGUMENT, "%s: gcc_session_set_param: '%s' has %zu elements, got %lld%s",
        s->model->source, name, sl->numel, (long long)numel, data ? "" : " and no data");
  if (s->n_pend > 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: gcc_session_set_param: asynchronous steps are pending: collect their "
                        "losses first",
                        s->model->source);
  GCC_TRY(download_arena(s, d)); /* the host arena whole again: one parameter changes */
  memmove(sl->data, data, sl->numel * sizeof(float));
  s->params_unchecked = 1;
  if (s->on_device)
    GCC_TRY(upload(s, (char *)s->dev_arena + ((char *)sl->data - (char *)s->arena), sl->data,
                   sl->numel * sizeof(float), d));
  return refresh_copies(s, sl, d);
}

gcc_status gcc_session_grad(gcc_session *s, const char *name, float **data, int64_t *numel,
                            gcc_diag *d) {
  *data = NULL;
  slot *sl;
  GCC_TRY(host_slot(s, "gcc_session_grad", name, &sl, d));
  *data = sl->grad;
  if (numel)
    *numel = (int64_t)sl->numel;
  return GCC_OK;
}

/* The index of the first NaN or Inf among x[0 .. n), or -1. The test is on
 * the exponent bits, an integer OR that the compiler vectorizes; the scan of
 * a block stops at its end, and the element is looked up only on failure. */
static int64_t first_nonfinite(const float *x, size_t n) {
  enum { BLOCK = 4096 };
  for (size_t at = 0; at < n; at += BLOCK) {
    size_t m = n - at < BLOCK ? n - at : BLOCK;
    uint32_t bad = 0;
    for (size_t i = 0; i < m; i++) {
      uint32_t u;
      memcpy(&u, &x[at + i], sizeof u);
      bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    if (bad)
      for (size_t i = 0; i < m; i++)
        if (!isfinite(x[at + i]))
          return (int64_t)(at + i);
  }
  return -1;
}

/* Marks the slots that a training plan's optimizer updates write. */
static void find_updated(gcc_session *s) {
  for (int i = 0; i < s->n_plans; i++) {
    if (s->plans[i].mode != GCC_MODE_TRAIN)
      continue;
    const gcc_graph *g = gcc_plan_graph(s->plans[i].plan);
    for (int k = 0; k < g->n_nodes; k++) {
      int v = gcc_plan_update_param(s->plans[i].plan, k);
      slot *sl = v >= 0 ? find_slot(s, g->values[v].name) : NULL;
      if (sl)
        sl->updated = 1;
    }
    s->updated_known = 1;
  }
}

gcc_status gcc_session_check_params(gcc_session *s, gcc_diag *d) {
  GCC_TRY(download_arena(s, d));
  /* On the CPU the updates checked what they wrote (runtime/cpu/cpu_optim.c):
   * when every update of every step since the last check reported and none
   * found a NaN or Inf, the parameters they wrote are finite and only the
   * others (state values, parameters no update writes) are scanned. */
  int all = s->on_device || s->params_unchecked;
  for (int i = 0; i < s->n_plans; i++) {
    int64_t bad = 0;
    if (!gcc_plan_take_update_checks(s->plans[i].plan, &bad) || bad > 0)
      all = 1;
  }
  if (!all && !s->updated_known)
    find_updated(s);
  all |= !s->updated_known;
  for (int i = 0; i < s->n_slots; i++) {
    const slot *sl = &s->slots[i];
    if (!all && sl->updated)
      continue;
    int64_t at = first_nonfinite(sl->data, sl->numel);
    if (at < 0)
      continue;
    s->params_unchecked = 1; /* the next check reports it again */
    float x = sl->data[at];
    return gcc_diag_set(d, GCC_ERR_NUMERIC,
                        "%s: parameter '%s' is non-finite (%s at element %" PRId64 " of %zu) "
                        "after optimizer step %" PRId64 " (learning rate too high?)",
                        s->model->source, s->model->values[sl->param].name,
                        isnan(x) ? "NaN"
                        : x > 0  ? "+Inf"
                                 : "-Inf",
                        at, sl->numel, s->steps);
  }
  s->params_unchecked = 0;
  return GCC_OK;
}

gcc_status gcc_session_arena(gcc_session *s, const void **arena, size_t *bytes, gcc_diag *d) {
  GCC_TRY(download_arena(s, d));
  *arena = s->arena;
  *bytes = s->arena_bytes;
  return GCC_OK;
}

gcc_status gcc_session_restore(gcc_session *s, const void *arena, size_t bytes, int64_t steps,
                               gcc_diag *d) {
  if (bytes != s->arena_bytes)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: a persistent arena of %zu bytes, the session's has %zu",
                        s->model->source, bytes, s->arena_bytes);
  if (s->n_pend > 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: asynchronous steps are pending: collect their losses first",
                        s->model->source);
  memcpy(s->arena, arena, bytes);
  s->params_unchecked = 1;
  if (s->on_device) {
    GCC_TRY(upload(s, s->dev_arena, s->arena, s->arena_bytes, d));
    s->host_stale = 0;
  }
  GCC_TRY(refresh_copies(s, NULL, d)); /* the checkpoint keeps the float32 weights only */
  s->steps = steps;
  return GCC_OK;
}

gcc_status gcc_session_broadcast_params(gcc_session *s, gcc_diag *d) {
  gcc_comm *c = s->opt.comm;
  if (!c || c->size <= 1)
    return GCC_OK;
  if (s->n_pend > 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: asynchronous steps are pending: collect their losses first",
                        s->model->source);
  GCC_TRY(download_arena(s, d));
  GCC_TRY(c->broadcast(c, s->arena, s->arena_bytes, 0, d));
  s->params_unchecked = 1;
  if (s->on_device) {
    GCC_TRY(upload(s, s->dev_arena, s->arena, s->arena_bytes, d));
    s->host_stale = 0;
  }
  return refresh_copies(s, NULL, d);
}

gcc_status gcc_session_param_hash(gcc_session *s, uint64_t *hash, gcc_diag *d) {
  GCC_TRY(download_arena(s, d));
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < s->n_slots; i++) {
    const unsigned char *b = (const unsigned char *)s->slots[i].data;
    for (size_t k = 0; k < s->slots[i].numel * sizeof(float); k++) {
      h ^= b[k];
      h *= 1099511628211ull;
    }
  }
  *hash = h;
  return GCC_OK;
}

void gcc_session_set_lr(gcc_session *s, float lr) {
  s->lr = lr;
  for (int i = 0; i < s->n_plans; i++)
    gcc_plan_set_lr(s->plans[i].plan, lr);
}

float gcc_session_lr(const gcc_session *s) {
  return s->lr > 0.0f ? s->lr : s->opt.opt.lr;
}

int64_t gcc_session_steps(const gcc_session *s) {
  return s->steps;
}

gcc_status gcc_session_check_loss_scale(const gcc_session *s, const void *arena, size_t bytes,
                                        const char *path, gcc_diag *d) {
  if (!s->scaler || bytes != s->arena_bytes)
    return GCC_OK; /* no scaling, or the arenas differ anyway (the caller's check) */
  const float *theirs = (const float *)arena + (s->scaler - s->arena);
  static const struct {
    int at;
    const char *name;
  } keys[] = {{GCC_SESSION_SCALER_MODE, "mode (1 dynamic, 2 fixed)"},
              {GCC_SESSION_SCALER_GROWTH_FACTOR, "growth_factor"},
              {GCC_SESSION_SCALER_BACKOFF_FACTOR, "backoff_factor"},
              {GCC_SESSION_SCALER_GROWTH_INTERVAL, "growth_interval"}};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    float a, b = s->scaler[keys[i].at];
    memcpy(&a, theirs + keys[i].at, sizeof a);
    if (memcmp(&a, &b, sizeof a) != 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--resume %s: the checkpoint's fp16 loss scaling %s is %.9g, this run's "
                          "is %.9g (--loss-scale, --loss-scale-growth-interval)",
                          path, keys[i].name, (double)a, (double)b);
  }
  return GCC_OK;
}

gcc_status gcc_session_loss_scale(gcc_session *s, gcc_loss_scale_state *out, gcc_diag *d) {
  memset(out, 0, sizeof *out);
  if (!s->scaler)
    return GCC_OK;
  GCC_TRY(download_arena(s, d));
  out->on = 1;
  out->scale = s->scaler[GCC_SESSION_SCALER_SCALE];
  out->growth_tracker = s->scaler[GCC_SESSION_SCALER_TRACKER];
  out->applied_steps = (int64_t)s->scaler[GCC_SESSION_SCALER_STEPS];
  out->skipped_steps = s->steps - out->applied_steps;
  return GCC_OK;
}
size_t gcc_session_persistent_bytes(const gcc_session *s) {
  return s->arena_bytes;
}

size_t gcc_session_step_arena_bytes(const gcc_session *s) {
  size_t m = 0;
  for (int i = 0; i < s->n_plans; i++) {
    size_t b = gcc_plan_step_bytes(s->plans[i].plan);
    m = b > m ? b : m;
  }
  return m;
}
