/*
 * nvrtc_compile - how long NVRTC takes to compile one plan's kernels to PTX
 * + cubin (cold: no cache), and how long a kernel-cache hit takes (warm).
 * Prints a markdown table; times are medians over --runs runs. The first
 * compilation in a process also pays NVRTC's own start-up, so it is
 * reported on its own row.
 *
 *   bazel run //bench:nvrtc_compile -- [FILE.cu | --sample] [--sm 90] [--runs 9]
 *
 * Without FILE it compiles the kernels generated for the MNIST MLP training
 * plan on cuda:0 (batch 64: the loss and the optimizer kernels; the GEMMs
 * are cuBLASLt calls). --sample compiles a built-in sample instead: 8
 * kernels in the style of codegen/emit.c (pointwise with float4 and
 * broadcasts, a bias-gradient reduction, two one-block losses, SGD and Adam
 * updates). No GPU needed.
 *
 * Then the same source split into NVRTC programs (codegen/program_split.h)
 * compiled on 1, 2, 4, ... threads up to the online CPUs (--threads LIST:
 * those counts): cold (no cache) and warm (every program a cache hit), wall
 * time, one run each. --split-only skips the one-program rows.
 */
#include <dirent.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "codegen/nvrtc.h"
#include "codegen/program_split.h"
#include "models/models.h"
#include "runtime/compile.h"
#include "graph/util.h"

