// `posenc lab --preset extend`'s protocol (posenc/lab/extend.hpp; docs/lab.md, "Extending the
// context"): the runs of its four phases and the results document. The CLI parses the flags,
// starts MPI and prints; everything the numbers depend on is here.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "posenc/attention/schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/formats/hf_config.hpp"
#include "posenc/lab/extend.hpp"
#include "posenc/lab/needle.hpp"

namespace posenc::lab {

std::vector<named_scheme> extend_pair_schemes(int64_t L) {
  std::vector<named_scheme> out;
  for (const scheme_decl& d : scheme_decls())
    if (rope_pairs_in_lab(d)) out.push_back({d.name, rope_pairs_lab_params(d, L)});
  return out;
}

std::vector<model::pos_scheme> extend_trained_schemes() {
  std::vector<model::pos_scheme> out = {model::pos_scheme::rope};
  for (const scheme_decl& d : scheme_decls())
    if (d.lab_extend_trained) out.push_back(model::pos_scheme_from_name(d.name));
  return out;
}

namespace {

using J = nlohmann::ordered_json;

struct extend_row {  // one run of phases 3-4
  std::string scheme, ext;
  bool finetuned = false;
  int64_t seed = 0;
  size_t run = 0;  // index into the phase's results
};

// The state of one protocol run: its options and the runs' results, phase by phase.
struct extend_run {
  extend_run(const extend_preset_options& opts, const task& task_,
             std::shared_ptr<const distribution> d, const extend_progress& p)
      : o(opts), t(task_), dist(std::move(d)), progress(p), base(opts.base) {}
  const extend_preset_options& o;
  const task& t;
  std::shared_ptr<const distribution> dist;
  const extend_progress& progress;
  lab_options base;
  int64_t L = 0, target = 0, scored = 0, search_end = 0;
  std::vector<run_spec> train, ext_specs;
  std::vector<run_result> trained_runs, ext_runs;
  std::vector<const run_result*> rope_runs;
  std::vector<longrope_search_result> searches;
  std::vector<extend_row> rows;

