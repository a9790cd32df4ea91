/*
 * cpu_gelu_erf.h - the GELU's loops (cpu_math.c), the exact form's and the
 * tanh approximation's (Gelu, GeluGrad, GeluAux each), a template included
 * once per vector width: before each inclusion the includer defines
 *   GE_F, GE_I   the float and int32 vector types (GE_LANES lanes)
 *   GE_HOT       the loops' attributes (target clones or target, FMA)
 *   GE_NAME(x)   the name given to function x (a width suffix)
 * and the inclusion undefines them. No include guard: a template.
 */

/* *cdf = Phi(x) and, with pdf, *pdf = phi(x) = e^(-x^2/2) / sqrt(2 pi), for
 * the GE_LANES floats at xp (inlined into the clones: its own code would be
 * the baseline's). One exp serves both: with z = |x| / sqrt 2 and
 * t = 1 / (1 + z / 2), erfc(z) = e^(-z^2) Q(t), Q = erfcx (the scaled
 * complementary error function) as a degree-9 polynomial in t on
 * [1/6, 1] (z clamped to 10), fitted for relative error (3.2e-8 = 0.5 u
 * there; tools/fit_erfcx.py), and e^(-z^2) = e^(-x^2/2) = sqrt(2 pi) phi. */
static inline __attribute__((always_inline)) void GE_NAME(gelu_phi_vec)(const float *xp, GE_F *cdf,
                                                                        GE_F *pdf) {
  const GE_F zero = {0};
  const GE_I sign_bit = (GE_I){0} + INT32_MIN;
  GE_F x;
  memcpy(&x, xp, sizeof x);
  const GE_I sign = (GE_I)x & sign_bit; /* x < 0 (or -0) */
  GE_F z = (GE_F)((GE_I)x ^ sign) * SQRT1_2;
  /* NaN stays NaN: the results are NaN through x */
  z = GCC_VEXP_SEL_T(GE_F, GE_I, z > 10.0f, zero + 10.0f, z);
  const GE_F t = 1.0f / (1.0f + 0.5f * z);
  GE_F q = t * -0.05505231f + 0.26390830f;
  q = q * t - 0.44148907f;
  q = q * t + 0.22120506f;
  q = q * t + 0.017066961f;
  q = q * t + 0.18125506f;
  q = q * t + 0.24979191f;
  q = q * t + 0.28109872f;
  q = q * t + 0.28222135f;
  q = q * t - 6.0099533e-06f;
  /* -x^2 / 2: x^2 rounds once (z^2 would carry z's rounding too) */
  const GE_F g = -(x * x) * 0.5f;
  const GE_I kg = g > -87.0f; /* below e^-87: 0 (Phi under 1e-38 |x|) */
  /* NaN -> -87: no NaN reaches the exp */
  const GE_F gc = GCC_VEXP_SEL_T(GE_F, GE_I, g >= -87.0f, g, zero - 87.0f);
  GE_F e;
  GCC_VEXP_LE0_T(GE_F, GE_I, e, gc);
  e = (GE_F)(kg & (GE_I)e);
  const GE_F h = 0.5f * (q * e);
  *cdf = GCC_VEXP_SEL_T(GE_F, GE_I, sign != 0, h, 1.0f - h);
  if (pdf)
    *pdf = INV_SQRT_2PI * e;
}

/* y = x Phi(x) over n floats; the last n % GE_LANES through a padded block */
GE_HOT static void GE_NAME(gelu_erf_loop)(const float *restrict x, float *restrict y, int64_t n) {
  float xb[GE_LANES] = {0};
  for (int64_t i = 0; i < n; i += GE_LANES) {
    const int64_t m = n - i < GE_LANES ? n - i : GE_LANES;
    const float *xp = x + i;
    if (m < GE_LANES) {
      memcpy(xb, xp, (size_t)m * sizeof *xb);
      xp = xb;
    }
    GE_F c, xv;
    GE_NAME(gelu_phi_vec)(xp, &c, NULL);
    memcpy(&xv, xp, sizeof xv);
    xv = xv * c;
    if (m < GE_LANES) {
      memcpy(xb, &xv, sizeof xv);
      memcpy(y + i, xb, (size_t)m * sizeof *xb);
    } else {
      memcpy(y + i, &xv, sizeof xv);
    }
  }
}

