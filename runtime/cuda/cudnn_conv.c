/*
 * cudnn_conv.c - convolution and pooling through cuDNN's legacy API; see
 * cudnn_conv.h for the contract.
 */
#include "runtime/cuda/cudnn_conv.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/util.h"

#include "runtime/cuda/cuda_ops.h"

gcc_status gcc_cudnn_status(cudnnStatus_t st, const char *call, const char *file, int line,
                            gcc_diag *d) {
  gcc_status s = st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ? GCC_ERR_OUT_OF_MEMORY
                                                                          : GCC_ERR_DEVICE;
  return gcc_diag_set(d, s, "%s:%d: %s failed: %s (%d)", file, line, call, cudnnGetErrorString(st),
                      (int)st);
}

gcc_status gcc_cudnn_handle_create(cudnnHandle_t *out, gcc_diag *d) {
  *out = NULL;
  GCC_CUDNN_TRY(cudnnCreate(out), d);
  return GCC_OK;
}

void gcc_cudnn_handle_destroy(cudnnHandle_t h) {
  if (h)
    cudnnDestroy(h);
}

/* ---- shared checks ------------------------------------------------------ */

static int fits_int(int64_t v) {
  return v > 0 && v <= INT32_MAX;
}

static gcc_status check_window(const gcc_window2d *w, const char *what, gcc_diag *d) {
  if (!fits_int(w->kh) || !fits_int(w->kw) || !fits_int(w->sh) || !fits_int(w->sw) ||
      !fits_int(w->dh) || !fits_int(w->dw) || w->pt < 0 || w->pl < 0 || w->pt > INT32_MAX ||
      w->pl > INT32_MAX)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: kernel, strides and dilations must be in [1, 2^31), pads >= 0", what);
  if (w->pt != w->pb || w->pl != w->pr)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: pads (%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                        ") are asymmetric; cuDNN takes one pad per dimension",
                        what, w->pt, w->pl, w->pb, w->pr);
  return GCC_OK;
}

static gcc_status check_out(const char *what, const int64_t ours[4], const int theirs[4],
                            gcc_diag *d) {
  for (int i = 0; i < 4; i++)
    if (ours[i] != theirs[i])
      return gcc_diag_set(d, GCC_ERR_INTERNAL,
                          "%s: cuDNN's output shape [%d, %d, %d, %d] differs from shape "
                          "inference's [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]",
                          what, theirs[0], theirs[1], theirs[2], theirs[3], ours[0], ours[1],
                          ours[2], ours[3]);
  return GCC_OK;
}

static gcc_status need_ptr(const void *p, const char *name, const char *fn, gcc_diag *d) {
  if (!p)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
  return GCC_OK;
}

/* ---- convolution ------------------------------------------------------ */

struct gcc_cudnn_conv {
  gcc_conv2d_shape shape;
  int64_t y[4];
  cudnnTensorDescriptor_t x_desc, y_desc, b_desc, xb_desc; /* xb: [1, c, 1, 1] */
  cudnnActivationDescriptor_t relu_desc; /* a fused Relu's (gcc_cudnn_conv_forward_relu) */
  cudnnFilterDescriptor_t w_desc;
  /* one convolution descriptor per direction (forward, backward-data,
   * backward-filter): each carries the math type of its chosen algorithm */
  cudnnConvolutionDescriptor_t conv_desc, conv_desc_bd, conv_desc_bf;
  int chosen, prepared;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  size_t ws_fwd, ws_bwd_data, ws_bwd_filter;
  /* per direction: the chosen candidate's measured time and the least of
   * any candidate that qualified but for determinism (-1: not timed) */
  float t_chosen[3], t_fastest[3];
  cudnnDeterminism_t det[3]; /* the chosen candidates' */
};

/* The shape of the value at operand slot `slot` (cuda_ops.h) of node `n`. */
static const gcc_shape *slot_shape(const gcc_graph *g, const gcc_node *n, int slot) {
  return &g->values[slot > 0 ? n->inputs[slot - 1] : n->outputs[-slot - 1]].shape;
}

gcc_status gcc_conv2d_shape_of(const gcc_graph *g, int node, gcc_conv2d_shape *out, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  const gcc_cuda_op *co = gcc_cuda_op_of(n->op);
  if (!co || !co->xs || !co->ws) { /* the table says where X and W are */
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: %s is not a convolution", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc));
  }
  const gcc_shape *x = slot_shape(g, n, co->xs), *w = slot_shape(g, n, co->ws);
  memset(out, 0, sizeof *out);
  out->n = x->dims[0];
  out->c = x->dims[1];
  out->h = x->dims[2];
  out->w = x->dims[3];
  out->m = w->dims[0];
  out->group = n->av[CONV_GROUP].i > 0 ? n->av[CONV_GROUP].i : 1;
  gcc_window2d_of(n, w, &out->win);
  out->tf32 = g->precision == GCC_PRECISION_TF32;
  out->dtype = g->values[co->xs > 0 ? n->inputs[co->xs - 1] : n->outputs[-co->xs - 1]].dtype;
  out->nondeterministic = g->nondeterministic;
  out->nhwc = g->values[co->xs > 0 ? n->inputs[co->xs - 1] : n->outputs[-co->xs - 1]].layout ==
              GCC_LAYOUT_NHWC;
  return GCC_OK;
}

void gcc_cudnn_conv_destroy(gcc_cudnn_conv *c) {
  if (!c)
    return;
  if (c->x_desc)
    cudnnDestroyTensorDescriptor(c->x_desc);
  if (c->y_desc)
    cudnnDestroyTensorDescriptor(c->y_desc);
  if (c->b_desc)
    cudnnDestroyTensorDescriptor(c->b_desc);
  if (c->xb_desc)
    cudnnDestroyTensorDescriptor(c->xb_desc);
  if (c->w_desc)
    cudnnDestroyFilterDescriptor(c->w_desc);
  if (c->conv_desc)
    cudnnDestroyConvolutionDescriptor(c->conv_desc);
  if (c->conv_desc_bd)
    cudnnDestroyConvolutionDescriptor(c->conv_desc_bd);
  if (c->conv_desc_bf)
    cudnnDestroyConvolutionDescriptor(c->conv_desc_bf);
  if (c->relu_desc)
    cudnnDestroyActivationDescriptor(c->relu_desc);
  free(c);
}

