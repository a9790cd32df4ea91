/*
 * fusion.h - the fusion pass: the first step of the CUDA lowering
 * (codegen/fusion.c), run by the pass manager as a lowering pass of the
 * target (passes/passes.h gcc_target.lower).
 */
#ifndef GCC_CODEGEN_FUSION_H
#define GCC_CODEGEN_FUSION_H

#include "passes/passes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Groups the nodes placed on CUDA devices into launches (gcc_graph.groups;
 * node->group; kinds and epilogues of codegen/lowering.h): one optimizer
 * kernel per device, one loss kernel, GEMMs with cuBLASLt epilogues (bias,
 * ReLU, ReLU-backward mask, bias gradient), a float32 Conv with the Relu
 * that alone reads it (one cuDNN call), and maximal pointwise chains
 * ending in at most one reduction. CPU-placed nodes are left ungrouped. A
 * no-op for graphs with no CUDA node. */
gcc_status gcc_pass_fusion(gcc_graph *g, const gcc_options *opt, gcc_diag *d);

/* The Relu fused into Conv node `node` (a CUDNN group of the Conv and the
 * Relu that alone reads its float32 output: the group's call writes the
 * Relu's output, max(conv(X, W) + B, 0), as ONNX Conv then Relu, and never
 * the Conv's), or -1 when the node is no such Conv. */
int gcc_fusion_conv_relu(const gcc_graph *g, int node);

#ifdef __cplusplus
}
#endif

#endif /* GCC_CODEGEN_FUSION_H */
