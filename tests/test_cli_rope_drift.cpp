// `posenc rope drift` end to end: its JSON against rope_drift for a real config, the log
// position grid, explicit parameters, every format, the ggml note, and malformed inputs
// (exit code 2 and a message naming the argument).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "posenc/attention/kv_cache.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/hf_config.hpp"
#include "test_support.hpp"

using namespace posenc;
using nlohmann::json;

namespace {

std::string data(const std::string& name) {
  return std::string(POSENC_SOURCE_DIR) + "/tests/data/rope/" + name;
}

json run_json(const std::vector<std::string>& args) {
  auto r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json();
}

}  // namespace

TEST(CliRopeDrift, JsonMatchesTheLibraryForAConfig) {
  const auto j = run_json({"rope", "drift", "--hf-config", data("llama3_1_8b.json"), "--positions",
                           "0:1000000:log", "--format", "json"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["scaling"], "llama3");
  EXPECT_EQ(j["seq_len"], 1000000);  // max position + 1
  ASSERT_EQ(j["pipelines"].size(), 4u);
  // Ten per decade from 1 to 10^6 (rounded, duplicates dropped), plus 0 and 999999.
  const auto& rows0 = j["pipelines"][0]["rows"];
  std::vector<int64_t> pos;
  for (const auto& r : rows0) pos.push_back(r["pos"].get<int64_t>());
  ASSERT_FALSE(pos.empty());
  EXPECT_EQ(pos.front(), 0);
  EXPECT_EQ(pos.back(), 999999);
  EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end()));
  EXPECT_NE(std::find(pos.begin(), pos.end(), 100000), pos.end());
  EXPECT_NE(std::find(pos.begin(), pos.end(), 794328), pos.end());  // round(10^5.9)
  std::vector<std::string> w;
  const auto f = rope_frequencies(rope_config_from_file(data("llama3_1_8b.json"), &w), 1000000);
  const char* names[] = {"exact", "f32", "hf_f32", "ggml_f32"};
  for (size_t k = 0; k < 4; ++k) {
    const auto& p = j["pipelines"][k];
    EXPECT_EQ(p["angle"], names[k]);
    const auto want = rope_drift(f, rope_angle_from_name(names[k]), pos);
    ASSERT_EQ(p["rows"].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const auto& r = p["rows"][i];
      if (k == 0)
        EXPECT_TRUE(r["angle_error"].is_null());
      else
        EXPECT_EQ(r["angle_error"].get<double>(), want[i].angle_error);
      EXPECT_EQ(r["output_error"]["float32"].get<double>(), want[i].output_error[0]);
      EXPECT_EQ(r["output_error"]["bfloat16"].get<double>(), want[i].output_error[1]);
      EXPECT_EQ(r["output_error"]["float16"].get<double>(), want[i].output_error[2]);
    }
  }
}

