// posenc/encodings/rope_compare.hpp: another engine's RoPE output against posenc's, with a
// tolerance derived for each angle pipeline (exact, f32, hf_f32, ggml_f32), a verdict that names
// the pipeline the engine follows, and hints for the usual mistakes (pair layout, attention
// factor, positions shifted per sequence), each tried under every pipeline. The one
// implementation behind posenc.compare (Python) and `posenc rope compare` (CLI).
//
// Tolerance of an entry (token n at position p, head h, channel c of pair i):
//   tol = atol + (rtol + eps * omega_i * p) * max_c' |candidate(n, h, c')|,
// the candidate being posenc's output under the mode tried. RoPE's rounding errors scale with
// the head's vector, not with the single entry; the angle term is zero on pass-through channels
// [R, D). Per mode, with u_d the unit roundoff of the engine's data (2^-53 float64, 2^-24
// float32, 2^-11 float16, 2^-8 bfloat16), u_w that of posenc's recomputation (float32 for
// float32 and narrower data, float64 for float64) and u = 2^-24:
//
//   exact (posenc's exact angles): rtol = 8 max(u_d, u_e) (a few roundings of the engine's
//     rotation; u_e: the dtype of `expected`), eps = 10 * 2^-53: an engine forming p * omega
//     in float64 from an omega within 2 ulp (a pow and a division: <= 4 * 2^-53 relative) is
//     off by <= 5 * 2^-53 omega p, and an angle error delta moves a rotated pair by
//     <= |delta| |(u', v')| <= 2 |delta| max over the vector.
//
//   named float32 pipelines: the engine and posenc form the same float32 angle theta_i and take
//     cos / sin of it in float32, so what remains is (per output of a pair (u, v) with magnitude
//     a, |cos|, |sin| <= a):
//       cos / sin: each library's float32 cos / sin is within 1 ulp of cos(theta_i) (torch's
//         SLEEF, libm's cosf; posenc's is correctly rounded), so the two differ by <= 2 ulp
//         <= 2u below 1, and by <= 4u a after each side rounds the product with float(a):
//         <= 4u a (|u| + |v|) in the output;
//       the engine's rotation in its data type: two products and a sum, <= 2 u_d a (|u| + |v|);
//         cos / sin cast to a narrower data type first (transformers does), and the input x
//         rounded to it, <= 2 u_d a (|u| + |v|) more;
//       posenc's rotation (one fused multiply-add and a product), <= 2 u_w a (|u| + |v|);
//     so rho = 4u + 4u_d + 2u_w per pair. a (|u| + |v|) <= sqrt(2) |(u', v')| <= 2 max(|u'|,
//     |v'|) turns the pair's scale into the vector's: rtol = 2 rho (float32 data: 20u).
//     The angle: ggml_f32 calls the same libm powf / cosf / sinf as ggml's CPU backend, so
//     theta_i is the same float (measured bit-identical, docs/conventions.md): eps = 0.
//     hf_f32 and f32: torch's float32 pow (SLEEF, 1 ulp) against posenc's correctly rounded
//     one leaves inv_freq up to a few ulp apart (measured: 0 for Llama 2, 1 ulp on one pair for
//     CodeLlama, up to 2 ulp for dynamic NTK past its length); allowing 4 ulp (<= 8u relative)
//     plus the two products' roundings (2u) gives |theta_i' - theta_i| <= 10u omega_i p, and an
//     angle error delta moves a rotated pair by <= |delta| |(u', v')| <= 2 |delta| max: eps = 20u.
//   An engine bit-identical to posenc's pipeline has error 0 (`identical` counts such entries).
//
// Verdict: ok when actual is within tolerance of `expected` (or of posenc's exact output when
// expected is not given); else each named pipeline is recomputed from x and, of those within
// tolerance, the one with the most entries bit-identical (then the smallest summed error
// |actual - candidate|) is the match ("ok as transformers' float32 (hf_f32)"; several pipelines
// can fit, and the one the engine follows reproduces every entry where its angle and rotation
// order agree), reported with its own error and, separately, the distance to exact (max_ratio
// against the reference). Else MISMATCH, with every
// hint that fits: the other pair layout, the output without the attention factor, positions shifted
// by a constant per sequence (d in [-64, 64]), each under exact, f32, hf_f32 and ggml_f32. Without
// x only the ratio of vector norms is examined (a uniform scale: a missing attention factor or
// softmax scale).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "posenc/encodings/rope.hpp"

