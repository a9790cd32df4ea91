/*
 * trainer.c - the training loop (trainer.h): data sources, epochs of
 * asynchronous steps with their losses collected per log interval,
 * evaluation after each epoch, the progress bar, profiling events and the
 * report.
 */
#include "runtime/trainer.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "graph/ops.h"
#include "graph/recipe.h"
#include "graph/rng.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/trainer_lm.h"
#include "datasets/dataloader.h"
#include "datasets/dataset.h"
#include "datasets/npy.h"

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One batch from either source: input rows and targets. */
typedef struct batch {
  const void *x, *y;
  int64_t rows;
} batch;

/* ---- data sources ----------------------------------------------------- */

typedef struct source {
  int is_inline;
  /* mnist */
  gcc_dataset train, test;
  gcc_dataloader *train_dl, *test_dl;
  /* rows (is_inline): float32 inputs and float32 or int64 targets, as the
   * target input takes, shuffled by permutation into batch buffers; the
   * model's inline data (evaluated on the same rows), or float .npy arrays
   * with their own test set (has_test). x, y, n, batch_size: the set and
   * batch size of the current pass (training or evaluation); xw, yw are
   * values per sample, xb, yb bytes per sample */
  const char *x, *y;
  int64_t n, xw, yw, xb, yb, batch_size, pos;
  const char *train_x, *train_y, *test_x, *test_y;
  int64_t train_n, test_n, train_batch, eval_batch;
  int has_test;
  void *own[4];    /* .npy rows: the arrays (train x, y, test x, y) */
  int int_targets; /* the targets are int64 class indices */
  uint32_t *perm;
  char *bx, *by;
  uint64_t seed;
  int eval_mode;
  /* --profile: waits for a batch on the trainer's thread */
  gcc_prof_track *track;
  int site_wait[2]; /* train, eval */
  int is_cifar;
  /* --show-predictions: the first n_show test samples' labels and argmax */
  int64_t n_show, n_shown;
  int64_t *show_truth, *show_pred;
  size_t x_row, y_row; /* bytes of one sample's input and target in a batch */
  /* the last evaluation's confusion counts, (n_classes, n_classes): row the
   * label, column the argmax; NULL until a classifier was evaluated */
  int64_t n_classes, *confusion;
  /* token data (runtime/trainer_lm.h): the source, and the epoch and batch
   * of the next training batch */
  gcc_lm_source *lm;
  int64_t lm_epoch, lm_pos;
} source;

static void source_free(source *src) {
  for (int i = 0; i < 4; i++)
    free(src->own[i]);
  gcc_dataloader_destroy(src->train_dl);
  gcc_dataloader_destroy(src->test_dl);
  gcc_dataset_free(&src->train);
  gcc_dataset_free(&src->test);
  free(src->perm);
  free(src->bx);
  free(src->by);
  free(src->show_truth);
  free(src->show_pred);
  free(src->confusion);
  gcc_lm_source_free(src->lm);
}

static int64_t per_sample(const gcc_value *v) {
  int64_t n = 1;
  for (int i = 1; i < v->shape.ndim; i++)
    n *= v->shape.dims[i];
  return n;
}

/* ---- --dataset npy as rows ------------------------------------------------ */

/* Whether the per-sample shape of `data` (dims 1..) is the model value's:
 * the same dims, or (N, H, W) data for an (N, 1, H, W) input. */
static int sample_fits(const gcc_shape *data, const gcc_shape *model) {
  if (data->ndim == model->ndim) {
    for (int i = 1; i < data->ndim; i++)
      if (data->dims[i] != model->dims[i])
        return 0;
    return 1;
  }
  return data->ndim == 3 && model->ndim == 4 && model->dims[1] == 1 &&
         data->dims[1] == model->dims[2] && data->dims[2] == model->dims[3];
}

/* x of one set as float32 rows for input `in`: float32 as it is, uint8
 * scaled as the data loader does ((p / 255 - mean[c]) / std[c]). The
 * result replaces x->data (and stays owned by x). */
static gcc_status npy_inputs(gcc_npy_tensor *x, const gcc_value *in, const gcc_training *t,
                             gcc_diag *d) {
  char sx[128], si[128];
  gcc_shape_str(&x->shape, sx, sizeof sx);
  gcc_shape_str(&in->shape, si, sizeof si);
  if ((x->dtype != GCC_DT_FLOAT32 && x->dtype != GCC_DT_UINT8) || in->dtype != GCC_DT_FLOAT32)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: %s '%s' %s, but input '%s' takes %s %s: --dataset npy feeds float32 "
                        "inputs as they are and scales uint8 images by --mean/--std",
                        x->name, gcc_dtype_name(x->dtype), x->descr, sx, in->name,
                        gcc_dtype_name(in->dtype), si);
  if (!sample_fits(&x->shape, &in->shape))
    return gcc_diag_set(
        d, GCC_ERR_SHAPE, "%s: shape %s (%s), but input '%s' takes %s %s (the samples along dim 0)",
        x->name, sx, gcc_dtype_name(x->dtype), in->name, si, gcc_dtype_name(in->dtype));
  if (x->dtype == GCC_DT_FLOAT32)
    return GCC_OK;
  float *f = malloc((size_t)x->numel * sizeof *f);
  if (!f)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%s as float32)", x->name);
  int64_t c = x->shape.ndim == 4 ? x->shape.dims[1] : 1;
  int64_t plane = x->numel / x->shape.dims[0] / c;
  if (t->n_mean > 1 && (t->n_mean != c || t->n_std != c)) {
    free(f);
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: %" PRId64 " channels, but the training normalisation has %d means "
                        "and %d stds",
                        x->name, c, t->n_mean, t->n_std);
  }
  const uint8_t *p = x->data;
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t ch = t->n_mean > 1 ? (i / plane) % c : 0;
    float mean = t->n_mean ? t->mean[ch] : 0.0f, sd = t->n_std ? t->std[ch] : 1.0f;
    f[i] = ((float)p[i] / 255.0f - mean) / sd;
  }
  free(x->data);
  x->data = f;
  x->dtype = GCC_DT_FLOAT32;
  return GCC_OK;
}

/* What a class index may be: [0, classes) of the model (classes -1 when
 * the model does not say: >= 0), or the loss's ignore_index (PyTorch's
 * CrossEntropyLoss(ignore_index=-100) skips such rows). */
typedef struct label_rule {
  int64_t classes, ignore;
} label_rule;

/* The last dim of the prediction, else of the cross-entropy's logits, on a
 * copy of the model with its shapes inferred (the stored model keeps only
 * the inputs' and parameters'). */
static label_rule label_rule_of(const gcc_graph *m) {
  label_rule r = {-1, INT64_MIN};
  gcc_graph *g = NULL;
  gcc_diag d = {0};
  if (gcc_graph_clone_borrowing_params(m, &g, &d) != GCC_OK || gcc_infer_shapes(g, &d) != GCC_OK) {
    gcc_graph_free(g);
    return r;
  }
  int v = g->training.prediction ? gcc_graph_find(g, g->training.prediction) : -1;
  /* the loss (the op table's flag, not a comparison of ops): its first
   * input is the logits; a class-index loss has an ignore_index attribute */
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_op_desc *od = gcc_op(g->nodes[i].op);
    if (!(od->flags & GCC_OPF_LOSS) || g->nodes[i].n_inputs < 1)
      continue;
    for (int k = 0; k < od->n_attrs; k++)
      if (strcmp(od->attrs[k].name, "ignore_index") == 0) { /* class indices */
        r.ignore = g->nodes[i].av[k].i;
        if (v < 0)
          v = g->nodes[i].inputs[0];
      }
  }
  if (v >= 0 && g->values[v].shape.ndim == 2 && g->values[v].shape.dims[1] >= 1)
    r.classes = g->values[v].shape.dims[1];
  gcc_graph_free(g);
  return r;
}

/* Class indices (int64, int32 or uint8 y) checked at load, one rule for
 * every dtype: each in [0, classes) of the model, the error naming the file
 * and the index (not a row of a shuffled batch after training started). */
static gcc_status check_labels(const gcc_npy_tensor *y, const label_rule *rule, gcc_diag *d) {
  int64_t classes = rule->classes;
  for (int64_t i = 0; i < y->numel; i++) {
    int64_t v = y->dtype == GCC_DT_INT64   ? ((const int64_t *)y->data)[i]
                : y->dtype == GCC_DT_INT32 ? ((const int32_t *)y->data)[i]
                : y->dtype == GCC_DT_UINT8 ? ((const uint8_t *)y->data)[i]
                                           : 0;
    if (v != rule->ignore && (v < 0 || (classes > 0 && v >= classes))) {
      char range[96] = "must be >= 0";
      if (classes > 0)
        snprintf(range, sizeof range, "the model has %" PRId64 " classes, 0 to %" PRId64, classes,
                 classes - 1);
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "%s: label %" PRId64 " at index %" PRId64 " is not a class index (%s)",
                          y->name, v, i, range);
    }
  }
  return GCC_OK;
}

