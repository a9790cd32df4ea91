// cpu_parallel_test: the CPU pointwise kernels whose elements (or rows) are
// cut into contiguous parts over the plan's threads (runtime/cpu/
// cpu_parallel.h): Gelu, GeluGrad, GeluAux, Mul (same shape), Add (same shape, a repeated row:
// a bias, a position table),
// Transpose (last dim kept, last dim moved), SliceGrad (one cut dim: one
// pass; two cut dims or a step: the general walk), Adam,
// SoftmaxCrossEntropy (blocks of rows) and its gradient (rows), GradNorm
// (blocks of the gradients) and ReduceSumTo's column sums (columns;
// to a bias or to a trailing block such as a position table).
//
// Every case runs with 1, 2 and 3 threads on sizes over the parallel
// threshold (GCC_CPU_PARALLEL_MIN_WORK), the outputs start as NaN (an element
// no part wrote shows), and:
// - the outputs of all thread counts are bitwise equal (the determinism the
//   plan promises: every element is computed the same way in any part);
// - ReduceSumTo's column sums equal float32 sums over the rows in order
//   exactly (every column's additions in the kernel's order);
// - Add, Transpose and SliceGrad equal their reference exactly (a float32
//   addition, copies and zeros: no rounding to bound);
// - Adam equals its float32 formula written out here in the kernel's order
//   of operations exactly (ISO C/C++, no FMA contraction, sqrtf correctly
//   rounded: the same operations give the same bits), and a non-finite
//   result in the last part is reported once (the parts' flags combined);
// - SoftmaxCrossEntropy and its gradient (float32 exps, float64 sums) and
//   GradNorm (fixed blocks) are within derived bounds of float64 math, at
//   the sizes where they run on one thread too;
// - Gelu's accuracy is tests/gelu_accuracy_test's (the same loops on one
//   thread); here Y = X Phi(X) within its bound (16 + 2.5 x^2) u |y|, u =
//   2^-24, against float64 erfc, as a check that the parts computed Gelu.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"

namespace {

// Restores the machine's vector forms (cpu_parallel.h) at the end of a scope.
struct NarrowGuard {
  ~NarrowGuard() { gcc_cpu_set_narrow_vectors(0); }
};

using KernelFn = gcc_status (*)(const gcc_kernel_args *);

gcc_shape Shape(const std::vector<int64_t> &dims) {
  gcc_shape s{};
  s.ndim = (int)dims.size();
  for (size_t i = 0; i < dims.size(); i++)
    s.dims[i] = dims[i];
  return s;
}

int64_t Numel(const gcc_shape &s) {
  int64_t n = 1;
  for (int i = 0; i < s.ndim; i++)
    n *= s.dims[i];
  return n;
}

std::vector<float> Data(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = u(gen);
  return v;
}

// Runs `fn` on `node` with float32 inputs (in place: the inputs are the
// kernel's to change, as Adam's) and one output of `*out_shape` (none when
// out_shape is null), `threads` threads. Returns the output.
std::vector<float> RunKernel(KernelFn fn, gcc_node *node, const std::vector<gcc_shape> &shapes,
                             std::vector<std::vector<float>> *in, const gcc_shape *out_shape,
                             int threads, gcc_cpu_ctx *ctx_out = nullptr) {
  gcc_diag d{};
  gcc_cpu_ctx ctx{};
  ctx.max_threads = threads;
  ctx.diag = &d;
  ctx.source = "<test>";
  ctx.lr = 1e-3f;
  ctx.optimizer_step = 4;
  std::vector<gcc_tensor> t(in->size() + 1);
  std::vector<gcc_tensor *> pin;
  for (size_t i = 0; i < in->size(); i++) {
    t[i] = gcc_tensor{GCC_DT_FLOAT32, shapes[i], (int64_t)(*in)[i].size(), (*in)[i].data()};
    pin.push_back(&t[i]);
  }
  std::vector<float> y;
  gcc_tensor *pout = nullptr;
  int n_out = 0;
  if (out_shape) {
    y.assign((size_t)Numel(*out_shape), NAN);
    t.back() = gcc_tensor{GCC_DT_FLOAT32, *out_shape, (int64_t)y.size(), y.data()};
    pout = &t.back();
    n_out = 1;
  }
  gcc_kernel_args a{node, pin.data(), (int)pin.size(), &pout, n_out, &ctx, nullptr, 0, nullptr};
  EXPECT_EQ(fn(&a), GCC_OK) << d.msg;
  if (ctx_out)
    *ctx_out = ctx;
  return y;
}

// The outputs of 1, 2 and 3 threads, checked bitwise equal; returns 1's.
std::vector<float> RunThreads(KernelFn fn, gcc_node *node, const std::vector<gcc_shape> &shapes,
                              const std::vector<std::vector<float>> &in,
                              const gcc_shape &out_shape) {
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    std::vector<std::vector<float>> copy = in;
    std::vector<float> y = RunKernel(fn, node, shapes, &copy, &out_shape, threads);
    if (threads == 1) {
      first = y;
      continue;
    }
    EXPECT_EQ(y.size(), first.size());
    EXPECT_EQ(0, std::memcmp(y.data(), first.data(), y.size() * sizeof(float)))
        << threads << " threads: not the bits of 1 thread";
  }
  return first;
}