/* dx = dy (Phi(x) + x phi(x)) over n floats, the tail as gelu_erf_loop's */
GE_HOT static void GE_NAME(gelu_erf_grad_loop)(const float *restrict dy, const float *restrict x,
                                               float *restrict dx, int64_t n) {
  float xb[GE_LANES] = {0}, db[GE_LANES] = {0};
  for (int64_t i = 0; i < n; i += GE_LANES) {
    const int64_t m = n - i < GE_LANES ? n - i : GE_LANES;
    const float *xp = x + i, *dp = dy + i;
    if (m < GE_LANES) {
      memcpy(xb, xp, (size_t)m * sizeof *xb);
      memcpy(db, dp, (size_t)m * sizeof *db);
      xp = xb;
      dp = db;
    }
    GE_F c, pd, xv, dv;
    GE_NAME(gelu_phi_vec)(xp, &c, &pd);
    memcpy(&xv, xp, sizeof xv);
    memcpy(&dv, dp, sizeof dv);
    dv = dv * (c + xv * pd);
    if (m < GE_LANES) {
      memcpy(db, &dv, sizeof dv);
      memcpy(dx + i, db, (size_t)m * sizeof *db);
    } else {
      memcpy(dx + i, &dv, sizeof dv);
    }
  }
}

/* y = x Phi(x) and d = Phi(x) + x phi(x) over n floats: gelu_erf_loop's y and
 * the factor gelu_erf_grad_loop multiplies dy by, the same operations (so
 * the same bits) in one pass, the tail as there */
GE_HOT static void GE_NAME(gelu_erf_aux_loop)(const float *restrict x, float *restrict y,
                                              float *restrict dd, int64_t n) {
  float xb[GE_LANES] = {0};
  for (int64_t i = 0; i < n; i += GE_LANES) {
    const int64_t m = n - i < GE_LANES ? n - i : GE_LANES;
    const float *xp = x + i;
    if (m < GE_LANES) {
      memcpy(xb, xp, (size_t)m * sizeof *xb);
      xp = xb;
    }
    GE_F c, pd, xv;
    GE_NAME(gelu_phi_vec)(xp, &c, &pd);
    memcpy(&xv, xp, sizeof xv);
    const GE_F yv = xv * c, dv = c + xv * pd;
    if (m < GE_LANES) {
      memcpy(xb, &yv, sizeof yv);
      memcpy(y + i, xb, (size_t)m * sizeof *xb);
      memcpy(xb, &dv, sizeof dv);
      memcpy(dd + i, xb, (size_t)m * sizeof *xb);
    } else {
      memcpy(y + i, &yv, sizeof yv);
      memcpy(dd + i, &dv, sizeof dv);
    }
  }
}

/* The tanh approximation (PyTorch's approximate='tanh', GPT-2's gelu_new):
 * t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3), for the GE_LANES floats
 * at xp, one t for y = x/2 (1 + t) and for the derivative. tanh as Cephes'
 * tanhf: u + u^3 P(u^2) for |u| < 0.625 (its minimax polynomial, ~1.5
 * ulp), else sign(u) (1 - e) / (1 + e), e = e^(-2|u|) (1 - e >= 0.71 there:
 * no cancellation), e^-87 for |u| > 43.5 (t = +-1 in float from 9.01). */
static inline __attribute__((always_inline)) void GE_NAME(gelu_tanh_vec)(const float *xp, GE_F *xo,
                                                                         GE_F *to) {
  const GE_F zero = {0};
  const GE_I sign_bit = (GE_I){0} + INT32_MIN;
  GE_F v;
  memcpy(&v, xp, sizeof v);
  const GE_F v2 = v * v;
  const GE_F u = GELU_BETA * (v + GELU_KAPPA * v2 * v);
  const GE_I sign = (GE_I)u & sign_bit;
  const GE_F a = (GE_F)((GE_I)u ^ sign); /* |u|; NaN stays NaN */
  const GE_F z = u * u;
  GE_F p = z * -5.70498872745e-3f + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const GE_F small = p * z * u + u;
  GE_F g = -2.0f * a;
  /* NaN -> -87: no NaN reaches the exp (t is then finite; y is NaN through x) */
  g = GCC_VEXP_SEL_T(GE_F, GE_I, g >= -87.0f, g, zero - 87.0f);
  GE_F e;
  GCC_VEXP_LE0_T(GE_F, GE_I, e, g);
  const GE_F large = (GE_F)((GE_I)((1.0f - e) / (1.0f + e)) | sign);
  *to = GCC_VEXP_SEL_T(GE_F, GE_I, a < 0.625f, small, large);
  *xo = v;
}

