// SIMD kernels for the tables and score-bias rows (Highway dynamic dispatch; this file is
// compiled once per target through hwy/foreach_target.h):
//   - sinusoidal table rows (Vaswani et al. 2017, sec. 3.5): SinCosCw of
//     src/core/angle_simd-inl.h (the Cody-Waite reduction of src/core/angle.hpp lane-wise, then
//     SinCosReduced); tails and targets without a native FMA: the scalar reduction and libm;
//   - ALiBi bias rows (Press et al. 2022, sec. 3): -m |i - j| (or m (j - i) causal) per key;
//   - T5 bucket rows (Raffel et al. 2020, sec. 2.1): the logarithmic branch replaced by a count
//     of precomputed thresholds, exact by monotonicity (see t5_bias.cpp).
// The callers (sinusoidal.cpp, alibi.cpp, t5_bias.cpp) validate; these kernels assume valid
// input and never allocate.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/encodings/tables_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "src/core/angle_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows [b, e) of the table: out row n = PE(positions[n]), d = 2 * half channels,
// interleaved [s0 c0 s1 c1 ..] or halves [s0 .. s_{half-1} | c0 .. c_{half-1}].
// w_hi, w_lo: (half,) omega_r as double-double. Error per entry (before rounding to T): SinCosCw
// (src/core/angle_simd-inl.h) < 10 * 2^-53 (reduced angle 8 * 2^-53, SinCosReduced 1.8 * 2^-53)
// plus the frequency term of sinusoidal_entry_error_bound; the scalar tail (libm) < 9 * 2^-53.
template <typename T>
HWY_INLINE void SinRowsT(const double* HWY_RESTRICT w_hi, const double* HWY_RESTRICT w_lo,
                         int64_t half, const int64_t* HWY_RESTRICT positions, int64_t b, int64_t e,
                         bool interleaved, T* HWY_RESTRICT out) {
  const int64_t d = 2 * half;
  int64_t r0 = 0;
#if HWY_NATIVE_FMA
  const hn::ScalableTag<double> dd;
  const hn::Rebind<T, decltype(dd)> dt;  // same lane count, T lanes
  const int64_t N = static_cast<int64_t>(hn::Lanes(dd));
  r0 = half - half % N;
#endif
  for (int64_t row = b; row < e; ++row) {
    const double x = static_cast<double>(positions[row]);
    T* o = out + row * d;
#if HWY_NATIVE_FMA
    const auto xv = hn::Set(dd, x);
    for (int64_t r = 0; r < r0; r += N) {
      hn::Vec<decltype(dd)> sv, cv;
      SinCosCw(dd, xv, hn::LoadU(dd, w_hi + r), hn::LoadU(dd, w_lo + r), sv, cv);
      if constexpr (sizeof(T) == sizeof(double)) {
        if (interleaved) {
          hn::StoreInterleaved2(sv, cv, dd, o + 2 * r);
        } else {
          hn::StoreU(sv, dd, o + r);
          hn::StoreU(cv, dd, o + half + r);
        }
      } else {
        const auto sf = hn::DemoteTo(dt, sv), cf = hn::DemoteTo(dt, cv);
        if (interleaved) {
          hn::StoreInterleaved2(sf, cf, dt, o + 2 * r);
        } else {
          hn::StoreU(sf, dt, o + r);
          hn::StoreU(cf, dt, o + half + r);
        }
      }
    }
#endif
    for (int64_t r = r0; r < half; ++r) {
      const double a = ::posenc::detail::angle_reduce_cw(x, w_hi[r], w_lo[r]);
      const double s = std::sin(a), c = std::cos(a);
      if (interleaved) {
        o[2 * r] = static_cast<T>(s);
        o[2 * r + 1] = static_cast<T>(c);
      } else {
        o[r] = static_cast<T>(s);
        o[half + r] = static_cast<T>(c);
      }
    }
  }
}

