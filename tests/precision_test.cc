// precision_test: mixed precision (--precision, issue 19).
//  - graph/half.h rounds float32 to bfloat16 / float16 to nearest even, as a
//    float64 reference does (every 4099th float32 bit pattern and the edge
//    cases: ties, overflow, subnormals, signed zeros);
//  - the autocast pass makes the plan torch.autocast makes: GEMMs in 16
//    bits, reductions / losses / optimizer / parameters / gradients in
//    float32 (but a Gemm's bias gradient: a 16-bit sum, as addmm's backward
//    under autocast, folded into the GEMM's cuBLASLt epilogue), one Cast per
//    (value, dtype); FP32 and TF32 plans are the plans of before;
//  - generated kernels with 16-bit operands (host-emulated through
//    tests/cuda_host_shim.h, whose conversions are written independently of
//    graph/half.h) store the same bits as the CPU backend, which computes in
//    float32 and rounds the 16-bit values at the same points;
//  - poolings, Concat, Transpose, Pad and ConvTranspose in 16 bits store the
//    CPU's bits (averages: within a bound for any summation order);
//    BatchNormalization's values and training statistics (float32 parallel
//    reductions on the device) within bounds derived from the reductions; the
//    pooling gradients in 16 bits are generated kernels (never cuDNN) that
//    store the CPU's bits, ties included;
//  - the MLP's forward pass in bfloat16, on the CPU and host-emulated, lies
//    in the interval a float64 reference with the same roundings allows
//    (derived below), and its training runs on both, as do the CNNs',
//    MixedOpsNet's and the imported ResNet-style and MobileNet-style
//    fixtures' in bfloat16 and float16.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "codegen/lowering.h"
#include "graph/builder.h"
#include "graph/half.h"
#include "graph/ops.h"
#include "graph/util.h"
#include "models/models.h"
#include "passes/passes.h"
#include "runtime/compile.h"
#include "runtime/session.h"
}
#include "tests/imported_graphs.h"
#include "tests/kernel_emulation.h"
#include "tests/run_plans.h"
#include "tests/testutil.h"
#include "tests/test_graphs.h"
#include "tests/test_kernel_cache.h"

namespace {

using gcc_host_test::HostBackend;
using namespace gcc_test;

// ---- rounding ----------------------------------------------------------------

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// x rounded to `mant` mantissa bits with normals from 2^emin and largest
// finite `maxf` (larger: infinity), ties to even, computed in float64:
// rint() rounds to nearest even, and the scalings by powers of two are exact.
double RefRound(double x, int mant, int emin, double maxf) {
  double a = std::fabs(x), r;
  if (a < std::ldexp(1.0, emin)) {
    r = std::rint(std::ldexp(a, mant - emin)) * std::ldexp(1.0, emin - mant);
  } else {
    int e;
    double f = std::frexp(a, &e);
    r = std::ldexp(std::rint(std::ldexp(f, mant + 1)), e - mant - 1);
  }
  if (r > maxf)
    r = INFINITY;
  return std::copysign(r, x);
}

const double kBf16Max = std::ldexp(255.0, 120); // (2 - 2^-7) 2^127
const double kF16Max = 65504.0;

void CheckOne(float f) {
  if (std::isnan(f)) {
    EXPECT_TRUE(std::isnan(gcc_round_bf16(f)));
    EXPECT_TRUE(std::isnan(gcc_round_f16(f)));
    return;
  }
  float bf = (float)RefRound(f, 7, -126, kBf16Max), h = (float)RefRound(f, 10, -14, kF16Max);
  ASSERT_EQ(Bits(gcc_round_bf16(f)), Bits(bf))
      << "bfloat16 of " << f << " (bits " << Bits(f) << ")";
  ASSERT_EQ(Bits(gcc_round_f16(f)), Bits(h)) << "float16 of " << f << " (bits " << Bits(f) << ")";
}

TEST(Half, RoundingToNearestEvenMatchesAFloat64Reference) {
  for (uint64_t u = 0; u < (1ull << 32); u += 4099)
    CheckOne(FromBits((uint32_t)u));
  const float edge[] = {0.0f,
                        -0.0f,
                        1.0f + 0x1p-8f,     // bf16 tie: to even 1
                        1.0f + 3 * 0x1p-8f, // bf16 tie: up to 1 + 2^-6
                        1.0f + 0x1p-11f,    // f16 tie: to even 1
                        1.0f + 3 * 0x1p-11f,
                        65504.0f,
                        65519.99f,
                        65520.0f, // f16 tie past the largest finite: infinity
                        -65520.0f,
                        0x1p-24f,
                        0x1p-25f, // f16: a tie between 0 and 2^-24: to even 0
                        0x1.8p-25f,
                        0x1p-14f,
                        0x1.ff8p-15f,
                        FLT_MAX,
                        -FLT_MAX,
                        0x1p-149f,
                        0x1p-126f,
                        0x1.fffffep-127f,
                        INFINITY,
                        -INFINITY,
                        NAN};
  for (float f : edge)
    CheckOne(f);
  EXPECT_EQ(gcc_f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(gcc_f32_to_f16(0x1p-25f), 0);
  EXPECT_EQ(gcc_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
}

TEST(Half, EverySixteenBitValueRoundTrips) {
  for (uint32_t h = 0; h < 65536; h++) {
    float b = gcc_bf16_to_f32((uint16_t)h), f = gcc_f16_to_f32((uint16_t)h);
    if (std::isnan(b))
      EXPECT_TRUE(std::isnan(gcc_bf16_to_f32(gcc_f32_to_bf16(b))));
    else
      ASSERT_EQ(gcc_f32_to_bf16(b), h) << h;
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(gcc_f16_to_f32(gcc_f32_to_f16(f))));
    else
      ASSERT_EQ(gcc_f32_to_f16(f), h) << h;
  }
}

// ---- the autocast pass -----------------------------------------------------------

gcc_graph *Mlp(gcc_opt_kind kind = GCC_OPT_SGD) {
  gcc_builder *b = gcc_builder_new("precision_mlp", 7);
  int64_t xd[2] = {GCC_BATCH_DIM, 36}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", x, 36, 24));
  h = gcc_build_relu(b, "relu2", gcc_build_linear(b, "fc2", h, 24, 16));
  int logits = gcc_build_linear(b, "fc3", h, 16, 5);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", "fc3.out", "image", "label",
                              Opt(kind, kind == GCC_OPT_ADAM ? 0.01f : 0.1f, 0.5f));
}

gcc_graph *Compile(const gcc_graph *model, int precision, gcc_mode mode, int device,
                   int64_t batch = 8, bool param_casts = false, int world_size = 1) {
  gcc_options o{};
  o.param_copy_casts = param_casts;
  o.world_size = world_size;
  o.mode = mode;
  o.batch_size = batch;
  o.opt = model->training.opt;
  o.device = device;
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  o.precision = precision;
  FILE *sink = fopen("/dev/null", "w");
  o.warn_file = sink;
  gcc_graph *g = nullptr;
  gcc_mem_plan mem{};
  gcc_diag d{};
  gcc_status s = gcc_compile_graph(model, &o, &g, &mem, &d);
  fclose(sink);
  EXPECT_EQ(s, GCC_OK) << d.msg;
  gcc_mem_plan_free(&mem);
  return g;
}

int CountOp(const gcc_graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += strcmp(gcc_op_name(g->nodes[i].op), op) == 0;
  return n;
}

TEST(Autocast, Bf16TrainingPlanFollowsTorchAutocast) {
  gcc_graph *model = Mlp();
  ASSERT_NE(model, nullptr);
  gcc_graph *g = Compile(model, GCC_PRECISION_BF16, GCC_MODE_TRAIN, GCC_DEV_CUDA(0));
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->precision, GCC_PRECISION_BF16);
  int gemms = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    std::string op = gcc_op_name(n->op);
    SCOPED_TRACE(std::string(n->name) + " (" + op + ")");
    const char *cls = gcc_autocast_class_name(n->op);
    ASSERT_NE(cls, nullptr);
    bool update = (gcc_op(n->op)->flags & GCC_OPF_OPTIMIZER) != 0;
    // the bias gradients of the 16-bit Gemms: summed in 16 bits, as addmm's
    // backward does under torch.autocast (checked below)
    if (op == "ReduceSumTo" &&
        std::string(g->values[n->outputs[0]].name).find(".bias.grad") != std::string::npos)
      cls = "low";
    for (int k = 0; k < n->n_inputs + n->n_outputs; k++) {
      int v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
      if (v < 0 || !gcc_dtype_is_float(g->values[v].dtype))
        continue;
      gcc_dtype dt = g->values[v].dtype;
      if (strcmp(cls, "low") == 0) {
        EXPECT_EQ(dt, GCC_DT_BFLOAT16) << g->values[v].name;
      }
      if (strcmp(cls, "fp32") == 0) { // an update reads float32, writes the 16-bit copy
        EXPECT_EQ(dt, update && k >= n->n_inputs ? GCC_DT_BFLOAT16 : GCC_DT_FLOAT32)
            << g->values[v].name;
      }
    }
    gemms += op == "Gemm";
  }
  EXPECT_EQ(gemms, 3 + 2 + 3); // forward, dX of fc2 and fc3, dW of all three
  // parameters, gradients, optimizer state, the loss and the prediction keep
  // float32; the parameters' copies that the updates write are bfloat16
  int copies = 0;
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *val = &g->values[v];
    bool copy = val->kind == GCC_VALUE_OPT_STATE && val->param_of >= 0 &&
                std::string(val->name) == std::string(g->values[val->param_of].name) + ".bf16";
    copies += copy;
    if (val->kind == GCC_VALUE_PARAM || val->kind == GCC_VALUE_GRAD ||
        val->kind == GCC_VALUE_OPT_STATE || strcmp(val->name, "loss") == 0 ||
        strcmp(val->name, "fc3.out") == 0) {
      EXPECT_EQ(val->dtype, copy ? GCC_DT_BFLOAT16 : GCC_DT_FLOAT32) << val->name;
    }
  }
  EXPECT_EQ(copies, 6);
  // one bfloat16 copy per parameter, shared by the forward and backward
  // GEMMs: no Cast, the output of the parameter's update
  for (const char *p : {"fc1.weight", "fc2.weight", "fc3.weight", "fc1.bias"}) {
    int casts = 0, pv = gcc_graph_find(g, p);
    ASSERT_GE(pv, 0);
    for (int c = 0; c < g->values[pv].n_consumers; c++)
      casts += strcmp(gcc_op_name(g->nodes[g->values[pv].consumers[c]].op), "Cast") == 0;
    EXPECT_EQ(casts, 0) << p;
    int cv = gcc_graph_find(g, (std::string(p) + ".bf16").c_str());
    ASSERT_GE(cv, 0) << p;
    EXPECT_EQ(g->values[cv].producer, -1) << p;
    EXPECT_GE(g->values[cv].n_consumers, 1) << p;
    int writers = 0;
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i].n_outputs == 1 && g->nodes[i].outputs[0] == cv) {
        writers++;
        EXPECT_STREQ(gcc_op_name(g->nodes[i].op), "SGD") << p;
        EXPECT_EQ(g->nodes[i].inputs[0], pv) << p;
        for (int c = 0; c < g->values[cv].n_consumers; c++) // read before it is rewritten
          EXPECT_LT(g->values[cv].consumers[c], i) << p;
      }
    EXPECT_EQ(writers, 1) << p;
  }
  // each bias gradient is the 16-bit column sum of the 16-bit output
  // gradient the dW GEMM reads (fc3's: the Cast of the loss gradient; fc1's
  // and fc2's: the ReLU gradients), written to a 16-bit temporary whose
  // Cast is the float32 .grad (torch.autocast: the grad of the bias's
  // bfloat16 copy, widened); so the sums fold into the GEMMs as cuBLASLt
  // epilogues, as in the float32 plan: DRELU_BGRAD for fc1 and fc2 (in the
  // dX GEMM of the layer above), BGRADA (BGRADB after the swap) for fc3
  int sums = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *r = &g->nodes[i];
    if (strcmp(gcc_op_name(r->op), "ReduceSumTo") != 0)
      continue;
    SCOPED_TRACE(r->name);
    sums++;
    EXPECT_EQ(g->values[r->inputs[0]].dtype, GCC_DT_BFLOAT16);
    const gcc_value *out = &g->values[r->outputs[0]];
    EXPECT_EQ(out->dtype, GCC_DT_BFLOAT16);
    ASSERT_EQ(out->n_consumers, 1);
    const gcc_node *c = &g->nodes[out->consumers[0]];
    EXPECT_STREQ(gcc_op_name(c->op), "Cast");
    EXPECT_EQ(g->values[c->outputs[0]].kind, GCC_VALUE_GRAD);
    EXPECT_EQ(g->values[c->outputs[0]].dtype, GCC_DT_FLOAT32);
    ASSERT_GE(r->group, 0);
    const gcc_group *gr = &g->groups[r->group];
    EXPECT_EQ(gr->kind, GCC_GROUP_GEMM);
    std::string name = r->name;
    EXPECT_STREQ(gcc_epilogue_name(gr->epilogue),
                 name == "fc3/dC" ? "CUBLASLT_EPILOGUE_BGRADA" : "CUBLASLT_EPILOGUE_DRELU_BGRAD");
  }
  EXPECT_EQ(sums, 3);
  gcc_graph_free(g);
  gcc_graph_free(model);
}

