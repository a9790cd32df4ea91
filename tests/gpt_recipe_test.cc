// The training recipe GPTs use (issue 31), against PyTorch: AdamW with
// betas (0.9, 0.95) and weight decay 0.1 on the matrices only (nanoGPT's
// configure_optimizers: two param groups split by p.dim() >= 2),
// torch.nn.utils.clip_grad_norm_(params, 1.0) before every update, and
// nanoGPT's warmup-cosine learning rate set before every optimizer step
// (tests/fixtures/gpt_recipe.fix from make_gpt_recipe_fixtures.py: the
// small MLP Linear(20,16) ReLU Linear(16,5), 12 steps of 8 new rows each,
// the first 6 with gradient norms above 1 (clipped), the last 6 below).
// Trained through gcc_session_train_step on the CPU plan and on the
// host-emulated CUDA plan (tests/host_backend.h: the generated optimizer
// and GradNorm kernels run on the host), each compared with PyTorch; the
// recipe's flags (graph/recipe.h) and their errors; the refusals.
//
// Tolerance, as tests/pytorch_parity_test.cc: a tensor a is accepted
// against PyTorch's b when max|a - b| <= kTol * max|b| (normwise), kTol =
// 1e-5. Derivation: the float32 GEMMs reduce over at most 20 terms, so each
// gradient element carries a relative error of about 20 * 2^-24 = 1.2e-6
// against PyTorch's summation order; the clip coefficient adds the float32
// rounding of the norm (ours sums squares in float64, PyTorch takes float32
// per-tensor norms first: a few 2^-24). An Adam update is lr * m / (sqrt(v)
// + eps), homogeneous of degree 0 in the gradient, so a relative gradient
// error d moves an update by at most about 2 d lr; over the 12 steps (sum of
// lr 0.13) the parameters move by at most 12 * 2 * 1.2e-6 * 0.02 = 6e-7
// absolute, against weights of magnitude 0.2-0.5: about 3e-6 normwise, and
// the loss (a smooth function of them) by about 1e-6 relative. 1e-5 leaves
// a factor of 3 over that bound; the maxima seen are printed.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "codegen/kernel_cache.h"
#include "graph/builder.h"
#include "graph/ir.h"
#include "graph/loader.h"
#include "graph/ops.h"
#include "graph/recipe.h"
#include "runtime/session.h"
}
#include "tests/fixture.h"
#include "tests/host_backend.h"
#include "tests/testutil.h"
#include "tests/test_kernel_cache.h"

namespace {

using gcc_host_test::HostBackend;
using gcc_test::Fixture;
using gcc_test::FixtureArray;

constexpr double kTol = 1e-5;
constexpr int kSteps = 12, kRows = 8;
const std::vector<std::string> kParams = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};

::testing::AssertionResult LoadFixture(Fixture *fx) {
  std::string looked, err;
  std::string path = gcc_test::FindRunfile("tests/fixtures/gpt_recipe.fix", &looked);
  if (path.empty())
    return ::testing::AssertionFailure() << "gpt_recipe.fix not found; looked in: " << looked;
  if (!Fixture::Load(path, fx, &err))
    return ::testing::AssertionFailure() << err;
  return ::testing::AssertionSuccess();
}

// Linear(20,16) ReLU Linear(16,5), cross-entropy, SGD lr 0.1 (the recipe
// flags turn it into the fixture's)
gcc_graph *SmallMlp() {
  gcc_builder *b = gcc_builder_new("gpt_recipe_mlp", 1);
  int64_t xd[2] = {GCC_BATCH_DIM, 20}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "y", GCC_DT_INT64, 1, yd);
  int h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", x, 20, 16));
  int logits = gcc_build_linear(b, "fc2", h, 16, 5);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  gcc_build_training_spec t = {};
  t.loss = "loss";
  t.prediction = "fc2.out";
  t.input = "x";
  t.target = "y";
  t.opt.kind = GCC_OPT_SGD;
  t.opt.lr = 0.1f;
  t.batch_size = kRows;
  t.epochs = 1;
  t.dataset = "inline";
  gcc_build_training(b, &t);
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

// The fixture's recipe as gcc-train's flags give it.
const std::vector<std::pair<const char *, const char *>> kFlags = {
    {"--optimizer", "adamw"},    {"--lr", "0.02"},
    {"--betas", "0.9,0.95"},     {"--weight-decay", "0.1"},
    {"--clip-grad-norm", "1.0"}, {"--lr-schedule", "warmup-cosine:3:9:0.002"}};

