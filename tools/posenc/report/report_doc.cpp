// The report's document model and its two renderers (see report_doc.hpp).
#include "report_doc.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "posenc/core/file.hpp"

namespace posenc::cli::doc {
namespace {

// Appends plain text from s[i] up to (not including) the delimiter `end`, resolving backslash
// escapes; returns the index just past the delimiter. Throws when the delimiter is missing.
size_t take_until(std::string_view s, size_t i, std::string_view end, std::string& out) {
  while (i < s.size()) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      out += s[i + 1];
      i += 2;
    } else if (s.substr(i, end.size()) == end) {
      return i + end.size();
    } else {
      out += s[i++];
    }
  }
  throw std::logic_error("report markup: missing closing " + std::string(end) + " in \"" +
                         std::string(s) + "\"");
}

bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
         (static_cast<unsigned char>(c) & 0x80) != 0;  // any byte of a UTF-8 sequence
}

// Plain text as Markdown: characters that would start emphasis, code, raw HTML or an escape
// are backslash-escaped; an underscore only where it could start or end emphasis (not inside
// a word such as max_distance); `|` as well inside table cells.
std::string md_escape(std::string_view s, bool in_table) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const char next = i + 1 < s.size() ? s[i + 1] : ' ';
    // '<' only where it could open raw HTML ("<b", "</", "<!"), not in "i < j".
    const bool tag = c == '<' && (std::isalpha(static_cast<unsigned char>(next)) != 0 ||
                                  next == '/' || next == '!' || next == '?');
    bool esc = c == '\\' || c == '`' || c == '*' || tag || (in_table && c == '|');
    if (c == '_') esc = !(i > 0 && word_char(s[i - 1]) && i + 1 < s.size() && word_char(s[i + 1]));
    if (esc) o += '\\';
    o += (in_table && c == '\n') ? ' ' : c;
  }
  return o;
}

std::string html_inline(const inline_text& t) {
  std::string o;
  for (const auto& sp : t) {
    switch (sp.k) {
      case span::kind::text:
        o += html_escape(sp.text);
        break;
      case span::kind::code:
        o += "<code>" + html_escape(sp.text) + "</code>";
        break;
      case span::kind::em:
        o += "<em>" + html_escape(sp.text) + "</em>";
        break;
      case span::kind::strong:
        o += "<strong>" + html_escape(sp.text) + "</strong>";
        break;
      case span::kind::link:
        o += "<a href=\"" + html_escape(sp.href) + "\">" + html_escape(sp.text) + "</a>";
        break;
    }
  }
  return o;
}

std::string md_inline(const inline_text& t) {
  std::string o;
  for (const auto& sp : t) {
    switch (sp.k) {
      case span::kind::text:
        o += md_escape(sp.text, false);
        break;
      case span::kind::code: {
        // A code span cannot contain its own delimiter; use a longer one when it does.
        const bool tick = sp.text.find('`') != std::string::npos;
        o += tick ? "`` " + sp.text + " ``" : "`" + sp.text + "`";
        break;
      }
      case span::kind::em:
        o += "*" + md_escape(sp.text, false) + "*";
        break;
      case span::kind::strong:
        o += "**" + md_escape(sp.text, false) + "**";
        break;
      case span::kind::link:
        o += "[" + md_escape(sp.text, false) + "](" + sp.href + ")";
        break;
    }
  }
  return o;
}

bool has_emphasis(const inline_text& t) {
  for (const auto& sp : t)
    if (sp.k == span::kind::em || sp.k == span::kind::strong) return true;
  return false;
}

