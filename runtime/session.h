/*
 * session.h - a training/inference session over one model: the persistent
 * arena (parameters, then their gradients, then optimizer state, each
 * section contiguous so that a data-parallel all-reduce can later run over
 * the flat gradient section in one call) and the compiled plans, one per
 * (mode, batch size) and compiled on first use (the last batch of an epoch
 * is usually smaller).
 *
 * A training step is a function of the session and one batch, so that a
 * data-parallel rank can call it.
 */
#ifndef GCC_RUNTIME_SESSION_H
#define GCC_RUNTIME_SESSION_H

#include <stdint.h>
#include <stdio.h>

#include "graph/ir.h"
#include "runtime/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_session_options {
  int threads;            /* OpenBLAS threads at most (>= 1) */
  gcc_optimizer opt;      /* the optimizer actually used (spec + flags) */
  const char *dump_after; /* --dump-after=PASS for the first plan compiled, or NULL */
  FILE *dump_file;
  /* A CUDA device: `backend` (runtime/cuda/cuda_backend.h, or a test backend)
   * and `device` (GCC_DEV_CUDA(n)) with the plan configuration (its sm,
   * kernel compiler, CUDA Graphs; the session sets the device, threads and
   * the ring); NULL backend: the CPU. On a device the persistent arena is
   * mirrored there (uploaded once at creation); the host copy is refreshed
   * on demand (gcc_session_param, _grad, _export). `max_pending` bounds the
   * steps whose loss is not collected yet (gcc_session_train_step_async):
   * the read-back ring of each plan. */
  const gcc_device_backend *backend;
  int device;
  gcc_plan_config plan;
  int max_pending; /* >= 1; 0: 1 */
  /* Data-parallel training (runtime/comm.h): with comm->size > 1 every
   * training plan all-reduces its gradients over the ranks, in buckets of
   * bucket_bytes (<= 0: DistributedDataParallel's 25 MiB) in the order the
   * backward pass produces them. NULL: one process. */
  struct gcc_comm *comm;
  int64_t bucket_bytes;
  /* --precision (graph/ir.h gcc_precision): the precision every plan of the
   * session is compiled for (gcc_options.precision); 0: float32 */
  int precision;
  /* --no-deterministic: gcc_options.nondeterministic of every plan (1:
   * cuDNN may choose non-deterministic convolution algorithms) */
  int nondeterministic;
  /* --layout: gcc_options.layout of every plan (passes/passes.h
   * gcc_layout_choice; 0: auto) */
  int layout;
  /* gcc_options.param_copy_casts of every plan (the per-step Casts of the
   * parameters instead of the copies the updates write; for tests) */
  int param_copy_casts;
  /* --grad-accum K (<= 1: none): every training step is K micro-steps, as
   * PyTorch's loop of K (loss / K).backward() then one optimizer.step(): the
   * step's rows are K micro-batches of rows / K, run one after another by
   * the plans of the FIRST, MIDDLE and LAST micro-step (passes/passes.h
   * gcc_accum_role), which write, add to, and then clip and apply the
   * gradients; the optimizer, fp16 loss scaling's unscale/skip decision and
   * the step count act once per step; the step's loss is the mean of the K
   * micro-batches' losses (the mean over all K * rows / K rows). Dropout
   * draws each micro-step's masks from the micro-step's own index
   * (step * K + k). Not with data-parallel training (comm of more than one
   * rank: GCC_ERR_UNSUPPORTED from gcc_session_create). */
  int grad_accum;
} gcc_session_options;

typedef struct gcc_session gcc_session;

/* Creates a session: allocates the persistent arena and copies the
 * model's parameters into it; with --precision bf16|fp16 (o->precision)
 * also the parameters' 16-bit copies (outside the arena, rounded to nearest
 * even from the parameters), which each training step's optimizer updates
 * rewrite and the next step's GEMMs and convolutions read (passes/autocast.c).
 * The model must outlive the session.
 * Errors: GCC_ERR_OUT_OF_MEMORY; GCC_ERR_INVALID_GRAPH if the model has no
 * training spec. */
gcc_status gcc_session_create(const gcc_graph *model, const gcc_session_options *o,
                              gcc_session **out, gcc_diag *d);
void gcc_session_destroy(gcc_session *s);

/* One optimizer step on a batch of `rows` samples. `input` holds rows x
 * (input shape without its batch dim) elements of the input's dtype,
 * `target` likewise for the target. Writes the batch loss (before the
 * update) to *loss. With gradient accumulation (grad_accum K > 1) the rows
 * are K micro-batches of rows / K (GCC_ERR_INVALID_ARGUMENT when K does not
 * divide rows) and *loss is the mean of their losses. Errors: compile errors (first batch of a size), data
 * errors (GCC_ERR_INVALID_ARGUMENT: a label out of range), and
 * GCC_ERR_NUMERIC if the loss is NaN or infinite (the parameters have then
 * been updated with it: stop training). */
