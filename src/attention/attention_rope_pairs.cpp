// The path of the schemes that place RoPE per (query, key) pair (named_schemes.hpp, named_pairs:
// Self-Extend, Dual Chunk Attention). Per query head h and query i, with r = region(qpos_i,
// kpos_j) and a_r, b_r the region's query and key positions:
//   s_ij = scale f (R(a_r(qpos_i)) q_i) . (R(b_r(kpos_j)) k_j)    visible j (attention.hpp masks)
//   p_i  = softmax_j(s_i), with the sink logit in the denominator when sinks are on
//   o_i  = sum_j p_ij v_j
// R is the call's RoPE (rope_scheme: frequencies, layout, angle convention, attention factor), so
// a pair in a region whose positions are the true ones scores exactly as under plain RoPE; f is
// the scheme's factor for the length of the query's sequence, the real keys of its document
// (named_pairs::score_factor: DCA's length scaling; 1 for the others).
// Backward, with dS_ij = P_ij (dP_ij - D_i) as for every scheme (attention.hpp) and q'_ir, k'_jr
// the rotated copies of region r:
//   dq_i = sum_r R(a_r)^T sum_{j in r} scale f dS_ij k'_jr
//   dk_j = sum_r R(b_r)^T sum_{i in r} scale f dS_ij q'_ir,   dv_j = sum_i P_ij dO_i
// A pair whose region is -1 is not attended (as a masked one): StreamingLLM's evicted keys.
// Implementations:
//   reference  the specification: every pair's q and k rotated at that pair's positions, in
//              double, then the score row and a two-pass softmax (T S rotations of each).
//   fast       each token rotated once per distinct position map (Self-Extend: 2 for q, 2 for
//              k; DCA: 3 for q, 1 for k) in the element type, as the RoPE engine rotates, and
//              one product per distinct (q map, k map) over the columns where it occurs:
//     float32 forward   tiles of a block's 32 queries for up to 4 query heads of a kv head
//                       over strips of 256 keys, FlashAttention's online softmax
//                       (pairs_forward_f32); T <= 4: one pass over the keys read in place,
//                       chunk partials merged in order (pairs_decode_f32);
//     float32 backward  FlashAttention-2's backward on the same tiles, P from the saved lse,
//                       kv heads in parallel (pairs_backward_f32);
//     float64           the scores, softmax and sums per row in double, threads over query
//                       heads (forward) or kv heads (backward).
//   With the transform's row form (RoPE's per-token cos/sin table) the float32 forms read q, k
//   and v in place and rotate each key as they pack it. Every form's bits are independent of
//   the thread count. O(T S D) arithmetic, no T x S matrix.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <type_traits>
#include <vector>

#include "attention_plan.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"