TEST(Autocast, Fp32AndTf32PlansAreThePlansOfBefore) {
  gcc_graph *model = Mlp();
  ASSERT_NE(model, nullptr);
  for (int dev : {GCC_DEV_CPU, GCC_DEV_CUDA(0)}) {
    gcc_graph *a = Compile(model, GCC_PRECISION_FP32, GCC_MODE_TRAIN, dev);
    gcc_graph *b = Compile(model, GCC_PRECISION_TF32, GCC_MODE_TRAIN, dev);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(CountOp(a, "Cast"), 0);
    EXPECT_EQ(CountOp(b, "Cast"), 0);
    ASSERT_EQ(a->n_nodes, b->n_nodes);
    ASSERT_EQ(a->n_values, b->n_values);
    for (int i = 0; i < a->n_nodes; i++)
      EXPECT_STREQ(a->nodes[i].name, b->nodes[i].name);
    for (int v = 0; v < a->n_values; v++)
      EXPECT_EQ(a->values[v].dtype, b->values[v].dtype) << a->values[v].name;
    EXPECT_EQ(a->precision, GCC_PRECISION_FP32);
    EXPECT_EQ(b->precision, GCC_PRECISION_TF32);
    gcc_graph_free(a);
    gcc_graph_free(b);
  }
  gcc_graph_free(model);
}

TEST(Autocast, EvalPlanKeepsThePredictionFloat32) {
  gcc_graph *model = Mlp();
  ASSERT_NE(model, nullptr);
  gcc_graph *g = Compile(model, GCC_PRECISION_FP16, GCC_MODE_EVAL, GCC_DEV_CUDA(0), 20);
  ASSERT_NE(g, nullptr);
  int pred = gcc_graph_find(g, "fc3.out");
  ASSERT_GE(pred, 0);
  EXPECT_EQ(g->values[pred].dtype, GCC_DT_FLOAT32);
  const gcc_value *pv = &g->values[pred];
  ASSERT_GE(pv->producer, 0);
  EXPECT_STREQ(gcc_op_name(g->nodes[pv->producer].op), "Cast");
  EXPECT_EQ(g->values[g->nodes[pv->producer].inputs[0]].dtype, GCC_DT_FLOAT16);
  EXPECT_EQ(CountOp(g, "Gemm"), 3);
  gcc_graph_free(g);
  gcc_graph_free(model);
}

// ---- 16-bit kernels: host-emulated against the CPU, bit for bit ---------------------

// a, b [N, 37] float32 -> a16 = Cast(a), b16 = Cast(b) -> Relu(a16 + b16) * a16 ->
// Cast to float32 ("out"), and its column sums (a reduction reading 16 bits
// through the fused Cast).
gcc_graph *CastChain(gcc_dtype low) {
  gcc_builder *b = gcc_builder_new("cast_chain", 3);
  int64_t xd[2] = {GCC_BATCH_DIM, 37};
  int a = gcc_build_input(b, "a", GCC_DT_FLOAT32, 2, xd);
  int c = gcc_build_input(b, "b", GCC_DT_FLOAT32, 2, xd);
  int a16 = gcc_build_op(b, GCC_OP_CAST, "a16", "a16.out", &a, 1);
  gcc_build_set_int(b, a16, "to", low);
  int b16 = gcc_build_op(b, GCC_OP_CAST, "b16", "b16.out", &c, 1);
  gcc_build_set_int(b, b16, "to", low);
  int ab[2] = {a16, b16};
  int s = gcc_build_op(b, GCC_OP_ADD, "add", "add.out", ab, 2);
  int r = gcc_build_relu(b, "relu", s);
  int ra[2] = {r, a16};
  int m = gcc_build_op(b, GCC_OP_MUL, "mul", "mul.out", ra, 2);
  int o = gcc_build_op(b, GCC_OP_CAST, "out", "out", &m, 1);
  gcc_build_set_int(b, o, "to", GCC_DT_FLOAT32);
  int m2 = gcc_build_op(b, GCC_OP_CAST, "m32", "m32.out", &m, 1);
  gcc_build_set_int(b, m2, "to", GCC_DT_FLOAT32);
  int64_t sd[2] = {1, 37};
  int sum = gcc_build_op(b, GCC_OP_REDUCE_SUM_TO, "colsum", "colsum", &m2, 1);
  gcc_build_set_ints(b, sum, "shape", sd, 2);
  gcc_build_output(b, o);
  gcc_build_output(b, sum);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

bool SameBits(float x, float y) {
  return (std::isnan(x) && std::isnan(y)) || Bits(x) == Bits(y);
}

TEST(Kernels16, FusedCastsStoreTheBitsTheCpuStores) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  const int64_t n = 11;
  std::vector<float> a((size_t)(n * 37)), b(a.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (size_t i = 0; i < a.size(); i++) {
    a[i] = nd(rng);
    b[i] = nd(rng);
  }
  // ties, overflow past float16's range, subnormals, zeros
  const float special[] = {1.0f + 0x1p-8f,
                           1.0f + 3 * 0x1p-8f,
                           1.0f + 0x1p-11f,
                           65519.0f,
                           70000.0f,
                           -70000.0f,
                           1e-7f,
                           -0.0f,
                           3e-41f,
                           300.0f,
                           0.1f,
                           2.5f};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
    a[i * 7] = special[i];
    b[i * 7] = special[(i + 3) % 12] * 0.5f;
  }
  for (gcc_dtype low : {GCC_DT_BFLOAT16, GCC_DT_FLOAT16}) {
    SCOPED_TRACE(gcc_dtype_name(low));
    gcc_graph *g = CastChain(low);
    ASSERT_NE(g, nullptr);
    std::vector<PlanOutput> cpu, dev;
    std::string e1 = RunPlan(g, {a.data(), b.data()}, n, false, &cpu);
    ASSERT_EQ(e1, "");
    std::string e2 = RunPlan(g, {a.data(), b.data()}, n, true, &dev);
    ASSERT_EQ(e2, "");
    ASSERT_EQ(cpu.size(), 2u);
    ASSERT_EQ(dev.size(), 2u);
    for (int k = 0; k < 2; k++) {
      ASSERT_EQ(cpu[k].f32.size(), dev[k].f32.size());
      ASSERT_FALSE(cpu[k].f32.empty());
      int differ = 0;
      for (size_t i = 0; i < cpu[k].f32.size(); i++)
        differ += !SameBits(cpu[k].f32[i], dev[k].f32[i]);
      EXPECT_EQ(differ, 0) << "output " << k;
    }
    // the values really went through 16 bits: the tie 1 + 2^-8 is 1 in
    // bfloat16 (and 70000 is infinity in float16)
    float a0 = a[0], b0 = b[0];
    float r16 = low == GCC_DT_BFLOAT16 ? gcc_round_bf16(gcc_round_bf16(a0) + gcc_round_bf16(b0))
                                       : gcc_round_f16(gcc_round_f16(a0) + gcc_round_f16(b0));
    float m16 = r16 > 0.0f ? r16 : 0.0f;
    m16 = low == GCC_DT_BFLOAT16 ? gcc_round_bf16(m16 * gcc_round_bf16(a0))
                                 : gcc_round_f16(m16 * gcc_round_f16(a0));
    EXPECT_TRUE(SameBits(cpu[0].f32[0], m16)) << cpu[0].f32[0] << " vs " << m16;
    gcc_graph_free(g);
  }
}

// BatchNormalization in training on a 16-bit X: x [N, 1] @ W [1, 4] (a
// MatMul: autocast's LOW class, so its output is 16-bit, and with one term
// per element exact in any GEMM) -> BatchNormalization over the 4 channels
// (its training form: batch statistics, running statistics updated) ->
// MSE against t [N, 4]; SGD lr 0.1.
gcc_graph *BatchNormNet() {
  gcc_builder *b = gcc_builder_new("batchnorm16", 5);
  int64_t xd[2] = {GCC_BATCH_DIM, 1}, td[2] = {GCC_BATCH_DIM, 4}, wd[2] = {1, 4}, cd[1] = {4};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 2, td);
  const float w[4] = {1.0f, -0.7f, 0.33f, 2.1f};
  int mm[2] = {x, gcc_build_param(b, "w", 2, wd, w)};
  int h = gcc_build_op(b, GCC_OP_MATMUL, "mm", "mm.out", mm, 2);
  const float scale[4] = {1.0f, 0.75f, 1.25f, 0.5f}, shift[4] = {0.1f, -0.2f, 0.0f, 0.3f};
  const float mean[4] = {0.0f, 0.1f, -0.1f, 0.0f}, var[4] = {1.0f, 0.5f, 2.0f, 1.0f};
  int in[5] = {h, gcc_build_param(b, "bn.scale", 1, cd, scale),
               gcc_build_param(b, "bn.bias", 1, cd, shift),
               gcc_build_param(b, "bn.running_mean", 1, cd, mean),
               gcc_build_param(b, "bn.running_var", 1, cd, var)};
  int bn = gcc_build_op(b, GCC_OP_BATCH_NORM, "bn", "bn.out", in, 5);
  int loss = gcc_build_mse(b, "loss", bn, t);
  gcc_build_output(b, loss);
  gcc_graph *g = FinishInlineTraining(b, "loss", nullptr, "x", "t", Opt(GCC_OPT_SGD, 0.1f));
  if (g)
    for (int v = 0; v < g->n_values; v++)
      g->values[v].state |= strncmp(g->values[v].name, "bn.running_", 11) == 0;
  return g;
}

