/*
 * cpu_backend.c - the CPU's gcc_device_backend (cpu_backend.h).
 */
#include "runtime/cpu/cpu_backend.h"

#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "graph/ops.h"
#include "passes/memplan.h"
#include "runtime/cpu/cpu_dnnl.h"
#include "runtime/cpu/cpu_kernels.h"

static gcc_status cpu_alloc(void *self, size_t bytes, void **out, gcc_diag *d) {
  (void)self;
  size_t n = (bytes + GCC_ARENA_ALIGN - 1) / GCC_ARENA_ALIGN * GCC_ARENA_ALIGN;
  *out = aligned_alloc(GCC_ARENA_ALIGN, n ? n : GCC_ARENA_ALIGN);
  if (!*out)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory: %zu bytes of host memory", bytes);
  return GCC_OK;
}

static void cpu_release(void *self, void *p) {
  (void)self;
  free(p);
}

static gcc_status cpu_mem_info(void *self, size_t *fr, size_t *tot, gcc_diag *d) {
  (void)self;
  struct sysinfo si;
  if (sysinfo(&si) != 0)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "sysinfo failed");
  *fr = (size_t)si.freeram * si.mem_unit;
  *tot = (size_t)si.totalram * si.mem_unit;
  return GCC_OK;
}

static gcc_status cpu_copy(void *self, void *dst, const void *src, size_t bytes, gcc_copy_kind kind,
                           int stream, gcc_diag *d) {
  (void)self;
  (void)kind;
  (void)stream;
  (void)d;
  if (bytes)
    memcpy(dst, src, bytes);
  return GCC_OK;
}

static gcc_status cpu_memset(void *self, void *dst, int byte, size_t bytes, int stream,
                             gcc_diag *d) {
  (void)self;
  (void)stream;
  (void)d;
  memset(dst, byte, bytes);
  return GCC_OK;
}

static gcc_status unsupported(const char *what, gcc_diag *d) {
  return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                      "the CPU backend has no %s (CPU plans run node by node)", what);
}

static gcc_status cpu_load(void *self, const gcc_kernel_set *ks, const gcc_nvrtc_output *image,
                           int image_arch, void **module, void **kernels, gcc_diag *d) {
  (void)self;
  (void)ks;
  (void)image;
  (void)image_arch;
  (void)module;
  (void)kernels;
  return unsupported("generated kernels to load", d);
}

static void cpu_unload(void *self, void *module) {
  (void)self;
  (void)module;
}

static gcc_status cpu_launch(void *self, void *kernel, const gcc_kernel_info *k, void **args,
                             gcc_diag *d) {
  (void)self;
  (void)kernel;
  (void)k;
  (void)args;
  return unsupported("generated kernels to launch", d);
}

static gcc_status cpu_gemm_prepare(void *self, const gcc_colmajor_gemm *g,
                                   const gcc_gemm_operands *ops, void **out, gcc_diag *d) {
  (void)self;
  (void)g;
  (void)ops;
  *out = NULL;
  return unsupported("fused GEMM groups (a Gemm node runs its kernel)", d);
}

static gcc_status cpu_gemm(void *self, void *prepared, const void *a, const void *b, const void *c,
                           void *dst, gcc_diag *d) {
  (void)self;
  (void)prepared;
  (void)a;
  (void)b;
  (void)c;
  (void)dst;
  return unsupported("fused GEMM groups (a Gemm node runs its kernel)", d);
}

static void cpu_gemm_release(void *self, void *prepared) {
  (void)self;
  (void)prepared;
}

static gcc_status cpu_library_prepare(void *self, const gcc_graph *g, int node,
                                      size_t *workspace_bytes, gcc_diag *d) {
  (void)self;
  (void)g;
  (void)node;
  *workspace_bytes = 0;
  return unsupported("library calls", d);
}

static gcc_status cpu_library_op(void *self, const gcc_graph *g, int node, void *const *in,
                                 void *const *out, void *workspace, size_t workspace_bytes,
                                 gcc_diag *d) {
  (void)self;
  (void)g;
  (void)node;
  (void)in;
  (void)out;
  (void)workspace;
  (void)workspace_bytes;
  return unsupported("library calls", d);
}

