/* cuda_backend.c - gcc_device_backend on the CUDA runtime API and cuBLASLt (cuda_backend.h). */
#include "runtime/cuda/cuda_backend.h"

#include <stdlib.h>
#include <string.h>

#include "codegen/lowering.h"
#include "graph/ops.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cudnn_conv.h"

#define MAX_EVENTS 8 /* backend.h: input-ready and step-done per slot, read-back */
#define MAX_GEMMS 64

typedef struct lt_key {
  int trans_a, trans_b, epilogue;
  int64_t m, n, k, lda, ldb, ldd, aux_ld;
  float alpha, beta;
  int has_c;
} lt_key;

typedef struct lt_entry {
  lt_key key;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
} lt_entry;

struct gcc_cuda_backend {
  gcc_device_backend table;
  int ordinal;
  cudaStream_t stream[2];
  cudaEvent_t events[MAX_EVENTS];
  cublasLtHandle_t lt;
  void *workspace;
  lt_entry gemms[MAX_GEMMS];
  int n_gemms;
  cudaGraph_t graph[2];
  cudaGraphExec_t exec[2];
  /* cuDNN, created on the first convolution or pooling */
  cudnnHandle_t cudnn;
  gcc_cudnn_cache *cudnn_cache;
  void *cudnn_ws;        /* workspace of the chosen algorithms, grown before capture */
  size_t cudnn_ws_bytes;
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

static gcc_status be_memset(void *self, void *dst, int byte, size_t bytes, int stream, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  GCC_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, b->stream[stream]));
  return GCC_OK;
}

static gcc_status be_load(void *self, const gcc_kernel_set *ks, const gcc_nvrtc_output *img,
                          void **module, void **kernels, gcc_diag *d) {
  GCC_TRY(set_device(self, d));
  cudaLibrary_t lib = NULL;
  cudaError_t e = cudaErrorInvalidValue;
  if (img->cubin && img->cubin_size)
    e = cudaLibraryLoadData(&lib, img->cubin, NULL, NULL, 0, NULL, NULL, 0);
  if (e != cudaSuccess && img->ptx &&
      (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidSource ||
       e == cudaErrorUnsupportedPtxVersion || e == cudaErrorInvalidValue ||
       e == cudaErrorInvalidKernelImage)) {
    (void)cudaGetLastError();
    GCC_CUDA_CHECK(cudaLibraryLoadData(&lib, img->ptx, NULL, NULL, 0, NULL, NULL, 0));
  } else {
    GCC_CUDA_CHECK(e);
  }
  for (int i = 0; i < ks->n_kernels; i++) {
    cudaKernel_t k = NULL;
    cudaError_t ke = cudaLibraryGetKernel(&k, lib, ks->kernels[i].name);
    if (ke != cudaSuccess) {
      (void)cudaLibraryUnload(lib);
      return gcc_diag_set(d, GCC_ERR_DEVICE, "cudaLibraryGetKernel(%s) failed: %s (%s) at %s:%d",
                          ks->kernels[i].name, cudaGetErrorName(ke), cudaGetErrorString(ke),
                          __FILE__, __LINE__);
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

static gcc_status be_launch(void *self, void *kernel, const gcc_kernel_info *k, void **args,
                            gcc_diag *d) {
  gcc_cuda_backend *b = self;
  /* a cudaKernel_t is accepted by cudaLaunchKernel in place of a function */
  GCC_CUDA_CHECK(cudaLaunchKernel((const void *)kernel, dim3_grid(k), dim3_block(k), args, 0,
                                  b->stream[GCC_STREAM_COMPUTE]));
  return GCC_OK;
}

/* ---- cuBLASLt ------------------------------------------------------------ */

static void lt_free(lt_entry *e) {
  if (e->op)
    cublasLtMatmulDescDestroy(e->op);
  if (e->a)
    cublasLtMatrixLayoutDestroy(e->a);
  if (e->b)
    cublasLtMatrixLayoutDestroy(e->b);
  if (e->c)
    cublasLtMatrixLayoutDestroy(e->c);
  memset(e, 0, sizeof *e);
}

static gcc_status lt_prepare(gcc_cuda_backend *b, const gcc_colmajor_gemm *g, lt_entry *e,
                             gcc_diag *d) {
  cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epi = (cublasLtEpilogue_t)g->epilogue;
  GCC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  GCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  GCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  GCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (g->aux_ld > 0)
    GCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &g->aux_ld, sizeof g->aux_ld));
  /* stored shapes: op(A) is m x k, so A is m x k (N) or k x m (T) */
  GCC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&e->a, CUDA_R_32F, g->trans_a ? g->k : g->m,
                                              g->trans_a ? g->m : g->k, g->lda));
  GCC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&e->b, CUDA_R_32F, g->trans_b ? g->n : g->k,
                                              g->trans_b ? g->k : g->n, g->ldb));
  GCC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&e->c, CUDA_R_32F, g->m, g->n, g->ldd));
  cublasLtMatmulPreference_t pref;
  GCC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = GCC_CUBLASLT_WORKSPACE;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(b->lt, e->op, e->a, e->b, e->c, e->c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  GCC_CUBLAS_CHECK(st);
  if (found == 0)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "cuBLASLt has no algorithm for a %lld x %lld x %lld float32 GEMM "
                        "(trans %d%d) with %s on cuda:%d",
                        (long long)g->m, (long long)g->n, (long long)g->k, g->trans_a, g->trans_b,
                        gcc_epilogue_name(g->epilogue), b->ordinal);
  e->algo = res.algo;
  return GCC_OK;
}

