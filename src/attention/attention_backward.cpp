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
//     Qs = scale q' rows, dO rows, dQ = 0; Shaw: qa = Qs a^K^T, doa = dO a^V^T   (R, C)
//     for each key block the causal/window rules leave visible:
//       1. s  = Qs . kT                      (R, Bk)   block products: C = beta C + A . B
//       2. dp = dO . vT                      (R, Bk)
//       3. per pair: s += Shaw-K + bias; p = exp(s - lse_i); dP = dp + Shaw-V;
//          dS = p (dP - D_i), with D_i = dO_i . o_i; masked pairs and dead rows give p = dS = 0;
//          table gradients (T5, ALiBi slopes, Shaw offsets' mass) accumulate in double
//       4. dV_blk += p^T . dO                (Bk, Dp)
//       5. dK_blk += dS^T . Qs               (Bk, Dp)  (Qs carries the scale)
//       6. dQ     += dS . kr                 (R, Dp)
//     dq' = scale (dQ + sum_c w_c a^K_c); Shaw tables: da^K_c += sum_r w_rc Qs_r, da^V_c likewise
//   dk', dv of head hk = the (S, Dp) accumulators
// then dq = a R^T dq', dk = a R^T dk' (RoPE backward: the rotation with the sine negated).
// Each item's arithmetic is fixed by the item, not by the thread that runs it, and the per-head
// Shaw partials are reduced in head order: the bits do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention_plan.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/alibi.hpp"

