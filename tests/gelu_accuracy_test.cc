// gelu_accuracy_test: the CPU kernels of the exact GELU and its gradient
// (runtime/cpu/cpu_math.c: a vectorised erfc fit and exp instead of libm's
// scalar erff / expf) against float64 math, over a sweep of float inputs.
//
// Reference: y = x Phi(x), dx = dy (Phi(x) + x phi(x)), Phi(x) = erfc(-x /
// sqrt 2) / 2, phi(x) = e^(-x^2 / 2) / sqrt(2 pi), in double (std::erfc,
// std::exp) at the float input itself.
//
// Tolerance, in u = 2^-24 (float32's unit roundoff), derived from the kernel,
// which computes erfc(z) = e^(-z^2) Q(t) (z = |x| / sqrt 2, t = 1 / (1 +
// z/2), Q = erfcx fitted as a degree-9 polynomial in t) and phi from the
// same e = e^(-x^2/2):
//   - e: the argument g = -(x * x) / 2 rounds once (x^2 within u x^2; the
//     halving is exact), which e^g turns into a relative error of 0.5 u x^2
//     (the conditioning of e^(-x^2/2) in float; no float kernel avoids it
//     without splitting x^2 exactly), plus ~1 ulp = 2 u of the exp itself
//     (Cephes' polynomial after Cody-Waite reduction);
//   - Q(t): the fit's relative error 3.2e-8 = 0.54 u and its coefficients'
//     rounding 0.2 u (tools/fit_erfcx.py, in float64 over t in [1/6, 1]),
//     Horner in float with FMA at most 2.3 u (measured over 20,001 floats t
//     there; allow 4 u); t itself is within 2.5 u (z: 1.5 u, 1 + z/2 and the
//     reciprocal 0.5 u each), which |t Q'(t) / Q(t)| <= 2.26 turns into
//     5.7 u: Q within 10.5 u;
//   - h = 0.5 Q e: 1 u more;
// so Phi is within (15.5 + 0.5 x^2) u relatively (for x >= 0, 1 - h: less).
// y = x Phi adds 1 u: we allow (17 + 0.5 x^2) u. dx = dy (Phi + x phi):
// phi = e / sqrt(2 pi) within (3 + 0.5 x^2) u, each product and the sum 1 u
// more, so |dx error| <= (18 + 0.5 x^2) u (|Phi| + |x phi|) |dy| (the bound
// of a sum is relative to the sum of magnitudes: near x = -0.75, where Phi +
// x phi crosses 0, a relative bound would be meaningless). (The kernel of
// Numerical Recipes' erfc with a second exp for phi, before 2026-11-29,
// needed 2.5 u x^2 for its argument -z^2 - 1.27 + t P(t): 219.7 u measured at
// x = -11.6, which these bounds fail.) Where e^(-x^2/2) would fall under
// e^-87 (|x| > ~13.2) the kernel gives 0 (or -0): the references there are
// under |x| e^-87 |dy| < 1e-35, the absolute floor.
// The measured maxima are printed (in u); they are far under the bound.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "graph/ir.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
}

