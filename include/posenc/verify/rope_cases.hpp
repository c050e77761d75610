// posenc/verify/rope_cases.hpp: the RoPE family's one case table (the apply kernels).
//
// A case is a shape (T tokens, H heads, Hk key heads for rope_apply_qk, head dim D, rotary
// width R), a layout, a direction, the frequencies (theta, yarn factor), the positions and a
// seed; build() draws its inputs. The same cases feed `posenc check --group rope` (check_cases,
// after the property checks of rope_checks()), ctest (full_cases: tests/test_rope_simd.cpp) and
// `posenc bench` (perf_cases), through one function, check_case, which runs the case's mode in
// float32 and float64 and returns a check_result built with measured_check:
//   reference  the entry point (rope_apply, rope_apply_qk or rope_unrotate: the Highway SIMD
//              kernels, exact angles) against the binary128 rope_apply_reference, in place;
//              max_error is the worst |y - reference| / bound over the rotated channels (tolerance
//              1); a pass-through channel [R, D) that is not a bit-exact copy counts as infinity
//   plain      rope_rotate (SIMD) against rope_rotate_plain on the same cos/sin row, H heads
//              head_stride apart (the gaps and channels [R, D) must stay untouched, bit for bit)
//   fused      rope_apply_qk against rope_apply on q and then on k, forward and inverse, in the
//              case's angle mode: bit for bit (max_error = differing elements, tolerance 0)
//
// ---- reference bound (derived; u = 2^-53, u_f = 2^-24; a = the scale the entry applies:
// attention_factor for rope_apply and rope_apply_qk, 1 / attention_factor for rope_unrotate;
// per element of a pair (x_u, x_v), against the exact rotation):
//   cos/sin row (exact mode): <= 2.5 u absolute before scaling by a (src/core/sincos_simd-inl.h:
//     < 1.8 u from the reduced-angle kernel + one rounding of the first-order correction),
//     + 1 u relative for the multiply by a.
//   double rotation: y = fma(x_u, c, -(x_v s)): the product x_v s rounds (u |x_v s|) and the fma
//     rounds (u |y|): with the cos/sin error, |y - exact| <= (2.5 + 1 + 2) u a (|x_u| + |x_v|)
//     = 5.5 u a (|x_u| + |x_v|).
//   float rotation: c, s rounded to float (u_f a each), then the same two roundings in float:
//     |y - exact| <= 3 u_f a (|x_u| + |x_v|) + 5.5 u a (|x_u| + |x_v|).
//   The reference runs on the input rounded to the element type, so input rounding cancels; its
//   own error (binary128 reduction, long double sin/cos) is below 1e-18 relative.
// ---- plain bound: both kernels get the same c, s and differ only in fma vs product-then-add:
//   each output differs by <= 2 roundings of |x_u c| + |x_v s| <= |x_u| + |x_v| (|c|, |s| <= 1)
//   on each side: |simd - plain| <= 4 u_T (|x_u| + |x_v|), u_T the unit roundoff of the type.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/rope.hpp"

