// The angle reductions of src/core/angle.hpp one Highway vector of doubles at a time, plus
// sine and cosine of the reduced angle (SinCosReduced, src/core/sincos_simd-inl.h). Included
// once per target from translation units compiled through hwy/foreach_target.h (Highway's -inl.h
// toggle). Each routine runs the scalar routine's operations in the same order, lane by lane, so
// a lane's reduced angle is bitwise the scalar one; the scalar routines serve tails and targets
// without a native FMA.
//
// The lane routines need a native FMA (MulSub / NegMulAdd must be exact two-products and single
// roundings): callers guard them with `#if HWY_NATIVE_FMA` and otherwise run the scalar loop.

#include "src/core/angle.hpp"

#if defined(POSENC_ANGLE_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ANGLE_SIMD_INL_H_
#undef POSENC_ANGLE_SIMD_INL_H_
#else
#define POSENC_ANGLE_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include "src/core/sincos_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

// TwoSum lane-wise (posenc::detail::two_sum): a + b = s + e exactly.
template <class D, class V = hwy::HWY_NAMESPACE::Vec<D>>
HWY_INLINE void TwoSumV(D /*d*/, V a, V b, V& s, V& e) {
  namespace hn = hwy::HWY_NAMESPACE;
  s = hn::Add(a, b);
  const V bb = hn::Sub(s, a);
  e = hn::Add(hn::Sub(a, hn::Sub(s, bb)), hn::Sub(b, bb));
}

// AngleReduceExact: rh + rl = p w - 2 pi k lane-wise, the steps of detail::angle_reduce_exact
// (without its k == 0 shortcut, which gives the same bits).
// Valid range: p integer in [0, 2^53], w >= 0 with p w <= 2^53 (k <= 2^51), w = 0 or
// w >= 2^-900. Error: |rh + rl - (p w - 2 pi k)| <= 2^-100, |rh| <= pi + 2^-40, |rl| <=
// ulp(rh) / 2. Needs HWY_NATIVE_FMA.
template <class D, class V = hwy::HWY_NAMESPACE::Vec<D>>
HWY_INLINE void AngleReduceExact(D d, V p, V w, V& rh, V& rl) {
  namespace hn = hwy::HWY_NAMESPACE;
  const V P0 = hn::Set(d, ::posenc::detail::kTwoPi0), P1 = hn::Set(d, ::posenc::detail::kTwoPi1);
  const V P2 = hn::Set(d, ::posenc::detail::kTwoPi2);
  const V hi = hn::Mul(p, w);
  const V lo = hn::MulSub(p, w, hi);  // exact: p w - hi
  const V k = hn::Round(hn::Mul(hi, hn::Set(d, ::posenc::detail::kInvTwoPi)));
  const V a0 = hn::Mul(k, P0), b0 = hn::MulSub(k, P0, a0);
  const V a1 = hn::Mul(k, P1), b1 = hn::MulSub(k, P1, a1);
  V sum, err;
  TwoSumV(d, hn::Sub(hi, a0), hn::Neg(b0), sum, err);  // hi - a0 is exact (Sterbenz)
  V acc = err;
  TwoSumV(d, sum, hn::Neg(a1), sum, err);
  acc = hn::Add(acc, err);
  TwoSumV(d, sum, lo, sum, err);
  acc = hn::Add(acc, err);
  acc = hn::Add(acc, hn::Sub(hn::Neg(b1), hn::Mul(k, P2)));
  TwoSumV(d, sum, acc, rh, rl);
}

// CosSinExact: c = cos(p w), s = sin(p w): AngleReduceExact, SinCosReduced of rh
// (|rh| <= pi + 2^-40 is inside its range |x| <= pi + 2^-30; error < 1.8 * 2^-53), then the
// first-order correction c = cos(rh) - sin(rh) rl, s = sin(rh) + cos(rh) rl with one FMA each
// (rounds once, <= 2^-54; the dropped rl^2 / 2 < 2^-105 and SinCosReduced's error times
// |rl| <= 2^-51 are negligible).
// Valid range: that of AngleReduceExact. Error: |c - cos(p w)|, |s - sin(p w)| <= 2.5 * 2^-53
// absolute (< 2.8e-16). The scalar twin detail::angle_cos_sin_exact (libm) is within 2^-52;
// the two differ in the last bits, not in the reduction. Needs HWY_NATIVE_FMA.
template <class D, class V = hwy::HWY_NAMESPACE::Vec<D>>
HWY_INLINE void CosSinExact(D d, V p, V w, V& c, V& s) {
  namespace hn = hwy::HWY_NAMESPACE;
  V rh, rl;
  AngleReduceExact(d, p, w, rh, rl);
  V sh, ch;
  SinCosReduced(d, rh, sh, ch);
  c = hn::NegMulAdd(sh, rl, ch);
  s = hn::MulAdd(ch, rl, sh);
}

// AngleReduceCw: x (whi + wlo) mod 2pi as one double lane-wise, the steps of
// detail::angle_reduce_cw. Valid range: x integer in [0, 2^53], x whi <= 2^53, whi = 0 or
// whi >= 2^-900. Error: <= 8 * 2^-53 absolute plus 2^-105 relative to x (whi + wlo);
// |r| <= pi + 2^-40. Needs HWY_NATIVE_FMA.
template <class D, class V = hwy::HWY_NAMESPACE::Vec<D>>
HWY_INLINE V AngleReduceCw(D d, V x, V whi, V wlo) {
  namespace hn = hwy::HWY_NAMESPACE;
  const V hi = hn::Mul(x, whi);
  const V lo = hn::MulAdd(x, wlo, hn::MulSub(x, whi, hi));  // fma(x, whi, -hi) + x wlo
  const V n = hn::Round(hn::Mul(hi, hn::Set(d, ::posenc::detail::kInvTwoPi)));
  V r = hn::NegMulAdd(n, hn::Set(d, ::posenc::detail::kTwoPi0), hi);
  r = hn::NegMulAdd(n, hn::Set(d, ::posenc::detail::kTwoPi1), r);
  r = hn::NegMulAdd(n, hn::Set(d, ::posenc::detail::kTwoPi2), r);
  return hn::Add(r, lo);
}

// SinCosCw: s = sin(x (whi + wlo)), c = cos(...): AngleReduceCw then SinCosReduced.
// Valid range: that of AngleReduceCw. Error: < 10 * 2^-53 absolute (8 for the reduction,
// 1.8 for SinCosReduced) plus the 2^-105 relative terms. Needs HWY_NATIVE_FMA.
template <class D, class V = hwy::HWY_NAMESPACE::Vec<D>>
HWY_INLINE void SinCosCw(D d, V x, V whi, V wlo, V& s, V& c) {
  SinCosReduced(d, AngleReduceCw(d, x, whi, wlo), s, c);
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ANGLE_SIMD_INL_H_
