// SVG plotting toolkit: see svg.hpp for the contract.
#include "svg.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "posenc/core/error.hpp"

namespace posenc::svg {
namespace {

constexpr const char* kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";
constexpr double kTitleSize = 16, kLabelSize = 13, kTickSize = 11;
// Average advance of a sans-serif glyph, as a fraction of the font size; used to reserve
// room for labels (SVG has no text metrics before rendering).
constexpr double kCharWidth = 0.6;

double text_width(std::string_view s, double size) {
  return static_cast<double>(s.size()) * size * kCharWidth;
}

// Coordinates with two decimals: deterministic and well below a pixel. -0.00 is printed as 0.
std::string c(double v) {
  std::string s = fmt::format("{:.2f}", v);
  if (s == "-0.00") s = "0.00";
  return s;
}

struct rgb {
  double r, g, b;  // 0..255
};

rgb parse_hex(std::string_view h) {
  auto nib = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return 0;
  };
  if (h.size() != 7 || h[0] != '#') return {0, 0, 0};
  return {double(nib(h[1]) * 16 + nib(h[2])), double(nib(h[3]) * 16 + nib(h[4])),
          double(nib(h[5]) * 16 + nib(h[6]))};
}

std::string hex(rgb x) {
  auto q = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 255.0))); };
  return fmt::format("#{:02x}{:02x}{:02x}", q(x.r), q(x.g), q(x.b));
}

// Relative luminance (ITU-R BT.709 weights on the 0..1 channels, no gamma): enough to choose
// black or white text on a cell.
double luminance(std::string_view h) {
  rgb x = parse_hex(h);
  return (0.2126 * x.r + 0.7152 * x.g + 0.0722 * x.b) / 255.0;
}

// viridis sampled at t = 0, 1/8, ..., 1 (matplotlib's _viridis_data at those points).
constexpr std::array<const char*, 9> kViridis = {"#440154", "#472d7b", "#3b528b",
                                                 "#2c728e", "#21918c", "#28ae80",
                                                 "#5ec962", "#addc30", "#fde725"};
// ColorBrewer RdBu (9 classes), reversed so that negative is blue and positive red.
constexpr std::array<const char*, 9> kRdBu = {"#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7",
                                              "#fddbc7", "#f4a582", "#d6604d", "#b2182b"};

// Okabe and Ito (2008), "Color Universal Design", without black (kept for text) and with
// the yellow last (lowest contrast on white).
constexpr std::array<const char*, 8> kOkabeIto = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                  "#E69F00", "#56B4E9", "#000000", "#F0E442"};

void validate_size(const char* kind, const std::string& title, int w, int h) {
  if (w < 200 || h < 150 || w > 20000 || h > 20000)
    fail("{} '{}': width x height must be within 200..20000 x 150..20000 pixels, got {} x {}", kind,
         title, w, h);
}

// ---------------------------------------------------------------------------------------------
// Document assembly.

class doc {
 public:
  doc(int w, int h, const std::string& title) {
    s_ = fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{}\" height=\"{}\" "
        "viewBox=\"0 0 {} {}\" font-family=\"{}\">\n",
        w, h, w, h, kFont);
    if (!title.empty()) s_ += fmt::format("<title>{}</title>\n", escape(title));
    s_ +=
        fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", w, h);
  }
  void raw(std::string_view t) { s_ += t; }
  void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
            std::string_view extra = {}) {
    s_ += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"{}\"{}/>\n",
        c(x1), c(y1), c(x2), c(y2), stroke, width, extra);
  }
  void rect(double x, double y, double w, double h, std::string_view fill,
            std::string_view extra = {}) {
    s_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}/>\n", c(x),
                      c(y), c(w), c(h), fill, extra);
  }
  // `body` is already-escaped markup (plain text through escape(), or <tspan> pieces).
  void text_raw(double x, double y, std::string_view body, double size,
                std::string_view anchor = "middle", std::string_view extra = {}) {
    s_ += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{}\"{}>{}</text>\n",
                      c(x), c(y), size, anchor, extra, body);
  }
  void text(double x, double y, std::string_view t, double size, std::string_view anchor = "middle",
            std::string_view extra = {}) {
    text_raw(x, y, escape(t), size, anchor, extra);
  }
  std::string finish() {
    s_ += "</svg>\n";
    return std::move(s_);
  }

 private:
  std::string s_;
};

