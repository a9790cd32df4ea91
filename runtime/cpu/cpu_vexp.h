/*
 * cpu_vexp.h - e^a on GCC's generic vectors of GCC_VEXP_LANES floats (one
 * zmm in an x86-64-v4 clone, two ymm in an x86-64-v3 one, four xmm in the
 * baseline), shared by the kernels that need a vectorised exp in float32
 * (cpu_math.c's GELU, cpu_loss.c's SoftmaxCrossEntropy): Cody-Waite
 * reduction a = k ln2 + r, |r| <= ln2 / 2, Cephes' expf polynomial, 2^k by
 * the exponent bits, ~1 ulp for a in [-87, 0] (cpu_attention.c's exp_row is
 * the same arithmetic written as plain loops). The caller clamps a into
 * [-87, 0] and masks what it clamped; the bits depend on the clone only
 * through FMA contraction where the including function allows it.
 */
#ifndef GCC_RUNTIME_CPU_VEXP_H
#define GCC_RUNTIME_CPU_VEXP_H

#include <stdint.h>

#define GCC_VEXP_LANES 16

typedef float gcc_vexp_f __attribute__((vector_size(4 * GCC_VEXP_LANES)));
typedef int32_t gcc_vexp_i __attribute__((vector_size(4 * GCC_VEXP_LANES)));

/* m ? a : b per lane, m a comparison's mask (all ones or all zeros), for
 * vectors of float type VF and int32 type VI */
#define GCC_VEXP_SEL_T(VF, VI, m, a, b) ((VF)(((m) & (VI)(a)) | (~(m) & (VI)(b))))

/* out = e^a for every lane of a (type VF, int32 type VI) in [-87, 0], ~1 ulp */
#define GCC_VEXP_LE0_T(VF, VI, out, a)                                                             \
  do {                                                                                             \
    const VI k_ = __builtin_convertvector((a)*1.44269504088896341f - 0.5f, VI);                    \
    const VF kf_ = __builtin_convertvector(k_, VF);                                                \
    VF r_ = (a)-kf_ * 0.693359375f;                                                                \
    r_ = r_ - kf_ * -2.12194440e-4f;                                                               \
    VF p_ = r_ * 1.9875691500e-4f + 1.3981999507e-3f;                                              \
    p_ = p_ * r_ + 8.3334519073e-3f;                                                               \
    p_ = p_ * r_ + 4.1665795894e-2f;                                                               \
    p_ = p_ * r_ + 1.6666665459e-1f;                                                               \
    p_ = p_ * r_ + 5.0000001201e-1f;                                                               \
    (out) = (p_ * r_ * r_ + r_ + 1.0f) * (VF)((k_ + 127) * (1 << 23));                             \
  } while (0)

#define GCC_VEXP_SEL(m, a, b) GCC_VEXP_SEL_T(gcc_vexp_f, gcc_vexp_i, m, a, b)
#define GCC_VEXP_LE0(out, a)  GCC_VEXP_LE0_T(gcc_vexp_f, gcc_vexp_i, out, a)

/* 8 lanes (one ymm register): the forms a CPU with AVX2 but not AVX-512
 * runs (cpu_parallel.h, gcc_cpu_narrow_vectors) */
typedef float gcc_vexp_f8 __attribute__((vector_size(32)));
typedef int32_t gcc_vexp_i8 __attribute__((vector_size(32)));

#endif
