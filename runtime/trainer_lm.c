/*
 * trainer_lm.c - token windows and estimate_loss for language models
 * (trainer_lm.h).
 */
#include "runtime/trainer_lm.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/tokens.h"
#include "graph/ops.h"
#include "graph/rng.h"
#include "runtime/comm.h"

struct gcc_lm_source {
  gcc_tokens tok;
  int64_t B, T, V; /* batch, block size, vocabulary (the logits' last dim) */
  int64_t K;       /* --grad-accum: micro-batches of B windows per training batch */
  int one_hot;     /* the input takes float32 one-hot rows (B, T, V) */
  int64_t nb;      /* batches per epoch */
  uint64_t seed;
  int64_t *offsets; /* (B) */
  int64_t *ids;     /* (K * B, T) input ids (evaluation: the first B rows) */
  int64_t *targets; /* (K * B, T) */
  float *hot;       /* (K * B, T, V) with one_hot */
};

int gcc_lm_dataset(const char *dataset) {
  return dataset && (strcmp(dataset, "text") == 0 || strcmp(dataset, "tokens") == 0);
}

void gcc_lm_source_free(gcc_lm_source *lm) {
  if (!lm)
    return;
  gcc_tokens_close(&lm->tok);
  free(lm->offsets);
  free(lm->ids);
  free(lm->targets);
  free(lm->hot);
  free(lm);
}

int64_t gcc_lm_batches_per_epoch(const gcc_lm_source *lm) {
  return lm->nb;
}

size_t gcc_lm_x_row(const gcc_lm_source *lm) {
  return (size_t)(lm->T *
                  (lm->one_hot ? lm->V * (int64_t)sizeof(float) : (int64_t)sizeof(int64_t)));
}

size_t gcc_lm_y_row(const gcc_lm_source *lm) {
  return (size_t)lm->T * sizeof(int64_t);
}

int64_t gcc_lm_block_size(const gcc_lm_source *lm) {
  return lm->T;
}

/* The shapes of the spec's input, target and prediction at batch 1. */
static gcc_status lm_shapes(const gcc_graph *m, gcc_value *in, gcc_value *tg, gcc_value *pred,
                            gcc_diag *d) {
  gcc_graph *g = NULL;
  GCC_TRY(gcc_graph_clone_borrowing_params(m, &g, d));
  gcc_status s = gcc_graph_bind_batch(g, 1, d);
  if (s == GCC_OK)
    s = gcc_infer_shapes(g, d);
  if (s == GCC_OK) {
    *in = g->values[gcc_graph_find(g, m->training.input)];
    *tg = g->values[gcc_graph_find(g, m->training.target)];
    *pred = g->values[gcc_graph_find(g, m->training.prediction)];
    /* the copies' pointers go with the clone: the names are the model's */
    in->name = m->training.input;
    tg->name = m->training.target;
    pred->name = m->training.prediction;
    in->data = tg->data = pred->data = NULL;
    in->consumers = tg->consumers = pred->consumers = NULL;
  }
  gcc_graph_free(g);
  return s;
}

