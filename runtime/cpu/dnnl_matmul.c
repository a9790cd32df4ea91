/*
 * dnnl_matmul.c - the matmul family of the oneDNN layer (dnnl_ops.h,
 * gcc_dnnl_matmul_create): oneDNN's matmul primitive on the caller's
 * strided operands, and the hand-written matrix-vector product that runs
 * batch-1 rows instead. Shares the context, the primitive cache and the op
 * steps with dnnl_ops.c through dnnl_internal.h.
 */
#include "runtime/cpu/dnnl_ops.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "runtime/cpu/dnnl_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_GEMV_X86 1
#endif

/* ---- matmul ------------------------------------------------------------------ */

static gcc_status build_matmul(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                               dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  const gcc_dnnl_matmul_desc *m = desc;
  gcc_status s = GCC_OK;
  dnnl_post_ops_t po = NULL;
  dnnl_memory_desc_t a, b, bias, y;
  int64_t lda = m->lda ? m->lda : (m->trans_a ? m->m : m->k);
  int64_t ldb = m->ldb ? m->ldb : (m->trans_b ? m->k : m->n);
  int64_t ldy = m->ldy ? m->ldy : m->n;
  /* op(A) [m, k]: A stored [m, k] (row stride lda) or [k, m] (A^T: column stride lda) */
  GCC_TRY(gdn_md_strided(&a, 2, (int64_t[]){m->m, m->k},
                         m->trans_a ? (int64_t[]){1, lda} : (int64_t[]){lda, 1}, what, d));
  GCC_TRY(gdn_md_strided(&b, 2, (int64_t[]){m->k, m->n},
                         m->trans_b ? (int64_t[]){1, ldb} : (int64_t[]){ldb, 1}, what, d));
  GCC_TRY(gdn_md_strided(&y, 2, (int64_t[]){m->m, m->n}, (int64_t[]){ldy, 1}, what, d));
  if (m->bias)
    GCC_TRY(gdn_md_tag(&bias, 2, (int64_t[]){1, m->n}, dnnl_ab, what, d));
  if (m->alpha != 1.0f)
    DNNL_CALL(dnnl_primitive_attr_set_output_scales, (attr, 1, 0, &m->alpha));
  /* oneDNN scales (alpha * (A B + bias)): with alpha != 1 the bias is a
   * binary post-op instead, added after the scale */
  int bias_po = m->bias && m->alpha != 1.0f;
  if (m->beta != 0.0f || m->relu || bias_po) {
    DNNL_CALL(dnnl_post_ops_create, (&po));
    if (m->beta != 0.0f)
      DNNL_CALL(dnnl_post_ops_append_sum, (po, m->beta));
    if (bias_po)
      DNNL_CALL(dnnl_post_ops_append_binary, (po, dnnl_binary_add, &bias));
    if (m->relu)
      DNNL_CALL(dnnl_post_ops_append_eltwise, (po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
    DNNL_CALL(dnnl_primitive_attr_set_post_ops, (attr, po));
  }
  dnnl_matmul_desc_t md;
  DNNL_CALL(dnnl_matmul_desc_init, (&md, &a, &b, m->bias && !bias_po ? &bias : NULL, &y));
  DNNL_CALL(dnnl_primitive_desc_create, (pd, &md, attr, dn->engine, NULL));
fail:
  if (po)
    dnnl_post_ops_destroy(po);
  return s;
}

/* A matmul below this many FLOPs (2 m n k) runs on one thread: measured on
 * 2 cores (bench/dnnl_ops_bench), 64x10x64 (82 KFLOP) takes 1.1 us on one
 * thread and 1.8 on two, 64x64x10 0.8 against 1.8, while 64x64x128 (1 MFLOP)
 * gains from the second (6.7 -> 5.0 us). */
#define MATMUL_PARALLEL_FLOPS (256.0 * 1024)

/* ---- batch 1: the matrix-vector product ------------------------------------
 *
 * oneDNN 2.6's matmul is slow on one row: its brgemm kernel took 28 us for
 * 1x512x784 on 2 threads here, its gemm:jit 12.7 us, while the loops below
 * take 5.7 us (bench/dnnl_ops_bench, Xeon with AVX-512): a matrix-vector
 * product streams the matrix once, and splitting its rows between the
 * threads keeps each core's half in its own L2 from one call to the next.
 * Two builds of the loops, chosen at run time: AVX-512 (16 lanes) and, on
 * parts without it (AMD Zen 2/3 and older Intel), AVX2 with FMA (8 lanes);
 * on an x86-64 part with neither, and elsewhere, oneDNN runs it. Each output
 * is one dot product summed in a fixed order for a given instruction set,
 * whatever the thread count. */
#define GEMV_ROWS           8
#define GEMV_COLS           64
#define GEMV_PARALLEL_ELEMS (32 * 1024)
enum { GEMV_NONE, GEMV_AVX2, GEMV_AVX512 };

#ifdef HAVE_GEMV_X86
/* y[j] = epi(alpha * W[j, :] . x) for j in [j0, j1): W [n, k] rows of ldw */
__attribute__((target("avx512f"))) static void gemv_rows(const float *W, int64_t ldw,
                                                         const float *x, int64_t k, int64_t j0,
                                                         int64_t j1, float *acc_out) {
  for (int64_t j = j0; j < j1; j += GEMV_ROWS) {
    int nr = j1 - j < GEMV_ROWS ? (int)(j1 - j) : GEMV_ROWS;
    __m512 acc[GEMV_ROWS];
    for (int r = 0; r < GEMV_ROWS; r++)
      acc[r] = _mm512_setzero_ps();
    int64_t p = 0;
    if (nr == GEMV_ROWS) {
      for (; p + 16 <= k; p += 16) {
        __m512 xv = _mm512_loadu_ps(x + p);
#pragma GCC unroll 8
        for (int r = 0; r < GEMV_ROWS; r++)
          acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(W + (j + r) * ldw + p), xv, acc[r]);
      }
    } else {
      for (; p + 16 <= k; p += 16) {
        __m512 xv = _mm512_loadu_ps(x + p);
        for (int r = 0; r < nr; r++)
          acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(W + (j + r) * ldw + p), xv, acc[r]);
      }
    }
    if (p < k) {
      __mmask16 m = (__mmask16)((1u << (k - p)) - 1);
      __m512 xv = _mm512_maskz_loadu_ps(m, x + p);
      for (int r = 0; r < nr; r++)
        acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, W + (j + r) * ldw + p), xv, acc[r]);
    }
    for (int r = 0; r < nr; r++)
      acc_out[j + r] = _mm512_reduce_add_ps(acc[r]);
  }
}