/* Float data checked at load: a NaN or an infinity names the file and the
 * element (it was reported as a diverged loss, "learning rate too high?"). */
static gcc_status check_finite(const gcc_npy_tensor *t, gcc_diag *d) {
  if (t->dtype != GCC_DT_FLOAT32)
    return GCC_OK;
  const float *f = t->data;
  for (int64_t i = 0; i < t->numel; i++)
    if (!isfinite(f[i]))
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "%s: element %" PRId64 " (sample %" PRId64 ") is %s: the data must be "
                          "finite",
                          t->name, i, t->shape.dims[0] > 0 ? i / (t->numel / t->shape.dims[0]) : 0,
                          isnan(f[i]) ? "NaN"
                          : f[i] > 0  ? "+Inf"
                                      : "-Inf");
  return GCC_OK;
}

/* y of one set as the target takes it: int64 class indices (from int64,
 * int32 or uint8) for an int64 target of shape (N), float32 values of the
 * target's per-sample shape for a float32 one (a regression). */
static gcc_status npy_targets(gcc_npy_tensor *y, const gcc_value *tg, gcc_diag *d) {
  char sy[128], st[128];
  gcc_shape_str(&y->shape, sy, sizeof sy);
  gcc_shape_str(&tg->shape, st, sizeof st);
  int y_int = y->dtype == GCC_DT_INT64 || y->dtype == GCC_DT_INT32 || y->dtype == GCC_DT_UINT8;
  if (tg->dtype == GCC_DT_INT64) {
    if (!y_int || y->shape.ndim != 1)
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: %s '%s' %s, but target '%s' takes int64 class indices %s "
                          "(cross-entropy; float32 targets are a regression: --loss mse)",
                          y->name, gcc_dtype_name(y->dtype), y->descr, sy, tg->name, st);
    if (y->dtype != GCC_DT_INT64) {
      int64_t *v = malloc((size_t)y->numel * sizeof *v);
      if (!v)
        return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%s)", y->name);
      for (int64_t i = 0; i < y->numel; i++)
        v[i] = y->dtype == GCC_DT_INT32 ? ((const int32_t *)y->data)[i]
                                        : ((const uint8_t *)y->data)[i];
      free(y->data);
      y->data = v;
      y->dtype = GCC_DT_INT64;
    }
    return GCC_OK;
  }
  int64_t per = 1, want = 1;
  for (int i = 1; i < y->shape.ndim; i++)
    per *= y->shape.dims[i];
  for (int i = 1; i < tg->shape.ndim; i++)
    want *= tg->shape.dims[i];
  if (tg->dtype != GCC_DT_FLOAT32 || y->dtype != GCC_DT_FLOAT32 || per != want ||
      !(sample_fits(&y->shape, &tg->shape) || y->shape.ndim == 1 || tg->shape.ndim == 1))
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s '%s' %s, but target '%s' takes %s %s%s", y->name,
                        gcc_dtype_name(y->dtype), y->descr, sy, tg->name, gcc_dtype_name(tg->dtype),
                        st, y_int ? " (integer class indices need --loss cross-entropy)" : "");
  return GCC_OK;
}

/* --dataset npy: the arrays as rows when they are not uint8 images with
 * class indices (those go through the image data loader, with --augment):
 * float32 inputs of any shape the model's input has, float32 regression
 * targets, or uint8 inputs with float32 targets. *rows = 1 when this source
 * took them. */
static gcc_status open_npy_rows(source *src, const gcc_graph *m, const gcc_train_config *cfg,
                                const gcc_value *in, const gcc_value *tg, int *rows, gcc_diag *d) {
  gcc_npy_tensor x[2], y[2];
  *rows = 0;
  GCC_TRY(gcc_npy_load_pair(cfg->data_dir, 1, &x[0], &y[0], d));
  int images =
      x[0].dtype == GCC_DT_UINT8 && tg->dtype == GCC_DT_INT64 && y[0].dtype != GCC_DT_FLOAT32;
  gcc_status s = GCC_OK;
  if (images) { /* the image loader reads them again (mapped: no copy kept) */
    gcc_npy_tensor_free(&x[0]);
    label_rule rule = label_rule_of(m);
    s = check_labels(&y[0], &rule, d); /* the model's classes, before the loader's own rule */
    gcc_npy_tensor_free(&y[0]);
    if (s == GCC_OK && (s = gcc_npy_load_pair(cfg->data_dir, 0, &x[1], &y[1], d)) == GCC_OK) {
      gcc_npy_tensor_free(&x[1]);
      s = check_labels(&y[1], &rule, d);
      gcc_npy_tensor_free(&y[1]);
    }
    return s;
  }
  memset(&x[1], 0, sizeof x[1]);
  memset(&y[1], 0, sizeof y[1]);
  if (cfg->crop_pad || cfg->flip)
    s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                     "--augment crops and flips uint8 images with class labels; %s holds %s "
                     "inputs and %s targets",
                     cfg->data_dir, gcc_dtype_name(x[0].dtype), gcc_dtype_name(y[0].dtype));
  if (s == GCC_OK)
    s = gcc_npy_load_pair(cfg->data_dir, 0, &x[1], &y[1], d);
  label_rule rule = label_rule_of(m);
  for (int k = 0; k < 2 && s == GCC_OK; k++) {
    s = check_finite(&x[k], d);
    if (s == GCC_OK)
      s = check_finite(&y[k], d);
    if (s == GCC_OK && tg->dtype == GCC_DT_INT64 && y[k].dtype != GCC_DT_FLOAT32)
      s = check_labels(&y[k], &rule, d);
    if (s == GCC_OK)
      s = npy_inputs(&x[k], in, &m->training, d);
    if (s == GCC_OK)
      s = npy_targets(&y[k], tg, d);
  }
  if (s == GCC_OK) {
    src->is_inline = 1;
    src->has_test = 1;
    src->int_targets = tg->dtype == GCC_DT_INT64;
    src->train_x = x[0].data;
    src->train_y = y[0].data;
    src->test_x = x[1].data;
    src->test_y = y[1].data;
    src->train_n = x[0].shape.dims[0];
    src->test_n = x[1].shape.dims[0];
    src->own[0] = x[0].data;
    src->own[1] = y[0].data;
    src->own[2] = x[1].data;
    src->own[3] = y[1].data;
    for (int k = 0; k < 2; k++)
      x[k].data = y[k].data = NULL; /* the source owns them now */
    src->xw = per_sample(in);
    src->yw = per_sample(tg);
    src->xb = src->xw * (int64_t)sizeof(float);
    src->yb = src->yw * (int64_t)gcc_dtype_size(tg->dtype);
    src->x_row = (size_t)src->xb;
    src->y_row = (size_t)src->yb;
    src->train_batch = cfg->batch_size;
    src->eval_batch = cfg->eval_batch > 0 ? cfg->eval_batch : cfg->batch_size;
    src->batch_size = src->train_batch;
    src->seed = cfg->seed;
    int64_t most = src->train_n > src->test_n ? src->train_n : src->test_n;
    int64_t bmax = src->train_batch > src->eval_batch ? src->train_batch : src->eval_batch;
    src->perm = malloc((size_t)most * sizeof *src->perm);
    src->bx = malloc((size_t)(bmax * src->xb));
    src->by = malloc((size_t)(bmax * src->yb));
    if (!src->perm || !src->bx || !src->by)
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (.npy batches)");
    if (s == GCC_OK && most > UINT32_MAX)
      s = gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %" PRId64 " samples (at most 2^32)",
                       cfg->data_dir, most);
    *rows = 1;
  }
  for (int k = 0; k < 2; k++) {
    gcc_npy_tensor_free(&x[k]);
    gcc_npy_tensor_free(&y[k]);
  }
  return s;
}

