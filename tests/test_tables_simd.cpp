// The vectorised tables and bias rows (src/encodings/tables_simd.cpp) against their scalar
// specifications: the sinusoidal table against the long double reference within the derived
// bound, on awkward widths and huge positions, and ALiBi rows bit-identical to alibi_bias rounded
// to float, both through the full list of the case table (table_cases.hpp); T5 bucket rows
// identical to t5_bucket for every parameter set tried, including offsets near +-2^62; a
// hand-derived golden threshold list for T5's (32, 128).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/t5_bias.hpp"
#include "posenc/encodings/table_cases.hpp"

using namespace posenc;

namespace {

namespace tc = posenc::table_cases;

// Runs every case of the full list whose name starts with section; returns how many ran.
int run_section(const std::string& section) {
  int n = 0;
  for (const auto& c : tc::full_cases()) {
    if (c.name.rfind(section + "/", 0) != 0) continue;
    const auto r = tc::check_case(c);
    EXPECT_TRUE(r.passed) << r.name << ": max_error " << r.max_error << " > tolerance "
                          << r.tolerance << "\n  " << r.claim << "\n  " << r.detail;
    ++n;
  }
  return n;
}

}  // namespace

// The case table (include/posenc/encodings/table_cases.hpp): widths 2, 6, 10, 18, 64, 130, 1024
// x both layouts x both denominators at the awkward positions up to 2^53 (seed 1), float64 and
// float32, within 2 sinusoidal_entry_error_bound (+ 2^-25 for float32).
TEST(TablesSimd, SinusoidalMatchesReferenceWithinBound) {
  EXPECT_EQ(run_section("sinusoidal_bound"), 28);
}

TEST(TablesSimd, SinusoidalSmallPositionsAreTight) {
  // The table's sinusoidal_tight case: positions 0 .. 4095 at width 1024, fast against
  // reference within 13 * 2^-53 (derived in table_cases.hpp). Golden PE(1), pair 0:
  // sin(1) = 0.8414709848078965, cos(1) = 0.5403023058681398 (Python math.sin / math.cos);
  // the angle 1 needs no reduction, so only the kernel's 1.8 * 2^-53 (< 4e-16) applies.
  EXPECT_EQ(run_section("sinusoidal_tight"), 1);
  sinusoidal_params p;
  p.width = 1024;
  const std::vector<int64_t> pos = {0, 1};
  std::vector<double> t(pos.size() * 1024);
  sinusoidal_table(p, pos, std::span<double>(t));
  EXPECT_NEAR(t[1024 + 0], 0.8414709848078965, 4e-16);
  EXPECT_NEAR(t[1024 + 1], 0.5403023058681398, 4e-16);
  EXPECT_EQ(t[0], 0.0);
  EXPECT_EQ(t[1], 1.0);
}

TEST(TablesSimd, SinusoidalThreadsAndReferenceSwitch) {
  rng g(2);
  sinusoidal_params p;
  p.width = 96;
  p.layout = sin_layout::halves;
  std::vector<int64_t> pos(3000);
  for (auto& x : pos) x = static_cast<int64_t>(g.below(1u << 30));
  std::vector<float> a(pos.size() * 96), b(a.size()), c(a.size());
  const int before = num_threads();
  set_num_threads(1);
  sinusoidal_table(p, pos, std::span<float>(a));
  set_num_threads(3);
  sinusoidal_table(p, pos, std::span<float>(b));
  set_num_threads(before);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  // POSENC_REFERENCE=1: the plain libm loop; it obeys the same bound.
  ::setenv("POSENC_REFERENCE", "1", 1);
  sinusoidal_table(p, pos, std::span<float>(c));
  ::unsetenv("POSENC_REFERENCE");
  std::vector<double> ref(a.size());
  sinusoidal_table_reference(p, pos, ref);
  const double tol = 2 * sinusoidal_entry_error_bound(p, 1 << 30) + 0x1p-25;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(std::fabs(a[i] - ref[i]), tol);
    EXPECT_LE(std::fabs(c[i] - ref[i]), tol);
  }
}

