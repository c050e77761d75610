// src/attention/engine_terms.hpp (private): the engine's hook points as interfaces. The kernels
// (attention.cpp, attention_simd.cpp, attention_reference.cpp, attention_backward.cpp,
// kv_cache.cpp) see a position scheme only through these; each scheme implements the ones it
// needs in its own src/attention/hook_<scheme>.cpp, which also translates its member of the
// public attention_position (and its gradient outputs in attention_grads) into them. The
// registry (position_hook.cpp) asks every hook file for its terms.
//
//   hook 1   qk_transform      q' = A_q(qpos) q, k' = A_k(kpos) k, linear per position
//   hook 2a  relative_vectors  s_ij += scale q'_i . a^K_c(i,j)
//   hook 2b  score_bias        s_ij += bias_h(qpos_i, kpos_j)    (after the scale)
//   hook 3   relative_vectors  o_i  += sum_j p_ij a^V_c(i,j)
//
// where c(i, j) is an index into a (C, D) table that depends on the two positions only. Each
// interface has a plain per-pair member in double (the specification, used by the reference
// forward and backward) and per-row members for the fast paths, with defaults written from
// the per-pair member; a scheme overrides a row member only with something exact against it
// (a lookup table where the bucket is constant, a vectorised row that rounds once).
//
// Gradients: a term's parameter gradient accumulates in double in a buffer the engine owns
// (grad_size() entries per kv-head work item, summed in head order: the bits do not depend on
// the thread count), then store_grad rounds it into the caller's buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "named_schemes.hpp"
#include "posenc/attention/attention.hpp"

namespace posenc::detail {

struct attention_plan;

// Hook 1. Positions are >= 0 (pads are passed as 0: their rows are masked anyway).
class qk_transform {
 public:
  virtual ~qk_transform() = default;
  // x (n, H, D), D contiguous, in place: x_t <- A(pos_t) x_t, or A(pos_t)^T x_t with transpose
  // (the backward: dq = A_q^T dq'); A = A_k for keys (key = true), else A_q. double arrays for
  // the double reference of a float call.
  virtual void apply(std::span<const int64_t> pos, float* x, int64_t n, int64_t H, int64_t D,
                     bool key, bool transpose) const = 0;
  virtual void apply(std::span<const int64_t> pos, double* x, int64_t n, int64_t H, int64_t D,
                     bool key, bool transpose) const = 0;
  bool keys_transformed = false;  // k arrives already transformed (a KV cache): only q is mapped,
                                  // and dk is with respect to the given k

  // The engine calls apply() on the whole of q (n = T, pos = the call's query positions) or of k
  // (n = S), never on a part. A transform with more than one id per token (M-RoPE: temporal,
  // height, width) holds the ids of the call's q and k itself and maps row t at token t's ids,
  // ignoring pos. A KV cache, which transforms its keys as they are appended, gets a transform
  // for n new keys at ids (ids_per_token(), n) row-major from with_key_ids.
  virtual int64_t ids_per_token() const { return 1; }
  virtual std::unique_ptr<qk_transform> with_key_ids(std::span<const int64_t> ids,
                                                     int64_t n) const {
    (void)ids, (void)n;
    return nullptr;
  }

  // Row form, optional (row_table_size() == 0: none). The float32 fast path then applies the
  // forward transform inside its tiles, to the rows it loads, instead of to copies of q and k:
  // fill_row_table writes row_table_size() floats for one token (once per token and call):
  // token t of q (key false) or k (key true) at the call's 1-D position pos, which a transform
  // with its own ids (M-RoPE) ignores, reading its ids of token t instead; apply_rows maps H
  // rows of one token (row h at x + h * stride) in place with it. The two together must give
  // the bits apply() gives for that row.
  virtual int64_t row_table_size() const { return 0; }
  virtual void fill_row_table(int64_t token, int64_t pos, bool key, float* table) const {
    (void)token, (void)pos, (void)key, (void)table;
  }
  virtual void apply_rows(const float* table, bool key, float* x, int64_t H, int64_t stride) const {
    (void)table, (void)key, (void)x, (void)H, (void)stride;
  }
};

// Hook 2b: a bias per (query head, query position, key position).
template <typename Real>
class score_bias {
 public:
  virtual ~score_bias() = default;
  // The specification: bias_h(qp, kp) in double.
  virtual double value(int64_t h, int64_t qp, int64_t kp) const = 0;
  // row[j] += Real(value(h, qp, kpos[j])) for j in [0, n). contiguous: kpos[j] = kpos[0] + j.
  virtual void add_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, bool contiguous,
                       Real* row) const {
    (void)contiguous;
    for (int64_t j = 0; j < n; ++j) row[j] += static_cast<Real>(value(h, qp, kpos[j]));
  }
  // Parameter gradient: grad_size() doubles (0 = none wanted); add_grad adds ds * d bias /
  // d params for one pair, grad_row for a row of dS (ds[j] = 0 on masked keys).
  virtual int64_t grad_size() const { return 0; }
  virtual void add_grad(int64_t h, int64_t qp, int64_t kp, double ds, double* grad) const {
    (void)h, (void)qp, (void)kp, (void)ds, (void)grad;
  }
  virtual void grad_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, const Real* ds,
                        double* grad) const {
    for (int64_t j = 0; j < n; ++j)
      if (ds[j] != Real(0)) add_grad(h, qp, kpos[j], double(ds[j]), grad);
  }
  // Rounds the summed gradient into the caller's buffer.
  virtual void store_grad(const double* grad) const { (void)grad; }
  // false: qp and kpos above are the tokens' positions. true: they are token indices instead,
  // query i being token S - T + i of the key sequence and key j token j (a bias of values the
  // tokens carry, Forgetting Attention's gates, rather than of where they sit); contiguous is
  // then always true. The kernels read it through attention_plan.hpp's bias_* helpers.
  bool by_token = false;
};

