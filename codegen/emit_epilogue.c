/*
 * emit_epilogue.c - CUDA C for the cuBLASLt epilogues the heuristic did not offer.
 * See emit.h for the conventions of the generated source.
 */
#include "codegen/emit_internal.h"

/* ---- cuBLASLt epilogues cuBLASLt did not offer ------------------------- */

static gcc_status epilogue_kernel(emitter *e, const gcc_epilogue_work *w, int index) {
  const char *what;
  switch (w->kind) {
  case 4: what = "BIAS"; break;
  case 6: what = "RELU_BIAS"; break;
  case 134: what = "RELU_AUX_BIAS"; break;
  case 136: what = "DRELU"; break;
  case 152: what = "DRELU_BGRAD"; break;
  case 512: what = "BGRADB"; break;
  default:
    return gcc_diag_set(e->d, GCC_ERR_INVALID_ARGUMENT,
                        "codegen: cuBLASLt epilogue %d has no work to generate", w->kind);
  }
  int bias = w->kind == 4 || w->kind == 6 || w->kind == 134;
  int relu = w->kind == 6 || w->kind == 134, mask_out = w->kind == 134;
  int mask_in = w->kind == 136 || w->kind == 152, bgrad = w->kind == 152 || w->kind == 512;
  if (w->m <= 0 || w->n <= 0 || w->ldd < w->m || (w->kind == 512 && (w->k <= 0 || w->ldb <= 0)) ||
      ((mask_out || mask_in) && (w->aux_ld < w->m || w->aux_ld % 128 != 0)))
    return gcc_diag_set(e->d, GCC_ERR_INVALID_ARGUMENT,
                        "codegen: epilogue %s: bad sizes m %lld, n %lld, k %lld, ldd %lld, aux_ld "
                        "%lld",
                        what, (long long)w->m, (long long)w->n, (long long)w->k, (long long)w->ldd,
                        (long long)w->aux_ld);
  gcc_kernel_info *nk = realloc(e->ks->kernels, (size_t)(e->ks->n_kernels + 1) * sizeof *nk);
  if (!nk)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  e->ks->kernels = nk;
  gcc_kernel_info *k = &nk[e->ks->n_kernels++];
  memset(k, 0, sizeof *k);
  char name[64];
  snprintf(name, sizeof name, "gcc_epilogue_%d", index);
  k->name = strdup(name);
  k->group = -1;
  k->block_dim = BLOCK;
  if (!k->name)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  sig sg = {.k = k, .ok = 1};
  out(&e->src,
      "/* cuBLASLt's CUBLASLT_EPILOGUE_%s after a plain GEMM: D %lld x %lld (ldd %lld) */\n", what,
      (long long)w->m, (long long)w->n, (long long)w->ldd);
  out(&e->src, "extern \"C\" __global__ void %s(", name);
  const gcc_dtype t = w->dtype;
  const char *L = ld_open(t), *R = close16(t), *S = st_open(t); /* "" for float32 */
  if (w->kind != 512)
    param(e, &sg, GCC_KARG_OUTPUT, -1, out_type(t), "d");
  if (bias)
    param(e, &sg, GCC_KARG_INPUT, -1, in_type(t), "bias");
  if (mask_out)
    param(e, &sg, GCC_KARG_OUTPUT, -1, "unsigned*", "aux");
  if (mask_in)
    param(e, &sg, GCC_KARG_INPUT, -1, "const unsigned*", "aux");
  if (w->kind == 512)
    param(e, &sg, GCC_KARG_INPUT, -1, in_type(t), "b");
  if (bgrad)
    param(e, &sg, GCC_KARG_OUTPUT, -1, out_type(t), "bgrad");
  out(&e->src, ") {\n");
  if (!sg.ok)
    return gcc_diag_set(e->d, GCC_ERR_OUT_OF_MEMORY, "out of memory (codegen)");
  out(&e->src,
      "  const long long M = %lldLL, N = %lldLL, K = %lldLL, LDD = %lldLL, LDB = %lldLL, "
      "AUX_LD = %lldLL;\n"
      "  (void)M; (void)N; (void)K; (void)LDD; (void)LDB; (void)AUX_LD;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
      (long long)w->m, (long long)w->n, (long long)w->k, (long long)w->ldd, (long long)w->ldb,
      (long long)w->aux_ld);
  int64_t work;
  if (mask_out) {
    /* one thread per 32-bit word of the mask: no two threads share a word */
    work = w->aux_ld / 32 * w->n;
    out(&e->src,
        "  for (long long wd = first; wd < AUX_LD / 32 * N; wd += stride) {\n"
        "    const long long j = wd * 32 / AUX_LD, i0 = wd * 32 - j * AUX_LD;\n"
        "    unsigned bits = 0u;\n"
        "    for (int b = 0; b < 32; b++) {\n"
        "      const long long i = i0 + b;\n"
        "      if (i >= M) break;\n"
        "      const float x = %sd[i + j * LDD]%s + %sbias[i]%s;\n"
        "      if (x > 0.0f) bits |= 1u << b;\n"
        "      d[i + j * LDD] = %sx > 0.0f ? x : 0.0f%s;\n"
        "    }\n"
        "    aux[wd] = bits;\n"
        "  }\n}\n\n",
        L, R, L, R, S, R);
  } else if (bias) {
    work = w->m * w->n;
    out(&e->src,
        "  for (long long e = first; e < M * N; e += stride) {\n"
        "    const long long j = e / M, i = e - j * M;\n"
        "    const float x = %sd[i + j * LDD]%s + %sbias[i]%s;\n"
        "    d[i + j * LDD] = %s%s%s;\n"
        "  }\n}\n\n",
        L, R, L, R, S, relu ? "x > 0.0f ? x : 0.0f" : "x", R);
  } else if (w->kind == 136) {
    work = w->m * w->n;
    out(&e->src,
        "  for (long long e = first; e < M * N; e += stride) {\n"
        "    const long long j = e / M, i = e - j * M, bit = j * AUX_LD + i;\n"
        "    if (!((aux[bit >> 5] >> (bit & 31)) & 1u)) d[i + j * LDD] = %s0.0f%s;\n"
        "  }\n}\n\n",
        S, R);
  } else if (w->kind == 152) {
    /* one thread per row i: masks the row, then sums it in column order */
    work = w->m;
    out(&e->src,
        "  for (long long i = first; i < M; i += stride) {\n"
        "    double s = 0.0;\n"
        "    for (long long j = 0; j < N; j++) {\n"
        "      const long long bit = j * AUX_LD + i;\n"
        "      float v = %sd[i + j * LDD]%s;\n"
        "      if (!((aux[bit >> 5] >> (bit & 31)) & 1u)) { v = 0.0f; d[i + j * LDD] = %sv%s; }\n"
        "      s += (double)v;\n"
        "    }\n"
        "    bgrad[i] = %s(float)s%s;\n"
        "  }\n}\n\n",
        L, R, S, R, S, R);
  } else {
    /* BGRADB: one thread per column j of op(B), summed over k in order */
    work = w->n;
    out(&e->src,
        "  for (long long j = first; j < N; j += stride) {\n"
        "    double s = 0.0;\n"
        "    for (long long kk = 0; kk < K; kk++) s += (double)%sb[%s]%s;\n"
        "    bgrad[j] = %s(float)s%s;\n"
        "  }\n}\n\n",
        L, w->trans_b ? "j + kk * LDB" : "kk + j * LDB", R, S, R);
  }
  set_grid(e, k, work);
  emit_wrapper(e, k, sg.types);
  return GCC_OK;
}

gcc_status gcc_codegen_gemm_epilogues(const gcc_epilogue_work *w, int n, int sm_count,
                                      gcc_kernel_set *ks, gcc_diag *d) {
  memset(ks, 0, sizeof *ks);
  emitter e = {NULL, sm_count, {0}, ks, d, 0};
  out(&e.src,
      "/* gcc-train: the work of cuBLASLt epilogues the heuristic did not offer, codegen "
      "version %d. */\n\n",
      GCC_CODEGEN_VERSION);
  int half = 0;
  for (int i = 0; i < n; i++)
    half |= is16(w[i].dtype);
  if (half)
    out(&e.src, "#ifndef GCC_HOST_EMULATION\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
                "#endif\n\n");
  gcc_status s = GCC_OK;
  for (int i = 0; i < n && s == GCC_OK; i++)
    s = epilogue_kernel(&e, &w[i], i);
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
