// onnx_import_test: the ONNX importer (onnx/import.h) and the format-
// sniffing loader (onnx/model_file.h) on models built here with
// tests/onnx_builder.h:
//  - results against hand-computed values (numpy semantics written out):
//    opset-dependent Softmax, legacy broadcasting, Squeeze/Unsqueeze in
//    attribute and input form, BatchNormalization folded into Conv, 1-D
//    convolution, auto_pad, the symbolic batch bound at compile time;
//  - initializers as raw_data, typed fields and external data;
//  - bad input, each a clear error naming the file and the node, never a
//    crash: truncated and bit-flipped files (every prefix, many flips),
//    cycles, unknown domains, missing initializers, shapes that do not
//    infer, unsupported ops / attributes / attribute values / opsets,
//    external data escaping the model's folder;
//  - the command lines: gcc-import, gcc-train and gcc-run exit 3 on each
//    bad model with the file and node in the message, gcc-run reads an
//    ONNX model by content and writes --save-outputs as .npz and .npy.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "graph/loader.h"
#include "graph/ops.h"
#include "onnx/import.h"
#include "onnx/model_file.h"
#include "datasets/npy.h"
#include "runtime/plan.h"
}
#include "tests/onnx_builder.h"
#include "tests/subprocess.h"
#include "tests/testutil.h"

namespace {

using gcc_test::ReadBytes;
using gcc_test::Runfile;

// A scratch file for this test.
std::string Tmp(const std::string &name) {
  return gcc_test::TmpPath(name);
}

void WriteBytes(const std::string &path, const std::vector<uint8_t> &b) {
  ASSERT_TRUE(gcc_test::WriteFile(path, b)) << path;
}

using gcc_test::kBatch;
using gcc_test::OnnxModel;

constexpr int kF32 = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
constexpr int kI64 = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;

struct Imported {
  gcc_status status = GCC_OK;
  std::string msg;
  gcc_graph *g = nullptr;
  gcc_onnx_report rep{};
  ~Imported() { gcc_graph_free(g); }
};

void Import(const std::vector<uint8_t> &bytes, Imported *r, const char *src = "m.onnx",
            const char *base = nullptr) {
  gcc_diag d{};
  gcc_onnx_options o{};
  o.base_dir = base;
  r->status = gcc_onnx_import(bytes.data(), bytes.size(), src, &o, &r->g, &r->rep, &d);
  r->msg = d.msg;
}

void *BindWeights(void *user, const gcc_graph *g, int v) {
  const gcc_graph *m = static_cast<const gcc_graph *>(user);
  int mv = gcc_graph_find(m, g->values[v].name);
  return mv >= 0 ? m->values[mv].data : nullptr;
}

// Runs `g` on the CPU with float32 inputs (in graph input order) at `batch`
// and returns output 0.
std::vector<float> RunCpu(const gcc_graph *g, const std::vector<std::vector<float>> &ins,
                          int64_t batch = 1, gcc_shape *shape = nullptr) {
  gcc_options o{};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = batch;
  o.device = GCC_DEV_CPU;
  o.n_cuda_devices = 1;
  gcc_plan *p = nullptr;
  gcc_diag d{};
  gcc_plan_config cfg{};
  cfg.threads = 1;
  cfg.readback_ring = 1;
  EXPECT_EQ(gcc_plan_compile(g, &o, &cfg, BindWeights, const_cast<gcc_graph *>(g), &p, &d), GCC_OK)
      << d.msg;
  if (!p)
    return {};
  for (int k = 0; k < g->n_inputs; k++)
    EXPECT_EQ(gcc_plan_bind_input(p, g->values[g->inputs[k]].name, ins[k].data(), &d), GCC_OK)
        << d.msg;
  EXPECT_EQ(gcc_plan_run(p, 0, &d), GCC_OK) << d.msg;
  const gcc_tensor *t = gcc_plan_tensor(p, g->values[g->outputs[0]].name);
  std::vector<float> out;
  if (t) {
    const float *f = static_cast<const float *>(t->data);
    out.assign(f, f + t->numel);
    if (shape)
      *shape = t->shape;
  }
  gcc_plan_free(p);
  return out;
}

std::vector<float> Iota(size_t n, float scale = 0.1f, float offset = -1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++)
    v[i] = offset + scale * (float)((i * 7) % 23);
  return v;
}

int CountOp(const gcc_graph *g, int op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].op == op;
  return n;
}

// ---- results -------------------------------------------------------------------------

