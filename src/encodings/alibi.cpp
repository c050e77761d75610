// ALiBi slopes and biases (Press, Smith and Lewis, 2022) with the three slope conventions in
// public use, the dense reference bias, its slope gradient, and the property checks.
#include "posenc/encodings/alibi.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"

namespace posenc {

namespace detail {
// Highway row of tables_simd.cpp (dynamic dispatch).
void alibi_row_simd(double slope, int64_t qpos, const int64_t* kpos, int64_t n, bool causal,
                    bool add, float* out);
}  // namespace detail

namespace {

constexpr int64_t max_heads = int64_t{1} << 20;
constexpr int64_t max_abs_position = int64_t{1} << 62;

// 2^(-b*k/n): the k-th term (k = 1..n) of the geometric sequence of Press et al. 2022,
// Section 3 ("the slopes are a geometric sequence that starts at 2^(-8/n) and uses that number
// as its ratio"), generalised to max_bias b as in ggml and HF MPT. The exponent b*k/n is one
// rounded division (b*k is exact for the b used in practice), exp2 adds <= 1 ulp.
double geo_term(double b, int64_t k, int64_t n) {
  return std::exp2(-(b * static_cast<double>(k)) / static_cast<double>(n));
}

void check_positions(std::span<const int64_t> pos, const char* name) {
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] > max_abs_position || pos[i] < -max_abs_position)
      fail("{}[{}] must satisfy |position| <= 2^62, got {}", name, i, pos[i]);
}

void check_slopes(std::span<const double> slopes) {
  if (slopes.empty()) fail("slopes must hold at least one head, got 0");
  for (size_t h = 0; h < slopes.size(); ++h)
    if (!std::isfinite(slopes[h])) fail("slopes[{}] must be finite, got {}", h, slopes[h]);
}

double distance(int64_t qpos, int64_t kpos, bool causal) {
  return -alibi_bias(1.0, qpos, kpos, causal);  // qpos - kpos, or its absolute value
}

}  // namespace

const char* alibi_convention_name(alibi_convention c) {
  switch (c) {
    case alibi_convention::press:
      return "press";
    case alibi_convention::mpt:
      return "mpt";
    case alibi_convention::geometric:
      return "geometric";
  }
  return "press";
}

alibi_convention alibi_convention_from_name(const std::string& name, const char* arg) {
  if (name == "press") return alibi_convention::press;
  if (name == "mpt") return alibi_convention::mpt;
  if (name == "geometric") return alibi_convention::geometric;
  fail("{} must be one of press, mpt, geometric, got '{}'", arg, name);
}

std::vector<double> alibi_slopes(int64_t heads, double max_bias, alibi_convention c) {
  if (heads < 1 || heads > max_heads) fail("heads must be in [1, 2^20], got {}", heads);
  if (!std::isfinite(max_bias) || !(max_bias > 0))
    fail("max_bias must be finite and > 0, got {}", max_bias);
  std::vector<double> m(static_cast<size_t>(heads));
  int64_t floor_pow2 = 1;
  while (floor_pow2 * 2 <= heads) floor_pow2 *= 2;
  switch (c) {
    case alibi_convention::press: {
      // Press et al. reference get_slopes: geo(P) ++ geo(2P)[0::2][:H-P], P = 2^floor(log2 H).
      // geo(2P)[0::2] are the odd terms k = 1, 3, 5, ... of the finer sequence, which fall
      // between consecutive slopes of geo(P) (the "interleaved completion").
      for (int64_t h = 0; h < heads; ++h)
        m[h] = h < floor_pow2 ? geo_term(max_bias, h + 1, floor_pow2)
                              : geo_term(max_bias, 2 * (h - floor_pow2) + 1, 2 * floor_pow2);
      break;
    }
    case alibi_convention::mpt: {
      // HF MPT build_mpt_alibi_tensor: P = 2^ceil(log2 H); s_k = 2^(-k*b/P), k = 1..P;
      // slopes = concat(s[1::2], s[::2])[:H] (0-based) when P != H.
      const int64_t p = floor_pow2 == heads ? heads : 2 * floor_pow2;
      if (p == heads) {
        for (int64_t h = 0; h < heads; ++h) m[h] = geo_term(max_bias, h + 1, p);
      } else {
        int64_t h = 0;
        for (int64_t idx = 1; idx < p && h < heads; idx += 2)
          m[h++] = geo_term(max_bias, idx + 1, p);
        for (int64_t idx = 0; idx < p && h < heads; idx += 2)
          m[h++] = geo_term(max_bias, idx + 1, p);
      }
      break;
    }
    case alibi_convention::geometric:
      for (int64_t h = 0; h < heads; ++h) m[h] = geo_term(max_bias, h + 1, heads);
      break;
  }
  return m;
}

namespace {

template <typename Out>
void alibi_dense(std::span<const double> slopes, std::span<const int64_t> qpos,
                 std::span<const int64_t> kpos, bool causal, Out* bias) {
  check_slopes(slopes);
  check_positions(qpos, "qpos");
  check_positions(kpos, "kpos");
  const size_t T = qpos.size(), S = kpos.size();
  // bias: (H, T, S), S contiguous
  for (size_t h = 0; h < slopes.size(); ++h)
    for (size_t i = 0; i < T; ++i) {
      Out* row = bias + (h * T + i) * S;
      for (size_t j = 0; j < S; ++j)
        row[j] = static_cast<Out>(alibi_bias(slopes[h], qpos[i], kpos[j], causal));
    }
}

}  // namespace

void alibi_bias_dense(std::span<const double> slopes, std::span<const int64_t> qpos,
                      std::span<const int64_t> kpos, bool causal, float* bias) {
  alibi_dense(slopes, qpos, kpos, causal, bias);
}

void alibi_bias_dense(std::span<const double> slopes, std::span<const int64_t> qpos,
                      std::span<const int64_t> kpos, bool causal, double* bias) {
  alibi_dense(slopes, qpos, kpos, causal, bias);
}

// Forward (alibi_bias_dense): row[j] = alibi_bias(slopes[h], qpos[i], kpos[j], causal),
// i.e. bias = -slope * dist, so d bias / d slope = -dist.
void alibi_bias_row(double slope, int64_t qpos, const int64_t* kpos, int64_t n, bool causal,
                    float* out, bool add) {
  if (n > 0) detail::alibi_row_simd(slope, qpos, kpos, n, causal, add, out);
}

void alibi_bias_backward(std::span<const double> slopes, std::span<const int64_t> qpos,
                         std::span<const int64_t> kpos, bool causal, const float* grad_bias,
                         double* grad_slopes) {
  check_slopes(slopes);
  check_positions(qpos, "qpos");
  check_positions(kpos, "kpos");
  const size_t T = qpos.size(), S = kpos.size();
  for (size_t h = 0; h < slopes.size(); ++h) {
    double acc = 0;
    for (size_t i = 0; i < T; ++i) {
      const float* g = grad_bias + (h * T + i) * S;
      for (size_t j = 0; j < S; ++j)
        acc -= static_cast<double>(g[j]) * distance(qpos[i], kpos[j], causal);
    }
    grad_slopes[h] += acc;
  }
}

}  // namespace posenc
