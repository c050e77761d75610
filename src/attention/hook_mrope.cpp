// M-RoPE (Wang et al. 2024, "Qwen2-VL", sec. 2.1 "Multimodal Rotary Position Embedding") as the
// engine's hook 1: every token has three position ids (temporal, height, width), and rotary
// pair i turns by omega_i times the id of its component c_i (mrope_components: contiguous
// sections as in Qwen2-VL, or Qwen3-VL's interleaved layout):
//   q'_t = a R(q_ids[:, t]) q_t,  k'_s = a R(k_ids[:, s]) k_s,
// R acting pair by pair. The map is mrope_apply itself, so the engine's result is bit for bit
// mrope_apply followed by attention without a position scheme; its transpose (the backward,
// dq = a R^T dq') is mrope_apply's inverse, the rotation with the sine negated. The ids are the
// transform's own (3 per token): the engine's 1-D positions are not read.
#include <cmath>

#include "hooks.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"

namespace posenc::detail {
namespace {

class mrope_transform final : public qk_transform {
 public:
  // q_ids (3, T) and k_ids (3, S) row-major; either may be empty when that side is not mapped
  // (keys from a cache; a cache's transform for appended keys).
  mrope_transform(const attention_mrope& m, std::vector<int> component,
                  std::span<const int64_t> q_ids, std::span<const int64_t> k_ids)
      : m_(m), component_(std::move(component)), q_ids_(q_ids), k_ids_(k_ids) {
    for (int c : component_) present_[c] = true;
  }
  void apply(std::span<const int64_t>, float* x, int64_t n, int64_t H, int64_t D, bool key,
             bool transpose) const override {
    run(x, n, H, D, key, transpose);
  }
  void apply(std::span<const int64_t>, double* x, int64_t n, int64_t H, int64_t D, bool key,
             bool transpose) const override {
    run(x, n, H, D, key, transpose);
  }
  int64_t ids_per_token() const override { return 3; }
  std::unique_ptr<qk_transform> with_key_ids(std::span<const int64_t> ids,
                                             int64_t n) const override {
    if (static_cast<int64_t>(ids.size()) != 3 * n)
      fail("M-RoPE: key ids must have shape (3, n) = (3, {}), got {} entries", n, ids.size());
    return std::make_unique<mrope_transform>(m_, component_, std::span<const int64_t>{}, ids);
  }

  // Row form: token t's table from its own ids (the call's 1-D position is not read), and
  // rope_rotate, the same two steps as run()'s forward pass. Not offered when POSENC_REFERENCE
  // selects rope_apply's plain loops (run() then calls mrope_apply itself).
  int64_t row_table_size() const override {
    return rope_reference_selected() ? 0 : m_.freqs->rotary_dim;
  }
  void fill_row_table(int64_t t, int64_t, bool key, float* table) const override {
    const std::span<const int64_t> ids = key ? k_ids_ : q_ids_;
    thread_local std::vector<float> cs;
    cs.resize(static_cast<size_t>(3 * m_.freqs->rotary_dim));
    mix_table(ids, static_cast<int64_t>(ids.size()) / 3, t, cs.data(), table);
  }
  void apply_rows(const float* table, bool, float* x, int64_t H, int64_t stride) const override {
    const int64_t R = m_.freqs->rotary_dim;
    rope_rotate(m_.layout, R, table, table + R / 2, x, H, stride, false);
  }

