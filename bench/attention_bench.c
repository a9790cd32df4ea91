/*
 * attention_bench - the fused attention's CPU kernel (runtime/cpu/cpu_attention.c)
 * against the unfused plan of the same chain (MatMul(Q, Transpose(K)) ->
 * Div by sqrt(D) -> [Add of a causal -Inf mask] -> Softmax -> MatMul(., V):
 * oneDNN batched matmuls and the Softmax kernel, the (B, H, T, T) scores
 * written and read), both as whole CPU plans (gcc_plan_run of an inference
 * graph), the same graph compiled with and without the attention pass
 * (gcc_options.no_attention_fusion). Also the fused backward
 * (AttentionGrad) alone: the unfused chain cannot be trained with batched
 * MatMuls (their gradient rule takes 2-D operands).
 *
 *   bazel run -c opt //bench:attention_bench -- [--threads N] [--reps N]
 *       [--fused-only] [--shape I]
 *
 * Shapes: B=32 H=4 T=64 D=32 (the char-GPT goal of issue 31) and B=8 H=6
 * T=256 D=64 (nanoGPT's baby GPT at batch 8), each without and with the
 * causal mask. Each figure is the median of --reps runs (default 30) after
 * 3 warm-up runs, in milliseconds; the two plans alternate, run by run.
 * --fused-only skips the unfused plan (its columns print "-"), --shape I
 * (0 or 1) runs one shape only: for profiling the fused kernels.
 * Output: a markdown table on stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/builder.h"
#include "graph/ops.h"
#include "runtime/plan.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The chain as the exporters write it: inputs Q, K, V [B, H, T, D]. */
static gcc_graph *chain(int64_t B, int64_t H, int64_t T, int64_t D, int causal) {
  gcc_builder *b = gcc_builder_new("attention_bench", 1);
  int64_t d4[4] = {B, H, T, D}, perm[4] = {0, 1, 3, 2}, md[2] = {T, T};
  int q = gcc_build_input(b, "Q", GCC_DT_FLOAT32, 4, d4);
  int k = gcc_build_input(b, "K", GCC_DT_FLOAT32, 4, d4);
  int v = gcc_build_input(b, "V", GCC_DT_FLOAT32, 4, d4);
  int kt = gcc_build_op(b, GCC_OP_TRANSPOSE, "kt", "kt.out", &k, 1);
  gcc_build_set_ints(b, kt, "perm", perm, 4);
  int i1[2] = {q, kt};
  int s = gcc_build_op(b, GCC_OP_MATMUL, "qk", "qk.out", i1, 2);
  float sd = sqrtf((float)D);
  int c = gcc_build_const(b, "sqrt_d", GCC_DT_FLOAT32, 0, NULL, &sd);
  int i2[2] = {s, c};
  s = gcc_build_op(b, GCC_OP_DIV, "scale", "scale.out", i2, 2);
  if (causal) {
    float *tri = malloc((size_t)(T * T) * sizeof *tri);
    for (int64_t i = 0; i < T; i++)
      for (int64_t j = 0; j < T; j++)
        tri[i * T + j] = j > i ? -INFINITY : 0.0f;
    int m = gcc_build_const(b, "causal", GCC_DT_FLOAT32, 2, md, tri);
    free(tri);
    int i3[2] = {s, m};
    s = gcc_build_op(b, GCC_OP_ADD, "mask", "mask.out", i3, 2);
  }
  int p = gcc_build_op(b, GCC_OP_SOFTMAX, "softmax", "softmax.out", &s, 1);
  gcc_build_set_int(b, p, "axis", -1);
  int i4[2] = {p, v};
  int o = gcc_build_op(b, GCC_OP_MATMUL, "pv", "pv.out", i4, 2);
  gcc_build_output(b, o);
  gcc_graph *g = NULL;
  gcc_diag d = {0};
  if (gcc_builder_finish(b, &g, &d) != GCC_OK) {
    fprintf(stderr, "attention_bench: %s\n", d.msg);
    return NULL;
  }
  return g;
}

/* The fused forward and backward alone: Attention and AttentionGrad. */
static gcc_graph *fused_train(int64_t B, int64_t H, int64_t T, int64_t D, int causal) {
  gcc_builder *b = gcc_builder_new("attention_bench_bwd", 1);
  int64_t d4[4] = {B, H, T, D};
  int q = gcc_build_input(b, "Q", GCC_DT_FLOAT32, 4, d4);
  int k = gcc_build_input(b, "K", GCC_DT_FLOAT32, 4, d4);
  int v = gcc_build_input(b, "V", GCC_DT_FLOAT32, 4, d4);
  int dout = gcc_build_input(b, "dO", GCC_DT_FLOAT32, 4, d4);
  gcc_graph *g = b->g;
  gcc_diag d = {0};
  int o, l, dq, dk, dv, n1, n2;
  gcc_graph_add_temp(g, "O", GCC_VALUE_ACTIVATION, &o, &d);
  gcc_graph_add_temp(g, "L", GCC_VALUE_ACTIVATION, &l, &d);
  gcc_graph_add_temp(g, "dQ", GCC_VALUE_ACTIVATION, &dq, &d);
  gcc_graph_add_temp(g, "dK", GCC_VALUE_ACTIVATION, &dk, &d);
  gcc_graph_add_temp(g, "dV", GCC_VALUE_ACTIVATION, &dv, &d);
  int in1[3] = {q, k, v}, out1[2] = {o, l};
  gcc_graph_add_node(g, "attn", GCC_OP_ATTENTION, in1, 3, out1, 2, &n1, &d);
  int in2[6] = {q, k, v, o, l, dout}, out2[3] = {dq, dk, dv};
  gcc_graph_add_node(g, "attn_grad", GCC_OP_ATTENTION_GRAD, in2, 6, out2, 3, &n2, &d);
  gcc_node_set_int(g, n1, "is_causal", causal);
  gcc_node_set_int(g, n2, "is_causal", causal);
  gcc_build_output(b, dq);
  gcc_build_output(b, dk);
  gcc_build_output(b, dv);
  gcc_graph *out = NULL;
  if (gcc_builder_finish(b, &out, &d) != GCC_OK) {
    fprintf(stderr, "attention_bench: %s\n", d.msg);
    return NULL;
  }
  return out;
}

