/*
 * gcc-train: compile a model graph and train it.
 *
 *   gcc-train MODEL.pb [--device cpu|auto|cuda|cuda:N] [--data DIR] ...
 *
 * Exit status: 0 success; 1 a run-time failure (data, numerics, I/O);
 * 2 a bad command line; 3 an invalid model file; 4 the requested device is
 * unusable; 130 interrupted (SIGINT; no model is written).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h>

#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "graph/loader.h"
#include "runtime/device.h"
#include "runtime/placement_report.h"
#include "runtime/session.h"
#include "runtime/trainer.h"

#define GCC_TRAIN_VERSION "0.1.0"

enum { EXIT_RUN = 1, EXIT_USAGE = 2, EXIT_MODEL = 3, EXIT_DEVICE = 4, EXIT_INTERRUPTED = 130 };

static volatile sig_atomic_t g_stop = 0;
static int g_no_kernel_cache = 0; /* --no-kernel-cache */

static void on_sigint(int sig) {
  (void)sig;
  g_stop = 1;
  signal(SIGINT, SIG_DFL); /* a second Ctrl-C kills at once */
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: gcc-train MODEL.pb [options]\n"
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
          "  --lr X              learning rate of the model's optimizer (X >= 0)\n"
          "  --seed N            shuffling seed\n"
          "  --threads N         CPU threads for GEMMs (default: online CPUs)\n"
          "  --log-every N       print the mean loss every N batches (default 100; 0: never)\n"
          "  --max-steps N       stop after N optimizer steps in all (default: no limit)\n"
          "  --show-predictions N\n"
          "                      after the last evaluation, print the ground truth and the\n"
          "                      predicted class of the first N test images\n"
          "  --output FILE       trained model (default: MODEL with .pb replaced by\n"
          "                      .trained.pb); written atomically\n"
          "  --no-output         do not write the trained model\n"
          "  --dump-after PASS   print the IR after PASS (infer, autodiff, placement,\n"
          "                      copy-insertion, all)\n"
          "  --dump-placement[=FORMAT]\n"
          "                      compile only and print where every node runs and why, every\n"
          "                      host-device copy and the memory plan; FORMAT is text\n"
          "                      (default), json or dot; needs no GPU\n"
          "  --dump-placement-file FILE\n"
          "                      write that report to FILE (atomically) instead of stdout\n"
          "  --cuda-arch ARCH    the GPU to compile for when none is usable: sm_80, sm_86,\n"
          "                      sm_89 or sm_90 (default sm_90)\n"
          "  --strict-placement  a node the chosen device cannot run is an error instead of\n"
          "                      falling back to the CPU\n"
          "  --dump-kernels DIR  compile only and write the generated CUDA C of the plan\n"
          "                      (DIR/kernels.cu, one NVRTC program) and its launch\n"
          "                      manifest (DIR/manifest.json), compiled by NVRTC to PTX\n"
          "                      (DIR/kernels.ptx) and a cubin for the device's architecture\n"
          "                      (DIR/kernels.sm_XX.cubin); needs --device cuda\n"
          "  --no-kernel-cache   compile with NVRTC without reading or writing the kernel\n"
          "                      cache ($XDG_CACHE_HOME/gcc-train, else ~/.cache/gcc-train)\n"
          "  --quiet             only errors and the final summary line\n"
          "  --version           print the version and exit\n"
          "  --help              this text\n"
          "\n"
          "Exit status: 0 ok, 1 run-time failure, 2 bad command line, 3 invalid model,\n"
          "4 device unusable, 130 interrupted (no model written).\n");
}

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo) {
    fprintf(stderr, "gcc-train: %s '%s': expected an integer >= %" PRId64 "\n", flag, s, lo);
    return 0;
  }
  *out = v;
  return 1;
}

static int parse_f(const char *flag, const char *s, float *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0.0) || v > 1e6) {
    fprintf(stderr, "gcc-train: %s '%s': expected a number in [0, 1e6]\n", flag, s);
    return 0;
  }
  *out = (float)v;
  return 1;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* --dump-placement: compile for the device asked for (an assumed one from
 * --cuda-arch when no GPU is usable), print the report, run nothing. */