/* y[c] = sum over p of x[p] B[p, c] for c in [c0, c1): B [k, n] rows of ldb */
__attribute__((target("avx512f"))) static void gemv_cols(const float *B, int64_t ldb,
                                                         const float *x, int64_t k, int64_t c0,
                                                         int64_t c1, float *acc_out) {
  for (int64_t c = c0; c < c1; c += GEMV_COLS) {
    int64_t nc = c1 - c < GEMV_COLS ? c1 - c : GEMV_COLS;
    __mmask16 m[4];
    for (int q = 0; q < 4; q++) {
      int64_t left = nc - 16 * q;
      m[q] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    }
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t p = 0; p < k; p++) {
      __m512 xv = _mm512_set1_ps(x[p]);
      const float *b = B + p * ldb + c;
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[0], b), xv, a0);
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[1], b + 16), xv, a1);
      a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[2], b + 32), xv, a2);
      a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[3], b + 48), xv, a3);
    }
    _mm512_mask_storeu_ps(acc_out + c, m[0], a0);
    _mm512_mask_storeu_ps(acc_out + c + 16, m[1], a1);
    _mm512_mask_storeu_ps(acc_out + c + 32, m[2], a2);
    _mm512_mask_storeu_ps(acc_out + c + 48, m[3], a3);
  }
}
/* The same two loops with AVX2 + FMA, 8 lanes: tails through masked loads
 * (vmaskmovps), so every output sums its products in one fixed order. */
