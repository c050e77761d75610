// T5 relative position buckets (Raffel et al. 2020, Section 2.1; mesh-tensorflow and HF
// `_relative_position_bucket`), the learned (num_buckets, H) bias table, its dense reference
// forward and backward, and the property checks.
#include "posenc/encodings/t5_bias.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"

namespace posenc {

namespace detail {
// Highway row of tables_simd.cpp (dynamic dispatch).
void t5_bucket_row_simd(int64_t half_buckets, int64_t exact, bool bidirectional, const int64_t* gt,
                        int64_t ngt, int64_t qpos, const int64_t* kpos, int64_t n, int32_t* bucket);
}  // namespace detail

namespace {

constexpr int64_t max_buckets = int64_t{1} << 20;
constexpr int64_t max_dist = int64_t{1} << 30;
constexpr int64_t max_heads = int64_t{1} << 20;
constexpr int64_t max_abs_position = int64_t{1} << 62;

// Round to IEEE binary32. Every float32 step of the reference is computed here as one exact or
// double-precision operation followed by this rounding, which equals the correctly rounded
// float32 result (for + - * / the double result rounded to float is correctly rounded since
// 53 >= 2*24 + 2; for log the double result is within 1 ulp of double, so the float rounding
// differs from the correctly rounded float log only in the rare case the value lies within
// 2^-29 relative of a float midpoint).
float f32(double x) {
  return static_cast<float>(x);
}

// The bucket, parameters already validated. See the header for the formula.
int64_t bucket_unchecked(int64_t r, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t base = 0;
  uint64_t n;  // |r| or max(-r, 0), as unsigned so INT64_MIN is defined
  const uint64_t abs_r = r < 0 ? uint64_t{0} - static_cast<uint64_t>(r) : static_cast<uint64_t>(r);
  if (bidirectional) {
    num_buckets /= 2;  // N': buckets per sign
    if (r > 0) base = num_buckets;
    n = abs_r;
  } else {
    n = r < 0 ? abs_r : 0;  // future keys share bucket 0 with the query's own position
  }
  const int64_t max_exact = num_buckets / 2;  // E
  if (n < static_cast<uint64_t>(max_exact)) return base + static_cast<int64_t>(n);
  // Reference (float32): max_exact + int(log(float(n) / max_exact) / log(M / E) * (N' - E)).
  // n >= E >= 1 here, so the log's argument is >= 1 and never log(0).
  const float nf = static_cast<float>(n);  // .float(): round to nearest
  const float ratio = f32(static_cast<double>(nf) / static_cast<double>(max_exact));
  const float lg = f32(std::log(static_cast<double>(ratio)));  // >= 0
  // math.log(max_distance / max_exact) is a Python double, used as a float32 scalar.
  const float den =
      f32(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float quot = f32(static_cast<double>(lg) / static_cast<double>(den));
  const float val = f32(static_cast<double>(quot) * static_cast<double>(num_buckets - max_exact));
  // min(E + trunc(val), N' - 1), compared before converting so a huge val cannot overflow.
  const int64_t last = num_buckets - 1;
  if (static_cast<double>(val) >= static_cast<double>(last - max_exact)) return base + last;
  return base + max_exact + static_cast<int64_t>(val);
}

void check_positions(std::span<const int64_t> pos, const char* name) {
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] > max_abs_position || pos[i] < -max_abs_position)
      fail("{}[{}] must satisfy |position| <= 2^62, got {}", name, i, pos[i]);
}

}  // namespace

void t5_validate(const t5_params& p) {
  if (p.bidirectional) {
    if (p.num_buckets < 4 || p.num_buckets % 2 != 0 || p.num_buckets > max_buckets)
      fail(
          "num_buckets must be even and in [4, 2^20] for bidirectional buckets (half per sign, "
          "each with max_exact >= 1), got {}",
          p.num_buckets);
  } else if (p.num_buckets < 2 || p.num_buckets > max_buckets) {
    fail("num_buckets must be in [2, 2^20] for causal buckets, got {}", p.num_buckets);
  }
  const int64_t max_exact = (p.bidirectional ? p.num_buckets / 2 : p.num_buckets) / 2;
  if (p.max_distance <= max_exact || p.max_distance > max_dist)
    fail("max_distance must be > max_exact = {} (num_buckets {}, {}) and <= 2^30, got {}",
         max_exact, p.num_buckets, p.bidirectional ? "bidirectional" : "causal", p.max_distance);
}

int64_t t5_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                  int64_t max_distance) {
  t5_validate(t5_params{num_buckets, max_distance, bidirectional});
  return bucket_unchecked(relative_position, bidirectional, num_buckets, max_distance);
}

int64_t t5_bucket(int64_t relative_position, const t5_params& p) {
  return t5_bucket(relative_position, p.bidirectional, p.num_buckets, p.max_distance);
}

void t5_validate(const t5_bias_table& t) {
  t5_validate(t.params);
  if (t.heads < 1 || t.heads > max_heads) fail("heads must be in [1, 2^20], got {}", t.heads);
  const auto want = static_cast<size_t>(t.params.num_buckets * t.heads);
  if (t.weights.size() != want)
    fail("weights must have shape (num_buckets, H) = ({}, {}), i.e. {} values, got {}",
         t.params.num_buckets, t.heads, want, t.weights.size());
}

