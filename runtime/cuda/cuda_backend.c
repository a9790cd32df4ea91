/* cuda_backend.c - gcc_device_backend on the CUDA runtime API and cuBLASLt (cuda_backend.h). */
#include "runtime/cuda/cuda_backend.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NVTX 3 is header-only (the toolkit's include/nvtx3): nvtxRangePushA /
 * nvtxRangePop cost a branch until a tool (Nsight Systems) injects itself
 * through NVTX_INJECTION64_PATH, which the header dlopens. */
#include <nvtx3/nvToolsExt.h>

#include "codegen/fusion.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "runtime/comm.h"
#include "runtime/cuda/cublaslt_api.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cudnn_conv.h"

#define MAX_BUCKETS 256 /* gradient buckets of one plan's all-reduce */
#define MAX_EVENTS  8   /* backend.h: input-ready and step-done per slot, read-back */

/* One prepared matmul (gemm_prepare), owned by the plan that prepared it:
 * its descriptor (with the plan's bias and aux pointers), layouts, and the
 * algorithm the heuristic chose for the operands' alignments. */
typedef struct lt_entry {
  gcc_colmajor_gemm g;
  gcc_gemm_operands ops;
  const gcc_cublaslt_api *lt; /* the loaded library's functions */
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
} lt_entry;

struct gcc_cuda_backend {
  gcc_device_backend table;
  int ordinal;
  /* the device's launch limits (cudaDeviceGetAttribute, read at creation) */
  int max_threads, max_grid_x, max_block_x, smem_optin;
  /* --profile: timing events (cudaEventDefault: timing on), made by timer_reserve */
  cudaEvent_t *timers;
  int n_timers;
  cudaStream_t stream[2];
  cudaEvent_t events[MAX_EVENTS];
  const gcc_cublaslt_api *lt_api; /* cuBLASLt's functions (cublaslt_api.h) */
  cublasLtHandle_t lt;
  void *workspace; /* cuBLASLt's: allocated once, freed only with the backend */
  /* cuDNN, created when the first plan with a convolution or pooling is
   * built; the workspaces belong to the plans (library_prepare) */
  cudnnHandle_t cudnn;
  gcc_cudnn_cache *cudnn_cache;
  /* the disk cache of algorithm choices (gcc_cuda_backend_set_algo_cache),
   * and what the choices did: shapes read from it, shapes timed, notes */
  char *algo_cache_dir;
  int algo_cache_use, algo_hits, algo_searches;
  /* Conv + Relu groups prepared: as one fused call, as two calls */
  int relu_fused, relu_unfused;
  char algo_note[600];
  /* data-parallel: the communication stream (NCCL's all-reduces, made on
   * first use) and per bucket the events "its gradients are computed"
   * (compute stream) and "it is reduced" (communication stream) */
  cudaStream_t comm_stream;
  cudaEvent_t grads_ready[MAX_BUCKETS], reduced[MAX_BUCKETS];
};

static gcc_status set_device(gcc_cuda_backend *b, gcc_diag *d) {
  GCC_CUDA_CHECK(cudaSetDevice(b->ordinal));
  return GCC_OK;
}

static gcc_status be_alloc(void *self, size_t bytes, void **out, gcc_diag *d) {
  GCC_TRY(set_device(self, d));
  *out = NULL;
  GCC_CUDA_CHECK(cudaMalloc(out, bytes ? bytes : 1)); /* 256-byte aligned at least */
  return GCC_OK;
}

static void be_release(void *self, void *p) {
  (void)self;
  if (p)
    (void)cudaFree(p);
}

static gcc_status be_mem_info(void *self, size_t *fr, size_t *tot, gcc_diag *d) {
  GCC_TRY(set_device(self, d));
  GCC_CUDA_CHECK(cudaMemGetInfo(fr, tot));
  return GCC_OK;
}

static gcc_status be_host_alloc(void *self, size_t bytes, void **out, gcc_diag *d) {
  (void)self;
  *out = NULL;
  GCC_CUDA_CHECK(cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocDefault));
  return GCC_OK;
}

static void be_host_release(void *self, void *p) {
  (void)self;
  if (p)
    (void)cudaFreeHost(p);
}

static gcc_status be_copy(void *self, void *dst, const void *src, size_t bytes, gcc_copy_kind kind,
                          int stream, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  enum cudaMemcpyKind k = kind == GCC_COPY_H2D   ? cudaMemcpyHostToDevice
                          : kind == GCC_COPY_D2H ? cudaMemcpyDeviceToHost
                                                 : cudaMemcpyDeviceToDevice;
  if (bytes == 0)
    return GCC_OK;
  GCC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, b->stream[stream]));
  return GCC_OK;
}

static gcc_status be_memset(void *self, void *dst, int byte, size_t bytes, int stream,
                            gcc_diag *d) {
  gcc_cuda_backend *b = self;
  GCC_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, b->stream[stream]));
  return GCC_OK;
}

/* The runner chose the image by the device's compute capability
 * (runtime/plan.c, gcc_kernel_image_select): a cubin for sm_`arch` or PTX
 * for compute_`arch`, never both. Under lazy module loading (the default
 * since CUDA 12.2, CUDA_MODULE_LOADING=LAZY) cudaLibraryLoadData does not
 * put the kernels on the device; cudaFuncGetAttributes on each one does,
 * so an image the device cannot run fails here, naming the kernel, and not
 * at its first launch inside a step or a capture. */