static const char SAMPLE[] =
    "/* gcc-train generated kernels: bench sample (MLP training step), codegen version 1. */\n"
    "\n"
    "__device__ __forceinline__ float fused_add_relu_elem(float a, float b) {\n"
    "  float t0 = a + b;\n  return t0 > 0.0f ? t0 : 0.0f;\n}\n"
    "extern \"C\" __global__ void fused_add_relu(const float* __restrict__ in0, const float* "
    "__restrict__ in1, float* __restrict__ out0) {\n"
    "  /* nodes: add1 (Add), relu1 (Relu) */\n"
    "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
    "  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < 32768LL; q += "
    "stride) {\n"
    "    float4 a0 = reinterpret_cast<const float4*>(in0)[q];\n"
    "    float4 a1 = reinterpret_cast<const float4*>(in1)[q];\n"
    "    float4 r;\n"
    "    r.x = fused_add_relu_elem(a0.x, a1.x);\n    r.y = fused_add_relu_elem(a0.y, a1.y);\n"
    "    r.z = fused_add_relu_elem(a0.z, a1.z);\n    r.w = fused_add_relu_elem(a0.w, a1.w);\n"
    "    reinterpret_cast<float4*>(out0)[q] = r;\n  }\n}\n\n"
    "extern \"C\" __global__ void fused_bias_relu(const float* __restrict__ in0, const float* "
    "__restrict__ in1, float* __restrict__ out0) {\n"
    "  /* nodes: add2 (Add, bias [256] broadcast over [128, 256]), relu2 (Relu) */\n"
    "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
    "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < 32768LL; i += "
    "stride) {\n"
    "    float t0 = in0[i] + in1[(i / 1LL) % 256LL];\n"
    "    out0[i] = t0 > 0.0f ? t0 : 0.0f;\n  }\n}\n\n"
    "extern \"C\" __global__ void fused_relu_grad(const float* __restrict__ in0, const float* "
    "__restrict__ in1, float* __restrict__ out0) {\n"
    "  /* nodes: relu2_grad (ReluGrad) */\n"
    "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
    "  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < 8192LL; q += "
    "stride) {\n"
    "    float4 g = reinterpret_cast<const float4*>(in0)[q];\n"
    "    float4 y = reinterpret_cast<const float4*>(in1)[q];\n"
    "    float4 r;\n"
    "    r.x = y.x > 0.0f ? g.x : 0.0f;\n    r.y = y.y > 0.0f ? g.y : 0.0f;\n"
    "    r.z = y.z > 0.0f ? g.z : 0.0f;\n    r.w = y.w > 0.0f ? g.w : 0.0f;\n"
    "    reinterpret_cast<float4*>(out0)[q] = r;\n  }\n}\n\n"
    "extern \"C\" __global__ void fused_bias_grad(const float* __restrict__ in0, float* "
    "__restrict__ out0) {\n"
    "  /* nodes: add2_grad_bias (ReduceSumTo [128, 256] -> [256]) */\n"
    "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
    "  for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < 256LL; o += "
    "stride) {\n"
    "    float acc = 0.0f;\n"
    "    for (long long r = 0; r < 128LL; r++) {\n"
    "      long long i = ((o / 1LL) % 256LL) * 1LL + ((r / 1LL) % 128LL) * 256LL;\n"
    "      acc += in0[i];\n    }\n    out0[o] = acc;\n  }\n}\n\n"
    "extern \"C\" __global__ void softmax_ce_loss(const float* __restrict__ logits, const "
    "long long* __restrict__ labels, float* __restrict__ loss, float* __restrict__ dlogits, "
    "int* __restrict__ bad_label) {\n"
    "  /* nodes: loss (SoftmaxCrossEntropy, mean over 128 rows of 10); one block of 256 */\n"
    "  __shared__ double s_sum[256];\n"
    "  double acc = 0.0;\n"
    "  for (long long row = threadIdx.x; row < 128LL; row += blockDim.x) {\n"
    "    const float* x = logits + row * 10LL;\n"
    "    long long y = labels[row];\n"
    "    if (y < 0 || y >= 10) { *bad_label = (int)row; continue; }\n"
    "    float m = x[0];\n"
    "    for (int c = 1; c < 10; c++) m = fmaxf(m, x[c]);\n"
    "    float s = 0.0f;\n"
    "    for (int c = 0; c < 10; c++) s += expf(x[c] - m);\n"
    "    float lse = m + logf(s);\n"
    "    acc += (double)(lse - x[y]);\n"
    "    for (int c = 0; c < 10; c++)\n"
    "      dlogits[row * 10LL + c] = (expf(x[c] - lse) - (c == y ? 1.0f : 0.0f)) / 128.0f;\n"
    "  }\n"
    "  s_sum[threadIdx.x] = acc;\n  __syncthreads();\n"
    "  for (int s = 128; s > 0; s >>= 1) {\n"
    "    if (threadIdx.x < s) s_sum[threadIdx.x] += s_sum[threadIdx.x + s];\n"
    "    __syncthreads();\n  }\n"
    "  if (threadIdx.x == 0) loss[0] = (float)(s_sum[0] / 128.0);\n}\n\n"
    "extern \"C\" __global__ void mse_loss(const float* __restrict__ pred, const float* "
    "__restrict__ target, float* __restrict__ loss, float* __restrict__ dpred) {\n"
    "  /* nodes: loss2 (MseLoss, mean over 1280); one block of 256 */\n"
    "  __shared__ double s_sum[256];\n"
    "  double acc = 0.0;\n"
    "  for (long long i = threadIdx.x; i < 1280LL; i += blockDim.x) {\n"
    "    float e = pred[i] - target[i];\n"
    "    acc += (double)e * (double)e;\n"
    "    dpred[i] = 2.0f * e / 1280.0f;\n  }\n"
    "  s_sum[threadIdx.x] = acc;\n  __syncthreads();\n"
    "  for (int s = 128; s > 0; s >>= 1) {\n"
    "    if (threadIdx.x < s) s_sum[threadIdx.x] += s_sum[threadIdx.x + s];\n"
    "    __syncthreads();\n  }\n"
    "  if (threadIdx.x == 0) loss[0] = (float)(s_sum[0] / 1280.0);\n}\n\n"
    "extern \"C\" __global__ void sgd_momentum(float* __restrict__ p, const float* __restrict__ "
    "g, float* __restrict__ m, long long n, int first) {\n"
    "  /* nodes: sgd (SGD lr 0.01 momentum 0.9 weight_decay 0.0001) */\n"
    "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
    "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) "
    "{\n"
    "    float d = g[i] + 0.0001f * p[i];\n"
    "    float b = first ? d : 0.9f * m[i] + d;\n"
    "    m[i] = b;\n    p[i] = p[i] - 0.01f * b;\n  }\n}\n\n"
    "extern \"C\" __global__ void adam(float* __restrict__ p, const float* __restrict__ g, "
    "float* __restrict__ m, float* __restrict__ v, long long n, float step_size, float bc2_sqrt) "
    "{\n"
    "  /* nodes: adam (Adam beta1 0.9 beta2 0.999 eps 1e-08) */\n"
    "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
    "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) "
    "{\n"
    "    float gi = g[i];\n"
    "    float mi = 0.9f * m[i] + (1.0f - 0.9f) * gi;\n"
    "    float vi = 0.999f * v[i] + (1.0f - 0.999f) * gi * gi;\n"
    "    m[i] = mi;\n    v[i] = vi;\n"
    "    p[i] = p[i] - step_size * mi / (sqrtf(vi) / bc2_sqrt + 1e-08f);\n  }\n}\n";

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(dir);
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
    n++;
  return n;
}

