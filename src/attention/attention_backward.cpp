// The attention backward pass: the reference (the specification: full matrices in double,
// written from the formulas of attention.hpp) and the tiled path (FlashAttention-2's backward,
// Dao 2023, Algorithm 2: P recomputed from the saved log-sum-exp block by block, never a T x S
// matrix). The tiled path is tested against the reference, and the reference against finite
// differences (tests/test_attention_backward.cpp).
//
// Tiled work item = kv head hk with its G = Hq / Hkv query heads; for one item:
//
//   pack     kT, vT (D, Bk) per key block (keys contiguous) and kr (Bk, D) (rows contiguous),
//            zero-padded to Dp = D rounded up to 8 and to whole blocks of Bk keys
//   for each block of bq queries (tile rows R = G * bq: query head hk * G + r / bq):
//     Qs = scale q' rows, dO rows, dQ = 0; hooks 2a, 3: qa = Qs a^K^T, doa = dO a^V^T  (R, C)
//     for each key block the causal/window rules leave visible:
//       1. s  = Qs . kT                      (R, Bk)   block products: C = beta C + A . B
//       2. dp = dO . vT                      (R, Bk)
//       3. per pair: s += qa_c + biases; p = exp(s - lse_i); dP = dp + doa_c;
//          dS = p (dP - D_i), with D_i = dO_i . o_i; masked pairs and dead rows give p = dS = 0;
//          parameter gradients (each bias's grad_row, the tables' row sums) in double
//       4. dV_blk += p^T . dO                (Bk, Dp)
//       5. dK_blk += dS^T . Qs               (Bk, Dp)  (Qs carries the scale)
//       6. dQ     += dS . kr                 (R, Dp)
//     dq' = scale (dQ + sum_c w_c a^K_c); tables: da^K_c += sum_r w_rc Qs_r, da^V_c likewise
//   dk', dv of head hk = the (S, Dp) accumulators
// then dq = A^T dq', dk = A^T dk' (hook 1's transpose; engine_terms.hpp).
// Each item's arithmetic is fixed by the item, not by the thread that runs it, and the per-head
// parameter-gradient partials are reduced in head order: the bits do not depend on the thread
// count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention_plan.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"

