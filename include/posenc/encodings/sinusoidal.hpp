// posenc/encodings/sinusoidal.hpp: the fixed sinusoidal absolute encoding.
//
// Vaswani et al. (2017), "Attention Is All You Need", section 3.5:
//   PE(pos, 2r)   = sin(pos * omega_r)
//   PE(pos, 2r+1) = cos(pos * omega_r),        omega_r = base^(-2r/d),  r = 0 .. d/2 - 1
// with base = 10000. Each pair (sin, cos) of one frequency is a point on the unit circle that
// turns by angle omega_r per position, so PE(pos + k) = R(k) PE(pos) pair by pair, with R(k) a
// rotation that does not depend on pos (Vaswani et al. 2017, sec. 3.5, "PE_{pos+k} can be
// represented as a linear function of PE_{pos}").
//
// Two conventions differ between public implementations (see docs/conventions.md):
//   layout       interleaved  [s0 c0 s1 c1 ... s_{d/2-1} c_{d/2-1}]   (paper, seeds)
//                halves       [s0 s1 ... s_{d/2-1} | c0 c1 ... c_{d/2-1}] (tensor2tensor, GPT-J)
//   denominator  width           omega_r = base^(-2r/d)                (paper, seeds)
//                half_minus_one  omega_r = base^(-r/(d/2 - 1))          (tensor2tensor, fairseq)
// With half_minus_one the lowest frequency is exactly 1/base; for d = 2 there is one pair and
// the denominator d/2 - 1 = 0 is replaced by 1 (tensor2tensor's max(num_timescales - 1, 1)),
// giving omega_0 = 1.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"

