// posenc/encodings/shaw.hpp: relative position representations (Shaw, Uszkoreit and
// Vaswani, 2018).
//
// Two learned tables of 2K+1 vectors each, shared by all heads of a layer, indexed by the
// clipped offset of key j from query i (Shaw et al. 2018, eq. 3-5):
//
//   c(i, j) = clip(kpos_j - qpos_i, -K, K) + K                         in [0, 2K]
//   e_ij    = scale * q_i . (k_j + a^K_{c(i,j)})                       (eq. 4, scale = 1/sqrt(D))
//   out_i   = sum_j p_ij (v_j + a^V_{c(i,j)})                          (eq. 3, p = softmax(e))
//
// Offsets beyond K share the edge vectors, so the model generalises to any length (eq. 5).
// Positions are position ids, so padding and packing only need the right ids.
//
// The ops below are the single-head reference (double accumulation), the specification the
// fused attention engine is tested against. They are templated on the element type (float for
// models, double for finite-difference gradient checks; both instantiated in the library).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "posenc/core/check.hpp"

namespace posenc {

// Index of the table row for a (query, key) pair: clip(kpos - qpos, -K, K) + K.
// Precondition (inner-loop form, not checked): clip_k >= 0, |qpos|, |kpos| <= 2^62.
inline int64_t shaw_index(int64_t qpos, int64_t kpos, int64_t clip_k) {
  const int64_t r = kpos - qpos;
  return (r < -clip_k ? -clip_k : (r > clip_k ? clip_k : r)) + clip_k;
}

// a^K (keys) and a^V (values): each (2K+1, D) row-major, row c holds offset c - K.
struct shaw_tables {
  int64_t clip = 0;                 // K >= 0
  int64_t dim = 0;                  // D >= 1
  std::vector<float> keys, values;  // each (2K+1, D), D contiguous
};

// Both tables ~ N(0, stddev^2) from posenc::rng(seed), keys first, row-major.
// clip in [0, 2^30], dim in [1, 2^20], stddev finite and >= 0; else invalid_argument.
shaw_tables shaw_init(int64_t clip, int64_t dim, uint64_t seed, double stddev);

// Throws invalid_argument unless clip, dim are in range and both tables have (2K+1)*D entries.
void shaw_validate(const shaw_tables& t);

// One head's problem: which positions, the clip and the head dim.
struct shaw_problem {
  std::span<const int64_t> qpos;  // (T) query position ids, |pos| <= 2^62
  std::span<const int64_t> kpos;  // (S) key position ids, |pos| <= 2^62
  int64_t clip = 0;               // K >= 0
  int64_t dim = 0;                // D >= 1
};

// Throws invalid_argument naming the offending field (clip, dim, qpos, kpos).
void shaw_validate(const shaw_problem& p);

// Scores with relative keys (eq. 4):
//   scores[i, j] = scale * sum_d q[i, d] * (k[j, d] + a_k[c(i,j), d])
//   q: (T, D), k: (S, D), a_k: (2K+1, D), scores: (T, S); all row-major, last dim contiguous.
// Each dot product is accumulated in double and rounded once to Real.
// Throws invalid_argument for an invalid problem or non-finite scale.
template <typename Real>
void shaw_scores(const shaw_problem& p, const Real* q, const Real* k, const Real* a_k, double scale,
                 Real* scores);

// Backward of shaw_scores. Forward: `scores[i,j] = scale * q_i . (k_j + a_k[c(i,j)])`
//   grad_q[i, d]   += scale * sum_j  grad_scores[i,j] * (k[j,d] + a_k[c(i,j),d])
//   grad_k[j, d]   += scale * sum_i  grad_scores[i,j] * q[i,d]
//   grad_a_k[c, d] += scale * sum_{(i,j): c(i,j)=c} grad_scores[i,j] * q[i,d]
// grad_scores: (T, S); grad_q: (T, D); grad_k: (S, D); grad_a_k: (2K+1, D).
// All three gradients are accumulated (caller zeroes); sums in double, added once.
template <typename Real>
void shaw_scores_backward(const shaw_problem& p, const Real* q, const Real* k, const Real* a_k,
                          double scale, const Real* grad_scores, Real* grad_q, Real* grad_k,
                          Real* grad_a_k);

// Output with relative values (eq. 3):
//   out[i, d] = sum_j probs[i, j] * (v[j, d] + a_v[c(i,j), d])
//   probs: (T, S) (any weights; normally softmax rows), v: (S, D), a_v: (2K+1, D), out: (T, D).
template <typename Real>
void shaw_values(const shaw_problem& p, const Real* probs, const Real* v, const Real* a_v,
                 Real* out);

// Backward of shaw_values. Forward: `out[i,d] = sum_j probs[i,j] * (v[j,d] + a_v[c(i,j),d])`
//   grad_probs[i, j] += sum_d grad_out[i,d] * (v[j,d] + a_v[c(i,j),d])
//   grad_v[j, d]     += sum_i probs[i,j] * grad_out[i,d]
//   grad_a_v[c, d]   += sum_{(i,j): c(i,j)=c} probs[i,j] * grad_out[i,d]
// grad_out: (T, D); grad_probs: (T, S); grad_v: (S, D); grad_a_v: (2K+1, D); accumulated.
template <typename Real>
void shaw_values_backward(const shaw_problem& p, const Real* probs, const Real* v, const Real* a_v,
                          const Real* grad_out, Real* grad_probs, Real* grad_v, Real* grad_a_v);

}  // namespace posenc
