// tools/posenc/report/report_doc.hpp: the report as a document, written once and rendered twice.
//
// A report section builds a `doc::document` (headings, paragraphs, tables, figures, lists,
// code blocks) instead of writing HTML and Markdown by hand; `to_html` and `to_markdown` are
// the only places that know either syntax, so the two outputs cannot drift apart and all
// escaping happens in one place.
//
// Inline text is written in a small markup, parsed by `markup()`:
//
//   `code`        code span (taken literally up to the next backtick)
//   *emphasis*    emphasis          **strong**   strong
//   \c            the character c literally (use `lit()` to escape a value from outside)
//
// Everything else is plain text; HTML special characters need no escaping by the caller.
// Table cells are plain text (no markup).
//
// Figures are charts (Vega-Lite specifications): the HTML page embeds each spec and the browser
// draws it; Markdown, which cannot run scripts, links to the spec's file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace posenc::cli::doc {

struct span {
  enum class kind { text, code, em, strong, link };
  kind k = kind::text;
  std::string text;
  std::string href;  // link only
};
using inline_text = std::vector<span>;

// Parses the markup above. Throws std::logic_error on an unterminated ` or * (a bug in the
// caller's literal, not a user error).
inline_text markup(std::string_view s);
// `s` escaped so that markup() reads it back as plain text (for values: paths, names).
std::string lit(std::string_view s);
// Plain text, no markup.
inline_text plain(std::string s);
inline_text link(std::string text, std::string href);
// The words of t without any formatting (for alt text).
std::string to_plain(const inline_text& t);

struct heading {
  int level = 3;  // 1 page title, 2 section, 3 within a section
  inline_text text;
  std::string anchor;  // id to link to ("#anchor"); empty for none
};
struct paragraph {
  inline_text text;
};
struct code_block {
  std::string text;  // shown verbatim
};
struct table {
  std::vector<std::string> head;               // plain-text header cells
  std::vector<std::vector<std::string>> rows;  // plain-text cells; a row may be shorter
  std::vector<std::string> row_class;          // optional HTML class per row ("pass", "fail")
};
// A figure drawn in the browser from its Vega-Lite specification (vegalite.hpp), which is also
// written to `file` beside the page (save_chart).
struct chart {
  std::string file;  // the spec's file, relative to the report directory: "rope_freqs.vl.json"
  std::string alt;   // what it shows, in words (the HTML aria-label, the Markdown link text)
  std::string spec;  // the specification as JSON text
};
// One or more charts sharing a caption.
struct figure {
  std::vector<chart> charts;
  inline_text caption;
};
// Figures shown side by side in HTML (wrapping on narrow screens), one after another in
// Markdown.
struct figure_row {
  std::vector<figure> figures;
};
struct list {
  std::vector<inline_text> items;
};

using block = std::variant<heading, paragraph, code_block, table, figure, figure_row, list>;

struct document {
  std::vector<block> blocks;

  // Paragraphs and headings take markup (see above).
  document& para(std::string_view text);
  document& para(inline_text text);
  document& heading(std::string_view text, int level = 3, std::string anchor = {});
  document& code(std::string text);
  document& add(block b);
  // One figure with a single chart.
  document& fig(chart c, std::string_view caption_markup);
  document& append(const document& other);
};

// Writes `spec` to dir/file (atomically) and returns the chart that shows it.
chart save_chart(const std::string& dir, std::string file, std::string alt,
                 const nlohmann::ordered_json& spec);

std::string html_escape(std::string_view s);  // & < > " ' and control characters
std::string to_html(const document& d);
std::string to_markdown(const document& d);

// A complete HTML page: `title`, the report's style sheet, the Vega scripts (vega/*.js beside the
// page, vegalite.hpp write_scripts) and `body_html`, then the script that draws every chart of
// the page with vega-embed (SVG renderer, tooltips, zoom). A chart that cannot be drawn shows
// why in its place and is reported with console.error.
std::string html_page(const std::string& title, const std::string& body_html);

}  // namespace posenc::cli::doc
