// The schemes reached by name (named_schemes.hpp): their arguments, their engine term and their
// model hook, written once for all of them.
#include "named_schemes.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "hooks.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"

namespace posenc {

std::vector<double> named_scheme_args(const scheme_decl& d,
                                      std::span<const std::pair<std::string, double>> given,
                                      int64_t Hq) {
  if (!d.reached_by_name())
    fail("{} is not a scheme reached by name (attention_position::named)", d.name);
  std::vector<std::string> names;  // the numeric parameters after the switch
  std::vector<const scheme_param*> decl;
  for (size_t i = 1; i < d.params.size(); ++i)
    if (!is_tensor_param(d.params[i]) && std::string(d.params[i].dtype) != "ids")
      names.push_back(d.params[i].name), decl.push_back(&d.params[i]);
  std::vector<double> args(names.size());
  std::vector<bool> set(names.size(), false);
  for (const auto& [name, value] : given) {
    size_t i = 0;
    while (i < names.size() && names[i] != name) ++i;
    if (i == names.size())
      fail("{}: unknown parameter '{}'; its parameters are {}", d.name, name,
           names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
    if (set[i]) fail("{}: parameter {} given twice", d.name, name);
    set[i] = true;
    args[i] = value;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const scheme_param& p = *decl[i];
    if (p.choices) {
      const auto c = param_choices(p);
      if (!set[i]) args[i] = named_choice(d, p.name, p.def);
      if (!(args[i] >= 0 && args[i] < double(c.size()) && args[i] == std::floor(args[i])))
        fail("{} must be the index of one of {} (0 .. {}), got {}", p.name, fmt::join(c, ", "),
             c.size() - 1, args[i]);
      continue;
    }
    if (std::string(p.dtype) == "bool") {
      // 1 or 0; unset, the declared default: "True", "False", or "not causal" (-1, which the
      // term resolves by the call's causality: named_call::causal).
      if (!set[i]) args[i] = named_bool_default(p);
      if (!(args[i] == 0 || args[i] == 1 || (!set[i] && args[i] == -1)))
        fail("{} must be a bool (0 or 1), got {}", p.name, args[i]);
      continue;
    }
    if (!set[i]) args[i] = std::stod(p.def);
    if (std::string(p.dtype) == "int" &&
        (!std::isfinite(args[i]) || args[i] != std::floor(args[i]) || std::abs(args[i]) > 0x1p53))
      fail("{} must be an integer, got {}", p.name, args[i]);
  }
  if (d.named) {
    if (d.named->check) d.named->check(args, Hq);
  } else if (d.pairs) {
    d.pairs->check(args);
  } else {
    d.transform->check(args, 0);  // D is checked with the call
  }
  return args;
}

double named_bool_default(const scheme_param& p) {
  const std::string def = p.def;
  if (def == "not causal") return -1;
  if (def == "True" || def == "False") return def == "True" ? 1 : 0;
  fail("{}: a bool parameter's default must be True, False or not causal, got '{}'", p.name, def);
}

bool named_bool(double arg, bool causal) {
  return arg < 0 ? !causal : arg != 0;
}

std::vector<std::string> param_choices(const scheme_param& p) {
  std::vector<std::string> out;
  if (!p.choices) return out;
  std::string text = p.choices;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find('|', at);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

double named_choice(const scheme_decl& d, const std::string& param, const std::string& value) {
  for (const auto& p : d.params) {
    if (param != p.name) continue;
    const auto c = param_choices(p);
    if (c.empty()) fail("{}: parameter {} is not a choice of strings", d.name, param);
    for (size_t i = 0; i < c.size(); ++i)
      if (c[i] == value) return double(i);
    fail("{} must be {}, got '{}'", param, fmt::join(c, " or "), printable_bytes(value));
  }
  fail("{}: unknown parameter '{}'", d.name, param);
}

bool is_tensor_param(const scheme_param& p) {
  const std::string t = p.dtype;
  return t == "tensor" || t == "tensor64" || t == "bool | tensor64";
}

bool is_f64_tensor_param(const scheme_param& p) {
  const std::string t = p.dtype;
  return t == "tensor64" || t == "bool | tensor64";
}

bool is_optional_tensor_param(const scheme_param& p) {
  return std::string(p.dtype) == "bool | tensor64";
}

bool needs_tensors(const scheme_decl& d) {
  for (const auto& p : d.params)
    if (is_tensor_param(p) && !is_optional_tensor_param(p)) return true;
  return false;
}

bool is_tensor_scheme(const scheme_decl& d) {
  for (const auto& p : d.params)
    if (is_tensor_param(p)) return true;
  return false;
}

namespace {

// The symbols of a declared shape, "(Hq, W)" -> {"Hq", "W"}; throws when it is no tuple.
std::vector<std::string> shape_symbols(const scheme_param& p) {
  std::string text = p.shape;
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    fail("{}: declared shape '{}' is not a tuple of symbols", p.name, p.shape);
  text = text.substr(1, text.size() - 2);
  std::vector<std::string> syms;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    std::string sym = text.substr(at, end - at);
    sym.erase(0, sym.find_first_not_of(' '));
    sym.erase(sym.find_last_not_of(' ') + 1);
    at = end + 1;
    if (!sym.empty()) syms.push_back(sym);
  }
  return syms;
}

// The shape with each free extent -1.
std::vector<int64_t> shape_with_free(const scheme_param& p, int64_t T, int64_t S, int64_t Hq,
                                     int64_t Hkv, int64_t D) {
  return tensor_param_shape(p, T, S, Hq, Hkv, D, std::vector<int64_t>(shape_symbols(p).size(), -1));
}

}  // namespace

std::vector<int64_t> tensor_param_shape(const scheme_param& p, int64_t T, int64_t S, int64_t Hq,
                                        int64_t Hkv, int64_t D, std::span<const int64_t> given) {
  const auto syms = shape_symbols(p);
  std::vector<int64_t> out;
  for (size_t i = 0; i < syms.size(); ++i) {
    const std::string& sym = syms[i];
    if (sym.find_first_not_of("0123456789") == std::string::npos && sym.size() <= 9) {
      out.push_back(std::stoll(sym));  // a literal extent: (2, Hq)
      continue;
    }
    const std::pair<const char*, int64_t> known[] = {
        {"T", T}, {"S", S}, {"Hq", Hq}, {"Hkv", Hkv}, {"D", D}};
    bool found = false;
    for (const auto& [name, value] : known)
      if (sym == name) out.push_back(value), found = true;
    if (found) continue;
    // Any other symbol is the tensor's own extent (FIRE's width W = 3m + 3): the given shape's.
    if (given.empty())
      fail("{}: declared shape '{}' has the free extent '{}', which only the tensor given fixes",
           p.name, p.shape, sym);
    if (given.size() != syms.size())
      fail("{} must have shape {} ({} dimensions), got {} dimensions", p.name, p.shape, syms.size(),
           given.size());
    out.push_back(given[i]);
  }
  return out;
}

bool tensor_param_has_extent(const scheme_param& p, const std::string& symbol) {
  const auto syms = shape_symbols(p);
  return std::find(syms.begin(), syms.end(), symbol) != syms.end();
}

std::string tensor_param_shape_text(const scheme_param& p, int64_t T, int64_t S, int64_t Hq,
                                    int64_t Hkv, int64_t D) {
  const auto syms = shape_symbols(p);
  const auto shape = shape_with_free(p, T, S, Hq, Hkv, D);
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + (shape[i] == -1 ? syms[i] : std::to_string(shape[i]));
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::vector<int64_t> tensor_param_shape_for(const scheme_param& p, int64_t T, int64_t S, int64_t Hq,
                                            int64_t Hkv, int64_t D, int64_t count) {
  // The bound extents first (-1 for the free one), then the free one from count.
  auto shape = shape_with_free(p, T, S, Hq, Hkv, D);
  int64_t known = 1, free = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (free >= 0) fail("{}: declared shape '{}' has more than one free extent", p.name, p.shape);
      free = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (free >= 0) shape[free] = known > 0 ? count / known : 0;
  return shape;
}

namespace {

const detail::named_pairs& pairs_of(const scheme_decl& d) {
  if (!d.pairs) fail("{} does not place RoPE per pair (it is no scheme_rope_pairs scheme)", d.name);
  return *d.pairs;
}

}  // namespace

int rope_pairs_regions(const scheme_decl& d) {
  return pairs_of(d).regions;
}

int rope_pairs_region(const scheme_decl& d, std::span<const double> args, int64_t qpos,
                      int64_t kpos) {
  if (qpos < 0 || kpos < 0) fail("{}: positions must be >= 0, got {} and {}", d.name, qpos, kpos);
  return pairs_of(d).region(args, qpos, kpos);
}

const char* rope_pairs_region_name(const scheme_decl& d, int r) {
  const auto& x = pairs_of(d);
  if (r < 0 || r >= x.regions) fail("{}: region must be in [0, {}), got {}", d.name, x.regions, r);
  return x.region_names[r];
}

double rope_pairs_score_factor(const scheme_decl& d, std::span<const double> args, int64_t S) {
  const auto& x = pairs_of(d);
  return x.score_factor ? x.score_factor(args, S) : 1.0;
}

std::vector<std::pair<std::string, double>> rope_pairs_case_params(const scheme_decl& d) {
  const auto& x = pairs_of(d);
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 1; i < d.params.size() && i <= 3; ++i)
    out.emplace_back(d.params[i].name, x.case_args[i - 1]);
  return out;
}

bool rope_pairs_in_lab(const scheme_decl& d) {
  return d.pairs && pairs_of(d).lab_args;
}

std::vector<std::pair<std::string, double>> rope_pairs_lab_params(const scheme_decl& d, int64_t L) {
  const auto& x = pairs_of(d);
  if (!x.lab_args) fail("{} gives no parameters for the lab's extension preset", d.name);
  double a[3] = {0, 0, 0};
  x.lab_args(L, a);
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 1; i < d.params.size() && i <= 3; ++i)
    out.emplace_back(d.params[i].name, a[i - 1]);
  return out;
}

std::vector<std::pair<std::string, double>> hf_dca_scheme_params(const hf_dca_config& c) {
  const scheme_decl& d = scheme_decl_of("dca");
  // The declaration's parameters after its switch, in order (schemes.cpp, kDca).
  const double values[] = {double(c.chunk_size), double(c.local_size),
                           double(c.original_max_position_embeddings)};
  if (d.params.size() != 1 + std::size(values))
    fail("dca: the declaration has {} parameters, the config reader knows 3", d.params.size() - 1);
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < std::size(values); ++i) out.emplace_back(d.params[i + 1].name, values[i]);
  return out;
}