static gcc_status be_load(void *self, const gcc_kernel_set *ks, const gcc_nvrtc_output *img,
                          int arch, void **module, void **kernels, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  GCC_TRY(set_device(b, d));
  int cubin = img->cubin && img->cubin_size > 0;
  if (!cubin && !(img->ptx && img->ptx_size > 0))
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "kernel image for cuda:%d is empty", b->ordinal);
  cudaLibrary_t lib = NULL;
  cudaError_t e = cudaLibraryLoadData(&lib, cubin ? img->cubin : (const void *)img->ptx, NULL, NULL,
                                      0, NULL, NULL, 0);
  if (e != cudaSuccess)
    return gcc_diag_set(d, e == cudaErrorMemoryAllocation ? GCC_ERR_OUT_OF_MEMORY : GCC_ERR_DEVICE,
                        "cudaLibraryLoadData(%s for %s_%d) on cuda:%d (sm_%d) failed: %s (%s) at "
                        "%s:%d",
                        cubin ? "cubin" : "PTX", cubin ? "sm" : "compute", arch, b->ordinal,
                        b->table.arch, cudaGetErrorName(e), cudaGetErrorString(e), __FILE__,
                        __LINE__);
  for (int i = 0; i < ks->n_kernels; i++) {
    cudaKernel_t k = NULL;
    struct cudaFuncAttributes fa;
    const char *call = "cudaLibraryGetKernel";
    cudaError_t ke = cudaLibraryGetKernel(&k, lib, ks->kernels[i].name);
    if (ke == cudaSuccess) {
      call = "cudaFuncGetAttributes";
      ke = cudaFuncGetAttributes(&fa, (const void *)k); /* loads it onto the device */
    }
    /* a launch may ask more than 48 KiB of dynamic shared memory only after
     * this opt-in (CUDA C++ Programming Guide, "Shared Memory": dynamic
     * allocations above 48 KB need cudaFuncAttributeMaxDynamicSharedMemorySize) */
    if (ke == cudaSuccess && ks->kernels[i].dynamic_smem > 48u * 1024u) {
      call = "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize)";
      ke = cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)ks->kernels[i].dynamic_smem);
    }
    if (ke == cudaSuccess && fa.maxThreadsPerBlock < ks->kernels[i].block_dim) {
      (void)cudaLibraryUnload(lib);
      return gcc_diag_set(d, GCC_ERR_DEVICE,
                          "kernel %s runs at most %d threads per block on cuda:%d, it is "
                          "launched with %d",
                          ks->kernels[i].name, fa.maxThreadsPerBlock, b->ordinal,
                          ks->kernels[i].block_dim);
    }
    if (ke != cudaSuccess) {
      (void)cudaLibraryUnload(lib);
      return gcc_diag_set(d, GCC_ERR_DEVICE,
                          "%s(%s) from the %s for %s_%d on cuda:%d (sm_%d) failed: %s (%s) at "
                          "%s:%d",
                          call, ks->kernels[i].name, cubin ? "cubin" : "PTX",
                          cubin ? "sm" : "compute", arch, b->ordinal, b->table.arch,
                          cudaGetErrorName(ke), cudaGetErrorString(ke), __FILE__, __LINE__);
    }
    kernels[i] = (void *)k;
  }
  *module = lib;
  return GCC_OK;
}

static void be_unload(void *self, void *module) {
  (void)self;
  if (module)
    (void)cudaLibraryUnload((cudaLibrary_t)module);
}

static dim3 dim3_grid(const gcc_kernel_info *k) {
  dim3 v = {(unsigned)k->grid_dim, 1, 1};
  return v;
}

static dim3 dim3_block(const gcc_kernel_info *k) {
  dim3 v = {(unsigned)k->block_dim, 1, 1};
  return v;
}

/* The limits of one loaded kernel on this device: its maxThreadsPerBlock
 * and static shared memory (cudaFuncGetAttributes) and the device's grid,
 * block and opt-in shared memory maxima. */
static gcc_status be_launch_limits(void *self, void *kernel, gcc_launch_limits *out, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  struct cudaFuncAttributes fa;
  GCC_CUDA_CHECK(cudaFuncGetAttributes(&fa, (const void *)kernel));
  out->max_threads_per_block =
      fa.maxThreadsPerBlock < b->max_threads ? fa.maxThreadsPerBlock : b->max_threads;
  out->max_grid_x = b->max_grid_x;
  out->max_block_x = b->max_block_x;
  size_t optin = (size_t)b->smem_optin, stat = fa.sharedSizeBytes;
  out->max_dynamic_smem = optin > stat ? optin - stat : 0;
  return GCC_OK;
}

/* The plan checked every kernel's launch against be_launch_limits when it
 * was built; this rechecks the device-wide limits before each launch (a
 * compare each), so that a launch the device would refuse fails here,
 * naming the kernel, and not as cudaErrorInvalidConfiguration inside a
 * capture (where it surfaces only at cudaStreamEndCapture). */
static gcc_status be_launch(void *self, void *kernel, const gcc_kernel_info *k, void **args,
                            gcc_diag *d) {
  gcc_cuda_backend *b = self;
  if (k->block_dim < 1 || k->block_dim > b->max_threads || k->block_dim > b->max_block_x ||
      k->grid_dim < 1 || k->grid_dim > b->max_grid_x || k->dynamic_smem > (size_t)b->smem_optin)
    return gcc_diag_set(d, GCC_ERR_INTERNAL,
                        "kernel %s: launch of %d blocks of %d threads with %zu bytes of dynamic "
                        "shared memory is past cuda:%d's limits (grid x %d, block %d threads, "
                        "%d bytes of shared memory per block)",
                        k->name, k->grid_dim, k->block_dim, k->dynamic_smem, b->ordinal,
                        b->max_grid_x, b->max_threads, b->smem_optin);
  /* a cudaKernel_t is accepted by cudaLaunchKernel in place of a function */
  GCC_CUDA_CHECK(cudaLaunchKernel((const void *)kernel, dim3_grid(k), dim3_block(k), args,
                                  k->dynamic_smem, b->stream[GCC_STREAM_COMPUTE]));
  return GCC_OK;
}

/* ---- --profile: timing events, NVTX ranges --------------------------------- */

static gcc_status be_timer_reserve(void *self, int n, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  if (n <= b->n_timers)
    return GCC_OK;
  cudaEvent_t *t = realloc(b->timers, (size_t)n * sizeof *t);
  if (!t)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (timing events)");
  b->timers = t;
  for (; b->n_timers < n; b->n_timers++) {
    b->timers[b->n_timers] = NULL;
    GCC_CUDA_CHECK(cudaEventCreateWithFlags(&b->timers[b->n_timers], cudaEventDefault));
  }
  return GCC_OK;
}

