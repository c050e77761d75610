// posenc/attention/attention.hpp: multi-head attention with position, one engine for every
// scheme.
//
// The path of the data (docs/DESIGN.md), with the engine's hooks marked:
//
//   q, k --[hook 1: q/k transform  = RoPE at position ids]--> q', k'
//   s_ij = scale * q'_i . (k'_j [+ a^K_c  hook 2a: Shaw-K])
//          [+ bias(i, j)           hook 2b: ALiBi, T5]             biases after scaling
//          masked -> -inf          causal | key padding | packed documents | sliding window
//   p_i  = softmax_j(s_i)
//   o_i  = sum_j p_ij (v_j [+ a^V_c  hook 3: Shaw-V])
//
// with c = clip(kpos_j - qpos_i, -K, K) + K (Shaw et al. 2018, eq. 3-4). Absolute encodings
// (sinusoidal, learned) act on the input before attention and need nothing here. A scheme is
// switched on by filling its member of attention_position; nothing else in the engine knows
// which scheme is on, and any combination is allowed.
//
// Masks are defined on token indices (query i is token S - T + i of the key sequence, i.e.
// aligned bottom-right, as a chunk of new tokens after a cache), position schemes on position
// ids. Query i may see key j iff all of:
//   causal:        j <= S - T + i
//   window W > 0:  (S - T + i) - j < W          (only keys behind are limited; keys ahead are
//                                                limited by `causal` alone)
//   key padding:   key_padding[j] != 0 and k_positions[j] != pad_position
//   documents:     q_doc(i) == k_doc(j)
//   query pad:     q_positions[i] != pad_position (a pad query sees nothing)
// A row that sees no key gets out = 0 and lse = -inf, never NaN.
//
// Two implementations of the same contract:
//   attention_reference  the specification: the full (S,) score row per (head, query) in
//                        double, then a two-pass softmax; RoPE applied in double.
//   attention_tiled      FlashAttention-2 style (Dao 2023, Algorithm 1): query blocks x key
//                        blocks with an online softmax (Milakov and Gimelshein 2018), extra
//                        memory O(Bq * (D + Bk + 2K+1)) per thread plus one rotated copy of q and
//                        k when RoPE is on; never a T x S score or bias matrix. Arithmetic in
//                        the element type (float or double). float32 runs Highway
//                        micro-kernels (src/attention/attention_simd.cpp: register-blocked
//                        Q K^T and P V, keys transposed once per call, O(S * Hkv * D) extra);
//                        double runs the plain loops of attention.cpp.
//   attention_forward    the tiled path, or the reference when the environment variable
//                        POSENC_REFERENCE=1 is set (one binary can compare both).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/shaw.hpp"
#include "posenc/encodings/t5_bias.hpp"

namespace posenc {

// Hook 1, the q/k transform: RoPE (Su et al. 2021) at the position ids, applied to q and k.
struct attention_rope {
  const rope_freqs* freqs = nullptr;  // nullptr = off; rotary_dim <= D, head_dim == D
  rope_layout layout = rope_layout::half;
  rope_angle angle = rope_angle::exact;
  bool keys_rotated = false;  // true: k is already rotated at k_positions (a KV cache stores
                              // rotated keys); only q is rotated
};

// Which position schemes are on. Each member is one scheme's parameters; empty/null = off.
struct attention_position {
  attention_rope rope;                // hook 1
  std::span<const double> alibi;      // hook 2b: ALiBi slopes (Hq,) (Press et al. 2022): bias
                                      //   -m_h (qpos - kpos) if causal, -m_h |qpos - kpos| if not
  const t5_bias_table* t5 = nullptr;  // hook 2b: T5 bias (Raffel et al. 2020), heads == Hq;
                                      //   bias weights[bucket(kpos - qpos) * Hq + h]
  const shaw_tables* shaw = nullptr;  // hooks 2a and 3: Shaw tables, dim == D, shared by heads
};

// One attention call. Shapes: T queries, S keys, Hq query heads, Hkv key/value heads,
// head dim D. Head h of q reads key/value head h / (Hq / Hkv) (MHA, GQA, MQA; no copies).
template <typename Real>
struct attention_params {
  const Real* q = nullptr;  // q:   (T, Hq, D), D contiguous
  const Real* k = nullptr;  // k:   (S, Hkv, D), D contiguous
  const Real* v = nullptr;  // v:   (S, Hkv, D), D contiguous
  Real* out = nullptr;      // out: (T, Hq, D); may not alias q, k, v
  Real* lse = nullptr;      // lse: (T, Hq) natural log of sum_j exp(s_ij) (scaled, biased,
                            //      before Shaw-V); -inf for a row that sees no key. Optional.
  int64_t T = 0, S = 0, Hq = 0, Hkv = 0, D = 0;  // T, S >= 0; Hq % Hkv == 0; D >= 1
  std::optional<double> scale;                   // default 1 / sqrt(D); finite
  bool causal = false;                           // bottom-right aligned (see above)
  int64_t window = 0;                            // W >= 0; 0 = no sliding window
  std::span<const uint8_t> key_padding;          // (S,) nonzero = real key; empty = all real
  // Packed documents, one of two forms (both empty = one document):
  std::span<const int64_t> cu_seqlens;  // over the S keys (0, ..., S); query i belongs to the
                                        //   document of key S - T + i (requires T <= S)
  std::span<const int64_t> q_doc_ids;   // (T,) and
  std::span<const int64_t> k_doc_ids;   // (S,) per-token document ids (both or neither)
  // Position ids (int64, >= 0, or pad_position = -1 for a padding slot). Defaults:
  //   k_positions[j] = j, or the index within its document when packed (restart at 0);
  //   q_positions[i] = default_k_positions[S - T + i] (fresh when T == S, continuation after
  //   a cached prefix of S - T otherwise); with T > S, q_positions must be given.
  // Given k_positions but no q_positions: q_positions[i] = k_positions[S - T + i].
  std::span<const int64_t> q_positions;  // (T,)
  std::span<const int64_t> k_positions;  // (S,)
  attention_position pos;                // the position schemes
};

// Validates p (throws invalid_argument naming the field and the expected shape, e.g.
// "q_positions must have shape (T,) = (5,), got (4,)"). Called by every entry point below.
template <typename Real>
void attention_validate(const attention_params<Real>& p);

// The dispatcher: attention_tiled, or attention_reference when POSENC_REFERENCE=1.
template <typename Real>
void attention_forward(const attention_params<Real>& p);

// The specification: per (head, query) the full score row in double, masked, max-subtracted
// two-pass softmax in double, outputs rounded once to Real. Slow (allocates an (S,) row).
template <typename Real>
void attention_reference(const attention_params<Real>& p);

// The fast path: tiled online softmax, threads over (kv head, query block). Agrees with the
// reference to the tolerances derived in tests/test_attention.cpp: for double about
// 1e-13 relative to max|v| (+ max|a^V|); for float a few times (D + S) * 2^-24 times the
// score magnitude, relative to max|v|.
template <typename Real>
void attention_tiled(const attention_params<Real>& p);

// True when POSENC_REFERENCE is set to a value other than "" or "0".
bool attention_reference_selected();

// Property checks for `posenc check` (group "attention"); see src/attention/attention_checks.cpp.
std::vector<check_result> attention_checks();

}  // namespace posenc