std::pair<int64_t, int64_t> rope_pairs_positions(const scheme_decl& d, std::span<const double> args,
                                                 int r, int64_t qpos, int64_t kpos) {
  const auto& x = pairs_of(d);
  if (r < 0 || r >= x.regions) fail("{}: region must be in [0, {}), got {}", d.name, x.regions, r);
  if (qpos < 0 || kpos < 0) fail("{}: positions must be >= 0, got {} and {}", d.name, qpos, kpos);
  return {x.query_pos(args, r, qpos), x.key_pos(args, r, kpos)};
}

namespace {

const detail::named_transform& transform_of(const scheme_decl& d) {
  if (!d.transform) fail("{} is no q/k transform reached by name", d.name);
  return *d.transform;
}

}  // namespace

std::vector<std::pair<std::string, double>> named_transform_case(const scheme_decl& d, int64_t lo,
                                                                 int64_t hi) {
  return transform_of(d).case_params(lo, hi);
}

double named_transform_amplitude(const scheme_decl& d, std::span<const double> args, int64_t lo,
                                 int64_t hi, bool causal) {
  return transform_of(d).amplitude(args, lo, hi, causal);
}

double named_transform_coef_error(const scheme_decl& d, std::span<const double> args, int64_t P) {
  return transform_of(d).coef_error(args, P);
}

