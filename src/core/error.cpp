#include "posenc/core/error.hpp"

#include <limits>

namespace posenc {

unsigned long long checked_bytes(const char* what, unsigned long long a, unsigned long long b,
                                 unsigned long long c, unsigned long long elem_bytes) {
  unsigned long long n = 1;
  for (unsigned long long f : {a, b, c, elem_bytes}) {
    if (f != 0 && n > std::numeric_limits<unsigned long long>::max() / f) {
      fail("{} is too large: {} x {} x {} elements of {} bytes overflows 64 bits", what, a, b, c,
           elem_bytes);
    }
    n *= f;
  }
  if (n > max_alloc_bytes) {
    fail("{} would need {} bytes ({} x {} x {} x {} bytes); the cap is {} bytes (8 GiB)", what, n,
         a, b, c, elem_bytes, max_alloc_bytes);
  }
  return n;
}

std::string printable_bytes(std::string_view s, size_t max_bytes) {
  std::string out;
  const size_t n = s.size() < max_bytes ? s.size() : max_bytes;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0x20 && b < 0x7f && b != '\\' && b != '\'')
      out += static_cast<char>(b);
    else
      out += fmt::format("\\x{:02x}", b);
  }
  if (s.size() > n) out += fmt::format(" ... ({} more bytes)", s.size() - n);
  return out;
}

std::string quote_bytes(std::string_view s, size_t max_bytes) {
  const size_t n = s.size() < max_bytes ? s.size() : max_bytes;
  std::string out = "'" + printable_bytes(s.substr(0, n), max_bytes) + "'";
  if (s.size() > n) out += fmt::format(" ... ({} more bytes)", s.size() - n);
  return out;
}

}  // namespace posenc
