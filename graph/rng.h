/*
 * rng.h - the one pseudo-random generator of gcc-train (PCG32, O'Neill 2014,
 * "PCG: A Family of Simple Fast Space-Efficient Statistically Good
 * Algorithms for Random Number Generation"), used for parameter
 * initialisation and for shuffling. Deterministic for a given seed on every
 * platform: the same seed gives the same model file and the same batches.
 */
#ifndef GCC_GRAPH_RNG_H
#define GCC_GRAPH_RNG_H

#include <stdint.h>

typedef struct gcc_rng {
  uint64_t state;
  uint64_t inc;
} gcc_rng;

/* Next 32 uniformly distributed bits. */
static inline uint32_t gcc_rng_u32(gcc_rng *r) {
  uint64_t old = r->state;
  r->state = old * 6364136223846793005ULL + r->inc;
  uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
  uint32_t rot = (uint32_t)(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
}

/* Seeds the generator; `stream` selects one of 2^63 independent sequences. */
static inline void gcc_rng_seed(gcc_rng *r, uint64_t seed, uint64_t stream) {
  r->state = 0;
  r->inc = (stream << 1u) | 1u;
  (void)gcc_rng_u32(r);
  r->state += seed;
  (void)gcc_rng_u32(r);
}

/* Uniform in [0, 1) with 24 bits of precision (exactly representable). */
static inline float gcc_rng_uniform(gcc_rng *r) {
  return (float)(gcc_rng_u32(r) >> 8) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n), n >= 1, without modulo bias (Lemire's method). */
static inline uint32_t gcc_rng_below(gcc_rng *r, uint32_t n) {
  uint64_t m = (uint64_t)gcc_rng_u32(r) * n;
  uint32_t low = (uint32_t)m;
  if (low < n) {
    uint32_t threshold = (uint32_t)(-n) % n;
    while (low < threshold) {
      m = (uint64_t)gcc_rng_u32(r) * n;
      low = (uint32_t)m;
    }
  }
  return (uint32_t)(m >> 32);
}

#endif /* GCC_GRAPH_RNG_H */
