/*
 * gcc-run: inference from an exported .gccx bundle.
 *
 *   gcc-run OUT.gccx --input FILE [--labels FILE] [--device DEV] [--output FILE]
 *                    [--save-outputs OUT.npz|DIR] [--batch-size N] [--threads N] [--quiet]
 *   gcc-run OUT.gccx --info     (the manifest: version, precision, weight bytes, kernels)
 *   gcc-run MODEL.pb --generate N [--prompt TEXT] [--temperature X] [--top-k K] [--seed S]
 *                               [--no-kv-cache]
 *                               (text from a language model: deploy/generate.h)
 *
 * Instead of a bundle, a model file (an ONNX model or a gcc-train .pb,
 * recognised by content) runs on the CPU: the C API makes a CPU-only bundle
 * of its inference graph (deploy/model_bundle.h, gcc_bundle_open_bytes).
 *
 * FILE is an IDX file of uint8 images (n, height, width), gz or plain, such
 * as MNIST's t10k-images-idx3-ubyte.gz, normalized as the trainer did; or a
 * float32 .npy of shape (n, ...) matching the bundle's input, fed as is.
 * Writes one CSV line per sample (index,class,probability[,label]) to
 * --output (atomically) or stdout, and with --labels the accuracy.
 * --save-outputs writes the raw outputs, logits and probabilities (float32,
 * (n, classes)): into one NumPy .npz when the path ends in .npz, else as
 * logits.npy and probabilities.npy in that directory (created if needed).
 *
 * A tensor bundle (a model of one input and one output that is not
 * classifier logits, e.g. nn.TransformerEncoder's (n, T, C); deploy/bundle.h
 * format version 3) has no classes: its one output, float32 (n, ...) as the
 * model computes it, goes to --output FILE.npy and/or --save-outputs P
 * (P.npz, or P/NAME.npy with NAME the output's name, characters other than
 * letters, digits, '.', '_' and '-' written '_'); one of them is required,
 * and --labels or an --output that is not .npy is a bad command line.
 *
 * Exit status: 0 success; 1 a run-time failure (input files, I/O);
 * 2 a bad command line; 3 an invalid bundle (corrupt, truncated, another
 * format version); 4 the device is unusable (no GPU, or no kernel image in
 * the bundle fits it).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/flags.h"
#include "graph/loader.h"
#include "graph/outfile.h"
#include "datasets/dataset.h"
#include "runtime/device.h"
#include "deploy/gcc_api.h"
#include "datasets/npy.h"
#include "deploy/generate.h"

static void usage(FILE *f) {
  fprintf(f, "usage: gcc-run BUNDLE.gccx|MODEL --input FILE [options]\n"
             "       gcc-run BUNDLE.gccx|MODEL --info\n"
             "       gcc-run MODEL.pb --generate N [--prompt TEXT] [--temperature X] [--top-k K]\n"
             "                        [--seed S] [--no-kv-cache]\n"
             "\n"
             "Runs the inference graph of a bundle written by gcc-train --export, or of a\n"
             "model file (ONNX or gcc-train .pb, recognised by content) on the CPU.\n"
             "\n"
             "  --input FILE        IDX images (n, height, width; .gz or plain), normalized as\n"
             "                      in training, or a float32 .npy of shape (n, ...) fed as is\n"
             "  --labels FILE       IDX labels (n): print the accuracy and add a label column\n"
             "  --device DEV        cpu, cuda, cuda:N or auto (default auto: a usable CUDA GPU,\n"
             "                      else the CPU, saying why)\n"
             "  --output FILE       write the predictions there (atomically), not to stdout;\n"
             "                      for a model whose output is not classifier logits (a\n"
             "                      tensor bundle): FILE.npy, that output (float32, n x ...)\n"
             "  --save-outputs P    also write the raw outputs (logits, probabilities; float32,\n"
             "                      n x classes): P.npz as one NumPy .npz, else a directory P\n"
             "                      with logits.npy and probabilities.npy (a tensor bundle:\n"
             "                      its one output, P.npz or P/NAME.npy)\n"
             "  --batch-size N      rows per run (default 1000)\n"
             "  --threads N         CPU threads for GEMMs (default: online CPUs)\n"
             "  --quiet             no summary line (else it ends, on a GPU, with how many\n"
             "                      batches were replayed from CUDA Graphs, and why not)\n"
             "  --no-cuda-graph     on a GPU, launch every batch kernel by kernel instead of\n"
             "                      replaying the forward captured per batch size\n"
             "  --info              print the bundle's format version, precision, weight\n"
             "                      bytes, signature and CUDA kernels, and exit (no --input)\n"
             "  --generate N        sample N tokens from a language model trained by gcc-train\n"
             "                      (--dataset text or tokens; a .pb) and print the prompt and\n"
             "                      them, as nanoGPT's sample.py: decoded with the model's\n"
             "                      vocabulary, else as token ids; on the CPU, one position per\n"
             "                      token with a KV cache while the context fits the block\n"
             "                      size (a GPT's causal attentions), then the model run on\n"
             "                      the last block-size tokens for every new one\n"
             "  --no-kv-cache       run the last block-size tokens for every token\n"
             "  --prompt TEXT       the start (default a newline, as sample.py)\n"
             "  --temperature X     divide the logits by X > 0 (default 1.0)\n"
             "  --top-k K           sample among the K most likely tokens only (default: all)\n"
             "  --seed S            the sampling seed (default 1337, sample.py's)\n"
             "  --version, --help\n"
             "\n"
             "Output: CSV with a header, one line per sample: index,class,probability[,label]\n"
             "(class = argmax of the logits, the first on ties; probability = its softmax);\n"
             "a tensor bundle writes no CSV: give --output FILE.npy and/or --save-outputs P.\n"
             "\n"
             "Exit status: 0 ok, 1 run-time failure, 2 bad command line, 3 invalid bundle,\n"
             "4 device unusable.\n");
}

/* --info: what the bundle's manifest and weights section say. */
static void print_info(const char *path, const gcc_bundle_info *i) {
  char sh[128];
  printf("bundle %s: format version %u, gcc-train %s, created %s, from %s\n", path,
         i->format_version, i->gcc_train_version, i->created, i->model);
  printf("precision %s: weights %" PRIu64 " bytes (%d of %d tensors in 16 bits; %" PRIu64
         " bytes in float32)\n",
         gcc_precision_name(i->precision), i->weight_bytes, i->n_weights_16bit, i->n_weight_tensors,
         i->weight_bytes_fp32);
  printf("input %s %s %s\n", i->input.name, gcc_dtype_name(i->input.dtype),
         gcc_shape_str(&i->input.shape, sh, sizeof sh));
  for (int k = 0; k < i->n_outputs; k++)
    printf("output %s %s %s\n", i->outputs[k].name, gcc_dtype_name(i->outputs[k].dtype),
           gcc_shape_str(&i->outputs[k].shape, sh, sizeof sh));
  if (i->kind == GCC_BUNDLE_TENSOR)
    printf("kind tensor: the model's output as it computes it (no classes, no softmax)\n");
  if (i->n_cubin_archs == 0) {
    printf("CUDA: none (a CPU-only bundle)\n");
    return;
  }
  printf("CUDA: cubin for");
  for (int k = 0; k < i->n_cubin_archs; k++)
    printf("%s sm_%d", k ? "," : "", i->cubin_archs[k]);
  if (i->ptx_arch)
    printf(", PTX for compute_%d", i->ptx_arch);
  printf("; batch sizes");
  for (int k = 0; k < i->n_batch_sizes; k++)
    printf("%s %" PRId64, k ? "," : "", i->batch_sizes[k]);
  printf("\n");
}

