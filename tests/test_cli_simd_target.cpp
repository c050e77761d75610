// POSENC_SIMD_TARGET: every Highway target this CPU and build have runs the whole `posenc check`
// (every kernel against its reference), so that the per-target register blocking and the
// narrower vectors of the targets an AVX-512 host does not pick by itself are checked on every
// machine, not only on the one whose best target they are.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

using posenc::test::run_cli;

// Sets POSENC_SIMD_TARGET for the CLI runs of one test (each test is its own process).
struct target_env {
  explicit target_env(const std::string& t) { setenv("POSENC_SIMD_TARGET", t.c_str(), 1); }
  ~target_env() { unsetenv("POSENC_SIMD_TARGET"); }
};

// The targets the error message of an unknown name lists ("allowed: best, avx3, avx2, ...").
std::vector<std::string> available_targets() {
  target_env e("no-such-target");
  const auto r = run_cli({"check"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const auto at = r.err.find("allowed: ");
  EXPECT_NE(at, std::string::npos) << r.err;
  std::vector<std::string> names;
  if (at == std::string::npos) return names;
  std::istringstream in(r.err.substr(at + 9));
  std::string name;
  while (std::getline(in, name, ',')) {
    while (!name.empty() && (name.front() == ' ')) name.erase(name.begin());
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (!name.empty() && name != "best") names.push_back(name);
  }
  return names;
}

TEST(CliSimdTarget, UnknownTargetIsAClearErrorWithExit2) {
  target_env e("avx9");
  const auto r = run_cli({"rope", "freqs", "--head-dim", "8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("simd target: 'avx9'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("allowed: best"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliSimdTarget, EveryTargetPassesEveryCheck) {
  const auto targets = available_targets();
  // Every x86-64 Release build has at least SSE4 or the scalar fallback besides the best target.
  // The sanitizer build (POSENC_SANITIZED) compiles the kernels for this CPU's best target only
  // (CMakeLists.txt): one.
  ASSERT_GE(targets.size(), std::getenv("POSENC_SANITIZED") ? 1u : 2u);
  for (const auto& t : targets) {
    target_env e(t);
    const auto r = run_cli({"check"});
    EXPECT_EQ(r.exit_code, 0) << t << ":\n" << r.out << r.err;
    EXPECT_NE(r.out.find(", 0 failed"), std::string::npos) << t << ":\n" << r.out;
  }
}

TEST(CliSimdTarget, TheProbeAndTheKernelsRunOnTheTargetAsked) {
  for (const auto& t : available_targets()) {
    target_env e(t);
    const auto r = run_cli({"bench", "--machine-only", "--quick", "--format", "json"});
    ASSERT_EQ(r.exit_code, 0) << t << ": " << r.err;
    std::string upper = t;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_NE(r.out.find("\"simd\": \"" + upper + "\""), std::string::npos) << t << ":\n"
                                                                            << r.out.substr(0, 400);
  }
}

}  // namespace