namespace posenc {
namespace detail {

// dsinks_h = -sum_i p_i,sink D_i with p_i,sink = exp(sink_h - lse_i) and D_i = dO_i . O_i (the
// sink's column has no value: dP = 0, dS = p (0 - D_i)), summed in double over the rows in order.
template <typename Real>
void sink_grads(const attention_params<Real>& p, const attention_grads<Real>& g) {
  if (!g.dsinks) return;
  const int64_t T = p.T, Hq = p.Hq, D = p.D;
  for (int64_t h = 0; h < Hq; ++h) {
    double sum = 0;
    for (int64_t i = 0; i < T; ++i) {
      const Real* o = g.out + (i * Hq + h) * D;
      const Real* d_o = g.dout + (i * Hq + h) * D;
      double Di = 0;
      for (int64_t d = 0; d < D; ++d) Di += double(d_o[d]) * double(o[d]);
      sum += std::exp(double(p.sinks[h]) - double(g.lse[i * Hq + h])) * Di;
    }
    g.dsinks[h] = static_cast<Real>(-sum);
  }
}
template void sink_grads(const attention_params<float>&, const attention_grads<float>&);
template void sink_grads(const attention_params<double>&, const attention_grads<double>&);

}  // namespace detail

namespace {

constexpr int64_t kBk = 64;  // keys per block
constexpr int64_t kBq = 64;  // target tile rows per query block

template <typename Real>
void validate_grads(const attention_params<Real>& p, const attention_grads<Real>& g) {
  if (p.kv != kv_storage::f32)
    fail(
        "attention backward: kv = {} (half-precision k16/v16) is forward-only; give float32 k "
        "and v",
        name(p.kv));
  if (p.q_storage != kv_storage::f32)
    fail(
        "attention backward: q_storage = {} (half-precision q16) is forward-only; give float32 "
        "q",
        name(p.q_storage));
  if (p.products != attention_products::f32)
    fail(
        "attention backward: products = {} is forward-only; the backward runs float32 products "
        "(products = f32)",
        name(p.products));
  if (p.kv_head_stride != 0)
    fail(
        "attention backward: kv_head_stride = {} (head-major k, v) is forward-only; give "
        "token-major (S, Hkv, D) k and v (kv_head_stride = 0)",
        p.kv_head_stride);
  if (p.T > 0 && (!g.out || !g.lse || !g.dout || !g.dq))
    fail("attention backward: out, lse, dout and dq must not be null when T = {}", p.T);
  if (p.S > 0 && (!g.dk || !g.dv))
    fail("attention backward: dk and dv must not be null when S = {}", p.S);
  if (g.dsinks && p.sinks.empty())
    fail("attention backward: dsinks is requested but the call has no sinks");
}

// The parameter gradients of the terms, accumulated in double: one buffer per bias (its
// grad_size(), empty when not wanted) and the relative tables' (C, D) pair.
struct param_grads {
  std::vector<std::vector<double>> bias;
  std::vector<double> dak, dav;
};

template <typename Real>
param_grads make_param_grads(const detail::engine_terms<Real>& t, int64_t D) {
  param_grads pg;
  for (const auto& b : t.biases) pg.bias.emplace_back(static_cast<size_t>(b->grad_size()), 0.0);
  if (t.relative) {
    pg.dak.assign(static_cast<size_t>(t.relative->C * D), 0.0);
    pg.dav.assign(pg.dak.size(), 0.0);
  }
  return pg;
}

// Rounds the double accumulators into the caller's buffers.
template <typename Real>
void store_param_grads(const detail::engine_terms<Real>& t, const param_grads& pg) {
  for (size_t b = 0; b < t.biases.size(); ++b)
    if (t.biases[b]->grad_size() > 0) t.biases[b]->store_grad(pg.bias[b].data());
  if (const auto* rel = t.relative.get()) {
    if (rel->dkeys)
      for (size_t x = 0; x < pg.dak.size(); ++x) rel->dkeys[x] = static_cast<Real>(pg.dak[x]);
    if (rel->dvalues)
      for (size_t x = 0; x < pg.dav.size(); ++x) rel->dvalues[x] = static_cast<Real>(pg.dav[x]);
  }
}

// Hook 1's backward in place: dq = A(qpos)^T dq', dk = A(kpos)^T dk' (not for keys given
// transformed: their gradient is dk' itself).
template <typename Real, typename X>
void transform_backward(const attention_params<Real>& p, const detail::attention_plan& pl,
                        const detail::engine_terms<Real>& t, X* dq, X* dk) {
  const auto* tr = t.transform.get();
  if (!tr) return;
  if (p.T > 0) tr->apply(pl.qpos_safe, dq, p.T, p.Hq, p.D, false, true);
  if (!tr->keys_transformed && p.S > 0) tr->apply(pl.kpos_safe, dk, p.S, p.Hkv, p.D, true, true);
}

}  // namespace

// ---- reference ------------------------------------------------------------------------------
namespace {

// The reference's buffers, all double: the inputs (q', k' after hook 1), the relative tables,
// the gradients (dq', dk' in the transformed frame) and one head's (T, S) matrices.
struct ref_buffers {
  std::vector<double> q, k, v, dO;          // (T, Hq, D), (S, Hkv, D), (S, Hkv, D), (T, Hq, D)
  std::vector<double> ak, av;               // (C, D) each; empty without relative tables
  std::vector<double> dq, dk, dv;           // (T, Hq, D), (S, Hkv, D), (S, Hkv, D)
  std::vector<double> P, dS, psink, dsink;  // (T, S), (T, S), (T,), (Hq,)
  std::vector<uint8_t> vis;                 // (T, S): key j visible to query i
};

// Head h's forward: the visibility, P and the sink's probability of each row.
template <typename Real>
void ref_probabilities(const attention_params<Real>& p, const attention_grads<Real>& g,
                       const detail::attention_plan& pl, const detail::engine_terms<Real>& terms,
                       ref_buffers& buf, int64_t h) {
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  const auto* rel = terms.relative.get();
  const int64_t hk = h / pl.group;
  auto c_of = [&](int64_t i, int64_t j) { return rel->index(pl.qpos[i], pl.kpos[j]); };
  const auto& q = buf.q;
  const auto& k = buf.k;
  const auto& ak = buf.ak;
  auto& P = buf.P;
  auto& psink = buf.psink;
  auto& vis = buf.vis;
  // Forward: P.
  for (int64_t i = 0; i < T; ++i) {
    const double* qi = &q[(i * Hq + h) * D];
    double* Pi = &P[i * S];
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < S; ++j) {
      vis[i * S + j] = detail::attention_visible(pl, p.causal, p.window, T, S, i, j);
      if (!vis[i * S + j]) continue;
      const double* kj = &k[(j * Hkv + hk) * D];
      const double* akc = rel ? &ak[c_of(i, j) * D] : nullptr;
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += qi[d] * (kj[d] + (akc ? akc[d] : 0));
      double sc = pl.scale * dot;
      for (const auto& b : terms.biases) sc += bias_value(*b, pl, h, i, j);
      Pi[j] = sc;
      m = std::max(m, sc);
    }
    // A sink (attention_params::sinks): one more score with no value in the denominator.
    const bool sink = !p.sinks.empty();
    const double sk = sink ? double(p.sinks[h]) : 0.0;
    if (sink && sk > m) m = sk;
    double l = sink ? std::exp(sk - m) : 0.0;
    for (int64_t j = 0; j < S; ++j) {
      Pi[j] = vis[i * S + j] ? std::exp(Pi[j] - m) : 0.0;
      l += Pi[j];
    }
    for (int64_t j = 0; j < S; ++j) Pi[j] = l > 0 ? Pi[j] / l : 0.0;
    if (g.dsinks) psink[i] = sink ? std::exp(sk - m) / l : 0.0;
  }
}

// Head h's dP, D_i and dS (in buf.dS), and the sink's gradient.
template <typename Real>
void ref_score_grads(const attention_params<Real>& p, const attention_grads<Real>& g,
                     const detail::attention_plan& pl, const detail::engine_terms<Real>& terms,
                     ref_buffers& buf, int64_t h) {
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  const auto* rel = terms.relative.get();
  const int64_t hk = h / pl.group;
  auto c_of = [&](int64_t i, int64_t j) { return rel->index(pl.qpos[i], pl.kpos[j]); };
  const auto& v = buf.v;
  const auto& dO = buf.dO;
  const auto& av = buf.av;
  const auto& P = buf.P;
  const auto& psink = buf.psink;
  const auto& vis = buf.vis;
  auto& dS = buf.dS;
  auto& dsink = buf.dsink;
  // dP, D_i, dS.
  for (int64_t i = 0; i < T; ++i) {
    const double* doi = &dO[(i * Hq + h) * D];
    double Di = 0;
    for (int64_t j = 0; j < S; ++j) {
      if (!vis[i * S + j]) {
        dS[i * S + j] = 0;
        continue;
      }
      const double* vj = &v[(j * Hkv + hk) * D];
      const double* avc = rel ? &av[c_of(i, j) * D] : nullptr;
      double dp = 0;
      for (int64_t d = 0; d < D; ++d) dp += doi[d] * (vj[d] + (avc ? avc[d] : 0));
      dS[i * S + j] = dp;
      Di += P[i * S + j] * dp;
    }
    for (int64_t j = 0; j < S; ++j)
      if (vis[i * S + j]) dS[i * S + j] = P[i * S + j] * (dS[i * S + j] - Di);
    if (g.dsinks) dsink[h] -= psink[i] * Di;
  }
}

// Head h's accumulation into dq', dk', dv and the parameter gradients.
template <typename Real>
void ref_accumulate(const attention_params<Real>& p, const detail::attention_plan& pl,
                    const detail::engine_terms<Real>& terms, ref_buffers& buf, param_grads& pg,
                    int64_t h) {
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  const auto* rel = terms.relative.get();
  const int64_t hk = h / pl.group;
  auto c_of = [&](int64_t i, int64_t j) { return rel->index(pl.qpos[i], pl.kpos[j]); };
  const auto& q = buf.q;
  const auto& k = buf.k;
  const auto& dO = buf.dO;
  const auto& ak = buf.ak;
  const auto& P = buf.P;
  const auto& dS = buf.dS;
  const auto& vis = buf.vis;
  auto& dq = buf.dq;
  auto& dk = buf.dk;
  auto& dv = buf.dv;
  // Accumulate.
  for (int64_t i = 0; i < T; ++i) {
    const double* qi = &q[(i * Hq + h) * D];
    const double* doi = &dO[(i * Hq + h) * D];
    double* dqi = &dq[(i * Hq + h) * D];
    for (int64_t j = 0; j < S; ++j) {
      if (!vis[i * S + j]) continue;
      const double pij = P[i * S + j], ds = dS[i * S + j];
      const double* kj = &k[(j * Hkv + hk) * D];
      double* dkj = &dk[(j * Hkv + hk) * D];
      double* dvj = &dv[(j * Hkv + hk) * D];
      const int64_t c = rel ? c_of(i, j) : 0;
      for (int64_t d = 0; d < D; ++d) {
        dvj[d] += pij * doi[d];
        dqi[d] += pl.scale * ds * (kj[d] + (rel ? ak[c * D + d] : 0));
        dkj[d] += pl.scale * ds * qi[d];
      }
      if (rel)
        for (int64_t d = 0; d < D; ++d) {
          pg.dav[c * D + d] += pij * doi[d];
          pg.dak[c * D + d] += pl.scale * ds * qi[d];
        }
      for (size_t b = 0; b < terms.biases.size(); ++b)
        if (!pg.bias[b].empty())
          bias_add_grad(*terms.biases[b], pl, h, i, j, ds, pg.bias[b].data());
    }
  }
}

}  // namespace