/* 1 if the file starts with the .npy magic (anything else is read as IDX,
 * gz or plain, whose reader names what is wrong). */
static int sniff_npy(const char *path) {
  struct stat st; /* a FIFO or device is left to the readers, which refuse it */
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
    return 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  uint8_t head[6];
  size_t n = fread(head, 1, sizeof head, f);
  fclose(f);
  return n == 6 && gcc_npy_is_npy(head, 6);
}

/* SIGINT, SIGTERM, SIGHUP: remove the temporary of the output being
 * written, then die of the signal as before. */
static void on_signal(int sig) {
  gcc_outfile_cleanup_signal_safe();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* --generate: each piece of text as it comes */
static gcc_status emit_stdout(void *user, const char *bytes, size_t n, gcc_diag *d) {
  (void)user;
  if (fwrite(bytes, 1, n, stdout) != n || fflush(stdout) != 0)
    return gcc_diag_set(d, GCC_ERR_IO, "cannot write the generated text to stdout");
  return GCC_OK;
}

static int generate_main(const char *path, gcc_generate_options *gen, int other_flags, int threads,
                         int quiet) {
  if (gen->n_new < 0) {
    fprintf(stderr, "gcc-run: --prompt, --temperature, --top-k, --seed and --no-kv-cache go with "
                    "--generate N\n");
    return EXIT_USAGE;
  }
  if (other_flags) {
    fprintf(stderr, "gcc-run: --generate prints text; --input, --labels, --output, "
                    "--save-outputs and --info are for classifier bundles\n");
    return EXIT_USAGE;
  }
  gcc_diag d = {0};
  gcc_graph *model = NULL;
  if (gcc_model_load(path, &model, &d) != GCC_OK) {
    fprintf(stderr,
            "gcc-run: %s (--generate takes a gcc-train model file, e.g. "
            "MODEL.trained.pb)\n",
            d.msg);
    return d.status == GCC_ERR_IO ? EXIT_RUN : EXIT_MODEL;
  }
  gen->threads = threads;
  gen->emit = emit_stdout;
  static char report[800];
  gen->report = report;
  gen->report_cap = sizeof report;
  gcc_status s = gcc_generate(model, gen, &d);
  gcc_graph_free(model);
  if (s == GCC_OK) {
    if (fputc('\n', stdout) == EOF || fflush(stdout) != 0)
      s = gcc_diag_set(&d, GCC_ERR_IO, "cannot write the generated text to stdout");
  }
  if (s != GCC_OK) {
    fprintf(stderr, "gcc-run: %s\n", d.msg);
    return s == GCC_ERR_INVALID_ARGUMENT                      ? EXIT_USAGE
           : s == GCC_ERR_INVALID_GRAPH || s == GCC_ERR_SHAPE ? EXIT_MODEL
                                                              : EXIT_RUN;
  }
  char k[32] = "all";
  if (gen->top_k > 0)
    snprintf(k, sizeof k, "%" PRId64, gen->top_k);
  if (!quiet)
    fprintf(stderr,
            "gcc-run: %" PRId64 " tokens sampled on the CPU (temperature %g, top-k %s, "
            "seed %" PRIu64 "; %s)\n",
            gen->n_new, gen->temperature, k, gen->seed, gen->report);
  return 0;
}

/* A tensor output's name as a file name: characters other than letters,
 * digits, '.', '_' and '-' become '_' ("/enc/Add_output_0" ->
 * "_enc_Add_output_0"); "." and ".." too. */
static void file_name_of(const char *name, char *out, size_t cap) {
  size_t n = 0;
  for (; name[n] && n + 1 < cap; n++) {
    char c = name[n];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    out[n] = ok ? c : '_';
  }
  out[n] = '\0';
  if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0 || n == 0)
    snprintf(out, cap, "output");
}

