// Property checks of group "attention" (posenc check): the seeds' argument about where order
// enters attention, measured on the engine itself.
//
// Tolerance used by every "equal" check (double, u = 2^-53). Two runs of the tiled kernel on
// the same problem presented differently (permuted, shifted, packed, padded, cached) each
// differ from the exact result by at most (derivation in
// include/posenc/verify/attention_cases.hpp)
//   bound = (2 e_p + (2S + 2K + 8) u) V,   e_p = 2 ds + 4u (A + B) + u,
//   ds = (D + 10) u A + 2u (A + B) + 4 t A,
// where A = scale a^2 max|q| (max|k| + max|a^K|) bounds the scaled dot products, B bounds the
// biases, V = max|v| + max|a^V|, K the Shaw clip and t the cos/sin error of RoPE's exact angle
// mode (4e-16 absolute per entry, rope.hpp; doubled for the pair, so t = 8e-16, 0 without
// RoPE). Their difference is at most 2 * bound. A "breaks" check passes when the deviation
// exceeds 1000 times that rounding bound: the change is structural, not rounding.
//
// After these come the results of the case table's small list (check_cases() of
// include/posenc/verify/attention_cases.hpp): the tiled forward and backward against the
// reference in float32 and float64, and the reference backward against finite differences, with
// the tolerances derived in that header.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/attention/kv_cache.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/machine.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/positions/positions.hpp"
#include "posenc/verify/attention_cases.hpp"
#include "posenc/verify/checks.hpp"
#include "src/attention/attention_plan.hpp"
#include "src/attention/engine_terms.hpp"

namespace posenc {
namespace {

constexpr double kU = 0x1p-53;
constexpr double kTrig = 8e-16;
constexpr double kBreakFactor = 1000;

// named: a scheme reached by name (schemes.hpp), the problem's `nd`.
enum class scheme { none, rope, named };
const char* scheme_name(scheme s) {
  switch (s) {
    case scheme::rope:
      return "rope";
    default:
      return "none";
  }
}
constexpr scheme kSchemes[] = {scheme::rope};

// A small problem with one scheme switched on; owns every buffer the params point into.
struct problem {
  int64_t N = 20, Hq = 4, Hkv = 2, D = 16;
  scheme sch = scheme::none;
  bool causal = false;
  std::vector<double> q, k, v;  // (N, Hq, D), (N, Hkv, D), (N, Hkv, D)
  rope_freqs freqs;
  attention_position<double> pos;
  double A = 0, B = 0, V = 0;
  double trig = 0;  // per-entry error of the q/k transform's cos/sin (RoPE, xPos)
  int64_t K = 0;
  const scheme_decl* nd = nullptr;  // scheme::named: its declaration, at its default parameters
  int choice = 0;                   // and its choice parameter's value (index), if it has one
  std::vector<double> nargs;
  // A tensor scheme reached by name: its tensors (declaration order, drawn through the
  // declaration) and its bias in double (named_bias_spec; token indices = positions here).
  std::vector<std::vector<double>> ntens;
  std::function<double(int64_t, int64_t, int64_t)> nbias;

  problem(scheme s, bool causal_, uint64_t seed, const scheme_decl* named = nullptr,
          int choice_ = 0)
      : sch(s), causal(causal_), nd(named), choice(choice_) {
    rng r(seed);
    fill_normal(r, q, N * Hq * D);
    fill_normal(r, k, N * Hkv * D);
    fill_normal(r, v, N * Hkv * D);
    double amp = 1, akmax = 0, avmax = 0;
    init_classic(amp);
    if (s == scheme::rope) trig = kTrig;
    init_named(r, amp, akmax, avmax);
    recompute_magnitudes(amp, akmax, avmax);
  }

  // x: n draws of r.normal(), in order.
  static void fill_normal(rng& r, std::vector<double>& x, int64_t n) {
    x.resize(n);
    for (auto& e : x) e = r.normal();
  }

  // RoPE: its table and bound (amp scales q and k).
  void init_classic(double& amp) {
    if (sch == scheme::rope) {
      rope_config c;
      c.head_dim = D;
      c.rotary_dim = D;
      freqs = rope_frequencies(c);
      pos.named.push_back(rope_scheme(freqs));
      amp = freqs.attention_factor;
    }
  }

  // A scheme reached by name (nd): its arguments and bounds; a tensor scheme's tensors from r.
  void init_named(rng& r, double& amp, double& akmax, double& avmax) {
    if (sch == scheme::named && named_relative(*nd)) {
      init_relative(r, akmax, avmax);
    } else if (sch == scheme::named && named_path_scheme(*nd)) {
      // A path of its own (CoPE): its tensors drawn through the declaration; what it adds to a
      // score enters B like a bias.
      draw_tensors(r);
      double qmax = 0;
      for (int64_t t = 0; t < N * Hq; ++t) {
        double n = 0;
        for (int64_t d = 0; d < D; ++d) n += q[t * D + d] * q[t * D + d];
        qmax = std::max(qmax, std::sqrt(n));
      }
      B = named_path_score_bound(*nd, ntens, D, qmax);
    } else if (sch == scheme::named && is_tensor_scheme(*nd)) {
      const named_scheme n = draw_tensors(r);
      nbias = named_bias_spec(*nd, n, N, N, Hq, Hkv, D, causal);
      for (int64_t h = 0; h < Hq; ++h)  // every pair the call sees
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < (causal ? i + 1 : N); ++j)
            B = std::max(B, std::abs(nbias(h, i, j)));
    } else if (sch == scheme::named && nd->transform) {
      // A q/k transform (xPos) at the parameters its hook file gives for positions 0 .. N - 1;
      // its bound F on |A_q(n)^T A_k(m)| for positions within N of each other scales q and k
      // by sqrt(F), its coefficients' error per entry (positions up to N + 1000, the largest
      // shift below) is trig.
      const auto given = named_transform_case(*nd, 0, N - 1);
      nargs = named_scheme_args(*nd, given, Hq);
      pos.named = {{nd->name, given}};
      // A query scale (the temperature) multiplies |q| by at most its factor at the largest
      // position of the checks (N + 1000): in A with the amplitude.
      amp = std::sqrt(named_transform_amplitude(*nd, nargs, 0, N, causal) *
                      named_transform_query_scale(*nd, nargs, N + 1000));
      trig = named_transform_coef_error(*nd, nargs, N + 1000);
    } else if (sch == scheme::named && nd->pairs) {
      // A per-pair RoPE scheme at the case-table parameters (every region within 20 positions)
      // over RoPE (theta 10000, half layout): a rotation, no bias; the score factor of DCA's
      // length scaling (at most 1.2 for N = 20 against its 6) enters A below.
      rope_config c;
      c.head_dim = D;
      c.rotary_dim = D;
      freqs = rope_frequencies(c);
      const auto given = rope_pairs_case_params(*nd);
      nargs = named_scheme_args(*nd, given, Hq);
      pos.named = {rope_scheme(freqs), {nd->name, given}};
      trig = kTrig;
      amp = std::sqrt(1.5);
    } else if (sch == scheme::named) {
      // B: the declared bound when the bias is bounded, else the largest |bias| at distances
      // below 2N (every check below).
      nargs = named_scheme_args(*nd, {}, Hq);
      pos.named = {{nd->name, {}}};
      for (int64_t h = 0; h < Hq; ++h) {
        if (nd->bias_props & bias_bounded) {
          B = std::max(B, named_bias_bound(*nd, nargs, h, Hq));
          continue;
        }
        for (int64_t d = -2 * N; d <= 2 * N; ++d)
          B = std::max(B, std::abs(named_bias_value(*nd, nargs, h, Hq, 2 * N, 2 * N + d)));
      }
    }
  }