// A training step of it in bfloat16 and float16 on the host-emulated CUDA
// plan (the generated 16-bit BatchNormalization kernels) and on the CPU plan
// (the CPU kernel on the widened X). The CPU's batch statistics are float64
// sums; the generated kernels' are float32 reductions (codegen/
// emit_batchnorm.c) of depth K = 12 for these 64 rows (1 term a lane, a tree
// of 8 levels, 1 partial, 2 for the merge and the division), so the first
// step's running statistics and updated scale and bias agree within the
// first-order bound of such sums, derived below from the batch (no longer
// bit for bit: the CPU's bits come from a serial float64 order, not worth a
// serial GPU kernel). Later steps read weights that went through a GEMM's
// summation over the batch; they agree to the tolerance of the training
// tests.
TEST(Kernels16, BatchNormTrainingStepStaysWithinTheBoundOfItsFloat32Reductions) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  const int64_t rows = 64;
  gcc_graph *g = BatchNormNet();
  ASSERT_NE(g, nullptr);
  for (int precision : {GCC_PRECISION_BF16, GCC_PRECISION_FP16}) {
    SCOPED_TRACE(precision == GCC_PRECISION_BF16 ? "bf16" : "fp16");
    { // the BatchNorm reads the MatMul's 16-bit output
      gcc_graph *pl = Compile(g, precision, GCC_MODE_TRAIN, GCC_DEV_CUDA(0), rows);
      ASSERT_NE(pl, nullptr);
      int bns = 0;
      for (int i = 0; i < pl->n_nodes; i++)
        if (pl->nodes[i].op == GCC_OP_BATCH_NORM) {
          bns++;
          EXPECT_EQ(gcc_dtype_size(pl->values[pl->nodes[i].inputs[0]].dtype), 2u);
          EXPECT_EQ(pl->nodes[i].device, GCC_DEV_CUDA(0));
        }
      EXPECT_EQ(bns, 1);
      gcc_graph_free(pl);
    }
    HostBackend hb;
    gcc_diag d{};
    gcc_session_options co{};
    co.threads = 1;
    co.opt = g->training.opt;
    co.precision = precision;
    gcc_session_options dso = co;
    dso.backend = &hb.be;
    dso.device = GCC_DEV_CUDA(0);
    dso.plan.sm = 90;
    dso.plan.sm_count = 4;
    dso.plan.compile = gcc_kernel_cache_hook;
    dso.plan.compile_user = gcc_test::TestKernelCache();
    dso.max_pending = 1;
    gcc_session *cpu = nullptr, *dev = nullptr;
    ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
    std::mt19937 rng(29);
    std::normal_distribution<float> nd(0.5f, 2.0f);
    const float w[4] = {1.0f, -0.7f, 0.33f, 2.1f}, scale[4] = {1.0f, 0.75f, 1.25f, 0.5f};
    const double u = 0x1p-24, K = 12, M = (double)rows, lr = 0.1;
    double mom = 0.9; // BatchNormalization's default, unless the node sets it
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i].op == GCC_OP_BATCH_NORM && gcc_node_attr(&g->nodes[i], "momentum"))
        mom = gcc_node_attr(&g->nodes[i], "momentum")->f;
    for (int step = 0; step < 3; step++) {
      std::vector<float> x((size_t)rows), t((size_t)(rows * 4));
      for (float &v : x)
        v = nd(rng);
      for (float &v : t)
        v = nd(rng) * 0.25f;
      float l1 = 0, l2 = 0;
      ASSERT_EQ(gcc_session_train_step(cpu, x.data(), t.data(), rows, &l1, &d), GCC_OK) << d.msg;
      ASSERT_EQ(gcc_session_train_step(dev, x.data(), t.data(), rows, &l2, &d), GCC_OK) << d.msg;
      EXPECT_NEAR(l1, l2, 1e-5 * std::fabs(l1)) << "step " << step;
      // the first step's bounds: X's channel c is x * w[c] rounded to 16 bits
      // (|X| <= max|x| |w[c]| (1 + 2^-8)); |xhat| <= sqrt(M - 1) for any batch;
      // dY of the mean MSE over M * 4 values is 2 (y - t) / (4 M), |y| <=
      // |scale| sqrt(M - 1) + |B|
      double maxx = 0, maxt = 0;
      for (float v : x)
        maxx = std::fmax(maxx, std::fabs(v));
      for (float v : t)
        maxt = std::fmax(maxt, std::fabs(v));
      auto bound = [&](const char *p, int k, double a) {
        const double mx = maxx * std::fabs(w[k]) * (1 + 0x1p-8), xh = std::sqrt(M - 1);
        const double dy = 2 * (std::fabs(scale[k]) * xh + 0.3 + maxt) / (4 * M);
        if (strcmp(p, "bn.running_mean") == 0) // Welford's mean: 2 K u max|X|
          return (1 - mom) * 2 * K * u * mx + 4 * u * std::fabs(a);
        if (strcmp(p, "bn.running_var") == 0) // M2 / M: 3 K u max (X - mean)^2
          return (1 - mom) * 3 * K * u * 4 * mx * mx * M / (M - 1) + 4 * u * std::fabs(a);
        if (strcmp(p, "bn.scale") == 0) // lr (K u sum |dy xhat| + xhat's error sum |dy|)
          return lr * (K * u * M * dy * xh + 2 * K * u * mx * xh * M * dy) + 2 * u * std::fabs(a);
        return lr * K * u * M * dy + 2 * u * std::fabs(a); // bn.bias: lr K u sum |dy|
      };
      for (const char *p : {"bn.running_mean", "bn.running_var", "bn.scale", "bn.bias"}) {
        float *a = nullptr, *c = nullptr;
        int64_t n1 = 0, n2 = 0;
        ASSERT_EQ(gcc_session_param(cpu, p, &a, &n1, &d), GCC_OK) << d.msg;
        ASSERT_EQ(gcc_session_param(dev, p, &c, &n2, &d), GCC_OK) << d.msg;
        ASSERT_EQ(n1, 4);
        ASSERT_EQ(n2, 4);
        for (int k = 0; k < 4; k++) {
          if (step == 0) {
            EXPECT_NEAR(a[k], c[k], bound(p, k, a[k])) << p << "[" << k << "]";
          } else {
            EXPECT_NEAR(a[k], c[k], 2e-3 * std::fmax(1.0f, std::fabs(a[k])))
                << p << "[" << k << "] step " << step;
          }
        }
      }
    }
    // the running mean moved: the training form ran
    float *m = nullptr;
    int64_t nm = 0;
    ASSERT_EQ(gcc_session_param(cpu, "bn.running_mean", &m, &nm, &d), GCC_OK) << d.msg;
    EXPECT_GT(std::fabs(m[0]), 0.05f);
    gcc_session_destroy(dev);
    gcc_session_destroy(cpu);
    for (const std::string &v : hb.violations)
      ADD_FAILURE() << v;
  }
  gcc_graph_free(g);
}

// ---- the MLP's forward pass in bfloat16: an interval from a float64 reference ---------
//
// The plans compute each layer as y = round16(fl32(sum_k w_k x_k + b)) with
// x, w, b 16-bit values, then relu; the reference computes the same sum in
// float64 (its error, at most K * 2^-53 relative to sum |w x|, is below
// float32's and is absorbed in gamma below) and rounds with RefRound. What
// the plans may differ in: the float32 summation order (cuBLASLt's
// column-major call in the host emulation, oneDNN / OpenBLAS on the CPU).
// For one element, with the plan's inputs x' = x + dx (|dx| <= B elementwise,
// B = 0 for the network input: Cast of the same float32 values):
//   |fl32(sum w x' + b) - (sum w x + b)|
//       <= sum |w| B + gamma_(K+1) (sum |w| (|x| + B) + |b|) =: D
// (Higham, Accuracy and Stability, eq. 3.5: any order of a float32 sum of
// K + 1 terms is within gamma_(K+1) = (K+1) u / (1 - (K+1) u), u = 2^-24,
// of the exact sum, relative to the sum of the magnitudes). Rounding to 16
// bits is monotone, so the plan's stored value lies in
//   [round16(y - D), round16(y + D)]        (y: the reference's exact sum)
// and relu (1-Lipschitz, monotone) keeps it there. The next layer's B is the
// width of that interval around the reference's stored value. Where the
// interval holds one value (no rounding boundary within D of y: almost
// every element), the plans must store exactly the reference's bits; the
// test also requires that this is so for most elements, so it would fail
// on a plan that does not round where the reference does.
struct Interval {
  std::vector<double> ref; // the reference's stored values
  std::vector<double> lo, hi;
};

float Lower(double v) { // the largest float32 <= v
  float f = (float)v;
  return (double)f > v ? std::nextafter(f, -INFINITY) : f;
}
float Upper(double v) {
  float f = (float)v;
  return (double)f < v ? std::nextafter(f, INFINITY) : f;
}

Interval ForwardInterval(const gcc_graph *model, const std::vector<float> &x, int64_t rows) {
  auto r16 = [](double v) { return (double)gcc_round_bf16((float)v); };
  auto param = [&](const char *name) {
    int v = gcc_graph_find(model, name);
    const float *p = static_cast<const float *>(model->values[v].data);
    std::vector<double> out((size_t)gcc_shape_numel(&model->values[v].shape, nullptr));
    for (size_t i = 0; i < out.size(); i++)
      out[i] = gcc_round_bf16(p[i]);
    return out;
  };
  const double u = 0x1p-24;
  std::vector<double> act(x.size()), bound(x.size(), 0.0);
  for (size_t i = 0; i < x.size(); i++)
    act[i] = gcc_round_bf16(x[i]);
  int64_t in = 36;
  const char *layers[3] = {"fc1", "fc2", "fc3"};
  const int64_t outs[3] = {24, 16, 5};
  Interval res;
  for (int l = 0; l < 3; l++) {
    std::vector<double> w = param((std::string(layers[l]) + ".weight").c_str());
    std::vector<double> bias = param((std::string(layers[l]) + ".bias").c_str());
    int64_t o = outs[l];
    double gamma = (double)(in + 1) * u / (1.0 - (double)(in + 1) * u);
    std::vector<double> nact((size_t)(rows * o)), nb((size_t)(rows * o)), lo(nact.size()),
        hi(nact.size());
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = 0; j < o; j++) {
        double y = bias[(size_t)j], mag = std::fabs(bias[(size_t)j]), prop = 0.0;
        for (int64_t k = 0; k < in; k++) {
          double wk = w[(size_t)(j * in + k)], xk = act[(size_t)(r * in + k)];
          double bk = bound[(size_t)(r * in + k)];
          y += wk * xk;
          mag += std::fabs(wk) * (std::fabs(xk) + bk);
          prop += std::fabs(wk) * bk;
        }
        double dmax = prop + gamma * mag;
        double s = r16(y), a = r16(Lower(y - dmax)), c = r16(Upper(y + dmax));
        if (l < 2) { // relu
          s = s > 0 ? s : 0;
          a = a > 0 ? a : 0;
          c = c > 0 ? c : 0;
        }
        size_t at = (size_t)(r * o + j);
        nact[at] = s;
        lo[at] = a;
        hi[at] = c;
        nb[at] = std::fmax(s - a, c - s);
      }
    act = nact;
    bound = nb;
    in = o;
    res.lo = lo;
    res.hi = hi;
  }
  res.ref = act;
  return res;
}

TEST(MixedPrecisionMlp, Bf16ForwardLiesInTheIntervalOfTheFloat64Reference) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  gcc_graph *model = Mlp();
  ASSERT_NE(model, nullptr);
  // the forward graph alone: an inference graph of the logits
  gcc_graph *inf = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_graph_clone(model, &inf, &d), GCC_OK) << d.msg;
  int keep = gcc_graph_find(inf, "fc3.out");
  ASSERT_EQ(gcc_graph_prune(inf, &keep, 1, &d), GCC_OK) << d.msg;
  inf->n_outputs = 0;
  ASSERT_EQ(gcc_graph_add_output(inf, keep), GCC_OK);
  inf->training.present = 0;
  // keep only the image input
  inf->n_inputs = 1;
  inf->inputs[0] = gcc_graph_find(inf, "image");
  const int64_t rows = 40;
  std::vector<float> x((size_t)(rows * 36));
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float &v : x)
    v = nd(rng);
  Interval iv = ForwardInterval(model, x, rows);
  for (bool cuda : {false, true}) {
    SCOPED_TRACE(cuda ? "host-emulated CUDA plan" : "CPU plan");
    std::vector<PlanOutput> outs;
    ASSERT_EQ(RunPlan(inf, {x.data()}, rows, cuda, &outs, 1, GCC_PRECISION_BF16), "");
    ASSERT_EQ(outs.size(), 1u);
    ASSERT_EQ(outs[0].f32.size(), iv.ref.size());
    int exact = 0, point = 0;
    for (size_t i = 0; i < iv.ref.size(); i++) {
      double v = outs[0].f32[i];
      EXPECT_GE(v, iv.lo[i]) << i;
      EXPECT_LE(v, iv.hi[i]) << i;
      EXPECT_EQ(v, (double)gcc_round_bf16((float)v)) << "a logit that is not a bfloat16 value";
      point += iv.lo[i] == iv.hi[i];
      exact += v == iv.ref[i];
    }
    // the bound is tight: most logits have one possible value, and equal it
    EXPECT_GE(point, (int)(iv.ref.size() * 8 / 10)) << "the interval is too loose to test";
    EXPECT_GE(exact, point);
  }
  gcc_graph_free(inf);
  gcc_graph_free(model);
}

// ---- the ops autocast leaves in their input's dtype, and ConvTranspose ---------------
//
// x [N, 4, 9, 9] float32 -> Cast to 16 bits -> BatchNormalization
// (evaluation) -> MaxPool(3, s 2, p 1), AveragePool(3, s 2, p 1,
// count_include_pad 0) and AveragePool(2, s 2, pads (0, 0, 1, 1)) ->
// Concat -> Transpose (H, W) -> Pad (constant 0.25) -> ConvTranspose(12 ->
// 2, 3x3, s 2, p 1, W and B cast to 16 bits); the 16-bit values bn, cat,
// pad and convt are outputs through Casts to float32 (exact). Written with
// explicit Casts and run at --precision fp32, so the graph runs as built.
gcc_graph *MixedOpsChain(gcc_dtype low) {
  gcc_builder *b = gcc_builder_new("mixed_ops_chain", 3);
  int64_t xd[4] = {GCC_BATCH_DIM, 4, 9, 9}, cd[1] = {4};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 4, xd);
  auto cast = [&](int v, const char *name, gcc_dtype to) {
    int c = gcc_build_op(b, GCC_OP_CAST, name, (std::string(name) + ".out").c_str(), &v, 1);
    gcc_build_set_int(b, c, "to", to);
    return c;
  };
  auto output = [&](int v, const char *name) {
    int c = gcc_build_op(b, GCC_OP_CAST, (std::string(name) + "_f32").c_str(), name, &v, 1);
    gcc_build_set_int(b, c, "to", GCC_DT_FLOAT32);
    gcc_build_output(b, c);
  };
  const float scale[4] = {1.0f, 0.75f, 1.25f, 0.5f}, shift[4] = {0.1f, -0.2f, 0.0f, 0.3f};
  const float mean[4] = {0.0f, 0.1f, -0.1f, 0.0f}, var[4] = {1.0f, 0.5f, 2.0f, 1.0f};
  int bn_in[5] = {cast(x, "x16", low), gcc_build_param(b, "bn.scale", 1, cd, scale),
                  gcc_build_param(b, "bn.bias", 1, cd, shift),
                  gcc_build_const(b, "bn.mean", GCC_DT_FLOAT32, 1, cd, mean),
                  gcc_build_const(b, "bn.var", GCC_DT_FLOAT32, 1, cd, var)};
  int bn = gcc_build_op(b, GCC_OP_BATCH_NORM, "bn16", "bn16.out", bn_in, 5);
  int cat = -1;
  int pd = gcc_test::PoolConcatTransposePad(b, bn, "pad16", &cat);
  const int64_t s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1};
  int64_t wd[4] = {12, 2, 3, 3}, bd[1] = {2};
  std::vector<float> w(12 * 2 * 9);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> ud(-0.3f, 0.3f);
  for (float &v : w)
    v = ud(rng);
  const float bt[2] = {0.05f, -0.05f};
  int ct_in[3] = {pd, cast(gcc_build_param(b, "convt.weight", 4, wd, w.data()), "w16", low),
                  cast(gcc_build_param(b, "convt.bias", 1, bd, bt), "b16", low)};
  int ct = gcc_build_op(b, GCC_OP_CONV_TRANSPOSE, "convt16", "convt16.out", ct_in, 3);
  gcc_build_set_ints(b, ct, "strides", s2, 2);
  gcc_build_set_ints(b, ct, "pads", p1, 4);
  output(bn, "bn");
  output(cat, "cat");
  output(pd, "pad");
  output(ct, "convt");
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

