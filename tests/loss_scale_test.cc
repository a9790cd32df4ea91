// loss_scale_test: fp16 dynamic loss scaling (--loss-scale; graph/ir.h
// gcc_loss_scale), torch.amp.GradScaler's rules, on the CPU plan and on the
// host-emulated CUDA plan (tests/host_backend.h: the generated kernels of
// codegen/emit.c compiled as host C++).
//  - The scale trajectory of a run crafted to overflow float16 (a huge
//    initial scale, a growth interval of 3) follows an independent
//    reference of GradScaler's rules written here, fed with this test's own
//    scan of the step's (scaled) gradients for Inf/NaN: skipped steps leave
//    parameters and optimizer state bit for bit, applied steps equal an
//    SGD / Adam update written here from the unscaled gradients (inv_scale =
//    1 / scale in float64, rounded to float32) with the step count of the
//    applied steps only (SGD's first momentum step, Adam's bias
//    corrections), and the scale grows after growth_interval good steps.
//  - The CPU and host-emulated CUDA plans skip the same steps and reach the
//    same scale; their parameters agree within the mixed-precision bound of
//    tests/precision_test.
//  - A run resumed from a checkpoint written mid-run (scale, growth tracker
//    and applied steps travel in the persistent arena) ends bit for bit
//    where the uninterrupted run does.
//  - PyTorch's own GradScaler (tests/fixtures/loss_scale.fix, from
//    make_loss_scale_fixture.py) on a run of steps with and without Inf
//    gradients: the reference above, the CPU kernels of AmpUpdateScale and of
//    SGD with momentum under loss scaling give its scales, growth trackers
//    and parameter.
//  - Without overflow, one fp16 step with a power-of-two scale equals the
//    unscaled fp16 step: bit for bit where the unscaled gradient is a
//    normal float16 number, within lr * 2^-24 (plus one rounding of the
//    update) where it is subnormal (derived below).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

extern "C" {
#include "codegen/kernel_cache.h"
#include "graph/builder.h"
#include "graph/ir.h"
#include "graph/ops.h"
#include "passes/memplan.h"
#include "passes/passes.h"
#include "runtime/checkpoint.h"
#include "runtime/compile.h"
#include "runtime/session.h"
}
#include "runtime/cpu/cpu_kernels.h"
#include "tests/fixture.h"
#include "tests/host_backend.h"
#include "tests/kernel_emulation.h"
#include "tests/test_graphs.h"
#include "tests/testutil.h"
#include "tests/test_kernel_cache.h"

namespace {

using gcc_host_test::HostBackend;
using gcc_test::FinishInlineTraining;
using gcc_test::Opt;

constexpr int64_t kFeatures = 36, kClasses = 5, kRows = 8;

// 36 -> 24 -> ReLU -> 16 -> ReLU -> 5, cross-entropy; SGD lr 0.1 momentum
// 0.5 or Adam lr 0.01
gcc_graph *Mlp(gcc_opt_kind kind) {
  gcc_builder *b = gcc_builder_new("loss_scale_mlp", 7);
  int64_t xd[2] = {GCC_BATCH_DIM, kFeatures}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", x, kFeatures, 24));
  h = gcc_build_relu(b, "relu2", gcc_build_linear(b, "fc2", h, 24, 16));
  int logits = gcc_build_linear(b, "fc3", h, 16, kClasses);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", "fc3.out", "image", "label",
                              Opt(kind, kind == GCC_OPT_ADAM ? 0.01f : 0.1f, 0.5f));
}

// 36 -> 5, cross-entropy, plain SGD lr 0.1
gcc_graph *Linear() {
  gcc_builder *b = gcc_builder_new("loss_scale_linear", 5);
  int64_t xd[2] = {GCC_BATCH_DIM, kFeatures}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int logits = gcc_build_linear(b, "fc", x, kFeatures, kClasses);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", "fc.out", "image", "label", Opt(GCC_OPT_SGD, 0.1f));
}

gcc_loss_scale Dynamic(float init, int64_t interval) {
  return {GCC_LOSS_SCALE_DYNAMIC, init, GCC_SCALER_GROWTH_FACTOR, GCC_SCALER_BACKOFF_FACTOR,
          interval};
}

// A session of `g` at --precision fp16 with loss scaling `ls`, on the CPU or
// (hb != NULL) on the host-emulated cuda:0.
gcc_session *Session(const gcc_graph *g, const gcc_loss_scale &ls, HostBackend *hb) {
  gcc_session_options so{};
  so.threads = 1;
  so.opt = g->training.opt;
  so.opt.scaler = ls;
  so.precision = GCC_PRECISION_FP16;
  if (hb) {
    so.backend = &hb->be;
    so.device = GCC_DEV_CUDA(0);
    so.plan.sm = 90;
    so.plan.sm_count = 4;
    so.plan.compile = gcc_kernel_cache_hook;
    so.plan.compile_user = gcc_test::TestKernelCache();
    so.plan.cuda_graph = 1; // steps replayed from a captured graph: nothing baked in
    so.max_pending = 1;
  }
  gcc_session *s = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
  return s;
}

