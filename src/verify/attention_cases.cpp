// The attention case table: inputs, derived tolerances, the check and grad modes, and the named
// lists (include/posenc/verify/attention_cases.hpp holds the derivations).
#include "posenc/verify/attention_cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/positions/positions.hpp"

namespace posenc::attention_cases {

int scheme_count() {
  return kSchemes + static_cast<int>(named_scheme_decls().size());
}

const char* name(scheme s) {
  if (static_cast<int>(s) >= kSchemes)
    return named_scheme_decls()[static_cast<int>(s) - kSchemes]->name;
  const char* n[] = {"none", "rope_half", "rope_interleaved_partial", "all", "mrope"};
  return n[static_cast<int>(s)];
}

const char* name(mask m) {
  const char* n[] = {"none",   "causal",        "padding",    "cu_seqlens", "doc_ids",
                     "window", "causal_window", "everything", "positions"};
  return n[static_cast<int>(m)];
}

// The declaration of a scheme reached by name; null for the table's own schemes.
const scheme_decl* named_decl(scheme s) {
  const int i = static_cast<int>(s) - kSchemes;
  return i >= 0 ? named_scheme_decls()[i] : nullptr;
}

// The scheme `all` composes with the member schemes: the first score bias reached by name
// whose parameter is a tensor (trained) and which depends on the offset alone, in declaration
// order.
const scheme_decl& all_named_bias() {
  for (const scheme_decl* d : named_scheme_decls())
    if (d->named && needs_tensors(*d) && (d->bias_props & bias_offset_only)) return *d;
  fail("attention_cases: no trained offset-only tensor bias is declared for the scheme all");
}

// The first score bias reached by name whose values derive from its parameters when its switch is
// True (ALiBi's slopes), which `all` composes too.
const scheme_decl& all_named_derived() {
  for (const scheme_decl* d : named_scheme_decls())
    if (d->named && is_tensor_scheme(*d) && !needs_tensors(*d)) return *d;
  fail("attention_cases: no bias whose values derive from its parameters is declared");
}

// The first query scale reached by name (the temperature), which `all` composes after the rotation.
const scheme_decl& all_named_query_scale() {
  for (const scheme_decl* d : named_scheme_decls())
    if (d->transform && (d->points & scheme_query_scale)) return *d;
  fail("attention_cases: no query scale reached by name is declared for the scheme all");
}

// The first scheme reached by name that adds relative tables (Shaw), which `all` composes too.
const scheme_decl& all_named_relative() {
  for (const scheme_decl* d : named_scheme_decls())
    if (named_relative(*d)) return *d;
  fail("attention_cases: no scheme with relative tables is declared for the scheme all");
}

namespace {

// The row of the enum of a scheme reached by name.
scheme row_of(const scheme_decl& d) {
  const auto decls = named_scheme_decls();
  for (size_t i = 0; i < decls.size(); ++i)
    if (decls[i] == &d) return static_cast<scheme>(kSchemes + static_cast<int>(i));
  fail("attention_cases: {} is not reached by name", d.name);
}

}  // namespace

scheme relative_scheme() {
  return row_of(all_named_relative());
}

// A trained offset-only score bias reached by name (the rows where the old T5 rows stood: its
// table's saturation, the benchmark's kind of call).
scheme offset_bias_scheme() {
  return row_of(all_named_bias());
}

scheme derived_bias_scheme() {
  return row_of(all_named_derived());
}

// A scheme on a path of its own (CoPE): no sinks there, a finer finite-difference step.
bool own_path(scheme s) {
  const scheme_decl* d = named_decl(s);
  return d && named_path_scheme(*d);
}

bool rope_pairs_scheme(scheme s) {
  const scheme_decl* d = named_decl(s);
  return d && d->pairs;
}

bool float_kv_only(scheme s) {
  const scheme_decl* d = named_decl(s);
  return d && d->float_kv_only;
}

int half_kv_scheme_count() {
  int n = 0;
  for (int s = 0; s < scheme_count(); ++s) n += !float_kv_only(static_cast<scheme>(s));
  return n;
}

std::string describe(const spec& c) {
  return fmt::format(
      "T={} S={} D={} Hq={} Hkv={} scheme={} mask={} seed={} q_scale={} k_shift={}{}{}{}{}{}{}",
      c.T, c.S, c.D, c.Hq, c.Hkv, name(c.sch), name(c.msk), c.seed, c.q_scale, c.k_shift,
      c.choice ? fmt::format(" choice={}", c.choice) : std::string(),
      c.kv == kv_storage::f32 ? "" : " kv=" + name(c.kv), c.q_half ? " q_half" : "",
      c.products == attention_products::f32 ? "" : " products=" + name(c.products),
      c.head_major ? (c.k_blocked ? " head_major k_blocked" : " head_major") : "",
      c.sinks ? " sinks" : "");
}

namespace {

// What the scheme steps of build() hand to the magnitudes: the RoPE attention factor (or xPos's
// sqrt F), the largest query temperature and the largest |bias| (CoPE's, a tensor scheme's).
struct scheme_bounds {
  double amp = 1, qs = 1, kbias = 0;
};

// q ~ q_scale N(0, 1), k, v ~ N(0, 1) (in that order from r), out and lse filled with -7, the
// params' pointers and shape; half-precision keys and values rounded and stored (float32 only).
template <typename Real>
void draw_inputs(fixture<Real>& f, const spec& c, rng& r) {
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
  if constexpr (std::is_same_v<Real, float>) {
    if (c.kv != kv_storage::f32) {
      f.k16.resize(f.k.size());
      f.v16.resize(f.v.size());
      to_half(c.kv, f.k, f.k16);
      to_half(c.kv, f.v, f.v16);
      from_half(c.kv, f.k16, f.k);  // what is stored, for the magnitudes of the tolerance
      from_half(c.kv, f.v16, f.v);
      p.kv = c.kv;
      p.k16 = f.k16.data();
      p.v16 = f.v16.data();
      p.k = p.v = nullptr;
      if (c.q_half) {
        f.q16.resize(f.q.size());
        to_half(c.kv, f.q, f.q16);
        from_half(c.kv, f.q16, f.q);
        p.q_storage = c.kv;
        p.q16 = f.q16.data();
        p.q = nullptr;
      }
    }
    p.products = c.products;
  }
  p.T = T, p.S = S, p.D = D, p.Hq = Hq, p.Hkv = Hkv;  // k_index and kv_offset read them
}

// spec::head_major: (Hkv, S + pad, D), pad rows NaN: the same values, reached through
// kv_head_stride. k_blocked: whole 8-key blocks per head (k_index), the same stride for the
// value rows.
template <typename Real>
void lay_out_head_major(fixture<Real>& f, const spec& c) {
  const int64_t S = c.S, D = c.D, Hkv = c.Hkv;
  auto& p = f.p;
  const int64_t Sp = c.k_blocked ? (S + kHeadMajorPad + kKeyBlock - 1) / kKeyBlock * kKeyBlock
                                 : S + kHeadMajorPad,
                n = Hkv * Sp * D;
  p.kv_head_stride = Sp * D;
  p.k_blocked = c.k_blocked;
  auto lay = [&](const auto& src, auto& dst, auto nan, bool keys) {
    dst.assign(static_cast<size_t>(n), nan);
    for (int64_t j = 0; j < S; ++j)
      for (int64_t hk = 0; hk < Hkv; ++hk)
        for (int64_t e = 0; e < D; ++e)
          dst[static_cast<size_t>(keys ? k_index(p, j, hk, e) : kv_offset(p, j, hk) + e)] =
              src[(j * Hkv + hk) * D + e];
  };
  if (p.kv == kv_storage::f32) {
    lay(f.k, f.k_hm, std::numeric_limits<Real>::quiet_NaN(), true);
    lay(f.v, f.v_hm, std::numeric_limits<Real>::quiet_NaN(), false);
    p.k = f.k_hm.data();
    p.v = f.v_hm.data();
  } else {
    const uint16_t nan16 = c.kv == kv_storage::f16 ? 0x7e00 : 0x7fc0;  // quiet NaNs
    lay(f.k16, f.k16_hm, nan16, true);
    lay(f.v16, f.v16_hm, nan16, false);
    p.k16 = f.k16_hm.data();
    p.v16 = f.v16_hm.data();
  }
}

// The mask of c.msk (and causal for the causal-only schemes), then explicit positions for
// mask::positions and whenever T > S, drawn from r in that order.
template <typename Real>
void draw_masks(fixture<Real>& f, const spec& c, rng& r) {
  const int64_t T = c.T, S = c.S;
  auto& p = f.p;
  const bool causal = c.msk == mask::causal || c.msk == mask::causal_window ||
                      c.msk == mask::everything ||
                      (named_decl(c.sch) && named_decl(c.sch)->causal_only);
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
}

// The established schemes (RoPE): none draws from r.
template <typename Real>
void set_established_schemes(fixture<Real>& f, const spec& c, scheme_bounds& b) {
  const int64_t D = c.D;
  auto& p = f.p;
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
    b.amp = f.freqs.attention_factor;
    p.pos.named.push_back(rope_scheme(
        f.freqs, c.sch == scheme::rope_half ? rope_layout::half : rope_layout::interleaved));
  }
}

// A q/k transform reached by name on f at its case parameters for positions [lo, hi]; the
// largest factor it puts on |q| (b.qs) and, mapping q and k, its amplitude F (b.amp = sqrt F).
template <typename Real>
void set_named_transform(fixture<Real>& f, const spec& c, const scheme_decl& d, int64_t lo,
                         int64_t hi, scheme_bounds& b) {
  const auto given = named_transform_case(d, lo, hi);
  f.p.pos.named.push_back({d.name, given});
  const auto args = named_scheme_args(d, given, c.Hq);
  const int64_t qmaxpos =
      f.qpos.empty() ? c.S - 1 : *std::max_element(f.qpos.begin(), f.qpos.end());
  b.qs = std::max(b.qs, named_transform_query_scale(d, args, std::max<int64_t>(qmaxpos, 0)));
  // Either order of the positions: explicit positions need not be causal.
  const double F = named_transform_amplitude(d, args, lo, hi, false);
  if (F != 1) f.F = F, b.amp = std::sqrt(F);
}

template <typename Real>
double draw_named_tensors(fixture<Real>& f, const spec& c, rng& r, const scheme_decl& d,
                          double dmax) {
  named_scheme n{d.name};
  if (!c.perf) n.params = named_case_params(d, c.choice);
  const auto args = named_scheme_args(d, n.params, c.Hq);
  std::vector<std::vector<double>> w;
  f.G =
      std::max(f.G, named_tensors_draw(
                        d, args, c.T, c.S, c.Hq, c.Hkv, c.D, dmax, [&r] { return r.normal(); }, w));
  // This scheme's tensors follow those of the schemes drawn before it (the scheme `all`).
  const size_t first = f.named.size();
  size_t x = 0;
  for (const auto& prm : d.params) {
    if (!is_tensor_param(prm)) continue;
    if (is_f64_tensor_param(prm)) {
      f.named.emplace_back();
      f.named64.push_back(w[x]);
    } else {
      f.named.emplace_back(w[x].begin(), w[x].end());  // rounded to Real once
      f.named64.emplace_back();
      for (size_t e = 0; e < w[x].size(); ++e) w[x][e] = double(f.named[first + x][e]);
    }
    f.named_names.emplace_back(prm.name);
    n.tensors.push_back(
        {prm.name,
         tensor_param_shape_for(prm, c.T, c.S, c.Hq, c.Hkv, c.D, static_cast<int64_t>(w[x].size())),
         {},
         {}});
    ++x;
  }
  // The bias in double of the values as the call has them.
  named_scheme wide = n;
  for (size_t y = 0; y < n.tensors.size(); ++y) {
    if (!f.named64[first + y].empty())
      n.tensors[y].f64 = f.named64[first + y];
    else if constexpr (std::is_same_v<Real, float>)
      n.tensors[y].f32 = f.named[first + y];
    else
      n.tensors[y].f64 = f.named[first + y];
    wide.tensors[y].f64 = w[y];
  }
  f.p.pos.named.push_back(n);
  if (named_path_scheme(d)) {  // a path of its own (CoPE): its bound in set_magnitudes
    f.path = &d;
    f.path_first = first;
    return 0;
  }
  if (named_relative(d)) {  // a^K, a^V: no bias (their bounds: set_magnitudes)
    f.rel = static_cast<int>(first);
    f.rel_K = (static_cast<int64_t>(w[0].size()) / c.D - 1) / 2;
    return 0;
  }
  const auto bias = named_bias_spec(d, wide, c.T, c.S, c.Hq, c.Hkv, c.D, f.p.causal);
  // Token coordinates (query i is token S - T + i; every causal pair) or the positions (every
  // pair of valid positions).
  const bool tok = named_bias_by_token(d);
  double kbias = 0;
  for (int64_t h = 0; h < c.Hq; ++h)
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < c.S && (!tok || j <= c.S - c.T + i); ++j) {
        const int64_t a = tok ? c.S - c.T + i : (f.qpos.empty() ? c.S - c.T + i : f.qpos[i]);
        const int64_t k = tok ? j : (f.kpos.empty() ? j : f.kpos[j]);
        if (a < 0 || k < 0) continue;
        kbias = std::max(kbias, std::abs(bias(h, a, k)));
      }
  return kbias;
}