gcc_node Node(int op, gcc_attr *av, int n_av) {
  gcc_node nd{};
  nd.op = op;
  nd.name = (char *)"n";
  nd.av = av;
  nd.n_av = n_av;
  return nd;
}

TEST(CpuParallel, GeluAndGeluGradEitherFormAnyThreads) {
  const int64_t n = 100003; // not a multiple of the 256-element chunks
  gcc_shape s = Shape({n});
  std::vector<float> x = Data((size_t)n, 1, -6.0f, 6.0f), dy = Data((size_t)n, 2, -1.0f, 1.0f);
  for (const char *form : {"none", "tanh"}) {
    SCOPED_TRACE(form);
    gcc_attr av[1]{};
    av[GELU_APPROXIMATE].type = GCC_ATTR_STRING;
    av[GELU_APPROXIMATE].s = (char *)form;
    gcc_node g = Node(GCC_OP_GELU, av, 1), gg = Node(GCC_OP_GELU_GRAD, av, 1);
    std::vector<float> y = RunThreads(gcc_cpu_gelu, &g, {s}, {x}, s);
    std::vector<float> dx = RunThreads(gcc_cpu_gelu_grad, &gg, {s, s}, {dy, x}, s);
    for (int64_t i = 0; i < n; i++) {
      ASSERT_FALSE(std::isnan(dx[(size_t)i])) << "element " << i << " not written";
      double v = x[(size_t)i], ref;
      if (std::strcmp(form, "none") == 0) {
        ref = v * 0.5 * std::erfc(-v / std::sqrt(2.0));
        // gelu_accuracy_test's bound: (17 + 0.5 x^2) u relative
        double bound = (17 + 0.5 * v * v) * std::ldexp(1.0, -24) * std::fabs(ref);
        ASSERT_NEAR(y[(size_t)i], ref, bound) << "x = " << v;
      } else {
        ref = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        // tanhf and the float32 polynomial: a few u of the terms (|x| <= 6:
        // the terms are at most 6 + 0.05 * 216 < 20 in magnitude) plus u |y|
        ASSERT_NEAR(y[(size_t)i], ref, 64 * std::ldexp(1.0, -24) * (std::fabs(ref) + 1))
            << "x = " << v;
      }
    }
  }
}

// GeluAux (two outputs) on 1, 2 and 3 threads: Y and D bitwise the same for
// every thread count, Y bitwise Gelu's, dY * D bitwise GeluGrad's (the same
// operations: tests/gelu_accuracy_test); Mul of same-shape operands (the
// backward the gelu-aux lowering makes) on parts: exactly the float product.
TEST(CpuParallel, GeluAuxAndMulAnyThreads) {
  const int64_t n = 100003;
  gcc_shape s = Shape({n});
  std::vector<float> x = Data((size_t)n, 11, -6.0f, 6.0f), dy = Data((size_t)n, 12, -1.0f, 1.0f);
  for (const char *form : {"none", "tanh"}) {
    SCOPED_TRACE(form);
    gcc_attr av[1]{};
    av[GELU_APPROXIMATE].type = GCC_ATTR_STRING;
    av[GELU_APPROXIMATE].s = (char *)form;
    gcc_node g = Node(GCC_OP_GELU, av, 1), gg = Node(GCC_OP_GELU_GRAD, av, 1),
             ga = Node(GCC_OP_GELU_AUX, av, 1);
    std::vector<float> y = RunThreads(gcc_cpu_gelu, &g, {s}, {x}, s);
    std::vector<float> dx = RunThreads(gcc_cpu_gelu_grad, &gg, {s, s}, {dy, x}, s);
    std::vector<float> y1, d1;
    for (int threads : {1, 2, 3}) {
      gcc_cpu_ctx ctx{};
      ctx.max_threads = threads;
      std::vector<float> ya((size_t)n, NAN), da((size_t)n, NAN);
      gcc_tensor tx{GCC_DT_FLOAT32, s, n, x.data()}, ty{GCC_DT_FLOAT32, s, n, ya.data()},
          td{GCC_DT_FLOAT32, s, n, da.data()};
      gcc_tensor *in[1] = {&tx}, *out[2] = {&ty, &td};
      gcc_kernel_args a{&ga, in, 1, out, 2, &ctx, nullptr, 0, nullptr};
      ASSERT_EQ(gcc_cpu_gelu_aux(&a), GCC_OK);
      if (threads == 1) {
        y1 = ya, d1 = da;
        continue;
      }
      EXPECT_EQ(0, std::memcmp(ya.data(), y1.data(), ya.size() * 4)) << threads << " threads";
      EXPECT_EQ(0, std::memcmp(da.data(), d1.data(), da.size() * 4)) << threads << " threads";
    }
    EXPECT_EQ(0, std::memcmp(y1.data(), y.data(), y.size() * 4)) << "Y is not Gelu's";
    gcc_node mul = Node(GCC_OP_MUL, nullptr, 0);
    std::vector<float> m = RunThreads(gcc_cpu_mul, &mul, {s, s}, {dy, d1}, s);
    for (int64_t i = 0; i < n; i++) {
      ASSERT_EQ(m[(size_t)i], dy[(size_t)i] * d1[(size_t)i]) << i;
      ASSERT_EQ(m[(size_t)i], dx[(size_t)i]) << "x = " << x[(size_t)i] << ": not GeluGrad's";
    }
  }
}