  // Each phase needs the previous one's weights on every rank, so over MPI every rank takes
  // part in every run (one at a time, each step's shards spread over the ranks: bitwise the
  // numbers of one process) rather than run_specs_mpi's groups of ranks.
  std::vector<run_result> run_phase(std::vector<run_spec> specs, const char* what) const {
    if (progress.phase) progress.phase(what, static_cast<int64_t>(specs.size()));
    const progress_fn cb = progress.runs ? progress.runs() : progress_fn();
    if (dist && dist->size > 1)
      for (auto& s : specs) s.options.dist = dist;
    return run_specs(specs, t, cb);
  }
  void train_at_L();
  void search_longrope();
  void extension_specs();
  // Calls f(scheme, extension, finetune_steps, seed, result, sequence length, trains) for every
  // run in result order: the models trained at L, then the extension rows; trains: the run
  // took steps (a zero-shot row takes none).
  template <class F>
  void for_each_run(F f) const {
    for (size_t i = 0; i < train.size(); ++i)
      f(model::pos_scheme_name(train[i].scheme), std::string("none"), int64_t{0}, train[i].seed,
        trained_runs[i], L, true);
    for (const extend_row& r : rows)
      f(r.scheme, r.ext, r.finetuned ? o.finetune_steps : 0, r.seed, ext_runs[r.run],
        ext_specs[r.run].options.train_max, r.finetuned);
  }
  J results() const;
  J runs() const;
  J config(double wall) const;
};

void validate_options(const extend_preset_options& o, const task& t) {
  if (o.train_len < 2) fail("--preset extend: --train-len must be >= 2, got {}", o.train_len);
  if (o.seeds < 1) fail("--seeds must be >= 1, got {}", o.seeds);
  if (o.finetune_steps < 1 || o.finetune_steps > 1000000)
    fail("--finetune-steps must be in [1, 10^6], got {}", o.finetune_steps);
  if (o.search_budget < 3 || o.search_budget > 100000)
    fail("--search-budget must be in [3, 10^5], got {}", o.search_budget);
  if (o.base.eval_chars < 1)
    fail("--preset extend: --eval-chars must be >= 1, got {}", o.base.eval_chars);
  const int64_t target = extend_factor * o.train_len;
  if (extend_tokens % target != 0 || extend_tokens % o.train_len != 0)
    fail("--preset extend: --train-len {} must divide {} / {} (the tokens of a fine-tuning step)",
         o.train_len, extend_tokens, extend_factor);
  if (t.eval_text.empty()) fail("--preset extend needs a text task with held-out text");
}

// 1. Training at L: RoPE and the schemes that need no extension (extend_trained_schemes), each
// seed.
void extend_run::train_at_L() {
  for (model::pos_scheme s : extend_trained_schemes())
    for (int64_t k = 0; k < o.seeds; ++k) {
      lab_options lo = base;
      lo.schemes = {s};
      if (!o.checkpoint_root.empty())
        lo.checkpoint_dir =
            fmt::format("{}/checkpoints/{}-L{}", o.checkpoint_root, model::pos_scheme_name(s), L);
      validate(lo, t);
      train.push_back({lo, s, k});
    }
  trained_runs = run_phase(train, "training at L");
  for (size_t i = 0; i < train.size(); ++i)
    if (train[i].scheme == model::pos_scheme::rope) rope_runs.push_back(&trained_runs[i]);
}

// 2. LongRoPE's search per seed, on held-out bytes after the scored ones.
void extend_run::search_longrope() {
  for (int64_t k = 0; k < o.seeds; ++k) {
    if (progress.phase)
      progress.phase(
          fmt::format("LongRoPE search, seed {} ({} candidates at {})", k, o.search_budget, target),
          -1);
    lab_options lo = base;
    lo.dist = dist && dist->size > 1 ? dist : nullptr;
    model::transformer<float> m(lab_model_config(lo, t, model::pos_scheme::rope));
    m.params() = rope_runs[static_cast<size_t>(k)]->final_params;
    longrope_search_options so;
    so.train_len = L;
    so.factor = extend_factor;
    so.budget = o.search_budget;
    so.begin = scored;
    so.end = search_end;
    so.seed = static_cast<uint64_t>(k);
    searches.push_back(longrope_search(m, lo, t, so));
  }
}

// 3-4. Each method zero-shot and fine-tuned, then the per-pair schemes zero-shot.
void extend_run::extension_specs() {
  const int64_t D = base.d_model / base.n_heads;
  for (bool ft : {false, true})
    for (extension e : extensions()) {
      if (!ft && (e == extension::none || e == extension::pose))
        continue;  // none zero-shot is the trained run; PoSE is a fine-tune of linear's config
      for (int64_t k = 0; k < o.seeds; ++k) {
        lab_options lo = base;
        lo.schemes = {model::pos_scheme::rope};
        lo.rope = extension_config(e, D, 10000, L, extend_factor,
                                   searches[static_cast<size_t>(k)].long_factor);
        lo.init_params = rope_runs[static_cast<size_t>(k)]->final_params;
        lo.checkpoint_dir.clear();
        lo.steps = 0;
        if (ft) {
          lo.steps = o.finetune_steps;
          lo.lr = base.lr / 3;
          lo.warmup = std::max<int64_t>(1, o.finetune_steps / 10);
          const bool pose = e == extension::pose;
          lo.train_min = lo.train_max = pose ? L : target;
          lo.batch_size = extend_tokens / lo.train_max;
          lo.pose_target = pose ? target : 0;
          // Fine-tunes read text alone, as the papers' (YaRN on PG19, PoSE on RedPajama) did
          // before their passkey tests: retrieval at the new length is what carries over.
          lo.needle_mix = 0;
        }
        validate(lo, t);
        rows.push_back({"rope", extension_name(e), ft, k, ext_specs.size()});
        ext_specs.push_back({lo, model::pos_scheme::rope, k});
      }
    }
  for (const named_scheme& n : extend_pair_schemes(L))
    for (int64_t k = 0; k < o.seeds; ++k) {
      lab_options lo = base;
      lo.schemes = {model::pos_scheme::rope};
      lo.rope_pairs = {n};
      lo.init_params = rope_runs[static_cast<size_t>(k)]->final_params;
      lo.checkpoint_dir.clear();
      lo.steps = 0;
      validate(lo, t);
      rows.push_back({"rope", n.name, false, k, ext_specs.size()});
      ext_specs.push_back({lo, model::pos_scheme::rope, k});
    }
}

// One row per (scheme, extension, fine-tune, seed, eval length) for bits per byte (task "text"),
// and with needles one per retrieval cell (task "needle", the run's bits per byte at that length
// beside its accuracy).
J extend_run::results() const {
  const double ln2 = std::log(2.0);
  J out = J::array();
  for_each_run([&](const std::string& scheme, const std::string& ext, int64_t ft_steps,
                   int64_t seed, const run_result& r, int64_t, bool) {
    std::map<int64_t, J> bpb;
    auto row = [&](const char* task, int64_t len, const J& depth, const J& keys, const J& acc) {
      J x;
      x["task"] = task;
      x["scheme"] = scheme;
      x["extension"] = ext;
      x["finetune_steps"] = ft_steps;
      x["train_len"] = L;
      x["eval_len"] = len;
      x["depth"] = depth;
      x["keys"] = keys;
      x["seed"] = seed;
      x["accuracy"] = acc;
      x["bits_per_byte"] = bpb[len];
      x["in_distribution"] = len == L;
      out.push_back(x);
    };
    for (const eval_metrics& e : r.evals) {
      bpb[e.length] = e.defined && std::isfinite(e.loss) ? J(e.loss / ln2) : J(nullptr);
      row("text", e.length, nullptr, nullptr, nullptr);
    }
    for (const needle_metrics& c : r.needles)
      row("needle", c.length, c.depth, c.keys,
          std::isfinite(c.accuracy) ? J(c.accuracy) : J(nullptr));
  });
  return out;
}

// The training and fine-tuning time of each run (PoSE's point is its cost): the trained models
// and the fine-tunes (a zero-shot row trains nothing).
J extend_run::runs() const {
  J out = J::array();
  for_each_run([&](const std::string& scheme, const std::string& ext, int64_t ft_steps,
                   int64_t seed, const run_result& r, int64_t len, bool trains) {
    if (!trains) return;
    J row;
    row["scheme"] = scheme;
    row["extension"] = ext;
    row["finetune_steps"] = ft_steps;
    row["seed"] = seed;
    row["steps"] = r.steps_done;
    row["sequence_length"] = len;
    row["train_seconds"] = r.train_seconds;
    row["tokens_per_second"] = r.tokens_per_second;
    out.push_back(row);
  });
  return out;
}

// Mean and sample std over seeds per (scheme, extension, finetune_steps, eval_len).
J summarize(const J& results) {
  J summary = J::array();
  std::vector<std::string> keys;
  std::map<std::string, std::vector<const J*>> groups;
  for (const J& row : results) {
    if (row["task"] != "text") continue;
    const std::string key = fmt::format(
        "{}|{}|{}|{}", row["scheme"].get<std::string>(), row["extension"].get<std::string>(),
        row["finetune_steps"].get<int64_t>(), row["eval_len"].get<int64_t>());
    if (!groups.count(key)) keys.push_back(key);
    groups[key].push_back(&row);
  }
  for (const std::string& key : keys) {
    const auto& g = groups[key];
    double sum = 0;
    bool all = true;
    for (const J* r : g) {
      if ((*r)["bits_per_byte"].is_null())
        all = false;
      else
        sum += (*r)["bits_per_byte"].get<double>();
    }
    const double n = static_cast<double>(g.size());
    J row;
    for (const char* k : {"scheme", "extension", "finetune_steps", "train_len", "eval_len"})
      row[k] = (*g[0])[k];
    row["seeds"] = g.size();
    if (all) {
      const double mean = sum / n;
      double ss = 0;
      for (const J* r : g) ss += std::pow((*r)["bits_per_byte"].get<double>() - mean, 2);
      row["bits_per_byte_mean"] = mean;
      row["bits_per_byte_std"] = g.size() > 1 ? J(std::sqrt(ss / (n - 1))) : J(nullptr);
    } else {
      row["bits_per_byte_mean"] = nullptr;
      row["bits_per_byte_std"] = nullptr;
    }
    summary.push_back(row);
  }
  return summary;
}

// Mean and sample std of a set of values (std null for one value).
std::pair<double, J> mean_std(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  const double n = static_cast<double>(v.size()), mean = sum / n;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? J(std::sqrt(ss / (n - 1))) : J(nullptr)};
}

}  // namespace

