// logic_test: the bool dtype, the comparisons (Equal, Less, Greater,
// LessOrEqual, GreaterOrEqual), the logical ops (Not, And, Or, Xor), Where
// and Cast to and from bool (issue 30), imported from ONNX models built
// with tests/onnx_builder.h and run on the CPU plan and through the CUDA
// plan on the host backend (generated kernels host-emulated, bool values
// read and written as unsigned char), against float64 / integer references
// computed here; and the masked-fill attention pattern
// (scores.masked_fill(mask == 0, -inf): Equal -> Where -> Softmax) of
// nn.TransformerEncoder exports, with its ONNX export round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

extern "C" {
#include "graph/ops.h"
#include "onnx/export.h"
#include "onnx/import.h"
}
#include "tests/onnx_builder.h"
#include "tests/run_plans.h"

namespace {

using gcc_test::OnnxModel;
using gcc_test::PlanOutput;
using Dims = std::vector<int64_t>;

constexpr int kF32 = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
constexpr int kI64 = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
constexpr int kI32 = ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
constexpr int kBool = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;

int64_t Numel(const Dims &d) {
  int64_t n = 1;
  for (int64_t x : d)
    n *= x;
  return n;
}

// Index into an operand of dims `in` broadcast (numpy) to `out`, at linear index o.
int64_t BIndex(const Dims &in, const Dims &out, int64_t o) {
  int64_t off = 0, st = 1;
  for (int j = static_cast<int>(out.size()) - 1; j >= 0; j--) {
    int64_t c = o % out[j];
    o /= out[j];
    int ji = j - static_cast<int>(out.size() - in.size());
    int64_t d = ji >= 0 ? in[ji] : 1;
    if (d != 1)
      off += c * st;
    st *= d;
  }
  return off;
}

// One graph input: its ONNX elem type, dims and elements (as double; the
// bytes bound are made from them in the elem type).
struct In {
  std::string name;
  int elem;
  Dims dims;
  std::vector<double> v;
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> b;
    for (double x : v) {
      uint8_t buf[8];
      size_t n = 0;
      if (elem == kF32) {
        float f = static_cast<float>(x);
        memcpy(buf, &f, n = 4);
      } else if (elem == kI64) {
        int64_t i = static_cast<int64_t>(x);
        memcpy(buf, &i, n = 8);
      } else if (elem == kI32) {
        int32_t i = static_cast<int32_t>(x);
        memcpy(buf, &i, n = 4);
      } else {
        buf[0] = x != 0;
        n = 1;
      }
      b.insert(b.end(), buf, buf + n);
    }
    return b;
  }
};

gcc_graph *Import(OnnxModel &m, const std::string &what) {
  std::vector<uint8_t> bytes = m.Bytes();
  gcc_graph *g = nullptr;
  gcc_diag d{};
  gcc_onnx_options o{};
  EXPECT_EQ(gcc_onnx_import(bytes.data(), bytes.size(), what.c_str(), &o, &g, nullptr, &d), GCC_OK)
      << what << ": " << d.msg;
  return g;
}

// Runs `g` on the CPU and the host-emulated CUDA plan with `ins`; checks
// every output k (dtype `want_dt`, dims `want_dims`) element by element
// with `check(k, i, got)`.
void RunBothK(const gcc_graph *g, const std::vector<In> &ins, gcc_dtype want_dt,
              const Dims &want_dims, const std::function<void(int, int64_t, double)> &check,
              const std::string &what) {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<const void *> ptrs;
  for (const In &in : ins)
    bytes.push_back(in.Bytes());
  for (const auto &b : bytes)
    ptrs.push_back(b.data());
  for (bool cuda : {false, true}) {
    SCOPED_TRACE(what + (cuda ? " (CUDA plan, host-emulated)" : " (CPU)"));
    std::vector<PlanOutput> outs;
    std::string err = gcc_test::RunPlan(g, ptrs, ins[0].dims[0], cuda, &outs);
    ASSERT_EQ(err, "");
    for (size_t k = 0; k < outs.size(); k++) {
      SCOPED_TRACE("output " + std::to_string(k));
      ASSERT_EQ(outs[k].dtype, want_dt) << gcc_dtype_name(outs[k].dtype);
      ASSERT_EQ(outs[k].shape.ndim, static_cast<int>(want_dims.size()));
      for (size_t j = 0; j < want_dims.size(); j++)
        ASSERT_EQ(outs[k].shape.dims[j], want_dims[j]);
      int64_t n = Numel(want_dims);
      for (int64_t i = 0; i < n; i++)
        check(static_cast<int>(k), i,
              want_dt == GCC_DT_FLOAT32 ? static_cast<double>(outs[k].f32[i])
                                        : static_cast<double>(outs[k].i64[i]));
    }
  }
}

