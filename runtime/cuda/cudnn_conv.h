/*
 * cudnn_conv.h - convolution and pooling on a CUDA device through cuDNN 9
 * (the LIBRARY lowering of codegen/lowering.h, calls by runtime/cuda/cuda_ops.h).
 *
 * Semantics: ONNX Conv (grouped: cudnnSetConvolutionGroupCount), ConvTranspose /
 * MaxPool / AveragePool in 2-D, NCHW or NHWC (the `nhwc` of a shape), float32, as graph/ops.h defines them (cross-correlation, as PyTorch's
 * Conv2d and cuDNN's CUDNN_CROSS_CORRELATION). The calls are cuDNN's legacy
 * ("v7") API, still in cuDNN 9 (cudnn_cnn.h, cudnn_ops.h; NVIDIA, "cuDNN API
 * Reference", version 9): cudnnConvolutionForward, ...BackwardData,
 * ...BackwardFilter, ...BackwardBias, cudnnPoolingForward/Backward.
 *
 * One gcc_cudnn_conv (or gcc_cudnn_pool) describes one shape: its tensor,
 * filter and convolution descriptors are made once, and the output shape
 * cuDNN computes is checked against our shape inference
 * (gcc_window_out_dim). The algorithms are chosen once per shape, with a
 * handle, by gcc_cudnn_conv_prepare: of cudnnGetConvolution*Algorithm_v7's
 * candidates (asked with CUDNN_FMA_MATH set: float32, no TF32), the fastest
 * whose status is success, that is CUDNN_DETERMINISTIC (the atomics-based
 * backward algorithms are not: results would vary run to run), that
 * computes in CUDNN_FMA_MATH and whose workspace fits the caller's cap;
 * the chosen result's math type is set on that direction's convolution
 * descriptor (cudnnSetConvolutionMathType), and its workspace is asked of
 * cudnnGet*WorkspaceSize with that math type set. A
 * gcc_cudnn_cache holds one gcc_cudnn_conv per distinct shape, so a plan
 * with several convolutions of the same shape (or a training and an
 * evaluation plan) shares them.
 *
 * Every cuDNN call is checked by GCC_CUDNN_TRY, which names the call, the
 * file and the line in a GCC_ERR_DEVICE diagnostic. Nothing here exits or
 * prints.
 *
 * Preconditions of the functions that run on the device (they return
 * GCC_ERR_INVALID_ARGUMENT, naming what is wrong, instead of calling cuDNN
 * when a checkable one fails):
 *  - `handle` is a cudnnHandle_t made by gcc_cudnn_handle_create (or
 *    cudnnCreate) and bound to the stream the caller runs on
 *    (cudnnSetStream); calls are asynchronous on that stream;
 *  - tensors are device pointers of float32 in the shapes the descriptor
 *    was made for (X [n, c, h, w], W [m, c, kh, kw], B [m], Y [n, m, oh,
 *    ow]), not NULL;
 *  - the convolution was prepared (gcc_cudnn_conv_prepare) with a handle of
 *    the same device, and `workspace` holds at least
 *    gcc_cudnn_conv_workspace_bytes() bytes of device memory (NULL is
 *    accepted when that is 0).
 */
#ifndef GCC_RUNTIME_CUDNN_CONV_H
#define GCC_RUNTIME_CUDNN_CONV_H

#include <stddef.h>
#include <stdint.h>

#include <cudnn.h>

#include "graph/ir.h"
#include "graph/ops.h"
#include "runtime/cuda/cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Evaluates a cuDNN call; on failure, returns from the enclosing function
 * GCC_ERR_DEVICE with "FILE:LINE: CALL failed: cuDNN status (code)". */
