// Static images of a page's figures through headless Chromium: see static_figures.hpp.
#include "static_figures.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"

namespace posenc::cli {

namespace fs = std::filesystem;

namespace {

// Runs after the page's own drawing script: once every chart has settled, asks each drawn
// view for its image and writes [{file, image} | {file, error}] for every chart of the page
// (a chart that could not be drawn has no view) into <pre id="posenc-render">, as
// percent-encoded JSON (so that --dump-dom's HTML escaping cannot change it). FORMAT and SCALE
// are replaced before the page is written.
constexpr const char* kRenderScript = R"JS(<script>
(function () {
  'use strict';
  var format = 'FORMAT', scale = SCALE;
  function done(out) {
    var pre = document.createElement('pre');
    pre.id = 'posenc-render';
    pre.textContent = encodeURIComponent(JSON.stringify(out));
    document.body.appendChild(pre);
  }
  var specs = document.querySelectorAll('script.vl-spec');
  Promise.resolve(window.posencFigures).then(function () {
    return Promise.all(Array.prototype.map.call(specs, function (s) {
      var file = s.getAttribute('data-file');
      var view = (window.posencViews || {})[file];
      if (!view) return {file: file, error: 'the chart could not be drawn'};
      var image = format === 'svg' ? view.toSVG() : view.toImageURL('png', scale);
      return image.then(function (img) { return {file: file, image: img}; },
                        function (e) { return {file: file, error: String(e)}; });
    }));
  }).then(done, function (e) { done([{file: '', error: String(e)}]); });
})();
</script>
)JS";

// One shell word.
std::string quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

// The text of `path` (posenc's read_file); "" when it cannot be read, for what is only shown
// in a message (Chromium's stderr).
std::string read_text_or_empty(const fs::path& path) {
  try {
    const auto bytes = read_file(path.string());
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  } catch (const io_error&) {
    return {};
  }
}

// The last `n` characters of s, for an error message.
std::string tail(const std::string& s, size_t n = 600) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// decodeURIComponent's inverse of encodeURIComponent (every byte that is not unreserved
// arrives as %XX); std::nullopt-like "" with ok = false on a malformed escape.
std::string percent_decode(const std::string& s, bool& ok) {
  std::string o;
  o.reserve(s.size());
  ok = true;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      o += s[i];
      continue;
    }
    const int hi = i + 2 < s.size() ? hex_digit(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex_digit(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      ok = false;
      return {};
    }
    o += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return o;
}

// RFC 4648 base64 (the payload of a data: URL), padding required; ok = false on anything else.
std::vector<std::byte> base64_decode(const std::string& s, bool& ok) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<std::byte> out;
  ok = s.size() % 4 == 0;
  for (size_t i = 0; ok && i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    const int pad = last ? (s[i + 3] == '=') + (s[i + 2] == '=') : 0;
    const int a = value(s[i]), b = value(s[i + 1]);
    const int c = pad >= 2 ? 0 : value(s[i + 2]), d = pad >= 1 ? 0 : value(s[i + 3]);
    if (a < 0 || b < 0 || c < 0 || d < 0) {
      ok = false;
      break;
    }
    const uint32_t v = (uint32_t(a) << 18) | (uint32_t(b) << 12) | (uint32_t(c) << 6) | uint32_t(d);
    out.push_back(std::byte(v >> 16));
    if (pad < 2) out.push_back(std::byte((v >> 8) & 0xff));
    if (pad < 1) out.push_back(std::byte(v & 0xff));
  }
  if (!ok) out.clear();
  return out;
}

// The image file of a chart whose specification is `spec_file` ("rope_freqs.vl.json").
std::string image_file(const std::string& spec_file, image_format format) {
  std::string stem = spec_file;
  for (const char* ext : {".vl.json", ".json"}) {
    const std::string e = ext;
    if (stem.size() > e.size() && stem.compare(stem.size() - e.size(), e.size(), e) == 0) {
      stem.resize(stem.size() - e.size());
      break;
    }
  }
  return stem + "." + image_format_name(format);
}

// Removes a temporary directory (a Chromium profile) at scope exit.
struct scoped_dir {
  fs::path path;
  ~scoped_dir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

}  // namespace

const char* image_format_name(image_format f) {
  return f == image_format::svg ? "svg" : "png";
}