static gcc_status open_source(source *src, const gcc_graph *m, const gcc_train_config *cfg,
                              gcc_diag *d) {
  const gcc_training *t = &m->training;
  memset(src, 0, sizeof *src);
  if (!t->input || !t->target)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: training.input and training.target must be set", m->source);
  const gcc_value *in = &m->values[gcc_graph_find(m, t->input)];
  const gcc_value *tg = &m->values[gcc_graph_find(m, t->target)];
  if (in->shape.ndim < 1 || in->shape.dims[0] != GCC_BATCH_DIM || tg->shape.ndim < 1 ||
      tg->shape.dims[0] != GCC_BATCH_DIM)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: inputs '%s' and '%s' need the batch dim (-1) first", m->source,
                        in->name, tg->name);
  if (gcc_lm_dataset(t->dataset)) { /* token windows */
    GCC_TRY(gcc_lm_source_open(m, cfg, &src->lm, d));
    src->int_targets = 1;
    src->x_row = gcc_lm_x_row(src->lm);
    src->y_row = gcc_lm_y_row(src->lm);
    return GCC_OK;
  }
  if (strcmp(t->dataset, "inline") == 0) {
    if (t->inline_inputs < 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: dataset 'inline' but the model carries no training.inline_data",
                          m->source);
    const gcc_value *xi = &m->values[t->inline_inputs], *yi = &m->values[t->inline_targets];
    src->is_inline = 1;
    src->x = xi->data;
    src->y = yi->data;
    src->n = xi->shape.dims[0];
    src->xw = per_sample(xi);
    src->yw = per_sample(yi);
    if (in->dtype != GCC_DT_FLOAT32 || xi->dtype != GCC_DT_FLOAT32)
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: training.inline_data.inputs are %s and input '%s' is %s; both "
                          "must be float32",
                          m->source, gcc_dtype_name(xi->dtype), in->name,
                          gcc_dtype_name(in->dtype));
    if (yi->dtype != tg->dtype || (tg->dtype != GCC_DT_FLOAT32 && tg->dtype != GCC_DT_INT64))
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: training.inline_data.targets are %s, but target '%s' takes %s "
                          "(inline targets are float32, e.g. for MSELoss, or int64 class "
                          "indices for CrossEntropyLoss, the target's own dtype)",
                          m->source, gcc_dtype_name(yi->dtype), tg->name,
                          gcc_dtype_name(tg->dtype));
    if (src->xw != per_sample(in) || src->yw != per_sample(tg))
      return gcc_diag_set(
          d, GCC_ERR_SHAPE,
          "%s: training.inline_data has %" PRId64 " input and %" PRId64
          " target values per sample; inputs '%s' and '%s' take %" PRId64 " and %" PRId64,
          m->source, src->xw, src->yw, in->name, tg->name, per_sample(in), per_sample(tg));
    src->xb = src->xw * (int64_t)sizeof(float);
    src->yb = src->yw * (int64_t)gcc_dtype_size(yi->dtype);
    src->batch_size = cfg->batch_size;
    src->train_x = src->test_x = src->x;
    src->train_y = src->test_y = src->y;
    src->train_n = src->test_n = src->n;
    src->train_batch = src->eval_batch = cfg->batch_size;
    src->int_targets = tg->dtype == GCC_DT_INT64;
    src->seed = cfg->seed;
    src->x_row = (size_t)src->xb;
    src->y_row = (size_t)src->yb;
    src->perm = malloc((size_t)src->n * sizeof *src->perm);
    src->bx = malloc((size_t)(cfg->batch_size * src->xb));
    src->by = malloc((size_t)(cfg->batch_size * src->yb));
    if (!src->perm || !src->bx || !src->by)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (inline dataset)");
    return GCC_OK;
  }
  src->is_cifar = strcmp(t->dataset, "cifar10") == 0;
  src->int_targets = 1; /* checked below: int64 class indices */
  int is_npy = strcmp(t->dataset, "npy") == 0;
  if (strcmp(t->dataset, "mnist") != 0 && !src->is_cifar && !is_npy)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: training.dataset '%s' is not supported (mnist, cifar10, npy, inline)",
                        m->source, t->dataset);
  const char *ds_name = src->is_cifar ? "CIFAR-10" : is_npy ? "the .npy" : "MNIST";
  if (is_npy) {
    int rows = 0;
    GCC_TRY(open_npy_rows(src, m, cfg, in, tg, &rows, d));
    if (rows)
      return GCC_OK;
    GCC_TRY(gcc_npy_dataset_load(cfg->data_dir, 1, &src->train, d));
    GCC_TRY(gcc_npy_dataset_load(cfg->data_dir, 0, &src->test, d));
  } else if (src->is_cifar) {
    GCC_TRY(gcc_cifar10_load(cfg->data_dir, 1, &src->train, d));
    GCC_TRY(gcc_cifar10_load(cfg->data_dir, 0, &src->test, d));
  } else {
    GCC_TRY(gcc_mnist_load(cfg->data_dir, 1, &src->train, d));
    GCC_TRY(gcc_mnist_load(cfg->data_dir, 0, &src->test, d));
  }
  int64_t img = src->train.channels * src->train.height * src->train.width;
  if (per_sample(in) != img || in->dtype != GCC_DT_FLOAT32)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: input '%s' takes %" PRId64 " float32 values per sample, but %s "
                        "images have %" PRId64 " (%" PRId64 "x%" PRId64 "x%" PRId64 ")",
                        m->source, in->name, per_sample(in), ds_name, img, src->train.channels,
                        src->train.height, src->train.width);
  /* the pixel count is not enough (14x56 and 784x1 have 784 pixels too):
   * an NCHW input names H and W; a flat one takes the data set's own size,
   * MNIST's 28x28 */
  int64_t want_c = src->is_cifar ? 3 : 1, want_h = src->is_cifar ? 32 : 28, want_w = want_h;
  if (is_npy) { /* the arrays' own image shape */
    want_c = src->train.channels;
    want_h = src->train.height;
    want_w = src->train.width;
  }
  if (in->shape.ndim == 4) {
    want_c = in->shape.dims[1];
    want_h = in->shape.dims[2];
    want_w = in->shape.dims[3];
  }
  const gcc_dataset *sets[2] = {&src->train, &src->test};
  for (int k = 0; k < 2; k++)
    if (sets[k]->channels != want_c || sets[k]->height != want_h || sets[k]->width != want_w)
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: input '%s' takes %" PRId64 "x%" PRId64 "x%" PRId64
                          " (channels x height x width) images, but the %s %s set's are %" PRId64
                          "x%" PRId64 "x%" PRId64,
                          m->source, in->name, want_c, want_h, want_w, ds_name,
                          k == 0 ? "training" : "test", sets[k]->channels, sets[k]->height,
                          sets[k]->width);
  int64_t classes = label_rule_of(m).classes;
  for (int k = 0; k < 2 && classes > 0; k++)
    for (int64_t i = 0; i < sets[k]->n; i++)
      if (sets[k]->labels[i] >= classes)
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "%s: the %s set's label %d at index %" PRId64
                            " is not a class index (the model has %" PRId64
                            " classes, 0 to %" PRId64 ")",
                            cfg->data_dir, k == 0 ? "training" : "test", sets[k]->labels[i], i,
                            classes, classes - 1);
  src->x_row = (size_t)img * sizeof(float);
  src->y_row = sizeof(int64_t);
  if (tg->dtype != GCC_DT_INT64 || per_sample(tg) != 1)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: target '%s' must be int64 class indices of shape (N) for %s",
                        m->source, tg->name, ds_name);
  gcc_dataloader_options o = {0};
  o.batch_size = cfg->batch_size;
  o.shuffle = 1;
  o.seed = cfg->seed;
  o.mean = t->n_mean ? t->mean[0] : 0.0f;
  o.std = t->n_std ? t->std[0] : 1.0f;
  if (t->n_mean > 1 || t->n_std > 1) { /* one mean and std per channel */
    if (t->n_mean != t->n_std || t->n_mean != src->train.channels)
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: training normalisation has %d means and %d stds, but %s images "
                          "have %" PRId64 " channels",
                          m->source, t->n_mean, t->n_std, ds_name, src->train.channels);
    o.n_channel_norm = t->n_mean;
    for (int c = 0; c < t->n_mean; c++) {
      o.channel_mean[c] = t->mean[c];
      o.channel_std[c] = t->std[c];
    }
  }
  o.prefetch = 1;
  o.profiler = cfg->profiler;
  o.profile_name = "data loader (train)";
  if (cfg->show_predictions > 0) {
    src->n_show = cfg->show_predictions < src->test.n ? cfg->show_predictions : src->test.n;
    src->show_truth = malloc((size_t)src->n_show * sizeof *src->show_truth);
    src->show_pred = malloc((size_t)src->n_show * sizeof *src->show_pred);
    if (!src->show_truth || !src->show_pred)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (--show-predictions)");
  }
  o.crop_pad = cfg->crop_pad;
  o.flip = cfg->flip;
  GCC_TRY(gcc_dataloader_create(&src->train, &o, &src->train_dl, d));
  o.crop_pad = 0; /* evaluation sees the images as they are */
  o.flip = 0;
  o.batch_size = cfg->eval_batch;
  o.shuffle = 0;
  o.profile_name = "data loader (test)";
  return gcc_dataloader_create(&src->test, &o, &src->test_dl, d);
}

static int64_t source_batches(const source *src, int eval) {
  if (src->lm)
    return gcc_lm_batches_per_epoch(src->lm);
  if (src->is_inline) {
    int64_t n = eval ? src->test_n : src->train_n, b = eval ? src->eval_batch : src->train_batch;
    return (n + b - 1) / b;
  }
  return gcc_dataloader_num_batches(eval ? src->test_dl : src->train_dl);
}

