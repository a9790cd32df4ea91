// runtime/cpu/dnnl_ops: the oneDNN primitive layer against float64
// references written here (direct loops, PyTorch's semantics) and against
// the CPU backend's own kernels (runtime/cpu_kernels: OpenBLAS GEMM, im2col
// convolution, loop pooling) where those cover the case. Errors are relative
// to the magnitude of the reference tensor (max |ref|): oneDNN sums in
// another order than OpenBLAS and the references.
//
// Covered: every transpose combination, leading dimensions (strided
// sub-matrices), alpha / beta / bias / ReLU epilogues, ragged sizes;
// convolutions with strides, asymmetric pads, dilations, groups (depthwise
// too), bias, ReLU, forward / backward data / backward weights; max and
// average pooling with pads, strides, dilations, ceil_mode,
// count_include_pad, forward and backward, ties; ReLU and batch norm; the
// primitive cache, scratch sizes, determinism, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/ops.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/cpu/cpu_kernels.h"

namespace {

std::vector<float> Rand(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = u(rng);
  return v;
}

// max |got - want| / max |want| (or the absolute error when want is all 0)
double RelErr(const float *got, const double *want, size_t n) {
  double mag = 0, err = 0;
  for (size_t i = 0; i < n; i++) {
    mag = std::max(mag, std::fabs(want[i]));
    err = std::max(err, std::fabs((double)got[i] - want[i]));
  }
  return mag > 0 ? err / mag : err;
}

double RelErr(const std::vector<float> &got, const std::vector<double> &want) {
  EXPECT_EQ(got.size(), want.size());
  return RelErr(got.data(), want.data(), std::min(got.size(), want.size()));
}

double RelErrF(const std::vector<float> &got, const std::vector<float> &want) {
  std::vector<double> w(want.begin(), want.end());
  return RelErr(got, w);
}

// Aligned scratch of exactly the size an op asks for (ASan sees overruns).
struct Scratch {
  void *p = nullptr;
  explicit Scratch(size_t n) {
    if (n)
      p = aligned_alloc(64, n);
  }
  ~Scratch() { free(p); }
};

gcc_status RunOp(gcc_dnnl_op *op, std::vector<void *> ptrs, gcc_diag *d) {
  Scratch s(gcc_dnnl_op_scratch_bytes(op));
  return gcc_dnnl_op_run(op, ptrs.data(), s.p, d);
}

class DnnlTest : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_EQ(gcc_dnnl_create(2, &dn_, &d_), GCC_OK) << d_.msg; }
  void TearDown() override { gcc_dnnl_free(dn_); }
  gcc_dnnl *dn_ = nullptr;
  gcc_diag d_{};
};

// ---- the CPU backend's kernels, on a one-node graph --------------------------

struct OneNode {
  gcc_graph *g = nullptr;
  int node = -1;
  std::vector<gcc_tensor> ts;
  std::vector<int> in_vals, out_vals;
};

// Builds node `op` with inputs of `in_shapes` and outputs of `out_shapes`
// (all float32), attributes set by `attrs`, resolved against the op's schema.
template <class F>
void MakeNode(OneNode *n, int op, const std::vector<gcc_shape> &in_shapes,
              const std::vector<gcc_shape> &out_shapes, F attrs) {
  gcc_diag d{};
  n->g = gcc_graph_new("one", "<test>");
  for (size_t i = 0; i < in_shapes.size(); i++) {
    int v;
    std::string name = "in" + std::to_string(i);
    ASSERT_EQ(gcc_graph_add_value(n->g, name.c_str(), GCC_DT_FLOAT32, &in_shapes[i],
                                  GCC_VALUE_INPUT, nullptr, 0, &v, &d),
              GCC_OK)
        << d.msg;
    n->in_vals.push_back(v);
  }
  for (size_t i = 0; i < out_shapes.size(); i++) {
    int v;
    std::string name = "out" + std::to_string(i);
    ASSERT_EQ(gcc_graph_add_value(n->g, name.c_str(), GCC_DT_FLOAT32, &out_shapes[i],
                                  GCC_VALUE_ACTIVATION, nullptr, 0, &v, &d),
              GCC_OK)
        << d.msg;
    n->out_vals.push_back(v);
  }
  ASSERT_EQ(gcc_graph_add_node(n->g, "n", op, n->in_vals.data(), (int)n->in_vals.size(),
                               n->out_vals.data(), (int)n->out_vals.size(), &n->node, &d),
            GCC_OK)
      << d.msg;
  attrs(n->g, n->node);
  ASSERT_EQ(gcc_graph_link(n->g, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_op_resolve_attrs(n->g, n->node, &d), GCC_OK) << d.msg;
}

// Runs the CPU backend's kernel of the node on `ins` into `outs`.
void RunCpuKernel(OneNode *n, const std::vector<float *> &ins, const std::vector<float *> &outs) {
  gcc_diag d{};
  std::vector<gcc_tensor> t(ins.size() + outs.size());
  std::vector<gcc_tensor *> pin, pout;
  for (size_t i = 0; i < ins.size(); i++) {
    const gcc_value *v = &n->g->values[n->in_vals[i]];
    t[i] = gcc_tensor{GCC_DT_FLOAT32, v->shape, gcc_shape_numel(&v->shape, nullptr), ins[i]};
    pin.push_back(&t[i]);
  }
  for (size_t i = 0; i < outs.size(); i++) {
    const gcc_value *v = &n->g->values[n->out_vals[i]];
    gcc_tensor *o = &t[ins.size() + i];
    *o = gcc_tensor{GCC_DT_FLOAT32, v->shape, gcc_shape_numel(&v->shape, nullptr), outs[i]};
    pout.push_back(o);
  }
  const gcc_cpu_op *op = gcc_cpu_op_of(n->g->nodes[n->node].op);
  ASSERT_NE(op, nullptr);
  size_t ws = gcc_cpu_workspace(n->g, n->node);
  Scratch w(ws ? (ws + 63) / 64 * 64 : 0);
  gcc_cpu_ctx ctx{};
  ctx.max_threads = 2;
  ctx.diag = &d;
  ctx.source = "<test>";
  gcc_kernel_args a{&n->g->nodes[n->node],
                    pin.data(),
                    (int)pin.size(),
                    pout.data(),
                    (int)pout.size(),
                    &ctx,
                    w.p,
                    ws,
                    nullptr};
  ASSERT_EQ(op->kernel(&a), GCC_OK) << d.msg;
  gcc_graph_free(n->g);
  n->g = nullptr;
}

gcc_shape Shape(std::initializer_list<int64_t> dims) {
  gcc_shape s{};
  s.ndim = (int)dims.size();
  int i = 0;
  for (int64_t v : dims)
    s.dims[i++] = v;
  return s;
}

// ---- matmul -------------------------------------------------------------------

struct MM {
  int64_t m, n, k;
};

// Y = alpha op(A) op(B) + bias + beta Y0, then relu, in float64
std::vector<double> RefMatmul(const gcc_dnnl_matmul_desc &md, const std::vector<float> &A,
                              const std::vector<float> &B, const std::vector<float> &bias,
                              const std::vector<float> &Y0, int64_t lda, int64_t ldb, int64_t ldy) {
  std::vector<double> y((size_t)(md.m * ldy), 0.0);
  for (int64_t i = 0; i < md.m; i++)
    for (int64_t j = 0; j < md.n; j++) {
      double acc = 0;
      for (int64_t p = 0; p < md.k; p++) {
        double a = md.trans_a ? A[p * lda + i] : A[i * lda + p];
        double b = md.trans_b ? B[j * ldb + p] : B[p * ldb + j];
        acc += a * b;
      }
      double v = md.alpha * acc;
      if (md.bias)
        v += bias[j];
      if (md.beta != 0.0f)
        v += (double)md.beta * Y0[i * ldy + j];
      if (md.relu)
        v = v < 0 ? 0 : v;
      y[i * ldy + j] = v;
    }
  return y;
}

void CheckMatmul(gcc_dnnl *dn, gcc_dnnl_matmul_desc md, int64_t pad, unsigned seed) {
  gcc_diag d{};
  int64_t arows = md.trans_a ? md.k : md.m, acols = md.trans_a ? md.m : md.k;
  int64_t brows = md.trans_b ? md.n : md.k, bcols = md.trans_b ? md.k : md.n;
  int64_t lda = acols + pad, ldb = bcols + pad, ldy = md.n + pad;
  if (pad)
    md.lda = lda, md.ldb = ldb, md.ldy = ldy;
  auto A = Rand((size_t)(arows * lda), seed);
  auto B = Rand((size_t)(brows * ldb), seed + 1);
  auto bias = Rand((size_t)md.n, seed + 2);
  auto Y = Rand((size_t)(md.m * ldy), seed + 3);
  auto want = RefMatmul(md, A, B, bias, Y, lda, ldb, ldy);
  gcc_dnnl_op *op = nullptr;
  ASSERT_EQ(gcc_dnnl_matmul_create(dn, &md, &op, &d), GCC_OK) << d.msg;
  std::vector<float> Y0 = Y;
  ASSERT_EQ(RunOp(op, {A.data(), B.data(), md.bias ? bias.data() : nullptr, Y.data()}, &d), GCC_OK)
      << d.msg;
  std::string what = gcc_dnnl_op_name(op);
  // only the [m, n] window of Y is written: the padding columns keep their bytes
  for (int64_t i = 0; i < md.m; i++)
    for (int64_t j = md.n; j < ldy; j++)
      want[i * ldy + j] = Y0[i * ldy + j];
  EXPECT_LT(RelErr(Y, want), 2e-6) << what << " pad " << pad;
  gcc_dnnl_op_free(op);
}

TEST_F(DnnlTest, MatmulEveryTransposeEpilogueAndRaggedShape) {
  // m = 1: the matrix-vector loops (AVX-512 or AVX2), with ragged tails of
  // rows, columns and the reduction
  const MM shapes[] = {{1, 1, 1},     {1, 512, 784}, {64, 512, 784}, {7, 13, 5},
                       {33, 65, 129}, {64, 10, 64},  {3, 1, 17},     {1000, 10, 64},
                       {1, 37, 13},   {1, 70, 100},  {1, 9, 7}};
  unsigned seed = 1;
  for (const MM &s : shapes)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int epi = 0; epi < 4; epi++) {
          gcc_dnnl_matmul_desc md{};
          md.m = s.m, md.n = s.n, md.k = s.k;
          md.trans_a = ta, md.trans_b = tb;
          md.alpha = 1.0f;
          md.bias = epi == 1 || epi == 2;
          md.relu = epi == 2;
          if (epi == 3)
            md.alpha = 0.75f, md.beta = 0.5f; // ONNX Gemm with a full C
          CheckMatmul(dn_, md, 0, seed++);
          if (s.m * s.n * s.k < 100000)
            CheckMatmul(dn_, md, 3, seed++); // leading dims
        }
}