// M-RoPE: Qwen2-VL's sections scaled to R/2 pairs (16, 24, 24 of 64: height and width 3/8
// each), or Qwen3-VL's interleaved ones (24, 20, 20 of 64: height and width a third each). The
// ids of a token: temporal = its 1-D position (or a draw for a pad), height and width that plus
// 0..3, as in an image grid. A rotation: norms and the score bound A are unchanged (amp 1).
template <typename Real>
void set_mrope(fixture<Real>& f, const spec& c, rng& r) {
  const int64_t T = c.T, S = c.S, D = c.D;
  rope_config rc;
  rc.head_dim = D;
  rc.rotary_dim = D;
  rc.theta = 10000;
  f.freqs = rope_frequencies(rc);
  const int64_t half = D / 2;
  const bool inter = c.seed % 2 == 1;
  const int64_t hw = inter ? half / 3 : 3 * half / 8;
  const rope_layout layout = (c.seed / 2) % 2 == 1 ? rope_layout::interleaved : rope_layout::half;
  auto ids = [&](std::vector<int64_t>& out, const std::vector<int64_t>& given, int64_t n,
                 int64_t first) {
    out.resize(static_cast<size_t>(3 * n));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t base = given.empty() ? first + t : given[t];
      const int64_t a = base >= 0 ? base : static_cast<int64_t>(r.below(300));
      out[t] = a;
      out[n + t] = a + static_cast<int64_t>(r.below(4));
      out[2 * n + t] = a + static_cast<int64_t>(r.below(4));
    }
  };
  ids(f.mq, f.qpos, T, std::max<int64_t>(S - T, 0));
  ids(f.mk, f.kpos, S, 0);
  f.p.pos.named.push_back(
      mrope_scheme(f.freqs, {half - 2 * hw, hw, hw}, inter, layout, rope_angle::exact, f.mq, f.mk));
}

// The research schemes (xPos, M-RoPE, CoPE), their parameters drawn from r; a scheme reached
// by name through its declaration (its hook file's case draws).
template <typename Real>
void set_research_schemes(fixture<Real>& f, const spec& c, rng& r, scheme_bounds& b) {
  const int64_t T = c.T, S = c.S, D = c.D;
  auto& p = f.p;
  // The spread of valid positions bounds every distance d (xPos, the tensor schemes).
  int64_t plo = 0, phi = std::max<int64_t>(std::max(S, T) - 1, 0);
  if (!f.qpos.empty() || !f.kpos.empty()) {
    plo = INT64_MAX, phi = INT64_MIN;
    for (auto x : f.qpos)
      if (x >= 0) plo = std::min(plo, x), phi = std::max(phi, x);
    for (auto x : f.kpos)
      if (x >= 0) plo = std::min(plo, x), phi = std::max(phi, x);
    if (plo > phi) plo = phi = 0;
  }
  const double dmax = double(phi - plo);
  if (c.sch == scheme::mrope) set_mrope(f, c, r);
  if (c.sch == scheme::all) {
    b.kbias = draw_named_tensors(f, c, r, all_named_derived(), dmax);
    b.kbias += draw_named_tensors(f, c, r, all_named_bias(), dmax);
    draw_named_tensors(f, c, r, all_named_relative(), dmax);
    set_named_transform(f, c, all_named_query_scale(), plo, phi, b);
  }
  if (static_cast<int>(c.sch) >= kSchemes) {
    // A scheme reached by name, at its default parameters. Its largest |bias|: the declared
    // bound (bounded), else the largest over the distances up to dmax.
    const scheme_decl& d = *named_scheme_decls()[static_cast<int>(c.sch) - kSchemes];
    if (d.transform) {
      // A q/k transform (xPos, the query temperature) at the parameters its hook file gives for
      // these positions, and its bounds (set_named_transform).
      set_named_transform(f, c, d, plo, phi, b);
      return;
    }
    if (d.pairs) {
      // RoPE per pair (Self-Extend, DCA) on RoPE (half layout, rotary width the even part of D),
      // with parameters that put the case's pairs in every region; a rotation, so no bias and
      // the score bound of RoPE times the scheme's score factor (DCA's length scaling, <= 2).
      rope_config rc;
      rc.head_dim = D;
      rc.rotary_dim = D - D % 2;
      rc.theta = 10000;
      f.freqs = rope_frequencies(rc);
      p.pos.named = {rope_scheme(f.freqs), {d.name, rope_pairs_case_params(d)}};
      b.amp = std::sqrt(2.0);
      return;
    }
    if (is_tensor_scheme(d)) {
      b.kbias = draw_named_tensors(f, c, r, d, dmax);
      return;
    }
    p.pos.named = {{d.name, {}}};
    const auto args = named_scheme_args(d, {}, c.Hq);
    for (int64_t h = 0; h < c.Hq; ++h) {
      if (d.bias_props & bias_bounded) {
        b.kbias = std::max(b.kbias, named_bias_bound(d, args, h, c.Hq));
        continue;
      }
      for (int64_t x = -int64_t(dmax); x <= int64_t(dmax); ++x)
        b.kbias = std::max(b.kbias, std::abs(named_bias_value(d, args, h, c.Hq, plo, plo + x)));
    }
  }
}

// Tolerance magnitudes A, B and V (see the derivation in the header), and f.qs.
template <typename Real>
void set_magnitudes(fixture<Real>& f, const spec& c, const scheme_bounds& b) {
  const int64_t T = c.T, S = c.S, D = c.D, Hq = c.Hq, Hkv = c.Hkv;
  double kbias = b.kbias;
  double qmax = 0, kmax = 0, vmax = 0, akmax = 0, avmax = 0;
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
  if (f.rel >= 0) {  // a relative scheme's a^K (rows' norms) and a^V (entries)
    const auto& ak = f.named[f.rel];
    for (size_t c2 = 0; c2 < ak.size() / static_cast<size_t>(D); ++c2) {
      double n = 0;
      for (int64_t d = 0; d < D; ++d) n += double(ak[c2 * D + d]) * ak[c2 * D + d];
      akmax = std::max(akmax, std::sqrt(n));
    }
    for (auto x : f.named[f.rel + 1]) avmax = std::max(avmax, std::abs(double(x)));
  }
  f.A = (1.0 / std::sqrt(double(D))) * b.amp * b.amp * b.qs * qmax * (kmax + akmax);
  f.qs = b.qs;
  if (f.path) {  // what a path of its own adds to a score (CoPE's q_i . e)
    std::vector<std::vector<double>> t;
    for (size_t x = f.path_first; x < f.named.size(); ++x)
      t.emplace_back(f.named[x].begin(), f.named[x].end());
    kbias = std::max(kbias, named_path_score_bound(*f.path, t, D, qmax));
    if constexpr (std::is_same_v<Real, float>) {
      const auto e = named_path_tiled_errors(*f.path, t, D, qmax, f.A, S,
                                             std::numeric_limits<float>::epsilon() / 2);
      f.Ez = e.score, f.Ep = e.position, f.Eg = e.gate;
    }
  }
  f.B = kbias;
  f.V = vmax + avmax;
}

}  // namespace

