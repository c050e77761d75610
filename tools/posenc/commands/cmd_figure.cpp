// posenc figure: the seeds' width-comparison figures as Vega-Lite charts.
//
//   posenc figure --width 20 --width 50 --out figures/
//   posenc figure --width 64 --positions 128 --base 500 --out figures/ --format json
//   posenc figure --width 20 --width 50 --out figures/ --format svg
//
// Writes each figure's Vega-Lite specification (NAME.vl.json, data inline) and index.html, a
// page that draws them all offline (with the bundled scripts in vega/, as the report does).
// --format svg or png also writes NAME.svg or NAME.png of every figure, drawn by the page in
// headless Chromium (static_figures.hpp): what the page shows, for a paper. --format text, csv
// or json (and svg, png: as text) only choose how the list of written files is printed.
//
// For each width d: a heatmap of the table PE(i, j) (positions x channels, colour bar) and the
// first channels' curves over position; plus one plot of the frequency omega_r against the
// channel fraction q = 2r/d for every given width (log y). The seed ("Position Encodings:
// Order Must Enter Somewhere", section "How does encoding depend on the dimensions?") makes the
// point these show: a wider vector samples the same log-frequency curve more densely, so a
// fixed channel index lands at a different fraction q and gets a different frequency.
//
// Every value plotted comes from the library (sinusoidal_table, sinusoidal_frequencies). All
// arguments are validated and all specifications built in memory before the first file is
// written; each file is written atomically, and files this run wrote are removed if a later one
// fails.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "report.hpp"
#include "report_doc.hpp"
#include "static_figures.hpp"
#include "vegalite.hpp"