static gcc_status be_gemm(void *self, const gcc_colmajor_gemm *g, const void *a, const void *bm,
                          const void *c, void *dst, void *bias, void *aux, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  lt_key key;
  memset(&key, 0, sizeof key);
  key.trans_a = g->trans_a;
  key.trans_b = g->trans_b;
  key.epilogue = (int)g->epilogue;
  key.m = g->m;
  key.n = g->n;
  key.k = g->k;
  key.lda = g->lda;
  key.ldb = g->ldb;
  key.ldd = g->ldd;
  key.aux_ld = g->aux_ld;
  key.alpha = g->alpha;
  key.beta = g->beta;
  key.has_c = g->c_value >= 0;
  lt_entry *e = NULL;
  for (int i = 0; i < b->n_gemms && !e; i++)
    if (memcmp(&b->gemms[i].key, &key, sizeof key) == 0)
      e = &b->gemms[i];
  if (!e) {
    if (b->n_gemms == MAX_GEMMS) /* rare: many shapes; drop the oldest */
      lt_free(&b->gemms[--b->n_gemms]);
    e = &b->gemms[b->n_gemms];
    memset(e, 0, sizeof *e);
    gcc_status s = lt_prepare(b, g, e, d);
    if (s != GCC_OK) {
      lt_free(e);
      return s;
    }
    e->key = key;
    b->n_gemms++;
  }
  if (bias)
    GCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof bias));
  if (aux)
    GCC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &aux, sizeof aux));
  float beta = key.has_c ? g->beta : 0.0f;
  const void *cp = key.has_c && c ? c : dst;
  GCC_CUBLAS_CHECK(cublasLtMatmul(b->lt, e->op, &g->alpha, a, e->a, bm, e->b, &beta, cp, e->c, dst,
                                  e->c, &e->algo, b->workspace, GCC_CUBLASLT_WORKSPACE,
                                  b->stream[GCC_STREAM_COMPUTE]));
  return GCC_OK;
}

/* ---- cuDNN ------------------------------------------------------------------ */

static gcc_status cudnn_ready(gcc_cuda_backend *b, gcc_diag *d) {
  if (b->cudnn)
    return GCC_OK;
  GCC_TRY(gcc_cudnn_handle_create(&b->cudnn, d));
  GCC_CUDNN_TRY(cudnnSetStream(b->cudnn, b->stream[GCC_STREAM_COMPUTE]), d);
  return gcc_cudnn_cache_create(&b->cudnn_cache, d);
}

/* cuDNN's algorithm choice caps the workspace at this (bytes) */
#define GCC_CUDNN_WORKSPACE_CAP ((size_t)256 << 20)

/* The device address at operand slot `slot` (cuda_ops.h), NULL for none. */
static void *slot_ptr(int slot, void *const *in, void *const *out) {
  return slot > 0 ? in[slot - 1] : slot < 0 ? out[-slot - 1] : NULL;
}