bool named_path_scheme(const scheme_decl& d) {
  return d.named && d.named->path;
}

double named_path_score_bound(const scheme_decl& d, const std::vector<std::vector<double>>& tensors,
                              int64_t D, double qmax) {
  if (!named_path_scheme(d)) fail("{} runs no path of its own", d.name);
  return d.named->path->score_bound(tensors, D, qmax);
}

path_tiled_errors named_path_tiled_errors(const scheme_decl& d,
                                          const std::vector<std::vector<double>>& tensors,
                                          int64_t D, double qmax, double A, int64_t S, double u) {
  if (!named_path_scheme(d)) fail("{} runs no path of its own", d.name);
  const auto e = d.named->path->tiled_errors;
  return e ? e(tensors, D, qmax, A, S, u) : path_tiled_errors{};
}

template <typename Real>
bool qk_transform_on(const attention_position<Real>& pos) {
  for (const auto& n : pos.named) {
    const scheme_decl& d = scheme_decl_of(n.name);
    if (d.transform && !(d.points & scheme_query_scale)) return true;
  }
  return false;
}
template bool qk_transform_on(const attention_position<float>&);
template bool qk_transform_on(const attention_position<double>&);

template <typename Real>
const named_scheme* query_scale_on(const attention_position<Real>& pos) {
  for (const auto& n : pos.named) {
    const scheme_decl& d = scheme_decl_of(n.name);
    if (d.transform && (d.points & scheme_query_scale)) return &n;
  }
  return nullptr;
}
template const named_scheme* query_scale_on(const attention_position<float>&);
template const named_scheme* query_scale_on(const attention_position<double>&);

bool named_transform_relative(const scheme_decl& d) {
  return transform_of(d).relative;
}

double named_transform_query_scale(const scheme_decl& d, std::span<const double> args, int64_t P) {
  const auto& t = transform_of(d);
  return t.query_scale ? t.query_scale(args, P) : 1.0;
}

namespace {

const detail::named_bias& scalar_bias_of(const scheme_decl& d) {
  if (!d.named) fail("{} is no score bias reached by name", d.name);
  if (!d.named->value)
    fail("{}: its bias depends on its tensor parameters; build it per call (named_bias_spec)",
         d.name);
  return *d.named;
}

}  // namespace

double named_bias_value(const scheme_decl& d, std::span<const double> args, int64_t h, int64_t Hq,
                        int64_t qpos, int64_t kpos) {
  return scalar_bias_of(d).value(args, h, Hq, qpos, kpos);
}

double named_bias_bound(const scheme_decl& d, std::span<const double> args, int64_t h, int64_t Hq) {
  return scalar_bias_of(d).bound(args, h, Hq);
}

std::vector<std::pair<std::string, double>> named_case_params(const scheme_decl& d, int choice) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& prm : d.params)
    if (prm.choices && choice != 0) out.emplace_back(prm.name, double(choice));
  if (d.named)
    for (const auto& a : d.named->case_args)
      if (a.name) out.emplace_back(a.name, a.value);
  return out;
}

bool named_relative(const scheme_decl& d) {
  return d.named && d.named->relative_f64;
}

