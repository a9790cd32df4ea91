// layer_norm_test: LayerNormalization and LayerNormGrad (graph/ops.h) against
// PyTorch, and their determinism.
//
//  * PyTorch parity: tests/fixtures/layer_norm.fix (make_layer_norm_fixtures.py,
//    torch 2.15, CPU float32) holds x, weight, bias, the upstream gradient
//    dy, and F.layer_norm's y with the gradients of sum(y * dy): a (B, T, C)
//    input over its last axis (C = 32 and a GPT block's 384) and 4-D inputs
//    over axis 1 and 2. Each case runs as x -> LayerNormalization -> the
//    summed MSE against t = y_ref - dy / 2 (whose gradient with respect to y
//    is 2 (y - t) = dy + 2 (y - y_ref)), through the CPU plan (1 and 2
//    threads) and the CUDA plan on the host-emulation backend (the generated
//    kernels compiled from their CUDA C and run on the host).
//  * Bitwise determinism: the CPU plan gives the same bits with 1 and 2
//    threads, the host-emulated CUDA plan the same bits run after run.
//  * The CPU's one backward node (LayerNormGradAll, passes/layer_norm_grad.c)
//    gives the bits of the three LayerNormGrad nodes it replaces, with all
//    three gradients wanted and with dX or dB not wanted.
//  * Mixed precision: under --precision bf16 LayerNormalization and its
//    gradient read and write float32, as torch.autocast runs layer_norm.
//  * ONNX export and re-import of an inference graph with LayerNormalization
//    give the same outputs bit for bit.
//
// Tolerance of the parity (normwise: max |a - b| <= tol * max |b| over a
// tensor, as tests/pytorch_parity_test.cc): PyTorch sums a row's D terms
// (the mean, the variance, and dX's two row sums) in float32, and dweight /
// dbias over the R rows, each sum within D u (or R u) of exact, u = 2^-24;
// ours are float32 lane sums on the CPU (within (D / 32 + 5) u, and (R / 64 +
// 1) u for the column sums: runtime/cpu/cpu_norm.h) and float32 trees on the
// CUDA plan (within D u too). The target t = y_ref - dy / 2 is rounded to
// float32 (|t| < 4: 4 u absolute in dy). So tol = 2 (D + R + 8) u covers
// both sides' rounding with margin: 2.4e-5 for the 384-wide rows, 4.5e-6
// for the 4-D cases. The largest errors seen are printed.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "codegen/kernel_cache.h"
#include "codegen/nvrtc.h"
#include "graph/builder.h"
#include "graph/ir.h"
#include "graph/ops.h"
#include "onnx/export.h"
#include "onnx/import.h"
#include "passes/passes.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/plan.h"
}
#include "tests/fixture.h"
#include "tests/host_backend.h"
#include "tests/testutil.h"
#include "tests/test_kernel_cache.h"

namespace {

using gcc_test::Fixture;
using gcc_test::FixtureArray;

// Whether this build compiles CUDA kernels (not under --config=cpu_only,
// where the CUDA plan half does not run).
bool BuiltWithNvrtc() {
  int major = 0, minor = 0;
  return gcc_nvrtc_version(&major, &minor) == GCC_OK;
}

const char *const kCases[] = {"btc", "gpt_row", "nchw_axis1", "nchw_axis2"};

struct GraphFree {
  void operator()(gcc_graph *g) const { gcc_graph_free(g); }
};
struct PlanFree {
  void operator()(gcc_plan *p) const { gcc_plan_free(p); }
};
using GraphPtr = std::unique_ptr<gcc_graph, GraphFree>;
using PlanPtr = std::unique_ptr<gcc_plan, PlanFree>;

const Fixture &LoadFixture() {
  static Fixture *fx = [] {
    auto *f = new Fixture();
    std::string looked, err;
    std::string path = gcc_test::FindRunfile("tests/fixtures/layer_norm.fix", &looked);
    EXPECT_FALSE(path.empty()) << "layer_norm.fix not found; looked in: " << looked;
    if (!path.empty()) {
      EXPECT_TRUE(Fixture::Load(path, f, &err)) << err;
    }
    return f;
  }();
  return *fx;
}

std::vector<float> Floats(const FixtureArray &a) {
  return std::vector<float>(a.f32(), a.f32() + a.numel());
}

// a and b hold the same bits (sizes too)
bool SameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

int CountOp(const gcc_graph *g, int op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].op == op;
  return n;
}

// One parity case: the model, and where its tensors live.
struct Case {
  std::string name;
  std::vector<int64_t> xd, nd;
  int64_t axis = -1;
  double eps = 1e-5;
  // x_input: x a graph input (no dX wanted); no_bias: LayerNormalization
  // without B (no dB); residual: the loss on y + x (x's gradient the sum of
  // LayerNorm's dX and the residual's)
  bool x_input = false, no_bias = false, residual = false;
  std::vector<float> x, w, b, target;
  GraphPtr model;
};

