// The cuDNN module (runtime/cuda/cudnn_conv.h) without a GPU: descriptor set-up
// and the output shapes cuDNN computes (cudnnGetConvolution2dForwardOutputDim,
// cudnnGetPooling2dForwardOutputDim need no device) against our shape
// inference for several stride / padding / dilation cases; the per-shape
// cache over the convolutions of both CNN plans; the handle and the
// functions that need a device refusing to run when called wrongly
// (NULL handle, no algorithms chosen, short workspace) with a clear status.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include <sys/stat.h>

extern "C" {
#include "graph/builder.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "models/models.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/plan.h"
}
#include "tests/testutil.h"

namespace {

bool HasGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Our shape inference on one Conv node of X [n, c, h, w], W [m, c, kh, kw].
void InferConv(const gcc_conv2d_shape &s, int64_t y[4]) {
  gcc_builder *b = gcc_builder_new("conv", 1);
  ASSERT_NE(b, nullptr);
  int64_t xd[4] = {s.n, s.c, s.h, s.w}, wd[4] = {s.m, s.c, s.win.kh, s.win.kw};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 4, xd);
  int w = gcc_build_input(b, "w", GCC_DT_FLOAT32, 4, wd);
  int ins[2] = {x, w};
  int out = gcc_build_op(b, GCC_OP_CONV, "conv", "y", ins, 2);
  int64_t st[2] = {s.win.sh, s.win.sw}, pd[4] = {s.win.pt, s.win.pl, s.win.pb, s.win.pr},
          dl[2] = {s.win.dh, s.win.dw};
  gcc_build_set_ints(b, out, "strides", st, 2);
  gcc_build_set_ints(b, out, "pads", pd, 4);
  gcc_build_set_ints(b, out, "dilations", dl, 2);
  gcc_build_output(b, out);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_infer_shapes(g, &d), GCC_OK) << d.msg;
  const gcc_value *v = &g->values[gcc_graph_find(g, "y")];
  ASSERT_EQ(v->shape.ndim, 4);
  for (int i = 0; i < 4; i++)
    y[i] = v->shape.dims[i];
  gcc_graph_free(g);
}

gcc_conv2d_shape ConvShape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t m, int64_t kh,
                           int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                           int64_t dw) {
  gcc_conv2d_shape s{};
  s.n = n, s.c = c, s.h = h, s.w = w, s.m = m;
  s.win = {kh, kw, sh, sw, ph, pw, ph, pw, dh, dw};
  return s;
}

TEST(CudnnConv, DescriptorOutputShapesAgreeWithShapeInference) {
  const gcc_conv2d_shape cases[] = {
      ConvShape(64, 3, 32, 32, 6, 5, 5, 1, 1, 0, 0, 1, 1), // cifar_cnn conv1 at batch 64
      ConvShape(4, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, 1, 1), // conv2
      ConvShape(2, 3, 17, 23, 8, 3, 3, 2, 2, 1, 1, 1, 1),  // stride 2, pad 1, odd sizes
      ConvShape(2, 4, 20, 15, 5, 3, 2, 1, 3, 2, 0, 2, 1),  // dilation 2, non-square kernel
      ConvShape(1, 1, 9, 9, 1, 3, 3, 3, 2, 2, 1, 3, 2),    // everything at once
      ConvShape(3, 2, 7, 5, 4, 1, 1, 1, 1, 0, 0, 1, 1),    // 1x1
      ConvShape(1, 2, 5, 5, 3, 5, 5, 1, 1, 0, 0, 1, 1),    // output 1x1
  };
  for (const gcc_conv2d_shape &s : cases) {
    SCOPED_TRACE("X " + std::to_string(s.n) + "x" + std::to_string(s.c) + "x" +
                 std::to_string(s.h) + "x" + std::to_string(s.w) + " k" + std::to_string(s.win.kh) +
                 "x" + std::to_string(s.win.kw) + " s" + std::to_string(s.win.sh) + "," +
                 std::to_string(s.win.sw) + " d" + std::to_string(s.win.dh) + "," +
                 std::to_string(s.win.dw));
    int64_t ours[4];
    InferConv(s, ours);
    if (HasFatalFailure())
      return;
    gcc_cudnn_conv *c = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
    int64_t theirs[4];
    gcc_cudnn_conv_output_dims(c, theirs);
    for (int i = 0; i < 4; i++)
      EXPECT_EQ(theirs[i], ours[i]) << "dim " << i;
    EXPECT_FALSE(gcc_cudnn_conv_prepared(c));
    EXPECT_EQ(gcc_cudnn_conv_workspace_bytes(c), 0u);
    int f, bd, bf;
    EXPECT_EQ(gcc_cudnn_conv_algorithms(c, &f, &bd, &bf), 0);
    EXPECT_EQ(f, -1);
    gcc_cudnn_conv_destroy(c);
  }
}

TEST(CudnnConv, RejectsWhatCudnnCannotExpress) {
  gcc_diag d{};
  gcc_cudnn_conv *c = reinterpret_cast<gcc_cudnn_conv *>(&d);
  gcc_conv2d_shape s = ConvShape(1, 1, 8, 8, 1, 3, 3, 1, 1, 1, 1, 1, 1);
  s.win.pb = 0; // ONNX pads (1, 1, 0, 1): asymmetric
  EXPECT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_ERR_UNSUPPORTED);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(d.msg).find("asymmetric"), std::string::npos) << d.msg;
  s = ConvShape(0, 1, 8, 8, 1, 3, 3, 1, 1, 0, 0, 1, 1);
  EXPECT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_ERR_INVALID_ARGUMENT);
  s = ConvShape(1, 1, 8, 8, 1, 3, 3, 0, 1, 0, 0, 1, 1); // stride 0
  EXPECT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_ERR_INVALID_ARGUMENT);
  gcc_pool2d_shape p{};
  p.n = 1, p.c = 1, p.h = 8, p.w = 8, p.mode = GCC_POOL_MAX;
  p.win = {2, 2, 2, 2, 0, 0, 0, 0, 2, 1};
  gcc_cudnn_pool *pool = nullptr;
  EXPECT_EQ(gcc_cudnn_pool_create(&p, &pool, &d), GCC_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(d.msg).find("dilations"), std::string::npos) << d.msg;
}

