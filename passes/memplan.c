/*
 * memplan.c - per-device step-arena planning (memplan.h): lifetimes over
 * the schedule, views sharing their root's storage, node workspaces, and a
 * greedy-by-size best-fit placement of the intervals.
 */
#include "passes/memplan.h"

#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"

static size_t align_up(size_t x) {
  return (x + GCC_ARENA_ALIGN - 1) / GCC_ARENA_ALIGN * GCC_ARENA_ALIGN;
}

static int planned_kind(gcc_value_kind k) {
  return k == GCC_VALUE_ACTIVATION; /* inputs are bound to the loader's buffers */
}

static int dev_of(const gcc_graph *g, int v) {
  return g->values[v].device >= 0 ? g->values[v].device : GCC_DEV_CPU;
}

/* A block to place: value v (v < n_values) or the workspace of node
 * v - n_values, with its lifetime and device. */
typedef struct item {
  int v;
  size_t bytes;
  int first, last, dev;
} item;

static int by_size_desc(const void *a, const void *b) {
  const item *x = a, *y = b;
  if (x->bytes != y->bytes)
    return x->bytes < y->bytes ? 1 : -1;
  return x->v - y->v; /* deterministic */
}

typedef struct placed {
  int64_t off;
  size_t bytes;
} placed;

static int by_offset(const void *a, const void *b) {
  const placed *x = a, *y = b;
  return (x->off > y->off) - (x->off < y->off);
}

void gcc_mem_plan_free(gcc_mem_plan *p) {
  free(p->offset);
  free(p->root);
  free(p->first);
  free(p->last);
  free(p->device_bytes);
  free(p->ws_offset);
  free(p->ws_bytes);
  memset(p, 0, sizeof *p);
}