  // A tensor scheme's arguments (nargs) and tensors (ntens) at the case parameters, drawn through
  // its declaration from r for distances below 2N (every check below), as pos.named.
  named_scheme draw_tensors(rng& r) {
    named_scheme n{nd->name, named_case_params(*nd, choice)};
    nargs = named_scheme_args(*nd, n.params, Hq);
    named_tensors_draw(
        *nd, nargs, N, N, Hq, Hkv, D, 2.0 * double(N), [&r] { return r.normal(); }, ntens);
    for (const auto& prm : nd->params) {
      if (!is_tensor_param(prm)) continue;
      const auto count = static_cast<int64_t>(ntens[n.tensors.size()].size());
      n.tensors.push_back({prm.name, tensor_param_shape_for(prm, N, N, Hq, Hkv, D, count), {}, {}});
    }
    for (size_t x = 0; x < ntens.size(); ++x) n.tensors[x].f64 = ntens[x];
    pos.named = {n};
    return n;
  }

  // A scheme with relative tables (Shaw): a^K, a^V (its first two tensors) drawn through the
  // declaration at the case parameters; akmax bounds |a^K| rows, avmax |a^V| entries.
  void init_relative(rng& r, double& akmax, double& avmax) {
    draw_tensors(r);
    K = (static_cast<int64_t>(ntens[0].size()) / D - 1) / 2;
    for (int64_t c = 0; c < 2 * K + 1; ++c) {
      double sq = 0;
      for (int64_t d = 0; d < D; ++d) sq += ntens[0][c * D + d] * ntens[0][c * D + d];
      akmax = std::max(akmax, std::sqrt(sq));
    }
    for (double x : ntens[1]) avmax = std::max(avmax, std::abs(x));
  }

  // A tensor scheme's tensor 0, entry (h, last) of each row h set to v (FIRE's a_L), then its
  // bias and bound B recomputed.
  void set_last_column(double v) {
    auto& t = ntens.at(0);
    const size_t W = t.size() / static_cast<size_t>(Hq);
    for (int64_t h = 0; h < Hq; ++h) t[(h + 1) * W - 1] = v;
    nbias = named_bias_spec(*nd, pos.named.at(0), N, N, Hq, Hkv, D, causal);
    B = 0;
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j <= i; ++j) B = std::max(B, std::abs(nbias(h, i, j)));
  }

  void recompute_magnitudes(double amp, double akmax, double avmax) {
    auto max_norm = [&](const std::vector<double>& x) {
      double m = 0;
      for (size_t t = 0; t < x.size() / D; ++t) {
        double n = 0;
        for (int64_t d = 0; d < D; ++d) n += x[t * D + d] * x[t * D + d];
        m = std::max(m, std::sqrt(n));
      }
      return m;
    };
    A = amp * amp * max_norm(q) * (max_norm(k) + akmax) / std::sqrt(double(D));
    V = avmax;
    double vm = 0;
    for (double x : v) vm = std::max(vm, std::abs(x));
    V += vm;
  }

  // Twice the per-run rounding bound (see the top of this file).
  double tolerance(int64_t S) const {
    const double t = trig;
    const double ds = (D + 10) * kU * A + 2 * kU * (A + B) + 4 * t * A;
    const double ep = 2 * ds + 4 * kU * (A + B) + kU;
    return 2 * (2 * ep + (2 * S + 2 * K + 8) * kU) * V;
  }

  // pos for a call whose token t is this problem's token rows[t] (-1: a pad slot): each tensor
  // of a tensor scheme with a row per key token (declared shape (S, ...)) gathered row by row
  // into keep, a pad row a valid draw (z = 1.5) that must not matter. Else pos itself.
  attention_position<double> pos_rows(const std::vector<int64_t>& rows,
                                      std::vector<std::vector<double>>& keep) const {
    attention_position<double> out = pos;
    if (ntens.empty()) return out;
    keep.assign(ntens.size(), {});
    for (size_t x = 0; x < ntens.size(); ++x) {
      auto& t = out.named[0].tensors[x];
      if (t.shape.empty() || t.shape[0] != N) continue;
      const int64_t w = static_cast<int64_t>(ntens[x].size()) / N;
      for (int64_t row : rows)
        for (int64_t c = 0; c < w; ++c)
          keep[x].push_back(row >= 0 ? ntens[x][row * w + c]
                                     : named_tensor_draw(*nd, static_cast<int>(x), 1.5));
      t.shape[0] = static_cast<int64_t>(rows.size());
      t.f64 = keep[x];
    }
    return out;
  }

  attention_params<double> params(const double* qp, const double* kp, const double* vp, double* out,
                                  int64_t T, int64_t S) const {
    attention_params<double> p;
    p.q = qp, p.k = kp, p.v = vp, p.out = out;
    p.T = T, p.S = S, p.Hq = Hq, p.Hkv = Hkv, p.D = D;
    p.causal = causal;
    p.pos = pos;
    return p;
  }

  std::vector<double> run(const std::function<void(attention_params<double>&)>& tweak = {}) const {
    std::vector<double> out(N * Hq * D);
    auto p = params(q.data(), k.data(), v.data(), out.data(), N, N);
    if (tweak) tweak(p);
    attention_forward(p);
    return out;
  }
};

double max_abs_diff(const double* a, const double* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

check_result equal_check(std::string name, std::string claim, double err, double tol,
                         std::string how) {
  check_result c{"attention", std::move(name), std::move(claim), err <= tol, err, tol, ""};
  c.detail = fmt::format(
      "{}; tolerance = 2 x the tiled kernel's rounding bound (derivation in "
      "src/verify/attention_checks.cpp)",
      how);
  return c;
}

check_result breaks_check(std::string name, std::string claim, double dev, double tol,
                          std::string how) {
  check_result c{"attention", std::move(name), std::move(claim), false, dev, tol, ""};
  c.passed = dev > kBreakFactor * tol && dev > 1e-6;
  c.detail = fmt::format(
      "{}; max_error is the deviation, which must exceed {} x the rounding "
      "bound {} (tolerance column) to show a structural change",
      how, kBreakFactor, tol);
  return c;
}

// max |Attn(PX) - P Attn(X)| for a fixed random permutation P of the N token rows of q, k, v.
double permutation_deviation(const problem& pr) {
  rng r(99);
  const int64_t N = pr.N;
  std::vector<int64_t> perm(N);
  for (int64_t i = 0; i < N; ++i) perm[i] = i;
  for (int64_t i = N - 1; i > 0; --i) std::swap(perm[i], perm[r.below(i + 1)]);
  auto permute = [&](const std::vector<double>& x, int64_t row) {
    std::vector<double> y(x.size());
    for (int64_t i = 0; i < N; ++i)
      std::copy(&x[perm[i] * row], &x[perm[i] * row] + row, &y[i * row]);
    return y;
  };
  const auto q = permute(pr.q, pr.Hq * pr.D), k = permute(pr.k, pr.Hkv * pr.D),
             v = permute(pr.v, pr.Hkv * pr.D);
  const auto o = pr.run();
  std::vector<double> po(o.size());
  auto p = pr.params(q.data(), k.data(), v.data(), po.data(), N, N);
  attention_forward(p);
  const int64_t row = pr.Hq * pr.D;
  double m = 0;
  for (int64_t i = 0; i < N; ++i)
    m = std::max(m, max_abs_diff(&po[i * row], &o[perm[i] * row], row));
  return m;
}

// Outputs with every position (q and k) shifted by c, against unshifted.
double shift_deviation(const problem& pr, int64_t c) {
  std::vector<int64_t> p0(pr.N), p1(pr.N);
  for (int64_t i = 0; i < pr.N; ++i) p0[i] = i, p1[i] = i + c;
  const auto a = pr.run([&](auto& p) { p.q_positions = p.k_positions = p0; });
  const auto b = pr.run([&](auto& p) { p.q_positions = p.k_positions = p1; });
  return max_abs_diff(a.data(), b.data(), static_cast<int64_t>(a.size()));
}

// first, first + 1, ..., first + n - 1.
std::vector<int64_t> iota_rows(int64_t first, int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) r[t] = first + t;
  return r;
}

