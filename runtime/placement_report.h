/*
 * placement_report.h - what --dump-placement prints: where every node runs
 * and why, every host-device copy with its bytes, and per device the node
 * count, FLOPs per step, persistent and per-step arena bytes.
 *
 * One data model, three renderings: the report is built once as a JSON
 * document (jansson) and the text and Graphviz DOT forms are rendered from
 * that document, so they always agree.
 *
 * JSON schema "gcc-train.placement/1" (stable field names):
 *   schema, model, mode ("train"|"eval"), batch_size,
 *   devices[]: { id ("cpu"|"cuda:N"), name, compute_capability ("9.0"|null),
 *                memory_bytes, units (cores or SMs), assumed (bool),
 *                nodes, launches_per_step, flops_per_step,
 *                persistent_bytes (parameters + gradients + optimizer state),
 *                step_arena_bytes (peak of the per-step arena) },
 *   nodes[]:   { name, op, device, reason, phase ("forward"|"backward"|
 *                "optimizer"), flops, outputs[]: { name, dtype, shape[] } },
 *   copies[]:  { value, node (the Copy node, or null for a session-start
 *                upload), from, to, kind ("H2D"|"D2H"|"D2D"|"H2H"), bytes,
 *                when ("per_step"|"once") },
 *   totals:    { copies_per_step, bytes_per_step, copies_once, bytes_once,
 *                launches_per_step }
 */
#ifndef GCC_RUNTIME_PLACEMENT_REPORT_H
#define GCC_RUNTIME_PLACEMENT_REPORT_H

#include <stdio.h>

#include "passes/memplan.h"
#include "passes/passes.h"
#include "runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gcc_dump_format {
  GCC_DUMP_TEXT = 0,
  GCC_DUMP_JSON,
  GCC_DUMP_DOT,
} gcc_dump_format;

/* "text", "json", "dot" -> format; GCC_ERR_INVALID_ARGUMENT otherwise. */
gcc_status gcc_dump_format_parse(const char *s, gcc_dump_format *out, gcc_diag *d);

/* Writes the report of compiled graph `g` (after all passes) with memory
 * plan `mem`. `devices` describes every device id the graph uses
 * (devices[i].id); `mode` and `batch` are echoed. The whole report is
 * rendered in memory first, so `f` receives all of it or nothing.
 * Errors: GCC_ERR_OUT_OF_MEMORY; GCC_ERR_IO when writing fails. */
gcc_status gcc_placement_report_write(const gcc_graph *g, const gcc_mem_plan *mem,
                                      const gcc_device_info *devices, int n_devices, gcc_mode mode,
                                      int64_t batch, gcc_dump_format fmt, FILE *f, gcc_diag *d);

/* The same report as a malloc'ed NUL-terminated string (for files written
 * atomically, and for tests). */
gcc_status gcc_placement_report_string(const gcc_graph *g, const gcc_mem_plan *mem,
                                       const gcc_device_info *devices, int n_devices, gcc_mode mode,
                                       int64_t batch, gcc_dump_format fmt, char **out, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_PLACEMENT_REPORT_H */