TEST(CpuParallel, AddSameShapeAndRowBroadcast) {
  gcc_node add = Node(GCC_OP_ADD, nullptr, 0);
  gcc_shape s = Shape({70001});
  std::vector<float> a = Data(70001, 3, -4, 4), b = Data(70001, 4, -4, 4);
  std::vector<float> y = RunThreads(gcc_cpu_add, &add, {s, s}, {a, b}, s);
  for (size_t i = 0; i < a.size(); i++)
    ASSERT_EQ(y[i], a[i] + b[i]) << i;
  gcc_shape m = Shape({1000, 77}), r = Shape({77});
  std::vector<float> x = Data(77000, 5, -4, 4), bias = Data(77, 6, -4, 4);
  y = RunThreads(gcc_cpu_add, &add, {m, r}, {x, bias}, m);
  for (size_t i = 0; i < x.size(); i++)
    ASSERT_EQ(y[i], x[i] + bias[i % 77]) << i;
  // a (T, C) position table added to (B, T, C) embeddings, as either operand
  // and with a leading one: rows of T * C repeated
  gcc_shape e = Shape({40, 30, 70}), pt = Shape({30, 70}), pt1 = Shape({1, 30, 70});
  std::vector<float> emb = Data(84000, 7, -4, 4), pos = Data(2100, 8, -4, 4);
  for (const gcc_shape &ps : {pt, pt1}) {
    y = RunThreads(gcc_cpu_add, &add, {e, ps}, {emb, pos}, e);
    for (size_t i = 0; i < emb.size(); i++)
      ASSERT_EQ(y[i], emb[i] + pos[i % 2100]) << i;
    y = RunThreads(gcc_cpu_add, &add, {ps, e}, {pos, emb}, e);
    for (size_t i = 0; i < emb.size(); i++)
      ASSERT_EQ(y[i], pos[i % 2100] + emb[i]) << i;
  }
  // (3, 1) + (1, 4): not one row repeated; the general walk
  gcc_shape c3 = Shape({3, 1}), r4 = Shape({1, 4}), o = Shape({3, 4});
  std::vector<float> u = Data(3, 9, -4, 4), v = Data(4, 10, -4, 4);
  y = RunThreads(gcc_cpu_add, &add, {c3, r4}, {u, v}, o);
  for (size_t i = 0; i < 12; i++)
    ASSERT_EQ(y[i], u[i / 4] + v[i % 4]) << i;
}

TEST(CpuParallel, TransposeLastDimKeptAndMoved) {
  struct Case {
    std::vector<int64_t> dims, perm;
  };
  for (const Case &c : {Case{{3, 50, 7, 40}, {0, 2, 1, 3}}, Case{{5, 40, 13, 17}, {3, 1, 0, 2}}}) {
    gcc_attr av[1]{};
    av[TRANSPOSE_PERM].type = GCC_ATTR_INTS;
    std::vector<int64_t> perm = c.perm;
    av[TRANSPOSE_PERM].ints = perm.data();
    av[TRANSPOSE_PERM].n_ints = (int)perm.size();
    gcc_node tr = Node(GCC_OP_TRANSPOSE, av, 1);
    gcc_shape xs = Shape(c.dims), ys = xs;
    for (int i = 0; i < xs.ndim; i++)
      ys.dims[i] = xs.dims[perm[(size_t)i]];
    std::vector<float> x = Data((size_t)Numel(xs), 7, -1, 1);
    std::vector<float> y = RunThreads(gcc_cpu_transpose, &tr, {xs}, {x}, ys);
    int64_t xst[4], idx[4];
    xst[3] = 1;
    for (int i = 2; i >= 0; i--)
      xst[i] = xst[i + 1] * xs.dims[i + 1];
    for (int64_t o = 0; o < Numel(ys); o++) {
      int64_t rest = o, ix = 0;
      for (int i = 3; i >= 0; i--) {
        idx[i] = rest % ys.dims[i];
        rest /= ys.dims[i];
        ix += idx[i] * xst[perm[(size_t)i]];
      }
      ASSERT_EQ(y[(size_t)o], x[(size_t)ix]) << o;
    }
  }
}

