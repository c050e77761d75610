// The scheme declarations (posenc/attention/schemes.hpp): the one combination rule and its
// message, the properties it follows from, `posenc schemes` and the docs table generated from
// it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"
#include "test_support.hpp"

using namespace posenc;

namespace {

std::string combine_error(std::vector<std::string> on) {
  try {
    check_scheme_combination(on);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Schemes, TheRuleFollowsFromTheProperties) {
  const auto decls = scheme_decls();
  ASSERT_GE(decls.size(), 14u);
  for (const auto& a : decls)
    for (const auto& b : decls) {
      // Symmetric, and a conflict exactly when the properties say so.
      EXPECT_EQ(scheme_conflict(a, b), scheme_conflict(b, a)) << a.name << " " << b.name;
      const bool own = (a.points | b.points) & scheme_own_path;
      const bool two_transforms =
          (a.points & scheme_qk_transform) && (b.points & scheme_qk_transform);
      const uint32_t rel = scheme_relative_keys | scheme_value_term;
      const bool two_tables = (a.points & rel) && (b.points & rel);
      const bool want = &a != &b && (own || two_transforms || two_tables);
      EXPECT_EQ(!scheme_conflict(a, b).empty(), want) << a.name << " " << b.name;
    }
  // Every attention-level scheme has parameters, and its name is unique.
  for (const auto& d : decls) {
    if (d.attention_level) EXPECT_FALSE(d.params.empty()) << d.name;
    EXPECT_EQ(&scheme_decl_of(d.name), &d);
  }
  EXPECT_THROW(scheme_decl_of("sandwich2"), invalid_argument);
}

TEST(Schemes, OneMessageNamesBoth) {
  // CoPE + M-RoPE: once let through and M-RoPE silently dropped.
  EXPECT_NE(combine_error({"mrope", "cope"})
                .find("cope cannot be combined with mrope: cope's "
                      "positions come from the content"),
            std::string::npos);
  EXPECT_NE(combine_error({"rope", "xpos"})
                .find("rope cannot be combined with xpos: both map q "
                      "and k at hook 1"),
            std::string::npos);
  EXPECT_NE(combine_error({"temperature", "mrope"})
                .find("temperature cannot be combined with "
                      "mrope"),
            std::string::npos);
  // Score biases, a q/k transform and the relative tables all combine.
  EXPECT_EQ(combine_error({"rope", "alibi", "t5", "kerple", "fire", "shaw"}), "");
  EXPECT_EQ(combine_error({"mrope", "alibi"}), "");
}

TEST(CliSchemes, CombineExitsTwoNamingThePair) {
  auto r = test::run_cli({"schemes", "--combine", "cope", "mrope"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cope cannot be combined with mrope"), std::string::npos) << r.err;
  r = test::run_cli({"schemes", "--combine", "rope", "alibi", "t5"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = test::run_cli({"schemes", "--combine", "rope", "nosuch"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("scheme must be one of rope, mrope"), std::string::npos) << r.err;
}

TEST(CliSchemes, DocsTableIsCurrent) {
  // docs/schemes.md carries `posenc schemes` between its markers, byte for byte.
  const auto r = test::run_cli({"schemes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, schemes_markdown());
  const std::string doc = test::read_text(std::string(POSENC_SOURCE_DIR) + "/docs/schemes.md");
  const std::string begin = "<!-- BEGIN posenc schemes -->\n", end = "<!-- END posenc schemes -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), r.out)
      << "docs/schemes.md is stale: regenerate its table with `posenc schemes`";
  // Every declared scheme is in the JSON form too, with the schemes it conflicts with.
  const auto j = test::run_cli({"schemes", "--format", "json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  for (const auto& d : scheme_decls())
    EXPECT_NE(j.out.find(std::string("\"name\": \"") + d.name + "\""), std::string::npos);
}