static gcc_plan *compile(const gcc_graph *g, int threads, int unfused) {
  gcc_options o = {0};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = 1;
  o.no_attention_fusion = unfused;
  gcc_plan_config cfg = {0};
  cfg.threads = threads;
  cfg.readback_ring = 1;
  gcc_plan *p = NULL;
  gcc_diag d = {0};
  if (gcc_plan_compile(g, &o, &cfg, NULL, NULL, &p, &d) != GCC_OK) {
    fprintf(stderr, "attention_bench: %s\n", d.msg);
    return NULL;
  }
  return p;
}

static int bind(gcc_plan *p, const char *const *names, float *const *data, int n) {
  gcc_diag d = {0};
  for (int i = 0; i < n; i++)
    if (gcc_plan_bind_input(p, names[i], data[i], &d) != GCC_OK) {
      fprintf(stderr, "attention_bench: %s\n", d.msg);
      return 0;
    }
  return 1;
}

static double run_ms(gcc_plan *p) {
  gcc_diag d = {0};
  double t0 = now_ms();
  if (gcc_plan_run(p, 0, &d) != GCC_OK) {
    fprintf(stderr, "attention_bench: %s\n", d.msg);
    exit(1);
  }
  return now_ms() - t0;
}

int main(int argc, char **argv) {
  int threads = 2, reps = 30, fused_only = 0, only = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--fused-only") == 0)
      fused_only = 1;
    else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc)
      only = atoi(argv[++i]);
    else {
      fprintf(stderr,
              "usage: attention_bench [--threads N] [--reps N] [--fused-only] [--shape I]\n");
      return 2;
    }
  }
  if (threads < 1 || reps < 1)
    return 2;
  static const int64_t shapes[][4] = {{32, 4, 64, 32}, {8, 6, 256, 64}};
  printf("attention_bench: %d threads, median of %d runs (ms), CPU plans\n\n", threads, reps);
  printf("| B | H | T | D | causal | unfused fwd | fused fwd | speed-up | fused fwd+bwd |\n");
  printf("|---|---|---|---|---|---|---|---|---|\n");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    if (only >= 0 && (size_t)only != s)
      continue;
    const int64_t B = shapes[s][0], H = shapes[s][1], T = shapes[s][2], D = shapes[s][3];
    size_t n = (size_t)(B * H * T * D);
    float *x[4];
    srand(1);
    for (int k = 0; k < 4; k++) {
      x[k] = malloc(n * sizeof(float));
      for (size_t i = 0; i < n; i++)
        x[k][i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    }
    static const char *const names[4] = {"Q", "K", "V", "dO"};
    for (int causal = 0; causal < 2; causal++) {
      gcc_graph *g = chain(B, H, T, D, causal), *gt = fused_train(B, H, T, D, causal);
      if (!g || !gt)
        return 1;
      gcc_plan *pu = compile(g, threads, 1), *pf = compile(g, threads, 0),
               *pt = compile(gt, threads, 0);
      if (!pu || !pf || !pt || !bind(pu, names, x, 3) || !bind(pf, names, x, 3) ||
          !bind(pt, names, x, 4))
        return 1;
      double *tu = malloc((size_t)reps * sizeof *tu), *tf = malloc((size_t)reps * sizeof *tf),
             *tt = malloc((size_t)reps * sizeof *tt);
      for (int w = 0; w < 3; w++) {
        if (!fused_only)
          run_ms(pu);
        run_ms(pf);
        run_ms(pt);
      }
      for (int r = 0; r < reps; r++) { /* alternating */
        tu[r] = fused_only ? 0.0 : run_ms(pu);
        tf[r] = run_ms(pf);
        tt[r] = run_ms(pt);
      }
      qsort(tu, (size_t)reps, sizeof *tu, cmp_double);
      qsort(tf, (size_t)reps, sizeof *tf, cmp_double);
      qsort(tt, (size_t)reps, sizeof *tt, cmp_double);
      double mu = tu[reps / 2], mf = tf[reps / 2], mt = tt[reps / 2];
      if (fused_only)
        printf("| %lld | %lld | %lld | %lld | %s | - | %.3f | - | %.3f |\n", (long long)B,
               (long long)H, (long long)T, (long long)D, causal ? "yes" : "no", mf, mt);
      else
        printf("| %lld | %lld | %lld | %lld | %s | %.3f | %.3f | %.2fx | %.3f |\n", (long long)B,
               (long long)H, (long long)T, (long long)D, causal ? "yes" : "no", mu, mf, mu / mf,
               mt);
      fflush(stdout);
      free(tu);
      free(tf);
      free(tt);
      gcc_plan_free(pu);
      gcc_plan_free(pf);
      gcc_plan_free(pt);
      gcc_graph_free(g);
      gcc_graph_free(gt);
    }
    for (int k = 0; k < 4; k++)
      free(x[k]);
  }
  return 0;
}