// The table's alibi_row cases (seed 3): n in 0, 1, 3, 4, 5, 17, 129, 1000 keys (one at distance
// about 2^53), three slopes, causal and not, written and accumulated, bit for bit.
TEST(TablesSimd, AlibiRowIsBitIdenticalToTheScalarFormula) {
  EXPECT_EQ(run_section("alibi_row"), 8);
  // Distance 0 gives +0 (not -0), bidirectional and causal.
  const int64_t k = 42;
  float o = -1;
  alibi_bias_row(0.25, 42, &k, 1, false, &o);
  EXPECT_EQ(std::signbit(o), false);
  EXPECT_EQ(o, 0.0f);
}

TEST(TablesSimd, T5GoldenThresholds) {
  // T5 default (32 buckets, max_distance 128, bidirectional): N' = 16, E = 8, offset
  // 8 + trunc(log(n / 8) / log(16) * 8) increases where n / 8 = 16^(k/8) = 2^(k/2), k = 1..7:
  // n = 11.31, 16, 22.63, 32, 45.25, 64, 90.51 -> first integers 12, 16, 23, 32, 46, 64, 91
  // (16, 32, 64 reached exactly in T5's float32 arithmetic, see t5_bias.hpp). gt = those - 1.
  const auto plan = t5_plan_rows(t5_params{32, 128, true});
  EXPECT_EQ(plan.half_buckets, 16);
  EXPECT_EQ(plan.max_exact, 8);
  const std::vector<int64_t> want = {11, 15, 22, 31, 45, 63, 90};
  EXPECT_EQ(plan.gt, want);
}

TEST(TablesSimd, T5BucketRowEqualsScalarBucket) {
  rng g(4);
  const int64_t big = int64_t{1} << 62;
  for (bool bidir : {true, false})
    for (int64_t nb : {2, 4, 6, 8, 32, 33, 64, 320})
      for (int64_t M : {3, 20, 128, 1000, 1 << 20}) {
        t5_params p{nb, M, bidir};
        if (bidir && (nb % 2 || nb < 4)) continue;
        const int64_t half = bidir ? nb / 2 : nb;
        if (M <= half / 2) continue;  // t5_validate: max_distance > max_exact
        const auto plan = t5_plan_rows(p);
        std::vector<int64_t> kpos = {0, 1, 2, big, -big, big - 1, 1 - big};
        for (int i = 0; i < 200; ++i) {
          const int64_t mag = static_cast<int64_t>(g.below(uint64_t{1} << (i % 40)));
          kpos.push_back(g.below(2) ? mag : -mag);
        }
        for (int64_t q : {int64_t{0}, int64_t{5}, int64_t{-77}}) {
          std::vector<int64_t> kp = kpos;
          for (auto& k : kp) {  // keep |k| <= 2^62 and |k - q| representable
            if (k > big - 100) k = big - 100;
            if (k < 100 - big) k = 100 - big;
          }
          std::vector<int32_t> b(kp.size());
          t5_bucket_row(plan, q, kp.data(), static_cast<int64_t>(kp.size()), b.data());
          for (size_t j = 0; j < kp.size(); ++j)
            ASSERT_EQ(b[j], t5_bucket(kp[j] - q, p))
                << "N=" << nb << " M=" << M << " bidir=" << bidir << " r=" << kp[j] - q;
        }
      }
}

TEST(TablesSimd, T5BiasRowEqualsDenseReference) {
  const auto t = t5_init(t5_params{32, 128, false}, 5, 11, 1.0);
  const auto plan = t5_plan_rows(t.params);
  const int64_t S = 700;  // > the 256-entry chunk
  std::vector<int64_t> kpos(S);
  for (int64_t j = 0; j < S; ++j) kpos[static_cast<size_t>(j)] = 3 * j - 50;
  const int64_t q = 900;
  std::vector<float> dense(static_cast<size_t>(5 * S));
  t5_bias_dense(t, {&q, 1}, kpos, dense.data());
  for (int64_t h = 0; h < 5; ++h) {
    std::vector<float> row(static_cast<size_t>(S)), acc(static_cast<size_t>(S), 1.5f);
    t5_bias_row(t, plan, h, q, kpos.data(), S, row.data());
    t5_bias_row(t, plan, h, q, kpos.data(), S, acc.data(), true);
    for (int64_t j = 0; j < S; ++j) {
      EXPECT_EQ(row[j], dense[h * S + j]);
      EXPECT_EQ(acc[j], 1.5f + dense[h * S + j]);
    }
  }
}