// The retrieval grid over seeds: each cell's mean and std of accuracy per (method, eval length,
// depth, keys), and each method's effective context length per seed (effective_context_length
// over its lengths of the mean accuracy over depths) with their mean, std, min and max.
J extend_retrieval_summary(const J& results) {
  std::vector<std::string> cell_keys, method_keys;
  std::map<std::string, std::vector<const J*>> cells;
  // method|keys -> seed -> eval_len -> accuracies over depths
  std::map<std::string, std::map<int64_t, std::map<int64_t, std::vector<double>>>> by_method;
  std::map<std::string, const J*> method_row;
  for (const J& row : results) {
    if (row["task"] != "needle" || row["accuracy"].is_null()) continue;
    const std::string method = fmt::format(
        "{}|{}|{}|{}", row["scheme"].get<std::string>(), row["extension"].get<std::string>(),
        row["finetune_steps"].get<int64_t>(), row["keys"].get<int64_t>());
    const std::string key =
        fmt::format("{}|{}|{}", method, row["eval_len"].get<int64_t>(), row["depth"].get<double>());
    if (!cells.count(key)) cell_keys.push_back(key);
    cells[key].push_back(&row);
    if (!method_row.count(method)) method_keys.push_back(method);
    method_row.emplace(method, &row);
    by_method[method][row["seed"].get<int64_t>()][row["eval_len"].get<int64_t>()].push_back(
        row["accuracy"].get<double>());
  }
  J out;
  out["cells"] = J::array();
  for (const std::string& key : cell_keys) {
    const auto& g = cells[key];
    std::vector<double> acc;
    for (const J* r : g) acc.push_back((*r)["accuracy"].get<double>());
    J row;
    for (const char* k :
         {"scheme", "extension", "finetune_steps", "train_len", "eval_len", "depth", "keys"})
      row[k] = (*g[0])[k];
    row["seeds"] = g.size();
    const auto [mean, sd] = mean_std(acc);
    row["accuracy_mean"] = mean;
    row["accuracy_std"] = sd;
    out["cells"].push_back(row);
  }
  // A method on the trained RoPE model is held to that model's accuracy at L (same seed and
  // keys): what it kept of the lookup the model had before any extension.
  auto at_L = [&](const std::string& method, int64_t seed) {
    const auto& lens_acc = by_method[method][seed];
    return lens_acc.empty() ? 0.0 : mean_std(lens_acc.begin()->second).first;
  };
  out["effective_context"] = J::array();
  for (const std::string& method : method_keys) {
    const J& first = *method_row[method];
    const std::string base = fmt::format("rope|none|0|{}", first["keys"].get<int64_t>());
    const bool on_rope = first["scheme"] == "rope" && by_method.count(base);
    std::vector<double> ecl, in_dist, ref;
    std::map<int64_t, std::vector<double>> acc_by_len;  // over seeds
    for (const auto& [seed, lens_acc] : by_method[method]) {
      std::vector<int64_t> lens;
      std::vector<double> acc;
      for (const auto& [len, a] : lens_acc) {
        lens.push_back(len);
        acc.push_back(mean_std(a).first);
        acc_by_len[len].push_back(acc.back());
      }
      in_dist.push_back(acc[0]);
      ref.push_back(on_rope ? at_L(base, seed) : acc[0]);
      ecl.push_back(static_cast<double>(effective_context_length(lens, acc, ref.back())));
    }
    J row;
    for (const char* k : {"scheme", "extension", "finetune_steps", "train_len", "keys"})
      row[k] = first[k];
    row["seeds"] = ecl.size();
    row["in_distribution_accuracy_mean"] = mean_std(in_dist).first;
    row["reference_accuracy_mean"] = mean_std(ref).first;
    J by_len = J::array();
    for (const auto& [len, a] : acc_by_len) by_len.push_back({len, mean_std(a).first});
    row["accuracy_by_length"] = by_len;
    const auto [mean, sd] = mean_std(ecl);
    row["effective_context_length"] = ecl;
    row["effective_context_length_mean"] = mean;
    row["effective_context_length_std"] = sd;
    row["effective_context_length_min"] = *std::min_element(ecl.begin(), ecl.end());
    row["effective_context_length_max"] = *std::max_element(ecl.begin(), ecl.end());
    out["effective_context"].push_back(row);
  }
  return out;
}

