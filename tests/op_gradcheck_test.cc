// Every op of the op table (graph/ops.h, GCC_OP_LIST) against an independent
// float64 reference written here:
//
//  * differentiable ops: the CPU forward is compared with the float64
//    reference, and the gradient the autodiff pass builds (with the gradient
//    ops of passes/grad_rules.c, run by the CPU kernels) is compared with
//    central finite differences of the float64 reference, on random shapes
//    and several seeds;
//  * internal gradient ops (ReluGrad, ReduceSumTo, SoftmaxCrossEntropyGrad,
//    MeanSquaredErrorGrad) are covered through the ops whose backward uses
//    them (each gradcheck asserts that they appear in the backward graph) and
//    also directly, forward only, against their float64 formulas;
//  * optimizers (SGD, Adam) are run through a session for one and several
//    steps and compared with float64 re-implementations of torch.optim.SGD
//    and torch.optim.Adam (PyTorch 1.13, as documented in graph/graph.proto).
//
// The gradcheck harness builds, with the builder API, a graph whose
// differentiated inputs are PARAMETERS, then the op under test, then the
// scalar loss MeanSquaredError(op output, random target) (or the op itself
// when it is a loss). The plan is compiled with gcc_plan_compile() in TRAIN
// mode with no optimizer (so nothing moves) and a bind function of the test
// that owns parameter and gradient storage; gradients start as NaN so a
// gradient that is never written fails. Extra graph inputs (targets, labels,
// class weights) are bound with gcc_plan_bind_input().
//
// Tolerances (see the constants below):
//  * forward vs float64 reference: |y - ref| <= 1e-6 + 1e-5 |ref|. Inputs are
//    the same float32 numbers in both, so the only difference is float32
//    rounding in the kernel (a handful of roundings of O(1) values, each
//    <= 6e-8 relative, for reductions of at most ~30 terms).
//  * gradient vs central differences: |g - fd| <= 2e-5 + 1e-4 |fd|, h = 1e-3.
//    The float64 FD is essentially exact: MSE(linear in one element) is
//    quadratic in every single element, so its central difference has no
//    truncation error; for the cross-entropy the truncation error is
//    h^2 f'''/6 < 1e-7. What remains is the float32 computation of the
//    gradient itself (a few roundings of O(1) numbers: < 1e-6). The largest
//    errors observed (printed at the end of the run) use ~2% of the gradient
//    bound (max |g - fd| ~2e-6) and ~11% of the forward bound (max ~5e-7),
//    yet any wrong factor (alpha, beta, 1/N, a missing term) is off by
//    >= 1e-2.
//  * optimizer parameters vs float64 re-implementation: |p - ref| <= 2e-6 +
//    1e-5 |ref| after each step (float32 update arithmetic only: the
//    reference is fed the gradient the library computed, which is itself
//    checked against the float64 analytic gradient).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/builder.h"
#include "graph/ir.h"
#include "graph/ops.h"
#include "graph/philox.h"
#include "passes/grad_rules.h"
#include "runtime/cpu/cpu_attention.h"
#include "runtime/cpu/cpu_kernels.h"
#include "passes/passes.h"
#include "runtime/plan.h"
#include "runtime/session.h"
extern "C" {
#include "codegen/nvrtc.h"
#include "codegen/kernel_cache.h"
}
#include "tests/host_backend.h"
#include "tests/run_plans.h"
#include "tests/test_kernel_cache.h"

namespace {

// ---- tolerances -------------------------------------------------------------

constexpr double kFwdAtol = 1e-6, kFwdRtol = 1e-5;
constexpr double kGradAtol = 2e-5, kGradRtol = 1e-4;
constexpr double kOptAtol = 2e-6, kOptRtol = 1e-5;
constexpr double kFdStep = 1e-3;
const uint64_t kSeeds[] = {1, 2, 3, 4, 5};

// Largest errors seen, as a fraction of the tolerance and in absolute terms;
// printed when the run ends so that the tolerances can be re-justified.
struct ErrStat {
  double worst_ratio = 0, worst_abs = 0;
  long checks = 0;
  void Add(double err, double tol) {
    checks++;
    if (err / tol > worst_ratio)
      worst_ratio = err / tol;
    if (err > worst_abs)
      worst_abs = err;
  }
};
ErrStat g_fwd, g_grad, g_direct, g_opt;

class ReportErrors : public ::testing::Environment {
public:
  void TearDown() override {
    auto line = [](const char *what, const ErrStat &s) {
      std::printf("[op_gradcheck] %-28s %6ld checks, max |err| %.3g, max err/tol %.3f\n", what,
                  s.checks, s.worst_abs, s.worst_ratio);
    };
    line("forward vs float64", g_fwd);
    line("gradient vs float64 FD", g_grad);
    line("internal ops vs float64", g_direct);
    line("optimizers vs float64", g_opt);
  }
};
::testing::Environment *const g_report = ::testing::AddGlobalTestEnvironment(new ReportErrors);

// ---- shapes and float64 tensors -----------------------------------------------

using Dims = std::vector<int64_t>;

int64_t Numel(const Dims &d) {
  int64_t n = 1;
  for (int64_t x : d)
    n *= x;
  return n;
}

std::string Str(const Dims &d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i)
    s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

struct T64 {
  Dims dims;
  std::vector<double> v;
};

T64 Zeros(const Dims &d) {
  T64 t;
  t.dims = d;
  t.v.assign(static_cast<size_t>(Numel(d)), 0.0);
  return t;
}

T64 FromFloats(const Dims &d, const std::vector<float> &f) {
  T64 t;
  t.dims = d;
  t.v.assign(f.begin(), f.end());
  return t;
}

// numpy broadcasting of two shapes; false if incompatible.
bool BroadcastDims(const Dims &a, const Dims &b, Dims *out) {
  size_t n = std::max(a.size(), b.size());
  Dims r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    if (da != db && da != 1 && db != 1)
      return false;
    r[i] = da == 1 ? db : da;
  }
  *out = r;
  return true;
}

// Flat offset in a tensor of shape `in` of the element that broadcasting
// places at flat position `o` of shape `out` (in aligned to the right, size-1
// dims repeated).
int64_t BroadcastIndex(const Dims &in, const Dims &out, int64_t o) {
  int64_t idx = 0, stride = 1;
  for (size_t k = out.size(); k-- > 0;) {
    int64_t coord = o % out[k];
    o /= out[k];
    size_t shift = out.size() - in.size();
    if (k >= shift) {
      int64_t dim = in[k - shift];
      idx += (dim == 1 ? 0 : coord) * stride;
      stride *= dim;
    }
  }
  return idx;
}

// ---- float64 references ---------------------------------------------------------

T64 RefAdd(const T64 &a, const T64 &b) {
  Dims od;
  EXPECT_TRUE(BroadcastDims(a.dims, b.dims, &od)) << Str(a.dims) << " + " << Str(b.dims);
  T64 y = Zeros(od);
  for (int64_t o = 0; o < Numel(od); ++o)
    y.v[o] = a.v[BroadcastIndex(a.dims, od, o)] + b.v[BroadcastIndex(b.dims, od, o)];
  return y;
}

// ONNX Gemm: alpha op(A) op(B) + beta C, C unidirectionally broadcast.
T64 RefGemm(const T64 &A, const T64 &B, const T64 *C, double alpha, double beta, bool ta, bool tb) {
  int64_t M = ta ? A.dims[1] : A.dims[0], K = ta ? A.dims[0] : A.dims[1];
  int64_t N = tb ? B.dims[0] : B.dims[1];
  T64 y = Zeros({M, N});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        double a = ta ? A.v[k * M + i] : A.v[i * K + k];
        double b = tb ? B.v[j * K + k] : B.v[k * N + j];
        s += a * b;
      }
      y.v[i * N + j] =
          alpha * s + (C ? beta * C->v[BroadcastIndex(C->dims, y.dims, i * N + j)] : 0);
    }
  return y;
}

T64 RefRelu(const T64 &x) {
  T64 y = x;
  for (double &v : y.v)
    v = v > 0 ? v : 0;
  return y;
}

// ONNX Reshape (allowzero = 0): 0 copies the input dim, -1 is inferred.
Dims ReshapeDims(const Dims &in, const Dims &spec) {
  Dims r = spec;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] == 0)
      r[i] = in[i];
    if (r[i] == -1)
      infer = static_cast<int>(i);
    else
      known *= r[i];
  }
  if (infer >= 0)
    r[infer] = Numel(in) / known;
  return r;
}

// ONNX Flatten: (prod(dims[:axis]), prod(dims[axis:])), negative axis from the end.
Dims FlattenDims(const Dims &in, int64_t axis) {
  if (axis < 0)
    axis += static_cast<int64_t>(in.size());
  Dims r = {1, 1};
  for (size_t i = 0; i < in.size(); ++i)
    r[static_cast<int64_t>(i) < axis ? 0 : 1] *= in[i];
  return r;
}

// PyTorch sum_to_size, times scale.
T64 RefSumTo(const T64 &x, const Dims &to, double scale) {
  T64 y = Zeros(to);
  for (int64_t o = 0; o < Numel(x.dims); ++o)
    y.v[BroadcastIndex(to, x.dims, o)] += x.v[o];
  for (double &v : y.v)
    v *= scale;
  return y;
}

// nn.MSELoss.
double RefMse(const T64 &p, const T64 &t, bool mean) {
  double s = 0;
  for (size_t i = 0; i < p.v.size(); ++i)
    s += (p.v[i] - t.v[i]) * (p.v[i] - t.v[i]);
  return mean ? s / static_cast<double>(p.v.size()) : s;
}

// -log_softmax(row)[j], computed stably.
std::vector<double> LogSoftmax(const double *row, int64_t C) {
  double mx = row[0];
  for (int64_t j = 1; j < C; ++j)
    mx = std::max(mx, row[j]);
  double se = 0;
  for (int64_t j = 0; j < C; ++j)
    se += std::exp(row[j] - mx);
  std::vector<double> r(static_cast<size_t>(C));
  for (int64_t j = 0; j < C; ++j)
    r[j] = row[j] - mx - std::log(se);
  return r;
}

// nn.CrossEntropyLoss(weight, ignore_index, reduction) with class indices.
double RefSce(const T64 &x, const std::vector<int64_t> &labels, const T64 *w, int64_t ignore,
              bool mean) {
  int64_t N = x.dims[0], C = x.dims[1];
  double total = 0, wsum = 0;
  for (int64_t i = 0; i < N; ++i) {
    int64_t y = labels[i];
    if (y == ignore)
      continue;
    double wi = w ? w->v[y] : 1.0;
    total += -wi * LogSoftmax(&x.v[i * C], C)[y];
    wsum += wi;
  }
  return mean ? total / wsum : total; // 0/0 = NaN when every row is ignored, as PyTorch
}

// ---- random data --------------------------------------------------------------

class Rng {
public:
  explicit Rng(uint64_t seed) : g_(seed * 0x9E3779B97F4A7C15ull + 12345) {}
  double U(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(g_() >> 11) * (1.0 / 9007199254740992.0);
  }
  int64_t I(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(g_() % static_cast<uint64_t>(hi - lo + 1));
  }
  // n floats in [lo, hi) whose magnitude is at least `avoid` (for kinks).
  std::vector<float> F(int64_t n, double lo = -1, double hi = 1, double avoid = 0) {
    std::vector<float> r(static_cast<size_t>(n));
    for (float &x : r) {
      do {
        x = static_cast<float>(U(lo, hi));
      } while (std::fabs(x) < avoid);
    }
    return r;
  }
  Dims RandDims(int rank, int64_t lo, int64_t hi) {
    Dims d(static_cast<size_t>(rank));
    for (int64_t &x : d)
      x = I(lo, hi);
    return d;
  }

private:
  std::mt19937_64 g_;
};

// ---- owning handles -------------------------------------------------------------

struct GraphFree {
  void operator()(gcc_graph *g) const { gcc_graph_free(g); }
};
struct PlanFree {
  void operator()(gcc_plan *p) const { gcc_plan_free(p); }
};
struct SessionFree {
  void operator()(gcc_session *s) const { gcc_session_destroy(s); }
};
using GraphPtr = std::unique_ptr<gcc_graph, GraphFree>;
using PlanPtr = std::unique_ptr<gcc_plan, PlanFree>;
using SessionPtr = std::unique_ptr<gcc_session, SessionFree>;

// ---- graph inputs and parameters of a case ------------------------------------------

struct ParamSpec {
  std::string name;
  Dims dims;
  std::vector<float> data;
};

struct InputSpec {
  std::string name;
  gcc_dtype dt = GCC_DT_FLOAT32;
  Dims dims;
  std::vector<float> f;
  std::vector<int64_t> i64;
  std::vector<int32_t> i32;
  const void *data() const {
    if (dt == GCC_DT_INT64)
      return i64.data();
    if (dt == GCC_DT_INT32)
      return i32.data();
    return f.data();
  }
};

InputSpec FloatInput(const std::string &name, const Dims &d, std::vector<float> v) {
  InputSpec s;
  s.name = name;
  s.dims = d;
  s.f = std::move(v);
  return s;
}

InputSpec LabelInput(const std::string &name, gcc_dtype dt, const std::vector<int64_t> &v) {
  InputSpec s;
  s.name = name;
  s.dt = dt;
  s.dims = {static_cast<int64_t>(v.size())};
  s.i64 = v;
  for (int64_t x : v)
    s.i32.push_back(static_cast<int32_t>(x));
  return s;
}

// float data of parameters and float inputs, by name, as float64.
using Env = std::map<std::string, T64>;
using Ids = std::map<std::string, int>;
// Adds the op under test (and anything around it) and returns its output.
using BuildFn = std::function<int(gcc_builder *, const Ids &)>;
// The op output in float64 from the float64 environment.
using RefFn = std::function<T64(const Env &)>;

// Attribute setters on the node that produced value v (the builder API only
// has int and float setters).
void SetInts(gcc_builder *b, int v, const char *name, const Dims &d) {
  if (v < 0)
    return;
  EXPECT_EQ(
      gcc_node_set_ints(b->g, b->g->values[v].producer, name, d.data(), static_cast<int>(d.size())),
      GCC_OK);
}
void SetString(gcc_builder *b, int v, const char *name, const char *s) {
  if (v < 0)
    return;
  EXPECT_EQ(gcc_node_set_string(b->g, b->g->values[v].producer, name, s), GCC_OK);
}

int Op(gcc_builder *b, int op, const char *name, std::vector<int> ins) {
  std::string out = std::string(name) + ".out";
  return gcc_build_op(b, op, name, out.c_str(), ins.data(), static_cast<int>(ins.size()));
}

// Persistent storage the test owns: parameters and their gradients.
struct Storage {
  std::map<std::string, std::vector<float>> param, grad;
};

void *BindPersistent(void *user, const gcc_graph *g, int v) {
  auto *s = static_cast<Storage *>(user);
  const gcc_value &val = g->values[v];
  if (val.kind == GCC_VALUE_PARAM) {
    auto it = s->param.find(val.name);
    return it == s->param.end() ? nullptr : it->second.data();
  }
  if (val.kind == GCC_VALUE_GRAD && val.param_of >= 0) {
    auto it = s->grad.find(g->values[val.param_of].name);
    return it == s->grad.end() ? nullptr : it->second.data();
  }
  return nullptr;
}

bool Close(double got, double want, double atol, double rtol, ErrStat *st) {
  if (std::isnan(want) || std::isnan(got))
    return std::isnan(want) && std::isnan(got);
  double err = std::fabs(got - want), tol = atol + rtol * std::fabs(want);
  st->Add(err, tol);
  return err <= tol;
}

void ExpectTensor(const gcc_tensor *t, const T64 &want, ErrStat *st, const std::string &what,
                  gcc_dtype want_dt = GCC_DT_FLOAT32) {
  ASSERT_NE(t, nullptr) << what;
  ASSERT_EQ(t->dtype, want_dt) << what;
  ASSERT_EQ(t->shape.ndim, static_cast<int>(want.dims.size()))
      << what << " want " << Str(want.dims);
  for (size_t k = 0; k < want.dims.size(); ++k)
    ASSERT_EQ(t->shape.dims[k], want.dims[k]) << what << " dim " << k << " want " << Str(want.dims);
  ASSERT_NE(t->data, nullptr) << what;
  auto at = [t](size_t i) -> double {
    if (t->dtype == GCC_DT_INT64)
      return static_cast<double>(static_cast<const int64_t *>(t->data)[i]);
    if (t->dtype == GCC_DT_INT32)
      return static_cast<const int32_t *>(t->data)[i];
    return static_cast<const float *>(t->data)[i];
  };
  int bad = 0;
  for (size_t i = 0; i < want.v.size(); ++i)
    if (!Close(at(i), want.v[i], kFwdAtol, kFwdRtol, st) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << at(i) << ", float64 reference " << want.v[i];
}

// ---- the gradcheck harness --------------------------------------------------------

struct GradCase {
  std::string label;
  std::vector<ParamSpec> params;
  std::vector<InputSpec> inputs;
  BuildFn build;
  RefFn ref;
  bool is_loss = false;        // the op's output is the (scalar) loss itself
  std::vector<int> bwd_ops;    // ops that must appear in the backward graph
  std::vector<int> bwd_absent; // ops that must not
  bool cuda = false;           // also through a CUDA plan on the host backend (RunOnHostCuda)
  // persistent state values (BatchNormalization's running statistics):
  // bound like parameters, marked `state`, no gradient checked
  std::vector<ParamSpec> states;
  // checks the persistent values (parameters and states by name) after the
  // run, on the CPU ("cpu") and on the CUDA plan ("cuda")
  std::function<void(const std::map<std::string, const float *> &, const char *)> after;
};

const char *kLossName = "gc.loss";

// Parameters and gradients in the host backend's "device" memory for a CUDA
// plan (gradients start as NaN, as on the CPU).
struct DeviceStorage {
  gcc_host_test::HostBackend *hb;
  const Storage *host;
  std::map<std::string, float *> grad, param;
  std::vector<void *> blocks;
  ~DeviceStorage() {
    for (void *p : blocks)
      hb->be.release(hb->be.self, p);
  }
  static void *Bind(void *user, const gcc_graph *g, int v) {
    auto *s = static_cast<DeviceStorage *>(user);
    const gcc_value &val = g->values[v];
    const std::vector<float> *src = nullptr;
    bool is_grad = val.kind == GCC_VALUE_GRAD && val.param_of >= 0;
    const std::string name = is_grad ? g->values[val.param_of].name : val.name;
    if (val.kind == GCC_VALUE_PARAM || is_grad) {
      auto it = s->host->param.find(name);
      if (it != s->host->param.end())
        src = &it->second;
    }
    if (!src)
      return nullptr;
    void *p = nullptr;
    gcc_diag d{};
    size_t bytes = src->size() * sizeof(float);
    if (s->hb->be.alloc(s->hb->be.self, bytes ? bytes : 1, &p, &d) != GCC_OK)
      return nullptr;
    s->blocks.push_back(p);
    if (is_grad) {
      float *f = static_cast<float *>(p);
      for (size_t i = 0; i < src->size(); ++i)
        f[i] = std::numeric_limits<float>::quiet_NaN();
      s->grad[name] = f;
    } else {
      std::memcpy(p, src->data(), bytes);
      s->param[name] = static_cast<float *>(p);
    }
    return p;
  }
};

gcc_host_test::HostBackend *SharedHostBackend() {
  static gcc_host_test::HostBackend *hb = new gcc_host_test::HostBackend();
  return hb;
}

// Runs the training graph `model` (gradients only) through a CUDA plan for
// cuda:0 (sm_90) on the host backend: generated kernels compiled from their
// CUDA C and run on the host, library calls as the CPU kernels. Returns the
// loss and each parameter's gradient in *grads.
void RunOnHostCuda(const gcc_graph *model, const GradCase &c, const InputSpec &target,
                   const std::string &loss_name, const Storage &host, double *loss,
                   std::map<std::string, std::vector<float>> *grads) {
  gcc_host_test::HostBackend *hb = SharedHostBackend();
  DeviceStorage ds{hb, &host, {}, {}, {}};
  gcc_options o = {};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 1;
  o.opt.kind = GCC_OPT_NONE;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *quiet = std::fopen("/dev/null", "w");
  o.warn_file = quiet;
  gcc_plan_config cfg{};
  cfg.threads = 1;
  cfg.readback_ring = 1;
  cfg.device = &hb->be;
  cfg.sm = 90;
  cfg.sm_count = 4;
  cfg.compile = gcc_kernel_cache_hook;
  cfg.compile_user = gcc_test::TestKernelCache();
  gcc_plan *plan_raw = nullptr;
  gcc_diag d = {};
  gcc_status st = gcc_plan_compile(model, &o, &cfg, DeviceStorage::Bind, &ds, &plan_raw, &d);
  if (quiet)
    std::fclose(quiet);
  PlanPtr plan(plan_raw);
  ASSERT_EQ(st, GCC_OK) << "CUDA plan: " << d.msg;
  for (const InputSpec &in : c.inputs)
    ASSERT_EQ(gcc_plan_bind_input(plan.get(), in.name.c_str(), in.data(), &d), GCC_OK) << d.msg;
  if (!c.is_loss) {
    ASSERT_EQ(gcc_plan_bind_input(plan.get(), target.name.c_str(), target.f.data(), &d), GCC_OK)
        << d.msg;
  }
  ASSERT_EQ(gcc_plan_run(plan.get(), 0, &d), GCC_OK) << "CUDA plan: " << d.msg;
  const gcc_tensor *lt = gcc_plan_host_tensor(plan.get(), loss_name.c_str(), &d); // waits
  ASSERT_NE(lt, nullptr) << d.msg;
  *loss = static_cast<const float *>(lt->data)[0];
  for (const auto &kv : ds.grad)
    (*grads)[kv.first].assign(kv.second, kv.second + host.param.at(kv.first).size());
  if (c.after) {
    std::map<std::string, const float *> vals(ds.param.begin(), ds.param.end());
    c.after(vals, "cuda");
  }
}

// Whether this build compiles CUDA kernels (NVRTC): not under bazel
// --config=cpu_only, where the CUDA plan half of a case does not run (the
// default build runs it).
bool BuiltWithNvrtc() {
  int major = 0, minor = 0;
  return gcc_nvrtc_version(&major, &minor) == GCC_OK;
}

void RunGradCase(const GradCase &c, uint64_t seed) {
  SCOPED_TRACE("case " + c.label + ", seed " + std::to_string(seed));
  Rng rng(seed * 7919 + 17);
  Env env;
  for (const ParamSpec &p : c.params)
    env[p.name] = FromFloats(p.dims, p.data);
  for (const InputSpec &in : c.inputs)
    if (in.dt == GCC_DT_FLOAT32)
      env[in.name] = FromFloats(in.dims, in.f);
  const T64 out_ref = c.ref(env);

  // the loss: MSE against a random target, unless the op is a loss
  InputSpec target;
  T64 target64;
  if (!c.is_loss) {
    target = FloatInput("gc.target", out_ref.dims, rng.F(Numel(out_ref.dims)));
    target64 = FromFloats(target.dims, target.f);
  }
  auto loss_of = [&](const Env &e) {
    T64 y = c.ref(e);
    return c.is_loss ? y.v[0] : RefMse(y, target64, true);
  };

  gcc_builder *b = gcc_builder_new("gradcheck", seed);
  ASSERT_NE(b, nullptr);
  Ids ids;
  for (const InputSpec &in : c.inputs)
    ids[in.name] = gcc_build_input(b, in.name.c_str(), in.dt, static_cast<int>(in.dims.size()),
                                   in.dims.data());
  for (const ParamSpec &p : c.params)
    ids[p.name] = gcc_build_param(b, p.name.c_str(), static_cast<int>(p.dims.size()), p.dims.data(),
                                  p.data.data());
  for (const ParamSpec &p : c.states) {
    ids[p.name] = gcc_build_param(b, p.name.c_str(), static_cast<int>(p.dims.size()), p.dims.data(),
                                  p.data.data());
    if (ids[p.name] >= 0)
      b->g->values[ids[p.name]].state = 1;
  }
  int out = c.build(b, ids);
  std::string out_name = out >= 0 ? b->g->values[out].name : "";
  int loss = out;
  if (!c.is_loss) {
    int t = gcc_build_input(b, target.name.c_str(), GCC_DT_FLOAT32,
                            static_cast<int>(target.dims.size()), target.dims.data());
    loss = gcc_build_mse(b, kLossName, out, t);
  }
  std::string loss_name = loss >= 0 ? b->g->values[loss].name : "";
  gcc_build_output(b, loss);
  gcc_build_training_spec ts = {};
  ts.loss = loss_name.c_str();
  ts.prediction = c.is_loss ? nullptr : out_name.c_str(); // keeps the op output readable
  ts.opt.kind = GCC_OPT_SGD;                              // the file needs one; unused here
  ts.batch_size = 1;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *model_raw = nullptr;
  gcc_diag d = {};
  gcc_status st = gcc_builder_finish(b, &model_raw, &d);
  GraphPtr model(model_raw);
  ASSERT_EQ(st, GCC_OK) << d.msg;

  Storage s;
  for (const ParamSpec &p : c.params) {
    s.param[p.name] = p.data;
    s.grad[p.name].assign(p.data.size(), std::numeric_limits<float>::quiet_NaN());
  }
  for (const ParamSpec &p : c.states)
    s.param[p.name] = p.data;
  gcc_options o = {};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 1;
  o.opt.kind = GCC_OPT_NONE; // gradients only: no update node
  // GeluGrad is what the Gelu cases check against finite differences; the
  // CPU's gelu-aux lowering would make it GeluAux + Mul, which give its
  // bits (GeluAux.EqualsGeluAndGeluGradBitwise, CharGpt.GeluAux*)
  o.no_gelu_aux = 1;
  // device: zero-initialised = the CPU
  gcc_plan *plan_raw = nullptr;
  gcc_plan_config cfg{};
  cfg.threads = 1;
  st = gcc_plan_compile(model.get(), &o, &cfg, BindPersistent, &s, &plan_raw, &d);
  PlanPtr plan(plan_raw);
  ASSERT_EQ(st, GCC_OK) << d.msg;
  for (const InputSpec &in : c.inputs)
    ASSERT_EQ(gcc_plan_bind_input(plan.get(), in.name.c_str(), in.data(), &d), GCC_OK) << d.msg;
  if (!c.is_loss) {
    ASSERT_EQ(gcc_plan_bind_input(plan.get(), target.name.c_str(), target.f.data(), &d), GCC_OK)
        << d.msg;
  }
  ASSERT_EQ(gcc_plan_run(plan.get(), 0, &d), GCC_OK) << d.msg;
  if (c.after) {
    std::map<std::string, const float *> vals;
    for (const auto &kv : s.param)
      vals[kv.first] = kv.second.data();
    c.after(vals, "cpu");
  }

  // the backward graph uses the gradient ops this case is meant to cover
  const gcc_graph *cg = gcc_plan_graph(plan.get());
  for (int op : c.bwd_ops) {
    bool found = false;
    for (int i = 0; i < cg->n_nodes; ++i)
      found |= cg->nodes[i].op == op && cg->nodes[i].phase == GCC_PHASE_BACKWARD;
    EXPECT_TRUE(found) << "no backward " << gcc_op_name(op) << " node";
  }
  for (int op : c.bwd_absent)
    for (int i = 0; i < cg->n_nodes; ++i)
      EXPECT_FALSE(cg->nodes[i].op == op && cg->nodes[i].phase == GCC_PHASE_BACKWARD)
          << "backward node '" << cg->nodes[i].name << "' is a " << gcc_op_name(op);

  // forward: the op output and the loss against float64
  if (!c.is_loss)
    ExpectTensor(gcc_plan_tensor(plan.get(), out_name.c_str()), out_ref, &g_fwd, out_name);
  const gcc_tensor *lt = gcc_plan_tensor(plan.get(), loss_name.c_str());
  ASSERT_NE(lt, nullptr);
  double lib_loss = static_cast<const float *>(lt->data)[0], ref_loss = loss_of(env);
  EXPECT_TRUE(Close(lib_loss, ref_loss, kFwdAtol, kFwdRtol, &g_fwd))
      << "loss " << lib_loss << ", float64 reference " << ref_loss;

  // the same graph through a CUDA plan on the host backend
  std::map<std::string, std::vector<float>> cuda_grad;
  const bool cuda = c.cuda && BuiltWithNvrtc();
  if (cuda) {
    double cuda_loss = 0;
    Storage fresh; // the CPU run updated the states in place: start from the case's values
    for (const ParamSpec &p : c.params)
      fresh.param[p.name] = p.data;
    for (const ParamSpec &p : c.states)
      fresh.param[p.name] = p.data;
    RunOnHostCuda(model.get(), c, target, loss_name, fresh, &cuda_loss, &cuda_grad);
    EXPECT_TRUE(Close(cuda_loss, ref_loss, kFwdAtol, kFwdRtol, &g_fwd))
        << "CUDA plan loss " << cuda_loss << ", float64 reference " << ref_loss;
  }

  // gradients against central differences of the float64 reference
  Env e = env;
  for (const ParamSpec &p : c.params) {
    const std::vector<float> &g = s.grad[p.name];
    const std::vector<float> *gc = cuda ? &cuda_grad[p.name] : nullptr;
    if (gc) {
      EXPECT_EQ(gc->size(), p.data.size()) << "no CUDA gradient of " << p.name;
      if (gc->size() != p.data.size())
        gc = nullptr;
    }
    int bad = 0;
    for (size_t i = 0; i < p.data.size(); ++i) {
      double x0 = e[p.name].v[i];
      e[p.name].v[i] = x0 + kFdStep;
      double lp = loss_of(e);
      e[p.name].v[i] = x0 - kFdStep;
      double lm = loss_of(e);
      e[p.name].v[i] = x0;
      double fd = (lp - lm) / (2 * kFdStep);
      if (!Close(g[i], fd, kGradAtol, kGradRtol, &g_grad) && bad++ < 5)
        ADD_FAILURE() << "d loss / d " << p.name << Str(p.dims) << "[" << i << "] = " << g[i]
                      << ", float64 central difference " << fd;
      if (gc && !Close((*gc)[i], fd, kGradAtol, kGradRtol, &g_grad) && bad++ < 5)
        ADD_FAILURE() << "CUDA plan: d loss / d " << p.name << Str(p.dims) << "[" << i
                      << "] = " << (*gc)[i] << ", float64 central difference " << fd;
    }
  }
}

// ---- direct (forward-only) harness for the internal ops ---------------------------------

struct DirectCase {
  std::string label;
  std::vector<InputSpec> inputs;
  BuildFn build;
  T64 expect;
  gcc_dtype expect_dt = GCC_DT_FLOAT32;
  gcc_status run_status = GCC_OK; // expected status of the run (data errors)
  int threads = 1;                // the plan's CPU threads
  double abs_tol = 0;             // > 0: |got - want| <= abs_tol instead of the forward bound
};

void RunDirect(const DirectCase &c) {
  SCOPED_TRACE("case " + c.label);
  gcc_builder *b = gcc_builder_new("direct", 1);
  ASSERT_NE(b, nullptr);
  Ids ids;
  for (const InputSpec &in : c.inputs)
    ids[in.name] = gcc_build_input(b, in.name.c_str(), in.dt, static_cast<int>(in.dims.size()),
                                   in.dims.data());
  int out = c.build(b, ids);
  std::string out_name = out >= 0 ? b->g->values[out].name : "";
  gcc_build_output(b, out);
  gcc_graph *model_raw = nullptr;
  gcc_diag d = {};
  gcc_status st = gcc_builder_finish(b, &model_raw, &d);
  GraphPtr model(model_raw);
  ASSERT_EQ(st, GCC_OK) << d.msg;
  gcc_options o = {};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = 1;
  gcc_plan *plan_raw = nullptr;
  gcc_plan_config cfg{};
  cfg.threads = c.threads;
  st = gcc_plan_compile(model.get(), &o, &cfg, nullptr, nullptr, &plan_raw, &d);
  PlanPtr plan(plan_raw);
  ASSERT_EQ(st, GCC_OK) << d.msg;
  for (const InputSpec &in : c.inputs)
    ASSERT_EQ(gcc_plan_bind_input(plan.get(), in.name.c_str(), in.data(), &d), GCC_OK) << d.msg;
  st = gcc_plan_run(plan.get(), 0, &d);
  ASSERT_EQ(st, c.run_status) << d.msg;
  if (st != GCC_OK) {
    EXPECT_NE(std::strstr(d.msg, "outside"), nullptr) << d.msg;
    return;
  }
  if (c.abs_tol > 0) {
    const gcc_tensor *t = gcc_plan_tensor(plan.get(), out_name.c_str());
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->numel, Numel(c.expect.dims));
    int bad = 0;
    for (size_t i = 0; i < c.expect.v.size(); ++i) {
      double got = static_cast<const float *>(t->data)[i], err = std::fabs(got - c.expect.v[i]);
      g_direct.Add(err, c.abs_tol);
      if (!(err <= c.abs_tol) && bad++ < 5)
        ADD_FAILURE() << out_name << "[" << i << "] = " << got << ", float64 " << c.expect.v[i];
    }
    return;
  }
  ExpectTensor(gcc_plan_tensor(plan.get(), out_name.c_str()), c.expect, &g_direct, out_name,
               c.expect_dt);
}

// ---- Gemm ---------------------------------------------------------------------------

