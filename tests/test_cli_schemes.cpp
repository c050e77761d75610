// The scheme declarations (posenc/attention/schemes.hpp): the one combination rule and its
// message, the properties it follows from, `posenc schemes` and the docs table generated from
// it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/npy.hpp"
#include "posenc/core/rng.hpp"
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
      // Rule 4: a scheme that rides on another combines with that one alone.
      auto rides_apart = [](const scheme_decl& x, const scheme_decl& y) {
        return x.rides_on && std::string(x.rides_on) != y.name;
      };
      const bool riding = rides_apart(a, b) || rides_apart(b, a);
      const bool want = &a != &b && (own || two_transforms || two_tables || riding);
      EXPECT_EQ(!scheme_conflict(a, b).empty(), want) << a.name << " " << b.name;
    }
  // Every attention-level scheme has parameters, and its name is unique.
  for (const auto& d : decls) {
    if (d.attention_level) {
      EXPECT_FALSE(d.params.empty()) << d.name;
    }
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
  // The query temperature is a diagonal scale of q: it composes with any q/k transform
  // (Ministral 3 scales its rotated queries), not with the paths of their own.
  EXPECT_EQ(combine_error({"temperature", "mrope"}), "");
  EXPECT_EQ(combine_error({"rope", "temperature"}), "");
  EXPECT_EQ(combine_error({"xpos", "temperature"}), "");
  EXPECT_NE(combine_error({"temperature", "cope"}).find("cope cannot be combined with temperature"),
            std::string::npos);
  EXPECT_NE(combine_error({"rope", "self_extend", "temperature"})
                .find("self_extend cannot be combined with temperature"),
            std::string::npos);
  // Score biases, a q/k transform and the relative tables all combine.
  EXPECT_EQ(combine_error({"rope", "alibi", "t5", "kerple", "fire", "shaw"}), "");
  EXPECT_EQ(combine_error({"mrope", "alibi"}), "");
  // The per-pair RoPE schemes ride on RoPE alone.
  EXPECT_EQ(combine_error({"rope", "self_extend"}), "");
  EXPECT_EQ(combine_error({"dca", "rope"}), "");
  EXPECT_NE(combine_error({"alibi", "self_extend"})
                .find("self_extend cannot be combined with alibi: self_extend places rope's "
                      "rotation per (query, key) pair"),
            std::string::npos);
  EXPECT_NE(combine_error({"self_extend", "dca"}).find("self_extend cannot be combined with dca"),
            std::string::npos);
  EXPECT_NE(combine_error({"mrope", "dca"}).find("dca cannot be combined with mrope"),
            std::string::npos);
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

TEST(CliSchemes, AttendHelpListsEveryDeclaredParameter) {
  // The flag of a declared parameter is --name with dashes (older spellings stay as aliases).
  const auto r = test::run_cli({"attend", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> missing;
  for (const auto& d : scheme_decls()) {
    // A scheme whose switch is a RoPE config takes the config's flags (--rope, --hf-config, ...:
    // tests/test_cli_rope.cpp); its parameters are the engine's arguments.
    if (!d.attention_level || d.config_valued()) continue;
    for (const auto& p : d.params) {
      std::string flag = std::string("--") + p.name;
      for (auto& c : flag)
        if (c == '_') c = '-';
      if (r.out.find(flag + " ") == std::string::npos &&
          r.out.find(flag + ",") == std::string::npos)
        missing.push_back(std::string(d.name) + ": " + flag);
    }
  }
  EXPECT_TRUE(missing.empty()) << fmt::format("{}", fmt::join(missing, "; "));
}

TEST(CliSchemes, NewFlagsActAsTheirKeywords) {
  test::temp_dir dir;
  const int64_t T = 3, S = 5, H = 2, D = 8;
  rng r(11);
  auto q = make_npy<double>({T, H, D});
  auto k = make_npy<double>({S, H, D});
  auto v = make_npy<double>({S, H, D});
  for (auto* a : {&q, &k, &v})
    for (int64_t i = 0; i < a->numel(); ++i) a->as<double>()[i] = r.normal();
  write_npy(dir.file("q.npy"), q);
  write_npy(dir.file("k.npy"), k);
  write_npy(dir.file("v.npy"), v);
  const auto attend = [&](std::vector<std::string> extra, const std::string& out) {
    std::vector<std::string> a = {"attend",          "--q",        dir.file("q.npy"), "--k",
                                  dir.file("k.npy"), "--v",        dir.file("v.npy"), "--causal",
                                  "--out",           dir.file(out)};
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run_cli(a);
  };
  // --xpos-theta is xPos's base (its declared flag); --theta is RoPE's and needs --rope.
  ASSERT_EQ(attend({"--xpos", "--xpos-theta", "500"}, "a.npy").exit_code, 0);
  const auto theta = attend({"--xpos", "--theta", "500"}, "b.npy");
  EXPECT_EQ(theta.exit_code, 2);
  EXPECT_NE(theta.err.find("--theta is RoPE's base and needs --rope"), std::string::npos)
      << theta.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.npy")));
  ASSERT_EQ(attend({"--xpos"}, "c.npy").exit_code, 0);
  EXPECT_NE(read_npy(dir.file("a.npy")).to_f64(), read_npy(dir.file("c.npy")).to_f64());
  // --keys-rotated: k given rotated at its positions (posenc rope apply) gives --rope's bits.
  ASSERT_EQ(
      test::run_cli({"rope", "apply", "--x", dir.file("k.npy"), "--positions", dir.file("kp.npy"),
                     "--out", dir.file("kr.npy"), "--layout", "half", "--head-dim", "8"})
          .exit_code,
      2);  // kp.npy does not exist yet: the command refuses, writes nothing
  auto kp = make_npy<int64_t>({S});
  for (int64_t j = 0; j < S; ++j) kp.as<int64_t>()[j] = j;
  write_npy(dir.file("kp.npy"), kp);
  const auto ra =
      test::run_cli({"rope", "apply", "--x", dir.file("k.npy"), "--positions", dir.file("kp.npy"),
                     "--out", dir.file("kr.npy"), "--layout", "half", "--head-dim", "8"});
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(attend({"--rope", "--rope-layout", "half"}, "d.npy").exit_code, 0);
  std::vector<std::string> a = {"attend",
                                "--q",
                                dir.file("q.npy"),
                                "--k",
                                dir.file("kr.npy"),
                                "--v",
                                dir.file("v.npy"),
                                "--causal",
                                "--out",
                                dir.file("e.npy"),
                                "--rope",
                                "--layout",
                                "half",
                                "--keys-rotated"};
  const auto re = test::run_cli(a);
  ASSERT_EQ(re.exit_code, 0) << re.err;
  const auto d1 = read_npy(dir.file("d.npy")).to_f64(), e1 = read_npy(dir.file("e.npy")).to_f64();
  ASSERT_EQ(d1.size(), e1.size());
  for (size_t i = 0; i < d1.size(); ++i) EXPECT_NEAR(d1[i], e1[i], 1e-14) << i;
  const auto bad = attend({"--keys-rotated"}, "f.npy");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--keys-rotated needs a q/k transform"), std::string::npos) << bad.err;
}