void BuildModel(Case *c);

// x, weight, bias PARAMETERS -> LayerNormalization -> MSE(sum) against t.
void MakeCase(const Fixture &fx, const std::string &name, Case *c) {
  c->name = name;
  const FixtureArray &x = fx.Get(name + ".x");
  c->xd = x.dims;
  c->nd = fx.Get(name + ".weight").dims;
  c->axis = fx.Get(name + ".axis").i64()[0];
  c->eps = fx.Get(name + ".eps").f64()[0];
  c->x = Floats(x);
  c->w = Floats(fx.Get(name + ".weight"));
  c->b = Floats(fx.Get(name + ".bias"));
  const float *y = fx.Get(name + ".y").f32(), *dy = fx.Get(name + ".dy").f32();
  for (int64_t i = 0; i < x.numel(); i++)
    c->target.push_back(static_cast<float>(static_cast<double>(y[i]) - 0.5 * dy[i]));
  BuildModel(c);
}

// The model of case `c` from its fields (everything but `model`).
void BuildModel(Case *c) {
  gcc_builder *bd = gcc_builder_new("layer_norm", 1);
  ASSERT_NE(bd, nullptr);
  int px = c->x_input ? gcc_build_input(bd, "x", GCC_DT_FLOAT32, (int)c->xd.size(), c->xd.data())
                      : gcc_build_param(bd, "x", (int)c->xd.size(), c->xd.data(), c->x.data());
  int pw = gcc_build_param(bd, "weight", (int)c->nd.size(), c->nd.data(), c->w.data());
  int pb =
      c->no_bias ? -1 : gcc_build_param(bd, "bias", (int)c->nd.size(), c->nd.data(), c->b.data());
  int in[3] = {px, pw, pb};
  int y_v = gcc_build_op(bd, GCC_OP_LAYER_NORM, "ln", "y", in, c->no_bias ? 2 : 3);
  gcc_build_set_int(bd, y_v, "axis", c->axis);
  gcc_build_set_float(bd, y_v, "epsilon", static_cast<float>(c->eps));
  int t = gcc_build_input(bd, "t", GCC_DT_FLOAT32, (int)c->xd.size(), c->xd.data());
  int sum[2] = {y_v, px};
  int loss = gcc_build_mse(bd, "loss",
                           c->residual ? gcc_build_op(bd, GCC_OP_ADD, "res", "s", sum, 2) : y_v, t);
  EXPECT_EQ(gcc_node_set_string(bd->g, bd->g->values[loss].producer, "reduction", "sum"), GCC_OK);
  gcc_build_output(bd, loss);
  gcc_build_training_spec ts = {};
  ts.loss = "loss";
  ts.prediction = "y";
  ts.opt.kind = GCC_OPT_SGD; // the file needs one; the plans below have no update
  ts.batch_size = 1;
  ts.epochs = 1;
  gcc_build_training(bd, &ts);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_builder_finish(bd, &g, &d), GCC_OK) << d.msg;
  c->model.reset(g);
}

// What a plan gave: y and the three gradients.
struct Result {
  std::vector<float> y, dx, dw, db;
};

// Parameters and gradients where the plan's device reads them: host memory
// for the CPU, the host backend's "device" memory for a CUDA plan.
struct Store {
  gcc_host_test::HostBackend *hb = nullptr;
  std::map<std::string, const std::vector<float> *> init;
  std::map<std::string, float *> grad;
  std::vector<void *> blocks;
  std::vector<std::unique_ptr<std::vector<float>>> host;
  ~Store() {
    for (void *p : blocks)
      hb->be.release(hb->be.self, p);
  }
  float *Alloc(size_t n) {
    if (!hb) {
      host.emplace_back(new std::vector<float>(n));
      return host.back()->data();
    }
    void *p = nullptr;
    gcc_diag d{};
    if (hb->be.alloc(hb->be.self, n ? n * sizeof(float) : 1, &p, &d) != GCC_OK)
      return nullptr;
    blocks.push_back(p);
    return static_cast<float *>(p);
  }
  static void *Bind(void *user, const gcc_graph *g, int v) {
    auto *s = static_cast<Store *>(user);
    const gcc_value &val = g->values[v];
    bool is_grad = val.kind == GCC_VALUE_GRAD && val.param_of >= 0;
    if (val.kind != GCC_VALUE_PARAM && !is_grad)
      return nullptr;
    std::string name = is_grad ? g->values[val.param_of].name : val.name;
    auto it = s->init.find(name);
    if (it == s->init.end())
      return nullptr;
    float *p = s->Alloc(it->second->size());
    if (!p)
      return nullptr;
    if (is_grad) {
      for (size_t i = 0; i < it->second->size(); i++)
        p[i] = std::numeric_limits<float>::quiet_NaN();
      s->grad[name] = p;
    } else {
      std::memcpy(p, it->second->data(), it->second->size() * sizeof(float));
    }
    return p;
  }
};