TEST_F(DnnlTest, MatmulAlphaScalesTheProductNotTheBias) {
  gcc_dnnl_matmul_desc md{};
  md.m = 9, md.n = 17, md.k = 33;
  md.trans_b = 1;
  md.alpha = 2.5f;
  md.bias = 1;
  md.relu = 1;
  CheckMatmul(dn_, md, 0, 77);
  md.beta = -1.5f;
  CheckMatmul(dn_, md, 0, 78);
}

// The CPU backend's Gemm (OpenBLAS) on the nn.Linear form and the full-C form.
TEST_F(DnnlTest, MatmulMatchesTheCpuBackendsGemm) {
  const MM shapes[] = {{64, 512, 784}, {1, 10, 64}, {5, 7, 3}, {1024, 256, 512}};
  for (const MM &s : shapes)
    for (int full_c = 0; full_c < 2; full_c++) {
      auto X = Rand((size_t)(s.m * s.k), 5), W = Rand((size_t)(s.n * s.k), 6);
      auto C = Rand(full_c ? (size_t)(s.m * s.n) : (size_t)s.n, 7);
      std::vector<float> want((size_t)(s.m * s.n)), got((size_t)(s.m * s.n));
      OneNode n;
      gcc_shape cs = full_c ? Shape({s.m, s.n}) : Shape({s.n});
      MakeNode(&n, GCC_OP_GEMM, {Shape({s.m, s.k}), Shape({s.n, s.k}), cs}, {Shape({s.m, s.n})},
               [&](gcc_graph *g, int node) {
                 gcc_node_set_int(g, node, "transB", 1);
                 if (full_c)
                   gcc_node_set_float(g, node, "beta", 0.5f);
               });
      RunCpuKernel(&n, {X.data(), W.data(), C.data()}, {want.data()});
      gcc_dnnl_matmul_desc md{};
      md.m = s.m, md.n = s.n, md.k = s.k;
      md.trans_b = 1;
      md.alpha = 1.0f;
      gcc_dnnl_op *op = nullptr;
      if (full_c) {
        md.beta = 0.5f;
        got = C; // the caller copies C into Y, the sum post-op adds beta * Y
      } else {
        md.bias = 1;
      }
      ASSERT_EQ(gcc_dnnl_matmul_create(dn_, &md, &op, &d_), GCC_OK) << d_.msg;
      ASSERT_EQ(RunOp(op, {X.data(), W.data(), full_c ? nullptr : C.data(), got.data()}, &d_),
                GCC_OK)
          << d_.msg;
      EXPECT_LT(RelErrF(got, want), 2e-6) << gcc_dnnl_op_name(op);
      gcc_dnnl_op_free(op);
    }
}

// ---- the backward epilogue loops ----------------------------------------------

TEST_F(DnnlTest, ReluMaskAndBiasGradientAreTheCpuKernelsBitForBit) {
  const int64_t shapes[][2] = {{64, 512}, {1, 10}, {1024, 256}, {7, 65}, {3, 129}};
  for (auto &s : shapes)
    for (int threads = 1; threads <= 2; threads++) {
      int64_t r = s[0], c = s[1];
      auto dh = Rand((size_t)(r * c), 11), y = Rand((size_t)(r * c), 12);
      for (size_t i = 0; i < y.size(); i += 3)
        y[i] = 0.0f; // ReLU outputs have zeros
      for (float &v : y)
        v = v < 0 ? 0 : v;
      std::vector<float> want_dx(dh.size()), want_db((size_t)c), dx(dh.size()), db((size_t)c);
      OneNode n1, n2;
      MakeNode(&n1, GCC_OP_RELU_GRAD, {Shape({r, c}), Shape({r, c})}, {Shape({r, c})},
               [](gcc_graph *, int) {});
      RunCpuKernel(&n1, {dh.data(), y.data()}, {want_dx.data()});
      MakeNode(&n2, GCC_OP_REDUCE_SUM_TO, {Shape({r, c})}, {Shape({c})},
               [&](gcc_graph *g, int node) {
                 int64_t shp[1] = {c};
                 gcc_node_set_ints(g, node, "shape", shp, 1);
               });
      RunCpuKernel(&n2, {want_dx.data()}, {want_db.data()});
      gcc_dnnl_relu_mask_bgrad(dh.data(), y.data(), dx.data(), db.data(), r, c, threads);
      EXPECT_EQ(0, memcmp(dx.data(), want_dx.data(), dx.size() * 4)) << r << "x" << c;
      EXPECT_EQ(0, memcmp(db.data(), want_db.data(), db.size() * 4)) << r << "x" << c;
      // in place, without the bias gradient
      std::vector<float> inplace = dh;
      gcc_dnnl_relu_mask_bgrad(inplace.data(), y.data(), inplace.data(), nullptr, r, c, threads);
      EXPECT_EQ(0, memcmp(inplace.data(), want_dx.data(), dx.size() * 4));
      // column sums of dY (BGRADB)
      std::vector<float> cs((size_t)c), want_cs((size_t)c);
      OneNode n3;
      MakeNode(&n3, GCC_OP_REDUCE_SUM_TO, {Shape({r, c})}, {Shape({1, c})},
               [&](gcc_graph *g, int node) {
                 int64_t shp[2] = {1, c};
                 gcc_node_set_ints(g, node, "shape", shp, 2);
               });
      RunCpuKernel(&n3, {dh.data()}, {want_cs.data()});
      gcc_dnnl_col_sums(dh.data(), cs.data(), r, c, threads);
      EXPECT_EQ(0, memcmp(cs.data(), want_cs.data(), cs.size() * 4)) << r << "x" << c;
    }
}