TEST(CudnnConv, HandleWithoutGpuIsAClearDeviceError) {
  cudnnHandle_t h = nullptr;
  gcc_diag d{};
  gcc_status s = gcc_cudnn_handle_create(&h, &d);
  if (HasGpu()) {
    ASSERT_EQ(s, GCC_OK) << d.msg;
    EXPECT_NE(h, nullptr);
    gcc_cudnn_handle_destroy(h);
    return;
  }
  EXPECT_EQ(s, GCC_ERR_DEVICE);
  EXPECT_EQ(h, nullptr);
  std::string msg = d.msg;
  EXPECT_NE(msg.find("cudnnCreate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cudnn_conv.c:"), std::string::npos) << msg; // file:line of the call
  EXPECT_NE(msg.find("CUDNN_STATUS_NOT_INITIALIZED"), std::string::npos) << msg;
}

TEST(CudnnConv, DeviceFunctionsRefuseWrongCalls) {
  gcc_conv2d_shape s = ConvShape(2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1);
  gcc_cudnn_conv *c = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
  float buf[4]; // never read: every call below fails its checks first
  auto expect = [&](gcc_status got, const char *needle) {
    EXPECT_EQ(got, GCC_ERR_INVALID_ARGUMENT) << d.msg;
    EXPECT_NE(std::string(d.msg).find(needle), std::string::npos) << d.msg;
  };
  expect(gcc_cudnn_conv_prepare(c, nullptr, 1 << 20, &d), "handle");
  expect(gcc_cudnn_conv_forward(c, nullptr, buf, buf, buf, buf, nullptr, 0, &d), "handle");
  expect(gcc_cudnn_conv_backward_data(c, nullptr, buf, buf, buf, nullptr, 0, &d), "handle");
  expect(gcc_cudnn_conv_backward_filter(c, nullptr, buf, buf, buf, nullptr, 0, &d), "handle");
  expect(gcc_cudnn_conv_backward_bias(c, nullptr, buf, buf, &d), "handle");
  // a handle, but no algorithms chosen: refused before cuDNN is called
  // (the handle value is never dereferenced)
  cudnnHandle_t fake = reinterpret_cast<cudnnHandle_t>(&buf[0]);
  expect(gcc_cudnn_conv_forward(c, fake, buf, buf, buf, buf, nullptr, 0, &d), "prepare");
  expect(gcc_cudnn_conv_backward_data(c, fake, buf, buf, buf, nullptr, 0, &d), "prepare");
  expect(gcc_cudnn_conv_backward_filter(c, fake, buf, buf, buf, nullptr, 0, &d), "prepare");
  expect(gcc_cudnn_conv_backward_bias(c, fake, nullptr, buf, &d), "dY");
  gcc_cudnn_conv_destroy(c);

  gcc_pool2d_shape p{};
  p.n = 1, p.c = 2, p.h = 6, p.w = 6, p.mode = GCC_POOL_AVG_EXCLUDE_PAD;
  p.win = {3, 3, 2, 2, 1, 1, 1, 1, 1, 1};
  gcc_cudnn_pool *pool = nullptr;
  ASSERT_EQ(gcc_cudnn_pool_create(&p, &pool, &d), GCC_OK) << d.msg;
  int64_t y[4];
  gcc_cudnn_pool_output_dims(pool, y);
  EXPECT_EQ(y[2], 3); // floor((6 + 2 - 3) / 2) + 1
  EXPECT_EQ(y[3], 3);
  expect(gcc_cudnn_pool_forward(pool, nullptr, buf, buf, &d), "handle");
  expect(gcc_cudnn_pool_backward(pool, fake, buf, buf, nullptr, buf, &d), "X");
  gcc_cudnn_pool_destroy(pool);
}

// Issue 21: the algorithm of each direction is the fastest candidate that
// is deterministic (the atomics-based backward algorithms vary run to run),
// runs in float32 FMA math (no TF32 tensor cores: results match the CPU
// backend) and fits the workspace cap; its math type is then set on that
// direction's descriptor (cudnnSetConvolutionMathType), as cuDNN requires
// for an algorithm chosen from a perf result. Needs no GPU: the candidate
// lists are cuDNN's perf structs as a heuristic could return them.
gcc_cudnn_algo_perf Perf(int algo, cudnnStatus_t st, size_t mem, cudnnDeterminism_t det,
                         cudnnMathType_t math) {
  gcc_cudnn_algo_perf p{};
  p.algo = algo;
  p.status = st;
  p.memory = mem;
  p.determinism = det;
  p.math_type = math;
  return p;
}

TEST(CudnnConv, PicksTheFastestDeterministicFmaCandidateThatFits) {
  const size_t cap = 1 << 20;
  const gcc_cudnn_algo_perf list[] = {
      Perf(4, CUDNN_STATUS_NOT_SUPPORTED, 0, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH), // failed
      Perf(3, CUDNN_STATUS_SUCCESS, 0, CUDNN_NON_DETERMINISTIC, CUDNN_FMA_MATH),   // atomics
      Perf(1, CUDNN_STATUS_SUCCESS, 0, CUDNN_DETERMINISTIC, CUDNN_TENSOR_OP_MATH), // TF32
      Perf(5, CUDNN_STATUS_SUCCESS, 4 << 20, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH), // too big
      Perf(0, CUDNN_STATUS_SUCCESS, 4096, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH),    // this one
      Perf(2, CUDNN_STATUS_SUCCESS, 0, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH),       // slower
  };
  size_t smallest = 0;
  EXPECT_EQ(gcc_cudnn_pick_algo(list, 6, cap, &smallest), 4);
  // nothing qualifies but for the cap: -1, and the smallest that would
  const gcc_cudnn_algo_perf big[] = {
      Perf(1, CUDNN_STATUS_SUCCESS, 0, CUDNN_NON_DETERMINISTIC, CUDNN_FMA_MATH),
      Perf(5, CUDNN_STATUS_SUCCESS, 8 << 20, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH),
      Perf(6, CUDNN_STATUS_SUCCESS, 2 << 20, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH),
  };
  EXPECT_EQ(gcc_cudnn_pick_algo(big, 3, cap, &smallest), -1);
  EXPECT_EQ(smallest, (size_t)2 << 20);
  // --precision tf32 (and 16-bit data): tensor-op math qualifies too, so the
  // fastest is the TF32 candidate; never a non-deterministic one
  EXPECT_EQ(gcc_cudnn_pick_algo_math(list, 6, cap, &smallest, 1), 2);
  EXPECT_EQ(gcc_cudnn_pick_algo_math(list, 6, cap, &smallest, 0), 4);
}