static gcc_status conv_descriptors(gcc_cudnn_conv *c, gcc_diag *d) {
  const gcc_conv2d_shape *s = &c->shape;
  /* 16-bit data is computed in float32 (PSEUDO_HALF: CUDNN_DATA_FLOAT in the
   * convolution descriptor), on tensor cores: the math cuDNN offers for it */
  int low = s->dtype == GCC_DT_BFLOAT16 || s->dtype == GCC_DT_FLOAT16;
  cudnnDataType_t dt = s->dtype == GCC_DT_BFLOAT16  ? CUDNN_DATA_BFLOAT16
                       : s->dtype == GCC_DT_FLOAT16 ? CUDNN_DATA_HALF
                                                    : CUDNN_DATA_FLOAT;
  const gcc_window2d *w = &s->win;
  GCC_CUDNN_TRY(cudnnCreateTensorDescriptor(&c->x_desc), d);
  GCC_CUDNN_TRY(cudnnCreateTensorDescriptor(&c->y_desc), d);
  GCC_CUDNN_TRY(cudnnCreateTensorDescriptor(&c->b_desc), d);
  GCC_CUDNN_TRY(cudnnCreateTensorDescriptor(&c->xb_desc), d);
  GCC_CUDNN_TRY(cudnnCreateFilterDescriptor(&c->w_desc), d);
  int64_t group = s->group > 0 ? s->group : 1;
  GCC_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&c->conv_desc), d);
  GCC_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&c->conv_desc_bd), d);
  GCC_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&c->conv_desc_bf), d);
  /* NHWC (the layout pass): every tensor channels-last and the filter in
   * KRSC (cudnnSetFilter4dDescriptor's CUDNN_TENSOR_NHWC), the pairing
   * cuDNN's tensor-core kernels take without transposing; dims are given
   * in N, C, H, W order either way */
  const cudnnTensorFormat_t fmt = s->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  GCC_CUDNN_TRY(
      cudnnSetTensor4dDescriptor(c->x_desc, fmt, dt, (int)s->n, (int)s->c, (int)s->h, (int)s->w),
      d);
  GCC_CUDNN_TRY(cudnnSetFilter4dDescriptor(c->w_desc, dt, fmt, (int)s->m, (int)(s->c / group),
                                           (int)w->kh, (int)w->kw),
                d);
  cudnnConvolutionDescriptor_t cds[3] = {c->conv_desc, c->conv_desc_bd, c->conv_desc_bf};
  for (int i = 0; i < 3; i++) {
    GCC_CUDNN_TRY(cudnnSetConvolution2dDescriptor(cds[i], (int)w->pt, (int)w->pl, (int)w->sh,
                                                  (int)w->sw, (int)w->dh, (int)w->dw,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                  d);
    /* plain float32 FMA: no TF32 tensor cores, so results match the CPU
     * backend to float32 rounding (PyTorch with allow_tf32 = False, which
     * sets CUDNN_FMA_MATH before asking for algorithms, as here); --precision
     * tf32: CUDNN_TENSOR_OP_MATH, TF32 tensor cores (allow_tf32 = True) */
    GCC_CUDNN_TRY(
        cudnnSetConvolutionMathType(cds[i], s->tf32 || low ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
        d);
    if (group > 1)
      GCC_CUDNN_TRY(cudnnSetConvolutionGroupCount(cds[i], (int)group), d);
  }
  int y[4];
  GCC_CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(c->conv_desc, c->x_desc, c->w_desc, &y[0],
                                                      &y[1], &y[2], &y[3]),
                d);
  c->y[0] = s->n;
  c->y[1] = s->m;
  c->y[2] = gcc_window_out_dim(s->h, w->kh, w->sh, w->pt, w->pb, w->dh);
  c->y[3] = gcc_window_out_dim(s->w, w->kw, w->sw, w->pl, w->pr, w->dw);
  GCC_TRY(check_out("Conv", c->y, y, d));
  GCC_CUDNN_TRY(cudnnSetTensor4dDescriptor(c->y_desc, fmt, dt, y[0], y[1], y[2], y[3]), d);
  /* biases [1, m, 1, 1]: the same m contiguous elements in either format */
  GCC_CUDNN_TRY(cudnnSetTensor4dDescriptor(c->b_desc, fmt, dt, 1, (int)s->m, 1, 1), d);
  GCC_CUDNN_TRY(cudnnSetTensor4dDescriptor(c->xb_desc, fmt, dt, 1, (int)s->c, 1, 1), d);
  /* ReLU with NaN propagated (PyTorch's relu keeps NaN) */
  GCC_CUDNN_TRY(cudnnCreateActivationDescriptor(&c->relu_desc), d);
  GCC_CUDNN_TRY(
      cudnnSetActivationDescriptor(c->relu_desc, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
      d);
  return GCC_OK;
}

gcc_status gcc_cudnn_conv_create(const gcc_conv2d_shape *shape, gcc_cudnn_conv **out, gcc_diag *d) {
  *out = NULL;
  if (!fits_int(shape->n) || !fits_int(shape->c) || !fits_int(shape->h) || !fits_int(shape->w) ||
      !fits_int(shape->m))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "Conv: sizes must be in [1, 2^31): X [%" PRId64 ", %" PRId64 ", %" PRId64
                        ", %" PRId64 "], %" PRId64 " filters",
                        shape->n, shape->c, shape->h, shape->w, shape->m);
  GCC_TRY(check_window(&shape->win, "Conv", d));
  gcc_cudnn_conv *c = calloc(1, sizeof *c);
  if (!c)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (cuDNN convolution)");
  c->shape = *shape;
  c->fwd = (cudnnConvolutionFwdAlgo_t)-1;
  c->bwd_data = (cudnnConvolutionBwdDataAlgo_t)-1;
  c->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)-1;
  for (int i = 0; i < 3; i++)
    c->t_chosen[i] = c->t_fastest[i] = -1.0f;
  gcc_status s = conv_descriptors(c, d);
  if (s != GCC_OK) {
    gcc_cudnn_conv_destroy(c);
    return s;
  }
  *out = c;
  return GCC_OK;
}

void gcc_cudnn_conv_output_dims(const gcc_cudnn_conv *c, int64_t dims[4]) {
  memcpy(dims, c->y, sizeof c->y);
}

const gcc_conv2d_shape *gcc_cudnn_conv_shape(const gcc_cudnn_conv *c) {
  return &c->shape;
}

enum { MAX_ALGOS = GCC_CUDNN_MAX_ALGOS };

static gcc_status no_algo(const char *dir, int n, size_t smallest, size_t cap, int det, int tf32,
                          gcc_diag *d) {
  const char *what = det ? "deterministic " : "";
  const char *math = tf32 ? "FMA or tensor-op" : "FMA, no TF32";
  if (smallest == SIZE_MAX)
    return gcc_diag_set(d, GCC_ERR_DEVICE,
                        "cuDNN: no %s%s convolution algorithm (%s math) among %d candidates%s",
                        what, dir, math, n, det ? " (--no-deterministic allows the others)" : "");
  return gcc_diag_set(d, GCC_ERR_DEVICE,
                      "cuDNN: no %s%s convolution algorithm fits a %zu-byte "
                      "workspace (%d candidates; the smallest usable needs %zu bytes)",
                      what, dir, cap, n, smallest);
}

/* Candidates qualify when they ran (status), give the same bits every run
 * (CUDNN_DETERMINISTIC: the backward algorithms that accumulate with
 * atomics do not), and compute in float32 FMA (not TF32 tensor-op math,
 * which `tf32` (--precision tf32) allows as well),
 * so that training is reproducible and matches the CPU backend. */
int gcc_cudnn_pick_algo_opts(const gcc_cudnn_algo_perf *perf, int n, size_t cap, size_t *smallest,
                             int tf32, int deterministic) {
  int found = -1;
  *smallest = SIZE_MAX;
  for (int i = 0; i < n; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS &&
        (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC) &&
        (perf[i].math_type == CUDNN_FMA_MATH ||
         (tf32 && perf[i].math_type == CUDNN_TENSOR_OP_MATH))) {
      if (perf[i].memory > cap) {
        if (perf[i].memory < *smallest)
          *smallest = perf[i].memory;
      } else if (found < 0 || (perf[i].time_ms >= 0 && (perf[found].time_ms < 0 ||
                                                        perf[i].time_ms < perf[found].time_ms))) {
        found = i;
      }
    }
  return found;
}

int gcc_cudnn_pick_algo_math(const gcc_cudnn_algo_perf *perf, int n, size_t cap, size_t *smallest,
                             int tf32) {
  return gcc_cudnn_pick_algo_opts(perf, n, cap, smallest, tf32, 1);
}

int gcc_cudnn_pick_algo(const gcc_cudnn_algo_perf *perf, int n, size_t cap, size_t *smallest) {
  return gcc_cudnn_pick_algo_math(perf, n, cap, smallest, 0);
}

