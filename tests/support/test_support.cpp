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

cli_result run_cli(const std::vector<std::string>& args) {
  temp_dir d;
  std::string cmd = quote(POSENC_BIN);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(d.file("out")) + " 2>" + quote(d.file("err")) + " </dev/null";
  int status = std::system(cmd.c_str());
  cli_result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(d.file("out"));
  r.err = read_text(d.file("err"));
  return r;
}

}  // namespace posenc::test
