// src/attention/hooks.hpp (private): what each scheme's file src/attention/hook_<scheme>.cpp
// registers (scheme_impl, which its declaration in schemes.cpp points at) for the registry in
// position_hook.cpp, and what the hook files share (the RoPE family's lab frequencies, the
// offset table of a bias of the offset alone, softplus and sigmoid).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "attention_plan.hpp"
#include "engine_terms.hpp"
#include "posenc/attention/position_hook.hpp"
#include "posenc/attention/schemes.hpp"

namespace posenc::detail {

// What the hook file of a scheme the model applies registers, and its declaration points at
// (scheme_decl::impl, schemes.cpp): the model's view of it (position_hook: tensors, input side,
// the attention's schemes), for the schemes with a pos_scheme of their own (position_hook.hpp:
// the input-side ones, RoPE, iRoPE and NoPE). The registry (position_hook.cpp) walks the
// declarations. The engine sees every scheme through its declaration's named_bias / named_pairs /
// named_transform (named_schemes.cpp).
struct scheme_impl {
  std::unique_ptr<position_hook<float>> (*hook_f32)(const position_options& o,
                                                    const position_shape& shape);
  std::unique_ptr<position_hook<double>> (*hook_f64)(const position_options& o,
                                                     const position_shape& shape);
};

// In a hook file: POSENC_BOTH(f) is f's float and double instances, the pair of a scheme_impl.
// NOLINTNEXTLINE(bugprone-macro-parentheses): f names a function template, not an expression
#define POSENC_BOTH(f) &f<float>, &f<double>

// The call's RoPE (the scheme that per-pair schemes ride on, and whose rotation a KV cache's
// position edits turn by): its frequencies (null when RoPE is off), layout and angles, read from
// its entry in pos.named (hook_rope.cpp).
struct rope_parts {
  const rope_freqs* freqs = nullptr;
  rope_layout layout = rope_layout::half;
  rope_angle angle = rope_angle::exact;
};
rope_parts rope_of(std::span<const named_scheme> named);

// The hook of a scheme reached by name (named_schemes.cpp), for every such scheme.
template <typename S>
std::unique_ptr<position_hook<S>> make_named_hook(pos_scheme id, const scheme_decl& d,
                                                  const position_options& o,
                                                  const position_shape& shape);
// The engine terms of the scheme reached by name d when p.pos.named has it (named_schemes.cpp);
// check_named: p.pos.named names such schemes, each once, and every gradient of g->named a
// learned tensor of one of them.
template <typename Real>
void add_named_terms(const attention_params<Real>& p, const attention_plan& pl,
                     const attention_grads<Real>* g, const scheme_decl& d, engine_terms<Real>& t);
template <typename Real>
void check_named(const attention_params<Real>& p, const attention_grads<Real>* g);

// For a KV cache that stores keys after hook 1 (kv_cache.cpp):
//   make_key_transform        pos's hook 1 alone, validated against the head dim D (`who`
//                             prefixes the error); null = identity. Built in position_hook.cpp
//                             from the q/k transform of pos.named (not a query scale).
//   position_for_cached_keys  the position of a call against the cache's keys: `call` with
//                             the cache's hook 1, marked as already applied to keys; an error
//                             when `call` sets a different hook 1 of its own. query_ids: (rows,
//                             T) ids of the call's queries for a transform with rows > 1 ids per
//                             token (M-RoPE), used when the call gives none.
template <typename Real>
std::unique_ptr<qk_transform> make_key_transform(const attention_position<Real>& pos, int64_t D,
                                                 const char* who);
template <typename Real>
attention_position<Real> position_for_cached_keys(attention_position<Real> call,
                                                  const attention_position<Real>& cache,
                                                  std::span<const int64_t> query_ids);
// Shared by the lab hooks of the RoPE family (rope, irope): the model's frequencies, half layout,
// rotary width = head dim = d_model / n_heads, theta = rope_theta; or, with o.rope set, that
// config's frequencies at seq_len o.rope_seq_len (head_dim and rotary_dim 0 meaning D). `who`
// names the scheme in the errors (an odd head dim, a theta that is not finite and > 1, a
// config whose head_dim is not D).
rope_freqs lab_rope_freqs(const position_options& o, const position_shape& shape, const char* who);

// Hook 2b's per-call table of a bias that depends on the offset r = kpos - qpos alone (the
// offset-only biases reached by name): per head h, value(h, r) rounded once to Real at
// every visible offset r in [lo, hi] (visible_offset_range), where that is at most 2^22 entries. A
// row of consecutive keys adds a slice of it (slice, add_slice), with the bits of value(). Empty
// when nothing is visible or the range is too long: the caller then takes value() itself.
template <typename Real>
struct offset_table {
  int64_t lo = 0, hi = 0, span = 0;
  std::vector<Real> lut;  // (Hq, span): lut[h * span + (r - lo)]

  // Sizes the table for the call's visible offsets: false (and empty) when nothing is visible or
  // the range is too long.
  bool size_for(const attention_plan& pl, int64_t Hq) {
    if (!visible_offset_range(pl, int64_t{1} << 62, &lo, &hi)) return false;  // nothing visible
    // (unsigned: the offsets span up to 2^63)
    if (static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) >= uint64_t{1} << 22 ||
        (hi - lo + 1) * Hq > (int64_t{1} << 22))
      return false;
    span = hi - lo + 1;
    lut.resize(static_cast<size_t>(Hq * span));
    return true;
  }
  // Entry (h, r) = value(h, r) rounded once to Real, after size_for.
  template <typename F>
  void fill(int64_t Hq, F value) {
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t r = lo; r <= hi; ++r) lut[h * span + (r - lo)] = static_cast<Real>(value(h, r));
  }
  template <typename F>
  void build(const attention_plan& pl, int64_t Hq, F value) {
    if (size_for(pl, Hq)) fill(Hq, value);
  }
  bool holds(int64_t r) const { return !lut.empty() && r >= lo && r <= hi; }
  // Head h's entries for the n consecutive offsets from r0, or nullptr when any is outside.
  const Real* slice(int64_t h, int64_t r0, int64_t n) const {
    return n > 0 && holds(r0) && holds(r0 + n - 1) ? lut.data() + h * span + (r0 - lo) : nullptr;
  }
};

// log(1 + e^a) without overflow, and its derivative sigmoid(a), also without overflow (the
// parameter maps of Kerple and FIRE).
inline double softplus(double a) {
  return a > 0 ? a + std::log1p(std::exp(-a)) : std::log1p(std::exp(a));
}
inline double sigmoid(double a) {
  return a >= 0 ? 1 / (1 + std::exp(-a)) : std::exp(a) / (1 + std::exp(a));
}

}  // namespace posenc::detail