/* Tensor-op math is taken for TF32 (--precision tf32) and for 16-bit data. */
static int tensor_op(const gcc_cudnn_conv *c) {
  return c->shape.tf32 || c->shape.dtype == GCC_DT_BFLOAT16 || c->shape.dtype == GCC_DT_FLOAT16;
}

gcc_status gcc_cudnn_conv_choose(gcc_cudnn_conv *c, const gcc_cudnn_algo_perf *fwd, int n_fwd,
                                 const gcc_cudnn_algo_perf *bwd_data, int n_bwd_data,
                                 const gcc_cudnn_algo_perf *bwd_filter, int n_bwd_filter,
                                 size_t workspace_cap, gcc_diag *d) {
  size_t smallest;
  int tf = tensor_op(c), det = !c->shape.nondeterministic;
  int f = gcc_cudnn_pick_algo_opts(fwd, n_fwd, workspace_cap, &smallest, tf, det);
  if (f < 0)
    return no_algo("forward", n_fwd, smallest, workspace_cap, det, tf, d);
  int bd = gcc_cudnn_pick_algo_opts(bwd_data, n_bwd_data, workspace_cap, &smallest, tf, det);
  if (bd < 0)
    return no_algo("backward-data", n_bwd_data, smallest, workspace_cap, det, tf, d);
  int bf = gcc_cudnn_pick_algo_opts(bwd_filter, n_bwd_filter, workspace_cap, &smallest, tf, det);
  if (bf < 0)
    return no_algo("backward-filter", n_bwd_filter, smallest, workspace_cap, det, tf, d);
  /* the cost of determinism: the fastest candidate that qualifies without it */
  const gcc_cudnn_algo_perf *lists[3] = {fwd, bwd_data, bwd_filter};
  const int counts[3] = {n_fwd, n_bwd_data, n_bwd_filter}, picked[3] = {f, bd, bf};
  for (int k = 0; k < 3; k++) {
    c->det[k] = lists[k][picked[k]].determinism;
    int any = gcc_cudnn_pick_algo_opts(lists[k], counts[k], workspace_cap, &smallest, tf, 0);
    float tc = lists[k][picked[k]].time_ms;
    c->t_chosen[k] = tc >= 0 ? tc : -1.0f;
    c->t_fastest[k] =
        tc >= 0 && any >= 0 && lists[k][any].time_ms >= 0 ? lists[k][any].time_ms : c->t_chosen[k];
  }
  /* cuDNN: an algorithm from a perf result runs with that result's math
   * type set on the descriptor */
  GCC_CUDNN_TRY(cudnnSetConvolutionMathType(c->conv_desc, fwd[f].math_type), d);
  GCC_CUDNN_TRY(cudnnSetConvolutionMathType(c->conv_desc_bd, bwd_data[bd].math_type), d);
  GCC_CUDNN_TRY(cudnnSetConvolutionMathType(c->conv_desc_bf, bwd_filter[bf].math_type), d);
  /* all three chosen: commit them together */
  c->fwd = (cudnnConvolutionFwdAlgo_t)fwd[f].algo;
  c->ws_fwd = fwd[f].memory;
  c->bwd_data = (cudnnConvolutionBwdDataAlgo_t)bwd_data[bd].algo;
  c->ws_bwd_data = bwd_data[bd].memory;
  c->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)bwd_filter[bf].algo;
  c->ws_bwd_filter = bwd_filter[bf].memory;
  c->chosen = 1;
  return GCC_OK;
}

void gcc_cudnn_conv_math_types(const gcc_cudnn_conv *c, int out[3]) {
  cudnnConvolutionDescriptor_t cds[3] = {c->conv_desc, c->conv_desc_bd, c->conv_desc_bf};
  for (int i = 0; i < 3; i++) {
    cudnnMathType_t m = CUDNN_DEFAULT_MATH;
    out[i] = -1;
    if (cudnnGetConvolutionMathType(cds[i], &m) == CUDNN_STATUS_SUCCESS)
      out[i] = (int)m;
  }
}

#define PERF_OF(dst, src, count)                                                                   \
  for (int i_ = 0; i_ < (count); i_++) {                                                           \
    (dst)[i_].algo = (int)(src)[i_].algo;                                                          \
    (dst)[i_].status = (src)[i_].status;                                                           \
    (dst)[i_].memory = (src)[i_].memory;                                                           \
    (dst)[i_].determinism = (src)[i_].determinism;                                                 \
    (dst)[i_].math_type = (src)[i_].mathType;                                                      \
    (dst)[i_].time_ms = (src)[i_].time;                                                            \
  }

/* The candidates cuDNN gives on the current device: per direction
 * cudnnFindConvolution*Algorithm (timed; it allocates and frees its own
 * buffers and workspace and synchronises), or, when that fails (e.g. out
 * of memory for its buffers), cudnnGetConvolution*Algorithm_v7's
 * heuristics (times -1). */
static gcc_status cudnn_find(void *user, const gcc_cudnn_conv *c, gcc_cudnn_candidates *out,
                             gcc_diag *d) {
  cudnnHandle_t handle = user;
  memset(out, 0, sizeof *out);
  cudnnConvolutionFwdAlgoPerf_t fp[MAX_ALGOS];
  cudnnConvolutionBwdDataAlgoPerf_t dp[MAX_ALGOS];
  cudnnConvolutionBwdFilterAlgoPerf_t wp[MAX_ALGOS];
  int n = 0;
  if (cudnnFindConvolutionForwardAlgorithm(handle, c->x_desc, c->w_desc, c->conv_desc, c->y_desc,
                                           MAX_ALGOS, &n, fp) == CUDNN_STATUS_SUCCESS) {
    out->timed[0] = 1;
  } else {
    (void)cudaGetLastError(); /* a failed Find may leave its (non-sticky) error behind */
    GCC_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(handle, c->x_desc, c->w_desc, c->conv_desc,
                                                         c->y_desc, MAX_ALGOS, &n, fp),
                  d);
  }
  PERF_OF(out->fwd, fp, n);
  out->n_fwd = n;
  n = 0;
  if (cudnnFindConvolutionBackwardDataAlgorithm(handle, c->w_desc, c->y_desc, c->conv_desc_bd,
                                                c->x_desc, MAX_ALGOS, &n,
                                                dp) == CUDNN_STATUS_SUCCESS) {
    out->timed[1] = 1;
  } else {
    (void)cudaGetLastError();
    GCC_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                      handle, c->w_desc, c->y_desc, c->conv_desc_bd, c->x_desc, MAX_ALGOS, &n, dp),
                  d);
  }
  PERF_OF(out->bwd_data, dp, n);
  out->n_bwd_data = n;
  n = 0;
  if (cudnnFindConvolutionBackwardFilterAlgorithm(handle, c->x_desc, c->y_desc, c->conv_desc_bf,
                                                  c->w_desc, MAX_ALGOS, &n,
                                                  wp) == CUDNN_STATUS_SUCCESS) {
    out->timed[2] = 1;
  } else {
    (void)cudaGetLastError();
    GCC_CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                      handle, c->x_desc, c->y_desc, c->conv_desc_bf, c->w_desc, MAX_ALGOS, &n, wp),
                  d);
  }
  PERF_OF(out->bwd_filter, wp, n);
  out->n_bwd_filter = n;
  /* heuristics give no times */
  gcc_cudnn_algo_perf *lists[3] = {out->fwd, out->bwd_data, out->bwd_filter};
  const int counts[3] = {out->n_fwd, out->n_bwd_data, out->n_bwd_filter};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < counts[k]; i++)
      if (!out->timed[k])
        lists[k][i].time_ms = -1.0f;
  return GCC_OK;
}

