// tools/posenc/report/static_figures.hpp: static images (SVG, PNG) of a page's figures, as the
// page draws them, for `posenc figure --format svg|png` and `posenc report --format svg|png`.
//
// The page that html_page wrote (report_doc.hpp) is opened in headless Chromium with a copy of
// it that runs one more script: once every chart is drawn (window.posencFigures settles), it
// asks Vega's own renderer of each chart's view for its image, view.toSVG() or
// view.toImageURL('png', scale), and writes them into the page, which `chromium --dump-dom`
// prints. So the static file is what the page shows: the same vega-embed options, the same
// fonts and text measurement, the same scripts (the page's vega/).
//
// Chromium: $POSENC_CHROMIUM, else /usr/bin/chromium or /usr/bin/chromium-browser (Debian's
// chromium, installed by scripts/install-deps). It runs with a fresh profile, no network
// (file:// pages, background services off) and a time limit.
#pragma once

#include <string>
#include <vector>

namespace posenc::cli {

enum class image_format { svg, png };

// "svg" or "png".
const char* image_format_name(image_format f);

// The Chromium binary renders use: $POSENC_CHROMIUM, else the first of /usr/bin/chromium and
// /usr/bin/chromium-browser that is executable; "" when there is none.
std::string chromium_binary();

// Throws posenc::io_error naming `command` and how to install Chromium when chromium_binary()
// is "", so that a command can check before it writes anything.
void require_chromium(const std::string& command);

// Renders every chart of dir/page (a page of html_page, with its scripts in dir/vega/) to
// dir/NAME.svg or dir/NAME.png, where NAME.vl.json is the chart's specification file (the
// page's data-file attribute). PNG at twice the chart's size (for print). Returns the paths
// written, in page order. Throws posenc::io_error when Chromium cannot run, a chart could not
// be drawn or an image could not be made, after removing the images this call wrote.
std::vector<std::string> render_figures(const std::string& dir, const std::string& page,
                                        image_format format);

}  // namespace posenc::cli