// ---- convolution ---------------------------------------------------------------

struct ConvRef {
  gcc_dnnl_conv_desc c;
  int64_t oh, ow;
  int64_t cg() const { return c.c / c.group; }
  int64_t mg() const { return c.m / c.group; }
  // visits every (n, out channel, oy, ox, in channel, i, j) with the input
  // coordinate inside the image
  template <class F> void Each(F f) const {
    for (int64_t n = 0; n < c.n; n++)
      for (int64_t o = 0; o < c.m; o++) {
        int64_t g = o / mg();
        for (int64_t oy = 0; oy < oh; oy++)
          for (int64_t ox = 0; ox < ow; ox++)
            for (int64_t ci = 0; ci < cg(); ci++)
              for (int64_t i = 0; i < c.kh; i++)
                for (int64_t j = 0; j < c.kw; j++) {
                  int64_t iy = oy * c.sh - c.pt + i * c.dh, ix = ox * c.sw - c.pl + j * c.dw;
                  if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w)
                    continue;
                  int64_t xi = ((n * c.c + g * cg() + ci) * c.h + iy) * c.w + ix;
                  int64_t wi = ((o * cg() + ci) * c.kh + i) * c.kw + j;
                  int64_t yi = ((n * c.m + o) * oh + oy) * ow + ox;
                  f(xi, wi, yi);
                }
      }
  }
};

void CheckConv(gcc_dnnl *dn, const gcc_dnnl_conv_desc &cd, unsigned seed, bool vs_cpu) {
  gcc_diag d{};
  ConvRef r{cd, 0, 0};
  gcc_dnnl_conv_out_dims(&cd, &r.oh, &r.ow);
  ASSERT_GE(r.oh, 1);
  ASSERT_GE(r.ow, 1);
  size_t nx = (size_t)(cd.n * cd.c * cd.h * cd.w), nw = (size_t)(cd.m * r.cg() * cd.kh * cd.kw);
  size_t ny = (size_t)(cd.n * cd.m * r.oh * r.ow);
  auto X = Rand(nx, seed), W = Rand(nw, seed + 1), B = Rand((size_t)cd.m, seed + 2);
  auto dY = Rand(ny, seed + 3);
  // float64 references
  std::vector<double> y(ny, 0.0), dx(nx, 0.0), dw(nw, 0.0), db((size_t)cd.m, 0.0);
  r.Each([&](int64_t xi, int64_t wi, int64_t yi) {
    y[yi] += (double)X[xi] * W[wi];
    dx[xi] += (double)dY[yi] * W[wi];
    dw[wi] += (double)dY[yi] * X[xi];
  });
  int64_t plane = r.oh * r.ow;
  for (size_t i = 0; i < ny; i++) {
    int64_t o = (int64_t)i / plane % cd.m;
    if (cd.bias)
      y[i] += B[o];
    if (cd.relu)
      y[i] = y[i] < 0 ? 0 : y[i];
    db[o] += dY[i];
  }
  std::string what;
  { // forward
    gcc_dnnl_op *op = nullptr;
    ASSERT_EQ(gcc_dnnl_conv_fwd_create(dn, &cd, &op, &d), GCC_OK) << d.msg;
    what = gcc_dnnl_op_name(op);
    std::vector<float> got(ny, NAN);
    ASSERT_EQ(RunOp(op, {X.data(), W.data(), cd.bias ? B.data() : nullptr, got.data()}, &d), GCC_OK)
        << d.msg;
    EXPECT_LT(RelErr(got, y), 2e-6) << what;
    if (vs_cpu && !cd.relu) {
      std::vector<float> want(ny);
      OneNode n;
      std::vector<gcc_shape> ins = {Shape({cd.n, cd.c, cd.h, cd.w}),
                                    Shape({cd.m, cd.c, cd.kh, cd.kw})};
      if (cd.bias)
        ins.push_back(Shape({cd.m}));
      MakeNode(&n, GCC_OP_CONV, ins, {Shape({cd.n, cd.m, r.oh, r.ow})},
               [&](gcc_graph *g, int node) {
                 int64_t st[2] = {cd.sh, cd.sw}, pd[4] = {cd.pt, cd.pl, cd.pb, cd.pr},
                         dl[2] = {cd.dh, cd.dw};
                 gcc_node_set_ints(g, node, "strides", st, 2);
                 gcc_node_set_ints(g, node, "pads", pd, 4);
                 gcc_node_set_ints(g, node, "dilations", dl, 2);
               });
      std::vector<float *> in = {X.data(), W.data()};
      if (cd.bias)
        in.push_back(B.data());
      RunCpuKernel(&n, in, {want.data()});
      EXPECT_LT(RelErrF(got, want), 2e-6) << what << " vs the im2col kernel";
    }
    gcc_dnnl_op_free(op);
  }
  { // backward data
    gcc_dnnl_op *op = nullptr;
    ASSERT_EQ(gcc_dnnl_conv_bwd_data_create(dn, &cd, &op, &d), GCC_OK) << d.msg;
    std::vector<float> got(nx, NAN);
    ASSERT_EQ(RunOp(op, {dY.data(), W.data(), got.data()}, &d), GCC_OK) << d.msg;
    EXPECT_LT(RelErr(got, dx), 2e-6) << gcc_dnnl_op_name(op);
    gcc_dnnl_op_free(op);
  }
  { // backward weights (+ bias)
    gcc_dnnl_op *op = nullptr;
    ASSERT_EQ(gcc_dnnl_conv_bwd_weights_create(dn, &cd, &op, &d), GCC_OK) << d.msg;
    std::vector<float> got(nw, NAN), gotb((size_t)cd.m, NAN);
    ASSERT_EQ(RunOp(op, {dY.data(), X.data(), got.data(), cd.bias ? gotb.data() : nullptr}, &d),
              GCC_OK)
        << d.msg;
    EXPECT_LT(RelErr(got, dw), 4e-6) << gcc_dnnl_op_name(op);
    if (cd.bias) {
      EXPECT_LT(RelErr(gotb, db), 4e-6) << gcc_dnnl_op_name(op);
    }
    gcc_dnnl_op_free(op);
  }
}