// The HTML id of a chart, from its file name (unique within a page): "fig-" and the name up to
// its first dot, with anything but letters, digits, '-' and '_' as '-'.
std::string chart_id(const std::string& file) {
  std::string id = "fig-";
  for (char c : file.substr(0, file.find('.')))
    id += (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_') ? c : '-';
  return id;
}

struct html_renderer {
  std::string o;
  void operator()(const heading& h) {
    const std::string tag = "h" + std::to_string(h.level);
    o += "<" + tag;
    if (!h.anchor.empty()) o += " id=\"" + html_escape(h.anchor) + "\"";
    o += ">" + html_inline(h.text) + "</" + tag + ">\n";
  }
  void operator()(const paragraph& p) { o += "<p>" + html_inline(p.text) + "</p>\n"; }
  void operator()(const code_block& c) { o += "<pre>" + html_escape(c.text) + "</pre>\n"; }
  void operator()(const table& t) {
    o += "<table>\n<tr>";
    for (const auto& h : t.head) o += "<th>" + html_escape(h) + "</th>";
    o += "</tr>\n";
    for (size_t r = 0; r < t.rows.size(); ++r) {
      o += "<tr";
      if (r < t.row_class.size() && !t.row_class[r].empty())
        o += " class=\"" + html_escape(t.row_class[r]) + "\"";
      o += ">";
      for (const auto& c : t.rows[r]) o += "<td>" + html_escape(c) + "</td>";
      o += "</tr>\n";
    }
    o += "</table>\n";
  }
  // Each chart: the element vega-embed draws into, and its spec as JSON data for html_page's
  // script ('<' escaped so that no string in the spec can end the <script> element).
  void operator()(const figure& f) {
    o += "<figure>\n";
    for (const auto& c : f.charts) {
      const std::string id = chart_id(c.file);
      o += "<div class=\"vl-figure\" id=\"" + id + "\" role=\"img\" aria-label=\"" +
           html_escape(c.alt) + "\"></div>\n<script type=\"application/json\" class=\"vl-spec\" " +
           "data-figure=\"" + id + "\" data-file=\"" + html_escape(c.file) + "\">";
      for (char ch : c.spec) {
        if (ch == '<')
          o += "\\u003c";
        else
          o += ch;
      }
      o += "</script>\n";
    }
    if (!f.caption.empty()) o += "<figcaption>" + html_inline(f.caption) + "</figcaption>";
    o += "</figure>\n";
  }
  void operator()(const figure_row& r) {
    o += "<div class=\"figrow\">\n";
    for (const auto& f : r.figures) (*this)(f);
    o += "</div>\n";
  }
  void operator()(const list& l) {
    o += "<ul>\n";
    for (const auto& it : l.items) o += "<li>" + html_inline(it) + "</li>\n";
    o += "</ul>\n";
  }
};

struct md_renderer {
  std::string o;
  void operator()(const heading& h) {
    if (!h.anchor.empty()) o += "<a id=\"" + html_escape(h.anchor) + "\"></a>\n\n";
    o += std::string(static_cast<size_t>(std::max(1, h.level)), '#') + " " + md_inline(h.text) +
         "\n\n";
  }
  void operator()(const paragraph& p) { o += md_inline(p.text) + "\n\n"; }
  void operator()(const code_block& c) { o += "```\n" + c.text + "\n```\n\n"; }
  void operator()(const table& t) {
    const size_t n = t.head.size();
    auto row = [&](const std::vector<std::string>& cells) {
      o += "|";
      for (size_t i = 0; i < n; ++i)
        o += " " + (i < cells.size() ? md_escape(cells[i], true) : "") + " |";
      o += "\n";
    };
    row(t.head);
    o += "|";
    for (size_t i = 0; i < n; ++i) o += "---|";
    o += "\n";
    for (const auto& r : t.rows) row(r);
    o += "\n";
  }
  void operator()(const figure& f) {
    for (size_t i = 0; i < f.charts.size(); ++i)
      o += (i ? " " : "") + std::string("[Figure: ") + md_escape(f.charts[i].alt, false) + "](" +
           f.charts[i].file + ")";
    o += "\n\n";
    if (f.caption.empty()) return;
    // The caption in italics, unless it carries emphasis of its own (which would nest).
    o += has_emphasis(f.caption) ? md_inline(f.caption) : "*" + md_inline(f.caption) + "*";
    o += "\n\n";
  }
  void operator()(const figure_row& r) {
    for (const auto& f : r.figures) (*this)(f);
  }
  void operator()(const list& l) {
    for (const auto& it : l.items) o += "- " + md_inline(it) + "\n";
    o += "\n";
  }
};

}  // namespace

inline_text markup(std::string_view s) {
  inline_text out;
  std::string text;
  auto flush = [&] {
    if (!text.empty()) out.push_back({span::kind::text, std::move(text), {}});
    text.clear();
  };
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\\' && i + 1 < s.size()) {
      text += s[i + 1];
      i += 2;
    } else if (c == '`') {
      flush();
      const size_t e = s.find('`', i + 1);
      if (e == std::string_view::npos)
        throw std::logic_error("report markup: missing closing ` in \"" + std::string(s) + "\"");
      out.push_back({span::kind::code, std::string(s.substr(i + 1, e - i - 1)), {}});
      i = e + 1;
    } else if (c == '*') {
      flush();
      const bool strong = s.substr(i, 2) == "**";
      span sp{strong ? span::kind::strong : span::kind::em, {}, {}};
      i = take_until(s, i + (strong ? 2 : 1), strong ? "**" : "*", sp.text);
      out.push_back(std::move(sp));
    } else {
      text += s[i++];
    }
  }
  flush();
  return out;
}