namespace posenc::rope_cases {

enum class mode { reference, plain, fused };
enum class entry { apply, apply_qk, unrotate };
const char* name(mode m);   // "reference", "plain", "fused"
const char* name(entry e);  // "apply", "apply_qk", "unrotate"

// Element types check_case runs a case in (bit set).
enum dtype_bits : unsigned { f32 = 1, f64 = 2 };

struct spec {
  mode m = mode::reference;
  entry e = entry::apply;  // reference mode: which entry point; fused: always apply_qk
  int64_t T = 1, H = 1;    // tokens; heads (apply_qk: query heads)
  int64_t Hk = 0;          // apply_qk (reference and fused): key heads
  int64_t D = 2, R = 2;    // head dim, rotary width (even, <= D)
  rope_layout layout = rope_layout::half;
  rope_angle angle = rope_angle::exact;  // fused mode; the others run exact angles
  bool inverse = false;                  // apply, apply_qk: the transpose (backward)
  double theta = 1e4;
  double factor = 1;  // != 1: yarn with original_max_position_embeddings 4096 (a != 1)
  // Positions: explicit (size T) when given; else drawn uniformly below pos_max, or t for token
  // t when pos_max = 0. plain mode: the cos/sin row of positions[0].
  std::vector<int64_t> positions{};
  int64_t pos_max = 10000000;
  int64_t head_stride = 0;  // plain mode: heads this many elements apart (>= D)
  unsigned dtypes = f32 | f64;
  uint64_t seed = 0;
  // The generator at the case's first draw; empty: rng(seed). The full list's cases replay the
  // streams of the tests they came from (each case starting where the one before stopped), so
  // they draw the very data those tests drew.
  std::optional<rng> stream{};
  std::string group{};  // the list's section (a ctest selects its cases by group)
  std::string name{};   // unique within its list; the bench case name for perf_cases
};

// Every field, for messages: "mode=reference entry=apply T=17 H=3 D=59 R=58 layout=half ...".
std::string describe(const spec& c);

// The frequencies of a case (rope_frequencies of its config).
rope_freqs freqs(const spec& c);

// Everything one case owns: inputs drawn in double (the float32 run rounds them once).
struct fixture {
  rope_freqs f;
  std::vector<int64_t> pos;      // (T,), plain mode (1,)
  std::vector<double> x;         // (T, H, D); plain mode: (H, head_stride)
  std::vector<double> k;         // apply_qk: (T, Hk, D)
  std::vector<double> x64, k64;  // fused mode: the float64 run's own q and k
};

// Draws the case's positions and inputs from c.stream (or rng(c.seed)), in the order the tests
// drew them: positions, x, k, then (fused) x64, k64.
void build(fixture& fx, const spec& c);
// The same draws from g (advances g as build does); the lists use it to chain streams.
void draw(fixture& fx, const spec& c, rng& g);

// The reference bound's unit above, per element: bound = reference_unit<Real>() a (|x_u| +
// |x_v|): 5.5 u for double, 3 u_f + 5.5 u for float.
template <typename Real>
double reference_unit();
// The reference mode's measure on rows (T H) of width D: the worst |y - ref| / bound over channels
// [0, R), infinity when a channel [R, D) of y is not a bit-exact copy of x, NaN when y holds a
// non-finite value. x, y in the element type, ref in double; scale = a above.
template <typename Real>
double reference_ratio(rope_layout l, int64_t R, int64_t D, double scale, std::span<const Real> x,
                       std::span<const Real> y, std::span<const double> ref);

// Runs the case's mode in every element type of c.dtypes (group "rope", name c.name).
check_result check_case(const spec& c);

// The small list of `posenc check --group rope` (milliseconds): every entry point in both layouts
// with partial rotary and a != 1, positions near 1e7 and 2^40, the plain loops on strided heads
// and the fused q-and-k path in both angle modes.
const std::vector<spec>& check_cases();
// Everything ctest covers (tests/test_rope_simd.cpp), by group: awkward_shapes (T in 1, 3, 17,
// 129; H in 1, 3, 32; D in 32, 59, 80, 96, 128 with partial R), huge_positions, plain_strided,
// fused_qk, apply_qk_reference, unrotate_reference.
const std::vector<spec>& full_cases();
// The shapes of `posenc bench` (rope_apply_qk in place, float32, H = Hk = 32, D = R = 128,
// positions 0 .. T-1, T = 4096, 32768, 1, both layouts), named as its cases.
const std::vector<spec>& perf_cases();
// The reduced problem a perf case is validated on before timing: the tokens 0, T/3, T/2 and T-1
// (their positions) of the same shape, layout and seed, in reference mode.
spec perf_validation_case(const spec& c);

}  // namespace posenc::rope_cases