TEST(OnnxImport, MatMulAddWithSymbolicBatch) {
  OnnxModel m(13);
  m.Input("x", {kBatch, 3});
  m.Init("W", {3, 2}, {1, 2, 3, 4, 5, 6});
  m.Init("b", {2}, {0.5f, -0.5f});
  m.Node("MatMul", {"x", "W"}, {"h"});
  m.Node("Add", {"h", "b"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  const gcc_value *x = &r.g->values[r.g->inputs[0]];
  EXPECT_EQ(x->shape.dims[0], GCC_BATCH_DIM);
  EXPECT_EQ(r.rep.opset, 13);
  EXPECT_EQ(r.rep.n_initializers, 2);
  std::vector<float> in = {1, 0, 0, 0, 1, 0, 1, 1, 1}; // three rows
  gcc_shape s{};
  std::vector<float> y = RunCpu(r.g, {in}, 3, &s);
  ASSERT_EQ(y.size(), 6u);
  EXPECT_EQ(s.dims[0], 3);
  std::vector<float> want = {1.5f, 1.5f, 3.5f, 3.5f, 9.5f, 11.5f};
  for (int i = 0; i < 6; i++)
    EXPECT_FLOAT_EQ(y[i], want[i]) << i;
}

// DenseNet-121's Concat of 25 inputs (issue 30): imported, run, and written
// and read back by the .pb loader (which refused more than 16 inputs).
TEST(OnnxImport, ConcatOfTwentyFiveInputsImportsRunsAndRoundTrips) {
  constexpr int kN = 25;
  OnnxModel m(13);
  m.Input("x", {kBatch, 2});
  std::vector<std::string> ins;
  for (int k = 0; k < kN; k++) {
    std::string r = "r" + std::to_string(k);
    m.Init("b" + std::to_string(k), {2}, {(float)k, -(float)k});
    m.Node("Add", {"x", "b" + std::to_string(k)}, {r});
    ins.push_back(r);
  }
  m.Node("Concat", ins, {"y"}, {m.Int("axis", 1)});
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(CountOp(r.g, GCC_OP_CONCAT), 1);
  std::vector<float> in = {0.5f, -1.5f, 2.0f, 3.0f}; // two rows
  auto check = [&](const gcc_graph *g) {
    std::vector<float> y = RunCpu(g, {in}, 2);
    ASSERT_EQ(y.size(), (size_t)(2 * 2 * kN));
    for (int row = 0; row < 2; row++)
      for (int k = 0; k < kN; k++) { // exact: one float32 addition each
        EXPECT_EQ(y[row * 2 * kN + 2 * k], in[row * 2] + (float)k) << row << " " << k;
        EXPECT_EQ(y[row * 2 * kN + 2 * k + 1], in[row * 2 + 1] - (float)k) << row << " " << k;
      }
  };
  check(r.g);
  uint8_t *bytes = nullptr;
  size_t size = 0;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_serialize(r.g, &bytes, &size, &d), GCC_OK) << d.msg;
  gcc_graph *back = nullptr;
  gcc_status st = gcc_model_parse(bytes, size, "cat25.pb", &back, &d);
  free(bytes);
  ASSERT_EQ(st, GCC_OK) << d.msg;
  check(back);
  gcc_graph_free(back);
}

// ONNX ReduceSum / ReduceMean / ReduceMax / ReduceL2 (issue 30) against a
// float64 reference on the CPU: axes as attribute (opset 13, 11) and as input
// (opset 18, ReduceSum 13), negative axes, keepdims 0 and 1, no axes (every
// dim) and noop_with_empty_axes (the identity). The spatial mean / max of
// NCHW is a global pool. Tolerance: float32 sums of at most 60 terms of
// |x| <= 1.2, 1e-5 relative to the largest term sum (60 ulps of float32
// accumulation), absolute 1e-5.
struct ReduceCase {
  const char *op;
  int opset;
  std::vector<int64_t> dims; // dims[0] is the batch (2)
  std::vector<int64_t> axes; // empty with has_axes: an empty axes input
  bool has_axes, keepdims, noop;
  int want_pool; // the IR op a spatial reduction becomes, or -1
};

std::vector<double> ReduceRef(const ReduceCase &rc, const std::vector<float> &x) {
  int rank = (int)rc.dims.size();
  std::vector<int> red(rank, rc.has_axes && rc.axes.empty() ? 0 : !rc.has_axes);
  if (rc.has_axes && rc.axes.empty() && !rc.noop)
    red.assign(rank, 1);
  for (int64_t a : rc.axes)
    red[a < 0 ? a + rank : a] = 1;
  std::vector<int64_t> od(rank);
  for (int i = 0; i < rank; i++)
    od[i] = red[i] ? 1 : rc.dims[i];
  int64_t on = 1;
  for (int64_t v : od)
    on *= v;
  bool mx = std::string(rc.op) == "ReduceMax";
  std::vector<double> acc(on, mx ? -INFINITY : 0.0), cnt(on, 0.0);
  std::vector<int64_t> idx(rank, 0);
  for (size_t i = 0; i < x.size(); i++) {
    int64_t o = 0;
    for (int k = 0; k < rank; k++)
      o = o * od[k] + (red[k] ? 0 : idx[k]);
    double v = x[i];
    if (mx)
      acc[o] = std::max(acc[o], v);
    else
      acc[o] += std::string(rc.op) == "ReduceL2" ? v * v : v;
    cnt[o] += 1;
    for (int k = rank - 1; k >= 0 && ++idx[k] == rc.dims[k]; k--)
      idx[k] = 0;
  }
  for (int64_t o = 0; o < on; o++) {
    if (std::string(rc.op) == "ReduceMean")
      acc[o] /= cnt[o];
    if (std::string(rc.op) == "ReduceL2")
      acc[o] = std::sqrt(acc[o]);
  }
  return acc;
}

TEST(OnnxImport, ReductionsMatchFloat64InEveryOpsetForm) {
  const std::vector<ReduceCase> cases = {
      {"ReduceMean", 18, {2, 3, 4, 5}, {-1, -2}, true, true, false, GCC_OP_AVERAGE_POOL},
      {"ReduceMean", 13, {2, 3, 4, 5}, {2, 3}, true, false, false, GCC_OP_AVERAGE_POOL},
      {"ReduceMax", 13, {2, 3, 4, 5}, {3, 2}, true, true, false, GCC_OP_MAX_POOL},
      {"ReduceMax", 18, {2, 3, 4, 5}, {-2, -1}, true, false, false, GCC_OP_MAX_POOL},
      {"ReduceMean", 13, {2, 3, 4}, {1}, true, false, false, -1},
      {"ReduceMean", 18, {2, 3, 4}, {-1}, true, true, false, -1},
      {"ReduceSum", 13, {2, 3, 4}, {0, 2}, true, true, false, -1},
      {"ReduceSum", 11, {2, 3, 4}, {1}, true, false, false, -1},
      {"ReduceSum", 13, {2, 3, 4}, {}, false, true, false, -1},
      {"ReduceSum", 13, {2, 3, 4}, {}, true, true, false, -1},
      {"ReduceSum", 13, {2, 3, 4}, {}, true, true, true, -1},
      {"ReduceL2", 13, {2, 3, 4}, {2}, true, true, false, -1},
      {"ReduceL2", 18, {2, 3, 4}, {-2, 0}, true, false, false, -1},
  };
  for (const ReduceCase &rc : cases) {
    std::string label = std::string(rc.op) + "-" + std::to_string(rc.opset) + " axes [";
    for (int64_t a : rc.axes)
      label += std::to_string(a) + " ";
    label += "] keepdims " + std::to_string(rc.keepdims) + (rc.noop ? " noop" : "") +
             (rc.has_axes ? "" : " (none given)");
    SCOPED_TRACE(label);
    OnnxModel m(rc.opset);
    std::vector<int64_t> in_dims = rc.dims;
    in_dims[0] = kBatch;
    m.Input("x", in_dims);
    std::vector<std::string> ins = {"x"};
    std::vector<OnnxModel::Attr> attrs = {m.Int("keepdims", rc.keepdims)};
    bool axes_input = std::string(rc.op) == "ReduceSum" ? rc.opset >= 13 : rc.opset >= 18;
    if (rc.has_axes && axes_input) {
      m.InitI64("axes", {(int64_t)rc.axes.size()}, rc.axes);
      ins.push_back("axes");
    } else if (rc.has_axes) {
      attrs.push_back(m.Ints("axes", rc.axes));
    }
    if (rc.noop)
      attrs.push_back(m.Int("noop_with_empty_axes", 1));
    m.Node(rc.op, ins, {"y"}, attrs);
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    ASSERT_EQ(r.status, GCC_OK) << r.msg;
    if (rc.want_pool >= 0) {
      EXPECT_EQ(CountOp(r.g, rc.want_pool), 1);
    }
    int64_t n = 1;
    for (int64_t v : rc.dims)
      n *= v;
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; i++)
      x[i] = 1.2f * std::sin(0.7f * (float)i + 0.3f);
    std::vector<double> want = ReduceRef(rc, x);
    if (rc.noop)
      want.assign(x.begin(), x.end());
    gcc_shape ys{};
    std::vector<float> y = RunCpu(r.g, {x}, rc.dims[0], &ys);
    ASSERT_EQ(y.size(), want.size());
    int want_rank = (int)rc.dims.size();
    if (!rc.keepdims)
      want_rank -= rc.has_axes ? (int)rc.axes.size() : want_rank;
    EXPECT_EQ(ys.ndim, want_rank);
    for (size_t i = 0; i < y.size(); i++)
      EXPECT_NEAR(y[i], want[i], 1e-5 * std::max(1.0, std::fabs(want[i]))) << i;
  }
}

// HardSigmoid (default and nn.Hardsigmoid's alpha 1/6) and HardSwish
// (MobileNetV3) against float64: max(0, min(1, alpha x + beta)) and
// x max(0, min(1, x / 6 + 1 / 2)); x spans both saturations. Three float32
// roundings (mul, add, and HardSwish's product): 4 ulps relative, 1e-7
// absolute near 0.
TEST(OnnxImport, HardSigmoidAndHardSwishMatchFloat64) {
  struct Case {
    const char *op;
    int opset;
    bool attrs;
    double alpha, beta;
  };
  for (const Case &k :
       {Case{"HardSigmoid", 6, false, 0.2, 0.5}, Case{"HardSigmoid", 21, true, 1.0 / 6.0, 0.5},
        Case{"HardSwish", 14, false, 1.0 / 6.0, 0.5}}) {
    SCOPED_TRACE(std::string(k.op) + "-" + std::to_string(k.opset));
    OnnxModel m(k.opset);
    m.Input("x", {kBatch, 3, 8});
    std::vector<OnnxModel::Attr> attrs;
    if (k.attrs)
      attrs = {m.Float("alpha", (float)k.alpha), m.Float("beta", (float)k.beta)};
    m.Node(k.op, {"x"}, {"y"}, attrs);
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    ASSERT_EQ(r.status, GCC_OK) << r.msg;
    std::vector<float> x(2 * 3 * 8);
    for (size_t i = 0; i < x.size(); i++)
      x[i] = -5.0f + 10.0f * (float)i / (float)(x.size() - 1); // [-5, 5]
    std::vector<float> y = RunCpu(r.g, {x}, 2);
    ASSERT_EQ(y.size(), x.size());
    bool swish = std::string(k.op) == "HardSwish";
    for (size_t i = 0; i < x.size(); i++) {
      double a = (double)(float)k.alpha, hs = std::max(0.0, std::min(1.0, a * x[i] + k.beta));
      double want = swish ? x[i] * hs : hs;
      EXPECT_NEAR(y[i], want, 4 * 1.2e-7 * std::fabs(want) + 1e-7) << "x = " << x[i];
    }
  }
}

// A maximum, a mean or a log-sum-exp over the symbolic batch is refused
// naming the node.
TEST(OnnxImport, ReductionsThatAreNotSupportedAreNamed) {
  for (const char *op : {"ReduceMax", "ReduceMean", "ReduceLogSumExp"}) {
    OnnxModel m(13);
    m.Input("x", {kBatch, 3, 4});
    m.Node(op, {"x"}, {"y"}, {m.Ints("axes", {0})}, "red");
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_UNSUPPORTED) << op << ": " << r.msg;
    EXPECT_NE(r.msg.find("'red'"), std::string::npos) << r.msg;
    EXPECT_NE(r.msg.find("symbolic batch"), std::string::npos) << r.msg;
  }
}

// ReduceMax over a non-spatial axis (torch.amax) and ReduceLogSumExp
// (torch.logsumexp, max-shifted: inputs near 100 whose exp overflows float32)
// against float64 loops. Bound: a max is exact; the log-sum-exp of 4 terms is
// a few float32 roundings of values near 100 (Sub, Exp, a 4-term sum, Log,
// Add): 8 ulp of the result.
TEST(OnnxImport, LogSumExpIsStableAndMatchesFloat64) {
  for (const char *op : {"ReduceMax", "ReduceLogSumExp"}) {
    OnnxModel m(13);
    m.Input("x", {kBatch, 3, 4});
    m.Node(op, {"x"}, {"y"}, {m.Ints("axes", {2}), m.Int("keepdims", 0)}, "red");
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    ASSERT_EQ(r.status, GCC_OK) << op << ": " << r.msg;
    std::vector<float> x(2 * 3 * 4);
    for (size_t i = 0; i < x.size(); i++)
      x[i] = 100.0f + (float)((i * 37) % 11) * 0.75f - (i % 4 == 1 ? 3.0f : 0.0f);
    std::vector<float> y = RunCpu(r.g, {x}, 2);
    ASSERT_EQ(y.size(), 6u) << op;
    for (int row = 0; row < 6; row++) {
      double mx = -INFINITY, se = 0;
      for (int j = 0; j < 4; j++)
        mx = std::max(mx, (double)x[row * 4 + j]);
      for (int j = 0; j < 4; j++)
        se += std::exp((double)x[row * 4 + j] - mx);
      double want = std::string(op) == "ReduceMax" ? mx : mx + std::log(se);
      EXPECT_TRUE(std::isfinite(y[row])) << op << " row " << row;
      EXPECT_NEAR(y[row], want, 8 * 1.2e-7 * std::fabs(want)) << op << " row " << row;
    }
  }
}