gcc_status gcc_lm_source_open(const gcc_graph *m, const gcc_train_config *cfg, gcc_lm_source **out,
                              gcc_diag *d) {
  *out = NULL;
  const gcc_training *t = &m->training;
  if (!t->prediction)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: --dataset %s needs training.prediction (the logits (B, T, V))",
                        m->source, t->dataset);
  gcc_value in, tg, pred;
  GCC_TRY(lm_shapes(m, &in, &tg, &pred, d));
  char si[128], st[128], sp[128];
  gcc_shape_str(&in.shape, si, sizeof si);
  gcc_shape_str(&tg.shape, st, sizeof st);
  gcc_shape_str(&pred.shape, sp, sizeof sp);
  if (pred.shape.ndim != 3 || pred.dtype != GCC_DT_FLOAT32)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: --dataset %s: the prediction '%s' is %s %s at batch 1; a language "
                        "model's is float32 logits (B, T, V)",
                        m->source, t->dataset, pred.name, gcc_dtype_name(pred.dtype), sp);
  int64_t T = pred.shape.dims[1], V = pred.shape.dims[2];
  int ids = in.dtype == GCC_DT_INT64 && in.shape.ndim == 2 && in.shape.dims[1] == T;
  int hot = in.dtype == GCC_DT_FLOAT32 && in.shape.ndim == 3 && in.shape.dims[1] == T &&
            in.shape.dims[2] == V;
  if (!ids && !hot)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: --dataset %s: input '%s' is %s %s at batch 1; for logits %s it must "
                        "take int64 token ids (B, %" PRId64 ") or float32 one-hot rows (B, %" PRId64
                        ", %" PRId64 ")",
                        m->source, t->dataset, in.name, gcc_dtype_name(in.dtype), si, sp, T, T, V);
  if (tg.dtype != GCC_DT_INT64 || tg.shape.ndim != 2 || tg.shape.dims[1] != T)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: --dataset %s: target '%s' is %s %s at batch 1; it must take int64 "
                        "next tokens (B, %" PRId64 ")",
                        m->source, t->dataset, tg.name, gcc_dtype_name(tg.dtype), st, T);
  if (cfg->block_size > 0 && cfg->block_size != T)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--block-size %" PRId64 ": the model '%s' takes windows of %" PRId64
                        " tokens (its input '%s' is %s at batch 1)",
                        cfg->block_size, m->source, T, in.name, si);
  gcc_lm_source *lm = calloc(1, sizeof *lm);
  if (!lm)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (token source)");
  gcc_status s = strcmp(t->dataset, "text") == 0 ? gcc_tokens_open_text(cfg->data_dir, &lm->tok, d)
                                                 : gcc_tokens_open_bin(cfg->data_dir, &lm->tok, d);
  if (s == GCC_OK && lm->tok.kind == GCC_TOKENS_TEXT) {
    if (lm->tok.vocab_size > V)
      s = gcc_diag_set(d, GCC_ERR_SHAPE,
                       "%s: %d distinct bytes (the vocabulary of --dataset text), but the model "
                       "'%s' has %" PRId64 " logits per token (prediction '%s' %s)",
                       cfg->data_dir, lm->tok.vocab_size, m->source, V, pred.name, sp);
    else if (t->n_vocab > 0 && (t->n_vocab != lm->tok.vocab_size ||
                                memcmp(t->vocab, lm->tok.vocab, (size_t)t->n_vocab) != 0))
      s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                       "%s: its vocabulary (%d distinct bytes) is not the one the model '%s' was "
                       "trained with (%d bytes, training.vocab): the token ids would mean other "
                       "characters",
                       cfg->data_dir, lm->tok.vocab_size, m->source, t->n_vocab);
  }
  if (s == GCC_OK) /* every id of a .bin data set, before the first step */
    s = gcc_tokens_check_ids(&lm->tok, V, d);
  lm->B = cfg->batch_size;
  lm->K = cfg->grad_accum > 1 ? cfg->grad_accum : 1;
  lm->T = T;
  lm->V = V;
  lm->one_hot = hot;
  lm->seed = cfg->seed;
  int64_t n = lm->tok.n[GCC_SPLIT_TRAIN];
  lm->nb = n / (lm->K * lm->B * T) > 0 ? n / (lm->K * lm->B * T) : 1;
  for (int k = 0; k < 2 && s == GCC_OK; k++)
    if (lm->tok.n[k] < T + 1)
      s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                       "%s: the %s split has %" PRId64 " tokens; windows of the model's block "
                       "size %" PRId64 " need %" PRId64,
                       lm->tok.path[k], k == 0 ? "training" : "validation", lm->tok.n[k], T, T + 1);
  if (s == GCC_OK) {
    lm->offsets = malloc((size_t)lm->B * sizeof *lm->offsets);
    int64_t rows = lm->K * lm->B;
    lm->ids = malloc((size_t)(rows * T) * sizeof *lm->ids);
    lm->targets = malloc((size_t)(rows * T) * sizeof *lm->targets);
    lm->hot = hot ? calloc((size_t)(rows * T * V), sizeof *lm->hot) : NULL;
    if (!lm->offsets || !lm->ids || !lm->targets || (hot && !lm->hot))
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                       "out of memory (token batches of %" PRId64 "x%" PRId64 ")", lm->B, T);
  }
  if (s != GCC_OK) {
    gcc_lm_source_free(lm);
    return s;
  }
  *out = lm;
  return GCC_OK;
}