static gcc_status be_timer_record(void *self, int id, int stream, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  if (id < 0 || id >= b->n_timers)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "timing event %d outside [0, %d)", id, b->n_timers);
  GCC_CUDA_CHECK(cudaEventRecord(b->timers[id], b->stream[stream]));
  return GCC_OK;
}

static gcc_status be_timer_elapsed(void *self, int a, int c, double *ms, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  if (a < 0 || c < 0 || a >= b->n_timers || c >= b->n_timers)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "timing events %d, %d outside [0, %d)", a, c,
                        b->n_timers);
  float f = 0;
  GCC_CUDA_CHECK(cudaEventElapsedTime(&f, b->timers[a], b->timers[c]));
  *ms = (double)f;
  return GCC_OK;
}

static void be_range_push(void *self, const char *name) {
  (void)self;
  nvtxRangePushA(name);
}

static void be_range_pop(void *self) {
  (void)self;
  nvtxRangePop();
}

/* ---- cuBLASLt ------------------------------------------------------------ */

static void lt_free(lt_entry *e) {
  if (e->op)
    e->lt->cublasLtMatmulDescDestroy(e->op);
  if (e->a)
    e->lt->cublasLtMatrixLayoutDestroy(e->a);
  if (e->b)
    e->lt->cublasLtMatrixLayoutDestroy(e->b);
  if (e->c)
    e->lt->cublasLtMatrixLayoutDestroy(e->c);
  free(e);
}

static void be_gemm_release(void *self, void *prepared) {
  (void)self;
  if (prepared)
    lt_free(prepared);
}

/* The cudaDataType_t of a GEMM operand dtype. */
static cudaDataType_t lt_type(gcc_dtype t) {
  return t == GCC_DT_BFLOAT16 ? CUDA_R_16BF : t == GCC_DT_FLOAT16 ? CUDA_R_16F : CUDA_R_32F;
}

/* The descriptor, layouts and algorithm of one matmul, for the operands the
 * plan will pass. cublasLt.h: routines that do not dereference the bias and
 * aux pointers, cublasLtMatmulAlgoGetHeuristic among them, "depend on its
 * value to determine expected pointer alignment", so both are set before
 * the heuristic runs; and CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES
 * default to 256 while the plan's operands may be only 64-byte aligned (the
 * persistent arena pads each tensor to GCC_ARENA_ALIGN), so they are set
 * from the operands' real alignments: the heuristic then only returns
 * algorithms that work on them. */
static gcc_status not_capturing(gcc_cuda_backend *b, const char *what, gcc_diag *d) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  GCC_CUDA_CHECK(cudaStreamIsCapturing(b->stream[GCC_STREAM_COMPUTE], &cs));
  if (cs != cudaStreamCaptureStatusNone)
    return gcc_diag_set(d, GCC_ERR_INTERNAL,
                        "%s on cuda:%d while the compute stream is being captured into a CUDA "
                        "Graph: algorithms, heuristics and workspaces are chosen when the plan is "
                        "built, for every shape it meets, never under capture",
                        what, b->ordinal);
  return GCC_OK;
}

static gcc_status be_gemm_prepare(void *self, const gcc_colmajor_gemm *g,
                                  const gcc_gemm_operands *ops, void **out, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  *out = NULL;
  /* Capture rule: cublasLtMatmulAlgoGetHeuristic runs on the host only, but
   * its answer (and the descriptors') must exist before the capture starts,
   * since what the capture records is the cublasLtMatmul of an algorithm
   * already chosen; the runner prepares every GEMM of every plan (one plan
   * per batch size: the last, smaller batch too) when the plan is built. */
  GCC_TRY(not_capturing(b, "cublasLtMatmulAlgoGetHeuristic", d));
  lt_entry *e = calloc(1, sizeof *e);
  if (!e)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (cuBLASLt descriptor)");
  const gcc_cublaslt_api *lt = b->lt_api;
  e->lt = lt;
  e->g = *g;
  e->ops = *ops;
  gcc_status st = GCC_OK;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  do {
    cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)g->epilogue;
#define LT_TRY(call)                                                                               \
  {                                                                                                \
    cublasStatus_t bs_ = (call);                                                                   \
    if (bs_ != CUBLAS_STATUS_SUCCESS) {                                                            \
      st = gcc_diag_set(                                                                           \
          d, bs_ == CUBLAS_STATUS_ALLOC_FAILED ? GCC_ERR_OUT_OF_MEMORY : GCC_ERR_DEVICE,           \
          "%s failed: %s (%s) at %s:%d", #call, lt->cublasLtGetStatusName(bs_),                    \
          lt->cublasLtGetStatusString(bs_), __FILE__, __LINE__);                                   \
      break;                                                                                       \
    }                                                                                              \
  }
    /* float32 accumulation and scale type for every dtype (16-bit A/B/C/D:
     * torch.autocast's matmuls); TF32 multiplies only with --precision tf32 */
    cudaDataType_t ty = lt_type(g->dtype);
    LT_TRY(lt->cublasLtMatmulDescCreate(
        &e->op, g->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    /* the bias or bias gradient in D's type, as cublasLt.h documents it
     * (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, _BIAS_POINTER; other types for
     * FP8 and IMMA kernels only): codegen/gemm_map.c maps no other */
    if (ops->bias && g->dtype != GCC_DT_FLOAT32)
      LT_TRY(lt->cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &ty,
                                                sizeof ty));
    LT_TRY(lt->cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(lt->cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_TRY(
        lt->cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (ops->bias)
      LT_TRY(lt->cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &ops->bias, sizeof ops->bias));
    if (ops->aux) {
      LT_TRY(lt->cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &ops->aux, sizeof ops->aux));
      LT_TRY(lt->cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                &g->aux_ld, sizeof g->aux_ld));
    }
    /* stored shapes: op(A) is m x k, so A is m x k (N) or k x m (T) */
    LT_TRY(lt->cublasLtMatrixLayoutCreate(&e->a, ty, g->trans_a ? g->k : g->m,
                                          g->trans_a ? g->m : g->k, g->lda));
    LT_TRY(lt->cublasLtMatrixLayoutCreate(&e->b, ty, g->trans_b ? g->n : g->k,
                                          g->trans_b ? g->k : g->n, g->ldb));
    LT_TRY(lt->cublasLtMatrixLayoutCreate(&e->c, ty, g->m, g->n, g->ldd));
    LT_TRY(lt->cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = GCC_CUBLASLT_WORKSPACE;
    uint32_t al[4] = {ops->align_a, ops->align_b, g->c_value >= 0 ? ops->align_c : ops->align_d,
                      ops->align_d};
    LT_TRY(lt->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof ws));
    LT_TRY(lt->cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]));
    LT_TRY(lt->cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]));
    LT_TRY(lt->cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]));
    LT_TRY(lt->cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]));
    cublasStatus_t hs = lt->cublasLtMatmulAlgoGetHeuristic(b->lt, e->op, e->a, e->b, e->c, e->c,
                                                           pref, 1, &res, &found);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED)
      found = 0; /* "no heuristic function available for current configuration" */
    else
      LT_TRY(hs);
    if (found == 0 || res.state != CUBLAS_STATUS_SUCCESS)
      st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "cuBLASLt has no algorithm for a %lld x %lld x %lld %s%s GEMM "
                        "(trans %d%d, alignments A %u B %u C %u D %u bytes) with %s on cuda:%d",
                        (long long)g->m, (long long)g->n, (long long)g->k, gcc_dtype_name(g->dtype),
                        g->tf32 ? " (TF32)" : "", g->trans_a, g->trans_b, al[0], al[1], al[2],
                        al[3], gcc_epilogue_name(g->epilogue), b->ordinal);
