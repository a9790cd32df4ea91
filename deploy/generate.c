/*
 * generate.c - sampling from a language model (generate.h).
 */
#include "deploy/generate.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/kv_cache.h"
#include "graph/ops.h"
#include "graph/rng.h"
#include "runtime/plan.h"

/* The logits-only graph: the model pruned to its prediction, its one input
 * the spec's; inference only (Dropout as in model.eval()). */
static gcc_status logits_graph(const gcc_graph *model, gcc_graph **out, gcc_diag *d) {
  const gcc_training *t = &model->training;
  *out = NULL;
  int pred = t->present && t->prediction ? gcc_graph_find(model, t->prediction) : -1;
  int in = t->present && t->input ? gcc_graph_find(model, t->input) : -1;
  if (pred < 0 || in < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: --generate needs a gcc-train model whose training spec names the "
                        "input (token ids) and the prediction (logits (B, T, V))",
                        model->source);
  gcc_graph *g; /* the weights stay the model's: bind_weights reads them in place */
  GCC_TRY(gcc_graph_clone_borrowing_params(model, &g, d));
  const char *in_name = model->values[in].name;
  gcc_status s = gcc_graph_prune(g, &pred, 1, d);
  if (s == GCC_OK) {
    int drop[2] = {g->training.inline_inputs, g->training.inline_targets};
    for (int i = 0; i < 2; i++)
      if (drop[i] >= 0)
        g->values[drop[i]].kind = GCC_VALUE_ACTIVATION;
    g->training.present = 0;
    g->training.inline_inputs = g->training.inline_targets = -1;
    g->n_inputs = 0;
    g->n_outputs = 0;
    s = gcc_graph_add_input(g, gcc_graph_find(g, in_name));
    if (s == GCC_OK)
      s = gcc_graph_add_output(g, gcc_graph_find(g, model->values[pred].name));
  }
  if (s == GCC_OK)
    s = gcc_graph_link(g, d);
  if (s == GCC_OK)
    s = gcc_graph_toposort(g, d);
  if (s != GCC_OK) {
    gcc_graph_free(g);
    return s;
  }
  *out = g;
  return GCC_OK;
}

/* Parameters and constants: the model's initializers, read in place. */
static void *bind_weights(void *user, const gcc_graph *g, int v) {
  const gcc_graph *m = user;
  int mv = gcc_graph_find(m, g->values[v].name);
  if (mv < 0 || m->values[mv].kind != GCC_VALUE_PARAM)
    return NULL;
  return m->values[mv].data;
}

int64_t gcc_generate_pick(const float *logits, int64_t V, double temperature, int64_t top_k,
                          double u, double *p) {
  for (int64_t i = 0; i < V; i++)
    p[i] = (double)logits[i] / temperature;
  double floor_v = -INFINITY; /* torch.topk's k-th value: below it, -inf */
  if (top_k > 0 && top_k < V) {
    /* the k-th largest by partial selection on a copy at p[V ..] */
    double *c = p + V;
    memcpy(c, p, (size_t)V * sizeof *c);
    for (int64_t k = 0; k < top_k; k++) {
      int64_t best = k;
      for (int64_t j = k + 1; j < V; j++)
        if (c[j] > c[best])
          best = j;
      double tmp = c[k];
      c[k] = c[best];
      c[best] = tmp;
    }
    floor_v = c[top_k - 1];
  }
  double mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < V; i++)
    if (p[i] >= floor_v && p[i] > mx)
      mx = p[i];
  for (int64_t i = 0; i < V; i++) {
    p[i] = p[i] >= floor_v ? exp(p[i] - mx) : 0.0;
    sum += p[i];
  }
  double target = u * sum, acc = 0;
  int64_t last = 0;
  for (int64_t i = 0; i < V; i++) {
    if (p[i] <= 0)
      continue;
    acc += p[i];
    last = i;
    if (acc > target)
      return i;
  }
  return last; /* rounding: the last token with probability */
}

/* Uniform in [0, 1) with 53 bits. */
static double uniform53(gcc_rng *r) {
  uint64_t hi = gcc_rng_u32(r) >> 5, lo = gcc_rng_u32(r) >> 6;
  return ((double)hi * 67108864.0 + (double)lo) * (1.0 / 9007199254740992.0);
}

