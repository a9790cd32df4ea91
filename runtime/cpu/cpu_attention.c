/*
 * cpu_attention.c - the CPU kernels of Attention and AttentionGrad
 * (graph/ops.h: torch.nn.functional.scaled_dot_product_attention fused),
 * FlashAttention-2's algorithm on the CPU: the (B, H, Tq, Tk) scores are
 * never stored, only one BQ x BK tile of them per thread.
 *
 * Legend: b batch, h head, i query row (Tq), j key (Tk), d head dim of Q and
 * K (D), e head dim of V and O (Dv). Q [B, H, Tq, D], K [B, H, Tk, D],
 * V [B, H, Tk, Dv], O [B, H, Tq, Dv], L [B, H, Tq], all row-major float32.
 *
 * Forward: one work item per (b, h, query block of BQ = 64 rows: a GPT's
 * whole short context); OpenMP threads take work items. For each key block
 * of BK = 64 keys: S = Q K^T into a tile (K^T packed once per key block and
 * reused by the head's next query block), then per row two vector passes
 * over whole 16-key groups: (1) S scale (with a mask, S scale + mask in a
 * scalar pass first), -Inf on the causal diagonal's far side and past the
 * row's keys, the row max m; (2) P = exp(S - m) and its
 * sum, 0 on the -Inf keys. The online softmax rescales l and the output
 * accumulator by exp(m_old - m_new) from the second key block on (the
 * first writes them: no zeroing), acc += P V, and at the end O = acc / l,
 * L = m + log(l). With one key block (tk <= BK) the accumulator is O
 * itself. Keys after the last visible one of a causal block are skipped,
 * per group of MR = 4 rows (rounded up to 16 keys in S and P; and, in the
 * backward's P^T dO and dS^T Q, each group of 4 keys starts at the first
 * row that sees it).
 *
 * Backward (deterministic, no atomics): pass 1, one work item per (b, h,
 * key block): for every query block that can see it, P = exp(S scale - L)
 * is recomputed (one vector pass per row over whole 16-key groups, 0 past
 * the causal diagonal), dV += P^T dO, dP = dO V^T, dS = P (dP - D_i)
 * scale with D_i = rowsum(dO * O) (the softmax scale folded into dS), dK +=
 * dS^T Q; pass 2, one work item per (b, h, query block): the same tiles,
 * dQ += dS K. When the keys fit one block (tk <= 64: a GPT's short
 * context), one pass per (b, h) computes P and dS once per query block and
 * all three gradients from them. Every accumulation runs in a fixed order
 * inside one thread (the sums of 16 lanes in a fixed tree): the bits do
 * not depend on the thread count.
 *
 * Dropout on the probabilities (training form, dropout_p > 0): element
 * (b, h, i, j) of P is multiplied by (kept ? 1 / (1 - p) : 0) with exactly
 * Dropout's bits for the flat index ((b H + h) Tq + i) Tk + j of the
 * [B, H, Tq, Tk] probabilities (graph/philox.h; a row's words drawn 16
 * blocks at a time, runtime/cpu/cpu_philox.h), after the online softmax
 * summed the un-dropped P into l (so L is the un-dropped logsumexp). The
 * backward redraws the mask per tile: dV += (mask P)^T dO, dP = mask (dO
 * V^T), dS = P (dP - D_i) with D_i of the dropped O. Without dropout the
 * mask code is skipped by one test per tile row (forward) or per tile
 * (backward) on dr == NULL, never per element.
 *
 * Every tile product (S = Q K^T with K^T packed per key block, P V,
 * dP = dO V^T with V^T packed, P^T dO, dS^T Q, dS K) is one register-tiled
 * loop (mm_block: 4 rows x 32 columns of the result in 8 vector registers
 * over the whole reduction, each sum in order); exp is a Cephes-style
 * polynomial written with GCC's vector extensions on 16 lanes (row_exp),
 * so every clone runs it vectorised without a scalar remainder. On a CPU
 * with AVX2 and FMA but not AVX-512 the tile products, the row passes, dS
 * and the key-block transposes run 8-float forms of their own (mm_block_v8
 * and the functions beside it: GCC's 16-float vectors went through the
 * stack in the "avx2" clone, 25-30x slower than the AVX-512 one; now about
 * 2x, the vectors' width). The file is compiled with FMA contraction: the
 * AVX-512 clone and the 8-float forms fuse a * b + c, the rest of the AVX2
 * clone and the baseline clone do not, so results differ between kinds of
 * machine (within the tests' float64 bounds) but never from run to run or
 * over thread counts.
 * oneDNN 2.6 has no SDPA primitive; its matmul on 32 x 64 tiles was not
 * used (bench/attention_bench measures this kernel against the unfused
 * MatMul -> Softmax -> MatMul plan).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "graph/ops.h"
#include "graph/philox.h"
#include "runtime/cpu/cpu_philox.h"
#include "runtime/cpu/cpu_attention.h"
#include "runtime/cpu/cpu_parallel.h"

/* a * b + c as one fused multiply-add where the ISA has one (the AVX-512
 * clone): the products' sums are the kernel's flops. The bits differ from
 * the AVX2 and baseline clones' (separate multiply and add), not from run
 * to run or over thread counts on one machine. */
#if !defined(__clang__) /* clang (tools/fuzz.sh) contracts within expressions by default */
#pragma GCC optimize("fp-contract=fast")
#endif

#define BQ 64 /* query rows per tile */
#define BK 64 /* keys per tile */

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define ATTN_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ATTN_HOT
#endif

/* Per-thread scratch, in floats: the S / P tile, the dP tile, K^T and V^T
 * of one key block, and the accumulators (BQ x max(D, Dv) and BK x (D + Dv)). */
static size_t per_thread_floats(int64_t d, int64_t dv) {
  int64_t w = d > dv ? d : dv;
  return (size_t)(2 * BQ * BK + BK * (d + dv) + BQ * w + BK * (d + dv) + 4 * BQ + 2 * BK + 64);
}

static int64_t n_threads_for(const gcc_kernel_args *a, int64_t items) {
  int64_t t = a->ctx && a->ctx->max_threads > 0 ? a->ctx->max_threads : 1;
  if (t > GCC_ATTN_MAX_THREADS)
    t = GCC_ATTN_MAX_THREADS;
  if (t > items)
    t = items;
  return t < 1 ? 1 : t;
}

static void geo_of(const gcc_kernel_args *a, int iq, int imask, gcc_attn_geo *g) {
  const gcc_tensor *m = a->n_in > imask ? a->in[imask] : NULL;
  gcc_attn_geometry(&a->in[iq]->shape, &a->in[iq + 1]->shape, &a->in[iq + 2]->shape,
                    m ? &m->shape : NULL, a->node, g);
}

static size_t attn_workspace(const gcc_graph *g, const gcc_node *n, int iq, int imask) {
  int mv = n->n_inputs > imask ? n->inputs[imask] : -1;
  gcc_attn_geo a;
  gcc_attn_geometry(&g->values[n->inputs[iq]].shape, &g->values[n->inputs[iq + 1]].shape,
                    &g->values[n->inputs[iq + 2]].shape, mv >= 0 ? &g->values[mv].shape : NULL, n,
                    &a);
  return (size_t)GCC_ATTN_MAX_THREADS * per_thread_floats(a.d, a.dv) * sizeof(float);
}

size_t gcc_cpu_attention_workspace(const gcc_graph *g, int node) {
  return attn_workspace(g, &g->nodes[node], ATTN_IN_Q, ATTN_IN_MASK);
}

size_t gcc_cpu_attention_grad_workspace(const gcc_graph *g, int node) {
  return attn_workspace(g, &g->nodes[node], ATTN_GRAD_IN_Q, ATTN_GRAD_IN_MASK);
}