TEST(CudnnConv, ChoosingCommitsDeterministicAlgorithmsAndTheirMathType) {
  gcc_conv2d_shape s = ConvShape(4, 3, 32, 32, 6, 5, 5, 1, 1, 0, 0, 1, 1);
  gcc_cudnn_conv *c = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
  const gcc_cudnn_algo_perf fwd[] = {
      Perf(1, CUDNN_STATUS_SUCCESS, 0, CUDNN_DETERMINISTIC, CUDNN_TENSOR_OP_MATH),
      Perf(0, CUDNN_STATUS_SUCCESS, 0, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH)};
  const gcc_cudnn_algo_perf bwd_data[] = {
      Perf(0, CUDNN_STATUS_SUCCESS, 0, CUDNN_NON_DETERMINISTIC, CUDNN_FMA_MATH),
      Perf(1, CUDNN_STATUS_SUCCESS, 512, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH)};
  const gcc_cudnn_algo_perf bwd_filter[] = {
      Perf(3, CUDNN_STATUS_SUCCESS, 0, CUDNN_NON_DETERMINISTIC, CUDNN_FMA_MATH),
      Perf(0, CUDNN_STATUS_SUCCESS, 0, CUDNN_NON_DETERMINISTIC, CUDNN_FMA_MATH),
      Perf(1, CUDNN_STATUS_SUCCESS, 1024, CUDNN_DETERMINISTIC, CUDNN_FMA_MATH)};
  ASSERT_EQ(gcc_cudnn_conv_choose(c, fwd, 2, bwd_data, 2, bwd_filter, 3, 1 << 20, &d), GCC_OK)
      << d.msg;
  int f = -1, bd = -1, bf = -1;
  gcc_cudnn_conv_algorithms(c, &f, &bd, &bf);
  EXPECT_EQ(f, 0);  // IMPLICIT_GEMM, not the TF32 candidate
  EXPECT_EQ(bd, 1); // ALGO_1, not the non-deterministic ALGO_0
  EXPECT_EQ(bf, 1); // ALGO_1, not ALGO_0 / ALGO_3
  int math[3];
  gcc_cudnn_conv_math_types(c, math);
  for (int i = 0; i < 3; i++)
    EXPECT_EQ(math[i], (int)CUDNN_FMA_MATH) << "direction " << i;
  EXPECT_FALSE(gcc_cudnn_conv_prepared(c)); // the workspace sizes need a GPU
  // no deterministic backward-filter candidate: an error naming the direction
  gcc_cudnn_conv *c2 = nullptr;
  ASSERT_EQ(gcc_cudnn_conv_create(&s, &c2, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_cudnn_conv_choose(c2, fwd, 2, bwd_data, 2, bwd_filter, 2, 1 << 20, &d),
            GCC_ERR_DEVICE);
  EXPECT_NE(std::string(d.msg).find("backward-filter"), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("deterministic"), std::string::npos) << d.msg;
  gcc_cudnn_conv_destroy(c2);
  gcc_cudnn_conv_destroy(c);
}

// Every convolution and pooling node of both CNNs' training and evaluation
// plans on cuda:0: its cuDNN descriptors give the shapes shape inference
// gave, and the cache holds one entry per distinct shape.
TEST(CudnnConv, EveryCnnPlanNodeThroughTheCache) {
  struct M {
    const char *name;
    gcc_status (*build)(uint64_t, gcc_graph **, gcc_diag *);
    uint64_t seed;
  } models[] = {{"cifar_cnn", gcc_model_cifar_cnn, GCC_CIFAR_CNN_SEED},
                {"mnist_cnn", gcc_model_mnist_cnn, GCC_MNIST_CNN_SEED}};
  for (const M &m : models) {
    gcc_graph *model = nullptr;
    gcc_diag d{};
    ASSERT_EQ(m.build(m.seed, &model, &d), GCC_OK) << d.msg;
    gcc_cudnn_cache *cache = nullptr;
    ASSERT_EQ(gcc_cudnn_cache_create(&cache, &d), GCC_OK);
    int nodes = 0;
    for (gcc_mode mode : {GCC_MODE_TRAIN, GCC_MODE_EVAL}) {
      gcc_options o{};
      o.mode = mode;
      o.batch_size = mode == GCC_MODE_TRAIN ? model->training.batch_size : 1000;
      o.opt = model->training.opt;
      o.device = GCC_DEV_CUDA(0);
      o.device_explicit = 1;
      o.n_cuda_devices = 1;
      FILE *sink = fopen("/dev/null", "w");
      o.warn_file = sink;
      gcc_graph *g = nullptr;
      gcc_mem_plan mem{};
      ASSERT_EQ(gcc_compile_graph(model, &o, &g, &mem, &d), GCC_OK) << d.msg;
      fclose(sink);
      for (int i = 0; i < g->n_nodes; i++) {
        const gcc_node *n = &g->nodes[i];
        if (gcc_lowering_of(n->op)->kind != GCC_LOWER_LIBRARY || n->op == GCC_OP_CONV_GRAD_BIAS)
          continue;
        SCOPED_TRACE(std::string(m.name) + " " + n->name);
        EXPECT_EQ(n->device, GCC_DEV_CUDA(0));
        nodes++;
        int64_t dims[4];
        const gcc_shape *y; // the forward output of the node's op family
        gcc_conv2d_shape cs;
        gcc_pool2d_shape ps;
        if (gcc_conv2d_shape_of(g, i, &cs, &d) == GCC_OK) {
          gcc_cudnn_conv *c = nullptr;
          ASSERT_EQ(gcc_cudnn_cache_conv(cache, &cs, &c, &d), GCC_OK) << d.msg;
          gcc_cudnn_conv_output_dims(c, dims);
          y = &g->values[n->op == GCC_OP_CONV ? n->outputs[0] : n->inputs[0]].shape;
        } else {
          ASSERT_EQ(gcc_pool2d_shape_of(g, i, &ps, &d), GCC_OK) << d.msg;
          gcc_cudnn_pool *p = nullptr;
          ASSERT_EQ(gcc_cudnn_cache_pool(cache, &ps, &p, &d), GCC_OK) << d.msg;
          gcc_cudnn_pool_output_dims(p, dims);
          bool fwd = n->op == GCC_OP_MAX_POOL || n->op == GCC_OP_AVERAGE_POOL;
          y = &g->values[fwd ? n->outputs[0] : n->inputs[0]].shape;
        }
        ASSERT_EQ(y->ndim, 4);
        for (int k = 0; k < 4; k++)
          EXPECT_EQ(dims[k], y->dims[k]) << "dim " << k;
      }
      gcc_mem_plan_free(&mem);
      gcc_graph_free(g);
    }
    // train: conv1 (forward, filter grad), conv2 (forward, data and filter
    // grads), pool1 and pool2 (forward, grad) at the training batch; eval:
    // the same four shapes at batch 1000
    EXPECT_EQ(nodes, 2 + 3 + 2 + 2 + 4);
    EXPECT_EQ(gcc_cudnn_cache_size(cache), 8);
    gcc_cudnn_cache_destroy(cache);
    gcc_graph_free(model);
  }
}

// --no-deterministic (gcc_options.nondeterministic) reaches every
// convolution's shape through the compiled graph; the default keeps it 0,
// and the per-process cache keeps the two apart.
TEST(CudnnConv, NondeterministicOptionReachesTheConvolutionShapes) {
  gcc_graph *model = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &model, &d), GCC_OK) << d.msg;
  gcc_cudnn_cache *cache = nullptr;
  ASSERT_EQ(gcc_cudnn_cache_create(&cache, &d), GCC_OK);
  for (int nondet : {0, 1}) {
    SCOPED_TRACE(nondet);
    gcc_options o{};
    o.mode = GCC_MODE_TRAIN;
    o.batch_size = 8;
    o.opt = model->training.opt;
    o.device = GCC_DEV_CUDA(0);
    o.device_explicit = 1;
    o.n_cuda_devices = 1;
    o.nondeterministic = nondet;
    FILE *sink = fopen("/dev/null", "w");
    o.warn_file = sink;
    gcc_graph *g = nullptr;
    gcc_mem_plan mem{};
    ASSERT_EQ(gcc_compile_graph(model, &o, &g, &mem, &d), GCC_OK) << d.msg;
    fclose(sink);
    EXPECT_EQ(g->nondeterministic, nondet);
    int convs = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      gcc_conv2d_shape cs;
      if (g->nodes[i].op != GCC_OP_CONV && g->nodes[i].op != GCC_OP_CONV_GRAD_DATA &&
          g->nodes[i].op != GCC_OP_CONV_GRAD_FILTER)
        continue;
      ASSERT_EQ(gcc_conv2d_shape_of(g, i, &cs, &d), GCC_OK) << d.msg;
      EXPECT_EQ(cs.nondeterministic, nondet) << g->nodes[i].name;
      gcc_cudnn_conv *c = nullptr;
      ASSERT_EQ(gcc_cudnn_cache_conv(cache, &cs, &c, &d), GCC_OK) << d.msg;
      EXPECT_EQ(gcc_cudnn_conv_shape(c)->nondeterministic, nondet);
      convs++;
    }
    EXPECT_EQ(convs, 5);
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
  // conv1 and conv2, each once per mode
  EXPECT_EQ(gcc_cudnn_cache_conv_count(cache), 4);
  gcc_cudnn_cache_destroy(cache);
  gcc_graph_free(model);
}