#define GCC_CUDNN_TRY(call, diag)                                                                  \
  do {                                                                                             \
    cudnnStatus_t gcc_cudnn_st_ = (call);                                                          \
    if (gcc_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                                     \
      return gcc_cudnn_status(gcc_cudnn_st_, #call, __FILE__, __LINE__, (diag));                   \
  } while (0)

/* The diagnostic of a failed cuDNN call (GCC_ERR_DEVICE; GCC_ERR_OUT_OF_MEMORY
 * for CUDNN_STATUS_ALLOC_FAILED). */
gcc_status gcc_cudnn_status(cudnnStatus_t st, const char *call, const char *file, int line,
                            gcc_diag *d);

/* cudnnCreate. Without a usable GPU (no driver) cuDNN answers
 * CUDNN_STATUS_NOT_INITIALIZED: GCC_ERR_DEVICE naming cudnnCreate. */
gcc_status gcc_cudnn_handle_create(cudnnHandle_t *out, gcc_diag *d);
void gcc_cudnn_handle_destroy(cudnnHandle_t h);

/* ---- convolution ------------------------------------------------------ */

/* The shape of one convolution: X [n, c, h, w] and W [m, c, kh, kw] with
 * the window's strides, pads and dilations (the kernel size of `win` is
 * that of W). */
typedef struct gcc_conv2d_shape {
  int64_t n, c, h, w, m;
  gcc_window2d win;
  int64_t group; /* filter W [m, c / group, kh, kw]; 0 means 1 */
  /* --precision tf32: CUDNN_TENSOR_OP_MATH (TF32 tensor cores on float32
   * data, PyTorch's torch.backends.cudnn.allow_tf32); 0: CUDNN_FMA_MATH */
  int tf32;
  /* the dtype of X, W, Y and the bias (float32; bfloat16 / float16 in a
   * mixed-precision plan, computed in float32: CUDNN_DATA_FLOAT convolution
   * descriptors, tensor-op math); 0 reads as float32 */
  gcc_dtype dtype;
  /* --no-deterministic: 1 lets the algorithm choice take candidates cuDNN
   * reports CUDNN_NON_DETERMINISTIC (the atomics-based backward algorithms:
   * results vary run to run); 0, the default (--deterministic), keeps only
   * CUDNN_DETERMINISTIC ones (PyTorch's torch.backends.cudnn.deterministic) */
  int nondeterministic;
  /* 1: X, Y, dX, dY are NHWC (channels-last, CUDNN_TENSOR_NHWC) and W, dW
   * are KRSC ([m, kh, kw, c / group] in memory: the filter descriptor's
   * CUDNN_TENSOR_NHWC), as the layout pass (passes/layout.c) lays them
   * out; shapes above stay in N, C, H, W order. 0: NCHW and KCRS */
  int nhwc;
} gcc_conv2d_shape;

/* The shape of a Conv, ConvGradData, ConvGradFilter or ConvTranspose node
 * of a graph with inferred shapes (X, W, the window and the group from its
 * inputs, outputs and attributes, tf32 and nondeterministic from the
 * graph's precision and nondeterministic, nhwc from X's layout; a ConvTranspose is the data gradient of
 * the convolution whose input X is its output). GCC_ERR_INVALID_ARGUMENT
 * for another op. */
gcc_status gcc_conv2d_shape_of(const gcc_graph *g, int node, gcc_conv2d_shape *out, gcc_diag *d);

typedef struct gcc_cudnn_conv gcc_cudnn_conv;

/* Makes the descriptors of `shape` (needs no GPU) and checks cuDNN's output
 * dims (cudnnGetConvolution2dForwardOutputDim) against ours. Errors:
 * GCC_ERR_INVALID_ARGUMENT (a size <= 0 or above INT32_MAX),
 * GCC_ERR_UNSUPPORTED (asymmetric pads: cuDNN takes one pad per dimension),
 * GCC_ERR_INTERNAL (cuDNN's output shape differs from ours; both named),
 * GCC_ERR_DEVICE (a descriptor call failed), GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_cudnn_conv_create(const gcc_conv2d_shape *shape, gcc_cudnn_conv **out, gcc_diag *d);
void gcc_cudnn_conv_destroy(gcc_cudnn_conv *c);

/* Y's dims [n, m, oh, ow], as cuDNN computed them. */
void gcc_cudnn_conv_output_dims(const gcc_cudnn_conv *c, int64_t dims[4]);
const gcc_conv2d_shape *gcc_cudnn_conv_shape(const gcc_cudnn_conv *c);

/* Chooses the forward, backward-data and backward-filter algorithms for
 * this shape, once (later calls return at once): deterministic unless the
 * shape says nondeterministic, float32 FMA (tensor-op math under tf32 or
 * 16-bit data) and with a workspace of at most `workspace_cap` bytes, the
 * fastest by cudnnFindConvolution*Algorithm's timing (else the first of
 * cudnnGetConvolution*Algorithm_v7's candidates); sets each chosen
 * math type on its direction's descriptor and records each one's workspace
 * as cudnnGetConvolution*WorkspaceSize gives it for that algorithm and math
 * type. Needs a handle (a GPU). On any error the shape stays unprepared.
 * Errors: GCC_ERR_INVALID_ARGUMENT (NULL handle), GCC_ERR_DEVICE (a cuDNN
 * call failed, or no algorithm qualifies: the message names the direction
 * and, if only the cap was in the way, the smallest workspace). */
gcc_status gcc_cudnn_conv_prepare(gcc_cudnn_conv *c, cudnnHandle_t handle, size_t workspace_cap,
                                  gcc_diag *d);
int gcc_cudnn_conv_prepared(const gcc_cudnn_conv *c);

/* One candidate algorithm of cudnnGetConvolution*Algorithm_v7, in the
 * fields the three directions' *AlgoPerf_t structs share. */
typedef struct gcc_cudnn_algo_perf {
  int algo;
  cudnnStatus_t status;
  size_t memory; /* bytes of workspace */
  cudnnDeterminism_t determinism;
  cudnnMathType_t math_type;
  /* milliseconds cudnnFindConvolution*Algorithm measured; < 0 when the
   * candidate came from a heuristic (not timed); 0 in a zeroed struct */
  float time_ms;
} gcc_cudnn_algo_perf;

/* The candidate to use among perf[0 .. n) (cuDNN lists them fastest
 * first): the first with status CUDNN_STATUS_SUCCESS, determinism
 * CUDNN_DETERMINISTIC, math type CUDNN_FMA_MATH and memory <= cap; or -1.
 * *smallest is the least workspace of the candidates that qualified but
 * for the cap (SIZE_MAX if none). A pure function. */
int gcc_cudnn_pick_algo(const gcc_cudnn_algo_perf *perf, int n, size_t cap, size_t *smallest);
/* The same, with tf32 = 1 also taking math type CUDNN_TENSOR_OP_MATH
 * (--precision tf32: TF32 tensor cores on float32 data). */
int gcc_cudnn_pick_algo_math(const gcc_cudnn_algo_perf *perf, int n, size_t cap, size_t *smallest,
                             int tf32);

/* The general filter: as gcc_cudnn_pick_algo_math, and with deterministic
 * = 0 (--no-deterministic) CUDNN_NON_DETERMINISTIC candidates qualify too.
 * Among the qualifying candidates that fit the cap the one with the least
 * measured time (time_ms >= 0) is taken, the first in the list on ties and
 * when none was timed (heuristic lists are ordered by expected speed). */
int gcc_cudnn_pick_algo_opts(const gcc_cudnn_algo_perf *perf, int n, size_t cap, size_t *smallest,
                             int tf32, int deterministic);

/* Chooses the three directions' algorithms from their candidates
 * (gcc_cudnn_pick_algo), sets each chosen candidate's math type on its
 * direction's descriptor and commits them together (workspace sizes: the
 * candidates' estimates until gcc_cudnn_conv_prepare asks cuDNN);
 * gcc_cudnn_conv_prepare calls it with cuDNN's lists. Needs no GPU. Errors: GCC_ERR_DEVICE when a
 * direction has no candidate (the message names the direction and the
 * smallest workspace that would have done). */
gcc_status gcc_cudnn_conv_choose(gcc_cudnn_conv *c, const gcc_cudnn_algo_perf *fwd, int n_fwd,
                                 const gcc_cudnn_algo_perf *bwd_data, int n_bwd_data,
                                 const gcc_cudnn_algo_perf *bwd_filter, int n_bwd_filter,
                                 size_t workspace_cap, gcc_diag *d);

/* The math type (cudnnMathType_t) set on the forward, backward-data and
 * backward-filter convolution descriptors (-1 where it cannot be read). */
void gcc_cudnn_conv_math_types(const gcc_cudnn_conv *c, int out[3]);

/* ---- algorithm choice by timing, cached on disk ------------------------ */

/* The candidates of the three directions, as one source gives them. */
enum { GCC_CUDNN_MAX_ALGOS = 16 };
typedef struct gcc_cudnn_candidates {
  gcc_cudnn_algo_perf fwd[GCC_CUDNN_MAX_ALGOS], bwd_data[GCC_CUDNN_MAX_ALGOS],
      bwd_filter[GCC_CUDNN_MAX_ALGOS];
  int n_fwd, n_bwd_data, n_bwd_filter;
  /* per direction (forward, backward-data, backward-filter): 1 when the
   * list is cudnnFindConvolution*Algorithm's (timed), 0 for
   * cudnnGetConvolution*Algorithm_v7's (heuristics, its fallback) */
  int timed[3];
} gcc_cudnn_candidates;

/* A source of candidates for convolution `c`: gcc_cudnn_conv_prepare's asks
 * cuDNN (Find, else the v7 heuristics, per direction); tests give lists. */
typedef gcc_status (*gcc_cudnn_find_fn)(void *user, const gcc_cudnn_conv *c,
                                        gcc_cudnn_candidates *out, gcc_diag *d);

/* Which GPU and cuDNN a choice was made on: part of the disk cache's key. */
typedef struct gcc_cudnn_gpu_id {
  char name[256];       /* cudaDeviceProp.name */
  int sm;               /* compute capability, major * 10 + minor */
  size_t cudnn_version; /* cudnnGetVersion(), e.g. 91400 */
} gcc_cudnn_gpu_id;

/* The disk cache of algorithm choices ("beside the kernel cache"): dir is
 * the directory (NULL: the kernel cache's, graph/util.h gcc_cache_dir:
 * $XDG_CACHE_HOME/gcc-train or $HOME/.cache/gcc-train); use_cache 0 neither reads nor writes it
 * (--no-kernel-cache). */
typedef struct gcc_cudnn_choice_cache {
  const char *dir;
  int use_cache;
} gcc_cudnn_choice_cache;

/* The disk cache's key of convolution `c` on `gpu` with a workspace cap of
 * `cap` bytes, as one line of text into buf: the GPU's name and SM, cuDNN's
 * version, and the full descriptor: X's and W's dims, dtype, layout (NCHW,
 * or NHWC with KRSC filters),
 * pads, strides, dilations, groups, math (fma, tf32, tensor-op for 16-bit
 * data), determinism and the cap. Errors: GCC_ERR_INVALID_ARGUMENT when it
 * does not fit `size`. */
gcc_status gcc_cudnn_choice_key(const gcc_cudnn_conv *c, const gcc_cudnn_gpu_id *gpu, size_t cap,
                                char *buf, size_t size, gcc_diag *d);

/* The path of the key's entry: "<dir>/cudnn-<16 hex digits of the key's
 * FNV-1a 64-bit hash>.choice" (the entry holds the whole key, compared on
 * reading: another key of the same hash is a miss). */
gcc_status gcc_cudnn_choice_path(const gcc_cudnn_choice_cache *cache, const char *key, char *buf,
                                 size_t size, gcc_diag *d);

/* What one choice did (gcc_cudnn_conv_choose_cached). */
typedef struct gcc_cudnn_choice_info {
  int hit;      /* 1: read from the disk cache, no candidates asked for */
  int searched; /* 1: `find` was called */
  /* a disk-cache problem that did not stop the choice (corrupt entry
   * ignored, directory not writable, ...), else "" */
  char note[600];
} gcc_cudnn_choice_info;

/* Chooses the three directions' algorithms of `c` (gcc_cudnn_conv_choose)
 * through the disk cache: on a hit the stored choice is committed and
 * `find` is not called (no timing); on a miss (no entry, another key, or an
 * entry that is corrupt: bad header, checksum, field or algorithm number,
 * truncated; info->note says so and it is replaced) `find` gives the
 * candidates, gcc_cudnn_pick_algo_opts picks (determinism from the shape's
 * `nondeterministic`, math from its precision), and the choice is written
 * (to a temporary file renamed into place). With the choice the fastest
 * time of any qualifying candidate regardless of determinism is kept
 * (gcc_cudnn_conv_choice_times), so the cost of --deterministic is known.
 * A cache that cannot be read or written never fails the choice. Needs no
 * GPU itself. Errors: those of `find` and gcc_cudnn_conv_choose. */
gcc_status gcc_cudnn_conv_choose_cached(gcc_cudnn_conv *c, const gcc_cudnn_gpu_id *gpu,
                                        const gcc_cudnn_choice_cache *cache, gcc_cudnn_find_fn find,
                                        void *user, size_t workspace_cap,
                                        gcc_cudnn_choice_info *info, gcc_diag *d);

/* Per direction (forward, backward-data, backward-filter) of a chosen
 * convolution: chosen_ms, the measured time of the chosen algorithm, and
 * fastest_ms, the least measured time of any candidate that qualified but
 * for determinism (equal when --deterministic costs nothing); both -1 when
 * the direction's candidates were not timed (heuristics) or before a
 * choice. */
void gcc_cudnn_conv_choice_times(const gcc_cudnn_conv *c, float chosen_ms[3], float fastest_ms[3]);

/* cuDNN's name of an algorithm of one direction (0 forward, 1 backward-
 * data, 2 backward-filter), e.g. "IMPLICIT_PRECOMP_GEMM", "ALGO_1"; "?"
 * for a number out of range. */
const char *gcc_cudnn_algo_name(int direction, int algo);

/* One line describing the choice: per direction the algorithm, math type,
 * workspace and, where timed, its time and the fastest non-deterministic
 * one's, e.g. "fwd IMPLICIT_PRECOMP_GEMM fma ws 0 0.412 ms (any 0.412);
 * bwd-data ALGO_1 ...". "not chosen" before a choice. */
void gcc_cudnn_conv_choice_summary(const gcc_cudnn_conv *c, char *buf, size_t size);

/* gcc_cudnn_conv_prepare with algorithms chosen by timing: candidates from
 * cudnnFindConvolution*Algorithm (it runs every algorithm on the current
 * device with memory it allocates and frees itself, synchronising: never
 * call it under a stream capture), falling back per direction to
 * cudnnGetConvolution*Algorithm_v7 when Find fails, through the disk cache
 * `cache` (gcc_cudnn_conv_choose_cached; NULL: no disk cache); `info` (may
 * be NULL) says whether the cache hit. gcc_cudnn_conv_prepare is this with
 * cache NULL. Errors: as gcc_cudnn_conv_prepare; GCC_ERR_DEVICE naming
 * cudaGetDeviceProperties when the device cannot be read. */
gcc_status gcc_cudnn_conv_prepare_cached(gcc_cudnn_conv *c, cudnnHandle_t handle,
                                         size_t workspace_cap, const gcc_cudnn_choice_cache *cache,
                                         gcc_cudnn_choice_info *info, gcc_diag *d);

/* The workspace bytes the prepared algorithm of one direction needs
 * (`call`: GCC_CUDA_CALL_CONV_FORWARD, _BACKWARD_DATA, _BACKWARD_FILTER, or
 * _TRANSPOSE, which runs the backward-data algorithm;
 * runtime/cuda/cuda_ops.h); 0 for another call or before prepare. */
size_t gcc_cudnn_conv_direction_workspace(const gcc_cudnn_conv *c, gcc_cuda_call call);
/* The largest workspace of the three chosen algorithms (0 before prepare). */
size_t gcc_cudnn_conv_workspace_bytes(const gcc_cudnn_conv *c);
/* The chosen algorithms (-1 before they are chosen). */
int gcc_cudnn_conv_algorithms(const gcc_cudnn_conv *c, int *fwd, int *bwd_data, int *bwd_filter);

/* Y = conv(X, W) (+ B broadcast over n, h, w when B is not NULL,
 * cudnnAddTensor). */
gcc_status gcc_cudnn_conv_forward(const gcc_cudnn_conv *c, cudnnHandle_t handle, const float *x,
                                  const float *w, const float *b, float *y, void *workspace,
                                  size_t workspace_bytes, gcc_diag *d);
/* Y = max(conv(X, W) + B, 0): ONNX Conv then Relu (PyTorch's conv2d then
 * relu; NaN propagates). With a bias and the forward algorithm
 * IMPLICIT_PRECOMP_GEMM (gcc_cudnn_conv_relu_fused) one
 * cudnnConvolutionBiasActivationForward call (alpha1 1, alpha2 0, z = Y,
 * CUDNN_ACTIVATION_RELU): the algorithm cuDNN's fused call is known to
 * support (NVIDIA documents CUDNN_ACTIVATION_IDENTITY for it alone, and
 * the fused kernels exist for it); otherwise cudnnConvolutionForward (+
 * cudnnAddTensor for B) and cudnnActivationForward in place on Y. B may be
 * NULL (no bias: never the fused call, which needs one). Preconditions and
 * errors as gcc_cudnn_conv_forward. */
gcc_status gcc_cudnn_conv_forward_relu(const gcc_cudnn_conv *c, cudnnHandle_t handle,
                                       const float *x, const float *w, const float *b, float *y,
                                       void *workspace, size_t workspace_bytes, gcc_diag *d);
/* 1 when a prepared convolution with a bias runs Conv + ReLU as one
 * cudnnConvolutionBiasActivationForward (its forward algorithm is
 * IMPLICIT_PRECOMP_GEMM), else 0. */
int gcc_cudnn_conv_relu_fused(const gcc_cudnn_conv *c);

/* dX = ConvGradData(dY, W). */
gcc_status gcc_cudnn_conv_backward_data(const gcc_cudnn_conv *c, cudnnHandle_t handle,
                                        const float *dy, const float *w, float *dx, void *workspace,
                                        size_t workspace_bytes, gcc_diag *d);
/* Y = ConvTranspose(X, W) (+ B broadcast over n, h, w when B is not NULL):
 * the backward-data call with X as dY, then cudnnAddTensor. */
gcc_status gcc_cudnn_conv_transpose(const gcc_cudnn_conv *c, cudnnHandle_t handle, const float *x,
                                    const float *w, const float *b, float *y, void *workspace,
                                    size_t workspace_bytes, gcc_diag *d);

/* dW = ConvGradFilter(dY, X) (overwritten, not accumulated). */
gcc_status gcc_cudnn_conv_backward_filter(const gcc_cudnn_conv *c, cudnnHandle_t handle,
                                          const float *dy, const float *x, float *dw,
                                          void *workspace, size_t workspace_bytes, gcc_diag *d);
/* dB = ConvGradBias(dY): dY summed over n, oh, ow. Needs no workspace and
 * no prepare. */
gcc_status gcc_cudnn_conv_backward_bias(const gcc_cudnn_conv *c, cudnnHandle_t handle,
                                        const float *dy, float *db, gcc_diag *d);

/* ---- pooling ---------------------------------------------------------- */

typedef enum gcc_pool_mode {
  GCC_POOL_MAX = 0,         /* MaxPool: CUDNN_POOLING_MAX_DETERMINISTIC, NaN propagated */
  GCC_POOL_AVG_INCLUDE_PAD, /* AveragePool, count_include_pad = 1 */
  GCC_POOL_AVG_EXCLUDE_PAD, /* AveragePool, count_include_pad = 0 */
} gcc_pool_mode;

typedef struct gcc_pool2d_shape {
  int64_t n, c, h, w; /* X */
  gcc_window2d win;
  gcc_pool_mode mode;
  /* the dtype of X, Y, dX and dY: float32 (0 reads as GCC_DT_UNDEFINED and
   * is taken as float32), or bfloat16 / float16 (16-bit tensors; cuDNN
   * averages them in float32, alpha / beta float). Plans do not pool 16-bit
   * tensors here: codegen/lowering.c gives them generated kernels, as the
   * legacy pooling API does not promise CUDNN_DATA_BFLOAT16 */
  gcc_dtype dtype;
  /* 1: X, Y, dX, dY NHWC (CUDNN_TENSOR_NHWC descriptors); 0: NCHW */
  int nhwc;
} gcc_pool2d_shape;

/* The shape of a MaxPool, MaxPoolGrad, AveragePool or AveragePoolGrad node
 * (shapes inferred). GCC_ERR_INVALID_ARGUMENT for another op. */
gcc_status gcc_pool2d_shape_of(const gcc_graph *g, int node, gcc_pool2d_shape *out, gcc_diag *d);

typedef struct gcc_cudnn_pool gcc_cudnn_pool;

/* Descriptors of `shape` (no GPU needed), output dims checked against ours
 * (cudnnGetPooling2dForwardOutputDim). Errors as gcc_cudnn_conv_create;
 * GCC_ERR_UNSUPPORTED also for dilations other than 1 (cuDNN's pooling
 * has none). */
gcc_status gcc_cudnn_pool_create(const gcc_pool2d_shape *shape, gcc_cudnn_pool **out, gcc_diag *d);
void gcc_cudnn_pool_destroy(gcc_cudnn_pool *p);
void gcc_cudnn_pool_output_dims(const gcc_cudnn_pool *p, int64_t dims[4]);

/* Y = pool(X). Pointers are of the shape's dtype (typed float for the
 * float32 case). */
gcc_status gcc_cudnn_pool_forward(const gcc_cudnn_pool *p, cudnnHandle_t handle, const float *x,
                                  float *y, gcc_diag *d);
/* dX from dY; cuDNN reads the forward's X and Y too (for average pooling
 * they are not used, but must be valid device pointers of their shapes). */
gcc_status gcc_cudnn_pool_backward(const gcc_cudnn_pool *p, cudnnHandle_t handle, const float *y,
                                   const float *dy, const float *x, float *dx, gcc_diag *d);

/* ---- per-shape cache -------------------------------------------------- */

/* Convolutions and poolings by shape: one descriptor set (and one choice of
 * algorithms) per distinct shape. Not thread-safe. */
typedef struct gcc_cudnn_cache gcc_cudnn_cache;

gcc_status gcc_cudnn_cache_create(gcc_cudnn_cache **out, gcc_diag *d);
void gcc_cudnn_cache_destroy(gcc_cudnn_cache *c);
/* The entry of `shape`, made on first use; owned by the cache. */
gcc_status gcc_cudnn_cache_conv(gcc_cudnn_cache *c, const gcc_conv2d_shape *shape,
                                gcc_cudnn_conv **out, gcc_diag *d);
gcc_status gcc_cudnn_cache_pool(gcc_cudnn_cache *c, const gcc_pool2d_shape *shape,
                                gcc_cudnn_pool **out, gcc_diag *d);
/* Distinct shapes held (convolutions + poolings). */
int gcc_cudnn_cache_size(const gcc_cudnn_cache *c);
/* The convolutions held, in the order they were first asked for: their
 * number, and the i-th (0 <= i < count). */
int gcc_cudnn_cache_conv_count(const gcc_cudnn_cache *c);
const gcc_cudnn_conv *gcc_cudnn_cache_conv_at(const gcc_cudnn_cache *c, int i);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CUDNN_CONV_H */