gcc_dnnl_conv_desc Conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t m, int64_t kh,
                        int64_t kw) {
  gcc_dnnl_conv_desc cd{};
  cd.n = n, cd.c = c, cd.h = h, cd.w = w, cd.m = m, cd.kh = kh, cd.kw = kw;
  cd.sh = cd.sw = cd.dh = cd.dw = cd.group = 1;
  return cd;
}

TEST_F(DnnlTest, ConvolutionForwardAndBackwardMatchFloat64AndTheIm2colKernel) {
  struct Case {
    gcc_dnnl_conv_desc cd;
    bool vs_cpu; // the im2col kernel covers group 1
  };
  std::vector<Case> cases;
  cases.push_back({Conv(2, 3, 8, 8, 4, 3, 3), true});
  cases.push_back({Conv(64, 1, 28, 28, 6, 5, 5), true});  // MNIST CNN conv1
  cases.push_back({Conv(64, 6, 12, 12, 16, 5, 5), true}); // conv2
  cases.push_back({Conv(4, 3, 32, 32, 6, 5, 5), true});   // CIFAR tutorial conv1
  {
    auto c = Conv(3, 5, 7, 11, 6, 2, 3); // ragged
    c.sh = 2, c.sw = 3;
    cases.push_back({c, true});
  }
  {
    auto c = Conv(2, 4, 9, 10, 8, 3, 3); // asymmetric pads
    c.pt = 1, c.pl = 0, c.pb = 2, c.pr = 1;
    cases.push_back({c, true});
  }
  {
    auto c = Conv(2, 3, 13, 12, 5, 3, 2); // dilation and stride and pads
    c.dh = 2, c.dw = 3, c.sh = 2, c.pt = c.pb = 2, c.pl = 1;
    cases.push_back({c, true});
  }
  {
    auto c = Conv(2, 6, 9, 9, 4, 3, 3); // groups
    c.group = 2, c.pt = c.pl = c.pb = c.pr = 1;
    cases.push_back({c, false});
  }
  {
    auto c = Conv(3, 8, 10, 10, 8, 3, 3); // depthwise
    c.group = 8, c.sh = c.sw = 2, c.pt = c.pl = c.pb = c.pr = 1;
    cases.push_back({c, false});
  }
  {
    auto c = Conv(1, 1, 1, 1, 1, 1, 1); // the smallest
    cases.push_back({c, true});
  }
  unsigned seed = 100;
  for (const Case &k : cases)
    for (int layout = 0; layout < 3; layout++)
      for (int bias = 0; bias < 2; bias++)
        for (int relu = 0; relu < 2; relu++) {
          gcc_dnnl_conv_desc cd = k.cd;
          cd.bias = bias;
          cd.relu = relu;
          cd.layout = (gcc_dnnl_layout)layout;
          CheckConv(dn_, cd, seed += 10, k.vs_cpu);
        }
}

// The blocked form names its layouts and reorders; the plain one has none,
// and its scratch is only oneDNN's scratchpad.
TEST_F(DnnlTest, BlockedConvolutionsReorderThroughTheScratch) {
  auto cd = Conv(64, 6, 12, 12, 16, 5, 5);
  cd.bias = 1;
  gcc_dnnl_op *blocked = nullptr, *plain = nullptr;
  cd.layout = GCC_DNNL_LAYOUT_BLOCKED;
  ASSERT_EQ(gcc_dnnl_conv_fwd_create(dn_, &cd, &blocked, &d_), GCC_OK) << d_.msg;
  cd.layout = GCC_DNNL_LAYOUT_PLAIN;
  ASSERT_EQ(gcc_dnnl_conv_fwd_create(dn_, &cd, &plain, &d_), GCC_OK) << d_.msg;
  std::string bn = gcc_dnnl_op_name(blocked), pn = gcc_dnnl_op_name(plain);
  EXPECT_NE(bn.find("via reorders"), std::string::npos) << bn;
  // oneDNN picks the channel block for the ISA it JITs for: nChw16c
  // (aBcd16b) on AVX-512 cores, nChw8c (aBcd8b) on AVX2-only ones
  EXPECT_TRUE(bn.find("aBcd16b") != std::string::npos || bn.find("aBcd8b") != std::string::npos)
      << bn;
  EXPECT_EQ(pn.find("reorder"), std::string::npos) << pn;
  // the blocked copy of y (64 x 16 x 8 x 8) is in its scratch
  EXPECT_GE(gcc_dnnl_op_scratch_bytes(blocked), (size_t)(64 * 16 * 64) * 4) << bn;
  std::printf("%s\n%s\n", bn.c_str(), pn.c_str());
  gcc_dnnl_op_free(blocked);
  gcc_dnnl_op_free(plain);
}

// ---- pooling --------------------------------------------------------------------

// PyTorch's pooling (aten/src/ATen/native/cpu/{Max,Avg}PoolKernel.cpp and
// Pool.h) in float64: Y and dX for dY. Max: the first maximum of the window
// in row-major order takes the gradient.
struct PoolRef {
  gcc_dnnl_pool_desc p;
  int64_t oh, ow;
  std::vector<double> y, dx;
  void Run(const std::vector<float> &X, const std::vector<float> &dY) {
    gcc_dnnl_pool_out_dims(&p, &oh, &ow);
    y.assign((size_t)(p.n * p.c * oh * ow), 0.0);
    dx.assign(X.size(), 0.0);
    for (int64_t pc = 0; pc < p.n * p.c; pc++)
      for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
          int64_t yi = (pc * oh + oy) * ow + ox;
          double best = -INFINITY, sum = 0;
          int64_t arg = -1, inside = 0, padded = 0;
          for (int64_t i = 0; i < p.kh; i++)
            for (int64_t j = 0; j < p.kw; j++) {
              int64_t iy = oy * p.sh - p.pt + i * p.dh, ix = ox * p.sw - p.pl + j * p.dw;
              bool in_pad = iy >= -p.pt && iy < p.h + p.pb && ix >= -p.pl && ix < p.w + p.pr;
              padded += in_pad;
              if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
                continue;
              inside++;
              int64_t xi = (pc * p.h + iy) * p.w + ix;
              if (arg < 0 || X[xi] > best)
                best = X[xi], arg = xi;
              sum += X[xi];
            }
          if (p.kind == GCC_DNNL_POOL_MAX) {
            y[yi] = best;
            dx[arg] += dY[yi];
          } else {
            double div = p.kind == GCC_DNNL_POOL_AVG_INCLUDE ? (double)padded : (double)inside;
            y[yi] = sum / div;
            for (int64_t i = 0; i < p.kh; i++)
              for (int64_t j = 0; j < p.kw; j++) {
                int64_t iy = oy * p.sh - p.pt + i * p.dh, ix = ox * p.sw - p.pl + j * p.dw;
                if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
                  continue;
                dx[(pc * p.h + iy) * p.w + ix] += dY[yi] / div;
              }
          }
        }
  }
};