 private:
  template <typename Real>
  void run(Real* x, int64_t n, int64_t H, int64_t D, bool key, bool transpose) const {
    const std::span<const int64_t> ids = key ? k_ids_ : q_ids_;
    // The engine maps whole q or k arrays (engine_terms.hpp): n is T or S, the ids' width.
    if (static_cast<int64_t>(ids.size()) != 3 * n)
      fail("M-RoPE: {} ids for {} {} (the engine maps whole q and k arrays)", ids.size(), n,
           key ? "keys" : "queries");
    if (transpose || rope_reference_selected()) {
      mrope_apply(*m_.freqs, component_, m_.layout, m_.angle, ids, x, n, H, D, transpose);
      return;
    }
    // The forward in one pass over x: per token, the row form's table (below) and one
    // rope_rotate over the token's H rows.
    const int64_t R = m_.freqs->rotary_dim, half = R / 2;
    parallel_for(
        n,
        [&](int64_t b, int64_t e) {
          std::vector<Real> cs(static_cast<size_t>(3 * R)), mix(static_cast<size_t>(R));
          for (int64_t t = b; t < e; ++t) {
            mix_table(ids, n, t, cs.data(), mix.data());
            rope_rotate(m_.layout, R, mix.data(), mix.data() + half, x + t * H * D, H, D, false);
          }
        },
        16);
  }
  // Token t's table (cos | sin, R floats): rope_cos_sin at each component's id, pair i taking
  // the cos and sin of its component. With rope_rotate these are the two steps rope_apply takes
  // per token (the RoPE hook's row form relies on the same), so each pair gets the bits
  // mrope_apply gives it, without its three rotated copies. cs: 3 R scratch.
  template <typename Real>
  void mix_table(std::span<const int64_t> ids, int64_t n, int64_t t, Real* cs, Real* mix) const {
    const int64_t R = m_.freqs->rotary_dim, half = R / 2;
    for (int c = 0; c < 3; ++c)
      if (present_[c])
        rope_cos_sin(*m_.freqs, m_.angle, ids[c * n + t], cs + c * R, cs + c * R + half);
    for (int64_t i = 0; i < half; ++i) {
      mix[i] = cs[component_[i] * R + i];
      mix[half + i] = cs[component_[i] * R + half + i];
    }
  }
  attention_mrope m_;
  std::vector<int> component_;               // (R/2,) c_i in {0, 1, 2}
  bool present_[3] = {false, false, false};  // which components have pairs
  std::span<const int64_t> q_ids_, k_ids_;
};

// The components of m's pairs, after checking m against the head dim D (`who` prefixes the
// errors, which name the field).
std::vector<int> mrope_validate(const attention_mrope& m, int64_t D, const std::string& who) {
  try {
    rope_validate(*m.freqs);
  } catch (const invalid_argument& e) {
    throw invalid_argument(who + "pos.mrope.freqs: " + e.what());
  }
  if (m.freqs->rotary_dim > D)
    fail("{}pos.mrope: rotary_dim must be <= D = {}, got {}", who, D, m.freqs->rotary_dim);
  if (m.freqs->head_dim != 0 && m.freqs->head_dim != D)
    fail("{}pos.mrope: head_dim must equal the attention head dim D = {}, got {}", who, D,
         m.freqs->head_dim);
  try {
    return mrope_components(m.section, m.interleaved, m.freqs->rotary_dim / 2);
  } catch (const invalid_argument& e) {
    throw invalid_argument(who + "pos.mrope.section: " + e.what());
  }
}

// ids: (3, n) row-major, each in [0, 2^62].
void validate_ids(std::span<const int64_t> ids, int64_t n, const char* arg, const char* dim) {
  if (static_cast<int64_t>(ids.size()) != 3 * n)
    fail("{} must have shape (3, {}) = (3, {}) (temporal, height, width rows), got {} entries", arg,
         dim, n, ids.size());
  for (size_t e = 0; e < ids.size(); ++e)
    if (ids[e] < 0 || ids[e] > (int64_t{1} << 62))
      fail("{}[{}, {}] must be in [0, 2^62] (pads are marked by the call's 1-D positions), got {}",
           arg, e / static_cast<size_t>(n), e % static_cast<size_t>(n), ids[e]);
}

}  // namespace

template <typename Real>
void add_mrope_terms(const attention_params<Real>& p, const attention_plan&,
                     const attention_grads<Real>*, engine_terms<Real>& t) {
  const attention_mrope& m = p.pos.mrope;
  if (!m.freqs) return;
  auto component = mrope_validate(m, p.D, "");
  validate_ids(m.q_positions, p.T, "pos.mrope.q_positions", "T");
  if (!m.keys_rotated || !m.k_positions.empty())
    validate_ids(m.k_positions, p.S, "pos.mrope.k_positions", "S");
  if (t.transform) fail("attention: two q/k transforms are on; at most one is allowed");
  t.transform = std::make_unique<mrope_transform>(
      m, std::move(component), m.q_positions,
      m.keys_rotated ? std::span<const int64_t>{} : m.k_positions);
  t.transform->keys_transformed = m.keys_rotated;
}

template <typename Real>
std::unique_ptr<qk_transform> make_mrope_key_transform(const attention_position<Real>& pos,
                                                       int64_t D, const char* who) {
  const attention_mrope& m = pos.mrope;
  if (!m.freqs) return nullptr;
  auto component = mrope_validate(m, D, who);
  return std::make_unique<mrope_transform>(m, std::move(component), std::span<const int64_t>{},
                                           std::span<const int64_t>{});
}

// What the declaration of mrope points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(mrope, p.mrope.freqs != nullptr)
extern const scheme_impl mrope_impl;
const scheme_impl mrope_impl = {POSENC_BOTH(mrope_on), POSENC_BOTH(add_mrope_terms),
                                POSENC_BOTH(make_mrope_key_transform), POSENC_NONE};

}  // namespace posenc::detail
