/*
 * generate.c - sampling from a language model (generate.h).
 */
#include "deploy/generate.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  gcc_graph *g;
  GCC_TRY(gcc_graph_clone(model, &g, d));
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
  gcc_status s = gcc_graph_clone(g, &probe, d);
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
  /* the sequence: the prompt's ids, then the samples */
  int64_t cap = (int64_t)plen + o->n_new + 1, len = 0;
  int64_t *seq = s == GCC_OK ? malloc((size_t)cap * sizeof *seq) : NULL;
  int id_of[256];
  for (int b = 0; b < 256; b++)
    id_of[b] = -1;
  for (int i = 0; i < t->n_vocab; i++)
    id_of[t->vocab[i]] = i;
  if (s == GCC_OK && !seq)
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%" PRId64 " tokens)", cap);
  for (size_t i = 0; s == GCC_OK && i < plen; i++) {
    int id = id_of[(unsigned char)prompt[i]];
    if (id < 0)
      s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                       "--prompt: byte %zu (0x%02x) is not in the model's vocabulary (%d bytes "
                       "of its training text)",
                       i, (unsigned char)prompt[i], t->n_vocab);
    else
      seq[len++] = id;
  }
  if (s == GCC_OK && len == 0) /* sample.py's start = "\n" */
    seq[len++] = has_vocab && id_of['\n'] >= 0 ? id_of['\n'] : 0;
  if (s == GCC_OK && plen > 0)
    s = o->emit(o->user, prompt, plen, d);
  else if (s == GCC_OK && has_vocab) {
    char c = (char)t->vocab[seq[0]];
    s = o->emit(o->user, &c, 1, d);
  }
  /* the plan: batch 1 on the CPU */
  gcc_plan *p = NULL;
  void *x = NULL;
  double *scratch = NULL;
  if (s == GCC_OK) {
    gcc_options po = {0};
    po.mode = GCC_MODE_EVAL;
    po.batch_size = 1;
    po.device = GCC_DEV_CPU;
    po.device_explicit = 1;
    po.n_cuda_devices = 1;
    gcc_plan_config cfg = {0};
    cfg.threads = o->threads > 0 ? o->threads : 1;
    cfg.readback_ring = 1;
    s = gcc_plan_compile(g, &po, &cfg, bind_weights, (void *)model, &p, d);
  }
  if (s == GCC_OK) {
    x = calloc((size_t)(one_hot ? T * V : T), one_hot ? sizeof(float) : sizeof(int64_t));
    scratch = malloc((size_t)(2 * V) * sizeof *scratch);
    if (!x || !scratch)
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (generation buffers)");
  }
  gcc_rng rng;
  gcc_rng_seed(&rng, o->seed, GCC_GENERATE_STREAM);
  const char *in_name = g->values[g->inputs[0]].name, *out_name = g->values[g->outputs[0]].name;
  for (int64_t k = 0; s == GCC_OK && k < o->n_new; k++) {
    /* the last T tokens at positions 0 .. n-1; the rest token 0 */
    int64_t n = len < T ? len : T;
    const int64_t *ctx = seq + len - n;
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
    const float *row = (const float *)lt->data + (n - 1) * V;
    /* with a vocabulary, ids past it never occurred in training: not drawn */
    int64_t next = gcc_generate_pick(row, has_vocab ? t->n_vocab : V, o->temperature, o->top_k,
                                     uniform53(&rng), scratch);
    seq[len++] = next;
    if (has_vocab && next < t->n_vocab) {
      char c = (char)t->vocab[next];
      s = o->emit(o->user, &c, 1, d);
    } else {
      char buf[32];
      int m = snprintf(buf, sizeof buf, "%" PRId64 " ", next);
      s = o->emit(o->user, buf, (size_t)m, d);
    }
  }
  free(scratch);
  free(x);
  free(seq);
  gcc_plan_free(p);
  gcc_graph_free(g);
  return s;
}