void SinRowsF32(const double* w_hi, const double* w_lo, int64_t half, const int64_t* positions,
                int64_t b, int64_t e, bool interleaved, float* out) {
  SinRowsT(w_hi, w_lo, half, positions, b, e, interleaved, out);
}
void SinRowsF64(const double* w_hi, const double* w_lo, int64_t half, const int64_t* positions,
                int64_t b, int64_t e, bool interleaved, double* out) {
  SinRowsT(w_hi, w_lo, half, positions, b, e, interleaved, out);
}

// ALiBi row: out[j] (+)= float(slope * dist_j), dist_j = kpos[j] - qpos (causal) or
// -|kpos[j] - qpos|: exactly alibi_bias() rounded to float (the int64 -> double conversion is
// exact for |dist| <= 2^53 and the product rounds once in double, as in the scalar form).
void AlibiRow(double slope, int64_t qpos, const int64_t* HWY_RESTRICT kpos, int64_t n, bool causal,
              bool add, float* HWY_RESTRICT out) {
  int64_t j = 0;
  const hn::ScalableTag<int64_t> di;
  const hn::Rebind<double, decltype(di)> dd;
  const hn::Rebind<float, decltype(di)> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(di));
  const auto q = hn::Set(di, qpos);
  const auto m = hn::Set(dd, slope);
  for (; j + N <= n; j += N) {
    auto dist = hn::Sub(hn::LoadU(di, kpos + j), q);
    if (!causal) dist = hn::Neg(hn::Abs(dist));  // -|d|: +0 stays +0
    auto v = hn::DemoteTo(df, hn::Mul(m, hn::ConvertTo(dd, dist)));
    if (add) v = hn::Add(hn::LoadU(df, out + j), v);
    hn::StoreU(v, df, out + j);
  }
  for (; j < n; ++j) {
    const int64_t dist = kpos[j] - qpos;
    const float v =
        static_cast<float>(slope * static_cast<double>(causal ? dist : (dist < 0 ? dist : -dist)));
    out[j] = add ? out[j] + v : v;
  }
}