TEST(OnnxImport, TypedFieldsEqualRawData) {
  for (bool raw : {true, false}) {
    OnnxModel m(13);
    m.Input("x", {1, 3});
    Onnx__TensorProto *t = m.Tensor("W", {3, 1}, {2, -1, 4}, raw);
    m.model()->graph = m.model()->graph; // (the builder owns the tensor)
    m.Init("unused", {1}, {0});
    m.Node("Constant", {}, {"W"}, {m.TensorAttr("value", t)});
    m.Node("MatMul", {"x", "W"}, {"y"});
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    ASSERT_EQ(r.status, GCC_OK) << r.msg;
    std::vector<float> y = RunCpu(r.g, {{1, 2, 3}});
    ASSERT_EQ(y.size(), 1u);
    EXPECT_FLOAT_EQ(y[0], 2 - 2 + 12) << (raw ? "raw_data" : "float_data");
    // the Constant is folded: no IR node, and the unused initializer is gone
    EXPECT_EQ(r.g->n_nodes, 1);
    EXPECT_LT(gcc_graph_find(r.g, "unused"), 0);
  }
}

// Softmax before opset 13 flattens the input to 2-D at `axis`; from 13 it
// works along one axis. Same file, two opsets, two answers.
TEST(OnnxImport, SoftmaxAxisSemanticsDependOnOpset) {
  std::vector<float> x = Iota(2 * 3 * 4);
  for (int opset : {11, 13}) {
    OnnxModel m(opset);
    m.Input("x", {2, 3, 4});
    m.Node("Softmax", {"x"}, {"y"}, {m.Int("axis", 1)});
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    ASSERT_EQ(r.status, GCC_OK) << r.msg;
    std::vector<float> y = RunCpu(r.g, {x});
    ASSERT_EQ(y.size(), 24u);
    for (int n = 0; n < 2; n++) {
      if (opset == 11) { // softmax over the 12 values of each n
        double s = 0;
        for (int i = 0; i < 12; i++)
          s += std::exp((double)x[n * 12 + i]);
        for (int i = 0; i < 12; i++)
          EXPECT_NEAR(y[n * 12 + i], std::exp((double)x[n * 12 + i]) / s, 1e-6);
      } else { // over the 3 values of each (n, :, w)
        for (int w = 0; w < 4; w++) {
          double s = 0;
          for (int c = 0; c < 3; c++)
            s += std::exp((double)x[n * 12 + c * 4 + w]);
          for (int c = 0; c < 3; c++)
            EXPECT_NEAR(y[n * 12 + c * 4 + w], std::exp((double)x[n * 12 + c * 4 + w]) / s, 1e-6);
        }
      }
    }
  }
}

// Opset 6 Add with broadcast = 1 and axis = 1: B of shape [3] lines up with
// dim 1 of A [2, 3, 2].
TEST(OnnxImport, LegacyBroadcastBeforeOpset7) {
  OnnxModel m(6);
  m.Input("a", {2, 3, 2});
  m.Init("b", {3}, {10, 20, 30});
  m.Node("Add", {"a", "b"}, {"y"}, {m.Int("broadcast", 1), m.Int("axis", 1)});
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  std::vector<float> a = Iota(12);
  std::vector<float> y = RunCpu(r.g, {a});
  ASSERT_EQ(y.size(), 12u);
  for (int i = 0; i < 12; i++)
    EXPECT_FLOAT_EQ(y[i], a[i] + 10.0f * (float)((i / 2) % 3 + 1));
  // without broadcast = 1 the shapes must be equal
  OnnxModel m2(6);
  m2.Input("a", {2, 3, 2});
  m2.Init("b", {3}, {10, 20, 30});
  m2.Node("Add", {"a", "b"}, {"y"});
  m2.Output("y");
  Imported r2;
  Import(m2.Bytes(), &r2);
  EXPECT_EQ(r2.status, GCC_ERR_SHAPE);
  EXPECT_NE(r2.msg.find("need the same shape"), std::string::npos) << r2.msg;
}