// The average of 16-bit values v_1 .. v_n that a pooling stores: the float32
// sum, in any order, divided by n in float32, rounded to 16 bits. With
// S = sum v_i and A = sum |v_i| (float64: exact for these few terms of
// 8 / 11-bit significands within a small exponent range), a float32 sum in
// any order is within gamma_(n-1) A of S (Higham, eq. 3.5; u = 2^-24), and
// the division adds one more rounding: |fl(fl(S) / n) - S / n| <=
// gamma_(n-1) A / n + u (|S| + gamma_(n-1) A) / n =: D. Rounding to 16 bits
// is monotone, so whatever order cuDNN (or oneDNN on the CPU) sums in, the
// stored value lies in [round16(S / n - D), round16(S / n + D)].
struct Bound16 {
  double lo, hi, ref;
};
Bound16 AverageBound(const std::vector<double> &v, gcc_dtype low) {
  auto r16 = [&](double x) {
    return (double)(low == GCC_DT_BFLOAT16 ? gcc_round_bf16((float)x) : gcc_round_f16((float)x));
  };
  const double u = 0x1p-24;
  double s = 0, a = 0, n = (double)v.size();
  for (double x : v) {
    s += x;
    a += std::fabs(x);
  }
  double gamma = (n - 1) * u / (1 - (n - 1) * u);
  double dmax = gamma * a / n + u * (std::fabs(s) + gamma * a) / n;
  return {r16(Lower(s / n - dmax)), r16(Upper(s / n + dmax)), r16(s / n)};
}

// Every kernel of the chain, on the host-emulated CUDA plan (generated
// kernels for BatchNormalization, the asymmetric AveragePool, Concat,
// Transpose, Pad; cuDNN's MaxPool, AveragePool and ConvTranspose as the CPU
// kernels on widened operands) and on the CPU plan: the 16-bit values they
// store agree bit for bit where the order of summation is fixed (all but
// the averages, which oneDNN may sum in its own order on the CPU), and the
// averages of both plans lie in the interval derived above, of which most
// hold a single value (so the test fails on a plan that does not round, or
// rounds elsewhere). Two other summation orders (reversed, and pairwise)
// of the same windows land in the interval too: the bound is what a GPU's
// cuDNN must meet.
TEST(Kernels16, PoolingsConcatTransposePadConvTransposeAndBatchNorm) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  const int64_t n = 3;
  std::vector<float> x((size_t)(n * 4 * 81));
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (float &v : x)
    v = nd(rng);
  for (gcc_dtype low : {GCC_DT_BFLOAT16, GCC_DT_FLOAT16}) {
    SCOPED_TRACE(gcc_dtype_name(low));
    auto r16 = [&](float f) {
      return low == GCC_DT_BFLOAT16 ? gcc_round_bf16(f) : gcc_round_f16(f);
    };
    gcc_graph *g = MixedOpsChain(low);
    ASSERT_NE(g, nullptr);
    { // every op of the chain runs on the GPU (a generated kernel or cuDNN)
      gcc_graph *pl = Compile(g, GCC_PRECISION_FP32, GCC_MODE_EVAL, GCC_DEV_CUDA(0), n);
      ASSERT_NE(pl, nullptr);
      int on_gpu = 0;
      for (int i = 0; i < pl->n_nodes; i++)
        for (const char *name : {"bn16", "maxpool", "avgpool", "avgpool_asym", "concat",
                                 "transpose", "pad16", "convt16"})
          if (strcmp(pl->nodes[i].name, name) == 0) {
            EXPECT_EQ(pl->nodes[i].device, GCC_DEV_CUDA(0)) << name;
            on_gpu++;
          }
      EXPECT_EQ(on_gpu, 8);
      gcc_graph_free(pl);
    }
    std::vector<PlanOutput> out[2];
    ASSERT_EQ(RunPlan(g, {x.data()}, n, false, &out[0]), "");
    ASSERT_EQ(RunPlan(g, {x.data()}, n, true, &out[1]), "");
    ASSERT_EQ(out[0].size(), 4u);
    ASSERT_EQ(out[1].size(), 4u);
    for (int k = 0; k < 4; k++)
      ASSERT_EQ(out[0][k].f32.size(), out[1][k].f32.size());
    const std::vector<float> &bn = out[0][0].f32;
    ASSERT_EQ(bn.size(), x.size());
    // BatchNormalization: 16-bit values, and the formula, on both plans. Not
    // bit for bit: the generated kernel computes k and b0 in float32 (the
    // CPU's in float64), so a value within a few float32 ulps of a 16-bit
    // rounding tie may round the other way; 2^-7 relative covers a bf16 ulp
    // (2^-8 relative spacing, rounded once) and the float32 error (< 2^-20).
    const float sc[4] = {1.0f, 0.75f, 1.25f, 0.5f}, sh[4] = {0.1f, -0.2f, 0.0f, 0.3f};
    const float mu[4] = {0.0f, 0.1f, -0.1f, 0.0f}, var[4] = {1.0f, 0.5f, 2.0f, 1.0f};
    int bn_differ = 0, bn_off[2] = {0, 0};
    for (int plan = 0; plan < 2; plan++)
      for (size_t i = 0; i < bn.size(); i++) {
        const float got = out[plan][0].f32[i];
        bn_differ += plan == 1 && !SameBits(bn[i], got);
        int c = (int)((i / 81) % 4);
        double k = (double)sc[c] / std::sqrt((double)var[c] + 1e-5);
        double want = (double)r16(x[i]) * k + ((double)sh[c] - (double)mu[c] * k);
        bn_off[plan] += std::fabs(got - want) > 0x1p-7 * std::fabs(want) + 1e-30 || got != r16(got);
      }
    std::printf("[kernels16] %s: %d of %zu BatchNormalization values differ between the plans\n",
                gcc_dtype_name(low), bn_differ, bn.size());
    EXPECT_EQ(bn_off[0], 0) << "CPU plan";
    EXPECT_EQ(bn_off[1], 0) << "CUDA plan";
    // the poolings, concatenated: max bit for bit; averages in the interval
    const int64_t cs = 5 * 5;
    int point = 0, avgs = 0, cat_differ = 0;
    for (int plan = 0; plan < 2; plan++) {
      const std::vector<float> &cat = out[plan][1].f32, &bnp = out[plan][0].f32;
      ASSERT_EQ(cat.size(), (size_t)(n * 12 * cs));
      for (int64_t s = 0; s < n; s++)
        for (int64_t c = 0; c < 12; c++)
          for (int64_t oy = 0; oy < 5; oy++)
            for (int64_t ox = 0; ox < 5; ox++) {
              size_t at = (size_t)(((s * 12 + c) * 5 + oy) * 5 + ox);
              int kind = (int)(c / 4), ch = (int)(c % 4);
              int64_t k = kind == 2 ? 2 : 3, p = kind == 2 ? 0 : 1; // asym: top / left pads 0
              std::vector<double> win;
              for (int64_t a = 0; a < k; a++)
                for (int64_t bb = 0; bb < k; bb++) {
                  int64_t iy = oy * 2 - p + a, ix = ox * 2 - p + bb;
                  if (iy >= 0 && iy < 9 && ix >= 0 && ix < 9)
                    win.push_back(bnp[(size_t)(((s * 4 + ch) * 9 + iy) * 9 + ix)]);
                }
              ASSERT_FALSE(win.empty());
              if (kind == 0) {
                double m = win[0];
                for (double v : win)
                  m = std::fmax(m, v);
                EXPECT_EQ(cat[at], (float)m) << "max at " << at;
                continue;
              }
              Bound16 bd = AverageBound(win, low);
              EXPECT_GE(cat[at], bd.lo) << at;
              EXPECT_LE(cat[at], bd.hi) << at;
              EXPECT_EQ(cat[at], r16(cat[at])) << "not a 16-bit value at " << at;
              if (plan == 1) {
                avgs++;
                point += bd.lo == bd.hi;
                cat_differ += !SameBits(cat[at], out[0][1].f32[at]);
                // other summation orders a GPU may take
                float rev = 0.0f, pair = 0.0f;
                for (size_t q = win.size(); q-- > 0;)
                  rev += (float)win[q];
                std::vector<float> t(win.begin(), win.end());
                while (t.size() > 1) {
                  std::vector<float> h;
                  for (size_t q = 0; q + 1 < t.size(); q += 2)
                    h.push_back(t[q] + t[q + 1]);
                  if (t.size() % 2)
                    h.push_back(t.back());
                  t = h;
                }
                pair = t[0];
                for (float sum : {rev, pair}) {
                  float v = r16(sum / (float)win.size());
                  EXPECT_GE(v, bd.lo) << at;
                  EXPECT_LE(v, bd.hi) << at;
                }
              }
            }
    }
    EXPECT_GE(point, avgs * 8 / 10) << "the interval is too loose to test";
    // the host-emulated plan's averages are the CPU kernel's order: bit for bit
    // unless the CPU plan's oneDNN summed otherwise (then within the bound)
    std::printf("[kernels16] %s: %d of %d averages differ between the plans\n", gcc_dtype_name(low),
                cat_differ, avgs);
    // Transpose and Pad move each plan's own values exactly
    for (int plan = 0; plan < 2; plan++) {
      const std::vector<float> &cat = out[plan][1].f32, &pad = out[plan][2].f32;
      ASSERT_EQ(pad.size(), (size_t)(n * 12 * 49));
      int bad = 0;
      for (int64_t s = 0; s < n; s++)
        for (int64_t c = 0; c < 12; c++)
          for (int64_t yy = 0; yy < 7; yy++)
            for (int64_t xx = 0; xx < 7; xx++) {
              float want = 0.25f;
              if (yy >= 1 && yy <= 5 && xx >= 1 && xx <= 5) // transposed: [.., xx, yy] of cat
                want = cat[(size_t)(((s * 12 + c) * 5 + (xx - 1)) * 5 + (yy - 1))];
              bad += !SameBits(pad[(size_t)(((s * 12 + c) * 7 + yy) * 7 + xx)], want);
            }
      EXPECT_EQ(bad, 0) << (plan ? "CUDA plan" : "CPU plan");
    }
    // ConvTranspose: the same kernel on the same 16-bit operands when the
    // plans' inputs agree
    if (cat_differ == 0) {
      int ct_differ = 0;
      for (size_t i = 0; i < out[0][3].f32.size(); i++)
        ct_differ += !SameBits(out[0][3].f32[i], out[1][3].f32[i]);
      EXPECT_EQ(ct_differ, 0);
    }
    for (float v : out[1][3].f32)
      ASSERT_EQ(v, r16(v)) << "a ConvTranspose output that is not a 16-bit value";
    gcc_graph_free(g);
  }
}

// ---- the pooling gradients in 16 bits ------------------------------------------
//
// x [3, 4, 9, 9] and the incoming gradients, cast to `low` (none for
// float32) -> MaxPool(3, s 2, p 1) and its MaxPoolGrad, MaxPool(2, dilation
// 2) and its MaxPoolGrad, AveragePoolGrad(3, s 2, p 1, count_include_pad
// 0), AveragePoolGrad(2, s 2, pads (0, 0, 1, 1), count_include_pad 1) and
// the global AveragePoolGrad (9 x 9) -> Casts to float32 (exact).
struct PoolGradCase {
  int64_t k, s, pt, pl, pb, pr, dil, oh;
  bool max, include_pad;
};
const PoolGradCase kPoolGrads[5] = {{3, 2, 1, 1, 1, 1, 1, 5, true, false},
                                    {2, 1, 0, 0, 0, 0, 2, 7, true, false},
                                    {3, 2, 1, 1, 1, 1, 1, 5, false, false},
                                    {2, 2, 0, 0, 1, 1, 1, 5, false, true},
                                    {9, 1, 0, 0, 0, 0, 1, 1, false, false}};