enum CMode { kNoC, kCN, kC1N, kCMN, kCM1, kC1, kCScalar, kCModes };
const char *const kCModeName[] = {"noC", "C[N]", "C[1,N]", "C[M,N]", "C[M,1]", "C[1]", "C[]"};

GradCase GemmCaseShaped(Rng &r, bool ta, bool tb, CMode cm, float alpha, float beta, int64_t M,
                        int64_t K, int64_t N) {
  GradCase c;
  c.label = std::string("Gemm transA=") + (ta ? "1" : "0") + " transB=" + (tb ? "1" : "0") + " " +
            kCModeName[cm] + " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta) +
            " M,K,N=" + std::to_string(M) + "," + std::to_string(K) + "," + std::to_string(N);
  Dims ad = ta ? Dims{K, M} : Dims{M, K}, bd = tb ? Dims{N, K} : Dims{K, N}, cd;
  switch (cm) {
  case kCN: cd = {N}; break;
  case kC1N: cd = {1, N}; break;
  case kCMN: cd = {M, N}; break;
  case kCM1: cd = {M, 1}; break;
  case kC1: cd = {1}; break;
  default: cd = {}; break;
  }
  c.params.push_back({"A", ad, r.F(Numel(ad))});
  c.params.push_back({"B", bd, r.F(Numel(bd))});
  bool has_c = cm != kNoC;
  if (has_c)
    c.params.push_back({"C", cd, r.F(Numel(cd))});
  c.build = [=](gcc_builder *b, const Ids &v) {
    std::vector<int> ins = {v.at("A"), v.at("B")};
    if (has_c)
      ins.push_back(v.at("C"));
    int y = Op(b, GCC_OP_GEMM, "gemm", ins);
    // defaults (alpha = beta = 1, no transpose) are left unset on purpose
    if (alpha != 1.0f)
      gcc_build_set_float(b, y, "alpha", alpha);
    if (beta != 1.0f)
      gcc_build_set_float(b, y, "beta", beta);
    if (ta)
      gcc_build_set_int(b, y, "transA", 1);
    if (tb)
      gcc_build_set_int(b, y, "transB", 1);
    return y;
  };
  c.ref = [=](const Env &e) {
    return RefGemm(e.at("A"), e.at("B"), has_c ? &e.at("C") : nullptr, alpha, beta, ta, tb);
  };
  c.bwd_ops = {GCC_OP_GEMM};
  // dC = beta sum_to(dY): a ReduceSumTo unless C already has Y's shape and beta = 1
  if (has_c && (cd != Dims{M, N} || beta != 1.0f))
    c.bwd_ops.push_back(GCC_OP_REDUCE_SUM_TO);
  return c;
}

GradCase GemmCase(Rng &r, bool ta, bool tb, CMode cm, float alpha, float beta) {
  int64_t M = r.I(1, 6), K = r.I(1, 7), N = r.I(1, 6);
  return GemmCaseShaped(r, ta, tb, cm, alpha, beta, M, K, N);
}

TEST(GemmGrad, AllTransposesAndBiasShapes) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int cm = 0; cm < kCModes; ++cm) {
          RunGradCase(GemmCase(r, ta, tb, static_cast<CMode>(cm), 1.0f, 1.0f), seed);
          RunGradCase(GemmCase(r, ta, tb, static_cast<CMode>(cm), 0.75f, -1.25f), seed);
        }
  }
}

// One output row (batch-1 inference) or one output column: the CPU GEMM runs
// these as sgemv, with op(A) or op(B) as the matrix; backward then has
// matrix-vector products and rank-1 updates. Every transpose and bias shape.
TEST(GemmGrad, MatrixVectorShapes) {
  const int64_t shapes[][3] = {{1, 5, 4}, {4, 5, 1}, {1, 3, 1}, {1, 1, 3}};
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (const auto &mkn : shapes)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (int cm = 0; cm < kCModes; ++cm) {
            RunGradCase(GemmCaseShaped(r, ta, tb, static_cast<CMode>(cm), 0.75f, -1.25f, mkn[0],
                                       mkn[1], mkn[2]),
                        seed);
          }
  }
}

// Large enough that the sgemv runs on two OpenBLAS threads (forward only:
// finite differences over 10^5 parameters would be slow). The operands are
// multiples of 1/8 in [-1, 1], so every float32 partial sum is exact and the
// result is checked to float rounding whatever the summation order.
TEST(GemmForward, MatrixVectorOnTwoThreads) {
  const int64_t shapes[][3] = {{1, 700, 300}, {300, 700, 1}};
  Rng r(42);
  auto eighths = [&r](int64_t n) {
    std::vector<float> v = r.F(n);
    for (float &x : v)
      x = std::round(x * 8.0f) / 8.0f;
    return v;
  };
  for (const auto &mkn : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t M = mkn[0], K = mkn[1], N = mkn[2];
        Dims ad = ta ? Dims{K, M} : Dims{M, K}, bd = tb ? Dims{N, K} : Dims{K, N};
        DirectCase c;
        c.label = "Gemm sgemv transA=" + std::to_string(ta) + " transB=" + std::to_string(tb) +
                  " M,K,N=" + std::to_string(M) + "," + std::to_string(K) + "," + std::to_string(N);
        c.threads = 2;
        c.inputs.push_back(FloatInput("A", ad, eighths(Numel(ad))));
        c.inputs.push_back(FloatInput("B", bd, eighths(Numel(bd))));
        c.inputs.push_back(FloatInput("C", {N}, r.F(N)));
        c.build = [=](gcc_builder *b, const Ids &v) {
          int y = Op(b, GCC_OP_GEMM, "gemm", {v.at("A"), v.at("B"), v.at("C")});
          gcc_build_set_float(b, y, "alpha", 0.5f);
          gcc_build_set_float(b, y, "beta", 2.0f);
          if (ta)
            gcc_build_set_int(b, y, "transA", 1);
          if (tb)
            gcc_build_set_int(b, y, "transB", 1);
          return y;
        };
        T64 A = FromFloats(ad, c.inputs[0].f), B = FromFloats(bd, c.inputs[1].f),
            C = FromFloats({N}, c.inputs[2].f);
        c.expect = RefGemm(A, B, &C, 0.5, 2.0, ta, tb);
        RunDirect(c);
      }
}

TEST(GemmGrad, LinearLayerWithInputActivations) {
  // nn.Linear: x is a graph input (no gradient wanted), W and b parameters
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t N = r.I(1, 6), in = r.I(1, 6), out = r.I(1, 6);
    GradCase c;
    c.label = "Linear " + std::to_string(N) + "x" + std::to_string(in) + "->" + std::to_string(out);
    c.inputs.push_back(FloatInput("x", {N, in}, r.F(N * in)));
    c.params.push_back({"W", {out, in}, r.F(out * in)});
    c.params.push_back({"bias", {out}, r.F(out)});
    c.build = [](gcc_builder *b, const Ids &v) {
      int y = Op(b, GCC_OP_GEMM, "fc", {v.at("x"), v.at("W"), v.at("bias")});
      gcc_build_set_int(b, y, "transB", 1);
      return y;
    };
    c.ref = [](const Env &e) {
      return RefGemm(e.at("x"), e.at("W"), &e.at("bias"), 1, 1, false, true);
    };
    c.bwd_ops = {GCC_OP_GEMM, GCC_OP_REDUCE_SUM_TO};
    RunGradCase(c, seed);
  }
}

TEST(GemmGrad, SameParameterAsBothOperands) {
  // Y = P P^T: the two contributions to dP must be summed
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t M = r.I(1, 5), K = r.I(1, 5);
    GradCase c;
    c.label = "Gemm(P, P, transB) " + Str({M, K});
    c.params.push_back({"P", {M, K}, r.F(M * K)});
    c.build = [](gcc_builder *b, const Ids &v) {
      int y = Op(b, GCC_OP_GEMM, "gemm", {v.at("P"), v.at("P")});
      gcc_build_set_int(b, y, "transB", 1);
      return y;
    };
    c.ref = [](const Env &e) { return RefGemm(e.at("P"), e.at("P"), nullptr, 1, 1, false, true); };
    c.bwd_ops = {GCC_OP_GEMM, GCC_OP_ADD};
    RunGradCase(c, seed);
  }
}

// ---- MatMul -------------------------------------------------------------------------

TEST(MatMulGrad, RandomShapes) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rep = 0; rep < 4; ++rep) {
      int64_t M = r.I(1, 6), K = r.I(1, 6), N = r.I(1, 6);
      GradCase c;
      c.label = "MatMul " + Str({M, K}) + " x " + Str({K, N});
      c.params.push_back({"A", {M, K}, r.F(M * K)});
      c.params.push_back({"B", {K, N}, r.F(K * N)});
      c.build = [](gcc_builder *b, const Ids &v) {
        return Op(b, GCC_OP_MATMUL, "mm", {v.at("A"), v.at("B")});
      };
      c.ref = [](const Env &e) {
        return RefGemm(e.at("A"), e.at("B"), nullptr, 1, 0, false, false);
      };
      c.bwd_ops = {GCC_OP_GEMM};
      RunGradCase(c, seed);
    }
  }
}

TEST(MatMulGrad, InputTimesParameterAndSquareOfParameter) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t M = r.I(1, 5), K = r.I(1, 5), N = r.I(1, 5);
    GradCase c;
    c.label = "MatMul(x, P)";
    c.inputs.push_back(FloatInput("x", {M, K}, r.F(M * K)));
    c.params.push_back({"P", {K, N}, r.F(K * N)});
    c.build = [](gcc_builder *b, const Ids &v) {
      return Op(b, GCC_OP_MATMUL, "mm", {v.at("x"), v.at("P")});
    };
    c.ref = [](const Env &e) { return RefGemm(e.at("x"), e.at("P"), nullptr, 1, 0, false, false); };
    RunGradCase(c, seed);

    GradCase sq;
    sq.label = "MatMul(P, P)";
    sq.params.push_back({"P", {K, K}, r.F(K * K)});
    sq.build = [](gcc_builder *b, const Ids &v) {
      return Op(b, GCC_OP_MATMUL, "mm", {v.at("P"), v.at("P")});
    };
    sq.ref = [](const Env &e) {
      return RefGemm(e.at("P"), e.at("P"), nullptr, 1, 0, false, false);
    };
    sq.bwd_ops = {GCC_OP_GEMM, GCC_OP_ADD};
    RunGradCase(sq, seed);
  }
}

// numpy.matmul of operands of at least 2 dims, batch dims broadcast.
T64 RefMatMulBatched(const T64 &A, const T64 &B) {
  size_t ra = A.dims.size(), rb = B.dims.size();
  int64_t M = A.dims[ra - 2], K = A.dims[ra - 1], N = B.dims[rb - 1];
  Dims ba(A.dims.begin(), A.dims.end() - 2), bb(B.dims.begin(), B.dims.end() - 2), bo;
  EXPECT_TRUE(BroadcastDims(ba, bb, &bo));
  Dims od = bo;
  od.push_back(M);
  od.push_back(N);
  T64 y = Zeros(od);
  for (int64_t p = 0; p < Numel(bo); ++p) {
    const double *a = &A.v[BroadcastIndex(ba, bo, p) * M * K];
    const double *b = &B.v[BroadcastIndex(bb, bo, p) * K * N];
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += a[i * K + k] * b[k * N + j];
        y.v[(p * M + i) * N + j] = acc;
      }
  }
  return y;
}

GradCase BatchedMatMulCase(const Dims &a, const Dims &b, Rng &r, bool a_is_input) {
  GradCase c;
  c.label = "MatMul " + Str(a) + " x " + Str(b);
  if (a_is_input)
    c.inputs.push_back(FloatInput("A", a, r.F(Numel(a))));
  else
    c.params.push_back({"A", a, r.F(Numel(a))});
  c.params.push_back({"B", b, r.F(Numel(b))});
  c.build = [](gcc_builder *bl, const Ids &v) {
    return Op(bl, GCC_OP_MATMUL, "mm", {v.at("A"), v.at("B")});
  };
  c.ref = [](const Env &e) { return RefMatMulBatched(e.at("A"), e.at("B")); };
  c.cuda = true;
  return c;
}

// The Linear layer of a Transformer export, (B,T,C) x (C,N): the batch dims
// fold into the GEMM rows (Gemms only, no ReduceSumTo); then batch dims on
// B or on both, broadcast, summed back by ReduceSumTo.
TEST(MatMulGrad, BatchedAndBroadcastOperands) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t Bt = r.I(1, 3), T = r.I(1, 4), K = r.I(1, 4), N = r.I(1, 4), M = r.I(1, 4);
    for (bool a_is_input : {false, true}) {
      GradCase lin = BatchedMatMulCase({Bt, T, K}, {K, N}, r, a_is_input);
      lin.bwd_ops = {GCC_OP_GEMM, GCC_OP_RESHAPE};
      RunGradCase(lin, seed);
    }
    GradCase lin4 = BatchedMatMulCase({2, Bt, T, K}, {K, N}, r, false);
    lin4.bwd_ops = {GCC_OP_GEMM, GCC_OP_RESHAPE};
    RunGradCase(lin4, seed);
    GradCase bat = BatchedMatMulCase({Bt, M, K}, {Bt, K, N}, r, false);
    bat.bwd_ops = {GCC_OP_MATMUL, GCC_OP_TRANSPOSE};
    RunGradCase(bat, seed);
    GradCase left = BatchedMatMulCase({M, K}, {3, K, N}, r, false);
    left.bwd_ops = {GCC_OP_MATMUL, GCC_OP_REDUCE_SUM_TO};
    RunGradCase(left, seed);
    GradCase bc = BatchedMatMulCase({2, 1, M, K}, {3, K, N}, r, false);
    bc.bwd_ops = {GCC_OP_MATMUL, GCC_OP_REDUCE_SUM_TO};
    RunGradCase(bc, seed);
  }
}

// ---- Add ----------------------------------------------------------------------------

GradCase AddCase(const std::string &what, const Dims &a, const Dims &b, Rng &r,
                 bool a_is_input = false) {
  GradCase c;
  c.label = "Add " + what + " " + Str(a) + " + " + Str(b);
  if (a_is_input)
    c.inputs.push_back(FloatInput("A", a, r.F(Numel(a))));
  else
    c.params.push_back({"A", a, r.F(Numel(a))});
  c.params.push_back({"B", b, r.F(Numel(b))});
  c.build = [](gcc_builder *bl, const Ids &v) {
    return Op(bl, GCC_OP_ADD, "add", {v.at("A"), v.at("B")});
  };
  c.ref = [](const Env &e) { return RefAdd(e.at("A"), e.at("B")); };
  Dims od;
  BroadcastDims(a, b, &od);
  if ((!a_is_input && a != od) || b != od)
    c.bwd_ops = {GCC_OP_REDUCE_SUM_TO};
  return c;
}

TEST(AddGrad, Broadcasting) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t N = r.I(2, 5), C = r.I(2, 5), A = r.I(2, 4), B = r.I(2, 4);
    RunGradCase(AddCase("[N,C]+[C]", {N, C}, {C}, r), seed);
    RunGradCase(AddCase("[C]+[N,C]", {C}, {N, C}, r), seed);
    RunGradCase(AddCase("[N,1]+[1,C]", {N, 1}, {1, C}, r), seed);
    RunGradCase(AddCase("[1]+[N,C]", {1}, {N, C}, r), seed);
    RunGradCase(AddCase("[N,C]+[1]", {N, C}, {1}, r), seed);
    RunGradCase(AddCase("[]+[N,C]", {}, {N, C}, r), seed);
    RunGradCase(AddCase("[A,1,C]+[B,1]", {A, 1, C}, {B, 1}, r), seed);
    RunGradCase(AddCase("[B,1]+[A,1,C]", {B, 1}, {A, 1, C}, r), seed);
    RunGradCase(AddCase("[N,C]+[N,1]", {N, C}, {N, 1}, r), seed);
    RunGradCase(AddCase("[N,C]+[1,C]", {N, C}, {1, C}, r), seed);
    RunGradCase(AddCase("[C,C]+[C,1]", {C, C}, {C, 1}, r), seed); // column vector == last dim
    RunGradCase(AddCase("[A,B,C]+[A,1,C]", {A, B, C}, {A, 1, C}, r), seed);
    RunGradCase(AddCase("[N,1]+[1]", {N, 1}, {1}, r), seed);
    RunGradCase(AddCase("[N,C]+[N,C]", {N, C}, {N, C}, r, /*a_is_input=*/true), seed);
    RunGradCase(AddCase("input[N,C]+[C]", {N, C}, {C}, r, /*a_is_input=*/true), seed);
  }
}

TEST(AddGrad, SameParameterTwice) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    Dims d = r.RandDims(static_cast<int>(r.I(1, 3)), 1, 4);
    GradCase c;
    c.label = "Add(P, P) " + Str(d);
    c.params.push_back({"P", d, r.F(Numel(d))});
    c.build = [](gcc_builder *b, const Ids &v) {
      return Op(b, GCC_OP_ADD, "add", {v.at("P"), v.at("P")});
    };
    c.ref = [](const Env &e) { return RefAdd(e.at("P"), e.at("P")); };
    c.bwd_ops = {GCC_OP_ADD};
    RunGradCase(c, seed);
  }
}

TEST(AddGrad, TwoParametersOfTheSameShape) {
  // Both gradients are the same value (dA = dB = dY): each parameter must
  // still get it in its own gradient buffer.
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    Dims d = r.RandDims(static_cast<int>(r.I(1, 3)), 1, 4);
    RunGradCase(AddCase("same shape", d, d, r), seed);
  }
}

// ---- Relu, Identity -------------------------------------------------------------------

TEST(ReluGrad, RandomShapesAwayFromTheKink) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 0; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      GradCase c;
      c.label = "Relu " + Str(d);
      // |x| >= 0.05 >> h: the finite difference never straddles 0
      c.params.push_back({"X", d, r.F(Numel(d), -1, 1, 0.05)});
      c.build = [](gcc_builder *b, const Ids &v) { return gcc_build_relu(b, "relu", v.at("X")); };
      c.ref = [](const Env &e) { return RefRelu(e.at("X")); };
      c.bwd_ops = {GCC_OP_RELU_GRAD};
      RunGradCase(c, seed);
    }
  }
}

TEST(IdentityGrad, RandomShapes) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 0; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      GradCase c;
      c.label = "Identity " + Str(d);
      c.params.push_back({"X", d, r.F(Numel(d))});
      c.build = [](gcc_builder *b, const Ids &v) {
        return Op(b, GCC_OP_IDENTITY, "id", {v.at("X")});
      };
      c.ref = [](const Env &e) { return e.at("X"); };
      RunGradCase(c, seed);
    }
  }
}

// ---- Softmax ---------------------------------------------------------------------------

// torch.softmax along `axis` in float64 (max subtracted first).
T64 RefSoftmax(const T64 &x, int64_t axis) {
  const int nd = static_cast<int>(x.dims.size());
  if (axis < 0)
    axis += nd;
  int64_t outer = 1, inner = 1, len = x.dims[axis];
  for (int i = 0; i < axis; ++i)
    outer *= x.dims[i];
  for (int i = static_cast<int>(axis) + 1; i < nd; ++i)
    inner *= x.dims[i];
  T64 y = x;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t base = o * len * inner + i;
      double mx = x.v[base];
      for (int64_t j = 1; j < len; ++j)
        mx = std::max(mx, x.v[base + j * inner]);
      double se = 0;
      for (int64_t j = 0; j < len; ++j)
        se += std::exp(x.v[base + j * inner] - mx);
      for (int64_t j = 0; j < len; ++j)
        y.v[base + j * inner] = std::exp(x.v[base + j * inner] - mx) / se;
    }
  return y;
}

TEST(SoftmaxGrad, EveryAxisOfRandomShapes) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      for (int64_t axis = -rank; axis < rank; ++axis) {
        GradCase c;
        c.label = "Softmax " + Str(d) + " axis=" + std::to_string(axis);
        c.params.push_back({"X", d, r.F(Numel(d), -3, 3)});
        c.build = [axis](gcc_builder *b, const Ids &v) {
          int y = Op(b, GCC_OP_SOFTMAX, "softmax", {v.at("X")});
          gcc_build_set_int(b, y, "axis", axis);
          return y;
        };
        c.ref = [axis](const Env &e) { return RefSoftmax(e.at("X"), axis); };
        c.bwd_ops = {GCC_OP_SOFTMAX_GRAD};
        // SoftmaxGrad's CUDA kernel (a block per line; inner stride when axis < rank - 1)
        c.cuda = seed == kSeeds[0] && rank == 3 && axis >= 0;
        RunGradCase(c, seed);
      }
    }
  }
}

TEST(InternalOps, SoftmaxOfHugeLogitsDoesNotOverflow) {
  // exp(1000) overflows float and double: the max must be subtracted first
  Dims d = {2, 3};
  std::vector<float> x = {1000.0f, 999.0f, 998.0f, -1000.0f, -1000.0f, -1000.0f};
  DirectCase c;
  c.label = "Softmax of huge logits";
  c.inputs = {FloatInput("X", d, x)};
  c.build = [](gcc_builder *b, const Ids &v) {
    return Op(b, GCC_OP_SOFTMAX, "softmax", {v.at("X")});
  };
  c.expect = RefSoftmax(FromFloats(d, x), -1);
  EXPECT_NEAR(c.expect.v[0], 0.66524096, 1e-7);
  EXPECT_NEAR(c.expect.v[3], 1.0 / 3.0, 1e-12);
  RunDirect(c);
}

TEST(InternalOps, SoftmaxGradMatchesTheJacobianProduct) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    Dims d = {r.I(1, 4), r.I(2, 6)};
    for (int64_t axis : {0, 1, -1}) {
      std::vector<float> dy = r.F(Numel(d)), x = r.F(Numel(d), -2, 2);
      T64 y = RefSoftmax(FromFloats(d, x), axis);
      std::vector<float> yf(y.v.begin(), y.v.end());
      DirectCase c;
      c.label = "SoftmaxGrad " + Str(d) + " axis=" + std::to_string(axis);
      c.inputs = {FloatInput("dY", d, dy), FloatInput("Y", d, yf)};
      c.build = [axis](gcc_builder *b, const Ids &v) {
        int o = Op(b, GCC_OP_SOFTMAX_GRAD, "softmax_grad", {v.at("dY"), v.at("Y")});
        gcc_build_set_int(b, o, "axis", axis);
        return o;
      };
      // dX_i = sum_j J_ji dY_j with J_ji = Y_j (delta_ij - Y_i), over each slice along axis
      c.expect = Zeros(d);
      const int64_t rows = d[0], cols = d[1];
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          double acc = 0;
          if (axis == 0) {
            for (int64_t k = 0; k < rows; ++k)
              acc += (double)dy[k * cols + j] * (double)yf[k * cols + j] *
                     ((k == i ? 1.0 : 0.0) - (double)yf[i * cols + j]);
          } else {
            for (int64_t k = 0; k < cols; ++k)
              acc += (double)dy[i * cols + k] * (double)yf[i * cols + k] *
                     ((k == j ? 1.0 : 0.0) - (double)yf[i * cols + j]);
          }
          c.expect.v[i * cols + j] = acc;
        }
      RunDirect(c);
    }
  }
}

// ---- Reshape, Flatten -----------------------------------------------------------------

TEST(ReshapeGrad, ZeroAndMinusOneEntries) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t a = r.I(1, 4), b = r.I(1, 4), c3 = r.I(1, 4);
    Dims in = {a, b, c3};
    const std::vector<Dims> specs = {
        {-1}, {0, -1}, {-1, c3}, {0, 0, -1}, {0, 0, 0, -1}, {1, -1, 0}, {a * b, c3}, {c3, -1, 1},
    };
    for (const Dims &spec : specs) {
      Dims od = ReshapeDims(in, spec);
      GradCase c;
      c.label = "Reshape " + Str(in) + " shape=" + Str(spec) + " -> " + Str(od);
      c.params.push_back({"X", in, r.F(Numel(in))});
      c.build = [spec](gcc_builder *bl, const Ids &v) {
        int y = Op(bl, GCC_OP_RESHAPE, "reshape", {v.at("X")});
        SetInts(bl, y, "shape", spec);
        return y;
      };
      c.ref = [od](const Env &e) {
        T64 y = e.at("X");
        y.dims = od;
        return y;
      };
      c.bwd_ops = {GCC_OP_RESHAPE};
      RunGradCase(c, seed);
    }
    // a view feeding a computation: Reshape then a matmul with a parameter
    GradCase c;
    c.label = "MatMul(Reshape(X, [0,-1]), W)";
    c.params.push_back({"X", in, r.F(Numel(in))});
    c.params.push_back({"W", {b * c3, 2}, r.F(b * c3 * 2)});
    c.build = [](gcc_builder *bl, const Ids &v) {
      int y = Op(bl, GCC_OP_RESHAPE, "reshape", {v.at("X")});
      SetInts(bl, y, "shape", {0, -1});
      return Op(bl, GCC_OP_MATMUL, "mm", {y, v.at("W")});
    };
    c.ref = [a, b, c3](const Env &e) {
      T64 x = e.at("X");
      x.dims = {a, b * c3};
      return RefGemm(x, e.at("W"), nullptr, 1, 0, false, false);
    };
    c.bwd_ops = {GCC_OP_RESHAPE, GCC_OP_GEMM};
    RunGradCase(c, seed);
  }
}

TEST(FlattenGrad, EveryAxis) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 0; rank <= 4; ++rank) {
      Dims in = r.RandDims(rank, 1, 4);
      for (int64_t axis = -rank; axis <= rank; ++axis) {
        if (axis < 0 && seed != 1)
          continue; // negative axes: one seed is enough
        Dims od = FlattenDims(in, axis);
        GradCase c;
        c.label = "Flatten " + Str(in) + " axis=" + std::to_string(axis);
        c.params.push_back({"X", in, r.F(Numel(in))});
        c.build = [axis](gcc_builder *b, const Ids &v) {
          return gcc_build_flatten(b, "flatten", v.at("X"), axis);
        };
        c.ref = [od](const Env &e) {
          T64 y = e.at("X");
          y.dims = od;
          return y;
        };
        c.bwd_ops = {GCC_OP_RESHAPE};
        RunGradCase(c, seed);
      }
    }
  }
}

// ---- losses ---------------------------------------------------------------------------

TEST(MeanSquaredErrorGrad, MeanAndSum) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 0; rank <= 3; ++rank)
      for (int mean = 0; mean < 2; ++mean) {
        Dims d = r.RandDims(rank, 1, 5);
        GradCase c;
        c.label = std::string("MeanSquaredError ") + (mean ? "mean " : "sum ") + Str(d);
        c.params.push_back({"P", d, r.F(Numel(d))});
        c.inputs.push_back(FloatInput("T", d, r.F(Numel(d))));
        c.is_loss = true;
        c.build = [mean](gcc_builder *b, const Ids &v) {
          int l = gcc_build_mse(b, "mse", v.at("P"), v.at("T"));
          if (!mean)
            SetString(b, l, "reduction", "sum");
          return l;
        };
        c.ref = [mean](const Env &e) {
          T64 l = Zeros({});
          l.v[0] = RefMse(e.at("P"), e.at("T"), mean);
          return l;
        };
        c.bwd_ops = {GCC_OP_MEAN_SQUARED_ERROR_GRAD};
        RunGradCase(c, seed);
      }
  }
}

struct SceOpts {
  bool weighted = false, mean = true, int32 = false, custom_ignore = false;
  double offset = 0; // added to every logit (numerical stability)
};

GradCase SceCase(Rng &r, const SceOpts &o) {
  int64_t N = r.I(2, 6), C = r.I(2, 6);
  int64_t ignore = o.custom_ignore ? r.I(0, C - 1) : -100;
  std::vector<int64_t> labels(static_cast<size_t>(N));
  for (int64_t &y : labels)
    y = r.I(0, C - 1);
  // ignored rows: the default -100, or labels equal to a custom in-range index
  for (size_t i = 1; i < labels.size(); i += 2)
    if (r.U(0, 1) < 0.6)
      labels[i] = o.custom_ignore ? ignore : -100;
  if (o.custom_ignore && labels[0] == ignore)
    labels[0] = (ignore + 1) % C; // one row counts
  GradCase c;
  c.label = std::string("SoftmaxCrossEntropy ") + (o.mean ? "mean" : "sum") +
            (o.weighted ? " weighted" : "") + (o.int32 ? " int32" : " int64") +
            " ignore_index=" + std::to_string(ignore) + " offset=" + std::to_string(o.offset) +
            " " + Str({N, C});
  std::vector<float> x = r.F(N * C, -2, 2);
  for (float &v : x)
    v = static_cast<float>(v + o.offset);
  c.params.push_back({"X", {N, C}, x});
  c.inputs.push_back(LabelInput("labels", o.int32 ? GCC_DT_INT32 : GCC_DT_INT64, labels));
  if (o.weighted)
    c.inputs.push_back(FloatInput("w", {C}, r.F(C, 0.2, 2.0)));
  c.is_loss = true;
  c.build = [o, ignore](gcc_builder *b, const Ids &v) {
    int l =
        gcc_build_cross_entropy(b, "sce", v.at("X"), v.at("labels"), o.weighted ? v.at("w") : -1);
    if (!o.mean)
      SetString(b, l, "reduction", "sum");
    if (o.custom_ignore)
      gcc_build_set_int(b, l, "ignore_index", ignore);
    return l;
  };
  c.ref = [o, labels, ignore](const Env &e) {
    T64 l = Zeros({});
    l.v[0] = RefSce(e.at("X"), labels, o.weighted ? &e.at("w") : nullptr, ignore, o.mean);
    return l;
  };
  c.bwd_ops = {GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD};
  return c;
}

TEST(SoftmaxCrossEntropyGrad, WeightsIgnoreIndexReductionsLabelTypes) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int weighted = 0; weighted < 2; ++weighted)
      for (int mean = 0; mean < 2; ++mean)
        for (int int32 = 0; int32 < 2; ++int32)
          for (int custom = 0; custom < 2; ++custom) {
            SceOpts o;
            o.weighted = weighted;
            o.mean = mean;
            o.int32 = int32;
            o.custom_ignore = custom;
            RunGradCase(SceCase(r, o), seed);
          }
  }
}

TEST(SoftmaxCrossEntropyGrad, LargeLogitsAreStable) {
  // exp(1000) overflows even float64: the max must be subtracted
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    SceOpts o;
    o.offset = 1000;
    o.weighted = seed % 2 == 0;
    RunGradCase(SceCase(r, o), seed);
  }
}

TEST(CompositeGrad, SmallNetworkWithSharedParameter) {
  // Gemm -> Add (reusing the Gemm's bias) -> Reshape -> MatMul -> cross-entropy:
  // the chain rule across ops and the accumulation of a parameter used twice.
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t N = r.I(2, 5), F = r.I(2, 4), H = r.I(2, 4), C = r.I(2, 4);
    std::vector<int64_t> labels(static_cast<size_t>(N));
    for (int64_t &y : labels)
      y = r.I(0, C - 1);
    GradCase c;
    c.label = "composite";
    c.inputs.push_back(FloatInput("x", {N, F}, r.F(N * F)));
    c.inputs.push_back(LabelInput("labels", GCC_DT_INT64, labels));
    c.params.push_back({"W1", {H, F}, r.F(H * F)});
    c.params.push_back({"b1", {H}, r.F(H)});
    c.params.push_back({"W2", {H, C}, r.F(H * C)});
    c.is_loss = true;
    c.build = [](gcc_builder *b, const Ids &v) {
      int h = Op(b, GCC_OP_GEMM, "fc1", {v.at("x"), v.at("W1"), v.at("b1")});
      gcc_build_set_int(b, h, "transB", 1);
      gcc_build_set_float(b, h, "alpha", 0.5f);
      int h2 = Op(b, GCC_OP_ADD, "add", {h, v.at("b1")});
      int h3 = Op(b, GCC_OP_RESHAPE, "reshape", {h2});
      SetInts(b, h3, "shape", {0, -1});
      int logits = Op(b, GCC_OP_MATMUL, "fc2", {h3, v.at("W2")});
      return gcc_build_cross_entropy(b, "sce", logits, v.at("labels"), -1);
    };
    c.ref = [labels](const Env &e) {
      T64 h = RefGemm(e.at("x"), e.at("W1"), &e.at("b1"), 0.5, 1, false, true);
      T64 h2 = RefAdd(h, e.at("b1"));
      T64 logits = RefGemm(h2, e.at("W2"), nullptr, 1, 0, false, false);
      T64 l = Zeros({});
      l.v[0] = RefSce(logits, labels, nullptr, -100, true);
      return l;
    };
    c.bwd_ops = {GCC_OP_GEMM, GCC_OP_ADD, GCC_OP_REDUCE_SUM_TO, GCC_OP_RESHAPE,
                 GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD};
    RunGradCase(c, seed);
  }
}

// ---- internal gradient ops, directly --------------------------------------------------

TEST(InternalOps, ReluGradMatchesThresholdBackward) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 0; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      int64_t n = Numel(d);
      std::vector<float> dy = r.F(n), y = r.F(n);
      for (int64_t i = 0; i < n; i += 3)
        y[i] = 0.0f; // exactly 0: no gradient (PyTorch)
      DirectCase c;
      c.label = "ReluGrad " + Str(d);
      c.inputs = {FloatInput("dY", d, dy), FloatInput("Y", d, y)};
      c.build = [](gcc_builder *b, const Ids &v) {
        return Op(b, GCC_OP_RELU_GRAD, "relu_grad", {v.at("dY"), v.at("Y")});
      };
      c.expect = Zeros(d);
      for (int64_t i = 0; i < n; ++i)
        c.expect.v[i] = y[i] > 0 ? dy[i] : 0.0;
      RunDirect(c);
    }
  }
}

