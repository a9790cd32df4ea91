/* plan_info.c - the plan runner's queries (runtime/plan.h: bytes, launches,
 * fallbacks, CUDA Graph replays) and the input staging of inference
 * pipelines (gcc_plan_input_staging, gcc_plan_issue_inputs). */
#include <stdio.h>
#include <string.h>

#include "codegen/gemm_map.h"
#include "graph/ops.h"
#include "runtime/plan_internal.h"

gcc_status gcc_plan_input_staging(gcc_plan *p, const char *name, void **buf, gcc_diag *d) {
  int slot = (int)(p->uses[0] + p->uses[1]) % 2;
  *buf = NULL;
  for (int k = 0; k < p->n_inputs && p->has_be && !p->failed; k++)
    if (strcmp(p->g->values[p->inputs[k].src].name, name) == 0) {
      if (p->uses[slot] > 0) /* the step that read the slot, then an H2D issued from it */
        GCC_TRY(p->be.event_sync(p->be.self, GCC_EVENT_STEP_DONE + slot, d));
      if (p->staged == slot + 1)
        GCC_TRY(p->be.event_sync(p->be.self, GCC_EVENT_INPUT_READY + slot, d));
      *buf = p->inputs[k].staging[slot];
      return GCC_OK;
    }
  return gcc_diag_set(d, p->failed ? GCC_ERR_DEVICE : GCC_ERR_INVALID_ARGUMENT, "%s: %s '%s'%s",
                      p->g->source,
                      p->failed ? "this device plan failed earlier; no staging for input"
                                : "no graph input copied to a device is named",
                      name, p->failed ? p->fail_msg : "");
}

gcc_status gcc_plan_issue_inputs(gcc_plan *p, gcc_diag *d) {
  if (!p->has_be || p->failed)
    return p->failed ? gcc_diag_set(d, GCC_ERR_DEVICE, "%s: this device plan failed earlier (%s)",
                                    p->g->source, p->fail_msg)
                     : GCC_OK;
  int slot = (int)(p->uses[0] + p->uses[1]) % 2, intact = 0;
  gcc_status st = gcc_plan_stage_inputs_(p, slot, &p->staged_copies, &p->staged_h2d, &intact, d);
  p->staged = st == GCC_OK ? slot + 1 : 0;
  if (st != GCC_OK && !intact) {
    p->failed = 1;
    snprintf(p->fail_msg, sizeof p->fail_msg, "%s", d ? d->msg : "no message");
  }
  return st;
}

const gcc_tensor *gcc_plan_tensor(const gcc_plan *p, const char *name) {
  int v = gcc_graph_find(p->g, name);
  return v >= 0 ? &p->tensors[v] : NULL;
}

