// tools/posenc/report/vegalite.hpp: the report's figures as Vega-Lite specifications, for the
// report and the `posenc figure` command.
//
// Three chart kinds, each a plain struct filled by the caller and turned by spec() into a
// Vega-Lite (v6) specification, a JSON object with the data inline:
//
//   line_plot  several named series over a linear or log x/y axis, with a legend, optional
//              markers and dashes and an optional horizontal reference line.
//   heatmap    a (rows, cols) matrix as coloured cells (row 0 at the top) with a colour bar;
//              sequential (viridis) or diverging (blue-white-red) colours; NaN and infinite
//              cells are masked: drawn grey, with a legend entry of their own.
//   bar_chart  grouped bars (categories x series) with value labels and an optional reference
//              line (e.g. fraction of a machine limit, with a line at 1.0).
//
// The browser draws them: a page shows a spec with vega-embed (see report_doc.hpp, html_page),
// and write_scripts() writes the vega, vega-lite and vega-embed bundles (npm, pinned in
// tools/posenc/report/package-lock.json, built into the binary) beside the page, so it works
// offline. Every chart shows the values under the pointer (tooltips) and zooms: drag to pan and
// scroll to zoom the continuous axes (the value axis of a bar chart), double-click to reset.
//
// Data: a non-finite value becomes null in the spec: a gap in a line, "n/a" in place of a bar, a
// masked heatmap cell. Output is deterministic (same struct, same bytes). Series colours: Okabe
// and Ito (2008) palette (distinguishable under the common forms of colour-vision deficiency).
//
// Errors: a malformed chart (x and y of different lengths, a matrix whose size is not
// rows*cols, a non-positive value on a log axis, no finite data, two series of one name, ...)
// throws posenc::invalid_argument naming the chart, the series and the offending value.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace posenc::vl {

using json = nlohmann::ordered_json;

// The i-th series colour (Okabe-Ito order without black, cycling after 7): "#0072B2", ...
std::string palette_color(size_t i);

enum class scale { linear, log };

struct axis {
  std::string label;  // e.g. "position i"
  scale kind = scale::linear;
  std::optional<double> min, max;  // fixed range; default: from the data (y axes are extended
                                   // to nice round values, x axes are not)
  std::vector<double> ticks;       // explicit tick values; default: chosen by Vega-Lite
};

struct reference_line {
  double value = 0;   // y value of a horizontal dashed line
  std::string label;  // drawn at its right end, e.g. "machine limit"
};

struct line_series {
  std::string name;          // legend entry; distinct within a plot
  std::vector<double> x, y;  // same length; a NaN in x or y breaks the line (a gap)
  bool line = true;          // false: markers only (no line through the points)
  bool dashed = false;
  bool markers = false;      // a dot at every point
  double marker_radius = 3;  // pixels, 0.5..20 (earlier series are drawn first, underneath)
  std::string color;         // "#rrggbb"; empty: palette_color(index of the series)
};

struct line_plot {
  std::string title;
  axis x, y;
  std::vector<line_series> series;
  std::optional<reference_line> ref;
  int width = 760, height = 440;  // pixels of the whole figure, >= 200 x 150
};

enum class colormap {
  sequential,  // viridis: dark purple (low) -> yellow (high); perceptually uniform
  diverging,   // RdBu reversed: blue (negative) -> white (centre, 0) -> red (positive)
};

struct heatmap {
  std::string title;
  std::string x_label;      // columns, e.g. "channel j"
  std::string y_label;      // rows (row 0 at the top), e.g. "position i"
  std::string value_label;  // colour-bar caption, e.g. "PE(i, j)"
  int64_t rows = 0, cols = 0;
  std::vector<double> values;  // (rows, cols) row-major; NaN / +-inf = masked
  colormap map = colormap::sequential;
  // Colour range. Default: data min..max (sequential) or -m..m with m = max |value|
  // (diverging, so that 0 is white). Values outside are drawn in the end colours.
  std::optional<double> vmin, vmax;
  std::string masked_label = "masked";  // legend entry of the masked cells (shown if any)
  // Axis labels of the columns and rows in place of their indices (empty: the indices), one per
  // column / row, e.g. the evaluation lengths of a grid.
  std::vector<std::string> col_labels, row_labels;
  int width = 760, height = 520;
};

struct bar_series {
  std::string name;            // legend entry; distinct within a chart
  std::vector<double> values;  // one per category; NaN = no bar ("n/a")
  std::string color;           // empty: palette_color(index of the series)
};

struct bar_chart {
  std::string title;
  std::string x_label;
  axis y;  // linear: bars start at 0; log: bars start at the bottom of the axis
  std::vector<std::string> categories;
  std::vector<bar_series> series;
  std::optional<reference_line> ref;
  bool value_labels = true;  // print each bar's value above it
  int width = 760, height = 440;
};

// The Vega-Lite specification of the chart. Throws posenc::invalid_argument on a malformed
// chart (see the file comment).
json spec(const line_plot& p);
json spec(const heatmap& h);
json spec(const bar_chart& b);

// Whether the browser bundles were built into this binary. They are optional at build time
// (CMakeLists.txt): a build without the npm packages has everything but the figures.
bool scripts_bundled();

// Throws posenc::io_error, naming `command`, what is missing and the command that installs
// it, when the bundles were not built in; call it before writing anything.
void require_scripts(const std::string& command);

// Writes the browser bundles into dir/vega/ (created if missing): vega.min.js,
// vega-lite.min.js and vega-embed.min.js, and each package's licence (vega-LICENSE, ...).
// Throws posenc::io_error (also when the bundles were not built in).
void write_scripts(const std::string& dir);

// The versions of the bundled packages, e.g. "vega 6.4.0, vega-lite 6.4.3, vega-embed 7.3.0";
// "none" when they were not built in.
std::string bundled_versions();

}  // namespace posenc::vl