namespace {

const double kU = std::ldexp(1.0, -24);

double Phi(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}
double SmallPhi(double x) {
  return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

// Runs the Gelu (grad == false) or GeluGrad kernel on xs (dy = dys); form:
// the 'approximate' attribute ("tanh"), or none (the exact GELU).
std::vector<float> RunGelu(bool grad, const std::vector<float> &xs, const std::vector<float> &dys,
                           const char *form = nullptr) {
  gcc_node node;
  std::memset(&node, 0, sizeof node);
  gcc_attr av[1];
  std::memset(av, 0, sizeof av);
  if (form) {
    av[0].type = GCC_ATTR_STRING;
    av[0].s = const_cast<char *>(form);
    node.av = av;
    node.n_av = 1;
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<float> out(xs.size());
  gcc_tensor x{}, dy{}, y{};
  x.dtype = dy.dtype = y.dtype = GCC_DT_FLOAT32;
  x.numel = dy.numel = y.numel = n;
  x.data = const_cast<float *>(xs.data());
  dy.data = const_cast<float *>(dys.data());
  y.data = out.data();
  gcc_tensor *in_grad[2] = {&dy, &x}, *in_fwd[1] = {&x}, *outs[1] = {&y};
  gcc_kernel_args a{};
  a.node = &node;
  a.in = grad ? in_grad : in_fwd;
  a.n_in = grad ? 2 : 1;
  a.out = outs;
  a.n_out = 1;
  EXPECT_EQ(grad ? gcc_cpu_gelu_grad(&a) : gcc_cpu_gelu(&a), GCC_OK);
  return out;
}

// Every float in [-16, 16] with a step of 2^-9 (16,385 values, the chunk
// boundaries of the kernel crossed many times), the tiny magnitudes 2^-k,
// and values straddling the clamps (|x| / sqrt 2 = 10, e^a = e^-87).
std::vector<float> Sweep() {
  std::vector<float> xs;
  for (int i = -16 * 512; i <= 16 * 512; ++i)
    xs.push_back(static_cast<float>(i) / 512.0f);
  for (int k = 1; k <= 126; ++k) {
    xs.push_back(std::ldexp(1.0f, -k));
    xs.push_back(-std::ldexp(1.0f, -k));
  }
  for (float v : {13.0f, 13.1f, 13.2f, 14.14f, 14.15f, 20.0f, 100.0f, 1e10f, 3e38f})
    for (float s : {1.0f, -1.0f})
      xs.push_back(s * v);
  return xs;
}

TEST(GeluAccuracy, ForwardAgainstFloat64) {
  std::vector<float> xs = Sweep(), dys(xs.size(), 1.0f);
  std::vector<float> y = RunGelu(false, xs, dys);
  double worst_u = 0, worst_x = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i], want = x * Phi(x);
    const double err = std::fabs(y[i] - want);
    const double bound = (17.0 + 0.5 * x * x) * kU * std::fabs(want) + 1e-35;
    ASSERT_LE(err, bound) << "x " << xs[i] << ": got " << y[i] << " want " << want;
    if (std::fabs(want) > 1e-30 && err / (kU * std::fabs(want)) > worst_u) {
      worst_u = err / (kU * std::fabs(want));
      worst_x = x;
    }
  }
  printf("GELU: max relative error %.2f u (u = 2^-24) at x = %g\n", worst_u, worst_x);
}

TEST(GeluAccuracy, GradientAgainstFloat64) {
  std::vector<float> xs = Sweep(), dys(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) // |dy| in [0.5, 2): both signs
    dys[i] = (i % 2 ? -1.0f : 1.0f) * (0.5f + static_cast<float>(i % 97) / 64.0f);
  std::vector<float> dx = RunGelu(true, xs, dys);
  double worst_u = 0, worst_x = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i], p = Phi(x), q = x * SmallPhi(x);
    const double want = dys[i] * (p + q);
    const double mag = std::fabs(dys[i]) * (std::fabs(p) + std::fabs(q));
    const double err = std::fabs(dx[i] - want);
    const double bound = (18.0 + 0.5 * x * x) * kU * mag + 1e-35;
    ASSERT_LE(err, bound) << "x " << xs[i] << " dy " << dys[i] << ": got " << dx[i] << " want "
                          << want;
    if (mag > 1e-30 && err / (kU * mag) > worst_u) {
      worst_u = err / (kU * mag);
      worst_x = x;
    }
  }
  printf("GELU gradient: max error %.2f u of |dy| (|Phi| + |x phi|) at x = %g\n", worst_u, worst_x);
}

