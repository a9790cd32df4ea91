/*
 * autodiff.h - the context that gradient builders (grad_rules.c) use to add
 * backward nodes. Builders refer to nodes and values by index only: adding
 * a node may move the graph's arrays.
 */
#ifndef GCC_PASSES_AUTODIFF_H
#define GCC_PASSES_AUTODIFF_H

#include "graph/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_grad_ctx gcc_grad_ctx;

/* The graph being differentiated. */
gcc_graph *gcc_grad_graph(gcc_grad_ctx *c);

/* 1 if a gradient is needed for `value` (it depends on a parameter and the
 * loss depends on it). */
int gcc_grad_wanted(gcc_grad_ctx *c, int value);

/* Adds a backward node of op `op` with the given inputs and one new output
 * value named after `hint`; its index is returned in *node and the output's
 * in *out. Set attributes with gcc_node_set_*, then call gcc_grad_finish. */
gcc_status gcc_grad_add_node(gcc_grad_ctx *c, int op, const char *hint, const int *in, int n_in,
                             int *node, int *out, gcc_diag *d);

/* As gcc_grad_add_node with n_out (1 to 8) outputs, named "<hint>/<outs[k]>",
 * returned in out[0 .. n_out - 1] (AttentionGrad's dQ, dK, dV). */
gcc_status gcc_grad_add_node_n(gcc_grad_ctx *c, int op, const char *hint, const char *const *outs,
                               int n_out, const int *in, int n_in, int *node, int *out,
                               gcc_diag *d);
/* Resolves the node's attributes and infers its output shape. */
gcc_status gcc_grad_finish(gcc_grad_ctx *c, int node, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_PASSES_AUTODIFF_H */