TEST(CliRopeDrift, TextAndCsvWithExplicitParameters) {
  auto r = test::run_cli({"rope", "drift", "--head-dim", "64", "--theta", "500000", "--positions",
                          "1,70000", "--angles", "hf_f32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("worst over positions"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hf_f32"), std::string::npos);
  EXPECT_EQ(r.out.find("ggml_f32"), std::string::npos);
  EXPECT_NE(r.out.find("70000"), std::string::npos);
  r = test::run_cli(
      {"rope", "drift", "--head-dim", "64", "--positions", "1,70000", "--format", "csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("angle,pos,angle_error,out_float32,out_bfloat16,out_float16\n", 0), 0u);
  // 4 pipelines x 2 positions + the header.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 9);
  EXPECT_NE(r.out.find("\nexact,1,,"), std::string::npos) << r.out;
}

TEST(CliRopeDrift, GgmlNoteForTruncateFalse) {
  const auto j = run_json({"rope", "drift", "--head-dim", "128", "--scaling", "yarn", "--factor",
                           "4", "--original-max-pos", "4096", "--truncate", "false", "--positions",
                           "1,1000", "--format", "json"});
  ASSERT_TRUE(j.is_object());
  const auto& g = j["pipelines"][3];
  EXPECT_EQ(g["angle"], "ggml_f32");
  EXPECT_NE(g["note"].get<std::string>().find("truncate"), std::string::npos);
}

TEST(CliRopeDrift, BadInputExits2) {
  const std::vector<std::vector<std::string>> bad = {
      {"rope", "drift", "--head-dim", "64"},  // --positions missing
      {"rope", "drift", "--head-dim", "64", "--positions", "5:1:log"},
      {"rope", "drift", "--head-dim", "64", "--positions", "0:2000000"},
      {"rope", "drift", "--head-dim", "64", "--positions", "1,2", "--angles", "exact"},
      {"rope", "drift", "--head-dim", "64", "--positions", "1,2", "--angles", "f16"},
      {"rope", "drift", "--head-dim", "63", "--positions", "1,2"},
      {"rope", "drift", "--positions", "1,2"},
      {"rope", "drift", "--head-dim", "64", "--positions", "3000000000"},  // ggml int32
      {"rope", "drift", "--hf-config", "/nonexistent.json", "--positions", "1"},
  };
  const std::vector<std::string> says = {"positions",  "B > A",    "more than",
                                         "--angles",   "--angles", "even integer",
                                         "--head-dim", "2^31",     "nonexistent"};
  for (size_t i = 0; i < bad.size(); ++i) {
    const auto r = test::run_cli(bad[i]);
    EXPECT_EQ(r.exit_code, 2) << i << ": " << r.out << r.err;
    EXPECT_TRUE(r.out.empty()) << i << ": " << r.out;
    EXPECT_NE(r.err.find(says[i]), std::string::npos) << i << ": " << r.err;
  }
}

TEST(CliRopeDrift, ReadsGguf) {
  // The hand-checked fixture (tests/data/gguf): Llama 3 parameters recovered from rope_freqs.
  const auto j =
      run_json({"rope", "drift", "--gguf",
                std::string(POSENC_SOURCE_DIR) + "/tests/data/gguf/tiny_llama3.gguf", "--positions",
                "0:100000:log", "--angles", "ggml_f32", "--format", "json"});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["scaling"], "llama3");
  ASSERT_EQ(j["pipelines"].size(), 2u);
  EXPECT_EQ(j["pipelines"][1]["angle"], "ggml_f32");
  // Position 0 is exact in every pipeline; 99999 is not.
  EXPECT_EQ(j["pipelines"][1]["rows"][0]["angle_error"].get<double>(), 0.0);
  EXPECT_GT(j["pipelines"][1]["rows"].back()["angle_error"].get<double>(), 0.0);
}

// posenc rope shift-drift: one row per storage and shift count, the drift growing with the
// shifts, the same numbers as the library's kv_shift_drift (JSON), and argument errors.
TEST(CliRopeShiftDrift, RowsPerStorageAndCountAndErrors) {
  const auto r = posenc::test::run_cli({"rope", "shift-drift", "--head-dim", "32", "--theta",
                                        "500000", "--shifts", "1,20", "--keys", "8", "--delta",
                                        "-100", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 6u);
  posenc::rope_config c;
  c.head_dim = c.rotary_dim = 32;
  c.theta = 500000;
  const std::vector<int64_t> counts = {1, 20};
  const auto lib = posenc::kv_shift_drift(posenc::rope_frequencies(c), posenc::rope_layout::half,
                                          posenc::rope_angle::exact, 8, -100, counts);
  for (size_t i = 0; i < 6; ++i) {
    const auto& row = j["rows"][i];
    EXPECT_EQ(row["storage"], posenc::name(lib[i].storage));
    EXPECT_EQ(row["shifts"], lib[i].shifts);
    EXPECT_EQ(row["drift_max"].get<double>(), lib[i].drift_max);
    EXPECT_EQ(row["once_rms"].get<double>(), lib[i].once_rms);
  }
  EXPECT_GT(j["rows"][5]["drift_rms"].get<double>(), j["rows"][4]["drift_rms"].get<double>());
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"rope", "shift-drift", "--head-dim", "32", "--delta", "0"}, "delta"},
           {{"rope", "shift-drift", "--head-dim", "32", "--shifts", "5,2"}, "counts"},
           {{"rope", "shift-drift", "--head-dim", "32", "--angle", "fast"}, "--angle"},
           {{"rope", "shift-drift"}, "--head-dim"}}) {
    const auto b = posenc::test::run_cli(args);
    EXPECT_EQ(b.exit_code, 2) << args.back();
    EXPECT_NE(b.err.find(message), std::string::npos) << b.err;
    EXPECT_TRUE(b.out.empty());
  }
}