gcc_graph *PoolGradChain(gcc_dtype low) {
  gcc_builder *b = gcc_builder_new("pool_grad_chain", 5);
  int64_t xd[4] = {3, 4, 9, 9};
  auto cast = [&](int v, const char *name) {
    if (low == GCC_DT_FLOAT32)
      return v;
    int c = gcc_build_op(b, GCC_OP_CAST, name, (std::string(name) + ".out").c_str(), &v, 1);
    gcc_build_set_int(b, c, "to", low);
    return c;
  };
  int x = cast(gcc_build_input(b, "x", GCC_DT_FLOAT32, 4, xd), "x16");
  std::vector<int> outs;
  for (int c = 0; c < 5; c++) {
    const PoolGradCase &pc = kPoolGrads[c];
    std::string t = std::to_string(c);
    int64_t dd[4] = {3, 4, pc.oh, pc.oh}, k[2] = {pc.k, pc.k}, s[2] = {pc.s, pc.s},
            p[4] = {pc.pt, pc.pl, pc.pb, pc.pr}, dl[2] = {pc.dil, pc.dil};
    int dy =
        cast(gcc_build_input(b, ("dy" + t).c_str(), GCC_DT_FLOAT32, 4, dd), ("dy16_" + t).c_str());
    auto window = [&](int n) {
      gcc_build_set_ints(b, n, "kernel_shape", k, 2);
      gcc_build_set_ints(b, n, "strides", s, 2);
      gcc_build_set_ints(b, n, "pads", p, 4);
      if (pc.dil != 1)
        gcc_build_set_ints(b, n, "dilations", dl, 2);
    };
    int gr;
    if (pc.max) {
      int mp = gcc_build_op(b, GCC_OP_MAX_POOL, ("maxpool" + t).c_str(),
                            ("maxpool" + t + ".out").c_str(), &x, 1);
      window(mp);
      int in[3] = {dy, x, mp};
      gr = gcc_build_op(b, GCC_OP_MAX_POOL_GRAD, ("maxpool_grad" + t).c_str(),
                        ("maxpool_grad" + t + ".out").c_str(), in, 3);
    } else {
      gr = gcc_build_op(b, GCC_OP_AVERAGE_POOL_GRAD, ("avgpool_grad" + t).c_str(),
                        ("avgpool_grad" + t + ".out").c_str(), &dy, 1);
      gcc_build_set_int(b, gr, "count_include_pad", pc.include_pad);
      gcc_build_set_ints(b, gr, "input_shape", xd, 4);
    }
    window(gr);
    outs.push_back(gr);
  }
  for (size_t c = 0; c < outs.size(); c++) {
    int o = outs[c];
    if (low != GCC_DT_FLOAT32) {
      std::string name = "dx" + std::to_string(c);
      o = gcc_build_op(b, GCC_OP_CAST, (name + "_f32").c_str(), name.c_str(), &o, 1);
      gcc_build_set_int(b, o, "to", GCC_DT_FLOAT32);
    }
    gcc_build_output(b, o);
  }
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

// dX of one case, written here from the definitions: dY of each window to
// its first maximum in row-major window order (NaN wins), or dY / divisor
// to each tap inside, summed in float32 in ascending window order (the
// CPU kernel's scatter order), rounded once to `low`.
std::vector<float> RefPoolGrad(const PoolGradCase &pc, const std::vector<float> &x,
                               const std::vector<float> &dy, gcc_dtype low) {
  const int64_t h = 9, oh = pc.oh;
  std::vector<float> dx(x.size(), 0.0f);
  for (int64_t pl = 0; pl < 12; pl++)
    for (int64_t oy = 0; oy < oh; oy++)
      for (int64_t ox = 0; ox < oh; ox++) {
        std::vector<int64_t> taps;
        for (int64_t a = 0; a < pc.k; a++)
          for (int64_t bb = 0; bb < pc.k; bb++) {
            int64_t iy = oy * pc.s - pc.pt + a * pc.dil, ix = ox * pc.s - pc.pl + bb * pc.dil;
            if (iy >= 0 && iy < h && ix >= 0 && ix < h)
              taps.push_back(pl * h * h + iy * h + ix);
          }
        float g = dy[(size_t)((pl * oh + oy) * oh + ox)];
        if (pc.max) {
          int64_t best = taps[0];
          for (int64_t t : taps)
            if (x[(size_t)t] > x[(size_t)best] || std::isnan(x[(size_t)t]))
              best = t;
          dx[(size_t)best] += g;
        } else {
          float v = g / (float)(pc.include_pad ? pc.k * pc.k : (int64_t)taps.size());
          for (int64_t t : taps)
            dx[(size_t)t] += v;
        }
      }
  if (low != GCC_DT_FLOAT32)
    for (float &v : dx)
      v = low == GCC_DT_BFLOAT16 ? gcc_round_bf16(v) : gcc_round_f16(v);
  return dx;
}

// The pooling gradients of 16-bit plans are generated kernels on a GPU (not
// cuDNN, whose legacy pooling API does not promise bfloat16), and they
// store the CPU's bits: host-emulated CUDA plan, CPU plan and the reference
// above agree bit for bit, ties (x takes four values) included. A NaN in X
// wins its windows (MaxPoolGrad's semantics, the CPU kernel's and cuDNN's
// NaN-propagating max) in both plans. The float32 average pooling gradient of
// the CPU plan is oneDNN's, compared within a bound (see below).
// Float32 plans keep cuDNN for the windows it expresses (the dilated and
// the asymmetric ones are generated kernels there too).
TEST(Kernels16, PoolingGradientsAreGeneratedKernelsThatStoreTheCpuBits) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> ud(0, 3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(3 * 4 * 81);
  for (float &v : x)
    v = 0.5f * (float)ud(rng) - 1.0f; // exact in 16 bits: many ties
  x[81 + 2 * 9 + 3] = NAN;
  std::vector<std::vector<float>> dys(5);
  for (int c = 0; c < 5; c++) {
    dys[(size_t)c].resize((size_t)(12 * kPoolGrads[c].oh * kPoolGrads[c].oh));
    for (float &v : dys[(size_t)c])
      v = nd(rng);
  }
  for (gcc_dtype low : {GCC_DT_BFLOAT16, GCC_DT_FLOAT16, GCC_DT_FLOAT32}) {
    SCOPED_TRACE(gcc_dtype_name(low));
    auto r16 = [&](float f) {
      return low == GCC_DT_BFLOAT16  ? gcc_round_bf16(f)
             : low == GCC_DT_FLOAT16 ? gcc_round_f16(f)
                                     : f;
    };
    gcc_graph *g = PoolGradChain(low);
    ASSERT_NE(g, nullptr);
    { // the poolings' groups: generated kernels in 16 bits, cuDNN in float32
      gcc_graph *pl = Compile(g, GCC_PRECISION_FP32, GCC_MODE_EVAL, GCC_DEV_CUDA(0), 3);
      ASSERT_NE(pl, nullptr);
      int pools = 0;
      for (int i = 0; i < pl->n_nodes; i++) {
        const gcc_node *n = &pl->nodes[i];
        if (n->op != GCC_OP_MAX_POOL && n->op != GCC_OP_MAX_POOL_GRAD &&
            n->op != GCC_OP_AVERAGE_POOL_GRAD)
          continue;
        pools++;
        ASSERT_EQ(n->device, GCC_DEV_CUDA(0)) << n->name;
        ASSERT_GE(n->group, 0) << n->name;
        // cuDNN expresses cases 0, 2 and 4 (1 is dilated, 3 padded asymmetrically)
        char last = n->name[strlen(n->name) - 1];
        bool cudnn = low == GCC_DT_FLOAT32 && (last == '0' || last == '2' || last == '4');
        int want = cudnn ? GCC_GROUP_CUDNN : GCC_GROUP_POINTWISE;
        EXPECT_EQ(pl->groups[n->group].kind, want) << n->name;
      }
      EXPECT_EQ(pools, 7);
      gcc_graph_free(pl);
    }
    std::vector<float> xq(x.size());
    for (size_t i = 0; i < x.size(); i++)
      xq[i] = r16(x[i]);
    std::vector<const void *> in = {x.data()};
    for (auto &dy : dys)
      in.push_back(dy.data());
    std::vector<PlanOutput> out[2];
    ASSERT_EQ(RunPlan(g, in, 3, false, &out[0]), "");
    gcc_host_test::HostBackend *hb = SharedHostBackend();
    hb->library_ops.clear();
    ASSERT_EQ(RunPlan(g, in, 3, true, &out[1]), "");
    int pool_calls = 0;
    for (auto &op : hb->library_ops) {
      EXPECT_FALSE(op.second) << "a library call with 16-bit operands: " << gcc_op_name(op.first);
      pool_calls += op.first == GCC_OP_MAX_POOL || op.first == GCC_OP_MAX_POOL_GRAD ||
                    op.first == GCC_OP_AVERAGE_POOL_GRAD;
    }
    EXPECT_EQ(pool_calls, low == GCC_DT_FLOAT32 ? 4 : 0); // cases 0 (both), 2 and 4
    ASSERT_EQ(out[0].size(), 5u);
    ASSERT_EQ(out[1].size(), 5u);
    for (int c = 0; c < 5; c++) {
      SCOPED_TRACE("case " + std::to_string(c));
      std::vector<float> dyq(dys[(size_t)c].size());
      for (size_t i = 0; i < dyq.size(); i++)
        dyq[i] = r16(dys[(size_t)c][i]);
      std::vector<float> want = RefPoolGrad(kPoolGrads[c], xq, dyq, low);
      for (int plan = 0; plan < 2; plan++) {
        const std::vector<float> &got = out[plan][(size_t)c].f32;
        ASSERT_EQ(got.size(), want.size());
        // Max pooling, both plans, the plane with a NaN included, bit for bit:
        // the CPU plan's max pooling gradient is runtime/cpu's own loops
        // (PyTorch's first maximum, NaN winning) on every ISA, not oneDNN's JIT
        // kernels, whose ties differed between AVX2 and AVX-512.
        // Average pooling in float32 on the CPU plan is oneDNN's backward
        // primitive, whose JIT kernel divides and sums in another order on
        // AVX-512 than on AVX2 (49 of 972 elements of case 2 differed in the
        // last bit there): within a bound instead. dX is a sum of at most
        // ceil(k/s)^2 = 4 terms dY/div, each rounded once (1 ulp) and summed
        // with 3 roundings: |got - want| <= 8 * 2^-24 * sum |dY/div| (2x margin).
        bool bounded = plan == 0 && !kPoolGrads[c].max && low == GCC_DT_FLOAT32;
        std::vector<float> scale;
        if (bounded) {
          std::vector<float> dy_abs(dyq.size());
          for (size_t i = 0; i < dyq.size(); i++)
            dy_abs[i] = std::fabs(dyq[i]);
          scale = RefPoolGrad(kPoolGrads[c], xq, dy_abs, low);
        }
        int differ = 0, nonzero = 0;
        for (size_t i = 0; i < want.size(); i++) {
          if (bounded)
            differ += !(std::fabs(got[i] - want[i]) <= 8.0f * 0x1p-24f * scale[i]);
          else
            differ += !SameBits(got[i], want[i]);
          nonzero += want[i] != 0.0f;
        }
        EXPECT_EQ(differ, 0) << (plan ? "CUDA plan" : "CPU plan")
                             << (bounded ? " (within the bound)" : " (bit for bit)");
        EXPECT_GT(nonzero, (int)want.size() / 8);
      }
    }
    gcc_graph_free(g);
  }
}

// ---- a 16-bit convolution's bias ------------------------------------------------
//
// x [2, 3, 6, 6] -> Conv(3 -> 4, 3x3, p 1) and ConvTranspose(3 -> 2, 3x3,
// s 2, p 1), X, W and B cast to `low` (B left out with `bias` false) ->
// Casts to float32 (exact).
gcc_graph *ConvBiasChain(gcc_dtype low, bool bias) {
  gcc_builder *b = gcc_builder_new("conv_bias_chain", 7);
  int64_t xd[4] = {GCC_BATCH_DIM, 3, 6, 6}, wd[4] = {4, 3, 3, 3}, td[4] = {3, 2, 3, 3};
  int64_t bd[1] = {4}, btd[1] = {2};
  auto cast = [&](int v, const char *name, gcc_dtype to) {
    int c = gcc_build_op(b, GCC_OP_CAST, name, (std::string(name) + ".out").c_str(), &v, 1);
    gcc_build_set_int(b, c, "to", to);
    return c;
  };
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::vector<float> w(4 * 27), wt(3 * 18), bv(4), btv(2);
  for (auto *v : {&w, &wt, &bv, &btv})
    for (float &f : *v)
      f = nd(rng);
  int x = cast(gcc_build_input(b, "x", GCC_DT_FLOAT32, 4, xd), "x16", low);
  const int64_t p1[4] = {1, 1, 1, 1}, s2[2] = {2, 2};
  int cin[3] = {x, cast(gcc_build_param(b, "conv.weight", 4, wd, w.data()), "w16", low),
                bias ? cast(gcc_build_param(b, "conv.bias", 1, bd, bv.data()), "b16", low) : -1};
  int cv = gcc_build_op(b, GCC_OP_CONV, "conv16", "conv16.out", cin, bias ? 3 : 2);
  gcc_build_set_ints(b, cv, "pads", p1, 4);
  int tin[3] = {x, cast(gcc_build_param(b, "convt.weight", 4, td, wt.data()), "wt16", low),
                bias ? cast(gcc_build_param(b, "convt.bias", 1, btd, btv.data()), "bt16", low)
                     : -1};
  int ct = gcc_build_op(b, GCC_OP_CONV_TRANSPOSE, "convt16", "convt16.out", tin, bias ? 3 : 2);
  gcc_build_set_ints(b, ct, "strides", s2, 2);
  gcc_build_set_ints(b, ct, "pads", p1, 4);
  gcc_build_output(b, cast(cv, "conv", GCC_DT_FLOAT32));
  gcc_build_output(b, cast(ct, "convt", GCC_DT_FLOAT32));
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

// A GPU stores a 16-bit Conv's / ConvTranspose's result, then adds the bias
// (cudnnAddTensor) and rounds again; the CPU reference does the same: its
// output with B is round16(round16(conv) + B), conv being the plan's own
// result without B (so this holds whatever order the convolution sums in),
// on the CPU plan and on the host-emulated CUDA plan. A single rounding
// (round16(conv + B), conv in float64) differs from it at some elements:
// the check can fail.
TEST(Kernels16, ConvolutionBiasIsAddedAfterTheSixteenBitResultAsOnAGpu) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  const int64_t n = 2;
  std::vector<float> x((size_t)(n * 3 * 36));
  std::mt19937 rng(37);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float &v : x)
    v = nd(rng);
  for (gcc_dtype low : {GCC_DT_BFLOAT16, GCC_DT_FLOAT16}) {
    SCOPED_TRACE(gcc_dtype_name(low));
    auto r16 = [&](double f) {
      return low == GCC_DT_BFLOAT16 ? gcc_round_bf16((float)f) : gcc_round_f16((float)f);
    };
    gcc_graph *with = ConvBiasChain(low, true), *without = ConvBiasChain(low, false);
    ASSERT_NE(with, nullptr);
    ASSERT_NE(without, nullptr);
    // the biases, as the graph holds them (float32 parameters, cast to low)
    std::vector<float> bias[2];
    for (int k = 0; k < with->n_values; k++)
      for (int o = 0; o < 2; o++)
        if (strcmp(with->values[k].name, o ? "convt.bias" : "conv.bias") == 0) {
          const float *f = static_cast<const float *>(with->values[k].data);
          ASSERT_NE(f, nullptr);
          for (int64_t i = 0; i < (o ? 2 : 4); i++)
            bias[o].push_back(r16(f[i]));
        }
    ASSERT_EQ(bias[0].size(), 4u);
    ASSERT_EQ(bias[1].size(), 2u);
    int single_differs = 0;
    for (int cuda = 0; cuda < 2; cuda++) {
      SCOPED_TRACE(cuda ? "CUDA plan" : "CPU plan");
      std::vector<PlanOutput> yb, y0;
      ASSERT_EQ(RunPlan(with, {x.data()}, n, cuda, &yb), "");
      ASSERT_EQ(RunPlan(without, {x.data()}, n, cuda, &y0), "");
      ASSERT_EQ(yb.size(), 2u);
      ASSERT_EQ(y0.size(), 2u);
      for (int o = 0; o < 2; o++) {
        const int64_t m = o ? 2 : 4, inner = o ? 11 * 11 : 6 * 6;
        ASSERT_EQ(yb[(size_t)o].f32.size(), (size_t)(n * m * inner));
        ASSERT_EQ(y0[(size_t)o].f32.size(), yb[(size_t)o].f32.size());
        int differ = 0;
        for (size_t i = 0; i < yb[(size_t)o].f32.size(); i++) {
          float c = y0[(size_t)o].f32[i], bb = bias[o][(i / (size_t)inner) % (size_t)m];
          ASSERT_EQ(c, r16(c)) << "a result without B that is not a 16-bit value";
          float want = r16((double)(c + bb)); // the float32 sum, as cudnnAddTensor's
          differ += !SameBits(yb[(size_t)o].f32[i], want);
        }
        EXPECT_EQ(differ, 0) << (o ? "ConvTranspose" : "Conv");
      }
      if (cuda)
        continue;
      // Conv in float64 on the 16-bit operands, rounded once with its bias
      std::vector<float> w, xq(x.size());
      for (size_t i = 0; i < x.size(); i++)
        xq[i] = r16(x[i]);
      for (int k = 0; k < with->n_values; k++)
        if (strcmp(with->values[k].name, "conv.weight") == 0) {
          const float *f = static_cast<const float *>(with->values[k].data);
          for (int i = 0; i < 4 * 27; i++)
            w.push_back(r16(f[i]));
        }
      ASSERT_EQ(w.size(), 108u);
      for (int64_t s = 0; s < n; s++)
        for (int64_t mo = 0; mo < 4; mo++)
          for (int64_t oy = 0; oy < 6; oy++)
            for (int64_t ox = 0; ox < 6; ox++) {
              double acc = 0;
              for (int64_t c = 0; c < 3; c++)
                for (int64_t a = 0; a < 3; a++)
                  for (int64_t bb = 0; bb < 3; bb++) {
                    int64_t iy = oy - 1 + a, ix = ox - 1 + bb;
                    if (iy >= 0 && iy < 6 && ix >= 0 && ix < 6)
                      acc += (double)xq[(size_t)(((s * 3 + c) * 6 + iy) * 6 + ix)] *
                             w[(size_t)(((mo * 3 + c) * 3 + a) * 3 + bb)];
                  }
              size_t at = (size_t)(((s * 4 + mo) * 6 + oy) * 6 + ox);
              single_differs += !SameBits(yb[0].f32[at], r16(acc + bias[0][(size_t)mo]));
            }
    }
    EXPECT_GT(single_differs, 0) << "one rounding gives the same values here: the test is weak";
    std::printf("[kernels16] %s: %d of %d Conv outputs differ from a single rounding\n",
                gcc_dtype_name(low), single_differs, (int)(n * 4 * 36));
    gcc_graph_free(with);
    gcc_graph_free(without);
  }
}