static gcc_status be_library_op(void *self, const gcc_graph *g, int node, void *const *in,
                                void *const *out, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  GCC_TRY(cudnn_ready(b, d));
  const gcc_node *n = &g->nodes[node];
  const gcc_cuda_op *co = gcc_cuda_op_of(n->op);
  gcc_cuda_call call = co ? co->call : GCC_CUDA_CALL_NONE;
#define P(slot) slot_ptr(co->slot, in, out)
  if (call == GCC_CUDA_CALL_CONV_FORWARD || call == GCC_CUDA_CALL_CONV_BACKWARD_DATA ||
      call == GCC_CUDA_CALL_CONV_BACKWARD_FILTER || call == GCC_CUDA_CALL_CONV_BACKWARD_BIAS ||
      call == GCC_CUDA_CALL_CONV_TRANSPOSE) {
    gcc_conv2d_shape sh;
    if (call == GCC_CUDA_CALL_CONV_BACKWARD_BIAS) {
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
    gcc_cudnn_conv *c = NULL;
    GCC_TRY(gcc_cudnn_cache_conv(b->cudnn_cache, &sh, &c, d));
    if (call == GCC_CUDA_CALL_CONV_BACKWARD_BIAS)
      return gcc_cudnn_conv_backward_bias(c, b->cudnn, P(dy), P(db), d);
    if (!gcc_cudnn_conv_prepared(c)) { /* first use: before any capture */
      GCC_TRY(gcc_cudnn_conv_prepare(c, b->cudnn, GCC_CUDNN_WORKSPACE_CAP, d));
      size_t need = gcc_cudnn_conv_workspace_bytes(c);
      if (need > b->cudnn_ws_bytes) {
        GCC_CUDA_CHECK(cudaStreamSynchronize(b->stream[GCC_STREAM_COMPUTE]));
        if (b->cudnn_ws)
          GCC_CUDA_CHECK(cudaFree(b->cudnn_ws));
        b->cudnn_ws = NULL;
        b->cudnn_ws_bytes = 0;
        GCC_CUDA_CHECK(cudaMalloc(&b->cudnn_ws, need));
        b->cudnn_ws_bytes = need;
      }
    }
    if (call == GCC_CUDA_CALL_CONV_FORWARD)
      return gcc_cudnn_conv_forward(c, b->cudnn, P(x), P(w), n->n_inputs > 2 ? P(b) : NULL,
                                    P(y), b->cudnn_ws, b->cudnn_ws_bytes, d);
    if (call == GCC_CUDA_CALL_CONV_TRANSPOSE)
      return gcc_cudnn_conv_transpose(c, b->cudnn, P(x), P(w), n->n_inputs > 2 ? P(b) : NULL,
                                      P(y), b->cudnn_ws, b->cudnn_ws_bytes, d);
    if (call == GCC_CUDA_CALL_CONV_BACKWARD_DATA)
      return gcc_cudnn_conv_backward_data(c, b->cudnn, P(dy), P(w), P(dx), b->cudnn_ws,
                                          b->cudnn_ws_bytes, d);
    return gcc_cudnn_conv_backward_filter(c, b->cudnn, P(dy), P(x), P(dw), b->cudnn_ws,
                                          b->cudnn_ws_bytes, d);
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
  char desc[600];
  return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: %s has no library call on CUDA", g->source,
                      gcc_node_desc(g, node, desc, sizeof desc));
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
  return GCC_OK;
}

static gcc_status be_capture_begin(void *self, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  GCC_CUDA_CHECK(cudaStreamBeginCapture(b->stream[GCC_STREAM_COMPUTE],
                                        cudaStreamCaptureModeThreadLocal));
  return GCC_OK;
}

static gcc_status be_capture_end(void *self, int slot, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  cudaGraph_t g = NULL;
  GCC_CUDA_CHECK(cudaStreamEndCapture(b->stream[GCC_STREAM_COMPUTE], &g));
  if (b->exec[slot]) {
    (void)cudaGraphExecDestroy(b->exec[slot]);
    b->exec[slot] = NULL;
  }
  if (b->graph[slot])
    (void)cudaGraphDestroy(b->graph[slot]);
  b->graph[slot] = g;
  GCC_CUDA_CHECK(cudaGraphInstantiate(&b->exec[slot], g, 0));
  return GCC_OK;
}

static gcc_status be_graph_launch(void *self, int slot, gcc_diag *d) {
  gcc_cuda_backend *b = self;
  if (!b->exec[slot])
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "CUDA Graph %d was never captured", slot);
  GCC_CUDA_CHECK(cudaGraphLaunch(b->exec[slot], b->stream[GCC_STREAM_COMPUTE]));
  return GCC_OK;
}

