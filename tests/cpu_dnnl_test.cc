// The CPU backend on oneDNN (runtime/cpu/cpu_dnnl.h): every op whose CPU
// table entry prepares a oneDNN primitive gives, through the backend's
// prepare_node / run_node, what the op table's own kernel (the OpenBLAS /
// im2col / loop reference) gives, over the attributes the graph allows
// (transposes, alpha, beta, bias rows and full C; strides, pads,
// dilations; both average-pool divisors). And whole training steps of the
// MNIST CNN: on oneDNN twice with the same seed the weights are bitwise
// identical (a fixed thread count), and they stay within float rounding of
// the reference kernels' (GCC_CPU_ONEDNN=0).
#include <dirent.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/ops.h"
#include "models/models.h"
#include "passes/memplan.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_choice.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/plan.h"
#include "runtime/session.h"

namespace {

std::vector<float> Rand(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = u(rng);
  return v;
}

// max |got - want| / max |want|
double RelErr(const std::vector<float> &got, const std::vector<float> &want) {
  double mag = 0, err = 0;
  for (size_t i = 0; i < want.size(); i++) {
    mag = std::max(mag, std::fabs((double)want[i]));
    err = std::max(err, std::fabs((double)got[i] - (double)want[i]));
  }
  return mag > 0 ? err / mag : err;
}

gcc_shape Shape(std::initializer_list<int64_t> dims) {
  gcc_shape s{};
  s.ndim = (int)dims.size();
  int i = 0;
  for (int64_t v : dims)
    s.dims[i++] = v;
  return s;
}

using Attrs = std::function<void(gcc_graph *, int)>;

// One node of op `op` on random float32 inputs: runs the op table's kernel
// and the backend's prepared path, returns whether a primitive was
// prepared, and the largest relative difference of the outputs.
struct Result {
  bool prepared = false;
  std::string impl;
  double err = 0;
  std::vector<std::vector<float>> in, got; // the inputs, and the prepared path's outputs
};

Result RunBoth(int op, const std::vector<gcc_shape> &ins, const std::vector<gcc_shape> &outs,
               const Attrs &attrs) {
  Result r;
  gcc_diag d{};
  gcc_graph *g = gcc_graph_new("one", "<test>");
  std::vector<int> iv, ov;
  for (size_t i = 0; i < ins.size(); i++) {
    int v;
    EXPECT_EQ(gcc_graph_add_value(g, ("in" + std::to_string(i)).c_str(), GCC_DT_FLOAT32, &ins[i],
                                  GCC_VALUE_INPUT, nullptr, 0, &v, &d),
              GCC_OK)
        << d.msg;
    iv.push_back(v);
  }
  for (size_t i = 0; i < outs.size(); i++) {
    int v;
    EXPECT_EQ(gcc_graph_add_value(g, ("out" + std::to_string(i)).c_str(), GCC_DT_FLOAT32, &outs[i],
                                  GCC_VALUE_ACTIVATION, nullptr, 0, &v, &d),
              GCC_OK)
        << d.msg;
    ov.push_back(v);
  }
  int node = -1;
  EXPECT_EQ(gcc_graph_add_node(g, "n", op, iv.data(), (int)iv.size(), ov.data(), (int)ov.size(),
                               &node, &d),
            GCC_OK)
      << d.msg;
  attrs(g, node);
  EXPECT_EQ(gcc_graph_link(g, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_op_resolve_attrs(g, node, &d), GCC_OK) << d.msg;

  std::vector<std::vector<float>> in_data, want, got;
  std::vector<gcc_tensor> t(ins.size() + 2 * outs.size());
  std::vector<gcc_tensor *> pin, pout_ref, pout_dnnl;
  for (size_t i = 0; i < ins.size(); i++) {
    int64_t n = gcc_shape_numel(&ins[i], nullptr);
    in_data.push_back(Rand((size_t)n, 11 + (unsigned)i));
  }
  for (size_t i = 0; i < outs.size(); i++) {
    int64_t n = gcc_shape_numel(&outs[i], nullptr);
    want.emplace_back((size_t)n, NAN);
    got.emplace_back((size_t)n, NAN);
  }
  for (size_t i = 0; i < ins.size(); i++) {
    t[i] = gcc_tensor{GCC_DT_FLOAT32, ins[i], (int64_t)in_data[i].size(), in_data[i].data()};
    pin.push_back(&t[i]);
  }
  for (size_t i = 0; i < outs.size(); i++) {
    gcc_tensor *a = &t[ins.size() + 2 * i], *b = a + 1;
    *a = gcc_tensor{GCC_DT_FLOAT32, outs[i], (int64_t)want[i].size(), want[i].data()};
    *b = gcc_tensor{GCC_DT_FLOAT32, outs[i], (int64_t)got[i].size(), got[i].data()};
    pout_ref.push_back(a);
    pout_dnnl.push_back(b);
  }
  size_t ws = gcc_cpu_workspace(g, node);
  void *wsp = ws ? aligned_alloc(GCC_ARENA_ALIGN, (ws + 63) / 64 * 64) : nullptr;
  gcc_cpu_ctx ctx{};
  ctx.max_threads = 2;
  ctx.diag = &d;
  ctx.source = "<test>";
  gcc_kernel_args ref{&g->nodes[node],
                      pin.data(),
                      (int)pin.size(),
                      pout_ref.data(),
                      (int)pout_ref.size(),
                      &ctx,
                      wsp,
                      ws,
                      nullptr};
  gcc_kernel_args dn = ref;
  dn.out = pout_dnnl.data();
  const gcc_cpu_op *e = gcc_cpu_op_of(op);
  EXPECT_NE(e->prepare, nullptr) << gcc_op_name(op);
  EXPECT_EQ(e->kernel(&ref), GCC_OK) << d.msg;
  const gcc_device_backend *be = gcc_cpu_backend();
  EXPECT_EQ(be->prepare_node(be->self, &dn, &d), GCC_OK) << d.msg;
  r.prepared = dn.prepared != nullptr;
  if (r.prepared)
    r.impl = be->node_impl(be->self, &dn);
  EXPECT_EQ(be->run_node(be->self, &dn), GCC_OK) << d.msg;
  for (size_t i = 0; i < outs.size(); i++)
    r.err = std::max(r.err, RelErr(got[i], want[i]));
  r.in = in_data;
  r.got = got;
  if (dn.prepared)
    be->release_node(be->self, &dn);
  if (ctx.state)
    be->release_ctx(be->self, &ctx);
  EXPECT_EQ(ctx.state, nullptr);
  free(wsp);
  gcc_graph_free(g);
  return r;
}

// oneDNN and OpenBLAS sum in different orders: float rounding, relative to
// the output's magnitude.
constexpr double kTol = 1e-5;

TEST(CpuDnnl, GemmEveryTransposeAlphaBetaAndC) {
  struct Case {
    int64_t m, n, k;
    int ta, tb;
    float alpha, beta;
    int c; // 0 none, 1 bias row [n], 2 bias row [1, n], 3 full C [m, n], 4
           // column C [m, 1]
    bool prepared;
  };
  const Case cases[] = {
      {64, 512, 784, 0, 1, 1.0f, 1.0f, 1, true}, // nn.Linear
      {1, 512, 784, 0, 1, 1.0f, 1.0f, 1, true},  // batch 1: the GEMV
      {64, 10, 84, 0, 1, 1.0f, 1.0f, 2, true},
      {120, 256, 64, 1, 0, 1.0f, 0.0f, 0, true}, // dW = dY^T X
      {64, 256, 120, 0, 0, 1.0f, 0.0f, 0, true}, // dX = dY W
      {7, 5, 3, 1, 1, 0.5f, 1.0f, 1, true},      // alpha with a bias
      {9, 6, 4, 0, 0, 2.0f, 0.25f, 3, true},     // full C, beta as a sum post-op
      {9, 6, 4, 0, 1, 1.0f, 0.5f, 1, false},     // a bias row with beta != 1: the reference
      {9, 6, 4, 0, 0, 1.0f, 1.0f, 4, false},     // a column C: the reference kernel
  };
  for (const Case &c : cases) {
    std::vector<gcc_shape> ins = {c.ta ? Shape({c.k, c.m}) : Shape({c.m, c.k}),
                                  c.tb ? Shape({c.n, c.k}) : Shape({c.k, c.n})};
    if (c.c == 1)
      ins.push_back(Shape({c.n}));
    if (c.c == 2)
      ins.push_back(Shape({1, c.n}));
    if (c.c == 3)
      ins.push_back(Shape({c.m, c.n}));
    if (c.c == 4)
      ins.push_back(Shape({c.m, 1}));
    Result r = RunBoth(GCC_OP_GEMM, ins, {Shape({c.m, c.n})}, [&](gcc_graph *g, int node) {
      gcc_node_set_int(g, node, "transA", c.ta);
      gcc_node_set_int(g, node, "transB", c.tb);
      gcc_node_set_float(g, node, "alpha", c.alpha);
      gcc_node_set_float(g, node, "beta", c.beta);
    });
    std::string what = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
                       " C kind " + std::to_string(c.c) + " beta " + std::to_string(c.beta) + ": " +
                       r.impl;
    EXPECT_EQ(r.prepared, c.prepared) << what;
    EXPECT_LT(r.err, kTol) << what;
  }
}

// Sets an environment variable for a scope.
struct ScopedEnv {
  ScopedEnv(const char *name, const char *value) : name_(name) {
    const char *old = getenv(name);
    had_ = old != nullptr;
    if (had_)
      old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }
  const char *name_;
  bool had_;
  std::string old_;
};

// Every library a GEMM node can be given (runtime/cpu/cpu_choice.h: oneDNN's
// matmul, OpenBLAS, the batch-1 GEMV), forced with GCC_CPU_GEMM, against
// float64 on the same float inputs. Bound per element: a float sum of k
// products in any order or blocking, with or without FMA, is within
// gamma_k * sum |a_i b_i| of the exact one (Higham, Accuracy and Stability,
// 3.1), gamma_k ~ k u with u = 2^-24; alpha's product, the bias or beta*C
// add and its product add three more roundings: (k + 3) u (|alpha| sum|a b| +
// |bias| + |beta C|), doubled for the accumulation of those bounds'
// own rounding.
TEST(CpuDnnl, EveryGemmLibraryMatchesFloat64AndAForcedChoiceIsHonoured) {
  struct Case {
    int64_t m, n, k;
    int ta, tb;
    float alpha, beta;
    int c; // 0 none, 1 bias row [n], 3 full C [m, n]
  };
  const Case cases[] = {
      {64, 512, 784, 0, 1, 1.0f, 1.0f, 1}, // nn.Linear at batch 64
      {1, 512, 784, 0, 1, 1.0f, 1.0f, 1},  // batch 1: the GEMV's rows
      {1, 300, 70, 0, 0, 1.0f, 0.0f, 0},   // batch 1, B not transposed: the GEMV's columns
      {512, 784, 64, 1, 0, 1.0f, 0.0f, 0}, // dW = dY^T X
      {64, 512, 256, 0, 0, 1.0f, 0.0f, 0}, // dX = dY W
      {7, 5, 3, 1, 1, 0.5f, 1.0f, 1},      // alpha with a bias
      {9, 6, 4, 0, 0, 2.0f, 0.25f, 3},     // full C, beta
  };
  const double u = std::ldexp(1.0, -24);
  for (const char *lib : {"onednn", "openblas", "gemv"}) {
    ScopedEnv pin("GCC_CPU_GEMM", lib);
    for (const Case &c : cases) {
      std::vector<gcc_shape> ins = {c.ta ? Shape({c.k, c.m}) : Shape({c.m, c.k}),
                                    c.tb ? Shape({c.n, c.k}) : Shape({c.k, c.n})};
      if (c.c == 1)
        ins.push_back(Shape({c.n}));
      if (c.c == 3)
        ins.push_back(Shape({c.m, c.n}));
      Result r = RunBoth(GCC_OP_GEMM, ins, {Shape({c.m, c.n})}, [&](gcc_graph *g, int node) {
        gcc_node_set_int(g, node, "transA", c.ta);
        gcc_node_set_int(g, node, "transB", c.tb);
        gcc_node_set_float(g, node, "alpha", c.alpha);
        gcc_node_set_float(g, node, "beta", c.beta);
      });
      std::string what = std::string(lib) + " " + std::to_string(c.m) + "x" + std::to_string(c.n) +
                         "x" + std::to_string(c.k) + ": " + r.impl;
      ASSERT_TRUE(r.prepared) << what;
      // the forced library runs, and the profile's name says so
      bool gemv_fits = c.m == 1 && c.c != 3;
      std::string want = std::string(lib) == "gemv" && !gemv_fits ? "onednn" : lib;
      EXPECT_NE(r.impl.find("[" + want + ": GCC_CPU_GEMM=" + lib + "]"), std::string::npos) << what;
      if (want == "openblas")
        EXPECT_EQ(r.impl.rfind("sgemm (OpenBLAS)", 0), 0u) << what;
      else
        EXPECT_EQ(r.impl.find("gcc:gemv") != std::string::npos, want == "gemv") << what;
      const std::vector<float> &A = r.in[0], &B = r.in[1];
      double worst = 0;
      for (int64_t i = 0; i < c.m; i++)
        for (int64_t j = 0; j < c.n; j++) {
          double sum = 0, mag = 0;
          for (int64_t p = 0; p < c.k; p++) {
            double a = A[(size_t)(c.ta ? p * c.m + i : i * c.k + p)];
            double b = B[(size_t)(c.tb ? j * c.k + p : p * c.n + j)];
            sum += a * b;
            mag += std::fabs(a * b);
          }
          double want_v = (double)c.alpha * sum, bound_mag = std::fabs((double)c.alpha) * mag;
          if (c.c == 1) {
            want_v += r.in[2][(size_t)j];
            bound_mag += std::fabs((double)r.in[2][(size_t)j]);
          } else if (c.c == 3) {
            double cc = (double)c.beta * r.in[2][(size_t)(i * c.n + j)];
            want_v += cc;
            bound_mag += std::fabs(cc);
          }
          double err = std::fabs((double)r.got[0][(size_t)(i * c.n + j)] - want_v);
          double bound = 2.0 * (double)(c.k + 3) * u * bound_mag;
          worst = std::max(worst, err / bound);
        }
      EXPECT_LE(worst, 1.0) << what << ": the worst element's error over its bound";
    }
  }
}

// Without GCC_CPU_GEMM the library is measured (or read from the cache
// beside the kernel cache): the name says which and how.
TEST(CpuDnnl, AnUnforcedGemmIsChosenAndNamed) {
  ScopedEnv pin("GCC_CPU_GEMM", nullptr);
  std::string dir =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/cpu_dnnl_test_cache";
  ScopedEnv xdg("XDG_CACHE_HOME", dir.c_str());
  // 64x64x128: OpenBLAS runs it on one thread, so both are candidates
  Result r =
      RunBoth(GCC_OP_GEMM, {Shape({64, 128}), Shape({64, 128}), Shape({64})}, {Shape({64, 64})},
              [](gcc_graph *g, int node) { gcc_node_set_int(g, node, "transB", 1); });
  ASSERT_TRUE(r.prepared);
  EXPECT_LT(r.err, kTol) << r.impl;
  bool named = false;
  for (const char *how :
       {"[onednn: timed onednn ", "[openblas: timed onednn ", "[onednn: cached",
        "[openblas: cached", "[onednn: chosen before", "[openblas: chosen before"})
    named = named || r.impl.find(how) != std::string::npos;
  EXPECT_TRUE(named) << r.impl;
  // 64x512x784 on 2 threads: OpenBLAS would use both (its spinning workers
  // would slow the nodes around it), so oneDNN is the only candidate
  r = RunBoth(GCC_OP_GEMM, {Shape({64, 784}), Shape({512, 784}), Shape({512})}, {Shape({64, 512})},
              [](gcc_graph *g, int node) { gcc_node_set_int(g, node, "transB", 1); });
  ASSERT_TRUE(r.prepared);
  EXPECT_LT(r.err, kTol) << r.impl;
  EXPECT_NE(r.impl.find("[onednn: the only candidate; OpenBLAS would use 2 threads]"),
            std::string::npos)
      << r.impl;
}

TEST(CpuDnnl, MatMul) {
  Result r = RunBoth(GCC_OP_MATMUL, {Shape({33, 70}), Shape({70, 19})}, {Shape({33, 19})},
                     [](gcc_graph *, int) {});
  EXPECT_TRUE(r.prepared);
  EXPECT_LT(r.err, kTol) << r.impl;
}

struct ConvCase {
  int64_t n, c, h, w, m, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
  bool bias;
};

const ConvCase kConvs[] = {
    {64, 1, 28, 28, 6, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, true},  // MNIST CNN conv1
    {64, 6, 12, 12, 16, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, true}, // conv2
    {4, 3, 32, 32, 6, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, true},   // CIFAR tutorial conv1, batch 4
    {2, 5, 11, 9, 7, 3, 2, 2, 1, 1, 0, 2, 1, 1, 2, false},   // strides, uneven pads, dilation
    {3, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},   // "same" 3x3
};

void ConvAttrs(const ConvCase &c, gcc_graph *g, int node) {
  int64_t st[2] = {c.sh, c.sw}, pd[4] = {c.pt, c.pl, c.pb, c.pr}, dl[2] = {c.dh, c.dw};
  gcc_node_set_ints(g, node, "strides", st, 2);
  gcc_node_set_ints(g, node, "pads", pd, 4);
  gcc_node_set_ints(g, node, "dilations", dl, 2);
}

TEST(CpuDnnl, ConvolutionForwardBackwardDataAndFilter) {
  for (const ConvCase &c : kConvs) {
    int64_t oh = gcc_window_out_dim(c.h, c.kh, c.sh, c.pt, c.pb, c.dh);
    int64_t ow = gcc_window_out_dim(c.w, c.kw, c.sw, c.pl, c.pr, c.dw);
    gcc_shape xs = Shape({c.n, c.c, c.h, c.w}), ws = Shape({c.m, c.c, c.kh, c.kw}),
              ys = Shape({c.n, c.m, oh, ow});
    std::string what = std::to_string(c.n) + "x" + std::to_string(c.c) + "x" + std::to_string(c.h) +
                       "x" + std::to_string(c.w) + " * " + std::to_string(c.m) + "x" +
                       std::to_string(c.kh) + "x" + std::to_string(c.kw);
    std::vector<gcc_shape> fin = {xs, ws};
    if (c.bias)
      fin.push_back(Shape({c.m}));
    Result f = RunBoth(GCC_OP_CONV, fin, {ys}, [&](gcc_graph *g, int n) { ConvAttrs(c, g, n); });
    EXPECT_TRUE(f.prepared) << what;
    EXPECT_LT(f.err, kTol) << what << ": " << f.impl;
    Result bd = RunBoth(GCC_OP_CONV_GRAD_DATA, {ys, ws}, {xs}, [&](gcc_graph *g, int n) {
      ConvAttrs(c, g, n);
      int64_t is[4] = {c.n, c.c, c.h, c.w};
      gcc_node_set_ints(g, n, "input_shape", is, 4);
    });
    EXPECT_TRUE(bd.prepared) << what;
    EXPECT_LT(bd.err, kTol) << what << ": " << bd.impl;
    Result bw = RunBoth(GCC_OP_CONV_GRAD_FILTER, {ys, xs}, {ws}, [&](gcc_graph *g, int n) {
      ConvAttrs(c, g, n);
      int64_t fs[4] = {c.m, c.c, c.kh, c.kw};
      gcc_node_set_ints(g, n, "filter_shape", fs, 4);
    });
    EXPECT_TRUE(bw.prepared) << what;
    EXPECT_LT(bw.err, kTol) << what << ": " << bw.impl;
  }
}

TEST(CpuDnnl, PoolingForwardAndBackward) {
  struct Case {
    int64_t n, c, h, w, kh, kw, sh, sw, pt, pl, pb, pr;
  };
  const Case cases[] = {
      {64, 6, 24, 24, 2, 2, 2, 2, 0, 0, 0, 0}, // MaxPool2d(2, 2): the layer's own loops
      {4, 16, 10, 10, 2, 2, 2, 2, 0, 0, 0, 0},
      {2, 3, 9, 7, 3, 3, 2, 2, 1, 1, 1, 1}, // overlapping windows with pads
      {2, 3, 8, 8, 3, 2, 1, 2, 0, 1, 1, 0},
  };
  for (const Case &c : cases)
    for (int kind = 0; kind < 3; kind++) { // max, average excluding / including pads
      int64_t oh = gcc_window_out_dim(c.h, c.kh, c.sh, c.pt, c.pb, 1);
      int64_t ow = gcc_window_out_dim(c.w, c.kw, c.sw, c.pl, c.pr, 1);
      gcc_shape xs = Shape({c.n, c.c, c.h, c.w}), ys = Shape({c.n, c.c, oh, ow});
      auto attrs = [&](gcc_graph *g, int node) {
        int64_t k[2] = {c.kh, c.kw}, st[2] = {c.sh, c.sw}, pd[4] = {c.pt, c.pl, c.pb, c.pr};
        gcc_node_set_ints(g, node, "kernel_shape", k, 2);
        gcc_node_set_ints(g, node, "strides", st, 2);
        gcc_node_set_ints(g, node, "pads", pd, 4);
        if (kind > 0)
          gcc_node_set_int(g, node, "count_include_pad", kind == 2);
      };
      std::string what = std::to_string(c.h) + "x" + std::to_string(c.w) + " k" +
                         std::to_string(c.kh) + "x" + std::to_string(c.kw) + " kind " +
                         std::to_string(kind);
      Result f = RunBoth(kind == 0 ? GCC_OP_MAX_POOL : GCC_OP_AVERAGE_POOL, {xs}, {ys}, attrs);
      EXPECT_TRUE(f.prepared) << what;
      EXPECT_LT(f.err, 1e-6) << what << ": " << f.impl;
      Result b;
      if (kind == 0) {
        b = RunBoth(GCC_OP_MAX_POOL_GRAD, {ys, xs, ys}, {xs}, attrs);
      } else {
        b = RunBoth(GCC_OP_AVERAGE_POOL_GRAD, {ys}, {xs}, [&](gcc_graph *g, int node) {
          attrs(g, node);
          int64_t is[4] = {c.n, c.c, c.h, c.w};
          gcc_node_set_ints(g, node, "input_shape", is, 4);
        });
      }
      EXPECT_TRUE(b.prepared) << what;
      EXPECT_LT(b.err, 1e-6) << what << ": " << b.impl;
    }
}

// ---- whole training steps
// ------------------------------------------------------

// `steps` SGD steps of the MNIST CNN at batch 16 on random images and
// labels (seeded), 2 threads; returns every parameter, concatenated.
std::vector<float> TrainCnn(int steps) {
  gcc_diag d{};
  gcc_graph *g = nullptr;
  EXPECT_EQ(gcc_model_mnist_cnn(GCC_MNIST_CNN_SEED, &g, &d), GCC_OK) << d.msg;
  if (!g)
    return {};
  gcc_session_options so{};
  so.threads = 2;
  so.opt = g->training.opt;
  gcc_session *s = nullptr;
  EXPECT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
  std::vector<float> params;
  if (s) {
    const int64_t rows = 16;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 2.5f);
    std::vector<float> x((size_t)(rows * 28 * 28));
    std::vector<int64_t> y((size_t)rows);
    for (int k = 0; k < steps; k++) {
      for (float &v : x)
        v = u(rng);
      for (int64_t &v : y)
        v = (int64_t)(rng() % 10);
      float loss = NAN;
      EXPECT_EQ(gcc_session_train_step(s, x.data(), y.data(), rows, &loss, &d), GCC_OK) << d.msg;
      EXPECT_TRUE(std::isfinite(loss));
    }
    for (int v = 0; v < g->n_values; v++) {
      if (g->values[v].kind != GCC_VALUE_PARAM)
        continue;
      float *p = nullptr;
      int64_t n = 0;
      EXPECT_EQ(gcc_session_param(s, g->values[v].name, &p, &n, &d), GCC_OK) << d.msg;
      if (p)
        params.insert(params.end(), p, p + n);
    }
    gcc_session_destroy(s);
  }
  gcc_graph_free(g);
  return params;
}

TEST(CpuDnnl, TrainingIsBitwiseRepeatableAndMatchesTheReferenceKernels) {
  unsetenv("GCC_CPU_ONEDNN");
  std::vector<float> a = TrainCnn(8), b = TrainCnn(8);
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, memcmp(a.data(), b.data(), a.size() * sizeof(float)))
      << "same seed, same thread count: the weights must be the same bits";
  setenv("GCC_CPU_ONEDNN", "0", 1);
  std::vector<float> ref = TrainCnn(8);
  unsetenv("GCC_CPU_ONEDNN");
  ASSERT_EQ(ref.size(), a.size());
  EXPECT_NE(0, memcmp(a.data(), ref.data(), a.size() * sizeof(float)))
      << "GCC_CPU_ONEDNN=0 must run the reference kernels (else this test "
         "compares nothing)";
  EXPECT_LT(RelErr(a, ref), 1e-4) << "8 SGD steps on oneDNN against the reference kernels";
}