#undef LT_TRY
  } while (0);
  if (pref)
    lt->cublasLtMatmulPreferenceDestroy(pref);
  if (st != GCC_OK) {
    lt_free(e);
    return st;
  }
  e->algo = res.algo;
  *out = e;
  return GCC_OK;
}

static gcc_status misaligned(const char *what, const void *p, unsigned want, gcc_diag *d) {
  return gcc_diag_set(d, GCC_ERR_INTERNAL,
                      "cublasLtMatmul: %s at %p is %u-byte aligned, its algorithm was chosen "
                      "for %u",
                      what, p, gcc_lt_alignment(p), want);
}

static gcc_status be_gemm(void *self, void *prepared, const void *a, const void *bm, const void *c,
                          void *dst, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  const lt_entry *e = prepared;
  const gcc_colmajor_gemm *g = &e->g;
  int has_c = g->c_value >= 0 && c;
  if (gcc_lt_alignment(a) < e->ops.align_a)
    return misaligned("A", a, e->ops.align_a, d);
  if (gcc_lt_alignment(bm) < e->ops.align_b)
    return misaligned("B", bm, e->ops.align_b, d);
  if (has_c && gcc_lt_alignment(c) < e->ops.align_c)
    return misaligned("C", c, e->ops.align_c, d);
  if (gcc_lt_alignment(dst) < e->ops.align_d)
    return misaligned("D", dst, e->ops.align_d, d);
  float beta = has_c ? g->beta : 0.0f;
  const void *cp = has_c ? c : dst;
  /* Capture rules (cuBLAS documentation, "CUDA Graphs Support"):
   *  - cuBLAS routines can be captured, except those that write results to
   *    host memory (a synchronisation): cublasLtMatmul writes D on the
   *    device only;
   *  - in CUBLASLT_POINTER_MODE_HOST (the default, used here) alpha and
   *    beta are captured by value: they are fixed per prepared matmul, so
   *    the replayed values are the right ones;
   *  - workspace: a cuBLAS handle without a user workspace allocates its
   *    own, and under capture that allocation happens inside every capture
   *    (PyTorch's #83461 saw memory grow per capture before CUDA 12.2).
   *    cublasLtMatmul takes its workspace as an argument: always the
   *    backend's GCC_CUBLASLT_WORKSPACE bytes, allocated once at creation
   *    and freed only with the backend (after every plan and graph), with an
   *    algorithm chosen before capture (be_gemm_prepare) for at most that
   *    workspace (CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES); nothing is
   *    allocated during the capture.
   * The bias and aux pointers are fixed in the descriptor: the graph
   * replays them as captured, and the plan never moves them. */
  GCC_CUBLAS_CHECK(e->lt->cublasLtMatmul(b->lt, e->op, &g->alpha, a, e->a, bm, e->b, &beta, cp,
                                         e->c, dst, e->c, &e->algo, b->workspace,
                                         GCC_CUBLASLT_WORKSPACE, b->stream[GCC_STREAM_COMPUTE]));
  return GCC_OK;
}

/* ---- cuDNN ------------------------------------------------------------------ */

static gcc_status cudnn_ready(gcc_cuda_backend *b, gcc_diag *d) {
  if (!b->cudnn) {
    cudnnHandle_t h = NULL;
    GCC_TRY(gcc_cudnn_handle_create(&h, d));
    cudnnStatus_t st = cudnnSetStream(h, b->stream[GCC_STREAM_COMPUTE]);
    if (st != CUDNN_STATUS_SUCCESS) {
      gcc_cudnn_handle_destroy(h);
      return gcc_cudnn_status(st, "cudnnSetStream", __FILE__, __LINE__, d);
    }
    b->cudnn = h;
  }
  if (!b->cudnn_cache)
    GCC_TRY(gcc_cudnn_cache_create(&b->cudnn_cache, d));
  return GCC_OK;
}

/* cuDNN's algorithm choice caps the workspace at this (bytes) */
#define GCC_CUDNN_WORKSPACE_CAP ((size_t)256 << 20)