// The steps in the order they draw from the seed: inputs, masks and positions, the scheme
// parameters, then the magnitudes A, B, V.
template <typename Real>
void build(fixture<Real>& f, const spec& c) {
  rng r(c.seed);
  draw_inputs(f, c, r);
  if (c.head_major) lay_out_head_major(f, c);
  f.p.T = c.T, f.p.S = c.S, f.p.D = c.D, f.p.Hq = c.Hq, f.p.Hkv = c.Hkv;
  draw_masks(f, c, r);
  scheme_bounds b;
  set_established_schemes(f, c, b);
  set_research_schemes(f, c, r, b);
  set_magnitudes(f, c, b);
  if (c.sinks) {
    rng rs(c.seed ^ 0x73696e6b73ull);  // "sinks": its own stream, the other draws unchanged
    f.sinks.resize(static_cast<size_t>(c.Hq));
    for (auto& x : f.sinks) x = static_cast<Real>(1.5 * rs.normal());
    f.p.sinks = f.sinks;
  }
}

template void build(fixture<float>&, const spec&);
template void build(fixture<double>&, const spec&);

// 1 when the query temperature scales queries another hook-1 transform has mapped (a second
// rounding of q'), else 0.
template <typename Real>
double composed_scale(const fixture<Real>& f) {
  const auto& pos = f.p.pos;
  return query_scale_on(pos) && qk_transform_on(pos) ? 1 : 0;
}

template <typename Real>
forward_tolerances forward_tolerance(const fixture<Real>& f, const spec& c) {
  const double u = std::numeric_limits<Real>::epsilon() / 2;
  const int64_t K = f.rel >= 0 ? f.rel_K : 0;
  // D + 11: the SIMD path folds the scale into q (one more rounding of u A); a query
  // temperature after a rotation rounds q once more (u A).
  const double ds = (c.D + 11 + composed_scale(f)) * u * f.A + 2 * u * (f.A + f.B) + f.Ez;
  const double ep = 2 * ds + 4 * u * (f.A + f.B) + 2 * u;  // exp: Highway Exp is 1 ulp = 2u
  forward_tolerances t;
  t.out = (2 * ep + (2 * c.S + 2 * K + 8) * u) * f.V;
  t.lse = ep + (2 * c.S + 4) * u;
  t.u = u;
  if (c.products == attention_products::bf16) {  // attention_cases.hpp, "bfloat16 products"
    const double ub = 0x1p-8;
    // Schemes whose q and k pass through hook 1 (a scheme reached by name: counted as rounded,
    // which only loosens the bound where it is exact).
    const bool hook1 =
        qk_transform_on(f.p.pos) || query_scale_on(f.p.pos) || static_cast<int>(c.sch) >= kSchemes;
    const bool bf = c.kv == kv_storage::bf16;
    const double rq = hook1 || !(bf && c.q_half) ? 1 : 0, rk = hook1 || !bf ? 1 : 0,
                 rv = bf ? 0 : 1;
    const double ds_b = (rq + rk) * ub * (1 + ub) * f.A + ds + c.D * 0x1p-125;
    const double ep_b = 2 * ds_b + 4 * u * (f.A + f.B) + 2 * u;
    t.out =
        ((2 * ep_b + (2 * c.S + 2 * K + 8) * u) * (1 + ub) + (1 + rv) * ub + 0x1p-126 * c.S) * f.V;
    t.lse = ep_b + (2 * c.S + 4) * u;
  }
  return t;
}

template forward_tolerances forward_tolerance(const fixture<float>&, const spec&);
template forward_tolerances forward_tolerance(const fixture<double>&, const spec&);

namespace {

template <typename Real>
double max_abs(std::span<const Real> x) {
  double m = 0;
  for (Real e : x) m = std::max(m, std::abs(double(e)));
  return m;
}

template <typename Real>
double max_row_norm(std::span<const Real> x, int64_t D, int ord) {
  double m = 0;
  for (size_t r = 0; r + D <= x.size(); r += D) {
    double n = 0;
    for (int64_t d = 0; d < D; ++d)
      n += ord == 1 ? std::abs(double(x[r + d])) : double(x[r + d]) * x[r + d];
    m = std::max(m, ord == 1 ? n : std::sqrt(n));
  }
  return m;
}

// The frequencies of the call's RoPE-family scheme (named_scheme::freqs), or null.
template <typename Real>
const rope_freqs* freqs_in(const attention_position<Real>& pos) {
  for (const named_scheme& n : pos.named)
    if (n.freqs) return n.freqs;
  return nullptr;
}

}  // namespace

template <typename Real>
backward_tolerances backward_tolerance(const fixture<Real>& f, const spec& c,
                                       std::span<const Real> dout, std::span<const Real> lse) {
  const double u = std::numeric_limits<Real>::epsilon() / 2;
  const auto& p = f.p;
  const int64_t K = f.rel >= 0 ? f.rel_K : 0, C = f.rel >= 0 ? 2 * K + 1 : 0;
  // xPos: |A_q(n)^T A_k(m)| <= F bounds the scale a gradient carries (as amp^2 for RoPE).
  const rope_freqs* rf = freqs_in(p.pos);
  const double amp = rf ? rf->attention_factor : std::sqrt(f.F);
  const double scale = 1.0 / std::sqrt(double(c.D));
  // Forward error terms (the forward derivation).
  const double e_s = (c.D + 10 + composed_scale(f)) * u * f.A + 2 * u * (f.A + f.B) + f.Ez;
  const double ep = 2 * e_s + 4 * u * (f.A + f.B) + 2 * u;
  const double tol_out = (2 * ep + (2 * c.S + 2 * K + 8) * u) * f.V;
  double lmax = 0;
  for (Real x : lse)
    if (std::isfinite(double(x))) lmax = std::max(lmax, std::abs(double(x)));
  const double e_lse = ep + (2 * c.S + 4) * u + u * lmax;
  // Backward.
  double avn = 0, akmax = 0;
  if (f.rel >= 0) {
    avn = max_row_norm<Real>(f.named[f.rel + 1], c.D, 2);
    akmax = max_abs<Real>(f.named[f.rel]);
  }
  const double W = max_row_norm(dout, c.D, 2) * (max_row_norm<Real>(f.v, c.D, 2) + avn);
  const double e_P = 2 * e_s + e_lse + 4 * u;
  const double E_S = 2 * W * e_P + (2 * c.D + 10) * u * W + max_row_norm(dout, c.D, 1) * tol_out;
  const double Qinf =
      amp * amp / (rf ? rf->attention_factor : 1.0) * f.qs * std::sqrt(2.0) * max_abs<Real>(f.q);
  const double Kinf =
      amp * amp / (rf ? rf->attention_factor : 1.0) * std::sqrt(2.0) * max_abs<Real>(f.k) + akmax;
  const double Oinf = max_abs(dout);
  const int64_t group = c.Hq / c.Hkv;  // query heads per kv head (a whole number)
  const double N = double(group) * double(c.T);
  const double both = std::is_same_v<Real, double> ? 2.0 : 1.0;
  backward_tolerances t;
  // dq = s dq' (scheme temperature): the error of dq' times s, plus one rounding.
  t.dq = both * scale * Kinf * f.qs * (E_S + 2 * W * (c.S + C + 12) * u) * (1 + 2 * u);
  t.dk = both * scale * Qinf * N * (E_S + 2 * W * (N + 12) * u);
  t.dv = both * N * Oinf * (e_P + (N + 4) * u);
  t.dak = both * scale * Qinf * c.Hq * c.T * E_S;
  t.dav = both * c.Hq * c.T * Oinf * e_P;
  t.dpar = both * c.T * E_S * f.G;
  if (f.Ez > 0) {  // a scheme's own float32 tiled path: CoPE's content positions
    // dS_ij = P_ij (dP_ij - D_i) errs by at most P_ij E_S (E_S above), so a row's errors sum to
    // at most E_S (sum_j P_ij = 1) and sum_j |dS_ij| <= 2 W. dZ_i[t] sums dS_ij with weights in
    // [0, 1] that moved with their position (by at most Ep): eZ. The gates' share of dA is
    // g'_t dg_t, g' = g (1 - g) <= min(g, 1/4), dg_t = sum_{j <= t} dp_ij with dp_ij = dS_ij
    // (Z[f + 1] - Z[f]) (|Z[f + 1] - Z[f]| <= 2 B, its float32 error 2 (D + 2) u B): |dg| <= 4 B W,
    // its error edg. g' errs by at most 4 Eg g (hook_cope.cpp), and the gates of a row's
    // unsaturated pairs sum to at most P + 1, so the share's errors over a row sum to at most
    // eA_row; per pair at most eA_pair. Each is rounded once to float (u 4 B W g').
    const auto& e = f.named[f.path_first];
    const double P = double(e.size()) / double(c.D), einf = max_abs<Real>(e);
    const double eZ = E_S + 2 * W * f.Ep + 2 * W * (c.S + 2) * u;
    const double edg = 2 * f.B * E_S + 4 * W * (c.D + 2) * u * f.B + 4 * W * f.B * (c.S + 2) * u;
    const double ng = std::min(double(c.S) / 4, P + 1);
    const double eA_row = ng * (edg + 4 * u * f.B * W) + 16 * f.B * W * (P + 1) * f.Eg;
    const double eA_pair = edg / 4 + 16 * f.B * W * f.Eg + 4 * u * f.B * W;
    t.dq += scale * Kinf * f.qs * eA_row + P * eZ * einf;
    t.dk += scale * Qinf * N * eA_pair;
    t.dpar += double(c.Hq) * double(c.T) * eZ * max_abs<Real>(f.q);
  }
  return t;
}