// Per head h (plain loops, double throughout; c = the relative tables' row of the pair):
//   s_ij  = scale q'_i . (k'_j + a^K_c) + sum of biases, visible j only
//   P_ij  = exp(s_ij - m_i) / l_i                   (two-pass softmax, as the forward reference)
//   dP_ij = dO_i . (v_j + a^V_c);  D_i = sum_j P_ij dP_ij;  dS_ij = P_ij (dP_ij - D_i)
// and the accumulations of attention.hpp, in (h, i, j) order.
template <typename Real>
void attention_backward_reference(const attention_params<Real>& p, const attention_grads<Real>& g) {
  if (detail::named_path_backward(p, g, true)) return;  // a scheme's own path (CoPE)
  const auto pl = detail::make_attention_plan(p);
  const auto terms = detail::make_engine_terms(p, pl, &g);
  validate_grads(p, g);
  if (terms.pairs) return detail::rope_pairs_backward(p, pl, terms, g, true);  // per-pair RoPE
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  const auto* rel = terms.relative.get();

  ref_buffers buf;
  buf.q.assign(p.q, p.q + T * Hq * D);
  buf.k.assign(p.k, p.k + S * Hkv * D);
  buf.v.assign(p.v, p.v + S * Hkv * D);
  buf.dO.assign(g.dout, g.dout + T * Hq * D);
  if (const auto* tr = terms.transform.get()) {
    tr->apply(pl.qpos_safe, buf.q.data(), T, Hq, D, false, false);
    if (!tr->keys_transformed) tr->apply(pl.kpos_safe, buf.k.data(), S, Hkv, D, true, false);
  }
  if (rel) {
    buf.ak.assign(rel->keys, rel->keys + rel->C * D);
    buf.av.assign(rel->values, rel->values + rel->C * D);
  }
  buf.dq.assign(T * Hq * D, 0.0);
  buf.dk.assign(S * Hkv * D, 0.0);
  buf.dv.assign(S * Hkv * D, 0.0);
  param_grads pg = make_param_grads(terms, D);
  buf.P.resize(T * S);
  buf.dS.resize(T * S);
  buf.psink.resize(T);
  buf.dsink.assign(Hq, 0.0);
  buf.vis.resize(T * S);

  for (int64_t h = 0; h < Hq; ++h) {
    ref_probabilities(p, g, pl, terms, buf, h);
    ref_score_grads(p, g, pl, terms, buf, h);
    ref_accumulate(p, pl, terms, buf, pg, h);
  }
  transform_backward(p, pl, terms, buf.dq.data(), buf.dk.data());
  for (int64_t x = 0; x < T * Hq * D; ++x) g.dq[x] = static_cast<Real>(buf.dq[x]);
  for (int64_t x = 0; x < S * Hkv * D; ++x) {
    g.dk[x] = static_cast<Real>(buf.dk[x]);
    g.dv[x] = static_cast<Real>(buf.dv[x]);
  }
  store_param_grads(terms, pg);
  if (g.dsinks)
    for (int64_t h = 0; h < Hq; ++h) g.dsinks[h] = static_cast<Real>(buf.dsink[h]);
}

