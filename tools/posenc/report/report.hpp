// tools/posenc/report/report.hpp: how a family adds its section to `posenc report`.
//
// A section registers itself at static initialisation from its own file
// (tools/posenc/report/report_<family>.cpp):
//
//   static const bool registered = posenc::cli::register_report_section(
//       20, "sinusoidal", [](posenc::cli::report_context& ctx) { ... return section; });
//
// The section writes its figures (SVG) into ctx.out_dir and returns a document (report_doc.hpp)
// that references them by file name; cmd_report.cpp renders every section's document to both
// index.html and index.md. Sections are rendered in `order`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "posenc/core/check.hpp"
#include "report_doc.hpp"

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

}  // namespace posenc::cli