/* The device address at operand slot `slot` (cuda_ops.h), NULL for none. */
static void *slot_ptr(int slot, void *const *in, void *const *out) {
  return slot > 0 ? in[slot - 1] : slot < 0 ? out[-slot - 1] : NULL;
}

static int is_conv(gcc_cuda_call call) {
  return call == GCC_CUDA_CALL_CONV_FORWARD || call == GCC_CUDA_CALL_CONV_BACKWARD_DATA ||
         call == GCC_CUDA_CALL_CONV_BACKWARD_FILTER || call == GCC_CUDA_CALL_CONV_BACKWARD_BIAS ||
         call == GCC_CUDA_CALL_CONV_TRANSPOSE;
}

/* The library call of node `node` (cuda_ops.h). */
static gcc_cuda_call call_of(const gcc_graph *g, int node) {
  const gcc_cuda_op *co = gcc_cuda_op_of(g->nodes[node].op);
  return co ? co->call : GCC_CUDA_CALL_NONE;
}

/* The convolution descriptor set (cached per shape) of a conv-family node. */
static gcc_status conv_of(gcc_cuda_backend *b, const gcc_graph *g, int node, gcc_cudnn_conv **c,
                          gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  gcc_conv2d_shape sh;
  if (call_of(g, node) == GCC_CUDA_CALL_CONV_BACKWARD_BIAS) {
    /* dB reads only dY [n, m, oh, ow]: any convolution with that output
     * describes it; a 1x1 one of unit stride does */
    const gcc_shape *y = &g->values[n->inputs[0]].shape;
    memset(&sh, 0, sizeof sh);
    sh.n = y->dims[0];
    sh.c = 1;
    sh.m = y->dims[1];
    sh.h = y->dims[2];
    sh.w = y->dims[3];
    sh.win.kh = sh.win.kw = sh.win.sh = sh.win.sw = sh.win.dh = sh.win.dw = 1;
  } else {
    GCC_TRY(gcc_conv2d_shape_of(g, node, &sh, d));
  }
  return gcc_cudnn_cache_conv(b->cudnn_cache, &sh, c, d);
}

/* When a plan is built, never under capture: the handle, the descriptors
 * and the algorithms of a convolution (once per shape), and the workspace
 * of this node's direction (cudnnGet*WorkspaceSize of the chosen
 * algorithm, gcc_cudnn_conv_prepare). The plan owns the workspace. A
 * failure leaves the shape unprepared. */
static gcc_status be_library_prepare(void *self, const gcc_graph *g, int node, size_t *ws,
                                     gcc_diag *d) {
  gcc_cuda_backend *b = self;
  *ws = 0;
  GCC_TRY(set_device(b, d));
  /* Capture rules: the algorithms are chosen here, by
   * cudnnFindConvolution*Algorithm (which runs and times every algorithm on
   * the device with memory it allocates, synchronising: never allowed in a
   * capture, and never called in one: this runs when the plan is built) or
   * read from the disk cache of choices, and cudnnGet*WorkspaceSize sizes
   * the workspace here; cudnnCreate and cudnnSetStream (cudnn_ready) also run here, never
   * under capture. The convolution call itself is then captured with the
   * plan's own workspace (cuDNN's legacy convolution API allocates no
   * memory when given one). */
  GCC_TRY(not_capturing(b, "cuDNN algorithm choice (cudnnFindConvolution*Algorithm)", d));
  GCC_TRY(cudnn_ready(b, d));
  gcc_cuda_call call = call_of(g, node);
  if (is_conv(call)) {
    gcc_cudnn_conv *c = NULL;
    GCC_TRY(conv_of(b, g, node, &c, d));
    if (call == GCC_CUDA_CALL_CONV_BACKWARD_BIAS)
      return GCC_OK;
    if (!gcc_cudnn_conv_prepared(c)) {
      gcc_cudnn_choice_cache cache = {b->algo_cache_dir, b->algo_cache_use};
      gcc_cudnn_choice_info info;
      GCC_TRY(
          gcc_cudnn_conv_prepare_cached(c, b->cudnn, GCC_CUDNN_WORKSPACE_CAP, &cache, &info, d));
      b->algo_hits += info.hit;
      b->algo_searches += info.searched;
      if (info.note[0])
        snprintf(b->algo_note, sizeof b->algo_note, "%s", info.note);
    }
    *ws = gcc_cudnn_conv_direction_workspace(c, call);
    if (call == GCC_CUDA_CALL_CONV_FORWARD && gcc_fusion_conv_relu(g, node) >= 0) {
      int fused = gcc_cudnn_conv_relu_fused(c) && g->nodes[node].n_inputs > 2 &&
                  g->nodes[node].inputs[2] >= 0;
      b->relu_fused += fused;
      b->relu_unfused += !fused;
    }
    return GCC_OK;
  }
  char desc[600];
  if (call != GCC_CUDA_CALL_POOL_FORWARD && call != GCC_CUDA_CALL_POOL_BACKWARD)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: %s has no library call on CUDA", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc));
  gcc_pool2d_shape sh;
  GCC_TRY(gcc_pool2d_shape_of(g, node, &sh, d));
  gcc_cudnn_pool *pl = NULL;
  return gcc_cudnn_cache_pool(b->cudnn_cache, &sh, &pl, d);
}