// ---- tiled ----------------------------------------------------------------------------------
namespace {

// x, or 0 where |x| is below the smallest normal number: P and dS as the float32 block
// (softmax_backward_block_f32) has them, so that no path feeds subnormals to the dK, dV and dQ
// products (a microcode assist per FMA on Intel CPUs; docs/decisions.md).
template <typename Real>
Real no_subnormal(Real x) {
  return std::abs(x) < std::numeric_limits<Real>::min() ? Real(0) : x;
}

// C(rows x ncols) = C + A(rows x K) . B(K x ncols) (accumulate) or A . B, A(r, kk) at
// A[r * lda + kk * ak]; ncols a multiple of 8. float: the forward's Highway micro-kernel; double:
// plain loops, same accumulation order (kk = 0, 1, ... per output).
void block_gemm(int64_t rows, int64_t ncols, const float* A, int64_t lda, const float* B,
                int64_t ldb, float* C, int64_t ldc, int64_t K, bool accumulate, const float* ones,
                int64_t ak) {
  detail::gemm_f32(rows, ncols, A, lda, B, ldb, C, ldc, K, accumulate ? ones : nullptr, ak);
}
void block_gemm(int64_t rows, int64_t ncols, const double* A, int64_t lda, const double* B,
                int64_t ldb, double* C, int64_t ldc, int64_t K, bool accumulate, const double*,
                int64_t ak) {
  for (int64_t r = 0; r < rows; ++r) {
    double* c = C + r * ldc;
    if (!accumulate) std::fill(c, c + ncols, 0.0);
    for (int64_t kk = 0; kk < K; ++kk) {
      const double a = A[r * lda + kk * ak];
      const double* b = B + kk * ldb;
      for (int64_t n = 0; n < ncols; ++n) c[n] += a * b[n];
    }
  }
}

template <typename Real>
struct bwd_problem {
  const attention_params<Real>* p = nullptr;
  const attention_grads<Real>* g = nullptr;
  const detail::attention_plan* pl = nullptr;
  const detail::engine_terms<Real>* terms = nullptr;
  const detail::relative_vectors<Real>* rel = nullptr;  // hooks 2a and 3; null = off
  const Real* q = nullptr;                              // (T, Hq, D) transformed by hook 1
  const Real* k = nullptr;                              // (S, Hkv, D) transformed by hook 1
  Real* dq = nullptr;                                   // (T, Hq, D): dq' (transformed frame)
  Real* dk = nullptr;                                   // (S, Hkv, D): dk' (transformed frame)
  const Real* Drow = nullptr;                           // (T, Hq): D_i = dO_i . o_i
  int64_t Dp = 0, nkb = 0, Sp = 0, bq = 0;
  // Parameter gradients per kv-head item, reduced in head order after the parallel region:
  std::vector<std::vector<double>>* dbias = nullptr;  // per bias: (Hkv, grad_size)
  std::vector<double>* dak = nullptr;                 // (Hkv, C, D)
  std::vector<double>* dav = nullptr;                 // (Hkv, C, D)
  int64_t C = 0;
  bool simple = false;           // masks are key-index ranges only: no documents, no padded keys
  bool kpos_contiguous = false;  // kpos[j] == j for every key
  std::vector<Real> ones;        // (max(R, Bk),) for accumulating products
};

template <typename Real>
struct bwd_scratch {
  std::vector<Real> kT, vT, kr;   // (nkb, Dp, Bk), (nkb, Dp, Bk), (Sp, Dp)
  std::vector<Real> dK, dV;       // (Sp, Dp)
  std::vector<Real> Qs, dO, dQ;   // (R, Dp)
  std::vector<Real> s, dp;        // (R, Bk): scores then P; dO V^T then dS
  std::vector<Real> lse_r, D_r;   // (R,): the rows' lse and D_i
  std::vector<int64_t> jlo, jhi;  // (R,): the block's visible key range per row (simple masks)
  std::vector<Real> qa, doa;      // (R, C) relative tables: Qs . a^K_c, dO . a^V_c
  std::vector<double> wds, wp;    // (R, C) relative tables: sums of dS and P per table row
  std::vector<int64_t> cidx;      // (R, Bk): the table row of each pair of the block
};

// One work item's state, shared by its steps (backward_item): the problem, the scratch, kv
// head hk and the item's parameter-gradient buffers.
template <typename Real>
struct bwd_item {
  const bwd_problem<Real>& pr;
  bwd_scratch<Real>& sc;
  int64_t hk = 0;
  std::vector<double*> dbias;  // per bias: its gradient row of head hk, or null (not wanted)
  bool want_params = false;    // any parameter gradient, or relative tables (they feed dq)
  double* dak = nullptr;       // (C, D) of head hk, or null without relative tables
  double* dav = nullptr;       // (C, D)
};

// One block of queries [i0, i1) of an item: tile row r holds query head hk * G + r / nq and
// query i0 + r % nq.
struct bwd_rows {
  int64_t hk, G, i0, i1, nq, R;
  int64_t head_of(int64_t r) const { return hk * G + r / nq; }
  int64_t query_of(int64_t r) const { return i0 + r % nq; }
};

// Pack: kT, vT (D, Bk) per key block and kr (Bk, D) of head hk, zero-padded; dK = dV = 0.
template <typename Real>
inline void pack_head(const bwd_problem<Real>& pr, bwd_scratch<Real>& sc, int64_t hk) {
  const auto& p = *pr.p;
  const int64_t S = p.S, Hkv = p.Hkv, D = p.D, Dp = pr.Dp;
  std::fill(sc.kT.begin(), sc.kT.end(), Real(0));
  std::fill(sc.vT.begin(), sc.vT.end(), Real(0));
  std::fill(sc.kr.begin(), sc.kr.end(), Real(0));
  for (int64_t j = 0; j < S; ++j) {
    const Real* kj = pr.k + (j * Hkv + hk) * D;
    const Real* vj = p.v + (j * Hkv + hk) * D;
    Real* kT = sc.kT.data() + (j / kBk) * Dp * kBk + j % kBk;
    Real* vT = sc.vT.data() + (j / kBk) * Dp * kBk + j % kBk;
    for (int64_t d = 0; d < D; ++d) {
      kT[d * kBk] = kj[d];
      vT[d * kBk] = vj[d];
    }
    std::copy(kj, kj + D, sc.kr.data() + j * Dp);
  }
  std::fill(sc.dK.begin(), sc.dK.end(), Real(0));
  std::fill(sc.dV.begin(), sc.dV.end(), Real(0));
}

// Qs = scale q' rows, dO rows, the rows' lse and D_i, dQ = 0; hooks 2a, 3: qa = Qs a^K^T,
// doa = dO a^V^T. False (and dq' = 0 for every row) when no row sees a key.
template <typename Real>
inline bool load_query_block(bwd_item<Real>& it, const bwd_rows& rw) {
  const auto& pr = it.pr;
  auto& sc = it.sc;
  const auto& p = *pr.p;
  const auto& g = *pr.g;
  const int64_t Hq = p.Hq, D = p.D, Dp = pr.Dp, C = pr.C, R = rw.R;
  const auto* rel = pr.rel;
  const Real scale = static_cast<Real>(pr.pl->scale);
  Real* Qs = sc.Qs.data();
  Real* dO = sc.dO.data();
  bool any_live = false;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t i = rw.query_of(r), h = rw.head_of(r);
    const Real* qi = pr.q + (i * Hq + h) * D;
    const Real* doi = g.dout + (i * Hq + h) * D;
    for (int64_t d = 0; d < D; ++d) {
      Qs[r * Dp + d] = scale * qi[d];
      dO[r * Dp + d] = doi[d];
    }
    std::fill(Qs + r * Dp + D, Qs + (r + 1) * Dp, Real(0));
    std::fill(dO + r * Dp + D, dO + (r + 1) * Dp, Real(0));
    sc.lse_r[r] = g.lse[i * Hq + h];
    sc.D_r[r] = pr.Drow[i * Hq + h];
    any_live |= !std::isinf(g.lse[i * Hq + h]);
  }
  std::fill(sc.dQ.data(), sc.dQ.data() + R * Dp, Real(0));
  if (!any_live) {  // every row sees nothing: no gradient flows
    for (int64_t r = 0; r < R; ++r)
      std::fill_n(pr.dq + (rw.query_of(r) * Hq + rw.head_of(r)) * D, D, Real(0));
    return false;
  }
  if (rel) {
    // qa = Qs . a^K_c (scale q'_i . a^K_c, hook 2a's score term), doa = dO_i . a^V_c.
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        Real a = 0, b = 0;
        for (int64_t d = 0; d < D; ++d) {
          a += Qs[r * Dp + d] * rel->keys[c * D + d];
          b += dO[r * Dp + d] * rel->values[c * D + d];
        }
        sc.qa[r * C + c] = a;
        sc.doa[r * C + c] = b;
      }
    std::fill(sc.wds.begin(), sc.wds.begin() + R * C, 0.0);
    std::fill(sc.wp.begin(), sc.wp.begin() + R * C, 0.0);
  }
  return true;
}