// Mixed precision (issue 19): the cuDNN module describes 16-bit poolings
// and convolutions of a bfloat16 or float16 plan of the CIFAR CNN, and a
// ConvTranspose of those dtypes, with descriptors of 16-bit tensors (float32
// arithmetic), cached apart from the float32 ones of the same shape. Plans
// no longer send 16-bit poolings to cuDNN (generated kernels: its legacy
// pooling API does not document BFLOAT16); this calls the module directly.
TEST(CudnnConv, SixteenBitPlansGetSixteenBitDescriptors) {
  gcc_graph *model = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &model, &d), GCC_OK) << d.msg;
  for (int precision : {GCC_PRECISION_BF16, GCC_PRECISION_FP16}) {
    gcc_dtype want = precision == GCC_PRECISION_BF16 ? GCC_DT_BFLOAT16 : GCC_DT_FLOAT16;
    SCOPED_TRACE(gcc_dtype_name(want));
    gcc_options o{};
    o.mode = GCC_MODE_TRAIN;
    o.batch_size = 8;
    o.opt = model->training.opt;
    o.device = GCC_DEV_CUDA(0);
    o.device_explicit = 1;
    o.n_cuda_devices = 1;
    o.precision = precision;
    FILE *sink = fopen("/dev/null", "w");
    o.warn_file = sink;
    gcc_graph *g = nullptr;
    gcc_mem_plan mem{};
    ASSERT_EQ(gcc_compile_graph(model, &o, &g, &mem, &d), GCC_OK) << d.msg;
    fclose(sink);
    gcc_cudnn_cache *cache = nullptr;
    ASSERT_EQ(gcc_cudnn_cache_create(&cache, &d), GCC_OK);
    int pools = 0, convs = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const gcc_node *n = &g->nodes[i];
      gcc_conv2d_shape cs;
      gcc_pool2d_shape ps;
      SCOPED_TRACE(n->name);
      if (n->op == GCC_OP_MAX_POOL || n->op == GCC_OP_MAX_POOL_GRAD) {
        ASSERT_EQ(gcc_pool2d_shape_of(g, i, &ps, &d), GCC_OK) << d.msg;
        EXPECT_EQ(ps.dtype, want);
        gcc_cudnn_pool *p16 = nullptr, *p32 = nullptr;
        ASSERT_EQ(gcc_cudnn_cache_pool(cache, &ps, &p16, &d), GCC_OK) << d.msg;
        ps.dtype = GCC_DT_FLOAT32;
        ASSERT_EQ(gcc_cudnn_cache_pool(cache, &ps, &p32, &d), GCC_OK) << d.msg;
        EXPECT_NE(p16, p32) << "a 16-bit pooling shares the float32 one's descriptors";
        pools++;
      } else if (n->op == GCC_OP_CONV || n->op == GCC_OP_CONV_GRAD_DATA ||
                 n->op == GCC_OP_CONV_GRAD_FILTER) {
        ASSERT_EQ(gcc_conv2d_shape_of(g, i, &cs, &d), GCC_OK) << d.msg;
        EXPECT_EQ(cs.dtype, want);
        gcc_cudnn_conv *c = nullptr;
        ASSERT_EQ(gcc_cudnn_cache_conv(cache, &cs, &c, &d), GCC_OK) << d.msg;
        convs++;
      }
    }
    EXPECT_EQ(pools, 4); // pool1, pool2 and their gradients
    EXPECT_EQ(convs, 5);
    gcc_cudnn_cache_destroy(cache);
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
  gcc_graph_free(model);
  // ConvTranspose's descriptors are a convolution's of its dtype (the one
  // whose input has Y's shape): 16-bit ones are made
  gcc_conv2d_shape s = ConvShape(2, 4, 13, 13, 12, 3, 3, 2, 2, 1, 1, 1, 1);
  s.dtype = GCC_DT_BFLOAT16;
  gcc_cudnn_conv *c = nullptr;
  ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_cudnn_conv_shape(c)->dtype, GCC_DT_BFLOAT16);
  gcc_cudnn_conv_destroy(c);
}