static gcc_status source_start_at(source *src, int eval, int64_t epoch, int64_t first,
                                  gcc_diag *d) {
  if (src->lm) { /* evaluation is gcc_lm_estimate_loss's own batches */
    src->lm_epoch = epoch;
    src->lm_pos = first;
    return GCC_OK;
  }
  if (src->is_inline) {
    src->x = eval ? src->test_x : src->train_x;
    src->y = eval ? src->test_y : src->train_y;
    src->n = eval ? src->test_n : src->train_n;
    src->batch_size = eval ? src->eval_batch : src->train_batch;
    src->pos = first * src->batch_size < src->n ? first * src->batch_size : src->n;
    src->eval_mode = eval;
    for (int64_t i = 0; i < src->n; i++)
      src->perm[i] = (uint32_t)i;
    if (!eval) { /* Fisher-Yates from (seed, epoch), as the MNIST loader */
      gcc_rng r;
      gcc_rng_seed(&r, src->seed, (uint64_t)epoch);
      for (int64_t i = src->n - 1; i > 0; i--) {
        uint32_t j = gcc_rng_below(&r, (uint32_t)(i + 1));
        uint32_t tmp = src->perm[i];
        src->perm[i] = src->perm[j];
        src->perm[j] = tmp;
      }
    }
    return GCC_OK;
  }
  return gcc_dataloader_start_epoch_at(eval ? src->test_dl : src->train_dl, epoch, first, d);
}

static gcc_status source_start(source *src, int eval, int64_t epoch, gcc_diag *d) {
  return source_start_at(src, eval, epoch, 0, d);
}

static gcc_status source_next_batch(source *src, int eval, batch *b, int *has, gcc_diag *d);

/* The next batch; with --profile, the time the trainer waits for it (or
 * assembles it, for inline data) is a "wait" event. */
static gcc_status source_next(source *src, int eval, int64_t index, batch *b, int *has,
                              gcc_diag *d) {
  if (!src->track)
    return source_next_batch(src, eval, b, has, d);
  int64_t t0 = gcc_prof_now();
  gcc_status s = source_next_batch(src, eval, b, has, d);
  if (s == GCC_OK && *has)
    gcc_prof_record(src->track, src->site_wait[eval], t0, gcc_prof_now(), index);
  return s;
}

static gcc_status source_next_batch(source *src, int eval, batch *b, int *has, gcc_diag *d) {
  if (src->lm) {
    int64_t nb = gcc_lm_batches_per_epoch(src->lm);
    *has = !eval && src->lm_pos < nb;
    if (!*has)
      return GCC_OK;
    GCC_TRY(
        gcc_lm_train_batch(src->lm, src->lm_epoch * nb + src->lm_pos, &b->x, &b->y, &b->rows, d));
    src->lm_pos++;
    return GCC_OK;
  }
  if (src->is_inline) {
    int64_t rows = src->n - src->pos;
    if (rows > src->batch_size)
      rows = src->batch_size;
    *has = rows > 0;
    for (int64_t r = 0; r < rows; r++) {
      int64_t i = src->perm[src->pos + r];
      memcpy(src->bx + r * src->xb, src->x + i * src->xb, (size_t)src->xb);
      memcpy(src->by + r * src->yb, src->y + i * src->yb, (size_t)src->yb);
    }
    src->pos += rows;
    b->x = src->bx;
    b->y = src->by;
    b->rows = rows;
    return GCC_OK;
  }
  gcc_batch gb;
  GCC_TRY(gcc_dataloader_next(eval ? src->test_dl : src->train_dl, &gb, has, d));
  b->x = gb.images;
  b->y = gb.labels;
  b->rows = gb.rows;
  return GCC_OK;
}

/* ---- data parallelism ------------------------------------------------- */

static int is_dp(const gcc_train_config *cfg) {
  return cfg->comm && cfg->comm->size > 1;
}

/* This rank's share of a global batch *b, in place: its rows, or (no rows
 * for it) the batch's first row as a placeholder weighted 0. Returns the
 * rows of the share. */
static int64_t take_share(const gcc_comm *c, const source *src, batch *b) {
  int64_t first, rows;
  gcc_comm_share(b->rows, c->rank, c->size, &first, &rows);
  if (rows > 0) {
    b->x = (const char *)b->x + (size_t)first * src->x_row;
    b->y = (const char *)b->y + (size_t)first * src->y_row;
    b->rows = rows;
  } else {
    b->rows = 1;
  }
  return rows;
}

/* After the first step: every rank's parameters hash as rank 0's. */
static gcc_status check_ranks_agree(gcc_session *s, gcc_comm *c, gcc_diag *d) {
  uint64_t mine, root;
  GCC_TRY(gcc_session_param_hash(s, &mine, d));
  root = mine;
  GCC_TRY(c->broadcast(c, &root, sizeof root, 0, d));
  double differ = mine != root;
  GCC_TRY(c->allreduce_f64(c, &differ, 1, d));
  if (differ > 0)
    return gcc_diag_set(d, GCC_ERR_INTERNAL,
                        "after the first optimizer step the parameters of %.0f of %d ranks differ "
                        "from rank 0's (this rank %d: hash %016llx, rank 0: %016llx); the "
                        "ranks' all-reduce is not deterministic",
                        differ, c->size, c->rank, (unsigned long long)mine,
                        (unsigned long long)root);
  return GCC_OK;
}

/* Whether any rank was asked to stop (SIGINT): every rank stops at the
 * same step. */
static gcc_status any_stop(const gcc_train_config *cfg, int *stop, gcc_diag *d) {
  double f = cfg->stop && *cfg->stop ? 1 : 0;
  if (is_dp(cfg))
    GCC_TRY(cfg->comm->allreduce_f64(cfg->comm, &f, 1, d));
  *stop = f > 0;
  return GCC_OK;
}

/* ---- the loop --------------------------------------------------------- */

/* "5852 samples/s", or, for a span under a millisecond (one step of a tiny
 * model), words instead of a rate that the clock's resolution makes up. */
static const char *rate_str(char *buf, size_t cap, int64_t samples, double secs) {
  if (secs < GCC_TRAIN_MIN_TIMED_SECONDS)
    snprintf(buf, cap, "too short to time");
  else
    snprintf(buf, cap, "%.0f samples/s", (double)samples / secs);
  return buf;
}

/* The width of the terminal `out` is, else $COLUMNS, else 80. */
static int out_columns(FILE *out, int fixed) {
  if (fixed > 0)
    return fixed;
  struct winsize ws;
  if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  const char *env = getenv("COLUMNS");
  long c = env ? strtol(env, NULL, 10) : 0;
  return c > 0 && c < 10000 ? (int)c : 80;
}

/* m:ss, or h:mm:ss from an hour on, as tqdm writes times; "?" unknown */
static void fmt_time(char *buf, size_t cap, double secs) {
  if (!(secs >= 0) || secs > 1e7) {
    snprintf(buf, cap, "?");
    return;
  }
  long t = (long)(secs + 0.5);
  if (t >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, cap, "%02ld:%02ld", t / 60, t % 60);
}

/* One progress line, redrawn in place, fitted to `cols` columns (it never
 * wraps, which would print a new line per redraw), as tqdm draws:
 *   epoch 1/5  45%|#####      | 422/938 [00:05<00:06, 5400 samples/s, loss 0.1234]
 * (elapsed < estimated time left, as tqdm's [elapsed<remaining]).
 * Narrower terminals drop the rate, then the word "epoch" (the bar shrinks
 * to 5), then the bar; a line still too long is cut. */
static void draw_bar(FILE *out, int cols, int64_t epoch, int64_t epochs, int64_t first,
                     int64_t done, int64_t total, int64_t samples, double loss, double elapsed) {
  char left[64], times[64], el[32], eta[32], right[160], line[512];
  int pct = total > 0 ? (int)(100 * done / total) : 100;
  fmt_time(el, sizeof el, elapsed);
  /* this run's pace: batches before `first` were done by the run resumed */
  fmt_time(eta, sizeof eta,
           done > first ? elapsed / (double)(done - first) * (double)(total - done) : -1);
  snprintf(times, sizeof times, "%s<%s", el, eta);
  int width = cols - 1; /* the last column would wrap on some terminals */
  if (width > (int)sizeof line - 1)
    width = (int)sizeof line - 1;
  char rate[48] = "";
  if (elapsed >= GCC_TRAIN_MIN_TIMED_SECONDS && samples > 0)
    snprintf(rate, sizeof rate, ", %.0f samples/s", (double)samples / elapsed);
  /* stages: everything; no rate; a short epoch label and a shorter bar;
   * no bar (the line is then cut at the width) */
  static const int min_bar[4] = {10, 10, 5, 0};
  for (int stage = 0; stage < 4; stage++) {
    if (epochs > 0)
      snprintf(left, sizeof left, "%s%" PRId64 "/%" PRId64 " %3d%%", stage < 2 ? "epoch " : "",
               epoch, epochs, pct);
    else /* one bar over the run's steps (token data, --max-steps) */
      snprintf(left, sizeof left, "%3d%%", pct);
    snprintf(right, sizeof right, " %" PRId64 "/%" PRId64 " [%s%s, loss %.4f]", done, total, times,
             stage == 0 ? rate : "", loss);
    int bar = width - (int)strlen(left) - (int)strlen(right) - 2;
    if (bar >= min_bar[stage] || stage == 3) {
      int n = snprintf(line, sizeof line, "%s", left);
      if (stage < 3) {
        int fill = total > 0 ? (int)((int64_t)bar * done / total) : bar;
        line[n++] = '|';
        for (int i = 0; i < bar; i++)
          line[n++] = i < fill ? '#' : ' ';
        line[n++] = '|';
        line[n] = '\0';
      }
      snprintf(line + n, sizeof line - (size_t)n, "%s", right);
      break;
    }
  }
  int len = (int)strlen(line);
  if (len > width)
    len = width;
  fprintf(out, "\r%.*s%*s", len, line, width - len, ""); /* blanks clear a longer old line */
  fflush(out);
}