// ---- the whole plan's GEMM library (gcc_cpu_dnnl_prepare_done)
// ---------------------------------------

// The CPU library lines of the MNIST MLP's training plan at batch 64, 2
// threads, and whether one training step gives a finite loss.
std::string MlpTrainPlanLibraries(bool *finite) {
  gcc_diag d{};
  gcc_graph *g = nullptr;
  EXPECT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  if (!g)
    return "";
  gcc_session_options so{};
  so.threads = 2;
  so.opt = g->training.opt;
  gcc_session *s = nullptr;
  EXPECT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
  std::string text;
  if (s) {
    gcc_plan *p = nullptr;
    EXPECT_EQ(gcc_session_plan(s, GCC_MODE_TRAIN, 64, &p, &d), GCC_OK) << d.msg;
    std::vector<char> buf(1 << 16);
    if (p)
      gcc_plan_cpu_library_text(p, buf.data(), buf.size());
    text = buf.data();
    std::vector<float> x(64 * 784, 0.25f);
    std::vector<int64_t> y(64, 3);
    float loss = NAN;
    EXPECT_EQ(gcc_session_train_step(s, x.data(), y.data(), 64, &loss, &d), GCC_OK) << d.msg;
    *finite = std::isfinite(loss);
    gcc_session_destroy(s);
  }
  gcc_graph_free(g);
  return text;
}

