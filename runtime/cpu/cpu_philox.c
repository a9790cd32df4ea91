/*
 * cpu_philox.c - Dropout's Philox words many blocks at a time
 * (runtime/cpu/cpu_philox.h).
 *
 * Philox-4x32-10 (graph/philox.h): a block's counter is {q low, q high,
 * step low, step high}, its key the node's; each of the ten rounds maps
 * (c0, c1, c2, c3) to (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1,
 * lo(M0 c0)), the key bumped by the Weyl constants between rounds. The
 * vector forms hold word j of G consecutive blocks in one register (G = 16
 * in a zmm, 8 in a ymm): q's low word is q0 low + lane (its high word + 1
 * in the lanes where that wrapped), the step and the key are the same in
 * every lane. M c for 32-bit lanes: vpmuludq multiplies the even lanes
 * into 64-bit products; the odd lanes shifted down make the other half;
 * the products' high and low halves are blended back into 32-bit lanes.
 * At the end the four word registers are interleaved into element order
 * (word j of block q at 4 q + j).
 */
#include "runtime/cpu/cpu_philox.h"

#include <string.h>

#include "graph/philox.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define GCC_PHILOX_X86 1
#else
#define GCC_PHILOX_X86 0
#endif

/* out[4 k + j] = word j of block q0 + k, k = 0 .. G - 1 */
typedef void (*blocks_fn)(uint64_t key, int64_t q0, int64_t step, unsigned int *out);

static void blocks1_scalar(uint64_t key, int64_t q0, int64_t step, unsigned int *out) {
  gcc_dropout_block(key, q0, step, out);
}

