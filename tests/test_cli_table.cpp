// End-to-end: `posenc table` and `posenc freqs` run as a user would, their JSON / CSV / text
// parsed back; every malformed command line exits 2 with a message naming the argument, and a
// failed run never leaves an output file behind. Golden values from python3 (see
// test_sinusoidal.cpp): sin/cos of 1, 0.01, 2, 0.02 for width 4.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "posenc/core/npy.hpp"
#include "test_support.hpp"

using posenc::test::run_cli;
using json = nlohmann::json;

namespace {

constexpr double tol = 4e-15;  // library entry bound plus python's rounding (test_sinusoidal)

void expect_usage_error(const std::vector<std::string>& args, const std::string& needle) {
  const auto r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, sep)) out.push_back(tok);
  return out;
}

}  // namespace

TEST(CliTable, JsonWidth4) {
  const auto r = run_cli({"table", "--width", "4", "--positions", "0:3", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::ordered_json::parse(r.out);
  // Key order is part of the contract.
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"width", "base", "layout", "denominator", "positions",
                                            "table"}));
  EXPECT_EQ(j["width"], 4);
  EXPECT_EQ(j["base"], 10000.0);
  EXPECT_EQ(j["layout"], "interleaved");
  EXPECT_EQ(j["denominator"], "width");
  EXPECT_EQ(j["positions"], nlohmann::ordered_json::parse("[0,1,2]"));
  const double want[3][4] = {
      {0, 1, 0, 1},
      {0.8414709848078965, 0.5403023058681398, 0.009999833334166664, 0.9999500004166653},
      {0.9092974268256817, -0.4161468365471424, 0.01999866669333308, 0.9998000066665778}};
  ASSERT_EQ(j["table"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(j["table"][i].size(), 4u);
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(j["table"][i][c].get<double>(), want[i][c], tol);
  }
}

