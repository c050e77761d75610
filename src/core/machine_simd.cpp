// SIMD part of the machine probes: Highway dynamic dispatch (one binary, best target at run
// time). This file is compiled once per target through hwy/foreach_target.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/machine_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cctype>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Independent accumulators of the FMA-peak loop. Throughput needs at least (FMA latency) x
// (FMA ports) chains in flight: 4 x 2 = 8 on Intel since Skylake and on AMD Zen 4/5, 5 x 2 = 10
// on Zen 2/3. Each chain holds one register and the loop two more (multiplier, addend), so the
// count also has to fit the register file without spills: 12 + 2 of the 16 vector registers of
// SSE/AVX2, 16 + 2 of the 32 of AVX-512 (and of NEON/SVE), where more chains leave more margin
// for a longer latency. Measured against a -march=native probe in docs/decisions.md ("The FMA-peak
// probe").
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
constexpr int kChains = 12;
#else
constexpr int kChains = 16;
#endif

// kChains chains a_j <- a_j * m + c in the widest vector of this target (ScalableTag, not
// capped). Returns a value depending on every accumulator so the loop cannot be removed; m and c
// keep the values near c / (1 - m) = 0.1, far from overflow and subnormals.
float FmaChains(int64_t iters) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  V a[kChains];
#pragma GCC unroll 32
  for (int j = 0; j < kChains; ++j) a[j] = hn::Set(d, 1.0f + 0.1f * static_cast<float>(j));
  const V m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < kChains; ++j) a[j] = hn::MulAdd(a[j], m, c);
  }
  V s = a[0];
#pragma GCC unroll 32
  for (int j = 1; j < kChains; ++j) s = hn::Add(s, a[j]);
  return hn::GetLane(hn::SumOfLanes(d, s));
}

int FloatLanes() {
  return static_cast<int>(hn::Lanes(hn::ScalableTag<float>()));
}

int FmaChainCount() {
  return kChains;
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <string>

#include "posenc/core/error.hpp"
namespace posenc {
HWY_EXPORT(FmaChains);
HWY_EXPORT(FloatLanes);
HWY_EXPORT(FmaChainCount);

float fma_chains(int64_t iters) {
  return HWY_DYNAMIC_DISPATCH(FmaChains)(iters);
}
int simd_float_lanes() {
  return HWY_DYNAMIC_DISPATCH(FloatLanes)();
}
int fma_probe_chains() {
  return HWY_DYNAMIC_DISPATCH(FmaChainCount)();
}
namespace {
// hwy::SupportedTargets(), without its side effect on the dispatch. Highway 1.0's
// SupportedTargets() re-detects the CPU and, before masking the result with DisableTargets,
// points the dynamic dispatch at every target the CPU has (ChosenTarget::Update with the
// unmasked set), and the dispatch stays there: one call after limit_simd_target("avx2") put
// every later kernel back on AVX3, while simd_target_name() went on saying AVX2 (on an AVX-512
// Intel Xeon the forced probe reported 16 lanes at the 512-bit rate). Updating the chosen
// target with the masked set puts the dispatch back where the limit says.
int64_t supported_targets() {
  const int64_t targets = hwy::SupportedTargets();
  hwy::GetChosenTarget().Update(targets);
  return targets;
}
}  // namespace

// Highway orders targets so that better ones have lower bits: the one dynamic dispatch picks is
// the lowest bit of (supported by the CPU) & (compiled in).
std::string simd_target_name() {
  const int64_t both = supported_targets() & HWY_TARGETS;
  return both ? hwy::TargetName(both & -both) : "scalar";
}

namespace {
// Lower-case names of the targets compiled in and supported by this CPU, best first.
std::string available_targets() {
  std::string names;
  hwy::DisableTargets(0);
  for (int64_t both = supported_targets() & HWY_TARGETS; both != 0; both &= both - 1) {
    std::string n = hwy::TargetName(both & -both);
    for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    names += (names.empty() ? "" : ", ") + n;
  }
  return names;
}
}  // namespace

void limit_simd_target(const std::string& name) {
  const std::string allowed = available_targets();  // also re-enables every target
  if (name == "best" || name.empty()) return;
  for (int64_t both = supported_targets() & HWY_TARGETS; both != 0; both &= both - 1) {
    const int64_t bit = both & -both;
    std::string n = hwy::TargetName(bit);
    for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (n != name) continue;
    // Highway orders targets so that better ones have lower bits: disabling every lower bit
    // leaves `bit` the best remaining one, which the next dynamic dispatch selects.
    hwy::DisableTargets(bit - 1);
    supported_targets();
    return;
  }
  throw invalid_argument("simd target: '" + name +
                         "' is not available on this CPU; allowed: best, " + allowed);
}
}  // namespace posenc
#endif
