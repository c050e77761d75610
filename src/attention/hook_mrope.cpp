// M-RoPE (Wang et al. 2024, "Qwen2-VL", sec. 2.1 "Multimodal Rotary Position Embedding"): a q/k
// transform reached by name (hook 1), its switch the frequencies of an M-RoPE config
// (named_scheme::freqs), its parameters the section, the components' layout, the pair layout, the
// angles and the ids. Every token has three position ids (temporal, height, width), and rotary
// pair i turns by omega_i times the id of its component c_i (mrope_components: contiguous
// sections as in Qwen2-VL, or Qwen3-VL's interleaved layout):
//   q'_t = a R(q_ids[:, t]) q_t,  k'_s = a R(k_ids[:, s]) k_s,
// R acting pair by pair. The map is mrope_apply itself, so the engine's result is bit for bit
// mrope_apply followed by attention without a position scheme; its transpose (the backward,
// dq = a R^T dq') is mrope_apply's inverse, the rotation with the sine negated. The ids are the
// transform's own (3 per token): the engine's 1-D positions are not read.
#include <cmath>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"

namespace posenc::detail {
namespace {

class mrope_transform final : public qk_transform {
 public:
  // q_ids (3, T) and k_ids (3, S) row-major; either may be empty when that side is not mapped
  // (keys from a cache; a cache's transform for appended keys).
  mrope_transform(const rope_parts& m, std::vector<int> component, std::span<const int64_t> q_ids,
                  std::span<const int64_t> k_ids)
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
  rope_parts m_;
  std::vector<int> component_;               // (R/2,) c_i in {0, 1, 2}
  bool present_[3] = {false, false, false};  // which components have pairs
  std::span<const int64_t> q_ids_, k_ids_;
};

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

// args: temporal, height, width pairs, interleaved, layout, angle (schemes.cpp's order; the
// choices are the enums' values).
void mrope_check(std::span<const double> a, int64_t) {
  for (int c = 0; c < 3; ++c)
    if (a[c] < 0)
      fail("{} must be >= 0, got {}",
           c == 0   ? "mrope_temporal"
           : c == 1 ? "mrope_height"
                    : "mrope_width",
           a[c]);
}

// The transform, after checking the frequencies against the head dim D and the section against
// the rotary pairs. The ids are checked by the engine's call (transform_args_for: their shapes)
// and here (their values); the query ids are (3, T) and the key ids (3, S) or empty (the keys
// given rotated, or a cache's transform, which takes its keys' ids with with_key_ids).
std::unique_ptr<qk_transform> mrope_make(const transform_args& a, std::unique_ptr<qk_transform>) {
  if (!a.freqs)
    fail("mrope: its switch needs the frequencies of an M-RoPE config (freqs), got none");
  try {
    rope_validate(*a.freqs);
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string("mrope: ") + e.what());
  }
  if (a.freqs->rotary_dim > a.D)
    fail("mrope: rotary_dim must be <= D = {}, got {}", a.D, a.freqs->rotary_dim);
  if (a.freqs->head_dim != 0 && a.freqs->head_dim != a.D)
    fail("mrope: head_dim must equal the attention head dim D = {}, got {}", a.D,
         a.freqs->head_dim);
  const std::array<int64_t, 3> section = {static_cast<int64_t>(a.args[0]),
                                          static_cast<int64_t>(a.args[1]),
                                          static_cast<int64_t>(a.args[2])};
  std::vector<int> component;
  try {
    component = mrope_components(section, a.args[3] != 0, a.freqs->rotary_dim / 2);
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string("mrope section: ") + e.what());
  }
  const rope_parts m = {a.freqs, static_cast<rope_layout>(static_cast<int>(a.args[4])),
                        static_cast<rope_angle>(static_cast<int>(a.args[5]))};
  const std::span<const int64_t> q = a.ids[0], k = a.ids[1];
  if (!q.empty()) validate_ids(q, static_cast<int64_t>(q.size()) / 3, "mrope_q_ids", "T");
  if (!k.empty()) validate_ids(k, static_cast<int64_t>(k.size()) / 3, "mrope_k_ids", "S");
  return std::make_unique<mrope_transform>(m, std::move(component), q, k);
}

}  // namespace

// What the declaration of mrope points at (schemes.cpp).
extern const named_transform mrope_transform_decl;
const named_transform mrope_transform_decl = {.check = &mrope_check, .make = &mrope_make};

}  // namespace posenc::detail

namespace posenc {

named_scheme mrope_scheme(const rope_freqs& f, const std::array<int64_t, 3>& section,
                          bool interleaved, rope_layout layout, rope_angle angle,
                          std::span<const int64_t> q_ids, std::span<const int64_t> k_ids) {
  named_scheme n{"mrope",
                 {{"mrope_temporal", static_cast<double>(section[0])},
                  {"mrope_height", static_cast<double>(section[1])},
                  {"mrope_width", static_cast<double>(section[2])},
                  {"mrope_interleaved", interleaved ? 1.0 : 0.0},
                  {"mrope_layout", static_cast<double>(layout)},
                  {"mrope_angle", static_cast<double>(angle)}},
                 {},
                 &f};
  const auto n_of = [](std::span<const int64_t> ids) {
    return static_cast<int64_t>(ids.size()) / 3;
  };
  if (!q_ids.empty()) n.tensors.push_back({"mrope_q_ids", {3, n_of(q_ids)}, {}, {}, q_ids});
  if (!k_ids.empty()) n.tensors.push_back({"mrope_k_ids", {3, n_of(k_ids)}, {}, {}, k_ids});
  return n;
}

named_scheme mrope_query_ids(std::span<const int64_t> q_ids) {
  return {
      "mrope", {}, {{"mrope_q_ids", {3, static_cast<int64_t>(q_ids.size()) / 3}, {}, {}, q_ids}}};
}

}  // namespace posenc
