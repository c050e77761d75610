// posenc/attention/schemes.hpp: every position scheme declared once.
//
// A declaration says what a scheme is, not how it runs: name, entry point (docs/architecture.md's
// four places, plus CoPE's own path), its properties (learned, causal only, float K/V only),
// and its parameters (name, shape, dtype, default, one line of doc). Whether two schemes may be
// on in one attention call follows from those properties by one rule (scheme_conflict), with
// one message that names both; no scheme lists the names of the others. `posenc schemes`
// prints the declarations, and docs/schemes.md's table is generated from them (a test keeps it
// current).
//
// The rule, for two schemes a and b on in the same call:
//   1. a scheme whose positions depend on the content (CoPE: counted gates) runs on a path of
//      its own that applies no other scheme: it combines with nothing;
//   2. at most one scheme maps q and k at hook 1 (RoPE, M-RoPE, xPos): the engine composes no
//      two q/k transforms; a query scale (the query temperature, scheme_query_scale) is
//      diagonal and composes with any of them (Ministral 3 scales its rotated queries);
//   3. at most one scheme owns the relative tables of hooks 2a / 3 (Shaw);
//   4. a scheme that places RoPE per (query, key) pair (Self-Extend, Dual Chunk Attention) rides
//      on the scheme it names (rides_on: RoPE) on a path of its own: it needs that scheme on and
//      combines with nothing else;
//   5. everything else combines: score biases (hook 2b) add, in the engine's order, and
//      input-side schemes act before attention.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/formats/hf_config.hpp"