// Issue 29: --no-deterministic lets the choice take the atomics-based
// algorithms; among timed candidates (cudnnFind) the least time wins,
// whatever the list's order; the cost of determinism is the chosen time
// against the fastest candidate that qualifies without it.
gcc_cudnn_algo_perf Timed(int algo, cudnnDeterminism_t det, float ms, size_t mem = 0,
                          cudnnMathType_t math = CUDNN_FMA_MATH) {
  gcc_cudnn_algo_perf p = Perf(algo, CUDNN_STATUS_SUCCESS, mem, det, math);
  p.time_ms = ms;
  return p;
}

TEST(CudnnConv, DeterminismFilterAndTimedChoice) {
  const size_t cap = 1 << 20;
  size_t smallest = 0;
  const gcc_cudnn_algo_perf list[] = {
      Timed(0, CUDNN_NON_DETERMINISTIC, 0.50f),
      Timed(3, CUDNN_NON_DETERMINISTIC, 0.20f), // fastest of all
      Timed(1, CUDNN_DETERMINISTIC, 0.90f),
      Timed(5, CUDNN_DETERMINISTIC, 0.60f, 2 << 20), // faster, but over the cap
      Timed(6, CUDNN_DETERMINISTIC, 0.70f),          // fastest deterministic that fits
      Timed(2, CUDNN_DETERMINISTIC, 0.10f, 0, CUDNN_TENSOR_OP_MATH), // TF32: fp32 plans refuse
  };
  EXPECT_EQ(gcc_cudnn_pick_algo_opts(list, 6, cap, &smallest, 0, 1), 4);
  EXPECT_EQ(smallest, (size_t)2 << 20);
  EXPECT_EQ(gcc_cudnn_pick_algo_opts(list, 6, cap, &smallest, 0, 0), 1);
  EXPECT_EQ(gcc_cudnn_pick_algo_opts(list, 6, cap, &smallest, 1, 1), 5); // --precision tf32
  EXPECT_EQ(gcc_cudnn_pick_algo_opts(list, 6, cap, &smallest, 1, 0), 5);
  // heuristic lists (time -1) keep their order: the first that qualifies
  gcc_cudnn_algo_perf heur[] = {Timed(1, CUDNN_DETERMINISTIC, -1.0f),
                                Timed(0, CUDNN_DETERMINISTIC, -1.0f)};
  EXPECT_EQ(gcc_cudnn_pick_algo_opts(heur, 2, cap, &smallest, 0, 1), 0);

  // whole choices: the shape's flag decides, and the times are kept
  for (int nondet : {0, 1}) {
    SCOPED_TRACE(nondet ? "--no-deterministic" : "--deterministic");
    gcc_conv2d_shape s = ConvShape(4, 3, 32, 32, 6, 5, 5, 1, 1, 0, 0, 1, 1);
    s.nondeterministic = nondet;
    gcc_cudnn_conv *c = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
    const gcc_cudnn_algo_perf fwd[] = {Timed(1, CUDNN_DETERMINISTIC, 0.30f)};
    const gcc_cudnn_algo_perf bd[] = {Timed(0, CUDNN_NON_DETERMINISTIC, 0.40f),
                                      Timed(1, CUDNN_DETERMINISTIC, 0.50f)};
    const gcc_cudnn_algo_perf bf[] = {Timed(1, CUDNN_DETERMINISTIC, 0.80f),
                                      Timed(3, CUDNN_NON_DETERMINISTIC, 0.25f),
                                      Timed(0, CUDNN_NON_DETERMINISTIC, 0.35f)};
    ASSERT_EQ(gcc_cudnn_conv_choose(c, fwd, 1, bd, 2, bf, 3, cap, &d), GCC_OK) << d.msg;
    int f, b, w;
    gcc_cudnn_conv_algorithms(c, &f, &b, &w);
    EXPECT_EQ(f, 1);
    EXPECT_EQ(b, nondet ? 0 : 1);
    EXPECT_EQ(w, nondet ? 3 : 1);
    float tc[3], tf[3];
    gcc_cudnn_conv_choice_times(c, tc, tf);
    EXPECT_FLOAT_EQ(tc[0], 0.30f);
    EXPECT_FLOAT_EQ(tf[0], 0.30f);
    EXPECT_FLOAT_EQ(tc[1], nondet ? 0.40f : 0.50f);
    EXPECT_FLOAT_EQ(tf[1], 0.40f);
    EXPECT_FLOAT_EQ(tc[2], nondet ? 0.25f : 0.80f);
    EXPECT_FLOAT_EQ(tf[2], 0.25f);
    char sum[512];
    gcc_cudnn_conv_choice_summary(c, sum, sizeof sum);
    EXPECT_NE(std::string(sum).find("fwd IMPLICIT_PRECOMP_GEMM fma"), std::string::npos) << sum;
    EXPECT_NE(std::string(sum).find(nondet ? "bwd-filter ALGO_3" : "bwd-filter ALGO_1"),
              std::string::npos)
        << sum;
    gcc_cudnn_conv_destroy(c);
  }
  // --deterministic with only non-deterministic candidates: the message
  // says so and names the flag that would allow them
  gcc_conv2d_shape s = ConvShape(4, 3, 32, 32, 6, 5, 5, 1, 1, 0, 0, 1, 1);
  gcc_cudnn_conv *c = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
  const gcc_cudnn_algo_perf ok[] = {Timed(1, CUDNN_DETERMINISTIC, 0.3f)};
  const gcc_cudnn_algo_perf bad[] = {Timed(0, CUDNN_NON_DETERMINISTIC, 0.3f)};
  EXPECT_EQ(gcc_cudnn_conv_choose(c, ok, 1, ok, 1, bad, 1, cap, &d), GCC_ERR_DEVICE);
  EXPECT_NE(std::string(d.msg).find("--no-deterministic"), std::string::npos) << d.msg;
  gcc_cudnn_conv_destroy(c);
}