/* --save-outputs DIR's files (outs[2..3]) never name an input. */
static gcc_status dir_collisions(const gcc_named_path *outs, const gcc_named_path *ins, int n_ins,
                                 gcc_diag *d) {
  for (int i = 2; i < 4; i++)
    for (int j = 0; j < n_ins; j++)
      if (outs[i].path && ins[j].path && gcc_outfile_same(outs[i].path, ins[j].path))
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "%s %s names %s (%s): an output never overwrites an input",
                            outs[i].flag, outs[i].path, ins[j].flag, ins[j].path);
  return GCC_OK;
}

/* What a tensor bundle (no classes) cannot do, as a bad command line
 * naming the flag; 0 when the flags fit. */
static int tensor_flags_ok(const char *bundle, const gcc_bundle_tensor *o, const char *labels,
                           const char *output, const char *save) {
  char sh[128];
  gcc_shape_str(&o->shape, sh, sizeof sh);
  size_t ol = output ? strlen(output) : 0;
  if (labels)
    fprintf(stderr,
            "gcc-run: --labels: %s's output '%s' %s is a tensor, not classifier logits: it has "
            "no classes to score (write it with --output FILE.npy or --save-outputs P)\n",
            bundle, o->name, sh);
  else if (output && !(ol > 4 && strcmp(output + ol - 4, ".npy") == 0))
    fprintf(stderr,
            "gcc-run: --output %s: %s's output '%s' %s is a tensor, not classifier logits: it "
            "is written as a float32 .npy (--output FILE.npy), there is no CSV of classes\n",
            output, bundle, o->name, sh);
  else if (!output && !save)
    fprintf(stderr,
            "gcc-run: %s's output '%s' %s is a tensor, not classifier logits (no CSV of "
            "classes): give --output FILE.npy and/or --save-outputs P.npz|DIR\n",
            bundle, o->name, sh);
  else
    return 1;
  return 0;
}