namespace posenc {

enum class sin_layout { interleaved, halves };
enum class sin_denominator { width, half_minus_one };

// "interleaved" / "halves"; "width" / "half-minus-one" (the CLI spellings).
const char* sin_layout_name(sin_layout l);
const char* sin_denominator_name(sin_denominator d);
// Inverse of the above; throws invalid_argument naming `arg` and the allowed values.
sin_layout parse_sin_layout(const std::string& s, const std::string& arg = "layout");
sin_denominator parse_sin_denominator(const std::string& s, const std::string& arg = "denominator");

struct sinusoidal_params {
  int64_t width = 0;      // d: channels per position; even, >= 2
  double base = 10000.0;  // finite, > 1
  sin_layout layout = sin_layout::interleaved;
  sin_denominator denominator = sin_denominator::width;
};

// Largest width accepted (2^24 channels); larger widths are rejected before any allocation.
inline constexpr int64_t sinusoidal_max_width = int64_t{1} << 24;

// Throws invalid_argument naming the argument, the value and the allowed values when width is
// odd, < 2 or > sinusoidal_max_width, or base is not finite or not > 1.
void sinusoidal_validate(const sinusoidal_params& p);

// omega_r for r = 0 .. d/2 - 1 (see the file comment for both denominators). Computed as
// exp(-e * log(base)) in long double, then rounded: within 1 ulp of the exact value.
std::vector<double> sinusoidal_frequencies(const sinusoidal_params& p);
// 2*pi / omega_r, r = 0 .. d/2 - 1 (2*pi for r = 0; 2*pi*base^((d-2)/d) for the last pair).
std::vector<double> sinusoidal_wavelengths(const sinusoidal_params& p);

// Channel index of the sine (is_cos = false) or cosine (is_cos = true) of pair r:
//   interleaved: 2r / 2r+1;  halves: r / d/2 + r.
int64_t sinusoidal_channel(const sinusoidal_params& p, int64_t r, bool is_cos);

// The 2x2 rotation R(k) for one frequency, row-major {a, b, c, e}:
//   [sin((pos+k) w)]   [ cos(kw)  sin(kw)] [sin(pos w)]
//   [cos((pos+k) w)] = [-sin(kw)  cos(kw)] [cos(pos w)]
// (angle addition: sin(x+y) = sin x cos y + cos x sin y, cos(x+y) = cos x cos y - sin x sin y).
// It does not depend on pos. k may be any real number (negative shifts move backwards).
std::array<double, 4> sinusoidal_shift_rotation(double omega, double k);

// Table rows for each position. out: (N, d) row-major, d contiguous, N = positions.size(),
// channels in p.layout order. Angles theta = pos * omega_r are formed in double, reduced to
// about [-pi, pi] before std::sin/std::cos: omega_r is held as a double-double (hi + lo, from
// long double), pos * hi is split exactly with an FMA, and 2*pi is subtracted in three
// Cody-Waite pieces. The reduced angle is therefore accurate to a few ulp whatever the
// position, instead of losing pos * omega * 2^-53 to the rounding of pos * omega.
// Computed with Highway (src/encodings/tables_simd.cpp: the same reduction lane-wise, then one
// double sin-and-cos kernel) with position rows in parallel; POSENC_REFERENCE=1 runs the plain
// per-entry loop with libm sin/cos instead.
// Error bound: see sinusoidal_entry_error_bound (about 1e-15 plus 2e-19 * pos * omega for
// base 1e4); the float overload rounds that double result once more (+2^-25). Errors: width/base as
// in sinusoidal_validate; any negative position (names its index); out.size() != N*d; N*d*8 bytes
// above max_alloc_bytes (posenc::checked_bytes). Positions up to 2^53 are accepted (larger lose
// integer exactness in double and are rejected).
void sinusoidal_table(const sinusoidal_params& p, std::span<const int64_t> positions,
                      std::span<double> out);
void sinusoidal_table(const sinusoidal_params& p, std::span<const int64_t> positions,
                      std::span<float> out);
std::vector<double> sinusoidal_table(const sinusoidal_params& p,
                                     std::span<const int64_t> positions);

// A bound on |sinusoidal_table entry - exact value| for positions <= max_position, derived
// from the arithmetic (see sinusoidal.cpp): 10 * 2^-53 for the reduced angle (8) and the
// vectorised sin/cos (< 1.8 * 2^-53, src/core/sincos_simd-inl.h), plus max_position * omega_0
// * (4 ln(base) + 3) * 2^-64 for the long-double frequency (omega_0 = 1 is the largest frequency).
// The reference obeys the same bound, so |fast - reference| <= 2 * bound.
double sinusoidal_entry_error_bound(const sinusoidal_params& p, int64_t max_position);

// The specification: every entry as sinl/cosl of (long double)pos * omega_r in long double
// (omega_r computed in long double), no reduction tricks, rounded to double once. Slow; used by
// tests and checks to bound sinusoidal_table. Same validation as sinusoidal_table.
void sinusoidal_table_reference(const sinusoidal_params& p, std::span<const int64_t> positions,
                                std::span<double> out);

// h_i = E(token_i) + PE(pos_i), the original transformer's input (Vaswani et al. 2017, sec. 3.5:
// "we add positional encodings to the input embeddings"). token_embeddings, out: (N, d),
// N = positions.size(); out may alias token_embeddings (in place). Throws invalid_argument on
// size mismatch or any error sinusoidal_table would throw.
void add_positions(std::span<const float> token_embeddings, const sinusoidal_params& p,
                   std::span<const int64_t> positions, std::span<float> out);

// Data for plots and checks.
// PE(0) . PE(k) = sum_r cos(k omega_r) for k = 0 .. max_offset (max_offset + 1 values), in
// double. It oscillates rather than decreasing monotonically.
std::vector<double> sinusoidal_dot_profile(const sinusoidal_params& p, int64_t max_offset);
// || PE(i) - PE(j) ||_2 over all pairs of positions 0 .. n-1, i != j: the smallest value and
// the largest distance between neighbours |i - j| = 1. n >= 2.
struct sinusoidal_distance_stats {
  double min_pairwise = 0;       // smallest distance between distinct positions
  int64_t min_i = 0, min_j = 0;  // where it occurs
  double max_neighbour = 0;      // largest distance between consecutive positions
};
sinusoidal_distance_stats sinusoidal_distances(const sinusoidal_params& p, int64_t n);

}  // namespace posenc
