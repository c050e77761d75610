// CoPE, contextual position encoding (Golovneva et al. 2024, sec. 3): a scheme reached by name
// whose tensor `cope` (npos, D) holds the position embeddings, shared by the heads, with their
// gradient (npos a free extent: cope_npos, 0 by default, is checked against it). Positions are
// counted by sigmoid gates over the content logits and interpolated position embeddings are
// added to the logits; they depend on q and k, so CoPE is no q/k transform and no bias of (qpos,
// kpos): it has a path of its own (named_path). Its specification is the plain double
// computation of this file (a full score row per query, as the reference of the other schemes),
// which the reference entry points and float64 calls run; float32 calls to the tiled entry points
// run the tiled form below (cope_forward_tiled, cope_backward_tiled). Causal only; alone in a
// call. The model's hook: one (npos, D) table per layer (cope_npos, 64 in the lab's model). Per
// head h and query i, with a_ij = scale q_i . k_j on visible pairs:
//   g_ij = sigmoid(a_ij)                          gates (0 on masked pairs)
//   p_ij = sum_{t >= j} g_it                      = sum over the visible keys t = j..i
//   z_ij = (1 - w) q_i . e[f] + w q_i . e[f + 1],  f = floor(p'), w = p' - f, p' = min(p, P - 1)
//   s_ij = a_ij + z_ij,  softmax, out = sum_j P_ij v_j
// Backward, given dS_ij = P_ij (dP_ij - D_i) as for every scheme (attention.hpp):
//   dZ_i[f] += dS_ij (1 - w),  dZ_i[f + 1] += dS_ij w      (Z_i[t] = q_i . e[t])
//   dp_ij = dS_ij (Z_i[f + 1] - Z_i[f]) for p < P - 1, else 0
//   dg_it = sum_{j <= t} dp_ij;  da_it = dS_it + dg_it g_it (1 - g_it)
//   dq_i = scale sum_j da_ij k_j + sum_t dZ_i[t] e[t];  dk_j += scale da_ij q_i;
//   de[t] += dZ_i[t] q_i;  dv_j += P_ij dO_i
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention_plan.hpp"
#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"

namespace posenc::detail {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One (head, query) row: content logits, visibility, gates, positions, interpolation.
struct cope_row {
  std::vector<double> a, g, pos, z, Z;  // (S,) x 4, Z (P,)
  std::vector<uint8_t> vis;             // (S,)
  std::vector<int64_t> f;               // (S,) floor of the clamped position
  std::vector<double> w;                // (S,) its fraction
  bool any = false;
};

struct cope_inputs {
  std::vector<double> q, k, v, e;  // (T, Hq, D), (S, Hkv, D) x 2, (P, D)
  int64_t P = 0;
};

// The rows npos of the call's embeddings c.tensors[0] (npos, D), checked: cope_npos (0: any)
// agrees, npos in [1, 2^20], every value finite.
template <typename Real>
int64_t cope_table_rows(const named_call<Real>& c, int64_t D) {
  const std::span<const Real> e = c.tensors[0];
  const int64_t P = D > 0 ? static_cast<int64_t>(e.size()) / D : 0;
  if (c.args[0] != 0 && c.args[0] != double(P))
    fail("cope must have cope_npos = {} rows, got shape ({}, {})", c.args[0], P, D);
  if (P < 1 || P > (int64_t(1) << 20))
    fail("cope must have npos in [1, 2^20] rows (position embeddings), got {}", P);
  for (size_t x = 0; x < e.size(); ++x)
    if (!std::isfinite(double(e[x])))
      fail("cope must be finite, got {} at ({}, {})", double(e[x]), x / D, x % D);
  return P;
}

// q, k, v of the call and the embeddings of c (its tensor cope, (npos, D): finite, npos in
// [1, 2^20], checked here), in double.
template <typename Real>
cope_inputs cope_load(const attention_params<Real>& p, const named_call<Real>& c) {
  const std::span<const Real> e = c.tensors[0];
  const int64_t P = cope_table_rows(c, p.D);
  cope_inputs in;
  in.q.assign(p.q, p.q + p.T * p.Hq * p.D);
  in.k.resize(p.S * p.Hkv * p.D);
  in.v.resize(p.S * p.Hkv * p.D);
  for (int64_t j = 0; j < p.S; ++j)  // token-major copies, whatever p's layout
    for (int64_t hk = 0; hk < p.Hkv; ++hk) {
      const int64_t x = (j * p.Hkv + hk) * p.D, y = kv_offset(p, j, hk);
      copy_key(p, j, hk, in.k.data() + x);
      std::copy(p.v + y, p.v + y + p.D, in.v.begin() + x);
    }
  in.e.assign(e.begin(), e.end());
  in.P = P;
  return in;
}

template <typename Real>
void cope_fill_row(const attention_params<Real>& p, const attention_plan& pl, const cope_inputs& in,
                   int64_t h, int64_t i, cope_row& r) {
  const int64_t S = p.S, D = p.D, P = in.P, hk = h / pl.group;
  r.a.assign(S, 0.0), r.g.assign(S, 0.0), r.pos.assign(S, 0.0), r.z.assign(S, 0.0);
  r.vis.assign(S, 0), r.f.assign(S, 0), r.w.assign(S, 0.0), r.Z.assign(P, 0.0);
  r.any = false;
  const double* qi = &in.q[(i * p.Hq + h) * D];
  for (int64_t j = 0; j < S; ++j) {
    r.vis[j] = attention_visible(pl, p.causal, p.window, p.T, S, i, j);
    if (!r.vis[j]) continue;
    r.any = true;
    const double* kj = &in.k[(j * p.Hkv + hk) * D];
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
    r.a[j] = pl.scale * dot;
    r.g[j] = 1 / (1 + std::exp(-r.a[j]));
  }
  for (int64_t t = 0; t < P; ++t) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += qi[d] * in.e[t * D + d];
    r.Z[t] = dot;
  }
  double run = 0;  // suffix sum of the gates
  for (int64_t j = S - 1; j >= 0; --j) {
    run += r.g[j];
    if (!r.vis[j]) continue;
    r.pos[j] = run;
    const double pc = std::min(run, double(P - 1));
    const auto f = static_cast<int64_t>(std::floor(pc));
    r.f[j] = f;
    r.w[j] = pc - double(f);
    const int64_t c = std::min(f + 1, P - 1);
    r.z[j] = (1 - r.w[j]) * r.Z[f] + r.w[j] * r.Z[c];
  }
}