template backward_tolerances backward_tolerance(const fixture<float>&, const spec&,
                                                std::span<const float>, std::span<const float>);
template backward_tolerances backward_tolerance(const fixture<double>&, const spec&,
                                                std::span<const double>, std::span<const double>);

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The worst ratio |error| / tolerance seen, where it was, and the worst ratio per quantity.
// A NaN ratio (a non-finite value compared) sticks: measured_check fails it.
struct tracker {
  double worst = 0;
  std::string at;
  std::vector<std::pair<std::string, double>> per;  // (quantity, its worst ratio)

  template <typename Where>
  void add(double ratio, Where&& where) {
    if (std::isnan(worst)) return;
    if (std::isnan(ratio) || ratio > worst || at.empty()) {
      worst = ratio;
      at = where();
    }
  }
  void quantity(std::string what, double ratio) { per.emplace_back(std::move(what), ratio); }
};

template <typename Real>
const char* type_name() {
  return std::is_same_v<Real, float> ? "float32" : "float64";
}

// Compares fast with ref entry by entry against tol + u |ref|.
template <typename Real>
void compare(tracker& tr, const std::string& what, std::span<const Real> fast,
             std::span<const Real> ref, double tol, double u) {
  if (fast.size() != ref.size()) {
    tr.add(kInf, [&] {
      return fmt::format("{}: {} entries, the reference has {}", what, fast.size(), ref.size());
    });
    return;
  }
  double w = 0;
  for (size_t n = 0; n < ref.size(); ++n) {
    const double a = double(fast[n]), b = double(ref[n]), err = std::abs(a - b);
    double ratio = err / (tol + u * std::abs(b) + 1e-300);
    if (!std::isfinite(a)) ratio = std::numeric_limits<double>::quiet_NaN();
    if (std::isnan(ratio) || ratio > w) w = ratio;
    tr.add(ratio, [&] {
      return fmt::format(
          "{}[{}]: tiled {:.17g}, reference {:.17g}, |diff| {:.3g}, tolerance {:.3g}", what, n, a,
          b, err, tol + u * std::abs(b));
    });
  }
  tr.quantity(what, w);
}

template <typename Real>
void check_forward_on(tracker& tr, const spec& c, fixture<Real>& f) {
  auto pr = f.p, pf = f.p;
  pr.out = f.out_ref.data();
  pr.lse = f.lse_ref.data();
  pf.out = f.out_fast.data();
  pf.lse = f.lse_fast.data();
  attention_reference(pr);
  attention_tiled(pf);
  const auto t = forward_tolerance(f, c);
  const std::string ty = type_name<Real>();
  compare<Real>(tr, ty + " out", f.out_fast, f.out_ref, t.out, 0);
  double wl = 0;
  for (size_t n = 0; n < f.lse_ref.size(); ++n) {
    const double a = f.lse_ref[n], b = f.lse_fast[n];
    if (std::isinf(a) || std::isinf(b)) {
      // A row that sees nothing: both -inf, and both outputs exactly zero.
      bool ok = a == b && a < 0;
      for (int64_t d = 0; ok && d < c.D; ++d)
        ok = f.out_fast[n * c.D + d] == Real(0) && f.out_ref[n * c.D + d] == Real(0);
      if (!ok) {
        wl = kInf;
        tr.add(kInf, [&] {
          return fmt::format(
              "{} lse row {}: reference {}, tiled {} (a row that sees no key must "
              "give lse = -inf and out = 0 on both)",
              ty, n, a, b);
        });
      }
      continue;
    }
    const double tol = t.lse + t.u * std::abs(a);
    const double ratio = std::abs(a - b) / tol;
    if (std::isnan(ratio) || ratio > wl) wl = ratio;
    tr.add(ratio, [&] {
      return fmt::format("{} lse[{}]: tiled {:.17g}, reference {:.17g}, tolerance {:.3g}", ty, n, b,
                         a, tol);
    });
  }
  tr.quantity(ty + " lse", wl);
}

template <typename Real>
void check_forward(tracker& tr, const spec& c) {
  fixture<Real> f;
  build(f, c);
  check_forward_on(tr, c, f);
}

// Tiled backward (on the tiled forward's out and lse) against the reference backward.
template <typename Real>
void check_backward(tracker& tr, const spec& c) {
  fixture<Real> f;
  build(f, c);
  auto p = f.p;
  p.out = f.out_fast.data();
  p.lse = f.lse_fast.data();
  attention_tiled(p);
  const auto dout = random_normal<Real>(f.out_fast.size(), c.seed + 77);
  grads<Real> ref(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
  grads<Real> fast(f, f.out_fast.data(), f.lse_fast.data(), dout.data());
  attention_backward_reference(p, ref.g);
  attention_backward_tiled(p, fast.g);
  const auto t = backward_tolerance<Real>(f, c, dout, f.lse_fast);
  const double u = std::numeric_limits<Real>::epsilon() / 2;
  const std::string ty = std::string(type_name<Real>()) + " ";
  compare<Real>(tr, ty + "dq", fast.dq, ref.dq, t.dq, u);
  compare<Real>(tr, ty + "dk", fast.dk, ref.dk, t.dk, u);
  compare<Real>(tr, ty + "dv", fast.dv, ref.dv, t.dv, u);
  for (size_t x = 0; x < f.named.size(); ++x) {
    // A relative scheme's a^K and a^V have their own bounds; every other tensor T E_S G.
    const int rx = static_cast<int>(x) - f.rel;
    const double tol = f.rel < 0 || rx < 0 || rx > 1 ? t.dpar : rx == 0 ? t.dak : t.dav;
    if (!f.named64[x].empty())  // a float64 tensor (ALiBi's slopes) in any call
      compare<double>(tr, ty + "d" + f.named_names[x], fast.dnamed64[x], ref.dnamed64[x], tol, u);
    else
      compare<Real>(tr, ty + "d" + f.named_names[x], fast.dnamed[x], ref.dnamed[x], tol, u);
  }
  if (!p.sinks.empty()) {
    // dsinks_h = -sum_i p_i,sink D_i: the tiled backward reads D_i = dO_i . o_i and p_i,sink =
    // exp(sink - lse_i) from the forward's out and lse, the reference recomputes both in double.
    // Per row |delta D_i| <= D max|dO| e_out and |delta p| <= p (e^(e_lse) - 1) with the forward
    // bounds e_out, e_lse, |D_i| <= D max|dO| V; summed over T rows with T u of rounding each.
    const auto ft = forward_tolerance(f, c);
    double dO = 0, L = 0;
    for (Real x : dout) dO = std::max(dO, std::abs(double(x)));
    for (Real x : f.lse_fast) L = std::max(L, std::abs(double(x)));
    const double Dmax = double(c.D) * dO * f.V;
    const double tol =
        double(c.T) * (double(c.D) * dO * ft.out + Dmax * std::expm1(ft.lse + ft.u * L) +
                       4 * double(c.D) * u * Dmax);
    compare<Real>(tr, ty + "dsinks", fast.dsi, ref.dsi, tol, u);
  }
}

std::string summary(const tracker& tr) {
  std::string s;
  for (const auto& [what, r] : tr.per)
    s += fmt::format("{}{} {:.3g}", s.empty() ? "" : ", ", what, r);
  return s;
}

}  // namespace

namespace {

check_result case_result(const spec& c, const tracker& tr, const std::string& passes) {
  const std::string types = (c.dtypes & f32) && (c.dtypes & f64) ? "float32 and float64"
                            : (c.dtypes & f32)                   ? "float32"
                                                                 : "float64";
  return measured_check(
      "attention", "tiled_vs_reference/" + c.name,
      fmt::format("The tiled {} ({}) agrees with the reference within the derived bounds on {}",
                  passes, types, describe(c)),
      tr.worst, 1.0,
      fmt::format("max_error is the worst |tiled - reference| / tolerance; per quantity: {}; "
                  "worst at {}; tolerances derived in include/posenc/verify/attention_cases.hpp",
                  summary(tr), tr.at));
}

}  // namespace

check_result check_case(const spec& c, fixture<float>& f) {
  if (c.passes != forward || c.dtypes != f32)
    fail(
        "check_case on a built fixture: c must be a float32 forward case (passes = forward, "
        "dtypes = f32); {} has passes {} and dtypes {}",
        c.name, c.passes, c.dtypes);
  tracker tr;
  check_forward_on<float>(tr, c, f);
  return case_result(c, tr, "forward");
}

check_result check_case(const spec& c) {
  tracker tr;
  std::string passes;
  if (c.passes & forward) {
    if (c.dtypes & f32) check_forward<float>(tr, c);
    if (c.dtypes & f64) check_forward<double>(tr, c);
    passes = "forward";
  }
  if (c.passes & backward) {
    if (c.dtypes & f32) check_backward<float>(tr, c);
    if (c.dtypes & f64) check_backward<double>(tr, c);
    passes += passes.empty() ? "backward" : " and backward";
  }
  return case_result(c, tr, passes);
}