// ---- the disk cache of choices ----------------------------------------------

struct FakeFind {
  int calls = 0;
  static gcc_status Fn(void *user, const gcc_cudnn_conv *, gcc_cudnn_candidates *out, gcc_diag *) {
    auto *f = static_cast<FakeFind *>(user);
    f->calls++;
    *out = gcc_cudnn_candidates{};
    out->fwd[0] = Timed(0, CUDNN_DETERMINISTIC, 0.45f);
    out->fwd[1] = Timed(1, CUDNN_DETERMINISTIC, 0.125f, 4096); // the fastest
    out->n_fwd = 2;
    out->bwd_data[0] = Timed(0, CUDNN_NON_DETERMINISTIC, 0.2f);
    out->bwd_data[1] = Timed(1, CUDNN_DETERMINISTIC, 0.25f);
    out->n_bwd_data = 2;
    out->bwd_filter[0] = Timed(3, CUDNN_NON_DETERMINISTIC, 0.5f);
    out->bwd_filter[1] = Timed(1, CUDNN_DETERMINISTIC, 0.75f, 512);
    out->n_bwd_filter = 2;
    out->timed[0] = out->timed[1] = out->timed[2] = 1;
    return GCC_OK;
  }
};

gcc_cudnn_gpu_id H100() {
  gcc_cudnn_gpu_id g{};
  std::snprintf(g.name, sizeof g.name, "NVIDIA H100 80GB HBM3");
  g.sm = 90;
  g.cudnn_version = 91400;
  return g;
}

std::string ReadAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string Key(const gcc_conv2d_shape &s, const gcc_cudnn_gpu_id &g, size_t cap) {
  gcc_cudnn_conv *c = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
  char buf[1024] = "";
  EXPECT_EQ(gcc_cudnn_choice_key(c, &g, cap, buf, sizeof buf, &d), GCC_OK) << d.msg;
  gcc_cudnn_conv_destroy(c);
  return buf;
}

TEST(CudnnChoiceCache, KeyHoldsTheGpuCudnnAndTheWholeDescriptor) {
  gcc_conv2d_shape s = ConvShape(64, 64, 56, 56, 128, 3, 3, 2, 2, 1, 1, 1, 1);
  gcc_cudnn_gpu_id g = H100();
  const size_t cap = 256u << 20;
  std::string k = Key(s, g, cap);
  for (const char *part :
       {"gpu=\"NVIDIA H100 80GB HBM3\"", "sm=90", "cudnn=91400", "x=64x64x56x56", "w=128x64x3x3",
        "dtype=float32", "layout=NCHW", "pads=1,1", "strides=2,2", "dilations=1,1", "groups=1",
        "math=fma", "deterministic=1", "workspace_cap=268435456"})
    EXPECT_NE(k.find(part), std::string::npos) << part << " not in " << k;
  // every field changes the key
  std::vector<std::string> keys = {k};
  auto with = [&](auto change) {
    gcc_conv2d_shape t = s;
    gcc_cudnn_gpu_id h = g;
    size_t c = cap;
    change(t, h, c);
    keys.push_back(Key(t, h, c));
  };
  with([](gcc_conv2d_shape &, gcc_cudnn_gpu_id &h, size_t &) { h.sm = 80; });
  with([](gcc_conv2d_shape &, gcc_cudnn_gpu_id &h, size_t &) { h.cudnn_version = 91300; });
  with([](gcc_conv2d_shape &, gcc_cudnn_gpu_id &h, size_t &) {
    std::snprintf(h.name, sizeof h.name, "NVIDIA H200");
  });
  with([](gcc_conv2d_shape &t, gcc_cudnn_gpu_id &, size_t &) { t.n = 32; });
  with([](gcc_conv2d_shape &t, gcc_cudnn_gpu_id &, size_t &) { t.win.pt = t.win.pb = 0; });
  with([](gcc_conv2d_shape &t, gcc_cudnn_gpu_id &, size_t &) { t.win.sw = 1; });
  with([](gcc_conv2d_shape &t, gcc_cudnn_gpu_id &, size_t &) { t.win.dh = 2; });
  with([](gcc_conv2d_shape &t, gcc_cudnn_gpu_id &, size_t &) { t.group = 2; });
  with([](gcc_conv2d_shape &t, gcc_cudnn_gpu_id &, size_t &) { t.dtype = GCC_DT_BFLOAT16; });
  with([](gcc_conv2d_shape &t, gcc_cudnn_gpu_id &, size_t &) { t.tf32 = 1; });
  with([](gcc_conv2d_shape &t, gcc_cudnn_gpu_id &, size_t &) { t.nondeterministic = 1; });
  with([](gcc_conv2d_shape &t, gcc_cudnn_gpu_id &, size_t &) { t.nhwc = 1; });
  with([](gcc_conv2d_shape &, gcc_cudnn_gpu_id &, size_t &c) { c = 1 << 20; });
  std::set<std::string> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size());
  // one line: a name with a quote or a newline cannot break it
  std::snprintf(g.name, sizeof g.name, "odd\"name\nx");
  std::string odd = Key(s, g, cap);
  EXPECT_EQ(odd.find('\n'), std::string::npos) << odd;
  EXPECT_NE(odd.find("gpu=\"odd_name_x\""), std::string::npos) << odd;
}

