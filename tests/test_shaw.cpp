// Shaw et al. (2018) relative position representations: the clipped index, a hand-worked
// example of eq. 3 and 4, the case table (finite-difference gradient checks in double for every
// input of both backward passes, float vs double), every error path, and RapidCheck clipping
// properties.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "case_tables.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/shaw.hpp"
#include "posenc/verify/checks.hpp"
#include "posenc/verify/shaw_cases.hpp"

using namespace posenc;

namespace {

template <typename F>
void expect_fail(F fn, const char* word) {
  try {
    fn();
    ADD_FAILURE() << "no exception, expected one naming " << word;
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

std::vector<double> randn(rng& r, size_t n) {
  std::vector<double> v(n);
  for (auto& x : v) x = r.normal();
  return v;
}

}  // namespace

TEST(ShawIndex, HandTable) {
  // K = 2: offsets -2..2 map to rows 0..4; beyond, the edge rows.
  EXPECT_EQ(shaw_index(10, 10, 2), 2);
  EXPECT_EQ(shaw_index(10, 11, 2), 3);
  EXPECT_EQ(shaw_index(10, 12, 2), 4);
  EXPECT_EQ(shaw_index(10, 99, 2), 4);
  EXPECT_EQ(shaw_index(10, 9, 2), 1);
  EXPECT_EQ(shaw_index(10, 8, 2), 0);
  EXPECT_EQ(shaw_index(10, -50, 2), 0);
  EXPECT_EQ(shaw_index(5, 7, 0), 0);  // K = 0: one shared row
}

TEST(ShawOps, HandWorkedExample) {
  // D = 2, K = 1, qpos = (0, 2), kpos = (0, 1, 5).
  // q = [[1, 2], [3, -1]], k = [[1, 0], [0, 1], [2, 2]], a^K rows for offsets -1, 0, +1:
  // [[0.5, 0], [0, 0.25], [1, 1]].
  // i = 0: r = 0, 1, 5 -> rows 1, 2, 2: k + a = [1, .25], [1, 2], [3, 3] -> 1.5, 5, 9.
  // i = 1: r = -2, -1, 3 -> rows 0, 0, 2: [1.5, 0], [0.5, 1], [3, 3] -> 4.5, 0.5, 6.
  // With scale 0.5 the scores halve.
  const std::vector<int64_t> qp{0, 2}, kp{0, 1, 5};
  const shaw_problem p{qp, kp, 1, 2};
  const std::vector<double> q{1, 2, 3, -1}, k{1, 0, 0, 1, 2, 2}, ak{0.5, 0, 0, 0.25, 1, 1};
  std::vector<double> s(6);
  shaw_scores<double>(p, q.data(), k.data(), ak.data(), 0.5, s.data());
  EXPECT_EQ(s, (std::vector<double>{0.75, 2.5, 4.5, 2.25, 0.25, 3}));
  // Values: probs = [[.5, .25, .25], [0, 1, 0]], v = k above, a^V = [[1, -1], [0, 0], [.5, .5]].
  // i = 0: .5*[1, 0] + .25*([0, 1] + [.5, .5]) + .25*([2, 2] + [.5, .5]) = [1.25, 1].
  // i = 1: 1*([0, 1] + [1, -1]) = [1, 0].
  const std::vector<double> pr{0.5, 0.25, 0.25, 0, 1, 0}, av{1, -1, 0, 0, 0.5, 0.5};
  std::vector<double> o(4);
  shaw_values<double>(p, pr.data(), k.data(), av.data(), o.data());
  EXPECT_EQ(o, (std::vector<double>{1.25, 1, 1, 0}));
  // The float instantiation on the same (exactly representable) data gives the same numbers.
  const std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()),
      akf(ak.begin(), ak.end());
  std::vector<float> sf(6);
  shaw_scores<float>(p, qf.data(), kf.data(), akf.data(), 0.5, sf.data());
  EXPECT_EQ(sf, (std::vector<float>{0.75f, 2.5f, 4.5f, 2.25f, 0.25f, 3.f}));
}

// The case table (include/posenc/verify/shaw_cases.hpp), every case of its full list: grad
// mode (both float64 backwards, every input, against central differences with the tolerance
// derived there) and check mode (float32 against float64 within one rounding; a second backward
// call doubles the gradients).
TEST(ShawOps, CaseTable) {
  int checked = 0, graded = 0;
  test::run_cases(
      shaw_cases::full_cases(), [](const shaw_cases::spec&) { return true; },
      [&](const shaw_cases::spec& c) {
        auto rs = shaw_cases::run_case(c);  // not const: the return moves it
        for (const auto& r : rs) ++(r.name.ends_with("/grad") ? graded : checked);
        return rs;
      });
  EXPECT_EQ(checked, 11);
  EXPECT_EQ(graded, 4);
}

TEST(ShawOps, ErrorPaths) {
  expect_fail([] { shaw_init(-1, 8, 1, 1.0); }, "clip");
  expect_fail([] { shaw_init(2, 0, 1, 1.0); }, "dim");
  expect_fail([] { shaw_init(2, 8, 1, -0.5); }, "stddev");
  expect_fail([] { shaw_init(2, 8, 1, std::nan("")); }, "stddev");
  auto t = shaw_init(2, 4, 1, 0.02);
  EXPECT_EQ(t.keys.size(), 20u);
  EXPECT_EQ(t.values.size(), 20u);
  EXPECT_NO_THROW(shaw_validate(t));
  t.values.pop_back();
  expect_fail([&] { shaw_validate(t); }, "values");
  t.keys.pop_back();
  expect_fail([&] { shaw_validate(t); }, "keys");
  const std::vector<int64_t> pos{0, 1}, far{int64_t{1} << 62, (int64_t{1} << 62) + 1};
  float buf[64] = {};
  expect_fail([&] { shaw_scores<float>({pos, pos, -1, 4}, buf, buf, buf, 1.0, buf); }, "clip");
  expect_fail([&] { shaw_scores<float>({pos, pos, 1, 0}, buf, buf, buf, 1.0, buf); }, "dim");
  expect_fail(
      [&] {
        shaw_scores<float>({pos, pos, 1, 2}, buf, buf, buf, std::nan(""), buf);
      },
      "scale");
  expect_fail([&] { shaw_values<float>({far, pos, 1, 2}, buf, buf, buf, buf); }, "qpos[1]");
  expect_fail(
      [&] {
        shaw_values_backward<float>({pos, far, 1, 2}, buf, buf, buf, buf, buf, buf, buf);
      },
      "kpos[1]");
  expect_fail(
      [&] {
        shaw_scores_backward<float>({pos, pos, 1, 2}, buf, buf, buf, INFINITY, buf, buf, buf, buf);
      },
      "scale");
}

TEST(ShawChecks, AllPass) {
  for (const auto& c : shaw_checks()) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
}

RC_GTEST_PROP(ShawProps, KeysBeyondTheClipShareTheEdgeRow, ()) {
  const auto K = *rc::gen::inRange<int64_t>(0, 10);
  const auto D = *rc::gen::inRange<int64_t>(1, 9);
  const auto qpos = *rc::gen::inRange<int64_t>(0, 1000);
  const auto r1 = *rc::gen::inRange<int64_t>(K, K + 50);  // at or beyond the clip
  const auto r2 = *rc::gen::inRange<int64_t>(K, K + 5000);
  const int64_t sign = *rc::gen::element<int64_t>(-1, 1);
  rng r(*rc::gen::arbitrary<uint32_t>());
  const auto q = randn(r, D), k = randn(r, D), ak = randn(r, (2 * K + 1) * D);
  const std::vector<int64_t> qp{qpos}, k1{qpos + sign * r1}, k2{qpos + sign * r2};
  double s1 = 0, s2 = 0;
  shaw_scores<double>({qp, k1, K, D}, q.data(), k.data(), ak.data(), 1.0, &s1);
  shaw_scores<double>({qp, k2, K, D}, q.data(), k.data(), ak.data(), 1.0, &s2);
  RC_ASSERT(s1 == s2);
  RC_ASSERT(shaw_index(qpos, k1[0], K) == (sign > 0 ? 2 * K : 0));
}

RC_GTEST_PROP(ShawProps, InsideTheClipEveryOffsetHasItsOwnRow, ()) {
  // With K >= every |offset|, scores equal q . (k + a^K[r + K]) with r the raw offset, and
  // outputs likewise: no clipping happens.
  const auto T = *rc::gen::inRange<int64_t>(1, 6);
  const auto S = *rc::gen::inRange<int64_t>(1, 6);
  const auto D = *rc::gen::inRange<int64_t>(1, 5);
  const auto qp = *rc::gen::container<std::vector<int64_t>>(T, rc::gen::inRange<int64_t>(0, 20));
  const auto kp = *rc::gen::container<std::vector<int64_t>>(S, rc::gen::inRange<int64_t>(0, 20));
  const int64_t K = 19 + *rc::gen::inRange<int64_t>(0, 3);
  rng r(*rc::gen::arbitrary<uint32_t>());
  const auto q = randn(r, T * D), k = randn(r, S * D), ak = randn(r, (2 * K + 1) * D);
  std::vector<double> s(T * S);
  shaw_scores<double>({qp, kp, K, D}, q.data(), k.data(), ak.data(), 1.0, s.data());
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j) {
      const int64_t row = kp[j] - qp[i] + K;
      double want = 0;
      for (int64_t d = 0; d < D; ++d) want += q[i * D + d] * (k[j * D + d] + ak[row * D + d]);
      RC_ASSERT(s[i * S + j] == want);
    }
}