check_result grad_case(const spec& c) {
  fixture<double> f;
  build(f, c);
  auto p = f.p;
  std::vector<double> out(c.T * c.Hq * c.D), lse(c.T * c.Hq);
  p.out = out.data();
  p.lse = lse.data();
  const auto dout = random_normal<double>(out.size(), c.seed + 91);
  attention_reference(p);
  grads<double> ref(f, out.data(), lse.data(), dout.data());
  attention_backward_reference(p, ref.g);

  const double u = std::numeric_limits<double>::epsilon() / 2;
  double dO1 = 0;
  for (double x : dout) dO1 += std::abs(x);
  const double dL = 64 * (c.S + c.D) * u * (1 + f.A + f.B) * dO1 * f.V;
  auto loss = [&] {
    attention_reference(p);
    double L = 0;
    for (size_t n = 0; n < out.size(); ++n) L += dout[n] * out[n];
    return L;
  };
  tracker tr;
  // reach: how far one unit of the entries moves a score, at most (1 for q, k, v; G for a named
  // tensor: ALiBi's slopes move a score by the distance, up to 300 with explicit positions). The
  // step is divided by it, so that every step moves a score by the same 1e-3 at most and the
  // central difference stays in its Richardson regime (|FD(2h) - FD(h)| then bounds its error).
  auto check = [&](double* x, size_t n, const double* g, const char* what, double reach = 1) {
    double w = 0;
    for (size_t e = 0; e < n; ++e) {
      // CoPE's logit term is piecewise linear in its positions p (kinks at integer p, where the
      // interpolation changes embedding rows): a central difference whose step straddles a
      // kink measures an average of two slopes. A step of 1e-5 makes a straddle 100x less
      // likely than 1e-3 (a straddle needs some p of the row within about h |dp/dx| of an
      // integer); the rounding term 2 dL / h below grows accordingly and stays far below it.
      const double x0 = x[e], h = (own_path(c.sch) ? 1e-5 : 1e-3) / std::max(1.0, reach);
      auto fd = [&](double step) {
        x[e] = x0 + step;
        const double lp = loss();
        x[e] = x0 - step;
        const double lm = loss();
        x[e] = x0;
        return (lp - lm) / (2 * step);
      };
      const double f1 = fd(h), f2 = fd(2 * h);
      const double tol =
          std::abs(f2 - f1) + 2 * dL / h + 64 * (c.S + c.D) * u * (std::abs(g[e]) + 1);
      const double ratio = std::abs(f1 - g[e]) / tol;
      if (std::isnan(ratio) || ratio > w) w = ratio;
      tr.add(ratio, [&] {
        return fmt::format("{}[{}]: finite difference {:.17g}, backward {:.17g}, tolerance {:.3g}",
                           what, e, f1, g[e], tol);
      });
    }
    tr.quantity(what, w);
  };
  check(f.q.data(), f.q.size(), ref.dq.data(), "dq");
  check(f.k.data(), f.k.size(), ref.dk.data(), "dk");
  check(f.v.data(), f.v.size(), ref.dv.data(), "dv");
  if (!p.sinks.empty()) check(f.sinks.data(), f.sinks.size(), ref.dsi.data(), "dsinks");
  for (size_t x = 0; x < f.named.size(); ++x) {
    const std::string what = "d" + f.named_names[x];
    if (!f.named64[x].empty())
      check(f.named64[x].data(), f.named64[x].size(), ref.dnamed64[x].data(), what.c_str(), f.G);
    else
      check(f.named[x].data(), f.named[x].size(), ref.dnamed[x].data(), what.c_str(), f.G);
  }
  return measured_check(
      "attention", "backward_vs_fd/" + c.name,
      fmt::format("attention_backward_reference (float64) agrees with central differences of the "
                  "reference forward for every input and position parameter on {}",
                  describe(c)),
      tr.worst, 1.0,
      fmt::format("max_error is the worst |FD - g| / tol, tol = |FD(2h) - FD(h)| + rounding, "
                  "h = 1e-3 (1e-5 for CoPE), divided by a named tensor's reach G; per quantity: "
                  "{}; worst at {}; derivation in "
                  "include/posenc/verify/attention_cases.hpp",
                  summary(tr), tr.at));
}