// ReduceSumTo's own gradient (an imported ReduceSum / ReduceMean trained:
// dX = scale * dY expanded back to X's shape), over the target shapes of
// InternalOps.ReduceSumToWithScale and scales 1 and 1 / count; the first
// seed runs two of them through the host-emulated CUDA plan.
TEST(ReduceSumToGrad, EveryTargetShapeAndScale) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t A = r.I(2, 4), B = r.I(2, 4), C = r.I(2, 4), N = r.I(2, 5);
    const std::vector<std::pair<Dims, Dims>> pairs = {
        {{N, C}, {C}},    {{N, C}, {1, C}},       {{N, C}, {N, 1}},       {{N, C}, {}},
        {{N, C}, {N, C}}, {{A, B, C}, {A, 1, C}}, {{A, B, C}, {1, 1, 1}}, {{A, B, C}, {B, 1}},
    };
    for (size_t k = 0; k < pairs.size(); ++k)
      for (float scale : {1.0f, 0.25f}) {
        const Dims xd = pairs[k].first, td = pairs[k].second;
        GradCase c;
        c.label = "ReduceSumTo " + Str(xd) + " -> " + Str(td) + " scale " + std::to_string(scale);
        c.params.push_back({"X", xd, r.F(Numel(xd))});
        c.build = [td, scale](gcc_builder *b, const Ids &v) {
          int y = Op(b, GCC_OP_REDUCE_SUM_TO, "sum_to", {v.at("X")});
          SetInts(b, y, "shape", td);
          if (scale != 1.0f)
            gcc_build_set_float(b, y, "scale", scale);
          return y;
        };
        c.ref = [td, scale](const Env &e) { return RefSumTo(e.at("X"), td, scale); };
        c.bwd_ops = {GCC_OP_EXPAND};
        c.cuda = seed == kSeeds[0] && (k == 2 || k == 5) && scale != 1.0f;
        RunGradCase(c, seed);
      }
  }
}

TEST(InternalOps, ReduceSumToWithScale) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t A = r.I(2, 4), B = r.I(2, 4), C = r.I(2, 4), N = r.I(2, 5);
    const std::vector<std::pair<Dims, Dims>> pairs = {
        {{N, C}, {C}},    {{N, C}, {1, C}},       {{N, C}, {N, 1}},
        {{N, C}, {1}},    {{N, C}, {}},           {{N, C}, {N, C}},
        {{N, 1}, {1}},    {{A, B, C}, {B, 1}},    {{A, B, C}, {A, 1, C}},
        {{A, B, C}, {C}}, {{A, B, C}, {1, 1, 1}}, {{C, C}, {C, 1}},
        {{N}, {}},
    };
    for (const auto &pc : pairs)
      for (float scale : {1.0f, -0.5f, 3.0f}) {
        const Dims &xd = pc.first, &td = pc.second;
        std::vector<float> x = r.F(Numel(xd));
        DirectCase c;
        c.label = "ReduceSumTo " + Str(xd) + " -> " + Str(td) + " scale=" + std::to_string(scale);
        c.inputs = {FloatInput("X", xd, x)};
        c.build = [td, scale](gcc_builder *b, const Ids &v) {
          int y = Op(b, GCC_OP_REDUCE_SUM_TO, "sum_to", {v.at("X")});
          SetInts(b, y, "shape", td);
          if (scale != 1.0f)
            gcc_build_set_float(b, y, "scale", scale);
          return y;
        };
        c.expect = RefSumTo(FromFloats(xd, x), td, scale);
        RunDirect(c);
      }
  }
}

TEST(InternalOps, SoftmaxCrossEntropyGradMatchesFormula) {
  // dlogits[i, j] = dloss * w[y_i] / D * (softmax(x_i)[j] - [j == y_i]), 0 on
  // ignored rows; D = sum of w[y_i] over kept rows (mean) or 1 (sum).
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int variant = 0; variant < 8; ++variant) {
      bool weighted = variant & 1, mean = variant & 2, int32 = variant & 4;
      int64_t N = r.I(2, 6), C = r.I(2, 6);
      std::vector<int64_t> labels(static_cast<size_t>(N));
      for (int64_t &y : labels)
        y = r.I(0, C - 1);
      labels[1] = -100;
      std::vector<float> x = r.F(N * C, -3, 3), w = r.F(C, 0.2, 2.0);
      float dl = static_cast<float>(r.U(0.25, 2.0));
      DirectCase c;
      c.label = std::string("SoftmaxCrossEntropyGrad") + (weighted ? " weighted" : "") +
                (mean ? " mean" : " sum") + (int32 ? " int32" : " int64");
      c.inputs = {FloatInput("dl", {}, {dl}), FloatInput("X", {N, C}, x),
                  LabelInput("labels", int32 ? GCC_DT_INT32 : GCC_DT_INT64, labels)};
      if (weighted)
        c.inputs.push_back(FloatInput("w", {C}, w));
      c.build = [weighted, mean](gcc_builder *b, const Ids &v) {
        std::vector<int> ins = {v.at("dl"), v.at("X"), v.at("labels")};
        if (weighted)
          ins.push_back(v.at("w"));
        int y = Op(b, GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD, "sce_grad", ins);
        if (!mean)
          SetString(b, y, "reduction", "sum");
        return y;
      };
      c.expect = Zeros({N, C});
      double D = 0;
      for (int64_t i = 0; i < N; ++i)
        if (labels[i] != -100)
          D += weighted ? w[labels[i]] : 1.0;
      if (!mean)
        D = 1;
      for (int64_t i = 0; i < N; ++i) {
        if (labels[i] == -100)
          continue;
        std::vector<double> row(x.begin() + i * C, x.begin() + (i + 1) * C);
        std::vector<double> ls = LogSoftmax(row.data(), C);
        double s = dl * (weighted ? w[labels[i]] : 1.0) / D;
        for (int64_t j = 0; j < C; ++j)
          c.expect.v[i * C + j] = s * (std::exp(ls[j]) - (j == labels[i] ? 1.0 : 0.0));
      }
      RunDirect(c);
    }
  }
}

TEST(InternalOps, MeanSquaredErrorGradMatchesFormula) {
  // dpred = dloss * 2 (p - t) / n (mean) or dloss * 2 (p - t) (sum)
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 0; rank <= 3; ++rank)
      for (int mean = 0; mean < 2; ++mean) {
        Dims d = r.RandDims(rank, 1, 5);
        int64_t n = Numel(d);
        std::vector<float> p = r.F(n), t = r.F(n);
        float dl = static_cast<float>(r.U(0.25, 2.0));
        DirectCase c;
        c.label = std::string("MeanSquaredErrorGrad ") + (mean ? "mean " : "sum ") + Str(d);
        c.inputs = {FloatInput("dl", {}, {dl}), FloatInput("P", d, p), FloatInput("T", d, t)};
        c.build = [mean](gcc_builder *b, const Ids &v) {
          int y =
              Op(b, GCC_OP_MEAN_SQUARED_ERROR_GRAD, "mse_grad", {v.at("dl"), v.at("P"), v.at("T")});
          if (!mean)
            SetString(b, y, "reduction", "sum");
          return y;
        };
        c.expect = Zeros(d);
        for (int64_t i = 0; i < n; ++i)
          c.expect.v[i] = dl * 2.0 * (static_cast<double>(p[i]) - t[i]) / (mean ? n : 1);
        RunDirect(c);
      }
  }
}

TEST(InternalOps, SoftmaxCrossEntropyEdgeCases) {
  // every row ignored: mean is 0/0 = NaN (PyTorch), sum is 0
  for (int mean = 0; mean < 2; ++mean) {
    DirectCase c;
    c.label = std::string("SoftmaxCrossEntropy all ignored ") + (mean ? "mean" : "sum");
    c.inputs = {FloatInput("X", {2, 3}, {0.1f, 0.2f, 0.3f, -1, 0, 1}),
                LabelInput("labels", GCC_DT_INT64, {-100, -100})};
    c.build = [mean](gcc_builder *b, const Ids &v) {
      int l = gcc_build_cross_entropy(b, "sce", v.at("X"), v.at("labels"), -1);
      if (!mean)
        SetString(b, l, "reduction", "sum");
      return l;
    };
    c.expect = Zeros({});
    c.expect.v[0] = mean ? std::numeric_limits<double>::quiet_NaN() : 0.0;
    RunDirect(c);
  }
  // a label outside [0, C) is a data error naming the node
  for (int64_t bad : {3, -1}) {
    DirectCase c;
    c.label = "SoftmaxCrossEntropy label " + std::to_string(bad);
    c.inputs = {FloatInput("X", {2, 3}, {0.1f, 0.2f, 0.3f, -1, 0, 1}),
                LabelInput("labels", GCC_DT_INT32, {0, bad})};
    c.build = [](gcc_builder *b, const Ids &v) {
      return gcc_build_cross_entropy(b, "sce", v.at("X"), v.at("labels"), -1);
    };
    c.run_status = GCC_ERR_INVALID_ARGUMENT;
    RunDirect(c);
  }
}

TEST(InternalOps, CopyIsAnExactCopyOfAnyDtype) {
  // Copy is made by copy insertion between devices; on the CPU backend it
  // runs as a plain copy (and is accepted in files like every op)
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 0; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      int64_t n = Numel(d);
      for (gcc_dtype dt : {GCC_DT_FLOAT32, GCC_DT_INT64, GCC_DT_INT32}) {
        DirectCase c;
        c.label = std::string("Copy ") + gcc_dtype_name(dt) + " " + Str(d);
        if (dt == GCC_DT_FLOAT32) {
          std::vector<float> x = r.F(n, -1e3, 1e3);
          c.inputs = {FloatInput("X", d, x)};
          c.expect = FromFloats(d, x);
        } else {
          std::vector<int64_t> x(static_cast<size_t>(n));
          for (int64_t &v : x)
            v = r.I(-100000, 100000);
          InputSpec in = LabelInput("X", dt, x);
          in.dims = d;
          c.inputs = {in};
          c.expect = Zeros(d);
          for (int64_t i = 0; i < n; ++i)
            c.expect.v[i] = static_cast<double>(x[i]);
        }
        c.expect_dt = dt;
        c.build = [](gcc_builder *b, const Ids &v) {
          return Op(b, GCC_OP_COPY, "copy", {v.at("X")});
        };
        RunDirect(c);
      }
    }
  }
}

// ---- optimizers, through a session -----------------------------------------------------

// float64 torch.optim.SGD / torch.optim.Adam (1.13, single-tensor path) on one
// parameter tensor; hyper-parameters are the float32 values the library uses.
struct RefOptimizer {
  gcc_optimizer o;
  std::vector<double> buf, m, v;
  bool has_buf = false;
  int64_t step = 0;

  void Step(std::vector<double> *p, const std::vector<double> &grad) {
    const double lr = o.lr, wd = o.weight_decay;
    step++;
    if (buf.empty()) {
      buf.assign(p->size(), 0.0);
      m.assign(p->size(), 0.0);
      v.assign(p->size(), 0.0);
    }
    if (o.kind == GCC_OPT_SGD) {
      const double mom = o.momentum, damp = o.dampening;
      for (size_t i = 0; i < p->size(); ++i) {
        double d = grad[i];
        if (wd != 0)
          d += wd * (*p)[i];
        if (mom != 0) {
          buf[i] = has_buf ? mom * buf[i] + (1 - damp) * d : d; // first step: clone(d_p)
          d = o.nesterov ? d + mom * buf[i] : buf[i];
        }
        (*p)[i] -= lr * d;
      }
      has_buf = true;
    } else {
      const double b1 = o.beta1, b2 = o.beta2, eps = o.eps;
      const double bc1 = 1 - std::pow(b1, static_cast<double>(step));
      const double bc2 = 1 - std::pow(b2, static_cast<double>(step));
      for (size_t i = 0; i < p->size(); ++i) {
        double g = grad[i];
        if (wd != 0)
          g += wd * (*p)[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
        (*p)[i] -= lr / bc1 * m[i] / denom;
      }
    }
  }
};

gcc_optimizer Sgd(float lr, float mom, float damp, float wd, bool nesterov) {
  gcc_optimizer o = {};
  o.kind = GCC_OPT_SGD;
  o.lr = lr;
  o.momentum = mom;
  o.dampening = damp;
  o.weight_decay = wd;
  o.nesterov = nesterov;
  return o;
}

gcc_optimizer Adam(float lr, float b1, float b2, float eps, float wd) {
  gcc_optimizer o = {};
  o.kind = GCC_OPT_ADAM;
  o.lr = lr;
  o.beta1 = b1;
  o.beta2 = b2;
  o.eps = eps;
  o.weight_decay = wd;
  return o;
}

// Trains nn.Linear(In, Out) + MSELoss(mean) for `steps` steps on random
// batches whose size alternates (5, 3, 5, ...: two plans share the
// persistent state), checking after every step the loss and the gradients
// against float64, and both parameters against the float64 optimizer fed
// with the library's gradients.
void RunOptimizer(const std::string &label, const gcc_optimizer &opt, int steps, uint64_t seed) {
  SCOPED_TRACE(label + ", seed " + std::to_string(seed));
  const int64_t In = 4, Out = 3;
  gcc_builder *b = gcc_builder_new("optimizer", seed);
  ASSERT_NE(b, nullptr);
  int64_t xd[2] = {GCC_BATCH_DIM, In}, yd[2] = {GCC_BATCH_DIM, Out};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "y", GCC_DT_FLOAT32, 2, yd);
  int pred = gcc_build_linear(b, "fc", x, In, Out);
  int loss = gcc_build_mse(b, "loss", pred, y);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts = {};
  ts.loss = "loss";
  ts.prediction = "fc.out";
  ts.input = "x";
  ts.target = "y";
  ts.opt = opt;
  ts.batch_size = 5;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *model_raw = nullptr;
  gcc_diag d = {};
  gcc_status st = gcc_builder_finish(b, &model_raw, &d);
  GraphPtr model(model_raw);
  ASSERT_EQ(st, GCC_OK) << d.msg;
  gcc_session_options so = {};
  so.threads = 1;
  so.opt = opt;
  gcc_session *sess_raw = nullptr;
  st = gcc_session_create(model.get(), &so, &sess_raw, &d);
  SessionPtr sess(sess_raw);
  ASSERT_EQ(st, GCC_OK) << d.msg;

  const char *names[2] = {"fc.weight", "fc.bias"};
  std::vector<double> ref[2];
  RefOptimizer ro[2] = {{opt, {}, {}, {}, false, 0}, {opt, {}, {}, {}, false, 0}};
  for (int k = 0; k < 2; ++k) {
    int64_t n = 0;
    float *p = nullptr;
    gcc_session_param(sess.get(), names[k], &p, &n, nullptr);
    ASSERT_NE(p, nullptr) << names[k];
    ASSERT_EQ(n, k == 0 ? Out * In : Out);
    ref[k].assign(p, p + n);
  }
  Rng r(seed);
  for (int t = 0; t < steps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t + 1));
    const int64_t rows = t % 2 ? 3 : 5;
    std::vector<float> xs = r.F(rows * In), ys = r.F(rows * Out, -2, 2);
    // float64 loss and gradients at the library's current parameters
    float *W = nullptr;
    gcc_session_param(sess.get(), names[0], &W, nullptr, nullptr);
    float *B = nullptr;
    gcc_session_param(sess.get(), names[1], &B, nullptr, nullptr);
    double want_loss = 0;
    std::vector<double> gW(static_cast<size_t>(Out * In), 0.0), gB(static_cast<size_t>(Out), 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t o = 0; o < Out; ++o) {
        double s = B[o];
        for (int64_t k = 0; k < In; ++k)
          s += static_cast<double>(xs[i * In + k]) * W[o * In + k];
        double e = s - ys[i * Out + o];
        want_loss += e * e / static_cast<double>(rows * Out);
        double de = 2 * e / static_cast<double>(rows * Out);
        gB[o] += de;
        for (int64_t k = 0; k < In; ++k)
          gW[o * In + k] += de * xs[i * In + k];
      }
    float got_loss = 0;
    ASSERT_EQ(gcc_session_train_step(sess.get(), xs.data(), ys.data(), rows, &got_loss, &d), GCC_OK)
        << d.msg;
    EXPECT_TRUE(Close(got_loss, want_loss, kFwdAtol, kFwdRtol, &g_fwd))
        << "loss " << got_loss << " vs " << want_loss;
    const std::vector<double> *want_grad[2] = {&gW, &gB};
    for (int k = 0; k < 2; ++k) {
      int64_t n = 0;
      float *g = nullptr;
      gcc_session_grad(sess.get(), names[k], &g, &n, nullptr);
      ASSERT_NE(g, nullptr);
      std::vector<double> gd(g, g + n);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_TRUE(Close(g[i], (*want_grad[k])[i], kGradAtol, kGradRtol, &g_grad))
            << names[k] << ".grad[" << i << "] = " << g[i] << " vs " << (*want_grad[k])[i];
      ro[k].Step(&ref[k], gd);
      float *p = nullptr;
      gcc_session_param(sess.get(), names[k], &p, nullptr, nullptr);
      int bad = 0;
      for (int64_t i = 0; i < n; ++i)
        if (!Close(p[i], ref[k][i], kOptAtol, kOptRtol, &g_opt) && bad++ < 5)
          ADD_FAILURE() << names[k] << "[" << i << "] = " << p[i] << " after the step, float64 "
                        << "reference " << ref[k][i];
    }
  }
  EXPECT_EQ(gcc_session_steps(sess.get()), steps);
}

TEST(SgdOptimizer, OneAndSeveralStepsMatchTorch) {
  struct {
    const char *what;
    gcc_optimizer o;
  } cases[] = {
      {"plain", Sgd(0.1f, 0, 0, 0, false)},
      {"weight_decay", Sgd(0.1f, 0, 0, 0.05f, false)},
      {"momentum", Sgd(0.05f, 0.9f, 0, 0, false)},
      {"momentum+dampening", Sgd(0.05f, 0.9f, 0.3f, 0, false)},
      {"momentum+dampening+weight_decay", Sgd(0.05f, 0.8f, 0.5f, 0.01f, false)},
      {"nesterov+weight_decay", Sgd(0.05f, 0.8f, 0, 0.02f, true)},
  };
  for (uint64_t seed : {1, 2})
    for (const auto &c : cases)
      for (int steps : {1, 6})
        RunOptimizer(std::string("SGD ") + c.what, c.o, steps, seed);
}

TEST(SgdOptimizer, ZeroLearningRateLeavesParametersUnchanged) {
  RunOptimizer("SGD lr=0 momentum", Sgd(0, 0.9f, 0, 0.1f, false), 3, 5);
}

TEST(AdamOptimizer, OneAndSeveralStepsMatchTorch) {
  struct {
    const char *what;
    gcc_optimizer o;
  } cases[] = {
      {"defaults lr=1e-2", Adam(0.01f, 0.9f, 0.999f, 1e-8f, 0)},
      {"weight_decay", Adam(0.02f, 0.9f, 0.999f, 1e-8f, 0.1f)},
      {"betas (0.5, 0.9) eps 1e-3", Adam(0.05f, 0.5f, 0.9f, 1e-3f, 0)},
      {"beta1 = 0", Adam(0.01f, 0.0f, 0.99f, 1e-6f, 0.01f)},
  };
  for (uint64_t seed : {1, 2})
    for (const auto &c : cases)
      for (int steps : {1, 6})
        RunOptimizer(std::string("Adam ") + c.what, c.o, steps, seed);
}

// ---- Conv, MaxPool, AveragePool (2-D, NCHW) ---------------------------------------------

// A 2-D window: kernel, strides, ONNX pads (top, left, bottom, right), dilations.
struct Win {
  int64_t kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
  int64_t Out(int64_t in, bool rows) const {
    int64_t k = rows ? kh : kw, s = rows ? sh : sw, p = rows ? pt + pb : pl + pr,
            d = rows ? dh : dw;
    return (in + p - d * (k - 1) - 1) / s + 1;
  }
  std::string Str() const {
    char b[160];
    std::snprintf(b, sizeof b, "k%lldx%lld s%lld,%lld p%lld,%lld,%lld,%lld d%lld,%lld",
                  (long long)kh, (long long)kw, (long long)sh, (long long)sw, (long long)pt,
                  (long long)pl, (long long)pb, (long long)pr, (long long)dh, (long long)dw);
    return b;
  }
};

void SetWindow(gcc_builder *b, int y, const Win &w, bool pool) {
  if (pool)
    SetInts(b, y, "kernel_shape", {w.kh, w.kw});
  SetInts(b, y, "strides", {w.sh, w.sw});
  SetInts(b, y, "pads", {w.pt, w.pl, w.pb, w.pr});
  SetInts(b, y, "dilations", {w.dh, w.dw});
}

// Cross-correlation as torch.nn.functional.conv2d, in float64, straight from
// the definition: Y[n,m,oy,ox] = B[m] + sum_{c,i,j} X[n,c,oy*sh-pt+i*dh,
// ox*sw-pl+j*dw] W[m,c,i,j], zero outside X.
T64 RefConv(const T64 &X, const T64 &W, const T64 *B, const Win &w, int64_t group = 1) {
  int64_t N = X.dims[0], C = X.dims[1], H = X.dims[2], Wd = X.dims[3], M = W.dims[0];
  int64_t Cg = C / group, Mg = M / group;
  int64_t oh = w.Out(H, true), ow = w.Out(Wd, false);
  T64 y = Zeros({N, M, oh, ow});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double s = B ? B->v[m] : 0.0;
          for (int64_t cl = 0; cl < Cg; ++cl)
            for (int64_t i = 0; i < w.kh; ++i)
              for (int64_t j = 0; j < w.kw; ++j) {
                int64_t iy = oy * w.sh - w.pt + i * w.dh, ix = ox * w.sw - w.pl + j * w.dw;
                if (iy < 0 || iy >= H || ix < 0 || ix >= Wd)
                  continue;
                int64_t c = (m / Mg) * Cg + cl;
                s += X.v[((n * C + c) * H + iy) * Wd + ix] *
                     W.v[((m * Cg + cl) * w.kh + i) * w.kw + j];
              }
          y.v[((n * M + m) * oh + oy) * ow + ox] = s;
        }
  return y;
}

// MaxPool (first maximum of the window) or AveragePool (count_include_pad
// or not), float64.
T64 RefPool(const T64 &X, const Win &w, bool is_max, bool include_pad) {
  int64_t N = X.dims[0], C = X.dims[1], H = X.dims[2], Wd = X.dims[3];
  int64_t oh = w.Out(H, true), ow = w.Out(Wd, false);
  T64 y = Zeros({N, C, oh, ow});
  for (int64_t p = 0; p < N * C; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        double best = -INFINITY, sum = 0;
        int64_t cnt = 0;
        for (int64_t i = 0; i < w.kh; ++i)
          for (int64_t j = 0; j < w.kw; ++j) {
            int64_t iy = oy * w.sh - w.pt + i * w.dh, ix = ox * w.sw - w.pl + j * w.dw;
            if (iy < 0 || iy >= H || ix < 0 || ix >= Wd)
              continue;
            double v = X.v[(p * H + iy) * Wd + ix];
            best = std::max(best, v);
            sum += v;
            cnt++;
          }
        y.v[(p * oh + oy) * ow + ox] = is_max ? best : sum / (include_pad ? w.kh * w.kw : cnt);
      }
  return y;
}

// A random window that fits an input of h x w; pads at most half the kernel
// when `pool` (PyTorch's rule for pooling).
Win RandomWindow(Rng &r, int64_t h, int64_t wd, bool pool) {
  for (;;) {
    Win w;
    w.kh = r.I(1, 3);
    w.kw = r.I(1, 3);
    w.sh = r.I(1, 3);
    w.sw = r.I(1, 3);
    w.dh = r.I(1, 2);
    w.dw = r.I(1, 2);
    int64_t ph = pool ? w.kh / 2 : 2, pw = pool ? w.kw / 2 : 2;
    w.pt = r.I(0, ph);
    w.pb = r.I(0, ph);
    w.pl = r.I(0, pw);
    w.pr = r.I(0, pw);
    if (w.Out(h, true) >= 1 && w.Out(wd, false) >= 1 && h + w.pt + w.pb >= w.dh * (w.kh - 1) + 1 &&
        wd + w.pl + w.pr >= w.dw * (w.kw - 1) + 1)
      return w;
  }
}

TEST(ConvGrad, RandomShapesStridesPadsDilations) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rep = 0; rep < 4; ++rep) {
      int64_t N = r.I(1, 3), C = r.I(1, 3), M = r.I(1, 4), H = r.I(3, 7), Wd = r.I(3, 8);
      Win w = RandomWindow(r, H, Wd, false);
      bool bias = rep != 3;
      GradCase c;
      c.label = "Conv X" + Str({N, C, H, Wd}) + " W" + Str({M, C, w.kh, w.kw}) + " " + w.Str() +
                (bias ? " +B" : "");
      c.params.push_back({"X", {N, C, H, Wd}, r.F(N * C * H * Wd)});
      c.params.push_back({"W", {M, C, w.kh, w.kw}, r.F(M * C * w.kh * w.kw)});
      if (bias)
        c.params.push_back({"B", {M}, r.F(M)});
      c.build = [=](gcc_builder *b, const Ids &v) {
        std::vector<int> ins = {v.at("X"), v.at("W")};
        if (bias)
          ins.push_back(v.at("B"));
        int y = Op(b, GCC_OP_CONV, "conv", ins);
        SetWindow(b, y, w, false);
        return y;
      };
      c.ref = [=](const Env &e) {
        return RefConv(e.at("X"), e.at("W"), bias ? &e.at("B") : nullptr, w);
      };
      c.bwd_ops = {GCC_OP_CONV_GRAD_DATA, GCC_OP_CONV_GRAD_FILTER};
      if (bias)
        c.bwd_ops.push_back(GCC_OP_CONV_GRAD_BIAS);
      RunGradCase(c, seed);
    }
  }
}

TEST(ConvGrad, GroupedAndDepthwise) {
  // MobileNet's depthwise convolution (group = C, one filter per channel)
  // and a grouped one; CPU and, for the first seed, a CUDA plan on the host
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rep = 0; rep < 2; ++rep) {
      int64_t group = rep == 0 ? r.I(2, 4) : 2, N = r.I(1, 2), C = rep == 0 ? group : 2 * r.I(1, 2),
              M = rep == 0 ? group : 2 * r.I(1, 2), H = r.I(3, 6), Wd = r.I(3, 6);
      Win w = RandomWindow(r, H, Wd, false);
      GradCase c;
      c.label = "Conv group " + std::to_string(group) + " X" + Str({N, C, H, Wd}) + " W" +
                Str({M, C / group, w.kh, w.kw}) + " " + w.Str();
      c.params.push_back({"X", {N, C, H, Wd}, r.F(N * C * H * Wd)});
      c.params.push_back({"W", {M, C / group, w.kh, w.kw}, r.F(M * C / group * w.kh * w.kw)});
      c.params.push_back({"B", {M}, r.F(M)});
      c.build = [=](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_CONV, "conv", {v.at("X"), v.at("W"), v.at("B")});
        SetWindow(b, y, w, false);
        gcc_build_set_int(b, y, "group", group);
        return y;
      };
      c.ref = [=](const Env &e) { return RefConv(e.at("X"), e.at("W"), &e.at("B"), w, group); };
      c.bwd_ops = {GCC_OP_CONV_GRAD_DATA, GCC_OP_CONV_GRAD_FILTER, GCC_OP_CONV_GRAD_BIAS};
      c.cuda = seed == kSeeds[0];
      RunGradCase(c, seed);
    }
  }
}

TEST(ConvGrad, DefaultAttributesAndInputActivation) {
  // no strides/pads/dilations attributes (ONNX defaults); X an input, so
  // only dW and dB are built
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    GradCase c;
    c.label = "Conv defaults";
    c.inputs.push_back(FloatInput("x", {2, 2, 5, 6}, r.F(2 * 2 * 5 * 6)));
    c.params.push_back({"W", {3, 2, 3, 2}, r.F(3 * 2 * 3 * 2)});
    c.params.push_back({"B", {3}, r.F(3)});
    c.build = [](gcc_builder *b, const Ids &v) {
      return Op(b, GCC_OP_CONV, "conv", {v.at("x"), v.at("W"), v.at("B")});
    };
    Win w{3, 2, 1, 1, 0, 0, 0, 0, 1, 1};
    c.ref = [=](const Env &e) { return RefConv(e.at("x"), e.at("W"), &e.at("B"), w); };
    c.bwd_ops = {GCC_OP_CONV_GRAD_FILTER, GCC_OP_CONV_GRAD_BIAS};
    RunGradCase(c, seed);
  }
}

// n distinct values, at least 0.02 apart (>> the FD step), shuffled: no
// window has a tie, so the finite difference never moves a maximum.
std::vector<float> DistinctValues(Rng &r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(-1.0 + 0.02 * static_cast<double>(i));
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(v[i], v[r.I(0, i)]);
  return v;
}

TEST(MaxPoolGrad, RandomShapesStridesPadsDilations) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rep = 0; rep < 4; ++rep) {
      int64_t N = r.I(1, 2), C = r.I(1, 3), H = r.I(2, 7), Wd = r.I(2, 7);
      Win w = RandomWindow(r, H, Wd, true);
      GradCase c;
      c.label = "MaxPool X" + Str({N, C, H, Wd}) + " " + w.Str();
      c.params.push_back({"X", {N, C, H, Wd}, DistinctValues(r, N * C * H * Wd)});
      c.build = [=](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_MAX_POOL, "pool", {v.at("X")});
        SetWindow(b, y, w, true);
        return y;
      };
      c.ref = [=](const Env &e) { return RefPool(e.at("X"), w, true, false); };
      c.bwd_ops = {GCC_OP_MAX_POOL_GRAD};
      RunGradCase(c, seed);
    }
  }
}

TEST(AveragePoolGrad, RandomShapesBothPadCounts) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rep = 0; rep < 4; ++rep) {
      int64_t N = r.I(1, 2), C = r.I(1, 3), H = r.I(2, 7), Wd = r.I(2, 7);
      Win w = RandomWindow(r, H, Wd, true);
      bool include_pad = rep % 2;
      GradCase c;
      c.label = "AveragePool X" + Str({N, C, H, Wd}) + " " + w.Str() +
                (include_pad ? " count_include_pad" : "");
      c.params.push_back({"X", {N, C, H, Wd}, r.F(N * C * H * Wd)});
      c.build = [=](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_AVERAGE_POOL, "pool", {v.at("X")});
        SetWindow(b, y, w, true);
        if (include_pad)
          gcc_build_set_int(b, y, "count_include_pad", 1);
        return y;
      };
      c.ref = [=](const Env &e) { return RefPool(e.at("X"), w, false, include_pad); };
      c.bwd_ops = {GCC_OP_AVERAGE_POOL_GRAD};
      RunGradCase(c, seed);
    }
  }
}

// The gradient of a window's maximum goes to its first maximal element when
// there are ties (PyTorch's CPU max_pool2d), and overlapping windows add up.
TEST(InternalOps, MaxPoolGradTiesGoToTheFirstMaximum) {
  // X 1x1x2x3, all equal; kernel 2x2 stride 1 -> two windows, both pick (0, 0)
  // and (0, 1) respectively (the first element of each window)
  DirectCase c;
  c.label = "MaxPoolGrad ties";
  c.inputs.push_back(FloatInput("dY", {1, 1, 1, 2}, {2.0f, 3.0f}));
  c.inputs.push_back(FloatInput("X", {1, 1, 2, 3}, {1, 1, 1, 1, 1, 1}));
  c.inputs.push_back(FloatInput("Y", {1, 1, 1, 2}, {1, 1}));
  c.build = [](gcc_builder *b, const Ids &v) {
    int y = Op(b, GCC_OP_MAX_POOL_GRAD, "mpg", {v.at("dY"), v.at("X"), v.at("Y")});
    SetInts(b, y, "kernel_shape", {2, 2});
    return y;
  };
  c.expect = FromFloats({1, 1, 2, 3}, {2, 3, 0, 0, 0, 0});
  RunDirect(c);
}

