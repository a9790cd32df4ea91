/*
 * compile_bench - compile time against graph depth: a chain of N ReLU nodes
 * (models/models.h gcc_model_relu_chain) compiled for the CPU for inference
 * (GCC_MODE_EVAL) and training (GCC_MODE_TRAIN: autodiff, the backward
 * chain, SGD), each on a fresh session so nothing is cached: the time of
 * gcc_session_plan (every pass, memory planning, binding), median of
 * --reps runs. One line per size and mode on stdout:
 *
 * --cuda times gcc_compile_graph for cuda:0 instead (placement, copy
 * insertion, fusion, planning: nothing is bound, so no GPU is needed).
 *
 *   nodes=N device=cpu|cuda:0 mode=eval|train compile_s=MEDIAN min_s=... max_s=... graph_nodes=... arena_bytes=...
 *
 *   bazel run -c opt //bench:compile_bench -- [--cuda] [--reps 3] [N ...]
 *   (default sizes: 2500 10000 20000 100000)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/util.h"
#include "models/models.h"
#include "runtime/compile.h"
#include "runtime/plan.h"
#include "runtime/session.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void die(const char *what, const gcc_diag *d) {
  fprintf(stderr, "compile_bench: %s: %s\n", what, d->msg);
  exit(1);
}

/* --cuda: seconds of gcc_compile_graph for cuda:0 (placement, copy
 * insertion, fusion and planning; no GPU needed, nothing bound). */
static double compile_cuda_once(const gcc_graph *model, gcc_mode mode, size_t *arena, int *nodes) {
  gcc_diag d = {0};
  gcc_options o = {0};
  o.mode = mode;
  o.batch_size = model->training.batch_size;
  o.opt = model->training.opt;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  gcc_graph *g;
  gcc_mem_plan mem;
  double t0 = now_s();
  if (gcc_compile_graph(model, &o, &g, &mem, &d) != GCC_OK)
    die("compile", &d);
  double t = now_s() - t0;
  *arena = mem.n_devices > 1 ? mem.device_bytes[GCC_DEV_CUDA(0)] : 0;
  *nodes = g->n_nodes;
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
  return t;
}

/* Seconds to compile `model`'s plan for `mode` on a fresh session. */
static double compile_once(const gcc_graph *model, gcc_mode mode, size_t *arena, int *nodes) {
  gcc_diag d = {0};
  gcc_session_options so = {0};
  so.threads = 1;
  so.opt = model->training.opt;
  gcc_session *s;
  if (gcc_session_create(model, &so, &s, &d) != GCC_OK)
    die("session", &d);
  gcc_plan *p;
  double t0 = now_s();
  if (gcc_session_plan(s, mode, model->training.batch_size, &p, &d) != GCC_OK)
    die("compile", &d);
  double t = now_s() - t0;
  *arena = gcc_session_step_arena_bytes(s);
  *nodes = gcc_plan_graph(p)->n_nodes;
  gcc_session_destroy(s);
  return t;
}

int main(int argc, char **argv) {
  int reps = 3, cuda = 0;
  int64_t sizes[16];
  int n_sizes = 0;
  for (int i = 1; i < argc; i++) {
    int64_t v;
    if (strcmp(argv[i], "--cuda") == 0) {
      cuda = 1;
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      if (!gcc_parse_i64(argv[++i], 1, 99, &v)) {
        fprintf(stderr, "compile_bench: --reps %s: expected 1..99\n", argv[i]);
        return 2;
      }
      reps = (int)v;
    } else if (n_sizes < 16 && gcc_parse_i64(argv[i], 1, 10000000, &v)) {
      sizes[n_sizes++] = v;
    } else {
      fprintf(stderr,
              "usage: compile_bench [--cuda] [--reps R] [N ...] (N: ReLU nodes, 1..10^7)\n");
      return 2;
    }
  }
  if (!n_sizes) {
    int64_t def[] = {2500, 10000, 20000, 100000};
    memcpy(sizes, def, sizeof def);
    n_sizes = 4;
  }
  for (int k = 0; k < n_sizes; k++) {
    gcc_graph *model;
    gcc_diag d = {0};
    if (gcc_model_relu_chain(sizes[k], 1, &model, &d) != GCC_OK)
      die("model", &d);
    for (int m = 0; m < 2; m++) {
      gcc_mode mode = m ? GCC_MODE_TRAIN : GCC_MODE_EVAL;
      double t[99];
      size_t arena = 0;
      int nodes = 0;
      for (int r = 0; r < reps; r++)
        t[r] = cuda ? compile_cuda_once(model, mode, &arena, &nodes)
                    : compile_once(model, mode, &arena, &nodes);
      qsort(t, (size_t)reps, sizeof *t, cmp_double);
      printf("nodes=%lld device=%s mode=%s compile_s=%.3f min_s=%.3f max_s=%.3f graph_nodes=%d "
             "arena_bytes=%zu\n",
             (long long)sizes[k], cuda ? "cuda:0" : "cpu", m ? "train" : "eval", t[reps / 2], t[0],
             t[reps - 1], nodes, arena);
      fflush(stdout);
    }
    gcc_graph_free(model);
  }
  return 0;
}
