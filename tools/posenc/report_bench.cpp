// Report section: measured speed as a fraction of this machine's limits. It renders the JSON
// that `posenc bench --out DIR/bench.json` wrote into the report directory (make run does
// this before the report); without that file it says how to produce it. Timings are never
// made up or taken from another machine.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <cmath>

#include "cli.hpp"
#include "posenc/core/file.hpp"
#include "report.hpp"
#include "svg.hpp"

namespace posenc::cli {
namespace {

report_section bench_section(report_context& ctx) {
  report_section s{"performance", "Performance against the machine's limits", "", ""};
  const std::string path = ctx.out_dir + "/bench.json";
  if (!std::filesystem::exists(path)) {
    s.html =
        "<p>No benchmark results in this report directory. Run <code>posenc bench --out "
        "DIR/bench.json</code> and then <code>posenc report --out DIR</code> (<code>make "
        "run</code> does both).</p>\n";
    s.markdown =
        "No benchmark results in this report directory. Run `posenc bench --out DIR/bench.json` "
        "and then `posenc report --out DIR` (`make run` does both).\n";
    return s;
  }
  nlohmann::json j;
  try {
    std::ifstream f(path);
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    s.html = "<p>Could not read bench.json: " + svg::escape(e.what()) + "</p>\n";
    s.markdown = "Could not read bench.json.\n";
    return s;
  }
  const auto& m = j["machine"];
  std::string machine = fmt::format(
      "{} SIMD, {} threads; STREAM copy {:.1f} GB/s ({:.1f} with 1 thread), triad {:.1f} GB/s; "
      "float32 FMA peak {:.1f} GFLOP/s ({:.1f} with 1 thread)",
      m.value("simd", "?"), m.value("threads", 0), m.value("bandwidth_gbps", 0.0),
      m.value("bandwidth_gbps_1thread", 0.0), m.value("triad_gbps", 0.0),
      m.value("peak_gflops", 0.0), m.value("peak_gflops_1thread", 0.0));
  svg::bar_chart chart;
  chart.title = "Achieved fraction of the machine limit (measured in the same run)";
  chart.y.label = "fraction of limit";
  chart.y.min = 0;
  chart.ref = svg::reference_line{1.0, "limit"};
  chart.width = 900;
  chart.height = 520;
  svg::bar_series bw{"memory-bound: of copy bandwidth", {}, ""};
  svg::bar_series pk{"compute-bound: of FMA peak", {}, ""};
  std::string rows_html, rows_md;
  for (const auto& c : j["cases"]) {
    std::string name = c.value("name", "");
    bool peak = c.value("limit", "bandwidth") == "peak";
    auto get = [&](const char* k) {
      return c.contains(k) && c[k].is_number() ? c[k].get<double>() : NAN;
    };
    double frac = peak ? get("fraction_of_peak") : get("fraction_of_bandwidth");
    chart.categories.push_back(name);
    bw.values.push_back(peak ? NAN : frac);
    pk.values.push_back(peak ? frac : NAN);
    std::string err = c.contains("error") ? c["error"].get<std::string>() : "";
    rows_html += fmt::format(
        "<tr><td style=\"text-align:left\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td></tr>\n",
        svg::escape(name), num(get("seconds_min") * 1e3), num(get("seconds_median") * 1e3),
        peak ? num(get("gflops")) + " GFLOP/s" : num(get("gbps")) + " GB/s",
        err.empty() ? num(frac) : "invalid: " + svg::escape(err), peak ? "FMA peak" : "bandwidth");
    rows_md += fmt::format("| {} | {} | {} | {} | {} |\n", name, num(get("seconds_min") * 1e3),
                           peak ? num(get("gflops")) + " GFLOP/s" : num(get("gbps")) + " GB/s",
                           err.empty() ? num(frac) : "invalid", peak ? "FMA peak" : "bandwidth");
  }
  chart.series = {bw, pk};
  bool any = false;
  for (double v : bw.values) any |= std::isfinite(v);
  for (double v : pk.values) any |= std::isfinite(v);
  s.html = "<p>Machine, measured by the same process: " + svg::escape(machine) +
           ". Reproduce with <code>posenc bench --out bench.json</code>.</p>\n";
  s.markdown = "Machine, measured by the same process: " + machine +
               ". Reproduce with `posenc bench --out bench.json`.\n\n";
  if (any && !chart.categories.empty()) {
    write_file_atomic(ctx.out_dir + "/bench_fractions.svg", svg::render(chart));
    s.html +=
        "<figure><img src=\"bench_fractions.svg\" alt=\"fraction of limit per case\">"
        "<figcaption>Each kernel's rate as a fraction of the limit that binds it: memory "
        "bandwidth (bytes read + written / STREAM copy rate) or FMA peak (counted flops / "
        "peak).</figcaption></figure>\n";
    s.markdown += "![fraction of limit per case](bench_fractions.svg)\n\n";
  }
  s.html +=
      "<table><tr><th>case</th><th>min ms</th><th>median ms</th><th>rate</th>"
      "<th>fraction</th><th>of</th></tr>\n" +
      rows_html + "</table>\n";
  s.markdown += "| case | min ms | rate | fraction | of |\n|---|---|---|---|---|\n" + rows_md;
  return s;
}

const bool registered = register_report_section(60, "performance", bench_section);

}  // namespace
}  // namespace posenc::cli