// Packed documents (cu_seqlens, positions restart) vs each document run alone.
double packed_deviation(const problem& pr, const std::vector<int64_t>& cu) {
  const auto packed = pr.run([&](auto& p) { p.cu_seqlens = cu; });
  double m = 0;
  for (size_t d = 0; d + 1 < cu.size(); ++d) {
    const int64_t b = cu[d], n = cu[d + 1] - cu[d];
    std::vector<double> out(n * pr.Hq * pr.D);
    auto p = pr.params(&pr.q[b * pr.Hq * pr.D], &pr.k[b * pr.Hkv * pr.D], &pr.v[b * pr.Hkv * pr.D],
                       out.data(), n, n);
    std::vector<std::vector<double>> keep;
    p.pos = pr.pos_rows(iota_rows(b, n), keep);
    attention_forward(p);
    m = std::max(m, max_abs_diff(out.data(), &packed[b * pr.Hq * pr.D], n * pr.Hq * pr.D));
  }
  return m;
}

// The first n real tokens of pr placed into a row of N slots with `pads` pad slots in front
// (left padding) or behind (right padding); real rows compared with the unpadded run, pad
// rows must be exactly zero.
double padded_deviation(const problem& pr, int64_t n, bool left) {
  const int64_t N = pr.N, pads = N - n, Hq = pr.Hq, Hkv = pr.Hkv, D = pr.D;
  std::vector<uint8_t> mask(N, 1);
  for (int64_t t = 0; t < pads; ++t) mask[left ? t : n + t] = 0;
  const auto pos = positions_from_mask(mask, 1, N);
  const int64_t off = left ? pads : 0;
  // Padded tensors: real token t at slot off + t, pad slots hold garbage (must not matter).
  std::vector<double> q(N * Hq * D, 1e3), k(N * Hkv * D, -1e3), v(N * Hkv * D, 1e3);
  std::copy(pr.q.begin(), pr.q.begin() + n * Hq * D, q.begin() + off * Hq * D);
  std::copy(pr.k.begin(), pr.k.begin() + n * Hkv * D, k.begin() + off * Hkv * D);
  std::copy(pr.v.begin(), pr.v.begin() + n * Hkv * D, v.begin() + off * Hkv * D);
  std::vector<double> padded(N * Hq * D), plain(n * Hq * D);
  auto p = pr.params(q.data(), k.data(), v.data(), padded.data(), N, N);
  p.q_positions = p.k_positions = pos;
  p.key_padding = mask;
  std::vector<int64_t> rows(N, -1);
  for (int64_t t = 0; t < n; ++t) rows[off + t] = t;
  std::vector<std::vector<double>> keep, keep_plain;
  p.pos = pr.pos_rows(rows, keep);
  attention_forward(p);
  auto u = pr.params(pr.q.data(), pr.k.data(), pr.v.data(), plain.data(), n, n);
  u.pos = pr.pos_rows(iota_rows(0, n), keep_plain);
  attention_forward(u);
  double m = max_abs_diff(&padded[off * Hq * D], plain.data(), n * Hq * D);
  for (int64_t t = 0; t < N; ++t)
    if (!mask[t])
      for (int64_t c = 0; c < Hq * D; ++c)
        m = std::max(m, std::abs(padded[t * Hq * D + c]) * 1e300);  // any nonzero fails
  return m;
}

// Token-by-token decoding through a kv_cache vs the full causal forward.
double cache_deviation(const problem& pr) {
  const auto full = pr.run();
  kv_cache<double> cache(pr.N, pr.Hkv, pr.D, pr.pos);
  std::vector<double> out(pr.N * pr.Hq * pr.D);
  for (int64_t t = 0; t < pr.N; ++t) {
    cache.append(&pr.k[t * pr.Hkv * pr.D], &pr.v[t * pr.Hkv * pr.D], 1);
    attention_params<double> p;
    p.q = &pr.q[t * pr.Hq * pr.D], p.out = &out[t * pr.Hq * pr.D];
    p.T = 1, p.Hq = pr.Hq, p.D = pr.D, p.causal = true;
    std::vector<std::vector<double>> keep;  // a per-token tensor: the rows of the cached tokens
    p.pos = pr.pos_rows(iota_rows(0, t + 1), keep);
    attention_forward_cached(p, cache);
  }
  return max_abs_diff(out.data(), full.data(), static_cast<int64_t>(out.size()));
}

// The seeds' permutation argument: equivariance without position or mask, broken by a
// causal mask and by every scheme.
void permutation_checks(std::vector<check_result>& r, uint64_t seed) {
  problem pr(scheme::none, false, seed);
  r.push_back(
      equal_check("permutation_equivariant_nope",
                  "Without position and without a mask, Attn(PX) = P Attn(X) (bidirectional)",
                  permutation_deviation(pr), pr.tolerance(pr.N),
                  "N=20 tokens, Hq=4, Hkv=2, D=16, one random permutation of the rows of q, k, v"));
  problem pc(scheme::none, true, seed);
  r.push_back(breaks_check("causal_breaks_permutation",
                           "A causal mask alone already breaks permutation equivariance",
                           permutation_deviation(pc), pc.tolerance(pc.N),
                           "same problem with causal masking, no position scheme"));
  for (scheme s : kSchemes) {
    problem ps(s, false, seed);
    r.push_back(
        breaks_check(fmt::format("{}_breaks_permutation", scheme_name(s)),
                     fmt::format("With {} on, permuting the tokens no longer permutes the outputs",
                                 scheme_name(s)),
                     permutation_deviation(ps), ps.tolerance(ps.N),
                     "bidirectional, positions stay with the slots 0..N-1 while tokens move"));
  }
}