/* B windows of `split` from `rng` into rows [first, first + B) of
 * ids/targets (and of the one-hot rows). */
static gcc_status cut_batch(gcc_lm_source *lm, int split, gcc_rng *rng, int64_t first,
                            gcc_diag *d) {
  int64_t *ids = lm->ids + first * lm->T, *targets = lm->targets + first * lm->T;
  GCC_TRY(gcc_tokens_offsets(&lm->tok, split, lm->B, lm->T, rng, lm->offsets, d));
  GCC_TRY(gcc_tokens_window(&lm->tok, split, lm->offsets, lm->B, lm->T, lm->V, ids, targets, d));
  if (lm->one_hot) {
    int64_t rows = lm->B * lm->T;
    float *hot = lm->hot + first * lm->T * lm->V;
    memset(hot, 0, (size_t)(rows * lm->V) * sizeof *hot);
    for (int64_t r = 0; r < rows; r++)
      hot[r * lm->V + ids[r]] = 1.0f;
  }
  return GCC_OK;
}

gcc_status gcc_lm_train_batch(gcc_lm_source *lm, int64_t index, const void **x, const void **y,
                              int64_t *rows, gcc_diag *d) {
  for (int64_t k = 0; k < lm->K; k++) { /* micro-batch k: (seed, index * K + k) */
    gcc_rng rng;
    gcc_rng_seed(&rng, lm->seed ^ GCC_TOKENS_TRAIN_SALT, (uint64_t)(index * lm->K + k));
    GCC_TRY(cut_batch(lm, GCC_SPLIT_TRAIN, &rng, k * lm->B, d));
  }
  *x = lm->one_hot ? (const void *)lm->hot : (const void *)lm->ids;
  *y = lm->targets;
  *rows = lm->K * lm->B;
  return GCC_OK;
}

gcc_status gcc_lm_estimate_loss(gcc_lm_source *lm, gcc_session *s, const gcc_train_config *cfg,
                                int64_t step, double *train_loss, double *val_loss, gcc_diag *d) {
  int64_t K = cfg->eval_batches > 0 ? cfg->eval_batches : 1;
  int dp = cfg->comm && cfg->comm->size > 1;
  double sums[4] = {0, 0, 0, 0}; /* per split: loss * rows, rows */
  for (int split = 0; split < 2; split++) {
    gcc_rng rng;
    gcc_rng_seed(&rng, lm->seed ^ GCC_TOKENS_EVAL_SALT, (uint64_t)step * 2u + (uint64_t)split);
    for (int64_t k = 0; k < K; k++) {
      GCC_TRY(cut_batch(lm, split, &rng, 0, d));
      int64_t first = 0, rows = lm->B;
      if (dp)
        gcc_comm_share(lm->B, cfg->comm->rank, cfg->comm->size, &first, &rows);
      if (rows <= 0)
        continue;
      const char *x = lm->one_hot ? (const char *)lm->hot : (const char *)lm->ids;
      float loss;
      int64_t ok;
      GCC_TRY(gcc_session_eval_batch(s, x + (size_t)first * gcc_lm_x_row(lm),
                                     lm->targets + first * lm->T, rows, &loss, &ok, NULL, d));
      sums[split * 2] += (double)loss * (double)rows; /* batch means -> the mean */
      sums[split * 2 + 1] += (double)rows;
    }
  }
  if (dp)
    GCC_TRY(cfg->comm->allreduce_f64(cfg->comm, sums, 4, d));
  *train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
  *val_loss = sums[3] > 0 ? sums[2] / sums[3] : 0;
  if (!isfinite(*train_loss) || !isfinite(*val_loss))
    return gcc_diag_set(d, GCC_ERR_NUMERIC,
                        "the evaluation loss is %f (train) / %f (val) after optimizer step %" PRId64
                        " (learning rate too high?)",
                        *train_loss, *val_loss, step);
  return GCC_OK;
}