namespace posenc::detail {
namespace {

constexpr double kPairsNegInf = -std::numeric_limits<double>::infinity();

// The scale of each query row's scores: the call's, times the scheme's factor for the row's
// sequence length (named_pairs::score_factor, DCA's length scaling): the real keys of the
// query's document (vLLM's seq_len), so that packing and padding do not change it.
template <typename Real>
std::vector<double> pairs_row_scale(const attention_params<Real>& p, const attention_plan& pl,
                                    const engine_terms<Real>& t) {
  std::vector<double> out(static_cast<size_t>(p.T), pl.scale);
  if (!t.pairs->score_factor) return out;
  if (pl.qdoc.empty()) {
    int64_t n = 0;
    for (int64_t j = 0; j < p.S; ++j) n += pl.kvalid[j];
    std::fill(out.begin(), out.end(), pl.scale * t.pairs->score_factor(t.pairs_args, n));
    return out;
  }
  std::map<int64_t, int64_t> n;
  for (int64_t j = 0; j < p.S; ++j) n[pl.kdoc[j]] += pl.kvalid[j];
  for (int64_t i = 0; i < p.T; ++i)
    out[i] = pl.scale * t.pairs->score_factor(t.pairs_args, n[pl.qdoc[i]]);
  return out;
}

// The inputs in token-major copies (whatever p's layout) and the regions' position maps.
template <typename Real>
struct pairs_input {
  std::vector<Real> q, k, v;  // (T, Hq, D), (S, Hkv, D) x 2
  int R = 0;
  // Distinct position maps: region r reads copy qvar[r] of q and kvar[r] of k.
  std::vector<int> qvar, kvar;
  std::vector<std::vector<int64_t>> qmap, kmap;  // per copy: (T,) and (S,) positions
  std::vector<double> row_scale;                 // (T,) pairs_row_scale
};

template <typename Real>
pairs_input<Real> pairs_load(const attention_params<Real>& p, const attention_plan& pl,
                             const engine_terms<Real>& t, bool copy_q = true, bool copy_kv = true) {
  pairs_input<Real> in;
  const int64_t T = p.T, S = p.S, Hkv = p.Hkv, D = p.D;
  if (copy_q) in.q.assign(p.q, p.q + T * p.Hq * D);
  in.k.resize(copy_kv ? S * Hkv * D : 0);
  in.v.resize(copy_kv ? S * Hkv * D : 0);
  for (int64_t j = 0; copy_kv && j < S; ++j)
    for (int64_t hk = 0; hk < Hkv; ++hk) {
      const int64_t x = (j * Hkv + hk) * D, y = kv_offset(p, j, hk);
      copy_key(p, j, hk, in.k.data() + x);
      std::copy(p.v + y, p.v + y + D, in.v.begin() + x);
    }
  const named_pairs& m = *t.pairs;
  in.R = m.regions;
  auto add = [](std::vector<std::vector<int64_t>>& maps, std::vector<int64_t> x) {
    for (size_t c = 0; c < maps.size(); ++c)
      if (maps[c] == x) return static_cast<int>(c);
    maps.push_back(std::move(x));
    return static_cast<int>(maps.size() - 1);
  };
  for (int r = 0; r < in.R; ++r) {
    std::vector<int64_t> qm(T), km(S);
    for (int64_t i = 0; i < T; ++i) qm[i] = m.query_pos(t.pairs_args, r, pl.qpos_safe[i]);
    for (int64_t j = 0; j < S; ++j) km[j] = m.key_pos(t.pairs_args, r, pl.kpos_safe[j]);
    in.qvar.push_back(add(in.qmap, std::move(qm)));
    in.kvar.push_back(add(in.kmap, std::move(km)));
  }
  in.row_scale = pairs_row_scale(p, pl, t);
  return in;
}

// The region of pair (i, j) (visible pairs only: pads have no position).
template <typename Real>
int pair_region(const engine_terms<Real>& t, const attention_plan& pl, int64_t i, int64_t j) {
  return t.pairs->region(t.pairs_args, pl.qpos[i], pl.kpos[j]);
}

// Softmax of a row of scores s (-inf = masked) with an optional sink logit, in place: s becomes
// P. Returns lse (-inf, or the sink, for a row that sees nothing; then P = 0) and the sink's
// probability in *psink.
double pairs_softmax(std::vector<double>& s, bool sink, double sk, double* psink) {
  double m = kPairsNegInf;
  for (const double x : s) m = std::max(m, x);
  *psink = 0;
  if (m == kPairsNegInf) {
    std::fill(s.begin(), s.end(), 0.0);
    return sink ? sk : kPairsNegInf;
  }
  if (sink && sk > m) m = sk;
  double l = sink ? std::exp(sk - m) : 0.0;
  for (double& x : s) l += x = std::exp(x - m);  // exp(-inf) = 0 for masked keys
  for (double& x : s) x /= l;
  if (sink) *psink = std::exp(sk - m) / l;
  return m + std::log(l);
}

// Row i of head h's scores: -inf where the pair is masked (attention.hpp) or in no region,
// else scale * dot(r, j) for the pair's region r (the reference's or the fast form's product).
template <typename Real, typename Dot>
void pairs_scores(const attention_params<Real>& p, const attention_plan& pl,
                  const engine_terms<Real>& t, const pairs_input<Real>& in, int64_t i,
                  std::vector<double>& s, Dot dot) {
  const double scale = in.row_scale[i];
  for (int64_t j = 0; j < p.S; ++j) {
    s[j] = kPairsNegInf;
    if (!attention_visible(pl, p.causal, p.window, p.T, p.S, i, j)) continue;
    const int r = pair_region(t, pl, i, j);
    if (r < 0) continue;  // outside every region: not attended (StreamingLLM's evicted keys)
    s[j] = scale * dot(r, j);
  }
}

// Row i of head h's scores, the specification: each visible pair's q and k copied to double
// and rotated at that pair's positions (qa, kb: (D,) scratch).
template <typename Real>
void pairs_scores_reference(const attention_params<Real>& p, const attention_plan& pl,
                            const engine_terms<Real>& t, const pairs_input<Real>& in, int64_t h,
                            int64_t i, std::vector<double>& s, std::vector<double>& qa,
                            std::vector<double>& kb) {
  const int64_t D = p.D, hk = h / pl.group;
  pairs_scores(p, pl, t, in, i, s, [&](int r, int64_t j) {
    const int64_t a = in.qmap[in.qvar[r]][i], b = in.kmap[in.kvar[r]][j];
    for (int64_t d = 0; d < D; ++d) {
      qa[d] = double(in.q[(i * p.Hq + h) * D + d]);
      kb[d] = double(in.k[(j * p.Hkv + hk) * D + d]);
    }
    t.transform->apply(std::span<const int64_t>(&a, 1), qa.data(), 1, 1, D, false, false);
    t.transform->apply(std::span<const int64_t>(&b, 1), kb.data(), 1, 1, D, true, false);
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += qa[d] * kb[d];
    return dot;
  });
}

// The rotated copies of the fast form: rq[c] = q rotated at qmap[c], rk[c] = k at kmap[c].
template <typename Real>
struct pairs_rotated {
  std::vector<std::vector<Real>> q, k;
};

template <typename Real>
pairs_rotated<Real> pairs_rotate(const attention_params<Real>& p, const engine_terms<Real>& t,
                                 const pairs_input<Real>& in, bool rotate_q = true) {
  pairs_rotated<Real> rot;
  for (const auto& m : in.qmap) {
    if (!rotate_q) break;
    // From p.q where the input holds no copy of it (q is token-major in every layout).
    if (in.q.empty())
      rot.q.emplace_back(p.q, p.q + p.T * p.Hq * p.D);
    else
      rot.q.push_back(in.q);
    t.transform->apply(m, rot.q.back().data(), p.T, p.Hq, p.D, false, false);
  }
  for (const auto& m : in.kmap) {
    rot.k.push_back(in.k);
    t.transform->apply(m, rot.k.back().data(), p.S, p.Hkv, p.D, true, false);
  }
  return rot;
}

// Row i of head h's scores from the rotated copies.
template <typename Real>
void pairs_scores_fast(const attention_params<Real>& p, const attention_plan& pl,
                       const engine_terms<Real>& t, const pairs_input<Real>& in,
                       const pairs_rotated<Real>& rot, int64_t h, int64_t i,
                       std::vector<double>& s) {
  const int64_t D = p.D, hk = h / pl.group;
  pairs_scores(p, pl, t, in, i, s, [&](int r, int64_t j) {
    const Real* qi = rot.q[in.qvar[r]].data() + (i * p.Hq + h) * D;
    const Real* kj = rot.k[in.kvar[r]].data() + (j * p.Hkv + hk) * D;
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += double(qi[d]) * double(kj[d]);
    return dot;
  });
}

// The float32 forms work on blocks of kPairsRows queries, whose pairs' regions are found once
// for every head (pairs_block), and on tiles of a block's rows for up to four query heads of one
// kv head (kPairsTile rows) over column strips of kPairsCols keys, so that a strip's scores, P
// and dS stay in cache. Each distinct (q copy, k copy) of the regions is one product over the
// columns where one of its regions occurs (gemm_f32, the forward's Highway micro-kernel).
constexpr int64_t kPairsRows = 32;
constexpr int64_t kPairsChunk = 16;  // query blocks whose regions the backward holds at once
constexpr int64_t kPairsCols = 256;  // keys per column strip
constexpr int64_t kPairsTile = 128;  // tile rows: the block's rows for up to 4 query heads

// A block of kPairsRows queries [i0, i0 + rows): the products' column ranges and each row's
// runs of pairs in one region, found once for every head.
struct pairs_run {
  int64_t j0, j1;  // columns [j0, j1)
  int r;           // the pairs' region, -1 where they are not attended (masked or in none)
};
struct pairs_block {
  int64_t i0 = 0, rows = 0;
  int64_t c0 = 0, c1 = 0;       // the columns P V reads, whole groups of 8 (c0 = c1: none)
  std::vector<int64_t> lo, hi;  // per product u: the columns [lo[u], hi[u]) where it occurs
  std::vector<pairs_run> runs;  // row ii's runs, covering [c0, c1): runs[at[ii] .. at[ii + 1])
  std::vector<int64_t> at;
  std::vector<uint8_t> sees;  // per row: 1 if it attends a key
  std::vector<int8_t> reg;    // scratch: one row's regions
};

// Block bl's regions for queries [i0, i0 + rows) (np products, regions mapped by prod_of).
inline void pairs_block_find(const attention_params<float>& p, const attention_plan& pl,
                             const engine_terms<float>& t, const std::vector<int>& prod_of,
                             int64_t np, int64_t i0, int64_t rows, pairs_block& bl) {
  const int64_t T = p.T, S = p.S, Sp = (S + 7) / 8 * 8;
  bl.i0 = i0, bl.rows = rows;
  bl.lo.assign(np, Sp), bl.hi.assign(np, 0);
  bl.reg.resize(static_cast<size_t>(rows * S));
  bl.sees.assign(rows, 0);
  int64_t vlo = Sp, vhi = 0;
  for (int64_t ii = 0; ii < rows; ++ii)
    for (int64_t j = 0; j < S; ++j) {
      int8_t r = -1;
      if (attention_visible(pl, p.causal, p.window, T, S, i0 + ii, j)) {
        r = static_cast<int8_t>(std::max(pair_region(t, pl, i0 + ii, j), -1));
        if (r >= 0) {
          const int u = prod_of[r];
          bl.lo[u] = std::min(bl.lo[u], j), bl.hi[u] = std::max(bl.hi[u], j + 1);
          vlo = std::min(vlo, j), vhi = std::max(vhi, j + 1);
          bl.sees[ii] = 1;
        }
      }
      bl.reg[ii * S + j] = r;
    }
  const int64_t al = gemm_panel_width();  // a multiple of 8: the forward's key panels start there
  bl.c0 = vlo >= vhi ? 0 : vlo / al * al;
  bl.c1 = vlo >= vhi ? 0 : std::min(Sp, (vhi + 7) / 8 * 8);
  bl.runs.clear();
  bl.at.assign(rows + 1, 0);
  for (int64_t ii = 0; ii < rows; ++ii) {
    bl.at[ii] = static_cast<int64_t>(bl.runs.size());
    for (int64_t j = bl.c0; j < bl.c1;) {
      const int r = j < S ? bl.reg[ii * S + j] : -1;
      int64_t e = j + 1;
      while (e < bl.c1 && (e < S ? bl.reg[ii * S + e] : -1) == r) ++e;
      bl.runs.push_back({j, e, r});
      j = e;
    }
  }
  bl.at[rows] = static_cast<int64_t>(bl.runs.size());
}

// Row ii of the block's scores for one query head over the columns [s0, s1) from the products'
// scores G (np x (prod_rows, Sl); the row's at row grow, column j at G[.. + j - s0]): Pi[j - s0]
// = row_scale G_u(grow, j), u the pair's region's product, -inf where the pair is not attended;
// returns the row's largest score there.
inline float pairs_row_scores(const pairs_block& bl, const std::vector<int>& prod_of,
                              const float* G, int64_t Sl, int64_t prod_rows, int64_t grow,
                              double row_scale, int64_t ii, int64_t s0, int64_t s1, float* Pi) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t x = bl.at[ii]; x < bl.at[ii + 1]; ++x) {
    const pairs_run& rn = bl.runs[x];
    const int64_t j0 = std::max(rn.j0, s0), j1 = std::min(rn.j1, s1);
    if (j0 >= j1) continue;
    if (rn.r < 0) {
      std::fill(Pi + (j0 - s0), Pi + (j1 - s0), -std::numeric_limits<float>::infinity());
      continue;
    }
    const float* Gu = G + (prod_of[rn.r] * prod_rows + grow) * Sl;  // column j at Gu[j - s0]
    m = std::max(m, scale_row_max_f32(Pi + (j0 - s0), Gu + (j0 - s0), row_scale, j1 - j0));
  }
  return m;
}