static gcc_status be_library_op(void *self, const gcc_graph *g, int node, void *const *in,
                                void *const *out, void *ws, size_t ws_bytes, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  const gcc_node *n = &g->nodes[node];
  const gcc_cuda_op *co = gcc_cuda_op_of(n->op);
  gcc_cuda_call call = co ? co->call : GCC_CUDA_CALL_NONE;
  char desc[600];
  if (!b->cudnn || !b->cudnn_cache)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: %s runs before its plan prepared it", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc));
#define P(slot) slot_ptr(co->slot, in, out)
  if (is_conv(call)) {
    gcc_cudnn_conv *c = NULL;
    GCC_TRY(conv_of(b, g, node, &c, d));
    if (call == GCC_CUDA_CALL_CONV_BACKWARD_BIAS)
      return gcc_cudnn_conv_backward_bias(c, b->cudnn, P(dy), P(db), d);
    if (!gcc_cudnn_conv_prepared(c)) /* choosing algorithms now could land in a capture */
      return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: %s runs before its plan prepared it", g->source,
                          gcc_node_desc(g, node, desc, sizeof desc));
    /* a Conv with its Relu fused (codegen/fusion.h): `out` is the Relu's */
    if (call == GCC_CUDA_CALL_CONV_FORWARD && gcc_fusion_conv_relu(g, node) >= 0)
      return gcc_cudnn_conv_forward_relu(c, b->cudnn, P(x), P(w), n->n_inputs > 2 ? P(b) : NULL,
                                         P(y), ws, ws_bytes, d);
    if (call == GCC_CUDA_CALL_CONV_FORWARD)
      return gcc_cudnn_conv_forward(c, b->cudnn, P(x), P(w), n->n_inputs > 2 ? P(b) : NULL, P(y),
                                    ws, ws_bytes, d);
    if (call == GCC_CUDA_CALL_CONV_TRANSPOSE)
      return gcc_cudnn_conv_transpose(c, b->cudnn, P(x), P(w), n->n_inputs > 2 ? P(b) : NULL, P(y),
                                      ws, ws_bytes, d);
    if (call == GCC_CUDA_CALL_CONV_BACKWARD_DATA)
      return gcc_cudnn_conv_backward_data(c, b->cudnn, P(dy), P(w), P(dx), ws, ws_bytes, d);
    return gcc_cudnn_conv_backward_filter(c, b->cudnn, P(dy), P(x), P(dw), ws, ws_bytes, d);
  }
  if (call == GCC_CUDA_CALL_POOL_FORWARD || call == GCC_CUDA_CALL_POOL_BACKWARD) {
    gcc_pool2d_shape sh;
    GCC_TRY(gcc_pool2d_shape_of(g, node, &sh, d));
    gcc_cudnn_pool *pl = NULL;
    GCC_TRY(gcc_cudnn_cache_pool(b->cudnn_cache, &sh, &pl, d));
    if (call == GCC_CUDA_CALL_POOL_FORWARD)
      return gcc_cudnn_pool_forward(pl, b->cudnn, P(x), P(y), d);
    return gcc_cudnn_pool_backward(pl, b->cudnn, P(y), P(dy), P(x), P(dx), d);
  }
#undef P
  return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: %s has no library call on CUDA", g->source,
                      gcc_node_desc(g, node, desc, sizeof desc));
}

/* ---- data-parallel all-reduce ----------------------------------------------- */

static gcc_status bucket_events(gcc_cuda_backend *b, int bucket, gcc_diag *d) {
  if (bucket < 0 || bucket >= MAX_BUCKETS)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "gradient bucket %d: at most %d buckets per plan (raise --bucket-size-mb)",
                        bucket, MAX_BUCKETS);
  if (!b->comm_stream)
    GCC_CUDA_CHECK(cudaStreamCreateWithFlags(&b->comm_stream, cudaStreamNonBlocking));
  if (!b->grads_ready[bucket])
    GCC_CUDA_CHECK(cudaEventCreateWithFlags(&b->grads_ready[bucket], cudaEventDisableTiming));
  if (!b->reduced[bucket])
    GCC_CUDA_CHECK(cudaEventCreateWithFlags(&b->reduced[bucket], cudaEventDisableTiming));
  return GCC_OK;
}

/* The bucket's gradients are ready once the compute stream reaches here;
 * the communication stream waits for that, reduces every gradient (one
 * NCCL group), and marks the bucket reduced. The compute stream goes on
 * with the backward pass meanwhile. */
static gcc_status be_collective(void *self, gcc_comm *comm, void *const *grads,
                                const int64_t *numel, int n, float weight, int bucket,
                                gcc_diag *d) {
  gcc_cuda_backend *b = self;
  GCC_TRY(set_device(b, d));
  GCC_TRY(bucket_events(b, bucket, d));
  GCC_CUDA_CHECK(cudaEventRecord(b->grads_ready[bucket], b->stream[GCC_STREAM_COMPUTE]));
  GCC_CUDA_CHECK(cudaStreamWaitEvent(b->comm_stream, b->grads_ready[bucket], 0));
  for (int k = 0; k < n; k++)
    GCC_TRY(comm->allreduce_f32(comm, grads[k], numel[k], weight, b->comm_stream, d));
  GCC_CUDA_CHECK(cudaEventRecord(b->reduced[bucket], b->comm_stream));
  return GCC_OK;
}

static gcc_status be_collective_wait(void *self, int bucket, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  GCC_TRY(bucket_events(b, bucket, d));
  GCC_CUDA_CHECK(cudaStreamWaitEvent(b->stream[GCC_STREAM_COMPUTE], b->reduced[bucket], 0));
  return GCC_OK;
}

/* ---- events, synchronisation, graphs -------------------------------------- */

static gcc_status event(gcc_cuda_backend *b, int id, cudaEvent_t *out, gcc_diag *d) {
  if (id < 0 || id >= MAX_EVENTS)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "event %d outside [0, %d)", id, MAX_EVENTS);
  if (!b->events[id])
    GCC_CUDA_CHECK(cudaEventCreateWithFlags(&b->events[id], cudaEventDisableTiming));
  *out = b->events[id];
  return GCC_OK;
}

static gcc_status be_event_record(void *self, int id, int stream, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  cudaEvent_t e = NULL;
  GCC_TRY(event(b, id, &e, d));
  GCC_CUDA_CHECK(cudaEventRecord(e, b->stream[stream]));
  return GCC_OK;
}

static gcc_status be_stream_wait(void *self, int stream, int id, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  cudaEvent_t e = NULL;
  GCC_TRY(event(b, id, &e, d));
  GCC_CUDA_CHECK(cudaStreamWaitEvent(b->stream[stream], e, 0));
  return GCC_OK;
}

