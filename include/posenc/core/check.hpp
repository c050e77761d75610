// posenc/core/check.hpp: the result of one property check.
//
// Each encoding family exposes `std::vector<check_result> <family>_checks()` that measures its
// mathematical properties (the seeds' identities, the papers' formulas) and reports the largest
// error seen against a tolerance derived from the arithmetic. `posenc check` prints them, the
// report renders them, and the tests assert them.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace posenc {

// A case table's list (check, full, perf), built by its make function on first use and kept:
// every table's accessors are one line, `return case_list<make_check>();`.
template <auto Make>
const auto& case_list() {
  static const auto v = Make();
  return v;
}

struct check_result {
  std::string group;  // family, e.g. "sinusoidal", "rope", "attention"
  std::string name;   // short identifier, e.g. "shift_is_rotation"
  std::string claim;  // one sentence: what is being checked
  bool passed = false;
  double max_error = 0;  // largest measured deviation (0 for exact/boolean checks)
  double tolerance = 0;  // bound it was checked against
  std::string detail;    // how the tolerance was derived, or a counterexample
};

// A check of a measured deviation: passes when max_error is finite and <= tolerance (NaN and
// infinity fail).
inline check_result measured_check(std::string group, std::string name, std::string claim,
                                   double max_error, double tolerance, std::string detail) {
  check_result c;
  c.group = std::move(group);
  c.name = std::move(name);
  c.claim = std::move(claim);
  c.max_error = max_error;
  c.tolerance = tolerance;
  c.passed = std::isfinite(max_error) && max_error <= tolerance;
  c.detail = std::move(detail);
  return c;
}

}  // namespace posenc
