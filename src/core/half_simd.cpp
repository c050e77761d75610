// SIMD part of posenc/core/half.hpp: float32 to float16 in the dispatched target's vectors, the
// bits of float_to_f16 (round to nearest even, subnormals, overflow to infinity at 65520, NaN to
// the quiet NaN 0x7e00 with the sign). Integer and exact float operations only, so every target
// gives the scalar function's bits (tests/test_half.cpp sweeps the float32 bit patterns).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/half_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>

#include "posenc/core/half.hpp"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// out[i] = float_to_f16(in[i]), i < n. Per lane, with ax = |bits|:
//   normal (2^-14 <= |f| < 65520): (ax - (112 << 23) + 0xfff + bit 13 of ax) >> 13, the rebias
//     and the drop of 13 fraction bits rounded to nearest even in one add (a carry into the
//     exponent is the right result, as in the scalar form);
//   subnormal (|f| < 2^-14): |f| 2^24 (exact: a power of two) rounded to the nearest even
//     integer, the half's m in m 2^-24; below 2^-25 that is 0;
//   >= 65520: 0x7c00 (infinity); NaN: 0x7e00; then the sign.
void ToF16(const float* HWY_RESTRICT in, uint16_t* HWY_RESTRICT out, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(du)> d16;  // from di: values <= 0xfe00, no saturation
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto abs_mask = hn::Set(du, 0x7fffffffu);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto f = hn::LoadU(df, in + i);
    const auto x = hn::BitCast(du, f);
    const auto ax = hn::And(x, abs_mask);
    const auto sign = hn::ShiftRight<16>(hn::AndNot(abs_mask, x));
    const auto odd = hn::And(hn::ShiftRight<13>(ax), hn::Set(du, 1u));
    const auto normal = hn::ShiftRight<13>(
        hn::Add(hn::Sub(ax, hn::Set(du, 0x38000000u)), hn::Add(hn::Set(du, 0xfffu), odd)));
    const auto sub = hn::BitCast(
        du, hn::ConvertTo(di, hn::Round(hn::Mul(hn::BitCast(df, ax), hn::Set(df, 0x1p24f)))));
    // |bits| <= 0x7fffffff: the comparisons in signed lanes.
    const auto ai = hn::BitCast(di, ax);
    auto h = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 0x38800000))), sub, normal);
    h = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x477fefff))),
                       hn::Set(du, 0x7c00u), h);
    h = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7f800000))),
                       hn::Set(du, 0x7e00u), h);
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, hn::Or(h, sign))), d16, out + i);
  }
  for (; i < n; ++i) out[i] = float_to_f16(in[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace posenc {
HWY_EXPORT(ToF16);

void to_f16_simd(const float* in, uint16_t* out, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(ToF16)(in, out, n);
}

}  // namespace posenc
#endif  // HWY_ONCE
