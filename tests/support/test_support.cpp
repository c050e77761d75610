#include "test_support.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace posenc::test {

namespace {
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

temp_dir::temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "posenc_test_XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) std::abort();
  path = tmpl;
}
temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string posenc_bin() {
  return POSENC_BIN;
}

cli_result run_cli(const std::vector<std::string>& args) {
  // Only test files that mention run_cli or POSENC_BIN make the build wait for the CLI
  // (tests/CMakeLists.txt); say so instead of failing on a missing binary's exit code.
  if (!std::filesystem::exists(POSENC_BIN)) {
    std::fprintf(stderr,
                 "run_cli: %s does not exist; build the posenc target (a test file that "
                 "runs the CLI must mention run_cli so that its executable depends on it)\n",
                 POSENC_BIN);
    std::abort();
  }
  std::string cmd = quote(POSENC_BIN);
  for (const auto& a : args) cmd += " " + quote(a);
  return run_shell(cmd);
}

cli_result run_shell(const std::string& cmd) {
  temp_dir d;
  const std::string full =
      "{ " + cmd + "; } >" + quote(d.file("out")) + " 2>" + quote(d.file("err")) + " </dev/null";
  int status = std::system(full.c_str());
  cli_result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(d.file("out"));
  r.err = read_text(d.file("err"));
  return r;
}

}  // namespace posenc::test