// Runs the case's training graph (gradients only) on the CPU with `threads`
// threads, or on the host-emulated CUDA plan (cuda), `runs` times; *r holds
// the last run's results, and every run must give the same bits. fused:
// the CPU's LayerNormGradAll (passes/layer_norm_grad.c) makes the backward
// one node; else the three LayerNormGrad nodes stay (no_ln_grad_all).
void RunPlan(const Case &c, bool cuda, int threads, int runs, Result *r, bool fused = true) {
  SCOPED_TRACE(c.name + (cuda ? " CUDA plan (host-emulated)" : " CPU plan") +
               (fused ? "" : " without LayerNormGradAll"));
  static gcc_host_test::HostBackend *hb = new gcc_host_test::HostBackend();
  Store s;
  s.hb = cuda ? hb : nullptr;
  s.init = {{"x", &c.x}, {"weight", &c.w}, {"bias", &c.b}};
  gcc_options o = {};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 1;
  o.opt.kind = GCC_OPT_NONE;
  o.no_ln_grad_all = fused ? 0 : 1;
  FILE *quiet = std::fopen("/dev/null", "w");
  o.warn_file = quiet;
  gcc_plan_config cfg{};
  cfg.threads = threads;
  cfg.readback_ring = 1;
  if (cuda) {
    o.device = GCC_DEV_CUDA(0);
    o.device_explicit = 1;
    o.n_cuda_devices = 1;
    cfg.device = &hb->be;
    cfg.sm = 90;
    cfg.sm_count = 4;
    cfg.compile = gcc_kernel_cache_hook;
    cfg.compile_user = gcc_test::TestKernelCache();
  }
  gcc_plan *raw = nullptr;
  gcc_diag d{};
  gcc_status st = gcc_plan_compile(c.model.get(), &o, &cfg, Store::Bind, &s, &raw, &d);
  if (quiet)
    std::fclose(quiet);
  PlanPtr plan(raw);
  ASSERT_EQ(st, GCC_OK) << d.msg;
  ASSERT_EQ(gcc_plan_bind_input(plan.get(), "t", c.target.data(), &d), GCC_OK) << d.msg;
  if (c.x_input) {
    ASSERT_EQ(gcc_plan_bind_input(plan.get(), "x", c.x.data(), &d), GCC_OK) << d.msg;
  }
  const int wanted = !c.x_input + 1 + !c.no_bias; // the gradients: dX, dScale, dB
  if (!cuda) { // one LayerNormGradAll with every gradient wanted, or one LayerNormGrad each
    const gcc_graph *cg = gcc_plan_graph(plan.get());
    EXPECT_EQ(CountOp(cg, GCC_OP_LAYER_NORM_GRAD), fused ? 0 : wanted);
    EXPECT_EQ(CountOp(cg, GCC_OP_LAYER_NORM_GRAD_ALL), fused ? 1 : 0);
    for (int i = 0; i < cg->n_nodes; i++)
      if (cg->nodes[i].op == GCC_OP_LAYER_NORM_GRAD_ALL) {
        EXPECT_EQ(cg->nodes[i].n_outputs, wanted);
        // the residual's gradient sum Add(dX, dS) goes into it
        EXPECT_EQ(cg->nodes[i].n_inputs, c.residual ? 4 : 3);
      }
  }
  if (cuda) { // the LayerNormalization nodes run as generated kernels on the device
    const gcc_graph *cg = gcc_plan_graph(plan.get());
    int on_device = 0;
    for (int i = 0; i < cg->n_nodes; i++)
      if (cg->nodes[i].op == GCC_OP_LAYER_NORM || cg->nodes[i].op == GCC_OP_LAYER_NORM_GRAD) {
        EXPECT_TRUE(GCC_DEV_IS_CUDA(cg->nodes[i].device)) << cg->nodes[i].name;
        on_device++;
      }
    EXPECT_EQ(on_device, 4) << "the forward and dX, dScale, dB";
  }
  const size_t nx = c.x.size(), nw = c.w.size();
  for (int run = 0; run < runs; run++) {
    ASSERT_EQ(gcc_plan_run(plan.get(), 0, &d), GCC_OK) << d.msg;
    ASSERT_NE(gcc_plan_host_tensor(plan.get(), "loss", &d), nullptr) << d.msg; // waits
    // the plan's own tensor: host memory on the CPU, and the host backend's
    // "device" memory (host-addressable) on the emulated CUDA plan
    const gcc_tensor *y = gcc_plan_tensor(plan.get(), "y");
    ASSERT_NE(y, nullptr);
    ASSERT_NE(y->data, nullptr);
    ASSERT_EQ(s.grad.size(), static_cast<size_t>(wanted));
    Result now;
    now.y.assign(static_cast<const float *>(y->data), static_cast<const float *>(y->data) + nx);
    if (!c.x_input)
      now.dx.assign(s.grad["x"], s.grad["x"] + nx);
    now.dw.assign(s.grad["weight"], s.grad["weight"] + nw);
    if (!c.no_bias)
      now.db.assign(s.grad["bias"], s.grad["bias"] + nw);
    if (run > 0) {
      EXPECT_EQ(std::memcmp(now.y.data(), r->y.data(), nx * 4), 0) << "y differs in run " << run;
      EXPECT_TRUE(SameBits(now.dx, r->dx)) << "dx, run " << run;
      EXPECT_TRUE(SameBits(now.dw, r->dw)) << "dweight, run " << run;
      EXPECT_TRUE(SameBits(now.db, r->db)) << "dbias, run " << run;
    }
    *r = now;
  }
}