void CheckPool(gcc_dnnl *dn, gcc_dnnl_pool_desc pd, std::vector<float> X, unsigned seed,
               bool vs_cpu) {
  gcc_diag d{};
  PoolRef ref{pd, 0, 0, {}, {}};
  int64_t oh, ow;
  gcc_dnnl_pool_out_dims(&pd, &oh, &ow);
  auto dY = Rand((size_t)(pd.n * pd.c * oh * ow), seed + 1);
  ref.Run(X, dY);
  size_t ny = ref.y.size();
  bool max = pd.kind == GCC_DNNL_POOL_MAX;
  pd.training = max;
  gcc_dnnl_op *fwd = nullptr, *bwd = nullptr, *from_x = nullptr;
  ASSERT_EQ(gcc_dnnl_pool_fwd_create(dn, &pd, &fwd, &d), GCC_OK) << d.msg;
  std::string what = gcc_dnnl_op_name(fwd);
  std::vector<float> y(ny, NAN), dx(X.size(), NAN);
  std::vector<unsigned char> ws(gcc_dnnl_op_workspace_bytes(fwd) + 1);
  EXPECT_EQ(max, gcc_dnnl_op_workspace_bytes(fwd) > 0) << what;
  ASSERT_EQ(RunOp(fwd, {X.data(), y.data(), ws.data()}, &d), GCC_OK) << d.msg;
  EXPECT_LT(RelErr(y, ref.y), 1e-6) << what;
  ASSERT_EQ(gcc_dnnl_pool_bwd_create(dn, &pd, &bwd, &d), GCC_OK) << d.msg;
  if (max)
    ASSERT_EQ(RunOp(bwd, {dY.data(), ws.data(), dx.data()}, &d), GCC_OK) << d.msg;
  else
    ASSERT_EQ(RunOp(bwd, {dY.data(), dx.data()}, &d), GCC_OK) << d.msg;
  EXPECT_LT(RelErr(dx, ref.dx), 1e-6) << gcc_dnnl_op_name(bwd);
  if (max) {
    std::vector<float> dx2(X.size(), NAN);
    ASSERT_EQ(gcc_dnnl_max_pool_bwd_from_x_create(dn, &pd, &from_x, &d), GCC_OK) << d.msg;
    ASSERT_EQ(RunOp(from_x, {dY.data(), X.data(), dx2.data()}, &d), GCC_OK) << d.msg;
    // this layer's own loops (no ties in X here, so the same argmax as
    // oneDNN's workspace; an input that is the maximum of several windows sums
    // their dY in another order than oneDNN: within the reference's bound)
    EXPECT_LT(RelErr(dx2, ref.dx), 1e-6) << gcc_dnnl_op_name(from_x);
  }
  if (vs_cpu) { // the CPU backend's loops (ceil_mode = 0)
    auto attrs = [&](gcc_graph *g, int node) {
      int64_t k[2] = {pd.kh, pd.kw}, st[2] = {pd.sh, pd.sw}, pads[4] = {pd.pt, pd.pl, pd.pb, pd.pr},
              dl[2] = {pd.dh, pd.dw};
      gcc_node_set_ints(g, node, "kernel_shape", k, 2);
      gcc_node_set_ints(g, node, "strides", st, 2);
      gcc_node_set_ints(g, node, "pads", pads, 4);
      gcc_node_set_ints(g, node, "dilations", dl, 2);
      if (!max)
        gcc_node_set_int(g, node, "count_include_pad", pd.kind == GCC_DNNL_POOL_AVG_INCLUDE);
    };
    gcc_shape xs = Shape({pd.n, pd.c, pd.h, pd.w}), ys = Shape({pd.n, pd.c, oh, ow});
    std::vector<float> cy(ny), cdx(X.size());
    OneNode f, b;
    MakeNode(&f, max ? GCC_OP_MAX_POOL : GCC_OP_AVERAGE_POOL, {xs}, {ys}, attrs);
    RunCpuKernel(&f, {X.data()}, {cy.data()});
    EXPECT_LT(RelErrF(y, cy), 1e-6) << what << " vs the CPU kernel";
    if (max) {
      MakeNode(&b, GCC_OP_MAX_POOL_GRAD, {ys, xs, ys}, {xs}, attrs);
      RunCpuKernel(&b, {dY.data(), X.data(), cy.data()}, {cdx.data()});
    } else {
      MakeNode(&b, GCC_OP_AVERAGE_POOL_GRAD, {ys}, {xs}, [&](gcc_graph *g, int node) {
        attrs(g, node);
        int64_t is[4] = {pd.n, pd.c, pd.h, pd.w};
        gcc_node_set_ints(g, node, "input_shape", is, 4);
      });
      RunCpuKernel(&b, {dY.data()}, {cdx.data()});
    }
    EXPECT_LT(RelErrF(dx, cdx), 1e-6) << gcc_dnnl_op_name(bwd) << " vs the CPU kernel";
  }
  gcc_dnnl_op_free(fwd);
  gcc_dnnl_op_free(bwd);
  gcc_dnnl_op_free(from_x);
}

gcc_dnnl_pool_desc Pool(gcc_dnnl_pool_kind kind, int64_t n, int64_t c, int64_t h, int64_t w,
                        int64_t k, int64_t s) {
  gcc_dnnl_pool_desc p{};
  p.kind = kind;
  p.n = n, p.c = c, p.h = h, p.w = w, p.kh = p.kw = k, p.sh = p.sw = s;
  p.dh = p.dw = 1;
  return p;
}

TEST_F(DnnlTest, PoolingMatchesPyTorchSemanticsAndTheCpuKernels) {
  unsigned seed = 300;
  for (int kind = 0; kind < 3; kind++) {
    auto K = (gcc_dnnl_pool_kind)kind;
    std::vector<gcc_dnnl_pool_desc> cases;
    cases.push_back(Pool(K, 64, 6, 24, 24, 2, 2)); // the CNNs' pools
    cases.push_back(Pool(K, 2, 3, 7, 9, 3, 2));    // ragged
    {
      auto p = Pool(K, 2, 3, 8, 7, 3, 2); // pads
      p.pt = p.pl = 1, p.pb = 1, p.pr = 0;
      cases.push_back(p);
    }
    {
      auto p = Pool(K, 2, 2, 9, 8, 3, 1); // kernel 3x2, stride 1x2, asymmetric pads
      p.kw = 2, p.sw = 2, p.pt = 1, p.pb = 0, p.pl = 0, p.pr = 1;
      cases.push_back(p);
    }
    if (K == GCC_DNNL_POOL_MAX) {
      auto p = Pool(K, 2, 3, 11, 10, 3, 2); // dilation
      p.dh = 2, p.dw = 3, p.pt = p.pl = 1;
      cases.push_back(p);
    }
    for (auto p : cases)
      for (int ceil = 0; ceil < 2; ceil++) {
        p.ceil_mode = ceil;
        int64_t oh, ow;
        gcc_dnnl_pool_out_dims(&p, &oh, &ow);
        auto X = Rand((size_t)(p.n * p.c * p.h * p.w), seed);
        CheckPool(dn_, p, X, seed += 10, !ceil);
      }
  }
}

// ceil_mode shapes where the last window hangs past the padding: PyTorch
// divides by the taps inside the padded input, oneDNN by the kernel size.
TEST_F(DnnlTest, CeilModeAveragePoolingDividesAsPyTorch) {
  for (int kind = 1; kind < 3; kind++) {
    auto p = Pool((gcc_dnnl_pool_kind)kind, 2, 3, 6, 7, 3, 2);
    p.ceil_mode = 1;
    p.pt = p.pl = p.pb = p.pr = 1;
    int64_t oh, ow;
    gcc_dnnl_pool_out_dims(&p, &oh, &ow);
    // torch.nn.AvgPool2d(3, 2, padding=1, ceil_mode=True) on 6x7: 4x4
    EXPECT_EQ(oh, 4);
    EXPECT_EQ(ow, 4);
    auto X = Rand((size_t)(p.n * p.c * p.h * p.w), 900 + kind);
    CheckPool(dn_, p, X, 910 + kind, false);
  }
  // PyTorch's rule: a last window starting past the input is dropped
  auto p = Pool(GCC_DNNL_POOL_MAX, 1, 1, 5, 5, 2, 2);
  p.ceil_mode = 1;
  p.pt = p.pl = p.pb = p.pr = 1;
  int64_t oh, ow;
  gcc_dnnl_pool_out_dims(&p, &oh, &ow);
  EXPECT_EQ(oh, 3); // ceil((5 + 2 - 2) / 2) + 1 = 4, the 4th would start at 6 > 5
  EXPECT_EQ(ow, 3);
}