/* No streams: work is done when the call returns. */
static gcc_status cpu_event_record(void *self, int event, int stream, gcc_diag *d) {
  (void)self;
  (void)event;
  (void)stream;
  (void)d;
  return GCC_OK;
}

static gcc_status cpu_stream_wait(void *self, int stream, int event, gcc_diag *d) {
  (void)self;
  (void)stream;
  (void)event;
  (void)d;
  return GCC_OK;
}

static gcc_status cpu_event_sync(void *self, int event, gcc_diag *d) {
  (void)self;
  (void)event;
  (void)d;
  return GCC_OK;
}

static gcc_status cpu_sync(void *self, gcc_diag *d) {
  (void)self;
  (void)d;
  return GCC_OK;
}

static gcc_status cpu_capture_begin(void *self, gcc_diag *d) {
  (void)self;
  return unsupported("graph capture", d);
}

static gcc_status cpu_capture_end(void *self, void **graph, gcc_diag *d) {
  (void)self;
  *graph = NULL;
  return unsupported("graph capture", d);
}

static gcc_status cpu_graph_launch(void *self, void *graph, gcc_diag *d) {
  (void)self;
  (void)graph;
  return unsupported("graph replay", d);
}

static void cpu_graph_destroy(void *self, void *graph) {
  (void)self;
  (void)graph;
}

static int cpu_supports_op(void *self, int op) {
  (void)self;
  return gcc_cpu_supports_op(op);
}

static gcc_status cpu_run_node(void *self, const gcc_kernel_args *a) {
  (void)self;
  const gcc_cpu_op *e = gcc_cpu_op_of(a->node->op);
  if (!e || !e->kernel)
    return gcc_diag_set(a->ctx->diag, GCC_ERR_INTERNAL, "%s: node '%s' (%s) has no CPU kernel",
                        a->ctx->source ? a->ctx->source : "<model>", a->node->name,
                        gcc_op_name(a->node->op));
  if (a->prepared)
    return gcc_cpu_dnnl_run(a);
  return e->kernel(a);
}

static gcc_status cpu_prepare_node(void *self, gcc_kernel_args *a, gcc_diag *d) {
  (void)self;
  const gcc_cpu_op *e = gcc_cpu_op_of(a->node->op);
  if (!e || !e->prepare || !gcc_cpu_dnnl_enabled())
    return GCC_OK;
  return e->prepare(a, d);
}

static gcc_status cpu_prepare_done(void *self, gcc_cpu_ctx *ctx, gcc_diag *d) {
  (void)self;
  return gcc_cpu_dnnl_prepare_done(ctx, d);
}

static void cpu_release_node(void *self, gcc_kernel_args *a) {
  (void)self;
  gcc_cpu_dnnl_release(a);
}

static void cpu_release_ctx(void *self, gcc_cpu_ctx *ctx) {
  (void)self;
  gcc_cpu_dnnl_release_ctx(ctx);
}

static const char *cpu_node_impl(void *self, const gcc_kernel_args *a) {
  (void)self;
  return gcc_cpu_dnnl_name(a);
}

static const gcc_device_backend kCpu = {
    .self = NULL,
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .mem_info = cpu_mem_info,
    .host_alloc = cpu_alloc,
    .host_release = cpu_release,
    .copy = cpu_copy,
    .memset = cpu_memset,
    .load = cpu_load,
    .unload = cpu_unload,
    .launch = cpu_launch,
    .gemm_prepare = cpu_gemm_prepare,
    .gemm = cpu_gemm,
    .gemm_release = cpu_gemm_release,
    .library_prepare = cpu_library_prepare,
    .library_op = cpu_library_op,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_sync = cpu_event_sync,
    .sync = cpu_sync,
    .capture_begin = cpu_capture_begin,
    .capture_end = cpu_capture_end,
    .graph_launch = cpu_graph_launch,
    .graph_destroy = cpu_graph_destroy,
    .supports_op = cpu_supports_op,
    .run_node = cpu_run_node,
    .prepare_node = cpu_prepare_node,
    .release_node = cpu_release_node,
    .release_ctx = cpu_release_ctx,
    .prepare_done = cpu_prepare_done,
    .node_impl = cpu_node_impl,
};

const gcc_device_backend *gcc_cpu_backend(void) {
  return &kCpu;
}
