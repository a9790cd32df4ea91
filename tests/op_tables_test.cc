// op_tables_test: every per-layer op table has an entry for every op of
// graph/ops.h's GCC_OP_LIST, and the entries agree with each other; and no
// file of the libraries or programs outside those tables switches over ops.
//
// The tables (designated initializers, each pinned to GCC_OP_COUNT by a
// _Static_assert, so a new op fails to compile until every table has been
// visited):
//   graph/ops.c              gcc_op()           name, arity, attributes, shape, FLOPs, semantics
//   passes/grad_rules.c      gcc_grad_rule_of() the gradient rule, or why there is none
//   runtime/cpu/cpu_ops.c    gcc_cpu_op_of()    the CPU kernel and its workspace, or a view
//   codegen/lowering.c       gcc_lowering_of()  what the op becomes on a CUDA device
//   runtime/cuda/cuda_ops.c  gcc_cuda_op_of()   the CUDA backend's library call
//   passes/autocast.c        gcc_autocast_class_name() the mixed-precision class
//   onnx/export.c            gcc_onnx_export_op_of() the ONNX op of an inference node, or why none
// An entry left out of a table reads as all zeros; every check below fails
// on such an entry, naming the op and the table.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "onnx/export.h"
#include "passes/grad_rules.h"
#include "passes/passes.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cuda/cuda_ops.h"
}
#include "tests/testutil.h"