// Maps data values on one axis to pixels.
struct axis_map {
  double lo, hi;  // data range shown
  bool log;
  double p0, p1;  // pixels of lo and hi
  double operator()(double v) const {
    double t = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
                   : (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }
};

struct resolved_axis {
  double lo, hi;
  std::vector<double> ticks;
  double step;  // linear tick spacing (for labels); 0 on log axes
  bool log;
};

// Range and ticks of an axis. `extend`: widen an automatic range out to the enclosing ticks
// (y axes) or keep the data range and show only the ticks inside it (x axes).
resolved_axis resolve(const axis& a, double dmin, double dmax, bool extend, int target) {
  resolved_axis r{a.min.value_or(dmin), a.max.value_or(dmax), {}, 0, a.kind == scale::log};
  if (r.lo > r.hi) std::swap(r.lo, r.hi);
  if (r.log) {
    if (r.lo == r.hi) r.lo /= 10, r.hi *= 10;
    r.ticks = log_ticks(r.lo, r.hi);
  } else {
    if (r.lo == r.hi) {
      const double d = r.lo == 0 ? 0.5 : std::abs(r.lo) * 0.1;
      r.lo -= d, r.hi += d;
    }
    r.ticks = nice_ticks(r.lo, r.hi, target);
    r.step = r.ticks.size() > 1 ? r.ticks[1] - r.ticks[0] : 1;
  }
  if (extend) {
    if (!a.min) r.lo = std::min(r.lo, r.ticks.front());
    if (!a.max) r.hi = std::max(r.hi, r.ticks.back());
  }
  if (!a.ticks.empty()) r.ticks = a.ticks;
  const double eps = (r.log ? 1e-9 * r.lo : 1e-9 * (r.hi - r.lo));
  std::vector<double> in;
  for (double t : r.ticks)
    if (t >= r.lo - eps && t <= r.hi + eps) in.push_back(t);
  r.ticks = in;
  return r;
}

// Tick label markup (escaped): plain numbers, or 10<sup>k</sup> on log axes far from 1.
std::string tick_markup(double v, const resolved_axis& a) {
  if (a.log) {
    const double k = std::log10(v);
    const double kr = std::round(k);
    if (std::abs(k - kr) < 1e-9 && (kr < -4 || kr > 5))
      return fmt::format("10<tspan dy=\"-5\" font-size=\"{}\">{}</tspan>", kTickSize * 0.8,
                         static_cast<int>(kr));
    return escape(format_tick(v, v));
  }
  return escape(format_tick(v, a.step));
}

double tick_label_width(const resolved_axis& a) {
  double w = 0;
  for (double t : a.ticks)
    w = std::max(w, text_width(a.log ? format_tick(t, t) : format_tick(t, a.step), kTickSize));
  return w;
}

void draw_title(doc& d, int width, const std::string& title) {
  if (!title.empty())
    d.text(width / 2.0, 26, title, kTitleSize, "middle", " font-weight=\"bold\" fill=\"#222\"");
}

void draw_reference(doc& d, const reference_line& ref, const axis_map& ym, double x0, double x1) {
  const double y = ym(ref.value);
  d.line(x0, y, x1, y, "#444444", 1.5, " stroke-dasharray=\"7 4\"");
  if (!ref.label.empty()) d.text(x1 - 4, y - 5, ref.label, kTickSize, "end", " fill=\"#333\"");
}

// A y axis: grid lines, tick labels on the left, rotated label.
void draw_y_axis(doc& d, const resolved_axis& ya, const axis_map& ym, double x0, double x1,
                 const std::string& label, double label_x) {
  for (double t : ya.ticks) {
    const double y = ym(t);
    d.line(x0, y, x1, y, "#e3e3e3", 1);
    d.line(x0 - 5, y, x0, y, "#444444", 1);
    d.text_raw(x0 - 8, y + 4, tick_markup(t, ya), kTickSize, "end", " fill=\"#333\"");
  }
  if (!label.empty()) {
    const double yc = (ym.p0 + ym.p1) / 2;
    d.text(label_x, yc, label, kLabelSize, "middle",
           fmt::format(" transform=\"rotate(-90 {} {})\" fill=\"#222\"", c(label_x), c(yc)));
  }
}

void draw_legend_entry(doc& d, double x, double y, const std::string& name,
                       const std::string& color, bool dashed, bool markers, bool bar) {
  if (bar) {
    d.rect(x, y - 9, 18, 12, color);
  } else {
    d.line(x, y - 3, x + 22, y - 3, color, 2.5, dashed ? " stroke-dasharray=\"6 4\"" : "");
    if (markers)
      d.raw(fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{}\"/>\n", c(x + 11),
                        c(y - 3), color));
  }
  d.text(x + 28, y + 1, name, kLabelSize - 1, "start", " fill=\"#222\"");
}

