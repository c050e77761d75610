// Angle reduction mod 2*pi, written once (private header): the triple-double 2*pi, the exact
// reduction of RoPE's exact angle mode and the Cody-Waite reduction of the sinusoidal tables,
// in plain scalar double arithmetic. src/core/angle_simd-inl.h runs the same steps lane-wise
// (Highway) and calls these for its tails, so both give the same bits for the same inputs.
//
// Every FMA is written out (std::fma; the project builds with -ffp-contract=off): the error-free
// products below depend on it.
#pragma once

#include <cmath>

namespace posenc::detail {

// 2*pi = kTwoPi0 + kTwoPi1 + kTwoPi2 to about 2^-160 (each the double nearest the remainder;
// from Machin's formula at 80 decimal digits). kTwoPi0 is the double nearest 2*pi.
inline constexpr double kTwoPi0 = 0x1.921fb54442d18p+2;
inline constexpr double kTwoPi1 = 0x1.1a62633145c07p-52;
inline constexpr double kTwoPi2 = -0x1.f1976b7ed8fbcp-108;
inline constexpr double kInvTwoPi = 0.15915494309189533577;

// Knuth's TwoSum: a + b = s + e exactly (s = fl(a + b)), any finite a, b.
inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

// angle_reduce_exact: rh + rl = p * w - k * 2pi with k = round(p w / 2pi), as a double-double.
//   p * w = hi + lo exactly (FMA two-product). k = nearbyint(hi / 2pi). k P0 and k P1 are split
//   exactly by FMA (a0 + b0, a1 + b1); hi - a0 is exact (Sterbenz: for k != 0, a0 lies within
//   a factor 2 of hi); the remaining terms are summed with TwoSum, their rounding errors
//   gathered in acc, and a last TwoSum gives rh + rl with |rl| <= ulp(rh) / 2.
// Valid range: p an integer with 0 <= p <= 2^53 (exact in double), w >= 0 finite with
//   p w <= 2^53 (so k <= 2^51) and w = 0 or w >= 2^-900 (the two-product does not underflow).
// Error: |rh + rl - (p w - 2 pi k)| <= 2^-100 absolute (the roundings of acc, each <= 2^-104,
//   and k times the 2^-160 truncation of the triple-double 2pi); |rh| <= pi + 2^-40.
// k == 0 (p w < pi) takes a shortcut that gives the same rh, rl as the general steps (with
// k = 0 every product vanishes and the TwoSum chain reduces to TwoSum(hi, lo)), so the lane
// code, which has no branch, agrees bit for bit.
inline void angle_reduce_exact(double p, double w, double& rh, double& rl) {
  const double hi = p * w;
  const double lo = std::fma(p, w, -hi);
  const double k = std::nearbyint(hi * kInvTwoPi);
  if (k == 0) {
    two_sum(hi, lo, rh, rl);
    return;
  }
  const double a0 = k * kTwoPi0, b0 = std::fma(k, kTwoPi0, -a0);
  const double a1 = k * kTwoPi1, b1 = std::fma(k, kTwoPi1, -a1);
  const double r0 = hi - a0;  // exact
  double sum, err, acc = 0;
  two_sum(r0, -b0, sum, err);
  acc += err;
  two_sum(sum, -a1, sum, err);
  acc += err;
  two_sum(sum, lo, sum, err);
  acc += err;
  acc += -b1 - k * kTwoPi2;
  two_sum(sum, acc, rh, rl);
}

// angle_cos_sin_exact: c = cos(p w), s = sin(p w) through angle_reduce_exact, libm cos/sin of
// rh and the first-order correction cos(rh + rl) = cos(rh) - sin(rh) rl (sin likewise).
// Valid range: that of angle_reduce_exact.
// Error: |c - cos(p w)|, |s - sin(p w)| <= 2^-52 absolute: libm (glibc) < 1 ulp <= 2^-53, the
//   correction's add rounds by <= 2^-54, the reduction 2^-100 and the dropped rl^2 / 2 < 2^-105
//   are negligible.
inline void angle_cos_sin_exact(double p, double w, double& c, double& s) {
  double rh, rl;
  angle_reduce_exact(p, w, rh, rl);
  const double ch = std::cos(rh), sh = std::sin(rh);
  c = ch - sh * rl;
  s = sh + ch * rl;
}

// angle_reduce_cw: x * (whi + wlo) reduced mod 2pi to one double, Cody-Waite with three FMA
// steps against the triple-double 2pi (the sinusoidal tables, whose frequencies are
// double-doubles).
//   hi + lo1 = x * whi exactly (FMA), lo = lo1 + x * wlo; n = nearbyint(hi / 2pi);
//   r = ((hi - n P0) - n P1) - n P2, one FMA (one rounding) per step, then r + lo.
// Valid range: x an integer with 0 <= x <= 2^53, whi + wlo >= 0 with x whi <= 2^53 (n <= 2^51)
//   and whi = 0 or whi >= 2^-900.
// Error: each of the four FMA/add steps on |r| < 4 rounds by <= 2^-52, so the result is within
//   8 * 2^-53 of x (whi + wlo) - 2 pi n, plus terms of relative size 2^-105 of x (whi + wlo)
//   (the roundings of lo1 + x wlo and of x wlo) and n 2^-160 for the truncated 2pi;
//   |r| <= pi + 2^-40.
inline double angle_reduce_cw(double x, double whi, double wlo) {
  const double hi = x * whi;
  const double lo = std::fma(x, whi, -hi) + x * wlo;
  const double n = std::nearbyint(hi * kInvTwoPi);
  double r = std::fma(-n, kTwoPi0, hi);
  r = std::fma(-n, kTwoPi1, r);
  r = std::fma(-n, kTwoPi2, r);
  return r + lo;
}

}  // namespace posenc::detail