// Inf and NaN as libm's erff gave them: GELU(+Inf) = +Inf, GELU(-Inf) = -Inf *
// 0 = NaN (PyTorch's formula gives NaN too), NaN stays NaN; the gradient is
// NaN at both infinities (dy (Phi + x phi) with x phi = Inf * 0, as PyTorch's
// GeluBackward and the erff kernel before).
TEST(GeluAccuracy, InfAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs = {inf, -inf, nan, -nan}, dys = {2.0f, 2.0f, 2.0f, 2.0f};
  std::vector<float> y = RunGelu(false, xs, dys), dx = RunGelu(true, xs, dys);
  EXPECT_EQ(y[0], inf);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_TRUE(std::isnan(dx[0]));
  EXPECT_TRUE(std::isnan(dx[1]));
  EXPECT_TRUE(std::isnan(dx[2]));
  EXPECT_TRUE(std::isnan(dx[3]));
}

// The tanh approximation (approximate='tanh': Cephes' tanhf in vectors,
// cpu_gelu_erf.h) against float64 of PyTorch's formulas at the float input,
// t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3):
//   y = x/2 (1 + t),   D = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2).
// Tolerance, in u = 2^-24, relative to the magnitude of the terms (1 + t
// cancels as t -> -1, 1 - t^2 as |t| -> 1, in every float formula, PyTorch's
// too): u from its four float operations is within 2.5 u |u|, which moves
// tanh by (1 - t^2) 2.5 u |u| <= 1.2 u (u (1 - t^2) <= 0.45); tanh itself is
// within 3 u |t| (Cephes' polynomial 2.2 u below |u| = 0.625; (1 - e) /
// (1 + e) with e's 2 u above, 1 - e >= 0.71); so |t error| <= 4.2 u and 1 + t
// is within 5 u (1 + |t|): y within 5.5 u of M = |x|/2 (1 + |t|), allowed
// 8 u M. D: (1 + t)/2 as above; 1 - t^2 within 9 u (1 + t^2), the products
// and the sum 3 u more: within 12 u of M' = (1 + |t|)/2 + |x|/2 (1 + t^2)
// sqrt(2/pi) (1 + 3 0.044715 x^2), dx = dy D 0.5 u more, allowed 16 u M' |dy|.
// The gradient is checked for |x| <= 1e18: above ~1.8e19 x^2 overflows in
// float and D is NaN (0 * Inf), as in PyTorch's float32 gelu_backward.
TEST(GeluAccuracy, TanhFormAgainstFloat64) {
  std::vector<float> xs = Sweep(), dys(xs.size());
  for (size_t i = 0; i < xs.size(); ++i)
    dys[i] = (i % 2 ? -1.0f : 1.0f) * (0.5f + static_cast<float>(i % 97) / 64.0f);
  const std::vector<float> y = RunGelu(false, xs, dys, "tanh"), dx = RunGelu(true, xs, dys, "tanh");
  const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
  double worst_y = 0, worst_d = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i], t = std::tanh(beta * (x + kappa * x * x * x));
    const double want_y = 0.5 * x * (1 + t), m = 0.5 * std::fabs(x) * (1 + std::fabs(t));
    const double err_y = std::fabs(y[i] - want_y);
    ASSERT_LE(err_y, 8 * kU * m + 1e-38) << "x " << xs[i] << ": got " << y[i] << " want " << want_y;
    if (m > 1e-30)
      worst_y = std::max(worst_y, err_y / (kU * m));
    if (std::fabs(x) > 1e18)
      continue;
    const double inner = beta * (1 + 3 * kappa * x * x);
    const double d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * inner;
    const double md = 0.5 * (1 + std::fabs(t)) + 0.5 * std::fabs(x) * (1 + t * t) * inner;
    const double err_d = std::fabs(dx[i] - dys[i] * d);
    ASSERT_LE(err_d, 16 * kU * md * std::fabs(dys[i]) + 1e-38)
        << "x " << xs[i] << " dy " << dys[i] << ": got " << dx[i] << " want " << dys[i] * d;
    worst_d = std::max(worst_d, err_d / (kU * md * std::fabs(dys[i])));
  }
  printf("GELU (tanh): max error %.2f u of |x|/2 (1 + |t|); gradient %.2f u of its terms\n",
         worst_y, worst_d);
}