// A miss times (calls find) and writes the entry; a hit on a fresh
// descriptor set reads the same choice and times nothing; a different GPU
// misses.
TEST(CudnnChoiceCache, HitSkipsFindAndGivesTheSameChoice) {
  gcc_test::TempDir tmp("cudnn_choice");
  ASSERT_FALSE(tmp.path().empty());
  std::string dir = tmp.file("cache/sub"); // created on demand
  gcc_cudnn_choice_cache cache{dir.c_str(), 1};
  gcc_conv2d_shape s = ConvShape(8, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1);
  gcc_cudnn_gpu_id g = H100();
  const size_t cap = 1 << 20;
  FakeFind ff;
  int algos[2][3];
  float times[2][3], fastest[2][3];
  for (int round = 0; round < 2; round++) {
    SCOPED_TRACE(round ? "second plan (hit)" : "first plan (miss)");
    gcc_cudnn_conv *c = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
    gcc_cudnn_choice_info info{};
    ASSERT_EQ(gcc_cudnn_conv_choose_cached(c, &g, &cache, FakeFind::Fn, &ff, cap, &info, &d),
              GCC_OK)
        << d.msg;
    EXPECT_EQ(info.hit, round);
    EXPECT_EQ(info.searched, 1 - round);
    EXPECT_STREQ(info.note, "");
    EXPECT_EQ(ff.calls, 1); // the second round did not time
    gcc_cudnn_conv_algorithms(c, &algos[round][0], &algos[round][1], &algos[round][2]);
    gcc_cudnn_conv_choice_times(c, times[round], fastest[round]);
    int math[3];
    gcc_cudnn_conv_math_types(c, math);
    for (int k = 0; k < 3; k++)
      EXPECT_EQ(math[k], (int)CUDNN_FMA_MATH);
    EXPECT_EQ(gcc_cudnn_conv_workspace_bytes(c), 4096u); // the entry's, until prepare asks cuDNN
    gcc_cudnn_conv_destroy(c);
  }
  EXPECT_EQ(algos[0][0], 1);
  EXPECT_EQ(algos[0][1], 1);
  EXPECT_EQ(algos[0][2], 1);
  for (int k = 0; k < 3; k++) {
    EXPECT_EQ(algos[1][k], algos[0][k]) << k;
    EXPECT_FLOAT_EQ(times[1][k], times[0][k]) << k;
    EXPECT_FLOAT_EQ(fastest[1][k], fastest[0][k]) << k;
  }
  EXPECT_FLOAT_EQ(fastest[0][2], 0.5f); // ALGO_3, refused for determinism
  // the entry is where gcc_cudnn_choice_path says, and holds the full key
  char key[1024], path[4300];
  gcc_diag d{};
  gcc_cudnn_conv *c = nullptr;
  ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_cudnn_choice_key(c, &g, cap, key, sizeof key, &d), GCC_OK);
  ASSERT_EQ(gcc_cudnn_choice_path(&cache, key, path, sizeof path, &d), GCC_OK);
  EXPECT_EQ(std::string(path).rfind(dir + "/cudnn-", 0), 0u) << path;
  std::string text = ReadAll(path);
  EXPECT_NE(text.find(std::string("key ") + key + "\n"), std::string::npos) << text;
  // another GPU: a miss, timed again
  gcc_cudnn_gpu_id other = H100();
  other.sm = 80;
  gcc_cudnn_choice_info info{};
  ASSERT_EQ(gcc_cudnn_conv_choose_cached(c, &other, &cache, FakeFind::Fn, &ff, cap, &info, &d),
            GCC_OK);
  EXPECT_EQ(info.hit, 0);
  EXPECT_EQ(ff.calls, 2);
  // use_cache 0 (--no-kernel-cache): timed, nothing read
  gcc_cudnn_choice_cache off{dir.c_str(), 0};
  ASSERT_EQ(gcc_cudnn_conv_choose_cached(c, &g, &off, FakeFind::Fn, &ff, cap, &info, &d), GCC_OK);
  EXPECT_EQ(info.hit, 0);
  EXPECT_EQ(ff.calls, 3);
  gcc_cudnn_conv_destroy(c);
}

// Damaged entries are ignored with a note naming the file, the shape is
// timed again and the entry rewritten (the next plan hits); an entry of
// another key at the same path is a plain miss; an unwritable directory
// only costs the caching.
TEST(CudnnChoiceCache, CorruptEntriesAreIgnoredWithANote) {
  gcc_test::TempDir tmp("cudnn_choice");
  ASSERT_FALSE(tmp.path().empty());
  gcc_cudnn_choice_cache cache{tmp.path().c_str(), 1};
  gcc_conv2d_shape s = ConvShape(2, 4, 9, 9, 8, 3, 3, 1, 1, 0, 0, 1, 1);
  gcc_cudnn_gpu_id g = H100();
  const size_t cap = 1 << 20;
  FakeFind ff;
  auto choose = [&](gcc_cudnn_choice_info *info) {
    gcc_cudnn_conv *c = nullptr;
    gcc_diag d{};
    EXPECT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK) << d.msg;
    EXPECT_EQ(gcc_cudnn_conv_choose_cached(c, &g, &cache, FakeFind::Fn, &ff, cap, info, &d), GCC_OK)
        << d.msg;
    int f, b, w;
    gcc_cudnn_conv_algorithms(c, &f, &b, &w);
    EXPECT_EQ(f, 1);
    EXPECT_EQ(w, 1);
    gcc_cudnn_conv_destroy(c);
  };
  gcc_cudnn_choice_info info{};
  choose(&info);
  ASSERT_EQ(ff.calls, 1);
  char key[1024], path[4300];
  {
    gcc_cudnn_conv *c = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK);
    ASSERT_EQ(gcc_cudnn_choice_key(c, &g, cap, key, sizeof key, &d), GCC_OK);
    ASSERT_EQ(gcc_cudnn_choice_path(&cache, key, path, sizeof path, &d), GCC_OK);
    gcc_cudnn_conv_destroy(c);
  }
  const std::string good = ReadAll(path);
  ASSERT_FALSE(good.empty());
  std::string flipped = good;
  flipped[flipped.find("forward ") + 8] ^= 1; // algorithm 1 -> 0: checksum fails
  std::string bad_algo = good;                // a sound checksum over an impossible algorithm
  const struct {
    const char *what;
    std::string text;
    const char *why;
  } cases[] = {
      {"flipped byte", flipped, "checksum"},
      {"truncated", good.substr(0, good.size() / 2), "truncated"},
      {"garbage",
       std::string("\x7f"
                   "ELF\0\0binary",
                   11),
       "NUL"},
      {"empty", "", "first line"},
  };
  int calls = ff.calls;
  for (const auto &k : cases) {
    SCOPED_TRACE(k.what);
    WriteAll(path, k.text);
    gcc_cudnn_choice_info i{};
    choose(&i);
    EXPECT_EQ(i.hit, 0);
    EXPECT_EQ(ff.calls, ++calls);
    std::string note = i.note;
    EXPECT_NE(note.find("corrupt"), std::string::npos) << note;
    EXPECT_NE(note.find(path), std::string::npos) << note;
    EXPECT_NE(note.find(k.why), std::string::npos) << note;
    EXPECT_EQ(ReadAll(path), good); // rewritten
    choose(&i);
    EXPECT_EQ(i.hit, 1);
    EXPECT_EQ(ff.calls, calls);
  }
  // another key's entry at this path (a hash collision): a miss, no note
  std::string foreign = good;
  size_t at = foreign.find("sm=90");
  ASSERT_NE(at, std::string::npos);
  foreign.replace(at, 5, "sm=89");
  foreign = foreign.substr(0, foreign.find("checksum "));
  uint64_t h = 0xcbf29ce484222325ull; // FNV-1a 64, as the entry's checksum
  for (unsigned char ch : foreign)
    h = (h ^ ch) * 0x100000001b3ull;
  char sum[40];
  std::snprintf(sum, sizeof sum, "checksum %016llx\n", (unsigned long long)h);
  WriteAll(path, foreign + sum);
  gcc_cudnn_choice_info i{};
  choose(&i);
  EXPECT_EQ(i.hit, 0);
  EXPECT_STREQ(i.note, "");
  EXPECT_EQ(ff.calls, ++calls);
  // a regular file where the directory should be: chosen, not cached, said
  std::string blocked = tmp.file("file");
  WriteAll(blocked, "x");
  std::string under_file = blocked + "/cache";
  gcc_cudnn_choice_cache nowhere{under_file.c_str(), 1};
  gcc_cudnn_conv *c = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_cudnn_conv_create(&s, &c, &d), GCC_OK);
  ASSERT_EQ(gcc_cudnn_conv_choose_cached(c, &g, &nowhere, FakeFind::Fn, &ff, cap, &i, &d), GCC_OK)
      << d.msg;
  EXPECT_EQ(i.hit, 0);
  EXPECT_NE(std::string(i.note).find("not cached"), std::string::npos) << i.note;
  gcc_cudnn_conv_destroy(c);
}

} // namespace

