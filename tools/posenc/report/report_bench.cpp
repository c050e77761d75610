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
#include "report.hpp"

namespace posenc::cli {
namespace {

report_section bench_section(report_context& ctx) {
  report_section s{"performance", "Performance against the machine's limits", {}};
  const std::string path = ctx.out_dir + "/bench.json";
  if (!std::filesystem::exists(path)) {
    s.body.para(
        "No benchmark results in this report directory. Run `posenc bench --out DIR/bench.json` "
        "and then `posenc report --out DIR` (`make run` does both).");
    return s;
  }
  nlohmann::json j;
  try {
    std::ifstream f(path);
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    s.body.para(doc::plain(std::string("Could not read bench.json: ") + e.what()));
    return s;
  }
  const auto& m = j["machine"];
  std::string machine = fmt::format(
      "{} SIMD, {} threads; STREAM copy {:.1f} GB/s ({:.1f} with 1 thread), read {:.1f} GB/s "
      "({:.1f} with 1 thread), triad {:.1f} GB/s; float32 FMA peak {:.1f} GFLOP/s ({:.1f} with 1 "
      "thread)",
      m.value("simd", "?"), m.value("threads", 0), m.value("bandwidth_gbps", 0.0),
      m.value("bandwidth_gbps_1thread", 0.0), m.value("read_gbps", 0.0),
      m.value("read_gbps_1thread", 0.0), m.value("triad_gbps", 0.0), m.value("peak_gflops", 0.0),
      m.value("peak_gflops_1thread", 0.0));
  if (m.contains("bf16_dot_peak_gflops") && m["bf16_dot_peak_gflops"].is_number())
    machine += fmt::format("; bfloat16 dot peak (vdpbf16ps) {:.1f} GFLOP/s",
                           m["bf16_dot_peak_gflops"].get<double>());
  vl::bar_chart chart;
  chart.title = "Achieved fraction of the machine limit (measured in the same run)";
  chart.y.label = "fraction of limit";
  chart.y.min = 0;
  chart.ref = vl::reference_line{1.0, "limit"};
  chart.width = 900;
  chart.height = 520;
  vl::bar_series bw{"memory-bound: of copy (read-only cases: read) bandwidth", {}, ""};
  vl::bar_series pk{
      "compute-bound: of FMA peak (bfloat16 products: of the vdpbf16ps peak)", {}, ""};
  doc::table table;
  table.head = {"case", "min ms", "median ms", "rate", "fraction", "of"};
  for (const auto& c : j["cases"]) {
    std::string name = c.value("name", "");
    const std::string limit = c.value("limit", "bandwidth");
    const bool bf16 = limit == "bf16 peak";  // bfloat16 products: vdpbf16ps's rate
    bool peak = limit == "peak" || bf16;
    bool read = c.contains("bandwidth_probe") && c["bandwidth_probe"] == "read";
    auto get = [&](const char* k) {
      return c.contains(k) && c[k].is_number() ? c[k].get<double>() : NAN;
    };
    double frac = peak ? get("fraction_of_peak") : get("fraction_of_bandwidth");
    chart.categories.push_back(name);
    bw.values.push_back(peak ? NAN : frac);
    pk.values.push_back(peak ? frac : NAN);
    std::string err = c.contains("error") ? c["error"].get<std::string>() : "";
    table.rows.push_back({name, num(get("seconds_min") * 1e3), num(get("seconds_median") * 1e3),
                          peak ? num(get("gflops")) + " GFLOP/s" : num(get("gbps")) + " GB/s",
                          err.empty() ? num(frac) : "invalid: " + err,
                          bf16   ? "bfloat16 dot peak"
                          : peak ? "FMA peak"
                          : read ? "read bandwidth"
                                 : "copy bandwidth"});
  }
  chart.series = {bw, pk};
  bool any = false;
  for (double v : bw.values) any |= std::isfinite(v);
  for (double v : pk.values) any |= std::isfinite(v);
  s.body.para("Machine, measured by the same process: " + doc::lit(machine) +
              ". Reproduce with `posenc bench --out bench.json`.");
  if (any && !chart.categories.empty()) {
    s.body.fig(doc::save_chart(ctx.out_dir, "bench_fractions.vl.json", "fraction of limit per case",
                               vl::spec(chart)),
               "Each kernel's rate as a fraction of the limit that binds it: memory bandwidth "
               "(bytes read + written / STREAM copy rate) or FMA peak (counted flops / peak).");
  }
  s.body.add(std::move(table));
  return s;
}

const bool registered_report_bench = register_report_section(60, "performance", bench_section);

}  // namespace
}  // namespace posenc::cli