// Step 3 with simple masks (token-index masks are one key range per row; positions only shift
// biases): the rows' visible ranges, the score terms beyond q.k over them and hook 3's term of
// dP, then P and dS in place (s <- P, dp <- dS) and the parameter gradients.
template <typename Real>
inline void softmax_block_simple(bwd_item<Real>& it, const bwd_rows& rw, int64_t j0, int64_t nb) {
  const auto& pr = it.pr;
  auto& sc = it.sc;
  const auto& p = *pr.p;
  const auto& pl = *pr.pl;
  const int64_t T = p.T, S = p.S, C = pr.C, R = rw.R;
  const auto* rel = pr.rel;
  const auto& biases = pr.terms->biases;
  Real* s = sc.s.data();
  Real* dp = sc.dp.data();
  for (int64_t r = 0; r < R; ++r) {
    const int64_t i = rw.query_of(r), qi = S - T + i;
    const int64_t hi_tok = p.causal ? qi + 1 : S;
    const int64_t lo_tok = p.window > 0 ? qi - p.window + 1 : 0;
    const bool live = pl.qvalid[i] && !std::isinf(sc.lse_r[r]);
    sc.jlo[r] = std::clamp<int64_t>(lo_tok - j0, 0, nb);
    sc.jhi[r] = live ? std::clamp<int64_t>(hi_tok - j0, sc.jlo[r], nb) : sc.jlo[r];
  }
  // Score terms beyond q.k over each row's visible keys, and hook 3's term of dP.
  if (rel || !biases.empty())
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = rw.query_of(r), h = rw.head_of(r), qp = pl.qpos[i];
      const int64_t lo = sc.jlo[r], n = sc.jhi[r] - lo;
      const int64_t* kp = pl.kpos.data() + j0 + lo;
      Real* srow = s + r * kBk + lo;
      if (rel) {
        int64_t* cr = sc.cidx.data() + r * kBk + lo;
        Real* dprow = dp + r * kBk + lo;
        rel->index_row(qp, kp, n, cr);
        for (int64_t jj = 0; jj < n; ++jj) {
          srow[jj] += sc.qa[r * C + cr[jj]];
          dprow[jj] += sc.doa[r * C + cr[jj]];
        }
      }
      for (const auto& b : biases) bias_add_row(*b, pl, pr.kpos_contiguous, h, i, j0 + lo, n, srow);
    }
  if constexpr (std::is_same_v<Real, float>) {
    detail::softmax_backward_block_f32(R, s, dp, sc.jlo.data(), sc.jhi.data(), sc.lse_r.data(),
                                       sc.D_r.data());
  } else {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t jj = 0; jj < kBk; ++jj) {
        const bool vis = jj >= sc.jlo[r] && jj < sc.jhi[r];
        const Real pij = no_subnormal(vis ? std::exp(s[r * kBk + jj] - sc.lse_r[r]) : Real(0));
        dp[r * kBk + jj] = no_subnormal(pij * (dp[r * kBk + jj] - sc.D_r[r]));
        s[r * kBk + jj] = pij;
      }
  }
  if (it.want_params)  // parameter gradients from dS (and P for hook 3)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = rw.query_of(r), h = rw.head_of(r);
      const int64_t lo = sc.jlo[r], n = sc.jhi[r] - lo;
      for (size_t b = 0; b < biases.size(); ++b)
        if (it.dbias[b])
          bias_grad_row(*biases[b], pl, h, i, j0 + lo, n, dp + r * kBk + lo, it.dbias[b]);
      if (rel) {
        const int64_t* cr = sc.cidx.data() + r * kBk + lo;
        for (int64_t jj = 0; jj < n; ++jj) {
          sc.wds[r * C + cr[jj]] += double(dp[r * kBk + lo + jj]);
          sc.wp[r * C + cr[jj]] += double(s[r * kBk + lo + jj]);
        }
      }
    }
}