void RunBoth(const gcc_graph *g, const std::vector<In> &ins, gcc_dtype want_dt,
             const Dims &want_dims, const std::function<void(int64_t, double)> &check,
             const std::string &what) {
  RunBothK(
      g, ins, want_dt, want_dims, [&](int, int64_t i, double got) { check(i, got); }, what);
}

// Values on a grid of halves with repeats, so that ties (==, <=, >=) occur.
std::vector<double> Grid(int64_t n, uint32_t seed) {
  std::vector<double> v(static_cast<size_t>(n));
  for (auto &x : v) {
    seed = seed * 1103515245u + 12345u;
    x = static_cast<double>(static_cast<int>((seed >> 16) % 7) - 3) * 0.5;
  }
  return v;
}

// Each comparison over float32, int64 and int32 operands of broadcast
// shapes [N, 3, 4] and [4] (and [3, 1] vs [N, 1, 4]): exact results.
TEST(LogicForward, ComparisonsBroadcastOverEveryDtype) {
  struct Op {
    const char *name;
    std::function<bool(double, double)> f;
    bool takes_bool;
  };
  const std::vector<Op> ops = {
      {"Equal", [](double a, double b) { return a == b; }, true},
      {"Less", [](double a, double b) { return a < b; }, false},
      {"Greater", [](double a, double b) { return a > b; }, false},
      {"LessOrEqual", [](double a, double b) { return a <= b; }, false},
      {"GreaterOrEqual", [](double a, double b) { return a >= b; }, false},
  };
  const std::vector<std::pair<Dims, Dims>> shapes = {{{2, 3, 4}, {4}}, {{3, 1}, {2, 1, 4}}};
  // one model per dtype and shape pair, every comparison one output of it
  for (int elem : {kF32, kI64, kI32, kBool})
    for (const auto &sh : shapes) {
      std::string what = std::string("comparisons of ") + gcc_onnx_dtype_name(elem);
      SCOPED_TRACE(what);
      OnnxModel m(16);
      m.Input("a", sh.first, elem);
      m.Input("b", sh.second, elem);
      std::vector<const Op *> used;
      for (const Op &op : ops)
        if (elem != kBool || op.takes_bool) {
          std::string out = std::string("c_") + op.name;
          m.Node(op.name, {"a", "b"}, {out});
          m.Output(out);
          used.push_back(&op);
        }
      gcc_graph *g = Import(m, what);
      ASSERT_NE(g, nullptr);
      const Dims out = {2, 3, 4}; // both pairs broadcast to it
      std::vector<double> av = Grid(Numel(sh.first), 7), bv = Grid(Numel(sh.second), 11);
      if (elem == kI64 || elem == kI32)
        for (auto *v : {&av, &bv})
          for (double &x : *v)
            x = std::floor(x * 2); // integers with repeats
      if (elem == kBool)
        for (auto *v : {&av, &bv})
          for (double &x : *v)
            x = x > 0;
      if (elem == kI64) // beyond float's 2^24: exact int64 comparison (kept on the host)
        av[0] = 16777217.0, bv[0] = 16777216.0;
      std::vector<In> ins = {{"a", elem, sh.first, av}, {"b", elem, sh.second, bv}};
      RunBothK(
          g, ins, GCC_DT_BOOL, out,
          [&](int k, int64_t i, double got) {
            double a = av[BIndex(sh.first, out, i)], b = bv[BIndex(sh.second, out, i)];
            ASSERT_EQ(got, used[k]->f(a, b) ? 1.0 : 0.0)
                << used[k]->name << " element " << i << ": " << a << ", " << b;
          },
          what);
      gcc_graph_free(g);
    }
}

// NaN compares false everywhere, Equal included (IEEE; numpy, torch).
TEST(LogicForward, NaNComparesFalse) {
  for (const char *op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    OnnxModel m(16);
    m.Input("a", {2, 2});
    m.Input("b", {2, 2});
    m.Node(op, {"a", "b"}, {"c"});
    m.Output("c");
    gcc_graph *g = Import(m, op);
    ASSERT_NE(g, nullptr);
    double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<In> ins = {{"a", kF32, {2, 2}, {nan, 1, nan, 0}},
                           {"b", kF32, {2, 2}, {nan, nan, 1, 0}}};
    bool eq_or_le = std::string(op) != "Less" && std::string(op) != "Greater";
    RunBoth(
        g, ins, GCC_DT_BOOL, {2, 2},
        [&](int64_t i, double got) { ASSERT_EQ(got, i == 3 && eq_or_le ? 1.0 : 0.0) << i; }, op);
    gcc_graph_free(g);
  }
}