bool finite(double v) {
  return std::isfinite(v);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n')
          o += ' ';
        else
          o += ch;
    }
  }
  return o;
}

std::string palette_color(size_t i) {
  return kOkabeIto[i % kOkabeIto.size()];
}

std::string colormap_color(colormap map, double t) {
  const auto& stops = map == colormap::sequential ? kViridis : kRdBu;
  if (!(t >= 0)) t = 0;  // also maps NaN to the low end
  if (t > 1) t = 1;
  const double u = t * (stops.size() - 1);
  const size_t i = std::min(static_cast<size_t>(u), stops.size() - 2);
  const double f = u - static_cast<double>(i);
  const rgb a = parse_hex(stops[i]), b = parse_hex(stops[i + 1]);
  return hex({a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)});
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!finite(lo) || !finite(hi) || lo > hi)
    fail("nice_ticks needs finite lo <= hi, got lo = {}, hi = {}", lo, hi);
  if (target < 2 || target > 100) fail("nice_ticks target must be in 2..100, got {}", target);
  if (lo == hi) {
    const double d = lo == 0 ? 0.5 : std::abs(lo) * 0.1;
    lo -= d, hi += d;
  }
  const double raw = (hi - lo) / (target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  }
  const double first = std::floor(lo / step + 1e-9);
  const double last = std::ceil(hi / step - 1e-9);
  std::vector<double> t;
  for (double k = first; k <= last + 0.5; k += 1) {
    double v = k * step;
    if (std::abs(v) < 1e-12 * step) v = 0;
    t.push_back(v);
  }
  return t;
}

std::vector<double> log_ticks(double lo, double hi) {
  if (!(lo > 0) || !finite(hi) || lo > hi)
    fail("log_ticks needs 0 < lo <= hi (finite), got lo = {}, hi = {}", lo, hi);
  int a = static_cast<int>(std::floor(std::log10(lo) + 1e-12));
  int b = static_cast<int>(std::ceil(std::log10(hi) - 1e-12));
  if (b <= a) b = a + 1;
  std::vector<double> t;
  if (b - a == 1) {
    const double p = std::pow(10.0, a);
    return {p, 2 * p, 5 * p, 10 * p};
  }
  const int stride = (b - a + 7) / 8;
  int k = a;
  for (; k < b; k += stride) t.push_back(std::pow(10.0, k));
  t.push_back(std::pow(10.0, k));
  return t;
}

std::string format_tick(double v, double step) {
  if (v == 0) return "0";
  if (!finite(v)) return v > 0 ? "inf" : (v < 0 ? "-inf" : "nan");
  const double av = std::abs(v);
  // Rounding noise next to a zero tick (e.g. 3 * 0.1 - 0.3) prints as 0.
  if (finite(step) && av < 1e-9 * std::abs(step)) return "0";
  if (av >= 1e6 || av < 1e-4) {
    std::string s = fmt::format("{:.3g}", v);
    return s;
  }
  step = std::abs(step);
  if (!(step > 0) || !finite(step)) step = av;
  int dec = 0;
  while (dec < 10) {
    const double s = step * std::pow(10.0, dec);
    if (std::abs(s - std::round(s)) <= 1e-6 * std::max(1.0, s)) break;
    ++dec;
  }
  std::string s = fmt::format("{:.{}f}", v, dec);
  if (s.find_first_not_of("-0.") == std::string::npos) return "0";
  return s;
}

// ---------------------------------------------------------------------------------------------
// Line plot.