static int be_supports_op(void *self, int op) {
  (void)self;
  return gcc_cuda_supports_op(op); /* codegen's lowering decides */
}

/* ---- lifetime -------------------------------------------------------------- */

gcc_status gcc_cuda_backend_create(int ordinal, gcc_cuda_backend **out, gcc_diag *d) {
  *out = NULL;
  gcc_cuda_backend *b = calloc(1, sizeof *b);
  if (!b)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (CUDA backend)");
  b->ordinal = ordinal;
  gcc_status s = set_device(b, d);
  for (int i = 0; i < 2 && s == GCC_OK; i++) {
    cudaError_t e = cudaStreamCreateWithFlags(&b->stream[i], cudaStreamNonBlocking);
    if (e != cudaSuccess)
      s = gcc_diag_set(d, GCC_ERR_DEVICE, "cudaStreamCreateWithFlags failed: %s (%s) at %s:%d",
                       cudaGetErrorName(e), cudaGetErrorString(e), __FILE__, __LINE__);
  }
  if (s == GCC_OK) {
    cublasStatus_t bs = cublasLtCreate(&b->lt);
    if (bs != CUBLAS_STATUS_SUCCESS)
      s = gcc_diag_set(d, GCC_ERR_DEVICE, "cublasLtCreate failed: %s (%s) at %s:%d",
                       cublasGetStatusName(bs), cublasGetStatusString(bs), __FILE__, __LINE__);
  }
  if (s == GCC_OK) {
    cudaError_t e = cudaMalloc(&b->workspace, GCC_CUBLASLT_WORKSPACE);
    if (e != cudaSuccess)
      s = gcc_diag_set(d, e == cudaErrorMemoryAllocation ? GCC_ERR_OUT_OF_MEMORY : GCC_ERR_DEVICE,
                       "cudaMalloc(cuBLASLt workspace, %u bytes) failed: %s (%s) at %s:%d",
                       GCC_CUBLASLT_WORKSPACE, cudaGetErrorName(e), cudaGetErrorString(e),
                       __FILE__, __LINE__);
  }
  if (s != GCC_OK) {
    gcc_cuda_backend_destroy(b);
    return s;
  }
  gcc_device_backend *t = &b->table;
  t->self = b;
  t->name = "cuda";
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
  t->gemm = be_gemm;
  t->library_op = be_library_op;
  t->event_record = be_event_record;
  t->stream_wait = be_stream_wait;
  t->event_sync = be_event_sync;
  t->sync = be_sync;
  t->capture_begin = be_capture_begin;
  t->capture_end = be_capture_end;
  t->graph_launch = be_graph_launch;
  t->supports_op = be_supports_op;
  t->run_node = NULL; /* plans on a GPU are lowered: kernels, GEMMs, library calls */
  *out = b;
  return GCC_OK;
}

const gcc_device_backend *gcc_cuda_backend_table(gcc_cuda_backend *b) { return &b->table; }

void gcc_cuda_backend_destroy(gcc_cuda_backend *b) {
  if (!b)
    return;
  for (int i = 0; i < 2; i++)
    if (b->stream[i])
      (void)cudaStreamSynchronize(b->stream[i]);
  for (int i = 0; i < 2; i++) {
    if (b->exec[i])
      (void)cudaGraphExecDestroy(b->exec[i]);
    if (b->graph[i])
      (void)cudaGraphDestroy(b->graph[i]);
  }
  for (int i = 0; i < b->n_gemms; i++)
    lt_free(&b->gemms[i]);
  gcc_cudnn_cache_destroy(b->cudnn_cache);
  if (b->cudnn)
    gcc_cudnn_handle_destroy(b->cudnn);
  if (b->cudnn_ws)
    (void)cudaFree(b->cudnn_ws);
  for (int i = 0; i < MAX_EVENTS; i++)
    if (b->events[i])
      (void)cudaEventDestroy(b->events[i]);
  if (b->workspace)
    (void)cudaFree(b->workspace);
  if (b->lt)
    (void)cublasLtDestroy(b->lt);
  for (int i = 0; i < 2; i++)
    if (b->stream[i])
      (void)cudaStreamDestroy(b->stream[i]);
  free(b);
}