// Not, And, Or, Xor on bool with broadcasting, chained (Not(And(a, b)) Or c)
// so that the CUDA plan fuses bool ops into one kernel.
TEST(LogicForward, NotAndOrXorBroadcast) {
  for (const char *op : {"And", "Or", "Xor"}) {
    SCOPED_TRACE(op);
    OnnxModel m(16);
    m.Input("a", {2, 3, 4}, kBool);
    m.Input("b", {3, 1}, kBool);
    m.Input("c", {4}, kBool);
    m.Node(op, {"a", "b"}, {"t"});
    m.Node("Not", {"t"}, {"u"});
    m.Node("Or", {"u", "c"}, {"y"});
    m.Output("y");
    gcc_graph *g = Import(m, op);
    ASSERT_NE(g, nullptr);
    std::vector<double> av = Grid(24, 3), bv = Grid(3, 5), cv = Grid(4, 9);
    for (auto *v : {&av, &bv, &cv})
      for (double &x : *v)
        x = x > 0;
    cv = {0, 0, 1, 0};
    Dims out = {2, 3, 4};
    RunBoth(
        g, {{"a", kBool, {2, 3, 4}, av}, {"b", kBool, {3, 1}, bv}, {"c", kBool, {4}, cv}},
        GCC_DT_BOOL, out,
        [&](int64_t i, double got) {
          bool a = av[i] != 0, b = bv[BIndex({3, 1}, out, i)] != 0,
               c = cv[BIndex({4}, out, i)] != 0;
          bool t = std::string(op) == "And" ? a && b : std::string(op) == "Or" ? a || b : a != b;
          ASSERT_EQ(got, (!t || c) ? 1.0 : 0.0) << i;
        },
        op);
    gcc_graph_free(g);
  }
}

// Where with the three operands broadcast together, for float32, int64 and
// bool values.
TEST(LogicForward, WhereBroadcastsItsThreeOperands) {
  for (int elem : {kF32, kI64, kBool}) {
    std::string what = std::string("Where ") + gcc_onnx_dtype_name(elem);
    SCOPED_TRACE(what);
    OnnxModel m(16);
    m.Input("cond", {2, 1, 4}, kBool);
    m.Input("x", {3, 4}, elem);
    m.Input("y", {2, 3, 1}, elem);
    m.Node("Where", {"cond", "x", "y"}, {"z"});
    m.Output("z");
    gcc_graph *g = Import(m, what);
    ASSERT_NE(g, nullptr);
    std::vector<double> cv = {1, 0, 0, 1, 0, 1, 1, 0}, xv = Grid(12, 13), yv = Grid(6, 17);
    if (elem == kI64)
      xv[0] = 9007199254740993.0; // 2^53 + 1 is not a double: the int64 is moved, not converted
    if (elem == kBool)
      for (auto *v : {&xv, &yv})
        for (double &x : *v)
          x = x > 0;
    Dims out = {2, 3, 4};
    std::vector<In> ins = {
        {"cond", kBool, {2, 1, 4}, cv}, {"x", elem, {3, 4}, xv}, {"y", elem, {2, 3, 1}, yv}};
    gcc_dtype dt = gcc_onnx_dtype(elem);
    RunBoth(
        g, ins, dt == GCC_DT_INT64 || dt == GCC_DT_BOOL ? dt : GCC_DT_FLOAT32, out,
        [&](int64_t i, double got) {
          bool c = cv[BIndex({2, 1, 4}, out, i)] != 0;
          double want = c ? xv[BIndex({3, 4}, out, i)] : yv[BIndex({2, 3, 1}, out, i)];
          if (elem == kF32)
            want = static_cast<float>(want);
          if (elem == kI64)
            want = static_cast<double>(static_cast<int64_t>(want));
          ASSERT_EQ(got, want) << i;
        },
        what);
    gcc_graph_free(g);
  }
}