static inline __attribute__((target("avx2,fma"))) __m256i gemv_mask8(int64_t left) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(left > 8 ? 8 : (int)left), lane);
}

static inline __attribute__((target("avx2,fma"))) float gemv_hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static void gemv_rows_avx2(const float *W, int64_t ldw,
                                                               const float *x, int64_t k,
                                                               int64_t j0, int64_t j1,
                                                               float *acc_out) {
  for (int64_t j = j0; j < j1; j += GEMV_ROWS) {
    int nr = j1 - j < GEMV_ROWS ? (int)(j1 - j) : GEMV_ROWS;
    __m256 acc[GEMV_ROWS];
    for (int r = 0; r < GEMV_ROWS; r++)
      acc[r] = _mm256_setzero_ps();
    int64_t p = 0;
    if (nr == GEMV_ROWS) {
      for (; p + 8 <= k; p += 8) {
        __m256 xv = _mm256_loadu_ps(x + p);
#pragma GCC unroll 8
        for (int r = 0; r < GEMV_ROWS; r++)
          acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(W + (j + r) * ldw + p), xv, acc[r]);
      }
    } else {
      for (; p + 8 <= k; p += 8) {
        __m256 xv = _mm256_loadu_ps(x + p);
        for (int r = 0; r < nr; r++)
          acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(W + (j + r) * ldw + p), xv, acc[r]);
      }
    }
    if (p < k) {
      __m256i m = gemv_mask8(k - p);
      __m256 xv = _mm256_maskload_ps(x + p, m);
      for (int r = 0; r < nr; r++)
        acc[r] = _mm256_fmadd_ps(_mm256_maskload_ps(W + (j + r) * ldw + p, m), xv, acc[r]);
    }
    for (int r = 0; r < nr; r++)
      acc_out[j + r] = gemv_hsum8(acc[r]);
  }
}

__attribute__((target("avx2,fma"))) static void gemv_cols_avx2(const float *B, int64_t ldb,
                                                               const float *x, int64_t k,
                                                               int64_t c0, int64_t c1,
                                                               float *acc_out) {
  for (int64_t c = c0; c < c1; c += 32) {
    int64_t nc = c1 - c < 32 ? c1 - c : 32;
    __m256i m[4];
    for (int q = 0; q < 4; q++)
      m[q] = gemv_mask8(nc - 8 * q); /* all-zero when nc <= 8 q */
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t p = 0; p < k; p++) {
      __m256 xv = _mm256_set1_ps(x[p]);
      const float *b = B + p * ldb + c;
      a0 = _mm256_fmadd_ps(_mm256_maskload_ps(b, m[0]), xv, a0);
      a1 = _mm256_fmadd_ps(_mm256_maskload_ps(b + 8, m[1]), xv, a1);
      a2 = _mm256_fmadd_ps(_mm256_maskload_ps(b + 16, m[2]), xv, a2);
      a3 = _mm256_fmadd_ps(_mm256_maskload_ps(b + 24, m[3]), xv, a3);
    }
    _mm256_maskstore_ps(acc_out + c, m[0], a0);
    _mm256_maskstore_ps(acc_out + c + 8, m[1], a1);
    _mm256_maskstore_ps(acc_out + c + 16, m[2], a2);
    _mm256_maskstore_ps(acc_out + c + 24, m[3], a3);
  }
}
#endif

