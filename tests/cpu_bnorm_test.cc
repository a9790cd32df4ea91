// cpu_bnorm_test: the CPU kernels of BatchNormalization and BatchNormGrad
// (runtime/cpu/cpu_bnorm.c) against float64 arithmetic written out here
// (nn.BatchNorm2d's formulas, two-pass statistics), and their bitwise
// determinism across thread counts.
//
// Bounds. The kernels sum in float64 in one pass over x - s (s the channel's
// first element) and round each result to float32 once. A float64 sum of m
// terms t_i is off by at most (m + 3) u64 sum |t_i| (Higham, Accuracy and
// Stability, 4.2; u64 = 2^-53; +3 for the 8-lane tree); the variance as
// E[(x-s)^2] - E[x-s]^2 loses at most a factor 1 + 2 (mean - s)^2 / var more
// (the cancellation of the two terms), and every later float64 operation
// adds a few u64 relative. So each output is within
//   u32 |ref| + kSlack (m + 3) u64 (1 + 2 (mean - s)^2 / var) T
// of the reference, where u32 = 2^-24 is the final rounding, T the sum of
// the magnitudes of the terms the output is made of (written next to each
// assertion), and kSlack = 16 covers the handful of float64 operations after
// the sums (each at most u64 relative, far fewer than 16 in series).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/ops.h"
#include "runtime/cpu/cpu_bnorm.h"

namespace {

const double kU32 = 1.0 / 16777216.0;         // 2^-24
const double kU64 = 1.0 / 9007199254740992.0; // 2^-53
const double kSlack = 16;

using KernelFn = gcc_status (*)(const gcc_kernel_args *);

struct Node {
  gcc_graph *g = nullptr;
  int node = -1;
  ~Node() { gcc_graph_free(g); }
};

// A graph with one node of `op` on float32 values of the given shapes.
void MakeNode(Node *n, int op, const std::vector<gcc_shape> &ins, const gcc_shape &out) {
  gcc_diag d{};
  n->g = gcc_graph_new("one", "<test>");
  std::vector<int> iv;
  for (size_t i = 0; i < ins.size(); i++) {
    int v;
    ASSERT_EQ(gcc_graph_add_value(n->g, ("in" + std::to_string(i)).c_str(), GCC_DT_FLOAT32, &ins[i],
                                  GCC_VALUE_INPUT, nullptr, 0, &v, &d),
              GCC_OK)
        << d.msg;
    iv.push_back(v);
  }
  int ov;
  ASSERT_EQ(gcc_graph_add_value(n->g, "out", GCC_DT_FLOAT32, &out, GCC_VALUE_ACTIVATION, nullptr, 0,
                                &ov, &d),
            GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_graph_add_node(n->g, "n", op, iv.data(), (int)iv.size(), &ov, 1, &n->node, &d),
            GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_graph_link(n->g, &d), GCC_OK) << d.msg;
}

gcc_shape Shape(std::vector<int64_t> dims) {
  gcc_shape s{};
  s.ndim = (int)dims.size();
  for (size_t i = 0; i < dims.size(); i++)
    s.dims[i] = dims[i];
  return s;
}

// Runs the node's CPU kernel on `in` with `threads`; returns its output.
std::vector<float> RunKernel(Node *n, const std::vector<gcc_shape> &shapes,
                             std::vector<std::vector<float>> in, const gcc_shape &out_shape,
                             int threads, KernelFn fn) {
  gcc_diag d{};
  gcc_cpu_ctx ctx{};
  ctx.max_threads = threads;
  ctx.diag = &d;
  ctx.source = "<test>";
  std::vector<gcc_tensor> t(in.size() + 1);
  std::vector<gcc_tensor *> pin;
  for (size_t i = 0; i < in.size(); i++) {
    t[i] = gcc_tensor{GCC_DT_FLOAT32, shapes[i], (int64_t)in[i].size(), in[i].data()};
    pin.push_back(&t[i]);
  }
  int64_t numel = 1;
  for (int i = 0; i < out_shape.ndim; i++)
    numel *= out_shape.dims[i];
  std::vector<float> y((size_t)numel, NAN);
  t.back() = gcc_tensor{GCC_DT_FLOAT32, out_shape, numel, y.data()};
  gcc_tensor *pout = &t.back();
  gcc_kernel_args a{
      &n->g->nodes[n->node], pin.data(), (int)pin.size(), &pout, 1, &ctx, nullptr, 0, nullptr};
  EXPECT_EQ(fn(&a), GCC_OK) << d.msg;
  if (in.size() == 5) { // the running statistics the training form updated
    std::vector<float> &rm = in[3], &rv = in[4];
    y.insert(y.end(), rm.begin(), rm.end());
    y.insert(y.end(), rv.begin(), rv.end());
  }
  return y;
}

struct Case {
  int64_t n, c, h, w;
  double offset; // added to every x: the data's mean far from 0
};

struct Ref { // float64 two-pass statistics of channel ci
  std::vector<double> mean, var, shift_factor;
};

Ref Stats(const std::vector<float> &x, const Case &k) {
  Ref r;
  int64_t inner = k.h * k.w, m = k.n * inner;
  for (int64_t ci = 0; ci < k.c; ci++) {
    double s = 0, v = 0;
    for (int64_t b = 0; b < k.n; b++)
      for (int64_t q = 0; q < inner; q++)
        s += x[(size_t)((b * k.c + ci) * inner + q)];
    double mu = s / (double)m;
    for (int64_t b = 0; b < k.n; b++)
      for (int64_t q = 0; q < inner; q++) {
        double t = x[(size_t)((b * k.c + ci) * inner + q)] - mu;
        v += t * t;
      }
    r.mean.push_back(mu);
    r.var.push_back(v / (double)m);
    double sh = x[(size_t)(ci * inner)] - mu; // the kernel's shift s = x of (0, ci, 0)
    r.shift_factor.push_back(1 + 2 * sh * sh / (v / (double)m));
  }
  return r;
}

std::vector<float> Data(size_t n, unsigned seed, double offset, double sd) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd(0.0, sd);
  std::vector<float> v(n);
  for (auto &x : v)
    x = (float)(offset + nd(gen));
  return v;
}