gcc_graph *RecipeModel() {
  gcc_graph *model = SmallMlp();
  if (!model)
    return nullptr;
  gcc_recipe r;
  gcc_recipe_init(&r);
  gcc_diag d = {};
  for (const auto &f : kFlags)
    EXPECT_EQ(gcc_recipe_set(&r, f.first, f.second, &d), GCC_OK) << f.first << ": " << d.msg;
  gcc_graph *g = nullptr;
  EXPECT_EQ(gcc_recipe_apply(model, &r, &g, &d), GCC_OK) << d.msg;
  gcc_graph_free(model);
  return g;
}

TEST(GptRecipe, FlagsBuildTheSpec) {
  gcc_graph *g = RecipeModel();
  ASSERT_NE(g, nullptr);
  const gcc_training &t = g->training;
  EXPECT_STREQ(gcc_optimizer_name(&t.opt), "adamw");
  EXPECT_EQ(t.opt.beta1, 0.9f);
  EXPECT_EQ(t.opt.beta2, 0.95f);
  EXPECT_EQ(t.opt.weight_decay, 0.1f);
  EXPECT_EQ(t.opt.decay_matrices_only, 1); // adamw's default
  EXPECT_EQ(t.opt.clip_grad_norm, 1.0f);
  EXPECT_EQ(t.sched.kind, GCC_SCHED_WARMUP_COSINE);
  EXPECT_EQ(t.sched.warmup, 3);
  EXPECT_EQ(t.sched.t_max, 9);
  EXPECT_EQ(t.sched.eta_min, 0.002f);
  EXPECT_TRUE(gcc_lr_schedule_per_step(&t));
  char buf[512];
  EXPECT_STREQ(gcc_lr_schedule_str(&t, buf, sizeof buf), "warmup-cosine:3:9:0.002");
  std::string line = gcc_recipe_describe(g, buf, sizeof buf);
  EXPECT_NE(line.find("betas (0.9, 0.95)"), std::string::npos) << line;
  EXPECT_NE(line.find("weight decay 0.1 on 2 tensors of >= 2 dims (400 parameters), none on 2 "
                      "others (21 parameters)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("clip-grad-norm 1"), std::string::npos) << line;
  // the spec survives a file: serialized and parsed back
  uint8_t *bytes = nullptr;
  size_t n = 0;
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_serialize(g, &bytes, &n, &d), GCC_OK) << d.msg;
  gcc_graph *back = nullptr;
  ASSERT_EQ(gcc_model_parse(bytes, n, "<memory>", &back, &d), GCC_OK) << d.msg;
  free(bytes);
  EXPECT_EQ(back->training.opt.decay_matrices_only, 1);
  EXPECT_EQ(back->training.opt.clip_grad_norm, 1.0f);
  EXPECT_EQ(back->training.opt.beta2, 0.95f);
  EXPECT_EQ(back->training.sched.kind, GCC_SCHED_WARMUP_COSINE);
  EXPECT_EQ(back->training.sched.warmup, 3);
  EXPECT_EQ(back->training.sched.t_max, 9);
  EXPECT_EQ(back->training.sched.eta_min, 0.002f);
  gcc_graph_free(back);

  // --weight-decay-on all: torch.optim.AdamW(model.parameters())
  gcc_recipe r;
  gcc_recipe_init(&r);
  ASSERT_EQ(gcc_recipe_set(&r, "--weight-decay-on", "all", &d), GCC_OK) << d.msg;
  gcc_graph *all = nullptr;
  ASSERT_EQ(gcc_recipe_apply(g, &r, &all, &d), GCC_OK) << d.msg;
  EXPECT_EQ(all->training.opt.decay_matrices_only, 0);
  EXPECT_EQ(all->training.opt.beta2, 0.95f); // the rest kept
  gcc_graph_free(all);
  // sgd keeps torch's default: every parameter
  gcc_graph *sgd_model = SmallMlp();
  gcc_recipe_init(&r);
  ASSERT_EQ(gcc_recipe_set(&r, "--weight-decay", "5e-4", &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_recipe_apply(sgd_model, &r, &all, &d), GCC_OK) << d.msg;
  EXPECT_EQ(all->training.opt.decay_matrices_only, 0);
  gcc_graph_free(all);
  gcc_graph_free(sgd_model);
  gcc_graph_free(g);
}

TEST(GptRecipe, BadFlagValuesNameTheFlag) {
  struct Bad {
    const char *flag, *value, *want;
  } bad[] = {
      {"--betas", "0.9", "--betas '0.9': expected BETA1,BETA2"},
      {"--betas", "0.9,1", "--betas '0.9,1': expected BETA1,BETA2, each a number in [0, 1)"},
      {"--betas", "-0.1,0.9", "--betas '-0.1,0.9'"},
      {"--betas", "0.9,0.95,0.99", "--betas '0.9,0.95,0.99'"},
      {"--betas", "a,b", "--betas 'a,b'"},
      {"--weight-decay-on", "biases",
       "--weight-decay-on 'biases': unknown; expected one of "
       "matrices, all"},
      {"--clip-grad-norm", "0", "--clip-grad-norm '0': expected a finite number > 0"},
      {"--clip-grad-norm", "-1", "--clip-grad-norm '-1'"},
      {"--clip-grad-norm", "inf", "--clip-grad-norm 'inf'"},
      {"--lr-schedule", "warmup-cosine:3:9",
       "--lr-schedule 'warmup-cosine:3:9': expected "
       "warmup-cosine:WARMUP:MAX_STEPS:MIN_LR"},
      {"--lr-schedule", "warmup-cosine:9:9:0.1", "MAX_STEPS (9) must be greater than WARMUP (9)"},
      {"--lr-schedule", "warmup-cosine:-1:9:0.1", "--lr-schedule 'warmup-cosine:-1:9:0.1'"},
      {"--lr-schedule", "warmup-cosine:1:9:-0.1", "--lr-schedule 'warmup-cosine:1:9:-0.1'"},
      {"--lr-schedule", "warmup-cosine:1:9:0.1:2", "--lr-schedule 'warmup-cosine:1:9:0.1:2'"},
      {"--lr-schedule", "warmup-cosine", "--lr-schedule 'warmup-cosine'"},
  };
  for (const Bad &b : bad) {
    gcc_recipe r;
    gcc_recipe_init(&r);
    gcc_diag d = {};
    EXPECT_EQ(gcc_recipe_set(&r, b.flag, b.value, &d), GCC_ERR_INVALID_ARGUMENT)
        << b.flag << " " << b.value;
    EXPECT_NE(std::string(d.msg).find(b.want), std::string::npos)
        << b.flag << " " << b.value << ": " << d.msg;
  }
  // --betas is Adam's
  gcc_recipe r;
  gcc_recipe_init(&r);
  gcc_diag d = {};
  ASSERT_EQ(gcc_recipe_set(&r, "--optimizer", "sgd", &d), GCC_OK);
  ASSERT_EQ(gcc_recipe_set(&r, "--betas", "0.9,0.95", &d), GCC_OK);
  EXPECT_EQ(gcc_recipe_check(&r, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("--betas is an Adam setting"), std::string::npos) << d.msg;
  gcc_graph *model = SmallMlp(), *out = nullptr; // its spec: sgd
  gcc_recipe_init(&r);
  ASSERT_EQ(gcc_recipe_set(&r, "--betas", "0.9,0.95", &d), GCC_OK);
  EXPECT_EQ(gcc_recipe_apply(model, &r, &out, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("--betas: the model's optimizer is sgd"), std::string::npos)
      << d.msg;
  gcc_graph_free(model);
}

// gcc_lr_at_step is nanoGPT's get_lr (the fixture's float64 lr of each
// step; ours starts from the spec's float32 lr 0.02f, 2.2e-8 relative
// from 0.02: 1e-7 relative covers it).
TEST(GptRecipe, LrAtStepIsNanoGptsGetLr) {
  Fixture fx;
  ASSERT_TRUE(LoadFixture(&fx));
  gcc_graph *g = RecipeModel();
  ASSERT_NE(g, nullptr);
  const FixtureArray &lr = fx.Get("lr");
  ASSERT_EQ(lr.numel(), kSteps);
  for (int it = 0; it < kSteps; it++)
    EXPECT_NEAR(gcc_lr_at_step(&g->training, it), lr.f64()[it], 1e-7 * lr.f64()[it]) << it;
  EXPECT_GT(gcc_lr_at_step(&g->training, 0), 0.0); // never 0 at the first step
  EXPECT_EQ(gcc_lr_at_step(&g->training, 1000), (double)0.002f);
  gcc_graph_free(g);
}

// fp16 with torch.amp.GradScaler's dynamic loss scaling (init 65536: the
// clip must see the unscaled gradients, 65536 times smaller)
constexpr gcc_loss_scale kGradScaler = {GCC_LOSS_SCALE_DYNAMIC, GCC_SCALER_INIT_SCALE,
                                        GCC_SCALER_GROWTH_FACTOR, GCC_SCALER_BACKOFF_FACTOR,
                                        GCC_SCALER_GROWTH_INTERVAL};

gcc_session *Session(const gcc_graph *g, HostBackend *hb, gcc_diag *d, bool fp16 = false) {
  gcc_session_options so{};
  so.threads = 1;
  so.opt = g->training.opt;
  if (fp16) {
    so.opt.scaler = kGradScaler;
    so.precision = GCC_PRECISION_FP16;
  }
  if (hb) {
    so.backend = &hb->be;
    so.device = GCC_DEV_CUDA(0);
    so.plan.sm = 90;
    so.plan.sm_count = 4;
    so.plan.compile = gcc_kernel_cache_hook;
    so.plan.compile_user = gcc_test::TestKernelCache();
    so.max_pending = 1;
  }
  gcc_session *s = nullptr;
  if (gcc_session_create(g, &so, &s, d) != GCC_OK)
    return nullptr;
  return s;
}

double RelErr(const float *got, const FixtureArray &ref) {
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < ref.numel(); i++)
    scale = std::max(scale, std::fabs((double)ref.f32()[i]));
  for (int64_t i = 0; i < ref.numel(); i++) {
    double e = std::fabs((double)got[i] - (double)ref.f32()[i]) / std::max(scale, (double)FLT_MIN);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

// Trains the recipe model 12 steps (the lr of each step from the schedule,
// as gcc_train_run sets it) and compares with PyTorch within `tol`; *params
// gets the final parameters (kParams order) for the determinism check.
// fp16: --precision fp16 with dynamic loss scaling.
void TrainAndCompare(bool cuda, std::vector<std::vector<float>> *params, bool fp16 = false,
                     double tol = kTol) {
  Fixture fx;
  ASSERT_TRUE(LoadFixture(&fx));
  gcc_graph *g = RecipeModel();
  ASSERT_NE(g, nullptr);
  for (const std::string &p : kParams) {
    int v = gcc_graph_find(g, p.c_str());
    ASSERT_GE(v, 0) << p;
    const FixtureArray &a = fx.Get("init." + p);
    ASSERT_EQ(g->values[v].data_bytes, a.bytes.size()) << p;
    std::memcpy(g->values[v].data, a.bytes.data(), a.bytes.size());
  }
  HostBackend *hb = cuda ? new HostBackend() : nullptr;
  gcc_diag d = {};
  gcc_session *s = Session(g, hb, &d, fp16);
  ASSERT_NE(s, nullptr) << d.msg;
  const FixtureArray &x = fx.Get("x"), &y = fx.Get("y"), &losses = fx.Get("loss");
  ASSERT_EQ(x.numel(), kSteps * kRows * 20);
  double worst_loss = 0, worst_param = 0;
  for (int k = 0; k < kSteps; k++) {
    SCOPED_TRACE(std::string(cuda ? "host-emulated CUDA" : "CPU") + (fp16 ? " fp16" : "") +
                 ", step " + std::to_string(k + 1));
    gcc_session_set_lr(s, (float)gcc_lr_at_step(&g->training, k));
    float loss = NAN;
    ASSERT_EQ(
        gcc_session_train_step(s, x.f32() + k * kRows * 20, y.i64() + k * kRows, kRows, &loss, &d),
        GCC_OK)
        << d.msg;
    double want = losses.f32()[k], e = std::fabs(loss - want) / std::fabs(want);
    EXPECT_LE(e, tol) << "loss " << loss << ", PyTorch " << want;
    worst_loss = std::max(worst_loss, std::isnan(e) ? INFINITY : e);
    if (k + 1 != 1 && k + 1 != kSteps)
      continue;
    std::string prefix = k + 1 == 1 ? "step1." : "step12.";
    for (const std::string &p : kParams) {
      float *got = nullptr;
      int64_t numel = 0;
      ASSERT_EQ(gcc_session_param(s, p.c_str(), &got, &numel, &d), GCC_OK) << d.msg;
      const FixtureArray &ref = fx.Get(prefix + p);
      ASSERT_EQ(numel, ref.numel()) << p;
      double pe = RelErr(got, ref);
      EXPECT_LE(pe, tol) << prefix << p;
      worst_param = std::max(worst_param, pe);
      if (k + 1 == kSteps && params)
        params->emplace_back(got, got + numel);
    }
  }
  if (fp16) { // no step skipped: every update applied
    gcc_loss_scale_state ls{};
    ASSERT_EQ(gcc_session_loss_scale(s, &ls, &d), GCC_OK) << d.msg;
    EXPECT_EQ(ls.applied_steps, kSteps);
    EXPECT_EQ(ls.scale, GCC_SCALER_INIT_SCALE);
  }
  std::printf("[gpt recipe] %-23s max rel. error: loss %.3g, params %.3g (tolerance %.0e)\n",
              (std::string(cuda ? "host-emulated CUDA" : "CPU") + (fp16 ? " fp16" : "")).c_str(),
              worst_loss, worst_param, tol);
  gcc_session_destroy(s);
  delete hb;
  gcc_graph_free(g);
}

TEST(GptRecipe, MatchesPyTorchOnTheCpuPlan) {
  TrainAndCompare(false, nullptr);
}

// Also run-to-run bitwise equal: the GradNorm kernels reduce in a fixed
// order whatever order the blocks run in.
TEST(GptRecipe, MatchesPyTorchOnTheHostEmulatedCudaPlanDeterministically) {
  std::vector<std::vector<float>> a, b;
  TrainAndCompare(true, &a);
  if (HasFatalFailure())
    return;
  TrainAndCompare(true, &b);
  ASSERT_EQ(a.size(), kParams.size());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++)
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float))) << kParams[i];
}

// What the compiled training graph holds: per-parameter weight decay (the
// matrices' updates first, as the session lays the parameters out), one
// GradNorm over every gradient and its output read by every update.
TEST(GptRecipe, TrainingGraphDecaysMatricesAndClipsEveryUpdate) {
  gcc_graph *g = RecipeModel();
  ASSERT_NE(g, nullptr);
  gcc_diag d = {};
  gcc_session *s = Session(g, nullptr, &d);
  ASSERT_NE(s, nullptr) << d.msg;
  gcc_plan *p = nullptr;
  ASSERT_EQ(gcc_session_plan(s, GCC_MODE_TRAIN, kRows, &p, &d), GCC_OK) << d.msg;
  const gcc_graph *tg = gcc_plan_graph(p);
  ASSERT_NE(tg, nullptr);
  std::vector<std::string> order;
  int norm_nodes = 0, clip_value = gcc_graph_find(tg, GCC_CLIP_NORM_NAME);
  ASSERT_GE(clip_value, 0);
  for (int i = 0; i < tg->n_nodes; i++) {
    const gcc_node *n = &tg->nodes[i];
    if (n->op == GCC_OP_GRAD_NORM) {
      norm_nodes++;
      EXPECT_EQ(n->n_inputs, 4); // the four gradients
      EXPECT_EQ(n->av[GRAD_NORM_MAX_NORM].f, 1.0f);
    }
    if (n->op != GCC_OP_ADAM)
      continue;
    std::string param = tg->values[n->inputs[0]].name;
    order.push_back(param);
    bool matrix = tg->values[n->inputs[0]].shape.ndim >= 2;
    EXPECT_EQ(n->av[ADAM_WEIGHT_DECAY].f, matrix ? 0.1f : 0.0f) << param;
    EXPECT_EQ(n->av[ADAM_BETA2].f, 0.95f) << param;
    ASSERT_EQ(n->n_inputs, ADAM_IN_CLIP + 1) << param;
    EXPECT_EQ(n->inputs[ADAM_IN_SCALER], -1) << param;
    EXPECT_EQ(n->inputs[ADAM_IN_CLIP], clip_value) << param;
  }
  EXPECT_EQ(norm_nodes, 1);
  EXPECT_EQ(order, (std::vector<std::string>{"fc1.weight", "fc2.weight", "fc1.bias", "fc2.bias"}));
  gcc_session_destroy(s);
  gcc_graph_free(g);
}

// Composed with fp16 loss scaling: GradNorm takes the norm of the unscaled
// gradients (scaler.unscale_ before clip_grad_norm_) and the updates read
// g * inv_scale * coefficient. Tolerance: float16 GEMM operands carry a
// relative rounding of 2^-11 = 4.9e-4, so gradients differ from PyTorch's
// float32 ones by about 1e-3 relative and, as in the file comment's bound
// (2 d lr a step over 12 steps against weights of 0.2-0.5), the parameters
// by about 12 * 2 * 1e-3 * 0.02 / 0.2 = 2.4e-3 normwise: 1e-2. Without the
// unscale the coefficient of steps 7-12 would be 65536 times too small
// (1.5e-5 instead of 1) and the last parameters off by far more.
TEST(GptRecipe, ComposesWithFp16LossScaling) {
  constexpr double kFp16Tol = 1e-2;
  TrainAndCompare(false, nullptr, true, kFp16Tol);
  if (HasFatalFailure())
    return;
  TrainAndCompare(true, nullptr, true, kFp16Tol);
}

} // namespace
