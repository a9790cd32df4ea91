/*
 * memplan.h - memory planning of the per-step arena.
 *
 * Every per-step value (activations, backward temporaries)
 * gets an offset in one arena, allocated once per plan: a step allocates
 * nothing. Offsets come from liveness intervals over the node schedule (a
 * node of a fused group at the point where its group runs, gcc_group_point)
 * and
 * a greedy-by-size best-fit assignment (as TensorFlow Lite's arena planner
 * and ggml's graph allocator do): values whose lifetimes do not overlap
 * share bytes. Views (ops flagged GCC_OPF_ALIAS: Reshape, Flatten) share
 * the storage of their input and extend its lifetime.
 *
 * A node whose op declares a workspace (im2col for Conv) gets scratch bytes
 * in the same arena, live during its own step only.
 *
 * Parameters, gradients and optimizer state are not planned here: they live
 * in the session's persistent arena. Constants point at their data.
 */
#ifndef GCC_PASSES_MEMPLAN_H
#define GCC_PASSES_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCC_ARENA_ALIGN 64 /* bytes; a cache line, and enough for float4/AVX-512 */

typedef struct gcc_mem_plan {
  int n_values;
  /* per value: byte offset in the step arena of its device (value->device,
   * the CPU when unplaced), -1 if not in an arena */
  int64_t *offset;
  int *root;            /* per value: the value whose storage it uses (itself if none) */
  int *first, *last;    /* per root: first and last schedule index of its lifetime */
  size_t arena_bytes;   /* peak of the CPU's step arena: the size to allocate */
  size_t total_bytes;   /* sum of all planned values without reuse (for reports) */
  int n_devices;        /* entries of device_bytes: max device id + 1 */
  size_t *device_bytes; /* per device id: peak of its step arena */
  /* per node: scratch the node's CPU kernel needs (the `workspace` answer),
   * planned in its device's step arena for that node's step only; offset -1
   * and 0 bytes when it needs none (or runs on a device whose library
   * manages its own workspace, as cuDNN's algorithms do) */
  int n_nodes;
  int64_t *ws_offset;
  size_t *ws_bytes;
} gcc_mem_plan;

/* Bytes of scratch memory node `node` needs where it runs (0: none): the
 * backend's answer (runtime/cpu: the CPU kernel's workspace). */
typedef size_t (*gcc_node_workspace_fn)(const gcc_graph *g, int node);

/* Plans `g` (nodes in execution order), one arena per device: only values
 * on the same device share bytes. `keep_live` values (the loss, the
 * prediction) stay live to the end of the step so they can be read after
 * it. `workspace` (NULL: none) sizes the scratch of CPU-placed nodes.
 * Errors: GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_plan_memory(const gcc_graph *g, const int *keep_live, int n_keep,
                           gcc_node_workspace_fn workspace, gcc_mem_plan *out, gcc_diag *d);
void gcc_mem_plan_free(gcc_mem_plan *p);

/* A block for gcc_plan_intervals: `bytes` live from schedule index `first`
 * to `last` inclusive (closed: a node's inputs and outputs are live
 * together). */
typedef struct gcc_mem_interval {
  size_t bytes;
  int first, last;
} gcc_mem_interval;

/* Places `n` blocks in one arena: offset[i] for block i, such that blocks
 * whose intervals overlap never share a byte, and *peak = the arena's size
 * (max offset + bytes). A sweep over the schedule in order of `first` (the
 * larger block first on a tie, then the lower index) frees the blocks that
 * ended before it and puts each block in the smallest free gap that holds it
 * (the lowest of those), else at the top of the arena, extending a free gap
 * that ends there (the linear-scan best fit of TensorFlow Lite's and XLA's
 * heap simulators); free gaps merge with their neighbours. O(n log n) time,
 * O(n) memory; deterministic. Offsets are multiples of GCC_ARENA_ALIGN when
 * every `bytes` is. A block with first > last is planned as [last, last];
 * one of 0 bytes gets offset 0 and takes no space.
 * Errors: GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_plan_intervals(const gcc_mem_interval *iv, int n, int64_t *offset, size_t *peak,
                              gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_PASSES_MEMPLAN_H */