// ReLU before a max pool makes windows of equal values (zeros): the
// gradient goes to the first of them, as in PyTorch.
TEST_F(DnnlTest, MaxPoolingTiesSendTheGradientToTheFirstMaximum) {
  auto p = Pool(GCC_DNNL_POOL_MAX, 2, 4, 8, 8, 2, 2);
  auto X = Rand((size_t)(p.n * p.c * p.h * p.w), 1000);
  for (size_t i = 0; i < X.size(); i++)
    X[i] = X[i] < 0.3f ? 0.0f : std::round(X[i] * 2) / 2;
  CheckPool(dn_, p, X, 1001, true);
  p.pt = p.pl = 1; // windows of padding and zeros
  p.kh = p.kw = 3;
  CheckPool(dn_, p, X, 1002, true);
}

// Every max pooling of a plan (the forward without a workspace, the backward
// from X) runs on this layer's own loops, never on oneDNN's JIT kernels, whose
// tie-breaking differs between AVX2 and AVX-512: tiled windows (kernel =
// stride) and general ones (overlapping, padded, dilated, ceil mode), with
// ties (whole zero windows, as after a ReLU) and NaNs. Checked against the CPU
// kernels bit for bit (PyTorch's rule: the first maximum in row-major window
// order, the last NaN; dX summed in output order in both) and, without NaNs,
// against the float64 reference: the reference sums the same at most
// ceil(kh/sh) * ceil(kw/sw) dY terms per input in double, so a float sum of
// <= 4 terms is within 4 ulp (relative 1e-6 covers it).
TEST_F(DnnlTest, OwnMaxPoolingIsPyTorchsOnEveryIsaWithTiesAndNaN) {
  struct Case {
    int64_t n, c, h, w, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
    int ceil, nan;
    const char *impl;
  };
  const Case cases[] = {
      {64, 6, 24, 24, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 0, "gcc:max_pool_tiled"},
      {2, 3, 7, 9, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 0, "gcc:max_pool_tiled"},
      {1, 2, 9, 11, 3, 3, 3, 3, 0, 0, 0, 0, 1, 1, 0, 0, "gcc:max_pool_tiled"},
      {3, 4, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 1, "gcc:max_pool_tiled"},
      {2, 2, 7, 7, 3, 3, 3, 3, 0, 0, 0, 0, 1, 1, 0, 1, "gcc:max_pool_tiled"},
      // ResNet's stem pool, MaxPool2d(3, 2, 1)
      {2, 8, 16, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, "gcc:max_pool"},
      {2, 3, 9, 9, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 1, "gcc:max_pool"},
      {1, 3, 9, 8, 3, 2, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, "gcc:max_pool"},   // stride 1
      {2, 2, 10, 9, 3, 3, 2, 2, 1, 0, 0, 1, 2, 1, 0, 0, "gcc:max_pool"},  // dilated, asymmetric
      {2, 2, 8, 8, 3, 3, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0, "gcc:max_pool"},   // ceil mode
      {1, 2, 11, 7, 2, 3, 2, 3, 1, 1, 0, 1, 1, 1, 1, 1, "gcc:max_pool"}}; // all of it, NaN
  unsigned seed = 1500;
  for (const Case &cs : cases) {
    gcc_dnnl_pool_desc p{};
    p.kind = GCC_DNNL_POOL_MAX;
    p.n = cs.n, p.c = cs.c, p.h = cs.h, p.w = cs.w, p.kh = cs.kh, p.kw = cs.kw;
    p.sh = cs.sh, p.sw = cs.sw, p.pt = cs.pt, p.pl = cs.pl, p.pb = cs.pb, p.pr = cs.pr;
    p.dh = cs.dh, p.dw = cs.dw, p.ceil_mode = cs.ceil;
    SCOPED_TRACE(std::string(cs.impl) + " case " + std::to_string(seed));
    int64_t oh, ow;
    gcc_dnnl_pool_out_dims(&p, &oh, &ow);
    auto X = Rand((size_t)(p.n * p.c * p.h * p.w), seed++);
    for (size_t i = 0; i < X.size(); i += 5)
      X[i] = 0.0f;                                  // ties
    for (size_t i = 0; i + 16 <= X.size(); i += 64) // whole zero runs: tied windows
      for (size_t j = 0; j < 16; j++)
        X[i + j] = 0.0f;
    if (cs.nan)
      for (size_t i = 3; i < X.size(); i += 7)
        X[i] = NAN;
    auto dY = Rand((size_t)(p.n * p.c * oh * ow), seed++);
    gcc_dnnl_op *fwd = nullptr, *bwd = nullptr;
    ASSERT_EQ(gcc_dnnl_pool_fwd_create(dn_, &p, &fwd, &d_), GCC_OK) << d_.msg;
    ASSERT_EQ(gcc_dnnl_max_pool_bwd_from_x_create(dn_, &p, &bwd, &d_), GCC_OK) << d_.msg;
    EXPECT_STREQ(gcc_dnnl_op_impl(fwd), cs.impl);
    EXPECT_STREQ(gcc_dnnl_op_impl(bwd), cs.impl);
    EXPECT_EQ(gcc_dnnl_op_scratch_bytes(bwd), 0u);
    std::vector<float> y((size_t)(p.n * p.c * oh * ow)), dx(X.size(), 1234.0f);
    ASSERT_EQ(RunOp(fwd, {X.data(), y.data()}, &d_), GCC_OK) << d_.msg;
    ASSERT_EQ(RunOp(bwd, {dY.data(), X.data(), dx.data()}, &d_), GCC_OK) << d_.msg;
    // the CPU kernels (their NaN rule is PyTorch's)
    std::vector<float> cy(y.size()), cdx(dx.size());
    auto attrs = [&](gcc_graph *g, int node) {
      int64_t k[2] = {p.kh, p.kw}, st[2] = {p.sh, p.sw}, pads[4] = {p.pt, p.pl, p.pb, p.pr},
              dl[2] = {p.dh, p.dw};
      gcc_node_set_ints(g, node, "kernel_shape", k, 2);
      gcc_node_set_ints(g, node, "strides", st, 2);
      gcc_node_set_ints(g, node, "pads", pads, 4);
      gcc_node_set_ints(g, node, "dilations", dl, 2);
      gcc_node_set_int(g, node, "ceil_mode", p.ceil_mode);
    };
    gcc_shape xs = Shape({p.n, p.c, p.h, p.w}), ys = Shape({p.n, p.c, oh, ow});
    OneNode f, b;
    MakeNode(&f, GCC_OP_MAX_POOL, {xs}, {ys}, attrs);
    RunCpuKernel(&f, {X.data()}, {cy.data()});
    MakeNode(&b, GCC_OP_MAX_POOL_GRAD, {ys, xs, ys}, {xs}, attrs);
    RunCpuKernel(&b, {dY.data(), X.data(), cy.data()}, {cdx.data()});
    EXPECT_EQ(0, memcmp(y.data(), cy.data(), y.size() * 4)) << gcc_dnnl_op_name(fwd);
    EXPECT_EQ(0, memcmp(dx.data(), cdx.data(), dx.size() * 4)) << gcc_dnnl_op_name(bwd);
    if (!cs.nan) {
      PoolRef ref{p, 0, 0, {}, {}};
      ref.Run(X, dY);
      EXPECT_LT(RelErr(y, ref.y), 1e-7);
      EXPECT_LT(RelErr(dx, ref.dx), 1e-6);
    }
    gcc_dnnl_op_free(fwd);
    gcc_dnnl_op_free(bwd);
  }
}