std::string lit(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '`' || c == '*') o += '\\';
    o += c;
  }
  return o;
}

inline_text plain(std::string s) {
  return {span{span::kind::text, std::move(s), {}}};
}

inline_text link(std::string text, std::string href) {
  return {span{span::kind::link, std::move(text), std::move(href)}};
}

std::string to_plain(const inline_text& t) {
  std::string o;
  for (const auto& sp : t) o += sp.text;
  return o;
}

document& document::para(std::string_view text) {
  return add(paragraph{markup(text)});
}
document& document::para(inline_text text) {
  return add(paragraph{std::move(text)});
}
document& document::heading(std::string_view text, int level, std::string anchor) {
  return add(doc::heading{level, markup(text), std::move(anchor)});
}
document& document::code(std::string text) {
  return add(code_block{std::move(text)});
}
document& document::add(block b) {
  blocks.push_back(std::move(b));
  return *this;
}
document& document::fig(chart c, std::string_view caption_markup) {
  return add(figure{{std::move(c)}, markup(caption_markup)});
}
document& document::append(const document& other) {
  blocks.insert(blocks.end(), other.blocks.begin(), other.blocks.end());
  return *this;
}

chart save_chart(const std::string& dir, std::string file, std::string alt,
                 const nlohmann::ordered_json& spec) {
  std::string text = spec.dump();
  write_file_atomic(dir + "/" + file, text + "\n");
  return {std::move(file), std::move(alt), std::move(text)};
}

// & < > " ' escaped, control characters other than tab and newline as spaces: safe in HTML text
// and in double-quoted attributes.
std::string html_escape(std::string_view s) {
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
        o += (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n') ? ' ' : ch;
    }
  }
  return o;
}

std::string to_html(const document& d) {
  html_renderer r;
  for (const auto& b : d.blocks) std::visit(r, b);
  return std::move(r.o);
}

std::string to_markdown(const document& d) {
  md_renderer r;
  for (const auto& b : d.blocks) std::visit(r, b);
  return std::move(r.o);
}

std::string html_page(const std::string& title, const std::string& body_html) {
  // Draws every chart: each spec in its own promise, so that one that fails (bad JSON, a spec
  // Vega-Lite rejects, a missing library) shows its error in place and the others still draw.
  // window.posencFigures settles when all have finished; window.posencViews maps each drawn
  // chart's spec file to its Vega view (static_figures.hpp asks the views for their images).
  static const char* const draw = R"JS(<script>
(function () {
  'use strict';
  var options = {renderer: 'svg',
                 actions: {export: true, source: false, compiled: false, editor: false}};
  var specs = document.querySelectorAll('script.vl-spec');
  window.posencViews = {};
  window.posencFigures = Promise.all(Array.prototype.map.call(specs, function (s) {
    var id = s.getAttribute('data-figure');
    var el = document.getElementById(id);
    return Promise.resolve().then(function () {
      return vegaEmbed(el, JSON.parse(s.textContent), options);
    }).then(function (result) {
      window.posencViews[s.getAttribute('data-file')] = result.view;
    }).catch(function (e) {
      el.textContent = 'This figure could not be drawn: ' + e;
      console.error('figure ' + id + ' (' + s.getAttribute('data-file') + '): ' + e);
    });
  }));
})();
</script>
)JS";
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
         html_escape(title) +
         "</title>\n<style>\n"
         "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
         "line-height:1.5;color:#222}\n"
         "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}\n"
         "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\n"
         "td:first-child{text-align:left}\n"
         "th{background:#f3f3f3}tr.fail td{background:#fdd}\n"
         "code{background:#f4f4f4;padding:0 3px}\n"
         "figure{margin:1em 0}figcaption{font-size:0.9em;color:#555}\n"
         ".vl-figure{display:inline-block;max-width:100%;overflow-x:auto;vertical-align:top}\n"
         // No anti-aliased seams between adjacent heatmap cells.
         ".vl-figure .mark-rect path{shape-rendering:crispEdges}\n"
         ".figrow{display:flex;flex-wrap:wrap;gap:1em}.figrow figure{flex:0 1 auto;margin:0}\n"
         "</style>\n"
         "<script src=\"vega/vega.min.js\"></script>\n"
         "<script src=\"vega/vega-lite.min.js\"></script>\n"
         "<script src=\"vega/vega-embed.min.js\"></script>\n"
         "</head><body>\n" +
         body_html + draw + "</body></html>\n";
}

}  // namespace posenc::cli::doc