static gcc_status gpu_id_of_current(gcc_cudnn_gpu_id *id, gcc_diag *d) {
  memset(id, 0, sizeof *id);
  int dev = 0;
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess)
    e = cudaGetDeviceProperties(&prop, dev);
  if (e != cudaSuccess)
    return gcc_diag_set(d, GCC_ERR_DEVICE, "%s:%d: cudaGetDeviceProperties failed: %s (%s)",
                        __FILE__, __LINE__, cudaGetErrorName(e), cudaGetErrorString(e));
  snprintf(id->name, sizeof id->name, "%s", prop.name);
  id->sm = prop.major * 10 + prop.minor;
  id->cudnn_version = cudnnGetVersion();
  return GCC_OK;
}

gcc_status gcc_cudnn_conv_prepare(gcc_cudnn_conv *c, cudnnHandle_t handle, size_t workspace_cap,
                                  gcc_diag *d) {
  return gcc_cudnn_conv_prepare_cached(c, handle, workspace_cap, NULL, NULL, d);
}

gcc_status gcc_cudnn_conv_prepare_cached(gcc_cudnn_conv *c, cudnnHandle_t handle,
                                         size_t workspace_cap, const gcc_cudnn_choice_cache *cache,
                                         gcc_cudnn_choice_info *info, gcc_diag *d) {
  GCC_TRY(need_ptr(handle, "the cuDNN handle", "gcc_cudnn_conv_prepare", d));
  gcc_cudnn_choice_info local;
  if (!info)
    info = &local;
  memset(info, 0, sizeof *info);
  if (c->prepared)
    return GCC_OK;
  gcc_cudnn_gpu_id gpu;
  GCC_TRY(gpu_id_of_current(&gpu, d));
  gcc_cudnn_choice_cache none = {NULL, 0};
  GCC_TRY(gcc_cudnn_conv_choose_cached(c, &gpu, cache ? cache : &none, cudnn_find, handle,
                                       workspace_cap, info, d));
  /* the workspace each chosen algorithm needs with its math type set: asked
   * of cuDNN (a perf result's `memory` is an estimate) */
  size_t wf = 0, wd = 0, ww = 0;
  cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(handle, c->x_desc, c->w_desc,
                                                             c->conv_desc, c->y_desc, c->fwd, &wf);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnGetConvolutionBackwardDataWorkspaceSize(handle, c->w_desc, c->y_desc, c->conv_desc_bd,
                                                      c->x_desc, c->bwd_data, &wd);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
        handle, c->x_desc, c->y_desc, c->conv_desc_bf, c->w_desc, c->bwd_filter, &ww);
  if (st != CUDNN_STATUS_SUCCESS) {
    c->chosen = 0; /* nothing half-prepared */
    return gcc_cudnn_status(st, "cudnnGetConvolution*WorkspaceSize", __FILE__, __LINE__, d);
  }
  if (wf > workspace_cap || wd > workspace_cap || ww > workspace_cap) {
    c->chosen = 0;
    return gcc_diag_set(d, GCC_ERR_DEVICE,
                        "cuDNN: the chosen algorithms need workspaces of %zu, %zu and %zu bytes "
                        "(forward, backward-data, backward-filter), above the %zu-byte cap",
                        wf, wd, ww, workspace_cap);
  }
  c->ws_fwd = wf;
  c->ws_bwd_data = wd;
  c->ws_bwd_filter = ww;
  c->prepared = 1;
  return GCC_OK;
}

int gcc_cudnn_conv_prepared(const gcc_cudnn_conv *c) {
  return c->prepared;
}

size_t gcc_cudnn_conv_workspace_bytes(const gcc_cudnn_conv *c) {
  size_t m = c->ws_fwd;
  if (c->ws_bwd_data > m)
    m = c->ws_bwd_data;
  if (c->ws_bwd_filter > m)
    m = c->ws_bwd_filter;
  return m;
}

int gcc_cudnn_conv_algorithms(const gcc_cudnn_conv *c, int *fwd, int *bwd_data, int *bwd_filter) {
  *fwd = c->chosen ? (int)c->fwd : -1;
  *bwd_data = c->chosen ? (int)c->bwd_data : -1;
  *bwd_filter = c->chosen ? (int)c->bwd_filter : -1;
  return c->chosen;
}

size_t gcc_cudnn_conv_direction_workspace(const gcc_cudnn_conv *c, gcc_cuda_call call) {
  if (!c->prepared)
    return 0;
  return call == GCC_CUDA_CALL_CONV_FORWARD           ? c->ws_fwd
         : call == GCC_CUDA_CALL_CONV_BACKWARD_DATA   ? c->ws_bwd_data
         : call == GCC_CUDA_CALL_CONV_TRANSPOSE       ? c->ws_bwd_data
         : call == GCC_CUDA_CALL_CONV_BACKWARD_FILTER ? c->ws_bwd_filter
                                                      : 0;
}

/* ---- the disk cache of choices --------------------------------------------- */

static const char CHOICE_MAGIC[] = "gcc-train cudnn choice 1";
static const char *const DIR_NAMES[3] = {"forward", "backward-data", "backward-filter"};
static const int ALGO_COUNTS[3] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
/* An entry is a few hundred bytes; anything much larger is not ours. */
#define MAX_CHOICE_BYTES 8192