gcc_status gcc_session_train_step(gcc_session *s, const void *input, const void *target,
                                  int64_t rows, float *loss, gcc_diag *d);

/* One optimizer step that does not wait for its loss (on a GPU the step is
 * only queued). The losses come back, in step order, from
 * gcc_session_collect_losses, which must be called before more than
 * gcc_session_max_pending() steps are pending. Errors: as
 * gcc_session_train_step except GCC_ERR_NUMERIC (reported when collected);
 * GCC_ERR_INVALID_ARGUMENT when too many steps are pending. */
gcc_status gcc_session_train_step_async(gcc_session *s, const void *input, const void *target,
                                        int64_t rows, gcc_diag *d);

/* Data-parallel training: the next training steps run `shard_rows` rows
 * of a global batch of `global_rows` (the caller passes the rows it runs;
 * shard_rows 0 with a placeholder batch of 1 row: this rank has no rows of
 * this global batch and contributes nothing to its gradient). Until called
 * (or with global_rows 0) a step is a whole batch. */
void gcc_session_set_shard(gcc_session *s, int64_t shard_rows, int64_t global_rows);

/* Data-parallel training: the persistent arena (parameters, gradients,
 * optimizer state) of rank 0 is copied to every rank (a broadcast through
 * the session's communicator; on a device session downloaded, broadcast
 * and uploaded), so that every rank starts identical. GCC_OK at once
 * without a communicator of more than one rank; the communicator's and the
 * device's errors. */
gcc_status gcc_session_broadcast_params(gcc_session *s, gcc_diag *d);

/* A 64-bit hash (FNV-1a) of the parameters' bytes (device sessions: after
 * refreshing the host copy): equal on every rank exactly when the ranks'
 * parameters are bitwise equal (up to collisions). Device errors. */
gcc_status gcc_session_param_hash(gcc_session *s, uint64_t *hash, gcc_diag *d);

/* --dataset-on-device (device sessions only). Uploads the whole training
 * set once: `x` holds n rows of the training input (its per-sample numel
 * of float32, normalised as the data loader does), `y` n int64 targets.
 * Errors: GCC_ERR_INVALID_ARGUMENT on a CPU session or an input/target
 * that is not float32/int64; GCC_ERR_OUT_OF_MEMORY naming the bytes
 * needed and free on the device; device errors. */
gcc_status gcc_session_upload_dataset(gcc_session *s, const float *x, const int64_t *y, int64_t n,
                                      gcc_diag *d);
/* Uploads the epoch's sample order (n int64 indices into the uploaded
 * set; one H2D per epoch). */
gcc_status gcc_session_set_order(gcc_session *s, const int64_t *perm, gcc_diag *d);
/* gcc_session_train_step_async on the batch of samples perm[first ..
 * first + rows) of the uploaded set, gathered on the device. */
gcc_status gcc_session_train_step_uploaded(gcc_session *s, int64_t first, int64_t rows,
                                           gcc_diag *d);
/* Free and total bytes of the session's device (GCC_ERR_INVALID_ARGUMENT
 * on a CPU session). */
gcc_status gcc_session_device_memory(gcc_session *s, size_t *free_bytes, size_t *total_bytes,
                                     gcc_diag *d);

/* Waits for the pending steps and writes their losses (step order) to
 * losses[0 .. *n); `cap` must be >= gcc_session_max_pending(s). Errors:
 * GCC_ERR_NUMERIC naming the step whose loss is NaN or infinite; a bad
 * label found by a loss kernel (GCC_ERR_INVALID_ARGUMENT); device errors. */
gcc_status gcc_session_collect_losses(gcc_session *s, float *losses, int cap, int *n, gcc_diag *d);
int gcc_session_max_pending(const gcc_session *s);

/* Forward only: the batch loss and, for classification (prediction of
 * shape (N, C) with integer targets), the number of rows whose argmax
 * equals the target in *correct (-1 otherwise). *pred_out, if not NULL,
 * receives a pointer to the prediction tensor, valid until the next call. */
gcc_status gcc_session_eval_batch(gcc_session *s, const void *input, const void *target,
                                  int64_t rows, float *loss, int64_t *correct,
                                  const gcc_tensor **pred_out, gcc_diag *d);