// Training steps in bfloat16 on the host-emulated CUDA plan and on the CPU
// plan: both update float32 master weights from float32 gradients. The two
// differ only where a GEMM's float32 sums, taken in different orders, fall
// on the two sides of a bfloat16 rounding boundary (the forward test above
// bounds that: a few elements by one bfloat16 unit, 2^-8 relative); SGD
// turns the gradient difference into lr * that, so the parameters after a
// few steps agree to about lr * 2^-8 * |grad| per step, well inside 1e-3 of
// their magnitude, and the losses to the same order.
// `steps` training steps of `rows` random samples (`features` floats, labels
// below `classes`) on the host-emulated CUDA plan and on the CPU plan.
void TrainBothAndCompare(const gcc_graph *g, int precision, int64_t features, int classes,
                         int64_t rows, int steps, double loss_tol, double param_tol) {
  HostBackend hb;
  gcc_diag d{};
  gcc_session_options co{};
  co.threads = 1;
  co.opt = g->training.opt;
  co.precision = precision;
  gcc_session_options dso = co;
  dso.backend = &hb.be;
  dso.device = GCC_DEV_CUDA(0);
  dso.plan.sm = 90;
  dso.plan.sm_count = 4;
  dso.plan.compile = gcc_kernel_cache_hook;
  dso.plan.compile_user = gcc_test::TestKernelCache();
  dso.max_pending = 1;
  gcc_session *cpu = nullptr, *dev = nullptr;
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int s = 0; s < steps; s++) {
    std::vector<float> x((size_t)(rows * features));
    std::vector<int64_t> y((size_t)rows);
    for (float &v : x)
      v = nd(rng);
    for (int64_t &v : y)
      v = (int64_t)(rng() % (uint32_t)classes);
    float l1 = 0, l2 = 0;
    ASSERT_EQ(gcc_session_train_step(cpu, x.data(), y.data(), rows, &l1, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(dev, x.data(), y.data(), rows, &l2, &d), GCC_OK) << d.msg;
    EXPECT_TRUE(std::isfinite(l1));
    EXPECT_NEAR(l1, l2, loss_tol * std::fmax(1.0f, std::fabs(l1))) << "step " << s;
  }
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != GCC_VALUE_PARAM)
      continue;
    const char *p = g->values[v].name;
    float *a = nullptr, *b = nullptr;
    int64_t n1 = 0, n2 = 0;
    ASSERT_EQ(gcc_session_param(dev, p, &a, &n1, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_param(cpu, p, &b, &n2, &d), GCC_OK) << d.msg;
    ASSERT_EQ(n1, n2);
    double m = 0, e = 0;
    for (int64_t i = 0; i < n1; i++) {
      m = std::fmax(m, std::fabs((double)b[i]));
      e = std::fmax(e, std::fabs((double)a[i] - (double)b[i]));
    }
    EXPECT_LE(e, param_tol * m) << p;
  }
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  for (const std::string &v : hb.violations)
    ADD_FAILURE() << v;
  for (const std::string &v : hb.misaligned)
    ADD_FAILURE() << v;
  EXPECT_GT(hb.gemms, 0);
}

// Training steps in bfloat16 / float16 on the host-emulated CUDA plan and
// on the CPU plan: both update float32 master weights from float32
// gradients. The two differ only where a GEMM's (or convolution's) float32
// sums, taken in different orders, fall on the two sides of a 16-bit
// rounding boundary (the forward test above bounds that: a few elements by
// one unit, 2^-8 relative in bfloat16); SGD turns a gradient difference
// into lr times it, so after a few steps the parameters agree to about
// lr * 2^-8 * |grad| per step, inside 1e-3 (bfloat16) of their magnitude,
// and the losses to a few units of 2^-8.
TEST(MixedPrecisionTraining, MlpOnTheDeviceTracksTheCpu) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  gcc_graph *g = Mlp();
  ASSERT_NE(g, nullptr);
  {
    SCOPED_TRACE("bf16");
    TrainBothAndCompare(g, GCC_PRECISION_BF16, 36, 5, 8, 4, 2e-2, 1e-3);
  }
  {
    SCOPED_TRACE("fp16");
    TrainBothAndCompare(g, GCC_PRECISION_FP16, 36, 5, 8, 4, 4e-3, 2e-4);
  }
  gcc_graph_free(g);
}

TEST(MixedPrecisionTraining, BothCnnsOnTheDeviceTrackTheCpu) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_cnn(GCC_MNIST_CNN_SEED, &g, &d), GCC_OK) << d.msg;
  {
    SCOPED_TRACE("mnist_cnn bf16");
    TrainBothAndCompare(g, GCC_PRECISION_BF16, 28 * 28, 10, 4, 2, 2e-2, 1e-3);
  }
  gcc_graph_free(g);
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &g, &d), GCC_OK) << d.msg;
  {
    SCOPED_TRACE("cifar_cnn bf16");
    TrainBothAndCompare(g, GCC_PRECISION_BF16, 3 * 32 * 32, 10, 4, 2, 2e-2, 1e-3);
  }
  gcc_graph_free(g);
}

// ---- the 16-bit weight copies the optimizer updates write ---------------------
//
// A trained parameter's bfloat16 / float16 copy is the output of its update
// node (passes/autocast.c): the update rounds the updated float32 weight to
// nearest even and stores it, and the next step's GEMMs read it, where the
// plans before cast the parameter at the start of each step. Both round the
// same float32 weights the same way, so training gives the same bits
// (checked against the Cast plans, gcc_options.param_copy_casts), and the
// copy must follow the parameters wherever they are set from outside a step.

// Cast nodes reading a parameter: the per-step casts of 16-bit weight copies.
int ParamCasts(const gcc_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].op == GCC_OP_CAST && g->values[g->nodes[i].inputs[0]].kind == GCC_VALUE_PARAM;
  return n;
}

// Update nodes that write their parameter's 16-bit copy.
int UpdateCopies(const gcc_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += (gcc_op(g->nodes[i].op)->flags & GCC_OPF_OPTIMIZER) && g->nodes[i].n_outputs == 1;
  return n;
}

// x [N, 36] -> fc1 -> ReLU -> "shift": + fc1.bias (an Add: float32, so
// fc1.bias is read in float32 there and in bfloat16 by fc1's Gemm) -> fc2 ->
// cross-entropy; "aux", a Linear of x that is a graph output but not part of
// the loss: no gradient, no update, so its Gemm reads a per-step Cast.
gcc_graph *MixedUse(gcc_opt_kind kind = GCC_OPT_SGD) {
  gcc_builder *b = gcc_builder_new("mixed_use", 11);
  int64_t xd[2] = {GCC_BATCH_DIM, 36}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", x, 36, 24));
  int shift_in[2] = {h, gcc_graph_find(b->g, "fc1.bias")};
  h = gcc_build_op(b, GCC_OP_ADD, "shift", "shift.out", shift_in, 2);
  int logits = gcc_build_linear(b, "fc2", h, 24, 5);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, gcc_build_linear(b, "aux", x, 36, 3));
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", "fc2.out", "image", "label",
                              Opt(kind, kind == GCC_OPT_ADAM ? 0.01f : 0.1f, 0.5f));
}