TEST(CliTable, ListedPositionsHalvesAndFloat32) {
  const auto r = run_cli({"table", "--width", "4", "--positions", "2,0", "--layout", "halves",
                          "--dtype", "float32", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["layout"], "halves");
  EXPECT_EQ(j["positions"], json::parse("[2,0]"));
  // Row for position 2 in halves order [sin 2, sin 0.02 | cos 2, cos 0.02], rounded to float.
  const double want[4] = {0.9092974268256817, 0.01999866669333308, -0.4161468365471424,
                          0.9998000066665778};
  for (int c = 0; c < 4; ++c)
    EXPECT_EQ(j["table"][0][c].get<double>(), static_cast<double>(static_cast<float>(want[c])));
  EXPECT_EQ(j["table"][1], json::parse("[0.0, 0.0, 1.0, 1.0]"));
}

TEST(CliTable, HalfMinusOneDenominator) {
  // Width 8: omega_3 = 10000^(-3/3) = 1e-4, so channel 6 at position 100 is sin(0.01).
  const auto r = run_cli({"table", "--width", "8", "--positions", "100", "--denominator",
                          "half-minus-one", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["denominator"], "half-minus-one");
  EXPECT_NEAR(j["table"][0][6].get<double>(), 0.009999833334166664, tol);
}

TEST(CliTable, CsvHeaderAndRows) {
  const auto r = run_cli({"table", "--width", "4", "--positions", "0:3", "--format", "csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = split(r.out, '\n');
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "position,sin_r0,cos_r0,sin_r1,cos_r1");
  const auto row = split(lines[2], ',');
  ASSERT_EQ(row.size(), 5u);
  EXPECT_EQ(row[0], "1");
  EXPECT_NEAR(std::stod(row[1]), 0.8414709848078965, tol);
  EXPECT_NEAR(std::stod(row[4]), 0.9999500004166653, tol);
}

TEST(CliTable, TextIsAlignedAndLabelled) {
  const auto r = run_cli({"table", "--width", "4", "--positions", "0:3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = split(r.out, '\n');
  ASSERT_EQ(lines.size(), 6u);  // title, channel row, label row, 3 positions
  EXPECT_NE(lines[0].find("width 4"), std::string::npos);
  EXPECT_NE(lines[2].find("sin r0"), std::string::npos);
  EXPECT_NE(lines[2].find("cos r1"), std::string::npos);
  for (size_t i = 2; i < lines.size(); ++i) EXPECT_EQ(lines[i].size(), lines[1].size()) << i;
  EXPECT_NE(lines[4].find("0.841471"), std::string::npos);
  EXPECT_NE(lines[5].find("-0.416147"), std::string::npos);
}

TEST(CliFreqs, JsonWidth4) {
  const auto r = run_cli({"freqs", "--width", "4", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["width"], 4);
  EXPECT_EQ(j["base"], 10000.0);
  ASSERT_EQ(j["pairs"].size(), 2u);
  EXPECT_EQ(j["pairs"][0]["r"], 0);
  EXPECT_EQ(j["pairs"][0]["omega"].get<double>(), 1.0);
  EXPECT_NEAR(j["pairs"][1]["omega"].get<double>(), 0.01, 2e-18);
  // 2*pi and 200*pi (python3: 6.283185307179586, 628.3185307179587), 2 ulp.
  EXPECT_NEAR(j["pairs"][0]["wavelength"].get<double>(), 6.283185307179586, 2e-15);
  EXPECT_NEAR(j["pairs"][1]["wavelength"].get<double>(), 628.3185307179587, 2e-13);
}

TEST(CliFreqs, CsvAndText) {
  auto r = run_cli({"freqs", "--width", "20", "--format", "csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = split(r.out, '\n');
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_EQ(lines[0], "r,omega,wavelength");
  // r = 4 at width 20: 10000^-0.4 = 0.025118864315095794 (python3).
  EXPECT_NEAR(std::stod(split(lines[5], ',')[1]), 0.025118864315095794, 1e-17);
  r = run_cli({"freqs", "--width", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wavelength"), std::string::npos);
  EXPECT_NE(r.out.find("6/7"), std::string::npos);
}

TEST(CliTable, BadArgumentsExit2NamingTheArgument) {
  expect_usage_error({"table", "--width", "7", "--positions", "0:3"}, "width");
  expect_usage_error({"table", "--width", "0", "--positions", "0:3"}, "width");
  expect_usage_error({"table", "--width", "-4", "--positions", "0:3"}, "width");
  expect_usage_error({"table", "--width", "four", "--positions", "0:3"}, "--width");
  expect_usage_error({"table", "--width", "4", "--positions", "0:3", "--base", "1"}, "base");
  expect_usage_error({"table", "--width", "4", "--positions", "0:3", "--base", "abc"}, "--base");
  expect_usage_error({"table", "--width", "4", "--positions", "0:3", "--base", "inf"}, "base");
  expect_usage_error({"table", "--width", "4", "--positions", "-1,2"}, "--positions");
  expect_usage_error({"table", "--width", "4", "--positions", "a:b"}, "--positions");
  expect_usage_error({"table", "--width", "4", "--positions", "3:3"}, "--positions");
  expect_usage_error({"table", "--width", "4", "--positions", "0:3", "--layout", "diag"},
                     "--layout");
  expect_usage_error({"table", "--width", "4", "--positions", "0:3", "--denominator", "d"},
                     "--denominator");
  expect_usage_error({"table", "--width", "4", "--positions", "0:3", "--dtype", "int8"}, "--dtype");
  expect_usage_error({"table", "--width", "4", "--positions", "0:3", "--format", "xml"},
                     "--format");
  expect_usage_error({"table", "--width", "4", "--positions", "0:3", "--frobnicate"}, "frobnicate");
  expect_usage_error({"table", "--positions", "0:3"}, "--width");
  expect_usage_error({"freqs", "--width", "5"}, "width");
  expect_usage_error({"freqs", "--width", "4", "--base", "0.5"}, "base");
}

TEST(CliTable, OutFileIsAtomic) {
  posenc::test::temp_dir d;
  // Success: .npy with shape (N, d) and the requested dtype.
  const auto npy = d.file("pe.npy");
  auto r =
      run_cli({"table", "--width", "6", "--positions", "0:5", "--dtype", "float32", "--out", npy});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto a = posenc::read_npy(npy);
  EXPECT_EQ(a.type, posenc::dtype::f32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(a.as<float>()[6], static_cast<float>(0.8414709848078965));  // row 1, sin r0
  const auto js = d.file("pe.json");
  r = run_cli({"table", "--width", "4", "--positions", "0:2", "--format", "json", "--out", js});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(posenc::test::read_text(js))["width"], 4);

  // Failures leave no file: bad width, and a table over the 8 GiB memory cap
  // (65 x 2^24 x 8 bytes).
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"table", "--width", "7", "--positions", "0:3", "--out", d.file("bad1.npy")},
           {"table", "--width", "16777216", "--positions", "0:65", "--out", d.file("bad2.npy")},
           {"table", "--width", "4", "--positions", "0:3", "--out", d.file("no/dir/x.json")}}) {
    r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
  }
  EXPECT_NE(run_cli({"table", "--width", "16777216", "--positions", "0:65"}).err.find("cap"),
            std::string::npos);
  // Only the two successful outputs exist: no partial or temporary files.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d.path)) {
    ++files;
    EXPECT_TRUE(e.path().filename() == "pe.npy" || e.path().filename() == "pe.json") << e.path();
  }
  EXPECT_EQ(files, 2);
}

TEST(CliCheck, SinusoidalAndLearnedGroupsPass) {
  const auto r =
      run_cli({"check", "--group", "sinusoidal", "--group", "learned", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = json::parse(r.out);
  EXPECT_TRUE(j["passed"].get<bool>());
  int sin = 0, learned = 0;
  for (const auto& c : j["checks"]) {
    EXPECT_TRUE(c["passed"].get<bool>()) << c.dump();
    sin += c["group"] == "sinusoidal";
    learned += c["group"] == "learned";
    EXPECT_LE(c["max_error"].get<double>(), c["tolerance"].get<double>()) << c.dump();
  }
  EXPECT_GE(sin, 12);
  EXPECT_GE(learned, 4);
}