t5_bias_table t5_init(const t5_params& p, int64_t heads, uint64_t seed, double stddev) {
  t5_validate(p);
  if (heads < 1 || heads > max_heads) fail("heads must be in [1, 2^20], got {}", heads);
  if (!std::isfinite(stddev) || stddev < 0) fail("stddev must be finite and >= 0, got {}", stddev);
  checked_bytes("t5 bias table", static_cast<unsigned long long>(p.num_buckets),
                static_cast<unsigned long long>(heads), 1, sizeof(float));
  t5_bias_table t{p, heads, std::vector<float>(static_cast<size_t>(p.num_buckets * heads))};
  rng r(seed);
  for (auto& w : t.weights) w = static_cast<float>(stddev * r.normal());
  return t;
}

void t5_bias_dense(const t5_bias_table& t, std::span<const int64_t> qpos,
                   std::span<const int64_t> kpos, float* bias) {
  t5_validate(t);
  check_positions(qpos, "qpos");
  check_positions(kpos, "kpos");
  const auto& p = t.params;
  const size_t T = qpos.size(), S = kpos.size(), H = static_cast<size_t>(t.heads);
  // bias: (H, T, S), S contiguous; the bucket is computed once per (i, j), reused by heads.
  for (size_t i = 0; i < T; ++i)
    for (size_t j = 0; j < S; ++j) {
      const auto b = static_cast<size_t>(
          bucket_unchecked(kpos[j] - qpos[i], p.bidirectional, p.num_buckets, p.max_distance));
      const float* w = t.weights.data() + b * H;  // row b of (num_buckets, H)
      for (size_t h = 0; h < H; ++h) bias[(h * T + i) * S + j] = w[h];
    }
}

// Forward (t5_bias_dense): bias[(h * T + i) * S + j] = w[h] with w = row bucket(i, j), so each
// table entry receives the sum of the gradients of the scores that copied it.
t5_row_plan t5_plan_rows(const t5_params& p) {
  t5_validate(p);
  t5_row_plan plan;
  plan.params = p;
  plan.half_buckets = p.bidirectional ? p.num_buckets / 2 : p.num_buckets;
  plan.max_exact = plan.half_buckets / 2;
  const int64_t E = plan.max_exact, Nh = plan.half_buckets;
  // Offset within one sign: the causal bucket of -n with N' buckets is exactly the
  // bidirectional per-sign offset (same E, same logarithmic branch).
  auto offset = [&](int64_t n) { return bucket_unchecked(-n, false, Nh, p.max_distance); };
  for (int64_t target = E + 1; target <= Nh - 1; ++target) {
    int64_t lo = E, hi = max_abs_position;  // offset(lo) < target; search (lo, hi]
    if (offset(hi) < target) {
      plan.gt.push_back(std::numeric_limits<int64_t>::max());
      continue;
    }
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (offset(mid) >= target ? hi : lo) = mid;
    }
    plan.gt.push_back(hi - 1);
  }
  return plan;
}

void t5_bucket_row(const t5_row_plan& plan, int64_t qpos, const int64_t* kpos, int64_t n,
                   int32_t* bucket) {
  if (n <= 0) return;
  detail::t5_bucket_row_simd(plan.half_buckets, plan.max_exact, plan.params.bidirectional,
                             plan.gt.data(), static_cast<int64_t>(plan.gt.size()), qpos, kpos, n,
                             bucket);
}

void t5_bias_row(const t5_bias_table& t, const t5_row_plan& plan, int64_t head, int64_t qpos,
                 const int64_t* kpos, int64_t n, float* out, bool add) {
  constexpr int64_t kChunk = 256;
  int32_t b[kChunk];
  const float* w = t.weights.data() + head;  // weights: (num_buckets, H), column `head`
  const int64_t H = t.heads;
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t m = std::min(kChunk, n - j0);
    t5_bucket_row(plan, qpos, kpos + j0, m, b);
    if (b[0] == b[m - 1] && std::all_of(b + 1, b + m, [&](int32_t x) { return x == b[0]; })) {
      const float c =
          w[b[0] * H];  // one bucket (a saturated chunk): a fill the compiler vectorises
      if (add)
        for (int64_t j = 0; j < m; ++j) out[j0 + j] += c;
      else
        std::fill(out + j0, out + j0 + m, c);
      continue;
    }
    if (add) {
      for (int64_t j = 0; j < m; ++j) out[j0 + j] += w[b[j] * H];
    } else {
      for (int64_t j = 0; j < m; ++j) out[j0 + j] = w[b[j] * H];
    }
  }
}

void t5_bias_backward(const t5_bias_table& t, std::span<const int64_t> qpos,
                      std::span<const int64_t> kpos, const float* grad_bias, float* grad_table) {
  t5_validate(t);
  check_positions(qpos, "qpos");
  check_positions(kpos, "kpos");
  const auto& p = t.params;
  const size_t T = qpos.size(), S = kpos.size(), H = static_cast<size_t>(t.heads);
  std::vector<double> acc(t.weights.size(), 0.0);  // (num_buckets, H)
  for (size_t i = 0; i < T; ++i)
    for (size_t j = 0; j < S; ++j) {
      const auto b = static_cast<size_t>(
          bucket_unchecked(kpos[j] - qpos[i], p.bidirectional, p.num_buckets, p.max_distance));
      for (size_t h = 0; h < H; ++h) acc[b * H + h] += grad_bias[(h * T + i) * S + j];
    }
  for (size_t e = 0; e < acc.size(); ++e)
    grad_table[e] = static_cast<float>(static_cast<double>(grad_table[e]) + acc[e]);
}

}  // namespace posenc