bool named_bias_by_token(const scheme_decl& d) {
  return d.named && d.named->by_token;
}

double named_tensor_draw(const scheme_decl& d, int tensor, double z) {
  if (!d.named || !d.named->draw) fail("{} has no tensor parameters to draw", d.name);
  return d.named->draw(tensor, z);
}

double named_tensors_draw(const scheme_decl& d, std::span<const double> args, int64_t T, int64_t S,
                          int64_t Hq, int64_t Hkv, int64_t D, double dmax,
                          const std::function<double()>& normal,
                          std::vector<std::vector<double>>& tensors) {
  if (!d.named || !(d.named->draw || d.named->case_draw))
    fail("{} has no tensor parameters to draw", d.name);
  if (d.named->case_draw) return d.named->case_draw(args, Hq, D, dmax, normal, tensors);
  tensors.clear();
  for (const auto& prm : d.params) {
    if (!is_tensor_param(prm)) continue;
    int64_t count = 1;
    for (int64_t e : tensor_param_shape(prm, T, S, Hq, Hkv, D)) count *= e;
    const int which = static_cast<int>(tensors.size());
    tensors.emplace_back(static_cast<size_t>(count));
    for (auto& e : tensors.back()) e = d.named->draw(which, normal());
  }
  return d.named->grad_bound;
}

namespace detail {
template <typename Real>
named_call<Real> named_call_of(const scheme_decl& d, const named_scheme& n, int64_t T, int64_t S,
                               int64_t Hq, int64_t Hkv, int64_t D, const attention_grads<Real>* g,
                               std::span<const double> args);
}  // namespace detail

std::function<double(int64_t, int64_t, int64_t)> named_bias_spec(const scheme_decl& d,
                                                                 const named_scheme& n, int64_t T,
                                                                 int64_t S, int64_t Hq, int64_t Hkv,
                                                                 int64_t D, bool causal) {
  if (!d.named) fail("{} is no score bias reached by name", d.name);
  auto args = named_scheme_args(d, n.params, Hq);
  if (d.named->relative_f64)
    fail("{}: it adds relative tables (hooks 2a and 3), not a score bias", d.name);
  if (d.named->path) fail("{}: it runs a path of its own, not a score bias", d.name);
  if (!d.named->term_f64) {
    const detail::named_bias* b = d.named;
    return [b, args = std::move(args), Hq](int64_t h, int64_t qp, int64_t kp) {
      return b->value(args, h, Hq, qp, kp);
    };
  }
  auto c = detail::named_call_of<double>(d, n, T, S, Hq, Hkv, D, nullptr, args);
  c.causal = causal;
  std::shared_ptr<detail::score_bias<double>> term = d.named->term_f64(c);
  return [term](int64_t h, int64_t a, int64_t b) { return term->value(h, a, b); };
}

namespace detail {
namespace {

// Hook 2b for any scheme reached by name. value() is the scheme's own. A bias of the offset
// alone (bias_offset_only) has a fast row like Kerple's: a per-call table (offset_table,
// hooks.hpp; the scheme's own offset_table where it has one, else value(), rounded once to Real)
// whose slice a row of consecutive keys adds; offsets outside it (a pad key inside a row) take
// value() itself.
template <typename Real>
class named_bias_term final : public score_bias<Real> {
 public:
  named_bias_term(const scheme_decl& d, std::vector<double> args, int64_t Hq,
                  const attention_plan& pl)
      : b_(*d.named), args_(std::move(args)), Hq_(Hq) {
    if (!(d.bias_props & bias_offset_only) || !table_.size_for(pl, Hq)) return;
    if (b_.offset_table) {  // the scheme's own table of the range, in double
      std::vector<double> t(table_.lut.size());
      b_.offset_table(args_, Hq, table_.lo, table_.hi, t.data());
      table_.fill(Hq, [&](int64_t h, int64_t r) { return t[h * table_.span + (r - table_.lo)]; });
    } else {
      table_.fill(Hq, [&](int64_t h, int64_t r) { return value(h, 0, r); });
    }
  }
  double value(int64_t h, int64_t qp, int64_t kp) const override {
    return b_.value(args_, h, Hq_, qp, kp);
  }
  void add_row(int64_t h, int64_t qp, const int64_t* kpos, int64_t n, bool contiguous,
               Real* row) const override {
    if (const Real* slice = contiguous && n > 0 ? table_.slice(h, kpos[0] - qp, n) : nullptr) {
      add_slice(row, slice, n);
      return;
    }
    const Real* lut = table_.lut.data() + h * table_.span;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t r = kpos[j] - qp;
      row[j] += table_.holds(r) ? lut[r - table_.lo] : static_cast<Real>(value(h, qp, kpos[j]));
    }
  }