// ---- the lists ------------------------------------------------------------------------------
namespace {

std::string short_name(const spec& c) {
  std::string s = fmt::format("{}_{}_T{}_S{}_D{}_H{}x{}_seed{}", name(c.sch), name(c.msk), c.T, c.S,
                              c.D, c.Hq, c.Hkv, c.seed);
  if (c.q_scale != 1) s += fmt::format("_qscale{}", c.q_scale);
  if (c.k_shift != 0) s += fmt::format("_kshift{}", c.k_shift);
  if (c.kv != kv_storage::f32) s += "_kv" + name(c.kv);
  if (c.q_half) s += "_qhalf";
  if (c.products != attention_products::f32) s += "_prod" + name(c.products);
  if (c.head_major) s += c.k_blocked ? "_kb" : "_hm";
  return s;
}

spec make(std::string group, spec c, unsigned passes, unsigned dtypes) {
  // A bias of tokens (Forgetting Attention's gates) has its queries the last T of the S key
  // tokens: T <= S, so the case runs with the two swapped.
  if (c.T > c.S && named_decl(c.sch) && named_bias_by_token(*named_decl(c.sch)))
    std::swap(c.T, c.S);
  c.passes = passes;
  c.dtypes = dtypes;
  c.group = std::move(group);
  c.name = c.group + "/" + short_name(c);
  return c;
}

constexpr int64_t kLens[] = {1, 3, 17, 64, 129};
constexpr int64_t kDims[] = {32, 80, 128};
constexpr std::pair<int64_t, int64_t> kHeads[] = {{1, 1}, {4, 1}, {4, 4}, {8, 1}, {8, 4}, {8, 8}};
constexpr int64_t kSimdDims[] = {32, 80, 128, 20};
// The decode, half-storage and head-major groups: MHA / GQA / MQA, D = 128, 80 and 20 (padded
// to the vector length), and one shape per path (packed prefill, decode, speculative decode).
constexpr std::pair<int64_t, int64_t> kLongHeads[] = {{4, 4}, {8, 2}, {8, 1}};
constexpr int64_t kLongDims[] = {128, 80, 20};
constexpr std::pair<int64_t, int64_t> kPathShapes[] = {{65, 130}, {1, 1000}, {4, 300}};
constexpr std::pair<int64_t, int64_t> kSimdHeads[] = {{1, 1}, {4, 4}, {8, 1},
                                                      {8, 4}, {8, 8}, {4, 1}};

// cu_seqlens (and "everything", which includes it) aligns queries with the last keys: T <= S.
spec simd_case(int64_t T, int64_t S, int64_t D, std::pair<int64_t, int64_t> heads, scheme sch,
               mask msk, uint64_t seed) {
  if (T > S && (msk == mask::cu_seqlens || msk == mask::everything)) std::swap(T, S);
  return spec{T, S, D, heads.first, heads.second, sch, msk, seed};
}

// ---- forward (tests/test_attention.cpp) ----
// The double and float32 forward against the reference: every scheme x mask, a sample of the
// cross product, every causal length pair, large scores, T5 past its bucket saturation.
void add_forward_cases(std::vector<spec>& v) {
  // Every scheme x every mask on one awkward shape (T=17 queries after a prefix, S=64), both
  // element types.
  for (int sch = 0; sch < scheme_count(); ++sch)
    for (int msk = 0; msk < kMasks; ++msk)
      v.push_back(make("forward_every_scheme_and_mask",
                       spec{17, 64, 80, 8, 4, static_cast<scheme>(sch), static_cast<mask>(msk),
                            uint64_t(100 + sch * 16 + msk)},
                       forward, f32 | f64));
  // A deterministic sample of the full cross product of shapes, heads, schemes and masks
  // (the whole product is ~50k cases; this covers every value of every axis many times).
  {
    rng r(2024);
    for (int n = 0; n < 160; ++n) {
      // Braced initialisers are evaluated in order: the draws below are T, S, D, Hq, scheme,
      // mask, then Hkv.
      spec c{kLens[r.below(5)],
             kLens[r.below(5)],
             kDims[r.below(3)],
             kHeads[r.below(6)].first,
             0,
             static_cast<scheme>(r.below(kSchemes)),
             static_cast<mask>(r.below(9)),
             uint64_t(1000 + n)};
      c.Hkv = kHeads[r.below(6)].second;
      if (c.Hq % c.Hkv) c.Hkv = 1;
      // cu_seqlens aligns queries with the last keys: only for T <= S.
      if (c.T > c.S && c.msk == mask::cu_seqlens) c.msk = mask::doc_ids;
      if (c.T > c.S && c.msk == mask::everything) c.msk = mask::positions;
      v.push_back(make("forward_sampled_cross_product", c, forward, n % 2 ? f32 : f64));
    }
  }
  // Every length pair at T, S in {1, 3, 17, 64, 129} with causal masking (the aligned
  // bottom-right rule is where off-by-ones live); default positions need T <= S.
  for (int64_t T : kLens)
    for (int64_t S : kLens)
      v.push_back(make("forward_all_length_pairs_causal",
                       spec{T, S, 32, 4, 1, derived_bias_scheme(),
                            T > S ? mask::positions : mask::causal, uint64_t(T * 1000 + S)},
                       forward, f32));
  // Large score magnitudes: |s| ~ 1e4 saturates a naive exp; the max-subtracted online softmax
  // must stay finite and match the reference.
  for (scheme s : {scheme::none, derived_bias_scheme(), relative_scheme()})
    v.push_back(make("forward_large_scores", spec{17, 64, 32, 4, 4, s, mask::causal, 77, 2000.0},
                     forward, f32 | f64));
  // A trained offset-only bias (T5's buckets, where a table saturates: 2 max_distance +
  // num_buckets = 56 at the case parameters) with every key far ahead of or behind every query,
  // bidirectional buckets: the tiled path's offset table collapses to one entry. (The double path
  // once sized that table negatively here and threw.)
  for (int64_t shift : {5000, -5000})
    v.push_back(make("forward_bias_beyond_saturation",
                     spec{17, 64, 32, 4, 2, offset_bias_scheme(), mask::positions, 91, 1.0, shift},
                     forward, f32 | f64));
}

// ---- the float32 SIMD kernels (partial key blocks of 64, D = 20 padded to the vector length,
// the decode path below 16 tile rows, MHA/GQA/MQA) ----
void add_simd_cases(std::vector<spec>& v) {
  // Every scheme x every mask, the shapes cycling through the awkward lists.
  {
    int idx = 0;
    for (int s = 0; s < scheme_count(); ++s)
      for (int m = 0; m < kMasks; ++m, ++idx)
        v.push_back(make("simd_every_scheme_and_mask",
                         simd_case(kLens[idx % 5], kLens[(idx / 5 + idx) % 5], kSimdDims[idx % 4],
                                   kSimdHeads[idx % 6], static_cast<scheme>(s),
                                   static_cast<mask>(m), 1000u + static_cast<uint64_t>(idx)),
                         forward, f32));
  }
  // All T x S combinations for the benchmark's kind of call: causal GQA, none, ALiBi and the
  // trained offset-only bias reached by name (offset_bias_scheme: T5).
  {
    int idx = 0;
    for (int64_t T : kLens)
      for (int64_t S : kLens) {
        if (T > S) continue;  // bottom-right causal with T > S needs explicit positions
        const scheme sch = idx % 3 == 0
                               ? scheme::none
                               : (idx % 3 == 1 ? derived_bias_scheme() : offset_bias_scheme());
        v.push_back(
            make("simd_causal_gqa_all_lengths",
                 spec{T, S, kSimdDims[idx % 3], 8, 2, sch, mask::causal, 77u + uint64_t(idx)},
                 forward, f32));
        ++idx;
      }
  }
  // Large scores on the SIMD path: the running max moves across key blocks by a lot (rescale
  // alpha << 1) and masked lanes stay exactly 0 (Exp(-inf) = 0, no NaN).
  v.push_back(make("simd_large_scores", spec{64, 129, 32, 4, 2, scheme::none, mask::causal, 5, 30},
                   forward, f32));
  // Decode and speculative decode (T = 1, 4) against long key sequences, where the decode path
  // (few tile rows or few items) splits the keys into chunks and merges them (flash-decoding):
  // every scheme, every mask, MHA / GQA / MQA, D = 128, 80 and 20 (padded to the vector
  // length). Items of fewer than 8 rows take the dot products in place (MHA, T = 1 GQA); T = 4
  // with GQA or MQA (8 to 32 tile rows) packs each key block per item.
  {
    const auto& heads = kLongHeads;
    const auto& dims = kLongDims;
    int idx = 0;
    for (int s = 0; s < scheme_count(); ++s)
      for (int64_t T : {1, 4})
        for (int64_t S : {1000, 8192}) {
          const auto msk = static_cast<mask>((idx * 5 + s) % kMasks);
          v.push_back(make(
              "simd_split_decode",
              spec{T, S, dims[(idx + idx / 3) % 3], heads[idx % 3].first, heads[idx % 3].second,
                   static_cast<scheme>(s), msk, 3000u + static_cast<uint64_t>(idx)},
              forward, f32));
          ++idx;
        }
  }
}

// Half-precision keys and values (float16, bfloat16) on every path that reads them: the
// packed prefill (keys widened as they are packed, values as each block is), the decode path
// (keys widened as they are loaded), split and unsplit, RoPE fused and on a copy, every
// scheme but CoPE (its own double path, which refuses half storage), MHA / GQA / MQA, D = 128,
// 80 and 20.
void add_half_kv_cases(std::vector<spec>& v) {
  {
    const auto& heads = kLongHeads;
    const auto& dims = kLongDims;
    const auto& shapes = kPathShapes;
    int idx = 0;
    for (int s = 0; s < scheme_count(); ++s)
      for (auto [T, S] : shapes)
        for (kv_storage kv : {kv_storage::f16, kv_storage::bf16}) {
          if (float_kv_only(static_cast<scheme>(s))) continue;
          const auto msk = static_cast<mask>((idx * 3 + s) % kMasks);
          spec c{T,
                 S,
                 dims[idx % 3],
                 heads[(idx / 3) % 3].first,
                 heads[(idx / 3) % 3].second,
                 static_cast<scheme>(s),
                 msk,
                 5000u + static_cast<uint64_t>(idx)};
          c.kv = kv;
          v.push_back(make("simd_half_kv", c, forward, f32));
          ++idx;
        }
  }
}

// bfloat16 products (attention_products::bf16) on every scheme but CoPE (whose own double path
// ignores the products): packed prefill shapes (S <= 128 keys, or enough items: the vdpbf16ps
// path where the CPU has it), a decode step (float32 products on any CPU), D = 128, 80, 20 and
// an odd 33 (a zero pad in the last pair); q, k, v stored bfloat16 (exact operands unless hook 1
// transforms them), float32 (every operand rounded) and float16 keys with float32 queries;
// token-major, head-major and blocked K and V.
void add_bf16_product_cases(std::vector<spec>& v) {
  constexpr std::pair<int64_t, int64_t> shapes[] = {{100, 100}, {65, 128}, {520, 520}, {1, 700}};
  constexpr int64_t dims[] = {128, 80, 20, 33};
  constexpr std::pair<int64_t, int64_t> heads[] = {{8, 2}, {4, 4}, {8, 8}, {8, 1}};
  int idx = 0;
  for (int s = 0; s < scheme_count(); ++s)
    for (int sh = 0; sh < 4; ++sh) {
      if (float_kv_only(static_cast<scheme>(s))) continue;
      const auto [T, S] = shapes[sh];
      // 520 x 520 needs 64 items to pack: MHA 8 x 8 (9 query blocks of 64 rows each).
      const auto hd = T == 520 ? heads[2] : heads[(idx + sh) % 4];
      spec c{T,
             S,
             T == 520 ? 32 : dims[idx % 4],
             hd.first,
             hd.second,
             static_cast<scheme>(s),
             static_cast<mask>((idx * 5 + s) % kMasks),
             7000u + static_cast<uint64_t>(idx)};
      // An odd D only where no rotation needs pairs of dimensions (the bias-only schemes).
      const auto sc = static_cast<scheme>(s);
      const bool bias_only = sc == scheme::none || sc == derived_bias_scheme() ||
                             sc == relative_scheme() || sc == offset_bias_scheme();
      if (c.D % 2 && !bias_only) ++c.D;
      c.products = attention_products::bf16;
      const int storage = idx % 3;  // bf16 q, k, v; float32 everything; f16 k, v with f32 q
      c.kv = storage == 0 ? kv_storage::bf16 : storage == 1 ? kv_storage::f32 : kv_storage::f16;
      c.q_half = storage == 0;
      // Every fourth prefill case reads K and V head-major (NaN past each head's rows), half of
      // those with the keys in 8-key blocks: the packing reads every layout.
      if (T > 1 && idx % 4 == 1) {
        c.head_major = true;
        c.k_blocked = c.D % 8 == 0 && idx % 8 == 1;
      }
      v.push_back(make("simd_bf16_products", c, forward, f32));
      ++idx;
    }
}

// Head-major layouts: every scheme over the given shapes, head dims cycling over dims and
// head counts over kLongHeads; float32 and float16 / bfloat16 storage on the float32 path
// (CoPE float32 only), and float64 where the storage is float32.
void add_layout_group(std::vector<spec>& v, const char* group, std::span<const int64_t> dims,
                      std::span<const std::pair<int64_t, int64_t>> shapes, int mask_step,
                      uint64_t seed0, bool k_blocked) {
  constexpr kv_storage kvs[] = {kv_storage::f32, kv_storage::f16, kv_storage::bf16};
  int idx = 0;
  for (int s = 0; s < scheme_count(); ++s)
    for (auto [T, S] : shapes) {
      const auto msk = static_cast<mask>((idx * mask_step + s) % kMasks);
      spec c{T,
             S,
             dims[idx % dims.size()],
             kLongHeads[(idx / 3) % 3].first,
             kLongHeads[(idx / 3) % 3].second,
             static_cast<scheme>(s),
             msk,
             seed0 + static_cast<uint64_t>(idx)};
      c.head_major = true;
      c.k_blocked = k_blocked;
      c.kv = float_kv_only(static_cast<scheme>(s)) ? kv_storage::f32 : kvs[(idx / 2) % 3];
      v.push_back(make(group, c, forward, c.kv == kv_storage::f32 ? f32 | f64 : f32));
      ++idx;
    }
}

// The head-major groups (add_layout_group): rows, then 8-key blocks.
void add_head_major_cases(std::vector<spec>& v) {
  // Head-major keys and values (kv_head_stride, as the KV cache stores them; NaN rows past each
  // head's S): the prefill (packed keys), decode with few rows (dot products in place), decode
  // and speculative decode with many rows (keys packed per item), MHA / GQA / MQA; float64 runs
  // the generic path's token-major copies.
  add_layout_group(v, "simd_head_major", kLongDims, kPathShapes, 7, 7000u, false);
  // Keys in 8-key blocks (k_blocked, head-major; NaN in each head's unused slots and blocks):
  // head dims that are multiples of 8 (128, 80, 40), and shapes whose last block is partial
  // (S = 130, 1000, 300 and 45).
  {
    constexpr int64_t dims[] = {128, 80, 40};
    constexpr std::pair<int64_t, int64_t> shapes[] = {{65, 130}, {1, 1000}, {4, 300}, {1, 45}};
    add_layout_group(v, "simd_k_blocked", dims, shapes, 5, 7500u, true);
  }
}

// ---- backward (tests/test_attention_backward.cpp) ----
void add_backward_cases(std::vector<spec>& v) {
  // Finite differences: every scheme x every mask on a small GQA shape, then every scheme on MHA
  // and MQA with every mask at once, and T > S.
  for (int sch = 0; sch < scheme_count(); ++sch)
    for (int msk = 0; msk < kMasks; ++msk)
      v.push_back(make("grad_every_scheme_and_mask",
                       spec{6, 9, 8, 4, 2, static_cast<scheme>(sch), static_cast<mask>(msk),
                            uint64_t(300 + sch * 16 + msk)},
                       grad, f64));
  for (int sch = 0; sch < scheme_count(); ++sch)
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{3, 3}, {4, 1}}) {
      v.push_back(make("grad_mha_mqa",
                       spec{5, 8, 8, hq, hkv, static_cast<scheme>(sch), mask::everything,
                            uint64_t(500 + sch * 4 + hkv)},
                       grad, f64));
      v.push_back(make("grad_mha_mqa",
                       spec{7, 4, 6, hq, hkv, static_cast<scheme>(sch), mask::positions,
                            uint64_t(600 + sch * 4 + hkv)},
                       grad, f64));  // T > S
    }
  // The tiled backward against the reference, every scheme x every mask, both element types.
  for (int sch = 0; sch < scheme_count(); ++sch)
    for (int msk = 0; msk < kMasks; ++msk)
      v.push_back(make("backward_every_scheme_and_mask",
                       spec{17, 70, 80, 8, 4, static_cast<scheme>(sch), static_cast<mask>(msk),
                            uint64_t(700 + sch * 16 + msk)},
                       backward, f32 | f64));
  // A scheme on a path of its own with a float32 tiled form (CoPE: tiles of 32 queries over
  // strips of 256 keys walked from the last, the positions carried across strips): several tiles
  // and strips, a decode step, padding and documents (the per-key mask), forward and backward.
  for (int sch = kSchemes; sch < scheme_count(); ++sch) {
    if (!own_path(static_cast<scheme>(sch))) continue;
    const uint64_t seed = 2100 + 8 * static_cast<uint64_t>(sch);
    for (const spec& c :
         {spec{70, 600, 24, 4, 2, static_cast<scheme>(sch), mask::causal, seed},
          spec{1, 600, 24, 4, 1, static_cast<scheme>(sch), mask::causal, seed + 1},
          spec{40, 300, 20, 4, 2, static_cast<scheme>(sch), mask::padding, seed + 2},
          spec{40, 300, 16, 2, 2, static_cast<scheme>(sch), mask::doc_ids, seed + 3}})
      v.push_back(make("path_tiles", c, forward | backward, f32));
  }
  // The per-pair RoPE schemes' float32 backward across its blocks of 32 queries and the chunks
  // of 16 blocks whose regions it holds at once (attention_rope_pairs.cpp): T = S = 530.
  for (int sch = kSchemes; sch < scheme_count(); ++sch)
    if (rope_pairs_scheme(static_cast<scheme>(sch)))
      v.push_back(make(
          "backward_pairs_blocks",
          spec{530, 530, 8, 2, 1, static_cast<scheme>(sch), mask::causal, uint64_t(1900 + sch)},
          backward, f32));
  // A deterministic sample of shapes: lengths across block edges (1, 3, 63, 64, 65, 129), odd
  // head dims, MHA / GQA / MQA.
  {
    const int64_t lens[] = {1, 3, 63, 64, 65, 129};
    const int64_t dims[] = {1, 7, 32, 59, 96};
    const std::pair<int64_t, int64_t> heads[] = {{1, 1}, {4, 1}, {4, 4}, {6, 2}, {8, 8}};
    rng r(77);
    for (int n = 0; n < 60; ++n) {
      spec c{lens[r.below(6)],
             lens[r.below(6)],
             dims[r.below(5)],
             0,
             0,
             static_cast<scheme>(r.below(kSchemes)),
             static_cast<mask>(r.below(kMasks)),
             uint64_t(900 + n)};
      const auto hh = heads[r.below(5)];
      c.Hq = hh.first, c.Hkv = hh.second;
      if (c.T > c.S && (c.msk == mask::cu_seqlens || c.msk == mask::everything))
        c.msk = mask::positions;
      if (c.sch == scheme::rope_interleaved_partial && c.D < 4) c.sch = scheme::rope_half;
      if ((c.sch == scheme::rope_half || c.sch == scheme::all || c.sch == scheme::mrope) && c.D % 2)
        c.D += 1;
      v.push_back(make("backward_sampled_shapes", c, backward, n % 2 ? f32 : f64));
    }
  }
}