// T5 bucket row: bucket[j] of r = kpos[j] - qpos. With n = |r| (bidirectional) or max(-r, 0)
// (causal) and base = N' if (bidirectional and r > 0) else 0:
//   bucket = base + n                                     for n < E
//          = base + E + #{k : n > gt[k]}                  for n >= E
// where gt[k] = (smallest n whose logarithmic bucket reaches E + 1 + k) - 1, computed by the
// caller with the scalar t5_bucket (exact: the bucket is non-decreasing in n).
void T5BucketRow(int64_t half_buckets, int64_t exact, bool bidirectional, const int64_t* gt,
                 int64_t ngt, int64_t qpos, const int64_t* HWY_RESTRICT kpos, int64_t n,
                 int32_t* HWY_RESTRICT bucket) {
  const hn::ScalableTag<int64_t> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(di));
  const auto q = hn::Set(di, qpos), zero = hn::Zero(di), E = hn::Set(di, exact);
  const auto nb = hn::Set(di, half_buckets);
  // Saturation: once n exceeds the last threshold every key has the same bucket (keys far from
  // the query: most of a long row). One pass over the offsets' range decides it for the row.
  if (ngt > 0 && n > 0) {
    int64_t lo = kpos[0], hi = kpos[0];
    for (int64_t j = 1; j < n; ++j) {
      lo = std::min(lo, kpos[j]);
      hi = std::max(hi, kpos[j]);
    }
    const int64_t rlo = lo - qpos, rhi = hi - qpos;  // offsets r = kpos - qpos
    int64_t saturated = -1;
    if (rhi < 0 && -rhi > gt[ngt - 1])  // every key behind, beyond the last threshold
      saturated = exact + ngt;
    else if (bidirectional && rlo > 0 && rlo > gt[ngt - 1])  // every key ahead, beyond it
      saturated = half_buckets + exact + ngt;
    if (saturated >= 0) {
      std::fill(bucket, bucket + n, static_cast<int32_t>(saturated));
      return;
    }
  }
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto r = hn::Sub(hn::LoadU(di, kpos + j), q);
    auto base = zero;
    hn::Vec<decltype(di)> nn;
    if (bidirectional) {
      base = hn::IfThenElseZero(hn::Gt(r, zero), nb);
      nn = hn::Abs(r);  // |INT64_MIN| wraps: excluded by the callers' |pos| <= 2^62
    } else {
      nn = hn::Max(hn::Neg(r), zero);
    }
    auto large = E;
    for (int64_t k = 0; k < ngt; ++k)
      large = hn::Sub(large, hn::VecFromMask(di, hn::Gt(nn, hn::Set(di, gt[k]))));
    const auto b = hn::Add(base, hn::IfThenElse(hn::Lt(nn, E), nn, large));
    HWY_ALIGN int64_t lanes[HWY_MAX_BYTES / sizeof(int64_t)];
    hn::Store(b, di, lanes);
    for (int64_t l = 0; l < N; ++l) bucket[j + l] = static_cast<int32_t>(lanes[l]);
  }
  for (; j < n; ++j) {
    const int64_t r = kpos[j] - qpos;
    int64_t base = 0, nn;
    if (bidirectional) {
      base = r > 0 ? half_buckets : 0;
      nn = r < 0 ? -r : r;
    } else {
      nn = r < 0 ? -r : 0;
    }
    int64_t v = exact;
    for (int64_t k = 0; k < ngt; ++k) v += nn > gt[k];
    bucket[j] = static_cast<int32_t>(base + (nn < exact ? nn : v));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace posenc {
HWY_EXPORT(SinRowsF32);
HWY_EXPORT(SinRowsF64);
HWY_EXPORT(AlibiRow);
HWY_EXPORT(T5BucketRow);

namespace detail {

// Declared where they are used (sinusoidal.cpp, alibi.cpp, t5_bias.cpp).
void sinusoidal_rows_simd(const double* w_hi, const double* w_lo, int64_t half,
                          const int64_t* positions, int64_t b, int64_t e, bool interleaved,
                          float* out);
void sinusoidal_rows_simd(const double* w_hi, const double* w_lo, int64_t half,
                          const int64_t* positions, int64_t b, int64_t e, bool interleaved,
                          double* out);
void alibi_row_simd(double slope, int64_t qpos, const int64_t* kpos, int64_t n, bool causal,
                    bool add, float* out);
void t5_bucket_row_simd(int64_t half_buckets, int64_t exact, bool bidirectional, const int64_t* gt,
                        int64_t ngt, int64_t qpos, const int64_t* kpos, int64_t n, int32_t* bucket);

void sinusoidal_rows_simd(const double* w_hi, const double* w_lo, int64_t half,
                          const int64_t* positions, int64_t b, int64_t e, bool interleaved,
                          float* out) {
  HWY_DYNAMIC_DISPATCH(SinRowsF32)(w_hi, w_lo, half, positions, b, e, interleaved, out);
}
void sinusoidal_rows_simd(const double* w_hi, const double* w_lo, int64_t half,
                          const int64_t* positions, int64_t b, int64_t e, bool interleaved,
                          double* out) {
  HWY_DYNAMIC_DISPATCH(SinRowsF64)(w_hi, w_lo, half, positions, b, e, interleaved, out);
}
void alibi_row_simd(double slope, int64_t qpos, const int64_t* kpos, int64_t n, bool causal,
                    bool add, float* out) {
  HWY_DYNAMIC_DISPATCH(AlibiRow)(slope, qpos, kpos, n, causal, add, out);
}
void t5_bucket_row_simd(int64_t half_buckets, int64_t exact, bool bidirectional, const int64_t* gt,
                        int64_t ngt, int64_t qpos, const int64_t* kpos, int64_t n,
                        int32_t* bucket) {
  HWY_DYNAMIC_DISPATCH(T5BucketRow)
  (half_buckets, exact, bidirectional, gt, ngt, qpos, kpos, n, bucket);
}

}  // namespace detail
}  // namespace posenc
#endif
