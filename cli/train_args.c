/*
 * train_args.c - gcc-train's command line: the usage text, the flags into
 * a train_args (checked), the recipe flags laid over the model, and the
 * outputs checked before anything is read.
 */
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/flags.h"
#include "cli/train_cli.h"
#include "graph/outfile.h"
#include "graph/loader.h"
#include "graph/util.h"
#include "runtime/cuda/arch_check.h"
#include "runtime/cuda/cuda_device.h"

static void usage(FILE *f) {
  fprintf(
      f, "usage: gcc-train MODEL.pb [options]\n"
         "\n"
         "Compiles the model graph (shape inference, autodiff, placement, memory planning)\n"
         "and trains it with the recipe in the model's training spec; flags override it.\n"
         "\n"
         "  --device DEV        cpu, cuda, cuda:N or auto (default auto: a usable CUDA GPU,\n"
         "                      else the CPU, saying why)\n"
         "  --data DIR          the data set's folder: MNIST IDX files (.gz or plain), or\n"
         "                      the CIFAR-10 binary batches (default: data/mnist or\n"
         "                      data/cifar-10-batches-bin, then the same under ../ next to\n"
         "                      the model)\n"
         "  --epochs N          epochs to train (N >= 0)\n"
         "  --batch-size N      training batch size (N > 0)\n"
         "  --eval-batch-size N evaluation batch size (default 1000)\n"
         "\n"
         "The recipe (build the training spec of a model without one, such as an ONNX\n"
         "file, or override the spec of a .pb; PyTorch's semantics):\n"
         "  --loss L            cross-entropy (logits (N, C), int64 labels) or mse (float32\n"
         "                      target of the prediction's shape); needed for a model\n"
         "                      without a spec, whose only output is the prediction\n"
         "  --optimizer O       sgd, adam or adamw (torch.optim.SGD, Adam, AdamW: decoupled\n"
         "                      weight decay, default 0.01; default sgd)\n"
         "  --lr X              learning rate (X > 0; sgd needs it, adam's default 1e-3)\n"
         "  --lr-schedule S     step:STEP[:GAMMA] (StepLR: lr * GAMMA every STEP epochs,\n"
         "                      GAMMA default 0.1), cosine[:T_MAX] (CosineAnnealingLR to\n"
         "                      0 over T_MAX epochs, default the epochs) or\n"
         "                      warmup-cosine:WARMUP:MAX_STEPS:MIN_LR (nanoGPT's get_lr,\n"
         "                      set every optimizer step); kept in checkpoints, resumed at\n"
         "                      the epoch's (step's) lr\n"
         "  --betas B1,B2       Adam's betas, each in [0, 1) (default 0.9,0.999; GPT\n"
         "                      recipes 0.9,0.95)\n"
         "  --weight-decay-on W matrices (parameters of >= 2 dims: weights and\n"
         "                      embeddings, not biases nor norm scales; nanoGPT; the\n"
         "                      default of adamw) or all (torch.optim's; sgd's and adam's)\n"
         "  --clip-grad-norm M  torch.nn.utils.clip_grad_norm_(params, M) before every\n"
         "                      update (M > 0; of the unscaled gradients under fp16)\n"
         "  --momentum X        SGD momentum in [0, 1)\n"
         "  --weight-decay X    L2 weight decay (X >= 0)\n"
         "  --nesterov          SGD with Nesterov momentum (needs --momentum > 0)\n"
         "  --dataset D         mnist, cifar10, npy, text or tokens (default for a new spec:\n"
         "                      mnist); npy:\n"
         "                      --data names a folder of x_train.npy, y_train.npy,\n"
         "                      x_test.npy, y_test.npy or a .npz of them: inputs float32\n"
         "                      of the model input's shape (fed as they are) or uint8\n"
         "                      images (N, H, W), (N, C, H, W) or (N, D) (scaled by\n"
         "                      --mean/--std); targets integer class indices (N) or, for\n"
         "                      --loss mse, float32 of the prediction's shape\n"
         "                      text: --data names a text file (default\n"
         "                      data/shakespeare/input.txt): a character-level corpus whose\n"
         "                      vocabulary is its sorted distinct bytes (kept in the\n"
         "                      trained model for gcc-run --generate), the first 90%% for\n"
         "                      training and the rest for validation (nanoGPT's\n"
         "                      shakespeare_char); tokens: --data names a folder of\n"
         "                      train.bin and val.bin, uint16 token ids (nanoGPT, llm.c).\n"
         "                      A language model takes int64 ids (B, T) (or float32 one-hot\n"
         "                      rows (B, T, V)) and predicts logits (B, T, V); --loss\n"
         "                      cross-entropy is then the mean over the B*T tokens; each\n"
         "                      batch is B windows of T+1 tokens at random offsets from\n"
         "                      --seed (nanoGPT's get_batch), an epoch as many batches as\n"
         "                      the training split has tokens (--max-steps ends a run)\n"
         "  --block-size T      token data: the window length; the model's input fixes it\n"
         "                      (given: checked against it)\n"
         "  --eval-every N      token data: every N steps, and at the end, estimate the\n"
         "                      training and validation loss (nanoGPT's estimate_loss)\n"
         "  --eval-batches K    ... as the mean over K random batches of each split, of\n"
         "                      --batch-size windows (default 200)\n"
         "  --grad-accum K      token data: K micro-batches of --batch-size windows per\n"
         "                      optimizer step, each loss scaled by 1/K, the gradients\n"
         "                      summed (nanoGPT's gradient_accumulation_steps); clipping,\n"
         "                      the update, the lr schedule and the step count act once\n"
         "                      per step (default 1)\n"
         "  --mean M[,M...]     per-channel mean and std: pixels become (p / 255 - mean) /\n"
         "  --std S[,S...]      std (torchvision ToTensor + Normalize)\n"
         "A new spec trains batch 64, 1 epoch, unless --batch-size and --epochs say.\n"
         "An ONNX model given --loss is imported for training: its BatchNormalizations\n"
         "train as nn.BatchNorm2d (batch statistics; running mean and var saved as state);\n"
         "without a recipe (--export, --dump-placement) they are folded into the Conv.\n"
         "\n"
         "  --seed N            shuffling seed\n"
         "  --threads N         CPU threads for GEMMs (default: online CPUs)\n"
         "  --log-every N       print the mean loss every N batches (default 100; 0: never)\n"
         "  --progress MODE     auto (default), bar or lines: a progress bar fitted to the\n"
         "                      terminal's width with elapsed time and ETA (bar; auto on a\n"
         "                      terminal), or the --log-every lines (lines; auto otherwise);\n"
         "                      off a terminal the bar is $COLUMNS (else 80) wide\n"
         "  --max-steps N       stop after N optimizer steps in all (default: no limit)\n"
         "  --show-predictions N\n"
         "                      after the last evaluation, print the ground truth and the\n"
         "                      predicted class of the first N test images\n"
         "  --output FILE       trained model (default: MODEL with .pb replaced by\n"
         "                      .trained.pb); written atomically\n"
         "  --no-output         do not write the trained model\n"
         "  --dump-after PASS   print the IR after PASS (infer, autodiff, autocast,\n"
         "                      placement, copy-insertion, fusion, all)\n"
         "  --dump-placement[=FORMAT]\n"
         "                      compile only and print where every node runs and why, every\n"
         "                      host-device copy and the memory plan; FORMAT is text\n"
         "                      (default), json or dot; needs no GPU\n"
         "  --dump-placement-file FILE\n"
         "                      write that report to FILE (atomically) instead of stdout\n"
         "  --cuda-arch ARCH    the GPU to compile for when none is usable: sm_80, sm_86,\n"
         "                      sm_89 or sm_90 (default sm_90)\n"
         "  --precision P       fp32 (default), tf32 (cuBLASLt multiplies float32 in\n"
         "                      TF32), bf16 or fp16 (torch.autocast: GEMMs read and write\n"
         "                      16 bits and accumulate in float32; reductions, losses and\n"
         "                      the optimizer stay float32, on float32 master weights)\n"
         "  --loss-scale S      fp16 loss scaling: dynamic (default with --precision fp16:\n"
         "                      torch.amp.GradScaler, scale 65536 halved on Inf/NaN\n"
         "                      gradients, whose steps are skipped, doubled after 2000\n"
         "                      good steps), none, or a fixed scale X > 0 (steps with\n"
         "                      Inf/NaN gradients still skipped); fp16 only\n"
         "  --loss-scale-growth-interval N\n"
         "                      good steps before a dynamic scale doubles (default 2000)\n"
         "  --strict-placement  a node the chosen device cannot run is an error instead of\n"
         "                      falling back to the CPU\n"
         "  --dump-kernels DIR  compile only and write the generated CUDA C of the plan\n"
         "                      (DIR/kernels.cu, one NVRTC program) and its launch\n"
         "                      manifest (DIR/manifest.json), compiled by NVRTC to PTX\n"
         "                      (DIR/kernels.ptx) and a cubin for the device's architecture\n"
         "                      (DIR/kernels.sm_XX.cubin); needs --device cuda\n"
         "  --no-kernel-cache   compile with NVRTC without reading or writing the kernel\n"
         "                      cache ($XDG_CACHE_HOME/gcc-train, else ~/.cache/gcc-train)\n"
         "                      nor the cuDNN algorithm choices cached beside it\n"
         "  --deterministic     (default) cuDNN convolutions use only deterministic\n"
         "                      algorithms (the same bits every run, as resumed runs\n"
         "                      promise); the fastest is chosen by timing each one when\n"
         "                      the plan is built on the GPU, cached per shape and GPU\n"
         "  --no-deterministic  also the faster atomics-based ones (results vary run to\n"
         "                      run); --profile prints each shape's algorithms and what\n"
         "                      determinism costs\n"
         "  --layout L          auto (default), nchw or nhwc: the memory order of the\n"
         "                      convolution chains on a GPU. nhwc runs convolutions,\n"
         "                      poolings and the elementwise ops between them\n"
         "                      channels-last (cuDNN's tensor-core kernels want it),\n"
         "                      with explicit transposes at the chains' boundaries\n"
         "                      (--dump-placement lists them); auto: nhwc for\n"
         "                      --precision tf32, bf16 and fp16, nchw for fp32\n"
         "  --no-cuda-graph     on a GPU, issue every step instead of capturing it into a\n"
         "                      CUDA Graph and replaying it\n"
         "  --list-devices      print the CPU and every CUDA device (or why none is usable)\n"
         "                      and exit\n"
         "  --dataset-on-device MODE\n"
         "                      auto (default), on or off: on a GPU, upload the normalised\n"
         "                      training set once and batch on the device (no H2D per\n"
         "                      step); auto does so when it takes at most a quarter of\n"
         "                      the free GPU memory\n"
         "  --log-dir DIR       write TensorBoard event files (train loss and learning\n"
         "                      rate every --log-every steps, test loss and accuracy\n"
         "                      and samples/s per epoch) and a metrics CSV to DIR, as\n"
         "                      torch.utils.tensorboard does; view: tensorboard --logdir DIR\n"
         "  --profile FILE      write a Chrome trace (JSON; Perfetto, chrome://tracing) of\n"
         "                      every step: each op, copy, data-loader batch, wait for a\n"
         "                      batch and evaluation; print a per-op time table at the\n"
         "                      end (also after Ctrl-C); FILE is written atomically\n"
         "  --export FILE       after training (with --epochs 0: the model as it is), write\n"
         "                      a .gccx deployment bundle for gcc-run (atomically)\n"
         "  --export-archs LIST CUDA architectures to put cubins for in the bundle, e.g.\n"
         "                      sm_80,sm_90 (default: the GPU's, else sm_80,sm_90), plus\n"
         "                      PTX of the newest for later GPUs\n"
         "  --export-batch-sizes LIST\n"
         "                      batch sizes to generate CUDA kernels for (their shapes are\n"
         "                      constants), e.g. 1,64,1000 (default 1,1000)\n"
         "  --export-precision P\n"
         "                      fp32 (default, whatever --precision trained in), bf16 or\n"
         "                      fp16: the bundle's plans and CUDA kernels compiled with\n"
         "                      autocast at P and GEMM/conv weights stored in 16 bits;\n"
         "                      inputs and outputs stay float32\n"
         "  --export-onnx FILE  after training (with --epochs 0: the model as it is), write\n"
         "                      its inference graph as ONNX (opset 17; BatchNormalization\n"
         "                      with the trained running statistics, no loss or Dropout,\n"
         "                      outputs logits and probabilities) for ONNX Runtime and\n"
         "                      other ONNX consumers (atomically); checked before training\n"
         "  --per-class MODE    auto (default), on or off: after the last evaluation of a\n"
         "                      classifier, print every class's accuracy as the CIFAR-10\n"
         "                      tutorial does (auto: for at most 20 classes)\n"
         "  --confusion-matrix  after the last evaluation of a classifier, print its\n"
         "                      confusion matrix (rows: true class, columns: predicted)\n"
         "  --predictions FILE  write the final evaluation's predicted class of every test\n"
         "                      sample as CSV (index,class), atomically\n"
         "  --augment A         crop:N,flip (either or both): torchvision's RandomCrop(padding=N)\n"
         "                      and RandomHorizontalFlip on the training batches, on the\n"
         "                      loader thread, drawn from --seed (the same every run)\n"
         "  --checkpoint-dir DIR  write checkpoints (parameters, optimizer state, step,\n"
         "                      position in the data, recipe) to DIR, atomically\n"
         "  --checkpoint-every N|epoch\n"
         "                      every N optimizer steps, or after every epoch (default)\n"
         "  --keep-checkpoints K  keep the newest K checkpoints (default 3)\n"
         "  --resume DIR|FILE   continue from the newest valid checkpoint in DIR (or FILE):\n"
         "                      bitwise the run that was not interrupted, same threads\n"
         "  --detect-anomaly    check every node's outputs for NaN and Inf as it runs and\n"
         "                      stop at the first node that produces one, naming it, as\n"
         "                      torch.autograd.detect_anomaly does (CPU only; slower)\n"
         "  --bucket-size-mb X  data-parallel ranks (mpirun -np N gcc-train ...): all-reduce\n"
         "                      the gradients in buckets of X MiB in the order the backward\n"
         "                      pass produces them (default 25, as DistributedDataParallel)\n"
         "  --ranks N           with --dump-placement: compile as one of N data-parallel\n"
         "                      ranks (default: the MPI world size, 1 without mpirun)\n"
         "  --quiet             only errors, the final summary line (and the profile table)\n"
         "  --version           print the version and exit\n"
         "  --help              this text\n"
         "\n"
         "Under mpirun every rank runs its share of each global batch (--batch-size is the\n"
         "global batch); only rank 0 prints and writes files; a failing rank ends all.\n"
         "\n"
         "Exit status: 0 ok, 1 run-time failure, 2 bad command line, 3 invalid model,\n"
         "4 device unusable, 130 interrupted (SIGINT; 143 SIGTERM, 129 SIGHUP; no model\n"
         "written).\n");
}