// GeluAux (the CPU's gelu-aux lowering, passes/gelu_aux.c) against Gelu and
// GeluGrad, both approximations, over the sweep and Inf / NaN: Y equals
// Gelu's bits, and dY * D (one float product) GeluGrad's bits, for every x
// (tolerance 0: the same operations in the same order; a NaN may differ
// only in its payload).
TEST(GeluAux, EqualsGeluAndGeluGradBitwise) {
  std::vector<float> xs = Sweep(), dys(xs.size());
  for (float v : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    xs.push_back(v);
  dys.resize(xs.size());
  for (size_t i = 0; i < xs.size(); ++i)
    dys[i] = (i % 2 ? -1.0f : 1.0f) * (0.5f + static_cast<float>(i % 97) / 64.0f);
  for (const char *form : {"none", "tanh"}) {
    SCOPED_TRACE(form);
    gcc_attr av[1];
    std::memset(av, 0, sizeof av);
    av[0].type = GCC_ATTR_STRING;
    av[0].s = const_cast<char *>(form);
    gcc_node node;
    std::memset(&node, 0, sizeof node);
    node.av = av;
    node.n_av = 1;
    const int64_t n = static_cast<int64_t>(xs.size());
    std::vector<float> y0(xs.size()), dx0(xs.size()), y1(xs.size()), d1(xs.size());
    gcc_tensor x{}, dy{}, ty0{}, tdx0{}, ty1{}, td1{};
    for (gcc_tensor *t : {&x, &dy, &ty0, &tdx0, &ty1, &td1}) {
      t->dtype = GCC_DT_FLOAT32;
      t->numel = n;
    }
    x.data = xs.data();
    dy.data = dys.data();
    ty0.data = y0.data();
    tdx0.data = dx0.data();
    ty1.data = y1.data();
    td1.data = d1.data();
    gcc_tensor *fin[1] = {&x}, *gin[2] = {&dy, &x}, *fo[1] = {&ty0}, *go[1] = {&tdx0},
               *ao[2] = {&ty1, &td1};
    gcc_kernel_args a{};
    a.node = &node;
    a.in = fin, a.n_in = 1, a.out = fo, a.n_out = 1;
    ASSERT_EQ(gcc_cpu_gelu(&a), GCC_OK);
    a.in = gin, a.n_in = 2, a.out = go;
    ASSERT_EQ(gcc_cpu_gelu_grad(&a), GCC_OK);
    a.in = fin, a.n_in = 1, a.out = ao, a.n_out = 2;
    ASSERT_EQ(gcc_cpu_gelu_aux(&a), GCC_OK);
    for (size_t i = 0; i < xs.size(); ++i) {
      const float dx1 = dys[i] * d1[i];
      if (std::isnan(y0[i]))
        EXPECT_TRUE(std::isnan(y1[i])) << "x " << xs[i];
      else
        EXPECT_EQ(std::memcmp(&y0[i], &y1[i], 4), 0)
            << "x " << xs[i] << ": " << y0[i] << " " << y1[i];
      if (std::isnan(dx0[i]))
        EXPECT_TRUE(std::isnan(dx1)) << "x " << xs[i];
      else
        EXPECT_EQ(std::memcmp(&dx0[i], &dx1, 4), 0)
            << "x " << xs[i] << ": " << dx0[i] << " " << dx1;
    }
  }
}

// The 8-float forms of the exact GELU's loops (what a CPU with AVX2 but not
// AVX-512 runs; gcc_cpu_set_narrow_vectors(1) makes an AVX-512 machine run
// them too) against the machine's own forms: Gelu, GeluGrad and GeluAux
// bit for bit over the sweep, Inf and NaN (tolerance 0: every element goes
// through the same operations, fused alike; a NaN may differ only in its
// payload), at lengths whose tails are 0-15 elements past a multiple of 16.
// So the float64 bounds above hold for the 8-float forms wherever they hold
// for the machine's own. (On an AVX2 machine both runs take the 8-float
// forms, and the tests above check them directly; in the ASan build,
// which has no ISA clones, neither does, and the test says so.)
struct NarrowGuard {
  ~NarrowGuard() { gcc_cpu_set_narrow_vectors(0); }
};

TEST(GeluNarrow, EightFloatFormsEqualTheMachinesFormsBitwise) {
  NarrowGuard guard;
  std::vector<float> all = Sweep();
  for (float v : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    all.push_back(v);
  bool narrow = false;
  // the exact GELU (no attribute) and the tanh approximation
  for (const char *approx : {static_cast<const char *>(nullptr), "tanh"})
    for (size_t cut = 0; cut < 16; cut += 3) {
      std::vector<float> xs(all.begin(), all.end() - static_cast<std::ptrdiff_t>(cut)),
          dys(xs.size());
      for (size_t i = 0; i < xs.size(); ++i)
        dys[i] = (i % 2 ? -1.0f : 1.0f) * (0.5f + static_cast<float>(i % 97) / 64.0f);
      const int64_t n = static_cast<int64_t>(xs.size());
      std::vector<float> out[2][4]; // [form][y, dx, aux y, aux d]
      for (int f = 0; f < 2; ++f) {
        const int on = gcc_cpu_set_narrow_vectors(f);
        if (f == 1)
          narrow = on != 0;
        gcc_node node;
        std::memset(&node, 0, sizeof node);
        gcc_attr av[1];
        std::memset(av, 0, sizeof av);
        if (approx) {
          av[0].type = GCC_ATTR_STRING;
          av[0].s = const_cast<char *>(approx);
          node.av = av;
          node.n_av = 1;
        }
        for (auto &o : out[f])
          o.assign(xs.size(), 0.0f);
        gcc_tensor x{}, dy{}, t[4]{};
        for (gcc_tensor *p : {&x, &dy, &t[0], &t[1], &t[2], &t[3]}) {
          p->dtype = GCC_DT_FLOAT32;
          p->numel = n;
        }
        x.data = xs.data();
        dy.data = dys.data();
        for (int k = 0; k < 4; ++k)
          t[k].data = out[f][k].data();
        gcc_tensor *fin[1] = {&x}, *gin[2] = {&dy, &x}, *fo[1] = {&t[0]}, *go[1] = {&t[1]},
                   *ao[2] = {&t[2], &t[3]};
        gcc_kernel_args a{};
        a.node = &node;
        a.in = fin, a.n_in = 1, a.out = fo, a.n_out = 1;
        ASSERT_EQ(gcc_cpu_gelu(&a), GCC_OK);
        a.in = gin, a.n_in = 2, a.out = go;
        ASSERT_EQ(gcc_cpu_gelu_grad(&a), GCC_OK);
        a.in = fin, a.n_in = 1, a.out = ao, a.n_out = 2;
        ASSERT_EQ(gcc_cpu_gelu_aux(&a), GCC_OK);
      }
      const char *what[4] = {"Gelu", "GeluGrad", "GeluAux Y", "GeluAux D"};
      for (int k = 0; k < 4; ++k) {
        int bad = 0;
        for (size_t i = 0; i < xs.size() && bad < 5; ++i) {
          const float a = out[0][k][i], b = out[1][k][i];
          if (std::isnan(a) ? !std::isnan(b) : std::memcmp(&a, &b, 4) != 0) {
            ++bad;
            ADD_FAILURE() << what[k] << (approx ? " (tanh)" : "") << " at x " << xs[i] << " (n "
                          << n << "): 16-float form " << a << ", 8-float form " << b;
          }
        }
      }
    }
  std::printf("[gelu] 8-float forms %s\n",
              narrow ? "checked (this CPU has AVX2 and FMA)"
                     : "not available here (a CPU without AVX2 and FMA, or a build without the "
                       "ISA clones: ASan, not x86-64): both runs took the 16-float forms");
}

} // namespace