 private:
  const named_bias& b_;
  std::vector<double> args_;
  int64_t Hq_;
  offset_table<Real> table_;  // offset-only biases; empty = per pair
};

// The model's hook (the lab): every layer's attention gets the scheme by name with the parameters
// the options give for it (position_options::named_params), and, when the scheme's tensor is a
// trained parameter (Kerple's, FIRE's), a view of that layer's (rows, cols) tensor and its
// gradient.
template <typename S>
class named_hook final : public position_hook<S> {
 public:
  named_hook(pos_scheme id, std::string name, std::vector<std::pair<std::string, double>> params,
             std::string tensor = "", int64_t rows = 0, int64_t cols = 0, bool per_layer = true)
      : id_(id),
        name_(std::move(name)),
        params_(std::move(params)),
        tensor_(std::move(tensor)),
        rows_(rows),
        cols_(cols),
        per_layer_(per_layer) {}
  pos_scheme scheme() const override { return id_; }
  std::vector<position_tensor> tensors() const override {
    if (tensor_.empty()) return {};
    return {{tensor_, rows_, cols_, per_layer_, false}};
  }
  attention_position<S> attention(const S* const* t) const override {
    attention_position<S> p;
    p.named.push_back({name_, params_});
    if (tensor_.empty()) return p;
    named_tensor x{tensor_, {rows_, cols_}, {}, {}};
    if constexpr (std::is_same_v<S, float>)
      x.f32 = std::span<const float>(t[0], rows_ * cols_);
    else
      x.f64 = std::span<const double>(t[0], rows_ * cols_);
    p.named.back().tensors.push_back(std::move(x));
    return p;
  }
  void bind_grads(S* const* dt, attention_grads<S>& g) const override {
    if (!tensor_.empty()) g.named.push_back({tensor_, std::span<S>(dt[0], rows_ * cols_)});
  }
  std::vector<int> attention_grad_tensors() const override {
    return tensor_.empty() ? std::vector<int>{} : std::vector<int>{0};
  }

 private:
  pos_scheme id_;
  std::string name_;
  std::vector<std::pair<std::string, double>> params_;
  std::string tensor_;
  int64_t rows_, cols_;
  bool per_layer_;
};

}  // namespace

template <typename S>
std::unique_ptr<position_hook<S>> make_named_hook(pos_scheme id, const scheme_decl& d,
                                                  const position_options& o,
                                                  const position_shape& shape) {
  if (d.pairs)
    fail(
        "{} places RoPE per pair at inference time over a model trained with rope; it is no "
        "scheme a model trains with (evaluate a rope model with it instead)",
        d.name);
  if (d.named && d.named->hook_f32) {
    if constexpr (std::is_same_v<S, float>)
      return d.named->hook_f32(id, o, shape);
    else
      return d.named->hook_f64(id, o, shape);
  }
  if (d.transform && d.transform->hook_f32) {
    if constexpr (std::is_same_v<S, float>)
      return d.transform->hook_f32(id, o, shape);
    else
      return d.transform->hook_f64(id, o, shape);
  }
  if (needs_tensors(d))
    fail("{}: its tensor parameters have no model hook to compute them", d.name);
  std::vector<std::pair<std::string, double>> mine;
  for (const auto& [name, value] : o.named_params)
    for (size_t i = 1; i < d.params.size(); ++i)
      if (name == d.params[i].name) mine.emplace_back(name, value);
  (void)named_scheme_args(d, mine, shape.n_heads);  // validated once, here
  return std::make_unique<named_hook<S>>(id, d.name, std::move(mine));
}
double named_option(const position_options& o, const char* param, double fallback) {
  double v = fallback;
  for (const auto& [name, value] : o.named_params)
    if (name == param) v = value;
  return v;
}

template <typename S>
std::unique_ptr<position_hook<S>> make_tensor_hook(
    pos_scheme id, const char* scheme, std::vector<std::pair<std::string, double>> params,
    const char* tensor, int64_t rows, int64_t cols, bool per_layer) {
  return std::make_unique<named_hook<S>>(id, scheme, std::move(params), tensor, rows, cols,
                                         per_layer);
}
template std::unique_ptr<position_hook<float>> make_tensor_hook<float>(
    pos_scheme, const char*, std::vector<std::pair<std::string, double>>, const char*, int64_t,
    int64_t, bool);
template std::unique_ptr<position_hook<double>> make_tensor_hook<double>(
    pos_scheme, const char*, std::vector<std::pair<std::string, double>>, const char*, int64_t,
    int64_t, bool);

template std::unique_ptr<position_hook<float>> make_named_hook<float>(pos_scheme,
                                                                      const scheme_decl&,
                                                                      const position_options&,
                                                                      const position_shape&);
template std::unique_ptr<position_hook<double>> make_named_hook<double>(pos_scheme,
                                                                        const scheme_decl&,
                                                                        const position_options&,
                                                                        const position_shape&);