std::string render(const line_plot& p) {
  validate_size("line plot", p.title, p.width, p.height);
  if (p.series.empty()) fail("line plot '{}' has no series", p.title);
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const auto& s : p.series) {
    if (!(s.marker_radius >= 0.5 && s.marker_radius <= 20))
      fail("line plot '{}': series '{}' has marker_radius {}; it must be in 0.5..20", p.title,
           s.name, s.marker_radius);
    if (s.x.size() != s.y.size())
      fail("line plot '{}': series '{}' has {} x values but {} y values; they must match", p.title,
           s.name, s.x.size(), s.y.size());
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double x = s.x[i], y = s.y[i];
      if (p.x.kind == scale::log && finite(x) && x <= 0)
        fail(
            "line plot '{}': series '{}' has x = {} at index {}; a log x axis needs positive "
            "values",
            p.title, s.name, x, i);
      if (p.y.kind == scale::log && finite(y) && y <= 0)
        fail(
            "line plot '{}': series '{}' has y = {} at index {}; a log y axis needs positive "
            "values",
            p.title, s.name, y, i);
      if (!finite(x) || !finite(y)) continue;
      xmin = std::min(xmin, x), xmax = std::max(xmax, x);
      ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  }
  if (!(xmin <= xmax)) fail("line plot '{}' has no point with finite x and y", p.title);
  if (p.ref) {
    if (!finite(p.ref->value) || (p.y.kind == scale::log && p.ref->value <= 0))
      fail("line plot '{}': reference line at y = {} cannot be drawn on this axis", p.title,
           p.ref->value);
    ymin = std::min(ymin, p.ref->value), ymax = std::max(ymax, p.ref->value);
  }
  for (const auto* a : {&p.x, &p.y})
    if (a->kind == scale::log && ((a->min && !(*a->min > 0)) || (a->max && !(*a->max > 0))))
      fail("line plot '{}': the log axis '{}' needs a positive fixed range", p.title, a->label);

  const resolved_axis xa = resolve(p.x, xmin, xmax, false, 8);
  const resolved_axis ya = resolve(p.y, ymin, ymax, true, 6);

  bool legend = false;
  double name_w = 0;
  for (const auto& s : p.series) {
    legend |= !s.name.empty();
    name_w = std::max(name_w, text_width(s.name, kLabelSize - 1));
  }
  const double left = 22 + (p.y.label.empty() ? 0 : 20) + tick_label_width(ya);
  const double right = legend ? 24 + 28 + name_w + 12 : 24;
  const double top = p.title.empty() ? 18 : 46;
  const double bottom = 34 + (p.x.label.empty() ? 0 : 22);
  const double x0 = left, x1 = p.width - right, y0 = top, y1 = p.height - bottom;
  if (x1 - x0 < 60 || y1 - y0 < 60)
    fail("line plot '{}': {} x {} pixels leave no room for the plot area; enlarge it", p.title,
         p.width, p.height);
  const axis_map xm{xa.lo, xa.hi, xa.log, x0, x1};
  const axis_map ym{ya.lo, ya.hi, ya.log, y1, y0};

  doc d(p.width, p.height, p.title);
  d.raw(fmt::format(
      "<defs><clipPath id=\"plot-area\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>"
      "</clipPath></defs>\n",
      c(x0), c(y0), c(x1 - x0), c(y1 - y0)));
  draw_title(d, p.width, p.title);
  draw_y_axis(d, ya, ym, x0, x1, p.y.label, 16);
  for (double t : xa.ticks) {
    const double x = xm(t);
    d.line(x, y0, x, y1, "#efefef", 1);
    d.line(x, y1, x, y1 + 5, "#444444", 1);
    d.text_raw(x, y1 + 19, tick_markup(t, xa), kTickSize, "middle", " fill=\"#333\"");
  }
  if (!p.x.label.empty())
    d.text((x0 + x1) / 2, p.height - 12, p.x.label, kLabelSize, "middle", " fill=\"#222\"");
  if (p.ref) draw_reference(d, *p.ref, ym, x0, x1);

  d.raw(
      "<g clip-path=\"url(#plot-area)\" fill=\"none\" stroke-linejoin=\"round\" "
      "stroke-linecap=\"round\">\n");
  for (size_t si = 0; si < p.series.size(); ++si) {
    const auto& s = p.series[si];
    const std::string color = s.color.empty() ? palette_color(si) : escape(s.color);
    const std::string dash = s.dashed ? " stroke-dasharray=\"7 5\"" : "";
    std::string pts;
    size_t npts = 0;
    auto flush = [&] {
      if (npts >= 2)
        d.raw(fmt::format("<polyline points=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", pts,
                          color, dash));
      pts.clear();
      npts = 0;
    };
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!finite(s.x[i]) || !finite(s.y[i])) {
        flush();
        continue;
      }
      if (npts) pts += ' ';
      pts += c(xm(s.x[i])) + "," + c(ym(s.y[i]));
      ++npts;
    }
    flush();
    if (s.markers) {
      for (size_t i = 0; i < s.x.size(); ++i) {
        if (!finite(s.x[i]) || !finite(s.y[i])) continue;
        d.raw(fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\" stroke=\"none\"/>\n",
                          c(xm(s.x[i])), c(ym(s.y[i])), s.marker_radius, color));
      }
    }
  }
  d.raw("</g>\n");
  d.rect(x0, y0, x1 - x0, y1 - y0, "none", " stroke=\"#444444\" stroke-width=\"1\"");

  if (legend) {
    double ly = y0 + 14;
    for (size_t si = 0; si < p.series.size(); ++si) {
      const auto& s = p.series[si];
      if (s.name.empty()) continue;
      draw_legend_entry(d, x1 + 16, ly, s.name,
                        s.color.empty() ? palette_color(si) : escape(s.color), s.dashed, s.markers,
                        false);
      ly += 20;
    }
  }
  return d.finish();
}

