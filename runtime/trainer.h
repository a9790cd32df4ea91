/*
 * trainer.h - the training loop of gcc-train: epochs of shuffled,
 * normalised batches (MNIST from IDX files, CIFAR-10 from its binary
 * batches, .npy arrays, or data carried inline in the model), a log line
 * every N batches, evaluation of the forward graph on the test set after
 * every epoch, and timing. Token data for language models (random windows,
 * nanoGPT's estimate_loss) is runtime/trainer_lm.h's.
 *
 * Output imitates the PyTorch tutorials: "[epoch, batch] loss: x" lines,
 * then per epoch the test accuracy and loss; a progress bar instead of the
 * per-batch lines when `progress` is set (a TTY).
 */
#ifndef GCC_RUNTIME_TRAINER_H
#define GCC_RUNTIME_TRAINER_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/session.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_train_config {
  const char *data_dir;        /* directory of the MNIST IDX files ("mnist" dataset) or of the
                             CIFAR-10 binary batches ("cifar10") */
  int64_t epochs;              /* >= 0 */
  int64_t batch_size;          /* > 0 */
  uint64_t seed;               /* shuffling */
  int64_t log_every;           /* batches between loss lines; 0 = never */
  int64_t max_steps;           /* stop after this many optimizer steps in all; 0 = no limit */
  int64_t eval_batch;          /* batch size of evaluation (> 0) */
  int quiet;                   /* only the final line */
  int progress;                /* draw a progress bar on `out` (a TTY) */
  int progress_columns;        /* its width; 0: the terminal's (TIOCGWINSZ on `out`),
                                  else $COLUMNS, else 80 */
  FILE *out;                   /* where the log goes (stdout) */
  volatile sig_atomic_t *stop; /* set asynchronously (SIGINT): stop after this batch */
  /* --dataset-on-device on a GPU session: 0 off, 1 on (an error if it does
   * not fit), 2 auto (on when the normalised training set takes at most a
   * quarter of the free device memory; MNIST's 188 MB does on any GPU).
   * The set is uploaded once, each epoch's order once per epoch, and batches
   * are gathered on the device: no H2D per step. MNIST datasets only. */
  int dataset_on_device;
  int crop_pad, flip;     /* --augment crop:N,flip on the training loader
                         (datasets/dataloader.h gcc_dataloader_options) */
  FILE *note;             /* where the dataset-on-device decision is said (stderr) */
  gcc_profiler *profiler; /* --profile: non-NULL records the run on a "main" track
                             (steps, ops, waits for a batch, epochs, evaluations)
                             and on one track per data-loader thread; see
                             profile.h. The caller writes it afterwards. */
  /* If not NULL, called for every batch of every evaluation with the
   * prediction tensor (float32 (rows, C) for a classifier; valid during the
   * call only). `first_row` is the index of the batch's first test sample:
   * 0 starts a new evaluation, so the last calls describe the final one
   * (gcc-train --predictions). */
  void (*on_eval_batch)(void *user, int64_t first_row, const gcc_tensor *pred, int64_t rows);
  void *eval_user;
  int64_t show_predictions; /* > 0: after the last evaluation, print the ground truth and
                               the predicted class of the first N test images, with class
                               names ("GroundTruth:  cat ship ship plane", then
                               "Predicted:  ..."), as the CIFAR-10 tutorial does */
  /* After the last evaluation of a classifier (int64 labels, float32
   * (rows, C) predictions): per_class prints the accuracy of every class as
   * the CIFAR-10 tutorial does ("Accuracy for class: plane is 57.6 %"; class
   * names for CIFAR-10, the index otherwise): 0 never, 1 always, 2 (auto)
   * when C <= GCC_TRAIN_PER_CLASS_AUTO_MAX. confusion_matrix != 0 prints the
   * C x C counts (rows: true class, columns: predicted class, the argmax,
   * first on ties). Labels outside [0, C) (an ignore_index) are not
   * counted. */
  int per_class;
  int confusion_matrix;
  /* --log-dir: if not NULL, called with every scalar of the run, `step`
   * the optimizer steps so far: "train/loss" (the mean over the last
   * scalar_every steps, > 0) and "train/lr" every scalar_every steps; after
   * each evaluation "test/loss", "test/accuracy" (a fraction; classifiers
   * only; "train-set/..." for an inline data set, evaluated on itself) and
   * "train/samples_per_sec" (the epoch's, when it could be timed), and
   * under fp16 loss scaling "train/loss_scale" and "train/skipped_steps"
   * (the scale and the steps skipped so far). A status
   * other than GCC_OK stops training with it. */
  gcc_status (*on_scalar)(void *user, const char *tag, int64_t step, double value, gcc_diag *d);
  void *scalar_user;
  int64_t scalar_every;
  /* Checkpoints (runtime/checkpoint.h): into checkpoint_dir (NULL: none)
   * every checkpoint_every optimizer steps (> 0), or after every epoch's
   * evaluation (-1); the newest keep_checkpoints (>= 1) stay. */
  const char *checkpoint_dir;
  int64_t checkpoint_every;
  int keep_checkpoints;
  /* Continue from this checkpoint (the caller checked it against the model
   * and recipe with gcc_checkpoint_check): its arena, step count and
   * position in the data; max_steps counts the steps before it too. */
  const struct gcc_checkpoint *resume;
  /* Data-parallel training (runtime/comm.h; the session made with the same
   * communicator): with comm->size > 1, batch_size is the global batch;
   * every rank reads the same shuffled order (same seed) and runs its
   * contiguous share of each global batch (gcc_comm_share: shares differ by
   * at most one row; a rank without rows runs a placeholder row weighted 0);
   * the gradients are averaged over the global batch by the plan's
   * AllReduce nodes; the parameters are broadcast from rank 0 before the
   * first step and compared (a hash) on every rank after it; the logged
   * losses are the global batch's (each rank's mean loss weighted by its
   * share, summed over the ranks); evaluation batches are split the same
   * way and the loss sums and counts summed over the ranks (unless
   * eval_on_root is set: then rank 0 evaluates every row and the others
   * none). Only rank 0 writes checkpoints; the caller makes the other ranks
   * quiet. NULL: one process. */
  struct gcc_comm *comm;
  /* Data-parallel: rank 0 evaluates every row (its on_eval_batch or
   * show_predictions want them all). The same on every rank, as the ranks'
   * choice of rows must agree. */
  int eval_on_root;
  /* If not NULL, called after every optimizer step is issued (`step`: the
   * steps taken so far, this one included); an error stops training with
   * it. gcc-train's test-only fault injection (GCC_TRAIN_TEST_FAULT). */
  gcc_status (*after_step)(void *user, int64_t step, gcc_diag *d);
  void *step_user;
  /* If not NULL, called once the training and test data (and `resume`) are
   * read and checked, before the first step; an error stops the run with
   * it, nothing trained. gcc-train checks there that no output replaces a
   * file the run read (graph/outfile.h gcc_outfiles_check_inputs). */
  gcc_status (*on_inputs_read)(void *user, gcc_diag *d);
  void *inputs_user;
  /* Token data (training.dataset "text" or "tokens"; runtime/trainer_lm.h):
   * data_dir is the text file or the folder of train.bin and val.bin;
   * block_size 0 or the model input's T (--block-size); every eval_every
   * optimizer steps (0: only after each epoch, i.e. at the end of the run)
   * the training and validation losses are estimated as nanoGPT's
   * estimate_loss over eval_batches (>= 1) random batches of each split,
   * printed ("step N: train loss X, val loss Y") and given to on_scalar as
   * "train/eval_loss" and "val/loss". No accuracy is computed. */
  int64_t block_size, eval_every, eval_batches;
  /* --grad-accum K (token data; <= 1: none): each optimizer step takes K
   * micro-batches of batch_size windows, micro-batch k of step n drawn from
   * (seed, n * K + k) (trainer_lm.h), handed to the session (whose
   * grad_accum must be K) as one batch of K * batch_size rows; steps,
   * evaluation, checkpoints and the lr schedule count optimizer steps. */
  int64_t grad_accum;
} gcc_train_config;

