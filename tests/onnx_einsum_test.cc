// onnx_einsum_test (part of the onnx_fold_test target): ONNX Einsum-12,
// which the importer lowers onto Transpose, Reshape, MatMul, ReduceSumTo
// and Slice (onnx/import_ops_einsum.c), against a float64 reference written
// here: a loop over every assignment of the letters, the product of the
// operands' elements summed into the output's (numpy.einsum's definition;
// a dim of size 1 where the letter is larger broadcasts). Each graph is
// built with tests/onnx_builder.h and run on the CPU plan. The equations:
// MaxViT-T's two (as PyTorch's default exporter writes them: upper case,
// spaces), the batched matrix product, transpose, ellipsis with broadcast,
// diagonals, sums, implicit outputs and three operands; then the refusals,
// which name the node and the equation.
#include <cmath>
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

struct Imported {
  gcc_status status = GCC_OK;
  std::string msg;
  gcc_graph *g = nullptr;
  ~Imported() { gcc_graph_free(g); }
};

void Import(OnnxModel &m, Imported *r) {
  std::vector<uint8_t> bytes = m.Bytes();
  gcc_diag d{};
  gcc_onnx_options o{};
  r->status = gcc_onnx_import(bytes.data(), bytes.size(), "m.onnx", &o, &r->g, nullptr, &d);
  r->msg = d.msg;
}

void *BindWeights(void *user, const gcc_graph *g, int v) {
  const gcc_graph *m = static_cast<const gcc_graph *>(user);
  int mv = gcc_graph_find(m, g->values[v].name);
  return mv >= 0 ? m->values[mv].data : nullptr;
}

int CountOp(const gcc_graph *g, int op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].op == op;
  return n;
}

struct Operand {
  std::vector<int64_t> dims;
  std::vector<float> v;
};

// Deterministic values in [-1, 1) that are not all alike.
std::vector<float> Values(int64_t n, uint32_t seed) {
  std::vector<float> v((size_t)n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto &x : v) {
    s = s * 1664525u + 1013904223u;
    x = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return v;
}

int64_t Numel(const std::vector<int64_t> &d) {
  int64_t n = 1;
  for (int64_t x : d)
    n *= x;
  return n;
}

// The float64 reference. `eq` is explicit ("terms->out", letters only, no
// spaces, no "..."): the ellipsis cases give the equation with the
// ellipsis written as letters. *mag gets sum |products| per output element
// (for the tolerance), *terms the number of products summed per element.
std::vector<double> Reference(const std::string &eq, const std::vector<Operand> &ops,
                              std::vector<int64_t> *out_dims, std::vector<double> *mag,
                              int64_t *terms) {
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow), rhs = eq.substr(arrow + 2);
  std::vector<std::string> t;
  size_t s = 0;
  for (size_t i = 0; i <= lhs.size(); i++)
    if (i == lhs.size() || lhs[i] == ',') {
      t.push_back(lhs.substr(s, i - s));
      s = i + 1;
    }
  std::string letters;
  std::vector<int64_t> size;
  for (size_t k = 0; k < t.size(); k++)
    for (size_t j = 0; j < t[k].size(); j++) {
      size_t p = letters.find(t[k][j]);
      if (p == std::string::npos) {
        letters += t[k][j];
        size.push_back(ops[k].dims[j]);
      } else if (ops[k].dims[j] > size[p]) {
        size[p] = ops[k].dims[j];
      }
    }
  out_dims->clear();
  for (char ch : rhs)
    out_dims->push_back(size[letters.find(ch)]);
  std::vector<double> y((size_t)Numel(*out_dims), 0.0);
  mag->assign(y.size(), 0.0);
  std::vector<int64_t> idx(letters.size(), 0);
  int64_t all = Numel(size);
  *terms = all / Numel(*out_dims);
  for (int64_t it = 0; it < all; it++) {
    double p = 1.0;
    for (size_t k = 0; k < t.size(); k++) {
      int64_t off = 0;
      for (size_t j = 0; j < t[k].size(); j++) {
        int64_t dk = ops[k].dims[j];
        off = off * dk + (dk == 1 ? 0 : idx[letters.find(t[k][j])]);
      }
      p *= ops[k].v[(size_t)off];
    }
    int64_t o = 0;
    for (size_t j = 0; j < rhs.size(); j++)
      o = o * (*out_dims)[j] + idx[letters.find(rhs[j])];
    y[(size_t)o] += p;
    (*mag)[(size_t)o] += std::fabs(p);
    for (int q = (int)letters.size() - 1; q >= 0; q--) {
      if (++idx[(size_t)q] < size[(size_t)q])
        break;
      idx[(size_t)q] = 0;
    }
  }
  return y;
}