gcc_status gcc_plan_memory(const gcc_graph *g, const int *keep_live, int n_keep,
                           gcc_node_workspace_fn workspace, gcc_mem_plan *out, gcc_diag *d) {
  int nv = g->n_values, nn = g->n_nodes;
  memset(out, 0, sizeof *out);
  out->n_values = nv;
  size_t cnt = (size_t)(nv ? nv : 1);
  out->offset = malloc(cnt * sizeof *out->offset);
  out->root = malloc(cnt * sizeof *out->root);
  out->first = malloc(cnt * sizeof *out->first);
  out->last = malloc(cnt * sizeof *out->last);
  char *used = calloc(cnt, 1);
  size_t icnt = cnt + (size_t)nn;
  item *items = malloc(icnt * sizeof *items);
  placed *busy = malloc(icnt * sizeof *busy);
  out->n_nodes = nn;
  out->ws_offset = malloc((size_t)(nn ? nn : 1) * sizeof *out->ws_offset);
  out->ws_bytes = calloc((size_t)(nn ? nn : 1), sizeof *out->ws_bytes);
  out->n_devices = 1;
  for (int v = 0; v < nv; v++)
    if (dev_of(g, v) + 1 > out->n_devices)
      out->n_devices = dev_of(g, v) + 1;
  out->device_bytes = calloc((size_t)out->n_devices, sizeof *out->device_bytes);
  if (!out->device_bytes || !out->offset || !out->root || !out->first || !out->last || !used ||
      !items || !busy || !out->ws_offset || !out->ws_bytes) {
    free(used);
    free(items);
    free(busy);
    gcc_mem_plan_free(out);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (memory planning)");
  }
  for (int v = 0; v < nv; v++) {
    out->offset[v] = -1;
    out->root[v] = v;
    out->first[v] = INT32_MAX;
    out->last[v] = -1;
  }
  /* roots of views, and lifetimes (schedule indices; inputs start at -1).
   * A node of a fused group runs when its group runs (codegen/fusion.c): a
   * GEMM group at its first node, any other group at its last, so every
   * input and output of the group lives at that point. */
  for (int j = 0; j < nn; j++) {
    const gcc_node *n = &g->nodes[j];
    int i = j;
    if (n->group >= 0 && n->group < g->n_groups)
      i = gcc_group_point(&g->groups[n->group]);
    if ((gcc_op(n->op)->flags & GCC_OPF_ALIAS) && n->inputs[0] >= 0)
      out->root[n->outputs[0]] = out->root[n->inputs[0]];
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0)
        continue;
      int r = out->root[v];
      used[r] = 1;
      if (g->values[r].kind == GCC_VALUE_INPUT && out->first[r] > -1)
        out->first[r] = -1;
      if (out->last[r] < i)
        out->last[r] = i;
    }
    for (int k = 0; k < n->n_outputs; k++) {
      int r = out->root[n->outputs[k]];
      used[r] = 1;
      if (out->first[r] > i)
        out->first[r] = i;
      if (out->last[r] < i)
        out->last[r] = i;
    }
  }
  for (int k = 0; k < n_keep; k++)
    if (keep_live[k] >= 0) {
      int r = out->root[keep_live[k]];
      used[r] = 1;
      if (out->first[r] == INT32_MAX)
        out->first[r] = -1;
      out->last[r] = nn;
    }
  for (int i = 0; i < g->n_inputs; i++) {
    int r = g->inputs[i];
    if (used[r] && out->first[r] > -1)
      out->first[r] = -1;
  }

  int n_items = 0;
  for (int v = 0; v < nv; v++) {
    if (out->root[v] != v || !used[v] || !planned_kind(g->values[v].kind))
      continue;
    int64_t numel = gcc_shape_numel(&g->values[v].shape, NULL);
    size_t bytes = align_up((size_t)(numel > 0 ? numel : 1) * gcc_dtype_size(g->values[v].dtype));
    items[n_items] = (item){v, bytes, out->first[v], out->last[v], dev_of(g, v)};
    n_items++;
    out->total_bytes += bytes;
  }
  for (int i = 0; i < nn; i++) {
    const gcc_node *n = &g->nodes[i];
    int dev = n->device >= 0 ? n->device : GCC_DEV_CPU;
    out->ws_offset[i] = -1;
    if (!workspace || dev != GCC_DEV_CPU)
      continue;
    size_t bytes = workspace(g, i);
    if (!bytes)
      continue;
    bytes = align_up(bytes);
    out->ws_bytes[i] = bytes;
    items[n_items] = (item){nv + i, bytes, i, i, dev};
    n_items++;
    out->total_bytes += bytes;
  }
  qsort(items, (size_t)n_items, sizeof *items, by_size_desc);

  /* greedy by size: best fitting gap among already placed values whose
   * lifetimes overlap */
  for (int it = 0; it < n_items; it++) {
    const item *cur = &items[it];
    size_t bytes = cur->bytes;
    int nb = 0;
    for (int j = 0; j < it; j++) {
      const item *o = &items[j];
      if (o->dev != cur->dev)
        continue;
      if (o->first <= cur->last && cur->first <= o->last) {
        busy[nb].off = o->v < nv ? out->offset[o->v] : out->ws_offset[o->v - nv];
        busy[nb].bytes = o->bytes;
        nb++;
      }
    }
    qsort(busy, (size_t)nb, sizeof *busy, by_offset);
    int64_t best = -1, cursor = 0;
    size_t best_gap = SIZE_MAX;
    for (int j = 0; j < nb; j++) {
      if (busy[j].off > cursor) {
        size_t gap = (size_t)(busy[j].off - cursor);
        if (gap >= bytes && gap < best_gap) {
          best = cursor;
          best_gap = gap;
        }
      }
      int64_t end = busy[j].off + (int64_t)busy[j].bytes;
      if (end > cursor)
        cursor = end;
    }
    if (best < 0)
      best = cursor;
    if (cur->v < nv)
      out->offset[cur->v] = best;
    else
      out->ws_offset[cur->v - nv] = best;
    size_t *peak = &out->device_bytes[cur->dev];
    if ((size_t)best + bytes > *peak)
      *peak = (size_t)best + bytes;
  }
  out->arena_bytes = out->device_bytes[GCC_DEV_CPU];
  /* views get their root's offset */
  for (int v = 0; v < nv; v++)
    if (out->root[v] != v)
      out->offset[v] = out->offset[out->root[v]];
  free(used);
  free(items);
  free(busy);
  return GCC_OK;
}
