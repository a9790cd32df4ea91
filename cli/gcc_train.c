/*
 * gcc-train: compile a model graph and train it.
 *
 *   gcc-train MODEL.pb [--device cpu|auto|cuda|cuda:N] [--data DIR] ...
 *
 * Exit status: 0 success; 1 a run-time failure (data, numerics, I/O);
 * 2 a bad command line; 3 an invalid model file; 4 the requested device is
 * unusable; 130 interrupted (SIGINT; 143 SIGTERM, 129 SIGHUP; no model is
 * written).
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "cli/flags.h"
#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "codegen/lowering.h"
#include "graph/loader.h"
#include "graph/outfile.h"
#include "graph/recipe.h"
#include "graph/util.h"
#include "runtime/cuda/arch_check.h"
#include "runtime/cuda/comm_nccl.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_device.h"
#include "deploy/bundle.h"
#include "deploy/export.h"
#include "onnx/export.h"
#include "onnx/model_file.h"
#include "runtime/device.h"
#include "runtime/event_log.h"
#include "runtime/placement_report.h"
#include "runtime/profile.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/compile.h"
#include "runtime/session.h"
#include "runtime/trainer.h"

static volatile sig_atomic_t g_stop = 0;
/* The ranks of `mpirun -np N gcc-train ...` (a world of 1 without mpirun). */
static gcc_comm *g_comm = NULL;

static int is_root(void) {
  return !g_comm || g_comm->rank == 0;
}
static int g_no_kernel_cache = 0;  /* --no-kernel-cache */
static int g_nondeterministic = 0; /* --no-deterministic (--deterministic: 0, the default) */
/* --loss-scale, --loss-scale-growth-interval: fp16 loss scaling of every
 * training plan (mode NONE: none); set by parse_args */
static gcc_loss_scale g_loss_scale;

/* A second SIGINT/SIGTERM/SIGHUP ends the process at once, removing the
 * temporary file of an output or checkpoint being written. */
