// layout_test: the layout pass (passes/layout.c) and the NHWC CUDA plan
// without a GPU.
//
// A ResNet-style block (conv-BN-ReLU-conv-BN-add-ReLU, max pooling, global
// average pooling, Gemm) is trained as a CUDA plan on the host backend
// (tests/host_backend.h: generated kernels host-emulated, cuDNN's calls as
// the CPU kernels on the operands' memory order, NHWC included) with
// --layout nhwc and with --layout nchw, and on the CPU backend; the
// compiled graph's layouts, the conversions --dump-placement lists, the
// rules of --layout auto and NVRTC's compilation of the NHWC plan's
// kernels are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "codegen/lowering.h"
#include "codegen/nvrtc.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "passes/passes.h"
#include "runtime/compile.h"
#include "runtime/placement_report.h"
#include "runtime/session.h"
}
#include "tests/host_backend.h"
#include "tests/kernel_emulation.h"
#include "tests/test_graphs.h"
#include "tests/test_kernel_cache.h"

namespace {

using gcc_host_test::HostBackend;
using gcc_test::FinishInlineTraining;
using gcc_test::Opt;

constexpr int64_t kBatch = 4, kClasses = 5;

int BatchNorm(gcc_builder *b, const char *name, int x, int64_t c) {
  std::vector<float> scale(c), shift(c), mean(c, 0.0f), var(c, 1.0f);
  for (int64_t i = 0; i < c; i++) {
    scale[i] = 0.75f + 0.125f * (float)(i % 3);
    shift[i] = 0.05f * (float)(i % 4) - 0.1f;
  }
  int64_t cd[1] = {c};
  std::string n(name);
  int in[5] = {x, gcc_build_param(b, (n + ".scale").c_str(), 1, cd, scale.data()),
               gcc_build_param(b, (n + ".bias").c_str(), 1, cd, shift.data()),
               gcc_build_param(b, (n + ".running_mean").c_str(), 1, cd, mean.data()),
               gcc_build_param(b, (n + ".running_var").c_str(), 1, cd, var.data())};
  return gcc_build_op(b, GCC_OP_BATCH_NORM, name, (n + ".out").c_str(), in, 5);
}

// x [N, 3, 8, 8] -> conv1 3x3 -> bn1 -> relu1 -> conv2 3x3 -> bn2 -> + relu1
// -> relu2 -> maxpool 2x2 -> global average pool (AveragePool 4x4, as ONNX
// GlobalAveragePool imports) -> flatten -> fc -> cross-entropy; SGD.
gcc_graph *ResidualBlock() {
  gcc_builder *b = gcc_builder_new("resnet_block", 29);
  int64_t xd[4] = {GCC_BATCH_DIM, 3, 8, 8}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 4, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int h = gcc_build_conv2d(b, "conv1", x, 3, 8, 3, 1, 1);
  int r1 = gcc_build_relu(b, "relu1", BatchNorm(b, "bn1", h, 8));
  h = BatchNorm(b, "bn2", gcc_build_conv2d(b, "conv2", r1, 8, 8, 3, 1, 1), 8);
  int add_in[2] = {h, r1};
  h = gcc_build_relu(b, "relu2", gcc_build_op(b, GCC_OP_ADD, "add", "add.out", add_in, 2));
  h = gcc_build_max_pool2d(b, "pool", h, 2, 2);
  h = gcc_build_op(b, GCC_OP_AVERAGE_POOL, "gap", "gap.out", &h, 1);
  int64_t ks[2] = {4, 4}, st[2] = {1, 1};
  gcc_build_set_ints(b, h, "kernel_shape", ks, 2);
  gcc_build_set_ints(b, h, "strides", st, 2);
  h = gcc_build_flatten(b, "flatten", h, 1);
  int logits = gcc_build_linear(b, "fc", h, 8, kClasses);
  gcc_build_output(b, gcc_build_cross_entropy(b, "loss", logits, y, -1));
  gcc_graph *g =
      FinishInlineTraining(b, "loss", "fc.out", "image", "label", Opt(GCC_OPT_SGD, 0.1f, 0.9f));
  if (g)
    for (int v = 0; v < g->n_values; v++)
      g->values[v].state |= strstr(g->values[v].name, ".running_") != nullptr;
  return g;
}

struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
};

Batch MakeBatch(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Batch b{std::vector<float>((size_t)(kBatch * 3 * 8 * 8)), std::vector<int64_t>(kBatch)};
  for (float &v : b.x)
    v = n(rng);
  for (int64_t &v : b.y)
    v = (int64_t)(rng() % (uint32_t)kClasses);
  return b;
}