double g_worst = 0; // the largest error seen, as a fraction of its tolerance

void ExpectNormwise(const std::vector<float> &got, const FixtureArray &ref, double tol,
                    const std::string &what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), ref.numel()) << what;
  const float *b = ref.f32();
  double scale = 0, worst = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < ref.numel(); i++)
    scale = std::max(scale, std::fabs((double)b[i]));
  for (int64_t i = 0; i < ref.numel(); i++) {
    double e = std::fabs((double)got[i] - (double)b[i]);
    if (!(e <= worst)) {
      worst = std::isnan(e) ? INFINITY : e;
      at = i;
    }
  }
  double rel = worst / scale;
  g_worst = std::max(g_worst, rel / tol);
  std::printf("[layer_norm] %-34s max |err| / max |ref| = %.3g (tolerance %.3g)\n", what.c_str(),
              rel, tol);
  EXPECT_LE(rel, tol) << what << ": element " << at << " is " << got[at] << ", PyTorch's " << b[at];
}

void ExpectParity(const Fixture &fx, const Case &c, const Result &r, const char *where) {
  int64_t rows = 1, D = 1, a = c.axis < 0 ? c.axis + (int64_t)c.xd.size() : c.axis;
  for (size_t k = 0; k < c.xd.size(); k++)
    ((int64_t)k < a ? rows : D) *= c.xd[k];
  const double u = std::ldexp(1.0, -24), tol = 2.0 * (double)(D + rows + 8) * u;
  std::string p = c.name + " " + where + " ";
  ExpectNormwise(r.y, fx.Get(c.name + ".y"), tol, p + "y");
  ExpectNormwise(r.dx, fx.Get(c.name + ".dx"), tol, p + "dx");
  ExpectNormwise(r.dw, fx.Get(c.name + ".dweight"), tol, p + "dweight");
  ExpectNormwise(r.db, fx.Get(c.name + ".dbias"), tol, p + "dbias");
}

TEST(LayerNorm, MatchesPyTorchOnTheCpuAndTheHostEmulatedCudaPlan) {
  const Fixture &fx = LoadFixture();
  for (const char *name : kCases) {
    Case c;
    MakeCase(fx, name, &c);
    ASSERT_NE(c.model, nullptr);
    Result cpu1, cpu2, cuda, sep;
    RunPlan(c, false, 1, 2, &cpu1);
    RunPlan(c, false, 2, 2, &cpu2);
    RunPlan(c, false, 1, 1, &sep, false);
    ExpectParity(fx, c, cpu1, "CPU");
    // LayerNormGradAll: the three LayerNormGrad nodes' arithmetic in their
    // order (runtime/cpu/cpu_norm.h), so their bits
    EXPECT_TRUE(SameBits(cpu1.dx, sep.dx)) << name << ": dx differs from LayerNormGrad's";
    EXPECT_TRUE(SameBits(cpu1.dw, sep.dw)) << name << ": dweight differs from LayerNormGrad's";
    EXPECT_TRUE(SameBits(cpu1.db, sep.db)) << name << ": dbias differs from LayerNormGrad's";
    // the rows and the column sums' chunks are computed in the same order
    // whatever the split over threads
    EXPECT_EQ(cpu1.y, cpu2.y) << name << ": y differs between 1 and 2 threads";
    EXPECT_EQ(cpu1.dx, cpu2.dx) << name << ": dx differs between 1 and 2 threads";
    EXPECT_EQ(cpu1.dw, cpu2.dw) << name << ": dweight differs between 1 and 2 threads";
    EXPECT_EQ(cpu1.db, cpu2.db) << name << ": dbias differs between 1 and 2 threads";
    if (BuiltWithNvrtc()) {
      RunPlan(c, true, 1, 2, &cuda);
      ExpectParity(fx, c, cuda, "CUDA");
    }
  }
  std::printf("[layer_norm] worst error / tolerance %.3f\n", g_worst);
}

