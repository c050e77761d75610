// A query temperature by position, a q/k transform reached by name that maps queries alone (hook
// 1; keys unchanged) and wraps the call's other one (declared scheme_query_scale):
//   q' = s(qpos) A_q(qpos) q,  s(p) = log(floor((p + offset) / floor_scale) + 1) * attn_scale + 1,
// A_q the call's other hook-1 transform (RoPE, M-RoPE, xPos) or the identity. Its switch is
// attn_temperature_tuning, its parameters floor_scale, attn_scale and floor_offset (the offset).
// Two models use it:
//   Llama 4 (Meta 2025, "The Llama 4 herd"; transformers' Llama4TextAttention,
//     attn_temperature_tuning): offset 1, on the NoPE layers, where nothing else maps q;
//   Ministral 3 and Mistral 4 (transformers' get_llama_4_attn_scale, rope_parameters'
//     llama_4_scaling_beta): offset 0, floor_scale = original_max_position_embeddings,
//     attn_scale = beta, on every layer after RoPE.
// s is diagonal, so the transpose (the backward) is A_q^T s: dq = A_q^T (s dq').
#include <cmath>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"

namespace posenc {

double attention_temperature_scale(const attention_temperature& t, int64_t pos) {
  return std::log(std::floor((static_cast<double>(pos) + t.position_offset) / t.floor_scale) +
                  1.0) *
             t.attn_scale +
         1.0;
}

named_scheme temperature_scheme(const attention_temperature& t) {
  return {"temperature",
          {{"floor_scale", t.floor_scale},
           {"attn_scale", t.attn_scale},
           {"floor_offset", t.position_offset}}};
}

namespace detail {
namespace {

class temperature_transform final : public qk_transform {
 public:
  // inner: the call's other hook-1 transform, or null.
  temperature_transform(const attention_temperature& t, int64_t D,
                        std::unique_ptr<qk_transform> inner)
      : t_(t), d_(D), inner_(std::move(inner)) {
    // Keys are not scaled: with no inner transform, keys from a cache need nothing either.
    keys_transformed = inner_ ? inner_->keys_transformed : true;
  }
  void apply(std::span<const int64_t> pos, float* x, int64_t n, int64_t H, int64_t D, bool key,
             bool transpose) const override {
    run(pos, x, n, H, D, key, transpose);
  }
  void apply(std::span<const int64_t> pos, double* x, int64_t n, int64_t H, int64_t D, bool key,
             bool transpose) const override {
    run(pos, x, n, H, D, key, transpose);
  }
  int64_t ids_per_token() const override { return inner_ ? inner_->ids_per_token() : 1; }
  // Keys only (a KV cache's appended keys): the inner transform's, as keys are not scaled.
  std::unique_ptr<qk_transform> with_key_ids(std::span<const int64_t> ids,
                                             int64_t n) const override {
    return inner_ ? inner_->with_key_ids(ids, n) : nullptr;
  }
  // Row form: the inner table, then s as one float (1 for keys); offered when the inner
  // transform offers one (or there is none).
  int64_t row_table_size() const override {
    if (!inner_) return 1;
    const int64_t r = inner_->row_table_size();
    return r == 0 ? 0 : r + 1;
  }
  void fill_row_table(int64_t token, int64_t pos, bool key, float* table) const override {
    const int64_t r = inner_ ? inner_->row_table_size() : 0;
    if (inner_) inner_->fill_row_table(token, pos, key, table);
    table[r] = key ? 1.0f : static_cast<float>(attention_temperature_scale(t_, pos));
  }
  void apply_rows(const float* table, bool key, float* x, int64_t H,
                  int64_t stride) const override {
    const int64_t r = inner_ ? inner_->row_table_size() : 0;
    if (inner_) inner_->apply_rows(table, key, x, H, stride);
    const float s = table[r];
    if (key || s == 1.0f) return;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < d_; ++d) x[h * stride + d] *= s;
  }

 private:
  // x (n, H, D). Forward: A then s; transpose: s then A^T. The scale is rounded once to the
  // element type; keys are not scaled.
  template <typename Real>
  void run(std::span<const int64_t> pos, Real* x, int64_t n, int64_t H, int64_t D, bool key,
           bool transpose) const {
    if (inner_ && !transpose) inner_->apply(pos, x, n, H, D, key, false);
    if (!key) scale(pos, x, n, H * D);
    if (inner_ && transpose) inner_->apply(pos, x, n, H, D, key, true);
  }
  template <typename Real>
  void scale(std::span<const int64_t> pos, Real* x, int64_t n, int64_t row) const {
    for (int64_t t = 0; t < n; ++t) {
      const Real s = static_cast<Real>(attention_temperature_scale(t_, pos[t]));
      if (s == Real(1)) continue;
      Real* r = x + t * row;
      for (int64_t d = 0; d < row; ++d) r[d] *= s;
    }
  }
  attention_temperature t_;
  int64_t d_;  // head dim: apply_rows scales D elements of each row
  std::unique_ptr<qk_transform> inner_;
};

// The temperature of args (floor_scale, attn_scale, floor_offset), checked; errors name them.
attention_temperature temperature_of(std::span<const double> a) {
  const attention_temperature t{a[0], a[1], a[2]};
  if (!std::isfinite(t.floor_scale) || t.floor_scale <= 0)
    fail("floor_scale must be finite and > 0, got {}", t.floor_scale);
  if (!std::isfinite(t.attn_scale) || t.attn_scale < 0)
    fail("attn_scale must be finite and >= 0, got {}", t.attn_scale);
  if (!std::isfinite(t.position_offset) || t.position_offset < 0)
    fail("floor_offset must be finite and >= 0 (Llama 4: 1, Ministral 3: 0), got {}",
         t.position_offset);
  return t;
}

void temperature_check(std::span<const double> a, int64_t) {
  (void)temperature_of(a);
}

// Called after the other hook-1 schemes (declaration order): it wraps theirs.
std::unique_ptr<qk_transform> temperature_make(const transform_args& a,
                                               std::unique_ptr<qk_transform> inner) {
  return std::make_unique<temperature_transform>(temperature_of(a.args), a.D, std::move(inner));
}

// s grows with the position (floor and log are monotone): s(P) is its largest on 0 .. P.
double temperature_query_scale(std::span<const double> a, int64_t P) {
  return attention_temperature_scale(temperature_of(a), std::max<int64_t>(P, 0));
}

// The case tables and checks: floor_scale 4 and attn_scale 0.5, so that s varies within a short
// call's positions (1 to log 4 / 2 + 1 over 0 .. 12).
std::vector<std::pair<std::string, double>> temperature_case_params(int64_t, int64_t) {
  return {{"floor_scale", 4}, {"attn_scale", 0.5}};
}

// On queries alone: q'_n . k'_m = s(n) q_n . k_m; the score bound takes s through query_scale.
double temperature_amplitude(std::span<const double>, int64_t, int64_t, bool) {
  return 1;
}

// s rounded once from a log in double: a few ulp.
double temperature_coef_error(std::span<const double>, int64_t) {
  return 8 * 0x1p-53;
}

}  // namespace

extern const named_transform temperature_transform_decl;
const named_transform temperature_transform_decl = {
    .check = &temperature_check,
    .make = &temperature_make,
    .relative = false,
    .query_scale = &temperature_query_scale,
    .case_params = &temperature_case_params,
    .amplitude = &temperature_amplitude,
    .coef_error = &temperature_coef_error,
};

}  // namespace detail
}  // namespace posenc