#ifdef HAVE_GEMV_X86
/* outputs [j0, j1) of a gemv, with the epilogue */
static void gemv_block(const gcc_dnnl_matmul_desc *m, int isa, const float *x, const float *B,
                       int64_t ldb, const float *bias, float *y, int64_t j0, int64_t j1) {
  if (isa == GEMV_AVX512) {
    if (m->trans_b)
      gemv_rows(B, ldb, x, m->k, j0, j1, y);
    else
      gemv_cols(B, ldb, x, m->k, j0, j1, y);
  } else {
    if (m->trans_b)
      gemv_rows_avx2(B, ldb, x, m->k, j0, j1, y);
    else
      gemv_cols_avx2(B, ldb, x, m->k, j0, j1, y);
  }
  for (int64_t j = j0; j < j1; j++) {
    float v = m->alpha * y[j];
    if (bias)
      v += bias[j];
    y[j] = m->relu && v < 0.0f ? 0.0f : v;
  }
}
#endif

/* {A (the vector), B, bias?, Y}: ptrs of a 1 x n x k matmul */
static void run_gemv(const gcc_dnnl_op *op, void *const *ptrs, char *scratch) {
  (void)scratch;
#ifdef HAVE_GEMV_X86
  const gcc_dnnl_matmul_desc *m = &op->mm;
  const float *x = ptrs[0], *B = ptrs[1], *bias = m->bias ? ptrs[2] : NULL;
  float *y = ptrs[3];
  int64_t ldb = m->ldb ? m->ldb : (m->trans_b ? m->k : m->n);
  int64_t unit = m->trans_b ? GEMV_ROWS : GEMV_COLS;
  int64_t blocks = (m->n + unit - 1) / unit;
  int t = op->threads;
  if (t == 1) { /* no OpenMP region at all: small products are a few 100 ns */
    gemv_block(m, op->gemv_isa, x, B, ldb, bias, y, 0, m->n);
    return;
  }
#pragma omp parallel for num_threads(t) schedule(static)
  for (int64_t b = 0; b < blocks; b++) {
    int64_t j0 = b * unit, j1 = j0 + unit < m->n ? j0 + unit : m->n;
    gemv_block(m, op->gemv_isa, x, B, ldb, bias, y, j0, j1);
  }
#else
  (void)op, (void)ptrs;
#endif
}

/* GEMV_AVX512, GEMV_AVX2 when this layer runs the matmul itself, else 0 */
static int gemv_applies(const gcc_dnnl_matmul_desc *m) {
#ifdef HAVE_GEMV_X86
  if (m->no_gemv || m->m != 1 || m->beta != 0.0f || (m->trans_a && m->lda > 1))
    return GEMV_NONE;
  /* the ISA oneDNN runs at (DNNL_MAX_CPU_ISA=AVX2 makes an AVX-512 machine
   * an AVX2 one, for its primitives and for this loop alike) */
  dnnl_cpu_isa_t dnnl_isa = dnnl_get_effective_cpu_isa();
  int dnnl_avx512 =
      dnnl_isa == dnnl_cpu_isa_avx512_core || dnnl_isa == dnnl_cpu_isa_avx512_core_vnni ||
      dnnl_isa == dnnl_cpu_isa_avx512_core_bf16 || dnnl_isa == dnnl_cpu_isa_avx512_core_amx;
  if (dnnl_avx512 && __builtin_cpu_supports("avx512f"))
    return GEMV_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return GEMV_AVX2;
  return GEMV_NONE;
#else
  (void)m;
  return 0;
#endif
}

