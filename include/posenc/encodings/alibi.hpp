// posenc/encodings/alibi.hpp: Attention with Linear Biases (Press, Smith and Lewis, 2022).
//
// ALiBi adds no position vector; it adds a fixed, head-specific linear penalty to every
// scaled attention score (Press et al. 2022, Section 3):
//
//   causal:         score(h, i, j) += -m_h * (qpos_i - kpos_j)
//   bidirectional:  score(h, i, j) += -m_h * |qpos_i - kpos_j|
//
// where qpos/kpos are *position ids* (not token indices), so left padding, packed documents
// and KV-cache continuation need nothing special: give the same ids the model was run with.
// For causal attention the keys with kpos > qpos are masked; their (positive) bias is defined
// by the same formula but never reaches the softmax.
//
// The slopes m_h are a geometric sequence; three conventions are published for H not a power of
// two (see docs/conventions.md and PEERS 9.3). press and mpt are two formulas for the same
// slopes (equal in double for every H); geometric differs unless H is a power of two.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"

namespace posenc {

// Head-slope conventions.
//   press:     Press et al. 2022 reference code, HF Bloom/Falcon, vLLM, ggml, x-transformers.
//              P = 2^floor(log2 H); m = geo(P) ++ geo(2P)[0::2][:H-P], geo(n)_k = 2^(-b*k/n),
//              k = 1..n, b = max_bias. Default.
//   mpt:       HF MPT (alibi_bias_max): P = 2^ceil(log2 H); s_k = 2^(-b*k/P), k = 1..P;
//              m = concat(s[1::2], s[0::2])[:H] when P != H, else s (0-based strides).
//   geometric: m_h = 2^(-b*(h+1)/H), h = 0..H-1 (attention-gym example, old mlx).
enum class alibi_convention { press, mpt, geometric };

// "press", "mpt", "geometric"; alibi_convention_from_name throws invalid_argument naming
// `arg` for anything else.
const char* alibi_convention_name(alibi_convention c);
alibi_convention alibi_convention_from_name(const std::string& name,
                                            const char* arg = "convention");

// Slopes m_0..m_{H-1} in head order, in double. Each is exp2 of a rational exponent computed
// in double: relative error <= 2 ulp against the exact 2^(-b*k/n).
// heads >= 1 (and <= 2^20), max_bias finite and > 0; otherwise invalid_argument.
// With max_bias = 8 and H = 8 this gives 1/2, 1/4, ..., 1/256 (the paper's slopes).
std::vector<double> alibi_slopes(int64_t heads, double max_bias = 8.0,
                                 alibi_convention c = alibi_convention::press);

// The bias added to the scaled score of a query at position id `qpos` and a key at `kpos`:
// -slope*(qpos - kpos) when causal, -slope*|qpos - kpos| otherwise (+0 at distance 0).
// Computed in double with one rounding; the distance converts exactly for |qpos - kpos| <=
// 2^53. Precondition (not checked, this is the inner-loop form): |qpos|, |kpos| <= 2^62, so the
// difference cannot overflow.
inline double alibi_bias(double slope, int64_t qpos, int64_t kpos, bool causal) {
  // Written as slope * (kpos - qpos) and slope * -|qpos - kpos| so that distance 0 gives +0.
  const int64_t d = kpos - qpos;
  return slope * static_cast<double>(causal ? d : (d < 0 ? d : -d));
}

// Dense reference forward: bias[h, i, j] = alibi_bias(slopes[h], qpos[i], kpos[j], causal),
// rounded once to float.
//   bias: (H, T, S), S contiguous, H = slopes.size(), T = qpos.size(), S = kpos.size().
// Throws invalid_argument for empty slopes, non-finite slopes, or |position| > 2^62.
void alibi_bias_dense(std::span<const double> slopes, std::span<const int64_t> qpos,
                      std::span<const int64_t> kpos, bool causal, float* bias);
// The same in float64 (alibi_bias itself, one rounding in double): a float64 computation stays
// float64 end to end.
void alibi_bias_dense(std::span<const double> slopes, std::span<const int64_t> qpos,
                      std::span<const int64_t> kpos, bool causal, double* bias);

// One row of biases for a tiled attention kernel (Highway, src/encodings/tables_simd.cpp):
//   add = false: out[j]  = float(alibi_bias(slope, qpos, kpos[j], causal))
//   add = true:  out[j] += float(alibi_bias(slope, qpos, kpos[j], causal))   (into a score row)
// for j < n. kpos: (n,) key position ids (any order: padding, packing, KV continuation);
// out: (n,). Bit-identical to the scalar formula rounded to float (the distance converts to
// double exactly for |qpos - kpos| <= 2^53 and the product rounds once in double). The inner-
// loop form: no validation and no allocation; the caller guarantees |qpos|, |kpos[j]| <= 2^62
// (as for alibi_bias) and that kpos and out hold n elements.
void alibi_bias_row(double slope, int64_t qpos, const int64_t* kpos, int64_t n, bool causal,
                    float* out, bool add = false);

// Backward of alibi_bias_dense with respect to the slopes (learnable-slope variants):
// forward `bias[h,i,j] = -slopes[h] * dist(i, j)` gives
//   grad_slopes[h] += sum_{i,j} grad_bias[h,i,j] * -dist(i, j)     (double accumulation)
//   grad_bias: (H, T, S); grad_slopes: (H), accumulated (caller zeroes).
void alibi_bias_backward(std::span<const double> slopes, std::span<const int64_t> qpos,
                         std::span<const int64_t> kpos, bool causal, const float* grad_bias,
                         double* grad_slopes);

}  // namespace posenc