// Rows enough for the CPU kernels to split them over threads (256 rows of a
// GPT block's 384: past the one-thread threshold of runtime/cpu/cpu_norm.c,
// 32 Ki elements): 1, 2 and 3 threads give the same bits for Y, dX, dScale
// and dB (the CUDA plan's run-to-run bits: the parity test above).
TEST(LayerNorm, ThreadCountDoesNotChangeTheBits) {
  Case c;
  c.name = "rows256";
  c.xd = {4, 64, 384};
  c.nd = {384};
  uint32_t state = 12345;
  auto next = [&state]() {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f * 4.0f - 2.0f;
  };
  for (int i = 0; i < 4 * 64 * 384; i++) {
    c.x.push_back(next());
    c.target.push_back(next());
  }
  for (int i = 0; i < 384; i++) {
    c.w.push_back(1.0f + 0.25f * next());
    c.b.push_back(next());
  }
  BuildModel(&c);
  ASSERT_NE(c.model, nullptr);
  Result r1, r2, r3, s2;
  RunPlan(c, false, 1, 1, &r1);
  RunPlan(c, false, 2, 2, &r2);
  RunPlan(c, false, 3, 1, &r3);
  RunPlan(c, false, 2, 1, &s2, false); // the three LayerNormGrad nodes
  for (const Result *r : {&r2, &r3, &s2}) {
    EXPECT_TRUE(SameBits(r1.y, r->y));
    EXPECT_TRUE(SameBits(r1.dx, r->dx));
    EXPECT_TRUE(SameBits(r1.dw, r->dw));
    EXPECT_TRUE(SameBits(r1.db, r->db));
  }
}

// LayerNormGradAll (passes/layer_norm_grad.c) with the outputs a model
// wants: all three, dScale and dB only (x a graph input: no dX), dX and
// dScale only (no B), and all three with the loss on y + x (x's gradient
// LayerNorm's dX + the residual's: the Add goes into LayerNormGradAll as
// its input R). X [5, 61, 110]: rows of 110 (a partial 16-lane block
// at the end), 305 rows in 61 chunks of 5 (rows not a multiple of the
// kernels' 32-row blocks), 33,550 elements (past the one-thread threshold:
// 2 threads split the chunks). Each gradient is bitwise the LayerNormGrad
// node's of the plan without the lowering.
TEST(LayerNorm, OneBackwardNodeGivesTheSeparateNodesBits) {
  for (int variant = 0; variant < 4; variant++) {
    Case c;
    c.name = variant == 0   ? "all"
             : variant == 1 ? "x_input"
             : variant == 2 ? "no_bias"
                            : "residual";
    c.x_input = variant == 1;
    c.no_bias = variant == 2;
    c.residual = variant == 3;
    c.xd = {5, 61, 110};
    c.nd = {110};
    uint32_t state = 777u + (uint32_t)variant;
    auto next = [&state]() {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / 16777216.0f * 4.0f - 2.0f;
    };
    for (int i = 0; i < 5 * 61 * 110; i++) {
      c.x.push_back(next());
      c.target.push_back(next());
    }
    for (int i = 0; i < 110; i++) {
      c.w.push_back(1.0f + 0.25f * next());
      c.b.push_back(next());
    }
    BuildModel(&c);
    ASSERT_NE(c.model, nullptr);
    Result one, sep;
    RunPlan(c, false, 2, 2, &one);
    RunPlan(c, false, 2, 1, &sep, false);
    EXPECT_EQ(one.dx.size(), c.x_input ? 0u : c.x.size()) << c.name;
    EXPECT_EQ(one.db.size(), c.no_bias ? 0u : c.b.size()) << c.name;
    EXPECT_TRUE(SameBits(one.y, sep.y)) << c.name;
    EXPECT_TRUE(SameBits(one.dx, sep.dx)) << c.name;
    EXPECT_TRUE(SameBits(one.dw, sep.dw)) << c.name;
    EXPECT_TRUE(SameBits(one.db, sep.db)) << c.name;
  }
}

