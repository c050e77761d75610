// posenc lab: train small decoder-only transformers with each position scheme on a generated
// task and compare them in distribution and at longer lengths (issue 6, docs/lab.md).
//
//   posenc lab --task passkey --schemes nope,sinusoidal,learned,rope,alibi,t5
//              --train-len 16:64 --eval-lens 64,128,256,512 --steps 3000 --seeds 3 --out DIR
//
//   posenc lab --preset press [--quick] --out DIR   real text, Press et al. 2022's table
//   mpirun -np N posenc lab ...                      the same numbers over N MPI ranks
//
// Progress (one bar per run, elapsed and ETA) goes to stderr; the results go to stdout in the
// chosen format and, with --out DIR, to DIR/results.json and DIR/curves.csv (atomic writes).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "lab_mpi.hpp"
#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/formats/hf_config.hpp"
#include "posenc/lab/extend.hpp"
#include "posenc/lab/lab.hpp"
#include "posenc/lab/needle.hpp"

namespace posenc::cli {
namespace {

struct lab_cli {
  out_format format = out_format::text;
  std::string task = "passkey", file, eval_file, preset,
              schemes = "nope,sinusoidal,learned,rope,alibi,t5", train_len = "16:64",
              eval_lens = "64,128,256,512", norm = "layernorm", out;
  int64_t steps = 3000, seeds = 3, batch = 16, d_model = 64, layers = 2, heads = 4, d_ff = 256;
  int64_t warmup = 0, randomized = 0, eval_samples = 64, checkpoint_every = 0, stop_after = -1;
  int64_t eval_chars = 0;
  int threads = 0;
  double lr = 3e-3, weight_decay = 0.01, clip = 1.0;
  bool quick = false, resume = false, no_progress = false, embed_scale = false;
  int64_t finetune_steps = 0, search_budget = 0;  // --preset extend (0 = the preset's)
  int64_t needle_samples = -1;  // the retrieval grid (-1 = none, or the extend preset's)
  double needle_mix = 0;        // fraction of training sequences with needles (text tasks)
  std::vector<std::pair<std::string, double>> named_params;  // --sandwich-dim, ... as given
};

std::string fmt_time(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const int64_t t = std::llround(s);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{:02}:{:02}", t / 60, t % 60);
}

// The --quick preset: a whole six-scheme comparison with one seed, about 7.7M training tokens
// in all (6 runs x 2000 steps x 16 sequences x 40 tokens on average), evaluated at 64..512 with
// 32 sequences per length. Measured: about 3 minutes on the 2-core machine (two runs at a time,
// ~21k tokens/s each; `make run` with the bench and the report took 5 min 27 s). With 2000
// steps every scheme reaches exact match >= 0.97 on passkey in distribution (docs/lab.md).
// Applied only to options the user did not give explicitly.
void apply_quick(lab_cli& o, CLI::App* sub) {
  auto unset = [&](const char* name) { return sub->get_option(name)->count() == 0; };
  if (unset("--steps")) o.steps = 2000;
  if (unset("--seeds")) o.seeds = 1;
  if (unset("--eval-samples")) o.eval_samples = 32;
}

// The retrieval grid of a plain run: per scheme and key count, exact match at each evaluation
// length, mean over depths and seeds.
void print_needles(const lab::lab_options& o, const lab::lab_results& r) {
  std::printf("retrieval (exact match of the needle's value, mean over depths and seeds)\n");
  std::string head = fmt::format("{:<11} {:>4}", "scheme", "keys");
  for (int64_t L : o.eval_lens) head += fmt::format(" {:>7}", fmt::format("@{}", L));
  std::printf("%s\n", head.c_str());
  for (auto s : o.schemes)
    for (int64_t keys : lab::needle_keys) {
      std::string line = fmt::format("{:<11} {:>4}", model::pos_scheme_name(s), keys);
      for (int64_t L : o.eval_lens) {
        double sum = 0;
        int64_t n = 0;
        for (const auto& run : r.runs)
          for (const auto& c : run.needles)
            if (run.scheme == s && c.keys == keys && c.length == L && std::isfinite(c.accuracy)) {
              sum += c.accuracy;
              ++n;
            }
        line += n ? fmt::format(" {:>7.3f}", sum / static_cast<double>(n))
                  : fmt::format(" {:>7}", "n/a");
      }
      std::printf("%s\n", line.c_str());
    }
}

lab::lab_options to_options(const lab_cli& c) {
  lab::lab_options o;
  o.task = lab::task_kind_from_name(c.task, "--task");
  o.file = c.file;
  o.eval_file = c.eval_file;
  o.eval_chars = c.eval_chars;
  o.embed_scale = c.embed_scale;
  o.named_params = c.named_params;
  size_t pos = 0;
  while (pos <= c.schemes.size()) {
    const size_t comma = c.schemes.find(',', pos);
    const std::string name =
        c.schemes.substr(pos, comma == std::string::npos ? comma : comma - pos);
    const auto s = model::pos_scheme_from_name(name, "--schemes");
    if (std::find(o.schemes.begin(), o.schemes.end(), s) != o.schemes.end())
      fail("--schemes lists '{}' twice", name);
    o.schemes.push_back(s);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  const size_t colon = c.train_len.find(':');
  if (colon == std::string::npos) {
    const auto v = parse_ints(c.train_len, "--train-len");
    if (v.size() != 1) fail("--train-len must be A:B or a single length, got '{}'", c.train_len);
    o.train_min = o.train_max = v[0];
  } else {
    const auto a = parse_ints(c.train_len.substr(0, colon), "--train-len");
    const auto b = parse_ints(c.train_len.substr(colon + 1), "--train-len");
    if (a.size() != 1 || b.size() != 1)
      fail("--train-len must be A:B (inclusive), got '{}'", c.train_len);
    o.train_min = a[0];
    o.train_max = b[0];
  }
  o.eval_lens = parse_ints(c.eval_lens, "--eval-lens");
  o.needle_mix = c.needle_mix;
  o.needle_samples = std::max<int64_t>(0, c.needle_samples);
  o.steps = c.steps;
  o.seeds = c.seeds;
  o.batch_size = c.batch;
  o.d_model = c.d_model;
  o.n_layers = c.layers;
  o.n_heads = c.heads;
  o.d_ff = c.d_ff;
  o.norm = model::norm_kind_from_name(c.norm, "--norm");
  o.lr = c.lr;
  o.weight_decay = c.weight_decay;
  o.clip = c.clip;
  o.warmup = c.warmup;
  o.randomized_positions = c.randomized;
  o.eval_samples = c.eval_samples;
  o.checkpoint_every = c.checkpoint_every;
  o.resume = c.resume;
  o.stop_after = c.stop_after;
  if (!c.out.empty()) o.checkpoint_dir = c.out + "/checkpoints";
  return o;
}

// One progress bar per run on stderr: redrawn in place on a terminal, else a line per quarter.
struct progress_bar {
  bool tty = ::isatty(2) != 0;
  std::chrono::steady_clock::time_point last{};
  std::map<int64_t, int64_t> quarter;  // per run (runs may proceed concurrently)

  void operator()(const lab::progress& p) {
    const auto now = std::chrono::steady_clock::now();
    const bool done = p.step == p.steps;
    const double eta =
        p.step > 0 ? p.elapsed / static_cast<double>(p.step) * static_cast<double>(p.steps - p.step)
                   : NAN;
    const int width = 24;
    const int fill = static_cast<int>(width * p.step / std::max<int64_t>(1, p.steps));
    const std::string bar = std::string(fill, '#') + std::string(width - fill, '.');
    const std::string line = fmt::format(
        "lab [{}/{}] {:<10} seed {} [{}] {}/{} loss {:.3f} elapsed {} ETA {}{}", p.run + 1, p.runs,
        model::pos_scheme_name(p.scheme), p.seed, bar, p.step, p.steps, p.loss, fmt_time(p.elapsed),
        fmt_time(eta), p.evaluating ? " evaluating" : "");
    if (tty) {
      if (!p.evaluating && !done && now - last < std::chrono::milliseconds(200)) return;
      last = now;
      std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), p.evaluating ? "\n" : "");
    } else {
      const int64_t q = 4 * p.step / std::max<int64_t>(1, p.steps);
      auto it = quarter.find(p.run);
      if (p.evaluating) {
        std::fprintf(stderr, "%s\n", line.c_str());
      } else if (it == quarter.end() || it->second != q) {
        quarter[p.run] = q;
        std::fprintf(stderr, "%s\n", line.c_str());
      }
    }
    std::fflush(stderr);
  }
};

std::string cell(const nlohmann::ordered_json& v, int digits = 3) {
  if (v.is_null()) return "n/a";
  return fmt::format("{:.{}f}", v.get<double>(), digits);
}

void run_press(lab_cli c, CLI::App* sub);
void run_extend(lab_cli c, CLI::App* sub);

void run_lab_cmd(lab_cli c, CLI::App* sub) {
  if (!c.preset.empty()) {
    if (c.preset == "extend") return run_extend(c, sub);
    if (c.preset != "press") fail("--preset must be press or extend, got '{}'", c.preset);
    return run_press(c, sub);
  }
  if (c.quick) apply_quick(c, sub);
  if (c.threads < 0) fail("--threads must be >= 0 (0 = default), got {}", c.threads);
  if (c.threads > 0) set_num_threads(c.threads);
  lab::lab_options o = to_options(c);
  const auto dist = mpi_start();
  const bool writer = dist->rank == 0;  // only rank 0 prints and writes
  if (!c.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(c.out, ec);
    if (ec || !std::filesystem::is_directory(c.out))
      fail_io("cannot create output directory {}: {}", c.out, ec.message());
  }
  progress_bar bar;
  lab::progress_fn cb;
  if (!c.no_progress && writer) cb = [&bar](const lab::progress& p) { bar(p); };
  lab::lab_results r;
  r.options = o;
  r.task_info =
      lab::make_task(o.task, o.file, o.eval_file, o.needle_mix > 0 || o.needle_samples > 0);
  lab::validate(o, r.task_info);
  std::vector<lab::run_spec> specs;
  for (auto s : o.schemes)
    for (int64_t k = 0; k < o.seeds; ++k) specs.push_back({o, s, k});
  r.runs = run_specs_mpi(specs, r.task_info, dist, cb);
  if (!writer) return;
  auto j = lab::lab_results_json(r);
  j["config"]["ranks"] = dist->size;
  if (!c.out.empty()) {
    write_file_atomic(c.out + "/results.json", j.dump(2) + "\n");
    std::string csv = "scheme,seed,step,loss,lr\n";
    for (const auto& run : r.runs)
      for (const auto& p : run.curve)
        csv += fmt::format("{},{},{},{},{}\n", model::pos_scheme_name(run.scheme), run.seed, p.step,
                           num(p.loss), num(p.lr));
    write_file_atomic(c.out + "/curves.csv", csv);
  }
  if (c.format == out_format::json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else if (c.format == out_format::csv) {
    std::printf(
        "scheme,seed,eval_len,defined,loss,token_accuracy,exact_match,loss_last64,"
        "in_dist_token_accuracy,in_dist_exact_match\n");
    auto v = [](const nlohmann::ordered_json& x) {
      return x.is_null() ? std::string() : num(x.get<double>());
    };
    for (const auto& row : j["results"])
      std::printf("%s,%lld,%lld,%s,%s,%s,%s,%s,%s,%s\n", row["scheme"].get<std::string>().c_str(),
                  static_cast<long long>(row["seed"].get<int64_t>()),
                  static_cast<long long>(row["eval_len"].get<int64_t>()),
                  row["defined"].get<bool>() ? "true" : "false", v(row["loss"]).c_str(),
                  v(row["token_accuracy"]).c_str(), v(row["exact_match"]).c_str(),
                  v(row["loss_last64"]).c_str(), v(row["in_dist_token_accuracy"]).c_str(),
                  v(row["in_dist_exact_match"]).c_str());
  } else {
    const bool em = r.task_info.exact_match;
    const std::string metric = em ? "exact_match" : "loss";
    std::printf(
        "task %s, train lengths %lld..%lld, %lld steps, %lld seed(s); %s (mean +- std "
        "over seeds; n/a = no defined position)\n",
        lab::task_kind_name(o.task), static_cast<long long>(o.train_min),
        static_cast<long long>(o.train_max), static_cast<long long>(o.steps),
        static_cast<long long>(o.seeds), metric.c_str());
    std::string head =
        fmt::format("{:<11} {:>14}", "scheme", fmt::format("in-dist@{}", o.train_max));
    for (int64_t L : o.eval_lens) head += fmt::format(" {:>14}", fmt::format("@{}", L));
    std::printf("%s\n", head.c_str());
    for (auto s : o.schemes) {
      std::string line = fmt::format("{:<11}", model::pos_scheme_name(s));
      for (const auto& row : j["summary"]) {
        if (row["scheme"] != model::pos_scheme_name(s)) continue;
        const auto& m = row[metric + "_mean"];
        const auto& sd = row[metric + "_std"];
        std::string v = cell(m) + (sd.is_null() || m.is_null() ? "" : "+-" + cell(sd, 2));
        if (row["measure"] == "in_distribution")
          line.insert(11, fmt::format(" {:>14}", v));
        else
          line += fmt::format(" {:>14}", v);
      }
      std::printf("%s\n", line.c_str());
    }
    if (o.needle_samples > 0) print_needles(o, r);
    if (o.task == lab::task_kind::markov)
      std::printf("entropy floor of the source: %.4f nats/token\n", r.task_info.entropy_rate);
    double tps = 0;
    for (const auto& run : r.runs) tps += run.tokens_per_second;
    if (!r.runs.empty())
      std::printf("training speed: %.0f tokens/s per run (mean; runs share %d threads)\n",
                  tps / static_cast<double>(r.runs.size()), num_threads());
    if (!c.out.empty())
      std::printf("wrote %s/results.json and %s/curves.csv\n", c.out.c_str(), c.out.c_str());
  }
  std::fflush(stdout);
}

// ---- --preset press --------------------------------------------------------------------------
//
// Press et al. 2022 (ALiBi), sec. 4 and Fig. 1: language models trained at length L and
// evaluated at longer lengths, here byte-level on five Jane Austen novels with the sixth
// (persuasion) held out (scripts/get-corpus). One row per variant, trained at L in {64, 128} and
// evaluated at L, 2L, 4L, 8L and 16L in non-overlapping and in sliding windows (stride L).
// Without --schemes the rows are the nine press_variants; --schemes picks the variants of the
// schemes it names and adds one plain row for each other scheme it names (the model's defaults,
// as in the passkey runs).
// Sizes (docs/lab.md, "Real text"): the default model (width 64, 2 layers, 4 heads), batch 16,
// press_steps steps, press_eval_chars bytes of the held-out novel; --quick: one seed and
// press_quick_steps steps, press_quick_eval_chars bytes.
constexpr int64_t press_steps = 500, press_eval_chars = 8192;
constexpr int64_t press_quick_steps = 250, press_quick_eval_chars = 4096;

struct press_variant {
  const char* name;
  model::pos_scheme scheme;
  bool embed_scale;  // Vaswani et al.'s sqrt(d_model) on the token embeddings
  bool randomized;   // Ruoss et al. 2023, positions sampled from [0, 16 L)
};
// Press et al.'s rows, in their order; a scheme reached by name has its pos_scheme from its name.
const std::vector<press_variant>& press_variants() {
  static const std::vector<press_variant> v = {
      {"nope", model::pos_scheme::nope, false, false},
      {"sinusoidal", model::pos_scheme::sinusoidal, false, false},
      {"sinusoidal+sqrt(d)", model::pos_scheme::sinusoidal, true, false},
      {"learned", model::pos_scheme::learned, false, false},
      {"learned+randomized", model::pos_scheme::learned, false, true},
      {"rope", model::pos_scheme::rope, false, false},
      {"alibi", model::pos_scheme_from_name("alibi"), false, false},
      {"t5", model::pos_scheme_from_name("t5"), false, false},
      {"shaw", model::pos_scheme_from_name("shaw"), false, false},
  };
  return v;
}

std::string slug(const std::string& name) {
  std::string s;
  for (char ch : name) s += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-';
  return s;
}

bool unset(CLI::App* sub, const char* name) {
  return sub->get_option(name)->count() == 0;
}

// The preset's checks and defaults on the flags left unset (corpus, seeds, steps, held-out
// bytes); returns the training lengths L.
std::vector<int64_t> press_settings(lab_cli& c, CLI::App* sub) {
  if (!unset(sub, "--task") && c.task != "text")
    fail("--preset press is a --task text preset, got --task {}", c.task);
  if (!unset(sub, "--eval-lens"))
    fail("--preset press sets --eval-lens to L, 2L, 4L, 8L, 16L; leave it out");
  if (c.threads < 0) fail("--threads must be >= 0 (0 = default), got {}", c.threads);
  if (c.threads > 0) set_num_threads(c.threads);
  c.task = "text";
  if (unset(sub, "--file")) c.file = "data/janeausten/train.txt";
  if (unset(sub, "--eval-file")) c.eval_file = "data/janeausten/eval.txt";
  for (const std::string& f : {c.file, c.eval_file})
    if (!std::filesystem::exists(f))
      fail_io(
          "--preset press: {} does not exist (run scripts/get-corpus first, or give --file "
          "and --eval-file)",
          f);
  if (unset(sub, "--seeds")) c.seeds = c.quick ? 1 : 3;
  if (unset(sub, "--steps")) c.steps = c.quick ? press_quick_steps : press_steps;
  if (unset(sub, "--eval-chars"))
    c.eval_chars = c.quick ? press_quick_eval_chars : press_eval_chars;
  std::vector<int64_t> lens = {64, 128};
  if (!unset(sub, "--train-len")) {
    lens = parse_ints(c.train_len, "--train-len");
    if (lens.size() != 1 || lens[0] < 1)
      fail("--preset press: --train-len must be one length L (trained at exactly L), got '{}'",
           c.train_len);
  }
  return lens;
}

// The rows: every press variant without --schemes; with it, the variants of the schemes it
// names, then one plain row for each scheme it names that has none.
std::vector<press_variant> press_selection(const lab::lab_options& base, bool all) {
  std::vector<press_variant> variants;
  for (const auto& v : press_variants())
    if (all || std::find(base.schemes.begin(), base.schemes.end(), v.scheme) != base.schemes.end())
      variants.push_back(v);
  if (!all)
    for (model::pos_scheme s : base.schemes)
      if (std::none_of(press_variants().begin(), press_variants().end(),
                       [s](const press_variant& v) { return v.scheme == s; }))
        variants.push_back({model::pos_scheme_name(s), s, false, false});
  return variants;
}

// One variant at one training length, and its options.
struct press_group {
  press_variant v;
  lab::lab_options o;
};

// Every variant at every training length L, evaluated at L..16L, each validated against the
// task; in this order the runs are listed (each group's seeds in turn).
std::vector<press_group> press_groups(const lab_cli& c, const lab::lab_options& base,
                                      const std::vector<int64_t>& lens,
                                      const std::vector<press_variant>& variants,
                                      const lab::task& t) {
  std::vector<press_group> groups;
  for (int64_t L : lens)
    for (const press_variant& v : variants) {
      lab::lab_options o = base;
      o.train_min = o.train_max = L;
      o.eval_lens = {L, 2 * L, 4 * L, 8 * L, 16 * L};
      o.schemes = {v.scheme};
      o.embed_scale = v.embed_scale;
      o.randomized_positions = v.randomized ? 16 * L : 0;
      if (!c.out.empty())
        o.checkpoint_dir = fmt::format("{}/checkpoints/{}-L{}", c.out, slug(v.name), L);
      lab::validate(o, t);
      groups.push_back({v, o});
    }
  return groups;
}

// results.json of the preset: each group's lab_results_json rows with the variant and training
// length in front, and the preset's configuration.
nlohmann::ordered_json press_json(const lab_cli& c, const lab::lab_options& base,
                                  const std::vector<int64_t>& lens,
                                  const std::vector<press_variant>& variants,
                                  const std::vector<press_group>& groups, const lab::task& t,
                                  const std::vector<lab::run_result>& runs, int ranks,
                                  double wall) {
  using J = nlohmann::ordered_json;
  J doc;
  doc["preset"] = "press";
  doc["task"] = "text";
  J results = J::array(), summary = J::array(), runs_j = J::array();
  size_t next = 0;
  for (const press_group& g : groups) {
    lab::lab_results lr;
    lr.options = g.o;
    lr.task_info = t;
    for (int64_t k = 0; k < g.o.seeds; ++k) lr.runs.push_back(runs[next++]);
    J gj = lab::lab_results_json(lr);
    for (auto [key, dst] : {std::pair<const char*, J*>{"results", &results},
                            {"summary", &summary},
                            {"runs", &runs_j}})
      for (auto row : gj[key]) {
        J r;
        r["variant"] = g.v.name;
        r["train_len"] = g.o.train_max;
        for (auto it = row.begin(); it != row.end(); ++it) r[it.key()] = it.value();
        dst->push_back(r);
      }
  }
  J cfg;
  cfg["file"] = c.file;
  cfg["eval_file"] = c.eval_file;
  cfg["eval_chars"] = base.eval_chars;
  cfg["vocab"] = t.vocab;
  cfg["train_lens"] = lens;
  cfg["eval_multiples"] = {1, 2, 4, 8, 16};
  cfg["sliding_stride"] = "train length";
  cfg["variants"] = J::array();
  for (const press_variant& v : variants) cfg["variants"].push_back(v.name);
  cfg["steps"] = base.steps;
  cfg["seeds"] = base.seeds;
  cfg["batch_size"] = base.batch_size;
  cfg["d_model"] = base.d_model;
  cfg["n_layers"] = base.n_layers;
  cfg["n_heads"] = base.n_heads;
  cfg["d_ff"] = base.d_ff;
  cfg["lr"] = base.lr;
  cfg["threads"] = num_threads();
  cfg["ranks"] = ranks;
  cfg["wall_seconds"] = wall;
  doc["config"] = cfg;
  doc["results"] = results;
  doc["summary"] = summary;
  doc["runs"] = runs_j;
  return doc;
}

// --format text: one table per training length, bits per byte (non-overlapping / sliding).
void print_press_text(const lab_cli& c, const lab::lab_options& base,
                      const std::vector<int64_t>& lens, const std::vector<press_variant>& variants,
                      const nlohmann::ordered_json& summary, double wall) {
  std::printf(
      "press preset: byte-level LM on %s, held out %s (first %lld bytes), %lld steps, %lld "
      "seed(s); bits per byte, mean +- std over seeds, non-overlapping / sliding windows; "
      "n/a = no defined position\n",
      c.file.c_str(), c.eval_file.c_str(), static_cast<long long>(base.eval_chars),
      static_cast<long long>(base.steps), static_cast<long long>(base.seeds));
  for (int64_t L : lens) {
    std::string head = fmt::format("L = {:<14}", L);
    for (int64_t m : {1, 2, 4, 8, 16}) head += fmt::format(" {:>21}", fmt::format("@{}", m * L));
    std::printf("%s\n", head.c_str());
    for (const press_variant& v : variants) {
      std::string line = fmt::format("{:<18}", v.name);
      for (const auto& row : summary) {
        if (row["variant"] != v.name || row["train_len"] != L || row["measure"] != "eval") continue;
        const auto& m = row["bpc_mean"];
        const auto& sd = row["bpc_std"];
        const std::string a = cell(m) + (sd.is_null() || m.is_null() ? "" : "+-" + cell(sd, 2));
        line += fmt::format(" {:>21}", a + " / " + cell(row["sliding_bpc_mean"]));
      }
      std::printf("%s\n", line.c_str());
    }
  }
  std::printf("wall time %.0f s on %d threads\n", wall, num_threads());
  if (!c.out.empty()) std::printf("wrote %s/results.json\n", c.out.c_str());
}

void run_press(lab_cli c, CLI::App* sub) {
  const std::vector<int64_t> lens = press_settings(c, sub);
  lab::lab_options base = to_options(c);
  const auto dist = mpi_start();
  const bool writer = dist->rank == 0;  // only rank 0 prints and writes
  const std::vector<press_variant> variants = press_selection(base, unset(sub, "--schemes"));
  if (!c.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(c.out, ec);
    if (ec || !std::filesystem::is_directory(c.out))
      fail_io("cannot create output directory {}: {}", c.out, ec.message());
  }
  const lab::task t = lab::make_task(lab::task_kind::text, c.file, c.eval_file);
  const std::vector<press_group> groups = press_groups(c, base, lens, variants, t);
  std::vector<lab::run_spec> specs;
  for (const press_group& g : groups)
    for (int64_t k = 0; k < g.o.seeds; ++k) specs.push_back({g.o, g.v.scheme, k});
  progress_bar bar;
  lab::progress_fn cb;
  if (!c.no_progress && writer) cb = [&bar](const lab::progress& p) { bar(p); };
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<lab::run_result> runs = run_specs_mpi(specs, t, dist, cb);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!writer) return;

  const nlohmann::ordered_json doc =
      press_json(c, base, lens, variants, groups, t, runs, dist->size, wall);
  if (!c.out.empty()) write_file_atomic(c.out + "/results.json", doc.dump(2) + "\n");
  if (c.format == out_format::json) {
    std::printf("%s\n", doc.dump(2).c_str());
  } else if (c.format == out_format::csv) {
    std::printf("variant,train_len,seed,eval_len,defined,bpc,sliding_bpc,ppl,sliding_ppl\n");
    auto v = [](const nlohmann::ordered_json& x) {
      return x.is_null() ? std::string() : num(x.get<double>());
    };
    for (const auto& row : doc["results"])
      std::printf("%s,%lld,%lld,%lld,%s,%s,%s,%s,%s\n", row["variant"].get<std::string>().c_str(),
                  static_cast<long long>(row["train_len"].get<int64_t>()),
                  static_cast<long long>(row["seed"].get<int64_t>()),
                  static_cast<long long>(row["eval_len"].get<int64_t>()),
                  row["defined"].get<bool>() ? "true" : "false", v(row["bpc"]).c_str(),
                  v(row["sliding_bpc"]).c_str(), v(row["ppl"]).c_str(),
                  v(row["sliding_ppl"]).c_str());
  } else {
    print_press_text(c, base, lens, variants, doc["summary"], wall);
  }
  std::fflush(stdout);
}

// ---- --preset extend -------------------------------------------------------------------------
//
// Extending a trained RoPE model's context: the protocol is the library's
// (posenc/lab/extend.hpp, run_extend_preset); here the preset's defaults, the corpus, MPI, the
// progress bars and the printing.
constexpr int64_t extend_steps = 500, extend_quick_steps = 250;  // without needles
// With needles three steps in four are needle batches (lab::extend_needle_mix).
constexpr int64_t extend_needle_steps = 3200, extend_quick_needle_steps = 1600;
constexpr int64_t extend_finetune = 100, extend_quick_finetune = 30;
constexpr int64_t extend_budget = 48, extend_quick_budget = 12;
constexpr int64_t extend_needles = 32, extend_quick_needles = 16;

// The models the preset trains at L, by name ("rope, alibi, ...").
std::string extend_trained_names() {
  std::vector<std::string> n;
  for (pos_scheme s : lab::extend_trained_schemes()) n.emplace_back(pos_scheme_name(s));
  return fmt::format("{}", fmt::join(n, ", "));
}

// The preset's options from the flags (its defaults where a flag is not given).
lab::extend_preset_options extend_options(lab_cli& c, CLI::App* sub) {
  if (!unset(sub, "--task") && c.task != "text")
    fail("--preset extend is a --task text preset, got --task {}", c.task);
  for (const char* f : {"--eval-lens", "--schemes", "--randomized-positions"})
    if (!unset(sub, f))
      fail("--preset extend sets {} itself ({} at L; eval at L..16L); leave it out", f,
           extend_trained_names());
  if (c.threads < 0) fail("--threads must be >= 0 (0 = default), got {}", c.threads);
  if (c.threads > 0) set_num_threads(c.threads);
  c.task = "text";
  if (unset(sub, "--file")) c.file = "data/janeausten/train.txt";
  if (unset(sub, "--eval-file")) c.eval_file = "data/janeausten/eval.txt";
  for (const std::string& f : {c.file, c.eval_file})
    if (!std::filesystem::exists(f))
      fail_io(
          "--preset extend: {} does not exist (run scripts/get-corpus first, or give --file "
          "and --eval-file)",
          f);
  if (unset(sub, "--seeds")) c.seeds = c.quick ? 1 : 3;
  if (unset(sub, "--needle-samples"))
    c.needle_samples = c.quick ? extend_quick_needles : extend_needles;
  if (c.needle_samples < 0 || c.needle_samples > 100000)
    fail("--needle-samples must be in [0, 100000] (0 = no retrieval grid), got {}",
         c.needle_samples);
  if (unset(sub, "--steps"))
    c.steps = c.needle_samples > 0 ? (c.quick ? extend_quick_needle_steps : extend_needle_steps)
                                   : (c.quick ? extend_quick_steps : extend_steps);
  if (unset(sub, "--eval-chars"))
    c.eval_chars = c.quick ? press_quick_eval_chars : press_eval_chars;
  if (unset(sub, "--finetune-steps"))
    c.finetune_steps = c.quick ? extend_quick_finetune : extend_finetune;
  if (unset(sub, "--search-budget"))
    c.search_budget = c.quick ? extend_quick_budget : extend_budget;
  lab::extend_preset_options o;
  o.train_len = 64;
  if (!unset(sub, "--train-len")) {
    const auto v = parse_ints(c.train_len, "--train-len");
    if (v.size() != 1 || v[0] < 2)
      fail("--preset extend: --train-len must be one length L >= 2, got '{}'", c.train_len);
    o.train_len = v[0];
  }
  c.schemes = "rope";
  o.base = to_options(c);
  o.seeds = c.seeds;
  o.finetune_steps = c.finetune_steps;
  o.search_budget = c.search_budget;
  o.needle_samples = c.needle_samples;
  o.checkpoint_root = c.out;
  return o;
}

// The retrieval table: per method and key count, the accuracy at each length (mean over depths
// and seeds) and the effective context length (mean +- std over seeds, min-max).
void print_extend_retrieval(const nlohmann::ordered_json& r, int64_t L) {
  std::printf(
      "\nretrieval: exact match of the needle's value, mean over depths and seeds; effective "
      "context length: the longest length up to which it stays >= 0.8 of the accuracy at L "
      "before any extension (the trained model's), where that is >= 0.5\n");
  std::string head = fmt::format("{:<26} {:>4}", "scheme / extension", "keys");
  for (int64_t m : {1, 2, 4, 8, 16}) head += fmt::format(" {:>6}", fmt::format("@{}", m * L));
  std::printf("%s  effective length\n", head.c_str());
  for (const auto& row : r["effective_context"]) {
    std::string line =
        fmt::format("{:<26} {:>4}",
                    fmt::format("{} {}{}", row["scheme"].get<std::string>(),
                                row["extension"].get<std::string>(),
                                row["finetune_steps"].get<int64_t>() > 0 ? " +ft" : ""),
                    row["keys"].get<int64_t>());
    for (const auto& p : row["accuracy_by_length"])
      line += fmt::format(" {:>6.2f}", p[1].get<double>());
    const auto& sd = row["effective_context_length_std"];
    if (row["reference_accuracy_mean"].get<double>() < lab::needle_retrieves) {
      std::printf("%s  n/a (does not retrieve at L)\n", line.c_str());
      continue;
    }
    line += fmt::format("  {:.0f}{} ({:.0f}-{:.0f})",
                        row["effective_context_length_mean"].get<double>(),
                        sd.is_null() ? "" : fmt::format(" +- {:.0f}", sd.get<double>()),
                        row["effective_context_length_min"].get<double>(),
                        row["effective_context_length_max"].get<double>());
    std::printf("%s\n", line.c_str());
  }
}

// The summary as a table: one line per scheme / extension, a column per evaluation length.
void print_extend_text(const lab_cli& c, const nlohmann::ordered_json& doc) {
  const auto& cfg = doc["config"];
  const int64_t L = cfg["train_len"].get<int64_t>();
  std::printf(
      "extend preset: byte-level LM on %s, held out %s (first %lld bytes); trained at L = %lld "
      "for %lld steps, extended to %lld; fine-tunes of %lld steps x %lld tokens; %lld seed(s); "
      "bits per byte, mean +- std over seeds\n",
      c.file.c_str(), c.eval_file.c_str(), static_cast<long long>(cfg["eval_chars"].get<int64_t>()),
      static_cast<long long>(L), static_cast<long long>(cfg["steps"].get<int64_t>()),
      static_cast<long long>(cfg["target_len"].get<int64_t>()),
      static_cast<long long>(c.finetune_steps), static_cast<long long>(lab::extend_tokens),
      static_cast<long long>(c.seeds));
  std::string head = fmt::format("{:<26}", "scheme / extension");
  for (int64_t m : {1, 2, 4, 8, 16}) head += fmt::format(" {:>13}", fmt::format("@{}", m * L));
  std::printf("%s\n", head.c_str());
  std::string last;
  for (const auto& row : doc["summary"]) {
    const std::string name = fmt::format("{} {}{}", row["scheme"].get<std::string>(),
                                         row["extension"].get<std::string>(),
                                         row["finetune_steps"].get<int64_t>() > 0 ? " +ft" : "");
    if (name != last) {
      if (!last.empty()) std::printf("\n");
      std::printf("%-26s", name.c_str());
      last = name;
    }
    const auto& m = row["bits_per_byte_mean"];
    const auto& sd = row["bits_per_byte_std"];
    std::printf(" %13s",
                (cell(m) + (sd.is_null() || m.is_null() ? "" : "+-" + cell(sd, 2))).c_str());
  }
  std::printf("\n");
  if (doc.contains("retrieval")) print_extend_retrieval(doc["retrieval"], L);
  std::printf("wall time %.0f s on %d threads\n", cfg["wall_seconds"].get<double>(), num_threads());
  if (!c.out.empty()) std::printf("wrote %s/results.json\n", c.out.c_str());
}

void run_extend(lab_cli c, CLI::App* sub) {
  using J = nlohmann::ordered_json;
  const lab::extend_preset_options o = extend_options(c, sub);
  const auto dist = mpi_start();
  const bool writer = dist->rank == 0;
  if (!c.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(c.out, ec);
    if (ec || !std::filesystem::is_directory(c.out))
      fail_io("cannot create output directory {}: {}", c.out, ec.message());
  }
  const lab::task t =
      lab::make_task(lab::task_kind::text, c.file, c.eval_file, o.needle_samples > 0);
  progress_bar bar;
  lab::extend_progress progress;
  if (writer && !c.no_progress) {
    progress.phase = [](const std::string& what, int64_t runs) {
      if (runs >= 0)
        std::fprintf(stderr, "extend: %s (%lld runs)\n", what.c_str(),
                     static_cast<long long>(runs));
      else
        std::fprintf(stderr, "extend: %s\n", what.c_str());
    };
    progress.runs = [&bar]() -> lab::progress_fn {
      bar = progress_bar();
      return [&bar](const lab::progress& p) { bar(p); };
    };
  }
  const J doc = lab::run_extend_preset(o, t, dist, progress);
  if (!writer) return;
  if (!c.out.empty()) write_file_atomic(c.out + "/results.json", doc.dump(2) + "\n");
  if (c.format == out_format::json) {
    std::printf("%s\n", doc.dump(2).c_str());
  } else if (c.format == out_format::csv) {
    // results.json's row fields, in its order; null is an empty cell.
    const char* cols[] = {"task",      "scheme",   "extension",    "finetune_steps",
                          "train_len", "eval_len", "depth",        "keys",
                          "seed",      "accuracy", "bits_per_byte"};
    std::printf("%s\n", fmt::format("{}", fmt::join(cols, ",")).c_str());
    for (const J& row : doc["results"]) {
      std::vector<std::string> cells;
      for (const char* k : cols) {
        const J& v = row[k];
        cells.push_back(v.is_null()             ? ""
                        : v.is_string()         ? v.get<std::string>()
                        : v.is_number_integer() ? std::to_string(v.get<int64_t>())
                                                : num(v.get<double>()));
      }
      std::printf("%s\n", fmt::format("{}", fmt::join(cells, ",")).c_str());
    }
  } else {
    print_extend_text(c, doc);
  }
  std::fflush(stdout);
}

// The parameters of the schemes reached by name, from their declarations (schemes.hpp): a flag
// per numeric, bool or choice parameter (tensors are the model's own), into o->named_params.
void add_named_scheme_options(CLI::App* sub, const std::shared_ptr<lab_cli>& o) {
  for (const scheme_decl* d : named_scheme_decls())
    for (size_t i = 1; i < d->params.size(); ++i) {
      const scheme_param& p = d->params[i];
      if (is_tensor_param(p)) continue;  // the model's own
      std::string flag = std::string("--") + p.name;
      std::replace(flag.begin(), flag.end(), '_', '-');
      if (std::string(p.dtype) == "bool") {  // --name (1) or --name=false (0)
        sub->add_flag_function(
            flag,
            [o, name = std::string(p.name)](int64_t n) {
              o->named_params.emplace_back(name, n > 0 ? 1.0 : 0.0);
            },
            fmt::format("{} {}: {} (default {}; with --schemes {})", d->title, p.name, p.doc, p.def,
                        d->name));
        continue;
      }
      if (p.choices) {  // a choice of strings: its text, passed on as its index
        sub->add_option_function<std::string>(
               flag,
               [o, d, name = std::string(p.name)](const std::string& v) {
                 o->named_params.emplace_back(name, named_choice(*d, name, v));
               },
               fmt::format("{} {}: {} (default {}; with --schemes {})", d->title, p.name, p.doc,
                           p.def, d->name))
            ->type_name(fmt::format("{}", fmt::join(param_choices(p), "|")));
        continue;
      }
      sub->add_option_function<double>(
             flag,
             [o, name = std::string(p.name)](const double& v) {
               o->named_params.emplace_back(name, v);
             },
             fmt::format("{} {}, {}: {} (default {}; with --schemes {})", d->title, p.name, p.dtype,
                         p.doc, p.def, d->name))
          ->type_name(std::string(p.dtype) == "int" ? "INT" : "FLOAT");
    }
}

const bool registered_cmd_lab = register_command(70, [](CLI::App& app) {
  auto o = std::make_shared<lab_cli>();
  auto* sub = app.add_subcommand(
      "lab", "Train small transformers with each position scheme; compare lengths");
  add_format_option(sub, o->format);
  sub->add_option("--task", o->task, "copy, passkey, repeat-count, markov or text")
      ->capture_default_str();
  sub->add_option("--file", o->file, "Text file for --task text");
  sub->add_option("--eval-file", o->eval_file,
                  "--task text: held-out text to evaluate on (Press et al.'s windows)");
  sub->add_option("--eval-chars", o->eval_chars, "With --eval-file: bytes of it scored (0 = all)")
      ->capture_default_str();
  sub->add_flag("--embed-scale", o->embed_scale,
                "x_0 = sqrt(d_model) E + PE (Vaswani et al. 2017) instead of E + a PE");
  sub->add_option("--preset", o->preset,
                  "press: Press et al. 2022's perplexity-against-length table on the "
                  "Jane Austen corpus (scripts/get-corpus); extend: a RoPE model trained at L "
                  "extended to 8L by none, linear, dynamic, yarn, llama3, longrope and pose, "
                  "zero-shot and fine-tuned, beside models trained with schemes that need no "
                  "extension, judged by bits per byte and by retrieval; with --quick smaller ones");
  sub->add_option("--finetune-steps", o->finetune_steps,
                  "--preset extend: fine-tuning steps per method (default 100; --quick 30)");
  sub->add_option("--search-budget", o->search_budget,
                  "--preset extend: LongRoPE candidates scored per seed (default 48; --quick 12)");
  sub->add_option("--needle-mix", o->needle_mix,
                  "Text tasks: the fraction of training sequences that carry needles (a key and "
                  "a 4-digit value asked for again at the end; docs/lab.md), 0 to 1");
  sub->add_option("--needle-samples", o->needle_samples,
                  "Sequences per cell of the retrieval grid (depth x evaluation length x keys; "
                  "text tasks). --preset extend: default 32, --quick 16; 0 = bits per byte "
                  "alone, no needles in training");
  std::vector<std::string> trainable;  // every model scheme, from the registry
  for (int i = 0; i < pos_scheme_count(); ++i)
    trainable.emplace_back(pos_scheme_name(static_cast<pos_scheme>(i)));
  sub->add_option("--schemes", o->schemes,
                  fmt::format("Comma-separated, of: {} (posenc schemes describes each; irope "
                              "needs --layers 4 or more). With --preset press: the preset's "
                              "variants of these schemes, plus one row per scheme it has none of",
                              fmt::join(trainable, ", ")))
      ->capture_default_str();
  sub->add_option("--train-len", o->train_len, "Training lengths A:B (inclusive)")
      ->capture_default_str();
  sub->add_option("--eval-lens", o->eval_lens, "Evaluation lengths a,b,c")->capture_default_str();
  sub->add_option("--steps", o->steps, "Training steps per run")->capture_default_str();
  sub->add_option("--seeds", o->seeds, "Seeds per scheme (0..N-1)")->capture_default_str();
  sub->add_option("--batch", o->batch, "Sequences per step")->capture_default_str();
  sub->add_option("--d-model", o->d_model, "Model width")->capture_default_str();
  sub->add_option("--layers", o->layers, "Transformer layers")->capture_default_str();
  sub->add_option("--heads", o->heads, "Attention heads")->capture_default_str();
  sub->add_option("--d-ff", o->d_ff, "MLP hidden width")->capture_default_str();
  sub->add_option("--norm", o->norm, "layernorm or rmsnorm")->capture_default_str();
  sub->add_option("--lr", o->lr, "Peak learning rate (AdamW)")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Warm-up steps (0 = steps/10)")->capture_default_str();
  sub->add_option("--weight-decay", o->weight_decay, "AdamW weight decay")->capture_default_str();
  sub->add_option("--clip", o->clip, "Gradient-norm clip (0 = off)")->capture_default_str();
  sub->add_option("--randomized-positions", o->randomized,
                  "Ruoss et al. 2023: positions are a sorted sample from [0, N) (0 = off)")
      ->capture_default_str();
  sub->add_option("--eval-samples", o->eval_samples, "Evaluation sequences per length")
      ->capture_default_str();
  sub->add_option("--out", o->out, "Directory for results.json, curves.csv and checkpoints");
  sub->add_option("--checkpoint-every", o->checkpoint_every,
                  "Also checkpoint every N steps (needs --out; 0 = only at the end)")
      ->capture_default_str();
  sub->add_flag("--resume", o->resume, "Continue from the checkpoints in --out DIR");
  sub->add_option("--stop-after", o->stop_after,
                  "Stop each run after N steps in this process, leaving a checkpoint "
                  "(simulates an interruption; continue with --resume)");
  sub->add_option("--threads", o->threads, "Threads (0 = POSENC_THREADS or all cores)");
  sub->add_flag(
      "--quick", o->quick,
      "Small preset (passkey: 2000 steps, 1 seed; with --preset press: 1 seed, 250 steps)");
  sub->add_flag("--no-progress", o->no_progress, "No progress bar on stderr");
  add_named_scheme_options(sub, o);
  sub->callback([o, sub] {
    // Under mpirun an error on one rank ends every rank at once (never a rank left waiting in
    // a collective), with the exit code posenc gives that error.
    try {
      run_lab_cmd(*o, sub);
    } catch (const std::exception& e) {
      if (under_mpirun()) {
        const bool usage = dynamic_cast<const posenc::invalid_argument*>(&e) != nullptr ||
                           dynamic_cast<const posenc::io_error*>(&e) != nullptr;
        std::fprintf(stderr, "posenc: error: %s\n", e.what());
        std::fflush(stderr);
        mpi_abort(usage ? 2 : 3);
      }
      throw;
    }
    mpi_finish();
  });
});

}  // namespace
}  // namespace posenc::cli
