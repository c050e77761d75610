// Test helpers: run the built posenc binary, temporary directories.
#pragma once

#include <string>
#include <vector>

namespace posenc::test {

struct cli_result {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

// The path of the built posenc binary (POSENC_BIN).
std::string posenc_bin();

// Runs POSENC_BIN with the given arguments (each shell-quoted), capturing stdout and stderr.
cli_result run_cli(const std::vector<std::string>& args);

// Runs `cmd` with /bin/sh (the caller quotes), capturing stdout and stderr.
cli_result run_shell(const std::string& cmd);

// A fresh directory under the system temp dir, removed at destruction.
struct temp_dir {
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string path;
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string read_text(const std::string& path);

}  // namespace posenc::test