// Batches large enough for several im2col chunks (GCC_CONV_CHUNK_BYTES): the
// three conv kernels against float64 formulas, directly.
TEST(InternalOps, ConvKernelsOverSeveralChunks) {
  Rng r(11);
  // per sample (K + M) * P * 4 = (400 + 4) * 900 * 4 bytes = 1.45 MB: chunks of 2 samples
  const Dims xd = {3, 16, 34, 34}, wd = {4, 16, 5, 5}, yd = {3, 4, 30, 30};
  Win w{5, 5, 1, 1, 0, 0, 0, 0, 1, 1};
  ASSERT_GT(3 * (400 + 4) * 900 * 4, static_cast<int>(GCC_CONV_CHUNK_BYTES));
  std::vector<float> x = r.F(Numel(xd)), wt = r.F(Numel(wd)), dy = r.F(Numel(yd));
  T64 X = FromFloats(xd, x), W = FromFloats(wd, wt), DY = FromFloats(yd, dy);
  // dX and dW from the definition: the adjoints of RefConv
  T64 dX = Zeros(xd), dW = Zeros(wd);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t m = 0; m < 4; ++m)
      for (int64_t oy = 0; oy < 30; ++oy)
        for (int64_t ox = 0; ox < 30; ++ox) {
          double g = DY.v[((n * 4 + m) * 30 + oy) * 30 + ox];
          for (int64_t c = 0; c < 16; ++c)
            for (int64_t i = 0; i < 5; ++i)
              for (int64_t j = 0; j < 5; ++j) {
                int64_t xi = ((n * 16 + c) * 34 + oy + i) * 34 + ox + j;
                int64_t wi = ((m * 16 + c) * 5 + i) * 5 + j;
                dX.v[xi] += g * W.v[wi];
                dW.v[wi] += g * X.v[xi];
              }
        }
  struct K {
    const char *label;
    int op;
    std::vector<InputSpec> in;
    const char *shape_attr;
    Dims shape;
    T64 expect;
  };
  K ks[] = {
      {"Conv",
       GCC_OP_CONV,
       {FloatInput("a", xd, x), FloatInput("b", wd, wt)},
       nullptr,
       {},
       RefConv(X, W, nullptr, w)},
      {"ConvGradData",
       GCC_OP_CONV_GRAD_DATA,
       {FloatInput("a", yd, dy), FloatInput("b", wd, wt)},
       "input_shape",
       xd,
       dX},
      {"ConvGradFilter",
       GCC_OP_CONV_GRAD_FILTER,
       {FloatInput("a", yd, dy), FloatInput("b", xd, x)},
       "filter_shape",
       wd,
       dW},
  };
  for (const K &k : ks) {
    DirectCase c;
    c.label = k.label;
    c.inputs = k.in;
    c.threads = 2;
    int op = k.op;
    const char *attr = k.shape_attr;
    Dims shape = k.shape;
    c.build = [=](gcc_builder *b, const Ids &v) {
      int y = Op(b, op, "conv", {v.at("a"), v.at("b")});
      if (attr)
        SetInts(b, y, attr, shape);
      return y;
    };
    // sums of up to 2700 float32 products: compare at 1e-5 of the largest
    // magnitude (float32 accumulation over thousands of terms)
    double mx = 0;
    for (double v : k.expect.v)
      mx = std::max(mx, std::fabs(v));
    c.expect = k.expect;
    c.abs_tol = 1e-5 * mx;
    RunDirect(c);
  }
}

// ---- the ONNX import set's gradients (issue 15) -------------------------------------------
//
// Each case runs on the CPU for every seed and, for the first seed, also
// through a CUDA plan on the host backend (generated kernels emulated).

T64 RefBinary(const T64 &a, const T64 &b, int op) {
  Dims od;
  EXPECT_TRUE(BroadcastDims(a.dims, b.dims, &od));
  T64 y = Zeros(od);
  for (int64_t o = 0; o < Numel(od); ++o) {
    double x = a.v[BroadcastIndex(a.dims, od, o)], z = b.v[BroadcastIndex(b.dims, od, o)];
    y.v[o] = op == GCC_OP_SUB ? x - z : op == GCC_OP_MUL ? x * z : x / z;
  }
  return y;
}

T64 Map(const T64 &x, const std::function<double(double)> &f) {
  T64 y = x;
  for (double &v : y.v)
    v = f(v);
  return y;
}

GradCase BinaryCase(int op, const std::string &what, const Dims &a, const Dims &b, Rng &r,
                    bool a_is_input = false) {
  GradCase c;
  c.label = std::string(gcc_op_name(op)) + " " + what;
  // B away from 0 for Div (0.5 <= |b| <= 1.5)
  std::vector<float> bv = r.F(Numel(b), -1.5, 1.5, op == GCC_OP_DIV ? 0.5 : 0.0);
  if (a_is_input)
    c.inputs.push_back(FloatInput("A", a, r.F(Numel(a))));
  else
    c.params.push_back({"A", a, r.F(Numel(a))});
  c.params.push_back({"B", b, bv});
  c.build = [op](gcc_builder *bl, const Ids &v) {
    return Op(bl, op, "bin", {v.at("A"), v.at("B")});
  };
  c.ref = [op](const Env &e) { return RefBinary(e.at("A"), e.at("B"), op); };
  Dims od;
  BroadcastDims(a, b, &od);
  if (op == GCC_OP_SUB || b != od)
    c.bwd_ops = {GCC_OP_REDUCE_SUM_TO};
  if (op == GCC_OP_MUL)
    c.bwd_ops.push_back(GCC_OP_MUL);
  if (op == GCC_OP_DIV)
    c.bwd_ops = {GCC_OP_DIV, GCC_OP_MUL, GCC_OP_REDUCE_SUM_TO};
  return c;
}

TEST(ImportGrad, SubMulDivBroadcasting) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t N = r.I(2, 4), C = r.I(2, 4), A = r.I(2, 3), B = r.I(2, 3);
    for (int op : {GCC_OP_SUB, GCC_OP_MUL, GCC_OP_DIV}) {
      std::vector<GradCase> cases = {
          BinaryCase(op, "[N,C]op[C]", {N, C}, {C}, r),
          BinaryCase(op, "[C]op[N,C]", {C}, {N, C}, r),
          BinaryCase(op, "[N,1]op[1,C]", {N, 1}, {1, C}, r),
          BinaryCase(op, "[]op[N,C]", {}, {N, C}, r),
          BinaryCase(op, "[A,1,C]op[B,1]", {A, 1, C}, {B, 1}, r),
          BinaryCase(op, "[N,C]op[N,C]", {N, C}, {N, C}, r),
          BinaryCase(op, "input[N,C,A]op[C,1]", {N, C, A}, {C, 1}, r, true),
      };
      for (size_t i = 0; i < cases.size(); ++i) {
        cases[i].cuda = seed == kSeeds[0] && i % 3 == 0;
        RunGradCase(cases[i], seed);
      }
    }
  }
}

GradCase UnaryCase(const std::string &label, const Dims &d, std::vector<float> x,
                   std::function<int(gcc_builder *, int)> build, std::function<double(double)> f,
                   int bwd_op) {
  GradCase c;
  c.label = label + " " + Str(d);
  c.params.push_back({"X", d, std::move(x)});
  c.build = [build](gcc_builder *b, const Ids &v) { return build(b, v.at("X")); };
  c.ref = [f](const Env &e) { return Map(e.at("X"), f); };
  c.bwd_ops = {bwd_op};
  return c;
}

// n floats in [lo, hi) at least `gap` away from each of the kinks.
std::vector<float> AwayFrom(Rng &r, int64_t n, double lo, double hi, std::vector<double> kinks,
                            double gap) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v) {
    bool near;
    do {
      x = static_cast<float>(r.U(lo, hi));
      near = false;
      for (double k : kinks)
        near |= std::fabs(x - k) < gap;
    } while (near);
  }
  return v;
}

TEST(ImportGrad, PointwiseActivations) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      int64_t n = Numel(d);
      auto unary = [](int op, const char *name) {
        return [op, name](gcc_builder *b, int x) { return Op(b, op, name, {x}); };
      };
      std::vector<GradCase> cases;
      cases.push_back(UnaryCase(
          "Sigmoid", d, r.F(n, -3, 3), unary(GCC_OP_SIGMOID, "sig"),
          [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, GCC_OP_SIGMOID_GRAD));
      cases.push_back(UnaryCase(
          "Tanh", d, r.F(n, -2, 2), unary(GCC_OP_TANH, "tanh"),
          [](double x) { return std::tanh(x); }, GCC_OP_TANH_GRAD));
      cases.push_back(UnaryCase(
          "Sqrt", d, r.F(n, 0.3, 2), unary(GCC_OP_SQRT, "sqrt"),
          [](double x) { return std::sqrt(x); }, GCC_OP_SQRT_GRAD));
      cases.push_back(UnaryCase(
          "LeakyRelu alpha=0.2", d, AwayFrom(r, n, -1, 1, {0}, 0.05),
          [](gcc_builder *b, int x) {
            int y = Op(b, GCC_OP_LEAKY_RELU, "lrelu", {x});
            gcc_build_set_float(b, y, "alpha", 0.2f);
            return y;
          },
          [](double x) { return x < 0 ? 0.2 * x : x; }, GCC_OP_LEAKY_RELU_GRAD));
      cases.push_back(UnaryCase(
          "LeakyRelu default alpha", d, AwayFrom(r, n, -1, 1, {0}, 0.05),
          unary(GCC_OP_LEAKY_RELU, "lrelu"), [](double x) { return x < 0 ? 0.01 * x : x; },
          GCC_OP_LEAKY_RELU_GRAD));
      cases.push_back(UnaryCase(
          "Clip [-0.5, 0.5]", d, AwayFrom(r, n, -1, 1, {-0.5, 0.5}, 0.05),
          [](gcc_builder *b, int x) {
            int y = Op(b, GCC_OP_CLIP, "clip", {x});
            gcc_build_set_float(b, y, "min", -0.5f);
            gcc_build_set_float(b, y, "max", 0.5f);
            return y;
          },
          [](double x) { return std::min(0.5, std::max(-0.5, x)); }, GCC_OP_CLIP_GRAD));
      cases.push_back(UnaryCase(
          "Clip ReLU6", d, AwayFrom(r, n, -2, 8, {0, 6}, 0.05),
          [](gcc_builder *b, int x) {
            int y = Op(b, GCC_OP_CLIP, "relu6", {x});
            gcc_build_set_float(b, y, "min", 0.0f);
            gcc_build_set_float(b, y, "max", 6.0f);
            return y;
          },
          [](double x) { return std::min(6.0, std::max(0.0, x)); }, GCC_OP_CLIP_GRAD));
      for (GradCase &c : cases) {
        c.cuda = seed == kSeeds[0] && rank == 2;
        RunGradCase(c, seed);
      }
    }
  }
}

// ---- the pointwise math of the Transformer blocks (issue 30) ------------------------------

// torch.nn.GELU in float64: the erf form and the tanh approximation.
double RefGelu(double x, bool tanh_form) {
  if (tanh_form)
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

// The derivative of RefGelu, written out independently of the kernels.
double RefGeluDerivative(double x, bool tanh_form) {
  if (tanh_form) {
    double k = std::sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
  }
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
}

int GeluOp(gcc_builder *b, int x, const char *approximate) {
  int y = Op(b, GCC_OP_GELU, "gelu", {x});
  if (approximate) {
    EXPECT_EQ(gcc_node_set_string(b->g, b->g->values[y].producer, "approximate", approximate),
              GCC_OK);
  }
  return y;
}

TEST(MathGrad, GeluBothApproximations) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      int64_t n = Numel(d);
      std::vector<GradCase> cases;
      // the attribute left out is "none", ONNX's and PyTorch's default
      for (const char *a : {static_cast<const char *>(nullptr), "none", "tanh"}) {
        bool tanh_form = a && std::string(a) == "tanh";
        cases.push_back(UnaryCase(
            std::string("Gelu approximate=") + (a ? a : "(default)"), d, r.F(n, -4, 4),
            [a](gcc_builder *b, int x) { return GeluOp(b, x, a); },
            [tanh_form](double x) { return RefGelu(x, tanh_form); }, GCC_OP_GELU_GRAD));
      }
      for (GradCase &c : cases) {
        c.cuda = seed == kSeeds[0] && rank == 2;
        RunGradCase(c, seed);
      }
    }
  }
}

// The unary math ops with a float64 reference and their own gradient op (or
// a composition of existing ones), on random shapes, CPU and CUDA plans.
struct MathCase {
  const char *name;
  int op;
  double lo, hi, gap; // inputs in [lo, hi), |x| >= gap (away from a kink or a pole)
  double (*f)(double);
  std::vector<int> bwd_ops;
};

TEST(MathGrad, UnaryOps) {
  const MathCase cases[] = {
      {"Erf", GCC_OP_ERF, -2.5, 2.5, 0, [](double x) { return std::erf(x); }, {GCC_OP_ERF_GRAD}},
      {"Exp", GCC_OP_EXP, -2, 2, 0, [](double x) { return std::exp(x); }, {GCC_OP_MUL}},
      {"Log", GCC_OP_LOG, 0.2, 3, 0, [](double x) { return std::log(x); }, {GCC_OP_DIV}},
      {"Neg", GCC_OP_NEG, -2, 2, 0, [](double x) { return -x; }, {GCC_OP_NEG}},
      // away from the kink at 0
      {"Abs", GCC_OP_ABS, -2, 2, 0.05, [](double x) { return std::fabs(x); }, {GCC_OP_ABS_GRAD}},
      // away from the pole at 0
      {"Reciprocal",
       GCC_OP_RECIPROCAL,
       -2,
       2,
       0.3,
       [](double x) { return 1 / x; },
       {GCC_OP_MUL, GCC_OP_NEG}},
  };
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      int64_t n = Numel(d);
      for (const MathCase &m : cases) {
        int op = m.op;
        GradCase c = UnaryCase(
            m.name, d, AwayFrom(r, n, m.lo, m.hi, {0}, m.gap),
            [op](gcc_builder *b, int x) { return Op(b, op, "f", {x}); }, m.f, m.bwd_ops[0]);
        c.bwd_ops = m.bwd_ops;
        c.cuda = seed == kSeeds[0] && rank == 2;
        RunGradCase(c, seed);
      }
    }
  }
}

// The activations of torch.nn (ELU, SELU, CELU, Softplus, Softsign,
// Threshold(alpha, 0)) and Sin, Cos: at their defaults and at other
// attribute values, against float64 references, inputs away from the kinks
// (0 for Elu/Selu/Celu at alpha != 1, alpha for ThresholdedRelu); Softplus
// over [-25, 25] covers torch's threshold 20 (the formulas agree there to
// float32 rounding), CPU and host-emulated CUDA plans.
struct ActCase {
  const char *name;
  int op, bwd_op;
  std::vector<std::pair<const char *, float>> attrs;
  double lo, hi;
  std::vector<double> kinks;
  std::function<double(double)> f;
};

TEST(MathGrad, Activations) {
  const double kSeluA = 1.67326319217681884765625, kSeluG = 1.05070102214813232421875;
  auto elu = [](double a) { return [a](double x) { return x > 0 ? x : a * std::expm1(x); }; };
  auto celu = [](double a) {
    return [a](double x) { return std::max(0.0, x) + std::min(0.0, a * std::expm1(x / a)); };
  };
  auto selu = [](double a, double g) {
    return [a, g](double x) { return g * (x > 0 ? x : a * std::expm1(x)); };
  };
  auto thr = [](double a) { return [a](double x) { return x > a ? x : 0.0; }; };
  const std::vector<ActCase> cases = {
      {"Elu default", GCC_OP_ELU, GCC_OP_ELU_GRAD, {}, -3, 3, {0}, elu(1.0)},
      {"Elu alpha=0.5", GCC_OP_ELU, GCC_OP_ELU_GRAD, {{"alpha", 0.5f}}, -3, 3, {0}, elu(0.5)},
      {"Selu default", GCC_OP_SELU, GCC_OP_SELU_GRAD, {}, -3, 3, {0}, selu(kSeluA, kSeluG)},
      {"Selu alpha=2 gamma=3",
       GCC_OP_SELU,
       GCC_OP_SELU_GRAD,
       {{"alpha", 2.0f}, {"gamma", 3.0f}},
       -3,
       3,
       {0},
       selu(2, 3)},
      {"Celu default", GCC_OP_CELU, GCC_OP_CELU_GRAD, {}, -3, 3, {0}, celu(1.0)},
      {"Celu alpha=2", GCC_OP_CELU, GCC_OP_CELU_GRAD, {{"alpha", 2.0f}}, -3, 3, {0}, celu(2.0)},
      {"Softplus",
       GCC_OP_SOFTPLUS,
       GCC_OP_SOFTPLUS_GRAD,
       {},
       -25,
       25,
       {},
       [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }},
      {"Softsign",
       GCC_OP_SOFTSIGN,
       GCC_OP_SOFTSIGN_GRAD,
       {},
       -3,
       3,
       {0},
       [](double x) { return x / (1 + std::fabs(x)); }},
      {"ThresholdedRelu default",
       GCC_OP_THRESHOLDED_RELU,
       GCC_OP_THRESHOLDED_RELU_GRAD,
       {},
       -3,
       3,
       {1},
       thr(1.0)},
      {"ThresholdedRelu alpha=-0.5",
       GCC_OP_THRESHOLDED_RELU,
       GCC_OP_THRESHOLDED_RELU_GRAD,
       {{"alpha", -0.5f}},
       -3,
       3,
       {-0.5},
       thr(-0.5)},
      {"Sin", GCC_OP_SIN, GCC_OP_COS, {}, -4, 4, {}, [](double x) { return std::sin(x); }},
      {"Cos", GCC_OP_COS, GCC_OP_SIN, {}, -4, 4, {}, [](double x) { return std::cos(x); }},
  };
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      int64_t n = Numel(d);
      for (const ActCase &m : cases) {
        int op = m.op;
        auto attrs = m.attrs;
        GradCase c = UnaryCase(
            m.name, d, AwayFrom(r, n, m.lo, m.hi, m.kinks, 0.05),
            [op, attrs](gcc_builder *b, int x) {
              int y = Op(b, op, "f", {x});
              for (const auto &a : attrs)
                gcc_build_set_float(b, y, a.first, a.second);
              return y;
            },
            m.f, m.bwd_op);
        c.cuda = seed == kSeeds[0] && rank == 2;
        RunGradCase(c, seed);
      }
    }
  }
}

// Pow with broadcasting, gradients to the base and to a parameter exponent
// (PowGradBase, PowGradExponent, summed over the broadcast dims); a base in
// [0.5, 2] keeps log(A) defined, as the finite differences need.
GradCase PowCase(const std::string &what, const Dims &a, const Dims &b, Rng &r,
                 bool b_is_const = false) {
  GradCase c;
  c.label = "Pow " + what;
  c.params.push_back({"A", a, r.F(Numel(a), 0.5, 2)});
  std::vector<float> bv = r.F(Numel(b), -2, 3);
  if (b_is_const)
    c.inputs.push_back(FloatInput("B", b, bv));
  else
    c.params.push_back({"B", b, bv});
  c.build = [](gcc_builder *bl, const Ids &v) {
    return Op(bl, GCC_OP_POW, "pow", {v.at("A"), v.at("B")});
  };
  c.ref = [](const Env &e) {
    const T64 &x = e.at("A"), &z = e.at("B");
    Dims od;
    EXPECT_TRUE(BroadcastDims(x.dims, z.dims, &od));
    T64 y = Zeros(od);
    for (int64_t o = 0; o < Numel(od); ++o)
      y.v[o] = std::pow(x.v[BroadcastIndex(x.dims, od, o)], z.v[BroadcastIndex(z.dims, od, o)]);
    return y;
  };
  c.bwd_ops = {GCC_OP_POW_GRAD_BASE};
  if (!b_is_const)
    c.bwd_ops.push_back(GCC_OP_POW_GRAD_EXPONENT);
  return c;
}

TEST(MathGrad, PowBroadcastingBaseAndExponent) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t N = r.I(2, 4), C = r.I(2, 4);
    std::vector<GradCase> cases = {
        PowCase("[N,C]^[N,C]", {N, C}, {N, C}, r),
        PowCase("[N,C]^[C]", {N, C}, {C}, r),
        PowCase("[N,1]^[1,C]", {N, 1}, {1, C}, r),
        PowCase("[C]^[N,C]", {C}, {N, C}, r),
        PowCase("[N,C]^[] (a scalar exponent)", {N, C}, {}, r),
        PowCase("[N,C]^input[C] (no exponent gradient)", {N, C}, {C}, r, true),
    };
    for (size_t i = 0; i < cases.size(); ++i) {
      cases[i].cuda = seed == kSeeds[0] && i % 2 == 0;
      RunGradCase(cases[i], seed);
    }
  }
}

// PRelu with the slope shapes torch.nn.PReLU and ONNX use: [C, 1, 1]
// per channel of NCHW, [1] shared, X's own shape, a trailing [W]; X away
// from the kink at 0, the slope's gradient summed over the broadcast dims
// (ReduceSumTo), CPU and host-emulated CUDA plans.
GradCase PReluCase(const std::string &what, const Dims &x, const Dims &sl, Rng &r) {
  GradCase c;
  c.label = "PRelu " + what;
  c.params.push_back({"X", x, AwayFrom(r, Numel(x), -2, 2, {0}, 0.05)});
  c.params.push_back({"S", sl, r.F(Numel(sl), -0.5, 0.8)});
  c.build = [](gcc_builder *bl, const Ids &v) {
    return Op(bl, GCC_OP_PRELU, "prelu", {v.at("X"), v.at("S")});
  };
  c.ref = [](const Env &e) {
    const T64 &xv = e.at("X"), &sv = e.at("S");
    T64 y = Zeros(xv.dims);
    for (int64_t o = 0; o < Numel(xv.dims); ++o) {
      double xo = xv.v[o];
      y.v[o] = xo < 0 ? sv.v[BroadcastIndex(sv.dims, xv.dims, o)] * xo : xo;
    }
    return y;
  };
  c.bwd_ops = {GCC_OP_PRELU_GRAD, GCC_OP_PRELU_GRAD_SLOPE};
  return c;
}

TEST(MathGrad, PReluSlopeBroadcasting) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t N = r.I(1, 3), C = r.I(2, 4), H = r.I(1, 3), W = r.I(2, 4);
    std::vector<GradCase> cases = {
        PReluCase("[N,C,H,W] slope [C,1,1]", {N, C, H, W}, {C, 1, 1}, r),
        PReluCase("[N,C,H,W] slope [1]", {N, C, H, W}, {1}, r),
        PReluCase("[N,C] slope [N,C]", {N, C}, {N, C}, r),
        PReluCase("[N,C,W] slope [W]", {N, C, W}, {W}, r),
    };
    for (size_t i = 0; i < cases.size(); ++i) {
      cases[i].cuda = seed == kSeeds[0];
      RunGradCase(cases[i], seed);
    }
  }
}

// Where(cond, X, Y) with its gradient (WhereGradX / WhereGradY, then
// ReduceSumTo over the broadcast dims), cond = Greater(M, T) of two float
// inputs (a comparison: no gradient, a constant to autodiff), X and Y
// parameters of broadcast shapes. The last case is relu-like, Where(X > T,
// X, Y): X feeds the comparison too, and only its branch gets a gradient;
// X is kept 0.05 away from T so the finite differences never flip cond.
GradCase WhereCase(const std::string &what, const Dims &cd, const Dims &xd, const Dims &yd, Rng &r,
                   bool x_in_cond = false) {
  GradCase c;
  c.label = "Where " + what;
  c.params.push_back(
      {"X", xd, x_in_cond ? AwayFrom(r, Numel(xd), -1, 1, {0}, 0.05) : r.F(Numel(xd))});
  c.params.push_back({"Y", yd, r.F(Numel(yd))});
  if (!x_in_cond)
    c.inputs.push_back(FloatInput("M", cd, r.F(Numel(cd))));
  c.inputs.push_back(FloatInput("T", {1}, {0.0f}));
  c.build = [x_in_cond](gcc_builder *bl, const Ids &v) {
    int cond = Op(bl, GCC_OP_GREATER, "gt", {x_in_cond ? v.at("X") : v.at("M"), v.at("T")});
    return Op(bl, GCC_OP_WHERE, "where", {cond, v.at("X"), v.at("Y")});
  };
  c.ref = [x_in_cond](const Env &e) {
    const T64 &x = e.at("X"), &y = e.at("Y"), &m = x_in_cond ? e.at("X") : e.at("M");
    Dims od, t;
    EXPECT_TRUE(BroadcastDims(m.dims, x.dims, &t));
    EXPECT_TRUE(BroadcastDims(t, y.dims, &od));
    T64 z = Zeros(od);
    for (int64_t o = 0; o < Numel(od); ++o)
      z.v[o] = m.v[BroadcastIndex(m.dims, od, o)] > 0 ? x.v[BroadcastIndex(x.dims, od, o)]
                                                      : y.v[BroadcastIndex(y.dims, od, o)];
    return z;
  };
  c.bwd_ops = {GCC_OP_WHERE_GRAD_X, GCC_OP_WHERE_GRAD_Y};
  return c;
}

TEST(MathGrad, WhereBroadcasting) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t N = r.I(2, 4), C = r.I(2, 4);
    std::vector<GradCase> cases = {
        WhereCase("cond, X, Y [N,C]", {N, C}, {N, C}, {N, C}, r),
        WhereCase("cond [N,1], X [C], Y [N,C]", {N, 1}, {C}, {N, C}, r),
        WhereCase("cond [C], X [] (a scalar), Y [N,1]", {C}, {}, {N, 1}, r),
        WhereCase("Where(X > 0, X, Y), X [N,C], Y [C]", {N, C}, {N, C}, {C}, r, true),
    };
    for (size_t i = 0; i < cases.size(); ++i) {
      cases[i].cuda = seed == kSeeds[0];
      RunGradCase(cases[i], seed);
    }
  }
}

// Max / Min with broadcasting, both operands parameters. The operands are
// drawn from disjoint grids (A on odd, B on even multiples of 0.05), so no
// element ties and the finite differences (step far below 0.05) never
// cross a switch; ties are checked exactly below.
GradCase MinMaxCase(int op, const std::string &what, const Dims &a, const Dims &b, Rng &r) {
  GradCase c;
  c.label = std::string(gcc_op_name(op)) + " " + what;
  auto grid = [&r](int64_t n, int odd) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v)
      x = static_cast<float>(0.05 * (2 * r.I(-20, 20) + odd));
    return v;
  };
  c.params.push_back({"A", a, grid(Numel(a), 1)});
  c.params.push_back({"B", b, grid(Numel(b), 0)});
  c.build = [op](gcc_builder *bl, const Ids &v) {
    return Op(bl, op, "mm", {v.at("A"), v.at("B")});
  };
  c.ref = [op](const Env &e) {
    const T64 &x = e.at("A"), &z = e.at("B");
    Dims od;
    EXPECT_TRUE(BroadcastDims(x.dims, z.dims, &od));
    T64 y = Zeros(od);
    for (int64_t o = 0; o < Numel(od); ++o) {
      double p = x.v[BroadcastIndex(x.dims, od, o)], q = z.v[BroadcastIndex(z.dims, od, o)];
      y.v[o] = op == GCC_OP_MAX ? std::max(p, q) : std::min(p, q);
    }
    return y;
  };
  c.bwd_ops = {op == GCC_OP_MAX ? GCC_OP_MAX_GRAD : GCC_OP_MIN_GRAD};
  return c;
}

TEST(MathGrad, MaxMinBroadcasting) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t N = r.I(2, 4), C = r.I(2, 4);
    for (int op : {GCC_OP_MAX, GCC_OP_MIN}) {
      std::vector<GradCase> cases = {
          MinMaxCase(op, "[N,C],[N,C]", {N, C}, {N, C}, r),
          MinMaxCase(op, "[N,C],[C]", {N, C}, {C}, r),
          MinMaxCase(op, "[N,1],[1,C]", {N, 1}, {1, C}, r),
          MinMaxCase(op, "[],[N,C]", {}, {N, C}, r),
      };
      for (size_t i = 0; i < cases.size(); ++i) {
        cases[i].cuda = seed == kSeeds[0] && i % 2 == 0;
        RunGradCase(cases[i], seed);
      }
    }
  }
}

// torch.maximum / torch.minimum's backward on ties: each operand gets half
// of the gradient (checked in PyTorch 2.15: torch.maximum(a, b) with a == b
// gives a.grad == b.grad == 0.5 * grad); the loser gets 0, the winner all.
TEST(InternalOps, MaxMinGradientsSplitTiesInHalf) {
  Dims d = {1, 4};
  InputSpec dy = FloatInput("dy", d, {1.5f, -2.0f, 0.5f, 3.0f});
  InputSpec x = FloatInput("x", d, {1.0f, 2.0f, -1.0f, 0.0f});
  InputSpec o = FloatInput("o", d, {1.0f, 1.0f, 0.5f, -0.0f});
  struct K {
    int op;
    std::vector<double> want;
  } ks[] = {
      {GCC_OP_MAX_GRAD, {0.75, -2.0, 0.0, 1.5}}, // tie, wins, loses, tie (0 == -0)
      {GCC_OP_MIN_GRAD, {0.75, 0.0, 0.5, 1.5}},
  };
  for (const K &k : ks) {
    DirectCase c;
    c.label = gcc_op_name(k.op);
    c.inputs = {dy, x, o};
    int op = k.op;
    c.build = [op](gcc_builder *bl, const Ids &v) {
      return Op(bl, op, "g", {v.at("dy"), v.at("x"), v.at("o")});
    };
    c.expect = Zeros(d);
    c.expect.v = k.want;
    RunDirect(c);
  }
}

// PyTorch's special cases of pow's backward: no base gradient where the
// exponent is 0 (0^0 included), no exponent gradient where the base is 0
// and the exponent >= 0; and AbsGrad is 0 at 0 (torch.sgn).
TEST(InternalOps, PowAndAbsGradientsAtTheirSpecialPoints) {
  Dims d = {1, 4};
  InputSpec dy = FloatInput("dy", d, {1.5f, -2.0f, 0.5f, 3.0f});
  InputSpec a = FloatInput("a", d, {0.0f, 0.0f, 2.0f, 0.0f});
  InputSpec b = FloatInput("b", d, {0.0f, 2.0f, 0.0f, 3.0f});
  struct K {
    int op;
    std::vector<double> want;
  } ks[] = {
      // dY * B * A^(B - 1): 0 where B = 0; 0^1 * 2 = 0; 0^2 * 3 = 0
      {GCC_OP_POW_GRAD_BASE, {0.0, 0.0, 0.0, 0.0}},
      // dY * A^B * log(A): 0 where A = 0 and B >= 0; 2^0 log 2 * 0.5
      {GCC_OP_POW_GRAD_EXPONENT, {0.0, 0.0, 0.5 * std::log(2.0), 0.0}},
  };
  for (const K &k : ks) {
    DirectCase c;
    c.label = gcc_op_name(k.op);
    c.inputs = {dy, a, b};
    int op = k.op;
    c.build = [op](gcc_builder *bl, const Ids &v) {
      return Op(bl, op, "g", {v.at("dy"), v.at("a"), v.at("b")});
    };
    c.expect = Zeros(d);
    c.expect.v = k.want;
    RunDirect(c);
  }
  DirectCase c;
  c.label = "AbsGrad";
  c.inputs = {dy, FloatInput("x", d, {0.0f, -1.0f, 2.0f, -0.0f})};
  c.build = [](gcc_builder *bl, const Ids &v) {
    return Op(bl, GCC_OP_ABS_GRAD, "g", {v.at("dy"), v.at("x")});
  };
  c.expect = Zeros(d);
  c.expect.v = {0.0, 2.0, 0.5, 0.0};
  RunDirect(c);
}

TEST(InternalOps, GeluGradMatchesItsFormula) {
  Rng r(12);
  Dims d = {5, 7};
  int64_t n = Numel(d);
  InputSpec dy = FloatInput("dy", d, r.F(n, -2, 2));
  InputSpec x = FloatInput("x", d, r.F(n, -6, 6));
  x.f[0] = 0.0f; // the derivative at 0 is 1/2 in both forms
  for (const char *a : {"none", "tanh"}) {
    DirectCase c;
    c.label = std::string("GeluGrad ") + a;
    c.inputs = {dy, x};
    c.build = [a](gcc_builder *b, const Ids &v) {
      int out = Op(b, GCC_OP_GELU_GRAD, "g", {v.at("dy"), v.at("x")});
      EXPECT_EQ(gcc_node_set_string(b->g, b->g->values[out].producer, "approximate", a), GCC_OK);
      return out;
    };
    c.expect = Zeros(d);
    bool tanh_form = std::string(a) == "tanh";
    for (int64_t i = 0; i < n; ++i)
      c.expect.v[i] = dy.f[i] * RefGeluDerivative(x.f[i], tanh_form);
    RunDirect(c);
  }
}

TEST(InternalOps, GeluRefusesAnUnknownApproximation) {
  gcc_builder *b = gcc_builder_new("gelu_bad", 1);
  ASSERT_NE(b, nullptr);
  int64_t dims[2] = {2, 3};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, dims);
  int y = GeluOp(b, x, "erf");
  gcc_build_output(b, y);
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  gcc_status st = gcc_builder_finish(b, &g, &d);
  if (st == GCC_OK)
    st = gcc_infer_shapes(g, &d);
  EXPECT_NE(st, GCC_OK);
  EXPECT_NE(std::string(d.msg).find("'approximate' is 'erf'"), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("node 'gelu'"), std::string::npos) << d.msg;
  gcc_graph_free(g);
}

// log_softmax along `axis`, float64.
T64 RefLogSoftmax(const T64 &x, int64_t axis) {
  T64 y = RefSoftmax(x, axis);
  for (double &v : y.v)
    v = std::log(v);
  return y;
}