TEST(CpuParallel, SliceGradOneCutAndGeneral) {
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  const std::vector<int64_t> dims = {4, 60, 384};
  // one cut dim (last, middle), nothing cut, two cut dims, a step of 2
  for (const Case &c :
       {Case{{128}, {256}, {2}, {1}}, Case{{10}, {50}, {1}, {1}}, Case{{0}, {384}, {2}, {1}},
        Case{{1, 100}, {3, 300}, {0, 2}, {1, 1}}, Case{{5}, {301}, {2}, {2}}}) {
    Case k = c;
    gcc_attr av[5]{};
    std::vector<int64_t> *lists[4] = {&k.starts, &k.ends, &k.axes, &k.steps};
    for (int i = 0; i < 4; i++) {
      av[i].type = GCC_ATTR_INTS;
      av[i].ints = lists[i]->data();
      av[i].n_ints = (int)lists[i]->size();
    }
    gcc_node sg = Node(GCC_OP_SLICE_GRAD, av, 5);
    gcc_shape xs = Shape(dims), ys = xs;
    int64_t start[3] = {0, 0, 0}, step[3] = {1, 1, 1};
    for (size_t i = 0; i < k.axes.size(); i++) {
      int64_t ax = k.axes[i];
      start[ax] = k.starts[i];
      step[ax] = k.steps[i];
      ys.dims[ax] = (k.ends[i] - k.starts[i] + k.steps[i] - 1) / k.steps[i];
    }
    SCOPED_TRACE("dY " + std::to_string(ys.dims[0]) + "x" + std::to_string(ys.dims[1]) + "x" +
                 std::to_string(ys.dims[2]));
    std::vector<float> dy = Data((size_t)Numel(ys), 8, -1, 1);
    std::vector<float> dx = RunThreads(gcc_cpu_slice_grad, &sg, {ys}, {dy}, xs);
    std::vector<float> ref((size_t)Numel(xs), 0.0f);
    for (int64_t i = 0; i < ys.dims[0]; i++)
      for (int64_t j = 0; j < ys.dims[1]; j++)
        for (int64_t l = 0; l < ys.dims[2]; l++)
          ref[(size_t)(((start[0] + i * step[0]) * dims[1] + start[1] + j * step[1]) * dims[2] +
                       start[2] + l * step[2])] =
              dy[(size_t)((i * ys.dims[1] + j) * ys.dims[2] + l)];
    ASSERT_EQ(0, std::memcmp(dx.data(), ref.data(), ref.size() * sizeof(float)));
  }
}

TEST(CpuParallel, AdamAnyThreadsAndNonFiniteInTheLastPart) {
  const int64_t n = 50021;
  gcc_attr av[6]{};
  av[ADAM_LR].f = 1e-3f;
  av[ADAM_BETA1].f = 0.9f;
  av[ADAM_BETA2].f = 0.99f;
  av[ADAM_EPS].f = 1e-8f;
  av[ADAM_WEIGHT_DECAY].f = 0.1f;
  av[ADAM_DECOUPLED].i = 1;
  gcc_node ad = Node(GCC_OP_ADAM, av, 6);
  gcc_shape s = Shape({n});
  std::vector<std::vector<float>> in0 = {Data((size_t)n, 9, -1, 1), Data((size_t)n, 10, -1, 1),
                                         Data((size_t)n, 11, -0.1f, 0.1f),
                                         Data((size_t)n, 12, 0, 0.01f)};
  // the reference: the kernel's float32 operations in its order (AdamW, step 5)
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.99f, eps = 1e-8f;
  const double step = 5;
  const float step_size = (float)((double)lr / (1.0 - std::pow((double)b1, step)));
  const float bc2_sqrt = (float)std::sqrt(1.0 - std::pow((double)b2, step));
  const float decay = (float)(1.0 - (double)lr * 0.1f);
  std::vector<float> p = in0[0], m = in0[2], v = in0[3];
  for (int64_t i = 0; i < n; i++) {
    p[(size_t)i] = p[(size_t)i] * decay;
    float gi = in0[1][(size_t)i] * 1.0f * 1.0f + 0.0f * p[(size_t)i];
    m[(size_t)i] = m[(size_t)i] * b1 + (1.0f - b1) * gi;
    v[(size_t)i] = v[(size_t)i] * b2 + (1.0f - b2) * gi * gi;
    float denom = std::sqrt(v[(size_t)i]) / bc2_sqrt + eps;
    p[(size_t)i] = p[(size_t)i] + (-step_size) * (m[(size_t)i] / denom);
  }
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::vector<std::vector<float>> in = in0;
    gcc_cpu_ctx ctx{};
    RunKernel(gcc_cpu_adam, &ad, {s, s, s, s}, &in, nullptr, threads, &ctx);
    EXPECT_EQ(0, std::memcmp(in[0].data(), p.data(), p.size() * sizeof(float))) << "parameter";
    EXPECT_EQ(0, std::memcmp(in[2].data(), m.data(), m.size() * sizeof(float))) << "first moment";
    EXPECT_EQ(0, std::memcmp(in[3].data(), v.data(), v.size() * sizeof(float))) << "second moment";
    EXPECT_EQ(ctx.updates_checked, 1);
    EXPECT_EQ(ctx.updates_nonfinite, 0);
    in = in0;
    in[1][(size_t)n - 3] = INFINITY; // in the last part of any cut
    RunKernel(gcc_cpu_adam, &ad, {s, s, s, s}, &in, nullptr, threads, &ctx);
    EXPECT_EQ(ctx.updates_nonfinite, 1) << "the last part's non-finite flag";
  }
}

