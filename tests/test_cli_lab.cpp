// posenc lab end to end: a tiny run's JSON (shape, nulls for undefined positions, summary over
// seeds), the files it writes, the progress bar, --resume through the CLI, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "posenc/core/file.hpp"
#include "test_support.hpp"

using posenc::test::run_cli;

namespace {

std::vector<std::string> tiny(const std::string& out) {
  return {"lab",
          "--task",
          "passkey",
          "--schemes",
          "alibi,learned",
          "--train-len",
          "9:12",
          "--eval-lens",
          "12,24",
          "--steps",
          "6",
          "--seeds",
          "2",
          "--batch",
          "4",
          "--d-model",
          "16",
          "--layers",
          "1",
          "--heads",
          "2",
          "--d-ff",
          "32",
          "--eval-samples",
          "4",
          "--format",
          "json",
          "--out",
          out};
}

// The results without the timing fields, which differ between runs.
nlohmann::json strip(nlohmann::json j) {
  for (auto& r : j["runs"]) {
    r.erase("train_seconds");
    r.erase("tokens_per_second");
    r.erase("resumed");
  }
  return j;
}

}  // namespace

TEST(CliLab, TinyRunJson) {
  posenc::test::temp_dir d;
  const auto r = run_cli(tiny(d.path));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["task"], "passkey");
  ASSERT_EQ(j["results"].size(), 2u * 2u * 2u);  // schemes x seeds x eval lengths
  for (const auto& row : j["results"]) {
    for (const char* k : {"scheme", "seed", "eval_len", "loss", "token_accuracy", "exact_match",
                          "in_dist_token_accuracy", "in_dist_exact_match"})
      EXPECT_TRUE(row.contains(k)) << k;
    const bool undefined = row["scheme"] == "learned" && row["eval_len"] == 24;
    EXPECT_EQ(row["loss"].is_null(), undefined);
    EXPECT_EQ(row["exact_match"].is_null(), undefined);
    EXPECT_EQ(row["defined"].get<bool>(), !undefined);
    if (!undefined) {
      const double acc = row["token_accuracy"];
      EXPECT_GE(acc, 0.0);
      EXPECT_LE(acc, 1.0);
    } else {
      EXPECT_NE(row["note"].get<std::string>().find("no defined position"), std::string::npos);
    }
    EXPECT_FALSE(row["in_dist_exact_match"].is_null());  // every scheme is defined at 12
  }
  ASSERT_FALSE(j["summary"].empty());
  for (const auto& s : j["summary"]) {
    EXPECT_EQ(s["seeds"], 2);
    const bool undefined = s["scheme"] == "learned" && s["eval_len"] == 24;
    EXPECT_EQ(s["token_accuracy_mean"].is_null(), undefined);
    EXPECT_EQ(s["token_accuracy_std"].is_null(), undefined);
  }
  // Files: results.json equal to stdout, curves.csv with a header and one row per record.
  const auto file = nlohmann::json::parse(posenc::test::read_text(d.file("results.json")));
  EXPECT_EQ(file, j);
  const std::string csv = posenc::test::read_text(d.file("curves.csv"));
  EXPECT_EQ(csv.rfind("scheme,seed,step,loss,lr\n", 0), 0u);
  EXPECT_TRUE(std::filesystem::exists(d.file("checkpoints/passkey-alibi-seed1.ckpt")));
  // The progress bar (stderr is not a terminal: one line per quarter) shows elapsed and ETA.
  EXPECT_NE(r.err.find("ETA"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("elapsed"), std::string::npos);
}

TEST(CliLab, ResumeAfterInterruptionGivesTheSameResults) {
  posenc::test::temp_dir a, b;
  const auto full = run_cli(tiny(a.path));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  auto args = tiny(b.path);
  args.push_back("--stop-after");
  args.push_back("3");
  const auto first = run_cli(args);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_TRUE(nlohmann::json::parse(first.out)["results"].empty());  // nothing finished
  args = tiny(b.path);
  args.push_back("--resume");
  const auto second = run_cli(args);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(strip(nlohmann::json::parse(second.out)), strip(nlohmann::json::parse(full.out)));
}