// Translation invariance of FIRE below its threshold, and where it ends.
void relative_translation_checks(std::vector<check_result>& r, uint64_t seed) {
  {
    // FIRE reads the query position through psi(max(L, qpos)): below the threshold L the bias
    // is a function of the distance only, past it a shift changes it.
    problem ps(scheme::named, true, seed, &scheme_decl_of("fire"));
    ps.set_last_column(100);  // a_L: L = softplus(100) = 100, above every query position here
    r.push_back(equal_check(
        "fire_translation_invariant_below_threshold",
        "fire: with every query position below the threshold L = 100, shifting positions by 50 "
        "leaves the outputs unchanged",
        shift_deviation(ps, 50), ps.tolerance(ps.N),
        "causal; psi(max(L, qpos)) = psi(L) for qpos < L (Li et al. 2023)"));
    r.push_back(breaks_check(
        "fire_not_translation_invariant",
        "fire: past the threshold (positions shifted by 1000003) the normaliser psi(qpos) "
        "changes the outputs",
        shift_deviation(ps, 1000003), ps.tolerance(ps.N),
        "causal; the progressive interpolation divides by psi(qpos) once qpos > L"));
  }
}

// CoPE (Golovneva et al. 2024): positions are counted by gates over the content, so the
// position ids are not read at all, p_ij is monotone in j, it is the token distance
// i - j + 1 when every gate is open, and it changes when the content between j and i does
// (so CoPE is not a function of i - j: not translation invariant in the token index).
void cope_checks(std::vector<check_result>& r, uint64_t seed) {
  problem ps(scheme::named, true, seed, &scheme_decl_of("cope"));
  r.push_back(equal_check(
      "cope_ignores_position_ids",
      "cope: shifting every position id by 1000003 leaves the outputs unchanged (positions "
      "come from the gates)",
      shift_deviation(ps, 1000003), ps.tolerance(ps.N), "causal, N = 20, npos = 8"));
  auto positions = [](const problem& pr) {
    std::vector<double> out(pr.N * pr.Hq * pr.D);
    auto p = pr.params(pr.q.data(), pr.k.data(), pr.v.data(), out.data(), pr.N, pr.N);
    return detail::cope_positions(p, 0);
  };
  const auto P0 = positions(ps);
  double rise = 0;  // max over i, j < j' <= i of p_ij' - p_ij (must be <= 0)
  for (int64_t i = 0; i < ps.N; ++i)
    for (int64_t j = 0; j < i; ++j) rise = std::max(rise, P0[i * ps.N + j + 1] - P0[i * ps.N + j]);
  check_result m{"attention",
                 "cope_positions_monotone",
                 "cope: p_ij = sum_{t=j..i} g_it never increases with j (the gates are >= 0)",
                 rise <= 0,
                 rise,
                 0.0,
                 "head 0, causal, N = 20; exact: suffix sums of "
                 "non-negative gates"};
  r.push_back(m);
  problem open = ps;  // every q and k = 3 (1, ..., 1): a_ij = 9 D / sqrt(D) = 36, g = 1 - 2e-16
  std::fill(open.q.begin(), open.q.end(), 3.0);
  std::fill(open.k.begin(), open.k.end(), 3.0);
  const auto P1 = positions(open);
  double cnt = 0;
  for (int64_t i = 0; i < open.N; ++i)
    for (int64_t j = 0; j <= i; ++j)
      cnt = std::max(cnt, std::abs(P1[i * open.N + j] - double(i - j + 1)));
  // Each gate is 1 - e^-36 (2.4e-16 short); N gates summed with rounding N u each.
  const double tcnt = double(open.N) * (2.4e-16 + double(open.N) * kU);
  check_result c{"attention",
                 "cope_counts_tokens_when_gates_open",
                 "cope: with every gate open (q . k large) p_ij = i - j + 1, the relative "
                 "token distance",
                 cnt <= tcnt,
                 cnt,
                 tcnt,
                 "q = k = 3 (1, ..., 1), D = 16: every gate 1 - e^-36; tolerance N (e^-36 + N u)"};
  r.push_back(c);
  problem closed = ps;  // close the gates of keys 5..9 for every query: k_t = -20 q-ish
  for (int64_t t = 5; t < 10; ++t)
    for (int64_t d = 0; d < closed.Hkv * closed.D; ++d)
      closed.k[t * closed.Hkv * closed.D + d] *= -8;
  closed.recompute_magnitudes(1, 0, 0);
  const auto P2 = positions(closed);
  double dev = 0;
  for (int64_t i = 10; i < ps.N; ++i)
    for (int64_t j = 0; j < 5; ++j)
      dev = std::max(dev, std::abs(P2[i * ps.N + j] - P0[i * ps.N + j]));
  r.push_back(breaks_check(
      "cope_positions_depend_on_content",
      "cope: changing the keys between j and i changes p_ij at the same token distance i - j "
      "(not translation invariant in the token index)",
      dev, 1e-12, "keys 5..9 scaled by -8; p_ij for i >= 10, j < 5 compared"));
}

// Translation invariance of RoPE (the biases reached by name: named_bias_scheme_checks).
void translation_checks(std::vector<check_result>& r, uint64_t seed) {
  for (scheme s : kSchemes) {
    problem ps(s, true, seed);
    const int64_t c = 1000003;
    r.push_back(equal_check(
        fmt::format("{}_translation_invariant", scheme_name(s)),
        fmt::format("{}: shifting every position by c = {} leaves the outputs unchanged",
                    scheme_name(s), c),
        shift_deviation(ps, c), ps.tolerance(ps.N),
        s == scheme::rope ? "causal; RoPE angles in exact mode (cos/sin error 4e-16 per entry)"
                          : "causal; biases depend on kpos - qpos only"));
  }
}

// M-RoPE (Wang et al. 2024, sec. 2.1): each pair turns at one component's ids for q and k
// alike, so R(a)^T R(b) = R(b - a) per pair and shifting every id of every row by the same
// c changes nothing; text tokens (equal ids in the three rows) are RoPE at that id. N = 20
// tokens: 6 text, an image grid (1, 3, 4), 2 text (positions_mrope); D = 16: 8 pairs,
// sections (2, 3, 3) contiguous, (4, 2, 2) interleaved.
void mrope_checks(std::vector<check_result>& r, uint64_t seed) {
  problem pr(scheme::rope, true, seed);
  const std::vector<mrope_segment> seg = {{6, 1, 3, 4}, {2, 0, 0, 0}};
  const auto image = positions_mrope(seg);
  auto with_ids = [&](const std::vector<int64_t>& ids, bool interleaved) {
    return pr.run([&](attention_params<double>& p) {
      p.pos.named = {mrope_scheme(
          pr.freqs, interleaved ? std::array<int64_t, 3>{4, 2, 2} : std::array<int64_t, 3>{2, 3, 3},
          interleaved, rope_layout::half, rope_angle::exact, ids, ids)};
    });
  };
  std::vector<int64_t> text(3 * pr.N);
  for (int64_t e = 0; e < 3 * pr.N; ++e) text[e] = e % pr.N;
  const auto rope = pr.run();
  for (const bool interleaved : {false, true}) {
    const auto a = with_ids(text, interleaved);
    r.push_back(equal_check(
        fmt::format("mrope_{}_text_is_rope", interleaved ? "interleaved" : "contiguous"),
        "mrope: with the same id in all three rows (text tokens) attention equals RoPE's",
        max_abs_diff(a.data(), rope.data(), static_cast<int64_t>(a.size())), pr.tolerance(pr.N),
        "causal; ids 0..N-1 in every row"));
  }
  const int64_t c = 1000003;
  std::vector<int64_t> shifted = image;
  for (auto& x : shifted) x += c;
  const auto a = with_ids(image, false), b = with_ids(shifted, false);
  r.push_back(equal_check(
      "mrope_translation_invariant",
      fmt::format("mrope: shifting every id of the three rows by c = {} leaves the outputs "
                  "unchanged",
                  c),
      max_abs_diff(a.data(), b.data(), static_cast<int64_t>(a.size())), pr.tolerance(pr.N),
      "causal; 6 text tokens, an image grid (1, 3, 4), 2 text tokens; exact angles"));
  r.push_back(breaks_check(
      "mrope_image_ids_change_attention",
      "mrope: an image's height and width ids change attention against text ids 0..N-1",
      max_abs_diff(a.data(), with_ids(text, false).data(), static_cast<int64_t>(a.size())),
      pr.tolerance(pr.N), "causal; the same tokens with image ids vs text ids"));
}

