// posenc/verify/table_cases.hpp: the table kernels' one case table (the sinusoidal table's
// fast path and the ALiBi bias rows of src/encodings/tables_simd.cpp against their scalar
// specifications).
//
// A case is a kind, its parameters, its positions (explicit or drawn) and a seed; build() draws
// its inputs. The same cases feed `posenc check --group sinusoidal` and `--group alibi`
// (check_cases, after the property checks), ctest (full_cases: tests/test_tables_simd.cpp) and
// `posenc bench` (perf_cases), through one function, check_case, which returns a check_result
// built with measured_check:
//   sinusoidal  sinusoidal_table (float64 and/or float32) against sinusoidal_table_reference
//               (long double); max_error is the worst |fast - reference| / tol (tolerance 1)
//   alibi_row   alibi_bias_row, written and accumulated, against alibi_bias rounded to float, for
//               every slope and causal flag of the case: bit for bit (max_error = differing
//               elements, tolerance 0)
//
// ---- sinusoidal bound (derived; sinusoidal.hpp): each entry is within
//   sinusoidal_entry_error_bound (10 * 2^-53 + the frequency term) of the exact value, and so is
//   the reference: |fast - ref| <= 2 bound (bound at the case's bound_position, the largest
//   position it may hold); the float table rounds the double value once more: + 2^-25 (half an
//   ulp of values <= 1).
// ---- tight bound (abs_tol, positions below 2^12 with omega <= 1): both use the same long
//   double omega (the fast path as an exact double-double of it), so the fast entry is within
//   10 * 2^-53 of sin/cos(pos * omega_ld) (its reduction and kernel), and the reference rounds
//   pos * omega_ld < 2^12 in long double (<= 2^12 * 2^-64 = 2^-52) before sinl (2^-64):
//   |fast - ref| <= 12 * 2^-53 + 2^-63, checked as 13 * 2^-53.
// ---- alibi rows: exact. The row computes the same double product slope * distance that
//   alibi_bias does and rounds it once to float; distance 0 gives +0; the accumulating form adds
//   that float to the accumulator in float, as acc + want does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/encodings/sinusoidal.hpp"

namespace posenc::table_cases {

enum class kind { sinusoidal, alibi_row };
const char* name(kind k);  // "sinusoidal", "alibi_row"

// Element types a sinusoidal case runs in (bit set).
enum dtype_bits : unsigned { f32 = 1, f64 = 2 };

struct spec {
  kind k = kind::sinusoidal;
  // ---- sinusoidal
  sinusoidal_params p{};
  // Positions: explicit when given; else 0 .. iota_n - 1.
  std::vector<int64_t> positions{};
  int64_t iota_n = 0;
  int64_t bound_position = 0;  // max_position of the entry bound (the bound's frequency term)
  double abs_tol = 0;          // > 0: the tight bound above replaces 2 bound (float64 only)
  unsigned dtypes = f32 | f64;
  // ---- alibi_row
  int64_t n = 0;  // keys
  // Keys explicit (size n) when given; else drawn below 2^20 with key 1 at 2^53 - 5 when n > 2.
  std::vector<int64_t> kpos{};
  std::optional<int64_t> qpos{};  // empty: drawn below 2^20 after the keys
  std::vector<double> slopes{};   // every slope is run with every causal flag
  std::vector<bool> causal{false, true};
  uint64_t seed = 0;
  // The generator at the case's first draw; empty: rng(seed). The full list's alibi cases replay
  // the stream of the test they came from (each case starting where the one before stopped).
  std::optional<rng> stream{};
  std::string group{};  // "sinusoidal" or "alibi" (the check group); the list's section in ctest
  std::string name{};   // unique within its list; the bench case name for perf_cases
};

// Every field, for messages.
std::string describe(const spec& c);

// Everything one case owns.
struct fixture {
  std::vector<int64_t> pos;   // sinusoidal: (N,)
  std::vector<int64_t> kpos;  // alibi_row: (n,)
  int64_t qpos = 0;
  std::vector<float> acc;  // alibi_row: (slopes x causal, n) accumulators, in loop order
};

// Draws the case's inputs from c.stream (or rng(c.seed)) in the order the tests drew them.
void build(fixture& fx, const spec& c);
// The same draws from g (advances g as build does); the lists use it to chain streams.
void draw(fixture& fx, const spec& c, rng& g);

// Runs the case (group c.group, name c.name).
check_result check_case(const spec& c);

// The small list of `posenc check` (milliseconds), group "sinusoidal": widths 2, 64, 130 in both
// layouts and denominators at awkward positions up to 2^53, float32 and float64; group "alibi":
// rows of 1, 5, 17 and 129 keys with a huge distance, three slopes, causal and not.
const std::vector<spec>& check_cases();
// Everything ctest covers (tests/test_tables_simd.cpp), by section (the name's first part):
// sinusoidal_bound (widths 2, 6, 10, 18, 64, 130, 1024 x layouts x denominators, seed 1),
// sinusoidal_tight (width 1024, positions 0 .. 4095), alibi_row (n in 0, 1, 3, 4, 5, 17, 129,
// 1000, seed 3).
const std::vector<spec>& full_cases();
// The shapes of `posenc bench`, named as its cases: sinusoidal_table/N=65536/d=1024 (float32,
// positions 0 .. N-1) and bias_row/alibi/H=32/S=262144 (one causal query at S-1 against keys
// 0 .. S-1, the 32 heads' slopes).
const std::vector<spec>& perf_cases();
// The perf case at the reduced size of `posenc bench --quick` (N = 256, S = 4096).
spec perf_quick(const spec& c);
// What a perf case is validated on before timing: sinusoidal, the rows 0, 1, N/3 and N-1 (their
// positions) with the bound at N; alibi, the case itself (every head, every key).
spec perf_validation_case(const spec& c);

}  // namespace posenc::table_cases
