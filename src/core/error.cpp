#include "posenc/core/error.hpp"

#include <limits>
#include <utility>

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

namespace {

// The escaped form of the longest prefix of s whose escaped form has at most max_chars
// characters (a printable byte is one, an escaped byte four), and the bytes it covers.
std::pair<std::string, size_t> escaped_prefix(std::string_view s, size_t max_chars) {
  std::string out;
  size_t i = 0;
  for (; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    const bool plain = b >= 0x20 && b < 0x7f && b != '\\' && b != '\'';
    if (out.size() + (plain ? 1 : 4) > max_chars) break;
    if (plain)
      out += static_cast<char>(b);
    else
      out += fmt::format("\\x{:02x}", b);
  }
  return {out, i};
}

}  // namespace

std::string printable_bytes(std::string_view s, size_t max_bytes) {
  auto [out, n] = escaped_prefix(s, max_bytes);
  if (s.size() > n) out += fmt::format(" ... ({} more bytes)", s.size() - n);
  return out;
}

std::string quote_bytes(std::string_view s, size_t max_bytes) {
  const auto [body, n] = escaped_prefix(s, max_bytes);
  std::string out = "'" + body + "'";
  if (s.size() > n) out += fmt::format(" ... ({} more bytes)", s.size() - n);
  return out;
}

}  // namespace posenc