// An absolute scheme: sinusoidal PE added to the input (q = k = v = x + PE(pos)).
void absolute_scheme_check(std::vector<check_result>& r, uint64_t seed) {
  problem pa(scheme::none, true, seed);
  sinusoidal_params sp;
  sp.width = pa.D;
  auto absolute = [&](int64_t shift) {
    std::vector<int64_t> pos(pa.N);
    for (int64_t i = 0; i < pa.N; ++i) pos[i] = i + shift;
    const auto pe = sinusoidal_table(sp, pos);  // (N, D)
    problem x = pa;
    for (int64_t t = 0; t < x.N; ++t) {
      for (int64_t h = 0; h < x.Hq; ++h)
        for (int64_t d = 0; d < x.D; ++d) x.q[(t * x.Hq + h) * x.D + d] += pe[t * x.D + d];
      for (int64_t h = 0; h < x.Hkv; ++h)
        for (int64_t d = 0; d < x.D; ++d) {
          x.k[(t * x.Hkv + h) * x.D + d] += pe[t * x.D + d];
          x.v[(t * x.Hkv + h) * x.D + d] += pe[t * x.D + d];
        }
    }
    x.recompute_magnitudes(1, 0, 0);
    return std::make_pair(x.run(), x.tolerance(x.N));
  };
  const auto [a, ta] = absolute(0);
  const auto [b, tb] = absolute(1000003);
  r.push_back(breaks_check(
      "sinusoidal_not_translation_invariant",
      "An absolute scheme (sinusoidal PE added to the input) changes when positions shift",
      max_abs_diff(a.data(), b.data(), static_cast<int64_t>(a.size())), std::max(ta, tb),
      "causal; PE(pos) vs PE(pos + 1000003) added to q, k and v"));
}

// Packed documents, padding, cache: for no scheme and every scheme, causal.
void document_checks(std::vector<check_result>& r, uint64_t seed) {
  const std::vector<int64_t> cu = {0, 7, 12, 20};
  for (scheme s : {scheme::none, scheme::rope}) {
    problem ps(s, true, seed);
    r.push_back(equal_check(
        fmt::format("{}_packed_equals_separate", scheme_name(s)),
        fmt::format("{}: attention over packed documents (cu_seqlens 0,7,12,20) equals each "
                    "document alone",
                    scheme_name(s)),
        packed_deviation(ps, cu), ps.tolerance(ps.N),
        "causal; positions restart at 0 in each document"));
  }
  for (scheme s : {scheme::none, scheme::rope}) {
    problem ps(s, true, seed);
    const double dev = std::max(padded_deviation(ps, 14, true), padded_deviation(ps, 14, false));
    r.push_back(equal_check(
        fmt::format("{}_padded_equals_unpadded", scheme_name(s)),
        fmt::format("{}: left- and right-padded rows give the unpadded outputs on real tokens "
                    "and zeros on pads",
                    scheme_name(s)),
        dev, ps.tolerance(ps.N),
        "causal; 14 real tokens in 20 slots, positions from positions_from_mask"));
  }
  for (scheme s : {scheme::none, scheme::rope}) {
    problem ps(s, true, seed);
    r.push_back(equal_check(
        fmt::format("{}_cache_equals_full", scheme_name(s)),
        fmt::format("{}: decoding token by token with the KV cache equals the full forward",
                    scheme_name(s)),
        cache_deviation(ps), ps.tolerance(ps.N),
        "causal; keys rotated once on append, positions continue after the prefix"));
  }
}

// The largest |out - softmax_j(score(h, i, j)) v| over every causal row of ps, written out in
// double (score -inf: the pair is masked): the engine against a scheme's definition.
template <typename F>
double causal_written_out_deviation(const problem& ps, const std::vector<double>& out, F score) {
  const int64_t N = ps.N, D = ps.D, H = ps.Hq, G = ps.Hq / ps.Hkv;
  double dev = 0;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> sc(i + 1);
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j <= i; ++j) m = std::max(m, sc[j] = score(h, i, j));
      for (auto& x : sc) z += (x = std::exp(x - m));
      for (int64_t e = 0; e < D; ++e) {
        double o = 0;
        for (int64_t j = 0; j <= i; ++j) o += sc[j] / z * ps.v[(j * ps.Hkv + h / G) * D + e];
        dev = std::max(dev, std::abs(o - out[(i * H + h) * D + e]));
      }
    }
  return dev;
}

// The packing and padding checks of a scheme reached by name (ps: its causal problem).
void packed_and_padded_checks(std::vector<check_result>& r, const std::string& n,
                              const problem& ps) {
  r.push_back(equal_check(n + "_packed_equals_separate",
                          n + ": attention over packed documents (cu_seqlens 0,7,12,20) equals "
                              "each document alone",
                          packed_deviation(ps, {0, 7, 12, 20}), ps.tolerance(ps.N),
                          "causal; positions restart at 0 in each document"));
  r.push_back(equal_check(
      n + "_padded_equals_unpadded",
      n + ": left- and right-padded rows give the unpadded outputs on real tokens and zeros on "
          "pads",
      std::max(padded_deviation(ps, 14, true), padded_deviation(ps, 14, false)), ps.tolerance(ps.N),
      "causal; 14 real tokens in 20 slots, positions from positions_from_mask"));
}

// The KV-cache check of a scheme reached by name (ps: its causal problem).
void cache_check(std::vector<check_result>& r, const std::string& n, const problem& ps,
                 const char* detail = "causal; positions continue after the prefix") {
  r.push_back(equal_check(n + "_cache_equals_full",
                          n + ": decoding token by token with the KV cache equals the full forward",
                          cache_deviation(ps), ps.tolerance(ps.N), detail));
}

// With the scheme reached by name d on (bidirectional, at the value `choice` of its choice
// parameter), permuting the tokens no longer permutes the outputs.
void permutation_check(std::vector<check_result>& r, const std::string& n, uint64_t seed,
                       const scheme_decl* d, int choice = 0) {
  problem pb(scheme::named, false, seed, d, choice);
  r.push_back(
      breaks_check(n + "_breaks_permutation",
                   "With " + n + " on, permuting the tokens no longer permutes the outputs",
                   permutation_deviation(pb), pb.tolerance(pb.N),
                   "bidirectional, positions stay with the slots 0..N-1 while tokens move"));
}

