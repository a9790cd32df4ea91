// onnx_fold_test: the ops PyTorch's default exporter (dynamo=True) writes as
// shape computations and sequences, folded by the ONNX importer once the
// batch is symbolic (onnx/import_ops_shapecalc.c, import_ops_sequence.c,
// import_ops_fold.c): CastLike, Range, ConstantOfShape of a shape value,
// SplitToSequence + SequenceAt, float arithmetic of constants, Trilu of a
// constant, Tensor.as_strided's indices over the batch (import_ops_affine.c). Each graph is built with tests/onnx_builder.h; the folds leave
// only the IR ops named, and the results equal numpy's, written out here
// (every value exact in float32: small integers, halves and quarters), at
// batch 1 and 3; the forms that cannot fold are refused naming the value.
#include <cmath>
#include <cfloat>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "graph/ops.h"
#include "onnx/import.h"
#include "runtime/plan.h"
}
#include "tests/onnx_builder.h"

namespace {

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

void Import(OnnxModel &m, Imported *r) {
  std::vector<uint8_t> bytes = m.Bytes();
  gcc_diag d{};
  gcc_onnx_options o{};
  r->status = gcc_onnx_import(bytes.data(), bytes.size(), "m.onnx", &o, &r->g, &r->rep, &d);
  r->msg = d.msg;
}

void *BindWeights(void *user, const gcc_graph *g, int v) {
  const gcc_graph *m = static_cast<const gcc_graph *>(user);
  int mv = gcc_graph_find(m, g->values[v].name);
  return mv >= 0 ? m->values[mv].data : nullptr;
}

// Output 0 of `g` on the CPU for float32 input x at `batch`.
std::vector<float> RunCpu(const gcc_graph *g, const std::vector<float> &x, int64_t batch) {
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
  EXPECT_EQ(gcc_plan_bind_input(p, g->values[g->inputs[0]].name, x.data(), &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_plan_run(p, 0, &d), GCC_OK) << d.msg;
  const gcc_tensor *t = gcc_plan_tensor(p, g->values[g->outputs[0]].name);
  std::vector<float> out;
  if (t) {
    const float *f = static_cast<const float *>(t->data);
    out.assign(f, f + t->numel);
  }
  gcc_plan_free(p);
  return out;
}

int CountOp(const gcc_graph *g, int op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].op == op;
  return n;
}

// x[i] = i + 1 for i < n
std::vector<float> Count(int64_t n) {
  std::vector<float> v((size_t)n);
  for (int64_t i = 0; i < n; i++)
    v[(size_t)i] = (float)(i + 1);
  return v;
}

// A float Constant node (not an initializer: those are weights and stay).
void ConstF(OnnxModel &m, const std::string &name, const std::vector<int64_t> &dims,
            const std::vector<float> &v) {
  m.Node("Constant", {}, {name}, {m.TensorAttr("value", m.Tensor("", dims, v))});
}

// PyTorch's default exporter's softmax scale, 1/sqrt(D) = 1/sqrt(4) from
// x's last dim through Shape, Gather, CastLike, Sqrt, Div: folded into the
// one Mul's constant.
TEST(OnnxFold, CastLikeAndFloatArithmeticOfShapesFold) {
  OnnxModel m(18);
  m.Input("x", {kBatch, 4});
  m.InitI64("last", {}, {-1});
  ConstF(m, "one", {}, {1.0f});
  m.Node("Shape", {"x"}, {"s"});
  m.Node("Gather", {"s", "last"}, {"d"}, {m.Int("axis", 0)});
  m.Node("CastLike", {"d", "x"}, {"df"});  // 4.0
  m.Node("CastLike", {"one", "x"}, {"o"}); // the same dtype: the identity
  m.Node("Sqrt", {"df"}, {"r"});           // 2.0
  m.Node("Div", {"o", "r"}, {"scale"});    // 0.5
  m.Node("Mul", {"x", "scale"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(r.g->n_nodes, 1) << "all but the last Mul folded";
  EXPECT_EQ(CountOp(r.g, GCC_OP_MUL), 1);
  for (int64_t b : {1, 3}) {
    std::vector<float> x = Count(4 * b), y = RunCpu(r.g, x, b), want(x.size());
    for (size_t i = 0; i < x.size(); i++)
      want[i] = x[i] * 0.5f;
    EXPECT_EQ(y, want);
  }
  // CastLike of a run-time tensor is the IR Cast
  OnnxModel m2(18);
  m2.Input("x", {kBatch, 3});
  m2.InitI64("like", {1}, {0});
  m2.Node("CastLike", {"x", "like"}, {"i"});
  m2.Node("CastLike", {"i", "x"}, {"y"});
  m2.Output("y");
  Imported r2;
  Import(m2, &r2);
  ASSERT_EQ(r2.status, GCC_OK) << r2.msg;
  EXPECT_EQ(CountOp(r2.g, GCC_OP_CAST), 2);
  std::vector<float> x2 = {1.75f, -2.5f, 3.0f};
  EXPECT_EQ(RunCpu(r2.g, x2, 1), (std::vector<float>{1.0f, -2.0f, 3.0f})); // truncation
}

// Range of int64 shape values (torch.arange(T)) and of float constants:
// constants; a range whose length depends on the batch is refused.
TEST(OnnxFold, RangeFoldsToAConstant) {
  OnnxModel m(18);
  m.Input("x", {kBatch, 3});
  m.InitI64("i1", {}, {1});
  m.InitI64("two", {}, {2});
  m.InitI64("seven", {}, {7});
  m.Node("Range", {"i1", "seven", "two"}, {"ri"}); // [1, 3, 5]
  m.Node("Cast", {"ri"}, {"rf"}, {m.Int("to", kF32)});
  ConstF(m, "a", {}, {0.5f});
  ConstF(m, "b", {}, {1.75f});
  ConstF(m, "c", {}, {0.5f});
  m.Node("Range", {"a", "b", "c"}, {"rh"}); // [0.5, 1.0, 1.5]: ceil(1.25 / 0.5) = 3
  m.Node("Add", {"rf", "rh"}, {"k"});       // [1.5, 4, 6.5], folded too
  m.Node("Add", {"x", "k"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(r.g->n_nodes, 1);
  for (int64_t b : {1, 3}) {
    std::vector<float> x = Count(3 * b), y = RunCpu(r.g, x, b), want(x.size());
    const float k[3] = {1.5f, 4.0f, 6.5f};
    for (size_t i = 0; i < x.size(); i++)
      want[i] = x[i] + k[i % 3];
    EXPECT_EQ(y, want);
  }
  OnnxModel m2(18);
  m2.Input("x", {kBatch, 3});
  m2.InitI64("i0", {}, {0});
  m2.InitI64("i1", {}, {1});
  m2.Node("Shape", {"x"}, {"s"});
  m2.Node("Gather", {"s", "i0"}, {"n"}, {m2.Int("axis", 0)});
  m2.Node("Range", {"i0", "n", "i1"}, {"r"});
  m2.Node("Cast", {"r"}, {"y"}, {m2.Int("to", kF32)});
  m2.Output("y");
  Imported r2;
  Import(m2, &r2);
  EXPECT_EQ(r2.status, GCC_ERR_UNSUPPORTED);
  EXPECT_NE(r2.msg.find("Range"), std::string::npos) << r2.msg;
  EXPECT_NE(r2.msg.find("batch"), std::string::npos) << r2.msg;
}

// ConstantOfShape(Shape(x)) with x [N, 3]: the fill broadcast to the batch.
TEST(OnnxFold, ConstantOfShapeOfAShapeValue) {
  OnnxModel m(18);
  m.Input("x", {kBatch, 3});
  m.Node("Shape", {"x"}, {"s"});
  m.Node("ConstantOfShape", {"s"}, {"c"}, {m.TensorAttr("value", m.Tensor("", {1}, {2.5f}))});
  m.Node("Mul", {"x", "c"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(CountOp(r.g, GCC_OP_EXPAND), 1);
  for (int64_t b : {1, 3}) {
    std::vector<float> x = Count(3 * b), y = RunCpu(r.g, x, b), want(x.size());
    for (size_t i = 0; i < x.size(); i++)
      want[i] = x[i] * 2.5f;
    EXPECT_EQ(y, want);
  }
  // a shape value without the batch folds to a constant: Slice(Shape(x), 1)
  OnnxModel m2(18);
  m2.Input("x", {kBatch, 3});
  m2.InitI64("b", {1}, {1});
  m2.InitI64("e", {1}, {2});
  m2.Node("Shape", {"x"}, {"s"});
  m2.Node("Slice", {"s", "b", "e"}, {"t"});
  m2.Node("ConstantOfShape", {"t"}, {"c"}, {m2.TensorAttr("value", m2.Tensor("", {1}, {1.0f}))});
  m2.Node("Add", {"x", "c"}, {"y"});
  m2.Output("y");
  Imported r2;
  Import(m2, &r2);
  ASSERT_EQ(r2.status, GCC_OK) << r2.msg;
  EXPECT_EQ(r2.g->n_nodes, 1);
  std::vector<float> y2 = RunCpu(r2.g, Count(3), 1);
  EXPECT_EQ(y2, (std::vector<float>{2, 3, 4}));
}

// ViT's class token through the TorchScript exporter: cls.expand(N, -1, -1)
// becomes Expand(cls, Where(Equal([N, -1, -1], -1), 1, [N, -1, -1])): the
// Equal and Where of a shape value holding N fold (N == -1 is false for
// every N >= 1), so the Expand's shape is [N, 1, 1]. A comparison whose
// answer depends on N (N == 2) is refused naming the node.
TEST(OnnxFold, EqualAndWhereOfAShapeWithTheBatchFold) {
  for (int64_t probe : {-1, 2}) {
    OnnxModel m(17);
    m.Input("x", {kBatch, 2, 4});
    ConstF(m, "cls", {1, 1, 4}, {10, 20, 30, 40});
    m.InitI64("zero", {}, {0});
    m.InitI64("axes0", {1}, {0});
    m.InitI64("minus", {2}, {-1, -1});
    m.InitI64("probe", {3}, {probe, -1, -1});
    m.InitI64("ones", {3}, {1, 1, 1});
    m.Node("Shape", {"x"}, {"s"});
    m.Node("Gather", {"s", "zero"}, {"n"});
    m.Node("Unsqueeze", {"n", "axes0"}, {"n1"});
    m.Node("Concat", {"n1", "minus"}, {"shp"}, {m.Int("axis", 0)});
    m.Node("Equal", {"shp", "probe"}, {"eq"}, {}, "eq");
    m.Node("Where", {"eq", "ones", "shp"}, {"w"});
    m.Node("Expand", {"cls", "w"}, {"t"});
    m.Node("Concat", {"t", "x"}, {"y"}, {m.Int("axis", 1)});
    m.Output("y");
    Imported r;
    Import(m, &r);
    if (probe == 2) {
      EXPECT_EQ(r.status, GCC_ERR_UNSUPPORTED) << r.msg;
      EXPECT_NE(r.msg.find("'eq'"), std::string::npos) << r.msg;
      EXPECT_NE(r.msg.find("1N == 2"), std::string::npos) << r.msg;
      continue;
    }
    ASSERT_EQ(r.status, GCC_OK) << r.msg;
    EXPECT_EQ(CountOp(r.g, GCC_OP_EQUAL), 0);
    EXPECT_EQ(CountOp(r.g, GCC_OP_WHERE), 0);
    for (int64_t b : {1, 3}) {
      std::vector<float> x = Count(8 * b), y = RunCpu(r.g, x, b), want;
      for (int64_t i = 0; i < b; i++) {
        want.insert(want.end(), {10, 20, 30, 40});
        want.insert(want.end(), x.begin() + 8 * i, x.begin() + 8 * (i + 1));
      }
      EXPECT_EQ(y, want) << "batch " << b;
    }
  }
}

// q, k, v = x.split(2, dim=1) as SplitToSequence + SequenceAt; and a split
// into parts of 1 with keepdims 0 (torch.unbind); other sequence uses refused.
TEST(OnnxFold, SplitToSequenceAndSequenceAtAreSlices) {
  OnnxModel m(18);
  m.Input("x", {kBatch, 6});
  m.InitI64("two", {}, {2});
  m.InitI64("p0", {}, {0});
  m.InitI64("pm1", {}, {-1});
  m.Node("SplitToSequence", {"x", "two"}, {"seq"}, {m.Int("axis", 1)});
  m.Node("SequenceAt", {"seq", "p0"}, {"a"});  // x[:, 0:2]
  m.Node("SequenceAt", {"seq", "pm1"}, {"c"}); // x[:, 4:6]
  m.Node("Sub", {"c", "a"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(CountOp(r.g, GCC_OP_SLICE), 2);
  for (int64_t b : {1, 3}) {
    std::vector<float> x = Count(6 * b), y = RunCpu(r.g, x, b);
    EXPECT_EQ(y, std::vector<float>((size_t)(2 * b), 4.0f));
  }
  OnnxModel m2(18);
  m2.Input("x", {kBatch, 2, 3});
  m2.InitI64("p1", {}, {1});
  m2.Node("SplitToSequence", {"x"}, {"seq"}, {m2.Int("axis", 1), m2.Int("keepdims", 0)});
  m2.Node("SequenceAt", {"seq", "p1"}, {"y"}); // x[:, 1, :], [N, 3]
  m2.Output("y");
  Imported r2;
  Import(m2, &r2);
  ASSERT_EQ(r2.status, GCC_OK) << r2.msg;
  for (int64_t b : {1, 3}) {
    std::vector<float> x = Count(6 * b), y = RunCpu(r2.g, x, b), want;
    for (int64_t n = 0; n < b; n++)
      for (int j = 0; j < 3; j++)
        want.push_back((float)(6 * n + 3 + j + 1));
    EXPECT_EQ(y, want);
  }
  // the sequence read as a tensor, a position that is not a constant
  OnnxModel m3(18);
  m3.Input("x", {kBatch, 4});
  m3.InitI64("two", {}, {2});
  m3.Node("SplitToSequence", {"x", "two"}, {"parts"}, {m3.Int("axis", 1)});
  m3.Node("Add", {"parts", "x"}, {"y"});
  m3.Output("y");
  Imported r3;
  Import(m3, &r3);
  EXPECT_EQ(r3.status, GCC_ERR_UNSUPPORTED);
  EXPECT_NE(r3.msg.find("'parts' is a sequence"), std::string::npos) << r3.msg;
  OnnxModel m4(18);
  m4.Input("x", {kBatch, 4});
  m4.Input("p", {1}, kI64);
  m4.InitI64("two", {}, {2});
  m4.Node("SplitToSequence", {"x", "two"}, {"parts"}, {m4.Int("axis", 1)});
  m4.Node("SequenceAt", {"parts", "p"}, {"y"});
  m4.Output("y");
  Imported r4;
  Import(m4, &r4);
  EXPECT_NE(r4.status, GCC_OK);
  EXPECT_NE(r4.msg.find("position input"), std::string::npos) << r4.msg;
}

// The exporter's causal mask: Expand(1, [3, 3]) -> Trilu(lower) -> Equal(0)
// -> Where(-FLT_MAX, 0), all folded into the one Add's constant.
TEST(OnnxFold, TriluEqualWhereOfConstantsFold) {
  OnnxModel m(18);
  m.Input("x", {kBatch, 3, 3});
  ConstF(m, "one", {}, {1.0f});
  ConstF(m, "zero", {}, {0.0f});
  ConstF(m, "lowest", {}, {-FLT_MAX});
  m.InitI64("shape", {2}, {3, 3});
  m.Node("Expand", {"one", "shape"}, {"ones"});
  m.Node("Trilu", {"ones"}, {"tril"}, {m.Int("upper", 0)});
  m.Node("Equal", {"tril", "zero"}, {"above"});
  m.Node("Where", {"above", "lowest", "zero"}, {"mask"});
  m.Node("Add", {"x", "mask"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(r.g->n_nodes, 1);
  EXPECT_EQ(CountOp(r.g, GCC_OP_TRILU), 0);
  std::vector<float> y = RunCpu(r.g, Count(9), 1);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      EXPECT_EQ(y[(size_t)(3 * i + j)], j > i ? -FLT_MAX : (float)(3 * i + j + 1)) << i << j;
}

// Max / Min of int64 constants and shape values (torchvision's Swin writes
// Max(relative_position_index) for an index bound): folded, the dtype kept.
TEST(OnnxFold, MaxMinOfIntegersFold) {
  OnnxModel m(18);
  m.Input("x", {kBatch, 3});
  m.InitI64("idx", {3}, {4, -1, 7});
  m.InitI64("lo", {}, {0});
  m.InitI64("hi", {1}, {5});
  m.InitI64("last", {}, {-1});
  m.Node("Max", {"idx"}, {"same"});              // one input: itself
  m.Node("Max", {"same", "lo"}, {"clamped_lo"}); // [4, 0, 7]
  m.Node("Shape", {"x"}, {"s"});
  m.Node("Gather", {"s", "last"}, {"d"}, {m.Int("axis", 0)}); // 3, a shape value
  m.Node("Min", {"clamped_lo", "hi", "d"}, {"k"});            // [3, 0, 3]
  m.Node("Cast", {"k"}, {"kf"}, {m.Int("to", kF32)});
  m.Node("Add", {"x", "kf"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(r.g->n_nodes, 1);
  EXPECT_EQ(CountOp(r.g, GCC_OP_MAX) + CountOp(r.g, GCC_OP_MIN), 0);
  for (int64_t b : {1, 3}) {
    std::vector<float> x = Count(3 * b), y = RunCpu(r.g, x, b), want(x.size());
    const float k[3] = {3.0f, 0.0f, 3.0f};
    for (size_t i = 0; i < x.size(); i++)
      want[i] = x[i] + k[i % 3];
    EXPECT_EQ(y, want);
  }
  // the batch size against a number is not known at import: refused
  OnnxModel m2(18);
  m2.Input("x", {kBatch, 3});
  m2.InitI64("i0", {}, {0});
  m2.InitI64("two", {}, {2});
  m2.Node("Shape", {"x"}, {"s"});
  m2.Node("Gather", {"s", "i0"}, {"n"}, {m2.Int("axis", 0)});
  m2.Node("Max", {"n", "two"}, {"k"});
  m2.Node("Cast", {"k"}, {"y"}, {m2.Int("to", kF32)});
  m2.Output("y");
  Imported r2;
  Import(m2, &r2);
  EXPECT_NE(r2.status, GCC_OK);
  EXPECT_NE(r2.msg.find("Max"), std::string::npos) << r2.msg;
}

// Swin-T's shifted-window mask as the default exporter writes it: a
// ConstantOfShape, slice assignments as ScatterND (rows, through Transposes
// of constants) -- all folded; a ScatterND of a run-time tensor is refused.
TEST(OnnxFold, ScatterNDAndTransposeOfConstantsFold) {
  OnnxModel m(18);
  m.Input("x", {kBatch, 2, 3});
  m.InitI64("shape", {2}, {3, 2});
  m.Node("ConstantOfShape", {"shape"}, {"z"});                  // zeros [3, 2]
  m.Node("Transpose", {"z"}, {"zt"}, {m.Ints("perm", {1, 0})}); // [2, 3]
  m.InitI64("rows", {1, 1}, {1});
  ConstF(m, "upd", {1, 3}, {1.0f, 2.0f, 3.0f});
  m.Node("ScatterND", {"zt", "rows", "upd"}, {"s"}); // row 1 = [1, 2, 3]
  m.InitI64("cell", {1, 2}, {0, 2});
  ConstF(m, "v", {1}, {5.0f});
  m.Node("ScatterND", {"s", "cell", "v"}, {"mask"}); // [0][2] = 5
  m.Node("Add", {"x", "mask"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(r.g->n_nodes, 1);
  const float k[6] = {0, 0, 5, 1, 2, 3};
  for (int64_t b : {1, 3}) {
    std::vector<float> x = Count(6 * b), y = RunCpu(r.g, x, b), want(x.size());
    for (size_t i = 0; i < x.size(); i++)
      want[i] = x[i] + k[i % 6];
    EXPECT_EQ(y, want);
  }
  OnnxModel m2(18);
  m2.Input("x", {kBatch, 3});
  m2.InitI64("cell", {1, 2}, {0, 1});
  ConstF(m2, "v", {1}, {5.0f});
  m2.Node("ScatterND", {"x", "cell", "v"}, {"y"});
  m2.Output("y");
  Imported r2;
  Import(m2, &r2);
  EXPECT_EQ(r2.status, GCC_ERR_UNSUPPORTED);
  EXPECT_NE(r2.msg.find("('x') is not a constant"), std::string::npos) << r2.msg;
}

// GatherND with one index per tuple (Swin-T's relative_position_bias_table
// lookup in the default export) is a Gather of dim 0; other forms refused.
TEST(OnnxFold, GatherNDOfOneIndexPerTupleIsGather) {
  OnnxModel m(18);
  m.Input("x", {kBatch, 2, 2});
  m.Init("table", {3, 2}, {1, 2, 3, 4, 5, 6});
  m.InitI64("idx", {2, 1}, {2, 0});
  m.Node("GatherND", {"table", "idx"}, {"g"}); // [[5, 6], [1, 2]]
  m.Node("Add", {"x", "g"}, {"y"});
  m.Output("y");
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(CountOp(r.g, GCC_OP_GATHER), 1);
  const float k[4] = {5, 6, 1, 2};
  for (int64_t b : {1, 3}) {
    std::vector<float> x = Count(4 * b), y = RunCpu(r.g, x, b), want(x.size());
    for (size_t i = 0; i < x.size(); i++)
      want[i] = x[i] + k[i % 4];
    EXPECT_EQ(y, want);
  }
  OnnxModel m2(18);
  m2.Input("x", {kBatch, 2});
  m2.Init("table", {3, 2}, {1, 2, 3, 4, 5, 6});
  m2.InitI64("idx", {1, 2}, {2, 0});
  m2.Node("GatherND", {"table", "idx"}, {"g"});
  m2.Node("Add", {"x", "g"}, {"y"});
  m2.Output("y");
  Imported r2;
  Import(m2, &r2);
  EXPECT_EQ(r2.status, GCC_ERR_UNSUPPORTED);
  EXPECT_NE(r2.msg.find("one index per tuple"), std::string::npos) << r2.msg;
}

// Tensor.as_strided as the default exporter writes it (Swin-T's
// torch.flatten of its [N, C, 1, 1] pool): x [N, 3, 2] flattened, then a
// Gather by off + Range(0, N, 1) * s0 + Range(0, 3, 1) * s1 + Range(0, 2,
// 1) * s2, each unsqueezed to [N, 3, 2]'s rank. With off 0 and strides
// (6, 2, 1) the indices are the identity: an IR Reshape, y == x at batch 1
// and 3 (the reference: the same elements, as numpy's as_strided of a
// contiguous array with its own strides). Other strides or offsets, and a
// Range over N that does not start at 0, are refused naming the node.
void AsStrided(OnnxModel &m, int64_t off, int64_t s0, int64_t s1, int64_t s2, int64_t start) {
  m.Input("x", {kBatch, 3, 2});
  m.InitI64("flat", {1}, {-1});
  m.InitI64("i0", {}, {start});
  m.InitI64("i1", {}, {1});
  m.InitI64("three", {}, {3});
  m.InitI64("two", {}, {2});
  m.InitI64("off", {}, {off});
  m.InitI64("s0", {}, {s0});
  m.InitI64("s1", {}, {s1});
  m.InitI64("s2", {}, {s2});
  m.InitI64("zero", {}, {0});
  m.InitI64("ax0", {1}, {0});
  m.InitI64("ax12", {2}, {1, 2});
  m.InitI64("ax01", {2}, {0, 1});
  m.InitI64("ax02", {2}, {0, 2});
  m.Node("Reshape", {"x", "flat"}, {"xf"});
  m.Node("Shape", {"x"}, {"s"});
  m.Node("Gather", {"s", "zero"}, {"n"}, {m.Int("axis", 0)});
  m.Node("Range", {"i0", "n", "i1"}, {"rn"});
  m.Node("Mul", {"rn", "s0"}, {"a0"});
  m.Node("Unsqueeze", {"a0", "ax12"}, {"u0"}); // [N, 1, 1]
  m.Node("Add", {"off", "u0"}, {"b0"});
  m.Node("Range", {"zero", "three", "i1"}, {"r1"});
  m.Node("Mul", {"r1", "s1"}, {"a1"});
  m.Node("Unsqueeze", {"a1", "ax02"}, {"u1"}); // [1, 3, 1], a constant
  m.Node("Add", {"b0", "u1"}, {"b1"});
  m.Node("Range", {"zero", "two", "i1"}, {"r2"});
  m.Node("Mul", {"r2", "s2"}, {"a2"});
  m.Node("Unsqueeze", {"a2", "ax01"}, {"u2"}); // [1, 1, 2]
  m.Node("Add", {"b1", "u2"}, {"idx"});        // [N, 3, 2]
  m.Node("Gather", {"xf", "idx"}, {"y"}, {m.Int("axis", 0)});
  m.Output("y");
}

TEST(OnnxFold, AsStridedOverTheBatchIsAReshape) {
  OnnxModel m(18);
  AsStrided(m, 0, 6, 2, 1, 0);
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  EXPECT_EQ(r.g->n_nodes, 2) << "the flatten and the Gather, as Reshapes";
  EXPECT_EQ(CountOp(r.g, GCC_OP_RESHAPE), 2);
  for (int64_t b : {1, 3}) {
    std::vector<float> x = Count(6 * b);
    EXPECT_EQ(RunCpu(r.g, x, b), x);
  }
  struct Bad {
    int64_t off, s0, s1, s2, start;
    const char *what;
  } bad[] = {
      {0, 6, 1, 3, 0, "not the identity"}, // a transpose of the last two dims
      {1, 6, 2, 1, 0, "not the identity"}, // shifted by one element
      {0, 6, 2, 1, 1, "Range(0, k x N"},   // Range(1, N, 1)
  };
  for (const Bad &c : bad) {
    OnnxModel m2(18);
    AsStrided(m2, c.off, c.s0, c.s1, c.s2, c.start);
    Imported r2;
    Import(m2, &r2);
    EXPECT_EQ(r2.status, GCC_ERR_UNSUPPORTED) << c.what;
    EXPECT_NE(r2.msg.find(c.what), std::string::npos) << r2.msg;
  }
  // an index tensor over N read by anything else is refused naming it
  OnnxModel m3(18);
  m3.Input("x", {kBatch, 3});
  m3.InitI64("i0", {}, {0});
  m3.InitI64("i1", {}, {1});
  m3.InitI64("nonaffine", {3}, {0, 1, 5});
  m3.Node("Shape", {"x"}, {"s"});
  m3.Node("Gather", {"s", "i0"}, {"n"}, {m3.Int("axis", 0)});
  m3.Node("Range", {"i0", "n", "i1"}, {"r"});
  m3.Node("Unsqueeze", {"r", "i1"}, {"ru"}); // [N, 1]
  m3.Node("Add", {"ru", "nonaffine"}, {"y"});
  m3.Output("y");
  Imported r3;
  Import(m3, &r3);
  EXPECT_EQ(r3.status, GCC_ERR_UNSUPPORTED);
  EXPECT_NE(r3.msg.find("not an affine function"), std::string::npos) << r3.msg;
}

} // namespace
