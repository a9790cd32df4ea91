/*
 * cpu_layout.c - the CPU kernel of Transpose (gcc_cpu_transpose,
 * cpu_kernels.h): an odometer over Y with X's offset kept incrementally,
 * Y's elements (or, when the last dim stays, its rows) cut into contiguous
 * parts over the plan's threads (cpu_parallel.h); each part starts its
 * odometer at its first element. A copy: the bits do not depend on the cut.
 */
#include <string.h>

#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"

typedef struct transpose_job {
  const uint8_t *x;
  uint8_t *y;
  size_t es;
  int nd;                   /* dims of the odometer: Y's, or Y's but the last (rows) */
  int64_t row;              /* elements per odometer step: 1, or Y's last dim */
  const int64_t *dims;      /* Y's dims */
  int64_t st[GCC_MAX_DIMS]; /* X's stride of Y's dim i */
} transpose_job;

/* n 4-byte elements (fixed-size memcpys: moves the compiler vectorises) */
static inline void copy4(uint8_t *restrict y, const uint8_t *restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    memcpy(y + 4 * i, x + 4 * i, 4);
}

static void transpose_range(void *u, int part, int64_t b, int64_t e) {
  const transpose_job *j = u;
  (void)part;
  int64_t idx[GCC_MAX_DIMS] = {0}, ix = 0, rest = b;
  for (int k = j->nd - 1; k >= 0; k--) { /* the odometer at step b */
    idx[k] = rest % j->dims[k];
    rest /= j->dims[k];
    ix += idx[k] * j->st[k];
  }
  const size_t es = j->es, bytes = (size_t)j->row * es;
  for (int64_t o = b; o < e; o++) {
    if (es == 4) /* float32 (int32): a loop, no call per short row */
      copy4(j->y + (size_t)o * bytes, j->x + (size_t)ix * 4, j->row);
    else
      memcpy(j->y + (size_t)o * bytes, j->x + (size_t)ix * es, bytes);
    for (int k = j->nd - 1; k >= 0; k--) {
      idx[k]++;
      ix += j->st[k];
      if (idx[k] < j->dims[k])
        break;
      ix -= j->st[k] * idx[k];
      idx[k] = 0;
    }
  }
}

gcc_status gcc_cpu_transpose(const gcc_kernel_args *a) {
  const gcc_shape *xs = &a->in[0]->shape, *ys = &a->out[0]->shape;
  const int64_t *perm = a->node->av[TRANSPOSE_PERM].ints;
  const int nd = ys->ndim;
  const int64_t n = a->out[0]->numel;
  transpose_job j = {
      a->in[0]->data, a->out[0]->data, gcc_dtype_size(a->out[0]->dtype), nd, 1, ys->dims, {0}};
  int64_t xst[GCC_MAX_DIMS], acc = 1;
  for (int i = nd - 1; i >= 0; i--) {
    xst[i] = acc;
    acc *= xs->dims[i];
  }
  for (int i = 0; i < nd; i++) /* output dim i walks input dim perm[i] */
    j.st[i] = xst[perm[i]];
  if (nd > 1 && perm[nd - 1] == nd - 1) { /* the last dim stays: rows of it, one memcpy each */
    j.row = ys->dims[nd - 1];
    j.nd = nd - 1;
  }
  const int64_t steps = j.row > 0 ? n / j.row : 0;
  gcc_cpu_parallel_for(gcc_cpu_pointwise_threads(a, n), steps, 1, transpose_range, &j);
  return GCC_OK;
}
