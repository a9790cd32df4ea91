/*
 * all_reduce.c - the all-reduce pass of data-parallel training (passes.h):
 * after autodiff, the gradients that an optimizer update reads are grouped
 * into buckets in the order the backward pass produces them, as PyTorch's
 * DistributedDataParallel buckets them (bucket_cap_mb, 25 MB by default),
 * and one AllReduce node per bucket is placed right after the node that
 * produces the bucket's last gradient: its reduction can start while the
 * rest of the backward pass runs, and the updates of its parameters wait
 * for it alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "passes/passes.h"

/* 1 when the training loss averages over the batch (its op's "reduction"
 * attribute is "mean", or it has none): the ranks' gradients are then
 * weighted by their share of the global batch before the sum. */
static int loss_is_mean(const gcc_graph *g) {
  int lv = g->training.loss ? gcc_graph_find(g, g->training.loss) : -1;
  int node = lv >= 0 ? g->values[lv].producer : -1;
  if (node < 0)
    return 1;
  const gcc_node *n = &g->nodes[node];
  const gcc_op_desc *op = gcc_op(n->op);
  if (!(op->flags & GCC_OPF_LOSS))
    return 1;
  for (int k = 0; k < op->n_attrs && k < n->n_av; k++)
    if (strcmp(op->attrs[k].name, "reduction") == 0 && n->av[k].s)
      return strcmp(n->av[k].s, "sum") != 0;
  return 1;
}

gcc_status gcc_pass_all_reduce(gcc_graph *g, const gcc_options *opt, gcc_diag *d) {
  if (opt->mode != GCC_MODE_TRAIN || opt->world_size <= 1)
    return GCC_OK;
  GCC_TRY(gcc_graph_link(g, d));
  int nv = g->n_values;
  /* the gradients an update reads, by their producer's position */
  int *grads = malloc((size_t)(nv ? nv : 1) * sizeof *grads);
  int *bucket_of = malloc((size_t)(nv ? nv : 1) * sizeof *bucket_of);
  if (!grads || !bucket_of) {
    free(grads);
    free(bucket_of);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (all-reduce pass)");
  }
  int n_grads = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_outputs; k++) {
      int v = n->outputs[k];
      if (g->values[v].kind != GCC_VALUE_GRAD)
        continue;
      int read = 0;
      for (int c = 0; c < g->values[v].n_consumers; c++)
        read |= (gcc_op(g->nodes[g->values[v].consumers[c]].op)->flags & GCC_OPF_OPTIMIZER) != 0;
      if (read)
        grads[n_grads++] = v;
    }
  }
  int64_t cap = opt->bucket_bytes > 0 ? opt->bucket_bytes : GCC_DEFAULT_BUCKET_BYTES;
  int mean = loss_is_mean(g), n_nodes0 = g->n_nodes;
  gcc_status s = GCC_OK;
  int first = 0, bucket = 0;
  for (int i = 0; i < n_grads && s == GCC_OK; i++) {
    int64_t bytes = 0;
    int last = first;
    /* a bucket closes once it holds `cap` bytes (DDP's bucket_cap_mb) */
    while (last < n_grads && (last == first || bytes < cap)) {
      bytes += gcc_shape_numel(&g->values[grads[last]].shape, NULL) * (int64_t)sizeof(float);
      last++;
    }
    char name[64];
    snprintf(name, sizeof name, "all_reduce/bucket%d", bucket);
    int node;
    s = gcc_graph_add_node(g, name, GCC_OP_ALL_REDUCE, grads + first, last - first, NULL, 0, &node,
                           d);
    if (s == GCC_OK) {
      g->nodes[node].phase = GCC_PHASE_BACKWARD;
      s = gcc_node_set_int(g, node, "bucket", bucket);
    }
    if (s == GCC_OK)
      s = gcc_node_set_int(g, node, "mean", mean);
    if (s == GCC_OK)
      s = gcc_op_resolve_attrs(g, node, d);
    for (int k = first; k < last; k++)
      bucket_of[grads[k]] = bucket;
    bucket++;
    i = last - 1;
    first = last;
  }
  free(grads);
  free(bucket_of);
  if (s != GCC_OK)
    return s;
  /* each AllReduce right after the producer of its bucket's last gradient */
  int n = g->n_nodes;
  gcc_node *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  if (!order)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (all-reduce pass)");
  int m = 0;
  for (int i = 0; i < n_nodes0; i++) {
    order[m++] = g->nodes[i];
    for (int b = n_nodes0; b < n; b++) {
      const gcc_node *ar = &g->nodes[b];
      int latest = -1;
      for (int k = 0; k < ar->n_inputs; k++)
        if (g->values[ar->inputs[k]].producer > latest)
          latest = g->values[ar->inputs[k]].producer;
      if (latest == i)
        order[m++] = *ar;
    }
  }
  memcpy(g->nodes, order, (size_t)n * sizeof *order);
  free(order);
  return gcc_graph_link(g, d);
}
