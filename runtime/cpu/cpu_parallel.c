/*
 * cpu_parallel.c - contiguous ranges over the plan's OpenMP threads (see
 * cpu_parallel.h).
 */
#include "runtime/cpu/cpu_parallel.h"

#include <stdlib.h>
#include <string.h>

int gcc_cpu_pointwise_threads(const gcc_kernel_args *a, int64_t work) {
  if (work < GCC_CPU_PARALLEL_MIN_WORK)
    return 1;
  const char *e = getenv("GCC_CPU_POINTWISE_PARALLEL");
  if (e && strcmp(e, "0") == 0)
    return 1;
  return a->ctx && a->ctx->max_threads > 0 ? a->ctx->max_threads : 1;
}

int gcc_cpu_parallel_for(int threads, int64_t n, int64_t align, gcc_cpu_range_fn fn, void *arg) {
  if (n <= 0)
    return 0;
  if (align < 1)
    align = 1;
  const int64_t units = (n + align - 1) / align;
  int64_t t = threads < 1 ? 1 : threads;
  if (t > GCC_CPU_PARALLEL_MAX_PARTS)
    t = GCC_CPU_PARALLEL_MAX_PARTS;
  if (t > units)
    t = units;
  if (t <= 1) {
    fn(arg, 0, 0, n);
    return 1;
  }
  const int parts = (int)t;
#pragma omp parallel for num_threads(parts) schedule(static)
  for (int p = 0; p < parts; p++) {
    const int64_t b = units * p / parts * align;
    int64_t e = units * (p + 1) / parts * align;
    if (e > n)
      e = n;
    if (b < e)
      fn(arg, p, b, e);
  }
  return parts;
}

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
static int narrow_mode = -1; /* -1: not yet known */

static int has_avx2_fma(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int gcc_cpu_narrow_vectors(void) {
  int v = __atomic_load_n(&narrow_mode, __ATOMIC_RELAXED);
  if (v < 0) { /* every thread computes the same value */
    v = has_avx2_fma() && !__builtin_cpu_supports("avx512f");
    __atomic_store_n(&narrow_mode, v, __ATOMIC_RELAXED);
  }
  return v;
}

int gcc_cpu_set_narrow_vectors(int on) {
  __atomic_store_n(&narrow_mode, on > 0 ? has_avx2_fma() : -1, __ATOMIC_RELAXED);
  return gcc_cpu_narrow_vectors();
}
#else
int gcc_cpu_narrow_vectors(void) {
  return 0;
}

int gcc_cpu_set_narrow_vectors(int on) {
  (void)on;
  return 0;
}
#endif