gcc_session_options Options(const gcc_graph *g, HostBackend *hb, int layout) {
  gcc_session_options so{};
  so.threads = 1;
  so.opt = g->training.opt;
  so.layout = layout;
  if (hb) {
    so.backend = &hb->be;
    so.device = GCC_DEV_CUDA(0);
    so.plan.sm = 90;
    so.plan.sm_count = 4;
    so.plan.compile = gcc_kernel_cache_hook;
    so.plan.compile_user = gcc_test::TestKernelCache();
    so.plan.cuda_graph = 1;
    so.max_pending = 1;
  }
  return so;
}

// The training graph as a CUDA plan compiles it (passes, fusion, memory plan).
gcc_graph *CompileCuda(const gcc_graph *model, int layout, int precision, gcc_mem_plan *mem,
                       std::string *err) {
  gcc_options o{};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = kBatch;
  o.opt = model->training.opt;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  o.precision = precision;
  o.layout = layout;
  FILE *sink = fopen("/dev/null", "w");
  o.warn_file = sink;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  gcc_status s = gcc_compile_graph(model, &o, &g, mem, &d);
  if (sink)
    fclose(sink);
  if (s != GCC_OK)
    *err = d.msg;
  return s == GCC_OK ? g : nullptr;
}

std::set<std::string> Conversions(const gcc_graph *g) {
  std::set<std::string> names;
  for (int i = 0; i < g->n_nodes; i++)
    if (gcc_layout_is_conversion(g, i))
      names.insert(g->nodes[i].name);
  return names;
}

int NhwcValues(const gcc_graph *g) {
  int n = 0;
  for (int v = 0; v < g->n_values; v++)
    n += g->values[v].layout == GCC_LAYOUT_NHWC;
  return n;
}

class Layout : public ::testing::Test {
protected:
  void SetUp() override {
    if (gcc_emu_test::ShimPath().empty())
      GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
    model_ = ResidualBlock();
    ASSERT_NE(model_, nullptr);
  }
  void TearDown() override { gcc_graph_free(model_); }
  gcc_graph *model_ = nullptr;
};