namespace posenc {

// Where a scheme enters (bit flags; a scheme may use several).
enum scheme_point : uint32_t {
  scheme_input = 1u << 0,          // x_0 += P(pos) before the first layer
  scheme_qk_transform = 1u << 1,   // hook 1: q' = A_q(qpos) q, k' = A_k(kpos) k
  scheme_score_bias = 1u << 2,     // hook 2b: s_ij += bias_h(qpos_i, kpos_j)
  scheme_relative_keys = 1u << 3,  // hook 2a: s_ij += q_i . a^K_(j-i)
  scheme_value_term = 1u << 4,     // hook 3: o_i += sum_j p_ij a^V_(j-i)
  scheme_own_path = 1u << 5,       // positions from the content, on a path of their own (CoPE)
  scheme_layer_plan = 1u << 6,     // chooses per layer between other schemes (iRoPE)
  scheme_rope_pairs = 1u << 7,     // RoPE at positions chosen per (query, key) pair (own path)
  scheme_query_scale = 1u << 8,    // hook 1, queries only: q' = s(qpos) A_q(qpos) q, composes
};

// What a score bias is, as `posenc check` tests it for a scheme reached by name (bit flags).
enum scheme_bias_property : uint32_t {
  bias_offset_only = 1u << 0,  // bias_h(qp, kp) depends on kp - qp alone
  bias_symmetric = 1u << 1,    // bias_h(qp, kp) = bias_h(kp, qp)
  bias_bounded = 1u << 2,      // |bias_h(qp, kp)| <= named_bias_bound(...) for every pair
};

namespace detail {
struct named_bias;   // src/attention/named_schemes.hpp: a scheme's score bias, defined in its hook
struct named_pairs;  // src/attention/named_schemes.hpp: a scheme's per-pair RoPE positions
struct named_transform;  // src/attention/named_schemes.hpp: a scheme's q/k transform (hook 1)
struct scheme_impl;      // src/attention/hooks.hpp: a scheme's model hook (the pos_scheme ones),
                         // registered by its hook file
}  // namespace detail

struct scheme_param {
  const char* name;   // as Python spells it; the CLI flag is --name with dashes
  const char* shape;  // "(Hq,)", "(num_buckets, Hq)", "scalar", ...
  const char* dtype;  // "float", "int", "bool", "str", "RopeConfig", "tensor", "ids", ...
                      // "RopeConfig", a switch only: the frequencies of a RoPE config
                      // (named_scheme::freqs), which a front end reads from the config (Python's
                      // rope=, posenc attend's --rope, --hf-config, --gguf) rather than from
                      // keywords of the declaration's own. "ids": integer ids of the shape above
                      // (named_tensor::ids) in every call.
                      // "tensor": a named scheme's tensor parameter (named_tensor) of the
                      // shape above in symbols (S, T, Hq, Hkv, D), in the call's element type;
                      // in a learned scheme it has a gradient output (attention_grads::named),
                      // `d<name>` in the CLI and in Python. "tensor64": the same in float64
                      // whatever the call's element type (named_tensor::f64, named_grad::f64).
                      // "bool | tensor64", a switch only: True turns the scheme on with the
                      // values its term derives from the other parameters (the slopes of a bias), a
                      // tensor with those values
  const char* def;    // default, as text ("" = required when the scheme is on; a bool after
                      // a scheme's switch: "True", "False" or "not causal")
  const char* doc;    // one line
  // dtype "str" of a scheme reached by name: the allowed values, '|'-separated ("log|power");
  // named_scheme::params carries the index of the value (named_choice), the CLI and Python the
  // text.
  const char* choices = nullptr;
};

struct scheme_decl {
  const char* name;      // as `posenc attend`'s scheme list and the lab spell it
  const char* title;     // as a paper writes it
  const char* citation;  // "Press et al. 2022"
  uint32_t points;       // scheme_point flags
  bool learned;          // has parameters a model trains (and the engine differentiates)
  bool causal_only;      // defined for causal attention only
  bool float_kv_only;    // needs float32 / float64 K and V (no half-precision storage)
  bool attention_level;  // in attention_position::named (else the model's or the lab's)
  std::span<const scheme_param> params;
  // A scheme reached by name (attention_position::named) rather than by a member: its score bias,
  // defined in its hook file (src/attention/hook_<name>.cpp), and what posenc check tests of it.
  // Its first parameter is its switch (named as the scheme, bool: `--<name>`, `<name>=True`, or
  // a tensor that turns it on when given: `--<name> FILE.npy`, `<name>=array`), the others are
  // numbers (int or float) with numeric defaults or tensors. From this alone come its engine
  // terms, its flags in `posenc attend` and `posenc lab`, its keywords in Python, its model hook,
  // its rows in the case tables and its `posenc check` group. null for the other schemes.
  const detail::named_bias* named = nullptr;
  uint32_t bias_props = 0;  // scheme_bias_property flags
  // A scheme reached by name that places RoPE per pair instead of adding a bias (scheme_rope_pairs;
  // its hook file defines the regions and their positions): reached, flagged and checked as
  // above, its engine the own path of src/attention/attention_rope_pairs.cpp. null otherwise.
  const detail::named_pairs* pairs = nullptr;
  // The scheme this one needs on and is the only one it combines with (rule 4); null = none.
  const char* rides_on = nullptr;
  // A scheme with a model hook of its own (a pos_scheme: NoPE, sinusoidal, learned, RoPE, iRoPE):
  // what its hook file registers, which the model's registry (position_hook.cpp) reads. null for
  // the others.
  const detail::scheme_impl* impl = nullptr;
  // A scheme reached by name that maps q and k at hook 1 (scheme_qk_transform: RoPE, M-RoPE,
  // xPos; the query temperature, a query scale), its hook file's transform; reached, flagged and
  // checked as above. null otherwise.
  const detail::named_transform* transform = nullptr;
  // Trained at L in the lab's context-extension preset (posenc/lab/extend.hpp) as a scheme that
  // needs no extension, its bits per byte and retrieval beside RoPE's methods.
  bool lab_extend_trained = false;
  bool reached_by_name() const { return named || pairs || transform; }
  // Its switch is a RoPE config (dtype "RopeConfig": RoPE, M-RoPE): reached by name in the engine,
  // but its front ends read the config (named_scheme_decls leaves it out).
  bool config_valued() const;
};

// Every declared scheme, in the engine's order (hook 1, hook 2b in summation order, hooks 2a/3,
// CoPE, then the model-level ones).
std::span<const scheme_decl> scheme_decls();
// The declaration of `name`; throws invalid_argument naming the declared ones.
const scheme_decl& scheme_decl_of(const std::string& name);

// "" when a and b may be on together in one attention call, else the reason (rule above).
std::string scheme_conflict(const scheme_decl& a, const scheme_decl& b);
// Throws invalid_argument "<a> cannot be combined with <b>: <reason>" for the first pair of
// `on` (names of declared schemes) that conflicts.
void check_scheme_combination(std::span<const std::string> on);

// The attention-level schemes that are on in pos, in declaration order.
template <typename Real>
std::vector<std::string> schemes_on(const attention_position<Real>& pos);

// The schemes reached by name whose arguments the front ends (the CLI's flags, Python's keywords,
// the case tables, posenc check, the lab) take from the declaration alone, in declaration order:
// every one but those whose switch is a config (scheme_decl::config_valued).
std::vector<const scheme_decl*> named_scheme_decls();
// The numeric parameters of a scheme reached by name as its engine takes them: every declared
// parameter after the switch, in declaration order, the given value or else the default. Throws
// invalid_argument for an unknown or repeated name (listing the declared ones) or a non-integer
// value of an int parameter; the scheme's own check then validates the values for Hq heads.
std::vector<double> named_scheme_args(const scheme_decl& d,
                                      std::span<const std::pair<std::string, double>> given,
                                      int64_t Hq);
// The regions of a per-pair RoPE scheme (d.pairs): the region of a pair, and the query's and the
// key's positions in region r, for args from named_scheme_args. What the tests and docs read.
int rope_pairs_regions(const scheme_decl& d);
int rope_pairs_region(const scheme_decl& d, std::span<const double> args, int64_t qpos,
                      int64_t kpos);
std::pair<int64_t, int64_t> rope_pairs_positions(const scheme_decl& d, std::span<const double> args,
                                                 int r, int64_t qpos, int64_t kpos);
// The region's name ("neighbour", "intra-chunk", ...), and the parameters (by name) with which a
// case-table call of 13 keys at positions 0 .. 12 has pairs in every region.
const char* rope_pairs_region_name(const scheme_decl& d, int r);
// The factor on every score of a call with S keys (DCA's length scaling; 1 for the others).
double rope_pairs_score_factor(const scheme_decl& d, std::span<const double> args, int64_t S);
std::vector<std::pair<std::string, double>> rope_pairs_case_params(const scheme_decl& d);
// The parameters (by name) its hook file gives a per-pair scheme for a RoPE model trained at
// length L run zero-shot at 8L (the lab's extension preset), or none when it gives none
// (rope_pairs_in_lab false).
bool rope_pairs_in_lab(const scheme_decl& d);
std::vector<std::pair<std::string, double>> rope_pairs_lab_params(const scheme_decl& d, int64_t L);

// The `dca` parameters, named as its declaration names them, that a config.json's
// dual_chunk_attention_config gives (hf_dca_config_from_json, posenc/formats/hf_config.hpp):
// chunk_size, local_size and original_max_position_embeddings, in the declaration's order. What
// `posenc attend --hf-config` and Python's posenc.hf_dca turn on.
std::vector<std::pair<std::string, double>> hf_dca_scheme_params(const hf_dca_config& c);

// A parameter of dtype "bool" after the switch is 1 or 0 in named_scheme::params; unset, its
// declared default: 1 ("True"), 0 ("False") or -1 ("not causal", T5's bidirectional buckets),
// which named_bool resolves by the call's causality.
double named_bool_default(const scheme_param& p);
bool named_bool(double arg, bool causal);

// The allowed values of a parameter of dtype "str" (its choices), and the index of `value` among
// them: what named_scheme::params carries for it. Throws invalid_argument naming the parameter
// and the allowed values.
std::vector<std::string> param_choices(const scheme_param& p);
double named_choice(const scheme_decl& d, const std::string& param, const std::string& value);

// Whether a declared parameter is a tensor (dtype "tensor"), and its shape for a call of T
// queries, S keys, Hq and Hkv heads of dim D (the declared symbols resolved; throws for a symbol
// it does not know). A scheme reached by name whose parameters include a tensor is a tensor
// scheme: its bias is built per call from the tensors (named_bias_spec below).
bool is_tensor_param(const scheme_param& p);
bool is_tensor_scheme(const scheme_decl& d);
// A tensor parameter in float64 in every call ("tensor64", "bool | tensor64"), and one that may
// be left out, the term then deriving its values ("bool | tensor64").
bool is_f64_tensor_param(const scheme_param& p);
bool is_optional_tensor_param(const scheme_param& p);
// A tensor scheme none of whose tensors may be left out: its model hook computes them.
bool needs_tensors(const scheme_decl& d);
// A symbol other than those (and than an integer) is a free extent, the tensor's own (FIRE's
// width W = 3m + 3): `given`, the shape of the tensor given, fixes it (of the declared rank, else
// invalid_argument); tensor_param_shape_for fixes the one free extent from the element count.
std::vector<int64_t> tensor_param_shape(const scheme_param& p, int64_t T, int64_t S, int64_t Hq,
                                        int64_t Hkv, int64_t D,
                                        std::span<const int64_t> given = {});
std::vector<int64_t> tensor_param_shape_for(const scheme_param& p, int64_t T, int64_t S, int64_t Hq,
                                            int64_t Hkv, int64_t D, int64_t count);
// Whether the declared shape has the extent `symbol` ("T": a row per query, "S": per key).
bool tensor_param_has_extent(const scheme_param& p, const std::string& symbol);
// The shape for messages: the bound extents as numbers, a free one as its symbol ("(2, W)").
std::string tensor_param_shape_text(const scheme_param& p, int64_t T, int64_t S, int64_t Hq,
                                    int64_t Hkv, int64_t D);

// The score bias of a scheme reached by name, in double (the specification), and its bound
// (bias_bounded): what posenc check and the case tables read. args from named_scheme_args. For
// a tensor scheme (which has no bias without its tensors) both throw: use named_bias_spec.
double named_bias_value(const scheme_decl& d, std::span<const double> args, int64_t h, int64_t Hq,
                        int64_t qpos, int64_t kpos);
double named_bias_bound(const scheme_decl& d, std::span<const double> args, int64_t h, int64_t Hq);
// The bias of a scheme reached by name for one call (n: its arguments, tensors included, in
// double; T queries, S keys, Hq query heads, Hkv kv heads of dim D), in double: bias(h, a, b), a
// and b the query's and the key's positions, or their token indices (query i is token S - T + i)
// for a bias of tokens (named_bias_by_token: Forgetting Attention); causal: the call's (a bool
// parameter that defaults to "not causal" follows it). Validates n as the engine does.
std::function<double(int64_t, int64_t, int64_t)> named_bias_spec(const scheme_decl& d,
                                                                 const named_scheme& n, int64_t T,
                                                                 int64_t S, int64_t Hq, int64_t Hkv,
                                                                 int64_t D, bool causal);
// The parameters a case-table row or check of a scheme reached by name runs with: its choice
// parameter at index `choice` (when it has one and choice != 0) and the parameters its hook file
// names for the case tables (named_bias::case_args: T5's max_distance, so that the tables' short
// calls reach the logarithmic and saturated buckets).
std::vector<std::pair<std::string, double>> named_case_params(const scheme_decl& d, int choice);
bool named_bias_by_token(const scheme_decl& d);
// A scheme reached by name that adds relative tables (hooks 2a and 3: Shaw's a^K and a^V, its
// first two tensors, (C, D) each) rather than a score bias: named_bias_spec throws for it.
bool named_relative(const scheme_decl& d);
// For a tensor scheme: a value of its tensor parameter `tensor` (index among its tensors) from a
// standard normal draw z (a pad row's value in the checks); and every tensor for a call with
// args (T queries, S keys, Hq and Hkv heads of dim D), as the case tables and checks draw them,
// from the standard normal draws normal() gives in turn, returning the bound on the derivative
// of one pair's bias (distance <= dmax) by any tensor entry.
double named_tensor_draw(const scheme_decl& d, int tensor, double z);
double named_tensors_draw(const scheme_decl& d, std::span<const double> args, int64_t T, int64_t S,
                          int64_t Hq, int64_t Hkv, int64_t D, double dmax,
                          const std::function<double()>& normal,
                          std::vector<std::vector<double>>& tensors);

// For a q/k transform reached by name (d.transform): the parameters with which the case tables
// and checks run it over positions in [lo, hi], and the bound F >= |A_q(n)^T A_k(m)| (the factor
// by which it can scale a score) over the pairs of such positions (n >= m only when causal); the
// error per entry of its coefficients at positions up to P (the checks' tolerance).
std::vector<std::pair<std::string, double>> named_transform_case(const scheme_decl& d, int64_t lo,
                                                                 int64_t hi);
double named_transform_amplitude(const scheme_decl& d, std::span<const double> args, int64_t lo,
                                 int64_t hi, bool causal);
double named_transform_coef_error(const scheme_decl& d, std::span<const double> args, int64_t P);
// For a scheme on a path of its own (named_path: CoPE): whether d is one, and a bound on what it
// adds to a score given its tensors (declaration order, in double), the head dim D and the
// largest |q_i|.
bool named_path_scheme(const scheme_decl& d);
double named_path_score_bound(const scheme_decl& d, const std::vector<std::vector<double>>& tensors,
                              int64_t D, double qmax);
// The errors of its float32 tiled path beyond the products' own, given also a bound A on |scale
// q . k|, S keys and the unit roundoff u (all 0: no tiled path): of what it adds to a score, of a
// content position (CoPE's sum of gates) and of one gate.
struct path_tiled_errors {
  double score = 0, position = 0, gate = 0;
};
path_tiled_errors named_path_tiled_errors(const scheme_decl& d,
                                          const std::vector<std::vector<double>>& tensors,
                                          int64_t D, double qmax, double A, int64_t S, double u);
// Whether pos has a q/k transform at hook 1: RoPE, M-RoPE or one reached by name that maps both
// (not a query scale); and pos's query scale reached by name (the query temperature), or null.
template <typename Real>
bool qk_transform_on(const attention_position<Real>& pos);
template <typename Real>
const named_scheme* query_scale_on(const attention_position<Real>& pos);
// For a q/k transform reached by name: whether q'_n . k'_m depends on n - m alone (its
// translation check), and the largest factor it puts on |q| at positions 0 .. P.
bool named_transform_relative(const scheme_decl& d);
double named_transform_query_scale(const scheme_decl& d, std::span<const double> args, int64_t P);

// The declarations as a Markdown table (docs/schemes.md) or JSON.
std::string schemes_markdown();
std::string schemes_json();

}  // namespace posenc