TEST(OptimizerCopies, TrainingPlansCastNoTrainedParameter) {
  gcc_graph *mlp = Mlp(), *mlp_adam = Mlp(GCC_OPT_ADAM), *mcnn = nullptr, *cifar = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_cnn(GCC_MNIST_CNN_SEED, &mcnn, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cifar, &d), GCC_OK) << d.msg;
  ASSERT_TRUE(mlp && mlp_adam);
  struct M {
    const char *name;
    const gcc_graph *g;
    int params; // all read by a GEMM or convolution, all trained
  } models[] = {{"mlp", mlp, 6},
                {"mlp_adam", mlp_adam, 6},
                {"mnist_cnn", mcnn, 10},
                {"cifar_cnn", cifar, 10}};
  for (const M &m : models)
    for (int prec : {GCC_PRECISION_BF16, GCC_PRECISION_FP16})
      for (int dev : {GCC_DEV_CPU, GCC_DEV_CUDA(0)}) {
        SCOPED_TRACE(std::string(m.name) + " " + gcc_precision_name(prec) +
                     (dev == GCC_DEV_CPU ? " cpu" : " cuda"));
        int np = 0;
        for (int v = 0; v < m.g->n_values; v++)
          np += m.g->values[v].kind == GCC_VALUE_PARAM;
        ASSERT_EQ(np, m.params);
        gcc_graph *g = Compile(m.g, prec, GCC_MODE_TRAIN, dev, 4);
        gcc_graph *old = Compile(m.g, prec, GCC_MODE_TRAIN, dev, 4, true);
        gcc_graph *ev = Compile(m.g, prec, GCC_MODE_EVAL, dev, 4);
        ASSERT_TRUE(g && old && ev);
        EXPECT_EQ(ParamCasts(g), 0); // no per-step pass over the weights
        EXPECT_EQ(UpdateCopies(g), m.params);
        // the plans of before: one Cast per parameter each step, no copies
        EXPECT_EQ(ParamCasts(old), m.params);
        EXPECT_EQ(UpdateCopies(old), 0);
        EXPECT_EQ(g->n_nodes, old->n_nodes - m.params);
        // an evaluation plan has no update to make the copy: it casts the
        // same float32 weights (the same bits) once per batch
        EXPECT_EQ(ParamCasts(ev), m.params);
        if (dev != GCC_DEV_CPU) { // the copies live with their parameters, on the GPU
          for (int v = 0; v < g->n_values; v++)
            if (g->values[v].kind == GCC_VALUE_OPT_STATE && g->values[v].dtype != GCC_DT_FLOAT32) {
              EXPECT_EQ(g->values[v].device, GCC_DEV_CUDA(0)) << g->values[v].name;
            }
          for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].op == GCC_OP_COPY) { // only the batch, the loss and the prediction
              EXPECT_NE(g->values[g->nodes[i].inputs[0]].kind, GCC_VALUE_OPT_STATE)
                  << g->nodes[i].name;
            }
        }
        gcc_graph_free(g);
        gcc_graph_free(old);
        gcc_graph_free(ev);
      }
  gcc_graph_free(mlp);
  gcc_graph_free(mlp_adam);
  gcc_graph_free(mcnn);
  gcc_graph_free(cifar);
}

TEST(OptimizerCopies, UntrainedParametersKeepTheirCastFloat32ReadersTheParameter) {
  gcc_graph *model = MixedUse();
  ASSERT_NE(model, nullptr);
  for (int dev : {GCC_DEV_CPU, GCC_DEV_CUDA(0)}) {
    gcc_graph *g = Compile(model, GCC_PRECISION_BF16, GCC_MODE_TRAIN, dev);
    ASSERT_NE(g, nullptr);
    auto readers = [&](const char *v, int op) {
      int n = 0, vi = gcc_graph_find(g, v);
      EXPECT_GE(vi, 0) << v;
      for (int c = 0; vi >= 0 && c < g->values[vi].n_consumers; c++)
        n += g->nodes[g->values[vi].consumers[c]].op == op;
      return n;
    };
    // aux: no gradient reaches the loss, no update: its Gemm reads a Cast
    EXPECT_EQ(readers("aux.weight", GCC_OP_CAST), 1);
    EXPECT_EQ(readers("aux.bias", GCC_OP_CAST), 1);
    EXPECT_LT(gcc_graph_find(g, "aux.weight.bf16_1"), 0);
    int aux_copy = gcc_graph_find(g, "aux.weight.bf16");
    ASSERT_GE(aux_copy, 0);
    EXPECT_EQ(g->values[aux_copy].kind, GCC_VALUE_ACTIVATION); // a Cast's, per step
    // fc1.bias: read by the Add in float32 and by fc1's Gemm through the copy
    // its update writes
    EXPECT_EQ(readers("fc1.bias", GCC_OP_CAST), 0);
    EXPECT_EQ(readers("fc1.bias", GCC_OP_ADD), 1);
    EXPECT_EQ(readers("fc1.bias", GCC_OP_SGD), 1);
    EXPECT_EQ(readers("fc1.bias.bf16", GCC_OP_GEMM), 1);
    int copy = gcc_graph_find(g, "fc1.bias.bf16");
    ASSERT_GE(copy, 0);
    EXPECT_EQ(g->values[copy].kind, GCC_VALUE_OPT_STATE);
    EXPECT_EQ(g->values[copy].param_of, gcc_graph_find(g, "fc1.bias"));
    EXPECT_EQ(ParamCasts(g), 2);
    EXPECT_EQ(UpdateCopies(g), 4);
    gcc_graph_free(g);
  }
  gcc_graph_free(model);
}

// Data-parallel: every update (and so its copy) comes after the AllReduce
// of its gradient: the copy is of the all-reduced update.
TEST(OptimizerCopies, DataParallelCopiesFollowTheAllReduce) {
  gcc_graph *model = Mlp();
  ASSERT_NE(model, nullptr);
  for (int dev : {GCC_DEV_CPU, GCC_DEV_CUDA(0)}) {
    gcc_graph *g = Compile(model, GCC_PRECISION_FP16, GCC_MODE_TRAIN, dev, 8, false, 2);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(ParamCasts(g), 0);
    EXPECT_EQ(UpdateCopies(g), 6);
    int reduces = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const gcc_node *u = &g->nodes[i];
      reduces += u->op == GCC_OP_ALL_REDUCE;
      if (!(gcc_op(u->op)->flags & GCC_OPF_OPTIMIZER))
        continue;
      ASSERT_EQ(u->n_outputs, 1) << u->name;
      int ar = -1;
      for (int j = 0; j < g->n_nodes; j++)
        for (int k = 0; k < g->nodes[j].n_inputs; k++)
          if (g->nodes[j].op == GCC_OP_ALL_REDUCE && g->nodes[j].inputs[k] == u->inputs[1])
            ar = j;
      ASSERT_GE(ar, 0) << u->name;
      EXPECT_LT(ar, i) << u->name;
      if (dev != GCC_DEV_CPU) { // its kernel waits for that bucket
        ASSERT_GE(u->group, 0);
        EXPECT_EQ(g->groups[u->group].kind, GCC_GROUP_OPTIMIZER);
      }
    }
    EXPECT_GT(reduces, 0);
    gcc_graph_free(g);
  }
  gcc_graph_free(model);
}

struct Sess {
  gcc_session *s = nullptr;
  HostBackend hb; // a device session's (unused on the CPU)
  ~Sess() { gcc_session_destroy(s); }
};

// A session of `g` at `precision` on the CPU or the host-emulated GPU,
// with the Cast plans of before when `casts`.
void MakeSession(const gcc_graph *g, int precision, bool device, bool casts, Sess *out) {
  gcc_session_options o{};
  o.threads = 1;
  o.opt = g->training.opt;
  o.precision = precision;
  o.param_copy_casts = casts;
  if (device) {
    o.backend = &out->hb.be;
    o.device = GCC_DEV_CUDA(0);
    o.plan.sm = 90;
    o.plan.sm_count = 4;
    o.plan.compile = gcc_kernel_cache_hook;
    o.plan.compile_user = gcc_test::TestKernelCache();
    o.max_pending = 1;
  }
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(g, &o, &out->s, &d), GCC_OK) << d.msg;
}

// The batch of optimizer step `step`: `rows` samples of `features` normal
// floats, labels below `classes` (the same for every session).
void Batch(int step, int64_t rows, int64_t features, int classes, std::vector<float> *x,
           std::vector<int64_t> *y) {
  std::mt19937 rng(1000u + (unsigned)step);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  x->resize((size_t)(rows * features));
  y->resize((size_t)rows);
  for (float &v : *x)
    v = nd(rng);
  for (int64_t &v : *y)
    v = (int64_t)(rng() % (uint32_t)classes);
}

// Steps first .. last - 1 on session `s`; their losses appended to *losses.
void Train(gcc_session *s, int first, int last, int64_t rows, int64_t features, int classes,
           std::vector<float> *losses) {
  std::vector<float> x;
  std::vector<int64_t> y;
  gcc_diag d{};
  for (int t = first; t < last; t++) {
    Batch(t, rows, features, classes, &x, &y);
    float l = 0;
    ASSERT_EQ(gcc_session_train_step(s, x.data(), y.data(), rows, &l, &d), GCC_OK) << d.msg;
    losses->push_back(l);
  }
}

uint64_t Hash(gcc_session *s) {
  uint64_t h = 0;
  gcc_diag d{};
  EXPECT_EQ(gcc_session_param_hash(s, &h, &d), GCC_OK) << d.msg;
  return h;
}

bool SameLossBits(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); i++)
    if (!SameBits(a[i], b[i]))
      return false;
  return true;
}

// The training plan of session `s` (batch `rows`).
const gcc_graph *TrainPlan(gcc_session *s, int64_t rows) {
  gcc_plan *p = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_session_plan(s, GCC_MODE_TRAIN, rows, &p, &d), GCC_OK) << d.msg;
  return p ? gcc_plan_graph(p) : nullptr;
}

TEST(OptimizerCopies, TrainingGivesTheBitsOfTheCastPlans) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  gcc_graph *mlp = Mlp(), *mlp_adam = Mlp(GCC_OPT_ADAM), *mixed = MixedUse(GCC_OPT_ADAM);
  gcc_graph *mcnn = nullptr, *plain = nullptr, *adamw = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_cnn(GCC_MNIST_CNN_SEED, &mcnn, &d), GCC_OK) << d.msg;
  ASSERT_TRUE(mlp && mlp_adam && mixed);
  // the other branches of the optimizer kernels: SGD without momentum, AdamW
  ASSERT_EQ(gcc_graph_clone(mlp, &plain, &d), GCC_OK) << d.msg;
  plain->training.opt.momentum = 0.0f;
  plain->training.opt.weight_decay = 1e-3f;
  ASSERT_EQ(gcc_graph_clone(mlp_adam, &adamw, &d), GCC_OK) << d.msg;
  adamw->training.opt.decoupled = 1;
  adamw->training.opt.weight_decay = 1e-2f;
  // fp16 loss scaling from 2^20: the float16 gradients overflow at first and
  // those steps are skipped (the copies stay those of the unchanged weights)
  gcc_graph *scaled = nullptr;
  ASSERT_EQ(gcc_graph_clone(mlp, &scaled, &d), GCC_OK) << d.msg;
  scaled->training.opt.scaler = {GCC_LOSS_SCALE_DYNAMIC, 1048576.0f, GCC_SCALER_GROWTH_FACTOR,
                                 GCC_SCALER_BACKOFF_FACTOR, GCC_SCALER_GROWTH_INTERVAL};
  struct C {
    const char *name;
    const gcc_graph *g;
    int precision;
    int64_t features, rows;
    int classes, steps;
  } cases[] = {
      {"mlp sgd bf16", mlp, GCC_PRECISION_BF16, 36, 8, 5, 5},
      {"mlp adam fp16", mlp_adam, GCC_PRECISION_FP16, 36, 8, 5, 5},
      {"mixed_use adam bf16", mixed, GCC_PRECISION_BF16, 36, 8, 5, 4},
      {"mnist_cnn sgd bf16", mcnn, GCC_PRECISION_BF16, 28 * 28, 4, 10, 2},
      {"mlp sgd without momentum fp16", plain, GCC_PRECISION_FP16, 36, 8, 5, 3},
      {"mlp adamw bf16", adamw, GCC_PRECISION_BF16, 36, 8, 5, 3},
      {"mlp sgd fp16 loss-scaled", scaled, GCC_PRECISION_FP16, 36, 8, 5, 5},
  };
  for (const C &c : cases)
    for (bool device : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (device ? " host-emulated cuda" : " cpu"));
      Sess now, before;
      MakeSession(c.g, c.precision, device, false, &now);
      MakeSession(c.g, c.precision, device, true, &before);
      ASSERT_TRUE(now.s && before.s);
      std::vector<float> l1, l2;
      Train(now.s, 0, c.steps, c.rows, c.features, c.classes, &l1);
      Train(before.s, 0, c.steps, c.rows, c.features, c.classes, &l2);
      EXPECT_TRUE(SameLossBits(l1, l2));
      EXPECT_EQ(Hash(now.s), Hash(before.s)) << "the parameters after " << c.steps << " steps";
      const gcc_graph *pn = TrainPlan(now.s, c.rows), *pb = TrainPlan(before.s, c.rows);
      ASSERT_TRUE(pn && pb);
      EXPECT_EQ(ParamCasts(pn), c.g == mixed ? 2 : 0);
      EXPECT_GT(ParamCasts(pb), ParamCasts(pn));
      if (c.g == scaled) { // some steps skipped, some applied
        gcc_loss_scale_state ls{};
        ASSERT_EQ(gcc_session_loss_scale(now.s, &ls, &d), GCC_OK) << d.msg;
        EXPECT_GT(ls.skipped_steps, 0);
        EXPECT_GT(ls.applied_steps, 0);
      }
      for (const std::string &v : now.hb.violations)
        ADD_FAILURE() << v;
      for (const std::string &v : now.hb.misaligned)
        ADD_FAILURE() << v;
    }
  gcc_graph_free(mlp);
  gcc_graph_free(mlp_adam);
  gcc_graph_free(mixed);
  gcc_graph_free(mcnn);
  gcc_graph_free(plain);
  gcc_graph_free(adamw);
  gcc_graph_free(scaled);
}