// The distinct (q copy, k copy) products of the regions, and each region's product.
inline int64_t pairs_products(const pairs_input<float>& in, std::vector<std::pair<int, int>>& prods,
                              std::vector<int>& prod_of) {
  prod_of.assign(in.R, 0);
  for (int r = 0; r < in.R; ++r) {
    const std::pair<int, int> x{in.qvar[r], in.kvar[r]};
    auto it = std::find(prods.begin(), prods.end(), x);
    prod_of[r] = static_cast<int>(it - prods.begin());
    if (it == prods.end()) prods.push_back(x);
  }
  const auto np = static_cast<int64_t>(prods.size());
  if (np > 8) fail("per-pair RoPE: {} distinct products; the float32 path takes at most 8", np);
  return np;
}

// Every k copy's keys, rotated, into kT (copies, Hkv, D, Sl) and, when kr is not null, kr (copies,
// Hkv, Sp, Dp), both zero-padded: from the rotated copies (rot.k), or, with the transform's row
// form (rot.k empty), from k in place, each key rotated at each copy's position as it is packed
// (the bits of apply()).
// With panel > 0, kT holds per copy and kv head ceil(Sp / panel) panels of (D, panel) instead
// (gemm_f32_panel's B): element (d, j) at (j / panel) D panel + d panel + j % panel.
void pairs_pack_keys(const attention_params<float>& p, const engine_terms<float>& t,
                     const pairs_input<float>& in, const pairs_rotated<float>& rot, int64_t Sl,
                     int64_t Sp, int64_t Dp, std::vector<float>& kT, std::vector<float>* kr,
                     int64_t panel = 0) {
  const int64_t S = p.S, Hkv = p.Hkv, D = p.D, nk = static_cast<int64_t>(in.kmap.size());
  const int64_t Rt = rot.k.empty() ? t.transform->row_table_size() : 0;
  const int64_t kh = panel ? (Sp + panel - 1) / panel * D * panel : D * Sl;  // per copy and head
  auto at = [&](int64_t d, int64_t j) {
    return panel ? j / panel * D * panel + d * panel + j % panel : d * Sl + j;
  };
  kT.assign(nk * Hkv * kh, 0.f);
  if (kr) kr->assign(nk * Hkv * Sp * Dp, 0.f);
  parallel_for(
      S,
      [&](int64_t b, int64_t e) {
        std::vector<float> x(Hkv * D), tab(Rt);
        for (int64_t j = b; j < e; ++j)
          for (int64_t c = 0; c < nk; ++c) {
            if (Rt > 0) {
              for (int64_t hk = 0; hk < Hkv; ++hk) copy_key(p, j, hk, &x[hk * D]);
              t.transform->fill_row_table(j, in.kmap[c][j], true, tab.data());
              t.transform->apply_rows(tab.data(), true, x.data(), Hkv, D);
            } else {
              std::copy_n(rot.k[c].data() + j * Hkv * D, Hkv * D, x.data());
            }
            for (int64_t hk = 0; hk < Hkv; ++hk) {
              if (kr) std::copy_n(&x[hk * D], D, &(*kr)[((c * Hkv + hk) * Sp + j) * Dp]);
              for (int64_t d = 0; d < D; ++d) kT[(c * Hkv + hk) * kh + at(d, j)] = x[hk * D + d];
            }
          }
      },
      64);
}

// Value j of kv head hk: from the copy in `in`, or in place.
inline const float* pairs_value(const attention_params<float>& p, const pairs_input<float>& in,
                                int64_t j, int64_t hk) {
  return in.v.empty() ? p.v + kv_offset(p, j, hk) : &in.v[(j * p.Hkv + hk) * p.D];
}

// The float32 forward (the fast form for float32): per block, its q rows rotated once per
// distinct query map for all heads; per tile, FlashAttention's online softmax over the column
// strips (Dao et al. 2022, Algorithm 1): with m the running maximum and l the running sum of a
// row, a strip's scores s (each pair's from its region's product, -inf where not attended) give
//   m' = max(m, max s),  P = Exp(s - m'),  l = l e^(m - m') + sum P,  O = e^(m - m') O + P V
// and at the end out = O / (l + e^(sink - m)), lse = m + log(l + e^(sink - m)) (the sink term
// only with sinks). Threads take blocks. Memory per thread O(kPairsTile (kPairsCols (copies +
// 1) + Dp copies)), no T x S matrix.
// What the float32 tiled forms share: the call, its sizes, the regions' products and, with the
// transform's row form, each q copy's per-token table; q_row and tile_q load rotated q rows.
struct pairs_tiles {
  const attention_params<float>& p;
  const attention_plan& pl;
  const engine_terms<float>& t;
  const pairs_input<float>& in;
  int64_t Hq, Hkv, D, G, Sp, Dp, Sl, nq, nk, np = 0;
  std::vector<std::pair<int, int>> prods;  // distinct (q copy, k copy) products
  std::vector<int> prod_of;                // each region's product
  int64_t Rt = 0;                          // the row form's table size (0: none)
  std::vector<std::vector<float>> qtab;    // per q copy: (T, Rt)

  pairs_tiles(const attention_params<float>& p_, const attention_plan& pl_,
              const engine_terms<float>& t_, const pairs_input<float>& in_)
      : p(p_),
        pl(pl_),
        t(t_),
        in(in_),
        Hq(p.Hq),
        Hkv(p.Hkv),
        D(p.D),
        G(pl.group),
        Sp((p.S + 7) / 8 * 8),
        Dp((p.D + 7) / 8 * 8),
        Sl(Sp + 16),
        nq(static_cast<int64_t>(in.qmap.size())),
        nk(static_cast<int64_t>(in.kmap.size())),
        Rt(t.transform->row_table_size()) {
    np = pairs_products(in, prods, prod_of);
    qtab.assign(Rt > 0 ? nq : 0, std::vector<float>(p.T * Rt));
    for (size_t c = 0; c < qtab.size(); ++c)
      parallel_for(
          p.T,
          [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i)
              t.transform->fill_row_table(i, in.qmap[c][i], false, &qtab[c][i * Rt]);
          },
          64);
  }

  // Query i of head h in q copy c, rotated, into dst (D): with the row form from the copy's
  // per-token table, else by apply() on the one row (the same bits: RoPE rotates each token on
  // its own).
  void q_row(int64_t c, int64_t i, int64_t h, float* dst) const {
    std::copy_n(p.q + (i * Hq + h) * D, D, dst);
    if (Rt > 0) {
      t.transform->apply_rows(&qtab[c][i * Rt], false, dst, 1, D);
    } else {
      const int64_t a = in.qmap[c][i];
      t.transform->apply(std::span<const int64_t>(&a, 1), dst, 1, 1, D, false, false);
    }
  }

  // The query blocks in chunks of kPairsChunk: each chunk's regions found once, in parallel,
  // then run(blocks, nb) over its nb blocks.
  template <typename F>
  void for_chunks(F&& run) const {
    const int64_t T = p.T, nqb = (T + kPairsRows - 1) / kPairsRows;
    std::vector<pairs_block> blocks(kPairsChunk);
    for (int64_t b0 = 0; b0 < nqb; b0 += kPairsChunk) {
      const int64_t nb = std::min(kPairsChunk, nqb - b0);
      parallel_for(nb, [&](int64_t b, int64_t e) {
        for (int64_t x = b; x < e; ++x) {
          const int64_t i0 = (b0 + x) * kPairsRows;
          pairs_block_find(p, pl, t, prod_of, np, i0, std::min(kPairsRows, T - i0), blocks[x]);
        }
      });
      run(blocks, nb);
    }
  }

  // The tile's rows of each q copy a product of block bl uses, into qb (copies, kPairsTile, Dp):
  // tile row r is head hk G + h0 + r / rows, query i0 + r % rows (R = ng rows rows).
  void tile_q(const pairs_block& bl, int64_t hk, int64_t h0, int64_t ng, float* qb) const {
    const int64_t rows = bl.rows;
    for (int64_t c = 0; c < nq; ++c) {
      bool used = false;
      for (int64_t u = 0; u < np; ++u) used |= prods[u].first == c && bl.lo[u] < bl.hi[u];
      if (!used) continue;
      for (int64_t r = 0; r < ng * rows; ++r)
        q_row(c, bl.i0 + r % rows, hk * G + h0 + r / rows, qb + (c * kPairsTile + r) * Dp);
    }
  }
};

