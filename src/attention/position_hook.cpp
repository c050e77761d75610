// The registry of position hooks: names, the model's factories, and the engine's terms, each
// walked over the declarations (schemes.cpp), which point at what each hook file registers
// (hooks.hpp, scheme_impl). No scheme is named here but in pos_scheme's names.
#include "posenc/attention/position_hook.hpp"

#include "posenc/attention/schemes.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <type_traits>

#include "hooks.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"

namespace posenc {
namespace {

constexpr const char* k_names[] = {"nope", "sinusoidal", "learned", "rope", "irope"};
static_assert(std::size(k_names) == static_cast<size_t>(pos_scheme::count));

// The schemes reached by name that a model trains with: the score biases and the q/k transforms
// (a per-pair RoPE scheme, Self-Extend or DCA, is applied at inference over a RoPE model, not
// trained with).
const std::vector<const scheme_decl*>& model_named_decls() {
  static const std::vector<const scheme_decl*> out = [] {
    std::vector<const scheme_decl*> v;
    for (const scheme_decl* d : named_scheme_decls())
      if (d->named || (d->transform && !(d->points & scheme_query_scale))) v.push_back(d);
    return v;
  }();
  return out;
}

}  // namespace

int pos_scheme_count() {
  return static_cast<int>(pos_scheme::count) + static_cast<int>(model_named_decls().size());
}

const char* pos_scheme_name(pos_scheme s) {
  const int i = static_cast<int>(s), n = static_cast<int>(pos_scheme::count);
  if (i >= 0 && i < n) return k_names[i];
  if (i >= n && i < pos_scheme_count()) return model_named_decls()[i - n]->name;
  fail("pos_scheme {} is not a scheme (0 .. {})", i, pos_scheme_count() - 1);
}

pos_scheme pos_scheme_from_name(const std::string& name, const std::string& arg) {
  std::vector<std::string> names;
  for (int i = 0; i < pos_scheme_count(); ++i) {
    const auto s = static_cast<pos_scheme>(i);
    if (name == pos_scheme_name(s)) return s;
    names.push_back(pos_scheme_name(s));
  }
  fail("{} must be one of {}; got '{}'", arg, fmt::join(names, ", "), name);
}

template <typename S>
std::unique_ptr<position_hook<S>> make_position_hook(pos_scheme s, const position_options& o,
                                                     const position_shape& shape) {
  if (shape.n_heads < 1 || shape.d_model < 1 || shape.d_model % shape.n_heads != 0)
    fail("position hook: d_model = {} must be a positive multiple of n_heads = {}", shape.d_model,
         shape.n_heads);
  const int i = static_cast<int>(s), n = static_cast<int>(pos_scheme::count);
  if (i >= n && i < pos_scheme_count())
    return detail::make_named_hook<S>(s, *model_named_decls()[i - n], o, shape);
  if (i < 0 || i >= n) fail("position hook: unknown scheme {}", i);
  // The declaration's hook file registered the model's view (scheme_impl::hook_*).
  const scheme_decl& d = scheme_decl_of(k_names[i]);
  if constexpr (std::is_same_v<S, float>) {
    if (d.impl && d.impl->hook_f32) return d.impl->hook_f32(o, shape);
  } else {
    if (d.impl && d.impl->hook_f64) return d.impl->hook_f64(o, shape);
  }
  fail("position hook: {} registers no model hook", d.name);
}
template std::unique_ptr<position_hook<float>> make_position_hook<float>(pos_scheme,
                                                                         const position_options&,
                                                                         const position_shape&);
template std::unique_ptr<position_hook<double>> make_position_hook<double>(pos_scheme,
                                                                           const position_options&,
                                                                           const position_shape&);

namespace detail {

template <typename Real>
engine_terms<Real> make_engine_terms(const attention_params<Real>& p, const attention_plan& pl,
                                     const attention_grads<Real>* g) {
  // Which schemes may be on together follows from their declarations (schemes.hpp), checked
  // once here for every entry point, before any hook reads its member.
  check_scheme_combination(schemes_on(p.pos));
  engine_terms<Real> t;
  check_named(p, g);
  // Every declared scheme that is on adds its terms, in declaration order, through its
  // declaration's named_transform, named_bias or named_pairs. So q/k transforms come first, the
  // query temperature that wraps them, then the score biases, summed in declaration order,
  // Shaw's tables, CoPE's validation.
  for (const scheme_decl& d : scheme_decls())
    if (d.reached_by_name()) add_named_terms(p, pl, g, d, t);
  return t;
}

template <typename Real>
std::unique_ptr<qk_transform> make_key_transform(const attention_position<Real>& pos, int64_t D,
                                                 const char* who) {
  check_scheme_combination(schemes_on(pos));
  std::unique_ptr<qk_transform> t;
  for (const scheme_decl& d : scheme_decls()) {
    if (!d.transform || (d.points & scheme_query_scale)) continue;
    for (const named_scheme& n : pos.named) {
      if (n.name != d.name) continue;
      if (t) fail("{}two q/k transforms are on; at most one is allowed", who);
      try {
        std::vector<double> args;
        t = d.transform->make(transform_args_for(d, n, D, -1, -1, true, args), nullptr);
      } catch (const invalid_argument& e) {
        throw invalid_argument(std::string(who) + e.what());
      }
    }
  }
  return t;
}
template std::unique_ptr<qk_transform> make_key_transform(const attention_position<float>&, int64_t,
                                                          const char*);
template std::unique_ptr<qk_transform> make_key_transform(const attention_position<double>&,
                                                          int64_t, const char*);

// The cache's hook 1 (RoPE, M-RoPE, xPos) goes into the call, marked as applied to the keys; a
// call may leave it unset or repeat it. A query scale reached by name (Llama 4's
// temperature) maps queries only: the call's when it sets one, else the cache's.
template <typename Real>
attention_position<Real> position_for_cached_keys(attention_position<Real> call,
                                                  const attention_position<Real>& cache,
                                                  std::span<const int64_t> query_ids) {
  const char* who = "attention_forward_cached";
  // A q/k transform: the cache's, which the call may repeat with the same parameters (defaults
  // filled) and frequencies but not change; the call's query ids ("ids" of shape (.., T)) when it
  // gives them, else query_ids; no key ids (the keys are transformed).
  std::vector<named_scheme> named;
  bool own_scale = false;
  std::vector<const named_tensor*> call_ids;
  for (const named_scheme& n : call.named) {
    const scheme_decl& d = scheme_decl_of(n.name);
    own_scale |= d.transform && (d.points & scheme_query_scale);
    if (!d.transform || (d.points & scheme_query_scale)) {
      named.push_back(n);
      continue;
    }
    const named_scheme* mine = nullptr;
    for (const named_scheme& k : cache.named)
      if (k.name == n.name) mine = &k;
    // Named with no parameters and no frequencies, with ids alone: the cache's at those ids.
    const bool ids_alone = n.params.empty() && !n.freqs && !n.tensors.empty();
    if (!mine || (!ids_alone &&
                  (named_scheme_args(d, n.params, 1) != named_scheme_args(d, mine->params, 1) ||
                   n.freqs != mine->freqs)))
      fail("{}: pos.named: {} must be left out or equal the cache's", who, n.name);
    for (const named_tensor& x : n.tensors) call_ids.push_back(&x);
  }
  bool takes_ids = false;
  for (const named_scheme& k : cache.named) {
    const scheme_decl& d = scheme_decl_of(k.name);
    if (!d.transform || ((d.points & scheme_query_scale) && own_scale)) continue;
    named_scheme m = k;
    m.tensors.clear();
    for (const auto& prm : d.params) {
      if (std::string(prm.dtype) != "ids" || !tensor_param_has_extent(prm, "T")) continue;
      takes_ids = true;
      const named_tensor* given = nullptr;
      for (const named_tensor* x : call_ids)
        if (x->name == prm.name) given = x;
      if (given) {
        m.tensors.push_back(*given);
        continue;
      }
      // query_ids is (rows, T): its shape is the declared one at T = size / (its size at T = 1).
      auto per = tensor_param_shape(prm, 1, 1, 1, 1, 1);
      int64_t rows = 1;
      for (int64_t e : per) rows *= e;
      const int64_t T = rows > 0 ? static_cast<int64_t>(query_ids.size()) / rows : 0;
      m.tensors.push_back({prm.name, tensor_param_shape(prm, T, 1, 1, 1, 1), {}, {}, query_ids});
    }
    named.push_back(std::move(m));
  }
  if (!call_ids.empty() && !takes_ids)
    fail("{}: pos.named: {} given but the cache's q/k transform takes no ids", who,
         call_ids[0]->name);
  call.named = std::move(named);
  call.keys_transformed = true;
  return call;
}
template attention_position<float> position_for_cached_keys(attention_position<float>,
                                                            const attention_position<float>&,
                                                            std::span<const int64_t>);
template attention_position<double> position_for_cached_keys(attention_position<double>,
                                                             const attention_position<double>&,
                                                             std::span<const int64_t>);

template engine_terms<float> make_engine_terms(const attention_params<float>&,
                                               const attention_plan&,
                                               const attention_grads<float>*);
template engine_terms<double> make_engine_terms(const attention_params<double>&,
                                                const attention_plan&,
                                                const attention_grads<double>*);

}  // namespace detail

position_options position_options_for_gradcheck() {
  position_options o;
  // irope on the two-layer gradient-check model: layer 1 is NoPE, with a temperature that
  // changes within the batch's positions (0 .. 12).
  o.irope_interval = 2;
  o.irope_floor_scale = 2;
  o.irope_attn_scale = 0.5;
  o.named_params = {{"fire_hidden", 4},
                    {"t5_num_buckets", 8},
                    {"t5_max_distance", 16},
                    {"shaw_clip", 2},
                    {"cope_npos", 6}};
  return o;
}

}  // namespace posenc