// The block trained 3 steps as an NHWC CUDA plan equals the NCHW plan and
// the CPU within a derived bound. On the host backend an NHWC cuDNN call is
// the CPU kernel on the operands read in NCHW order (the same float
// operations in the same order), conversions are exact copies and the
// elementwise kernels compute element by element; what differs is the
// BatchNorm kernels' summation order (NHWC: lanes over rows of a channel
// tile, codegen/emit_batchnorm.c). Each statistic sums M = 4*8*8 = 256
// float32 terms: Welford's mean and M2 differ between two orders by at most
// about M * 2^-24 = 1.5e-5 relative in the worst case, and by a few ulps in
// practice (random-sign rounding errors grow like sqrt(M)); the CPU backend
// sums in yet another order, and device_plan_test's CNNs hold the device to
// 1e-5 relative on losses and parameters after several steps: the same
// bound here, between all three. (On a GPU, cuDNN's NHWC algorithms also sum
// the convolutions in other orders: tests/gpu derives that bound.)
TEST_F(Layout, ResidualBlockTrainsInNhwcAsInNchwAndAsOnTheCpu) {
  HostBackend h_nhwc, h_nchw;
  gcc_session_options so_nhwc = Options(model_, &h_nhwc, GCC_LAYOUT_CHOOSE_NHWC),
                      so_nchw = Options(model_, &h_nchw, GCC_LAYOUT_CHOOSE_NCHW),
                      so_cpu = Options(model_, nullptr, GCC_LAYOUT_CHOOSE_NHWC);
  gcc_session *nhwc = nullptr, *nchw = nullptr, *cpu = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(model_, &so_nhwc, &nhwc, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(model_, &so_nchw, &nchw, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(model_, &so_cpu, &cpu, &d), GCC_OK) << d.msg;
  for (int s = 0; s < 3; s++) {
    Batch b = MakeBatch(40 + (uint32_t)s);
    float l1 = 0, l2 = 0, l3 = 0;
    ASSERT_EQ(gcc_session_train_step(nhwc, b.x.data(), b.y.data(), kBatch, &l1, &d), GCC_OK)
        << d.msg;
    ASSERT_EQ(gcc_session_train_step(nchw, b.x.data(), b.y.data(), kBatch, &l2, &d), GCC_OK)
        << d.msg;
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), kBatch, &l3, &d), GCC_OK)
        << d.msg;
    EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2))) << "step " << s;
    EXPECT_NEAR(l1, l3, 1e-5 * std::max(1.0f, std::fabs(l3))) << "step " << s;
  }
  // the NHWC plan really ran NHWC: its graph has NHWC values and conversions
  gcc_plan *p = nullptr;
  ASSERT_EQ(gcc_session_plan(nhwc, GCC_MODE_TRAIN, kBatch, &p, &d), GCC_OK) << d.msg;
  EXPECT_GT(NhwcValues(gcc_plan_graph(p)), 0);
  EXPECT_FALSE(Conversions(gcc_plan_graph(p)).empty());
  ASSERT_EQ(gcc_session_plan(nchw, GCC_MODE_TRAIN, kBatch, &p, &d), GCC_OK) << d.msg;
  EXPECT_EQ(NhwcValues(gcc_plan_graph(p)), 0);
  EXPECT_GT(h_nhwc.library_calls, 0);
  // parameters (and BatchNorm's running statistics) after 3 steps
  int compared = 0;
  for (int v = 0; v < model_->n_values; v++) {
    if (model_->values[v].kind != GCC_VALUE_PARAM)
      continue;
    float *a = nullptr, *b = nullptr, *c = nullptr;
    int64_t na = 0, nb = 0, nc = 0;
    const char *name = model_->values[v].name;
    ASSERT_EQ(gcc_session_param(nhwc, name, &a, &na, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_param(nchw, name, &b, &nb, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_param(cpu, name, &c, &nc, &d), GCC_OK) << d.msg;
    ASSERT_EQ(na, nb);
    ASSERT_EQ(na, nc);
    double m = 0, e = 0, e2 = 0;
    for (int64_t i = 0; i < na; i++) {
      m = std::max(m, std::fabs((double)c[i]));
      e = std::max(e, std::fabs((double)a[i] - (double)c[i]));
      e2 = std::max(e2, std::fabs((double)a[i] - (double)b[i]));
    }
    EXPECT_LE(e, 1e-5 * std::max(1.0, m)) << name << " (NHWC plan vs CPU)";
    EXPECT_LE(e2, 1e-5 * std::max(1.0, m)) << name << " (NHWC plan vs NCHW plan)";
    compared++;
  }
  EXPECT_EQ(compared, 14); // conv1, conv2, fc (weight, bias), bn1, bn2 (4 each)
  // the forward of an evaluation batch (running statistics): the same logits
  Batch e = MakeBatch(99);
  const gcc_tensor *p1 = nullptr, *p2 = nullptr;
  float l1 = 0, l2 = 0;
  int64_t c1 = 0, c2 = 0;
  ASSERT_EQ(gcc_session_eval_batch(nhwc, e.x.data(), e.y.data(), kBatch, &l1, &c1, &p1, &d), GCC_OK)
      << d.msg;
  std::vector<float> pred1(static_cast<const float *>(p1->data),
                           static_cast<const float *>(p1->data) + p1->numel);
  ASSERT_EQ(gcc_session_eval_batch(nchw, e.x.data(), e.y.data(), kBatch, &l2, &c2, &p2, &d), GCC_OK)
      << d.msg;
  ASSERT_EQ((int64_t)pred1.size(), p2->numel);
  for (size_t i = 0; i < pred1.size(); i++)
    EXPECT_NEAR(pred1[i], static_cast<const float *>(p2->data)[i],
                1e-5 * std::max(1.0f, std::fabs(static_cast<const float *>(p2->data)[i])))
        << i;
  EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2)));
  gcc_session_destroy(nhwc);
  gcc_session_destroy(nchw);
  gcc_session_destroy(cpu);
  for (HostBackend *hb : {&h_nhwc, &h_nchw}) {
    EXPECT_EQ(hb->used, 0u) << "device memory leaked";
    for (const std::string &v : hb->violations)
      ADD_FAILURE() << v;
  }
}

