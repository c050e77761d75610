// src/attention/attention_plan.hpp (private): what both attention implementations derive from
// attention_params at the API boundary. Built once per call by make_attention_plan, which also
// validates; the kernels only read it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine_terms.hpp"
#include "posenc/attention/attention.hpp"

namespace posenc::detail {

struct attention_plan {
  double scale = 1;
  int64_t group = 1;                // Hq / Hkv: q head h reads kv head h / group
  std::vector<int64_t> qpos;        // (T,) resolved position ids (pad_position for pad queries)
  std::vector<int64_t> kpos;        // (S,) resolved position ids (pad_position for pad keys)
  std::vector<int64_t> qpos_safe;   // (T,) qpos with pads replaced by 0, for hook 1 (the rows
  std::vector<int64_t> kpos_safe;   // (S,) are masked anyway; a transform wants positions >= 0)
  std::vector<int64_t> qdoc, kdoc;  // (T,), (S,) document ids; empty = one document
  std::vector<uint8_t> qvalid;      // (T,) 0 = pad query: sees nothing
  std::vector<uint8_t> kvalid;      // (S,) 0 = pad key (key_padding or pad position)
  std::vector<int64_t> ktok;        // (S,) 0, 1, ..., S - 1 when a scheme is reached by name
                                    // (a by_token bias reads it); else empty
};

// A bias's coordinates for query i and keys from j on: the positions, or for a by_token bias
// (score_bias::by_token) the token indices (query i is token S - T + i, key j token j).
// contiguous: the keys' coordinates are j, j + 1, ... (pl.kpos[j] == j for every key, or tokens).
struct bias_coords {
  int64_t q;
  const int64_t* k;
  bool contiguous;
};
template <typename Real>
inline bias_coords coords_of(const score_bias<Real>& b, const attention_plan& pl, bool contiguous,
                             int64_t i, int64_t j) {
  if (b.by_token)
    return {static_cast<int64_t>(pl.kpos.size() - pl.qpos.size()) + i, pl.ktok.data() + j, true};
  return {pl.qpos[i], pl.kpos.data() + j, contiguous};
}
template <typename Real>
inline void bias_add_row(const score_bias<Real>& b, const attention_plan& pl, bool contiguous,
                         int64_t h, int64_t i, int64_t j, int64_t n, Real* row) {
  const bias_coords c = coords_of(b, pl, contiguous, i, j);
  b.add_row(h, c.q, c.k, n, c.contiguous, row);
}
template <typename Real>
inline void bias_grad_row(const score_bias<Real>& b, const attention_plan& pl, int64_t h, int64_t i,
                          int64_t j, int64_t n, const Real* ds, double* grad) {
  const bias_coords c = coords_of(b, pl, false, i, j);
  b.grad_row(h, c.q, c.k, n, ds, grad);
}
template <typename Real>
inline double bias_value(const score_bias<Real>& b, const attention_plan& pl, int64_t h, int64_t i,
                         int64_t j) {
  const bias_coords c = coords_of(b, pl, false, i, j);
  return b.value(h, c.q, c.k[0]);
}
template <typename Real>
inline void bias_add_grad(const score_bias<Real>& b, const attention_plan& pl, int64_t h, int64_t i,
                          int64_t j, double ds, double* grad) {
  const bias_coords c = coords_of(b, pl, false, i, j);
  b.add_grad(h, c.q, c.k[0], ds, grad);
}

// Validates p (everything but the position schemes, which make_engine_terms validates) and
// resolves defaults (see attention.hpp for the rules).
template <typename Real>
attention_plan make_attention_plan(const attention_params<Real>& p);

// Query i may see key j (token-index masks, documents, padding). Shared by both paths so the
// mask semantics are written once; the tiled path additionally skips whole key blocks that
// the causal and window rules exclude (a pure optimisation: this predicate stays exact).
inline bool attention_visible(const attention_plan& pl, bool causal, int64_t window, int64_t T,
                              int64_t S, int64_t i, int64_t j) {
  const int64_t qi = S - T + i;  // the query's token index in the key sequence
  if (!pl.qvalid[i] || !pl.kvalid[j]) return false;
  if (causal && j > qi) return false;
  if (window > 0 && qi - j >= window) return false;
  if (!pl.qdoc.empty() && pl.qdoc[i] != pl.kdoc[j]) return false;
  return true;
}

// The offsets kpos - qpos over valid queries and keys, clamped to [-sat, sat], as a non-empty
// range [lo, hi]. A bias that is constant beyond |offset| >= sat (a bucketed bias past its
// last bucket) can then be tabulated over [lo, hi] and looked up at the clamped offset exactly.
// When every offset lies beyond one end, lo == hi is that end's value. False when no query or
// no key is valid (nothing is visible). Positions are <= 2^62, so the differences cannot overflow.
inline bool visible_offset_range(const attention_plan& pl, int64_t sat, int64_t* lo, int64_t* hi) {
  int64_t qmin = INT64_MAX, qmax = INT64_MIN, kmin = INT64_MAX, kmax = INT64_MIN;
  for (size_t i = 0; i < pl.qpos.size(); ++i)
    if (pl.qvalid[i]) qmin = std::min(qmin, pl.qpos[i]), qmax = std::max(qmax, pl.qpos[i]);
  for (size_t j = 0; j < pl.kpos.size(); ++j)
    if (pl.kvalid[j]) kmin = std::min(kmin, pl.kpos[j]), kmax = std::max(kmax, pl.kpos[j]);
  if (qmin > qmax || kmin > kmax) return false;
  *hi = std::min(kmax - qmin, sat);
  *lo = std::min(std::max(kmin - qmax, -sat), *hi);
  return true;
}

// The float32 SIMD path (src/attention/attention_simd.cpp): Highway micro-kernels for Q K^T and
// P V, every term and mask fused into the tile, hook 1 included (inside the tiles when the
// transform has a row form, else on copies of p.q and p.k). pl from make_attention_plan(p),
// terms from make_engine_terms; runs on at most max_threads threads.
void attention_simd_f32(const attention_params<float>& p, const attention_plan& pl,
                        const engine_terms<float>& terms, int max_threads);

// attention_bf16_native(): vdpbf16ps on this CPU and an AVX-512 target dispatched.
bool attention_bf16_native_impl();

// C(rows x ncols) = beta_r * C + A(rows x K) . B(K x ncols) in float32 through the forward's
// Highway micro-kernel (beta == nullptr: C = A . B). ncols a multiple of 8; A(r, kk) at
// A[r * lda + kk * ak] (ak > 1 reads a matrix transposed), rows of B at stride ldb, of C at ldc.
// Accumulation order per output: kk = 0, 1, ..., K-1 with FMA.
void gemm_f32(int64_t rows, int64_t ncols, const float* A, int64_t lda, const float* B, int64_t ldb,
              float* C, int64_t ldc, int64_t K, const float* beta, int64_t ak = 1);

// The same with B packed in panels of gemm_panel_width() columns, each K x width contiguous (a
// column strip the micro-kernel streams is one run of memory): column c of row kk at
// B[(c / width) * K * width + kk * width + c % width]. The same bits as gemm_f32.
void gemm_f32_panel(int64_t rows, int64_t ncols, const float* A, int64_t lda, const float* B,
                    float* C, int64_t ldc, int64_t K, const float* beta);
int64_t gemm_panel_width();

// The backward's softmax step on a (rows, 64) block of scores s and dP = dO V^T, in place: for
// keys jlo[r] <= jj < jhi[r], s <- P = Exp(s - lse[r]) and dp <- dS = P (dp - Drow[r]); both 0
// on every other key. Exp: the forward's SoftmaxExp (attention_simd.cpp): for t <= 0 within 1.13
// ulp with FMA (1.41 without), exactly 0 for t <= -87, -inf and NaN.
void softmax_backward_block_f32(int64_t rows, float* s, float* dp, const int64_t* jlo,
                                const int64_t* jhi, const float* lse, const float* Drow);

// A softmax row's numerators in place: x[j] <- Exp(x[j] - m) for 0 <= j < n (-inf gives
// exactly 0); returns their sum, accumulated in float32 lanes. Exp as above (x[j] <= m).
float exp_row_f32(float* x, int64_t n, float m);

// row[j] += src[j] for 0 <= j < n, in the dispatched target's float32 vectors: a bias row's slice
// of a per-call table (hook 2b). The same bits as the scalar loop (one rounding per element).
void add_row_f32(float* row, const float* src, int64_t n);

// row[j] += float(c - src[j]) for 0 <= j < n: a difference of two doubles rounded once (a bias
// that is a row term minus a column term, Forgetting Attention's), in the dispatched target's
// vectors; the bits of the scalar loop.
void add_diff_row_f32(float* row, double c, const double* src, int64_t n);

// dst[j] = float(scale * double(src[j])) for 0 <= j < n in the dispatched target's vectors (the
// scalar loop's bits: the product in double, rounded once); returns the largest (-inf for n = 0).
// A row of a per-pair scheme's scores from its region's product (attention_rope_pairs.cpp).
float scale_row_max_f32(float* dst, const float* src, double scale, int64_t n);

// The largest of x[0 .. n) in the dispatched target's float32 vectors (-inf for n = 0): a row's
// softmax maximum (CoPE's tiled path, hook_cope.cpp).
float row_max_f32(const float* x, int64_t n);

// sum_d a[d] b[d] in double for float32 a and b (each product exact, the sum's error at most
// (n + 2) 2^-53 sum_d |a_d b_d|), in the dispatched target's double vectors: CoPE's gates.
double dot_f64(const float* a, const float* b, int64_t n);

// y[j] += a x[j] for 0 <= j < n in double (one fused multiply-add each), in the dispatched
// target's double vectors: CoPE's backward (dq += dZ[t] e_t, de_t += dZ[t] q).
void add_scaled_row_f64(double* y, double a, const float* x, int64_t n);

// FIRE's per-key MLP (hook_fire.cpp) in the dispatched target's double vectors: acc[j] = b2 +
// sum_u w2[u] max(0, w1[u] (psi[j] / pm) + b1[u]), u in order, for 0 <= j < n; w is one head's
// parameters [w1 (m) | b1 (m) | w2 (m) | b2]. The bits of the scalar loop (no fused multiply-add).
void fire_mlp_f64(const double* psi, int64_t n, double pm, const double* w, int64_t m, double* acc);

// row[j] += float(alpha + gamma * p[j]) for 0 <= j < n, in double (no fused multiply-add),
// rounded once: a bias linear in a per-key value (FIRE's MLP between two kinks of its relus), in
// the dispatched target's vectors; the bits of the scalar loop.
void add_linear_row_f32(float* row, double alpha, double gamma, const double* p, int64_t n);

// The same for either precision: float rows through add_row_f32, double rows by the loop.
template <typename Real>
inline void add_slice(Real* row, const Real* src, int64_t n) {
  if constexpr (std::is_same_v<Real, float>)
    add_row_f32(row, src, n);
  else
    for (int64_t j = 0; j < n; ++j) row[j] += src[j];
}

}  // namespace posenc::detail
