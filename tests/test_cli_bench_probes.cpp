// `posenc bench` probes the machine's limits before the cases and again after them, and every
// fraction divides by the higher of the two readings (docs/decisions.md, "Probes before and after
// the cases"): a host that got busy during the first probe must not make a kernel look faster
// than the machine. These tests read the JSON a small run writes and check that the reported
// limits are the maxima of the two readings and that each fraction is its rate over them.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "posenc/attention/attention.hpp"
#include "test_support.hpp"

namespace {

using json = nlohmann::json;
using posenc::test::run_cli;

TEST(CliBenchProbes, FractionsDivideByTheHigherOfTheReadingsBeforeAndAfterTheCases) {
  // Memory-bound cases that read and write (RoPE decode) and that only read (a decode step of
  // attention, whose limit is the roofline's), and a compute-bound one (ALiBi attention).
  const auto r = run_cli({"bench", "--quick", "--filter", "rope/T=1/", "--filter",
                          "attention/T=1/S=8192/Hq=32/Hkv=8/D=128/scheme=none/kv=f16", "--filter",
                          "scheme=alibi", "--reps", "1", "--min-seconds", "0", "--threads", "1",
                          "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  const json& m = j.at("machine");
  const json& before = m.at("probes_before_cases");
  const json& after = m.at("probes_after_cases");
  ASSERT_TRUE(before.is_object()) << m.dump(2);
  ASSERT_TRUE(after.is_object()) << m.dump(2);
  for (const char* key : {"peak_gflops", "peak_gflops_1thread", "bandwidth_gbps", "read_gbps"}) {
    const double b = before.at(key).get<double>(), a = after.at(key).get<double>();
    EXPECT_GT(b, 0) << key;
    EXPECT_GT(a, 0) << key;
    EXPECT_DOUBLE_EQ(m.at(key).get<double>(), std::max(a, b)) << key << "\n" << m.dump(2);
  }
  ASSERT_TRUE(j.at("warnings").is_array());

  const double peak = m.at("peak_gflops").get<double>();
  // The bfloat16-products case (its name ends in products=bf16; "scheme=alibi" matches it) divides
  // by the vdpbf16ps probe where the CPU has that instruction, else by the FMA peak.
  const json& bf16_peak = m.at("bf16_dot_peak_gflops");
  EXPECT_EQ(bf16_peak.is_number(), posenc::attention_bf16_native()) << m.dump(2);
  int with_flops = 0, with_bytes = 0, decodes = 0, bf16_cases = 0;
  for (const auto& c : j.at("cases")) {
    ASSERT_FALSE(c.contains("error")) << c.dump(2);
    if (c.at("flops").get<double>() > 0) {
      ++with_flops;
      const bool bf16 = c.at("limit").get<std::string>() == "bf16 peak";
      const std::string name = c.at("name").get<std::string>();
      if (name.size() > 13 && name.compare(name.size() - 13, 13, "products=bf16") == 0) {
        ++bf16_cases;
        EXPECT_EQ(bf16, posenc::attention_bf16_native()) << c.dump(2);
        EXPECT_TRUE(c.contains("speedup_over_twin")) << c.dump(2);
      }
      const double limit = bf16 ? bf16_peak.get<double>() : peak;
      EXPECT_NEAR(c.at("fraction_of_peak").get<double>(), c.at("gflops").get<double>() / limit,
                  1e-12 * c.at("fraction_of_peak").get<double>())
          << c.dump(2);
    }
    if (c.at("bytes").get<double>() > 0) {
      ++with_bytes;
      // A case's bandwidth reference is its own footprint's copy rate or the machine's; a
      // case that only reads (a decode step) divides by the machine's read rate instead.
      const double ref = c.at("bandwidth_reference_gbps").get<double>();
      EXPECT_GT(ref, 0) << c.dump(2);
      const std::string probe = c.at("bandwidth_probe").get<std::string>();
      const bool decode = c.at("name").get<std::string>().rfind("attention/T=1/", 0) == 0;
      EXPECT_EQ(probe, decode ? "read" : "copy") << c.dump(2);
      if (decode) {
        ++decodes;
        EXPECT_DOUBLE_EQ(ref, m.at("read_gbps").get<double>()) << c.dump(2);
      }
      EXPECT_NEAR(c.at("fraction_of_bandwidth").get<double>(), c.at("gbps").get<double>() / ref,
                  1e-12 * c.at("fraction_of_bandwidth").get<double>())
          << c.dump(2);
    }
  }
  EXPECT_GT(with_flops, 0) << r.out.substr(0, 2000);
  EXPECT_EQ(bf16_cases, 1) << r.out.substr(0, 2000);
  EXPECT_GT(with_bytes, 0) << r.out.substr(0, 2000);
  EXPECT_GT(decodes, 0) << r.out.substr(0, 2000);
}

TEST(CliBenchProbes, NoCaseTimedMeansNoSecondReading) {
  const auto r = run_cli({"bench", "--machine-only", "--quick", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  const json& m = j.at("machine");
  EXPECT_TRUE(m.at("probes_after_cases").is_null()) << m.dump(2);
  EXPECT_DOUBLE_EQ(m.at("peak_gflops").get<double>(),
                   m.at("probes_before_cases").at("peak_gflops").get<double>());
  EXPECT_TRUE(j.at("cases").empty());
}

}  // namespace

// The GEMM probe (tools/posenc/bench/gemm_probe.hpp): the libraries looked for are listed, each
// loaded or with the reason it is not; a prefill and a backward case each name their products'
// shape, whose rate is the best of its readings (every library present, both threadings), and
// their fraction_of_gemm is their GFLOP/s over it. Without a library the fractions are null.
// --no-gemm turns the probe off.
TEST(CliBenchProbes, GemmProbeTimesEachCasesProductsAndDividesByTheBestReading) {
  const std::string fwd = "attention/T=2048/S=2048/Hq=32/Hkv=8/D=128/scheme=none";
  const auto r =
      run_cli({"bench", "--quick", "--filter", fwd, "--filter",
               "attention_backward/T=2048/S=2048/Hq=32/Hkv=8/D=128/scheme=none", "--reps", "1",
               "--min-seconds", "0", "--threads", "1", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  const json& g = j.at("machine").at("gemm");
  EXPECT_TRUE(g.at("enabled").get<bool>());
  bool any = false;
  ASSERT_EQ(g.at("libraries").size(), 2u) << g.dump(2);
  for (const auto& l : g.at("libraries")) {
    EXPECT_TRUE(l.contains("unavailable") != l.contains("version")) << l.dump(2);
    any |= !l.contains("unavailable");
  }
  int forward = 0, backward = 0;
  for (const auto& c : j.at("cases")) {
    ASSERT_FALSE(c.contains("error")) << c.dump(2);
    const std::string name = c.at("name").get<std::string>();
    if (!any) {
      EXPECT_TRUE(c.at("fraction_of_gemm").is_null()) << c.dump(2);
      continue;
    }
    const bool bwd = name.find("backward") != std::string::npos;
    (bwd ? backward : forward) += 1;
    // --quick: T = S = 128.
    const json* shape = nullptr;
    for (const auto& s : g.at("shapes"))
      if (s.at("T") == 128 && s.at("S") == 128 && s.at("D") == 128 &&
          s.at("pass") == (bwd ? "backward" : "forward"))
        shape = &s;
    ASSERT_NE(shape, nullptr) << name << "\n" << g.dump(2);
    double best = 0;
    for (const auto& rd : shape->at("readings"))
      best = std::max(best, rd.at("gflops").get<double>());
    // Every library present ran, in two threadings each.
    EXPECT_TRUE(shape->at("failures").empty()) << shape->dump(2);
    EXPECT_EQ(shape->at("readings").size() % 2, 0u) << shape->dump(2);
    EXPECT_GT(best, 0);
    EXPECT_DOUBLE_EQ(shape->at("gflops").get<double>(), best);
    EXPECT_DOUBLE_EQ(c.at("gemm_gflops").get<double>(), best);
    EXPECT_NEAR(c.at("fraction_of_gemm").get<double>(), c.at("gflops").get<double>() / best,
                1e-12 * c.at("fraction_of_gemm").get<double>());
  }
  if (any) {
    EXPECT_GE(forward, 1);
    EXPECT_GE(backward, 1);
  }

  const auto off = run_cli({"bench", "--quick", "--filter", fwd, "--reps", "1", "--min-seconds",
                            "0", "--threads", "1", "--no-gemm", "--format", "json"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  const json jo = json::parse(off.out);
  EXPECT_FALSE(jo.at("machine").at("gemm").at("enabled").get<bool>());
  EXPECT_TRUE(jo.at("machine").at("gemm").at("shapes").empty());
  for (const auto& c : jo.at("cases")) EXPECT_TRUE(c.at("fraction_of_gemm").is_null()) << c.dump(2);
}

// Each attention case runs the scheme its name says: the case list is built while the bench
// registers its cases (a static initialiser), so the declarations it reads must be constant-
// initialised; a declaration still waiting for dynamic initialisation there shifted every scheme
// reached by name onto its neighbour's row (the case named for ALiBi ran xPos).
TEST(CliBenchProbes, EveryAttentionCaseRunsTheSchemeItNames) {
  const auto r = run_cli({"bench", "--quick", "--no-gemm", "--filter",
                          "/T=2048/S=2048/Hq=32/Hkv=8/D=128/scheme=", "--reps", "1",
                          "--min-seconds", "0", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  int n = 0;
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name").get<std::string>(),
                      note = c.at("note").get<std::string>();
    std::string scheme = name.substr(name.find("scheme=") + 7);
    scheme = scheme.substr(0, scheme.find('/'));
    if (scheme == "rope") scheme = "rope_half";  // the case tables' name of its row
    const size_t at = note.find("scheme " + scheme);
    const size_t end = at + 7 + scheme.size();
    EXPECT_TRUE(at != std::string::npos && end < note.size() &&
                (note[end] == ',' || note[end] == ';'))
        << name << ": " << note;
    ++n;
  }
  EXPECT_GE(n, 15);
}