namespace posenc {
namespace {

constexpr int64_t kBk = 64;  // keys per block
constexpr int64_t kBq = 64;  // target tile rows per query block

template <typename Real>
void validate_grads(const attention_params<Real>& p, const attention_grads<Real>& g) {
  if (p.T > 0 && (!g.out || !g.lse || !g.dout || !g.dq))
    fail("attention backward: out, lse, dout and dq must not be null when T = {}", p.T);
  if (p.S > 0 && (!g.dk || !g.dv))
    fail("attention backward: dk and dv must not be null when S = {}", p.S);
  if (g.dt5 && !p.pos.has_t5())
    fail("attention backward: dt5 was requested but the T5 hook is off (pos.t5.weights is empty)");
  if ((g.dshaw_keys || g.dshaw_values) && !p.pos.has_shaw())
    fail(
        "attention backward: dshaw_keys/dshaw_values were requested but the Shaw hook is off "
        "(pos.shaw.keys is empty)");
  if (g.dalibi && p.pos.alibi.empty())
    fail("attention backward: dalibi was requested but the ALiBi hook is off (pos.alibi is empty)");
}

// Sizes of the parameter gradients (0 when not requested).
template <typename Real>
int64_t t5_size(const attention_params<Real>& p) {
  return p.pos.has_t5() ? p.pos.t5.params.num_buckets * p.Hq : 0;
}
template <typename Real>
int64_t shaw_size(const attention_params<Real>& p) {
  return p.pos.has_shaw() ? (2 * p.pos.shaw.clip + 1) * p.D : 0;
}

// Rounds the double accumulators of the parameter gradients into the caller's buffers.
template <typename Real>
void store_param_grads(const attention_params<Real>& p, const attention_grads<Real>& g,
                       const std::vector<double>& dt5, const std::vector<double>& dak,
                       const std::vector<double>& dav, const std::vector<double>& dal) {
  if (g.dt5)
    for (int64_t x = 0; x < t5_size(p); ++x) g.dt5[x] = static_cast<Real>(dt5[x]);
  if (g.dshaw_keys)
    for (int64_t x = 0; x < shaw_size(p); ++x) g.dshaw_keys[x] = static_cast<Real>(dak[x]);
  if (g.dshaw_values)
    for (int64_t x = 0; x < shaw_size(p); ++x) g.dshaw_values[x] = static_cast<Real>(dav[x]);
  if (g.dalibi)
    for (int64_t h = 0; h < p.Hq; ++h) g.dalibi[h] = dal[h];
}

// Hook 1's backward in place: dq = a R(qpos)^T dq', dk = a R(kpos)^T dk' (rope_apply with
// inverse = true; the forward line is q' = a R(qpos) q).
template <typename Real, typename X>
void rope_backward(const attention_params<Real>& p, const detail::attention_plan& pl, X* dq,
                   X* dk) {
  const auto& r = p.pos.rope;
  if (!r.freqs) return;
  if (p.T > 0) rope_apply(*r.freqs, r.layout, r.angle, pl.qpos_rope, dq, p.T, p.Hq, p.D, true);
  if (!r.keys_rotated && p.S > 0)
    rope_apply(*r.freqs, r.layout, r.angle, pl.kpos_rope, dk, p.S, p.Hkv, p.D, true);
}

}  // namespace

// ---- reference ------------------------------------------------------------------------------
// Per head h (plain loops, double throughout; c = shaw_index(qpos_i, kpos_j, K)):
//   s_ij  = scale q'_i . (k'_j + a^K_c) + alibi + t5, visible j only
//   P_ij  = exp(s_ij - m_i) / l_i                   (two-pass softmax, as the forward reference)
//   dP_ij = dO_i . (v_j + a^V_c);  D_i = sum_j P_ij dP_ij;  dS_ij = P_ij (dP_ij - D_i)
// and the accumulations of attention.hpp, in (h, i, j) order.
template <typename Real>
void attention_backward_reference(const attention_params<Real>& p, const attention_grads<Real>& g) {
  const auto pl = detail::make_attention_plan(p);
  validate_grads(p, g);
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  const auto& ps = p.pos;
  const bool shaw = ps.has_shaw(), t5 = ps.has_t5(), alibi = !ps.alibi.empty();
  const int64_t K = ps.shaw.clip;

  std::vector<double> q(p.q, p.q + T * Hq * D), k(p.k, p.k + S * Hkv * D),
      v(p.v, p.v + S * Hkv * D), dO(g.dout, g.dout + T * Hq * D);
  if (ps.rope.freqs) {
    rope_apply(*ps.rope.freqs, ps.rope.layout, ps.rope.angle, pl.qpos_rope, q.data(), T, Hq, D);
    if (!ps.rope.keys_rotated)
      rope_apply(*ps.rope.freqs, ps.rope.layout, ps.rope.angle, pl.kpos_rope, k.data(), S, Hkv, D);
  }
  std::vector<double> ak(ps.shaw.keys.begin(), ps.shaw.keys.end()),
      av(ps.shaw.values.begin(), ps.shaw.values.end());
  std::vector<double> dq(T * Hq * D, 0.0), dk(S * Hkv * D, 0.0), dv(S * Hkv * D, 0.0);
  std::vector<double> dt5(t5_size(p), 0.0), dak(shaw_size(p), 0.0), dav(shaw_size(p), 0.0),
      dal(Hq, 0.0);
  std::vector<double> P(T * S), dS(T * S);
  std::vector<uint8_t> vis(T * S);

  for (int64_t h = 0; h < Hq; ++h) {
    const int64_t hk = h / pl.group;
    auto c_of = [&](int64_t i, int64_t j) { return shaw_index(pl.qpos[i], pl.kpos[j], K); };
    // Forward: P.
    for (int64_t i = 0; i < T; ++i) {
      const double* qi = &q[(i * Hq + h) * D];
      double* Pi = &P[i * S];
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < S; ++j) {
        vis[i * S + j] = detail::attention_visible(pl, p.causal, p.window, T, S, i, j);
        if (!vis[i * S + j]) continue;
        const double* kj = &k[(j * Hkv + hk) * D];
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += qi[d] * (kj[d] + (shaw ? ak[c_of(i, j) * D + d] : 0));
        double sc = pl.scale * dot;
        if (alibi) sc += alibi_bias(ps.alibi[h], pl.qpos[i], pl.kpos[j], p.causal);
        if (t5)
          sc += double(ps.t5.weights[t5_bucket(pl.kpos[j] - pl.qpos[i], ps.t5.params) * Hq + h]);
        Pi[j] = sc;
        m = std::max(m, sc);
      }
      double l = 0;
      for (int64_t j = 0; j < S; ++j) {
        Pi[j] = vis[i * S + j] ? std::exp(Pi[j] - m) : 0.0;
        l += Pi[j];
      }
      for (int64_t j = 0; j < S; ++j) Pi[j] = l > 0 ? Pi[j] / l : 0.0;
    }
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
        double dp = 0;
        for (int64_t d = 0; d < D; ++d)
          dp += doi[d] * (vj[d] + (shaw ? av[c_of(i, j) * D + d] : 0));
        dS[i * S + j] = dp;
        Di += P[i * S + j] * dp;
      }
      for (int64_t j = 0; j < S; ++j)
        if (vis[i * S + j]) dS[i * S + j] = P[i * S + j] * (dS[i * S + j] - Di);
    }
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
        const int64_t c = shaw ? c_of(i, j) : 0;
        for (int64_t d = 0; d < D; ++d) {
          dvj[d] += pij * doi[d];
          dqi[d] += pl.scale * ds * (kj[d] + (shaw ? ak[c * D + d] : 0));
          dkj[d] += pl.scale * ds * qi[d];
        }
        if (shaw)
          for (int64_t d = 0; d < D; ++d) {
            dav[c * D + d] += pij * doi[d];
            dak[c * D + d] += pl.scale * ds * qi[d];
          }
        if (alibi) dal[h] += ds * alibi_bias(1.0, pl.qpos[i], pl.kpos[j], p.causal);
        if (t5) dt5[t5_bucket(pl.kpos[j] - pl.qpos[i], ps.t5.params) * Hq + h] += ds;
      }
    }
  }
  rope_backward(p, pl, dq.data(), dk.data());
  for (int64_t x = 0; x < T * Hq * D; ++x) g.dq[x] = static_cast<Real>(dq[x]);
  for (int64_t x = 0; x < S * Hkv * D; ++x) {
    g.dk[x] = static_cast<Real>(dk[x]);
    g.dv[x] = static_cast<Real>(dv[x]);
  }
  store_param_grads(p, g, dt5, dak, dav, dal);
}