// A scheme that places RoPE per pair (Self-Extend, DCA, StreamingLLM) at its case-table
// parameters: the engine against attention written out here from the declared regions (each
// visible pair's q and k rotated at its region's positions by the library's rope_apply in
// double, a softmax, times v), then packing and padding, which every scheme passes. (It needs
// causal attention and unrotated keys: no permutation or cache check.)
void rope_pairs_scheme_checks(std::vector<check_result>& r, uint64_t seed, const scheme_decl* d) {
  const std::string n = d->name;
  problem ps(scheme::named, true, seed, d);
  const int64_t N = ps.N, D = ps.D, H = ps.Hq, G = ps.Hq / ps.Hkv;
  const double scale = rope_pairs_score_factor(*d, ps.nargs, N) / std::sqrt(double(D));
  std::vector<double> qa(D), kb(D);
  const double dev =
      causal_written_out_deviation(ps, ps.run(), [&](int64_t h, int64_t i, int64_t j) {
        const int reg = rope_pairs_region(*d, ps.nargs, i, j);
        if (reg < 0) return -std::numeric_limits<double>::infinity();
        const auto [a, b] = rope_pairs_positions(*d, ps.nargs, reg, i, j);
        std::copy_n(&ps.q[(i * H + h) * D], D, qa.data());
        std::copy_n(&ps.k[(j * ps.Hkv + h / G) * D], D, kb.data());
        rope_apply(ps.freqs, rope_layout::half, rope_angle::exact, std::span<const int64_t>(&a, 1),
                   qa.data(), 1, 1, D);
        rope_apply(ps.freqs, rope_layout::half, rope_angle::exact, std::span<const int64_t>(&b, 1),
                   kb.data(), 1, 1, D);
        double dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += qa[e] * kb[e];
        return dot * scale;
      });
  r.push_back(equal_check(n + "_engine_matches_regions",
                          n + ": the engine's attention equals RoPE at each pair's region "
                              "positions, softmax, times v, written out from the declaration",
                          dev, ps.tolerance(N), "causal, N = 20, 4 query heads, 2 kv heads"));
  packed_and_padded_checks(r, n, ps);
}

// A q/k transform reached by name (xPos, the query temperature) at its case parameters:
// permutation broken (bidirectional); translation invariance when it is relative, positions and
// the case parameters (xPos's centre) shifted by 1000 together (q'_n . k'_m depends on n - m
// alone in exact arithmetic, but a transform may scale far from its centre: Sun et al. 2022),
// and its absence otherwise (a scale of the absolute position); packing, padding and the KV
// cache, which stores transformed keys.
void transform_scheme_checks(std::vector<check_result>& r, uint64_t seed, const scheme_decl* d) {
  const std::string n = d->name;
  permutation_check(r, n, seed, d);
  problem ps(scheme::named, true, seed, d);
  const int64_t c = 1000;
  const auto a = ps.run();
  const auto p1 = iota_rows(c, ps.N);
  const auto b = ps.run([&](auto& p) {
    p.q_positions = p.k_positions = p1;
    p.pos.named = {{d->name, named_transform_case(*d, c, c + ps.N - 1)}};
  });
  const double shifted = max_abs_diff(a.data(), b.data(), static_cast<int64_t>(a.size()));
  if (named_transform_relative(*d))
    r.push_back(equal_check(
        n + "_translation_invariant",
        n + ": shifting every position by 1000 (and the case parameters' positions with them) "
            "leaves the outputs unchanged",
        shifted, ps.tolerance(ps.N), "causal, N = 20; q'.k' carries the relative distance only"));
  else  // a scale of the absolute position (the temperature)
    r.push_back(breaks_check(n + "_not_translation_invariant",
                             n + ": shifting every position by 1000 changes the outputs (it reads "
                                 "the absolute position)",
                             shifted, ps.tolerance(ps.N), "causal, N = 20"));
  packed_and_padded_checks(r, n, ps);
  cache_check(r, n, ps,
              "causal; keys transformed once on append, positions continue after the prefix");
}

// A scheme reached by name with relative tables (Shaw) at its case-table parameters: the engine
// against attention written out here from the declared tables (s_ij = q_i . (k_j + a^K_c) /
// sqrt(D), causal, softmax, o_i = sum_j p_ij (v_j + a^V_c), c = clip(j - i, -K, K) + K: Shaw et
// al. 2018, eq. 3-4), then what every scheme passes: permutation broken, translation, packing,
// padding, cache.
void relative_scheme_checks(std::vector<check_result>& r, uint64_t seed, const scheme_decl* d) {
  const std::string n = d->name;
  problem ps(scheme::named, true, seed, d);
  const int64_t N = ps.N, D = ps.D, H = ps.Hq, G = ps.Hq / ps.Hkv, K = ps.K;
  const auto& ak = ps.ntens.at(0);
  const auto& av = ps.ntens.at(1);
  const auto out = ps.run();
  double dev = 0;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> sc(i + 1);
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j <= i; ++j) {
        const int64_t c = std::clamp<int64_t>(j - i, -K, K) + K;
        double dot = 0;
        for (int64_t e = 0; e < D; ++e)
          dot += ps.q[(i * H + h) * D + e] * (ps.k[(j * ps.Hkv + h / G) * D + e] + ak[c * D + e]);
        m = std::max(m, sc[j] = dot / std::sqrt(double(D)));
      }
      for (auto& x : sc) z += (x = std::exp(x - m));
      for (int64_t e = 0; e < D; ++e) {
        double o = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t c = std::clamp<int64_t>(j - i, -K, K) + K;
          o += sc[j] / z * (ps.v[(j * ps.Hkv + h / G) * D + e] + av[c * D + e]);
        }
        dev = std::max(dev, std::abs(o - out[(i * H + h) * D + e]));
      }
    }
  r.push_back(equal_check(n + "_engine_matches_tables",
                          n + ": the engine's attention equals softmax(q.(k + a^K) / sqrt(D)) "
                              "(v + a^V) written out with the declared tables",
                          dev, ps.tolerance(N),
                          fmt::format("causal, N = {}, 4 query heads, 2 kv heads, K = {}", N, K)));
  permutation_check(r, n, seed, d);
  r.push_back(
      equal_check(n + "_translation_invariant",
                  n + ": shifting every position by c = 1000003 leaves the outputs unchanged",
                  shift_deviation(ps, 1000003), ps.tolerance(N),
                  "causal; the tables' row depends on kpos - qpos only"));
  packed_and_padded_checks(r, n, ps);
  cache_check(r, n, ps);
}