// The layout pass (--layout nhwc): every cuDNN convolution and pooling of
// the MNIST CNN's plans reads NHWC tensors (and KRSC filters), its shape
// says so, its descriptors are made (no GPU needed) with the logical output
// dims, the choice cache's key says layout=NHWC, and the per-process cache
// keeps NHWC and NCHW shapes apart.
TEST(CudnnConv, NhwcPlansGetNhwcDescriptorsKeyedApartFromNchw) {
  gcc_graph *model = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_cnn(GCC_MNIST_CNN_SEED, &model, &d), GCC_OK) << d.msg;
  gcc_cudnn_cache *cache = nullptr;
  ASSERT_EQ(gcc_cudnn_cache_create(&cache, &d), GCC_OK);
  const gcc_cudnn_gpu_id gpu = H100();
  for (int layout : {GCC_LAYOUT_CHOOSE_NCHW, GCC_LAYOUT_CHOOSE_NHWC}) {
    gcc_options o{};
    o.mode = GCC_MODE_TRAIN;
    o.batch_size = model->training.batch_size;
    o.opt = model->training.opt;
    o.device = GCC_DEV_CUDA(0);
    o.device_explicit = 1;
    o.n_cuda_devices = 1;
    o.layout = layout;
    FILE *sink = fopen("/dev/null", "w");
    o.warn_file = sink;
    gcc_graph *g = nullptr;
    gcc_mem_plan mem{};
    ASSERT_EQ(gcc_compile_graph(model, &o, &g, &mem, &d), GCC_OK) << d.msg;
    fclose(sink);
    int nodes = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const gcc_node *n = &g->nodes[i];
      if (gcc_lowering_of(n->op)->kind != GCC_LOWER_LIBRARY || n->op == GCC_OP_CONV_GRAD_BIAS)
        continue;
      SCOPED_TRACE(n->name);
      nodes++;
      const int want = layout == GCC_LAYOUT_CHOOSE_NHWC;
      EXPECT_EQ(g->values[n->inputs[0]].layout, want ? GCC_LAYOUT_NHWC : GCC_LAYOUT_NCHW);
      gcc_conv2d_shape cs;
      gcc_pool2d_shape ps;
      int64_t dims[4];
      const gcc_shape *y;
      if (gcc_conv2d_shape_of(g, i, &cs, &d) == GCC_OK) {
        EXPECT_EQ(cs.nhwc, want);
        gcc_cudnn_conv *c = nullptr;
        ASSERT_EQ(gcc_cudnn_cache_conv(cache, &cs, &c, &d), GCC_OK) << d.msg;
        gcc_cudnn_conv_output_dims(c, dims);
        y = &g->values[n->op == GCC_OP_CONV ? n->outputs[0] : n->inputs[0]].shape;
        char key[1024];
        ASSERT_EQ(gcc_cudnn_choice_key(c, &gpu, 1 << 20, key, sizeof key, &d), GCC_OK);
        EXPECT_NE(std::string(key).find(want ? "layout=NHWC" : "layout=NCHW"), std::string::npos)
            << key;
      } else {
        ASSERT_EQ(gcc_pool2d_shape_of(g, i, &ps, &d), GCC_OK) << d.msg;
        EXPECT_EQ(ps.nhwc, want);
        gcc_cudnn_pool *p = nullptr;
        ASSERT_EQ(gcc_cudnn_cache_pool(cache, &ps, &p, &d), GCC_OK) << d.msg;
        gcc_cudnn_pool_output_dims(p, dims);
        bool fwd = n->op == GCC_OP_MAX_POOL || n->op == GCC_OP_AVERAGE_POOL;
        y = &g->values[fwd ? n->outputs[0] : n->inputs[0]].shape;
      }
      for (int k = 0; k < 4; k++)
        EXPECT_EQ(dims[k], y->dims[k]) << "dim " << k; // logical N, C, H, W either way
    }
    EXPECT_EQ(nodes, 2 + 3 + 2 + 2); // as EveryCnnPlanNodeThroughTheCache's training plan
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
  // conv1, conv2, pool1, pool2: four shapes in each layout
  EXPECT_EQ(gcc_cudnn_cache_size(cache), 8);
  gcc_cudnn_cache_destroy(cache);
  gcc_graph_free(model);
}