/* --seed: an unsigned 64-bit integer in decimal (TrainingSpec.seed is a
 * uint64), so that every seed a model file holds can be given. */
static int parse_seed(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || strchr(s, '-')) {
    fprintf(stderr, "gcc-train: --seed '%s': expected an integer in [0, 2^64 - 1]\n", s);
    return 0;
  }
  *out = (uint64_t)v;
  return 1;
}

/* The recipe flags laid over *model (replaced by the result): -1 to go
 * on, else the exit status (2 for a recipe that does not fit the model). */
int apply_recipe(const gcc_recipe *recipe, gcc_graph **model) {
  if (!gcc_recipe_given(recipe))
    return -1;
  /* --epochs 0 without --loss on an inference model (an ONNX export): nothing
   * to train, so no training spec is needed; it is exported as it is */
  if (!(*model)->training.present && !recipe->loss && recipe->epochs == 0)
    return -1;
  gcc_diag d = {0};
  gcc_graph *g;
  if (gcc_recipe_apply(*model, recipe, &g, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return d.status == GCC_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_MODEL;
  }
  gcc_graph_free(*model);
  *model = g;
  return -1;
}

/* --augment crop:N,flip (either or both) */
static int parse_augment(const char *s, int *crop_pad, int *flip) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  int ok = strlen(s) < sizeof buf - 1 && *s;
  *crop_pad = *flip = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); ok && t; t = strtok_r(NULL, ",", &save)) {
    int64_t pad;
    if (strcmp(t, "flip") == 0)
      *flip = 1;
    else if (strncmp(t, "crop:", 5) == 0 && gcc_parse_i64(t + 5, 1, 64, &pad))
      *crop_pad = (int)pad;
    else
      ok = 0;
  }
  if (!ok)
    fprintf(stderr,
            "gcc-train: --augment '%s': expected crop:N (N in [1, 64]), flip, or "
            "crop:N,flip\n",
            s);
  return ok;
}