// Softmax of s = a + z over the visible keys: probabilities into P (S,), returns lse.
double cope_softmax(const cope_row& r, std::vector<double>& prob) {
  const auto S = static_cast<int64_t>(r.a.size());
  prob.assign(S, 0.0);
  double m = kNegInf;
  for (int64_t j = 0; j < S; ++j)
    if (r.vis[j]) m = std::max(m, r.a[j] + r.z[j]);
  if (m == kNegInf) return kNegInf;
  double l = 0;
  for (int64_t j = 0; j < S; ++j)
    if (r.vis[j]) l += prob[j] = std::exp(r.a[j] + r.z[j] - m);
  for (int64_t j = 0; j < S; ++j) prob[j] /= l;
  return m + std::log(l);
}

template <typename Real>
void cope_forward(const attention_params<Real>& p, const named_call<Real>& c) {
  const auto pl = make_attention_plan(p);
  const auto in = cope_load(p, c);
  const int64_t T = p.T, Hq = p.Hq, D = p.D;
  // Rows are independent: the heads split over the threads, each row the same arithmetic (the
  // bits do not depend on the thread count). out_i = sum_j P_ij v_j accumulates key by key into
  // D sums, in the order of j for every entry.
  parallel_for(Hq, [&](int64_t h0, int64_t h1) {
    cope_row r;
    std::vector<double> prob, o(D);
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t hk = h / pl.group;
      for (int64_t i = 0; i < T; ++i) {
        cope_fill_row(p, pl, in, h, i, r);
        const double lse = cope_softmax(r, prob);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < p.S; ++j) {
          if (prob[j] == 0) continue;
          const double* vj = &in.v[(j * p.Hkv + hk) * D];
          for (int64_t d = 0; d < D; ++d) o[d] += prob[j] * vj[d];
        }
        Real* out = p.out + (i * Hq + h) * D;
        for (int64_t d = 0; d < D; ++d) out[d] = static_cast<Real>(o[d]);
        if (p.lse) p.lse[i * Hq + h] = static_cast<Real>(lse);
      }
    }
  });
}

// The backward's outputs present (both forms).
template <typename Real>
void cope_check_grads(const attention_params<Real>& p, const attention_grads<Real>& g) {
  if (p.T > 0 && (!g.out || !g.lse || !g.dout || !g.dq))
    fail("attention backward: out, lse, dout and dq must not be null when T = {}", p.T);
  if (p.S > 0 && (!g.dk || !g.dv))
    fail("attention backward: dk and dv must not be null when S = {}", p.S);
}

