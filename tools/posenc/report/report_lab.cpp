// Report section "lab" (issue 6): accuracy (or loss) against evaluation length per scheme, the
// training curves and the results table of a lab run.
//
// Source of the numbers: DIR/lab/results.json when it exists (written by
// `posenc lab --quick --out DIR/lab` before `posenc report --out DIR`, as `make run` does);
// otherwise the section trains a very small comparison itself (4 schemes, 150 steps; 2
// schemes and 20 steps with --quick) and says so, since such a run is only a smoke test.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/lab/extend.hpp"
#include "posenc/lab/lab.hpp"
#include "posenc/lab/needle.hpp"
#include "report.hpp"

namespace posenc::cli {
namespace {

using J = nlohmann::json;

std::string fmt_metric(const J& v) {
  return v.is_null() ? std::string("n/a") : fmt::format("{:.3f}", v.get<double>());
}

report_section lab_section_json(report_context& ctx);

// A preset's results.json (`posenc lab --preset NAME`), checked to be that preset's.
J read_preset(const std::string& path, const char* preset) {
  const auto bytes = read_file(path);
  J j;
  try {
    j = J::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const std::exception& e) {
    fail_io("{} is not valid JSON: {}", path, e.what());
  }
  if (j.value("preset", "") != preset)
    fail_io("{} is not a --preset {} results file", path, preset);
  return j;
}

// The real-text table (`posenc lab --preset press --out DIR/press`), when DIR/press/results.json
// exists: bits per byte against evaluation length per variant, log-scale x, one figure per
// training length and window mode, the in-distribution point (L_eval = L) ringed.
void press_part(report_context& ctx, doc::document& body) {
  const std::string path = ctx.out_dir + "/press/results.json";
  if (!std::filesystem::exists(path)) {
    body.para(fmt::format(
        "Real text (Press et al. 2022's protocol on five Jane Austen novels, the sixth held "
        "out): run `scripts/get-corpus` and `posenc lab --preset press --out {}/press` (or "
        "`--quick`) before the report to add its figure here.",
        ctx.out_dir));
    return;
  }
  J j = read_preset(path, "press");
  const J& cfg = j["config"];
  body.heading("Real text: bits per byte against evaluation length", 3);
  body.para(fmt::format(
      "Byte-level language models ({} layers, width {}, {} heads, {} steps of batch {}, {} "
      "seed(s)) trained on five Jane Austen novels at length L and evaluated on the held-out "
      "sixth (`{}`, first {} bytes) at L, 2L, 4L, 8L and 16L (Press et al. 2022). Mean over "
      "seeds; the ringed point is the in-distribution length; a missing point means no defined "
      "position. Sliding windows advance by L and score only their last L tokens.",
      cfg["n_layers"].get<int64_t>(), cfg["d_model"].get<int64_t>(), cfg["n_heads"].get<int64_t>(),
      cfg["steps"].get<int64_t>(), cfg["batch_size"].get<int64_t>(), cfg["seeds"].get<int64_t>(),
      cfg["eval_file"].get<std::string>(), cfg["eval_chars"].get<int64_t>()));
  for (const auto& Lj : cfg["train_lens"]) {
    const int64_t L = Lj.get<int64_t>();
    for (const char* mode : {"bpc", "sliding_bpc"}) {
      vl::line_plot plot;
      plot.title = fmt::format("held-out novel, trained at L = {}: bits per byte ({} windows)", L,
                               std::string(mode) == "bpc" ? "non-overlapping" : "sliding");
      plot.x.label = "evaluation length (bytes)";
      plot.x.kind = vl::scale::log;
      const double l = static_cast<double>(L);
      plot.x.ticks = {l, 2 * l, 4 * l, 8 * l, 16 * l};
      plot.y.label = "bits per byte";
      vl::line_series ring;
      ring.name = "in distribution (L_eval = L)";
      ring.line = false;
      ring.markers = true;
      ring.marker_radius = 7;
      ring.color = "#000000";
      bool any = false;
      // Nine variants: colours of their own (the palette has eight and black is the ring's).
      static const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                     "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
      size_t vi = 0;
      for (const auto& v : cfg["variants"]) {
        vl::line_series ls;
        ls.name = v.get<std::string>();
        ls.markers = true;
        ls.color = colors[vi++ % 10];
        for (const auto& row : j["summary"]) {
          if (row["variant"] != v || row["train_len"] != L || row["measure"] != "eval") continue;
          const J& m = row[std::string(mode) + "_mean"];
          const double x = row["eval_len"].get<double>(), y = m.is_null() ? NAN : m.get<double>();
          ls.x.push_back(x);
          ls.y.push_back(y);
          any |= !m.is_null();
          if (row["eval_len"] == L && !m.is_null()) {
            ring.x.push_back(x);
            ring.y.push_back(y);
          }
        }
        plot.series.push_back(ls);
      }
      if (!any) continue;
      plot.series.insert(plot.series.begin(), ring);  // drawn first, under the variants' dots
      doc::document f;
      f.fig(doc::save_chart(ctx.out_dir, fmt::format("lab_press_L{}_{}.vl.json", L, mode),
                            fmt::format("bits per byte against length, L = {}, {}", L, mode),
                            vl::spec(plot)),
            fmt::format("Trained at L = {}; {} windows.", L,
                        std::string(mode) == "bpc" ? "non-overlapping" : "sliding"));
      body.append(f);
    }
  }
}

// A summary row's curve: "scheme/extension".
std::string extend_curve(const J& row) {
  return row["scheme"].get<std::string>() + "/" + row["extension"].get<std::string>();
}

// The extend preset's figures, one panel per family of methods, each with at most seven curves
// in seven colour families (no two of a panel alike). The families come from the
// rows, not from scheme names: RoPE under a frequency scaling (an extension() of its config),
// zero-shot or fine-tuned; RoPE under a per-pair scheme (any other extension); the models
// trained at L with another scheme. The trained RoPE model (rope/none, zero-shot) is each
// panel's reference where it is not a curve of its own.
enum class extend_family { scaling_zero_shot, scaling_finetuned, per_pair, trained };

bool is_frequency_scaling(const std::string& ext) {
  for (lab::extension e : lab::extensions())
    if (ext == lab::extension_name(e)) return true;
  return false;
}

bool in_family(const J& row, extend_family f) {
  const bool rope = row["scheme"] == "rope", ft = row["finetune_steps"].get<int64_t>() > 0;
  const std::string ext = row["extension"].get<std::string>();
  const bool trained = rope && ext == "none" && !ft;  // the reference of every panel
  switch (f) {
    case extend_family::scaling_zero_shot:
      return rope && !ft && is_frequency_scaling(ext);
    case extend_family::scaling_finetuned:
      return trained || (rope && ft);
    case extend_family::per_pair:
      return trained || (rope && !is_frequency_scaling(ext));
    case extend_family::trained:
      return trained || !rope;
  }
  return false;
}

const char* family_title(extend_family f) {
  switch (f) {
    case extend_family::scaling_zero_shot:
      return "frequency scalings, zero-shot";
    case extend_family::scaling_finetuned:
      return "frequency scalings, fine-tuned at the target";
    case extend_family::per_pair:
      return "per-pair schemes, zero-shot";
    case extend_family::trained:
      return "trained at L (no extension)";
  }
  return "";
}

const char* family_file(extend_family f) {
  switch (f) {
    case extend_family::scaling_zero_shot:
      return "scaling_zero_shot";
    case extend_family::scaling_finetuned:
      return "scaling_finetuned";
    case extend_family::per_pair:
      return "per_pair";
    case extend_family::trained:
      return "trained";
  }
  return "";
}

// A method's name in the legends, heat maps and retrieval table: the scheme, or for RoPE the
// extension with "+ fine-tune" after a fine-tune and "rope (trained)" for the trained model,
// the reference.
std::string curve_name(const J& row) {
  std::string scheme = row["scheme"].get<std::string>();
  const std::string ext = row["extension"].get<std::string>();
  const bool ft = row["finetune_steps"].get<int64_t>() > 0;
  if (scheme != "rope") return scheme;
  if (ext == "none" && !ft) return "rope (trained)";
  return ext + (ft ? " + fine-tune" : "");
}

// One family's panel of bits per byte against evaluation length (no series when the summary
// has none of its rows).
vl::line_plot extend_plot(const J& summary, int64_t L, extend_family f) {
  vl::line_plot plot;
  plot.title = family_title(f);
  plot.x.label = "evaluation length (bytes)";
  plot.x.kind = vl::scale::log;
  const double l = static_cast<double>(L);
  plot.x.ticks = {l, 2 * l, 4 * l, 8 * l, 16 * l};
  plot.y.label = "bits per byte";
  plot.width = 420;
  plot.height = 320;
  std::vector<std::string> order;
  std::map<std::string, vl::line_series> curves;
  for (const auto& row : summary) {
    if (!in_family(row, f)) continue;
    const std::string name = curve_name(row);
    if (!curves.count(name)) {
      order.push_back(name);
      curves[name].name = name;
      curves[name].markers = true;
      curves[name].dashed = name == "rope (trained)";
    }
    const J& m = row["bits_per_byte_mean"];
    curves[name].x.push_back(row["eval_len"].get<double>());
    curves[name].y.push_back(m.is_null() ? NAN : m.get<double>());
  }
  if (order.size() <= 1) return plot;  // the reference alone
  // Seven hues of seven colour families (blue, orange, green, red, purple, brown, pink: the
  // first of Tableau's ten), the reference black: no two curves of a panel alike.
  static const char* const hues[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                     "#9467bd", "#8c564b", "#e377c2"};
  size_t next = 0;
  for (const std::string& name : order) {
    vl::line_series& c = curves[name];
    c.color = c.dashed ? "#000000" : hues[next++ % std::size(hues)];
    plot.series.push_back(std::move(c));
  }
  return plot;
}

// The extend preset's table of means and spreads, one row per method.
doc::table extend_table(const J& summary, int64_t L) {
  doc::table table;
  table.head = {"scheme / extension"};
  for (int64_t m : {1, 2, 4, 8, 16}) table.head.push_back(fmt::format("{}", m * L));
  std::map<std::string, std::vector<std::string>> cells;
  std::vector<std::string> order;
  for (const auto& row : summary) {
    const std::string name =
        extend_curve(row) + (row["finetune_steps"].get<int64_t>() > 0 ? " + fine-tune" : "");
    if (!cells.count(name)) order.push_back(name);
    const J& m = row["bits_per_byte_mean"];
    const J& sd = row["bits_per_byte_std"];
    cells[name].push_back(fmt_metric(m) +
                          (sd.is_null() ? "" : " ± " + fmt::format("{:.2f}", sd.get<double>())));
  }
  for (const std::string& name : order) {
    std::vector<std::string> r = {name};
    r.insert(r.end(), cells[name].begin(), cells[name].end());
    table.rows.push_back(std::move(r));
  }
  return table;
}

// The retrieval cells (results.json's "retrieval" "cells") by method, in first-seen order: per
// method the mean exact match over (keys, depth) rows x evaluation lengths lens, NaN where
// missing, and its first cell (which says its family).
struct retrieval_grids {
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> grid;
  std::map<std::string, const J*> first;
};

constexpr int64_t retrieval_rows =
    static_cast<int64_t>(lab::needle_depths.size() * lab::needle_keys.size());

retrieval_grids gather_retrieval(const J& cells, const std::vector<int64_t>& lens) {
  retrieval_grids g;
  const auto& depths = lab::needle_depths;
  for (const auto& c : cells) {
    const std::string m = curve_name(c);
    if (!g.grid.count(m)) {
      g.order.push_back(m);
      g.grid[m].assign(static_cast<size_t>(retrieval_rows) * lens.size(), NAN);
      g.first[m] = &c;
    }
    const auto li = std::find(lens.begin(), lens.end(), c["eval_len"].get<int64_t>());
    const auto di = std::find(depths.begin(), depths.end(), c["depth"].get<double>());
    const auto ki =
        std::find(lab::needle_keys.begin(), lab::needle_keys.end(), c["keys"].get<int64_t>());
    if (li == lens.end() || di == depths.end() || ki == lab::needle_keys.end()) continue;
    const int64_t row = (ki - lab::needle_keys.begin()) * static_cast<int64_t>(depths.size()) +
                        (di - depths.begin());
    g.grid[m][static_cast<size_t>(row) * lens.size() + (li - lens.begin())] =
        c["accuracy_mean"].get<double>();
  }
  return g;
}

// Method m's depth x length heat map, saved to lab_needles_<m>.vl.json.
doc::figure retrieval_heatmap(report_context& ctx, const retrieval_grids& g, const std::string& m,
                              const std::vector<int64_t>& lens, extend_family f) {
  vl::heatmap h;
  h.title = m;
  h.x_label = "evaluation length (bytes)";
  h.y_label = "needles, depth";
  h.value_label = "exact match";
  h.rows = retrieval_rows;
  h.cols = static_cast<int64_t>(lens.size());
  h.values = g.grid.at(m);
  h.vmin = 0;
  h.vmax = 1;
  for (int64_t l : lens) h.col_labels.push_back(std::to_string(l));
  for (int64_t k : lab::needle_keys)
    for (double d : lab::needle_depths)
      h.row_labels.push_back(fmt::format("{} key{}, depth {}", k, k > 1 ? "s" : "", d));
  h.masked_label = "too short for its needles";
  h.width = 400;
  h.height = 300;
  std::string file = "lab_needles_" + m + ".vl.json";
  for (char& ch : file)
    if (ch == ' ' || ch == '+' || ch == '(' || ch == ')') ch = '_';
  return {{doc::save_chart(ctx.out_dir, file, "retrieval, " + m, vl::spec(h))},
          doc::markup(fmt::format("{} ({})", m, family_title(f)))};
}

// The table of effective context lengths (results.json's "retrieval" "effective_context").
doc::table retrieval_table(const J& effective_context) {
  doc::table t;
  t.head = {"method", "needles", "exact match at L", "effective context length (mean ± std)",
            "min-max over seeds"};
  for (const auto& e : effective_context) {
    std::vector<std::string> row = {
        curve_name(e), std::to_string(e["keys"].get<int64_t>()),
        fmt::format("{:.2f}", e["in_distribution_accuracy_mean"].get<double>())};
    if (e["reference_accuracy_mean"].get<double>() < lab::needle_retrieves) {
      row.insert(row.end(), {"n/a (does not retrieve at L)", ""});
    } else {
      const J& sd = e["effective_context_length_std"];
      row.push_back(fmt::format("{:.0f}", e["effective_context_length_mean"].get<double>()) +
                    (sd.is_null() ? "" : fmt::format(" ± {:.0f}", sd.get<double>())));
      row.push_back(fmt::format("{:.0f}-{:.0f}", e["effective_context_length_min"].get<double>(),
                                e["effective_context_length_max"].get<double>()));
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

// The retrieval grid of the extend preset (results.json's "retrieval", with the needle grid):
// per method a heat map of exact match over depth x evaluation length (rows: 1 key at each
// depth, then several keys), in figure rows by family as the bits-per-byte panels; then the
// table of effective context lengths.
void extend_retrieval(report_context& ctx, doc::document& body, const J& j, int64_t L) {
  const J& r = j["retrieval"];
  body.heading("Retrieval: needles in the held-out text", 4);
  body.para(fmt::format(
      "A key symbol and three digits hidden at a depth of the held-out novel, asked for again "
      "at the end (1 needle, or {} with one asked); exact match of the greedy answer, mean over "
      "seeds, {} samples a cell. The effective context length is the longest length up to "
      "which the mean over depths stays at or above 0.8 of the accuracy at L before any "
      "extension (the trained model's; RULER's measure, docs/lab.md), where that is at least "
      "0.5.",
      lab::needle_max_keys, j["config"]["needles"]["samples_per_cell"].get<int64_t>()));
  std::vector<int64_t> lens;
  for (int64_t m : {1, 2, 4, 8, 16}) lens.push_back(m * L);
  const retrieval_grids g = gather_retrieval(r["cells"], lens);
  for (extend_family f : {extend_family::scaling_zero_shot, extend_family::scaling_finetuned,
                          extend_family::per_pair, extend_family::trained}) {
    doc::figure_row fig_row;
    for (const std::string& m : g.order) {
      // Each method once, in its own family (the trained RoPE model with the trained ones).
      const bool reference = m == "rope (trained)";
      if (reference ? f != extend_family::trained : !in_family(*g.first.at(m), f)) continue;
      fig_row.figures.push_back(retrieval_heatmap(ctx, g, m, lens, f));
    }
    if (!fig_row.figures.empty()) body.add(fig_row);
  }
  body.add(retrieval_table(r["effective_context"]));
}

// The context-extension table (`posenc lab --preset extend --out DIR/extend`), when
// DIR/extend/results.json exists: bits per byte against evaluation length, one curve per
// method, zero-shot and fine-tuned side by side, ALiBi and Kerple (trained at L, no extension)
// on both, the in-distribution point ringed; then the table of means and spreads.
void extend_part(report_context& ctx, doc::document& body) {
  const std::string path = ctx.out_dir + "/extend/results.json";
  if (!std::filesystem::exists(path)) {
    body.para(fmt::format(
        "Context extension (a RoPE model trained at L run at up to 16L by position "
        "interpolation, dynamic NTK, YaRN, Llama 3's smoothing, a LongRoPE search and PoSE, "
        "zero-shot and fine-tuned): run `scripts/get-corpus` and `posenc lab --preset extend "
        "--out {}/extend` (or `--quick`) before the report to add its figures here.",
        ctx.out_dir));
    return;
  }
  J j = read_preset(path, "extend");
  const J& cfg = j["config"];
  const int64_t L = cfg["train_len"].get<int64_t>();
  body.heading("Extending a RoPE model's context", 3);
  body.para(fmt::format(
      "Byte-level models ({} layers, width {}, {} heads, {} steps, {} seed(s)) trained at L = {} "
      "on five Jane Austen novels; the RoPE models then run at up to 16L with each method's "
      "config for {} (zero-shot), and after {} fine-tuning steps of {} tokens (at {}; PoSE at L "
      "with positions skipped over [0, {})). Bits per byte on the first {} bytes of the held-out "
      "novel, non-overlapping windows, mean over seeds; the ringed points are in distribution. "
      "Each method's config is in `extend/results.json` as config.json keys "
      "(`posenc rope freqs --hf-config` reads them). Protocol and the papers' claims: "
      "`docs/lab.md`.",
      cfg["n_layers"].get<int64_t>(), cfg["d_model"].get<int64_t>(), cfg["n_heads"].get<int64_t>(),
      cfg["steps"].get<int64_t>(), cfg["seeds"].get<int64_t>(), L, cfg["target_len"].get<int64_t>(),
      cfg["finetune_steps"].get<int64_t>(), cfg["finetune_tokens_per_step"].get<int64_t>(),
      cfg["target_len"].get<int64_t>(), cfg["target_len"].get<int64_t>(),
      cfg["eval_chars"].get<int64_t>()));
  doc::figure_row row;
  for (extend_family f : {extend_family::scaling_zero_shot, extend_family::scaling_finetuned,
                          extend_family::per_pair, extend_family::trained}) {
    const vl::line_plot plot = extend_plot(j["summary"], L, f);
    if (plot.series.empty()) continue;
    const std::string file = fmt::format("lab_extend_{}.vl.json", family_file(f));
    row.figures.push_back(
        {{doc::save_chart(ctx.out_dir, file,
                          fmt::format("bits per byte against length, {}", family_title(f)),
                          vl::spec(plot))},
         doc::markup(fmt::format("{}; dashed: the trained RoPE model.", family_title(f)))});
  }
  if (!row.figures.empty()) body.add(row);
  body.add(extend_table(j["summary"], L));
  if (j.contains("retrieval")) extend_retrieval(ctx, body, j, L);
}

report_section lab_section(report_context& ctx) {
  try {
    return lab_section_json(ctx);
  } catch (const nlohmann::json::exception& e) {
    fail_io("{}/lab/results.json is not a posenc lab results file: {}", ctx.out_dir, e.what());
  }
}

// The lab results: DIR/lab/results.json when it exists, else a very small comparison trained
// now (and written there). *provenance says which, for the section's text.
J read_or_train_lab(report_context& ctx, std::string* provenance) {
  const std::string dir = ctx.out_dir + "/lab";
  const std::string path = dir + "/results.json";
  J j;
  if (std::filesystem::exists(path)) {
    const auto bytes = read_file(path);
    try {
      j = J::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    } catch (const std::exception& e) {
      fail_io("{} is not valid JSON: {}", path, e.what());
    }
    *provenance = fmt::format(
        "Numbers from `lab/results.json`, written by the lab run that preceded this report "
        "(`posenc lab --quick --out {}/lab` in `make run`).",
        ctx.out_dir);
    return j;
  }
  lab::lab_options o;
  o.task = lab::task_kind::passkey;
  o.schemes = ctx.quick ? std::vector<model::pos_scheme>{model::pos_scheme_from_name("alibi"),
                                                         model::pos_scheme::learned}
                        : std::vector<model::pos_scheme>{
                              model::pos_scheme::nope, model::pos_scheme::learned,
                              model::pos_scheme::rope, model::pos_scheme_from_name("alibi")};
  o.train_min = 16;
  o.train_max = 32;
  o.eval_lens = {32, 64, 128};
  o.steps = ctx.quick ? 20 : 150;
  o.batch_size = 16;
  o.d_model = 32;
  o.eval_samples = 16;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail_io("cannot create {}: {}", dir, ec.message());
  const auto r = lab::run_lab(o);
  const auto oj = lab::lab_results_json(r);
  write_file_atomic(path, oj.dump(2) + "\n");
  j = J::parse(oj.dump());
  *provenance = fmt::format(
      "No lab results were found in {}, so this section trained a very small comparison "
      "itself ({} steps, width 32, train lengths 16..32): a smoke test of the pipeline, too "
      "short for the schemes to separate. Run `posenc lab --quick --out {}/lab` first for the "
      "real comparison.",
      doc::lit(path), o.steps, ctx.out_dir);
  return j;
}

// What the section measures: loss for the language-model tasks, exact match for the others.
struct lab_metric {
  std::string task;
  bool lm = false;    // markov or text
  std::string key;    // "loss" or "exact_match" (summary rows have key + "_mean", "_std")
  std::string label;  // for axes and text
  int64_t train_max = 0;
};

// Accuracy (loss) against evaluation length, one line per scheme; a gap where a scheme has no
// defined position. Returns the schemes in the order of the summary.
std::vector<std::string> length_figure(report_context& ctx, J& j, const lab_metric& m,
                                       doc::document& figs) {
  const J& cfg = j["config"];
  vl::line_plot plot;
  plot.title = fmt::format("{}: {} against evaluation length (trained on {}..{})", m.task, m.label,
                           cfg["train_len"][0].get<int64_t>(), m.train_max);
  plot.x.label = "evaluation length (tokens)";
  plot.x.kind = vl::scale::log;
  plot.y.label = m.label;
  if (!m.lm) {
    plot.y.min = 0;
    plot.y.max = 1;
  }
  std::map<std::string, std::vector<std::pair<int64_t, J>>> by_scheme;
  std::vector<std::string> order;
  for (const auto& row : j["summary"]) {
    const std::string s = row["scheme"];
    if (!by_scheme.count(s)) order.push_back(s);
    by_scheme[s].push_back({row["eval_len"].get<int64_t>(), row[m.key + "_mean"]});
  }
  // Ticks at the evaluation lengths (a log axis would otherwise label round numbers between them).
  std::set<int64_t> lens;
  for (const auto& row : j["summary"]) lens.insert(row["eval_len"].get<int64_t>());
  for (int64_t len : lens) plot.x.ticks.push_back(static_cast<double>(len));
  bool any_finite = false;
  for (const auto& s : order) {
    auto pts = by_scheme[s];
    std::sort(pts.begin(), pts.end(), [](auto& a, auto& b) { return a.first < b.first; });
    vl::line_series ls;
    ls.name = s;
    ls.markers = true;
    int64_t prev = -1;
    for (const auto& [len, v] : pts) {
      if (len == prev) continue;  // in-distribution length also listed as an eval length
      prev = len;
      ls.x.push_back(static_cast<double>(len));
      ls.y.push_back(v.is_null() ? NAN : v.get<double>());
      any_finite |= !v.is_null();
    }
    plot.series.push_back(ls);
  }
  if (any_finite) {
    figs.fig(doc::save_chart(ctx.out_dir, "lab_length.vl.json", "lab: metric against length",
                             vl::spec(plot)),
             m.label +
                 " (mean over seeds) against evaluation length; a missing point means the "
                 "scheme has no defined position there (a learned table past its rows).");
  }
  return order;
}

// Training curves (seed 0 of each scheme).
void curves_figure(report_context& ctx, J& j, const std::string& task, doc::document& figs) {
  vl::line_plot curves;
  curves.title = fmt::format("{}: training loss (seed 0)", task);
  curves.x.label = "step";
  curves.y.label = "training loss (nats / scored token)";
  for (const auto& run : j["runs"]) {
    if (run["seed"] != 0 || run["curve"].empty()) continue;
    vl::line_series ls;
    ls.name = run["scheme"];
    for (const auto& p : run["curve"]) {
      ls.x.push_back(p[0].get<double>());
      ls.y.push_back(p[1].get<double>());
    }
    curves.series.push_back(ls);
  }
  if (!curves.series.empty()) {
    figs.fig(doc::save_chart(ctx.out_dir, "lab_curves.vl.json", "lab: training curves",
                             vl::spec(curves)),
             "Training loss per step (seed 0 of each scheme).");
  }
}

// Table: scheme x length, mean +- std over seeds.
doc::table results_table(J& j, const std::vector<std::string>& order, const lab_metric& m) {
  std::vector<int64_t> lens;
  for (const auto& row : j["summary"])
    if (row["measure"] == "eval") {
      const int64_t L = row["eval_len"];
      if (std::find(lens.begin(), lens.end(), L) == lens.end()) lens.push_back(L);
    }
  doc::table table;
  table.head = {"scheme", fmt::format("in distribution ({})", m.train_max)};
  for (int64_t L : lens) table.head.push_back(fmt::format("length {}", L));
  for (const auto& s : order) {
    std::string in = "n/a";
    std::vector<std::string> cells(lens.size(), "n/a");
    for (const auto& row : j["summary"]) {
      if (row["scheme"] != s) continue;
      std::string v = fmt_metric(row[m.key + "_mean"]);
      if (!row[m.key + "_std"].is_null()) v += " ± " + fmt_metric(row[m.key + "_std"]);
      if (row["measure"] == "in_distribution") {
        in = v;
      } else {
        const auto it = std::find(lens.begin(), lens.end(), row["eval_len"].get<int64_t>());
        cells[it - lens.begin()] = v;
      }
    }
    std::vector<std::string> r{s, in};
    r.insert(r.end(), cells.begin(), cells.end());
    table.rows.push_back(std::move(r));
  }
  return table;
}

report_section lab_section_json(report_context& ctx) {
  report_section sec{"lab", "The lab: trained models, in distribution and beyond", {}};
  std::string provenance;
  // Not const: a key the file lacks reads as null (operator[] adds it), as in every helper.
  J j = read_or_train_lab(ctx, &provenance);
  const J& cfg = j["config"];
  lab_metric m;
  m.task = j.value("task", "?");
  m.lm = m.task == "markov" || m.task == "text";
  m.key = m.lm ? "loss" : "exact_match";
  m.label = m.lm ? "loss (nats / token)" : "exact match";
  m.train_max = cfg["train_len"][1].get<int64_t>();

  doc::document figs;
  const std::vector<std::string> order = length_figure(ctx, j, m, figs);
  curves_figure(ctx, j, m.task, figs);
  doc::table table = results_table(j, order, m);

  double tps = 0;
  int nruns = 0;
  for (const auto& run : j["runs"])
    if (run["tokens_per_second"].get<double>() > 0) {
      tps += run["tokens_per_second"].get<double>();
      ++nruns;
    }
  sec.body.para(fmt::format(
      "Small decoder-only transformers ({} layers, width {}, {} heads) trained from scratch on "
      "the **{}** task at lengths {}..{} for {} steps ({} seed(s) per scheme), then evaluated "
      "at longer lengths. Every position scheme is the library's own implementation, and the "
      "training code (forward and backward of every op) is checked against finite differences "
      "(`posenc check --gradients`). The seeds' tension is what the table measures: a learned "
      "table has *no defined position* past its rows (n/a, never clamped), sinusoids, rotations "
      "and the biases inside attention (ALiBi, T5) are defined at every length, and the columns "
      "past the training length show which of them the trained models can still use. Metric: {} "
      "(mean ± sample std over seeds). {} Training speed: {:.0f} tokens/s per run (mean). "
      "Protocol and comparison with the published numbers: `docs/lab.md`.",
      cfg["n_layers"].get<int64_t>(), cfg["d_model"].get<int64_t>(), cfg["n_heads"].get<int64_t>(),
      doc::lit(m.task), cfg["train_len"][0].get<int64_t>(), m.train_max,
      cfg["steps"].get<int64_t>(), cfg["seeds"].get<int64_t>(), m.label, provenance,
      nruns ? tps / nruns : 0.0));
  sec.body.append(figs);
  sec.body.add(std::move(table));
  press_part(ctx, sec.body);
  extend_part(ctx, sec.body);
  return sec;
}

const bool registered_report_lab = register_report_section(70, "lab", lab_section);

}  // namespace
}  // namespace posenc::cli
