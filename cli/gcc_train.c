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
#include <malloc.h>
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
#include "cli/train_cli.h"
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
#include "datasets/tokens.h"

static volatile sig_atomic_t g_stop = 0;
/* The ranks of `mpirun -np N gcc-train ...` (a world of 1 without mpirun). */
gcc_comm *g_comm = NULL;

int is_root(void) {
  return !g_comm || g_comm->rank == 0;
}
int g_no_kernel_cache = 0;  /* --no-kernel-cache */
int g_layout = 0;           /* --layout (gcc_layout_choice): auto */
int g_nondeterministic = 0; /* --no-deterministic (--deterministic: 0, the default) */
/* --loss-scale, --loss-scale-growth-interval: fp16 loss scaling of every
 * training plan (mode NONE: none); set by parse_args */
gcc_loss_scale g_loss_scale;

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

/* The data folder when --data is not given: data/mnist (or
 * data/cifar-10-batches-bin, the folder of the official tarball), else the
 * same under ../ next to the model. */
static const char *default_data_dir(const train_args *a, const gcc_training *t, train_run *r) {
  int text = t->dataset && strcmp(t->dataset, "text") == 0;
  const char *sub = t->dataset && strcmp(t->dataset, "cifar10") == 0 ? "cifar-10-batches-bin"
                    : text                                           ? "shakespeare/input.txt"
                                                                     : "mnist";
  snprintf(r->data_buf, sizeof r->data_buf, "data/%s", sub);
  if (text ? access(r->data_buf, R_OK) == 0 : is_dir(r->data_buf))
    return r->data_buf;
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", a->model_path);
  char *slash = strrchr(copy, '/');
  if (slash)
    *slash = '\0';
  snprintf(r->near_model, sizeof r->near_model, "%s/../data/%s", slash ? copy : ".", sub);
  return (text ? access(r->near_model, R_OK) == 0 : is_dir(r->near_model)) ? r->near_model
                                                                           : r->data_buf;
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
#ifdef __GLIBC__
  /* the model the recipe replaced was freed into the heap's middle: given
   * back before the arenas are made, as gcc_model_parse does for its
   * message (GPT-2 124M's shape, batch 1: 4.12 -> 4.00 GB at the peak) */
  malloc_trim(0);
#endif
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

  if (a->grad_accum > 1 &&
      !(t->dataset && (strcmp(t->dataset, "text") == 0 || strcmp(t->dataset, "tokens") == 0))) {
    fprintf(stderr,
            "gcc-train: --grad-accum %" PRId64 ": gradient accumulation is for token data "
            "(--dataset text|tokens) only; --dataset %s trains on whole batches (raise "
            "--batch-size instead)\n",
            a->grad_accum, t->dataset ? t->dataset : "(none)");
    run_free(r);
    return EXIT_USAGE;
  }
  if (!a->data_dir && t->dataset && strcmp(t->dataset, "npy") == 0) {
    fprintf(stderr, "gcc-train: --dataset npy needs --data DIR (x_train.npy, y_train.npy, "
                    "x_test.npy, y_test.npy) or --data FILE.npz\n");
    run_free(r);
    return EXIT_USAGE;
  }
  if (!a->data_dir && t->dataset && strcmp(t->dataset, "tokens") == 0) {
    fprintf(stderr, "gcc-train: --dataset tokens needs --data DIR (train.bin and val.bin, uint16 "
                    "token ids)\n");
    run_free(r);
    return EXIT_USAGE;
  }
  r->data_dir = a->data_dir ? a->data_dir : default_data_dir(a, t, r);
  int text = t->dataset && strcmp(t->dataset, "text") == 0;
  if (!a->data_dir && text && access(r->data_dir, R_OK) != 0) {
    fprintf(stderr,
            "gcc-train: %s: no text file: looked for %s and %s (relative to the current "
            "directory); give one with --data FILE\n",
            a->model_path, r->data_buf, r->near_model);
    run_free(r);
    return EXIT_RUN;
  }
  a->steps_only = t->dataset && (text || strcmp(t->dataset, "tokens") == 0) && a->max_steps > 0 &&
                  a->recipe.epochs < 0;
  if (text) { /* the vocabulary goes into the model (and the trained model) */
    gcc_tokens tok;
    if (gcc_tokens_open_text(r->data_dir, &tok, &d) != GCC_OK) {
      fprintf(stderr, "gcc-train: %s\n", d.msg);
      run_free(r);
      return EXIT_RUN;
    }
    if (t->n_vocab == 0) { /* a model trained before keeps its own: the trainer compares */
      t->n_vocab = tok.vocab_size;
      memcpy(t->vocab, tok.vocab, (size_t)tok.vocab_size);
    }
    gcc_tokens_close(&tok);
  }
  if (!a->data_dir && !text && !is_dir(r->data_dir) && t->dataset &&
      strcmp(t->dataset, "inline") != 0) {
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
  so.layout = g_layout;
  so.grad_accum = (int)a->grad_accum;
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
  /* the weights once: the model reads the session's (run_free frees the
   * model after the session, and it is not read in between) */
  if (gcc_session_lend_params(r->s, r->model, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    run_free(r);
    return EXIT_RUN;
  }
#ifdef __GLIBC__
  malloc_trim(0); /* the model's copies of the weights, freed into the heap */
#endif
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
    if (a->steps_only)
      snprintf(what, sizeof what, "%" PRId64 " steps (--max-steps)", a->max_steps);
    else if (t->epochs == 0)
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

  if (a->resume_path && !quiet) { /* flushed: a log file shows it while the run goes on */
    printf("resuming from %s: step %" PRId64 ", epoch %" PRId64 ", batch %" PRId64 "\n",
           r->resume.path, r->resume.step, r->resume.epoch + 1, r->resume.batch);
    fflush(stdout);
  }
  install_stop_handlers();

  gcc_train_config cfg = {0};
  cfg.data_dir = r->data_dir;
  /* token data: --max-steps alone sets the length, as nanoGPT's max_iters */
  cfg.epochs = a->steps_only ? INT64_MAX / 4 : t->epochs;
  cfg.batch_size = t->batch_size;
  cfg.seed = t->seed;
  cfg.log_every = a->log_every;
  cfg.max_steps = a->max_steps;
  cfg.eval_batch = a->eval_batch;
  cfg.block_size = a->block_size;
  cfg.eval_every = a->eval_every;
  cfg.eval_batches = a->eval_batches;
  cfg.grad_accum = a->grad_accum;
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
    if (rep.language_model) { /* steps/s and tokens/s; nanoGPT's two losses */
      if (rep.steps > 0 && rep.samples_per_sec > 0)
        snprintf(head, sizeof head,
                 "trained %" PRId64 " steps in %.2f s: %.2f steps/s, %.0f tokens/s", rep.steps,
                 rep.train_seconds, (double)rep.steps / rep.train_seconds,
                 rep.samples_per_sec * (double)rep.tokens_per_sample);
      printf("%s; train loss %.4f, val loss %.4f\n", head, rep.eval_train_loss, rep.test_loss);
    } else if (rep.test_accuracy >= 0)
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
  gcc_graph *trained = NULL; /* the session's parameters in place: nothing steps past here */
  if ((!a->no_output || a->export_path || a->export_onnx_path) &&
      gcc_session_export_view(r->s, &trained, &d) != GCC_OK) {
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