struct pairs_fwd : pairs_tiles {
  int64_t pw = gemm_panel_width(), kh = 0;  // key panels' width, elements per copy and head
  int64_t Dv = 0;
  // Keys transposed per copy and kv head in panels of (D, pw) (gemm_f32_panel's B), zero-padded;
  // values (Sp, Dp) zero-padded in rows of Dv = Dp + 16 (a row a multiple of 512 B would put a
  // column strip of P V's B in a quarter of the L1 sets; the tiled kernels' vb_row).
  std::vector<float> kT, vp;
  struct scratch {
    std::vector<float> qb, G, P, O, m, l, beta;
  };

  pairs_fwd(const attention_params<float>& p_, const attention_plan& pl_,
            const engine_terms<float>& t_, const pairs_input<float>& in_,
            const pairs_rotated<float>& rot)
      : pairs_tiles(p_, pl_, t_, in_) {
    pairs_pack_keys(p, t, in, rot, Sl, Sp, Dp, kT, nullptr, pw);
    kh = (Sp + pw - 1) / pw * D * pw;
    Dv = Dp + 16;
    vp.assign(Hkv * Sp * Dv, 0.f);
    for (int64_t hk = 0; hk < Hkv; ++hk)
      for (int64_t j = 0; j < p.S; ++j)
        std::copy_n(pairs_value(p, in, j, hk), D, &vp[(hk * Sp + j) * Dv]);
  }

  scratch make_scratch() const {
    scratch sc;
    sc.qb.assign(nq * kPairsTile * Dp, 0.f);
    sc.G.resize(np * kPairsTile * kPairsCols);
    sc.P.resize(kPairsTile * kPairsCols);
    sc.O.resize(kPairsTile * Dp);
    sc.m.resize(kPairsTile);
    sc.l.resize(kPairsTile);
    sc.beta.resize(kPairsTile);
    return sc;
  }

  // Tile row r's strip [s0, s1): its scores, the running maximum and sum, and P in place.
  void strip_row(const pairs_block& bl, int64_t r, int64_t i, int64_t s0, int64_t s1,
                 scratch& sc) const {
    constexpr int64_t W = kPairsCols;
    float* Pr = &sc.P[r * W];
    const float ms = pairs_row_scores(bl, prod_of, sc.G.data(), W, kPairsTile, r, in.row_scale[i],
                                      i - bl.i0, s0, s1, Pr);
    const float m1 = std::max(sc.m[r], ms);
    if (m1 == -std::numeric_limits<float>::infinity()) {  // nothing attended yet
      std::fill(Pr, Pr + (s1 - s0), 0.f);
      sc.beta[r] = 0.f;
      return;
    }
    sc.beta[r] = sc.m[r] == -std::numeric_limits<float>::infinity()
                     ? 0.f
                     : static_cast<float>(std::exp(double(sc.m[r]) - double(m1)));
    sc.l[r] = sc.l[r] * sc.beta[r] + exp_row_f32(Pr, s1 - s0, m1);
    sc.m[r] = m1;
  }

  // Block bl's heads h0 .. h0 + ng - 1 of kv head hk as one tile of R = ng rows rows (tile row
  // r: head hk G + h0 + r / rows, query i0 + r % rows).
  void tile(const pairs_block& bl, int64_t hk, int64_t h0, int64_t ng, scratch& sc) const {
    constexpr int64_t W = kPairsCols;
    const int64_t i0 = bl.i0, rows = bl.rows, R = ng * rows;
    tile_q(bl, hk, h0, ng, sc.qb.data());
    std::fill(sc.m.begin(), sc.m.end(), -std::numeric_limits<float>::infinity());
    std::fill(sc.l.begin(), sc.l.end(), 0.f);
    std::fill(sc.O.begin(), sc.O.end(), 0.f);
    for (int64_t s0 = bl.c0; s0 < bl.c1; s0 += W) {
      const int64_t s1 = std::min(bl.c1, s0 + W);
      for (int64_t u = 0; u < np; ++u) {
        // From a panel's first column (s0 is one).
        const int64_t a = std::max(s0, bl.lo[u] / pw * pw),
                      e = std::min(s1, (bl.hi[u] + 7) / 8 * 8);
        if (a < e)
          gemm_f32_panel(R, e - a, &sc.qb[prods[u].first * kPairsTile * Dp], Dp,
                         &kT[(prods[u].second * Hkv + hk) * kh + a / pw * D * pw],
                         &sc.G[u * kPairsTile * W + (a - s0)], W, D, nullptr);
      }
      for (int64_t r = 0; r < R; ++r) strip_row(bl, r, i0 + r % rows, s0, s1, sc);
      gemm_f32(R, Dp, sc.P.data(), W, &vp[(hk * Sp + s0) * Dv], Dv, sc.O.data(), Dp, s1 - s0,
               sc.beta.data());
    }
    const bool sink = !p.sinks.empty();
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = i0 + r % rows, h = hk * G + h0 + r / rows;
      float* out = p.out + (i * Hq + h) * D;
      const double sk = sink ? double(p.sinks[h]) : 0.0;
      if (!bl.sees[r % rows]) {  // no key: the sink alone, out = 0
        std::fill(out, out + D, 0.f);
        if (p.lse) p.lse[i * Hq + h] = sink ? float(sk) : -std::numeric_limits<float>::infinity();
        continue;
      }
      const double M = sink ? std::max(double(sc.m[r]), sk) : double(sc.m[r]);
      const double l =
          double(sc.l[r]) * std::exp(double(sc.m[r]) - M) + (sink ? std::exp(sk - M) : 0.0);
      const double f = std::exp(double(sc.m[r]) - M) / l;
      for (int64_t d = 0; d < D; ++d) out[d] = static_cast<float>(f * double(sc.O[r * Dp + d]));
      if (p.lse) p.lse[i * Hq + h] = static_cast<float>(M + std::log(l));
    }
  }
};

void pairs_forward_f32(const attention_params<float>& p, const attention_plan& pl,
                       const engine_terms<float>& t, const pairs_input<float>& in,
                       const pairs_rotated<float>& rot) {
  const pairs_fwd pf(p, pl, t, in, rot);
  // Chunks of blocks: their regions found once, then the (kv head, block) tiles with the kv
  // head outermost, so that a thread's run of tiles rereads one head's packed keys and values.
  const int64_t G = pf.G;
  pf.for_chunks([&](const std::vector<pairs_block>& blocks, int64_t nb) {
    parallel_for(p.Hkv * nb, [&](int64_t b, int64_t e) {
      auto sc = pf.make_scratch();
      for (int64_t x = b; x < e; ++x)
        for (int64_t h0 = 0; h0 < G; h0 += kPairsTile / kPairsRows)
          pf.tile(blocks[x % nb], x / nb, h0, std::min(kPairsTile / kPairsRows, G - h0), sc);
    });
  });
}