// Attention sinks (attention_params::sinks) on every path that normalises a row: the tiled
// kernel (float64), the packed prefill, the decode path unsplit and split (merge_item), masks
// that leave rows with no key (the sink alone: out = 0, lse = sink), every scheme but CoPE;
// then the backward against the reference and finite differences of dsinks.
void add_sink_cases(std::vector<spec>& v) {
  constexpr std::pair<int64_t, int64_t> shapes[] = {{65, 130}, {1, 1000}, {4, 300}, {7, 13}};
  constexpr std::pair<int64_t, int64_t> heads[] = {{8, 2}, {8, 1}, {4, 4}};
  int idx = 0;
  for (int s = 0; s < scheme_count(); ++s) {
    if (own_path(static_cast<scheme>(s))) continue;
    for (int k = 0; k < 2; ++k, ++idx) {
      const auto [T, S] = shapes[idx % 4];
      spec c{T,
             S,
             idx % 3 == 0 ? 64 : 20,
             heads[idx % 3].first,
             heads[idx % 3].second,
             static_cast<scheme>(s),
             static_cast<mask>((idx * 3 + s) % kMasks),
             uint64_t(9100 + idx)};
      if (c.T > c.S && (c.msk == mask::cu_seqlens || c.msk == mask::everything))
        c.msk = mask::positions;
      c.sinks = true;
      v.push_back(make("sinks_forward", c, forward, f32 | f64));
    }
  }
  for (int s = 0; s < scheme_count(); ++s) {
    if (own_path(static_cast<scheme>(s))) continue;
    spec c{17,
           70,
           24,
           8,
           4,
           static_cast<scheme>(s),
           static_cast<mask>(s % kMasks),
           uint64_t(9300 + s)};
    c.sinks = true;
    v.push_back(make("sinks_backward", c, backward, f32 | f64));
    spec g{6,
           9,
           8,
           4,
           2,
           static_cast<scheme>(s),
           static_cast<mask>((s + 2) % kMasks),
           uint64_t(9400 + s)};
    g.sinks = true;
    v.push_back(make("sinks_grad", g, grad, f64));
  }
}

// The sections in the order of their tests.
std::vector<spec> make_full() {
  std::vector<spec> v;
  add_sink_cases(v);
  add_forward_cases(v);
  add_simd_cases(v);
  add_half_kv_cases(v);
  add_bf16_product_cases(v);
  add_head_major_cases(v);
  add_backward_cases(v);
  return v;
}

std::vector<spec> make_check() {
  std::vector<spec> v;
  auto add = [&](spec c, unsigned passes) {
    c.passes = passes;
    c.dtypes = f32 | f64;
    c.group = "check";
    c.name = fmt::format("{}_{}_T{}_S{}", name(c.sch), name(c.msk), c.T, c.S);
    v.push_back(c);
  };
  // Every scheme with a different mask (and every mask once), small GQA shapes: both modes.
  const std::pair<scheme, mask> pairs[] = {
      {scheme::none, mask::none},
      {scheme::rope_half, mask::causal},
      {scheme::rope_interleaved_partial, mask::padding},
      {derived_bias_scheme(), mask::cu_seqlens},
      {offset_bias_scheme(), mask::doc_ids},
      {offset_bias_scheme(), mask::window},
      {relative_scheme(), mask::causal_window},
      {scheme::all, mask::everything},
  };
  uint64_t seed = 4000;
  for (auto [s, m] : pairs) add(spec{7, 13, 8, 4, 2, s, m, seed++}, forward | backward | grad);
  add(spec{9, 5, 8, 4, 2, scheme::all, mask::positions, seed++}, forward | backward | grad);
  // Past the block edges (65 queries, 70 keys: blocks of 64) with every scheme on, a decode
  // step, MQA with an odd D.
  add(spec{65, 70, 32, 4, 2, scheme::all, mask::causal, seed++}, forward | backward);
  add(spec{1, 130, 32, 4, 1, scheme::rope_half, mask::causal, seed++}, forward | backward);
  add(spec{17, 33, 59, 4, 1, relative_scheme(), mask::causal, seed++}, forward | backward);
  // Attention sinks (gpt-oss's per-head logit): causal ALiBi, and RoPE with padded keys.
  for (auto [sch, m] : {std::pair{derived_bias_scheme(), mask::causal},
                        std::pair{scheme::rope_half, mask::padding}}) {
    spec c{7, 13, 8, 4, 2, sch, m, seed++};
    c.sinks = true;
    add(c, forward | backward | grad);
    v.back().name += "_sinks";
  }
  // Half-precision keys and values (float32 forward): a prefill with RoPE fused, a decode step.
  for (auto [c, kv] :
       {std::pair{spec{65, 130, 80, 8, 2, scheme::rope_half, mask::causal, seed++},
                  kv_storage::f16},
        std::pair{spec{1, 300, 64, 8, 1, scheme::all, mask::padding, seed++}, kv_storage::bf16}}) {
    add(c, forward);
    v.back().dtypes = f32;
    v.back().kv = kv;
    v.back().name += "_kv" + name(kv);
  }
  // M-RoPE: contiguous sections with explicit positions (large offsets, pads), interleaved
  // sections and pairs with default positions.
  add(spec{7, 13, 8, 4, 2, scheme::mrope, mask::positions, 4100}, forward | backward | grad);
  add(spec{7, 13, 10, 4, 2, scheme::mrope, mask::causal, 4103}, forward | backward | grad);
  // Each scheme reached by name: causal, bidirectional with padding, explicit positions (large
  // offsets, pads); a choice parameter takes its values in turn over the three rows.
  for (int s = kSchemes; s < scheme_count(); ++s) {
    std::vector<std::string> values = {""};
    for (const auto& prm : named_decl(static_cast<scheme>(s))->params)
      if (prm.choices) values = param_choices(prm);
    int row = 0;
    for (mask m : {mask::causal, mask::padding, mask::positions}) {
      spec c{7, 13,
             8, 4,
             2, static_cast<scheme>(s),
             m, 4200 + 4 * static_cast<uint64_t>(s) + static_cast<uint64_t>(m)};
      c.choice = row++ % static_cast<int>(values.size());
      add(c, forward | backward | grad);
      if (c.choice) v.back().name += "_" + values[c.choice];
    }
  }
  return v;
}

// Appends one perf case to v: kind (the check group) at T queries against S keys, Hq = 32 and
// Hkv heads of dim D, scheme s (named sname), causal, float32.
void add_perf(std::vector<spec>& v, const char* kind, int64_t T, int64_t S, int64_t Hkv, int64_t D,
              scheme s, const char* sname, unsigned passes, bool extended = false) {
  spec c{T, S, D, 32, Hkv, s, mask::causal, 11};
  c.passes = passes;
  c.dtypes = f32;
  c.group = kind;
  c.extended = extended;
  c.perf = true;
  c.name = fmt::format("{}/T={}/S={}/Hq=32/Hkv={}/D={}/scheme={}", kind, T, S, Hkv, D, sname);
  v.push_back(c);
}

