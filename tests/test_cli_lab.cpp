// posenc lab end to end: a tiny run's JSON (shape, nulls for undefined positions, summary over
// seeds), the files it writes, the progress bar, --resume through the CLI, and argument errors.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cmath>
#include <filesystem>
#include <map>
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

// --preset extend on a tiny corpus: every row the issue names (scheme, extension, fine-tune
// steps, lengths, seed, bits per byte), every method zero-shot and fine-tuned (none zero-shot is
// the trained run, PoSE only fine-tuned), the references ALiBi and Kerple; and each method's
// config as results.json writes it is the config `posenc rope freqs` prints for the same
// parameters given as flags (the lab's model runs rope_frequencies of that config).
TEST(CliLab, ExtendPresetRowsAndConfigsMatchRopeFreqs) {
  posenc::test::temp_dir d;
  std::string train, held;
  for (int i = 0; i < 4000; ++i) train += static_cast<char>('a' + (i * 7 + i / 5) % 9);
  for (int i = 0; i < 1400; ++i) held += static_cast<char>('a' + (i * 5 + i / 3) % 9);
  posenc::write_file_atomic(d.file("train.txt"), train);
  posenc::write_file_atomic(d.file("held.txt"), held);
  const std::vector<std::string> args = {"lab",
                                         "--preset",
                                         "extend",
                                         "--file",
                                         d.file("train.txt"),
                                         "--eval-file",
                                         d.file("held.txt"),
                                         "--train-len",
                                         "16",
                                         "--steps",
                                         "3",
                                         "--finetune-steps",
                                         "2",
                                         "--search-budget",
                                         "4",
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
                                         "--eval-chars",
                                         "600",
                                         "--needle-samples",
                                         "2",
                                         "--format",
                                         "json",
                                         "--no-progress",
                                         "--out",
                                         d.file("extend")};
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["preset"], "extend");
  EXPECT_EQ(j["config"]["target_len"], 128);
  std::map<std::string, int> rows;  // scheme/extension/finetune_steps -> rows
  int64_t needle_rows = 0;
  for (const auto& row : j["results"]) {
    for (const char* k : {"task", "scheme", "extension", "finetune_steps", "train_len", "eval_len",
                          "depth", "keys", "seed", "accuracy", "bits_per_byte"})
      ASSERT_TRUE(row.contains(k)) << k;
    EXPECT_EQ(row["train_len"], 16);
    EXPECT_EQ(row["in_distribution"].get<bool>(), row["eval_len"] == 16);
    ASSERT_TRUE(row["bits_per_byte"].is_number()) << row.dump();
    EXPECT_GT(row["bits_per_byte"].get<double>(), 0.0);
    if (row["task"] == "needle") {
      // A cell too short for its keys (3 keys need 20 bytes) is null, every other a fraction.
      const bool fits = row["eval_len"].get<int64_t>() >= 4 * (row["keys"].get<int64_t>() + 2);
      EXPECT_EQ(row["accuracy"].is_null(), !fits) << row.dump();
      if (fits) {
        EXPECT_TRUE(row["accuracy"] == 0.0 || row["accuracy"] == 0.5 || row["accuracy"] == 1.0)
            << row.dump();  // 2 samples a cell
      }
      ++needle_rows;
      continue;
    }
    EXPECT_EQ(row["task"], "text");
    EXPECT_TRUE(row["accuracy"].is_null() && row["depth"].is_null() && row["keys"].is_null());
    ++rows[fmt::format("{}/{}/{}", row["scheme"].get<std::string>(),
                       row["extension"].get<std::string>(), row["finetune_steps"].get<int>())];
  }
  // Every model trained at L: RoPE, then the declarations' schemes that need no extension.
  const std::map<std::string, int> want = {
      {"rope/none/0", 10},     {"alibi/none/0", 10},        {"kerple/none/0", 10},
      {"fox/none/0", 10},      {"nope/none/0", 10},         {"rope/linear/0", 10},
      {"rope/dynamic/0", 10},  {"rope/yarn/0", 10},         {"rope/llama3/0", 10},
      {"rope/longrope/0", 10}, {"rope/none/2", 10},         {"rope/linear/2", 10},
      {"rope/dynamic/2", 10},  {"rope/yarn/2", 10},         {"rope/llama3/2", 10},
      {"rope/longrope/2", 10}, {"rope/pose/2", 10},         {"rope/self_extend/0", 10},
      {"rope/dca/0", 10},      {"rope/streaming_llm/0", 10}};
  EXPECT_EQ(rows, want);                       // 2 seeds x lengths 16 .. 256
  EXPECT_EQ(needle_rows, 20 * 2 * 5 * 5 * 2);  // methods x seeds x lengths x depths x keys
  EXPECT_EQ(j["summary"].size(), 20u * 5);
  // The retrieval summary: a cell per method, length, depth and keys over the seeds (the short
  // cells left out), and an effective context length per method and key count.
  EXPECT_EQ(j["retrieval"]["cells"].size(), 20u * 5 * 5 + 20u * 4 * 5);
  ASSERT_EQ(j["retrieval"]["effective_context"].size(), 20u * 2);
  for (const auto& e : j["retrieval"]["effective_context"]) {
    EXPECT_EQ(e["seeds"], 2);
    const double m = e["effective_context_length_mean"].get<double>();
    EXPECT_GE(m, e["effective_context_length_min"].get<double>());
    EXPECT_LE(m, e["effective_context_length_max"].get<double>());
  }
  // StreamingLLM with 4 sinks and a window of L - 4 evicts nothing at L: the trained model's
  // bits (another path: the per-pair one in double), and something else past L.
  auto bpb = [&](const std::string& ext, int64_t len, int64_t seed) {
    for (const auto& row : j["results"])
      if (row["scheme"] == "rope" && row["extension"] == ext && row["finetune_steps"] == 0 &&
          row["eval_len"] == len && row["seed"] == seed)
        return row["bits_per_byte"].get<double>();
    ADD_FAILURE() << ext << " " << len;
    return 0.0;
  };
  for (int64_t seed : {0, 1}) {
    EXPECT_NEAR(bpb("streaming_llm", 16, seed), bpb("none", 16, seed), 1e-5);
    // Past L: apart by more than the tolerance that calls them equal at L.
    EXPECT_GT(std::abs(bpb("streaming_llm", 256, seed) - bpb("none", 256, seed)), 1e-5);
  }
  EXPECT_EQ(j["config"]["rope_pair_schemes"]["self_extend"]["self_extend_window"], 8);
  EXPECT_EQ(j["config"]["rope_pair_schemes"]["dca"]["dca_chunk_size"], 16);
  EXPECT_TRUE(std::filesystem::exists(d.file("extend/results.json")));

  // Each method's config, read by `posenc rope freqs --hf-config`, against the same parameters
  // given as flags (head dim 8, theta 10000, trained at 16, extended to 128), at lengths within
  // and beyond the training length.
  const auto& cfgs = j["config"]["rope_configs"];
  const std::vector<std::pair<std::string, std::vector<std::string>>> flags = {
      {"none", {}},
      {"linear", {"--scaling", "linear", "--factor", "8"}},
      {"pose", {"--scaling", "linear", "--factor", "8"}},
      {"dynamic", {"--scaling", "dynamic", "--factor", "1", "--max-pos", "16"}},
      {"yarn",
       {"--scaling", "yarn", "--factor", "8", "--original-max-pos", "16", "--max-pos", "128"}},
      {"llama3",
       {"--scaling", "llama3", "--factor", "8", "--original-max-pos", "16", "--low-freq-factor",
        "1", "--high-freq-factor", "4"}},
  };
  auto freqs = [&](std::vector<std::string> a, int64_t n) {
    a.insert(a.begin(), {"rope", "freqs"});
    a.insert(a.end(), {"--seq-len", std::to_string(n), "--format", "json"});
    const auto f = run_cli(a);
    EXPECT_EQ(f.exit_code, 0) << f.err;
    return nlohmann::json::parse(f.out);
  };
  for (const auto& [name, fl] : flags) {
    ASSERT_TRUE(cfgs.contains(name)) << name;
    const std::string path = d.file(name + ".json");
    posenc::write_file_atomic(path, cfgs[name].dump());
    std::vector<std::string> by_flags = {"--head-dim", "8", "--theta", "10000"};
    by_flags.insert(by_flags.end(), fl.begin(), fl.end());
    for (int64_t n : {16, 128}) {  // within and beyond the training length
      const auto a = freqs({"--hf-config", path}, n), b = freqs(by_flags, n);
      EXPECT_EQ(a["inv_freq"], b["inv_freq"]) << name << " at " << n;
      EXPECT_EQ(a["attention_factor"], b["attention_factor"]) << name << " at " << n;
    }
  }
  // LongRoPE: the searched divisors per seed, as long_factor.
  ASSERT_EQ(cfgs["longrope"].size(), 2u);
  for (const auto& s : cfgs["longrope"]) {
    const auto& rs = s["config"]["rope_scaling"];
    EXPECT_EQ(rs["rope_type"], "longrope");
    EXPECT_EQ(s["candidates"], 4);
    EXPECT_LE(s["search_bits_per_byte"].get<double>(), s["linear_bits_per_byte"].get<double>());
    std::string lf, sf;
    for (const auto& x : rs["long_factor"]) lf += (lf.empty() ? "" : ",") + x.dump();
    for (const auto& x : rs["short_factor"]) sf += (sf.empty() ? "" : ",") + x.dump();
    const std::string path = d.file("longrope.json");
    posenc::write_file_atomic(path, s["config"].dump());
    const std::vector<std::string> by_flags = {
        "--head-dim",         "8",        "--theta",       "10000",
        "--scaling",          "longrope", "--factor",      "8",
        "--original-max-pos", "16",       "--max-pos",     "128",
        "--short-factor",     sf,         "--long-factor", lf};
    for (int64_t n : {16, 128}) {
      const auto a = freqs({"--hf-config", path}, n), b = freqs(by_flags, n);
      EXPECT_EQ(a["inv_freq"], b["inv_freq"]) << "longrope at " << n;
      EXPECT_EQ(a["attention_factor"], b["attention_factor"]) << "longrope at " << n;
    }
  }

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"lab", "--preset", "extend", "--schemes", "rope"}, "--schemes"},
      {{"lab", "--preset", "extend", "--file", "/nonexistent/t.txt"}, "get-corpus"},
      {{"lab", "--preset", "extend", "--file", d.file("train.txt"), "--eval-file",
        d.file("held.txt"), "--train-len", "24"},
       "--train-len"},
      {{"lab", "--preset", "extend", "--file", d.file("train.txt"), "--eval-file",
        d.file("held.txt"), "--finetune-steps", "0"},
       "--finetune-steps"},
      {{"lab", "--preset", "extend", "--file", d.file("train.txt"), "--eval-file",
        d.file("held.txt"), "--search-budget", "2"},
       "--search-budget"},
  };
  for (const auto& [a, message] : bad) {
    const auto b = run_cli(a);
    EXPECT_EQ(b.exit_code, 2) << a.back();
    EXPECT_NE(b.err.find(message), std::string::npos) << b.err;
    EXPECT_TRUE(b.out.empty()) << b.out;
  }
}
