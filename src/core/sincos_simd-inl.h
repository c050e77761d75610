// SinCosReduced: sine and cosine together of an already reduced angle |x| <= pi + 2^-30, in
// double, one Highway vector at a time (used by src/core/angle_simd-inl.h for RoPE's cos/sin rows
// and the sinusoidal tables; included once per target, Highway's -inl.h toggle).
//
// Why not Highway's Sin and Cos: each repeats the quadrant reduction and a polynomial, and they
// document 3 ulp; computing both from one reduction halves the work of the RoPE cos/sin rows and
// the sinusoidal table, and the error below is smaller.
//
// Method (fdlibm, Sun Microsystems 1993, k_sin.c / k_cos.c):
//   q = round(x * 2/pi) in {-2, .., 2};  y = x - q pi/2 with pi/2 = P1 + P2 + P3 (P1 with 33
//   significant bits, so q P1 is exact for |q| <= 2 and x - q P1 is exact by Sterbenz: x lies
//   within pi/4 of q pi/2 and the two are within a factor of 2 when q != 0). The two further fma
//   steps round twice: |y - (x - q pi/2)| <= 2 * 2^-54 = 2^-53 (|y| <= pi/4 + 2^-30 < 1), plus
//   |q| * 2^-100 for the truncated pi/2.
//   sin(y) = y + y^3 (S1 + z S2 + .. + z^5 S6), z = y^2; polynomial error < 2^-58 on
//   [-pi/4, pi/4] (fdlibm); evaluation: the final add rounds (<= 2^-54 since |sin y| < 0.71)
//   and the y^3 term (<= 0.081) carries a few roundings of 2^-53 relative: <= 0.3 * 2^-53.
//   cos(y) = 1 - z/2 + z^2 (C1 + z C2 + .. + z^5 C6); z = y*y is split exactly (fma) so
//   1 - z/2 is formed as t + e with t = fl(1 - z/2) and e its exact remainder; the final add
//   rounds (<= 2^-54), the small terms (<= 0.04) carry <= 0.1 * 2^-53: <= 0.6 * 2^-53.
//   The quadrant q mod 4 swaps and negates exactly.
// Total: |sin, cos error| <= 2^-53 (reduction) + 0.8 * 2^-53 (kernel) < 1.8 * 2^-53 absolute.
// Valid for |x| <= pi + 2^-30 (|q| <= 2 keeps q P1 exact); callers reduce mod 2 pi first.

#if defined(POSENC_SINCOS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_SINCOS_SIMD_INL_H_
#undef POSENC_SINCOS_SIMD_INL_H_
#else
#define POSENC_SINCOS_SIMD_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {
namespace sincos_detail {
namespace hn = hwy::HWY_NAMESPACE;
// pi/2 = kPio2_1 + kPio2_2 + kPio2_3 (fdlibm e_rem_pio2.c: pio2_1 has 33 bits, pio2_2 33 bits,
// pio2_2t the rest to ~2^-140 of pi/2).
constexpr double kTwoOverPi = 6.36619772367581382433e-01;
constexpr double kPio2_1 = 1.57079632673412561417e+00;
constexpr double kPio2_2 = 6.07710050630396597660e-11;
constexpr double kPio2_3 = 2.02226624879595063154e-21;
// fdlibm k_sin.c and k_cos.c minimax coefficients on [-pi/4, pi/4].
constexpr double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03,
                 kS3 = -1.98412698298579493134e-04, kS4 = 2.75573137070700676789e-06,
                 kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
constexpr double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03,
                 kC3 = 2.48015872894767294178e-05, kC4 = -2.75573143513906633035e-07,
                 kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;
}  // namespace sincos_detail

// s = sin(x), c = cos(x) for |x| <= pi + 2^-30, error < 1.8 * 2^-53 absolute (see above).
// Needs a native FMA (callers check HWY_NATIVE_FMA).
template <class D, class V = hwy::HWY_NAMESPACE::Vec<D>>
HWY_INLINE void SinCosReduced(D d, V x, V& s, V& c) {
  namespace hn = hwy::HWY_NAMESPACE;
  using namespace sincos_detail;
  const V q = hn::Round(hn::Mul(x, hn::Set(d, kTwoOverPi)));
  V y = hn::NegMulAdd(q, hn::Set(d, kPio2_1), x);  // exact
  y = hn::NegMulAdd(q, hn::Set(d, kPio2_2), y);
  y = hn::NegMulAdd(q, hn::Set(d, kPio2_3), y);
  const V z = hn::Mul(y, y);
  // sin(y) = y + y z (S1 + z r_s)
  V rs = hn::MulAdd(z, hn::Set(d, kS6), hn::Set(d, kS5));
  rs = hn::MulAdd(z, rs, hn::Set(d, kS4));
  rs = hn::MulAdd(z, rs, hn::Set(d, kS3));
  rs = hn::MulAdd(z, rs, hn::Set(d, kS2));
  const V sy = hn::MulAdd(hn::Mul(y, z), hn::MulAdd(z, rs, hn::Set(d, kS1)), y);
  // cos(y) = (1 - z/2) + z^2 r_c: z = zh exactly + zl (fma), t = fl(1 - zh/2), e = (1 - t) -
  // zh/2 exactly (Fast2Sum: |1| >= |zh/2|), then t + (e - zl/2 + z^2 r_c).
  V rc = hn::MulAdd(z, hn::Set(d, kC6), hn::Set(d, kC5));
  rc = hn::MulAdd(z, rc, hn::Set(d, kC4));
  rc = hn::MulAdd(z, rc, hn::Set(d, kC3));
  rc = hn::MulAdd(z, rc, hn::Set(d, kC2));
  rc = hn::MulAdd(z, rc, hn::Set(d, kC1));
  const V half = hn::Set(d, 0.5), one = hn::Set(d, 1.0);
  const V zl = hn::MulSub(y, y, z);
  const V hz = hn::Mul(half, z);
  const V t = hn::Sub(one, hz);
  const V e = hn::Sub(hn::Sub(one, t), hz);
  const V small = hn::MulAdd(hn::Mul(z, z), rc, hn::NegMulAdd(half, zl, e));
  const V cy = hn::Add(t, small);
  // Quadrant n = q mod 4 (as a double in {0, 1, 2, 3}):
  //   n = 0: (sin, cos) = ( S,  C);  1: ( C, -S);  2: (-S, -C);  3: (-C,  S)
  const V n = hn::Sub(q, hn::Mul(hn::Set(d, 4.0), hn::Floor(hn::Mul(q, hn::Set(d, 0.25)))));
  const auto odd = hn::Or(hn::Eq(n, hn::Set(d, 1.0)), hn::Eq(n, hn::Set(d, 3.0)));
  const auto sin_neg = hn::Ge(n, hn::Set(d, 2.0));
  const auto cos_neg = hn::Or(hn::Eq(n, hn::Set(d, 1.0)), hn::Eq(n, hn::Set(d, 2.0)));
  const V sv = hn::IfThenElse(odd, cy, sy);
  const V cv = hn::IfThenElse(odd, sy, cy);
  s = hn::IfThenElse(sin_neg, hn::Neg(sv), sv);
  c = hn::IfThenElse(cos_neg, hn::Neg(cv), cv);
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_SINCOS_SIMD_INL_H_