// Squeeze/Unsqueeze: axes an attribute before opset 13, an input from 13.
TEST(OnnxImport, SqueezeUnsqueezeAttributeAndInputForms) {
  for (int opset : {11, 13}) {
    OnnxModel m(opset);
    m.Input("x", {kBatch, 3});
    if (opset >= 13) {
      m.InitI64("ax1", {2}, {1, -1});
      m.InitI64("ax2", {1}, {-1});
      m.Node("Unsqueeze", {"x", "ax1"}, {"u"});
      m.Node("Squeeze", {"u", "ax2"}, {"y"});
    } else {
      m.Node("Unsqueeze", {"x"}, {"u"}, {m.Ints("axes", {1, -1})});
      m.Node("Squeeze", {"u"}, {"y"}, {m.Ints("axes", {-1})});
    }
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    ASSERT_EQ(r.status, GCC_OK) << "opset " << opset << ": " << r.msg;
    gcc_shape s{};
    std::vector<float> y = RunCpu(r.g, {Iota(6)}, 2, &s);
    ASSERT_EQ(s.ndim, 3) << opset;
    EXPECT_EQ(s.dims[0], 2);
    EXPECT_EQ(s.dims[1], 1);
    EXPECT_EQ(s.dims[2], 3);
    EXPECT_EQ(y, Iota(6));
    EXPECT_EQ(CountOp(r.g, GCC_OP_RESHAPE), 2);
  }
  // opset 13 with the axes computed at run time: refused, named
  OnnxModel m(13);
  m.Input("x", {2, 3});
  m.Input("axes", {1}, kI64);
  m.Node("Unsqueeze", {"x", "axes"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  EXPECT_EQ(r.status, GCC_ERR_SHAPE);
  EXPECT_NE(r.msg.find("m.onnx: node 'Unsqueeze_0' (Unsqueeze): axes input 'axes' is not a "
                       "constant"),
            std::string::npos)
      << r.msg;
  // ... unless it is given as a constant (gcc_onnx_options.frozen)
  int64_t axes = 0;
  gcc_onnx_tensor fz{"axes", kI64, {1, {1}}, &axes, sizeof axes};
  gcc_onnx_options o{};
  o.frozen = &fz;
  o.n_frozen = 1;
  std::vector<uint8_t> b = m.Bytes();
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_onnx_import(b.data(), b.size(), "m.onnx", &o, &g, nullptr, &d), GCC_OK) << d.msg;
  EXPECT_EQ(g->n_inputs, 1);
  gcc_graph_free(g);
}

// Shape arithmetic as the exporters write it around a batch-dependent
// Reshape (nn.MultiheadAttention's head split: Shape -> Slice / Gather ->
// Unsqueeze -> Concat -> Reshape), folded at import with the symbolic batch:
// no shape op is left in the graph, and the result runs at any batch.
TEST(OnnxImport, ShapeArithmeticWithTheSymbolicBatchFolds) {
  OnnxModel m(17);
  m.Input("x", {kBatch, 4, 6});
  m.InitI64("zero", {1}, {0});
  m.InitI64("one", {1}, {1});
  m.InitI64("i0", {}, {0});
  m.InitI64("heads", {1}, {2});
  m.InitI64("head_dim", {1}, {3});
  m.InitI64("ax0", {1}, {0});
  m.Node("Shape", {"x"}, {"s"});
  m.Node("Gather", {"s", "i0"}, {"n"}, {m.Int("axis", 0)}); // N, a scalar
  m.Node("Unsqueeze", {"n", "ax0"}, {"n1"});
  m.Node("Slice", {"s", "one", "heads"}, {"t"}); // [4]
  m.Node("Cast", {"t"}, {"t64"}, {m.Int("to", kI64)});
  m.Node("Concat", {"n1", "t64", "heads", "head_dim"}, {"shp"}, {m.Int("axis", 0)});
  m.Node("Reshape", {"x", "shp"}, {"y"}); // [N, 4, 2, 3]
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(CountOp(r.g, GCC_OP_RESHAPE), 1);
  EXPECT_EQ(r.g->n_nodes, 1) << "every shape op folded";
  for (int64_t batch : {1, 3}) {
    gcc_shape s{};
    std::vector<float> y = RunCpu(r.g, {Iota(batch * 24)}, batch, &s);
    ASSERT_EQ(s.ndim, 4);
    EXPECT_EQ(s.dims[0], batch);
    EXPECT_EQ(s.dims[1], 4);
    EXPECT_EQ(s.dims[2], 2);
    EXPECT_EQ(s.dims[3], 3);
    EXPECT_EQ(y, Iota(batch * 24));
  }
  // a shape value read as a tensor is refused, naming it
  OnnxModel m2(17);
  m2.Input("x", {kBatch, 4});
  m2.Node("Shape", {"x"}, {"s"});
  m2.Node("Cast", {"s"}, {"f"}, {m2.Int("to", 1)});
  m2.Output("f");
  Imported r2;
  Import(m2.Bytes(), &r2);
  EXPECT_EQ(r2.status, GCC_ERR_UNSUPPORTED);
  EXPECT_NE(r2.msg.find("'s'"), std::string::npos) << r2.msg;
}

// Gather (embedding of a weight by int64 ids; index select of an activation
// by constant indices), Slice with steps, Split, Expand and Tile import as
// IR ops and compute numpy's results.
TEST(OnnxImport, GatherSliceSplitExpandTile) {
  OnnxModel m(13);
  m.Input("ids", {kBatch, 2}, kI64);
  m.Init("E", {3, 2}, {1, 2, 3, 4, 5, 6});
  m.Node("Gather", {"E", "ids"}, {"e"}, {m.Int("axis", 0)}); // [N, 2, 2]
  m.InitI64("st", {1}, {1});
  m.InitI64("en", {1}, {-100});
  m.InitI64("ax", {1}, {2});
  m.InitI64("sp", {1}, {-1});
  m.Node("Slice", {"e", "st", "en", "ax", "sp"}, {"r"}); // reversed last dim
  m.InitI64("parts", {2}, {1, 1});
  m.Node("Split", {"r", "parts"}, {"a", "b"}, {m.Int("axis", 1)}); // [N, 1, 2] each
  m.InitI64("eshape", {3}, {1, 3, 1});
  m.Node("Expand", {"a", "eshape"}, {"x"}); // [N, 3, 2]
  m.InitI64("reps", {3}, {1, 1, 2});
  m.Node("Tile", {"b", "reps"}, {"t"}); // [N, 1, 4]
  m.Output("x");
  m.Output("t");
  Imported r;
  Import(m.Bytes(), &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(CountOp(r.g, GCC_OP_GATHER), 1);
  EXPECT_EQ(CountOp(r.g, GCC_OP_SLICE), 3); // the Slice and a Slice per part of Split
  EXPECT_EQ(CountOp(r.g, GCC_OP_EXPAND), 2);
}

// Conv + BatchNormalization: the BN is folded into the convolution's
// weights and bias, and the result equals conv then BN in float64.
TEST(OnnxImport, BatchNormFoldsIntoConv) {
  const int C = 2, M = 3, H = 5, W = 4;
  OnnxModel m(15);
  m.Input("x", {1, C, H, W});
  std::vector<float> w = Iota(M * C * 3 * 3, 0.05f, -0.5f), b = {0.1f, -0.2f, 0.3f};
  std::vector<float> scale = {1.5f, 0.5f, 2.0f}, beta = {0.0f, 1.0f, -1.0f},
                     mean = {0.2f, -0.1f, 0.0f}, var = {1.0f, 0.25f, 4.0f};
  m.Init("W", {M, C, 3, 3}, w);
  m.Init("B", {M}, b);
  m.Init("scale", {M}, scale);
  m.Init("beta", {M}, beta);
  m.Init("mean", {M}, mean);
  m.Init("var", {M}, var);
  m.Node("Conv", {"x", "W", "B"}, {"c"}, {m.Ints("pads", {1, 1, 1, 1})});
  m.Node("BatchNormalization", {"c", "scale", "beta", "mean", "var"}, {"y"},
         {m.Float("epsilon", 1e-3f)});
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(r.rep.n_bn_folded, 1);
  EXPECT_EQ(r.g->n_nodes, 1);
  EXPECT_LT(gcc_graph_find(r.g, "W"), 0) << "the unfolded weights are dropped";
  std::vector<float> x = Iota(C * H * W);
  std::vector<float> y = RunCpu(r.g, {x});
  ASSERT_EQ(y.size(), (size_t)(M * H * W));
  for (int o = 0; o < M; o++)
    for (int i = 0; i < H; i++)
      for (int j = 0; j < W; j++) {
        double acc = b[o];
        for (int c = 0; c < C; c++)
          for (int ki = 0; ki < 3; ki++)
            for (int kj = 0; kj < 3; kj++) {
              int ii = i + ki - 1, jj = j + kj - 1;
              if (ii >= 0 && ii < H && jj >= 0 && jj < W)
                acc += (double)w[((o * C + c) * 3 + ki) * 3 + kj] * x[(c * H + ii) * W + jj];
            }
        double want = (acc - mean[o]) / std::sqrt((double)var[o] + 1e-3) * scale[o] + beta[o];
        EXPECT_NEAR(y[(o * H + i) * W + j], want, 1e-5) << o << " " << i << " " << j;
      }
}

// A 1-D convolution becomes the 2-D IR Conv over an H of 1; auto_pad
// SAME_UPPER pads at the end when the total is odd.
TEST(OnnxImport, Conv1dWithSameUpper) {
  const int C = 2, L = 7, K = 4;
  OnnxModel m(11);
  m.Input("x", {1, C, L});
  std::vector<float> w = Iota(C * K, 0.1f, -0.6f);
  m.Init("W", {1, C, K}, w);
  m.Node("Conv", {"x", "W"}, {"y"}, {m.String("auto_pad", "SAME_UPPER"), m.Ints("strides", {2})});
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  std::vector<float> x = Iota(C * L);
  gcc_shape s{};
  std::vector<float> y = RunCpu(r.g, {x}, 1, &s);
  // out = ceil(7 / 2) = 4; total pad = (4 - 1) * 2 + 4 - 7 = 3: 1 before, 2 after
  ASSERT_EQ(s.ndim, 3);
  ASSERT_EQ(s.dims[2], 4);
  for (int o = 0; o < 4; o++) {
    double acc = 0;
    for (int c = 0; c < C; c++)
      for (int k = 0; k < K; k++) {
        int i = o * 2 + k - 1;
        if (i >= 0 && i < L)
          acc += (double)w[c * K + k] * x[c * L + i];
      }
    EXPECT_NEAR(y[o], acc, 1e-5) << o;
  }
}

TEST(OnnxImport, IdentityDropoutAndConstantOfShapeFold) {
  OnnxModel m(13);
  m.Input("x", {2, 2});
  m.InitI64("shape", {2}, {2, 2});
  Onnx__TensorProto *v = m.Tensor("", {1}, {0.25f});
  m.Node("ConstantOfShape", {"shape"}, {"c"}, {m.TensorAttr("value", v)});
  m.Node("Identity", {"x"}, {"i"});
  m.Node("Dropout", {"i"}, {"dr"});
  m.Node("Add", {"dr", "c"}, {"y"});
  m.Node("Identity", {"y"}, {"z"});
  m.Output("z");
  Imported r;
  Import(m.Bytes(), &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(CountOp(r.g, GCC_OP_ADD), 1);
  // the graph output z is an alias of y: an Identity keeps its name
  EXPECT_EQ(std::string(r.g->values[r.g->outputs[0]].name), "z");
  std::vector<float> y = RunCpu(r.g, {{1, 2, 3, 4}});
  EXPECT_EQ(y, (std::vector<float>{1.25f, 2.25f, 3.25f, 4.25f}));
  char buf[4096];
  std::string rep = gcc_onnx_report_str(&r.rep, buf, sizeof buf);
  EXPECT_NE(rep.find("ConstantOfShape"), std::string::npos) << rep;
  EXPECT_NE(rep.find("Dropout"), std::string::npos) << rep;
}

// Dropout (issue 15): imported for training it is the IR Dropout with the
// model's ratio, whichever way the export wrote it (opset 13 inputs with
// training_mode true as PyTorch's TrainingMode.TRAINING writes it, no
// training_mode as EVAL or other exporters write it, opset 10's attribute,
// opset 6's is_test); otherwise the identity, whatever training_mode says.
Onnx__TensorProto *BoolScalar(OnnxModel &m, bool v) {
  static int32_t kTrue = 1, kFalse = 0;
  Onnx__TensorProto *t = m.Tensor("", {}, {0.0f});
  t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
  t->has_raw_data = 0;
  t->raw_data.len = 0;
  t->n_int32_data = 1;
  t->int32_data = v ? &kTrue : &kFalse;
  return t;
}

void ImportDropout(int opset, int form, int train, Imported *r) {
  OnnxModel m(opset);
  m.Input("x", {2, 3});
  std::vector<std::string> ins = {"x"};
  std::vector<OnnxModel::Attr> attrs;
  if (form == 0) { // PyTorch TRAINING: ratio and training_mode from Constants, mask unused
    m.Node("Constant", {}, {"p"}, {m.TensorAttr("value", m.Tensor("", {}, {0.3f}))});
    m.Node("Constant", {}, {"tm"}, {m.TensorAttr("value", BoolScalar(m, true))});
    ins = {"x", "p", "tm"};
  } else if (form == 1) { // a ratio initializer, no training_mode, a seed
    m.Init("p", {}, {0.3f});
    ins = {"x", "p"};
    attrs.push_back(m.Int("seed", 9));
  } else if (form == 2) { // opset 7-10: the ratio attribute
    attrs.push_back(m.Float("ratio", 0.3f));
  } else if (form == 3) { // opset 6: is_test = 0 (training), ratio attribute
    attrs.push_back(m.Int("is_test", 0));
    attrs.push_back(m.Float("ratio", 0.3f));
  } // form 4: the defaults (ratio 0.5)
  m.Node("Dropout", ins, {"y", "mask"}, attrs, "drop");
  m.Output("y");
  gcc_diag d{};
  gcc_onnx_options o{};
  o.train = train;
  std::vector<uint8_t> bytes = m.Bytes();
  r->status = gcc_onnx_import(bytes.data(), bytes.size(), "m.onnx", &o, &r->g, &r->rep, &d);
  r->msg = d.msg;
}

TEST(OnnxImport, DropoutTrainsWhenImportedForTrainingInEveryExportForm) {
  const struct {
    int opset, form;
    float ratio;
    int64_t seed;
  } cases[] = {{13, 0, 0.3f, 0}, {12, 0, 0.3f, 0}, {13, 1, 0.3f, 9},
               {10, 2, 0.3f, 0}, {6, 3, 0.3f, 0},  {13, 4, 0.5f, 0}};
  for (const auto &c : cases) {
    SCOPED_TRACE("opset " + std::to_string(c.opset) + " form " + std::to_string(c.form));
    {
      Imported r;
      ImportDropout(c.opset, c.form, 1, &r);
      ASSERT_EQ(r.status, GCC_OK) << r.msg;
      ASSERT_EQ(CountOp(r.g, GCC_OP_DROPOUT), 1);
      for (int i = 0; i < r.g->n_nodes; i++)
        if (r.g->nodes[i].op == GCC_OP_DROPOUT) {
          const gcc_attr *ratio = gcc_node_attr(&r.g->nodes[i], "ratio");
          const gcc_attr *seed = gcc_node_attr(&r.g->nodes[i], "seed");
          ASSERT_NE(ratio, nullptr);
          EXPECT_EQ(ratio->f, c.ratio);
          EXPECT_EQ(seed ? seed->i : 0, c.seed);
          EXPECT_EQ(gcc_node_attr(&r.g->nodes[i], "training"), nullptr)
              << "training is autodiff's to set";
        }
      // evaluation (no autodiff): the identity
      std::vector<float> x = {1, -2, 3, -4, 5, -6};
      EXPECT_EQ(RunCpu(r.g, {x}), x);
    }
    {
      Imported r; // for inference: folded away
      ImportDropout(c.opset, c.form, 0, &r);
      ASSERT_EQ(r.status, GCC_OK) << r.msg;
      EXPECT_EQ(CountOp(r.g, GCC_OP_DROPOUT), 0);
      std::vector<float> x = {1, -2, 3, -4, 5, -6};
      EXPECT_EQ(RunCpu(r.g, {x}), x);
    }
  }
}

TEST(OnnxImport, DropoutRatioMustBeAConstantInRange) {
  { // a ratio computed at run time cannot train
    OnnxModel m(13);
    m.Input("x", {2, 3});
    m.Input("r", {}, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, nullptr);
    m.Node("Dropout", {"x", "r"}, {"y"}, {}, "drop");
    m.Output("y");
    gcc_diag d{};
    gcc_onnx_options o{};
    o.train = 1;
    std::vector<uint8_t> bytes = m.Bytes();
    gcc_graph *g = nullptr;
    EXPECT_NE(gcc_onnx_import(bytes.data(), bytes.size(), "m.onnx", &o, &g, nullptr, &d), GCC_OK);
    EXPECT_EQ(g, nullptr);
    std::string msg = d.msg;
    EXPECT_NE(msg.find("node 'drop' (Dropout): ratio input 'r' is not a constant"),
              std::string::npos)
        << msg;
  }
  for (float bad : {1.5f, -0.1f}) {
    OnnxModel m(10);
    m.Input("x", {2, 3});
    m.Node("Dropout", {"x"}, {"y"}, {m.Float("ratio", bad)}, "drop");
    m.Output("y");
    gcc_diag d{};
    gcc_onnx_options o{};
    o.train = 1;
    std::vector<uint8_t> bytes = m.Bytes();
    gcc_graph *g = nullptr;
    EXPECT_EQ(gcc_onnx_import(bytes.data(), bytes.size(), "m.onnx", &o, &g, nullptr, &d),
              GCC_ERR_INVALID_GRAPH);
    std::string msg = d.msg;
    EXPECT_NE(msg.find("node 'drop' (Dropout): ratio"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is outside [0, 1]"), std::string::npos) << msg;
  }
}

// ---- external data ----------------------------------------------------------------------

class ExternalData : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = Tmp("ext_model");
    mkdir(dir_.c_str(), 0755);
    mkdir((dir_ + "/sub").c_str(), 0755);
    std::vector<float> pad = {99, 99}, w = {2, 3, 4};
    std::vector<uint8_t> b(sizeof(float) * 5);
    std::memcpy(b.data(), pad.data(), 8);
    std::memcpy(b.data() + 8, w.data(), 12);
    WriteBytes(dir_ + "/sub/weights.bin", b);
    WriteBytes(Tmp("outside.bin"), b);
    unlink((dir_ + "/escape.bin").c_str());
    ASSERT_EQ(symlink(Tmp("outside.bin").c_str(), (dir_ + "/escape.bin").c_str()), 0);
  }
  Imported Try(const std::vector<std::pair<std::string, std::string>> &kv) {
    OnnxModel m(13);
    m.Input("x", {1, 3});
    m.InitExternal("W", {3, 1}, kv);
    m.Node("MatMul", {"x", "W"}, {"y"});
    m.Output("y");
    std::string path = dir_ + "/model.onnx";
    WriteBytes(path, m.Bytes());
    Imported r;
    gcc_diag d{};
    r.status = gcc_onnx_import_file(path.c_str(), &r.g, &r.rep, &d);
    r.msg = d.msg;
    return r;
  }
  std::string dir_;
};

TEST_F(ExternalData, ReadsOffsetAndLength) {
  Imported r = Try({{"location", "sub/weights.bin"}, {"offset", "8"}, {"length", "12"}});
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(r.rep.n_external, 1);
  std::vector<float> y = RunCpu(r.g, {{1, 1, 1}});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_FLOAT_EQ(y[0], 9.0f);
  // without length: the rest of the file from the offset
  Imported r2 = Try({{"location", "sub/weights.bin"}, {"offset", "8"}});
  EXPECT_EQ(r2.status, GCC_OK) << r2.msg;
}

TEST_F(ExternalData, RefusesPathsOutsideTheModelsFolder) {
  Imported r = Try({{"location", "../outside.bin"}});
  EXPECT_EQ(r.status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(r.msg.find("outside the model's folder"), std::string::npos) << r.msg;
  EXPECT_NE(r.msg.find("initializer 'W'"), std::string::npos) << r.msg;
  EXPECT_NE(r.msg.find("model.onnx"), std::string::npos) << r.msg;
  Imported l = Try({{"location", "escape.bin"}}); // a symlink inside pointing outside
  EXPECT_EQ(l.status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(l.msg.find("outside the model's folder"), std::string::npos) << l.msg;
  Imported a = Try({{"location", Tmp("outside.bin")}});
  EXPECT_EQ(a.status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(a.msg.find("absolute path"), std::string::npos) << a.msg;
}

TEST_F(ExternalData, RefusesMissingShortAndUnknownKeys) {
  Imported m = Try({{"location", "sub/none.bin"}});
  EXPECT_EQ(m.status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(m.msg.find("none.bin"), std::string::npos) << m.msg;
  Imported s = Try({{"location", "sub/weights.bin"}, {"offset", "12"}});
  EXPECT_EQ(s.status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(s.msg.find("the tensor needs 12"), std::string::npos) << s.msg;
  Imported k = Try({{"location", "sub/weights.bin"}, {"checksum", "abc"}});
  EXPECT_EQ(k.status, GCC_ERR_UNSUPPORTED);
  EXPECT_NE(k.msg.find("'checksum' is not handled"), std::string::npos) << k.msg;
  Imported n = Try({{"location", "sub/weights.bin"}, {"offset", "-4"}});
  EXPECT_EQ(n.status, GCC_ERR_INVALID_GRAPH) << n.msg;
  // from memory there is no folder to read from
  OnnxModel mm(13);
  mm.Input("x", {1, 3});
  mm.InitExternal("W", {3, 1}, {{"location", "sub/weights.bin"}});
  mm.Node("MatMul", {"x", "W"}, {"y"});
  mm.Output("y");
  std::vector<uint8_t> b = mm.Bytes();
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_onnx_import(b.data(), b.size(), nullptr, nullptr, &g, nullptr, &d),
            GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(std::string(d.msg).find("read from memory"), std::string::npos) << d.msg;
}

// ---- bad input ----------------------------------------------------------------------------

std::vector<uint8_t> GoodModel() {
  OnnxModel m(13);
  m.Input("x", {kBatch, 2, 4, 4});
  m.Init("W", {3, 2, 3, 3}, Iota(54));
  m.Init("B", {3}, {0.1f, 0.2f, 0.3f});
  m.Init("Wf", {5, 12}, Iota(60));
  m.Node("Conv", {"x", "W", "B"}, {"c"}, {m.Ints("kernel_shape", {3, 3})});
  m.Node("Relu", {"c"}, {"r"});
  m.Node("Flatten", {"r"}, {"f"});
  m.Node("Gemm", {"f", "Wf"}, {"y"}, {m.Int("transB", 1)});
  m.Output("y");
  return m.Bytes();
}

TEST(OnnxBadInput, EveryTruncationIsAnErrorNeverACrash) {
  std::vector<uint8_t> good = GoodModel();
  Imported ok;
  Import(good, &ok);
  ASSERT_EQ(ok.status, GCC_OK) << ok.msg;
  int errors = 0;
  for (size_t n = 0; n < good.size(); n++) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + (long)n);
    Imported r;
    Import(cut, &r, "cut.onnx");
    if (r.status != GCC_OK) {
      errors++;
      EXPECT_EQ(r.msg.rfind("cut.onnx: ", 0), 0u) << n << ": " << r.msg;
    }
  }
  // a prefix can be a valid (smaller) message, but nearly all are not
  EXPECT_GT(errors, (int)good.size() * 9 / 10);
}

TEST(OnnxBadInput, BitFlipsNeverCrash) {
  std::vector<uint8_t> good = GoodModel();
  std::mt19937 rng(14);
  for (int trial = 0; trial < 3000; trial++) {
    std::vector<uint8_t> b = good;
    int flips = 1 + (int)(rng() % 3);
    for (int k = 0; k < flips; k++)
      b[rng() % b.size()] ^= (uint8_t)(1u << (rng() % 8));
    Imported r;
    Import(b, &r, "flip.onnx");
    if (r.status != GCC_OK) {
      EXPECT_EQ(r.msg.rfind("flip.onnx: ", 0), 0u) << r.msg;
    }
  }
}

TEST(OnnxBadInput, GarbageIsAParseError) {
  std::vector<uint8_t> junk(100);
  for (size_t i = 0; i < junk.size(); i++)
    junk[i] = (uint8_t)(i * 37 + 11);
  Imported r;
  Import(junk, &r, "junk.onnx");
  EXPECT_EQ(r.status, GCC_ERR_PARSE);
  EXPECT_NE(r.msg.find("junk.onnx: not a valid ONNX model"), std::string::npos) << r.msg;
}

TEST(OnnxBadInput, CycleIsNamed) {
  OnnxModel m(13);
  m.Input("x", {2});
  m.Node("Add", {"x", "b"}, {"a"}, {}, "first");
  m.Node("Relu", {"a"}, {"b"}, {}, "second");
  m.Node("Relu", {"a"}, {"y"}, {}, "third");
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r, "cycle.onnx");
  EXPECT_EQ(r.status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(r.msg.find("cycle.onnx: the graph has a cycle"), std::string::npos) << r.msg;
  EXPECT_NE(r.msg.find("node 'first' (Add)"), std::string::npos) << r.msg;
  EXPECT_NE(r.msg.find("node 'second' (Relu)"), std::string::npos) << r.msg;
}

// A graph with no nodes or no outputs is refused, naming what it lacks
// (issue 32: it imported with exit 0 as an empty model). One without inputs
// but with nodes computes constants and still imports.
TEST(OnnxBadInput, EmptyGraphIsRefused) {
  OnnxModel none(13), no_out(13);
  none.Input("x", {2});
  none.Output("x");
  no_out.Input("x", {2});
  no_out.Node("Relu", {"x"}, {"y"});
  struct Case {
    OnnxModel *m;
    const char *says;
  } cases[] = {{&none, "the graph has no nodes (0 nodes, 1 inputs, 1 outputs)"},
               {&no_out, "the graph has no outputs"}};
  for (const Case &c : cases) {
    Imported r;
    Import(c.m->Bytes(), &r, "empty.onnx");
    EXPECT_EQ(r.status, GCC_ERR_INVALID_GRAPH) << r.msg;
    EXPECT_NE(r.msg.find(std::string("empty.onnx: ") + c.says), std::string::npos) << r.msg;
  }
  // gcc-import exits 3 (an invalid model)
  std::string path = Tmp("empty.onnx");
  WriteBytes(path, none.Bytes());
  gcc_test::ProcResult p = gcc_test::RunRunfile("cli/gcc-import", {path, "-o", Tmp("empty.pb")});
  EXPECT_EQ(p.exit_code, 3) << p.err;
  EXPECT_FALSE(gcc_test::Exists(Tmp("empty.pb")));
}

// A constant folded at import is kept in the graph: one larger than a model
// file may be (1 GiB) is refused naming the node, not allocated (the ONNX
// fuzz harness found a 17 GB shape).
TEST(OnnxBadInput, HugeConstantOfShapeIsRefused) {
  OnnxModel m(13);
  m.Input("x", {2});
  m.InitI64("shape", {2}, {65536, 65536}); /* 2^32 float32 elements: 16 GiB */
  m.Node("ConstantOfShape", {"shape"}, {"c"}, {}, "fill");
  m.Node("Relu", {"x"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r, "huge.onnx");
  EXPECT_EQ(r.status, GCC_ERR_INVALID_GRAPH) << r.msg;
  EXPECT_NE(r.msg.find("huge.onnx"), std::string::npos) << r.msg;
  EXPECT_NE(r.msg.find("node 'fill' (ConstantOfShape)"), std::string::npos) << r.msg;
  EXPECT_NE(r.msg.find("4294967296 elements"), std::string::npos) << r.msg;
}

TEST(OnnxBadInput, UnknownDomain) {
  OnnxModel m(13);
  m.Input("x", {2});
  m.Node("FusedGelu", {"x"}, {"y"}, {}, "gelu", "com.microsoft");
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  EXPECT_EQ(r.status, GCC_ERR_UNSUPPORTED);
  EXPECT_NE(r.msg.find("m.onnx: node 'gelu' (FusedGelu) is in domain 'com.microsoft'"),
            std::string::npos)
      << r.msg;
}

TEST(OnnxBadInput, MissingInitializer) {
  OnnxModel m(13);
  m.Input("x", {2, 3});
  m.Node("MatMul", {"x", "W"}, {"y"}, {}, "fc");
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  EXPECT_EQ(r.status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(r.msg.find("m.onnx: node 'fc' (MatMul): input 'W' is not defined"), std::string::npos)
      << r.msg;
  EXPECT_NE(r.msg.find("missing initializer"), std::string::npos) << r.msg;
}

TEST(OnnxBadInput, ShapesThatDoNotInfer) {
  { // a symbolic dim other than the batch
    OnnxModel m(13);
    m.Input("x", {2, kBatch}, kF32, "width");
    m.Node("Relu", {"x"}, {"y"});
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_SHAPE);
    EXPECT_NE(r.msg.find("graph input 'x': dim 1 is symbolic ('width')"), std::string::npos)
        << r.msg;
  }
  { // no shape at all
    OnnxModel m(13);
    m.InputNoShape("x");
    m.Node("Relu", {"x"}, {"y"});
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_SHAPE);
    EXPECT_NE(r.msg.find("graph input 'x' has no shape"), std::string::npos) << r.msg;
  }
  { // operands that do not broadcast
    OnnxModel m(13);
    m.Input("a", {2, 3});
    m.Input("b", {4});
    m.Node("Add", {"a", "b"}, {"y"}, {}, "add");
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_SHAPE);
    EXPECT_NE(r.msg.find("node 'add' (Add): operands [2, 3] and [4] do not broadcast"),
              std::string::npos)
        << r.msg;
  }
  { // a reshape whose element count differs
    OnnxModel m(13);
    m.Input("x", {kBatch, 6});
    m.InitI64("s", {2}, {4, -1});
    m.Node("Reshape", {"x", "s"}, {"y"}, {}, "rs");
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_SHAPE);
    EXPECT_NE(r.msg.find("node 'rs' (Reshape): cannot infer -1: [N, 6] does not divide"),
              std::string::npos)
        << r.msg;
  }
  { // a window larger than its input
    OnnxModel m(13);
    m.Input("x", {1, 1, 2, 2});
    m.Node("MaxPool", {"x"}, {"y"}, {m.Ints("kernel_shape", {3, 3})}, "pool");
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_SHAPE);
    EXPECT_NE(r.msg.find("node 'pool' (MaxPool): the window"), std::string::npos) << r.msg;
  }
}

TEST(OnnxBadInput, UnsupportedOpAttributeValueAndOpset) {
  {
    OnnxModel m(13);
    m.Input("x", {2});
    m.Node("Det", {"x"}, {"y"}, {}, "e");
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_UNSUPPORTED);
    EXPECT_NE(r.msg.find("node 'e' (Det): op 'Det' is not supported (supported ops: "),
              std::string::npos)
        << r.msg;
    EXPECT_NE(r.msg.find("Conv"), std::string::npos) << r.msg;
  }
  {
    OnnxModel m(13);
    m.Input("x", {2, 3});
    m.Node("Flatten", {"x"}, {"y"}, {m.Int("axis", 1), m.Int("keepdims", 1)}, "f");
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_UNSUPPORTED);
    EXPECT_NE(r.msg.find("node 'f' (Flatten): attribute 'keepdims' is not handled"),
              std::string::npos)
        << r.msg;
  }
  {
    OnnxModel m(13);
    m.Input("x", {1, 1, 4, 4});
    m.Node("MaxPool", {"x"}, {"y"},
           {m.Ints("kernel_shape", {2, 2}), m.String("auto_pad", "SAME_SIDEWAYS")}, "p");
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_UNSUPPORTED);
    EXPECT_NE(r.msg.find("node 'p' (MaxPool): auto_pad 'SAME_SIDEWAYS' is not handled"),
              std::string::npos)
        << r.msg;
  }
  {
    OnnxModel m(13);
    m.Input("x", {4});
    m.Node("Dropout", {"x"}, {"y", "mask"}, {}, "drop");
    m.Output("y");
    m.Output("mask");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_UNSUPPORTED);
    EXPECT_NE(r.msg.find("node 'drop' (Dropout): output 1 (mask) is used"), std::string::npos)
        << r.msg;
  }
  {
    OnnxModel m(GCC_ONNX_MAX_OPSET + 1);
    m.Input("x", {2});
    m.Node("Relu", {"x"}, {"y"});
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_UNSUPPORTED);
    EXPECT_NE(r.msg.find("opset 22"), std::string::npos) << r.msg;
  }
  { // an op used before it exists
    OnnxModel m(8);
    m.InitI64("s", {1}, {2});
    m.Node("ConstantOfShape", {"s"}, {"y"});
    m.Output("y");
    Imported r;
    Import(m.Bytes(), &r);
    EXPECT_EQ(r.status, GCC_ERR_INVALID_GRAPH);
    EXPECT_NE(r.msg.find("does not exist in opset 8"), std::string::npos) << r.msg;
  }
}