// The batch of step `step`: normal inputs times `amp`, random labels.
struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
};

Batch MakeBatch(int step, float amp) {
  std::mt19937 rng(1000 + step);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Batch b;
  b.x.resize((size_t)(kRows * kFeatures));
  b.y.resize((size_t)kRows);
  for (float &v : b.x)
    v = amp * nd(rng);
  for (int64_t &v : b.y)
    v = (int64_t)(rng() % (uint32_t)kClasses);
  return b;
}

// The session's persistent arena (session.h: [params][grads][state 0]
// [state 1][loss scaling]), each parameter padded to GCC_ARENA_ALIGN bytes,
// in the model's value order.
struct Layout {
  std::vector<std::string> names;
  std::vector<size_t> off, numel;
  size_t total = 0; // floats of one section
};

Layout LayoutOf(const gcc_graph *g) {
  Layout l;
  const size_t per = GCC_ARENA_ALIGN / sizeof(float);
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != GCC_VALUE_PARAM || g->values[v].state)
      continue;
    size_t n = (size_t)gcc_shape_numel(&g->values[v].shape, nullptr);
    l.names.push_back(g->values[v].name);
    l.off.push_back(l.total);
    l.numel.push_back(n);
    l.total += (n + per - 1) / per * per;
  }
  return l;
}

std::vector<float> Arena(gcc_session *s) {
  const void *a = nullptr;
  size_t bytes = 0;
  gcc_diag d{};
  EXPECT_EQ(gcc_session_arena(s, &a, &bytes, &d), GCC_OK) << d.msg;
  std::vector<float> out(bytes / sizeof(float));
  if (a)
    memcpy(out.data(), a, bytes);
  return out;
}

gcc_loss_scale_state State(gcc_session *s) {
  gcc_loss_scale_state st{};
  gcc_diag d{};
  EXPECT_EQ(gcc_session_loss_scale(s, &st, &d), GCC_OK) << d.msg;
  return st;
}

bool Same(float a, float b) {
  return memcmp(&a, &b, sizeof a) == 0;
}

// torch.amp.GradScaler's rules (torch/amp/grad_scaler.py update() and
// _amp_update_scale_), written from their description, independently of
// the library's kernels.
struct RefScaler {
  double scale;
  int64_t tracker = 0, applied = 0, interval;
  RefScaler(double init, int64_t interval_) : scale(init), interval(interval_) {}
  void Update(bool found_inf) {
    if (found_inf) {
      scale *= 0.5;
      tracker = 0;
      return;
    }
    applied++;
    if (++tracker == interval) {
      scale *= 2.0;
      tracker = 0;
    }
  }
};

