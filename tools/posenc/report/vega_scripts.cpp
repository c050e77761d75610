// The browser bundles of vega, vega-lite and vega-embed, built into the binary so that a report
// page works offline wherever the binary runs (vegalite.hpp, write_scripts).
//
// The files come from the npm packages in POSENC_VEGA_MODULES (tools/posenc/report/node_modules,
// installed by scripts/install-deps with `npm ci` from the pinned package-lock.json). CMake
// passes that directory and the packages' versions (POSENC_VEGA_VERSIONS), and recompiles this
// file when a bundle changes. The assembler's .incbin copies each file into .rodata unchanged:
// no generated source, no copy of third-party code in the repository.
//
// The packages are optional at build time: without them CMake says so once and defines
// POSENC_HAVE_VEGA=0, and `posenc report` and `posenc figure` say what is missing when run.
#include <filesystem>
#include <span>
#include <system_error>

#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "vegalite.hpp"

#if !defined(POSENC_HAVE_VEGA)
#error "POSENC_HAVE_VEGA is set by CMakeLists.txt"
#endif

#if POSENC_HAVE_VEGA

#if !defined(POSENC_VEGA_MODULES) || !defined(POSENC_VEGA_VERSIONS)
#error "POSENC_VEGA_MODULES and POSENC_VEGA_VERSIONS are set by CMakeLists.txt"
#endif

// Defines `name`_begin and `name`_end around the bytes of POSENC_VEGA_MODULES/`path`.
#define POSENC_EMBED(name, path)                                                              \
  asm(".section .rodata\n.balign 16\n.globl " #name "_begin\n.hidden " #name "_begin\n" #name \
      "_begin:\n.incbin \"" POSENC_VEGA_MODULES "/" path "\"\n.globl " #name                  \
      "_end\n.hidden " #name "_end\n" #name "_end:\n.previous\n");                            \
  extern "C" const char name##_begin[], name##_end[]

POSENC_EMBED(posenc_vega_js, "vega/build/vega.min.js");
POSENC_EMBED(posenc_vega_license, "vega/LICENSE");
POSENC_EMBED(posenc_vega_lite_js, "vega-lite/build/vega-lite.min.js");
POSENC_EMBED(posenc_vega_lite_license, "vega-lite/LICENSE");
POSENC_EMBED(posenc_vega_embed_js, "vega-embed/build/vega-embed.min.js");
POSENC_EMBED(posenc_vega_embed_license, "vega-embed/LICENSE");

namespace posenc::vl {

bool scripts_bundled() {
  return true;
}

void require_scripts(const std::string&) {}

void write_scripts(const std::string& dir) {
  struct file {
    const char* name;
    const char *begin, *end;
  };
  const file files[] = {
      {"vega.min.js", posenc_vega_js_begin, posenc_vega_js_end},
      {"vega-LICENSE", posenc_vega_license_begin, posenc_vega_license_end},
      {"vega-lite.min.js", posenc_vega_lite_js_begin, posenc_vega_lite_js_end},
      {"vega-lite-LICENSE", posenc_vega_lite_license_begin, posenc_vega_lite_license_end},
      {"vega-embed.min.js", posenc_vega_embed_js_begin, posenc_vega_embed_js_end},
      {"vega-embed-LICENSE", posenc_vega_embed_license_begin, posenc_vega_embed_license_end},
  };
  const std::filesystem::path d = std::filesystem::path(dir) / "vega";
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  if (ec || !std::filesystem::is_directory(d))
    fail_io("cannot create {}: {}", d.string(), ec ? ec.message() : "a file of that name exists");
  for (const auto& f : files)
    write_file_atomic((d / f.name).string(),
                      std::as_bytes(std::span(f.begin, static_cast<size_t>(f.end - f.begin))));
}

std::string bundled_versions() {
  return POSENC_VEGA_VERSIONS;
}

}  // namespace posenc::vl

#else  // POSENC_HAVE_VEGA == 0: built without the npm packages

namespace posenc::vl {

bool scripts_bundled() {
  return false;
}

void require_scripts(const std::string& command) {
  fail_io(
      "{}: this posenc was built without the figures' scripts (the npm packages vega, "
      "vega-lite and vega-embed were not in tools/posenc/report/node_modules at configure "
      "time); install them with scripts/install-deps, then configure and build again",
      command);
}

void write_scripts(const std::string&) {
  require_scripts("writing the figures' scripts");
}

std::string bundled_versions() {
  return "none";
}

}  // namespace posenc::vl

#endif  // POSENC_HAVE_VEGA