TEST(ImportGrad, LogSoftmaxEveryAxis) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 3; ++rank) {
      Dims d = r.RandDims(rank, 1, 5);
      for (int64_t axis = -rank; axis < rank; ++axis) {
        GradCase c;
        c.label = "LogSoftmax " + Str(d) + " axis " + std::to_string(axis);
        c.params.push_back({"X", d, r.F(Numel(d), -2, 2)});
        c.build = [axis](gcc_builder *b, const Ids &v) {
          int y = Op(b, GCC_OP_LOG_SOFTMAX, "lsm", {v.at("X")});
          gcc_build_set_int(b, y, "axis", axis);
          return y;
        };
        c.ref = [axis](const Env &e) { return RefLogSoftmax(e.at("X"), axis); };
        c.bwd_ops = {GCC_OP_LOG_SOFTMAX_GRAD};
        c.cuda = seed == kSeeds[0] && rank == 3 && axis == -1;
        RunGradCase(c, seed);
      }
    }
  }
}

// ONNX LRN in float64 (window [c - (size-1)/2, c + size/2], clipped).
T64 RefLrn(const T64 &x, int64_t size, double alpha, double beta, double bias) {
  int64_t N = x.dims[0], C = x.dims[1], inner = Numel(x.dims) / (N * C);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  T64 y = x;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t q = 0; q < inner; ++q) {
        double sq = 0;
        for (int64_t k = std::max<int64_t>(0, c - lo); k <= std::min(C - 1, c + hi); ++k) {
          double v = x.v[(n * C + k) * inner + q];
          sq += v * v;
        }
        int64_t at = (n * C + c) * inner + q;
        y.v[at] = x.v[at] / std::pow(bias + alpha / size * sq, beta);
      }
  return y;
}

TEST(ImportGrad, LrnOddAndEvenSizes) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int64_t size : {1, 2, 3, 4, 5}) {
      Dims d = {r.I(1, 2), r.I(2, 6), r.I(1, 3), r.I(1, 3)};
      double alpha = 0.5, beta = 0.75, bias = 1.5;
      GradCase c;
      c.label = "LRN " + Str(d) + " size " + std::to_string(size);
      c.params.push_back({"X", d, r.F(Numel(d), -2, 2)});
      c.build = [=](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_LRN, "lrn", {v.at("X")});
        gcc_build_set_int(b, y, "size", size);
        gcc_build_set_float(b, y, "alpha", static_cast<float>(alpha));
        gcc_build_set_float(b, y, "beta", static_cast<float>(beta));
        gcc_build_set_float(b, y, "bias", static_cast<float>(bias));
        return y;
      };
      c.ref = [=](const Env &e) { return RefLrn(e.at("X"), size, alpha, beta, bias); };
      c.bwd_ops = {GCC_OP_LRN_GRAD};
      c.cuda = seed == kSeeds[0] && (size == 3 || size == 4);
      RunGradCase(c, seed);
    }
  }
}

TEST(ImportGrad, ConcatEveryAxisWithAnInput) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 3; ++rank) {
      Dims base = r.RandDims(rank, 1, 4);
      for (int64_t axis = 0; axis < rank; ++axis) {
        Dims da = base, db = base, dc = base;
        da[axis] = r.I(1, 3);
        db[axis] = r.I(1, 3);
        dc[axis] = r.I(1, 3);
        GradCase c;
        c.label = "Concat " + Str(da) + Str(db) + Str(dc) + " axis " + std::to_string(axis);
        c.params.push_back({"A", da, r.F(Numel(da))});
        c.inputs.push_back(FloatInput("B", db, r.F(Numel(db))));
        c.params.push_back({"C", dc, r.F(Numel(dc))});
        int64_t ax = axis - (seed % 2 ? rank : 0); // negative axes too
        c.build = [ax](gcc_builder *b, const Ids &v) {
          int y = Op(b, GCC_OP_CONCAT, "cat", {v.at("A"), v.at("B"), v.at("C")});
          gcc_build_set_int(b, y, "axis", ax);
          return y;
        };
        c.ref = [axis](const Env &e) {
          const T64 *in[3] = {&e.at("A"), &e.at("B"), &e.at("C")};
          Dims od = in[0]->dims;
          od[axis] = 0;
          for (const T64 *t : in)
            od[axis] += t->dims[axis];
          int64_t outer = 1, inner = 1;
          for (int64_t i = 0; i < axis; ++i)
            outer *= od[i];
          for (size_t i = axis + 1; i < od.size(); ++i)
            inner *= od[i];
          T64 y = Zeros(od);
          int64_t off = 0;
          for (const T64 *t : in) {
            int64_t len = t->dims[axis] * inner;
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t j = 0; j < len; ++j)
                y.v[o * od[axis] * inner + off + j] = t->v[o * len + j];
            off += len;
          }
          return y;
        };
        c.bwd_ops = {GCC_OP_PAD};
        c.cuda = seed == kSeeds[0] && rank == 3;
        RunGradCase(c, seed);
      }
    }
  }
}

// DenseNet-121 concatenates up to 25 inputs (issue 30): no arity limit in
// the loader, the importer or autodiff. 25 parameters of [2, k] along axis 1.
TEST(ImportGrad, ConcatOfTwentyFiveInputs) {
  constexpr int kN = 25;
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    GradCase c;
    c.label = "Concat of 25 inputs, axis 1";
    std::vector<std::string> names;
    for (int k = 0; k < kN; ++k) {
      names.push_back("P" + std::to_string(k));
      Dims dk = {2, r.I(1, 3)};
      c.params.push_back({names.back(), dk, r.F(Numel(dk))});
    }
    c.build = [names](gcc_builder *b, const Ids &v) {
      std::vector<int> ins;
      for (const std::string &n : names)
        ins.push_back(v.at(n));
      int y = Op(b, GCC_OP_CONCAT, "cat", ins);
      gcc_build_set_int(b, y, "axis", 1);
      return y;
    };
    c.ref = [names](const Env &e) {
      Dims od = {2, 0};
      for (const std::string &n : names)
        od[1] += e.at(n).dims[1];
      T64 y = Zeros(od);
      int64_t off = 0;
      for (const std::string &n : names) {
        const T64 &t = e.at(n);
        for (int64_t o = 0; o < 2; ++o)
          for (int64_t j = 0; j < t.dims[1]; ++j)
            y.v[o * od[1] + off + j] = t.v[o * t.dims[1] + j];
        off += t.dims[1];
      }
      return y;
    };
    c.bwd_ops = {GCC_OP_PAD};
    c.cuda = seed == kSeeds[0];
    RunGradCase(c, seed);
  }
}

TEST(ImportGrad, TransposeRandomPermutations) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 2; rank <= 4; ++rank) {
      Dims d = r.RandDims(rank, 1, 4);
      Dims perm(rank);
      for (int i = 0; i < rank; ++i)
        perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed * 31 + rank));
      GradCase c;
      c.label = "Transpose " + Str(d) + " perm " + Str(perm);
      c.params.push_back({"X", d, r.F(Numel(d))});
      c.build = [perm](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_TRANSPOSE, "tr", {v.at("X")});
        SetInts(b, y, "perm", perm);
        return y;
      };
      c.ref = [perm](const Env &e) {
        const T64 &x = e.at("X");
        Dims od(perm.size());
        for (size_t i = 0; i < perm.size(); ++i)
          od[i] = x.dims[perm[i]];
        T64 y = Zeros(od);
        for (int64_t o = 0; o < Numel(od); ++o) {
          int64_t rem = o, src = 0;
          std::vector<int64_t> idx(od.size());
          for (size_t k = od.size(); k-- > 0;) {
            idx[k] = rem % od[k];
            rem /= od[k];
          }
          std::vector<int64_t> xi(od.size());
          for (size_t i = 0; i < od.size(); ++i)
            xi[perm[i]] = idx[i];
          for (size_t k = 0; k < od.size(); ++k)
            src = src * x.dims[k] + xi[k];
          y.v[o] = x.v[src];
        }
        return y;
      };
      c.bwd_ops = {GCC_OP_TRANSPOSE};
      c.cuda = seed == kSeeds[0] && rank == 4;
      RunGradCase(c, seed);
    }
  }
}

TEST(ImportGrad, PadConstantPositiveAndNegativePads) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 4; ++rank) {
      Dims d = r.RandDims(rank, 3, 4);
      Dims pads(2 * rank);
      for (int i = 0; i < rank; ++i) {
        pads[i] = r.I(-1, 2);
        pads[i + rank] = r.I(-1, 2);
      }
      GradCase c;
      c.label = "Pad " + Str(d) + " pads " + Str(pads);
      c.params.push_back({"X", d, r.F(Numel(d))});
      c.build = [pads](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_PAD, "pad", {v.at("X")});
        SetInts(b, y, "pads", pads);
        gcc_build_set_float(b, y, "value", 0.25f);
        return y;
      };
      c.ref = [pads, rank](const Env &e) {
        const T64 &x = e.at("X");
        Dims od(rank);
        for (int i = 0; i < rank; ++i)
          od[i] = x.dims[i] + pads[i] + pads[i + rank];
        T64 y = Zeros(od);
        for (int64_t o = 0; o < Numel(od); ++o) {
          int64_t rem = o, src = 0;
          bool inside = true;
          std::vector<int64_t> idx(rank);
          for (int k = rank; k-- > 0;) {
            idx[k] = rem % od[k];
            rem /= od[k];
          }
          for (int k = 0; k < rank; ++k) {
            int64_t t = idx[k] - pads[k];
            inside &= t >= 0 && t < x.dims[k];
            src = src * x.dims[k] + t;
          }
          y.v[o] = inside ? x.v[src] : 0.25;
        }
        return y;
      };
      c.bwd_ops = {GCC_OP_PAD};
      c.cuda = seed == kSeeds[0] && rank == 4;
      RunGradCase(c, seed);
    }
  }
}

// torch.nn.functional.conv_transpose2d in float64: every X[n,c,iy,ix]
// scatters X * W[c, m', i, j] to Y[n, g*Mg + m', iy*sh - pt + i*dh, ix*sw -
// pl + j*dw] (c in group g).
T64 RefConvTranspose(const T64 &X, const T64 &W, const T64 *B, const Win &w, int64_t group,
                     int64_t oph, int64_t opw) {
  int64_t N = X.dims[0], C = X.dims[1], H = X.dims[2], Wd = X.dims[3], Mg = W.dims[1];
  int64_t M = Mg * group, Cg = C / group;
  int64_t oh = (H - 1) * w.sh - w.pt - w.pb + w.dh * (w.kh - 1) + 1 + oph;
  int64_t ow = (Wd - 1) * w.sw - w.pl - w.pr + w.dw * (w.kw - 1) + 1 + opw;
  T64 y = Zeros({N, M, oh, ow});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t p = 0; p < oh * ow; ++p)
        y.v[(n * M + m) * oh * ow + p] = B ? B->v[m] : 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t iy = 0; iy < H; ++iy)
        for (int64_t ix = 0; ix < Wd; ++ix)
          for (int64_t mm = 0; mm < Mg; ++mm)
            for (int64_t i = 0; i < w.kh; ++i)
              for (int64_t j = 0; j < w.kw; ++j) {
                int64_t oy = iy * w.sh - w.pt + i * w.dh, ox = ix * w.sw - w.pl + j * w.dw;
                if (oy < 0 || oy >= oh || ox < 0 || ox >= ow)
                  continue;
                int64_t m = (c / Cg) * Mg + mm;
                y.v[((n * M + m) * oh + oy) * ow + ox] +=
                    X.v[((n * C + c) * H + iy) * Wd + ix] *
                    W.v[((c * Mg + mm) * w.kh + i) * w.kw + j];
              }
  return y;
}

TEST(ImportGrad, ConvTransposeStridesPadsGroupsOutputPadding) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rep = 0; rep < 4; ++rep) {
      int64_t group = rep == 2 ? 2 : 1, N = r.I(1, 2), C = group * r.I(1, 2), Mg = r.I(1, 3),
              H = r.I(2, 4), Wd = r.I(2, 4);
      Win w;
      w.kh = r.I(1, 3);
      w.kw = r.I(1, 3);
      w.sh = r.I(1, 3);
      w.sw = r.I(1, 3);
      w.dh = r.I(1, 2);
      w.dw = r.I(1, 2);
      w.pt = r.I(0, (w.kh - 1) * w.dh / 2);
      w.pb = r.I(0, (w.kh - 1) * w.dh / 2);
      w.pl = r.I(0, (w.kw - 1) * w.dw / 2);
      w.pr = r.I(0, (w.kw - 1) * w.dw / 2);
      int64_t oph = r.I(0, w.sh - 1), opw = r.I(0, w.sw - 1);
      bool bias = rep != 1;
      GradCase c;
      c.label = "ConvTranspose X" + Str({N, C, H, Wd}) + " W" + Str({C, Mg, w.kh, w.kw}) + " " +
                w.Str() + " group " + std::to_string(group) + " output_padding " +
                std::to_string(oph) + "," + std::to_string(opw) + (bias ? " +B" : "");
      c.params.push_back({"X", {N, C, H, Wd}, r.F(N * C * H * Wd)});
      c.params.push_back({"W", {C, Mg, w.kh, w.kw}, r.F(C * Mg * w.kh * w.kw)});
      if (bias)
        c.params.push_back({"B", {Mg * group}, r.F(Mg * group)});
      c.build = [=](gcc_builder *b, const Ids &v) {
        std::vector<int> ins = {v.at("X"), v.at("W")};
        if (bias)
          ins.push_back(v.at("B"));
        int y = Op(b, GCC_OP_CONV_TRANSPOSE, "convt", ins);
        SetWindow(b, y, w, false);
        if (group != 1)
          gcc_build_set_int(b, y, "group", group);
        if (oph || opw)
          SetInts(b, y, "output_padding", {oph, opw});
        return y;
      };
      c.ref = [=](const Env &e) {
        return RefConvTranspose(e.at("X"), e.at("W"), bias ? &e.at("B") : nullptr, w, group, oph,
                                opw);
      };
      c.bwd_ops = {GCC_OP_CONV, GCC_OP_CONV_GRAD_FILTER};
      if (bias)
        c.bwd_ops.push_back(GCC_OP_CONV_GRAD_BIAS);
      c.cuda = seed == kSeeds[0] && rep % 2 == 0;
      RunGradCase(c, seed);
    }
  }
}

TEST(ImportGrad, SharedValuesAndResidualAddsAccumulate) {
  // h = A * B; y = Add(Sigmoid(h), Tanh(h)) + h (h has three consumers, the
  // last a residual add); z = Concat(y, A) on the last axis, so A reaches the
  // loss on three paths.
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    int64_t N = r.I(2, 4), C = r.I(2, 4);
    GradCase c;
    c.label = "shared and residual " + Str({N, C});
    c.params.push_back({"A", {N, C}, r.F(N * C)});
    c.params.push_back({"B", {C}, r.F(C)});
    c.build = [](gcc_builder *b, const Ids &v) {
      int h = Op(b, GCC_OP_MUL, "h", {v.at("A"), v.at("B")});
      int s = Op(b, GCC_OP_SIGMOID, "s", {h});
      int t = Op(b, GCC_OP_TANH, "t", {h});
      int st = Op(b, GCC_OP_ADD, "st", {s, t});
      int y = Op(b, GCC_OP_ADD, "res", {st, h});
      int z = Op(b, GCC_OP_CONCAT, "cat", {y, v.at("A")});
      gcc_build_set_int(b, z, "axis", -1);
      return z;
    };
    c.ref = [](const Env &e) {
      const T64 &A = e.at("A");
      T64 h = RefBinary(A, e.at("B"), GCC_OP_MUL);
      T64 z = Zeros({A.dims[0], 2 * A.dims[1]});
      int64_t C = A.dims[1];
      for (int64_t i = 0; i < A.dims[0]; ++i)
        for (int64_t j = 0; j < C; ++j) {
          double hv = h.v[i * C + j];
          z.v[i * 2 * C + j] = 1.0 / (1.0 + std::exp(-hv)) + std::tanh(hv) + hv;
          z.v[i * 2 * C + C + j] = A.v[i * C + j];
        }
      return z;
    };
    c.bwd_ops = {GCC_OP_SIGMOID_GRAD, GCC_OP_TANH_GRAD, GCC_OP_ADD, GCC_OP_PAD,
                 GCC_OP_REDUCE_SUM_TO};
    c.cuda = seed == kSeeds[0];
    RunGradCase(c, seed);
  }
}

TEST(ImportGrad, PadInEdgeModeHasNoGradientAndSaysSo) {
  gcc_builder *b = gcc_builder_new("edge", 1);
  ASSERT_NE(b, nullptr);
  Dims d = {2, 3};
  std::vector<float> x(6, 0.5f);
  int p = gcc_build_param(b, "X", 2, d.data(), x.data());
  int y = Op(b, GCC_OP_PAD, "edge_pad", {p});
  SetInts(b, y, "pads", {0, 1, 0, 1});
  SetString(b, y, "mode", "edge");
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 2, Dims{2, 5}.data());
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts = {};
  ts.loss = "loss";
  ts.opt.kind = GCC_OPT_SGD;
  ts.batch_size = 1;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *raw = nullptr;
  gcc_diag dg = {};
  ASSERT_EQ(gcc_builder_finish(b, &raw, &dg), GCC_OK) << dg.msg;
  GraphPtr model(raw);
  Storage s;
  s.param["X"] = x;
  s.grad["X"].assign(6, 0.0f);
  gcc_options o = {};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 1;
  o.opt.kind = GCC_OPT_NONE;
  gcc_plan *plan_raw = nullptr;
  gcc_plan_config cfg{};
  cfg.threads = 1;
  EXPECT_EQ(gcc_plan_compile(model.get(), &o, &cfg, BindPersistent, &s, &plan_raw, &dg),
            GCC_ERR_UNSUPPORTED);
  PlanPtr plan(plan_raw);
  EXPECT_NE(std::strstr(dg.msg, "edge_pad"), nullptr) << dg.msg;
  EXPECT_NE(std::strstr(dg.msg, "'edge'"), nullptr) << dg.msg;
}

// The internal gradient ops directly, against their formulas.
TEST(InternalOps, ImportGradOpsMatchTheirFormulas) {
  Rng r(11);
  Dims d = {3, 4};
  int64_t n = Numel(d);
  InputSpec dy = FloatInput("dy", d, r.F(n, -2, 2));
  InputSpec y = FloatInput("y", d, r.F(n, 0.1, 0.9));
  InputSpec x = FloatInput("x", d, r.F(n, -8, 8));
  x.f[0] = -1.0f; // exactly the Clip bound: the gradient passes (clamp_backward)
  x.f[1] = 1.0f;
  x.f[2] = 0.0f; // LeakyRelu at 0: dY
  struct K {
    int op;
    bool uses_x;
    std::function<double(double, double)> f;
  } ks[] = {
      {GCC_OP_SIGMOID_GRAD, false, [](double g, double v) { return g * v * (1 - v); }},
      {GCC_OP_TANH_GRAD, false, [](double g, double v) { return g * (1 - v * v); }},
      {GCC_OP_SQRT_GRAD, false, [](double g, double v) { return g / (2 * v); }},
      {GCC_OP_LEAKY_RELU_GRAD, true, [](double g, double v) { return v < 0 ? 0.3 * g : g; }},
      {GCC_OP_CLIP_GRAD, true, [](double g, double v) { return v >= -1 && v <= 1 ? g : 0.0; }},
  };
  for (const K &k : ks) {
    DirectCase c;
    c.label = gcc_op_name(k.op);
    c.inputs = {dy, k.uses_x ? x : y};
    int op = k.op;
    c.build = [op](gcc_builder *b, const Ids &v) {
      int out = Op(b, op, "g", {v.at("dy"), v.count("x") ? v.at("x") : v.at("y")});
      if (op == GCC_OP_LEAKY_RELU_GRAD)
        gcc_build_set_float(b, out, "alpha", 0.3f);
      if (op == GCC_OP_CLIP_GRAD) {
        gcc_build_set_float(b, out, "min", -1.0f);
        gcc_build_set_float(b, out, "max", 1.0f);
      }
      return out;
    };
    c.expect = Zeros(d);
    const InputSpec &second = k.uses_x ? x : y;
    for (int64_t i = 0; i < n; ++i)
      c.expect.v[i] = k.f(dy.f[i], second.f[i]);
    RunDirect(c);
  }
}

// ---- BatchNormalization (issue 15) -------------------------------------------------------

// nn.BatchNorm2d in training, float64: the batch's mean and biased variance.
T64 RefBatchNormTrain(const T64 &x, const T64 &scale, const T64 &bias, double eps,
                      std::vector<double> *mean, std::vector<double> *var) {
  int64_t N = x.dims[0], C = x.dims[1], inner = Numel(x.dims) / (N * C);
  double m = static_cast<double>(N * inner);
  T64 y = x;
  mean->assign(C, 0);
  var->assign(C, 0);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t q = 0; q < inner; ++q)
        s += x.v[(n * C + c) * inner + q];
    double mu = s / m;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t q = 0; q < inner; ++q)
        v += (x.v[(n * C + c) * inner + q] - mu) * (x.v[(n * C + c) * inner + q] - mu);
    v /= m;
    (*mean)[c] = mu;
    (*var)[c] = v;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t q = 0; q < inner; ++q) {
        int64_t at = (n * C + c) * inner + q;
        y.v[at] = scale.v[c] * (x.v[at] - mu) / std::sqrt(v + eps) + bias.v[c];
      }
  }
  return y;
}

TEST(BatchNormGrad, TrainingFormGradientsAndRunningStatistics) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rep = 0; rep < 3; ++rep) {
      int64_t C = r.I(1, 3);
      Dims d = rep == 0 ? Dims{r.I(3, 6), C} : Dims{r.I(1, 3), C, r.I(2, 3), r.I(2, 3)};
      float momentum = rep == 2 ? 0.75f : 0.9f; // ONNX's default 0.9 = PyTorch's 0.1
      float eps = rep == 1 ? 1e-3f : 1e-5f;
      GradCase c;
      c.label = "BatchNormalization training " + Str(d) + " momentum " + std::to_string(momentum);
      c.params.push_back({"X", d, r.F(Numel(d), -2, 2)});
      c.params.push_back({"scale", {C}, r.F(C, 0.5, 1.5)});
      c.params.push_back({"B", {C}, r.F(C)});
      std::vector<float> rm = r.F(C), rv = r.F(C, 0.5, 2);
      c.states.push_back({"rm", {C}, rm});
      c.states.push_back({"rv", {C}, rv});
      c.build = [=](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_BATCH_NORM, "bn",
                   {v.at("X"), v.at("scale"), v.at("B"), v.at("rm"), v.at("rv")});
        if (rep == 2)
          gcc_build_set_float(b, y, "momentum", momentum);
        if (rep == 1)
          gcc_build_set_float(b, y, "epsilon", eps);
        return y;
      };
      c.ref = [=](const Env &e) {
        std::vector<double> mean, var;
        return RefBatchNormTrain(e.at("X"), e.at("scale"), e.at("B"), eps, &mean, &var);
      };
      const std::vector<float> x0 = c.params[0].data;
      c.after = [=](const std::map<std::string, const float *> &vals, const char *where) {
        std::vector<double> mean, var;
        RefBatchNormTrain(FromFloats(d, x0), Zeros({C}), Zeros({C}), eps, &mean, &var);
        double m = static_cast<double>(Numel(d) / C), mom = momentum;
        for (int64_t k = 0; k < C; ++k) {
          double want_m = mom * rm[k] + (1 - mom) * mean[k];
          double want_v = mom * rv[k] + (1 - mom) * var[k] * m / (m - 1);
          EXPECT_TRUE(Close(vals.at("rm")[k], want_m, kFwdAtol, kFwdRtol, &g_fwd))
              << where << ": running_mean[" << k << "] = " << vals.at("rm")[k] << ", want "
              << want_m;
          EXPECT_TRUE(Close(vals.at("rv")[k], want_v, kFwdAtol, kFwdRtol, &g_fwd))
              << where << ": running_var[" << k << "] = " << vals.at("rv")[k] << ", want "
              << want_v;
        }
      };
      c.bwd_ops = {GCC_OP_BATCH_NORM_GRAD};
      c.cuda = seed == kSeeds[0];
      RunGradCase(c, seed);
    }
  }
}

TEST(BatchNormGrad, EvaluationUsesTheRunningEstimates) {
  Rng r(5);
  int64_t N = 2, C = 3, H = 2, W = 2;
  Dims d = {N, C, H, W};
  std::vector<float> scale = r.F(C, 0.5, 1.5), bias = r.F(C), rm = r.F(C), rv = r.F(C, 0.5, 2);
  DirectCase c;
  c.label = "BatchNormalization evaluation";
  c.inputs = {FloatInput("X", d, r.F(Numel(d), -2, 2))};
  c.build = [&](gcc_builder *b, const Ids &v) {
    int ps = gcc_build_const(b, "scale", GCC_DT_FLOAT32, 1, &C, scale.data());
    int pb = gcc_build_const(b, "B", GCC_DT_FLOAT32, 1, &C, bias.data());
    int pm = gcc_build_const(b, "rm", GCC_DT_FLOAT32, 1, &C, rm.data());
    int pv = gcc_build_const(b, "rv", GCC_DT_FLOAT32, 1, &C, rv.data());
    return Op(b, GCC_OP_BATCH_NORM, "bn", {v.at("X"), ps, pb, pm, pv});
  };
  c.expect = Zeros(d);
  for (int64_t i = 0; i < Numel(d); ++i) {
    int64_t k = (i / (H * W)) % C;
    c.expect.v[i] = scale[k] * (c.inputs[0].f[i] - rm[k]) / std::sqrt(rv[k] + 1e-5f) + bias[k];
  }
  RunDirect(c);
}

TEST(BatchNormGrad, RunningStatisticsGetNoGradientAndNoUpdate) {
  // SGD on a BatchNormalization: scale and B get gradients and updates, the
  // running statistics none (they are state), and the training graph says so
  gcc_builder *b = gcc_builder_new("bn_state", 1);
  ASSERT_NE(b, nullptr);
  int64_t C = 2;
  Dims d = {4, C};
  std::vector<float> one(C, 1.0f), zero(C, 0.0f);
  int x = gcc_build_input(b, "X", GCC_DT_FLOAT32, 2, d.data());
  int ps = gcc_build_param(b, "scale", 1, &C, one.data());
  int pb = gcc_build_param(b, "B", 1, &C, zero.data());
  int pm = gcc_build_param(b, "rm", 1, &C, zero.data());
  int pv = gcc_build_param(b, "rv", 1, &C, one.data());
  b->g->values[pm].state = b->g->values[pv].state = 1;
  int y = Op(b, GCC_OP_BATCH_NORM, "bn", {x, ps, pb, pm, pv});
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 2, d.data());
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts = {};
  ts.loss = "loss";
  ts.opt.kind = GCC_OPT_SGD;
  ts.opt.lr = 0.1f;
  ts.batch_size = 4;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *raw = nullptr;
  gcc_diag dg = {};
  ASSERT_EQ(gcc_builder_finish(b, &raw, &dg), GCC_OK) << dg.msg;
  GraphPtr model(raw);
  Storage s;
  s.param["scale"] = one;
  s.param["B"] = zero;
  s.param["rm"] = zero;
  s.param["rv"] = one;
  for (const char *p : {"scale", "B", "rm", "rv"})
    s.grad[p].assign(C, std::numeric_limits<float>::quiet_NaN());
  gcc_options o = {};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 4;
  o.opt = model->training.opt;
  gcc_plan *plan_raw = nullptr;
  gcc_plan_config cfg{};
  cfg.threads = 1;
  ASSERT_EQ(gcc_plan_compile(model.get(), &o, &cfg, BindPersistent, &s, &plan_raw, &dg), GCC_OK)
      << dg.msg;
  PlanPtr plan(plan_raw);
  const gcc_graph *cg = gcc_plan_graph(plan.get());
  std::map<std::string, int> grads, updates;
  for (int v = 0; v < cg->n_values; ++v)
    if (cg->values[v].kind == GCC_VALUE_GRAD && cg->values[v].param_of >= 0)
      grads[cg->values[cg->values[v].param_of].name]++;
  for (int i = 0; i < cg->n_nodes; ++i)
    if (gcc_op(cg->nodes[i].op)->flags & GCC_OPF_OPTIMIZER)
      updates[cg->values[cg->nodes[i].inputs[0]].name]++;
  EXPECT_EQ(grads["scale"], 1);
  EXPECT_EQ(grads["B"], 1);
  EXPECT_EQ(grads.count("rm") + grads.count("rv"), 0u);
  EXPECT_EQ(updates["scale"], 1);
  EXPECT_EQ(updates["B"], 1);
  EXPECT_EQ(updates.count("rm") + updates.count("rv"), 0u);
  std::vector<float> xv = {1, 2, 3, 4, -1, 0, 1, 5}, tv(8, 0.5f);
  ASSERT_EQ(gcc_plan_bind_input(plan.get(), "X", xv.data(), &dg), GCC_OK) << dg.msg;
  ASSERT_EQ(gcc_plan_bind_input(plan.get(), "t", tv.data(), &dg), GCC_OK) << dg.msg;
  ASSERT_EQ(gcc_plan_run(plan.get(), 0, &dg), GCC_OK) << dg.msg;
  // channel 0 holds 1, 3, -1, 1: mean 1, unbiased variance 8/3
  EXPECT_NEAR(s.param["rm"][0], 0.1 * 1.0, 1e-6);
  EXPECT_NEAR(s.param["rv"][0], 0.9 + 0.1 * 8.0 / 3.0, 1e-6);
  EXPECT_NE(s.param["B"][0], 0.0f); // updated by SGD
}

// ---- Dropout (issue 15) ------------------------------------------------------------------

// The documented mask of a Dropout node (graph/ops.h, graph/philox.h),
// written out from the Philox-4x32-10 block function (checked against
// Random123's known answers in tests/philox_test.cc): element i of node
// `name` at `step` takes word i % 4 of Philox({i / 4 (low, high), step
// (low, high)}) under the node's key and is kept when that word is >=
// floor(ratio 2^32). Returns 1 (kept) or 0 per element.
std::vector<int> RefDropoutMask(uint64_t run_seed, const char *name, float ratio, int64_t n,
                                int64_t step) {
  const uint64_t key = gcc_dropout_key(run_seed, name, 0);
  const double thr = ratio >= 1 ? 4294967296.0 : std::floor((double)ratio * 4294967296.0);
  std::vector<int> m(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t q = static_cast<uint64_t>(i) / 4, s = static_cast<uint64_t>(step);
    const unsigned ctr[4] = {static_cast<unsigned>(q), static_cast<unsigned>(q >> 32),
                             static_cast<unsigned>(s), static_cast<unsigned>(s >> 32)};
    const unsigned k[2] = {static_cast<unsigned>(key), static_cast<unsigned>(key >> 32)};
    unsigned out[4];
    gcc_philox4x32_10(ctr, k, out);
    m[i] = static_cast<double>(out[i % 4]) >= thr;
  }
  return m;
}

// nn.Dropout in training with a given mask, float64: x * m / (1 - p).
T64 RefDropout(const T64 &x, const std::vector<int> &m, double p) {
  T64 y = x;
  for (size_t i = 0; i < y.v.size(); ++i)
    y.v[i] = m[i] ? x.v[i] / (1.0 - p) : 0.0;
  return y;
}

TEST(DropoutGrad, TrainingFormGradientWithItsMask) {
  // the gradcheck's training spec has seed 0: the mask of node "drop" at step 0
  const float ratios[] = {0.5f, 0.2f, 0.0f, 1.0f};
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rep = 0; rep < 4; ++rep) {
      float p = ratios[rep];
      Dims d = rep % 2 == 0 ? Dims{r.I(2, 5), r.I(3, 7)} : Dims{2, 3, r.I(1, 3), r.I(2, 5)};
      GradCase c;
      c.label = "Dropout training " + Str(d) + " ratio " + std::to_string(p);
      c.params.push_back({"X", d, r.F(Numel(d), -2, 2)});
      const std::vector<int> mask = RefDropoutMask(0, "drop", p, Numel(d), 0);
      int kept = 0;
      for (int k : mask)
        kept += k;
      if (p == 0.0f) {
        EXPECT_EQ(kept, Numel(d)) << "ratio 0 keeps everything";
      }
      if (p == 1.0f) {
        EXPECT_EQ(kept, 0) << "ratio 1 drops everything";
      }
      c.build = [=](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_DROPOUT, "drop", {v.at("X")});
        gcc_build_set_float(b, y, "ratio", p);
        return y;
      };
      c.ref = [=](const Env &e) { return RefDropout(e.at("X"), mask, p); };
      c.bwd_ops = {GCC_OP_DROPOUT_GRAD};
      c.cuda = seed == kSeeds[0];
      RunGradCase(c, seed);
    }
  }
}

TEST(DropoutGrad, EvaluationIsTheIdentity) {
  Rng r(9);
  Dims d = {3, 5};
  DirectCase c;
  c.label = "Dropout evaluation";
  c.inputs = {FloatInput("X", d, r.F(Numel(d), -2, 2))};
  c.build = [](gcc_builder *b, const Ids &v) {
    int y = Op(b, GCC_OP_DROPOUT, "drop", {v.at("X")});
    gcc_build_set_float(b, y, "ratio", 0.9f);
    return y;
  };
  c.expect = FromFloats(d, c.inputs[0].f);
  RunDirect(c);
}

