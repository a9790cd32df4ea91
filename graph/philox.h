/*
 * philox.h - Philox-4x32-10, the counter-based generator of Salmon, Moraes,
 * Dror and Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3" (SC 2011):
 * Random123's philox4x32_10, cuRAND's CURAND_RNG_PSEUDO_PHILOX4_32_10 and
 * the engine of PyTorch's CUDA generator. It maps a 128-bit counter under a
 * 64-bit key to 128 random bits by ten rounds of two 32x32->64-bit
 * multiplications, so the bits of element i are a pure function of (key,
 * counter): any thread, in any order, on any backend draws the same ones.
 *
 * Dropout's mask (graph/ops.h GCC_OP_DROPOUT) comes from it: the key is
 * the node's (gcc_dropout_key: the run's seed, the node's name and its
 * `seed` attribute), the counter {q, step} for the block q = i / 4 of four
 * elements at optimizer step `step`, and element i takes word i % 4 of its
 * block. The element is kept when its 32 bits are >= the threshold
 * gcc_dropout_threshold(p) (probability 1 - p, to 2^-32) and then scaled by
 * gcc_dropout_scale(p) = 1 / (1 - p), as torch.nn.Dropout's inverted
 * dropout; p = 1 drops everything.
 *
 * One source for C and CUDA: GCC_PHILOX_DEFINE(QUAL) expands to the
 * functions, each declared with QUAL in front. This header expands it with
 * `static inline` for C (the CPU kernels and the tests); the CUDA code
 * generator puts GCC_PHILOX_CUDA_SOURCE into the generated translation unit,
 * which is the same tokens stringified with `static __device__
 * __forceinline__`, so the CPU kernel, the NVRTC-compiled kernel and its
 * host emulation (tests/cuda_host_shim.h) run the very same code. The
 * macro body is the common subset of C and CUDA C++ (no <stdint.h>: NVRTC
 * has none by default; `unsigned int` is 32 bits on every target here, as
 * checked below) and holds no preprocessor directive.
 *
 * Known answers (Random123's kat_vectors, checked in tests/philox_test.cc):
 *   key {0, 0}, counter {0, 0, 0, 0}           -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8
 *   key {ffffffff, ffffffff}, counter all ones  -> 408f276d 41c83b0e a20bc7c6 6d5451fd
 */
#ifndef GCC_GRAPH_PHILOX_H
#define GCC_GRAPH_PHILOX_H

#include <stdint.h>

/* gcc_philox4x32_10(ctr, key, out): out = Philox-4x32-10(ctr) under key
 * (Random123's round: (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0) with
 * hi0:lo0 = 0xD2511F53 c0 and hi1:lo1 = 0xCD9E8D57 c2; the key bumped by
 * the Weyl constants 0x9E3779B9, 0xBB67AE85 between rounds).
 * gcc_dropout_block(key, q, step, out): the 4 x 32 bits of dropout block q
 * (elements 4q .. 4q + 3) at `step` under the 64-bit node key. */
#define GCC_PHILOX_DEFINE(QUAL)                                                                    \
  QUAL void gcc_philox4x32_10(const unsigned int ctr[4], const unsigned int key[2],                \
                              unsigned int out[4]) {                                               \
    unsigned int c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];                               \
    unsigned int k0 = key[0], k1 = key[1];                                                         \
    for (int r = 0; r < 10; r++) {                                                                 \
      if (r > 0) {                                                                                 \
        k0 += 0x9E3779B9u;                                                                         \
        k1 += 0xBB67AE85u;                                                                         \
      }                                                                                            \
      const unsigned long long p0 = (unsigned long long)0xD2511F53u * c0;                          \
      const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c2;                          \
      const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;                   \
      const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;                   \
      c0 = hi1 ^ c1 ^ k0;                                                                          \
      c1 = lo1;                                                                                    \
      c2 = hi0 ^ c3 ^ k1;                                                                          \
      c3 = lo0;                                                                                    \
    }                                                                                              \
    out[0] = c0;                                                                                   \
    out[1] = c1;                                                                                   \
    out[2] = c2;                                                                                   \
    out[3] = c3;                                                                                   \
  }                                                                                                \
  QUAL void gcc_dropout_block(unsigned long long key, long long q, long long step,                 \
                              unsigned int out[4]) {                                               \
    const unsigned long long uq = (unsigned long long)q, us = (unsigned long long)step;            \
    unsigned int ctr[4], k[2];                                                                     \
    ctr[0] = (unsigned int)uq;                                                                     \
    ctr[1] = (unsigned int)(uq >> 32);                                                             \
    ctr[2] = (unsigned int)us;                                                                     \
    ctr[3] = (unsigned int)(us >> 32);                                                             \
    k[0] = (unsigned int)key;                                                                      \
    k[1] = (unsigned int)(key >> 32);                                                              \
    gcc_philox4x32_10(ctr, k, out);                                                                \
  }

