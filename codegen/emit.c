/*
 * emit.c - CUDA C for fused groups. See emit.h for the conventions.
 *
 * The generated code mirrors the CPU kernels of runtime/cpu/cpu_kernels.c
 * operation for operation (same association order, same float64
 * accumulation in losses), so the host-emulated kernels can be compared
 * with the CPU backend at 1e-6.
 */
#include "codegen/emit_internal.h"

/* ---- entry ------------------------------------------------------------ */

gcc_status gcc_codegen_emit(const gcc_graph *g, int device, int sm_count, gcc_kernel_set *ks,
                            gcc_diag *d) {
  memset(ks, 0, sizeof *ks);
  emitter e = {g, sm_count, {0}, ks, d, 0};
  out(&e.src,
      "/* gcc-train generated kernels: %s, device %d, codegen version %d.\n"
      " * Every kernel is `extern \"C\" __global__`, grid-stride, 64-bit indexed. */\n\n",
      g->name, device, GCC_CODEGEN_VERSION);
  int half = 0; /* 16-bit values on this device: the headers of their types */
  for (int v = 0; v < g->n_values; v++)
    half |= is16(g->values[v].dtype) && g->values[v].device == device;
  if (half)
    out(&e.src, "/* float16 / bfloat16 storage (--precision): computed in float */\n"
                "#ifndef GCC_HOST_EMULATION\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
                "#endif\n\n");
  gcc_status s = GCC_OK;
  for (int gi = 0; gi < g->n_groups && s == GCC_OK; gi++) {
    const gcc_group *gr = &g->groups[gi];
    if (gr->device != device)
      continue;
    switch (gr->kind) {
    case GCC_GROUP_POINTWISE: s = gcc_emit_pointwise_group(&e, gi); break;
    case GCC_GROUP_LOSS: s = gcc_emit_loss_group(&e, gi); break;
    case GCC_GROUP_OPTIMIZER: s = gcc_emit_optimizer_group(&e, gi); break;
    default: break; /* GEMM: cuBLASLt; COPY: cudaMemcpyAsync */
    }
  }
  if (s == GCC_OK && e.src.oom)
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  if (s != GCC_OK) {
    free(e.src.buf);
    gcc_kernel_set_free(ks);
    return s;
  }
  ks->source = e.src.buf;
  return GCC_OK;
}

gcc_status gcc_codegen_gather(int sm_count, int64_t max_work, gcc_kernel_set *ks, gcc_diag *d) {
  memset(ks, 0, sizeof *ks);
  static const char src[] =
      "/* gcc-train: batches a dataset held on the device (--dataset-on-device). */\n"
      "extern \"C\" __global__ void " GCC_GATHER_KERNEL "(const unsigned int* __restrict__ src, "
      "const long long* __restrict__ perm, long long first, long long rows, long long row_words, "
      "unsigned int* __restrict__ dst) {\n"
      "  const long long total = rows * row_words;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += "
      "stride) {\n"
      "    long long r = i / row_words, w = i - r * row_words;\n"
      "    dst[i] = src[perm[first + r] * row_words + w];\n"
      "  }\n"
      "}\n"
      "#ifdef GCC_HOST_EMULATION\n"
      "extern \"C\" void " GCC_GATHER_KERNEL
      "_launch(unsigned grid, unsigned block, void **args) {\n"
      "  GCC_EMU_LAUNCH(" GCC_GATHER_KERNEL ", grid, block, *(const unsigned int* *)args[0], "
      "*(const long long* *)args[1], *(long long *)args[2], *(long long *)args[3], "
      "*(long long *)args[4], *(unsigned int* *)args[5]);\n"
      "}\n"
      "#endif\n";
  static const gcc_kernel_arg args[6] = {
      {GCC_KARG_INPUT, -1, "src"}, {GCC_KARG_INPUT, -1, "perm"},    {GCC_KARG_I64, -1, "first"},
      {GCC_KARG_I64, -1, "rows"},  {GCC_KARG_I64, -1, "row_words"}, {GCC_KARG_OUTPUT, -1, "dst"}};
  ks->source = strdup(src);
  ks->kernels = calloc(1, sizeof *ks->kernels);
  gcc_kernel_arg *a = malloc(sizeof args);
  char *name = strdup(GCC_GATHER_KERNEL);
  if (!ks->source || !ks->kernels || !a || !name) {
    free(a);
    free(name);
    gcc_kernel_set_free(ks);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  }
  memcpy(a, args, sizeof args);
  gcc_kernel_info *k = &ks->kernels[0];
  ks->n_kernels = 1;
  k->name = name;
  k->group = -1;
  k->args = a;
  k->n_args = 6;
  k->work_items = max_work;
  k->block_dim = BLOCK;
  int64_t blocks = (max_work + BLOCK - 1) / BLOCK,
          cap = 32 * (int64_t)(sm_count > 0 ? sm_count : 1);
  blocks = blocks > cap ? cap : blocks;
  blocks = blocks > 65535 ? 65535 : blocks;
  k->grid_dim = (int)(blocks > 0 ? blocks : 1);
  return GCC_OK;
}

void gcc_kernel_set_free(gcc_kernel_set *ks) {
  if (!ks)
    return;
  for (int i = 0; i < ks->n_kernels; i++) {
    free(ks->kernels[i].name);
    free(ks->kernels[i].args);
  }
  free(ks->kernels);
  for (int i = 0; i < ks->n_strings; i++)
    free(ks->strings[i]);
  free(ks->strings);
  free(ks->source);
  memset(ks, 0, sizeof *ks);
}
