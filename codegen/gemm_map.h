/*
 * gemm_map.h - maps a fused GEMM group of a compiled graph (row-major, as
 * the IR and the CPU backend store tensors) onto one column-major cuBLASLt
 * matmul with its epilogue. One pure function, no CUDA call: the CUDA
 * backend feeds its result to cublasLtMatmul, and the tests execute it with
 * OpenBLAS in column-major mode (cblas_sgemm(CblasColMajor, ...) has
 * cuBLAS's semantics) against the row-major CPU backend.
 *
 * The mapping. A row-major matrix X[r][c] (leading dimension c) is, read
 * column-major, the c x r matrix X^T with the same leading dimension. So
 * the row-major GEMM (ONNX Gemm / MatMul semantics)
 *     Y[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
 * is computed as the column-major GEMM
 *     Y^T (N x M, ldd = N) = alpha * op(B)^T * op(A)^T + beta * C^T
 * i.e. cuBLAS's A is our B (transa = transB), cuBLAS's B is our A
 * (transb = transA), m = N, n = M, k = K; leading dimensions are the
 * row lengths of the stored operands.
 *
 * Epilogues (cublasLtEpilogue_t, CUDA 11.3+) in column-major terms:
 *  - BIAS / RELU_BIAS / RELU_AUX_BIAS: the bias is a vector of length
 *    m = N (the row vector broadcast over the rows of Y: nn.Linear's bias);
 *  - RELU_AUX_BIAS also writes the ReLU bit-mask ("aux", m x n bits,
 *    leading dimension aux_ld bits, a multiple of 128, >= m) that the
 *    backward DRELU / DRELU_BGRAD GEMM of the same layer reads;
 *  - DRELU_BGRAD: D is masked by the forward ReLU's bit-mask and its row
 *    sums (length m = N, summed over the batch) are the bias gradient;
 *  - the fusion pass's BGRADA (row-major: the bias gradient is the column
 *    sums of operand A = dY of dW = dY^T X) becomes BGRADB here: after the
 *    swap, dY is cuBLAS's B, and BGRADB reduces op(B) over k, giving a
 *    vector of length n = the columns of D.
 */
#ifndef GCC_RUNTIME_GEMM_MAP_H
#define GCC_RUNTIME_GEMM_MAP_H

#include <stdint.h>

#include "codegen/lowering.h"
#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One column-major matmul: D (m x n, ldd) = epilogue(alpha * op(A) op(B) +
 * beta * C). Operands are named by graph value index; the runtime binds
 * them to device addresses. */
typedef struct gcc_colmajor_gemm {
  int group;            /* the GEMM group in graph->groups */
  int trans_a, trans_b; /* 1: CUBLAS_OP_T, 0: CUBLAS_OP_N */
  int64_t m, n, k;
  int a_value, b_value; /* cuBLAS's A and B (our B and A) */
  int64_t lda, ldb;     /* leading dimensions, elements */
  int c_value;          /* C read with beta (ldc = ldd), -1 when beta == 0 */
  int d_value;          /* the output D (ldd) */
  int64_t ldd;
  float alpha, beta;
  gcc_epilogue epilogue; /* in column-major terms (BGRADB where fusion formed BGRADA) */
  int bias_value;        /* BIAS variants: the bias input (m elements); BGRAD
                             variants: the bias-gradient output (m elements for
                             DRELU_BGRAD, n for BGRADB); of `dtype`; else -1 */
  int aux_group;         /* RELU_AUX_BIAS: this group; DRELU*: the forward
                             group whose ReLU bit-mask is read; else -1 */
  int64_t aux_ld;        /* bit-mask leading dimension in bits (multiple of
                             128, >= m); 0 when there is no mask */
  int64_t aux_bytes;     /* bytes of the bit-mask: aux_ld / 8 * n */
  /* The element type of A, B, C and D (and of a bias vector): FLOAT32, or
   * BFLOAT16 / FLOAT16 in a mixed-precision plan, always with float32
   * accumulation and float32 alpha and beta (CUBLAS_COMPUTE_32F). */
  gcc_dtype dtype;
  /* 1: float32 operands multiplied in TF32 (--precision tf32:
   * CUBLAS_COMPUTE_32F_FAST_TF32), 0: CUBLAS_COMPUTE_32F */
  int tf32;
} gcc_colmajor_gemm;

/* The alignment of device address `p` in bytes, as cuBLASLt's
 * CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES preferences take it: the
 * largest power of two <= 256 that divides it (256 for NULL). */
unsigned gcc_lt_alignment(const void *p);

/* Maps GEMM group `group` of the fused graph `g` (shapes inferred). Errors:
 *  - GCC_ERR_INVALID_ARGUMENT: `group` is no GEMM group;
 *  - GCC_ERR_UNSUPPORTED, naming the group and node: a C operand that is
 *    neither a full [M, N] matrix nor (with beta == 1, as a BIAS epilogue)
 *    a row vector; a DRELU group whose forward ReLU is not the RELU_AUX_BIAS
 *    epilogue of a GEMM group of the same shape (no bit-mask to read); a
 *    non-2-D operand, or operands that are not all of one float dtype
 *    (float32, float16, bfloat16); a bias or bias-gradient vector of another
 *    dtype than D (cuBLASLt documents other bias types for FP8 and IMMA
 *    kernels only: cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE). */
gcc_status gcc_gemm_map(const gcc_graph *g, int group, gcc_colmajor_gemm *out, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_GEMM_MAP_H */
