// tensor_model.h - a small model whose output is not classifier logits,
// for the tensor-bundle tests (tests/gcc_api_test.cc: the C API and gcc-run
// on the CPU; tests/bundle_graph_test.cc: the host-emulated GPU): x (N, 3, 4)
// -> MatMul -> Add -> LayerNormalization -> (N, 3, 4), as ONNX bytes, and its
// float64 reference with a derived float32 error bound.
#ifndef GCC_TESTS_TENSOR_MODEL_H_
#define GCC_TESTS_TENSOR_MODEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/onnx_builder.h"

namespace gcc_test {

constexpr int64_t kT = 3, kC = 4;

// y = LayerNormalization(x W + b; gamma, beta, axis -1, epsilon 1e-5):
// (N, T, C) -> (N, T, C), a transformer block's shape. The output is named
// "enc/y", as exporters name values ("/encoder/..."); gcc-run's file for it
// is enc_y.npy.
inline std::vector<uint8_t> TensorModel(std::vector<float> *w, std::vector<float> *b,
                                        std::vector<float> *gamma, std::vector<float> *beta) {
  w->resize(kC * kC);
  for (int64_t i = 0; i < kC * kC; i++)
    (*w)[static_cast<size_t>(i)] = 0.25f * static_cast<float>((i * 7) % 11 - 5);
  *b = {0.5f, -0.25f, 0.125f, 1.0f};
  *gamma = {1.5f, 0.75f, -1.0f, 2.0f};
  *beta = {0.1f, -0.2f, 0.3f, 0.0f};
  OnnxModel m(17);
  m.Input("x", {kBatch, kT, kC});
  m.Init("W", {kC, kC}, *w);
  m.Init("B", {kC}, *b);
  m.Init("gamma", {kC}, *gamma);
  m.Init("beta", {kC}, *beta);
  m.Node("MatMul", {"x", "W"}, {"h0"});
  m.Node("Add", {"h0", "B"}, {"h"});
  m.Node("LayerNormalization", {"h", "gamma", "beta"}, {"enc/y"},
         {m.Int("axis", -1), m.Float("epsilon", 1e-5f)});
  m.Output("enc/y");
  return m.Bytes();
}

// The float64 reference of TensorModel and, per value, a bound on float32's
// error derived from the computation (u = 2^-24, one rounding per operation):
//  - h_j = sum_k x_k W_kj + b_j: |dh| <= (K + 1) u S_j, S_j = sum_k |x_k W_kj| + |b_j|;
//  - the centred values h - mean: E = 2 max|dh| + C u max|h|;
//  - sigma = sqrt(var + eps) relative: E / sigma, plus C u (max|h| / sigma)^2
//    when var is computed as E[h^2] - mean^2 (the cancellation), plus C u;
//  - y = (h - mean) / sigma * gamma + beta with |h - mean| / sigma <= sqrt(C - 1):
//    |dy| <= |gamma| (E / sigma + sqrt(C - 1) rel(sigma)) + 2 u (|y| + |beta|).
// The assertion allows twice that (the kernels may order the sums otherwise).
inline void TensorReference(const std::vector<float> &x, const std::vector<float> &w,
                            const std::vector<float> &b, const std::vector<float> &gamma,
                            const std::vector<float> &beta, int64_t rows, std::vector<double> *y,
                            std::vector<double> *bound) {
  const double u = std::ldexp(1.0, -24);
  y->assign(static_cast<size_t>(rows * kT * kC), 0.0);
  bound->assign(y->size(), 0.0);
  for (int64_t r = 0; r < rows * kT; r++) {
    double h[kC], s[kC], mean = 0, var = 0, hmax = 0, dh = 0;
    for (int64_t j = 0; j < kC; j++) {
      h[j] = b[static_cast<size_t>(j)];
      s[j] = std::fabs(h[j]);
      for (int64_t k = 0; k < kC; k++) {
        double p = static_cast<double>(x[static_cast<size_t>(r * kC + k)]) *
                   w[static_cast<size_t>(k * kC + j)];
        h[j] += p;
        s[j] += std::fabs(p);
      }
      mean += h[j] / kC;
      hmax = std::max(hmax, std::fabs(h[j]));
      dh = std::max(dh, (kC + 1) * u * s[j]);
    }
    for (int64_t j = 0; j < kC; j++)
      var += (h[j] - mean) * (h[j] - mean) / kC;
    double sigma = std::sqrt(var + 1e-5);
    double e = 2 * dh + kC * u * hmax;
    double rel = e / sigma + kC * u * (hmax / sigma) * (hmax / sigma) + kC * u;
    for (int64_t j = 0; j < kC; j++) {
      size_t i = static_cast<size_t>(r * kC + j);
      double g = gamma[static_cast<size_t>(j)], be = beta[static_cast<size_t>(j)];
      (*y)[i] = (h[j] - mean) / sigma * g + be;
      (*bound)[i] = 2 * (std::fabs(g) * (e / sigma + std::sqrt(kC - 1.0) * rel) +
                         2 * u * (std::fabs((*y)[i]) + std::fabs(be)));
    }
  }
}

// The model's input for `rows` rows: values k / 8, k in [-11, 11].
inline std::vector<float> TensorInput(int64_t rows) {
  std::vector<float> x(static_cast<size_t>(rows * kT * kC));
  for (size_t i = 0; i < x.size(); i++)
    x[i] = static_cast<float>(static_cast<int>((i * 37) % 23) - 11) / 8.0f;
  return x;
}

} // namespace gcc_test

#endif // GCC_TESTS_TENSOR_MODEL_H_