/* --per-class auto prints the per-class accuracy of sets with at most this
 * many classes. */
#define GCC_TRAIN_PER_CLASS_AUTO_MAX 20

/* Training that took less than this (seconds) is not given a rate: the
 * report's samples_per_sec stays 0 and the log says "too short to time". */
#define GCC_TRAIN_MIN_TIMED_SECONDS 1e-3

typedef struct gcc_train_report {
  int64_t epochs_done, steps, samples;
  double train_seconds;   /* training only: batching + steps, evaluation excluded */
  double samples_per_sec; /* 0 when no step ran or training took under
                             GCC_TRAIN_MIN_TIMED_SECONDS */
  double last_epoch_seconds;
  double test_accuracy; /* fraction, or -1 when not a classification task */
  double test_loss;     /* mean over test samples */
  int64_t test_samples;
  double final_train_loss; /* mean loss of the last epoch */
  int dataset_on_device;   /* 1 when the training set was batched on the device */
  int resume_refused;      /* 1 when cfg->resume's position is not one of this run's
                              (gcc_checkpoint_check_position's error; nothing ran) */
  /* token data: 1, the tokens per sample (the block size T; a sample is one
   * window), and the last estimate of the training loss (test_loss holds
   * the validation loss's) */
  int language_model;
  int64_t tokens_per_sample;
  double eval_train_loss;
} gcc_train_report;

/* Trains `s` (built from `model`) as `cfg` says. Errors: dataset errors
 * (GCC_ERR_IO / GCC_ERR_PARSE naming the file), those of
 * gcc_checkpoint_check_position for cfg->resume (report->resume_refused
 * set), step errors, and
 * GCC_ERR_INTERRUPTED when *cfg->stop was set (the report then covers the
 * steps done). */
gcc_status gcc_train_run(gcc_session *s, const gcc_graph *model, const gcc_train_config *cfg,
                         gcc_train_report *report, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_TRAINER_H */