/* AttentionPacked and its gradient: QKV is input 0 of both. */
size_t gcc_cpu_attention_packed_workspace(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const int grad = n->n_inputs > 1;
  gcc_attn_geo a;
  gcc_attn_packed_geometry(&g->values[n->inputs[0]].shape, n,
                           grad ? ATTN_PACKED_GRAD_HEADS : ATTN_PACKED_HEADS,
                           grad ? ATTN_PACKED_GRAD_SEQ : ATTN_PACKED_SEQ, &a);
  return (size_t)GCC_ATTN_MAX_THREADS * per_thread_floats(a.d, a.dv) * sizeof(float);
}

/* s[j] = e^(s[j] - sub) for j < n (n <= BK), where s[j] - sub <= 0 (the
 * scores less their row's max or logsumexp; -Inf for a masked key), to ~1
 * ulp: Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2, Cephes' expf
 * polynomial, 2^k by the exponent bits; 0 below -87. Three loops without
 * branches (clamp, polynomial, zero below -87), so that each vectorises:
 * GCC does not if-convert the clamp inside the polynomial's loop. */
static inline void exp_row(float *restrict s, int64_t n, float sub) {
  float x[BK];
  for (int64_t j = 0; j < n; j++) {
    float v = s[j] - sub;
    v = v < -87.0f ? -87.0f : v;
    x[j] = v > 0.0f ? 0.0f : v;
  }
  for (int64_t j = 0; j < n; j++) {
    const float xc = x[j];
    const int32_t k = (int32_t)(xc * 1.44269504088896341f - 0.5f); /* rounds: xc <= 0 */
    const float kf = (float)k;
    float r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const int32_t bits = (k + 127) * (1 << 23);
    float sc;
    memcpy(&sc, &bits, sizeof sc);
    x[j] = y * sc;
  }
  for (int64_t j = 0; j < n; j++)
    s[j] = s[j] - sub < -87.0f ? 0.0f : x[j];
}

/* e^x of one number (x <= 0), as exp_row. */
static inline float attn_exp1(float x) {
  float s = x;
  exp_row(&s, 1, 0.0f);
  return s;
}

/* Dropout on the probabilities: the node's key, the step, the threshold
 * and the kept elements' factor (graph/philox.h). */
typedef struct attn_drop {
  uint64_t key, thr;
  int64_t step;
  float scale;
} attn_drop;

/* The tile's geometry: rows [i0, i0 + nq) of head bh against keys [j0, j0 + nk). */
typedef struct tile {
  const gcc_attn_geo *g;
  const float *q, *k, *v; /* this head's Q, K, V */
  int64_t ldq, ldk, ldv;  /* their row strides */
  int64_t ldo;            /* O's and dO's row stride */
  const float *mask;      /* the mask's base for this (b, h), or NULL */
  int64_t i0, nq, j0, nk;
  const attn_drop *dr; /* NULL: no dropout */
  int64_t bh;          /* the head's index b H + h */
} tile;

/* f[j] = (kept ? scale : 0) for keys j0 .. j0 + nk - 1 of row r of the
 * tile's head: the words of the Dropout blocks that cover flat indices
 * (bh Tq + r) Tk + j0 + j (nk <= BK). */
static void drop_factors(const tile *t, int64_t r, float *restrict f) {
  const attn_drop *dr = t->dr;
  const int64_t f0 = (t->bh * t->g->tq + r) * t->g->tk + t->j0;
  gcc_cpu_dropout_factors(dr->key, f0, t->nk, dr->step, dr->thr, dr->scale, f);
}

static void drop_of(const gcc_kernel_args *a, float p, int64_t key, attn_drop *dr) {
  dr->key = (uint64_t)key;
  dr->thr = gcc_dropout_threshold(p);
  dr->scale = gcc_dropout_scale(p);
  dr->step = a->ctx ? a->ctx->rng_step : 0;
}

/* Helpers inlined into the item functions (the ATTN_HOT clones), so that
 * each clone's copy is compiled for its ISA and no call goes through the
 * clones' resolver. */
#define ATTN_INL static inline __attribute__((always_inline))

/* 16 floats, for GCC's vector extensions: one zmm register in the AVX-512
 * clone, two ymm in the AVX2 one, four xmm in the baseline one.
 * aligned(4): loads and stores of any float address. */
typedef float v16 __attribute__((vector_size(64), aligned(4)));
#define VW 16
/* Rows of a register tile: R x 32 columns, 2R accumulators (8 zmm). */
#define MR 4

/* The AVX2 machines' tile product (mm_block's contract, 16 columns a
 * register tile): GCC builds mm_block's 16-float vectors through the stack
 * in the AVX2 clone (its 2 x 4 accumulators are all 16 ymm registers, and
 * each broadcast of A's element is assembled in memory), which made the
 * clone 25-30x slower than the AVX-512 one. Here R x 16 columns are 2R ymm
 * accumulators; each sum runs over c in order with a fused multiply-add, as
 * in the AVX-512 clone, so the two give the same bits. A function of its
 * own (target avx2,fma: target_clones' "avx2" clone has no FMA), called
 * only where the CPU has both (attn_narrow). */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define ATTN_NARROW 1
typedef float attn_v8f __attribute__((vector_size(32), aligned(4)));
__attribute__((target("avx2,fma"), noinline)) static void
mm_block_v8(float *restrict C, int64_t ldc, const int R, int64_t w, const float *restrict A,
            int64_t ar, int64_t ac, int64_t c0, int64_t c1, const float *restrict B, int64_t ldb,
            const int add) {
  int64_t e = 0;
  for (; e + 16 <= w; e += 16) {
    attn_v8f x0[MR], x1[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
      x0[r] = x1[r] = (attn_v8f){0};
    if (R == MR) {
      for (int64_t c = c0; c < c1; c++) {
        const attn_v8f b0 = *(const attn_v8f *)(B + c * ldb + e),
                       b1 = *(const attn_v8f *)(B + c * ldb + e + 8);
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
          const float av = A[r * ar + c * ac];
          x0[r] += av * b0;
          x1[r] += av * b1;
        }
      }
    } else if (R == 1) {
      for (int64_t c = c0; c < c1; c++) {
        const float av = A[c * ac];
        x0[0] += av * *(const attn_v8f *)(B + c * ldb + e);
        x1[0] += av * *(const attn_v8f *)(B + c * ldb + e + 8);
      }
    } else {
      for (int64_t c = c0; c < c1; c++)
        for (int r = 0; r < R; r++) {
          const float av = A[r * ar + c * ac];
          x0[r] += av * *(const attn_v8f *)(B + c * ldb + e);
          x1[r] += av * *(const attn_v8f *)(B + c * ldb + e + 8);
        }
    }
    for (int r = 0; r < R; r++) {
      attn_v8f *p0 = (attn_v8f *)(C + r * ldc + e), *p1 = (attn_v8f *)(C + r * ldc + e + 8);
      *p0 = add ? *p0 + x0[r] : x0[r];
      *p1 = add ? *p1 + x1[r] : x1[r];
    }
  }
  for (; e < w; e++) /* the columns past the last multiple of 16 */
    for (int r = 0; r < R; r++) {
      float x = 0.0f;
      for (int64_t c = c0; c < c1; c++)
        x += A[r * ar + c * ac] * B[c * ldb + e];
      C[r * ldc + e] = add ? C[r * ldc + e] + x : x;
    }
}

/* The 8-float forms run where gcc_cpu_narrow_vectors() says (cpu_parallel.h). */
static int attn_narrow(void) {
  return gcc_cpu_narrow_vectors();
}

/* pack_t on AVX2 machines: 8 x 8 blocks transposed in registers (3 rounds
 * of 8 two-register shuffles, round k swapping bit k of the row and column
 * index), the edges by scalars. A copy: the same values as pack_t. */
typedef int32_t attn_i8m __attribute__((vector_size(32)));
#if defined(__clang__)
#define attn_shuffle8(a, b, m)                                                                     \
  ({                                                                                               \
    const attn_i8m m_ = (m);                                                                       \
    attn_v8f r_;                                                                                   \
    for (int i_ = 0; i_ < 8; i_++)                                                                 \
      r_[i_] = m_[i_] < 8 ? (a)[m_[i_]] : (b)[m_[i_] - 8];                                         \
    r_;                                                                                            \
  })
