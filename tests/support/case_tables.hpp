// The one test adapter for every case table (include/posenc/*/..._cases.hpp: attention, RoPE,
// tables, T5, Shaw, learned, model ops). A table's case runner gives a check_result, or one per
// mode (run_case); run_cases runs it on the cases a test selects, expects each result to pass
// (with its name, error, tolerance, claim and derivation on failure) and counts the results per
// group, so that each test states the coverage it expects.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "posenc/core/check.hpp"

namespace posenc::test {

template <typename Spec, typename Keep, typename Run>
std::map<std::string, int> run_cases(const std::vector<Spec>& cases, Keep keep, Run run) {
  std::map<std::string, int> ran;
  double worst = 0;
  auto expect = [&](const Spec& c, const check_result& r) {
    EXPECT_TRUE(r.passed) << r.name << ": max_error " << r.max_error << ", tolerance "
                          << r.tolerance << "\n  " << r.claim << "\n  " << r.detail;
    if (r.tolerance > 0) worst = std::max(worst, r.max_error / r.tolerance);
    ++ran[c.group];
  };
  for (const Spec& c : cases) {
    if (!keep(c)) continue;
    if constexpr (std::is_same_v<std::decay_t<decltype(run(c))>, check_result>) {
      expect(c, run(c));
    } else {
      for (const check_result& r : run(c)) expect(c, r);
    }
  }
  ::testing::Test::RecordProperty("worst_error_over_tolerance", std::to_string(worst));
  return ran;
}

// The cases of one group: expects n results, all passing.
template <typename Spec, typename Run>
void run_group(const std::vector<Spec>& cases, const std::string& group, int n, Run run) {
  const auto ran = run_cases(
      cases, [&](const Spec& c) { return c.group == group; }, run);
  EXPECT_EQ(ran.count(group) ? ran.at(group) : 0, n) << group;
}

}  // namespace posenc::test