// Hooks 2a and 3: tables a^K, a^V (C, D) in the element type of the call, shared by all heads,
// row index(qp, kp) for a pair.
template <typename Real>
class relative_vectors {
 public:
  virtual ~relative_vectors() = default;
  virtual int64_t index(int64_t qp, int64_t kp) const = 0;
  virtual void index_row(int64_t qp, const int64_t* kpos, int64_t n, int64_t* c) const {
    for (int64_t j = 0; j < n; ++j) c[j] = index(qp, kpos[j]);
  }
  int64_t C = 0;                 // rows of each table
  const Real* keys = nullptr;    // a^K (C, D)
  const Real* values = nullptr;  // a^V (C, D)
  Real* dkeys = nullptr;         // gradient outputs (C, D); null = not wanted
  Real* dvalues = nullptr;
};

// The terms of one call. Any combination is allowed except two q/k transforms or two pairs of
// relative tables.
template <typename Real>
struct engine_terms {
  std::unique_ptr<qk_transform> transform;                // hook 1; null = identity
  std::vector<std::unique_ptr<score_bias<Real>>> biases;  // hook 2b; summed in this order
  std::unique_ptr<relative_vectors<Real>> relative;       // hooks 2a and 3; null = off
  // A scheme that places RoPE per pair (named_schemes.hpp: Self-Extend, DCA), with its
  // arguments; transform is then the call's RoPE, and the engine runs rope_pairs_forward /
  // rope_pairs_backward instead of its kernels. null = off.
  const named_pairs* pairs = nullptr;
  const char* pairs_name = nullptr;
  std::vector<double> pairs_args;
  bool any_bias_grad() const {
    for (const auto& b : biases)
      if (b->grad_size() > 0) return true;
    return false;
  }
};

// Validates p.pos against the shapes of p (errors name the field and the expected shape) and
// builds the terms. g: the backward's gradient outputs (null for a forward); a parameter
// gradient requested for a scheme that is off is an error.
// CoPE's positions p_ij (unclamped) of head h, (T, S), 0 on masked pairs, for checks and
// inspection (hook_cope.cpp: its own path; CoPE must be on in p).
template <typename Real>
std::vector<double> cope_positions(const attention_params<Real>& p, int64_t h);

// The path of a scheme that places RoPE per pair (attention_rope_pairs.cpp), forward and
// backward, the fast one (rotations once per token and region, scores in double) or, with
// reference, the specification (every pair's q and k rotated at the pair's positions, in double).
template <typename Real>
void rope_pairs_forward(const attention_params<Real>& p, const attention_plan& pl,
                        const engine_terms<Real>& t, bool reference);
// The sinks' gradients of a backward (attention_backward.cpp): dsinks_h = -sum_i p_i,sink D_i,
// p_i,sink = exp(sink_h - lse_i), D_i = dO_i . O_i, in double over the rows in order; nothing
// when g.dsinks is null.
template <typename Real>
void sink_grads(const attention_params<Real>& p, const attention_grads<Real>& g);
template <typename Real>
void rope_pairs_backward(const attention_params<Real>& p, const attention_plan& pl,
                         const engine_terms<Real>& t, const attention_grads<Real>& g,
                         bool reference);

template <typename Real>
engine_terms<Real> make_engine_terms(const attention_params<Real>& p, const attention_plan& pl,
                                     const attention_grads<Real>* g);

}  // namespace posenc::detail