int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The default --output: MODEL with .pb replaced by .trained.pb. */
void default_output(const char *model_path, char *buf, size_t cap) {
  size_t n = strlen(model_path);
  if (n > 3 && strcmp(model_path + n - 3, ".pb") == 0)
    snprintf(buf, cap, "%.*s.trained.pb", (int)(n - 3), model_path);
  else
    snprintf(buf, cap, "%s.trained.pb", model_path);
}

/* Every output, before the model or any data is read: distinct, never the
 * model, writable (graph/outfile.h); the checkpoint folder made and
 * writable. Returns -1 to go on, else the exit status. */
static int check_outputs(train_args *a) {
  gcc_diag d = {0};
  char out_buf[4096];
  const char *output = a->output;
  if (!output && !a->no_output) {
    default_output(a->model_path, out_buf, sizeof out_buf);
    output = out_buf;
  }
  int dumping = a->dump_placement || a->dump_kernels;
  const gcc_named_path outs[] = {
      {"--output", dumping || a->no_output ? NULL : output},
      {"--predictions", a->predictions_path},
      {"--export", a->export_path},
      {"--export-onnx", a->export_onnx_path},
      {"--profile", a->profile_path},
      {"--dump-placement-file", a->dump_placement ? a->dump_file : NULL},
  };
  const gcc_named_path ins[] = {{"the model", a->model_path}, {"--resume", a->resume_path}};
  if (gcc_outfiles_check(outs, 6, ins, 2, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return d.status == GCC_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_RUN;
  }
  if (a->log_dir) { /* made now, and writable (each run adds its own files) */
    if (mkdir(a->log_dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "gcc-train: --log-dir %s: cannot create it: %s\n", a->log_dir,
              strerror(errno));
      return EXIT_RUN;
    }
    if (!is_dir(a->log_dir) || access(a->log_dir, W_OK) != 0) {
      fprintf(stderr, "gcc-train: --log-dir %s: not a writable folder\n", a->log_dir);
      return EXIT_RUN;
    }
  }
  if (a->checkpoint_dir) { /* made now, and a file can be created in it */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/ckpt-probe", a->checkpoint_dir);
    if (mkdir(a->checkpoint_dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "gcc-train: --checkpoint-dir %s: cannot create it: %s\n", a->checkpoint_dir,
              strerror(errno));
      return EXIT_RUN;
    }
    if (gcc_outfile_check(probe, "--checkpoint-dir", &d) != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", d.msg);
      return EXIT_RUN;
    }
    if (!a->checkpoint_every)
      a->checkpoint_every = -1;
  }
  return -1;
}

/* Step 1: the flags into *a, checked. Returns -1 to go on, else the exit
 * status (0 after --help, --version and --list-devices). */
int parse_args(int argc, char **argv, train_args *a) {
  /* --loss-scale as given (NULL: the precision's default) */
  const char *loss_scale_given = NULL;
  gcc_loss_scale_mode loss_scale_mode = GCC_LOSS_SCALE_NONE;
  float fixed_scale = 0.0f;
  int64_t growth_interval = 0; /* 0: not given */
  enum {
    OPT_DEVICE = 256,
    OPT_DATA,
    OPT_RECIPE,
    OPT_EVAL_BATCH,
    OPT_SEED,
    OPT_THREADS,
    OPT_LOG_EVERY,
    OPT_MAX_STEPS,
    OPT_OUTPUT,
    OPT_NO_OUTPUT,
    OPT_DUMP_AFTER,
    OPT_QUIET,
    OPT_VERSION,
    OPT_HELP,
    OPT_DUMP_PLACEMENT,
    OPT_DUMP_PLACEMENT_FILE,
    OPT_CUDA_ARCH,
    OPT_STRICT,
    OPT_DUMP_KERNELS,
    OPT_NO_KERNEL_CACHE,
    OPT_DETERMINISTIC,
    OPT_NO_DETERMINISTIC,
    OPT_LAYOUT,
    OPT_NO_CUDA_GRAPH,
    OPT_LIST_DEVICES,
    OPT_DATASET_ON_DEVICE,
    OPT_PROFILE,
    OPT_EXPORT,
    OPT_EXPORT_ARCHS,
    OPT_EXPORT_BATCHES,
    OPT_EXPORT_PRECISION,
    OPT_EXPORT_ONNX,
    OPT_PREDICTIONS,
    OPT_SHOW_PREDICTIONS,
    OPT_DETECT_ANOMALY,
    OPT_CHECKPOINT_DIR,
    OPT_CHECKPOINT_EVERY,
    OPT_KEEP_CHECKPOINTS,
    OPT_RESUME,
    OPT_BUCKET_SIZE_MB,
    OPT_RANKS,
    OPT_PER_CLASS,
    OPT_CONFUSION_MATRIX,
    OPT_PROGRESS,
    OPT_LOG_DIR,
    OPT_AUGMENT,
    OPT_PRECISION,
    OPT_LOSS_SCALE,
    OPT_LOSS_SCALE_GROWTH,
    OPT_BLOCK_SIZE,
    OPT_EVAL_EVERY,
    OPT_EVAL_BATCHES,
    OPT_GRAD_ACCUM
  };
  static const struct option longopts[] = {
      {"device", required_argument, 0, OPT_DEVICE},
      {"data", required_argument, 0, OPT_DATA},
      {"epochs", required_argument, 0, OPT_RECIPE},
      {"batch-size", required_argument, 0, OPT_RECIPE},
      {"eval-batch-size", required_argument, 0, OPT_EVAL_BATCH},
      {"block-size", required_argument, 0, OPT_BLOCK_SIZE},
      {"eval-every", required_argument, 0, OPT_EVAL_EVERY},
      {"eval-batches", required_argument, 0, OPT_EVAL_BATCHES},
      {"grad-accum", required_argument, 0, OPT_GRAD_ACCUM},
      {"lr", required_argument, 0, OPT_RECIPE},
      {"loss", required_argument, 0, OPT_RECIPE},
      {"optimizer", required_argument, 0, OPT_RECIPE},
      {"momentum", required_argument, 0, OPT_RECIPE},
      {"weight-decay", required_argument, 0, OPT_RECIPE},
      {"weight-decay-on", required_argument, 0, OPT_RECIPE},
      {"betas", required_argument, 0, OPT_RECIPE},
      {"clip-grad-norm", required_argument, 0, OPT_RECIPE},
      {"nesterov", no_argument, 0, OPT_RECIPE},
      {"lr-schedule", required_argument, 0, OPT_RECIPE},
      {"dataset", required_argument, 0, OPT_RECIPE},
      {"mean", required_argument, 0, OPT_RECIPE},
      {"std", required_argument, 0, OPT_RECIPE},
      {"seed", required_argument, 0, OPT_SEED},
      {"threads", required_argument, 0, OPT_THREADS},
      {"log-every", required_argument, 0, OPT_LOG_EVERY},
      {"max-steps", required_argument, 0, OPT_MAX_STEPS},
      {"output", required_argument, 0, OPT_OUTPUT},
      {"no-output", no_argument, 0, OPT_NO_OUTPUT},
      {"dump-after", required_argument, 0, OPT_DUMP_AFTER},
      {"dump-placement", optional_argument, 0, OPT_DUMP_PLACEMENT},
      {"dump-placement-file", required_argument, 0, OPT_DUMP_PLACEMENT_FILE},
      {"cuda-arch", required_argument, 0, OPT_CUDA_ARCH},
      {"precision", required_argument, 0, OPT_PRECISION},
      {"loss-scale", required_argument, 0, OPT_LOSS_SCALE},
      {"loss-scale-growth-interval", required_argument, 0, OPT_LOSS_SCALE_GROWTH},
      {"strict-placement", no_argument, 0, OPT_STRICT},
      {"dump-kernels", required_argument, 0, OPT_DUMP_KERNELS},
      {"no-kernel-cache", no_argument, 0, OPT_NO_KERNEL_CACHE},
      {"deterministic", no_argument, 0, OPT_DETERMINISTIC},
      {"no-deterministic", no_argument, 0, OPT_NO_DETERMINISTIC},
      {"layout", required_argument, 0, OPT_LAYOUT},
      {"no-cuda-graph", no_argument, 0, OPT_NO_CUDA_GRAPH},
      {"detect-anomaly", no_argument, 0, OPT_DETECT_ANOMALY},
      {"checkpoint-dir", required_argument, 0, OPT_CHECKPOINT_DIR},
      {"checkpoint-every", required_argument, 0, OPT_CHECKPOINT_EVERY},
      {"keep-checkpoints", required_argument, 0, OPT_KEEP_CHECKPOINTS},
      {"resume", required_argument, 0, OPT_RESUME},
      {"bucket-size-mb", required_argument, 0, OPT_BUCKET_SIZE_MB},
      {"ranks", required_argument, 0, OPT_RANKS},
      {"augment", required_argument, 0, OPT_AUGMENT},
      {"list-devices", no_argument, 0, OPT_LIST_DEVICES},
      {"dataset-on-device", required_argument, 0, OPT_DATASET_ON_DEVICE},
      {"profile", required_argument, 0, OPT_PROFILE},
      {"export", required_argument, 0, OPT_EXPORT},
      {"export-archs", required_argument, 0, OPT_EXPORT_ARCHS},
      {"export-batch-sizes", required_argument, 0, OPT_EXPORT_BATCHES},
      {"export-precision", required_argument, 0, OPT_EXPORT_PRECISION},
      {"export-onnx", required_argument, 0, OPT_EXPORT_ONNX},
      {"predictions", required_argument, 0, OPT_PREDICTIONS},
      {"show-predictions", required_argument, 0, OPT_SHOW_PREDICTIONS},
      {"per-class", required_argument, 0, OPT_PER_CLASS},
      {"confusion-matrix", no_argument, 0, OPT_CONFUSION_MATRIX},
      {"progress", required_argument, 0, OPT_PROGRESS},
      {"log-dir", required_argument, 0, OPT_LOG_DIR},
      {"quiet", no_argument, 0, OPT_QUIET},
      {"version", no_argument, 0, OPT_VERSION},
      {"help", no_argument, 0, OPT_HELP},
      {0, 0, 0, 0},
  };
  const char *device_str = "auto", *dump_format = NULL;
  const char *export_archs = NULL, *export_batches = NULL, *export_precision = NULL;
  memset(a, 0, sizeof *a);
  gcc_recipe_init(&a->recipe);
  a->eval_batch = 1000;
  a->eval_batches = 200; /* nanoGPT's eval_iters */
  a->grad_accum = 1;
  a->log_every = 100;
  a->cuda_arch = "sm_90";
  a->dataset_on_device = 2;
  a->per_class = 2;
  a->progress = 2;
  a->keep_checkpoints = 3;
  opterr = 0;
  int c, li = 0;
  gcc_diag rd = {0};
  char flag[64];
  /* a leading ':' makes getopt_long return ':' (not '?') for a flag whose
   * value is missing, so that the message says so */
  while ((c = getopt_long(argc, argv, ":", longopts, &li)) != -1) {
    switch (c) {
    case OPT_RECIPE:
      snprintf(flag, sizeof flag, "--%s", longopts[li].name);
      if (gcc_recipe_set(&a->recipe, flag, optarg, &rd) != GCC_OK) {
        fprintf(stderr, "gcc-train: %s\n", rd.msg);
        return EXIT_USAGE;
      }
      break;
    case OPT_DEVICE:
      device_str = optarg;
      a->device_explicit = 1;
      break;
    case OPT_DUMP_PLACEMENT:
      a->dump_placement = 1;
      dump_format = optarg;
      break;
    case OPT_DUMP_PLACEMENT_FILE:
      a->dump_placement = 1;
      a->dump_file = optarg;
      break;
    case OPT_CUDA_ARCH: a->cuda_arch = optarg; break;
    case OPT_PRECISION:
      a->precision = gcc_precision_lookup(optarg);
      if (a->precision < 0) {
        fprintf(stderr, "gcc-train: --precision '%s': expected fp32, tf32, bf16 or fp16\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case OPT_LOSS_SCALE: {
      char *end = NULL;
      double x = strtod(optarg, &end);
      if (strcmp(optarg, "dynamic") == 0) {
        loss_scale_mode = GCC_LOSS_SCALE_DYNAMIC;
      } else if (strcmp(optarg, "none") == 0) {
        loss_scale_mode = GCC_LOSS_SCALE_NONE;
      } else if (end != optarg && *end == '\0' && x > 0.0 && x <= FLT_MAX) {
        loss_scale_mode = GCC_LOSS_SCALE_FIXED;
        fixed_scale = (float)x;
      } else {
        fprintf(stderr, "gcc-train: --loss-scale '%s': expected dynamic, none or a scale > 0\n",
                optarg);
        return EXIT_USAGE;
      }
      loss_scale_given = optarg;
      break;
    }
    case OPT_LOSS_SCALE_GROWTH:
      if (!gcc_flag_i64("gcc-train", "--loss-scale-growth-interval", optarg, 1, &growth_interval))
        return EXIT_USAGE;
      if (growth_interval > (1 << 24)) { /* the float32 growth tracker counts exactly */
        fprintf(stderr, "gcc-train: --loss-scale-growth-interval %s: at most %d\n", optarg,
                1 << 24);
        return EXIT_USAGE;
      }
      break;
    case OPT_STRICT: a->strict = 1; break;
    case OPT_DUMP_KERNELS: a->dump_kernels = optarg; break;
    case OPT_NO_KERNEL_CACHE: g_no_kernel_cache = 1; break;
    case OPT_DETERMINISTIC: g_nondeterministic = 0; break;
    case OPT_NO_DETERMINISTIC: g_nondeterministic = 1; break;
    case OPT_LAYOUT:
      g_layout = gcc_layout_choice_lookup(optarg);
      if (g_layout < 0) {
        fprintf(stderr, "gcc-train: --layout '%s': expected auto, nchw or nhwc\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case OPT_NO_CUDA_GRAPH: a->no_cuda_graph = 1; break;
    case OPT_DETECT_ANOMALY: a->detect_anomaly = 1; break;
    case OPT_CHECKPOINT_DIR: a->checkpoint_dir = optarg; break;
    case OPT_CHECKPOINT_EVERY:
      if (strcmp(optarg, "epoch") == 0)
        a->checkpoint_every = -1;
      else if (!gcc_flag_i64("gcc-train", "--checkpoint-every", optarg, 1, &a->checkpoint_every))
        return EXIT_USAGE;
      break;
    case OPT_KEEP_CHECKPOINTS:
      if (!gcc_flag_i64("gcc-train", "--keep-checkpoints", optarg, 1, &a->keep_checkpoints))
        return EXIT_USAGE;
      break;
    case OPT_RESUME: a->resume_path = optarg; break;
    case OPT_BUCKET_SIZE_MB: {
      char *end;
      errno = 0;
      double mb = strtod(optarg, &end);
      if (errno || end == optarg || *end || !(mb >= 0.0) || mb > 1e6) {
        fprintf(stderr, "gcc-train: --bucket-size-mb '%s': expected a number in [0, 1e6]\n",
                optarg);
        return EXIT_USAGE;
      }
      a->bucket_bytes = (int64_t)(mb * 1048576.0);
      if (a->bucket_bytes < 4) {
        fprintf(stderr, "gcc-train: --bucket-size-mb '%s': a bucket holds at least one float\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    }
    case OPT_RANKS:
      if (!gcc_flag_i64("gcc-train", "--ranks", optarg, 1, &a->ranks))
        return EXIT_USAGE;
      if (a->ranks > 65536) {
        fprintf(stderr, "gcc-train: --ranks %s: at most 65536\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case OPT_AUGMENT:
      if (!parse_augment(optarg, &a->crop_pad, &a->flip))
        return EXIT_USAGE;
      break;
    case OPT_LIST_DEVICES: gcc_list_devices(stdout, gcc_cuda_check_supported); return 0;
    case OPT_DATASET_ON_DEVICE:
      if (strcmp(optarg, "off") == 0)
        a->dataset_on_device = 0;
      else if (strcmp(optarg, "on") == 0)
        a->dataset_on_device = 1;
      else if (strcmp(optarg, "auto") == 0)
        a->dataset_on_device = 2;
      else {
        fprintf(stderr, "gcc-train: --dataset-on-device '%s': expected auto, on or off\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case OPT_PER_CLASS:
      if (strcmp(optarg, "off") == 0)
        a->per_class = 0;
      else if (strcmp(optarg, "on") == 0)
        a->per_class = 1;
      else if (strcmp(optarg, "auto") == 0)
        a->per_class = 2;
      else {
        fprintf(stderr, "gcc-train: --per-class '%s': expected auto, on or off\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case OPT_CONFUSION_MATRIX: a->confusion_matrix = 1; break;
    case OPT_LOG_DIR: a->log_dir = optarg; break;
    case OPT_PROGRESS:
      if (strcmp(optarg, "lines") == 0)
        a->progress = 0;
      else if (strcmp(optarg, "bar") == 0)
        a->progress = 1;
      else if (strcmp(optarg, "auto") == 0)
        a->progress = 2;
      else {
        fprintf(stderr, "gcc-train: --progress '%s': expected auto, bar or lines\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case OPT_PROFILE: a->profile_path = optarg; break;
    case OPT_EXPORT: a->export_path = optarg; break;
    case OPT_EXPORT_ARCHS: export_archs = optarg; break;
    case OPT_EXPORT_BATCHES: export_batches = optarg; break;
    case OPT_EXPORT_PRECISION: export_precision = optarg; break;
    case OPT_EXPORT_ONNX: a->export_onnx_path = optarg; break;
    case OPT_PREDICTIONS: a->predictions_path = optarg; break;
    case OPT_DATA: a->data_dir = optarg; break;
    case OPT_EVAL_BATCH:
      if (!gcc_flag_i64("gcc-train", "--eval-batch-size", optarg, 1, &a->eval_batch))
        return EXIT_USAGE;
      break;
    case OPT_BLOCK_SIZE:
      if (!gcc_flag_i64("gcc-train", "--block-size", optarg, 1, &a->block_size))
        return EXIT_USAGE;
      break;
    case OPT_EVAL_EVERY:
      if (!gcc_flag_i64("gcc-train", "--eval-every", optarg, 1, &a->eval_every))
        return EXIT_USAGE;
      break;
    case OPT_EVAL_BATCHES:
      if (!gcc_flag_i64("gcc-train", "--eval-batches", optarg, 1, &a->eval_batches))
        return EXIT_USAGE;
      break;
    case OPT_GRAD_ACCUM:
      if (!gcc_flag_i64("gcc-train", "--grad-accum", optarg, 1, &a->grad_accum))
        return EXIT_USAGE;
      if (a->grad_accum > 4096) {
        fprintf(stderr, "gcc-train: --grad-accum %" PRId64 ": at most 4096 micro-batches\n",
                a->grad_accum);
        return EXIT_USAGE;
      }
      break;
    case OPT_SEED:
      if (!parse_seed(optarg, &a->recipe.seed))
        return EXIT_USAGE;
      a->recipe.has_seed = 1;
      break;
    case OPT_THREADS:
      if (!gcc_flag_i64("gcc-train", "--threads", optarg, 1, &a->threads))
        return EXIT_USAGE;
      break;
    case OPT_LOG_EVERY:
      if (!gcc_flag_i64("gcc-train", "--log-every", optarg, 0, &a->log_every))
        return EXIT_USAGE;
      break;
    case OPT_MAX_STEPS:
      if (!gcc_flag_i64("gcc-train", "--max-steps", optarg, 1, &a->max_steps))
        return EXIT_USAGE;
      break;
    case OPT_SHOW_PREDICTIONS:
      if (!gcc_flag_i64("gcc-train", "--show-predictions", optarg, 0, &a->show_predictions))
        return EXIT_USAGE;
      break;
    case OPT_OUTPUT: a->output = optarg; break;
    case OPT_NO_OUTPUT: a->no_output = 1; break;
    case OPT_DUMP_AFTER: a->dump_after = optarg; break;
    case OPT_QUIET: a->quiet = 1; break;
    case OPT_VERSION: printf("gcc-train %s\n", GCC_TRAIN_VERSION); return 0;
    case OPT_HELP: usage(stdout); return 0;
    case ':': fprintf(stderr, "gcc-train: %s needs a value\n", argv[optind - 1]); return EXIT_USAGE;
    default:
      fprintf(stderr, "gcc-train: unknown option '%s' (see --help)\n", argv[optind - 1]);
      return EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, optind >= argc ? "gcc-train: no model given\n"
                                   : "gcc-train: exactly one model file expected\n");
    usage(stderr);
    return EXIT_USAGE;
  }
  a->model_path = argv[optind];
  /* fp16 loss scaling: GradScaler by default; meaningless without fp16 */
  if (loss_scale_given && loss_scale_mode != GCC_LOSS_SCALE_NONE &&
      a->precision != GCC_PRECISION_FP16) {
    fprintf(stderr,
            "gcc-train: --loss-scale %s needs --precision fp16 (%s gradients need no loss "
            "scaling: PyTorch uses no GradScaler for them)\n",
            loss_scale_given, gcc_precision_name(a->precision));
    return EXIT_USAGE;
  }
  if (!loss_scale_given)
    loss_scale_mode =
        a->precision == GCC_PRECISION_FP16 ? GCC_LOSS_SCALE_DYNAMIC : GCC_LOSS_SCALE_NONE;
  if (growth_interval > 0 && loss_scale_mode != GCC_LOSS_SCALE_DYNAMIC) {
    fprintf(stderr, "gcc-train: --loss-scale-growth-interval needs a dynamic loss scale "
                    "(--precision fp16 without --loss-scale none or a fixed scale)\n");
    return EXIT_USAGE;
  }
  g_loss_scale = (gcc_loss_scale){
      .mode = loss_scale_mode,
      .init_scale = loss_scale_mode == GCC_LOSS_SCALE_FIXED ? fixed_scale : GCC_SCALER_INIT_SCALE,
      .growth_factor = GCC_SCALER_GROWTH_FACTOR,
      .backoff_factor = GCC_SCALER_BACKOFF_FACTOR,
      .growth_interval = growth_interval > 0 ? growth_interval : GCC_SCALER_GROWTH_INTERVAL};
  gcc_diag d = {0};
  if (gcc_recipe_check(&a->recipe, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }

  a->device_indexed = strchr(device_str, ':') != NULL;
  if (gcc_device_parse(device_str, &a->want, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  if (gcc_dump_format_parse(dump_format, &a->fmt, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  if (gcc_check_dump_after(a->dump_after, gcc_default_target(), &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  gcc_device_info arch_info;
  if (gcc_device_info_from_arch(a->cuda_arch, 0, &arch_info, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  if ((a->dump_placement || a->dump_kernels) && a->profile_path) {
    fprintf(stderr, "gcc-train: --profile traces a training run; --dump-placement and "
                    "--dump-kernels only compile\n");
    return EXIT_USAGE;
  }
  gcc_export_options *eo = &a->eo;
  eo->use_kernel_cache = !g_no_kernel_cache;
  if (export_archs && gcc_export_parse_archs(export_archs, eo, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  if (export_batches && gcc_export_parse_batch_sizes(export_batches, eo, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  if (export_precision && gcc_export_parse_precision(export_precision, eo, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  if ((export_archs || export_batches || export_precision) && !a->export_path) {
    fprintf(stderr, "gcc-train: %s needs --export FILE\n",
            export_archs     ? "--export-archs"
            : export_batches ? "--export-batch-sizes"
                             : "--export-precision");
    return EXIT_USAGE;
  }
  if ((a->export_path || a->export_onnx_path || a->predictions_path) &&
      (a->dump_placement || a->dump_kernels)) {
    fprintf(stderr,
            "gcc-train: --export, --export-onnx and --predictions run after training; they do not "
            "combine with --dump-placement or --dump-kernels\n");
    return EXIT_USAGE;
  }
  if (a->export_path && !export_archs) { /* the GPU's architecture, else sm_80 and sm_90 */
    char why[512];
    gcc_device_info gi;
    gcc_diag ignore = {0};
    if (gcc_cuda_device_count(why, sizeof why) > 0 &&
        gcc_device_info_cuda(0, &gi, &ignore) == GCC_OK) {
      char list[32];
      snprintf(list, sizeof list, "sm_%d%d", gi.cc_major, gi.cc_minor);
      if (gcc_export_parse_archs(list, eo, &d) != GCC_OK) {
        fprintf(stderr, "gcc-train: %s\n", d.msg);
        return EXIT_USAGE;
      }
    } else {
      eo->archs[0] = 80;
      eo->archs[1] = 90;
      eo->n_archs = 2;
    }
  }
  if ((a->checkpoint_every || a->keep_checkpoints != 3) && !a->checkpoint_dir) {
    fprintf(stderr, "gcc-train: --checkpoint-every and --keep-checkpoints need "
                    "--checkpoint-dir DIR\n");
    return EXIT_USAGE;
  }
  if (a->ranks && !a->dump_placement) {
    fprintf(stderr, "gcc-train: --ranks goes with --dump-placement; a training run has the ranks "
                    "mpirun starts\n");
    return EXIT_USAGE;
  }
  if (a->log_dir && (a->dump_placement || a->dump_kernels)) {
    fprintf(stderr, "gcc-train: --log-dir logs a training run; --dump-placement and "
                    "--dump-kernels only compile\n");
    return EXIT_USAGE;
  }
  if ((a->checkpoint_dir || a->resume_path) && (a->dump_placement || a->dump_kernels)) {
    fprintf(stderr, "gcc-train: --checkpoint-dir and --resume train; they do not combine with "
                    "--dump-placement or --dump-kernels\n");
    return EXIT_USAGE;
  }
  return check_outputs(a);
}