static void on_second_signal(int sig) {
  gcc_outfile_cleanup_signal_safe();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* SIGINT, SIGTERM and SIGHUP: stop after the current batch (no model is
 * written; the trace is); the exit status is 128 + the signal. */
static void on_sigint(int sig) {
  g_stop = sig;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_second_signal;
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
}

/* The handlers run on a stack of their own (sigaltstack, SA_ONSTACK): a
 * signal that lands while oneDNN's JIT kernels run on the main thread must
 * not write its frame below their stack pointer, where those kernels keep
 * data (valgrind sees them read there; a Ctrl-C during a training step then
 * corrupted the heap: "free(): invalid pointer" in dnnl_primitive_execute in
 * about 1 of 4 interrupted MNIST runs on an AVX2 machine). kill(pid) goes to
 * the main thread, which never blocks these signals. */
static void install_stop_handlers(void) {
  static char alt_stack[1 << 16];
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  int onstack = sigaltstack(&ss, NULL) == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint; /* no SA_RESTART: a blocked open or write returns EINTR */
  sa.sa_flags = onstack ? SA_ONSTACK : 0;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
}

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
         "  --dataset D         mnist, cifar10 or npy (default for a new spec: mnist); npy:\n"
         "                      --data names a folder of x_train.npy, y_train.npy,\n"
         "                      x_test.npy, y_test.npy or a .npz of them: inputs float32\n"
         "                      of the model input's shape (fed as they are) or uint8\n"
         "                      images (N, H, W), (N, C, H, W) or (N, D) (scaled by\n"
         "                      --mean/--std); targets integer class indices (N) or, for\n"
         "                      --loss mse, float32 of the prediction's shape\n"
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
static int apply_recipe(const gcc_recipe *recipe, gcc_graph **model) {
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

/* How an ONNX model's BatchNormalizations were imported, for the run
 * summary and --dump-placement: trained as nn.BatchNorm2d (the import for
 * a recipe, gcc_onnx_options.train) or frozen into the Conv before them
 * (the import for inference). Empty for a gcc-train model or none. */
static const char *batchnorm_note(const gcc_model_info *info, char *buf, size_t cap) {
  buf[0] = '\0';
  if (info->format != GCC_MODEL_FORMAT_ONNX)
    return buf;
  int n = 0;
  for (int i = 0; i < info->onnx.n_ops; i++)
    if (strcmp(info->onnx.ops[i].op, "BatchNormalization") == 0)
      n = info->onnx.ops[i].count;
  if (n == 0)
    return buf;
  const char *them = n == 1 ? "it" : "them";
  int folded = info->onnx.n_bn_folded;
  char how[96];
  if (folded == n)
    snprintf(how, sizeof how, "folded into the Conv before %s", them);
  else
    snprintf(how, sizeof how, "%d folded into the Conv before %s, %d as Mul + Add", folded,
             folded == 1 ? "it" : "them", n - folded);
  if (info->onnx.n_bn_train > 0)
    snprintf(buf, cap,
             "BatchNormalization: %d node%s trained as nn.BatchNorm2d (batch statistics in "
             "training; running mean and var updated, saved as state and used in evaluation)",
             n, n == 1 ? "" : "s");
  else
    snprintf(buf, cap,
             "BatchNormalization: %d node%s frozen, imported for inference (%s); a recipe "
             "(--loss ...) trains %s as nn.BatchNorm2d",
             n, n == 1 ? "" : "s", how, them);
  return buf;
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

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* --dump-placement: compile for the device asked for (an assumed one from
 * --cuda-arch when no GPU is usable), print the report, run nothing. */
static int write_kernels(const gcc_graph *g, int dev, const gcc_device_info *info,
                         const char *cuda_arch, const char *dir);
static void print_device_fallbacks(const gcc_graph *model, int index, const gcc_device_info *info,
                                   int64_t batch, FILE *f);
static void print_cpu_libraries(const gcc_graph *model, int threads, gcc_mode mode, int64_t batch,
                                FILE *f);

static int dump_placement_main(const char *model_path, const gcc_device *want, int device_explicit,
                               int strict, const char *cuda_arch, int fmt, const char *file,
                               const char *kernels_dir, const gcc_recipe *recipe,
                               const char *dump_after, int world_size, int64_t bucket_bytes,
                               int precision, int threads) {
  gcc_diag d = {0};
  gcc_graph *model;
  gcc_model_info info;
  gcc_onnx_options oo = {0};
  oo.train = recipe->loss != NULL; /* an ONNX model with a recipe trains its BatchNorms */
  if (gcc_model_open_with(model_path, &oo, &model, &info, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return d.status == GCC_ERR_IO ? EXIT_RUN : EXIT_MODEL;
  }
  char bn[512];
  if (batchnorm_note(&info, bn, sizeof bn)[0])
    fprintf(stderr, "gcc-train: %s: %s\n", model_path, bn);
  /* an inference model compiles at --batch-size without a recipe */
  int arc = model->training.present || recipe->loss ? apply_recipe(recipe, &model) : -1;
  if (arc >= 0) {
    gcc_graph_free(model);
    return arc;
  }
  gcc_device_info devs[2];
  gcc_device_info_cpu(&devs[0]);
  int n_devs = 1;
  char reason[512] = "";
  int count = gcc_cuda_device_count(reason, sizeof reason);
  int dev = GCC_DEV_CPU;
  if (want->kind == GCC_DEVICE_CUDA || (want->kind == GCC_DEVICE_AUTO && count > 0)) {
    int index = want->kind == GCC_DEVICE_CUDA ? want->index : 0;
    if (count > index) {
      if (gcc_device_info_cuda(index, &devs[1], &d) != GCC_OK) {
        fprintf(stderr, "gcc-train: %s\n", d.msg);
        gcc_graph_free(model);
        return EXIT_DEVICE;
      }
    } else {
      gcc_device_info_from_arch(cuda_arch, index, &devs[1], &d);
      fprintf(stderr,
              "gcc-train: no usable CUDA GPU (%s); compiling for an assumed %s device "
              "(--cuda-arch %s)\n",
              count == 0 ? reason : "fewer devices than requested", devs[1].name, cuda_arch);
    }
    dev = devs[1].id;
    n_devs = 2;
  } else if (want->kind == GCC_DEVICE_AUTO) {
    fprintf(stderr, "gcc-train: --device auto: no usable CUDA GPU (%s); placing on the CPU\n",
            reason);
  }
  if (n_devs == 1) { /* pins to cuda:0 still compile, for an assumed device */
    gcc_device_info_from_arch(cuda_arch, 0, &devs[1], &d);
    n_devs = 2;
  }
  gcc_options o = {0};
  o.mode = model->training.present ? GCC_MODE_TRAIN : GCC_MODE_EVAL;
  o.batch_size = model->training.present  ? model->training.batch_size
                 : recipe->batch_size > 0 ? recipe->batch_size
                                          : 1;
  o.opt = model->training.opt;
  o.opt.scaler = g_loss_scale;
  o.device = dev;
  o.device_explicit = device_explicit;
  o.n_cuda_devices = count > 0 ? count : 1;
  o.strict_placement = strict;
  o.dump_after = dump_after;
  o.dump_file = stderr;
  o.world_size = world_size;
  o.bucket_bytes = bucket_bytes;
  o.precision = precision;
  o.nondeterministic = g_nondeterministic;
  gcc_graph *g;
  gcc_mem_plan mem;
  int rc = 0;
  if (gcc_compile_graph(model, &o, &g, &mem, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    gcc_graph_free(model);
    return d.status == GCC_ERR_OUT_OF_MEMORY ? EXIT_RUN : EXIT_MODEL;
  }
  char *text = NULL;
  gcc_status s = GCC_OK;
  if (fmt >= 0) {
    s = gcc_placement_report_string(g, &mem, devs, n_devs, o.mode, o.batch_size,
                                    (gcc_dump_format)fmt, &text, &d);
    if (s == GCC_OK && file)
      s = gcc_write_file_atomic(file, text, strlen(text), &d);
    else if (s == GCC_OK && (fputs(text, stdout) == EOF || fflush(stdout) != 0))
      s = gcc_diag_set(&d, GCC_ERR_IO, "cannot write the report to stdout");
    if (s != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", d.msg);
      rc = EXIT_RUN;
    }
  }
  free(text);
  /* which GEMM epilogues cuBLASLt refuses is known only on the GPU itself */
  if (rc == 0 && fmt == GCC_DUMP_TEXT && !file && GCC_DEV_IS_CUDA(dev) &&
      o.mode == GCC_MODE_TRAIN) {
    int index = want->kind == GCC_DEVICE_CUDA ? want->index : 0;
    if (count > index)
      print_device_fallbacks(model, index, &devs[1], o.batch_size, stdout);
    else
      fprintf(stderr, "gcc-train: GEMM epilogues: which ones cuBLASLt offers is decided when "
                      "the plan is built on the GPU (a refused one runs as a plain GEMM + a "
                      "generated kernel, named in the run summary)\n");
  }
  /* which library runs each CPU GEMM is measured when the plan is built */
  if (rc == 0 && fmt == GCC_DUMP_TEXT && !file && dev == GCC_DEV_CPU && world_size <= 1)
    print_cpu_libraries(model, threads, o.mode, o.batch_size, stdout);
  /* the convolutions' algorithms: chosen by timing on the GPU itself */
  int convs = 0;
  for (int i = 0; i < g->n_nodes; i++)
    convs += GCC_DEV_IS_CUDA(g->nodes[i].device) && gcc_lowering_of(g->nodes[i].op)->conv &&
             gcc_lowering_kind_of(g, i) == GCC_LOWER_LIBRARY;
  if (rc == 0 && fmt == GCC_DUMP_TEXT && !file && convs > 0)
    fprintf(stderr,
            "gcc-train: cuDNN convolutions (%d nodes): %s; each shape's algorithms are timed "
            "(cudnnFind) when the plan is built on the GPU and cached beside the kernel cache; "
            "--profile prints them%s\n",
            convs,
            g_nondeterministic ? "any algorithm (--no-deterministic)"
                               : "deterministic algorithms only (--deterministic, the default)",
            o.mode == GCC_MODE_TRAIN && count > 0 ? " (and this report, below)" : "");
  if (rc == 0 && kernels_dir)
    rc = write_kernels(g, dev, &devs[1], cuda_arch, kernels_dir);
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
  gcc_graph_free(model);
  return rc;
}

/* --dump-placement on a usable GPU: builds the training plan on the device
 * (cuBLASLt's heuristic is asked for every GEMM's epilogue there) and says
 * which GEMM groups fall back to a plain GEMM and a generated kernel, and
 * why. Without a GPU nothing can be asked: a note says so. */
static void print_device_fallbacks(const gcc_graph *model, int index, const gcc_device_info *info,
                                   int64_t batch, FILE *f) {
  gcc_diag d = {0};
  gcc_cuda_backend *be = NULL;
  gcc_session *s = NULL;
  gcc_kernel_cache_config kc = {NULL, !g_no_kernel_cache};
  gcc_session_options so = {0};
  so.threads = 1;
  so.opt = model->training.opt;
  so.opt.scaler = g_loss_scale;
  so.device = GCC_DEV_CUDA(index);
  so.plan.sm = info->cc_major * 10 + info->cc_minor;
  so.plan.sm_count = info->units;
  so.plan.compile = gcc_kernel_cache_hook;
  so.plan.compile_user = &kc;
  so.plan.cuda_graph = 1;
  so.nondeterministic = g_nondeterministic;
  gcc_plan *p = NULL;
  if (gcc_cuda_backend_create(index, &be, &d) == GCC_OK &&
      gcc_cuda_backend_set_algo_cache(be, NULL, !g_no_kernel_cache, &d) == GCC_OK) {
    so.backend = gcc_cuda_backend_table(be);
    if (gcc_session_create(model, &so, &s, &d) == GCC_OK)
      (void)gcc_session_plan(s, GCC_MODE_TRAIN, batch, &p, &d);
  }
  if (!p) {
    fprintf(f, "\nGEMM epilogues on %s: not known, the plan could not be built there (%s)\n",
            info->name, d.msg);
  } else if (gcc_plan_epilogue_fallbacks(p) == 0) {
    fprintf(f, "\nGEMM epilogues on %s: cuBLASLt offers an algorithm for every one\n", info->name);
  } else {
    char text[8192];
    gcc_plan_fallback_text(p, text, sizeof text);
    fprintf(f, "\nGEMM epilogue fallbacks on %s (%d; cuBLASLt offered no algorithm):\n%s",
            info->name, gcc_plan_epilogue_fallbacks(p), text);
  }
  if (p)
    gcc_cuda_backend_conv_report(be, f); /* each convolution's algorithms */
  gcc_session_destroy(s);
  gcc_cuda_backend_destroy(be);
}

/* --dump-placement on the CPU: builds the plan as a run would (the same
 * thread count), which chooses each GEMM's library by measurement or from
 * the cache (runtime/cpu/cpu_choice.h), and lists every node's library
 * kernel. */
static void print_cpu_libraries(const gcc_graph *model, int threads, gcc_mode mode, int64_t batch,
                                FILE *f) {
  gcc_diag d = {0};
  gcc_session *s = NULL;
  gcc_session_options so = {0};
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  so.threads = threads > 0 ? threads : nproc > 0 ? (int)nproc : 1;
  so.opt = model->training.opt;
  so.opt.scaler = g_loss_scale;
  so.device = GCC_DEV_CPU;
  gcc_plan *p = NULL;
  if (gcc_session_create(model, &so, &s, &d) == GCC_OK)
    (void)gcc_session_plan(s, mode, batch, &p, &d);
  if (!p) {
    fprintf(f, "\nCPU library kernels: not known, the plan could not be built (%s)\n", d.msg);
  } else {
    char text[16384];
    gcc_plan_cpu_library_text(p, text, sizeof text);
    fprintf(f,
            "\nCPU library kernels (%d thread%s; a GEMM's library timed when the plan is built, "
            "or cached per machine; GCC_CPU_GEMM=onednn|openblas|gemv forces one):\n%s",
            so.threads, so.threads > 1 ? "s" : "", text[0] ? text : "  none\n");
  }
  gcc_session_destroy(s);
}

/* --dump-kernels DIR: the generated program and its manifest */
static int write_kernels(const gcc_graph *g, int dev, const gcc_device_info *info,
                         const char *cuda_arch, const char *dir) {
  gcc_diag d = {0};
  if (!GCC_DEV_IS_CUDA(dev)) {
    fprintf(stderr, "gcc-train: --dump-kernels: the plan is on the CPU, which runs no generated "
                    "kernels; use --device cuda\n");
    return EXIT_USAGE;
  }
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "gcc-train: --dump-kernels %s: %s\n", dir, strerror(errno));
    return EXIT_RUN;
  }
  gcc_kernel_set ks;
  if (gcc_codegen_emit(g, dev, info->units, &ks, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_RUN;
  }
  char arch[16];
  snprintf(arch, sizeof arch, "sm_%d%d", info->cc_major, info->cc_minor);
  (void)cuda_arch;
  char *manifest = NULL, path[4096];
  int rc = 0, hit = 0;
  gcc_nvrtc_output nv = {0};
  char program[256];
  snprintf(program, sizeof program, "%s kernels (%d)", g->name, ks.n_kernels);
  gcc_status s = gcc_kernel_cache_compile(NULL, !g_no_kernel_cache, ks.source, program,
                                          info->cc_major * 10 + info->cc_minor, &nv, &hit, &d);
  if (s == GCC_OK)
    s = gcc_codegen_manifest(g, dev, arch, &ks, &manifest, &d);
  if (s == GCC_OK) {
    snprintf(path, sizeof path, "%s/kernels.cu", dir);
    s = gcc_write_file_atomic(path, ks.source, strlen(ks.source), &d);
  }
  if (s == GCC_OK) {
    snprintf(path, sizeof path, "%s/kernels.ptx", dir);
    s = gcc_write_file_atomic(path, nv.ptx, nv.ptx_size, &d);
  }
  if (s == GCC_OK) {
    snprintf(path, sizeof path, "%s/kernels.%s.cubin", dir, arch);
    s = gcc_write_file_atomic(path, nv.cubin, nv.cubin_size, &d);
  }
  if (s == GCC_OK) {
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    s = gcc_write_file_atomic(path, manifest, strlen(manifest), &d);
  }
  if (s != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    rc = EXIT_RUN;
  } else {
    fprintf(stderr,
            "gcc-train: %d generated kernels in %s: kernels.cu, kernels.ptx, kernels.%s.cubin "
            "(NVRTC %s, %.1f ms), manifest.json\n",
            ks.n_kernels, dir, arch, hit ? "cache hit" : "compile", 1e3 * nv.seconds);
    if (nv.cache_note[0])
      fprintf(stderr, "gcc-train: kernel cache: %s\n", nv.cache_note);
  }
  gcc_nvrtc_output_free(&nv);
  free(manifest);
  gcc_kernel_set_free(&ks);
  return rc;
}

/* --predictions: the predicted class (argmax of the prediction, the first
 * on ties, as the accuracy counts it) of every sample of the last
 * evaluation. */
typedef struct predictions {
  int64_t *cls;
  int64_t n, cap;
} predictions;

static void collect_predictions(void *user, int64_t first_row, const gcc_tensor *pred,
                                int64_t rows) {
  predictions *p = user;
  if (first_row == 0)
    p->n = 0;
  if (pred->dtype != GCC_DT_FLOAT32 || pred->shape.ndim != 2 || pred->shape.dims[0] < rows)
    return; /* write_predictions reports the shortfall */
  if (first_row + rows > p->cap) {
    int64_t cap = (first_row + rows) * 2;
    int64_t *c = realloc(p->cls, (size_t)cap * sizeof *c);
    if (!c)
      return; /* write_predictions reports the shortfall */
    p->cls = c;
    p->cap = cap;
  }
  int64_t c = pred->shape.dims[1];
  const float *x = pred->data;
  for (int64_t i = 0; i < rows; i++) {
    int64_t best = 0;
    for (int64_t j = 1; j < c; j++)
      if (x[i * c + j] > x[i * c + best])
        best = j;
    p->cls[first_row + i] = best;
  }
  p->n = first_row + rows;
}

static gcc_status write_predictions(const predictions *p, const char *path, gcc_diag *d) {
  if (p->n == 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--predictions %s: no evaluation ran (or the model is no classifier)",
                        path);
  size_t cap = 16 + (size_t)p->n * 24, len = 0;
  char *buf = malloc(cap);
  if (!buf)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (--predictions)");
  len += (size_t)snprintf(buf, cap, "index,class\n");
  for (int64_t i = 0; i < p->n; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%" PRId64 ",%" PRId64 "\n", i, p->cls[i]);
  gcc_status s = gcc_write_file_atomic(path, buf, len, d);
  free(buf);
  return s;
}

/* What the command line asks for (step 1, parse_args). */
typedef struct train_args {
  const char *model_path;
  const char *data_dir, *output, *dump_after;
  int64_t eval_batch, threads, log_every, max_steps, show_predictions;
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

/* What the run is made of (step 2, build_run); run_free releases it. */
typedef struct train_run {
  gcc_device dev;
  gcc_graph *model;
  gcc_profiler *prof;
  gcc_cuda_backend *cuda;
  gcc_device_info cuda_info;
  gcc_kernel_cache_config kernel_cache; /* the session's kernel compiler reads it */
  gcc_session *s;
  const char *data_dir, *output;
  char data_buf[4096], near_model[4096 + 64], out_buf[4096];
  gcc_checkpoint resume; /* --resume */
  gcc_comm *nccl;        /* GPU ranks: NCCL over the MPI communicator */
  gcc_model_info info;   /* the model's format; for ONNX, what the import did */
} train_run;

static void run_free(train_run *r) {
  gcc_checkpoint_free(&r->resume);
  gcc_session_destroy(r->s);
  if (r->nccl)
    r->nccl->destroy(r->nccl);
  gcc_cuda_backend_destroy(r->cuda);
  gcc_profiler_destroy(r->prof);
  gcc_graph_free(r->model);
}

/* The default --output: MODEL with .pb replaced by .trained.pb. */
static void default_output(const char *model_path, char *buf, size_t cap) {
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
static int parse_args(int argc, char **argv, train_args *a) {
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
    OPT_LOSS_SCALE_GROWTH
  };
  static const struct option longopts[] = {
      {"device", required_argument, 0, OPT_DEVICE},
      {"data", required_argument, 0, OPT_DATA},
      {"epochs", required_argument, 0, OPT_RECIPE},
      {"batch-size", required_argument, 0, OPT_RECIPE},
      {"eval-batch-size", required_argument, 0, OPT_EVAL_BATCH},
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

/* The data folder when --data is not given: data/mnist (or
 * data/cifar-10-batches-bin, the folder of the official tarball), else the
 * same under ../ next to the model. */
static const char *default_data_dir(const train_args *a, const gcc_training *t, train_run *r) {
  const char *sub =
      t->dataset && strcmp(t->dataset, "cifar10") == 0 ? "cifar-10-batches-bin" : "mnist";
  snprintf(r->data_buf, sizeof r->data_buf, "data/%s", sub);
  if (is_dir(r->data_buf))
    return r->data_buf;
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", a->model_path);
  char *slash = strrchr(copy, '/');
  if (slash)
    *slash = '\0';
  snprintf(r->near_model, sizeof r->near_model, "%s/../data/%s", slash ? copy : ".", sub);
  return is_dir(r->near_model) ? r->near_model : r->data_buf;
}

/* After an export at --export-precision bf16 / fp16: the bundle's weight
 * bytes, as its reader counts them. */
static void print_bundle_weights(const char *path) {
  gcc_bundle *b = NULL;
  gcc_diag d = {0};
  if (gcc_bundle_read(path, &b, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: warning: %s\n", d.msg);
    return;
  }
  const gcc_bundle_info *i = gcc_bundle_get_info(b);
  if (i->precision != GCC_PRECISION_FP32)
    printf("bundle precision %s: %d of %d weight tensors in 16 bits, %" PRIu64
           " weight bytes (%" PRIu64 " in float32)\n",
           gcc_precision_name(i->precision), i->n_weights_16bit, i->n_weight_tensors,
           i->weight_bytes, i->weight_bytes_fp32);
  gcc_bundle_free(b);
}

/* --export-onnx: writes the ONNX file of the inference graph of `model`
 * (deploy/model_bundle.h gcc_inference_graph: the graph a bundle holds) to
 * `path`, or with path NULL only checks that it exports (before training:
 * an op without an ONNX counterpart is refused naming the node). Returns
 * -1 on success, else the exit status, with the message printed. */
static int onnx_export(const gcc_graph *model, const char *path) {
  gcc_diag d = {0};
  gcc_graph *ig = NULL;
  gcc_status s = gcc_inference_graph(model, &ig, &d);
  gcc_onnx_export_options o = {GCC_TRAIN_VERSION, NULL};
  if (s == GCC_OK)
    s = path ? gcc_onnx_export_file(ig, &o, path, "--export-onnx", &d)
             : gcc_onnx_export_check(ig, &d);
  gcc_graph_free(ig);
  if (s == GCC_OK)
    return -1;
  /* an I/O error names the flag already */
  fprintf(stderr, "gcc-train: %s%s\n", strncmp(d.msg, "--export-onnx", 13) ? "--export-onnx: " : "",
          d.msg);
  return s == GCC_ERR_IO || s == GCC_ERR_OUT_OF_MEMORY ? EXIT_RUN : EXIT_MODEL;
}

/* Step 2: the device, the model with the flags' overrides, the data
 * folder, the output path, the profiler, the backend and the session.
 * Returns -1 to go on, else the exit status (with *r released). */
static int build_run(train_args *a, train_run *r) {
  gcc_diag d = {0};
  char note[768];
  if (gcc_device_resolve(&a->want, gcc_cuda_check_supported, &r->dev, note, sizeof note, &d) !=
      GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_DEVICE;
  }
  /* one GPU per rank: rank r of a node takes cuda:<local rank> (of the
   * devices CUDA_VISIBLE_DEVICES leaves), unless --device names one */
  if (g_comm->size > 1 && r->dev.kind == GCC_DEVICE_CUDA && !a->device_indexed)
    r->dev.index = g_comm->local_rank;

  /* an ONNX model that a recipe makes trainable is imported for training:
   * its BatchNormalizations train as nn.BatchNorm2d (onnx/import.h); for
   * inference (an export without a recipe) they are folded */
  gcc_onnx_options oo = {0};
  oo.train = a->recipe.loss != NULL;
  if (gcc_model_open_with(a->model_path, &oo, &r->model, &r->info, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return d.status == GCC_ERR_IO ? EXIT_RUN : EXIT_MODEL;
  }
  int rc = apply_recipe(&a->recipe, &r->model);
  if (rc >= 0) {
    run_free(r);
    return rc;
  }
  /* every output is checked before the long work: the ONNX export here */
  if (a->export_onnx_path && (rc = onnx_export(r->model, NULL)) >= 0) {
    run_free(r);
    return rc;
  }
  if (!r->model->training.present && (a->export_path || a->export_onnx_path)) {
    /* an inference model (an imported ONNX file): export it as it is */
    gcc_status es = GCC_OK;
    if (a->export_path) {
      es = gcc_export_bundle(r->model, &a->eo, a->export_path, &d);
      if (es != GCC_OK)
        fprintf(stderr, "gcc-train: %s\n", d.msg);
      else if (!a->quiet) {
        printf("exported the inference graph of %s to %s\n", a->model_path, a->export_path);
        print_bundle_weights(a->export_path);
      }
    }
    rc = es == GCC_OK ? -1 : es == GCC_ERR_INVALID_GRAPH ? EXIT_MODEL : EXIT_RUN;
    if (rc < 0 && a->export_onnx_path) {
      rc = onnx_export(r->model, a->export_onnx_path);
      if (rc < 0 && !a->quiet)
        printf("exported the inference graph of %s as ONNX to %s\n", a->model_path,
               a->export_onnx_path);
    }
    run_free(r);
    return rc < 0 ? 0 : rc;
  }
  if (!r->model->training.present) {
    fprintf(stderr,
            "gcc-train: %s: the model has no training spec; nothing to train (it can "
            "be exported with --export or inspected with --dump-placement)\n",
            a->model_path);
    run_free(r);
    return EXIT_MODEL;
  }
  gcc_training *t = &r->model->training;
  if (a->threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    a->threads = n > 0 ? n : 1;
  }
  openblas_set_num_threads((int)a->threads);

  if (!a->data_dir && t->dataset && strcmp(t->dataset, "npy") == 0) {
    fprintf(stderr, "gcc-train: --dataset npy needs --data DIR (x_train.npy, y_train.npy, "
                    "x_test.npy, y_test.npy) or --data FILE.npz\n");
    run_free(r);
    return EXIT_USAGE;
  }
  r->data_dir = a->data_dir ? a->data_dir : default_data_dir(a, t, r);
  if (!a->data_dir && !is_dir(r->data_dir) && t->dataset && strcmp(t->dataset, "inline") != 0) {
    /* neither default folder exists: say where we looked, before anything
     * else (the device notice included) */
    int cifar = strcmp(t->dataset, "cifar10") == 0;
    fprintf(stderr,
            "gcc-train: %s: no %s data folder: looked in %s and %s (relative to the current "
            "directory); give the folder with --data DIR (%s)\n",
            a->model_path, cifar ? "CIFAR-10" : "MNIST", r->data_buf, r->near_model,
            cifar ? "the binary batches of cifar-10-binary.tar.gz: data_batch_1.bin .. "
                    "test_batch.bin"
                  : "the four IDX files, .gz or plain: train-images-idx3-ubyte, "
                    "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte");
    run_free(r);
    return EXIT_RUN;
  }
  if (note[0] && is_root())
    fprintf(stderr, "gcc-train: %s\n", note);
  r->output = a->output;
  if (!r->output && !a->no_output) {
    default_output(a->model_path, r->out_buf, sizeof r->out_buf);
    r->output = r->out_buf;
  }

  /* --profile: fails now, before training, if FILE cannot be written */
  if (a->profile_path && gcc_profiler_create(a->profile_path, &r->prof, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    run_free(r);
    return EXIT_RUN;
  }

  if (a->detect_anomaly && r->dev.kind == GCC_DEVICE_CUDA) {
    fprintf(stderr, "gcc-train: --detect-anomaly checks every node on the host: use --device "
                    "cpu\n");
    run_free(r);
    return EXIT_USAGE;
  }
  gcc_session_options so = {0};
  so.threads = (int)a->threads;
  so.plan.detect_anomaly = a->detect_anomaly;
  so.opt = t->opt;
  so.opt.scaler = g_loss_scale;
  so.dump_after = a->dump_after;
  so.dump_file = stderr;
  so.comm = g_comm;
  so.bucket_bytes = a->bucket_bytes;
  so.precision = a->precision;
  so.nondeterministic = g_nondeterministic;
  r->kernel_cache = (gcc_kernel_cache_config){NULL, !g_no_kernel_cache};
  if (r->dev.kind == GCC_DEVICE_CUDA) {
    if (gcc_device_info_cuda(r->dev.index, &r->cuda_info, &d) != GCC_OK ||
        gcc_cuda_backend_create(r->dev.index, &r->cuda, &d) != GCC_OK ||
        gcc_cuda_backend_set_algo_cache(r->cuda, NULL, !g_no_kernel_cache, &d) != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", d.msg);
      run_free(r);
      return EXIT_DEVICE;
    }
    so.backend = gcc_cuda_backend_table(r->cuda);
    so.device = GCC_DEV_CUDA(r->dev.index);
    so.plan.sm = r->cuda_info.cc_major * 10 + r->cuda_info.cc_minor;
    so.plan.sm_count = r->cuda_info.units;
    so.plan.compile = gcc_kernel_cache_hook; /* NVRTC through the kernel cache */
    so.plan.compile_user = &r->kernel_cache;
    so.plan.cuda_graph = !a->no_cuda_graph;
    /* the losses come back once per log interval (or progress-bar tick) */
    so.max_pending = a->log_every > 0 && a->log_every <= 4096 ? (int)a->log_every : 100;
    if (g_comm->size > 1) { /* GPU ranks reduce with NCCL (the id goes by MPI) */
      if (gcc_comm_nccl_create(g_comm, r->dev.index, &r->nccl, &d) != GCC_OK) {
        fprintf(stderr, "gcc-train: %s\n", d.msg);
        run_free(r);
        return EXIT_DEVICE;
      }
      so.comm = r->nccl;
    }
  }
  if (gcc_session_create(r->model, &so, &r->s, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    run_free(r);
    return d.status == GCC_ERR_DEVICE || d.status == GCC_ERR_OUT_OF_MEMORY ? EXIT_DEVICE
                                                                           : EXIT_MODEL;
  }
  if (a->resume_path) { /* the checkpoint, checked against this model and recipe */
    gcc_status rs = gcc_checkpoint_find(a->resume_path, &r->resume, stderr, &d);
    if (rs == GCC_OK)
      rs = gcc_checkpoint_check(&r->resume, r->model, r->s, &d);
    if (rs != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", d.msg);
      run_free(r);
      return rs == GCC_ERR_INVALID_ARGUMENT ? EXIT_USAGE
             : rs == GCC_ERR_PARSE          ? EXIT_MODEL /* corrupt */
                                            : EXIT_RUN;
    }
  }
  return -1;
}

static double wall_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --log-dir: the trainer's scalars, stamped with the wall-clock time */
static gcc_status log_scalar(void *user, const char *tag, int64_t step, double value, gcc_diag *d) {
  return gcc_event_log_scalar(user, tag, step, wall_seconds(), (float)value, d);
}

/* The trainer's on_inputs_read: no output replaces a file the run read
 * (the data set's files, ONNX external data, a checkpoint found in the
 * --resume folder; graph/outfile.h), checked before the first step. */
typedef struct inputs_check {
  const train_args *a;
  const train_run *r;
  int clash; /* 1: an output names an input (exit 2) */
} inputs_check;

static gcc_status check_inputs_read(void *user, gcc_diag *d) {
  inputs_check *c = user;
  const train_args *a = c->a;
  const gcc_named_path outs[] = {
      {"--output", a->no_output ? NULL : c->r->output},
      {"--predictions", a->predictions_path},
      {"--export", a->export_path},
      {"--export-onnx", a->export_onnx_path},
      {"--profile", a->profile_path},
  };
  gcc_status st = gcc_outfiles_check_inputs(outs, 5, d);
  c->clash = st != GCC_OK;
  return st;
}

/* Step 3: trains (SIGINT stops it between steps) and prints the summary.
 * Returns the trainer's status; *rc: the exit status so far. */
/* GCC_TRAIN_TEST_FAULT=RANK:STEP:KIND (tests only): after optimizer step
 * STEP, rank RANK fails with an error (KIND "error") or kills itself with
 * SIGKILL (KIND "kill"), as a rank that meets bad data or is killed does. */
typedef struct fault {
  int rank;
  int64_t step;
  char kind[16];
} fault;

static gcc_status inject_fault(void *user, int64_t step, gcc_diag *d) {
  const fault *f = user;
  if (step != f->step || g_comm->rank != f->rank)
    return GCC_OK;
  if (strcmp(f->kind, "kill") == 0)
    raise(SIGKILL);
  return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                      "GCC_TRAIN_TEST_FAULT: rank %d fails after step %" PRId64 " (injected)",
                      f->rank, step);
}

/* The GEMM groups whose cuBLASLt epilogue fell back to a plain GEMM and a
 * generated kernel, and why (the run summary and --dump-placement on a GPU). */
static void print_fallbacks(const gcc_plan *p) {
  int n = gcc_plan_epilogue_fallbacks(p);
  if (n == 0)
    return;
  char text[8192];
  gcc_plan_fallback_text(p, text, sizeof text);
  printf("GEMM epilogue fallbacks (%d; cuBLASLt offered no algorithm):\n%s", n, text);
}

/* --profile on a GPU: the device time of the training plan's steps (CUDA
 * events around every launch), its copies with bytes and bandwidth, and
 * how much of the input H2D ran while the previous step computed. */
static void print_device_profile(train_run *r, int64_t batch) {
  gcc_plan *p = NULL;
  gcc_diag pd = {0};
  if (!r->cuda || gcc_session_plan(r->s, GCC_MODE_TRAIN, batch, &p, &pd) != GCC_OK)
    return;
  gcc_plan_device_profile dp;
  gcc_plan_device_profile_get(p, &dp);
  if (dp.steps == 0)
    return;
  double n = (double)dp.steps;
  printf("%s device time per training step (%" PRId64 " steps, CUDA events): kernels %.3f ms, "
         "cuBLASLt %.3f ms, cuDNN %.3f ms, copies %.3f ms\n",
         r->cuda_info.name, dp.steps, dp.kernel_ms / n, dp.gemm_ms / n, dp.library_ms / n,
         dp.copy_ms / n);
  if (dp.h2d_ms > 0)
    printf("input H2D: %.0f bytes per step in %.3f ms (%.2f GB/s); %.0f%% of it overlapped the "
           "previous step's compute\n",
           dp.h2d_bytes / n, dp.h2d_ms / n, dp.h2d_bytes / (dp.h2d_ms * 1e6),
           100.0 * dp.overlap_ms / dp.h2d_ms);
  if (dp.copy_ms > 0)
    printf("copies inside the step: %.0f bytes per step (%.2f GB/s)\n", dp.copy_bytes / n,
           dp.copy_bytes / (dp.copy_ms * 1e6));
  gcc_cuda_backend_conv_report(r->cuda, stdout);
}

static gcc_status train(const train_args *a, train_run *r, predictions *preds, int *rc) {
  const gcc_training *t = &r->model->training;
  int quiet = a->quiet || !is_root();
  if (!quiet) {
    char ds[32], what[128];
    /* what will run: training for N epochs (at most --max-steps steps), or
     * one evaluation */
    if (t->epochs == 0)
      snprintf(what, sizeof what, "0 epochs (evaluation only)");
    else if (a->max_steps > 0)
      snprintf(what, sizeof what,
               "%" PRId64 " epochs or %" PRId64 " steps (--max-steps), whichever ends first",
               t->epochs, a->max_steps);
    else
      snprintf(what, sizeof what, "%" PRId64 " epochs", t->epochs);
    printf("gcc-train %s: %s on %s, %s, batch %" PRId64 ", %s lr %g, %" PRId64 " threads\n",
           GCC_TRAIN_VERSION, a->model_path, gcc_device_str(&r->dev, ds, sizeof ds), what,
           t->batch_size, gcc_optimizer_name(&t->opt), (double)t->opt.lr, a->threads);
    char recipe_line[512]; /* betas, weight decay (which tensors), clipping, schedule */
    if (t->opt.kind == GCC_OPT_ADAM || t->opt.weight_decay > 0.0f || t->opt.clip_grad_norm > 0.0f ||
        t->sched.kind != GCC_SCHED_NONE)
      printf("%s\n", gcc_recipe_describe(r->model, recipe_line, sizeof recipe_line));
    if (g_comm->size > 1) {
      int64_t lo = t->batch_size / g_comm->size;
      printf("data-parallel: %d ranks (%s), global batch %" PRId64 " = %" PRId64 "%s rows per "
             "rank, gradients all-reduced in buckets of %.3g MiB\n",
             g_comm->size, g_comm->name, t->batch_size, lo,
             t->batch_size % g_comm->size ? " or one more" : "",
             (double)(a->bucket_bytes > 0 ? a->bucket_bytes : GCC_DEFAULT_BUCKET_BYTES) /
                 1048576.0);
    }
    char bn[512];
    if (batchnorm_note(&r->info, bn, sizeof bn)[0])
      printf("%s\n", bn);
    fflush(stdout);
  }

  if (a->resume_path && !quiet)
    printf("resuming from %s: step %" PRId64 ", epoch %" PRId64 ", batch %" PRId64 "\n",
           r->resume.path, r->resume.step, r->resume.epoch + 1, r->resume.batch);
  install_stop_handlers();

  gcc_train_config cfg = {0};
  cfg.data_dir = r->data_dir;
  cfg.epochs = t->epochs;
  cfg.batch_size = t->batch_size;
  cfg.seed = t->seed;
  cfg.log_every = a->log_every;
  cfg.max_steps = a->max_steps;
  cfg.eval_batch = a->eval_batch;
  cfg.quiet = quiet;
  cfg.progress = !quiet && (a->progress == 1 || (a->progress == 2 && isatty(fileno(stdout))));
  cfg.comm = g_comm;
  fault f = {0};
  const char *fs = getenv("GCC_TRAIN_TEST_FAULT");
  if (fs && sscanf(fs, "%d:%" SCNd64 ":%15s", &f.rank, &f.step, f.kind) == 3) {
    cfg.after_step = inject_fault;
    cfg.step_user = &f;
  }
  cfg.out = stdout;
  cfg.stop = &g_stop;
  cfg.dataset_on_device = a->dataset_on_device;
  cfg.crop_pad = a->crop_pad;
  cfg.flip = a->flip;
  cfg.note = stderr;
  cfg.profiler = r->prof;
  if (a->predictions_path && is_root()) {
    cfg.on_eval_batch = collect_predictions;
    cfg.eval_user = preds;
  }
  cfg.show_predictions = is_root() ? a->show_predictions : 0;
  cfg.eval_on_root = a->eval_on_root;
  /* the same on every rank: the counts are summed over the ranks (the
   * trainer prints them on rank 0 only) */
  cfg.per_class = a->quiet && a->per_class == 2 ? 0 : a->per_class;
  cfg.confusion_matrix = a->confusion_matrix;
  cfg.checkpoint_dir = a->checkpoint_dir;
  cfg.checkpoint_every = a->checkpoint_every;
  cfg.keep_checkpoints = (int)a->keep_checkpoints;
  cfg.resume = a->resume_path ? &r->resume : NULL;
  inputs_check ic = {a, r, 0};
  cfg.on_inputs_read = check_inputs_read;
  cfg.inputs_user = &ic;
  gcc_train_report rep;
  gcc_diag d = {0};
  gcc_event_log *log = NULL;
  if (a->log_dir) {
    if (gcc_event_log_open(a->log_dir, wall_seconds(), &log, &d) != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", d.msg);
      *rc = EXIT_RUN;
      return d.status;
    }
    cfg.on_scalar = log_scalar;
    cfg.scalar_user = log;
    cfg.scalar_every = a->log_every > 0 ? a->log_every : 100;
  }
  gcc_status st = gcc_train_run(r->s, r->model, &cfg, &rep, &d);
  char log_note[4600] = "";
  if (log)
    snprintf(log_note, sizeof log_note,
             "TensorBoard events in %s, the scalars also in %s (view them: "
             "tensorboard --logdir %s)\n",
             gcc_event_log_path(log), gcc_event_log_csv_path(log), a->log_dir);
  gcc_event_log_close(log);
  *rc = 0;
  if (st == GCC_ERR_INTERRUPTED) {
    fprintf(stderr, "gcc-train: interrupted after %" PRId64 " steps (%s); no model written\n",
            rep.steps,
            g_stop == SIGTERM  ? "SIGTERM"
            : g_stop == SIGHUP ? "SIGHUP"
                               : "Ctrl-C, SIGINT");
    *rc = 128 + (int)g_stop;
  } else if (st != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    *rc = st == GCC_ERR_SHAPE || st == GCC_ERR_INVALID_GRAPH || st == GCC_ERR_UNSUPPORTED
              ? EXIT_MODEL
              : EXIT_RUN;
    if (rep.resume_refused) /* a corrupt checkpoint, or one past --epochs */
      *rc = st == GCC_ERR_PARSE ? EXIT_MODEL : EXIT_USAGE;
    if (ic.clash) /* an output would replace an input */
      *rc = EXIT_USAGE;
  } else if (is_root()) {
    /* the rate only when steps ran for long enough to time them */
    char rate[64] = "";
    if (rep.samples_per_sec > 0)
      snprintf(rate, sizeof rate, ": %.0f samples/s", rep.samples_per_sec);
    else if (rep.steps > 0)
      snprintf(rate, sizeof rate, " (too short to time)");
    char head[256];
    if (rep.steps == 0 && !a->resume_path)
      snprintf(head, sizeof head, "evaluated %s (no training)", a->model_path);
    else
      snprintf(head, sizeof head, "trained %" PRId64 " epochs (%" PRId64 " steps) in %.2f s%s",
               rep.epochs_done, rep.steps, rep.train_seconds, rate);
    if (rep.test_accuracy >= 0)
      printf("%s; test accuracy %.2f%%, test loss %.4f\n", head, 100.0 * rep.test_accuracy,
             rep.test_loss);
    else
      printf("%s; final loss %.6f\n", head, rep.test_loss);
    gcc_loss_scale_state ls;
    gcc_diag ld = {0};
    if (!a->quiet && gcc_session_steps(r->s) > 0 &&
        gcc_session_loss_scale(r->s, &ls, &ld) == GCC_OK && ls.on)
      printf("fp16 loss scaling: %" PRId64 " of %" PRId64
             " steps skipped (inf/nan gradients), scale %g\n",
             ls.skipped_steps, gcc_session_steps(r->s), (double)ls.scale);
    if (r->cuda && !a->quiet) {
      gcc_plan *p = NULL;
      gcc_diag pd = {0};
      if (gcc_session_plan(r->s, GCC_MODE_TRAIN, t->batch_size, &p, &pd) == GCC_OK) {
        printf("%s: %d launches and %d copies per training step, %zu bytes of device memory "
               "per step; CUDA Graph: %s (%" PRId64 " steps replayed)\n",
               r->cuda_info.name, gcc_plan_launches(p), gcc_plan_copies(p),
               gcc_plan_device_bytes(p),
               gcc_plan_graph_note(p)[0] ? gcc_plan_graph_note(p) : "captured",
               gcc_plan_graph_replays(p));
        print_fallbacks(p);
      }
    }
    const gcc_comm *sc = r->nccl ? r->nccl : g_comm;
    if (sc->size > 1 && !a->quiet && rep.steps > 0)
      printf("all-reduce (rank 0, %s): %" PRId64 " calls, %.1f MB, %.3f s in all (%.3f ms per "
             "step)\n",
             sc->name, sc->allreduce_calls, 1e-6 * (double)sc->allreduce_bytes,
             sc->allreduce_seconds,
             1e3 * sc->allreduce_seconds / (double)sc->allreduce_calls *
                 (double)sc->allreduce_calls / (double)rep.steps);
  }
  if (log_note[0] && !a->quiet && (st == GCC_OK || st == GCC_ERR_INTERRUPTED))
    fputs(log_note, stdout);
  return st;
}

/* Step 4, after a completed training: the trained model (--output), the
 * predictions (--predictions) and the bundle (--export). Returns the exit
 * status. */
static int write_outputs(const train_args *a, train_run *r, const predictions *preds) {
  gcc_diag d = {0};
  int rc = 0;
  gcc_graph *trained = NULL;
  if ((!a->no_output || a->export_path || a->export_onnx_path) &&
      gcc_session_export(r->s, &trained, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    rc = EXIT_RUN;
  }
  /* nothing trained (0 epochs): no MODEL.trained.pb unless --output asks */
  int save = !a->no_output && (a->output || r->model->training.epochs != 0);
  if (rc == 0 && !a->no_output && !save && !a->quiet)
    printf("nothing trained (0 epochs): no trained model written (--output FILE writes one)\n");
  if (rc == 0 && save) {
    if (gcc_model_save(trained, r->output, &d) != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", d.msg);
      rc = EXIT_RUN;
    } else if (!a->quiet) {
      printf("saved the trained model to %s\n", r->output);
    }
  }
  if (rc == 0 && a->predictions_path) {
    if (write_predictions(preds, a->predictions_path, &d) != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", d.msg);
      rc = EXIT_RUN;
    } else if (!a->quiet) {
      printf("wrote %" PRId64 " predictions to %s\n", preds->n, a->predictions_path);
    }
  }
  if (rc == 0 && a->export_path) {
    const gcc_export_options *eo = &a->eo;
    gcc_status es = gcc_export_bundle(trained, eo, a->export_path, &d);
    if (es != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", d.msg);
      rc = es == GCC_ERR_INVALID_GRAPH ? EXIT_MODEL : EXIT_RUN;
    } else if (!a->quiet) {
      printf("exported the inference graph to %s (cubin for", a->export_path);
      for (int i = 0; i < eo->n_archs; i++)
        printf("%s sm_%d", i ? "," : "", eo->archs[i]);
      printf(", PTX for compute_%d; batch sizes", eo->archs[eo->n_archs - 1]);
      if (eo->n_batch_sizes == 0)
        printf(" 1, 1000)\n");
      for (int i = 0; i < eo->n_batch_sizes; i++)
        printf("%s %" PRId64 "%s", i ? "," : "", eo->batch_sizes[i],
               i == eo->n_batch_sizes - 1 ? ")\n" : "");
    }
  }
  if (rc == 0 && a->export_onnx_path) {
    int orc = onnx_export(trained, a->export_onnx_path);
    if (orc >= 0)
      rc = orc;
    else if (!a->quiet)
      printf("exported the inference graph as ONNX (opset %d) to %s\n", GCC_ONNX_EXPORT_OPSET,
             a->export_onnx_path);
  }
  gcc_graph_free(trained);
  return rc;
}

/* The trace of a completed or interrupted (Ctrl-C) run and its per-op
 * table; returns EXIT_RUN when they cannot be written, else rc. */
static int write_profile(const train_args *a, train_run *r, int rc) {
  gcc_diag pd = {0};
  int64_t t0 = gcc_prof_now();
  gcc_status ps = gcc_profiler_write(r->prof, &pd);
  int64_t t1 = gcc_prof_now();
  if (ps == GCC_OK)
    ps = gcc_profiler_print_table(r->prof, stdout, &pd);
  if (ps != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", pd.msg);
    return rc == 0 ? EXIT_RUN : rc;
  }
  print_device_profile(r, r->model->training.batch_size);
  printf("trace written to %s in %.1f ms\n", a->profile_path, 1e-6 * (double)(t1 - t0));
  return rc;
}

/* After the flags and the communicator: compile only, or train and write. */
/* --checkpoint-dir: one writer at a time (two runs pruning each other's
 * checkpoints would lose both). The flock on the folder is held until the
 * process exits. Returns -1 to go on, else the exit status. */
static int lock_checkpoint_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "gcc-train: --checkpoint-dir %s: %s\n", dir, strerror(errno));
    return EXIT_RUN;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) {
      fprintf(stderr,
              "gcc-train: --checkpoint-dir %s: another run writes checkpoints there (the folder "
              "is locked); give each run its own folder\n",
              dir);
      return EXIT_USAGE;
    }
    fprintf(stderr, "gcc-train: --checkpoint-dir %s: cannot lock it: %s\n", dir, strerror(err));
    return EXIT_RUN;
  }
  return -1; /* fd stays open: the lock lasts as long as the run */
}

static int run_main(train_args *ap) {
  train_args a = *ap;
  int rc;
  if (a.dump_placement || a.dump_kernels) {
    if (!is_root())
      return 0; /* one report */
    return dump_placement_main(a.model_path, &a.want, a.device_explicit, a.strict, a.cuda_arch,
                               a.dump_placement ? (int)a.fmt : -1, a.dump_file, a.dump_kernels,
                               &a.recipe, a.dump_after, a.ranks > 0 ? (int)a.ranks : g_comm->size,
                               a.bucket_bytes, a.precision, (int)a.threads);
  }
  /* on every rank: rank 0 then evaluates every row for the predictions */
  a.eval_on_root = a.predictions_path != NULL || a.show_predictions > 0;
  if (!is_root()) { /* only rank 0 writes files */
    a.no_output = 1;
    a.output = NULL;
    a.predictions_path = NULL;
    a.export_path = NULL;
    a.export_onnx_path = NULL;
    a.profile_path = NULL;
  }
  if (a.checkpoint_dir && is_root() && (rc = lock_checkpoint_dir(a.checkpoint_dir)) >= 0)
    return rc;
  train_run r = {0};
  rc = build_run(&a, &r);
  if (rc >= 0)
    return rc;
  predictions preds = {0};
  gcc_status st = train(&a, &r, &preds, &rc);
  /* the outputs staged (graph/outfile.h), in place together only when
   * every one was written: a failed run writes nothing */
  if (st == GCC_OK) {
    gcc_outfiles_stage_begin();
    rc = write_outputs(&a, &r, &preds);
  }
  /* no trace after a failure, whose message is the thing to read */
  if (r.prof && (st == GCC_OK || st == GCC_ERR_INTERRUPTED))
    rc = write_profile(&a, &r, rc);
  if (st == GCC_OK) {
    gcc_diag sd = {0};
    if (gcc_outfiles_stage_end(rc == 0, &sd) != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", sd.msg);
      rc = EXIT_RUN;
    } else if (rc != 0 && !a.quiet) {
      fprintf(stderr, "gcc-train: no output written\n");
    }
    if (rc == 0 && a.export_path && !a.quiet)
      print_bundle_weights(a.export_path); /* read back once it is in place */
  }
  free(preds.cls);
  run_free(&r);
  return rc;
}

int main(int argc, char **argv) {
  gcc_cli_omp_wait_policy(argv); /* before anything: it may re-execute */
  /* a file-size limit (ulimit -f) becomes a reported EFBIG, not a kill */
  signal(SIGXFSZ, SIG_IGN);
  gcc_inputs_track(1); /* every file read is an input (graph/outfile.h) */
  /* `bazel run` starts us in the runfiles tree: work where the user was */
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && chdir(bwd) != 0)
    fprintf(stderr, "gcc-train: warning: cannot enter %s: %s\n", bwd, strerror(errno));

  train_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0)
    return rc;
  gcc_diag cd = {0};
  if (gcc_comm_create(&g_comm, &cd) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", cd.msg);
    return EXIT_RUN;
  }
  rc = run_main(&a);
  if (rc != 0 && g_comm->size > 1) { /* every rank goes down with this one */
    char msg[160];
    snprintf(msg, sizeof msg, "failed (exit status %d, the reason is above); ending every rank",
             rc);
    g_comm->abort(g_comm, rc, msg);
  }
  g_comm->destroy(g_comm);
  return rc;
}