/* Both plans of sampling: inference at batch 1 on the CPU. */
static void cpu_plan_options(const gcc_generate_options *o, gcc_options *po, gcc_plan_config *cfg) {
  memset(po, 0, sizeof *po);
  po->mode = GCC_MODE_EVAL;
  po->batch_size = 1;
  po->device = GCC_DEV_CPU;
  po->device_explicit = 1;
  po->n_cuda_devices = 1;
  memset(cfg, 0, sizeof *cfg);
  cfg->threads = o->threads > 0 ? o->threads : 1;
  cfg->readback_ring = 1;
}

/* The decoder (KV cache) of the model and its buffers: the caches of every
 * attention [H, T - 1, D] and the one-position inputs. */
typedef struct decoder {
  gcc_kv_decoder kv;
  gcc_plan *p;
  int64_t T, V, cached; /* positions 0 .. cached - 1 are in the caches */
  float **cache;        /* 2 per layer: k, v */
  float *mask;          /* [T] */
  int64_t id, pos;
} decoder;

static void decoder_free(decoder *dc) {
  if (!dc)
    return;
  for (int i = 0; dc->cache && i < 2 * dc->kv.n_layers; i++)
    free(dc->cache[i]);
  free(dc->cache);
  free(dc->mask);
  gcc_plan_free(dc->p);
  gcc_kv_decoder_free(&dc->kv);
  free(dc);
}

/* The decoder of `g` compiled with `po`/`cfg`, or NULL with the reason in
 * `why` (then sampling runs the window for every token). */
static decoder *decoder_new(const gcc_graph *g, const gcc_graph *model, int64_t T, int64_t V,
                            const gcc_options *po, const gcc_plan_config *cfg, char *why,
                            size_t why_cap) {
  gcc_diag kd;
  memset(&kd, 0, sizeof kd);
  decoder *dc = calloc(1, sizeof *dc);
  gcc_status s = dc ? gcc_kv_decoder_build(g, T, &dc->kv, &kd) : GCC_ERR_OUT_OF_MEMORY;
  if (s == GCC_OK)
    s = gcc_plan_compile(dc->kv.g, po, cfg, bind_weights, (void *)model, &dc->p, &kd);
  if (s == GCC_OK) {
    dc->T = T;
    dc->V = V;
    dc->cache = calloc((size_t)(2 * dc->kv.n_layers), sizeof *dc->cache);
    dc->mask = malloc((size_t)T * sizeof *dc->mask);
    s = dc->cache && dc->mask ? GCC_OK : GCC_ERR_OUT_OF_MEMORY;
    for (int i = 0; s == GCC_OK && i < dc->kv.n_layers; i++) {
      const gcc_kv_layer *l = &dc->kv.layer[i];
      dc->cache[2 * i] = calloc((size_t)(l->heads * (T - 1) * l->dk), sizeof(float));
      dc->cache[2 * i + 1] = calloc((size_t)(l->heads * (T - 1) * l->dv), sizeof(float));
      if (!dc->cache[2 * i] || !dc->cache[2 * i + 1])
        s = GCC_ERR_OUT_OF_MEMORY;
    }
  }
  if (s != GCC_OK) {
    snprintf(why, why_cap, "%s",
             s == GCC_ERR_OUT_OF_MEMORY && !kd.msg[0] ? "out of memory" : kd.msg);
    decoder_free(dc);
    return NULL;
  }
  return dc;
}

/* Runs the decoder on token `id` at position `pos` (= dc->cached), stores
 * its keys and values at slot pos, and returns its logits (V). */