// A scheme reached by name: what its declaration says of its bias (offset-only, symmetric,
// bounded), tested on the bias itself, then the engine: its outputs against attention written
// out in plain loops from the declared bias, and the translation, packing, padding and cache
// checks every scheme passes.
// Here at the value `choice` of its choice parameter, if it has one (the checks named after the
// scheme, then the value when not the first).
void named_bias_scheme_checks(std::vector<check_result>& r, uint64_t seed, const scheme_decl* d,
                              int choice) {
  {
    std::string n = d->name;
    for (const auto& prm : d->params)
      if (prm.choices && choice != 0) n += "_" + param_choices(prm)[choice];
    problem ps(scheme::named, true, seed, d, choice);
    const auto& a = ps.nargs;
    const int64_t H = ps.Hq;
    auto bias = [&](int64_t h, int64_t qp, int64_t kp) {
      return ps.nbias ? ps.nbias(h, qp, kp) : named_bias_value(*d, a, h, H, qp, kp);
    };
    // Pairs over a window of 64 positions, shifted far (1000003, 2^40): bits, not a tolerance.
    const int64_t shifts[] = {1, 1000003, int64_t{1} << 40};
    if (d->bias_props & bias_offset_only) {
      double dev = 0;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < 64; ++i)
          for (int64_t j = 0; j < 64; ++j)
            for (int64_t c : shifts)
              dev = std::max(dev, std::abs(bias(h, i, j) - bias(h, i + c, j + c)));
      r.push_back(equal_check(n + "_bias_offset_only",
                              n + ": bias_h(qpos + c, kpos + c) = bias_h(qpos, kpos), bit for bit",
                              dev, 0, "4 heads, qpos, kpos in [0, 64), c = 1, 1000003, 2^40"));
    }
    if (d->bias_props & bias_symmetric) {
      double dev = 0;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < 64; ++i)
          for (int64_t j = 0; j < 64; ++j)
            dev = std::max(dev, std::abs(bias(h, i, j) - bias(h, j, i)));
      r.push_back(equal_check(n + "_bias_symmetric",
                              n + ": bias_h(qpos, kpos) = bias_h(kpos, qpos), bit for bit", dev, 0,
                              "4 heads, qpos, kpos in [0, 64)"));
    }
    if (d->bias_props & bias_bounded) {
      // max |bias| / bound over offsets 0 .. 4096 and a sample out to 2^40 (must be <= 1).
      double ratio = 0;
      for (int64_t h = 0; h < H; ++h) {
        const double b = named_bias_bound(*d, a, h, H);
        for (int64_t x = 0; x <= 4096; ++x) ratio = std::max(ratio, std::abs(bias(h, 0, x)) / b);
        for (int64_t x = 4097; x < (int64_t{1} << 40); x = x * 3 + 1)
          ratio = std::max(ratio, std::abs(bias(h, x, 0)) / b);
      }
      check_result c{"attention",
                     n + "_bias_bounded",
                     n + ": |bias_h| stays within the declared bound at every distance",
                     ratio <= 1,
                     ratio,
                     1,
                     ""};
      c.detail = "max |bias_h(0, x)| / bound_h over 4 heads, x = 0..4096 and x up to 2^40";
      r.push_back(c);
    }
    {
      // The engine against attention written out here: s_ij = q_i.k_j / sqrt(D) + bias, causal,
      // softmax, times v, in double.
      const int64_t D = ps.D, G = ps.Hq / ps.Hkv;
      const double dev =
          causal_written_out_deviation(ps, ps.run(), [&](int64_t h, int64_t i, int64_t j) {
            double dot = 0;
            for (int64_t e = 0; e < D; ++e)
              dot += ps.q[(i * H + h) * D + e] * ps.k[(j * ps.Hkv + h / G) * D + e];
            return dot / std::sqrt(double(D)) + bias(h, i, j);
          });
      r.push_back(equal_check(n + "_engine_matches_bias",
                              n + ": the engine's attention equals softmax(q.k / sqrt(D) + bias) v "
                                  "written out with the declared bias",
                              dev, ps.tolerance(ps.N),
                              "causal, N = 20, 4 query heads, 2 kv heads"));
    }
    if (!d->causal_only) permutation_check(r, n, seed, d, choice);
    if (d->bias_props & bias_offset_only)
      r.push_back(equal_check(n + "_translation_invariant",
                              n + ": shifting every position by c = 1000003 leaves the outputs "
                                  "unchanged",
                              shift_deviation(ps, 1000003), ps.tolerance(ps.N),
                              "causal; the bias depends on kpos - qpos only"));
    if (named_bias_by_token(*d))
      r.push_back(equal_check(n + "_positions_do_not_matter",
                              n + ": its bias is of the tokens, not of their positions: shifting "
                                  "every position by c = 1000003 leaves the outputs unchanged",
                              shift_deviation(ps, 1000003), ps.tolerance(ps.N),
                              "causal; the bias reads token indices (score_bias::by_token)"));
    packed_and_padded_checks(r, n, ps);
    cache_check(r, n, ps);
  }
}

void named_scheme_checks(std::vector<check_result>& r, uint64_t seed) {
  for (const scheme_decl* d : named_scheme_decls()) {
    if (d->transform) {
      transform_scheme_checks(r, seed, d);
      continue;
    }
    if (named_path_scheme(*d)) {  // its own checks: cope_checks; then packing, padding, cache
      problem ps(scheme::named, true, seed, d);
      const std::string n = d->name;
      packed_and_padded_checks(r, n, ps);
      cache_check(r, n, ps);
      continue;
    }
    if (!d->named) {
      rope_pairs_scheme_checks(r, seed, d);
      continue;
    }
    if (named_relative(*d)) {
      relative_scheme_checks(r, seed, d);
      continue;
    }
    size_t choices = 1;
    for (const auto& prm : d->params)
      if (prm.choices) choices = param_choices(prm).size();
    for (size_t c = 0; c < choices; ++c) named_bias_scheme_checks(r, seed, d, static_cast<int>(c));
  }
}

}  // namespace