// Step 3 with general masks (padding, documents, pad queries): the predicate per pair, after
// the terms are added over the whole block row.
template <typename Real>
inline void softmax_block_general(bwd_item<Real>& it, const bwd_rows& rw, int64_t j0, int64_t nb) {
  const auto& pr = it.pr;
  auto& sc = it.sc;
  const auto& p = *pr.p;
  const auto& pl = *pr.pl;
  const int64_t T = p.T, S = p.S, C = pr.C, R = rw.R;
  const auto* rel = pr.rel;
  const auto& biases = pr.terms->biases;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t i = rw.query_of(r), h = rw.head_of(r);
    const Real lse = sc.lse_r[r], Di = sc.D_r[r];
    const int64_t qp = pl.qpos[i];
    const int64_t* kp = pl.kpos.data() + j0;
    Real* srow = sc.s.data() + r * kBk;
    Real* dprow = sc.dp.data() + r * kBk;
    int64_t* cr = sc.cidx.data() + r * kBk;
    if (std::isinf(lse)) {  // the row sees nothing
      std::fill(srow, srow + kBk, Real(0));
      std::fill(dprow, dprow + kBk, Real(0));
      continue;
    }
    if (rel) {
      rel->index_row(qp, kp, nb, cr);
      for (int64_t jj = 0; jj < nb; ++jj) {
        srow[jj] += sc.qa[r * C + cr[jj]];
        dprow[jj] += sc.doa[r * C + cr[jj]];
      }
    }
    for (const auto& b : biases) bias_add_row(*b, pl, pr.kpos_contiguous, h, i, j0, nb, srow);
    for (int64_t jj = 0; jj < kBk; ++jj) {
      if (jj >= nb || !detail::attention_visible(pl, p.causal, p.window, T, S, i, j0 + jj)) {
        srow[jj] = 0;
        dprow[jj] = 0;
        continue;
      }
      const Real pij = no_subnormal(std::exp(srow[jj] - lse));
      dprow[jj] = no_subnormal(pij * (dprow[jj] - Di));
      srow[jj] = pij;
    }
    for (size_t b = 0; b < biases.size(); ++b)
      if (it.dbias[b]) bias_grad_row(*biases[b], pl, h, i, j0, nb, dprow, it.dbias[b]);
    if (rel)
      for (int64_t jj = 0; jj < nb; ++jj) {
        sc.wds[r * C + cr[jj]] += double(dprow[jj]);
        sc.wp[r * C + cr[jj]] += double(srow[jj]);
      }
  }
}

// dq' = scale (dQ + sum_c w_c a^K_c) of the block's rows; relative table gradients.
template <typename Real>
inline void store_query_block(bwd_item<Real>& it, const bwd_rows& rw) {
  const auto& pr = it.pr;
  auto& sc = it.sc;
  const int64_t Hq = pr.p->Hq, D = pr.p->D, Dp = pr.Dp, C = pr.C;
  const auto* rel = pr.rel;
  const Real scale = static_cast<Real>(pr.pl->scale);
  for (int64_t r = 0; r < rw.R; ++r) {
    const int64_t i = rw.query_of(r), h = rw.head_of(r);
    Real* dqr = sc.dQ.data() + r * Dp;
    if (rel) {
      for (int64_t c = 0; c < C; ++c) {
        const double wds = sc.wds[r * C + c], wp = sc.wp[r * C + c];
        if (wds == 0 && wp == 0) continue;
        for (int64_t d = 0; d < D; ++d) {
          dqr[d] += static_cast<Real>(wds) * rel->keys[c * D + d];
          it.dak[c * D + d] += wds * double(sc.Qs[r * Dp + d]);
          it.dav[c * D + d] += wp * double(sc.dO[r * Dp + d]);
        }
      }
    }
    Real* out = pr.dq + (i * Hq + h) * D;
    for (int64_t d = 0; d < D; ++d) out[d] = scale * dqr[d];
  }
}