// The CPU kernel of a Dropout in training form (what autodiff makes: ratio
// p, key `key`) at optimizer step `step`: its output for all-ones input.
std::vector<float> DropoutOnes(int64_t n, float p, int64_t key, int64_t step) {
  std::vector<float> x(static_cast<size_t>(n), 1.0f), y(static_cast<size_t>(n), -1.0f);
  gcc_attr av[4] = {};
  av[DROPOUT_RATIO].type = GCC_ATTR_FLOAT;
  av[DROPOUT_RATIO].f = p;
  av[DROPOUT_SEED].type = av[DROPOUT_TRAINING].type = av[DROPOUT_KEY].type = GCC_ATTR_INT;
  av[DROPOUT_TRAINING].i = 1;
  av[DROPOUT_KEY].i = key;
  gcc_node nd = {};
  nd.op = GCC_OP_DROPOUT;
  nd.av = av;
  nd.n_av = 4;
  gcc_tensor tin = {}, tout = {};
  tin.dtype = tout.dtype = GCC_DT_FLOAT32;
  tin.shape.ndim = tout.shape.ndim = 1;
  tin.shape.dims[0] = tout.shape.dims[0] = n;
  tin.numel = tout.numel = n;
  tin.data = x.data();
  tout.data = y.data();
  gcc_tensor *ins[1] = {&tin}, *outs[1] = {&tout};
  gcc_cpu_ctx ctx = {};
  ctx.max_threads = 1;
  ctx.optimizer_step = step;
  ctx.rng_step = step; // Dropout's counter (the plan sets it from the step)
  gcc_kernel_args a = {};
  a.node = &nd;
  a.in = ins;
  a.n_in = 1;
  a.out = outs;
  a.n_out = 1;
  a.ctx = &ctx;
  EXPECT_EQ(gcc_cpu_dropout(&a), GCC_OK);
  return y;
}

TEST(DropoutGrad, MaskRateScaleAndStepDependence) {
  const int64_t n = 1 << 16;
  for (float p : {0.1f, 0.5f, 0.8f}) {
    SCOPED_TRACE("ratio " + std::to_string(p));
    std::vector<float> a = DropoutOnes(n, p, 12345, 7);
    ASSERT_EQ(a.size(), static_cast<size_t>(n));
    const float scale = 1.0f / static_cast<float>(1.0 - static_cast<double>(p));
    int64_t dropped = 0;
    for (float v : a) {
      dropped += v == 0.0f;
      if (v != 0.0f) {
        ASSERT_EQ(v, scale) << "a kept element is scaled by 1 / (1 - p)";
      }
    }
    // the dropped share is Binomial(n, p): within 5 standard deviations
    double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(dropped), n * p, 5 * sd);
    // the same key and step: the same mask; another step, the high word of
    // the step, or another key: another mask (agreeing on about p^2 + (1-p)^2)
    EXPECT_EQ(DropoutOnes(n, p, 12345, 7), a);
    for (const auto &other :
         {DropoutOnes(n, p, 12345, 8), DropoutOnes(n, p, 12345, 7 + (int64_t(1) << 32)),
          DropoutOnes(n, p, 12346, 7)}) {
      ASSERT_EQ(other.size(), a.size());
      int64_t same = 0;
      for (int64_t i = 0; i < n; ++i)
        same += (a[i] == 0.0f) == (other[i] == 0.0f);
      double want = p * p + (1 - p) * (1 - p), sd2 = std::sqrt(n * want * (1 - want));
      EXPECT_NEAR(static_cast<double>(same), n * want, 5 * sd2);
    }
  }
  // ratio 0 keeps every element as it is, ratio 1 gives zeros
  for (float v : DropoutOnes(1001, 0.0f, 1, 0))
    ASSERT_EQ(v, 1.0f);
  for (float v : DropoutOnes(1001, 1.0f, 1, 0))
    ASSERT_EQ(v, 0.0f);
}

// The CPU plan and the CUDA plan on the host backend (generated kernels
// compiled from their CUDA C with the shim) draw bitwise the same mask, at
// several steps (the high word of the step too), for a size that is not a
// multiple of the Philox block: the same Dropout output, bit for bit, and
// the same dropped elements in the gradient.
TEST(DropoutGrad, CpuAndHostCudaPlansDrawTheSameMaskBitwise) {
  if (!BuiltWithNvrtc())
    GTEST_SKIP() << "built without NVRTC (--config=cpu_only): no CUDA plan";
  Rng r(21);
  Dims d = {5, 7, 3};
  const int64_t n = Numel(d);
  const float p = 0.37f;
  gcc_builder *b = gcc_builder_new("dropout_bitwise", 1);
  std::vector<float> x0 = r.F(n, -2, 2, 0.1), t0 = r.F(n);
  int x = gcc_build_param(b, "X", 3, d.data(), x0.data());
  int y = Op(b, GCC_OP_DROPOUT, "drop", {x});
  gcc_build_set_float(b, y, "ratio", p);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 3, d.data());
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts = {};
  ts.loss = "loss";
  ts.prediction = "drop.out";
  ts.opt.kind = GCC_OPT_SGD;
  ts.batch_size = 1;
  ts.epochs = 1;
  ts.seed = 0xfeedface12345ull;
  gcc_build_training(b, &ts);
  gcc_graph *raw = nullptr;
  gcc_diag dg{};
  ASSERT_EQ(gcc_builder_finish(b, &raw, &dg), GCC_OK) << dg.msg;
  GraphPtr model(raw);

  Storage cs;
  cs.param["X"] = x0;
  cs.grad["X"].assign(n, std::numeric_limits<float>::quiet_NaN());
  gcc_options o = {};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 1;
  o.opt.kind = GCC_OPT_NONE;
  gcc_plan_config cfg{};
  cfg.threads = 1;
  gcc_plan *cp_raw = nullptr;
  ASSERT_EQ(gcc_plan_compile(model.get(), &o, &cfg, BindPersistent, &cs, &cp_raw, &dg), GCC_OK)
      << dg.msg;
  PlanPtr cpu(cp_raw);
  ASSERT_EQ(gcc_plan_bind_input(cpu.get(), "t", t0.data(), &dg), GCC_OK) << dg.msg;

  gcc_host_test::HostBackend *hb = SharedHostBackend();
  DeviceStorage ds{hb, &cs, {}, {}, {}};
  gcc_options od = o;
  od.device = GCC_DEV_CUDA(0);
  od.device_explicit = 1;
  od.n_cuda_devices = 1;
  FILE *quiet = std::fopen("/dev/null", "w");
  od.warn_file = quiet;
  gcc_plan_config dcfg{};
  dcfg.threads = 1;
  dcfg.readback_ring = 1;
  dcfg.device = &hb->be;
  dcfg.sm = 90;
  dcfg.sm_count = 4;
  dcfg.compile = gcc_kernel_cache_hook;
  dcfg.compile_user = gcc_test::TestKernelCache();
  gcc_plan *dp_raw = nullptr;
  gcc_status st = gcc_plan_compile(model.get(), &od, &dcfg, DeviceStorage::Bind, &ds, &dp_raw, &dg);
  if (quiet)
    std::fclose(quiet);
  PlanPtr dev(dp_raw);
  ASSERT_EQ(st, GCC_OK) << dg.msg;
  ASSERT_EQ(gcc_plan_bind_input(dev.get(), "t", t0.data(), &dg), GCC_OK) << dg.msg;
  const gcc_graph *cg = gcc_plan_graph(cpu.get());
  int key_node = cg->values[gcc_graph_find(cg, "drop.out")].producer;
  ASSERT_GE(key_node, 0);
  EXPECT_EQ(static_cast<uint64_t>(cg->nodes[key_node].av[DROPOUT_KEY].i),
            gcc_dropout_key(ts.seed, "drop", 0))
      << "the key comes from the training spec's seed and the node's name";

  for (int64_t step : {int64_t(0), int64_t(1), int64_t(5), (int64_t(1) << 33) + 2}) {
    SCOPED_TRACE("step " + std::to_string(step));
    ASSERT_EQ(gcc_plan_run(cpu.get(), step, &dg), GCC_OK) << dg.msg;
    ASSERT_EQ(gcc_plan_run(dev.get(), step, &dg), GCC_OK) << dg.msg;
    ASSERT_NE(gcc_plan_host_tensor(dev.get(), "loss", &dg), nullptr) << dg.msg; // waits
    // the prediction stays live to the end of the step; the host backend's
    // device memory is host memory
    const gcc_tensor *yc = gcc_plan_tensor(cpu.get(), "drop.out");
    const gcc_tensor *yd = gcc_plan_tensor(dev.get(), "drop.out");
    ASSERT_TRUE(yc && yd && yc->data && yd->data);
    ASSERT_EQ(yc->numel, n);
    ASSERT_EQ(yd->numel, n);
    EXPECT_EQ(std::memcmp(yc->data, yd->data, static_cast<size_t>(n) * sizeof(float)), 0)
        << "the CPU and the emulated CUDA kernel drew different masks";
    const std::vector<int> mask = RefDropoutMask(ts.seed, "drop", p, n, step);
    const float *yv = static_cast<const float *>(yc->data);
    const float *gc = cs.grad["X"].data(), *gd = ds.grad.at("X");
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool kept = yv[i] != 0.0f; // X has no zeros
      if (kept != (mask[i] != 0) && bad++ < 5)
        ADD_FAILURE() << "element " << i << " is " << (kept ? "kept" : "dropped")
                      << ", the documented Philox mask says otherwise";
      if (((gc[i] != 0.0f) != kept || (gd[i] != 0.0f) != kept) && bad++ < 5)
        ADD_FAILURE() << "dX[" << i << "] = " << gc[i] << " (CPU), " << gd[i]
                      << " (CUDA plan): the backward's mask differs from the forward's";
    }
  }
}

// ---- LayerNormalization (issue 30) --------------------------------------------------------

// torch.nn.functional.layer_norm in float64: rows of the dims before `axis`,
// each normalised by its mean and biased variance over the dims from `axis`.
T64 RefLayerNorm(const T64 &x, const T64 &scale, const T64 *bias, int64_t axis, double eps) {
  int64_t r = static_cast<int64_t>(x.dims.size());
  if (axis < 0)
    axis += r;
  int64_t D = 1;
  for (int64_t k = axis; k < r; ++k)
    D *= x.dims[k];
  int64_t rows = Numel(x.dims) / D;
  T64 y = x;
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0, v = 0;
    for (int64_t j = 0; j < D; ++j)
      s += x.v[i * D + j];
    double mu = s / static_cast<double>(D);
    for (int64_t j = 0; j < D; ++j)
      v += (x.v[i * D + j] - mu) * (x.v[i * D + j] - mu);
    double rstd = 1.0 / std::sqrt(v / static_cast<double>(D) + eps);
    for (int64_t j = 0; j < D; ++j)
      y.v[i * D + j] = (x.v[i * D + j] - mu) * rstd * scale.v[j] + (bias ? bias->v[j] : 0.0);
  }
  return y;
}

// Forward against float64 and dX, dScale, dB against central differences,
// on the CPU and (first seed) through the host-emulated CUDA plan: (B, T, C)
// over the last axis, 4-D over axis 1 and 2, 2-D over every dim (axis 0),
// without B, and epsilon other than the default.
TEST(LayerNormGrad, EveryAxisWithAndWithoutBias) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed + 40);
    for (int rep = 0; rep < 5; ++rep) {
      Dims d;
      int64_t axis = -1;
      switch (rep) {
      case 0: d = {r.I(1, 3), r.I(2, 5), r.I(3, 9)}; break; // (B, T, C), axis -1
      case 1: d = {r.I(1, 3), r.I(2, 4), r.I(2, 3), r.I(2, 3)}, axis = 1; break;
      case 2: d = {r.I(1, 3), r.I(2, 3), r.I(2, 4), r.I(2, 4)}, axis = 2; break;
      case 3: d = {r.I(2, 4), r.I(2, 5)}, axis = 0; break;   // one row
      default: d = {r.I(2, 7), r.I(3, 6)}, axis = -1; break; // no B
      }
      const bool has_b = rep != 4;
      const float eps = rep == 2 ? 1e-2f : 1e-5f;
      int64_t a = axis < 0 ? axis + static_cast<int64_t>(d.size()) : axis;
      Dims nd(d.begin() + a, d.end());
      GradCase c;
      c.label =
          "LayerNormalization " + Str(d) + " axis " + std::to_string(axis) + (has_b ? "" : " no B");
      c.params.push_back({"X", d, r.F(Numel(d), -2, 2)});
      c.params.push_back({"Scale", nd, r.F(Numel(nd), 0.5, 1.5)});
      if (has_b)
        c.params.push_back({"B", nd, r.F(Numel(nd))});
      c.build = [=](gcc_builder *b, const Ids &v) {
        std::vector<int> in = {v.at("X"), v.at("Scale")};
        if (has_b)
          in.push_back(v.at("B"));
        int y = Op(b, GCC_OP_LAYER_NORM, "ln", in);
        if (axis != -1)
          gcc_build_set_int(b, y, "axis", axis);
        if (eps != 1e-5f)
          gcc_build_set_float(b, y, "epsilon", eps);
        return y;
      };
      c.ref = [=](const Env &e) {
        return RefLayerNorm(e.at("X"), e.at("Scale"), has_b ? &e.at("B") : nullptr, axis, eps);
      };
      // the CPU plan's one node for dX, dScale (and dB) (passes/layer_norm_grad.c;
      // the CUDA plan keeps LayerNormGrad's three)
      c.bwd_ops = {GCC_OP_LAYER_NORM_GRAD_ALL};
      c.cuda = seed == kSeeds[0];
      RunGradCase(c, seed);
    }
  }
}

// A Transformer-sized row (C = 384, more than the 256 lanes of the CUDA
// kernels) and more rows than the column sums' chunks (GCC_LN_CHUNKS), on
// the CPU and the host-emulated CUDA plan: X as an input, so only Scale's
// and B's gradients (the column sums) and the forward are checked here;
// dX of long rows is in LayerNormGrad.LongRowsDx.
TEST(LayerNormGrad, LongRowsColumnSums) {
  Rng r(77);
  Dims d = {2, 40, 384};
  Dims nd = {384};
  GradCase c;
  c.label = "LayerNormalization " + Str(d);
  c.inputs.push_back(FloatInput("X", d, r.F(Numel(d), -2, 2)));
  c.params.push_back({"Scale", nd, r.F(384, 0.5, 1.5)});
  c.params.push_back({"B", nd, r.F(384)});
  c.build = [](gcc_builder *b, const Ids &v) {
    return Op(b, GCC_OP_LAYER_NORM, "ln", {v.at("X"), v.at("Scale"), v.at("B")});
  };
  c.ref = [](const Env &e) { return RefLayerNorm(e.at("X"), e.at("Scale"), &e.at("B"), -1, 1e-5); };
  c.bwd_ops = {GCC_OP_LAYER_NORM_GRAD_ALL}; // dScale and dB: one node on the CPU
  c.cuda = true;
  RunGradCase(c, 1);
}

TEST(LayerNormGrad, LongRowsDx) {
  Rng r(78);
  Dims d = {3, 300};
  GradCase c;
  c.label = "LayerNormalization " + Str(d) + " dX";
  c.params.push_back({"X", d, r.F(Numel(d), -2, 2)});
  c.inputs.push_back(FloatInput("Scale", {300}, r.F(300, 0.5, 1.5)));
  c.build = [](gcc_builder *b, const Ids &v) {
    return Op(b, GCC_OP_LAYER_NORM, "ln", {v.at("X"), v.at("Scale")});
  };
  c.ref = [](const Env &e) { return RefLayerNorm(e.at("X"), e.at("Scale"), nullptr, -1, 1e-5); };
  c.bwd_ops = {GCC_OP_LAYER_NORM_GRAD}; // dX alone: LayerNormGrad (no group to merge)
  c.cuda = true;
  RunGradCase(c, 1);
}

// ---- Gather (ONNX Gather-13; nn.Embedding, index_select) ----------------------------

// Index input `name` of dims `dims` (int64 or int32), values `v`.
InputSpec IndexInput(const std::string &name, gcc_dtype dt, const Dims &dims,
                     const std::vector<int64_t> &v) {
  InputSpec s = LabelInput(name, dt, v);
  s.dims = dims;
  return s;
}

// float64 Gather along `axis` (negative indices wrap), the reference.
T64 RefGather(const T64 &x, int64_t axis, const Dims &idims, const std::vector<int64_t> &idx) {
  const int r = static_cast<int>(x.dims.size());
  if (axis < 0)
    axis += r;
  int64_t outer = 1, inner = 1, a = x.dims[axis];
  for (int i = 0; i < axis; ++i)
    outer *= x.dims[i];
  for (int i = static_cast<int>(axis) + 1; i < r; ++i)
    inner *= x.dims[i];
  Dims od(x.dims.begin(), x.dims.begin() + axis);
  od.insert(od.end(), idims.begin(), idims.end());
  od.insert(od.end(), x.dims.begin() + axis + 1, x.dims.end());
  T64 y = Zeros(od);
  const int64_t n = static_cast<int64_t>(idx.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      int64_t v = idx[j] < 0 ? idx[j] + a : idx[j];
      for (int64_t i = 0; i < inner; ++i)
        y.v[(o * n + j) * inner + i] = x.v[(o * a + v) * inner + i];
    }
  return y;
}

GradCase GatherCase(const std::string &what, const Dims &xd, const std::vector<float> &x,
                    int64_t axis, gcc_dtype idt, const Dims &idims, const std::vector<int64_t> &idx,
                    bool cuda) {
  GradCase c;
  c.label = "Gather " + what + " X" + Str(xd) + " axis " + std::to_string(axis) + " indices" +
            Str(idims) + (idt == GCC_DT_INT32 ? " int32" : " int64");
  c.params.push_back({"X", xd, x});
  c.inputs.push_back(IndexInput("idx", idt, idims, idx));
  c.build = [axis](gcc_builder *b, const Ids &v) {
    int y = Op(b, GCC_OP_GATHER, "gather", {v.at("X"), v.at("idx")});
    gcc_build_set_int(b, y, "axis", axis);
    return y;
  };
  c.ref = [axis, idims, idx](const Env &e) { return RefGather(e.at("X"), axis, idims, idx); };
  c.bwd_ops = {GCC_OP_GATHER_GRAD};
  c.cuda = cuda;
  return c;
}

// nn.Embedding's lookup: axis 0 of a [V, C] table by [B, T] ids, ids
// repeated (their gradients add up) and negative (counted from the end).
TEST(GatherGrad, EmbeddingWithRepeatedAndNegativeIds) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    const int64_t V = r.I(3, 7), C = r.I(1, 6), B = r.I(1, 3), T = r.I(2, 5);
    std::vector<int64_t> ids(static_cast<size_t>(B * T));
    for (int64_t &v : ids)
      v = r.I(-V, V - 1);
    ids[0] = ids.back() = 1; // at least one repeat
    for (gcc_dtype idt : {GCC_DT_INT64, GCC_DT_INT32})
      RunGradCase(
          GatherCase("embedding", {V, C}, r.F(V * C), 0, idt, {B, T}, ids, seed == kSeeds[0]),
          seed);
  }
}

// index_select along every axis (negative axes too), with scalar, 1-D and
// 2-D indices.
TEST(GatherGrad, EveryAxisWithScalarVectorAndMatrixIndices) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    Dims xd = r.RandDims(3, 2, 4);
    for (int64_t axis = -3; axis < 3; ++axis) {
      const int64_t a = xd[static_cast<size_t>(axis < 0 ? axis + 3 : axis)];
      for (const Dims &idims : {Dims{}, Dims{3}, Dims{2, 2}}) {
        std::vector<int64_t> idx(static_cast<size_t>(Numel(idims)));
        for (int64_t &v : idx)
          v = r.I(-a, a - 1);
        RunGradCase(GatherCase("index_select", xd, r.F(Numel(xd)), axis, GCC_DT_INT64, idims, idx,
                               seed == kSeeds[0] && axis >= 0 && idims.size() == 2),
                    seed);
      }
    }
  }
}

// Gather moves any element type (the shape vectors of exported models are
// int64): the forward only, no gradient.
TEST(InternalOps, GatherOfIntegersAndOutOfRangeIndices) {
  DirectCase c;
  c.label = "Gather int64 rows";
  c.inputs = {LabelInput("X", GCC_DT_INT64, {10, 20, 30, 40}),
              IndexInput("idx", GCC_DT_INT32, {2, 2}, {3, -4, 1, 1})};
  c.inputs[0].dims = {2, 2};
  c.build = [](gcc_builder *b, const Ids &v) {
    int y = Op(b, GCC_OP_GATHER, "gather", {v.at("X"), v.at("idx")});
    gcc_build_set_int(b, y, "axis", 1);
    return y;
  };
  // X [[10, 20], [30, 40]] along axis 1 by [[3, -4], [1, 1]]: out of range
  c.run_status = GCC_ERR_INVALID_ARGUMENT;
  RunDirect(c);
  c.label = "Gather int64 rows, in range";
  c.inputs[1] = IndexInput("idx", GCC_DT_INT32, {2, 2}, {1, -2, 0, 1});
  c.run_status = GCC_OK;
  c.expect = Zeros({2, 2, 2});
  c.expect.v = {20, 10, 10, 20, 40, 30, 30, 40};
  c.expect_dt = GCC_DT_INT64;
  RunDirect(c);
}

// The CUDA plan's GatherGrad (a block per row of dX scanning the indices in
// tiles, codegen/emit_index.c) adds what the CPU kernel adds in the same
// order: the gradients are equal bit for bit. The sizes cross the kernel's
// tiles (more than 256 ids) and column passes (more than 4 x 256 columns);
// an id out of range fails the CUDA step as it fails the CPU's.
TEST(InternalOps, GatherGradIsBitwiseTheSameOnTheCudaPlan) {
  if (!BuiltWithNvrtc())
    GTEST_SKIP() << "built without NVRTC (--config=cpu_only): no CUDA plan";
  const int64_t V = 3, C = 1030, N = 300;
  Rng r(11);
  std::vector<int64_t> ids(N);
  for (int64_t &v : ids)
    v = r.I(-V, V - 1);
  GradCase c = GatherCase("wide", {V, C}, r.F(V * C), 0, GCC_DT_INT64, {N}, ids, true);
  InputSpec target = FloatInput("gc.target", {N, C}, r.F(N * C));
  gcc_builder *b = gcc_builder_new("gather_bits", 1);
  ASSERT_NE(b, nullptr);
  Ids v;
  v["idx"] = gcc_build_input(b, "idx", GCC_DT_INT64, 1, c.inputs[0].dims.data());
  v["X"] = gcc_build_param(b, "X", 2, c.params[0].dims.data(), c.params[0].data.data());
  int out = c.build(b, v);
  int t = gcc_build_input(b, target.name.c_str(), GCC_DT_FLOAT32, 2, target.dims.data());
  int loss = gcc_build_mse(b, kLossName, out, t);
  std::string loss_name = b->g->values[loss].name;
  gcc_build_output(b, loss);
  gcc_build_training_spec ts = {};
  ts.loss = loss_name.c_str();
  ts.opt.kind = GCC_OPT_SGD;
  ts.batch_size = 1;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *model_raw = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_builder_finish(b, &model_raw, &d), GCC_OK) << d.msg;
  GraphPtr model(model_raw);
  Storage s;
  s.param["X"] = c.params[0].data;
  s.grad["X"].assign(c.params[0].data.size(), 0.0f);
  gcc_options o = {};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 1;
  o.opt.kind = GCC_OPT_NONE;
  gcc_plan_config cfg{};
  cfg.threads = 1;
  gcc_plan *plan_raw = nullptr;
  ASSERT_EQ(gcc_plan_compile(model.get(), &o, &cfg, BindPersistent, &s, &plan_raw, &d), GCC_OK)
      << d.msg;
  PlanPtr plan(plan_raw);
  ASSERT_EQ(gcc_plan_bind_input(plan.get(), "idx", c.inputs[0].data(), &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_plan_bind_input(plan.get(), target.name.c_str(), target.f.data(), &d), GCC_OK);
  ASSERT_EQ(gcc_plan_run(plan.get(), 0, &d), GCC_OK) << d.msg;
  double cuda_loss = 0;
  std::map<std::string, std::vector<float>> cuda_grad;
  RunOnHostCuda(model.get(), c, target, loss_name, s, &cuda_loss, &cuda_grad);
  ASSERT_EQ(cuda_grad["X"].size(), s.grad["X"].size());
  EXPECT_EQ(std::memcmp(cuda_grad["X"].data(), s.grad["X"].data(), s.grad["X"].size() * 4), 0)
      << "the CUDA plan's GatherGrad differs from the CPU's";

  // an id out of range: the CUDA step fails naming the position, as the CPU's
  GradCase bad = c;
  bad.inputs[0].i64[7] = V;
  ASSERT_EQ(gcc_plan_bind_input(plan.get(), "idx", bad.inputs[0].data(), &d), GCC_OK);
  EXPECT_EQ(gcc_plan_run(plan.get(), 0, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("position 7"), std::string::npos) << d.msg;
  gcc_host_test::HostBackend *hb = SharedHostBackend();
  DeviceStorage ds{hb, &s, {}, {}, {}};
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *quiet = std::fopen("/dev/null", "w");
  o.warn_file = quiet;
  gcc_plan_config dc{};
  dc.threads = 1;
  dc.readback_ring = 1;
  dc.device = &hb->be;
  dc.sm = 90;
  dc.sm_count = 4;
  dc.compile = gcc_kernel_cache_hook;
  dc.compile_user = gcc_test::TestKernelCache();
  gcc_plan *dev_raw = nullptr;
  gcc_status st = gcc_plan_compile(model.get(), &o, &dc, DeviceStorage::Bind, &ds, &dev_raw, &d);
  if (quiet)
    std::fclose(quiet);
  ASSERT_EQ(st, GCC_OK) << d.msg;
  PlanPtr dev(dev_raw);
  ASSERT_EQ(gcc_plan_bind_input(dev.get(), "idx", bad.inputs[0].data(), &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_plan_bind_input(dev.get(), target.name.c_str(), target.f.data(), &d), GCC_OK);
  gcc_diag dd = {};
  st = gcc_plan_run(dev.get(), 0, &dd);
  if (st == GCC_OK) {
    EXPECT_EQ(gcc_plan_host_tensor(dev.get(), loss_name.c_str(), &dd), nullptr);
  }
  EXPECT_NE(std::string(dd.msg).find("position 7"), std::string::npos) << dd.msg;
}

// ---- GatherElements (ONNX GatherElements-13) -------------------------------------------

// float64 torch.gather(x, axis, idx) (negative indices wrap), the reference.
T64 RefGatherElements(const T64 &x, int64_t axis, const Dims &idims,
                      const std::vector<int64_t> &idx) {
  const int r = static_cast<int>(x.dims.size());
  const int ax = static_cast<int>(axis < 0 ? axis + r : axis);
  T64 y = Zeros(idims);
  for (int64_t i = 0; i < Numel(idims); ++i) {
    int64_t t = i, off = 0, st = 1;
    for (int k = r - 1; k >= 0; --k) {
      int64_t c = t % idims[k], v = idx[static_cast<size_t>(i)];
      t /= idims[k];
      off += (k == ax ? (v < 0 ? v + x.dims[k] : v) : c) * st;
      st *= x.dims[k];
    }
    y.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(off)];
  }
  return y;
}

GradCase GatherElementsCase(const Dims &xd, const std::vector<float> &x, int64_t axis,
                            gcc_dtype idt, const Dims &idims, const std::vector<int64_t> &idx,
                            bool cuda) {
  GradCase c;
  c.label = "GatherElements X" + Str(xd) + " axis " + std::to_string(axis) + " indices" +
            Str(idims) + (idt == GCC_DT_INT32 ? " int32" : " int64");
  c.params.push_back({"X", xd, x});
  c.inputs.push_back(IndexInput("idx", idt, idims, idx));
  c.build = [axis](gcc_builder *b, const Ids &v) {
    int y = Op(b, GCC_OP_GATHER_ELEMENTS, "gather_elements", {v.at("X"), v.at("idx")});
    gcc_build_set_int(b, y, "axis", axis);
    return y;
  };
  c.ref = [axis, idims, idx](const Env &e) {
    return RefGatherElements(e.at("X"), axis, idims, idx);
  };
  c.bwd_ops = {GCC_OP_GATHER_ELEMENTS_GRAD};
  c.cuda = cuda;
  return c;
}

// torch.gather along every axis (negative axes too) of ranks 1 to 3, the
// indices longer than data along the axis and shorter in another dim,
// indices repeated (their gradients add up) and negative; int64 and int32.
// The first seed also runs each rank-3 case through the host-emulated CUDA
// plan (a thread per dX element summing its positions in order).
TEST(GatherElementsGrad, EveryAxisWithRepeatedAndNegativeIndices) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 3; ++rank)
      for (int64_t axis = -rank; axis < rank; ++axis) {
        Dims xd = r.RandDims(rank, 2, 4);
        const size_t ax = static_cast<size_t>(axis < 0 ? axis + rank : axis);
        Dims idims = xd;
        idims[ax] = r.I(1, 6);
        if (rank > 1) // one other dim shorter than data's
          idims[(ax + 1) % static_cast<size_t>(rank)] -= 1;
        std::vector<int64_t> idx(static_cast<size_t>(Numel(idims)));
        for (int64_t &v : idx)
          v = r.I(-xd[ax], xd[ax] - 1);
        const gcc_dtype idt =
            (seed + static_cast<uint64_t>(axis + 3)) % 2 ? GCC_DT_INT32 : GCC_DT_INT64;
        RunGradCase(GatherElementsCase(xd, r.F(Numel(xd)), axis, idt, idims, idx,
                                       seed == kSeeds[0] && rank == 3 && axis >= 0),
                    seed);
      }
  }
}

// ---- ReduceMin (ONNX ReduceMin-13) ---------------------------------------------------

// float64 torch.amin(x, axes, keepdim), the reference.
T64 RefReduceMin(const T64 &x, const std::vector<int64_t> &axes, bool keep) {
  const int r = static_cast<int>(x.dims.size());
  std::vector<int> red(static_cast<size_t>(r), 0);
  for (int64_t a : axes)
    red[static_cast<size_t>(a < 0 ? a + r : a)] = 1;
  Dims yd;
  for (int k = 0; k < r; ++k)
    if (!red[k])
      yd.push_back(x.dims[k]);
    else if (keep)
      yd.push_back(1);
  T64 y = Zeros(yd);
  std::fill(y.v.begin(), y.v.end(), std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < Numel(x.dims); ++i) {
    int64_t t = i, g = 0, st = 1;
    for (int k = r - 1; k >= 0; --k) {
      int64_t c = t % x.dims[k];
      t /= x.dims[k];
      if (!red[k]) {
        g += c * st;
        st *= x.dims[k];
      }
    }
    y.v[static_cast<size_t>(g)] =
        std::min(y.v[static_cast<size_t>(g)], x.v[static_cast<size_t>(i)]);
  }
  return y;
}

// ReduceMin over every subset of axes of a rank-3 input (negative axes
// too), keepdims 1 and 0; values distinct and 0.02 apart (DistinctValues),
// so that no finite-difference step moves a minimum. The first seed runs
// two of them through the host-emulated CUDA plan. Ties (the gradient split
// evenly) are checked against PyTorch in tests/onnx_gather_elements_test.
TEST(ReduceMinGrad, EveryAxisSubsetAndKeepdims) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int mask = 1; mask < 8; ++mask)
      for (int keep = 0; keep < 2; ++keep) {
        Dims xd = r.RandDims(3, 2, 4);
        std::vector<int64_t> axes;
        for (int k = 0; k < 3; ++k)
          if (mask & (1 << k))
            axes.push_back(k == 2 && (mask + seed) % 2 ? -1 : k);
        GradCase c;
        c.label =
            "ReduceMin X" + Str(xd) + " axes" + Str(axes) + " keepdims " + std::to_string(keep);
        c.params.push_back({"X", xd, DistinctValues(r, Numel(xd))});
        c.build = [axes, keep](gcc_builder *b, const Ids &v) {
          int y = Op(b, GCC_OP_REDUCE_MIN, "reduce_min", {v.at("X")});
          gcc_build_set_ints(b, y, "axes", axes.data(), static_cast<int>(axes.size()));
          gcc_build_set_int(b, y, "keepdims", keep);
          return y;
        };
        c.ref = [axes, keep](const Env &e) { return RefReduceMin(e.at("X"), axes, keep != 0); };
        c.bwd_ops = {GCC_OP_REDUCE_MIN_GRAD};
        c.cuda = seed == kSeeds[0] && (mask == 5 || mask == 7) && keep == (mask == 5);
        RunGradCase(c, seed);
      }
  }
}

// ---- Slice (ONNX Slice-13) ---------------------------------------------------------------

// Python's slice(b, e, s).indices(dim) (which ONNX Slice's clamping
// follows): the positions the slice takes along one dim.
std::vector<int64_t> PySliceIndices(int64_t b, int64_t e, int64_t s, int64_t dim) {
  auto adjust = [dim, s](int64_t v) {
    if (v < 0) {
      v += dim;
      if (v < 0)
        v = s < 0 ? -1 : 0;
    } else if (v >= dim) {
      v = s < 0 ? dim - 1 : dim;
    }
    return v;
  };
  b = adjust(b);
  e = adjust(e);
  std::vector<int64_t> r;
  for (int64_t i = b; s > 0 ? i < e : i > e; i += s)
    r.push_back(i);
  return r;
}

struct SliceSpec {
  Dims starts, ends, axes, steps;
};