namespace {

using gcc_test::ReadText;
using gcc_test::Runfile;

std::string Name(int op) {
  return std::string(gcc_op_name(op)) + " (op " + std::to_string(op) + ")";
}

TEST(OpTables, GraphTableDescribesEveryOp) {
  for (int op = 0; op < GCC_OP_COUNT; op++) {
    const gcc_op_desc *d = gcc_op(op);
    ASSERT_NE(d, nullptr) << Name(op);
    ASSERT_NE(d->name, nullptr) << "graph/ops.c kOps has no entry for op " << op;
    EXPECT_EQ(gcc_op_lookup(d->name), op) << Name(op) << ": the name must match GCC_OP_LIST";
    EXPECT_NE(d->shape, nullptr) << Name(op) << " has no shape function (graph/ops.c)";
    EXPECT_NE(d->semantics, nullptr) << Name(op) << " cites no semantics (graph/ops.c)";
    EXPECT_NE(d->input_names, nullptr) << Name(op);
    EXPECT_GE(d->max_inputs, d->min_inputs) << Name(op);
    EXPECT_EQ(d->n_attrs == 0, d->attrs == nullptr) << Name(op);
  }
  EXPECT_EQ(gcc_op(GCC_OP_COUNT), nullptr);
  EXPECT_EQ(gcc_op(-1), nullptr);
}

TEST(OpTables, GradientTableHasEveryOp) {
  for (int op = 0; op < GCC_OP_COUNT; op++) {
    const gcc_grad_rule *r = gcc_grad_rule_of(op);
    ASSERT_NE(r, nullptr) << Name(op);
    EXPECT_TRUE((r->fn != nullptr) != (r->none != nullptr))
        << Name(op) << ": passes/grad_rules.c kGradRules needs exactly one of .fn and .none";
    // ops the passes make (gradients, copies, updates) have no gradient of their own;
    // but ReduceSumTo, which the importer also makes (ReduceSum / ReduceMean over any
    // axes, graph/ops.h), has one (an Expand of dY: passes/grad_rules.c)
    unsigned made = GCC_OPF_INTERNAL | GCC_OPF_OPTIMIZER | GCC_OPF_COPY;
    if ((gcc_op(op)->flags & made) && op != GCC_OP_REDUCE_SUM_TO) {
      EXPECT_EQ(r->fn, nullptr) << Name(op);
    }
  }
  EXPECT_EQ(gcc_grad_rule_of(GCC_OP_COUNT), nullptr);
}

TEST(OpTables, AutocastTableHasEveryOp) {
  for (int op = 0; op < GCC_OP_COUNT; op++) {
    const char *c = gcc_autocast_class_name(op);
    ASSERT_NE(c, nullptr) << Name(op) << ": passes/autocast.c kAutocast has no entry";
    // what mixed precision may put in 16 bits, the lower layers must run so:
    // a "low" or "promote" op is a GEMM, a library call (cuDNN), a pointwise
    // op, a view or a generated kernel that loads and stores 16 bits
    // (kernel16) on a GPU, a library call's fallback kernel (a pooling cuDNN
    // cannot express) is a 16-bit one too, and the CPU runs it (in float32, through
    // the plan's shadows)
    const gcc_lowering *l = gcc_lowering_of(op);
    if (strcmp(c, "low") == 0 || strcmp(c, "promote") == 0) {
      gcc_lowering_kind k = l->kind;
      EXPECT_TRUE(k == GCC_LOWER_GEMM || k == GCC_LOWER_LIBRARY || k == GCC_LOWER_POINTWISE ||
                  k == GCC_LOWER_VIEW || (k == GCC_LOWER_KERNEL && l->kernel16))
          << Name(op) << " (" << c << ")";
      if (k == GCC_LOWER_LIBRARY && l->kernel) { // (a batched MatMul's is float32: FP32)
        EXPECT_TRUE(l->kernel16) << Name(op) << " (" << c << "): its generated kernel";
      }
      EXPECT_TRUE(gcc_cpu_supports_op(op)) << Name(op);
    }
    // kernel16 marks a generated kernel
    if (l->kernel16) {
      EXPECT_NE(l->kernel, nullptr) << Name(op);
    }
    // the ops that read 16 bits themselves are the ones autocast keeps
    if (gcc_cpu_op_of(op)->reads_16bit) {
      EXPECT_STREQ(c, "keep") << Name(op);
    }
  }
  EXPECT_EQ(gcc_autocast_class_name(GCC_OP_COUNT), nullptr);
}

TEST(OpTables, CpuTableHasEveryOp) {
  for (int op = 0; op < GCC_OP_COUNT; op++) {
    const gcc_cpu_op *c = gcc_cpu_op_of(op);
    ASSERT_NE(c, nullptr) << Name(op);
    int set = (c->kernel != nullptr) + (c->view != 0) + (c->none != nullptr);
    EXPECT_EQ(set, 1) << Name(op)
                      << ": runtime/cpu/cpu_ops.c kCpuOps needs exactly one of .kernel, .view "
                         "and .none";
    EXPECT_EQ(c->view != 0, (gcc_op(op)->flags & GCC_OPF_ALIAS) != 0)
        << Name(op) << ": a view on the CPU exactly when graph/ops.c says GCC_OPF_ALIAS";
    if (c->workspace) {
      EXPECT_NE(c->kernel, nullptr) << Name(op);
    }
    EXPECT_EQ(gcc_cpu_supports_op(op), c->kernel != nullptr || c->view) << Name(op);
  }
  EXPECT_EQ(gcc_cpu_op_of(GCC_OP_COUNT), nullptr);
}

TEST(OpTables, CudaLoweringTableHasEveryOp) {
  for (int op = 0; op < GCC_OP_COUNT; op++) {
    const gcc_lowering *l = gcc_lowering_of(op);
    ASSERT_NE(l, nullptr) << Name(op);
    ASSERT_NE(l->kind, GCC_LOWER_UNSET)
        << Name(op) << ": codegen/lowering.c kLowering has no entry";
    ASSERT_LT(l->kind, GCC_LOWERING_KIND_COUNT) << Name(op);
    const unsigned flags = gcc_op(op)->flags;
    switch (l->kind) {
    case GCC_LOWER_NONE: EXPECT_NE(l->none, nullptr) << Name(op) << ": say why"; break;
    case GCC_LOWER_POINTWISE:
      // one of the two: a fixed expression, or one chosen per node
      EXPECT_NE(l->expr == nullptr, l->expr_of == nullptr) << Name(op);
      break;
    case GCC_LOWER_LIBRARY: EXPECT_NE(l->call, nullptr) << Name(op); break;
    case GCC_LOWER_LOSS:
      EXPECT_TRUE(flags & GCC_OPF_LOSS) << Name(op);
      EXPECT_NE(l->emit, nullptr) << Name(op);
      ASSERT_GE(l->loss_grad, 0) << Name(op);
      ASSERT_LT(l->loss_grad, GCC_OP_COUNT) << Name(op);
      EXPECT_EQ(gcc_lowering_of(l->loss_grad)->kind, GCC_LOWER_LOSS_GRAD) << Name(op);
      EXPECT_EQ(gcc_lowering_of(l->loss_grad)->emit, l->emit) << Name(op);
      break;
    case GCC_LOWER_LOSS_GRAD: EXPECT_NE(l->emit, nullptr) << Name(op); break;
    case GCC_LOWER_KERNEL: EXPECT_NE(l->kernel, nullptr) << Name(op); break;
    case GCC_LOWER_OPTIMIZER:
      EXPECT_TRUE(flags & GCC_OPF_OPTIMIZER) << Name(op);
      EXPECT_NE(l->emit, nullptr) << Name(op);
      break;
    default: break;
    }
    EXPECT_EQ(l->kind == GCC_LOWER_VIEW, (flags & GCC_OPF_ALIAS) != 0) << Name(op);
    EXPECT_EQ(l->kind == GCC_LOWER_COPY, (flags & GCC_OPF_COPY) != 0) << Name(op);
    if (l->kind != GCC_LOWER_POINTWISE) {
      EXPECT_EQ(l->expr, nullptr) << Name(op);
      EXPECT_EQ(l->expr_of, nullptr) << Name(op);
    }
    if (l->epilogue == GCC_EPIROLE_RELU || l->epilogue == GCC_EPIROLE_RELU_GRAD) {
      EXPECT_EQ(l->kind, GCC_LOWER_POINTWISE) << Name(op);
    }
    if (l->epilogue == GCC_EPIROLE_BIAS_GRAD) {
      EXPECT_EQ(l->kind, GCC_LOWER_REDUCTION) << Name(op);
    }
    // a fit test only where a library (or a pointwise expression: Dropout,
    // the identity but in training) can refuse a node, with the kernel that
    // then runs it
    if (l->fits) {
      EXPECT_TRUE(l->kind == GCC_LOWER_GEMM || l->kind == GCC_LOWER_LIBRARY ||
                  l->kind == GCC_LOWER_POINTWISE)
          << Name(op);
      EXPECT_NE(l->kernel, nullptr) << Name(op);
    }
    if (l->kernel) {
      EXPECT_TRUE(l->kind == GCC_LOWER_KERNEL || l->fits != nullptr) << Name(op);
    }
    if (l->gemm_attrs) {
      EXPECT_EQ(l->kind, GCC_LOWER_GEMM) << Name(op);
    }
    EXPECT_EQ(gcc_cuda_supports_op(op), l->kind != GCC_LOWER_NONE) << Name(op);
  }
  EXPECT_EQ(gcc_lowering_of(GCC_OP_COUNT), nullptr);
}

TEST(OpTables, CudaBackendTableHasEveryOp) {
  for (int op = 0; op < GCC_OP_COUNT; op++) {
    const gcc_cuda_op *c = gcc_cuda_op_of(op);
    ASSERT_NE(c, nullptr) << Name(op);
    ASSERT_NE(c->call, GCC_CUDA_CALL_UNSET)
        << Name(op) << ": runtime/cuda/cuda_ops.c kCudaOps has no entry";
    bool library = gcc_lowering_of(op)->kind == GCC_LOWER_LIBRARY;
    EXPECT_EQ(c->call != GCC_CUDA_CALL_NONE, library)
        << Name(op) << ": a library call on the CUDA backend exactly when codegen lowers it so";
    if (c->call == GCC_CUDA_CALL_NONE) {
      EXPECT_NE(c->none, nullptr) << Name(op);
      continue;
    }
    // every operand slot names an input or output the op has
    const gcc_op_desc *d = gcc_op(op);
    for (int slot : {c->xs, c->ws, c->x, c->w, c->b, c->y, c->dx, c->dw, c->db, c->dy}) {
      if (slot > 0) {
        EXPECT_LE(slot, d->max_inputs) << Name(op);
      }
      if (slot < 0) {
        EXPECT_LE(-slot, d->n_outputs) << Name(op);
      }
    }
    bool pool = c->call == GCC_CUDA_CALL_POOL_FORWARD || c->call == GCC_CUDA_CALL_POOL_BACKWARD;
    if (pool) {
      EXPECT_NE(c->xs, 0) << Name(op) << ": a pooling's X shape";
    }
    if (c->call == GCC_CUDA_CALL_CONV_FORWARD || c->call == GCC_CUDA_CALL_CONV_BACKWARD_DATA ||
        c->call == GCC_CUDA_CALL_CONV_TRANSPOSE || c->call == GCC_CUDA_CALL_CONV_BACKWARD_FILTER) {
      EXPECT_NE(c->xs, 0) << Name(op);
      EXPECT_NE(c->ws, 0) << Name(op);
    }
  }
  EXPECT_EQ(gcc_cuda_op_of(GCC_OP_COUNT), nullptr);
}

TEST(OpTables, OnnxExportTableHasEveryOp) {
  const unsigned training = GCC_OPF_INTERNAL | GCC_OPF_OPTIMIZER | GCC_OPF_LOSS | GCC_OPF_COPY |
                            GCC_OPF_COLLECTIVE | GCC_OPF_FUSED;
  for (int op = 0; op < GCC_OP_COUNT; op++) {
    const gcc_onnx_export_op *e = gcc_onnx_export_op_of(op);
    ASSERT_NE(e, nullptr) << Name(op);
    EXPECT_TRUE((e->onnx != nullptr) != (e->none != nullptr))
        << Name(op) << ": onnx/export.c kOnnxExport needs exactly one of .onnx and .none";
    EXPECT_EQ(e->onnx == nullptr, (gcc_op(op)->flags & training) != 0)
        << Name(op) << ": an op of inference graphs maps to ONNX, a training op says why not";
  }
  EXPECT_EQ(gcc_onnx_export_op_of(GCC_OP_COUNT), nullptr);
}

// ---- nothing outside the tables dispatches on ops ---------------------------

const char *const kTableFiles[] = {
    "graph/ops.c",        "passes/grad_rules.c",     "runtime/cpu/cpu_ops.c",
    "codegen/lowering.c", "runtime/cuda/cuda_ops.c", "onnx/export.c",
    "passes/autocast.c",
};

TEST(OpTables, NoFileOutsideTheTablesSwitchesOverOps) {
  std::string list = ReadText(Runfile("tests/library_sources.txt"));
  ASSERT_FALSE(list.empty()) << "tests/library_sources.txt is not in the runfiles";
  // a `switch` over an op, a `case` label of one, or a comparison with one
  const std::regex dispatch(
      R"((\bswitch\s*\([^)]*\bop\s*\))|(\bcase\s+GCC_OP_\w+)|([=!]=\s*GCC_OP_(?!COUNT\b)\w+)|(GCC_OP_(?!COUNT\b)\w+\s*[=!]=))");
  std::istringstream files(list);
  std::string path;
  int n_files = 0;
  std::vector<std::string> found;
  while (std::getline(files, path)) {
    if (path.empty())
      continue;
    bool table = false;
    for (const char *t : kTableFiles)
      table |= path == t;
    if (table)
      continue;
    std::string text = ReadText(Runfile(path));
    ASSERT_FALSE(text.empty()) << path << " not readable from the test";
    n_files++;
    std::istringstream lines(text);
    std::string line;
    for (int no = 1; std::getline(lines, line); no++)
      if (std::regex_search(line, dispatch))
        found.push_back(path + ":" + std::to_string(no) + ": " + line);
  }
  EXPECT_GT(n_files, 50) << "the source list looks truncated";
  for (const std::string &f : found)
    ADD_FAILURE() << "dispatch over ops outside the per-layer tables (move it into a table): " << f;
}

// The pattern itself must catch what it is meant to catch (a test that
// cannot fail is no test).
TEST(OpTables, ThePatternCatchesDispatch) {
  const std::regex dispatch(
      R"((\bswitch\s*\([^)]*\bop\s*\))|(\bcase\s+GCC_OP_\w+)|([=!]=\s*GCC_OP_(?!COUNT\b)\w+)|(GCC_OP_(?!COUNT\b)\w+\s*[=!]=))");
  for (const char *bad : {"switch (n->op) {", "  case GCC_OP_RELU:", "if (op == GCC_OP_GEMM)",
                          "x = n->op != GCC_OP_ADD;", "if (GCC_OP_CONV == op)"})
    EXPECT_TRUE(std::regex_search(std::string(bad), dispatch)) << bad;
  for (const char *ok :
       {"int n = gcc_build_op(b, GCC_OP_RELU, \"r\", \"y\", &x, 1);",
        "_Static_assert(GCC_OP_COUNT == 26, \"\");", "if (op < 0 || op >= GCC_OP_COUNT)"})
    EXPECT_FALSE(std::regex_search(std::string(ok), dispatch)) << ok;
}

} // namespace