// The float32 decode form (T <= kPairsDecodeRows queries): one pass over the keys in chunks of
// kPairsDecodeKeys, no copy of K or V. Per chunk and query i, every key is rotated at its pair's
// key position (apply over the chunk's keys at b_r(kpos_j), r the pair's region), the scores of
// the query's heads come from one product per region present (the keys against q rotated at
// a_r(qpos_i), (chunk, 8) per kv head), and the chunk keeps its softmax partials: its maximum m,
// its sum l and O = sum_j exp(s_j - m) v_j. The partials are merged in chunk order (in double),
// so the bits do not depend on the thread count. Memory O(threads kPairsDecodeKeys Hkv D).
constexpr int64_t kPairsDecodeRows = 4;
constexpr int64_t kPairsDecodeKeys = 256;

struct pairs_partial {  // one chunk's softmax of one query row of one head
  float m = -std::numeric_limits<float>::infinity(), l = 0;
};

// The decode form's problem: the call, q rotated per region and the chunks' partials.
struct pairs_dec {
  const attention_params<float>& p;
  const attention_plan& pl;
  const engine_terms<float>& t;
  const pairs_input<float>& in;
  int64_t T, S, Hq, Hkv, D, G, Dp, Gp, nc;
  std::vector<float> qr;            // (T, R, Hq, D): q rotated at each region's query position
  std::vector<pairs_partial> part;  // (chunks, T, Hq)
  std::vector<float> po;            // (chunks, T, Hq, Dp): each chunk's O
  struct scratch {
    std::vector<float> kb, vb, qb, C, Pg;
    std::vector<int64_t> bpos;
    std::vector<int8_t> reg;
  };

  pairs_dec(const attention_params<float>& p_, const attention_plan& pl_,
            const engine_terms<float>& t_, const pairs_input<float>& in_)
      : p(p_),
        pl(pl_),
        t(t_),
        in(in_),
        T(p.T),
        S(p.S),
        Hq(p.Hq),
        Hkv(p.Hkv),
        D(p.D),
        G(pl.group),
        Dp((D + 7) / 8 * 8),
        Gp((G + 7) / 8 * 8),
        nc((S + kPairsDecodeKeys - 1) / kPairsDecodeKeys),
        qr(T * in.R * Hq * D),
        part(nc * T * Hq),
        po(nc * T * Hq * Dp, 0.f) {
    for (int64_t i = 0; i < T; ++i)
      for (int r = 0; r < in.R; ++r) {
        float* x = &qr[(i * in.R + r) * Hq * D];
        std::copy_n(p.q + i * Hq * D, Hq * D, x);
        const int64_t a = in.qmap[in.qvar[r]][i];
        t.transform->apply(std::span<const int64_t>(&a, 1), x, 1, Hq, D, false, false);
      }
  }

  scratch make_scratch() const {
    constexpr int64_t W = kPairsDecodeKeys;
    return {std::vector<float>(W * Hkv * D), std::vector<float>(W * Dp, 0.f),
            std::vector<float>(D * Gp, 0.f), std::vector<float>(W * Gp),
            std::vector<float>(Gp * W),      std::vector<int64_t>(W),
            std::vector<int8_t>(W)};
  }

  // Kv head hk of chunk c for query i (n keys from j0; present: the regions that occur): the
  // scores per region present, the softmax partials and O = P V.
  void chunk_head(int64_t c, int64_t i, int64_t hk, int64_t j0, int64_t n, const bool* present,
                  scratch& sc) {
    constexpr int64_t W = kPairsDecodeKeys;
    const double rs = in.row_scale[i];
    // Scores (n, G): for each region present, the keys against q rotated for it; each key
    // takes its region's column.
    for (int r = 0; r < in.R; ++r) {
      if (!present[r]) continue;
      for (int64_t gg = 0; gg < G; ++gg)
        for (int64_t d = 0; d < D; ++d)
          sc.qb[d * Gp + gg] = qr[((i * in.R + r) * Hq + hk * G + gg) * D + d];
      gemm_f32(n, Gp, &sc.kb[hk * D], Hkv * D, sc.qb.data(), Gp, sc.C.data(), Gp, D, nullptr);
      for (int64_t jj = 0; jj < n; ++jj)
        if (sc.reg[jj] == r)
          for (int64_t gg = 0; gg < G; ++gg)
            sc.Pg[gg * W + jj] = static_cast<float>(rs * sc.C[jj * Gp + gg]);
    }
    for (int64_t gg = 0; gg < G; ++gg) {
      float* sr = &sc.Pg[gg * W];
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t jj = 0; jj < n; ++jj) {
        if (sc.reg[jj] < 0) sr[jj] = -std::numeric_limits<float>::infinity();
        m = std::max(m, sr[jj]);
      }
      pairs_partial& pp = part[(c * T + i) * Hq + hk * G + gg];
      pp.m = m;
      pp.l = exp_row_f32(sr, n, m);
    }
    // O (G, Dp) = P V over the chunk's keys.
    for (int64_t jj = 0; jj < n; ++jj)
      std::copy_n(p.v + kv_offset(p, j0 + jj, hk), D, &sc.vb[jj * Dp]);
    gemm_f32(G, Dp, sc.Pg.data(), W, sc.vb.data(), Dp, &po[((c * T + i) * Hq + hk * G) * Dp], Dp, n,
             nullptr);
  }

  // Chunk c: per query, the pairs' regions and the keys rotated at their key positions, then
  // each kv head.
  void chunk(int64_t c, scratch& sc) {
    constexpr int64_t W = kPairsDecodeKeys;
    const int64_t j0 = c * W, n = std::min(W, S - j0);
    for (int64_t i = 0; i < T; ++i) {
      bool any = false, present[8] = {};
      for (int64_t jj = 0; jj < n; ++jj) {
        const int64_t j = j0 + jj;
        int r = -1;
        if (attention_visible(pl, p.causal, p.window, T, S, i, j))
          r = std::max(pair_region(t, pl, i, j), -1);
        sc.reg[jj] = static_cast<int8_t>(r);
        sc.bpos[jj] = r >= 0 ? in.kmap[in.kvar[r]][j] : 0;
        if (r >= 0) any = present[r] = true;
        for (int64_t hk = 0; hk < Hkv; ++hk) copy_key(p, j, hk, &sc.kb[(jj * Hkv + hk) * D]);
      }
      if (!any) continue;  // the partials stay empty (m = -inf)
      t.transform->apply(std::span<const int64_t>(sc.bpos.data(), static_cast<size_t>(n)),
                         sc.kb.data(), n, Hkv, D, true, false);
      for (int64_t hk = 0; hk < Hkv; ++hk) chunk_head(c, i, hk, j0, n, present, sc);
    }
  }

  // Merges the chunks in order: M = max m_c, l = sum l_c e^(m_c - M) (+ the sink's
  // e^(sink - M)), out = sum O_c e^(m_c - M) / l; lse = M + log l.
  void merge() const {
    const bool sink = !p.sinks.empty();
    const double ninf = -std::numeric_limits<double>::infinity();
    parallel_for(T * Hq, [&](int64_t b, int64_t e) {
      std::vector<double> o(D);
      for (int64_t x = b; x < e; ++x) {
        const int64_t h = x % Hq;
        double M = ninf;
        for (int64_t c = 0; c < nc; ++c) M = std::max(M, double(part[c * T * Hq + x].m));
        float* out = p.out + x * D;
        const double sk = sink ? double(p.sinks[h]) : 0.0;
        if (M == ninf) {  // no key: the sink alone, out = 0
          std::fill(out, out + D, 0.f);
          if (p.lse) p.lse[x] = sink ? float(sk) : -std::numeric_limits<float>::infinity();
          continue;
        }
        if (sink) M = std::max(M, sk);
        double l = sink ? std::exp(sk - M) : 0.0;
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t c = 0; c < nc; ++c) {
          const pairs_partial& pp = part[c * T * Hq + x];
          if (double(pp.m) == ninf) continue;
          const double w = std::exp(double(pp.m) - M);
          l += w * double(pp.l);
          const float* oc = &po[(c * T * Hq + x) * Dp];
          for (int64_t d = 0; d < D; ++d) o[d] += w * double(oc[d]);
        }
        for (int64_t d = 0; d < D; ++d) out[d] = static_cast<float>(o[d] / l);
        if (p.lse) p.lse[x] = static_cast<float>(M + std::log(l));
      }
    });
  }
};