/* Sets rows [first, first + rows) of the input as the session's next batch. */
static gcc_status set_batch(gccx_session *s, const gcc_bundle_info *info, const uint8_t *pixels,
                            const float *floats, int64_t per_sample, int64_t first, int64_t rows,
                            gcc_diag *d) {
  return pixels ? gccx_set_input_images(s, pixels + first * per_sample, rows, d)
                : gccx_set_input(s, info->input.name, floats + first * per_sample, rows, d);
}

int main(int argc, char **argv) {
  gcc_cli_omp_wait_policy(argv); /* before anything: it may re-execute */
  signal(SIGXFSZ, SIG_IGN);      /* a file-size limit becomes a reported EFBIG */
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);
  const char *bwd = getenv("BUILD_WORKING_DIRECTORY");
  if (bwd && chdir(bwd) != 0)
    fprintf(stderr, "gcc-run: warning: cannot enter %s: %s\n", bwd, strerror(errno));
  enum {
    OPT_INPUT = 256,
    OPT_LABELS,
    OPT_DEVICE,
    OPT_OUTPUT,
    OPT_BATCH,
    OPT_THREADS,
    OPT_QUIET,
    OPT_VERSION,
    OPT_HELP,
    OPT_SAVE,
    OPT_INFO,
    OPT_GENERATE,
    OPT_PROMPT,
    OPT_TEMPERATURE,
    OPT_TOP_K,
    OPT_SEED,
    OPT_NO_GRAPH,
    OPT_NO_KV_CACHE
  };
  static const struct option longopts[] = {
      {"input", required_argument, 0, OPT_INPUT},
      {"labels", required_argument, 0, OPT_LABELS},
      {"device", required_argument, 0, OPT_DEVICE},
      {"output", required_argument, 0, OPT_OUTPUT},
      {"save-outputs", required_argument, 0, OPT_SAVE},
      {"batch-size", required_argument, 0, OPT_BATCH},
      {"threads", required_argument, 0, OPT_THREADS},
      {"quiet", no_argument, 0, OPT_QUIET},
      {"version", no_argument, 0, OPT_VERSION},
      {"help", no_argument, 0, OPT_HELP},
      {"info", no_argument, 0, OPT_INFO},
      {"generate", required_argument, 0, OPT_GENERATE},
      {"prompt", required_argument, 0, OPT_PROMPT},
      {"temperature", required_argument, 0, OPT_TEMPERATURE},
      {"top-k", required_argument, 0, OPT_TOP_K},
      {"seed", required_argument, 0, OPT_SEED},
      {"no-cuda-graph", no_argument, 0, OPT_NO_GRAPH},
      {"no-kv-cache", no_argument, 0, OPT_NO_KV_CACHE},
      {0, 0, 0, 0},
  };
  const char *input = NULL, *labels_path = NULL, *device = "auto", *output = NULL, *save = NULL;
  int64_t batch = 1000, threads = 0;
  int quiet = 0, show_info = 0, no_graph = 0, c;
  gcc_generate_options gen = {0};
  gen.n_new = -1; /* no --generate */
  gen.temperature = 1.0;
  gen.seed = 1337;
  int gen_flags = 0; /* --prompt, --temperature, --top-k, --seed given */
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    switch (c) {
    case OPT_INPUT: input = optarg; break;
    case OPT_LABELS: labels_path = optarg; break;
    case OPT_DEVICE: device = optarg; break;
    case OPT_OUTPUT: output = optarg; break;
    case OPT_SAVE: save = optarg; break;
    case OPT_BATCH:
      if (!gcc_flag_i64("gcc-run", "--batch-size", optarg, 1, &batch))
        return EXIT_USAGE;
      break;
    case OPT_THREADS:
      if (!gcc_flag_i64("gcc-run", "--threads", optarg, 1, &threads))
        return EXIT_USAGE;
      break;
    case OPT_QUIET: quiet = 1; break;
    case OPT_NO_GRAPH: no_graph = 1; break;
    case OPT_INFO: show_info = 1; break;
    case OPT_GENERATE:
      if (!gcc_flag_i64("gcc-run", "--generate", optarg, 0, &gen.n_new))
        return EXIT_USAGE;
      break;
    case OPT_PROMPT:
      gen.prompt = optarg;
      gen_flags = 1;
      break;
    case OPT_TEMPERATURE: {
      char *end;
      gen.temperature = strtod(optarg, &end);
      if (end == optarg || *end || !(gen.temperature > 0) || gen.temperature > 1e30) {
        fprintf(stderr, "gcc-run: --temperature '%s': expected a number > 0\n", optarg);
        return EXIT_USAGE;
      }
      gen_flags = 1;
      break;
    }
    case OPT_TOP_K:
      if (!gcc_flag_i64("gcc-run", "--top-k", optarg, 1, &gen.top_k))
        return EXIT_USAGE;
      gen_flags = 1;
      break;
    case OPT_SEED: {
      char *end;
      errno = 0;
      unsigned long long v = strtoull(optarg, &end, 10);
      if (errno || end == optarg || *end || strchr(optarg, '-')) {
        fprintf(stderr, "gcc-run: --seed '%s': expected an integer in [0, 2^64 - 1]\n", optarg);
        return EXIT_USAGE;
      }
      gen.seed = (uint64_t)v;
      gen_flags = 1;
      break;
    }
    case OPT_NO_KV_CACHE:
      gen.no_kv_cache = 1;
      gen_flags = 1;
      break;
    case OPT_VERSION:
      printf("gcc-run %s (bundle format %u)\n", GCC_TRAIN_VERSION, GCC_BUNDLE_FORMAT_VERSION);
      return 0;
    case OPT_HELP: usage(stdout); return 0;
    case ':': fprintf(stderr, "gcc-run: %s needs a value\n", argv[optind - 1]); return EXIT_USAGE;
    default:
      fprintf(stderr, "gcc-run: unknown option '%s' (see --help)\n", argv[optind - 1]);
      return EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, optind >= argc ? "gcc-run: no bundle given\n"
                                   : "gcc-run: exactly one bundle expected\n");
    usage(stderr);
    return EXIT_USAGE;
  }
  if (gen.n_new >= 0 || gen_flags) /* text from a language model */
    return generate_main(argv[optind], &gen, input || labels_path || output || save || show_info,
                         (int)threads, quiet);
  if (show_info) { /* the bundle's manifest, nothing run */
    gccx_bundle *b = NULL;
    gcc_diag d = {0};
    if (gccx_bundle_open(argv[optind], &b, &d) != GCC_OK) {
      fprintf(stderr, "gcc-run: %s\n", d.msg);
      return d.status == GCC_ERR_IO ? EXIT_RUN : EXIT_MODEL;
    }
    print_info(argv[optind], gcc_bundle_get_info(gccx_bundle_raw(b)));
    gccx_bundle_close(&b);
    return 0;
  }
  if (!input) {
    fprintf(stderr, "gcc-run: --input FILE is required\n");
    return EXIT_USAGE;
  }
  gcc_diag d = {0};
  gcc_inputs_track(1); /* every file read is an input (graph/outfile.h) */
  /* the outputs, before any work: never an input, writable; --save-outputs
   * DIR writes DIR/logits.npy and DIR/probabilities.npy */
  char save_logits[4200], save_probs[4200];
  size_t save_len = save ? strlen(save) : 0;
  int save_npz = save_len > 4 && strcmp(save + save_len - 4, ".npz") == 0;
  if (save && !save_npz) {
    snprintf(save_logits, sizeof save_logits, "%s/logits.npy", save);
    snprintf(save_probs, sizeof save_probs, "%s/probabilities.npy", save);
  }
  gcc_named_path outs[] = {{"--output", output},
                           {"--save-outputs", save_npz ? save : NULL},
                           {"--save-outputs", save && !save_npz ? save_logits : NULL},
                           {"--save-outputs", save && !save_npz ? save_probs : NULL}};
  const gcc_named_path ins[] = {
      {"the bundle", argv[optind]}, {"--input", input}, {"--labels", labels_path}};
  /* the folder's files: collisions only (the folder is made after the run) */
  gcc_status oc = gcc_outfiles_check(outs, 2, ins, 3, &d);
  if (oc == GCC_OK)
    oc = dir_collisions(outs, ins, 3, &d);
  if (oc != GCC_OK) {
    fprintf(stderr, "gcc-run: %s\n", d.msg);
    return d.status == GCC_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_RUN;
  }
  gcc_device want;
  if (gcc_device_parse(device, &want, &d) != GCC_OK) {
    fprintf(stderr, "gcc-run: %s\n", d.msg);
    return EXIT_USAGE;
  }
  gccx_bundle *b = NULL;
  if (gccx_bundle_open(argv[optind], &b, &d) != GCC_OK) {
    fprintf(stderr, "gcc-run: %s\n", d.msg);
    return d.status == GCC_ERR_IO ? EXIT_RUN : EXIT_MODEL;
  }
  const gcc_bundle_info *info;
  gccx_bundle_info(b, &info, &d);
  /* a tensor bundle: its one output, no classes; --save-outputs DIR writes
   * DIR/NAME.npy */
  int tensor = info->kind == GCC_BUNDLE_TENSOR;
  char file[256] = "";
  if (tensor) {
    if (!tensor_flags_ok(argv[optind], &info->outputs[0], labels_path, output, save)) {
      gccx_bundle_close(&b);
      return EXIT_USAGE;
    }
    file_name_of(info->outputs[0].name, file, sizeof file);
    if (save && !save_npz)
      snprintf(save_logits, sizeof save_logits, "%s/%s.npy", save, file);
    outs[3].path = NULL;
    if (dir_collisions(outs, ins, 3, &d) != GCC_OK) {
      fprintf(stderr, "gcc-run: %s\n", d.msg);
      gccx_bundle_close(&b);
      return EXIT_USAGE;
    }
  }
  /* the files the bundle's model read (ONNX external data) are inputs too */
  if (gcc_outfiles_check_inputs(outs, 4, &d) != GCC_OK) {
    fprintf(stderr, "gcc-run: %s\n", d.msg);
    gccx_bundle_close(&b);
    return EXIT_USAGE;
  }
  int64_t per_sample = 1;
  for (int i = 1; i < info->input.shape.ndim; i++)
    per_sample *= info->input.shape.dims[i];

  /* the input: raw IDX images or a float32 .npy */
  int rc = 0;
  uint8_t *pixels = NULL, *labels = NULL;
  float *floats = NULL;
  int64_t n = 0;
  char sh[128], sh2[128];
  if (sniff_npy(input)) {
    gcc_shape s;
    if (gcc_npy_read_f32(input, &s, &floats, &d) != GCC_OK) {
      fprintf(stderr, "gcc-run: %s\n", d.msg);
      rc = EXIT_RUN;
    } else {
      int64_t per = 1;
      for (int i = 1; i < s.ndim; i++)
        per *= s.dims[i];
      n = s.dims[0];
      if (per != per_sample || s.ndim < 2) {
        fprintf(stderr, "gcc-run: %s: array of shape %s, but input '%s' takes %s (n first)\n",
                input, gcc_shape_str(&s, sh, sizeof sh), info->input.name,
                gcc_shape_str(&info->input.shape, sh2, sizeof sh2));
        rc = EXIT_RUN;
      }
    }
  } else {
    int64_t dims[4];
    if (gcc_idx_read(input, 3, dims, &pixels, &d) != GCC_OK) {
      fprintf(stderr, "gcc-run: %s\n", d.msg);
      rc = EXIT_RUN;
    } else if (dims[1] * dims[2] != per_sample ||
               (info->input.shape.ndim == 4 &&
                (info->input.shape.dims[2] != dims[1] || info->input.shape.dims[3] != dims[2]))) {
      /* an NCHW input names height and width: 14x56 is no 28x28 */
      fprintf(stderr,
              "gcc-run: %s: images of %" PRId64 "x%" PRId64 " pixels, but input '%s' takes %s "
              "(n first)\n",
              input, dims[1], dims[2], info->input.name,
              gcc_shape_str(&info->input.shape, sh, sizeof sh));
      rc = EXIT_RUN;
    }
    n = dims[0];
  }
  if (rc == 0 && labels_path) {
    int64_t ld[4];
    if (gcc_idx_read(labels_path, 1, ld, &labels, &d) != GCC_OK) {
      fprintf(stderr, "gcc-run: %s\n", d.msg);
      rc = EXIT_RUN;
    } else if (ld[0] != n) {
      fprintf(stderr, "gcc-run: %s has %" PRId64 " labels but %s has %" PRId64 " samples\n",
              labels_path, ld[0], input, n);
      rc = EXIT_RUN;
    } else { /* class indices, as gcc-train checks them */
      int64_t classes = info->outputs[0].shape.ndim == 2 ? info->outputs[0].shape.dims[1] : 0;
      for (int64_t i = 0; i < n && rc == 0; i++)
        if (labels[i] >= classes) {
          fprintf(stderr,
                  "gcc-run: %s: label %d of sample %" PRId64 " is not a class of the bundle "
                  "(0 to %" PRId64 ")\n",
                  labels_path, labels[i], i, classes - 1);
          rc = EXIT_RUN;
        }
    }
  }

  if (rc == 0 && tensor && n == 0) {
    fprintf(stderr, "gcc-run: %s has no samples: no output to write\n", input);
    rc = EXIT_RUN;
  }
  gccx_session *s = NULL;
  if (rc == 0) {
    gccx_session_options o = {device, (int)threads, batch < n ? batch : (n > 0 ? n : 1)};
    char note[768];
    if (gccx_session_create(b, &o, &s, note, sizeof note, &d) != GCC_OK) {
      fprintf(stderr, "gcc-run: %s\n", d.msg);
      rc = d.status == GCC_ERR_DEVICE || d.status == GCC_ERR_UNSUPPORTED ? EXIT_DEVICE : EXIT_MODEL;
    } else {
      if (note[0] && !quiet)
        fprintf(stderr, "gcc-run: %s\n", note);
      if (no_graph)
        gccx_session_set_cuda_graphs(s, 0, &d);
    }
    batch = o.max_batch;
  }

  /* run, batch by batch; the CSV grows in memory and is written at once */
  size_t cap = 64 + (tensor ? 0 : (size_t)n * 48), len = 0;
  char *csv = rc == 0 ? malloc(cap) : NULL;
  if (rc == 0 && !csv) {
    fprintf(stderr, "gcc-run: out of memory (%" PRId64 " predictions)\n", n);
    rc = EXIT_RUN;
  }
  int64_t correct = 0, classes_all = 0;
  float *all_logits = NULL, *all_probs = NULL;
  if (rc == 0)
    len += (size_t)snprintf(csv, cap, "index,class,probability%s\n", labels ? ",label" : "");
  /* double buffering on a GPU: batch i + 1 is set (its H2D issued) while
   * the device computes batch i, before batch i's outputs are read */
  gcc_status st0 = rc == 0 && n > 0 ? set_batch(s, info, pixels, floats, per_sample, 0,
                                                n < batch ? n : batch, &d)
                                    : GCC_OK;
  for (int64_t first = 0; rc == 0 && first < n; first += batch) {
    int64_t rows = n - first < batch ? n - first : batch;
    gcc_status st = st0;
    const float *logits = NULL, *probs = NULL;
    int64_t r = 0, classes = 0;
    if (st == GCC_OK)
      st = gccx_run(s, &d);
    int64_t next = first + batch;
    if (st == GCC_OK && next < n)
      st = set_batch(s, info, pixels, floats, per_sample, next, n - next < batch ? n - next : batch,
                     &d);
    if (st == GCC_OK) /* a tensor bundle: its one output, classes = values per row */
      st = gccx_get_output(s, info->outputs[0].name, &logits, &r, &classes, &d);
    if (st == GCC_OK && !tensor)
      st = gccx_get_output(s, "probabilities", &probs, &r, &classes, &d);
    if (st == GCC_OK && r != rows) /* the rows the output has, never more than it holds */
      st = gcc_diag_set(&d, GCC_ERR_INTERNAL,
                        "%s: output has %" PRId64 " rows for a batch of %" PRId64, argv[optind], r,
                        rows);
    if (st != GCC_OK) {
      fprintf(stderr, "gcc-run: %s\n", d.msg);
      rc = st == GCC_ERR_DEVICE ? EXIT_DEVICE : EXIT_RUN;
      break;
    }
    if ((save || tensor) && !all_logits) {
      classes_all = classes;
      all_logits = malloc((size_t)(n * classes) * sizeof *all_logits);
      all_probs = tensor ? NULL : malloc((size_t)(n * classes) * sizeof *all_probs);
      if (!all_logits || (!tensor && !all_probs)) {
        fprintf(stderr, "gcc-run: out of memory (--save-outputs of %" PRId64 " rows)\n", n);
        rc = EXIT_RUN;
        break;
      }
    }
    if (save || tensor)
      memcpy(all_logits + first * classes, logits, (size_t)(rows * classes) * sizeof *logits);
    if (save && !tensor)
      memcpy(all_probs + first * classes, probs, (size_t)(rows * classes) * sizeof *probs);
    for (int64_t i = 0; !tensor && i < rows; i++) {
      const float *x = logits + i * classes;
      int64_t best = 0;
      for (int64_t j = 1; j < classes; j++) /* argmax as the trainer's accuracy: first on ties */
        if (x[j] > x[best])
          best = j;
      len += (size_t)snprintf(csv + len, cap - len, "%" PRId64 ",%" PRId64 ",%.9g", first + i, best,
                              (double)probs[i * classes + best]);
      if (labels) {
        len += (size_t)snprintf(csv + len, cap - len, ",%d", labels[first + i]);
        correct += best == labels[first + i];
      }
      len += (size_t)snprintf(csv + len, cap - len, "\n");
    }
  }
  /* the CSV and --save-outputs staged: in place together or not at all */
  gcc_outfiles_stage_begin();
  /* a tensor bundle's output: (n, d1, ...) */
  gcc_shape tshape = info->outputs[0].shape;
  tshape.dims[0] = n;
  if (rc == 0 && tensor && output && all_logits) {
    uint8_t *bytes;
    size_t size;
    gcc_status ts = gcc_npy_encode_f32(&tshape, all_logits, &bytes, &size, &d);
    if (ts == GCC_OK) {
      ts = gcc_write_file_atomic(output, bytes, size, &d);
      free(bytes);
    }
    if (ts != GCC_OK) {
      fprintf(stderr, "gcc-run: --output %s: %s\n", output, d.msg);
      rc = EXIT_RUN;
    }
  } else if (rc == 0 && !tensor) {
    if (output) {
      if (gcc_write_file_atomic(output, csv, len, &d) != GCC_OK) {
        fprintf(stderr, "gcc-run: %s\n", d.msg);
        rc = EXIT_RUN;
      }
    } else if (fwrite(csv, 1, len, stdout) != len || fflush(stdout) != 0) {
      fprintf(stderr, "gcc-run: cannot write the predictions to stdout\n");
      rc = EXIT_RUN;
    }
  }
  if (rc == 0 && save && all_logits) {
    const char *names[2] = {"logits", "probabilities"};
    const float *data[2] = {all_logits, all_probs};
    gcc_shape shapes[2] = {{2, {n, classes_all}}, {2, {n, classes_all}}};
    int n_saved = 2;
    if (tensor) { /* its one output, under its (file) name */
      names[0] = file;
      shapes[0] = tshape;
      n_saved = 1;
    }
    size_t len_save = strlen(save);
    gcc_status ss = GCC_OK;
    if (len_save > 4 && strcmp(save + len_save - 4, ".npz") == 0) {
      ss = gcc_npz_write(save, names, shapes, data, n_saved, &d);
    } else {
      if (mkdir(save, 0755) != 0 && errno != EEXIST)
        ss = gcc_diag_set(&d, GCC_ERR_IO, "--save-outputs %s: %s", save, strerror(errno));
      for (int i = 0; i < n_saved && ss == GCC_OK; i++) {
        char path[4200];
        uint8_t *bytes;
        size_t size;
        snprintf(path, sizeof path, "%s/%s.npy", save, names[i]);
        ss = gcc_npy_encode_f32(&shapes[i], data[i], &bytes, &size, &d);
        if (ss == GCC_OK) {
          ss = gcc_write_file_atomic(path, bytes, size, &d);
          free(bytes);
        }
      }
    }
    if (ss != GCC_OK) {
      fprintf(stderr, "gcc-run: %s\n", d.msg);
      rc = EXIT_RUN;
    }
  }
  gcc_diag sd = {0};
  if (gcc_outfiles_stage_end(rc == 0, &sd) != GCC_OK) {
    fprintf(stderr, "gcc-run: %s\n", sd.msg);
    rc = EXIT_RUN;
  }
  if (rc == 0 && !quiet) {
    FILE *f = output ? stdout : stderr; /* never mixed into CSV on stdout */
    fprintf(f, "gcc-run: %" PRId64 " samples on %s", n, gccx_session_device(s));
    gccx_run_stats rs;
    if (strcmp(gccx_session_device(s), "cpu") != 0 && gccx_session_stats(s, &rs, &d) == GCC_OK)
      fprintf(f,
              "; %" PRId64 " of %" PRId64 " batches replayed from CUDA Graphs (%" PRId64
              " captured)%s%s%s",
              rs.replays, rs.runs, rs.captures, rs.graph_note[0] ? " [" : "", rs.graph_note,
              rs.graph_note[0] ? "]" : "");
    if (labels)
      fprintf(f, "; accuracy %.2f%% (%" PRId64 "/%" PRId64 ")",
              n ? 100.0 * (double)correct / (double)n : 0.0, correct, n);
    if (output)
      fprintf(f, tensor ? "; output '%s' in %s" : "%s; predictions in %s",
              tensor ? info->outputs[0].name : "", output);
    if (save)
      fprintf(f, "; outputs in %s", save);
    fprintf(f, "\n");
  }
  free(csv);
  free(all_logits);
  free(all_probs);
  free(pixels);
  free(labels);
  free(floats);
  gccx_session_destroy(&s);
  gccx_bundle_close(&b);
  return rc;
}