T64 RefSlice(const T64 &x, const SliceSpec &sp) {
  const size_t r = x.dims.size();
  std::vector<std::vector<int64_t>> pos(r);
  for (size_t q = 0; q < r; ++q)
    for (int64_t i = 0; i < x.dims[q]; ++i)
      pos[q].push_back(i);
  for (size_t k = 0; k < sp.starts.size(); ++k) {
    int64_t a = sp.axes.empty() ? static_cast<int64_t>(k) : sp.axes[k];
    a += a < 0 ? static_cast<int64_t>(r) : 0;
    pos[a] =
        PySliceIndices(sp.starts[k], sp.ends[k], sp.steps.empty() ? 1 : sp.steps[k], x.dims[a]);
  }
  Dims od(r);
  for (size_t q = 0; q < r; ++q)
    od[q] = static_cast<int64_t>(pos[q].size());
  T64 y = Zeros(od);
  for (int64_t o = 0; o < Numel(od); ++o) {
    int64_t rem = o, src = 0, mul = 1;
    for (size_t q = r; q-- > 0;) {
      src += pos[q][rem % od[q]] * mul;
      rem /= od[q];
      mul *= x.dims[q];
    }
    y.v[o] = x.v[src];
  }
  return y;
}

// Random slices of rank 1-4 tensors: negative and out-of-range bounds
// (clamped), negative steps, a subset of the axes in any order, negative
// axes; the gradient scatters dY back (SliceGrad).
TEST(SliceGrad, RandomBoundsStepsAndAxes) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 1; rank <= 4; ++rank) {
      Dims d = r.RandDims(rank, 2, 5);
      SliceSpec sp;
      Dims order(rank);
      for (int i = 0; i < rank; ++i)
        order[i] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937_64(seed * 13 + rank));
      int n_ax = static_cast<int>(r.I(1, rank));
      for (int k = 0; k < n_ax; ++k) {
        const int64_t a = order[k], dim = d[a];
        int64_t step = r.I(1, 3) * (r.U(0, 1) < 0.3 ? -1 : 1), b, e;
        do { // a non-empty slice, bounds sometimes negative or past the ends
          b = r.I(-dim - 1, dim + 1);
          e = r.U(0, 1) < 0.2 ? (step > 0 ? INT64_MAX : INT64_MIN) : r.I(-dim - 1, dim + 1);
        } while (PySliceIndices(b, e, step, dim).empty());
        sp.starts.push_back(b);
        sp.ends.push_back(e);
        sp.axes.push_back(r.U(0, 1) < 0.5 ? a - rank : a);
        sp.steps.push_back(step);
      }
      GradCase c;
      c.label = "Slice " + Str(d) + " starts " + Str(sp.starts) + " ends " + Str(sp.ends) +
                " axes " + Str(sp.axes) + " steps " + Str(sp.steps);
      c.params.push_back({"X", d, r.F(Numel(d))});
      c.build = [sp](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_SLICE, "slice", {v.at("X")});
        SetInts(b, y, "starts", sp.starts);
        SetInts(b, y, "ends", sp.ends);
        SetInts(b, y, "axes", sp.axes);
        SetInts(b, y, "steps", sp.steps);
        return y;
      };
      c.ref = [sp](const Env &e) { return RefSlice(e.at("X"), sp); };
      c.bwd_ops = {GCC_OP_SLICE_GRAD};
      c.cuda = seed == kSeeds[0] && rank >= 3;
      RunGradCase(c, seed);
    }
  }
}

// X cut along one axis into pieces used by different ops (a fused q, k, v
// projection's thirds). When the pieces tile the axis exactly, autodiff sums
// their gradients as one Concat (no SliceGrad, no Add for X); when they do not
// (the tail unused), the SliceGrads and their Adds stay. Both against float64
// finite differences. The forward: Y = Concat(P2 * P2, P0, P1 * P1) along
// the same axis, P_k = X[..., o_k : o_k + l_k, ...].
TEST(SliceGrad, PiecesThatTileAnAxisSumAsOneConcat) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (int rank = 2; rank <= 3; ++rank) {
      for (bool tile : {true, false}) {
        Dims d = r.RandDims(rank, 2, 4);
        const int64_t axis = r.I(0, rank - 1);
        const int n = tile ? 3 : 2;
        std::vector<int64_t> len = {r.I(1, 3), r.I(1, 3), r.I(1, 3)};
        d[axis] = len[0] + len[1] + len[2]; // without tile, piece 2 is the unused tail
        GradCase c;
        c.label = std::string(tile ? "tiling" : "partial") + " slices of " + Str(d) + " axis " +
                  std::to_string(axis) + " lengths " + Str(len);
        c.params.push_back({"X", d, r.F(Numel(d))});
        c.build = [=](gcc_builder *b, const Ids &v) {
          int p[3], off = 0;
          for (int k = 0; k < n; ++k) {
            std::string name = "piece" + std::to_string(k);
            p[k] = Op(b, GCC_OP_SLICE, name.c_str(), {v.at("X")});
            SetInts(b, p[k], "starts", {off});
            SetInts(b, p[k], "ends", {off + len[k]});
            SetInts(b, p[k], "axes", {axis});
            off += static_cast<int>(len[k]);
          }
          std::vector<int> ins;
          if (tile)
            ins.push_back(Op(b, GCC_OP_MUL, "sq2", {p[2], p[2]}));
          ins.push_back(p[0]);
          ins.push_back(Op(b, GCC_OP_MUL, "sq1", {p[1], p[1]}));
          int y = Op(b, GCC_OP_CONCAT, "cat", ins);
          gcc_build_set_int(b, y, "axis", axis);
          return y;
        };
        c.ref = [=](const Env &e) {
          const T64 &x = e.at("X");
          int64_t outer = 1, inner = 1;
          for (int64_t i = 0; i < axis; ++i)
            outer *= x.dims[i];
          for (int64_t i = axis + 1; i < rank; ++i)
            inner *= x.dims[i];
          // the output's pieces: (source offset, length, squared) in order
          std::vector<std::array<int64_t, 3>> parts;
          if (tile)
            parts.push_back({len[0] + len[1], len[2], 1});
          parts.push_back({0, len[0], 0});
          parts.push_back({len[0], len[1], 1});
          Dims od = x.dims;
          od[axis] = 0;
          for (const auto &pt : parts)
            od[axis] += pt[1];
          T64 y = Zeros(od);
          for (int64_t o = 0; o < outer; ++o) {
            int64_t at = 0;
            for (const auto &pt : parts)
              for (int64_t j = 0; j < pt[1] * inner; ++j, ++at) {
                double xv = x.v[(o * x.dims[axis] + pt[0]) * inner + j];
                y.v[o * od[axis] * inner + at] = pt[2] ? xv * xv : xv;
              }
          }
          return y;
        };
        if (tile) {
          c.bwd_ops = {GCC_OP_CONCAT};
          c.bwd_absent = {GCC_OP_SLICE_GRAD}; // (the Adds left are P1 * P1's and P2 * P2's)
        } else {
          c.bwd_ops = {GCC_OP_SLICE_GRAD, GCC_OP_ADD};
        }
        c.cuda = seed == kSeeds[0];
        RunGradCase(c, seed);
      }
    }
  }
}

// Slice moves integers too (shape vectors), axes and steps defaulted; an
// empty slice and a step of 0 are refused when the graph is built.
TEST(InternalOps, SliceOfIntegersAndRefusedSlices) {
  DirectCase c;
  c.label = "Slice int64 [1:3] of [5]";
  c.inputs = {LabelInput("X", GCC_DT_INT64, {10, 20, 30, 40, 50})};
  c.build = [](gcc_builder *b, const Ids &v) {
    int y = Op(b, GCC_OP_SLICE, "slice", {v.at("X")});
    SetInts(b, y, "starts", {1});
    SetInts(b, y, "ends", {-2});
    return y;
  };
  c.expect = Zeros({2});
  c.expect.v = {20, 30};
  c.expect_dt = GCC_DT_INT64;
  RunDirect(c);
  for (int bad = 0; bad < 2; ++bad) {
    gcc_builder *b = gcc_builder_new("slice_bad", 1);
    int64_t xd[1] = {5};
    int x = gcc_build_input(b, "X", GCC_DT_FLOAT32, 1, xd);
    int y = Op(b, GCC_OP_SLICE, "slice", {x});
    SetInts(b, y, "starts", {bad ? 1 : 3});
    SetInts(b, y, "ends", {bad ? 4 : 3});
    SetInts(b, y, "steps", {bad ? 0 : 1});
    gcc_build_output(b, y);
    gcc_graph *g = nullptr;
    gcc_diag d = {};
    EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_ERR_SHAPE);
    EXPECT_NE(std::string(d.msg).find("'slice'"), std::string::npos) << d.msg;
    gcc_graph_free(g);
  }
}

// ---- Expand (ONNX Expand-13) -------------------------------------------------------------

// X broadcast to shapes that add leading dims, stretch 1s and keep dims
// (a 1 in `shape` keeps X's dim); the gradient sums dY back (ReduceSumTo).
TEST(ExpandGrad, BroadcastsToLargerShapes) {
  struct Case {
    Dims x, shape;
  };
  const Case cases[] = {
      {{1, 3, 1}, {2, 1, 3, 4}}, {{3}, {2, 3}}, {{2, 1}, {1, 3}}, {{4, 1, 2}, {4, 3, 1}}};
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (const Case &k : cases) {
      GradCase c;
      c.label = "Expand " + Str(k.x) + " to " + Str(k.shape);
      c.params.push_back({"X", k.x, r.F(Numel(k.x))});
      c.build = [k](gcc_builder *b, const Ids &v) {
        int y = Op(b, GCC_OP_EXPAND, "expand", {v.at("X")});
        SetInts(b, y, "shape", k.shape);
        return y;
      };
      c.ref = [k](const Env &e) {
        const T64 &x = e.at("X");
        const size_t n = std::max(k.x.size(), k.shape.size());
        Dims od(n);
        for (size_t i = 0; i < n; ++i) {
          int64_t dx = i + k.x.size() >= n ? k.x[i + k.x.size() - n] : 1;
          int64_t ds = i + k.shape.size() >= n ? k.shape[i + k.shape.size() - n] : 1;
          od[i] = dx == 1 ? ds : dx;
        }
        T64 y = Zeros(od);
        for (int64_t o = 0; o < Numel(od); ++o) {
          int64_t rem = o, src = 0, mul = 1;
          for (size_t i = n; i-- > 0;) {
            int64_t ci = rem % od[i];
            rem /= od[i];
            if (i + k.x.size() >= n) {
              int64_t dx = k.x[i + k.x.size() - n];
              src += (dx == 1 ? 0 : ci) * mul;
              mul *= dx;
            }
          }
          y.v[o] = x.v[src];
        }
        return y;
      };
      c.bwd_ops = {GCC_OP_REDUCE_SUM_TO};
      c.cuda = seed == kSeeds[0] && k.x.size() == 3;
      RunGradCase(c, seed);
    }
  }
}

// ---- Attention (scaled dot-product attention, fused) ----------------------------------

// float64 softmax(Q K^T * scale + mask) V over [B, H, T, D] (rank 3: H = 1),
// the mask given per (b, h, i, j) by `mask_at` (+0 when null; -Inf masks),
// causal top-left (key j visible to row i when j <= i); a row with every key
// masked gives 0 (PyTorch's math backend since 2.5, and the flash kernels).
// *lse (optional) gets each row's logsumexp (-Inf for such a row).
// `drop` > 0: dropout on the probabilities, Dropout's mask of the
// [B, H, Tq, Tk] probabilities under `key` at step 0 (RefDropoutMask's
// documented bits: element (bh, i, j) is the flat index (bh Tq + i) Tk + j),
// kept ones scaled by 1 / (1 - drop) after the softmax normalised them.
T64 RefAttention(const T64 &Q, const T64 &K, const T64 &V, bool causal, double scale,
                 const std::function<double(int64_t, int64_t, int64_t, int64_t)> &mask_at,
                 T64 *lse = nullptr, float drop = 0.0f, const std::vector<int> *keep = nullptr) {
  const size_t r = Q.dims.size();
  const int64_t B = Q.dims[0], H = r == 4 ? Q.dims[1] : 1, Tq = Q.dims[r - 2], D = Q.dims[r - 1],
                Tk = K.dims[r - 2], E = V.dims[r - 1];
  Dims od = Q.dims;
  od[r - 1] = E;
  T64 O = Zeros(od);
  Dims ld(Q.dims.begin(), Q.dims.end() - 1);
  if (lse)
    *lse = Zeros(ld);
  std::vector<double> s(static_cast<size_t>(Tk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bh = b * H + h;
      for (int64_t i = 0; i < Tq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < Tk; ++j) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d)
            x += Q.v[(bh * Tq + i) * D + d] * K.v[(bh * Tk + j) * D + d];
          x = x * scale + (mask_at ? mask_at(b, h, i, j) : 0.0);
          if (causal && j > i)
            x = -INFINITY;
          s[j] = x;
          mx = std::max(mx, x);
        }
        double sum = 0;
        if (mx != -INFINITY)
          for (int64_t j = 0; j < Tk; ++j)
            sum += std::exp(s[j] - mx);
        for (int64_t e = 0; e < E; ++e) {
          double o = 0;
          for (int64_t j = 0; j < Tk && sum > 0; ++j) {
            double pij = std::exp(s[j] - mx) / sum;
            if (drop > 0.0f)
              pij = (*keep)[(bh * Tq + i) * Tk + j] ? pij / (1.0 - static_cast<double>(drop)) : 0.0;
            o += pij * V.v[(bh * Tk + j) * E + e];
          }
          O.v[(bh * Tq + i) * E + e] = o;
        }
        if (lse)
          lse->v[bh * Tq + i] = sum > 0 ? mx + std::log(sum) : -INFINITY;
      }
    }
  return O;
}

// Attention(Q, K, V [, mask]) -> O, L built into the builder's graph; returns O.
int BuildAttention(gcc_builder *b, const char *name, int q, int k, int v, int mask, bool causal,
                   float scale, float drop = 0.0f) {
  gcc_graph *g = b->g;
  int o = -1, l = -1, node = -1;
  gcc_diag d{};
  std::string on = std::string(name) + ".O", ln = std::string(name) + ".L";
  EXPECT_EQ(gcc_graph_add_temp(g, on.c_str(), GCC_VALUE_ACTIVATION, &o, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_graph_add_temp(g, ln.c_str(), GCC_VALUE_ACTIVATION, &l, &d), GCC_OK) << d.msg;
  int ins[4] = {q, k, v, mask}, outs[2] = {o, l};
  EXPECT_EQ(
      gcc_graph_add_node(g, name, GCC_OP_ATTENTION, ins, mask >= 0 ? 4 : 3, outs, 2, &node, &d),
      GCC_OK)
      << d.msg;
  if (causal) {
    EXPECT_EQ(gcc_node_set_int(g, node, "is_causal", 1), GCC_OK);
  }
  if (scale != 0.0f) {
    EXPECT_EQ(gcc_node_set_float(g, node, "scale", scale), GCC_OK);
  }
  if (drop != 0.0f) {
    EXPECT_EQ(gcc_node_set_float(g, node, "dropout_p", drop), GCC_OK);
  }
  return o;
}

// kFloatMask: a random additive mask input [Tq, Tk] with -Inf entries;
// kBoolMask: a constant 0 / -Inf mask [B, 1, Tq, Tk] (what a boolean
// attn_mask is), broadcast over the heads.
enum AttnMask { kNoMask, kFloatMask, kBoolMask };

// One Attention gradcheck: Q, K, V parameters [B, H, Tq, D] / [B, H, Tk, D] /
// [B, H, Tk, Dv] (rank 3 when H = 0), an optional mask (AttnMask; kBoolMask
// rank-4 only), also through the host-emulated CUDA plan (the generated kernels).
// `drop` > 0: dropout_p; the training form's mask is that of a Dropout
// named "attn" under the gradcheck's run seed 0 at step 0 (fixed, so the
// finite differences see the same mask).
GradCase AttentionCase(Rng &r, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t E,
                       bool causal, float scale, AttnMask mk, float drop = 0.0f) {
  GradCase c;
  c.label = "Attention B,H,Tq,Tk,D,Dv=" + std::to_string(B) + "," + std::to_string(H) + "," +
            std::to_string(Tq) + "," + std::to_string(Tk) + "," + std::to_string(D) + "," +
            std::to_string(E) + (causal ? " causal" : "") +
            (mk == kFloatMask  ? " float mask"
             : mk == kBoolMask ? " 0/-inf mask"
                               : "") +
            " scale=" + std::to_string(scale) +
            (drop > 0.0f ? " dropout_p=" + std::to_string(drop) : "");
  auto dims = [&](int64_t t, int64_t w) { return H ? Dims{B, H, t, w} : Dims{B, t, w}; };
  // scores of O(1): the softmax is neither flat nor one-hot
  c.params.push_back({"Q", dims(Tq, D), r.F(Numel(dims(Tq, D)), -1.5, 1.5)});
  c.params.push_back({"K", dims(Tk, D), r.F(Numel(dims(Tk, D)), -1.5, 1.5)});
  c.params.push_back({"V", dims(Tk, E), r.F(Numel(dims(Tk, E)))});
  Dims md;
  std::vector<float> mf;
  std::vector<float> mb;
  if (mk == kFloatMask) {
    md = {Tq, Tk};
    mf = r.F(Tq * Tk, -1, 1);
    for (int64_t i = 0; i < Tq; ++i) // about one key in five masked, row 0 entirely
      for (int64_t j = 0; j < Tk; ++j)
        if (i == 0 || r.I(0, 4) == 0)
          mf[i * Tk + j] = -INFINITY;
    InputSpec in = FloatInput("M", md, mf);
    c.inputs.push_back(in);
  } else if (mk == kBoolMask) { // a constant 0 / -Inf mask
    md = {B, 1, Tq, Tk};
    for (int64_t x = 0; x < Numel(md); ++x)
      mb.push_back(r.I(0, 3) != 0 ? 0.0f : -INFINITY);
  }
  c.build = [=](gcc_builder *b, const Ids &v) {
    int m = -1;
    if (mk == kFloatMask)
      m = v.at("M");
    else if (mk == kBoolMask)
      m = gcc_build_const(b, "M", GCC_DT_FLOAT32, 4, md.data(), mb.data());
    return BuildAttention(b, "attn", v.at("Q"), v.at("K"), v.at("V"), m, causal, scale, drop);
  };
  const std::vector<int> keep =
      RefDropoutMask(0, "attn", drop, B * (H ? H : 1) * Tq * Tk, 0); // all 1 for drop 0
  c.ref = [=](const Env &e) {
    double sc = scale != 0.0f ? scale : 1.0 / std::sqrt(static_cast<double>(D));
    std::function<double(int64_t, int64_t, int64_t, int64_t)> at;
    if (mk == kFloatMask)
      at = [=](int64_t, int64_t, int64_t i, int64_t j) {
        return static_cast<double>(mf[i * Tk + j]);
      };
    else if (mk == kBoolMask)
      at = [=](int64_t b, int64_t, int64_t i, int64_t j) {
        return static_cast<double>(mb[(b * Tq + i) * Tk + j]);
      };
    return RefAttention(e.at("Q"), e.at("K"), e.at("V"), causal, sc, at, nullptr, drop, &keep);
  };
  c.bwd_ops = {GCC_OP_ATTENTION_GRAD};
  c.cuda = true;
  return c;
}

TEST(AttentionGrad, CausalAndNotWithTqUnequalTk) {
  Rng r(31);
  for (bool causal : {false, true}) {
    RunGradCase(AttentionCase(r, 2, 2, 5, 7, 4, 3, causal, 0.0f, kNoMask), 1);
    RunGradCase(AttentionCase(r, 1, 3, 6, 4, 3, 3, causal, 0.0f, kNoMask), 2); // Tq > Tk
  }
}

TEST(AttentionGrad, MasksScaleAndRankThree) {
  Rng r(32);
  RunGradCase(AttentionCase(r, 2, 2, 4, 6, 3, 2, false, 0.0f, kFloatMask), 3);
  RunGradCase(AttentionCase(r, 2, 3, 5, 5, 4, 4, true, 0.0f, kBoolMask), 4);
  RunGradCase(AttentionCase(r, 3, 0, 5, 6, 4, 5, false, 0.7f, kNoMask), 5); // [N, T, D]
}

// Several tiles each way (the CPU kernel's 32 x 64 tiles, the generated
// kernels' 16 x 32): the online softmax across key tiles and the backward's
// loops over query tiles inside a key tile.
TEST(AttentionGrad, SeveralTilesEachWay) {
  Rng r(33);
  RunGradCase(AttentionCase(r, 1, 2, 37, 70, 5, 3, true, 0.0f, kNoMask), 6);
  RunGradCase(AttentionCase(r, 1, 1, 70, 37, 4, 4, false, 0.0f, kFloatMask), 7);
}

// Dropout on the probabilities (issue 31), its mask fixed at step 0 under
// the gradcheck's seed: dQ, dK, dV against float64 finite differences of
// the masked reference, CPU and host-emulated CUDA plans; one key block
// (the CPU's one-pass backward) and several tiles each way with a mask.
TEST(AttentionGrad, DropoutOnTheProbabilities) {
  Rng r(34);
  RunGradCase(AttentionCase(r, 2, 3, 5, 7, 4, 3, true, 0.0f, kNoMask, 0.2f), 8);
  RunGradCase(AttentionCase(r, 1, 2, 37, 70, 5, 3, false, 0.0f, kFloatMask, 0.3f), 9);
}

// The CPU kernel of a training-form Attention (dropout_p p, key `key`) at
// step `step` with Q = 0 (every probability 1 / Tk) and V the identity
// (E = Tk): O[bh, i, j] = mask / (1 - p) / Tk, so its zeros are the dropped
// probabilities.
std::vector<float> AttentionDropPattern(int64_t BH, int64_t T, float p, int64_t key, int64_t step) {
  const int64_t Tk = T;
  std::vector<float> q(static_cast<size_t>(BH * T), 0.0f), k(static_cast<size_t>(BH * Tk), 1.0f),
      v(static_cast<size_t>(BH * Tk * Tk), 0.0f), o(static_cast<size_t>(BH * T * Tk), -1.0f),
      l(static_cast<size_t>(BH * T));
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t j = 0; j < Tk; ++j)
      v[(bh * Tk + j) * Tk + j] = 1.0f;
  gcc_attr av[6] = {};
  av[ATTN_IS_CAUSAL].type = av[ATTN_SEED].type = av[ATTN_TRAINING].type = av[ATTN_KEY].type =
      GCC_ATTR_INT;
  av[ATTN_SCALE].type = av[ATTN_DROPOUT_P].type = GCC_ATTR_FLOAT;
  av[ATTN_DROPOUT_P].f = p;
  av[ATTN_TRAINING].i = 1;
  av[ATTN_KEY].i = key;
  gcc_node nd = {};
  nd.op = GCC_OP_ATTENTION;
  nd.av = av;
  nd.n_av = 6;
  auto tensor = [](std::vector<float> &x, std::initializer_list<int64_t> d) {
    gcc_tensor t = {};
    t.dtype = GCC_DT_FLOAT32;
    t.shape.ndim = static_cast<int>(d.size());
    int i = 0;
    for (int64_t x1 : d)
      t.shape.dims[i++] = x1;
    t.numel = static_cast<int64_t>(x.size());
    t.data = x.data();
    return t;
  };
  gcc_tensor tq = tensor(q, {1, BH, T, 1}), tk = tensor(k, {1, BH, Tk, 1}),
             tv = tensor(v, {1, BH, Tk, Tk}), to = tensor(o, {1, BH, T, Tk}),
             tl = tensor(l, {1, BH, T});
  gcc_tensor *ins[3] = {&tq, &tk, &tv}, *outs[2] = {&to, &tl};
  // one thread's scratch of the kernel (cpu_attention.c per_thread_floats
  // for D = 1, Dv = Tk), generously
  std::vector<float> ws(static_cast<size_t>(8 * 64 * (Tk + 64)));
  gcc_cpu_ctx ctx = {};
  ctx.max_threads = 1;
  ctx.optimizer_step = step;
  ctx.rng_step = step;
  gcc_kernel_args a = {};
  a.node = &nd;
  a.in = ins;
  a.n_in = 3;
  a.out = outs;
  a.n_out = 2;
  a.ctx = &ctx;
  a.workspace = ws.data();
  EXPECT_EQ(gcc_cpu_attention(&a), GCC_OK);
  return o;
}

// The fused op's dropout draws exactly Dropout's mask of the [B, H, Tq, Tk]
// probabilities (the same key and step: the same zeros), its kept share is
// Binomial(n, 1 - p), and the step moves it.
TEST(AttentionGrad, DropoutMaskIsDropoutsOnTheProbabilities) {
  const int64_t BH = 4, T = 160, n = BH * T * T; // 102,400 probabilities, 3 key blocks
  const float p = 0.2f;
  for (int64_t step : {int64_t(3), (int64_t(1) << 32) + 1}) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<float> o = AttentionDropPattern(BH, T, p, 987654321, step);
    std::vector<float> ref = DropoutOnes(n, p, 987654321, step);
    ASSERT_EQ(o.size(), ref.size());
    int64_t kept = 0, differ = 0;
    const float want = gcc_dropout_scale(p) / static_cast<float>(T);
    for (int64_t x = 0; x < n; ++x) {
      kept += o[x] != 0.0f;
      differ += (o[x] != 0.0f) != (ref[x] != 0.0f);
      if (o[x] != 0.0f) {
        // (1 * scale) * (1 / Tk): two roundings of the exact scale / Tk
        ASSERT_NEAR(o[x], want, 2 * std::ldexp(static_cast<double>(want), -23)) << x;
      }
    }
    EXPECT_EQ(differ, 0) << "the fused op's mask is not Dropout's";
    // kept ~ Binomial(n, 1 - p): within 5 standard deviations
    EXPECT_NEAR(static_cast<double>(kept), n * (1.0 - p), 5 * std::sqrt(n * p * (1.0 - p)));
  }
  std::vector<float> a = AttentionDropPattern(BH, T, p, 987654321, 3),
                     b = AttentionDropPattern(BH, T, p, 987654321, 4);
  EXPECT_NE(a, b) << "another step, another mask";
}

// ---- Trilu (ONNX Trilu-14), ArgMax / ArgMin (ONNX ArgMax-13 / ArgMin-13) -----------------

// float64 Trilu over the last two dims: kept where c - r >= k (upper) or
// c - r <= k (lower).
T64 RefTrilu(const T64 &x, bool upper, int64_t k) {
  T64 y = x;
  const size_t r = x.dims.size();
  const int64_t R = x.dims[r - 2], C = x.dims[r - 1];
  for (int64_t i = 0; i < Numel(x.dims); ++i) {
    int64_t c = i % C, row = (i / C) % R;
    bool keep = upper ? c - row >= k : c - row <= k;
    if (!keep)
      y.v[i] = 0;
  }
  return y;
}

// torch.triu / torch.tril of matrices and batches of them, square and not,
// with diagonals inside, on the edge of and outside the matrix (everything
// or nothing kept); the gradient is Trilu of dY. CPU, and the host-emulated
// CUDA plan for the first seed.
TEST(TriluGrad, UpperAndLowerEveryDiagonal) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    Dims xd = r.RandDims(static_cast<int>(r.I(2, 4)), 1, 5);
    const int64_t R = xd[xd.size() - 2], C = xd[xd.size() - 1];
    for (int upper = 0; upper <= 1; ++upper)
      for (int64_t k : {int64_t(0), int64_t(1), int64_t(-1), C, -R, C + 2, -R - 3}) {
        GradCase c;
        c.label = std::string(upper ? "triu" : "tril") + " X" + Str(xd) + " k " + std::to_string(k);
        c.params.push_back({"X", xd, r.F(Numel(xd))});
        c.build = [upper, k](gcc_builder *b, const Ids &v) {
          int y = Op(b, GCC_OP_TRILU, "trilu", {v.at("X")});
          gcc_build_set_int(b, y, "upper", upper);
          gcc_build_set_int(b, y, "k", k);
          return y;
        };
        c.ref = [upper, k](const Env &e) { return RefTrilu(e.at("X"), upper != 0, k); };
        c.bwd_ops = {GCC_OP_TRILU};
        c.cuda = seed == kSeeds[0] && (k == 1 || k == -R - 3);
        RunGradCase(c, seed);
      }
  }
}

// A graph of one node `op` over input X of dtype `dt` (elements `x`), run on
// the CPU and, with `cuda` when built with NVRTC, through the host-emulated
// CUDA plan; both outputs (int64 or the input's element type) into `got` as
// int64s.
void RunSelect(int op, gcc_dtype dt, const Dims &xd, const void *x,
               const std::function<void(gcc_builder *, int)> &attrs,
               std::vector<std::vector<int64_t>> *got, gcc_shape *shape, bool cuda_too) {
  gcc_builder *b = gcc_builder_new("select", 1);
  ASSERT_NE(b, nullptr);
  int xi = gcc_build_input(b, "X", dt, static_cast<int>(xd.size()), xd.data());
  int y = Op(b, op, "sel", {xi});
  attrs(b, y);
  gcc_build_output(b, y);
  gcc_graph *raw = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_builder_finish(b, &raw, &d), GCC_OK) << d.msg;
  GraphPtr model(raw);
  got->clear();
  for (bool cuda : {false, true}) {
    if (cuda && !(cuda_too && BuiltWithNvrtc()))
      continue;
    std::vector<gcc_test::PlanOutput> outs;
    std::string err = gcc_test::RunPlan(model.get(), {x}, 1, cuda, &outs);
    ASSERT_EQ(err, "") << (cuda ? "CUDA plan: " : "CPU plan: ") << err;
    ASSERT_EQ(outs.size(), 1u);
    *shape = outs[0].shape;
    got->push_back(outs[0].f32.empty() ? outs[0].i64 : std::vector<int64_t>());
    if (!outs[0].f32.empty())
      for (float f : outs[0].f32)
        got->back().push_back(static_cast<int64_t>(f));
  }
}

// float64 reference of ArgMax (max) / ArgMin: the first (or last) position
// of the extreme along `axis`, a NaN above every number for both (numpy).
std::vector<int64_t> RefArg(const std::vector<double> &x, const Dims &xd, int64_t axis, bool max,
                            bool last) {
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(xd.size()) : axis;
  int64_t outer = 1, inner = 1, n = xd[static_cast<size_t>(a)];
  for (int64_t i = 0; i < a; ++i)
    outer *= xd[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(a) + 1; i < xd.size(); ++i)
    inner *= xd[i];
  std::vector<int64_t> y;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t q = 0; q < inner; ++q) {
      int64_t best = -1;
      double bv = 0;
      for (int64_t j = 0; j < n; ++j) {
        double v = x[static_cast<size_t>((o * n + j) * inner + q)];
        bool take;
        if (best < 0)
          take = true;
        else if (std::isnan(v) || std::isnan(bv))
          take = std::isnan(v) && (!std::isnan(bv) || last);
        else if (v == bv)
          take = last;
        else
          take = max ? v > bv : v < bv;
        if (take) {
          best = j;
          bv = v;
        }
      }
      y.push_back(best);
    }
  return y;
}

// ArgMax and ArgMin on every axis (negative too), keepdims 0 and 1,
// select_last_index 0 and 1, over float32 values with many ties (a few
// distinct values) and NaNs, int64 and int32 values, and rows longer than
// the CUDA kernel's block (the block's tree combines 256 candidates): the
// CPU plan gives the reference's indices exactly, and so does the
// host-emulated CUDA plan on one axis per shape (cuda_axis; float32 and, for
// the long rows, int64: each CUDA plan compiles its kernel with the host
// compiler, so not every combination).
TEST(ArgMaxMin, EveryAxisTiesNaNsAndLongRows) {
  Rng r(7);
  struct Shape {
    Dims d;
    int64_t cuda_axis;
  };
  for (const Shape &sh :
       {Shape{{3, 4, 5}, 1}, Shape{{2, 700}, -1}, Shape{{600, 3}, 0}, Shape{{1}, 0}}) {
    const Dims &xd = sh.d;
    const int64_t n = Numel(xd);
    std::vector<float> f(static_cast<size_t>(n));
    for (float &v : f)
      v = static_cast<float>(r.I(-3, 3)); // ties
    if (n > 4) {
      f[1] = std::numeric_limits<float>::quiet_NaN();
      f[static_cast<size_t>(n - 2)] = std::numeric_limits<float>::quiet_NaN();
    }
    std::vector<int64_t> i64(static_cast<size_t>(n));
    std::vector<int32_t> i32(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      i64[static_cast<size_t>(i)] = r.I(-4, 4) * (int64_t(1) << 40) + 1; // beyond float's range
      i32[static_cast<size_t>(i)] = static_cast<int32_t>(r.I(-2, 2));
    }
    const int rank = static_cast<int>(xd.size());
    for (int64_t axis = -rank; axis < rank; ++axis)
      for (int op : {GCC_OP_ARG_MAX, GCC_OP_ARG_MIN})
        for (int keep = 0; keep <= 1; ++keep)
          for (int last = 0; last <= 1; ++last)
            for (gcc_dtype dt : {GCC_DT_FLOAT32, GCC_DT_INT64, GCC_DT_INT32}) {
              SCOPED_TRACE(std::string(op == GCC_OP_ARG_MAX ? "ArgMax" : "ArgMin") + " X" +
                           Str(xd) + " " + gcc_dtype_name(dt) + " axis " + std::to_string(axis) +
                           " keepdims " + std::to_string(keep) + " last " + std::to_string(last));
              std::vector<double> xv;
              const void *data = dt == GCC_DT_FLOAT32 ? static_cast<const void *>(f.data())
                                 : dt == GCC_DT_INT64 ? static_cast<const void *>(i64.data())
                                                      : static_cast<const void *>(i32.data());
              for (int64_t i = 0; i < n; ++i)
                xv.push_back(dt == GCC_DT_FLOAT32 ? f[static_cast<size_t>(i)]
                             : dt == GCC_DT_INT64 ? static_cast<double>(i64[static_cast<size_t>(i)])
                                                  : i32[static_cast<size_t>(i)]);
              std::vector<std::vector<int64_t>> got;
              gcc_shape ys{};
              const bool cuda = axis == sh.cuda_axis && keep == 1 &&
                                last == (op == GCC_OP_ARG_MIN) &&
                                (dt == GCC_DT_FLOAT32 || (dt == GCC_DT_INT64 && n == 1400));
              RunSelect(
                  op, dt, xd, data,
                  [&](gcc_builder *b, int y) {
                    gcc_build_set_int(b, y, "axis", axis);
                    gcc_build_set_int(b, y, "keepdims", keep);
                    gcc_build_set_int(b, y, "select_last_index", last);
                  },
                  &got, &ys, cuda);
              if (HasFatalFailure())
                return;
              std::vector<int64_t> want = RefArg(xv, xd, axis, op == GCC_OP_ARG_MAX, last != 0);
              EXPECT_EQ(ys.ndim, keep ? rank : rank - 1);
              ASSERT_EQ(got.size(), cuda && BuiltWithNvrtc() ? 2u : 1u);
              for (size_t p = 0; p < got.size(); ++p)
                EXPECT_EQ(got[p], want) << (p ? "CUDA plan" : "CPU plan");
            }
  }
}

