/*
 * cpu_gelu_erf.h - the exact GELU's loops (cpu_math.c), a template included
 * once per vector width: before each inclusion the includer defines
 *   GE_F, GE_I   the float and int32 vector types (GE_LANES lanes)
 *   GE_HOT       the loops' attributes (target clones or target, FMA)
 *   GE_NAME(x)   the name given to function x (a width suffix)
 * and the inclusion undefines them. No include guard: a template.
 */

/* *cdf = Phi(x) and, with pdf, *pdf = phi(x) = e^(-x^2/2) / sqrt(2 pi), for
 * the GE_LANES floats at xp (inlined into the clones: its own code would be
 * the baseline's) */
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
  GE_F p = t * 0.17087277f - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  GE_F a = (t * p - 1.26551223f) - z * z; /* the small terms first */
  const GE_I ka = a > -87.0f;
  /* NaN -> -87: no NaN reaches the exp */
  a = GCC_VEXP_SEL_T(GE_F, GE_I, a >= -87.0f, a, zero - 87.0f);
  a = GCC_VEXP_SEL_T(GE_F, GE_I, a > 0.0f, zero, a);
  GE_F e;
  GCC_VEXP_LE0_T(GE_F, GE_I, e, a);
  const GE_F h = (GE_F)(ka & (GE_I)(0.5f * (t * e)));
  *cdf = GCC_VEXP_SEL_T(GE_F, GE_I, sign != 0, h, 1.0f - h);
  if (pdf) {
    /* -x^2 / 2 from x, not -z^2: z^2 then keeps one reader (a), so the
     * compiler fuses it into a's sum whether or not pdf is wanted, and Phi
     * has the same bits in Gelu, GeluGrad and GeluAux (x^2 / 2 rounds once,
     * z^2 twice) */
    const GE_F g = -(x * x) * 0.5f;
    const GE_I kg = g > -87.0f;
    /* NaN -> -87, as a */
    const GE_F gc = GCC_VEXP_SEL_T(GE_F, GE_I, g >= -87.0f, g, zero - 87.0f);
    GE_F eg;
    GCC_VEXP_LE0_T(GE_F, GE_I, eg, gc);
    *pdf = (GE_F)(kg & (GE_I)(INV_SQRT_2PI * eg));
  }
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

#undef GE_F
#undef GE_I
#undef GE_LANES
#undef GE_HOT
#undef GE_NAME