static int write_kernels(const gcc_graph *g, int dev, const gcc_device_info *info,
                         const char *cuda_arch, const char *dir);

static int dump_placement_main(const char *model_path, const gcc_device *want,
                               int device_explicit, int strict, const char *cuda_arch, int fmt,
                               const char *file, const char *kernels_dir, int64_t epochs,
                               int64_t batch, float lr, const char *dump_after) {
  (void)epochs;
  gcc_diag d = {0};
  gcc_graph *model;
  if (gcc_model_load(model_path, &model, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return d.status == GCC_ERR_IO ? EXIT_RUN : EXIT_MODEL;
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
      fprintf(stderr, "gcc-train: no usable CUDA GPU (%s); compiling for an assumed %s device "
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
  o.batch_size = batch > 0 ? batch : (model->training.present ? model->training.batch_size : 1);
  o.opt = model->training.opt;
  if (lr >= 0.0f)
    o.opt.lr = lr;
  o.device = dev;
  o.device_explicit = device_explicit;
  o.n_cuda_devices = count > 0 ? count : 1;
  o.strict_placement = strict;
  o.dump_after = dump_after;
  o.dump_file = stderr;
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
  if (rc == 0 && kernels_dir)
    rc = write_kernels(g, dev, &devs[1], cuda_arch, kernels_dir);
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
  gcc_graph_free(model);
  return rc;
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

int main(int argc, char **argv) {
  /* `bazel run` starts us in the runfiles tree: work where the user was */
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && chdir(bwd) != 0)
    fprintf(stderr, "gcc-train: warning: cannot enter %s: %s\n", bwd, strerror(errno));

  enum {
    OPT_DEVICE = 256, OPT_DATA, OPT_EPOCHS, OPT_BATCH, OPT_EVAL_BATCH, OPT_LR, OPT_SEED,
    OPT_THREADS, OPT_LOG_EVERY, OPT_MAX_STEPS, OPT_OUTPUT, OPT_NO_OUTPUT, OPT_DUMP_AFTER,
    OPT_QUIET, OPT_VERSION, OPT_HELP, OPT_DUMP_PLACEMENT, OPT_DUMP_PLACEMENT_FILE,
    OPT_CUDA_ARCH, OPT_STRICT, OPT_DUMP_KERNELS, OPT_NO_KERNEL_CACHE, OPT_SHOW_PREDICTIONS
  };
  static const struct option longopts[] = {
      {"device", required_argument, 0, OPT_DEVICE},
      {"data", required_argument, 0, OPT_DATA},
      {"epochs", required_argument, 0, OPT_EPOCHS},
      {"batch-size", required_argument, 0, OPT_BATCH},
      {"eval-batch-size", required_argument, 0, OPT_EVAL_BATCH},
      {"lr", required_argument, 0, OPT_LR},
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
      {"strict-placement", no_argument, 0, OPT_STRICT},
      {"dump-kernels", required_argument, 0, OPT_DUMP_KERNELS},
      {"no-kernel-cache", no_argument, 0, OPT_NO_KERNEL_CACHE},
      {"show-predictions", required_argument, 0, OPT_SHOW_PREDICTIONS},
      {"quiet", no_argument, 0, OPT_QUIET},
      {"version", no_argument, 0, OPT_VERSION},
      {"help", no_argument, 0, OPT_HELP},
      {0, 0, 0, 0},
  };
  const char *device_str = "auto", *data_dir = NULL, *output = NULL, *dump_after = NULL;
  int64_t epochs = -1, batch = -1, eval_batch = 1000, seed = -1, threads = 0, log_every = 100;
  int64_t max_steps = 0, show_predictions = 0;
  float lr = -1.0f;
  int quiet = 0, no_output = 0, device_explicit = 0, dump_placement = 0, strict = 0;
  const char *dump_format = NULL, *dump_file = NULL, *cuda_arch = "sm_90";
  const char *dump_kernels = NULL;
  opterr = 0;
  int c;
  /* a leading ':' makes getopt_long return ':' (not '?') for a flag whose
   * value is missing, so that the message says so */
  while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    switch (c) {
    case OPT_DEVICE:
      device_str = optarg;
      device_explicit = 1;
      break;
    case OPT_DUMP_PLACEMENT:
      dump_placement = 1;
      dump_format = optarg;
      break;
    case OPT_DUMP_PLACEMENT_FILE:
      dump_placement = 1;
      dump_file = optarg;
      break;
    case OPT_CUDA_ARCH: cuda_arch = optarg; break;
    case OPT_STRICT: strict = 1; break;
    case OPT_DUMP_KERNELS: dump_kernels = optarg; break;
    case OPT_NO_KERNEL_CACHE: g_no_kernel_cache = 1; break;
    case OPT_DATA: data_dir = optarg; break;
    case OPT_EPOCHS: if (!parse_i64("--epochs", optarg, 0, &epochs)) return EXIT_USAGE; break;
    case OPT_BATCH: if (!parse_i64("--batch-size", optarg, 1, &batch)) return EXIT_USAGE; break;
    case OPT_EVAL_BATCH:
      if (!parse_i64("--eval-batch-size", optarg, 1, &eval_batch)) return EXIT_USAGE;
      break;
    case OPT_LR: if (!parse_f("--lr", optarg, &lr)) return EXIT_USAGE; break;
    case OPT_SEED: if (!parse_i64("--seed", optarg, 0, &seed)) return EXIT_USAGE; break;
    case OPT_THREADS:
      if (!parse_i64("--threads", optarg, 1, &threads)) return EXIT_USAGE;
      break;
    case OPT_LOG_EVERY:
      if (!parse_i64("--log-every", optarg, 0, &log_every)) return EXIT_USAGE;
      break;
    case OPT_MAX_STEPS:
      if (!parse_i64("--max-steps", optarg, 1, &max_steps)) return EXIT_USAGE;
      break;
    case OPT_SHOW_PREDICTIONS:
      if (!parse_i64("--show-predictions", optarg, 0, &show_predictions)) return EXIT_USAGE;
      break;
    case OPT_OUTPUT: output = optarg; break;
    case OPT_NO_OUTPUT: no_output = 1; break;
    case OPT_DUMP_AFTER: dump_after = optarg; break;
    case OPT_QUIET: quiet = 1; break;
    case OPT_VERSION: printf("gcc-train %s\n", GCC_TRAIN_VERSION); return 0;
    case OPT_HELP: usage(stdout); return 0;
    case ':':
      fprintf(stderr, "gcc-train: %s needs a value\n", argv[optind - 1]);
      return EXIT_USAGE;
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
  const char *model_path = argv[optind];
  gcc_diag d = {0};

  gcc_device want, dev;
  if (gcc_device_parse(device_str, &want, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  gcc_dump_format fmt;
  if (gcc_dump_format_parse(dump_format, &fmt, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  gcc_device_info arch_info;
  if (gcc_device_info_from_arch(cuda_arch, 0, &arch_info, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_USAGE;
  }
  if (dump_placement || dump_kernels)
    return dump_placement_main(model_path, &want, device_explicit, strict, cuda_arch,
                               dump_placement ? (int)fmt : -1, dump_file, dump_kernels, epochs,
                               batch, lr, dump_after);

  char note[768];
  if (gcc_device_resolve(&want, &dev, note, sizeof note, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return EXIT_DEVICE;
  }
  if (note[0])
    fprintf(stderr, "gcc-train: %s\n", note);

  gcc_graph *model;
  if (gcc_model_load(model_path, &model, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    return d.status == GCC_ERR_IO ? EXIT_RUN : EXIT_MODEL;
  }
  if (!model->training.present) {
    fprintf(stderr, "gcc-train: %s: the model has no training spec; nothing to train\n",
            model_path);
    gcc_graph_free(model);
    return EXIT_MODEL;
  }
  gcc_training *t = &model->training;
  if (epochs >= 0)
    t->epochs = epochs;
  if (batch > 0)
    t->batch_size = batch;
  if (seed >= 0)
    t->seed = (uint64_t)seed;
  if (lr >= 0.0f)
    t->opt.lr = lr;
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? n : 1;
  }
  openblas_set_num_threads((int)threads);

  char data_buf[4096];
  if (!data_dir) {
    const char *sub = t->dataset && strcmp(t->dataset, "cifar10") == 0
                          ? "cifar-10-batches-bin" /* the folder of the official tarball */
                          : "mnist";
    snprintf(data_buf, sizeof data_buf, "data/%s", sub);
    data_dir = data_buf;
    if (!is_dir(data_dir)) {
      char copy[4096];
      snprintf(copy, sizeof copy, "%s", model_path);
      char *slash = strrchr(copy, '/');
      if (slash)
        *slash = '\0';
      static char near_model[4096 + 64];
      snprintf(near_model, sizeof near_model, "%s/../data/%s", slash ? copy : ".", sub);
      if (is_dir(near_model))
        data_dir = near_model;
    }
  }

  char out_buf[4096];
  if (!output && !no_output) {
    size_t n = strlen(model_path);
    if (n > 3 && strcmp(model_path + n - 3, ".pb") == 0)
      snprintf(out_buf, sizeof out_buf, "%.*s.trained.pb", (int)(n - 3), model_path);
    else
      snprintf(out_buf, sizeof out_buf, "%s.trained.pb", model_path);
    output = out_buf;
  }

  gcc_session_options so = {0};
  so.threads = (int)threads;
  so.opt = t->opt;
  so.dump_after = dump_after;
  so.dump_file = stderr;
  gcc_session *s;
  if (gcc_session_create(model, &so, &s, &d) != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    gcc_graph_free(model);
    return EXIT_MODEL;
  }

  if (!quiet) {
    char ds[32];
    printf("gcc-train %s: %s on %s, %" PRId64 " epochs, batch %" PRId64 ", %s lr %g, %" PRId64
           " threads\n",
           GCC_TRAIN_VERSION, model_path, gcc_device_str(&dev, ds, sizeof ds), t->epochs,
           t->batch_size, t->opt.kind == GCC_OPT_ADAM ? "Adam" : "SGD", (double)t->opt.lr,
           threads);
    fflush(stdout);
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);

  gcc_train_config cfg = {0};
  cfg.data_dir = data_dir;
  cfg.epochs = t->epochs;
  cfg.batch_size = t->batch_size;
  cfg.seed = t->seed;
  cfg.log_every = log_every;
  cfg.max_steps = max_steps;
  cfg.eval_batch = eval_batch;
  cfg.quiet = quiet;
  cfg.progress = !quiet && isatty(fileno(stdout));
  cfg.out = stdout;
  cfg.stop = &g_stop;
  cfg.show_predictions = show_predictions;
  gcc_train_report r;
  gcc_status st = gcc_train_run(s, model, &cfg, &r, &d);
  int rc = 0;
  if (st == GCC_ERR_INTERRUPTED) {
    fprintf(stderr, "gcc-train: interrupted after %" PRId64 " steps; no model written\n",
            r.steps);
    rc = EXIT_INTERRUPTED;
  } else if (st != GCC_OK) {
    fprintf(stderr, "gcc-train: %s\n", d.msg);
    rc = st == GCC_ERR_SHAPE || st == GCC_ERR_INVALID_GRAPH || st == GCC_ERR_UNSUPPORTED
             ? EXIT_MODEL
             : EXIT_RUN;
  } else {
    if (r.test_accuracy >= 0)
      printf("trained %" PRId64 " epochs (%" PRId64 " steps) in %.2f s: %.0f samples/s; test "
             "accuracy %.2f%%, test loss %.4f\n",
             r.epochs_done, r.steps, r.train_seconds, r.samples_per_sec,
             100.0 * r.test_accuracy, r.test_loss);
    else
      printf("trained %" PRId64 " epochs (%" PRId64 " steps) in %.2f s: %.0f samples/s; final "
             "loss %.6f\n",
             r.epochs_done, r.steps, r.train_seconds, r.samples_per_sec, r.test_loss);
    if (!no_output) {
      gcc_graph *trained = NULL;
      if (gcc_session_export(s, &trained, &d) != GCC_OK ||
          gcc_model_save(trained, output, &d) != GCC_OK) {
        fprintf(stderr, "gcc-train: %s\n", d.msg);
        rc = EXIT_RUN;
      } else if (!quiet) {
        printf("saved the trained model to %s\n", output);
      }
      gcc_graph_free(trained);
    }
  }
  gcc_session_destroy(s);
  gcc_graph_free(model);
  return rc;
}