#else
#define attn_shuffle8(a, b, m) __builtin_shuffle(a, b, m)
#endif
__attribute__((target("avx2,fma"), noinline)) static void
pack_t_v8(const float *restrict src, int64_t n, int64_t w, int64_t ld, float *restrict dst) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    int64_t c = 0;
    for (; c + 8 <= w; c += 8) {
      attn_v8f r[8];
#pragma GCC unroll 8
      for (int x = 0; x < 8; x++)
        r[x] = *(const attn_v8f *)(src + (j + x) * ld + c);
#define ATTN_TR8_ROUND(k, lo, hi)                                                                  \
  _Pragma("GCC unroll 8") for (int x = 0; x < 8; x++) if (!(x & (k))) {                            \
    const attn_v8f a = r[x], b = r[x + (k)];                                                       \
    r[x] = attn_shuffle8(a, b, (attn_i8m)lo);                                                      \
    r[x + (k)] = attn_shuffle8(a, b, (attn_i8m)hi);                                                \
  }
      ATTN_TR8_ROUND(4, ((attn_i8m){0, 1, 2, 3, 8, 9, 10, 11}),
                     ((attn_i8m){4, 5, 6, 7, 12, 13, 14, 15}))
      ATTN_TR8_ROUND(2, ((attn_i8m){0, 1, 8, 9, 4, 5, 12, 13}),
                     ((attn_i8m){2, 3, 10, 11, 6, 7, 14, 15}))
      ATTN_TR8_ROUND(1, ((attn_i8m){0, 8, 2, 10, 4, 12, 6, 14}),
                     ((attn_i8m){1, 9, 3, 11, 5, 13, 7, 15}))
#undef ATTN_TR8_ROUND
#pragma GCC unroll 8
      for (int x = 0; x < 8; x++)
        *(attn_v8f *)(dst + (c + x) * BK + j) = r[x];
    }
    for (; c < w; c++)
      for (int64_t x = j; x < j + 8; x++)
        dst[c * BK + x] = src[x * ld + c];
  }
  for (; j < n; j++)
    for (int64_t c = 0; c < w; c++)
      dst[c * BK + j] = src[j * ld + c];
  for (int64_t c = 0; c < w; c++) /* the columns past n: zeros (read as a product's padding) */
    for (j = n; j < BK; j++)
      dst[c * BK + j] = 0.0f;
}
#else
#define ATTN_NARROW 0
#endif

/* kt[d][j] = K[j0 + j][d]: the key block transposed, BK wide; 16 x 16
 * blocks transposed in registers (4 rounds of 16 two-register shuffles:
 * round k swaps bit k of the row and column index), the edges by scalars. */
typedef int32_t attn_i16v __attribute__((vector_size(64)));
#if defined(__clang__)
/* clang has __builtin_shufflevector with constant indices only, not GCC's
 * __builtin_shuffle with a mask vector: lane by lane (the fuzzing build,
 * tools/fuzz.sh; a statement expression, as a function taking v16 by value
 * would change the ABI without AVX-512: -Wpsabi) */
#define attn_shuffle(a, b, m)                                                                      \
  ({                                                                                               \
    const attn_i16v m_ = (m);                                                                      \
    v16 r_;                                                                                        \
    for (int i_ = 0; i_ < VW; i_++)                                                                \
      r_[i_] = m_[i_] < VW ? (a)[m_[i_]] : (b)[m_[i_] - VW];                                       \
    r_;                                                                                            \
  })
#else
#define attn_shuffle(a, b, m) __builtin_shuffle(a, b, m)
#endif
ATTN_INL void pack_t(const float *restrict src, int64_t n, int64_t w, int64_t ld,
                     float *restrict dst) {
#if ATTN_NARROW
  if (attn_narrow()) {
    pack_t_v8(src, n, w, ld, dst);
    return;
  }
#endif
  typedef attn_i16v i16v;
  int64_t j = 0;
  for (; j + VW <= n; j += VW) {
    int64_t c = 0;
    for (; c + VW <= w; c += VW) {
      v16 r[VW];
#pragma GCC unroll 16
      for (int x = 0; x < VW; x++)
        r[x] = *(const v16 *)(src + (j + x) * ld + c);
#define ATTN_TR_ROUND(k, lo, hi)                                                                   \
  _Pragma("GCC unroll 16") for (int x = 0; x < VW; x++) if (!(x & (k))) {                          \
    const v16 a = r[x], b = r[x + (k)];                                                            \
    r[x] = attn_shuffle(a, b, (i16v)lo);                                                           \
    r[x + (k)] = attn_shuffle(a, b, (i16v)hi);                                                     \
  }
      ATTN_TR_ROUND(8, ((i16v){0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}),
                    ((i16v){8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}))
      ATTN_TR_ROUND(4, ((i16v){0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}),
                    ((i16v){4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}))
      ATTN_TR_ROUND(2, ((i16v){0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}),
                    ((i16v){2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}))
      ATTN_TR_ROUND(1, ((i16v){0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}),
                    ((i16v){1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}))
#undef ATTN_TR_ROUND
#pragma GCC unroll 16
      for (int x = 0; x < VW; x++)
        *(v16 *)(dst + (c + x) * BK + j) = r[x];
    }
    for (; c < w; c++)
      for (int64_t x = j; x < j + VW; x++)
        dst[c * BK + x] = src[x * ld + c];
  }
  for (; j < n; j++)
    for (int64_t c = 0; c < w; c++)
      dst[c * BK + j] = src[j * ld + c];
  for (int64_t c = 0; c < w; c++) /* the columns past n: zeros (read as a product's padding) */
    for (j = n; j < BK; j++)
      dst[c * BK + j] = 0.0f;
}

/* The register-tiled product every tile uses:
 *   C[r][e] = (add ? C[r][e] : 0) + sum_{c0 <= c < c1} A[r ar + c ac] B[c][e]
 * for r < R, e < w (C's row stride ldc, B's ldb). The R x 32 block of C is
 * held in registers over the whole sum (B's row loaded once per c, A's
 * element broadcast), and added to C once; each element's sum runs over c
 * in order from c0. ar, ac: A is read as given (ar = lda, ac = 1) or
 * transposed (ar = 1, ac = lda) at the same cost, so S = Q K^T (with K^T
 * packed), P V, P^T dO, dS^T Q and dS K are all this loop. */
ATTN_INL void mm_block(float *restrict C, int64_t ldc, const int R, int64_t w,
                       const float *restrict A, int64_t ar, int64_t ac, int64_t c0, int64_t c1,
                       const float *restrict B, int64_t ldb, const int add) {
#if ATTN_NARROW
  if (attn_narrow()) {
    mm_block_v8(C, ldc, R, w, A, ar, ac, c0, c1, B, ldb, add);
    return;
  }
#endif
  int64_t e = 0;
  for (; e + 2 * VW <= w; e += 2 * VW) {
    v16 x0[MR], x1[MR];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
      x0[r] = x1[r] = (v16){0};
    for (int64_t c = c0; c < c1; c++) {
      const v16 b0 = *(const v16 *)(B + c * ldb + e), b1 = *(const v16 *)(B + c * ldb + e + VW);
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        const float av = A[r * ar + c * ac];
        x0[r] += av * b0;
        x1[r] += av * b1;
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      v16 *p0 = (v16 *)(C + r * ldc + e), *p1 = (v16 *)(C + r * ldc + e + VW);
      *p0 = add ? *p0 + x0[r] : x0[r];
      *p1 = add ? *p1 + x1[r] : x1[r];
    }
  }
  if (e + VW <= w) {
    v16 x0[MR];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
      x0[r] = (v16){0};
    for (int64_t c = c0; c < c1; c++) {
      const v16 b0 = *(const v16 *)(B + c * ldb + e);
#pragma GCC unroll 4
      for (int r = 0; r < R; r++)
        x0[r] += A[r * ar + c * ac] * b0;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      v16 *p0 = (v16 *)(C + r * ldc + e);
      *p0 = add ? *p0 + x0[r] : x0[r];
    }
    e += VW;
  }
  for (; e < w; e++) /* the columns past the last multiple of 16 */
    for (int r = 0; r < R; r++) {
      float x = 0.0f;
      for (int64_t c = c0; c < c1; c++)
        x += A[r * ar + c * ac] * B[c * ldb + e];
      C[r * ldc + e] = add ? C[r * ldc + e] + x : x;
    }
}

