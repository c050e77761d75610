// posenc/encodings/t5_bias.hpp: T5 relative position buckets and the learned per-head bias
// table (Raffel et al. 2020, Section 2.1; reference: mesh-tensorflow
// `_relative_position_bucket`, identical in HF transformers `T5Attention`).
//
// Sign convention: relative_position = kpos - qpos (memory position minus query position),
// so a key in the past has a negative offset.
//
// Bucketing of an offset r (N = num_buckets, M = max_distance):
//   bidirectional: N' = N/2; base = (r > 0) ? N' : 0; n = |r|
//   causal:        N' = N;   base = 0;                n = max(-r, 0)   (future keys -> bucket 0)
//   E = N'/2 (max_exact)
//   bucket = base + n                                           if n < E
//          = base + min(E + trunc(log(n/E) / log(M/E) * (N'-E)), N'-1)   otherwise
// The logarithmic branch is evaluated in IEEE float32 exactly as the reference does
// (n converted to float, log of float(n)/E, divided by float(log(M/E)), times N'-E, each step
// rounded to float), so bucket boundaries such as n = 16, 32, 64 for (32, 128) agree with T5.
// Every float step is computed in double and rounded once, which makes the result independent
// of the platform's logf. n = 0 never reaches the logarithm.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "posenc/core/check.hpp"

namespace posenc {

struct t5_params {
  int64_t num_buckets = 32;    // N: total buckets (both signs together when bidirectional)
  int64_t max_distance = 128;  // M: offsets with |r| >= M share the last bucket of their sign
  bool bidirectional = true;   // false: decoder self-attention (only past keys distinguished)
};

// Throws invalid_argument naming the field: num_buckets must be >= 2 (causal) or even and
// >= 4 (bidirectional, so each sign has max_exact >= 1); max_distance must be > max_exact
// (the log's denominator log(M/E) must be positive); both <= 2^30.
void t5_validate(const t5_params& p);

// Bucket of offset r = kpos - qpos; result in [0, num_buckets). Validates its parameters
// (cheap integer compares) and throws invalid_argument like t5_validate. Defined for every
// int64 r, including INT64_MIN.
int64_t t5_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets = 32,
                  int64_t max_distance = 128);
int64_t t5_bucket(int64_t relative_position, const t5_params& p);

// The learned relative attention bias: HF stores nn.Embedding(num_buckets, n_heads), so the
// table is row-major (num_buckets, H): weights[b * H + h].
// bias(h, i, j) = weights[t5_bucket(kpos_j - qpos_i) * H + h].
struct t5_bias_table {
  t5_params params;
  int64_t heads = 0;           // H
  std::vector<float> weights;  // (num_buckets, H), H contiguous
};

// Table with weights ~ N(0, stddev^2) from posenc::rng(seed) in row-major order.
// heads in [1, 2^20]; stddev finite and >= 0.
t5_bias_table t5_init(const t5_params& p, int64_t heads, uint64_t seed, double stddev);

// Throws invalid_argument unless the table's params are valid, heads >= 1 and
// weights.size() == num_buckets * heads.
void t5_validate(const t5_bias_table& t);

// Dense reference forward: bias[h, i, j] = weights[bucket(kpos[j] - qpos[i]) * H + h].
//   qpos: (T), kpos: (S), bias: (H, T, S), S contiguous. Exact copy of table entries.
// Positions must satisfy |pos| <= 2^62 (checked) so offsets cannot overflow.
void t5_bias_dense(const t5_bias_table& t, std::span<const int64_t> qpos,
                   std::span<const int64_t> kpos, float* bias);

// Vectorised bucket and bias rows for a tiled attention kernel (Highway,
// src/encodings/tables_simd.cpp). The logarithmic branch is replaced by thresholds: for
// n = |r| (or max(-r, 0) causal) >= E the bucket offset is E + #{k : n > gt[k]}, where
// gt[k] + 1 is the smallest n whose offset (t5_bucket's own float32 arithmetic) reaches
// E + 1 + k. The offset is non-decreasing in n (float(n), the division, logf rounded to float,
// the product and trunc are all monotone), so the count equals t5_bucket exactly, for every n.
struct t5_row_plan {
  t5_params params;
  int64_t half_buckets = 0;  // N' (num_buckets / 2 when bidirectional, else num_buckets)
  int64_t max_exact = 0;     // E = N' / 2
  std::vector<int64_t> gt;   // (N' - E - 1,): thresholds minus one (INT64_MAX if never reached)
};
// Validates p (like t5_validate) and finds each threshold by binary search over
// n in [E, 2^62] with t5_bucket (about 62 (N' - E) calls: build once per table, not per row).
t5_row_plan t5_plan_rows(const t5_params& p);
// bucket[j] = t5_bucket(kpos[j] - qpos, plan.params), j < n. kpos: (n,), bucket: (n,).
// No validation, no allocation; |qpos|, |kpos[j]| <= 2^62 (as for t5_bias_dense).
void t5_bucket_row(const t5_row_plan& plan, int64_t qpos, const int64_t* kpos, int64_t n,
                   int32_t* bucket);
// out[j] = weights[bucket_j * H + head] (add = false) or out[j] += it (add = true), j < n: an
// exact copy of table entries, equal to t5_bias_dense's row (h, i). plan must be
// t5_plan_rows(t.params) and 0 <= head < t.heads (not checked: inner-loop form; buckets are
// computed through a 256-entry stack buffer, no allocation).
void t5_bias_row(const t5_bias_table& t, const t5_row_plan& plan, int64_t head, int64_t qpos,
                 const int64_t* kpos, int64_t n, float* out, bool add = false);

// Backward of t5_bias_dense: forward `bias[h,i,j] = weights[bucket(i,j) * H + h]` gives
//   grad_table[b * H + h] += sum_{(i,j): bucket(i,j) = b} grad_bias[h, i, j]
// summed in double per bucket, then added to grad_table once (rounded to float once).
//   grad_bias: (H, T, S); grad_table: (num_buckets, H), accumulated (caller zeroes).
void t5_bias_backward(const t5_bias_table& t, std::span<const int64_t> qpos,
                      std::span<const int64_t> kpos, const float* grad_bias, float* grad_table);

}  // namespace posenc