template <typename Real>
void cope_backward(const attention_params<Real>& p, const attention_grads<Real>& g,
                   const named_call<Real>& c) {
  const auto pl = make_attention_plan(p);
  cope_check_grads(p, g);
  const auto in = cope_load(p, c);
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D, P = in.P;
  std::vector<double> dq(T * Hq * D, 0.0), dk(S * Hkv * D, 0.0), dv(S * Hkv * D, 0.0),
      de(P * D, 0.0);
  cope_row r;
  std::vector<double> prob, dS(S), dZ(P), dp(S);
  for (int64_t h = 0; h < Hq; ++h) {
    const int64_t hk = h / pl.group;
    for (int64_t i = 0; i < T; ++i) {
      cope_fill_row(p, pl, in, h, i, r);
      (void)cope_softmax(r, prob);
      if (!r.any) continue;
      const double* qi = &in.q[(i * Hq + h) * D];
      const Real* doi = g.dout + (i * Hq + h) * D;
      double Di = 0;
      for (int64_t j = 0; j < S; ++j) {
        dS[j] = 0;
        if (!r.vis[j]) continue;
        const double* vj = &in.v[(j * Hkv + hk) * D];
        double x = 0;
        for (int64_t d = 0; d < D; ++d) x += double(doi[d]) * vj[d];
        dS[j] = x;
        Di += prob[j] * x;
      }
      std::fill(dZ.begin(), dZ.end(), 0.0);
      for (int64_t j = 0; j < S; ++j) {
        dp[j] = 0;
        if (!r.vis[j]) continue;
        dS[j] = prob[j] * (dS[j] - Di);
        const int64_t f = r.f[j], c = std::min(f + 1, P - 1);
        dZ[f] += dS[j] * (1 - r.w[j]);
        dZ[c] += dS[j] * r.w[j];
        if (r.pos[j] < double(P - 1)) dp[j] = dS[j] * (r.Z[c] - r.Z[f]);
      }
      double* dqi = &dq[(i * Hq + h) * D];
      double dg = 0;  // prefix sum of dp: dg_t = sum_{j <= t} dp_j
      for (int64_t t = 0; t < S; ++t) {
        dg += dp[t];
        if (!r.vis[t]) continue;
        const double da = dS[t] + dg * r.g[t] * (1 - r.g[t]);
        const double* kt = &in.k[(t * Hkv + hk) * D];
        double* dkt = &dk[(t * Hkv + hk) * D];
        double* dvt = &dv[(t * Hkv + hk) * D];
        for (int64_t d = 0; d < D; ++d) {
          dqi[d] += pl.scale * da * kt[d];
          dkt[d] += pl.scale * da * qi[d];
          dvt[d] += prob[t] * double(doi[d]);
        }
      }
      for (int64_t t = 0; t < P; ++t) {
        if (dZ[t] == 0) continue;
        for (int64_t d = 0; d < D; ++d) {
          dqi[d] += dZ[t] * in.e[t * D + d];
          de[t * D + d] += dZ[t] * qi[d];
        }
      }
    }
  }
  for (int64_t x = 0; x < T * Hq * D; ++x) g.dq[x] = static_cast<Real>(dq[x]);
  for (int64_t x = 0; x < S * Hkv * D; ++x) {
    g.dk[x] = static_cast<Real>(dk[x]);
    g.dv[x] = static_cast<Real>(dv[x]);
  }
  if (Real* dcope = c.grads[0])
    for (int64_t x = 0; x < P * D; ++x) dcope[x] = static_cast<Real>(de[x]);
}

// The float32 tiled path. Per query head h, a tile of kCopeRows queries walks its keys in strips
// of kCopeKeys from the last visible key down to 0, so that each row's position p_ij, a suffix
// sum of its gates, is a running sum carried from strip to strip (in double), with no pass before
// and no cancellation; the online softmax merges the strips as it merges key blocks in any order.
// The products are gemm_f32 (the forward's Highway micro-kernel): a = (scale q) K^T,
// Z = q E^T (the query's score against each position embedding, once a row) and O = P V.
// Positions never decrease towards key 0 (gates are >= 0): once p_ij >= P - 1 a row is
// saturated, every earlier key takes z = Z[P - 1] and no gate is computed; only the ~P / g
// keys nearest the query take the scalar gate and interpolation. Rows are independent: the bits
// do not depend on the thread count. The backward walks the same strips in the same order, so it
// recomputes the forward's scores bit for bit, takes P from the saved lse and accumulates, per kv
// head (the heads in parallel): dv = P^T dO, dk = dA^T (scale q), dq = scale dA K + dZ E, and
// de = dZ^T q in double. dA = dS on saturated pairs; on the others dA = dS + g (1 - g) dg with
// dg_it = sum_{j <= t} dp_ij, a prefix sum in the direction opposite to the walk: the pairs'
// dp, g (1 - g) and keys are kept per row and the correction added after the walk.
constexpr int64_t kCopeRows = 32, kCopeKeys = 256;
constexpr float kCopeNegInfF = -std::numeric_limits<float>::infinity();

int64_t cope_round8(int64_t n) {
  return (n + 7) / 8 * 8;
}

// The call's operands in the layouts the products read, zero-padded to multiples of 8.
struct cope_f32_input {
  int64_t T = 0, S = 0, Sp = 0, Hq = 0, Hkv = 0, D = 0, Dp = 0, P = 0, Pp = 0, G = 1;
  double scale = 1;
  bool simple = true;        // causal alone: key j visible to query i iff j <= S - T + i
  std::vector<float> kt;     // (Hkv, D, Sp): K^T per kv head
  std::vector<float> v;      // (Hkv, Sp, Dp)
  std::vector<float> kr;     // (Hkv, Sp, Dp): K rows (the gates' products, the backward)
  std::vector<float> vt;     // (Hkv, D, Sp): V^T (backward)
  std::vector<float> et;     // (D, Pp): E^T
  const float* e = nullptr;  // (P, D): E, the call's tensor
};