TEST(OnnxBadInput, ValuesAreSsa) {
  OnnxModel m(13);
  m.Input("x", {2});
  m.Node("Relu", {"x"}, {"y"}, {}, "a");
  m.Node("Relu", {"x"}, {"y"}, {}, "b");
  m.Output("y");
  Imported r;
  Import(m.Bytes(), &r);
  EXPECT_EQ(r.status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(r.msg.find("node 'b' (Relu): output 'y' is also produced by node 'a' (Relu)"),
            std::string::npos)
      << r.msg;
}

// ---- the loader entry point -----------------------------------------------------------

TEST(ModelFile, RecognisesFormatsByContent) {
  std::vector<uint8_t> onnx = GoodModel();
  EXPECT_EQ(gcc_model_sniff(onnx.data(), onnx.size()), GCC_MODEL_FORMAT_ONNX);
  // a gcc-train model, whatever its name
  Imported r;
  Import(onnx, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  uint8_t *pb = nullptr;
  size_t n = 0;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_serialize(r.g, &pb, &n, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_model_sniff(pb, n), GCC_MODEL_FORMAT_GCC);
  std::string path = Tmp("imported.onnx"); // the extension lies
  WriteBytes(path, std::vector<uint8_t>(pb, pb + n));
  free(pb);
  gcc_graph *g = nullptr;
  gcc_model_info info{};
  ASSERT_EQ(gcc_model_open(path.c_str(), &g, &info, &d), GCC_OK) << d.msg;
  EXPECT_EQ(info.format, GCC_MODEL_FORMAT_GCC);
  EXPECT_EQ(g->n_nodes, r.g->n_nodes);
  gcc_graph_free(g);
  // and the ONNX file under a .pb name
  std::string p2 = Tmp("model.pb");
  WriteBytes(p2, onnx);
  ASSERT_EQ(gcc_model_open(p2.c_str(), &g, &info, &d), GCC_OK) << d.msg;
  EXPECT_EQ(info.format, GCC_MODEL_FORMAT_ONNX);
  EXPECT_EQ(info.onnx.opset, 13);
  gcc_graph_free(g);
  const uint8_t bundle[16] = {'G', 'C', 'C', 'X', '\r', '\n', 0x1a, '\n'};
  EXPECT_EQ(gcc_model_sniff(bundle, sizeof bundle), GCC_MODEL_FORMAT_BUNDLE);
  EXPECT_EQ(gcc_model_open_memory(bundle, sizeof bundle, "b.gccx", &g, nullptr, &d),
            GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(std::string(d.msg).find("gcc-run"), std::string::npos) << d.msg;
}

// ---- command lines -----------------------------------------------------------------------

using Result = gcc_test::ProcResult; // tests/subprocess.h

// Runs cli/`rel` (gcc-train, gcc-import) with `args`.
Result Exec(const std::string &rel, const std::vector<std::string> &args) {
  return gcc_test::RunRunfile("cli/" + rel, args);
}

TEST(OnnxCli, BadModelsExit3NamingFileAndNode) {
  struct Case {
    std::string name, node;
    std::vector<uint8_t> bytes;
  };
  std::vector<Case> cases;
  {
    std::vector<uint8_t> g = GoodModel();
    cases.push_back(
        {"truncated.onnx", "", std::vector<uint8_t>(g.begin(), g.begin() + (long)g.size() / 2)});
  }
  {
    OnnxModel m(13);
    m.Input("x", {2});
    m.Node("Add", {"x", "b"}, {"a"}, {}, "first");
    m.Node("Relu", {"a"}, {"b"}, {}, "second");
    m.Output("b");
    cases.push_back({"cycle.onnx", "node 'first' (Add)", m.Bytes()});
  }
  {
    OnnxModel m(13);
    m.Input("x", {2});
    m.Node("Gelu", {"x"}, {"y"}, {}, "gelu", "com.microsoft");
    m.Output("y");
    cases.push_back({"domain.onnx", "node 'gelu' (Gelu)", m.Bytes()});
  }
  {
    OnnxModel m(13);
    m.Input("x", {2, 3});
    m.Node("MatMul", {"x", "W"}, {"y"}, {}, "fc");
    m.Output("y");
    cases.push_back({"missing.onnx", "node 'fc' (MatMul)", m.Bytes()});
  }
  {
    OnnxModel m(13);
    m.Input("x", {kBatch, 6});
    m.Input("s", {2}, kI64);
    m.Node("Reshape", {"x", "s"}, {"y"}, {}, "rs");
    m.Output("y");
    cases.push_back({"shape.onnx", "node 'rs' (Reshape)", m.Bytes()});
  }
  std::string dir = Tmp("cli_models");
  mkdir(dir.c_str(), 0755);
  for (const Case &c : cases) {
    std::string path = dir + "/" + c.name;
    WriteBytes(path, c.bytes);
    for (const char *bin : {"gcc-import", "gcc-train", "gcc-run"}) {
      std::vector<std::string> args = {path};
      if (std::string(bin) == "gcc-import")
        args = {path, "-o", Tmp("x.pb")};
      if (std::string(bin) == "gcc-run")
        args = {path, "--input", Tmp("none.npy")};
      Result r = Exec(bin, args);
      EXPECT_EQ(r.exit_code, 3) << bin << " " << c.name << ": " << r.err;
      EXPECT_NE(r.err.find(path), std::string::npos) << bin << " " << c.name << ": " << r.err;
      if (!c.node.empty()) {
        EXPECT_NE(r.err.find(c.node), std::string::npos) << bin << " " << c.name << ": " << r.err;
      }
    }
  }
  // external data escaping the folder
  OnnxModel m(13);
  m.Input("x", {1, 3});
  m.InitExternal("W", {3, 1}, {{"location", "../../etc/passwd"}});
  m.Node("MatMul", {"x", "W"}, {"y"});
  m.Output("y");
  std::string path = dir + "/escape.onnx";
  WriteBytes(path, m.Bytes());
  Result r = Exec("gcc-import", {path, "-o", Tmp("x.pb")});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("initializer 'W'"), std::string::npos) << r.err;
}

// gcc-import prints what it did and writes a model that gcc-train reads;
// gcc-run takes the ONNX file itself and writes its raw outputs.
TEST(OnnxCli, ImportAndRun) {
  std::string onnx = Tmp("good.onnx"), pb = Tmp("good.pb");
  WriteBytes(onnx, GoodModel());
  Result r = Exec("gcc-import", {onnx, "-o", pb});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("opset 13"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Conv"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("initializers: 3"), std::string::npos) << r.out;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_load(pb.c_str(), &g, &d), GCC_OK) << d.msg;
  // the reference: the imported graph on the CPU at batch 3
  std::vector<float> x = Iota(3 * 2 * 4 * 4);
  std::vector<float> want = RunCpu(g, {x}, 3);
  gcc_graph_free(g);
  ASSERT_EQ(want.size(), 15u);
  std::string in = Tmp("x.npy");
  uint8_t *npy = nullptr;
  size_t n = 0;
  gcc_shape s = {4, {3, 2, 4, 4}};
  ASSERT_EQ(gcc_npy_encode_f32(&s, x.data(), &npy, &n, &d), GCC_OK);
  WriteBytes(in, std::vector<uint8_t>(npy, npy + n));
  free(npy);
  std::string dir = Tmp("outs");
  Result run = Exec("gcc-run", {onnx, "--input", in, "--device", "cpu", "--save-outputs", dir,
                                "--output", Tmp("p.csv")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  gcc_shape ls{};
  float *logits = nullptr;
  ASSERT_EQ(gcc_npy_read_f32((dir + "/logits.npy").c_str(), &ls, &logits, &d), GCC_OK) << d.msg;
  ASSERT_EQ(ls.ndim, 2);
  EXPECT_EQ(ls.dims[0], 3);
  EXPECT_EQ(ls.dims[1], 5);
  for (int i = 0; i < 15; i++)
    EXPECT_FLOAT_EQ(logits[i], want[i]) << i;
  free(logits);
  // .npz: a zip of logits.npy and probabilities.npy, stored
  std::string npz = Tmp("outs.npz");
  run = Exec("gcc-run", {onnx, "--input", in, "--device", "cpu", "--save-outputs", npz, "--output",
                         Tmp("p.csv")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<uint8_t> z = ReadBytes(npz);
  ASSERT_GT(z.size(), 30u);
  EXPECT_EQ(z[0], 'P');
  EXPECT_EQ(z[1], 'K');
  std::string zs(z.begin(), z.end());
  // the first local file header: sizes at 18, name length at 26, data at 30 + name
  auto u32 = [&](size_t o) {
    return (uint32_t)z[o] | (uint32_t)z[o + 1] << 8 | (uint32_t)z[o + 2] << 16 |
           (uint32_t)z[o + 3] << 24;
  };
  ASSERT_EQ(u32(0), 0x04034b50u);
  size_t name_len = (size_t)z[26] | (size_t)z[27] << 8, size = u32(18);
  EXPECT_EQ(zs.substr(30, name_len), "logits.npy");
  EXPECT_EQ(u32(22), size) << "stored: compressed size = size";
  float *lz = nullptr;
  ASSERT_EQ(gcc_npy_parse_f32(z.data() + 30 + name_len, size, "logits.npy", &ls, &lz, &d), GCC_OK)
      << d.msg;
  for (int i = 0; i < 15; i++)
    EXPECT_FLOAT_EQ(lz[i], want[i]) << i;
  free(lz);
  EXPECT_NE(zs.find("probabilities.npy"), std::string::npos);
}

// --dump-placement and --export work on an imported model as on a native
// one; the exported bundle computes what gcc-run computes from the .onnx.
TEST(OnnxCli, DumpPlacementAndExport) {
  std::string onnx = Tmp("export.onnx");
  WriteBytes(onnx, GoodModel());
  Result r = Exec("gcc-train", {onnx, "--device", "cuda", "--dump-placement"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Conv"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuda:0"), std::string::npos) << r.out;
  r = Exec("gcc-train", {onnx, "--dump-placement=json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{", 0), 0u) << r.out.substr(0, 200);
  std::string bundle = Tmp("export.gccx");
  r = Exec("gcc-train",
           {onnx, "--export", bundle, "--export-archs", "sm_90", "--export-batch-sizes", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("exported"), std::string::npos) << r.out;
  // a model without a training spec and without --export: nothing to do
  r = Exec("gcc-train", {onnx});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("no training spec"), std::string::npos) << r.err;
  // --epochs 0 (nothing to train) needs no training spec either (issue 30):
  // the same export, the same bundle, and no .trained.pb
  std::string bundle0 = Tmp("export_epochs0.gccx");
  r = Exec("gcc-train", {onnx, "--epochs", "0", "--export", bundle0, "--export-archs", "sm_90",
                         "--export-batch-sizes", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("exported"), std::string::npos) << r.out;
  EXPECT_EQ(access(Tmp("export.trained.pb").c_str(), F_OK), -1) << "nothing was trained";
  r = Exec("gcc-train", {onnx, "--epochs", "0"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("no training spec"), std::string::npos) << r.err;
  // the bundle and the .onnx give the same logits
  std::vector<float> x = Iota(3 * 2 * 4 * 4);
  gcc_shape s = {4, {3, 2, 4, 4}};
  uint8_t *npy = nullptr;
  size_t n = 0;
  gcc_diag d{};
  ASSERT_EQ(gcc_npy_encode_f32(&s, x.data(), &npy, &n, &d), GCC_OK);
  std::string in = Tmp("export_x.npy");
  WriteBytes(in, std::vector<uint8_t>(npy, npy + n));
  free(npy);
  std::vector<std::vector<float>> got;
  for (const std::string &model : {onnx, bundle}) {
    std::string out = Tmp("export_out");
    Result run = Exec("gcc-run", {model, "--input", in, "--device", "cpu", "--save-outputs", out,
                                  "--output", Tmp("export.csv")});
    ASSERT_EQ(run.exit_code, 0) << model << ": " << run.err;
    gcc_shape ls{};
    float *logits = nullptr;
    ASSERT_EQ(gcc_npy_read_f32((out + "/logits.npy").c_str(), &ls, &logits, &d), GCC_OK) << d.msg;
    got.emplace_back(logits, logits + gcc_shape_numel(&ls, nullptr));
    free(logits);
  }
  ASSERT_EQ(got[0].size(), 15u);
  EXPECT_EQ(got[0], got[1]);
}

// Every file a run reads is an input (issue 32): the model's external data,
// an --input, a --save-outputs file. An output that would replace one is a
// command-line error (exit 2) before anything is written, and the file
// stays as it was. Before, gcc-import -o ext.onnx.data replaced the weights
// and a later import read the .pb bytes as weights.
TEST(OnnxCli, OutputsNeverReplaceExternalDataOrInputs) {
  std::string dir = Tmp("ext_cli");
  mkdir(dir.c_str(), 0755);
  OnnxModel m(13);
  m.Input("x", {kBatch, 3});
  m.InitExternal("W", {3, 2}, {{"location", "model.onnx.data"}});
  m.Node("MatMul", {"x", "W"}, {"y"});
  m.Output("y");
  std::string onnx = dir + "/model.onnx", data = dir + "/model.onnx.data";
  WriteBytes(onnx, m.Bytes());
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  WriteBytes(data, std::vector<uint8_t>(reinterpret_cast<uint8_t *>(w.data()),
                                        reinterpret_cast<uint8_t *>(w.data() + 6)));
  std::vector<uint8_t> before = ReadBytes(data);
  ASSERT_EQ(before.size(), 24u);
  std::vector<float> x = {1, 0, 0, 0, 1, 0};
  gcc_shape xs = {2, {2, 3}};
  uint8_t *npy = nullptr;
  size_t n = 0;
  gcc_diag d{};
  ASSERT_EQ(gcc_npy_encode_f32(&xs, x.data(), &npy, &n, &d), GCC_OK);
  std::string in = dir + "/x.npy";
  WriteBytes(in, std::vector<uint8_t>(npy, npy + n));
  free(npy);
  struct Case {
    const char *tool;
    std::vector<std::string> args;
    std::string says, kept;
  } cases[] = {
      {"gcc-import", {onnx, "-o", data}, "--output " + data + " would replace", data},
      {"gcc-import", {onnx, "--export-onnx", data}, "--export-onnx " + data, data},
      {"gcc-run",
       {onnx, "--input", in, "--device", "cpu", "--output", data},
       "--output " + data + " would replace",
       data},
  };
  for (const Case &c : cases) {
    Result r = Exec(c.tool, c.args);
    EXPECT_EQ(r.exit_code, 2) << c.tool << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(ReadBytes(c.kept), before) << c.tool << " replaced " << c.kept;
  }
  // the import still reads the weights
  Result ok = Exec("gcc-import", {onnx, "-o", dir + "/model.pb"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  // --save-outputs DIR over its own --input DIR/logits.npy
  std::string so = dir + "/so";
  mkdir(so.c_str(), 0755);
  std::string logits = so + "/logits.npy";
  WriteBytes(logits, ReadBytes(in));
  std::vector<uint8_t> lb = ReadBytes(logits);
  Result r = Exec("gcc-run", {onnx, "--input", logits, "--device", "cpu", "--save-outputs", so});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--save-outputs " + logits + " names --input"), std::string::npos) << r.err;
  EXPECT_EQ(ReadBytes(logits), lb);
  // the control: another folder is written
  r = Exec("gcc-run", {onnx, "--input", logits, "--device", "cpu", "--save-outputs", so + "2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A FIFO where the external data should be is refused at once, never waited
// on in open() (issue 32: gcc-import and gcc-run --info hung), and so is a
// location naming the model's folder itself, with what is wrong with it.
TEST_F(ExternalData, RefusesAFifoAtOnceAndTheFolderItself) {
  std::string fifo = dir_ + "/pipe.bin";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  gcc_test::ProcOptions o;
  o.timeout_s = 30; // a hang is killed and fails the test
  OnnxModel m(13);
  m.Input("x", {kBatch, 3});
  m.InitExternal("W", {3, 1}, {{"location", "pipe.bin"}});
  m.Node("MatMul", {"x", "W"}, {"y"});
  m.Output("y");
  std::string path = dir_ + "/fifo.onnx";
  WriteBytes(path, m.Bytes());
  for (const std::vector<std::string> &args :
       {std::vector<std::string>{"gcc-import", path, "-o", Tmp("fifo.pb")},
        std::vector<std::string>{"gcc-run", path, "--info"}}) {
    Result r = gcc_test::RunRunfile("cli/" + args[0],
                                    std::vector<std::string>(args.begin() + 1, args.end()), o);
    EXPECT_EQ(r.exit_code, 3) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("is not a readable file"), std::string::npos) << r.err;
  }
  Imported dot = Try({{"location", "."}});
  EXPECT_EQ(dot.status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(dot.msg.find("is the model's folder"), std::string::npos) << dot.msg;
  EXPECT_EQ(dot.msg.find("outside"), std::string::npos) << dot.msg;
}

} // namespace