// The float32 kernels' softmax exponential (SoftmaxExp, src/attention/attention_simd.cpp, through
// detail::exp_row_f32 with m = 0) on the target dispatched now, against std::exp in double: every
// 1009th float in (-87, 0] (1.1 million arguments) plus the ends, -inf and NaN. Bound, in ulps of
// e^t (the error analysis beside SoftmaxExp): with FMA (AVX2, AVX-512) the reduction's rounding
// (0.5 ulp of |r| <= 0.35 and L2's representation: <= 1.6e-8 relative, 0.27 ulp), the Taylor
// truncation (0.09), the Horner steps before the last (<= 0.77 ulp of q scaled by |r|: 0.27) and
// the last fused step (0.5): 1.13 ulp. Without FMA (SSE4 and below) each step rounds twice:
// reduction 0.28, truncation 0.09, earlier steps 0.29, the last product 0.25 and its add 0.5:
// 1.41 ulp. t <= -87, -inf and NaN must give exactly 0, t = 0 exactly 1.
void softmax_exp_check(std::vector<check_result>& r) {
  const std::string target = simd_target_name();
  const bool fma = target.rfind("AVX", 0) == 0;
  const double bound = fma ? 1.13 : 1.41;
  std::vector<float> t, x;
  uint32_t lo = 0x80000000u, hi;  // -0 .. -87 as bit patterns (increasing magnitude)
  const float m87 = -87.0f;
  std::memcpy(&hi, &m87, sizeof hi);
  for (uint32_t b = lo; b < hi; b += 1009) {
    float v;
    std::memcpy(&v, &b, sizeof v);
    t.push_back(v);
  }
  const float edge[] = {0.0f,
                        std::nextafter(-87.0f, 0.0f),
                        -87.0f,
                        std::nextafter(-87.0f, -100.0f),
                        -100.0f,
                        -1e30f,
                        -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()};
  t.insert(t.end(), std::begin(edge), std::end(edge));
  x = t;
  detail::exp_row_f32(x.data(), static_cast<int64_t>(x.size()), 0.0f);
  double worst = 0;
  std::string where = "none";
  for (size_t i = 0; i < t.size(); ++i) {
    double err;
    if (!(t[i] > -87.0f)) {  // -87 and below, -inf, NaN: exactly 0
      err = x[i] == 0.0f ? 0.0 : std::numeric_limits<double>::infinity();
    } else {
      const double ref = std::exp(static_cast<double>(t[i]));
      const float rf = static_cast<float>(ref);
      const double ulp = static_cast<double>(std::nextafter(rf, 2.0f * rf + 1.0f)) - rf;
      err = std::abs(static_cast<double>(x[i]) - ref) / ulp;
      if (t[i] == 0.0f && x[i] != 1.0f) err = std::numeric_limits<double>::infinity();
    }
    if (!(err <= worst)) {
      worst = err;
      where = fmt::format("t = {:.9g}: {:.9g}", t[i], x[i]);
    }
  }
  r.push_back(measured_check(
      "attention", "softmax_exp_within_bound",
      "the float32 kernels' softmax exponential e^t, t in (-87, 0], is within its error bound "
      "on the target dispatched; 0 for t <= -87, -inf and NaN; exactly 1 at 0",
      worst, bound,
      fmt::format("{} ({}), {} arguments, max error in ulps of e^t (worst at {}); bound {} ulp "
                  "derived in src/verify/attention_checks.cpp",
                  target, fma ? "FMA" : "no FMA", t.size(), where, bound)));
}

// FIRE's float32 row (hook_fire.cpp: its MLP as a line per segment between the relus' kinks)
// against its specification value() in double, within the bound derived there:
// |row - value| <= 2^-24 |value| + 2 (m + 4) 2^-53 S, S = |b2| + sum_u |w2_u| (|w1_u| x + |b1_u|).
// Heads of 4 and 32 units drawn from seed (one unit with w1 = 0, one with a kink far out),
// thresholds L below and above the queries, rows behind, around and ahead of the query in
// blocks that start anywhere (lengths 1 .. 300).
void fire_row_check(std::vector<check_result>& r, uint64_t seed) {
  double worst = 0;
  int64_t rows = 0;
  std::string where;
  for (const int64_t m : {int64_t{4}, int64_t{32}}) {
    const int64_t Hq = 4, W = 3 * m + 3, S = 300, D = 8;
    rng g(seed + static_cast<uint64_t>(m));
    std::vector<float> w(static_cast<size_t>(Hq * W));
    for (int64_t h = 0; h < Hq; ++h) {
      float* x = w.data() + h * W;
      for (int64_t e = 0; e < 3 * m; ++e) x[e] = static_cast<float>(g.normal());
      x[0] = 0;                         // a unit without a kink
      x[1] = static_cast<float>(1e-6);  // a kink far out
      x[3 * m] = static_cast<float>(0.5 * g.normal());
      x[3 * m + 1] = static_cast<float>(g.normal());
      x[3 * m + 2] = static_cast<float>(h % 2 == 0 ? 3.0 : 400.0);  // L below / above every qpos
    }
    std::vector<float> q(S * Hq * D), kv(S * 2 * D), out(S * Hq * D);
    attention_params<float> p;
    p.q = q.data(), p.k = kv.data(), p.v = kv.data(), p.out = out.data();
    p.T = p.S = S, p.Hq = Hq, p.Hkv = 2, p.D = D;
    p.pos.named = {{"fire", {}, {named_tensor{"fire", {Hq, W}, w, {}}}}};
    const auto pl = detail::make_attention_plan(p);
    const auto terms = detail::make_engine_terms<float>(p, pl, nullptr);
    const auto& b = *terms.biases.at(0);
    std::vector<int64_t> kpos(S);
    for (int64_t j = 0; j < S; ++j) kpos[j] = j;
    for (int64_t h = 0; h < Hq; ++h)
      for (const int64_t qp : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{150}, int64_t{299}})
        for (const auto& [k0, n] :
             {std::pair{int64_t{0}, S}, std::pair{qp, int64_t{1}}, std::pair{qp / 2, int64_t{65}},
              std::pair{int64_t{3}, int64_t{64}},
              std::pair{std::max<int64_t>(qp - 100, 0), int64_t{200}}}) {
          const int64_t len = std::min(n, S - k0);
          std::vector<float> row(static_cast<size_t>(len), 0.0f);
          b.add_row(h, qp, kpos.data() + k0, len, true, row.data());
          ++rows;
          const float* x = w.data() + h * W;
          const double c = std::log1p(std::exp(double(x[3 * m + 1])));
          const double L = double(x[3 * m + 2]) + std::log1p(std::exp(-double(x[3 * m + 2])));
          const double pm = std::log1p(c * std::max(L, double(qp)));
          for (int64_t j = 0; j < len; ++j) {
            const double v = b.value(h, qp, kpos[k0 + j]);
            const double xx = std::log1p(c * double(std::llabs(qp - kpos[k0 + j]))) / pm;
            double sum = std::abs(double(x[3 * m]));
            for (int64_t u = 0; u < m; ++u)
              sum += std::abs(double(x[2 * m + u])) *
                     (std::abs(double(x[u])) * xx + std::abs(double(x[m + u])));
            const double bound = 0x1p-24 * std::abs(v) + 2.0 * double(m + 4) * 0x1p-53 * sum;
            const double ratio = std::abs(double(row[j]) - v) / bound;
            if (!(ratio <= worst)) {
              worst = ratio;
              where = fmt::format("m = {}, head {}, qpos {}, kpos {}: {:.9g} vs {:.17g}", m, h, qp,
                                  kpos[k0 + j], row[j], v);
            }
          }
        }
  }
  r.push_back(measured_check(
      "attention", "fire_float_row_within_bound",
      "FIRE's float32 row (a line per segment between its relus' kinks) is its double "
      "specification rounded to float within 2^-24 |b| + 2 (m + 4) 2^-53 S",
      worst, 1.0,
      fmt::format("{} rows, m = 4 and 32, 4 heads, L below and above the queries; max error / "
                  "bound (worst at {}); bound derived in src/attention/hook_fire.cpp",
                  rows, where)));
}

std::vector<check_result> attention_checks() {
  std::vector<check_result> r;
  const uint64_t seed = 12345;
  softmax_exp_check(r);
  fire_row_check(r, seed);
  permutation_checks(r, seed);
  relative_translation_checks(r, seed);
  cope_checks(r, seed);
  translation_checks(r, seed);
  mrope_checks(r, seed);
  absolute_scheme_check(r, seed);
  document_checks(r, seed);
  named_scheme_checks(r, seed);
  // The case table's small list: check mode (tiled vs reference) and grad mode.
  for (const auto& c : attention_cases::check_cases()) {
    r.push_back(attention_cases::check_case(c));
    if (c.passes & attention_cases::grad) r.push_back(attention_cases::grad_case(c));
  }
  return r;
}

}  // namespace posenc