std::string chromium_binary() {
  if (const char* e = std::getenv("POSENC_CHROMIUM"); e && *e) return e;
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

void require_chromium(const std::string& command) {
  const std::string c = chromium_binary();
  if (!c.empty() && ::access(c.c_str(), X_OK) == 0) return;
  fail_io(
      "{}: static figures are drawn by headless Chromium, and {}; install it with "
      "scripts/install-deps (Debian's chromium), or leave out --format svg|png to write only "
      "the page and its specifications",
      command,
      c.empty() ? "none was found (/usr/bin/chromium, /usr/bin/chromium-browser, "
                  "$POSENC_CHROMIUM)"
                : "$POSENC_CHROMIUM = " + c + " is not an executable file");
}

std::vector<std::string> render_figures(const std::string& dir, const std::string& page,
                                        image_format format) {
  require_chromium("rendering the figures");
  const std::string chromium = chromium_binary();
  const fs::path root = fs::absolute(fs::path(dir)).lexically_normal();
  const auto page_bytes = read_file((root / page).string());
  std::string html(reinterpret_cast<const char*>(page_bytes.data()), page_bytes.size());
  const size_t body_end = html.rfind("</body>");
  if (html.empty() || body_end == std::string::npos)
    fail_io("{}: not a page of posenc's (no </body>)", (root / page).string());
  std::string script = kRenderScript;
  script.replace(script.find("FORMAT"), 6, image_format_name(format));
  script.replace(script.find("SCALE"), 5, "2");
  html.insert(body_end, script);

  // The page's copy beside it (its scripts are vega/*.js relative to it), and Chromium's own
  // profile and stderr in a fresh temporary directory.
  const fs::path copy = root / fmt::format(".posenc-render-{}.html", ::getpid());
  std::error_code ec;
  char tmpl[] = "/tmp/posenc-chromium.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) fail_io("cannot create a temporary directory in /tmp");
  scoped_dir profile{tmpl};
  write_file_atomic(copy.string(), html);
  const fs::path err_file = profile.path / "stderr.txt";
  const std::string cmd =
      "timeout 300 " + quote(chromium) +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --disable-extensions --disable-dev-shm-usage --hide-scrollbars"
      " --allow-file-access-from-files --virtual-time-budget=60000 --user-data-dir=" +
      quote((profile.path / "profile").string()) + " --dump-dom " +
      quote("file://" + copy.string()) + " 2>" + quote(err_file.string());
  std::string dom;
  int status = -1;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) dom.append(buf, n);
    status = ::pclose(p);
  }
  fs::remove(copy, ec);

  const std::string mark = "<pre id=\"posenc-render\">";
  const size_t a = dom.find(mark);
  const size_t e = a == std::string::npos ? a : dom.find("</pre>", a);
  if (e == std::string::npos)
    fail_io("{}: headless Chromium ({}) gave no images (exit status {}): {}",
            (root / page).string(), chromium, status, tail(read_text_or_empty(err_file)));
  bool ok = false;
  const std::string text = percent_decode(dom.substr(a + mark.size(), e - a - mark.size()), ok);
  nlohmann::json items = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!ok || !items.is_array())
    fail_io("{}: the images Chromium returned could not be read", (root / page).string());

  // Every chart first, then the files: nothing is written when one chart failed.
  struct image {
    std::string path;
    std::vector<std::byte> bytes;
  };
  std::vector<image> images;
  for (const auto& it : items) {
    const std::string file = it.value("file", "");
    if (it.contains("error") || !it.contains("image") || !it["image"].is_string())
      fail_io("{}: figure {} could not be rendered to {}: {}", (root / page).string(), file,
              image_format_name(format), it.value("error", "no image"));
    const std::string& img = it["image"].get_ref<const std::string&>();
    image out{(fs::path(dir) / image_file(file, format)).string(), {}};
    if (format == image_format::svg) {
      if (img.rfind("<svg", 0) != 0)
        fail_io("{}: figure {}: Vega returned no SVG", (root / page).string(), file);
      // The page's one style rule for charts: no anti-aliased seams between heatmap cells.
      std::string svg = img;
      const size_t open_end = svg.find('>');
      svg.insert(open_end + 1, "<style>.mark-rect path{shape-rendering:crispEdges}</style>");
      const auto* b = reinterpret_cast<const std::byte*>(svg.data());
      out.bytes.assign(b, b + svg.size());
    } else {
      const std::string prefix = "data:image/png;base64,";
      bool good = img.rfind(prefix, 0) == 0;
      if (good) out.bytes = base64_decode(img.substr(prefix.size()), good);
      if (!good || out.bytes.size() < 8)
        fail_io("{}: figure {}: Vega returned no PNG", (root / page).string(), file);
    }
    images.push_back(std::move(out));
  }
  std::vector<std::string> written;
  try {
    for (const auto& im : images) {
      write_file_atomic(im.path, std::span<const std::byte>(im.bytes));
      written.push_back(im.path);
    }
  } catch (...) {
    for (const auto& w : written) fs::remove(w, ec);
    throw;
  }
  return written;
}

}  // namespace posenc::cli