/* fp16 loss scaling (gcc_session_options.opt.scaler): where the arena's
 * last GCC_ARENA_ALIGN-byte block holds its float32 scalars, so that a
 * checkpoint of the arena carries GradScaler's state (state_dict's `scale`
 * and `_growth_tracker`; growth_factor, backoff_factor and growth_interval
 * are the recipe's) and a resumed run continues bit for bit. */
enum {
  GCC_SESSION_SCALER_SCALE,
  GCC_SESSION_SCALER_TRACKER,
  GCC_SESSION_SCALER_STEPS,
  GCC_SESSION_SCALER_SCRATCH = 4, /* and 5: the CUDA check kernel's, zero between steps */
  /* the configuration, so that a checkpoint says it (GradScaler's
   * state_dict keeps it too): growth_factor, backoff_factor,
   * growth_interval, and the mode (graph/ir.h gcc_loss_scale_mode) */
  GCC_SESSION_SCALER_GROWTH_FACTOR = 8,
  GCC_SESSION_SCALER_BACKOFF_FACTOR,
  GCC_SESSION_SCALER_GROWTH_INTERVAL,
  GCC_SESSION_SCALER_MODE
};

typedef struct gcc_loss_scale_state {
  int on;                /* 0: the session does no loss scaling (the rest 0) */
  float scale;           /* the current scale (GradScaler.get_scale()) */
  float growth_tracker;  /* good steps since the scale last changed */
  int64_t applied_steps; /* optimizer steps that updated the parameters */
  int64_t skipped_steps; /* steps skipped for Inf/NaN gradients (steps - applied) */
} gcc_loss_scale_state;

/* GCC_OK when persistent arena `arena` of `bytes` (a checkpoint's, read
 * from `path`) holds the same loss scaling configuration as session s
 * (mode, growth_factor, backoff_factor, growth_interval); else
 * GCC_ERR_INVALID_ARGUMENT naming what differs and both values. */
gcc_status gcc_session_check_loss_scale(const gcc_session *s, const void *arena, size_t bytes,
                                        const char *path, gcc_diag *d);

/* The loss scaling state after the steps issued so far (a device session
 * waits for them and refreshes the host copy of the arena). Errors: the
 * device's. */
gcc_status gcc_session_loss_scale(gcc_session *s, gcc_loss_scale_state *out, gcc_diag *d);

/* A copy of the model whose initializers hold the current parameters
 * (the trained model to save). Errors: the device's (downloading the
 * parameters), GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_session_export(gcc_session *s, gcc_graph **out, gcc_diag *d);

/* gcc_session_export without copying the parameters: *out's PARAM values
 * read the session's host arena in place (data_borrowed, graph/ir.h), so
 * *out is valid only until the next step, gcc_session_restore,
 * gcc_session_set_param or gcc_session_destroy; freeing it leaves the arena
 * alone. For writing the trained model or a checkpoint right away without
 * a second copy of the weights (GPT-2 124M: 498 MB). Errors: as
 * gcc_session_export. */
gcc_status gcc_session_export_view(gcc_session *s, gcc_graph **out, gcc_diag *d);

/* Makes `model`'s parameters read the session's host arena in place, its
 * own copies of them freed: the weights are held once (GPT-2 124M: 498 MB
 * less). `model` must be the graph the session was created from. From then
 * on its PARAM values hold the session's current parameters (on a GPU
 * session: as of the last download, which gcc_session_export and
 * gcc_session_export_view make), they are borrowed (graph/ir.h: freeing the
 * model leaves them alone), and they must not be read after
 * gcc_session_destroy. Errors: GCC_ERR_INVALID_ARGUMENT when `model` is not
 * the session's. */
gcc_status gcc_session_lend_params(gcc_session *s, gcc_graph *model, gcc_diag *d);

/* The current value of parameter `name`: *data points at its numel floats
 * in the session's host arena (numel may be NULL), valid until the session
 * is destroyed. On a device session this waits for the device and
 * refreshes the host copy first (writes to it are not sent back: use
 * gcc_session_set_param). On the CPU, writes to it are the parameter's new
 * value, and with --precision bf16|fp16 the next training step first remakes
 * the 16-bit copies of the parameters from them. Errors:
 * GCC_ERR_INVALID_ARGUMENT when the model has no parameter `name`; the
 * device's error (GCC_ERR_DEVICE, ...) when the copy back fails, its
 * message prefixed with the parameter. *data is NULL after an error. */
gcc_status gcc_session_param(gcc_session *s, const char *name, float **data, int64_t *numel,
                             gcc_diag *d);

/* Sets parameter `name` to data[0 .. numel) (copied; on a device session
 * uploaded), and with --precision bf16|fp16 its 16-bit copy, which the next
 * training step's GEMMs read, to it rounded to nearest even. Errors
 * (GCC_ERR_INVALID_ARGUMENT, naming the parameter): no parameter `name`,
 * numel not its element count, steps pending; device errors. */
