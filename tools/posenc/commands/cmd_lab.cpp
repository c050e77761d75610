// posenc lab: train small decoder-only transformers with each position scheme on a generated
// task and compare them in distribution and at longer lengths (issue 6, docs/lab.md).
//
//   posenc lab --task passkey --schemes nope,sinusoidal,learned,rope,alibi,t5
//              --train-len 16:64 --eval-lens 64,128,256,512 --steps 3000 --seeds 3 --out DIR
//
// Progress (one bar per run, elapsed and ETA) goes to stderr; the results go to stdout in the
// chosen format and, with --out DIR, to DIR/results.json and DIR/curves.csv (atomic writes).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/lab/lab.hpp"

namespace posenc::cli {
namespace {

struct lab_cli {
  out_format format = out_format::text;
  std::string task = "passkey", file, schemes = "nope,sinusoidal,learned,rope,alibi,t5",
              train_len = "16:64", eval_lens = "64,128,256,512", norm = "layernorm", out;
  int64_t steps = 3000, seeds = 3, batch = 16, d_model = 64, layers = 2, heads = 4, d_ff = 256;
  int64_t warmup = 0, randomized = 0, eval_samples = 64, checkpoint_every = 0, stop_after = -1;
  int threads = 0;
  double lr = 3e-3, weight_decay = 0.01, clip = 1.0;
  bool quick = false, resume = false, no_progress = false;
};

std::string fmt_time(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const int64_t t = static_cast<int64_t>(s + 0.5);
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

lab::lab_options to_options(const lab_cli& c) {
  lab::lab_options o;
  o.task = lab::task_kind_from_name(c.task, "--task");
  o.file = c.file;
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

void run_lab_cmd(lab_cli c, CLI::App* sub) {
  if (c.quick) apply_quick(c, sub);
  if (c.threads < 0) fail("--threads must be >= 0 (0 = default), got {}", c.threads);
  if (c.threads > 0) set_num_threads(c.threads);
  const lab::lab_options o = to_options(c);
  if (!c.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(c.out, ec);
    if (ec || !std::filesystem::is_directory(c.out))
      fail_io("cannot create output directory {}: {}", c.out, ec.message());
  }
  progress_bar bar;
  lab::progress_fn cb;
  if (!c.no_progress) cb = [&bar](const lab::progress& p) { bar(p); };
  const lab::lab_results r = lab::run_lab(o, cb);
  const auto j = lab::lab_results_json(r);
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

const bool registered = register_command(70, [](CLI::App& app) {
  auto o = std::make_shared<lab_cli>();
  auto* sub = app.add_subcommand(
      "lab", "Train small transformers with each position scheme; compare lengths");
  add_format_option(sub, o->format);
  sub->add_option("--task", o->task, "copy, passkey, repeat-count, markov or text")
      ->capture_default_str();
  sub->add_option("--file", o->file, "Text file for --task text");
  sub->add_option("--schemes", o->schemes,
                  "Comma-separated: nope, sinusoidal, learned, rope, alibi, t5, shaw, irope "
                  "(RoPE with every 4th layer NoPE; use --layers 4 or more)")
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
  sub->add_flag("--quick", o->quick,
                "Small preset (2000 steps, 1 seed, lengths 64,128,256), under 10 minutes");
  sub->add_flag("--no-progress", o->no_progress, "No progress bar on stderr");
  sub->callback([o, sub] { run_lab_cmd(*o, sub); });
});

}  // namespace
}  // namespace posenc::cli