// Rows whose keys are all past the last threshold take a one-bucket shortcut (and t5_bias_row
// a constant fill); rows with one key just inside it must not. Both against the scalar bucket.
TEST(TablesSimd, T5SaturatedRowsEqualScalarBucket) {
  for (bool bidir : {false, true}) {
    const t5_params p{32, 128, bidir};
    const auto plan = t5_plan_rows(p);
    const int64_t last = plan.gt.back();  // n > last: the last bucket
    for (int64_t q : {int64_t{0}, int64_t{1000000}}) {
      for (int64_t edge : {last + 1, last, last - 1}) {  // nearest key at n = edge
        for (int64_t dir : {-1, 1}) {
          std::vector<int64_t> kpos;
          for (int64_t j = 0; j < 300; ++j) kpos.push_back(q + dir * (edge + 7 * j));
          std::reverse(kpos.begin() + 100, kpos.end());  // not sorted
          std::vector<int32_t> b(kpos.size());
          t5_bucket_row(plan, q, kpos.data(), static_cast<int64_t>(kpos.size()), b.data());
          for (size_t j = 0; j < kpos.size(); ++j)
            ASSERT_EQ(b[j], t5_bucket(kpos[j] - q, p))
                << "bidir=" << bidir << " edge=" << edge << " dir=" << dir << " j=" << j;
        }
      }
    }
  }
  const auto t = t5_init(t5_params{32, 128, false}, 3, 2, 1.0);
  const auto plan = t5_plan_rows(t.params);
  const int64_t S = 600, q = 5000;  // keys 0..599: every one beyond 128 behind the query
  std::vector<int64_t> kpos(S);
  for (int64_t j = 0; j < S; ++j) kpos[static_cast<size_t>(j)] = j;
  std::vector<float> dense(static_cast<size_t>(3 * S));
  t5_bias_dense(t, {&q, 1}, kpos, dense.data());
  for (int64_t h = 0; h < 3; ++h) {
    std::vector<float> row(static_cast<size_t>(S)), acc(static_cast<size_t>(S), -2.0f);
    t5_bias_row(t, plan, h, q, kpos.data(), S, row.data());
    t5_bias_row(t, plan, h, q, kpos.data(), S, acc.data(), true);
    for (int64_t j = 0; j < S; ++j) {
      ASSERT_EQ(row[j], dense[h * S + j]);
      ASSERT_EQ(acc[j], -2.0f + dense[h * S + j]);
    }
  }
}

RC_GTEST_PROP(TablesSimd, T5RowRandomParams, ()) {
  const bool bidir = *rc::gen::arbitrary<bool>();
  const int64_t nb = 2 * *rc::gen::inRange<int64_t>(bidir ? 2 : 1, 100);
  const int64_t half = bidir ? nb / 2 : nb;
  const int64_t M = *rc::gen::inRange<int64_t>(half / 2 + 1, half / 2 + 100000);
  const t5_params p{nb, M, bidir};
  const auto plan = t5_plan_rows(p);
  const auto rel =
      *rc::gen::container<std::vector<int64_t>>(rc::gen::inRange<int64_t>(-1000000, 1000000));
  std::vector<int32_t> b(rel.size());
  t5_bucket_row(plan, 0, rel.data(), static_cast<int64_t>(rel.size()), b.data());
  for (size_t j = 0; j < rel.size(); ++j) RC_ASSERT(b[j] == t5_bucket(rel[j], p));
}
