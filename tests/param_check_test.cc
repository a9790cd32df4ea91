// The divergence check of the parameters (gcc_session_check_params) on the
// CPU, where the SGD and Adam kernels check what they write
// (runtime/cpu/cpu_optim.c) and the session scans only when they did not
// all report finite results: a parameter that becomes non-finite at a later
// step (after checks that passed) is named with that step, as the full scan
// names it; a parameter set from outside the steps is scanned.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/ir.h"
#include "models/models.h"
#include "runtime/session.h"

namespace {

constexpr int64_t kRows = 16;

struct Fixture {
  gcc_graph *g = nullptr;
  gcc_session *s = nullptr;
  std::vector<float> x, y;
  ~Fixture() {
    gcc_session_destroy(s);
    gcc_graph_free(g);
  }
};

// nn.Linear(3, 1) with MSE (models/models.h gcc_model_linear) on the CPU
// with optimizer `kind`.
void Make(Fixture *f, gcc_opt_kind kind) {
  gcc_diag d{};
  ASSERT_EQ(gcc_model_linear(7, &f->g, &d), GCC_OK) << d.msg;
  gcc_session_options so{};
  so.threads = 1;
  so.opt = f->g->training.opt;
  so.opt.kind = kind;
  so.opt.momentum = kind == GCC_OPT_SGD ? 0.9f : 0.0f;
  so.opt.beta1 = 0.9f, so.opt.beta2 = 0.999f, so.opt.eps = 1e-8f;
  ASSERT_EQ(gcc_session_create(f->g, &so, &f->s, &d), GCC_OK) << d.msg;
  for (int64_t r = 0; r < kRows; r++) {
    for (int k = 0; k < 3; k++)
      f->x.push_back((float)((r * 5 + k * 3) % 7) / 7.0f - 0.5f);
    f->y.push_back((float)(r % 5) / 5.0f);
  }
}

gcc_status Step(Fixture *f, gcc_diag *d) {
  float loss = NAN;
  return gcc_session_train_step(f->s, f->x.data(), f->y.data(), kRows, &loss, d);
}

// Steps that stay finite pass; a step with a learning rate that makes the
// parameters non-finite fails the next check with that step's number, and a second
// check says the same.
void LaterDivergenceIsNamed(gcc_opt_kind kind, float huge_lr) {
  SCOPED_TRACE(kind == GCC_OPT_SGD ? "SGD" : "Adam");
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(Make(&f, kind));
  gcc_diag d{};
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(Step(&f, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_check_params(f.s, &d), GCC_OK) << d.msg;
  }
  gcc_session_set_lr(f.s, huge_lr);
  gcc_status st = Step(&f, &d); // its loss was computed before the update: finite
  ASSERT_EQ(st, GCC_OK) << d.msg;
  gcc_diag first{};
  ASSERT_EQ(gcc_session_check_params(f.s, &first), GCC_ERR_NUMERIC);
  std::string msg = first.msg;
  EXPECT_NE(msg.find("is non-finite ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("after optimizer step 4 "), std::string::npos) << msg;
  EXPECT_NE(msg.find("parameter 'fc."), std::string::npos) << msg;
  gcc_diag again{};
  ASSERT_EQ(gcc_session_check_params(f.s, &again), GCC_ERR_NUMERIC);
  EXPECT_EQ(std::string(again.msg), msg);
}

// An infinite learning rate: every updated element is +-Inf, or NaN where
// its step is 0 (Inf * 0)
TEST(ParamCheck, SgdDivergenceAfterPassingChecksIsNamed) {
  LaterDivergenceIsNamed(GCC_OPT_SGD, INFINITY);
}

TEST(ParamCheck, AdamDivergenceAfterPassingChecksIsNamed) {
  LaterDivergenceIsNamed(GCC_OPT_ADAM, INFINITY);
}

// A parameter written from outside the steps is scanned at the next check,
// with no step in between.
TEST(ParamCheck, ParameterSetFromOutsideIsScanned) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(Make(&f, GCC_OPT_SGD));
  gcc_diag d{};
  ASSERT_EQ(Step(&f, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_check_params(f.s, &d), GCC_OK) << d.msg;
  float bias = NAN;
  ASSERT_EQ(gcc_session_set_param(f.s, "fc.bias", &bias, 1, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_check_params(f.s, &d), GCC_ERR_NUMERIC);
  EXPECT_NE(std::string(d.msg).find("parameter 'fc.bias' is non-finite (NaN at element 0 of 1) "
                                    "after optimizer step 1 "),
            std::string::npos)
      << d.msg;
  // written through gcc_session_param's pointer
  bias = 0.5f;
  ASSERT_EQ(gcc_session_set_param(f.s, "fc.bias", &bias, 1, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_check_params(f.s, &d), GCC_OK) << d.msg;
  ASSERT_EQ(Step(&f, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_check_params(f.s, &d), GCC_OK) << d.msg;
  float *w = nullptr;
  int64_t n = 0;
  ASSERT_EQ(gcc_session_param(f.s, "fc.weight", &w, &n, &d), GCC_OK) << d.msg;
  ASSERT_EQ(n, 3);
  w[2] = -INFINITY;
  ASSERT_EQ(gcc_session_check_params(f.s, &d), GCC_ERR_NUMERIC);
  EXPECT_NE(std::string(d.msg).find("parameter 'fc.weight' is non-finite (-Inf at element 2 of 3) "
                                    "after optimizer step 2 "),
            std::string::npos)
      << d.msg;
}

} // namespace