// SoftmaxCrossEntropy (mean, sum; with and without class weights, every
// 7th row ignored) and its gradient over odd sizes against float64 math
// (libm exp and log), 1, 2 and 3 threads bitwise equal. The bounds, u =
// 2^-24, D = the row's largest minus its smallest logit (here <= 10, or
// <= 80 in the wide case): the kernel's e_j = e^(x_j - max) in float32 has
// x_j - max rounded (relative u |d_j|, so e_j off by |d_j| u) and the
// polynomial's ~1 ulp plus the 2^k scaling (2u), so each e_j is within
// (2 + D) u relatively and so is their float64 sum S (its own rounding
// ~c 2^-53, negligible); log S is then off by (2 + D) u absolutely, and so
// is each row's nll (max - x_y and the additions are float64). The loss:
// the rows' weighted mean (or sum) of those, within (2 + D) u sum|w| / denom,
// plus the float32 rounding of the result (u |loss|): asserted with 2 u
// more per row (slack for the polynomial's measured 1-2 ulp).
// The gradient's k-th element, scale p_k - [k = y] with scale = dL w_y /
// denom: p_k = e_k * (float)(scale / S) (errors e_k (2 + D) u, S (2 + D) u,
// the quotient's and the product's roundings u each: (6 + 2D) u |scale p_k|),
// the label's element in float64 from e_y and S ((4 + 2D) u |scale p_y|),
// then rounded to float32 (u |ref|): asserted within (8 + 2D) u |scale| p_k +
// u |ref|.
TEST(CpuParallel, SoftmaxCrossEntropyAndGradAgainstFloat64AnyThreads) {
  const int64_t ignore = -100;
  const double u = std::ldexp(1.0, -24);
  struct Case {
    int64_t n, c;
    float lo, hi;
  };
  std::vector<Case> cases;
  for (int64_t c : {1, 7, 84, 1000})
    for (int64_t n : {1, 5, 300, 3000})
      cases.push_back({n, c, -5.0f, 5.0f});
  cases.push_back({700, 84, -40.0f, 40.0f}); // wide: exponents near the -87 clamp
  unsigned seed = 100;
  for (const Case &cs : cases)
    for (int weighted : {0, 1})
      for (const char *red : {"mean", "sum"}) {
        const int64_t n = cs.n, c = cs.c;
        SCOPED_TRACE("N " + std::to_string(n) + " C " + std::to_string(c) + " weights " +
                     std::to_string(weighted) + " " + red + " range " + std::to_string(cs.hi));
        gcc_attr av[2]{};
        av[SCE_REDUCTION].type = GCC_ATTR_STRING;
        av[SCE_REDUCTION].s = (char *)red;
        av[SCE_IGNORE_INDEX].i = ignore;
        gcc_node fwd = Node(GCC_OP_SOFTMAX_CROSS_ENTROPY, av, 2);
        gcc_node bwd = Node(GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD, av, 2);
        std::vector<float> x = Data((size_t)(n * c), seed++, cs.lo, cs.hi);
        std::vector<float> w = Data((size_t)c, seed++, 0.25f, 2.0f);
        std::vector<int64_t> t((size_t)n);
        std::mt19937 gen(seed++);
        for (int64_t i = 0; i < n; i++)
          t[(size_t)i] = n > 1 && i % 7 == 3 ? ignore : (int64_t)(gen() % (unsigned)c);
        const bool mean = std::string(red) == "mean";
        double wsum = 0, total = 0, bound = 0, wabs = 0;
        std::vector<double> lse((size_t)n), dmax((size_t)n);
        for (int64_t i = 0; i < n; i++) {
          const float *row = &x[(size_t)(i * c)];
          double mx = row[0], mn = row[0];
          for (int64_t k = 1; k < c; k++) {
            mx = std::max(mx, (double)row[k]);
            mn = std::min(mn, (double)row[k]);
          }
          double se = 0;
          for (int64_t k = 0; k < c; k++)
            se += std::exp((double)row[k] - mx);
          lse[(size_t)i] = mx + std::log(se);
          dmax[(size_t)i] = mx - mn;
          const int64_t y = t[(size_t)i];
          if (y == ignore)
            continue;
          const double wy = weighted ? (double)w[(size_t)y] : 1.0;
          wsum += wy;
          total += wy * (lse[(size_t)i] - row[y]);
          wabs += wy * (4.0 + dmax[(size_t)i]);
        }
        const double denom = mean ? wsum : 1.0;
        const double loss = total / denom;
        bound = wabs * u / denom + u * std::fabs(loss);
        const float dl = 0.75f;
        gcc_shape ls = Shape({1}), xs = Shape({n, c}), ts = Shape({n}), ws = Shape({c});
        std::vector<float> first_dx;
        float first_loss = 0;
        // 0: one thread with the 8-float forms (gcc_cpu_set_narrow_vectors:
        // what a CPU with AVX2 but not AVX-512 runs), 1 thread's bits too
        for (int threads : {1, 2, 3, 0}) {
          SCOPED_TRACE(threads ? std::to_string(threads) + " threads"
                               : std::string("the 8-float forms"));
          NarrowGuard narrow_guard;
          gcc_cpu_set_narrow_vectors(threads == 0);
          gcc_diag d{};
          gcc_cpu_ctx ctx{};
          ctx.max_threads = threads ? threads : 1;
          ctx.diag = &d;
          ctx.source = "<test>";
          float y = NAN;
          std::vector<float> dx((size_t)(n * c), NAN);
          gcc_tensor tl{GCC_DT_FLOAT32, ls, 1, (void *)&dl},
              tx{GCC_DT_FLOAT32, xs, n * c, x.data()}, tt{GCC_DT_INT64, ts, n, t.data()},
              tw{GCC_DT_FLOAT32, ws, c, w.data()}, ty{GCC_DT_FLOAT32, ls, 1, &y},
              tdx{GCC_DT_FLOAT32, xs, n * c, dx.data()};
          gcc_tensor *fin[3] = {&tx, &tt, &tw}, *fout[1] = {&ty};
          gcc_kernel_args fa{&fwd, fin, 2 + weighted, fout, 1, &ctx, nullptr, 0, nullptr};
          ASSERT_EQ(gcc_cpu_sce(&fa), GCC_OK) << d.msg;
          gcc_tensor *bin[4] = {&tl, &tx, &tt, &tw}, *bout[1] = {&tdx};
          gcc_kernel_args ba{&bwd, bin, 3 + weighted, bout, 1, &ctx, nullptr, 0, nullptr};
          ASSERT_EQ(gcc_cpu_sce_grad(&ba), GCC_OK) << d.msg;
          if (threads != 1) {
            EXPECT_EQ(0, std::memcmp(&y, &first_loss, sizeof y)) << "loss: not 1 thread's bits";
            EXPECT_EQ(0, std::memcmp(dx.data(), first_dx.data(), dx.size() * sizeof(float)))
                << "gradient: not 1 thread's bits";
            continue;
          }
          first_loss = y;
          first_dx = dx;
          if (n == 1 && t[0] == ignore)
            continue;
          EXPECT_NEAR(y, loss, bound);
          int bad = 0;
          for (int64_t i = 0; i < n; i++) {
            const int64_t lab = t[(size_t)i];
            const float *row = &x[(size_t)(i * c)];
            const double scale =
                lab == ignore ? 0.0 : dl * (weighted ? (double)w[(size_t)lab] : 1.0) / denom;
            for (int64_t k = 0; k < c; k++) {
              const double p = std::exp((double)row[k] - lse[(size_t)i]);
              const double ref = scale * (p - (k == lab ? 1.0 : 0.0));
              const double tol =
                  (8.0 + 2.0 * dmax[(size_t)i]) * u * std::fabs(scale) * p + u * std::fabs(ref);
              const double got = dx[(size_t)(i * c + k)];
              if (!(std::fabs(got - ref) <= tol) && bad++ < 5)
                ADD_FAILURE() << "dx[" << i << ", " << k << "] " << got << " vs " << ref
                              << " (bound " << tol << ")";
            }
          }
          EXPECT_EQ(bad, 0);
        }
      }
}