void pairs_decode_f32(const attention_params<float>& p, const attention_plan& pl,
                      const engine_terms<float>& t, const pairs_input<float>& in) {
  // Threads write disjoint parts of the partials: chunk c's.
  pairs_dec pd(p, pl, t, in);
  parallel_for(pd.nc, [&](int64_t b, int64_t e) {
    auto sc = pd.make_scratch();
    for (int64_t c = b; c < e; ++c) pd.chunk(c, sc);
  });
  pd.merge();
}

// The float32 backward in blocks (the fast form for float32): FlashAttention-2's backward (Dao
// 2023, Algorithm 2) with the forward's regions. P is recomputed from the saved lse, and each
// product runs over the columns where one of its regions occurs in the block, through the
// forward's micro-kernel (gemm_f32). Per block of kPairsRows queries, kv head hk and query head
// h of hk's group, with u a distinct (q copy, k copy) product and c, c' its copies:
//   G_u   = Q_c K_c'^T                       (rows, its columns)
//   P_ij  = Exp(row_scale_i G_u(ij) - lse_i)  u the pair's region's product; 0 if not attended
//   dP    = dO V^T                            (rows, the block's columns)
//   dS_ij = row_scale_i P_ij (dP_ij - D_i),   D_i = dO_i . o_i (FlashAttention-2's rowsum)
//   dQ_c += dS_u K_c'    dK_c' += dS_u^T Q_c  (each product's pairs only)
//   dV   += P^T dO
// then dq_i = sum_c R(qmap_c(i))^T dQ_c,i (copies in order) per block and head, and at the end
// dk_j = sum_c' R(kmap_c'(j))^T dK_c',j. Each kv head's accumulators take the blocks in query
// order whichever thread runs them (the blocks go in chunks; a chunk's regions are found once,
// then its kv heads run in parallel), so the bits do not depend on the thread count. Memory
// O((S (copies + 2) + T) Hkv D + chunk S), no T x S matrix.

// The gradient of one block of queries for query head h of kv head hk (pairs_backward_f32).
struct pairs_bwd_scratch {
  std::vector<float> G, P, dP, qb, dOb, dQ, dQg, dq, Drow;
};

// The backward's problem: the call, its products and the packed keys, values and accumulators.
struct pairs_bwd : pairs_tiles {
  const attention_grads<float>& g;
  // Per kv head: keys transposed per copy (D, Sl) and in rows (Sp, Dp), values transposed (D,
  // Sl), zero-padded; the accumulators dK per copy and dV (Sp, Dp).
  std::vector<float> kT, kr, vT, dK, dV, ones;

  pairs_bwd(const attention_params<float>& p_, const attention_plan& pl_,
            const engine_terms<float>& t_, const pairs_input<float>& in_,
            const pairs_rotated<float>& rot, const attention_grads<float>& g_)
      : pairs_tiles(p_, pl_, t_, in_), g(g_) {
    // kT, kr from the rotated copies of k, or, with the row form, from k in place (each key
    // rotated at each copy's position as it is packed); vT from v.
    pairs_pack_keys(p, t, in, rot, Sl, Sp, Dp, kT, &kr);
    vT.assign(Hkv * D * Sl, 0.f);
    for (int64_t hk = 0; hk < Hkv; ++hk)
      for (int64_t j = 0; j < p.S; ++j) {
        const float* v = pairs_value(p, in, j, hk);
        for (int64_t d = 0; d < D; ++d) vT[(hk * D + d) * Sl + j] = v[d];
      }
    dK.assign(nk * Hkv * Sp * Dp, 0.f), dV.assign(Hkv * Sp * Dp, 0.f);
    ones.assign(std::max(Sp, kPairsTile), 1.f);
  }

  pairs_bwd_scratch scratch() const {
    pairs_bwd_scratch sc;
    sc.G.resize(np * kPairsTile * kPairsCols);
    sc.P.resize(kPairsTile * kPairsCols);
    sc.dP.resize(kPairsTile * kPairsCols);
    sc.qb.assign(nq * kPairsTile * Dp, 0.f);
    sc.dOb.assign(kPairsTile * Dp, 0.f);
    sc.dQ.resize(nq * kPairsTile * Dp);
    sc.Drow.resize(kPairsTile);
    sc.dQg.resize(nq * kPairsRows * pl.group * D);
    sc.dq.resize(kPairsRows * pl.group * D);
    return sc;
  }

  // Tile row r of block bl's P and dS over the strip [s0, s1) (a[u], e[u]: product u's columns
  // there), in place of its scores and dP; then each product's own pairs of dS into its G.
  void strip_row(const pairs_block& bl, int64_t r, int64_t i, int64_t h, int64_t s0, int64_t s1,
                 const int64_t* a, const int64_t* e, pairs_bwd_scratch& sc) const {
    constexpr int64_t W = kPairsCols;
    const int64_t ii = i - bl.i0;
    float* Pi = &sc.P[r * W];
    float* dSi = &sc.dP[r * W];
    if (!bl.sees[ii]) {  // a row that sees no key: P = dS = 0
      std::fill(Pi, Pi + (s1 - s0), 0.f);
      std::fill(dSi, dSi + (s1 - s0), 0.f);
    } else {
      (void)pairs_row_scores(bl, prod_of, sc.G.data(), W, kPairsTile, r, in.row_scale[i], ii, s0,
                             s1, Pi);
      (void)exp_row_f32(Pi, s1 - s0, g.lse[i * Hq + h]);
      const float Dif = sc.Drow[r], rs = static_cast<float>(in.row_scale[i]);
      for (int64_t j = 0; j < s1 - s0; ++j) {
        const float x = rs * Pi[j] * (dSi[j] - Dif);
        dSi[j] = std::abs(x) < std::numeric_limits<float>::min() ? 0.f : x;  // no subnormals
      }
    }
    if (np == 1) return;
    for (int64_t u = 0; u < np; ++u) {
      if (a[u] >= e[u]) continue;
      float* Gu = &sc.G[(u * kPairsTile + r) * W];  // column j at Gu[j - s0]
      std::fill(Gu + (a[u] - s0), Gu + (e[u] - s0), 0.f);
      for (int64_t x = bl.at[ii]; x < bl.at[ii + 1]; ++x) {
        const pairs_run& rn = bl.runs[x];
        const int64_t j0 = std::max(rn.j0, a[u]), j1 = std::min(rn.j1, e[u]);
        if (rn.r >= 0 && prod_of[rn.r] == u && j0 < j1)
          std::copy(dSi + (j0 - s0), dSi + (j1 - s0), Gu + (j0 - s0));
      }
    }
  }

