/*
 * cpu_logic.c - the CPU backend's kernels of the comparisons (Equal, Less,
 * Greater, LessOrEqual, GreaterOrEqual), the logical ops (Not, And, Or,
 * Xor), Where and its gradient ops, and Cast between numbers and bool
 * (semantics: graph/ops.h). Bool tensors hold one byte per element, 0 or 1.
 * Operands broadcast as numpy: each input is read through strides that are
 * 0 along its broadcast dims, over the output's shape in row-major order.
 */
#include <stdint.h>
#include <string.h>

#include "graph/half.h"
#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"

/* The strides (in elements) of input `in` broadcast to shape `out`. */
static void bcast_strides(const gcc_shape *in, const gcc_shape *out, int64_t *st) {
  int64_t s = 1;
  for (int j = out->ndim - 1; j >= 0; j--) {
    int ji = in->ndim - out->ndim + j;
    int64_t d = ji >= 0 ? in->dims[ji] : 1;
    st[j] = d == 1 ? 0 : s;
    s *= d;
  }
}

/* Walks the output's elements with up to three inputs' offsets: for each
 * output element o (row-major), off[k] is input k's element. */
typedef struct walk {
  int ndim, n_in;
  int64_t dims[GCC_MAX_DIMS], st[3][GCC_MAX_DIMS], idx[GCC_MAX_DIMS], off[3];
} walk;

static void walk_init(walk *w, const gcc_tensor *out, gcc_tensor *const *in, int n_in) {
  memset(w, 0, sizeof *w);
  w->ndim = out->shape.ndim;
  w->n_in = n_in;
  for (int j = 0; j < w->ndim; j++)
    w->dims[j] = out->shape.dims[j];
  for (int k = 0; k < n_in; k++)
    bcast_strides(&in[k]->shape, &out->shape, w->st[k]);
}

static inline void walk_next(walk *w) {
  for (int j = w->ndim - 1; j >= 0; j--) {
    for (int k = 0; k < w->n_in; k++)
      w->off[k] += w->st[k][j];
    if (++w->idx[j] < w->dims[j])
      return;
    for (int k = 0; k < w->n_in; k++)
      w->off[k] -= w->st[k][j] * w->dims[j];
    w->idx[j] = 0;
  }
}

/* ---- comparisons ------------------------------------------------------------------ */

enum { CMP_EQ, CMP_LT, CMP_GT, CMP_LE, CMP_GE };

/* One comparison over a typed pair: NaN compares false (IEEE, numpy). */
#define CMP_LOOP(T)                                                                                \
  do {                                                                                             \
    const T *x = a->data, *y = b->data;                                                            \
    for (int64_t i = 0; i < n; i++, walk_next(&w)) {                                               \
      T p = x[w.off[0]], q = y[w.off[1]];                                                          \
      o[i] = (uint8_t)(kind == CMP_EQ   ? p == q                                                   \
                       : kind == CMP_LT ? p < q                                                    \
                       : kind == CMP_GT ? p > q                                                    \
                       : kind == CMP_LE ? p <= q                                                   \
                                        : p >= q);                                                 \
    }                                                                                              \
  } while (0)

static gcc_status compare(const gcc_kernel_args *args, int kind) {
  const gcc_tensor *a = args->in[0], *b = args->in[1];
  gcc_tensor *c = args->out[0];
  uint8_t *o = c->data;
  int64_t n = c->numel;
  walk w;
  walk_init(&w, c, args->in, 2);
  switch (a->dtype) {
  case GCC_DT_INT64: CMP_LOOP(int64_t); break;
  case GCC_DT_INT32: CMP_LOOP(int32_t); break;
  case GCC_DT_BOOL: CMP_LOOP(uint8_t); break;
  default: CMP_LOOP(float); break; /* float32 (16-bit operands arrive widened) */
  }
  return GCC_OK;
}

gcc_status gcc_cpu_equal(const gcc_kernel_args *a) {
  return compare(a, CMP_EQ);
}
gcc_status gcc_cpu_less(const gcc_kernel_args *a) {
  return compare(a, CMP_LT);
}
gcc_status gcc_cpu_greater(const gcc_kernel_args *a) {
  return compare(a, CMP_GT);
}
gcc_status gcc_cpu_less_or_equal(const gcc_kernel_args *a) {
  return compare(a, CMP_LE);
}
gcc_status gcc_cpu_greater_or_equal(const gcc_kernel_args *a) {
  return compare(a, CMP_GE);
}

/* ---- logical ops ------------------------------------------------------------------ */

enum { LOGIC_AND, LOGIC_OR, LOGIC_XOR };

static gcc_status logic(const gcc_kernel_args *args, int kind) {
  const uint8_t *x = args->in[0]->data, *y = args->in[1]->data;
  gcc_tensor *c = args->out[0];
  uint8_t *o = c->data;
  int64_t n = c->numel;
  walk w;
  walk_init(&w, c, args->in, 2);
  for (int64_t i = 0; i < n; i++, walk_next(&w)) {
    int p = x[w.off[0]] != 0, q = y[w.off[1]] != 0;
    o[i] = (uint8_t)(kind == LOGIC_AND ? p && q : kind == LOGIC_OR ? p || q : p != q);
  }
  return GCC_OK;
}

