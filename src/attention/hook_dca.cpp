// Dual Chunk Attention (An et al. 2024, "Training-Free Long-Context Scaling of Large Language
// Models", sec. 3), as Qwen2.5-1M's config.json states it (dual_chunk_attention_config:
// chunk_size, local_size) and vLLM runs it (DualChunkRotaryEmbedding and its dual-chunk flash
// attention backend). The sequence is cut into chunks of s = chunk_size - local_size positions;
// every key sits at its position within its chunk, kpos mod s, and the query's position depends
// on where the key is (c = chunk_size):
//   intra-chunk       key in the query's chunk:        q at qpos mod s
//   successive-chunk  key in the chunk just before:    q at min(qpos mod s + s, c)
//   inter-chunk       key in an earlier chunk:         q at min(2 s - 1, c)
// Inside a chunk distances are the true ones; to the previous chunk they stay exact for the
// first local_size queries of a chunk (the paper's local window w) and are capped at c after;
// to every earlier chunk the query sits at the largest position, so every distance stays below
// the trained c + 1. The three attentions merge into one softmax (vLLM merges their
// log-sum-exps). Chunks are counted from position 0.
//
// Length scaling (vLLM, not in the paper): with original_max_position_embeddings = L0 > 0 (the
// config's key inside dual_chunk_attention_config) and a sequence of S tokens, vLLM multiplies
// the keys by m = max(1, 0.1 ln(S / L0) + 1) and also the prefill softmax scale (or, decoding,
// the queries) by m: every score is multiplied by m^2. Here the factor is m^2 with S the real
// keys of the query's document (vLLM's seq_len; packing and padding leave it unchanged); L0 = 0
// switches it off (m = 1 whenever S <= L0).
#include <algorithm>
#include <cmath>

#include "named_schemes.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

int64_t dca_chunk(std::span<const double> a) {
  return static_cast<int64_t>(a[0]);
}
int64_t dca_len(std::span<const double> a) {
  return static_cast<int64_t>(a[0]) - static_cast<int64_t>(a[1]);
}

}  // namespace

extern const named_pairs dca_pairs_decl;
const named_pairs dca_pairs_decl = {
    [](std::span<const double> a) {
      if (!(a[0] >= 1 && a[0] <= 0x1p40))
        fail("dca_chunk_size must be an integer in [1, 2^40], got {}", a[0]);
      if (!(a[2] >= 0 && a[2] <= 0x1p40))
        fail(
            "dca_original_max_position_embeddings must be an integer in [0, 2^40] (0 = no length "
            "scaling), got {}",
            a[2]);
      if (!(a[1] >= 0 && a[1] < a[0]))
        fail(
            "dca_local_size must be an integer in [0, dca_chunk_size) = [0, {}) (chunks of "
            "chunk_size - local_size >= 1 positions), got {}",
            a[0], a[1]);
    },
    3,
    {"intra-chunk", "successive-chunk", "inter-chunk"},
    [](std::span<const double> a, int64_t qp, int64_t kp) {
      const int64_t s = dca_len(a), qc = qp / s, kc = kp / s;
      return kc >= qc ? 0 : kc == qc - 1 ? 1 : 2;
    },
    [](std::span<const double> a, int r, int64_t qp) {
      const int64_t s = dca_len(a), c = dca_chunk(a);
      if (r == 0) return qp % s;
      if (r == 1) return std::min(qp % s + s, c);
      return std::min(2 * s - 1, c);
    },
    [](std::span<const double> a, int, int64_t kp) { return kp % dca_len(a); },
    [](std::span<const double> a, int64_t S) {
      if (a[2] == 0 || S == 0) return 1.0;
      const double m = std::max(1.0, 0.1 * std::log(double(S) / a[2]) + 1);
      return m * m;
    },
    {8, 3, 6},  // chunks of 5 positions (every region by position 10), scaled past 6 keys
    // chunk_size = L, local_size = L/4, original_max_position_embeddings = L, as Qwen2.5-1M's
    // config sets it to its chunk_size (vLLM's length scaling).
    [](int64_t L, double* a) {
      const int64_t local = L / 4;  // tokens, rounded down
      a[0] = double(L), a[1] = double(local), a[2] = double(L);
    },
};

}  // namespace posenc::detail
