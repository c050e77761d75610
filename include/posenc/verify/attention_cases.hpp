// posenc/verify/attention_cases.hpp: the attention family's one case table.
//
// A case is a shape (T, S, D, Hq, Hkv), a position scheme, a mask and a seed; build() draws its
// inputs and the magnitudes A (max scaled score), B (max bias) and V (max |v| + max |a^V|) that
// the tolerances below are derived from. The same cases feed `posenc check --group attention`
// (check_cases), ctest (full_cases: tests/test_attention.cpp, tests/test_attention_backward.cpp)
// and `posenc bench` (perf_cases), through two functions, one per mode:
//   check_case  the tiled path against the reference (the specification): forward out and lse,
//               backward dq, dk, dv and every position parameter's gradient, float32 and float64
//   grad_case   the double reference backward against central finite differences of the double
//               reference forward, every input and every position parameter
// each returning a check_result built with measured_check: max_error is the worst ratio
// |error| / tolerance over every compared entry (tolerance 1), and detail names the worst
// quantity with its absolute error and tolerance.
//
// ---- Forward tolerance (derived; u = unit roundoff of the element type: 2^-24 float, 2^-53
// double). Let A = max over (h, i, j) of scale * a^2 * |q_i| (|k_j| + |a^K|max) (a = RoPE
// attention factor; rotation preserves norms, so by Cauchy-Schwarz A bounds every scaled dot
// product and the absolute sums sum_d |q_d| |k_d| it rounds against), B = max |bias_ij| (the biases
// + T5), and V = max|v| + max|a^V|.
//   score:    D-term dot product (gamma_D <= D u), the rotation of q and k in the element
//             type (<= 4u relative each), the scale multiply (folded into q on the SIMD path)
//             and bias add (2u of |s|):
//             |ds| <= (D + 11) u A + 2u (A + B) [+ E_z]
//             E_z: CoPE's float32 tiled path, whose positions sum float32 gates (its derivation
//             beside cope_tiled_score_error, src/attention/hook_cope.cpp; fixture::Ez)
//   probs:    p = exp(s - m) with s - m in [-2(A+B), 0]:
//             |dp|/p <= 2|ds| + 4u (A + B) + 2u =: e_p
//             (the running max m is one of the scores, so it carries the same |ds|)
//   sums:     l and acc are sums of S non-negative / bounded terms with one rescale per key
//             block: relative error <= (S + 2 S/Bk + 4) u <= (2S + 4) u; Shaw-V adds a sum of
//             2K+1 terms: (2K+1) u. The split decode path (chunks of 2 Bk keys when S > 2 Bk,
//             merged in order) gives a term at most 2 Bk + nch - 1 <= S additions and 2 rescales
//             (4u <= 2 S/Bk u): the same bound
//   output:   |do| <= (2 e_p + (2S + 2K + 8) u) * V
//   lse:      |dlse| <= e_p + (2S + 4) u + u |lse|
// Both sides carry their own rounding, and the reference's (double) is far below the float
// bound, so the bound applies to their difference.
//
// ---- bfloat16 products (attention_products::bf16; u_b = 2^-8, the unit roundoff of bfloat16;
// u = 2^-24). The fast path rounds q' (after hook 1, before the scale) and k' (after hook 1) to
// bfloat16, |x_b - x| <= u_b |x|, then forms q'_b . k'_b with exact products summed in float32
// and multiplies by the scale; p = exp(s - m) is rounded to bfloat16 before the P V product, v
// too, and l sums the unrounded float32 p. vdpbf16ps flushes denormals: at most 2^-126 per step.
// r_q = 1 when q is rounded (hook 1 transforms it, or it is not stored in bfloat16), else 0;
// r_k and r_v likewise for k and v. Then, with the float32 terms above:
//   score:    |ds| <= (r_q + r_k) u_b (1 + u_b) A + (D + 11) u A + 2u (A + B) + D 2^-125
//             (scale * sum |q_d| |k_d| <= A bounds the effect of the operand roundings)
//   probs:    e_p as above, with this |ds|
//   output:   the P rounding adds sum_j |dp_j| |v_j| / l <= (u_b + 2^-126 S) V (l >= 1: the row's
//             maximum contributes exp(0)), v's rounding r_v u_b V, and both scale the float32
//             sums' error by at most (1 + u_b):
//             |do| <= ((2 e_p + (2S + 2K + 8) u) (1 + u_b) + (1 + r_v) u_b + 2^-126 S) V
//   lse:      as above (l and m never see the bfloat16 p).
// A CPU without vdpbf16ps (and decode-like calls) runs float32 products on the exact values,
// whose errors are the float32 terms alone: the same bound holds.
//
// ---- Backward tolerance (derived; u = unit roundoff of the element type; forward quantities
// as above: A bounds every scaled score, B every bias, V = max|v| + max|a^V|,
// e_s = (D + 10) u A + 2u (A + B) bounds a score's error, tol_out the output's, e_lse the lse's):
//   W     = max_i |dO_i|_2 (max_j |v_j|_2 + max_c |a^V_c|_2) bounds |dP_ij| and |D_i|
//   e_P   = 2 e_s + e_lse + 4u                      relative error of p = exp(s - lse)
//   E_S   = 2 W e_P + (D + 4) u W + (D + 2) u W + |dO|_1 tol_out + 4u W
//           bounds |error of dS_ij| / p_ij (dS = p (dP - D) with |dP - D| <= 2W)
//   Since sum_j p_ij = 1 per row, a row's sum_j |dS_ij| <= 2W, and a key's column is summed over
//   at most N = G T rows (sum_i p_ij <= N):
//   dq    scale Kinf (E_S + 2W (S + C + 12) u)      Kinf = max|k'| + max|a^K|, C = 2K+1
//   dk    scale Qinf N (E_S + 2W (N + 12) u)        Qinf = max|q'| (rotation: a sqrt(2) max|q|)
//   dv    N Oinf (e_P + (N + 4) u)                  Oinf = max|dO|
//   dT5   T E_S;  dslope: T E_S dmax;  da^K: scale Qinf Hq T E_S;  da^V: Hq T Oinf e_P
//         (parameter gradients accumulate in double: only the dS errors count)
// plus the reference's own rounding to the element type (u |x|). For float64 both sides are
// double computations with errors of the same form: the bound is doubled.
//
// ---- Finite differences (grad_case): central differences at steps h and 2h, h = 1e-3
// (|x| <= ~4). The truncation error of FD(h) is ~ |FD(2h) - FD(h)| / 3 (Richardson), the
// rounding error of the loss L = sum dO . out is at most delta_L = 64 (S + D) u (1 + A + B)
// sum|dO| V, so tol = |FD(2h) - FD(h)| + 2 delta_L / h + 64 (S + D) u (|g| + 1).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "posenc/attention/attention.hpp"
#include "posenc/core/check.hpp"
#include "posenc/core/rng.hpp"

