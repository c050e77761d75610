// RoPE on q and k (Su et al. 2021): a q/k transform reached by name (hook 1; q' = a R(qpos) q,
// k' = a R(kpos) k, its transpose a R^T, the rotation with the sine negated, the backward), its
// switch the frequencies of a RoPE config (named_scheme::freqs), its parameters the pair layout
// and the angle arithmetic; and the model's hook: half layout, rotary width = head dim, exact
// angles.
#include <cmath>

#include <fmt/ranges.h>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"

namespace posenc::detail {
namespace {

// Hook 1: rope_apply at the given positions; transpose = rope_apply's inverse (a R^T).
class rope_transform final : public qk_transform {
 public:
  explicit rope_transform(const rope_parts& r) : r_(r) {}
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
  rope_parts r_;
};

// The layout and angle choices are the enums' values (schemes.cpp: "half|interleaved",
// "exact|f32|hf_f32|ggml_f32").
rope_parts parts_of(const rope_freqs* f, std::span<const double> args) {
  return {f, static_cast<rope_layout>(static_cast<int>(args[0])),
          static_cast<rope_angle>(static_cast<int>(args[1]))};
}

void rope_check(std::span<const double>, int64_t) {}  // the choices are checked as declared

std::unique_ptr<qk_transform> rope_make(const transform_args& a, std::unique_ptr<qk_transform>) {
  if (!a.freqs) fail("rope: its switch needs the frequencies of a RoPE config (freqs), got none");
  rope_validate(*a.freqs);
  if (a.freqs->rotary_dim > a.D)
    fail("rope: rotary_dim must be <= D = {}, got {}", a.D, a.freqs->rotary_dim);
  if (a.freqs->head_dim != 0 && a.freqs->head_dim != a.D)
    fail("rope: head_dim must equal the attention head dim D = {}, got {}", a.D, a.freqs->head_dim);
  return std::make_unique<rope_transform>(parts_of(a.freqs, a.args));
}

template <typename S>
class rope_hook final : public position_hook<S> {
 public:
  rope_hook(rope_freqs f, std::vector<named_scheme> pairs)
      : freqs_(std::move(f)), pairs_(std::move(pairs)) {}
  pos_scheme scheme() const override { return pos_scheme::rope; }
  attention_position<S> attention(const S* const*) const override {
    attention_position<S> p;
    p.named.push_back(rope_scheme(freqs_));
    p.named.insert(p.named.end(), pairs_.begin(), pairs_.end());
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

rope_parts rope_of(std::span<const named_scheme> named) {
  for (const named_scheme& n : named)
    if (n.name == "rope")
      return parts_of(n.freqs, named_scheme_args(scheme_decl_of("rope"), n.params, 1));
  return {};
}

// What the declaration of rope points at (schemes.cpp): its transform, and the model's hook
// (hooks.hpp, scheme_impl).
extern const named_transform rope_transform_decl;
const named_transform rope_transform_decl = {
    .check = &rope_check, .make = &rope_make, .rotation = true};
extern const scheme_impl rope_impl;
const scheme_impl rope_impl = {POSENC_BOTH(make_rope_hook)};

}  // namespace posenc::detail

namespace posenc {

named_scheme rope_scheme(const rope_freqs& f, rope_layout layout, rope_angle angle) {
  return {
      "rope",
      {{"rope_layout", static_cast<double>(layout)}, {"rope_angle", static_cast<double>(angle)}},
      {},
      &f};
}

}  // namespace posenc