/* Keeps the label and argmax of the test samples first .. of this batch
 * that are among the first n_show (the test set is not shuffled). */
static void record_predictions(source *src, int64_t first, const batch *b, const gcc_tensor *pred) {
  if (!src->n_show || !src->int_targets || !pred || pred->shape.ndim != 2 ||
      pred->dtype != GCC_DT_FLOAT32 || pred->shape.dims[0] < b->rows)
    return;
  int64_t c = pred->shape.dims[1];
  const float *x = pred->data;
  for (int64_t i = 0; i < b->rows && first + i < src->n_show; i++) {
    int64_t best = 0;
    for (int64_t j = 1; j < c; j++)
      if (x[i * c + j] > x[i * c + best])
        best = j;
    src->show_truth[first + i] = ((const int64_t *)b->y)[i];
    src->show_pred[first + i] = best;
    src->n_shown = first + i + 1;
  }
}

/* Counts (label, argmax) pairs of a classifier's batch into the confusion
 * matrix, made on the first batch with C = the prediction's width. */
static gcc_status count_confusion(source *src, const batch *b, const gcc_tensor *pred,
                                  gcc_diag *d) {
  if (!pred || pred->shape.ndim != 2 || pred->dtype != GCC_DT_FLOAT32 ||
      pred->shape.dims[0] < b->rows)
    return GCC_OK;
  int64_t c = pred->shape.dims[1];
  if (c < 1 || c > 100000)
    return GCC_OK;
  if (!src->confusion || src->n_classes != c) {
    free(src->confusion);
    src->n_classes = 0;
    src->confusion = calloc((size_t)(c * c), sizeof *src->confusion);
    if (!src->confusion)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (confusion matrix)");
    src->n_classes = c;
  }
  const float *x = pred->data;
  const int64_t *y = b->y;
  for (int64_t i = 0; i < b->rows; i++) {
    int64_t best = 0;
    for (int64_t j = 1; j < c; j++)
      if (x[i * c + j] > x[i * c + best])
        best = j;
    if (y[i] >= 0 && y[i] < c)
      src->confusion[y[i] * c + best]++;
  }
  return GCC_OK;
}

static const char *class_name(const source *src, int64_t k, char *buf, size_t cap) {
  if (src->is_cifar && k >= 0 && k < 10)
    return gcc_cifar10_classes[k];
  snprintf(buf, cap, "%" PRId64, k);
  return buf;
}

/* The tutorial's lines, then (if asked) the matrix. */
static void print_per_class(FILE *out, const source *src, const gcc_train_config *cfg) {
  int64_t c = src->n_classes;
  const int64_t *m = src->confusion;
  int per_class = cfg->per_class == 1 || (cfg->per_class == 2 && c <= GCC_TRAIN_PER_CLASS_AUTO_MAX);
  char nb[32];
  for (int64_t k = 0; per_class && k < c; k++) {
    int64_t n = 0;
    for (int64_t j = 0; j < c; j++)
      n += m[k * c + j];
    if (n > 0)
      fprintf(out, "Accuracy for class: %-5s is %.1f %%\n", class_name(src, k, nb, sizeof nb),
              100.0 * (double)m[k * c + k] / (double)n);
    else
      fprintf(out, "Accuracy for class: %-5s has no test samples\n",
              class_name(src, k, nb, sizeof nb));
  }
  if (!cfg->confusion_matrix)
    return;
  int w = 5; /* column width: the longest name or count */
  for (int64_t k = 0; k < c; k++) {
    int len = (int)strlen(class_name(src, k, nb, sizeof nb));
    w = len > w ? len : w;
    for (int64_t j = 0; j < c; j++) {
      len = snprintf(nb, sizeof nb, "%" PRId64, m[k * c + j]);
      w = len > w ? len : w;
    }
  }
  fprintf(out, "confusion matrix (rows: true class, columns: predicted class):\n%*s", w, "");
  for (int64_t j = 0; j < c; j++)
    fprintf(out, " %*s", w, class_name(src, j, nb, sizeof nb));
  fprintf(out, "\n");
  for (int64_t k = 0; k < c; k++) {
    fprintf(out, "%*s", w, class_name(src, k, nb, sizeof nb));
    for (int64_t j = 0; j < c; j++)
      fprintf(out, " %*" PRId64, w, m[k * c + j]);
    fprintf(out, "\n");
  }
}

static void print_class_line(FILE *out, const char *what, const source *src, const int64_t *cls) {
  fprintf(out, "%s", what);
  for (int64_t i = 0; i < src->n_shown; i++) {
    if (src->is_cifar && cls[i] >= 0 && cls[i] < 10)
      fprintf(out, " %-5s", gcc_cifar10_classes[cls[i]]);
    else
      fprintf(out, " %-5" PRId64, cls[i]);
  }
  fprintf(out, "\n");
}

/* Data-parallel evaluation: every rank's confusion counts summed into every
 * rank's (a rank that evaluated no rows learns the class count from the
 * others). Exact: counts below 2^53. */
static gcc_status reduce_confusion(gcc_comm *c, source *src, gcc_diag *d) {
  double k[2] = {(double)(src->confusion ? src->n_classes : 0), src->confusion ? 1.0 : 0.0};
  GCC_TRY(c->allreduce_f64(c, k, 2, d));
  if (k[1] == 0)
    return GCC_OK; /* no rank counted: not a classifier */
  int64_t n = (int64_t)(k[0] / k[1]), cells = n * n;
  if (!src->confusion) {
    src->confusion = calloc((size_t)cells, sizeof *src->confusion);
    if (!src->confusion)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (confusion matrix)");
    src->n_classes = n;
  }
  double *v = malloc((size_t)cells * sizeof *v);
  if (!v)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (confusion matrix)");
  for (int64_t i = 0; i < cells; i++)
    v[i] = (double)src->confusion[i];
  gcc_status st = c->allreduce_f64(c, v, cells, d);
  for (int64_t i = 0; st == GCC_OK && i < cells; i++)
    src->confusion[i] = (int64_t)v[i];
  free(v);
  return st;
}

static gcc_status evaluate(gcc_session *s, source *src, const gcc_train_config *cfg,
                           gcc_train_report *r, gcc_diag *d) {
  if (src->lm) { /* nanoGPT's estimate_loss: no accuracy */
    r->test_accuracy = -1;
    r->test_samples = cfg->batch_size * (cfg->eval_batches > 0 ? cfg->eval_batches : 1);
    return gcc_lm_estimate_loss(src->lm, s, cfg, r->steps, &r->eval_train_loss, &r->test_loss, d);
  }
  GCC_TRY(source_start(src, 1, 0, d));
  src->n_shown = 0;
  if (src->confusion)
    memset(src->confusion, 0, (size_t)(src->n_classes * src->n_classes) * sizeof *src->confusion);
  double loss_sum = 0;
  int64_t correct = 0, n = 0, classification = 1;
  int dp = is_dp(cfg);
  /* data-parallel: each rank its share of every batch, unless the
   * predictions of every row are wanted here (then rank 0 runs them all) */
  int shard = dp && !cfg->eval_on_root;
  for (int64_t k = 0;; k++) {
    batch b;
    int has;
    GCC_TRY(source_next(src, 1, k, &b, &has, d));
    if (!has)
      break;
    if (shard) {
      if (take_share(cfg->comm, src, &b) == 0)
        continue;
    } else if (dp && cfg->comm->rank != 0) {
      continue;
    }
    float loss;
    int64_t ok;
    const gcc_tensor *pred = NULL;
    GCC_TRY(gcc_session_eval_batch(s, b.x, b.y, b.rows, &loss, &ok, &pred, d));
    if (cfg->on_eval_batch && pred)
      cfg->on_eval_batch(cfg->eval_user, n, pred, b.rows);
    record_predictions(src, n, &b, pred);
    loss_sum += (double)loss * (double)b.rows; /* batch means -> sample mean */
    n += b.rows;
    if (ok < 0)
      classification = 0;
    else
      correct += ok;
    if (ok >= 0 && (cfg->per_class || cfg->confusion_matrix))
      GCC_TRY(count_confusion(src, &b, pred, d));
  }
  if (dp) { /* exact: counts below 2^53 */
    double v[4] = {loss_sum, (double)correct, (double)n, classification ? 0 : 1};
    GCC_TRY(cfg->comm->allreduce_f64(cfg->comm, v, 4, d));
    loss_sum = v[0];
    correct = (int64_t)v[1];
    n = (int64_t)v[2];
    classification = v[3] == 0;
    if (cfg->per_class || cfg->confusion_matrix)
      GCC_TRY(reduce_confusion(cfg->comm, src, d));
  }
  r->test_samples = n;
  r->test_loss = n ? loss_sum / (double)n : 0;
  if (!isfinite(r->test_loss))
    return gcc_diag_set(d, GCC_ERR_NUMERIC,
                        "the evaluation loss is %f after optimizer step %" PRId64
                        " (learning rate too high?)",
                        r->test_loss, gcc_session_steps(s));
  r->test_accuracy = classification && n ? (double)correct / (double)n : -1;
  return GCC_OK;
}