// The row sums' 8-float forms (what a CPU with AVX2 but not AVX-512 runs;
// gcc_cpu_set_narrow_vectors(1) makes an AVX-512 machine run them too) give
// the machine's own forms' bits: Y, dX, dScale and dB of rows of 384 (whole
// 16-lane blocks) and of 110 (a partial block at the end), with
// LayerNormGradAll (and the residual's R) and with the three LayerNormGrad
// nodes, on 2 threads. (On an AVX2 machine both runs take the 8-float forms;
// in the ASan build, which has no ISA clones, neither does.)
struct NarrowGuard {
  ~NarrowGuard() { gcc_cpu_set_narrow_vectors(0); }
};

TEST(LayerNorm, EightFloatFormsGiveTheMachinesFormsBits) {
  NarrowGuard guard;
  bool narrow = false;
  for (int variant = 0; variant < 2; variant++) {
    Case c;
    c.name = variant == 0 ? "rows384" : "rows110_residual";
    c.residual = variant == 1;
    const int64_t d = variant == 0 ? 384 : 110, rows = variant == 0 ? 256 : 305;
    c.xd = variant == 0 ? std::vector<int64_t>{4, 64, 384} : std::vector<int64_t>{5, 61, 110};
    c.nd = {d};
    uint32_t state = 4242u + (uint32_t)variant;
    auto next = [&state]() {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / 16777216.0f * 4.0f - 2.0f;
    };
    for (int64_t i = 0; i < rows * d; i++) {
      c.x.push_back(next());
      c.target.push_back(next());
    }
    for (int64_t i = 0; i < d; i++) {
      c.w.push_back(1.0f + 0.25f * next());
      c.b.push_back(next());
    }
    BuildModel(&c);
    ASSERT_NE(c.model, nullptr);
    for (bool fused : {true, false}) {
      Result own, n8;
      gcc_cpu_set_narrow_vectors(0);
      RunPlan(c, false, 2, 1, &own, fused);
      narrow = gcc_cpu_set_narrow_vectors(1) != 0;
      RunPlan(c, false, 2, 1, &n8, fused);
      EXPECT_TRUE(SameBits(own.y, n8.y)) << c.name << " fused " << fused;
      EXPECT_TRUE(SameBits(own.dx, n8.dx)) << c.name << " fused " << fused;
      EXPECT_TRUE(SameBits(own.dw, n8.dw)) << c.name << " fused " << fused;
      EXPECT_TRUE(SameBits(own.db, n8.db)) << c.name << " fused " << fused;
    }
  }
  std::printf("[layer_norm] 8-float forms %s\n",
              narrow ? "checked (this CPU has AVX2 and FMA)"
                     : "not available here (a CPU without AVX2 and FMA, or a build without the "
                       "ISA clones: ASan, not x86-64): both runs took the 16-float forms");
}

// x [4, 6] @ W [6, 8] (a bfloat16 GEMM under --precision bf16) ->
// LayerNormalization -> MSE: the LayerNormalization and its gradients read
// and write float32 only (a Cast of the GEMM's bfloat16 output before them).
TEST(LayerNorm, StaysFloat32UnderAutocast) {
  gcc_builder *b = gcc_builder_new("ln_bf16", 1);
  ASSERT_NE(b, nullptr);
  int64_t xd[2] = {4, 6}, wd[2] = {6, 8}, nd = 8;
  std::vector<float> w(48, 0.1f), s(8, 1.0f), bias(8, 0.0f);
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int pw = gcc_build_param(b, "W", 2, wd, w.data());
  int ps = gcc_build_param(b, "scale", 1, &nd, s.data());
  int pb = gcc_build_param(b, "B", 1, &nd, bias.data());
  int mm_in[2] = {x, pw};
  int h = gcc_build_op(b, GCC_OP_MATMUL, "mm", "h", mm_in, 2);
  int ln_in[3] = {h, ps, pb};
  int y = gcc_build_op(b, GCC_OP_LAYER_NORM, "ln", "y", ln_in, 3);
  int64_t yd[2] = {4, 8};
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 2, yd);
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts = {};
  ts.loss = "loss";
  ts.prediction = "y";
  ts.opt.kind = GCC_OPT_SGD;
  ts.batch_size = 4;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  GraphPtr model(g);
  gcc_options o = {};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 4;
  o.opt.kind = GCC_OPT_NONE;
  o.precision = GCC_PRECISION_BF16;
  Store st;
  st.init = {{"W", &w}, {"scale", &s}, {"B", &bias}};
  gcc_plan_config cfg{};
  cfg.threads = 1;
  gcc_plan *raw = nullptr;
  ASSERT_EQ(gcc_plan_compile(model.get(), &o, &cfg, Store::Bind, &st, &raw, &d), GCC_OK) << d.msg;
  PlanPtr plan(raw);
  const gcc_graph *cg = gcc_plan_graph(plan.get());
  int n_ln = 0, bf16_gemm = 0;
  for (int i = 0; i < cg->n_nodes; i++) {
    const gcc_node *n = &cg->nodes[i];
    if (n->op == GCC_OP_MATMUL || n->op == GCC_OP_GEMM)
      bf16_gemm += cg->values[n->outputs[0]].dtype == GCC_DT_BFLOAT16;
    if (n->op != GCC_OP_LAYER_NORM && n->op != GCC_OP_LAYER_NORM_GRAD &&
        n->op != GCC_OP_LAYER_NORM_GRAD_ALL)
      continue;
    n_ln++;
    if (n->op == GCC_OP_LAYER_NORM_GRAD_ALL) {
      EXPECT_EQ(n->n_outputs, 3) << "dX, dScale and dB";
    }
    for (int k = 0; k < n->n_inputs; k++)
      EXPECT_EQ(cg->values[n->inputs[k]].dtype, GCC_DT_FLOAT32)
          << n->name << " input " << k << " '" << cg->values[n->inputs[k]].name << "'";
    for (int k = 0; k < n->n_outputs; k++)
      EXPECT_EQ(cg->values[n->outputs[k]].dtype, GCC_DT_FLOAT32) << n->name << " output " << k;
  }
  EXPECT_EQ(n_ln, 2) << "the forward and LayerNormGradAll (the CPU's one node for dX, dScale, dB)";
  EXPECT_GE(bf16_gemm, 1) << "the MatMul should compute in bfloat16";
}

