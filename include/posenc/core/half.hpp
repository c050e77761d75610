// posenc/core/half.hpp: the two 16-bit float formats of key/value caches, stored as uint16_t.
//
//   float16  (IEEE 754 binary16): 1 sign, 5 exponent (bias 15), 10 fraction bits; normal
//            numbers 2^-14 .. 65504, subnormals down to 2^-24; unit roundoff 2^-11.
//   bfloat16 (the upper half of a binary32): 1 sign, 8 exponent (bias 127), 7 fraction bits;
//            the range of float32; unit roundoff 2^-8.
//
// Widening (to_float) is exact: every value of both formats is a float32. Narrowing
// (from_float) rounds to nearest, ties to even (IEEE 754 sec. 4.3.1), as PyTorch's .half() and
// .bfloat16() and NumPy's float16 do; float16 overflows to +-inf beyond 65520 (the rounding
// boundary past 65504), NaN stays NaN (quiet). Written from the formats' definitions.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>

namespace posenc {

// How keys and values are stored: float32 (the element type of the call), float16 or bfloat16.
enum class kv_storage { f32, f16, bf16 };

// "f32", "f16", "bf16".
std::string name(kv_storage s);

// Unit roundoff of the storage format: 2^-24 (f32), 2^-11 (f16), 2^-8 (bf16): a stored value is
// x (1 + d) with |d| <= u (f16: for |x| in the normal range; below 2^-14 the error is absolute,
// at most 2^-25).
double unit_roundoff(kv_storage s);

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, frac = h & 0x3ffu;
  if (exp == 0x1f)  // inf or NaN (the payload moves to the top of the float's fraction)
    return std::bit_cast<float>(sign | 0x7f800000u | (frac << 13));
  if (exp == 0) {  // zero or subnormal: frac * 2^-24, exact in float
    const float m = static_cast<float>(frac) * 0x1p-24f;
    return sign ? -m : m;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (frac << 13));  // 112 = 127 - 15
}

inline uint16_t float_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN: quiet
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (ax < 0x38800000u) {
    // Below 2^-14: a subnormal (or zero) half m * 2^-24. With |f| = mant * 2^(e - 150) (mant
    // the 24-bit significand), m = mant * 2^(e - 126) rounded to nearest even: a right shift
    // by 126 - e (14 .. 24) with the shifted-out bits deciding the rounding.
    const uint32_t e = ax >> 23;
    if (e < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // value = mant * 2^(e - 150); result = mant >> (126 - e)
    uint32_t m = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);  // m == 0x400 becomes the smallest normal: right
  }
  // Normal: drop 13 fraction bits with round to nearest even; a carry into the exponent is
  // the right result (up to inf at the top, excluded above).
  uint32_t r = ax - 0x38000000u;  // rebias the exponent: (127 - 15) << 23
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

inline float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // qNaN
  const uint32_t rem = x & 0xffffu, top = x >> 16;
  const bool up = rem > 0x8000u || (rem == 0x8000u && (top & 1u));
  return static_cast<uint16_t>(top + (up ? 1u : 0u));  // a carry into the exponent is right
}

inline float half_to_float(kv_storage s, uint16_t v) {
  return s == kv_storage::bf16 ? bf16_to_float(v) : f16_to_float(v);
}
inline uint16_t float_to_half(kv_storage s, float f) {
  return s == kv_storage::bf16 ? float_to_bf16(f) : float_to_f16(f);
}

// out[i] = float_to_f16(in[i]) for i < n in the dispatched target's vectors, the same bits
// (src/core/half_simd.cpp); to_half's float16 form.
void to_f16_simd(const float* in, uint16_t* out, int64_t n);

// Bulk forms: out[i] = convert(in[i]); sizes must match (else invalid_argument).
void to_half(kv_storage s, std::span<const float> in, std::span<uint16_t> out);
void from_half(kv_storage s, std::span<const uint16_t> in, std::span<float> out);

}  // namespace posenc