// A per-pair RoPE scheme (named_schemes.hpp, named_pairs): what its path needs of the call.
// args is moved into t: clang-tidy (14) takes the move into a member of a dependent type for a
// const use.
template <typename Real>
void add_pairs_terms(const attention_params<Real>& p, const scheme_decl& d,
                     std::vector<double> args,  // NOLINT(performance-unnecessary-value-param)
                     engine_terms<Real>& t) {
  bool rides = false;
  for (const named_scheme& n : p.pos.named) rides |= d.rides_on && n.name == d.rides_on;
  if (!rides) {
    const scheme_decl& r = scheme_decl_of(d.rides_on);
    fail(
        "{} needs {} on (pos.named: {}; --{} in posenc attend, {}= in Python): it places {}'s "
        "rotation per (query, key) pair",
        d.name, r.title, r.name, r.name, r.name, r.title);
  }
  if (p.pos.keys_transformed)
    fail(
        "{} needs unrotated keys (keys_transformed = false): it rotates each key at the positions "
        "of each pair's region",
        d.name);
  if (!p.causal)
    fail(
        "{} needs causal attention (causal = true): its regions are defined for keys behind the "
        "query ({})",
        d.name, d.citation);
  if (p.kv != kv_storage::f32 || p.q_storage != kv_storage::f32)
    fail(
        "{} runs its own path and needs float32 or float64 q, k and v, got q_storage = {}, kv = {}",
        d.name, name(p.q_storage), name(p.kv));
  if (p.products != attention_products::f32)
    fail("{} runs its own path with float32 products; products = {} is not supported", d.name,
         name(p.products));
  t.pairs = d.pairs;
  t.pairs_name = d.name;
  t.pairs_args = std::move(args);
}

namespace {

// A shape as Python writes it: (2,), (3, 4).
std::string tuple_text(const std::vector<int64_t>& shape) {
  return fmt::format("({}{})", fmt::join(shape, ", "), shape.size() == 1 ? "," : "");
}

}  // namespace

// The tensors of n for a call of element type Real, in d's declaration order, each checked
// against its declared shape; and their gradient outputs in g (null = not wanted).
template <typename Real>
named_call<Real> named_call_of(const scheme_decl& d, const named_scheme& n, int64_t T, int64_t S,
                               int64_t Hq, int64_t Hkv, int64_t D, const attention_grads<Real>* g,
                               std::span<const double> args) {
  named_call<Real> c;
  c.args = args;
  c.T = T, c.S = S, c.Hq = Hq, c.D = D;
  for (const auto& x : n.tensors) {
    bool declared = false;
    for (const auto& prm : d.params) declared |= is_tensor_param(prm) && x.name == prm.name;
    if (!declared) fail("pos.named: {} has no tensor parameter '{}'", d.name, x.name);
  }
  for (const auto& prm : d.params) {
    if (!is_tensor_param(prm)) continue;
    const bool wide = is_f64_tensor_param(prm);
    const named_tensor* x = nullptr;
    for (const auto& y : n.tensors)
      if (y.name == prm.name) {
        if (x) fail("pos.named: {}: tensor {} given twice", d.name, prm.name);
        x = &y;
      }
    if (!x && !is_optional_tensor_param(prm))
      fail("{}: tensor parameter {} {} is required", d.name, prm.name, prm.shape);
    const auto want =
        tensor_param_shape(prm, T, S, Hq, Hkv, D, x ? x->shape : std::vector<int64_t>{});
    if (x && x->shape != want)
      fail("{} must have shape {} = {}, got {}", prm.name, prm.shape, tuple_text(want),
           tuple_text(x->shape));
    int64_t count = 1;
    for (int64_t e : want) count *= e;
    if (x) {
      const bool f32 = std::is_same_v<Real, float> && !wide;
      const size_t got = f32 ? x->f32.size() : x->f64.size();
      if (static_cast<int64_t>(got) != count)
        fail("{}: a {} call needs {} {} values (named_tensor::{}), got {}", prm.name,
             std::is_same_v<Real, float> ? "float32" : "float64", count,
             f32 ? "float32" : "float64", f32 ? "f32" : "f64", got);
    }
    std::span<const Real> v;
    if (x && !wide) {
      if constexpr (std::is_same_v<Real, float>)
        v = x->f32;
      else
        v = x->f64;
    }
    c.tensors.push_back(v);
    c.tensors64.push_back(x && wide ? x->f64 : std::span<const double>());
    Real* grad = nullptr;
    double* grad64 = nullptr;
    if (g)
      for (const auto& gr : g->named)
        if (gr.name == prm.name) {
          const size_t got = wide ? gr.f64.size() : gr.data.size();
          if (static_cast<int64_t>(got) != count)
            fail("d{} must have shape {} = ({}), i.e. {} values{}, got {}", prm.name, prm.shape,
                 fmt::join(want, ", "), count, wide ? " in float64 (named_grad::f64)" : "", got);
          if (wide)
            grad64 = gr.f64.data();
          else
            grad = gr.data.data();
        }
    c.grads.push_back(grad);
    c.grads64.push_back(grad64);
  }
  return c;
}

// What a term built per call (a tensor bias, relative tables) gets of the engine's call: its
// checked arguments and tensors, the plan and the causality. It views args (kept in `args`).
template <typename Real>
named_call<Real> engine_call(const attention_params<Real>& p, const attention_plan& pl,
                             const attention_grads<Real>* g, const scheme_decl& d,
                             const named_scheme& n, std::vector<double>& args) {
  args = named_scheme_args(d, n.params, p.Hq);
  auto c = named_call_of<Real>(d, n, p.T, p.S, p.Hq, p.Hkv, p.D, g, args);
  c.plan = &pl;
  c.causal = p.causal;
  return c;
}