cope_f32_input cope_f32_load(const attention_params<float>& p, const attention_plan& pl,
                             const named_call<float>& c, bool backward) {
  cope_f32_input in;
  const std::span<const float> e = c.tensors[0];
  in.T = p.T, in.S = p.S, in.Hq = p.Hq, in.Hkv = p.Hkv, in.D = p.D, in.G = pl.group;
  in.P = cope_table_rows(c, p.D);
  in.e = e.data();
  in.Sp = cope_round8(p.S), in.Dp = cope_round8(p.D), in.Pp = cope_round8(in.P);
  in.scale = pl.scale;
  in.simple = p.window == 0 && pl.qdoc.empty() &&
              std::all_of(pl.qvalid.begin(), pl.qvalid.end(), [](uint8_t x) { return x != 0; }) &&
              std::all_of(pl.kvalid.begin(), pl.kvalid.end(), [](uint8_t x) { return x != 0; });
  const int64_t S = in.S, Sp = in.Sp, D = in.D, Dp = in.Dp;
  in.kt.assign(in.Hkv * D * Sp, 0.f);
  in.v.assign(in.Hkv * Sp * Dp, 0.f);
  in.kr.assign(in.Hkv * Sp * Dp, 0.f);
  if (backward) in.vt.assign(in.Hkv * D * Sp, 0.f);
  std::vector<float> row(D);
  for (int64_t hk = 0; hk < in.Hkv; ++hk)
    for (int64_t j = 0; j < S; ++j) {
      copy_key(p, j, hk, row.data());
      const float* vj = p.v + kv_offset(p, j, hk);
      for (int64_t d = 0; d < D; ++d) in.kt[(hk * D + d) * Sp + j] = row[d];
      std::copy_n(vj, D, &in.v[(hk * Sp + j) * Dp]);
      std::copy_n(row.data(), D, &in.kr[(hk * Sp + j) * Dp]);
      if (!backward) continue;
      for (int64_t d = 0; d < D; ++d) in.vt[(hk * D + d) * Sp + j] = vj[d];
    }
  in.et.assign(D * in.Pp, 0.f);
  for (int64_t t = 0; t < in.P; ++t)
    for (int64_t d = 0; d < D; ++d) in.et[d * in.Pp + t] = e[t * D + d];
  return in;
}

// One row's walk: the carried suffix sum of the gates and whether it reached P - 1.
struct cope_carry {
  double sum = 0;
  bool sat = false;
};

// A pair of a row that was not saturated, for the backward: its key, what dS multiplies into
// dp (Z[f + 1] - Z[f], 0 once clamped), g (1 - g), and the interpolation (f, w) for dZ.
struct cope_open_pair {
  int64_t j, f;
  float zdiff, gp, w, dp;
};

// Scores of one row of a strip, keys [j0, j0 + n) walked down from the last: s[jj] = a + z, -inf
// where not visible (and on the padding up to nc). a: the row of (scale q) K^T; Z: the row of
// q E^T. open (backward): the pairs walked before the row saturated (the one that saturates it
// included) are appended, in walk order. Returns the last index of the saturated keys [0, jj]
// (-1: none).
int64_t cope_row_scores(const cope_f32_input& in, const attention_plan& pl,
                        const attention_params<float>& p, int64_t i, int64_t j0, int64_t n,
                        int64_t nc, const float* a, const float* q, const float* kr, const float* Z,
                        cope_carry& cr, float* s, std::vector<cope_open_pair>* open) {
  const int64_t P = in.P, last = in.S - in.T + i;
  const float zsat = Z[P - 1];
  const auto visible = [&](int64_t j) {
    return in.simple ? j <= last : attention_visible(pl, p.causal, p.window, in.T, in.S, i, j);
  };
  for (int64_t jj = nc - 1; jj >= n; --jj) s[jj] = kCopeNegInfF;
  int64_t jj = n - 1;
  for (; jj >= 0 && !cr.sat; --jj) {  // the keys nearest the query: gates and interpolation
    const int64_t j = j0 + jj;
    if (!visible(j)) {
      s[jj] = kCopeNegInfF;
      continue;
    }
    // a in double from the float32 q and k: the positions sum these gates, so their error would
    // otherwise be the float32 product's, (D + 11) u A, times up to P gates.
    const double x = in.scale * dot_f64(q, kr + j * in.Dp, in.D), ex = std::exp(-std::abs(x));
    const double g = x >= 0 ? 1 / (1 + ex) : ex / (1 + ex);  // sigmoid without overflow
    cr.sum += g;
    const double pc = std::min(cr.sum, double(P - 1));
    cr.sat = cr.sum >= double(P - 1);
    const auto f = static_cast<int64_t>(std::floor(pc));
    const auto w = static_cast<float>(pc - double(f));
    const int64_t c = std::min(f + 1, P - 1);
    s[jj] = static_cast<float>(x + double((1 - w) * Z[f] + w * Z[c]));
    if (open)
      open->push_back({j, f, cr.sat ? 0.f : Z[c] - Z[f], static_cast<float>(g * (1 - g)), w, 0.f});
  }
  if (in.simple) {  // saturated, every key visible (all below the last)
    for (int64_t k = 0; k <= jj; ++k) s[k] = a[k] + zsat;
    return jj;
  }
  for (int64_t k = 0; k <= jj; ++k) s[k] = visible(j0 + k) ? a[k] + zsat : kCopeNegInfF;
  return jj;
}

