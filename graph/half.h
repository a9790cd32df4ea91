/*
 * half.h - the 16-bit float formats of mixed precision, converted on the
 * host exactly as the GPU converts them.
 *
 *  - bfloat16 (GCC_DT_BFLOAT16): the top 16 bits of an IEEE float32 (8-bit
 *    exponent, 7-bit mantissa);
 *  - float16 (GCC_DT_FLOAT16): IEEE 754 binary16 (5-bit exponent, 10-bit
 *    mantissa, subnormals down to 2^-24, largest finite 65504).
 *
 * float32 -> 16 bits rounds to nearest, ties to even, as CUDA's
 * __float2bfloat16_rn / __float2half_rn (and PyTorch's .to(torch.bfloat16)
 * / .half()) do: values past the largest finite one round to infinity, NaN
 * stays NaN (quiet). 16 bits -> float32 is exact. These are what the CPU
 * backend uses to round the values a CUDA plan stores in 16 bits, and what
 * the host emulation of generated kernels (tests/cuda_host_shim.h) uses for
 * the CUDA intrinsics, so the two agree bit for bit.
 */
#ifndef GCC_GRAPH_HALF_H
#define GCC_GRAPH_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline uint32_t gcc_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float gcc_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* float32 -> bfloat16, round to nearest even (NaN -> quiet NaN). */
static inline uint16_t gcc_f32_to_bf16(float f) {
  uint32_t u = gcc_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float gcc_bf16_to_f32(uint16_t h) {
  return gcc_bits_f32((uint32_t)h << 16);
}

/* float32 -> IEEE float16, round to nearest even (overflow -> infinity,
 * NaN -> quiet NaN, subnormals kept). */
static inline uint16_t gcc_f32_to_f16(float f) {
  uint32_t x = gcc_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) /* Inf, NaN */
    return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) /* >= 65520: rounds past 65504 */
    return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) { /* below 2^-14: a subnormal (or zero) half */
    if (a < 0x33000000u) /* <= 2^-25 rounds to zero (2^-25 is a tie to even 0) */
      return (uint16_t)sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - (a >> 23); /* 14 .. 24: units of 2^-24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u)))
      r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = (a - 0x38000000u) >> 13, rem = a & 0x1fffu; /* rebias 127 -> 15 */
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
    r++;
  return (uint16_t)(sign | r);
}

static inline float gcc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float32 */
    float v = (float)m * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (e == 31)
    return gcc_bits_f32(sign | 0x7f800000u | (m << 13));
  return gcc_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* x rounded to the nearest bfloat16 / float16, as a float32. */
static inline float gcc_round_bf16(float x) {
  return gcc_bf16_to_f32(gcc_f32_to_bf16(x));
}
static inline float gcc_round_f16(float x) {
  return gcc_f16_to_f32(gcc_f32_to_f16(x));
}

#ifdef __cplusplus
}
#endif

#endif /* GCC_GRAPH_HALF_H */