/* Halves of 16 floats: sums and maxima of x's lanes in a fixed tree order
 * (lane l with l + 8, then l with l + 4, ...), 4 dependent steps instead of
 * a 16-step chain. */
typedef float attn_v8 __attribute__((vector_size(32), aligned(4)));
typedef float attn_v4 __attribute__((vector_size(16), aligned(4)));
typedef int32_t attn_i8v __attribute__((vector_size(32)));
typedef int32_t attn_i4v __attribute__((vector_size(16)));
ATTN_INL float hsum16(const float *restrict x) {
  float y[8];
  const attn_v8 a = *(const attn_v8 *)x + *(const attn_v8 *)(x + 8);
  memcpy(y, &a, sizeof y);
  const attn_v4 b = *(const attn_v4 *)y + *(const attn_v4 *)(y + 4);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

/* The largest of x's 16 lanes (none NaN), in hsum16's order (exact: the
 * order does not change it). */
ATTN_INL float hmax16(const float *restrict x) {
  float y[8];
  const attn_v8 x0 = *(const attn_v8 *)x, x1 = *(const attn_v8 *)(x + 8);
  const attn_i8v c8 = x1 > x0;
  const attn_v8 a = (attn_v8)(((attn_i8v)x1 & c8) | ((attn_i8v)x0 & ~c8));
  memcpy(y, &a, sizeof y);
  const attn_v4 y0 = *(const attn_v4 *)y, y1 = *(const attn_v4 *)(y + 4);
  const attn_i4v c4 = y1 > y0;
  const attn_v4 b = (attn_v4)(((attn_i4v)y1 & c4) | ((attn_i4v)y0 & ~c4));
  const float u = b[2] > b[0] ? b[2] : b[0], v = b[3] > b[1] ? b[3] : b[1];
  return v > u ? v : u;
}

/* sum_j a[j] (b ? b[j] : 1) for j < n: 16 partial sums (lane l takes j = l
 * mod 16, in order), then hsum16's tree: a fixed order. */
ATTN_INL float row_dot(const float *restrict a, const float *restrict b, int64_t n) {
  v16 acc = {0};
  int64_t j = 0;
  if (b)
    for (; j + VW <= n; j += VW)
      acc += *(const v16 *)(a + j) * *(const v16 *)(b + j);
  else
    for (; j + VW <= n; j += VW)
      acc += *(const v16 *)(a + j);
  float x[VW];
  memcpy(x, &acc, sizeof x);
  for (int64_t k = j; k < n; k++)
    x[k - j] += b ? a[k] * b[k] : a[k];
  return hsum16(x);
}

/* Lanes of a where c (a comparison's all-ones / zero lanes) is set, else
 * b's: bitwise, so every clone and clang compile it (a macro: a function
 * taking v16 by value would change the ABI without AVX-512, -Wpsabi). */
#define ATTN_SEL(c, a, b) ((v16)(((attn_i16v)(a) & (c)) | ((attn_i16v)(b) & ~(c))))

/* row_prep, row_exp and probs_and_ds's dS row on AVX2 machines (the
 * "avx2" clone assembles their 16-float vectors, broadcasts and lane
 * comparisons through the stack too): two 8-float halves per 16 columns,
 * lane l of the 16 still taking j = l mod 16, so the sums and maxima are
 * grouped as in the 16-lane passes; with FMA, as the AVX-512 clone
 * contracts them, the same bits. */
#if ATTN_NARROW
typedef float attn_v8c __attribute__((vector_size(32)));
#define ATTN_SEL8(c, a, b) ((attn_v8f)(((attn_i8m)(a) & (c)) | ((attn_i8m)(b) & ~(c))))
__attribute__((target("avx2,fma"), noinline)) static float
row_prep_v8(float *restrict s, int64_t w, int64_t lim, float sc, float m) {
  const attn_i8m iota = {0, 1, 2, 3, 4, 5, 6, 7};
  const attn_v8f ninf = (attn_v8f){0} - INFINITY;
  attn_v8f mv[2] = {(attn_v8f){0} + m, (attn_v8f){0} + m};
  for (int64_t j = 0; j < w; j += 8) {
    attn_v8f x = *(const attn_v8f *)(s + j) * sc;
    x = ATTN_SEL8(iota + (int32_t)j < (int32_t)lim, x, ninf);
    *(attn_v8f *)(s + j) = x;
    const int h = (int)(j >> 3 & 1);
    mv[h] = ATTN_SEL8(x > mv[h], x, mv[h]);
  }
  float x[16];
  memcpy(x, &mv[0], 32);
  memcpy(x + 8, &mv[1], 32);
  return hmax16(x);
}

__attribute__((target("avx2,fma"), noinline)) static float
row_exp_v8(float *restrict s, int64_t w, int64_t lim, float sc, float sub) {
  const attn_i8m iota = {0, 1, 2, 3, 4, 5, 6, 7};
  const attn_v8f ninf = (attn_v8f){0} - INFINITY;
  attn_v8f acc[2] = {{0}, {0}};
  for (int64_t j = 0; j < w; j += 8) {
    attn_v8f x = *(const attn_v8f *)(s + j) * sc - sub;
    x = ATTN_SEL8(iota + (int32_t)j < (int32_t)lim, x, ninf);
    const attn_i8m low = x < -87.0f;
    attn_v8f xc = ATTN_SEL8(low, (attn_v8f){0} - 87.0f, x);
    xc = ATTN_SEL8(xc > 0.0f, (attn_v8f){0}, xc);
    const attn_i8m k =
        __builtin_convertvector((attn_v8c)(xc * 1.44269504088896341f - 0.5f), attn_i8m);
    const attn_v8f kf = (attn_v8f) __builtin_convertvector(k, attn_v8c);
    attn_v8f r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    attn_v8f q = (attn_v8f){0} + 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    const attn_v8f y = q * r * r + r + 1.0f;
    const attn_v8f e = y * (attn_v8f)((k + 127) << 23);
    const attn_v8f z = ATTN_SEL8(low, (attn_v8f){0}, e);
    *(attn_v8f *)(s + j) = z;
    acc[j >> 3 & 1] += z;
  }
  float x[16];
  memcpy(x, &acc[0], 32);
  memcpy(x + 8, &acc[1], 32);
  return hsum16(x);
}

/* d[j] = p[j] (d[j] scale - ds) for j < w (a multiple of 16). */
__attribute__((target("avx2,fma"), noinline)) static void
ds_row_v8(const float *restrict p, float *restrict d, int64_t w, float scale, float ds) {
  for (int64_t j = 0; j < w; j += 8)
    *(attn_v8f *)(d + j) = *(const attn_v8f *)(p + j) * (*(const attn_v8f *)(d + j) * scale - ds);
}
#endif

/* The first pass over a row of scores, w (a multiple of 16) wide:
 * s[j] = s[j] sc for j < lim, -Inf for lim <= j < w (the causal diagonal,
 * the keys past the row's group and the tile); returns the larger of m and
 * the largest s[j] (16 running maxima in the comparison form of a scalar
 * loop, so NaN is skipped; the maximum is exact, so the grouping does not
 * change it). */
ATTN_INL float row_prep(float *restrict s, int64_t w, int64_t lim, float sc, float m) {
#if ATTN_NARROW
  if (attn_narrow())
    return row_prep_v8(s, w, lim, sc, m);
#endif
  const attn_i16v iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const v16 ninf = (v16){0} - INFINITY;
  v16 mv = (v16){0} + m;
  for (int64_t j = 0; j < w; j += VW) {
    v16 x = *(const v16 *)(s + j) * sc;
    x = ATTN_SEL(iota + (int32_t)j < (int32_t)lim, x, ninf);
    *(v16 *)(s + j) = x;
    mv = ATTN_SEL(x > mv, x, mv);
  }
  float x[VW];
  memcpy(x, &mv, sizeof x);
  return hmax16(x);
}

/* s[j] = e^(s[j] sc - sub) for j < lim, 0 for lim <= j < w (w a multiple
 * of 16), where s[j] sc - sub <= 0 (the scores less their row's max or
 * logsumexp; -Inf for a masked key), to ~1 ulp: exp_row's algorithm on 16
 * lanes at a time, no scalar remainder. The forward passes row_prep's
 * output (sc = 1, lim = w: exact), the backward the raw scores (one pass).
 * Returns the sum of the results: 16 partial sums (lane l takes j = l mod
 * 16, in order), then hsum16's tree. */
ATTN_INL float row_exp(float *restrict s, int64_t w, int64_t lim, float sc, float sub) {
#if ATTN_NARROW
  if (attn_narrow())
    return row_exp_v8(s, w, lim, sc, sub);
#endif
  typedef float v16a __attribute__((vector_size(64)));
  const attn_i16v iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const v16 ninf = (v16){0} - INFINITY;
  v16 acc = {0};
  for (int64_t j = 0; j < w; j += VW) {
    v16 x = *(const v16 *)(s + j) * sc - sub;
    x = ATTN_SEL(iota + (int32_t)j < (int32_t)lim, x, ninf);
    const attn_i16v low = x < -87.0f;
    v16 xc = ATTN_SEL(low, (v16){0} - 87.0f, x);
    xc = ATTN_SEL(xc > 0.0f, (v16){0}, xc);
    const attn_i16v k =
        __builtin_convertvector((v16a)(xc * 1.44269504088896341f - 0.5f), attn_i16v);
    const v16 kf = (v16) __builtin_convertvector(k, v16a);
    v16 r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    v16 q = (v16){0} + 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    const v16 y = q * r * r + r + 1.0f;
    const v16 e = y * (v16)((k + 127) << 23);
    const v16 z = ATTN_SEL(low, (v16){0}, e);
    *(v16 *)(s + j) = z;
    acc += z;
  }
  float x[VW];
  memcpy(x, &acc, sizeof x);
  return hsum16(x);
}

/* mm_block over nr rows, MR at a time. */
ATTN_INL void mm(float *restrict C, int64_t ldc, int64_t nr, int64_t w, const float *restrict A,
                 int64_t ar, int64_t ac, int64_t c0, int64_t c1, const float *restrict B,
                 int64_t ldb, int add) {
  int64_t r = 0;
  for (; r + MR <= nr; r += MR)
    mm_block(C + r * ldc, ldc, MR, w, A + r * ar, ar, ac, c0, c1, B, ldb, add);
  for (; r < nr; r++)
    mm_block(C + r * ldc, ldc, 1, w, A + r * ar, ar, ac, c0, c1, B, ldb, add);
}

/* The causal skip, per group of MR rows: the tile's keys [0, n) that rows
 * [r, r + nr) of the tile can see (all nk without is_causal). Everything per
 * row (S, P, dP, dS) is computed for its group's n keys only; entries past
 * them are never read: a product over the tile's keys stops at the group's n,
 * and a product over its rows (P^T dO, dS^T Q) starts each group of MR keys
 * at the first row that sees its first key (row_start), whose group's n
 * covers the MR keys, because i0 - j0 and the key groups are multiples of MR. */
static int64_t group_keys(const tile *t, int64_t r, int64_t nr) {
  if (!t->g->causal)
    return t->nk;
  int64_t n = t->i0 + r + nr - t->j0;
  return n < 0 ? 0 : n > t->nk ? t->nk : n;
}

static int64_t row_keys(const tile *t, int64_t i) {
  const int64_t r = i / MR * MR;
  return group_keys(t, r, t->nq - r < MR ? t->nq - r : MR);
}

/* The first row of the tile that sees key j of the tile (0 without is_causal). */
static int64_t row_start(const tile *t, int64_t j) {
  if (!t->g->causal)
    return 0;
  int64_t c = t->j0 + j - t->i0;
  return c < 0 ? 0 : c > t->nq ? t->nq : c;
}

/* The keys of the tile that some row of it sees: the tile's keys past them
 * take no part in P^T dO and dS^T Q. */
static int64_t tile_keys(const tile *t) {
  return group_keys(t, 0, t->nq);
}

/* s[i][j] = q_i . k_j for j < row_keys(i), rounded up to 16 columns (kt is
 * the key block transposed, zeros past nk); with a mask, s[i][j] =
 * s[i][j] scale + mask for j < row_keys(i) (a scalar pass: the vector
 * passes, row_prep and row_exp, then multiply by 1, exactly). Returns the factor
 * they apply: scale, or 1 with a mask. */
ATTN_INL float scores(const tile *t, const float *restrict kt, float *restrict s) {
  const gcc_attn_geo *g = t->g;
  const int64_t D = g->d;
  for (int64_t r = 0; r < t->nq; r += MR) {
    const int64_t nr = t->nq - r < MR ? t->nq - r : MR;
    const int64_t w = (group_keys(t, r, nr) + VW - 1) / VW * VW;
    mm(s + r * BK, BK, nr, w, t->q + (t->i0 + r) * t->ldq, t->ldq, 1, 0, D, kt, BK, 0);
  }
  if (!t->mask)
    return g->scale;
  for (int64_t i = 0; i < t->nq; i++) {
    float *restrict si = s + i * BK;
    const int64_t n = row_keys(t, i), sj = g->ms_j;
    const float *m = t->mask + (t->i0 + i) * g->ms_i + t->j0 * sj;
    for (int64_t j = 0; j < n; j++)
      si[j] = si[j] * g->scale + m[j * sj];
  }
  return 1.0f;
}

/* Row i's keys in the tile before the causal diagonal (all of its
 * row_keys without is_causal): row_prep's lim. */
static int64_t row_lim(const tile *t, int64_t i) {
  const int64_t n = row_keys(t, i);
  if (!t->g->causal)
    return n;
  const int64_t c = t->i0 + i - t->j0 + 1;
  return c < 0 ? 0 : c < n ? c : n;
}

/* row_keys(i) rounded up to 16: the columns the row passes cover. */
static int64_t row_width(const tile *t, int64_t i) {
  return (row_keys(t, i) + VW - 1) / VW * VW;
}

/* The keys a causal row block [i0, i0 + nq) can see end at i0 + nq. */
static int64_t keys_seen(const gcc_attn_geo *g, int64_t i0, int64_t nq) {
  if (!g->causal)
    return g->tk;
  int64_t e = i0 + nq;
  return e < g->tk ? e : g->tk;
}

static const float *mask_base(const gcc_attn_geo *g, const gcc_tensor *m, int64_t bh) {
  if (!m)
    return NULL;
  int64_t b = bh / g->h, h = bh % g->h;
  return (const float *)m->data + b * g->ms_b + h * g->ms_h;
}

/* C (nr rows of stride ldc, w wide) += sum over the tile's rows of
 * A[c][r] B[c][e] (A = P or dS, BK wide; B this tile's rows of dO or Q):
 * dV += P^T dO, dK += dS^T Q, each group of MR keys from the first row that
 * sees it, over the keys some row of the tile sees. */
ATTN_INL void mm_tn(const tile *t, float *restrict C, int64_t w, const float *restrict a,
                    const float *restrict B, int64_t ldb) {
  const int64_t nk = tile_keys(t);
  for (int64_t j = 0; j < nk; j += MR) {
    const int64_t nj = nk - j < MR ? nk - j : MR;
    mm(C + j * w, w, nj, w, a + j, 1, BK, row_start(t, j), t->nq, B, ldb, 1);
  }
}

/* C (the tile's nq rows of stride ldc, w wide) (+)= P V or dS K (B's row
 * stride ldb): each group of MR rows over its keys. */
ATTN_INL void mm_nn(const tile *t, float *restrict C, int64_t ldc, int64_t w,
                    const float *restrict a, const float *restrict B, int64_t ldb, int add) {
  for (int64_t r = 0; r < t->nq; r += MR) {
    const int64_t nr = t->nq - r < MR ? t->nq - r : MR;
    mm(C + r * ldc, ldc, nr, w, a + r * BK, BK, 1, 0, group_keys(t, r, nr), B, ldb, add);
  }
}

/* ---- operand layouts -------------------------------------------------------- */

/* Where the rows of head (b, h) of one operand lie: row r at
 * base + b sb + h sh + r ld floats. Attention's contiguous [B, H, T, D] is
 * sb = H T D, sh = T D, ld = D (so head bh starts at bh T D); the packed
 * QKV [B T, 3 H D] of AttentionPacked is sb = 3 T H D, sh = D, ld = 3 H D
 * for each third (K's and V's bases H D and 2 H D further), its O
 * [B T, H D] sb = T H D, sh = D, ld = H D. */
typedef struct attn_rows {
  int64_t sb, sh, ld;
} attn_rows;

/* The operands of one call: Q, K, V and O (dO as O; the gradients dQ, dK,
 * dV as Q, K, V), L always [B, H, Tq] contiguous. */
typedef struct attn_io {
  const float *q, *k, *v, *dout; /* dout: the backward's */
  float *o, *l;                  /* written by the forward, read by the backward */
  const gcc_tensor *mask;
  float *dq, *dk, *dv;
  const attn_drop *dr;
  attn_rows lq, lk, lv, lo;
} attn_io;

static int64_t head_at(const attn_rows *r, const gcc_attn_geo *g, int64_t bh) {
  return bh / g->h * r->sb + bh % g->h * r->sh;
}

/* The contiguous [B, H, T, w] layout of Attention's operands. */
static attn_rows rows_dense(const gcc_attn_geo *g, int64_t t, int64_t w) {
  return (attn_rows){g->h * t * w, t * w, w};
}

/* The packed layout: rows of ld floats, head h at column h D, batch b at
 * row b T. */
static attn_rows rows_packed(const gcc_attn_geo *g, int64_t ld) {
  return (attn_rows){g->tq * ld, g->d, ld};
}

/* Head bh's tile, no rows or keys yet. */
static tile tile_of(const gcc_attn_geo *g, const attn_io *p, int64_t bh) {
  tile t = {.g = g,
            .q = p->q + head_at(&p->lq, g, bh),
            .k = p->k + head_at(&p->lk, g, bh),
            .v = p->v + head_at(&p->lv, g, bh),
            .ldq = p->lq.ld,
            .ldk = p->lk.ld,
            .ldv = p->lv.ld,
            .ldo = p->lo.ld,
            .mask = mask_base(g, p->mask, bh),
            .dr = p->dr,
            .bh = bh};
  return t;
}

/* ---- forward --------------------------------------------------------------- */

/* Forward work item `item` (b, h, query block). *packed names the key
 * block that kt holds (bh * blocks + block; -1: none): consecutive items of
 * one head reuse it (a copy, so the bits are the same either way). The
 * first key block writes the accumulator (no zeroing, no rescaling); with
 * one key block (tk <= BK) the accumulator is O itself. */
ATTN_HOT static void fwd_item(const gcc_attn_geo *g, const attn_io *p, int64_t item,
                              float *restrict ws, int64_t *packed) {
  const int64_t nqb = (g->tq + BQ - 1) / BQ, bh = item / nqb, qb = item % nqb;
  const int64_t D = g->d, E = g->dv, nkb = (g->tk + BK - 1) / BK;
  tile t = tile_of(g, p, bh);
  t.i0 = qb * BQ;
  t.nq = g->tq - t.i0 < BQ ? g->tq - t.i0 : BQ;
  float *s = ws, *kt = s + BQ * BK, *m = kt + BK * D + BQ * E, *l = m + BQ;
  float *o = p->o + head_at(&p->lo, g, bh) + t.i0 * t.ldo;
  float *acc = nkb == 1 ? o : kt + BK * D;
  const int64_t lda = nkb == 1 ? t.ldo : E;
  const int64_t kend = keys_seen(g, t.i0, t.nq);
  for (int64_t i = 0; i < t.nq; i++) { /* as no key at all (tk = 0) leaves them */
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  if (kend == 0)
    for (int64_t i = 0; i < t.nq; i++)
      for (int64_t e = 0; e < E; e++)
        acc[i * lda + e] = 0.0f;
  for (t.j0 = 0; t.j0 < kend; t.j0 += BK) {
    t.nk = kend - t.j0 < BK ? kend - t.j0 : BK;
    const int64_t tag = bh * nkb + t.j0 / BK;
    const int first = t.j0 == 0;
    if (*packed != tag) { /* the whole key block, also past a causal kend */
      pack_t(t.k + t.j0 * t.ldk, g->tk - t.j0 < BK ? g->tk - t.j0 : BK, D, t.ldk, kt);
      *packed = tag;
    }
    const float sc = scores(&t, kt, s);
    for (int64_t i = 0; i < t.nq; i++) {
      float *restrict si = s + i * BK;
      const int64_t w = row_width(&t, i);
      const float m0 = first ? -INFINITY : m[i];
      const float mx = row_prep(si, w, row_lim(&t, i), sc, m0);
      if (mx == -INFINITY) { /* every key so far masked: nothing to add */
        for (int64_t j = 0; j < w; j++)
          si[j] = 0.0f;
        continue;
      }
      const float sum = row_exp(si, w, w, 1.0f, mx);
      if (first) {
        l[i] = sum;
      } else {
        const float corr = attn_exp1(m0 - mx);
        l[i] = l[i] * corr + sum;
        float *restrict ai = acc + i * lda;
        for (int64_t e = 0; e < E; e++)
          ai[e] *= corr;
      }
      m[i] = mx;
      if (p->dr) { /* P's dropout, after its sum went into l */
        float f[BK];
        const int64_t n = row_keys(&t, i);
        drop_factors(&t, t.i0 + i, f);
        for (int64_t j = 0; j < n; j++)
          si[j] = si[j] * f[j];
      }
    }
    mm_nn(&t, acc, lda, E, s, t.v + t.j0 * t.ldv, t.ldv, !first); /* acc (+)= P V */
  }
  float *lse = p->l + bh * g->tq + t.i0;
  for (int64_t i = 0; i < t.nq; i++) {
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    for (int64_t e = 0; e < E; e++)
      o[i * t.ldo + e] = acc[i * lda + e] * inv;
    lse[i] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
  }
}

/* The forward's dropout of node n (attributes at Attention's positions). */
static const attn_drop *fwd_drop(const gcc_kernel_args *a, attn_drop *drop) {
  const float p = a->node->av[ATTN_TRAINING].i ? a->node->av[ATTN_DROPOUT_P].f : 0.0f;
  drop_of(a, p, a->node->av[ATTN_KEY].i, drop);
  return p > 0.0f ? drop : NULL;
}

static void run_fwd(const gcc_kernel_args *a, const gcc_attn_geo *g, const attn_io *p) {
  const int64_t items = g->b * g->h * ((g->tq + BQ - 1) / BQ);
  const int nt = (int)n_threads_for(a, items);
  const size_t per = per_thread_floats(g->d, g->dv);
  float *ws = a->workspace;
#pragma omp parallel num_threads(nt)
  {
#ifdef _OPENMP
    float *mine = ws + (size_t)omp_get_thread_num() * per;
#else
    float *mine = ws;
#endif
    int64_t packed = -1; /* this call's: the workspace's kt of a previous call is stale */
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; it++)
      fwd_item(g, p, it, mine, &packed);
  }
}

gcc_status gcc_cpu_attention(const gcc_kernel_args *a) {
  gcc_attn_geo g;
  geo_of(a, ATTN_IN_Q, ATTN_IN_MASK, &g);
  attn_drop drop;
  attn_io p = {.q = a->in[ATTN_IN_Q]->data,
               .k = a->in[ATTN_IN_K]->data,
               .v = a->in[ATTN_IN_V]->data,
               .o = a->out[0]->data,
               .l = a->out[1]->data,
               .mask = a->n_in > ATTN_IN_MASK ? a->in[ATTN_IN_MASK] : NULL,
               .dr = fwd_drop(a, &drop),
               .lq = rows_dense(&g, g.tq, g.d),
               .lk = rows_dense(&g, g.tk, g.d),
               .lv = rows_dense(&g, g.tk, g.dv),
               .lo = rows_dense(&g, g.tq, g.dv)};
  run_fwd(a, &g, &p);
  return GCC_OK;
}

/* AttentionPacked: Q, K, V the thirds of QKV's rows, O rows of H D. */
static void io_packed(const gcc_attn_geo *g, attn_io *p) {
  const int64_t c = g->h * g->d;
  p->k = p->q + c;
  p->v = p->q + 2 * c;
  p->lq = p->lk = p->lv = rows_packed(g, 3 * c);
  p->lo = rows_packed(g, c);
}

gcc_status gcc_cpu_attention_packed(const gcc_kernel_args *a) {
  gcc_attn_geo g;
  gcc_attn_packed_geometry(&a->in[0]->shape, a->node, ATTN_PACKED_HEADS, ATTN_PACKED_SEQ, &g);
  attn_drop drop;
  attn_io p = {
      .q = a->in[0]->data, .o = a->out[0]->data, .l = a->out[1]->data, .dr = fwd_drop(a, &drop)};
  io_packed(&g, &p);
  run_fwd(a, &g, &p);
  return GCC_OK;
}

/* ---- backward --------------------------------------------------------------- */

/* The tile's P (in s, from L) and dS (in dp): P = exp(S - L_i) (0 on a row
 * with L = -Inf), dP = dO V^T, dS = P (dP - D_i) scale (the softmax's
 * scale folded into dS: dK and dQ are dS^T Q and dS K), each row for its
 * row_width (P and dS 0 past its row_lim). vt is the key block of V
 * transposed; do_, o_ this head's dO and O; l_ this head's L. */
ATTN_INL void probs_and_ds(const tile *t, const float *restrict vt, const float *restrict kt,
                           const float *restrict l_, const float *restrict do_,
                           const float *restrict o_, float *restrict s, float *restrict dp) {
  const int64_t E = t->g->dv;
  const float scale = t->g->scale;
  float Ds[BQ];
  const float sc = scores(t, kt, s);
  for (int64_t i = 0; i < t->nq; i++) {
    const int64_t r = t->i0 + i, w = row_width(t, i);
    const float li = l_[r];
    float *restrict si = s + i * BK;
    const float *restrict doi = do_ + r * t->ldo, *restrict oi = o_ + r * t->ldo;
    if (li == -INFINITY) { /* P = 0, dS = 0 */
      for (int64_t j = 0; j < w; j++)
        si[j] = 0.0f;
      Ds[i] = 0.0f;
      continue;
    }
    row_exp(si, w, row_lim(t, i), sc, li);
    Ds[i] = row_dot(doi, oi, E) * scale;
  }
  /* dP = dO V^T, then dS = P (dP - D_i) */
  for (int64_t r = 0; r < t->nq; r += MR) {
    const int64_t nr = t->nq - r < MR ? t->nq - r : MR;
    const int64_t w = (group_keys(t, r, nr) + VW - 1) / VW * VW;
    mm(dp + r * BK, BK, nr, w, do_ + (t->i0 + r) * t->ldo, t->ldo, 1, 0, E, vt, BK, 0);
  }
  if (t->dr) { /* dP = mask (dO V^T), dS = P (dP - D_i), then s = mask P for dV */
    for (int64_t i = 0; i < t->nq; i++) {
      float f[BK];
      const int64_t n = row_keys(t, i);
      drop_factors(t, t->i0 + i, f);
      float *restrict si = s + i * BK;
      float *restrict di = dp + i * BK;
      for (int64_t j = 0; j < n; j++) {
        const float dpij = di[j] * f[j];
        di[j] = si[j] * (dpij * scale - Ds[i]);
        si[j] = si[j] * f[j];
      }
    }
    return;
  }
#if ATTN_NARROW
  if (attn_narrow()) {
    for (int64_t i = 0; i < t->nq; i++)
      ds_row_v8(s + i * BK, dp + i * BK, row_width(t, i), scale, Ds[i]);
    return;
  }
#endif
  for (int64_t i = 0; i < t->nq; i++) {
    const int64_t w = row_width(t, i);
    const v16 *restrict si = (const v16 *)(s + i * BK);
    v16 *restrict di = (v16 *)(dp + i * BK);
    for (int64_t j = 0; j < w / VW; j++)
      di[j] = si[j] * (di[j] * scale - Ds[i]);
  }
}

/* dst rows (stride ld) = src rows (n of them, w wide, contiguous) * sc. */
static void store_rows(float *restrict dst, int64_t ld, const float *restrict src, int64_t n,
                       int64_t w, float sc) {
  for (int64_t r = 0; r < n; r++)
    for (int64_t x = 0; x < w; x++)
      dst[r * ld + x] = src[r * w + x] * sc;
}

/* Pass 1: dK and dV of key block kb of head bh. */
ATTN_HOT static void bwd_kv_item(const gcc_attn_geo *g, const attn_io *p, int64_t item,
                                 float *restrict ws) {
  const int64_t nkb = (g->tk + BK - 1) / BK, bh = item / nkb, kb = item % nkb;
  const int64_t D = g->d, E = g->dv;
  tile t = tile_of(g, p, bh);
  t.j0 = kb * BK;
  t.nk = g->tk - t.j0 < BK ? g->tk - t.j0 : BK;
  float *s = ws, *dp = s + BQ * BK, *kt = dp + BQ * BK, *vt = kt + BK * D, *dk = vt + BK * E,
        *dv = dk + BK * D;
  pack_t(t.k + t.j0 * t.ldk, t.nk, D, t.ldk, kt);
  pack_t(t.v + t.j0 * t.ldv, t.nk, E, t.ldv, vt);
  for (int64_t x = 0; x < t.nk * D; x++)
    dk[x] = 0.0f;
  for (int64_t x = 0; x < t.nk * E; x++)
    dv[x] = 0.0f;
  const int64_t ho = head_at(&p->lo, g, bh);
  const float *lh = p->l + bh * g->tq, *doh = p->dout + ho, *oh = p->o + ho;
  /* a causal key block is seen by rows i >= j0 only */
  int64_t i_start = g->causal ? t.j0 / BQ * BQ : 0;
  for (t.i0 = i_start; t.i0 < g->tq; t.i0 += BQ) {
    t.nq = g->tq - t.i0 < BQ ? g->tq - t.i0 : BQ;
    probs_and_ds(&t, vt, kt, lh, doh, oh, s, dp);
    mm_tn(&t, dv, E, s, doh + t.i0 * t.ldo, t.ldo);  /* dV += P^T dO */
    mm_tn(&t, dk, D, dp, t.q + t.i0 * t.ldq, t.ldq); /* dK += dS^T Q */
  }
  store_rows(p->dk + head_at(&p->lk, g, bh) + t.j0 * t.ldk, t.ldk, dk, t.nk, D, 1.0f);
  store_rows(p->dv + head_at(&p->lv, g, bh) + t.j0 * t.ldv, t.ldv, dv, t.nk, E, 1.0f);
}

/* Pass 2: dQ of query block qb of head bh. */
ATTN_HOT static void bwd_q_item(const gcc_attn_geo *g, const attn_io *p, int64_t item,
                                float *restrict ws) {
  const int64_t nqb = (g->tq + BQ - 1) / BQ, bh = item / nqb, qb = item % nqb;
  const int64_t D = g->d, E = g->dv;
  tile t = tile_of(g, p, bh);
  t.i0 = qb * BQ;
  t.nq = g->tq - t.i0 < BQ ? g->tq - t.i0 : BQ;
  float *s = ws, *dp = s + BQ * BK, *kt = dp + BQ * BK, *vt = kt + BK * D, *dq = vt + BK * E;
  for (int64_t x = 0; x < t.nq * D; x++)
    dq[x] = 0.0f;
  const int64_t ho = head_at(&p->lo, g, bh);
  const float *lh = p->l + bh * g->tq, *doh = p->dout + ho, *oh = p->o + ho;
  const int64_t kend = keys_seen(g, t.i0, t.nq);
  for (t.j0 = 0; t.j0 < kend; t.j0 += BK) {
    t.nk = kend - t.j0 < BK ? kend - t.j0 : BK;
    pack_t(t.k + t.j0 * t.ldk, t.nk, D, t.ldk, kt);
    pack_t(t.v + t.j0 * t.ldv, t.nk, E, t.ldv, vt);
    probs_and_ds(&t, vt, kt, lh, doh, oh, s, dp);
    mm_nn(&t, dq, D, D, dp, t.k + t.j0 * t.ldk, t.ldk, 1); /* dQ += dS K */
  }
  store_rows(p->dq + head_at(&p->lq, g, bh) + t.i0 * t.ldq, t.ldq, dq, t.nq, D, 1.0f);
}

/* One key block (tk <= BK, a GPT's short context): dK, dV and dQ of head bh
 * in one pass, P and dS computed once per query block instead of once for
 * dK/dV and again for dQ. A causal query block's tile is its keys_seen. */
ATTN_HOT static void bwd_head_item(const gcc_attn_geo *g, const attn_io *p, int64_t bh,
                                   float *restrict ws) {
  const int64_t D = g->d, E = g->dv;
  tile t = tile_of(g, p, bh);
  float *s = ws, *dp = s + BQ * BK, *kt = dp + BQ * BK, *vt = kt + BK * D, *dk = vt + BK * E,
        *dv = dk + BK * D;
  pack_t(t.k, g->tk, D, t.ldk, kt);
  pack_t(t.v, g->tk, E, t.ldv, vt);
  for (int64_t x = 0; x < g->tk * D; x++)
    dk[x] = 0.0f;
  for (int64_t x = 0; x < g->tk * E; x++)
    dv[x] = 0.0f;
  const int64_t ho = head_at(&p->lo, g, bh);
  const float *lh = p->l + bh * g->tq, *doh = p->dout + ho, *oh = p->o + ho;
  float *dqh = p->dq + head_at(&p->lq, g, bh);
  for (t.i0 = 0; t.i0 < g->tq; t.i0 += BQ) {
    t.nq = g->tq - t.i0 < BQ ? g->tq - t.i0 : BQ;
    t.nk = keys_seen(g, t.i0, t.nq);
    float *dqo = dqh + t.i0 * t.ldq;
    probs_and_ds(&t, vt, kt, lh, doh, oh, s, dp);
    mm_tn(&t, dv, E, s, doh + t.i0 * t.ldo, t.ldo);  /* dV += P^T dO */
    mm_tn(&t, dk, D, dp, t.q + t.i0 * t.ldq, t.ldq); /* dK += dS^T Q */
    mm_nn(&t, dqo, t.ldq, D, dp, t.k, t.ldk, 0);     /* dQ = dS K */
  }
  store_rows(p->dk + head_at(&p->lk, g, bh), t.ldk, dk, g->tk, D, 1.0f);
  store_rows(p->dv + head_at(&p->lv, g, bh), t.ldv, dv, g->tk, E, 1.0f);
}

static void run_bwd(const gcc_kernel_args *a, const gcc_attn_geo *g, const attn_io *p) {
  const size_t per = per_thread_floats(g->d, g->dv);
  float *ws = a->workspace;
  const int64_t kv_items = g->b * g->h * ((g->tk + BK - 1) / BK);
  const int64_t q_items = g->b * g->h * ((g->tq + BQ - 1) / BQ);
  int nt;
  if (g->tk <= BK) { /* one key block: one pass per head */
    nt = (int)n_threads_for(a, g->b * g->h);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t it = 0; it < g->b * g->h; it++) {
#ifdef _OPENMP
      float *mine = ws + (size_t)omp_get_thread_num() * per;
#else
      float *mine = ws;
#endif
      bwd_head_item(g, p, it, mine);
    }
    return;
  }
  nt = (int)n_threads_for(a, kv_items);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t it = 0; it < kv_items; it++) {
#ifdef _OPENMP
    float *mine = ws + (size_t)omp_get_thread_num() * per;
#else
    float *mine = ws;
#endif
    bwd_kv_item(g, p, it, mine);
  }
  nt = (int)n_threads_for(a, q_items);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t it = 0; it < q_items; it++) {
#ifdef _OPENMP
    float *mine = ws + (size_t)omp_get_thread_num() * per;
#else
    float *mine = ws;
#endif
    bwd_q_item(g, p, it, mine);
  }
}