// The conversions are exactly those at the chains' boundaries: the whole
// block (convolutions, BatchNorms, ReLUs, the residual Add, both poolings,
// and all their gradients) runs NHWC. Forward: the input and the two
// filters into NHWC (KRSC), the global pooling's output into NCHW for
// Flatten. Backward: Flatten's gradient into NHWC for the poolings'
// gradients; the two filter gradients (written KRSC) into the NCHW
// gradients the optimizer reads. 7 in all.
TEST_F(Layout, TheDumpListsExactlyTheBoundaryTransposes) {
  gcc_mem_plan mem{};
  std::string err;
  gcc_graph *g = CompileCuda(model_, GCC_LAYOUT_CHOOSE_NHWC, GCC_PRECISION_FP32, &mem, &err);
  ASSERT_NE(g, nullptr) << err;
  const std::set<std::string> want = {"image@cuda:0@NHWC",
                                      "conv1.weight@NHWC",
                                      "conv2.weight@NHWC",
                                      "gap.out@NCHW",
                                      "flatten/dX@NHWC",
                                      "conv1.weight.grad.nhwc@NCHW",
                                      "conv2.weight.grad.nhwc@NCHW"};
  std::set<std::string> have = Conversions(g);
  std::string listed;
  for (const std::string &n : have)
    listed += " " + n;
  EXPECT_EQ(have, want) << listed;
  // every conversion is a Transpose of one shape between the two layouts,
  // on the value's device
  for (int i = 0; i < g->n_nodes; i++) {
    if (!gcc_layout_is_conversion(g, i))
      continue;
    const gcc_node *n = &g->nodes[i];
    EXPECT_STREQ(gcc_op_name(n->op), "Transpose");
    EXPECT_EQ(n->device, GCC_DEV_CUDA(0));
    EXPECT_EQ(n->reason, GCC_PLACED_LAYOUT);
  }
  // the text dump says so: the count, and one line per conversion
  char *text = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_placement_report_string(g, &mem, nullptr, 0, GCC_MODE_TRAIN, kBatch, GCC_DUMP_TEXT,
                                        &text, &d),
            GCC_OK)
      << d.msg;
  std::string t(text);
  free(text);
  char line[128];
  snprintf(line, sizeof line, "%zu layout conversions (Transpose nodes)", have.size());
  EXPECT_NE(t.find(line), std::string::npos) << t;
  for (const std::string &n : have)
    EXPECT_NE(t.find("  " + n + " "), std::string::npos) << n;
  EXPECT_NE(t.find("NCHW->NHWC"), std::string::npos);
  EXPECT_NE(t.find("NHWC values: conv1.out[4, 8, 8, 8]"), std::string::npos) << t;
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
}

// What the pass guarantees of every NHWC plan: user-visible values NCHW,
// every node's 4-D float operands in one layout, only cuDNN calls and
// elementwise nodes NHWC.
TEST_F(Layout, NodesReadTheirOperandsInOneLayoutAndVisibleValuesStayNchw) {
  gcc_mem_plan mem{};
  std::string err;
  gcc_graph *g = CompileCuda(model_, GCC_LAYOUT_CHOOSE_NHWC, GCC_PRECISION_FP32, &mem, &err);
  ASSERT_NE(g, nullptr) << err;
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *val = &g->values[v];
    if (val->kind != GCC_VALUE_ACTIVATION) {
      EXPECT_EQ(val->layout, GCC_LAYOUT_NCHW) << val->name;
    }
    if (val->layout == GCC_LAYOUT_NHWC) {
      EXPECT_EQ(val->shape.ndim, 4) << val->name;
    }
  }
  for (int j = 0; j < g->n_outputs; j++)
    EXPECT_EQ(g->values[g->outputs[j]].layout, GCC_LAYOUT_NCHW);
  int nhwc_nodes = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    if (gcc_layout_is_conversion(g, i))
      continue;
    std::set<int> layouts;
    for (int k = 0; k < n->n_inputs + n->n_outputs; k++) {
      int v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
      if (v >= 0 && g->values[v].shape.ndim == 4 && gcc_dtype_is_float(g->values[v].dtype))
        layouts.insert(g->values[v].layout);
    }
    EXPECT_LE(layouts.size(), 1u) << n->name;
    if (layouts.count(GCC_LAYOUT_NHWC)) {
      nhwc_nodes++;
      EXPECT_NE(gcc_cuda_layout_class(g, i), GCC_LAYOUT_CLASS_NCHW) << n->name;
    }
  }
  // every node of the block but Flatten, Gemm and the loss: convolutions and
  // their gradient calls, BatchNorms and BatchNormGrads, ReLUs and ReluGrads,
  // the Adds, the poolings and their gradients
  EXPECT_GE(nhwc_nodes, 25);
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
}