/* Collects the losses of the issued steps into the log window and the epoch sum. */
static gcc_status collect(gcc_session *s, const gcc_train_config *cfg, float *losses,
                          double *weights, int *issued, double *window, double *epoch_loss,
                          int64_t *in_window, double *scalar_sum, int64_t *in_scalar, gcc_diag *d) {
  int n = 0;
  gcc_status st = gcc_session_collect_losses(s, losses, gcc_session_max_pending(s), &n, d);
  if (st == GCC_OK && is_dp(cfg) && n > 0) { /* the global batches' losses */
    for (int i = 0; i < n; i++)
      weights[i] *= (double)losses[i];
    st = cfg->comm->allreduce_f64(cfg->comm, weights, n, d);
    for (int i = 0; i < n && st == GCC_OK; i++)
      losses[i] = (float)weights[i];
  }
  for (int i = 0; i < n; i++) {
    *window += losses[i];
    *epoch_loss += losses[i];
    (*in_window)++;
    *scalar_sum += losses[i];
    (*in_scalar)++;
  }
  *issued = 0;
  /* a diverged run stops here, before anything is written: the parameters
   * after the steps just collected (on the CPU: after every step) */
  if (st == GCC_OK)
    st = gcc_session_check_params(s, d);
  return st;
}

/* --dataset-on-device: decides, and uploads the normalised training set */
static gcc_status maybe_upload(gcc_session *s, const gcc_graph *model, const source *src,
                               const gcc_train_config *cfg, int *on, gcc_diag *d) {
  *on = 0;
  if (cfg->dataset_on_device == 0)
    return GCC_OK;
  if (cfg->crop_pad > 0 || cfg->flip) { /* augmented batches come from the loader */
    if (cfg->dataset_on_device == 1)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--dataset-on-device on: --augment changes every batch on the loader "
                          "thread; use --dataset-on-device off");
    return GCC_OK;
  }
  if (src->lm) { /* token windows are cut on the host from the mapped file */
    if (cfg->dataset_on_device == 1)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--dataset-on-device on: token windows are cut from the mapped file on "
                          "the host; use --dataset-on-device off");
    return GCC_OK;
  }
  FILE *note = cfg->note ? cfg->note : stderr;
  size_t fr = 0, tot = 0;
  gcc_diag md = {0};
  if (gcc_session_device_memory(s, &fr, &tot, &md) != GCC_OK || src->is_inline) {
    if (cfg->dataset_on_device == 1)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--dataset-on-device on: %s",
                          src->is_inline
                              ? "the data are rows (inline, or float .npy arrays), not image files"
                              : "training runs on the CPU");
    return GCC_OK; /* auto: nothing to do on the CPU */
  }
  int64_t n = src->train.n, w = src->train.channels * src->train.height * src->train.width;
  size_t bytes = (size_t)(n * w) * sizeof(float) + 2 * (size_t)n * sizeof(int64_t);
  if (cfg->dataset_on_device == 2 && bytes > fr / 4) {
    fprintf(note,
            "gcc-train: --dataset-on-device auto: the training set (%zu bytes) exceeds a "
            "quarter of the free GPU memory (%zu bytes); copying batches per step\n",
            bytes, fr);
    return GCC_OK;
  }
  float *x = malloc((size_t)(n * w) * sizeof *x);
  int64_t *y = malloc((size_t)n * sizeof *y);
  if (!x || !y) {
    free(x);
    free(y);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (dataset upload)");
  }
  (void)model;
  gcc_dataloader_materialize(src->train_dl, x, y);
  gcc_status st = gcc_session_upload_dataset(s, x, y, n, d);
  free(x);
  free(y);
  if (st == GCC_OK) {
    *on = 1;
    fprintf(note,
            "gcc-train: --dataset-on-device: the training set (%" PRId64 " samples, %zu "
            "bytes) is on the GPU; batches are gathered there\n",
            n, bytes);
  }
  return st;
}

/* --log-dir, after an evaluation: its loss and accuracy, and the epoch's
 * rate when it could be timed (none for --epochs 0). */
static gcc_status epoch_scalars(gcc_session *s, const gcc_train_config *cfg,
                                const gcc_train_report *r, const char *test_name, int64_t samples,
                                double secs, gcc_diag *d) {
  char tag[64];
  gcc_loss_scale_state ls; /* fp16 loss scaling: read once per epoch (a device waits) */
  GCC_TRY(gcc_session_loss_scale(s, &ls, d));
  if (ls.on) {
    GCC_TRY(cfg->on_scalar(cfg->scalar_user, "train/loss_scale", r->steps, ls.scale, d));
    GCC_TRY(cfg->on_scalar(cfg->scalar_user, "train/skipped_steps", r->steps,
                           (double)ls.skipped_steps, d));
  }
  snprintf(tag, sizeof tag, "%s/loss", test_name);
  GCC_TRY(cfg->on_scalar(cfg->scalar_user, tag, r->steps, r->test_loss, d));
  if (r->language_model) /* estimate_loss's training split */
    GCC_TRY(cfg->on_scalar(cfg->scalar_user, "train/eval_loss", r->steps, r->eval_train_loss, d));
  if (r->test_accuracy >= 0) {
    snprintf(tag, sizeof tag, "%s/accuracy", test_name);
    GCC_TRY(cfg->on_scalar(cfg->scalar_user, tag, r->steps, r->test_accuracy, d));
  }
  if (samples > 0 && secs >= GCC_TRAIN_MIN_TIMED_SECONDS)
    GCC_TRY(cfg->on_scalar(cfg->scalar_user, "train/samples_per_sec", r->steps,
                           (double)samples / secs, d));
  return GCC_OK;
}

/* Token data, every cfg->eval_every steps: estimate_loss, its line
 * (nanoGPT's "step N: train loss X, val loss Y") and its scalars. */
static gcc_status lm_eval_point(gcc_session *s, source *src, const gcc_train_config *cfg,
                                gcc_train_report *r, const char *test_name, FILE *out,
                                gcc_diag *d) {
  GCC_TRY(evaluate(s, src, cfg, r, d));
  if (!cfg->quiet) {
    fprintf(out, "%sstep %" PRId64 ": train loss %.4f, val loss %.4f\n", cfg->progress ? "\n" : "",
            r->steps, r->eval_train_loss, r->test_loss);
    fflush(out);
  }
  if (cfg->on_scalar)
    GCC_TRY(epoch_scalars(s, cfg, r, test_name, 0, 0, d));
  return GCC_OK;
}

/* The rows this process runs of a global batch of `rows` (data-parallel:
 * its share, or one placeholder row; evaluation on rank 0 only: all or
 * none), 0 when it runs none. */
static int64_t local_rows(const gcc_train_config *cfg, int eval, int64_t rows) {
  if (!is_dp(cfg))
    return rows;
  if (eval && cfg->eval_on_root)
    return cfg->comm->rank == 0 ? rows : 0;
  int64_t first, r;
  gcc_comm_share(rows, cfg->comm->rank, cfg->comm->size, &first, &r);
  return r > 0 ? r : (eval ? 0 : 1);
}

/* On a device, before the first step: the plan of every batch shape the
 * run will meet (training at the batch size and at the epoch's smaller
 * last batch, evaluation at its batch size and its last batch), so that
 * each plan's GEMM heuristics, cuDNN algorithms and workspaces are chosen
 * before any CUDA Graph is captured (a plan compiled later, at the last
 * batch of the first epoch, would be prepared between captures: allowed,
 * but the preparation then lands in the middle of the timed epoch, and a
 * backend may refuse heuristics while a capture is open). */
static gcc_status prepare_plans(gcc_session *s, const source *src, const gcc_train_config *cfg,
                                gcc_diag *d) {
  if (!gcc_session_on_device(s))
    return GCC_OK;
  if (src->lm) { /* every batch has B windows, in training and evaluation */
    for (int eval = cfg->epochs > 0 ? 0 : 1; eval < 2; eval++) {
      int64_t rows = local_rows(cfg, 0, cfg->batch_size);
      gcc_plan *p = NULL;
      if (rows > 0)
        GCC_TRY(gcc_session_plan(s, eval ? GCC_MODE_EVAL : GCC_MODE_TRAIN, rows, &p, d));
    }
    return GCC_OK;
  }
  int64_t n[2], bs[2];
  n[0] = src->is_inline ? src->n : src->train.n;
  n[1] = src->is_inline ? src->n : src->test.n;
  bs[0] = cfg->batch_size;
  bs[1] = src->is_inline ? src->batch_size : cfg->eval_batch;
  for (int eval = cfg->epochs > 0 ? 0 : 1; eval < 2; eval++) {
    if (n[eval] <= 0 || bs[eval] <= 0)
      continue;
    int64_t shapes[2] = {n[eval] < bs[eval] ? n[eval] : bs[eval], n[eval] % bs[eval]};
    for (int k = 0; k < 2; k++) {
      int64_t rows = local_rows(cfg, eval, shapes[k]);
      if (rows <= 0)
        continue;
      gcc_plan *p = NULL;
      GCC_TRY(gcc_session_plan(s, eval ? GCC_MODE_EVAL : GCC_MODE_TRAIN, rows, &p, d));
    }
  }
  return GCC_OK;
}