/* The backward's dropout (AttentionGrad's attribute positions). */
static const attn_drop *bwd_drop(const gcc_kernel_args *a, attn_drop *drop) {
  const float p = a->node->av[ATTN_GRAD_DROPOUT_P].f;
  drop_of(a, p, a->node->av[ATTN_GRAD_KEY].i, drop);
  return p > 0.0f ? drop : NULL;
}

gcc_status gcc_cpu_attention_grad(const gcc_kernel_args *a) {
  gcc_attn_geo g;
  geo_of(a, ATTN_GRAD_IN_Q, ATTN_GRAD_IN_MASK, &g);
  attn_drop drop;
  attn_io p = {.q = a->in[ATTN_GRAD_IN_Q]->data,
               .k = a->in[ATTN_GRAD_IN_K]->data,
               .v = a->in[ATTN_GRAD_IN_V]->data,
               .o = a->in[ATTN_GRAD_IN_O]->data,
               .l = a->in[ATTN_GRAD_IN_L]->data,
               .dout = a->in[ATTN_GRAD_IN_DO]->data,
               .mask = a->n_in > ATTN_GRAD_IN_MASK ? a->in[ATTN_GRAD_IN_MASK] : NULL,
               .dq = a->out[0]->data,
               .dk = a->out[1]->data,
               .dv = a->out[2]->data,
               .dr = bwd_drop(a, &drop),
               .lq = rows_dense(&g, g.tq, g.d),
               .lk = rows_dense(&g, g.tk, g.d),
               .lv = rows_dense(&g, g.tk, g.dv),
               .lo = rows_dense(&g, g.tq, g.dv)};
  run_bwd(a, &g, &p);
  return GCC_OK;
}

gcc_status gcc_cpu_attention_packed_grad(const gcc_kernel_args *a) {
  gcc_attn_geo g;
  gcc_attn_packed_geometry(&a->in[ATTN_PACKED_GRAD_IN_QKV]->shape, a->node, ATTN_PACKED_GRAD_HEADS,
                           ATTN_PACKED_GRAD_SEQ, &g);
  attn_drop drop;
  const int64_t c = g.h * g.d;
  float *dqkv = a->out[0]->data;
  attn_io p = {.q = a->in[ATTN_PACKED_GRAD_IN_QKV]->data,
               .o = a->in[ATTN_PACKED_GRAD_IN_O]->data,
               .l = a->in[ATTN_PACKED_GRAD_IN_L]->data,
               .dout = a->in[ATTN_PACKED_GRAD_IN_DO]->data,
               .dq = dqkv,
               .dk = dqkv + c,
               .dv = dqkv + 2 * c,
               .dr = bwd_drop(a, &drop)};
  io_packed(&g, &p);
  run_bwd(a, &g, &p);
  return GCC_OK;
}
