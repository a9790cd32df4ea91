#!/usr/bin/env python3
"""Fits the polynomial Q of the CPU's exact GELU (runtime/cpu/cpu_gelu_erf.h).

The kernel computes erfc(z) = e^(-z^2) Q(t) with z = |x| / sqrt 2 clamped to
10 and t = 1 / (1 + z / 2), so t lies in [1/6, 1] and Q(t) is erfcx(z) =
e^(z^2) erfc(z), the scaled complementary error function, a smooth function
of t. The exponential e^(-z^2) = e^(-x^2 / 2) is then also phi(x) times
sqrt(2 pi), so Phi and phi share one exp.

This script fits Q as a degree-9 polynomial in t for relative error
(weighted least squares on 2,000 Chebyshev nodes, reweighted toward the
largest errors: close to minimax), with erfcx computed by mpmath at 40
digits, and prints:
  - the coefficients as float32 (lowest degree first), the kernel's;
  - the fit's maximum relative error over 20,001 points, with the float64
    coefficients and with the float32 ones;
  - the rounding error of Horner's rule in float32 with fused multiply-adds
    at float32 t (tests/gelu_accuracy_test's bound uses it);
  - max |t Q'(t) / Q(t)|, how much t's own rounding error grows in Q.

Needs numpy and mpmath (the bench virtual environment has both:
~/.cache/gcc-train/bench-venv/bin/python tools/fit_erfcx.py). Takes about 1 s.
"""
import mpmath as mp
import numpy as np

DEGREE = 9
LO, HI = 1.0 / 6.0, 1.0  # t at z = 10 and z = 0
U = 2.0 ** -24


def erfcx_of_t(t):
    z = 2 * (1 / mp.mpf(t) - 1)
    return float(mp.exp(z * z) * mp.erfc(z))


def main():
    mp.mp.dps = 40
    k = np.arange(2000)
    ts = (LO + HI) / 2 + (HI - LO) / 2 * np.cos(np.pi * (k + 0.5) / len(k))
    f = np.array([erfcx_of_t(t) for t in ts])
    weights = 1 / f
    for _ in range(30):
        c = np.polynomial.polynomial.polyfit(ts, f, DEGREE, w=weights)
        r = (np.polynomial.polynomial.polyval(ts, c) - f) / f
        weights = weights * (1 + np.abs(r) / np.abs(r).max())
    c32 = c.astype(np.float32)

    dense = np.linspace(LO, HI, 20001).astype(np.float32)
    fd = np.array([erfcx_of_t(float(t)) for t in dense])
    t64 = dense.astype(np.float64)
    fit64 = np.abs(np.polynomial.polynomial.polyval(t64, c) - fd) / fd
    fit32 = np.abs(np.polynomial.polynomial.polyval(t64, c32.astype(np.float64)) - fd) / fd
    p = np.full_like(dense, c32[-1])
    for a in c32[-2::-1]:  # a fused multiply-add rounds once: exact product, one rounding
        p = (p.astype(np.float64) * t64 + np.float64(a)).astype(np.float32)
    ref = np.polynomial.polynomial.polyval(t64, c32.astype(np.float64))
    horner = np.abs(p - ref) / ref
    dq = np.polynomial.polynomial.polyder(c)
    sens = np.abs(t64 * np.polynomial.polynomial.polyval(t64, dq) /
                  np.polynomial.polynomial.polyval(t64, c))

    print("coefficients (float32, t^0 first):")
    for a in c32:
        print("  %.8g" % a)
    print("fit: max relative error %.2e (%.2f u) with float64 coefficients, %.2e (%.2f u) "
          "with float32 ones" % (fit64.max(), fit64.max() / U, fit32.max(), fit32.max() / U))
    print("Horner in float32 with FMA: max relative error %.2e (%.2f u)" %
          (horner.max(), horner.max() / U))
    print("max |t Q'(t) / Q(t)| = %.3f" % sens.max())


if __name__ == "__main__":
    main()