// ---- eltwise and batch norm ---------------------------------------------------------

TEST_F(DnnlTest, ReluForwardAndBackwardFromItsOutput) {
  for (int64_t n : {1, 17, 4096, 100003}) {
    auto x = Rand((size_t)n, 1100), dy = Rand((size_t)n, 1101);
    std::vector<float> y((size_t)n), dx((size_t)n);
    gcc_dnnl_op *f = nullptr, *b = nullptr;
    ASSERT_EQ(gcc_dnnl_relu_fwd_create(dn_, n, &f, &d_), GCC_OK) << d_.msg;
    ASSERT_EQ(gcc_dnnl_relu_bwd_create(dn_, n, &b, &d_), GCC_OK) << d_.msg;
    ASSERT_EQ(RunOp(f, {x.data(), y.data()}, &d_), GCC_OK) << d_.msg;
    ASSERT_EQ(RunOp(b, {dy.data(), y.data(), dx.data()}, &d_), GCC_OK) << d_.msg;
    for (int64_t i = 0; i < n; i++) {
      ASSERT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f) << i;
      ASSERT_EQ(dx[i], x[i] > 0 ? dy[i] : 0.0f) << i;
    }
    gcc_dnnl_op_free(f);
    gcc_dnnl_op_free(b);
  }
}

TEST_F(DnnlTest, BatchNormTrainingInferenceAndBackwardMatchFloat64) {
  const int64_t shapes[][4] = {{8, 3, 5, 7}, {64, 16, 1, 1}, {2, 6, 4, 4}};
  for (auto &s : shapes) {
    gcc_dnnl_bnorm_desc bd{s[0], s[1], s[2], s[3], 1e-5f};
    int64_t n = s[0], c = s[1], hw = s[2] * s[3];
    size_t nx = (size_t)(n * c * hw);
    auto X = Rand(nx, 1200, -2, 3), dY = Rand(nx, 1201), gamma = Rand((size_t)c, 1202, 0.5f, 1.5f);
    auto beta = Rand((size_t)c, 1203);
    std::vector<double> mean((size_t)c, 0), var((size_t)c, 0), y(nx), dx(nx), dg((size_t)c, 0),
        dbt((size_t)c, 0);
    double cnt = (double)(n * hw);
    for (int64_t ch = 0; ch < c; ch++) {
      auto at = [&](int64_t i, int64_t q) { return (size_t)((i * c + ch) * hw + q); };
      for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < hw; q++)
          mean[ch] += X[at(i, q)];
      mean[ch] /= cnt;
      for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < hw; q++)
          var[ch] += std::pow(X[at(i, q)] - mean[ch], 2);
      var[ch] /= cnt;
      double inv = 1.0 / std::sqrt(var[ch] + 1e-5);
      double sdy = 0, sdyx = 0;
      for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < hw; q++) {
          double xh = (X[at(i, q)] - mean[ch]) * inv;
          y[at(i, q)] = gamma[ch] * xh + beta[ch];
          sdy += dY[at(i, q)];
          sdyx += dY[at(i, q)] * xh;
        }
      dg[ch] = sdyx;
      dbt[ch] = sdy;
      for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < hw; q++) {
          double xh = (X[at(i, q)] - mean[ch]) * inv;
          dx[at(i, q)] = gamma[ch] * inv * (dY[at(i, q)] - sdy / cnt - xh * sdyx / cnt);
        }
    }
    gcc_dnnl_op *ft = nullptr, *fi = nullptr, *b = nullptr;
    ASSERT_EQ(gcc_dnnl_bnorm_fwd_train_create(dn_, &bd, &ft, &d_), GCC_OK) << d_.msg;
    ASSERT_EQ(gcc_dnnl_bnorm_fwd_infer_create(dn_, &bd, &fi, &d_), GCC_OK) << d_.msg;
    ASSERT_EQ(gcc_dnnl_bnorm_bwd_create(dn_, &bd, &b, &d_), GCC_OK) << d_.msg;
    std::vector<float> gy(nx), gm((size_t)c), gv((size_t)c), gy2(nx), gdx(nx), gdg((size_t)c),
        gdb((size_t)c);
    ASSERT_EQ(
        RunOp(ft, {X.data(), gamma.data(), beta.data(), gy.data(), gm.data(), gv.data()}, &d_),
        GCC_OK)
        << d_.msg;
    EXPECT_LT(RelErr(gy, y), 1e-5) << gcc_dnnl_op_name(ft);
    EXPECT_LT(RelErr(gm, mean), 1e-5);
    EXPECT_LT(RelErr(gv, var), 1e-5);
    ASSERT_EQ(
        RunOp(fi, {X.data(), gamma.data(), beta.data(), gm.data(), gv.data(), gy2.data()}, &d_),
        GCC_OK)
        << d_.msg;
    EXPECT_LT(RelErr(gy2, y), 1e-5) << gcc_dnnl_op_name(fi);
    ASSERT_EQ(RunOp(b,
                    {X.data(), dY.data(), gamma.data(), beta.data(), gm.data(), gv.data(),
                     gdx.data(), gdg.data(), gdb.data()},
                    &d_),
              GCC_OK)
        << d_.msg;
    EXPECT_LT(RelErr(gdx, dx), 1e-4) << gcc_dnnl_op_name(b);
    EXPECT_LT(RelErr(gdg, dg), 1e-5);
    EXPECT_LT(RelErr(gdb, dbt), 1e-5);
    gcc_dnnl_op_free(ft);
    gcc_dnnl_op_free(fi);
    gcc_dnnl_op_free(b);
  }
}

// ---- cache, scratch, determinism, errors ---------------------------------------------

TEST_F(DnnlTest, ThePrimitiveCacheSharesOnePrimitivePerDescriptor) {
  gcc_dnnl_matmul_desc md{};
  md.m = 64, md.n = 512, md.k = 784, md.trans_b = 1, md.alpha = 1, md.bias = 1, md.relu = 1;
  gcc_dnnl_op *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_EQ(gcc_dnnl_matmul_create(dn_, &md, &a, &d_), GCC_OK);
  ASSERT_EQ(gcc_dnnl_matmul_create(dn_, &md, &b, &d_), GCC_OK);
  md.relu = 0; // another epilogue: another primitive
  ASSERT_EQ(gcc_dnnl_matmul_create(dn_, &md, &c, &d_), GCC_OK);
  int entries;
  int64_t hits, misses;
  gcc_dnnl_cache_stats(dn_, &entries, &hits, &misses);
  EXPECT_EQ(entries, 2);
  EXPECT_EQ(hits, 1);
  EXPECT_EQ(misses, 2);
  EXPECT_NE(std::string(gcc_dnnl_op_name(a)).find("relu"), std::string::npos);
  EXPECT_EQ(std::string(gcc_dnnl_op_name(c)).find("relu"), std::string::npos);
  gcc_dnnl_op_free(a);
  gcc_dnnl_op_free(b);
  gcc_dnnl_op_free(c);
}