// Trilu moves integers too (a forward without gradient): int64 and int32
// matrices (placed on the CPU in a CUDA plan too, as every op with integer
// outputs from integer inputs: passes/placement.c).
TEST(TriluGrad, IntegerMatricesForward) {
  const Dims xd = {2, 3, 4};
  std::vector<int64_t> i64(24);
  std::vector<int32_t> i32(24);
  for (int i = 0; i < 24; ++i) {
    i64[static_cast<size_t>(i)] = (int64_t(1) << 40) + i;
    i32[static_cast<size_t>(i)] = i + 1;
  }
  for (gcc_dtype dt : {GCC_DT_INT64, GCC_DT_INT32})
    for (int upper = 0; upper <= 1; ++upper) {
      std::vector<std::vector<int64_t>> got;
      gcc_shape ys{};
      RunSelect(
          GCC_OP_TRILU, dt, xd,
          dt == GCC_DT_INT64 ? static_cast<const void *>(i64.data())
                             : static_cast<const void *>(i32.data()),
          [&](gcc_builder *b, int y) {
            gcc_build_set_int(b, y, "upper", upper);
            gcc_build_set_int(b, y, "k", 1);
          },
          &got, &ys, false);
      if (HasFatalFailure())
        return;
      T64 x = Zeros(xd);
      for (int i = 0; i < 24; ++i)
        x.v[static_cast<size_t>(i)] = dt == GCC_DT_INT64
                                          ? static_cast<double>(i64[static_cast<size_t>(i)])
                                          : i32[static_cast<size_t>(i)];
      T64 want = RefTrilu(x, upper != 0, 1);
      std::vector<int64_t> w;
      for (double v : want.v)
        w.push_back(static_cast<int64_t>(v));
      ASSERT_EQ(got.size(), 1u);
      for (size_t p = 0; p < got.size(); ++p)
        EXPECT_EQ(got[p], w) << gcc_dtype_name(dt) << (p ? " CUDA plan" : " CPU plan");
    }
}

// ---- coverage of the op table ------------------------------------------------------------

// Every op of GCC_OP_LIST and the test that covers it. An op added to the
// table without a test here makes OpCoverage fail.
// kForward: a forward-only op (none at present; ONNX import's ops have
// gradients since issue 15); its forward would be checked against PyTorch
// in tests/onnx_op_parity_test.cc and ONNX's conformance cases in
// tests/onnx_conformance_test.cc.
// ---- NegativeLogLikelihoodLoss (ONNX NegativeLogLikelihoodLoss-13, F.nll_loss) ----------

struct NllOpts {
  int rank = 2; // of the input: (N, C) or (N, C, d1, ...)
  const char *reduction = "mean";
  bool weighted = false, int32 = false;
  int ignore = 0; // 0: none set; 1: an in-range class; 2: -1 (outside [0, C))
};

// float64 reference: -w[t] x[n, t, j], 0 where ignored; none | sum | mean
// (the sum over the weights of the targets not ignored).
T64 RefNll(const T64 &x, const std::vector<int64_t> &t, const std::vector<double> &w,
           int64_t ignore, bool has_ignore, const std::string &red) {
  const int64_t N = x.dims[0], C = x.dims[1], D = Numel(x.dims) / (N * C);
  Dims td(x.dims.begin(), x.dims.end());
  td.erase(td.begin() + 1);
  T64 y = Zeros(red == "none" ? td : Dims{});
  double sum = 0, wsum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < D; ++j) {
      const int64_t v = t[static_cast<size_t>(n * D + j)];
      if (has_ignore && v == ignore)
        continue;
      const double wv = w.empty() ? 1.0 : w[static_cast<size_t>(v)];
      const double l = -wv * x.v[static_cast<size_t>((n * C + v) * D + j)];
      if (red == "none")
        y.v[static_cast<size_t>(n * D + j)] = l;
      sum += l;
      wsum += wv;
    }
  if (red != "none")
    y.v[0] = red == "mean" ? sum / wsum : sum;
  return y;
}

GradCase NllCase(Rng &r, const NllOpts &o, bool cuda) {
  Dims xd = {r.I(1, 4), r.I(2, 5)};
  for (int i = 2; i < o.rank; ++i)
    xd.push_back(r.I(1, 3));
  const int64_t N = xd[0], C = xd[1], D = Numel(xd) / (N * C);
  Dims td(xd.begin(), xd.end());
  td.erase(td.begin() + 1);
  const int64_t ignore = o.ignore == 1 ? r.I(0, C - 1) : -1;
  std::vector<int64_t> t(static_cast<size_t>(N * D));
  for (int64_t &v : t)
    v = r.I(0, C - 1);
  if (o.ignore)
    for (size_t i = 1; i < t.size(); i += 2)
      if (r.U(0, 1) < 0.6)
        t[i] = ignore;
  if (o.ignore && t[0] == ignore)
    t[0] = (ignore + 1 + C) % C; // one target counts: the mean's denominator is not 0
  GradCase c;
  c.label = std::string("NegativeLogLikelihoodLoss ") + o.reduction +
            (o.weighted ? " weighted" : "") + (o.int32 ? " int32" : " int64") +
            (o.ignore ? " ignore_index=" + std::to_string(ignore) : "") + " input" + Str(xd);
  c.params.push_back({"X", xd, r.F(Numel(xd), -3, 1)});
  c.inputs.push_back(IndexInput("t", o.int32 ? GCC_DT_INT32 : GCC_DT_INT64, td, t));
  std::vector<double> w;
  if (o.weighted) {
    c.inputs.push_back(FloatInput("w", {C}, r.F(C, 0.2, 2.0)));
    for (float v : c.inputs.back().f)
      w.push_back(v);
  }
  const std::string red = o.reduction;
  const bool has_ignore = o.ignore != 0, weighted = o.weighted;
  c.build = [red, has_ignore, ignore, weighted](gcc_builder *b, const Ids &v) {
    std::vector<int> ins = {v.at("X"), v.at("t")};
    if (weighted)
      ins.push_back(v.at("w"));
    int y = Op(b, GCC_OP_NLL_LOSS, "nll", ins);
    SetString(b, y, "reduction", red.c_str());
    if (has_ignore)
      gcc_build_set_int(b, y, "ignore_index", ignore);
    return y;
  };
  c.ref = [t, w, ignore, has_ignore, red](const Env &e) {
    return RefNll(e.at("X"), t, w, ignore, has_ignore, red);
  };
  c.bwd_ops = {GCC_OP_NLL_LOSS_GRAD};
  c.cuda = cuda;
  return c;
}

// Every reduction, with and without class weights, int64 and int32
// targets, ignore_index unset, in range and outside [0, C) (-1), inputs
// (N, C) to (N, C, d1, d2): the loss is linear in the input, so the
// finite differences are exact up to float32 rounding. The first seed also
// runs two variants per reduction through the host-emulated CUDA plan (a
// thread per target, per-block partials and one block, a thread per dInput
// element).
TEST(NllLossGrad, EveryReductionWeightIgnoreIndexAndRank) {
  for (uint64_t seed : kSeeds) {
    Rng r(seed);
    for (const char *red : {"none", "sum", "mean"})
      for (int weighted = 0; weighted < 2; ++weighted)
        for (int ignore = 0; ignore < 3; ++ignore) {
          NllOpts o;
          o.reduction = red;
          o.weighted = weighted;
          o.ignore = ignore;
          o.rank = 2 + (ignore + weighted + seed) % 3;
          o.int32 = (seed + ignore) % 2 == 0;
          // the CUDA plan (about 3 s of host compilation a case): a weighted
          // in-range ignore_index and an unweighted -1 per reduction
          const bool cuda =
              seed == kSeeds[0] && ((weighted && ignore == 1) || (!weighted && ignore == 2));
          RunGradCase(NllCase(r, o, cuda), seed);
        }
  }
}

// Many targets (more than one block of partials) through the CUDA plan's
// two-kernel reduction, and the mean over a large (N, C, d1) input.
TEST(NllLossGrad, ManyTargetsAcrossBlocksOnTheCudaPlan) {
  Rng r(21);
  for (const char *red : {"sum", "mean"}) {
    NllOpts o;
    o.reduction = red;
    o.weighted = true;
    o.ignore = 1;
    GradCase c = NllCase(r, o, true);
    // (N, C, d1) = (40, 3, 30): 1200 targets, 5 blocks of partials
    const int64_t N = 40, C = 3, D = 30;
    c.params[0] = {"X", {N, C, D}, r.F(N * C * D, -3, 1)};
    std::vector<int64_t> t(static_cast<size_t>(N * D));
    for (int64_t &v : t)
      v = r.I(0, C - 1);
    c.inputs[0] = IndexInput("t", GCC_DT_INT64, {N, D}, t);
    c.inputs[1] = FloatInput("w", {C}, r.F(C, 0.2, 2.0));
    std::vector<double> w(c.inputs[1].f.begin(), c.inputs[1].f.end());
    const int64_t ignore = 1;
    const std::string rs = red;
    c.build = [rs, ignore](gcc_builder *b, const Ids &v) {
      int y = Op(b, GCC_OP_NLL_LOSS, "nll", {v.at("X"), v.at("t"), v.at("w")});
      SetString(b, y, "reduction", rs.c_str());
      gcc_build_set_int(b, y, "ignore_index", ignore);
      return y;
    };
    c.ref = [t, w, ignore, rs](const Env &e) { return RefNll(e.at("X"), t, w, ignore, true, rs); };
    c.label = std::string("NegativeLogLikelihoodLoss ") + red + " (40, 3, 30)";
    RunGradCase(c, 21);
  }
}

// A target outside [0, C) that is not ignore_index fails the step naming
// the node and the target's position; an ignored one does not count.
TEST(InternalOps, NllLossTargetOutOfRange) {
  DirectCase c;
  c.label = "NegativeLogLikelihoodLoss, target 3 of 3 classes";
  c.inputs = {FloatInput("X", {2, 3}, {-1, -2, -3, -4, -5, -6}),
              LabelInput("t", GCC_DT_INT64, {1, 3})};
  c.build = [](gcc_builder *b, const Ids &v) {
    int y = Op(b, GCC_OP_NLL_LOSS, "nll", {v.at("X"), v.at("t")});
    SetString(b, y, "reduction", "sum");
    return y;
  };
  c.run_status = GCC_ERR_INVALID_ARGUMENT;
  RunDirect(c);
  c.label = "NegativeLogLikelihoodLoss, target 3 ignored";
  c.build = [](gcc_builder *b, const Ids &v) {
    int y = Op(b, GCC_OP_NLL_LOSS, "nll", {v.at("X"), v.at("t")});
    SetString(b, y, "reduction", "mean");
    gcc_build_set_int(b, y, "ignore_index", 3);
    return y;
  };
  c.run_status = GCC_OK;
  c.expect = Zeros({});
  c.expect.v = {2}; // -X[0, 1] over the weight 1 of the one target counted
  RunDirect(c);
}

enum CoverKind { kGradcheck, kInternal, kOptimizer, kCopy, kForward };
struct Covered {
  int op;
  const char *name;
  CoverKind kind;
  const char *tests;
};
const Covered kCovered[] = {
    {GCC_OP_GEMM, "Gemm", kGradcheck, "GemmGrad.*, CompositeGrad"},
    {GCC_OP_MATMUL, "MatMul", kGradcheck, "MatMulGrad.*, ReshapeGrad, CompositeGrad"},
    {GCC_OP_ADD, "Add", kGradcheck, "AddGrad.*, CompositeGrad"},
    {GCC_OP_RELU, "Relu", kGradcheck, "ReluGrad.RandomShapesAwayFromTheKink"},
    {GCC_OP_RELU_GRAD, "ReluGrad", kInternal, "ReluGrad.*, InternalOps.ReluGrad*"},
    {GCC_OP_IDENTITY, "Identity", kGradcheck, "IdentityGrad.RandomShapes"},
    {GCC_OP_RESHAPE, "Reshape", kGradcheck, "ReshapeGrad.*, FlattenGrad (backward)"},
    {GCC_OP_FLATTEN, "Flatten", kGradcheck, "FlattenGrad.EveryAxis"},
    {GCC_OP_REDUCE_SUM_TO, "ReduceSumTo", kGradcheck,
     "ReduceSumToGrad.*, AddGrad, GemmGrad, InternalOps.ReduceSumTo*"},
    {GCC_OP_SOFTMAX_CROSS_ENTROPY, "SoftmaxCrossEntropy", kGradcheck,
     "SoftmaxCrossEntropyGrad.*, InternalOps.SoftmaxCrossEntropyEdgeCases"},
    {GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD, "SoftmaxCrossEntropyGrad", kInternal,
     "SoftmaxCrossEntropyGrad.*, InternalOps.SoftmaxCrossEntropyGrad*"},
    {GCC_OP_MEAN_SQUARED_ERROR, "MeanSquaredError", kGradcheck, "MeanSquaredErrorGrad.*"},
    {GCC_OP_MEAN_SQUARED_ERROR_GRAD, "MeanSquaredErrorGrad", kInternal,
     "MeanSquaredErrorGrad.*, InternalOps.MeanSquaredErrorGrad*"},
    {GCC_OP_SGD, "SGD", kOptimizer, "SgdOptimizer.*"},
    {GCC_OP_ADAM, "Adam", kOptimizer, "AdamOptimizer.*"},
    {GCC_OP_COPY, "Copy", kCopy, "InternalOps.CopyIsAnExactCopyOfAnyDtype"},
    {GCC_OP_SOFTMAX, "Softmax", kGradcheck, "SoftmaxGrad.*, InternalOps.SoftmaxOfHugeLogits*"},
    {GCC_OP_SOFTMAX_GRAD, "SoftmaxGrad", kInternal,
     "SoftmaxGrad.*, InternalOps.SoftmaxGradMatchesTheJacobianProduct"},
    {GCC_OP_CONV, "Conv", kGradcheck, "ConvGrad.*, InternalOps.ConvKernelsOverSeveralChunks"},
    {GCC_OP_CONV_GRAD_DATA, "ConvGradData", kInternal,
     "ConvGrad.RandomShapes*, InternalOps.ConvKernelsOverSeveralChunks"},
    {GCC_OP_CONV_GRAD_FILTER, "ConvGradFilter", kInternal,
     "ConvGrad.*, InternalOps.ConvKernelsOverSeveralChunks"},
    {GCC_OP_CONV_GRAD_BIAS, "ConvGradBias", kInternal, "ConvGrad.*"},
    {GCC_OP_MAX_POOL, "MaxPool", kGradcheck, "MaxPoolGrad.*"},
    {GCC_OP_MAX_POOL_GRAD, "MaxPoolGrad", kInternal,
     "MaxPoolGrad.*, InternalOps.MaxPoolGradTiesGoToTheFirstMaximum"},
    {GCC_OP_AVERAGE_POOL, "AveragePool", kGradcheck, "AveragePoolGrad.*"},
    {GCC_OP_AVERAGE_POOL_GRAD, "AveragePoolGrad", kInternal, "AveragePoolGrad.*"},
    {GCC_OP_SUB, "Sub", kGradcheck, "ImportGrad.SubMulDivBroadcasting"},
    {GCC_OP_MUL, "Mul", kGradcheck, "ImportGrad.SubMulDivBroadcasting, ImportGrad.Shared*"},
    {GCC_OP_DIV, "Div", kGradcheck, "ImportGrad.SubMulDivBroadcasting"},
    {GCC_OP_SIGMOID, "Sigmoid", kGradcheck, "ImportGrad.PointwiseActivations"},
    {GCC_OP_TANH, "Tanh", kGradcheck, "ImportGrad.PointwiseActivations"},
    {GCC_OP_SQRT, "Sqrt", kGradcheck, "ImportGrad.PointwiseActivations"},
    {GCC_OP_LEAKY_RELU, "LeakyRelu", kGradcheck, "ImportGrad.PointwiseActivations"},
    {GCC_OP_CLIP, "Clip", kGradcheck, "ImportGrad.PointwiseActivations"},
    {GCC_OP_LOG_SOFTMAX, "LogSoftmax", kGradcheck, "ImportGrad.LogSoftmaxEveryAxis"},
    {GCC_OP_LRN, "LRN", kGradcheck, "ImportGrad.LrnOddAndEvenSizes"},
    {GCC_OP_CONCAT, "Concat", kGradcheck,
     "ImportGrad.ConcatEveryAxisWithAnInput, ImportGrad.ConcatOfTwentyFiveInputs"},
    {GCC_OP_TRANSPOSE, "Transpose", kGradcheck, "ImportGrad.TransposeRandomPermutations"},
    {GCC_OP_PAD, "Pad", kGradcheck, "ImportGrad.Pad*, ImportGrad.Concat*"},
    {GCC_OP_CONV_TRANSPOSE, "ConvTranspose", kGradcheck, "ImportGrad.ConvTranspose*"},
    {GCC_OP_ALL_REDUCE, "AllReduce", kInternal,
     "DataParallel.* (tests/data_parallel_test.cc, tests/mpi_parity_test.sh)"},
    {GCC_OP_SIGMOID_GRAD, "SigmoidGrad", kInternal,
     "ImportGrad.PointwiseActivations, InternalOps.ImportGrad*"},
    {GCC_OP_TANH_GRAD, "TanhGrad", kInternal,
     "ImportGrad.PointwiseActivations, InternalOps.ImportGrad*"},
    {GCC_OP_SQRT_GRAD, "SqrtGrad", kInternal,
     "ImportGrad.PointwiseActivations, InternalOps.ImportGrad*"},
    {GCC_OP_LEAKY_RELU_GRAD, "LeakyReluGrad", kInternal,
     "ImportGrad.PointwiseActivations, InternalOps.ImportGrad*"},
    {GCC_OP_CLIP_GRAD, "ClipGrad", kInternal,
     "ImportGrad.PointwiseActivations, InternalOps.ImportGrad*"},
    {GCC_OP_LOG_SOFTMAX_GRAD, "LogSoftmaxGrad", kInternal, "ImportGrad.LogSoftmaxEveryAxis"},
    {GCC_OP_LRN_GRAD, "LRNGrad", kInternal, "ImportGrad.LrnOddAndEvenSizes"},
    {GCC_OP_BATCH_NORM, "BatchNormalization", kGradcheck, "BatchNormGrad.*"},
    {GCC_OP_BATCH_NORM_GRAD, "BatchNormGrad", kInternal, "BatchNormGrad.TrainingForm*"},
    {GCC_OP_DROPOUT, "Dropout", kGradcheck, "DropoutGrad.*"},
    {GCC_OP_DROPOUT_GRAD, "DropoutGrad", kInternal,
     "DropoutGrad.TrainingForm*, DropoutGrad.CpuAndHostCudaPlans*"},
    {GCC_OP_CAST, "Cast", kForward,
     "Half.*, Kernels16.*, Autocast.* (tests/precision_test.cc); LogicForward.Cast*"},
    {GCC_OP_AMP_NON_FINITE_CHECK, "AmpNonFiniteCheck", kInternal,
     "LossScale.* (tests/loss_scale_test.cc)"},
    {GCC_OP_AMP_UPDATE_SCALE, "AmpUpdateScale", kInternal,
     "LossScale.* (tests/loss_scale_test.cc)"},
    {GCC_OP_LAYER_NORM, "LayerNormalization", kGradcheck,
     "LayerNormGrad.*, LayerNorm.* (tests/layer_norm_test.cc)"},
    {GCC_OP_LAYER_NORM_GRAD, "LayerNormGrad", kInternal,
     "LayerNormGrad.*, LayerNorm.* (tests/layer_norm_test.cc)"},
    {GCC_OP_GATHER, "Gather", kGradcheck,
     "GatherGrad.*, InternalOps.GatherOfIntegersAndOutOfRangeIndices"},
    {GCC_OP_GATHER_GRAD, "GatherGrad", kInternal,
     "GatherGrad.*, InternalOps.GatherGradIsBitwiseTheSameOnTheCudaPlan"},
    {GCC_OP_SLICE, "Slice", kGradcheck, "SliceGrad.*, InternalOps.SliceOfIntegersAndRefusedSlices"},
    {GCC_OP_SLICE_GRAD, "SliceGrad", kInternal, "SliceGrad.RandomBoundsStepsAndAxes"},
    {GCC_OP_EXPAND, "Expand", kGradcheck, "ExpandGrad.BroadcastsToLargerShapes"},
    {GCC_OP_GRAD_NORM, "GradNorm", kInternal,
     "GptRecipe.* (tests/gpt_recipe_test.cc: PyTorch clip_grad_norm_ fixture, CPU and "
     "host-emulated CUDA plans)"},
    {GCC_OP_ATTENTION, "Attention", kGradcheck, "AttentionGrad.*, Attention.* (attention_test.cc)"},
    {GCC_OP_ATTENTION_GRAD, "AttentionGrad", kInternal,
     "AttentionGrad.*, Attention.* (tests/attention_test.cc)"},
    {GCC_OP_GELU, "Gelu", kGradcheck,
     "MathGrad.GeluBothApproximations, OnnxGelu.* (tests/onnx_gelu_test.cc: PyTorch fixture)"},
    {GCC_OP_GELU_GRAD, "GeluGrad", kInternal,
     "MathGrad.GeluBothApproximations, InternalOps.GeluGrad*"},
    {GCC_OP_ERF, "Erf", kGradcheck, "MathGrad.UnaryOps"},
    {GCC_OP_ERF_GRAD, "ErfGrad", kInternal, "MathGrad.UnaryOps"},
    {GCC_OP_EXP, "Exp", kGradcheck, "MathGrad.UnaryOps"},
    {GCC_OP_LOG, "Log", kGradcheck, "MathGrad.UnaryOps"},
    {GCC_OP_NEG, "Neg", kGradcheck, "MathGrad.UnaryOps"},
    {GCC_OP_ABS, "Abs", kGradcheck, "MathGrad.UnaryOps"},
    {GCC_OP_ABS_GRAD, "AbsGrad", kInternal,
     "MathGrad.UnaryOps, InternalOps.PowAndAbsGradientsAtTheirSpecialPoints"},
    {GCC_OP_POW, "Pow", kGradcheck, "MathGrad.PowBroadcastingBaseAndExponent"},
    {GCC_OP_POW_GRAD_BASE, "PowGradBase", kInternal,
     "MathGrad.Pow*, InternalOps.PowAndAbsGradientsAtTheirSpecialPoints"},
    {GCC_OP_POW_GRAD_EXPONENT, "PowGradExponent", kInternal,
     "MathGrad.Pow*, InternalOps.PowAndAbsGradientsAtTheirSpecialPoints"},
    {GCC_OP_RECIPROCAL, "Reciprocal", kGradcheck, "MathGrad.UnaryOps"},
    {GCC_OP_MAX, "Max", kGradcheck, "MathGrad.MaxMinBroadcasting"},
    {GCC_OP_MIN, "Min", kGradcheck, "MathGrad.MaxMinBroadcasting"},
    {GCC_OP_MAX_GRAD, "MaxGrad", kInternal,
     "MathGrad.MaxMinBroadcasting, InternalOps.MaxMinGradientsSplitTiesInHalf"},
    {GCC_OP_MIN_GRAD, "MinGrad", kInternal,
     "MathGrad.MaxMinBroadcasting, InternalOps.MaxMinGradientsSplitTiesInHalf"},
    {GCC_OP_ELU, "Elu", kGradcheck, "MathGrad.Activations"},
    {GCC_OP_ELU_GRAD, "EluGrad", kInternal, "MathGrad.Activations"},
    {GCC_OP_SELU, "Selu", kGradcheck, "MathGrad.Activations"},
    {GCC_OP_SELU_GRAD, "SeluGrad", kInternal, "MathGrad.Activations"},
    {GCC_OP_CELU, "Celu", kGradcheck, "MathGrad.Activations"},
    {GCC_OP_CELU_GRAD, "CeluGrad", kInternal, "MathGrad.Activations"},
    {GCC_OP_SOFTPLUS, "Softplus", kGradcheck, "MathGrad.Activations"},
    {GCC_OP_SOFTPLUS_GRAD, "SoftplusGrad", kInternal, "MathGrad.Activations"},
    {GCC_OP_SOFTSIGN, "Softsign", kGradcheck, "MathGrad.Activations"},
    {GCC_OP_SOFTSIGN_GRAD, "SoftsignGrad", kInternal, "MathGrad.Activations"},
    {GCC_OP_THRESHOLDED_RELU, "ThresholdedRelu", kGradcheck, "MathGrad.Activations"},
    {GCC_OP_THRESHOLDED_RELU_GRAD, "ThresholdedReluGrad", kInternal, "MathGrad.Activations"},
    {GCC_OP_SIN, "Sin", kGradcheck, "MathGrad.Activations"},
    {GCC_OP_COS, "Cos", kGradcheck, "MathGrad.Activations"},
    {GCC_OP_PRELU, "PRelu", kGradcheck, "MathGrad.PReluSlopeBroadcasting"},
    {GCC_OP_PRELU_GRAD, "PReluGrad", kInternal, "MathGrad.PReluSlopeBroadcasting"},
    {GCC_OP_PRELU_GRAD_SLOPE, "PReluGradSlope", kInternal, "MathGrad.PReluSlopeBroadcasting"},
    {GCC_OP_TRILU, "Trilu", kGradcheck, "TriluGrad.*"},
    {GCC_OP_ARG_MAX, "ArgMax", kForward, "ArgMaxMin.EveryAxisTiesNaNsAndLongRows"},
    {GCC_OP_ARG_MIN, "ArgMin", kForward, "ArgMaxMin.EveryAxisTiesNaNsAndLongRows"},
    {GCC_OP_NLL_LOSS, "NegativeLogLikelihoodLoss", kGradcheck,
     "NllLossGrad.*, InternalOps.NllLossTargetOutOfRange"},
    {GCC_OP_NLL_LOSS_GRAD, "NegativeLogLikelihoodLossGrad", kInternal, "NllLossGrad.*"},
    {GCC_OP_EQUAL, "Equal", kForward, "LogicForward.* (tests/logic_test.cc)"},
    {GCC_OP_LESS, "Less", kForward, "LogicForward.*"},
    {GCC_OP_GREATER, "Greater", kForward, "LogicForward.*, MathGrad.WhereBroadcasting"},
    {GCC_OP_LESS_OR_EQUAL, "LessOrEqual", kForward, "LogicForward.*"},
    {GCC_OP_GREATER_OR_EQUAL, "GreaterOrEqual", kForward, "LogicForward.*"},
    {GCC_OP_NOT, "Not", kForward, "LogicForward.NotAndOrXorBroadcast"},
    {GCC_OP_AND, "And", kForward, "LogicForward.NotAndOrXorBroadcast"},
    {GCC_OP_OR, "Or", kForward, "LogicForward.NotAndOrXorBroadcast"},
    {GCC_OP_XOR, "Xor", kForward, "LogicForward.NotAndOrXorBroadcast"},
    {GCC_OP_WHERE, "Where", kGradcheck, "MathGrad.WhereBroadcasting"},
    {GCC_OP_WHERE_GRAD_X, "WhereGradX", kInternal, "MathGrad.WhereBroadcasting"},
    {GCC_OP_WHERE_GRAD_Y, "WhereGradY", kInternal, "MathGrad.WhereBroadcasting"},
    {GCC_OP_GATHER_ELEMENTS, "GatherElements", kGradcheck,
     "GatherElementsGrad.*; GatherElements.* (tests/onnx_gather_elements_test.cc: PyTorch "
     "fixture, bool data)"},
    {GCC_OP_GATHER_ELEMENTS_GRAD, "GatherElementsGrad", kInternal,
     "GatherElementsGrad.*; GatherElements.GradientMatchesPyTorch"},
    {GCC_OP_REDUCE_MIN, "ReduceMin", kGradcheck,
     "ReduceMinGrad.*; ReduceMin.* (tests/onnx_gather_elements_test.cc: PyTorch fixture)"},
    {GCC_OP_REDUCE_MIN_GRAD, "ReduceMinGrad", kInternal,
     "ReduceMinGrad.*; ReduceMin.GradientSplitsEvenlyAmongTiesAsPyTorch (ties)"},
    // bitwise equal to Attention / AttentionGrad (gradchecked above) on the
    // split thirds, and a GPT's step equal to the unpacked plan's
    {GCC_OP_ATTENTION_PACKED, "AttentionPacked", kInternal,
     "AttentionPacked.EqualsAttentionOnTheSplitThirdsBitwise (tests/attention_test.cc); "
     "CharGpt.PackedAttention* (tests/lm_test.cc)"},
    {GCC_OP_ATTENTION_PACKED_GRAD, "AttentionPackedGrad", kInternal,
     "AttentionPacked.EqualsAttentionOnTheSplitThirdsBitwise (tests/attention_test.cc); "
     "CharGpt.PackedAttention* (tests/lm_test.cc)"},
    // bitwise equal to Gelu and GeluGrad (gradchecked above)
    {GCC_OP_GELU_AUX, "GeluAux", kInternal,
     "GeluAux.EqualsGeluAndGeluGradBitwise (tests/gelu_accuracy_test.cc); "
     "CharGpt.GeluAuxGivesTheGeluGradPlansGradientsBitwise (tests/lm_test.cc)"},
    {GCC_OP_LAYER_NORM_GRAD_ALL, "LayerNormGradAll", kInternal,
     "LayerNorm.* (tests/layer_norm_test.cc: bitwise LayerNormGrad's outputs), "
     "CharGpt.OneNodeLayerNormBackward* (tests/lm_test.cc)"},
};

TEST(OpCoverage, EveryOpOfTheTableHasATestHere) {
  std::vector<int> seen(GCC_OP_COUNT, 0);
  for (const Covered &c : kCovered) {
    ASSERT_GE(c.op, 0);
    ASSERT_LT(c.op, GCC_OP_COUNT) << c.name;
    EXPECT_STREQ(gcc_op_name(c.op), c.name);
    seen[c.op]++;
    const gcc_op_desc *d = gcc_op(c.op);
    ASSERT_NE(d, nullptr) << c.name;
    // the kind of check must fit the op: a differentiable op needs a
    // gradcheck, an optimizer an optimizer test
    switch (c.kind) {
    case kGradcheck:
      EXPECT_NE(gcc_grad_rule_of(c.op)->fn, nullptr)
          << c.name << " is gradchecked but has no gradient";
      break;
    case kInternal:
      EXPECT_EQ(gcc_grad_rule_of(c.op)->fn, nullptr)
          << c.name << " became differentiable: add a gradcheck";
      EXPECT_TRUE(d->flags & GCC_OPF_INTERNAL) << c.name;
      break;
    case kOptimizer: EXPECT_TRUE(d->flags & GCC_OPF_OPTIMIZER) << c.name; break;
    case kCopy:
      EXPECT_EQ(gcc_grad_rule_of(c.op)->fn, nullptr)
          << c.name << " became differentiable: add a gradcheck";
      EXPECT_TRUE(d->flags & GCC_OPF_COPY) << c.name;
      break;
    case kForward:
      EXPECT_EQ(gcc_grad_rule_of(c.op)->fn, nullptr)
          << c.name << " became differentiable: add a gradcheck";
      EXPECT_FALSE(d->flags & GCC_OPF_INTERNAL) << c.name;
      break;
    }
  }
  for (int op = 0; op < GCC_OP_COUNT; ++op)
    EXPECT_EQ(seen[op], 1) << "op " << gcc_op_name(op) << " (id " << op
                           << ") of GCC_OP_LIST is covered " << seen[op]
                           << " times in tests/op_gradcheck_test.cc (kCovered): add its forward "
                              "and gradient checks there";
  EXPECT_EQ(sizeof kCovered / sizeof kCovered[0], static_cast<size_t>(GCC_OP_COUNT));
}

} // namespace
