// posenc: position in transformer attention. The executable is thin: each command parses its
// arguments, calls the library and prints.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/machine.hpp"

namespace {

int run_posenc(int argc, char** argv) {
  CLI::App app{"posenc: every way order enters transformer attention, exact and fast"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "posenc 0.1.0");
  posenc::cli::setup_all(app);
  try {
    // POSENC_SIMD_TARGET=avx2 (or any target `posenc bench` names) runs every kernel and probe
    // on that target: how an AVX-512 host measures the AVX2 code paths.
    if (const char* t = std::getenv("POSENC_SIMD_TARGET")) posenc::limit_simd_target(t);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "posenc: error: %s\n", e.what());
    std::fprintf(stderr, "Run with --help for usage.\n");
    return 2;
  } catch (const posenc::cli::exit_with& e) {
    return e.code;
  } catch (const posenc::invalid_argument& e) {
    std::fprintf(stderr, "posenc: error: %s\n", e.what());
    return 2;
  } catch (const posenc::io_error& e) {
    std::fprintf(stderr, "posenc: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "posenc: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}

}  // namespace

// No exception leaves main: one from setting up the commands (outside run_posenc's try) or of a
// type run_posenc does not catch is an internal error, as one from a command is.
int main(int argc, char** argv) {
  try {
    return run_posenc(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "posenc: internal error: %s\n", e.what());
    return 3;
  } catch (...) {
    std::fprintf(stderr, "posenc: internal error: unknown exception\n");
    return 3;
  }
}