// One tile's problem: the query rows [i0, i0 + rows) of head h, their scaled copies and Z.
struct cope_tile {
  int64_t h = 0, hk = 0, i0 = 0, rows = 0, jend = 0;  // keys [0, jend) are visible to some row
  std::vector<float> qs, Z, C, Pb;                    // (R, Dp), (R, Pp), (R, K) x 2
  std::vector<cope_carry> carry;
  std::vector<int64_t> sat_end;  // (R,): each row's saturated keys [0, sat_end] in the strip

  void start(const cope_f32_input& in, const attention_params<float>& p, int64_t h_, int64_t i0_) {
    h = h_, hk = h_ / in.G, i0 = i0_, rows = std::min(kCopeRows, in.T - i0);
    jend = std::min(in.S, in.S - in.T + i0 + rows);  // CoPE is causal
    qs.assign(kCopeRows * in.Dp, 0.f);
    Z.resize(kCopeRows * in.Pp);
    C.resize(kCopeRows * kCopeKeys), Pb.resize(kCopeRows * kCopeKeys);
    carry.assign(kCopeRows, {});
    sat_end.assign(kCopeRows, -1);
    const float* q0 = p.q + (i0 * in.Hq + h) * in.D;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < in.D; ++d)
        qs[r * in.Dp + d] = static_cast<float>(in.scale * q0[r * in.Hq * in.D + d]);
    gemm_f32(rows, in.Pp, q0, in.Hq * in.D, in.et.data(), in.Pp, Z.data(), in.Pp, in.D, nullptr);
  }

  // Strip [j0, j0 + n): the rows' scores into Pb (kCopeKeys a row), nc = n rounded up to 8.
  void scores(const cope_f32_input& in, const attention_plan& pl, const attention_params<float>& p,
              int64_t j0, int64_t n, int64_t nc, std::vector<std::vector<cope_open_pair>>* open) {
    gemm_f32(rows, nc, qs.data(), in.Dp, &in.kt[hk * in.D * in.Sp + j0], in.Sp, C.data(), kCopeKeys,
             in.D, nullptr);
    for (int64_t r = 0; r < rows; ++r)
      sat_end[r] = cope_row_scores(in, pl, p, i0 + r, j0, n, nc, &C[r * kCopeKeys],
                                   p.q + ((i0 + r) * in.Hq + h) * in.D, &in.kr[hk * in.Sp * in.Dp],
                                   &Z[r * in.Pp], carry[r], &Pb[r * kCopeKeys],
                                   open ? &(*open)[r] : nullptr);
  }
};

void cope_forward_tiled(const attention_params<float>& p, const named_call<float>& c) {
  const auto pl = make_attention_plan(p);
  const auto in = cope_f32_load(p, pl, c, false);
  const int64_t nqb = (in.T + kCopeRows - 1) / kCopeRows, Dp = in.Dp;
  parallel_for(in.Hq * nqb, [&](int64_t b, int64_t e) {
    cope_tile tl;
    std::vector<float> O(kCopeRows * Dp), m(kCopeRows), l(kCopeRows), beta(kCopeRows);
    for (int64_t x = b; x < e; ++x) {
      tl.start(in, p, x / nqb, x % nqb * kCopeRows);
      std::fill(O.begin(), O.end(), 0.f);
      std::fill(m.begin(), m.end(), kCopeNegInfF), std::fill(l.begin(), l.end(), 0.f);
      for (int64_t j0 = (tl.jend - 1) / kCopeKeys * kCopeKeys; tl.jend > 0 && j0 >= 0;
           j0 -= kCopeKeys) {
        const int64_t n = std::min(kCopeKeys, tl.jend - j0), nc = cope_round8(n);
        tl.scores(in, pl, p, j0, n, nc, nullptr);
        for (int64_t r = 0; r < tl.rows; ++r) {  // the online softmax over the strips
          float* s = &tl.Pb[r * kCopeKeys];
          const float mn = std::max(m[r], row_max_f32(s, nc));
          if (mn == kCopeNegInfF) {  // nothing visible yet: P = 0, O stays 0
            std::fill(s, s + nc, 0.f), beta[r] = 1;
            continue;
          }
          beta[r] = std::exp(m[r] - mn);
          l[r] = l[r] * beta[r] + exp_row_f32(s, nc, mn);
          m[r] = mn;
        }
        gemm_f32(tl.rows, Dp, tl.Pb.data(), kCopeKeys, &in.v[(tl.hk * in.Sp + j0) * Dp], Dp,
                 O.data(), Dp, nc, beta.data());
      }
      for (int64_t r = 0; r < tl.rows; ++r) {
        const int64_t i = tl.i0 + r;
        float* out = p.out + (i * in.Hq + tl.h) * in.D;
        for (int64_t d = 0; d < in.D; ++d) out[d] = l[r] > 0 ? O[r * Dp + d] / l[r] : 0.f;
        if (p.lse)
          p.lse[i * in.Hq + tl.h] =
              l[r] > 0 ? static_cast<float>(double(m[r]) + std::log(double(l[r]))) : kCopeNegInfF;
      }
    }
  });
}

