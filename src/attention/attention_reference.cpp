// The attention specification: validation, default resolution, and the plain reference
// (full score row per query, double accumulation). Everything here favours obviousness over
// speed; src/attention/attention.cpp is tested against it.
#include <cmath>
#include <limits>
#include <type_traits>

#include "attention_plan.hpp"
#include "named_schemes.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/positions/positions.hpp"

namespace posenc {
namespace detail {
namespace {

// Checks the shapes and sizes, the q, k and v storage and pointers, the sinks and the products.
template <typename Real>
void validate_attention_inputs(const attention_params<Real>& p) {
  if (p.T < 0) fail("attention: T must be >= 0, got {}", p.T);
  if (p.S < 0) fail("attention: S must be >= 0, got {}", p.S);
  if (p.Hq < 1) fail("attention: Hq must be >= 1, got {}", p.Hq);
  if (p.Hkv < 1) fail("attention: Hkv must be >= 1, got {}", p.Hkv);
  if (p.D < 1) fail("attention: D must be >= 1, got {}", p.D);
  if (p.Hq % p.Hkv != 0)
    fail("attention: Hq must be a multiple of Hkv, got Hq = {} and Hkv = {}", p.Hq, p.Hkv);
  checked_bytes("attention q/out", static_cast<unsigned long long>(p.T),
                static_cast<unsigned long long>(p.Hq), static_cast<unsigned long long>(p.D),
                sizeof(Real));
  checked_bytes("attention k/v", static_cast<unsigned long long>(p.S),
                static_cast<unsigned long long>(p.Hkv), static_cast<unsigned long long>(p.D),
                sizeof(Real));
  if (p.q_storage == kv_storage::f32) {
    if (p.T > 0 && (!p.q || !p.out)) fail("attention: q and out must not be null when T = {}", p.T);
    if (p.q16)
      fail("attention: q16 is read only with q_storage = f16 or bf16, got q_storage = f32");
  } else {
    if (!std::is_same_v<Real, float>)
      fail(
          "attention: q_storage = {} (half-precision q16) needs a float32 call; this call is "
          "float64",
          name(p.q_storage));
    if (p.q)
      fail("attention: with q_storage = {} the queries are q16; q must be null", name(p.q_storage));
    if (p.T > 0 && (!p.q16 || !p.out))
      fail("attention: q16 and out must not be null when q_storage = {} and T = {}",
           name(p.q_storage), p.T);
  }
  if (!p.sinks.empty()) {
    if (static_cast<int64_t>(p.sinks.size()) != p.Hq)
      fail("attention: sinks must have Hq = {} entries (one logit per query head), got {}", p.Hq,
           p.sinks.size());
    for (size_t h = 0; h < p.sinks.size(); ++h)
      if (!std::isfinite(static_cast<double>(p.sinks[h])))
        fail("attention: sinks must be finite, got {} for head {}", double(p.sinks[h]), h);
    for (const auto& n : p.pos.named)
      if (scheme_decl_of(n.name).points & scheme_own_path)
        fail("attention: sinks are not supported with {} (its own path); leave one of them off",
             n.name);
  }
  if (p.products != attention_products::f32 && !std::is_same_v<Real, float>)
    fail(
        "attention: products = {} needs a float32 call (products = f32 or bf16 on float32); "
        "this call is float64",
        name(p.products));
  if (p.kv == kv_storage::f32) {
    if (p.S > 0 && (!p.k || !p.v)) fail("attention: k and v must not be null when S = {}", p.S);
  } else {
    if (!std::is_same_v<Real, float>)
      fail("attention: kv = {} (half-precision k16/v16) needs float32 q; this call is float64",
           name(p.kv));
    if (p.k || p.v)
      fail("attention: with kv = {} the keys and values are k16 and v16; k and v must be null",
           name(p.kv));
    if (p.S > 0 && (!p.k16 || !p.v16))
      fail("attention: k16 and v16 must not be null when kv = {} and S = {}", name(p.kv), p.S);
  }
}

// Checks the window and the key / value layout (kv_head_stride, k_blocked).
template <typename Real>
void validate_attention_kv_layout(const attention_params<Real>& p) {
  if (p.window < 0) fail("attention: window must be >= 0 (0 = none), got {}", p.window);
  if (p.kv_head_stride != 0) {
    if (p.kv_head_stride < p.S * p.D || p.kv_head_stride % p.D != 0)
      fail(
          "attention: kv_head_stride must be 0 (token-major k, v) or a multiple of D = {} that "
          "is >= S * D = {} (head-major), got {}",
          p.D, p.S * p.D, p.kv_head_stride);
    checked_bytes("attention k/v (head-major)", static_cast<unsigned long long>(p.Hkv),
                  static_cast<unsigned long long>(p.kv_head_stride), 1, sizeof(Real));
  }
  if (p.k_blocked) {
    if (p.kv_head_stride <= 0)
      fail(
          "attention: k_blocked (keys in 8-key blocks) needs head-major keys and values: "
          "kv_head_stride > 0, got {}",
          p.kv_head_stride);
    if (p.D % kKeyBlock != 0)
      fail("attention: k_blocked needs D a multiple of {}, got D = {}", kKeyBlock, p.D);
    const int64_t need = (p.S + kKeyBlock - 1) / kKeyBlock * kKeyBlock * p.D;
    if (p.kv_head_stride < need)
      fail(
          "attention: with k_blocked, kv_head_stride must be >= ceil(S / 8) * 8 * D = {} (whole "
          "blocks), got {}",
          need, p.kv_head_stride);
  }
}

// The documents of the queries and keys (pl.qdoc, pl.kdoc; none when p packs none); returns
// the default key positions.
template <typename Real>
std::vector<int64_t> attention_plan_documents(const attention_params<Real>& p, attention_plan& pl) {
  const int64_t T = p.T, S = p.S;
  std::vector<int64_t> kdef;  // default key positions
  const bool have_cu = !p.cu_seqlens.empty();
  const bool have_ids = !p.q_doc_ids.empty() || !p.k_doc_ids.empty();
  if (have_cu && have_ids)
    fail("attention: give packed documents as cu_seqlens or as q_doc_ids/k_doc_ids, not both");
  if (have_cu) {
    validate_cu_seqlens(p.cu_seqlens, S, "cu_seqlens");
    if (T > S)
      fail("cu_seqlens describes the S = {} keys and needs T <= S queries, got T = {}", S, T);
    pl.kdoc = doc_ids_from_cu_seqlens(p.cu_seqlens);
    pl.qdoc.assign(pl.kdoc.end() - T, pl.kdoc.end());
    kdef = positions_packed(p.cu_seqlens, 0);
  } else if (have_ids) {
    if (static_cast<int64_t>(p.q_doc_ids.size()) != T)
      fail("q_doc_ids must have shape (T,) = ({},), got ({},)", T, p.q_doc_ids.size());
    if (static_cast<int64_t>(p.k_doc_ids.size()) != S)
      fail("k_doc_ids must have shape (S,) = ({},), got ({},)", S, p.k_doc_ids.size());
    pl.qdoc.assign(p.q_doc_ids.begin(), p.q_doc_ids.end());
    pl.kdoc.assign(p.k_doc_ids.begin(), p.k_doc_ids.end());
    kdef = positions_packed_from_doc_ids(p.k_doc_ids, 0);  // also rejects negative ids
    for (size_t i = 0; i < pl.qdoc.size(); ++i)
      if (pl.qdoc[i] < 0) fail("q_doc_ids must be >= 0, got {} at index {}", pl.qdoc[i], i);
  } else {
    kdef = positions_fresh(S, 0);
  }
  return kdef;
}

// The query and key positions (pl.qpos, pl.kpos: given, else the defaults kdef), their
// validity and their pad-free copies.
template <typename Real>
void attention_plan_positions(const attention_params<Real>& p, attention_plan& pl,
                              const std::vector<int64_t>& kdef) {
  const int64_t T = p.T, S = p.S;
  if (!p.k_positions.empty()) {
    validate_positions(p.k_positions, S, "k_positions", true);
    pl.kpos.assign(p.k_positions.begin(), p.k_positions.end());
  } else {
    pl.kpos = kdef;
  }
  if (!p.q_positions.empty()) {
    validate_positions(p.q_positions, T, "q_positions", true);
    pl.qpos.assign(p.q_positions.begin(), p.q_positions.end());
  } else {
    if (T > S)
      fail(
          "q_positions must be given when T > S (default positions align the T = {} queries "
          "with the last of the S = {} keys)",
          T, S);
    pl.qpos.assign(pl.kpos.end() - T, pl.kpos.end());
  }
  pl.qvalid.resize(T);
  pl.kvalid.resize(S);
  pl.qpos_safe = pl.qpos;
  pl.kpos_safe = pl.kpos;
  for (int64_t i = 0; i < T; ++i) {
    pl.qvalid[i] = pl.qpos[i] != pad_position;
    if (!pl.qvalid[i]) pl.qpos_safe[i] = 0;
  }
  for (int64_t j = 0; j < S; ++j) {
    pl.kvalid[j] = pl.kpos[j] != pad_position && (p.key_padding.empty() || p.key_padding[j]);
    if (pl.kpos[j] == pad_position) pl.kpos_safe[j] = 0;
  }
}

}  // namespace

template <typename Real>
attention_plan make_attention_plan(const attention_params<Real>& p) {
  validate_attention_inputs(p);
  validate_attention_kv_layout(p);

  attention_plan pl;
  pl.group = p.Hq / p.Hkv;
  pl.scale = p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.D));
  if (!std::isfinite(pl.scale)) fail("attention: scale must be finite, got {}", pl.scale);

