/*
 * recipe.h - a training recipe given on a command line (gcc-train's and
 * gcc-import's --loss, --optimizer, --lr, ... flags), turned into the
 * TrainingSpec of graph.proto: built on an inference model (an imported
 * ONNX file: a loss node and a target input are added) or laid over the
 * spec a native .pb already carries.
 *
 * Semantics follow PyTorch: --loss cross-entropy is nn.CrossEntropyLoss
 * (logits (N, C), int64 class indices (N), mean over the batch; over
 * sequences, logits (B, T, V) and next tokens (B, T), the mean over the
 * B*T tokens as F.cross_entropy(logits.view(-1, V), targets.view(-1)):
 * the graph gets Reshape views to (B*T, V) and (B*T) before the
 * SoftmaxCrossEntropy, which keeps its (N, C) form); --loss
 * mse is nn.MSELoss (float32 target of the prediction's shape, mean);
 * --optimizer sgd|adam|adamw is torch.optim.SGD|Adam|AdamW with their
 * documented defaults (Adam: lr 1e-3, betas (0.9, 0.999), eps 1e-8; AdamW
 * the same and weight_decay 1e-2, decoupled); --lr-schedule step:S[:G] is
 * torch.optim.lr_scheduler.StepLR(step_size=S, gamma=G, default 0.1) and
 * cosine[:T] CosineAnnealingLR(T_max=T, default the epochs, eta_min=0),
 * both stepped once per epoch; warmup-cosine:W:M:MIN nanoGPT's get_lr
 * (linear warmup over W optimizer steps, cosine to MIN at step M, MIN
 * after), set before every optimizer step. --betas B1,B2 are Adam's
 * betas; --weight-decay-on matrices|all chooses the parameters weight
 * decay applies to (matrices: those of >= 2 dims, nanoGPT's
 * configure_optimizers, the default of --optimizer adamw; all: every
 * parameter, torch.optim's default and that of sgd and adam);
 * --clip-grad-norm MAX is torch.nn.utils.clip_grad_norm_(params, MAX)
 * before every update (under fp16 loss scaling after scaler.unscale_).
 *
 * Every error is GCC_ERR_INVALID_ARGUMENT with a message naming the flag
 * at fault (a command line maps it to exit status 2), found before any
 * data is read: values in gcc_recipe_set, combinations in
 * gcc_recipe_check, what does not fit the model in gcc_recipe_apply.
 */
#ifndef GCC_GRAPH_RECIPE_H
#define GCC_GRAPH_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"
#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the flags asked for; gcc_recipe_init marks everything "not given". */
typedef struct gcc_recipe {
  const char *loss;        /* "cross-entropy" | "mse" | NULL */
  const char *optimizer;   /* "sgd" | "adam" | "adamw" | NULL */
  const char *lr_schedule; /* --lr-schedule as given, or NULL */
  gcc_lr_schedule sched;   /* ... parsed */
  const char *dataset;     /* "mnist" | "cifar10" | "npy" | "text" | "tokens" | NULL */
  int has_lr, has_momentum, has_weight_decay, nesterov, has_betas, has_clip;
  float lr, momentum, weight_decay, beta1, beta2, clip;
  const char *decay_on;       /* --weight-decay-on: "matrices" | "all" | NULL */
  int64_t batch_size, epochs; /* -1: not given */
  int has_seed;
  uint64_t seed;
  int n_mean, n_std; /* --mean, --std: torchvision Normalize per channel */
  float mean[GCC_MAX_CHANNELS], std[GCC_MAX_CHANNELS];
} gcc_recipe;

void gcc_recipe_init(gcc_recipe *r);

/* Whether any flag that builds or changes a spec was given. */
int gcc_recipe_given(const gcc_recipe *r);

/* Sets flag `flag` ("--lr", without a value for "--nesterov") from `value`
 * (the string stays referenced). Errors name the flag and the value:
 * "--lr '-1': expected a finite number > 0". */
gcc_status gcc_recipe_set(gcc_recipe *r, const char *flag, const char *value, gcc_diag *d);

/* The combinations that are wrong whatever the model: --momentum or
 * --nesterov with adam, --betas with sgd, --nesterov without momentum. */
gcc_status gcc_recipe_check(const gcc_recipe *r, gcc_diag *d);

/* A copy of `model` with the recipe applied, checked as a model file would
 * be (serialized and parsed back), into *out.
 *
 * A model without a training spec needs --loss; the loss is added on the
 * model's only output (the prediction) with a new graph input "target"
 * (cross-entropy: int64 (N), or (B, T) for logits (B, T, V); mse: float32
 * of the prediction's shape);
 * the model's only graph input is the spec's input; the rest defaults to
 * sgd (which needs --lr), batch 64, 1 epoch, dataset mnist, seed 0.
 * A model with a spec keeps everything not given; --loss must then name
 * the loss it has, and an optimizer changed to one of another kind takes
 * that kind's defaults for what is not given. */
gcc_status gcc_recipe_apply(const gcc_graph *model, const gcc_recipe *r, gcc_graph **out,
                            gcc_diag *d);

/* The learning rate of epoch `epoch` (0-based) under the spec's schedule:
 * the optimizer's lr without one. StepLR: lr * gamma^floor(e / step_size);
 * CosineAnnealingLR: eta_min + (lr - eta_min) * (1 + cos(pi * e / T)) / 2
 * with T = t_max, or the spec's epochs when t_max is 0 (PyTorch's closed
 * forms, equal to its recursive updates to rounding). */
double gcc_lr_at_epoch(const gcc_training *t, int64_t epoch);

/* The T_max a cosine schedule runs with (t_max, else the epochs), a
 * warmup-cosine schedule's MAX_STEPS; 0 for other schedules. */
int64_t gcc_lr_schedule_t_max(const gcc_training *t);

/* Whether the spec's schedule is set per optimizer step (warmup-cosine)
 * rather than per epoch. */
int gcc_lr_schedule_per_step(const gcc_training *t);

/* The learning rate of optimizer step `it` (0-based: the steps taken
 * before it) under a per-step schedule, nanoGPT's get_lr (float64):
 * it < W: lr * (it + 1) / (W + 1); it > M: MIN; else MIN + (lr - MIN) *
 * (1 + cos(pi * (it - W) / (M - W))) / 2. The optimizer's lr for other
 * schedules. */
double gcc_lr_at_step(const gcc_training *t, int64_t it);

/* "none", "step:30:0.1", "cosine:90", "warmup-cosine:100:5000:0.0001"
 * into buf. */
const char *gcc_lr_schedule_str(const gcc_training *t, char *buf, size_t cap);

/* One line saying the optimizer recipe of `g`'s training spec (no
 * newline), for run headers: "optimizer adamw: betas (0.9, 0.95), eps
 * 1e-08, weight decay 0.1 on 4 tensors of >= 2 dims (1,234 parameters),
 * none on 5 others (56 parameters); clip-grad-norm 1; lr schedule
 * warmup-cosine:100:5000:0.0001 by optimizer step". The parameter counts
 * are those of the trained parameters, as nanoGPT's configure_optimizers
 * prints them. */
const char *gcc_recipe_describe(const gcc_graph *g, char *buf, size_t cap);

/* "sgd", "adam" or "adamw". */
const char *gcc_optimizer_name(const gcc_optimizer *o);

#ifdef __cplusplus
}
#endif

#endif /* GCC_GRAPH_RECIPE_H */