// A NaN logit makes its row's loss and gradient NaN (as e^NaN did), a -Inf
// logit is a class of probability 0; in the machine's forms and the 8-float
// ones.
void SoftmaxCrossEntropyNaNAndMinusInfOnce() {
  gcc_attr av[2]{};
  av[SCE_REDUCTION].type = GCC_ATTR_STRING;
  av[SCE_REDUCTION].s = (char *)"sum";
  av[SCE_IGNORE_INDEX].i = -100;
  gcc_node fwd = Node(GCC_OP_SOFTMAX_CROSS_ENTROPY, av, 2);
  gcc_node bwd = Node(GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD, av, 2);
  const int64_t n = 2, c = 20;
  std::vector<float> x((size_t)(n * c), 0.0f);
  x[17] = NAN;                    // row 0, in the padded tail block
  x[(size_t)(c + 3)] = -INFINITY; // row 1
  std::vector<int64_t> t = {1, 2};
  gcc_shape ls = Shape({1}), xs = Shape({n, c}), ts = Shape({n});
  gcc_diag d{};
  gcc_cpu_ctx ctx{};
  ctx.max_threads = 1;
  ctx.diag = &d;
  ctx.source = "<test>";
  float dl = 1.0f, y = 0.0f;
  std::vector<float> dx((size_t)(n * c), 0.0f);
  gcc_tensor tl{GCC_DT_FLOAT32, ls, 1, &dl}, tx{GCC_DT_FLOAT32, xs, n * c, x.data()},
      tt{GCC_DT_INT64, ts, n, t.data()}, ty{GCC_DT_FLOAT32, ls, 1, &y},
      tdx{GCC_DT_FLOAT32, xs, n * c, dx.data()};
  gcc_tensor *fin[2] = {&tx, &tt}, *fout[1] = {&ty};
  gcc_kernel_args fa{&fwd, fin, 2, fout, 1, &ctx, nullptr, 0, nullptr};
  ASSERT_EQ(gcc_cpu_sce(&fa), GCC_OK) << d.msg;
  EXPECT_TRUE(std::isnan(y));
  gcc_tensor *bin[3] = {&tl, &tx, &tt}, *bout[1] = {&tdx};
  gcc_kernel_args ba{&bwd, bin, 3, bout, 1, &ctx, nullptr, 0, nullptr};
  ASSERT_EQ(gcc_cpu_sce_grad(&ba), GCC_OK) << d.msg;
  for (int64_t k = 0; k < c; k++)
    EXPECT_TRUE(std::isnan(dx[(size_t)k])) << k;
  // row 1: 19 zeros and a -Inf: p = 1/19 except p_3 = 0 (exactly: e^-Inf is 0)
  EXPECT_EQ(dx[(size_t)(c + 3)], 0.0f);
  EXPECT_NEAR(dx[(size_t)(c + 2)], 1.0 / 19 - 1.0, 4e-7);
  EXPECT_NEAR(dx[(size_t)(c + 5)], 1.0 / 19, 4e-8);
}