const char *gcc_cudnn_algo_name(int direction, int algo) {
  static const char *const fwd[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static const char *const bd[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                   "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char *const bf[] = {
      "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  const char *const *names[3] = {fwd, bd, bf};
  if (direction < 0 || direction > 2 || algo < 0 || algo >= ALGO_COUNTS[direction])
    return "?";
  return names[direction][algo];
}

static const char *math_name(int m) {
  return m == CUDNN_FMA_MATH                          ? "fma"
         : m == CUDNN_TENSOR_OP_MATH                  ? "tensor-op"
         : m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? "tensor-op-conversion"
         : m == CUDNN_DEFAULT_MATH                    ? "default"
                                                      : "?";
}

/* FNV-1a, 64-bit: the entry's file name and its checksum (detects a torn
 * or edited entry; the key inside is compared in full). */
static uint64_t fnv1a(const char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

gcc_status gcc_cudnn_choice_key(const gcc_cudnn_conv *c, const gcc_cudnn_gpu_id *gpu, size_t cap,
                                char *buf, size_t size, gcc_diag *d) {
  const gcc_conv2d_shape *s = &c->shape;
  const gcc_window2d *w = &s->win;
  char name[sizeof gpu->name];
  size_t k = 0;
  for (; k + 1 < sizeof name && gpu->name[k]; k++) /* one line, no quotes */
    name[k] =
        gpu->name[k] < 0x20 || gpu->name[k] == '"' || gpu->name[k] == 0x7f ? '_' : gpu->name[k];
  name[k] = '\0';
  int64_t group = s->group > 0 ? s->group : 1;
  gcc_dtype dt = s->dtype ? s->dtype : GCC_DT_FLOAT32;
  const char *math = s->tf32 ? "tf32" : tensor_op(c) ? "tensor-op" : "fma";
  int n =
      snprintf(buf, size,
               "gpu=\"%s\" sm=%d cudnn=%zu x=%" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64
               " w=%" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " dtype=%s layout=%s"
               " pads=%" PRId64 ",%" PRId64 " strides=%" PRId64 ",%" PRId64 " dilations=%" PRId64
               ",%" PRId64 " groups=%" PRId64 " math=%s deterministic=%d workspace_cap=%zu",
               name, gpu->sm, gpu->cudnn_version, s->n, s->c, s->h, s->w, s->m, s->c / group, w->kh,
               w->kw, gcc_dtype_name(dt), s->nhwc ? "NHWC" : "NCHW", w->pt, w->pl, w->sh, w->sw,
               w->dh, w->dw, group, math, !s->nondeterministic, cap);
  if (n < 0 || (size_t)n >= size)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "cuDNN choice cache: the key does not fit %zu bytes", size);
  return GCC_OK;
}

gcc_status gcc_cudnn_choice_path(const gcc_cudnn_choice_cache *cache, const char *key, char *buf,
                                 size_t size, gcc_diag *d) {
  char dir[4096];
  GCC_TRY(gcc_cache_dir(cache ? cache->dir : NULL, "cuDNN choice cache", dir, sizeof dir, d));
  int n = snprintf(buf, size, "%s/cudnn-%016" PRIx64 ".choice", dir, fnv1a(key, strlen(key)));
  if (n < 0 || (size_t)n >= size)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "cuDNN choice cache: the entry path does not fit %zu bytes", size);
  return GCC_OK;
}

/* The entry's text for `key` and the three chosen candidates with the
 * fastest times, into buf (the checksum line last). */
static int choice_text(const char *key, const gcc_cudnn_algo_perf chosen[3], const float fastest[3],
                       char *buf, size_t size) {
  int n = snprintf(buf, size, "%s\nkey %s\n", CHOICE_MAGIC, key);
  for (int k = 0; k < 3 && n > 0 && (size_t)n < size; k++)
    n += snprintf(buf + n, size - (size_t)n, "%s %d %d %d %zu %.6g %.6g\n", DIR_NAMES[k],
                  chosen[k].algo, (int)chosen[k].math_type, (int)chosen[k].determinism,
                  chosen[k].memory, (double)chosen[k].time_ms, (double)fastest[k]);
  if (n > 0 && (size_t)n < size)
    n += snprintf(buf + n, size - (size_t)n, "checksum %016" PRIx64 "\n", fnv1a(buf, (size_t)n));
  return n > 0 && (size_t)n < size ? n : -1;
}

/* Reads the entry at `path` for `key`: 1 and the choice when it is there
 * and sound; 0 when absent or of another key; -1 when corrupt (why in
 * `why`). */
static int choice_read(const char *path, const char *key, size_t cap, gcc_cudnn_algo_perf out[3],
                       float fastest[3], char *why, size_t why_size) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  char buf[MAX_CHOICE_BYTES + 1];
  size_t len = fread(buf, 1, sizeof buf, f);
  fclose(f);
  if (len > MAX_CHOICE_BYTES) {
    snprintf(why, why_size, "larger than %d bytes", MAX_CHOICE_BYTES);
    return -1;
  }
  buf[len] = '\0';
  if (strlen(buf) != len) {
    snprintf(why, why_size, "a NUL byte in the text");
    return -1;
  }
  size_t ml = strlen(CHOICE_MAGIC);
  if (len < ml + 1 || memcmp(buf, CHOICE_MAGIC, ml) != 0 || buf[ml] != '\n') {
    snprintf(why, why_size, "not a cuDNN choice entry of format 1 (first line)");
    return -1;
  }
  char *sum = strstr(buf, "\nchecksum ");
  uint64_t want = 0;
  char tail = 0;
  if (!sum || sscanf(sum + 10, "%16" SCNx64 "%c", &want, &tail) != 2 || tail != '\n' ||
      sum + 10 + 17 != buf + len) {
    snprintf(why, why_size, "no checksum line at its end (truncated?)");
    return -1;
  }
  if (fnv1a(buf, (size_t)(sum + 1 - buf)) != want) {
    snprintf(why, why_size, "checksum mismatch");
    return -1;
  }
  /* the key line: another key of the same hash is a miss, not damage */
  char *line = buf + ml + 1;
  char *eol = strchr(line, '\n');
  if (strncmp(line, "key ", 4) != 0 || !eol) {
    snprintf(why, why_size, "no key line");
    return -1;
  }
  *eol = '\0';
  if (strcmp(line + 4, key) != 0)
    return 0;
  line = eol + 1;
  for (int k = 0; k < 3; k++) {
    char dir[32];
    int algo = -1, math = -1, det = -1, used = 0;
    size_t mem = 0;
    double t = 0, tf = 0;
    eol = strchr(line, '\n');
    if (!eol) {
      snprintf(why, why_size, "the %s line is missing", DIR_NAMES[k]);
      return -1;
    }
    *eol = '\0';
    if (sscanf(line, "%31s %d %d %d %zu %lf %lf%n", dir, &algo, &math, &det, &mem, &t, &tf,
               &used) != 7 ||
        line[used] != '\0' || strcmp(dir, DIR_NAMES[k]) != 0 || algo < 0 ||
        algo >= ALGO_COUNTS[k] || (math != CUDNN_FMA_MATH && math != CUDNN_TENSOR_OP_MATH) ||
        (det != CUDNN_DETERMINISTIC && det != CUDNN_NON_DETERMINISTIC) || mem > cap) {
      snprintf(why, why_size, "bad %s line", DIR_NAMES[k]);
      return -1;
    }
    memset(&out[k], 0, sizeof out[k]);
    out[k].algo = algo;
    out[k].status = CUDNN_STATUS_SUCCESS;
    out[k].memory = mem;
    out[k].math_type = (cudnnMathType_t)math;
    out[k].determinism = (cudnnDeterminism_t)det;
    out[k].time_ms = (float)t;
    fastest[k] = (float)tf;
    line = eol + 1;
  }
  return 1;
}

/* Writes the entry (temporary file, then rename); "" or a note. */
static void choice_write(const char *path, const char *text, size_t len, char *note,
                         size_t note_size) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = '\0';
    int e = gcc_mkdir_p(dir); /* mode 0700 for what it creates */
    if (e != 0) {
      snprintf(note, note_size, "cuDNN choice cache: cannot create %s: %s; not cached", dir,
               strerror(e));
      return;
    }
  }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    snprintf(note, note_size, "cuDNN choice cache: cannot write %s: %s; not cached", tmp,
             strerror(errno));
    return;
  }
  int ok = fwrite(text, 1, len, f) == len;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    snprintf(note, note_size, "cuDNN choice cache: cannot write %s: %s; not cached", path,
             strerror(errno));
    remove(tmp);
  }
}