TEST(CliLab, TextAndCsvFormats) {
  posenc::test::temp_dir d;
  auto args = tiny(d.path);
  args[args.size() - 3] = "text";
  const auto t = run_cli(args);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("in-dist@12"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("n/a"), std::string::npos) << t.out;  // learned at 24
  args[args.size() - 3] = "csv";
  const auto c = run_cli(args);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out.rfind("scheme,seed,eval_len,defined,", 0), 0u) << c.out;
}

TEST(CliLab, BadArgumentsAreClearErrors) {
  struct bad {
    std::vector<std::string> args;
    std::string message;
  };
  const bad cases[] = {
      {{"lab", "--schemes", "rope,spiral"}, "--schemes"},
      {{"lab", "--train-len", "12:9"}, "--train-len"},
      {{"lab", "--task", "sorting"}, "--task"},
      {{"lab", "--task", "copy", "--eval-lens", "600"}, "--eval-lens"},
      {{"lab", "--steps", "0"}, "--steps"},
      {{"lab", "--randomized-positions", "10"}, "--randomized-positions"},
      {{"lab", "--task", "text"}, "--file"},
      {{"lab", "--task", "text", "--file", "/nonexistent/x.txt"}, "/nonexistent/x.txt"},
      {{"lab", "--resume"}, "--resume"},
      {{"lab", "--schemes", "rope,rope"}, "twice"},
      {{"lab", "--task", "passkey", "--eval-file", "x.txt"}, "--eval-file"},
      {{"lab", "--eval-chars", "-1"}, "--eval-chars"},
  };
  for (const auto& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args.back();
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// --preset press on a tiny corpus: one row per variant and training length, evaluation at
// L..16L in both window modes, a learned table undefined past L but defined with randomized
// positions, results.json written; bad preset arguments are clear errors.
TEST(CliLab, PressPresetTinyCorpus) {
  posenc::test::temp_dir d;
  std::string train, held;
  for (int i = 0; i < 4000; ++i) train += static_cast<char>('a' + (i * 7 + i / 5) % 9);
  for (int i = 0; i < 800; ++i) held += static_cast<char>('a' + (i * 5 + i / 3) % 9);
  posenc::write_file_atomic(d.file("train.txt"), train);
  posenc::write_file_atomic(d.file("held.txt"), held);
  std::vector<std::string> args = {"lab",
                                   "--preset",
                                   "press",
                                   "--file",
                                   d.file("train.txt"),
                                   "--eval-file",
                                   d.file("held.txt"),
                                   "--schemes",
                                   "learned,sinusoidal",
                                   "--train-len",
                                   "8",
                                   "--steps",
                                   "3",
                                   "--batch",
                                   "4",
                                   "--d-model",
                                   "16",
                                   "--layers",
                                   "1",
                                   "--heads",
                                   "2",
                                   "--d-ff",
                                   "32",
                                   "--eval-chars",
                                   "400",
                                   "--format",
                                   "json",
                                   "--no-progress",
                                   "--out",
                                   d.file("press")};
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["preset"], "press");
  EXPECT_EQ(j["config"]["seeds"], 3);
  std::set<std::string> variants;
  for (const auto& row : j["summary"]) variants.insert(row["variant"].get<std::string>());
  EXPECT_EQ(variants, (std::set<std::string>{"sinusoidal", "sinusoidal+sqrt(d)", "learned",
                                             "learned+randomized"}));
  int rows = 0;
  for (const auto& row : j["summary"]) {
    if (row["measure"] != "eval") continue;
    ++rows;
    const int64_t L = row["eval_len"];
    EXPECT_EQ(row["train_len"], 8);
    const bool undefined = row["variant"] == "learned" && L > 8;
    EXPECT_EQ(row["defined"].get<bool>(), !undefined) << row.dump();
    EXPECT_EQ(row["bpc_mean"].is_null(), undefined) << row.dump();
    EXPECT_EQ(row["sliding_bpc_mean"].is_null(), undefined) << row.dump();
    if (!undefined) {
      EXPECT_NEAR(row["bpc_mean"].get<double>(), row["loss_mean"].get<double>() / std::log(2.0),
                  1e-12);
      EXPECT_GT(row["bpc_std"].get<double>(), 0.0);  // three seeds differ
    }
  }
  EXPECT_EQ(rows, 4 * 5);  // 4 variants x lengths 8, 16, 32, 64, 128
  EXPECT_TRUE(std::filesystem::exists(d.file("press/results.json")));

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"lab", "--preset", "wikitext"}, "--preset"},
      {{"lab", "--preset", "press", "--file", "/nonexistent/t.txt"}, "get-corpus"},
      {{"lab", "--preset", "press", "--task", "copy"}, "--task"},
      {{"lab", "--preset", "press", "--file", d.file("train.txt"), "--eval-file",
        d.file("held.txt"), "--train-len", "8:16"},
       "--train-len"},
  };
  for (const auto& [a, message] : bad) {
    const auto b = run_cli(a);
    EXPECT_EQ(b.exit_code, 2) << a.back();
    EXPECT_NE(b.err.find(message), std::string::npos) << b.err;
    EXPECT_TRUE(b.out.empty()) << b.out;
  }
}

