/*
 * trainer_lm.h - the language-model part of the training loop (internal to
 * runtime/trainer.c): batches of random token windows (nanoGPT's
 * get_batch) from a text file or uint16 .bin files (datasets/tokens.h), and
 * evaluation as nanoGPT's estimate_loss.
 *
 * Dimension letters: B windows per batch (the batch size), T tokens per
 * window (the block size: the model input's dim 1), V the vocabulary (the
 * prediction's last dim).
 *
 * The model: training.input takes int64 token ids (B, T) or float32 one-hot
 * rows (B, T, V) (for models without an embedding: id i becomes the row
 * with a 1 at i); training.target takes int64 next tokens (B, T);
 * training.prediction is the logits (B, T, V). An epoch of token data is
 * floor(train tokens / (B * T)) batches (at least 1): as many tokens as the
 * split holds, drawn at random offsets; --max-steps usually ends the run
 * first, as nanoGPT's max_iters does.
 */
#ifndef GCC_RUNTIME_TRAINER_LM_H
#define GCC_RUNTIME_TRAINER_LM_H

#include "runtime/trainer.h"

typedef struct gcc_lm_source gcc_lm_source;

/* Whether `dataset` (training.dataset) is a token data set: "text" or
 * "tokens". */
int gcc_lm_dataset(const char *dataset);

/* Opens cfg->data_dir (the text file, or the folder of train.bin and
 * val.bin) for `model`, checking the model's input, target and prediction
 * shapes, --block-size (cfg->block_size: 0 or the input's T) and, for
 * text, that the file's vocabulary fits the model's V and is the one the
 * model carries (training.vocab). Errors name the file or the value. */
gcc_status gcc_lm_source_open(const gcc_graph *model, const gcc_train_config *cfg,
                              gcc_lm_source **out, gcc_diag *d);
void gcc_lm_source_free(gcc_lm_source *lm);

int64_t gcc_lm_batches_per_epoch(const gcc_lm_source *lm);
/* Bytes of one row (window) of the input and of the target buffers. */
size_t gcc_lm_x_row(const gcc_lm_source *lm);
size_t gcc_lm_y_row(const gcc_lm_source *lm);
int64_t gcc_lm_block_size(const gcc_lm_source *lm);

/* Training batch number `index` of the run (epoch * batches per epoch +
 * batch): B windows at offsets drawn from gcc_rng_seed(seed ^
 * GCC_TOKENS_TRAIN_SALT, index); with --grad-accum K (cfg->grad_accum),
 * K micro-batches of B windows one after another, micro-batch k drawn from
 * gcc_rng_seed(seed ^ GCC_TOKENS_TRAIN_SALT, index * K + k) (*rows = K * B;
 * an epoch is then floor(train tokens / (K * B * T)) batches); *x and *y
 * point into the source's buffers until the next call. */
gcc_status gcc_lm_train_batch(gcc_lm_source *lm, int64_t index, const void **x, const void **y,
                              int64_t *rows, gcc_diag *d);

/* nanoGPT's estimate_loss at optimizer step `step`: the mean of the mean
 * losses of cfg->eval_batches batches of each split, drawn from
 * gcc_rng_seed(seed ^ GCC_TOKENS_EVAL_SALT, step * 2 + split), run by the
 * evaluation plan (Dropout off, as model.eval()). Data-parallel: each rank
 * runs its share of every batch; the sums are all-reduced. */
gcc_status gcc_lm_estimate_loss(gcc_lm_source *lm, gcc_session *s, const gcc_train_config *cfg,
                                int64_t step, double *train_loss, double *val_loss, gcc_diag *d);

#endif /* GCC_RUNTIME_TRAINER_LM_H */
