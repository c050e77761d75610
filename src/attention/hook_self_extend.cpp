// Self-Extend (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without
// Tuning", sec. 3.2 and Algorithm 1): RoPE at the trained positions for the keys near the query
// and at grouped positions for the far ones, merged into one softmax. With group size G and
// neighbour window w, a pair (query at qpos, key at kpos) is
//   neighbour  qpos - kpos < w:  q at qpos,                     k at kpos
//   grouped    otherwise:        q at floor(qpos/G) + w - floor(w/G),  k at floor(kpos/G)
// so a grouped pair's distance is floor(qpos/G) - floor(kpos/G) + w - floor(w/G): about
// (qpos - kpos) / G shifted up by w - w/G, which meets the neighbour distances at the window's
// edge (distance w on both sides when G divides qpos, kpos and w) and grows G times slower after
// it. A model trained to length L then sees distances below L up to about (L - w) G + w.
// llama.cpp's group attention (--grp-attn-n G, --grp-attn-w W) reaches the grouped positions
// by dividing the cached keys' positions (llama_memory_seq_div; kv_cache::divide here) chunk
// by chunk and keeps one attention; this is the paper's two-attention form.
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

int64_t se_group(std::span<const double> a) {
  return static_cast<int64_t>(a[0]);
}
int64_t se_window(std::span<const double> a) {
  return static_cast<int64_t>(a[1]);
}

}  // namespace

extern const named_pairs self_extend_pairs_decl;
const named_pairs self_extend_pairs_decl = {
    [](std::span<const double> a) {
      if (!(a[0] >= 1 && a[0] <= 0x1p40))
        fail("self_extend_group must be an integer in [1, 2^40] (G, the group size), got {}", a[0]);
      if (!(a[1] >= 0 && a[1] <= 0x1p40))
        fail("self_extend_window must be an integer in [0, 2^40] (w, the neighbour window), got {}",
             a[1]);
    },
    2,
    {"neighbour", "grouped", nullptr},
    [](std::span<const double> a, int64_t qp, int64_t kp) {
      return qp - kp < se_window(a) ? 0 : 1;
    },
    [](std::span<const double> a, int r, int64_t qp) {
      const int64_t G = se_group(a), w = se_window(a);
      return r == 0 ? qp : qp / G + w - w / G;
    },
    [](std::span<const double> a, int r, int64_t kp) { return r == 0 ? kp : kp / se_group(a); },
    nullptr,
    {3, 5, 0},  // G = 3, w = 5: neighbours up to distance 4, groups of 3 past them
    // w = L/2 neighbours, G = 16: grouped distances reach (L - w) G + w = 8.5 L before they
    // leave the trained range (Jin et al. 2024's rule for G and w).
    [](int64_t L, double* a) {
      const int64_t w = L / 2;  // tokens, rounded down
      a[0] = 16, a[1] = double(w);
    },
};

}  // namespace posenc::detail