// An inference graph x [N, 5, 6] -> LayerNormalization (axis -1, and a second
// over axis 1 without B) -> y, exported as ONNX (opset 17) and re-imported:
// the same outputs bit for bit, and the ONNX node is LayerNormalization.
TEST(LayerNorm, OnnxExportAndReimportGiveTheSameOutputs) {
  gcc_builder *b = gcc_builder_new("ln_export", 1);
  ASSERT_NE(b, nullptr);
  int64_t xd[3] = {GCC_BATCH_DIM, 5, 6}, d6 = 6, d56[2] = {5, 6};
  std::vector<float> s6 = {0.5f, 1.f, 1.5f, 2.f, -1.f, 0.25f}, b6 = {0.1f, -0.2f, 0.3f, 0, 1, 2};
  std::vector<float> s56(30);
  for (int i = 0; i < 30; i++)
    s56[i] = 0.05f * (float)i - 0.5f;
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 3, xd);
  int in1[3] = {x, gcc_build_const(b, "s6", GCC_DT_FLOAT32, 1, &d6, s6.data()),
                gcc_build_const(b, "b6", GCC_DT_FLOAT32, 1, &d6, b6.data())};
  int y1 = gcc_build_op(b, GCC_OP_LAYER_NORM, "ln1", "y1", in1, 3);
  gcc_build_set_float(b, y1, "epsilon", 1e-3f);
  int in2[2] = {y1, gcc_build_const(b, "s56", GCC_DT_FLOAT32, 2, d56, s56.data())};
  int y2 = gcc_build_op(b, GCC_OP_LAYER_NORM, "ln2", "y2", in2, 2);
  gcc_build_set_int(b, y2, "axis", 1);
  gcc_build_output(b, y2);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  GraphPtr model(g);
  uint8_t *bytes = nullptr;
  size_t size = 0;
  ASSERT_EQ(gcc_onnx_export_memory(model.get(), nullptr, &bytes, &size, &d), GCC_OK) << d.msg;
  gcc_graph *g2 = nullptr;
  gcc_onnx_options io{};
  gcc_status st = gcc_onnx_import(bytes, size, "ln_export.onnx", &io, &g2, nullptr, &d);
  std::string text(reinterpret_cast<char *>(bytes), size);
  free(bytes);
  ASSERT_EQ(st, GCC_OK) << d.msg;
  GraphPtr back(g2);
  EXPECT_NE(text.find("LayerNormalization"), std::string::npos);
  int n_ln = 0;
  for (int i = 0; i < back->n_nodes; i++)
    n_ln += back->nodes[i].op == GCC_OP_LAYER_NORM;
  EXPECT_EQ(n_ln, 2);
  std::vector<float> xin(3 * 30);
  for (size_t i = 0; i < xin.size(); i++)
    xin[i] = std::sin(0.7f * (float)i) * 2.0f;
  std::vector<float> outs[2];
  const gcc_graph *graphs[2] = {model.get(), back.get()};
  for (int k = 0; k < 2; k++) {
    gcc_options o = {};
    o.mode = GCC_MODE_EVAL;
    o.batch_size = 3;
    gcc_plan_config cfg{};
    cfg.threads = 1;
    gcc_plan *raw = nullptr;
    gcc_host_test::ModelWeights weights(graphs[k], nullptr);
    ASSERT_EQ(gcc_plan_compile(graphs[k], &o, &cfg, gcc_host_test::ModelWeights::Bind, &weights,
                               &raw, &d),
              GCC_OK)
        << d.msg;
    PlanPtr plan(raw);
    const char *in_name = graphs[k]->values[graphs[k]->inputs[0]].name;
    ASSERT_EQ(gcc_plan_bind_input(plan.get(), in_name, xin.data(), &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_plan_run(plan.get(), 0, &d), GCC_OK) << d.msg;
    const gcc_tensor *t =
        gcc_plan_host_tensor(plan.get(), graphs[k]->values[graphs[k]->outputs[0]].name, &d);
    ASSERT_NE(t, nullptr) << d.msg;
    ASSERT_EQ(t->numel, 90);
    outs[k].assign(static_cast<const float *>(t->data), static_cast<const float *>(t->data) + 90);
  }
  EXPECT_EQ(outs[0], outs[1]);
}