gcc_status gcc_cudnn_conv_choose_cached(gcc_cudnn_conv *c, const gcc_cudnn_gpu_id *gpu,
                                        const gcc_cudnn_choice_cache *cache, gcc_cudnn_find_fn find,
                                        void *user, size_t workspace_cap,
                                        gcc_cudnn_choice_info *info, gcc_diag *d) {
  gcc_cudnn_choice_info local;
  if (!info)
    info = &local;
  memset(info, 0, sizeof *info);
  char key[1024], path[4300];
  int use = cache && cache->use_cache;
  if (use) {
    gcc_diag kd = {0};
    if (gcc_cudnn_choice_key(c, gpu, workspace_cap, key, sizeof key, &kd) != GCC_OK ||
        gcc_cudnn_choice_path(cache, key, path, sizeof path, &kd) != GCC_OK) {
      snprintf(info->note, sizeof info->note, "cuDNN choice cache not used: %s", kd.msg);
      use = 0;
    }
  }
  if (use) {
    gcc_cudnn_algo_perf got[3];
    float fastest[3];
    char why[200] = "";
    int r = choice_read(path, key, workspace_cap, got, fastest, why, sizeof why);
    gcc_diag cd = {0};
    if (r > 0 && gcc_cudnn_conv_choose(c, &got[0], 1, &got[1], 1, &got[2], 1, workspace_cap, &cd) ==
                     GCC_OK) {
      for (int k = 0; k < 3; k++) {
        c->t_chosen[k] = got[k].time_ms >= 0 ? got[k].time_ms : -1.0f;
        c->t_fastest[k] = fastest[k] >= 0 ? fastest[k] : -1.0f;
      }
      info->hit = 1;
      return GCC_OK;
    }
    if (r > 0) { /* sound text, but a choice this convolution does not allow */
      snprintf(why, sizeof why, "%s", cd.msg);
      r = -1;
    }
    if (r < 0)
      snprintf(info->note, sizeof info->note,
               "cuDNN choice cache: %s is corrupt (%s): ignored, algorithms timed again", path,
               why);
  }
  gcc_cudnn_candidates *cand = malloc(sizeof *cand);
  if (!cand)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (cuDNN candidates)");
  info->searched = 1;
  gcc_status st = find(user, c, cand, d);
  if (st == GCC_OK)
    st = gcc_cudnn_conv_choose(c, cand->fwd, cand->n_fwd, cand->bwd_data, cand->n_bwd_data,
                               cand->bwd_filter, cand->n_bwd_filter, workspace_cap, d);
  if (st == GCC_OK && use) {
    gcc_cudnn_algo_perf chosen[3] = {{0}};
    const int algos[3] = {(int)c->fwd, (int)c->bwd_data, (int)c->bwd_filter};
    const size_t mem[3] = {c->ws_fwd, c->ws_bwd_data, c->ws_bwd_filter};
    int math[3];
    gcc_cudnn_conv_math_types(c, math);
    for (int k = 0; k < 3; k++) {
      chosen[k].algo = algos[k];
      chosen[k].memory = mem[k];
      chosen[k].math_type = (cudnnMathType_t)math[k];
      chosen[k].determinism = c->det[k];
      chosen[k].time_ms = c->t_chosen[k];
    }
    char text[MAX_CHOICE_BYTES];
    int n = choice_text(key, chosen, c->t_fastest, text, sizeof text);
    char wnote[sizeof info->note] = "";
    if (n > 0)
      choice_write(path, text, (size_t)n, wnote, sizeof wnote);
    if (wnote[0]) {
      size_t used = strlen(info->note);
      snprintf(info->note + used, sizeof info->note - used, "%s%s", used ? "; " : "", wnote);
    }
  }
  free(cand);
  return st;
}

void gcc_cudnn_conv_choice_times(const gcc_cudnn_conv *c, float chosen_ms[3], float fastest_ms[3]) {
  for (int k = 0; k < 3; k++) {
    chosen_ms[k] = c->chosen ? c->t_chosen[k] : -1.0f;
    fastest_ms[k] = c->chosen ? c->t_fastest[k] : -1.0f;
  }
}

void gcc_cudnn_conv_choice_summary(const gcc_cudnn_conv *c, char *buf, size_t size) {
  if (!c->chosen) {
    snprintf(buf, size, "not chosen");
    return;
  }
  static const char *const short_names[3] = {"fwd", "bwd-data", "bwd-filter"};
  const int algos[3] = {(int)c->fwd, (int)c->bwd_data, (int)c->bwd_filter};
  const size_t ws[3] = {c->ws_fwd, c->ws_bwd_data, c->ws_bwd_filter};
  int math[3];
  gcc_cudnn_conv_math_types(c, math);
  size_t n = 0;
  buf[0] = '\0';
  for (int k = 0; k < 3 && n < size; k++) {
    int w = snprintf(buf + n, size - n, "%s%s %s %s ws %zu", k ? "; " : "", short_names[k],
                     gcc_cudnn_algo_name(k, algos[k]), math_name(math[k]), ws[k]);
    if (w < 0)
      return;
    n += (size_t)w;
    if (n < size && c->t_chosen[k] >= 0) {
      w = snprintf(buf + n, size - n, " %.3f ms (any %.3f)", (double)c->t_chosen[k],
                   (double)c->t_fastest[k]);
      if (w < 0)
        return;
      n += (size_t)w;
    }
  }
}

/* The checks every run function makes before calling cuDNN. */
static gcc_status run_checks(const gcc_cudnn_conv *c, cudnnHandle_t handle, const char *fn,
                             size_t need, void *workspace, size_t workspace_bytes, gcc_diag *d) {
  GCC_TRY(need_ptr(handle, "the cuDNN handle", fn, d));
  if (!c->prepared)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: the convolution's algorithms were not chosen "
                        "(call gcc_cudnn_conv_prepare once first)",
                        fn);
  if (workspace_bytes < need || (need && !workspace))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: the algorithm needs a %zu-byte workspace, got %zu bytes at %p", fn,
                        need, workspace_bytes, workspace);
  return GCC_OK;
}

gcc_status gcc_cudnn_conv_forward(const gcc_cudnn_conv *c, cudnnHandle_t handle, const float *x,
                                  const float *w, const float *b, float *y, void *workspace,
                                  size_t workspace_bytes, gcc_diag *d) {
  const char *fn = "gcc_cudnn_conv_forward";
  GCC_TRY(run_checks(c, handle, fn, c->ws_fwd, workspace, workspace_bytes, d));
  GCC_TRY(need_ptr(x, "X", fn, d));
  GCC_TRY(need_ptr(w, "W", fn, d));
  GCC_TRY(need_ptr(y, "Y", fn, d));
  const float one = 1.0f, zero = 0.0f;
  GCC_CUDNN_TRY(cudnnConvolutionForward(handle, &one, c->x_desc, x, c->w_desc, w, c->conv_desc,
                                        c->fwd, workspace, workspace_bytes, &zero, c->y_desc, y),
                d);
  if (b)
    GCC_CUDNN_TRY(cudnnAddTensor(handle, &one, c->b_desc, b, &one, c->y_desc, y), d);
  return GCC_OK;
}

int gcc_cudnn_conv_relu_fused(const gcc_cudnn_conv *c) {
  return c->prepared && c->fwd == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
}

gcc_status gcc_cudnn_conv_forward_relu(const gcc_cudnn_conv *c, cudnnHandle_t handle,
                                       const float *x, const float *w, const float *b, float *y,
                                       void *workspace, size_t workspace_bytes, gcc_diag *d) {
  const char *fn = "gcc_cudnn_conv_forward_relu";
  GCC_TRY(run_checks(c, handle, fn, c->ws_fwd, workspace, workspace_bytes, d));
  GCC_TRY(need_ptr(x, "X", fn, d));
  GCC_TRY(need_ptr(w, "W", fn, d));
  GCC_TRY(need_ptr(y, "Y", fn, d));
  const float one = 1.0f, zero = 0.0f;
  if (b && gcc_cudnn_conv_relu_fused(c)) {
    /* alpha2 = 0: z (= Y) is not read */
    GCC_CUDNN_TRY(cudnnConvolutionBiasActivationForward(handle, &one, c->x_desc, x, c->w_desc, w,
                                                        c->conv_desc, c->fwd, workspace,
                                                        workspace_bytes, &zero, c->y_desc, y,
                                                        c->b_desc, b, c->relu_desc, c->y_desc, y),
                  d);
    return GCC_OK;
  }
  GCC_TRY(gcc_cudnn_conv_forward(c, handle, x, w, b, y, workspace, workspace_bytes, d));
  GCC_CUDNN_TRY(
      cudnnActivationForward(handle, c->relu_desc, &one, c->y_desc, y, &zero, c->y_desc, y), d);
  return GCC_OK;
}