static const float *decoder_step(decoder *dc, int64_t id, int64_t pos, gcc_diag *d) {
  gcc_plan *p = dc->p;
  dc->id = id;
  dc->pos = pos;
  for (int64_t j = 0; j < dc->T; j++) /* the cached positions and the new one (the last slot) */
    dc->mask[j] = j < pos || j == dc->T - 1 ? 0.0f : -INFINITY;
  gcc_status s = gcc_plan_bind_input(p, dc->kv.g->values[dc->kv.g->inputs[0]].name, &dc->id, d);
  if (s == GCC_OK)
    s = gcc_plan_bind_input(p, GCC_KV_POS_INPUT, &dc->pos, d);
  if (s == GCC_OK)
    s = gcc_plan_bind_input(p, GCC_KV_MASK_INPUT, dc->mask, d);
  for (int i = 0; s == GCC_OK && i < dc->kv.n_layers; i++) {
    s = gcc_plan_bind_input(p, dc->kv.layer[i].k_cache, dc->cache[2 * i], d);
    if (s == GCC_OK)
      s = gcc_plan_bind_input(p, dc->kv.layer[i].v_cache, dc->cache[2 * i + 1], d);
  }
  if (s == GCC_OK)
    s = gcc_plan_run(p, 0, d);
  if (s == GCC_OK)
    s = gcc_plan_sync(p, d);
  for (int i = 0; s == GCC_OK && i < dc->kv.n_layers && pos < dc->T - 1; i++) {
    const gcc_kv_layer *l = &dc->kv.layer[i];
    for (int kk = 0; kk < 2 && s == GCC_OK; kk++) {
      const gcc_tensor *t = gcc_plan_host_tensor(p, kk ? l->v_new : l->k_new, d);
      if (!t) {
        s = d->status ? d->status : GCC_ERR_INTERNAL;
        break;
      }
      int64_t D = kk ? l->dv : l->dk;
      for (int64_t h = 0; h < l->heads; h++)
        memcpy(dc->cache[2 * i + kk] + (h * (dc->T - 1) + pos) * D, (const float *)t->data + h * D,
               (size_t)D * sizeof(float));
    }
  }
  const gcc_graph *dg = gcc_plan_graph(p);
  const gcc_tensor *lt =
      s == GCC_OK ? gcc_plan_host_tensor(p, dg->values[dg->outputs[0]].name, d) : NULL;
  if (s == GCC_OK && !lt)
    gcc_diag_set(d, GCC_ERR_INTERNAL, "the decoder's logits are not in its plan");
  if (!lt)
    return NULL;
  dc->cached = pos + 1;
  return lt->data;
}

/* Writes token `next`: its vocabulary byte, or "<id> " */
static gcc_status emit_token(const gcc_generate_options *o, const gcc_training *t, int has_vocab,
                             int64_t next, gcc_diag *d) {
  if (has_vocab && next < t->n_vocab) {
    char c = (char)t->vocab[next];
    return o->emit(o->user, &c, 1, d);
  }
  char buf[32];
  int m = snprintf(buf, sizeof buf, "%" PRId64 " ", next);
  return o->emit(o->user, buf, (size_t)m, d);
}

/* The last tokens of the sequence: buf holds those at positions base ..
 * len - 1 (cap slots, cap >= 2T: the last T are always there). */
typedef struct token_window {
  int64_t *buf, cap, base, len;
} token_window;

static void window_push(token_window *w, int64_t id) {
  if (w->len - w->base == w->cap) { /* keep the newer half */
    int64_t keep = w->cap / 2;
    memmove(w->buf, w->buf + (w->cap - keep), (size_t)keep * sizeof *w->buf);
    w->base += w->cap - keep;
  }
  w->buf[w->len - w->base] = id;
  w->len++;
}

/* The token at position i (base <= i < len). */
static int64_t window_at(const token_window *w, int64_t i) {
  return w->buf[i - w->base];
}

/* gcc_generate_options.report: how the n_drawn tokens were computed
 * (kv: the decoder was made; n_cached of them from its logits; len0 the
 * prompt's tokens; why: the reason for no decoder). */
static void write_report(const gcc_generate_options *o, int kv, int64_t n_cached, int64_t n_drawn,
                         int64_t len0, int64_t T, const char *why) {
  if (n_drawn == 0) /* --generate 0: the prompt is echoed, no logits computed */
    snprintf(o->report, o->report_cap, "no token drawn");
  else if (!kv)
    snprintf(o->report, o->report_cap, "the whole window per token; %s", why);
  else if (n_cached == n_drawn)
    snprintf(o->report, o->report_cap, "KV cache (one position per run)");
  else if (n_cached > 0)
    snprintf(o->report, o->report_cap,
             "KV cache (one position per run) for %" PRId64 " token%s, then the whole window "
             "for %" PRId64 " (the context passed the block size %" PRId64 ")",
             n_cached, n_cached == 1 ? "" : "s", n_drawn - n_cached, T);
  else
    snprintf(o->report, o->report_cap,
             "the whole window per token: the prompt's %" PRId64 " tokens pass the block size "
             "%" PRId64 " (no KV cache)",
             len0, T);
}