// Resuming from a checkpoint (the persistent arena: float32 weights and
// optimizer state, no copies) continues bit for bit: the session makes the
// copies from the restored weights, not from the model's initial ones.
TEST(OptimizerCopies, ResumeIsBitwiseTheUninterruptedRun) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  gcc_graph *g = Mlp(GCC_OPT_ADAM);
  ASSERT_NE(g, nullptr);
  for (int prec : {GCC_PRECISION_BF16, GCC_PRECISION_FP16})
    for (bool device : {false, true}) {
      SCOPED_TRACE(std::string(gcc_precision_name(prec)) +
                   (device ? " host-emulated cuda" : " cpu"));
      Sess whole, first, resumed;
      MakeSession(g, prec, device, false, &whole);
      MakeSession(g, prec, device, false, &first);
      MakeSession(g, prec, device, false, &resumed);
      ASSERT_TRUE(whole.s && first.s && resumed.s);
      std::vector<float> lw, lf, lr;
      Train(whole.s, 0, 5, 8, 36, 5, &lw);
      Train(first.s, 0, 2, 8, 36, 5, &lf);
      const void *arena = nullptr;
      size_t bytes = 0;
      gcc_diag d{};
      ASSERT_EQ(gcc_session_arena(first.s, &arena, &bytes, &d), GCC_OK) << d.msg;
      std::vector<char> saved((const char *)arena, (const char *)arena + bytes);
      ASSERT_EQ(gcc_session_restore(resumed.s, saved.data(), saved.size(), 2, &d), GCC_OK) << d.msg;
      Train(resumed.s, 2, 5, 8, 36, 5, &lr);
      lf.insert(lf.end(), lr.begin(), lr.end());
      EXPECT_TRUE(SameLossBits(lw, lf));
      EXPECT_EQ(Hash(whole.s), Hash(resumed.s));
    }
  gcc_graph_free(g);
}

// Parameters given to a session (gcc_session_set_param; on the CPU also
// written through gcc_session_param's pointer) train as a model that
// starts from them: the next step reads their copies, not stale ones.
TEST(OptimizerCopies, CopiesFollowParametersSetThroughTheApi) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  gcc_graph *g = Mlp();
  ASSERT_NE(g, nullptr);
  gcc_diag d{};
  // parameters after 3 steps, and a model that starts from them
  Sess src;
  MakeSession(g, GCC_PRECISION_BF16, false, false, &src);
  ASSERT_NE(src.s, nullptr);
  std::vector<float> ignore;
  Train(src.s, 0, 3, 8, 36, 5, &ignore);
  gcc_graph *moved = nullptr;
  ASSERT_EQ(gcc_session_export(src.s, &moved, &d), GCC_OK) << d.msg;
  std::vector<std::string> names;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == GCC_VALUE_PARAM)
      names.push_back(g->values[v].name);
  ASSERT_EQ(names.size(), 6u);
  for (bool device : {false, true})
    for (bool pointer : {false, true}) {
      if (device && pointer)
        continue; // a device session's gcc_session_param is a read-back copy
      SCOPED_TRACE(std::string(device ? "host-emulated cuda" : "cpu") +
                   (pointer ? ", written through gcc_session_param" : ", gcc_session_set_param"));
      Sess ref, set;
      MakeSession(moved, GCC_PRECISION_BF16, device, false, &ref);
      MakeSession(g, GCC_PRECISION_BF16, device, false, &set);
      ASSERT_TRUE(ref.s && set.s);
      for (const std::string &p : names) {
        int v = gcc_graph_find(moved, p.c_str());
        const float *want = (const float *)moved->values[v].data;
        int64_t n = gcc_shape_numel(&moved->values[v].shape, nullptr);
        if (pointer) {
          float *w = nullptr;
          int64_t m = 0;
          ASSERT_EQ(gcc_session_param(set.s, p.c_str(), &w, &m, &d), GCC_OK) << d.msg;
          ASSERT_EQ(m, n);
          memcpy(w, want, (size_t)n * sizeof(float));
        } else {
          ASSERT_EQ(gcc_session_set_param(set.s, p.c_str(), want, n, &d), GCC_OK) << d.msg;
        }
      }
      EXPECT_EQ(Hash(ref.s), Hash(set.s));
      std::vector<float> l1, l2;
      Train(ref.s, 3, 6, 8, 36, 5, &l1);
      Train(set.s, 3, 6, 8, 36, 5, &l2);
      EXPECT_TRUE(SameLossBits(l1, l2));
      EXPECT_EQ(Hash(ref.s), Hash(set.s));
    }
  // errors name the parameter
  Sess s;
  MakeSession(g, GCC_PRECISION_BF16, false, false, &s);
  std::vector<float> w(24 * 36, 0.5f);
  EXPECT_EQ(gcc_session_set_param(s.s, "fc9.weight", w.data(), (int64_t)w.size(), &d),
            GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("fc9.weight"), std::string::npos) << d.msg;
  EXPECT_EQ(gcc_session_set_param(s.s, "fc1.weight", w.data(), 5, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("864"), std::string::npos) << d.msg;
  EXPECT_EQ(gcc_session_set_param(s.s, "fc1.weight", w.data(), (int64_t)w.size(), &d), GCC_OK)
      << d.msg;
  float *p = nullptr;
  ASSERT_EQ(gcc_session_param(s.s, "fc1.weight", &p, nullptr, &d), GCC_OK) << d.msg;
  EXPECT_EQ(p[100], 0.5f);
  gcc_graph_free(moved);
  gcc_graph_free(g);
}

// ---- imported models and the 16-bit ops of issue 19 --------------------------------

// Elements per sample of the model's input.
int64_t InputFeatures(const gcc_graph *g) {
  const gcc_shape &s = g->values[gcc_graph_find(g, g->training.input)].shape;
  int64_t f = 1;
  for (int k = 1; k < s.ndim; k++)
    f *= s.dims[k];
  return f;
}

// The bfloat16 training plan of a model with BatchNorm, poolings, Concat,
// Transpose, Pad or ConvTranspose puts them in 16 bits, as torch.autocast
// does: their X (and dY) and Y (and dX) are bfloat16; BatchNorm's scale,
// bias, running statistics, dscale and dB float32; and no Cast of an
// activation stands in front of them (only parameters, ConvTranspose's W
// and B, are cast). Returns how many such nodes the plan has.
int ExpectOpsIn16Bits(const gcc_graph *model) {
  gcc_graph *g = Compile(model, GCC_PRECISION_BF16, GCC_MODE_TRAIN, GCC_DEV_CUDA(0), 4);
  EXPECT_NE(g, nullptr);
  if (!g)
    return 0;
  int seen = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    std::string op = gcc_op_name(n->op);
    if (op != "MaxPool" && op != "MaxPoolGrad" && op != "AveragePool" && op != "AveragePoolGrad" &&
        op != "Concat" && op != "Transpose" && op != "Pad" && op != "ConvTranspose" &&
        op != "BatchNormalization" && op != "BatchNormGrad")
      continue;
    if (gcc_layout_is_conversion(g, i)) // the layout pass's NCHW <-> NHWC copies (--layout
      continue;                         // auto: NHWC for bf16), in their value's dtype
    SCOPED_TRACE(std::string(n->name) + " (" + op + ")");
    seen++;
    EXPECT_EQ(n->device, GCC_DEV_CUDA(0));
    bool bng = op == "BatchNormGrad";
    int n16 = op == "BatchNormalization" ? 1 : bng ? 2 : n->n_inputs;
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0 || !gcc_dtype_is_float(g->values[v].dtype))
        continue;
      EXPECT_EQ(g->values[v].dtype, k < n16 ? GCC_DT_BFLOAT16 : GCC_DT_FLOAT32)
          << "input " << k << " '" << g->values[v].name << "'";
      int p = g->values[v].producer;
      if (k < n16 && p >= 0 && strcmp(gcc_op_name(g->nodes[p].op), "Cast") == 0) {
        const gcc_value *src = &g->values[g->nodes[p].inputs[0]];
        EXPECT_NE(src->kind, GCC_VALUE_ACTIVATION)
            << "'" << g->values[v].name << "': a Cast of an activation in front of a 16-bit op";
      }
    }
    bool dx = !bng || n->av[BN_GRAD_OUTPUT].i == 0;
    EXPECT_EQ(g->values[n->outputs[0]].dtype, dx ? GCC_DT_BFLOAT16 : GCC_DT_FLOAT32);
  }
  gcc_graph_free(g);
  return seen;
}

TEST(Autocast, PoolingsConcatTransposePadConvTransposeAndBatchNormRunIn16Bits) {
  gcc_graph *net = MixedOpsNet();
  ASSERT_NE(net, nullptr);
  {
    SCOPED_TRACE("mixed_ops_net");
    // forward: BatchNorm, 4 poolings, Concat, Transpose, Pad, ConvTranspose;
    // backward: at least BatchNorm's dX, dscale, dB and the 4 pooling gradients
    EXPECT_GE(ExpectOpsIn16Bits(net), 9 + 7);
  }
  gcc_graph_free(net);
  for (const char *name : {"resnet_tiny", "mobilenet_tiny"}) {
    SCOPED_TRACE(name);
    gcc_graph *g = ImportForTraining(name);
    ASSERT_NE(g, nullptr);
    EXPECT_GE(ExpectOpsIn16Bits(g), 4); // BatchNorms, their gradients, the global pool
    gcc_graph_free(g);
  }
}

// Training steps in bfloat16 and float16, host-emulated CUDA plan against
// the CPU plan, of the models whose poolings, BatchNorms, Concat,
// Transpose, Pad and ConvTranspose now run in 16 bits: the ResNet-style
// (BatchNorm, residual adds, global average pool) and MobileNet-style
// (depthwise convolution, ReLU6, Dropout) imports and MixedOpsNet. The
// 16-bit kernels store the CPU's bits (Kernels16 above) but BatchNorm's,
// whose statistics are float32 parallel reductions on the device (float64
// serial sums on the CPU, a relative difference of order K 2^-24, far below
// a 16-bit unit); what differs is that, GEMM summation order (the
// classifier) and the averages oneDNN may sum in its own order, each within
// one 16-bit unit of an element, so the tolerances are those of the MLP
// test above.
TEST(MixedPrecisionTraining, ImportedModelsAndMixedOpsNetOnTheDeviceTrackTheCpu) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  // every model has 5 classes (tests/fixtures/make_train_import_fixtures.py)
  for (const char *name : {"mixed_ops_net", "resnet_tiny", "mobilenet_tiny"}) {
    gcc_graph *g = strcmp(name, "mixed_ops_net") == 0 ? MixedOpsNet() : ImportForTraining(name);
    ASSERT_NE(g, nullptr) << name;
    ASSERT_GT(InputFeatures(g), 0) << name;
    {
      SCOPED_TRACE(std::string(name) + " bf16");
      TrainBothAndCompare(g, GCC_PRECISION_BF16, InputFeatures(g), 5, 4, 3, 2e-2, 1e-3);
    }
    {
      SCOPED_TRACE(std::string(name) + " fp16");
      TrainBothAndCompare(g, GCC_PRECISION_FP16, InputFeatures(g), 5, 4, 3, 4e-3, 2e-4);
    }
    gcc_graph_free(g);
  }
}

} // namespace
