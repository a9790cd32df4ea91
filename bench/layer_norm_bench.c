/*
 * layer_norm_bench.c - the CPU kernels of LayerNormalization and
 * LayerNormGrad (runtime/cpu/cpu_norm.c) on Transformer shapes: the forward,
 * dX, dScale and dB of X [rows, C] over its last axis, then LayerNormGradAll
 * (the three in one pass: "dX+dS+dB", the sum of the three nodes' times
 * "3 nodes" beside it), median of `reps`
 * timed runs after a warm-up, at 1 and 2 threads (the plan's thread count),
 * with the bytes each moves at the least (X and Y; dY, X and dX; dY and X)
 * as GB/s. bench/torch_layer_norm.py times PyTorch's F.layer_norm and its
 * backward on the same shapes.
 *
 *   bazel run -c opt //bench:layer_norm_bench -- [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/builder.h"
#include "graph/ops.h"
#include "runtime/cpu/cpu_norm.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct bench_case {
  const char *what;
  int64_t rows, c;
} bench_case;

/* median seconds of fn over reps runs */
static double median_run(gcc_status (*fn)(const gcc_kernel_args *), const gcc_kernel_args *a,
                         int reps) {
  double *t = malloc((size_t)reps * sizeof *t);
  fn(a);
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    fn(a);
    t[r] = now_s() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_d);
  double m = t[reps / 2];
  free(t);
  return m;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 50;
  if (reps < 1)
    reps = 1;
  const bench_case cases[] = {
      {"char GPT CPU goal (B 32, T 64, C 128)", 32 * 64, 128},
      {"baby GPT (B 64, T 256, C 384)", 64 * 256, 384},
      {"GPT-2 124M row (B 8, T 1024, C 768)", 8 * 1024, 768},
  };
  printf("%-40s %-8s %7s %10s %8s\n", "shape", "kernel", "threads", "ms", "GB/s");
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const bench_case *bc = &cases[ci];
    int64_t xd[2] = {bc->rows, bc->c}, cd = bc->c;
    size_t n = (size_t)(bc->rows * bc->c);
    float *x = malloc(n * 4), *dy = malloc(n * 4), *y = malloc(n * 4), *dx = malloc(n * 4);
    float *s = malloc((size_t)cd * 4), *b = malloc((size_t)cd * 4), *ds = malloc((size_t)cd * 4);
    for (size_t i = 0; i < n; i++) {
      x[i] = (float)((i * 2654435761u) % 1000) / 250.0f - 2.0f;
      dy[i] = (float)((i * 40503u) % 997) / 500.0f - 1.0f;
    }
    for (int64_t j = 0; j < cd; j++)
      s[j] = 1.0f, b[j] = 0.0f;
    /* a graph with the two nodes, for their resolved attributes */
    gcc_builder *bd = gcc_builder_new("ln_bench", 1);
    int xv = gcc_build_input(bd, "x", GCC_DT_FLOAT32, 2, xd);
    int in[3] = {xv, gcc_build_const(bd, "s", GCC_DT_FLOAT32, 1, &cd, s),
                 gcc_build_const(bd, "b", GCC_DT_FLOAT32, 1, &cd, b)};
    int yv = gcc_build_op(bd, GCC_OP_LAYER_NORM, "ln", "y", in, 3);
    int gin[3] = {xv, xv, in[1]};
    int gv[3];
    for (int k = 0; k < 3; k++) {
      char name[32];
      snprintf(name, sizeof name, "g%d", k);
      gv[k] = gcc_build_op(bd, GCC_OP_LAYER_NORM_GRAD, name, name, gin, 3);
      gcc_build_set_int(bd, gv[k], "output", k);
      gcc_build_output(bd, gv[k]);
    }
    gcc_build_output(bd, yv);
    gcc_graph *g = NULL;
    gcc_diag d = {0};
    /* and one LayerNormGradAll writing all three (the finished graph's
     * value ids, found by name) */
    int av[3], an = -1, ain[3];
    if (gcc_builder_finish(bd, &g, &d) != GCC_OK ||
        (ain[0] = ain[1] = gcc_graph_find(g, "x"), ain[2] = gcc_graph_find(g, "s")) < 0 ||
        gcc_graph_add_temp(g, "all_dx", GCC_VALUE_ACTIVATION, &av[0], &d) != GCC_OK ||
        gcc_graph_add_temp(g, "all_ds", GCC_VALUE_ACTIVATION, &av[1], &d) != GCC_OK ||
        gcc_graph_add_temp(g, "all_db", GCC_VALUE_ACTIVATION, &av[2], &d) != GCC_OK ||
        gcc_graph_add_node(g, "all", GCC_OP_LAYER_NORM_GRAD_ALL, ain, 3, av, 3, &an, &d) !=
            GCC_OK ||
        gcc_infer_shapes(g, &d) != GCC_OK) {
      fprintf(stderr, "layer_norm_bench: %s\n", d.msg);
      return 1;
    }
    gcc_tensor tx = {GCC_DT_FLOAT32, {2, {bc->rows, bc->c}}, (int64_t)n, x};
    gcc_tensor tdy = tx, ty = tx, tdx = tx;
    tdy.data = dy, ty.data = y, tdx.data = dx;
    gcc_tensor ts = {GCC_DT_FLOAT32, {1, {cd}}, cd, s}, tb = ts, tds = ts;
    tb.data = b, tds.data = ds;
    for (int threads = 1; threads <= 2; threads++) {
      gcc_cpu_ctx ctx = {0};
      ctx.max_threads = threads;
      gcc_tensor *fin[3] = {&tx, &ts, &tb}, *fout[1] = {&ty};
      gcc_kernel_args fa = {
          &g->nodes[g->values[yv].producer], fin, 3, fout, 1, &ctx, NULL, 0, NULL};
      double t = median_run(gcc_cpu_layer_norm, &fa, reps), three = 0;
      printf("%-40s %-8s %7d %10.3f %8.1f\n", bc->what, "forward", threads, 1e3 * t,
             2.0 * (double)n * 4 / t / 1e9);
      for (int k = 0; k < 3; k++) {
        const gcc_node *nd = &g->nodes[g->values[gv[k]].producer];
        size_t ws = gcc_cpu_layer_norm_grad_workspace(g, g->values[gv[k]].producer);
        void *w = ws ? malloc(ws) : NULL;
        gcc_tensor *gi[3] = {&tdy, &tx, &ts}, *go[1] = {k == 0 ? &tdx : &tds};
        gcc_kernel_args ga = {nd, gi, 3, go, 1, &ctx, w, ws, NULL};
        t = median_run(gcc_cpu_layer_norm_grad, &ga, reps);
        double bytes = (double)n * 4 * (k == 0 ? 3 : k == 1 ? 2 : 1);
        printf("%-40s %-8s %7d %10.3f %8.1f\n", bc->what,
               k == 0   ? "dX"
               : k == 1 ? "dScale"
                        : "dB",
               threads, 1e3 * t, bytes / t / 1e9);
        three += t;
        free(w);
      }
      printf("%-40s %-8s %7d %10.3f\n", bc->what, "3 nodes", threads, 1e3 * three);
      size_t ws = gcc_cpu_layer_norm_grad_all_workspace(g, an);
      void *w = ws ? malloc(ws) : NULL;
      gcc_tensor tdb = tds;
      float *db = malloc((size_t)cd * 4);
      tdb.data = db;
      gcc_tensor *gi[3] = {&tdy, &tx, &ts}, *go[3] = {&tdx, &tds, &tdb};
      gcc_kernel_args ga = {&g->nodes[an], gi, 3, go, 3, &ctx, w, ws, NULL};
      t = median_run(gcc_cpu_layer_norm_grad_all, &ga, reps);
      printf("%-40s %-8s %7d %10.3f %8.1f\n", bc->what, "dX+dS+dB", threads, 1e3 * t,
             (double)n * 4 * 3 / t / 1e9);
      free(w);
      free(db);
    }
    gcc_graph_free(g);
    free(x), free(dy), free(y), free(dx), free(s), free(b), free(ds);
  }
  return 0;
}