const gcc_graph *gcc_plan_graph(const gcc_plan *p) {
  return p->g;
}
void *gcc_plan_host_arena(const gcc_plan *p, size_t *bytes, int *owned) {
  *bytes = p->host_arena ? p->mem.arena_bytes : 0;
  if (owned)
    *owned = p->host_arena_owned;
  return p->host_arena;
}
void *gcc_plan_take_host_arena(gcc_plan *p, size_t *bytes) {
  if (!p->host_arena_owned) {
    *bytes = 0;
    return NULL;
  }
  *bytes = p->mem.arena_bytes;
  p->host_arena_owned = 0;
  return p->host_arena;
}
void *gcc_plan_device_arena(const gcc_plan *p, size_t *bytes, int *owned) {
  *bytes = p->dev_arena ? p->dev_arena_bytes : 0;
  if (owned)
    *owned = p->dev_arena_owned;
  return p->dev_arena;
}
void *gcc_plan_take_device_arena(gcc_plan *p, size_t *bytes) {
  if (!p->dev_arena_owned) {
    *bytes = 0;
    return NULL;
  }
  *bytes = p->dev_arena_bytes;
  p->dev_arena_owned = 0;
  return p->dev_arena;
}
size_t gcc_plan_arena_bytes(const gcc_plan *p) {
  return p->mem.arena_bytes;
}
size_t gcc_plan_unshared_bytes(const gcc_plan *p) {
  return p->mem.total_bytes;
}
size_t gcc_plan_step_bytes(const gcc_plan *p) {
  return p->has_be ? gcc_plan_device_bytes(p) : p->mem.arena_bytes;
}
int gcc_plan_num_steps(const gcc_plan *p) {
  return p->n_ops;
}
int gcc_plan_launches(const gcc_plan *p) {
  return p->launches;
}
int gcc_plan_copies(const gcc_plan *p) {
  return p->copies;
}
size_t gcc_plan_device_bytes(const gcc_plan *p) {
  return p->dev_bytes + (p->dev_arena ? p->dev_arena_bytes : 0);
}
size_t gcc_plan_workspace_bytes(const gcc_plan *p) {
  return p->ws_bytes;
}
int gcc_plan_epilogue_fallbacks(const gcc_plan *p) {
  return p->n_fallbacks;
}
int gcc_plan_epilogue_fallback(const gcc_plan *p, int i, const char **group, const char **epilogue,
                               const char **why) {
  if (i < 0 || i >= p->n_fallbacks)
    return -1;
  if (group)
    *group = p->g->groups[p->fb_group[i]].name;
  if (epilogue)
    *epilogue = gcc_epilogue_name(p->fb_epilogue[i]);
  if (why)
    *why = p->fb_why[i];
  return 0;
}
void gcc_plan_fallback_text(const gcc_plan *p, char *buf, size_t cap) {
  if (cap == 0)
    return;
  buf[0] = '\0';
  size_t len = 0;
  for (int i = 0; i < p->n_fallbacks && len + 1 < cap; i++) {
    int n = snprintf(buf + len, cap - len,
                     "  GEMM group '%s': %s not offered (%s); plain GEMM + generated kernel %s\n",
                     p->g->groups[p->fb_group[i]].name, gcc_epilogue_name(p->fb_epilogue[i]),
                     p->fb_why[i], p->epi_ks.kernels ? p->epi_ks.kernels[i].name : "?");
    if (n < 0)
      break;
    len += (size_t)n < cap - len ? (size_t)n : cap - len - 1;
  }
}
void gcc_plan_cpu_library_text(const gcc_plan *p, char *buf, size_t cap) {
  if (cap == 0)
    return;
  buf[0] = '\0';
  size_t len = 0;
  for (int i = 0; i < p->n_ops && len + 1 < cap && p->cpu->node_impl; i++) {
    const op *o = &p->ops[i];
    const char *impl = o->kind == OP_NODE ? p->cpu->node_impl(p->cpu->self, &o->cpu) : NULL;
    if (!impl)
      continue;
    int n = snprintf(buf + len, cap - len, "  %s (%s): %s\n", o->cpu.node->name,
                     gcc_op_name(o->cpu.node->op), impl);
    if (n < 0)
      break;
    len += (size_t)n < cap - len ? (size_t)n : cap - len - 1;
  }
}
int64_t gcc_plan_graph_replays(const gcc_plan *p) {
  return p->replays;
}
int64_t gcc_plan_graph_captures(const gcc_plan *p) {
  return p->captures;
}
const char *gcc_plan_graph_note(const gcc_plan *p) {
  return p->graph_note;
}

int gcc_plan_update_param(const gcc_plan *p, int node) {
  const gcc_node *n = &p->g->nodes[node];
  if (!(gcc_op(n->op)->flags & GCC_OPF_OPTIMIZER) || n->n_inputs < 1 || n->inputs[0] < 0)
    return -1;
  return p->g->values[n->inputs[0]].kind == GCC_VALUE_PARAM ? n->inputs[0] : -1;
}

int gcc_plan_take_update_checks(gcc_plan *p, int64_t *nonfinite) {
  int64_t per_step = 0;
  for (int i = 0; i < p->g->n_nodes; i++)
    per_step += gcc_plan_update_param(p, i) >= 0;
  int64_t steps = p->serial - p->checks_serial;
  int known = !p->has_be && p->ctx.updates_checked == per_step * steps;
  *nonfinite = known ? p->ctx.updates_nonfinite : 0;
  p->ctx.updates_checked = p->ctx.updates_nonfinite = 0;
  p->checks_serial = p->serial;
  return known;
}