TEST_F(DnnlTest, ScratchIsReportedAndRequired) {
  // backward weights of conv2 reduces over the batch per thread: a scratchpad
  auto cd = Conv(64, 6, 12, 12, 16, 5, 5);
  cd.bias = 1;
  gcc_dnnl_op *op = nullptr;
  ASSERT_EQ(gcc_dnnl_conv_bwd_weights_create(dn_, &cd, &op, &d_), GCC_OK) << d_.msg;
  size_t bytes = gcc_dnnl_op_scratch_bytes(op);
  EXPECT_EQ(bytes % 64, 0u);
  if (bytes) {
    std::vector<float> dy(64 * 16 * 8 * 8), x(64 * 6 * 12 * 12), dw(16 * 6 * 25), db(16);
    void *p[4] = {dy.data(), x.data(), dw.data(), db.data()};
    EXPECT_EQ(gcc_dnnl_op_run(op, p, nullptr, &d_), GCC_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(d_.msg).find("scratch"), std::string::npos) << d_.msg;
  }
  gcc_dnnl_op_free(op);
}

TEST_F(DnnlTest, SameInputsGiveTheSameBitsTwice) {
  auto cd = Conv(64, 6, 12, 12, 16, 5, 5);
  cd.bias = 1;
  auto dy = Rand(64 * 16 * 8 * 8, 1300), x = Rand(64 * 6 * 12 * 12, 1301);
  std::vector<float> w1(16 * 6 * 25), w2(w1.size()), b1(16), b2(16);
  gcc_dnnl_op *op = nullptr;
  ASSERT_EQ(gcc_dnnl_conv_bwd_weights_create(dn_, &cd, &op, &d_), GCC_OK) << d_.msg;
  ASSERT_EQ(RunOp(op, {dy.data(), x.data(), w1.data(), b1.data()}, &d_), GCC_OK);
  ASSERT_EQ(RunOp(op, {dy.data(), x.data(), w2.data(), b2.data()}, &d_), GCC_OK);
  EXPECT_EQ(0, memcmp(w1.data(), w2.data(), w1.size() * 4));
  EXPECT_EQ(0, memcmp(b1.data(), b2.data(), b1.size() * 4));
  gcc_dnnl_op_free(op);
  gcc_dnnl_matmul_desc md{};
  md.m = 512, md.n = 784, md.k = 64, md.trans_a = 1, md.alpha = 1; // dW = dY^T X
  auto A = Rand(64 * 512, 1302), B = Rand(64 * 784, 1303);
  std::vector<float> y1(512 * 784), y2(y1.size());
  ASSERT_EQ(gcc_dnnl_matmul_create(dn_, &md, &op, &d_), GCC_OK);
  ASSERT_EQ(RunOp(op, {A.data(), B.data(), nullptr, y1.data()}, &d_), GCC_OK);
  ASSERT_EQ(RunOp(op, {A.data(), B.data(), nullptr, y2.data()}, &d_), GCC_OK);
  EXPECT_EQ(0, memcmp(y1.data(), y2.data(), y1.size() * 4));
  gcc_dnnl_op_free(op);
}

TEST_F(DnnlTest, BadDescriptorsAreClearErrors) {
  auto cd = Conv(2, 6, 9, 9, 4, 3, 3);
  cd.group = 4; // does not divide 6
  gcc_dnnl_op *op = nullptr;
  EXPECT_EQ(gcc_dnnl_conv_fwd_create(dn_, &cd, &op, &d_), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d_.msg).find("group 4"), std::string::npos) << d_.msg;
  EXPECT_EQ(op, nullptr);
  cd = Conv(2, 3, 4, 4, 4, 5, 5); // the kernel does not fit
  EXPECT_EQ(gcc_dnnl_conv_bwd_data_create(dn_, &cd, &op, &d_), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d_.msg).find("does not fit"), std::string::npos) << d_.msg;
  auto p = Pool(GCC_DNNL_POOL_MAX, 1, 1, 8, 8, 2, 2);
  p.pt = 2; // more than half the kernel
  EXPECT_EQ(gcc_dnnl_pool_fwd_create(dn_, &p, &op, &d_), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d_.msg).find("half the kernel"), std::string::npos) << d_.msg;
  p = Pool(GCC_DNNL_POOL_AVG_EXCLUDE, 1, 1, 8, 8, 2, 2);
  EXPECT_EQ(gcc_dnnl_max_pool_bwd_from_x_create(dn_, &p, &op, &d_), GCC_ERR_INVALID_ARGUMENT);
  gcc_dnnl_matmul_desc md{};
  md.m = 4, md.n = 0, md.k = 3;
  EXPECT_EQ(gcc_dnnl_matmul_create(dn_, &md, &op, &d_), GCC_ERR_INVALID_ARGUMENT);
  md.n = 5, md.lda = 2; // shorter than a row of A (k = 3)
  EXPECT_EQ(gcc_dnnl_matmul_create(dn_, &md, &op, &d_), GCC_ERR_INVALID_ARGUMENT);
  // a failing oneDNN call is named with its status
  EXPECT_EQ(gcc_dnnl_set_verbose(7, &d_), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d_.msg).find("dnnl_set_verbose failed (invalid_arguments)"),
            std::string::npos)
      << d_.msg;
  // a NULL operand at run time
  md = gcc_dnnl_matmul_desc{};
  md.m = 2, md.n = 2, md.k = 2, md.alpha = 1;
  ASSERT_EQ(gcc_dnnl_matmul_create(dn_, &md, &op, &d_), GCC_OK);
  float a[4] = {}, y[4] = {};
  EXPECT_EQ(RunOp(op, {a, nullptr, nullptr, y}, &d_), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d_.msg).find("operand 1"), std::string::npos) << d_.msg;
  gcc_dnnl_op_free(op);
}

TEST(DnnlContext, ThreadCountsKeepSeparatePrimitivesAndTheVersionIsKnown) {
  gcc_diag d{};
  gcc_dnnl *one = nullptr, *two = nullptr;
  ASSERT_EQ(gcc_dnnl_create(1, &one, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_dnnl_create(2, &two, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_dnnl_threads(one), 1);
  EXPECT_EQ(gcc_dnnl_threads(two), 2);
  gcc_dnnl *bad = nullptr;
  EXPECT_EQ(gcc_dnnl_create(-1, &bad, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bad, nullptr);
  EXPECT_EQ(std::string(gcc_dnnl_version()).rfind("2.", 0), 0u) << gcc_dnnl_version();
  EXPECT_STRNE(gcc_dnnl_isa(), "");
  // one thread and two give results within rounding of each other
  gcc_dnnl_matmul_desc md{};
  md.m = 256, md.n = 256, md.k = 512, md.alpha = 1;
  auto A = Rand(256 * 512, 1400), B = Rand(512 * 256, 1401);
  std::vector<float> y1(256 * 256), y2(y1.size());
  gcc_dnnl_op *o1 = nullptr, *o2 = nullptr;
  ASSERT_EQ(gcc_dnnl_matmul_create(one, &md, &o1, &d), GCC_OK);
  ASSERT_EQ(gcc_dnnl_matmul_create(two, &md, &o2, &d), GCC_OK);
  ASSERT_EQ(RunOp(o1, {A.data(), B.data(), nullptr, y1.data()}, &d), GCC_OK);
  ASSERT_EQ(RunOp(o2, {A.data(), B.data(), nullptr, y2.data()}, &d), GCC_OK);
  EXPECT_LT(RelErrF(y1, y2), 1e-6);
  double gf = 0;
  ASSERT_EQ(gcc_dnnl_sgemm_gflops(two, 64, 64, 64, 2, &gf, &d), GCC_OK) << d.msg;
  EXPECT_GT(gf, 0.0);
  gcc_dnnl_op_free(o1);
  gcc_dnnl_op_free(o2);
  gcc_dnnl_free(one);
  gcc_dnnl_free(two);
}

} // namespace
