// End-to-end: `posenc alibi slopes`, `posenc alibi bias`, `posenc t5 buckets` and the bias check
// groups, run through the built binary with their JSON parsed; bad input exits 2 naming the
// option.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "test_support.hpp"

using posenc::test::run_cli;
using json = nlohmann::json;

namespace {

void expect_exit2(const std::vector<std::string>& args, const std::string& word) {
  const auto r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(word), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace

TEST(CliAlibi, SlopesJson) {
  // Press et al. 2022 for H = 12 (exponents 1..8, then 1/2, 3/2, 5/2, 7/2; python3
  // repr(2.0 ** -e)); tolerance 2 ulp (4 u relative), see test_alibi.cpp.
  const std::vector<double> want{0.5,
                                 0.25,
                                 0.125,
                                 0.0625,
                                 0.03125,
                                 0.015625,
                                 0.0078125,
                                 0.00390625,
                                 0.7071067811865476,
                                 0.3535533905932738,
                                 0.1767766952966369,
                                 0.08838834764831845};
  const auto r = run_cli({"alibi", "slopes", "--heads", "12", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  ASSERT_EQ(j["slopes"].size(), want.size());
  for (size_t h = 0; h < want.size(); ++h)
    EXPECT_LE(std::abs(j["slopes"][h].get<double>() - want[h]), 4 * 0x1.0p-53 * want[h]);
  EXPECT_EQ(j["convention"], "press");
  // max_bias 16, H = 4: 2^(-4(h+1)) exactly.
  const auto r2 =
      run_cli({"alibi", "slopes", "--heads", "4", "--max-bias", "16", "--format", "json"});
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(json::parse(r2.out)["slopes"], json::parse("[0.0625, 0.00390625, 0.000244140625, "
                                                       "1.52587890625e-05]"));
  // Geometric convention, H = 3: 2^(-8/3), 2^(-16/3), 2^-8 (python3: 2**(-8*(h+1)/3)).
  const auto r3 =
      run_cli({"alibi", "slopes", "--heads", "3", "--convention", "geometric", "--format", "json"});
  ASSERT_EQ(r3.exit_code, 0) << r3.err;
  const auto g = json::parse(r3.out)["slopes"];
  const double gw[] = {0.15749013123685915, 0.024803141437003122, 0.00390625};
  for (int h = 0; h < 3; ++h)
    EXPECT_LE(std::abs(g[h].get<double>() - gw[h]), 4 * 0x1.0p-53 * gw[h]);
}

TEST(CliAlibi, SlopesTextAndCsv) {
  const auto r = run_cli({"alibi", "slopes", "--heads", "2", "--format", "csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "head,slope\n0,0.0625\n1,0.00390625\n");
}

TEST(CliAlibi, BiasMatrix) {
  // H = 2: slopes 2^-4, 2^-8. Causal bias = -slope * (i - j): row i = 2 of head 0 is
  // (-0.125, -0.0625, 0); above the diagonal the formula gives positive values (masked later).
  const auto r = run_cli({"alibi", "bias", "--heads", "2", "--q-positions", "0:3", "--k-positions",
                          "0:3", "--causal", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["bias"][0][2], json::parse("[-0.125, -0.0625, 0.0]"));
  EXPECT_EQ(j["bias"][0][0][2].get<double>(), 0.125);
  EXPECT_EQ(j["bias"][1][2][0].get<double>(), -0.0078125);
  // Bidirectional with position ids (a left-padded row: ids 5, 6 against keys 0, 6, 9).
  const auto r2 = run_cli({"alibi", "bias", "--heads", "1", "--q-positions", "5,6", "--k-positions",
                           "0,6,9", "--format", "json"});
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  // slope 2^-8: |5-0| = 5, |5-6| = 1, |5-9| = 4; |6-0| = 6, 0, 3.
  EXPECT_EQ(json::parse(r2.out)["bias"][0],
            json::parse("[[-0.01953125, -0.00390625, -0.015625], [-0.0234375, 0.0, -0.01171875]]"));
}

TEST(CliT5, BucketsMatchHandDerivedValues) {
  // See test_t5_bias.cpp for the derivation. Bidirectional (32, 128): n = |r|;
  // 0..7 -> n, 8..11 -> 8, 12..15 -> 9, 16..22 -> 10, 23..31 -> 11, 32..45 -> 12, 46..63 -> 13,
  // 64..90 -> 14, >= 91 -> 15; positive offsets add 16.
  const auto r = run_cli({"t5", "buckets", "--num-buckets", "32", "--max-distance", "128",
                          "--offsets", "-200:201", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  ASSERT_EQ(j["offsets"].size(), 401u);
  ASSERT_EQ(j["buckets"].size(), 401u);
  const int64_t starts[] = {8, 12, 16, 23, 32, 46, 64, 91};
  for (size_t e = 0; e < 401; ++e) {
    const int64_t off = j["offsets"][e];
    EXPECT_EQ(off, static_cast<int64_t>(e) - 200);
    const int64_t n = off < 0 ? -off : off;
    int64_t b = n;
    if (n >= 8)
      for (int k = 0; k < 8; ++k)
        if (n >= starts[k]) b = 8 + k;
    EXPECT_EQ(j["buckets"][e].get<int64_t>(), b + (off > 0 ? 16 : 0)) << "offset " << off;
  }
  // Causal: future keys share bucket 0; past offsets from 16 on use 16 + floor((16/3)
  // log2(n/16)): -16 -> 16, -18 -> 16, -19 -> 17, -113 -> 31, -112 -> 30.
  const auto c = run_cli({"t5", "buckets", "--causal", "--offsets", "-113,-112,-19,-18,-16,-1,0,5",
                          "--format", "json"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(json::parse(c.out)["buckets"], json::parse("[31, 30, 17, 16, 16, 1, 0, 0]"));
  EXPECT_EQ(json::parse(c.out)["bidirectional"], false);
}

TEST(CliBias, BadInputExitsTwoNamingTheOption) {
  expect_exit2({"alibi", "slopes", "--heads", "0"}, "--heads");
  expect_exit2({"alibi", "slopes", "--heads", "-4"}, "--heads");
  expect_exit2({"alibi", "slopes", "--heads", "abc"}, "--heads");
  expect_exit2({"alibi", "slopes"}, "--heads");
  expect_exit2({"alibi", "slopes", "--heads", "8", "--max-bias", "0"}, "--max-bias");
  expect_exit2({"alibi", "slopes", "--heads", "8", "--max-bias", "nan"}, "--max-bias");
  expect_exit2({"alibi", "slopes", "--heads", "8", "--convention", "bloom"}, "--convention");
  expect_exit2({"alibi", "bias", "--heads", "2", "--q-positions", "0:3", "--k-positions", "x"},
               "--k-positions");
  expect_exit2(
      {"alibi", "bias", "--heads", "64", "--q-positions", "0:1000", "--k-positions", "0:1000"},
      "2^22");
  expect_exit2({"t5", "buckets", "--num-buckets", "31", "--offsets", "0:4"}, "--num-buckets");
  expect_exit2({"t5", "buckets", "--num-buckets", "2", "--offsets", "0:4"}, "--num-buckets");
  expect_exit2({"t5", "buckets", "--causal", "--num-buckets", "1", "--offsets", "0:4"},
               "--num-buckets");
  expect_exit2({"t5", "buckets", "--max-distance", "8", "--offsets", "0:4"}, "--max-distance");
  expect_exit2({"t5", "buckets", "--offsets", "5:5"}, "--offsets");
  expect_exit2({"t5", "buckets", "--offsets", "1:x"}, "--offsets");
  expect_exit2({"t5", "buckets"}, "--offsets");
}

TEST(CliBias, CheckGroupsPass) {
  const auto r = run_cli(
      {"check", "--group", "alibi", "--group", "t5", "--group", "shaw", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = json::parse(r.out);
  EXPECT_TRUE(j["passed"].get<bool>());
  std::set<std::string> groups;
  for (const auto& c : j["checks"]) {
    groups.insert(c["group"].get<std::string>());
    EXPECT_TRUE(c["passed"].get<bool>()) << c.dump();
    EXPECT_LE(c["max_error"].get<double>(), c["tolerance"].get<double>()) << c.dump();
  }
  EXPECT_EQ(groups, (std::set<std::string>{"alibi", "t5", "shaw"}));
}

// Regression: the full int64 range overflowed B - A, passed the 2^24 bound as a negative
// width, and ended in std::bad_alloc (exit 3).
TEST(CliBias, T5OffsetRangeTooLargeToPrintExitsTwo) {
  expect_exit2({"t5", "buckets", "--offsets", "-9223372036854775808:9223372036854775807"},
               "at most 2^24");
  expect_exit2({"t5", "buckets", "--offsets", "-9223372036854775808:1"}, "--offsets");
  expect_exit2({"t5", "buckets", "--offsets", "-1:9223372036854775807"}, "--offsets");
  // The bound itself: 2^24 offsets are allowed, one more is not.
  EXPECT_EQ(run_cli({"t5", "buckets", "--offsets", "-16777216:0", "--format", "csv"}).exit_code, 0);
  expect_exit2({"t5", "buckets", "--offsets", "-16777217:0"}, "16777217 offsets");
}