// The training plan under fp16 loss scaling, data-parallel over 2 ranks
// on cuda:0: the backward starts from the scale (a persistent value, not
// the constant 1), one AmpNonFiniteCheck reads every gradient after every
// AllReduce has summed it, every update reads the scale and found_inf
// (after the check), AmpUpdateScale comes last; the scaling state lives on
// the device; bf16 (no scaler set) has none of it.
TEST(LossScale, TheTrainingPlanChecksAfterTheAllReduceAndUpdatesLast) {
  gcc_graph *model = Mlp(GCC_OPT_ADAM);
  ASSERT_NE(model, nullptr);
  for (bool scaled : {true, false}) {
    SCOPED_TRACE(scaled ? "fp16, loss scaling" : "fp16, --loss-scale none");
    gcc_options o{};
    o.mode = GCC_MODE_TRAIN;
    o.batch_size = kRows;
    o.opt = model->training.opt;
    if (scaled)
      o.opt.scaler = Dynamic(GCC_SCALER_INIT_SCALE, GCC_SCALER_GROWTH_INTERVAL);
    o.device = GCC_DEV_CUDA(0);
    o.device_explicit = 1;
    o.n_cuda_devices = 1;
    o.precision = GCC_PRECISION_FP16;
    o.world_size = 2;
    o.bucket_bytes = 1024; // several buckets
    FILE *sink = fopen("/dev/null", "w");
    o.warn_file = sink;
    gcc_graph *g = nullptr;
    gcc_mem_plan mem{};
    gcc_diag d{};
    ASSERT_EQ(gcc_compile_graph(model, &o, &g, &mem, &d), GCC_OK) << d.msg;
    fclose(sink);
    int check = -1, update = -1, last_all_reduce = -1, all_reduces = 0, first_update = -1,
        last_opt = -1, updates = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const std::string op = gcc_op_name(g->nodes[i].op);
      if (op == "AllReduce") {
        last_all_reduce = i;
        all_reduces++;
      }
      if (op == "AmpNonFiniteCheck")
        check = i;
      if (op == "AmpUpdateScale")
        update = i;
      if (op == "Adam") {
        first_update = first_update < 0 ? i : first_update;
        last_opt = i;
        updates++;
        const gcc_node *n = &g->nodes[i];
        ASSERT_EQ(n->n_inputs, scaled ? ADAM_IN_SCALER + SCALER_N_IN : 4);
        if (scaled) {
          EXPECT_STREQ(g->values[n->inputs[ADAM_IN_SCALER + SCALER_IN_SCALE]].name,
                       GCC_SCALER_SCALE_NAME);
          EXPECT_STREQ(g->values[n->inputs[ADAM_IN_SCALER + SCALER_IN_FOUND_INF]].name,
                       GCC_SCALER_FOUND_INF_NAME);
        }
      }
    }
    EXPECT_GT(all_reduces, 1);
    EXPECT_EQ(updates, 6);
    if (!scaled) {
      EXPECT_EQ(check, -1);
      EXPECT_EQ(update, -1);
      EXPECT_LT(gcc_graph_find(g, GCC_SCALER_SCALE_NAME), 0);
    } else {
      ASSERT_GE(check, 0);
      ASSERT_GE(update, 0);
      EXPECT_GT(check, last_all_reduce) << "the check must see the summed gradients";
      EXPECT_LT(check, first_update);
      EXPECT_GT(update, last_opt) << "the scale changes after every update read it";
      EXPECT_EQ(g->nodes[check].n_inputs, AMP_CHECK_IN_GRADS + updates);
      for (const char *v : {GCC_SCALER_SCALE_NAME, GCC_SCALER_TRACKER_NAME, GCC_SCALER_STEPS_NAME,
                            GCC_SCALER_SCRATCH_NAME, GCC_SCALER_FOUND_INF_NAME}) {
        int vi = gcc_graph_find(g, v);
        ASSERT_GE(vi, 0) << v;
        EXPECT_EQ(g->values[vi].device, GCC_DEV_CUDA(0)) << v;
        EXPECT_EQ(g->values[vi].dtype, GCC_DT_FLOAT32) << v;
      }
      // the backward's seed is the scale: the loss gradient reads it
      int sv = gcc_graph_find(g, GCC_SCALER_SCALE_NAME), readers = 0;
      for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++)
          readers += g->nodes[i].inputs[k] == sv &&
                     std::string(gcc_op_name(g->nodes[i].op)) == "SoftmaxCrossEntropyGrad";
      EXPECT_EQ(readers, 1);
    }
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
  gcc_graph_free(model);
}