// ---- tiled ----------------------------------------------------------------------------------
namespace {

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

// The T5 bucket of offset r = kpos - qpos through a table over the visible offset range
// (clamped where buckets saturate, as in the forward), or computed per pair when the range is
// too wide for a table.
struct t5_buckets {
  const t5_params* params = nullptr;
  std::vector<int32_t> lut;
  int64_t lo = 0, hi = 0;
  bool direct = true;
  int64_t operator()(int64_t r) const {
    return direct ? t5_bucket(r, *params) : lut[std::clamp(r, lo, hi) - lo];
  }
};

t5_buckets make_t5_buckets(const t5_params& tp, const detail::attention_plan& pl) {
  t5_buckets b;
  b.params = &tp;
  const int64_t sat = 2 * tp.max_distance + tp.num_buckets;
  if (!detail::visible_offset_range(pl, sat, &b.lo, &b.hi)) return b;
  if (b.hi - b.lo + 1 > (int64_t{1} << 22)) return b;
  b.direct = false;
  b.lut.resize(b.hi - b.lo + 1);
  for (int64_t r = b.lo; r <= b.hi; ++r) b.lut[r - b.lo] = static_cast<int32_t>(t5_bucket(r, tp));
  return b;
}

template <typename Real>
struct bwd_problem {
  const attention_params<Real>* p = nullptr;
  const attention_grads<Real>* g = nullptr;
  const detail::attention_plan* pl = nullptr;
  const Real* q = nullptr;     // (T, Hq, D) rotated
  const Real* k = nullptr;     // (S, Hkv, D) rotated
  Real* dq = nullptr;          // (T, Hq, D): dq' (rotated frame)
  Real* dk = nullptr;          // (S, Hkv, D): dk' (rotated frame)
  const Real* Drow = nullptr;  // (T, Hq): D_i = dO_i . o_i
  int64_t Dp = 0, nkb = 0, Sp = 0, bq = 0;
  t5_buckets t5;
  std::vector<double>* dt5 = nullptr;  // (num_buckets, Hq); item hk writes its heads' columns
  std::vector<double>* dal = nullptr;  // (Hq,)
  std::vector<double>* dak = nullptr;  // (Hkv, C, D): per kv head, reduced in head order
  std::vector<double>* dav = nullptr;  // (Hkv, C, D)
  int64_t C = 0;
  bool simple = false;     // masks are key-index ranges only: no documents, no padded keys
  std::vector<Real> ones;  // (max(R, Bk),) for accumulating products
};

template <typename Real>
struct bwd_scratch {
  std::vector<Real> kT, vT, kr;   // (nkb, Dp, Bk), (nkb, Dp, Bk), (Sp, Dp)
  std::vector<Real> dK, dV;       // (Sp, Dp)
  std::vector<Real> Qs, dO, dQ;   // (R, Dp)
  std::vector<Real> s, dp;        // (R, Bk): scores then P; dO V^T then dS
  std::vector<Real> lse_r, D_r;   // (R,): the rows' lse and D_i
  std::vector<int64_t> jlo, jhi;  // (R,): the block's visible key range per row (simple masks)
  std::vector<Real> qa, doa;      // (R, C) Shaw
  std::vector<double> wds, wp;    // (R, C) Shaw
};

template <typename Real>
void backward_item(const bwd_problem<Real>& pr, bwd_scratch<Real>& sc, int64_t hk) {
  const auto& p = *pr.p;
  const auto& g = *pr.g;
  const auto& pl = *pr.pl;
  const auto& ps = p.pos;
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D, Dp = pr.Dp, G = pl.group;
  const int64_t C = pr.C, K = ps.shaw.clip;
  const bool shaw = C > 0, t5 = ps.has_t5(), alibi = !ps.alibi.empty();
  const Real scale = static_cast<Real>(pl.scale);
  const Real* ones = pr.ones.data();
  const bool simple = pr.simple;
  // Parameter gradients are accumulated only when asked for (Shaw's w sums also feed dq).
  const bool want_params = shaw || (alibi && g.dalibi) || (t5 && g.dt5);

  // Pack this head's keys and values.
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
  double* dak = shaw ? pr.dak->data() + hk * C * D : nullptr;
  double* dav = shaw ? pr.dav->data() + hk * C * D : nullptr;

  const int64_t nqb = (T + pr.bq - 1) / pr.bq;
  for (int64_t qb = 0; qb < nqb; ++qb) {
    const int64_t i0 = qb * pr.bq, i1 = std::min(T, i0 + pr.bq), nq = i1 - i0, R = G * nq;
    auto head_of = [&](int64_t r) { return hk * G + r / nq; };
    auto query_of = [&](int64_t r) { return i0 + r % nq; };
    Real* Qs = sc.Qs.data();
    Real* dO = sc.dO.data();
    Real* dQ = sc.dQ.data();
    bool any_live = false;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = query_of(r), h = head_of(r);
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
    std::fill(dQ, dQ + R * Dp, Real(0));
    if (!any_live) {  // every row sees nothing: no gradient flows
      for (int64_t r = 0; r < R; ++r)
        std::fill_n(pr.dq + (query_of(r) * Hq + head_of(r)) * D, D, Real(0));
      continue;
    }
    if (shaw) {
      // qa = Qs . a^K_c (scale q'_i . a^K_c, Shaw-K's score term), doa = dO_i . a^V_c.
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) {
          Real a = 0, b = 0;
          for (int64_t d = 0; d < D; ++d) {
            a += Qs[r * Dp + d] * ps.shaw.keys[c * D + d];
            b += dO[r * Dp + d] * ps.shaw.values[c * D + d];
          }
          sc.qa[r * C + c] = a;
          sc.doa[r * C + c] = b;
        }
      std::fill(sc.wds.begin(), sc.wds.begin() + R * C, 0.0);
      std::fill(sc.wp.begin(), sc.wp.begin() + R * C, 0.0);
    }

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
      if (simple) {
        // Token-index masks are one key range per row; positions only shift biases.
        for (int64_t r = 0; r < R; ++r) {
          const int64_t i = query_of(r), qi = S - T + i;
          const int64_t hi_tok = p.causal ? qi + 1 : S;
          const int64_t lo_tok = p.window > 0 ? qi - p.window + 1 : 0;
          const bool live = pl.qvalid[i] && !std::isinf(sc.lse_r[r]);
          sc.jlo[r] = std::clamp<int64_t>(lo_tok - j0, 0, nb);
          sc.jhi[r] = live ? std::clamp<int64_t>(hi_tok - j0, sc.jlo[r], nb) : sc.jlo[r];
        }
        if (alibi && !shaw && !t5 && std::is_same_v<Real, float>) {
          // The forward's vectorised ALiBi row (bit-identical to the scalar formula in float).
          for (int64_t r = 0; r < R; ++r) {
            const int64_t i = query_of(r), h = head_of(r);
            if constexpr (std::is_same_v<Real, float>)
              alibi_bias_row(ps.alibi[h], pl.qpos[i], pl.kpos.data() + j0 + sc.jlo[r],
                             sc.jhi[r] - sc.jlo[r], p.causal, s + r * kBk + sc.jlo[r], true);
          }
        } else if (shaw || alibi || t5) {  // score terms beyond q.k, and Shaw-V's term of dP
          for (int64_t r = 0; r < R; ++r) {
            const int64_t i = query_of(r), h = head_of(r), qp = pl.qpos[i];
            for (int64_t jj = sc.jlo[r]; jj < sc.jhi[r]; ++jj) {
              const int64_t kp = pl.kpos[j0 + jj];
              Real x = 0;
              if (shaw) {
                const int64_t c = shaw_index(qp, kp, K);
                x += sc.qa[r * C + c];
                dp[r * kBk + jj] += sc.doa[r * C + c];
              }
              if (alibi) x += static_cast<Real>(alibi_bias(ps.alibi[h], qp, kp, p.causal));
              if (t5) x += ps.t5.weights[pr.t5(kp - qp) * Hq + h];
              s[r * kBk + jj] += x;
            }
          }
        }
        if constexpr (std::is_same_v<Real, float>) {
          detail::softmax_backward_block_f32(R, s, dp, sc.jlo.data(), sc.jhi.data(),
                                             sc.lse_r.data(), sc.D_r.data());
        } else {
          for (int64_t r = 0; r < R; ++r)
            for (int64_t jj = 0; jj < kBk; ++jj) {
              const bool vis = jj >= sc.jlo[r] && jj < sc.jhi[r];
              const Real pij = vis ? std::exp(s[r * kBk + jj] - sc.lse_r[r]) : Real(0);
              dp[r * kBk + jj] = pij * (dp[r * kBk + jj] - sc.D_r[r]);
              s[r * kBk + jj] = pij;
            }
        }
        if (want_params)  // parameter gradients from dS (and P for Shaw-V)
          for (int64_t r = 0; r < R; ++r) {
            const int64_t i = query_of(r), h = head_of(r), qp = pl.qpos[i];
            double dal_h = 0;
            for (int64_t jj = sc.jlo[r]; jj < sc.jhi[r]; ++jj) {
              const int64_t kp = pl.kpos[j0 + jj];
              const double ds = double(dp[r * kBk + jj]);
              if (alibi && g.dalibi) dal_h += ds * alibi_bias(1.0, qp, kp, p.causal);
              if (t5 && g.dt5) (*pr.dt5)[pr.t5(kp - qp) * Hq + h] += ds;
              if (shaw) {
                const int64_t c = shaw_index(qp, kp, K);
                sc.wds[r * C + c] += ds;
                sc.wp[r * C + c] += double(s[r * kBk + jj]);
              }
            }
            if (alibi) (*pr.dal)[h] += dal_h;
          }
      } else {
        // General masks (padding, documents, pad queries): the predicate per pair.
        for (int64_t r = 0; r < R; ++r) {
          const int64_t i = query_of(r), h = head_of(r);
          const Real lse = sc.lse_r[r], Di = sc.D_r[r];
          const int64_t qp = pl.qpos[i];
          Real* srow = s + r * kBk;
          Real* dprow = dp + r * kBk;
          const bool live = !std::isinf(lse);
          double dal_h = 0;
          for (int64_t jj = 0; jj < kBk; ++jj) {
            const int64_t j = j0 + jj;
            if (!live || jj >= nb ||
                !detail::attention_visible(pl, p.causal, p.window, T, S, i, j)) {
              srow[jj] = 0;
              dprow[jj] = 0;
              continue;
            }
            const int64_t kp = pl.kpos[j];
            Real x = srow[jj];
            Real dPv = dprow[jj];
            const int64_t c = shaw ? shaw_index(qp, kp, K) : 0;
            if (shaw) {
              x += sc.qa[r * C + c];
              dPv += sc.doa[r * C + c];
            }
            int64_t bucket = 0;
            if (alibi) x += static_cast<Real>(alibi_bias(ps.alibi[h], qp, kp, p.causal));
            if (t5) {
              bucket = pr.t5(kp - qp);
              x += ps.t5.weights[bucket * Hq + h];
            }
            const Real pij = std::exp(x - lse);
            const Real ds = pij * (dPv - Di);
            srow[jj] = pij;
            dprow[jj] = ds;
            if (alibi) dal_h += double(ds) * alibi_bias(1.0, qp, kp, p.causal);
            if (t5) (*pr.dt5)[bucket * Hq + h] += double(ds);
            if (shaw) {
              sc.wds[r * C + c] += double(ds);
              sc.wp[r * C + c] += double(pij);
            }
          }
          if (alibi) (*pr.dal)[h] += dal_h;
        }
      }
      // 4, 5: dV += P^T dO, dK += dS^T Qs over the block's keys (P and dS read transposed);
      // 6: dQ += dS kr.
      block_gemm(nb, Dp, s, 1, dO, Dp, sc.dV.data() + j0 * Dp, Dp, R, true, ones, kBk);
      block_gemm(nb, Dp, dp, 1, Qs, Dp, sc.dK.data() + j0 * Dp, Dp, R, true, ones, kBk);
      block_gemm(R, Dp, dp, kBk, sc.kr.data() + j0 * Dp, Dp, dQ, Dp, nb, true, ones, 1);
    }

