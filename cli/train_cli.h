/*
 * train_cli.h - what the parts of gcc-train share: the parsed command line
 * (train_args.c: usage, flags, output checks), the compile-only reports
 * (train_dump.c: --dump-placement, --dump-kernels) and the program's
 * process-wide settings (gcc_train.c: signals, communicator, the run).
 */
#ifndef GCC_CLI_TRAIN_CLI_H
#define GCC_CLI_TRAIN_CLI_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "deploy/export.h"
#include "graph/recipe.h"
#include "onnx/model_file.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/placement_report.h"
#include "runtime/session.h"

/* The ranks of `mpirun -np N gcc-train ...` (a world of 1 without mpirun). */
extern gcc_comm *g_comm;
extern int g_no_kernel_cache;  /* --no-kernel-cache */
extern int g_layout;           /* --layout (passes/passes.h gcc_layout_choice; 0: auto) */
extern int g_nondeterministic; /* --no-deterministic (--deterministic: 0, the default) */
/* --loss-scale, --loss-scale-growth-interval: fp16 loss scaling of every
 * training plan (mode NONE: none); set by parse_args */
extern gcc_loss_scale g_loss_scale;

int is_root(void);

/* What the command line asks for (step 1, parse_args). */
typedef struct train_args {
  const char *model_path;
  const char *data_dir, *output, *dump_after;
  int64_t eval_batch, threads, log_every, max_steps, show_predictions;
  int64_t block_size, eval_every, eval_batches; /* token data: --block-size, --eval-every, ... */
  int64_t grad_accum;                           /* --grad-accum K (token data; default 1) */
  int steps_only;    /* token data with --max-steps and no --epochs: run max-steps steps (nanoGPT's
                     max_iters), whatever the epochs of the spec */
  gcc_recipe recipe; /* --loss, --optimizer, --lr, --epochs, --seed ... (graph/recipe.h) */
  int quiet, no_output, device_explicit, dump_placement, strict;
  const char *dump_file, *cuda_arch, *dump_kernels, *profile_path;
  int no_cuda_graph, dataset_on_device, detect_anomaly;
  int device_indexed;          /* --device cuda:N (not plain cuda) */
  int64_t bucket_bytes, ranks; /* --bucket-size-mb (bytes; 0: default), --ranks (0: the world) */
  int per_class, confusion_matrix; /* per_class: 0 off, 1 on, 2 auto */
  int progress;                    /* 0 lines, 1 bar, 2 auto */
  const char *checkpoint_dir, *resume_path, *log_dir;
  int crop_pad, flip;                         /* --augment */
  int precision;                              /* --precision (graph/ir.h gcc_precision) */
  int64_t checkpoint_every, keep_checkpoints; /* every: 0 = not given, -1 = each epoch */
  const char *export_path, *predictions_path;
  const char *export_onnx_path; /* --export-onnx */
  int eval_on_root;             /* --predictions or --show-predictions, known on every rank */
  gcc_device want;              /* --device */
  gcc_dump_format fmt;          /* --dump-placement=FORMAT */
  gcc_export_options eo;        /* --export-archs, --export-batch-sizes */
} train_args;

/* train_args.c */
/* Step 1: the flags into *a, checked. Returns -1 to go on, else the exit
 * status (0 after --help, --version and --list-devices). */
int parse_args(int argc, char **argv, train_args *a);
/* The recipe flags laid over *model (replaced by the result): -1 to go
 * on, else the exit status (2 for a recipe that does not fit the model). */
int apply_recipe(const gcc_recipe *recipe, gcc_graph **model);
/* The default --output: MODEL with .pb replaced by .trained.pb. */
void default_output(const char *model_path, char *buf, size_t cap);
int is_dir(const char *p);

/* train_dump.c */
/* How an ONNX model's BatchNormalizations were imported (empty for a
 * gcc-train model or none). */
const char *batchnorm_note(const gcc_model_info *info, char *buf, size_t cap);
/* --dump-placement and --dump-kernels: compile only, print, run nothing. */
int dump_placement_main(const char *model_path, const gcc_device *want, int device_explicit,
                        int strict, const char *cuda_arch, int fmt, const char *file,
                        const char *kernels_dir, const gcc_recipe *recipe, const char *dump_after,
                        int world_size, int64_t bucket_bytes, int precision, int threads);

#endif /* GCC_CLI_TRAIN_CLI_H */