/* y = x/2 (1 + t) over n floats, the tail as gelu_erf_loop's */
GE_HOT static void GE_NAME(gelu_tanh_loop)(const float *restrict x, float *restrict y, int64_t n) {
  float xb[GE_LANES] = {0};
  for (int64_t i = 0; i < n; i += GE_LANES) {
    const int64_t m = n - i < GE_LANES ? n - i : GE_LANES;
    const float *xp = x + i;
    if (m < GE_LANES) {
      memcpy(xb, xp, (size_t)m * sizeof *xb);
      xp = xb;
    }
    GE_F v, t;
    GE_NAME(gelu_tanh_vec)(xp, &v, &t);
    const GE_F yv = 0.5f * v * (1.0f + t);
    if (m < GE_LANES) {
      memcpy(xb, &yv, sizeof yv);
      memcpy(y + i, xb, (size_t)m * sizeof *xb);
    } else {
      memcpy(y + i, &yv, sizeof yv);
    }
  }
}

/* D = (1 + t) / 2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2), the
 * factor of dy (torch's gelu_backward, approximate='tanh') */
static inline __attribute__((always_inline)) void GE_NAME(gelu_tanh_d)(const GE_F *vp,
                                                                       const GE_F *tp, GE_F *dp) {
  const GE_F v = *vp, t = *tp;
  const GE_F left = 0.5f * v, right = 1.0f + t;
  const GE_F dleft = 0.5f * right;
  const GE_F dright = left * (1.0f - t * t) * GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * (v * v));
  *dp = dleft + dright;
}

/* dx = dy D over n floats, the tail as gelu_erf_grad_loop's */
GE_HOT static void GE_NAME(gelu_tanh_grad_loop)(const float *restrict dy, const float *restrict x,
                                                float *restrict dx, int64_t n) {
  float xb[GE_LANES] = {0}, db[GE_LANES] = {0};
  for (int64_t i = 0; i < n; i += GE_LANES) {
    const int64_t m = n - i < GE_LANES ? n - i : GE_LANES;
    const float *xp = x + i, *dp = dy + i;
    if (m < GE_LANES) {
      memcpy(xb, xp, (size_t)m * sizeof *xb);
      memcpy(db, dp, (size_t)m * sizeof *db);
      xp = xb;
      dp = db;
    }
    GE_F v, t, dv;
    GE_NAME(gelu_tanh_vec)(xp, &v, &t);
    memcpy(&dv, dp, sizeof dv);
    GE_F dd;
    GE_NAME(gelu_tanh_d)(&v, &t, &dd);
    dv = dv * dd;
    if (m < GE_LANES) {
      memcpy(db, &dv, sizeof dv);
      memcpy(dx + i, db, (size_t)m * sizeof *db);
    } else {
      memcpy(dx + i, &dv, sizeof dv);
    }
  }
}

/* gelu_tanh_loop's y and gelu_tanh_grad_loop's D in one pass */
GE_HOT static void GE_NAME(gelu_tanh_aux_loop)(const float *restrict x, float *restrict y,
                                               float *restrict dd, int64_t n) {
  float xb[GE_LANES] = {0};
  for (int64_t i = 0; i < n; i += GE_LANES) {
    const int64_t m = n - i < GE_LANES ? n - i : GE_LANES;
    const float *xp = x + i;
    if (m < GE_LANES) {
      memcpy(xb, xp, (size_t)m * sizeof *xb);
      xp = xb;
    }
    GE_F v, t;
    GE_NAME(gelu_tanh_vec)(xp, &v, &t);
    const GE_F yv = 0.5f * v * (1.0f + t);
    GE_F dv;
    GE_NAME(gelu_tanh_d)(&v, &t, &dv);
    if (m < GE_LANES) {
      memcpy(xb, &yv, sizeof yv);
      memcpy(y + i, xb, (size_t)m * sizeof *xb);
      memcpy(xb, &dv, sizeof dv);
      memcpy(dd + i, xb, (size_t)m * sizeof *xb);
    } else {
      memcpy(y + i, &yv, sizeof yv);
      memcpy(dd + i, &dv, sizeof dv);
    }
  }
}

#undef GE_F
#undef GE_I
#undef GE_LANES
#undef GE_HOT
#undef GE_NAME
