// SIMD part of the machine probes: Highway dynamic dispatch (one binary, best target at run
// time). This file is compiled once per target through hwy/foreach_target.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/machine_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 12 independent accumulators: covers FMA latency (4-5 cycles) x 2 FMA ports with margin.
// Returns a value depending on every accumulator so the loop cannot be removed.
float FmaChains(int64_t iters) {
  const hn::ScalableTag<float> d;
  auto a0 = hn::Set(d, 1.0f), a1 = hn::Set(d, 1.1f), a2 = hn::Set(d, 1.2f), a3 = hn::Set(d, 1.3f);
  auto a4 = hn::Set(d, 1.4f), a5 = hn::Set(d, 1.5f), a6 = hn::Set(d, 1.6f), a7 = hn::Set(d, 1.7f);
  auto a8 = hn::Set(d, 1.8f), a9 = hn::Set(d, 1.9f), a10 = hn::Set(d, 2.0f), a11 = hn::Set(d, 2.1f);
  const auto m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, m, c);
    a1 = hn::MulAdd(a1, m, c);
    a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c);
    a4 = hn::MulAdd(a4, m, c);
    a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c);
    a7 = hn::MulAdd(a7, m, c);
    a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c);
    a10 = hn::MulAdd(a10, m, c);
    a11 = hn::MulAdd(a11, m, c);
  }
  auto s =
      hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  s = hn::Add(s, hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

int FloatLanes() {
  return static_cast<int>(hn::Lanes(hn::ScalableTag<float>()));
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <string>
namespace posenc {
HWY_EXPORT(FmaChains);
HWY_EXPORT(FloatLanes);

float fma_chains(int64_t iters) {
  return HWY_DYNAMIC_DISPATCH(FmaChains)(iters);
}
int simd_float_lanes() {
  return HWY_DYNAMIC_DISPATCH(FloatLanes)();
}
// Highway orders targets so that better ones have lower bits: the one dynamic dispatch picks is
// the lowest bit of (supported by the CPU) & (compiled in).
std::string simd_target_name() {
  const int64_t both = hwy::SupportedTargets() & HWY_TARGETS;
  return both ? hwy::TargetName(both & -both) : "scalar";
}
}  // namespace posenc
#endif