// ---------------------------------------------------------------------------------------------
// Heatmap.

namespace {

// Indices to label on an axis of n cells: a stride of 1, 2, 5 x 10^k giving at most `most`.
std::vector<int64_t> label_indices(int64_t n, int64_t most) {
  int64_t stride = 1;
  for (int64_t mag = 1;; mag *= 10) {
    bool found = false;
    for (int64_t m : {1, 2, 5}) {
      if ((n + m * mag - 1) / (m * mag) <= most) {
        stride = m * mag;
        found = true;
        break;
      }
    }
    if (found) break;
  }
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; i += stride) out.push_back(i);
  return out;
}

}  // namespace

std::string render(const heatmap& h) {
  validate_size("heatmap", h.title, h.width, h.height);
  if (h.rows <= 0 || h.cols <= 0 || h.rows > 4096 || h.cols > 4096)
    fail("heatmap '{}': rows and cols must be in 1..4096, got {} x {}", h.title, h.rows, h.cols);
  if (static_cast<int64_t>(h.values.size()) != h.rows * h.cols)
    fail("heatmap '{}': values has {} entries but rows x cols = {} x {} = {}", h.title,
         h.values.size(), h.rows, h.cols, h.rows * h.cols);
  if (!h.row_labels.empty() && static_cast<int64_t>(h.row_labels.size()) != h.rows)
    fail("heatmap '{}': row_labels has {} entries; it must be empty or have rows = {}", h.title,
         h.row_labels.size(), h.rows);
  if (!h.col_labels.empty() && static_cast<int64_t>(h.col_labels.size()) != h.cols)
    fail("heatmap '{}': col_labels has {} entries; it must be empty or have cols = {}", h.title,
         h.col_labels.size(), h.cols);
  if (h.annotate_digits < 0 || h.annotate_digits > 12)
    fail("heatmap '{}': annotate_digits must be in 0..12, got {}", h.title, h.annotate_digits);

  double lo = std::numeric_limits<double>::infinity(), hi = -lo, amax = 0;
  bool any_masked = false;
  for (double v : h.values) {
    if (!finite(v)) {
      any_masked = true;
      continue;
    }
    lo = std::min(lo, v), hi = std::max(hi, v), amax = std::max(amax, std::abs(v));
  }
  if (!(lo <= hi)) lo = 0, hi = 1;  // everything masked
  if (h.map == colormap::diverging) {
    lo = amax == 0 ? -1 : -amax;
    hi = amax == 0 ? 1 : amax;
  } else if (lo == hi) {
    const double dd = lo == 0 ? 0.5 : std::abs(lo) * 0.1;
    lo -= dd, hi += dd;
  }
  if (h.vmin) lo = *h.vmin;
  if (h.vmax) hi = *h.vmax;
  if (!finite(lo) || !finite(hi) || !(lo < hi))
    fail("heatmap '{}': colour range needs finite vmin < vmax, got {} .. {}", h.title, lo, hi);

  auto row_label = [&](int64_t i) {
    return h.row_labels.empty() ? std::to_string(i) : h.row_labels[i];
  };
  auto col_label = [&](int64_t j) {
    return h.col_labels.empty() ? std::to_string(j) : h.col_labels[j];
  };
  const auto rows_shown = label_indices(h.rows, 14);
  const auto cols_shown = label_indices(h.cols, 16);
  double row_w = 0;
  for (int64_t i : rows_shown) row_w = std::max(row_w, text_width(row_label(i), kTickSize));

  const std::vector<double> cticks = [&] {
    std::vector<double> t, in;
    t = nice_ticks(lo, hi, 6);
    const double eps = 1e-9 * (hi - lo);
    for (double v : t)
      if (v >= lo - eps && v <= hi + eps) in.push_back(v);
    return in;
  }();
  const double cstep = cticks.size() > 1 ? cticks[1] - cticks[0] : (hi - lo);
  double cbar_w = 0;
  for (double v : cticks) cbar_w = std::max(cbar_w, text_width(format_tick(v, cstep), kTickSize));

  const double left = 18 + (h.y_label.empty() ? 0 : 20) + row_w;
  const double right = 20 + 16 + 8 + cbar_w + (h.value_label.empty() ? 8 : 30);
  const double top = h.title.empty() ? 16 : 44;
  const double bottom = 32 + (h.x_label.empty() ? 0 : 22) + (any_masked ? 4 : 0);
  const double x0 = left, x1 = h.width - right, y0 = top, y1 = h.height - bottom;
  if (x1 - x0 < 40 || y1 - y0 < 40)
    fail("heatmap '{}': {} x {} pixels leave no room for the cells; enlarge it", h.title, h.width,
         h.height);
  const double cw = (x1 - x0) / static_cast<double>(h.cols);
  const double ch = (y1 - y0) / static_cast<double>(h.rows);

  doc d(h.width, h.height, h.title);
  d.raw(
      "<defs>\n<pattern id=\"masked\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect x=\"0\" y=\"0\" width=\"6\" height=\"6\" "
      "fill=\"#e0e0e0\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#8c8c8c\" "
      "stroke-width=\"2\"/></pattern>\n"
      "<linearGradient id=\"cbar\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n");
  for (int k = 0; k <= 16; ++k)
    d.raw(fmt::format("<stop offset=\"{}\" stop-color=\"{}\"/>\n", c(k / 16.0),
                      colormap_color(h.map, k / 16.0)));
  d.raw("</linearGradient>\n</defs>\n");
  draw_title(d, h.width, h.title);

  // Cells. Each is widened by a quarter pixel so anti-aliasing leaves no seams between them.
  d.raw("<g stroke=\"none\">\n");
  for (int64_t i = 0; i < h.rows; ++i) {
    for (int64_t j = 0; j < h.cols; ++j) {
      const double v = h.values[i * h.cols + j];
      const std::string fill =
          finite(v) ? colormap_color(h.map, (v - lo) / (hi - lo)) : "url(#masked)";
      const double ox = j + 1 < h.cols ? 0.25 : 0, oy = i + 1 < h.rows ? 0.25 : 0;
      d.rect(x0 + j * cw, y0 + i * ch, cw + ox, ch + oy, fill);
    }
  }
  d.raw("</g>\n");
  if (h.annotate) {
    const double size =
        std::clamp(std::min(ch * 0.4, cw / ((h.annotate_digits + 3) * kCharWidth)), 6.0, 14.0);
    for (int64_t i = 0; i < h.rows; ++i) {
      for (int64_t j = 0; j < h.cols; ++j) {
        const double v = h.values[i * h.cols + j];
        if (!finite(v)) continue;  // the hatch already says "masked"
        std::string t = fmt::format("{:.{}f}", v, h.annotate_digits);
        if (t.find_first_not_of("-0.") == std::string::npos && t[0] == '-') t.erase(0, 1);
        const bool dark = luminance(colormap_color(h.map, (v - lo) / (hi - lo))) < 0.45;
        d.text(x0 + (j + 0.5) * cw, y0 + (i + 0.5) * ch + size * 0.35, t, size, "middle",
               dark ? " fill=\"#ffffff\"" : " fill=\"#111111\"");
      }
    }
  }
  d.rect(x0, y0, x1 - x0, y1 - y0, "none", " stroke=\"#444444\" stroke-width=\"1\"");

  for (int64_t i : rows_shown) {
    const double y = y0 + (i + 0.5) * ch;
    d.line(x0 - 4, y, x0, y, "#444444", 1);
    d.text(x0 - 7, y + 4, row_label(i), kTickSize, "end", " fill=\"#333\"");
  }
  for (int64_t j : cols_shown) {
    const double x = x0 + (j + 0.5) * cw;
    d.line(x, y1, x, y1 + 4, "#444444", 1);
    d.text(x, y1 + 17, col_label(j), kTickSize, "middle", " fill=\"#333\"");
  }
  if (!h.x_label.empty())
    d.text((x0 + x1) / 2, h.height - 10 - (any_masked ? 2 : 0), h.x_label, kLabelSize, "middle",
           " fill=\"#222\"");
  if (!h.y_label.empty()) {
    const double yc = (y0 + y1) / 2;
    d.text(16, yc, h.y_label, kLabelSize, "middle",
           fmt::format(" transform=\"rotate(-90 16 {})\" fill=\"#222\"", c(yc)));
  }

  // Colour bar: low values at the bottom.
  const double bx = x1 + 20, bw = 16;
  d.rect(bx, y0, bw, y1 - y0, "url(#cbar)", " stroke=\"#444444\" stroke-width=\"1\"");
  for (double v : cticks) {
    const double y = y1 - (v - lo) / (hi - lo) * (y1 - y0);
    d.line(bx + bw, y, bx + bw + 4, y, "#444444", 1);
    d.text(bx + bw + 7, y + 4, format_tick(v, cstep), kTickSize, "start", " fill=\"#333\"");
  }
  if (!h.value_label.empty()) {
    const double lx = h.width - 12, yc = (y0 + y1) / 2;
    d.text(lx, yc, h.value_label, kLabelSize, "middle",
           fmt::format(" transform=\"rotate(-90 {} {})\" fill=\"#222\"", c(lx), c(yc)));
  }
  if (any_masked) {
    d.rect(bx, y1 + 10, 14, 14, "url(#masked)", " stroke=\"#444444\" stroke-width=\"0.8\"");
    d.text(bx + 19, y1 + 21, h.masked_label, kTickSize, "start", " fill=\"#333\"");
  }
  return d.finish();
}