// A bound on the term CoPE adds to a score: |z_ij| <= |q_i| max_t |e_t|.
double cope_score_bound(const std::vector<std::vector<double>>& t, int64_t D, double qmax) {
  double emax = 0;
  for (size_t r = 0; r + D <= t[0].size(); r += D) {
    double n = 0;
    for (int64_t d = 0; d < D; ++d) n += t[0][r + d] * t[0][r + d];
    emax = std::max(emax, std::sqrt(n));
  }
  return qmax * emax;
}

// One kv head's share of the float32 backward: its query heads' tiles in order, dk and dv in
// float32 rows (Sp, Dp), de in double (P, D); the scratch of a tile.
struct cope_bwd {
  const cope_f32_input& in;
  const attention_plan& pl;
  const attention_params<float>& p;
  const attention_grads<float>& g;
  cope_tile tl;
  std::vector<float> dO, dP, dqa, lse, Drow, ones;
  std::vector<double> dZ, dq;
  std::vector<std::vector<cope_open_pair>> open;
  std::vector<size_t> first;  // (R,): each row's first open pair of the strip

  cope_bwd(const cope_f32_input& in_, const attention_plan& pl_, const attention_params<float>& p_,
           const attention_grads<float>& g_)
      : in(in_),
        pl(pl_),
        p(p_),
        g(g_),
        dO(kCopeRows * in.Dp),
        dP(kCopeRows * kCopeKeys),
        dqa(kCopeRows * in.Dp),
        lse(kCopeRows),
        Drow(kCopeRows),
        ones(std::max(kCopeRows, kCopeKeys), 1.f),
        dZ(kCopeRows * in.P),
        dq(in.D),
        open(kCopeRows),
        first(kCopeRows) {}

  // dS of strip [j0, j0 + nc) in place of P (tl.Pb keeps P, dP becomes dS), and dZ, dp.
  void strip_grads(int64_t j0, int64_t nc) {
    const int64_t P = in.P;
    gemm_f32(tl.rows, nc, dO.data(), in.Dp, &in.vt[tl.hk * in.D * in.Sp + j0], in.Sp, dP.data(),
             kCopeKeys, in.D, nullptr);
    for (int64_t r = 0; r < tl.rows; ++r) {
      float *pr = &tl.Pb[r * kCopeKeys], *ds = &dP[r * kCopeKeys];
      if (lse[r] == kCopeNegInfF) {  // sees nothing: P = dS = 0
        std::fill(pr, pr + nc, 0.f), std::fill(ds, ds + nc, 0.f);
        continue;
      }
      (void)exp_row_f32(pr, nc, lse[r]);
      for (int64_t jj = 0; jj < nc; ++jj) ds[jj] = pr[jj] * (ds[jj] - Drow[r]);
      double* dz = &dZ[r * P];
      double sat = 0;
      for (int64_t jj = 0; jj <= tl.sat_end[r]; ++jj) sat += ds[jj];
      dz[P - 1] += sat;  // saturated pairs: z = Z[P - 1]
      for (size_t x = first[r]; x < open[r].size(); ++x) {
        cope_open_pair& o = open[r][x];
        const double d = ds[o.j - j0];
        o.dp = static_cast<float>(d * o.zdiff);
        dz[o.f] += d * (1 - double(o.w));
        dz[std::min(o.f + 1, P - 1)] += d * double(o.w);
      }
    }
  }