// Imports Einsum(eq) of the operands (input k named "x<k>"; batch_dim0:
// dim 0 of every input is the symbolic batch, run at the operands' dim 0),
// runs it on the CPU and compares with Reference(ref_eq). Returns the graph's
// node counts by op through *g_out when given.
void Check(const std::string &eq, const std::string &ref_eq, const std::vector<Operand> &ops,
           bool batch_dim0 = false, std::vector<int> *ir_ops = nullptr) {
  SCOPED_TRACE("equation '" + eq + "'");
  OnnxModel m(20);
  std::vector<std::string> names;
  for (size_t k = 0; k < ops.size(); k++) {
    names.push_back("x" + std::to_string(k));
    std::vector<int64_t> dims = ops[k].dims;
    if (batch_dim0)
      dims[0] = kBatch;
    m.Input(names.back(), dims);
  }
  m.Node("Einsum", names, {"y"}, {m.String("equation", eq)}, "ein");
  m.Output("y");
  Imported r;
  Import(m, &r);
  ASSERT_EQ(r.status, GCC_OK) << r.msg;
  if (ir_ops)
    for (int op = 0; op < GCC_OP_COUNT; op++)
      ir_ops->push_back(CountOp(r.g, op));
  gcc_options o{};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = batch_dim0 ? ops[0].dims[0] : 1;
  o.device = GCC_DEV_CPU;
  o.n_cuda_devices = 1;
  gcc_plan *p = nullptr;
  gcc_diag d{};
  gcc_plan_config cfg{};
  cfg.threads = 1;
  cfg.readback_ring = 1;
  ASSERT_EQ(gcc_plan_compile(r.g, &o, &cfg, BindWeights, r.g, &p, &d), GCC_OK) << d.msg;
  for (size_t k = 0; k < ops.size(); k++)
    ASSERT_EQ(gcc_plan_bind_input(p, names[k].c_str(), ops[k].v.data(), &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_plan_run(p, 0, &d), GCC_OK) << d.msg;
  const gcc_tensor *t = gcc_plan_tensor(p, "y");
  ASSERT_NE(t, nullptr);
  std::vector<int64_t> dims;
  std::vector<double> mag;
  int64_t terms = 0;
  std::vector<double> ref = Reference(ref_eq, ops, &dims, &mag, &terms);
  ASSERT_EQ(t->shape.ndim, (int)dims.size());
  for (size_t i = 0; i < dims.size(); i++)
    EXPECT_EQ(t->shape.dims[i], dims[i]) << "dim " << i;
  ASSERT_EQ(t->numel, (int64_t)ref.size());
  const float *y = static_cast<const float *>(t->data);
  for (size_t i = 0; i < ref.size(); i++) {
    // The inputs are the same float32 numbers in both; the float32 result
    // is a sum of `terms` products of up to 3 factors: each product rounds
    // at most twice and each addition once (<= 2^-24 relative each), so
    // |y - ref| <= (terms + 2) * 2^-24 * sum |products|, and the final
    // rounding of y; 2x that for the order of the summation's partial sums.
    double tol = 2.0 * (double)(terms + 2) * 5.97e-8 * mag[i] + 1e-30;
    EXPECT_NEAR(y[i], ref[i], tol) << "element " << i;
  }
  gcc_plan_free(p);
}

Operand Op(std::vector<int64_t> dims, uint32_t seed) {
  return {dims, Values(Numel(dims), seed)};
}

// MaxViT-T's attention, as the default exporter writes it (opset 20): the
// scores q k^T and the weighted values, batch dims B G H; B the symbolic
// batch (run at 2). The first is one Transpose (of k) and one MatMul, the
// second one MatMul.
TEST(OnnxEinsum, MaxVitAttentionEquations) {
  std::vector<int> ops;
  Check("B G H I D, B G H J D -> B G H I J", "BGHID,BGHJD->BGHIJ",
        {Op({2, 2, 3, 4, 5}, 1), Op({2, 2, 3, 6, 5}, 2)}, true, &ops);
  EXPECT_EQ(ops[GCC_OP_MATMUL], 1);
  EXPECT_EQ(ops[GCC_OP_TRANSPOSE], 1);
  EXPECT_EQ(ops[GCC_OP_REDUCE_SUM_TO], 0);
  ops.clear();
  Check("B G H I J, B G H J D -> B G H I D", "BGHIJ,BGHJD->BGHID",
        {Op({2, 2, 3, 4, 6}, 3), Op({2, 2, 3, 6, 5}, 4)}, true, &ops);
  EXPECT_EQ(ops[GCC_OP_MATMUL], 1);
  EXPECT_EQ(ops[GCC_OP_TRANSPOSE], 0);
  EXPECT_EQ(ops[GCC_OP_RESHAPE], 1); // into the output only
}

TEST(OnnxEinsum, MatrixProductsAndTranspose) {
  Check("bij,bjk->bik", "bij,bjk->bik", {Op({3, 2, 4}, 5), Op({3, 4, 5}, 6)});
  Check("bij, bjk -> bik", "bij,bjk->bik", {Op({5, 2, 3}, 7), Op({5, 3, 4}, 8)});
  Check("ij->ji", "ij->ji", {Op({3, 4}, 9)});
  Check("ij,jk", "ij,jk->ik", {Op({3, 4}, 10), Op({4, 2}, 11)}); // implicit
  Check("ba,ca", "ba,ca->bc", {Op({3, 4}, 12), Op({2, 4}, 13)}); // implicit, sorted
  Check("i,j->ij", "i,j->ij", {Op({3}, 14), Op({4}, 15)});       // outer product
  Check("i,i", "i,i->", {Op({5}, 16), Op({5}, 17)});             // inner product: a scalar
  Check("ijk,jl->lki", "ijk,jl->lki", {Op({2, 3, 4}, 18), Op({3, 5}, 19)});
  Check("abcd,cbe->aed", "abcd,cbe->aed", {Op({2, 3, 4, 2}, 20), Op({4, 3, 5}, 21)});
  Check("Ab,bA->A", "Ab,bA->A", {Op({3, 4}, 22), Op({4, 3}, 23)}); // a batch dim in both
}

TEST(OnnxEinsum, EllipsisBroadcast) {
  Check("...ij,...jk->...ik", "xyij,xyjk->xyik", {Op({2, 3, 4, 5}, 24), Op({2, 3, 5, 2}, 25)});
  // ranks differ: the missing leading dims of the second broadcast
  Check("...ij,...jk->...ik", "xyij,yjk->xyik", {Op({2, 3, 4, 5}, 26), Op({3, 5, 2}, 27)});
  // a dim of size 1 broadcasts against 3
  Check("...ij,...jk->...ik", "xyij,yjk->xyik", {Op({2, 1, 4, 5}, 28), Op({3, 5, 2}, 29)});
  Check("...ij->...ji", "xij->xji", {Op({2, 3, 4}, 30)});
  Check("i...,i...", "ixy,ixy->xy",
        {Op({3, 2, 4}, 31), Op({3, 2, 4}, 32)}); // implicit: "..." first
}

TEST(OnnxEinsum, DiagonalsAndSums) {
  Check("ii->i", "ii->i", {Op({4, 4}, 33)});
  Check("...ii ->...i", "xii->xi", {Op({3, 5, 5}, 34)}); // ONNX's test_einsum_batch_diagonal
  Check("ii", "ii->", {Op({4, 4}, 35)});                 // implicit: the trace
  Check("iji->j", "iji->j", {Op({3, 2, 3}, 36)});
  Check("ij->i", "ij->i", {Op({3, 4}, 37)});
  Check("ijk->", "ijk->", {Op({2, 3, 4}, 38)});
  Check("ij,kl->ik", "ij,kl->ik", {Op({2, 3}, 39), Op({4, 5}, 40)}); // j, l summed alone
  Check("ii,ij->j", "ii,ij->j", {Op({3, 3}, 41), Op({3, 4}, 42)});
}

TEST(OnnxEinsum, ThreeOperandsFoldLeftToRight) {
  Check("ij,jk,kl->il", "ij,jk,kl->il", {Op({2, 3}, 43), Op({3, 4}, 44), Op({4, 5}, 45)});
  Check("bi,bj,bk->bijk", "bi,bj,bk->bijk", {Op({2, 3}, 46), Op({2, 2}, 47), Op({2, 4}, 48)});
  Check("i,ij,j", "i,ij,j->", {Op({3}, 49), Op({3, 4}, 50), Op({4}, 51)});
}

void ExpectRefused(const std::string &eq, const std::vector<std::vector<int64_t>> &dims,
                   gcc_status want, const std::string &why) {
  SCOPED_TRACE("equation '" + eq + "'");
  OnnxModel m(20);
  std::vector<std::string> names;
  for (size_t k = 0; k < dims.size(); k++) {
    names.push_back("x" + std::to_string(k));
    m.Input(names.back(), dims[k]);
  }
  m.Node("Einsum", names, {"y"}, {m.String("equation", eq)}, "ein");
  m.Output("y");
  Imported r;
  Import(m, &r);
  EXPECT_EQ(r.status, want) << r.msg;
  EXPECT_NE(r.msg.find("node 'ein' (Einsum): equation '" + eq + "': " + why), std::string::npos)
      << r.msg;
}

TEST(OnnxEinsum, RefusalsNameTheNodeAndTheEquation) {
  ExpectRefused("ij,jk->ik", {{2, 3}, {4, 5}}, GCC_ERR_SHAPE, "letter 'j' has sizes 3 and 4");
  ExpectRefused("ij->k", {{2, 3}}, GCC_ERR_INVALID_GRAPH, "an output letter appears in no input");
  ExpectRefused("ij->ii", {{2, 3}}, GCC_ERR_INVALID_GRAPH, "an output letter repeats");
  ExpectRefused("ij,jk,k->i", {{2, 3}, {3, 4}}, GCC_ERR_INVALID_GRAPH, "it has more terms than");
  ExpectRefused("ij", {{2, 3}, {3, 4}}, GCC_ERR_INVALID_GRAPH, "it has fewer terms than");
  ExpectRefused("ijk->i", {{2, 3}}, GCC_ERR_SHAPE, "term 1 names 3 dims; input 0 has rank 2");
  ExpectRefused("i.j->i", {{2, 3}}, GCC_ERR_INVALID_GRAPH, "a '.' that is not part of");
  ExpectRefused("i1->i", {{2, 3}}, GCC_ERR_INVALID_GRAPH, "character '1' is not a letter");
  ExpectRefused("...i,...i->i", {{2, 3}, {4, 3}}, GCC_ERR_SHAPE,
                "ellipsis dims of sizes 2 and 4 do not broadcast");
  ExpectRefused("...i,...i->i", {{1, 3}, {4, 3}}, GCC_ERR_UNSUPPORTED,
                "an ellipsis dim that broadcasts is summed");
}

} // namespace