void CheckCase(const Case &k) {
  SCOPED_TRACE("case " + std::to_string(k.n) + "x" + std::to_string(k.c) + "x" +
               std::to_string(k.h) + "x" + std::to_string(k.w) + " offset " +
               std::to_string(k.offset));
  const int64_t inner = k.h * k.w, m = k.n * inner, numel = k.n * k.c * inner;
  // the node's attributes are float32: the reference takes the same values
  const double eps = (double)1e-5f, mom = (double)0.9f;
  gcc_shape xs = Shape({k.n, k.c, k.h, k.w}), cs = Shape({k.c});
  std::vector<float> x = Data((size_t)numel, 1, k.offset, 1.5), dy = Data((size_t)numel, 2, 0, 1);
  std::vector<float> scale = Data((size_t)k.c, 3, 1.0, 0.3), bias = Data((size_t)k.c, 4, 0, 0.5);
  std::vector<float> rmean = Data((size_t)k.c, 5, 0, 0.1), rvar = Data((size_t)k.c, 6, 1.0, 0.1);
  Ref r = Stats(x, k);
  const double cm = kSlack * (double)(m + 3) * kU64; // the float64 sums' factor

  // forward, training form: Y and the running statistics
  Node f;
  MakeNode(&f, GCC_OP_BATCH_NORM, {xs, cs, cs, cs, cs}, xs);
  gcc_diag d{};
  ASSERT_EQ(gcc_node_set_int(f.g, f.node, "training", 1), GCC_OK);
  ASSERT_EQ(gcc_node_set_float(f.g, f.node, "epsilon", (float)eps), GCC_OK);
  ASSERT_EQ(gcc_node_set_float(f.g, f.node, "momentum", (float)mom), GCC_OK);
  ASSERT_EQ(gcc_op_resolve_attrs(f.g, f.node, &d), GCC_OK) << d.msg;
  std::vector<gcc_shape> fs = {xs, cs, cs, cs, cs};
  std::vector<std::vector<float>> fin = {x, scale, bias, rmean, rvar};
  std::vector<float> y1 = RunKernel(&f, fs, fin, xs, 1, gcc_cpu_batch_norm);
  for (int t : {2, 3})
    EXPECT_EQ(0, memcmp(y1.data(), RunKernel(&f, fs, fin, xs, t, gcc_cpu_batch_norm).data(),
                        y1.size() * sizeof(float)))
        << "training forward with " << t << " threads differs from 1 thread";
  size_t bad = 0;
  for (int64_t ci = 0; ci < k.c; ci++) {
    double rstd = 1 / std::sqrt(r.var[ci] + eps), sc = scale[ci];
    for (int64_t b = 0; b < k.n; b++)
      for (int64_t q = 0; q < inner; q++) {
        size_t at = (size_t)((b * k.c + ci) * inner + q);
        double ref = (x[at] - r.mean[ci]) * rstd * sc + bias[ci];
        // T: |x k| + |b - mean k|, the two terms of y = x k + (b - mean k)
        double T = std::fabs(x[at] * rstd * sc) + std::fabs(bias[ci] - r.mean[ci] * rstd * sc) +
                   std::fabs(r.mean[ci] * rstd * sc);
        double tol = kU32 * std::fabs(ref) + cm * r.shift_factor[ci] * T;
        bad += !(std::fabs(y1[at] - ref) <= tol);
      }
    // running statistics: one float32 rounding of a float64 value
    double rm = mom * rmean[ci] + (1 - mom) * r.mean[ci];
    double rv = mom * rvar[ci] + (1 - mom) * r.var[ci] * (double)m / (double)(m - 1);
    double gm = y1[(size_t)(numel + ci)], gv = y1[(size_t)(numel + k.c + ci)];
    bad += !(std::fabs(gm - rm) <=
             kU32 * std::fabs(rm) + cm * r.shift_factor[ci] * (std::fabs(r.mean[ci]) + 1));
    bad += !(std::fabs(gv - rv) <= kU32 * std::fabs(rv) + cm * r.shift_factor[ci] * rv);
  }
  EXPECT_EQ(bad, 0u) << "training forward outside the derived bound";

  // BatchNormGrad's three outputs
  for (int which = 0; which < 3; which++) {
    SCOPED_TRACE("BatchNormGrad output " + std::to_string(which));
    Node g;
    gcc_shape os = which == 0 ? xs : cs;
    MakeNode(&g, GCC_OP_BATCH_NORM_GRAD, {xs, xs, cs}, os);
    ASSERT_EQ(gcc_node_set_float(g.g, g.node, "epsilon", (float)eps), GCC_OK);
    ASSERT_EQ(gcc_node_set_int(g.g, g.node, "output", which), GCC_OK);
    ASSERT_EQ(gcc_op_resolve_attrs(g.g, g.node, &d), GCC_OK) << d.msg;
    std::vector<gcc_shape> gs = {xs, xs, cs};
    std::vector<std::vector<float>> gin = {dy, x, scale};
    std::vector<float> o1 = RunKernel(&g, gs, gin, os, 1, gcc_cpu_batch_norm_grad);
    for (int t : {2, 3})
      EXPECT_EQ(0, memcmp(o1.data(), RunKernel(&g, gs, gin, os, t, gcc_cpu_batch_norm_grad).data(),
                          o1.size() * sizeof(float)))
          << t << " threads differ from 1 thread";
    bad = 0;
    for (int64_t ci = 0; ci < k.c; ci++) {
      double rstd = 1 / std::sqrt(r.var[ci] + eps), sdy = 0, sdyx = 0, adyx = 0, ady = 0;
      for (int64_t b = 0; b < k.n; b++)
        for (int64_t q = 0; q < inner; q++) {
          size_t at = (size_t)((b * k.c + ci) * inner + q);
          double xh = (x[at] - r.mean[ci]) * rstd;
          sdy += dy[at];
          ady += std::fabs(dy[at]);
          sdyx += dy[at] * xh;
          // the kernel's terms: dy (x - s) and (mean - s) dy, times rstd
          adyx += std::fabs(dy[at]) *
                  (std::fabs(x[at] - x[(size_t)(ci * inner)]) +
                   std::fabs(r.mean[ci] - x[(size_t)(ci * inner)])) *
                  rstd;
        }
      // sum dy xhat also carries rstd's error: half the variance's relative error
      double e_sdyx = cm * r.shift_factor[ci] * (adyx + std::fabs(sdyx)), e_sdy = cm * ady;
      if (which == 2) {
        bad += !(std::fabs(o1[(size_t)ci] - sdy) <= kU32 * std::fabs(sdy) + e_sdy);
        continue;
      }
      if (which == 1) {
        bad += !(std::fabs(o1[(size_t)ci] - sdyx) <= kU32 * std::fabs(sdyx) + e_sdyx);
        continue;
      }
      double kk = scale[ci] * rstd / (double)m;
      for (int64_t b = 0; b < k.n; b++)
        for (int64_t q = 0; q < inner; q++) {
          size_t at = (size_t)((b * k.c + ci) * inner + q);
          double xh = (x[at] - r.mean[ci]) * rstd;
          double ref = kk * ((double)m * dy[at] - sdy - xh * sdyx);
          // T: the magnitudes of m dy, sum dy and xhat sum dy xhat, with the
          // sums' own errors carried through |k|
          double T = std::fabs(kk) *
                     ((double)m * std::fabs(dy[at]) + std::fabs(sdy) + std::fabs(xh * sdyx));
          double tol = kU32 * std::fabs(ref) + cm * r.shift_factor[ci] * T +
                       std::fabs(kk) * (e_sdy + std::fabs(xh) * e_sdyx);
          bad += !(std::fabs(o1[at] - ref) <= tol);
        }
    }
    EXPECT_EQ(bad, 0u) << "outside the derived bound";
  }
}

