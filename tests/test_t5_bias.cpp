// T5 relative position buckets (Raffel et al. 2020; mesh-tensorflow / HF
// _relative_position_bucket) against hand-derived tables for offsets -200..200 in both modes,
// the float32 boundary cases, every error path, the dense table as a gather, the backward
// against finite differences (the case table's grad mode, t5_cases.hpp), and RapidCheck
// properties.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <climits>
#include <cmath>

#include "case_tables.hpp"
#include "posenc/core/error.hpp"
#include "posenc/encodings/t5_bias.hpp"
#include "posenc/verify/checks.hpp"
#include "posenc/verify/t5_cases.hpp"

using namespace posenc;

namespace {

// Hand derivation, bidirectional, num_buckets 32, max_distance 128. Offset r = kpos - qpos.
// N' = 16 buckets per sign, positive offsets add 16. E = max_exact = 8. For n = |r| < 8 the
// bucket is n. For n >= 8: 8 + floor(log(n/8) / log(128/8) * 8) = 8 + floor(2 log2(n/8)),
// capped at 15. 2 log2(n/8) >= k  <=>  n >= 8 * 2^(k/2): k = 1: 11.31, 2: 16, 3: 22.63,
// 4: 32, 5: 45.25, 6: 64, 7: 90.51, 8: 128 (cap). So n in
//   8..11 -> 8, 12..15 -> 9, 16..22 -> 10, 23..31 -> 11, 32..45 -> 12, 46..63 -> 13,
//   64..90 -> 14, >= 91 -> 15.
// The exact boundaries n = 16, 32, 64 are where a float32 evaluation could round down; the
// T5 reference's float32 arithmetic gives 2, 4, 6 exactly there (log(2^k)/log(16) with the
// float nearest log 2 scaled by powers of two), so they open the next bucket.
int64_t expected_bidirectional(int64_t r) {
  const int64_t base = r > 0 ? 16 : 0;
  const int64_t n = r < 0 ? -r : r;
  if (n < 8) return base + n;
  const int64_t starts[] = {8, 12, 16, 23, 32, 46, 64, 91};  // first n of buckets 8..15
  int64_t b = 8;
  for (int k = 0; k < 8; ++k)
    if (n >= starts[k]) b = 8 + k;
  return base + b;
}

// Hand derivation, causal, num_buckets 32, max_distance 128: n = max(-r, 0) (future keys -> 0),
// E = 16, bucket = 16 + floor(log(n/16) / log(8) * 16) = 16 + floor((16/3) log2(n/16)), capped
// at 31. Bucket 16 + k starts at n = ceil(16 * 2^(3k/16)); python3 math:
//   k:  1  2  3  4  5  6  7  8  9 10 11 12 13 14  15
//   n: 19 21 24 27 31 35 40 46 52 59 67 77 87 99 113
// (16 * 2^(3k/16) is an integer only for k = 0 and 16, so no float32 boundary hazard here).
int64_t expected_causal(int64_t r) {
  const int64_t n = r < 0 ? -r : 0;
  if (n < 16) return n;
  const int64_t starts[] = {19, 21, 24, 27, 31, 35, 40, 46, 52, 59, 67, 77, 87, 99, 113};
  int64_t b = 16;
  for (int k = 0; k < 15; ++k)
    if (n >= starts[k]) b = 17 + k;
  return b;
}

template <typename F>
void expect_fail(F fn, const char* word) {
  try {
    fn();
    ADD_FAILURE() << "no exception, expected one naming " << word;
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(T5Bucket, HandDerivedTableBidirectional) {
  for (int64_t r = -200; r <= 200; ++r)
    EXPECT_EQ(t5_bucket(r, true), expected_bidirectional(r)) << r;
}

TEST(T5Bucket, HandDerivedTableCausal) {
  for (int64_t r = -200; r <= 200; ++r) EXPECT_EQ(t5_bucket(r, false), expected_causal(r)) << r;
}

TEST(T5Bucket, BoundariesAndFloat32Hazards) {
  // Offset 0 never takes the log (no log(0)).
  EXPECT_EQ(t5_bucket(0, true), 0);
  EXPECT_EQ(t5_bucket(0, false), 0);
  // Last exact bucket and first log bucket.
  EXPECT_EQ(t5_bucket(-7, true), 7);
  EXPECT_EQ(t5_bucket(-8, true), 8);
  EXPECT_EQ(t5_bucket(7, true), 23);
  EXPECT_EQ(t5_bucket(8, true), 24);
  EXPECT_EQ(t5_bucket(-15, false), 15);
  EXPECT_EQ(t5_bucket(-16, false), 16);
  // Exact-integer boundaries (see expected_bidirectional).
  EXPECT_EQ(t5_bucket(-15, true), 9);
  EXPECT_EQ(t5_bucket(-16, true), 10);
  EXPECT_EQ(t5_bucket(-31, true), 11);
  EXPECT_EQ(t5_bucket(-32, true), 12);
  EXPECT_EQ(t5_bucket(-63, true), 13);
  EXPECT_EQ(t5_bucket(-64, true), 14);
  EXPECT_EQ(t5_bucket(64, true), 30);
  // Saturation, and the extremes of int64 (no overflow in |r|).
  EXPECT_EQ(t5_bucket(-128, true), 15);
  EXPECT_EQ(t5_bucket(1000000, true), 31);
  EXPECT_EQ(t5_bucket(INT64_MIN, true), 15);
  EXPECT_EQ(t5_bucket(INT64_MAX, true), 31);
  EXPECT_EQ(t5_bucket(INT64_MIN, false), 31);
  EXPECT_EQ(t5_bucket(INT64_MAX, false), 0);
  // Smallest tables. Causal N = 2: E = 1, bucket = 1 for every past key. Bidirectional N = 4:
  // N' = 2, E = 1: past -> 1, future -> 3.
  EXPECT_EQ(t5_bucket(-1, false, 2, 2), 1);
  EXPECT_EQ(t5_bucket(-500, false, 2, 2), 1);
  EXPECT_EQ(t5_bucket(-5, true, 4, 2), 1);
  EXPECT_EQ(t5_bucket(5, true, 4, 2), 3);
  // max_distance not a multiple of max_exact: N = 16 causal, M = 100: E = 8,
  // bucket = 8 + floor(log(n/8)/log(12.5) * 8); n = 20: log(2.5)/log(12.5)*8 = 2.902 -> 10;
  // n = 25: log(3.125)/log(12.5)*8 = 3.609 -> 11 (python3 math.log).
  EXPECT_EQ(t5_bucket(-20, false, 16, 100), 10);
  EXPECT_EQ(t5_bucket(-25, false, 16, 100), 11);
}

TEST(T5Bucket, ErrorPaths) {
  expect_fail([] { t5_bucket(1, true, 31, 128); }, "num_buckets");  // odd, bidirectional
  expect_fail([] { t5_bucket(1, true, 2, 128); }, "num_buckets");   // < 4 bidirectional
  expect_fail([] { t5_bucket(1, false, 1, 128); }, "num_buckets");  // < 2
  expect_fail([] { t5_bucket(1, false, 0, 128); }, "num_buckets");
  expect_fail([] { t5_bucket(1, false, -4, 128); }, "num_buckets");
  expect_fail([] { t5_bucket(1, true, 32, 8); }, "max_distance");  // max_exact = 8
  expect_fail([] { t5_bucket(1, true, 32, 0); }, "max_distance");
  expect_fail([] { t5_bucket(1, false, 32, 16); }, "max_distance");  // max_exact = 16
  EXPECT_NO_THROW(t5_bucket(1, true, 32, 9));
  EXPECT_NO_THROW(t5_bucket(1, false, 31, 128));  // odd is fine when causal
  EXPECT_NO_THROW(t5_bucket(1, false, 32, 17));
  expect_fail([] { t5_init({32, 128, true}, 0, 1, 1.0); }, "heads");
  expect_fail([] { t5_init({32, 128, true}, 4, 1, -1.0); }, "stddev");
  expect_fail([] { t5_init({32, 128, true}, 4, 1, std::nan("")); }, "stddev");
  expect_fail([] { t5_init({33, 128, true}, 4, 1, 1.0); }, "num_buckets");
  auto t = t5_init({32, 128, true}, 4, 1, 1.0);
  t.weights.pop_back();
  std::vector<int64_t> p{0, 1};
  float out[64];
  expect_fail([&] { t5_bias_dense(t, p, p, out); }, "weights");
  t.weights.push_back(0);
  const std::vector<int64_t> far{-(int64_t{1} << 62) - 1};
  expect_fail([&] { t5_bias_dense(t, far, p, out); }, "qpos[0]");
  expect_fail([&] { t5_bias_backward(t, p, far, out, out); }, "kpos[0]");
}

TEST(T5Table, DenseIsAGather) {
  for (bool bidi : {true, false}) {
    SCOPED_TRACE(bidi);
    const int64_t H = 3;
    const auto t = t5_init({8, 12, bidi}, H, 42, 1.0);
    const std::vector<int64_t> q{0, 3, 3, 10, 40}, k{0, 1, 2, 5, 9, 20, 41};
    const size_t T = q.size(), S = k.size();
    std::vector<float> b(H * T * S);
    t5_bias_dense(t, q, k, b.data());
    for (size_t h = 0; h < H; ++h)
      for (size_t i = 0; i < T; ++i)
        for (size_t j = 0; j < S; ++j)
          EXPECT_EQ(b[(h * T + i) * S + j], t.weights[t5_bucket(k[j] - q[i], t.params) * H + h]);
  }
}

// The case table's grad mode (include/posenc/verify/t5_cases.hpp): t5_bias_backward against
// central differences in double, every table entry, exact steps on a 2^-10 weight grid, with the
// tolerance derived there; tiny tables (every bucket reached) and (16, 40) at T 17, S 29.
TEST(T5Table, BackwardMatchesFiniteDifferences) {
  int n = 0;
  for (const auto& [group, k] : test::run_cases(
           t5_cases::full_cases(),
           [](const t5_cases::spec& c) { return (c.passes & t5_cases::grad) != 0; },
           [](const t5_cases::spec& c) { return t5_cases::grad_case(c); }))
    n += k;
  EXPECT_EQ(n, 4);
}

TEST(T5Checks, AllPass) {
  for (const auto& c : t5_checks()) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
}

namespace {
t5_params random_params() {
  const bool bidi = *rc::gen::arbitrary<bool>();
  const int64_t nb =
      bidi ? 2 * *rc::gen::inRange<int64_t>(2, 80) : *rc::gen::inRange<int64_t>(2, 160);
  const int64_t E = (bidi ? nb / 2 : nb) / 2;
  const int64_t md = E + *rc::gen::inRange<int64_t>(1, 600);
  return {nb, md, bidi};
}
}  // namespace

RC_GTEST_PROP(T5Props, MonotoneInDistanceAndInRange, ()) {
  const auto p = random_params();
  const auto n = *rc::gen::inRange<int64_t>(0, 5000);
  const auto extra = *rc::gen::inRange<int64_t>(0, 5000);
  const int64_t np = p.bidirectional ? p.num_buckets / 2 : p.num_buckets;
  for (int64_t sign : {-1, 1}) {
    const int64_t a = t5_bucket(sign * n, p), b = t5_bucket(sign * (n + extra), p);
    RC_ASSERT(a >= 0);
    RC_ASSERT(b < p.num_buckets);
    if (sign == -1 || p.bidirectional) RC_ASSERT(a <= b);
  }
  if (n >= p.max_distance) RC_ASSERT(t5_bucket(-n, p) == np - 1);
}

RC_GTEST_PROP(T5Props, SignStructure, ()) {
  const auto p = random_params();
  const auto n = *rc::gen::inRange<int64_t>(1, 5000);
  if (p.bidirectional) {
    RC_ASSERT(t5_bucket(n, p) == t5_bucket(-n, p) + p.num_buckets / 2);
  } else {
    RC_ASSERT(t5_bucket(n, p) == 0);
    RC_ASSERT(t5_bucket(-n, p) == t5_bucket(-n, true, 2 * p.num_buckets, p.max_distance));
  }
}

RC_GTEST_PROP(T5Props, DenseBiasIsTranslationInvariant, ()) {
  const auto p = random_params();
  const auto t = t5_init(p, 2, *rc::gen::arbitrary<uint32_t>(), 1.0);
  const auto q = *rc::gen::container<std::vector<int64_t>>(3, rc::gen::inRange<int64_t>(0, 500));
  const auto k = *rc::gen::container<std::vector<int64_t>>(4, rc::gen::inRange<int64_t>(0, 500));
  const auto c = *rc::gen::inRange<int64_t>(-(int64_t{1} << 50), int64_t{1} << 50);
  auto q2 = q, k2 = k;
  for (auto& x : q2) x += c;
  for (auto& x : k2) x += c;
  std::vector<float> a(2 * 3 * 4), b(a.size());
  t5_bias_dense(t, q, k, a.data());
  t5_bias_dense(t, q2, k2, b.data());
  RC_ASSERT(a == b);
}