// PyTorch's GradScaler (fixture) against RefScaler, and against the CPU
// kernels run node by node: AmpUpdateScale, and SGD (lr 0.5, momentum 0.9)
// of one parameter whose gradient is scale * 1, or Inf on the flagged steps
// (as the fixture's loss p * c makes it).
TEST(LossScale, UpdateRuleMatchesPyTorchGradScaler) {
  std::string looked, err;
  std::string path = gcc_test::FindRunfile("tests/fixtures/loss_scale.fix", &looked);
  ASSERT_FALSE(path.empty()) << "loss_scale.fix not found; looked in: " << looked;
  gcc_test::Fixture fx;
  ASSERT_TRUE(gcc_test::Fixture::Load(path, &fx, &err)) << err;
  const gcc_test::FixtureArray &flags = fx.Get("found_inf"), &scales = fx.Get("scale");
  const gcc_test::FixtureArray &trackers = fx.Get("growth_tracker"), &params = fx.Get("param");
  const int64_t interval = fx.Get("growth_interval").i64()[0], n = flags.numel();
  ASSERT_EQ(scales.numel(), n);
  // the graph of one update: SGD under loss scaling, then AmpUpdateScale
  gcc_graph *g = gcc_graph_new("update_rule", "<test>");
  ASSERT_NE(g, nullptr);
  gcc_diag d{};
  gcc_shape one = {1, {1}}, scalar = {0, {0}};
  int p, grad, buf, scale, found, tracker, steps, sgd, upd;
  for (auto [name, shape, out] :
       {std::make_tuple("p", &one, &p), std::make_tuple("p.grad", &one, &grad),
        std::make_tuple("p.momentum_buffer", &one, &buf), std::make_tuple("scale", &scalar, &scale),
        std::make_tuple("found_inf", &scalar, &found),
        std::make_tuple("tracker", &scalar, &tracker), std::make_tuple("steps", &scalar, &steps)})
    ASSERT_EQ(gcc_graph_add_value(g, name, GCC_DT_FLOAT32, shape, GCC_VALUE_OPT_STATE, nullptr, 0,
                                  out, &d),
              GCC_OK)
        << d.msg;
  int sgd_in[6] = {p, grad, buf, scale, found, steps};
  ASSERT_EQ(gcc_graph_add_node(g, "sgd", GCC_OP_SGD, sgd_in, 6, nullptr, 0, &sgd, &d), GCC_OK);
  ASSERT_EQ(gcc_node_set_float(g, sgd, "lr", 0.5f), GCC_OK);
  ASSERT_EQ(gcc_node_set_float(g, sgd, "momentum", 0.9f), GCC_OK);
  int upd_in[4] = {scale, found, tracker, steps};
  ASSERT_EQ(
      gcc_graph_add_node(g, "update", GCC_OP_AMP_UPDATE_SCALE, upd_in, 4, nullptr, 0, &upd, &d),
      GCC_OK);
  ASSERT_EQ(gcc_node_set_int(g, upd, "growth_interval", interval), GCC_OK);
  for (int node : {sgd, upd}) {
    ASSERT_EQ(gcc_op_resolve_attrs(g, node, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_op(g->nodes[node].op)->shape(g, node, &d), GCC_OK) << d.msg;
  }
  float vals[7] = {0.0f, 0.0f, 0.0f, 65536.0f, 0.0f, 0.0f, 0.0f}; // p .. steps
  gcc_tensor t[7];
  gcc_tensor *tp[7];
  for (int k = 0; k < 7; k++) {
    t[k] = gcc_tensor{GCC_DT_FLOAT32, k < 3 ? one : scalar, 1, &vals[k]};
    tp[k] = &t[k];
  }
  gcc_tensor *sgd_args[6] = {tp[0], tp[1], tp[2], tp[3], tp[4], tp[6]};
  gcc_tensor *upd_args[4] = {tp[3], tp[4], tp[5], tp[6]};
  gcc_cpu_ctx ctx{};
  ctx.max_threads = 1;
  ctx.diag = &d;
  RefScaler ref(65536.0, interval);
  for (int64_t k = 0; k < n; k++) {
    SCOPED_TRACE("step " + std::to_string(k));
    bool inf = flags.i64()[k] != 0;
    ref.Update(inf);
    EXPECT_EQ(ref.scale, (double)scales.f32()[k]);
    EXPECT_EQ(ref.tracker, trackers.i64()[k]);
    // the step as the plan runs it: the scaled gradient, the check's flag
    vals[1] = inf ? INFINITY : vals[3] * 1.0f;
    vals[4] = inf ? 1.0f : 0.0f;
    gcc_kernel_args a{};
    a.node = &g->nodes[sgd];
    a.in = sgd_args;
    a.n_in = 6;
    a.ctx = &ctx;
    ASSERT_EQ(gcc_cpu_op_of(GCC_OP_SGD)->kernel(&a), GCC_OK);
    a.node = &g->nodes[upd];
    a.in = upd_args;
    a.n_in = 4;
    ASSERT_EQ(gcc_cpu_op_of(GCC_OP_AMP_UPDATE_SCALE)->kernel(&a), GCC_OK);
    ctx.optimizer_step++;
    EXPECT_EQ(vals[3], scales.f32()[k]) << "the scale after the step";
    EXPECT_EQ((int64_t)vals[5], trackers.i64()[k]) << "the growth tracker";
    EXPECT_EQ(vals[0], params.f32()[k]) << "the parameter";
  }
  gcc_graph_free(g);
}

// Steps of the MLP with a scale that starts far above what float16 holds and
// a growth interval of 3: the scale falls until the gradients fit, then
// doubles every 3 good steps until they overflow again.
constexpr float kHugeScale = 1099511627776.0f; // 2^40
constexpr int kSteps = 40;
constexpr int64_t kInterval = 3;

void TrajectoryFollowsTheRules(gcc_opt_kind kind, bool cuda) {
  gcc_graph *g = Mlp(kind);
  ASSERT_NE(g, nullptr);
  HostBackend hb;
  gcc_session *s = Session(g, Dynamic(kHugeScale, kInterval), cuda ? &hb : nullptr);
  ASSERT_NE(s, nullptr);
  const Layout l = LayoutOf(g);
  const int ns = kind == GCC_OPT_ADAM ? 2 : 1; // momentum buffer, or Adam's moments
  RefScaler ref(kHugeScale, kInterval);
  int skipped = 0, grown = 0, skipped_after_growth = 0;
  const float lr = g->training.opt.lr, mom = g->training.opt.momentum;
  const float b1 = g->training.opt.beta1, b2 = g->training.opt.beta2, eps = g->training.opt.eps;
  const float wd = g->training.opt.weight_decay;
  std::vector<float> before = Arena(s);
  for (int step = 0; step < kSteps; step++) {
    SCOPED_TRACE("step " + std::to_string(step));
    Batch bt = MakeBatch(step, 1.0f);
    float loss = 0;
    gcc_diag d{};
    ASSERT_EQ(gcc_session_train_step(s, bt.x.data(), bt.y.data(), kRows, &loss, &d), GCC_OK)
        << d.msg;
    EXPECT_TRUE(std::isfinite(loss)); // the forward runs in fp16 without the scale
    std::vector<float> after = Arena(s);
    ASSERT_EQ(after.size(), before.size());
    // this test's own scan of the scaled gradients
    bool found = false;
    for (size_t i = 0; i < l.names.size(); i++)
      for (size_t k = 0; k < l.numel[i]; k++)
        found |= !std::isfinite(after[l.total + l.off[i] + k]);
    const double scale_before = ref.scale;
    const int64_t applied_before = ref.applied;
    ref.Update(found);
    gcc_loss_scale_state st = State(s);
    ASSERT_EQ(st.on, 1);
    EXPECT_EQ((double)st.scale, ref.scale);
    EXPECT_EQ((int64_t)st.growth_tracker, ref.tracker);
    EXPECT_EQ(st.applied_steps, ref.applied);
    EXPECT_EQ(st.skipped_steps, (int64_t)(step + 1) - ref.applied);
    if (found) {
      skipped++;
      skipped_after_growth += grown > 0;
      // parameters and optimizer state untouched, bit for bit
      for (size_t sec : {(size_t)0, (size_t)2, (size_t)(1 + ns)})
        for (size_t k = 0; k < l.total; k++)
          ASSERT_TRUE(Same(after[sec * l.total + k], before[sec * l.total + k]))
              << "section " << sec << " float " << k << " changed in a skipped step";
    } else {
      grown += ref.scale > scale_before;
      // the update from the unscaled gradients, as torch.optim does it
      const float inv = (float)(1.0 / scale_before);
      for (size_t i = 0; i < l.names.size(); i++)
        for (size_t k = 0; k < l.numel[i]; k++) {
          size_t at = l.off[i] + k;
          float p = before[at], gi = after[l.total + at] * inv;
          float want_p, want_s0, want_s1 = 0;
          if (kind == GCC_OPT_SGD) {
            float dd = gi + wd * p;
            float b =
                applied_before == 0 ? dd : before[2 * l.total + at] * mom + (1.0f - 0.0f) * dd;
            want_s0 = b;
            want_p = p + (-lr) * b;
          } else {
            double t = (double)applied_before + 1.0;
            float step_size = (float)((double)lr / (1.0 - pow((double)b1, t)));
            float bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, t));
            p = p * 1.0f;
            float ga = gi + wd * p;
            float m = before[2 * l.total + at] * b1 + (1.0f - b1) * ga;
            float v = before[3 * l.total + at] * b2 + (1.0f - b2) * ga * ga;
            want_s0 = m;
            want_s1 = v;
            want_p = p + (-step_size) * (m / (sqrtf(v) / bc2_sqrt + eps));
          }
          ASSERT_TRUE(Same(after[at], want_p))
              << l.names[i] << "[" << k << "]: " << after[at] << " != " << want_p;
          ASSERT_TRUE(Same(after[2 * l.total + at], want_s0)) << l.names[i] << "[" << k << "]";
          if (kind == GCC_OPT_ADAM) {
            ASSERT_TRUE(Same(after[3 * l.total + at], want_s1)) << l.names[i] << "[" << k << "]";
          }
        }
    }
    before = after;
  }
  // the run must have exercised every rule
  EXPECT_GE(skipped, 5) << "the huge initial scale should overflow several steps";
  EXPECT_GE(grown, 1) << "the scale never grew after " << kInterval << " good steps";
  EXPECT_GE(skipped_after_growth, 1) << "no overflow after a growth: the backoff is untested";
  EXPECT_LT(skipped, kSteps) << "every step skipped: nothing trained";
  if (cuda) { // the scale, found_inf and the step count come from device memory, so the
              // captured step replays right whatever they are (Adam's bias corrections too)
    EXPECT_GE(hb.captures, 1);
    EXPECT_GE(hb.replays, kSteps - 4);
  }
  gcc_session_destroy(s);
  for (const std::string &v : hb.violations)
    ADD_FAILURE() << v;
  gcc_graph_free(g);
}