  // Block bl for the query heads hk G + h0 .. + ng - 1 of kv head hk as one tile of R = ng rows
  // rows (tile row r: head hk G + h0 + r / rows, query i0 + r % rows): dP, dS, the dK and dV
  // accumulators, and the heads' dq' per q copy into the group's rows (rows, G, D).
  void tile(const pairs_block& bl, int64_t hk, int64_t h0, int64_t ng, pairs_bwd_scratch& sc) {
    const int64_t i0 = bl.i0, rows = bl.rows, R = ng * rows, G = pl.group;
    constexpr int64_t W = kPairsCols;
    auto head = [&](int64_t r) { return hk * G + h0 + r / rows; };
    auto query = [&](int64_t r) { return i0 + r % rows; };
    // The tile's rows of each q copy and of dO, (R, Dp) zero-padded; D_i = dO_i . o_i.
    tile_q(bl, hk, h0, ng, sc.qb.data());
    for (int64_t r = 0; r < R; ++r) {
      const int64_t x = (query(r) * Hq + head(r)) * D;
      std::copy_n(g.dout + x, D, &sc.dOb[r * Dp]);
      double Di = 0;
      for (int64_t d = 0; d < D; ++d) Di += double(g.dout[x + d]) * double(g.out[x + d]);
      sc.Drow[r] = static_cast<float>(Di);
    }
    std::fill(sc.dQ.begin(), sc.dQ.end(), 0.f);
    // Column strips of W keys: each product's scores, P, dP and dS of the strip stay in cache.
    for (int64_t s0 = bl.c0; s0 < bl.c1; s0 += W) {
      const int64_t s1 = std::min(bl.c1, s0 + W);
      // Product u's columns in the strip: [a[u], e[u]) (whole groups of 8; empty: a >= e).
      int64_t a[8], e[8];
      for (int64_t u = 0; u < np; ++u) {
        a[u] = std::max(s0, bl.lo[u] / 8 * 8);
        e[u] = std::min(s1, (bl.hi[u] + 7) / 8 * 8);
        if (a[u] < e[u])
          gemm_f32(R, e[u] - a[u], &sc.qb[prods[u].first * kPairsTile * Dp], Dp,
                   &kT[(prods[u].second * Hkv + hk) * D * Sl + a[u]], Sl,
                   &sc.G[u * kPairsTile * W + (a[u] - s0)], W, D, nullptr);
      }
      gemm_f32(R, s1 - s0, sc.dOb.data(), Dp, &vT[hk * D * Sl + s0], Sl, sc.dP.data(), W, D,
               nullptr);
      for (int64_t r = 0; r < R; ++r) strip_row(bl, r, query(r), head(r), s0, s1, a, e, sc);
      // dV += P^T dO; per product dK_c' += dS_u^T Q_c and dQ_c += dS_u K_c'.
      gemm_f32(s1 - s0, Dp, sc.P.data(), 1, sc.dOb.data(), Dp, &dV[(hk * Sp + s0) * Dp], Dp, R,
               ones.data(), W);
      for (int64_t u = 0; u < np; ++u) {
        if (a[u] >= e[u]) continue;
        const int qc = prods[u].first, kc = prods[u].second;
        const float* dSu = (np > 1 ? &sc.G[u * kPairsTile * W] : sc.dP.data()) + (a[u] - s0);
        gemm_f32(e[u] - a[u], Dp, dSu, 1, &sc.qb[qc * kPairsTile * Dp], Dp,
                 &dK[((kc * Hkv + hk) * Sp + a[u]) * Dp], Dp, R, ones.data(), W);
        gemm_f32(R, Dp, dSu, W, &kr[((kc * Hkv + hk) * Sp + a[u]) * Dp], Dp,
                 &sc.dQ[qc * kPairsTile * Dp], Dp, e[u] - a[u], ones.data());
      }
    }
    // dq' of each copy into the group's rows (rows, G, D).
    for (int64_t c = 0; c < nq; ++c)
      for (int64_t r = 0; r < R; ++r)
        std::copy_n(&sc.dQ[(c * kPairsTile + r) * Dp], D,
                    &sc.dQg[((c * kPairsRows + r % rows) * G + h0 + r / rows) * D]);
  }

  // Block bl of kv head hk: its query heads' tiles, then dq = sum_c R(qmap_c)^T dq'_c over the
  // copies in order.
  void group_block(const pairs_block& bl, int64_t hk, pairs_bwd_scratch& sc) {
    const int64_t G = pl.group, rows = bl.rows, i0 = bl.i0;
    if (bl.c1 <= bl.c0) {  // no row of the block sees a key
      for (int64_t ii = 0; ii < rows; ++ii)
        std::fill_n(g.dq + ((i0 + ii) * Hq + hk * G) * D, G * D, 0.f);
      return;
    }
    for (int64_t h0 = 0; h0 < G; h0 += kPairsTile / kPairsRows)
      tile(bl, hk, h0, std::min(kPairsTile / kPairsRows, G - h0), sc);
    std::fill(sc.dq.begin(), sc.dq.end(), 0.f);
    for (int64_t c = 0; c < nq; ++c) {
      bool used = false;
      for (int64_t u = 0; u < np; ++u) used |= prods[u].first == c && bl.lo[u] < bl.hi[u];
      if (!used) continue;
      float* x = &sc.dQg[c * kPairsRows * G * D];
      t.transform->apply(
          std::span<const int64_t>(in.qmap[c].data() + i0, static_cast<size_t>(rows)), x, rows, G,
          D, false, true);
      for (int64_t e = 0; e < rows * G * D; ++e) sc.dq[e] += x[e];
    }
    for (int64_t ii = 0; ii < rows; ++ii)
      std::copy_n(&sc.dq[ii * G * D], G * D, g.dq + ((i0 + ii) * Hq + hk * G) * D);
  }

  // dk: each k copy's accumulator back from its frame, summed over the copies in order; dv.
  void store_kv() const {
    const int64_t S = p.S;
    parallel_for(Hkv, [&](int64_t b, int64_t e) {
      std::vector<float> tmp(S * D), acc(S * D);
      for (int64_t hk = b; hk < e; ++hk) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t c = 0; c < nk; ++c) {
          for (int64_t j = 0; j < S; ++j)
            std::copy_n(&dK[((c * Hkv + hk) * Sp + j) * Dp], D, &tmp[j * D]);
          t.transform->apply(in.kmap[c], tmp.data(), S, 1, D, true, true);
          for (int64_t x = 0; x < S * D; ++x) acc[x] += tmp[x];
        }
        for (int64_t j = 0; j < S; ++j) {
          std::copy_n(&acc[j * D], D, g.dk + (j * Hkv + hk) * D);
          std::copy_n(&dV[(hk * Sp + j) * Dp], D, g.dv + (j * Hkv + hk) * D);
        }
      }
    });
  }
};

void pairs_backward_f32(const attention_params<float>& p, const attention_plan& pl,
                        const engine_terms<float>& t, const pairs_input<float>& in,
                        const pairs_rotated<float>& rot, const attention_grads<float>& g) {
  // Threads write disjoint parts of pb's accumulators: kv head hk's.
  pairs_bwd pb(p, pl, t, in, rot, g);
  pb.for_chunks([&](const std::vector<pairs_block>& blocks, int64_t nb) {
    parallel_for(p.Hkv, [&](int64_t b, int64_t e) {
      pairs_bwd_scratch sc = pb.scratch();
      for (int64_t hk = b; hk < e; ++hk)
        for (int64_t x = 0; x < nb; ++x) pb.group_block(blocks[x], hk, sc);
    });
  });
  pb.store_kv();
  sink_grads(p, g);
}

}  // namespace

template <typename Real>
void rope_pairs_forward(const attention_params<Real>& p, const attention_plan& pl,
                        const engine_terms<Real>& t, bool reference) {
  const int64_t T = p.T, S = p.S, Hq = p.Hq, D = p.D;
  if (T == 0) return;
  // The float32 fast form reads q in place and rotates it block by block; its decode form
  // reads k and v in place too.
  const bool f32 = std::is_same_v<Real, float> && !reference;
  const bool decode = f32 && T <= kPairsDecodeRows;
  const bool row_form = f32 && t.transform->row_table_size() > 0;  // keys rotated as packed
  const auto in = pairs_load(p, pl, t, !f32, !decode && !row_form);
  if constexpr (std::is_same_v<Real, float>)
    if (decode) return pairs_decode_f32(p, pl, t, in);
  const pairs_rotated<Real> rot =
      reference || row_form ? pairs_rotated<Real>{} : pairs_rotate(p, t, in, /*rotate_q=*/!f32);
  if constexpr (std::is_same_v<Real, float>)
    if (!reference) return pairs_forward_f32(p, pl, t, in, rot);
  const bool sink = !p.sinks.empty();
  auto rows = [&](int64_t b, int64_t e) {
    std::vector<double> s(S), qa(D), kb(D), o(D);
    for (int64_t x = b; x < e; ++x) {
      const int64_t h = x / T, i = x % T, hk = h / pl.group;
      if (reference)
        pairs_scores_reference(p, pl, t, in, h, i, s, qa, kb);
      else
        pairs_scores_fast(p, pl, t, in, rot, h, i, s);
      double psink = 0;
      const double lse = pairs_softmax(s, sink, sink ? double(p.sinks[h]) : 0.0, &psink);
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j < S; ++j) {
        if (s[j] == 0) continue;
        const Real* vj = &in.v[(j * p.Hkv + hk) * D];
        for (int64_t d = 0; d < D; ++d) o[d] += s[j] * double(vj[d]);
      }
      Real* out = p.out + (i * Hq + h) * D;
      for (int64_t d = 0; d < D; ++d) out[d] = static_cast<Real>(o[d]);
      if (p.lse) p.lse[i * Hq + h] = static_cast<Real>(lse);
    }
  };
  if (reference)
    rows(0, Hq * T);
  else
    parallel_for(Hq * T, rows, 16);
}

