// src/attention/named_schemes.hpp (private): a scheme reached by name (attention_position::named)
// is a score bias its hook file defines as a named_bias, and its declaration (schemes.cpp) points
// at. Everything else a scheme needs is generic and lives in named_schemes.cpp: the engine term
// (a per-call table over the visible offsets when the bias depends on the offset alone), the
// model's hook (the lab), the argument checks; the CLI, Python, the case tables and posenc check
// read the declaration. A new parameter-free (or scalar-parametrised) score bias therefore
// touches its family file, its hook, its declaration and its tests, nothing else.
//
// A scheme reached by name may instead place RoPE per (query, key) pair (named_pairs below:
// Self-Extend, Dual Chunk Attention). It rides on the call's RoPE and runs on the engine's path
// for such schemes (attention_rope_pairs.cpp); its switch, parameters, flags and keywords come
// from its declaration as for a bias.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "posenc/attention/schemes.hpp"

namespace posenc::detail {

struct attention_plan;  // attention_plan.hpp
template <typename Real>
class score_bias;  // engine_terms.hpp
template <typename Real>
class relative_vectors;  // engine_terms.hpp
class qk_transform;      // engine_terms.hpp
}  // namespace posenc::detail
namespace posenc {
template <typename Real>
struct attention_params;  // posenc/attention/attention.hpp
template <typename Real>
struct attention_grads;
struct named_scheme;
struct rope_freqs;   // posenc/encodings/rope.hpp
struct scheme_decl;  // posenc/attention/schemes.hpp
}  // namespace posenc
namespace posenc {
template <typename S>
class position_hook;  // posenc/attention/position_hook.hpp
struct position_options;
struct position_shape;
enum class pos_scheme;
}  // namespace posenc
namespace posenc::detail {

// What a score bias with tensor parameters gets of one call, its arguments checked against the
// declaration: the numeric parameters (named_scheme_args), each declared tensor parameter in
// declaration order (shape checked against the declared one) and its gradient output (null =
// not wanted), and the call's shape.
// A float64 tensor parameter (is_f64_tensor_param: ALiBi's slopes) is in tensors64 / grads64 at
// its index instead (its entries of tensors / grads empty, and the other way round); an
// optional one left out (the term derives its values) is an empty view.
template <typename Real>
struct named_call {
  std::span<const double> args;
  std::vector<std::span<const Real>> tensors;
  std::vector<Real*> grads;
  std::vector<std::span<const double>> tensors64;
  std::vector<double*> grads64;
  int64_t T = 0, S = 0, Hq = 0, D = 0;
  bool causal = false;  // resolves a bool parameter's "not causal" default (named_bool)
  // The call's plan (its visible offsets: a per-call table's range); null when the term serves
  // as the specification alone (named_bias_spec), which then builds no table.
  const attention_plan* plan = nullptr;
};

// A scheme reached by name whose positions depend on the content (CoPE: scheme_own_path): a path
// of its own that every entry point (the tiled and the reference forward and backward) runs
// instead of its kernels when the scheme is on (the declarations' rule leaves it alone in the
// call), given its call (named_call: its checked tensors and their gradient outputs). It
// validates the tensors' values and writes out, lse (forward) or every gradient (backward).
// forward_* and backward_* are the specification (the reference entry points run them); the
// tiled entry points run tiled_*_f32 for float32 where the scheme has one.
struct named_path {
  void (*forward_f32)(const attention_params<float>& p, const named_call<float>& c);
  void (*forward_f64)(const attention_params<double>& p, const named_call<double>& c);
  void (*backward_f32)(const attention_params<float>& p, const attention_grads<float>& g,
                       const named_call<float>& c);
  void (*backward_f64)(const attention_params<double>& p, const attention_grads<double>& g,
                       const named_call<double>& c);
  void (*tiled_forward_f32)(const attention_params<float>& p, const named_call<float>& c) = nullptr;
  void (*tiled_backward_f32)(const attention_params<float>& p, const attention_grads<float>& g,
                             const named_call<float>& c) = nullptr;
  // The case tables and checks: a bound on what the scheme adds to a score, given its tensors
  // (declaration order, in double), the head dim D and the largest |q_i| (CoPE: |q| max|e_t|).
  double (*score_bound)(const std::vector<std::vector<double>>& tensors, int64_t D, double qmax);
  // The case tables' tolerances for tiled_*_f32: bounds on its errors beyond the products' own
  // (named_path_tiled_errors), given the bound A on |scale q . k|, S keys and the unit roundoff
  // u; null: no tiled path.
  path_tiled_errors (*tiled_errors)(const std::vector<std::vector<double>>& tensors, int64_t D,
                                    double qmax, double A, int64_t S, double u) = nullptr;
};

// args: the scheme's numeric parameters, in declaration order after the switch, defaults filled
// (named_scheme_args). Hq: the call's query heads; h in [0, Hq).
struct named_bias {
  // Validates args for Hq heads; throws invalid_argument naming the parameter (by its Python
  // name) and the allowed values.
  void (*check)(std::span<const double> args, int64_t Hq) = nullptr;
  // The specification: bias_h(qpos, kpos) in double.
  double (*value)(std::span<const double> args, int64_t h, int64_t Hq, int64_t qpos,
                  int64_t kpos) = nullptr;
  // A bound on |bias_h| over every pair (the bias_bounded property; +inf when unbounded).
  double (*bound)(std::span<const double> args, int64_t h, int64_t Hq) = nullptr;
  // Optional, for a bias of the offset alone: out[h * n + (r - lo)] = value(h, 0, r) for r in
  // [lo, hi], n = hi - lo + 1, every head at once (it may share work between heads), with the
  // bits of value(). null: the engine fills the table from value().
  void (*offset_table)(std::span<const double> args, int64_t Hq, int64_t lo, int64_t hi,
                       double* out) = nullptr;
  // A bias with tensor parameters (Forgetting Attention's gates) builds a term of its own per
  // call instead: check, value and bound above are then null, and the term's value() is the
  // specification. It validates the tensors' values (their shapes are checked already), reads
  // them once and holds what it derives (running sums, tables); its gradient, when grads are
  // given, goes to the tensors' gradient outputs.
  std::unique_ptr<score_bias<float>> (*term_f32)(const named_call<float>& c) = nullptr;
  std::unique_ptr<score_bias<double>> (*term_f64)(const named_call<double>& c) = nullptr;
  // Relative tables instead of a score bias (hooks 2a and 3: Shaw's a^K, a^V), built per call
  // like term_f32 / term_f64 (which are then null): rows of (C, D) tables indexed by a function
  // of the two positions, their gradients into the tensors' gradient outputs. The case tables
  // and checks read its first two tensors as a^K and a^V.
  std::unique_ptr<relative_vectors<float>> (*relative_f32)(const named_call<float>& c) = nullptr;
  std::unique_ptr<relative_vectors<double>> (*relative_f64)(const named_call<double>& c) = nullptr;
  // A path of its own instead of a term (named_path: CoPE); term_* and relative_* are then null.
  const named_path* path = nullptr;
  // The term's coordinates are token indices rather than positions (score_bias::by_token).
  bool by_token = false;
  // A value of tensor parameter `tensor` (its index among the declared tensors) for the case
  // tables and checks, from a standard normal draw z: where the scheme's values live (log gates
  // of sigmoid(1 + 2 z)). Required with term_f32 / term_f64 unless case_draw is given.
  double (*draw)(int tensor, double z) = nullptr;
  // A bound on |d bias / d x| for one pair, over every entry x of every tensor (the case tables'
  // gradient tolerance, as FIRE's G).
  double grad_bound = 0;
  // Optional, in place of draw and grad_bound where the values' law depends on the arguments or
  // the bound on the distances: every tensor parameter for a call of Hq heads with args, in
  // declaration order and row-major, from the standard normal draws normal() gives in turn; it
  // returns the bound on |d bias / d x| for one pair at distance <= dmax (Kerple's).
  double (*case_draw)(std::span<const double> args, int64_t Hq, int64_t D, double dmax,
                      const std::function<double()>& normal,
                      std::vector<std::vector<double>>& tensors) = nullptr;
  // Optional: parameters (by declared name) the case tables and checks run with instead of the
  // defaults; a null name ends the list.
  struct case_arg {
    const char* name = nullptr;
    double value = 0;
  };
  case_arg case_args[2] = {};
  // The model's hook (the lab), for a bias whose tensors the model computes (Forgetting
  // Attention's gates from each layer's input); null: the generic hook of named_schemes.cpp,
  // which passes the numeric parameters alone.
  std::unique_ptr<position_hook<float>> (*hook_f32)(pos_scheme id, const position_options& o,
                                                    const position_shape& shape) = nullptr;
  std::unique_ptr<position_hook<double>> (*hook_f64)(pos_scheme id, const position_options& o,
                                                     const position_shape& shape) = nullptr;
};

// The arguments and tensors of the scheme reached by name n (declaration d) in the call p, checked
// against the declaration, and the gradient outputs of g (null: none); it views args.
template <typename Real>
named_call<Real> named_call_for(const attention_params<Real>& p, const attention_grads<Real>* g,
                                const scheme_decl& d, const named_scheme& n,
                                std::vector<double>& args);
// Runs the path of the scheme reached by name on in p that has one (named_path: CoPE) and returns
// true; false (nothing run) when none is on. What every entry point asks first; reference: the
// specification's form, else the tiled form where the path has one for Real.
template <typename Real>
bool named_path_forward(const attention_params<Real>& p, bool reference);
template <typename Real>
bool named_path_backward(const attention_params<Real>& p, const attention_grads<Real>& g,
                         bool reference);

// For a named_bias's hook_f32 / hook_f64 whose tensor is a trained parameter of the model: every
// layer owns a (rows, cols) tensor `tensor` (a per-layer table of per-head parameters; one table
// all layers share when !per_layer, T5's) passed to
// the attention with the scheme `scheme` and `params`, and its gradient. named_option: the value of
// `param` among the lab's options (position_options::named_params), else fallback.
template <typename S>
std::unique_ptr<position_hook<S>> make_tensor_hook(
    pos_scheme id, const char* scheme, std::vector<std::pair<std::string, double>> params,
    const char* tensor, int64_t rows, int64_t cols, bool per_layer = true);
double named_option(const position_options& o, const char* param, double fallback);

// A scheme that maps q and k at hook 1 (xPos): its transform for a call of head dim D, built from
// args as for named_bias. The engine applies it as any q/k transform (the tiles' row form where
// it has one, copies otherwise); a KV cache stores keys after it (make_key_transform) and its
// calls mark them transformed (attention_position::keys_transformed).
//
// A query scale (declared scheme_query_scale: the query temperature) maps q alone and wraps the
// call's other q/k transform, which the engine passes as inner (null when none); keys are
// unchanged, so a KV cache stores none of it and a cached call keeps its own (else the cache's).
// Any other transform gets inner null and is the call's only one.
//
// What a transform is built from (transform_args): its numeric arguments (named_scheme_args), the
// call's head dim D, and its arguments of the other declared dtypes: the frequencies of a switch
// of dtype "RopeConfig" (named_scheme::freqs; RoPE, M-RoPE) and its "ids" tensors in declaration
// order (M-RoPE's (3, T) and (3, S); an empty view when not given), their shapes checked.
struct transform_args {
  std::span<const double> args;
  int64_t D = 0;
  const rope_freqs* freqs = nullptr;
  std::vector<std::span<const int64_t>> ids = {};
};
struct named_transform {
  // Validates args (and D); throws invalid_argument naming the parameter and the allowed values.
  void (*check)(std::span<const double> args, int64_t D);
  std::unique_ptr<qk_transform> (*make)(const transform_args& a,
                                        std::unique_ptr<qk_transform> inner);
  // q'_n . k'_m depends on n - m alone (in exact arithmetic): the translation check applies.
  bool relative = true;
  // A rotation by the position, R(p + d) = R(d) R(p) (RoPE): a KV cache's rerotate mode turns
  // stored keys by the change of an edit (kv_cache.cpp, with RoPE's frequencies: rope_of); the
  // caches of the others move keys in exact mode only.
  bool rotation = false;
  // The largest factor it puts on |q| at positions 0 .. P (1 for a rotation; the temperature's
  // s(P)): the case tables' and checks' tolerances scale dq by it.
  double (*query_scale)(std::span<const double> args, int64_t P) = nullptr;
  // The case tables and checks (schemes.hpp, named_transform_case and the two after it), for a
  // transform whose arguments they draw (named_scheme_decls: not one whose switch is a config,
  // which the case tables build from configs of their own).
  std::vector<std::pair<std::string, double>> (*case_params)(int64_t lo, int64_t hi) = nullptr;
  double (*amplitude)(std::span<const double> args, int64_t lo, int64_t hi, bool causal) = nullptr;
  double (*coef_error)(std::span<const double> args, int64_t P) = nullptr;
  // The model's hook (the lab); null: the generic hook of named_schemes.cpp.
  std::unique_ptr<position_hook<float>> (*hook_f32)(pos_scheme id, const position_options& o,
                                                    const position_shape& shape) = nullptr;
  std::unique_ptr<position_hook<double>> (*hook_f64)(pos_scheme id, const position_options& o,
                                                     const position_shape& shape) = nullptr;
};

// The transform_args of the q/k transform reached by name n (declaration d) for a call of head
// dim D, T queries and S keys, with its numeric arguments in args (viewed by the result): its
// "ids" tensors' shapes checked, each required but the keys' when keys_transformed. T < 0: for
// a KV cache's keys (make_key_transform), no ids (the cache gives each key's).
transform_args transform_args_for(const scheme_decl& d, const named_scheme& n, int64_t D, int64_t T,
                                  int64_t S, bool keys_transformed, std::vector<double>& args);

// A scheme that places RoPE per pair: each visible pair (query at qpos, key at kpos) falls in
// one of `regions` regions (or in none, -1: the pair is then masked), and in region r its score is
// scale * (R(query_pos(r, qpos)) q) . (R(key_pos(r, kpos)) k), R the call's RoPE rotation
// (rope_scheme: frequencies, layout, angles). args as for named_bias. Positions in and out are >=
// 0.
struct named_pairs {
  // Validates args; throws invalid_argument naming the parameter and the allowed values.
  void (*check)(std::span<const double> args);
  int regions;                  // R >= 1
  const char* region_names[3];  // "neighbour", "grouped", ...: for docs and tests
  int (*region)(std::span<const double> args, int64_t qpos, int64_t kpos);
  int64_t (*query_pos)(std::span<const double> args, int r, int64_t qpos);
  int64_t (*key_pos)(std::span<const double> args, int r, int64_t kpos);
  // Optional: a factor on every score of a call with S keys (DCA's length scaling); null = 1.
  double (*score_factor)(std::span<const double> args, int64_t S) = nullptr;
  // Parameters, in declaration order after the switch, that put the pairs of a case-table call
  // (13 keys at positions 0 .. 12) in every region: what the case tables and checks run.
  double case_args[3] = {0, 0, 0};
  // Its parameters, in declaration order after the switch, for a RoPE model trained at length L
  // run zero-shot at 8L: the lab's extension preset (`posenc lab --preset extend`), with the rule
  // its paper gives for choosing them. null: the preset leaves the scheme out.
  void (*lab_args)(int64_t L, double* args) = nullptr;
};

}  // namespace posenc::detail