    // dq' = scale (dQ + sum_c w_c a^K_c); Shaw table gradients.
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = query_of(r), h = head_of(r);
      Real* dqr = dQ + r * Dp;
      if (shaw) {
        for (int64_t c = 0; c < C; ++c) {
          const double wds = sc.wds[r * C + c], wp = sc.wp[r * C + c];
          if (wds == 0 && wp == 0) continue;
          for (int64_t d = 0; d < D; ++d) {
            dqr[d] += static_cast<Real>(wds) * ps.shaw.keys[c * D + d];
            dak[c * D + d] += wds * double(Qs[r * Dp + d]);
            dav[c * D + d] += wp * double(dO[r * Dp + d]);
          }
        }
      }
      Real* out = pr.dq + (i * Hq + h) * D;
      for (int64_t d = 0; d < D; ++d) out[d] = scale * dqr[d];
    }
  }
  for (int64_t j = 0; j < S; ++j) {
    std::copy(sc.dK.data() + j * Dp, sc.dK.data() + j * Dp + D, pr.dk + (j * Hkv + hk) * D);
    std::copy(sc.dV.data() + j * Dp, sc.dV.data() + j * Dp + D, g.dv + (j * Hkv + hk) * D);
  }
}

}  // namespace

template <typename Real>
void attention_backward_tiled(const attention_params<Real>& p, const attention_grads<Real>& g) {
  const auto pl = detail::make_attention_plan(p);
  validate_grads(p, g);
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  const auto& ps = p.pos;
  std::vector<double> dt5(t5_size(p), 0.0), dal(Hq, 0.0);
  if (T == 0 || S == 0) {
    std::fill(g.dq, g.dq + T * Hq * D, Real(0));
    if (S > 0) {
      std::fill(g.dk, g.dk + S * Hkv * D, Real(0));
      std::fill(g.dv, g.dv + S * Hkv * D, Real(0));
    }
    std::vector<double> z(shaw_size(p), 0.0);
    store_param_grads(p, g, dt5, z, z, dal);
    return;
  }

  // Hook 1: rotated copies of q and k, as in the forward.
  std::vector<Real> q_rot, k_rot;
  const Real* q = p.q;
  const Real* k = p.k;
  if (ps.rope.freqs) {
    q_rot.assign(p.q, p.q + T * Hq * D);
    rope_apply(*ps.rope.freqs, ps.rope.layout, ps.rope.angle, pl.qpos_rope, q_rot.data(), T, Hq, D);
    q = q_rot.data();
    if (!ps.rope.keys_rotated) {
      k_rot.assign(p.k, p.k + S * Hkv * D);
      rope_apply(*ps.rope.freqs, ps.rope.layout, ps.rope.angle, pl.kpos_rope, k_rot.data(), S, Hkv,
                 D);
      k = k_rot.data();
    }
  }
  // D_i = dO_i . o_i (FlashAttention-2's rowsum(dO * O)), accumulated in double.
  std::vector<Real> Drow(T * Hq);
  for (int64_t x = 0; x < T * Hq; ++x) {
    double acc = 0;
    for (int64_t d = 0; d < D; ++d) acc += double(g.dout[x * D + d]) * double(g.out[x * D + d]);
    Drow[x] = static_cast<Real>(acc);
  }

  bwd_problem<Real> pr;
  pr.p = &p, pr.g = &g, pr.pl = &pl, pr.q = q, pr.k = k, pr.dq = g.dq, pr.dk = g.dk;
  pr.Drow = Drow.data();
  pr.Dp = (D + 7) / 8 * 8;
  pr.nkb = (S + kBk - 1) / kBk;
  pr.Sp = pr.nkb * kBk;
  pr.bq = std::max<int64_t>(1, kBq / pl.group);
  const int64_t R = pl.group * pr.bq;
  if (ps.has_t5()) pr.t5 = make_t5_buckets(ps.t5.params, pl);
  pr.C = ps.has_shaw() ? 2 * ps.shaw.clip + 1 : 0;
  pr.simple = pl.qdoc.empty() &&
              std::all_of(pl.kvalid.begin(), pl.kvalid.end(), [](uint8_t x) { return x != 0; });
  std::vector<double> dak(Hkv * pr.C * D, 0.0), dav(Hkv * pr.C * D, 0.0);
  pr.dt5 = &dt5;
  pr.dal = &dal;
  pr.dak = &dak;
  pr.dav = &dav;
  pr.ones.assign(std::max(R, kBk), Real(1));
  checked_bytes("attention backward scratch", static_cast<unsigned long long>(pr.Sp),
                static_cast<unsigned long long>(pr.Dp), 5, sizeof(Real));
  if (pr.C > 0)
    checked_bytes("attention backward Shaw scratch", static_cast<unsigned long long>(R),
                  static_cast<unsigned long long>(pr.C), 4, sizeof(double));

  const int nth = static_cast<int>(std::min<int64_t>(num_threads(), Hkv));
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
  }
  parallel_for(nth, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      auto [b, e] = thread_range(Hkv, static_cast<int>(t), nth);
      for (int64_t hk = b; hk < e; ++hk) backward_item(pr, scratch[t], hk);
    }
  });

  rope_backward(p, pl, g.dq, g.dk);
  // Shaw tables: the per-kv-head partials in head order.
  std::vector<double> dak_sum(shaw_size(p), 0.0), dav_sum(shaw_size(p), 0.0);
  for (int64_t hk = 0; hk < Hkv; ++hk)
    for (int64_t x = 0; x < shaw_size(p); ++x) {
      dak_sum[x] += dak[hk * pr.C * D + x];
      dav_sum[x] += dav[hk * pr.C * D + x];
    }
  store_param_grads(p, g, dt5, dak_sum, dav_sum, dal);
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
