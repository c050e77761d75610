// tools/posenc/report/report.hpp: how a family adds its section to `posenc report`.
//
// A section registers itself at static initialisation from its own file
// (tools/posenc/report/report_<family>.cpp):
//
//   static const bool registered = posenc::cli::register_report_section(
//       20, "sinusoidal", [](posenc::cli::report_context& ctx) { ... return section; });
//
// The section builds its figures as Vega-Lite specifications (vegalite.hpp), writes each into
// ctx.out_dir with doc::save_chart and returns a document (report_doc.hpp) that shows them;
// cmd_report.cpp renders every section's document to both index.html and index.md. Sections are
// rendered in `order`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "report_doc.hpp"
#include "vegalite.hpp"

namespace posenc::cli {

struct report_context {
  std::string out_dir;               // existing directory; figures go here
  std::vector<check_result> checks;  // results of every default check group, run once
  bool quick = false;                // smaller workloads (tests)
};

struct report_section {
  std::string id;      // anchor, e.g. "sinusoidal"
  std::string title;   // heading (plain text)
  doc::document body;  // everything below the heading
};

using report_fn = std::function<report_section(report_context&)>;
bool register_report_section(int order, std::string id, report_fn fn);

struct report_entry {
  int order;
  std::string id;
  report_fn fn;
};
const std::vector<report_entry>& report_sections();  // sorted by order

// The figures of `posenc figure` (cmd_figure.cpp), also shown by the "sinusoidal-width" section:
// for each width a heatmap of the table and the first channel pairs' curves, then the
// frequencies of every width. widths: distinct, each valid for the library and <= 512;
// positions in 2..1024. Throws invalid_argument naming the option (--width, --positions,
// --base) otherwise.
struct sinusoidal_figure {
  std::string file;  // the spec's file name (no directory), "sinusoidal_table_d20.vl.json"
  std::string alt;   // what it shows, in words
  vl::json spec;     // Vega-Lite specification
  std::string caption;
};
std::vector<sinusoidal_figure> sinusoidal_figures(const std::vector<int64_t>& widths,
                                                  int64_t positions, double base, sin_layout layout,
                                                  sin_denominator denominator);

}  // namespace posenc::cli
