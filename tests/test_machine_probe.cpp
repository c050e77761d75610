// The FMA-peak probe's structure (docs/decisions.md, "The FMA-peak probe"): it runs in the widest
// vectors the CPU has, with enough independent chains to cover FMA latency x ports and few
// enough to stay in registers, and the flops it reports are the lanes and chains its loop
// actually computes. No timing is asserted: the rates are only checked to be rates.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/machine.hpp"

using namespace posenc;

namespace {

// Float32 lanes of the widest vector unit this CPU has that Highway targets (x86: AVX-512
// F/VL/DQ/BW for its AVX3 targets, AVX2 with FMA for its AVX2 target), read from CPUID here,
// independently of Highway's own dispatch. 0 when not known (other architectures).
int widest_float_lanes_of_this_cpu() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw"))
    return 16;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 8;
  return 4;  // SSE
#else
  return 0;
#endif
}

}  // namespace

TEST(FmaProbe, RunsInTheWidestVectorsOfThisCpu) {
  const int expected = widest_float_lanes_of_this_cpu();
  const std::string target = simd_target_name();
  if (expected == 0) GTEST_SKIP() << "no independent lane count on this architecture";
  EXPECT_EQ(simd_float_lanes(), expected) << "dispatch target " << target;
  if (expected == 16) {
    EXPECT_EQ(target.rfind("AVX3", 0), 0u) << target;
  }
  if (expected == 8) {
    EXPECT_EQ(target, "AVX2");
  }
}

TEST(FmaProbe, ChainsCoverLatencyTimesPortsAndFitTheRegisters) {
  const int chains = fma_probe_chains();
  // Two FMA ports x up to 5 cycles of latency (Zen 2/3; 4 on Intel since Skylake and Zen 4/5).
  EXPECT_GE(chains, 10);
  // Plus the multiplier and the addend: 16 vector registers below AVX-512, 32 with it.
  const int registers = simd_float_lanes() >= 16 ? 32 : 16;
  EXPECT_LE(chains + 2, registers);
}

TEST(FmaProbe, LoopComputesTheLanesAndChainsItReports) {
  const int lanes = simd_float_lanes(), chains = fma_probe_chains();
  // No iteration: the starting values 1 + 0.1 j, summed over every lane of every chain.
  double start = 0;
  for (int j = 0; j < chains; ++j) start += lanes * static_cast<double>(1.0f + 0.1f * j);
  EXPECT_NEAR(fma_chains(0), start, 1e-5 * start);
  // 2^23 iterations: 0.999999^(2^23) = 2e-4, every lane has reached the fixed point
  // 1e-7 / (1 - 0.999999) = 0.1 (the float one, 0.0987, within float rounding of 4%).
  const double per_lane = fma_chains(int64_t{1} << 23) / (static_cast<double>(lanes) * chains);
  EXPECT_GT(per_lane, 0.09);
  EXPECT_LT(per_lane, 0.11);
}

TEST(FmaProbe, ReportsWhatItRan) {
  const fma_peak_result r = measure_fma_peak(2, 0.002, 3);
  EXPECT_EQ(r.threads, 2);
  EXPECT_EQ(r.reps, 3);
  EXPECT_EQ(r.target, simd_target_name());
  EXPECT_EQ(r.lanes, simd_float_lanes());
  EXPECT_EQ(r.chains, fma_probe_chains());
  EXPECT_TRUE(std::isfinite(r.gflops) && r.gflops > 0) << r.gflops;
  EXPECT_GE(r.gflops, r.gflops_median);  // best against median of the same runs
}

// A limited dispatch stays limited however often the target is named. Highway 1.0's
// SupportedTargets(), which simd_target_name() reads, used to point the dispatch back at the
// best target: `POSENC_SIMD_TARGET=avx2 posenc bench` then named AVX2 but ran every kernel and
// the probe on AVX-512 (16 lanes).
TEST(SimdTarget, LimitHoldsAfterTheTargetIsNamed) {
  struct named {
    const char* name;
    int lanes;
  };
  const named targets[] = {{"avx3_dl", 16}, {"avx3", 16},  {"avx2", 8},  {"sse4", 4},
                           {"ssse3", 4},    {"emu128", 4}, {"scalar", 1}};
  struct restore {
    ~restore() { limit_simd_target("best"); }
  } guard;
  int tried = 0;
  for (const named& t : targets) {
    try {
      limit_simd_target(t.name);
    } catch (const invalid_argument&) {
      continue;  // not on this CPU or not compiled in
    }
    ++tried;
    for (int round = 0; round < 2; ++round) {
      std::string n = simd_target_name();
      for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      EXPECT_EQ(n, t.name);
      EXPECT_EQ(simd_float_lanes(), t.lanes) << t.name << ", round " << round;
    }
    const fma_peak_result r = measure_fma_peak(1, 0.001, 1);
    EXPECT_EQ(r.lanes, t.lanes) << t.name;
  }
  EXPECT_GE(tried, 1);
}