namespace {

// The per-row backward in double: the float64 fast form and the reference.
template <typename Real>
void rope_pairs_backward_rows(const attention_params<Real>& p, const attention_plan& pl,
                              const engine_terms<Real>& t, const attention_grads<Real>& g,
                              bool reference) {
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  const auto in = pairs_load(p, pl, t);
  const pairs_rotated<Real> rot = reference ? pairs_rotated<Real>{} : pairs_rotate(p, t, in);
  const size_t nq = in.qmap.size(), nk = in.kmap.size();
  // Gradients with respect to each rotated copy (the rotated frame), in double.
  std::vector<std::vector<double>> dQ(reference ? 0 : nq, std::vector<double>(T * Hq * D, 0.0)),
      dK(reference ? 0 : nk, std::vector<double>(S * Hkv * D, 0.0));
  std::vector<double> dq(T * Hq * D, 0.0), dk(S * Hkv * D, 0.0), dv(S * Hkv * D, 0.0),
      dsink(Hq, 0.0);
  const bool sink = !p.sinks.empty();
  // Work item: kv head hk, its query heads and their rows (dk, dv of hk and dq of its heads are
  // the item's own).
  auto items = [&](int64_t b, int64_t e) {
    std::vector<double> s(S), dS(S), qa(D), kb(D), ga(D), gb(D);
    for (int64_t hk = b; hk < e; ++hk)
      for (int64_t h = hk * pl.group; h < (hk + 1) * pl.group; ++h)
        for (int64_t i = 0; i < T; ++i) {
          if (reference)
            pairs_scores_reference(p, pl, t, in, h, i, s, qa, kb);
          else
            pairs_scores_fast(p, pl, t, in, rot, h, i, s);
          double psink = 0;
          (void)pairs_softmax(s, sink, sink ? double(p.sinks[h]) : 0.0, &psink);
          const Real* doi = g.dout + (i * Hq + h) * D;
          double Di = 0;
          for (int64_t j = 0; j < S; ++j) {
            dS[j] = 0;
            if (s[j] == 0) continue;
            const Real* vj = &in.v[(j * Hkv + hk) * D];
            double x = 0;
            for (int64_t d = 0; d < D; ++d) x += double(doi[d]) * double(vj[d]);
            dS[j] = x;
            Di += s[j] * x;
          }
          if (g.dsinks) dsink[h] -= psink * Di;
          for (int64_t j = 0; j < S; ++j) {
            if (s[j] == 0) continue;
            const double ds = in.row_scale[i] * s[j] * (dS[j] - Di);
            double* dvj = &dv[(j * Hkv + hk) * D];
            for (int64_t d = 0; d < D; ++d) dvj[d] += s[j] * double(doi[d]);
            const int r = pair_region(t, pl, i, j);
            if (reference) {
              // The pair's own rotations, and their transposes for the gradients.
              const int64_t a = in.qmap[in.qvar[r]][i], bpos = in.kmap[in.kvar[r]][j];
              for (int64_t d = 0; d < D; ++d) {
                qa[d] = double(in.q[(i * Hq + h) * D + d]);
                kb[d] = double(in.k[(j * Hkv + hk) * D + d]);
              }
              t.transform->apply(std::span<const int64_t>(&a, 1), qa.data(), 1, 1, D, false, false);
              t.transform->apply(std::span<const int64_t>(&bpos, 1), kb.data(), 1, 1, D, true,
                                 false);
              for (int64_t d = 0; d < D; ++d) ga[d] = ds * kb[d], gb[d] = ds * qa[d];
              t.transform->apply(std::span<const int64_t>(&a, 1), ga.data(), 1, 1, D, false, true);
              t.transform->apply(std::span<const int64_t>(&bpos, 1), gb.data(), 1, 1, D, true,
                                 true);
              double* dqi = &dq[(i * Hq + h) * D];
              double* dkj = &dk[(j * Hkv + hk) * D];
              for (int64_t d = 0; d < D; ++d) dqi[d] += ga[d], dkj[d] += gb[d];
            } else {
              const Real* qi = rot.q[in.qvar[r]].data() + (i * Hq + h) * D;
              const Real* kj = rot.k[in.kvar[r]].data() + (j * Hkv + hk) * D;
              double* dqi = dQ[in.qvar[r]].data() + (i * Hq + h) * D;
              double* dkj = dK[in.kvar[r]].data() + (j * Hkv + hk) * D;
              for (int64_t d = 0; d < D; ++d) {
                dqi[d] += ds * double(kj[d]);
                dkj[d] += ds * double(qi[d]);
              }
            }
          }
        }
  };
  if (reference)
    items(0, Hkv);
  else
    parallel_for(Hkv, items);
  // Back from each rotated frame: R^T of the copy's positions, summed over the copies.
  for (size_t c = 0; c < dQ.size(); ++c) {
    t.transform->apply(in.qmap[c], dQ[c].data(), T, Hq, D, false, true);
    for (int64_t x = 0; x < T * Hq * D; ++x) dq[x] += dQ[c][x];
  }
  for (size_t c = 0; c < dK.size(); ++c) {
    t.transform->apply(in.kmap[c], dK[c].data(), S, Hkv, D, true, true);
    for (int64_t x = 0; x < S * Hkv * D; ++x) dk[x] += dK[c][x];
  }
  for (int64_t x = 0; x < T * Hq * D; ++x) g.dq[x] = static_cast<Real>(dq[x]);
  for (int64_t x = 0; x < S * Hkv * D; ++x) {
    g.dk[x] = static_cast<Real>(dk[x]);
    g.dv[x] = static_cast<Real>(dv[x]);
  }
  if (g.dsinks)
    for (int64_t h = 0; h < Hq; ++h) g.dsinks[h] = static_cast<Real>(dsink[h]);
}

}  // namespace

// The float32 fast form rotates q from p.q: no copy of it; with the transform's row form it reads
// q, k and v in place and rotates them as it packs them (no rotated copies). The float64 fast
// form and the reference: per row (rope_pairs_backward_rows).
template <typename Real>
void rope_pairs_backward(const attention_params<Real>& p, const attention_plan& pl,
                         const engine_terms<Real>& t, const attention_grads<Real>& g,
                         bool reference) {
  if constexpr (std::is_same_v<Real, float>) {
    if (!reference) {
      const bool rows = t.transform->row_table_size() > 0;
      const auto in = pairs_load(p, pl, t, false, !rows);
      const pairs_rotated<float> rot =
          rows ? pairs_rotated<float>{} : pairs_rotate(p, t, in, /*rotate_q=*/false);
      return pairs_backward_f32(p, pl, t, in, rot, g);
    }
  }
  rope_pairs_backward_rows(p, pl, t, g, reference);
}

template void rope_pairs_forward(const attention_params<float>&, const attention_plan&,
                                 const engine_terms<float>&, bool);
template void rope_pairs_forward(const attention_params<double>&, const attention_plan&,
                                 const engine_terms<double>&, bool);
template void rope_pairs_backward(const attention_params<float>&, const attention_plan&,
                                  const engine_terms<float>&, const attention_grads<float>&, bool);
template void rope_pairs_backward(const attention_params<double>&, const attention_plan&,
                                  const engine_terms<double>&, const attention_grads<double>&,
                                  bool);

}  // namespace posenc::detail