// The cache entry of the whole plan's choice in `dir`/gcc-train, or "".
std::string PlanEntry(const std::string &dir) {
  std::string base = dir + "/gcc-train";
  DIR *dp = opendir(base.c_str());
  std::string found;
  while (dp) {
    struct dirent *e = readdir(dp);
    if (!e)
      break;
    if (strncmp(e->d_name, "cpu-choice-", 11) != 0)
      continue;
    std::ifstream f(base + "/" + e->d_name);
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (all.find(" plan gemms=") != std::string::npos)
      found = base + "/" + e->d_name;
  }
  if (dp)
    closedir(dp);
  return found;
}

// Rewrites the choice line of cache entry `path` to `lib`.
void SetChoice(const std::string &path, const std::string &lib) {
  std::ifstream f(path);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), out;
  f.close();
  size_t at = all.find("\nchoice ");
  ASSERT_NE(at, std::string::npos) << all;
  size_t end = all.find('\n', at + 1);
  out = all.substr(0, at) + "\nchoice " + lib + all.substr(end);
  std::ofstream(path, std::ios::trunc) << out;
}

size_t Count(const std::string &s, const std::string &what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
    n++;
  return n;
}

// The MLP's fc1 (64x512x784) would run on both OpenBLAS threads, so the
// plan's GEMMs are also timed as a whole (each node's choice against all on
// OpenBLAS); the choice is named on every GEMM, cached on disk, and a
// cached choice is what the next plan runs, either way. Forcing a library
// leaves the whole plan alone.
TEST(CpuDnnl, TheWholePlansGemmLibraryIsChosenCachedAndRespected) {
  ScopedEnv pin("GCC_CPU_GEMM", nullptr);
  ScopedEnv cache("GCC_CPU_CHOICE_CACHE", nullptr);
  std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                    "/cpu_dnnl_test_whole_plan";
  ScopedEnv xdg("XDG_CACHE_HOME", dir.c_str());
  const size_t gemms = 14; // 5 forward, 9 backward (fc1 has no dA)
  gcc_cpu_choice_forget();
  bool finite = false;
  std::string text = MlpTrainPlanLibraries(&finite);
  EXPECT_TRUE(finite);
  EXPECT_EQ(Count(text, "(Gemm): "), gemms) << text;
  EXPECT_EQ(Count(text, "whole plan timed: "), gemms) << text;
  std::string entry = PlanEntry(dir);
  ASSERT_NE(entry, "") << "no whole-plan entry in " << dir;

  for (const char *lib : {"openblas", "onednn"}) {
    SetChoice(entry, lib);
    gcc_cpu_choice_forget();
    text = MlpTrainPlanLibraries(&finite);
    EXPECT_TRUE(finite) << lib;
    if (std::string(lib) == "openblas") {
      EXPECT_EQ(Count(text, "(Gemm): sgemm (OpenBLAS) "), gemms) << text;
      EXPECT_EQ(Count(text, "[openblas: whole plan cached: all OpenBLAS; the node alone: "), gemms)
          << text;
    } else {
      EXPECT_EQ(Count(text, "whole plan cached: each node's choice]"), gemms) << text;
      EXPECT_NE(text.find("fc1 (Gemm): matmul "), std::string::npos) << text;
    }
  }
  ScopedEnv force("GCC_CPU_GEMM", "onednn");
  gcc_cpu_choice_forget();
  text = MlpTrainPlanLibraries(&finite);
  EXPECT_TRUE(finite);
  EXPECT_EQ(Count(text, "whole plan"), 0u) << text;
}

} // namespace
