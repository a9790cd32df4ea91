/*
 * cpu_philox.h - Dropout's Philox-4x32-10 words (graph/philox.h) for the
 * CPU kernels (Dropout, DropoutGrad and the fused attention's dropout on
 * its probabilities), many blocks at a time.
 *
 * graph/philox.h's gcc_dropout_block draws one block of four words per
 * call in scalar code (1.6 ns an element on a Zen 5 core, and the kernels
 * that called it branched on every word): with nanoGPT's dropout 0.2 the
 * CPU goal row's char GPT took 58 ms a training step against 31 without
 * dropout, 33 with this file (bench/RESULTS.md).
 * Here the ten rounds run on 16 blocks at once in AVX-512 registers (8 in
 * AVX2 ones): a round's 32 x 32 -> 64-bit products are vpmuludq of the
 * even lanes and of the odd lanes shifted down, their halves put back in
 * place by blends. Integer arithmetic only: the words are exactly
 * gcc_dropout_block's (tests/philox_test), so a mask drawn here, by the
 * scalar code and by the generated CUDA kernel is the same.
 */
#ifndef GCC_RUNTIME_CPU_PHILOX_H
#define GCC_RUNTIME_CPU_PHILOX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = the Philox word of flat element w0 + i of a Dropout mask under
 * the node key `key` at optimizer step `step`, i = 0 .. n - 1: word
 * (w0 + i) % 4 of gcc_dropout_block(key, (w0 + i) / 4, step) (graph/philox.h).
 * w0 >= 0, n >= 0; out holds n words. Thread-safe. */
void gcc_cpu_dropout_words(uint64_t key, int64_t w0, int64_t n, int64_t step, unsigned int *out);

/* y[i] = x[i] * (kept ? scale : 0) for the elements w0 .. w0 + n - 1 of the
 * mask of (key, step): kept when the element's word is >= thr
 * (gcc_dropout_threshold: 0 keeps all, 2^32 none), scale
 * gcc_dropout_scale(p). x and y may be the same array. The bits of the
 * scalar form, x[i] * factor, for every path. */
void gcc_cpu_dropout_apply(const float *x, float *y, int64_t w0, int64_t n, uint64_t key,
                           int64_t step, uint64_t thr, float scale);

/* f[i] = (kept ? scale : 0) for the elements w0 .. w0 + n - 1 of the mask
 * of (key, step), as gcc_cpu_dropout_apply's factors (the fused
 * attention's dropout on a row of its probabilities). */
void gcc_cpu_dropout_factors(uint64_t key, int64_t w0, int64_t n, int64_t step, uint64_t thr,
                             float scale, float *f);

/* The code that draws the words: GCC_PHILOX_AVX512 (16 blocks a step,
 * where the CPU has AVX-512F), GCC_PHILOX_AVX2 (8 blocks, AVX2) or
 * GCC_PHILOX_SCALAR (gcc_dropout_block), the widest the CPU runs unless a
 * test chose one (builds for other than x86-64: scalar). */
enum { GCC_PHILOX_SCALAR = 0, GCC_PHILOX_AVX2 = 1, GCC_PHILOX_AVX512 = 2 };
int gcc_cpu_philox_path(void);
/* For tests: run `path` if the CPU can (else the widest it can below it);
 * -1 restores the machine's choice. Not to be called while a kernel runs.
 * Returns gcc_cpu_philox_path(). */
int gcc_cpu_set_philox_path(int path);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_PHILOX_H */