gcc_status gcc_cudnn_conv_backward_data(const gcc_cudnn_conv *c, cudnnHandle_t handle,
                                        const float *dy, const float *w, float *dx, void *workspace,
                                        size_t workspace_bytes, gcc_diag *d) {
  const char *fn = "gcc_cudnn_conv_backward_data";
  GCC_TRY(run_checks(c, handle, fn, c->ws_bwd_data, workspace, workspace_bytes, d));
  GCC_TRY(need_ptr(dy, "dY", fn, d));
  GCC_TRY(need_ptr(w, "W", fn, d));
  GCC_TRY(need_ptr(dx, "dX", fn, d));
  const float one = 1.0f, zero = 0.0f;
  GCC_CUDNN_TRY(cudnnConvolutionBackwardData(handle, &one, c->w_desc, w, c->y_desc, dy,
                                             c->conv_desc_bd, c->bwd_data, workspace,
                                             workspace_bytes, &zero, c->x_desc, dx),
                d);
  return GCC_OK;
}

gcc_status gcc_cudnn_conv_transpose(const gcc_cudnn_conv *c, cudnnHandle_t handle, const float *x,
                                    const float *w, const float *b, float *y, void *workspace,
                                    size_t workspace_bytes, gcc_diag *d) {
  GCC_TRY(gcc_cudnn_conv_backward_data(c, handle, x, w, y, workspace, workspace_bytes, d));
  if (b) {
    const float one = 1.0f;
    GCC_CUDNN_TRY(cudnnAddTensor(handle, &one, c->xb_desc, b, &one, c->x_desc, y), d);
  }
  return GCC_OK;
}

gcc_status gcc_cudnn_conv_backward_filter(const gcc_cudnn_conv *c, cudnnHandle_t handle,
                                          const float *dy, const float *x, float *dw,
                                          void *workspace, size_t workspace_bytes, gcc_diag *d) {
  const char *fn = "gcc_cudnn_conv_backward_filter";
  GCC_TRY(run_checks(c, handle, fn, c->ws_bwd_filter, workspace, workspace_bytes, d));
  GCC_TRY(need_ptr(dy, "dY", fn, d));
  GCC_TRY(need_ptr(x, "X", fn, d));
  GCC_TRY(need_ptr(dw, "dW", fn, d));
  const float one = 1.0f, zero = 0.0f;
  GCC_CUDNN_TRY(cudnnConvolutionBackwardFilter(handle, &one, c->x_desc, x, c->y_desc, dy,
                                               c->conv_desc_bf, c->bwd_filter, workspace,
                                               workspace_bytes, &zero, c->w_desc, dw),
                d);
  return GCC_OK;
}

gcc_status gcc_cudnn_conv_backward_bias(const gcc_cudnn_conv *c, cudnnHandle_t handle,
                                        const float *dy, float *db, gcc_diag *d) {
  const char *fn = "gcc_cudnn_conv_backward_bias";
  GCC_TRY(need_ptr(handle, "the cuDNN handle", fn, d));
  GCC_TRY(need_ptr(dy, "dY", fn, d));
  GCC_TRY(need_ptr(db, "dB", fn, d));
  const float one = 1.0f, zero = 0.0f;
  GCC_CUDNN_TRY(cudnnConvolutionBackwardBias(handle, &one, c->y_desc, dy, &zero, c->b_desc, db), d);
  return GCC_OK;
}

/* ---- pooling ---------------------------------------------------------- */

struct gcc_cudnn_pool {
  gcc_pool2d_shape shape;
  int64_t y[4];
  cudnnTensorDescriptor_t x_desc, y_desc;
  cudnnPoolingDescriptor_t pool_desc;
};

gcc_status gcc_pool2d_shape_of(const gcc_graph *g, int node, gcc_pool2d_shape *out, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  const gcc_cuda_op *co = gcc_cuda_op_of(n->op);
  if (!co || !co->xs ||
      (co->call != GCC_CUDA_CALL_POOL_FORWARD && co->call != GCC_CUDA_CALL_POOL_BACKWARD)) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: %s is not a pooling", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc));
  }
  const gcc_shape *x = slot_shape(g, n, co->xs);
  memset(out, 0, sizeof *out);
  out->n = x->dims[0];
  out->c = x->dims[1];
  out->h = x->dims[2];
  out->w = x->dims[3];
  gcc_window2d_of(n, NULL, &out->win);
  out->dtype = g->values[co->xs > 0 ? n->inputs[co->xs - 1] : n->outputs[-co->xs - 1]].dtype;
  out->nhwc = g->values[co->xs > 0 ? n->inputs[co->xs - 1] : n->outputs[-co->xs - 1]].layout ==
              GCC_LAYOUT_NHWC;
  if (co->max_pool)
    out->mode = GCC_POOL_MAX;
  else
    out->mode =
        n->av[POOL_COUNT_INCLUDE_PAD].i ? GCC_POOL_AVG_INCLUDE_PAD : GCC_POOL_AVG_EXCLUDE_PAD;
  return GCC_OK;
}

void gcc_cudnn_pool_destroy(gcc_cudnn_pool *p) {
  if (!p)
    return;
  if (p->x_desc)
    cudnnDestroyTensorDescriptor(p->x_desc);
  if (p->y_desc)
    cudnnDestroyTensorDescriptor(p->y_desc);
  if (p->pool_desc)
    cudnnDestroyPoolingDescriptor(p->pool_desc);
  free(p);
}

static gcc_status pool_descriptors(gcc_cudnn_pool *p, gcc_diag *d) {
  const gcc_pool2d_shape *s = &p->shape;
  const gcc_window2d *w = &s->win;
  static const cudnnPoolingMode_t modes[] = {CUDNN_POOLING_MAX_DETERMINISTIC,
                                             CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                             CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING};
  /* 16-bit tensors as Conv's (a pooling has no compute type: cuDNN sums an
   * average of 16-bit data in float32) */
  cudnnDataType_t dt = s->dtype == GCC_DT_BFLOAT16  ? CUDNN_DATA_BFLOAT16
                       : s->dtype == GCC_DT_FLOAT16 ? CUDNN_DATA_HALF
                                                    : CUDNN_DATA_FLOAT;
  GCC_CUDNN_TRY(cudnnCreateTensorDescriptor(&p->x_desc), d);
  GCC_CUDNN_TRY(cudnnCreateTensorDescriptor(&p->y_desc), d);
  GCC_CUDNN_TRY(cudnnCreatePoolingDescriptor(&p->pool_desc), d);
  const cudnnTensorFormat_t fmt = s->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  GCC_CUDNN_TRY(
      cudnnSetTensor4dDescriptor(p->x_desc, fmt, dt, (int)s->n, (int)s->c, (int)s->h, (int)s->w),
      d);
  /* NaN propagates through max pooling, as in PyTorch */
  GCC_CUDNN_TRY(cudnnSetPooling2dDescriptor(p->pool_desc, modes[s->mode], CUDNN_PROPAGATE_NAN,
                                            (int)w->kh, (int)w->kw, (int)w->pt, (int)w->pl,
                                            (int)w->sh, (int)w->sw),
                d);
  int y[4];
  GCC_CUDNN_TRY(
      cudnnGetPooling2dForwardOutputDim(p->pool_desc, p->x_desc, &y[0], &y[1], &y[2], &y[3]), d);
  p->y[0] = s->n;
  p->y[1] = s->c;
  p->y[2] = gcc_window_out_dim(s->h, w->kh, w->sh, w->pt, w->pb, 1);
  p->y[3] = gcc_window_out_dim(s->w, w->kw, w->sw, w->pl, w->pr, 1);
  GCC_TRY(check_out(s->mode == GCC_POOL_MAX ? "MaxPool" : "AveragePool", p->y, y, d));
  GCC_CUDNN_TRY(cudnnSetTensor4dDescriptor(p->y_desc, fmt, dt, y[0], y[1], y[2], y[3]), d);
  return GCC_OK;
}