// nn.Linear -> nn.LayerNorm(32) -> nn.LayerNorm([5, 32]) as both of
// PyTorch's exporters write it (fixtures/layer_norm_ts.onnx: TorchScript,
// opset 17; layer_norm_dyn.onnx: the default torch.export-based exporter,
// opset 20): imported, two LayerNormalization nodes, and the eval() output of
// PyTorch on the CPU and the host-emulated CUDA plan. Tolerance as the parity
// test's, for the second LayerNorm's rows of D = 160 after a GEMM of 16 terms:
// 2 (160 + 16 + 8) u.
TEST(LayerNorm, BothPyTorchExportersImport) {
  const Fixture &fx = LoadFixture();
  const FixtureArray &x = fx.Get("onnx.x"), &y = fx.Get("onnx.y");
  for (const char *file : {"layer_norm_ts.onnx", "layer_norm_dyn.onnx"}) {
    SCOPED_TRACE(file);
    std::string looked;
    std::string path = gcc_test::FindRunfile(std::string("tests/fixtures/") + file, &looked);
    ASSERT_FALSE(path.empty()) << looked;
    gcc_graph *raw = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_onnx_import_file(path.c_str(), &raw, nullptr, &d), GCC_OK) << d.msg;
    GraphPtr g(raw);
    int n_ln = 0;
    for (int i = 0; i < g->n_nodes; i++)
      n_ln += g->nodes[i].op == GCC_OP_LAYER_NORM;
    EXPECT_EQ(n_ln, 2);
    for (bool cuda : {false, true}) {
      if (cuda && !BuiltWithNvrtc())
        continue;
      static gcc_host_test::HostBackend *hb = new gcc_host_test::HostBackend();
      gcc_options o = {};
      o.mode = GCC_MODE_EVAL;
      o.batch_size = 2;
      FILE *quiet = std::fopen("/dev/null", "w");
      o.warn_file = quiet;
      gcc_plan_config cfg{};
      cfg.threads = 1;
      cfg.readback_ring = 1;
      if (cuda) {
        o.device = GCC_DEV_CUDA(0);
        o.device_explicit = 1;
        o.n_cuda_devices = 1;
        cfg.device = &hb->be;
        cfg.sm = 90;
        cfg.sm_count = 4;
        cfg.compile = gcc_kernel_cache_hook;
        cfg.compile_user = gcc_test::TestKernelCache();
      }
      gcc_host_test::ModelWeights weights(g.get(), cuda ? hb : nullptr);
      gcc_plan *praw = nullptr;
      gcc_status st = gcc_plan_compile(g.get(), &o, &cfg, gcc_host_test::ModelWeights::Bind,
                                       &weights, &praw, &d);
      if (quiet)
        std::fclose(quiet);
      ASSERT_EQ(st, GCC_OK) << d.msg;
      PlanPtr plan(praw);
      ASSERT_EQ(gcc_plan_bind_input(plan.get(), "x", x.f32(), &d), GCC_OK) << d.msg;
      ASSERT_EQ(gcc_plan_run(plan.get(), 0, &d), GCC_OK) << d.msg;
      const gcc_tensor *t = gcc_plan_host_tensor(plan.get(), "y", &d);
      ASSERT_NE(t, nullptr) << d.msg;
      std::vector<float> got(static_cast<const float *>(t->data),
                             static_cast<const float *>(t->data) + t->numel);
      ExpectNormwise(got, y, 2.0 * (160 + 16 + 8) * std::ldexp(1.0, -24),
                     std::string(file) + (cuda ? " CUDA" : " CPU"));
    }
  }
}

} // namespace