  void tile(int64_t h, int64_t i0, float* dk, float* dv, double* de) {
    const int64_t Dp = in.Dp, D = in.D, K = kCopeKeys;
    tl.start(in, p, h, i0);
    std::fill(dO.begin(), dO.end(), 0.f), std::fill(dqa.begin(), dqa.end(), 0.f);
    std::fill(dZ.begin(), dZ.end(), 0.0);
    for (int64_t r = 0; r < tl.rows; ++r) {
      const int64_t x = ((i0 + r) * in.Hq + h) * D;
      double dd = 0;
      for (int64_t d = 0; d < D; ++d) dd += double(g.dout[x + d]) * g.out[x + d];
      std::copy_n(g.dout + x, D, &dO[r * Dp]);
      lse[r] = g.lse[(i0 + r) * in.Hq + h], Drow[r] = static_cast<float>(dd);
      open[r].clear();
    }
    for (int64_t j0 = (tl.jend - 1) / K * K; tl.jend > 0 && j0 >= 0; j0 -= K) {
      const int64_t n = std::min(K, tl.jend - j0), nc = cope_round8(n);
      for (int64_t r = 0; r < tl.rows; ++r) first[r] = open[r].size();
      tl.scores(in, pl, p, j0, n, nc, &open);
      strip_grads(j0, nc);
      gemm_f32(nc, Dp, tl.Pb.data(), 1, dO.data(), Dp, dv + j0 * Dp, Dp, tl.rows, ones.data(), K);
      gemm_f32(tl.rows, Dp, dP.data(), K, &in.kr[(tl.hk * in.Sp + j0) * Dp], Dp, dqa.data(), Dp, nc,
               ones.data());
      gemm_f32(nc, Dp, dP.data(), 1, tl.qs.data(), Dp, dk + j0 * Dp, Dp, tl.rows, ones.data(), K);
    }
    for (int64_t r = 0; r < tl.rows; ++r) finish_row(h, r, dk, de);
  }

  // Row r: the gates' share of dA (dg, a prefix sum over the open pairs in key order), then dq
  // and de.
  void finish_row(int64_t h, int64_t r, float* dk, double* de) {
    const int64_t Dp = in.Dp, D = in.D, P = in.P, i = tl.i0 + r;
    float* dqr = &dqa[r * Dp];
    const float* qsr = &tl.qs[r * Dp];
    double dg = 0;
    for (auto o = open[r].rbegin(); o != open[r].rend(); ++o) {
      dg += o->dp;
      const auto delta = static_cast<float>(dg * o->gp);
      if (delta == 0) continue;
      const float* kj = &in.kr[(tl.hk * in.Sp + o->j) * Dp];
      float* dkj = dk + o->j * Dp;
      for (int64_t d = 0; d < D; ++d) dqr[d] += delta * kj[d], dkj[d] += delta * qsr[d];
    }
    const float* q = p.q + (i * in.Hq + h) * D;
    const double* dz = &dZ[r * P];
    for (int64_t d = 0; d < D; ++d) dq[d] = in.scale * double(dqr[d]);
    for (int64_t t = 0; t < P; ++t) {
      if (dz[t] == 0) continue;
      add_scaled_row_f64(dq.data(), dz[t], &in.e[t * D], D);
      add_scaled_row_f64(de + t * D, dz[t], q, D);
    }
    for (int64_t d = 0; d < D; ++d) g.dq[(i * in.Hq + h) * D + d] = static_cast<float>(dq[d]);
  }
};

void cope_backward_tiled(const attention_params<float>& p, const attention_grads<float>& g,
                         const named_call<float>& c) {
  const auto pl = make_attention_plan(p);
  cope_check_grads(p, g);
  const auto in = cope_f32_load(p, pl, c, true);
  const int64_t nqb = (in.T + kCopeRows - 1) / kCopeRows, Sp = in.Sp, Dp = in.Dp, D = in.D;
  std::vector<double> de(in.Hkv * in.P * D, 0.0);
  // The kv heads in parallel, each owning its dk, dv and de: the bits do not depend on the
  // thread count.
  parallel_for(in.Hkv, [&](int64_t b, int64_t e) {
    cope_bwd bw(in, pl, p, g);
    std::vector<float> dk(Sp * Dp), dv(Sp * Dp);
    for (int64_t hk = b; hk < e; ++hk) {
      std::fill(dk.begin(), dk.end(), 0.f), std::fill(dv.begin(), dv.end(), 0.f);
      for (int64_t h = hk * in.G; h < (hk + 1) * in.G; ++h)
        for (int64_t qb = 0; qb < nqb; ++qb)
          bw.tile(h, qb * kCopeRows, dk.data(), dv.data(), &de[hk * in.P * D]);
      for (int64_t j = 0; j < in.S; ++j) {
        std::copy_n(&dk[j * Dp], D, g.dk + (j * in.Hkv + hk) * D);
        std::copy_n(&dv[j * Dp], D, g.dv + (j * in.Hkv + hk) * D);
      }
    }
  });
  if (float* dcope = c.grads[0])
    for (int64_t x = 0; x < in.P * D; ++x) {
      double sum = 0;
      for (int64_t hk = 0; hk < in.Hkv; ++hk) sum += de[hk * in.P * D + x];
      dcope[x] = static_cast<float>(sum);
    }
}

