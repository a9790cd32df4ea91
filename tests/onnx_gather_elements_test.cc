// onnx_gather_elements_test: GatherElements (ONNX GatherElements-13,
// torch.gather) and ReduceMin (ONNX ReduceMin-13 / -18, torch.amin) imported
// from ONNX models built with tests/onnx_builder.h, forward and gradient
// (the GatherElementsGrad / ReduceMinGrad kernels, built directly) against
// PyTorch (tests/fixtures/make_gather_elements_fixture.py), on the CPU plan
// and the CUDA plan on the host backend (generated kernels host-emulated);
// and bool tensors (the attention masks of the PyTorch exporters) through
// the data-movement ops Identity, Reshape, Squeeze, Unsqueeze, Concat,
// Transpose, Slice, Expand, Gather and GatherElements, against references
// computed here (issue 30).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

extern "C" {
#include "graph/builder.h"
#include "graph/ops.h"
#include "onnx/export.h"
#include "onnx/import.h"
}
#include "tests/fixture.h"
#include "tests/onnx_builder.h"
#include "tests/run_plans.h"

namespace {

using gcc_test::Fixture;
using gcc_test::FixtureArray;
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

::testing::AssertionResult LoadFixture(Fixture *fx) {
  std::string looked, err;
  std::string path = gcc_test::FindRunfile("tests/fixtures/gather_elements.fix", &looked);
  if (path.empty())
    return ::testing::AssertionFailure() << "gather_elements.fix not found; looked in: " << looked;
  if (!Fixture::Load(path, fx, &err))
    return ::testing::AssertionFailure() << err;
  return ::testing::AssertionSuccess();
}

gcc_graph *Import(OnnxModel &m, const std::string &what) {
  std::vector<uint8_t> bytes = m.Bytes();
  gcc_graph *g = nullptr;
  gcc_diag d{};
  gcc_onnx_options o{};
  EXPECT_EQ(gcc_onnx_import(bytes.data(), bytes.size(), what.c_str(), &o, &g, nullptr, &d), GCC_OK)
      << what << ": " << d.msg;
  return g;
}

// Element bytes of `v` (as double) in ONNX elem type `elem`.
std::vector<uint8_t> Bytes(int elem, const std::vector<double> &v) {
  std::vector<uint8_t> b;
  for (double x : v) {
    uint8_t buf[8];
    size_t n;
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

std::vector<double> F64(const FixtureArray &a) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  for (size_t i = 0; i < v.size(); i++)
    v[i] = a.dtype == "i64" ? static_cast<double>(a.i64()[i]) : a.f32()[i];
  return v;
}

// Runs `g` with `inputs` on the CPU (cuda false) and the host-emulated CUDA
// plan (cuda true); both outputs lists in *cpu and *cuda.
void RunBoth(const gcc_graph *g, const std::vector<std::vector<uint8_t>> &inputs,
             std::vector<PlanOutput> *cpu, std::vector<PlanOutput> *cuda) {
  std::vector<const void *> ptrs;
  for (const auto &b : inputs)
    ptrs.push_back(b.data());
  ASSERT_EQ(gcc_test::RunPlan(g, ptrs, 1, false, cpu), "") << "CPU plan";
  ASSERT_EQ(gcc_test::RunPlan(g, ptrs, 1, true, cuda), "") << "CUDA plan (host-emulated)";
}

void ExpectDims(const PlanOutput &o, const Dims &want) {
  ASSERT_EQ(o.shape.ndim, static_cast<int>(want.size()));
  for (size_t j = 0; j < want.size(); j++)
    ASSERT_EQ(o.shape.dims[j], want[j]) << "dim " << j;
}

struct GatherCase {
  const char *name;
  int64_t axis; // as PyTorch's dim (the model gets it as given)
};
const GatherCase kGatherCases[] = {{"ge_axis1", 1}, {"ge_last", -1}, {"ge_axis0", 0}};

// GatherElements-13 of float data by int64 and int32 indices (every other
// index given as its negative equivalent idx - dim): Y is PyTorch's bit for
// bit (a copy), on the CPU and the CUDA plan.
TEST(GatherElements, ForwardMatchesPyTorch) {
  Fixture fx;
  ASSERT_TRUE(LoadFixture(&fx));
  for (const GatherCase &gc : kGatherCases)
    for (int ielem : {kI64, kI32}) {
      std::string n = gc.name, what = n + (ielem == kI64 ? " int64" : " int32");
      SCOPED_TRACE(what);
      const FixtureArray &x = fx.Get(n + ".x"), &idx = fx.Get(n + ".idx"), &y = fx.Get(n + ".y");
      OnnxModel m(13);
      m.Input("x", x.dims);
      m.Input("idx", idx.dims, ielem);
      m.Node("GatherElements", {"x", "idx"}, {"y"}, {m.Int("axis", gc.axis)});
      m.Output("y");
      gcc_graph *g = Import(m, what);
      ASSERT_NE(g, nullptr);
      int64_t a = x.dims[static_cast<size_t>(gc.axis < 0 ? gc.axis + x.dims.size() : gc.axis)];
      std::vector<double> iv = F64(idx);
      for (size_t i = 0; i < iv.size(); i += 2)
        iv[i] -= static_cast<double>(a);
      std::vector<PlanOutput> cpu, cuda;
      RunBoth(g, {Bytes(kF32, F64(x)), Bytes(ielem, iv)}, &cpu, &cuda);
      for (const auto *outs : {&cpu, &cuda}) {
        ASSERT_EQ(outs->size(), 1u);
        ExpectDims((*outs)[0], y.dims);
        EXPECT_EQ(memcmp((*outs)[0].f32.data(), y.f32(), static_cast<size_t>(y.numel()) * 4), 0)
            << (outs == &cpu ? "CPU" : "CUDA plan") << " differs from torch.gather";
      }
      gcc_graph_free(g);
    }
}

// An index outside [-dim, dim) fails the step, naming its position, on the
// CPU and the CUDA plan alike (never a read outside data).
TEST(GatherElements, OutOfRangeIndexFailsTheStep) {
  OnnxModel m(13);
  m.Input("x", {2, 3});
  m.Input("idx", {2, 2}, kI64);
  m.Node("GatherElements", {"x", "idx"}, {"y"}, {m.Int("axis", 1)});
  m.Output("y");
  gcc_graph *g = Import(m, "GatherElements out of range");
  ASSERT_NE(g, nullptr);
  std::vector<uint8_t> xb = Bytes(kF32, {1, 2, 3, 4, 5, 6}), ib = Bytes(kI64, {0, -3, 2, 3});
  for (bool cuda : {false, true}) {
    std::vector<PlanOutput> outs;
    std::string err = gcc_test::RunPlan(g, {xb.data(), ib.data()}, 1, cuda, &outs);
    EXPECT_NE(err.find("position 3"), std::string::npos) << (cuda ? "CUDA: " : "CPU: ") << err;
  }
  gcc_graph_free(g);
}

// A graph of the one gradient node `op` (inputs named in `ins` with their
// dtypes and dims, bound in that order) and its output.
gcc_graph *GradGraph(int op, const std::vector<std::pair<std::string, gcc_dtype>> &ins,
                     const std::vector<Dims> &dims,
                     const std::function<void(gcc_builder *, int)> &attrs) {
  gcc_builder *b = gcc_builder_new("grad", 1);
  std::vector<int> v;
  for (size_t k = 0; k < ins.size(); k++)
    v.push_back(gcc_build_input(b, ins[k].first.c_str(), ins[k].second,
                                static_cast<int>(dims[k].size()), dims[k].data()));
  int out = gcc_build_op(b, op, "grad", "dX", v.data(), static_cast<int>(v.size()));
  attrs(b, out);
  gcc_build_output(b, out);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

// GatherElementsGrad (the scatter-add of dY = w at the indices) against
// PyTorch's x.grad of sum(gather(x) * w): each element of dX is a float32
// sum of the w at the positions that name it; PyTorch and the kernels may
// add them in another order, so |got - want| <= k u sum|w| over those k
// terms (u = 2^-24, the bound of k - 1 float32 additions' rounding); the
// CPU and CUDA plans add in the same order (equal bit for bit).
TEST(GatherElements, GradientMatchesPyTorch) {
  Fixture fx;
  ASSERT_TRUE(LoadFixture(&fx));
  for (const GatherCase &gc : kGatherCases) {
    std::string n = gc.name;
    SCOPED_TRACE(n);
    const FixtureArray &x = fx.Get(n + ".x"), &idx = fx.Get(n + ".idx"), &w = fx.Get(n + ".w"),
                       &dx = fx.Get(n + ".dx");
    gcc_graph *g = GradGraph(
        GCC_OP_GATHER_ELEMENTS_GRAD, {{"dY", GCC_DT_FLOAT32}, {"idx", GCC_DT_INT64}},
        {w.dims, idx.dims}, [&](gcc_builder *b, int out) {
          gcc_build_set_int(b, out, "axis", gc.axis);
          gcc_build_set_ints(b, out, "shape", x.dims.data(), static_cast<int>(x.dims.size()));
        });
    ASSERT_NE(g, nullptr);
    std::vector<PlanOutput> cpu, cuda;
    RunBoth(g, {Bytes(kF32, F64(w)), Bytes(kI64, F64(idx))}, &cpu, &cuda);
    // the bound per element: the count and |w| sum of the terms added into it
    const int r = static_cast<int>(x.dims.size());
    const int ax = static_cast<int>(gc.axis < 0 ? gc.axis + r : gc.axis);
    std::vector<double> k(static_cast<size_t>(x.numel()), 0), mag(k.size(), 0);
    for (int64_t i = 0; i < idx.numel(); i++) {
      int64_t t = i, off = 0, st = 1;
      for (int q = r - 1; q >= 0; q--) {
        int64_t c = t % idx.dims[q];
        t /= idx.dims[q];
        off += (q == ax ? idx.i64()[i] : c) * st;
        st *= x.dims[q];
      }
      k[off] += 1;
      mag[off] += std::fabs(w.f32()[i]);
    }
    ASSERT_EQ(cpu.size(), 1u);
    ExpectDims(cpu[0], x.dims);
    for (int64_t i = 0; i < x.numel(); i++)
      EXPECT_LE(std::fabs(cpu[0].f32[i] - dx.f32()[i]), k[i] * std::ldexp(1.0, -24) * mag[i])
          << "element " << i << ": " << cpu[0].f32[i] << " vs torch " << dx.f32()[i];
    ASSERT_EQ(cuda.size(), 1u);
    EXPECT_EQ(memcmp(cuda[0].f32.data(), cpu[0].f32.data(), cpu[0].f32.size() * 4), 0)
        << "the CUDA plan's GatherElementsGrad differs from the CPU's";
    gcc_graph_free(g);
  }
}

struct MinCase {
  const char *name;
  Dims axes; // empty: every dim (the opset-18 form without axes)
  int keepdims;
};
const MinCase kMinCases[] = {{"rmin_02_keep", {0, -1}, 1}, {"rmin_1", {1}, 0}, {"rmin_all", {}, 0}};

// ReduceMin-13 (axes an attribute) and -18 (axes an input, none for all
// dims): Y is PyTorch's amin bit for bit (a minimum is exact), on the CPU
// and the CUDA plan.
TEST(ReduceMin, ForwardMatchesPyTorchInBothOpsetForms) {
  Fixture fx;
  ASSERT_TRUE(LoadFixture(&fx));
  for (const MinCase &mc : kMinCases)
    for (int opset : {13, 18}) {
      std::string n = mc.name, what = n + " opset " + std::to_string(opset);
      SCOPED_TRACE(what);
      const FixtureArray &x = fx.Get(n + ".x"), &y = fx.Get(n + ".y");
      OnnxModel m(opset);
      m.Input("x", x.dims);
      Dims axes = mc.axes;
      if (axes.empty() && opset == 13)
        for (size_t i = 0; i < x.dims.size(); i++)
          axes.push_back(static_cast<int64_t>(i));
      if (opset == 13) {
        m.Node("ReduceMin", {"x"}, {"y"}, {m.Ints("axes", axes), m.Int("keepdims", mc.keepdims)});
      } else if (axes.empty()) {
        m.Node("ReduceMin", {"x"}, {"y"}, {m.Int("keepdims", mc.keepdims)});
      } else {
        m.InitI64("axes", {static_cast<int64_t>(axes.size())}, axes);
        m.Node("ReduceMin", {"x", "axes"}, {"y"}, {m.Int("keepdims", mc.keepdims)});
      }
      m.Output("y");
      gcc_graph *g = Import(m, what);
      ASSERT_NE(g, nullptr);
      std::vector<PlanOutput> cpu, cuda;
      RunBoth(g, {Bytes(kF32, F64(x))}, &cpu, &cuda);
      for (const auto *outs : {&cpu, &cuda}) {
        ASSERT_EQ(outs->size(), 1u);
        ExpectDims((*outs)[0], y.dims);
        EXPECT_EQ(memcmp((*outs)[0].f32.data(), y.f32(), static_cast<size_t>(y.numel()) * 4), 0)
            << (outs == &cpu ? "CPU" : "CUDA plan") << " differs from torch.amin";
      }
      gcc_graph_free(g);
    }
}

// ReduceMinGrad against PyTorch's amin backward on inputs with ties: dY
// split evenly among the tied minima, (dY / count) * mask: one correctly
// rounded float32 division by a small integer in both, so equal bit for
// bit, on the CPU and the CUDA plan.
TEST(ReduceMin, GradientSplitsEvenlyAmongTiesAsPyTorch) {
  Fixture fx;
  ASSERT_TRUE(LoadFixture(&fx));
  for (const MinCase &mc : kMinCases) {
    std::string n = mc.name;
    SCOPED_TRACE(n);
    const FixtureArray &x = fx.Get(n + ".x"), &y = fx.Get(n + ".y"), &w = fx.Get(n + ".w"),
                       &dx = fx.Get(n + ".dx");
    Dims axes = mc.axes;
    if (axes.empty())
      for (size_t i = 0; i < x.dims.size(); i++)
        axes.push_back(static_cast<int64_t>(i));
    gcc_graph *g =
        GradGraph(GCC_OP_REDUCE_MIN_GRAD,
                  {{"dY", GCC_DT_FLOAT32}, {"X", GCC_DT_FLOAT32}, {"Y", GCC_DT_FLOAT32}},
                  {w.dims, x.dims, y.dims}, [&](gcc_builder *b, int out) {
                    gcc_build_set_ints(b, out, "axes", axes.data(), static_cast<int>(axes.size()));
                    gcc_build_set_int(b, out, "keepdims", mc.keepdims);
                  });
    ASSERT_NE(g, nullptr);
    std::vector<PlanOutput> cpu, cuda;
    RunBoth(g, {Bytes(kF32, F64(w)), Bytes(kF32, F64(x)), Bytes(kF32, F64(y))}, &cpu, &cuda);
    for (const auto *outs : {&cpu, &cuda}) {
      ASSERT_EQ(outs->size(), 1u);
      ExpectDims((*outs)[0], x.dims);
      for (int64_t i = 0; i < x.numel(); i++)
        EXPECT_EQ((*outs)[0].f32[i], dx.f32()[i])
            << (outs == &cpu ? "CPU" : "CUDA plan") << " element " << i;
    }
    gcc_graph_free(g);
  }
}

// Groups longer than a CUDA block (codegen/emit_select.c: a block per
// group, each thread every 256th element, then a tree): X (3, 1000) over
// axis 1 and (4, 300, 3) over axes 0 and 1 (1200 elements a group, strided
// in memory), with the minimum tied at several places far apart (different
// threads), -0 and +0 tied as the minimum, and a row with two NaNs. The
// CPU kernel keeps the first minimum (and the first NaN) in row-major
// order; the CUDA plan must give the same bits, and the gradient (each tie
// dY / count, count from a block-wide sum) the CPU's bits too.
TEST(ReduceMin, LongGroupsOnTheCudaPlanGiveTheCpuBits) {
  struct LongCase {
    Dims x;
    Dims axes;
    int64_t last_first, last_step; // flat position of the last group's element r: first + step r
  };
  for (const LongCase &lc :
       {LongCase{{3, 1000}, {1}, 2000, 1}, LongCase{{4, 300, 3}, {0, 1}, 2, 3}}) {
    SCOPED_TRACE(lc.x.size());
    int64_t n = Numel(lc.x);
    std::vector<double> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) // values in [1, 8), no minimum yet
      x[static_cast<size_t>(i)] = 1.0 + static_cast<double>((i * 37) % 29) / 4.0;
    // group 0 of both shapes (flat positions < 1000 and multiples of 3): a
    // minimum -3 tied at 5 places far apart
    for (int64_t at : {0L, 6L, 252L, 498L, 600L})
      x[static_cast<size_t>(at)] = -3.0;
    // the last group of both: -0 at its element 300 and +0 at its element
    // 456 tied as its minimum. The -0 comes first in row-major order, but
    // the tree carries thread 200's +0 (456 = 200 + 256) into slot 0 and
    // thread 44's -0 (300 = 44 + 256) into slot 4, which meet last with the
    // +0 in the lower slot: a tree that kept the lower slot on a tie would
    // give +0
    x[static_cast<size_t>(lc.last_first + 300 * lc.last_step)] = -0.0;
    x[static_cast<size_t>(lc.last_first + 456 * lc.last_step)] = 0.0;
    // the middle group of both (row 1; positions 1 mod 3): two NaNs
    x[static_cast<size_t>(n / 2 + 1)] = std::nan("");
    x[static_cast<size_t>(n / 2 + 4)] = std::nan("");
    for (int keep : {0, 1}) {
      SCOPED_TRACE(keep);
      OnnxModel m(13);
      m.Input("x", lc.x);
      m.Node("ReduceMin", {"x"}, {"y"}, {m.Ints("axes", lc.axes), m.Int("keepdims", keep)});
      m.Output("y");
      gcc_graph *g = Import(m, "long ReduceMin");
      ASSERT_NE(g, nullptr);
      std::vector<PlanOutput> cpu, cuda;
      RunBoth(g, {Bytes(kF32, x)}, &cpu, &cuda);
      ASSERT_EQ(cpu.size(), 1u);
      ASSERT_EQ(cuda.size(), 1u);
      ASSERT_EQ(cpu[0].f32.size(), cuda[0].f32.size());
      EXPECT_EQ(memcmp(cpu[0].f32.data(), cuda[0].f32.data(), cpu[0].f32.size() * 4), 0)
          << "the CUDA plan's minima differ from the CPU's";
      bool saw_min = false, saw_nan = false;
      for (float v : cpu[0].f32) {
        saw_min |= v == -3.0f;
        saw_nan |= std::isnan(v);
      }
      EXPECT_TRUE(saw_min && saw_nan) << "the case lost its ties or its NaN";
      EXPECT_TRUE(cpu[0].f32.back() == 0.0f && std::signbit(cpu[0].f32.back()))
          << "the last group's first minimum is -0";
      EXPECT_TRUE(cuda[0].f32.back() == 0.0f && std::signbit(cuda[0].f32.back()))
          << "the CUDA plan's last group: " << cuda[0].f32.back();
      gcc_graph_free(g);
    }
    // the gradient: Y from the CPU plan, dY = 1, 2, 3, ... per group
    Dims yd = lc.x;
    for (int64_t a : lc.axes)
      yd[static_cast<size_t>(a)] = 1;
    OnnxModel m(13);
    m.Input("x", lc.x);
    m.Node("ReduceMin", {"x"}, {"y"}, {m.Ints("axes", lc.axes), m.Int("keepdims", 1)});
    m.Output("y");
    gcc_graph *gy = Import(m, "long ReduceMin");
    ASSERT_NE(gy, nullptr);
    std::vector<PlanOutput> ycpu;
    std::vector<const void *> xin = {nullptr};
    std::vector<uint8_t> xb = Bytes(kF32, x);
    xin[0] = xb.data();
    ASSERT_EQ(gcc_test::RunPlan(gy, xin, 1, false, &ycpu), "");
    gcc_graph_free(gy);
    std::vector<double> y(ycpu[0].f32.begin(), ycpu[0].f32.end()), w(y.size());
    for (size_t i = 0; i < w.size(); i++)
      w[i] = static_cast<double>(i + 1);
    Dims axes = lc.axes;
    gcc_graph *g =
        GradGraph(GCC_OP_REDUCE_MIN_GRAD,
                  {{"dY", GCC_DT_FLOAT32}, {"X", GCC_DT_FLOAT32}, {"Y", GCC_DT_FLOAT32}},
                  {yd, lc.x, yd}, [&](gcc_builder *b, int out) {
                    gcc_build_set_ints(b, out, "axes", axes.data(), static_cast<int>(axes.size()));
                    gcc_build_set_int(b, out, "keepdims", 1);
                  });
    ASSERT_NE(g, nullptr);
    std::vector<PlanOutput> cpu, cuda;
    RunBoth(g, {Bytes(kF32, w), xb, Bytes(kF32, y)}, &cpu, &cuda);
    ASSERT_EQ(cpu[0].f32.size(), static_cast<size_t>(n));
    ASSERT_EQ(cuda[0].f32.size(), static_cast<size_t>(n));
    int64_t split = 0;
    for (int64_t i = 0; i < n; i++) {
      EXPECT_EQ(cpu[0].f32[i], cuda[0].f32[i]) << "dX element " << i;
      split += cpu[0].f32[i] == 1.0f / 5.0f; // group 0's dY = 1 over its 5 ties
    }
    EXPECT_EQ(split, 5) << "group 0's gradient is not split over its 5 tied minima";
    gcc_graph_free(g);
  }
}

// ONNX export writes GatherElements-13 and ReduceMin-13 (axes and keepdims
// attributes); the file imported again gives PyTorch's outputs on the CPU.
TEST(GatherElements, ExportRoundTripWithReduceMin) {
  Fixture fx;
  ASSERT_TRUE(LoadFixture(&fx));
  const FixtureArray &x = fx.Get("ge_axis1.x"), &idx = fx.Get("ge_axis1.idx"),
                     &y = fx.Get("ge_axis1.y");
  const FixtureArray &mx = fx.Get("rmin_1.x"), &my = fx.Get("rmin_1.y");
  OnnxModel m(13);
  m.Input("x", x.dims);
  m.Input("idx", idx.dims, kI64);
  m.Input("mx", mx.dims);
  m.Node("GatherElements", {"x", "idx"}, {"y"}, {m.Int("axis", 1)});
  m.Node("ReduceMin", {"mx"}, {"my"}, {m.Ints("axes", {1}), m.Int("keepdims", 0)});
  m.Output("y");
  m.Output("my");
  gcc_graph *g = Import(m, "export round trip");
  ASSERT_NE(g, nullptr);
  uint8_t *out = nullptr;
  size_t size = 0;
  gcc_diag d{};
  ASSERT_EQ(gcc_onnx_export_memory(g, nullptr, &out, &size, &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
  gcc_graph *g2 = nullptr;
  gcc_onnx_options o{};
  ASSERT_EQ(gcc_onnx_import(out, size, "exported.onnx", &o, &g2, nullptr, &d), GCC_OK) << d.msg;
  free(out);
  std::vector<uint8_t> xb = Bytes(kF32, F64(x)), ib = Bytes(kI64, F64(idx)),
                       mb = Bytes(kF32, F64(mx));
  std::vector<PlanOutput> outs;
  ASSERT_EQ(gcc_test::RunPlan(g2, {xb.data(), ib.data(), mb.data()}, 1, false, &outs), "");
  ASSERT_EQ(outs.size(), 2u);
  ExpectDims(outs[0], y.dims);
  ExpectDims(outs[1], my.dims);
  EXPECT_EQ(memcmp(outs[0].f32.data(), y.f32(), static_cast<size_t>(y.numel()) * 4), 0);
  EXPECT_EQ(memcmp(outs[1].f32.data(), my.f32(), static_cast<size_t>(my.numel()) * 4), 0);
  gcc_graph_free(g2);
}

// ---- bool tensors through the data-movement ops ------------------------------

// A small int tensor (bool elements as 0 / 1) and the references of the
// data-movement ops.
struct T {
  Dims d;
  std::vector<int> v;
  int64_t Off(const Dims &c) const {
    int64_t o = 0;
    for (size_t k = 0; k < d.size(); k++)
      o = o * d[k] + c[k];
    return o;
  }
};

Dims Coords(const Dims &d, int64_t i) {
  Dims c(d.size());
  for (int k = static_cast<int>(d.size()) - 1; k >= 0; k--) {
    c[k] = i % d[k];
    i /= d[k];
  }
  return c;
}

T Make(const Dims &d, const std::function<int(const Dims &)> &f) {
  T t{d, std::vector<int>(static_cast<size_t>(Numel(d)))};
  for (int64_t i = 0; i < Numel(d); i++)
    t.v[i] = f(Coords(d, i));
  return t;
}

// Identity -> Transpose, Slice (negative steps), Unsqueeze -> Squeeze ->
// Concat, Expand, Gather (a negative index), Reshape -> Transpose and
// GatherElements of bool values: every output is bool and equal to the
// reference, on the CPU and the CUDA plan (bool moved as one byte).
TEST(BoolDataMovement, EveryCopyOpKeepsBoolValues) {
  const Dims md = {2, 3, 4};
  T m = Make(md, [](const Dims &c) { return (c[0] * 7 + c[1] * 3 + c[2] * 5) % 3 == 0; });
  T m2 = Make({2, 1, 4}, [](const Dims &c) { return (c[0] + c[2]) % 2; });
  T bb = Make({3, 1}, [](const Dims &c) { return c[0] != 1; });
  const std::vector<int64_t> gi = {1, 0, 3, 3, 2, 1, 0, -1, 2, -4, 1, 1};
  OnnxModel m13(13);
  m13.Input("m", md, kBool);
  m13.Input("m2", {2, 1, 4}, kBool);
  m13.Input("b", {3, 1}, kBool);
  m13.Input("gi", {2, 3, 2}, kI64);
  m13.Node("Identity", {"m"}, {"id"});
  m13.Node("Transpose", {"id"}, {"o_t"}, {m13.Ints("perm", {2, 0, 1})});
  m13.InitI64("sl.starts", {2}, {2, 3});
  m13.InitI64("sl.ends", {2}, {0, -100});
  m13.InitI64("sl.axes", {2}, {1, 2});
  m13.InitI64("sl.steps", {2}, {-1, -2});
  m13.Node("Slice", {"m", "sl.starts", "sl.ends", "sl.axes", "sl.steps"}, {"o_s"});
  m13.InitI64("ax0", {1}, {0});
  m13.Node("Unsqueeze", {"m", "ax0"}, {"u"});
  m13.Node("Squeeze", {"u", "ax0"}, {"sq"});
  m13.Node("Concat", {"sq", "m2"}, {"o_c"}, {m13.Int("axis", 1)});
  m13.InitI64("ex.shape", {3}, {2, 3, 4});
  m13.Node("Expand", {"b", "ex.shape"}, {"o_e"});
  m13.InitI64("g.idx", {2}, {2, -3});
  m13.Node("Gather", {"m", "g.idx"}, {"o_g"}, {m13.Int("axis", 1)});
  m13.InitI64("r.shape", {2}, {4, 6});
  m13.Node("Reshape", {"m", "r.shape"}, {"r"});
  m13.Node("Transpose", {"r"}, {"o_r"}, {m13.Ints("perm", {1, 0})});
  m13.Node("GatherElements", {"m", "gi"}, {"o_ge"}, {m13.Int("axis", 2)});
  for (const char *o : {"o_t", "o_s", "o_c", "o_e", "o_g", "o_r", "o_ge"})
    m13.Output(o);
  gcc_graph *g = Import(m13, "bool data movement");
  ASSERT_NE(g, nullptr);

  std::vector<T> want;
  want.push_back(Make({4, 2, 3}, [&](const Dims &c) { return m.v[m.Off({c[1], c[2], c[0]})]; }));
  want.push_back(Make({2, 2, 2}, [&](const Dims &c) {
    return m.v[m.Off({c[0], 2 - c[1], 3 - 2 * c[2]})]; // dim 1: 2, 1; dim 2: 3, 1
  }));
  want.push_back(Make({2, 4, 4}, [&](const Dims &c) {
    return c[1] < 3 ? m.v[m.Off(c)] : m2.v[m2.Off({c[0], 0, c[2]})];
  }));
  want.push_back(Make({2, 3, 4}, [&](const Dims &c) { return bb.v[bb.Off({c[1], 0})]; }));
  want.push_back(Make({2, 2, 4}, [&](const Dims &c) {
    return m.v[m.Off({c[0], c[1] == 0 ? 2 : 0, c[2]})]; // indices 2 and -3 (= 0)
  }));
  want.push_back(Make({6, 4}, [&](const Dims &c) { return m.v[c[1] * 6 + c[0]]; }));
  want.push_back(Make({2, 3, 2}, [&](const Dims &c) {
    int64_t v = gi[static_cast<size_t>((c[0] * 3 + c[1]) * 2 + c[2])];
    return m.v[m.Off({c[0], c[1], v < 0 ? v + 4 : v})];
  }));

  auto dbl = [](const T &t) { return std::vector<double>(t.v.begin(), t.v.end()); };
  std::vector<double> giv(gi.begin(), gi.end());
  std::vector<PlanOutput> cpu, cuda;
  RunBoth(g, {Bytes(kBool, dbl(m)), Bytes(kBool, dbl(m2)), Bytes(kBool, dbl(bb)), Bytes(kI64, giv)},
          &cpu, &cuda);
  const char *names[] = {"Transpose", "Slice",   "Concat",        "Expand",
                         "Gather",    "Reshape", "GatherElements"};
  for (const auto *outs : {&cpu, &cuda}) {
    SCOPED_TRACE(outs == &cpu ? "CPU" : "CUDA plan (host-emulated)");
    ASSERT_EQ(outs->size(), want.size());
    for (size_t k = 0; k < want.size(); k++) {
      SCOPED_TRACE(names[k]);
      EXPECT_EQ((*outs)[k].dtype, GCC_DT_BOOL);
      ExpectDims((*outs)[k], want[k].d);
      ASSERT_EQ((*outs)[k].i64.size(), want[k].v.size());
      for (size_t i = 0; i < want[k].v.size(); i++)
        EXPECT_EQ((*outs)[k].i64[i], want[k].v[i]) << "element " << i;
    }
  }
  gcc_graph_free(g);
}

} // namespace