TEST(LossScale, SgdTrajectoryFollowsGradScalerRulesOnTheCpu) {
  TrajectoryFollowsTheRules(GCC_OPT_SGD, false);
}

TEST(LossScale, AdamTrajectoryFollowsGradScalerRulesOnTheCpu) {
  TrajectoryFollowsTheRules(GCC_OPT_ADAM, false);
}

TEST(LossScale, SgdTrajectoryFollowsGradScalerRulesOnTheHostCudaPlan) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  TrajectoryFollowsTheRules(GCC_OPT_SGD, true);
}

TEST(LossScale, AdamTrajectoryFollowsGradScalerRulesOnTheHostCudaPlan) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  TrajectoryFollowsTheRules(GCC_OPT_ADAM, true);
}

// The CPU plan and the host-emulated CUDA plan in lockstep on the same
// batches: the same steps skipped, the same scale after each step, and
// parameters within the bound of tests/precision_test's fp16 training
// (GEMM sums taken in other orders fall on either side of a float16
// rounding boundary now and then: 2e-4 of the parameters' magnitude).
TEST(LossScale, CpuAndHostCudaPlansAgree) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  gcc_graph *g = Mlp(GCC_OPT_SGD);
  ASSERT_NE(g, nullptr);
  HostBackend hb;
  gcc_session *cpu = Session(g, Dynamic(kHugeScale, kInterval), nullptr);
  gcc_session *dev = Session(g, Dynamic(kHugeScale, kInterval), &hb);
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(dev, nullptr);
  int skipped = 0;
  for (int step = 0; step < 24; step++) {
    SCOPED_TRACE("step " + std::to_string(step));
    Batch bt = MakeBatch(step, 1.0f);
    float l1 = 0, l2 = 0;
    gcc_diag d{};
    ASSERT_EQ(gcc_session_train_step(cpu, bt.x.data(), bt.y.data(), kRows, &l1, &d), GCC_OK)
        << d.msg;
    ASSERT_EQ(gcc_session_train_step(dev, bt.x.data(), bt.y.data(), kRows, &l2, &d), GCC_OK)
        << d.msg;
    gcc_loss_scale_state a = State(cpu), b = State(dev);
    ASSERT_TRUE(Same(a.scale, b.scale)) << a.scale << " vs " << b.scale;
    ASSERT_EQ(a.growth_tracker, b.growth_tracker);
    ASSERT_EQ(a.skipped_steps, b.skipped_steps);
    skipped = (int)a.skipped_steps;
  }
  EXPECT_GE(skipped, 5);
  const Layout l = LayoutOf(g);
  for (size_t i = 0; i < l.names.size(); i++) {
    float *a = nullptr, *b = nullptr;
    int64_t n = 0;
    gcc_diag d{};
    ASSERT_EQ(gcc_session_param(cpu, l.names[i].c_str(), &a, &n, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_param(dev, l.names[i].c_str(), &b, &n, &d), GCC_OK) << d.msg;
    double m = 0, e = 0;
    for (int64_t k = 0; k < n; k++) {
      m = std::fmax(m, std::fabs((double)a[k]));
      e = std::fmax(e, std::fabs((double)a[k] - (double)b[k]));
    }
    EXPECT_LE(e, 2e-4 * m) << l.names[i];
  }
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  for (const std::string &v : hb.violations)
    ADD_FAILURE() << v;
  gcc_graph_free(g);
}