template <typename Real>
void backward_item(const bwd_problem<Real>& pr, bwd_scratch<Real>& sc, int64_t hk) {
  const auto& p = *pr.p;
  const int64_t T = p.T, S = p.S, Hkv = p.Hkv, D = p.D, Dp = pr.Dp, G = pr.pl->group;
  const int64_t C = pr.C;
  const auto& biases = pr.terms->biases;
  const Real* ones = pr.ones.data();
  // This item's parameter-gradient buffers (null = not wanted); the relative tables' row sums
  // also feed dq, so they are always formed.
  std::vector<double*> dbias(biases.size(), nullptr);
  bool want_params = pr.rel != nullptr;
  for (size_t b = 0; b < biases.size(); ++b) {
    const int64_t n = biases[b]->grad_size();
    if (n > 0) dbias[b] = (*pr.dbias)[b].data() + hk * n, want_params = true;
  }
  pack_head(pr, sc, hk);
  bwd_item<Real> it{pr,
                    sc,
                    hk,
                    std::move(dbias),
                    want_params,
                    pr.rel ? pr.dak->data() + hk * C * D : nullptr,
                    pr.rel ? pr.dav->data() + hk * C * D : nullptr};

  const int64_t nqb = (T + pr.bq - 1) / pr.bq;
  for (int64_t qb = 0; qb < nqb; ++qb) {
    const int64_t i0 = qb * pr.bq, i1 = std::min(T, i0 + pr.bq), nq = i1 - i0;
    const bwd_rows rw{hk, G, i0, i1, nq, G * nq};
    const int64_t R = rw.R;
    if (!load_query_block(it, rw)) continue;
    Real* Qs = sc.Qs.data();
    Real* dO = sc.dO.data();
    Real* dQ = sc.dQ.data();
    // Key range any row of this block may see (causal and window rules), in whole blocks.
    int64_t j_begin = 0, j_end = S;
    if (p.causal) j_end = std::clamp<int64_t>(S - T + i1, 0, S);
    if (p.window > 0) j_begin = std::clamp<int64_t>(S - T + i0 - p.window + 1, 0, S);
    for (int64_t kb = j_begin / kBk; kb * kBk < j_end; ++kb) {
      const int64_t j0 = kb * kBk, nb = std::min(kBk, S - j0);
      Real* s = sc.s.data();
      Real* dp = sc.dp.data();
      // 1, 2: scores and dP = dO V^T for the block.
      block_gemm(R, kBk, Qs, Dp, sc.kT.data() + kb * Dp * kBk, kBk, s, kBk, D, false, ones, 1);
      block_gemm(R, kBk, dO, Dp, sc.vT.data() + kb * Dp * kBk, kBk, dp, kBk, D, false, ones, 1);
      // 3: P and dS per pair, in place (s <- P, dp <- dS).
      if (pr.simple)
        softmax_block_simple(it, rw, j0, nb);
      else
        softmax_block_general(it, rw, j0, nb);
      // 4, 5: dV += P^T dO, dK += dS^T Qs over the block's keys (P and dS read transposed);
      // 6: dQ += dS kr.
      block_gemm(nb, Dp, s, 1, dO, Dp, sc.dV.data() + j0 * Dp, Dp, R, true, ones, kBk);
      block_gemm(nb, Dp, dp, 1, Qs, Dp, sc.dK.data() + j0 * Dp, Dp, R, true, ones, kBk);
      block_gemm(R, Dp, dp, kBk, sc.kr.data() + j0 * Dp, Dp, dQ, Dp, nb, true, ones, 1);
    }
    store_query_block(it, rw);
  }
  for (int64_t j = 0; j < S; ++j) {
    std::copy(sc.dK.data() + j * Dp, sc.dK.data() + j * Dp + D, pr.dk + (j * Hkv + hk) * D);
    std::copy(sc.dV.data() + j * Dp, sc.dV.data() + j * Dp + D, pr.g->dv + (j * Hkv + hk) * D);
  }
}

// D_i = dO_i . o_i per row (T, Hq) (FlashAttention-2's rowsum(dO * O)), accumulated in double.
template <typename Real>
std::vector<Real> row_dout_dot_out(const attention_params<Real>& p,
                                   const attention_grads<Real>& g) {
  const int64_t T = p.T, Hq = p.Hq, D = p.D;
  std::vector<Real> Drow(T * Hq);
  for (int64_t x = 0; x < T * Hq; ++x) {
    double acc = 0;
    for (int64_t d = 0; d < D; ++d) acc += double(g.dout[x * D + d]) * double(g.out[x * D + d]);
    Drow[x] = static_cast<Real>(acc);
  }
  return Drow;
}

// One scratch per thread, sized for pr and R tile rows.
template <typename Real>
std::vector<bwd_scratch<Real>> make_bwd_scratch(const bwd_problem<Real>& pr, int64_t R, int nth) {
  std::vector<bwd_scratch<Real>> scratch(nth);
  for (auto& sc : scratch) {
    sc.kT.resize(pr.nkb * pr.Dp * kBk);
    sc.vT.resize(pr.nkb * pr.Dp * kBk);
    sc.kr.resize(pr.Sp * pr.Dp);
    sc.dK.resize(pr.Sp * pr.Dp);
    sc.dV.resize(pr.Sp * pr.Dp);
    sc.Qs.resize(R * pr.Dp);
    sc.dO.resize(R * pr.Dp);
    sc.dQ.resize(R * pr.Dp);
    sc.s.resize(R * kBk);
    sc.dp.resize(R * kBk);
    sc.lse_r.resize(R);
    sc.D_r.resize(R);
    sc.jlo.resize(R);
    sc.jhi.resize(R);
    sc.qa.resize(R * pr.C);
    sc.doa.resize(R * pr.C);
    sc.wds.resize(R * pr.C);
    sc.wp.resize(R * pr.C);
    sc.cidx.assign(pr.C > 0 ? R * kBk : 0, 0);
  }
  return scratch;
}