static gcc_status be_event_sync(void *self, int id, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  cudaEvent_t e = NULL;
  GCC_TRY(event(b, id, &e, d));
  GCC_CUDA_CHECK(cudaEventSynchronize(e)); /* an event never recorded: returns at once */
  return GCC_OK;
}

static gcc_status be_sync(void *self, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  GCC_CUDA_CHECK(cudaStreamSynchronize(b->stream[GCC_STREAM_COPY]));
  GCC_CUDA_CHECK(cudaStreamSynchronize(b->stream[GCC_STREAM_COMPUTE]));
  if (b->comm_stream)
    GCC_CUDA_CHECK(cudaStreamSynchronize(b->comm_stream));
  return GCC_OK;
}

/* Capture mode: cudaStreamCaptureModeThreadLocal makes any potentially
 * unsafe API call of this thread during the capture (cudaMalloc, a
 * synchronisation, a legacy-stream operation) fail instead of silently
 * corrupting the capture (CUDA Runtime API, cudaStreamBeginCapture), while
 * the data loader's threads stay free to use CUDA (pinned host memory). */
static gcc_status be_capture_begin(void *self, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  GCC_CUDA_CHECK(
      cudaStreamBeginCapture(b->stream[GCC_STREAM_COMPUTE], cudaStreamCaptureModeThreadLocal));
  return GCC_OK;
}

/* The captured graph is instantiated and handed to the plan (which
 * destroys it before its memory and kernels go); the template graph is not
 * needed after instantiation. */
static gcc_status be_capture_end(void *self, void **out, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  *out = NULL;
  cudaGraph_t g = NULL;
  GCC_CUDA_CHECK(cudaStreamEndCapture(b->stream[GCC_STREAM_COMPUTE], &g));
  cudaGraphExec_t exec = NULL;
  cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  (void)cudaGraphDestroy(g);
  GCC_CUDA_CHECK(e);
  *out = exec;
  return GCC_OK;
}

static gcc_status be_graph_launch(void *self, void *graph, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  if (!graph)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "CUDA Graph launch without a captured graph");
  GCC_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, b->stream[GCC_STREAM_COMPUTE]));
  return GCC_OK;
}

static int be_supports_op(void *self, int op) {
  (void)self;
  return gcc_cuda_supports_op(op); /* codegen's lowering decides */
}

static void be_graph_destroy(void *self, void *graph) {
  (void)self;
  if (graph)
    (void)cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
/* ---- lifetime -------------------------------------------------------------- */

gcc_status gcc_cuda_backend_create(int ordinal, gcc_cuda_backend **out, gcc_diag *d) {
  *out = NULL;
  gcc_cuda_backend *b = calloc(1, sizeof *b);
  if (!b)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (CUDA backend)");
  b->ordinal = ordinal;
  b->algo_cache_use = 1;
  gcc_status s = set_device(b, d);
  int major = 0, minor = 0;
  if (s == GCC_OK) {
    cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal);
    if (e != cudaSuccess)
      s = gcc_diag_set(d, GCC_ERR_DEVICE, "cudaDeviceGetAttribute failed: %s (%s) at %s:%d",
                       cudaGetErrorName(e), cudaGetErrorString(e), __FILE__, __LINE__);
  }
  for (int i = 0; i < 2 && s == GCC_OK; i++) {
    cudaError_t e = cudaStreamCreateWithFlags(&b->stream[i], cudaStreamNonBlocking);
    if (e != cudaSuccess)
      s = gcc_diag_set(d, GCC_ERR_DEVICE, "cudaStreamCreateWithFlags failed: %s (%s) at %s:%d",
                       cudaGetErrorName(e), cudaGetErrorString(e), __FILE__, __LINE__);
  }
  struct {
    int *v;
    enum cudaDeviceAttr a;
  } lim[] = {{&b->max_threads, cudaDevAttrMaxThreadsPerBlock},
             {&b->max_grid_x, cudaDevAttrMaxGridDimX},
             {&b->max_block_x, cudaDevAttrMaxBlockDimX},
             {&b->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin}};
  for (size_t i = 0; i < sizeof lim / sizeof lim[0] && s == GCC_OK; i++) {
    cudaError_t e = cudaDeviceGetAttribute(lim[i].v, lim[i].a, ordinal);
    if (e != cudaSuccess)
      s = gcc_diag_set(d, GCC_ERR_DEVICE, "cudaDeviceGetAttribute(%d) failed: %s (%s) at %s:%d",
                       (int)lim[i].a, cudaGetErrorName(e), cudaGetErrorString(e), __FILE__,
                       __LINE__);
  }
  if (s == GCC_OK)
    s = gcc_cublaslt_load(&b->lt_api, d);
  if (s == GCC_OK) {
    cublasStatus_t bs = b->lt_api->cublasLtCreate(&b->lt);
    if (bs != CUBLAS_STATUS_SUCCESS)
      s = gcc_diag_set(d, GCC_ERR_DEVICE, "cublasLtCreate failed: %s (%s) at %s:%d",
                       b->lt_api->cublasLtGetStatusName(bs), b->lt_api->cublasLtGetStatusString(bs),
                       __FILE__, __LINE__);
  }
  if (s == GCC_OK) {
    cudaError_t e = cudaMalloc(&b->workspace, GCC_CUBLASLT_WORKSPACE);
    if (e != cudaSuccess)
      s = gcc_diag_set(d, e == cudaErrorMemoryAllocation ? GCC_ERR_OUT_OF_MEMORY : GCC_ERR_DEVICE,
                       "cudaMalloc(cuBLASLt workspace, %u bytes) failed: %s (%s) at %s:%d",
                       GCC_CUBLASLT_WORKSPACE, cudaGetErrorName(e), cudaGetErrorString(e), __FILE__,
                       __LINE__);
  }
  if (s != GCC_OK) {
    gcc_cuda_backend_destroy(b);
    return s;
  }
  gcc_device_backend *t = &b->table;
  t->self = b;
  t->name = "cuda";
  t->arch = major * 10 + minor;
  t->alloc = be_alloc;
  t->release = be_release;
  t->mem_info = be_mem_info;
  t->host_alloc = be_host_alloc;
  t->host_release = be_host_release;
  t->copy = be_copy;
  t->memset = be_memset;
  t->load = be_load;
  t->unload = be_unload;
  t->launch = be_launch;
  t->gemm_prepare = be_gemm_prepare;
  t->gemm = be_gemm;
  t->gemm_release = be_gemm_release;
  t->library_prepare = be_library_prepare;
  t->library_op = be_library_op;
  t->collective = be_collective;
  t->collective_wait = be_collective_wait;
  t->event_record = be_event_record;
  t->stream_wait = be_stream_wait;
  t->event_sync = be_event_sync;
  t->sync = be_sync;
  t->capture_begin = be_capture_begin;
  t->capture_end = be_capture_end;
  t->graph_launch = be_graph_launch;
  t->supports_op = be_supports_op;
  t->run_node = NULL; /* plans on a GPU are lowered: kernels, GEMMs, library calls */
  t->graph_destroy = be_graph_destroy;
  t->launch_limits = be_launch_limits;
  t->timer_reserve = be_timer_reserve;
  t->timer_record = be_timer_record;
  t->timer_elapsed = be_timer_elapsed;
  t->range_push = be_range_push;
  t->range_pop = be_range_pop;
  *out = b;
  return GCC_OK;
}

