// A query temperature by position as the engine's hook 1 on queries (keys unchanged):
//   q' = s(qpos) A_q(qpos) q,  s(p) = log(floor((p + offset) / floor_scale) + 1) * attn_scale + 1,
// A_q the call's other hook-1 transform (RoPE, xPos, M-RoPE) or the identity. Two models use it:
//   Llama 4 (Meta 2025, "The Llama 4 herd"; transformers' Llama4TextAttention,
//     attn_temperature_tuning): offset 1, on the NoPE layers, where nothing else maps q;
//   Ministral 3 and Mistral 4 (transformers' get_llama_4_attn_scale, rope_parameters'
//     llama_4_scaling_beta): offset 0, floor_scale = original_max_position_embeddings,
//     attn_scale = beta, on every layer after RoPE.
// s is diagonal, so the transpose (the backward) is A_q^T s: dq = A_q^T (s dq').
#include <cmath>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc {

double attention_temperature_scale(const attention_temperature& t, int64_t pos) {
  return std::log(std::floor((static_cast<double>(pos) + t.position_offset) / t.floor_scale) +
                  1.0) *
             t.attn_scale +
         1.0;
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

}  // namespace

template <typename Real>
void add_temperature_terms(const attention_params<Real>& p, const attention_plan&,
                           const attention_grads<Real>*, engine_terms<Real>& t) {
  const attention_temperature& a = p.pos.temperature;
  if (a.floor_scale == 0 && a.attn_scale == 0) return;
  if (!std::isfinite(a.floor_scale) || a.floor_scale <= 0)
    fail("pos.temperature.floor_scale must be finite and > 0, got {}", a.floor_scale);
  if (!std::isfinite(a.attn_scale) || a.attn_scale < 0)
    fail("pos.temperature.attn_scale must be finite and >= 0, got {}", a.attn_scale);
  if (!std::isfinite(a.position_offset) || a.position_offset < 0)
    fail(
        "pos.temperature.position_offset must be finite and >= 0 (Llama 4: 1, Ministral 3: 0), "
        "got {}",
        a.position_offset);
  // Called after the other hook-1 schemes (position_hook.cpp): it wraps theirs.
  t.transform = std::make_unique<temperature_transform>(a, p.D, std::move(t.transform));
}

// What the declaration of temperature points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(temperature, p.temperature.on())
extern const scheme_impl temperature_impl;
const scheme_impl temperature_impl = {POSENC_BOTH(temperature_on),
                                      POSENC_BOTH(add_temperature_terms), POSENC_NONE, POSENC_NONE};

}  // namespace detail
}  // namespace posenc