#define GCC_PHILOX_STR_(...) #__VA_ARGS__
#define GCC_PHILOX_STR(...)  GCC_PHILOX_STR_(__VA_ARGS__)

/* The generator as CUDA C source (one line), for the generated kernels. */
#define GCC_PHILOX_CUDA_SOURCE GCC_PHILOX_STR(GCC_PHILOX_DEFINE(static __device__ __forceinline__))

#ifdef __cplusplus
static_assert(sizeof(unsigned int) == 4 && sizeof(unsigned long long) == 8,
              "Philox needs 32-bit unsigned int and 64-bit unsigned long long");
#else
_Static_assert(sizeof(unsigned int) == 4 && sizeof(unsigned long long) == 8,
               "Philox needs 32-bit unsigned int and 64-bit unsigned long long");
#endif

GCC_PHILOX_DEFINE(static inline)

/* An element whose 32 bits are below the threshold is dropped: floor(p
 * 2^32) for p in [0, 1) (exact: p is a float, 24 significant bits), 2^32
 * (every element) for p >= 1, 0 for p <= 0. */
static inline uint64_t gcc_dropout_threshold(float p) {
  if (!(p > 0.0f))
    return 0;
  if (p >= 1.0f)
    return (uint64_t)1 << 32;
  return (uint64_t)((double)p * 4294967296.0);
}

/* The factor of a kept element: 1 / (1 - p) as PyTorch's CPU dropout
 * computes it (the Bernoulli mask divided by the float 1 - p); 0 for p >= 1
 * (torch.nn.functional.dropout with p = 1 multiplies by zero). */
static inline float gcc_dropout_scale(float p) {
  if (p >= 1.0f)
    return 0.0f;
  return 1.0f / (float)(1.0 - (double)p);
}

/* The 64-bit Philox key of a Dropout node: Philox-4x32-10 under the run's
 * seed (key {seed low, seed high}) of the counter {FNV-1a 64 of the node's
 * name (low, high), node_seed (low, high)}, words 0 and 1 (low, high). So
 * two Dropout nodes draw independent masks, and a run's masks are a
 * function of its seed. tests/fixtures/make_train_import_fixtures.py
 * computes the same in Python. */
static inline uint64_t gcc_dropout_key(uint64_t run_seed, const char *node_name,
                                       int64_t node_seed) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *s = (const unsigned char *)node_name; s && *s; s++) {
    h ^= *s;
    h *= 0x100000001b3ull;
  }
  const uint64_t ns = (uint64_t)node_seed;
  const unsigned int ctr[4] = {(unsigned int)h, (unsigned int)(h >> 32), (unsigned int)ns,
                               (unsigned int)(ns >> 32)};
  const unsigned int key[2] = {(unsigned int)run_seed, (unsigned int)(run_seed >> 32)};
  unsigned int out[4];
  gcc_philox4x32_10(ctr, key, out);
  return (uint64_t)out[0] | (uint64_t)out[1] << 32;
}

#endif /* GCC_GRAPH_PHILOX_H */
