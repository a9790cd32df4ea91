/*
 * dnnl_internal.h - what the files of the oneDNN layer share (dnnl_ops.c:
 * the context, the primitive cache, ops and their steps, convolutions,
 * pooling, ReLU, batch norm; dnnl_matmul.c: the matmul family). Private to
 * runtime/cpu:dnnl_ops; callers use dnnl_ops.h.
 */
#ifndef GCC_RUNTIME_CPU_DNNL_INTERNAL_H
#define GCC_RUNTIME_CPU_DNNL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "runtime/cpu/dnnl_ops.h"

#define ALIGN 64
static inline size_t align_up(size_t x) {
  return (x + ALIGN - 1) / ALIGN * ALIGN;
}

/* ---- errors ---- */

/* "oneDNN: <fn> failed (<status>) for <what>", with the gcc_status of `st`. */
gcc_status gdn_fail(gcc_diag *d, const char *fn, dnnl_status_t st, const char *what);

/* Checks a oneDNN call in a function that has `gcc_status s`, `gcc_diag *d`,
 * `const char *what` (the op, for the message) and a `fail:` label that
 * releases what it made: the message names the function and its status. */
#define DNNL_CALL(fn, args)                                                                        \
  do {                                                                                             \
    dnnl_status_t dnnl_st_ = fn args;                                                              \
    if (dnnl_st_ != dnnl_success) {                                                                \
      s = gdn_fail(d, #fn, dnnl_st_, what);                                                        \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

/* The same where a failure just returns. */
#define DNNL_RET(fn, args)                                                                         \
  do {                                                                                             \
    dnnl_status_t dnnl_st_ = fn args;                                                              \
    if (dnnl_st_ != dnnl_success)                                                                  \
      return gdn_fail(d, #fn, dnnl_st_, what);                                                     \
  } while (0)

/* ---- context and primitive cache ----------------------------------------- */

enum prim_kind {
  K_MATMUL = 1,
  K_CONV_FWD,
  K_CONV_BWD_DATA,
  K_CONV_BWD_WEIGHTS,
  K_POOL_FWD,
  K_POOL_BWD,
  K_RELU_FWD,
  K_RELU_BWD,
  K_BNORM_FWD_TRAIN,
  K_BNORM_FWD_INFER,
  K_BNORM_BWD,
  K_REORDER,
};

#define KEY_MAX 40
typedef struct prim_key {
  int n;
  int64_t v[KEY_MAX]; /* kind, threads, then every field of the descriptor */
} prim_key;

static inline void key_i(prim_key *k, int64_t x) {
  if (k->n < KEY_MAX)
    k->v[k->n++] = x;
}

static inline void key_f(prim_key *k, float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  key_i(k, (int64_t)u);
}

typedef struct cache_entry {
  prim_key key;
  int has_mds; /* a reorder: also matched on its two memory descriptors */
  dnnl_memory_desc_t from, to;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  const char *impl;  /* owned by pd */
  size_t scratchpad; /* bytes */
  size_t workspace;  /* bytes */
} cache_entry;

struct gcc_dnnl {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  int threads;
  int passive; /* OMP_WAIT_POLICY=passive: idle OpenMP workers sleep */
  cache_entry **cache;
  int n_cache, cap_cache;
  int64_t hits, misses;
};

/* Builds the primitive descriptor of a cache miss. */
typedef gcc_status (*pd_builder)(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                 dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d);

/* The cached primitive of `key` (its v[1] is the thread count it runs
 * with), or a new one from `build`. `mds` (two memory descriptors, or NULL)
 * must match too: reorders are keyed on their descriptors. */
gcc_status gdn_cache_get_mds(gcc_dnnl *dn, const prim_key *key, const dnnl_memory_desc_t *mds,
                             pd_builder build, const void *desc, const char *what,
                             cache_entry **out, gcc_diag *d);
gcc_status gdn_cache_get(gcc_dnnl *dn, const prim_key *key, pd_builder build, const void *desc,
                         const char *what, cache_entry **out, gcc_diag *d);

/* ---- ops -------------------------------------------------------------------- */

#define MAX_ARGS  10
#define MAX_STEPS 6

typedef enum arg_src { FROM_PTR = 0, FROM_SCRATCH } arg_src;

typedef struct op_step {
  cache_entry *e;
  int n_args;
  dnnl_exec_arg_t args[MAX_ARGS];
  arg_src src[MAX_ARGS];
  int64_t index[MAX_ARGS]; /* FROM_PTR: the run pointer; FROM_SCRATCH: byte offset */
  void *bound[MAX_ARGS];   /* the address the memory object points at now */
} op_step;

typedef void (*op_hook)(const gcc_dnnl_op *op, void *const *ptrs, char *scratch);

struct gcc_dnnl_op {
  gcc_dnnl *dn;
  int threads; /* OpenMP threads of its primitives and loops */
  int n_ptrs;
  op_step step[MAX_STEPS];
  int n_steps;
  size_t temps;         /* bytes of this layer's temporaries at the start of the scratch */
  size_t scratch_bytes; /* temps + the largest scratchpad of the steps */
  size_t workspace;
  op_hook pre, post; /* layer work before the first / after the last step */
  /* average pooling, ceil_mode with count_include_pad: the factor per
   * output row and column that turns oneDNN's kh*kw divisor into PyTorch's */
  float *corr_h, *corr_w;
  int64_t nc, oh, ow, h, w;
  /* a matrix-vector product run by this layer instead of oneDNN (gemv) */
  op_hook custom;
  int gemv_isa;     /* custom gemv: GEMV_AVX512 or GEMV_AVX2 */
  int optional_ptr; /* custom: a run pointer that may be NULL (a gemv's bias), or -1 */
  gcc_dnnl_matmul_desc mm;
  gcc_dnnl_pool_desc pool;
  char impl[48]; /* the implementation, when no oneDNN primitive runs it */
  int main_step; /* the step of the op's own primitive (others are reorders) */
  char name[320];
};

/* A new op of `n_ptrs` run pointers on dn's thread count. */
gcc_status gdn_op_new(gcc_dnnl *dn, int n_ptrs, gcc_dnnl_op **out, gcc_diag *d);
/* Adds a step running cache entry `e`; its arguments follow with gdn_op_arg. */
op_step *gdn_op_step_add(gcc_dnnl_op *op, cache_entry *e);
/* Argument `arg` (DNNL_ARG_*) of step `st`, stored in run pointer `index`
 * (FROM_PTR) or at byte offset `index` of the scratch (FROM_SCRATCH); its
 * memory descriptor is the one the primitive expects (dnnl_query_exec_arg_md). */
gcc_status gdn_op_arg(gcc_dnnl_op *op, op_step *st, int arg, arg_src src, int64_t index,
                      const char *what, gcc_diag *d);
/* The scratchpad argument of every step, at offset op->temps, and the total. */
gcc_status gdn_op_finish(gcc_dnnl_op *op, const char *what, gcc_diag *d);

/* ---- memory descriptors ---- */

/* f32 descriptors of dims with the given strides / format tag. */
gcc_status gdn_md_strided(dnnl_memory_desc_t *md, int nd, const int64_t *dims,
                          const int64_t *strides, const char *what, gcc_diag *d);
gcc_status gdn_md_tag(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_format_tag_t tag,
                      const char *what, gcc_diag *d);

/* ---- reorders ---- */

/* The cached reorder from layout mds[0] to mds[1] (same dims). */
gcc_status gdn_reorder_entry(gcc_dnnl *dn, int threads, const dnnl_memory_desc_t *mds,
                             const char *what, cache_entry **out, gcc_diag *d);
/* oneDNN's name of a blocked layout ("aBcd16b", "BA16a64b"), into buf. */
void gdn_layout_str(const dnnl_memory_desc_t *md, char *buf, size_t cap);

#endif /* GCC_RUNTIME_CPU_DNNL_INTERNAL_H */
