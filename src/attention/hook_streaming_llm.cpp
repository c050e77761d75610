// StreamingLLM (Xiao et al. 2024, "Efficient Streaming Language Models with Attention Sinks",
// sec. 3.2 and 3.3): the cache keeps the first n tokens (the attention sinks) and the W most
// recent ones, and positions are assigned inside the cache, not in the text: the sinks at
// 0 .. n - 1, the recent tokens at n .. n + W - 1 (the query at the last slot). For query i and
// key j of one causal call:
//   window  i - j < W:            q at qpos, k at kpos   (in the cache: distance i - j as well)
//   sink    kpos < n (otherwise): q at min(qpos, n + W - 1), k at kpos
//   neither:                      evicted, not attended
// Until the cache fills (i < n + W) every token is in it at its own position. RoPE scores depend
// on distances alone, so the window pairs score as at the cache's slots; the sinks keep their
// slots 0 .. n - 1 while the query sits at n + W - 1, so no distance exceeds n + W - 1. Windows
// are counted on position ids (the call's q_positions / k_positions), which are 0 .. S - 1 for
// one sequence.
#include <algorithm>

#include "named_schemes.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

int64_t sl_sinks(std::span<const double> a) {
  return static_cast<int64_t>(a[0]);
}
int64_t sl_window(std::span<const double> a) {
  return static_cast<int64_t>(a[1]);
}

}  // namespace

extern const named_pairs streaming_llm_pairs_decl;
const named_pairs streaming_llm_pairs_decl = {
    [](std::span<const double> a) {
      if (!(a[0] >= 0 && a[0] <= 0x1p40))
        fail("streaming_sink_tokens must be an integer in [0, 2^40] (n, the sink tokens), got {}",
             a[0]);
      if (!(a[1] >= 1 && a[1] <= 0x1p40))
        fail("streaming_window must be an integer in [1, 2^40] (W, the recent tokens), got {}",
             a[1]);
    },
    2,
    {"window", "sink", nullptr},
    [](std::span<const double> a, int64_t qp, int64_t kp) {
      if (qp - kp < sl_window(a)) return 0;
      return kp < sl_sinks(a) ? 1 : -1;
    },
    [](std::span<const double> a, int r, int64_t qp) {
      return r == 0 ? qp : std::min(qp, sl_sinks(a) + sl_window(a) - 1);
    },
    [](std::span<const double>, int, int64_t kp) { return kp; },
    nullptr,
    {2, 4, 0},  // 2 sinks and 4 recent tokens: 13 keys evict some
    // 4 sink tokens and a window of L - 4: a cache of L (Xiao et al. 2024).
    [](int64_t L, double* a) { a[0] = 4, a[1] = double(L - 4); },
};

}  // namespace posenc::detail