TEST(CpuBatchNorm, TrainingForwardAndGradientsWithinTheFloat64BoundAndThreadIndependent) {
  CheckCase({4, 6, 9, 7, 0.0});   // planes not a multiple of 8 (the lanes' tails)
  CheckCase({3, 5, 1, 1, 0.0});   // [N, C] as BatchNorm1d: one element per plane
  CheckCase({2, 4, 16, 16, 0.0}); // whole lanes
}

TEST(CpuBatchNorm, DataFarFromZeroKeepsItsVariance) {
  // mean 1000 standard deviations from 0: the shifted one-pass sums lose
  // nothing a two-pass float64 reference keeps
  CheckCase({4, 3, 10, 10, 1500.0});
}

TEST(CpuBatchNorm, EvaluationFormUsesTheRunningStatistics) {
  const Case k{2, 3, 5, 5, 0.0};
  const int64_t inner = k.h * k.w, numel = k.n * k.c * inner;
  gcc_shape xs = Shape({k.n, k.c, k.h, k.w}), cs = Shape({k.c});
  std::vector<float> x = Data((size_t)numel, 1, 0, 1), scale = Data(3, 3, 1, 0.3),
                     bias = Data(3, 4, 0, 0.5), rmean = Data(3, 5, 0, 0.1),
                     rvar = Data(3, 6, 1, 0.1);
  for (auto &v : rvar)
    v = std::fabs(v);
  Node f;
  MakeNode(&f, GCC_OP_BATCH_NORM, {xs, cs, cs, cs, cs}, xs);
  gcc_diag d{};
  ASSERT_EQ(gcc_node_set_int(f.g, f.node, "training", 0), GCC_OK);
  ASSERT_EQ(gcc_op_resolve_attrs(f.g, f.node, &d), GCC_OK) << d.msg;
  float eps = f.g->nodes[f.node].av[BN_EPSILON].f;
  std::vector<float> y =
      RunKernel(&f, {xs, cs, cs, cs, cs}, {x, scale, bias, rmean, rvar}, xs, 2, gcc_cpu_batch_norm);
  for (int64_t ci = 0; ci < k.c; ci++) {
    EXPECT_EQ(y[(size_t)(numel + ci)], rmean[ci]) << "the running mean moved";
    EXPECT_EQ(y[(size_t)(numel + k.c + ci)], rvar[ci]) << "the running var moved";
    double kk = scale[ci] / std::sqrt((double)rvar[ci] + eps);
    for (int64_t b = 0; b < k.n; b++)
      for (int64_t q = 0; q < inner; q++) {
        size_t at = (size_t)((b * k.c + ci) * inner + q);
        double ref = ((double)x[at] - rmean[ci]) * kk + bias[ci];
        // a few float64 operations, then one float32 rounding
        double tol = kU32 * std::fabs(ref) +
                     kSlack * kU64 * (std::fabs(x[at] * kk) + std::fabs(rmean[ci] * kk) + 1);
        EXPECT_LE(std::fabs(y[at] - ref), tol) << at;
      }
  }
}

} // namespace
