// tests/support/attention_cases.hpp: the attention case table shared by the forward and the
// backward tests: a case is a shape (T, S, D, Hq, Hkv), a position scheme, a mask and a seed;
// build() draws its inputs and the magnitudes A (max scaled score), B (max bias) and V
// (max |v| + max |a^V|) that the tolerances of tests/test_attention.cpp and
// tests/test_attention_backward.cpp are derived from.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/alibi.hpp"
#include "posenc/positions/positions.hpp"

namespace posenc::test {

enum class scheme {
  none,
  rope_half,
  rope_interleaved_partial,
  alibi,
  t5_bidir,
  t5_causal,
  shaw,
  all
};
enum class mask {
  none,
  causal,
  padding,
  cu_seqlens,
  doc_ids,
  window,
  causal_window,
  everything,
  positions
};
inline const char* name(scheme s) {
  const char* n[] = {"none",  "rope_half", "rope_interleaved_partial",
                     "alibi", "t5_bidir",  "t5_causal",
                     "shaw",  "all"};
  return n[static_cast<int>(s)];
}
inline const char* name(mask m) {
  const char* n[] = {"none",   "causal",        "padding",    "cu_seqlens", "doc_ids",
                     "window", "causal_window", "everything", "positions"};
  return n[static_cast<int>(m)];
}

struct case_spec {
  int64_t T, S, D, Hq, Hkv;
  scheme sch;
  mask msk;
  uint64_t seed;
  double q_scale = 1;   // multiplies q (large-score tests)
  int64_t k_shift = 0;  // added to every key position of mask::positions (far offsets)
};

inline std::string describe(const case_spec& c) {
  return fmt::format("T={} S={} D={} Hq={} Hkv={} scheme={} mask={} seed={} q_scale={} k_shift={}",
                     c.T, c.S, c.D, c.Hq, c.Hkv, name(c.sch), name(c.msk), c.seed, c.q_scale,
                     c.k_shift);
}

// Everything one case owns (the params struct only points into it).
template <typename Real>
struct fixture {
  std::vector<Real> q, k, v, out_ref, out_fast, lse_ref, lse_fast;
  std::vector<uint8_t> pad;
  std::vector<int64_t> cu, qdoc, kdoc, qpos, kpos;
  rope_freqs freqs;
  std::vector<double> slopes;
  t5_bias_table t5;
  shaw_tables shaw;
  attention_tables<Real> tabs;  // t5 and shaw in the element type, viewed by p.pos
  attention_params<Real> p;
  double A = 0, B = 0, V = 0;  // the magnitudes of the tolerance derivation
};

template <typename Real>
void build(fixture<Real>& f, const case_spec& c) {
  rng r(c.seed);
  const int64_t T = c.T, S = c.S, D = c.D, Hq = c.Hq, Hkv = c.Hkv;
  auto fill = [&](std::vector<Real>& x, size_t n, double s) {
    x.resize(n);
    for (auto& e : x) e = static_cast<Real>(s * r.normal());
  };
  fill(f.q, T * Hq * D, c.q_scale);
  fill(f.k, S * Hkv * D, 1.0);
  fill(f.v, S * Hkv * D, 1.0);
  f.out_ref.assign(T * Hq * D, Real(-7));
  f.out_fast.assign(T * Hq * D, Real(-7));
  f.lse_ref.assign(T * Hq, Real(-7));
  f.lse_fast.assign(T * Hq, Real(-7));
  auto& p = f.p;
  p = {};
  p.q = f.q.data();
  p.k = f.k.data();
  p.v = f.v.data();
  p.T = T, p.S = S, p.D = D, p.Hq = Hq, p.Hkv = Hkv;

  const bool causal = c.msk == mask::causal || c.msk == mask::causal_window ||
                      c.msk == mask::everything || c.sch == scheme::t5_causal;
  p.causal = causal;
  if (c.msk == mask::padding || c.msk == mask::everything) {
    f.pad.resize(S);
    for (auto& m : f.pad) m = r.uniform() < 0.75;
    if (S > 0) f.pad[r.below(S)] = 0;
    p.key_padding = f.pad;
  }
  if (c.msk == mask::cu_seqlens || c.msk == mask::everything) {
    f.cu = {0};
    while (f.cu.back() < S) f.cu.push_back(std::min<int64_t>(S, f.cu.back() + 1 + r.below(20)));
    p.cu_seqlens = f.cu;
  }
  if (c.msk == mask::doc_ids) {
    f.kdoc.resize(S);
    int64_t d = 0;
    for (int64_t j = 0; j < S; ++j) {
      if (r.uniform() < 0.15) d += 1 + r.below(3);
      f.kdoc[j] = d;
    }
    f.qdoc.resize(T);
    for (int64_t i = 0; i < T; ++i) f.qdoc[i] = r.below(d + 1);
    p.q_doc_ids = f.qdoc;
    p.k_doc_ids = f.kdoc;
  }
  if (c.msk == mask::window || c.msk == mask::causal_window || c.msk == mask::everything)
    p.window = 1 + static_cast<int64_t>(r.below(std::max<int64_t>(S, 1) + 2));
  if (c.msk == mask::positions || T > S) {
    // Arbitrary positions, any order, large offsets, a few pads.
    const int64_t base = static_cast<int64_t>(r.below(1000000));
    f.qpos.resize(T);
    f.kpos.resize(S);
    for (auto& x : f.qpos) x = base + static_cast<int64_t>(r.below(300));
    for (auto& x : f.kpos) x = base + c.k_shift + static_cast<int64_t>(r.below(300));
    if (T > 1) f.qpos[r.below(T)] = pad_position;
    if (S > 1) f.kpos[r.below(S)] = pad_position;
    p.q_positions = f.qpos;
    p.k_positions = f.kpos;
  }

  double amp = 1;  // RoPE attention factor
  if (c.sch == scheme::rope_half || c.sch == scheme::rope_interleaved_partial ||
      c.sch == scheme::all) {
    rope_config rc;
    rc.head_dim = D;
    rc.rotary_dim = c.sch == scheme::rope_interleaved_partial ? (D / 4) * 2 : D;
    rc.theta = 10000;
    if (c.sch == scheme::all) {
      rc.type = rope_type::yarn;  // attention factor != 1 exercises the magnitude
      rc.factor = 4;
      rc.original_max_position_embeddings = 64;
      rc.max_position_embeddings = 256;
    }
    f.freqs = rope_frequencies(rc);
    amp = f.freqs.attention_factor;
    p.pos.rope.freqs = &f.freqs;
    p.pos.rope.layout = c.sch == scheme::rope_half ? rope_layout::half : rope_layout::interleaved;
  }
  if (c.sch == scheme::alibi || c.sch == scheme::all) {
    f.slopes = alibi_slopes(Hq);
    p.pos.alibi = f.slopes;
  }
  if (c.sch == scheme::t5_bidir || c.sch == scheme::t5_causal || c.sch == scheme::all) {
    t5_params tp;
    tp.num_buckets = 32;
    tp.max_distance = c.sch == scheme::all ? 20 : 128;
    tp.bidirectional = c.sch != scheme::t5_causal;
    f.t5 = t5_init(tp, Hq, c.seed + 1, 1.0);
    p.pos.t5 = f.tabs.t5_view(f.t5);
  }
  if (c.sch == scheme::shaw || c.sch == scheme::all) {
    f.shaw = shaw_init(c.sch == scheme::all ? 3 : 8, D, c.seed + 2, 0.5);
    p.pos.shaw = f.tabs.shaw_view(f.shaw);
  }

  // Tolerance magnitudes A and V (see the derivation at the top).
  double qmax = 0, kmax = 0, vmax = 0, akmax = 0, avmax = 0, bmax = 0;
  for (int64_t t = 0; t < T * Hq; ++t) {
    double n = 0;
    for (int64_t d = 0; d < D; ++d) n += double(f.q[t * D + d]) * f.q[t * D + d];
    qmax = std::max(qmax, std::sqrt(n));
  }
  for (int64_t t = 0; t < S * Hkv; ++t) {
    double n = 0;
    for (int64_t d = 0; d < D; ++d) n += double(f.k[t * D + d]) * f.k[t * D + d];
    kmax = std::max(kmax, std::sqrt(n));
  }
  for (auto x : f.v) vmax = std::max(vmax, std::abs(double(x)));
  if (p.pos.has_shaw()) {
    for (int64_t c2 = 0; c2 < 2 * f.shaw.clip + 1; ++c2) {
      double n = 0;
      for (int64_t d = 0; d < D; ++d)
        n += double(f.shaw.keys[c2 * D + d]) * f.shaw.keys[c2 * D + d];
      akmax = std::max(akmax, std::sqrt(n));
    }
    for (auto x : f.shaw.values) avmax = std::max(avmax, std::abs(double(x)));
  }
  if (p.pos.has_t5())
    for (auto x : f.t5.weights) bmax = std::max(bmax, std::abs(double(x)));
  if (!p.pos.alibi.empty()) {
    // |qpos - kpos| is at most the position spread: max(S, T) for default positions, 300 for
    // the explicit ones drawn above. Press slopes decrease, so slopes[0] is the largest.
    const double spread = f.kpos.empty() && f.qpos.empty() ? double(std::max(S, T)) : 300.0;
    bmax += f.slopes[0] * spread;
  }
  f.A = (1.0 / std::sqrt(double(D))) * amp * amp * qmax * (kmax + akmax);
  f.B = bmax;
  f.V = vmax + avmax;
}

}  // namespace posenc::test