const gcc_device_backend *gcc_cuda_backend_table(gcc_cuda_backend *b) {
  return &b->table;
}

void gcc_cuda_backend_destroy(gcc_cuda_backend *b) {
  if (!b)
    return;
  for (int i = 0; i < 2; i++)
    if (b->stream[i])
      (void)cudaStreamSynchronize(b->stream[i]);
  gcc_cudnn_cache_destroy(b->cudnn_cache);
  if (b->cudnn)
    gcc_cudnn_handle_destroy(b->cudnn);
  for (int i = 0; i < MAX_EVENTS; i++)
    if (b->events[i])
      (void)cudaEventDestroy(b->events[i]);
  for (int i = 0; i < b->n_timers; i++)
    if (b->timers[i])
      (void)cudaEventDestroy(b->timers[i]);
  free(b->timers);
  if (b->comm_stream) {
    (void)cudaStreamSynchronize(b->comm_stream);
    (void)cudaStreamDestroy(b->comm_stream);
  }
  for (int i = 0; i < MAX_BUCKETS; i++) {
    if (b->grads_ready[i])
      (void)cudaEventDestroy(b->grads_ready[i]);
    if (b->reduced[i])
      (void)cudaEventDestroy(b->reduced[i]);
  }
  if (b->workspace)
    (void)cudaFree(b->workspace);
  if (b->lt)
    (void)b->lt_api->cublasLtDestroy(b->lt);
  for (int i = 0; i < 2; i++)
    if (b->stream[i])
      (void)cudaStreamDestroy(b->stream[i]);
  free(b->algo_cache_dir);
  free(b);
}

gcc_status gcc_cuda_backend_set_algo_cache(gcc_cuda_backend *b, const char *dir, int use_cache,
                                           gcc_diag *d) {
  char *copy = NULL;
  if (dir && !(copy = strdup(dir)))
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (cuDNN choice cache)");
  free(b->algo_cache_dir);
  b->algo_cache_dir = copy;
  b->algo_cache_use = use_cache;
  return GCC_OK;
}

void gcc_cuda_backend_conv_report(const gcc_cuda_backend *b, FILE *f) {
  int n = b->cudnn_cache ? gcc_cudnn_cache_conv_count(b->cudnn_cache) : 0, shown = 0;
  double chosen = 0, fastest = 0;
  int timed = 1;
  for (int i = 0; i < n; i++) {
    const gcc_cudnn_conv *c = gcc_cudnn_cache_conv_at(b->cudnn_cache, i);
    if (!gcc_cudnn_conv_prepared(c))
      continue; /* a ConvGradBias shape: no algorithm */
    const gcc_conv2d_shape *s = gcc_cudnn_conv_shape(c);
    char sum[512];
    gcc_cudnn_conv_choice_summary(c, sum, sizeof sum);
    if (!shown++)
      fprintf(f,
              "cuDNN convolutions (%s algorithms; %d shapes timed, %d from the choice "
              "cache):\n",
              s->nondeterministic ? "any" : "deterministic", b->algo_searches, b->algo_hits);
    fprintf(f,
            "  X %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " W %" PRId64 "x%" PRId64 "x%" PRId64
            " s%" PRId64 " g%" PRId64 ": %s\n",
            s->n, s->c, s->h, s->w, s->m, s->win.kh, s->win.kw, s->win.sh,
            s->group > 0 ? s->group : 1, sum);
    float tc[3], tf[3];
    gcc_cudnn_conv_choice_times(c, tc, tf);
    for (int k = 0; k < 3; k++) {
      if (tc[k] < 0)
        timed = 0;
      chosen += tc[k];
      fastest += tf[k];
    }
  }
  if (shown && timed)
    fprintf(f,
            "  deterministic algorithms: %.3f ms per pass over these shapes (3 directions "
            "each) against %.3f ms for the fastest of any (%+.1f%%)\n",
            chosen, fastest, fastest > 0 ? 100.0 * (chosen - fastest) / fastest : 0.0);
  else if (shown)
    fprintf(f, "  the cost of --deterministic is unmeasured: some shapes were chosen by "
               "heuristics (cudnnFind failed)\n");
  if (b->relu_fused + b->relu_unfused)
    fprintf(f,
            "  Conv + ReLU: %d run as one cudnnConvolutionBiasActivationForward "
            "(IMPLICIT_PRECOMP_GEMM with a bias), %d as the convolution and "
            "cudnnActivationForward\n",
            b->relu_fused, b->relu_unfused);
  if (b->algo_note[0])
    fprintf(f, "  %s\n", b->algo_note);
}