template <typename Real>
named_call<Real> named_call_for(const attention_params<Real>& p, const attention_grads<Real>* g,
                                const scheme_decl& d, const named_scheme& n,
                                std::vector<double>& args) {
  args = named_scheme_args(d, n.params, p.Hq);
  auto c = named_call_of<Real>(d, n, p.T, p.S, p.Hq, p.Hkv, p.D, g, args);
  c.causal = p.causal;
  return c;
}
template named_call<float> named_call_for(const attention_params<float>&,
                                          const attention_grads<float>*, const scheme_decl&,
                                          const named_scheme&, std::vector<double>&);
template named_call<double> named_call_for(const attention_params<double>&,
                                           const attention_grads<double>*, const scheme_decl&,
                                           const named_scheme&, std::vector<double>&);

namespace {

// The scheme on in p with a path of its own, and its entry of p.pos.named; null when none.
template <typename Real>
std::pair<const scheme_decl*, const named_scheme*> path_on(const attention_params<Real>& p) {
  for (const named_scheme& n : p.pos.named) {
    const scheme_decl& d = scheme_decl_of(n.name);
    if (d.named && d.named->path) return {&d, &n};
  }
  return {nullptr, nullptr};
}

}  // namespace

template <typename Real>
bool named_path_forward(const attention_params<Real>& p, bool reference) {
  const auto [d, n] = path_on(p);
  if (!d) return false;
  (void)make_engine_terms<Real>(p, make_attention_plan(p), nullptr);  // the rule, the checks
  std::vector<double> args;
  const auto c = named_call_for<Real>(p, nullptr, *d, *n, args);
  const named_path& path = *d->named->path;
  if constexpr (std::is_same_v<Real, float>)
    (!reference && path.tiled_forward_f32 ? path.tiled_forward_f32 : path.forward_f32)(p, c);
  else
    path.forward_f64(p, c);
  return true;
}
template bool named_path_forward(const attention_params<float>&, bool);
template bool named_path_forward(const attention_params<double>&, bool);

template <typename Real>
bool named_path_backward(const attention_params<Real>& p, const attention_grads<Real>& g,
                         bool reference) {
  const auto [d, n] = path_on(p);
  if (!d) return false;
  (void)make_engine_terms<Real>(p, make_attention_plan(p), &g);
  std::vector<double> args;
  const auto c = named_call_for<Real>(p, &g, *d, *n, args);
  const named_path& path = *d->named->path;
  if constexpr (std::is_same_v<Real, float>)
    (!reference && path.tiled_backward_f32 ? path.tiled_backward_f32 : path.backward_f32)(p, g, c);
  else
    path.backward_f64(p, g, c);
  return true;
}
template bool named_path_backward(const attention_params<float>&, const attention_grads<float>&,
                                  bool);
template bool named_path_backward(const attention_params<double>&, const attention_grads<double>&,
                                  bool);

template <typename Real>
std::unique_ptr<score_bias<Real>> make_tensor_term(const attention_params<Real>& p,
                                                   const attention_plan& pl,
                                                   const attention_grads<Real>* g,
                                                   const scheme_decl& d, const named_scheme& n) {
  std::vector<double> args;
  const auto c = engine_call(p, pl, g, d, n, args);
  if constexpr (std::is_same_v<Real, float>)
    return d.named->term_f32(c);
  else
    return d.named->term_f64(c);
}

// Every gradient asked for in g->named names a tensor parameter of a scheme on in the call, once.
template <typename Real>
void check_named_grads(const attention_params<Real>& p, const attention_grads<Real>* g) {
  if (!g) return;
  for (size_t i = 0; i < g->named.size(); ++i) {
    const std::string& want = g->named[i].name;
    for (size_t j = 0; j < i; ++j)
      if (g->named[j].name == want) fail("attention backward: d{} requested twice", want);
    bool on = false;
    for (const auto& n : p.pos.named)
      for (const auto& prm : scheme_decl_of(n.name).params)
        on |= is_tensor_param(prm) && want == prm.name && scheme_decl_of(n.name).learned;
    if (!on)
      fail(
          "attention backward: d{} was requested but no scheme on in this call (pos.named) has a "
          "learned tensor parameter {}",
          want, want);
  }
}

// pos.named names schemes reached by name, each once; every gradient asked for names a learned
// tensor of one of them.
template <typename Real>
void check_named(const attention_params<Real>& p, const attention_grads<Real>* g) {
  for (size_t i = 0; i < p.pos.named.size(); ++i) {
    const named_scheme& n = p.pos.named[i];
    if (!scheme_decl_of(n.name).reached_by_name()) {
      std::vector<std::string> names;
      for (const auto& x : scheme_decls())
        if (x.reached_by_name()) names.push_back(x.name);
      fail("pos.named: {} is the model's, not attention's; the schemes of attention are {}", n.name,
           fmt::join(names, ", "));
    }
    for (size_t j = 0; j < i; ++j)
      if (p.pos.named[j].name == n.name) fail("pos.named lists {} twice", n.name);
  }
  check_named_grads(p, g);
}

