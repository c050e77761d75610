// The vectorised tables and bias rows (src/encodings/tables_simd.cpp) against their scalar
// specifications: the sinusoidal table against the long double reference within the derived
// bound, on awkward widths and huge positions, and ALiBi rows bit-identical to alibi_bias rounded
// to float, both through the full list of the case table (table_cases.hpp); T5 bucket and bias
// rows identical to t5_bucket and t5_bias_dense through the T5 case table (t5_cases.hpp); a
// hand-derived golden threshold list for T5's (32, 128).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "case_tables.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/t5_bias.hpp"
#include "posenc/verify/t5_cases.hpp"
#include "posenc/verify/table_cases.hpp"

using namespace posenc;

namespace {

namespace tc = posenc::table_cases;

// Runs every case of the full list whose name starts with section; returns how many ran.
int run_section(const std::string& section) {
  int n = 0;
  for (const auto& [group, k] : test::run_cases(
           tc::full_cases(), [&](const tc::spec& c) { return c.name.rfind(section + "/", 0) == 0; },
           [](const tc::spec& c) { return tc::check_case(c); }))
    n += k;
  return n;
}

}  // namespace

// The case table (include/posenc/verify/table_cases.hpp): widths 2, 6, 10, 18, 64, 130, 1024
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

// The T5 case table's check mode (include/posenc/verify/t5_cases.hpp), bit for bit:
// t5_bucket_row against t5_bucket for every parameter set tried (offsets near +-2^62), and
// t5_bias_row written and accumulated against t5_bias_dense, across the 256-entry chunk and
// on rows just past, at and before the last threshold (the one-bucket shortcut).
TEST(TablesSimd, T5RowsEqualScalarBucketAndDenseReference) {
  auto ran = test::run_cases(
      t5_cases::full_cases(),
      [](const t5_cases::spec& c) { return (c.passes & t5_cases::check) != 0; },
      [](const t5_cases::spec& c) { return t5_cases::check_case(c); });
  EXPECT_EQ(ran["bucket_row"], 57);
  EXPECT_EQ(ran["bias_row"], 2);
  EXPECT_EQ(ran["saturated"], 25);
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