/* The generated program of the MNIST MLP training plan on cuda:0. */
static char *mlp_plan_source(void) {
  gcc_diag d = {0};
  gcc_graph *model = NULL, *g = NULL;
  gcc_mem_plan mem = {0};
  gcc_kernel_set ks = {0};
  char *src = NULL;
  if (gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &model, &d) == GCC_OK) {
    gcc_options o = {0};
    o.mode = GCC_MODE_TRAIN;
    o.batch_size = 64;
    o.opt = model->training.opt;
    o.device = GCC_DEV_CUDA(0);
    o.device_explicit = 1;
    o.n_cuda_devices = 1;
    if (gcc_compile_graph(model, &o, &g, &mem, &d) == GCC_OK &&
        gcc_codegen_emit(g, GCC_DEV_CUDA(0), 132, &ks, &d) == GCC_OK)
      src = strdup(ks.source);
  }
  if (!src)
    fprintf(stderr, "nvrtc_compile: %s\n", d.msg);
  gcc_kernel_set_free(&ks);
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
  gcc_graph_free(model);
  return src;
}

static double wall_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* one gcc_compile_programs run through the cache in `dir` (NULL: no cache);
 * its wall time, or -1 after printing the error */
static double split_run(const gcc_program_split *sp, const char *dir, int sm, int threads,
                        int *used) {
  gcc_kernel_cache_config cfg = {dir, dir != NULL};
  gcc_nvrtc_output *outs = calloc((size_t)sp->n_programs, sizeof *outs);
  gcc_diag d = {0};
  if (!outs)
    return -1;
  double t0 = wall_s();
  gcc_status st = gcc_compile_programs(sp, "bench.cu", sm, threads, gcc_kernel_cache_hook, &cfg,
                                       outs, used, &d);
  double t = wall_s() - t0;
  for (int i = 0; i < sp->n_programs; i++)
    gcc_nvrtc_output_free(&outs[i]);
  free(outs);
  if (st != GCC_OK) {
    fprintf(stderr, "nvrtc_compile: %s\n", d.msg);
    return -1;
  }
  return t;
}

/* the split rows: cold and warm on each thread count */
static int split_table(const char *source, int sm, const char *threads_list) {
  gcc_program_split sp;
  gcc_diag d = {0};
  if (gcc_program_split_source(source, &sp, &d) != GCC_OK) {
    printf("\nsplit into programs: not possible (%s)\n", d.msg);
    gcc_program_split_free(&sp);
    return 0;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int counts[32], n = 0;
  if (threads_list) {
    for (const char *p = threads_list; *p && n < 32;) {
      int64_t v;
      char num[16];
      size_t l = strcspn(p, ",");
      if (l == 0 || l >= sizeof num) {
        fprintf(stderr, "nvrtc_compile: --threads: expected a list like 1,2,16\n");
        gcc_program_split_free(&sp);
        return 2;
      }
      memcpy(num, p, l);
      num[l] = '\0';
      if (!gcc_parse_i64(num, 1, 1024, &v)) {
        fprintf(stderr, "nvrtc_compile: --threads: '%s' is not a count in 1..1024\n", num);
        gcc_program_split_free(&sp);
        return 2;
      }
      counts[n++] = (int)v;
      p += l + (p[l] == ',');
    }
  } else {
    for (int t = 1; t < cpus && n < 31; t *= 2)
      counts[n++] = t;
    counts[n++] = cpus > 0 ? (int)cpus : 1;
  }
  printf("\nsplit into %d programs (%d kernels, at most %d per program; the programs do not "
         "depend on the thread count), %ld online CPUs, wall time of one run:\n\n",
         sp.n_programs, sp.n_kernels, (sp.n_kernels + sp.n_programs - 1) / sp.n_programs, cpus);
  printf("| threads | cold: compile, no cache (ms) | warm: every program a cache hit (ms) |\n"
         "|---:|---:|---:|\n");
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/gcc-nvrtc-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
      perror("nvrtc_compile: mkdtemp");
      rc = 1;
      break;
    }
    int used = 0;
    double cold = split_run(&sp, dir, sm, counts[i], &used); /* fills the cache */
    double warm = cold >= 0 ? split_run(&sp, dir, sm, counts[i], &used) : -1;
    remove_dir(dir);
    if (cold < 0 || warm < 0) {
      rc = 1;
      break;
    }
    printf("| %d | %.1f | %.2f |\n", used, cold * 1e3, warm * 1e3);
    fflush(stdout);
  }
  gcc_program_split_free(&sp);
  return rc;
}