namespace posenc::cli {

// Limits that keep a figure legible (one heatmap cell per position x channel).
inline constexpr int64_t figure_max_width = 512;
inline constexpr int64_t figure_max_positions = 1024;

namespace {

// Throws invalid_argument naming the option when sinusoidal_figures' arguments are out of range.
void sinusoidal_figure_validate(const std::vector<int64_t>& widths, int64_t positions,
                                double base) {
  if (widths.empty()) fail("--width is required (repeat it to compare widths, e.g. 20 and 50)");
  for (size_t a = 0; a < widths.size(); ++a) {
    const int64_t w = widths[a];
    if (w < 2 || w % 2 != 0 || w > figure_max_width)
      fail("--width must be even and in 2..{} for a figure, got {}", figure_max_width, w);
    for (size_t b = 0; b < a; ++b)
      if (widths[b] == w) fail("--width {} is given twice; give each width once", w);
  }
  if (positions < 2 || positions > figure_max_positions)
    fail("--positions must be in 2..{} for a figure, got {}", figure_max_positions, positions);
  if (!std::isfinite(base) || !(base > 1)) fail("--base must be finite and > 1, got {}", base);
}

// The heatmap of the table PE(i, j) ((positions, d) row-major) of width d.
sinusoidal_figure sinusoidal_table_figure(const std::vector<double>& table, int64_t d,
                                          int64_t positions, sin_layout layout) {
  vl::heatmap h;
  h.title = fmt::format("Sinusoidal table, width d = {} ({} layout)", d, sin_layout_name(layout));
  h.x_label = "channel j";
  h.y_label = "position i";
  h.value_label = "PE(i, j)";
  h.rows = positions;
  h.cols = d;
  h.values = table;
  h.map = vl::colormap::diverging;
  h.vmin = -1;
  h.vmax = 1;
  h.width = 760;
  h.height = std::clamp<int>(static_cast<int>(positions) * 7 + 110, 360, 760);
  return {fmt::format("sinusoidal_table_d{}.vl.json", d),
          fmt::format("sinusoidal table, width {}", d), vl::spec(h),
          fmt::format("Width {}: every row is one position's {}-channel vector; red is "
                      "+1, blue -1. Left-hand channels change from row to row (fast "
                      "pairs), right-hand channels hardly change over {} positions "
                      "(slow pairs).",
                      d, d, positions)};
}

// The first channel pairs' curves over position of width d (table as above, omega the pairs'
// frequencies).
sinusoidal_figure sinusoidal_curves_figure(const sinusoidal_params& p,
                                           const std::vector<double>& table,
                                           const std::vector<double>& omega, int64_t d,
                                           int64_t positions) {
  // The first two pairs' curves: sine solid, cosine dashed, one colour per pair. Pair 0 is
  // sin(i), cos(i) at every width; pair 1 (channels 2, 3) is where widths differ.
  vl::line_plot c;
  // At most 32 positions: the fastest pair (1 radian per position) then makes about five
  // turns, which still reads as a curve; more would be a blur of zig-zags.
  const int64_t curve_n = std::min<int64_t>(positions, 32);
  const int64_t pairs = std::min<int64_t>(d / 2, 2);
  c.title = fmt::format("First {} over positions 0-{}, width d = {}",
                        pairs == 1 ? "channel pair" : "two channel pairs", curve_n - 1, d);
  c.x.label = "position i";
  c.y.label = "PE(i, j)";
  c.y.min = -1.1;
  c.y.max = 1.1;
  c.y.ticks = {-1, -0.5, 0, 0.5, 1};
  for (int64_t r = 0; r < pairs; ++r) {
    for (const bool is_cos : {false, true}) {
      const int64_t j = sinusoidal_channel(p, r, is_cos);
      vl::line_series s;
      s.name = fmt::format("channel {} ({} ω = {:.4g})", j, is_cos ? "cos," : "sin,",
                           omega[static_cast<size_t>(r)]);
      s.dashed = is_cos;
      s.markers = true;
      s.color = vl::palette_color(static_cast<size_t>(r));
      for (int64_t i = 0; i < curve_n; ++i) {
        s.x.push_back(static_cast<double>(i));
        s.y.push_back(table[static_cast<size_t>(i * d + j)]);
      }
      c.series.push_back(std::move(s));
    }
  }
  return {fmt::format("sinusoidal_curves_d{}.vl.json", d),
          fmt::format("first channel pairs over position, width {}", d), vl::spec(c),
          fmt::format("Width {}: the first {} channel pairs at integer positions (dots; "
                      "solid = sine, dashed = cosine). "
                      "Sine and cosine of one pair share a colour and a frequency; "
                      "later pairs turn more slowly.",
                      d, pairs)};
}

}  // namespace

// See report.hpp.
std::vector<sinusoidal_figure> sinusoidal_figures(const std::vector<int64_t>& widths,
                                                  int64_t positions, double base, sin_layout layout,
                                                  sin_denominator denominator) {
  sinusoidal_figure_validate(widths, positions, base);

  std::vector<int64_t> pos(static_cast<size_t>(positions));
  for (int64_t i = 0; i < positions; ++i) pos[static_cast<size_t>(i)] = i;
  const std::string base_s = num(base);

  std::vector<sinusoidal_figure> out;
  vl::line_plot freq;
  freq.title = fmt::format("Frequency of each channel pair, base {}", base_s);
  freq.x.label = "channel fraction q = 2r/d";
  freq.y.label = "frequency ω_r (radians per position)";
  freq.y.kind = vl::scale::log;
  freq.x.min = 0;
  freq.x.max = 1;

  for (const int64_t d : widths) {
    sinusoidal_params p;
    p.width = d;
    p.base = base;
    p.layout = layout;
    p.denominator = denominator;
    sinusoidal_validate(p);
    const auto table = sinusoidal_table(p, pos);  // (positions, d) row-major
    const auto omega = sinusoidal_frequencies(p);

    out.push_back(sinusoidal_table_figure(table, d, positions, layout));

    out.push_back(sinusoidal_curves_figure(p, table, omega, d, positions));

    vl::line_series f;
    f.name = fmt::format("width d = {}", d);
    f.markers = true;
    // Earlier widths get larger dots (drawn first, underneath), so that where two widths share
    // a frequency both dots stay visible.
    f.marker_radius =
        std::min(3.0 + 2.0 * static_cast<double>(widths.size() - 1 - freq.series.size()), 9.0);
    for (size_t r = 0; r < omega.size(); ++r) {
      f.x.push_back(2.0 * static_cast<double>(r) / static_cast<double>(d));
      f.y.push_back(omega[r]);
    }
    freq.series.push_back(std::move(f));
  }
  out.push_back({"sinusoidal_frequencies.vl.json", "frequency against channel fraction",
                 vl::spec(freq),
                 "Frequency against the pair's place in the vector, q = 2r/d, on a log scale. "
                 "Every width samples the same straight line ω = base^(-q); a wider vector only "
                 "samples it more densely."});
  return out;
}

namespace {

struct figure_opts {
  std::string format = "text";  // text, csv, json (how files are listed), svg or png (images)
  std::vector<int64_t> widths;
  int64_t positions = 64;
  double base = 10000.0;
  std::string layout = "interleaved";
  std::string denominator = "width";
  std::string out;
};

void run_figure(const figure_opts& o) {
  if (o.out.empty()) fail("--out must name a directory, got an empty value");
  const bool svg = o.format == "svg", png = o.format == "png";
  const out_format listing = o.format == "json"  ? out_format::json
                             : o.format == "csv" ? out_format::csv
                                                 : out_format::text;
  const auto figs =
      sinusoidal_figures(o.widths, o.positions, o.base, parse_sin_layout(o.layout, "--layout"),
                         parse_sin_denominator(o.denominator, "--denominator"));
  // Every argument first, then what the build or the machine lacks, then the first file.
  if (std::filesystem::exists(o.out) && !std::filesystem::is_directory(o.out))
    fail_io("--out: cannot create directory {}: a file of that name exists", o.out);
  vl::require_scripts("posenc figure");
  if (svg || png) require_chromium("posenc figure --format " + o.format);
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec || !std::filesystem::is_directory(o.out))
    fail_io("--out: cannot create directory {}: {}", o.out,
            ec ? ec.message() : "a file of that name exists");
  // The specs, the page that shows them (in the order made, each with its caption) and the
  // scripts it loads.
  std::vector<std::string> written;
  const bool had_scripts = std::filesystem::exists(std::filesystem::path(o.out) / "vega");
  try {
    doc::document page;
    page.heading("posenc figure", 1);
    page.para(doc::plain(fmt::format(
        "Sinusoidal position tables, widths {}, positions 0..{}, base {} ({} layout). Drawn with "
        "Vega-Lite ({}): hover for values, drag and scroll to zoom, double-click to reset.",
        fmt::join(o.widths, ", "), o.positions - 1, num(o.base), o.layout,
        vl::bundled_versions())));
    for (const auto& f : figs) {
      const std::string path = (std::filesystem::path(o.out) / f.file).string();
      written.push_back(path);
      page.fig(doc::save_chart(o.out, f.file, f.alt, f.spec), doc::lit(f.caption));
    }
    vl::write_scripts(o.out);
    const std::string html = (std::filesystem::path(o.out) / "index.html").string();
    written.push_back(html);
    write_file_atomic(html, doc::html_page("posenc figure", doc::to_html(page)));
    if (svg || png)
      for (auto& img :
           render_figures(o.out, "index.html", svg ? image_format::svg : image_format::png))
        written.push_back(std::move(img));
  } catch (...) {
    for (const auto& w : written) std::filesystem::remove(w, ec);
    if (!had_scripts) std::filesystem::remove_all(std::filesystem::path(o.out) / "vega", ec);
    throw;
  }
  if (listing == out_format::json) {
    nlohmann::ordered_json j;
    j["files"] = written;
    std::printf("%s\n", j.dump(2).c_str());
  } else if (listing == out_format::csv) {
    std::printf("file\n");
    for (const auto& w : written) std::printf("%s\n", w.c_str());
  } else {
    for (const auto& w : written) std::printf("%s\n", w.c_str());
  }
  std::fflush(stdout);
}

const bool registered_cmd_figure = register_command(40, [](CLI::App& app) {
  auto o = std::make_shared<figure_opts>();
  auto* sub = app.add_subcommand(
      "figure",
      "Write Vega-Lite figures of the sinusoidal table for one or more widths to --out DIR "
      "(NAME.vl.json specifications and index.html, which draws them offline; with --format "
      "svg or png also NAME.svg or NAME.png, drawn by headless Chromium)");
  sub->add_option("--width", o->widths, "Embedding width d (repeat to compare, e.g. 20 and 50)")
      ->required();
  sub->add_option("--positions", o->positions, "Number of positions 0..N-1 (default 64)");
  sub->add_option("--base", o->base, "Frequency base (default 10000)");
  sub->add_option("--layout", o->layout, "interleaved (default) or halves");
  sub->add_option("--denominator", o->denominator, "width (default) or half-minus-one");
  sub->add_option("--out", o->out, "Output directory (created if missing)")->required();
  static const std::map<std::string, std::string> formats = {
      {"text", "text"}, {"csv", "csv"}, {"json", "json"}, {"svg", "svg"}, {"png", "png"}};
  sub->add_option("--format", o->format,
                  "text, csv or json: how the written files are listed (default text); svg or "
                  "png: also a static image of every figure (files listed as text)")
      ->transform(CLI::CheckedTransformer(formats, CLI::ignore_case))
      ->default_str("text");
  sub->callback([o] { run_figure(*o); });
});

}  // namespace
}  // namespace posenc::cli