gcc_status gcc_dnnl_matmul_create(gcc_dnnl *dn, const gcc_dnnl_matmul_desc *m, gcc_dnnl_op **out,
                                  gcc_diag *d) {
  *out = NULL;
  char what[192];
  snprintf(what, sizeof what, "matmul %" PRId64 "x%" PRId64 "x%" PRId64 "%s%s%s%s", m->m, m->n,
           m->k, m->trans_a ? " A^T" : "", m->trans_b ? " B^T" : "", m->bias ? " bias" : "",
           m->relu ? " relu" : "");
  if (m->m < 1 || m->n < 1 || m->k < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: m, n and k must be >= 1", what);
  if ((m->lda && m->lda < (m->trans_a ? m->m : m->k)) ||
      (m->ldb && m->ldb < (m->trans_b ? m->k : m->n)) || (m->ldy && m->ldy < m->n))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "oneDNN: %s: a leading dimension (lda %" PRId64 ", ldb %" PRId64
                        ", ldy %" PRId64 ") is shorter than its row",
                        what, m->lda, m->ldb, m->ldy);
  double flops = 2.0 * (double)m->m * (double)m->n * (double)m->k;
  gcc_dnnl_op *op = NULL;
  int isa = gemv_applies(m);
  if (isa != GEMV_NONE) {
    GCC_TRY(gdn_op_new(dn, 4, &op, d));
    op->mm = *m;
    op->gemv_isa = isa;
    op->custom = run_gemv;
    op->optional_ptr = m->bias ? -1 : 2;
    /* with passive waiting, waking the sleeping worker costs more than it
     * saves (MNIST MLP batch-1 forward through gcc-run, 2 threads: 60 us,
     * one thread: 49 us) */
    op->threads = m->n * m->k >= GEMV_PARALLEL_ELEMS && !dn->passive ? dn->threads : 1;
    snprintf(op->impl, sizeof op->impl, "gcc:gemv_%s", isa == GEMV_AVX512 ? "avx512" : "avx2");
    snprintf(op->name, sizeof op->name, "matmul (%s, %d thread%s) %s", op->impl, op->threads,
             op->threads > 1 ? "s" : "", what + strlen("matmul "));
    *out = op;
    return GCC_OK;
  }
  int threads = flops < MATMUL_PARALLEL_FLOPS ? 1 : dn->threads;
  prim_key key = {0};
  key_i(&key, K_MATMUL);
  key_i(&key, threads);
  key_i(&key, m->m), key_i(&key, m->n), key_i(&key, m->k);
  key_i(&key, m->trans_a), key_i(&key, m->trans_b);
  key_i(&key, m->lda ? m->lda : (m->trans_a ? m->m : m->k));
  key_i(&key, m->ldb ? m->ldb : (m->trans_b ? m->k : m->n));
  key_i(&key, m->ldy ? m->ldy : m->n);
  key_f(&key, m->alpha), key_f(&key, m->beta);
  key_i(&key, m->bias), key_i(&key, m->relu);
  cache_entry *e;
  GCC_TRY(gdn_cache_get(dn, &key, build_matmul, m, what, &e, d));
  GCC_TRY(gdn_op_new(dn, 4, &op, d));
  op->threads = threads;
  snprintf(op->name, sizeof op->name, "matmul (%s%s) %s", e->impl,
           threads == 1 && dn->threads > 1 ? ", 1 thread" : "", what + strlen("matmul "));
  op_step *st = gdn_op_step_add(op, e);
  gcc_status s = gdn_op_arg(op, st, DNNL_ARG_SRC, FROM_PTR, 0, what, d);
  if (s == GCC_OK)
    s = gdn_op_arg(op, st, DNNL_ARG_WEIGHTS, FROM_PTR, 1, what, d);
  if (s == GCC_OK && m->bias && m->alpha == 1.0f)
    s = gdn_op_arg(op, st, DNNL_ARG_BIAS, FROM_PTR, 2, what, d);
  else if (s == GCC_OK && m->bias) /* the binary post-op after the sum, if any */
    s = gdn_op_arg(op, st, DNNL_ARG_ATTR_MULTIPLE_POST_OP(m->beta != 0.0f ? 1 : 0) | DNNL_ARG_SRC_1,
                   FROM_PTR, 2, what, d);
  if (s == GCC_OK)
    s = gdn_op_arg(op, st, DNNL_ARG_DST, FROM_PTR, 3, what, d);
  if (s == GCC_OK)
    s = gdn_op_finish(op, what, d);
  if (s != GCC_OK) {
    gcc_dnnl_op_free(op);
    return s;
  }
  *out = op;
  return GCC_OK;
}