namespace {

// Each method's config as config.json keys (posenc rope freqs --hf-config reads them back);
// LongRoPE's per seed.
J rope_configs(const extend_run& r) {
  const int64_t D = r.base.d_model / r.base.n_heads;
  J methods = J::object();
  for (extension e : extensions()) {
    if (e == extension::longrope) continue;
    methods[extension_name(e)] =
        rope_config_to_json(extension_config(e, D, 10000, r.L, extend_factor));
  }
  J lr = J::array();
  for (size_t k = 0; k < r.searches.size(); ++k) {
    J s;
    s["seed"] = k;
    s["config"] = rope_config_to_json(extension_config(extension::longrope, D, 10000, r.L,
                                                       extend_factor, r.searches[k].long_factor));
    s["search_bits_per_byte"] = r.searches[k].loss / std::log(2.0);
    s["linear_bits_per_byte"] = r.searches[k].linear_loss / std::log(2.0);
    s["candidates"] = r.searches[k].evaluated;
    lr.push_back(s);
  }
  methods["longrope"] = lr;
  return methods;
}

J extend_run::config(double wall) const {
  J cfg;
  cfg["file"] = base.file;
  cfg["eval_file"] = base.eval_file;
  cfg["eval_chars"] = scored;
  cfg["search_bytes"] = {scored, search_end};
  cfg["train_len"] = L;
  cfg["target_len"] = target;
  cfg["eval_lens"] = base.eval_lens;
  cfg["evaluation"] = "bits per byte over non-overlapping windows (no sliding windows)";
  if (o.needle_samples > 0) {
    cfg["needles"] = {{"samples_per_cell", o.needle_samples},
                      {"training_mix", extend_needle_mix},
                      {"depths", needle_depths},
                      {"keys", needle_keys},
                      {"format", "'#' key '=' four distinct digits; asked as '#' key '='"}};
  }
  cfg["steps"] = base.steps;
  cfg["finetune_steps"] = o.finetune_steps;
  cfg["finetune_tokens_per_step"] = extend_tokens;
  cfg["finetune_lr"] = base.lr / 3;
  cfg["search_budget"] = o.search_budget;
  cfg["seeds"] = o.seeds;
  cfg["batch_size"] = base.batch_size;
  cfg["d_model"] = base.d_model;
  cfg["n_layers"] = base.n_layers;
  cfg["n_heads"] = base.n_heads;
  cfg["d_ff"] = base.d_ff;
  cfg["lr"] = base.lr;
  cfg["threads"] = num_threads();
  cfg["ranks"] = dist ? dist->size : 1;
  cfg["wall_seconds"] = wall;
  cfg["rope_configs"] = rope_configs(*this);
  // The per-pair schemes' parameters (posenc attend's flags and posenc.attention's keywords).
  J pairs = J::object();
  for (const named_scheme& n : extend_pair_schemes(L)) {
    J ps = J::object();
    for (const auto& [name, value] : n.params) ps[name] = static_cast<int64_t>(value);
    pairs[n.name] = ps;
  }
  cfg["rope_pair_schemes"] = pairs;
  return cfg;
}

}  // namespace

