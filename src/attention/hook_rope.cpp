// RoPE on q and k (Su et al. 2021): the engine's hook 1 (q' = a R(qpos) q, k' = a R(kpos) k;
// its transpose a R^T, the rotation with the sine negated, is the backward), and the model's
// hook: half layout, rotary width = head dim, exact angles.
#include <cmath>

#include <fmt/ranges.h>

#include "hooks.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

// Hook 1: rope_apply at the given positions; transpose = rope_apply's inverse (a R^T).
class rope_transform final : public qk_transform {
 public:
  explicit rope_transform(const attention_rope& r) : r_(r) {}
  // The same rotation for queries and keys.
  void apply(std::span<const int64_t> pos, float* x, int64_t n, int64_t H, int64_t D, bool,
             bool transpose) const override {
    rope_apply(*r_.freqs, r_.layout, r_.angle, pos, x, n, H, D, transpose);
  }
  void apply(std::span<const int64_t> pos, double* x, int64_t n, int64_t H, int64_t D, bool,
             bool transpose) const override {
    rope_apply(*r_.freqs, r_.layout, r_.angle, pos, x, n, H, D, transpose);
  }
  // Row form: the table is rope_cos_sin's (cos | sin) of the position and the row kernel
  // rope_rotate, the two steps rope_apply takes per token, so the bits are rope_apply's. Not
  // offered when POSENC_REFERENCE selects rope_apply's plain loops.
  int64_t row_table_size() const override {
    return rope_reference_selected() ? 0 : r_.freqs->rotary_dim;
  }
  void fill_row_table(int64_t, int64_t pos, bool, float* table) const override {
    rope_cos_sin(*r_.freqs, r_.angle, pos, table, table + r_.freqs->rotary_dim / 2);
  }
  void apply_rows(const float* table, bool, float* x, int64_t H, int64_t stride) const override {
    const int64_t R = r_.freqs->rotary_dim;
    rope_rotate(r_.layout, R, table, table + R / 2, x, H, stride, false);
  }

 private:
  attention_rope r_;
};

void validate_rope(const attention_rope& r, int64_t D, const char* who) {
  rope_validate(*r.freqs);
  if (r.freqs->rotary_dim > D)
    fail("{}rope: rotary_dim must be <= D = {}, got {}", who, D, r.freqs->rotary_dim);
  if (r.freqs->head_dim != 0 && r.freqs->head_dim != D)
    fail("{}rope: head_dim must equal the attention head dim D = {}, got {}", who, D,
         r.freqs->head_dim);
}

template <typename S>
class rope_hook final : public position_hook<S> {
 public:
  rope_hook(rope_freqs f, std::vector<named_scheme> pairs)
      : freqs_(std::move(f)), pairs_(std::move(pairs)) {}
  pos_scheme scheme() const override { return pos_scheme::rope; }
  attention_position<S> attention(const S* const*) const override {
    attention_position<S> p;
    p.rope.freqs = &freqs_;
    p.rope.layout = rope_layout::half;
    p.rope.angle = rope_angle::exact;
    p.named = pairs_;
    return p;
  }

 private:
  rope_freqs freqs_;
  std::vector<named_scheme> pairs_;  // per-pair RoPE schemes (position_options::rope_pairs)
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_rope_hook(const position_options& o,
                                                 const position_shape& shape) {
  std::vector<std::string> on = {"rope"};
  for (const named_scheme& n : o.rope_pairs) {
    const scheme_decl& d = scheme_decl_of(n.name);
    if (!d.pairs) {
      std::vector<std::string> names;
      for (const scheme_decl* x : named_scheme_decls())
        if (x->pairs) names.push_back(x->name);
      fail("rope_pairs: {} does not place RoPE per pair; the schemes that do are {}", n.name,
           fmt::join(names, ", "));
    }
    (void)named_scheme_args(d, n.params, shape.n_heads);
    on.push_back(n.name);
  }
  check_scheme_combination(on);
  return std::make_unique<rope_hook<S>>(lab_rope_freqs(o, shape, "rope"), o.rope_pairs);
}

rope_freqs lab_rope_freqs(const position_options& o, const position_shape& shape, const char* who) {
  const int64_t D = shape.d_model / shape.n_heads;
  if (D % 2 != 0) fail("{} needs an even head dim d_model / n_heads, got {}", who, D);
  if (o.rope) {
    rope_config rc = *o.rope;
    if (rc.head_dim == 0) rc.head_dim = D;
    if (rc.rotary_dim == 0) rc.rotary_dim = D;
    if (rc.head_dim != D)
      fail("{}: the RoPE config's head_dim must be the model's head dim {}, got {}", who, D,
           rc.head_dim);
    if (o.rope_seq_len < 0) fail("rope_seq_len must be >= 0, got {}", o.rope_seq_len);
    return rope_frequencies(rc, o.rope_seq_len);
  }
  if (!(o.rope_theta > 1) || !std::isfinite(o.rope_theta))
    fail("rope_theta must be finite and > 1, got {}", o.rope_theta);
  rope_config rc;
  rc.head_dim = D;
  rc.rotary_dim = D;
  rc.theta = o.rope_theta;
  return rope_frequencies(rc);
}

template <typename Real>
void add_rope_terms(const attention_params<Real>& p, const attention_plan&,
                    const attention_grads<Real>*, engine_terms<Real>& t) {
  const attention_rope& r = p.pos.rope;
  if (!r.freqs) return;
  validate_rope(r, p.D, "");
  if (t.transform) fail("attention: two q/k transforms are on; at most one is allowed");
  t.transform = std::make_unique<rope_transform>(r);
  t.transform->keys_transformed = r.keys_rotated;
}

template <typename Real>
std::unique_ptr<qk_transform> make_rope_key_transform(const attention_position<Real>& pos,
                                                      int64_t D, const char* who) {
  const attention_rope& r = pos.rope;
  if (!r.freqs) return nullptr;
  validate_rope(r, D, who);
  return std::make_unique<rope_transform>(r);
}

// What the declaration of rope points at (schemes.cpp; hooks.hpp, scheme_impl).
POSENC_SCHEME_ON(rope, p.rope.freqs != nullptr)
extern const scheme_impl rope_impl;
const scheme_impl rope_impl = {POSENC_BOTH(rope_on), POSENC_BOTH(add_rope_terms),
                               POSENC_BOTH(make_rope_key_transform), POSENC_BOTH(make_rope_hook)};

}  // namespace posenc::detail