// --preset press with schemes it has no variant of (the research schemes and irope): one plain
// row each, beside the preset's own variants of the schemes named, and each row's numbers are
// exactly those of `--task text` with the preset's lengths, so the preset adds no option of its
// own to these schemes. irope on fewer than 4 layers is an error naming it.
TEST(CliLab, PressPresetTakesEveryScheme) {
  posenc::test::temp_dir d;
  std::string train, held;
  for (int i = 0; i < 4000; ++i) train += static_cast<char>('a' + (i * 7 + i / 5) % 9);
  for (int i = 0; i < 800; ++i) held += static_cast<char>('a' + (i * 5 + i / 3) % 9);
  posenc::write_file_atomic(d.file("train.txt"), train);
  posenc::write_file_atomic(d.file("held.txt"), held);
  const std::vector<std::string> model = {"--file",       d.file("train.txt"),
                                          "--eval-file",  d.file("held.txt"),
                                          "--steps",      "3",
                                          "--seeds",      "1",
                                          "--batch",      "4",
                                          "--d-model",    "16",
                                          "--layers",     "4",
                                          "--heads",      "2",
                                          "--d-ff",       "32",
                                          "--eval-chars", "400",
                                          "--format",     "json",
                                          "--no-progress"};
  std::vector<std::string> args = {
      "lab",         "--preset", "press", "--schemes", "sinusoidal,kerple,fire,xpos,cope,irope",
      "--train-len", "8"};
  args.insert(args.end(), model.begin(), model.end());
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["variants"], nlohmann::json({"sinusoidal", "sinusoidal+sqrt(d)", "kerple",
                                                     "fire", "xpos", "cope", "irope"}));
  EXPECT_EQ(j["config"]["n_layers"], 4);

  std::vector<std::string> plain = {
      "lab",         "--task", "text",        "--schemes",     "kerple,fire,xpos,cope,irope",
      "--train-len", "8",      "--eval-lens", "8,16,32,64,128"};
  plain.insert(plain.end(), model.begin(), model.end());
  const auto p = run_cli(plain);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto pj = nlohmann::json::parse(p.out);
  int compared = 0;
  for (const auto& row : j["results"]) {
    if (row["variant"] == "sinusoidal" || row["variant"] == "sinusoidal+sqrt(d)") continue;
    for (const auto& q : pj["results"]) {
      if (q["scheme"] != row["variant"] || q["seed"] != row["seed"] ||
          q["eval_len"] != row["eval_len"])
        continue;
      ++compared;
      EXPECT_EQ(row["scheme"], row["variant"]);
      EXPECT_EQ(row["train_len"], 8);
      EXPECT_EQ(row["bpc"].get<double>(), q["bpc"].get<double>()) << row.dump();
      EXPECT_EQ(row["sliding_bpc"].get<double>(), q["sliding_bpc"].get<double>()) << row.dump();
    }
  }
  EXPECT_EQ(compared, 5 * 5);  // schemes x lengths 8..128

  const auto shallow =
      run_cli({"lab", "--preset", "press", "--schemes", "irope", "--file", d.file("train.txt"),
               "--eval-file", d.file("held.txt"), "--train-len", "8"});
  EXPECT_EQ(shallow.exit_code, 2);
  EXPECT_NE(shallow.err.find("irope"), std::string::npos) << shallow.err;
  EXPECT_TRUE(shallow.out.empty()) << shallow.out;
}
