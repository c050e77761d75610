// posenc/core/error.hpp: the two exception types every layer throws.
//
// Contract: a bad argument at a public API boundary throws posenc::invalid_argument whose
// message names the argument, the value received and the allowed values, e.g.
//   "width must be even and >= 2, got 7".
// A file that cannot be read, is truncated or corrupt throws posenc::io_error naming the path.
// The CLI prints either on stderr and exits with code 2. Kernels below the boundary assume
// validated input and never throw.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace posenc {

class invalid_argument : public std::invalid_argument {
 public:
  explicit invalid_argument(const std::string& what) : std::invalid_argument(what) {}
};

class io_error : public std::runtime_error {
 public:
  explicit io_error(const std::string& what) : std::runtime_error(what) {}
};

// Throws invalid_argument with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw invalid_argument(fmt::format(f, std::forward<Args>(args)...));
}

// Throws io_error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail_io(fmt::format_string<Args...> f, Args&&... args) {
  throw io_error(fmt::format(f, std::forward<Args>(args)...));
}

// A string from a file (a GGUF key, an architecture name, an .npy header) as a message may quote
// it: in single quotes, every byte outside printable ASCII (and the backslash and the quote) as
// \xNN, cut where the escaped text would pass max_bytes characters, with " ... (N more bytes)"
// for the N bytes left out: a message stays one printable line of bounded length whatever the
// file holds (a printable string of up to max_bytes bytes is quoted whole).
std::string quote_bytes(std::string_view s, size_t max_bytes = 64);
// The same without the quotes (a name inside a field label: kv[3] (general.name)).
std::string printable_bytes(std::string_view s, size_t max_bytes = 64);

// Memory cap for any single table or tensor the library allocates on a caller's behalf
// (default 8 GiB). Requests above it are rejected with invalid_argument before allocating.
inline constexpr unsigned long long max_alloc_bytes = 8ull << 30;

// Returns a*b*c*elem_bytes, or throws invalid_argument naming `what` if the product overflows
// or exceeds max_alloc_bytes.
unsigned long long checked_bytes(const char* what, unsigned long long a, unsigned long long b,
                                 unsigned long long c, unsigned long long elem_bytes);

}  // namespace posenc