#if GCC_PHILOX_X86
/* hi:lo = m c, 16 lanes of 32 bits (m's lanes all the multiplier) */
__attribute__((target("avx512f"), always_inline)) static inline void
mulhilo16(__m512i c, __m512i m, __m512i *hi, __m512i *lo) {
  const __m512i even = _mm512_mul_epu32(c, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

__attribute__((target("avx512f"))) static void blocks16_avx512(uint64_t key, int64_t q0,
                                                               int64_t step, unsigned int *out) {
  const uint64_t uq = (uint64_t)q0, us = (uint64_t)step;
  const __m512i qlo = _mm512_set1_epi32((int)(unsigned int)uq);
  __m512i c0 = _mm512_add_epi32(
      qlo, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 wrapped = _mm512_cmplt_epu32_mask(c0, qlo);
  const __m512i qhi = _mm512_set1_epi32((int)(unsigned int)(uq >> 32));
  __m512i c1 = _mm512_mask_add_epi32(qhi, wrapped, qhi, _mm512_set1_epi32(1));
  __m512i c2 = _mm512_set1_epi32((int)(unsigned int)us);
  __m512i c3 = _mm512_set1_epi32((int)(unsigned int)(us >> 32));
  const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
  unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m512i hi0, lo0, hi1, lo1;
    mulhilo16(c0, m0, &hi0, &lo0);
    mulhilo16(c2, m1, &hi1, &lo1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
    c3 = lo0;
  }
  /* (w0, w1) and (w2, w3) of each block as 64-bit lanes, then four blocks a register */
  const __m512i lo8 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi8 =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i a = _mm512_permutex2var_epi32(c0, lo8, c1),
                b = _mm512_permutex2var_epi32(c0, hi8, c1);
  const __m512i c = _mm512_permutex2var_epi32(c2, lo8, c3),
                d = _mm512_permutex2var_epi32(c2, hi8, c3);
  const __m512i first = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i last = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  _mm512_storeu_si512(out, _mm512_permutex2var_epi64(a, first, c));
  _mm512_storeu_si512(out + 16, _mm512_permutex2var_epi64(a, last, c));
  _mm512_storeu_si512(out + 32, _mm512_permutex2var_epi64(b, first, d));
  _mm512_storeu_si512(out + 48, _mm512_permutex2var_epi64(b, last, d));
}

__attribute__((target("avx2"), always_inline)) static inline void
mulhilo8(__m256i c, __m256i m, __m256i *hi, __m256i *lo) {
  const __m256i even = _mm256_mul_epu32(c, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

__attribute__((target("avx2"))) static void blocks8_avx2(uint64_t key, int64_t q0, int64_t step,
                                                         unsigned int *out) {
  const uint64_t uq = (uint64_t)q0, us = (uint64_t)step;
  const __m256i qlo = _mm256_set1_epi32((int)(unsigned int)uq);
  __m256i c0 = _mm256_add_epi32(qlo, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  /* c0 < q0 low, unsigned (-1 where the low word wrapped): signed after flipping the sign bits */
  const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
  const __m256i wrapped =
      _mm256_cmpgt_epi32(_mm256_xor_si256(qlo, sign), _mm256_xor_si256(c0, sign));
  __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32((int)(unsigned int)(uq >> 32)), wrapped);
  __m256i c2 = _mm256_set1_epi32((int)(unsigned int)us);
  __m256i c3 = _mm256_set1_epi32((int)(unsigned int)(us >> 32));
  const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u), m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
  unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m256i hi0, lo0, hi1, lo1;
    mulhilo8(c0, m0, &hi0, &lo0);
    mulhilo8(c2, m1, &hi1, &lo1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
    c1 = lo1;
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
    c3 = lo0;
  }
  /* per 128-bit half: blocks (0, 1, 2, 3) and (4, 5, 6, 7) */
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2); /* blocks 0 | 4 */
  const __m256i u1 = _mm256_unpackhi_epi64(t0, t2); /* blocks 1 | 5 */
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3); /* blocks 2 | 6 */
  const __m256i u3 = _mm256_unpackhi_epi64(t1, t3); /* blocks 3 | 7 */
  _mm256_storeu_si256((__m256i *)out, _mm256_permute2x128_si256(u0, u1, 0x20));
  _mm256_storeu_si256((__m256i *)(out + 8), _mm256_permute2x128_si256(u2, u3, 0x20));
  _mm256_storeu_si256((__m256i *)(out + 16), _mm256_permute2x128_si256(u0, u1, 0x31));
  _mm256_storeu_si256((__m256i *)(out + 24), _mm256_permute2x128_si256(u2, u3, 0x31));
}
#endif

static int machine_path(void) {
#if GCC_PHILOX_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return GCC_PHILOX_AVX512;
  if (__builtin_cpu_supports("avx2"))
    return GCC_PHILOX_AVX2;
#endif
  return GCC_PHILOX_SCALAR;
}

static int g_path = -1; /* -1: not chosen yet */

int gcc_cpu_philox_path(void) {
  int p = __atomic_load_n(&g_path, __ATOMIC_RELAXED);
  if (p < 0) { /* every thread that races here stores the same value */
    p = machine_path();
    __atomic_store_n(&g_path, p, __ATOMIC_RELAXED);
  }
  return p;
}

int gcc_cpu_set_philox_path(int path) {
  const int m = machine_path();
  __atomic_store_n(&g_path, path < 0 || path > m ? m : path, __ATOMIC_RELAXED);
  return gcc_cpu_philox_path();
}

void gcc_cpu_dropout_words(uint64_t key, int64_t w0, int64_t n, int64_t step, unsigned int *out) {
  blocks_fn fn = blocks1_scalar;
  int64_t g = 1; /* blocks a call of fn */
#if GCC_PHILOX_X86
  switch (gcc_cpu_philox_path()) {
  case GCC_PHILOX_AVX512:
    fn = blocks16_avx512;
    g = 16;
    break;
  case GCC_PHILOX_AVX2:
    fn = blocks8_avx2;
    g = 8;
    break;
  default: break;
  }
#endif
  int64_t q = w0 / 4, skip = w0 % 4, done = 0;
  while (done < n) {
    const int64_t left = n - done;
    if (skip == 0 && left >= 4 * g) { /* whole blocks straight into out */
      fn(key, q, step, out + done);
      done += 4 * g;
    } else {
      unsigned int w[64];
      fn(key, q, step, w);
      const int64_t take = 4 * g - skip < left ? 4 * g - skip : left;
      memcpy(out + done, w + skip, (size_t)take * sizeof *out);
      done += take;
      skip = 0;
    }
    q += g;
  }
}

#if GCC_PHILOX_X86 && !defined(__SANITIZE_ADDRESS__)
#define GCC_PHILOX_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GCC_PHILOX_HOT
#endif

/* y = x * (w >= t ? scale : 0), one chunk, and the factors alone:
 * vectorised per clone (no branch on the random bits); the product is the
 * scalar code's, element by element */
GCC_PHILOX_HOT static void apply_chunk(const float *x, float *y, const unsigned int *w, int64_t n,
                                       unsigned int t, float scale) {
  for (int64_t i = 0; i < n; i++)
    y[i] = x[i] * (w[i] >= t ? scale : 0.0f);
}

GCC_PHILOX_HOT static void factor_chunk(float *f, const unsigned int *w, int64_t n, unsigned int t,
                                        float scale) {
  for (int64_t i = 0; i < n; i++)
    f[i] = w[i] >= t ? scale : 0.0f;
}

/* thr = 2^32 (p >= 1) drops everything, and then scale is 0: comparing
 * with 2^32 - 1 and a factor 0 for the "kept" gives x * 0, the same bits */
static unsigned int threshold32(uint64_t thr) {
  return thr > 0xffffffffu ? 0xffffffffu : (unsigned int)thr;
}

enum { CHUNK = 1024 };

void gcc_cpu_dropout_apply(const float *x, float *y, int64_t w0, int64_t n, uint64_t key,
                           int64_t step, uint64_t thr, float scale) {
  unsigned int w[CHUNK];
  for (int64_t i = 0; i < n; i += CHUNK) {
    const int64_t m = n - i < CHUNK ? n - i : CHUNK;
    gcc_cpu_dropout_words(key, w0 + i, m, step, w);
    apply_chunk(x + i, y + i, w, m, threshold32(thr), thr > 0xffffffffu ? 0.0f : scale);
  }
}

void gcc_cpu_dropout_factors(uint64_t key, int64_t w0, int64_t n, int64_t step, uint64_t thr,
                             float scale, float *f) {
  unsigned int w[CHUNK];
  for (int64_t i = 0; i < n; i += CHUNK) {
    const int64_t m = n - i < CHUNK ? n - i : CHUNK;
    gcc_cpu_dropout_words(key, w0 + i, m, step, w);
    factor_chunk(f + i, w, m, threshold32(thr), thr > 0xffffffffu ? 0.0f : scale);
  }
}