namespace posenc {

struct rope_compare_input {
  // The engine's output, (B, T, H, D) row-major (D contiguous), as double values; actual_u: the
  // unit roundoff of the type it was computed in (2^-53 float64, 2^-24 float32, 2^-11 float16,
  // 2^-8 bfloat16).
  std::span<const double> actual;
  double actual_u = 0x1p-53;
  // posenc's output for the same input (same shape) in mode `angle`; empty: posenc's exact
  // output is recomputed from x (then x, cfg are required). expected_u as actual_u.
  std::span<const double> expected;
  double expected_u = 0x1p-53;
  // The engine's input (same shape) or empty. Needed for the named pipelines and the hints.
  std::span<const double> x;
  // (B * T,) position of each token, or empty: t within its sequence (when x is given).
  std::span<const int64_t> positions;
  int64_t B = 1, T = 0, H = 1, D = 0;
  std::optional<rope_config> cfg;  // needed with x and for the angle terms
  rope_layout layout = rope_layout::half;
  rope_angle angle = rope_angle::exact;  // the mode `expected` was computed in
  std::optional<double> rtol;            // replaces every mode's rtol when given (>= 0)
  double atol = 0;                       // >= 0
  int64_t seq_len = -1;  // for the frequencies (dynamic, longrope); -1: max position + 1
};

// One candidate: posenc's output under mode `angle`, as given or with one hint applied.
struct rope_compare_fit {
  rope_angle angle = rope_angle::exact;
  std::string hint;    // "" (as given), "layout", "attention_factor", "shift"
  std::string detail;  // the hint in words (e.g. "row 1: +3")
  double rtol = 0, eps = 0;
  double max_error = 0, max_ratio = 0;  // max_ratio <= 1: within tolerance
  double sum_error = 0;                 // sum of |actual - candidate| (ranks the fits)
  int64_t identical = 0, compared = 0;  // entries bit-identical to the candidate / compared
  bool ok = false;
};

struct rope_compare_result {
  bool ok = false;
  std::string verdict;  // "ok", "ok as transformers' float32 (hf_f32)", ..., "MISMATCH"
  // Against the reference (`expected`, or posenc's exact output): the distance to exact.
  rope_angle reference = rope_angle::exact;
  double max_error = 0, max_ratio = 0;
  double tolerance = 0;  // at the worst entry
  double rtol = 0, atol = 0;
  double angle_rtol = 0;                              // eps * omega_i * p at the worst entry
  int64_t worst = 0;                                  // flat index into (B, T, H, D)
  std::optional<int64_t> worst_position, worst_pair;  // pair: of the layout given
  std::vector<double> ratio_by_t;                     // (T,): max over B, H, D
  std::vector<double> ratio_by_pair;                  // (R/2,) when cfg is given
  int64_t rotary_dim = 0;                             // R (cfg given), else 0
  // The named pipelines recomputed as given (when the reference did not pass and x, cfg given),
  // in the order exact, f32, hf_f32, ggml_f32 without the reference's mode.
  std::vector<rope_compare_fit> pipelines;
  std::optional<rope_compare_fit> match;   // the accepting pipeline, when the reference failed
  std::vector<rope_compare_fit> hints;     // accepted (mode, hint) candidates on a mismatch
  std::string norm_hint;                   // without x: a uniform scale of every vector
  int64_t B = 1, T = 0, H = 1, D = 0;      // the shape compared
  rope_layout layout = rope_layout::half;  // the layout given
};

// "exact angles (exact)", "plain float32 angles (f32)", "transformers' float32 (hf_f32)",
// "ggml's float32 (ggml_f32)".
std::string rope_angle_description(rope_angle a);

// Runs the comparison. Throws invalid_argument naming the argument for: shapes that do not
// match (actual, expected and x of B * T * H * D values, positions of B * T), neither expected
// nor x and cfg, negative positions, D != cfg head_dim, rtol or atol < 0 or not finite,
// a unit roundoff outside (0, 1).
rope_compare_result rope_compare(const rope_compare_input& in);

// The verdict printed by the CLI and str() in Python: first line the verdict with its error
// and tolerance, then the distance to exact, the other pipelines within tolerance, the hints.
std::string rope_compare_text(const rope_compare_result& r);

// The hints in words, one per kind (layout, attention factor, shift) that fits under some mode:
// the closest mode first (ranked as the match) ("matches the other pair layout (interleaved) under
// transformers' float32 (hf_f32); ..."), the other modes it also fits under after it; then
// norm_hint when set.
std::vector<std::string> rope_compare_hints(const rope_compare_result& r);

}  // namespace posenc