template <typename Real>
void add_named_terms(const attention_params<Real>& p, const attention_plan& pl,
                     const attention_grads<Real>* g, const scheme_decl& d, engine_terms<Real>& t) {
  const named_scheme* found = nullptr;
  for (const named_scheme& x : p.pos.named)
    if (x.name == d.name) found = &x;
  if (!found) return;
  const named_scheme& n = *found;
  if (d.pairs) {
    add_pairs_terms(p, d, named_scheme_args(d, n.params, p.Hq), t);
    return;
  }
  if (d.transform) {
    std::vector<double> args;
    const auto a = transform_args_for(d, n, p.D, p.T, p.S, p.pos.keys_transformed, args);
    if (d.points & scheme_query_scale) {  // wraps the transform of the schemes declared before it
      t.transform = d.transform->make(a, std::move(t.transform));
      return;
    }
    if (t.transform) fail("attention: two q/k transforms are on; at most one is allowed");
    t.transform = d.transform->make(a, nullptr);
    t.transform->keys_transformed = p.pos.keys_transformed;
    return;
  }
  if (d.causal_only && !p.causal)
    fail("{} needs causal attention (causal = true): it is defined for keys behind the query ({})",
         d.name, d.citation);
  if (d.named->term_f32) {
    t.biases.push_back(make_tensor_term(p, pl, g, d, n));
    return;
  }
  if (d.named->path) {  // its path runs instead of the kernels (named_path_forward): checks alone
    if (p.kv != kv_storage::f32 || p.q_storage != kv_storage::f32)
      fail(
          "attention: {} runs its own double path and needs float32 or float64 q, k and v, got "
          "q_storage = {}, kv = {}",
          d.title, name(p.q_storage), name(p.kv));
    std::vector<double> args;
    (void)engine_call(p, pl, g, d, n, args);
    return;
  }
  if (d.named->relative_f32) {
    if (t.relative) fail("attention: two pairs of relative tables are on; at most one is allowed");
    std::vector<double> args;
    const auto c = engine_call(p, pl, g, d, n, args);
    if constexpr (std::is_same_v<Real, float>)
      t.relative = d.named->relative_f32(c);
    else
      t.relative = d.named->relative_f64(c);
    return;
  }
  if (!n.tensors.empty())
    fail("pos.named: {} has no tensor parameters, got '{}'", d.name, n.tensors[0].name);
  t.biases.push_back(
      std::make_unique<named_bias_term<Real>>(d, named_scheme_args(d, n.params, p.Hq), p.Hq, pl));
}
transform_args transform_args_for(const scheme_decl& d, const named_scheme& n, int64_t D, int64_t T,
                                  int64_t S, bool keys_transformed, std::vector<double>& args) {
  args = named_scheme_args(d, n.params, 1);
  transform_args a{args, D, n.freqs, {}};
  if (n.freqs && !d.config_valued())
    fail("pos.named: {} takes no RoPE frequencies (freqs), got some", d.name);
  for (const named_tensor& x : n.tensors) {
    bool declared = false;
    for (const auto& prm : d.params)
      declared |= x.name == prm.name && std::string(prm.dtype) == "ids";
    if (!declared) fail("pos.named: {} has no tensor parameter '{}'", d.name, x.name);
  }
  for (const auto& prm : d.params) {
    if (std::string(prm.dtype) != "ids") continue;
    const named_tensor* x = nullptr;
    for (const named_tensor& y : n.tensors)
      if (y.name == prm.name) x = &y;
    const bool of_keys = tensor_param_has_extent(prm, "S");
    if (T < 0) {  // a cache's transform for its keys: the cache gives each key's ids
      a.ids.emplace_back();
      continue;
    }
    const auto want = tensor_param_shape(prm, T, S, 1, 1, D);
    int64_t count = 1;
    for (int64_t e : want) count *= e;
    if (!x) {  // none needed for no tokens, or for keys given transformed
      if (count == 0 || (of_keys && keys_transformed)) {
        a.ids.emplace_back();
        continue;
      }
      fail("{} {} is required with {}", prm.name, tensor_param_shape_text(prm, T, S, 1, 1, D),
           d.name);
    }
    if (x->shape != want || static_cast<int64_t>(x->ids.size()) != count)
      fail("{} must have shape {} = {}, got {} with {} entries", prm.name, prm.shape,
           tuple_text(want), tuple_text(x->shape), x->ids.size());
    a.ids.push_back(x->ids);
  }
  return a;
}

template void check_named<float>(const attention_params<float>&, const attention_grads<float>*);
template void check_named<double>(const attention_params<double>&, const attention_grads<double>*);
template void add_named_terms<float>(const attention_params<float>&, const attention_plan&,
                                     const attention_grads<float>*, const scheme_decl&,
                                     engine_terms<float>&);
template void add_named_terms<double>(const attention_params<double>&, const attention_plan&,
                                      const attention_grads<double>*, const scheme_decl&,
                                      engine_terms<double>&);

}  // namespace detail
}  // namespace posenc