int main(int argc, char **argv) {
  int64_t flag; /* an integer flag value (0, which every flag refuses, if none) */
  const char *file = NULL;
  int sm = 90, runs = 9, sample = 0, split_only = 0;
  const char *threads_list = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sm") && i + 1 < argc)
      sm = gcc_parse_i64(argv[++i], 0, INT32_MAX, &flag) ? (int)flag : 0;
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = gcc_parse_i64(argv[++i], 0, INT32_MAX, &flag) ? (int)flag : 0;
    else if (!strcmp(argv[i], "--sample"))
      sample = 1;
    else if (!strcmp(argv[i], "--split-only"))
      split_only = 1;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads_list = argv[++i];
    else if (argv[i][0] == '-') {
      fprintf(stderr,
              "usage: %s [FILE.cu | --sample] [--sm 90] [--runs 9] [--threads 1,2,16] "
              "[--split-only]\n",
              argv[0]);
      return 2;
    } else
      file = argv[i];
  }
  if (runs < 1 || runs > 1000) {
    fprintf(stderr, "nvrtc_compile: --runs must be in 1..1000\n");
    return 2;
  }
  char *loaded = NULL;
  const char *source = SAMPLE;
  if (file) {
    uint8_t *bytes = NULL;
    size_t n = 0;
    gcc_diag rd = {0};
    if (gcc_read_file(file, 0, &bytes, &n, &rd) != GCC_OK) {
      fprintf(stderr, "nvrtc_compile: %s\n", rd.msg);
      return 1;
    }
    loaded = (char *)bytes; /* NUL-terminated */
    source = loaded;
  } else if (!sample) {
    loaded = mlp_plan_source();
    if (!loaded)
      return 1;
    source = loaded;
  }
  const char *name = file ? file : sample ? "bench_sample(8 kernels)" : "mnist_mlp train plan";
  if (split_only) {
    int rc = split_table(source, sm, threads_list);
    free(loaded);
    return rc;
  }
  int major = 0, minor = 0;
  gcc_nvrtc_version(&major, &minor);

  gcc_diag d = {0};
  gcc_nvrtc_output o = {0};
  int hit = 0;
  double *cold = calloc((size_t)runs, sizeof *cold), *warm = calloc((size_t)runs, sizeof *warm);
  if (!cold || !warm)
    return 1;

  /* cold: --no-kernel-cache; the first call also starts NVRTC up */
  if (gcc_kernel_cache_compile(NULL, 0, source, name, sm, &o, &hit, &d) != GCC_OK) {
    fprintf(stderr, "nvrtc_compile: %s\n", d.msg);
    return 1;
  }
  double first = o.seconds;
  size_t ptx_size = o.ptx_size, cubin_size = o.cubin_size;
  int kernels = count(o.ptx, ".entry ");
  gcc_nvrtc_output_free(&o);
  for (int r = 0; r < runs; r++) {
    if (gcc_kernel_cache_compile(NULL, 0, source, name, sm, &o, &hit, &d) != GCC_OK) {
      fprintf(stderr, "nvrtc_compile: %s\n", d.msg);
      return 1;
    }
    cold[r] = o.seconds;
    gcc_nvrtc_output_free(&o);
  }

  /* warm: a fresh cache directory, filled once, then hits */
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/gcc-nvrtc-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("nvrtc_compile: mkdtemp");
    return 1;
  }
  double fill = 0;
  for (int r = -1; r < runs; r++) {
    if (gcc_kernel_cache_compile(dir, 1, source, name, sm, &o, &hit, &d) != GCC_OK) {
      fprintf(stderr, "nvrtc_compile: %s\n", d.msg);
      remove_dir(dir);
      return 1;
    }
    if (o.cache_note[0])
      fprintf(stderr, "nvrtc_compile: note: %s\n", o.cache_note);
    if (r < 0)
      fill = o.seconds;
    else if (!hit)
      fprintf(stderr, "nvrtc_compile: warning: run %d missed the cache\n", r);
    else
      warm[r] = o.seconds;
    gcc_nvrtc_output_free(&o);
  }
  remove_dir(dir);

  double c = median(cold, runs), w = median(warm, runs);
  printf("NVRTC %d.%d, sm_%d (PTX + cubin from one compilation), %s: %d kernels, %zu bytes of "
         "source, %zu bytes of PTX, %zu bytes of cubin; median of %d runs\n\n",
         major, minor, sm, name, kernels, strlen(source), ptx_size, cubin_size, runs);
  printf("| case | time (ms) | per kernel (ms) |\n|---|---:|---:|\n");
  printf("| first compile in the process (NVRTC start-up included) | %.2f | %.2f |\n", first * 1e3,
         first * 1e3 / (kernels ? kernels : 1));
  printf("| cold: compile, no cache | %.2f | %.2f |\n", c * 1e3, c * 1e3 / (kernels ? kernels : 1));
  printf("| cache miss: compile + store | %.2f | %.2f |\n", fill * 1e3,
         fill * 1e3 / (kernels ? kernels : 1));
  printf("| warm: cache hit (read + verify SHA-256) | %.3f | %.4f |\n", w * 1e3,
         w * 1e3 / (kernels ? kernels : 1));
  printf("\ncold / warm: %.0fx\n", w > 0 ? c / w : 0.0);
  free(cold);
  free(warm);
  int rc = split_table(source, sm, threads_list);
  free(loaded);
  return rc;
}