// Adds the per-kv-head partials of the parameter gradients (dbias, dak, dav of
// attention_backward_tiled) into pg, in head order.
void reduce_param_grads(param_grads& pg, const std::vector<std::vector<double>>& dbias,
                        const std::vector<double>& dak, const std::vector<double>& dav, int64_t Hkv,
                        int64_t C, int64_t D) {
  for (size_t b = 0; b < dbias.size(); ++b)
    for (int64_t hk = 0; hk < Hkv; ++hk)
      for (size_t x = 0; x < pg.bias[b].size(); ++x)
        pg.bias[b][x] += dbias[b][hk * pg.bias[b].size() + x];
  for (int64_t hk = 0; hk < Hkv; ++hk)
    for (size_t x = 0; x < pg.dak.size(); ++x) {
      pg.dak[x] += dak[hk * C * D + x];
      pg.dav[x] += dav[hk * C * D + x];
    }
}

}  // namespace

template <typename Real>
void attention_backward_tiled(const attention_params<Real>& p, const attention_grads<Real>& g) {
  if (detail::named_path_backward(p, g, false)) return;  // a scheme's own path (CoPE)
  const auto pl = detail::make_attention_plan(p);
  const auto terms = detail::make_engine_terms(p, pl, &g);
  validate_grads(p, g);
  if (terms.pairs) return detail::rope_pairs_backward(p, pl, terms, g, false);  // its own path
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  if (T == 0 || S == 0) {
    std::fill(g.dq, g.dq + T * Hq * D, Real(0));
    if (S > 0) {
      std::fill(g.dk, g.dk + S * Hkv * D, Real(0));
      std::fill(g.dv, g.dv + S * Hkv * D, Real(0));
    }
    store_param_grads(terms, make_param_grads(terms, D));
    detail::sink_grads(p, g);
    return;
  }

  // Hook 1: transformed copies of q and k, as in the forward.
  std::vector<Real> q_t, k_t;
  const Real* q = p.q;
  const Real* k = p.k;
  if (const auto* tr = terms.transform.get()) {
    q_t.assign(p.q, p.q + T * Hq * D);
    tr->apply(pl.qpos_safe, q_t.data(), T, Hq, D, false, false);
    q = q_t.data();
    if (!tr->keys_transformed) {
      k_t.assign(p.k, p.k + S * Hkv * D);
      tr->apply(pl.kpos_safe, k_t.data(), S, Hkv, D, true, false);
      k = k_t.data();
    }
  }
  const std::vector<Real> Drow = row_dout_dot_out(p, g);  // (T, Hq): D_i = dO_i . o_i

  bwd_problem<Real> pr;
  pr.p = &p, pr.g = &g, pr.pl = &pl, pr.terms = &terms, pr.q = q, pr.k = k, pr.dq = g.dq,
  pr.dk = g.dk;
  pr.rel = terms.relative.get();
  pr.Drow = Drow.data();
  pr.Dp = (D + 7) / 8 * 8;
  pr.nkb = (S + kBk - 1) / kBk;
  pr.Sp = pr.nkb * kBk;
  pr.bq = std::max<int64_t>(1, kBq / pl.group);
  const int64_t R = pl.group * pr.bq;
  pr.C = pr.rel ? pr.rel->C : 0;
  pr.simple = pl.qdoc.empty() &&
              std::all_of(pl.kvalid.begin(), pl.kvalid.end(), [](uint8_t x) { return x != 0; });
  pr.kpos_contiguous = true;
  for (int64_t j = 0; j < S; ++j) pr.kpos_contiguous &= pl.kpos[j] == j;
  std::vector<std::vector<double>> dbias;
  for (const auto& b : terms.biases) dbias.emplace_back(Hkv * b->grad_size(), 0.0);
  std::vector<double> dak(Hkv * pr.C * D, 0.0), dav(Hkv * pr.C * D, 0.0);
  pr.dbias = &dbias;
  pr.dak = &dak;
  pr.dav = &dav;
  pr.ones.assign(std::max(R, kBk), Real(1));
  checked_bytes("attention backward scratch", static_cast<unsigned long long>(pr.Sp),
                static_cast<unsigned long long>(pr.Dp), 5, sizeof(Real));
  if (pr.C > 0)
    checked_bytes("attention backward relative-table scratch", static_cast<unsigned long long>(R),
                  static_cast<unsigned long long>(pr.C), 4, sizeof(double));

  const int nth = static_cast<int>(std::min<int64_t>(num_threads(), Hkv));
  std::vector<bwd_scratch<Real>> scratch = make_bwd_scratch(pr, R, nth);
  parallel_for(nth, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      auto [b, e] = thread_range(Hkv, static_cast<int>(t), nth);
      for (int64_t hk = b; hk < e; ++hk) backward_item(pr, scratch[t], hk);
    }
  });

  transform_backward(p, pl, terms, g.dq, g.dk);
  // The per-kv-head partials of the parameter gradients, in head order.
  param_grads pg = make_param_grads(terms, D);
  reduce_param_grads(pg, dbias, dak, dav, Hkv, pr.C, D);
  store_param_grads(terms, pg);
  detail::sink_grads(p, g);
}

template <typename Real>
void attention_backward(const attention_params<Real>& p, const attention_grads<Real>& g) {
  if (attention_reference_selected())
    attention_backward_reference(p, g);
  else
    attention_backward_tiled(p, g);
}

template void attention_backward_reference(const attention_params<float>&,
                                           const attention_grads<float>&);
template void attention_backward_reference(const attention_params<double>&,
                                           const attention_grads<double>&);
template void attention_backward_tiled(const attention_params<float>&,
                                       const attention_grads<float>&);
template void attention_backward_tiled(const attention_params<double>&,
                                       const attention_grads<double>&);
template void attention_backward(const attention_params<float>&, const attention_grads<float>&);
template void attention_backward(const attention_params<double>&, const attention_grads<double>&);

}  // namespace posenc