// The float32 tiled path's errors (named_path::tiled_errors), with B = |q| max_t |e_t|
// (cope_score_bound), A >= |a_ij|, unit roundoff u and ud = 2^-53, to first order:
//   gate: a in double from the float32 q and k (exact products, a sum of D: (D + 2) ud A, the
//   scale: ud A), the sigmoid in double (exp within 1 ulp, two roundings: 4 ud of g; its slope
//   g (1 - g) is at most g): |dg| <= g ga, ga = (D + 3) ud A + 4 ud. The backward keeps
//   g (1 - g) <= 1/4 rounded to float32: u / 4 more.
//   position: the gates summed (in double) before p reaches P - 1 and saturates total at most P
//   (the last adds at most 1): (P + 1) ga, plus the double sum's rounding of at most S terms.
//   score: Z_i[t] = q_i . e_t in float32 (D multiply-adds): (D + 2) u B; the interpolation's
//   weight rounded once, 1 - w, two products and a sum: 6 u B; z moves by at most
//   |Z[f + 1] - Z[f]| <= 2 B per unit of position. (a + z is rounded once: the products' 2 u
//   (A + B); the saturated keys' a is the float32 product's, as every scheme's.)
path_tiled_errors cope_tiled_errors(const std::vector<std::vector<double>>& t, int64_t D,
                                    double qmax, double A, int64_t S, double u) {
  constexpr double ud = 0x1p-53;
  const double B = cope_score_bound(t, D, qmax), P = double(t[0].size()) / double(D);
  const double ga = ((D + 3) * ud * A + 4 * ud) * (1 + 1e-3);
  path_tiled_errors e;
  e.gate = ga / 4 + u / 4;
  e.position = (P + 1) * ga + double(S) * P * 2 * ud;
  e.score = (D + 8) * u * B + 2 * B * e.position;
  return e;
}

// The case tables' embeddings: 8 rows of N(0, 1/4). The tiled and the reference entry points
// run the one path, so their bits agree and the gradient's tolerance needs no bound (0).
double cope_case_draw(std::span<const double>, int64_t, int64_t D, double,
                      const std::function<double()>& normal, std::vector<std::vector<double>>& t) {
  t.assign(1, std::vector<double>(static_cast<size_t>(8 * D)));
  for (auto& e : t[0]) e = 0.5 * normal();
  return 0;
}

// The model's hook: one (npos, D) table per layer, npos = cope_npos (64 unless given).
template <typename S>
std::unique_ptr<position_hook<S>> cope_hook_of(pos_scheme id, const position_options& o,
                                               const position_shape& shape) {
  const double P = named_option(o, "cope_npos", 64);
  if (!(P >= 1 && P <= double(int64_t(1) << 20)))
    fail("cope_npos must be in [1, 2^20] for the model's tables, got {}", P);
  return make_tensor_hook<S>(id, "cope", {{"cope_npos", P}}, "cope", static_cast<int64_t>(P),
                             shape.d_model / shape.n_heads);
}

const named_path cope_path = {
    .forward_f32 = &cope_forward<float>,
    .forward_f64 = &cope_forward<double>,
    .backward_f32 = &cope_backward<float>,
    .backward_f64 = &cope_backward<double>,
    .tiled_forward_f32 = &cope_forward_tiled,
    .tiled_backward_f32 = &cope_backward_tiled,
    .score_bound = &cope_score_bound,
    .tiled_errors = &cope_tiled_errors,
};

}  // namespace

template <typename Real>
std::vector<double> cope_positions(const attention_params<Real>& p, int64_t h) {
  if (h < 0 || h >= p.Hq) fail("cope_positions: h must be in [0, Hq) = [0, {}), got {}", p.Hq, h);
  const auto pl = make_attention_plan(p);
  (void)make_engine_terms<Real>(p, pl, nullptr);  // validates pos (CoPE alone, causal)
  const named_scheme* n = nullptr;
  for (const auto& x : p.pos.named)
    if (x.name == "cope") n = &x;
  if (!n) fail("cope_positions: CoPE is off (pos.named has no cope)");
  std::vector<double> args;
  const auto in = cope_load(p, named_call_for<Real>(p, nullptr, scheme_decl_of("cope"), *n, args));
  std::vector<double> out(p.T * p.S, 0.0);
  cope_row r;
  for (int64_t i = 0; i < p.T; ++i) {
    cope_fill_row(p, pl, in, h, i, r);
    std::copy(r.pos.begin(), r.pos.end(), out.begin() + i * p.S);
  }
  return out;
}
template std::vector<double> cope_positions(const attention_params<float>&, int64_t);
template std::vector<double> cope_positions(const attention_params<double>&, int64_t);

extern const named_bias cope_decl;
const named_bias cope_decl = {
    .path = &cope_path,
    .case_draw = &cope_case_draw,
    .hook_f32 = &cope_hook_of<float>,
    .hook_f64 = &cope_hook_of<double>,
};

}  // namespace posenc::detail