gcc_status gcc_generate(const gcc_graph *model, const gcc_generate_options *o, gcc_diag *d) {
  if (!model || !o || !o->emit)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "gcc_generate: NULL argument");
  if (!(o->temperature > 0) || !isfinite(o->temperature))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--temperature %g: expected a number > 0",
                        o->temperature);
  if (o->top_k < 0 || o->n_new < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--top-k and --generate must be >= 0 (got %" PRId64 " and %" PRId64 ")",
                        o->top_k, o->n_new);
  gcc_graph *g;
  GCC_TRY(logits_graph(model, &g, d));
  /* the shapes at batch 1 */
  gcc_graph *probe = NULL;
  gcc_status s = gcc_graph_clone_borrowing_params(g, &probe, d);
  if (s == GCC_OK)
    s = gcc_graph_bind_batch(probe, 1, d);
  if (s == GCC_OK)
    s = gcc_infer_shapes(probe, d);
  int64_t T = 0, V = 0;
  int one_hot = 0;
  if (s == GCC_OK) {
    const gcc_value *in = &probe->values[probe->inputs[0]];
    const gcc_value *pv = &probe->values[probe->outputs[0]];
    char si[128], sp[128];
    gcc_shape_str(&in->shape, si, sizeof si);
    gcc_shape_str(&pv->shape, sp, sizeof sp);
    if (pv->shape.ndim == 3 && pv->dtype == GCC_DT_FLOAT32) {
      T = pv->shape.dims[1];
      V = pv->shape.dims[2];
    }
    int ids = in->dtype == GCC_DT_INT64 && in->shape.ndim == 2 && in->shape.dims[1] == T;
    one_hot = in->dtype == GCC_DT_FLOAT32 && in->shape.ndim == 3 && in->shape.dims[1] == T &&
              in->shape.dims[2] == V;
    if (T < 1 || V < 1 || (!ids && !one_hot))
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                       "%s: --generate needs a language model: input '%s' int64 ids (B, T) or "
                       "float32 one-hot rows (B, T, V) and prediction '%s' logits (B, T, V); got "
                       "%s %s and %s %s at batch 1",
                       model->source, in->name, pv->name, gcc_dtype_name(in->dtype), si,
                       gcc_dtype_name(pv->dtype), sp);
  }
  gcc_graph_free(probe);
  const gcc_training *t = &model->training;
  int has_vocab = t->n_vocab > 0;
  if (s == GCC_OK && has_vocab && t->n_vocab > V)
    s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                     "%s: training.vocab has %d bytes, more than the %" PRId64 " logits",
                     model->source, t->n_vocab, V);
  const char *prompt = o->prompt ? o->prompt : "";
  size_t plen = strlen(prompt);
  if (s == GCC_OK && plen > 0 && !has_vocab)
    s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                     "--prompt: %s has no vocabulary (training.vocab: a model trained on "
                     "--dataset text) to encode it with",
                     model->source);
  /* the sequence: the prompt's ids, then the samples; only its last T are
   * ever read, so it is kept in 2T slots (any --generate N, any prompt) */
  int id_of[256];
  for (int b = 0; b < 256; b++)
    id_of[b] = -1;
  for (int i = 0; i < t->n_vocab; i++)
    id_of[t->vocab[i]] = i;
  for (size_t i = 0; s == GCC_OK && i < plen; i++)
    if (id_of[(unsigned char)prompt[i]] < 0)
      s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                       "--prompt: byte %zu (0x%02x) is not in the model's vocabulary (%d bytes "
                       "of its training text)",
                       i, (unsigned char)prompt[i], t->n_vocab);
  token_window seq = {0};
  if (s == GCC_OK && !(seq.buf = malloc((size_t)(2 * T) * sizeof *seq.buf)))
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%" PRId64 " tokens)", 2 * T);
  seq.cap = 2 * T;
  for (size_t i = 0; s == GCC_OK && i < plen; i++)
    window_push(&seq, id_of[(unsigned char)prompt[i]]);
  if (s == GCC_OK && seq.len == 0) /* sample.py's start = "\n" */
    window_push(&seq, has_vocab && id_of['\n'] >= 0 ? id_of['\n'] : 0);
  if (s == GCC_OK && plen > 0)
    s = o->emit(o->user, prompt, plen, d);
  else if (s == GCC_OK && has_vocab) {
    char c = (char)t->vocab[seq.buf[0]];
    s = o->emit(o->user, &c, 1, d);
  }
  const int64_t len0 = seq.len;
  int64_t n_cached = 0; /* tokens drawn from the decoder's logits */
  /* the plan: batch 1 on the CPU */
  gcc_plan *p = NULL;
  void *x = NULL;
  double *scratch = NULL;
  gcc_options po;
  gcc_plan_config cfg;
  cpu_plan_options(o, &po, &cfg);
  if (s == GCC_OK)
    s = gcc_plan_compile(g, &po, &cfg, bind_weights, (void *)model, &p, d);
  if (s == GCC_OK) {
    x = calloc((size_t)(one_hot ? T * V : T), one_hot ? sizeof(float) : sizeof(int64_t));
    scratch = malloc((size_t)(2 * V) * sizeof *scratch);
    if (!x || !scratch)
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (generation buffers)");
  }
  /* the decoder (KV cache), checked against the window at the first token */
  decoder *dc = NULL;
  char why[700] = "";
  if (s == GCC_OK && !one_hot && !o->no_kv_cache) {
    dc = decoder_new(g, model, T, V, &po, &cfg, why, sizeof why);
  } else if (s == GCC_OK) {
    snprintf(why, sizeof why, "%s", one_hot ? "no KV cache: one-hot input rows" : "--no-kv-cache");
  }
  int checked = 0;
  gcc_rng rng;
  gcc_rng_seed(&rng, o->seed, GCC_GENERATE_STREAM);
  const char *in_name = g->values[g->inputs[0]].name, *out_name = g->values[g->outputs[0]].name;
  for (int64_t k = 0; s == GCC_OK && k < o->n_new; k++) {
    /* the decoder while the context fits the window: the positions not
     * cached yet (the prompt's at the first token), one run each */
    const float *drow = NULL;
    const int64_t len = seq.len;
    while (dc && len <= T && dc->cached < len && s == GCC_OK) {
      drow = decoder_step(dc, window_at(&seq, dc->cached), dc->cached, d);
      if (!drow)
        s = d->status;
    }
    if (s != GCC_OK)
      break;
    const float *row = drow;
    if (!(drow && checked)) { /* the window: the first token's check, or past T */
      /* the last T tokens at positions 0 .. n-1; the rest token 0 */
      int64_t n = len < T ? len : T;
      const int64_t *ctx = &seq.buf[len - n - seq.base];
      if (one_hot) {
        float *h = x;
        memset(h, 0, (size_t)(T * V) * sizeof *h);
        for (int64_t i = 0; i < T; i++)
          h[i * V + (i < n ? ctx[i] : 0)] = 1.0f;
      } else {
        int64_t *ids = x;
        for (int64_t i = 0; i < T; i++)
          ids[i] = i < n ? ctx[i] : 0;
      }
      s = gcc_plan_bind_input(p, in_name, x, d);
      if (s == GCC_OK)
        s = gcc_plan_run(p, 0, d);
      if (s == GCC_OK)
        s = gcc_plan_sync(p, d);
      const gcc_tensor *lt = s == GCC_OK ? gcc_plan_host_tensor(p, out_name, d) : NULL;
      if (s == GCC_OK && !lt)
        s = gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: the logits '%s' are not in the plan",
                         model->source, out_name);
      if (s != GCC_OK)
        break;
      row = (const float *)lt->data + (n - 1) * V;
      if (drow) {
        /* the first token from the decoder: its logits must be the window's
         * up to float32 rounding (sums of another length and order: the
         * GEMMs of one row, the attention over T slots); a model whose other
         * nodes mix positions gives different ones and keeps the window */
        double worst = 0, scale = 1;
        for (int64_t v = 0; v < V; v++) {
          double e = fabs((double)drow[v] - (double)row[v]);
          worst = e > worst ? e : worst;
          scale = fabs((double)row[v]) > scale ? fabs((double)row[v]) : scale;
        }
        checked = 1;
        if (!(worst <= 1e-3 * scale)) {
          snprintf(why, sizeof why,
                   "no KV cache: the decoder's logits differ from the window's by %.3g (of %.3g): "
                   "a node mixes positions",
                   worst, scale);
          decoder_free(dc);
          dc = NULL;
        }
      }
    }
    if (o->on_logits)
      o->on_logits(o->user, row, V);
    /* with a vocabulary, ids past it never occurred in training: not drawn */
    int64_t next = gcc_generate_pick(row, has_vocab ? t->n_vocab : V, o->temperature, o->top_k,
                                     uniform53(&rng), scratch);
    n_cached += drow != NULL;
    window_push(&seq, next);
    s = emit_token(o, t, has_vocab, next, d);
  }
  if (o->report)
    write_report(o, dc != NULL, n_cached, seq.len - len0, len0, T, why);
  decoder_free(dc);
  free(scratch);
  free(x);
  free(seq.buf);
  gcc_plan_free(p);
  gcc_graph_free(g);
  return s;
}