TEST(CpuParallel, SoftmaxCrossEntropyNaNAndMinusInf) {
  for (int narrow : {0, 1}) {
    SCOPED_TRACE(narrow ? "the 8-float forms" : "the machine's forms");
    NarrowGuard narrow_guard;
    gcc_cpu_set_narrow_vectors(narrow);
    SoftmaxCrossEntropyNaNAndMinusInfOnce();
  }
}

// GradNorm (clip_grad_norm_'s total norm and coefficient) over gradients of
// odd sizes (below, at and over the kernel's 8192-element blocks), plain
// and fp16-scaled (g * inv in float32 first), and over 1100 tiny gradients
// (more than its 1024 blocks: the one-thread path), against float64: each
// (g * inv) is the same float32 here, its square exact in float64, the
// sum's rounding at most N 2^-53 relatively (N <= 4e5: < 5e-11), so the
// float32 norm is the correctly rounded one or its neighbour: within 1 ulp
// (2^-23 relatively). The coefficient: (1 / (norm + 1e-6)) * max_norm in
// float32 from that norm: within 4 ulp. 1, 2 and 3 threads bitwise equal.
TEST(CpuParallel, GradNormAgainstFloat64AnyThreads) {
  std::vector<std::vector<int64_t>> sets = {
      {1, 7, 84, 8191, 8192, 8193, 100003, 300000}, {5}, std::vector<int64_t>(1100, 3)};
  unsigned seed = 500;
  for (const auto &sizes : sets)
    for (int scaled : {0, 1}) {
      SCOPED_TRACE(std::to_string(sizes.size()) + " gradients, scaled " + std::to_string(scaled));
      std::vector<std::vector<float>> in;
      std::vector<gcc_shape> shapes;
      if (scaled) {
        in.push_back({1024.0f});
        shapes.push_back(Shape({1}));
      }
      for (int64_t n : sizes) {
        in.push_back(Data((size_t)n, seed++, -0.02f, 0.02f));
        shapes.push_back(Shape({n}));
      }
      const float inv = scaled ? (float)(1.0 / 1024.0) : 1.0f;
      double ss = 0;
      for (size_t k = (size_t)scaled; k < in.size(); k++)
        for (float g : in[k]) {
          const double v = (double)(g * inv);
          ss += v * v;
        }
      const double norm = std::sqrt(ss);
      gcc_attr av[2]{};
      av[GRAD_NORM_MAX_NORM].type = GCC_ATTR_FLOAT;
      av[GRAD_NORM_MAX_NORM].f = 0.5f;
      av[GRAD_NORM_SCALED].i = scaled;
      gcc_node nd = Node(GCC_OP_GRAD_NORM, av, 2);
      gcc_shape os = Shape({2});
      std::vector<float> out = RunThreads(gcc_cpu_grad_norm, &nd, shapes, in, os);
      EXPECT_NEAR(out[0], norm, std::ldexp(norm, -23));
      const double coef = std::min(1.0, 0.5 / (norm + 1e-6));
      EXPECT_NEAR(out[1], coef, 4 * std::ldexp(coef, -24));
    }
}