// ---------------------------------------------------------------------------------------------
// Bar chart.

std::string render(const bar_chart& b) {
  validate_size("bar chart", b.title, b.width, b.height);
  if (b.categories.empty()) fail("bar chart '{}' has no categories", b.title);
  if (b.series.empty()) fail("bar chart '{}' has no series", b.title);
  const bool logy = b.y.kind == scale::log;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& s : b.series) {
    if (s.values.size() != b.categories.size())
      fail("bar chart '{}': series '{}' has {} values but there are {} categories", b.title, s.name,
           s.values.size(), b.categories.size());
    for (size_t i = 0; i < s.values.size(); ++i) {
      const double v = s.values[i];
      if (std::isinf(v))
        fail("bar chart '{}': series '{}' has an infinite value at category '{}'", b.title, s.name,
             b.categories[i]);
      if (!finite(v)) continue;
      if (logy && v <= 0)
        fail(
            "bar chart '{}': series '{}' has value {} at category '{}'; a log y axis needs "
            "positive values",
            b.title, s.name, v, b.categories[i]);
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  if (!(lo <= hi)) fail("bar chart '{}' has no finite value", b.title);
  if (b.ref) {
    if (!finite(b.ref->value) || (logy && b.ref->value <= 0))
      fail("bar chart '{}': reference line at y = {} cannot be drawn on this axis", b.title,
           b.ref->value);
    lo = std::min(lo, b.ref->value), hi = std::max(hi, b.ref->value);
  }
  if (!logy) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  const resolved_axis ya = resolve(b.y, lo, hi, true, 6);

  bool legend = false;
  double name_w = 0, cat_w = 0;
  for (const auto& s : b.series) {
    legend |= !s.name.empty();
    name_w = std::max(name_w, text_width(s.name, kLabelSize - 1));
  }
  for (const auto& cat : b.categories) cat_w = std::max(cat_w, text_width(cat, kTickSize));
  const double left = 22 + (b.y.label.empty() ? 0 : 20) + tick_label_width(ya);
  const double right = legend ? 24 + 28 + name_w + 12 : 24;
  const double plot_w = b.width - left - right;
  const double slot = plot_w / static_cast<double>(b.categories.size());
  const bool rotate = cat_w > slot - 6;
  const double top = b.title.empty() ? 18 : 46;
  const double bottom = (rotate ? 16 + cat_w * 0.5 + 12 : 34) + (b.x_label.empty() ? 0 : 22);
  const double x0 = left, x1 = b.width - right, y0 = top, y1 = b.height - bottom;
  if (x1 - x0 < 60 || y1 - y0 < 60)
    fail("bar chart '{}': {} x {} pixels leave no room for the bars; enlarge it", b.title, b.width,
         b.height);
  const axis_map ym{ya.lo, ya.hi, ya.log, y1, y0};
  const double base = logy ? ya.lo : std::clamp(0.0, ya.lo, ya.hi);

  doc d(b.width, b.height, b.title);
  draw_title(d, b.width, b.title);
  draw_y_axis(d, ya, ym, x0, x1, b.y.label, 16);

  const double group_w = slot * 0.8;
  const double bar_w = group_w / static_cast<double>(b.series.size());
  for (size_t ci = 0; ci < b.categories.size(); ++ci) {
    const double gx = x0 + ci * slot + (slot - group_w) / 2;
    for (size_t si = 0; si < b.series.size(); ++si) {
      const double v = b.series[si].values[ci];
      const double bx = gx + si * bar_w;
      if (!finite(v)) {
        d.text(bx + bar_w / 2, ym(base) - 4, "n/a", kTickSize - 2, "middle", " fill=\"#666\"");
        continue;
      }
      const double ya_px = ym(base), yv = ym(v);
      const std::string& col = b.series[si].color;
      d.rect(bx + 0.5, std::min(ya_px, yv), std::max(bar_w - 1, 0.5), std::abs(ya_px - yv),
             col.empty() ? palette_color(si) : escape(col));
      if (b.value_labels && bar_w >= 16) {
        const double size = std::min(kTickSize - 1, bar_w / (5 * kCharWidth));
        d.text(bx + bar_w / 2, v >= base ? yv - 4 : yv + size + 2, fmt::format("{:.3g}", v), size,
               "middle", " fill=\"#222\"");
      }
    }
    const double cx = x0 + (ci + 0.5) * slot;
    if (rotate) {
      d.text(cx, y1 + 14, b.categories[ci], kTickSize, "end",
             fmt::format(" transform=\"rotate(-30 {} {})\" fill=\"#333\"", c(cx), c(y1 + 14)));
    } else {
      d.text(cx, y1 + 18, b.categories[ci], kTickSize, "middle", " fill=\"#333\"");
    }
  }
  d.line(x0, ym(base), x1, ym(base), "#444444", 1);
  if (b.ref) draw_reference(d, *b.ref, ym, x0, x1);
  d.rect(x0, y0, x1 - x0, y1 - y0, "none", " stroke=\"#444444\" stroke-width=\"1\"");
  if (!b.x_label.empty())
    d.text((x0 + x1) / 2, b.height - 10, b.x_label, kLabelSize, "middle", " fill=\"#222\"");
  if (legend) {
    double ly = y0 + 14;
    for (size_t si = 0; si < b.series.size(); ++si) {
      const auto& s = b.series[si];
      if (s.name.empty()) continue;
      draw_legend_entry(d, x1 + 16, ly, s.name,
                        s.color.empty() ? palette_color(si) : escape(s.color), false, false, true);
      ly += 20;
    }
  }
  return d.finish();
}

}  // namespace posenc::svg
