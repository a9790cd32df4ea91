/*
 * cpu_attention.h - the CPU kernels of the fused scaled dot-product
 * attention (graph/ops.h Attention, AttentionGrad): a blocked
 * FlashAttention-2 on OpenMP threads (runtime/cpu/cpu_attention.c).
 */
#ifndef GCC_RUNTIME_CPU_ATTENTION_H
#define GCC_RUNTIME_CPU_ATTENTION_H

#include <stddef.h>

#include "graph/ir.h"
#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most OpenMP threads one attention kernel uses (its workspace holds one
 * tile set per thread); the plan's max_threads caps it further. */
#define GCC_ATTN_MAX_THREADS 16

/* Attention (Q, K, V [, mask]) -> O, L as graph/ops.h documents it: inputs
 * and outputs float32 row-major, workspace of
 * gcc_cpu_attention_workspace bytes. Never fails (GCC_OK). */
gcc_status gcc_cpu_attention(const gcc_kernel_args *a);
/* AttentionGrad (Q, K, V, O, L, dO [, mask]) -> dQ, dK, dV; workspace of
 * gcc_cpu_attention_grad_workspace bytes. Never fails (GCC_OK). */
gcc_status gcc_cpu_attention_grad(const gcc_kernel_args *a);
/* Scratch bytes of node `node` (shapes inferred): GCC_ATTN_MAX_THREADS tile
 * sets. */
size_t gcc_cpu_attention_workspace(const gcc_graph *g, int node);
size_t gcc_cpu_attention_grad_workspace(const gcc_graph *g, int node);
/* AttentionPacked (QKV) -> O, L and AttentionPackedGrad (QKV, O, L, dO) ->
 * dQKV (graph/ops.h): the same kernels and bits as Attention /
 * AttentionGrad on the Q, K, V that the thirds of QKV's last axis split
 * into heads are, read in place (row stride 3 H D), O and dQKV written in
 * place. Never fail (GCC_OK). The workspace serves both ops. */
gcc_status gcc_cpu_attention_packed(const gcc_kernel_args *a);
gcc_status gcc_cpu_attention_packed_grad(const gcc_kernel_args *a);
size_t gcc_cpu_attention_packed_workspace(const gcc_graph *g, int node);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_ATTENTION_H */
