// float16 and bfloat16 storage (posenc/core/half.hpp): hand-derived encodings from the formats'
// definitions, every one of the 65536 bit patterns round-tripping, and round-to-nearest-even
// checked against the definition (the nearest of the two neighbouring representable values,
// ties to the even one) on float inputs spread over every binade.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

#include "posenc/core/half.hpp"
#include "posenc/core/machine.hpp"
#include "posenc/core/rng.hpp"

using namespace posenc;

TEST(Half, HandDerivedFloat16Encodings) {
  // sign | exponent (bias 15) | 10 fraction bits
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);        // 2^0: exponent 15
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);       // sign, exponent 16
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);    // largest finite: 2^15 (2 - 2^-10)
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);    // below the midpoint 65520: stays finite
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);    // the midpoint rounds to even: inf
  EXPECT_EQ(float_to_f16(0x1p-14f), 0x0400);    // smallest normal
  EXPECT_EQ(float_to_f16(0x1p-24f), 0x0001);    // smallest subnormal
  EXPECT_EQ(float_to_f16(0x1p-25f), 0x0000);    // half of it: a tie, to even (0)
  EXPECT_EQ(float_to_f16(0x1.8p-25f), 0x0001);  // 0.75 of it: up
  EXPECT_EQ(float_to_f16(0x1.8p-24f), 0x0002);  // 1.5 units: a tie, to even (2)
  // 0.1 = 0x1.99999ap-4 in float; 10 fraction bits 1001100110|011... -> 0x2e66
  EXPECT_EQ(float_to_f16(0.1f), 0x2e66);
  // 1 + 2^-11 is the midpoint between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(float_to_f16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(float_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // between 0x3c01 and 0x3c02: even
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::nanf("")))));
  EXPECT_EQ(f16_to_float(0x3555), 0x1.554p-2f);  // 0.333252: exponent 13, fraction 0x155
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_float(0x83ff), -0x1.ff8p-15f);  // largest subnormal, negative
}

TEST(Half, HandDerivedBfloat16Encodings) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  // 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7: ties to even (1); 1 + 3 2^-8 to 1 + 2^-6.
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);          // just above the midpoint
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST(Half, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = f16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f))));
    } else {
      EXPECT_EQ(float_to_f16(f), h) << std::hex << b;
    }
    const float g = bf16_to_float(h);
    if (std::isnan(g))
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(g))));
    else
      EXPECT_EQ(float_to_bf16(g), h) << std::hex << b;
  }
}

// Round to nearest even from the definition: among the representable values just below and
// just above x (found by stepping the encoding of the result), the result is the nearer one,
// and on a tie the one with an even encoding.
template <typename To, typename From>
void check_nearest(float x, To to, From from) {
  const uint16_t h = to(x);
  const double r = from(h);
  if (std::isinf(r)) return;  // overflow: checked by the hand-derived cases
  const double err = std::abs(double(x) - r);
  for (int step : {-1, 1}) {
    const auto n = static_cast<uint16_t>(h + step);
    const double rn = from(n);
    if (std::isnan(rn) || std::isinf(rn) || std::signbit(rn) != std::signbit(r)) continue;
    const double en = std::abs(double(x) - rn);
    ASSERT_LE(err, en) << x << " -> " << std::hex << h << " but " << n << " is nearer";
    if (err == en) {
      ASSERT_EQ(h & 1, 0) << x << ": a tie must go to the even encoding";
    }
  }
}

TEST(Half, RoundsToNearestEvenOverEveryBinade) {
  rng g(42);
  for (int e = -30; e <= 17; ++e)
    for (int i = 0; i < 2000; ++i) {
      const float x = static_cast<float>(std::ldexp(1.0 + g.uniform(), e)) * (i % 2 ? -1.0f : 1.0f);
      check_nearest(x, float_to_f16, f16_to_float);
      check_nearest(x, float_to_bf16, bf16_to_float);
      // Exact midpoints between neighbours, where only the tie rule decides.
      const uint16_t h = float_to_f16(x);
      const double a = f16_to_float(h), b = f16_to_float(static_cast<uint16_t>(h + 1));
      if (std::isfinite(b) && std::signbit(a) == std::signbit(b))
        check_nearest(static_cast<float>((a + b) / 2), float_to_f16, f16_to_float);
    }
}

TEST(Half, BulkFloat16ConversionHasTheScalarBits) {
  // to_half's float16 form runs in vectors (src/core/half_simd.cpp): every 65537th float32 bit
  // pattern (65,536 of them, both signs, every binade, subnormals, infinities and NaNs), each
  // half's neighbourhood in float32 (the values that round to it and the ties between), and
  // lengths that leave every tail size, against float_to_f16 bit for bit.
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65537)
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (uint32_t h = 0; h < 0x10000u; h += 7) {
    const uint32_t f = std::bit_cast<uint32_t>(f16_to_float(static_cast<uint16_t>(h)));
    for (const uint32_t d : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu})
      x.push_back(std::bit_cast<float>(f + d));
  }
  for (const float v : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f,
                        std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), -std::nanf("0x123")})
    x.push_back(v);
  // On every target this CPU and build have (limit_simd_target throws for the others): avx3,
  // avx2, sse4, ssse3 and scalar in a Release build on an AVX-512 host.
  int targets = 0;
  for (const char* t :
       {"avx3_spr", "avx3_zen4", "avx3_dl", "avx3", "avx2", "sse4", "ssse3", "emu128", "scalar"}) {
    try {
      limit_simd_target(t);
    } catch (const std::invalid_argument&) {
      continue;
    }
    ++targets;
    std::vector<uint16_t> got(x.size());
    to_half(kv_storage::f16, x, got);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(got[i], float_to_f16(x[i])) << t << ": " << std::hexfloat << x[i] << " at " << i;
    for (size_t n = 0; n < 40; ++n) {
      std::vector<uint16_t> part(n, 0xabcd);
      to_half(kv_storage::f16, std::span<const float>(x.data() + 3, n), part);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(part[i], float_to_f16(x[3 + i])) << t << ": " << n << " " << i;
    }
  }
  limit_simd_target("best");
  EXPECT_GE(targets, 1);  // the sanitizer build compiles one target; Release has five here
}
