// tools/posenc/report/svg.hpp: a small, dependency-free SVG plotting toolkit for the report and the
// `posenc figure` command.
//
// Three chart kinds, each a plain struct filled by the caller and turned into a standalone SVG
// document (a std::string) by render():
//
//   line_plot  several named series over a linear or log x/y axis, legend, "nice" ticks,
//              optional markers and dashes, optional horizontal reference line.
//   heatmap    a (rows, cols) matrix as coloured cells with row/column ticks, a sequential
//              (viridis) or diverging (blue-white-red) colour map and a colour bar; NaN and
//              infinite cells are drawn with a grey hatch, distinct from every colour.
//   bar_chart  grouped bars (categories x series) with value labels and an optional reference
//              line (e.g. fraction of a machine limit, with a line at 1.0).
//
// Output is deterministic: the same struct always gives the same bytes (coordinates printed
// with two decimals, no time stamps, no random ids). Every piece of text is XML-escaped.
// Colours: Okabe and Ito (2008) palette for series (distinguishable under the common forms
// of colour-vision deficiency); viridis (van der Walt and Smith, 2015) for sequential data;
// ColorBrewer RdBu (Brewer, 2003) for diverging data.
//
// Errors: a malformed chart (x and y of different lengths, a matrix whose size is not
// rows*cols, a non-positive value on a log axis, no finite data, ...) throws
// posenc::invalid_argument naming the chart, the series and the offending value.
//
// Write the result with posenc::write_file_atomic(path, svg) so no partial file is left.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace posenc::svg {

// ---------------------------------------------------------------------------------------------
// Building blocks (exposed for tests and for custom figures).

// XML-escapes &, <, >, " and ' (safe in element text and in double-quoted attributes).
std::string escape(std::string_view s);

// The i-th series colour (Okabe-Ito order, cycling after 8): "#0072B2", "#D55E00", ...
std::string palette_color(size_t i);

enum class colormap {
  sequential,  // viridis: dark purple (low) -> yellow (high); perceptually uniform
  diverging,   // RdBu reversed: blue (negative) -> white (centre) -> red (positive)
};

// Colour of t in [0, 1] (clamped) under the map, as "#rrggbb"; linear interpolation between
// the map's stops.
std::string colormap_color(colormap map, double t);

// "Nice" linear ticks covering [lo, hi]: multiples of a step 1, 2, 2.5 or 5 times a power of
// ten, chosen so that about `target` ticks fall in the range. The first tick is <= lo and the
// last >= hi (the axis is extended to them). lo == hi is widened by 10% of |lo| each way (0.5
// at zero). Requires finite lo <= hi and 2 <= target <= 100.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// Ticks for a log axis covering [lo, hi], 0 < lo <= hi: the powers of ten from 10^floor(log10
// lo) to 10^ceil(log10 hi), thinned to every 2nd, 3rd, ... decade when there are more than
// about 8, and with 2x and 5x multiples added when the range spans a single decade.
std::vector<double> log_ticks(double lo, double hi);

// Tick label for v when ticks are `step` apart: enough decimals to tell neighbours apart, no
// "-0", scientific notation for very large or very small magnitudes.
std::string format_tick(double v, double step);

// ---------------------------------------------------------------------------------------------
// Charts.

enum class scale { linear, log };

struct axis {
  std::string label;  // e.g. "position i"
  scale kind = scale::linear;
  std::optional<double> min, max;  // fixed range; default: from the data (y axes are extended
                                   // out to the enclosing nice ticks, x axes are not)
  std::vector<double> ticks;       // explicit tick values; default: nice_ticks / log_ticks
};

struct reference_line {
  double value = 0;   // y value of a horizontal dashed line
  std::string label;  // drawn at its right end, e.g. "machine limit"
};

struct line_series {
  std::string name;          // legend entry (empty: not listed)
  std::vector<double> x, y;  // same length; a NaN in x or y breaks the line (a gap)
  bool dashed = false;
  bool markers = false;      // a dot at every point
  double marker_radius = 3;  // pixels, 0.5..20 (draw larger dots first to keep both visible)
  std::string color;         // "#rrggbb"; empty: palette_color(index of the series)
};

struct line_plot {
  std::string title;
  axis x, y;
  std::vector<line_series> series;
  std::optional<reference_line> ref;
  int width = 760, height = 440;  // pixels, >= 200 x 150
};

struct heatmap {
  std::string title;
  std::string x_label;      // columns, e.g. "channel j"
  std::string y_label;      // rows (row 0 at the top), e.g. "position i"
  std::string value_label;  // colour-bar caption, e.g. "PE(i, j)"
  int64_t rows = 0, cols = 0;
  std::vector<double> values;  // (rows, cols) row-major; NaN / +-inf = masked (hatched)
  colormap map = colormap::sequential;
  // Colour range. Default: data min..max (sequential) or -m..m with m = max |value|
  // (diverging, so that 0 is white). Values outside are clamped to the end colours.
  std::optional<double> vmin, vmax;
  // Tick labels; empty: the indices 0..rows-1 / 0..cols-1. When set, size must be rows / cols.
  // Only a readable subset (about 12 per axis, at a nice stride) is drawn.
  std::vector<std::string> row_labels, col_labels;
  bool annotate = false;                // print each finite value in its cell (small matrices only)
  int annotate_digits = 3;              // decimals of the annotations, 0..12
  std::string masked_label = "masked";  // legend text for hatched cells (shown if any)
  int width = 760, height = 520;
};

struct bar_series {
  std::string name;            // legend entry
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

// Render a complete, standalone SVG 1.1 document. Throw posenc::invalid_argument on a
// malformed chart (see the file comment).
std::string render(const line_plot& p);
std::string render(const heatmap& h);
std::string render(const bar_chart& b);

}  // namespace posenc::svg