// --layout auto: NHWC where cuDNN's tensor cores want it (tf32, bf16, fp16),
// NCHW for fp32; --layout nchw / nhwc force either.
TEST_F(Layout, AutoIsNhwcForTensorCorePrecisionsAndNchwForFp32) {
  struct Case {
    int layout, precision;
    bool nhwc;
  } cases[] = {{GCC_LAYOUT_AUTO, GCC_PRECISION_FP32, false},
               {GCC_LAYOUT_AUTO, GCC_PRECISION_TF32, true},
               {GCC_LAYOUT_AUTO, GCC_PRECISION_BF16, true},
               {GCC_LAYOUT_AUTO, GCC_PRECISION_FP16, true},
               {GCC_LAYOUT_CHOOSE_NCHW, GCC_PRECISION_BF16, false},
               {GCC_LAYOUT_CHOOSE_NHWC, GCC_PRECISION_FP32, true}};
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(gcc_layout_choice_name(c.layout)) + " " +
                 gcc_precision_name(c.precision));
    gcc_options o{};
    o.layout = c.layout;
    o.precision = c.precision;
    EXPECT_EQ(gcc_layout_wants_nhwc(&o), c.nhwc ? 1 : 0);
    gcc_mem_plan mem{};
    std::string err;
    gcc_graph *g = CompileCuda(model_, c.layout, c.precision, &mem, &err);
    ASSERT_NE(g, nullptr) << err;
    EXPECT_EQ(NhwcValues(g) > 0, c.nhwc);
    EXPECT_EQ(Conversions(g).empty(), !c.nhwc);
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
  EXPECT_EQ(gcc_layout_choice_lookup("nhwc"), GCC_LAYOUT_CHOOSE_NHWC);
  EXPECT_EQ(gcc_layout_choice_lookup("NHWC"), -1);
  EXPECT_STREQ(gcc_layout_choice_name(GCC_LAYOUT_AUTO), "auto");
}

// A plan on the CPU has nothing to lay out: --layout nhwc changes nothing.
TEST_F(Layout, CpuPlansStayNchw) {
  gcc_options o{};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = kBatch;
  o.opt = model_->training.opt;
  o.device = GCC_DEV_CPU;
  o.layout = GCC_LAYOUT_CHOOSE_NHWC;
  gcc_graph *g = nullptr;
  gcc_mem_plan mem{};
  gcc_diag d{};
  ASSERT_EQ(gcc_compile_graph(model_, &o, &g, &mem, &d), GCC_OK) << d.msg;
  EXPECT_EQ(NhwcValues(g), 0);
  EXPECT_TRUE(Conversions(g).empty());
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
}

// The bf16 NHWC plan's kernels (conversions of 16-bit values included)
// compile with NVRTC for sm_80 and sm_90, one kernel per conversion. (The
// float32 NHWC plan's kernels are compiled for sm_90 by the training test
// above: the host backend requires NVRTC's cubin of every kernel it runs.)
TEST_F(Layout, NhwcKernelsCompileWithNvrtcForSm80AndSm90) {
  for (int precision : {GCC_PRECISION_BF16}) {
    SCOPED_TRACE(gcc_precision_name(precision));
    gcc_mem_plan mem{};
    std::string err;
    gcc_graph *g = CompileCuda(model_, GCC_LAYOUT_CHOOSE_NHWC, precision, &mem, &err);
    ASSERT_NE(g, nullptr) << err;
    gcc_kernel_set ks{};
    gcc_diag d{};
    ASSERT_EQ(gcc_codegen_emit(g, GCC_DEV_CUDA(0), 132, &ks, &d), GCC_OK) << d.msg;
    std::string src(ks.source);
    int conversions = 0;
    for (int k = 0; k < ks.n_kernels; k++)
      conversions += strstr(ks.kernels[k].name, "_NHWC_") || strstr(ks.kernels[k].name, "_NCHW_");
    EXPECT_EQ(conversions, (int)Conversions(g).size());
    for (int sm : {80, 90}) {
      gcc_nvrtc_output out{};
      ASSERT_EQ(gcc_nvrtc_compile(ks.source, "layout_nhwc", sm, &out, &d), GCC_OK) << d.msg;
      EXPECT_GT(out.cubin_size, 4u);
      std::string ptx(out.ptx, out.ptx_size);
      for (int k = 0; k < ks.n_kernels; k++)
        EXPECT_NE(ptx.find(std::string(".entry ") + ks.kernels[k].name), std::string::npos)
            << ks.kernels[k].name;
      gcc_nvrtc_output_free(&out);
    }
    gcc_kernel_set_free(&ks);
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
}

} // namespace