// Cast at run time between float32, int64, int32 and bool (ONNX Cast:
// nonzero -- NaN and -0.0's opposite, 0.5 -- is true; bool is 0 or 1; a
// float truncates toward zero).
TEST(LogicForward, CastToAndFromBool) {
  struct Case {
    int from, to;
    std::vector<double> in, want;
  };
  double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Case> cases = {
      {kF32, kBool, {0.0, -0.0, 0.5, -2.0, nan, 1e-30}, {0, 0, 1, 1, 1, 1}},
      {kBool, kF32, {1, 0, 1, 1, 0, 0}, {1, 0, 1, 1, 0, 0}},
      {kI64, kBool, {0, 5, -1, 0, 1, 1099511627776.0}, {0, 1, 1, 0, 1, 1}},
      {kBool, kI64, {1, 0, 0, 1, 1, 0}, {1, 0, 0, 1, 1, 0}},
      {kBool, kI32, {0, 1, 1, 0, 0, 1}, {0, 1, 1, 0, 0, 1}},
      {kF32, kI32, {1.75, -1.75, 0.0, 3.0, -0.5, 100.25}, {1, -1, 0, 3, 0, 100}},
      {kI64, kF32, {3, -7, 0, 1, 2, 16}, {3, -7, 0, 1, 2, 16}},
  };
  for (const Case &c : cases) {
    std::string what =
        std::string("Cast ") + gcc_onnx_dtype_name(c.from) + " -> " + gcc_onnx_dtype_name(c.to);
    SCOPED_TRACE(what);
    OnnxModel m(19);
    m.Input("x", {2, 3}, c.from);
    m.Node("Cast", {"x"}, {"y"}, {m.Int("to", c.to)});
    m.Output("y");
    gcc_graph *g = Import(m, what);
    ASSERT_NE(g, nullptr);
    gcc_dtype to = gcc_onnx_dtype(c.to);
    RunBoth(
        g, {{"x", c.from, {2, 3}, c.in}}, to, {2, 3},
        [&](int64_t i, double got) { ASSERT_EQ(got, c.want[i]) << i; }, what);
    gcc_graph_free(g);
  }
}

// Constant inputs fold at import (a mask made from initializers): no node.
TEST(LogicImport, ConstantMasksFold) {
  OnnxModel m(16);
  m.Input("x", {2, 3});
  m.Init("lim", {3}, {0.5f, 1.5f, -1.0f});
  m.Init("one", {}, {1.0f});
  m.Node("Less", {"lim", "one"}, {"mask"});
  m.Node("Not", {"mask"}, {"nmask"});
  m.Init("zero", {}, {0.0f});
  m.Node("Where", {"nmask", "x", "zero"}, {"y"});
  m.Output("y");
  gcc_graph *g = Import(m, "fold");
  ASSERT_NE(g, nullptr);
  int where = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    EXPECT_NE(g->nodes[i].op, GCC_OP_LESS) << "the constant comparison is folded";
    where += g->nodes[i].op == GCC_OP_WHERE;
  }
  EXPECT_EQ(where, 1);
  std::vector<double> xv = {1, 2, 3, 4, 5, 6};
  RunBoth(
      g, {{"x", kF32, {2, 3}, xv}}, GCC_DT_FLOAT32, {2, 3},
      [&](int64_t i, double got) { ASSERT_EQ(got, i % 3 == 1 ? xv[i] : 0.0) << i; }, "fold");
  gcc_graph_free(g);
}

// Bad input: a clear error naming the node.
TEST(LogicImport, RefusesMismatchedDtypes) {
  OnnxModel m(16);
  m.Input("a", {2}, kF32);
  m.Input("c", {2}, kF32);
  m.Node("Where", {"c", "a", "a"}, {"y"}, {}, "where_node");
  m.Output("y");
  std::vector<uint8_t> bytes = m.Bytes();
  gcc_graph *g = nullptr;
  gcc_diag d{};
  gcc_onnx_options o{};
  EXPECT_NE(gcc_onnx_import(bytes.data(), bytes.size(), "bad.onnx", &o, &g, nullptr, &d), GCC_OK);
  EXPECT_NE(std::string(d.msg).find("where_node"), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("not bool"), std::string::npos) << d.msg;
  OnnxModel m2(16);
  m2.Input("a", {2}, kBool);
  m2.Input("b", {2}, kBool);
  m2.Node("Less", {"a", "b"}, {"y"}, {}, "less_node");
  m2.Output("y");
  bytes = m2.Bytes();
  EXPECT_NE(gcc_onnx_import(bytes.data(), bytes.size(), "bad.onnx", &o, &g, nullptr, &d), GCC_OK);
  EXPECT_NE(std::string(d.msg).find("less_node"), std::string::npos) << d.msg;
}