gcc_status gcc_cudnn_pool_create(const gcc_pool2d_shape *shape, gcc_cudnn_pool **out, gcc_diag *d) {
  *out = NULL;
  const char *what = shape->mode == GCC_POOL_MAX ? "MaxPool" : "AveragePool";
  if (!fits_int(shape->n) || !fits_int(shape->c) || !fits_int(shape->h) || !fits_int(shape->w) ||
      (unsigned)shape->mode > GCC_POOL_AVG_EXCLUDE_PAD)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: sizes must be in [1, 2^31) and the mode known", what);
  GCC_TRY(check_window(&shape->win, what, d));
  if (shape->win.dh != 1 || shape->win.dw != 1)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: dilations (%" PRId64 ", %" PRId64 ") are not supported by cuDNN's "
                        "pooling",
                        what, shape->win.dh, shape->win.dw);
  gcc_cudnn_pool *p = calloc(1, sizeof *p);
  if (!p)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (cuDNN pooling)");
  p->shape = *shape;
  gcc_status s = pool_descriptors(p, d);
  if (s != GCC_OK) {
    gcc_cudnn_pool_destroy(p);
    return s;
  }
  *out = p;
  return GCC_OK;
}

void gcc_cudnn_pool_output_dims(const gcc_cudnn_pool *p, int64_t dims[4]) {
  memcpy(dims, p->y, sizeof p->y);
}

gcc_status gcc_cudnn_pool_forward(const gcc_cudnn_pool *p, cudnnHandle_t handle, const float *x,
                                  float *y, gcc_diag *d) {
  const char *fn = "gcc_cudnn_pool_forward";
  GCC_TRY(need_ptr(handle, "the cuDNN handle", fn, d));
  GCC_TRY(need_ptr(x, "X", fn, d));
  GCC_TRY(need_ptr(y, "Y", fn, d));
  const float one = 1.0f, zero = 0.0f;
  GCC_CUDNN_TRY(cudnnPoolingForward(handle, p->pool_desc, &one, p->x_desc, x, &zero, p->y_desc, y),
                d);
  return GCC_OK;
}

gcc_status gcc_cudnn_pool_backward(const gcc_cudnn_pool *p, cudnnHandle_t handle, const float *y,
                                   const float *dy, const float *x, float *dx, gcc_diag *d) {
  const char *fn = "gcc_cudnn_pool_backward";
  GCC_TRY(need_ptr(handle, "the cuDNN handle", fn, d));
  GCC_TRY(need_ptr(y, "Y", fn, d));
  GCC_TRY(need_ptr(dy, "dY", fn, d));
  GCC_TRY(need_ptr(x, "X", fn, d));
  GCC_TRY(need_ptr(dx, "dX", fn, d));
  const float one = 1.0f, zero = 0.0f;
  GCC_CUDNN_TRY(cudnnPoolingBackward(handle, p->pool_desc, &one, p->y_desc, y, p->y_desc, dy,
                                     p->x_desc, x, &zero, p->x_desc, dx),
                d);
  return GCC_OK;
}

/* ---- cache ------------------------------------------------------------ */

struct gcc_cudnn_cache {
  gcc_cudnn_conv **convs;
  int n_convs, cap_convs;
  gcc_cudnn_pool **pools;
  int n_pools, cap_pools;
};

gcc_status gcc_cudnn_cache_create(gcc_cudnn_cache **out, gcc_diag *d) {
  *out = calloc(1, sizeof **out);
  if (!*out)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (cuDNN cache)");
  return GCC_OK;
}

void gcc_cudnn_cache_destroy(gcc_cudnn_cache *c) {
  if (!c)
    return;
  for (int i = 0; i < c->n_convs; i++)
    gcc_cudnn_conv_destroy(c->convs[i]);
  for (int i = 0; i < c->n_pools; i++)
    gcc_cudnn_pool_destroy(c->pools[i]);
  free(c->convs);
  free(c->pools);
  free(c);
}

/* Shapes compare field by field (the structs may have padding). */
static int same_window(const gcc_window2d *a, const gcc_window2d *b) {
  return a->kh == b->kh && a->kw == b->kw && a->sh == b->sh && a->sw == b->sw && a->pt == b->pt &&
         a->pl == b->pl && a->pb == b->pb && a->pr == b->pr && a->dh == b->dh && a->dw == b->dw;
}

/* realloc of an array of `elem`-byte entries to hold n + 1: the new array
 * (NULL on failure, `arr` then unchanged), capacity in *cap. */
static void *grow(void *arr, size_t elem, int *cap, int n) {
  if (n < *cap)
    return arr;
  int nc = *cap ? 2 * *cap : 8;
  void *p = realloc(arr, (size_t)nc * elem);
  if (p)
    *cap = nc;
  return p;
}

gcc_status gcc_cudnn_cache_conv(gcc_cudnn_cache *c, const gcc_conv2d_shape *shape,
                                gcc_cudnn_conv **out, gcc_diag *d) {
  for (int i = 0; i < c->n_convs; i++) {
    const gcc_conv2d_shape *s = &c->convs[i]->shape;
    if (s->n == shape->n && s->c == shape->c && s->h == shape->h && s->w == shape->w &&
        s->m == shape->m && same_window(&s->win, &shape->win) &&
        (s->group > 0 ? s->group : 1) == (shape->group > 0 ? shape->group : 1) &&
        s->tf32 == shape->tf32 && s->dtype == shape->dtype &&
        s->nondeterministic == shape->nondeterministic && s->nhwc == shape->nhwc) {
      *out = c->convs[i];
      return GCC_OK;
    }
  }
  gcc_cudnn_conv **convs = grow(c->convs, sizeof *convs, &c->cap_convs, c->n_convs);
  if (!convs)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (cuDNN cache)");
  c->convs = convs;
  GCC_TRY(gcc_cudnn_conv_create(shape, out, d));
  c->convs[c->n_convs++] = *out;
  return GCC_OK;
}

gcc_status gcc_cudnn_cache_pool(gcc_cudnn_cache *c, const gcc_pool2d_shape *shape,
                                gcc_cudnn_pool **out, gcc_diag *d) {
  for (int i = 0; i < c->n_pools; i++) {
    const gcc_pool2d_shape *s = &c->pools[i]->shape;
    if (s->n == shape->n && s->c == shape->c && s->h == shape->h && s->w == shape->w &&
        s->mode == shape->mode && same_window(&s->win, &shape->win) &&
        (s->dtype ? s->dtype : GCC_DT_FLOAT32) == (shape->dtype ? shape->dtype : GCC_DT_FLOAT32) &&
        s->nhwc == shape->nhwc) {
      *out = c->pools[i];
      return GCC_OK;
    }
  }
  gcc_cudnn_pool **pools = grow(c->pools, sizeof *pools, &c->cap_pools, c->n_pools);
  if (!pools)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (cuDNN cache)");
  c->pools = pools;
  GCC_TRY(gcc_cudnn_pool_create(shape, out, d));
  c->pools[c->n_pools++] = *out;
  return GCC_OK;
}

int gcc_cudnn_cache_size(const gcc_cudnn_cache *c) {
  return c->n_convs + c->n_pools;
}

int gcc_cudnn_cache_conv_count(const gcc_cudnn_cache *c) {
  return c->n_convs;
}

const gcc_cudnn_conv *gcc_cudnn_cache_conv_at(const gcc_cudnn_cache *c, int i) {
  return c->convs[i];
}
