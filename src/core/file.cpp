#include "posenc/core/file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "posenc/core/error.hpp"

namespace posenc {

void write_file_atomic(const std::string& path, std::span<const std::byte> bytes) {
  std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_io("cannot write {}: {}", path, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail_io("cannot write {}: {}", path, std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail_io("cannot write {}: {}", path, std::strerror(e));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail_io("cannot write {}: {}", path, std::strerror(e));
  }
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, std::as_bytes(std::span(text.data(), text.size())));
}

std::vector<std::byte> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail_io("cannot open {}: {}", path, std::strerror(errno));
  std::vector<std::byte> out;
  std::array<std::byte, 1 << 16> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0)
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  const bool err = std::ferror(f);
  const int e = errno;  // EISDIR for a directory, EIO, ...
  std::fclose(f);
  if (err) fail_io("cannot read {}: {}", path, std::strerror(e));
  return out;
}

uint32_t crc32(std::span<const std::byte> bytes, uint32_t crc) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (std::byte b : bytes) crc = table[(crc ^ static_cast<uint8_t>(b)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

}  // namespace posenc