gcc_status gcc_cpu_not(const gcc_kernel_args *a) {
  const uint8_t *x = a->in[0]->data;
  uint8_t *y = a->out[0]->data;
  for (int64_t i = 0; i < a->out[0]->numel; i++)
    y[i] = x[i] == 0;
  return GCC_OK;
}
gcc_status gcc_cpu_and(const gcc_kernel_args *a) {
  return logic(a, LOGIC_AND);
}
gcc_status gcc_cpu_or(const gcc_kernel_args *a) {
  return logic(a, LOGIC_OR);
}
gcc_status gcc_cpu_xor(const gcc_kernel_args *a) {
  return logic(a, LOGIC_XOR);
}

/* ---- Where and its gradients --------------------------------------------------------- */

#define WHERE_LOOP(T)                                                                              \
  do {                                                                                             \
    const T *x = args->in[1]->data, *y = args->in[2]->data;                                        \
    T *o = z->data;                                                                                \
    for (int64_t i = 0; i < n; i++, walk_next(&w))                                                 \
      o[i] = c[w.off[0]] ? x[w.off[1]] : y[w.off[2]];                                              \
  } while (0)

gcc_status gcc_cpu_where(const gcc_kernel_args *args) {
  const uint8_t *c = args->in[0]->data;
  gcc_tensor *z = args->out[0];
  int64_t n = z->numel;
  walk w;
  walk_init(&w, z, args->in, 3);
  switch (gcc_dtype_size(z->dtype)) {
  case 8: WHERE_LOOP(int64_t); break;
  case 1: WHERE_LOOP(uint8_t); break;
  default: WHERE_LOOP(uint32_t); break; /* float32, int32: moved as bits */
  }
  return GCC_OK;
}

/* (cond, dZ) -> cond ? dZ : 0 (`keep_true`) or cond ? 0 : dZ, of dZ's shape. */
static gcc_status where_grad(const gcc_kernel_args *args, int keep_true) {
  const uint8_t *c = args->in[0]->data;
  const float *dz = args->in[1]->data;
  gcc_tensor *dx = args->out[0];
  float *o = dx->data;
  int64_t n = dx->numel;
  walk w;
  walk_init(&w, dx, args->in, 1); /* the condition's offsets; dZ is dense */
  for (int64_t i = 0; i < n; i++, walk_next(&w))
    o[i] = (c[w.off[0]] != 0) == keep_true ? dz[i] : 0.0f;
  return GCC_OK;
}

gcc_status gcc_cpu_where_grad_x(const gcc_kernel_args *a) {
  return where_grad(a, 1);
}
gcc_status gcc_cpu_where_grad_y(const gcc_kernel_args *a) {
  return where_grad(a, 0);
}

/* ---- Cast with integers and bool ----------------------------------------------------- */

static int is_int(gcc_dtype t) {
  return t == GCC_DT_INT64 || t == GCC_DT_INT32 || t == GCC_DT_BOOL;
}

static int64_t load_int(const gcc_tensor *t, int64_t i) {
  switch (t->dtype) {
  case GCC_DT_INT64: return ((const int64_t *)t->data)[i];
  case GCC_DT_INT32: return ((const int32_t *)t->data)[i];
  default: return ((const uint8_t *)t->data)[i];
  }
}

static void store_int(gcc_tensor *t, int64_t i, int64_t v) {
  switch (t->dtype) {
  case GCC_DT_INT64: ((int64_t *)t->data)[i] = v; break;
  case GCC_DT_INT32: ((int32_t *)t->data)[i] = (int32_t)v; break;
  default: ((uint8_t *)t->data)[i] = v != 0; break;
  }
}

/* float -> integer truncates toward zero as C and numpy's astype do; an
 * out-of-range value (undefined in ONNX) saturates instead of being UB. */
static int64_t trunc_int(float f, gcc_dtype to) {
  double lo = to == GCC_DT_INT32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = to == GCC_DT_INT32 ? 2147483647.0 : 9223372036854774784.0;
  double v = f != f ? 0.0 : (double)f;
  return (int64_t)(v < lo ? lo : v > hi ? hi : v);
}

static float load_any_float(const gcc_tensor *t, int64_t i) {
  switch (t->dtype) {
  case GCC_DT_BFLOAT16: return gcc_bf16_to_f32(((const uint16_t *)t->data)[i]);
  case GCC_DT_FLOAT16: return gcc_f16_to_f32(((const uint16_t *)t->data)[i]);
  default: return ((const float *)t->data)[i];
  }
}

float gcc_cpu_load_int_as_float(const gcc_tensor *t, int64_t i) {
  return (float)load_int(t, i);
}

int gcc_cpu_dtype_is_int(gcc_dtype t) {
  return is_int(t);
}

gcc_status gcc_cpu_cast_to_int(const gcc_kernel_args *a) {
  const gcc_tensor *x = a->in[0];
  gcc_tensor *y = a->out[0];
  int64_t n = y->numel;
  if (is_int(x->dtype)) {
    for (int64_t i = 0; i < n; i++)
      store_int(y, i, load_int(x, i));
  } else { /* a float (float32, float16, bfloat16) -> integer or bool */
    for (int64_t i = 0; i < n; i++) {
      float f = load_any_float(x, i);
      store_int(y, i, y->dtype == GCC_DT_BOOL ? f != 0.0f : trunc_int(f, y->dtype));
    }
  }
  return GCC_OK;
}