gcc_status gcc_session_set_param(gcc_session *s, const char *name, const float *data, int64_t numel,
                                 gcc_diag *d);

/* The gradient of parameter `name` from the last training step, as
 * gcc_session_param (same errors). Under fp16 loss scaling it is the
 * scaled gradient (times the step's scale, Inf/NaN on a skipped step): the
 * optimizer unscales as it reads, PyTorch's unscale_ writes .grad back. */
gcc_status gcc_session_grad(gcc_session *s, const char *name, float **data, int64_t *numel,
                            gcc_diag *d);

/* Profiling (gcc-train --profile): from now on, every training step and
 * evaluation batch records a "step" / "eval" event on `track` (args: the
 * optimizer step / a count of evaluation batches),
 * every plan compile a "compile" event, and every plan (compiled already or
 * later) its per-node events (gcc_plan_set_profiler, labelled "train bN" /
 * "eval bN"; on a GPU, every launch timed with CUDA events). NULL turns it off; the profiler must outlive its use here.
 * Errors: GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_session_set_profiler(gcc_session *s, gcc_profiler *prof, gcc_prof_track *track,
                                    gcc_diag *d);

/* GCC_ERR_NUMERIC naming the first parameter (in the model's order) that
 * holds a NaN or Inf, its first such element and the optimizer steps taken;
 * GCC_OK when all are finite. On a device session this waits for the device
 * and refreshes the host copy first (its errors), then scans every
 * parameter. On the CPU the optimizer updates check what they write
 * (runtime/cpu/cpu_optim.c): when all of them since the last check reported
 * finite results and no parameter was set from outside the steps since
 * (gcc_session_param, gcc_session_set_param, gcc_session_restore,
 * gcc_session_broadcast_params), only the parameters no update writes (the
 * state values) are scanned; otherwise all are, so the message is the
 * same. */
gcc_status gcc_session_check_params(gcc_session *s, gcc_diag *d);

/* The persistent arena (parameters, gradients, optimizer state; the
 * session's layout), valid until the next step: what a checkpoint keeps. On
 * a device session this waits for the device and refreshes the host copy
 * (its errors). */
gcc_status gcc_session_arena(gcc_session *s, const void **arena, size_t *bytes, gcc_diag *d);

/* Resumes from a checkpoint: the persistent arena becomes `arena` (`bytes`
 * must be gcc_session_persistent_bytes; on a device, uploaded; with
 * --precision bf16|fp16 the parameters' 16-bit copies, which the arena does
 * not hold, are made from its parameters) and the
 * optimizer step count `steps` (SGD's first-step rule and Adam's bias
 * correction follow it). GCC_ERR_INVALID_ARGUMENT for another size or with
 * steps pending; device errors. */
gcc_status gcc_session_restore(gcc_session *s, const void *arena, size_t bytes, int64_t steps,
                               gcc_diag *d);

/* Optimizer steps taken so far. */
int64_t gcc_session_steps(const gcc_session *s);

/* The learning rate of the following training steps (> 0; an lr
 * schedule's, e.g. graph/recipe.h gcc_lr_at_epoch or gcc_lr_at_step), or 0
 * for the optimizer's own (TrainingSpec's lr). Steps may be pending on a
 * device: each launch takes the lr by value, and a captured CUDA Graph that
 * a new lr drops is freed when its launches complete (cudaGraphExecDestroy
 * of a graph in flight), so a per-step schedule costs no synchronisation
 * (an SGD step is then captured again; Adam's steps are never captured:
 * their bias corrections vary). */
void gcc_session_set_lr(gcc_session *s, float lr);
/* The learning rate the next step uses. */
float gcc_session_lr(const gcc_session *s);

/* Bytes of the persistent arena (parameters + gradients + optimizer state)
 * and of the largest per-step arena compiled so far. */
size_t gcc_session_persistent_bytes(const gcc_session *s);
size_t gcc_session_step_arena_bytes(const gcc_session *s);

/* 1 if the session's plans run on a device (a CUDA backend), else 0. */
int gcc_session_on_device(const gcc_session *s);

/* The plan for `mode` and batch `rows`, compiled if needed (for reports:
 * launches and copies per step, device bytes, CUDA Graph state); owned by
 * the session. With gradient accumulation, the TRAIN plan of `rows` is the
 * LAST micro-step's for micro-batches of `rows` (the FIRST and MIDDLE ones
 * are compiled too). Errors: compile errors. */
gcc_status gcc_session_plan(gcc_session *s, gcc_mode mode, int64_t rows, gcc_plan **out,
                            gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_SESSION_H */
