// CoPE, contextual position encoding (Golovneva et al. 2024, sec. 3): a scheme reached by name
// whose tensor `cope` (npos, D) holds the position embeddings, shared by the heads, with their
// gradient (npos a free extent: cope_npos, 0 by default, is checked against it). Positions are
// counted by sigmoid gates over the content logits and interpolated position embeddings are
// added to the logits; they depend on q and k, so CoPE is no q/k transform and no bias of (qpos,
// kpos): it has a path of its own (named_path), the plain double computation of this file (a
// full score row per query, as the reference of the other schemes), which every entry point
// runs: CoPE has no tiled or SIMD kernel. Causal only; alone in a call. The model's hook: one
// (npos, D) table per layer (cope_npos, 64 in the lab's model). Per head h and query i, with a_ij =
// scale q_i . k_j on visible pairs:
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

// q, k, v of the call and the embeddings of c (its tensor cope, (npos, D): finite, npos in
// [1, 2^20], checked here), in double.
template <typename Real>
cope_inputs cope_load(const attention_params<Real>& p, const named_call<Real>& c) {
  const std::span<const Real> e = c.tensors[0];
  const int64_t P = p.D > 0 ? static_cast<int64_t>(e.size()) / p.D : 0;
  if (c.args[0] != 0 && c.args[0] != double(P))
    fail("cope must have cope_npos = {} rows, got shape ({}, {})", c.args[0], P, p.D);
  if (P < 1 || P > (int64_t(1) << 20))
    fail("cope must have npos in [1, 2^20] rows (position embeddings), got {}", P);
  for (size_t x = 0; x < e.size(); ++x)
    if (!std::isfinite(double(e[x])))
      fail("cope must be finite, got {} at ({}, {})", double(e[x]), x / p.D, x % p.D);
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

template <typename Real>
void cope_backward(const attention_params<Real>& p, const attention_grads<Real>& g,
                   const named_call<Real>& c) {
  const auto pl = make_attention_plan(p);
  if (p.T > 0 && (!g.out || !g.lse || !g.dout || !g.dq))
    fail("attention backward: out, lse, dout and dq must not be null when T = {}", p.T);
  if (p.S > 0 && (!g.dk || !g.dv))
    fail("attention backward: dk and dv must not be null when S = {}", p.S);
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
    .score_bound = &cope_score_bound,
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