gcc_status gcc_train_run(gcc_session *s, const gcc_graph *model, const gcc_train_config *cfg,
                         gcc_train_report *report, gcc_diag *d) {
  memset(report, 0, sizeof *report);
  int max_pending = gcc_session_max_pending(s);
  float *losses = malloc((size_t)max_pending * sizeof *losses);
  double *weights = malloc((size_t)max_pending * sizeof *weights);
  if (!losses || !weights) {
    free(losses);
    free(weights);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (losses)");
  }
  int dp = is_dp(cfg), checked = !dp;
  report->test_accuracy = -1;
  /* --profile: the "main" track first, so that it is the trace's first thread */
  gcc_prof_track *track = cfg->profiler ? gcc_profiler_track(cfg->profiler, "main") : NULL;
  source src;
  gcc_status st = open_source(&src, model, cfg, d);
  if (st == GCC_OK && cfg->grad_accum > 1 && !src.lm)
    st = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                      "--grad-accum %" PRId64 ": gradient accumulation is for token data "
                      "(--dataset text|tokens) only",
                      cfg->grad_accum);
  int on_device = 0;
  if (st == GCC_OK && cfg->epochs > 0)
    st = maybe_upload(s, model, &src, cfg, &on_device, d);
  report->dataset_on_device = on_device;
  report->language_model = st == GCC_OK && src.lm;
  report->tokens_per_sample = report->language_model ? gcc_lm_block_size(src.lm) : 1;
  int site_epoch = -1, site_evaluate = -1;
  if (st == GCC_OK && track) {
    gcc_profiler *pr = cfg->profiler;
    src.track = track;
    src.site_wait[0] =
        gcc_profiler_site(pr, GCC_PROF_WAIT, "wait for batch (train)", NULL, NULL, NULL, 0, 0);
    src.site_wait[1] =
        gcc_profiler_site(pr, GCC_PROF_WAIT, "wait for batch (eval)", NULL, NULL, NULL, 0, 0);
    site_epoch = gcc_profiler_site(pr, GCC_PROF_PHASE, "epoch", NULL, NULL, NULL, 0, 0);
    site_evaluate = gcc_profiler_site(pr, GCC_PROF_PHASE, "evaluate", NULL, NULL, NULL, 0, 0);
    st = gcc_session_set_profiler(s, pr, track, d);
  }
  /* --resume: the arena, the step count and the position in the data */
  int64_t start_epoch = 0, start_batch = 0;
  if (st == GCC_OK && cfg->resume) {
    st = gcc_checkpoint_check_position(cfg->resume, source_batches(&src, 0), cfg->epochs, d);
    report->resume_refused = st != GCC_OK;
  }
  if (st == GCC_OK && cfg->on_inputs_read)
    st = cfg->on_inputs_read(cfg->inputs_user, d);
  if (st == GCC_OK && cfg->resume) {
    st = gcc_session_restore(s, cfg->resume->arena, cfg->resume->arena_size, cfg->resume->step, d);
    start_epoch = cfg->resume->epoch;
    start_batch = cfg->resume->batch;
    report->steps = cfg->resume->step;
  }
  if (st == GCC_OK && dp) /* every rank starts from rank 0's parameters */
    st = gcc_session_broadcast_params(s, d);
  if (st == GCC_OK)
    st = prepare_plans(s, &src, cfg, d);
  FILE *out = cfg->out ? cfg->out : stdout;
  const char *test_name = src.lm ? "val" : src.is_inline && !src.has_test ? "train-set" : "test";
  int ck_steps = cfg->checkpoint_dir && cfg->checkpoint_every > 0;
  double scalar_sum = 0; /* --log-dir: losses since the last train/loss scalar */
  int64_t in_scalar = 0;
  double run_t0 = now_seconds(); /* the step bar of token data */
  int64_t run_first_step = report->steps, run_first_samples = report->samples;
  for (int64_t epoch = start_epoch; st == GCC_OK && epoch < cfg->epochs; epoch++) {
    int64_t epoch_t0 = track ? gcc_prof_now() : 0;
    double t0 = now_seconds(), window = 0, epoch_loss = 0;
    int64_t first = epoch == start_epoch ? start_batch : 0;
    int64_t nb = source_batches(&src, 0), in_window = 0, epoch_batches = first, epoch_samples = 0;
    int64_t taken = 0; /* batches of this epoch run by this process */
    int issued = 0;
    if (model->training.sched.kind != GCC_SCHED_NONE &&
        !gcc_lr_schedule_per_step(&model->training)) {
      /* the schedule's lr of this epoch, also after --resume (a function of
       * the epoch, which the checkpoint keeps, and of its recipe) */
      double lr = gcc_lr_at_epoch(&model->training, epoch);
      gcc_session_set_lr(s, (float)lr > 0.0f ? (float)lr : FLT_MIN);
      if (!cfg->quiet && !cfg->progress)
        fprintf(out, "epoch %" PRId64 ": lr %.6g\n", epoch + 1, lr);
    }
    st = source_start_at(&src, 0, epoch, first, d);
    if (st == GCC_OK && on_device)
      st = gcc_session_set_order(s, gcc_dataloader_order(src.train_dl), d);
    while (st == GCC_OK) {
      int stop = 0;
      st = any_stop(cfg, &stop, d);
      if (st != GCC_OK)
        break;
      if (stop) {
        st = gcc_diag_set(d, GCC_ERR_INTERRUPTED, "interrupted after %" PRId64 " steps",
                          report->steps);
        break;
      }
      if (cfg->max_steps > 0 && report->steps >= cfg->max_steps)
        break;
      if (gcc_lr_schedule_per_step(&model->training)) {
        /* warmup-cosine: the lr of this optimizer step (nanoGPT's get_lr of
         * the steps taken, also after --resume, whose step count it keeps) */
        double lr = gcc_lr_at_step(&model->training, report->steps);
        gcc_session_set_lr(s, (float)lr > 0.0f ? (float)lr : FLT_MIN); /* steps may be pending */
      }
      batch b;
      int has;
      int64_t global_rows;
      if (on_device) { /* the batch is gathered on the GPU */
        int64_t first = epoch_batches * cfg->batch_size;
        b.rows = src.train.n - first < cfg->batch_size ? src.train.n - first : cfg->batch_size;
        if (b.rows <= 0)
          break;
        global_rows = b.rows;
        if (dp) {
          int64_t sf, sr;
          gcc_comm_share(b.rows, cfg->comm->rank, cfg->comm->size, &sf, &sr);
          gcc_session_set_shard(s, sr, global_rows);
          weights[issued] = (double)sr / (double)global_rows;
          first += sr > 0 ? sf : 0;
          b.rows = sr > 0 ? sr : 1;
        }
        st = gcc_session_train_step_uploaded(s, first, b.rows, d);
      } else {
        st = source_next(&src, 0, epoch_batches, &b, &has, d);
        if (st != GCC_OK || !has)
          break;
        global_rows = b.rows;
        if (dp) {
          int64_t sr = take_share(cfg->comm, &src, &b);
          gcc_session_set_shard(s, sr, global_rows);
          weights[issued] = (double)sr / (double)global_rows;
        }
        st = gcc_session_train_step_async(s, b.x, b.y, b.rows, d);
      }
      if (st == GCC_OK && !checked) { /* cheap: one hash and two tiny collectives */
        checked = 1;
        st = check_ranks_agree(s, cfg->comm, d);
      }
      if (st == GCC_OK && cfg->after_step)
        st = cfg->after_step(cfg->step_user, report->steps + 1, d);
      if (st != GCC_OK)
        break;
      report->steps++;
      report->samples += global_rows;
      epoch_samples += global_rows;
      epoch_batches++;
      taken++;
      issued++;
      /* losses come back in groups (on a GPU, once per log interval) */
      /* token data with --max-steps: one bar over the run's steps */
      int step_bar = src.lm && cfg->max_steps > 0;
      int64_t bar_total = step_bar ? cfg->max_steps : nb;
      int64_t every = cfg->progress ? (bar_total / 100 > 0 ? bar_total / 100 : 1) : cfg->log_every;
      int ck_due = ck_steps && report->steps % cfg->checkpoint_every == 0;
      /* token data: estimate_loss every eval_every steps; the run's last
       * step is evaluated after the loop */
      int run_ends = (cfg->max_steps > 0 && report->steps >= cfg->max_steps) ||
                     (epoch + 1 >= cfg->epochs && epoch_batches == nb);
      int eval_due =
          src.lm && cfg->eval_every > 0 && report->steps % cfg->eval_every == 0 && !run_ends;
      int due = issued == max_pending || epoch_batches == nb || ck_due || eval_due ||
                (!cfg->quiet && every > 0 && epoch_batches % every == 0) ||
                (cfg->on_scalar && cfg->scalar_every > 0 && report->steps % cfg->scalar_every == 0);
      if (!due)
        continue;
      st = collect(s, cfg, losses, weights, &issued, &window, &epoch_loss, &in_window, &scalar_sum,
                   &in_scalar, d);
      if (st == GCC_OK && cfg->on_scalar && in_scalar > 0 && cfg->scalar_every > 0 &&
          report->steps % cfg->scalar_every == 0) { /* --log-dir: the interval's mean loss */
        st = cfg->on_scalar(cfg->scalar_user, "train/loss", report->steps,
                            scalar_sum / (double)in_scalar, d);
        if (st == GCC_OK)
          st = cfg->on_scalar(cfg->scalar_user, "train/lr", report->steps,
                              (double)gcc_session_lr(s), d);
        scalar_sum = 0;
        in_scalar = 0;
      }
      if (st != GCC_OK)
        break;
      /* every step collected and checked: the position after it (rank 0
       * writes; the position counts global batches) */
      if (ck_due && (!dp || cfg->comm->rank == 0)) {
        int done = epoch_batches == nb;
        st = gcc_checkpoint_write(cfg->checkpoint_dir, s, model, done ? epoch + 1 : epoch,
                                  done ? 0 : epoch_batches, cfg->keep_checkpoints, d);
        if (st != GCC_OK)
          break;
      }
      if (eval_due) { /* not timed as training */
        double e0 = now_seconds();
        st = lm_eval_point(s, &src, cfg, report, test_name, out, d);
        t0 += now_seconds() - e0;
        if (st != GCC_OK)
          break;
      }
      if (cfg->quiet)
        continue;
      if (cfg->progress) { /* a TTY: one bar, redrawn about every 1% of the epoch */
        if (step_bar && (report->steps % every == 0 || run_ends)) {
          draw_bar(out, out_columns(out, cfg->progress_columns), 0, 0, run_first_step,
                   report->steps, cfg->max_steps, report->samples - run_first_samples,
                   window / (double)in_window, now_seconds() - run_t0);
          window = 0;
          in_window = 0;
        } else if (!step_bar && (epoch_batches % every == 0 || epoch_batches == nb)) {
          draw_bar(out, out_columns(out, cfg->progress_columns), epoch + 1, cfg->epochs, first,
                   epoch_batches, nb, epoch_samples, window / (double)in_window,
                   now_seconds() - t0);
          window = 0;
          in_window = 0;
        }
      } else if (cfg->log_every > 0 && in_window >= cfg->log_every) {
        fprintf(out, "[%" PRId64 ", %5" PRId64 "] loss: %.4f\n", epoch + 1, epoch_batches,
                window / (double)in_window);
        fflush(out); /* a pipe or a log file sees each line as it comes */
        window = 0;
        in_window = 0;
      }
    }
    if (issued > 0) { /* interrupted, --max-steps or a failure: the steps already issued */
      gcc_diag cd = {0};
      gcc_status cs = collect(s, cfg, losses, weights, &issued, &window, &epoch_loss, &in_window,
                              &scalar_sum, &in_scalar, &cd);
      if (cs != GCC_OK && (st == GCC_OK || st == GCC_ERR_INTERRUPTED)) {
        st = cs;
        *d = cd;
      }
    }
    double secs = now_seconds() - t0;
    report->train_seconds += secs;
    if (track)
      gcc_prof_record(track, site_epoch, epoch_t0, gcc_prof_now(), epoch);
    if (st != GCC_OK && st != GCC_ERR_INTERRUPTED)
      break;
    if (taken == 0)
      break;
    report->epochs_done++;
    report->last_epoch_seconds = secs;
    report->final_train_loss = epoch_loss / (double)taken;
    /* token data with --eval-every: evaluated on its steps, and at the end */
    int lm_skip = src.lm && cfg->eval_every > 0 && epoch + 1 < cfg->epochs &&
                  !(cfg->max_steps > 0 && report->steps >= cfg->max_steps);
    /* the epoch's bar ends (token data's step bar goes on over epochs) */
    if (cfg->progress && !cfg->quiet && !(src.lm && cfg->max_steps > 0 && lm_skip))
      fprintf(out, "\n");
    if (st == GCC_ERR_INTERRUPTED)
      break;
    gcc_diag ed = {0};
    int64_t eval_t0 = track ? gcc_prof_now() : 0;
    gcc_status es = lm_skip ? GCC_OK : evaluate(s, &src, cfg, report, &ed);
    if (track && !lm_skip)
      gcc_prof_record(track, site_evaluate, eval_t0, gcc_prof_now(), epoch);
    if (es != GCC_OK) {
      *d = ed;
      st = es;
      break;
    }
    if (cfg->on_scalar && !lm_skip) {
      st = epoch_scalars(s, cfg, report, test_name, epoch_samples, secs, d);
      if (st != GCC_OK)
        break;
    }
    if (cfg->checkpoint_dir && cfg->checkpoint_every < 0 && epoch_batches == nb &&
        (!dp || cfg->comm->rank == 0)) {
      st = gcc_checkpoint_write(cfg->checkpoint_dir, s, model, epoch + 1, 0, cfg->keep_checkpoints,
                                d);
      if (st != GCC_OK)
        break;
    }
    if (!cfg->quiet && src.lm && !lm_skip) {
      char rate[64] = "too short to time";
      if (secs >= GCC_TRAIN_MIN_TIMED_SECONDS)
        snprintf(rate, sizeof rate, "%.0f tokens/s",
                 (double)(epoch_samples * report->tokens_per_sample) / secs);
      fprintf(out,
              "step %" PRId64 ": train loss %.4f, val loss %.4f (epoch %" PRId64 ", %.2f s, %s)\n",
              report->steps, report->eval_train_loss, report->test_loss, epoch + 1, secs, rate);
      fflush(out);
    } else if (!cfg->quiet && !src.lm) {
      char rate[64];
      if (report->test_accuracy >= 0)
        fprintf(out,
                "epoch %" PRId64 ": %s accuracy %.2f%% (%" PRId64 "/%" PRId64
                "), %s loss %.4f, train loss %.4f, %.2f s (%s)\n",
                epoch + 1, test_name, 100.0 * report->test_accuracy,
                (int64_t)(report->test_accuracy * (double)report->test_samples + 0.5),
                report->test_samples, test_name, report->test_loss, report->final_train_loss, secs,
                rate_str(rate, sizeof rate, epoch_samples, secs));
      else
        fprintf(out, "epoch %" PRId64 ": %s loss %.6f, train loss %.6f, %.2f s (%s)\n", epoch + 1,
                test_name, report->test_loss, report->final_train_loss, secs,
                rate_str(rate, sizeof rate, epoch_samples, secs));
      fflush(out);
    }
    if (cfg->max_steps > 0 && report->steps >= cfg->max_steps)
      break;
  }
  if (st == GCC_OK && cfg->epochs == 0) { /* --epochs 0: evaluate the model as it is */
    int64_t eval_t0 = track ? gcc_prof_now() : 0;
    st = evaluate(s, &src, cfg, report, d);
    if (track)
      gcc_prof_record(track, site_evaluate, eval_t0, gcc_prof_now(), 0);
    if (st == GCC_OK && cfg->on_scalar)
      st = epoch_scalars(s, cfg, report, test_name, 0, 0, d);
    if (st == GCC_OK && !cfg->quiet && src.lm)
      fprintf(out, "step %" PRId64 ": train loss %.4f, val loss %.4f\n", report->steps,
              report->eval_train_loss, report->test_loss);
    else if (st == GCC_OK && !cfg->quiet) {
      if (report->test_accuracy >= 0)
        fprintf(out, "evaluated: %s accuracy %.2f%%, %s loss %.4f\n", test_name,
                100.0 * report->test_accuracy, test_name, report->test_loss);
      else
        fprintf(out, "evaluated: %s loss %.6f\n", test_name, report->test_loss);
    }
  }
  if (report->train_seconds >= GCC_TRAIN_MIN_TIMED_SECONDS)
    report->samples_per_sec = (double)report->samples / report->train_seconds;
  if (st == GCC_OK && src.n_shown > 0) { /* the tutorial's two lines */
    print_class_line(out, "GroundTruth:", &src, src.show_truth);
    print_class_line(out, "Predicted:  ", &src, src.show_pred);
  }
  if (st == GCC_OK && src.confusion && report->test_accuracy >= 0 &&
      (!is_dp(cfg) || cfg->comm->rank == 0))
    print_per_class(out, &src, cfg);
  source_free(&src);
  free(losses);
  free(weights);
  if (track) /* the session may outlive the profiler: detach it */
    gcc_session_set_profiler(s, NULL, NULL, NULL);
  return st;
}