J run_extend_preset(const extend_preset_options& o, const task& t,
                    std::shared_ptr<const distribution> dist, const extend_progress& progress) {
  validate_options(o, t);
  extend_run r(o, t, std::move(dist), progress);
  r.L = o.train_len;
  r.target = extend_factor * r.L;
  r.base.schemes = {model::pos_scheme::rope};
  r.base.train_min = r.base.train_max = r.L;
  r.base.eval_lens = {r.L, 2 * r.L, 4 * r.L, 8 * r.L, 16 * r.L};
  r.base.sliding_eval = false;
  r.base.needle_samples = o.needle_samples;
  r.base.needle_mix = o.needle_samples > 0 ? extend_needle_mix : 0;
  const int64_t ne = static_cast<int64_t>(t.eval_text.size());
  r.scored = std::min(o.base.eval_chars, ne);
  r.search_end = std::min(ne, r.scored + extend_search_chars);
  if (r.search_end - r.scored < r.target + 1)
    fail_io("--preset extend: {} has {} bytes; the LongRoPE search needs {} after the {} scored",
            o.base.eval_file, ne, r.target + 1, r.scored);
  const auto t0 = std::chrono::steady_clock::now();
  r.train_at_L();
  r.search_longrope();
  r.extension_specs();
  r.ext_runs = r.run_phase(r.ext_specs, "zero-shot and fine-tuned extensions");
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  J doc;
  doc["preset"] = "extend";
  doc["task"] = "text";
  doc["config"] = r.config(wall);
  const J results = r.results();
  doc["results"] = results;
  doc["summary"] = summarize(results);
  if (o.needle_samples > 0) doc["retrieval"] = extend_retrieval_summary(results);
  doc["runs"] = r.runs();
  return doc;
}

}  // namespace posenc::lab