namespace posenc {
struct scheme_decl;  // posenc/attention/schemes.hpp
}  // namespace posenc
namespace posenc::attention_cases {

enum class scheme {
  none,
  rope_half,
  rope_interleaved_partial,  // rotary_dim = (D / 4) * 2, interleaved layout
  all,   // YaRN RoPE (attention factor != 1) + the first bias reached by name whose values
         // derive from its parameters (all_named_derived()) + the first trained
         // tensor bias reached by name (all_named_bias()) + the first relative tables
         // reached by name (all_named_relative(): Shaw) + the first query scale reached
         // by name (all_named_query_scale(): the temperature, after the rotation, as
         // Ministral 3's) at once
  mrope  // M-RoPE, (3, n) ids near the 1-D positions; contiguous sections (Qwen2-VL) for even
         // seeds, interleaved (Qwen3-VL) for odd; half pair layout, interleaved every other pair
         // of seeds
};
enum class mask {
  none,
  causal,
  padding,     // ~25% of the keys padded, at least one
  cu_seqlens,  // packed documents of 1..20 keys (T <= S)
  doc_ids,     // per-token document ids
  window,
  causal_window,
  everything,  // causal + padding + cu_seqlens + window
  positions    // explicit positions: any order, large offsets, a few pads (also when T > S)
};
// The schemes above; the sampled lists draw from these. From kSchemes on, scheme values are
// the schemes reached by name (schemes.hpp: named_scheme_decls(), at their default parameters),
// which every "every scheme" list covers too: scheme_count() = kSchemes + their number.
inline constexpr int kSchemes = static_cast<int>(scheme::mrope) + 1;
int scheme_count();
inline constexpr int kMasks = static_cast<int>(mask::positions) + 1;
const char* name(scheme s);
// True for the schemes on a path of their own that needs float32 / float64 q, k, v and float32
// products (CoPE, and the per-pair RoPE schemes reached by name): the half-precision and
// bfloat16-product groups leave them out.
bool float_kv_only(scheme s);
// True for a scheme reached by name on a path of its own (CoPE: named_path_scheme): no sinks
// there, and a finer step for its finite differences (its kinks).
bool own_path(scheme s);
// True for a per-pair RoPE scheme reached by name (scheme_decl::pairs: Self-Extend, DCA,
// StreamingLLM).
bool rope_pairs_scheme(scheme s);
// The first trained score bias reached by name whose parameter is a tensor and which depends on
// the offset alone (declaration order: T5), which the scheme `all` composes with the member
// schemes; and its row of the enum (where the tests want a table bias).
const posenc::scheme_decl& all_named_bias();
scheme offset_bias_scheme();
// The first score bias reached by name whose switch may be True, its values then derived from
// its parameters with no draw (is_optional_tensor_param: the slopes of a linear bias), which
// `all` composes too; and its row (the cheap bias of the length, large-score, sink and bench rows).
const posenc::scheme_decl& all_named_derived();
scheme derived_bias_scheme();
// The first scheme reached by name that adds relative tables (Shaw's a^K, a^V), which `all`
// composes too, and its row of the enum.
const posenc::scheme_decl& all_named_relative();
const posenc::scheme_decl& all_named_query_scale();
scheme relative_scheme();
// The number of schemes that are not (the half-precision groups' count).
int half_kv_scheme_count();
const char* name(mask m);

// What a case is run for (bit set).
enum pass : unsigned {
  forward = 1,   // check_case: tiled forward vs reference forward
  backward = 2,  // check_case: tiled backward vs reference backward (on the tiled forward)
  grad = 4,      // grad_case: reference backward vs finite differences (double)
};
// Element types check_case runs a case in (bit set).
enum dtype_bits : unsigned { f32 = 1, f64 = 2 };

struct spec {
  int64_t T = 0, S = 0, D = 0, Hq = 0, Hkv = 0;
  scheme sch = scheme::none;
  mask msk = mask::none;
  uint64_t seed = 0;
  double q_scale = 1;   // multiplies q (large-score cases)
  int64_t k_shift = 0;  // added to every key position of mask::positions (far offsets)
  unsigned passes = forward | backward;
  unsigned dtypes = f32 | f64;
  std::string group{};    // the list's section (a ctest selects its cases by group)
  std::string name{};     // unique within its list; the bench case name for perf_cases
  bool extended = false;  // perf list: a long case, run by `posenc bench --extended` only
  bool perf = false;      // perf list: a scheme reached by name at its defaults (no case_args)
  // Keys and values stored in half precision (float32 forward only): the fixture rounds k and v
  // to this format and passes them as k16 / v16; the reference reads the same stored values,
  // so the float32 tolerance applies unchanged (the storage rounding is an input, not an error
  // of the kernel; its effect against unrounded inputs is bounded in tests/test_attention.cpp).
  kv_storage kv = kv_storage::f32;
  // Keys and values passed head-major (attention_params::kv_head_stride, forward only): the
  // fixture lays them out (Hkv, S + kHeadMajorPad, D), the pad rows of every head NaN, so a read
  // past a head's S rows poisons the output and fails the case.
  bool head_major = false;
  // With head_major: keys in 8-key blocks (attention_params::k_blocked; D a multiple of 8). The
  // fixture lays each head's keys out as ceil((S + kHeadMajorPad) / 8) blocks, the unused slots
  // NaN; values stay head-major rows with the same head stride.
  bool k_blocked = false;
  // Queries stored in half precision too (float32 forward only; kv must be f16 or bf16): the
  // fixture rounds q to kv's format and passes it as q16 (attention_params::q_storage).
  bool q_half = false;
  // The forward's block products (attention_params::products; float32 forward only). bf16: the
  // tolerance below, "bfloat16 products".
  attention_products products = attention_products::f32;
  // Attention sinks (attention_params::sinks): one logit per query head, 1.5 N(0, 1) from the
  // case's seed; the tolerances hold unchanged (the sink only lowers the weights of the values
  // and adds one term to l), and the backward checks dsinks too.
  bool sinks = false;
  // A scheme reached by name with a choice parameter (dtype "str"): the index of its value
  // among the declared choices (0 = the first); its default elsewhere.
  int choice = 0;
};
inline constexpr int64_t kHeadMajorPad = 3;

// Every field, for messages: "T=17 S=64 D=80 Hq=8 Hkv=4 scheme=rope_half mask=causal seed=7 ...".
std::string describe(const spec& c);

// Everything one case owns (the params struct only points into it).
template <typename Real>
struct fixture {
  std::vector<Real> q, k, v, out_ref, out_fast, lse_ref, lse_fast;
  std::vector<uint16_t> k16, v16;  // spec::kv != f32: k and v as stored (k, v hold them widened)
  std::vector<uint16_t> q16;       // spec::q_half: q as stored (q holds it widened)
  std::vector<Real> k_hm, v_hm;    // spec::head_major: k, v (or k16, v16) laid out head-major
  std::vector<uint16_t> k16_hm, v16_hm;
  std::vector<uint8_t> pad;
  std::vector<int64_t> cu, qdoc, kdoc, qpos, kpos;
  rope_freqs freqs;
  attention_params<Real> p;    // out and lse unset
  double A = 0, B = 0, V = 0;  // the magnitudes of the tolerance derivation
  double qs = 1;  // largest query temperature s(qpos) (scheme temperature; q' = s q, dq = s dq')
  std::vector<Real> sinks;      // spec::sinks: the sink logits (Hq,)
  std::vector<int64_t> mq, mk;  // M-RoPE ids (3, T) and (3, S)
  // A tensor scheme reached by name (schemes.hpp, is_tensor_scheme): each declared tensor's
  // values, in declaration order (p.pos.named[0].tensors views them); a float64 one
  // (is_f64_tensor_param: a bias's slopes) in named64 at its index instead (named[x] then empty).
  std::vector<std::vector<Real>> named;
  std::vector<std::vector<double>> named64;
  std::vector<std::string> named_names;  // their parameters' names
  int rel = -1;  // index in `named` of a relative scheme's a^K (a^V follows); -1 = none
  // A scheme on a path of its own (CoPE): its declaration and the index of its first tensor in
  // `named` (its score bound enters B: named_path_score_bound); null = none.
  const scheme_decl* path = nullptr;
  size_t path_first = 0;
  // Its float32 tiled path's errors beyond the products' (CoPE's positions from float32 gates:
  // named_path_tiled_errors): in what it adds to a score (Ez), a position, a gate; 0 for float64
  // and the others.
  double Ez = 0, Ep = 0, Eg = 0;
  int64_t rel_K = 0;  // its clip K (tables of 2K + 1 rows)
  double G = 0;       // bound on |d bias / d parameter| over the pairs (FIRE, tensor schemes)
  double F = 1;  // xPos: bound on zeta^((n - m) / B) over the pairs (|q'_n . k'_m| <= F |q||k|)
};

// Draws the case's inputs (q ~ q_scale N(0, 1), k, v ~ N(0, 1)), masks, positions and scheme
// parameters from c.seed, and A, B, V. Explicit positions are drawn for mask::positions and
// whenever T > S.
template <typename Real>
void build(fixture<Real>& f, const spec& c);

// n draws of N(0, 1) from seed, in the element type (dO of the backward cases).
template <typename Real>
std::vector<Real> random_normal(size_t n, uint64_t seed) {
  rng r(seed);
  std::vector<Real> x(n);
  for (auto& e : x) e = static_cast<Real>(r.normal());
  return x;
}

// The gradients of one backward call on f.p, owning their buffers (filled with -7 so that an
// entry the backward forgets shows): dq, dk, dv always; dsinks and the tensors of the schemes
// reached by name when the scheme is on.
template <typename Real>
struct grads {
  std::vector<Real> dq, dk, dv, dsi;
  std::vector<std::vector<Real>> dnamed;      // a tensor scheme's tensors, as fixture::named
  std::vector<std::vector<double>> dnamed64;  // and as fixture::named64
  attention_grads<Real> g;
  grads(const fixture<Real>& f, const Real* out, const Real* lse, const Real* dout) {
    const auto& p = f.p;
    dq.assign(p.T * p.Hq * p.D, Real(-7));
    dk.assign(p.S * p.Hkv * p.D, Real(-7));
    dv.assign(p.S * p.Hkv * p.D, Real(-7));
    g.out = out, g.lse = lse, g.dout = dout;
    g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
    if (!p.sinks.empty()) {
      dsi.assign(p.sinks.size(), Real(-7));
      g.dsinks = dsi.data();
    }
    dnamed.resize(f.named.size());
    dnamed64.resize(f.named.size());
    for (size_t x = 0; x < f.named.size(); ++x) {
      dnamed[x].assign(f.named[x].size(), Real(-7));
      dnamed64[x].assign(f.named64[x].size(), -7.0);
      g.named.push_back({f.named_names[x], dnamed[x], dnamed64[x]});
    }
  }
};

// The forward bounds above: |out_fast - out_ref| <= out; a row's |lse_fast - lse_ref| <=
// lse + u |lse_ref|.
struct forward_tolerances {
  double out = 0, lse = 0, u = 0;
};
template <typename Real>
forward_tolerances forward_tolerance(const fixture<Real>& f, const spec& c);

// The backward bounds above (per entry, plus u |reference|). dout: (T, Hq, D); lse: (T, Hq) of
// the forward the backward runs on.
struct backward_tolerances {
  double dq = 0, dk = 0, dv = 0, dak = 0, dav = 0, dpar = 0;  // dpar: a named
                                                              // tensor: T E_S G
};
template <typename Real>
backward_tolerances backward_tolerance(const fixture<Real>& f, const spec& c,
                                       std::span<const Real> dout, std::span<const Real> lse);

// check mode: the passes forward and backward of c.passes, in every element type of c.dtypes.
check_result check_case(const spec& c);
// The same for a float32 forward case (passes = forward, dtypes = f32; invalid_argument
// otherwise) on a fixture already built from it (build(f, c)), whose params may point at copies
// of its arrays (the bench's 2 MiB pages): what is checked is then what is timed, and the
// inputs are drawn once.
check_result check_case(const spec& c, fixture<float>& f);
// grad mode: the reference backward vs central finite differences, in double (any c.passes).
check_result grad_case(const spec& c);

// The small list of `posenc check --group attention` (well under a second in Release): every
// scheme and every mask on small GQA shapes in check and grad mode, plus a block-edge shape and
// a decode step in check mode.
const std::vector<spec>& check_cases();
// Everything ctest covers: the sections (group) of tests/test_attention.cpp and
// tests/test_attention_backward.cpp, with their shapes and seeds.
const std::vector<spec>& full_cases();
// Whether case c needs T <= S (its queries the last T of its keys): cu_seqlens and "everything"
// (which includes it) align queries with the last keys, and a bias of tokens (named_bias_by_token:
// Forgetting Attention's gates) reads the query's token in the key sequence.
bool needs_t_within_s(const spec& c);
// The shapes of `posenc bench` (float32, causal, Hq = 32, Hkv = 8, D = 128), named as its cases:
// forward T = S = 2048 with none / rope / each scheme reached by name, decode T = 1 against
// S = 8192, backward T = S = 2048 with none / the derived bias (derived_bias_scheme()).
const std::vector<spec>& perf_cases();
// The reduced problem a perf case is validated on before timing (the reference at T = S = 2048
// would take minutes): the last min(T, 16) queries against all S keys for the forward (128 for
// bfloat16 products, enough items for the packed path where they run), the
// prefix T = S = min(T, 192) for the backward; the same scheme and seed.
spec perf_validation_case(const spec& c);

}  // namespace posenc::attention_cases
