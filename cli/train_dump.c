/*
 * train_dump.c - gcc-train's compile-only reports: --dump-placement (where
 * every node runs and why, copies, the memory plan; on a GPU the GEMM
 * epilogue fallbacks, on the CPU each GEMM's library) and --dump-kernels
 * (the generated CUDA C, PTX, cubin and launch manifest).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/flags.h"
#include "cli/train_cli.h"
#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "codegen/lowering.h"
#include "graph/outfile.h"
#include "graph/loader.h"
#include "graph/util.h"
#include "runtime/compile.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_device.h"

/* How an ONNX model's BatchNormalizations were imported, for the run
 * summary and --dump-placement: trained as nn.BatchNorm2d (the import for
 * a recipe, gcc_onnx_options.train) or frozen into the Conv before them
 * (the import for inference). Empty for a gcc-train model or none. */
const char *batchnorm_note(const gcc_model_info *info, char *buf, size_t cap) {
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

/* --dump-placement: compile for the device asked for (an assumed one from
 * --cuda-arch when no GPU is usable), print the report, run nothing. */
static int write_kernels(const gcc_graph *g, int dev, const gcc_device_info *info,
                         const char *cuda_arch, const char *dir);
static void print_device_fallbacks(const gcc_graph *model, int index, const gcc_device_info *info,
                                   int64_t batch, FILE *f);
static void print_cpu_libraries(const gcc_graph *model, int threads, gcc_mode mode, int64_t batch,
                                FILE *f);

int dump_placement_main(const char *model_path, const gcc_device *want, int device_explicit,
                        int strict, const char *cuda_arch, int fmt, const char *file,
                        const char *kernels_dir, const gcc_recipe *recipe, const char *dump_after,
                        int world_size, int64_t bucket_bytes, int precision, int threads) {
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
  o.layout = g_layout;
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
  so.layout = g_layout;
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