  const int64_t S = p.S;
  if (!p.key_padding.empty() && static_cast<int64_t>(p.key_padding.size()) != S)
    fail("key_padding must have shape (S,) = ({},), got ({},)", S, p.key_padding.size());

  const std::vector<int64_t> kdef = attention_plan_documents(p, pl);  // default key positions
  attention_plan_positions(p, pl, kdef);
  if (!p.pos.named.empty()) {
    pl.ktok.resize(S);
    for (int64_t j = 0; j < S; ++j) pl.ktok[j] = j;
  }
  return pl;
}

template attention_plan make_attention_plan(const attention_params<float>&);
template attention_plan make_attention_plan(const attention_params<double>&);

}  // namespace detail

template <typename Real>
void attention_validate(const attention_params<Real>& p) {
  const auto pl = detail::make_attention_plan(p);
  (void)detail::make_engine_terms<Real>(p, pl, nullptr);
}

// Reference. Per query head h and query i (plain loops, double throughout; hook 1 applied to
// q and k in double; c = the relative tables' row of the pair):
//   s_j = scale * q'_i . (k'_j + a^K_c) + sum of biases     for visible j, else -inf
//   m = max_j s_j;  w_j = exp(s_j - m);  l = sum_j w_j       (two-pass softmax)
//   out_i = sum_j (w_j / l) (v_j + a^V_c);  lse_i = m + log(l)
// A row with no visible key: out_i = 0, lse_i = -inf.
template <typename Real>
void attention_reference(const attention_params<Real>& p) {
  if (detail::named_path_forward(p, true)) return;  // a scheme's own path (CoPE)
  const auto pl = detail::make_attention_plan(p);
  const auto terms = detail::make_engine_terms<Real>(p, pl, nullptr);
  if (terms.pairs) return detail::rope_pairs_forward(p, pl, terms, true);  // per-pair RoPE
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;

  // q', k' in double: (T, Hq, D) and (S, Hkv, D).
  // Read through p's layout (k_index, kv_offset); half-precision storage widens exactly.
  std::vector<double> q(T * Hq * D), k(S * Hkv * D), v(S * Hkv * D);
  for (int64_t x = 0; x < T * Hq * D; ++x)
    q[x] = p.q_storage == kv_storage::f32 ? double(p.q[x])
                                          : double(half_to_float(p.q_storage, p.q16[x]));
  for (int64_t j = 0; j < S; ++j)
    for (int64_t hk = 0; hk < Hkv; ++hk)
      for (int64_t e = 0; e < D; ++e) {
        const int64_t x = (j * Hkv + hk) * D + e, y = kv_offset(p, j, hk) + e,
                      yk = k_index(p, j, hk, e);
        k[x] = p.kv == kv_storage::f32 ? double(p.k[yk]) : double(half_to_float(p.kv, p.k16[yk]));
        v[x] = p.kv == kv_storage::f32 ? double(p.v[y]) : double(half_to_float(p.kv, p.v16[y]));
      }
  if (const auto* tr = terms.transform.get()) {
    tr->apply(pl.qpos_safe, q.data(), T, Hq, D, false, false);
    if (!tr->keys_transformed) tr->apply(pl.kpos_safe, k.data(), S, Hkv, D, true, false);
  }
  const auto* rel = terms.relative.get();

  std::vector<double> s(S), o(D);
  for (int64_t h = 0; h < Hq; ++h) {
    const int64_t hk = h / pl.group;
    for (int64_t i = 0; i < T; ++i) {
      const double* qi = &q[(i * Hq + h) * D];
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < S; ++j) {
        if (!detail::attention_visible(pl, p.causal, p.window, T, S, i, j)) {
          s[j] = -std::numeric_limits<double>::infinity();
          continue;
        }
        const double* kj = &k[(j * Hkv + hk) * D];
        const Real* ak = rel ? rel->keys + rel->index(pl.qpos[i], pl.kpos[j]) * D : nullptr;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qi[d] * (kj[d] + (ak ? double(ak[d]) : 0.0));
        double sc = pl.scale * dot;
        for (const auto& b : terms.biases) sc += bias_value(*b, pl, h, i, j);
        s[j] = sc;
        if (sc > m) m = sc;
      }
      Real* out = p.out + (i * Hq + h) * D;
      // A sink (attention_params::sinks) is one more score with no value.
      const bool sink = !p.sinks.empty();
      const double sk = sink ? double(p.sinks[h]) : 0.0;
      if (m == -std::numeric_limits<double>::infinity()) {
        for (int64_t d = 0; d < D; ++d) out[d] = Real(0);
        if (p.lse)
          p.lse[i * Hq + h] = sink ? static_cast<Real>(sk) : -std::numeric_limits<Real>::infinity();
        continue;
      }
      if (sink && sk > m) m = sk;
      double l = sink ? std::exp(sk - m) : 0.0;
      for (int64_t j = 0; j < S; ++j) {
        s[j] = std::exp(s[j] - m);  // exp(-inf) = 0 for masked keys
        l += s[j];
      }
      for (int64_t d = 0; d < D; ++d) o[d] = 0;
      for (int64_t j = 0; j < S; ++j) {
        if (s[j] == 0) continue;
        const double w = s[j] / l;
        const double* vj = &v[(j * Hkv + hk) * D];
        const Real* av = rel ? rel->values + rel->index(pl.qpos[i], pl.kpos[j]) * D : nullptr;
        for (int64_t d = 0; d < D; ++d) o[d] += w * (vj[d] + (av ? double(av[d]) : 0.0));
      }
      for (int64_t d = 0; d < D; ++d) out[d] = static_cast<Real>(o[d]);
      if (p.lse) p.lse[i * Hq + h] = static_cast<Real>(m + std::log(l));
    }
  }
}

template void attention_validate(const attention_params<float>&);
template void attention_validate(const attention_params<double>&);
template void attention_reference(const attention_params<float>&);
template void attention_reference(const attention_params<double>&);

}  // namespace posenc