// A checkpoint written mid-run (steps skipped, the scale moved, the growth
// tracker part way), resumed in a new session and run 9 more steps
// ends bit for bit where the uninterrupted run ends: parameters, gradients,
// momentum, scale, growth tracker and applied steps.
void ResumeIsBitwise(bool cuda) {
  gcc_graph *g = Mlp(GCC_OPT_SGD);
  ASSERT_NE(g, nullptr);
  HostBackend hb;
  int half = 0; // the step after which the checkpoint is written (found below)
  const int after_ckpt = 9;
  auto run = [&](gcc_session *s, int from, int to) {
    for (int step = from; step < to; step++) {
      Batch bt = MakeBatch(step, 1.0f);
      float loss = 0;
      gcc_diag d{};
      ASSERT_EQ(gcc_session_train_step(s, bt.x.data(), bt.y.data(), kRows, &loss, &d), GCC_OK)
          << d.msg;
    }
  };
  gcc_session *whole = Session(g, Dynamic(kHugeScale, kInterval), cuda ? &hb : nullptr);
  gcc_session *first = Session(g, Dynamic(kHugeScale, kInterval), cuda ? &hb : nullptr);
  ASSERT_NE(whole, nullptr);
  ASSERT_NE(first, nullptr);
  // mid-run: some steps skipped and the growth tracker part way
  gcc_loss_scale_state mid{};
  while (half < 30 && (half < 6 || mid.growth_tracker == 0.0f)) {
    run(first, half, half + 1);
    half++;
    mid = State(first);
  }
  const int total = half + after_ckpt;
  run(whole, 0, total);
  EXPECT_GT(mid.skipped_steps, 0);
  EXPECT_NE(mid.scale, kHugeScale);
  EXPECT_GT(mid.growth_tracker, 0.0f) << "resume with a growth tracker part way";
  gcc_test::TempDir tmp("loss_scale_test"); // under $TEST_TMPDIR, removed at the end
  ASSERT_FALSE(tmp.path().empty());
  std::string dir = tmp.path();
  gcc_diag d{};
  ASSERT_EQ(gcc_checkpoint_write(dir.c_str(), first, g, 0, half, 1, &d), GCC_OK) << d.msg;
  gcc_session_destroy(first);
  gcc_checkpoint ck{};
  ASSERT_EQ(gcc_checkpoint_find(dir.c_str(), &ck, nullptr, &d), GCC_OK) << d.msg;
  if (!cuda) { // another growth interval, or no scaling: not this checkpoint's run
    gcc_session *other = Session(g, Dynamic(kHugeScale, kInterval + 1), nullptr);
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(gcc_checkpoint_check(&ck, g, other, &d), GCC_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(d.msg).find("growth_interval is 3, this run's is 4"), std::string::npos)
        << d.msg;
    gcc_session_destroy(other);
    gcc_loss_scale none{};
    other = Session(g, none, nullptr);
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(gcc_checkpoint_check(&ck, g, other, &d), GCC_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(d.msg).find("--loss-scale"), std::string::npos) << d.msg;
    gcc_session_destroy(other);
  }
  gcc_session *resumed = Session(g, Dynamic(kHugeScale, kInterval), cuda ? &hb : nullptr);
  ASSERT_NE(resumed, nullptr);
  ASSERT_EQ(gcc_checkpoint_check(&ck, g, resumed, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_restore(resumed, ck.arena, ck.arena_size, ck.step, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ck.step, half);
  gcc_checkpoint_free(&ck);
  gcc_loss_scale_state back = State(resumed);
  EXPECT_TRUE(Same(back.scale, mid.scale));
  EXPECT_EQ(back.growth_tracker, mid.growth_tracker);
  EXPECT_EQ(back.skipped_steps, mid.skipped_steps);
  run(resumed, half, total);
  std::vector<float> a = Arena(whole), b = Arena(resumed);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << "the resumed run's arena differs from the uninterrupted run's";
  gcc_loss_scale_state x = State(whole), y = State(resumed);
  EXPECT_TRUE(Same(x.scale, y.scale));
  EXPECT_EQ(x.skipped_steps, y.skipped_steps);
  gcc_session_destroy(resumed);
  gcc_session_destroy(whole);
  gcc_graph_free(g);
}

TEST(LossScale, ResumeFromAMidRunCheckpointIsBitwiseOnTheCpu) {
  ResumeIsBitwise(false);
}

TEST(LossScale, ResumeFromAMidRunCheckpointIsBitwiseOnTheHostCudaPlan) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  ResumeIsBitwise(true);
}

// Without overflow, scaling is exact. One fp16 step of the linear model
// (logits = x W^T + b in float16, the loss and its gradient in float32)
// with scale s = 2^12 against the same step unscaled. The forward is the
// same. dlogits = s * (softmax - onehot) / N exactly (s a power of two),
// stored in float16: round16(s * v) = s * round16(v) while both are normal
// float16 numbers (|v| >= 2^-14: here |v| >= min softmax / 8, far above).
// dW = dlogits^T x sums exactly scaled products in float32 and is stored
// in float16: S_s = s * S, so round16(S_s) * (1 / s) = round16(S) whenever
// |S| >= 2^-14 (normal) and |s * S| <= 65504 (no overflow): bit for bit. A
// subnormal S (|S| < 2^-14) is stored by the unscaled run with an error of
// at most half its spacing, 2^-25, and by the scaled run with at most
// 2^-11 * |S| < 2^-25: the two gradients differ by at most 2^-24, the
// parameters by lr * 2^-24 plus one rounding of the update (half an ulp of
// the parameter each way). The bias gradient (a float32 sum of dlogits) is
// exactly scaled: bit for bit.
constexpr float kSmallInputs = 0.01f; // inputs small enough for some subnormal dW

void NoOverflowMatchesUnscaled(bool cuda) {
  gcc_graph *g = Linear();
  ASSERT_NE(g, nullptr);
  HostBackend hb;
  gcc_loss_scale none{};
  gcc_session *scaled =
      Session(g, Dynamic(4096.0f, GCC_SCALER_GROWTH_INTERVAL), cuda ? &hb : nullptr);
  gcc_session *plain = Session(g, none, cuda ? &hb : nullptr);
  ASSERT_NE(scaled, nullptr);
  ASSERT_NE(plain, nullptr);
  Batch bt = MakeBatch(0, kSmallInputs);
  float l1 = 0, l2 = 0;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_train_step(scaled, bt.x.data(), bt.y.data(), kRows, &l1, &d), GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_session_train_step(plain, bt.x.data(), bt.y.data(), kRows, &l2, &d), GCC_OK)
      << d.msg;
  EXPECT_TRUE(Same(l1, l2)) << "the forward does not see the scale";
  gcc_loss_scale_state st = State(scaled);
  ASSERT_EQ(st.skipped_steps, 0) << "this step must not overflow";
  EXPECT_EQ(State(plain).on, 0);
  const float lr = g->training.opt.lr;
  const Layout l = LayoutOf(g);
  int exact = 0, subnormal = 0;
  for (size_t i = 0; i < l.names.size(); i++) {
    float *gs = nullptr, *gp = nullptr, *ps = nullptr, *pp = nullptr;
    int64_t n = 0;
    ASSERT_EQ(gcc_session_grad(scaled, l.names[i].c_str(), &gs, &n, &d), GCC_OK) << d.msg;
    std::vector<float> grad_s(gs, gs + n);
    ASSERT_EQ(gcc_session_grad(plain, l.names[i].c_str(), &gp, &n, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_param(scaled, l.names[i].c_str(), &ps, &n, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_param(plain, l.names[i].c_str(), &pp, &n, &d), GCC_OK) << d.msg;
    for (int64_t k = 0; k < n; k++) {
      SCOPED_TRACE(l.names[i] + "[" + std::to_string(k) + "]");
      float unscaled = grad_s[k] * (1.0f / 4096.0f);
      if (std::fabs(gp[k]) >= 6.103515625e-05f) { // 2^-14: a normal float16 number
        EXPECT_TRUE(Same(unscaled, gp[k])) << unscaled << " vs " << gp[k];
        EXPECT_TRUE(Same(ps[k], pp[k])) << ps[k] << " vs " << pp[k];
        exact++;
      } else {
        EXPECT_LE(std::fabs((double)unscaled - gp[k]), std::ldexp(1.0, -24));
        double ulp = std::ldexp(1.0, std::ilogb(std::fmax(std::fabs(pp[k]), 1e-30f)) - 23);
        EXPECT_LE(std::fabs((double)ps[k] - pp[k]), lr * std::ldexp(1.0, -24) + ulp);
        subnormal++;
      }
    }
  }
  EXPECT_GT(exact, 100) << "too few normal gradients to test";
  std::printf("%d gradients normal in float16 (bit for bit), %d subnormal (bounded)\n", exact,
              subnormal);
  gcc_session_destroy(plain);
  gcc_session_destroy(scaled);
  for (const std::string &v : hb.violations)
    ADD_FAILURE() << v;
  gcc_graph_free(g);
}

TEST(LossScale, WithoutOverflowAScaledStepEqualsTheUnscaledStepOnTheCpu) {
  NoOverflowMatchesUnscaled(false);
}

TEST(LossScale, WithoutOverflowAScaledStepEqualsTheUnscaledStepOnTheHostCudaPlan) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  NoOverflowMatchesUnscaled(true);
}

// The plan of a fixed scale: the scale never moves, but a step with an
// Inf/NaN gradient is still skipped (the update's factors are 1).
TEST(LossScale, AFixedScaleNeverMovesButStillSkips) {
  gcc_graph *g = Mlp(GCC_OPT_SGD);
  ASSERT_NE(g, nullptr);
  gcc_loss_scale fixed{GCC_LOSS_SCALE_FIXED, kHugeScale, 2.0f, 0.5f, 1};
  gcc_session *s = Session(g, fixed, nullptr);
  ASSERT_NE(s, nullptr);
  for (int step = 0; step < 4; step++) {
    Batch bt = MakeBatch(step, 1.0f);
    float loss = 0;
    gcc_diag d{};
    ASSERT_EQ(gcc_session_train_step(s, bt.x.data(), bt.y.data(), kRows, &loss, &d), GCC_OK)
        << d.msg;
  }
  gcc_loss_scale_state st = State(s);
  EXPECT_TRUE(Same(st.scale, kHugeScale));
  EXPECT_EQ(st.skipped_steps, 4) << "2^40 overflows float16 on every step";
  EXPECT_EQ(st.applied_steps, 0);
  gcc_session_destroy(s);
  gcc_graph_free(g);
}

} // namespace