TEST(CpuParallel, ReduceSumToColumnsAnyThreads) {
  const int64_t rows = 700, cols = 100; // 100 columns: parts of 16 and a short last one
  for (float scale : {1.0f, 0.5f}) {
    gcc_attr av[2]{};
    av[REDUCE_SUM_TO_SCALE].f = scale;
    gcc_node nd = Node(GCC_OP_REDUCE_SUM_TO, av, 2);
    gcc_shape xs = Shape({rows, cols}), ys = Shape({cols});
    std::vector<float> x = Data((size_t)(rows * cols), 15, -1, 1);
    std::vector<float> y = RunThreads(gcc_cpu_reduce_sum_to, &nd, {xs}, {x}, ys);
    for (int64_t c = 0; c < cols; c++) {
      float ref = 0.0f;
      for (int64_t r = 0; r < rows; r++)
        ref += x[(size_t)(r * cols + c)];
      if (scale != 1.0f)
        ref *= scale;
      ASSERT_EQ(y[(size_t)c], ref) << "column " << c;
    }
  }
  // to a trailing (T, C) block, with and without a leading one (a position
  // table's gradient): column sums over the B leading rows, in order
  gcc_attr av[2]{};
  av[REDUCE_SUM_TO_SCALE].f = 1.0f;
  gcc_node nd = Node(GCC_OP_REDUCE_SUM_TO, av, 2);
  gcc_shape xs = Shape({40, 30, 70});
  std::vector<float> x = Data(84000, 16, -1, 1);
  for (const gcc_shape &ys : {Shape({30, 70}), Shape({1, 30, 70})}) {
    std::vector<float> y = RunThreads(gcc_cpu_reduce_sum_to, &nd, {xs}, {x}, ys);
    for (int64_t c = 0; c < 2100; c++) {
      float ref = 0.0f;
      for (int64_t r = 0; r < 40; r++)
        ref += x[(size_t)(r * 2100 + c)];
      ASSERT_EQ(y[(size_t)c], ref) << "element " << c;
    }
  }
  // to (30, 1): not a trailing block; the general walk sums in input order
  std::vector<float> y = RunThreads(gcc_cpu_reduce_sum_to, &nd, {xs}, {x}, Shape({30, 1}));
  for (int64_t t = 0; t < 30; t++) {
    float ref = 0.0f;
    for (int64_t b = 0; b < 40; b++)
      for (int64_t c = 0; c < 70; c++)
        ref += x[(size_t)((b * 30 + t) * 70 + c)];
    ASSERT_EQ(y[(size_t)t], ref) << "row " << t;
  }
}

TEST(CpuParallel, ThreadsForAWorkSizeAndTheSerialSwitch) {
  gcc_cpu_ctx ctx{};
  ctx.max_threads = 2;
  gcc_kernel_args a{};
  a.ctx = &ctx;
  unsetenv("GCC_CPU_POINTWISE_PARALLEL");
  EXPECT_EQ(gcc_cpu_pointwise_threads(&a, GCC_CPU_PARALLEL_MIN_WORK - 1), 1);
  EXPECT_EQ(gcc_cpu_pointwise_threads(&a, GCC_CPU_PARALLEL_MIN_WORK), 2);
  setenv("GCC_CPU_POINTWISE_PARALLEL", "0", 1);
  EXPECT_EQ(gcc_cpu_pointwise_threads(&a, 1 << 20), 1);
  setenv("GCC_CPU_POINTWISE_PARALLEL", "1", 1);
  EXPECT_EQ(gcc_cpu_pointwise_threads(&a, 1 << 20), 2);
  unsetenv("GCC_CPU_POINTWISE_PARALLEL");
  a.ctx = nullptr;
  EXPECT_EQ(gcc_cpu_pointwise_threads(&a, 1 << 20), 1);
  // the cut: parts <= threads, <= the aligned units; every element once
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{100003}}) {
    for (int threads : {1, 2, 3, 200}) {
      std::vector<int> seen((size_t)n, 0);
      struct Ctx {
        std::vector<int> *seen;
        int64_t align;
      } c{&seen, 16};
      int parts = gcc_cpu_parallel_for(
          threads, n, 16,
          [](void *u, int, int64_t b, int64_t e) {
            Ctx *k = static_cast<Ctx *>(u);
            EXPECT_EQ(b % k->align, 0);
            for (int64_t i = b; i < e; i++)
              (*k->seen)[(size_t)i]++;
          },
          &c);
      EXPECT_LE(parts, threads < GCC_CPU_PARALLEL_MAX_PARTS ? threads : GCC_CPU_PARALLEL_MAX_PARTS);
      EXPECT_LE(parts, (n + 15) / 16);
      for (int64_t i = 0; i < n; i++)
        ASSERT_EQ(seen[(size_t)i], 1) << "n " << n << ", " << threads << " threads, element " << i;
    }
  }
}

} // namespace