// The masked-fill attention of nn.TransformerEncoder / BERT exports:
//   scores = (q @ k^T) * scale; scores = where(mask == 0, -inf, scores);
//   out = softmax(scores) @ v
// with a float key-padding mask [N, 1, T] (every row keeps >= 1 key), on
// the CPU and the host-emulated CUDA plan against float64, and through an
// ONNX export and re-import (the same outputs, Equal and Where written).
// Tolerance: each output is a convex combination of T = 5 values of v
// (|v| <= 1) with weights from exp of D = 4 products; float32 rounding of
// the 4-term dots (~4 * 2^-24 relative), expf (a few ulps) and the T-term
// normalisation keep the error below 1e-6; 1e-5 absolute leaves room for
// summation orders (oneDNN, OpenBLAS, the host-emulated kernels), while a
// mask not applied (a masked key's weight is >= 0.02 here) fails it.
TEST(LogicModel, MaskedFillAttentionMatchesFloat64) {
  const int64_t N = 2, T = 5, D = 4;
  const float scale = 0.5f;
  OnnxModel m(17);
  m.Input("q", {N, T, D});
  m.Input("k", {N, T, D});
  m.Input("v", {N, T, D});
  m.Input("mask", {N, 1, T});
  m.Init("scale", {}, {scale});
  m.Init("zero", {}, {0.0f});
  m.Init("ninf", {}, {-std::numeric_limits<float>::infinity()});
  m.Node("Transpose", {"k"}, {"kt"}, {m.Ints("perm", {0, 2, 1})});
  m.Node("MatMul", {"q", "kt"}, {"s0"});
  m.Node("Mul", {"s0", "scale"}, {"s1"});
  m.Node("Equal", {"mask", "zero"}, {"masked"});
  m.Node("Where", {"masked", "ninf", "s1"}, {"s2"});
  m.Node("Softmax", {"s2"}, {"p"}, {m.Int("axis", -1)});
  m.Node("MatMul", {"p", "v"}, {"out"});
  m.Output("out");
  gcc_graph *g = Import(m, "masked_attention.onnx");
  ASSERT_NE(g, nullptr);
  std::vector<double> qv(N * T * D), kv(N * T * D), vv(N * T * D);
  uint32_t s = 12345;
  auto rnd = [&s] {
    s = s * 1664525u + 1013904223u;
    return static_cast<double>(static_cast<float>((s >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0));
  };
  for (auto *a : {&qv, &kv, &vv})
    for (double &x : *a)
      x = rnd();
  std::vector<double> mv = {1, 1, 0, 1, 0, /* */ 0, 1, 1, 0, 0};
  // float64 reference
  std::vector<double> want(N * T * D, 0.0);
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < T; i++) {
      std::vector<double> sc(T);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < T; j++) {
        double dot = 0;
        for (int64_t c = 0; c < D; c++)
          dot += qv[(n * T + i) * D + c] * kv[(n * T + j) * D + c];
        sc[j] = mv[n * T + j] == 0 ? -INFINITY : dot * scale;
        mx = std::max(mx, sc[j]);
      }
      for (int64_t j = 0; j < T; j++)
        sum += (sc[j] = std::exp(sc[j] - mx));
      for (int64_t j = 0; j < T; j++)
        for (int64_t c = 0; c < D; c++)
          want[(n * T + i) * D + c] += sc[j] / sum * vv[(n * T + j) * D + c];
    }
  std::vector<In> ins = {{"q", kF32, {N, T, D}, qv},
                         {"k", kF32, {N, T, D}, kv},
                         {"v", kF32, {N, T, D}, vv},
                         {"mask", kF32, {N, 1, T}, mv}};
  double worst = 0;
  auto check = [&](int64_t i, double got) {
    worst = std::max(worst, std::fabs(got - want[i]));
    ASSERT_NEAR(got, want[i], 1e-5) << "element " << i;
  };
  RunBoth(g, ins, GCC_DT_FLOAT32, {N, T, D}, check, "masked attention");
  printf("masked-fill attention: max |error| vs float64 %.3g\n", worst);

  // export (Equal and Where as ONNX ops, bool mask value) and re-import
  uint8_t *bytes = nullptr;
  size_t size = 0;
  gcc_diag d{};
  ASSERT_EQ(gcc_onnx_export_memory(g, nullptr, &bytes, &size, &d), GCC_OK) << d.msg;
  std::string text(reinterpret_cast<const char *>(bytes), size);
  EXPECT_NE(text.find("Equal"), std::string::npos);
  EXPECT_NE(text.find("Where"), std::string::npos);
  gcc_graph *g2 = nullptr;
  gcc_onnx_options o{};
  ASSERT_EQ(gcc_onnx_import(bytes, size, "exported.onnx", &o, &g2, nullptr, &d), GCC_OK) << d.msg;
  free(bytes);
  RunBoth(g2, ins, GCC_DT_FLOAT32, {N, T, D}, check, "masked attention, exported and re-imported");
  gcc_graph_free(g2);
  gcc_graph_free(g);
}

} // namespace