// The prefill cases: every fast-row scheme, bfloat16, other head dims, longer sequences.
void add_prefill_perf(std::vector<spec>& v) {
  // Prefill at T = S = 2048 (GQA 32/8, D = 128) with no position and RoPE (the biases reached by
  // name: add_scheme_perf).
  add_perf(v, "attention", 2048, 2048, 8, 128, scheme::none, "none", forward);
  add_perf(v, "attention", 2048, 2048, 8, 128, scheme::rope_half, "rope", forward);
  // The same prefill with bfloat16 q, k, v and bfloat16 products (attention_products::bf16:
  // vdpbf16ps where the CPU has it), against its float32 twins above.
  for (auto [s, sname] : {std::pair{scheme::none, "none"}, std::pair{scheme::rope_half, "rope"},
                          std::pair{derived_bias_scheme(), name(derived_bias_scheme())}}) {
    add_perf(v, "attention", 2048, 2048, 8, 128, s, sname, forward);
    v.back().kv = kv_storage::bf16;
    v.back().q_half = true;
    v.back().products = attention_products::bf16;
    v.back().name += "/qkv=bf16/products=bf16";
  }
  // Other head dims (D = 80 is not a multiple of 16 lanes), then longer sequences.
  for (int64_t D : {64, 80, 96, 256})
    add_perf(v, "attention", 2048, 2048, 8, D, scheme::none, "none", forward);
  add_perf(v, "attention", 8192, 8192, 8, 128, scheme::none, "none", forward, true);
  add_perf(v, "attention", 16384, 16384, 8, 128, scheme::none, "none", forward, true);
  // Cost grows with the FLOPs alone: T = S = 32768 against 16 times T = S = 8192 (1.3 GB of q, k,
  // v and out).
  add_perf(v, "attention", 32768, 32768, 8, 128, scheme::none, "none", forward, true);
}

// The decode cases with token-major keys and values, float32 and float16.
void add_decode_perf(std::vector<spec>& v) {
  // Decode: one query (and four, speculative decoding) against a long cache; GQA 32/8, MHA
  // 32/32, MQA 32/1.
  add_perf(v, "attention", 1, 8192, 8, 128, scheme::none, "none", forward);
  add_perf(v, "attention", 4, 8192, 8, 128, scheme::none, "none", forward);
  add_perf(v, "attention", 1, 8192, 32, 128, scheme::none, "none", forward);
  add_perf(v, "attention", 1, 8192, 1, 128, scheme::none, "none", forward);
  // The same decode steps reading float16 keys and values (half the bytes).
  for (int64_t Hkv : {8, 32, 1}) {
    add_perf(v, "attention", 1, 8192, Hkv, 128, scheme::none, "none", forward);
    v.back().kv = kv_storage::f16;
    v.back().name += "/kv=f16";
  }
  add_perf(v, "attention", 4, 8192, 8, 128, scheme::none, "none", forward);
  v.back().kv = kv_storage::f16;
  v.back().name += "/kv=f16";
}

// The decode cases with head-major and blocked keys and values, and at 65536 keys.
void add_decode_layout_perf(std::vector<spec>& v) {
  // The same decode steps reading K and V head-major in rows (kv_head_stride: each head's keys
  // one contiguous run; the KV cache's layout when D is not a multiple of 8), float32 and
  // float16: extended, to compare with the blocked layout below.
  for (kv_storage kv : {kv_storage::f32, kv_storage::f16})
    for (int64_t Hkv : {8, 32, 1}) {
      add_perf(v, "attention", 1, 8192, Hkv, 128, scheme::none, "none", forward, true);
      v.back().kv = kv;
      v.back().head_major = true;
      v.back().name += kv == kv_storage::f32 ? "/layout=head" : "/layout=head/kv=f16";
    }
  for (kv_storage kv : {kv_storage::f32, kv_storage::f16}) {
    add_perf(v, "attention", 4, 8192, 8, 128, scheme::none, "none", forward, true);
    v.back().kv = kv;
    v.back().head_major = true;
    v.back().name += kv == kv_storage::f32 ? "/layout=head" : "/layout=head/kv=f16";
  }
  // The same head-major steps with the keys in 8-key blocks (k_blocked, the KV cache's layout
  // for D a multiple of 8): the decode dot products read each group of 8 keys in address order.
  for (kv_storage kv : {kv_storage::f32, kv_storage::f16})
    for (int64_t Hkv : {8, 32, 1}) {
      add_perf(v, "attention", 1, 8192, Hkv, 128, scheme::none, "none", forward);
      v.back().kv = kv;
      v.back().head_major = v.back().k_blocked = true;
      v.back().name += kv == kv_storage::f32 ? "/layout=blocked" : "/layout=blocked/kv=f16";
    }
  for (kv_storage kv : {kv_storage::f32, kv_storage::f16}) {
    add_perf(v, "attention", 4, 8192, 8, 128, scheme::none, "none", forward);
    v.back().kv = kv;
    v.back().head_major = v.back().k_blocked = true;
    v.back().name += kv == kv_storage::f32 ? "/layout=blocked" : "/layout=blocked/kv=f16";
  }
  add_perf(v, "attention", 1, 65536, 8, 128, scheme::none, "none", forward, true);
  add_perf(v, "attention", 1, 65536, 32, 128, scheme::none, "none", forward, true);
  add_perf(v, "attention", 1, 65536, 1, 128, scheme::none, "none", forward, true);
  for (int64_t Hkv : {8, 32, 1}) {
    add_perf(v, "attention", 1, 65536, Hkv, 128, scheme::none, "none", forward, true);
    v.back().head_major = true;
    v.back().name += "/layout=head";
  }
  for (int64_t Hkv : {8, 32}) {
    add_perf(v, "attention", 1, 65536, Hkv, 128, scheme::none, "none", forward, true);
    v.back().head_major = v.back().k_blocked = true;
    v.back().name += "/layout=blocked";
  }
}

// The research schemes' cases and each scheme reached by name, at T = S = 2048.
void add_scheme_perf(std::vector<spec>& v) {
  // The research schemes' rows at T = S = 2048: M-RoPE is a q/k transform on copies: extended.
  add_perf(v, "attention", 2048, 2048, 8, 128, scheme::mrope, "mrope", forward, true);  // on copies
  // Each scheme reached by name, at T = S = 2048: a bias's row (a table slice, FIRE's line per
  // segment) is a default case; a q/k transform (its per-position coefficients in double) and a
  // per-pair RoPE scheme (its own path: double scores, no tiles) are extended.
  for (int s = kSchemes; s < scheme_count(); ++s) {
    const scheme_decl* d = named_decl(static_cast<scheme>(s));
    add_perf(v, "attention", 2048, 2048, 8, 128, static_cast<scheme>(s),
             name(static_cast<scheme>(s)), forward,
             d->pairs || d->transform || named_path_scheme(*d));
  }
  // The per-pair RoPE schemes' targets against RoPE's (issue 46): a decode step over 8192 keys
  // and prefill at T = S = 8192, extended.
  for (auto [T, S] : {std::pair<int64_t, int64_t>{1, 8192}, {8192, 8192}}) {
    add_perf(v, "attention", T, S, 8, 128, scheme::rope_half, "rope", forward, true);
    for (int s = kSchemes; s < scheme_count(); ++s)
      if (rope_pairs_scheme(static_cast<scheme>(s)))
        add_perf(v, "attention", T, S, 8, 128, static_cast<scheme>(s), name(static_cast<scheme>(s)),
                 forward, true);
  }
}

std::vector<spec> make_perf() {
  std::vector<spec> v;
  add_prefill_perf(v);
  add_decode_perf(v);
  add_decode_layout_perf(v);
  add_scheme_perf(v);
  add_perf(v, "attention_backward", 2048, 2048, 8, 128, scheme::none, "none", backward);
  add_perf(v, "attention_backward", 2048, 2048, 8, 128, derived_bias_scheme(),
           name(derived_bias_scheme()), backward);
  // The targets of the schemes on paths of their own (issue 46): RoPE's backward, which the
  // per-pair schemes' backward is held to, then theirs and CoPE's forward and backward on their
  // own paths today (double scores per row): extended.
  add_perf(v, "attention_backward", 2048, 2048, 8, 128, scheme::rope_half, "rope", backward, true);
  for (int s = kSchemes; s < scheme_count(); ++s)
    if (named_decl(static_cast<scheme>(s))->pairs || own_path(static_cast<scheme>(s)))
      add_perf(v, "attention_backward", 2048, 2048, 8, 128, static_cast<scheme>(s),
               name(static_cast<scheme>(s)), backward, true);
  return v;
}

}  // namespace

const std::vector<spec>& check_cases() {
  return case_list<make_check>();
}

const std::vector<spec>& full_cases() {
  return case_list<make_full>();
}

const std::vector<spec>& perf_cases() {
  return case_list<make_perf>();
}

spec perf_validation_case(const spec& c) {
  spec r = c;
  if (c.passes & backward) {
    r.T = r.S = std::min<int64_t>(c.T, 192);
  } else if (c.products == attention_products::bf16) {
    // 128 queries of 4 heads per kv head: enough (kv head, query block) items for the packed
    // prefill, the path where the bfloat16 products run.
    r.T = std::min<int64_t>(c.T, 128);
  } else {
    r.T = std::min<int64_t>(c.T, 16);
  }
  r.name = fmt::format("{}/validation_T{}_S{}", c.name, r.T, r.S);
  return r;
}

bool needs_t_within_s(const spec& c) {
  return c.msk == mask::cu_seqlens || c.msk == mask::everything ||
         (named_decl(c.sch) && named_bias_by_token(*named_decl(c.sch)));
}

}  // namespace posenc::attention_cases
